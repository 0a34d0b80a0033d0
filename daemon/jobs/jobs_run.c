/* The job runner (jobs_impl.h): the scheduler thread takes one job at a time and runs it
 * as daemon/jobs/jobkind.h describes: plan it (outside the lock), feed the pool the blocks
 * its block source gives (blocksrc.h), hand the finished ones back to the source, stop at
 * a failure, a cancel or the job's end elsewhere, then finish: the product written under a
 * temporary name, checked, renamed and committed through the source.  The plan is released
 * in one place (run_job_locked), whatever the end.  Every function here is the same for one
 * server and for a cluster: what differs is the source's. */
#include "daemon/jobs/jobs_impl.h"
#include "daemon/jobs/jobbudget.h"
#include "daemon/jobs/job_common.h"
#include "daemon/oplog.h"
#include "daemon/problem.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/fits/fitswrite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- blocks on the pool ---------------------------------------------------------- */

/* *ts: `ms` milliseconds from now on the real-time clock (for the timed waits). */
static void deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

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
    deadline_in(&ts, 20);
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

void jobs_wait_locked(jobs *J, long ms)
{
    struct timespec ts;
    deadline_in(&ts, ms);
    pthread_cond_timedwait(&J->cond, &J->lock, &ts);
}

/* Ends the current job (lock held): state, error, then cleanup of its files.  In that
 * order, so that a job still running in the database keeps its work directory (the
 * start-up sweep removes those of ended jobs); the source says what becomes of them when
 * the state cannot be written (blocksrc.h: end_job). */
