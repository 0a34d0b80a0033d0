/* HTTP front end: libmicrohttpd daemon, replies with ETag/304, async pool work; routes in routes.c. */
#include "daemon/http.h"
#include "daemon/connwatch.h"
#include "daemon/peercount.h"
#include "daemon/problem.h"
#include "daemon/ranges.h"
#include "daemon/routes.h"
#include "daemon/oplog.h"
#include "engine/base/clock.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"
#include "engine/base/lru.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Upper bound on the request target (path and query, as sent): longer ones get 414
 * before any parsing. */
#define HTTP_MAX_URL 4096

/* Histogram buckets of tessera_http_request_seconds. */
static const double latency_buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS (sizeof(latency_buckets) / sizeof(latency_buckets[0]))

/* How often the suspension watcher looks at the sockets of suspended requests, ms. */
#define SUSP_LOOK_MS 50

/* The header deadline, s, of a connection accepted past
 * limits.max_connections_per_address: a client that means to send a request sends it at
 * once, and gets its 503; one that does not loses the slot soon. */
#define OVER_ADDRESS_HEAD_S 1.0

/* The interim response that tells a client that closed from one that half-closed. */
static const char probe_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* One render in progress and the requests waiting for its answer. */
typedef struct flight {
    struct flight *next;
    char *key;
    hreq *leader;                     /* the request computing it */
    hreq *waiters;
} flight;

struct hreq_priv;
/* Private server state beyond the public struct. */
typedef struct tserver_priv {
    struct tserver pub;
    pthread_mutex_t stats_lock;
    pthread_mutex_t flight_lock;      /* guards flights */
    flight *flights;                  /* renders in progress, by cache key */
    unsigned long long coalesced;     /* requests answered by another's render */
    unsigned long waiting_now;        /* requests waiting on another's render now */
    unsigned long long by_code[600];
    unsigned long long bucket[NBUCKETS + 1];
    double latency_sum;
    unsigned long long latency_count;
    oplog *access;                    /* access_log, or NULL */
    int nconn;                        /* open connections (atomic) */
    int nover;                        /* of them, accepted past the per-address limit,
                                         waiting for their 503 (atomic) */
    peercount *peers;                 /* open connections by client address */
    unsigned per_address_cap;         /* connections from one address past which more are
                                         closed at accept (limits.max_connections_per_address
                                         and headroom for their 503s) */
    unsigned long long per_address_refused; /* 503s past max_connections_per_address
                                         (atomic) */
    connwatch *watch;                 /* header deadlines (limits.header_timeout_s) */
    size_t body_budget;               /* limits.max_bodies_mb in bytes */
    size_t body_held;                 /* bytes of it reserved by requests (atomic) */
    /* The suspension watcher: a thread that polls the sockets of suspended requests and
     * cancels the work of clients that have gone. */
    pthread_mutex_t susp_lock;        /* guards the list below and the fields it names */
    pthread_cond_t susp_cond;         /* a first request is suspended, or the thread stops */
    lru_list suspended;               /* suspended requests (hreq_priv.susp_node); the
                                         order means nothing */
    size_t nsuspended;
    int susp_stop;
    int susp_running;
    pthread_t susp_thread;
    struct pollfd *pfd;               /* the watcher's own poll set, pfd_cap entries */
    struct hreq_priv **pfd_req;
    size_t pfd_cap;
    unsigned long long cancelled[3];  /* requests whose client had gone, by reply.cancelled
                                         (atomic) */
    /* Parked requests (hreq_park): long polls that hold no worker, looked at by their
     * own thread. */
    pthread_mutex_t park_lock;        /* guards the fields below */
    pthread_cond_t park_cond;         /* a request is parked, or the thread stops */
    struct hreq_priv *parked[HREQ_PARK_MAX];
    int nparked;
    int park_stop;
    int park_running;
    pthread_t park_thread;
} tserver_priv;

typedef struct hreq_priv {
    hreq pub;
    double start;                     /* tess_mono_s() at the request line */
    size_t body_cap;                  /* limits.max_body_mb in bytes */
    size_t body_reserved;             /* bytes of the body budget this request holds, and
                                         allocated for r->body (plus its NUL) */
    int body_over_budget;             /* the upload would have passed limits.max_bodies_mb */
    char *raw_uri;                    /* the request target as sent (access log) */
    size_t raw_len;                   /* its whole length (raw_uri is cut at HTTP_MAX_URL) */
    long arrival;                     /* time(2) of the request line */
    int sent_status;                  /* status queued, 0 = none yet */
    long long sent_bytes;             /* body bytes of that answer */
    int close_conn;                   /* answer with Connection: close */
    int client_5xx;                   /* a 5xx the request itself caused (a transfer coding
                                         not supported): counted, not error-logged */
    char proto[16];                   /* "HTTP/1.1" */
    /* While suspended (susp_lock): */
    lru_node susp_node;
    int listed;                       /* on the list of suspended requests */
    int fd;                           /* the connection's socket */
    int gone;                         /* the client has closed (set by the watcher) */
    int probed;                       /* its FIN was seen and the probe sent (or not due) */
    int waiting;                      /* waits on another's render (flight_lock) */
    /* While parked (hreq_park): */
    hreq_park_fn park_look;
    double park_until;                /* tess_mono_s() of its deadline */
} hreq_priv;

const char *hreq_arg(hreq *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

typedef struct args_each {
    void (*fn)(void *cls, const char *key, const char *value);
    void *cls;
} args_each;

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    args_each *a = cls;
    a->fn(a->cls, key, value);
    return MHD_YES;
}

void hreq_args_each(hreq *r, void (*fn)(void *cls, const char *key, const char *value),
                    void *cls)
{
    args_each a = {fn, cls};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, each_arg, &a);
}

const char *hreq_arg_lookup(void *r, const char *key)
{
    return hreq_arg(r, key);
}

const char *hreq_header(hreq *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

#define MAX_KNOWN_ARGS 64

typedef struct unknown_scan {
    const char *const *known;
    unsigned char seen[MAX_KNOWN_ARGS];
    const char *bad;
    int repeated;
} unknown_scan;

static enum MHD_Result scan_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    unknown_scan *u = cls;
    for (int i = 0; u->known[i] && i < MAX_KNOWN_ARGS; i++)
        if (strcmp(key, u->known[i]) == 0) {
            if (u->seen[i]++) {
                u->bad = key;
                u->repeated = 1;
                return MHD_NO;
            }
            return MHD_YES;
        }
    u->bad = key;
    return MHD_NO;
}

int hreq_only_args(hreq *r, const char *const *known)
{
    unknown_scan u;
    memset(&u, 0, sizeof(u));
    u.known = known;
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, scan_arg, &u);
    if (u.bad) {
        if (u.repeated)
            problem_reply(r, 400, u.bad, "query parameter '%.60s' is given more than once", u.bad);
        else
            problem_reply(r, 400, u.bad, "unknown query parameter '%.60s'", u.bad);
        return -1;
    }
    return 0;
}

void hreq_reply_tile(hreq *r, int status, tile *body)
{
    tile_release(r->rep.body);
    r->rep.status = status;
    r->rep.body = body;
    if (!body)
        r->rep.status = 500;
}

void hreq_reply_text(hreq *r, buf *b, const char *content_type)
{
    size_t len;
    char *text = buf_detach(b, &len);
    if (!text) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, len, content_type));
}

void hreq_reply_json(hreq *r, int status, char *json)
{
    if (!json) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, status, tile_new_take((unsigned char *)json, strlen(json),
                                             "application/json"));
}

