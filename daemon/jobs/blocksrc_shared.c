/* The shared block source (blocksrc.h): a job store several servers use at once
 * (PostgreSQL).  One server plans a job first, under the job's claim; blocks go by lease
 * (jobstore_record_lease: one statement records the finished blocks and leases the next);
 * one server finishes the job, under a claim, and commits its product with a statement that
 * checks the job is still running.  See docs/cluster.md. */
#include "daemon/jobs/jobs_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The held-lease list (the keeper renews it): adds block (s, b) of job id; 0 or TESS_ENOMEM. */
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

/* Whether the product at `path` can be registered here (lock not held):
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

/* Ends the current job (lock held, released around the registration) once its product is
 * at `final` (found registrable before: product_registrable).  The product is registered
 * in the database first: the result and state succeeded in one statement that checks the
 * job is still running and its finish still this runner's (jobstore_finish_commit), so a
 * cancel elsewhere wins until then; then here.  A job ended elsewhere first (a cancel, a
 * failure) gets no product: `final` is removed.  When the database cannot be reached, the
 * job stays as it is (running, claimed here until the claim expires) and is finished again
 * later. */
static void shared_commit(blocksrc_job *sj, const char *tmp, const char *final,
                          const char *result_json, const job_product *prod)
{
    jobs *J = sj->J;
    const char *id = sj->id;
    int changed = 0;
    if (jobstore_finish_commit(J->st, id, J->owner, jobs_now(), result_json, prod->dataset,
                               prod->attach_to, prod->content_type, &changed) != 0) {
        J->cur[0] = '\0';
        J->cur_cancel = 0;
        return;
    }
    if (changed) {
        jobs_seen_add(J, id);
        pthread_mutex_unlock(&J->lock);
        char err[512] = "";
        if (jobs_register_product(J, prod, final, err, sizeof err) != 0)
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
    jobs_forget_locked(J, sj->wd, tmp);
}

/* The records go with the next lease; without one, at least this often. */
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

/* The runner's one statement with the store while stage s runs
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
        jobs_sync_work_locked(J, wd);
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

/* ---- the source's operations ----------------------------------------------------- */

/* The first plan of a job may create its work files (daemon/jobs/jobkind.h), so one server
 * plans it first, under the job's claim (renewed with the leases, taken over when its
 * holder dies); the others plan it once its block rows exist. */
static int shared_begin(blocksrc_job *sj, char *detail, size_t len)
{
    jobs *J = sj->J;
    int planned = 0, took = 0;
    if (jobstore_planned(J->st, sj->id, &planned) != 0 ||
        (!planned && jobstore_claim_finish(J->st, sj->id, J->owner, J->lease_s, &took))) {
        refused(detail, len);
        return -1;
    }
    J->finish_expiries += (unsigned long long)took;   /* a dead planner's claim */
    sj->planned = planned;
    return 0;
}

/* Makes the block rows every server leases from (idempotent), and ends the claim of the
 * first plan; a store that cannot be reached now leaves the job for a later try. */
static int shared_planned(blocksrc_job *sj, char *detail, size_t len)
{
    jobs *J = sj->J;
    if (jobstore_plan_blocks(J->st, sj->id, sj->plan->nstages, sj->plan->nblocks) != 0 ||
        (!sj->planned && jobstore_release(J->st, J->owner) != 0)) {
        refused(detail, len);
        return -1;
    }
    sj->state_at = tess_mono_s();
    return 0;
}

static void shared_stage(blocksrc_job *sj, int s)
{
    (void)s;
    sj->ls = (leased){.n = 0, .at = 0, .got = 1, .last = 0.0, .backoff = 0.0, .left = -1,
                      .others = 0, .avg_s = 0.0};
}

/* One statement records the blocks done and leases the next ones, when the pool runs out
 * of leased blocks or the records are due.  Leased before the pool runs dry (at most one
 * pool's worth left here), so that its threads have blocks while the statement runs;
 * records (a syncfs: often slower than the statement) when due or when idle. */
static int shared_exchange(blocksrc_job *sj, int s, int stop, char *detail, size_t len)
{
    jobs *J = sj->J;
    leased *ls = &sj->ls;
    double now = tess_mono_s();
    int idle = !J->inflight && !J->completed && ls->at >= ls->n;
    int need = !stop && ls->n - ls->at <= (idle ? 0 : sj->max_inflight) &&
               ls->n - ls->at < (int)(sizeof ls->blocks / sizeof ls->blocks[0]);
    int poll = need && (ls->got || now - ls->last >= ls->backoff);
    int rec = sj->ok && !sj->gone && (idle || now - sj->last_record >= SHARED_RECORD_S);
    if (!poll && !rec)
        return 0;
    int failed = 0;
    if (exchange_locked(J, sj->id, sj->wd, s, poll ? lease_want(J, sj->max_inflight, ls) : 0,
                        ls, rec ? &sj->ok : NULL, &sj->gone) == 0) {
        sj->state_at = tess_mono_s();
        if (rec)
            sj->last_record = sj->state_at;
    } else {
        failed = refused(detail, len);
    }
    if (sj->gone)
        J->cur_cancel = 1;
    /* Nothing here, nothing to lease: the job's last blocks (or its next stage's start)
     * are others'; a younger job with work is taken up instead of waiting (the scheduler
     * comes back to this one). */
    char other[17] = "";
    if (poll && !sj->gone && idle && !sj->ok && !ls->got && ls->left > 0 &&
        jobstore_next(J->st, other) == 0 && other[0] && strcmp(other, sj->id) != 0)
        sj->moved = 1;
    return failed;
}

/* No block leased here starts while the database cannot be reached (its lease cannot be
 * renewed; blocks in flight finish). */
static int shared_next(blocksrc_job *sj, long *block)
{
    if (sj->ls.at >= sj->ls.n || !jobstore_reachable(sj->J->st))
        return 0;
    *block = sj->ls.blocks[sj->ls.at];
    return 1;
}

static void shared_taken(blocksrc_job *sj)
{
    sj->ls.at++;
}

static void shared_hand_back(blocksrc_job *sj, block_task *t)
{
    leased *ls = &sj->ls;
    ls->avg_s = ls->avg_s > 0 ? 0.8 * ls->avg_s + 0.2 * t->secs : t->secs;
    t->next = sj->ok;
    sj->ok = t;
}

/* The store counts the recorded blocks of every server instead. */
static void shared_progress(blocksrc_job *sj, long done)
{
    (void)sj;
    (void)done;
}

/* A cancel or failure on another server stops the blocks here (the exchanges read the
 * state too: asked only when none did lately). */
static int shared_ended_elsewhere(blocksrc_job *sj)
{
    char now_state[16];
    if (!sj->gone && tess_mono_s() - sj->state_at >= 0.25 &&
        jobstore_state(sj->J->st, sj->id, now_state) == 0) {
        sj->state_at = tess_mono_s();
        if (strcmp(now_state, "running") != 0)
            sj->gone = 1;
    }
    return sj->gone;
}

/* The stage is complete when the last exchange, made with nothing left here to record,
 * found no block of it left anywhere. */
static int shared_rest(blocksrc_job *sj)
{
    return !(sj->ls.left == 0 && !sj->ok && sj->ls.at >= sj->ls.n);
}

static int shared_record(blocksrc_job *sj, int s, int stage_end, char *detail, size_t len)
{
    if (!sj->ok || !stage_end || sj->gone)
        return 0;
    if (exchange_locked(sj->J, sj->id, sj->wd, s, 0, &sj->ls, &sj->ok, &sj->gone) == 0) {
        sj->last_record = tess_mono_s();
        return 0;
    }
    return refused(detail, len);
}

/* Blocks not recorded (stopping while the database is away) run again elsewhere. */
static void shared_end(blocksrc_job *sj)
{
    while (sj->ok) {
        block_task *nx = sj->ok->next;
        free(sj->ok);
        sj->ok = nx;
    }
    sj->J->nheld = 0;
    jobstore_release(sj->J->st, sj->J->owner);
}

/* One server writes the product (a claim in the database, renewed with the leases; when
 * its holder dies, another takes it over). */
static int shared_claim_finish(blocksrc_job *sj)
{
    jobs *J = sj->J;
    int took = 0;
    if (jobstore_claim_finish(J->st, sj->id, J->owner, J->lease_s, &took) != 0)
        return -1;
    J->finish_expiries += (unsigned long long)took;   /* a dead finisher's claim */
    return 0;
}

/* A store that cannot be reached keeps the job running there: its files stay for the run
 * that takes it up again. */
static void shared_end_job(jobs *J, const char *id, const char *state, const char *error_json,
                           const char *wd, const char *tmp)
{
    if (jobstore_end(J->st, id, state, jobs_now(), error_json, NULL) == 0) {
        jobs_rm_tree(wd);
        unlink(tmp);
    }
}

const blocksrc_ops blocksrc_shared = {
    .idle_ms = 250,   /* jobs come from other servers too, unannounced */
    .wait_ms = 50,
    .reads_unlocked = 1,
    .dir_shared = 1,
    .begin = shared_begin,
    .planned = shared_planned,
    .stage = shared_stage,
    .exchange = shared_exchange,
    .next = shared_next,
    .taken = shared_taken,
    .hand_back = shared_hand_back,
    .progress = shared_progress,
    .ended_elsewhere = shared_ended_elsewhere,
    .rest = shared_rest,
    .record = shared_record,
    .end = shared_end,
    .claim_finish = shared_claim_finish,
    .registrable = product_registrable,
    .commit = shared_commit,
    .end_job = shared_end_job,
};
