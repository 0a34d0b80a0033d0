/* Test helpers for the HTTP tests: libcurl requests, problem+json and PNG checks. */
#include "tests/testutil.h"

#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
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
    header_value(p, len, "Allow", r->allow, sizeof(r->allow));
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