int hreq_try_cache(hreq *r)
{
    if (!r->cache_key)
        return 0;
    tile *t = tilecache_get(r->srv->app->cache, r->cache_key);
    if (!t && r->srv->app->disk) {
        t = diskcache_get(r->srv->app->disk, r->cache_key);
        if (t)
            tilecache_put(r->srv->app->cache, r->cache_key, t);
    }
    if (!t)
        return 0;
    hreq_reply_tile(r, 200, t);
    r->rep.x_cache = 1;
    r->rep.cache_control = "public, max-age=3600";
    return 1;
}

void hreq_serve(hreq *r, void (*work)(hreq *r), void *arg, void (*arg_free)(void *))
{
    if (!r->cache_key) {
        arg_free(arg);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    if (hreq_try_cache(r)) {
        arg_free(arg);
        return;
    }
    hreq_run_async(r, work, arg, arg_free);
}

/* ---- the suspension watcher: clients that leave --------------------------------------- */

/* Puts a request that has just been suspended on the list.  Without its socket
 * (libmicrohttpd gives none) it is not watched, and so never cancelled. */
static void susp_add(tserver_priv *sp, hreq_priv *hp)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hp->pub.conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || ci->connect_fd == MHD_INVALID_SOCKET)
        return;
    pthread_mutex_lock(&sp->susp_lock);
    hp->fd = ci->connect_fd;
    lru_push_front(&sp->suspended, &hp->susp_node);
    hp->listed = 1;
    if (sp->nsuspended++ == 0)
        pthread_cond_signal(&sp->susp_cond);
    pthread_mutex_unlock(&sp->susp_lock);
}

/* Takes a request off the list, before it is resumed: from then on the watcher
 * touches neither it nor its socket, and its `gone` may be read without the lock. */
static void susp_remove(tserver_priv *sp, hreq_priv *hp)
{
    pthread_mutex_lock(&sp->susp_lock);
    if (hp->listed) {
        lru_remove(&sp->suspended, &hp->susp_node);
        hp->listed = 0;
        sp->nsuspended--;
    }
    pthread_mutex_unlock(&sp->susp_lock);
}

/* What the socket's poll events say of the client.  A reset or an error: it has gone.
 * Its FIN alone: it has closed, or only half-closed and still reads (printf | nc -N),
 * and nothing short of writing tells them apart -- so an HTTP/1.1 client whose socket
 * has nothing left to send gets an interim "100 Continue" (RFC 9110 section 15.2: a
 * client must accept unexpected 1xx responses), which a closed socket answers with a
 * reset, seen at the next look.  HTTP/1.0 clients may not be sent 1xx: their FIN alone
 * leaves the work running. */
