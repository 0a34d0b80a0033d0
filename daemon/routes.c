/* The route table of tesserad: the handler of each method and path, and the 404 and 405 answers. */
#include "daemon/routes.h"
#include "daemon/api/handlers.h"
#include "daemon/problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In matching order; the routes of one pattern stand together.  What each serves is in
 * handlers.h and the README's API table. */
const route routes[] = {
    /* {name, methods, pattern, prepare, handler, what a 405 calls it} */
    {"healthz", ROUTE_GET, "/healthz", NULL, tserver_handle_healthz, NULL},
    {"metrics", ROUTE_GET, "/metrics", NULL, tserver_handle_metrics, NULL},
    {"hips", ROUTE_GET, "/hips/*", NULL, handle_hips, NULL},
    {"iiif", ROUTE_GET, "/iiif/3/*", NULL, handle_iiif, NULL},
    {"jobs.list", ROUTE_GET, "/api/v1/jobs/?", prepare_jobs, handle_jobs_list, "/api/v1/jobs"},
    {"jobs.submit", ROUTE_POST, "/api/v1/jobs/?", prepare_jobs, handle_jobs_submit,
     "/api/v1/jobs"},
    {"job.get", ROUTE_GET, "/api/v1/jobs/{id}", prepare_jobs, handle_job, "a job"},
    {"job.cancel", ROUTE_DELETE, "/api/v1/jobs/{id}", prepare_jobs, handle_job_cancel, "a job"},
    {"job.result", ROUTE_GET, "/api/v1/jobs/{id}/result", prepare_jobs, handle_job_result,
     "a job result"},
    {"cutout.get", ROUTE_GET, "/api/v1/cutout", NULL, handle_cutout_get, NULL},
    {"cutout.post", ROUTE_POST, "/api/v1/cutout", NULL, handle_cutout_post, NULL},
    {"hips2fits", ROUTE_GET, "/hips-image-services/hips2fits", NULL, handle_cutout_get, NULL},
    {"datasets", ROUTE_GET, "/api/v1/datasets/?", NULL, handle_datasets_list, NULL},
    {"dataset", ROUTE_GET, "/api/v1/datasets/{dataset}/?", prepare_dataset, handle_dataset_info,
     NULL},
    {"dataset.slice", ROUTE_GET, "/api/v1/datasets/{dataset}/slice/*", prepare_dataset,
     handle_slice, NULL},
    {"dataset.series", ROUTE_GET, "/api/v1/datasets/{dataset}/series", prepare_dataset,
     handle_series, NULL},
    {"dataset.reduce", ROUTE_GET, "/api/v1/datasets/{dataset}/reduce", prepare_dataset,
     handle_reduce, NULL},
    {"zarr", ROUTE_GET, "/zarr/{dataset}/*", prepare_dataset, handle_zarr, NULL},
    {"dvid.raw", ROUTE_GET, "/api/node/*", NULL, handle_dvid, NULL},
    {"vo.datalink", ROUTE_GET | ROUTE_POST, "/vo/datalink", NULL, handle_vo_datalink, NULL},
    {"vo.soda", ROUTE_GET | ROUTE_POST, "/vo/soda/sync", NULL, handle_vo_soda, NULL},
    {"vo.sia", ROUTE_GET | ROUTE_POST, "/vo/sia/query", NULL, handle_vo_sia, NULL},
    {"vo.sia1", ROUTE_GET | ROUTE_POST, "/vo/sia1/query", NULL, handle_vo_sia1, NULL},
    {"collections", ROUTE_GET, "/api/v1/collections", NULL, handle_collections_list, NULL},
    {"collection", ROUTE_GET, "/api/v1/collections/{collection}", NULL, handle_collection_info,
     NULL},
    {"collection.fits", ROUTE_GET, "/api/v1/collections/{collection}/fits/*", NULL,
     handle_collection_fits, NULL},
    {"vo.capabilities", ROUTE_GET, "/vo/capabilities", NULL, handle_vo_capabilities, NULL},
    {"vo.availability", ROUTE_GET, "/vo/availability", NULL, handle_vo_availability, NULL},
    {"uws.jobs", ROUTE_GET, "/vo/uws/jobs/?", prepare_uws, handle_uws_jobs, "the UWS job list"},
    {"uws.create", ROUTE_POST, "/vo/uws/jobs/?", prepare_uws, handle_uws_create,
     "the UWS job list"},
    {"uws.job", ROUTE_GET, "/vo/uws/jobs/{id}", prepare_uws, handle_uws_job, "a UWS job"},
    {"uws.job.post", ROUTE_POST, "/vo/uws/jobs/{id}", prepare_uws, handle_uws_job_post,
     "a UWS job"},
    {"uws.job.delete", ROUTE_DELETE, "/vo/uws/jobs/{id}", prepare_uws, handle_uws_job_delete,
     "a UWS job"},
    {"uws.job.part", ROUTE_GET, "/vo/uws/jobs/{id}/*", prepare_uws, handle_uws_job_part,
     "a part of a UWS job"},
    {"uws.job.part.post", ROUTE_POST, "/vo/uws/jobs/{id}/*", prepare_uws,
     handle_uws_job_part_post, "a part of a UWS job"},
    {"dataset.values", ROUTE_GET, "/api/v1/datasets/{dataset}/values",
     prepare_dataset_or_collection,
     handle_values, NULL},
    {"dataset.histogram", ROUTE_GET, "/api/v1/datasets/{dataset}/histogram", prepare_dataset,
     handle_histogram, NULL},
    {"dataset.footprint", ROUTE_GET, "/api/v1/datasets/{dataset}/footprint",
     prepare_dataset_or_collection,
     handle_footprint, NULL},
    {"dataset.transform", ROUTE_GET, "/api/v1/datasets/{dataset}/transform", prepare_dataset,
     handle_transform, NULL},
    {"dataset.fits", ROUTE_GET, "/api/v1/datasets/{dataset}/fits", prepare_dataset,
     handle_fits, NULL},
    {"viewer", ROUTE_GET, "/", NULL, handle_viewer, NULL},
    {"viewer", ROUTE_GET, "/viewer/*", NULL, handle_viewer, NULL},
    {"viewer.vendor", ROUTE_GET, "/vendor/*", NULL, handle_viewer, NULL},
};
const size_t routes_count = sizeof(routes) / sizeof(routes[0]);

