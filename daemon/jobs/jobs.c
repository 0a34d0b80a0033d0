/* The job runner: SQLite state, a scheduler thread, blocks on the shared pool (jobs.h). */
#include "daemon/jobs/jobs.h"
#include "daemon/jobs/jobbudget.h"
#include "daemon/oplog.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_KINDS 32

static const job_kind *g_kinds[MAX_KINDS];
static int g_nkinds;
static pthread_mutex_t g_kinds_lock = PTHREAD_MUTEX_INITIALIZER;

int jobs_register_kind(const job_kind *k)
{
    int rc = 0;
    pthread_mutex_lock(&g_kinds_lock);
    for (int i = 0; i < g_nkinds; i++)
        if (strcmp(g_kinds[i]->type, k->type) == 0)
            rc = g_kinds[i] == k ? 0 : TESS_EEXIST;
    int found = 0;
    for (int i = 0; i < g_nkinds; i++)
        found |= g_kinds[i] == k;
    if (!rc && !found) {
        if (g_nkinds == MAX_KINDS)
            rc = TESS_ERANGE;
        else
            g_kinds[g_nkinds++] = k;
    }
    pthread_mutex_unlock(&g_kinds_lock);
    return rc;
}

const job_kind *jobs_find_kind(const char *type)
{
    const job_kind *k = NULL;
    pthread_mutex_lock(&g_kinds_lock);
    for (int i = 0; i < g_nkinds && !k; i++)
        if (strcmp(g_kinds[i]->type, type) == 0)
            k = g_kinds[i];
    pthread_mutex_unlock(&g_kinds_lock);
    return k;
}

/* One block handed to the pool; back on the completion list when it has run. */
typedef struct block_task {
    struct jobs *J;
    const job_kind *kind;
    void *state;
    int stage;
    long block;
    int rc;
    char err[256];
    struct block_task *next;
} block_task;

struct jobs {
    const tess_config *cfg;
    catalog *cat;
    pool *pool;
    int threads;
    sqlite3 *db;
    int dirfd;                /* jobs.dir itself, flock'ed: one runner per jobs directory,
                                 even when dir/lock is removed (-1: the file system cannot
                                 lock directories) */
    int lockfd;               /* dir/lock, flock'ed too, holding the pid for messages */
    dev_t lock_dev;           /* the identity of dir/lock as taken */
    ino_t lock_ino;
    int lock_lost;            /* dir/lock is another server's now: take no job */
    double lock_checked;      /* tess_mono_s of the last identity check */
    char dir[PATH_MAX - 64];  /* canonical; leaves room for "/results/.{id}.tmp" */
    pthread_mutex_t lock;     /* guards db and everything below */
    pthread_cond_t cond;      /* submissions, completions, cancel, stop, job end */
    pthread_t sched;
    int started;
    int stopping;
    /* the running job */
    char cur[17];
    volatile int cur_cancel;
    int inflight;
    block_task *completed;
    unsigned long job_generation; /* bumped when a job ends (cancel waits on it) */
};

static int lock_still_ours(jobs *J);

/* ---- small helpers -------------------------------------------------------------- */

static double now_epoch(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void iso_time(double t, char *out, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    int ms = (int)((t - (double)s) * 1000.0);
    if (ms < 0)
        ms = 0;
    if (ms > 999)
        ms = 999;
    char buf[32];
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03dZ", buf, ms);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

static void rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void workdir_of(const jobs *J, const char *id, char *out)
{
    snprintf(out, PATH_MAX, "%s/work/%s", J->dir, id);
}

static void tmp_of(const jobs *J, const char *id, char *out)
{
    snprintf(out, PATH_MAX, "%s/results/.%s.tmp", J->dir, id);
}

/* The product's final name: {id}.fits for FITS products, {id}.bin otherwise. */
static void result_of(const jobs *J, const char *id, const char *content_type, char *out)
{
    int fits = !content_type || !*content_type || strcmp(content_type, "application/fits") == 0;
    snprintf(out, PATH_MAX, "%s/results/%s.%s", J->dir, id, fits ? "fits" : "bin");
}

static int valid_id(const char *id)
{
    if (strlen(id) != 16)
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

static int exec_sql(jobs *J, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(J->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        tess_seterr(err, errlen, "jobs database: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return TESS_EIO;
    }
    return 0;
}

/* Runs one statement with text/double/int64 parameters given as a format string:
 * 't' const char * (NULL = NULL), 'd' double, 'i' long long.  Returns SQLITE_DONE/ROW
 * code of the single step, or an error code (then nothing ran: a parameter that cannot
 * be bound - a text's copy out of memory - would otherwise run as NULL). */
static int sql_vrun(jobs *J, const char *sql, const char *fmt, va_list ap)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errmsg(J->db));
        return SQLITE_ERROR;
    }
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        if (fmt[i] == 't') {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(st, i + 1, s, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(st, i + 1);
        } else if (fmt[i] == 'd') {
            rc = sqlite3_bind_double(st, i + 1, va_arg(ap, double));
        } else {
            rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, long long));
        }
    }
    if (rc != SQLITE_OK) {
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errstr(rc));
        sqlite3_finalize(st);
        return rc;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errmsg(J->db));
    sqlite3_finalize(st);
    return rc;
}

static int sql_run(jobs *J, const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sql_vrun(J, sql, fmt, ap);
    va_end(ap);
    return rc;
}

/* sql_run for a change that a client is told about (a job accepted, a job's end): its
 * commit syncs the WAL before it returns.  The database runs with synchronous = NORMAL,
 * under which a power loss takes back the commits made since the WAL was last synced:
 * harmless for progress and recorded blocks (blocks not recorded run again), not for a
 * job acknowledged or reported ended. */
