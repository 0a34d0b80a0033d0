/* The job runner: long work (mosaics, rechunking, spectra) as persistent jobs.
 *
 * State lives in SQLite (jobs.dir/jobs.sqlite, WAL): one row per job with its body, state
 * and progress, and one row per finished block.  Files:
 *   jobs.dir/work/{id}/        the job's private work directory (job_kind.plan/run_block)
 *   jobs.dir/results/.{id}.tmp the product while finish() writes it
 *   jobs.dir/results/{id}.fits the product, renamed into place when complete
 * Work directories of finished jobs and every *.tmp are removed on success, failure and
 * cancel, and swept at start-up.  A scheduler thread runs one job at a time: its blocks go
 * to the shared worker pool at batch priority (interactive tiles go first), at most one
 * block per worker in flight (fewer when jobs.memory_mb holds fewer of the job's blocks).
 * A job whose files take jobs.dir past jobs.disk_mb, or whose product passes
 * jobs.max_product_mb, fails (413).  A restart keeps queued jobs queued and resumes the
 * running one from its recorded blocks (see daemon/jobs/jobkind.h for what job types
 * guarantee).
 * With jobs.database (a PostgreSQL connection URI) the store is shared instead: several
 * servers and workers (tesserad --worker) on one database and one jobs.dir (a shared file
 * system) run the blocks of every running job together.  Each takes blocks with a lease
 * (jobs.lease_s, renewed while they run; a dead process's leases expire and others take
 * them), one of them claims the job's end (finish, rename, registration), the others see
 * a cancel within a quarter of a second and register the products within a second.  No
 * directory lock is taken then.  See docs/cluster.md.
 * Times are UTC, ISO 8601 with milliseconds.  Job ids: 16 lowercase hex characters.
 */
#ifndef TESSERA_DAEMON_JOBS_JOBS_H
#define TESSERA_DAEMON_JOBS_JOBS_H

#include <stddef.h>
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/jobs/jobkind.h"
#include "engine/base/pool.h"

typedef struct jobs jobs;

/* Makes a job type known to every runner of the process (before jobs_open).  At most 32.
 * Returns 0, or TESS_ERANGE when the table is full, TESS_EEXIST for a duplicate type. */
int jobs_register_kind(const job_kind *k);
/* The registered type called `type`, or NULL. */
const job_kind *jobs_find_kind(const char *type);

/* Opens (creating when needed) the jobs directory `dir`, sweeps temporary files, registers
 * the products of succeeded jobs in `cat`, and starts the scheduler, which resumes a job
 * left running.  The directory is locked for this runner (an flock on it and on dir/lock,
 * whose identity is checked again when a job is taken, on submit and every second); the
 * store is checked before anything writes to it (PRAGMA integrity_check, the schema and
 * its version: a damaged or foreign file is refused and left unchanged; a store of version
 * 0 is upgraded).  `collections` (NULL: none) is lent to the job types (job_env) and, like
 * `p`, must outlive the runner.  Returns 0, or TESS_EIO (directory in use,
 * database damaged, foreign or unusable: err says why), TESS_ENOMEM. */
int jobs_open(const char *dir, const tess_config *cfg, catalog *cat,
              struct colset *collections, pool *p, jobs **out, char *err, size_t errlen);

/* Stops the scheduler: no new blocks start; blocks in flight finish and are recorded; the
 * running job stays "running" in the database so the next jobs_open resumes it.  Must be
 * called before the pool is freed.  NULL is ignored. */
void jobs_close(jobs *J);

/* Validates, estimates (job_kind.estimate) and queues a job from the JSON text `body`.
 * On success returns 0 and *json_out (malloc'd) is the job document.  On failure returns
 * -1 and *pb says why: 400 (not JSON, not an object, no or unknown "type", and the type's
 * own checks), 404, 409, 413 (over jobs.memory_mb, jobs.max_product_mb or jobs.disk_mb:
 * daemon/jobs/jobbudget.h), 422, 503 (limits.max_queued_jobs jobs are queued or running,
 * or another process took the directory's lock file). */
int jobs_submit(jobs *J, const char *body, size_t len, char **json_out, job_problem *pb);

/* The calls below are made by HTTP handlers: none waits on the database past
 * jobs.database_timeout_s (twice that for the runner's lock), and while the store's
 * circuit is open (the database was lost: jobstore.h) none calls it at all, and each
 * answers "unreachable" at once. */

/* The job document {id, type, state, progress{done,total,fraction}, eta_s, created,
 * started, finished, error, result, links, request} as malloc'd JSON, or NULL when there
 * is no such job (*missing 1), the database cannot be reached (*missing 2) or out of
 * memory (*missing 0). */
char *jobs_get_json(jobs *J, const char *id, int *missing);

/* Every job, newest first, as a malloc'd JSON array of job documents (at most `limit`);
 * NULL when out of memory, or with *unavailable = 1 when the database cannot be reached
 * (never an empty list for a database that did not answer). */
char *jobs_list_json(jobs *J, int limit, int *unavailable);

/* Cancels a queued or running job: a queued job is cancelled at once; a running one, or
 * one the runner has taken up and is planning, stops after its blocks in flight (this
 * call waits up to `wait_s` seconds for that).  Returns 0 (cancelled, or still cancelling
 * when the wait ran out), TESS_ENOTFOUND, TESS_EINVAL when the job had already finished
 * or finished before its run saw the cancel (succeeded or failed), or TESS_EIO when the
 * database cannot be reached. */
int jobs_cancel(jobs *J, const char *id, double wait_s);

/* The product of a succeeded job: its path (PATH_MAX) and content type (64).  Returns 0,
 * TESS_ENOTFOUND (no such job), TESS_EAGAIN (not succeeded: *state, 16, says what),
 * TESS_EIO (the database cannot be reached). */
int jobs_result(jobs *J, const char *id, char *path, char *content_type, char *state);

/* Jobs per state, in the order queued, running, succeeded, failed, cancelled: 0, or
 * TESS_EIO with the counts of the last answer (zeros before any) when the database cannot
 * be reached or another call holds its connection (this one never waits for it). */
int jobs_counts(jobs *J, long counts[5]);

/* Blocks this runner ran to completion. */
unsigned long long jobs_blocks_run(jobs *J);

/* Whether the last call to the jobs database reached it and the store's circuit is closed
 * (1), for /healthz.  Never blocks. */
int jobs_database_reachable(jobs *J);

/* The runner's counters in the Prometheus text format (# HELP and # TYPE lines):
 * tessera_job_blocks_total, tessera_job_lease_renewals_total,
 * tessera_job_lease_expiries_total, tessera_job_database_errors_total,
 * tessera_job_database_seconds_total, tessera_job_database_up.  malloc'd; NULL when out of memory. */
char *jobs_metrics_text(jobs *J);

#endif
