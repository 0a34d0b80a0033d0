/* Worker pool: pthreads taking tasks from three FIFO queues, interactive before bulk
 * (at most threads - 1 running) before batch. */
#include "engine/base/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/base/error.h"

typedef struct task {
    struct task *next;
    pool_fn fn;
    pool_fn drop;                 /* called instead of fn once *cancel is set, or NULL */
    const atomic_int *cancel;     /* NULL for tasks that cannot be given up */
    void *arg;
} task;

typedef struct task_queue {
    task *head, *tail;
} task_queue;

struct pool {
    pthread_mutex_t lock;
    pthread_cond_t work;          /* signalled when a task is queued or the pool stops */
    task_queue q[3];              /* indexed by pool_priority */
    size_t depth;                 /* tasks waiting in all queues */
    size_t bulk_waiting;          /* of which in q[POOL_BULK] */
    int bulk_running, bulk_max;
    size_t max_queue;
    int stopping;
    int nthreads;
    pthread_t *threads;
};

static void queue_push(task_queue *q, task *t)
{
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
}

static task *queue_pop(task_queue *q)
{
    task *t = q->head;
    if (t) {
        q->head = t->next;
        if (!q->head)
            q->tail = NULL;
    }
    return t;
}

static int task_cancelled(const task *t)
{
    return t->cancel && atomic_load_explicit(t->cancel, memory_order_acquire);
}

/* Tasks a worker may start now: bulk tasks wait while bulk_max of them run. */
static size_t runnable(const pool *p)
{
    return p->bulk_running < p->bulk_max ? p->depth : p->depth - p->bulk_waiting;
}

/* Runs tasks until the pool is stopping and every queue is empty. */
static void *worker_main(void *arg)
{
    pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (runnable(p) == 0 && !(p->stopping && p->depth == 0))
            pthread_cond_wait(&p->work, &p->lock);
        if (p->depth == 0)
            break;                /* stopping and drained */
        int bulk = 0;
        task *t = queue_pop(&p->q[POOL_INTERACTIVE]);
        if (!t && p->bulk_running < p->bulk_max && (t = queue_pop(&p->q[POOL_BULK]))) {
            bulk = 1;
            p->bulk_waiting--;
            p->bulk_running++;
        }
        if (!t)
            t = queue_pop(&p->q[POOL_BATCH]);
        p->depth--;
        pthread_mutex_unlock(&p->lock);
        if (task_cancelled(t))
            t->drop(t->arg);
        else
            t->fn(t->arg);
        free(t);
        pthread_mutex_lock(&p->lock);
        if (bulk) {
            p->bulk_running--;
            if (p->bulk_waiting)
                pthread_cond_signal(&p->work);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Stops and joins the first `started` workers, then frees the pool. */
static void pool_shutdown(pool *p, int started)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

/* Returns NULL on allocation or thread-creation failure (the workers already started
 * are stopped and joined), or when nthreads < 0 or max_queue is 0. */
pool *pool_new(int nthreads, size_t max_queue)
{
    if (nthreads < 0 || max_queue == 0)
        return NULL;
    if (nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
    }
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->work, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p->threads);
        free(p);
        return NULL;
    }
    p->max_queue = max_queue;
    p->nthreads = nthreads;
    p->bulk_max = nthreads > 1 ? nthreads - 1 : 1;
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            pool_shutdown(p, i);
            return NULL;
        }
    }
    return p;
}

/* The task record is allocated before the lock is taken; on any error fn is not called
 * and nothing is queued. */
