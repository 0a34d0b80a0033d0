/* Hostile use of HTTP itself against tesserad in-process (demo data, port 0): transfer
 * codings the server does not implement, request targets past the 414 limit, clients
 * that trickle their headers, floods of connections from one address (held or thrown
 * away) and uploads that together pass the request-body budget.  Each test starts its
 * own server with the limits it exercises; requests go over raw sockets with receive
 * timeouts, so no test can hang. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/peercount.h"

#include <netinet/in.h>
#include "tests/testutil.h"

static tess_config cfg;
static tserver *srv;
static int port;

/* The limits a test runs its server with. */
typedef struct limits {
    int max_connections;
    int per_address;          /* limits.max_connections_per_address */
    int connection_timeout_s;
    int header_timeout_s;
    size_t max_body_mb;
    size_t max_bodies_mb;
} limits;

/* The error log of the next start_server, or NULL for none. */
static const char *error_log_path;

static void start_server(const limits *l)
{
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof err), 0);
    cfg.threads = 2;
    cfg.max_connections = l->max_connections;
    cfg.max_connections_per_address = l->per_address;
    cfg.connection_timeout_s = l->connection_timeout_s;
    cfg.header_timeout_s = l->header_timeout_s;
    cfg.max_body_mb = l->max_body_mb;
    cfg.max_bodies_mb = l->max_bodies_mb;
    free(cfg.error_log);
    cfg.error_log = error_log_path ? strdup(error_log_path) : NULL;
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    port = tserver_port(srv);
}

/* The defaults of config_init, shorter timeouts. */
static const limits plain = {256, 128, 10, 10, 64, 256};

