/* Unit tests of engine/base/pool: every task once, interactive first, bulk tasks on
 * threads - 1 workers, queue bound, draining, cancelled tasks dropped, pool_for. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/pool.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* A gate: a task that says it has started and then waits until released. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int started, released;
} gate;

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->started = g->released = 0;
}

static void gate_destroy(gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

static void gate_task(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->started = 1;
    pthread_cond_broadcast(&g->cond);
    while (!g->released)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_wait_started(gate *g)
{
    pthread_mutex_lock(&g->lock);
    while (!g->started)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_release(gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->released = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void count_task(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

START_TEST(test_every_task_runs_once)
{
    enum { N = 2000 };
    static atomic_int runs[N];
    pool *p = pool_new(4, N);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(pool_threads(p), 4);
    for (int i = 0; i < N; i++) {
        atomic_init(&runs[i], 0);
        ck_assert_int_eq(pool_submit(p, i % 3 ? POOL_BATCH : POOL_INTERACTIVE,
                                     count_task, &runs[i]), 0);
    }
    pool_free(p);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(atomic_load(&runs[i]), 1);
}
END_TEST

/* Records the order in which tasks run and the queue depth each one saw. */
typedef struct order_log {
    pthread_mutex_t lock;
    pool *p;
    int n;
    int id[16];
    size_t depth[16];
} order_log;

typedef struct order_arg {
    order_log *log;
    int id;
} order_arg;

static void order_task(void *arg)
{
    order_arg *a = arg;
    size_t d = pool_queue_depth(a->log->p);
    pthread_mutex_lock(&a->log->lock);
    a->log->depth[a->log->n] = d;
    a->log->id[a->log->n++] = a->id;
    pthread_mutex_unlock(&a->log->lock);
}

START_TEST(test_interactive_before_batch)
{
    pool *p = pool_new(1, 16);
    gate g;
    gate_init(&g);
    order_log log = {.p = p};
    pthread_mutex_init(&log.lock, NULL);
    order_arg args[6];
    for (int i = 0; i < 6; i++)
        args[i] = (order_arg){&log, i};

    ck_assert_int_eq(pool_submit(p, POOL_BATCH, gate_task, &g), 0);
    gate_wait_started(&g);                 /* the only worker is now busy */
    ck_assert_uint_eq(pool_queue_depth(p), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[0]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[1]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[2]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, order_task, &args[3]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, order_task, &args[4]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[5]), 0);
    ck_assert_uint_eq(pool_queue_depth(p), 6);
    gate_release(&g);
    pool_free(p);

    static const int want[6] = {3, 4, 0, 1, 2, 5};
    ck_assert_int_eq(log.n, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(log.id[i], want[i]);
        ck_assert_uint_eq(log.depth[i], (size_t)(5 - i));   /* taken off before running */
    }
    pthread_mutex_destroy(&log.lock);
    gate_destroy(&g);
}
END_TEST

/* Bulk tasks run after interactive ones and on at most threads - 1 workers: with two
 * workers and two bulk tasks that hold theirs, the second waits while the other worker
 * takes an interactive task submitted after both; the second bulk starts once the first
 * is let go. */
START_TEST(test_bulk_leaves_a_worker)
{
    pool *p = pool_new(2, 16);
    gate b1, b2;
    gate_init(&b1);
    gate_init(&b2);
    order_log log = {.p = p};
    pthread_mutex_init(&log.lock, NULL);
    order_arg args[3] = {{&log, 0}, {&log, 1}, {&log, 2}};

    ck_assert_int_eq(pool_submit(p, POOL_BULK, gate_task, &b1), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BULK, gate_task, &b2), 0);
    gate_wait_started(&b1);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, order_task, &args[0]), 0);
    /* The interactive task runs on the second worker while b1 holds the first. */
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&log.lock);
        int n = log.n;
        pthread_mutex_unlock(&log.lock);
        if (n == 1)
            break;
        usleep(1000);
    }
    ck_assert_int_eq(log.n, 1);
    ck_assert_int_eq(log.id[0], 0);
    pthread_mutex_lock(&b2.lock);
    ck_assert_int_eq(b2.started, 0);        /* one bulk task at a time on two workers */
    pthread_mutex_unlock(&b2.lock);
    /* The free worker goes on with what else is queued, interactive first; a batch task
     * may use it too while the bulk tasks are at their bound. */
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, order_task, &args[1]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[2]), 0);
    gate_release(&b1);
    gate_wait_started(&b2);
    gate_release(&b2);
    pool_free(p);
    ck_assert_int_eq(log.n, 3);
    ck_assert_int_eq(log.id[1], 1);
    ck_assert_int_eq(log.id[2], 2);
    pthread_mutex_destroy(&log.lock);
    gate_destroy(&b1);
    gate_destroy(&b2);
}
END_TEST

