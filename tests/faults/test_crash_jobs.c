/* Crash tests of the job store: a runner process that ends (_exit, as a crash) at its
 * k-th kill point, for k = 1, 2, ... up to the last of the job: right before and right
 * after each of its commits to the jobs database; and right after jobs_submit
 * acknowledged the job (k = 0).  Then a new runner on the same directory resumes, and the
 * product must be byte for byte that of an uninterrupted run.  The same again with a power loss at each point: what the runner
 * wrote but did not sync is dropped before the restart (tests/faults/faultinj.h, the
 * power-loss model).  A job acknowledged before the end must never be lost.  Last, a
 * job stopped half way whose work directory is then lost resumes to the same product
 * (it starts over).
 *
 * The commits are counted by wrapping SQLite's statement calls at link time (this program
 * links with -Wl,--wrap=sqlite3_exec,--wrap=sqlite3_step): an explicit COMMIT (the record
 * of finished blocks) or a write statement run in autocommit mode (submission, start,
 * progress, result, end) is a commit.  Jobs: the small mosaic, the rechunk of a cube in
 * its two-stage plan (every commit is a kill point), and the mosaic of the six shared
 * tiles (tests/daemon/test_jobs.c's kill -9 test at random points; here at every block
 * record, its progress updates being too many to visit all). */
#include "daemon/jobs/job_stack.h"
#include "engine/base/error.h"
#include "tests/faults/faultinj.h"
#include "tests/faults/jobstore.h"
#include "tests/testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- counting commits -------------------------------------------------------------- */

enum { KILLED = 77, FINISHED = 78 };

static atomic_long g_points;     /* kill points passed */
static long g_kill_at = -1;      /* end the process at this kill point (-1: never) */
static int g_blocks_only;        /* kill points at the records of finished blocks only */

/* A kill point: right before (after = 0) or right after a commit. */
static void kill_point(int block_record, int after)
{
    (void)after;
    if (g_blocks_only && !block_record)
        return;
    long k = atomic_fetch_add(&g_points, 1) + 1;
    if (g_kill_at > 0 && k == g_kill_at)
        _exit(KILLED);
}

int __real_sqlite3_exec(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **),
                        void *arg, char **msg);
int __wrap_sqlite3_exec(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **),
                        void *arg, char **msg);
int __real_sqlite3_step(sqlite3_stmt *st);
int __wrap_sqlite3_step(sqlite3_stmt *st);

int __wrap_sqlite3_exec(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **),
                        void *arg, char **msg)
{
    int commit = strcmp(sql, "COMMIT") == 0;
    if (commit)
        kill_point(1, 0);
    int rc = __real_sqlite3_exec(db, sql, cb, arg, msg);
    if (commit && rc == SQLITE_OK)
        kill_point(1, 1);
    return rc;
}

int __wrap_sqlite3_step(sqlite3_stmt *st)
{
    int commit = !sqlite3_stmt_readonly(st) && sqlite3_get_autocommit(sqlite3_db_handle(st));
    if (commit)
        kill_point(0, 0);
    int rc = __real_sqlite3_step(st);
    if (commit && rc == SQLITE_DONE)
        kill_point(0, 1);
    return rc;
}

/* ---- one run of the runner, in a child process --------------------------------------- */

static js_fixture F;

typedef struct crash_job {
    const char *name;
    char *(*body)(void);
    int blocks_only;          /* kill points: block records only */
    double limit_s;           /* an uninterrupted run takes well under this */
} crash_job;

static char *small_mosaic(void)
{
    return js_small_mosaic("crash_small");
}

static char *big_mosaic(void)
{
    return js_big_mosaic("crash_big");
}

/* What a child reports on its pipe: the job id once acknowledged, then (when the job
 * ended) the number of kill points it passed. */
typedef struct child_report {
    char id[17];
    long points;
} child_report;

/* The child: a runner on F.jobs that ends after kill point k (0: right after the job is
 * acknowledged; -1: never, the job runs to its end), counting the kill points of
 * cj->blocks_only or, with blocks_only set, those of the block records only.  Does not
 * return. */
