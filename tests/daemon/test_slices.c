/* HTTP tests of plane cuts on any axis, series and reductions of cubes and stacks:
 * l1448_13co (a float cube), m13 (a stack of five 16-bit FITS frames) and two stacks made
 * by `tessera mkstack` with one seed (PNG frames and 8-bit FITS frames, the same values).
 * Expected values come from independent reads of the files (cfitsio, plain libpng) and
 * straightforward loops here, plus numbers printed by numpy/astropy (noted where used). */
#include <check.h>
#include <curl/curl.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "tests/testutil.h"

#define DEMO(name) TESSERA_DEMO_DIR "/" name
#define MK_W 40
#define MK_H 30
#define MK_N 24

static tess_config cfg;
static tserver *srv;
static char base[64];
static char tmpdir[128];

/* A volume read independently of the server: v[(z * ny + y) * nx + x]. */
typedef struct vol {
    long nx, ny, nz;
    double *v;
} vol;
static vol l1448, m13, mk;

static double at(const vol *a, long x, long y, long z)
{
    return a->v[((size_t)z * (size_t)a->ny + (size_t)y) * (size_t)a->nx + (size_t)x];
}

static void read_fits_stack(vol *a, const char *const *paths, long n)
{
    a->nz = n;
    a->v = NULL;
    for (long z = 0; z < n; z++) {
        double *p = tt_fits_plane(paths[z], 0, &a->nx, &a->ny);
        size_t np = (size_t)a->nx * (size_t)a->ny;
        if (!a->v)
            a->v = malloc(np * (size_t)n * sizeof(double));
        memcpy(a->v + np * (size_t)z, p, np * sizeof(double));
        free(p);
    }
}

static void read_fits_cube(vol *a, const char *path, long nz)
{
    a->nz = nz;
    a->v = NULL;
    for (long z = 0; z < nz; z++) {
        double *p = tt_fits_plane(path, z, &a->nx, &a->ny);
        size_t np = (size_t)a->nx * (size_t)a->ny;
        if (!a->v)
            a->v = malloc(np * (size_t)nz * sizeof(double));
        memcpy(a->v + np * (size_t)z, p, np * sizeof(double));
        free(p);
    }
}

/* A greyscale 8-bit PNG with plain libpng: out[r * w + c], r = 0 the first stored row. */
static unsigned char *read_png_plain(const char *path, long *w, long *h)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_read_info(png, info);
    ck_assert_int_eq(png_get_bit_depth(png, info), 8);
    ck_assert_int_eq(png_get_color_type(png, info), PNG_COLOR_TYPE_GRAY);
    *w = png_get_image_width(png, info);
    *h = png_get_image_height(png, info);
    unsigned char *out = malloc((size_t)*w * (size_t)*h);
    for (long r = 0; r < *h; r++)
        png_read_row(png, out + r * *w, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return out;
}

