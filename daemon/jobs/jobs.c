/* The job runner: SQLite state, a scheduler thread, blocks on the shared pool (jobs.h). */
#include "daemon/jobs/jobs.h"
#include "daemon/jobs/jobbudget.h"
#include "daemon/jobs/jobstore.h"
#include "daemon/oplog.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/clock.h"
#include "engine/fits/fitswrite.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
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
    double secs;      /* how long run_block took */
} block_task;

struct jobs {
    const tess_config *cfg;
    catalog *cat;
    pool *pool;
    int threads;
    jobstore *st;             /* the jobs database (jobstore.h) */
    int shared;               /* st is shared by several processes: blocks go by leases */
    char owner[96];           /* this runner's name in leases: host/pid/random */
    double lease_s;           /* jobs.lease_s */
    pthread_t keeper;         /* shared: renews leases, registers others' products */
    int keeper_started;
    char (*seen)[17];         /* shared: jobs whose product this process registered */
    size_t nseen, capseen;
    double seen_since;        /* finished time of the newest of them, less a margin */
    unsigned long long blocks_run, renewals, expiries; /* for jobs_metrics */
    unsigned long long finish_expiries;  /* job claims of others taken over */
    int moved;                /* shared: the last job was left for another one with work */
    /* shared: the blocks of job held_job this runner holds leases on (leased, not yet
     * recorded), which the keeper renews; every other lease of this runner it ends */
    char held_job[17];
    int *held_stage;
    long *held_block;
    int nheld, capheld;
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
    block_task *handoff;      /* blocks ended while the lock was held long (atomic stack) */
    unsigned long job_generation; /* bumped when a job ends (cancel waits on it) */
    long counts[5];           /* jobs per state at the last answer (jobs_counts; atomic) */
};

static int lock_still_ours(jobs *J);
static void seen_add(jobs *J, const char *id);

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

/* ---- the job document ------------------------------------------------------------ */

