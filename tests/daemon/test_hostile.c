/* Hostile requests against tesserad in-process (demo data, port 0): path traversal in every
 * path parameter, NUL and control characters, malformed and huge header bodies, absurd
 * cutout, HiPS and IIIF parameters, deeply nested and huge job bodies, slow-loris clients
 * and more connections than limits.max_connections.  Every answer must be the right 4xx
 * application/problem+json and the server must answer /healthz afterwards.  Requests go
 * over raw sockets (no client-side path normalisation) with a receive timeout, so no test
 * can hang. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/jobs.h"
#include "daemon/oplog.h"
#include "tests/testutil.h"

#define MAX_CONN 8          /* limits.max_connections of the server under test */
#define CONN_TIMEOUT 2      /* limits.connection_timeout_s */

static tess_config cfg;
static tserver *srv;
static int port;
static char tmpdir[256];
static char access_path[300], error_path[300];

/* ---- requests ------------------------------------------------------------------------ */

/* One request on a fresh connection ("Connection: close"); `target` is sent as it is. */
static tt_resp raw_request(const char *method, const char *target, const char *body, size_t blen,
                           const char *ctype)
{
    int fd = tt_raw_connect(port, NULL, 20);
    char head[8192];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, target);
    if (body)
        n += snprintf(head + n, sizeof head - (size_t)n,
                      "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype, blen);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    ck_assert_int_eq(tt_send_all(fd, head, (size_t)n), 0);
    if (body)
        tt_send_all(fd, body, blen);
    tt_resp r = tt_raw_read(fd);
    close(fd);
    return r;
}

static tt_resp get(const char *target)
{
    return raw_request("GET", target, NULL, 0, NULL);
}

/* The server still answers. */
static void assert_alive(void)
{
    tt_resp r = get("/healthz");
    ck_assert_msg(r.status == 200, "healthz: %ld", r.status);
    ck_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    tt_resp_free(&r);
}

/* A problem+json answer with a status in [lo, hi], and nothing from /etc/passwd. */
static void assert_4xx(const char *what, const tt_resp *r, long lo, long hi, const char *param)
{
    ck_assert_msg(r->status >= lo && r->status <= hi, "%.200s: status %ld not in %ld..%ld: %.300s",
                  what, r->status, lo, hi, r->body ? r->body : "");
    tt_assert_problem(what, r, r->status, param);
    ck_assert_msg(!r->body || !strstr(r->body, "root:"), "%s leaks a system file", what);
}

/* Waits (up to 3 s, scaled by tt_time_scale: lines are written when the connection's
 * request completes, just after the client has its answer) until the access log has a
 * line containing `needle`. */
static void wait_for_log_line(const char *needle)
{
    double t0 = tt_now_s();
    while (tt_now_s() - t0 < 3.0 * tt_time_scale()) {
        FILE *f = fopen(access_path, "r");
        char line[8192];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, needle)) {
                fclose(f);
                return;
            }
        if (f)
            fclose(f);
        usleep(20000);
    }
    ck_abort_msg("no access log line with %s", needle);
}

/* ---- server -------------------------------------------------------------------------- */

static void setup(void)
{
    char err[512];
    tt_tmpdir_make(tmpdir, sizeof tmpdir, "hostile");
    snprintf(access_path, sizeof access_path, "%s/access.log", tmpdir);
    snprintf(error_path, sizeof error_path, "%s/error.log", tmpdir);
    char jobsdir[300];
    snprintf(jobsdir, sizeof jobsdir, "%s/jobs", tmpdir);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof err), 0);
    cfg.threads = 2;
    cfg.max_body_mb = 16;
    cfg.max_connections = MAX_CONN;
    cfg.connection_timeout_s = CONN_TIMEOUT;
    cfg.jobs_dir = strdup(jobsdir);
    free(cfg.error_log);
    cfg.error_log = strdup(error_path);
    cfg.access_log = strdup(access_path);
    /* The mosaic kind checks array sizes; registering it twice is refused, harmless. */
    jobs_register_kind(&job_kind_mosaic);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    port = tserver_port(srv);
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    config_release(&cfg);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- path traversal, NUL, control characters ----------------------------------------- */