static int sql_run_durable(jobs *J, const char *sql, const char *fmt, ...)
{
    sqlite3_exec(J->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
    va_list ap;
    va_start(ap, fmt);
    int rc = sql_vrun(J, sql, fmt, ap);
    va_end(ap);
    sqlite3_exec(J->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
    return rc;
}

/* ---- the job document ------------------------------------------------------------ */

static const char JOB_COLS[] =
    "id, type, state, body, created, started, finished, done, total, error, result, "
    "run_done0, run_t0";

/* Builds the JSON of the row `st` (columns as JOB_COLS). */
static json_t *row_json(sqlite3_stmt *st)
{
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *state = (const char *)sqlite3_column_text(st, 2);
    long long done = sqlite3_column_int64(st, 7), total = sqlite3_column_int64(st, 8);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "type", json_string((const char *)sqlite3_column_text(st, 1)));
    json_object_set_new(o, "state", json_string(state));
    json_t *pr = json_object();
    json_object_set_new(pr, "done", json_integer(done));
    json_object_set_new(pr, "total", json_integer(total));
    json_object_set_new(pr, "fraction", json_real(total > 0 ? (double)done / (double)total : 0.0));
    json_object_set_new(o, "progress", pr);
    /* ETA from the rate of this run (blocks done since the process took the job up). */
    json_t *eta = json_null();
    if (strcmp(state, "running") == 0 && sqlite3_column_type(st, 12) != SQLITE_NULL) {
        long long d0 = sqlite3_column_int64(st, 11);
        double t0 = sqlite3_column_double(st, 12), el = now_epoch() - t0;
        if (done > d0 && el > 0) {
            double rate = (double)(done - d0) / el;
            json_decref(eta);
            eta = json_real((double)(total - done) / rate);
        }
    }
    json_object_set_new(o, "eta_s", eta);
    static const char *const tnames[] = {"created", "started", "finished"};
    for (int k = 0; k < 3; k++) {
        if (sqlite3_column_type(st, 4 + k) == SQLITE_NULL) {
            json_object_set_new(o, tnames[k], json_null());
        } else {
            char iso[40];
            iso_time(sqlite3_column_double(st, 4 + k), iso, sizeof(iso));
            json_object_set_new(o, tnames[k], json_string(iso));
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *txt = (const char *)sqlite3_column_text(st, 9 + k);
        json_t *v = txt ? json_loads(txt, 0, NULL) : NULL;
        json_object_set_new(o, k == 0 ? "error" : "result", v ? v : json_null());
    }
    json_t *links = json_object();
    char buf[64];
    snprintf(buf, sizeof(buf), "/api/v1/jobs/%s", id);
    json_object_set_new(links, "self", json_string(buf));
    if (strcmp(state, "succeeded") == 0) {
        snprintf(buf, sizeof(buf), "/api/v1/jobs/%s/result", id);
        json_object_set_new(links, "result", json_string(buf));
    }
    json_object_set_new(o, "links", links);
    const char *body = (const char *)sqlite3_column_text(st, 3);
    json_t *b = body ? json_loads(body, 0, NULL) : NULL;
    json_object_set_new(o, "request", b ? b : json_null());
    return o;
}

/* Caller holds the lock. */
static json_t *job_json_locked(jobs *J, const char *id)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT %s FROM jobs WHERE id = ?1", JOB_COLS);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    json_t *o = sqlite3_step(st) == SQLITE_ROW ? row_json(st) : NULL;
    sqlite3_finalize(st);
    return o;
}

char *jobs_get_json(jobs *J, const char *id, int *missing)
{
    *missing = 0;
    if (!valid_id(id)) {
        *missing = 1;
        return NULL;
    }
    pthread_mutex_lock(&J->lock);
    json_t *o = job_json_locked(J, id);
    pthread_mutex_unlock(&J->lock);
    if (!o) {
        *missing = 1;
        return NULL;
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

char *jobs_list_json(jobs *J, int limit)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT %s FROM jobs ORDER BY seq DESC LIMIT ?1", JOB_COLS);
    json_t *a = json_array();
    pthread_mutex_lock(&J->lock);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int(st, 1, limit);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(a, row_json(st));
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&J->lock);
    char *s = json_dumps(a, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(a);
    return s;
}

void jobs_counts(jobs *J, long counts[5])
{
    static const char *const names[5] = {"queued", "running", "succeeded", "failed",
                                         "cancelled"};
    for (int i = 0; i < 5; i++)
        counts[i] = 0;
    pthread_mutex_lock(&J->lock);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, "SELECT state, COUNT(*) FROM jobs GROUP BY state", -1, &st,
                           NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *s = (const char *)sqlite3_column_text(st, 0);
            for (int i = 0; i < 5; i++)
                if (s && strcmp(s, names[i]) == 0)
                    counts[i] = (long)sqlite3_column_int64(st, 1);
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&J->lock);
}

/* ---- submit, cancel, result ------------------------------------------------------ */

/* Bytes of work files and products under jobs.dir now (jobbudget_du of work/ and
 * results/); 0 without jobs.disk_mb, which alone needs it. */
static double disk_used_locked(jobs *J)
{
    if (J->cfg->jobs_disk_mb == 0)
        return 0.0;
    char work[PATH_MAX], results[PATH_MAX];
    snprintf(work, sizeof work, "%s/work", J->dir);
    snprintf(results, sizeof results, "%s/results", J->dir);
    const char *const both[] = {work, results};
    return jobbudget_du(both, 2);
}

/* What accepted jobs will still write: the disk need of every queued job, and of the
 * running ones less what their work directories hold already.  Lock held. */
static double disk_promised_locked(jobs *J)
{
    double promised = 0.0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, "SELECT id, state, disk_need FROM jobs WHERE state IN "
                           "('queued', 'running') AND disk_need > 0", -1, &st, NULL) != SQLITE_OK)
        return 0.0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *state = (const char *)sqlite3_column_text(st, 1);
        double need = sqlite3_column_double(st, 2);
        if (id && state && strcmp(state, "running") == 0 && valid_id(id)) {
            char wd[PATH_MAX];
            const char *one[] = {wd};
            workdir_of(J, id, wd);
            need -= jobbudget_du(one, 1);
        }
        promised += need > 0.0 ? need : 0.0;
    }
    sqlite3_finalize(st);
    return promised;
}

