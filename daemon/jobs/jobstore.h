/* The job store: the jobs, their blocks and block leases, behind one interface with two
 * backends - SQLite in jobs.dir (jobstore_sqlite.c, embedded, one server) and PostgreSQL
 * through libpq (jobstore_pg.c, shared by every server and worker of a cluster).  No SQL
 * lives outside these files.
 *
 * Times are seconds since the Unix epoch (UTC) as doubles; NAN stands for SQL NULL.
 * Calls may come from any thread: the store serialises them (one connection), and each is
 * bounded: it waits at most the store's timeout for another call to end, and the
 * PostgreSQL backend gives its connection and each statement the same deadline (a
 * statement without an answer by then loses its connection; statement_timeout holds the
 * server to it too).  A call that finds the database lost (no answer, the connection
 * broken, shut down) opens the store's circuit: until a probe (jobstore_probe) reaches
 * the database again, calls fail at once with TESS_EIO.  Calls return 0 or a negative TESS_E* code: TESS_ENOTFOUND (no such job),
 * TESS_EIO (the database refused, cannot be reached, or the circuit is open).
 *
 * Job ids read from the PostgreSQL store (shared with other processes, which a mistake or
 * an intruder may have written) are checked: a row whose id is not 16 lowercase hex
 * characters, the form this server makes, is left out of every answer (a line on stderr
 * says so, once per id in a row), so that no path is made from it.
 */
#ifndef TESSERA_DAEMON_JOBS_JOBSTORE_H
#define TESSERA_DAEMON_JOBS_JOBSTORE_H

#include <stddef.h>

typedef struct jobstore jobstore;

/* One row of the jobs table.  Strings owned by the row (jobstore_job_clear frees them). */
typedef struct jobstore_job {
    char id[17];
    char type[64];
    char state[16];
    char *body, *error, *result;      /* NULL = SQL NULL */
    double created, started, finished, run_t0;
    long long done, total, run_done0;
} jobstore_job;

void jobstore_job_clear(jobstore_job *j);

/* Opens dir/jobs.sqlite: checks its integrity and schema before anything writes to it (a
 * damaged or foreign file is refused and left as it was), creates the tables of a fresh
 * one or upgrades a version 0 store.  Returns 0 or TESS_EIO with err, TESS_ENOMEM. */
int jobstore_open_sqlite(const char *dir, jobstore **out, char *err, size_t errlen);
/* Connects to the PostgreSQL database `uri` (a libpq connection URI or key=value string),
 * creates the schema there or checks its version (table tessera_schema), under an advisory
 * lock so that servers starting together create it once.  timeout_s (> 0, seconds) bounds
 * the connection and every statement (the URI may not lengthen it: connect_timeout,
 * keepalives and statement_timeout are set after it).  Returns 0, or TESS_EIO with err
 * (unreachable, refused, a schema of a newer version), TESS_ENOMEM. */
int jobstore_open_pg(const char *uri, double timeout_s, jobstore **out, char *err,
                     size_t errlen);
void jobstore_close(jobstore *S);

/* 1 when several processes share the store (PostgreSQL): blocks then go through leases. */
int jobstore_shared(const jobstore *S);
/* Whether the last call reached the database and the circuit is closed; the count of
 * calls that failed (those failed at once by the open circuit among them). */
int jobstore_reachable(const jobstore *S);
/* While the circuit is open and a second (RETRY_S) has passed since the last try: one
 * statement (counted as "active") on a new connection, within the timeout; its answer
 * closes the circuit.  0 (closed, or closed now) or TESS_EIO.  Call it without locks the
 * HTTP threads wait for: it is the one call that waits on a lost database. */
int jobstore_probe(jobstore *S);
/* 0 while the circuit is open (the database was lost and no call has reached it since):
 * callers that must answer at once (HTTP handlers) answer 503 without calling.  Never
 * blocks. */
int jobstore_available(const jobstore *S);
/* Whether the calling thread's last call failed because the database refused it as the
 * store stands (a table or column missing, no privilege: it will not pass by retrying);
 * then detail (len bytes, may be NULL) = the database's message. */
