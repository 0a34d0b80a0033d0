/* Mosaic and reprojection jobs over a collection: {"collection": NAME, "region": ...} as
 * the inputs, through HTTP.  The members selected, the product against the same job with
 * the members listed, the region's own target, the stored members a restart re-plans,
 * and the problems of bad bodies. */
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/app.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/job_mosaic.h"
#include "tests/testutil.h"
#include "engine/base/error.h"
#include "engine/hips/healpix.h"

#include <fitsio.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[128], data[256], jobsdir[256];
static tess_config cfg;
static tserver *srv;
static char base[64];

/* A float image nx x ny on a TAN WCS centred on (ra, dec), pixels of `arcsec`, turned by
 * `rot` degrees (CROTA2), holding a smooth pattern plus `offset`. */
static void write_member(const char *rel, double ra, double dec, double arcsec, double rot,
                         long nx, long ny, float offset)
{
    char path[512], cmd[600];
    snprintf(path, sizeof(path), "%s/%s", data, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
    *slash = '/';
    char fn[520];
    snprintf(fn, sizeof(fn), "!%s", path);
    fitsfile *f = NULL;
    int st = 0;
    long ax[2] = {nx, ny};
    fits_create_file(&f, fn, &st);
    fits_create_img(f, FLOAT_IMG, 2, ax, &st);
    char c[9][81];
    snprintf(c[0], 81, "CTYPE1  = 'RA---TAN'");
    snprintf(c[1], 81, "CTYPE2  = 'DEC--TAN'");
    snprintf(c[2], 81, "CRVAL1  = %20.10f", ra);
    snprintf(c[3], 81, "CRVAL2  = %20.10f", dec);
    snprintf(c[4], 81, "CRPIX1  = %20.2f", (nx + 1) / 2.0);
    snprintf(c[5], 81, "CRPIX2  = %20.2f", (ny + 1) / 2.0);
    snprintf(c[6], 81, "CDELT1  = %20.12f", -arcsec / 3600);
    snprintf(c[7], 81, "CDELT2  = %20.12f", arcsec / 3600);
    snprintf(c[8], 81, "CROTA2  = %20.6f", rot);
    for (int k = 0; k < 9; k++)
        fits_write_record(f, c[k], &st);
    float *v = malloc((size_t)(nx * ny) * sizeof(float));
    ck_assert_ptr_nonnull(v);
    for (long y = 0; y < ny; y++)
        for (long x = 0; x < nx; x++)
            v[y * nx + x] = offset + 100.0f + 30.0f * sinf(0.21f * (float)x) *
                            cosf(0.17f * (float)y) + 0.5f * (float)x;
    fits_write_img(f, TFLOAT, 1, nx * ny, v, &st);
    fits_close_file(f, &st);
    free(v);
    ck_assert_msg(st == 0, "cfitsio status %d writing %s", st, path);
}

/* The collection "sky" under data/sky: three overlapping images near (150, 2) (one
 * turned, one with finer pixels), one a third of a degree away, one file that is not
 * FITS (a member with an error). */
static void write_sky(void)
{
    write_member("sky/a.fits", 150.000, 2.000, 1.0, 0.0, 40, 30, 0.0f);
    write_member("sky/b.fits", 150.008, 2.000, 1.0, 15.0, 40, 30, 5.0f);
    write_member("sky/c.fits", 150.004, 2.006, 0.8, 0.0, 36, 30, -3.0f);
    write_member("sky/far/e.fits", 150.300, 2.000, 1.0, 0.0, 40, 30, 0.0f);
    char path[512];
    snprintf(path, sizeof(path), "%s/sky/bad.fits", data);
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("not a FITS file\n", fp);
    fclose(fp);
}

static void load_config(void)
{
    char text[1024], err[256];
    snprintf(text, sizeof(text),
             "{\"data_roots\": [\"%s\"], \"collections_rescan_s\": 0, \"datasets\": ["
             "{\"name\": \"sky\", \"kind\": \"collection\", \"images\": \"sky/**/*.fits\"}]}",
             data);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    cfg.jobs_dir = strdup(jobsdir);
}

static void start_server(void)
{
    char err[512];
    load_config();
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void stop_server(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
    srv = NULL;
}

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "coljobs");
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(jobsdir, sizeof(jobsdir), "%s/jobs", dir);
    ck_assert_int_eq(mkdir(data, 0700), 0);
    ck_assert_int_eq(mkdir(jobsdir, 0700), 0);
    write_sky();
    start_server();
}

