/* HTTP tests of the pixel routes (daemon/api/pixels.c): values, histogram, footprint,
 * transform and the FITS download, checked against the files read with cfitsio.
 * tesserad in-process on port 0 over the demo data and a scratch file (integers with
 * BLANK and scaling, in an extension). */
#include <check.h>
#include <curl/curl.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"

static tess_config cfg;
static tserver *srv;
static char base[64];
static char tmp[512];
static char scaled_path[600];

/* The scratch file: HDU 1 an empty primary, HDU 2 an 8 x 6 BITPIX 16 image with BSCALE 2,
 * BZERO 10, BLANK -99 at pixel (3, 2) (0-based), stored value x + 10 y elsewhere. */
#define SNX 8
#define SNY 6
static void write_scaled(const char *path)
{
    fitsfile *f = NULL;
    int st = 0;
    char name[640];
    snprintf(name, sizeof(name), "!%s", path);
    fits_create_file(&f, name, &st);
    fits_create_img(f, SHORT_IMG, 0, NULL, &st);
    long ax[2] = {SNX, SNY};
    fits_create_img(f, SHORT_IMG, 2, ax, &st);
    double bs = 2.0, bz = 10.0;
    long blank = -99;
    fits_write_key(f, TDOUBLE, "BSCALE", &bs, NULL, &st);
    fits_write_key(f, TDOUBLE, "BZERO", &bz, NULL, &st);
    fits_write_key(f, TLONG, "BLANK", &blank, NULL, &st);
    fits_write_key(f, TSTRING, "BUNIT", "Jy/beam", NULL, &st);
    fits_set_bscale(f, 1.0, 0.0, &st);
    short v[SNX * SNY];
    for (int y = 0; y < SNY; y++)
        for (int x = 0; x < SNX; x++)
            v[y * SNX + x] = (short)(x + 10 * y);
    v[2 * SNX + 3] = -99;
    fits_write_img(f, TSHORT, 1, SNX * SNY, v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
}

static void setup(void)
{
    char err[512], text[4096];
    tt_tmpdir_make(tmp, sizeof(tmp), "pixels");
    snprintf(scaled_path, sizeof(scaled_path), "%s/scaled.fits", tmp);
    write_scaled(scaled_path);
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": [\"%s\", \"%s\"],"
             " \"datasets\": ["
             "{\"name\": \"horsehead\", \"path\": \"HorseHead.fits\"},"
             "{\"name\": \"gc_msx_e\", \"path\": \"gc_msx_e.fits\", \"hips_frame\": \"galactic\"},"
             "{\"name\": \"l1448_13co\", \"path\": \"l1448_13co.fits\"},"
             "{\"name\": \"m13\", \"frames\": \"M13_blue_*.fits\"},"
             "{\"name\": \"allsky_rosat\", \"path\": \"allsky_rosat.fits\","
             " \"hips_frame\": \"galactic\"},"
             "{\"name\": \"scaled\", \"path\": \"%s\", \"hdu\": 1}]}",
             TESSERA_DEMO_DIR, tmp, scaled_path);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
    const char *names[] = {"scaled.fits"};
    tt_tmpdir_remove(tmp, names, 1);
}

static tt_resp get(const char *path)
{
    return tt_fetch(base, "GET", path, NULL, 0, NULL);
}

/* GET path, asserted 200 JSON, parsed. */
static json_t *get_json(const char *path)
{
    tt_resp r = get(path);
    ck_assert_msg(r.status == 200, "%s: %ld %s", path, r.status, r.body ? r.body : "");
    ck_assert_str_eq(r.content_type, "application/json");
    json_error_t je;
    json_t *o = json_loads(r.body, 0, &je);
    ck_assert_msg(o != NULL, "%s: not JSON: %s", path, je.text);
    tt_resp_free(&r);
    return o;
}

static void expect_problem(const char *path, long status, const char *parameter)
{
    tt_resp r = get(path);
    tt_assert_problem(path, &r, status, parameter);
    tt_resp_free(&r);
}

