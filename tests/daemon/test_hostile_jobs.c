/* The job store and job budgets against hostile files and requests, with the server
 * in-process on a temporary jobs directory: a jobs.sqlite with garbage over its pages, a
 * foreign SQLite file or schema (refused at start, left as it was), a lock file deleted
 * under a running server (a second server is still refused), inputs outside the data roots
 * (one answer whether or not something exists there), weak jobs.token values (refused as
 * configuration), a huge target or a huge input (refused before any work file is
 * written), and the memory and disk budgets counted before and while jobs run.  Every FITS
 * file is generated here; the huge ones are sparse. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <jansson.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/jobs.h"
#include "engine/base/error.h"
#include "engine/mosaic/mosaic.h"
#include "tests/daemon/test_jobkind_body.h"
#include "tests/testutil.h"

#define MB 1048576.0

static char top[256];              /* the test's directory */
static char dataroot[300];         /* top/data: the data root */
static char jobsdir[300];          /* top/jobs */
static tess_config cfg;
static tserver *srv;
static char base[64];
static char g_datasets[256];       /* the configuration's "datasets" array ("" none) */

/* ---- a job type whose estimate and writes the body sets ----------------------------
 * {"type": "test_cost", "block_mb": B, "state_mb": S, "work_mb": W, "product_mb": P,
 *  "n": N, "delay_ms": D, "hold": true, "write_mb": X, "product_write_mb": Y,
 *  "output": {"name": NAME}}
 * estimate: the figures given (MB); one stage of N blocks, each waiting D ms (and while
 * "hold" and g_hold are set), then writing X MB into the work directory; finish writes Y MB
 * (at least 1 KB) of product.  The largest number of blocks in flight is counted. */
static volatile int g_hold;
static int g_inflight, g_max_inflight;

typedef struct cost_state {
    long n, delay_ms, write_mb, product_write_mb;
    int hold;
    char wd[PATH_MAX];
} cost_state;

static double num(const json_t *b, const char *key)
{
    json_t *v = json_object_get(b, key);
    return v ? json_number_value(v) : 0.0;
}

static int cost_validate(const json_t *b, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "block_mb", "state_mb", "work_mb", "product_mb",
                                        "n", "delay_ms", "hold", "write_mb", "product_write_mb",
                                        "output", NULL};
    if (jobkind_only_fields(b, known, "", pb))
        return -1;
    json_t *name = json_object_get(json_object_get(b, "output"), "name");
    if (!json_is_string(name)) {
        jobkind_problem(pb, 400, "output.name", "output.name must be a string");
        return -1;
    }
    return jobkind_check_new_name(env, json_string_value(name), "output.name", pb);
}

static int cost_estimate(const void *b, const job_env *env, job_cost *c, job_problem *pb)
{
    (void)env;
    (void)pb;
    memset(c, 0, sizeof *c);
    c->block_bytes = num(b, "block_mb") * MB;
    c->state_bytes = num(b, "state_mb") * MB;
    c->work_bytes = num(b, "work_mb") * MB;
    c->product_bytes = num(b, "product_mb") * MB;
    snprintf(c->what, sizeof c->what, "a test block");
    return 0;
}

static int cost_plan(const void *b, const job_env *env, const char *wd, job_plan *out,
                     char *err, size_t errlen)
{
    (void)env;
    (void)err;
    (void)errlen;
    cost_state *s = calloc(1, sizeof *s);
    s->n = (long)num(b, "n");
    if (s->n < 1)
        s->n = 1;
    s->delay_ms = (long)num(b, "delay_ms");
    s->write_mb = (long)num(b, "write_mb");
    s->product_write_mb = (long)num(b, "product_write_mb");
    s->hold = json_is_true(json_object_get(b, "hold"));
    snprintf(s->wd, sizeof s->wd, "%s", wd);
    out->nstages = 1;
    out->nblocks[0] = s->n;
    out->state = s;
    return 0;
}

/* Writes `mb` MB of real bytes (no holes) into path. */
static int write_mb(const char *path, long mb)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    static char chunk[65536];
    memset(chunk, 0x5a, sizeof chunk);
    long n = mb > 0 ? mb * 16 : 0;
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++)
        rc = write(fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk ? 0 : -1;
    if (mb <= 0 && write(fd, chunk, 1024) != 1024)
        rc = -1;
    return close(fd) == 0 ? rc : -1;
}

