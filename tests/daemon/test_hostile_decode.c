/* Hostile inputs to decode, served by tesserad in-process from a temporary data root: PNG
 * frames that decode to gigabytes (30000 x 30000 zeros in 890 KB), frames over the
 * limits.max_decoded_mb and limits.max_input_pixels of the configuration, and gzip'ed
 * FITS (a 20000 x 20000 float image in 1.6 MB), which cfitsio would decompress whole at
 * every read.  Every refusal must be a problem+json naming the limit and its key, come
 * before anything is decoded (the process's peak RSS grows by far less than the decoded
 * size), agree on every route, and leave the server answering. */
#include <check.h>
#include <fitsio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "tests/testutil.h"

/* The most the peak RSS may grow while hostile inputs are refused, MiB: each of them
 * decodes to 900 MB or more. */
#define RSS_BOUND_MB 64.0

static tess_config cfg;
static tserver *srv;
static char base[64];
static char dir[256];

static void rm_rf(const char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "hostile-decode");
    srv = NULL;
}

static void teardown(void)
{
    if (srv)
        tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
    rm_rf(dir);
}

/* Starts a server on the data root `dir` with `limits` (a JSON object's members, may be
 * "") and `datasets` (JSON array members).  Returns tserver_start's code; err holds its
 * message. */
static int start_server(const char *limits, const char *datasets, char *err, size_t errlen)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": [\"%s\"], "
             "\"limits\": {%s}, \"datasets\": [%s]}", dir, limits, datasets);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(json, &cfg, err, errlen) == 0, "%s", err);
    int rc = tserver_start(&cfg, &srv, err, errlen);
    if (rc == 0)
        snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
    return rc;
}

/* GET path: asserts a problem+json of `status` whose detail holds `needle` (and `needle2`
 * when not NULL). */
static void expect_problem(const char *path, long status, const char *needle,
                           const char *needle2)
{
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    tt_assert_problem(path, &r, status, NULL);
    ck_assert_msg(strstr(r.body, needle) != NULL, "%s: no '%s' in %s", path, needle, r.body);
    ck_assert_msg(!needle2 || strstr(r.body, needle2) != NULL, "%s: no '%s' in %s", path,
                  needle2, r.body);
    tt_resp_free(&r);
}

static void expect_ok(const char *path)
{
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: %ld %s", path, r.status, r.body ? r.body : "");
    tt_resp_free(&r);
}

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* A 64 x 48 float image with a TAN WCS at (10, 20), 1 arcmin pixels, at dir/name. */
static void write_image(const char *name)
{
    static const char *const wcs[] = {
        "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRPIX1  = 32.5", "CRPIX2  = 24.5",
        "CRVAL1  = 10.0", "CRVAL2  = 20.0", "CDELT1  = -0.0166666666667",
        "CDELT2  = 0.0166666666667"};
    char path[512];
    path_in(path, sizeof path, name);
    enum { NX = 64, NY = 48 };
    float v[NX * NY];
    for (int i = 0; i < NX * NY; i++)
        v[i] = (float)(i % 97);
    fitsfile *f;
    int st = 0;
    long naxes[2] = {NX, NY};
    unlink(path);
    fits_create_diskfile(&f, path, &st);
    fits_create_img(f, FLOAT_IMG, 2, naxes, &st);
    for (size_t k = 0; k < sizeof wcs / sizeof wcs[0]; k++)
        fits_write_record(f, wcs[k], &st);
    fits_write_img(f, TFLOAT, 1, NX * NY, v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
}

/* Gzips dir/from into dir/to (zlib's gzip writer). */
static void gzip_file(const char *from, const char *to)
{
    char src[512], dst[512];
    path_in(src, sizeof src, from);
    path_in(dst, sizeof dst, to);
    FILE *in = fopen(src, "rb");
    gzFile out = gzopen(dst, "wb6");
    ck_assert(in && out);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
        ck_assert_int_eq(gzwrite(out, chunk, (unsigned)n), (int)n);
    fclose(in);
    ck_assert_int_eq(gzclose(out), Z_OK);
}

/* F9: a stack of two 890 KB PNG frames of 30000 x 30000 (900 MB of samples each; one
 * IIIF thumbnail of it cost 41 s and 11.4 GB).  At the default limits every route that
 * decodes a frame answers 413 naming limits.max_input_pixels, at once, without
 * decoding; a small PNG stack beside it is served; the server stays up. */
START_TEST(test_png_bomb_stack)
{
    char path[512];
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "bomb_%d.png", i);
        path_in(path, sizeof path, name);
        ck_assert_int_lt(tt_write_png_zeros(path, 30000, 30000, 8), 1 << 20);
        snprintf(name, sizeof name, "ok_%d.png", i);
        path_in(path, sizeof path, name);
        tt_write_png_zeros(path, 40, 30, 8);
    }
    char err[512];
    ck_assert_msg(start_server("", "{\"name\": \"bomb\", \"frames\": \"bomb_*.png\"},"
                               "{\"name\": \"ok\", \"frames\": \"ok_*.png\"}",
                               err, sizeof err) == 0, "%s", err);
    expect_ok("/iiif/3/ok/full/!64,64/0/default.png");
    expect_ok("/api/v1/datasets/ok/slice/xz/40_2/0_0_0.raw");
    tt_cost cost = tt_cost_start();
    static const char *const routes[] = {
        "/iiif/3/bomb/full/!256,256/0/default.png",
        "/iiif/3/bomb~1/0,0,512,512/128,/0/default.png",
        "/api/v1/datasets/bomb/slice/xy/4_4/0_0_0.raw",
        "/api/v1/datasets/bomb/slice/xz/4_2/0_0_0.raw",
        "/api/v1/datasets/bomb/series?x=5&y=5",
        "/api/v1/datasets/bomb/reduce?op=mean&axis=xy",
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        expect_problem(routes[i], 413, "limits.max_input_pixels", "bomb_");
    tt_cost_check(&cost, RSS_BOUND_MB, 5.0, "the refusals");
    expect_ok("/healthz");
    expect_ok("/iiif/3/ok/full/!32,32/0/default.png");
}
END_TEST

