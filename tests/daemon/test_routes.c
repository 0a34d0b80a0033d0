/* Unit tests of the route table (daemon/routes): which route a method and path reach, the
 * Allow sets of 405s, 404s; then the same answers from a server, in the order it gives them. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/routes.h"
#include "tests/testutil.h"

/* ---- the table ------------------------------------------------------------------------ */

START_TEST(test_table_is_well_formed)
{
    for (size_t i = 0; i < routes_count; i++) {
        const route *t = &routes[i];
        ck_assert_msg(t->name && *t->name && t->handler && t->methods, "route %zu", i);
        ck_assert_msg(t->pattern[0] == '/', "%s: pattern %s", t->name, t->pattern);
        /* At most one {segment}, closed, and '*' only at the end. */
        const char *open = strchr(t->pattern, '{');
        if (open) {
            const char *close = strchr(open, '}');
            ck_assert_msg(close && !strchr(close, '{') && open[-1] == '/', "%s", t->pattern);
            ck_assert_msg(close[1] == '\0' || close[1] == '/', "%s", t->pattern);
        }
        const char *star = strchr(t->pattern, '*');
        ck_assert_msg(!star || star[1] == '\0', "%s", t->pattern);
        /* The routes of one pattern stand together and take different methods. */
        for (size_t k = i + 1; k < routes_count; k++) {
            if (strcmp(routes[k].pattern, t->pattern) != 0)
                continue;
            ck_assert_msg(strcmp(routes[k - 1].pattern, t->pattern) == 0,
                          "%s stands apart from its pattern's other routes", routes[k].pattern);
            ck_assert_msg((routes[k].methods & t->methods) == 0, "%s: one method twice",
                          t->pattern);
        }
    }
}
END_TEST

static const struct reach {
    const char *method, *path;
    const char *route;        /* its name */
    const char *rest;         /* expected m.rest, NULL for none */
    const char *segment;      /* expected m.segment, NULL for none */
} reaches[] = {
    {"GET", "/healthz", "healthz", NULL, NULL},
    {"HEAD", "/healthz", "healthz", NULL, NULL},
    {"GET", "/metrics", "metrics", NULL, NULL},
    {"GET", "/hips/horsehead/", "hips", "horsehead/", NULL},
    {"GET", "/hips/horsehead/Norder3/Dir0/Npix42.png", "hips",
     "horsehead/Norder3/Dir0/Npix42.png", NULL},
    {"GET", "/hips/", "hips", "", NULL},
    {"GET", "/iiif/3/horsehead/info.json", "iiif", "horsehead/info.json", NULL},
    {"HEAD", "/iiif/3/l1448_13co~20/full/max/0/default.png", "iiif",
     "l1448_13co~20/full/max/0/default.png", NULL},
    {"GET", "/api/v1/jobs", "jobs.list", NULL, NULL},
    {"GET", "/api/v1/jobs/", "jobs.list", NULL, NULL},
    {"POST", "/api/v1/jobs", "jobs.submit", NULL, NULL},
    {"POST", "/api/v1/jobs/", "jobs.submit", NULL, NULL},
    {"GET", "/api/v1/jobs/0123456789abcdef", "job.get", NULL, "0123456789abcdef"},
    {"DELETE", "/api/v1/jobs/0123456789abcdef", "job.cancel", NULL, "0123456789abcdef"},
    {"GET", "/api/v1/jobs/0123456789abcdef/result", "job.result", NULL, "0123456789abcdef"},
    {"GET", "/api/v1/jobs//result", "job.result", NULL, ""},
    {"GET", "/api/v1/cutout", "cutout.get", NULL, NULL},
    {"HEAD", "/api/v1/cutout", "cutout.get", NULL, NULL},
    {"POST", "/api/v1/cutout", "cutout.post", NULL, NULL},
    {"GET", "/hips-image-services/hips2fits", "hips2fits", NULL, NULL},
    {"HEAD", "/hips-image-services/hips2fits", "hips2fits", NULL, NULL},
    {"GET", "/api/v1/datasets", "datasets", NULL, NULL},
    {"GET", "/api/v1/datasets/", "datasets", NULL, NULL},
    {"GET", "/api/v1/datasets/horsehead", "dataset", NULL, "horsehead"},
    {"GET", "/api/v1/datasets/horsehead/", "dataset", NULL, "horsehead"},
    {"GET", "/api/v1/datasets/l1448_13co/slice/xz/105_54/0_0_0.png", "dataset.slice",
     "xz/105_54/0_0_0.png", "l1448_13co"},
    {"GET", "/api/v1/datasets/l1448_13co/slice/", "dataset.slice", "", "l1448_13co"},
    {"GET", "/api/v1/datasets//slice/xy/1_1/0_0_0.png", "dataset.slice", "xy/1_1/0_0_0.png", ""},
    {"GET", "/api/v1/datasets/l1448_13co/series", "dataset.series", NULL, "l1448_13co"},
    {"GET", "/api/v1/datasets/l1448_13co/reduce", "dataset.reduce", NULL, "l1448_13co"},
    {"GET", "/api/v1/datasets/l1448_13co/fits", "dataset.fits", NULL, "l1448_13co"},
    {"GET", "/vo/datalink", "vo.datalink", NULL, NULL},
    {"POST", "/vo/datalink", "vo.datalink", NULL, NULL},
    {"GET", "/vo/soda/sync", "vo.soda", NULL, NULL},
    {"POST", "/vo/soda/sync", "vo.soda", NULL, NULL},
    {"GET", "/vo/capabilities", "vo.capabilities", NULL, NULL},
    {"HEAD", "/vo/availability", "vo.availability", NULL, NULL},
    {"GET", "/vo/uws/jobs", "uws.jobs", NULL, NULL},
    {"POST", "/vo/uws/jobs", "uws.create", NULL, NULL},
    {"GET", "/vo/uws/jobs/", "uws.jobs", NULL, NULL},
    {"POST", "/vo/uws/jobs/", "uws.create", NULL, NULL},
    {"GET", "/vo/uws/jobs/0123456789abcdef", "uws.job", NULL, "0123456789abcdef"},
    {"POST", "/vo/uws/jobs/0123456789abcdef", "uws.job.post", NULL, "0123456789abcdef"},
    {"DELETE", "/vo/uws/jobs/0123456789abcdef", "uws.job.delete", NULL, "0123456789abcdef"},
    {"GET", "/vo/uws/jobs/0123456789abcdef/phase", "uws.job.part", "phase",
     "0123456789abcdef"},
    {"POST", "/vo/uws/jobs/0123456789abcdef/phase", "uws.job.part.post", "phase",
     "0123456789abcdef"},
    {"GET", "/", "viewer", NULL, NULL},
    {"GET", "/viewer/", "viewer", "", NULL},
    {"GET", "/viewer/app.js", "viewer", "app.js", NULL},
    {"GET", "/vendor/openseadragon/openseadragon.min.js", "viewer.vendor",
     "openseadragon/openseadragon.min.js", NULL},
};