int jobs_submit(jobs *J, const char *body, size_t len, char **json_out, job_problem *pb)
{
    *json_out = NULL;
    json_error_t jerr;
    json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!b) {
        jobkind_problem(pb, 400, "body", "not valid JSON: %s (line %d, column %d)", jerr.text,
                        jerr.line, jerr.column);
        return -1;
    }
    if (!json_is_object(b)) {
        json_decref(b);
        jobkind_problem(pb, 400, "body", "the job must be a JSON object");
        return -1;
    }
    json_t *t = json_object_get(b, "type");
    if (!json_is_string(t)) {
        json_decref(b);
        jobkind_problem(pb, 400, "type", "\"type\" must be a string naming the job type");
        return -1;
    }
    const job_kind *k = jobs_find_kind(json_string_value(t));
    if (!k) {
        char known[256] = "";
        pthread_mutex_lock(&g_kinds_lock);
        for (int i = 0; i < g_nkinds; i++) {
            size_t n = strlen(known);
            snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "", g_kinds[i]->type);
        }
        pthread_mutex_unlock(&g_kinds_lock);
        jobkind_problem(pb, 400, "type", "unknown job type '%.64s' (known: %s)",
                        json_string_value(t), known);
        json_decref(b);
        return -1;
    }
    job_env env = {J->cfg, J->cat, J->threads};
    job_cost cost = {0};
    if (k->validate(b, &env, pb) || (k->estimate && k->estimate(b, &env, &cost, pb))) {
        json_decref(b);
        return -1;
    }
    char *canon = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(b);
    if (!canon) {
        jobkind_problem(pb, 500, NULL, "out of memory");
        return -1;
    }
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        free(canon);
        jobkind_problem(pb, 500, NULL, "no random bytes for a job id");
        return -1;
    }
    char id[17];
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", rnd[i]);

    pthread_mutex_lock(&J->lock);
    long active = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db,
                           "SELECT COUNT(*) FROM jobs WHERE state IN ('queued','running')", -1,
                           &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            active = (long)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    int rc = -1;
    double need = jobbudget_disk_need(&cost);
    if (active >= J->cfg->max_queued_jobs) {
        jobkind_problem(pb, 503, NULL,
                        "%ld jobs are queued or running (limits.max_queued_jobs); retry later",
                        active);
    } else if (!lock_still_ours(J)) {
        jobkind_problem(pb, 503, NULL, "another server took the lock file of jobs.dir: this "
                        "server runs no more jobs (one server per jobs directory)");
    } else if (jobbudget_admit(J->cfg, &cost, disk_used_locked(J),
                               J->cfg->jobs_disk_mb ? disk_promised_locked(J) : 0.0, pb)) {
        /* *pb says which budget */
    } else if (sql_run_durable(J,
                       "INSERT INTO jobs (id, seq, type, state, body, created, done, total, "
                       "disk_need) "
                       "VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), ?2, 'queued', "
                       "?3, ?4, 0, 0, ?5)",
                       "tttdd", id, k->type, canon, now_epoch(), need) != SQLITE_DONE) {
        jobkind_problem(pb, 500, NULL, "the jobs database refused the job");
    } else {
        json_t *o = job_json_locked(J, id);
        *json_out = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        rc = 0;
        pthread_cond_broadcast(&J->cond);
    }
    pthread_mutex_unlock(&J->lock);
    free(canon);
    if (rc == 0 && !*json_out) {
        jobkind_problem(pb, 500, NULL, "out of memory");
        return -1;
    }
    return rc;
}

/* The state of job `id` into `state` (16 bytes); 0 or TESS_ENOTFOUND.  Lock held. */
static int state_locked(jobs *J, const char *id, char *state)
{
    sqlite3_stmt *st;
    int rc = TESS_ENOTFOUND;
    if (sqlite3_prepare_v2(J->db, "SELECT state FROM jobs WHERE id = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            snprintf(state, 16, "%s", (const char *)sqlite3_column_text(st, 0));
            rc = 0;
        }
        sqlite3_finalize(st);
    }
    return rc;
}

int jobs_cancel(jobs *J, const char *id, double wait_s)
{
    if (!valid_id(id))
        return TESS_ENOTFOUND;
    char state[16];
    pthread_mutex_lock(&J->lock);
    int rc = state_locked(J, id, state);
    if (rc == 0) {
        if (strcmp(state, "queued") == 0) {
            sql_run_durable(J, "UPDATE jobs SET state = 'cancelled', finished = ?2 WHERE id = ?1",
                            "td", id, now_epoch());
        } else if (strcmp(state, "running") == 0) {
            if (strcmp(J->cur, id) == 0) {
                J->cur_cancel = 1;
                pthread_cond_broadcast(&J->cond);
                double until = tess_mono_s() + wait_s;
                while (strcmp(J->cur, id) == 0 && tess_mono_s() < until) {
                    struct timespec ts;
                    clock_gettime(CLOCK_REALTIME, &ts);
                    ts.tv_nsec += 50 * 1000000L;
                    if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                    }
                    pthread_cond_timedwait(&J->cond, &J->lock, &ts);
                }
            } else {
                /* Marked running by an earlier process and not yet taken up again. */
                char wd[PATH_MAX];
                workdir_of(J, id, wd);
                sql_run_durable(J, "UPDATE jobs SET state = 'cancelled', finished = ?2 WHERE "
                                "id = ?1", "td", id, now_epoch());
                rm_tree(wd);
            }
        } else {
            rc = TESS_EINVAL;
        }
    }
    pthread_mutex_unlock(&J->lock);
    return rc;
}

int jobs_result(jobs *J, const char *id, char *path, char *content_type, char *state)
{
    if (!valid_id(id))
        return TESS_ENOTFOUND;
    pthread_mutex_lock(&J->lock);
    int rc = state_locked(J, id, state);
    if (rc == 0 && strcmp(state, "succeeded") != 0)
        rc = TESS_EAGAIN;
    if (rc == 0) {
        sqlite3_stmt *st;
        snprintf(content_type, 64, "application/fits");
        if (sqlite3_prepare_v2(J->db, "SELECT content_type FROM jobs WHERE id = ?1", -1, &st,
                               NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
            if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
                *sqlite3_column_text(st, 0))
                snprintf(content_type, 64, "%s", (const char *)sqlite3_column_text(st, 0));
            sqlite3_finalize(st);
        }
        result_of(J, id, content_type, path);
    }
    pthread_mutex_unlock(&J->lock);
    return rc;
}

/* ---- running a job --------------------------------------------------------------- */

static void block_run(void *arg)
{
    block_task *t = arg;
    t->rc = t->kind->run_block(t->state, t->stage, t->block, &t->J->cur_cancel, t->err,
                               sizeof(t->err));
    if (t->rc && !t->err[0])
        tess_seterr(t->err, sizeof(t->err), "block %ld of stage %d failed (code %d)", t->block,
                    t->stage, t->rc);
    jobs *J = t->J;
    pthread_mutex_lock(&J->lock);
    t->next = J->completed;
    J->completed = t;
    J->inflight--;
    pthread_cond_broadcast(&J->cond);
    pthread_mutex_unlock(&J->lock);
}

static void timed_wait(jobs *J, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&J->cond, &J->lock, &ts);
}

/* Ends the current job (lock held): state, error, then cleanup of its files.  In that
 * order, so that a job still running in the database keeps its work directory (the
 * start-up sweep removes those of ended jobs).  When the state cannot be written, as on
 * a full disk, it is written again once the job's files have made room (a job found
 * without its work directory starts over: run_job_locked). */
static void end_job_locked(jobs *J, const char *id, const char *state, const char *error_json)
{
    static const char sql[] =
        "UPDATE jobs SET state = ?2, finished = ?3, error = ?4 WHERE id = ?1";
    char wd[PATH_MAX], tmp[PATH_MAX];
    workdir_of(J, id, wd);
    tmp_of(J, id, tmp);
    int rc = sql_run_durable(J, sql, "ttdt", id, state, now_epoch(), error_json);
    rm_tree(wd);
    unlink(tmp);
    if (rc != SQLITE_DONE)
        sql_run_durable(J, sql, "ttdt", id, state, now_epoch(), error_json);
    J->cur[0] = '\0';
    J->cur_cancel = 0;
    J->job_generation++;
    pthread_cond_broadcast(&J->cond);
}