static void teardown(void)
{
    if (srv)
        stop_server();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static json_t *fetch_json(const char *method, const char *path, const char *body, long want)
{
    tt_resp r = tt_fetch(base, method, path, body, body ? strlen(body) : 0,
                         body ? "Content-Type: application/json" : NULL);
    ck_assert_msg(r.status == want, "%s %s: status %ld, want %ld: %s", method, path, r.status,
                  want, r.body ? r.body : "");
    json_error_t e;
    json_t *j = json_loads(r.body, 0, &e);
    ck_assert_msg(j != NULL, "%s %s: not JSON: %s", method, path, r.body);
    tt_resp_free(&r);
    return j;
}

/* Submits body, waits for the job to succeed (at most 60 s) and returns its document. */
static json_t *run_job(const char *body)
{
    json_t *j = fetch_json("POST", "/api/v1/jobs", body, 202);
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/jobs/%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    double t0 = tt_now_s();
    for (;;) {
        j = fetch_json("GET", path, NULL, 200);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (strcmp(st, "queued") != 0 && strcmp(st, "running") != 0) {
            ck_assert_msg(strcmp(st, "succeeded") == 0, "job %s: %s", st,
                          json_dumps(json_object_get(j, "error"), 0));
            return j;
        }
        json_decref(j);
        ck_assert_msg(tt_now_s() - t0 < 60 * tt_time_scale(), "job did not end");
        usleep(20000);
    }
}

/* Plane 0 of HDU 1 of the job's product. */
static double *fetch_product(const json_t *doc, long *nx, long *ny)
{
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/jobs/%s/result",
             json_string_value(json_object_get(doc, "id")));
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    double *v = tt_fits_mem_read(r.body, r.len, 1, nx, ny);
    tt_resp_free(&r);
    ck_assert_ptr_nonnull(v);
    return v;
}

#define CIRCLE_BODY \
    "{\"type\": \"mosaic\", \"inputs\": {\"collection\": \"sky\", \"region\": " \
    "{\"circle\": [150.004, 2.002, 0.006]}}, \"output\": {\"name\": \"%s\"}%s}"

/* The members of a circle: a, b and c (not the far image, not the broken file), stored in
 * the job's request; the product is the one of the same job with the members' paths
 * listed, value for value. */
START_TEST(test_circle_equals_listed_inputs)
{
    char body[2048];
    snprintf(body, sizeof(body), CIRCLE_BODY, "m_circle", "");
    json_t *doc = run_job(body);
    json_t *in = json_object_get(json_object_get(doc, "request"), "inputs");
    ck_assert_str_eq(json_string_value(json_object_get(in, "collection")), "sky");
    json_t *circle = json_object_get(json_object_get(in, "region"), "circle");
    ck_assert_int_eq((int)json_array_size(circle), 3);
    ck_assert_double_eq_tol(json_real_value(json_array_get(circle, 2)), 0.006, 1e-15);
    json_t *mem = json_object_get(in, "members");
    static const char *const want[] = {"a.fits", "b.fits", "c.fits"};
    ck_assert_int_eq((int)json_array_size(mem), 3);
    char *root = realpath(data, NULL);
    json_t *paths = json_array();
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(json_string_value(json_array_get(mem, (size_t)i)), want[i]);
        char p[PATH_MAX + 16];
        snprintf(p, sizeof(p), "%s/sky/%s", root, want[i]);
        json_array_append_new(paths, json_string(p));
    }
    free(root);
    json_t *lb = json_pack("{s:s, s:o, s:{s:s}}", "type", "mosaic", "inputs", paths, "output",
                           "name", "m_listed");
    char *lbody = json_dumps(lb, 0);
    json_decref(lb);
    json_t *doc2 = run_job(lbody);
    free(lbody);
    long nx, ny, nx2, ny2;
    double *a = fetch_product(doc, &nx, &ny), *b = fetch_product(doc2, &nx2, &ny2);
    ck_assert_int_eq(nx, nx2);
    ck_assert_int_eq(ny, ny2);
    ck_assert_int_eq(memcmp(a, b, (size_t)(nx * ny) * sizeof(double)), 0);
    long finite = 0;
    for (long k = 0; k < nx * ny; k++)
        finite += isfinite(a[k]);
    ck_assert_msg(finite > nx * ny / 2, "%ld of %ld pixels finite", finite, nx * ny);
    /* the automatic target covers the three members: wider than any one of them */
    ck_assert_int_gt(nx, 40);
    free(a);
    free(b);
    json_decref(doc);
    json_decref(doc2);
}
END_TEST