static int cost_run(void *state, int stage, long block, const volatile int *cancel, char *err,
                    size_t errlen)
{
    (void)stage;
    cost_state *s = state;
    int now = __atomic_add_fetch(&g_inflight, 1, __ATOMIC_SEQ_CST);
    int seen = __atomic_load_n(&g_max_inflight, __ATOMIC_SEQ_CST);
    while (now > seen &&
           !__atomic_compare_exchange_n(&g_max_inflight, &seen, now, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
        ;
    int rc = 0;
    for (long t = 0; rc == 0 && (t < s->delay_ms || (s->hold && g_hold)); t += 5) {
        if (*cancel)
            rc = TESS_ECANCELED;
        else
            usleep(5000);
    }
    if (rc == 0 && s->write_mb > 0) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/b%ld", s->wd, block);
        if (write_mb(path, s->write_mb) != 0) {
            tess_seterr(err, errlen, "cannot write %s", path);
            rc = TESS_EIO;
        }
    }
    __atomic_sub_fetch(&g_inflight, 1, __ATOMIC_SEQ_CST);
    return rc;
}

static int cost_finish(void *state, const char *tmp, job_product *prod, char *err,
                       size_t errlen)
{
    cost_state *s = state;
    memset(prod, 0, sizeof *prod);
    snprintf(prod->content_type, sizeof prod->content_type, "application/octet-stream");
    if (write_mb(tmp, s->product_write_mb) != 0) {
        tess_seterr(err, errlen, "cannot write the product");
        return TESS_EIO;
    }
    return 0;
}

static void cost_release(void *state)
{
    free(state);
}

static int cost_parse(const json_t *b, const job_env *env, int accepted, void **req,
                    job_problem *pb)
{
    (void)accepted;
    return tt_body_request(b, env, req, pb, cost_validate);
}

static const job_kind cost_kind = {
    .type = "test_cost",
    .parse = cost_parse,
    .req_free = tt_body_request_free,
    .plan = cost_plan,
    .run_block = cost_run,
    .finish = cost_finish,
    .release = cost_release,
    .estimate = cost_estimate,
};

/* ---- FITS files ----------------------------------------------------------------------- */

/* An 80-character card "KEY = value" into h (2880 * k bytes, blank-filled) at card i. */
static void card(char *h, int i, const char *key, const char *value)
{
    char c[160];
    int n = snprintf(c, sizeof c, "%-8.8s= %s", key, value);
    memcpy(h + 80 * i, c, n < 80 ? (size_t)n : 80);
}

/* A BITPIX -32 image of nx x ny pixels with a TAN WCS centred on (10, 20) degrees at
 * `cdelt` degrees a pixel, its data unit left as a hole (zeros: sparse when large). */
static void make_fits(const char *path, long nx, long ny, double cdelt)
{
    char h[2880], v[72];
    memset(h, ' ', sizeof h);
    int i = 0;
    card(h, i++, "SIMPLE", "                   T");
    card(h, i++, "BITPIX", "                 -32");
    card(h, i++, "NAXIS", "                   2");
    snprintf(v, sizeof v, "%20ld", nx);
    card(h, i++, "NAXIS1", v);
    snprintf(v, sizeof v, "%20ld", ny);
    card(h, i++, "NAXIS2", v);
    card(h, i++, "CTYPE1", "'RA---TAN'");
    card(h, i++, "CTYPE2", "'DEC--TAN'");
    card(h, i++, "CRVAL1", "                10.0");
    card(h, i++, "CRVAL2", "                20.0");
    snprintf(v, sizeof v, "%20.1f", (double)nx / 2 + 0.5);
    card(h, i++, "CRPIX1", v);
    snprintf(v, sizeof v, "%20.1f", (double)ny / 2 + 0.5);
    card(h, i++, "CRPIX2", v);
    snprintf(v, sizeof v, "%20.12g", -cdelt);
    card(h, i++, "CDELT1", v);
    snprintf(v, sizeof v, "%20.12g", cdelt);
    card(h, i++, "CDELT2", v);
    memcpy(h + 80 * i, "END", 3);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq((int)write(fd, h, sizeof h), (int)sizeof h);
    off_t data = (off_t)nx * ny * 4;
    ck_assert_int_eq(ftruncate(fd, (off_t)sizeof h + (data + 2879) / 2880 * 2880), 0);
    close(fd);
}

/* A target header of nx x ny pixels of `cdelt` degrees centred on (10, 20). */
static char *target_header(long nx, long ny, double cdelt)
{
    char *t = malloc(1024);
    snprintf(t, 1024,
             "NAXIS   = 2\nNAXIS1  = %ld\nNAXIS2  = %ld\nCTYPE1  = 'RA---TAN'\n"
             "CTYPE2  = 'DEC--TAN'\nCRVAL1  = 10.0\nCRVAL2  = 20.0\nCRPIX1  = %.1f\n"
             "CRPIX2  = %.1f\nCDELT1  = %.12g\nCDELT2  = %.12g\nEND\n",
             nx, ny, (double)nx / 2 + 0.5, (double)ny / 2 + 0.5, -cdelt, cdelt);
    return t;
}

/* ---- the server --------------------------------------------------------------------- */

/* The configuration: listen on a free port, 2 threads (or `threads`), the data root, and
 * jobs in jobsdir with the members of `jobs_extra` (JSON text after "dir", may be ""). */
static int load_config(tess_config *c, const char *jobs_extra, int threads, char *err,
                       size_t errlen)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"listen\": \"127.0.0.1:0\", \"threads\": %d, \"data_roots\": [\"%s\"], "
             "\"jobs\": {\"dir\": \"%s\"%s%s}%s%s}",
             threads, dataroot, jobsdir, jobs_extra[0] ? ", " : "", jobs_extra,
             g_datasets[0] ? ", \"datasets\": " : "", g_datasets);
    ck_assert_int_eq(config_init(c), 0);
    return config_load_text(text, c, err, errlen);
}

/* Starts the server; returns tserver_start's code (0, or the reason in err). */
static int try_start(const char *jobs_extra, int threads, char *err, size_t errlen)
{
    int rc = load_config(&cfg, jobs_extra, threads, err, errlen);
    ck_assert_msg(rc == 0, "configuration: %s", err);
    ck_assert_int_eq(jobs_register_kind(&cost_kind), 0);
    rc = tserver_start(&cfg, &srv, err, errlen);
    if (rc) {
        srv = NULL;
        config_release(&cfg);
        return rc;
    }
    snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
    return 0;
}

