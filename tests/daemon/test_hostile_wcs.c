/* Hostile WCS cards through every path of tesserad and tessera: each case of
 * tests/wcsrule_cases.h as a dataset (generated in a temporary data root), as a POSTed
 * cutout target, as a mosaic or reprojection job's target and input, and on the command
 * line (reproject, mosaic, hips).  Every path must refuse it with the same reason, the
 * one GET /api/v1/datasets/{name} shows as wcs_error; none may substitute a WCS of its
 * own.  The good WCS beside them is served. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/jobs.h"
#include "tests/testutil.h"
#include "tests/wcsrule_cases.h"

#define TOKEN "wcsrule-token-0123456789"
#define AUTH "Authorization: Bearer " TOKEN

static tess_config cfg;
static tserver *srv;
static char base[64];
static char root[256];

/* dir/name.ext */
static void root_path(char *out, size_t len, const char *name, const char *ext)
{
    snprintf(out, len, "%s/%s%s", root, name, ext);
}

/* The data root: NAME.fits and NAME.hdr (a 40 x 30 target) of every case, good.fits and
 * good.hdr; a server with a dataset per FITS file (but those of text-only cases, which
 * would not open) and the mosaic and reproject jobs. */
static void setup(void)
{
    char path[512], err[512];
    tt_tmpdir_make(root, sizeof root, "hostile-wcs");
    size_t cap = 8192, len = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    len += (size_t)snprintf(text + len, cap - len,
                            "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": "
                            "[\"%s\"], \"jobs\": {\"dir\": \"%s/jobs\", \"token\": \"%s\"}, "
                            "\"datasets\": [", root, root, TOKEN);
    for (int i = -1; i < WR_NCASES; i++) {
        const wr_case *c = i < 0 ? NULL : &wr_cases[i];
        const char *name = c ? c->name : "good";
        root_path(path, sizeof path, name, ".fits");
        ck_assert_int_eq(wr_write_fits(path, c), 0);
        char *hdr = wr_header_text(c, 40, 30);
        root_path(path, sizeof path, name, ".hdr");
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(hdr, f);
        ck_assert_int_eq(fclose(f), 0);
        free(hdr);
        if (wr_text_only(c))
            continue;
        len += (size_t)snprintf(text + len, cap - len, "%s{\"name\": \"%s\", \"path\": "
                                "\"%s.fits\"}", i < 0 ? "" : ", ", name, name);
        ck_assert_uint_lt(len, cap);
    }
    snprintf(text + len, cap - len, "]}");
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof err) == 0, "%s", err);
    free(text);
    /* Registering a kind twice is refused, harmless. */
    jobs_register_kind(&job_kind_mosaic);
    jobs_register_kind(&job_kind_reproject);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

/* The reason the datasets route gives for case `c` (checked against c->why), copied to
 * `reason`: what every other path must repeat word for word.  A text-only case has no
 * dataset: its reason must start with c->why. */
static void dataset_reason(const wr_case *c, char *reason, size_t len)
{
    if (wr_text_only(c)) {
        snprintf(reason, len, "%s", c->why);
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "/api/v1/datasets/%s", c->name);
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: %ld %s", path, r.status, r.body ? r.body : "");
    json_error_t je;
    json_t *o = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(o);
    ck_assert_msg(json_is_false(json_object_get(o, "celestial")), "%s: celestial", c->name);
    ck_assert_msg(json_is_null(json_object_get(o, "wcs")), "%s: a WCS is described", c->name);
    const char *why = json_string_value(json_object_get(o, "wcs_error"));
    ck_assert_msg(why && strstr(why, c->why), "%s: wcs_error '%s' lacks '%s'", c->name,
                  why ? why : "(none)", c->why);
    snprintf(reason, len, "%s", why);
    json_decref(o);
    tt_resp_free(&r);
}

/* Asserts a problem document with `status` and `parameter` whose detail holds `prefix`
 * followed at once by `reason`. */
static void expect_problem(const char *what, tt_resp *r, long status, const char *parameter,
                           const char *prefix, const char *reason)
{
    tt_assert_problem(what, r, status, parameter);
    char want[1024];
    snprintf(want, sizeof want, "%s%s", prefix, reason);
    ck_assert_msg(strstr(r->body, want) != NULL, "%s: '%s' lacks '%s'", what, r->body, want);
    tt_resp_free(r);
}

