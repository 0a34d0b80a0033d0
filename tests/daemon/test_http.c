/* HTTP integration tests: tesserad in-process on port 0 over the demo data, driven by libcurl. */
#include <check.h>
#include <curl/curl.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "engine/fits/fitscard.h"
#include "engine/sky/skywcs.h"
#include "daemon/http.h"
#include "tests/testutil.h"

static tess_config cfg;
static tserver *srv;
static char base[64];

typedef tt_resp resp;

/* Performs one request on the server under test; `body` (len bytes) is POSTed when not NULL. */
static resp fetch(const char *method, const char *path, const char *body, size_t len,
                  const char *extra_header)
{
    return tt_fetch(base, method, path, body, len, extra_header);
}

static resp get(const char *path)
{
    return fetch("GET", path, NULL, 0, NULL);
}

/* Reads a whole file into a malloc'd, NUL-terminated string of *len bytes. */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return s;
}

static void setup(void)
{
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    cfg.max_body_mb = 1;
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_gt(tserver_port(srv), 0);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
}

START_TEST(test_healthz)
{
    resp r = get("/healthz");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "application/json");
    ck_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_datasets_list)
{
    resp r = get("/api/v1/datasets");
    ck_assert_int_eq(r.status, 200);
    json_t *a = json_loads(r.body, 0, NULL);
    ck_assert(json_is_array(a));
    ck_assert_uint_eq(json_array_size(a), 6);
    size_t i;
    json_t *d;
    int seen = 0;
    json_array_foreach(a, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        json_t *shape = json_object_get(d, "shape");
        if (strcmp(name, "l1448_13co") == 0) {
            seen++;
            ck_assert_str_eq(json_string_value(json_object_get(d, "kind")), "cube");
            ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 105);
            ck_assert_int_eq(json_integer_value(json_array_get(shape, 2)), 53);
            ck_assert_int_eq(json_integer_value(json_object_get(d, "bitpix")), -32);
            json_t *w = json_object_get(d, "wcs");
            ck_assert_str_eq(json_string_value(json_array_get(json_object_get(w, "ctype"), 0)),
                             "RA---SFL");
            ck_assert_str_eq(json_string_value(json_object_get(w, "frame")), "icrs");
        } else if (strcmp(name, "m13") == 0) {
            seen++;
            ck_assert_str_eq(json_string_value(json_object_get(d, "kind")), "stack");
            ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 1392);
            ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), 1040);
            ck_assert_int_eq(json_integer_value(json_array_get(shape, 2)), 5);
            ck_assert_int_eq(json_integer_value(json_object_get(d, "bitpix")), 16);
            ck_assert(json_is_null(json_object_get(d, "wcs")));
        } else if (strcmp(name, "gc_msx_e") == 0) {
            seen++;
            ck_assert_str_eq(json_string_value(json_object_get(d, "kind")), "image");
            ck_assert_uint_eq(json_array_size(shape), 2);
            ck_assert_str_eq(json_string_value(json_object_get(d, "bunit")), "W/m^2-sr");
            json_t *w = json_object_get(d, "wcs");
            ck_assert_str_eq(json_string_value(json_object_get(w, "frame")), "galactic");
        } else if (strcmp(name, "gc_2mass_k") == 0) {
            seen++;
            json_t *w = json_object_get(d, "wcs");
            ck_assert_str_eq(json_string_value(json_object_get(w, "frame")), "fk5");
        }
    }
    ck_assert_int_eq(seen, 4);
    json_decref(a);
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_dataset_info_and_404)
{
    resp r = get("/api/v1/datasets/horsehead");
    ck_assert_int_eq(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(o);
    /* The DSS plate solution becomes PC + CDELT in wcslib: the summary gives the CD
     * matrix, whose scale is the plate's ~1 arcsec pixels (0.000280 deg). */
    json_t *cd = json_object_get(json_object_get(o, "wcs"), "cd");
    ck_assert_ptr_nonnull(cd);
    double c11 = json_real_value(json_array_get(json_array_get(cd, 0), 0));
    double c12 = json_real_value(json_array_get(json_array_get(cd, 0), 1));
    ck_assert(fabs(hypot(c11, c12) - 0.00028) < 0.00001);
    json_t *hdr = json_object_get(o, "header");
    ck_assert_uint_gt(json_array_size(hdr), 20);
    ck_assert_int_eq(strncmp(json_string_value(json_array_get(hdr, 0)),
                             "SIMPLE  =                    T", 30), 0);
    ck_assert_int_eq(strncmp(json_string_value(json_array_get(hdr, 3)),
                             "NAXIS1  =                  891", 30), 0);
    json_decref(o);
    tt_resp_free(&r);

    r = get("/api/v1/datasets/nosuch");
    tt_assert_problem(NULL, &r, 404, "dataset");
    tt_resp_free(&r);
    r = get("/api/v1/datasets/..%2f..%2fetc%2fpasswd/slice/xy/1_1/0_0_0.fits");
    tt_assert_problem(NULL, &r, 404, NULL);
    tt_resp_free(&r);
    r = get("/nowhere");
    tt_assert_problem(NULL, &r, 404, NULL);
    tt_resp_free(&r);
    r = fetch("DELETE", "/api/v1/datasets", NULL, 0, NULL);
    tt_assert_problem(NULL, &r, 405, NULL);
    tt_resp_free(&r);
}
END_TEST

#define GC_CUTOUT "/api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=0&coordsys=galactic&fov=0.8" \
                  "&width=512&height=512&projection=CAR&format=png&stretch=asinh"

START_TEST(test_cutout_png_cache_etag)
{
    resp r = get(GC_CUTOUT);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_str_eq(r.content_type, "image/png");
    long w, h;
    tt_png_size(&r, &w, &h);
    ck_assert_int_eq(w, 512);
    ck_assert_int_eq(h, 512);
    ck_assert_str_eq(r.x_cache, "MISS");
    ck_assert_uint_eq(strlen(r.etag), 18);
    resp r2 = get(GC_CUTOUT);
    ck_assert_int_eq(r2.status, 200);
    ck_assert_str_eq(r2.x_cache, "HIT");
    ck_assert_str_eq(r2.etag, r.etag);
    ck_assert_uint_eq(r2.len, r.len);
    ck_assert_int_eq(memcmp(r2.body, r.body, r.len), 0);
    char inm[128];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", r.etag);
    resp r3 = fetch("GET", GC_CUTOUT, NULL, 0, inm);
    ck_assert_int_eq(r3.status, 304);
    ck_assert_uint_eq(r3.len, 0);
    tt_resp_free(&r);
    tt_resp_free(&r2);
    tt_resp_free(&r3);
}
END_TEST

START_TEST(test_cutout_bad_parameters)
{
    static const struct { const char *q; long status; const char *param; } cases[] = {
        {"dataset=gc_2mass_k&ra=abc&dec=0&fov=1&width=10&height=10", 400, "ra"},
        {"dataset=gc_2mass_k&ra=0&dec=91&fov=1&width=10&height=10", 400, "dec"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=0&width=10&height=10", 400, "fov"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=0&height=10", 400, "width"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=-5&height=10", 400, "width"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10", 400, "height"},
        {"dataset=gc_2mass_k&ra=nan&dec=0&fov=1&width=10&height=10", 400, "ra"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&method=cubic", 400, "method"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&format=gif", 400, "format"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&stretch=wild", 400, "stretch"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&min_cut=5%25%25", 400, "min_cut"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&coordsys=supergalactic", 400, "coordsys"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&projection=XYZ", 400, "projection"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&bogus=1", 400, "bogus"},
        {"dataset=nosuch&ra=0&dec=0&fov=1&width=10&height=10", 404, "dataset"},
        {"dataset=m13&ra=0&dec=0&fov=1&width=10&height=10", 422, "dataset"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=65536&height=65536", 413, "width"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&plane=3", 400, "plane"},
        {"dataset=gc_2mass_k&ra=10&dec=60&fov=1&width=10&height=10", 422, NULL},
        {"dataset=gc_2mass_k&ra=0x55&dec=0&fov=1&width=10&height=10", 400, "ra"},
        {"dataset=gc_2mass_k&ra=1&ra=2&dec=0&fov=1&width=10&height=10", 400, "ra"},
        {"dataset=gc_2mass_k&ra=0&dec=0&fov=1&width=10&height=10&min_cut=100&max_cut=10", 400, "min_cut"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), "/api/v1/cutout?%s", cases[i].q);
        resp r = get(path);
        tt_assert_problem(NULL, &r, cases[i].status, cases[i].param);
        tt_resp_free(&r);
    }
    resp r = get("/healthz");
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}
END_TEST

/* Value of the centre pixel of an odd-sized FITS cutout centred on (lon, lat) in `frame`,
 * after checking that the header names the frame (`expect`, a card fragment). */
static double cutout_centre(const char *frame, double lon, double lat, const char *expect)
{
    char path[512];
    snprintf(path, sizeof(path), "/api/v1/cutout?dataset=gc_2mass_k&ra=%.12f&dec=%.12f"
             "&coordsys=%s&fov=0.05&width=11&height=11&format=fits", lon, lat, frame);
    resp r = get(path);
    ck_assert_msg(r.status == 200, "%s: %ld %s", frame, r.status, r.body);
    ck_assert_str_eq(r.content_type, "application/fits");
    size_t hlen = r.len < 2880 ? r.len : 2880;
    int found = 0;
    for (size_t k = 0; k + strlen(expect) <= hlen && !found; k++)
        found = memcmp(r.body + k, expect, strlen(expect)) == 0;
    ck_assert_msg(found, "%s: no '%s' in the header", frame, expect);
    long nx, ny;
    double *px = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    ck_assert_ptr_nonnull(px);
    ck_assert_int_eq(nx, 11);
    ck_assert_int_eq(ny, 11);
    double v = px[5 * 11 + 5];
    free(px);
    tt_resp_free(&r);
    return v;
}

/* Width and height from the first SOF marker of a JPEG body (ITU T.81 B.2.2); fails the
 * test when there is none. */
static void jpeg_size(const resp *r, long *w, long *h)
{
    const unsigned char *b = (const unsigned char *)r->body;
    ck_assert_uint_ge(r->len, 4);
    ck_assert_msg(b[0] == 0xFF && b[1] == 0xD8, "no JPEG SOI marker");
    size_t k = 2;
    while (k + 9 <= r->len && b[k] == 0xFF) {
        unsigned m = b[k + 1], len = (unsigned)b[k + 2] << 8 | b[k + 3];
        if (m >= 0xC0 && m <= 0xC2) {
            *h = (long)b[k + 5] << 8 | b[k + 6];
            *w = (long)b[k + 7] << 8 | b[k + 8];
            return;
        }
        k += 2 + len;
    }
    ck_abort_msg("no SOF marker in the JPEG");
}

/* coordsys takes every frame of the conventions: the same sky position asked for in
 * galactic, ecliptic, fk5 and icrs coordinates gives the same centre pixel (the centre of
 * an odd-sized cutout samples exactly the requested position).  The positions come from
 * sky_convert, whose conversions test_skywcs checks against astropy. */
START_TEST(test_cutout_frames_and_jpeg)
{
    const double v0 = cutout_centre("galactic", 0.0, 0.0, "GLON-TAN");
    ck_assert(isfinite(v0) && v0 != 0.0);
    static const struct { sky_frame f; double eq; const char *name, *card; } frames[] = {
        { SKY_FRAME_ECLIPTIC, 2000.0, "ecliptic", "ELON-TAN" },
        { SKY_FRAME_FK5, 2000.0, "fk5", "'FK5'" },
        { SKY_FRAME_FK4, 1950.0, "fk4", "'FK4'" },
        { SKY_FRAME_ICRS, 0.0, "icrs", "'ICRS'" },
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        double lon = 0.0, lat = 0.0;
        sky_convert(SKY_FRAME_GALACTIC, 0.0, frames[i].f, frames[i].eq, 1, &lon, &lat);
        double v = cutout_centre(frames[i].name, lon, lat, frames[i].card);
        ck_assert_msg(fabs(v - v0) <= 1e-6 * fabs(v0), "%s: centre %.9g, galactic %.9g",
                      frames[i].name, v, v0);
    }
    resp r = get("/api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=0&coordsys=galactic&fov=0.8"
                 "&width=300&height=200&format=jpg&stretch=asinh");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_str_eq(r.content_type, "image/jpeg");
    long w = 0, h = 0;
    jpeg_size(&r, &w, &h);
    ck_assert_int_eq(w, 300);
    ck_assert_int_eq(h, 200);
    tt_resp_free(&r);
}
END_TEST

/* POSTs a reference target header and compares the FITS result with astropy's. */
static void golden(const char *name, const char *dsname, const char *method, double mce)
{
    char path[1024], q[256];
    size_t hlen;
    snprintf(path, sizeof(path), "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, name);
    char *hdr = read_text(path, &hlen);
    snprintf(q, sizeof(q), "/api/v1/cutout?dataset=%s&format=fits&method=%s&max_coord_error=%g",
             dsname, method, mce);
    resp r = fetch("POST", q, hdr, hlen, NULL);
    ck_assert_msg(r.status == 200, "%s: %ld %s", name, r.status, r.body);
    ck_assert_str_eq(r.content_type, "application/fits");
    long nx, ny, rx, ry;
    double *got = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    snprintf(path, sizeof(path), "%s/reference/%s.fits", TESSERA_TESTDATA_DIR, name);
    double *ref = tt_fits_plane(path, 0, &rx, &ry);
    ck_assert_int_eq(nx, rx);
    ck_assert_int_eq(ny, ry);
    double peak = 0, maxdiff = 0;
    long agree = 0, both = 0, n = nx * ny;
    for (long i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > peak)
            peak = fabs(ref[i]);
    for (long i = 0; i < n; i++) {
        int fg = isfinite(got[i]), fr = isfinite(ref[i]);
        if (fg == fr)
            agree++;
        if (fg && fr) {
            both++;
            double d = fabs(got[i] - ref[i]);
            if (d > maxdiff)
                maxdiff = d;
        }
    }
    double footprint = (double)agree / (double)n;
    fprintf(stderr, "golden %-28s %-8s mce=%-6g max|diff|/peak = %.3e  footprint agreement = %.5f\n",
            name, method, mce, maxdiff / peak, footprint);
    ck_assert_int_gt(both, n / 4);
    ck_assert_msg(maxdiff <= 2e-6 * peak, "%s: max diff %g > 2e-6 of peak %g", name, maxdiff, peak);
    ck_assert_msg(footprint >= 0.995, "%s: footprint agreement %.4f", name, footprint);
    free(got);
    free(ref);
    free(hdr);
    tt_resp_free(&r);
}

/* Every method of the engine through POST /api/v1/cutout: bicubic and exact against
 * their astropy references (both well within 2e-6 of the peak), lanczos3 answered. */
START_TEST(test_cutout_methods)
{
    golden("gc2massk_to_ga_bicubic", "gc_2mass_k", "bicubic", 0);
    golden("gc2massk_to_ga_exact", "gc_2mass_k", "exact", 0);
    golden("gc2massk_to_ga_bicubic", "gc_2mass_k", "bicubic", 0.001);
    resp r = fetch("GET", "/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.9&fov=0.2&width=64"
                   "&height=48&method=lanczos3&format=fits", NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "lanczos3: %ld %s", r.status, r.body);
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_golden_exact)
{
    golden("gc2massk_to_ga_bilinear", "gc_2mass_k", "bilinear", 0);
    golden("gc2massk_to_ga_nearest", "gc_2mass_k", "nearest", 0);
    golden("rosat_to_eqcar_bilinear", "allsky_rosat", "bilinear", 0);
    golden("rosat_to_eqcar_nearest", "allsky_rosat", "nearest", 0);
    golden("horsehead_rot30_bilinear", "horsehead", "bilinear", 0);
}
END_TEST

START_TEST(test_golden_grid)
{
    golden("gc2massk_to_ga_bilinear", "gc_2mass_k", "bilinear", 0.001);
    golden("rosat_to_eqcar_bilinear", "allsky_rosat", "bilinear", 0.001);
    golden("horsehead_rot30_bilinear", "horsehead", "bilinear", 0.001);
}
END_TEST

/* Supplies blanks for a large declared upload. */
static size_t blanks(char *p, size_t sz, size_t n, void *cls)
{
    memset(p, ' ', sz * n);
    return sz * n;
}

START_TEST(test_declared_body_too_big_refused_early)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/api/v1/cutout?dataset=horsehead&format=fits", base);
    resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, blanks);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)70 * 1024 * 1024);
    tt_curl_capture(c, &r);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    tt_assert_problem(NULL, &r, 413, "body");
    tt_resp_free(&r);

    /* Hundreds of query parameters: a 400 naming the first unknown one, not a dropped
     * connection. */
    char *q = malloc(8192);
    size_t off = (size_t)snprintf(q, 8192, "/api/v1/cutout?dataset=horsehead");
    for (int i = 0; i < 470; i++)
        off += (size_t)snprintf(q + off, 8192 - off, "&a%d=1", i);
    r = get(q);
    tt_assert_problem(NULL, &r, 400, "a0");
    tt_resp_free(&r);
    free(q);
}
END_TEST