START_TEST(test_path_traversal)
{
    /* Each prefix takes a path parameter; each payload tries to climb out of it. */
    static const char *const prefix[] = {
        "/api/v1/datasets/",
        "/api/v1/datasets/horsehead/slice/",
        "/api/v1/datasets/horsehead/slice/xy/10_10/",
        "/hips/",
        "/hips/horsehead/",
        "/hips/horsehead/Norder3/Dir0/",
        "/iiif/3/",
        "/iiif/3/horsehead/",
        "/iiif/3/horsehead/full/max/0/",
        "/api/v1/jobs/",
        "/viewer/",
        "/vendor/",
    };
    static const char *const payload[] = {
        "../../../../../../etc/passwd",
        "..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
        "%252e%252e%252f%252e%252e%252fetc%252fpasswd",
        "..%5c..%5c..%5cetc%5cpasswd",
        "%2fetc%2fpasswd",
        "/etc/passwd",
        "..%c0%af..%c0%afetc%c0%afpasswd",
        "....//....//etc/passwd",
    };
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
        for (size_t k = 0; k < sizeof payload / sizeof payload[0]; k++) {
            char target[512];
            snprintf(target, sizeof target, "%s%s", prefix[i], payload[k]);
            tt_resp r = get(target);
            assert_4xx(target, &r, 400, 404, NULL);
            tt_resp_free(&r);
            if (strncmp(prefix[i], "/api/v1/jobs/", 13) == 0) {
                snprintf(target, sizeof target, "%s%s/result", prefix[i], payload[k]);
                r = get(target);
                assert_4xx(target, &r, 400, 404, NULL);
                tt_resp_free(&r);
                r = raw_request("DELETE", target, NULL, 0, NULL);
                assert_4xx(target, &r, 400, 405, NULL);
                tt_resp_free(&r);
            }
        }
    /* The dataset query parameter of cutouts. */
    static const char *const ds[] = {"../../etc/passwd", "%2fetc%2fpasswd",
                                     "..%2f..%2fdata%2fdemo%2fhorsehead.fits",
                                     "%252e%252e%252fetc"};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        char target[512];
        snprintf(target, sizeof target,
                 "/api/v1/cutout?dataset=%s&ra=85.25&dec=-2.46&fov=0.1&width=16&height=16", ds[k]);
        tt_resp r = get(target);
        assert_4xx(target, &r, 404, 404, "dataset");
        tt_resp_free(&r);
    }
    assert_alive();
}
END_TEST