static void susp_look(hreq_priv *hp, short revents)
{
    if (revents & (POLLHUP | POLLERR)) {
        hp->gone = 1;
        return;
    }
    if (!(revents & POLLRDHUP) || hp->probed)
        return;
    if (strcmp(hp->proto, "HTTP/1.1") != 0) {
        hp->probed = 1;
        return;
    }
    int unsent = -1;
    if (ioctl(hp->fd, SIOCOUTQ, &unsent) != 0 || unsent != 0)
        return;               /* earlier bytes still in flight: look again later */
    hp->probed = 1;
    ssize_t w = send(hp->fd, probe_continue, sizeof probe_continue - 1,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
        hp->gone = 1;
}

/* Whether every request waiting on the render of `f` has gone (flight_lock held). */
static int waiters_gone(const flight *f)
{
    for (hreq *w = f->waiters; w; w = w->next_waiter)
        if (!((hreq_priv *)w)->gone)
            return 0;
    return 1;
}

/* One look at every watched socket (susp_lock held): marks the clients that have gone
 * and sets the cancel flag of each computation that nobody waits for any more (its
 * render, if shared, is taken out of the flight list so that no new request joins it).
 * Returns how many flags it set. */
static int susp_round_locked(tserver_priv *sp)
{
    if (sp->pfd_cap < sp->nsuspended) {
        size_t cap = sp->nsuspended * 2;
        struct pollfd *pfd = realloc(sp->pfd, cap * sizeof *pfd);
        if (pfd)
            sp->pfd = pfd;
        hreq_priv **req = pfd ? realloc(sp->pfd_req, cap * sizeof *req) : NULL;
        if (!req)
            return 0;         /* no memory: look again next time */
        sp->pfd_req = req;
        sp->pfd_cap = cap;
    }
    nfds_t n = 0;
    for (lru_node *node = sp->suspended.front; node; node = node->next) {
        hreq_priv *hp = LRU_ENTRY(node, hreq_priv, susp_node);
        if (!hp->gone) {
            sp->pfd[n].fd = hp->fd;
            sp->pfd[n].events = POLLRDHUP;
            sp->pfd[n].revents = 0;
            sp->pfd_req[n++] = hp;
        }
    }
    if (n > 0 && poll(sp->pfd, n, 0) > 0)
        for (nfds_t i = 0; i < n; i++)
            if (sp->pfd[i].revents)
                susp_look(sp->pfd_req[i], sp->pfd[i].revents);
    int set = 0;
    pthread_mutex_lock(&sp->flight_lock);
    for (lru_node *node = sp->suspended.front; node; node = node->next) {
        hreq_priv *hp = LRU_ENTRY(node, hreq_priv, susp_node);
        hreq *r = &hp->pub;
        if (!hp->gone || hp->waiting || atomic_load(&r->cancel))
            continue;
        flight *f = r->flight;
        if (f) {
            if (!waiters_gone(f))
                continue;
            for (flight **pp = &sp->flights; *pp; pp = &(*pp)->next)
                if (*pp == f) {
                    *pp = f->next;
                    break;
                }
        }
        r->cancel_v = 1;
        atomic_store(&r->cancel, 1);
        set++;
    }
    pthread_mutex_unlock(&sp->flight_lock);
    return set;
}

/* The CLOCK_MONOTONIC time ms milliseconds from now, for pthread_cond_timedwait on the
 * server's conditions (made with that clock). */
static struct timespec mono_after_ms(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += ms * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* The suspension watcher's thread: a round every SUSP_LOOK_MS while requests are suspended (it
 * sleeps while none is), then the queued work of the clients that have gone is dropped
 * at once (pool_drop_cancelled: their connections are resumed and closed from here). */
static void *susp_main(void *arg)
{
    tserver_priv *sp = arg;
    pthread_mutex_lock(&sp->susp_lock);
    while (!sp->susp_stop) {
        if (sp->nsuspended == 0) {
            pthread_cond_wait(&sp->susp_cond, &sp->susp_lock);
            continue;
        }
        int set = susp_round_locked(sp);
        pthread_mutex_unlock(&sp->susp_lock);
        if (set) {
            tess_app *app = sp->pub.app;
            pthread_mutex_lock(&app->pool_lock);
            if (app->workers)
                pool_drop_cancelled(app->workers);
            pthread_mutex_unlock(&app->pool_lock);
        }
        struct timespec until = mono_after_ms(SUSP_LOOK_MS);
        pthread_mutex_lock(&sp->susp_lock);
        while (!sp->susp_stop && pthread_cond_timedwait(&sp->susp_cond, &sp->susp_lock,
                                                         &until) == 0)
            ;
    }
    pthread_mutex_unlock(&sp->susp_lock);
    return NULL;
}

int hreq_cancelled(hreq *r)
{
    return atomic_load_explicit(&r->cancel, memory_order_relaxed) != 0;
}

void hreq_reply_cancelled(hreq *r)
{
    tile_release(r->rep.body);
    r->rep.body = NULL;
    r->rep.status = 0;
    r->rep.cancelled = HREQ_STOPPED;
}

/* Ends a request's suspension: off the list, counted when its client has gone
 * (then on_request closes the connection, if libmicrohttpd has not already), resumed. */
static void resume(hreq *r)
{
    tserver_priv *sp = (tserver_priv *)r->srv;
    hreq_priv *hp = (hreq_priv *)r;
    susp_remove(sp, hp);
    if (hp->gone) {
        int stage = r->rep.cancelled == HREQ_DROPPED || r->rep.cancelled == HREQ_STOPPED
                        ? r->rep.cancelled : 0;
        __atomic_add_fetch(&sp->cancelled[stage], 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&r->async_state, 2, __ATOMIC_RELEASE);
    MHD_resume_connection(r->conn);
}

/* Ends the flight `r` leads: every waiter gets r's answer (its own reference to the
 * body) and is resumed.  Called before r itself is resumed, while r's reply is alive. */
static void finish_flight(hreq *r)
{
    tserver_priv *sp = (tserver_priv *)r->srv;
    flight *f = r->flight;
    if (!f)
        return;
    pthread_mutex_lock(&sp->flight_lock);
    for (flight **pp = &sp->flights; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    pthread_mutex_unlock(&sp->flight_lock);
    r->flight = NULL;
    for (hreq *w = f->waiters; w;) {
        hreq *next = w->next_waiter;
        w->rep.status = r->rep.status;
        w->rep.body = r->rep.body ? tile_ref(r->rep.body) : NULL;
        w->rep.x_cache = r->rep.x_cache >= 0 ? 0 : -1;
        w->rep.cache_control = r->rep.cache_control;
        w->rep.retry_after = r->rep.retry_after;
        w->rep.cancelled = r->rep.cancelled;
        __atomic_add_fetch(&sp->coalesced, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&sp->waiting_now, 1, __ATOMIC_RELAXED);
        resume(w);
        w = next;
    }
    free(f->key);
    free(f);
}

/* Runs on a pool thread: the handler's work, then the cache insert, then resume. */
static void run_task(void *arg)
{
    hreq *r = arg;
    r->work(r);
    __atomic_add_fetch(&r->srv->renders, 1, __ATOMIC_RELAXED);
    susp_remove((tserver_priv *)r->srv, (hreq_priv *)r);
    if (r->rep.status == 200 && r->rep.body && r->cache_key) {
        tilecache_put(r->srv->app->cache, r->cache_key, r->rep.body);
        if (r->srv->app->disk)
            diskcache_put(r->srv->app->disk, r->cache_key, r->rep.body);
        r->rep.x_cache = 0;
        if (!r->rep.cache_control)
            r->rep.cache_control = "public, max-age=3600";
    }
    finish_flight(r);
    resume(r);
}

/* Runs instead of run_task when the request's cancel flag was set before its work
 * started: on the worker that took it, or on the watcher (pool_drop_cancelled). */
static void drop_task(void *arg)
{
    hreq *r = arg;
    susp_remove((tserver_priv *)r->srv, (hreq_priv *)r);
    r->rep.cancelled = HREQ_DROPPED;
    finish_flight(r);
    resume(r);
}

int hreq_run_async(hreq *r, void (*work)(hreq *r), void *arg, void (*arg_free)(void *))
{
    tserver_priv *sp = (tserver_priv *)r->srv;
    r->work = work;
    r->work_arg = arg;
    r->work_arg_free = arg_free;
    r->async_state = 1;
    MHD_suspend_connection(r->conn);
    susp_add(sp, (hreq_priv *)r);
    if (r->cache_key) {
        pthread_mutex_lock(&sp->flight_lock);
        flight **pp = &sp->flights;
        while (*pp && strcmp((*pp)->key, r->cache_key) != 0)
            pp = &(*pp)->next;
        flight *f = *pp;
        if (f && atomic_load(&f->leader->cancel)) {
            /* Its client went before this one came (the watcher saw no waiter): leave
             * it to end alone and compute afresh. */
            *pp = f->next;
            f = NULL;
        }
        if (f) {
            /* The same render is running: wait for its answer. */
            r->next_waiter = f->waiters;
            f->waiters = r;
            ((hreq_priv *)r)->waiting = 1;
            __atomic_add_fetch(&sp->waiting_now, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&sp->flight_lock);
            return 0;
        }
        f = calloc(1, sizeof(*f));
        if (f && !(f->key = strdup(r->cache_key))) {
            free(f);
            f = NULL;
        }
        if (f) {
            f->leader = r;
            f->next = sp->flights;
            sp->flights = f;
            r->flight = f;
        }
        pthread_mutex_unlock(&sp->flight_lock);
    }
    tess_app *app = sp->pub.app;
    pthread_mutex_lock(&app->pool_lock);
    int rc = app->workers ? pool_submit_cancellable(app->workers, hreq_priority(r), run_task,
                                                    drop_task, r, &r->cancel)
                          : TESS_EAGAIN;
    pthread_mutex_unlock(&app->pool_lock);
    if (rc) {
        susp_remove(sp, (hreq_priv *)r);
        problem_reply(r, 503, NULL, "the server is busy; retry shortly");
        r->rep.retry_after = 1;
        finish_flight(r);
        resume(r);
    }
    return 0;
}

void hreq_mark_bulk(hreq *r, long long values)
{
    if (values > HREQ_BULK_VALUES)
        r->bulk = 1;
}

pool_priority hreq_priority(const hreq *r)
{
    return r->bulk ? POOL_BULK : POOL_INTERACTIVE;
}

/* ---- parked requests: long polls without a worker ------------------------------------ */

int hreq_park(hreq *r, hreq_park_fn look, void *arg, void (*arg_free)(void *), double seconds)
{
    tserver_priv *sp = (tserver_priv *)r->srv;
    hreq_priv *hp = (hreq_priv *)r;
    pthread_mutex_lock(&sp->park_lock);
    if (sp->park_stop || !sp->park_running || sp->nparked == HREQ_PARK_MAX) {
        pthread_mutex_unlock(&sp->park_lock);
        return TESS_EAGAIN;
    }
    r->work_arg = arg;
    r->work_arg_free = arg_free;
    hp->park_look = look;
    hp->park_until = tess_mono_s() + seconds;
    r->async_state = 1;
    MHD_suspend_connection(r->conn);
    susp_add(sp, hp);
    sp->parked[sp->nparked++] = hp;
    pthread_cond_signal(&sp->park_cond);
    pthread_mutex_unlock(&sp->park_lock);
    return 0;
}

/* The parking thread: every HREQ_PARK_LOOK_MS, each parked request's look (without the
 * lock, so that parking never waits on a look); a request whose look answered, whose
 * deadline passed (its last look), or whose client has gone (no answer) is resumed.
 * When the server stops, every parked request gets its last look at once.  Only this
 * thread takes requests off the list, so the snapshot stays valid outside the lock. */
static void *park_main(void *arg)
{
    tserver_priv *sp = arg;
    hreq_priv *snap[HREQ_PARK_MAX];
    pthread_mutex_lock(&sp->park_lock);
    for (;;) {
        if (sp->nparked == 0) {
            if (sp->park_stop)
                break;
            pthread_cond_wait(&sp->park_cond, &sp->park_lock);
            continue;
        }
        if (!sp->park_stop) {
            struct timespec until = mono_after_ms(HREQ_PARK_LOOK_MS);
            while (!sp->park_stop && pthread_cond_timedwait(&sp->park_cond, &sp->park_lock,
                                                             &until) == 0)
                ;
        }
        int n = sp->nparked, stop = sp->park_stop;
        memcpy(snap, sp->parked, (size_t)n * sizeof(*snap));
        pthread_mutex_unlock(&sp->park_lock);
        double now = tess_mono_s();
        for (int i = 0; i < n; i++) {
            hreq *r = &snap[i]->pub;
            if (hreq_cancelled(r))        /* the watcher saw its client go */
                r->rep.cancelled = HREQ_DROPPED;
            else if (!snap[i]->park_look(r, stop || now >= snap[i]->park_until))
                snap[i] = NULL;            /* still waiting */
        }
        pthread_mutex_lock(&sp->park_lock);
        for (int i = 0; i < n; i++) {
            if (!snap[i])
                continue;
            for (int k = 0; k < sp->nparked; k++)
                if (sp->parked[k] == snap[i]) {
                    sp->parked[k] = sp->parked[--sp->nparked];
                    break;
                }
            resume(&snap[i]->pub);
        }
    }
    pthread_mutex_unlock(&sp->park_lock);
    return NULL;
}

/* Gives every parked request its last look and stops the parking thread. */
static void park_stop(tserver_priv *sp)
{
    pthread_mutex_lock(&sp->park_lock);
    sp->park_stop = 1;
    pthread_cond_signal(&sp->park_cond);
    pthread_mutex_unlock(&sp->park_lock);
    if (sp->park_running)
        pthread_join(sp->park_thread, NULL);
    sp->park_running = 0;
}

/* ---- what the HTTP layer serves itself -------------------------------------------- */

void tserver_handle_healthz(hreq *r, const route_match *m)
{
    /* Tiles keep being served without the jobs database: still 200, saying so. */
    if (!tess_app_jobs_reachable(r->srv->app))
        hreq_reply_json(r, 200, strdup("{\"status\":\"degraded\",\"database\":\"unreachable\"}"));
    else
        hreq_reply_json(r, 200, strdup("{\"status\":\"ok\"}"));
}

void tserver_handle_metrics(hreq *r, const route_match *m)
{
    tserver_priv *sp = (tserver_priv *)r->srv;
    buf b;
    buf_init(&b, 1 << 20);
    buf_adds(&b, "# HELP tessera_http_requests_total HTTP requests answered, by status code.\n"
                 "# TYPE tessera_http_requests_total counter\n");
    pthread_mutex_lock(&sp->stats_lock);
    for (int code = 100; code < 600; code++)
        if (sp->by_code[code])
            buf_printf(&b, "tessera_http_requests_total{code=\"%d\"} %llu\n", code,
                       sp->by_code[code]);
    buf_adds(&b, "# HELP tessera_http_request_seconds Time from request to response.\n"
                 "# TYPE tessera_http_request_seconds histogram\n");
    unsigned long long cum = 0;
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum += sp->bucket[i];
        buf_printf(&b, "tessera_http_request_seconds_bucket{le=\"%g\"} %llu\n", latency_buckets[i],
                   cum);
    }
    cum += sp->bucket[NBUCKETS];
    buf_printf(&b, "tessera_http_request_seconds_bucket{le=\"+Inf\"} %llu\n", cum);
    buf_printf(&b, "tessera_http_request_seconds_sum %.6f\n", sp->latency_sum);
    buf_printf(&b, "tessera_http_request_seconds_count %llu\n", sp->latency_count);
    pthread_mutex_unlock(&sp->stats_lock);
    buf_printf(&b, "# HELP tessera_renders_total Pixel computations actually run.\n"
                   "# TYPE tessera_renders_total counter\ntessera_renders_total %llu\n",
               __atomic_load_n(&r->srv->renders, __ATOMIC_RELAXED));
    buf_printf(&b, "# HELP tessera_renders_coalesced_total Requests answered by a render "
                   "another request started (single flight).\n"
                   "# TYPE tessera_renders_coalesced_total counter\n"
                   "tessera_renders_coalesced_total %llu\n"
                   "# HELP tessera_renders_waiting Requests waiting now on a render another "
                   "request started.\n"
                   "# TYPE tessera_renders_waiting gauge\ntessera_renders_waiting %lu\n",
               __atomic_load_n(&sp->coalesced, __ATOMIC_RELAXED),
               __atomic_load_n(&sp->waiting_now, __ATOMIC_RELAXED));
    buf_printf(&b, "# HELP tessera_http_open_connections Connections open now.\n"
                   "# TYPE tessera_http_open_connections gauge\n"
                   "tessera_http_open_connections %d\n"
                   "# HELP tessera_http_client_addresses Client addresses with open "
                   "connections now.\n"
                   "# TYPE tessera_http_client_addresses gauge\n"
                   "tessera_http_client_addresses %zu\n"
                   "# HELP tessera_http_per_address_refused_total Requests answered 503 "
                   "past limits.max_connections_per_address.\n"
                   "# TYPE tessera_http_per_address_refused_total counter\n"
                   "tessera_http_per_address_refused_total %llu\n"
                   "# HELP tessera_http_header_timeouts_total Connections closed at "
                   "limits.header_timeout_s.\n"
                   "# TYPE tessera_http_header_timeouts_total counter\n"
                   "tessera_http_header_timeouts_total %llu\n"
                   "# HELP tessera_http_body_bytes Request-body bytes held (limits.max_bodies_mb).\n"
                   "# TYPE tessera_http_body_bytes gauge\ntessera_http_body_bytes %zu\n",
               __atomic_load_n(&sp->nconn, __ATOMIC_ACQUIRE), peercount_addresses(sp->peers),
               __atomic_load_n(&sp->per_address_refused, __ATOMIC_RELAXED),
               connwatch_cut_count(sp->watch),
               __atomic_load_n(&sp->body_held, __ATOMIC_ACQUIRE));
    buf_printf(&b, "# HELP tessera_requests_cancelled_total Requests whose client closed the "
                   "connection while their work waited or ran (no answer; status 499 in the "
                   "access log), by what became of the work: dropped from the queue, stopped "
                   "at its next block row, or finished (too late to stop, or shared with a "
                   "client still waiting).\n"
                   "# TYPE tessera_requests_cancelled_total counter\n"
                   "tessera_requests_cancelled_total{stage=\"queued\"} %llu\n"
                   "tessera_requests_cancelled_total{stage=\"running\"} %llu\n"
                   "tessera_requests_cancelled_total{stage=\"finished\"} %llu\n",
               __atomic_load_n(&sp->cancelled[HREQ_DROPPED], __ATOMIC_RELAXED),
               __atomic_load_n(&sp->cancelled[HREQ_STOPPED], __ATOMIC_RELAXED),
               __atomic_load_n(&sp->cancelled[0], __ATOMIC_RELAXED));
    tess_app_metrics(r->srv->app, &b);
    hreq_reply_text(r, &b, "text/plain; version=0.0.4; charset=utf-8");
}

/* ---- libmicrohttpd callbacks -------------------------------------------------- */

static void free_tile_cb(void *cls)
{
    tile_release(cls);
}

static int etag_matches(const char *inm, const char *etag)
{
    if (!inm)
        return 0;
    if (strcmp(inm, "*") == 0)
        return 1;
    size_t n = strlen(etag);
    for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag)) {
        char after = p[n];
        if (after == '\0' || after == ',' || after == ' ')
            return 1;
    }
    return 0;
}