static const char *demo(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", TESSERA_DEMO_DIR, name);
    return out;
}

START_TEST(values_are_the_physical_pixels)
{
    char p[600];
    long nx, ny;
    double *hh = tt_fits_plane(demo("HorseHead.fits", p, sizeof(p)), 0, &nx, &ny);
    json_t *o = get_json("/api/v1/datasets/horsehead/values?x=10&y=20&size=3");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "x")), 10);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "y")), 20);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "plane")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "size")), 3);
    ck_assert(json_is_null(json_object_get(o, "unit")));
    json_t *rows = json_object_get(o, "values");
    ck_assert_uint_eq(json_array_size(rows), 3);
    for (int j = 0; j < 3; j++) {
        json_t *row = json_array_get(rows, (size_t)j);
        ck_assert_uint_eq(json_array_size(row), 3);
        for (int i = 0; i < 3; i++)
            ck_assert_double_eq(json_number_value(json_array_get(row, (size_t)i)),
                                hh[(size_t)(20 + j) * (size_t)nx + (size_t)(10 + i)]);
    }
    json_decref(o);
    /* One pixel by default; a box at the top right corner is clipped. */
    o = get_json("/api/v1/datasets/horsehead/values?x=890&y=888&size=64");
    rows = json_object_get(o, "values");
    ck_assert_uint_eq(json_array_size(rows), (size_t)(ny - 888));
    ck_assert_uint_eq(json_array_size(json_array_get(rows, 0)), (size_t)(nx - 890));
    ck_assert_double_eq(json_number_value(json_array_get(json_array_get(rows, 2), 0)),
                        hh[(size_t)890 * (size_t)nx + 890]);
    json_decref(o);
    free(hh);
    /* A plane of the cube. */
    double *cube = tt_fits_plane(demo("l1448_13co.fits", p, sizeof(p)), 30, &nx, &ny);
    o = get_json("/api/v1/datasets/l1448_13co/values?x=50&y=60&plane=30");
    rows = json_object_get(o, "values");
    ck_assert_uint_eq(json_array_size(rows), 1);
    ck_assert_double_eq_tol(json_number_value(json_array_get(json_array_get(rows, 0), 0)),
                            cube[60 * nx + 50], 1e-6 * fabs(cube[60 * nx + 50]));
    json_decref(o);
    free(cube);
}
END_TEST

START_TEST(values_scale_and_blank)
{
    json_t *o = get_json("/api/v1/datasets/scaled/values?x=2&y=1&size=3");
    ck_assert_str_eq(json_string_value(json_object_get(o, "unit")), "Jy/beam");
    json_t *rows = json_object_get(o, "values");
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 3; i++) {
            json_t *v = json_array_get(json_array_get(rows, (size_t)j), (size_t)i);
            int x = 2 + i, y = 1 + j;
            if (x == 3 && y == 2)
                ck_assert_msg(json_is_null(v), "BLANK should be null");
            else
                ck_assert_double_eq(json_number_value(v), 10.0 + 2.0 * (x + 10 * y));
        }
    json_decref(o);
}
END_TEST