/* A whole FITS file is a target too: the FITS of a GET cutout (header and data, which
 * hold newlines and every other byte), POSTed back, gives the same pixels. */
START_TEST(test_post_whole_fits_target)
{
    resp g = get("/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.45&fov=0.1&width=64"
                 "&height=48&rotation_angle=25&format=fits");
    ck_assert_msg(g.status == 200, "%ld %s", g.status, g.body);
    ck_assert_uint_eq(g.len % 2880, 0);
    ck_assert_ptr_nonnull(memchr(g.body + 2880, '\n', g.len - 2880));
    resp p = fetch("POST", "/api/v1/cutout?dataset=horsehead&format=fits", g.body, g.len, NULL);
    ck_assert_msg(p.status == 200, "%ld %s", p.status, p.body);
    long gx, gy, px, py;
    double *a = tt_fits_mem_read(g.body, g.len, 1, &gx, &gy);
    double *b = tt_fits_mem_read(p.body, p.len, 1, &px, &py);
    ck_assert_int_eq(gx, 64);
    ck_assert_int_eq(gy, 48);
    ck_assert_int_eq(px, gx);
    ck_assert_int_eq(py, gy);
    long finite = 0;
    for (long k = 0; k < gx * gy; k++) {
        ck_assert_int_eq(isnan(a[k]), isnan(b[k]));
        if (!isnan(a[k])) {
            ck_assert_msg(a[k] == b[k], "pixel %ld: %.17g vs %.17g", k, a[k], b[k]);
            finite++;
        }
    }
    ck_assert_int_gt(finite, gx * gy / 2);
    free(a);
    free(b);
    /* Cut in its data (100 bytes past the one-block header, not a whole number of
     * cards): the header is whole and the data are not read, so the same cutout, byte
     * for byte (test_post_fits_cut_before_end: cuts before END). */
    ck_assert_ptr_nonnull(memmem(g.body, 2880, "END     ", 8));
    resp c = fetch("POST", "/api/v1/cutout?dataset=horsehead&format=fits", g.body, 2880 + 100,
                   NULL);
    ck_assert_msg(c.status == 200, "%ld %s", c.status, c.body);
    ck_assert_uint_eq(c.len, p.len);
    ck_assert(memcmp(c.body, p.body, p.len) == 0);
    tt_resp_free(&c);
    tt_resp_free(&g);
    tt_resp_free(&p);
}
END_TEST