static void fail_job_locked(jobs *J, const char *id, int status, const char *detail)
{
    if (J->cfg->error_log)
        oplog_error_event(J->cfg->error_log,
                          json_pack("{s:s, s:s, s:i, s:s}", "event", "job_failed", "job", id,
                                    "status", status, "detail", detail));
    else
        fprintf(stderr, "tesserad: job %s failed: %s\n", id, detail);
    char *pj = problem_json(status, NULL, detail);
    end_job_locked(J, id, "failed", pj);
    free(pj);
}

static int status_of(int rc)
{
    switch (rc) {
    case TESS_ENOOVERLAP: case TESS_ENOWCS: case TESS_EINVAL: return 422;
    case TESS_ETOOBIG: case TESS_ELIMIT: return 413;
    default: return 500;
    }
}

/* Registers a product (lock not held).  Returns 0 or a code with err.  A dataset this
 * product already is (registered by an earlier end of the same job whose state could not
 * be written) counts as registered. */
static int register_product(jobs *J, const job_product *prod, const char *path, char *err,
                            size_t errlen)
{
    if (prod->dataset[0]) {
        ds_config dc = {0};
        dc.name = (char *)prod->dataset;
        dc.path = (char *)path;
        int rc = catalog_add(J->cat, &dc, err, errlen);
        const dataset *d = rc == TESS_EEXIST ? catalog_find(J->cat, prod->dataset) : NULL;
        if (d && d->npaths == 1 && strcmp(d->paths[0], path) == 0)
            rc = 0;
        if (rc)
            return rc;
    }
    if (prod->attach_to[0]) {
        const dataset *d = catalog_find(J->cat, prod->attach_to);
        if (!d) {
            tess_seterr(err, errlen, "dataset '%s' is gone", prod->attach_to);
            return TESS_ENOTFOUND;
        }
        return dataset_attach_profile(d, path);
    }
    return 0;
}

/* Syncs the entries of directory `path` (fsync); 0 or -1 with errno. */
static int sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Flushes the files of finished blocks to disk, then records the blocks as done (lock
 * held on entry and exit; released around syncfs).  syncfs covers whatever files the
 * blocks wrote, so a recorded block survives a power cut, not only a killed process. */