static void start_server(long long max_output_pixels)
{
    char err[512], json[2048];
    snprintf(json, sizeof json,
             "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": [\"%s\", \"%s\"], "
             "\"limits\": {\"max_output_pixels\": %lld}, \"datasets\": ["
             "{\"name\": \"l1448_13co\", \"path\": \"l1448_13co.fits\"},"
             "{\"name\": \"m13\", \"frames\": \"M13_blue_*.fits\"},"
             "{\"name\": \"gp\", \"frames\": \"%s/png/frame_*.png\"},"
             "{\"name\": \"gf\", \"frames\": \"%s/fits/frame_*.fits\"},"
             "{\"name\": \"gb\", \"frames\": \"%s/bad/frame_*.png\"}]}",
             TESSERA_DEMO_DIR, tmpdir, max_output_pixels, tmpdir, tmpdir, tmpdir);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(json, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
}

/* Once per process: the generated stacks and the reference volumes. */
static void make_data(void)
{
    if (tmpdir[0])
        return;
    tt_tmpdir_make(tmpdir, sizeof tmpdir, "slices");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, TESSERA_BIN " mkstack --frames %d --size %dx%d --seed 7 "
             "--threads 1 -o %s/png && " TESSERA_BIN " mkstack --frames %d --size %dx%d "
             "--seed 7 --format fits --bitpix 8 --threads 1 -o %s/fits",
             MK_N, MK_W, MK_H, tmpdir, MK_N, MK_W, MK_H, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    /* gb: the PNG frames with frame 9 cut to half its length (its header intact). */
    snprintf(cmd, sizeof cmd, "cp -r %s/png %s/bad && f=%s/bad/frame_00009.png && "
             "truncate -s $(( $(stat -c %%s $f) / 2 )) $f", tmpdir, tmpdir, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    read_fits_cube(&l1448, DEMO("l1448_13co.fits"), 53);
    char paths[MK_N][512];
    const char *pp[MK_N];
    for (int i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof paths[i], DEMO("M13_blue_%04d.fits"), i + 1);
        pp[i] = paths[i];
    }
    read_fits_stack(&m13, pp, 5);
    for (int i = 0; i < MK_N; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/fits/frame_%05d.fits", tmpdir, i);
        pp[i] = paths[i];
    }
    read_fits_stack(&mk, pp, MK_N);
    ck_assert_int_eq(mk.nx, MK_W);
    ck_assert_int_eq(mk.ny, MK_H);
    /* The PNG frames hold the same values with y = 0 in the last PNG row. */
    for (int z = 0; z < MK_N; z++) {
        char p[512];
        long w, h;
        snprintf(p, sizeof p, "%s/png/frame_%05d.png", tmpdir, z);
        unsigned char *px = read_png_plain(p, &w, &h);
        for (long y = 0; y < h; y++)
            for (long x = 0; x < w; x++)
                if (px[(h - 1 - y) * w + x] != at(&mk, x, y, z))
                    ck_abort_msg("mkstack PNG and FITS frames differ at (%ld, %ld, %d)", x, y, z);
        free(px);
    }
}

/* The data are made once, in the process that forks the tests (no thread runs yet);
 * each test starts its own server in its own process (checked fixtures).  A server
 * started before the fork left its threads behind in the parent: when one of them held
 * an allocator lock at the fork, the child inherited it held, and under ASan the child's
 * exit-time leak check waited on it for ever (a CI run hung in test_output_limit, and
 * 2 of 4 runs here). */
static void setup_data(void)
{
    make_data();
}

static void setup(void)
{
    start_server(16777216);
}

static void setup_small(void)
{
    start_server(100);
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
}

typedef tt_resp resp;

static resp get_ok(const char *path)
{
    resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body ? r.body : "");
    return r;
}

/* The float64 values of an .npy body (dtype '<f8'); *n = their count. */
static double *npy_values(const resp *r, long *n)
{
    ck_assert_int_ge((long)r->len, 10);
    ck_assert_int_eq(memcmp(r->body, "\x93NUMPY", 6), 0);
    size_t hl = (unsigned char)r->body[8] | (size_t)(unsigned char)r->body[9] << 8;
    ck_assert_ptr_nonnull(strstr(r->body + 10, "'<f8'"));
    ck_assert_int_eq((10 + hl) % 64, 0);
    *n = (long)((r->len - 10 - hl) / 8);
    double *v = malloc((size_t)*n * 8 + 8);
    memcpy(v, r->body + 10 + hl, (size_t)*n * 8);
    return v;
}

/* Fails unless |got - want| <= rtol max(1, |want|) (NaN matches NaN).  Per-pixel checks
 * call ck_abort_msg only on failure: every passing ck_assert costs a message to the
 * Check parent, which dominates loops over whole planes. */
static void assert_close(double got, double want, double rtol, const char *what, long i)
{
    if (isnan(want)) {
        if (!isnan(got))
            ck_abort_msg("%s[%ld]: %.17g, want NaN", what, i, got);
        return;
    }
    if (!(fabs(got - want) <= rtol * fmax(1.0, fabs(want))))
        ck_abort_msg("%s[%ld]: %.17g, want %.17g", what, i, got, want);
}

/* The expected cut: out[k * w + i] of a plane cut `plane` at (x, y, z). */
static double cut_value(const vol *a, const char *plane, long x, long y, long z, long w, long idx)
{
    long i = idx % w, k = idx / w;
    if (strcmp(plane, "xy") == 0)
        return at(a, x + i, y + k, z);
    if (strcmp(plane, "xz") == 0)
        return at(a, x + i, y, z + k);
    return at(a, x, y + i, z + k);
}

/* Fetches a cut as npy and as FITS and compares both with the reference volume. */
static void check_cut(const char *ds, const vol *a, const char *plane, long w, long h, long x,
                      long y, long z)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/datasets/%s/slice/%s/%ld_%ld/%ld_%ld_%ld.npy", ds, plane,
             w, h, x, y, z);
    resp r = get_ok(path);
    long n;
    double *v = npy_values(&r, &n);
    char shape[64];
    snprintf(shape, sizeof shape, "'shape': (%ld, %ld)", h, w);
    ck_assert_msg(strstr(r.body + 10, shape), "%s has shape (%ld, %ld)", path, h, w);
    ck_assert_int_eq(n, w * h);
    for (long i = 0; i < n; i++)
        assert_close(v[i], cut_value(a, plane, x, y, z, w, i), 0, path, i);
    free(v);
    tt_resp_free(&r);
    snprintf(path, sizeof path, "/api/v1/datasets/%s/slice/%s/%ld_%ld/%ld_%ld_%ld.fits", ds,
             plane, w, h, x, y, z);
    r = get_ok(path);
    long fx, fy;
    double *f = tt_fits_mem_read(r.body, r.len, 1, &fx, &fy);
    ck_assert_int_eq(fx, w);
    ck_assert_int_eq(fy, h);
    for (long i = 0; i < w * h; i++)
        assert_close(f[i], cut_value(a, plane, x, y, z, w, i), 0, path, i);
    free(f);
    tt_resp_free(&r);
}