/* The ROUTE_* bit of a method name, 0 for methods no route takes. */
static unsigned method_bit(const char *method)
{
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        return ROUTE_GET;
    if (strcmp(method, "POST") == 0)
        return ROUTE_POST;
    if (strcmp(method, "DELETE") == 0)
        return ROUTE_DELETE;
    return 0;
}

/* Sets m's segment from the path at `at`: the bytes up to the next '/' or the end.
 * Returns where the segment ends. */
static const char *take_segment(const char *at, route_match *m)
{
    size_t n = strcspn(at, "/");
    m->segment_at = at;
    m->segment_len = n;
    if (n < sizeof(m->segment)) {
        memcpy(m->segment, at, n);
        m->segment[n] = '\0';
    } else {
        m->segment[0] = '\0';
    }
    return at + n;
}

/* 1 when `path` matches `pat` (see route in routes.h), with m's captures set; else 0
 * (m's captures may be partly set). */
static int pattern_match(const char *pat, const char *path, route_match *m)
{
    const char *p = path;
    for (const char *q = pat; *q;) {
        if (q[0] == '/' && q[1] == '?' && q[2] == '\0')
            return *p == '\0' || (p[0] == '/' && p[1] == '\0');
        if (q[0] == '*' && q[1] == '\0') {
            m->rest = p;
            return 1;
        }
        if (*q == '{') {
            p = take_segment(p, m);
            q = strchr(q, '}') + 1;
            continue;
        }
        if (*q++ != *p++)
            return 0;
    }
    return *p == '\0';
}