/* The byte range of a 200 GET to send (daemon/ranges.h): *first and *n, with
 * content_range set for a 206; or a 416 problem (content_range "bytes *\/LEN") in the
 * reply.  Returns the status to send: 200, 206 or 416. */
static int apply_range(hreq *r, time_t mtime, unsigned long long *first,
                       unsigned long long *n, char content_range[80])
{
    reply *rep = &r->rep;
    unsigned long long len = rep->body ? rep->body->len : rep->file_len;
    *first = 0;
    *n = len;
    const char *range = hreq_header(r, "Range");
    if (!range || strcmp(r->method, "GET") != 0 || (!rep->body && rep->file_fd <= 0))
        return 200;
    const char *etag = rep->body ? rep->body->etag : rep->file_etag;
    if (!ranges_if_range_ok(hreq_header(r, "If-Range"), etag, mtime))
        return 200;
    unsigned long long a = 0, b = 0;
    ranges_answer ans = ranges_parse(range, len, &a, &b);
    if (ans == RANGES_WHOLE)
        return 200;
    if (ans == RANGES_UNSATISFIABLE) {
        snprintf(content_range, 80, "bytes */%llu", len);
        if (rep->file_fd > 0) {
            close(rep->file_fd);
            rep->file_fd = 0;
            rep->file_len = 0;
        }
        problem_reply(r, 416, "Range", "the range '%.60s' lies outside the %llu bytes of "
                      "the body", range, len);
        return 416;
    }
    *first = a;
    *n = b - a + 1;
    snprintf(content_range, 80, "bytes %llu-%llu/%llu", a, b, len);
    return 206;
}