void jobs_end_locked(jobs *J, const char *id, const char *state, const char *error_json)
{
    char wd[PATH_MAX], tmp[PATH_MAX];
    jobs_workdir(J, id, wd);
    jobs_tmp_path(J, id, tmp);
    J->src->end_job(J, id, state, error_json, wd, tmp);
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
    jobs_end_locked(J, id, "failed", pj);
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

/* This runner is done with the current job, which another server ended, or this one ended
 * in the database (blocksrc.h: commit) (lock held): its work directory wd and temporary
 * product tmp go, and the runner is free for the next job. */
void jobs_forget_locked(jobs *J, const char *wd, const char *tmp)
{
    jobs_rm_tree(wd);
    unlink(tmp);
    J->cur[0] = '\0';
    J->cur_cancel = 0;
    J->job_generation++;
    pthread_cond_broadcast(&J->cond);
}

/* ---- running a job --------------------------------------------------------------- */

/* How a run of a job ended. */
typedef enum run_end {
    RUN_DONE,       /* every block done (then: the product written) */
    RUN_FAILED,     /* with status and detail */
    RUN_CANCELLED,
    RUN_GONE,       /* ended elsewhere: another server cancelled or failed it */
    RUN_LEFT,       /* left running: the runner stops, the lock file was lost, another job
                       has work (moved) or the store could not be reached */
} run_end;

typedef struct run_result {
    run_end end;
    int status;
    char detail[512];
} run_result;

/* The first failure of a run is the one said. */
static void run_fail(run_result *r, int status, const char *detail)
{
    if (r->end == RUN_FAILED)
        return;
    r->end = RUN_FAILED;
    r->status = status;
    snprintf(r->detail, sizeof r->detail, "%s", detail);
}

/* Whether no more blocks of the job are to start. */
static int stopped(const jobs *J, const blocksrc_job *sj, const run_result *r)
{
    return r->end == RUN_FAILED || J->cur_cancel || J->stopping || J->lock_lost || sj->gone ||
           sj->moved;
}

/* Reads job id's type and body and makes it the current job (lock held).  Returns its body
 * with *k, or NULL: the job failed (an unknown type, a body unreadable), or its row cannot
 * be read now (out of memory) and the job is as it was: the scheduler tries again later. */
static json_t *load_job_locked(jobs *J, const char *id, const job_kind **k)
{
    char type[64] = "", *body = NULL;
    if (jobstore_type_body(J->st, id, type, &body) != 0)
        return NULL;
    /* The body was valid JSON when it was accepted: a parse that fails for want of
     * memory (jansson says "out of memory", or nothing when its first allocation
     * failed) is tried again later. */
    json_error_t jerr;
    json_t *b = body ? json_loads(body, 0, &jerr) : NULL;
    /* No body stored at all is unreadable (below), not a parse to try again. */
    if (body && !b && (json_error_code(&jerr) == json_error_out_of_memory ||
                       json_error_code(&jerr) == json_error_unknown)) {
        free(body);
        return NULL;
    }
    free(body);
    snprintf(J->cur, sizeof(J->cur), "%s", id);
    J->cur_cancel = 0;
    *k = jobs_find_kind(type);
    if (!*k || !b) {
        json_decref(b);
        fail_job_locked(J, id, 500,
                        !*k ? "unknown job type" : "the stored job body is unreadable");
        return NULL;
    }
    return b;
}

/* Before the plan (lock held): the source's begin, then the work directory.  Blocks
 * recorded by an earlier run count only with the work directory that holds their files:
 * without it, the job starts over.  0, or -1: the job failed or is left as it was. */
static int prepare_locked(jobs *J, blocksrc_job *sj)
{
    char why[300] = "";
    if (J->src->begin(sj, why, sizeof why)) {
        if (why[0])
            fail_job_locked(J, sj->id, 500, why);
        else
            J->cur[0] = '\0';
        return -1;
    }
    int fresh = mkdir(sj->wd, 0700) == 0;
    if (!fresh && errno != EEXIST) {
        fail_job_locked(J, sj->id, 500, "cannot create the job's work directory");
        return -1;
    }
    if (fresh && jobstore_reset_blocks(J->st, sj->id) != 0) {
        fail_job_locked(J, sj->id, 500, "the jobs database cannot reset the job's blocks");
        return -1;
    }
    return 0;
}

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

/* Hands the pool the blocks the source gives, while fewer than max_inflight are in
 * flight. */
static void feed_pool_locked(jobs *J, blocksrc_job *sj, const job_kind *k, int s,
                             run_result *r)
{
    long block;
    while (J->inflight < sj->max_inflight && J->src->next(sj, &block)) {
        block_task *t = calloc(1, sizeof(*t));
        if (!t) {
            run_fail(r, 500, "out of memory");
            break;
        }
        *t = (block_task){J, k, sj->plan->state, s, block, 0, "", NULL, 0.0};
        J->inflight++;
        if (pool_submit(J->pool, POOL_BATCH, block_run, t) != 0) {
            J->inflight--;
            free(t);
            break; /* queue full: interactive work has the pool; retry shortly */
        }
        J->src->taken(sj);
    }
}

/* Takes the blocks that ended: those that ran go back to the source; the first failure
 * stops the others early.  Returns how many ran. */
static long take_completed_locked(jobs *J, blocksrc_job *sj, run_result *r)
{
    long newly = 0;
    while (J->completed) {
        block_task *t = J->completed;
        J->completed = t->next;
        if (t->rc == 0) {
            J->src->hand_back(sj, t);
            newly++;
            J->blocks_run++;
        } else {
            if (t->rc != TESS_ECANCELED && r->end != RUN_FAILED) {
                run_fail(r, status_of(t->rc), t->err);
                J->cur_cancel = 1;
            }
            free(t);
        }
    }
    return newly;
}

/* Now and then: the lock file still ours, jobs.dir within jobs.disk_mb, the job not ended
 * elsewhere. */
static void check_locked(jobs *J, blocksrc_job *sj, run_result *r, double *last_check)
{
    if (r->end == RUN_FAILED || tess_mono_s() - *last_check < 0.25)
        return;
    *last_check = tess_mono_s();
    jobs_lock_still_ours(J);
    char detail[300];
    if (jobs_over_disk_locked(J, sj->wd, detail, sizeof detail)) {
        run_fail(r, 413, detail);
        J->cur_cancel = 1;
    }
    if (J->src->ended_elsewhere(sj))
        J->cur_cancel = 1;
}

/* Runs stage s until its blocks are done here and everywhere, or the job stops. */
static void run_stage_locked(jobs *J, blocksrc_job *sj, const job_kind *k, int s, long *done,
                             run_result *r, double *last_check)
{
    const blocksrc_ops *src = J->src;
    char why[300];
    src->stage(sj, s);
    for (;;) {
        take_handoff_locked(J);
        why[0] = '\0';
        if (src->exchange(sj, s, stopped(J, sj, r), why, sizeof why) && r->end != RUN_FAILED) {
            run_fail(r, 500, why);
            J->cur_cancel = 1;
        }
        if (!stopped(J, sj, r))
            feed_pool_locked(J, sj, k, s, r);
        long newly = take_completed_locked(J, sj, r);
        if (newly) {
            *done += newly;
            src->progress(sj, *done);
        }
        check_locked(J, sj, r, last_check);
        int stage_end =
            J->inflight == 0 && !J->completed && (stopped(J, sj, r) || !src->rest(sj));
        if (src->record(sj, s, stage_end, why, sizeof why) && r->end != RUN_FAILED)
            run_fail(r, 500, why);
        if (stage_end)
            return;
        if (J->completed)
            continue;
        jobs_wait_locked(J, src->wait_ms);
    }
}

/* Runs the stages of the planned job; r says how they ended. */
static void run_stages_locked(jobs *J, blocksrc_job *sj, const job_kind *k, long done,
                              run_result *r)
{
    double last_check = tess_mono_s();
    sj->last_record = tess_mono_s();
    for (int s = 0; s < sj->plan->nstages && !stopped(J, sj, r); s++)
        run_stage_locked(J, sj, k, s, &done, r, &last_check);
    J->src->end(sj);
    if (sj->gone)
        r->end = RUN_GONE;
    else if (r->end == RUN_FAILED)
        return;
    else if (J->cur_cancel)
        r->end = RUN_CANCELLED;
    else if (J->stopping || J->lock_lost || sj->moved)
        r->end = RUN_LEFT;
}

/* Every block done: writes the product under a temporary name (lock released), checks and
 * flushes it, renames it to `final` and asks the source whether it can be registered. */
static void write_product(jobs *J, blocksrc_job *sj, const job_kind *k, const job_plan *plan,
                          const char *tmp, char *final, job_product *prod, run_result *r)
{
    unlink(tmp);
    pthread_mutex_unlock(&J->lock);
    char err[512] = "";
    int rc = k->finish(plan->state, tmp, prod, err, sizeof(err));
    /* FITS products carry CHECKSUM and DATASUM, set once the file is whole. */
    if (rc == 0 && (!prod->content_type[0] || strcmp(prod->content_type, "application/fits") == 0))
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
        if (jobs_over_disk_locked(J, sj->wd, err, sizeof err))
            rc = TESS_ETOOBIG;
        pthread_mutex_unlock(&J->lock);
    }
    jobs_result_path(J, sj->id, prod->content_type, final);
    if (rc == 0 && rename(tmp, final) != 0) {
        rc = TESS_EIO;
        tess_seterr(err, sizeof(err), "cannot move the product into place: %s", strerror(errno));
    }
    /* The new name must be on disk before the job's end is: a power loss could otherwise
     * leave a succeeded job without its product. */
    char rdir[PATH_MAX];
    snprintf(rdir, sizeof rdir, "%s/results", J->dir);
    if (rc == 0 && jobs_sync_dir(rdir) != 0) {
        rc = TESS_EIO;
        tess_seterr(err, sizeof(err), "cannot sync the results directory: %s", strerror(errno));
        unlink(final);
    }
    if (rc == 0 && (rc = J->src->registrable(J, prod, final, err, sizeof err)) != 0)
        unlink(final);
    pthread_mutex_lock(&J->lock);
    if (rc) {
        unlink(tmp);
        run_fail(r, status_of(rc), err[0] ? err : "the product could not be written");
    }
}