START_TEST(values_refuse_bad_input)
{
    expect_problem("/api/v1/datasets/horsehead/values?y=3", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/values?x=3", 400, "y");
    expect_problem("/api/v1/datasets/horsehead/values?x=891&y=0", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/values?x=0&y=-1", 400, "y");
    expect_problem("/api/v1/datasets/horsehead/values?x=1.5&y=0", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/values?x=0&y=0&size=65", 400, "size");
    expect_problem("/api/v1/datasets/horsehead/values?x=0&y=0&size=0", 400, "size");
    expect_problem("/api/v1/datasets/horsehead/values?x=0&y=0&plane=1", 400, "plane");
    expect_problem("/api/v1/datasets/l1448_13co/values?x=0&y=0&plane=53", 400, "plane");
    expect_problem("/api/v1/datasets/horsehead/values?x=0&y=0&what=1", 400, "what");
    expect_problem("/api/v1/datasets/nosuch/values?x=0&y=0", 404, "dataset");
}
END_TEST

/* A plane the dataset lacks is told alike by every route that takes one (values,
 * histogram, cutouts, HiPS by ?plane= and, 404, by a tile's _{z}): one check, one text;
 * so is a bad pixel of values and series. */
START_TEST(plane_checked_alike_everywhere)
{
    static const struct { const char *path; long status; } cases[] = {
        {"/api/v1/datasets/l1448_13co/values?x=0&y=0&plane=53", 400},
        {"/api/v1/datasets/l1448_13co/histogram?plane=53", 400},
        {"/api/v1/cutout?dataset=l1448_13co&ra=51.3&dec=30.8&fov=0.1&width=8&height=8"
         "&plane=53", 400},
        {"/hips/l1448_13co/Norder3/Dir0/Npix0.fits?plane=53", 400},
        {"/hips/l1448_13co/Norder3/Dir0/Npix0_53.fits", 404},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tt_resp r = get(cases[k].path);
        tt_assert_problem(cases[k].path, &r, cases[k].status, "plane");
        ck_assert_msg(r.body && strstr(r.body, "dataset 'l1448_13co' has 53 planes: no plane "
                                       "53 (planes 0..52)"), "%s: %s", cases[k].path,
                      r.body ? r.body : "");
        tt_resp_free(&r);
    }
    /* The pixel of values and series, read in one place: the same detail from both. */
    static const char *const xy[] = {"x=100000&y=0", "x=0", "y=0", "x=1.5&y=0", "x=0&y=-1"};
    for (size_t k = 0; k < sizeof xy / sizeof xy[0]; k++) {
        char pv[160], ps[160];
        snprintf(pv, sizeof pv, "/api/v1/datasets/l1448_13co/values?%s", xy[k]);
        snprintf(ps, sizeof ps, "/api/v1/datasets/l1448_13co/series?%s", xy[k]);
        tt_resp a = get(pv), b = get(ps);
        tt_assert_problem(pv, &a, 400, NULL);
        tt_assert_problem(ps, &b, 400, NULL);
        json_t *ja = json_loads(a.body, 0, NULL), *jb = json_loads(b.body, 0, NULL);
        ck_assert_ptr_nonnull(ja);
        ck_assert_ptr_nonnull(jb);
        ck_assert_str_eq(json_string_value(json_object_get(ja, "detail")),
                         json_string_value(json_object_get(jb, "detail")));
        json_decref(ja);
        json_decref(jb);
        tt_resp_free(&a);
        tt_resp_free(&b);
    }
    tt_resp r = get("/api/v1/datasets/horsehead/values?x=0&y=0&plane=1");
    ck_assert_msg(r.body && strstr(r.body, "dataset 'horsehead' has 1 plane: no plane 1 "
                                   "(planes 0..0)"), "%s", r.body ? r.body : "");
    tt_resp_free(&r);
}
END_TEST

START_TEST(histogram_counts_every_finite_pixel)
{
    char p[600];
    long nx, ny;
    double *hh = tt_fits_plane(demo("HorseHead.fits", p, sizeof(p)), 0, &nx, &ny);
    double mn = INFINITY, mx = -INFINITY;
    for (long k = 0; k < nx * ny; k++) {
        mn = fmin(mn, hh[k]);
        mx = fmax(mx, hh[k]);
    }
    json_t *o = get_json("/api/v1/datasets/horsehead/histogram");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "bins")), 256);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "plane")), 0);
    ck_assert_double_eq(json_number_value(json_object_get(o, "min")), mn);
    ck_assert_double_eq(json_number_value(json_object_get(o, "max")), mx);
    json_t *counts = json_object_get(o, "counts");
    ck_assert_uint_eq(json_array_size(counts), 256);
    long long total = 0;
    for (size_t b = 0; b < 256; b++)
        total += json_integer_value(json_array_get(counts, b));
    ck_assert_int_eq(total, nx * ny);
    /* The first bin holds the pixels of [min, min + width). */
    double width = (mx - mn) / 256.0;
    long long first = 0;
    for (long k = 0; k < nx * ny; k++)
        if (hh[k] < mn + width)
            first++;
    ck_assert_int_eq(json_integer_value(json_array_get(counts, 0)), first);
    json_t *pc = json_object_get(o, "percentiles");
    double p05 = json_number_value(json_object_get(pc, "0.5"));
    double p1 = json_number_value(json_object_get(pc, "1"));
    double p99 = json_number_value(json_object_get(pc, "99"));
    double p995 = json_number_value(json_object_get(pc, "99.5"));
    ck_assert(mn <= p05 && p05 <= p1 && p1 < p99 && p99 <= p995 && p995 <= mx);
    /* 0.5% of the pixels lie below the 0.5th percentile, at most. */
    long long below = 0;
    for (long k = 0; k < nx * ny; k++)
        if (hh[k] < p05)
            below++;
    ck_assert_int_le(below, (long long)(0.005 * (double)(nx * ny)) + 1);
    json_decref(o);
    free(hh);
    /* Blanks are not counted. */
    o = get_json("/api/v1/datasets/scaled/histogram?bins=4");
    counts = json_object_get(o, "counts");
    total = 0;
    for (size_t b = 0; b < 4; b++)
        total += json_integer_value(json_array_get(counts, b));
    ck_assert_int_eq(total, SNX * SNY - 1);
    ck_assert_double_eq(json_number_value(json_object_get(o, "min")), 10.0);
    ck_assert_double_eq(json_number_value(json_object_get(o, "max")), 10.0 + 2.0 * 57);
    json_decref(o);
    expect_problem("/api/v1/datasets/horsehead/histogram?bins=4097", 400, "bins");
    expect_problem("/api/v1/datasets/horsehead/histogram?bins=0", 400, "bins");
    expect_problem("/api/v1/datasets/l1448_13co/histogram?plane=99", 400, "plane");
}
END_TEST