START_TEST(test_nul_and_control_characters)
{
    /* An encoded NUL anywhere in the target: 400 naming the path or the query. */
    static const char *const nul[] = {"/api/v1/datasets/horse%00head", "/api/v1/datasets/horsehead%00",
        "/api/v1/datasets/%00", "/api/v1/datasets/horsehead%00/slice/xy/8_8/0_0_0.png",
        "/hips/horsehead%00/properties", "/iiif/3/horsehead%00/info.json",
        "/api/v1/jobs/%00", "/healthz%00"};
    for (size_t k = 0; k < sizeof nul / sizeof nul[0]; k++) {
        tt_resp r = get(nul[k]);
        assert_4xx(nul[k], &r, 400, 400, "path");
        tt_resp_free(&r);
    }
    tt_resp rq = get("/api/v1/cutout?dataset=horsehead%00&ra=85.25&dec=-2.46&fov=0.1&width=16&height=16");
    assert_4xx("dataset=horsehead%00", &rq, 400, 400, "query");
    tt_resp_free(&rq);
    static const char *const names[] = {"horse%0d%0aX-Evil:%201", "horse%01head", "horse%1b%5b31m", "horse%7fhead",
                                        "horse%ffhead", "%c3%28"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char target[512];
        snprintf(target, sizeof target, "/api/v1/datasets/%s", names[k]);
        tt_resp r = get(target);
        assert_4xx(target, &r, 400, 404, "dataset");
        /* A CR LF in a name never becomes a response header. */
        ck_assert_ptr_null(strstr(r.body, "\nX-Evil"));
        tt_resp_free(&r);
        snprintf(target, sizeof target, "/api/v1/datasets/%s/slice/xy/8_8/0_0_0.png", names[k]);
        r = get(target);
        assert_4xx(target, &r, 400, 404, "dataset");
        tt_resp_free(&r);
        snprintf(target, sizeof target, "/hips/%s/properties", names[k]);
        r = get(target);
        assert_4xx(target, &r, 400, 404, NULL);
        tt_resp_free(&r);
        snprintf(target, sizeof target, "/iiif/3/%s/info.json", names[k]);
        r = get(target);
        assert_4xx(target, &r, 400, 404, NULL);
        tt_resp_free(&r);
        snprintf(target, sizeof target,
                 "/api/v1/cutout?dataset=%s&ra=85.25&dec=-2.46&fov=0.1&width=16&height=16",
                 names[k]);
        r = get(target);
        assert_4xx(target, &r, 400, 404, "dataset");
        tt_resp_free(&r);
    }
    /* Raw control bytes in the request line are refused by the HTTP parser itself (no
     * problem document), and the server goes on. */
    int fd = tt_raw_connect(port, NULL, 5);
    static const char bad[] = "GET /api/v1/datasets/a\x01\x02b HTTP/1.1\r\nHost: x\r\n"
                              "Connection: close\r\n\r\n";
    tt_send_all(fd, bad, sizeof bad - 1);
    tt_resp r = tt_raw_read(fd);
    close(fd);
    ck_assert_msg(r.status == 0 || (r.status >= 400 && r.status < 500), "raw control bytes: %ld",
                  r.status);
    tt_resp_free(&r);
    /* Access log lines escape control characters (one request, one line). */
    r = get("/api/v1/datasets/zz%0d%0aforged-line");
    tt_resp_free(&r);
    assert_alive();
    wait_for_log_line("forged-line");
    FILE *f = fopen(access_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[8192];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        ck_assert_ptr_null(strstr(line, "forged-line") == line ? line : NULL);
        if (strstr(line, "\"GET /api/v1/datasets/zz%0d%0aforged-line HTTP/1.1\" 404 ")) {
            found = 1;
            ck_assert_ptr_nonnull(strstr(line, "127.0.0.1 - - ["));
        }
    }
    fclose(f);
    ck_assert_msg(found, "no access log line for the request");
}
END_TEST

/* ---- cutouts, HiPS and IIIF with absurd parameters ---------------------------------- */