/* With one worker, bulk tasks still run (bulk_max is 1), after the interactive ones. */
START_TEST(test_bulk_on_one_worker)
{
    pool *p = pool_new(1, 16);
    gate g;
    gate_init(&g);
    order_log log = {.p = p};
    pthread_mutex_init(&log.lock, NULL);
    order_arg args[3] = {{&log, 0}, {&log, 1}, {&log, 2}};
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, gate_task, &g), 0);
    gate_wait_started(&g);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, order_task, &args[0]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BULK, order_task, &args[1]), 0);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, order_task, &args[2]), 0);
    gate_release(&g);
    pool_free(p);
    static const int want[3] = {2, 1, 0};
    ck_assert_int_eq(log.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(log.id[i], want[i]);
    pthread_mutex_destroy(&log.lock);
    gate_destroy(&g);
}
END_TEST

START_TEST(test_queue_full)
{
    pool *p = pool_new(1, 3);
    gate g;
    gate_init(&g);
    atomic_int ran, refused;
    atomic_init(&ran, 0);
    atomic_init(&refused, 0);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, gate_task, &g), 0);
    gate_wait_started(&g);
    /* the running task does not count against the bound: three more fit */
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, count_task, &ran), 0);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, count_task, &ran), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, count_task, &ran), 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, count_task, &refused), TESS_EAGAIN);
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, count_task, &refused), TESS_EAGAIN);
    ck_assert_uint_eq(pool_queue_depth(p), 3);
    ck_assert_int_eq(pool_submit(p, (pool_priority)7, count_task, &refused), TESS_EINVAL);
    gate_release(&g);
    pool_free(p);
    ck_assert_int_eq(atomic_load(&ran), 3);
    ck_assert_int_eq(atomic_load(&refused), 0);
    gate_destroy(&g);
}
END_TEST

/* A task that may be dropped: records in `log` which of fn and drop ran, in order. */
typedef struct droppable {
    atomic_int cancel;
    int id;
    char *log;                /* shared by the tasks of a test: "r<id>" or "d<id>" each */
    pthread_mutex_t *lock;
} droppable;

static void droppable_note(droppable *d, char what)
{
    pthread_mutex_lock(d->lock);
    size_t n = strlen(d->log);
    d->log[n] = what;
    d->log[n + 1] = (char)('0' + d->id);
    d->log[n + 2] = '\0';
    pthread_mutex_unlock(d->lock);
}

static void droppable_run(void *arg)
{
    droppable_note(arg, 'r');
}

static void droppable_drop(void *arg)
{
    droppable_note(arg, 'd');
}

/* Tasks whose flag is set while they wait are dropped by pool_drop_cancelled (on the
 * caller's thread, in queue order, the others kept in order) or by the worker that takes
 * them; each gets exactly one of its two calls. */
START_TEST(test_cancelled_tasks_are_dropped)
{
    pool *p = pool_new(1, 16);
    gate g;
    gate_init(&g);
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    char log[64] = "";
    droppable d[6];
    for (int i = 0; i < 6; i++) {
        atomic_init(&d[i].cancel, 0);
        d[i].id = i;
        d[i].log = log;
        d[i].lock = &lock;
    }
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, gate_task, &g), 0);
    gate_wait_started(&g);
    ck_assert_int_eq(pool_submit_cancellable(p, POOL_BATCH, droppable_run, droppable_drop,
                                             &d[0], &d[0].cancel), 0);
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(pool_submit_cancellable(p, POOL_INTERACTIVE, droppable_run,
                                                 droppable_drop, &d[i], &d[i].cancel), 0);
    ck_assert_int_eq(pool_submit_cancellable(p, POOL_INTERACTIVE, droppable_run, NULL, &d[5],
                                             &d[5].cancel), TESS_EINVAL);
    ck_assert_int_eq(pool_submit_cancellable(p, POOL_INTERACTIVE, droppable_run,
                                             droppable_drop, &d[5], NULL), TESS_EINVAL);
    ck_assert_uint_eq(pool_drop_cancelled(p), 0);
    /* The first and the last of the interactive queue, and the batch task. */
    atomic_store(&d[0].cancel, 1);
    atomic_store(&d[1].cancel, 1);
    atomic_store(&d[4].cancel, 1);
    ck_assert_uint_eq(pool_drop_cancelled(p), 3);
    ck_assert_str_eq(log, "d1d4d0");
    ck_assert_uint_eq(pool_queue_depth(p), 2);
    /* The queue's tail is right after dropping its last task: a new task goes after 3. */
    ck_assert_int_eq(pool_submit_cancellable(p, POOL_INTERACTIVE, droppable_run,
                                             droppable_drop, &d[5], &d[5].cancel), 0);
    /* Set while queued, seen by the worker that takes it. */
    atomic_store(&d[3].cancel, 1);
    gate_release(&g);
    pool_free(p);
    ck_assert_str_eq(log, "d1d4d0r2d3r5");
    gate_destroy(&g);
}
END_TEST

