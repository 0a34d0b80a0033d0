/* Where a running job's blocks come from and where finished ones go: the block source.
 *
 * The runner (jobs_run.c) plans a job, feeds the pool the blocks its source gives, hands
 * each finished block back to the source, asks it whether the stage is done (here and
 * everywhere) and whether the job ended elsewhere, then claims the finish, checks and
 * commits the product through it.  One source per runner, chosen in jobs_open:
 *   blocksrc_local   the store in jobs.dir (SQLite), this process alone: a stage's blocks
 *                    in order, those recorded by an earlier run skipped; finished blocks
 *                    recorded after a syncfs at most every 0.25 s and at a stage's end.
 *   blocksrc_shared  a store shared by several servers (PostgreSQL): the first plan under
 *                    the job's claim, blocks by lease (one exchange statement records the
 *                    finished ones and leases the next), the finish under a claim, the
 *                    product committed by a statement that checks the job still runs.
 * Every call is made with the runner's lock held (released by the source around a syncfs
 * or a registration, as said). */
#ifndef TESSERA_DAEMON_JOBS_BLOCKSRC_H
#define TESSERA_DAEMON_JOBS_BLOCKSRC_H

#include <stddef.h>
#include "daemon/jobs/jobkind.h"

typedef struct jobs jobs;
typedef struct block_task block_task;

/* Shared: the blocks of the current stage this runner leased and has not yet handed to the
 * pool, and what the last exchange with the store said. */
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

/* One run of one job, as the runner and its source see it. */
typedef struct blocksrc_job {
    /* set by the runner */
    jobs *J;
    const char *id;
    const char *wd;                 /* the job's work directory */
    const job_plan *plan;           /* once planned */
    unsigned char **doneset;        /* per stage, the blocks an earlier run recorded
                                       (a stage's row may be NULL: none known) */
    int max_inflight;               /* blocks of the job in the pool at once */
    /* said by the source */
    int gone;                       /* the job ended elsewhere (cancelled, failed) */
    int moved;                      /* left for another job with work (shared) */
    /* the source's own */
    block_task *ok;                 /* finished blocks not yet recorded */
    double last_record;             /* tess_mono_s of the last record */
    long next, nblocks;             /* local: the next block of the stage, its blocks */
    const unsigned char *doneset_stage;   /* local: the stage's row of doneset */
    int planned;                    /* shared: the job's blocks rows existed at begin */
    double state_at;                /* shared: when the job's state was last read */
    leased ls;                      /* shared */
} blocksrc_job;

typedef struct blocksrc_ops {
    long idle_ms;        /* the scheduler's wait while no job is to run */
    long wait_ms;        /* the runner's wait for finished blocks */
    int reads_unlocked;  /* HTTP reads go without the runner's lock: other servers end
                            jobs too, and the runner may hold the lock through a call to
                            a stalled database */
    int dir_shared;      /* other servers use jobs.dir at once: a running job's temporary
                            product may be another's, and no product is swept */
    /* Before the plan.  0, or -1: the job is left as it is, or failed with detail when
     * detail[0] is set. */
    int (*begin)(blocksrc_job *sj, char *detail, size_t len);
    /* After the plan (sj->plan, sj->doneset set): as begin. */
    int (*planned)(blocksrc_job *sj, char *detail, size_t len);
    /* Stage s starts. */
    void (*stage)(blocksrc_job *sj, int s);
    /* At each turn of the runner, `stop` when no block is to start: the source's talk
     * with its store (shared: records due and the next leases).  1 with detail when the
     * store refused it for good: the job fails. */
    int (*exchange)(blocksrc_job *sj, int s, int stop, char *detail, size_t len);
    /* 1 with *block when a block of the stage can go to the pool now; taken() once it
     * went. */
    int (*next)(blocksrc_job *sj, long *block);
    void (*taken)(blocksrc_job *sj);
    /* A block that ran to its end (rc 0) handed back (the source frees it). */
    void (*hand_back)(blocksrc_job *sj, block_task *t);
    /* `done` blocks of the job are done (progress). */
    void (*progress)(blocksrc_job *sj, long done);
    /* Now and then: whether the job ended elsewhere (sets sj->gone). */
    int (*ended_elsewhere)(blocksrc_job *sj);
    /* Whether blocks of the stage remain to run, here or anywhere. */
    int (*rest)(blocksrc_job *sj);
    /* Records the finished blocks when due (`stage_end`: the stage's last turn).  As
     * exchange. */
    int (*record)(blocksrc_job *sj, int s, int stage_end, char *detail, size_t len);
    /* The stages are over: blocks not recorded are dropped, this run's leases end. */
    void (*end)(blocksrc_job *sj);
    /* Every block done: whether this runner writes the product (0) or leaves the job. */
    int (*claim_finish)(blocksrc_job *sj);
    /* Whether the product at `path` can be registered here (local: registers it).  Lock
     * not held.  0 or a code with err. */
    int (*registrable)(jobs *J, const job_product *prod, const char *path, char *err,
                       size_t errlen);
    /* The product is at `final`: the job's result and state succeeded, the product
     * registered; the runner is free for the next job after. */
    void (*commit)(blocksrc_job *sj, const char *tmp, const char *final,
                   const char *result_json, const job_product *prod);
    /* Writes the end of job id (state, error) and removes its files wd and tmp. */
    void (*end_job)(jobs *J, const char *id, const char *state, const char *error_json,
                    const char *wd, const char *tmp);
} blocksrc_ops;

extern const blocksrc_ops blocksrc_local;
extern const blocksrc_ops blocksrc_shared;

#endif
