/* The job runner's face (jobs.h): the registry of job types, submit, cancel and result for
 * HTTP threads, and jobs_open, which chooses the block source (blocksrc.h) and starts the
 * scheduler (jobs_run.c) and, for a shared store, the keeper (jobs_keeper.c).  The rest of
 * the runner: jobs_impl.h. */
#include "daemon/jobs/jobs_impl.h"
#include "daemon/jobs/jobbudget.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

/* ---- submit, cancel, result ------------------------------------------------------ */

/* What accepted jobs will still write: the disk need of every queued job, and of the
 * running ones less what their work directories hold already.  Lock held. */
struct promised {
    jobs *J;
    double sum;
};

static void promised_cb(void *ctx, const char *id, const char *state, double need)
{
    struct promised *p = ctx;
    if (strcmp(state, "running") == 0 && jobs_valid_id(id)) {
        char wd[PATH_MAX];
        const char *one[] = {wd};
        jobs_workdir(p->J, id, wd);
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
    job_env env = {J->cfg, J->cat, J->threads, J->collections, NULL};
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

    if (!jobstore_available(J->st) || jobs_http_lock(J)) {
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
    } else if (!jobs_lock_still_ours(J)) {
        jobkind_problem(pb, 503, NULL, "another server took the lock file of jobs.dir: this "
                        "server runs no more jobs (one server per jobs directory)");
    } else if (jobbudget_admit(J->cfg, &cost, jobs_disk_used_locked(J),
                               J->cfg->jobs_disk_mb ? disk_promised_locked(J) : 0.0, pb)) {
        /* *pb says which budget */
    } else if (jobstore_insert(J->st, id, k->type, canon, jobs_now(), need) != 0) {
        jobkind_problem(pb, 500, NULL, "the jobs database refused the job");
    } else {
        json_t *o = jobs_job_json_locked(J, id);
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

/* Ends job id as cancelled in the store and removes its work directory, for a job that no
 * runner of this process holds (lock held).  0, or the store's error. */
static int cancel_idle_locked(jobs *J, const char *id)
{
    char wd[PATH_MAX];
    jobs_workdir(J, id, wd);
    int rc = jobstore_end(J->st, id, "cancelled", jobs_now(), NULL, NULL);
    if (rc == 0)
        jobs_rm_tree(wd);
    return rc;
}

int jobs_cancel(jobs *J, const char *id, double wait_s)
{
    if (!jobs_valid_id(id))
        return TESS_ENOTFOUND;
    char state[16];
    if (!jobstore_available(J->st) || jobs_http_lock(J))
        return TESS_EIO;
    int rc = jobstore_state(J->st, id, state);
    if (rc == 0 && !jobs_state_open(state)) {
        rc = TESS_EINVAL;
    } else if (rc == 0 && strcmp(J->cur, id) == 0) {
        /* The runner's job, running or (stored as queued) planned outside the lock: ending
         * it in the store here would be undone when the run begins, which would then go
         * to its end.  The runner stops it and ends it as cancelled. */
        J->cur_cancel = 1;
        pthread_cond_broadcast(&J->cond);
        double until = tess_mono_s() + wait_s;
        while (strcmp(J->cur, id) == 0 && tess_mono_s() < until)
            jobs_wait_locked(J, 50);
        /* The run over: it may have ended before it saw the cancel (succeeded or failed:
         * nothing was cancelled), or left the job running (the server stopping, another
         * job's turn): then the cancel is written here, as for a job no runner holds. */
        if (strcmp(J->cur, id) != 0 && jobstore_state(J->st, id, state) == 0) {
            if (jobs_state_open(state))
                cancel_idle_locked(J, id);
            else if (strcmp(state, "cancelled") != 0)
                rc = TESS_EINVAL;
        }
    } else if (rc == 0 && strcmp(state, "queued") == 0) {
        rc = jobstore_end(J->st, id, "cancelled", jobs_now(), NULL, NULL);
    } else if (rc == 0) {
        /* Marked running by an earlier process and not yet taken up again. */
        rc = cancel_idle_locked(J, id);
    }
    pthread_mutex_unlock(&J->lock);
    return rc;
}

int jobs_result(jobs *J, const char *id, char *path, char *content_type, char *state)
{
    if (!jobs_valid_id(id))
        return TESS_ENOTFOUND;
    if (!jobstore_available(J->st) || jobs_http_read_begin(J))
        return TESS_EIO;
    int rc = jobstore_state(J->st, id, state);
    if (rc == 0 && strcmp(state, "succeeded") != 0)
        rc = TESS_EAGAIN;
    char ct[64] = "";
    if (rc == 0 && (rc = jobstore_content_type(J->st, id, ct)) == 0) {
        snprintf(content_type, 64, "%s", ct[0] ? ct : "application/fits");
        jobs_result_path(J, id, content_type, path);
    }
    jobs_http_read_end(J);
    return rc;
}

/* ---- open and close -------------------------------------------------------------- */

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

int jobs_open(const char *dir, const tess_config *cfg, catalog *cat,
              struct colset *collections, pool *p, jobs **out,
              char *err, size_t errlen)
{
    jobs *J = calloc(1, sizeof(*J));
    if (!J) {
        tess_seterr(err, errlen, "out of memory for the job runner");
        return TESS_ENOMEM;
    }
    J->cfg = cfg;
    J->cat = cat;
    J->collections = collections;
    J->pool = p;
    J->threads = pool_threads(p);
    /* A shared store (jobs.database): blocks by lease, among the servers of a cluster. */
    int shared = cfg->jobs_database != NULL;
    J->src = shared ? &blocksrc_shared : &blocksrc_local;
    J->store_bound_s = shared ? cfg->jobs_database_timeout_s : 30.0;
    J->lease_s = cfg->jobs_lease_s > 0 ? cfg->jobs_lease_s : 10.0;
    J->seen_since = -INFINITY;
    make_owner(J);
    pthread_mutex_init(&J->lock, NULL);
    pthread_cond_init(&J->cond, NULL);
    int rc = jobs_mkdir_p(dir, err, errlen);
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
        rc = jobs_mkdir_p(sub, err, errlen);
        snprintf(sub, sizeof(sub), "%s/results", J->dir);
        if (!rc)
            rc = jobs_mkdir_p(sub, err, errlen);
    }
    free(real);
    J->lockfd = -1;
    J->dirfd = -1;
    /* A shared store: every server of the cluster uses jobs.dir at once, no lock. */
    if (!rc && !shared)
        rc = jobs_lock_dir(J, err, errlen);
    if (!rc)
        rc = shared ? jobstore_open_pg(cfg->jobs_database, cfg->jobs_database_timeout_s,
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
    jobs_sweep(J);
    jobstore_prune_blocks(J->st);
    pthread_mutex_unlock(&J->lock);
    jobs_reregister(J);
    if (pthread_create(&J->sched, NULL, jobs_scheduler, J) != 0) {
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
    if (shared && jobs_keeper_start(J) != 0) {
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

int jobs_database_reachable(jobs *J)
{
    return jobstore_reachable(J->st);
}
