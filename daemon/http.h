/* HTTP front end (libmicrohttpd): server lifecycle, replies, async work on the pool (routes: routes.h). */
#ifndef TESSERA_DAEMON_HTTP_H
#define TESSERA_DAEMON_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include "daemon/app.h"
#include "daemon/config.h"
#include "engine/base/buf.h"
#include "engine/base/pool.h"

typedef struct tserver tserver;
struct route_match;

/* What a handler answers.  `body` is a refcounted tile (cached or fresh); `status` 0
 * means "not decided yet".  `cache_key` set by a handler makes a 200 reply cacheable. */
typedef struct reply {
    int status;
    tile *body;
    int x_cache;              /* -1: no X-Cache header, 0: MISS, 1: HIT */
    const char *cache_control;/* static string or NULL */
    int retry_after;          /* seconds, 0 = none */
    char *allow;              /* Allow header for 405, malloc'd or NULL */
    char *location;           /* Location header for redirects, malloc'd or NULL */
    char *link;               /* Link header (RFC 8288), malloc'd or NULL */
    char x_shape[48];         /* X-Shape header of raw array bodies ("" none): set by the
                                 handler on every answer, cache hits included */
    const char *www_authenticate; /* WWW-Authenticate header (static string) or NULL */
    int file_fd;              /* > 0: send this open file (taken; closed after sending) */
    unsigned long long file_len;
    char file_type[64];       /* Content-Type of the file */
    char file_etag[24];       /* its strong ETag, quoted ("" none): If-None-Match gets 304 */
    char file_name[72];       /* Content-Disposition attachment file name of a 200 reply,
                                 a file or a body ("" none) */
    const char *content_encoding; /* Content-Encoding of the body (static string, "gzip"),
                                 or NULL */
    const char *vary;         /* Vary header (static string, "Accept-Encoding"), or NULL */
    int cancelled;            /* HREQ_DROPPED or HREQ_STOPPED: the work was given up because
                                 its client had gone (nothing is sent), else 0 */
} reply;

/* What became of the work of a request given up (reply.cancelled). */
enum {
    HREQ_DROPPED = 1,         /* taken out of the queue before it started */
    HREQ_STOPPED = 2          /* stopped part way (hreq_reply_cancelled) */
};

/* The state of one request, alive from its first byte to the end of its response. */
typedef struct hreq {
    tserver *srv;
    struct MHD_Connection *conn;
    char method[8];
    char *url;                /* decoded path, malloc'd */
    const char *target;       /* the request target as sent (path and query, not decoded,
                                 cut at 4096 bytes), or NULL; owned by the server */
    char *body;               /* uploaded body (NUL-terminated), malloc'd, or NULL */
    size_t body_len;
    int body_too_big;         /* the upload passed limits.max_body_mb */
    reply rep;
    char *cache_key;          /* malloc'd; set by the handler before going async */
    /* async work */
    void (*work)(struct hreq *r);   /* runs on a pool thread, fills rep */
    void *work_arg;
    void (*work_arg_free)(void *);
    int async_state;          /* 0 none, 1 queued/running, 2 done */
    int bulk;                 /* set by the handler: large work, queued at POOL_BULK (after
                               * the small interactive requests, on threads - 1 workers
                               * at most), see hreq_mark_bulk */
    struct flight *flight;    /* the render this request leads (single flight), or NULL */
    struct hreq *next_waiter; /* next request waiting on the same render */
    /* Set once the client has closed its connection (and, for a render that others
     * wait on, every one of them has): the work may stop early, answering with
     * hreq_reply_cancelled.  One flag in the two forms the engine polls: `cancel` for
     * rp_options.cancel and the pool, `cancel_v` for the plane loops of zreduce and
     * stack. */
    atomic_int cancel;
    volatile int cancel_v;
} hreq;

/* Shared, read-only after start (the app's members are thread-safe themselves). */
struct tserver {
    const tess_config *cfg;
    tess_app *app;            /* what is served: catalog, caches, pool, plane store, jobs
                                 (daemon/app.h); the server's own, composed by
                                 tess_app_open as the worker's is */
    struct MHD_Daemon *daemon;
    int port;
    /* counter for /metrics, updated atomically */
    unsigned long long renders;
    int inflight;             /* requests not yet answered whole (on_request to on_completed) */
};

/* Starts a server on cfg->listen_addr:cfg->port (port 0 = any free port, read back with
 * tserver_port) serving the datasets of `cfg` (which must outlive the server): the app
 * of `cfg` (tess_app_open, as tesserad --worker builds it) and HTTP in front of it.
 * Returns 0, or TESS_EIO (cannot bind: err says why), TESS_EINVAL, TESS_ENOMEM. */
int tserver_start(const tess_config *cfg, tserver **out, char *err, size_t errlen);

/* The bound TCP port. */
int tserver_port(const tserver *s);

/* Stops accepting (the listening socket is closed at once: new connections are
 * refused), lets in-flight requests finish, stops the workers and frees everything.
 * In flight means received and not yet answered whole: computations queued or running
 * all complete (the pool drains), and answers being sent, cached ones included, get up
 * to `grace_s` seconds more.  NULL is ignored. */