/* The ICRS positions (degrees) of n pixel positions (0-based) of HorseHead.fits through
 * its full WCS (the DSS plate solution included), read by the test's own cfitsio and
 * wcslib calls. */
static void horsehead_icrs(size_t n, const double *px, const double *py, double *lon,
                           double *lat)
{
    char p[600];
    long w0, h0;
    char *cards = NULL;
    int nkeys = 0, f32 = 0;
    free(tt_read_image(demo("HorseHead.fits", p, sizeof(p)), 1, &w0, &h0, &cards, &nkeys, &f32));
    skywcs *w = tt_parse_wcs(cards, nkeys);
    free(cards);
    skywcs *cel = skywcs_celestial(w);
    ck_assert_int_eq(skywcs_pix2sky(cel, n, px, py, lon, lat), 0);
    double eq = 0;
    sky_convert(skywcs_frame(cel, &eq), eq, SKY_FRAME_ICRS, 0.0, n, lon, lat);
    skywcs_free(cel);
    skywcs_free(w);
}

/* The corners of the footprint are the image's outer pixel corners through the full WCS
 * (the horsehead's DSS plate solution included). */
START_TEST(footprint_follows_the_edges)
{
    const long nx = 891, ny = 893;   /* HorseHead.fits's NAXIS1, NAXIS2 */
    double px[4] = {-0.5, nx - 0.5, nx - 0.5, -0.5}, py[4] = {-0.5, -0.5, ny - 0.5, ny - 0.5};
    double lon[4], lat[4];
    horsehead_icrs(4, px, py, lon, lat);
    json_t *o = get_json("/api/v1/datasets/horsehead/footprint?n=4");
    ck_assert_str_eq(json_string_value(json_object_get(o, "frame")), "icrs");
    json_t *poly = json_object_get(o, "polygon");
    ck_assert_uint_eq(json_array_size(poly), 16);
    for (int c = 0; c < 4; c++) {
        json_t *pt = json_array_get(poly, (size_t)(4 * c));
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 0)), lon[c], 1e-9);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 1)), lat[c], 1e-9);
    }
    json_decref(o);
    /* In galactic coordinates. */
    sky_convert(SKY_FRAME_ICRS, 0.0, SKY_FRAME_GALACTIC, 0.0, 4, lon, lat);
    o = get_json("/api/v1/datasets/horsehead/footprint?frame=galactic&n=1");
    poly = json_object_get(o, "polygon");
    ck_assert_uint_eq(json_array_size(poly), 4);
    for (int c = 0; c < 4; c++) {
        json_t *pt = json_array_get(poly, (size_t)c);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 0)), lon[c], 1e-9);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 1)), lat[c], 1e-9);
    }
    json_decref(o);
    o = get_json("/api/v1/datasets/gc_msx_e/footprint");
    ck_assert_uint_eq(json_array_size(json_object_get(o, "polygon")), 64);
    json_decref(o);
    expect_problem("/api/v1/datasets/m13/footprint", 422, "dataset");
    expect_problem("/api/v1/datasets/scaled/footprint", 422, "dataset");
    expect_problem("/api/v1/datasets/horsehead/footprint?frame=fk4", 400, "frame");
    expect_problem("/api/v1/datasets/horsehead/footprint?n=0", 400, "n");
}
END_TEST