static void start(const char *jobs_extra, int threads)
{
    char err[1024];
    ck_assert_msg(try_start(jobs_extra, threads, err, sizeof err) == 0, "start: %s", err);
}

static void stop(void)
{
    if (srv) {
        tserver_stop(srv, 5);
        config_release(&cfg);
        srv = NULL;
    }
}

static void setup(void)
{
    tt_tmpdir_make(top, sizeof top, "hjobs");
    snprintf(dataroot, sizeof dataroot, "%s/data", top);
    snprintf(jobsdir, sizeof jobsdir, "%s/jobs", top);
    ck_assert_int_eq(mkdir(dataroot, 0755), 0);
    char *real = realpath(dataroot, NULL);
    snprintf(dataroot, sizeof dataroot, "%s", real);
    free(real);
    g_hold = 0;
    g_inflight = g_max_inflight = 0;
    g_datasets[0] = 0;
}

static void teardown(void)
{
    g_hold = 0;
    stop();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    ck_assert_int_eq(system(cmd), 0);
}

/* POSTs a job body; returns the answer (status checked by the caller). */
static tt_resp post(const char *body)
{
    return tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body),
                    "Content-Type: application/json");
}

/* POSTs and expects 202; the job's id into id (17 bytes). */
static void submit(const char *body, char *id)
{
    tt_resp r = post(body);
    ck_assert_msg(r.status == 202, "POST %s: %ld %s", body, r.status, r.body ? r.body : "");
    json_t *j = json_loads(r.body, 0, NULL);
    snprintf(id, 17, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    tt_resp_free(&r);
}

/* Polls job id until it leaves queued and running; returns its document. */
static json_t *wait_end(const char *id)
{
    char path[64];
    snprintf(path, sizeof path, "/api/v1/jobs/%s", id);
    double t0 = tt_now_s(), limit = 60 * tt_time_scale();
    for (;;) {
        tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
        ck_assert_int_eq(r.status, 200);
        json_t *j = json_loads(r.body, 0, NULL);
        tt_resp_free(&r);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (strcmp(st, "queued") != 0 && strcmp(st, "running") != 0)
            return j;
        json_decref(j);
        ck_assert_msg(tt_now_s() - t0 < limit, "job %s did not end", id);
        usleep(20000);
    }
}

/* Asserts a 413 problem whose detail holds every NULL-terminated string of `want`. */
static void assert_413(const tt_resp *r, const char *const *want)
{
    tt_assert_problem("/api/v1/jobs", r, 413, NULL);
    json_t *j = json_loads(r->body, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "detail"));
    for (int i = 0; want[i]; i++)
        ck_assert_msg(d && strstr(d, want[i]), "detail lacks '%s': %s", want[i], d ? d : "");
    printf("413: %s\n", d);
    json_decref(j);
}

static long entries(const char *sub)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", jobsdir, sub);
    return tt_count_entries(p);
}

/* The whole content of a file (malloc'd), its size into *n. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)len + 1);
    ck_assert_int_eq((long)fread(d, 1, (size_t)len, f), len);
    fclose(f);
    *n = (size_t)len;
    return d;
}

/* Runs SQL on a new SQLite file at path (no journal left behind). */
static void make_db(const char *path, const char *sql)
{
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s", msg);
    sqlite3_close(db);
}

/* Starting on jobsdir/jobs.sqlite as it is must fail with every string of `want` in the
 * reason, and leave the file byte for byte as it was. */
static void assert_refused_unchanged(const char *const *want)
{
    char db[PATH_MAX], err[1024] = "";
    snprintf(db, sizeof db, "%s/jobs.sqlite", jobsdir);
    size_t n0, n1;
    unsigned char *before = slurp(db, &n0);
    int rc = try_start("", 2, err, sizeof err);
    if (rc == 0)
        stop();
    ck_assert_msg(rc != 0, "the server started on the store");
    printf("refused: %s\n", err);
    for (int i = 0; want[i]; i++)
        ck_assert_msg(strstr(err, want[i]), "reason lacks '%s': %s", want[i], err);
    unsigned char *after = slurp(db, &n1);
    ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "the store was modified");
    free(before);
    free(after);
}

/* ---- F19: the store ----------------------------------------------------------------- */