/* Once planned: the blocks an earlier run recorded, the source told, the stages run, then
 * (every block done, the finish this runner's) the product written. */
static void run_planned_locked(jobs *J, blocksrc_job *sj, const job_kind *k,
                               const job_plan *plan, const job_cost *cost, const char *tmp,
                               char *final, job_product *prod, run_result *r)
{
    long total = 0;
    for (int s = 0; s < plan->nstages; s++)
        total += plan->nblocks[s] > 0 ? plan->nblocks[s] : 0;
    unsigned char *doneset[JOB_MAX_STAGES] = {0};
    for (int s = 0; s < plan->nstages; s++)
        doneset[s] = calloc((size_t)(plan->nblocks[s] > 0 ? plan->nblocks[s] : 1), 1);
    struct doneset_ctx dc = {plan, doneset, 0};
    jobstore_done_blocks(J->st, sj->id, doneset_cb, &dc);
    sj->plan = plan;
    sj->doneset = doneset;
    char why[300] = "";
    if (J->src->planned(sj, why, sizeof why)) {
        if (why[0])
            run_fail(r, 500, why);
        else
            r->end = RUN_LEFT;
    } else {
        jobstore_set_running(J->st, sj->id, jobs_now(), (long long)total, (long long)dc.done);
        sj->max_inflight = jobbudget_blocks(J->cfg, cost, J->threads);
        run_stages_locked(J, sj, k, dc.done, r);
    }
    for (int s = 0; s < plan->nstages; s++)
        free(doneset[s]);
    sj->doneset = NULL;
    if (r->end == RUN_DONE && J->src->claim_finish(sj) != 0)
        r->end = RUN_LEFT;
    if (r->end == RUN_DONE)
        write_product(J, sj, k, plan, tmp, final, prod, r);
}

