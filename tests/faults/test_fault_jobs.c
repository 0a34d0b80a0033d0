/* The job store under injected faults (tests/faults/faultloop.h): open a jobs directory,
 * submit a small mosaic, run its blocks, record them, write the product, close; with
 * every allocation and every file operation failing in turn, transient and persistent.
 * Any failure is a TESS_E* code or a job failed with a reason.  Then, faults off, the
 * directory must reopen; a job that jobs_submit acknowledged must still be there and
 * reach an end, a success with the same product bytes as a run without faults; and a
 * new submission must give the same product again: nothing lost, nothing corrupted. */
#include "engine/base/error.h"
#include "tests/faults/faultloop.h"
#include "tests/faults/jobstore.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static js_fixture F;
static catalog *cat;                 /* this run's (fresh each run, as at a start) */
static char run_id[17];              /* the job the run submitted, "" when refused */
static unsigned char *ref_run, *ref_check;
static size_t ref_run_len, ref_check_len;

/* Waits for the end of job `id` (state into state, 16): at most 30 s, and at most 0.3 s
 * once a fault has been injected (a persistent fault can leave a job that never ends
 * while the runner is open: the check reopens it).  1 when it ended. */
static int wait_run(jobs *J, const char *id, char *state, char *detail, size_t dlen)
{
    double t0 = tt_now_s(), t_fault = -1;
    for (;;) {
        if (js_wait(J, id, 0, state, detail, dlen))
            return 1;
        double now = tt_now_s();
        if (t_fault < 0 && fi_faults() > 0)
            t_fault = now;
        if (now - t0 > 30 * tt_time_scale() || (t_fault >= 0 && now - t_fault > 0.3))
            return 0;
        usleep(5000);
    }
}

/* Submits the small mosaic `name`: 0 and its id, or the job_problem as a code and reason. */
static int submit(jobs *J, const char *name, char *id, char *err, size_t errlen)
{
    char *body = js_small_mosaic(name), *doc = NULL;
    job_problem pb = {0};
    int rc = jobs_submit(J, body, strlen(body), &doc, &pb);
    free(body);
    if (rc != 0) {
        fl_require(pb.status >= 400 && pb.detail[0], "jobs_submit refused the job with "
                   "status %d and no detail", pb.status);
        tess_seterr(err, errlen, "jobs_submit: %d %s", pb.status, pb.detail);
        return pb.status == 503 ? TESS_EAGAIN : pb.status >= 500 ? TESS_EIO : TESS_EINVAL;
    }
    fl_require(js_doc_id(doc, id) == 0, "jobs_submit's document has no id: %s", doc);
    free(doc);
    return 0;
}

static void jf_reset(void *ctx)
{
    (void)ctx;
    char err[512] = "";
    js_clear(&F);
    ck_assert_msg(catalog_open(&F.cfg, &cat, err, sizeof err) == 0, "%s", err);
    run_id[0] = '\0';
}

static int jf_run(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    jobs *J = NULL;
    int rc = jobs_open(F.jobs, &F.cfg, cat, NULL, F.pool, &J, err, errlen);
    if (rc)
        return rc;
    rc = submit(J, "fault_run", run_id, err, errlen);
    if (rc) {
        jobs_close(J);
        return rc;
    }
    char state[16] = "", detail[512] = "";
    int ended = wait_run(J, run_id, state, detail, sizeof detail);
    jobs_close(J);
    if (!ended) {
        tess_seterr(err, errlen, "job %s left %s at close", run_id, state);
        return TESS_EAGAIN;
    }
    if (strcmp(state, "succeeded") == 0)
        return 0;
    fl_require(strcmp(state, "failed") == 0 && detail[0], "job %s ended %s, reason '%s'",
               run_id, state, detail);
    tess_seterr(err, errlen, "job %s failed: %s", run_id, detail);
    return TESS_EIO;
}

