/* What a type of job ("mosaic", "power_spectrum", ...) gives the job runner
 * (daemon/jobs/jobs_run.c).
 *
 * A job is planned as a sequence of stages; each stage is a number of independent blocks.
 * The runner runs the blocks of one stage on the worker pool (batch priority, several at
 * once), records every finished block in the jobs database, and starts the next stage
 * when all blocks of the current one are done.  Progress is (blocks done) / (blocks of
 * all stages).  After a restart the runner parses the same stored body again, plans the job from it and
 * the same work directory and skips the blocks recorded as done; a block that was
 * running when the process died is run again.  So:
 *   - plan() must give the same stages and blocks for the same body and catalog,
 *     whatever the planning process's settings (env->threads, jobs.memory_mb): a
 *     parameter taken from them is decided by the job's first plan and recorded in the
 *     work directory (job_common.h, jobc_plan_record), and read back by every later plan
 *     (a restart, another server or worker of a cluster).  The runner keeps the first
 *     plan's block counts in <workdir>/blocks.plan and fails the job ("the job's plan
 *     changed between runs: ...") when a later plan counts otherwise.  A work directory
 *     made by a build before these records is planned from local settings, as then;
 *   - a block writes its results only into the work directory (or files it created
 *     there), and must be idempotent: running it twice gives the same files;
 *   - when run_block returns 0 its results are on disk (written with write(2) or
 *     fwrite+fflush; the runner calls syncfs on the work directory before recording
 *     the block), so a later stage or a restarted process can read them back;
 *   - state kept in memory between stages must be re-derivable from the work
 *     directory (plan() is called again after a restart, then blocks of later stages
 *     run without the earlier stages' blocks having run in this process).
 * Finally finish() writes the product to `tmp_path`; the runner renames it to its final
 * name, registers it as a dataset, removes the work directory and marks the job
 * succeeded.  Cancel and failure remove the work directory and the temporary product.
 */
#ifndef TESSERA_DAEMON_JOBS_JOBKIND_H
#define TESSERA_DAEMON_JOBS_JOBKIND_H

#include <stddef.h>
#include <jansson.h>
#include "daemon/catalog.h"
#include "daemon/config.h"

struct colset;

#define JOB_MAX_STAGES 8

/* What the runner lends to a job type.  Read-only for the job type. */
typedef struct job_env {
    const tess_config *cfg;  /* data roots, limits */
    catalog *cat;            /* datasets by name (thread-safe) */
    int threads;             /* worker threads of the pool (for sizing blocks) */
    struct colset *collections; /* the collections (daemon/collection/), or NULL: none */
    const char *workdir;     /* the job's work directory when the runner estimates a job
                                it is about to run (a resumed one's holds the plan its
                                first plan recorded: estimate reads it, never writes);
                                NULL at submit */
} job_env;

/* A validation failure: HTTP status (400 malformed / wrong type / unknown field, 404
 * unknown dataset, 413 too large, 422 valid but not computable), the field at fault
 * as a JSON pointer-ish path ("inputs[2]", "output.name"), and a sentence. */
typedef struct job_problem {
    int status;
    char field[128];
    char detail[512];
} job_problem;

/* What a job will need, in bytes, as estimated from its body and its inputs' headers.
 * Before a job is accepted the runner checks state_bytes + block_bytes against
 * jobs.memory_mb, product_bytes against jobs.max_product_mb, and the larger of work_bytes
 * and product_bytes (with what jobs.dir holds and what accepted jobs will still write)
 * against jobs.disk_mb, each a 413 naming the key; while the job runs, at most
 * (jobs.memory_mb - state_bytes) / block_bytes of its blocks are in flight (at least 1). */
typedef struct job_cost {
    double state_bytes;    /* memory the plan holds for the whole job */
    double block_bytes;    /* memory of the largest block */
    double work_bytes;     /* the most the work directory and the temporary product hold */
    double product_bytes;  /* the product */
    char what[240];        /* which block needs block_bytes, in words ("" when not said) */
} job_cost;

/* The plan of one job. */
typedef struct job_plan {
    int nstages;
    long nblocks[JOB_MAX_STAGES];   /* each >= 1 */
    void *state;                    /* the job type's own state, freed by release() */
} job_plan;

/* What finish() produced. */
typedef struct job_product {
    char dataset[128];     /* name under which the runner registers the product as a
                              dataset (image, cube or stack FITS at the final path);
                              "" = do not register */
    char attach_to[128];   /* for products that belong to an existing dataset (rechunk):
                              that dataset's name, else "" (see dataset_attach_profile) */
    char content_type[64]; /* of GET /jobs/{id}/result; "" = application/fits */
} job_product;