/* target {"region": true}: a TAN grid on the circle's centre at the finest member scale
 * (c's 0.8"), 2 ceil(tan(r) / scale) + 1 pixels square, stored as its header. */
START_TEST(test_region_target)
{
    char body[2048];
    snprintf(body, sizeof(body), CIRCLE_BODY, "m_region", ", \"target\": {\"region\": true}, "
             "\"method\": \"nearest\"");
    json_t *doc = run_job(body);
    const char *h = json_string_value(json_object_get(
        json_object_get(json_object_get(doc, "request"), "target"), "header"));
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "CTYPE1  = 'RA---TAN'"));
    double scale = 0.8 / 3600;
    long n = 2 * (long)ceil(tan(0.006 * M_PI / 180) * 180 / M_PI / scale) + 1;
    long nx, ny;
    double *v = fetch_product(doc, &nx, &ny);
    ck_assert_int_eq(nx, n);
    ck_assert_int_eq(ny, n);
    /* the centre pixel is covered (a, b and c all hold it) */
    ck_assert(isfinite(v[(n / 2) * n + n / 2]));
    free(v);
    json_decref(doc);
}
END_TEST

/* A reprojection takes a collection's members as its "input" (the first member that
 * covers a pixel gives it). */
START_TEST(test_reproject_collection)
{
    const char *body = "{\"type\": \"reproject\", \"input\": {\"collection\": \"sky\", "
                       "\"region\": {\"range\": [149.99, 150.01, 1.99, 2.01]}}, "
                       "\"target\": {\"region\": true}, \"output\": {\"name\": \"r1\"}}";
    json_t *doc = run_job(body);
    json_t *mem = json_object_get(json_object_get(json_object_get(doc, "request"), "input"),
                                  "members");
    ck_assert_int_eq((int)json_array_size(mem), 3);
    long nx, ny;
    double *v = fetch_product(doc, &nx, &ny);
    ck_assert_int_gt(nx, 10);
    free(v);
    json_decref(doc);
}
END_TEST

/* The members stored with an accepted job are what its parse reads again: a new image in
 * the region, seen by the index, does not join a job already accepted. */
START_TEST(test_stored_members_replanned)
{
    char body[2048];
    snprintf(body, sizeof(body), CIRCLE_BODY, "m_stored", "");
    json_t *doc = run_job(body);
    json_t *req = json_deep_copy(json_object_get(doc, "request"));
    json_decref(doc);
    stop_server();
    write_member("sky/d.fits", 150.004, 2.002, 1.0, 30.0, 20, 20, 1.0f);
    load_config();
    char err[256];
    colset *s = NULL;
    ck_assert_msg(colset_open(&cfg, &s, err, sizeof(err)) == 0, "%s", err);
    job_env env = {&cfg, NULL, 1, s, NULL};
    job_problem pb;
    void *r = NULL;
    ck_assert_msg(job_kind_mosaic.parse(req, &env, 1, &r, &pb) == 0, "%d %s: %s", pb.status,
                  pb.field, pb.detail);
    json_t *again = job_kind_mosaic.req_json(r);
    ck_assert_msg(json_equal(again, req), "%s", json_dumps(again, 0));
    json_decref(again);
    job_kind_mosaic.req_free(r);
    /* without the stored members the same region now selects four */
    json_object_del(json_object_get(req, "inputs"), "members");
    ck_assert_int_eq(job_kind_mosaic.parse(req, &env, 1, &r, &pb), 0);
    again = job_kind_mosaic.req_json(r);
    ck_assert_int_eq((int)json_array_size(json_object_get(json_object_get(again, "inputs"),
                                                          "members")), 4);
    json_decref(again);
    job_kind_mosaic.req_free(r);
    json_decref(req);
    colset_close(s);
    config_release(&cfg);
}
END_TEST

