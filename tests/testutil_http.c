/* Test helpers for the HTTP tests: libcurl and raw-socket requests, problem+json and PNG checks. */
#include "tests/testutil.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static size_t on_body(char *p, size_t sz, size_t n, void *cls)
{
    tt_resp *r = cls;
    size_t add = sz * n;
    if (!r->body)
        r->cap = 0;
    /* Doubling: a realloc for every chunk copies the whole body each time under valgrind
     * (its realloc always moves), quadratic in the size of the answer. */
    if (r->len + add + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 65536;
        while (cap < r->len + add + 1)
            cap *= 2;
        char *nb = realloc(r->body, cap);
        if (!nb)
            return 0;
        r->body = nb;
        r->cap = cap;
    }
    memcpy(r->body + r->len, p, add);
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

/* Copies the value of header line `line` (n bytes) into out when the line is `name`. */
static void header_value(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
    size_t k = strlen(name);
    if (n > k + 1 && strncasecmp(line, name, k) == 0 && line[k] == ':') {
        const char *v = line + k + 1;
        while (*v == ' ')
            v++;
        size_t m = (size_t)(line + n - v);
        while (m > 0 && (v[m - 1] == '\r' || v[m - 1] == '\n'))
            m--;
        if (m >= outlen)
            m = outlen - 1;
        memcpy(out, v, m);
        out[m] = '\0';
    }
}

static size_t on_header(char *p, size_t sz, size_t n, void *cls)
{
    tt_resp *r = cls;
    size_t len = sz * n;
    header_value(p, len, "Content-Type", r->content_type, sizeof(r->content_type));
    header_value(p, len, "ETag", r->etag, sizeof(r->etag));
    header_value(p, len, "X-Cache", r->x_cache, sizeof(r->x_cache));
    header_value(p, len, "Access-Control-Allow-Origin", r->acao, sizeof(r->acao));
    header_value(p, len, "Retry-After", r->retry_after, sizeof(r->retry_after));
    header_value(p, len, "Location", r->location, sizeof(r->location));
    header_value(p, len, "Content-Disposition", r->disposition, sizeof(r->disposition));
    header_value(p, len, "Content-Encoding", r->content_encoding, sizeof(r->content_encoding));
    header_value(p, len, "Vary", r->vary, sizeof(r->vary));
    header_value(p, len, "Allow", r->allow, sizeof(r->allow));
    header_value(p, len, "Accept-Ranges", r->accept_ranges, sizeof(r->accept_ranges));
    header_value(p, len, "Content-Range", r->content_range, sizeof(r->content_range));
    header_value(p, len, "Last-Modified", r->last_modified, sizeof(r->last_modified));
    header_value(p, len, "Link", r->link, sizeof(r->link));
    return len;
}

void tt_curl_capture(void *curl, tt_resp *r)
{
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, r);
    /* 60 s, longer under valgrind (tt_time_scale). */
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)(60.0 * tt_time_scale()));
}

tt_resp tt_fetch(const char *base, const char *method, const char *path, const char *body,
                 size_t len, const char *extra_header)
{
    tt_resp r;
    memset(&r, 0, sizeof(r));
    char url[8192];
    snprintf(url, sizeof(url), "%s%s", base, path);
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    tt_curl_capture(c, &r);
    struct curl_slist *hl = NULL;
    if (extra_header)
        hl = curl_slist_append(hl, extra_header);
    if (body) {
        hl = curl_slist_append(hl, "Content-Type: text/plain");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    if (hl)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode cc = curl_easy_perform(c);
    ck_assert_msg(cc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

void tt_resp_free(tt_resp *r)
{
    free(r->body);
    r->body = NULL;
    r->len = 0;
    r->cap = 0;
}

void tt_assert_problem(const char *path, const tt_resp *r, long status, const char *parameter)
{
    if (!path)
        path = "request";
    ck_assert_msg(r->status == status, "%s: status %ld, expected %ld: %s", path, r->status,
                  status, r->body ? r->body : "");
    ck_assert_str_eq(r->content_type, "application/problem+json");
    json_error_t je;
    json_t *o = json_loads(r->body, 0, &je);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), status);
    ck_assert(json_is_string(json_object_get(o, "title")));
    /* The title is the status's reason phrase (RFC 9110), never a generic word. */
    ck_assert_msg(strcmp(json_string_value(json_object_get(o, "title")), "Error") != 0,
                  "%s: status %ld has no reason phrase as its title", path, status);
    ck_assert(json_string_length(json_object_get(o, "detail")) > 0);
    /* hips2fits' member for the same text (astroquery prints it). */
    ck_assert_str_eq(json_string_value(json_object_get(o, "description")),
                     json_string_value(json_object_get(o, "detail")));
    if (parameter) {
        const char *p = json_string_value(json_object_get(o, "parameter"));
        ck_assert_msg(p && strcmp(p, parameter) == 0, "%s: parameter %s, expected %s", path,
                      p ? p : "(none)", parameter);
    }
    json_decref(o);
}

void tt_png_size(const tt_resp *r, long *w, long *h)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ck_assert_uint_ge(r->len, 24);
    ck_assert_int_eq(memcmp(r->body, sig, 8), 0);
    ck_assert_int_eq(memcmp(r->body + 12, "IHDR", 4), 0);
    const unsigned char *p = (const unsigned char *)r->body + 16;
    *w = (long)p[0] << 24 | (long)p[1] << 16 | (long)p[2] << 8 | p[3];
    *h = (long)p[4] << 24 | (long)p[5] << 16 | (long)p[6] << 8 | p[7];
}