/* The job's result document: the product's size, dataset and URL. */
static char *result_json(const char *id, const char *final, const job_product *prod)
{
    json_t *res = json_object();
    struct stat sb;
    if (stat(final, &sb) == 0)
        json_object_set_new(res, "bytes", json_integer((json_int_t)sb.st_size));
    if (prod->dataset[0])
        json_object_set_new(res, "dataset", json_string(prod->dataset));
    if (prod->attach_to[0])
        json_object_set_new(res, "attached_to", json_string(prod->attach_to));
    char url[64];
    snprintf(url, sizeof(url), "/api/v1/jobs/%s/result", id);
    json_object_set_new(res, "url", json_string(url));
    char *rs = json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(res);
    return rs;
}

/* Ends the run as r says (lock held); the runner is free for the next job after. */
static void conclude_locked(jobs *J, blocksrc_job *sj, const run_result *r, const char *tmp,
                            const char *final, const job_product *prod)
{
    char *rs;
    switch (r->end) {
    case RUN_DONE:
        rs = result_json(sj->id, final, prod);
        J->src->commit(sj, tmp, final, rs, prod);
        free(rs);
        break;
    case RUN_FAILED:
        J->cur_cancel = 0;
        fail_job_locked(J, sj->id, r->status, r->detail);
        break;
    case RUN_CANCELLED:
        jobs_end_locked(J, sj->id, "cancelled", NULL);
        break;
    case RUN_GONE:
        /* Ended by another server, which removed the files; blocks here may have written
         * since. */
        jobs_forget_locked(J, sj->wd, tmp);
        break;
    case RUN_LEFT:
        /* Left running: the next start (moved: the next turn) resumes it from its
         * recorded blocks. */
        J->moved = sj->moved;
        J->cur[0] = '\0';
        break;
    }
}

/* Block k of a stage must name the same work on every planning of a job (jobkind.h):
 * blocks are recorded done, and leased in a cluster, by their index.  The stages and
 * block counts of the job's first plan are kept in <workdir>/blocks.plan ("NSTAGES
 * NBLOCKS[0] .. NBLOCKS[JOB_MAX_STAGES - 1]", jobc_plan_record); a later plan (a
 * restart, another server or worker) that counts otherwise is refused: 1 with err "the
 * job's plan changed between runs: ...", rather than run with indices that name other
 * work.  A work directory without the file (a build before it) gets it from this plan.
 * 0 when the counts agree (or were recorded now), TESS_EIO with err when the file cannot
 * be read or written. */