void tserver_stop(tserver *s, int grace_s);

/* Reopens the access log file (SIGHUP, after logrotate moved it).  Returns 0 or TESS_EIO
 * (the old file stays in use).  NULL is ignored. */
int tserver_reopen_logs(tserver *s);

/* For handlers: a query parameter or NULL. */
const char *hreq_arg(hreq *r, const char *key);

/* For handlers: calls fn(cls, key, value) for every query parameter in the order given
 * (value NULL for a key without '='), repeated keys included.  Cannot fail. */
void hreq_args_each(hreq *r, void (*fn)(void *cls, const char *key, const char *value),
                    void *cls);

/* hreq_arg in the shape of a param_lookup (daemon/api/params.h): `r` is the hreq. */
const char *hreq_arg_lookup(void *r, const char *key);

/* For handlers: a request header or NULL. */
const char *hreq_header(hreq *r, const char *key);

/* For handlers: fails with 400 on the first query parameter not in the NULL-terminated
 * list `known` (returns 0 when all are known, -1 after filling the problem reply). */
int hreq_only_args(hreq *r, const char *const *known);

/* For handlers: answer with `body` (taken: the reply owns that reference). */
void hreq_reply_tile(hreq *r, int status, tile *body);

/* For handlers: answer 200 with the text of `b` (detached from it) as `content_type`,
 * Cache-Control no-cache; 500 when `b` ran out of memory. */
void hreq_reply_text(hreq *r, buf *b, const char *content_type);

/* For handlers: answer with a JSON document (`json` is a malloc'd string, taken). */
void hreq_reply_json(hreq *r, int status, char *json);

/* For handlers: answer from the cache by r->cache_key if present (returns 1), else 0. */
int hreq_try_cache(hreq *r);

/* For handlers, once r->cache_key is set (NULL when making it ran out of memory: 500):
 * the answer from the cache, else `work` run as hreq_run_async runs it.  `arg` is freed
 * with arg_free when it is not handed on. */
void hreq_serve(hreq *r, void (*work)(hreq *r), void *arg, void (*arg_free)(void *));

/* GET /healthz ({"status":"ok"}) and GET /metrics (Prometheus text), served by the HTTP
 * layer itself; route handlers of daemon/routes.c. */
void tserver_handle_healthz(hreq *r, const struct route_match *m);
void tserver_handle_metrics(hreq *r, const struct route_match *m);

/* For work functions: whether r->cancel is set (the client has gone).  One atomic load;
 * cannot fail. */
int hreq_cancelled(hreq *r);

/* For work functions: the work stopped early because r->cancel was set (the engine
 * returned TESS_ECANCELED): nothing is answered or cached, the connection is closed
 * and the access log says 499. */
void hreq_reply_cancelled(hreq *r);

/* For handlers: run `work(r)` on the pool; the connection is suspended until it ends.
 * `arg` (freed with arg_free after the reply) carries the parsed request.  Single
 * flight: when r->cache_key is set and a request with the same key is already being
 * computed, this one waits for that render and gets the same answer (success or error)
 * instead of computing it again.  On a full queue answers 503 with Retry-After.
 * While suspended, the connection's socket is watched: once its client has closed (and
 * every client waiting on the same render has), r->cancel is set, the work is dropped if
 * it has not started, and no answer is sent (see docs/operations.md, "Clients that
 * leave").  Always returns 0. */
int hreq_run_async(hreq *r, void (*work)(hreq *r), void *arg, void (*arg_free)(void *));

/* Work of more than HREQ_BULK_VALUES values (output pixels, or values read for a
 * reduction) runs at POOL_BULK: a few large requests then cannot hold every worker while
 * tiles wait.  hreq_mark_bulk marks r so (before hreq_run_async) when `values` is over
 * the bound; hreq_priority is the pool priority of r's work (POOL_BULK or
 * POOL_INTERACTIVE), for its task and for the engine loops it runs (pool_for ...). */
#define HREQ_BULK_VALUES (1LL << 22)
void hreq_mark_bulk(hreq *r, long long values);
pool_priority hreq_priority(const hreq *r);

/* Parking: a long poll (UWS WAIT) that holds no worker.  hreq_park suspends r's
 * connection and hands it to the server's parking thread, which calls look(r, last)
 * every HREQ_PARK_LOOK_MS, outside any lock of the server: look returns 1 once it has
 * answered r (r->rep filled), 0 to keep waiting; with `last` 1 (the deadline, `seconds`
 * from now, has passed, or the server is stopping) it must answer.  A request whose
 * client has gone is resumed unanswered.  `arg` (r->work_arg) is freed with arg_free
 * after the reply.  At most HREQ_PARK_MAX requests are parked at once.  Returns 0, or
 * TESS_EAGAIN (the parking is full or stopping: nothing was done, the handler answers
 * at once). */
#define HREQ_PARK_MAX 256
#define HREQ_PARK_LOOK_MS 200
typedef int (*hreq_park_fn)(hreq *r, int last);
int hreq_park(hreq *r, hreq_park_fn look, void *arg, void (*arg_free)(void *), double seconds);

#endif