START_TEST(test_cutout_absurd_parameters)
{
    static const struct {
        const char *q;
        long status;
        const char *param;
    } cases[] = {
        {"fov=0.1&width=0&height=16", 400, "width"},
        {"fov=0.1&width=-5&height=16", 400, "width"},
        {"fov=0.1&width=16&height=0", 400, "height"},
        {"fov=0.1&width=16&height=-1", 400, "height"},
        {"fov=0.1&width=99999999999999999999&height=16", 400, "width"},
        {"fov=0.1&width=31623&height=31623", 413, "width"},   /* 1e9 pixels */
        {"fov=0.1&width=65536&height=65536", 413, "width"},
        {"fov=0&width=16&height=16", 400, "fov"},
        {"fov=-1&width=16&height=16", 400, "fov"},
        {"fov=1e6&width=16&height=16", 400, "fov"},
        {"fov=nan&width=16&height=16", 400, "fov"},
        {"fov=inf&width=16&height=16", 400, "fov"},
        {"fov=1e308&width=16&height=16", 400, "fov"},
        {"fov=0x10&width=16&height=16", 400, "fov"},
        {"fov=0.1&width=16&height=16&plane=-1", 400, "plane"},
        {"fov=0.1&width=16&height=16&plane=1e9", 400, "plane"},
        {"fov=0.1&width=16&height=16&rotation_angle=nan", 400, "rotation_angle"},
        {"fov=0.1&width=16&height=16&max_coord_error=-1", 400, "max_coord_error"},
        {"fov=0.1&width=16&height=16&projection=%2e%2e%2f", 400, "projection"},
        {"fov=0.1&width=16&height=16&fov=0.2", 400, "fov"},
        {"fov=0.1&width=16&height=16&bogus=1", 400, "bogus"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char target[512];
        snprintf(target, sizeof target, "/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.46&%s",
                 cases[k].q);
        tt_resp r = get(target);
        assert_4xx(target, &r, cases[k].status, cases[k].status, cases[k].param);
        tt_resp_free(&r);
    }
    /* ra and dec far outside their ranges. */
    static const char *const coords[] = {"ra=1e308&dec=0", "ra=0&dec=1e308", "ra=nan&dec=0",
                                         "ra=0&dec=-inf", "ra=0&dec=91"};
    for (size_t k = 0; k < sizeof coords / sizeof coords[0]; k++) {
        char target[512];
        snprintf(target, sizeof target,
                 "/api/v1/cutout?dataset=horsehead&%s&fov=0.1&width=16&height=16", coords[k]);
        tt_resp r = get(target);
        assert_4xx(target, &r, 400, 400, NULL);
        tt_resp_free(&r);
    }
    assert_alive();
}
END_TEST

START_TEST(test_hips_and_iiif_out_of_range)
{
    static const struct {
        const char *path;
        long lo, hi;
        const char *param;
    } cases[] = {
        {"/hips/horsehead/Norder30/Dir0/Npix0.png", 400, 400, "Norder"},
        {"/hips/horsehead/Norder31/Dir0/Npix0.fits", 400, 400, "Norder"},
        {"/hips/horsehead/Norder4294967296/Dir0/Npix0.png", 400, 400, "Norder"},
        {"/hips/horsehead/Norder99999999999999999999999/Dir0/Npix0.png", 400, 400, "Norder"},
        {"/hips/horsehead/Norder-1/Dir0/Npix0.png", 400, 400, "Norder"},
        {"/hips/horsehead/Norder29/Dir0/Npix0.png", 404, 404, "Norder"},
        {"/hips/horsehead/Norder3/Dir0/Npix768.png", 400, 400, "Npix"},
        {"/hips/horsehead/Norder3/Dir0/Npix-1.png", 400, 400, "Npix"},
        {"/hips/horsehead/Norder3/Dir0/Npix99999999999999999999.png", 400, 400, "Npix"},
        {"/hips/horsehead/Norder3/Dir10000/Npix0.png", 404, 404, NULL},
        {"/hips/horsehead/Norder03/Dir0/Npix357.png", 404, 404, "Norder"},
        {"/hips/horsehead/Norder3/Dir00/Npix357.png", 404, 404, "Dir"},
        {"/hips/horsehead/Norder3/Dir0/Npix0357.png", 404, 404, "Npix"},
        {"/hips/horsehead/Norder03/Allsky.png", 404, 404, "Norder"},
        {"/hips/horsehead/Norder3/Dir0/Npix0.gif", 400, 404, NULL},
        {"/hips/horsehead/Norder2/Allsky.png", 404, 404, "Norder"},
        {"/hips/horsehead/Norder3/Dir0/Npix0.png?plane=99", 400, 400, "plane"},
        {"/hips/horsehead/Norder3/Dir0/Npix0.png?method=exact", 400, 400, "method"},
        {"/iiif/3/horsehead/9999,9999,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/891,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/0,893,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/0,0,0,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/-1,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/99999999999999999999,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/pct:100,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/pct:1e9,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/pct:nan,0,10,10/max/0/default.png", 400, 400, "region"},
        {"/iiif/3/horsehead/full/^1099511627776,/0/default.png", 400, 413, "size"},
        {"/iiif/3/horsehead/full/^100000,100000/0/default.png", 413, 413, "size"},
        {"/iiif/3/horsehead/full/^pct:1e300/0/default.png", 400, 413, "size"},
        {"/iiif/3/horsehead/full/0,/0/default.png", 400, 400, "size"},
        {"/iiif/3/horsehead/full/max/45/default.png", 400, 400, "rotation"},
        {"/iiif/3/horsehead/full/max/1e308/default.png", 400, 400, "rotation"},
        {"/iiif/3/horsehead/full/max/0/default.gif", 400, 400, "format"},
        {"/iiif/3/horsehead~99999/info.json", 404, 404, "identifier"},
        {"/iiif/3/horsehead~-1/info.json", 404, 404, "identifier"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tt_resp r = get(cases[k].path);
        assert_4xx(cases[k].path, &r, cases[k].lo, cases[k].hi, cases[k].param);
        tt_resp_free(&r);
    }
    assert_alive();
}
END_TEST

/* ---- POST cutout header bodies --------------------------------------------------------- */

/* The reference target header with card `key` replaced by "KEY     = value". */
static char *header_with(const char *key, const char *value, size_t *len)
{
    int nkeys;
    char *cards = tt_read_hdr_file(TESSERA_TESTDATA_DIR "/reference/horsehead_rot30_bilinear.target.hdr",
                                   &nkeys);
    char *text = malloc((size_t)nkeys * 81 + 1);
    size_t n = 0;
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        if (key && strncmp(c, key, strlen(key)) == 0 && c[strlen(key)] == ' ') {
            char card[81];
            snprintf(card, sizeof card, "%-8s= %20s", key, value);
            snprintf(text + n, 82, "%-80s\n", card);
        } else {
            memcpy(text + n, c, 80);
            text[n + 80] = '\n';
        }
        n += 81;
    }
    text[n] = '\0';
    free(cards);
    *len = n;
    return text;
}

static tt_resp post_header(const char *body, size_t len)
{
    return raw_request("POST", "/api/v1/cutout?dataset=horsehead&format=fits", body, len,
                       "text/plain");
}

START_TEST(test_header_bodies)
{
    size_t len;
    char *good = header_with(NULL, NULL, &len);
    /* Truncated in the middle of a card, and to a single partial card. */
    tt_resp r = post_header(good, 81 * 3 + 40);
    assert_4xx("truncated header", &r, 400, 422, NULL);
    tt_resp_free(&r);
    r = post_header(good, 30);
    assert_4xx("one partial card", &r, 400, 400, "body");
    tt_resp_free(&r);
    /* Not 80 columns: a longer line; raw cards of 79 characters. */
    char *wide = malloc(len + 8);
    memcpy(wide, good, 80);
    memcpy(wide + 80, "   XX", 5);
    memcpy(wide + 85, good + 80, len - 80);
    r = post_header(wide, len + 5);
    assert_4xx("85-column line", &r, 400, 400, "body");
    tt_resp_free(&r);
    free(wide);
    char raw79[79 * 3];
    memset(raw79, 'X', sizeof raw79);
    r = post_header(raw79, sizeof raw79);
    assert_4xx("raw 79-column cards", &r, 400, 400, "body");
    tt_resp_free(&r);
    /* 10 MB: 131072 comment cards. */
    size_t big = (size_t)131072 * 81;
    char *huge = malloc(big);
    for (size_t i = 0; i < big; i += 81) {
        memset(huge + i, 'x', 80);
        memcpy(huge + i, "COMMENT ", 8);
        huge[i + 80] = '\n';
    }
    double t0 = tt_now_s();
    r = post_header(huge, big);
    assert_4xx("10 MB header", &r, 400, 400, "body");
    ck_assert_double_lt(tt_now_s() - t0, 10.0 * tt_time_scale());
    tt_resp_free(&r);
    /* Over limits.max_body_mb (16): 413 before the body is read. */
    size_t over = (size_t)17 << 20;
    huge = realloc(huge, over);
    memset(huge, ' ', over);
    r = post_header(huge, over);
    assert_4xx("17 MB body", &r, 413, 413, "body");
    tt_resp_free(&r);
    free(huge);
    /* Binary garbage, NUL bytes. */
    static const char bin[] = "SIMPLE  =                    T\x00\x01\xff\nEND\n";
    r = post_header(bin, sizeof bin - 1);
    assert_4xx("binary header", &r, 400, 400, "body");
    tt_resp_free(&r);
    /* Non-finite and absurd values in WCS cards. */
    static const struct {
        const char *key, *value;
        long lo, hi;
    } vals[] = {
        {"CRVAL1", "NaN", 400, 400},      {"CD1_1", "NaN", 400, 400},
        {"CD1_1", "1e999", 400, 400},     {"CRPIX1", "inf", 400, 400},
        {"CRVAL1", "'text'", 400, 400},   {"NAXIS1", "1e308", 400, 400},
        {"NAXIS1", "0", 400, 400},        {"NAXIS1", "-5", 400, 400},
        {"NAXIS2", "4294967297", 400, 400},
        {"CRVAL1", "1e308", 400, 422},    {"CD1_1", "1e308", 400, 422},
        {"CRPIX1", "1e308", 400, 422},
        {"NAXIS1", "65536", 413, 413},
    };
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        char *h = header_with(vals[k].key, vals[k].value, &len);
        r = post_header(h, len);
        char what[64];
        snprintf(what, sizeof what, "%s = %s", vals[k].key, vals[k].value);
        assert_4xx(what, &r, vals[k].lo, vals[k].hi, NULL);
        tt_resp_free(&r);
        free(h);
    }
    free(good);
    assert_alive();
}
END_TEST