START_TEST(test_corrupt_store_refused)
{
    /* A real store: three finished jobs. */
    start("", 2);
    for (int i = 0; i < 3; i++) {
        char body[256], id[17];
        snprintf(body, sizeof body, "{\"type\": \"test_cost\", \"output\": {\"name\": \"c%d\"}}", i);
        submit(body, id);
        json_t *j = wait_end(id);
        ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
        json_decref(j);
    }
    stop();
    char db[PATH_MAX];
    snprintf(db, sizeof db, "%s/jobs.sqlite", jobsdir);
    struct stat st;
    ck_assert_int_eq(stat(db, &st), 0);
    ck_assert_msg(st.st_size >= 3 * 4096, "store of %lld bytes", (long long)st.st_size);
    /* Garbage over page 2 (the jobs table). */
    int fd = open(db, O_WRONLY);
    unsigned char junk[4096];
    for (int i = 0; i < 4096; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    ck_assert_int_eq((int)pwrite(fd, junk, sizeof junk, 4096), 4096);
    close(fd);
    static const char *const want[] = {"jobs.sqlite", "damaged", "malformed", NULL};
    assert_refused_unchanged(want);
    /* Garbage over the header: not an SQLite file any more. */
    fd = open(db, O_WRONLY);
    ck_assert_int_eq((int)pwrite(fd, junk, 100, 0), 100);
    close(fd);
    static const char *const want2[] = {"jobs.sqlite", "not a Tessera job store", NULL};
    assert_refused_unchanged(want2);
}
END_TEST

START_TEST(test_foreign_store_refused)
{
    char db[PATH_MAX];
    snprintf(db, sizeof db, "%s/jobs.sqlite", jobsdir);
    ck_assert_int_eq(mkdir(jobsdir, 0755), 0);
    /* Someone else's database. */
    make_db(db, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); "
                "INSERT INTO photos (name) VALUES ('m31.jpg');");
    static const char *const w1[] = {"not a Tessera job store (table jobs missing)", NULL};
    assert_refused_unchanged(w1);
    /* A "jobs" table of another shape. */
    unlink(db);
    make_db(db, "CREATE TABLE jobs (id TEXT, owner TEXT); CREATE TABLE blocks (x);");
    static const char *const w2[] = {"not a Tessera job store (table jobs has no column seq)",
                                     NULL};
    assert_refused_unchanged(w2);
    /* Another application's file format (application_id), our tables or not. */
    unlink(db);
    make_db(db, "PRAGMA application_id = 305419896; CREATE TABLE t (x);");
    static const char *const w3[] = {"application_id 0x12345678", NULL};
    assert_refused_unchanged(w3);
    /* A store of a newer schema. */
    unlink(db);
    make_db(db, "CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER, type TEXT, state TEXT, "
                "body TEXT, created REAL, started REAL, finished REAL, done INTEGER, "
                "total INTEGER, error TEXT, result TEXT, product_dataset TEXT, attach_to TEXT, "
                "content_type TEXT, run_done0 INTEGER, run_t0 REAL, disk_need REAL); "
                "CREATE TABLE blocks (job TEXT, stage INTEGER, block INTEGER); "
                "PRAGMA user_version = 7;");
    static const char *const w4[] = {"newer tesserad", "schema version 7", NULL};
    assert_refused_unchanged(w4);
    /* Not a database at all. */
    unlink(db);
    FILE *f = fopen(db, "w");
    for (int i = 0; i < 200; i++)
        fputs("this is a text file, not a database\n", f);
    fclose(f);
    static const char *const w5[] = {"not a Tessera job store", NULL};
    assert_refused_unchanged(w5);
}
END_TEST

/* A store of the first releases (user_version 0, the tables as they made them) is
 * upgraded in place and keeps its jobs. */
START_TEST(test_old_store_upgraded)
{
    char db[PATH_MAX];
    snprintf(db, sizeof db, "%s/jobs.sqlite", jobsdir);
    ck_assert_int_eq(mkdir(jobsdir, 0755), 0);
    make_db(db, "PRAGMA journal_mode = WAL; "
                "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER, "
                "type TEXT NOT NULL, state TEXT NOT NULL, body TEXT NOT NULL, "
                "created REAL, started REAL, finished REAL, done INTEGER, "
                "total INTEGER, error TEXT, result TEXT, product_dataset TEXT, "
                "attach_to TEXT, content_type TEXT, run_done0 INTEGER, run_t0 REAL); "
                "CREATE TABLE IF NOT EXISTS blocks (job TEXT, stage INTEGER, "
                "block INTEGER, PRIMARY KEY (job, stage, block)) WITHOUT ROWID; "
                "INSERT INTO jobs (id, seq, type, state, body, created, done, total) VALUES "
                "('0123456789abcdef', 1, 'test_cost', 'failed', '{}', 1.0, 0, 0);");
    start("", 2);
    tt_resp r = tt_fetch(base, "GET", "/api/v1/jobs/0123456789abcdef", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
    char id[17];
    submit("{\"type\": \"test_cost\", \"work_mb\": 1, \"output\": {\"name\": \"u1\"}}", id);
    json_t *j = wait_end(id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    stop();
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
    /* And it opens again. */
    start("", 2);
}
END_TEST

/* ---- F18: the lock -------------------------------------------------------------------- */

START_TEST(test_deleted_lock_still_refuses)
{
    start("", 2);
    char lock[PATH_MAX], err[1024] = "";
    snprintf(lock, sizeof lock, "%s/lock", jobsdir);
    ck_assert_int_eq(unlink(lock), 0);
    /* A second server on the same directory, its lock file gone. */
    tess_config c2;
    ck_assert_int_eq(load_config(&c2, "", 2, err, sizeof err), 0);
    tserver *s2 = NULL;
    int rc = tserver_start(&c2, &s2, err, sizeof err);
    if (rc == 0)
        tserver_stop(s2, 1);
    config_release(&c2);
    ck_assert_msg(rc != 0, "a second server started on the jobs directory");
    printf("second server: %s\n", err);
    ck_assert_ptr_nonnull(strstr(err, "in use by another server"));
    /* The first takes its lock file again when it takes a job. */
    char id[17];
    submit("{\"type\": \"test_cost\", \"output\": {\"name\": \"l1\"}}", id);
    json_decref(wait_end(id));
    size_t n;
    unsigned char *pid = slurp(lock, &n);
    ck_assert_int_eq(atol((const char *)pid), (long)getpid());
    free(pid);
    /* A lock file replaced by one another process holds: no more jobs here. */
    ck_assert_int_eq(unlink(lock), 0);
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    tt_resp r = post("{\"type\": \"test_cost\", \"output\": {\"name\": \"l2\"}}");
    tt_assert_problem("/api/v1/jobs", &r, 503, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "lock file"));
    tt_resp_free(&r);
    close(fd);
}
END_TEST

/* ---- F17: no oracle outside the roots -------------------------------------------------- */

/* The answer to a mosaic of input `in`: status and detail (malloc'd). */
static long probe(const char *in, char **detail, double *secs)
{
    json_t *b = json_pack("{s:s, s:[s], s:{s:{}}, s:{s:s}}", "type", "mosaic", "inputs", in,
                          "target", "auto", "output", "name", "probe");
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    double t0 = tt_now_s();
    tt_resp r = post(s);
    *secs = tt_now_s() - t0;
    free(s);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "detail"));
    const char *p = json_string_value(json_object_get(j, "parameter"));
    ck_assert_msg(p && strcmp(p, "inputs[0]") == 0, "%s: parameter %s", in, p ? p : "none");
    *detail = strdup(d ? d : "");
    json_decref(j);
    long status = r.status;
    tt_resp_free(&r);
    return status;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