START_TEST(test_dataset_routes)
{
    /* The good dataset is served on the sky. */
    tt_resp r = tt_fetch(base, "GET", "/api/v1/cutout?dataset=good&ra=10&dec=20&fov=0.5&"
                         "width=24&height=24&format=fits", NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "good cutout: %ld %s", r.status, r.body ? r.body : "");
    tt_resp_free(&r);
    r = tt_fetch(base, "GET", "/api/v1/datasets/good", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"celestial\":true") && strstr(r.body, "\"wcs_error\":null"),
                  "%s", r.body);
    tt_resp_free(&r);
    for (int i = 0; i < WR_NCASES; i++) {
        const wr_case *c = &wr_cases[i];
        char reason[512], path[256], prefix[128];
        if (wr_text_only(c))
            continue;
        dataset_reason(c, reason, sizeof reason);
        snprintf(prefix, sizeof prefix, "dataset '%s' has no usable WCS: ", c->name);
        snprintf(path, sizeof path, "/api/v1/cutout?dataset=%s&ra=10&dec=20&fov=0.5&"
                 "width=24&height=24", c->name);
        r = tt_fetch(base, "GET", path, NULL, 0, NULL);
        expect_problem(path, &r, 422, "dataset", prefix, reason);
        const char *hdr = "NAXIS1  = 8\nNAXIS2  = 8\nCTYPE1  = 'RA---TAN'\n"
                          "CTYPE2  = 'DEC--TAN'\nCRVAL1  = 10\nCRVAL2  = 20\n"
                          "CDELT1  = -0.01\nCDELT2  = 0.01\nCRPIX1  = 4.5\nCRPIX2  = 4.5\n";
        snprintf(path, sizeof path, "/api/v1/cutout?dataset=%s", c->name);
        r = tt_fetch(base, "POST", path, hdr, strlen(hdr), NULL);
        expect_problem(path, &r, 422, "dataset", prefix, reason);
        snprintf(path, sizeof path, "/hips/%s/properties", c->name);
        r = tt_fetch(base, "GET", path, NULL, 0, NULL);
        expect_problem(path, &r, 422, "dataset", prefix, reason);
        snprintf(path, sizeof path, "/hips/%s/Norder3/Allsky.fits", c->name);
        r = tt_fetch(base, "GET", path, NULL, 0, NULL);
        expect_problem(path, &r, 422, "dataset", prefix, reason);
        /* Its pixels are still served. */
        snprintf(path, sizeof path, "/api/v1/datasets/%s/slice/xy/64_48/0_0_0.raw", c->name);
        r = tt_fetch(base, "GET", path, NULL, 0, NULL);
        ck_assert_msg(r.status == 200 && r.len == 4 * WR_NX * WR_NY, "%s: %ld", path, r.status);
        tt_resp_free(&r);
    }
}
END_TEST

START_TEST(test_posted_targets)
{
    for (int i = 0; i < WR_NCASES; i++) {
        const wr_case *c = &wr_cases[i];
        char reason[512];
        dataset_reason(c, reason, sizeof reason);
        char *hdr = wr_header_text(c, 40, 30);
        tt_resp r = tt_fetch(base, "POST", "/api/v1/cutout?dataset=good", hdr, strlen(hdr),
                             NULL);
        expect_problem(c->name, &r, 400, "body", "the target header has no usable WCS: ",
                       reason);
        free(hdr);
    }
    char *hdr = wr_header_text(NULL, 40, 30);
    tt_resp r = tt_fetch(base, "POST", "/api/v1/cutout?dataset=good&format=fits", hdr,
                         strlen(hdr), NULL);
    ck_assert_msg(r.status == 200, "good target: %ld %s", r.status, r.body ? r.body : "");
    tt_resp_free(&r);
    free(hdr);
}
END_TEST

/* POSTs a job body; the response (the caller frees it). */
static tt_resp post_job(json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", s, strlen(s), AUTH);
    free(s);
    return r;
}

START_TEST(test_jobs)
{
    for (int i = 0; i < WR_NCASES; i++) {
        const wr_case *c = &wr_cases[i];
        char reason[512], prefix[128], file[128];
        dataset_reason(c, reason, sizeof reason);
        snprintf(prefix, sizeof prefix, "dataset '%s' has no usable WCS: ", c->name);
        snprintf(file, sizeof file, "%s.fits", c->name);
        char *hdr = wr_header_text(c, 40, 30);
        tt_resp r = post_job(json_pack("{s:s, s:[s], s:{s:s}, s:{s:s}}", "type", "mosaic",
                                       "inputs", "good", "target", "header", hdr, "output",
                                       "name", "m_target"));
        expect_problem("mosaic target", &r, 400, "target.header",
                       "the target header has no usable WCS: ", reason);
        r = post_job(json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "type", "reproject", "input",
                               "good", "target", "header", hdr, "output", "name", "r_target"));
        expect_problem("reproject target", &r, 400, "target.header",
                       "the target header has no usable WCS: ", reason);
        free(hdr);
        if (wr_text_only(c))
            continue;
        r = post_job(json_pack("{s:s, s:[s, s], s:{s:s}}", "type", "mosaic", "inputs", "good",
                               c->name, "output", "name", "m_input"));
        expect_problem("mosaic input dataset", &r, 422, "inputs[1]", prefix, reason);
        r = post_job(json_pack("{s:s, s:[s], s:{s:s}}", "type", "mosaic", "inputs", file,
                               "output", "name", "m_file"));
        expect_problem("mosaic input file", &r, 422, "inputs[0]",
                       "the image has no usable WCS: ", reason);
        hdr = wr_header_text(NULL, 40, 30);
        r = post_job(json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "type", "reproject", "input",
                               c->name, "target", "header", hdr, "output", "name", "r_input"));
        expect_problem("reproject input", &r, 422, "input", prefix, reason);
        free(hdr);
    }
    /* Nothing was queued. */
    tt_resp r = tt_fetch(base, "GET", "/api/v1/jobs", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"id\"") == NULL, "%s", r.body);
    tt_resp_free(&r);
}
END_TEST