/* ---- job bodies --------------------------------------------------------------------- */

static tt_resp post_job(const char *body, size_t len)
{
    return raw_request("POST", "/api/v1/jobs", body, len, "application/json");
}

START_TEST(test_job_bodies)
{
    /* 100000 '[' (and the same closed), nested objects. */
    size_t n = 100000;
    char *deep = malloc(4 * n + 64);
    memset(deep, '[', n);
    tt_resp r = post_job(deep, n);
    assert_4xx("100000 [", &r, 400, 400, "body");
    tt_resp_free(&r);
    memset(deep + n, ']', n);
    r = post_job(deep, 2 * n);
    assert_4xx("100000 [ ]", &r, 400, 400, "body");
    tt_resp_free(&r);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"type\":\"mosaic\",\"inputs\":");
    for (size_t i = 0; i < 50000; i++)
        k += (size_t)sprintf(deep + k, "{\"a\":");
    r = post_job(deep, k);
    assert_4xx("50000 nested objects", &r, 400, 400, "body");
    tt_resp_free(&r);
    free(deep);
    /* A million inputs (12 MB), and a million numbers. */
    size_t cap = 16u << 20;
    char *huge = malloc(cap);
    k = (size_t)sprintf(huge, "{\"type\":\"mosaic\",\"inputs\":[");
    for (int i = 0; i < 1000000; i++)
        k += (size_t)sprintf(huge + k, "%s\"horsehead\"", i ? "," : "");
    k += (size_t)sprintf(huge + k, "],\"output\":{\"name\":\"hostile_out\"}}");
    double t0 = tt_now_s();
    r = post_job(huge, k);
    assert_4xx("1e6 inputs", &r, 400, 413, "inputs");
    ck_assert_double_lt(tt_now_s() - t0, 10.0 * tt_time_scale());
    tt_resp_free(&r);
    k = (size_t)sprintf(huge, "{\"type\":\"mosaic\",\"inputs\":[");
    for (int i = 0; i < 1000000; i++)
        k += (size_t)sprintf(huge + k, "%s1e308", i ? "," : "");
    k += (size_t)sprintf(huge + k, "]}");
    r = post_job(huge, k);
    assert_4xx("1e6 numbers", &r, 400, 413, NULL);
    tt_resp_free(&r);
    free(huge);
    /* Odd but small bodies. */
    static const char *const odd[] = {
        "", "null", "[]", "\"mosaic\"", "{\"type\":null}", "{\"type\":\"mosaic\",\"type\":\"mosaic\"}",
        "{\"type\":\"mosaic\",\"inputs\":[NaN]}", "{\"type\":\"mosaic\",\"inputs\":[1e999]}",
        "{\"type\":\"mosaic\",\"inputs\":[\"../../etc/passwd\"],\"output\":{\"name\":\"x\"}}",
        "{\"type\":\"mosaic\",\"inputs\":[\"/etc/passwd\"],\"output\":{\"name\":\"x\"}}",
        "{\"type\":\"mosaic\",\"inputs\":[\"horsehead\"],\"output\":{\"name\":\"../../x\"}}",
        "{\"type\":\"mosaic\",\"inputs\":[\"horse\\u0000head\"],\"output\":{\"name\":\"x\"}}",
        "{\"type\":\"\\u0000\"}", "{\"type\":\"mosaic\"\x00}",
    };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        size_t len = strlen(odd[i]);
        if (i == sizeof odd / sizeof odd[0] - 1)
            len = 18;   /* the embedded NUL */
        r = post_job(odd[i], len);
        assert_4xx(odd[i], &r, 400, 413, NULL);
        tt_resp_free(&r);
    }
    /* Nothing was queued. */
    r = get("/api/v1/jobs");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "[]");
    tt_resp_free(&r);
    assert_alive();
}
END_TEST

