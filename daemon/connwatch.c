/* Connection deadlines: a list of sockets under one lock, a thread asleep until the first deadline. */
#include "daemon/connwatch.h"
#include "engine/base/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

struct connwatch_entry {
    connwatch_entry *prev, *next;
    int fd;
    double deadline;          /* 0 = none */
};

struct connwatch {
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* on CLOCK_MONOTONIC, as tess_mono_s */
    pthread_t thread;
    connwatch_entry *head;
    double wake_at;           /* when the thread wakes by itself; INFINITY = never */
    int stop;
    unsigned long long cut;
};

/* Shuts down the sockets past their deadline; returns the earliest deadline left
 * (INFINITY when none).  Called with the lock held. */
static double cut_expired(connwatch *w, double now)
{
    double next = INFINITY;
    for (connwatch_entry *e = w->head; e; e = e->next) {
        if (e->deadline <= 0)
            continue;
        if (e->deadline <= now) {
            shutdown(e->fd, SHUT_RDWR);
            e->deadline = 0;
            w->cut++;
        } else if (e->deadline < next) {
            next = e->deadline;
        }
    }
    return next;
}

static void *watch_main(void *arg)
{
    connwatch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        w->wake_at = cut_expired(w, tess_mono_s());
        if (isinf(w->wake_at)) {
            pthread_cond_wait(&w->wake, &w->lock);
        } else {
            struct timespec ts;
            ts.tv_sec = (time_t)w->wake_at;
            ts.tv_nsec = (long)((w->wake_at - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&w->wake, &w->lock, &ts);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

connwatch *connwatch_new(void)
{
    connwatch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->lock, NULL);
    w->wake_at = INFINITY;
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

void connwatch_free(connwatch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    for (connwatch_entry *e = w->head, *next; e; e = next) {
        next = e->next;
        free(e);
    }
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* Sets e's deadline and wakes the thread when it is now the first.  Lock held. */
static void arm(connwatch *w, connwatch_entry *e, double deadline)
{
    e->deadline = deadline;
    if (deadline > 0 && deadline < w->wake_at) {
        w->wake_at = deadline;
        pthread_cond_signal(&w->wake);
    }
}

connwatch_entry *connwatch_add(connwatch *w, int fd, double deadline)
{
    connwatch_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->fd = fd;
    pthread_mutex_lock(&w->lock);
    e->next = w->head;
    if (w->head)
        w->head->prev = e;
    w->head = e;
    arm(w, e, deadline);
    pthread_mutex_unlock(&w->lock);
    return e;
}

void connwatch_set(connwatch *w, connwatch_entry *e, double deadline)
{
    if (!e)
        return;
    pthread_mutex_lock(&w->lock);
    arm(w, e, deadline);
    pthread_mutex_unlock(&w->lock);
}

void connwatch_tighten(connwatch *w, connwatch_entry *e, double deadline)
{
    if (!e)
        return;
    pthread_mutex_lock(&w->lock);
    if (e->deadline <= 0 || deadline < e->deadline)
        arm(w, e, deadline);
    pthread_mutex_unlock(&w->lock);
}

void connwatch_remove(connwatch *w, connwatch_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&w->lock);
    if (e->prev)
        e->prev->next = e->next;
    else
        w->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    pthread_mutex_unlock(&w->lock);
    free(e);
}

unsigned long long connwatch_cut_count(connwatch *w)
{
    pthread_mutex_lock(&w->lock);
    unsigned long long n = w->cut;
    pthread_mutex_unlock(&w->lock);
    return n;
}