int jobstore_refused(char *detail, size_t len);
unsigned long long jobstore_errors(const jobstore *S);
/* Seconds spent in calls to the database so far (readable from any thread). */
double jobstore_seconds(const jobstore *S);

/* The store's operations, for counting calls: each is one statement (one round trip to a
 * PostgreSQL database), except a reconnection. */
enum jobstore_op {
    JOBSTORE_OP_get, JOBSTORE_OP_list, JOBSTORE_OP_counts, JOBSTORE_OP_active,
    JOBSTORE_OP_needs, JOBSTORE_OP_insert, JOBSTORE_OP_state, JOBSTORE_OP_end,
    JOBSTORE_OP_content_type, JOBSTORE_OP_type_body, JOBSTORE_OP_set_running,
    JOBSTORE_OP_set_done, JOBSTORE_OP_set_result, JOBSTORE_OP_next, JOBSTORE_OP_succeeded,
    JOBSTORE_OP_reset_blocks, JOBSTORE_OP_prune_blocks, JOBSTORE_OP_done_blocks,
    JOBSTORE_OP_record_blocks, JOBSTORE_OP_plan_blocks, JOBSTORE_OP_renew,
    JOBSTORE_OP_planned, JOBSTORE_OP_release, JOBSTORE_OP_claim_finish, JOBSTORE_OP_record_lease, JOBSTORE_OP_finish_commit,
    JOBSTORE_NOPS
};
/* The operation's name ("lease", the function name without jobstore_); NULL out of range. */
const char *jobstore_op_name(int op);
/* Calls of operation `op` so far, and seconds spent in them (from any thread). */
unsigned long long jobstore_op_calls(const jobstore *S, int op);
double jobstore_op_seconds(const jobstore *S, int op);

/* ---- jobs -------------------------------------------------------------------------- */
int jobstore_get(jobstore *S, const char *id, jobstore_job *out);
/* Calls cb for every job, newest first, at most `limit`. */
int jobstore_list(jobstore *S, int limit, void (*cb)(void *ctx, const jobstore_job *j), void *ctx);
/* Jobs per state, in the order queued, running, succeeded, failed, cancelled. */
int jobstore_counts(jobstore *S, long counts[5]);
/* The same, TESS_EIO at once when another call holds the connection (for /metrics). */
int jobstore_counts_now(jobstore *S, long counts[5]);
/* Jobs queued or running. */
int jobstore_active(jobstore *S, long *n);
/* Calls cb with the disk need (bytes) of every queued or running job that declared one. */
int jobstore_needs(jobstore *S,
                   void (*cb)(void *ctx, const char *id, const char *state, double need),
             void *ctx);
/* Queues a job; its commit is on disk before this returns. */
int jobstore_insert(jobstore *S, const char *id, const char *type, const char *body, double created,
              double disk_need);
/* The state (16 bytes) of job `id`. */
int jobstore_state(jobstore *S, const char *id, char *state);
/* Ends a job that is queued or running: state, finished, error (JSON text or NULL); on
 * disk before this returns.  *changed (may be NULL) = whether this call ended it (0: it
 * had ended already, by another server). */
int jobstore_end(jobstore *S, const char *id, const char *state, double finished,
           const char *error_json, int *changed);
/* The content type (64 bytes, "" when none) of a job's product. */
int jobstore_content_type(jobstore *S, const char *id, char *ctype);
/* Type (64 bytes) and body (malloc'd) of a job. */
int jobstore_type_body(jobstore *S, const char *id, char *type, char **body);
/* Marks a queued or running job running from `now` with `total` blocks, `done` of them
 * done (the start of this run, for the ETA); a job that has ended stays as it is. */
int jobstore_set_running(jobstore *S, const char *id, double now, long long total, long long done);
/* Progress: `done` blocks (the PostgreSQL store counts its done blocks itself). */
int jobstore_set_done(jobstore *S, const char *id, long long done);
int jobstore_set_result(jobstore *S, const char *id, const char *result_json, const char *dataset,
                  const char *attach_to, const char *content_type);
/* The job to run next: a running one first, then the oldest queued; "" when none.  The
 * shared store answers the oldest running job with work for one more runner (blocks of
 * its current stage nobody holds, its first plan or its finish not claimed), else the
 * oldest queued one. */