/* Job `id` of the reopened store ends; a success gives `want` (len bytes). */
static void require_end(jobs *J, const char *id, const unsigned char *want, size_t len,
                        int may_fail)
{
    char state[16] = "", detail[512] = "";
    ck_assert_msg(js_wait(J, id, 60 * tt_time_scale(), state, detail, sizeof detail),
                  "job %s did not end after reopening (%s)", id, state);
    if (may_fail && strcmp(state, "failed") == 0) {
        ck_assert_msg(detail[0], "job %s failed without a reason", id);
        return;
    }
    ck_assert_msg(strcmp(state, "succeeded") == 0, "job %s ended %s after reopening: %s", id,
                  state, detail);
    size_t n;
    unsigned char *b = js_product(J, id, &n);
    ck_assert_msg(b && n == len && memcmp(b, want, len) == 0,
                  "job %s: the product (%zu bytes) differs from the run without faults (%zu)",
                  id, n, len);
    free(b);
}

static void jf_check(void *ctx, int rc, long faults)
{
    (void)ctx;
    (void)rc;
    (void)faults;
    char err[512] = "";
    jobs *J = NULL;
    ck_assert_msg(jobs_open(F.jobs, &F.cfg, cat, NULL, F.pool, &J, err, sizeof err) == 0,
                  "the jobs directory does not reopen: %s", err);
    char ids[4][17];
    int n = js_ids(J, ids, 4);
    ck_assert_msg(n <= 1, "%d jobs in the store, one submitted", n);
    if (run_id[0])
        ck_assert_msg(n == 1 && strcmp(ids[0], run_id) == 0,
                      "job %s, acknowledged by jobs_submit, is not in the reopened store",
                      run_id);
    /* A job that failed because of a fault stays failed, with its reason; anything
     * else resumes to the product of the run without faults. */
    if (n == 1)
        require_end(J, ids[0], ref_run, ref_run_len, 1);
    char id[17];
    ck_assert_msg(submit(J, "fault_check", id, err, sizeof err) == 0, "%s", err);
    require_end(J, id, ref_check, ref_check_len, 0);
    jobs_close(J);
    ck_assert_msg(js_leftovers(&F) == 0, "work files or temporary products left behind");
    catalog_free(cat);
    cat = NULL;
}

/* Runs take 0.2 to 0.6 s (two jobs, ASan): 60 of the 4800 allocation points and of the
 * 520 I/O points in each loop by default, different ones each time (the seed). */
static const fl_scenario jobs_scenario = {"job store", jf_reset, jf_run, jf_check, NULL, 60};

/* The products of the two submissions without faults. */
static void setup(void)
{
    js_setup(&F, "faultjobs");
    jf_reset(NULL);
    char err[512] = "", id[17], state[16], detail[512];
    jobs *J = NULL;
    ck_assert_msg(jobs_open(F.jobs, &F.cfg, cat, NULL, F.pool, &J, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(submit(J, "fault_run", id, err, sizeof err) == 0, "%s", err);
    ck_assert(js_wait(J, id, 60, state, detail, sizeof detail));
    ck_assert_msg(strcmp(state, "succeeded") == 0, "the mosaic %s: %s", state, detail);
    ref_run = js_product(J, id, &ref_run_len);
    ck_assert_msg(submit(J, "fault_check", id, err, sizeof err) == 0, "%s", err);
    ck_assert(js_wait(J, id, 60, state, detail, sizeof detail));
    ck_assert_msg(strcmp(state, "succeeded") == 0, "the mosaic %s: %s", state, detail);
    ref_check = js_product(J, id, &ref_check_len);
    ck_assert(ref_run && ref_check);
    jobs_close(J);
    catalog_free(cat);
    cat = NULL;
}

static void teardown(void)
{
    free(ref_run);
    free(ref_check);
    js_teardown(&F);
}

START_TEST(test_jobs_alloc)
{
    fl_loop_modes(&jobs_scenario, FI_ALLOC);
}
END_TEST

START_TEST(test_jobs_io)
{
    fl_loop_modes(&jobs_scenario, FI_IO);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault_jobs");
    TCase *tc = tcase_create("alloc");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_jobs_alloc);
    suite_add_tcase(s, tc);
    tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_jobs_io);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
