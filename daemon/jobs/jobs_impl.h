/* The job runner's parts (jobs.h), shared by its files: the runner's state and the helpers
 * each part lends the others.
 *   jobs.c         the registry of job types, submit, cancel, result, open and close
 *   jobs_doc.c     the documents given out: a job, the list, the counts, the metrics
 *   jobs_dir.c     jobs.dir: its paths, the start-up sweep, disk use
 *   jobs_lock.c    the directory lock (one server per jobs.dir without a shared store)
 *   jobs_run.c     the scheduler and the runner: plan, feed the pool, finish, commit
 *   jobs_keeper.c  product registration, and the keeper thread of a shared store
 *   blocksrc*.c    where a job's blocks come from and go back to (blocksrc.h)
 * Not for use outside daemon/jobs. */
#ifndef TESSERA_DAEMON_JOBS_JOBS_IMPL_H
#define TESSERA_DAEMON_JOBS_JOBS_IMPL_H

#include "daemon/jobs/jobs.h"
#include "daemon/jobs/blocksrc.h"
#include "daemon/jobs/jobstore.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/types.h>

/* One block handed to the pool; back on the completion list when it has run. */
struct block_task {
    struct jobs *J;
    const job_kind *kind;
    void *state;
    int stage;
    long block;
    int rc;
    char err[256];
    struct block_task *next;
    double secs;      /* how long run_block took */
};

struct jobs {
    const tess_config *cfg;
    catalog *cat;
    struct colset *collections; /* the app's collections, or NULL */
    pool *pool;
    int threads;
    jobstore *st;             /* the jobs database (jobstore.h) */
    const blocksrc_ops *src;  /* where blocks come from: jobs.dir's store or leases */
    double store_bound_s;     /* the longest a store call may take (HTTP threads wait 2x) */
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
                                 lock directories, or a shared store: no lock) */
    int lockfd;               /* dir/lock, flock'ed too, holding the pid for messages
                                 (-1: a shared store, whose servers share jobs.dir) */
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

/* jobs.dir (jobs_dir.c).  Paths are PATH_MAX bytes. */
double jobs_now(void);                      /* seconds since the epoch */
int jobs_valid_id(const char *id);          /* 16 lowercase hex characters */
int jobs_state_open(const char *state);     /* "queued" or "running": not yet ended */
void jobs_rm_tree(const char *path);
void jobs_workdir(const jobs *J, const char *id, char *out);
void jobs_tmp_path(const jobs *J, const char *id, char *out);
/* The product's final name: {id}.fits for FITS products, {id}.bin otherwise. */
void jobs_result_path(const jobs *J, const char *id, const char *content_type, char *out);
int jobs_mkdir_p(const char *dir, char *err, size_t errlen);
int jobs_sync_dir(const char *path);
void jobs_sync_work_locked(jobs *J, const char *wd);
double jobs_disk_used_locked(jobs *J);
int jobs_over_disk_locked(jobs *J, const char *wd, char *detail, size_t len);
void jobs_sweep(jobs *J);

/* The documents (jobs_doc.c). */
/* Takes the runner's lock for an HTTP thread, waiting at most twice store_bound_s;
 * 0 or TESS_EIO. */
int jobs_http_lock(jobs *J);
/* Around an HTTP thread's read of the store: the runner's lock, unless the source reads
 * without it.  0 or TESS_EIO. */
int jobs_http_read_begin(jobs *J);
void jobs_http_read_end(jobs *J);
json_t *jobs_job_json_locked(jobs *J, const char *id);

/* The directory lock (jobs_lock.c). */
int jobs_lock_dir(jobs *J, char *err, size_t errlen);
int jobs_lock_still_ours(jobs *J);

/* The runner (jobs_run.c). */
void *jobs_scheduler(void *arg);
/* Waits on the runner's condition at most `ms` milliseconds (lock held). */
void jobs_wait_locked(jobs *J, long ms);
void jobs_end_locked(jobs *J, const char *id, const char *state, const char *error_json);
void jobs_forget_locked(jobs *J, const char *wd, const char *tmp);

/* Products (jobs_keeper.c). */
int jobs_register_product(jobs *J, const job_product *prod, const char *path, char *err,
                          size_t errlen);
void jobs_seen_add(jobs *J, const char *id);
/* Registers the products of succeeded jobs again (at start-up).  Lock not held. */
void jobs_reregister(jobs *J);
/* Starts the keeper thread (a shared store); 0 or TESS_ENOMEM. */
int jobs_keeper_start(jobs *J);

#endif