/* A collection that matches backgrounds: a job over it stores its members' offsets
 * (bg_offsets, those the collection solved; the stored request parses back the same);
 * while a changed member's offsets are being solved a submission is refused with 503,
 * then accepted with the new solution; bg_offsets cannot be given at submit. */
START_TEST(test_background_offsets)
{
    stop_server();
    char text[1024], err[256];
    snprintf(text, sizeof(text),
             "{\"data_roots\": [\"%s\"], \"collections_rescan_s\": 0, \"datasets\": ["
             "{\"name\": \"sky\", \"kind\": \"collection\", \"images\": \"sky/**/*.fits\","
             " \"match_background\": true}]}", data);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    cfg.jobs_dir = strdup(jobsdir);
    colset *s = NULL;
    ck_assert_msg(colset_open(&cfg, &s, err, sizeof(err)) == 0, "%s", err);
    collection *c = colset_find(s, "sky");
    ck_assert_int_eq(colbg_update(s, c), 0);   /* (the thread may have solved it first) */
    catalog *cat = NULL;   /* a submission checks the output name against it */
    ck_assert_msg(catalog_open(&cfg, &cat, err, sizeof(err)) == 0, "%s", err);
    job_env env = {&cfg, cat, 1, s, NULL};
    char body[2048];
    snprintf(body, sizeof(body), CIRCLE_BODY, "m_bg", "");
    json_t *req = json_loads(body, 0, NULL);
    job_problem pb;
    void *r = NULL;
    ck_assert_msg(job_kind_mosaic.parse(req, &env, 0, &r, &pb) == 0, "%d %s: %s", pb.status,
                  pb.field, pb.detail);
    json_t *stored = job_kind_mosaic.req_json(r);
    job_kind_mosaic.req_free(r);
    json_t *in = json_object_get(stored, "inputs"), *mem = json_object_get(in, "members");
    json_t *bgo = json_object_get(in, "bg_offsets");
    ck_assert_int_eq((int)json_array_size(mem), 3);
    ck_assert_int_eq((int)json_array_size(bgo), 3);
    double before[3];
    for (int i = 0; i < 3; i++) {
        const char *rel = json_string_value(json_array_get(mem, (size_t)i));
        before[i] = json_real_value(json_array_get(bgo, (size_t)i));
        ck_assert_double_eq(before[i], colbg_offset(c, rel));
    }
    ck_assert_str_eq(json_string_value(json_array_get(mem, 1)), "b.fits");
    ck_assert(fabs(before[0] + before[1] + before[2]) < 1e-9);   /* the gauge */
    ck_assert_msg(job_kind_mosaic.parse(stored, &env, 1, &r, &pb) == 0, "%s", pb.detail);
    json_t *again = job_kind_mosaic.req_json(r);
    ck_assert_msg(json_equal(again, stored), "%s", json_dumps(again, 0));
    json_decref(again);
    job_kind_mosaic.req_free(r);
    ck_assert_int_ne(job_kind_mosaic.parse(stored, &env, 0, &r, &pb), 0);   /* at submit */
    ck_assert_int_eq(pb.status, 400);
    json_array_remove(bgo, 0);
    ck_assert_int_ne(job_kind_mosaic.parse(stored, &env, 1, &r, &pb), 0);   /* one short */
    ck_assert_int_eq(pb.status, 400);
    json_decref(stored);
    /* b rewritten 4 higher (same pixels, same pairs' points): pending until solved
     * again, then b's offset is 4 x 2/3 higher and the others' 4 / 3 lower (the gauge) */
    write_member("sky/b.fits", 150.008, 2.000, 1.0, 15.0, 40, 30, 9.0f);
    ck_assert_int_eq(colset_rescan(s), 0);
    ck_assert_int_eq(colbg_pending(c), 1);
    ck_assert_int_ne(job_kind_mosaic.parse(req, &env, 0, &r, &pb), 0);
    ck_assert_int_eq(pb.status, 503);
    ck_assert_str_eq(pb.field, "inputs.collection");
    ck_assert_int_eq(colbg_update(s, c), 0);
    ck_assert_msg(job_kind_mosaic.parse(req, &env, 0, &r, &pb) == 0, "%s", pb.detail);
    job_kind_mosaic.req_free(r);
    static const char *const rel[3] = {"a.fits", "b.fits", "c.fits"};
    for (int i = 0; i < 3; i++) {
        double d = colbg_offset(c, rel[i]) - before[i], want = i == 1 ? 8.0 / 3.0 : -4.0 / 3.0;
        ck_assert_msg(fabs(d - want) < 1e-4, "%s moved by %.9g, not %.9g", rel[i], d, want);
    }
    json_decref(req);
    colset_close(s);
    catalog_free(cat);
    config_release(&cfg);
}
END_TEST

