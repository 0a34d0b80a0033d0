/* Hostile use of HTTP itself against tesserad in-process (demo data, port 0): transfer
 * codings the server does not implement and request targets past the 414 limit.  Each
 * test starts its own server with the limits it exercises; requests go over raw sockets
 * with receive timeouts, so no test can hang. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "tests/testutil.h"

static tess_config cfg;
static tserver *srv;
static int port;

/* The limits a test runs its server with. */
typedef struct limits {
    int max_connections;
    int connection_timeout_s;
    size_t max_body_mb;
} limits;

static void start_server(const limits *l)
{
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof err), 0);
    cfg.threads = 2;
    cfg.max_connections = l->max_connections;
    cfg.connection_timeout_s = l->connection_timeout_s;
    cfg.max_body_mb = l->max_body_mb;
    free(cfg.error_log);
    cfg.error_log = NULL;
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    port = tserver_port(srv);
}

/* The defaults of config_init, shorter timeouts. */
static const limits plain = {256, 10, 64};

static void setup(void)
{
    srv = NULL;
}

static void teardown(void)
{
    if (srv) {
        tserver_stop(srv, 5);
        config_release(&cfg);
    }
}

/* ---- requests ------------------------------------------------------------------------ */

/* Sends `head` (a request line and headers, then the blank line) and `body` (blen bytes,
 * may be NULL) from local address `src` (NULL: any) and reads the answer. */
static tt_resp exchange(const char *src, const char *head, const char *body, size_t blen)
{
    int fd = tt_raw_connect(port, src, 5);
    ck_assert_int_eq(tt_send_all(fd, head, strlen(head)), 0);
    if (body)
        tt_send_all(fd, body, blen);
    tt_resp r = tt_raw_read(fd);
    close(fd);
    return r;
}

/* GET /healthz from `src`, with the seconds it took in *dt. */
static tt_resp healthz_from(const char *src, double *dt)
{
    double t0 = tt_now_s();
    tt_resp r = exchange(src, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         NULL, 0);
    *dt = tt_now_s() - t0;
    return r;
}

/* ---- transfer codings ------------------------------------------------------------------ */

START_TEST(test_transfer_encodings)
{
    start_server(&plain);
    static const char chunked_body[] = "7\r\ngarbage\r\n0\r\n\r\n";
    static const struct {
        const char *headers;   /* header lines after Host */
        long status;
    } cases[] = {
        {"Transfer-Encoding: gzip, chunked\r\n", 501},
        {"Transfer-Encoding: deflate, chunked\r\n", 501},
        {"Transfer-Encoding: x-tessera, chunked\r\n", 501},
        {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501},
        {"Transfer-Encoding: identity\r\n", 400},
        {"Transfer-Encoding: gzip\r\n", 400},
        {"Transfer-Encoding: chunked, gzip\r\n", 400},
        {"Transfer-Encoding: chunked, chunked\r\n", 400},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400},
        {"Transfer-Encoding: \r\n", 400},
        {"Transfer-Encoding: ,\r\n", 400},
        {"Transfer-Encoding: chunked\r\nContent-Length: 18\r\n", 400},
        {"Transfer-Encoding: chunked \r\n", 400},
        {"Transfer-Encoding: chunked;x=1\r\n", 400},
        {"Transfer-Encoding: chunked,\r\n", 400},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char head[512];
        snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
                 "Host: x\r\nContent-Type: text/plain\r\n%s\r\n", cases[k].headers);
        double t0 = tt_now_s();
        tt_resp r = exchange(NULL, head, chunked_body, sizeof chunked_body - 1);
        ck_assert_msg(r.status == cases[k].status, "%s: status %ld, expected %ld (%.2f s)",
                      cases[k].headers, r.status, cases[k].status, tt_now_s() - t0);
        tt_assert_problem(cases[k].headers, &r, cases[k].status, "Transfer-Encoding");
        ck_assert_str_eq(r.connection, "close");
        ck_assert_double_lt(tt_now_s() - t0, 1.0 * tt_time_scale());
        tt_resp_free(&r);
    }
    /* A GET with a coding is refused the same way. */
    tt_resp r = exchange(NULL, "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
                         NULL, 0);
    tt_assert_problem("GET identity", &r, 400, "Transfer-Encoding");
    tt_resp_free(&r);
    /* HTTP/1.0 has no transfer codings. */
    r = exchange(NULL, "POST /api/v1/cutout?dataset=horsehead HTTP/1.0\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n", chunked_body, sizeof chunked_body - 1);
    tt_assert_problem("HTTP/1.0 chunked", &r, 400, "Transfer-Encoding");
    tt_resp_free(&r);
    /* Plain chunked, in any case, reaches the handler: the body is parsed (and refused
     * as a header). */
    static const char *const fine[] = {"chunked", "Chunked", "CHUNKED", "  chunked"};
    for (size_t k = 0; k < sizeof fine / sizeof fine[0]; k++) {
        char head[512];
        snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
                 "Host: x\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                 "Transfer-Encoding: %s\r\n\r\n", fine[k]);
        r = exchange(NULL, head, chunked_body, sizeof chunked_body - 1);
        tt_assert_problem(fine[k], &r, 400, "body");
        tt_resp_free(&r);
    }
    double dt;
    r = healthz_from(NULL, &dt);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}
END_TEST

/* ---- the length of the request target -------------------------------------------------- */

START_TEST(test_target_length)
{
    start_server(&plain);
    /* 4096 bytes of target are served, 4097 are not; the query counts. */
    char *target = malloc(300 * 1024);
    static const char prefix[] = "/healthz?pad=";
    memcpy(target, prefix, sizeof prefix - 1);
    memset(target + sizeof prefix - 1, 'a', 300 * 1024 - sizeof prefix);
    char *head = malloc(320 * 1024);
    static const size_t lens[] = {4096, 4097, 5000, 200 * 1024};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        snprintf(head, 320 * 1024, "GET %.*s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 (int)lens[k], target);
        tt_resp r = exchange(NULL, head, NULL, 0);
        char what[64];
        snprintf(what, sizeof what, "a target of %zu bytes", lens[k]);
        if (lens[k] <= 4096) {
            ck_assert_msg(r.status == 200, "%s: %ld", what, r.status);
        } else {
            tt_assert_problem(what, &r, 414, NULL);
            ck_assert_ptr_nonnull(strstr(r.body, "4096"));
        }
        tt_resp_free(&r);
    }
    /* A long target with a body: refused before the body is read. */
    snprintf(head, 320 * 1024, "POST /api/v1/cutout?dataset=horsehead&pad=%.5000s HTTP/1.1\r\n"
             "Host: x\r\nContent-Type: text/plain\r\nContent-Length: 10000000\r\n\r\n", target);
    double t0 = tt_now_s();
    tt_resp r = exchange(NULL, head, NULL, 0);
    tt_assert_problem("long target with a body", &r, 414, NULL);
    ck_assert_str_eq(r.connection, "close");
    ck_assert_double_lt(tt_now_s() - t0, 1.0 * tt_time_scale());
    tt_resp_free(&r);
    free(head);
    free(target);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hostile_http");
    TCase *tc = tcase_create("hostile_http");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transfer_encodings);
    tcase_add_test(tc, test_target_length);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