static enum MHD_Result send_reply(hreq *r)
{
    reply *rep = &r->rep;
    if (rep->status == 0)
        problem_reply(r, 500, NULL, "the handler gave no answer");
    int status = rep->status;
    struct MHD_Response *resp;
    /* Files (job products) carry their modification time, for If-Range and caches. */
    time_t mtime = (time_t)-1;
    struct stat fst;
    if (rep->file_fd > 0 && fstat(rep->file_fd, &fst) == 0)
        mtime = fst.st_mtime;
    char content_range[80] = "";
    unsigned long long first = 0, count = 0;
    const char *inm = status == 200 ? hreq_header(r, "If-None-Match") : NULL;
    if ((rep->body && etag_matches(inm, rep->body->etag))
        || (rep->file_fd > 0 && rep->file_etag[0] && etag_matches(inm, rep->file_etag))) {
        status = 304;
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    } else if (status == 200 && (status = apply_range(r, mtime, &first, &count,
                                                       content_range)) == 416) {
        tile *t = rep->body ? tile_ref(rep->body) : NULL;
        resp = t ? MHD_create_response_from_buffer_with_free_callback_cls(t->len, t->data,
                                                                          free_tile_cb, t)
                 : MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!resp && t)
            tile_release(t);
    } else if (rep->file_fd > 0) {
        resp = MHD_create_response_from_fd_at_offset64(status == 206 ? count : rep->file_len,
                                                       rep->file_fd, (uint64_t)first);
        if (resp)
            rep->file_fd = 0; /* libmicrohttpd closes it */
        else
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->file_type);
        if (rep->file_name[0]) {
            char cd[128];
            snprintf(cd, sizeof cd, "attachment; filename=\"%s\"", rep->file_name);
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, cd);
        }
    } else if (rep->body) {
        tile *t = tile_ref(rep->body);
        resp = status == 206
                   ? MHD_create_response_from_buffer_with_free_callback_cls(
                         (size_t)count, t->data + first, free_tile_cb, t)
                   : MHD_create_response_from_buffer_with_free_callback_cls(t->len, t->data,
                                                                            free_tile_cb, t);
        if (!resp)
            tile_release(t);
    } else {
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp)
        return MHD_NO;
    if (rep->body) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->body->content_type);
        if (rep->status == 200)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, rep->body->etag);
    } else if (rep->file_etag[0] && rep->status == 200) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, rep->file_etag);
    }
    /* Every body may be asked for by byte ranges (RFC 9110, section 14.3). */
    if (status == 200 || status == 206)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (content_range[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, content_range);
    if (mtime != (time_t)-1 && status != 416) {
        char date[30];
        ranges_http_date(mtime, date);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, date);
    }
    if (rep->cache_control)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, rep->cache_control);
    /* A body may be an attachment too (a dataset's FITS file), or compressed. */
    if (rep->body && rep->file_name[0] && status == 200) {
        char cd[128];
        snprintf(cd, sizeof cd, "attachment; filename=\"%s\"", rep->file_name);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, cd);
    }
    if (rep->content_encoding && (status == 200 || status == 206))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, rep->content_encoding);
    if (rep->vary)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, rep->vary);
    if (rep->x_cache >= 0)
        MHD_add_response_header(resp, "X-Cache", rep->x_cache ? "HIT" : "MISS");
    if (rep->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", rep->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (rep->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, rep->allow);
    if (rep->location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, rep->location);
    if (rep->link)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LINK, rep->link);
    if (rep->x_shape[0] && status == 200) {
        MHD_add_response_header(resp, "X-Shape", rep->x_shape);
        MHD_add_response_header(resp, "X-Dtype", "<f4");
    }
    if (rep->www_authenticate)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, rep->www_authenticate);
    /* Everything served is public and read-only: browser viewers on other origins
     * (Aladin Lite, OpenSeadragon, Mirador) may read it, as the IIIF Image API asks of
     * info.json (section 6).  Access control for job endpoints is separate. */
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    if (r->rep.status == 204 && strcmp(r->method, "OPTIONS") == 0) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Content-Type, If-None-Match, Authorization, Range, If-Range");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    }
    MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                            "ETag, X-Cache, X-Shape, X-Dtype, Accept-Ranges, Content-Range, "
                            "Link");
    hreq_priv *hp = (hreq_priv *)r;
    if (hp->close_conn)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    hp->sent_status = status;
    hp->sent_bytes = status == 304 ? 0
                     : status == 206 ? (long long)count
                     : rep->file_len && !rep->body ? (long long)rep->file_len
                     : rep->body ? (long long)rep->body->len : 0;
    /* Neither load shedding (503) nor a 5xx the client chose to cause is a server fault:
     * any client could fill the error log with them; /metrics counts them. */
    if (status >= 500 && status != 503 && !hp->client_5xx && r->srv->cfg->error_log) {
        /* The problem document is JSON: embed it as it is (NULL when not JSON). */
        json_t *problem = rep->body && strstr(rep->body->content_type, "json")
                              ? json_loadb((const char *)rep->body->data, rep->body->len, 0, NULL)
                              : NULL;
        oplog_error_event(r->srv->cfg->error_log,
                          json_pack("{s:s, s:i, s:s, s:s, s:o*}", "event", "http_error",
                                    "status", status, "method", r->method, "uri",
                                    hp->raw_uri ? hp->raw_uri : r->url, "problem", problem));
    }
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    tserver_priv *sp = (tserver_priv *)r->srv;
    pthread_mutex_lock(&sp->stats_lock);
    if (status >= 100 && status < 600)
        sp->by_code[status]++;
    pthread_mutex_unlock(&sp->stats_lock);
    return ret;
}

/* ---- reading requests: framing, target length, body budget, header deadline -------- */

/* The connection's entry in the header-deadline watcher, or NULL. */
/* What on_connection keeps of each connection (its socket context). */
typedef struct conn_ctx {
    connwatch_entry *watch;           /* its header deadline */
    peer_key peer;                    /* its client address in tserver_priv.peers */
    int over_address;                 /* accepted past limits.max_connections_per_address */
} conn_ctx;

