/* What a job-store backend provides (jobstore.h): its operations, called through jobstore.c. */
#ifndef TESSERA_DAEMON_JOBS_JOBSTORE_IMPL_H
#define TESSERA_DAEMON_JOBS_JOBSTORE_IMPL_H

#include "daemon/jobs/jobstore.h"

#include <pthread.h>

typedef struct jobstore_ops {
    void (*close)(jobstore *S);
    int (*get)(jobstore *S, const char *id, jobstore_job *out);
    int (*list)(jobstore *S, int limit, void (*cb)(void *, const jobstore_job *), void *ctx);
    int (*counts)(jobstore *S, long counts[5]);
    int (*active)(jobstore *S, long *n);
    int (*needs)(jobstore *S, void (*cb)(void *, const char *, const char *, double), void *ctx);
    int (*insert)(jobstore *S, const char *id, const char *type, const char *body,
                  double created, double disk_need);
    int (*state)(jobstore *S, const char *id, char *state);
    int (*end)(jobstore *S, const char *id, const char *state, double finished,
               const char *error_json, int *changed);
    int (*content_type)(jobstore *S, const char *id, char *ctype);
    int (*type_body)(jobstore *S, const char *id, char *type, char **body);
    int (*set_running)(jobstore *S, const char *id, double now, long long total,
                       long long done);
    int (*set_done)(jobstore *S, const char *id, long long done);
    int (*set_result)(jobstore *S, const char *id, const char *result_json,
                      const char *dataset, const char *attach_to, const char *content_type);
    int (*next)(jobstore *S, char *id);
    int (*succeeded)(jobstore *S, double since,
                     void (*cb)(void *, const char *, const char *, const char *,
                                const char *, double),
                     void *ctx);
    int (*reset_blocks)(jobstore *S, const char *id);
    int (*prune_blocks)(jobstore *S);
    int (*done_blocks)(jobstore *S, const char *id, void (*cb)(void *, int, long), void *ctx);
    int (*record_blocks)(jobstore *S, const char *id, int n, const int *stages,
                         const long *blocks);
    /* NULL in stores that are not shared */
    int (*plan_blocks)(jobstore *S, const char *id, int nstages, const long *nblocks);
    int (*renew)(jobstore *S, const char *owner, double lease_s, const char *id, int n,
                 const int *stages, const long *blocks, long *renewed);
    int (*planned)(jobstore *S, const char *id, int *planned);
    int (*release)(jobstore *S, const char *owner);
    int (*claim_finish)(jobstore *S, const char *id, const char *owner, double lease_s,
                        int *took_over);
    int (*record_lease)(jobstore *S, const char *id, int n, const int *stages,
                        const long *blocks, int stage, const char *owner, double lease_s,
                        int max, long *out, int *nout, int *expired, long *left,
                        int *others, char *state);
    int (*finish_commit)(jobstore *S, const char *id, const char *owner, double finished,
                         const char *result_json, const char *dataset, const char *attach_to,
                         const char *content_type, int *changed);
} jobstore_ops;

/* The part of every backend's store that jobstore.c reads; backends embed it first. */
struct jobstore {
    const jobstore_ops *ops;
    int shared;
    pthread_mutex_t mu;     /* serialises the calls (one connection per store) */
    double timeout_s;       /* bound of one call: waiting for mu, and each statement */
    volatile int reachable;
    /* Set by the backend for the call in progress: the database did not answer (lost:
     * unreachable, timed out, shut down), or answered that it cannot do the statement as
     * the store stands (refused: a table or column missing, no privilege; detail says
     * what); neither for an error that may pass on its own (a deadlock, a serialization
     * failure). */
    int lost, refused;
    char detail[256];
    /* The circuit: open from a call that found the database lost until one that reached
     * it; while open, calls fail at once (TESS_EIO) except one probe at retry_ns. */
    volatile int open;
    unsigned long long retry_ns;      /* tess_mono_s in ns */
    unsigned long long errors;
    /* Time in calls, ns (written under mu, read with relaxed atomics from anywhere). */
    unsigned long long ns;
    unsigned long long op_calls[JOBSTORE_NOPS];   /* calls per operation (jobstore_op) */
    unsigned long long op_ns[JOBSTORE_NOPS];
};

/* Sets up the common part (mu, the circuit) of a store being opened. */
void jobstore_base_init(jobstore *S, const jobstore_ops *ops, int shared, double timeout_s);
/* Undoes jobstore_base_init (the backend's close calls it). */
void jobstore_base_fini(jobstore *S);

#endif