/* The two budgets as configured: a 16-bit frame over limits.max_decoded_mb, an 8-bit
 * frame over limits.max_input_pixels (each 413 naming its key), and a frame within both
 * (served). */
START_TEST(test_png_budgets_from_config)
{
    static const struct {
        const char *name;
        long side;
        int bits;
    } frames[] = {{"w16", 2100, 16}, {"p8", 2300, 8}, {"ok8", 2100, 8}};
    char path[512], ds[1024] = "";
    for (size_t i = 0; i < 3; i++) {
        for (int k = 0; k < 2; k++) {
            char name[32];
            snprintf(name, sizeof name, "%s_%d.png", frames[i].name, k);
            path_in(path, sizeof path, name);
            tt_write_png_zeros(path, frames[i].side, frames[i].side, frames[i].bits);
        }
        size_t n = strlen(ds);
        snprintf(ds + n, sizeof ds - n, "%s{\"name\": \"%s\", \"frames\": \"%s_*.png\"}",
                 i ? "," : "", frames[i].name, frames[i].name);
    }
    char err[512];
    /* 2100^2 x 2 bytes = 8.4 MB > 8 MB; 2300^2 = 5.29 M pixels > 5 M. */
    ck_assert_msg(start_server("\"max_decoded_mb\": 8, \"max_input_pixels\": 5000000", ds, err,
                               sizeof err) == 0, "%s", err);
    expect_problem("/iiif/3/w16/full/!64,64/0/default.png", 413, "limits.max_decoded_mb = 8",
                   "w16_0.png");
    expect_problem("/api/v1/datasets/w16/series?x=1&y=1", 413, "limits.max_decoded_mb", NULL);
    expect_problem("/iiif/3/p8/full/!64,64/0/default.png", 413,
                   "limits.max_input_pixels = 5000000", "p8_0.png");
    expect_problem("/api/v1/datasets/p8/slice/xy/4_4/0_0_1.raw", 413,
                   "limits.max_input_pixels", "p8_1.png");
    expect_ok("/iiif/3/ok8/full/!64,64/0/default.png");
    expect_ok("/api/v1/datasets/ok8/series?x=1&y=1");
    expect_ok("/api/v1/datasets/ok8/slice/xy/4_4/0_0_1.raw");
}
END_TEST

/* F7: a 1.6 MB gzip of a 20000 x 20000 float image (1.6 GB decompressed; each cutout of it
 * cost 23-57 s and 2.2 GB, and slices answered 500).  A dataset so configured stops the
 * start with a message saying what to do, as any dataset that cannot be read does,
 * without decompressing it. */
START_TEST(test_gzip_fits_refused_at_start)
{
    char path[512], err[512];
    path_in(path, sizeof path, "big.fits.gz");
    ck_assert_int_lt(tt_write_gzip_fits(path, 20000, 20000, -32), 2 << 20);
    tt_cost cost = tt_cost_start();
    int rc = start_server("", "{\"name\": \"big\", \"path\": \"big.fits.gz\"}", err, sizeof err);
    ck_assert_msg(rc != 0, "the server started on a gzip'ed FITS");
    ck_assert_msg(strstr(err, "dataset 'big'") && strstr(err, "gzip-compressed") &&
                  strstr(err, "gunzip") && strstr(err, "fpack"), "%s", err);
    tt_cost_check(&cost, RSS_BOUND_MB, 2.0, "the refusal");
}
END_TEST