static conn_ctx *conn_context(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static connwatch_entry *watch_entry(struct MHD_Connection *conn)
{
    conn_ctx *cc = conn_context(conn);
    return cc ? cc->watch : NULL;
}

/* What the Transfer-Encoding fields of a request say (RFC 9112, section 6.1). */
typedef struct te_scan {
    int fields;               /* Transfer-Encoding header lines */
    int chunked;              /* codings named "chunked" */
    int last_chunked;         /* the final coding named is "chunked" */
    int exact;                /* one field, its whole value "chunked" (what libmicrohttpd
                                 decodes; any other value it reads as "up to the end of
                                 the connection") */
    char other[32];           /* the first other coding, printable ASCII ("" none) */
} te_scan;

static enum MHD_Result scan_te(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    te_scan *t = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) != 0)
        return MHD_YES;
    t->exact = ++t->fields == 1 && strcasecmp(value, "chunked") == 0;
    t->last_chunked = 0;
    for (const char *p = value; *p;) {
        size_t n = strcspn(p, ",");
        const char *b = p, *e = p + n;
        const char *semi = memchr(b, ';', n);   /* transfer parameters */
        if (semi)
            e = semi;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > b) {   /* empty list elements are ignored */
            size_t len = (size_t)(e - b);
            t->last_chunked = len == 7 && strncasecmp(b, "chunked", 7) == 0;
            t->chunked += t->last_chunked;
            if (!t->last_chunked && !t->other[0]) {
                size_t k = 0;
                for (; k < len && k < sizeof(t->other) - 1; k++)
                    t->other[k] = b[k] > ' ' && b[k] < 0x7f ? b[k] : '?';
                t->other[k] = '\0';
            }
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return MHD_YES;
}

/* 0 when the request's body framing is one libmicrohttpd reads: no Transfer-Encoding, or
 * "chunked" alone, without Content-Length, in HTTP/1.1.  Otherwise fills r's reply with
 * 501 (a coding other than chunked) or 400 (a framing that cannot be read reliably) and
 * returns -1; the connection is closed after the answer. */
static int check_framing(hreq *r, const char *version)
{
    te_scan t;
    memset(&t, 0, sizeof(t));
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, scan_te, &t);
    if (!t.fields)
        return 0;
    const char *te = MHD_HTTP_HEADER_TRANSFER_ENCODING;
    if (strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
        problem_reply(r, 400, te, "HTTP/1.0 has no transfer codings: send Content-Length");
    else if (!t.last_chunked)
        problem_reply(r, 400, te, "the final transfer coding of a request must be chunked "
                      "(RFC 9112, section 6.3)");
    else if (t.other[0]) {
        ((hreq_priv *)r)->client_5xx = 1;
        problem_reply(r, 501, te, "transfer coding '%s' is not supported: send the body "
                      "chunked alone or with Content-Length", t.other);
    }
    else if (t.chunked > 1)
        problem_reply(r, 400, te, "chunked is applied more than once");
    else if (!t.exact)
        problem_reply(r, 400, te, "Transfer-Encoding must be \"chunked\" alone, without "
                      "parameters or blanks after it");
    else if (hreq_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH))
        problem_reply(r, 400, te, "both Transfer-Encoding and Content-Length are given");
    else
        return 0;
    ((hreq_priv *)r)->close_conn = 1;
    return -1;
}