/* POSTs the first `len` bytes of `body` and checks the 400 problem document naming
 * `body` whose detail is `detail`. */
static void assert_cut_refused(const char *body, size_t len, const char *detail)
{
    resp r = fetch("POST", "/api/v1/cutout?dataset=horsehead", body, len, NULL);
    tt_assert_problem(NULL, &r, 400, "body");
    json_error_t je;
    json_t *doc = json_loadb(r.body, r.len, 0, &je);
    ck_assert_msg(doc != NULL, "%zu bytes: not JSON: %s", len, r.body);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "detail")), detail);
    json_decref(doc);
    tt_resp_free(&r);
}

/* A FITS file cut before its END card (head -c of a file, at any length: inside the
 * first block too, where the body is shorter than a block) is refused as truncated,
 * not read as a header of the cards that came (which would be a cutout onto the wrong
 * geometry, or a misleading "no WCS"). */
START_TEST(test_post_fits_cut_before_end)
{
    resp g = get("/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.45&fov=0.1&width=64"
                 "&height=48&format=fits");
    ck_assert_msg(g.status == 200, "%ld %s", g.status, g.body);
    size_t end = 0;
    while (end < 2880 && strncmp(g.body + end, "END     ", 8) != 0)
        end += 80;
    ck_assert_uint_gt(end, 400);   /* the WCS cards come before */
    ck_assert_uint_lt(end, 2880);
    char want[256];
    /* At a card boundary before END: every WCS card there, no END. */
    snprintf(want, sizeof want, "the FITS header has no END card in its %zu bytes (%zu "
             "cards): the file looks truncated", end, end / 80);
    assert_cut_refused(g.body, end, want);
    assert_cut_refused(g.body, 400, "the FITS header has no END card in its 400 bytes "
                                    "(5 cards): the file looks truncated");
    /* Inside a card, in the first block and past it. */
    assert_cut_refused(g.body, 417, "the FITS header ends in the middle of a card (417 bytes, "
                                    "not a whole number of 80-character cards) before any "
                                    "END card: the file looks truncated");
    snprintf(want, sizeof want, "the FITS header ends in the middle of a card (%zu bytes, "
             "not a whole number of 80-character cards) before any END card: the file looks "
             "truncated", end + 79);
    assert_cut_refused(g.body, end + 79, want);   /* inside END itself */
    /* At a block boundary before END: a header of two blocks, cut after the first. */
    char *two = malloc(3 * 2880);
    memset(two, ' ', 3 * 2880);
    memcpy(two, g.body, end);
    for (size_t at = end; at < 50 * 80; at += 80)
        memcpy(two + at, "COMMENT   filler", 16);
    memcpy(two + 50 * 80, "END", 3);
    assert_cut_refused(two, 2880, "the FITS header has no END card in its 2880 bytes (36 "
                                  "cards): the file looks truncated");
    assert_cut_refused(two, 2880 + 7, "the FITS header ends in the middle of a card (2887 "
                                      "bytes, not a whole number of 80-character cards) "
                                      "before any END card: the file looks truncated");
    resp whole = fetch("POST", "/api/v1/cutout?dataset=horsehead&format=fits", two, 2 * 2880,
                       NULL);
    ck_assert_msg(whole.status == 200, "%ld %s", whole.status, whole.body);
    tt_resp_free(&whole);
    free(two);
    tt_resp_free(&g);
}
END_TEST