static void *free_thread(void *arg)
{
    pool_free(arg);
    return NULL;
}

/* pool_free, started while the only worker is blocked and tasks wait, refuses new tasks
 * and still runs every queued one before it returns. */
START_TEST(test_free_drains_queue)
{
    const size_t maxq = 1u << 20;
    pool *p = pool_new(1, maxq);
    gate g;
    gate_init(&g);
    atomic_int ran;
    atomic_init(&ran, 0);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, gate_task, &g), 0);
    gate_wait_started(&g);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(pool_submit(p, i % 2 ? POOL_INTERACTIVE : POOL_BATCH,
                                     count_task, &ran), 0);

    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, free_thread, p), 0);
    /* The pool cannot be freed while its worker is held at the gate, so it is safe to
     * keep submitting until the stop is seen: a refusal with room left means stopping. */
    int accepted = 0, rc;
    while ((rc = pool_submit(p, POOL_BATCH, count_task, &ran)) == 0) {
        accepted++;
        sched_yield();
    }
    ck_assert_int_eq(rc, TESS_EAGAIN);
    size_t depth = pool_queue_depth(p);
    ck_assert_uint_lt(depth, maxq);
    ck_assert_uint_eq(depth, (size_t)(5 + accepted));   /* nothing has run yet */
    ck_assert_int_eq(atomic_load(&ran), 0);

    gate_release(&g);
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&ran), 5 + accepted);
    gate_destroy(&g);
}
END_TEST

/* Four tasks that each wait for all four: finishes only if four workers run at once. */
static pthread_barrier_t four;

static void barrier_task(void *arg)
{
    pthread_barrier_wait(&four);
    count_task(arg);
}

START_TEST(test_workers_run_in_parallel)
{
    pool *p = pool_new(4, 8);
    atomic_int ran;
    atomic_init(&ran, 0);
    pthread_barrier_init(&four, NULL, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pool_submit(p, POOL_BATCH, barrier_task, &ran), 0);
    pool_free(p);
    ck_assert_int_eq(atomic_load(&ran), 4);
    pthread_barrier_destroy(&four);
}
END_TEST

/* A task may queue further work on its own pool. */
typedef struct chain {
    pool *p;
    gate child_done;
    atomic_int ran;
} chain;

static void child_task(void *arg)
{
    chain *c = arg;
    atomic_fetch_add(&c->ran, 1);
    gate_task(&c->child_done);  /* marks started; released at once below */
}

static void parent_task(void *arg)
{
    chain *c = arg;
    atomic_fetch_add(&c->ran, 1);
    if (pool_submit(c->p, POOL_INTERACTIVE, child_task, c) != 0)
        atomic_fetch_add(&c->ran, 100);
}

START_TEST(test_task_submits_task)
{
    chain c;
    c.p = pool_new(2, 4);
    gate_init(&c.child_done);
    c.child_done.released = 1;
    atomic_init(&c.ran, 0);
    ck_assert_int_eq(pool_submit(c.p, POOL_BATCH, parent_task, &c), 0);
    gate_wait_started(&c.child_done);
    pool_free(c.p);
    ck_assert_int_eq(atomic_load(&c.ran), 2);
    gate_destroy(&c.child_done);
}
END_TEST