int tt_fork_server(int (*start)(void *arg), void *arg, char *base, size_t len)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pfd[0]);
        int port = start(arg);
        ssize_t w = write(pfd[1], &port, sizeof(port));
        (void)w;
        for (;;)
            pause();
    }
    close(pfd[1]);
    int port = 0;
    ck_assert_int_eq(read(pfd[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    close(pfd[0]);
    snprintf(base, len, "http://127.0.0.1:%d", port);
    return pid;
}

/* ---- a raw HTTP/1.1 client --------------------------------------------------------- */

int tt_raw_connect(int port, const char *src, double timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    timeout_s *= tt_time_scale();
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    if (src) {
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, src, &a.sin_addr), 1);
        ck_assert_msg(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind %s: %s", src,
                      strerror(errno));
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

int tt_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

tt_resp tt_raw_read(int fd)
{
    tt_resp r;
    memset(&r, 0, sizeof r);
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    ck_assert_ptr_nonnull(b);
    long clen = -1;
    size_t body = 0;          /* offset of the body in b; 0 until the head is complete */
    for (;;) {
        if (len == cap) {
            cap *= 2;
            b = realloc(b, cap + 1);
            ck_assert_ptr_nonnull(b);
        }
        ssize_t n = recv(fd, b + len, cap - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        b[len] = '\0';
        while (!body) {
            char *eoh = strstr(b, "\r\n\r\n");
            if (!eoh)
                break;
            body = (size_t)(eoh + 4 - b);
            /* Parse the head once. */
            *eoh = '\0';
            sscanf(b, "HTTP/1.%*d %ld", &r.status);
            if (r.status >= 100 && r.status < 200) {
                len -= body;
                memmove(b, b + body, len + 1);
                body = 0;
                r.status = 0;
                continue;
            }
            for (char *line = strstr(b, "\r\n"); line && line < eoh; line = strstr(line + 2, "\r\n")) {
                char *h = line + 2;
                if (strncasecmp(h, "Content-Length:", 15) == 0)
                    clen = strtol(h + 15, NULL, 10);
                else if (strncasecmp(h, "Content-Type:", 13) == 0)
                    sscanf(h + 13, " %127[^\r]", r.content_type);
                else if (strncasecmp(h, "Retry-After:", 12) == 0)
                    sscanf(h + 12, " %15[^\r]", r.retry_after);
                else if (strncasecmp(h, "Connection:", 11) == 0)
                    sscanf(h + 11, " %31[^\r]", r.connection);
            }
            *eoh = '\r';
        }
        if (body && clen >= 0 && len - body >= (size_t)clen)
            break;
    }
    if (body) {
        size_t blen = len - body;
        if (clen >= 0 && (size_t)clen < blen)
            blen = (size_t)clen;
        r.body = malloc(blen + 1);
        memcpy(r.body, b + body, blen);
        r.body[blen] = '\0';
        r.len = blen;
    } else {
        r.status = 0;
    }
    free(b);
    return r;
}

double tt_wait_closed(int fd, double limit)
{
    double t0 = tt_now_s();
    char b[4096];
    while (tt_now_s() - t0 < limit) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0) {
            ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                return tt_now_s() - t0;
        }
    }
    return -1;
}