START_TEST(test_reaches)
{
    for (size_t i = 0; i < sizeof(reaches) / sizeof(reaches[0]); i++) {
        const struct reach *c = &reaches[i];
        route_match m;
        routes_match(c->method, c->path, &m);
        ck_assert_msg(m.status == 0 && m.route, "%s %s: status %d", c->method, c->path,
                      m.status);
        ck_assert_msg(strcmp(m.route->name, c->route) == 0, "%s %s reaches %s, not %s",
                      c->method, c->path, m.route->name, c->route);
        if (c->rest)
            ck_assert_msg(m.rest && strcmp(m.rest, c->rest) == 0, "%s: rest '%s'", c->path,
                          m.rest ? m.rest : "(none)");
        else
            ck_assert_msg(m.rest == NULL, "%s: rest '%s'", c->path, m.rest);
        if (c->segment) {
            ck_assert_msg(m.segment_at != NULL, "%s: no segment", c->path);
            ck_assert_str_eq(m.segment, c->segment);
            ck_assert_uint_eq(m.segment_len, strlen(c->segment));
        } else {
            ck_assert_msg(m.segment_at == NULL, "%s: segment '%s'", c->path, m.segment);
        }
        ck_assert_ptr_null(m.ds);
    }
}
END_TEST

static const struct refusal {
    const char *method, *path;
    const char *route;        /* the route named first for the path */
    const char *allow;        /* the Allow header */
} refusals[] = {
    {"POST", "/healthz", "healthz", "GET, HEAD, OPTIONS"},
    {"DELETE", "/metrics", "metrics", "GET, HEAD, OPTIONS"},
    {"POST", "/hips/horsehead/properties", "hips", "GET, HEAD, OPTIONS"},
    {"PUT", "/iiif/3/horsehead/info.json", "iiif", "GET, HEAD, OPTIONS"},
    {"PUT", "/api/v1/jobs", "jobs.list", "GET, HEAD, POST, OPTIONS"},
    {"DELETE", "/api/v1/jobs/", "jobs.list", "GET, HEAD, POST, OPTIONS"},
    {"POST", "/api/v1/jobs/0123456789abcdef", "job.get", "GET, HEAD, DELETE, OPTIONS"},
    {"DELETE", "/api/v1/jobs/0123456789abcdef/result", "job.result", "GET, HEAD, OPTIONS"},
    {"DELETE", "/api/v1/cutout", "cutout.get", "GET, HEAD, POST, OPTIONS"},
    {"PATCH", "/api/v1/cutout", "cutout.get", "GET, HEAD, POST, OPTIONS"},
    {"DELETE", "/api/v1/datasets", "datasets", "GET, HEAD, OPTIONS"},
    {"POST", "/api/v1/datasets/horsehead", "dataset", "GET, HEAD, OPTIONS"},
    {"POST", "/api/v1/datasets/gp/series", "dataset.series", "GET, HEAD, OPTIONS"},
    {"PUT", "/api/v1/datasets/gp/slice/xy/1_1/0_0_0.png", "dataset.slice", "GET, HEAD, OPTIONS"},
    {"POST", "/", "viewer", "GET, HEAD, OPTIONS"},
    {"DELETE", "/viewer/app.js", "viewer", "GET, HEAD, OPTIONS"},
};