/* The 503 of the sky routes while a collection's background offsets are being solved,
 * through HTTP and held deterministically: with "collections_rescan_s": 0 the rescan
 * thread solves once at the start and then only waits for the stop, so after the test's
 * own rescan of a rewritten member the collection stays pending until the test calls
 * colbg_update.  Meanwhile a tile, the Allsky, a cutout and a job over the collection
 * answer 503 problem+json (RFC 9457) with Retry-After (2 for the sky routes, 5 for the
 * job, as every job route's); after the update, 200. */
START_TEST(test_background_pending_http)
{
    stop_server();
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "{\"data_roots\": [\"%s\"], \"collections_rescan_s\": 0, \"datasets\": ["
             "{\"name\": \"sky\", \"kind\": \"collection\", \"images\": \"sky/**/*.fits\","
             " \"match_background\": true}]}", data);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    cfg.jobs_dir = strdup(jobsdir);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
    colset *s = srv->app->collections;
    collection *c = colset_find(s, "sky");
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(colbg_update(s, c), 0);   /* (the thread may have solved it first) */
    ck_assert_int_eq(colbg_pending(c), 0);
    const int order = 10;
    char tpath[128], body[2048];
    long long npix = (long long)hips_ang2pix(order + HIPS_TILE_SHIFT, 150.004, 2.002) >>
                     (2 * HIPS_TILE_SHIFT);
    snprintf(tpath, sizeof(tpath), "/hips/sky/Norder%d/Dir%lld/Npix%lld.fits", order,
             (long long)hips_dir(npix), npix);
    static const char cut[] = "/api/v1/cutout?dataset=sky&ra=150.004&dec=2.002&fov=0.01"
                              "&width=24&height=24&format=fits";
    static const char allsky[] = "/hips/sky/Norder3/Allsky.fits";
    const char *const paths[3] = {tpath, allsky, cut};
    snprintf(body, sizeof(body), CIRCLE_BODY, "m_pending", "");
    /* b rewritten 4 higher: pending from the rescan on, held until colbg_update */
    write_member("sky/b.fits", 150.008, 2.000, 1.0, 15.0, 40, 30, 9.0f);
    ck_assert_int_eq(colset_rescan(s), 0);
    ck_assert_int_eq(colbg_pending(c), 1);
    for (int round = 0; round < 2; round++) {   /* twice: a 503 is never cached */
        for (int i = 0; i < 3; i++) {
            tt_resp r = tt_fetch(base, "GET", paths[i], NULL, 0, NULL);
            tt_assert_problem(paths[i], &r, 503, NULL);
            ck_assert_msg(strstr(r.body, "background offsets"), "%s: %s", paths[i], r.body);
            ck_assert_str_eq(r.retry_after, "2");   /* COLBG_RETRY_AFTER_S */
            tt_resp_free(&r);
        }
        tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body),
                             "Content-Type: application/json");
        tt_assert_problem("POST /api/v1/jobs", &r, 503, "inputs.collection");
        ck_assert_str_eq(r.retry_after, "5");   /* as every job route's 503 */
        tt_resp_free(&r);
    }
    ck_assert_int_eq(colbg_pending(c), 1);
    ck_assert_int_eq(colbg_update(s, c), 0);
    ck_assert_int_eq(colbg_pending(c), 0);
    for (int i = 0; i < 3; i++) {
        tt_resp r = tt_fetch(base, "GET", paths[i], NULL, 0, NULL);
        ck_assert_msg(r.status == 200, "%s: %ld %s", paths[i], r.status, r.body ? r.body : "");
        ck_assert_str_eq(r.content_type, "application/fits");
        tt_resp_free(&r);
    }
    json_decref(run_job(body));
}
END_TEST