START_TEST(test_post_cutout_bad_bodies)
{
    resp r = fetch("POST", "/api/v1/cutout?dataset=horsehead&format=fits", "", 0, NULL);
    tt_assert_problem(NULL, &r, 400, "body");
    tt_resp_free(&r);
    const char *garbage = "this is not a FITS header\nat all\n";
    r = fetch("POST", "/api/v1/cutout?dataset=horsehead", garbage, strlen(garbage), NULL);
    tt_assert_problem(NULL, &r, 400, "body");
    tt_resp_free(&r);
    char longline[200];
    memset(longline, 'A', sizeof(longline) - 1);
    longline[sizeof(longline) - 1] = '\0';
    r = fetch("POST", "/api/v1/cutout?dataset=horsehead", longline, strlen(longline), NULL);
    tt_assert_problem(NULL, &r, 400, "body");
    tt_resp_free(&r);
    const char *nonaxis = "CTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\n";
    r = fetch("POST", "/api/v1/cutout?dataset=horsehead", nonaxis, strlen(nonaxis), NULL);
    tt_assert_problem(NULL, &r, 400, "body");
    tt_resp_free(&r);
    size_t big = 2 * 1024 * 1024;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    r = fetch("POST", "/api/v1/cutout?dataset=horsehead", huge, big, NULL);
    tt_assert_problem(NULL, &r, 413, "body");
    tt_resp_free(&r);
    free(huge);
    r = get("/healthz");
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}
END_TEST