START_TEST(test_thread_count_and_args)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pool *p = pool_new(0, 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(pool_threads(p), ncpu < 1 ? 1 : (int)ncpu);
    ck_assert_uint_eq(pool_queue_depth(p), 0);
    pool_free(p);
    ck_assert_ptr_null(pool_new(-1, 8));
    ck_assert_ptr_null(pool_new(2, 0));
    pool_free(NULL);

    /* an idle pool is freed promptly, and submit after start works for a 1-slot queue */
    atomic_int ran;
    atomic_init(&ran, 0);
    p = pool_new(1, 1);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, count_task, &ran), 0);
    pool_free(p);
    ck_assert_int_eq(atomic_load(&ran), 1);
}
END_TEST

/* pool_for: items [0, n) each covered once, slices aligned, at most nslices of them. */
typedef struct cover {
    atomic_int *hits;
    size_t align;
    atomic_int slices, misaligned;
} cover;

static void cover_slice(void *arg, size_t i0, size_t i1)
{
    cover *c = arg;
    atomic_fetch_add(&c->slices, 1);
    if (i0 % c->align != 0)
        atomic_fetch_add(&c->misaligned, 1);
    for (size_t i = i0; i < i1; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

static void check_cover(pool *p, int nslices, size_t n, size_t align)
{
    cover c = { calloc(n + 1, sizeof(atomic_int)), align ? align : 1, 0, 0 };
    ck_assert_ptr_nonnull(c.hits);
    pool_for(p, POOL_BATCH, nslices, n, align, cover_slice, &c);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(atomic_load(&c.hits[i]) == 1, "item %zu of %zu run %d times", i, n,
                      atomic_load(&c.hits[i]));
    ck_assert_int_le(atomic_load(&c.slices), nslices < 1 ? 1 : nslices);
    ck_assert_int_eq(atomic_load(&c.misaligned), 0);
    free(c.hits);
}

START_TEST(test_for_covers_every_item_once)
{
    pool *p = pool_new(3, 64);
    ck_assert_ptr_nonnull(p);
    static const struct { int nslices; size_t n, align; } cases[] = {
        { 4, 1000, 1 }, { 4, 1000, 64 }, { 7, 3, 1 }, { 1, 17, 1 }, { 0, 5, 0 },
        { 64, 100000, 4096 }, { 3, 1, 1 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_cover(p, cases[k].nslices, cases[k].n, cases[k].align);
        check_cover(NULL, cases[k].nslices, cases[k].n, cases[k].align);
    }
    pool_for(p, POOL_BATCH, 4, 0, 1, cover_slice, NULL);   /* nothing to do */
    pool_free(p);
}
END_TEST

/* A pool_for from a task of a pool whose only worker runs that task, and one on a pool
 * whose queue is full: the callers run the slices themselves. */
typedef struct nested {
    pool *p;
    cover c;
} nested;

static void nested_task(void *arg)
{
    nested *t = arg;
    pool_for(t->p, POOL_INTERACTIVE, 8, 4000, 1, cover_slice, &t->c);
}

START_TEST(test_for_inside_a_task_and_full_queue)
{
    nested t = { pool_new(1, 4), { calloc(4000, sizeof(atomic_int)), 1, 0, 0 } };
    ck_assert_ptr_nonnull(t.p);
    ck_assert_int_eq(pool_submit(t.p, POOL_BATCH, nested_task, &t), 0);
    pool_free(t.p);
    for (size_t i = 0; i < 4000; i++)
        ck_assert_int_eq(atomic_load(&t.c.hits[i]), 1);
    free(t.c.hits);

    gate g;
    gate_init(&g);
    pool *p = pool_new(1, 1);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, gate_task, &g), 0);
    gate_wait_started(&g);
    ck_assert_int_eq(pool_submit(p, POOL_BATCH, gate_task, &g), 0);   /* fills the queue */
    check_cover(p, 5, 999, 1);
    gate_release(&g);
    pool_free(p);
    gate_destroy(&g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_every_task_runs_once);
    tcase_add_test(tc, test_interactive_before_batch);
    tcase_add_test(tc, test_bulk_leaves_a_worker);
    tcase_add_test(tc, test_bulk_on_one_worker);
    tcase_add_test(tc, test_queue_full);
    tcase_add_test(tc, test_free_drains_queue);
    tcase_add_test(tc, test_cancelled_tasks_are_dropped);
    tcase_add_test(tc, test_workers_run_in_parallel);
    tcase_add_test(tc, test_task_submits_task);
    tcase_add_test(tc, test_thread_count_and_args);
    tcase_add_test(tc, test_for_covers_every_item_once);
    tcase_add_test(tc, test_for_inside_a_task_and_full_queue);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