static void setup(void)
{
    srv = NULL;
    error_log_path = NULL;
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

/* The value of the sample `name` (no labels) in /metrics, or -1 when absent. */
static double metric(const char *name)
{
    tt_resp r = exchange("127.0.0.3", "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         NULL, 0);
    ck_assert_int_eq(r.status, 200);
    double v = -1;
    size_t n = strlen(name);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    tt_resp_free(&r);
    return v;
}

/* Waits up to `limit` seconds (times tt_time_scale) for metric `name` to equal `want`;
 * returns its last value. */
static double wait_metric(const char *name, double want, double limit)
{
    double t0 = tt_now_s(), v = metric(name);
    while (v != want && tt_now_s() - t0 < limit * tt_time_scale()) {
        usleep(50000);
        v = metric(name);
    }
    return v;
}

/* ---- transfer codings ------------------------------------------------------------------ */

/* A 501 for a coding the client sent is its own doing: counted in /metrics, never written
 * to the error log (which any client could fill otherwise). */
START_TEST(test_unsupported_coding_not_error_logged)
{
    char dir[256], log[PATH_MAX];
    tt_tmpdir_make(dir, sizeof dir, "telog");
    snprintf(log, sizeof log, "%s/error.log", dir);
    error_log_path = log;
    start_server(&plain);
    for (int k = 0; k < 3; k++) {
        tt_resp r = exchange(NULL, "POST /api/v1/cutout?dataset=horsehead HTTP/1.1\r\nHost: x\r\n"
                             "Transfer-Encoding: gzip, chunked\r\n\r\n", "0\r\n\r\n", 5);
        tt_assert_problem("gzip, chunked", &r, 501, "Transfer-Encoding");
        tt_resp_free(&r);
    }
    ck_assert_double_eq(wait_metric("tessera_http_requests_total{code=\"501\"}", 3, 2.0), 3);
    FILE *f = fopen(log, "r");
    char line[4096] = "";
    if (f) {
        size_t n = fread(line, 1, sizeof line - 1, f);
        line[n] = '\0';
        fclose(f);
    }
    ck_assert_msg(!strstr(line, "501") && !strstr(line, "http_error"),
                  "the error log holds client-caused 501s: %s", line);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

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
    /* Plain chunked, in any case (coding names are case-insensitive, RFC 9110 section
     * 10.1.4), reaches the handler: a garbage body is parsed (and refused as a header), and
     * a header sent in two chunks is decoded and answered with its cutout. */
    static const char *const fine[] = {"chunked", "Chunked", "CHUNKED", "cHuNkEd", "  chunked"};
    static const char hdr1[] = "SIMPLE  =                    T\nBITPIX  =                  -32\n"
                               "NAXIS   =                    2\nNAXIS1  =                   24\n"
                               "NAXIS2  =                   16\n";
    static const char hdr2[] = "CTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\n"
                               "CRVAL1  =                85.27\nCRVAL2  =                -2.46\n"
                               "CRPIX1  =                 12.5\nCRPIX2  =                  8.5\n"
                               "CDELT1  =              -0.0005\nCDELT2  =               0.0005\n"
                               "END\n";
    char good[1024];
    int glen = snprintf(good, sizeof good, "%zx\r\n%s\r\n%zx\r\n%s\r\n0\r\n\r\n",
                        sizeof hdr1 - 1, hdr1, sizeof hdr2 - 1, hdr2);
    ck_assert_int_lt(glen, (int)sizeof good);
    for (size_t k = 0; k < sizeof fine / sizeof fine[0]; k++) {
        char head[512];
        snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
                 "Host: x\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                 "Transfer-Encoding: %s\r\n\r\n", fine[k]);
        r = exchange(NULL, head, chunked_body, sizeof chunked_body - 1);
        tt_assert_problem(fine[k], &r, 400, "body");
        tt_resp_free(&r);
        r = exchange(NULL, head, good, (size_t)glen);
        ck_assert_msg(r.status == 200, "%s: status %ld", fine[k], r.status);
        ck_assert_uint_eq(r.len % 2880, 0);   /* a FITS file of the header's 24 x 16 */
        ck_assert_int_eq(memcmp(r.body, "SIMPLE  =", 9), 0);
        ck_assert_ptr_nonnull(memmem(r.body, r.len, "NAXIS1  =                   24", 30));
        ck_assert_ptr_nonnull(memmem(r.body, r.len, "NAXIS2  =                   16", 30));
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

/* ---- the header deadline ------------------------------------------------------------- */

START_TEST(test_header_deadline)
{
    /* Trickling one byte every 250 ms is never idle for connection_timeout_s. */
    const limits l = {256, 64, 3, 2, 64, 256};
    start_server(&l);
    const double ts = tt_time_scale();
    double t0 = tt_now_s();
    /* a: a fresh connection trickling its headers. */
    int a = tt_raw_connect(port, NULL, 5);
    static const char start_a[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ck_assert_int_eq(tt_send_all(a, start_a, sizeof start_a - 1), 0);
    /* b: answered once, then trickling the next request line; c: answered once, idle
     * past header_timeout_s (under connection_timeout_s), then a whole request. */
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    int b = tt_raw_connect(port, NULL, 5), c = tt_raw_connect(port, NULL, 5);
    for (int i = 0; i < 2; i++) {
        int fd = i ? c : b;
        ck_assert_int_eq(tt_send_all(fd, req, sizeof req - 1), 0);
        tt_resp r = tt_raw_read(fd);
        ck_assert_int_eq(r.status, 200);
        tt_resp_free(&r);
    }
    double answered = tt_now_s();
    double closed_a = -1, closed_b = -1;
    int c_done = 0;
    static const char line_b[] = "GET /healthz?trickled=1 HTTP/1.1\r\n";
    for (size_t i = 0; tt_now_s() - t0 < 3 + 2 + 3 * ts && (closed_a < 0 || closed_b < 0); i++) {
        if (closed_a < 0 && send(a, "a", 1, MSG_NOSIGNAL) != 1)
            closed_a = tt_now_s() - t0;
        if (closed_b < 0 && send(b, line_b + i % (sizeof line_b - 1), 1, MSG_NOSIGNAL) != 1)
            closed_b = tt_now_s() - answered;
        if (!c_done && tt_now_s() - answered > 2.5) {
            ck_assert_int_eq(tt_send_all(c, req, sizeof req - 1), 0);
            tt_resp r = tt_raw_read(c);
            ck_assert_msg(r.status == 200, "kept-alive connection idle 2.5 s: %ld", r.status);
            tt_resp_free(&r);
            c_done = 1;
        }
        /* A closed connection shows as a failing send only after the RST it causes. */
        char junk[64];
        if (closed_a < 0 && recv(a, junk, sizeof junk, MSG_DONTWAIT) == 0)
            closed_a = tt_now_s() - t0;
        if (closed_b < 0 && recv(b, junk, sizeof junk, MSG_DONTWAIT) == 0)
            closed_b = tt_now_s() - answered;
        usleep(250000);
    }
    /* Others are served meanwhile and after. */
    double dt;
    tt_resp r = healthz_from(NULL, &dt);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
    ck_assert_msg(closed_a >= 0, "a client trickling its headers was never cut");
    ck_assert_msg(closed_a > 1.5 && closed_a < 2 + 1.5 * ts,
                  "trickled headers cut after %.2f s (limits.header_timeout_s = 2)", closed_a);
    /* A kept-alive connection: the next request line within connection_timeout_s, its
     * headers within header_timeout_s of it. */
    ck_assert_msg(closed_b >= 0, "a kept-alive client trickling its request line was never cut");
    ck_assert_msg(closed_b > 2.5 && closed_b < 3 + 2 + 1.5 * ts,
                  "trickled request line cut %.2f s after the previous answer", closed_b);
    ck_assert(c_done);
    ck_assert_double_ge(metric("tessera_http_header_timeouts_total"), 2);
    close(a);
    close(b);
    close(c);
}
END_TEST

/* ---- connections from one address ------------------------------------------------------ */

/* Whether the server has closed `fd` (EOF or reset waiting to be read). */
static int is_closed(int fd)
{
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

enum { FLOOD = 40 };

/* FLOOD connections from 127.0.0.1, each sending `partial` (and closing at once when
 * `throwaway`); then a client on 127.0.0.2 must get /healthz at once. */
static void flood_then_healthz(const char *partial, int throwaway, int *fds)
{
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = tt_raw_connect(port, "127.0.0.1", 5);
        tt_send_all(fds[i], partial, strlen(partial));
        if (throwaway) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    usleep(200000);
    double dt;
    tt_resp r = healthz_from("127.0.0.2", &dt);
    ck_assert_msg(r.status == 200, "another address after %d connections from 127.0.0.1: %ld %s",
                  FLOOD, r.status, r.body ? r.body : "");
    ck_assert_double_lt(dt, 1.0 * tt_time_scale());
    tt_resp_free(&r);
}

START_TEST(test_per_address_limit)
{
    const limits l = {16, 8, 10, 10, 64, 256};
    start_server(&l);
    int fds[FLOOD];
    flood_then_healthz("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a", 0, fds);
    /* Of the flood, limits.max_connections_per_address are kept; the others were closed
     * at the accept (past 8 + 16 + 8/4 from the address) or, sending no whole request
     * head, after OVER_ADDRESS_HEAD_S (1 s). */
    int open_count = FLOOD;
    int closed[FLOOD] = {0};
    for (double t0 = tt_now_s(); open_count > 8 && tt_now_s() - t0 < 2 * tt_time_scale();) {
        for (int i = 0; i < FLOOD; i++)
            if (!closed[i] && is_closed(fds[i])) {
                closed[i] = 1;
                open_count--;
            }
        usleep(20000);
    }
    ck_assert_int_eq(open_count, 8);
    ck_assert_double_eq(wait_metric("tessera_http_open_connections", 8 + 1, 2), 8 + 1);
    /* One more from 127.0.0.1 is answered 503, naming the limit. */
    int extra = tt_raw_connect(port, "127.0.0.1", 5);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    tt_send_all(extra, req, sizeof req - 1);
    tt_resp r = tt_raw_read(extra);
    tt_assert_problem("past max_connections_per_address", &r, 503, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "limits.max_connections_per_address = 8"));
    tt_resp_free(&r);
    close(extra);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    /* Once they are gone, 127.0.0.1 is served again. */
    ck_assert_double_eq(wait_metric("tessera_http_open_connections", 1, 3), 1);
    double dt;
    r = healthz_from("127.0.0.1", &dt);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}
END_TEST

/* GET /healthz on a new connection from `src`, kept open: the answer, the socket in *fd. */
static tt_resp healthz_kept(const char *src, int *fd)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    *fd = tt_raw_connect(port, src, 5);
    ck_assert_int_eq(tt_send_all(*fd, req, sizeof req - 1), 0);
    return tt_raw_read(*fd);
}

START_TEST(test_per_address_503)
{
    enum { LIMIT = 4, MORE = 6 };
    const limits l = {64, LIMIT, 10, 10, 64, 256};
    start_server(&l);
    /* LIMIT connections from 127.0.0.1, each answered 200 and kept alive. */
    int held[LIMIT], over[MORE];
    for (int i = 0; i < LIMIT; i++) {
        tt_resp r = healthz_kept("127.0.0.1", &held[i]);
        ck_assert_msg(r.status == 200, "connection %d of %d: %ld", i + 1, LIMIT, r.status);
        tt_resp_free(&r);
    }
    /* MORE beyond them: each request gets a 503 problem document naming the limit,
     * Retry-After and Connection: close, and the connection is closed after it. */
    for (int i = 0; i < MORE; i++) {
        tt_resp r = healthz_kept("127.0.0.1", &over[i]);
        tt_assert_problem("past max_connections_per_address", &r, 503, NULL);
        ck_assert_ptr_nonnull(strstr(r.body, "limits.max_connections_per_address = 4"));
        ck_assert_str_eq(r.retry_after, "1");
        ck_assert_str_eq(r.connection, "close");
        tt_resp_free(&r);
    }
    /* Another address is served meanwhile. */
    int other;
    tt_resp r = healthz_kept("127.0.0.2", &other);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
    close(other);
    ck_assert_double_eq(metric("tessera_http_per_address_refused_total"), MORE);
    /* The connections within the limit still answer. */
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(tt_send_all(held[0], req, sizeof req - 1), 0);
    r = tt_raw_read(held[0]);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
    /* Once all close, the counts return to zero: the only address left is that of the
     * /metrics request itself, and 127.0.0.1 gets LIMIT connections again. */
    for (int i = 0; i < MORE; i++)
        close(over[i]);
    for (int i = 0; i < LIMIT; i++)
        close(held[i]);
    ck_assert_double_eq(wait_metric("tessera_http_open_connections", 1, 3), 1);
    ck_assert_double_eq(metric("tessera_http_client_addresses"), 1);
    for (int i = 0; i < LIMIT; i++) {
        r = healthz_kept("127.0.0.1", &held[i]);
        ck_assert_int_eq(r.status, 200);
        tt_resp_free(&r);
    }
    for (int i = 0; i < LIMIT; i++)
        close(held[i]);
}
END_TEST

/* The address table against a plain count, through insertions and removals in a
 * shuffled order that make long probe runs in a small table (backward-shift deletion). */
START_TEST(test_peercount_table)
{
    enum { N = 24, ROUNDS = 6 };
    peercount *pc = peercount_new(N);
    ck_assert_ptr_nonnull(pc);
    struct sockaddr_in a[N];
    unsigned want[N] = {0};
    peer_key keys[N][ROUNDS];
    for (int i = 0; i < N; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].sin_family = AF_INET;
        a[i].sin_addr.s_addr = htonl(0x0a000000u + (unsigned)i * 7919u);
    }
    unsigned seed = 12345;
    for (int k = 0; k < ROUNDS; k++)
        for (int i = 0; i < N; i++) {
            unsigned n = peercount_add(pc, (struct sockaddr *)&a[i], sizeof a[i], &keys[i][k]);
            ck_assert_uint_eq(n, ++want[i]);
        }
    ck_assert_uint_eq(peercount_addresses(pc), N);
    /* An IPv4-mapped IPv6 address is its IPv4 address. */
    struct sockaddr_in6 m;
    memset(&m, 0, sizeof m);
    m.sin6_family = AF_INET6;
    m.sin6_addr.s6_addr[10] = m.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&m.sin6_addr.s6_addr[12], &a[3].sin_addr, 4);
    ck_assert_uint_eq(peercount_get(pc, (struct sockaddr *)&m, sizeof m), ROUNDS);
    int left[N];
    for (int i = 0; i < N; i++)
        left[i] = ROUNDS;
    for (int removed = 0; removed < N * ROUNDS;) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)((seed >> 16) % N);
        if (!left[i])
            continue;
        peercount_remove(pc, &keys[i][--left[i]]);
        want[i]--;
        removed++;
        for (int j = 0; j < N; j++)
            ck_assert_uint_eq(peercount_get(pc, (struct sockaddr *)&a[j], sizeof a[j]), want[j]);
    }
    ck_assert_uint_eq(peercount_addresses(pc), 0);
    peercount_free(pc);
}
END_TEST

