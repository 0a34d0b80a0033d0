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

#include "daemon/config.h"
#include "daemon/http.h"
#include "tests/testutil.h"

/* The suites live in files of their own, one per service, each defining a function
 * that returns its TCase (iiif_tcase, hips_tcase) over the fixture and helpers below
 * (most of them the shared ones of tests/testutil.h under the names the suites use). */

#define UNUSED __attribute__((unused))
#define DEMO(name) TESSERA_DEMO_DIR "/" name

static tess_config cfg;
static tserver *srv;
static char base[64];

typedef tt_resp resp;

/* GETs `path` from the server under test, with one extra request header (or NULL). */
static resp fetch(const char *path, const char *extra_header)
{
    return tt_fetch(base, "GET", path, NULL, 0, extra_header);
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
    tt_resp_free(r);
}

/* Asserts a problem+json reply with `status` naming `parameter` (NULL: any). */
static UNUSED void assert_problem(const char *path, resp *r, long status, const char *parameter)
{
    tt_assert_problem(path, r, status, parameter);
}

/* PNG width and height from the IHDR chunk. */
static UNUSED void png_size(const resp *r, long *w, long *h)
{
    tt_png_size(r, w, h);
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

/* Starts libjpeg's read of a JPEG body: its header read into d (em its error manager);
 * the caller destroys d. */
static UNUSED void jpeg_open(const resp *r, struct jpeg_decompress_struct *d,
                             struct jpeg_error_mgr *em)
{
    static const unsigned char soi[3] = {0xFF, 0xD8, 0xFF};
    ck_assert_uint_ge(r->len, 3);
    ck_assert_int_eq(memcmp(r->body, soi, 3), 0);
    d->err = jpeg_std_error(em);
    jpeg_create_decompress(d);
    jpeg_mem_src(d, (const unsigned char *)r->body, (unsigned long)r->len);
    ck_assert_int_eq(jpeg_read_header(d, TRUE), JPEG_HEADER_OK);
}

/* The number of colour components a JPEG body holds. */
static UNUSED int jpeg_components(const resp *r)
{
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr em;
    jpeg_open(r, &d, &em);
    int n = d.num_components;
    jpeg_destroy_decompress(&d);
    return n;
}

/* Decodes a JPEG body to 8-bit RGB (malloc'd, row 0 at the top) with libjpeg. */
static UNUSED uint8_t *jpeg_decode(const resp *r, long *w, long *h)
{
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr em;
    jpeg_open(r, &d, &em);
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
    return tt_fits_plane(path, z, nx, ny);
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
    /* The connection and header deadlines scale with the tests' time bounds: under
     * valgrind the 16 waiters of the single-flight test wait far longer than 30 s. */
    cfg.connection_timeout_s = (int)(cfg.connection_timeout_s * tt_time_scale());
    cfg.header_timeout_s = (int)(cfg.header_timeout_s * tt_time_scale());
    start_server();
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
}

#include "iiif_tests.inc"
#include "hips_tests.inc"

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("tiles");
    suite_add_tcase(s, iiif_tcase());
    suite_add_tcase(s, hips_tcase());
    int rc = tt_run_suite(s);
    curl_global_cleanup();
    return rc;
}