/* A slice's FITS header places its pixels where they are on the sky: its pixel (i, j)
 * has the world coordinates of pixel (i + x, j + y) of the source.  HorseHead.fits carries
 * a DSS plate solution, from which WCS readers take the WCS instead of CRPIX: the
 * offset has to move CNPIX1/2 too. */
START_TEST(test_slice_wcs_follows_offset)
{
    resp r = get("/api/v1/datasets/horsehead/slice/xy/100_100/300_400_0.fits");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    char tmp[] = "/tmp/tessera-slicewcs-XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, r.body, r.len), (ssize_t)r.len);
    close(fd);
    tt_resp_free(&r);
    char path[1024], *sc = NULL, *fc = NULL, v[80];
    int sn = 0, fn = 0, f32;
    long nx, ny;
    free(tt_read_image(tmp, 1, &nx, &ny, &sc, &sn, &f32));
    unlink(tmp);
    snprintf(path, sizeof(path), "%s/HorseHead.fits", TESSERA_DEMO_DIR);
    free(tt_read_image(path, 1, &nx, &ny, &fc, &fn, &f32));
    ck_assert_int_eq(fitscard_get(sc, sn, "CNPIX1", v, sizeof v), 1);
    ck_assert_int_eq(strtol(v, NULL, 10), 12237 + 300);
    skywcs *ws = tt_parse_wcs(sc, sn), *wf = tt_parse_wcs(fc, fn);
    double x[3] = { 0, 50, 99 }, y[3] = { 0, 70, 99 }, fx[3], fy[3];
    double lon[3], lat[3], flon[3], flat[3];
    for (int k = 0; k < 3; k++) {
        fx[k] = x[k] + 300;
        fy[k] = y[k] + 400;
    }
    ck_assert_int_eq(skywcs_pix2sky(ws, 3, x, y, lon, lat), 0);
    ck_assert_int_eq(skywcs_pix2sky(wf, 3, fx, fy, flon, flat), 0);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs(lon[k] - flon[k]) < 1e-9 && fabs(lat[k] - flat[k]) < 1e-9,
                      "slice pixel (%g, %g): (%.9f, %.9f), source (%.9f, %.9f)", x[k], y[k],
                      lon[k], lat[k], flon[k], flat[k]);
    skywcs_free(ws);
    skywcs_free(wf);
    free(sc);
    free(fc);
}
END_TEST