START_TEST(test_outside_roots_one_answer)
{
    start("", 2);
    char link[PATH_MAX], missing_in[PATH_MAX], escape[PATH_MAX];
    snprintf(link, sizeof link, "%s/link.fits", dataroot);
    ck_assert_int_eq(symlink("/etc/passwd", link), 0);
    snprintf(missing_in, sizeof missing_in, "%s/missing.fits", dataroot);
    snprintf(escape, sizeof escape, "%s/../jobs/jobs.sqlite", dataroot);
    const char *probes[] = {"/etc/passwd", "/etc/no-such-file-here.fits", missing_in,
                            "../../../../../etc/passwd", link, escape, "/", "no_such_name"};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        char *d;
        double t;
        long st = probe(probes[i], &d, &t);
        char want[PATH_MAX + 80];
        snprintf(want, sizeof want, "no dataset or file under a data root named '%s'",
                 probes[i]);
        printf("%s: %ld %s\n", probes[i], st, d);
        ck_assert_msg(st == 404, "%s: %ld %s", probes[i], st, d);
        ck_assert_str_eq(d, want);
        free(d);
    }
    /* And in the same time, whether the file outside exists or not. */
    enum { N = 25 };
    double te[N], tm[N];
    for (int i = 0; i < N; i++) {
        char *d;
        probe("/etc/passwd", &d, &te[i]);
        free(d);
        probe("/etc/no-such-file-here.fits", &d, &tm[i]);
        free(d);
    }
    qsort(te, N, sizeof(double), cmp_double);
    qsort(tm, N, sizeof(double), cmp_double);
    double diff = te[N / 2] - tm[N / 2];
    printf("median answer: existing %.1f us, missing %.1f us\n", te[N / 2] * 1e6,
           tm[N / 2] * 1e6);
    ck_assert_msg(diff < 0.002 * tt_time_scale() && diff > -0.002 * tt_time_scale(),
                  "medians differ by %.1f us", diff * 1e6);
}
END_TEST

/* ---- F21: the token ------------------------------------------------------------------- */

static int load_jobs(const char *jobs_json, char *err, size_t errlen)
{
    tess_config c;
    int rc = load_config(&c, jobs_json, 2, err, errlen);
    config_release(&c);
    return rc;
}