static void child(const crash_job *cj, long k, int powerloss, int blocks_only, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char err[512] = "";
    if (powerloss && fi_sync_track(F.jobs, F.shadow) != 0)
        _exit(10);
    catalog *cat = NULL;
    pool *p = pool_new(2, 256);
    jobs *J = NULL;
    if (!p || catalog_open(&F.cfg, &cat, err, sizeof err) != 0 ||
        jobs_open(F.jobs, &F.cfg, cat, NULL, p, &J, err, sizeof err) != 0) {
        fprintf(stderr, "crash child: %s\n", err);
        _exit(11);
    }
    g_blocks_only = cj->blocks_only || blocks_only;
    atomic_store(&g_points, 0);
    g_kill_at = k;
    char *body = cj->body(), *doc = NULL;
    job_problem pb = {0};
    child_report rep = {"", 0};
    if (jobs_submit(J, body, strlen(body), &doc, &pb) != 0 || js_doc_id(doc, rep.id) != 0) {
        fprintf(stderr, "crash child: jobs_submit: %d %s\n", pb.status, pb.detail);
        _exit(12);
    }
    if (write(fd, rep.id, sizeof rep.id) != (ssize_t)sizeof rep.id)
        _exit(13);
    if (k == 0)
        _exit(KILLED);
    char state[16], detail[512];
    if (!js_wait(J, rep.id, cj->limit_s * tt_time_scale(), state, detail, sizeof detail) ||
        strcmp(state, "succeeded") != 0) {
        fprintf(stderr, "crash child: the job ended %s: %s\n", state, detail);
        _exit(14);
    }
    /* Kill points passed: the last one (the job's end) comes after js_wait saw it. */
    jobs_close(J);
    rep.points = atomic_load(&g_points);
    if (write(fd, &rep.points, sizeof rep.points) != (ssize_t)sizeof rep.points)
        _exit(13);
    _exit(FINISHED);
}

/* Runs the child to kill point k; returns its exit code, the id it acknowledged ("" when
 * none) and the points it passed (when it finished). */
static int run_child(const crash_job *cj, long k, int powerloss, int blocks_only,
                     child_report *rep)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        child(cj, k, powerloss, blocks_only, pfd[1]);
    }
    close(pfd[1]);
    memset(rep, 0, sizeof *rep);
    ssize_t n = read(pfd[0], rep->id, sizeof rep->id);
    if (n != (ssize_t)sizeof rep->id)
        rep->id[0] = '\0';
    else if (read(pfd[0], &rep->points, sizeof rep->points) != (ssize_t)sizeof rep->points)
        rep->points = 0;
    close(pfd[0]);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws), "%s: the runner died of signal %d at kill point %ld",
                  cj->name, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0, k);
    return WEXITSTATUS(ws);
}

/* A new runner on F.jobs (this process): the job `id` (or, when id is "", whatever job is
 * there) must end succeeded with product `want`.  Returns the state the job was found in
 * at the restart ("" when there was none). */