/* Bad bodies: RFC 9457 problems naming the field, and nothing queued. */
START_TEST(test_bad_bodies)
{
#define MOS(in, rest) "{\"type\": \"mosaic\", \"inputs\": " in ", \"output\": {\"name\": \"x\"}" \
                      rest "}"
    static const struct {
        const char *body;
        long status;
        const char *field;
    } cases[] = {
        {MOS("{\"collection\": \"nosuch\", \"region\": {\"circle\": [150, 2, 0.01]}}", ""), 404,
         "inputs.collection"},
        {MOS("{\"collection\": 3, \"region\": {\"circle\": [150, 2, 0.01]}}", ""), 400,
         "inputs.collection"},
        {MOS("{\"region\": {\"circle\": [150, 2, 0.01]}}", ""), 400, "inputs.collection"},
        {MOS("{\"collection\": \"sky\"}", ""), 400, "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, -1]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, \"2\", 1]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"square\": [150, 2, 1]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, 1], \"range\": "
             "[0, 1, 0, 1]}}", ""), 400, "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"polygon\": [150, 2, 151, 2]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"range\": [151, 150, 1, 3]}}", ""), 400,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [10, -40, 0.5]}}", ""), 422,
         "inputs.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, 0.01]}, "
             "\"members\": [\"a.fits\"]}", ""), 400, "inputs.members"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, 0.01]}, "
             "\"colour\": 1}", ""), 400, "inputs.colour"},
        {MOS("[\"sky/a.fits\"]", ", \"target\": {\"region\": true}"), 400, "target.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, 0.01]}}",
             ", \"target\": {\"region\": 1}"), 400, "target.region"},
        {MOS("{\"collection\": \"sky\", \"region\": {\"circle\": [150, 2, 0.01]}}",
             ", \"target\": {\"region\": true, \"auto\": {}}"), 400, "target"},
        {"{\"type\": \"reproject\", \"input\": {\"collection\": \"nosuch\", \"region\": "
         "{\"circle\": [150, 2, 0.01]}}, \"target\": {\"auto\": {}}, \"output\": {\"name\": "
         "\"x\"}}", 404, "input.collection"},
    };
#undef MOS
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", cases[i].body, strlen(cases[i].body),
                             NULL);
        tt_assert_problem(cases[i].body, &r, cases[i].status, cases[i].field);
        tt_resp_free(&r);
    }
    json_t *j = fetch_json("GET", "/api/v1/jobs", NULL, 200);
    ck_assert_int_eq((int)json_array_size(j), 0);
    json_decref(j);
}
END_TEST

/* A region that overlaps more members than one job takes: 413 naming the region.  The
 * members are hard links of one small image (COLJOB_MAX_MEMBERS is 4096). */
START_TEST(test_too_many_members)
{
    stop_server();
    write_member("many/m0000.fits", 20.0, -10.0, 1.0, 0.0, 8, 8, 0.0f);
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/many/m0000.fits", data);
    for (int i = 1; i <= 4096; i++) {
        snprintf(dst, sizeof(dst), "%s/many/m%04d.fits", data, i);
        ck_assert_int_eq(link(src, dst), 0);
    }
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "{\"data_roots\": [\"%s\"], \"collections_rescan_s\": 0, \"datasets\": ["
             "{\"name\": \"many\", \"kind\": \"collection\", \"images\": \"many/*.fits\"}]}",
             data);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    cfg.jobs_dir = strdup(jobsdir);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
    const char *body = "{\"type\": \"mosaic\", \"inputs\": {\"collection\": \"many\", "
                       "\"region\": {\"circle\": [20, -10, 0.01]}}, \"output\": {\"name\": "
                       "\"x\"}}";
    tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body), NULL);
    tt_assert_problem(body, &r, 413, "inputs.region");
    ck_assert_msg(strstr(r.body, "4097 members") != NULL, "%s", r.body);
    tt_resp_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("coljobs");
    TCase *tc = tcase_create("coljobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_circle_equals_listed_inputs);
    tcase_add_test(tc, test_region_target);
    tcase_add_test(tc, test_reproject_collection);
    tcase_add_test(tc, test_stored_members_replanned);
    tcase_add_test(tc, test_background_offsets);
    tcase_add_test(tc, test_background_pending_http);
    tcase_add_test(tc, test_bad_bodies);
    tcase_add_test(tc, test_too_many_members);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