START_TEST(test_cuts_three_axes)
{
    check_cut("l1448_13co", &l1448, "xy", 30, 20, 40, 50, 20);
    check_cut("l1448_13co", &l1448, "xz", 105, 53, 0, 50, 0);
    check_cut("l1448_13co", &l1448, "yz", 60, 20, 33, 10, 30);
    check_cut("m13", &m13, "xy", 50, 40, 600, 500, 3);
    check_cut("m13", &m13, "xz", 1392, 5, 0, 520, 0);
    check_cut("m13", &m13, "yz", 1040, 4, 700, 0, 1);
    for (int f = 0; f < 2; f++) {
        const char *ds = f ? "gf" : "gp";
        check_cut(ds, &mk, "xy", MK_W, MK_H, 0, 0, 13);
        check_cut(ds, &mk, "xz", MK_W, MK_N, 0, 15, 0);
        check_cut(ds, &mk, "yz", 20, 10, 21, 5, 14);
    }
}
END_TEST

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
    char *shape = arg;
    size_t len = sz * n, ret = len;
    if (len > 9 && strncasecmp(p, "X-Shape:", 8) == 0) {
        p += 8;
        len -= 8;
        while (len && *p == ' ') {
            p++;
            len--;
        }
        size_t l = len > 63 ? 63 : len;
        memcpy(shape, p, l);
        shape[l] = '\0';
        char *e = shape + strlen(shape);
        while (e > shape && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
            *--e = '\0';
    }
    return ret;
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
    tt_resp *r = arg;
    size_t add = sz * n;
    r->body = realloc(r->body, r->len + add + 1);
    memcpy(r->body + r->len, p, add);
    r->len += add;
    return add;
}

/* raw: little-endian float32 with X-Shape "H,W", on a miss and on a cache hit. */
START_TEST(test_raw_shape_header)
{
    for (int pass = 0; pass < 2; pass++) {
        char url[256], shape[64] = "";
        snprintf(url, sizeof url, "%s/api/v1/datasets/l1448_13co/slice/yz/105_53/7_0_0.raw", base);
        tt_resp r;
        memset(&r, 0, sizeof r);
        CURL *c = curl_easy_init();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, shape);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
        ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
        curl_easy_cleanup(c);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(shape, "53,105");
        ck_assert_int_eq((long)r.len, 53 * 105 * 4);
        for (long i = 0; i < 53 * 105; i++) {
            unsigned char *b = (unsigned char *)r.body + 4 * i;
            uint32_t u = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            float f;
            memcpy(&f, &u, 4);
            if (f != (float)at(&l1448, 7, i % 105, i / 105))
                ck_abort_msg("raw value %ld", i);
        }
        free(r.body);
    }
}
END_TEST

/* PNG and JPEG renderings of cuts: sizes; the xz cut of the generated stack puts z = 0 at
 * the bottom (the disc starts low and left, so the first frames are rows at the bottom). */