int jobstore_next(jobstore *S, char *id);
/* Calls cb for every succeeded job finished after `since` (NAN or -INFINITY: all), in the
 * order they were submitted. */
int jobstore_succeeded(jobstore *S, double since,
                 void (*cb)(void *ctx, const char *id, const char *dataset,
                            const char *attach_to, const char *ctype, double finished),
                 void *ctx);

/* ---- blocks ------------------------------------------------------------------------ */
/* Forgets the blocks recorded for a job (it starts over). */
int jobstore_reset_blocks(jobstore *S, const char *id);
/* Forgets the blocks of jobs that are not running. */
int jobstore_prune_blocks(jobstore *S);
/* Calls cb for every block recorded as done. */
int jobstore_done_blocks(jobstore *S, const char *id, void (*cb)(void *ctx, int stage, long block),
                   void *ctx);
/* Records n blocks as done (one transaction); their leases end. */
int jobstore_record_blocks(jobstore *S, const char *id, int n, const int *stages,
                     const long *blocks);

/* ---- leases (shared stores only; the SQLite store answers TESS_EINVAL) ---------------- */
/* Makes the block rows of a planned job (idempotent: every server planning it calls it). */
int jobstore_plan_blocks(jobstore *S, const char *id, int nstages, const long *nblocks);
/* Extends by lease_s from now the leases `owner` holds on the n blocks (stages[i],
 * blocks[i]) of job `id` (id "" and n 0: none) and on the finish of a job, and ends every
 * other lease of `owner` (a lease whose answer was lost with the connection, a block
 * left behind); *renewed how many were extended. */
int jobstore_renew(jobstore *S, const char *owner, double lease_s, const char *id, int n,
                   const int *stages, const long *blocks, long *renewed);
/* *planned = whether the block rows of job `id` exist (its first plan is complete). */
int jobstore_planned(jobstore *S, const char *id, int *planned);
/* Ends the leases `owner` holds on blocks not done and its claims of jobs (it leaves the job: others take them at
 * once instead of after the lease time). */
int jobstore_release(jobstore *S, const char *owner);
/* Claims queued or running job `id` for `owner` for lease_s seconds, for its first plan or
 * its serial end (assembly, rename, registration): 0 when claimed (or already this
 * owner's), TESS_EAGAIN while another owner's claim is alive or the job has ended.
 * *took_over (may be NULL) = 1 when the claim was another owner's, expired. */
int jobstore_claim_finish(jobstore *S, const char *id, const char *owner, double lease_s,
                          int *took_over);
/* One statement for a runner's exchange with the store while job `id` runs: records the
 * n blocks (stages[i], blocks[i]) done as jobstore_record_blocks does (their leases end;
 * the job's count of done blocks grows by those not recorded before), then leases up to
 * `max` blocks of stage `stage` of the job, if it is running, that are neither done nor
 * leased (or whose lease expired) and not among the n, for `lease_s` seconds to `owner`,
 * skipping rows other servers are leasing at this moment (FOR UPDATE SKIP LOCKED; max 0:
 * none).
 * out[*nout] the blocks leased, *expired how many of them were another owner's expired
 * lease; *left the blocks of stage `stage` not done (the leased ones among them; while
 * other runners record at the same time, possibly more than there are, never fewer);
 * *others how many other owners hold leases on its blocks; state (16 bytes) the job's
 * state.  TESS_ENOTFOUND: no such job. */
int jobstore_record_lease(jobstore *S, const char *id, int n, const int *stages,
                          const long *blocks, int stage, const char *owner, double lease_s,
                          int max, long *out, int *nout, int *expired, long *left, int *others,
                          char *state);
/* The end of a job that succeeded, in one statement: its result (as jobstore_set_result)
 * and state succeeded, only while it is running and its finish is claimed by `owner`;
 * *changed = whether it was (0: it was cancelled or failed first, or the claim lost). */
int jobstore_finish_commit(jobstore *S, const char *id, const char *owner, double finished,
                           const char *result_json, const char *dataset,
                           const char *attach_to, const char *content_type, int *changed);

#endif