/* 1 when the route's pattern has a {segment} and `path` starts with what comes before
 * it (the route claims the path), with m's segment set from the path; else 0. */
static int pattern_claims(const char *pat, const char *path, route_match *m)
{
    const char *brace = strchr(pat, '{');
    if (!brace || strncmp(path, pat, (size_t)(brace - pat)) != 0)
        return 0;
    take_segment(path + (brace - pat), m);
    return 1;
}

static void clear_captures(route_match *m)
{
    m->rest = NULL;
    m->segment_at = NULL;
    m->segment_len = 0;
    m->segment[0] = '\0';
}

void routes_match(const char *method, const char *path, route_match *m)
{
    memset(m, 0, sizeof(*m));
    if (strcmp(method, "OPTIONS") == 0) {
        m->status = 204;
        return;
    }
    unsigned bit = method_bit(method);
    size_t i = 0;
    for (; i < routes_count; i++) {
        clear_captures(m);
        if (pattern_match(routes[i].pattern, path, m))
            break;
    }
    if (i == routes_count) {
        clear_captures(m);
        m->status = 404;
        for (i = 0; i < routes_count; i++)
            if (pattern_claims(routes[i].pattern, path, m)) {
                m->route = &routes[i];
                break;
            }
        return;
    }
    /* The routes of this pattern follow each other: the one taking the method serves. */
    m->route = &routes[i];
    m->status = 405;
    for (size_t k = i; k < routes_count && strcmp(routes[k].pattern, routes[i].pattern) == 0;
         k++) {
        m->allow |= routes[k].methods;
        if (m->status == 405 && (routes[k].methods & bit)) {
            m->route = &routes[k];
            m->status = 0;
        }
    }
    if (m->status == 0)
        m->allow = 0;
}

/* Writes the names of the methods in `methods`, comma-separated, in the order GET, HEAD,
 * POST, DELETE, OPTIONS; HEAD (after GET) and OPTIONS only when `full`.  Stops before a
 * name that does not fit in `len`. */
static void method_list(unsigned methods, int full, char *out, size_t len)
{
    static const struct {
        unsigned bit;             /* 0: every path */
        int full_only;
        const char *name;
    } names[] = {{ROUTE_GET, 0, "GET"}, {ROUTE_GET, 1, "HEAD"}, {ROUTE_POST, 0, "POST"},
                 {ROUTE_DELETE, 0, "DELETE"}, {0, 1, "OPTIONS"}};
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((names[i].bit && !(methods & names[i].bit)) || (names[i].full_only && !full))
            continue;
        int w = snprintf(out + n, len - n, "%s%s", n ? ", " : "", names[i].name);
        if (w < 0 || (size_t)w >= len - n) {
            out[n] = '\0';   /* whole names only */
            break;
        }
        n += (size_t)w;
    }
}

void routes_allow_text(unsigned methods, char *out, size_t len)
{
    method_list(methods, 1, out, len);
}

void routes_dispatch(hreq *r)
{
    route_match m;
    routes_match(r->method, r->url, &m);
    if (m.status == 204) {
        /* CORS preflight: any path may be asked; the headers are added when sending. */
        r->rep.status = 204;
        return;
    }
    if (r->body_too_big) {
        problem_reply(r, 413, "body", "request body larger than limits.max_body_mb = %zu MB",
                      r->srv->cfg->max_body_mb);
        return;
    }
    if (m.route && m.route->prepare && m.route->prepare(r, &m))
        return;
    if (m.status == 404) {
        problem_reply(r, 404, NULL, "no such resource: %.200s", r->url);
        return;
    }
    if (m.status == 405) {
        char use[64], allow[64];
        method_list(m.allow, 0, use, sizeof(use));
        routes_allow_text(m.allow, allow, sizeof(allow));
        problem_reply(r, 405, NULL, "%s is not allowed on %.200s; use %s", r->method,
                      m.route->what ? m.route->what : r->url, use);
        r->rep.allow = strdup(allow);
        return;
    }
    m.route->handler(r, &m);
}