/* The transform route: pixel positions to ICRS through the full WCS (as the footprint's
 * corners above), back to the same pixels, nulls off an all-sky projection, list limits
 * (astropy's all_pix2world: tests/clients/test_viewer_routes.py). */
START_TEST(transform_both_ways)
{
    double px[3] = {0.0, 100.25, 700.5}, py[3] = {0.0, 800.75, 20.5}, lon[3], lat[3];
    horsehead_icrs(3, px, py, lon, lat);
    json_t *o = get_json("/api/v1/datasets/horsehead/transform?x=0,100.25,700.5&y=0,800.75,20.5");
    ck_assert_str_eq(json_string_value(json_object_get(o, "frame")), "icrs");
    json_t *pts = json_object_get(o, "world");
    ck_assert_uint_eq(json_array_size(pts), 3);
    char q[1024];
    int n = snprintf(q, sizeof q, "/api/v1/datasets/horsehead/transform?lon=");
    for (int k = 0; k < 3; k++) {
        json_t *pt = json_array_get(pts, (size_t)k);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 0)), lon[k], 1e-9);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 1)), lat[k], 1e-9);
        n += snprintf(q + n, sizeof q - (size_t)n, "%s%.17g", k ? "," : "", lon[k]);
    }
    n += snprintf(q + n, sizeof q - (size_t)n, "&lat=");
    for (int k = 0; k < 3; k++)
        n += snprintf(q + n, sizeof q - (size_t)n, "%s%.17g", k ? "," : "", lat[k]);
    json_decref(o);
    o = get_json(q);
    pts = json_object_get(o, "pixel");
    for (int k = 0; k < 3; k++) {
        json_t *pt = json_array_get(pts, (size_t)k);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 0)), px[k], 1e-6);
        ck_assert_double_eq_tol(json_number_value(json_array_get(pt, 1)), py[k], 1e-6);
    }
    json_decref(o);
    /* The corner of the AIT map is off the projection; its centre is (0, 0) galactic. */
    o = get_json("/api/v1/datasets/allsky_rosat/transform?x=0,239.5&y=0,119.5&frame=galactic");
    pts = json_object_get(o, "world");
    ck_assert(json_is_null(json_array_get(json_array_get(pts, 0), 0)));
    json_t *centre = json_array_get(pts, 1);
    double l = json_number_value(json_array_get(centre, 0));
    ck_assert_double_eq_tol(fmod(l + 180.0, 360.0) - 180.0, 0.0, 1e-9);
    ck_assert_double_eq_tol(json_number_value(json_array_get(centre, 1)), 0.0, 1e-9);
    json_decref(o);
    /* 256 numbers a list at most. */
    size_t cap = 8 * 260 + 128;
    char *big = malloc(cap);
    for (int lim = 256; lim <= 257; lim++) {
        int m = snprintf(big, cap, "/api/v1/datasets/horsehead/transform?x=");
        for (int k = 0; k < lim; k++)
            m += snprintf(big + m, cap - (size_t)m, "%s%d", k ? "," : "", k);
        m += snprintf(big + m, cap - (size_t)m, "&y=");
        for (int k = 0; k < lim; k++)
            m += snprintf(big + m, cap - (size_t)m, "%s%d", k ? "," : "", k);
        if (lim == 256) {
            o = get_json(big);
            ck_assert_uint_eq(json_array_size(json_object_get(o, "world")), 256);
            json_decref(o);
        } else {
            expect_problem(big, 400, "x");
        }
    }
    free(big);
    expect_problem("/api/v1/datasets/horsehead/transform?x=1,&y=2", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/transform?x=1,,2&y=2", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/transform?x=1,2&y=2", 400, "y");
    expect_problem("/api/v1/datasets/horsehead/transform?x=nan&y=2", 400, "x");
    expect_problem("/api/v1/datasets/horsehead/transform?lon=1", 400, "lat");
    expect_problem("/api/v1/datasets/horsehead/transform?frame=icrs", 400, "lon");
    expect_problem("/api/v1/datasets/horsehead/transform?x=1&y=2&lat=3", 400, "lon");
    expect_problem("/api/v1/datasets/horsehead/transform?x=1&y=2&frame=fk5", 400, "frame");
    expect_problem("/api/v1/datasets/m13/transform?x=1&y=2", 422, "dataset");
}
END_TEST