/* Reserves n bytes of limits.max_bodies_mb; 0, or -1 when they would pass it. */
static int body_reserve(tserver_priv *sp, size_t n)
{
    size_t held = __atomic_load_n(&sp->body_held, __ATOMIC_RELAXED);
    do {
        if (n > sp->body_budget || held > sp->body_budget - n)
            return -1;
    } while (!__atomic_compare_exchange_n(&sp->body_held, &held, held + n, 1, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    return 0;
}

static void body_release(tserver_priv *sp, size_t n)
{
    if (n)
        __atomic_sub_fetch(&sp->body_held, n, __ATOMIC_ACQ_REL);
}

/* Frees r's body and gives its budget back; the rest of the upload is discarded. */
static void body_drop(hreq_priv *rp)
{
    free(rp->pub.body);
    rp->pub.body = NULL;
    rp->pub.body_len = 0;
    body_release((tserver_priv *)rp->pub.srv, rp->body_reserved);
    rp->body_reserved = 0;
}

/* 503 for a body that does not fit in limits.max_bodies_mb now. */
static void reply_over_budget(hreq *r)
{
    ((hreq_priv *)r)->close_conn = 1;
    problem_reply(r, 503, "body", "request bodies being received fill limits.max_bodies_mb = "
                  "%zu MB; retry shortly", r->srv->cfg->max_bodies_mb);
    r->rep.retry_after = 1;
}

/* Appends n bytes of upload to r's body.  A declared length was reserved whole by the
 * first call; without one (chunked) the reservation grows by doubling.  Past
 * limits.max_body_mb or the budget the body is dropped and the rest discarded (answered
 * 413 or 503 at the end).  Returns 0, or TESS_ENOMEM. */
static int body_append(hreq_priv *rp, const char *data, size_t n)
{
    hreq *r = &rp->pub;
    tserver_priv *sp = (tserver_priv *)r->srv;
    if (r->body_too_big || rp->body_over_budget)
        return 0;
    size_t need = r->body_len + n;
    if (need > rp->body_cap) {
        r->body_too_big = 1;
        body_drop(rp);
        return 0;
    }
    if (need > rp->body_reserved) {
        size_t want = rp->body_reserved ? 2 * rp->body_reserved : 65536;
        if (want < need)
            want = need;
        if (want > rp->body_cap)
            want = rp->body_cap;
        if (body_reserve(sp, want - rp->body_reserved)) {
            want = need;
            if (body_reserve(sp, want - rp->body_reserved)) {
                rp->body_over_budget = 1;
                body_drop(rp);
                return 0;
            }
        }
        char *nb = realloc(r->body, want + 1);
        if (!nb) {
            body_release(sp, want - rp->body_reserved);
            return TESS_ENOMEM;
        }
        r->body = nb;
        rp->body_reserved = want;
    } else if (!r->body && !(r->body = malloc(rp->body_reserved + 1))) {
        return TESS_ENOMEM;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len = need;
    r->body[need] = '\0';
    return 0;
}

/* Set by on_request when it ends the connection of a client that has gone, so that
 * log_mhd leaves out the library's "internal error" message that follows on the same
 * thread. */
static __thread int closing_gone;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    closing_gone = 0;
    tserver *s = cls;
    hreq_priv *rp = *con_cls;
    if (!rp || !rp->pub.srv) {
        /* First call: rp comes from on_uri_log (raw URI only) or is made here. */
        if (!rp && !(rp = calloc(1, sizeof(*rp))))
            return MHD_NO;
        *con_cls = rp;
        if (!rp->arrival)
            rp->arrival = (long)time(NULL);
        rp->start = tess_mono_s();
        hreq *r = &rp->pub;
        r->srv = s;
        /* In flight until on_completed: the answer sent whole, however it was made
         * (tserver_stop waits for these). */
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
        r->conn = conn;
        r->rep.x_cache = -1;
        snprintf(r->method, sizeof(r->method), "%s", method);
        snprintf(rp->proto, sizeof(rp->proto), "%s", version);
        size_t ulen = strnlen(url, HTTP_MAX_URL + 1);
        r->url = strndup(url, ulen > HTTP_MAX_URL ? HTTP_MAX_URL : ulen);
        if (!r->url)
            return MHD_NO;   /* on_completed frees rp */
        rp->body_cap = s->cfg->max_body_mb * 1024 * 1024;
        tserver_priv *sp0 = (tserver_priv *)s;
        /* The request line and headers are in: no header deadline until the answer. */
        connwatch_set(sp0->watch, watch_entry(conn), 0);
        /* Over limits.max_connections (the daemon itself admits some more, so that
         * they can be told): 503 with Retry-After, and the connection is closed.  The
         * connections past a per-address limit, refused below, are not counted. */
        if (__atomic_load_n(&sp0->nconn, __ATOMIC_ACQUIRE) -
            __atomic_load_n(&sp0->nover, __ATOMIC_ACQUIRE) > s->cfg->max_connections) {
            rp->close_conn = 1;
            problem_reply(r, 503, NULL, "too many connections (limits.max_connections = %d); "
                          "retry shortly", s->cfg->max_connections);
            r->rep.retry_after = 1;
            return send_reply(r);
        }
        /* Accepted past limits.max_connections_per_address: the same answer, so that the
         * client sees an error (a closed connection reads as a missing object to some:
         * zarr-python 2 over fsspec), naming that limit. */
        conn_ctx *cc = conn_context(conn);
        if (cc && cc->over_address) {
            rp->close_conn = 1;
            __atomic_add_fetch(&sp0->per_address_refused, 1, __ATOMIC_RELAXED);
            problem_reply(r, 503, NULL, "too many connections from this client address "
                          "(limits.max_connections_per_address = %d); retry shortly",
                          s->cfg->max_connections_per_address);
            r->rep.retry_after = 1;
            return send_reply(r);
        }
        /* Refusals decided by the head alone are answered before any body is read
         * (this also answers "Expect: 100-continue" with them instead of 100).  Body
         * framing libmicrohttpd cannot read would otherwise be read to the end of the
         * connection, and so never answered. */
        if (check_framing(r, version))
            return send_reply(r);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        size_t target = rp->raw_len ? rp->raw_len : strlen(url);
        if (target > HTTP_MAX_URL) {
            rp->close_conn = cl || hreq_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
            problem_reply(r, 414, NULL, "request target (path and query) longer than %d bytes",
                          HTTP_MAX_URL);
            return send_reply(r);
        }
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (*end == '\0' && n > rp->body_cap) {
                r->body_too_big = 1;
                routes_dispatch(r);
                return send_reply(r);
            }
            /* A declared body takes its share of limits.max_bodies_mb before it is
             * read. */
            if (*end == '\0' && n > 0) {
                if (body_reserve(sp0, (size_t)n)) {
                    reply_over_budget(r);
                    return send_reply(r);
                }
                rp->body_reserved = (size_t)n;
            }
        }
        return MHD_YES;
    }
    hreq *r = &rp->pub;
    if (*upload_data_size) {
        if (body_append(rp, upload_data, *upload_data_size))
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    int st = __atomic_load_n(&r->async_state, __ATOMIC_ACQUIRE);
    if (st == 1)
        return MHD_YES;   /* spurious call while suspended work runs */
    if (st == 0) {
        const char *nul = rp->raw_uri ? strstr(rp->raw_uri, "%00") : NULL;
        if (rp->body_over_budget)
            reply_over_budget(r);
        else if (nul) {
            /* A decoded NUL would cut a name short ("horsehead%00" is not "horsehead"). */
            const char *q = strchr(rp->raw_uri, '?');
            problem_reply(r, 400, q && q < nul ? "query" : "path",
                          "the request target contains an encoded NUL byte (%%00)");
        } else
            routes_dispatch(r);
        /* The work may already be over (then it was resumed: answer it now). */
        st = __atomic_load_n(&r->async_state, __ATOMIC_ACQUIRE);
        if (st == 1)
            return MHD_YES;
    }
    if (st == 2 && (rp->gone || r->rep.cancelled)) {
        /* Its client has gone: no answer, the connection is closed (499 in the log). */
        closing_gone = 1;
        return MHD_NO;
    }
    return send_reply(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    tserver_priv *sp = cls;
    /* Kept alive, the connection's next request line is due within
     * connection_timeout_s (the idle limit) and its headers header_timeout_s after it
     * (on_uri_log moves the deadline then). */
    connwatch_set(sp->watch, watch_entry(conn),
                  tess_mono_s() + sp->pub.cfg->connection_timeout_s + sp->pub.cfg->header_timeout_s);
    hreq_priv *rp = *con_cls;
    if (!rp)
        return;
    hreq *r = &rp->pub;
    if (!r->srv) {
        /* The request line came, the request never reached on_request. */
        free(rp->raw_uri);
        free(rp);
        *con_cls = NULL;
        return;
    }
    if (sp->access) {
        char host[INET6_ADDRSTRLEN] = "-";
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host,
                          sizeof host);
        }
        oplog_access(sp->access, host, rp->arrival, r->method, rp->raw_uri ? rp->raw_uri : r->url,
                     rp->proto,
                     rp->sent_status ? rp->sent_status : 499,
                     rp->sent_status ? rp->sent_bytes : -1,
                     MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_REFERER),
                     MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_USER_AGENT));
    }
    double dt = tess_mono_s() - rp->start;
    pthread_mutex_lock(&sp->stats_lock);
    size_t i = 0;
    while (i < NBUCKETS && dt > latency_buckets[i])
        i++;
    sp->bucket[i]++;
    sp->latency_sum += dt;
    sp->latency_count++;
    pthread_mutex_unlock(&sp->stats_lock);
    __atomic_sub_fetch(&r->srv->inflight, 1, __ATOMIC_ACQ_REL);
    if (r->work_arg_free)
        r->work_arg_free(r->work_arg);
    tile_release(r->rep.body);
    free(r->rep.allow);
    free(r->rep.location);
    free(r->rep.link);
    if (r->rep.file_fd > 0)
        close(r->rep.file_fd);
    free(r->cache_key);
    body_drop(rp);
    free(r->url);
    free(rp->raw_uri);
    free(rp);
    *con_cls = NULL;
}

/* Called by libmicrohttpd with the request target as sent, before on_request: keeps it
 * for the access log and its length for the 414 limit (the URL on_request gets is
 * decoded, without the query); the headers are due header_timeout_s from now. */
static void *on_uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    tserver_priv *sp = cls;
    connwatch_tighten(sp->watch, watch_entry(conn), tess_mono_s() + sp->pub.cfg->header_timeout_s);
    hreq_priv *rp = calloc(1, sizeof(*rp));
    if (rp) {
        rp->arrival = (long)time(NULL);
        rp->raw_uri = strndup(uri, HTTP_MAX_URL);
        rp->raw_len = strlen(uri);
        rp->pub.target = rp->raw_uri;
    }
    return rp;
}

/* The length of the socket address `sa` as libmicrohttpd keeps it (it gives no length). */
static socklen_t sockaddr_len(const struct sockaddr *sa)
{
    return sa && sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                                           : (socklen_t)sizeof(struct sockaddr_in);
}

/* Counts open connections, in all and by client address, and registers each socket with
 * the header-deadline watcher: its first request line and headers are due within
 * header_timeout_s of the accept (OVER_ADDRESS_HEAD_S past the per-address limit, whose
 * request on_request answers 503).  libmicrohttpd notifies the close before it closes
 * the socket. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode toe)
{
    tserver_priv *sp = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        __atomic_add_fetch(&sp->nconn, 1, __ATOMIC_ACQ_REL);
        conn_ctx *cc = calloc(1, sizeof *cc);
        *socket_ctx = cc;
        if (!cc)
            return;   /* neither counted by address nor watched */
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ai ? ai->client_addr : NULL;
        unsigned n = peercount_add(sp->peers, sa, sockaddr_len(sa), &cc->peer);
        cc->over_address = n > (unsigned)sp->pub.cfg->max_connections_per_address;
        if (cc->over_address)
            __atomic_add_fetch(&sp->nover, 1, __ATOMIC_ACQ_REL);
        double head_s = sp->pub.cfg->header_timeout_s;
        if (cc->over_address && head_s > OVER_ADDRESS_HEAD_S)
            head_s = OVER_ADDRESS_HEAD_S;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        cc->watch = ci ? connwatch_add(sp->watch, ci->connect_fd, tess_mono_s() + head_s)
                       : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ctx *cc = *socket_ctx;
        if (cc) {
            connwatch_remove(sp->watch, cc->watch);
            peercount_remove(sp->peers, &cc->peer);
            if (cc->over_address)
                __atomic_sub_fetch(&sp->nover, 1, __ATOMIC_ACQ_REL);
            free(cc);
        }
        *socket_ctx = NULL;
        __atomic_sub_fetch(&sp->nconn, 1, __ATOMIC_ACQ_REL);
    }
}