/* ---- slow clients and too many connections ------------------------------------------- */

START_TEST(test_slow_loris)
{
    /* The bounds below are for a normal run; valgrind slows the server down. */
    const double ts = tt_time_scale();
    /* Four clients send part of a request and stall (fewer than max_connections). */
    int fds[4];
    static const char *const partial[] = {"GET /healthz HTTP/1.1\r\nHost: x\r\n", "GET /hea",
                                          "POST /api/v1/cutout?dataset=horsehead HTTP/1.1\r\n"
                                          "Content-Length: 1000\r\n\r\nSIMPLE",
                                          ""};
    for (int i = 0; i < 4; i++) {
        fds[i] = tt_raw_connect(port, NULL, 10);
        tt_send_all(fds[i], partial[i], strlen(partial[i]));
    }
    double t0 = tt_now_s();
    /* Meanwhile others are served at once. */
    for (int i = 0; i < 5; i++)
        assert_alive();
    ck_assert_double_lt(tt_now_s() - t0, 1.0 * ts);
    /* The stalled ones are closed after limits.connection_timeout_s of silence. */
    for (int i = 0; i < 4; i++) {
        double w = tt_wait_closed(fds[i], CONN_TIMEOUT + 4 * ts);
        ck_assert_msg(w >= 0, "slow client %d still connected after %g s", i, CONN_TIMEOUT + 4 * ts);
        close(fds[i]);
    }
    ck_assert_double_lt(tt_now_s() - t0, CONN_TIMEOUT + 4 * ts);
    assert_alive();
}
END_TEST

