/* The job store's calls, passed to the backend that opened it (jobstore.h). */
#include "daemon/jobs/jobstore_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <stdlib.h>

void jobstore_job_clear(jobstore_job *j)
{
    free(j->body);
    free(j->error);
    free(j->result);
    j->body = j->error = j->result = NULL;
}

int jobstore_note(jobstore *S, int rc)
{
    int ok = rc == 0 || rc == TESS_ENOTFOUND || rc == TESS_EAGAIN || rc == TESS_EINVAL;
    S->reachable = ok;
    if (!ok)
        __atomic_add_fetch(&S->errors, 1, __ATOMIC_RELAXED);
    return rc;
}

void jobstore_close(jobstore *S)
{
    if (S)
        S->ops->close(S);
}

int jobstore_shared(const jobstore *S)
{
    return S->shared;
}

int jobstore_reachable(const jobstore *S)
{
    return S->reachable;
}

double jobstore_seconds(const jobstore *S)
{
    return S->seconds;
}

unsigned long long jobstore_errors(const jobstore *S)
{
    return __atomic_load_n(&S->errors, __ATOMIC_RELAXED);
}

static const char *const op_names[JOBSTORE_NOPS] = {
    "get", "list", "counts", "active", "needs", "insert", "state", "end", "content_type",
    "type_body", "set_running", "set_done", "set_result", "next", "succeeded",
    "reset_blocks", "prune_blocks", "done_blocks", "record_blocks", "plan_blocks", "renew",
    "planned", "release", "claim_finish", "record_lease", "finish_commit",
};

const char *jobstore_op_name(int op)
{
    return op >= 0 && op < JOBSTORE_NOPS ? op_names[op] : NULL;
}

unsigned long long jobstore_op_calls(const jobstore *S, int op)
{
    return op >= 0 && op < JOBSTORE_NOPS ? S->op_calls[op] : 0;
}

double jobstore_op_seconds(const jobstore *S, int op)
{
    return op >= 0 && op < JOBSTORE_NOPS ? S->op_seconds[op] : 0.0;
}

/* Notes the time of one call of operation `op` started at t0. */
static void count_call(jobstore *S, int op, double t0)
{
    double dt = tess_mono_s() - t0;
    S->seconds += dt;
    S->op_calls[op]++;
    S->op_seconds[op] += dt;
}

/* Runs one backend call, timed and counted (jobstore_seconds, jobstore_op_calls) and its
 * outcome noted. */
#define CALL(op, ...) \
    __extension__({ \
        double t0_ = tess_mono_s(); \
        int rc_ = S->ops->op(S, __VA_ARGS__); \
        count_call(S, JOBSTORE_OP_##op, t0_); \
        jobstore_note(S, rc_); \
    })
#define CALL_SHARED(op, ...) (S->ops->op ? CALL(op, __VA_ARGS__) : TESS_EINVAL)

int jobstore_get(jobstore *S, const char *id, jobstore_job *out) { return CALL(get, id, out); }

int jobstore_list(jobstore *S, int limit, void (*cb)(void *ctx, const jobstore_job *j), void *ctx)
{
    return CALL(list, limit, cb, ctx);
}

int jobstore_counts(jobstore *S, long counts[5]) { return CALL(counts, counts); }

int jobstore_active(jobstore *S, long *n) { return CALL(active, n); }

int jobstore_needs(jobstore *S,
                   void (*cb)(void *ctx, const char *id, const char *state, double need),
             void *ctx)
{
    return CALL(needs, cb, ctx);
}

int jobstore_insert(jobstore *S, const char *id, const char *type, const char *body, double created,
              double disk_need)
{
    return CALL(insert, id, type, body, created, disk_need);
}

int jobstore_state(jobstore *S, const char *id, char *state) { return CALL(state, id, state); }

int jobstore_end(jobstore *S, const char *id, const char *state, double finished,
           const char *error_json, int *changed)
{
    int dummy;
    return CALL(end, id, state, finished, error_json, changed ? changed : &dummy);
}

int jobstore_content_type(jobstore *S, const char *id, char *ctype)
{
    return CALL(content_type, id, ctype);
}

int jobstore_type_body(jobstore *S, const char *id, char *type, char **body)
{
    return CALL(type_body, id, type, body);
}

int jobstore_set_running(jobstore *S, const char *id, double now, long long total, long long done)
{
    return CALL(set_running, id, now, total, done);
}

int jobstore_set_done(jobstore *S, const char *id, long long done)
{
    return CALL(set_done, id, done);
}

int jobstore_set_result(jobstore *S, const char *id, const char *result_json, const char *dataset,
                  const char *attach_to, const char *content_type)
{
    return CALL(set_result, id, result_json, dataset, attach_to, content_type);
}

int jobstore_next(jobstore *S, char *id) { return CALL(next, id); }

int jobstore_succeeded(jobstore *S, double since,
                 void (*cb)(void *ctx, const char *id, const char *dataset,
                            const char *attach_to, const char *ctype, double finished),
                 void *ctx)
{
    return CALL(succeeded, since, cb, ctx);
}

int jobstore_reset_blocks(jobstore *S, const char *id) { return CALL(reset_blocks, id); }

int jobstore_prune_blocks(jobstore *S)
{
    double t0 = tess_mono_s();
    int rc = S->ops->prune_blocks(S);
    count_call(S, JOBSTORE_OP_prune_blocks, t0);
    return jobstore_note(S, rc);
}

int jobstore_done_blocks(jobstore *S, const char *id, void (*cb)(void *ctx, int stage, long block),
                   void *ctx)
{
    return CALL(done_blocks, id, cb, ctx);
}

int jobstore_record_blocks(jobstore *S, const char *id, int n, const int *stages,
                           const long *blocks)
{
    return CALL(record_blocks, id, n, stages, blocks);
}

int jobstore_plan_blocks(jobstore *S, const char *id, int nstages, const long *nblocks)
{
    return CALL_SHARED(plan_blocks, id, nstages, nblocks);
}

int jobstore_renew(jobstore *S, const char *owner, double lease_s, const char *id, int n,
                   const int *stages, const long *blocks, long *renewed)
{
    return CALL_SHARED(renew, owner, lease_s, id, n, stages, blocks, renewed);
}

int jobstore_planned(jobstore *S, const char *id, int *planned)
{
    return CALL_SHARED(planned, id, planned);
}

int jobstore_release(jobstore *S, const char *owner) { return CALL_SHARED(release, owner); }

int jobstore_claim_finish(jobstore *S, const char *id, const char *owner, double lease_s,
                          int *took_over)
{
    int dummy;
    return CALL_SHARED(claim_finish, id, owner, lease_s, took_over ? took_over : &dummy);
}

int jobstore_record_lease(jobstore *S, const char *id, int n, const int *stages,
                          const long *blocks, int stage, const char *owner, double lease_s,
                          int max, long *out, int *nout, int *expired, long *left, int *others,
                          char *state)
{
    return CALL_SHARED(record_lease, id, n, stages, blocks, stage, owner, lease_s, max, out,
                       nout, expired, left, others, state);
}

int jobstore_finish_commit(jobstore *S, const char *id, const char *owner, double finished,
                           const char *result_json, const char *dataset,
                           const char *attach_to, const char *content_type, int *changed)
{
    return CALL_SHARED(finish_commit, id, owner, finished, result_json, dataset, attach_to,
                       content_type, changed);
}