START_TEST(test_rendered_cuts)
{
    resp r = get_ok("/api/v1/datasets/l1448_13co/slice/xz/105_53/0_50_0.png?cmap=viridis");
    long w, h;
    tt_png_size(&r, &w, &h);
    ck_assert_int_eq(w, 105);
    ck_assert_int_eq(h, 53);
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/gp/slice/yz/30_24/3_0_0.jpg?stretch=sqrt");
    ck_assert_str_eq(r.content_type, "image/jpeg");
    ck_assert(r.len > 100 && (unsigned char)r.body[0] == 0xFF && (unsigned char)r.body[1] == 0xD8);
    tt_resp_free(&r);
}
END_TEST

/* series: values along z and the z world coordinate. */
START_TEST(test_series)
{
    resp r = get_ok("/api/v1/datasets/l1448_13co/series?x=50&y=50");
    json_error_t je;
    json_t *doc = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "dataset")), "l1448_13co");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "x")), 50);
    /* No BUNIT in the file: null, as the dataset listing's bunit (not ""). */
    ck_assert(json_is_null(json_object_get(doc, "unit")));
    json_t *za = json_object_get(doc, "z_axis");
    ck_assert_str_eq(json_string_value(json_object_get(za, "name")), "VOPT");
    ck_assert_str_eq(json_string_value(json_object_get(za, "unit")), "m s-1");
    json_t *zv = json_object_get(za, "values"), *vv = json_object_get(doc, "values");
    ck_assert_int_eq(json_array_size(zv), 53);
    ck_assert_int_eq(json_array_size(vv), 53);
    /* astropy 5 (Debian): WCS(fits.getheader('l1448_13co.fits')).wcs_pix2world(
     * [50]*53, [50]*53, range(53), 0)[2] -> [2528.19489695, 2594.61850695, 2661.04211695,
     * ..., 5982.222616949999] m/s */
    assert_close(json_real_value(json_array_get(zv, 0)), 2528.19489695, 1e-11, "vopt", 0);
    assert_close(json_real_value(json_array_get(zv, 1)), 2594.61850695, 1e-11, "vopt", 1);
    assert_close(json_real_value(json_array_get(zv, 2)), 2661.04211695, 1e-11, "vopt", 2);
    assert_close(json_real_value(json_array_get(zv, 52)), 5982.222616949999, 1e-11, "vopt", 52);
    for (long k = 0; k < 53; k++)
        assert_close(json_number_value(json_array_get(vv, k)), at(&l1448, 50, 50, k), 0, "s", k);
    json_decref(doc);
    tt_resp_free(&r);

    /* M13: DATE-OBS 04:09:39, :51, 04:10:02, :14, :26 -> seconds since the first frame. */
    r = get_ok("/api/v1/datasets/m13/series?x=700&y=520&format=csv");
    ck_assert_str_eq(r.content_type, "text/csv");
    const double t[5] = {0, 12, 23, 35, 47};
    char *line = strtok(r.body, "\n");
    ck_assert_str_eq(line, "DATE-OBS [s],value");
    for (int k = 0; k < 5; k++) {
        line = strtok(NULL, "\n");
        ck_assert_ptr_nonnull(line);
        double a, b;
        ck_assert_int_eq(sscanf(line, "%lf,%lf", &a, &b), 2);
        ck_assert(a == t[k]);
        ck_assert(b == at(&m13, 700, 520, k));
    }
    tt_resp_free(&r);

    /* Generated stacks: frame index, npy, both frame formats alike. */
    for (int f = 0; f < 2; f++) {
        char path[128];
        snprintf(path, sizeof path, "/api/v1/datasets/%s/series?x=21&y=13&format=npy",
                 f ? "gf" : "gp");
        r = get_ok(path);
        ck_assert_ptr_nonnull(strstr(r.body + 10, "'shape': (24,)"));
        long n;
        double *v = npy_values(&r, &n);
        ck_assert_int_eq(n, MK_N);
        for (long k = 0; k < n; k++)
            ck_assert(v[k] == at(&mk, 21, 13, k));
        free(v);
        tt_resp_free(&r);
    }
    r = get_ok("/api/v1/datasets/gp/series?x=0&y=29");
    doc = json_loads(r.body, 0, &je);
    za = json_object_get(doc, "z_axis");
    ck_assert_str_eq(json_string_value(json_object_get(za, "name")), "frame");
    ck_assert(json_number_value(json_array_get(json_object_get(za, "values"), 23)) == 23.0);
    json_decref(doc);
    tt_resp_free(&r);
}
END_TEST

