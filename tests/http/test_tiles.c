/* HTTP tests of the tile services (IIIF, HiPS): tesserad in-process on port 0, demo data. */
#include <check.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "server/config.h"
#include "server/http.h"

/* The suites live in files of their own, one per service, each defining a function
 * that returns its TCase (iiif_tcase, hips_tcase) over the fixture and helpers below. */

#define UNUSED __attribute__((unused))
#define DEMO(name) TESSERA_DEMO_DIR "/" name

static tess_config cfg;
static tserver *srv;
static char base[64];

typedef struct resp {
    long status;
    char *body;
    size_t len;
    char content_type[128];
    char etag[64];
    char x_cache[16];
    char location[512];
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *cls)
{
    resp *r = cls;
    size_t add = sz * n;
    char *nb = realloc(r->body, r->len + add + 1);
    if (!nb)
        return 0;
    memcpy(nb + r->len, p, add);
    r->body = nb;
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
    size_t k = strlen(name);
    if (n > k + 1 && strncasecmp(line, name, k) == 0 && line[k] == ':') {
        const char *v = line + k + 1;
        while (*v == ' ')
            v++;
        size_t m = (size_t)(line + n - v);
        while (m > 0 && (v[m - 1] == '\r' || v[m - 1] == '\n'))
            m--;
        if (m >= outlen)
            m = outlen - 1;
        memcpy(out, v, m);
        out[m] = '\0';
    }
}

static size_t on_header(char *p, size_t sz, size_t n, void *cls)
{
    resp *r = cls;
    size_t len = sz * n;
    header_value(p, len, "Content-Type", r->content_type, sizeof(r->content_type));
    header_value(p, len, "ETag", r->etag, sizeof(r->etag));
    header_value(p, len, "X-Cache", r->x_cache, sizeof(r->x_cache));
    header_value(p, len, "Location", r->location, sizeof(r->location));
    return len;
}

/* GETs `path` from the server under test, with one extra request header (or NULL). */
static resp fetch(const char *path, const char *extra_header)
{
    resp r;
    memset(&r, 0, sizeof(r));
    char url[8192];
    snprintf(url, sizeof(url), "%s%s", base, path);
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    struct curl_slist *hl = NULL;
    if (extra_header) {
        hl = curl_slist_append(hl, extra_header);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    }
    CURLcode cc = curl_easy_perform(c);
    ck_assert_msg(cc == CURLE_OK, "GET %s: %s", path, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

static UNUSED resp get(const char *path)
{
    return fetch(path, NULL);
}

/* GET that must answer 200: fails the test with the body otherwise. */
static UNUSED resp get_ok(const char *path)
{
    resp r = fetch(path, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body ? r.body : "");
    return r;
}

static UNUSED void resp_free(resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* Asserts a problem+json reply with `status` naming `parameter` (NULL: any). */
static UNUSED void assert_problem(const char *path, resp *r, long status, const char *parameter)
{
    ck_assert_msg(r->status == status, "%s: status %ld, expected %ld: %s", path, r->status,
                  status, r->body ? r->body : "");
    ck_assert_str_eq(r->content_type, "application/problem+json");
    json_error_t je;
    json_t *o = json_loads(r->body, 0, &je);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), status);
    ck_assert(json_string_length(json_object_get(o, "detail")) > 0);
    if (parameter) {
        const char *p = json_string_value(json_object_get(o, "parameter"));
        ck_assert_msg(p && strcmp(p, parameter) == 0, "%s: parameter %s, expected %s", path,
                      p ? p : "(none)", parameter);
    }
    json_decref(o);
}

/* PNG width and height from the IHDR chunk. */
static UNUSED void png_size(const resp *r, long *w, long *h)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ck_assert_uint_ge(r->len, 24);
    ck_assert_int_eq(memcmp(r->body, sig, 8), 0);
    ck_assert_int_eq(memcmp(r->body + 12, "IHDR", 4), 0);
    const unsigned char *p = (const unsigned char *)r->body + 16;
    *w = (long)p[0] << 24 | (long)p[1] << 16 | (long)p[2] << 8 | p[3];
    *h = (long)p[4] << 24 | (long)p[5] << 16 | (long)p[6] << 8 | p[7];
}

/* Decodes a PNG body to 8-bit RGBA (malloc'd, row 0 at the top) with libpng. */
static UNUSED uint8_t *png_decode(const resp *r, long *w, long *h)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    ck_assert_msg(png_image_begin_read_from_memory(&im, r->body, r->len), "not a PNG: %s",
                  im.message);
    im.format = PNG_FORMAT_RGBA;
    uint8_t *px = malloc(PNG_IMAGE_SIZE(im));
    ck_assert_ptr_nonnull(px);
    ck_assert_msg(png_image_finish_read(&im, NULL, px, 0, NULL), "bad PNG: %s", im.message);
    *w = (long)im.width;
    *h = (long)im.height;
    return px;
}

/* Decodes a JPEG body to 8-bit RGB (malloc'd, row 0 at the top) with libjpeg. */
static UNUSED uint8_t *jpeg_decode(const resp *r, long *w, long *h)
{
    static const unsigned char soi[3] = {0xFF, 0xD8, 0xFF};
    ck_assert_uint_ge(r->len, 3);
    ck_assert_int_eq(memcmp(r->body, soi, 3), 0);
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr em;
    d.err = jpeg_std_error(&em);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, (const unsigned char *)r->body, (unsigned long)r->len);
    ck_assert_int_eq(jpeg_read_header(&d, TRUE), JPEG_HEADER_OK);
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    ck_assert_int_eq(d.output_components, 3);
    *w = (long)d.output_width;
    *h = (long)d.output_height;
    uint8_t *px = malloc((size_t)*w * (size_t)*h * 3);
    ck_assert_ptr_nonnull(px);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = px + (size_t)d.output_scanline * (size_t)*w * 3;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return px;
}

/* Reads plane z (0-based) of a FITS file into a malloc'd array of doubles, row 0 =
 * FITS row 1 (cfitsio's own read, independent of imageio). */
static UNUSED double *fits_plane(const char *path, long z, long *nx, long *ny)
{
    fitsfile *f = NULL;
    int st = 0, anynul;
    fits_open_diskfile(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s", path);
    long naxes[3] = {1, 1, 1};
    fits_get_img_size(f, 3, naxes, &st);
    long fp[3] = {1, 1, z + 1}, lp[3] = {naxes[0], naxes[1], z + 1}, inc[3] = {1, 1, 1};
    double *v = malloc((size_t)naxes[0] * (size_t)naxes[1] * sizeof(double));
    double nan = NAN;
    fits_read_subset(f, TDOUBLE, fp, lp, inc, &nan, v, &anynul, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    *nx = naxes[0];
    *ny = naxes[1];
    return v;
}

static void start_server(void)
{
    char err[512];
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_gt(tserver_port(srv), 0);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

/* The fixture: the demo datasets on a free port, two workers. */
static void setup(void)
{
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    start_server();
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
}

#include "iiif_tests.inc"

#if defined(__has_include)
#if __has_include("hips_tests.inc")
#include "hips_tests.inc"
#define TILES_HAVE_HIPS 1
#endif
#endif

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("tiles");
    suite_add_tcase(s, iiif_tcase());
#ifdef TILES_HAVE_HIPS
    suite_add_tcase(s, hips_tcase());
#endif
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
