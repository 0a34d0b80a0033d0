/* The composition root: what the server and the worker share (catalog, caches, pool,
 * plane store, job runner), built by one function for both. */
#ifndef TESSERA_DAEMON_APP_H
#define TESSERA_DAEMON_APP_H

#include <pthread.h>
#include <stddef.h>
#include "daemon/cache/diskcache.h"
#include "daemon/cache/planes.h"
#include "daemon/cache/tilecache.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "engine/base/buf.h"
#include "engine/base/pool.h"

struct jobs;
struct colset;

/* Everything a process of tesserad serves or runs with, whether it listens (the server)
 * or not (tesserad --worker).  Read-only after tess_app_open but for `workers`, which
 * tess_app_drain takes away under `pool_lock`; the members are thread-safe themselves. */
typedef struct tess_app {
    const tess_config *cfg;
    catalog *cat;
    tilecache *cache;
    diskcache *disk;          /* optional disk tier (cache.disk_dir), or NULL */
    pool *workers;            /* NULL once drained */
    pthread_mutex_t pool_lock;/* guards `workers` against tess_app_drain */
    planestore *planes;       /* source planes in memory, shared by tiles and cutouts */
    struct colset *collections; /* the collections and their index (daemon/collection/), or
                                   NULL for none */
    struct jobs *jobs;        /* the job runner (jobs.dir), or NULL when jobs are disabled */
} tess_app;

/* Builds the app of `cfg` (which must outlive it): turns on the process-wide settings
 * every reader obeys (only canonical dataset paths are read, the decoders' limits), opens
 * the catalog, the memory and disk caches, the worker pool, the plane store, the
 * collections (their index brought up to date, its rescan thread started) and, when
 * jobs.dir is set, the job runner.  Returns 0, or TESS_EIO / TESS_EINVAL / TESS_ENOMEM
 * with `err` saying why (nothing is left open). */
int tess_app_open(const tess_config *cfg, tess_app **out, char *err, size_t errlen);

/* Stops the job runner (blocks in flight finish and are recorded) and then the pool
 * (every queued and running task completes); `workers` is NULL afterwards.  The catalog
 * and caches stay.  Idempotent; NULL is ignored. */
void tess_app_drain(tess_app *a);

/* tess_app_drain, then frees everything.  NULL is ignored. */
void tess_app_close(tess_app *a);

/* The tasks waiting in the pool's queue now (0 once drained).  Thread-safe. */
size_t tess_app_queue_depth(tess_app *a);

/* Whether the job runner's database was reachable at its last call: 1, or 1 without jobs.
 * Never blocks. */
int tess_app_jobs_reachable(tess_app *a);

/* Appends the app's Prometheus metrics to `b`: the caches, the frame decodes, the pool's
 * queue and the jobs (docs/operations.md lists them). */
void tess_app_metrics(tess_app *a, buf *b);

#endif
