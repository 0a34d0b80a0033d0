/* Worker pool: a fixed set of threads running queued tasks, interactive before bulk
 * before batch. */
#ifndef TESSERA_ENGINE_BASE_POOL_H
#define TESSERA_ENGINE_BASE_POOL_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct pool pool;
typedef void (*pool_fn)(void *arg);

typedef enum {
    POOL_INTERACTIVE = 0,   /* tiles, cutouts, slices: always taken first */
    POOL_BATCH = 1,         /* blocks of long jobs */
    POOL_BULK = 2           /* large interactive answers (big cutouts): after the
                             * interactive tasks, before batch, and on at most
                             * threads - 1 workers at once (all of one), so that one
                             * worker is always there for the small requests */
} pool_priority;

/* Starts `nthreads` workers (0 = one per online CPU) with room for at most `max_queue`
 * waiting tasks (over all priorities).  Returns NULL on failure: allocation or thread
 * creation (workers already started are joined), nthreads < 0, or max_queue 0. */
pool *pool_new(int nthreads, size_t max_queue);

/* Queues fn(arg).  Tasks of one priority run in submission order; an interactive task
 * is always started before any queued bulk or batch task, a bulk task (while fewer than
 * threads - 1 of them run) before any batch task.  Returns 0, or TESS_EAGAIN when the
 * queue is full or the pool is stopping (fn is then not called), TESS_ENOMEM, or
 * TESS_EINVAL for an unknown priority.  Thread-safe; tasks may submit more tasks. */
int pool_submit(pool *p, pool_priority prio, pool_fn fn, void *arg);

/* As pool_submit, for a task that may be given up before it starts: once *cancel is
 * nonzero, a worker that takes the task, or pool_drop_cancelled while it waits, calls
 * drop(arg) instead of fn(arg).  Exactly one of fn and drop is called, once, for a task
 * queued (none when this fails); *cancel is read with atomic loads and must stay valid
 * until then.  Returns as pool_submit, and TESS_EINVAL when drop or cancel is NULL. */
int pool_submit_cancellable(pool *p, pool_priority prio, pool_fn fn, pool_fn drop, void *arg,
                            const atomic_int *cancel);

/* Takes every waiting task whose cancel flag (pool_submit_cancellable) is set out of the
 * queues and calls its drop function, in queue order, on the calling thread and outside
 * the pool's lock.  Returns how many it dropped.  Thread-safe; may be called from a
 * task.  Cannot fail. */
size_t pool_drop_cancelled(pool *p);

/* Stops the pool: refuses new tasks, lets the workers finish every task already queued
 * and running, joins them and frees the pool.  NULL is ignored.  Must not be called
 * from one of the pool's own tasks. */
void pool_free(pool *p);

/* Work on items [i0, i1) of a loop cut into slices (pool_for). */
typedef void (*pool_slice_fn)(void *arg, size_t i0, size_t i1);

/* Runs fn over items [0, n) cut into at most `nslices` contiguous slices, each a multiple
 * of `align` (>= 1) items long but the last, on the workers of `p` (helper tasks queued
 * at priority `prio`) and on the calling thread, and returns when every slice has run.
 * Each slice is one call of fn, in no set order and on any of those threads.  With p
 * NULL, or when the pool takes no more tasks, the calling thread runs the slices left.
 * The caller takes slices itself and waits only for slices already started, so it may
 * be called from one of the pool's own tasks.  Cannot fail. */
void pool_for(pool *p, pool_priority prio, int nslices, size_t n, size_t align,
              pool_slice_fn fn, void *arg);

/* The number of worker threads.  Cannot fail. */
int pool_threads(const pool *p);
/* Tasks waiting, not yet started (both priorities).  Thread-safe; cannot fail. */
size_t pool_queue_depth(pool *p);

#endif