START_TEST(test_weak_token_refused)
{
    char err[512];
    static const struct {
        const char *json;
        const char *why;
    } bad[] = {
        {"\"token\": \"\"", "jobs.token is empty"},
        {"\"token\": \"   \\t \"", "jobs.token is empty"},
        {"\"token\": \"s3cret\"", "jobs.token has 6 characters: at least 16"},
        {"\"token\": \"a token with spaces in it\"", "jobs.token may hold only visible ASCII"},
        {"\"token\": \"0123456789abcdef\\u00e9\"", "jobs.token may hold only visible"},
        {"\"memory_mb\": 8", "jobs.memory_mb must be between 16"},
        {"\"max_product_mb\": 0", "jobs.max_product_mb must be between 1"},
        {"\"disk_mb\": -1", "jobs.disk_mb must be between 0"},
        /* "" would be libpq's default socket and user: never what was meant */
        {"\"database\": \"\"", "jobs.database must not be empty"},
        {"\"database\": \" \\t\"", "jobs.database must not be empty"},
        {"\"database_timeout_s\": 0", "jobs.database_timeout_s must be between 1 and 600"},
        {"\"database_timeout_s\": 1.5", "jobs.database_timeout_s must be an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = load_jobs(bad[i].json, err, sizeof err);
        printf("%s: %s\n", bad[i].json, err);
        ck_assert_msg(rc == TESS_EINVAL, "%s accepted", bad[i].json);
        ck_assert_msg(strstr(err, bad[i].why), "%s: %s", bad[i].json, err);
    }
    ck_assert_int_eq(load_jobs("\"token\": \"0123456789abcdef\"", err, sizeof err), 0);
    ck_assert_int_eq(load_jobs("\"token\": null", err, sizeof err), 0);
    ck_assert_int_eq(load_jobs("\"database\": null, \"database_timeout_s\": 600", err,
                               sizeof err), 0);
    ck_assert_int_eq(load_jobs("\"memory_mb\": 16, \"max_product_mb\": 1, \"disk_mb\": 0", err,
                               sizeof err), 0);
}
END_TEST

/* ---- F20 and F2: huge jobs refused before any work file ------------------------------ */

START_TEST(test_huge_target_refused)
{
    char in[PATH_MAX];
    snprintf(in, sizeof in, "%s/small.fits", dataroot);
    make_fits(in, 64, 64, 1e-3);
    start("", 2);
    /* 46000 x 46000 pixels: 16 GB of product (two float32 HDUs). */
    char *t = target_header(46000, 46000, 2e-6);
    json_t *b = json_pack("{s:s, s:[s], s:{s:s}, s:{s:s}}", "type", "mosaic", "inputs", in,
                          "target", "header", t, "output", "name", "huge");
    char *s = json_dumps(b, JSON_COMPACT);
    tt_resp r = post(s);
    static const char *const want[] = {"jobs.max_product_mb = 8192", "16144 MB", NULL};
    assert_413(&r, want);
    tt_resp_free(&r);
    json_decref(b);
    free(s);
    free(t);
    ck_assert_int_eq(entries("work"), 0);
    ck_assert_int_eq(entries("results"), 0);
    r = tt_fetch(base, "GET", "/api/v1/jobs", NULL, 0, NULL);
    ck_assert_str_eq(r.body, "[]");
    tt_resp_free(&r);
}
END_TEST

START_TEST(test_huge_input_refused)
{
    /* A valid 32768 x 32768 float32 image (4 GB, sparse) at 1e-5 degrees a pixel, onto a
     * 32 x 32 target of 0.01 degrees: one output row reads 1024 input rows of 32768
     * pixels, 128 MB, over a memory budget of 64 MB. */
    char in[PATH_MAX];
    snprintf(in, sizeof in, "%s/huge.fits", dataroot);
    make_fits(in, 32768, 32768, 1e-5);
    start("\"memory_mb\": 64", 2);
    char *t = target_header(32, 32, 0.01);
    json_t *b = json_pack("{s:s, s:[s], s:{s:s}, s:{s:s}}", "type", "mosaic", "inputs", in,
                          "target", "header", t, "output", "name", "hugein");
    char *s = json_dumps(b, JSON_COMPACT);
    tt_resp r = post(s);
    static const char *const want[] = {"jobs.memory_mb = 64", "reprojection of input", NULL};
    assert_413(&r, want);
    tt_resp_free(&r);
    json_decref(b);
    free(s);
    free(t);
    ck_assert_int_eq(entries("work"), 0);
}
END_TEST

/* ---- a large submission does not hold the HTTP threads --------------------------------
 * A mosaic of 10,000 inputs (hard links to one small FITS file) is validated and
 * estimated by reading every input's header: seconds of work, which once ran on one of the
 * two HTTP threads (3.3 s), so that requests on that thread waited.  Now the handler hands
 * it to the pool: while it is being submitted, slices keep answering fast, and the
 * submission still answers 202 (or a 4xx naming the field). */
typedef struct big_submit {
    const char *body;
    tt_resp r;
    double seconds;
    int done;                 /* set (atomic) once r and seconds are */
} big_submit;

static void *big_submit_main(void *arg)
{
    big_submit *b = arg;
    double t0 = tt_now_s();
    b->r = post(b->body);
    b->seconds = tt_now_s() - t0;
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Submits the body from another thread while this one asks for small slices of dataset
 * "small"; returns the submission's answer and fails when a slice took longer than
 * `bound` seconds or failed. */
static tt_resp submit_while_slicing(const char *body, double bound, const char *what)
{
    big_submit b = { body, {0}, 0, 0 };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, big_submit_main, &b), 0);
    double worst = 0, total = 0;
    int n = 0, done = 0;
    while (!done || n < 5) {
        char path[96];
        snprintf(path, sizeof path, "/api/v1/datasets/small/slice/xy/%d_%d/0_0_0.raw",
                 8 + n % 48, 8 + n % 48);
        double t0 = tt_now_s();
        tt_resp s = tt_fetch(base, "GET", path, NULL, 0, NULL);
        double dt = tt_now_s() - t0;
        ck_assert_msg(s.status == 200, "%s: %s: %ld %s", what, path, s.status,
                      s.body ? s.body : "");
        tt_resp_free(&s);
        worst = dt > worst ? dt : worst;
        total += dt;
        n++;
        done = __atomic_load_n(&b.done, __ATOMIC_ACQUIRE);
        usleep(20000);
    }
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    printf("%s: submission %.3f s; %d slices meanwhile, mean %.1f ms, worst %.1f ms\n", what,
           b.seconds, n, 1e3 * total / n, 1e3 * worst);
    ck_assert_msg(worst < bound, "%s: a slice took %.3f s while the submission ran (%.3f s)",
                  what, worst, b.seconds);
    return b.r;
}