static void record_blocks_locked(jobs *J, const char *id, const char *wd, block_task **list)
{
    block_task *ok = *list;
    *list = NULL;
    if (!ok)
        return;
    pthread_mutex_unlock(&J->lock);
    int fd = open(wd, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
    pthread_mutex_lock(&J->lock);
    sqlite3_exec(J->db, "BEGIN", NULL, NULL, NULL);
    for (block_task *t = ok; t; t = t->next)
        sql_run(J, "INSERT OR IGNORE INTO blocks (job, stage, block) VALUES (?1, ?2, ?3)",
                "tii", id, (long long)t->stage, (long long)t->block);
    sqlite3_exec(J->db, "COMMIT", NULL, NULL, NULL);
    while (ok) {
        block_task *nx = ok->next;
        free(ok);
        ok = nx;
    }
}

/* Whether jobs.dir's work files and products are over jobs.disk_mb (detail says so), with
 * `wd` the running job's work directory.  Lock held. */
static int over_disk_locked(jobs *J, const char *wd, char *detail, size_t len)
{
    if (J->cfg->jobs_disk_mb == 0)
        return 0;
    const char *one[] = {wd};
    return jobbudget_over_disk(J->cfg, disk_used_locked(J), jobbudget_du(one, 1), detail, len);
}

/* Runs job `id` to its end, or until the runner stops.  Lock held on entry and exit.
 * When its row cannot be read now (out of memory), returns with the job as it was: the
 * scheduler tries again later. */
static void run_job_locked(jobs *J, const char *id)
{
    char type[64] = "", *body = NULL;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db, "SELECT type, body FROM jobs WHERE id = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        const char *t, *bd;
        if (sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW && (t = (const char *)sqlite3_column_text(st, 0)) &&
            (bd = (const char *)sqlite3_column_text(st, 1))) {
            snprintf(type, sizeof(type), "%s", t);
            body = strdup(bd);
        }
        sqlite3_finalize(st);
    }
    /* The body was valid JSON when it was accepted: a parse that fails for want of
     * memory (jansson says "out of memory", or nothing when its first allocation
     * failed) is tried again later. */
    json_error_t jerr;
    json_t *b = body ? json_loads(body, 0, &jerr) : NULL;
    free(body);
    if (!body || (!b && (json_error_code(&jerr) == json_error_out_of_memory ||
                         json_error_code(&jerr) == json_error_unknown)))
        return;
    snprintf(J->cur, sizeof(J->cur), "%s", id);
    J->cur_cancel = 0;
    const job_kind *k = jobs_find_kind(type);
    if (!k || !b) {
        json_decref(b);
        fail_job_locked(J, id, 500, !k ? "unknown job type" : "the stored job body is unreadable");
        return;
    }
    char wd[PATH_MAX];
    workdir_of(J, id, wd);
    int fresh = mkdir(wd, 0700) == 0;
    if (!fresh && errno != EEXIST) {
        json_decref(b);
        fail_job_locked(J, id, 500, "cannot create the job's work directory");
        return;
    }
    /* Blocks recorded by an earlier run count only with the work directory that holds
     * their files: without it, the job starts over. */
    if (fresh && sql_run(J, "DELETE FROM blocks WHERE job = ?1", "t", id) != SQLITE_DONE) {
        json_decref(b);
        fail_job_locked(J, id, 500, "the jobs database cannot reset the job's blocks");
        return;
    }
    /* Plan outside the lock (it may read headers); the estimate again (the inputs may
     * have changed since the job was accepted) bounds the blocks in flight. */
    pthread_mutex_unlock(&J->lock);
    job_env env = {J->cfg, J->cat, J->threads};
    job_plan plan = {0};
    job_cost cost = {0};
    job_problem epb;
    char err[512] = "";
    if (k->estimate && k->estimate(b, &env, &cost, &epb) != 0)
        memset(&cost, 0, sizeof cost);
    int rc = k->plan(b, &env, wd, &plan, err, sizeof(err));
    json_decref(b);
    pthread_mutex_lock(&J->lock);
    if (rc || plan.nstages < 1 || plan.nstages > JOB_MAX_STAGES) {
        if (!rc && k->release)
            k->release(plan.state);
        fail_job_locked(J, id, status_of(rc), err[0] ? err : "the job could not be planned");
        return;
    }
    long total = 0;
    for (int s = 0; s < plan.nstages; s++)
        total += plan.nblocks[s] > 0 ? plan.nblocks[s] : 0;
    /* Blocks recorded by an earlier run of this job. */
    unsigned char *doneset[JOB_MAX_STAGES] = {0};
    for (int s = 0; s < plan.nstages; s++)
        doneset[s] = calloc((size_t)(plan.nblocks[s] > 0 ? plan.nblocks[s] : 1), 1);
    long done = 0;
    if (sqlite3_prepare_v2(J->db, "SELECT stage, block FROM blocks WHERE job = ?1", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(st) == SQLITE_ROW) {
            int s = sqlite3_column_int(st, 0);
            long bl = (long)sqlite3_column_int64(st, 1);
            if (s >= 0 && s < plan.nstages && bl >= 0 && bl < plan.nblocks[s] && doneset[s] &&
                !doneset[s][bl]) {
                doneset[s][bl] = 1;
                done++;
            }
        }
        sqlite3_finalize(st);
    }
    sql_run(J,
            "UPDATE jobs SET state = 'running', started = COALESCE(started, ?2), total = ?3, "
            "done = ?4, run_done0 = ?4, run_t0 = ?2 WHERE id = ?1",
            "tdii", id, now_epoch(), (long long)total, (long long)done);

    int failed = 0, fail_status = 500;
    char fail_detail[300] = "";
    block_task *ok = NULL;
    double last_record = tess_mono_s();
    int max_inflight = jobbudget_blocks(J->cfg, &cost, J->threads);
    double last_check = tess_mono_s();
    for (int s = 0; s < plan.nstages && !failed && !J->cur_cancel && !J->stopping &&
                    !J->lock_lost; s++) {
        long next = 0;
        for (;;) {
            int stop = failed || J->cur_cancel || J->stopping || J->lock_lost;
            while (!stop && J->inflight < max_inflight && next < plan.nblocks[s]) {
                if (doneset[s] && doneset[s][next]) {
                    next++;
                    continue;
                }
                block_task *t = calloc(1, sizeof(*t));
                if (!t) {
                    failed = 1;
                    snprintf(fail_detail, sizeof(fail_detail), "out of memory");
                    break;
                }
                *t = (block_task){J, k, plan.state, s, next, 0, "", NULL};
                J->inflight++;
                if (pool_submit(J->pool, POOL_BATCH, block_run, t) != 0) {
                    J->inflight--;
                    free(t);
                    break; /* queue full: interactive work has the pool; retry shortly */
                }
                next++;
            }
            long newly = 0;
            while (J->completed) {
                block_task *t = J->completed;
                J->completed = t->next;
                if (t->rc == 0) {
                    t->next = ok;
                    ok = t;
                    newly++;
                } else {
                    if (t->rc != TESS_ECANCELED && !failed) {
                        failed = 1;
                        J->cur_cancel = 1; /* stop the other blocks early */
                        fail_status = status_of(t->rc);
                        snprintf(fail_detail, sizeof(fail_detail), "%s", t->err);
                    }
                    free(t);
                }
            }
            /* Progress at once; the block records (after a sync) at most every 0.25 s
             * and at the end of a stage, so that a busy disk does not slow the job. */
            if (newly) {
                done += newly;
                sql_run(J, "UPDATE jobs SET done = ?2 WHERE id = ?1", "ti", id, (long long)done);
            }
            /* Now and then: the lock file still ours, jobs.dir within jobs.disk_mb. */
            if (!failed && tess_mono_s() - last_check >= 0.25) {
                last_check = tess_mono_s();
                lock_still_ours(J);
                if (over_disk_locked(J, wd, fail_detail, sizeof fail_detail)) {
                    failed = 1;
                    J->cur_cancel = 1;
                    fail_status = 413;
                }
            }
            stop = failed || J->cur_cancel || J->stopping || J->lock_lost;
            int stage_end = J->inflight == 0 && !J->completed && (stop || next >= plan.nblocks[s]);
            if (ok && (stage_end || tess_mono_s() - last_record >= 0.25)) {
                record_blocks_locked(J, id, wd, &ok);
                last_record = tess_mono_s();
            }
            if (stage_end)
                break;
            if (J->completed)
                continue;
            timed_wait(J, 200);
        }
    }
    for (int s = 0; s < plan.nstages; s++)
        free(doneset[s]);

    if (failed) {
        J->cur_cancel = 0;
        if (k->release)
            k->release(plan.state);
        fail_job_locked(J, id, fail_status, fail_detail);
        return;
    }
    if (J->cur_cancel) {
        if (k->release)
            k->release(plan.state);
        end_job_locked(J, id, "cancelled", NULL);
        return;
    }
    if (J->stopping || J->lock_lost) {
        /* Left running: the next start resumes it from its recorded blocks. */
        if (k->release)
            k->release(plan.state);
        J->cur[0] = '\0';
        return;
    }
    /* Every block done: write the product under a temporary name, then rename. */
    char tmp[PATH_MAX], final[PATH_MAX];
    tmp_of(J, id, tmp);
    unlink(tmp);
    job_product prod = {0};
    pthread_mutex_unlock(&J->lock);
    err[0] = '\0';
    rc = k->finish(plan.state, tmp, &prod, err, sizeof(err));
    if (k->release)
        k->release(plan.state);
    if (rc == 0) {
        int fd = open(tmp, O_RDONLY);
        struct stat pst;
        if (fd < 0 || fsync(fd) != 0 || fstat(fd, &pst) != 0) {
            rc = TESS_EIO;
            tess_seterr(err, sizeof(err), "the product was not written");
        } else if (jobbudget_over_product(J->cfg, (double)pst.st_size, err, sizeof err)) {
            rc = TESS_ETOOBIG;
        }
        if (fd >= 0)
            close(fd);
    }
    if (rc == 0) {
        pthread_mutex_lock(&J->lock);
        if (over_disk_locked(J, wd, err, sizeof err))
            rc = TESS_ETOOBIG;
        pthread_mutex_unlock(&J->lock);
    }
    result_of(J, id, prod.content_type, final);
    if (rc == 0 && rename(tmp, final) != 0) {
        rc = TESS_EIO;
        tess_seterr(err, sizeof(err), "cannot move the product into place: %s", strerror(errno));
    }
    /* The new name must be on disk before the job's end is: a power loss could otherwise
     * leave a succeeded job without its product. */
    char rdir[PATH_MAX];
    snprintf(rdir, sizeof rdir, "%s/results", J->dir);
    if (rc == 0 && sync_dir(rdir) != 0) {
        rc = TESS_EIO;
        tess_seterr(err, sizeof(err), "cannot sync the results directory: %s", strerror(errno));
        unlink(final);
    }
    if (rc == 0 && (rc = register_product(J, &prod, final, err, sizeof(err))) != 0)
        unlink(final);
    pthread_mutex_lock(&J->lock);
    if (rc) {
        unlink(tmp);
        fail_job_locked(J, id, status_of(rc), err[0] ? err : "the product could not be written");
        return;
    }
    json_t *res = json_object();
    struct stat sb;
    if (stat(final, &sb) == 0)
        json_object_set_new(res, "bytes", json_integer((json_int_t)sb.st_size));
    if (prod.dataset[0])
        json_object_set_new(res, "dataset", json_string(prod.dataset));
    if (prod.attach_to[0])
        json_object_set_new(res, "attached_to", json_string(prod.attach_to));
    char url[64];
    snprintf(url, sizeof(url), "/api/v1/jobs/%s/result", id);
    json_object_set_new(res, "url", json_string(url));
    char *rs = json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(res);
    sql_run(J,
            "UPDATE jobs SET result = ?2, product_dataset = ?3, attach_to = ?4, "
            "content_type = ?5 WHERE id = ?1",
            "ttttt", id, rs, prod.dataset, prod.attach_to, prod.content_type);
    free(rs);
    end_job_locked(J, id, "succeeded", NULL);
}

