/* Worker pool: a fixed set of threads running queued tasks, interactive before batch. */
#ifndef TESSERA_SERVER_POOL_H
#define TESSERA_SERVER_POOL_H

#include <stddef.h>

typedef struct pool pool;
typedef void (*pool_fn)(void *arg);

typedef enum {
    POOL_INTERACTIVE = 0,   /* tiles, cutouts, slices: always taken first */
    POOL_BATCH = 1          /* blocks of long jobs */
} pool_priority;

/* Starts `nthreads` workers (0 = one per online CPU) with room for at most `max_queue`
 * waiting tasks (over both priorities).  Returns NULL on failure: allocation or thread
 * creation (workers already started are joined), nthreads < 0, or max_queue 0. */
pool *pool_new(int nthreads, size_t max_queue);

/* Queues fn(arg).  Tasks of one priority run in submission order; an interactive task
 * is always started before any queued batch task.  Returns 0, or TESS_EAGAIN when the
 * queue is full or the pool is stopping (fn is then not called), TESS_ENOMEM, or
 * TESS_EINVAL for an unknown priority.  Thread-safe; tasks may submit more tasks. */
int pool_submit(pool *p, pool_priority prio, pool_fn fn, void *arg);

/* Stops the pool: refuses new tasks, lets the workers finish every task already queued
 * and running, joins them and frees the pool.  NULL is ignored.  Must not be called
 * from one of the pool's own tasks. */
void pool_free(pool *p);

/* The number of worker threads.  Cannot fail. */
int pool_threads(const pool *p);
/* Tasks waiting, not yet started (both priorities).  Thread-safe; cannot fail. */
size_t pool_queue_depth(pool *p);

#endif