START_TEST(test_many_inputs_leave_http_free)
{
    char small[PATH_MAX], dir[PATH_MAX];
    snprintf(small, sizeof small, "%s/small.fits", dataroot);
    make_fits(small, 64, 64, 1e-3);
    snprintf(dir, sizeof dir, "%s/in", dataroot);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    int n = tt_under_valgrind() ? 300 : 10000;
    json_t *in = json_array();
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX], rel[32];
        snprintf(rel, sizeof rel, "in/f%05d.fits", i);
        snprintf(p, sizeof p, "%s/%s", dataroot, rel);
        ck_assert_int_eq(link(small, p), 0);
        json_array_append_new(in, json_string(rel));
    }
    snprintf(g_datasets, sizeof g_datasets, "[{\"name\": \"small\", \"path\": \"small.fits\"}]");
    start("", 2);
    double bound = 1.0 * tt_time_scale();

    /* A missing last input: 404 naming inputs[n-1], after the others were looked at. */
    json_t *bad = json_deep_copy(in);
    json_array_set_new(bad, (size_t)n - 1, json_string("in/missing.fits"));
    json_t *b = json_pack("{s:s, s:o, s:{s:s}}", "type", "mosaic", "inputs", bad,
                          "output", "name", "many_bad");
    char *s = json_dumps(b, JSON_COMPACT);
    tt_resp r = submit_while_slicing(s, bound, "a missing last input");
    char field[32];
    snprintf(field, sizeof field, "inputs[%d]", n - 1);
    tt_assert_problem("POST /api/v1/jobs", &r, 404, field);
    tt_resp_free(&r);
    json_decref(b);
    free(s);

    /* The whole list: accepted (every header read for the automatic target and the
     * estimate), then cancelled before it runs far. */
    b = json_pack("{s:s, s:O, s:{s:s}}", "type", "mosaic", "inputs", in, "output", "name",
                  "many");
    s = json_dumps(b, JSON_COMPACT);
    r = submit_while_slicing(s, bound, "10,000 inputs");
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body ? r.body : "");
    ck_assert_msg(strncmp(r.location, "/api/v1/jobs/", 13) == 0, "Location %s", r.location);
    tt_resp c = tt_fetch(base, "DELETE", r.location, NULL, 0, NULL);
    ck_assert_int_eq(c.status, 200);
    tt_resp_free(&c);
    tt_resp_free(&r);
    json_decref(b);
    json_decref(in);
    free(s);
}
END_TEST

/* The peak resident memory of this process (VmHWM) after clearing it, in bytes. */
static double peak_rss(int reset)
{
    if (reset) {
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (f) {
            fputs("5", f);
            fclose(f);
        }
    }
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atof(line + 6);
    if (f)
        fclose(f);
    return kb * 1024.0;
}

/* A large valid input's bands are short enough that a block reads at most about 64 MB,
 * whatever the scale between input and target, and a block over the limit given fails
 * before it allocates. */
