/* The job store as the fault programs drive it (tests/faults): a runner over a scratch
 * jobs directory without the HTTP layer, its inputs, and what its jobs leave.  Every
 * helper here is the harness's own work: its calls are not fault points (fi_hold). */
#ifndef TESSERA_TESTS_FAULTS_JOBSTORE_H
#define TESSERA_TESTS_FAULTS_JOBSTORE_H

#include <limits.h>
#include <stddef.h>
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/jobs/jobs.h"
#include "engine/base/pool.h"

typedef struct js_fixture {
    tess_config cfg;          /* data roots: `data` and tests/data/mosaic; dataset "cube" */
    pool *pool;               /* 2 workers */
    char dir[PATH_MAX - 64];  /* the scratch directory (under /dev/shm when it can) */
    char data[PATH_MAX];      /* dir/data: two small generated tiles */
    char jobs[PATH_MAX];      /* dir/jobs: the jobs directory */
    char shadow[PATH_MAX];    /* dir/shadow: the power-loss record */
} js_fixture;

/* Makes the scratch directory (tag in its name), the tiles, the configuration and the
 * pool, and registers the job types.  Fails the test when it cannot. */
void js_setup(js_fixture *f, const char *tag);
/* Frees the pool and the configuration and removes the scratch directory. */
void js_teardown(js_fixture *f);

/* Empties the jobs directory and the shadow directory (both then exist, empty). */
void js_clear(js_fixture *f);

/* Job bodies (malloc'd JSON), output dataset `name`: a mosaic of the two generated tiles
 * onto a 40 x 28 target (small: a few hundred ms under ASan); the mosaic of the six
 * tiles of tests/data/mosaic onto its reference target (tests/daemon/test_jobs.c's); a
 * rechunk of the cube dataset. */
char *js_small_mosaic(const char *name);
char *js_big_mosaic(const char *name);
char *js_rechunk(void);

/* The state of job `id` ("queued", "running", "succeeded", "failed", "cancelled") into
 * state (16) and, for a failed job, its problem's detail into detail (dlen); 0, or -1
 * when the store has no such job (or cannot say now). */
int js_state(jobs *J, const char *id, char *state, char *detail, size_t dlen);

/* Polls until job `id` is no longer queued or running, or `limit_s` passed; returns 1
 * when it ended (state as js_state), 0 on the time limit. */
int js_wait(jobs *J, const char *id, double limit_s, char *state, char *detail, size_t dlen);

/* The ids of the jobs in the store (at most max; 17 bytes each), newest first; the count. */
int js_ids(jobs *J, char (*ids)[17], int max);

/* The id of the job document `doc` (from jobs_submit) into id (17); 0 or -1. */
int js_doc_id(const char *doc, char *id);

/* The bytes of the product of succeeded job `id` (malloc'd), *len its length; NULL when
 * there is none. */
unsigned char *js_product(jobs *J, const char *id, size_t *len);

/* Entries of dir/jobs/work and *.tmp files of dir/jobs/results, 0 when the job store
 * left nothing behind its finished jobs. */
int js_leftovers(const js_fixture *f);

/* rm -rf of `path`. */
void js_rm_rf(const char *path);

#endif