/* Closes a connection at its accept, unanswered, while its address already holds
 * per_address_cap connections: the answers of limits.max_connections_per_address are
 * 503s (on_request), but those wait for requests, and a flood of connections that send
 * none would hold the slots meanwhile. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    tserver_priv *sp = cls;
    return peercount_get(sp->peers, addr, addrlen) >= sp->per_address_cap ? MHD_NO : MHD_YES;
}

int tserver_reopen_logs(tserver *s)
{
    return s ? oplog_reopen(((tserver_priv *)s)->access) : 0;
}

/* libmicrohttpd's messages, one write each.  A message repeated within a second of its
 * last line (one for each connection of a flood past the connection limits) is counted
 * instead, and the count printed before the next line. */
static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const char *last_fmt;
    static double last_at;
    static unsigned long repeats;
    (void)cls;
    char line[640];
    int n = snprintf(line, sizeof line, "tesserad: microhttpd: ");
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (closing_gone && strstr(line, "Application reported internal error")) {
        closing_gone = 0;
        return;
    }
    double now = tess_mono_s();
    pthread_mutex_lock(&lock);
    if (fmt == last_fmt && now - last_at < 1.0) {
        repeats++;
    } else {
        if (repeats)
            fprintf(stderr, "tesserad: microhttpd: (the message before repeated %lu more times)\n",
                    repeats);
        fputs(line, stderr);
        repeats = 0;
        last_fmt = fmt;
        last_at = now;
    }
    pthread_mutex_unlock(&lock);
}

/* Frees what tserver_start made, whether it got as far as starting the daemon or not
 * (the daemon itself is stopped by then): the connection watcher, the app, the access log,
 * the locks and the parked polls' arrays. */
static void server_free(tserver_priv *sp)
{
    tserver *s = &sp->pub;
    connwatch_free(sp->watch);
    peercount_free(sp->peers);
    tess_app_close(s->app);
    oplog_close(sp->access);
    pthread_mutex_destroy(&sp->stats_lock);
    pthread_mutex_destroy(&sp->flight_lock);
    pthread_mutex_destroy(&sp->susp_lock);
    pthread_cond_destroy(&sp->susp_cond);
    pthread_mutex_destroy(&sp->park_lock);
    pthread_cond_destroy(&sp->park_cond);
    free(sp->pfd);
    free(sp->pfd_req);
    free(sp);
}

int tserver_start(const tess_config *cfg, tserver **out, char *err, size_t errlen)
{
    tserver_priv *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return TESS_ENOMEM;
    tserver *s = &sp->pub;
    s->cfg = cfg;
    pthread_mutex_init(&sp->stats_lock, NULL);
    pthread_mutex_init(&sp->flight_lock, NULL);
    pthread_mutex_init(&sp->susp_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sp->susp_cond, &ca);
    pthread_mutex_init(&sp->park_lock, NULL);
    pthread_cond_init(&sp->park_cond, &ca);
    pthread_condattr_destroy(&ca);
    /* What the server serves is composed where the worker's is (daemon/app.c). */
    int rc = tess_app_open(cfg, &s->app, err, errlen);
    if (rc)
        goto fail;
    sp->watch = connwatch_new();
    sp->body_budget = cfg->max_bodies_mb * 1024 * 1024;
    /* Every address in the table holds one of libmicrohttpd's connections. */
    unsigned conn_limit = (unsigned)(cfg->max_connections + 16 + cfg->max_connections / 4);
    unsigned per = (unsigned)cfg->max_connections_per_address;
    sp->per_address_cap = per + 16 + per / 4;
    sp->peers = peercount_new(conn_limit);
    if (!sp->watch || !sp->peers) {
        snprintf(err, errlen, "cannot create the connection watcher");
        rc = TESS_ENOMEM;
        goto fail;
    }
    if (cfg->access_log && (rc = oplog_open(cfg->access_log, &sp->access, err, errlen)))
        goto fail;

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    /* epoll (what AUTO picks): MHD_USE_POLL would close connections whose partial request
     * and FIN arrive together at once, but it also ends half-closed clients' connections
     * before their answer; see docs/operations.md, "Clients that close mid-request". */
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->listen_addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->listen_addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "listen address '%s' is not an IPv4 or IPv6 literal",
                 cfg->listen_addr);
        rc = TESS_EINVAL;
        goto fail;
    }
    /* limits.max_connections_per_address is counted here (on_connection, on_accept) and
     * answered with 503 (on_request), not by libmicrohttpd's per-IP limit, which closes
     * the connection unanswered. */
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, on_accept, sp, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, sp,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)2,
        /* Headroom over max_connections: those get a 503 from on_request rather than
         * waiting unanswered in the listen backlog. */
        MHD_OPTION_CONNECTION_LIMIT, conn_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->connection_timeout_s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri_log, sp,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, sp,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
        MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use or not permitted)",
                 cfg->listen_addr, cfg->port);
        rc = TESS_EIO;
        goto fail;
    }
    if (pthread_create(&sp->susp_thread, NULL, susp_main, sp) != 0) {
        MHD_stop_daemon(s->daemon);
        snprintf(err, errlen, "cannot start the suspension watcher thread");
        rc = TESS_ENOMEM;
        goto fail;
    }
    sp->susp_running = 1;
    if (pthread_create(&sp->park_thread, NULL, park_main, sp) == 0)
        sp->park_running = 1;     /* without it, hreq_park refuses: waits answer at once */
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return 0;
fail:
    server_free(sp);
    return rc;
}

int tserver_port(const tserver *s)
{
    return s->port;
}

void tserver_stop(tserver *s, int grace_s)
{
    if (!s)
        return;
    tserver_priv *sp = (tserver_priv *)s;
    /* Stop listening at once: shut the listening socket down (new connections are
     * refused) but leave it to libmicrohttpd, which closes it in MHD_stop_daemon.
     * MHD_quiesce_daemon is not used: in 0.9.75 it races with the epoll worker threads
     * of a pool (both take the socket out of a worker's epoll set, and the loser's
     * failure aborts the process: "Failed to remove listen FD from epoll set").  The
     * cost: until MHD_stop_daemon the workers' epoll keeps reporting the shut socket
     * and its accept() fails with EINVAL, which libmicrohttpd ignores, so they spin
     * for the length of the drain. */
    const union MHD_DaemonInfo *li = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    MHD_socket lsock = li ? li->listen_fd : MHD_INVALID_SOCKET;
    if (lsock != MHD_INVALID_SOCKET)
        shutdown(lsock, SHUT_RDWR);
    /* Parked long polls first, while what they look at is still open: each gets its
     * last look and its answer.  Then jobs: blocks in flight finish and are recorded; a
     * running job resumes at the next start. */
    park_stop(sp);
    /* Then every queued and running computation finishes: each resumes its connection. */
    tess_app_drain(s->app);
    /* Nothing is suspended any more: the suspension watcher's work is done. */
    pthread_mutex_lock(&sp->susp_lock);
    sp->susp_stop = 1;
    pthread_cond_signal(&sp->susp_cond);
    pthread_mutex_unlock(&sp->susp_lock);
    if (sp->susp_running)
        pthread_join(sp->susp_thread, NULL);
    /* Give the answers time to go out. */
    for (int i = 0; i < grace_s * 100 && __atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE) > 0; i++)
        usleep(10000);
    MHD_stop_daemon(s->daemon);
    server_free(sp);
}