START_TEST(test_slice_fits_equals_source)
{
    char path[1024];
    resp r = get("/api/v1/datasets/horsehead/slice/xy/891_893/0_0_0.fits");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    long nx, ny, sx, sy;
    double *got = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    snprintf(path, sizeof(path), "%s/HorseHead.fits", TESSERA_DEMO_DIR);
    double *src = tt_fits_plane(path, 0, &sx, &sy);
    ck_assert_int_eq(nx, sx);
    ck_assert_int_eq(ny, sy);
    ck_assert_int_eq(memcmp(got, src, (size_t)(nx * ny) * sizeof(double)), 0);
    free(got);
    free(src);
    tt_resp_free(&r);

    r = get("/api/v1/datasets/m13/slice/xy/1392_1040/0_0_2.fits");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    got = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    snprintf(path, sizeof(path), "%s/M13_blue_0003.fits", TESSERA_DEMO_DIR);
    src = tt_fits_plane(path, 0, &sx, &sy);
    ck_assert_int_eq(nx, 1392);
    ck_assert_int_eq(ny, 1040);
    double vmin = 1e300, vmax = -1e300;
    for (long i = 0; i < nx * ny; i++) {
        ck_assert(got[i] == src[i]);
        if (got[i] < vmin)
            vmin = got[i];
        if (got[i] > vmax)
            vmax = got[i];
    }
    /* Stored as int16 from -32768 to -32071; BZERO 32768 makes them 0..697 (astropy). */
    ck_assert(vmin == 0.0);
    ck_assert(vmax == 697.0);
    free(got);
    free(src);
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_slice_cube_region)
{
    /* Plane 20 of the cube, a 10x5 region at (40, 50), against cfitsio's own read. */
    resp r = get("/api/v1/datasets/l1448_13co/slice/xy/10_5/40_50_20.fits");
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    long nx, ny;
    double *got = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    ck_assert_int_eq(nx, 10);
    ck_assert_int_eq(ny, 5);
    char path[1024];
    snprintf(path, sizeof(path), "%s/l1448_13co.fits", TESSERA_DEMO_DIR);
    fitsfile *f = NULL;
    int st = 0, anynul;
    fits_open_diskfile(&f, path, READONLY, &st);
    long fpix[3] = {41, 51, 21}, lpix[3] = {50, 55, 21}, inc[3] = {1, 1, 1};
    double want[50], nan = NAN;
    fits_read_subset(f, TDOUBLE, fpix, lpix, inc, &nan, want, &anynul, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    for (int i = 0; i < 50; i++)
        ck_assert(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])));
    free(got);
    tt_resp_free(&r);

    r = get("/api/v1/datasets/l1448_13co/slice/xy/105_105/0_0_20.png?cmap=viridis");
    ck_assert_int_eq(r.status, 200);
    long w, h;
    tt_png_size(&r, &w, &h);
    ck_assert_int_eq(w, 105);
    ck_assert_int_eq(h, 105);
    tt_resp_free(&r);

    r = get("/api/v1/datasets/l1448_13co/slice/xy/4_3/0_0_0.npy");
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 128 + 4 * 3 * 8);
    ck_assert_int_eq(memcmp(r.body, "\x93NUMPY", 6), 0);
    ck_assert_ptr_nonnull(strstr(r.body + 10, "'shape': (3, 4)"));
    tt_resp_free(&r);

    static const struct { const char *p; long status; const char *param; } bad[] = {
        {"/api/v1/datasets/l1448_13co/slice/xy/10_10/100_0_0.fits", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/xy/10_10/0_0_53.fits", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/xy/0_10/0_0_0.fits", 400, "size"},
        {"/api/v1/datasets/l1448_13co/slice/xy/10_10/0_0_0.gif", 400, "format"},
        {"/api/v1/datasets/l1448_13co/slice/xy/10_10/0_0.png", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/xy/99999999999999_1/0_0_0.png", 400, "size"},
        {"/api/v1/datasets/l1448_13co/slice/ab/1_1/0_0_0.png", 400, "plane"},
        {"/api/v1/datasets/m13/slice/xy/1392_1040/0_0_0.png?cmap=rainbow", 400, "cmap"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = get(bad[i].p);
        tt_assert_problem(NULL, &r, bad[i].status, bad[i].param);
        tt_resp_free(&r);
    }
}
END_TEST


/* A GET (or HEAD with `head`) with up to two extra headers ("Name: value" or NULL). */
static resp fetch_headers(const char *path, int head, const char *h1, const char *h2)
{
    char url[1024];
    snprintf(url, sizeof(url), "%s%s", base, path);
    resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    struct curl_slist *hl = NULL;
    if (h1)
        hl = curl_slist_append(hl, h1);
    if (h2)
        hl = curl_slist_append(hl, h2);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (head)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    tt_curl_capture(c, &r);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (head) {
        curl_off_t cl = -1;
        curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        r.len = cl < 0 ? 0 : (size_t)cl;
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

/* Byte ranges on a cached body (RFC 9110, section 14): 206 with Content-Range, 416
 * beyond the end, If-Range by ETag, several ranges answered whole, HEAD with the length. */
START_TEST(test_byte_ranges)
{
    const char *path = "/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.46&fov=0.2"
                       "&width=100&height=80&format=fits";
    resp whole = get(path);
    ck_assert_int_eq(whole.status, 200);
    ck_assert_str_eq(whole.accept_ranges, "bytes");
    ck_assert_uint_eq(whole.len % 2880, 0);
    char cr[80];
    resp r = fetch_headers(path, 0, "Range: bytes=2880-2889", NULL);
    ck_assert_int_eq(r.status, 206);
    snprintf(cr, sizeof cr, "bytes 2880-2889/%zu", whole.len);
    ck_assert_str_eq(r.content_range, cr);
    ck_assert_uint_eq(r.len, 10);
    ck_assert_int_eq(memcmp(r.body, whole.body + 2880, 10), 0);
    ck_assert_str_eq(r.etag, whole.etag);
    tt_resp_free(&r);
    r = fetch_headers(path, 0, "Range: bytes=-100", NULL);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, 100);
    ck_assert_int_eq(memcmp(r.body, whole.body + whole.len - 100, 100), 0);
    tt_resp_free(&r);
    r = fetch_headers(path, 0, "Range: bytes=5760-", NULL);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, whole.len - 5760);
    tt_resp_free(&r);
    r = fetch_headers(path, 0, "Range: bytes=99999999-", NULL);
    tt_assert_problem(path, &r, 416, "Range");
    snprintf(cr, sizeof cr, "bytes */%zu", whole.len);
    ck_assert_str_eq(r.content_range, cr);
    tt_resp_free(&r);
    r = fetch_headers(path, 0, "Range: bytes=0-1,4-5", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, whole.len);
    tt_resp_free(&r);
    char ifr[96];
    snprintf(ifr, sizeof ifr, "If-Range: %s", whole.etag);
    r = fetch_headers(path, 0, "Range: bytes=0-9", ifr);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.len, 10);
    tt_resp_free(&r);
    r = fetch_headers(path, 0, "Range: bytes=0-9", "If-Range: \"0000000000000000\"");
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, whole.len);
    tt_resp_free(&r);
    r = fetch_headers(path, 1, NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, whole.len);
    ck_assert_str_eq(r.accept_ranges, "bytes");
    tt_resp_free(&r);
    tt_resp_free(&whole);
}
END_TEST

