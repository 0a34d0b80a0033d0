/* The job store's calls, passed to the backend that opened it (jobstore.h). */
#include "daemon/jobs/jobstore_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void jobstore_job_clear(jobstore_job *j)
{
    free(j->body);
    free(j->error);
    free(j->result);
    j->body = j->error = j->result = NULL;
}

/* After a call found the database lost, the next probe waits this long. */
#define RETRY_S 1.0

/* The calling thread's last call: refused by the database, and why (jobstore_refused). */
static __thread int t_refused;
static __thread char t_detail[256];

static unsigned long long mono_ns(void)
{
    return (unsigned long long)(tess_mono_s() * 1e9);
}

void jobstore_base_init(jobstore *S, const jobstore_ops *ops, int shared, double timeout_s)
{
    S->ops = ops;
    S->shared = shared;
    S->timeout_s = timeout_s;
    S->reachable = 1;
    pthread_mutex_init(&S->mu, NULL);
}

void jobstore_base_fini(jobstore *S)
{
    pthread_mutex_destroy(&S->mu);
}

/* A call that does not reach the backend: counted as failed. */
static int fail_fast(jobstore *S)
{
    __atomic_add_fetch(&S->errors, 1, __ATOMIC_RELAXED);
    t_refused = 0;
    return TESS_EIO;
}

/* Before a backend call: 0 with S->mu held, or TESS_EIO at once while the circuit is open
 * (except for a probe, when it is time: jobstore_probe), or after wait_s when another
 * call keeps the connection that long (wait_s < 0: the store's timeout), or when the
 * circuit opened while this call waited (the call before it found the database lost). */
static int enter(jobstore *S, double wait_s, int may_probe)
{
    int probe = 0;
    if (__atomic_load_n(&S->open, __ATOMIC_ACQUIRE)) {
        if (!may_probe)
            return fail_fast(S);
        unsigned long long now = mono_ns();
        unsigned long long at = __atomic_load_n(&S->retry_ns, __ATOMIC_ACQUIRE);
        unsigned long long next = now + (unsigned long long)((RETRY_S + S->timeout_s) * 1e9);
        if (now < at || !__atomic_compare_exchange_n(&S->retry_ns, &at, next, 0,
                                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return fail_fast(S);
        probe = 1;
    }
    if (wait_s < 0)
        wait_s = S->timeout_s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(wait_s);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((wait_s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if ((wait_s > 0 ? pthread_mutex_timedlock(&S->mu, &ts) : pthread_mutex_trylock(&S->mu)))
        return fail_fast(S);
    if (!probe && __atomic_load_n(&S->open, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&S->mu);
        return fail_fast(S);
    }
    S->lost = S->refused = 0;
    S->detail[0] = '\0';
    return 0;
}

/* After a backend call of operation `op` started at t0 (ns): its time counted, its outcome
 * noted (the circuit opens when the database was lost, closes when it answered), S->mu
 * released.  Returns rc. */
static int leave(jobstore *S, int op, unsigned long long t0, int rc)
{
    unsigned long long dt = mono_ns() - t0;
    __atomic_add_fetch(&S->ns, dt, __ATOMIC_RELAXED);
    __atomic_add_fetch(&S->op_calls[op], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&S->op_ns[op], dt, __ATOMIC_RELAXED);
    int ok = rc == 0 || rc == TESS_ENOTFOUND || rc == TESS_EAGAIN || rc == TESS_EINVAL;
    if (!ok)
        __atomic_add_fetch(&S->errors, 1, __ATOMIC_RELAXED);
    t_refused = !ok && S->refused;
    snprintf(t_detail, sizeof t_detail, "%s", t_refused ? S->detail : "");
    if (S->lost) {
        S->reachable = 0;
        __atomic_store_n(&S->retry_ns, mono_ns() + (unsigned long long)(RETRY_S * 1e9),
                         __ATOMIC_RELEASE);
        __atomic_store_n(&S->open, 1, __ATOMIC_RELEASE);
    } else {
        /* A refusal is an answer: the database is there, the store is not as made. */
        S->reachable = ok || S->refused;
        if (ok || S->refused)
            __atomic_store_n(&S->open, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&S->mu);
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
    return S->reachable && !__atomic_load_n(&S->open, __ATOMIC_ACQUIRE);
}

int jobstore_available(const jobstore *S)
{
    return !__atomic_load_n(&S->open, __ATOMIC_ACQUIRE);
}

int jobstore_probe(jobstore *S)
{
    if (jobstore_available(S))
        return 0;
    long n;
    int rc = enter(S, -1.0, 1);
    if (rc == 0) {
        unsigned long long t0 = mono_ns();
        rc = leave(S, JOBSTORE_OP_active, t0, S->ops->active(S, &n));
    }
    return rc;
}

int jobstore_refused(char *detail, size_t len)
{
    if (t_refused && detail && len)
        snprintf(detail, len, "%s", t_detail);
    return t_refused;
}

double jobstore_seconds(const jobstore *S)
{
    return (double)__atomic_load_n(&S->ns, __ATOMIC_RELAXED) / 1e9;
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
    return op >= 0 && op < JOBSTORE_NOPS ? __atomic_load_n(&S->op_calls[op], __ATOMIC_RELAXED)
                                         : 0;
}

double jobstore_op_seconds(const jobstore *S, int op)
{
    return op >= 0 && op < JOBSTORE_NOPS
               ? (double)__atomic_load_n(&S->op_ns[op], __ATOMIC_RELAXED) / 1e9
               : 0.0;
}

/* Runs one backend call through enter and leave: bounded, timed, counted, its outcome
 * noted. */
#define CALL_WAIT(wait, op, ...) \
    __extension__({ \
        int rc_ = enter(S, wait, 0); \
        if (rc_ == 0) { \
            unsigned long long t0_ = mono_ns(); \
            rc_ = leave(S, JOBSTORE_OP_##op, t0_, S->ops->op(S, __VA_ARGS__)); \
        } \
        rc_; \
    })
#define CALL(op, ...) CALL_WAIT(-1.0, op, __VA_ARGS__)
#define CALL_SHARED(op, ...) (S->ops->op ? CALL(op, __VA_ARGS__) : TESS_EINVAL)

int jobstore_get(jobstore *S, const char *id, jobstore_job *out) { return CALL(get, id, out); }

int jobstore_list(jobstore *S, int limit, void (*cb)(void *ctx, const jobstore_job *j), void *ctx)
{
    return CALL(list, limit, cb, ctx);
}

int jobstore_counts(jobstore *S, long counts[5]) { return CALL(counts, counts); }

int jobstore_counts_now(jobstore *S, long counts[5])
{
    return CALL_WAIT(0.0, counts, counts);
}

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
    int rc = enter(S, -1.0, 0);
    if (rc == 0) {
        unsigned long long t0 = mono_ns();
        rc = leave(S, JOBSTORE_OP_prune_blocks, t0, S->ops->prune_blocks(S));
    }
    return rc;
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