START_TEST(test_method_not_allowed)
{
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        const struct refusal *c = &refusals[i];
        route_match m;
        routes_match(c->method, c->path, &m);
        ck_assert_msg(m.status == 405, "%s %s: status %d", c->method, c->path, m.status);
        ck_assert_str_eq(m.route->name, c->route);
        char allow[64];
        routes_allow_text(m.allow, allow, sizeof(allow));
        ck_assert_msg(strcmp(allow, c->allow) == 0, "%s %s: Allow '%s', expected '%s'",
                      c->method, c->path, allow, c->allow);
    }
    char small[8];
    routes_allow_text(ROUTE_GET | ROUTE_POST, small, sizeof(small));
    ck_assert_str_eq(small, "GET");
}
END_TEST

static const struct unknown {
    const char *method, *path;
    const char *claim;        /* the route claiming the path, NULL for none */
    const char *segment;
} unknowns[] = {
    {"GET", "/nowhere", NULL, NULL},
    {"POST", "/nowhere", NULL, NULL},
    {"GET", "/healthz/", NULL, NULL},
    {"GET", "/hips", NULL, NULL},
    {"GET", "/iiif/3", NULL, NULL},
    {"GET", "/iiif/2/x/info.json", NULL, NULL},
    {"GET", "/api/v1/jobsfoo", NULL, NULL},
    {"GET", "/api/v1/cutout/", NULL, NULL},
    {"GET", "/api/v1/datasetsx", NULL, NULL},
    {"GET", "/viewer", NULL, NULL},
    {"GET", "/api/v1/jobs/abc/def", "job.get", "abc"},
    {"DELETE", "/api/v1/jobs//", "job.get", ""},
    {"GET", "/api/v1/datasets/horsehead/nothing", "dataset", "horsehead"},
    {"GET", "/api/v1/datasets/horsehead/slice", "dataset", "horsehead"},
    {"PUT", "/api/v1/datasets/nosuch/series/x", "dataset", "nosuch"},
};

START_TEST(test_unknown_paths)
{
    for (size_t i = 0; i < sizeof(unknowns) / sizeof(unknowns[0]); i++) {
        const struct unknown *c = &unknowns[i];
        route_match m;
        routes_match(c->method, c->path, &m);
        ck_assert_msg(m.status == 404, "%s %s: status %d", c->method, c->path, m.status);
        if (!c->claim) {
            ck_assert_msg(m.route == NULL, "%s claimed by %s", c->path, m.route->name);
            continue;
        }
        ck_assert_msg(m.route && strcmp(m.route->name, c->claim) == 0, "%s: claimed by %s",
                      c->path, m.route ? m.route->name : "(none)");
        ck_assert_str_eq(m.segment, c->segment);
    }
    /* OPTIONS is answered everywhere (a CORS preflight). */
    const char *anywhere[] = {"/", "/nowhere", "/api/v1/jobs", "/api/v1/datasets/x/y"};
    for (size_t i = 0; i < sizeof(anywhere) / sizeof(anywhere[0]); i++) {
        route_match m;
        routes_match("OPTIONS", anywhere[i], &m);
        ck_assert_int_eq(m.status, 204);
        ck_assert_ptr_null(m.route);
    }
}
END_TEST

START_TEST(test_long_segment)
{
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/datasets/%0100d/series", 7);
    route_match m;
    routes_match("GET", path, &m);
    ck_assert_int_eq(m.status, 0);
    ck_assert_uint_eq(m.segment_len, 100);
    ck_assert_str_eq(m.segment, "");
    ck_assert_ptr_eq(m.segment_at, path + strlen("/api/v1/datasets/"));
}
END_TEST

/* ---- through a server: prepare before the method, the Allow header ------------------- */

static tess_config cfg;
static tserver *srv;
static char base[64];