START_TEST(test_throwaway_connections)
{
    /* Part of a request and the FIN at once: libmicrohttpd does not see that FIN, so
     * such connections last until a timeout. */
    const limits l = {16, 8, 10, 1, 64, 256};
    start_server(&l);
    int fds[FLOOD];
    flood_then_healthz("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Gone: a", 1, fds);
    /* The ones kept go at the header deadline, not after connection_timeout_s. */
    ck_assert_double_eq(wait_metric("tessera_http_open_connections", 1, 2.5), 1);
}
END_TEST

/* ---- the request-body budget ----------------------------------------------------------- */

/* A connection that sent the head of an upload of `declared` bytes and `sent` bytes of
 * it, then stalls. */
static int stalled_upload(size_t declared, size_t sent)
{
    int fd = tt_raw_connect(port, NULL, 5);
    char head[512];
    snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
             "Host: x\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n", declared);
    ck_assert_int_eq(tt_send_all(fd, head, strlen(head)), 0);
    char *part = calloc(1, sent);
    ck_assert_int_eq(tt_send_all(fd, part, sent), 0);
    free(part);
    return fd;
}

START_TEST(test_body_budget)
{
    const limits l = {256, 64, 10, 10, 3, 4};
    start_server(&l);
    const double mb = 1024.0 * 1024.0;
    /* Two stalled uploads of 2 MB hold the whole budget of 4 MB. */
    int s1 = stalled_upload(2 << 20, 65536), s2 = stalled_upload(2 << 20, 65536);
    ck_assert_double_ge(wait_metric("tessera_http_body_bytes", 4 * mb, 2), 4 * mb - 2);
    /* A third, of 1 MB: 503 at once, before its body is sent. */
    char head[512];
    snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
             "Host: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", 1 << 20);
    double t0 = tt_now_s();
    tt_resp r = exchange(NULL, head, NULL, 0);
    tt_assert_problem("upload past limits.max_bodies_mb", &r, 503, "body");
    ck_assert_ptr_nonnull(strstr(r.body, "limits.max_bodies_mb"));
    ck_assert_str_eq(r.retry_after, "1");
    ck_assert_str_eq(r.connection, "close");
    ck_assert_double_lt(tt_now_s() - t0, 1.0 * tt_time_scale());
    tt_resp_free(&r);
    /* Over limits.max_body_mb alone: 413 as before. */
    snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
             "Host: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", 4 << 20);
    r = exchange(NULL, head, NULL, 0);
    tt_assert_problem("upload past limits.max_body_mb", &r, 413, "body");
    tt_resp_free(&r);
    /* A chunked upload (no length declared) is counted as it arrives: 503 after it. */
    static const char chunked[] = "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
                                  "Host: x\r\nContent-Type: text/plain\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n";
    size_t clen = 7 + 65536 + 7;
    char *cbody = malloc(clen);
    memcpy(cbody, "10000\r\n", 7);
    memset(cbody + 7, ' ', 65536);
    memcpy(cbody + 7 + 65536, "\r\n0\r\n\r\n", 7);
    r = exchange(NULL, chunked, cbody, clen);
    tt_assert_problem("chunked upload past limits.max_bodies_mb", &r, 503, "body");
    tt_resp_free(&r);
    /* The stalled uploads die (truncated): their budget comes back. */
    usleep(100000);
    close(s1);
    close(s2);
    ck_assert_double_eq(wait_metric("tessera_http_body_bytes", 0, 3), 0);
    /* A whole upload of 2 MB reaches its handler (its body is no header: 400). */
    char *body = malloc(2 << 20);
    memset(body, ' ', 2 << 20);
    snprintf(head, sizeof head, "POST /api/v1/cutout?dataset=horsehead&format=fits HTTP/1.1\r\n"
             "Host: x\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n",
             2 << 20);
    r = exchange(NULL, head, body, 2 << 20);
    tt_assert_problem("2 MB upload", &r, 400, "body");
    tt_resp_free(&r);
    r = exchange(NULL, chunked, cbody, clen);
    tt_assert_problem("chunked upload", &r, 400, "body");
    tt_resp_free(&r);
    free(body);
    free(cbody);
    ck_assert_double_eq(wait_metric("tessera_http_body_bytes", 0, 3), 0);
}
END_TEST

