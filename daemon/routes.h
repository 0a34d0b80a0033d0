/* The route table of tesserad: the handler of each method and path, and the 404 and 405 answers. */
#ifndef TESSERA_DAEMON_ROUTES_H
#define TESSERA_DAEMON_ROUTES_H

#include <stddef.h>
#include "daemon/http.h"

/* Methods a route accepts, as bits.  ROUTE_GET accepts HEAD too (libmicrohttpd answers it
 * as GET without the body).  OPTIONS is answered on every path (a CORS preflight: 204)
 * and is no route's. */
#define ROUTE_GET 1u
#define ROUTE_POST 2u
#define ROUTE_DELETE 4u

struct route;

/* What a path and method reached.  Captures point into the path given to routes_match
 * (valid while it is). */
typedef struct route_match {
    const struct route *route; /* status 0: the route that serves it; 405: the first route
                                  of the path; 404: the route whose prefix claims the path
                                  (its `prepare` may tell why it is not found), or NULL */
    int status;               /* 0 (route found), 204 (OPTIONS), 404 or 405 */
    unsigned allow;           /* 405: the ROUTE_* methods the path accepts */
    const char *rest;         /* patterns ending in "*": the path after the prefix (may be
                                 ""), else NULL */
    const char *segment_at;   /* patterns with a {segment}: where it stands in the path,
                                 segment_len bytes (not terminated), else NULL */
    size_t segment_len;
    char segment[72];         /* the segment as a string ("" when 72 bytes or longer) */
    const dataset *ds;        /* {dataset} routes: set by prepare_dataset */
} route_match;

/* Serves a request that reached its route (m->status 0): parses, answers or goes async. */
typedef void (*route_handler)(hreq *r, const route_match *m);

/* Runs before the method is checked, when the path is the route's or is claimed by it:
 * resolves the captured segment (into m->ds ...) and checks that the endpoint family is
 * served.  Returns 0, or -1 after setting the problem reply (404). */
typedef int (*route_prepare)(hreq *r, route_match *m);

/* One route.  `pattern` is the path as literal bytes with at most one "{name}" segment
 * (any bytes but '/', possibly none) and an optional final "*" (the rest of the path) or
 * "/?" (the path with or without a final slash).
 * Routes that share a pattern are one resource with handlers by method; a pattern with a
 * {segment} claims every path under its prefix (the part before the '{'), so that an
 * unknown dataset under /api/v1/datasets/ is told as such. */
typedef struct route {
    const char *name;         /* stable name, e.g. "dataset.slice" (tests) */
    unsigned methods;         /* ROUTE_* bits */
    const char *pattern;
    route_prepare prepare;    /* NULL: nothing to resolve */
    route_handler handler;
    const char *what;         /* the resource as a 405's detail names it; NULL: the path */
} route;

/* The table, in matching order (the first pattern that matches the path wins). */
extern const route routes[];
extern const size_t routes_count;

/* Matches `method` ("GET", "HEAD", "POST", ...) and the decoded `path` against the table
 * into *m.  Pure: no dataset is looked up (that is the routes' `prepare`).  Cannot fail. */
void routes_match(const char *method, const char *path, route_match *m);

/* The Allow header of a 405 for the ROUTE_* bits `methods`: every method accepted, HEAD
 * after GET, and OPTIONS (e.g. "GET, HEAD, POST, OPTIONS").  Only whole names that fit
 * in `len` bytes are written. */
void routes_allow_text(unsigned methods, char *out, size_t len);

/* Answers request r: OPTIONS preflight (204), a body over limits.max_body_mb (413), then
 * the route's prepare, 404 (no route), 405 (with Allow) or the route's handler. */
void routes_dispatch(hreq *r);

#endif