/* CDS's hips2fits path takes hips= and wcs= (a JSON header), answering as the cutout. */
START_TEST(test_hips2fits_route)
{
    const char *q = "?hips=horsehead&ra=85.25&dec=-2.46&fov=0.2&width=60&height=40"
                    "&projection=TAN&coordsys=icrs&rotation_angle=0.0&min_cut=0.5%25"
                    "&max_cut=99.5%25&stretch=linear&cmap=Greys_r&format=fits";
    char path[1024];
    snprintf(path, sizeof path, "/hips-image-services/hips2fits%s", q);
    resp a = get(path);
    ck_assert_msg(a.status == 200, "%ld %s", a.status, a.body);
    ck_assert_str_eq(a.content_type, "application/fits");
    snprintf(path, sizeof path, "/api/v1/cutout%s", q);
    resp b = get(path);
    ck_assert_int_eq(b.status, 200);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_int_eq(memcmp(a.body, b.body, a.len), 0);
    tt_resp_free(&b);
    /* the same target as a wcs header (CDELT from fov / width, CRPIX at the centre) */
    snprintf(path, sizeof path, "/hips-image-services/hips2fits?hips=horsehead&format=fits"
             "&cmap=Greys_r&wcs=%%7B%%22NAXIS1%%22%%3A60%%2C%%22NAXIS2%%22%%3A40%%2C"
             "%%22CTYPE1%%22%%3A%%22RA---TAN%%22%%2C%%22CTYPE2%%22%%3A%%22DEC--TAN%%22%%2C"
             "%%22CRPIX1%%22%%3A30.5%%2C%%22CRPIX2%%22%%3A20.5%%2C%%22CRVAL1%%22%%3A85.25%%2C"
             "%%22CRVAL2%%22%%3A-2.46%%2C%%22CDELT1%%22%%3A-0.0033333333333333335%%2C"
             "%%22CDELT2%%22%%3A0.0033333333333333335%%7D");
    b = get(path);
    ck_assert_msg(b.status == 200, "%ld %s", b.status, b.body);
    ck_assert_uint_eq(a.len, b.len);
    tt_resp_free(&b);
    b = get("/hips-image-services/hips2fits?hips=nosuch&ra=1&dec=1&fov=1&width=1&height=1");
    tt_assert_problem("hips=nosuch", &b, 404, "dataset");
    tt_resp_free(&b);
    b = get("/hips-image-services/hips2fits?hips=horsehead&wcs=%7B%22NAXIS1%22%3A10%7D");
    tt_assert_problem("wcs without NAXIS2", &b, 400, "wcs");
    tt_resp_free(&b);
    tt_resp_free(&a);
}
END_TEST

START_TEST(test_cors)
{
    /* Public read-only data: any origin may read it (browser viewers); preflight answered. */
    resp r = fetch("GET", "/api/v1/datasets", NULL, 0, "Origin: http://viewer.example");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.acao, "*");
    tt_resp_free(&r);
    r = fetch("OPTIONS", "/api/v1/cutout", NULL, 0, "Access-Control-Request-Method: POST");
    ck_assert_int_eq(r.status, 204);
    ck_assert_str_eq(r.acao, "*");
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_metrics)
{
    resp r = get("/healthz");
    tt_resp_free(&r);
    r = get("/metrics");
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "tessera_http_requests_total{code=\"200\"}"));
    ck_assert_ptr_nonnull(strstr(r.body, "tessera_cache_hits_total"));
    ck_assert_ptr_nonnull(strstr(r.body, "tessera_renders_total"));
    ck_assert_ptr_nonnull(strstr(r.body, "tessera_http_request_seconds_count"));
    /* every family has its HELP and TYPE (promtool check metrics) */
    for (const char *p = strstr(r.body, "# TYPE "); p; p = strstr(p + 1, "# TYPE ")) {
        char name[96], help[104];
        ck_assert_int_eq(sscanf(p, "# TYPE %95s", name), 1);
        snprintf(help, sizeof help, "# HELP %s ", name);
        ck_assert_msg(strstr(r.body, help) != NULL, "%s has no HELP", name);
    }
    tt_resp_free(&r);
}
END_TEST

/* Reads one counter from /metrics. */
static double metric(const char *name)
{
    resp r = get("/metrics");
    ck_assert_int_eq(r.status, 200);
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(r.body, pat);
    ck_assert_msg(p != NULL, "metric %s missing", name);
    double v = strtod(p + strlen(pat), NULL);
    tt_resp_free(&r);
    return v;
}

typedef struct flight_arg {
    const char *path;
    long status;
    char etag[64];
} flight_arg;

static void *flight_get(void *arg)
{
    flight_arg *a = arg;
    char url[1024];
    snprintf(url, sizeof(url), "%s%s", base, a->path);
    resp r;
    memset(&r, 0, sizeof(r));
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    tt_curl_capture(c, &r);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    snprintf(a->etag, sizeof(a->etag), "%s", r.etag);
    curl_easy_cleanup(c);
    free(r.body);
    return NULL;
}

START_TEST(test_single_flight)
{
    /* 16 concurrent requests for one uncached cutout: one render answers them all. */
    const char *path = "/api/v1/cutout?dataset=allsky_rosat&ra=0&dec=0&coordsys=galactic"
                       "&fov=360&width=2048&height=1024&projection=AIT&max_coord_error=0";
    double before = metric("tessera_renders_total");
    pthread_t th[16];
    flight_arg args[16];
    for (int i = 0; i < 16; i++) {
        memset(&args[i], 0, sizeof(args[i]));
        args[i].path = path;
        pthread_create(&th[i], NULL, flight_get, &args[i]);
    }
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(args[i].status, 200);
        ck_assert_str_eq(args[i].etag, args[0].etag);
    }
    double after = metric("tessera_renders_total");
    ck_assert_msg(after - before == 1.0, "%g renders for 16 identical requests", after - before);
}
END_TEST

/* A server over a temporary data root holding a copy of galactic_2d.fits. */
static char tmpdir[256];