/* NaN-aware reductions written out plainly (numpy's nan-functions, ddof 0). */
static double reduce_ref(const char *op, const double *v, long n, long stride)
{
    double s = 0, mn = NAN, mx = NAN;
    long c = 0;
    for (long i = 0; i < n; i++) {
        double x = v[i * stride];
        if (isnan(x))
            continue;
        c++;
        s += x;
        if (isnan(mn) || x < mn)
            mn = x;
        if (isnan(mx) || x > mx)
            mx = x;
    }
    if (!strcmp(op, "sum"))
        return s;
    if (!strcmp(op, "min"))
        return mn;
    if (!strcmp(op, "max"))
        return mx;
    if (!c)
        return NAN;
    double mean = s / c;
    if (!strcmp(op, "mean"))
        return mean;
    double ss = 0;
    for (long i = 0; i < n; i++) {
        double x = v[i * stride];
        if (!isnan(x))
            ss += (x - mean) * (x - mean);
    }
    return sqrt(ss / c);
}

static void check_reduce_z(const char *ds, const vol *a, const char *op)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/datasets/%s/reduce?op=%s&axis=z&format=npy", ds, op);
    resp r = get_ok(path);
    long n;
    double *v = npy_values(&r, &n);
    long np = a->nx * a->ny;
    ck_assert_int_eq(n, np);
    for (long i = 0; i < np; i++)
        assert_close(v[i], reduce_ref(op, a->v + i, a->nz, np), 1e-12, path, i);
    free(v);
    tt_resp_free(&r);
}

static void check_reduce_xy(const char *ds, const vol *a, const char *op)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/datasets/%s/reduce?op=%s&axis=xy", ds, op);
    resp r = get_ok(path);
    json_error_t je;
    json_t *doc = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "op")), op);
    /* unit as series gives it: BUNIT, or null when the file has none (never "") */
    json_t *unit = json_object_get(doc, "unit");
    ck_assert_msg(json_is_null(unit) || (json_is_string(unit) && json_string_length(unit) > 0),
                  "%s: unit is neither null nor a BUNIT", path);
    json_t *vv = json_object_get(doc, "values");
    ck_assert_int_eq(json_array_size(vv), a->nz);
    long np = a->nx * a->ny;
    for (long k = 0; k < a->nz; k++)
        assert_close(json_number_value(json_array_get(vv, k)),
                     reduce_ref(op, a->v + k * np, np, 1), 1e-12, path, k);
    json_decref(doc);
    tt_resp_free(&r);
}