static void *scheduler(void *arg)
{
    jobs *J = arg;
    pthread_mutex_lock(&J->lock);
    while (!J->stopping) {
        if (tess_mono_s() - J->lock_checked >= 1.0)
            lock_still_ours(J);
        char id[17] = "";
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(J->db,
                               "SELECT id FROM jobs WHERE state IN ('running','queued') "
                               "ORDER BY state = 'running' DESC, seq LIMIT 1",
                               -1, &st, NULL) == SQLITE_OK) {
            const char *t;
            if (sqlite3_step(st) == SQLITE_ROW && (t = (const char *)sqlite3_column_text(st, 0)))
                snprintf(id, sizeof(id), "%s", t);
            sqlite3_finalize(st);
        }
        /* A job is taken only while the lock file is still this runner's. */
        if (!id[0] || J->lock_lost || !lock_still_ours(J)) {
            timed_wait(J, 1000);
            continue;
        }
        run_job_locked(J, id);
        /* A job that is still to run without the runner stopping did not get its end
         * recorded, or could not start (out of memory, a full disk): a while before it is
         * tried again, lock released. */
        char state[16];
        if (!J->stopping && (state_locked(J, id, state) != 0 || strcmp(state, "queued") == 0 ||
                             strcmp(state, "running") == 0))
            timed_wait(J, 1000);
    }
    pthread_mutex_unlock(&J->lock);
    return NULL;
}

/* ---- open and close -------------------------------------------------------------- */

static int mkdir_p(const char *dir, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) && errno != EEXIST) {
        tess_seterr(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

/* Removes *.tmp products and work directories of jobs that are not running. */
static void sweep(jobs *J)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/results", J->dir);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (e->d_name[0] == '.' && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
                char f[PATH_MAX + 260];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                unlink(f);
            }
        }
        closedir(d);
    }
    snprintf(path, sizeof(path), "%s/work", J->dir);
    d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char state[16] = "";
            int keep = valid_id(e->d_name) && state_locked(J, e->d_name, state) == 0 &&
                       strcmp(state, "running") == 0;
            if (!keep) {
                char f[PATH_MAX + 260];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                rm_tree(f);
            }
        }
        closedir(d);
    }
}

/* Registers the products of succeeded jobs again (after a restart). */
static void reregister(jobs *J)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(J->db,
                           "SELECT id, product_dataset, attach_to, content_type FROM jobs "
                           "WHERE state = "
                           "'succeeded' ORDER BY seq",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *ds = (const char *)sqlite3_column_text(st, 1);
        const char *at = (const char *)sqlite3_column_text(st, 2);
        job_product prod = {0};
        snprintf(prod.dataset, sizeof(prod.dataset), "%s", ds ? ds : "");
        snprintf(prod.attach_to, sizeof(prod.attach_to), "%s", at ? at : "");
        char final[PATH_MAX], err[256];
        result_of(J, id, (const char *)sqlite3_column_text(st, 3), final);
        if (access(final, R_OK) != 0)
            continue;
        int rc = register_product(J, &prod, final, err, sizeof(err));
        size_t fl = strlen(final);
        if (rc == TESS_ENOTFOUND && prod.attach_to[0] && fl > 5 &&
            strcmp(final + fl - 5, ".fits") == 0) {
            /* a plane store (ingest) of a dataset no longer configured: swept */
            unlink(final);
            fprintf(stderr, "tesserad: product of job %s removed: %s\n", id, err);
        } else if (rc) {
            fprintf(stderr, "tesserad: product of job %s not registered: %s\n", id, err);
        }
    }
    sqlite3_finalize(st);
}

/* Opens and flocks dir/lock (created when missing), writes this pid into it and
 * remembers its identity.  Returns 0 with *fd, or TESS_EIO with err (EWOULDBLOCK: held by
 * another server, named by the pid written there). */
static int take_lock_file(jobs *J, int *fd_out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lock", J->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(errno));
        return TESS_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            tess_seterr(err, errlen, "jobs.dir '%s' is in use by another server%s%.20s%s: one "
                        "server per jobs directory", J->dir, pid[0] ? " (pid " : "", pid,
                        pid[0] ? ")" : "");
        else
            tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(e));
        return TESS_EIO;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    /* The pid is only for the message above: failing to write it changes nothing. */
    int wrote = ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n;
    (void)wrote;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tess_seterr(err, errlen, "jobs.dir lock '%s': %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    J->lock_dev = st.st_dev;
    J->lock_ino = st.st_ino;
    *fd_out = fd;
    return 0;
}

/* Takes the jobs directory for this runner: an exclusive flock on the directory itself
 * and one on dir/lock, both held until jobs_close (or the process ends, kill -9 included:
 * the kernel drops them).  A second runner on the same directory, in another process or
 * this one, would resume and run the same jobs twice; it is refused, naming the holder's
 * pid written in dir/lock.  The directory's lock stays when dir/lock is removed or
 * replaced; dir/lock is taken again then (lock_still_ours).  Returns 0 or TESS_EIO with
 * err. */