/* Reads plane z of HDU 1 of an in-memory FITS file with cfitsio: its values, and NAXISn. */
static double *mem_plane(const tt_resp *r, long z, long *naxes, int *naxis)
{
    fitsfile *f = NULL;
    int st = 0;
    void *mem = r->body;
    size_t len = r->len;
    fits_open_memfile(&f, "mem", READONLY, &mem, &len, 0, NULL, &st);
    ck_assert_int_eq(st, 0);
    naxes[2] = 1;
    fits_get_img_dim(f, naxis, &st);
    fits_get_img_size(f, 3, naxes, &st);
    size_t n = (size_t)naxes[0] * (size_t)naxes[1];
    double *v = malloc(n * sizeof(double));
    long first[3] = {1, 1, z + 1};
    double nan = NAN;
    int any = 0;
    fits_read_pix(f, TDOUBLE, first, (long long)n, &nan, v, &any, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    return v;
}

START_TEST(fits_download)
{
    char p[600];
    /* The primary HDU of a simple file: its bytes as they are. */
    size_t flen = 0;
    FILE *f = fopen(demo("gc_msx_e.fits", p, sizeof(p)), "rb");
    fseek(f, 0, SEEK_END);
    flen = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *file = malloc(flen);
    ck_assert_uint_eq(fread(file, 1, flen, f), flen);
    fclose(f);
    tt_resp r = get("/api/v1/datasets/gc_msx_e/fits");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "application/fits");
    ck_assert_str_eq(r.disposition, "attachment; filename=\"gc_msx_e.fits\"");
    ck_assert_msg(r.etag[0] == '"', "no ETag");
    ck_assert_uint_eq(r.len, flen);
    ck_assert(memcmp(r.body, file, flen) == 0);
    free(file);
    char inm[100];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", r.etag);
    tt_resp r2 = tt_fetch(base, "GET", "/api/v1/datasets/gc_msx_e/fits", NULL, 0, inm);
    ck_assert_int_eq(r2.status, 304);
    tt_resp_free(&r2);
    tt_resp_free(&r);
    /* A stack: the cube of its frames. */
    r = get("/api/v1/datasets/m13/fits");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.disposition, "attachment; filename=\"m13.fits\"");
    long naxes[3];
    int naxis = 0;
    for (long z = 0; z < 5; z += 4) {
        char frame[64];
        snprintf(frame, sizeof(frame), "M13_blue_%04ld.fits", z + 1);
        long nx, ny;
        double *want = tt_fits_plane(demo(frame, p, sizeof(p)), 0, &nx, &ny);
        double *got = mem_plane(&r, z, naxes, &naxis);
        ck_assert_int_eq(naxis, 3);
        ck_assert_int_eq(naxes[0], 1392);
        ck_assert_int_eq(naxes[1], 1040);
        ck_assert_int_eq(naxes[2], 5);
        for (long k = 0; k < nx * ny; k += 997)
            ck_assert_double_eq(got[k], want[k]);
        free(want);
        free(got);
    }
    tt_resp_free(&r);
    /* An extension with BLANK and scaling: physical values, the blank a NaN. */
    r = get("/api/v1/datasets/scaled/fits");
    ck_assert_int_eq(r.status, 200);
    double *got = mem_plane(&r, 0, naxes, &naxis);
    ck_assert_int_eq(naxis, 2);
    ck_assert_int_eq(naxes[0], SNX);
    for (int y = 0; y < SNY; y++)
        for (int x = 0; x < SNX; x++) {
            if (x == 3 && y == 2)
                ck_assert(isnan(got[y * SNX + x]));
            else
                ck_assert_double_eq(got[y * SNX + x], 10.0 + 2.0 * (x + 10 * y));
        }
    free(got);
    ck_assert_msg(memmem(r.body, r.len, "BUNIT   = 'Jy/beam '", 20) != NULL, "BUNIT lost");
    tt_resp_free(&r);
    expect_problem("/api/v1/datasets/scaled/fits?x=1", 400, "x");
}
END_TEST