typedef struct job_kind {
    const char *type;      /* the body's "type" */

    /* Turns the body into the type's typed request, checking all of it: every field known,
     * of the right type and range; every input a dataset of env->cat or a file under a
     * data root; the output name a valid dataset name ([A-Za-z0-9_.-]{1,64}), and, unless
     * `accepted` (the job was accepted already: the name is its own), not taken.  Called
     * once at submit and once each time the job runs; estimate and plan read the request.
     * Cheap (no pixel reads; headers may be read, each at most once).  Returns 0 and *req
     * (freed by req_free), or -1 with *pb filled and *req NULL. */
    int (*parse)(const json_t *body, const job_env *env, int accepted, void **req,
                 job_problem *pb);

    /* Frees a request of parse (NULL is ignored). */
    void (*req_free)(void *req);

    /* The request as the body the job is stored with: every field written out (defaults
     * included) in one order, which parse turns into the same request again, so that a
     * run, a restart and the job document read what was accepted.  NULL (the hook, or
     * its answer when out of memory): the body is stored as it was given. */
    json_t *(*req_json)(const void *req);

    /* Plans the job (see above) from its request.  `workdir` exists and is private to
     * this job; plan may create files in it (deterministically).  Returns 0 or a TESS_E*
     * code with err. */
    int (*plan)(const void *req, const job_env *env, const char *workdir, job_plan *out,
                char *err, size_t errlen);

    /* Runs block `block` (0-based) of stage `stage`.  Called concurrently for blocks of
     * the same stage, never for two stages at once.  Should poll *cancel (nonzero = stop)
     * now and then and return TESS_ECANCELED when set.  Returns 0 or a TESS_E* code. */
    int (*run_block)(void *state, int stage, long block, const volatile int *cancel,
                     char *err, size_t errlen);

    /* After every block: writes the product to `tmp_path` (a file name in the jobs
     * directory, not yet existing) and fills *prod.  Returns 0 or a TESS_E* code. */
    int (*finish)(void *state, const char *tmp_path, job_product *prod, char *err,
                  size_t errlen);

    /* Frees the state (NULL is ignored). */
    void (*release)(void *state);

    /* What the job will need (job_cost), for a request of parse: from the request,
     * the catalog and the inputs' headers, with no pixel read and no allocation that grows
     * with the data.  Called before the job is accepted and again before it runs (then
     * with env->workdir: a plan recorded there by the job's first plan, which a resumed
     * job keeps, is what it will hold, not the plan local settings would give).  NULL:
     * the type declares nothing (the runner's checks of what is written still apply).
     * Returns 0 or -1 with *pb. */
    int (*estimate)(const void *req, const job_env *env, job_cost *cost, job_problem *pb);
} job_kind;

/* k->parse, counted (jobkind_parses): what the runner and the tests call. */
int jobkind_parse(const job_kind *k, const json_t *body, const job_env *env, int accepted,
                  void **req, job_problem *pb);
/* How many bodies jobkind_parse has parsed in this process (for tests). */
unsigned long jobkind_parses(void);

/* The problem pb as an error text "field: reason" in err; returns TESS_ENOMEM for a 500,
 * else TESS_EINVAL. */
int jobkind_problem_error(const job_problem *pb, char *err, size_t errlen);

/* Helpers for parse(): each returns 0, or -1 with *pb filled (status 400 unless
 * said otherwise), naming `field`. */
/* Every key of object `o` is one of the NULL-terminated `known`. */
int jobkind_only_fields(const json_t *o, const char *const *known, const char *prefix,
                        job_problem *pb);
/* `name` is a valid dataset name not yet in the catalog (409 when taken). */
int jobkind_check_new_name(const job_env *env, const char *name, const char *field,
                           job_problem *pb);
/* Resolves an input: a dataset name of the catalog, or a path (absolute or relative to
 * the first data root) that lies inside the data roots.  On success *ds is the dataset
 * (or NULL for a plain file) and `path` (PATH_MAX) the canonical file path.  One answer
 * for an unknown name, a missing file and a path outside the roots, whether or not
 * something exists there: 404 "no dataset or file under a data root named 'S'".  A path
 * whose "." and ".." components, removed as text, leave it outside every root is refused
 * without looking at the file system (so the time of the answer says nothing either);
 * one inside is then canonicalised (symbolic links followed) and must still be inside.
 * 403 when no data roots are configured, 400 for a path too long. */
/* The dataset called `name` through the routes' look-up (catalog_lookup, with its
 * checks): 0 with *ds the dataset or NULL when there is none; -1 with a 500 problem
 * naming `field` when its file changed since the server started. */
int jobkind_lookup(const job_env *env, const char *name, const char *field,
                   const dataset **ds, job_problem *pb);
int jobkind_resolve_input(const job_env *env, const char *s, const char *field,
                          const dataset **ds, char *path, job_problem *pb);
void jobkind_problem(job_problem *pb, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