static int lock_dir(jobs *J, char *err, size_t errlen)
{
    J->dirfd = open(J->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (J->dirfd < 0) {
        tess_seterr(err, errlen, "jobs.dir '%s': %s", J->dir, strerror(errno));
        return TESS_EIO;
    }
    if (flock(J->dirfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char path[PATH_MAX], pid[32] = "";
            snprintf(path, sizeof path, "%s/lock", J->dir);
            int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            ssize_t n = fd >= 0 ? pread(fd, pid, sizeof pid - 1, 0) : -1;
            if (fd >= 0)
                close(fd);
            pid[n > 0 ? n : 0] = '\0';
            pid[strcspn(pid, "\n")] = '\0';
            tess_seterr(err, errlen, "jobs.dir '%s' is in use by another server (%s%.20s%s): "
                        "one server per jobs directory", J->dir, pid[0] ? "pid " : "", pid,
                        pid[0] ? "" : "its lock file was removed");
            return TESS_EIO;
        }
        /* A file system without directory locks (some network ones): the lock file alone. */
        fprintf(stderr, "tesserad: jobs.dir '%s' cannot be locked (%s): relying on its lock "
                "file only\n", J->dir, strerror(e));
        close(J->dirfd);
        J->dirfd = -1;
    }
    return take_lock_file(J, &J->lockfd, err, errlen);
}

/* Whether dir/lock is still the file this runner locked (same device and inode); when it
 * was removed or replaced, it is taken again (the directory's lock kept others out
 * meanwhile).  When another process holds the new file (a server that locks only the
 * file), this runner takes no more jobs (lock_lost).  Lock held.  Returns 1 while ours. */
static int lock_still_ours(jobs *J)
{
    if (J->lock_lost)
        return 0;
    J->lock_checked = tess_mono_s();
    char path[PATH_MAX], err[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/lock", J->dir);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_dev == J->lock_dev && st.st_ino == J->lock_ino)
        return 1;
    int fd = -1;
    if (take_lock_file(J, &fd, err, sizeof err) == 0) {
        close(J->lockfd);
        J->lockfd = fd;
        fprintf(stderr, "tesserad: the lock file '%s' was removed or replaced; taken again\n",
                path);
        return 1;
    }
    J->lock_lost = 1;
    fprintf(stderr, "tesserad: the lock file '%s' was replaced: %s; this server runs no more "
            "jobs\n", path, err);
    return 0;
}

/* ---- the store: checked before it is used ----------------------------------------- */

/* The schema.  Version 0 is the tables of the first releases, which left user_version at 0
 * and no application_id; version 1 adds jobs.disk_need (the disk an accepted job was
 * estimated to need) and marks the file with STORE_APP_ID. */
#define STORE_VERSION 1
#define STORE_APP_ID 0x54657373   /* "Tess", PRAGMA application_id of a job store */

static const char *const JOBS_COLS_V0[] = {
    "id", "seq", "type", "state", "body", "created", "started", "finished", "done", "total",
    "error", "result", "product_dataset", "attach_to", "content_type", "run_done0", "run_t0",
    NULL};
static const char *const BLOCKS_COLS[] = {"job", "stage", "block", NULL};

static const char STORE_CREATE[] =
    "BEGIN; "
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER, type TEXT NOT NULL, "
    "state TEXT NOT NULL, body TEXT NOT NULL, created REAL, started REAL, finished REAL, "
    "done INTEGER, total INTEGER, error TEXT, result TEXT, product_dataset TEXT, "
    "attach_to TEXT, content_type TEXT, run_done0 INTEGER, run_t0 REAL, disk_need REAL); "
    "CREATE TABLE blocks (job TEXT, stage INTEGER, block INTEGER, "
    "PRIMARY KEY (job, stage, block)) WITHOUT ROWID; "
    "PRAGMA user_version = 1; PRAGMA application_id = 1415934835; "
    "COMMIT;";

/* The single integer a pragma or query returns, or -1 on error. */
static long long query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

/* The first of the NULL-terminated `cols` table `t` lacks (NULL: none); *exists = whether
 * the table is there. */
static const char *missing_column(sqlite3 *db, const char *t, const char *const *cols,
                                  int *exists)
{
    *exists = 0;
    const char *miss = NULL;
    for (int i = 0; cols[i] && !miss; i++) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
                               -1, &st, NULL) != SQLITE_OK)
            return cols[i];
        sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, cols[i], -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 1)
            miss = cols[i];
        sqlite3_finalize(st);
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                           "name = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
        *exists = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
        sqlite3_finalize(st);
    }
    return miss;
}

/* PRAGMA integrity_check over the whole file (0.9 s for a store of 100000 jobs and 10^6
 * block rows, 440 MB; quick_check takes 0.6 s and skips the indexes, which hold the job
 * ids): 0, or TESS_EIO with err saying what is wrong and where. */
static int check_integrity(sqlite3 *db, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(10)", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        int code = sqlite3_errcode(db) & 0xff;
        if (code == SQLITE_NOTADB)
            tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                        "away or set jobs.dir to another directory", path, sqlite3_errmsg(db));
        else if (code == SQLITE_CORRUPT)
            tess_seterr(err, errlen, "jobs database '%s' is damaged (%s); move it away (its "
                        "jobs are lost) or restore a copy", path, sqlite3_errmsg(db));
        else
            tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path,
                        sqlite3_errmsg(db));
        return TESS_EIO;
    }
    char first[300] = "";
    int n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 0);
        if (msg && strcmp(msg, "ok") == 0)
            break;
        /* The first message starts with a line naming the database ("*** in database
         * main ***"): keep what follows it. */
        if (msg && strncmp(msg, "*** ", 4) == 0 && strchr(msg, '\n'))
            msg = strchr(msg, '\n') + 1;
        if (n++ == 0)
            snprintf(first, sizeof first, "%s", msg ? msg : "?");
    }
    int code = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sqlite3_errcode(db) & 0xff;
    if (code && !first[0])
        snprintf(first, sizeof first, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (n == 0 && !code)
        return 0;
    first[strcspn(first, "\n")] = '\0';
    if (code == SQLITE_NOTADB)
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                    "away or set jobs.dir to another directory", path, first);
    else if (n == 0 && code != SQLITE_CORRUPT)
        tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path, first);
    else
        tess_seterr(err, errlen, "jobs database '%s' is damaged: database disk image is "
                    "malformed: %s%s; move it away (its jobs are lost) or restore a copy", path,
                    first, n > 1 ? " (and more)" : "");
    return TESS_EIO;
}

/* Whether the checked file is a job store this version reads: 1 (fresh: no schema at
 * all), 0 (a store), or TESS_EIO with err naming what does not fit.  Reads only. */