/* F7, while serving: a dataset's file replaced (rename) by its gzip'ed copy.  Before,
 * cutouts and IIIF decompressed it at every request (200) while slices answered 500;
 * now every route answers alike, with the same reason. */
START_TEST(test_gzip_fits_replaced_every_route_agrees)
{
    write_image("img.fits");
    char err[512];
    ck_assert_msg(start_server("", "{\"name\": \"img\", \"path\": \"img.fits\"}", err,
                               sizeof err) == 0, "%s", err);
    expect_ok("/api/v1/datasets/img/slice/xy/8_8/0_0_0.raw");
    gzip_file("img.fits", "img.fits.gz");
    char from[512], to[512];
    path_in(from, sizeof from, "img.fits.gz");
    path_in(to, sizeof to, "img.fits");
    ck_assert_int_eq(rename(from, to), 0);
    /* None of these was asked before: no cached answer stands in for a read. */
    static const char *const routes[] = {
        "/api/v1/cutout?dataset=img&ra=10&dec=20&fov=0.2&width=16&height=16&format=fits",
        "/iiif/3/img/full/!32,32/0/default.png",
        "/api/v1/datasets/img/slice/xy/8_8/4_4_0.raw",
        "/api/v1/datasets/img/slice/xz/8_1/0_3_0.raw",
        "/api/v1/datasets/img/series?x=3&y=3",
        "/hips/img/Norder3/Allsky.fits",
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        expect_problem(routes[i], 500, "gzip-compressed", "gunzip");
    expect_ok("/healthz");
}
END_TEST

/* F7 on the command line: `tessera reproject` of the same 1.6 MB gzip exits 1 at once
 * with the same reason, without decompressing it. */
START_TEST(test_gzip_fits_cli)
{
    char gz[512], target[512], out[512], cmd[2048];
    path_in(gz, sizeof gz, "big.fits.gz");
    tt_write_gzip_fits(gz, 20000, 20000, -32);
    write_image("target.fits");
    path_in(target, sizeof target, "target.fits");
    path_in(out, sizeof out, "out.fits");
    snprintf(cmd, sizeof cmd, TESSERA_BIN " reproject '%s' --target '%s' -o '%s' --threads 2 "
             "--quiet 2> '%s/stderr.txt'", gz, target, out, dir);
    double t0 = tt_now_s();
    int st = system(cmd);
    double dt = tt_now_s() - t0;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit status %d", st);
    ck_assert_msg(dt < 5.0 * tt_time_scale(), "took %.1f s", dt);
    /* The peak RSS of the largest child waited for: the shell or tessera.  Linux carries
     * a process's peak over exec, and system() starts the shell from this process's
     * memory: under valgrind that is valgrind's (63 MB measured, over the bound on a
     * slower machine), so the bound is checked in the plain and sanitizer runs only. */
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    ck_assert_msg(tt_under_valgrind() || ru.ru_maxrss / 1024.0 < RSS_BOUND_MB,
                  "tessera's peak RSS was %ld MB", ru.ru_maxrss / 1024);
    char path[512], msg[1024] = "";
    path_in(path, sizeof path, "stderr.txt");
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(msg, 1, sizeof msg - 1, f);
    msg[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(msg, "gzip-compressed") && strstr(msg, "gunzip"), "%s", msg);
    ck_assert_int_ne(access(out, F_OK), 0);
}
END_TEST

/* The two keys: their defaults, and out-of-range values refused naming the key. */
START_TEST(test_config_keys)
{
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.max_decoded_mb, 1024);
    ck_assert_int_eq(cfg.max_input_pixels, 1LL << 28);
    config_release(&cfg);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"limits\": {\"max_decoded_mb\": 0}}", "limits.max_decoded_mb must be between 1 and"},
        {"{\"limits\": {\"max_input_pixels\": 0}}", "limits.max_input_pixels must be between 1"},
        {"{\"limits\": {\"max_input_pixels\": 2e9}}", "limits.max_input_pixels must be an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        ck_assert_int_eq(config_init(&cfg), 0);
        ck_assert_int_ne(config_load_text(bad[i].json, &cfg, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "%s: %s", bad[i].json, err);
        config_release(&cfg);
    }
    char err[256];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text("{\"limits\": {\"max_decoded_mb\": 16777216, "
                                   "\"max_input_pixels\": 1099511627776}}", &cfg, err,
                                   sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(cfg.max_decoded_mb, 16777216);
    ck_assert_int_eq(cfg.max_input_pixels, 1LL << 40);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hostile_decode");
    TCase *tc = tcase_create("hostile_decode");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_png_bomb_stack);
    tcase_add_test(tc, test_png_budgets_from_config);
    tcase_add_test(tc, test_gzip_fits_refused_at_start);
    tcase_add_test(tc, test_gzip_fits_replaced_every_route_agrees);
    tcase_add_test(tc, test_gzip_fits_cli);
    tcase_add_test(tc, test_config_keys);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