static int submit(pool *p, pool_priority prio, pool_fn fn, pool_fn drop, void *arg,
                  const atomic_int *cancel)
{
    if (prio != POOL_INTERACTIVE && prio != POOL_BATCH && prio != POOL_BULK)
        return TESS_EINVAL;
    task *t = malloc(sizeof *t);
    if (!t)
        return TESS_ENOMEM;
    t->fn = fn;
    t->drop = drop;
    t->cancel = cancel;
    t->arg = arg;

    pthread_mutex_lock(&p->lock);
    if (p->stopping || p->depth >= p->max_queue) {
        pthread_mutex_unlock(&p->lock);
        free(t);
        return TESS_EAGAIN;
    }
    queue_push(&p->q[prio], t);
    p->depth++;
    if (prio == POOL_BULK)
        p->bulk_waiting++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int pool_submit(pool *p, pool_priority prio, pool_fn fn, void *arg)
{
    return submit(p, prio, fn, NULL, arg, NULL);
}

int pool_submit_cancellable(pool *p, pool_priority prio, pool_fn fn, pool_fn drop, void *arg,
                            const atomic_int *cancel)
{
    if (!drop || !cancel)
        return TESS_EINVAL;
    return submit(p, prio, fn, drop, arg, cancel);
}

/* The cancelled tasks are unlinked under the lock into a list of their own, then
 * dropped outside it (a drop function may submit tasks). */
size_t pool_drop_cancelled(pool *p)
{
    task_queue gone = {NULL, NULL};
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (int prio = 0; prio < 3; prio++) {
        task_queue *q = &p->q[prio];
        task *prev = NULL;      /* the last task kept */
        for (task *t = q->head, *next; t; t = next) {
            next = t->next;
            if (task_cancelled(t)) {
                if (prev)
                    prev->next = next;
                else
                    q->head = next;
                queue_push(&gone, t);
                p->depth--;
                if (prio == POOL_BULK)
                    p->bulk_waiting--;
                n++;
            } else {
                prev = t;
            }
        }
        q->tail = prev;
    }
    pthread_mutex_unlock(&p->lock);
    for (task *t = gone.head, *next; t; t = next) {
        next = t->next;
        t->drop(t->arg);
        free(t);
    }
    return n;
}

/* Must not be called from one of the pool's own tasks (it would wait for itself). */
void pool_free(pool *p)
{
    if (!p)
        return;
    pool_shutdown(p, p->nthreads);
}

int pool_threads(const pool *p)
{
    return p->nthreads;
}

size_t pool_queue_depth(pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t d = p->depth;
    pthread_mutex_unlock(&p->lock);
    return d;
}

/* A loop of pool_for: shared by the caller and its helper tasks, freed by the last of
 * them (a helper may start after the caller has returned: it then finds no slice). */
typedef struct loop {
    pthread_mutex_t lock;
    pthread_cond_t done_cond;     /* signalled when the last slice ends */
    int refs;                     /* the caller and the helpers not yet finished */
    size_t next;                  /* the next slice to take */
    size_t nslices, done;         /* slices in all, slices finished */
    size_t n, per;                /* items, items per slice */
    pool_slice_fn fn;
    void *arg;
} loop;

static void loop_release(loop *l)
{
    pthread_mutex_lock(&l->lock);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (last) {
        pthread_cond_destroy(&l->done_cond);
        pthread_mutex_destroy(&l->lock);
        free(l);
    }
}

/* Takes and runs slices until none is left. */
static void loop_work(loop *l)
{
    pthread_mutex_lock(&l->lock);
    while (l->next < l->nslices) {
        size_t i0 = l->next++ * l->per;
        size_t i1 = l->n - i0 < l->per ? l->n : i0 + l->per;
        pthread_mutex_unlock(&l->lock);
        l->fn(l->arg, i0, i1);
        pthread_mutex_lock(&l->lock);
        if (++l->done == l->nslices)
            pthread_cond_broadcast(&l->done_cond);
    }
    pthread_mutex_unlock(&l->lock);
}

static void loop_task(void *arg)
{
    loop *l = arg;
    loop_work(l);
    loop_release(l);
}

/* Runs the slices on the calling thread alone (no pool, or no memory for the loop). */
static void loop_inline(size_t n, size_t per, pool_slice_fn fn, void *arg)
{
    for (size_t i0 = 0; i0 < n; i0 += per)
        fn(arg, i0, n - i0 < per ? n : i0 + per);
}

void pool_for(pool *p, pool_priority prio, int nslices, size_t n, size_t align,
              pool_slice_fn fn, void *arg)
{
    if (n == 0)
        return;
    if (nslices < 1)
        nslices = 1;
    if (align < 1)
        align = 1;
    size_t per = (n + (size_t)nslices - 1) / (size_t)nslices;
    per = (per + align - 1) / align * align;
    size_t count = (n + per - 1) / per;
    loop *l = p && count > 1 ? calloc(1, sizeof *l) : NULL;
    if (l && pthread_mutex_init(&l->lock, NULL) != 0) {
        free(l);
        l = NULL;
    }
    if (l && pthread_cond_init(&l->done_cond, NULL) != 0) {
        pthread_mutex_destroy(&l->lock);
        free(l);
        l = NULL;
    }
    if (!l) {
        loop_inline(n, per, fn, arg);
        return;
    }
    l->refs = 1;
    l->nslices = count;
    l->n = n;
    l->per = per;
    l->fn = fn;
    l->arg = arg;
    for (size_t h = 1; h < count; h++) {
        pthread_mutex_lock(&l->lock);
        l->refs++;
        pthread_mutex_unlock(&l->lock);
        if (pool_submit(p, prio, loop_task, l) != 0) {
            pthread_mutex_lock(&l->lock);
            l->refs--;
            pthread_mutex_unlock(&l->lock);
            break;
        }
    }
    loop_work(l);
    pthread_mutex_lock(&l->lock);
    while (l->done < l->nslices)
        pthread_cond_wait(&l->done_cond, &l->lock);
    pthread_mutex_unlock(&l->lock);
    loop_release(l);
}