static int check_schema(sqlite3 *db, const char *path, long long *version, char *err,
                        size_t errlen)
{
    long long app = query_int(db, "PRAGMA application_id");
    long long ver = query_int(db, "PRAGMA user_version");
    long long objects = query_int(db, "SELECT COUNT(*) FROM sqlite_master");
    *version = ver;
    if (app < 0 || ver < 0 || objects < 0) {
        tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path,
                    sqlite3_errmsg(db));
        return TESS_EIO;
    }
    if (app != 0 && app != STORE_APP_ID) {
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (application_id "
                    "0x%08llx); move it away or set jobs.dir to another directory", path,
                    (unsigned long long)app);
        return TESS_EIO;
    }
    if (objects == 0 && ver == 0)
        return 1;
    if (ver > STORE_VERSION) {
        tess_seterr(err, errlen, "jobs database '%s' was made by a newer tesserad (schema "
                    "version %lld; this one reads versions up to %d)", path, ver,
                    STORE_VERSION);
        return TESS_EIO;
    }
    static const struct {
        const char *table;
        const char *const *cols;
    } tables[] = {{"jobs", JOBS_COLS_V0}, {"blocks", BLOCKS_COLS}};
    for (int t = 0; t < 2; t++) {
        int exists;
        const char *miss = missing_column(db, tables[t].table, tables[t].cols, &exists);
        if (!exists || miss) {
            char what[96];
            if (!exists)
                snprintf(what, sizeof what, "table %s missing", tables[t].table);
            else
                snprintf(what, sizeof what, "table %s has no column %s", tables[t].table, miss);
            tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                        "away or set jobs.dir to another directory", path, what);
            return TESS_EIO;
        }
    }
    static const char *const v1[] = {"disk_need", NULL};
    int exists;
    if (ver == STORE_VERSION && missing_column(db, "jobs", v1, &exists)) {
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (table jobs has "
                    "no column disk_need)", path);
        return TESS_EIO;
    }
    return 0;
}

/* Opens dir/jobs.sqlite: checks its integrity and schema before anything writes to it (a
 * damaged or foreign file is refused and left as it was), then creates the tables of a
 * fresh one or upgrades a version 0 store, and sets WAL.  Returns 0 or TESS_EIO with
 * err. */
static int open_store(jobs *J, char *err, size_t errlen)
{
    char dbp[PATH_MAX + 16];
    snprintf(dbp, sizeof(dbp), "%s/jobs.sqlite", J->dir);
    if (sqlite3_open_v2(dbp, &J->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                         SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        tess_seterr(err, errlen, "jobs database '%s': %s", dbp,
                    J->db ? sqlite3_errmsg(J->db) : "cannot open");
        return TESS_EIO;
    }
    sqlite3_busy_timeout(J->db, 5000);
    long long ver = 0;
    int rc = check_integrity(J->db, dbp, err, errlen);
    int fresh = rc ? rc : check_schema(J->db, dbp, &ver, err, errlen);
    if (fresh < 0)
        return fresh;
    rc = exec_sql(J, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;", err, errlen);
    if (!rc && fresh)
        rc = exec_sql(J, STORE_CREATE, err, errlen);
    if (!rc && !fresh && ver < STORE_VERSION) {
        rc = exec_sql(J, "BEGIN; ALTER TABLE jobs ADD COLUMN disk_need REAL; "
                      "PRAGMA user_version = 1; PRAGMA application_id = 1415934835; COMMIT;",
                      err, errlen);
        if (rc)
            sqlite3_exec(J->db, "ROLLBACK", NULL, NULL, NULL);
    }
    return rc;
}

int jobs_open(const char *dir, const tess_config *cfg, catalog *cat, pool *p, jobs **out,
              char *err, size_t errlen)
{
    jobs *J = calloc(1, sizeof(*J));
    if (!J) {
        tess_seterr(err, errlen, "out of memory for the job runner");
        return TESS_ENOMEM;
    }
    J->cfg = cfg;
    J->cat = cat;
    J->pool = p;
    J->threads = pool_threads(p);
    pthread_mutex_init(&J->lock, NULL);
    pthread_cond_init(&J->cond, NULL);
    int rc = mkdir_p(dir, err, errlen);
    char *real = rc ? NULL : realpath(dir, NULL);
    if (!rc && !real) {
        tess_seterr(err, errlen, "jobs.dir '%s': %s", dir, strerror(errno));
        rc = TESS_EIO;
    }
    if (!rc && strlen(real) >= sizeof(J->dir)) {
        tess_seterr(err, errlen, "jobs.dir '%s': path too long", dir);
        rc = TESS_EIO;
    }
    if (!rc) {
        snprintf(J->dir, sizeof(J->dir), "%s", real);
        char sub[PATH_MAX + 16];
        snprintf(sub, sizeof(sub), "%s/work", J->dir);
        rc = mkdir_p(sub, err, errlen);
        snprintf(sub, sizeof(sub), "%s/results", J->dir);
        if (!rc)
            rc = mkdir_p(sub, err, errlen);
    }
    free(real);
    J->lockfd = -1;
    J->dirfd = -1;
    if (!rc)
        rc = lock_dir(J, err, errlen);
    if (!rc)
        rc = open_store(J, err, errlen);
    if (rc) {
        if (J->db)
            sqlite3_close(J->db);
        if (J->lockfd >= 0)
            close(J->lockfd);
        if (J->dirfd >= 0)
            close(J->dirfd);
        pthread_mutex_destroy(&J->lock);
        pthread_cond_destroy(&J->cond);
        free(J);
        return rc;
    }
    pthread_mutex_lock(&J->lock);
    sweep(J);
    exec_sql(J,
             "DELETE FROM blocks WHERE job NOT IN (SELECT id FROM jobs WHERE state = "
             "'running')",
             NULL, 0);
    reregister(J);
    pthread_mutex_unlock(&J->lock);
    if (pthread_create(&J->sched, NULL, scheduler, J) != 0) {
        sqlite3_close(J->db);
        close(J->lockfd);
        if (J->dirfd >= 0)
            close(J->dirfd);
        free(J);
        tess_seterr(err, errlen, "cannot start the job scheduler");
        return TESS_ENOMEM;
    }
    J->started = 1;
    *out = J;
    return 0;
}

void jobs_close(jobs *J)
{
    if (!J)
        return;
    pthread_mutex_lock(&J->lock);
    J->stopping = 1;
    pthread_cond_broadcast(&J->cond);
    pthread_mutex_unlock(&J->lock);
    if (J->started)
        pthread_join(J->sched, NULL);
    /* The scheduler waited for its blocks in flight; nothing is left on the list. */
    sqlite3_close(J->db);
    if (J->lockfd >= 0)
        close(J->lockfd);   /* releases the directory's locks */
    if (J->dirfd >= 0)
        close(J->dirfd);
    pthread_mutex_destroy(&J->lock);
    pthread_cond_destroy(&J->cond);
    free(J);
}