static int plan_unchanged(const char *wd, const job_plan *plan, char *err, size_t errlen)
{
    long now[1 + JOB_MAX_STAGES] = {0}, had[1 + JOB_MAX_STAGES];
    const int n = 1 + JOB_MAX_STAGES;
    now[0] = plan->nstages;
    for (int s = 0; s < plan->nstages; s++)
        now[1 + s] = plan->nblocks[s];
    memcpy(had, now, sizeof had);
    int rc = jobc_plan_record(wd, 0, "blocks", had, n, err, errlen);
    if (rc == 1)
        return jobc_plan_record(wd, 1, "blocks", now, n, err, errlen);
    if (rc)
        return rc;
    if (had[0] != now[0]) {
        tess_seterr(err, errlen, "the job's plan changed between runs: it had %ld stages, "
                    "now %ld", had[0], now[0]);
        return 1;
    }
    for (int s = 0; s < plan->nstages; s++)
        if (had[1 + s] != now[1 + s]) {
            tess_seterr(err, errlen, "the job's plan changed between runs: stage %d had %ld "
                        "blocks, now %ld", s, had[1 + s], now[1 + s]);
            return 1;
        }
    return 0;
}

/* Runs job `id` to its end, or until the runner stops.  Lock held on entry and exit. */
static void run_job_locked(jobs *J, const char *id)
{
    const job_kind *k = NULL;
    json_t *b = load_job_locked(J, id, &k);
    if (!b)
        return;
    char wd[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX] = "";
    jobs_workdir(J, id, wd);
    jobs_tmp_path(J, id, tmp);
    blocksrc_job sj = {.J = J, .id = id, .wd = wd};
    if (prepare_locked(J, &sj) != 0) {
        json_decref(b);
        return;
    }
    /* Plan outside the lock (it may read headers); the estimate again (the inputs may
     * have changed since the job was accepted, and a resumed job keeps the plan recorded
     * in wd, env.workdir) bounds the blocks in flight. */
    pthread_mutex_unlock(&J->lock);
    job_env env = {J->cfg, J->cat, J->threads, J->collections, wd};
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
    int changed = !rc && plan.nstages >= 1 && plan.nstages <= JOB_MAX_STAGES ?
                  plan_unchanged(wd, &plan, err, sizeof err) : 0;
    pthread_mutex_lock(&J->lock);
    run_result r = {RUN_DONE, 500, ""};
    job_product prod = {0};
    if (rc || plan.nstages < 1 || plan.nstages > JOB_MAX_STAGES)
        run_fail(&r, status_of(rc), err[0] ? err : "the job could not be planned");
    else if (changed)
        run_fail(&r, 500, err);
    else
        run_planned_locked(J, &sj, k, &plan, &cost, tmp, final, &prod, &r);
    if (!rc && k->release)
        k->release(plan.state);   /* the plan's one release, whatever the end */
    conclude_locked(J, &sj, &r, tmp, final, &prod);
}

/* ---- the scheduler ---------------------------------------------------------------- */

/* Takes the next job to run, one at a time, until the runner stops. */
void *jobs_scheduler(void *arg)
{
    jobs *J = arg;
    pthread_mutex_lock(&J->lock);
    while (!J->stopping) {
        if (tess_mono_s() - J->lock_checked >= 1.0)
            jobs_lock_still_ours(J);
        char id[17] = "";
        jobstore_next(J->st, id);
        /* A job is taken only while the lock file is still this runner's. */
        if (!id[0] || J->lock_lost || !jobs_lock_still_ours(J)) {
            jobs_wait_locked(J, J->src->idle_ms);
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
                 (jobstore_state(J->st, id, state) != 0 || jobs_state_open(state)))
            jobs_wait_locked(J, 1000);
    }
    pthread_mutex_unlock(&J->lock);
    return NULL;
}