START_TEST(test_large_input_blocks_bounded)
{
    char in[PATH_MAX], work[PATH_MAX], err[512];
    snprintf(in, sizeof in, "%s/large.fits", dataroot);
    make_fits(in, 32768, 32768, 1e-5);
    char *t = target_header(512, 512, 6.4e-4);
    char *cards = NULL;
    int nk = 0;
    ck_assert_int_eq(mos_cards_from_text(t, strlen(t), &cards, &nk, err, sizeof err), 0);
    mos_input mi = {in, "large.fits", 0, 0.0};
    mos_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.ninputs = 1;
    sp.inputs = &mi;
    sp.target_cards = cards;
    sp.target_nkeys = nk;
    sp.method = RP_BILINEAR;
    sp.combine = MOS_MEAN;
    mosaic *m = NULL;
    ck_assert_msg(mos_plan(&sp, NULL, 2, &m, err, sizeof err) == 0, "%s", err);
    mos_cost c;
    mos_estimate(m, &c);
    printf("large input: %ld blocks, block %.1f MB (%s), work %.1f MB, product %.1f MB\n",
           mos_nblocks(m, 0), c.block_bytes / MB, c.block_what, c.work_bytes / MB,
           c.product_bytes / MB);
    /* Before: 64 rows a band, 4096 input rows of 32768 pixels (512 MB) a block. */
    ck_assert_msg(c.block_bytes < 100 * MB, "block of %.0f MB", c.block_bytes / MB);
    ck_assert_msg(mos_nblocks(m, 0) > 8, "%ld reprojection blocks", mos_nblocks(m, 0));
    ck_assert(c.product_bytes >= 2.0 * 512 * 512 * 4);
    mos_free(m);
    /* One block, run: its memory stays near the estimate. */
    snprintf(work, sizeof work, "%s/work", top);
    ck_assert_int_eq(mkdir(work, 0755), 0);
    sp.max_block_bytes = c.block_bytes;
    ck_assert_msg(mos_plan(&sp, work, 2, &m, err, sizeof err) == 0, "%s", err);
    double before = peak_rss(1);
    ck_assert_msg(mos_run_block(m, 0, 0, NULL, err, sizeof err) == 0, "%s", err);
    double grew = peak_rss(0) - before;
    printf("one block: resident memory grew by %.1f MB\n", grew / MB);
    if (!tt_under_valgrind())
        ck_assert_msg(grew < 1.5 * c.block_bytes, "grew by %.0f MB", grew / MB);
    mos_free(m);
    /* Under a smaller limit the block fails at once. */
    sp.max_block_bytes = 16 * MB;
    ck_assert_msg(mos_plan(&sp, work, 2, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(mos_run_block(m, 0, 1, NULL, err, sizeof err), TESS_ETOOBIG);
    printf("limited block: %s\n", err);
    ck_assert_ptr_nonnull(strstr(err, "more than the 16 MB a block may use"));
    mos_free(m);
    free(cards);
    free(t);
}
END_TEST

/* ---- F20: the budgets counted ------------------------------------------------------- */

START_TEST(test_budgets_counted)
{
    start("\"disk_mb\": 100, \"max_product_mb\": 50, \"memory_mb\": 256", 4);
    char a[17], b[17], id[17];
    g_hold = 1;
    submit("{\"type\": \"test_cost\", \"work_mb\": 40, \"product_mb\": 10, \"hold\": true, "
           "\"output\": {\"name\": \"a\"}}", a);
    submit("{\"type\": \"test_cost\", \"work_mb\": 20, \"product_mb\": 50, \"output\": "
           "{\"name\": \"b\"}}", b);
    /* 40 + 50 promised: 20 more do not fit in 100. */
    tt_resp r = post("{\"type\": \"test_cost\", \"work_mb\": 20, \"output\": {\"name\": \"c\"}}");
    static const char *const w1[] = {"needs 20 MB of disk", "jobs.disk_mb = 100",
                                     "leaves 10 MB", "90 MB promised", NULL};
    assert_413(&r, w1);
    tt_resp_free(&r);
    r = post("{\"type\": \"test_cost\", \"product_mb\": 60, \"output\": {\"name\": \"d\"}}");
    static const char *const w2[] = {"product would be 60 MB", "jobs.max_product_mb = 50", NULL};
    assert_413(&r, w2);
    tt_resp_free(&r);
    r = post("{\"type\": \"test_cost\", \"block_mb\": 200, \"state_mb\": 100, \"output\": "
             "{\"name\": \"e\"}}");
    static const char *const w3[] = {"needs 304 MB of memory", "jobs.memory_mb = 256",
                                     "a test block", NULL};
    assert_413(&r, w3);
    tt_resp_free(&r);
    g_hold = 0;
    json_decref(wait_end(a));
    json_decref(wait_end(b));
    /* What was promised is free again (the products written are 1 KB each). */
    submit("{\"type\": \"test_cost\", \"work_mb\": 90, \"output\": {\"name\": \"f\"}}", id);
    json_decref(wait_end(id));
    /* Blocks of 100 MB under 256 MB: two at a time on four workers. */
    g_max_inflight = 0;
    submit("{\"type\": \"test_cost\", \"block_mb\": 100, \"n\": 12, \"delay_ms\": 40, "
           "\"output\": {\"name\": \"g\"}}", id);
    json_t *j = wait_end(id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    printf("blocks of 100 MB in flight at most: %d\n", g_max_inflight);
    ck_assert_int_eq(g_max_inflight, 2);
}
END_TEST

/* A job that writes more than its estimate fails when jobs.dir passes jobs.disk_mb, and one
 * whose product passes jobs.max_product_mb fails at the end: cleanly, files removed. */
START_TEST(test_budgets_while_writing)
{
    start("\"disk_mb\": 8, \"max_product_mb\": 2", 2);
    char id[17];
    submit("{\"type\": \"test_cost\", \"work_mb\": 1, \"n\": 24, \"delay_ms\": 30, "
           "\"write_mb\": 1, \"output\": {\"name\": \"w\"}}", id);
    json_t *j = wait_end(id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    json_t *e = json_object_get(j, "error");
    const char *d = json_string_value(json_object_get(e, "detail"));
    printf("overrun: %s\n", d);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 413);
    ck_assert_ptr_nonnull(strstr(d, "more than jobs.disk_mb = 8"));
    json_decref(j);
    ck_assert_int_eq(entries("work"), 0);
    ck_assert_int_eq(entries("results"), 0);
    submit("{\"type\": \"test_cost\", \"product_mb\": 1, \"product_write_mb\": 3, "
           "\"output\": {\"name\": \"p\"}}", id);
    j = wait_end(id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    e = json_object_get(j, "error");
    d = json_string_value(json_object_get(e, "detail"));
    printf("product: %s\n", d);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 413);
    ck_assert_ptr_nonnull(strstr(d, "the product is 3 MB, more than jobs.max_product_mb = 2"));
    json_decref(j);
    ck_assert_int_eq(entries("work"), 0);
    ck_assert_int_eq(entries("results"), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hostile_jobs");
    TCase *tc = tcase_create("hostile_jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_corrupt_store_refused);
    tcase_add_test(tc, test_foreign_store_refused);
    tcase_add_test(tc, test_old_store_upgraded);
    tcase_add_test(tc, test_deleted_lock_still_refuses);
    tcase_add_test(tc, test_outside_roots_one_answer);
    tcase_add_test(tc, test_weak_token_refused);
    tcase_add_test(tc, test_huge_target_refused);
    tcase_add_test(tc, test_huge_input_refused);
    tcase_add_test(tc, test_many_inputs_leave_http_free);
    tcase_add_test(tc, test_large_input_blocks_bounded);
    tcase_add_test(tc, test_budgets_counted);
    tcase_add_test(tc, test_budgets_while_writing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