static void setup(void)
{
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 2;
    free(cfg.jobs_dir);       /* no job endpoints */
    cfg.jobs_dir = NULL;
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
}

/* The detail of a problem reply (static storage). */
static const char *detail_of(const tt_resp *r)
{
    static char out[512];
    json_t *o = json_loads(r->body, 0, NULL);
    ck_assert_ptr_nonnull(o);
    snprintf(out, sizeof(out), "%s", json_string_value(json_object_get(o, "detail")));
    json_decref(o);
    return out;
}

START_TEST(test_served_answers)
{
    static const struct {
        const char *method, *path;
        long status;
        const char *parameter, *allow, *detail;
    } cases[] = {
        {"PUT", "/healthz", 405, NULL, "GET, HEAD, OPTIONS",
         "PUT is not allowed on /healthz; use GET"},
        {"DELETE", "/api/v1/cutout", 405, NULL, "GET, HEAD, POST, OPTIONS",
         "DELETE is not allowed on /api/v1/cutout; use GET, POST"},
        {"POST", "/api/v1/datasets/horsehead", 405, NULL, "GET, HEAD, OPTIONS",
         "POST is not allowed on /api/v1/datasets/horsehead; use GET"},
        /* The dataset is looked up before the method is checked. */
        {"POST", "/api/v1/datasets/nosuch/series", 404, "dataset", "",
         "no dataset named 'nosuch'"},
        {"GET", "/api/v1/datasets/nosuch/anything", 404, "dataset", "",
         "no dataset named 'nosuch'"},
        {"GET", "/api/v1/datasets//slice/xy/1_1/0_0_0.png", 404, "dataset", "",
         "no dataset named ''"},
        /* A name sent with an encoded '/' is quoted as asked, not as the decoded path
         * splits it (that made "no dataset named ''"). */
        {"GET", "/api/v1/datasets/%2Fetc%2Fpasswd/fits", 404, "dataset", "",
         "no dataset named '/etc/passwd' (dataset names hold no '/')"},
        {"GET", "/api/v1/datasets/..%2f%FF", 404, "dataset", "",
         "no dataset named '../?' (dataset names hold no '/')"},
        {"GET", "/zarr/horse%2Fhead/.zattrs", 404, "dataset", "",
         "no dataset named 'horse/head' (dataset names hold no '/')"},
        {"GET", "/hips/%2Fetc%2Fpasswd/properties", 404, "dataset", "",
         "no dataset named '/etc/passwd' (dataset names hold no '/')"},
        {"GET", "/iiif/3/%2Fetc%2Fpasswd/info.json", 404, "identifier", "",
         "no dataset named '/etc/passwd' (dataset names hold no '/')"},
        {"GET", "/api/v1/datasets/horsehead/anything", 404, NULL, "",
         "no such resource: /api/v1/datasets/horsehead/anything"},
        /* Without jobs.dir every job path is 404, whatever the method. */
        {"PUT", "/api/v1/jobs", 404, NULL, "", NULL},
        {"POST", "/api/v1/jobs/abc/result", 404, NULL, "", NULL},
        {"GET", "/api/v1/jobs/abc/def", 404, NULL, "", NULL},
        {"GET", "/nowhere", 404, NULL, "", "no such resource: /nowhere"},
        {"OPTIONS", "/nowhere", 204, NULL, "", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* tt_fetch POSTs only with a body. */
        const char *body = strcmp(cases[i].method, "POST") == 0 ? "" : NULL;
        tt_resp r = tt_fetch(base, cases[i].method, cases[i].path, body, 0, NULL);
        if (cases[i].status == 204) {
            ck_assert_int_eq(r.status, 204);
            tt_resp_free(&r);
            continue;
        }
        tt_assert_problem(cases[i].path, &r, cases[i].status, cases[i].parameter);
        ck_assert_msg(strcmp(r.allow, cases[i].allow) == 0, "%s %s: Allow '%s'",
                      cases[i].method, cases[i].path, r.allow);
        if (cases[i].detail)
            ck_assert_str_eq(detail_of(&r), cases[i].detail);
        else
            ck_assert_msg(strstr(detail_of(&r), "no job endpoints"), "%s", detail_of(&r));
        tt_resp_free(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("routes");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_table_is_well_formed);
    tcase_add_test(tc, test_reaches);
    tcase_add_test(tc, test_method_not_allowed);
    tcase_add_test(tc, test_unknown_paths);
    tcase_add_test(tc, test_long_segment);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("served");
    tcase_add_checked_fixture(ts, setup, teardown);
    tcase_add_test(ts, test_served_answers);
    suite_add_tcase(s, ts);
    return tt_run_suite(s);
}