START_TEST(test_reductions)
{
    static const char *const ops[] = {"mean", "sum", "min", "max", "std"};
    for (int o = 0; o < 5; o++) {
        check_reduce_z("l1448_13co", &l1448, ops[o]);
        check_reduce_xy("l1448_13co", &l1448, ops[o]);
        check_reduce_z("gp", &mk, ops[o]);
        check_reduce_xy("gf", &mk, ops[o]);
    }
    check_reduce_z("m13", &m13, "std");
    check_reduce_xy("m13", &m13, "mean");

    /* Numbers printed by numpy (Debian python3-numpy) on astropy's float32 arrays cast to
     * float64: np.nanmean(d, axis=0)[50, 50] = 0.6216541602504704, np.nanstd(d, axis=0)
     * [50, 50] = 0.41793351700905607, np.nanmean(d, axis=(1, 2))[20] = 0.7032798361784173
     * for l1448_13co; np.nanmean(m13, axis=(1, 2)) = [510.47066686, 509.746015,
     * 508.0498729, 507.90583554, 508.79199201] for the five M13 frames. */
    resp r = get_ok("/api/v1/datasets/l1448_13co/reduce?op=mean&axis=z&format=fits");
    long fx, fy;
    double *f = tt_fits_mem_read(r.body, r.len, 1, &fx, &fy);
    assert_close(f[50 * 105 + 50], 0.6216541602504704, 1e-12, "numpy nanmean", 0);
    free(f);
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/l1448_13co/reduce?op=std&axis=z&format=fits");
    f = tt_fits_mem_read(r.body, r.len, 1, &fx, &fy);
    assert_close(f[50 * 105 + 50], 0.41793351700905607, 1e-12, "numpy nanstd", 0);
    free(f);
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/m13/reduce?op=mean&axis=xy&format=csv");
    const double m[5] = {510.47066686, 509.746015, 508.0498729, 507.90583554, 508.79199201};
    char *line = strtok(r.body, "\n");
    for (int k = 0; k < 5; k++) {
        line = strtok(NULL, "\n");
        double t, v;
        ck_assert_int_eq(sscanf(line, "%lf,%lf", &t, &v), 2);
        assert_close(v, m[k], 1e-9, "numpy m13 mean", k);
    }
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/l1448_13co/reduce?op=mean&axis=xy&format=npy");
    long n;
    double *v = npy_values(&r, &n);
    assert_close(v[20], 0.7032798361784173, 1e-12, "numpy nanmean xy", 20);
    free(v);
    tt_resp_free(&r);

    /* A rendered mean image, cached on the second request. */
    r = get_ok("/api/v1/datasets/gp/reduce?op=mean&axis=z&format=png&stretch=asinh");
    long w, h;
    tt_png_size(&r, &w, &h);
    ck_assert_int_eq(w, MK_W);
    ck_assert_int_eq(h, MK_H);
    ck_assert_str_eq(r.x_cache, "MISS");
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/gp/reduce?op=mean&axis=z&format=png&stretch=asinh");
    ck_assert_str_eq(r.x_cache, "HIT");
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_bad_requests)
{
    static const struct {
        const char *path;
        long status;
        const char *param;
    } cases[] = {
        {"/api/v1/datasets/l1448_13co/series?x=105&y=0", 400, "x"},
        {"/api/v1/datasets/l1448_13co/series?x=1", 400, "y"},
        {"/api/v1/datasets/l1448_13co/series?x=1&y=-1", 400, "y"},
        {"/api/v1/datasets/l1448_13co/series?x=1&y=1&format=xml", 400, "format"},
        {"/api/v1/datasets/l1448_13co/series?x=1&y=1&z=3", 400, "z"},
        {"/api/v1/datasets/l1448_13co/reduce?op=median&axis=z", 400, "op"},
        {"/api/v1/datasets/l1448_13co/reduce?axis=z", 400, "op"},
        {"/api/v1/datasets/l1448_13co/reduce?op=mean", 400, "axis"},
        {"/api/v1/datasets/l1448_13co/reduce?op=mean&axis=x", 400, "axis"},
        {"/api/v1/datasets/l1448_13co/reduce?op=mean&axis=z&format=json", 400, "format"},
        {"/api/v1/datasets/l1448_13co/reduce?op=mean&axis=xy&format=png", 400, "format"},
        {"/api/v1/datasets/l1448_13co/reduce?op=mean&axis=z&cmap=rainbow", 400, "cmap"},
        {"/api/v1/datasets/l1448_13co/slice/xz/105_54/0_0_0.png", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/xz/10_10/0_105_0.png", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/yz/106_1/0_0_0.png", 400, "offset"},
        {"/api/v1/datasets/l1448_13co/slice/yz/1_1/0_0_0.gif", 400, "format"},
        {"/api/v1/datasets/l1448_13co/slice/zx/1_1/0_0_0.png", 400, "plane"},
        {"/api/v1/datasets/nosuch/series?x=1&y=1", 404, "dataset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp r = tt_fetch(base, "GET", cases[i].path, NULL, 0, NULL);
        tt_assert_problem(cases[i].path, &r, cases[i].status, cases[i].param);
        tt_resp_free(&r);
    }
    resp r = tt_fetch(base, "POST", "/api/v1/datasets/gp/series?x=1&y=1", "", 0, NULL);
    ck_assert_int_eq(r.status, 405);
    tt_resp_free(&r);
}
END_TEST

/* IIIF and the xy slice on a PNG stack: the full rendering of frame 9 shows the PNG file
 * as stored (top row at the top). */
START_TEST(test_iiif_png_stack)
{
    resp r = get_ok("/iiif/3/gp~9/full/max/0/gray.png?min_cut=0&max_cut=255");
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    ck_assert(png_image_begin_read_from_memory(&im, r.body, r.len));
    im.format = PNG_FORMAT_GRAY;
    unsigned char *g = malloc(PNG_IMAGE_SIZE(im));
    ck_assert(png_image_finish_read(&im, NULL, g, 0, NULL));
    ck_assert_int_eq(im.width, MK_W);
    ck_assert_int_eq(im.height, MK_H);
    char p[512];
    snprintf(p, sizeof p, "%s/png/frame_00009.png", tmpdir);
    long w, h;
    unsigned char *src = read_png_plain(p, &w, &h);
    /* A linear stretch from 0 to 255 gives back the stored values up to rounding. */
    for (long i = 0; i < w * h; i++)
        if (abs((int)g[i] - (int)src[i]) > 1)
            ck_abort_msg("pixel %ld: %d vs %d", i, g[i], src[i]);
    free(g);
    free(src);
    tt_resp_free(&r);
    r = get_ok("/iiif/3/gp~9/info.json");
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/gp");
    ck_assert_ptr_nonnull(strstr(r.body, "\"bitpix\":8"));
    ck_assert_ptr_nonnull(strstr(r.body, "\"kind\":\"stack\""));
    tt_resp_free(&r);
}
END_TEST

/* A stack with a truncated frame: every xz, yz and series read through it fails with 500
 * naming that frame (read on the pool, the error still the frame's); a cut that stops
 * before it reads. */
START_TEST(test_truncated_frame)
{
    static const char *const paths[] = {
        "/api/v1/datasets/gb/slice/xz/40_24/0_3_0.fits",
        "/api/v1/datasets/gb/slice/yz/30_24/5_0_0.npy",
        "/api/v1/datasets/gb/series?x=3&y=4",
        "/api/v1/datasets/gb/series?x=39&y=29&format=csv",
    };
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        resp r = tt_fetch(base, "GET", paths[i], NULL, 0, NULL);
        ck_assert_msg(r.status == 500, "GET %s: %ld", paths[i], r.status);
        ck_assert_msg(r.body && strstr(r.body, "bad/frame_00009.png"), "GET %s: %s", paths[i],
                      r.body ? r.body : "");
        tt_resp_free(&r);
    }
    resp r = get_ok("/api/v1/datasets/gb/slice/xz/40_9/0_3_0.npy");
    long n;
    double *v = npy_values(&r, &n);
    ck_assert_int_eq(n, 40 * 9);
    for (long k = 0; k < 9; k++)
        for (long x = 0; x < 40; x++)
            assert_close(v[k * 40 + x], at(&mk, x, 3, k), 0, "gb xz", k * 40 + x);
    free(v);
    tt_resp_free(&r);
}
END_TEST