/* ---- the configuration keys ---------------------------------------------------------- */

START_TEST(test_config_limits)
{
    tess_config c;
    char err[256];
    ck_assert_int_eq(config_init(&c), 0);
    ck_assert_int_eq(c.max_connections_per_address, 128);
    ck_assert_int_eq(c.header_timeout_s, 10);
    ck_assert_uint_eq(c.max_bodies_mb, 256);
    ck_assert_msg(config_load_text("{\"limits\": {\"max_connections_per_address\": 4, "
                                   "\"header_timeout_s\": 3, \"max_bodies_mb\": 100}}",
                                   &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.max_connections_per_address, 4);
    ck_assert_int_eq(c.header_timeout_s, 3);
    ck_assert_uint_eq(c.max_bodies_mb, 100);
    config_release(&c);
    /* Unset, the budget grows to hold one body of max_body_mb. */
    ck_assert_int_eq(config_init(&c), 0);
    ck_assert_msg(config_load_text("{\"limits\": {\"max_body_mb\": 1000}}", &c, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(c.max_bodies_mb, 1000);
    config_release(&c);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"limits\": {\"max_body_mb\": 100, \"max_bodies_mb\": 99}}", "limits.max_bodies_mb (99)"},
        {"{\"limits\": {\"max_bodies_mb\": 0}}", "limits.max_bodies_mb"},
        {"{\"limits\": {\"max_connections_per_address\": 0}}", "limits.max_connections_per_address"},
        {"{\"limits\": {\"header_timeout_s\": 0}}", "limits.header_timeout_s"},
        {"{\"limits\": {\"header_timeout_s\": \"10\"}}", "limits.header_timeout_s"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(config_init(&c), 0);
        err[0] = '\0';
        ck_assert_int_ne(config_load_text(bad[i].json, &c, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad[i].needle) != NULL, "%s: '%s' lacks '%s'", bad[i].json, err,
                      bad[i].needle);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hostile_http");
    TCase *tc = tcase_create("hostile_http");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transfer_encodings);
    tcase_add_test(tc, test_unsupported_coding_not_error_logged);
    tcase_add_test(tc, test_target_length);
    tcase_add_test(tc, test_header_deadline);
    tcase_add_test(tc, test_per_address_limit);
    tcase_add_test(tc, test_per_address_503);
    tcase_add_test(tc, test_peercount_table);
    tcase_add_test(tc, test_throwaway_connections);
    tcase_add_test(tc, test_body_budget);
    tcase_add_test(tc, test_config_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