/* A client that sends a whole request and then half-closes (shutdown SHUT_WR, as
 * `printf ... | nc -N` and some HTTP/1.0 clients do) still gets its answer, also when
 * the answer is computed on a worker (after an interim 100 Continue, when the server
 * probed whether it had gone: tests/daemon/test_cancel.c).  (Polling the connections
 * with poll(2) instead of libmicrohttpd's epoll ended such connections at the FIN,
 * before the answer.) */
START_TEST(test_half_closed_client_is_answered)
{
    for (int i = 0; i < 3; i++) {
        char req[512];
        snprintf(req, sizeof req,
                 "GET /api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=0&coordsys=galactic&fov=0.5"
                 "&width=%d&height=%d&format=png HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 301 + i, 301 + i);
        int fd = tt_raw_connect(port, NULL, 30);
        ck_assert_int_eq(tt_send_all(fd, req, strlen(req)), 0);
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        tt_resp r = tt_raw_read(fd);
        ck_assert_msg(r.status == 200, "half-closed client %d: status %ld", i, r.status);
        ck_assert_str_eq(r.content_type, "image/png");
        tt_resp_free(&r);
        close(fd);
    }
    assert_alive();
}
END_TEST

START_TEST(test_too_many_connections)
{
    /* max_connections + 4 idle connections (the accept happens at once). */
    const double ts = tt_time_scale();   /* 1 but under valgrind */
    enum { NIDLE = MAX_CONN + 4 };
    int fds[NIDLE];
    for (int i = 0; i < NIDLE; i++)
        fds[i] = tt_raw_connect(port, NULL, 10);
    usleep(200000);
    /* Over the limit: a fast 503 with Retry-After, not a hang. */
    double t0 = tt_now_s();
    tt_resp r = get("/healthz");
    double dt = tt_now_s() - t0;
    assert_4xx("over max_connections", &r, 503, 503, NULL);
    ck_assert_str_eq(r.retry_after, "1");
    ck_assert_double_lt(dt, 1.0 * ts);
    tt_resp_free(&r);
    for (int i = 0; i < NIDLE; i++)
        close(fds[i]);
    /* Far over the limit (past the daemon's own cap): no answer hangs for longer than
     * the idle timeout of the connections ahead of it. */
    enum { NFLOOD = 3 * MAX_CONN + 24 };
    int flood[NFLOOD];
    for (int i = 0; i < NFLOOD; i++)
        flood[i] = tt_raw_connect(port, NULL, 10);
    t0 = tt_now_s();
    r = get("/healthz");
    dt = tt_now_s() - t0;
    ck_assert_msg(r.status == 503 || r.status == 200 || r.status == 0,
                  "far over the limit: status %ld", r.status);
    ck_assert_double_lt(dt, CONN_TIMEOUT + 4 * ts);
    tt_resp_free(&r);
    for (int i = 0; i < NFLOOD; i++)
        close(flood[i]);
    /* Back under the limit: served again. */
    usleep(300000);
    assert_alive();
}
END_TEST

/* ---- operator logs --------------------------------------------------------------------- */

START_TEST(test_access_log_format)
{
    tt_resp r = raw_request("GET", "/api/v1/datasets?x=%22q%22", NULL, 0, NULL);
    tt_resp_free(&r);
    r = get("/healthz");
    tt_resp_free(&r);
    /* A request is logged when its connection is done with it: the two lines may come in
     * either order, so wait for both (waiting for the second alone failed once under
     * load, with only the /healthz line written). */
    wait_for_log_line("\"GET /api/v1/datasets?x=");
    wait_for_log_line("\"GET /healthz HTTP/1.1\"");
    FILE *f = fopen(access_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[8192];
    int n = 0, seen = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        /* host ident user [day/Mon/year:h:m:s +0000] "request" status bytes "ref" "ua" */
        char host[64], date[32], req[4096];
        int status;
        char bytes[32];
        ck_assert_msg(sscanf(line, "%63s - - [%31[^]]] \"%4095[^\"]\" %d %31s \"-\" \"-\"",
                             host, date, req, &status, bytes) == 5, "not CLF: %s", line);
        ck_assert_str_eq(host, "127.0.0.1");
        ck_assert_int_eq((int)strlen(date), 26);
        if (strcmp(req, "GET /healthz HTTP/1.1") == 0) {
            seen++;
            ck_assert_int_eq(status, 200);
            ck_assert_str_eq(bytes, "15");
        }
    }
    fclose(f);
    ck_assert_int_ge(n, 2);
    ck_assert_int_eq(seen, 1);

    /* SIGHUP's reopen: after a rename (logrotate), new lines go to a new file. */
    char rotated[400];
    snprintf(rotated, sizeof rotated, "%s.1", access_path);
    ck_assert_int_eq(rename(access_path, rotated), 0);
    ck_assert_int_eq(tserver_reopen_logs(srv), 0);
    r = get("/healthz?after=rotation");
    tt_resp_free(&r);
    wait_for_log_line("/healthz?after=rotation");

    /* Error log: one JSON object a line with time, level, event first. */
    oplog_error_event(error_path, json_pack("{s:s, s:i, s:s}", "event", "http_error", "status",
                                            500, "uri", "/x\n\"y"));
    f = fopen(error_path, "r");
    ck_assert_ptr_nonnull(f);
    int lines = 0;
    json_t *last = NULL;
    while (fgets(line, sizeof line, f)) {
        lines++;
        json_decref(last);
        last = json_loads(line, 0, NULL);
        ck_assert_msg(last != NULL, "error log line is not JSON: %s", line);
    }
    fclose(f);
    ck_assert_int_ge(lines, 1);
    ck_assert_int_eq(strncmp(line, "{\"time\":\"", 9), 0);
    ck_assert_str_eq(json_string_value(json_object_get(last, "level")), "error");
    ck_assert_str_eq(json_string_value(json_object_get(last, "event")), "http_error");
    ck_assert_str_eq(json_string_value(json_object_get(last, "uri")), "/x\n\"y");
    const char *ts = json_string_value(json_object_get(last, "time"));
    ck_assert_int_eq((int)strlen(ts), 24);   /* 2026-11-30T19:48:28.412Z */
    ck_assert_int_eq(ts[23], 'Z');
    json_decref(last);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_path_traversal);
    tcase_add_test(tc, test_nul_and_control_characters);
    tcase_add_test(tc, test_cutout_absurd_parameters);
    tcase_add_test(tc, test_hips_and_iiif_out_of_range);
    tcase_add_test(tc, test_header_bodies);
    tcase_add_test(tc, test_job_bodies);
    tcase_add_test(tc, test_slow_loris);
    tcase_add_test(tc, test_too_many_connections);
    tcase_add_test(tc, test_half_closed_client_is_answered);
    tcase_add_test(tc, test_access_log_format);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