/* Runs `tessera ARGS` (a shell command line after the program name) with stderr and
 * stdout into `out`; returns the exit status. */
static int tessera(char *out, size_t len, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", TESSERA_BIN, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Asserts that `tessera ARGS` failed (exit 1) with `prefix` and the reason, and wrote no
 * output at dir/out*. */
static void expect_cli(const char *args, const char *prefix, const char *reason)
{
    char out[4096], want[1024], outp[512];
    int rc = tessera(out, sizeof out, args);
    snprintf(want, sizeof want, "%s%s", prefix, reason);
    ck_assert_msg(rc == 1, "tessera %s: exit %d: %s", args, rc, out);
    ck_assert_msg(strstr(out, want) != NULL, "tessera %s: '%s' lacks '%s'", args, out, want);
    root_path(outp, sizeof outp, "out", ".fits");
    ck_assert_int_eq(access(outp, F_OK), -1);
    root_path(outp, sizeof outp, "out", "");
    ck_assert_int_eq(access(outp, F_OK), -1);
}

START_TEST(test_command_line)
{
    char good[512], ghdr[512], o[512], args[2048], out[4096];
    root_path(good, sizeof good, "good", ".fits");
    root_path(ghdr, sizeof ghdr, "good", ".hdr");
    root_path(o, sizeof o, "out", ".fits");
    snprintf(args, sizeof args, "reproject '%s' --target '%s' -o '%s' --quiet", good, ghdr, o);
    ck_assert_msg(tessera(out, sizeof out, args) == 0, "%s", out);
    ck_assert_int_eq(unlink(o), 0);
    for (int i = 0; i < WR_NCASES; i++) {
        const wr_case *c = &wr_cases[i];
        char reason[512], fits[512], hdr[512], prefix[600], dir[512];
        dataset_reason(c, reason, sizeof reason);
        root_path(fits, sizeof fits, c->name, ".fits");
        root_path(hdr, sizeof hdr, c->name, ".hdr");
        root_path(dir, sizeof dir, "out", "");
        snprintf(prefix, sizeof prefix, "'%s' has no usable WCS: ", fits);
        snprintf(args, sizeof args, "reproject '%s' --target '%s' -o '%s' --quiet", fits, ghdr,
                 o);
        if (!wr_text_only(c))
            expect_cli(args, prefix, reason);
        snprintf(args, sizeof args, "hips '%s' -o '%s' --quiet", fits, dir);
        if (!wr_text_only(c))
            expect_cli(args, prefix, reason);
        snprintf(prefix, sizeof prefix, "input '%s' has no usable WCS: ", fits);
        snprintf(args, sizeof args, "mosaic '%s' '%s' -o '%s' --quiet", good, fits, o);
        if (!wr_text_only(c))
            expect_cli(args, prefix, reason);
        const char *tgt[2] = { hdr, fits };
        for (int k = 0; k < (wr_text_only(c) ? 1 : 2); k++) {
            snprintf(prefix, sizeof prefix, "target '%s' has no usable WCS: ", tgt[k]);
            snprintf(args, sizeof args, "reproject '%s' --target '%s' -o '%s' --quiet", good,
                     tgt[k], o);
            expect_cli(args, prefix, reason);
            snprintf(args, sizeof args, "mosaic '%s' --target '%s' -o '%s' --quiet", good,
                     tgt[k], o);
            expect_cli(args, "the target has no usable WCS: ", reason);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile_wcs");
    TCase *tc = tcase_create("paths");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_dataset_routes);
    tcase_add_test(tc, test_posted_targets);
    tcase_add_test(tc, test_jobs);
    tcase_add_test(tc, test_command_line);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
