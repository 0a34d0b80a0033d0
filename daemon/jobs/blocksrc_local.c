/* The local block source (blocksrc.h): the store in jobs.dir (SQLite), this process alone.
 * A stage's blocks go to the pool in order, those an earlier run recorded skipped; finished
 * blocks are recorded after a syncfs of the work directory's file system. */
#include "daemon/jobs/jobs_impl.h"
#include "engine/base/clock.h"

#include <stdlib.h>
#include <unistd.h>

/* Finished blocks are recorded at most this often (and at a stage's end), so that a busy
 * disk does not slow the job. */
#define LOCAL_RECORD_S 0.25

/* Flushes the files of
 * finished blocks to disk, then records the blocks as done (lock held on entry and exit;
 * released around syncfs).  syncfs covers whatever files the
 * blocks wrote, so a recorded block survives a power cut, not only a killed process. */
static void record_blocks_locked(jobs *J, const char *id, const char *wd, block_task **list)
{
    block_task *ok = *list;
    *list = NULL;
    if (!ok)
        return;
    jobs_sync_work_locked(J, wd);
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

/* ---- the source's operations ----------------------------------------------------- */

static int local_begin(blocksrc_job *sj, char *detail, size_t len)
{
    (void)sj;
    (void)detail;
    (void)len;
    return 0;
}

static int local_planned(blocksrc_job *sj, char *detail, size_t len)
{
    (void)sj;
    (void)detail;
    (void)len;
    return 0;
}

static void local_stage(blocksrc_job *sj, int s)
{
    sj->next = 0;
    sj->nblocks = sj->plan->nblocks[s];
    sj->doneset_stage = sj->doneset[s];
}

static int local_exchange(blocksrc_job *sj, int s, int stop, char *detail, size_t len)
{
    (void)sj;
    (void)s;
    (void)stop;
    (void)detail;
    (void)len;
    return 0;
}

/* The next block of the stage not recorded by an earlier run. */
static int local_next(blocksrc_job *sj, long *block)
{
    while (sj->next < sj->nblocks && sj->doneset_stage && sj->doneset_stage[sj->next])
        sj->next++;
    *block = sj->next;
    return sj->next < sj->nblocks;
}

static void local_taken(blocksrc_job *sj)
{
    sj->next++;
}

static void local_hand_back(blocksrc_job *sj, block_task *t)
{
    t->next = sj->ok;
    sj->ok = t;
}

/* Progress at once; the blocks' records wait for their sync (local_record). */
static void local_progress(blocksrc_job *sj, long done)
{
    jobstore_set_done(sj->J->st, sj->id, (long long)done);
}

static int local_ended_elsewhere(blocksrc_job *sj)
{
    (void)sj;
    return 0;   /* this process alone ends jobs */
}

static int local_rest(blocksrc_job *sj)
{
    return sj->next < sj->nblocks;
}

static int local_record(blocksrc_job *sj, int s, int stage_end, char *detail, size_t len)
{
    (void)s;
    (void)detail;
    (void)len;
    if (sj->ok && (stage_end || tess_mono_s() - sj->last_record >= LOCAL_RECORD_S)) {
        record_blocks_locked(sj->J, sj->id, sj->wd, &sj->ok);
        sj->last_record = tess_mono_s();
    }
    return 0;
}

/* A stage ends with its blocks recorded: nothing is left. */
static void local_end(blocksrc_job *sj)
{
    while (sj->ok) {
        block_task *nx = sj->ok->next;
        free(sj->ok);
        sj->ok = nx;
    }
}

static int local_claim_finish(blocksrc_job *sj)
{
    (void)sj;
    return 0;
}

static void local_commit(blocksrc_job *sj, const char *tmp, const char *final,
                         const char *result_json, const job_product *prod)
{
    (void)tmp;
    (void)final;
    jobstore_set_result(sj->J->st, sj->id, result_json, prod->dataset, prod->attach_to,
                        prod->content_type);
    jobs_end_locked(sj->J, sj->id, "succeeded", NULL);
}

/* When the state cannot be written, as on a full disk, it is written again once the job's
 * files have made room (a job found without its work directory starts over). */
static void local_end_job(jobs *J, const char *id, const char *state, const char *error_json,
                          const char *wd, const char *tmp)
{
    int rc = jobstore_end(J->st, id, state, jobs_now(), error_json, NULL);
    jobs_rm_tree(wd);
    unlink(tmp);
    if (rc != 0)
        jobstore_end(J->st, id, state, jobs_now(), error_json, NULL);
}

const blocksrc_ops blocksrc_local = {
    .idle_ms = 1000,
    .wait_ms = 200,
    .reads_unlocked = 0,
    .dir_shared = 0,
    .begin = local_begin,
    .planned = local_planned,
    .stage = local_stage,
    .exchange = local_exchange,
    .next = local_next,
    .taken = local_taken,
    .hand_back = local_hand_back,
    .progress = local_progress,
    .ended_elsewhere = local_ended_elsewhere,
    .rest = local_rest,
    .record = local_record,
    .end = local_end,
    .claim_finish = local_claim_finish,
    .registrable = jobs_register_product,
    .commit = local_commit,
    .end_job = local_end_job,
};