/* Outputs over limits.max_output_pixels are refused with 413. */
START_TEST(test_output_limit)
{
    resp r = tt_fetch(base, "GET", "/api/v1/datasets/gp/reduce?op=mean&axis=z", NULL, 0, NULL);
    tt_assert_problem("reduce", &r, 413, "axis");
    tt_resp_free(&r);
    r = tt_fetch(base, "GET", "/api/v1/datasets/gp/slice/xz/40_24/0_0_0.png", NULL, 0, NULL);
    tt_assert_problem("slice", &r, 413, "size");
    tt_resp_free(&r);
    r = get_ok("/api/v1/datasets/gp/reduce?op=max&axis=xy");
    tt_resp_free(&r);
}
END_TEST

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("slices");
    TCase *tc = tcase_create("slices");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, setup_data, NULL);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cuts_three_axes);
    tcase_add_test(tc, test_raw_shape_header);
    tcase_add_test(tc, test_rendered_cuts);
    tcase_add_test(tc, test_series);
    tcase_add_test(tc, test_reductions);
    tcase_add_test(tc, test_bad_requests);
    tcase_add_test(tc, test_iiif_png_stack);
    tcase_add_test(tc, test_truncated_frame);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("limits");
    tcase_set_timeout(tl, 30);
    tcase_add_unchecked_fixture(tl, setup_data, NULL);
    tcase_add_checked_fixture(tl, setup_small, teardown);
    tcase_add_test(tl, test_output_limit);
    suite_add_tcase(s, tl);
    int rc = tt_run_suite(s);
    if (tmpdir[0]) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    curl_global_cleanup();
    return rc;
}