static void setup_tmp(void)
{
    char err[512], path[512];
    tt_tmpdir_make(tmpdir, sizeof(tmpdir), "http");
    snprintf(path, sizeof(path), "cp %s/galactic_2d.fits %s/g.fits", TESSERA_TESTDATA_DIR, tmpdir);
    ck_assert_int_eq(system(path), 0);
    char json[1024];
    snprintf(json, sizeof(json), "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, "
             "\"data_roots\": [\"%s\"], \"datasets\": [{\"name\": \"g\", \"path\": \"g.fits\"}]}",
             tmpdir);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(json, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown_tmp(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

START_TEST(test_changed_file_served_fresh)
{
    const char *path = "/api/v1/datasets/g/slice/xy/43_43/0_0_0.fits";
    resp a = get(path);
    ck_assert_int_eq(a.status, 200);
    ck_assert_str_eq(a.x_cache, "MISS");
    resp b = get(path);
    ck_assert_str_eq(b.x_cache, "HIT");
    long nx, ny;
    double *v0 = tt_fits_mem_read(a.body, a.len, 1, &nx, &ny);

    /* Rewrite every pixel in place (x -> 2x + 1), as a pipeline updating a file would. */
    char file[512];
    snprintf(file, sizeof(file), "%s/g.fits", tmpdir);
    fitsfile *f = NULL;
    int st = 0;
    fits_open_diskfile(&f, file, READWRITE, &st);
    float *px = malloc(43 * 43 * sizeof(float));
    for (int i = 0; i < 43 * 43; i++)
        px[i] = isfinite(v0[i]) ? (float)(2.0 * v0[i] + 1.0) : NAN;
    fits_write_img(f, TFLOAT, 1, 43 * 43, px, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(px);
    sleep(2);   /* the version is rechecked once a second */

    resp c = get(path);
    ck_assert_int_eq(c.status, 200);
    ck_assert_str_eq(c.x_cache, "MISS");
    ck_assert_str_ne(c.etag, a.etag);
    double *v1 = tt_fits_mem_read(c.body, c.len, 1, &nx, &ny);
    for (int i = 0; i < 43 * 43; i++)
        if (isfinite(v0[i]))
            ck_assert(v1[i] == (double)(float)(2.0 * v0[i] + 1.0));
    free(v0);
    free(v1);
    tt_resp_free(&a);
    tt_resp_free(&b);
    tt_resp_free(&c);
}
END_TEST

/* A served file replaced by a symbolic link to a file outside the data roots (same shape,
 * other values) is not read: every read path answers 500 naming the link, and nothing
 * of the outside file comes back. */
START_TEST(test_link_swapped_in_not_followed)
{
    const char *paths[] = { "/api/v1/datasets/g/slice/xy/43_43/0_0_0.fits",
                            "/api/v1/datasets/g/series?x=5&y=5",
                            "/api/v1/datasets/g/reduce?op=mean&axis=xy&format=json",
                            "/iiif/3/g/full/max/0/default.png" };
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        resp a = get(paths[k]);
        ck_assert_msg(a.status == 200, "%s: %ld %s", paths[k], a.status, a.body);
        tt_resp_free(&a);
    }
    char outside[256], file[512], secret[512], cmd[1100];
    tt_tmpdir_make(outside, sizeof outside, "outside");
    snprintf(file, sizeof file, "%s/g.fits", tmpdir);
    snprintf(secret, sizeof secret, "%s/secret.fits", outside);
    snprintf(cmd, sizeof cmd, "cp %s %s", file, secret);
    ck_assert_int_eq(system(cmd), 0);
    fitsfile *f = NULL;
    int st = 0;
    fits_open_diskfile(&f, secret, READWRITE, &st);
    float *px = malloc(43 * 43 * sizeof(float));
    for (int i = 0; i < 43 * 43; i++)
        px[i] = 4242.0f;
    fits_write_img(f, TFLOAT, 1, 43 * 43, px, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(px);
    ck_assert_int_eq(unlink(file), 0);
    ck_assert_int_eq(symlink(secret, file), 0);
    sleep(2);   /* the version is rechecked once a second */
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        resp b = get(paths[k]);
        ck_assert_msg(b.status == 500, "%s: %ld %s", paths[k], b.status, b.body);
        ck_assert_msg(strstr(b.body, "symbolic link") != NULL, "%s: %s", paths[k], b.body);
        ck_assert_msg(strstr(b.body, "4242") == NULL && strstr(b.body, outside) == NULL, "%s",
                      b.body);
        tt_resp_free(&b);
    }
    resp h = get("/healthz");
    ck_assert_int_eq(h.status, 200);
    tt_resp_free(&h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", outside);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("demo");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_healthz);
    tcase_add_test(tc, test_datasets_list);
    tcase_add_test(tc, test_dataset_info_and_404);
    tcase_add_test(tc, test_cutout_png_cache_etag);
    tcase_add_test(tc, test_cutout_bad_parameters);
    tcase_add_test(tc, test_cutout_frames_and_jpeg);
    tcase_add_test(tc, test_golden_exact);
    tcase_add_test(tc, test_golden_grid);
    tcase_add_test(tc, test_cutout_methods);
    tcase_add_test(tc, test_post_cutout_bad_bodies);
    tcase_add_test(tc, test_post_fits_cut_before_end);
    tcase_add_test(tc, test_post_whole_fits_target);
    tcase_add_test(tc, test_declared_body_too_big_refused_early);
    tcase_add_test(tc, test_slice_fits_equals_source);
    tcase_add_test(tc, test_slice_wcs_follows_offset);
    tcase_add_test(tc, test_slice_cube_region);
    tcase_add_test(tc, test_metrics);
    tcase_add_test(tc, test_cors);
    tcase_add_test(tc, test_byte_ranges);
    tcase_add_test(tc, test_hips2fits_route);
    tcase_add_test(tc, test_single_flight);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("files");
    tcase_add_checked_fixture(tf, setup_tmp, teardown_tmp);
    tcase_set_timeout(tf, 60);
    tcase_add_test(tf, test_changed_file_served_fresh);
    tcase_add_test(tf, test_link_swapped_in_not_followed);
    suite_add_tcase(s, tf);
    int rc = tt_run_suite(s);
    curl_global_cleanup();
    return rc;
}