/* The order-0 tiles and the Allsky picture are made of one render of each order-0 tile
 * (daemon/api/hipsbase.c), whichever is asked for first: a second server asked in the
 * other order answers the same bytes. */
START_TEST(hips_order0_and_allsky_agree_in_any_order)
{
    char err[512], other[64], path[128];
    tserver *srv2 = NULL;
    ck_assert_msg(tserver_start(&cfg, &srv2, err, sizeof(err)) == 0, "%s", err);
    snprintf(other, sizeof(other), "http://127.0.0.1:%d", tserver_port(srv2));
    tt_resp a = get("/hips/allsky_rosat/Norder3/Allsky.fits");
    ck_assert_int_eq(a.status, 200);
    tt_resp tiles_a[12], tiles_b[12];
    for (int t = 0; t < 12; t++) {
        snprintf(path, sizeof(path), "/hips/allsky_rosat/Norder0/Dir0/Npix%d.%s", t,
                 t % 2 ? "fits" : "png");
        tiles_a[t] = get(path);
        tiles_b[t] = tt_fetch(other, "GET", path, NULL, 0, NULL);
        ck_assert_int_eq(tiles_a[t].status, 200);
        ck_assert_int_eq(tiles_b[t].status, 200);
        ck_assert_uint_eq(tiles_a[t].len, tiles_b[t].len);
        ck_assert_msg(memcmp(tiles_a[t].body, tiles_b[t].body, tiles_a[t].len) == 0,
                      "%s differs", path);
        tt_resp_free(&tiles_a[t]);
        tt_resp_free(&tiles_b[t]);
    }
    tt_resp b = tt_fetch(other, "GET", "/hips/allsky_rosat/Norder3/Allsky.fits", NULL, 0, NULL);
    ck_assert_int_eq(b.status, 200);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert(memcmp(a.body, b.body, a.len) == 0);
    tt_resp_free(&a);
    tt_resp_free(&b);
    tserver_stop(srv2, 5);
}
END_TEST

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("pixels");
    TCase *tc = tcase_create("routes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, values_are_the_physical_pixels);
    tcase_add_test(tc, plane_checked_alike_everywhere);
    tcase_add_test(tc, values_scale_and_blank);
    tcase_add_test(tc, values_refuse_bad_input);
    tcase_add_test(tc, histogram_counts_every_finite_pixel);
    tcase_add_test(tc, footprint_follows_the_edges);
    tcase_add_test(tc, transform_both_ways);
    tcase_add_test(tc, fits_download);
    tcase_add_test(tc, hips_order0_and_allsky_agree_in_any_order);
    suite_add_tcase(s, tc);
    int rc = tt_run_suite(s);
    curl_global_cleanup();
    return rc;
}