static void resume(const crash_job *cj, const char *id, const unsigned char *want, size_t len,
                   const char *when, char *found)
{
    char err[512] = "";
    catalog *cat = NULL;
    pool *p = pool_new(2, 256);
    jobs *J = NULL;
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(catalog_open(&F.cfg, &cat, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(jobs_open(F.jobs, &F.cfg, cat, NULL, p, &J, err, sizeof err) == 0,
                  "%s %s: the jobs directory does not reopen: %s", cj->name, when, err);
    char ids[4][17];
    int n = js_ids(J, ids, 4);
    ck_assert_msg(n <= 1, "%s %s: %d jobs in the store, one submitted", cj->name, when, n);
    found[0] = '\0';
    if (id[0])
        ck_assert_msg(n == 1 && strcmp(ids[0], id) == 0,
                      "%s %s: job %s, acknowledged, is lost", cj->name, when, id);
    if (n == 1) {
        char state[16] = "", detail[512] = "";
        js_state(J, ids[0], found, NULL, 0);
        ck_assert_msg(js_wait(J, ids[0], cj->limit_s * tt_time_scale(), state, detail,
                              sizeof detail), "%s %s: the job does not end after the restart",
                      cj->name, when);
        ck_assert_msg(strcmp(state, "succeeded") == 0, "%s %s: the job ended %s: %s", cj->name,
                      when, state, detail);
        size_t got = 0;
        unsigned char *b = js_product(J, ids[0], &got);
        ck_assert_msg(b && got == len && memcmp(b, want, len) == 0,
                      "%s %s: the product (%zu bytes) differs from an uninterrupted run's "
                      "(%zu bytes)", cj->name, when, got, len);
        free(b);
    }
    jobs_close(J);
    ck_assert_msg(js_leftovers(&F) == 0, "%s %s: work files or temporary products left",
                  cj->name, when);
    pool_free(p);
    catalog_free(cat);
}

/* The reference run, then every kill point, without and with a power loss. */
static void crash_all(const crash_job *cj)
{
    double t0 = tt_now_s();
    child_report rep;
    js_clear(&F);
    ck_assert_int_eq(run_child(cj, -1, 0, 0, &rep), FINISHED);
    long points = rep.points;
    /* The product, read back by a runner of this process. */
    unsigned char *ref = NULL;
    size_t len = 0;
    {
        char err[512] = "";
        catalog *cat = NULL;
        pool *p = pool_new(2, 256);
        jobs *J = NULL;
        ck_assert_msg(catalog_open(&F.cfg, &cat, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(jobs_open(F.jobs, &F.cfg, cat, NULL, p, &J, err, sizeof err) == 0, "%s", err);
        ref = js_product(J, rep.id, &len);
        ck_assert_ptr_nonnull(ref);
        jobs_close(J);
        pool_free(p);
        catalog_free(cat);
    }
    /* The number of progress updates varies a little with timing: every point of the
     * reference run is tried, and a run that finishes before its point counts as done. */
    long runs = 0, lost_unacked = 0, finished = 0;
    for (int powerloss = 0; powerloss < 2; powerloss++) {
        for (long k = 0; k <= points; k++) {
            char when[96], found[16];
            snprintf(when, sizeof when, "%s at kill point %ld (%s)",
                     powerloss ? "power loss" : "kill", k,
                     k == 0 ? "acknowledged" : k % 2 ? "before a commit" : "after a commit");
            js_clear(&F);
            int code = run_child(cj, k, powerloss, 0, &rep);
            ck_assert_msg(code == KILLED || code == FINISHED, "%s: the runner exited %d",
                          when, code);
            runs++;
            if (code == FINISHED) {
                ck_assert_msg(k > 0, "%s: the job ended before it was acknowledged", when);
                finished++;
            }
            if (powerloss) {
                char err[512] = "";
                ck_assert_msg(fi_power_loss(F.jobs, F.shadow, err, sizeof err) == 0, "%s: %s",
                              when, err);
            }
            resume(cj, rep.id, ref, len, when, found);
            lost_unacked += !rep.id[0] && !found[0];
            if (getenv("TESSERA_FAULT_VERBOSE"))
                printf("crash: %s, %s: %s; at the restart the job was %s\n", cj->name, when,
                       code == FINISHED ? "finished first" : "stopped",
                       found[0] ? found : "not there");
        }
    }
    ck_assert_msg(finished <= runs / 2, "%s: %ld of %ld runs finished before their kill "
                  "point", cj->name, finished, runs);
    /* Right after the first record of finished blocks, then without the work directory. */
    char when[96], found[16], wd[PATH_MAX + 32];
    snprintf(when, sizeof when, "kill after the first block record, the work directory "
             "removed");
    js_clear(&F);
    if (run_child(cj, 2, 0, 1, &rep) == KILLED && rep.id[0]) {
        snprintf(wd, sizeof wd, "%s/work/%s", F.jobs, rep.id);
        js_rm_rf(wd);
        resume(cj, rep.id, ref, len, when, found);
        runs++;
    }
    printf("crash: %s: %ld kill points (before and after each of the %s), each with a kill "
           "and a power loss: %ld runs (%ld ended before their point), every product the "
           "same (%zu bytes); %ld submissions stopped before the acknowledgement left no "
           "job; %.1f s\n",
           cj->name, points, cj->blocks_only ? "block records" : "commits", runs, finished,
           len, lost_unacked, tt_now_s() - t0);
    fflush(stdout);
    free(ref);
}

static void setup(void)
{
    js_setup(&F, "crashjobs");
    /* The pool of F is not used: runners make their own (a fork keeps no threads). */
    pool_free(F.pool);
    F.pool = NULL;
    /* The rechunk in its two-stage plan (a staging file, then bands), in every process. */
    job_stack_set_band_bytes(1);
}

static void teardown(void)
{
    js_teardown(&F);
    job_stack_set_band_bytes(0);
}

/* ---- the power-loss model itself ------------------------------------------------------ */

static void put_file(const char *dir, const char *name, const char *text, int sync)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    if (sync)
        ck_assert_int_eq(fsync(fd), 0);
    close(fd);
}

/* The content of dir/name, or "-" when there is no such file. */
static const char *file_text(const char *dir, const char *name)
{
    static char buf[256];
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f)
        return "-";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void sync_dir_of(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fsync(fd), 0);
    close(fd);
}

/* What survives: a synced file's synced content; a new entry only once its directory
 * is synced, with the content it had when last synced (none: empty); a removal or a
 * rename only once the directory is synced; everything after syncfs. */
START_TEST(test_powerloss_model)
{
    char *d = F.jobs, sub[PATH_MAX + 8];
    snprintf(sub, sizeof sub, "%s/sub", d);
    put_file(d, "kept", "old", 1);
    put_file(d, "gone", "x", 1);
    ck_assert_int_eq(fi_sync_track(d, F.shadow), 0);   /* all of it synced now */
    put_file(d, "kept", "new, not synced", 0);          /* content back to "old" */
    put_file(d, "new", "never synced", 0);              /* entry not synced: gone */
    put_file(d, "newsynced", "synced", 1);              /* content synced, entry not */
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/gone", d);
    ck_assert_int_eq(unlink(p), 0);                     /* removal not synced: back */
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    put_file(sub, "inner", "i", 1);
    fi_sync_untrack();
    char err[512] = "";
    ck_assert_msg(fi_power_loss(d, F.shadow, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(file_text(d, "kept"), "old");
    ck_assert_str_eq(file_text(d, "new"), "-");
    ck_assert_str_eq(file_text(d, "newsynced"), "-");
    ck_assert_str_eq(file_text(d, "gone"), "x");
    ck_assert_int_eq(access(sub, F_OK), -1);

    /* Entries made durable by the directory's fsync; then syncfs keeps everything. */
    js_clear(&F);
    ck_assert_int_eq(fi_sync_track(d, F.shadow), 0);
    put_file(d, "a", "content synced", 1);
    put_file(d, "b", "content not synced", 0);
    sync_dir_of(d);
    put_file(d, "a", "later", 0);
    fi_sync_untrack();
    ck_assert_int_eq(fi_power_loss(d, F.shadow, err, sizeof err), 0);
    ck_assert_str_eq(file_text(d, "a"), "content synced");
    ck_assert_str_eq(file_text(d, "b"), "");
    js_clear(&F);
    ck_assert_int_eq(fi_sync_track(d, F.shadow), 0);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    put_file(sub, "inner", "i", 0);
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_eq(syncfs(fd), 0);
    close(fd);
    put_file(sub, "inner", "after", 0);
    fi_sync_untrack();
    ck_assert_int_eq(fi_power_loss(d, F.shadow, err, sizeof err), 0);
    ck_assert_str_eq(file_text(sub, "inner"), "i");
}
END_TEST

START_TEST(test_crash_small_mosaic)
{
    static const crash_job cj = {"small mosaic", small_mosaic, 0, 60};
    crash_all(&cj);
}
END_TEST

START_TEST(test_crash_rechunk)
{
    static const crash_job cj = {"rechunk", js_rechunk, 0, 60};
    crash_all(&cj);
}
END_TEST

START_TEST(test_crash_big_mosaic)
{
    static const crash_job cj = {"six-tile mosaic", big_mosaic, 1, 120};
    crash_all(&cj);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crash_jobs");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {{"model", test_powerloss_model}, {"small", test_crash_small_mosaic},
                 {"rechunk", test_crash_rechunk}, {"big", test_crash_big_mosaic}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return tt_run_suite(s);
}