/* Builds the JSON of the job row `j`. */
static json_t *row_json(const jobstore_job *j)
{
    const char *id = j->id, *state = j->state;
    long long done = j->done, total = j->total;
    json_t *o = json_object();
    int bad = 0;   /* a member not set (memory): the document is not given out short */
    bad |= json_object_set_new(o, "id", json_string(id)) != 0;
    bad |= json_object_set_new(o, "type", json_string(j->type)) != 0;
    bad |= json_object_set_new(o, "state", json_string(state)) != 0;
    json_t *pr = json_object();
    bad |= json_object_set_new(pr, "done", json_integer(done)) != 0;
    bad |= json_object_set_new(pr, "total", json_integer(total)) != 0;
    bad |= json_object_set_new(pr, "fraction",
                               json_real(total > 0 ? (double)done / (double)total : 0.0)) != 0;
    bad |= json_object_set_new(o, "progress", pr) != 0;
    /* ETA from the rate of this run (blocks done since the process took the job up). */
    json_t *eta = json_null();
    if (strcmp(state, "running") == 0 && !isnan(j->run_t0)) {
        long long d0 = j->run_done0;
        double el = now_epoch() - j->run_t0;
        if (done > d0 && el > 0) {
            double rate = (double)(done - d0) / el;
            json_decref(eta);
            eta = json_real((double)(total - done) / rate);
        }
    }
    bad |= json_object_set_new(o, "eta_s", eta) != 0;
    static const char *const tnames[] = {"created", "started", "finished"};
    const double times[3] = {j->created, j->started, j->finished};
    for (int k = 0; k < 3; k++) {
        if (isnan(times[k])) {
            bad |= json_object_set_new(o, tnames[k], json_null()) != 0;
        } else {
            char iso[40];
            iso_time(times[k], iso, sizeof(iso));
            bad |= json_object_set_new(o, tnames[k], json_string(iso)) != 0;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *txt = k == 0 ? j->error : j->result;
        json_t *v = txt ? json_loads(txt, 0, NULL) : NULL;
        bad |= json_object_set_new(o, k == 0 ? "error" : "result", v ? v : json_null()) != 0;
    }
    json_t *links = json_object();
    char buf[64];
    snprintf(buf, sizeof(buf), "/api/v1/jobs/%s", id);
    bad |= json_object_set_new(links, "self", json_string(buf)) != 0;
    if (strcmp(state, "succeeded") == 0) {
        snprintf(buf, sizeof(buf), "/api/v1/jobs/%s/result", id);
        bad |= json_object_set_new(links, "result", json_string(buf)) != 0;
    }
    bad |= json_object_set_new(o, "links", links) != 0;
    json_t *b = j->body ? json_loads(j->body, 0, NULL) : NULL;
    bad |= json_object_set_new(o, "request", b ? b : json_null()) != 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- calls from HTTP threads ------------------------------------------------------ */

/* The HTTP threads never wait on the database past its bound: while the store's circuit
 * is open (the database was lost), they do not call it at all and answer 503; otherwise
 * each store call is bounded (jobstore.h), and the runner's lock, which the runner holds
 * through its own bounded calls, is waited for at most twice that. */
static int http_lock(jobs *J)
{
    double bound = 2.0 * (J->shared ? J->cfg->jobs_database_timeout_s : 30.0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)bound;
    return pthread_mutex_timedlock(&J->lock, &ts) == 0 ? 0 : TESS_EIO;
}

/* HTTP reads of the embedded store take the runner's lock, so that a job seen ended has
 * its files removed already (the runner ends it and removes them under the lock).  Those
 * of a shared store go without it: other servers end jobs too, and the runner may hold
 * the lock through a call to a stalled database.  0, or TESS_EIO. */
static int http_read_begin(jobs *J)
{
    return J->shared ? 0 : http_lock(J);
}

static void http_read_end(jobs *J)
{
    if (!J->shared)
        pthread_mutex_unlock(&J->lock);
}

/* *rc (may be NULL): jobstore_get's code. */
static json_t *job_json_rc_locked(jobs *J, const char *id, int *rc)
{
    jobstore_job j;
    int r = jobstore_get(J->st, id, &j);
    if (rc)
        *rc = r;
    if (r != 0)
        return NULL;
    json_t *o = row_json(&j);
    jobstore_job_clear(&j);
    if (!o && rc)
        *rc = TESS_ENOMEM;
    return o;
}

static json_t *job_json_locked(jobs *J, const char *id)
{
    return job_json_rc_locked(J, id, NULL);
}

char *jobs_get_json(jobs *J, const char *id, int *missing)
{
    *missing = 0;
    if (!valid_id(id)) {
        *missing = 1;
        return NULL;
    }
    int rc = TESS_EIO;
    json_t *o = NULL;
    if (jobstore_available(J->st) && http_read_begin(J) == 0) {
        o = job_json_rc_locked(J, id, &rc);
        http_read_end(J);
    }
    if (!o) {
        *missing = rc == TESS_EIO ? 2 : rc == TESS_ENOMEM ? 0 : 1;
        return NULL;
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

static void list_cb(void *ctx, const jobstore_job *j)
{
    json_array_append_new(ctx, row_json(j));
}

char *jobs_list_json(jobs *J, int limit, int *unavailable)
{
    *unavailable = 0;
    json_t *a = json_array();
    if (!a)
        return NULL;
    int rc = TESS_EIO;
    if (jobstore_available(J->st) && http_read_begin(J) == 0) {
        rc = jobstore_list(J->st, limit, list_cb, a);
        http_read_end(J);
    }
    if (rc != 0) {
        json_decref(a);
        *unavailable = 1;
        return NULL;
    }
    char *s = json_dumps(a, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(a);
    return s;
}

int jobs_counts(jobs *J, long counts[5])
{
    long now[5];
    int rc = jobstore_available(J->st) ? jobstore_counts_now(J->st, now) : TESS_EIO;
    for (int i = 0; i < 5; i++) {
        if (rc == 0)
            __atomic_store_n(&J->counts[i], now[i], __ATOMIC_RELAXED);
        counts[i] = __atomic_load_n(&J->counts[i], __ATOMIC_RELAXED);
    }
    return rc;
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
struct promised {
    jobs *J;
    double sum;
};

static void promised_cb(void *ctx, const char *id, const char *state, double need)
{
    struct promised *p = ctx;
    if (strcmp(state, "running") == 0 && valid_id(id)) {
        char wd[PATH_MAX];
        const char *one[] = {wd};
        workdir_of(p->J, id, wd);
        need -= jobbudget_du(one, 1);
    }
    p->sum += need > 0.0 ? need : 0.0;
}

static double disk_promised_locked(jobs *J)
{
    struct promised p = {J, 0.0};
    jobstore_needs(J->st, promised_cb, &p);
    return p.sum;
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
    void *req = NULL;
    int bad = jobkind_parse(k, b, &env, 0, &req, pb) ||
              (k->estimate && k->estimate(req, &env, &cost, pb));
    json_t *norm = !bad && k->req_json ? k->req_json(req) : NULL;
    k->req_free(req);
    if (bad) {
        json_decref(b);
        return -1;
    }
    if (norm) {
        json_decref(b);
        b = norm;
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

    if (!jobstore_available(J->st) || http_lock(J)) {
        free(canon);
        jobkind_problem(pb, 503, NULL, "the jobs database cannot be reached; retry later");
        return -1;
    }
    long active = 0;
    int reached = jobstore_active(J->st, &active) == 0;
    int rc = -1;
    double need = jobbudget_disk_need(&cost);
    if (!reached) {
        jobkind_problem(pb, 503, NULL, "the jobs database cannot be reached; retry later");
    } else if (active >= J->cfg->max_queued_jobs) {
        jobkind_problem(pb, 503, NULL,
                        "%ld jobs are queued or running (limits.max_queued_jobs); retry later",
                        active);
    } else if (!lock_still_ours(J)) {
        jobkind_problem(pb, 503, NULL, "another server took the lock file of jobs.dir: this "
                        "server runs no more jobs (one server per jobs directory)");
    } else if (jobbudget_admit(J->cfg, &cost, disk_used_locked(J),
                               J->cfg->jobs_disk_mb ? disk_promised_locked(J) : 0.0, pb)) {
        /* *pb says which budget */
    } else if (jobstore_insert(J->st, id, k->type, canon, now_epoch(), need) != 0) {
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

/* The state of job `id` into `state` (16 bytes); 0 or TESS_ENOTFOUND (TESS_EIO: the
 * database did not answer).  The store serialises its calls: no lock needed. */
static int state_locked(jobs *J, const char *id, char *state)
{
    return jobstore_state(J->st, id, state);
}

int jobs_cancel(jobs *J, const char *id, double wait_s)
{
    if (!valid_id(id))
        return TESS_ENOTFOUND;
    char state[16];
    if (!jobstore_available(J->st) || http_lock(J))
        return TESS_EIO;
    int rc = state_locked(J, id, state);
    if (rc == 0) {
        if (strcmp(state, "queued") == 0) {
            rc = jobstore_end(J->st, id, "cancelled", now_epoch(), NULL, NULL);
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
                rc = jobstore_end(J->st, id, "cancelled", now_epoch(), NULL, NULL);
                if (rc == 0)
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
    if (!jobstore_available(J->st) || http_read_begin(J))
        return TESS_EIO;
    int rc = state_locked(J, id, state);
    if (rc == 0 && strcmp(state, "succeeded") != 0)
        rc = TESS_EAGAIN;
    char ct[64] = "";
    if (rc == 0 && (rc = jobstore_content_type(J->st, id, ct)) == 0) {
        snprintf(content_type, 64, "%s", ct[0] ? ct : "application/fits");
        result_of(J, id, content_type, path);
    }
    http_read_end(J);
    return rc;
}

/* ---- running a job --------------------------------------------------------------- */

static void block_run(void *arg)
{
    block_task *t = arg;
    double t0 = tess_mono_s();
    t->rc = t->kind->run_block(t->state, t->stage, t->block, &t->J->cur_cancel, t->err,
                               sizeof(t->err));
    if (t->rc && !t->err[0])
        tess_seterr(t->err, sizeof(t->err), "block %ld of stage %d failed (code %d)", t->block,
                    t->stage, t->rc);
    t->secs = tess_mono_s() - t0;
    jobs *J = t->J;
    /* The pool's thread does not wait long for the runner, which may hold the lock through
     * a call to a stalled database (up to jobs.database_timeout_s): the block is left on
     * the hand-off stack, which the runner takes at its next turn (within 0.2 s). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_timedlock(&J->lock, &ts) != 0) {
        block_task *head = __atomic_load_n(&J->handoff, __ATOMIC_RELAXED);
        do
            t->next = head;
        while (!__atomic_compare_exchange_n(&J->handoff, &head, t, 1, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED));
        return;
    }
    t->next = J->completed;
    J->completed = t;
    J->inflight--;
    pthread_cond_broadcast(&J->cond);
    pthread_mutex_unlock(&J->lock);
}

/* Moves the blocks of the hand-off stack (block_run) to the completion list.  Lock held. */
static void take_handoff_locked(jobs *J)
{
    block_task *t = __atomic_exchange_n(&J->handoff, NULL, __ATOMIC_ACQUIRE);
    while (t) {
        block_task *nx = t->next;
        t->next = J->completed;
        J->completed = t;
        J->inflight--;
        t = nx;
    }
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
    char wd[PATH_MAX], tmp[PATH_MAX];
    workdir_of(J, id, wd);
    tmp_of(J, id, tmp);
    int rc = jobstore_end(J->st, id, state, now_epoch(), error_json, NULL);
    /* A shared store that cannot be reached keeps the job running there: its files stay
     * for the run that takes it up again. */
    if (rc == 0 || !J->shared) {
        rm_tree(wd);
        unlink(tmp);
    }
    if (rc != 0 && !J->shared)
        jobstore_end(J->st, id, state, now_epoch(), error_json, NULL);
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

/* The held-lease list (shared): adds block (s, b) of job id; 0 or TESS_ENOMEM. */
static int held_add(jobs *J, const char *id, int s, long b)
{
    if (strcmp(J->held_job, id) != 0) {
        snprintf(J->held_job, sizeof J->held_job, "%s", id);
        J->nheld = 0;
    }
    if (J->nheld == J->capheld) {
        int cap = J->capheld ? 2 * J->capheld : 128;
        int *st = realloc(J->held_stage, (size_t)cap * sizeof *st);
        if (st)
            J->held_stage = st;
        long *bl = st ? realloc(J->held_block, (size_t)cap * sizeof *bl) : NULL;
        if (!bl)
            return TESS_ENOMEM;
        J->held_block = bl;
        J->capheld = cap;
    }
    J->held_stage[J->nheld] = s;
    J->held_block[J->nheld++] = b;
    return 0;
}

static void held_remove(jobs *J, int s, long b)
{
    for (int i = 0; i < J->nheld; i++)
        if (J->held_stage[i] == s && J->held_block[i] == b) {
            J->nheld--;
            J->held_stage[i] = J->held_stage[J->nheld];
            J->held_block[i] = J->held_block[J->nheld];
            return;
        }
}

/* Flushes the files finished blocks wrote under work directory wd (syncfs of its file
 * system), lock released meanwhile. */
static void sync_blocks_locked(jobs *J, const char *wd)
{
    pthread_mutex_unlock(&J->lock);
    int fd = open(wd, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
    pthread_mutex_lock(&J->lock);
}

/* The store in jobs.dir (not shared; shared stores: exchange_locked): flushes the files of
 * finished blocks to disk, then records the blocks as done (lock held on entry and exit;
 * released around syncfs).  syncfs covers whatever files the
 * blocks wrote, so a recorded block survives a power cut, not only a killed process. */
static void record_blocks_locked(jobs *J, const char *id, const char *wd, block_task **list)
{
    block_task *ok = *list;
    *list = NULL;
    if (!ok)
        return;
    sync_blocks_locked(J, wd);
    /* In batches of up to 256, without allocating (one transaction each). */
    int stages[256];
    long blocks[256];
    /* A batch not recorded (a full disk) runs again in the next run of the job. */
    int n = 0;
    for (block_task *t = ok; t; t = t->next) {
        stages[n] = t->stage;
        blocks[n++] = t->block;
        if (n == 256 || !t->next) {
            jobstore_record_blocks(J->st, id, n, stages, blocks);
            n = 0;
        }
    }
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
/* Blocks recorded by an earlier run, as read back from the store. */
struct doneset_ctx {
    const job_plan *plan;
    unsigned char **set;
    long done;
};

static void doneset_cb(void *ctx, int s, long bl)
{
    struct doneset_ctx *d = ctx;
    if (s >= 0 && s < d->plan->nstages && bl >= 0 && bl < d->plan->nblocks[s] && d->set[s] &&
        !d->set[s][bl]) {
        d->set[s][bl] = 1;
        d->done++;
    }
}

/* Shared stores: this runner is done with the current job, which another ended or this one
 * ended in the database (lock held): its work directory wd and temporary product tmp go,
 * and the runner is free for the next job. */
static void forget_job_locked(jobs *J, const char *wd, const char *tmp)
{
    rm_tree(wd);
    unlink(tmp);
    J->cur[0] = '\0';
    J->cur_cancel = 0;
    J->job_generation++;
    pthread_cond_broadcast(&J->cond);
}

/* Shared stores: whether the product at `path` can be registered here (lock not held):
 * its dataset name free or already this product, the dataset it attaches to present.
 * Returns 0 or a code with err. */
static int product_registrable(jobs *J, const job_product *prod, const char *path, char *err,
                               size_t errlen)
{
    const dataset *d = prod->dataset[0] ? catalog_find(J->cat, prod->dataset) : NULL;
    if (d && !(d->npaths == 1 && strcmp(d->paths[0], path) == 0)) {
        tess_seterr(err, errlen, "dataset '%s' exists already", prod->dataset);
        return TESS_EEXIST;
    }
    if (prod->attach_to[0] && !catalog_find(J->cat, prod->attach_to)) {
        tess_seterr(err, errlen, "dataset '%s' is gone", prod->attach_to);
        return TESS_ENOTFOUND;
    }
    return 0;
}

/* Shared stores: ends the current job (lock held, released around the registration) once
 * its product is at `final`: the result and state succeeded in one statement that checks
 * the job is still running and its finish still this runner's (jobstore_finish_commit),
 * then the product registered here.  A job ended elsewhere first (a cancel, a failure)
 * gets no product: `final` is removed.  When the database cannot be reached, the job stays
 * as it is (running, claimed here until the claim expires) and is finished again later. */
static void commit_product_locked(jobs *J, const char *id, const char *wd, const char *tmp,
                                  const char *final, const char *result_json,
                                  const job_product *prod)
{
    int changed = 0;
    if (jobstore_finish_commit(J->st, id, J->owner, now_epoch(), result_json, prod->dataset,
                               prod->attach_to, prod->content_type, &changed) != 0) {
        J->cur[0] = '\0';
        J->cur_cancel = 0;
        return;
    }
    if (changed) {
        seen_add(J, id);
        pthread_mutex_unlock(&J->lock);
        char err[512] = "";
        if (register_product(J, prod, final, err, sizeof err) != 0)
            fprintf(stderr, "tesserad: product of job %s not registered: %s\n", id, err);
        pthread_mutex_lock(&J->lock);
    } else {
        /* Ended elsewhere: cancelled or failed, its product removed; a finish claim taken
         * over (this one took longer than the lease) leaves the product to its new
         * finisher, which writes the same file. */
        char state[16] = "";
        if (jobstore_state(J->st, id, state) == 0 &&
            (strcmp(state, "cancelled") == 0 || strcmp(state, "failed") == 0))
            unlink(final);
    }
    forget_job_locked(J, wd, tmp);
}

/* Shared stores: the blocks of the current stage this runner leased and has not yet
 * handed to the pool, and what the last exchange with the store said. */
typedef struct leased {
    long blocks[64];
    int n, at;
    int got;        /* blocks the last exchange leased */
    double last;    /* tess_mono_s of the last exchange that asked for blocks */
    double backoff; /* seconds before asking again while none come (others hold them) */
    long left;      /* blocks of the stage not done, as the last exchange saw; -1 unknown */
    int others;     /* other runners holding leases of the job, as it saw */
    double avg_s;   /* seconds a block of this stage takes here (moving average) */
} leased;

/* Shared stores: the records go with the next lease; without one, at least this often. */
#define SHARED_RECORD_S 1.0
/* A lease asks for about this much work at once (seconds of the pool's blocks). */
#define SHARED_BATCH_S 0.5

/* How many blocks to lease: at least twice what the pool takes at once, less those in
 * flight or leased here (the next blocks are at hand when one ends), else SHARED_BATCH_S
 * of work at the pace measured, but no more than the stage's blocks left over twice the
 * runners holding leases and one more that may join (the last ones are spread over the
 * runners: guided self-scheduling); at least one pool's worth, at most 64. */
static int lease_want(const jobs *J, int max_inflight, const leased *ls)
{
    int here = J->inflight + (ls->n - ls->at);   /* in flight or leased, not yet run */
    int want = 2 * max_inflight - here;
    if (ls->avg_s > 0) {
        double w = SHARED_BATCH_S / ls->avg_s * max_inflight - here;
        long guided = ls->left >= 0 ? ls->left / (2 * (ls->others + 2)) : 0;
        if (w > (double)guided)
            w = (double)guided;
        if (w > want)
            want = w > 64 ? 64 : (int)w;
    }
    return want < max_inflight ? max_inflight : want > 64 ? 64 : want;
}

/* Shared stores: the runner's one statement with the store while stage s runs
 * (jobstore_record_lease).  Records the blocks of *ok (ok may be NULL: none) after
 * flushing the work directory's files (syncfs, lock released around it), and leases up to
 * `want` blocks, appended to those of ls not yet in the pool, when want > 0; *gone = 1
 * when the job is no longer running.  Lock held.  Returns 0, or the store's code with *ok
 * as it was (the blocks stay leased here, recorded next time). */
static int exchange_locked(jobs *J, const char *id, const char *wd, int s, int want,
                           leased *ls, block_task **ok, int *gone)
{
    block_task *list = ok ? *ok : NULL;
    if (ok)
        *ok = NULL;
    int n = 0;
    for (block_task *t = list; t; t = t->next)
        n++;
    if (list)
        sync_blocks_locked(J, wd);
    int *stages = n ? malloc((size_t)n * sizeof *stages) : NULL;
    long *blocks = n ? malloc((size_t)n * sizeof *blocks) : NULL;
    if (n && (!stages || !blocks)) {
        free(stages);
        free(blocks);
        *ok = list;
        return TESS_ENOMEM;
    }
    int i = 0;
    for (block_task *t = list; t; t = t->next, i++) {
        stages[i] = t->stage;
        blocks[i] = t->block;
    }
    int cap = (int)(sizeof ls->blocks / sizeof ls->blocks[0]) - (ls->n - ls->at);
    if (want > cap)
        want = cap;
    long got[64];
    int ngot = 0, expired = 0;
    long left = -1;
    int others = 0;
    char state[16] = "";
    if (want > 0)
        ls->last = tess_mono_s();
    int rc = jobstore_record_lease(J->st, id, n, stages, blocks, s, J->owner, J->lease_s,
                                   want, got, &ngot, &expired, &left, &others, state);
    free(stages);
    free(blocks);
    if (rc == TESS_ENOTFOUND) {
        *gone = 1;
        rc = 0;
    }
    if (rc) {
        if (ok)
            *ok = list;
        if (want > 0) {
            ls->got = 0;
            ls->backoff = 0.25;
        }
        return rc;
    }
    for (block_task *t = list; t; t = t->next)
        held_remove(J, t->stage, t->block);
    while (list) {
        block_task *nx = list->next;
        free(list);
        list = nx;
    }
    if (state[0] && strcmp(state, "running") != 0)
        *gone = 1;
    ls->left = left;
    ls->others = others;
    if (want > 0) {
        /* A block the held list cannot take is not run: its lease ends at the next
         * renewal and another server (or this one, later) takes it. */
        int kept = ls->n - ls->at;
        memmove(ls->blocks, ls->blocks + ls->at, (size_t)kept * sizeof ls->blocks[0]);
        for (int k = 0; k < ngot; k++)
            if (held_add(J, id, s, got[k]) == 0)
                ls->blocks[kept++] = got[k];
        ls->n = kept;
        ls->at = 0;
        ls->got = ngot;
        /* None came while others hold the rest: ask again after 50 ms, then less often,
         * up to every 0.5 s (the runner that records a stage's last block starts the
         * next at once, leasing no more than its share). */
        ls->backoff = ngot ? 0.0 : ls->backoff <= 0 ? 0.05 : ls->backoff * 2 > 0.5 ? 0.5
                                                                   : ls->backoff * 2;
        J->expiries += (unsigned long long)expired;
    }
    return 0;
}

/* After a store call of the running job that failed: 1 with detail when the database
 * refused it as the store stands (a table dropped, a privilege taken away): retrying will
 * not help, so the job fails, saying why, rather than stay running. */
static int refused(char *detail, size_t len)
{
    char why[256];
    if (!jobstore_refused(why, sizeof why))
        return 0;
    snprintf(detail, len, "the jobs database refused the job's statements: %.200s", why);
    return 1;
}

static void run_job_locked(jobs *J, const char *id)
{
    char type[64] = "", *body = NULL;
    if (jobstore_type_body(J->st, id, type, &body) != 0)
        return;
    /* The body was valid JSON when it was accepted: a parse that fails for want of
     * memory (jansson says "out of memory", or nothing when its first allocation
     * failed) is tried again later. */
    json_error_t jerr;
    json_t *b = body ? json_loads(body, 0, &jerr) : NULL;
    free(body);
    if ((!b && (json_error_code(&jerr) == json_error_out_of_memory ||
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
    /* Shared: the first plan of a job may create its work files (daemon/jobs/jobkind.h),
     * so one server plans it first, under the job's claim (renewed with the leases, taken
     * over when its holder dies); the others plan it once its block rows exist. */
    int planned = 0, took = 0;
    char why[300];
    if (J->shared && (jobstore_planned(J->st, id, &planned) != 0 ||
                      (!planned && jobstore_claim_finish(J->st, id, J->owner, J->lease_s,
                                                         &took)))) {
        json_decref(b);
        if (refused(why, sizeof why))
            fail_job_locked(J, id, 500, why);
        J->cur[0] = '\0';
        return;
    }
    J->finish_expiries += (unsigned long long)took;   /* a dead planner's claim */
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
    if (fresh && jobstore_reset_blocks(J->st, id) != 0) {
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
    void *req = NULL;
    int rc = jobkind_parse(k, b, &env, 1, &req, &epb) ? jobkind_problem_error(&epb, err,
                                                                              sizeof(err)) : 0;
    json_decref(b);
    if (!rc && k->estimate && k->estimate(req, &env, &cost, &epb) != 0)
        memset(&cost, 0, sizeof cost);
    if (!rc)
        rc = k->plan(req, &env, wd, &plan, err, sizeof(err));
    k->req_free(req);
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
    struct doneset_ctx dc = {&plan, doneset, 0};
    jobstore_done_blocks(J->st, id, doneset_cb, &dc);
    long done = dc.done;
    /* A shared store makes the block rows every server leases from (idempotent); one that
     * cannot be reached now leaves the job for a later try. */
    if (J->shared && (jobstore_plan_blocks(J->st, id, plan.nstages, plan.nblocks) != 0 ||
                      (!planned && jobstore_release(J->st, J->owner) != 0))) {
        for (int s = 0; s < plan.nstages; s++)
            free(doneset[s]);
        if (k->release)
            k->release(plan.state);
        if (refused(why, sizeof why))
            fail_job_locked(J, id, 500, why);
        J->cur[0] = '\0';
        return;
    }
    jobstore_set_running(J->st, id, now_epoch(), (long long)total, (long long)done);

    int failed = 0, fail_status = 500;
    char fail_detail[300] = "";
    block_task *ok = NULL;
    double last_record = tess_mono_s();
    int max_inflight = jobbudget_blocks(J->cfg, &cost, J->threads);
    double last_check = tess_mono_s();
    double state_at = tess_mono_s();   /* shared: when the job's state was last read */
    int gone = 0;               /* shared: the job ended elsewhere (cancelled, failed) */
    int moved = 0;              /* shared: left for another job with work (pg_next) */
    for (int s = 0; s < plan.nstages && !failed && !J->cur_cancel && !J->stopping &&
                    !J->lock_lost && !gone && !moved; s++) {
        long next = 0;
        leased ls = {.n = 0, .at = 0, .got = 1, .last = 0.0, .backoff = 0.0, .left = -1,
                     .others = 0, .avg_s = 0.0};
        for (;;) {
            take_handoff_locked(J);
            int stop = failed || J->cur_cancel || J->stopping || J->lock_lost || gone || moved;
            /* Shared: one statement records the blocks done and leases the next ones,
             * when the pool runs out of leased blocks or the records are due. */
            if (J->shared) {
                /* Leased before the pool runs dry (at most one pool's worth left here),
                 * so that its threads have blocks while the statement runs; records (a
                 * syncfs: often slower than the statement) when due or when idle. */
                double now = tess_mono_s();
                int idle = !J->inflight && !J->completed && ls.at >= ls.n;
                int need = !stop && ls.n - ls.at <= (idle ? 0 : max_inflight) &&
                           ls.n - ls.at < (int)(sizeof ls.blocks / sizeof ls.blocks[0]);
                int poll = need && (ls.got || now - ls.last >= ls.backoff);
                int rec = ok && !gone && (idle || now - last_record >= SHARED_RECORD_S);
                if (poll || rec) {
                    if (exchange_locked(J, id, wd, s, poll ? lease_want(J, max_inflight, &ls)
                                                           : 0, &ls, rec ? &ok : NULL,
                                        &gone) == 0) {
                        state_at = tess_mono_s();
                        if (rec)
                            last_record = state_at;
                    } else if (!failed && refused(fail_detail, sizeof fail_detail)) {
                        failed = 1;
                        J->cur_cancel = 1;
                    }
                    if (gone)
                        J->cur_cancel = 1;
                    /* Nothing here, nothing to lease: the job's last blocks (or its
                     * next stage's start) are others'; a younger job with work is taken
                     * up instead of waiting (the scheduler comes back to this one). */
                    char other[17] = "";
                    if (poll && !gone && idle && !ok && !ls.got && ls.left > 0 &&
                        jobstore_next(J->st, other) == 0 && other[0] &&
                        strcmp(other, id) != 0)
                        moved = 1;
                }
            }
            stop = failed || J->cur_cancel || J->stopping || J->lock_lost || gone || moved;
            /* Shared: no block leased here starts while the database cannot be reached
             * (its lease cannot be renewed; blocks in flight finish). */
            while (!stop && J->inflight < max_inflight &&
                   (J->shared ? ls.at < ls.n && jobstore_reachable(J->st)
                              : next < plan.nblocks[s])) {
                if (J->shared) {
                    next = ls.blocks[ls.at];
                } else if (doneset[s] && doneset[s][next]) {
                    next++;
                    continue;
                }
                block_task *t = calloc(1, sizeof(*t));
                if (!t) {
                    failed = 1;
                    snprintf(fail_detail, sizeof(fail_detail), "out of memory");
                    break;
                }
                *t = (block_task){J, k, plan.state, s, next, 0, "", NULL, 0.0};
                J->inflight++;
                if (pool_submit(J->pool, POOL_BATCH, block_run, t) != 0) {
                    J->inflight--;
                    free(t);
                    break; /* queue full: interactive work has the pool; retry shortly */
                }
                next++;
                ls.at++;
            }
            long newly = 0;
            while (J->completed) {
                block_task *t = J->completed;
                J->completed = t->next;
                if (t->rc == 0) {
                    ls.avg_s = ls.avg_s > 0 ? 0.8 * ls.avg_s + 0.2 * t->secs : t->secs;
                    t->next = ok;
                    ok = t;
                    newly++;
                    J->blocks_run++;
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
             * and at the end of a stage, so that a busy disk does not slow the job.  A
             * shared store counts the recorded blocks of every server instead. */
            if (newly) {
                done += newly;
                if (!J->shared)
                    jobstore_set_done(J->st, id, (long long)done);
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
                /* Shared: a cancel or failure on another server stops the blocks here
                 * (the exchanges read the state too: asked only when none did lately). */
                char now_state[16];
                if (J->shared && !gone && tess_mono_s() - state_at >= 0.25 &&
                    jobstore_state(J->st, id, now_state) == 0) {
                    state_at = tess_mono_s();
                    if (strcmp(now_state, "running") != 0) {
                        gone = 1;
                        J->cur_cancel = 1;
                    }
                }
            }
            stop = failed || J->cur_cancel || J->stopping || J->lock_lost || gone || moved;
            /* Shared: the stage is complete when the last exchange, made with nothing
             * left here to record, found no block of it left anywhere. */
            int rest = J->shared ? !(ls.left == 0 && !ok && ls.at >= ls.n)
                                 : next < plan.nblocks[s];
            int stage_end = J->inflight == 0 && !J->completed && (stop || !rest);
            if (ok && !J->shared && (stage_end || tess_mono_s() - last_record >= 0.25)) {
                record_blocks_locked(J, id, wd, &ok);
                last_record = tess_mono_s();
            }
            if (ok && J->shared && stage_end && !gone) {
                if (exchange_locked(J, id, wd, s, 0, &ls, &ok, &gone) == 0)
                    last_record = tess_mono_s();
                else if (!failed && refused(fail_detail, sizeof fail_detail))
                    failed = 1;
            }
            if (stage_end)
                break;
            if (J->completed)
                continue;
            timed_wait(J, J->shared ? 50 : 200);
        }
    }
    for (int s = 0; s < plan.nstages; s++)
        free(doneset[s]);
    while (ok) {   /* shared, stopping while the database is away: not recorded */
        block_task *nx = ok->next;
        free(ok);
        ok = nx;
    }
    if (J->shared) {
        J->nheld = 0;
        jobstore_release(J->st, J->owner);
    }
    if (gone) {
        /* Ended by another server, which removed the files; blocks here may have written
         * since. */
        if (k->release)
            k->release(plan.state);
        char tmp[PATH_MAX];
        tmp_of(J, id, tmp);
        forget_job_locked(J, wd, tmp);
        return;
    }
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
    if (J->stopping || J->lock_lost || moved) {
        /* Left running: the next start (moved: the next turn) resumes it from its
         * recorded blocks. */
        J->moved = moved;
        if (k->release)
            k->release(plan.state);
        J->cur[0] = '\0';
        return;
    }
    /* Every block done.  Shared: one server writes the product (a claim in the database,
     * renewed with the leases; when its holder dies, another takes it over). */
    if (J->shared && jobstore_claim_finish(J->st, id, J->owner, J->lease_s, &took) != 0) {
        if (k->release)
            k->release(plan.state);
        J->cur[0] = '\0';
        return;
    }
    J->finish_expiries += (unsigned long long)took;   /* a dead finisher's claim */
    /* Write the product under a temporary name, then rename. */
    char tmp[PATH_MAX], final[PATH_MAX];
    tmp_of(J, id, tmp);
    unlink(tmp);
    job_product prod = {0};
    pthread_mutex_unlock(&J->lock);
    err[0] = '\0';
    rc = k->finish(plan.state, tmp, &prod, err, sizeof(err));
    if (k->release)
        k->release(plan.state);
    /* FITS products carry CHECKSUM and DATASUM, set once the file is whole. */
    if (rc == 0 && (!prod.content_type[0] || strcmp(prod.content_type, "application/fits") == 0))
        rc = fitswrite_checksum_file(tmp, err, sizeof(err));
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
    /* Shared: the product is registered in the database first, in the statement that
     * checks the job is still running (a cancel elsewhere wins until then), then here;
     * whether it can be is checked before. */
    if (rc == 0 && (rc = J->shared ? product_registrable(J, &prod, final, err, sizeof err)
                                   : register_product(J, &prod, final, err, sizeof(err))) != 0)
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
    if (J->shared) {
        commit_product_locked(J, id, wd, tmp, final, rs, &prod);
        free(rs);
        return;
    }
    jobstore_set_result(J->st, id, rs, prod.dataset, prod.attach_to, prod.content_type);
    free(rs);
    seen_add(J, id);
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
        jobstore_next(J->st, id);
        /* A job is taken only while the lock file is still this runner's. */
        if (!id[0] || J->lock_lost || !lock_still_ours(J)) {
            /* Shared: jobs come from other servers too, unannounced. */
            timed_wait(J, J->shared ? 250 : 1000);
            continue;
        }
        run_job_locked(J, id);
        /* A job that is still to run without the runner stopping did not get its end
         * recorded, or could not start (out of memory, a full disk): a while before it is
         * tried again, lock released. */
        char state[16];
        if (J->moved)
            J->moved = 0;   /* left for another job: that one next, at once */
        else if (!J->stopping &&
                 (state_locked(J, id, state) != 0 || strcmp(state, "queued") == 0 ||
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
            char id[17] = "", state[16] = "";
            /* Shared: another server may be writing the product of a running job. */
            if (J->shared && n == 21) {
                snprintf(id, sizeof id, "%.16s", e->d_name + 1);
                if (state_locked(J, id, state) != 0 || strcmp(state, "running") == 0)
                    continue;
            }
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
            int rc = valid_id(e->d_name) ? state_locked(J, e->d_name, state) : TESS_ENOTFOUND;
            int keep = (rc == 0 && strcmp(state, "running") == 0) || rc == TESS_EIO;
            if (!keep) {
                char f[PATH_MAX + 260];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                rm_tree(f);
            }
        }
        closedir(d);
    }
}

/* The succeeded jobs a query found, to register outside the lock. */
typedef struct product_ref {
    char id[17];
    char dataset[128], attach_to[128], ctype[64];
    double finished;
} product_ref;

typedef struct product_list {
    product_ref *v;
    size_t n, cap;
} product_list;

static void product_cb(void *ctx, const char *id, const char *ds, const char *at,
                       const char *ct, double finished)
{
    product_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        product_ref *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    product_ref *r = &l->v[l->n++];
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->dataset, sizeof r->dataset, "%s", ds ? ds : "");
    snprintf(r->attach_to, sizeof r->attach_to, "%s", at ? at : "");
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    r->finished = finished;
}

static int seen_has(const jobs *J, const char *id)
{
    for (size_t i = 0; i < J->nseen; i++)
        if (strcmp(J->seen[i], id) == 0)
            return 1;
    return 0;
}

/* Remembers that this process registered job id's product (shared stores only). */
static void seen_add(jobs *J, const char *id)
{
    if (!J->shared || seen_has(J, id))
        return;
    if (J->nseen == J->capseen) {
        size_t cap = J->capseen ? 2 * J->capseen : 64;
        char (*v)[17] = realloc(J->seen, cap * sizeof *v);
        if (!v)
            return;
        J->seen = v;
        J->capseen = cap;
    }
    snprintf(J->seen[J->nseen++], 17, "%s", id);
}

/* Registers the products in *l not yet registered here (lock not held: catalog calls). */
static void register_list(jobs *J, product_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        product_ref *r = &l->v[i];
        pthread_mutex_lock(&J->lock);
        int have = seen_has(J, r->id);
        pthread_mutex_unlock(&J->lock);
        if (have)
            continue;
        job_product prod = {0};
        snprintf(prod.dataset, sizeof(prod.dataset), "%s", r->dataset);
        snprintf(prod.attach_to, sizeof(prod.attach_to), "%s", r->attach_to);
        char final[PATH_MAX], err[256];
        result_of(J, r->id, r->ctype, final);
        if (access(final, R_OK) != 0)
            continue;
        int rc = register_product(J, &prod, final, err, sizeof(err));
        size_t fl = strlen(final);
        if (rc == TESS_ENOTFOUND && !J->shared && prod.attach_to[0] && fl > 5 &&
            strcmp(final + fl - 5, ".fits") == 0) {
            /* a plane store (ingest) of a dataset no longer configured: swept (not in a
             * shared store, whose other servers may serve that dataset) */
            unlink(final);
            fprintf(stderr, "tesserad: product of job %s removed: %s\n", r->id, err);
        } else if (rc) {
            fprintf(stderr, "tesserad: product of job %s not registered: %s\n", r->id, err);
        }
        pthread_mutex_lock(&J->lock);
        seen_add(J, r->id);
        /* Another server's clock may lag: look a minute back. */
        if (!isnan(r->finished) && r->finished - 60.0 > J->seen_since)
            J->seen_since = r->finished - 60.0;
        pthread_mutex_unlock(&J->lock);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Registers the products of succeeded jobs again (after a restart).  Lock not held. */
static void reregister(jobs *J)
{
    product_list l = {0};
    pthread_mutex_lock(&J->lock);
    jobstore_succeeded(J->st, -INFINITY, product_cb, &l);
    pthread_mutex_unlock(&J->lock);
    register_list(J, &l);
}

/* Shared stores: every lease_s / 4 (at most a second) renews this runner's leases, and
 * registers the products other servers made since the last look. */
static void *keeper(void *arg)
{
    jobs *J = arg;
    double period = J->lease_s / 4.0 < 1.0 ? J->lease_s / 4.0 : 1.0;
    pthread_mutex_lock(&J->lock);
    while (!J->stopping) {
        /* A lost database is probed here, the lock released: every other call fails at
         * once while it is lost, so the lock is never held waiting for it. */
        if (!jobstore_available(J->st)) {
            pthread_mutex_unlock(&J->lock);
            jobstore_probe(J->st);
            pthread_mutex_lock(&J->lock);
        }
        long renewed = 0;
        if (jobstore_renew(J->st, J->owner, J->lease_s, J->held_job, J->nheld, J->held_stage,
                           J->held_block, &renewed) == 0)
            J->renewals += (unsigned long long)renewed;
        product_list l = {0};
        jobstore_succeeded(J->st, J->seen_since, product_cb, &l);
        pthread_mutex_unlock(&J->lock);
        register_list(J, &l);
        pthread_mutex_lock(&J->lock);
        double until = tess_mono_s() + period;
        while (!J->stopping && tess_mono_s() < until)
            timed_wait(J, (long)((until - tess_mono_s()) * 1000.0) + 1);
    }
    pthread_mutex_unlock(&J->lock);
    return NULL;
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
    if (J->shared)
        return 1;   /* no lock: the servers of a shared store share jobs.dir */
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

/* This runner's name in leases: host name, pid and 4 random bytes. */
static void make_owner(jobs *J)
{
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    unsigned char rnd[4] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        memset(rnd, 0, sizeof rnd);
    snprintf(J->owner, sizeof J->owner, "%.60s/%ld/%02x%02x%02x%02x", host, (long)getpid(),
             rnd[0], rnd[1], rnd[2], rnd[3]);
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
    J->shared = cfg->jobs_database != NULL;
    J->lease_s = cfg->jobs_lease_s > 0 ? cfg->jobs_lease_s : 10.0;
    J->seen_since = -INFINITY;
    make_owner(J);
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
    /* A shared store: every server of the cluster uses jobs.dir at once, no lock. */
    if (!rc && !J->shared)
        rc = lock_dir(J, err, errlen);
    if (!rc)
        rc = J->shared ? jobstore_open_pg(cfg->jobs_database, cfg->jobs_database_timeout_s,
                                          &J->st, err, errlen)
                       : jobstore_open_sqlite(J->dir, &J->st, err, errlen);
    if (rc) {
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
    jobstore_prune_blocks(J->st);
    pthread_mutex_unlock(&J->lock);
    reregister(J);
    if (pthread_create(&J->sched, NULL, scheduler, J) != 0) {
        jobstore_close(J->st);
        if (J->lockfd >= 0)
            close(J->lockfd);
        if (J->dirfd >= 0)
            close(J->dirfd);
        free(J->seen);
        free(J);
        tess_seterr(err, errlen, "cannot start the job scheduler");
        return TESS_ENOMEM;
    }
    J->started = 1;
    if (J->shared && pthread_create(&J->keeper, NULL, keeper, J) == 0)
        J->keeper_started = 1;
    if (J->shared && !J->keeper_started) {
        jobs_close(J);
        tess_seterr(err, errlen, "cannot start the lease keeper");
        return TESS_ENOMEM;
    }
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
    if (J->keeper_started)
        pthread_join(J->keeper, NULL);
    /* The scheduler waited for its blocks in flight; nothing is left on the list. */
    jobstore_close(J->st);
    if (J->lockfd >= 0)
        close(J->lockfd);   /* releases the directory's locks */
    if (J->dirfd >= 0)
        close(J->dirfd);
    pthread_mutex_destroy(&J->lock);
    pthread_cond_destroy(&J->cond);
    free(J->seen);
    free(J->held_stage);
    free(J->held_block);
    free(J);
}

unsigned long long jobs_blocks_run(jobs *J)
{
    pthread_mutex_lock(&J->lock);
    unsigned long long n = J->blocks_run;
    pthread_mutex_unlock(&J->lock);
    return n;
}

/* Appends `text` to the malloc'd string *s; 0 (and *s freed, NULL) when out of memory. */
static int append_text(char **s, const char *text)
{
    size_t a = strlen(*s), b = strlen(text);
    char *t = realloc(*s, a + b + 1);
    if (!t) {
        free(*s);
        *s = NULL;
        return 0;
    }
    memcpy(t + a, text, b + 1);
    *s = t;
    return 1;
}

int jobs_database_reachable(jobs *J)
{
    return jobstore_reachable(J->st);
}

char *jobs_metrics_text(jobs *J)
{
    /* Without the lock: the runner may hold it through a call to a stalled database. */
    unsigned long long blocks = __atomic_load_n(&J->blocks_run, __ATOMIC_RELAXED);
    unsigned long long ren = __atomic_load_n(&J->renewals, __ATOMIC_RELAXED);
    unsigned long long exp = __atomic_load_n(&J->expiries, __ATOMIC_RELAXED);
    unsigned long long fexp = __atomic_load_n(&J->finish_expiries, __ATOMIC_RELAXED);
    double dbs = jobstore_seconds(J->st);
    unsigned long long calls[JOBSTORE_NOPS];
    double secs[JOBSTORE_NOPS];
    for (int i = 0; i < JOBSTORE_NOPS; i++) {
        calls[i] = jobstore_op_calls(J->st, i);
        secs[i] = jobstore_op_seconds(J->st, i);
    }
    char *out = NULL;
    if (asprintf(&out,
                 "# HELP tessera_job_blocks_total Job blocks this process ran to completion.\n"
                 "# TYPE tessera_job_blocks_total counter\n"
                 "tessera_job_blocks_total %llu\n"
                 "# HELP tessera_job_lease_renewals_total Block and finish leases this process "
                 "renewed (shared job store).\n"
                 "# TYPE tessera_job_lease_renewals_total counter\n"
                 "tessera_job_lease_renewals_total %llu\n"
                 "# HELP tessera_job_lease_expiries_total Expired leases of other processes "
                 "this process took over: blocks and job claims (plan, finish) (shared job "
                 "store).\n"
                 "# TYPE tessera_job_lease_expiries_total counter\n"
                 "tessera_job_lease_expiries_total %llu\n"
                 "# HELP tessera_job_finish_expiries_total Expired job claims (first plan, "
                 "finish) of other processes this process took over (shared job store; also "
                 "counted in tessera_job_lease_expiries_total).\n"
                 "# TYPE tessera_job_finish_expiries_total counter\n"
                 "tessera_job_finish_expiries_total %llu\n"
                 "# HELP tessera_job_database_errors_total Job-store calls that failed (the "
                 "database refused or could not be reached).\n"
                 "# TYPE tessera_job_database_errors_total counter\n"
                 "tessera_job_database_errors_total %llu\n"
                 "# HELP tessera_job_database_seconds_total Time spent in job-store calls "
                 "(leases, renewals, records, state), by every thread of the runner.\n"
                 "# TYPE tessera_job_database_seconds_total counter\n"
                 "tessera_job_database_seconds_total %.6f\n"
                 "# HELP tessera_job_database_up Whether the last job-store call reached the "
                 "database.\n"
                 "# TYPE tessera_job_database_up gauge\n"
                 "tessera_job_database_up %d\n"
                 "# HELP tessera_job_database_calls_total Job-store calls (one statement "
                 "each) by operation.\n"
                 "# TYPE tessera_job_database_calls_total counter\n",
                 blocks, ren, exp + fexp, fexp, jobstore_errors(J->st), dbs,
                 jobstore_reachable(J->st)) < 0)
        return NULL;
    /* Per operation, those called at least once: calls, then seconds. */
    for (int pass = 0; pass < 2 && out; pass++) {
        if (pass == 1 && !append_text(&out, "# HELP tessera_job_database_op_seconds_total "
                                      "Time spent in job-store calls by operation.\n"
                                      "# TYPE tessera_job_database_op_seconds_total counter\n"))
            return NULL;
        for (int i = 0; i < JOBSTORE_NOPS && out; i++) {
            if (!calls[i])
                continue;
            char line[160];
            if (pass == 0)
                snprintf(line, sizeof line, "tessera_job_database_calls_total{op=\"%s\"} %llu\n",
                         jobstore_op_name(i), calls[i]);
            else
                snprintf(line, sizeof line,
                         "tessera_job_database_op_seconds_total{op=\"%s\"} %.6f\n",
                         jobstore_op_name(i), secs[i]);
            if (!append_text(&out, line))
                return NULL;
        }
    }
    return out;
}
