/* HTTP tests of the viewer's static files (daemon/api/viewer.c): GET /, /viewer/{path},
 * /vendor/{package}/{path}; content types, ETag/304, Cache-Control, and that no path
 * leaves the viewer directory or the whitelisted packages.  tesserad in-process on port 0
 * with a scratch viewer directory and a scratch node_modules. */
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "daemon/api/handlers.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "tests/testutil.h"

static tess_config cfg;
static tserver *srv;
static char base[64];
static char top[512];   /* scratch root: top/viewer, top/node_modules, top/secret.txt */

static const char INDEX_HTML[] = "<!doctype html><title>t</title><p>viewer index</p>\n";
static const char APP_JS[] = "console.log('app');\n";
static const char SECRET[] = "not to be served\n";
static const char ALADIN_JS[] = "export default {};\n";

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
}

static void mkdir_in(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    ck_assert_msg(mkdir(p, 0755) == 0, "cannot make %s", p);
}

static void setup(void)
{
    char err[512], p[1024], q[1024];
    tt_tmpdir_make(top, sizeof(top), "viewer");
    mkdir_in(top, "viewer");
    mkdir_in(top, "node_modules");
    mkdir_in(top, "node_modules/aladin-lite");
    mkdir_in(top, "node_modules/aladin-lite/dist");
    mkdir_in(top, "node_modules/other");
    snprintf(p, sizeof(p), "%s/viewer", top);
    write_file(p, "index.html", INDEX_HTML);
    write_file(p, "app.js", APP_JS);
    write_file(p, ".hidden.js", APP_JS);
    write_file(p, "run.sh", "#!/bin/sh\n");
    write_file(top, "secret.txt", SECRET);
    /* A link inside the viewer directory to a file outside it. */
    snprintf(q, sizeof(q), "%s/viewer/link.txt", top);
    snprintf(p, sizeof(p), "%s/secret.txt", top);
    ck_assert_int_eq(symlink(p, q), 0);
    snprintf(p, sizeof(p), "%s/node_modules/aladin-lite/dist", top);
    write_file(p, "aladin.js", ALADIN_JS);
    snprintf(p, sizeof(p), "%s/node_modules/aladin-lite", top);
    write_file(p, "package.json", "{}\n");
    snprintf(p, sizeof(p), "%s/node_modules/other", top);
    write_file(p, "x.js", APP_JS);

    snprintf(p, sizeof(p), "%s/viewer", top);
    setenv("TESSERA_VIEWER_DIR", p, 1);
    snprintf(p, sizeof(p), "%s/node_modules", top);
    setenv("TESSERA_NODE_MODULES", p, 1);

    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    cfg.threads = 1;
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void teardown(void)
{
    tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
    unsetenv("TESSERA_VIEWER_DIR");
    unsetenv("TESSERA_NODE_MODULES");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
    ck_assert_int_eq(system(cmd), 0);
}

/* One request with the path sent exactly as written (no dot-segment squashing by curl);
 * the Cache-Control header goes into cc (size 128) when cc is not NULL. */
static tt_resp fetch(const char *method, const char *path, const char *hdr, char *cc)
{
    tt_resp r;
    memset(&r, 0, sizeof(r));
    char url[1024];
    snprintf(url, sizeof(url), "%s%s", base, path);
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    tt_curl_capture(c, &r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *hl = hdr ? curl_slist_append(NULL, hdr) : NULL;
    if (hl)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    CURLcode rc = curl_easy_perform(c);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (cc) {
        struct curl_header *h = NULL;
        cc[0] = '\0';
        if (curl_easy_header(c, "Cache-Control", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
            snprintf(cc, 128, "%s", h->value);
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

static void assert_body(const tt_resp *r, const char *text, const char *path)
{
    ck_assert_msg(r->status == 200, "%s: %ld %s", path, r->status, r->body ? r->body : "");
    ck_assert_msg(r->len == strlen(text) && memcmp(r->body, text, r->len) == 0,
                  "%s: body differs from the file (%zu bytes)", path, r->len);
}

START_TEST(index_is_served_with_etag_and_revalidation)
{
    char cc[128];
    tt_resp r = fetch("GET", "/", NULL, cc);
    assert_body(&r, INDEX_HTML, "/");
    ck_assert_str_eq(r.content_type, "text/html; charset=utf-8");
    ck_assert_str_eq(cc, "no-cache");
    ck_assert_msg(r.etag[0] == '"', "no strong ETag: '%s'", r.etag);
    ck_assert_str_eq(r.acao, "*");
    char inm[128];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", r.etag);
    tt_resp r2 = fetch("GET", "/", inm, NULL);
    ck_assert_int_eq(r2.status, 304);
    ck_assert_uint_eq(r2.len, 0);
    /* The same file under /viewer/. */
    tt_resp r3 = fetch("GET", "/viewer/index.html", NULL, NULL);
    assert_body(&r3, INDEX_HTML, "/viewer/index.html");
    ck_assert_str_eq(r3.etag, r.etag);
    tt_resp_free(&r);
    tt_resp_free(&r2);
    tt_resp_free(&r3);
}
END_TEST

START_TEST(viewer_and_vendor_files_have_their_types)
{
    char cc[128];
    tt_resp r = fetch("GET", "/viewer/app.js", NULL, cc);
    assert_body(&r, APP_JS, "/viewer/app.js");
    ck_assert_str_eq(r.content_type, "text/javascript; charset=utf-8");
    ck_assert_str_eq(cc, "no-cache");
    tt_resp_free(&r);
    r = fetch("GET", "/vendor/aladin-lite/aladin.js", NULL, cc);
    assert_body(&r, ALADIN_JS, "/vendor/aladin-lite/aladin.js");
    ck_assert_str_eq(r.content_type, "text/javascript; charset=utf-8");
    ck_assert_str_eq(cc, "public, max-age=86400");
    tt_resp_free(&r);
    r = fetch("HEAD", "/viewer/app.js", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    tt_resp_free(&r);
}
END_TEST

/* An edited file is served fresh (the cache key holds size and mtime). */
START_TEST(edited_file_is_served_fresh)
{
    tt_resp r = fetch("GET", "/viewer/app.js", NULL, NULL);
    assert_body(&r, APP_JS, "app.js");
    char p[1024];
    snprintf(p, sizeof(p), "%s/viewer", top);
    write_file(p, "app.js", "console.log('edited, longer');\n");
    tt_resp r2 = fetch("GET", "/viewer/app.js", NULL, NULL);
    assert_body(&r2, "console.log('edited, longer');\n", "app.js after the edit");
    ck_assert_str_ne(r.etag, r2.etag);
    tt_resp_free(&r);
    tt_resp_free(&r2);
}
END_TEST

START_TEST(nothing_outside_is_reachable)
{
    static const char *const paths[] = {
        "/viewer/../secret.txt",
        "/viewer/%2e%2e/secret.txt",
        "/viewer/..%2fsecret.txt",
        "/viewer/link.txt",                 /* a link out of the directory */
        "/viewer/.hidden.js",               /* hidden files */
        "/viewer/run.sh",                   /* extension not served */
        "/viewer//app.js",
        "/viewer/app.js/",
        "/viewer/missing.js",
        "/viewer/",                         /* the index only at / and /viewer/ ... */
        "/vendor/aladin-lite/../package.json",
        "/vendor/aladin-lite/%2e%2e/package.json",
        "/vendor/other/x.js",               /* a package not in the list */
        "/vendor/aladin-lite",
        "/vendor/",
        "/viewerx/app.js",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        tt_resp r = fetch("GET", paths[i], NULL, NULL);
        if (strcmp(paths[i], "/viewer/") == 0) {
            /* ... where it is the index, not a listing. */
            assert_body(&r, INDEX_HTML, paths[i]);
        } else {
            tt_assert_problem(paths[i], &r, 404, NULL);
            ck_assert_msg(!r.body || !strstr(r.body, "not to be served"), "%s leaked", paths[i]);
        }
        tt_resp_free(&r);
    }
}
END_TEST

START_TEST(only_get_and_head)
{
    tt_resp r = fetch("POST", "/", NULL, NULL);
    tt_assert_problem("POST /", &r, 405, NULL);
    tt_resp_free(&r);
    r = fetch("DELETE", "/viewer/app.js", NULL, NULL);
    tt_assert_problem("DELETE /viewer/app.js", &r, 405, NULL);
    tt_resp_free(&r);
}
END_TEST

/* Text files go gzip-compressed to a client that takes gzip: the same bytes once
 * inflated, Vary: Accept-Encoding on both forms, an ETag of each encoding's own, 304 for
 * each; the plain form to a client that does not (or refuses it with q=0). */
START_TEST(text_files_are_sent_compressed_when_accepted)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/viewer", top);
    size_t n = 20000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = "var x = 1;\n"[i % 11];
    big[n] = '\0';
    write_file(p, "big.js", big);
    tt_resp plain = fetch("GET", "/viewer/big.js", NULL, NULL);
    assert_body(&plain, big, "/viewer/big.js");
    ck_assert_str_eq(plain.content_encoding, "");
    ck_assert_str_eq(plain.vary, "Accept-Encoding");
    tt_resp gz = fetch("GET", "/viewer/big.js", "Accept-Encoding: gzip, deflate, br", NULL);
    ck_assert_int_eq(gz.status, 200);
    ck_assert_str_eq(gz.content_encoding, "gzip");
    ck_assert_str_eq(gz.vary, "Accept-Encoding");
    ck_assert_str_eq(gz.content_type, "text/javascript; charset=utf-8");
    ck_assert_msg(gz.len < n / 10, "compressed to %zu bytes of %zu", gz.len, n);
    ck_assert_str_ne(gz.etag, plain.etag);
    char *out = malloc(n + 16);
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    ck_assert_int_eq(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = (unsigned char *)gz.body;
    zs.avail_in = (uInt)gz.len;
    zs.next_out = (unsigned char *)out;
    zs.avail_out = (uInt)(n + 16);
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.total_out, n);
    ck_assert(memcmp(out, big, n) == 0);
    inflateEnd(&zs);
    /* Revalidation with the ETag of each form. */
    char inm[160];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", gz.etag);
    CURL *c = curl_easy_init();
    tt_resp r304;
    memset(&r304, 0, sizeof(r304));
    tt_curl_capture(c, &r304);
    char url[1024];
    snprintf(url, sizeof(url), "%s/viewer/big.js", base);
    curl_easy_setopt(c, CURLOPT_URL, url);
    struct curl_slist *hl = curl_slist_append(NULL, inm);
    hl = curl_slist_append(hl, "Accept-Encoding: gzip");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r304.status);
    ck_assert_int_eq(r304.status, 304);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    tt_resp_free(&r304);
    /* gzip refused: the plain form. */
    tt_resp no = fetch("GET", "/viewer/big.js", "Accept-Encoding: gzip;q=0, identity", NULL);
    assert_body(&no, big, "/viewer/big.js");
    ck_assert_str_eq(no.content_encoding, "");
    ck_assert_str_eq(no.etag, plain.etag);
    tt_resp_free(&no);
    tt_resp_free(&plain);
    tt_resp_free(&gz);
    free(out);
    free(big);
}
END_TEST

START_TEST(accept_encoding_is_parsed)
{
    ck_assert_int_eq(viewer_accepts_gzip(NULL), 0);
    ck_assert_int_eq(viewer_accepts_gzip(""), 0);
    ck_assert_int_eq(viewer_accepts_gzip("gzip"), 1);
    ck_assert_int_eq(viewer_accepts_gzip("deflate, GZIP;q=0.5"), 1);
    ck_assert_int_eq(viewer_accepts_gzip("br"), 0);
    ck_assert_int_eq(viewer_accepts_gzip("gzip;q=0"), 0);
    ck_assert_int_eq(viewer_accepts_gzip("gzip; q=0.000, *"), 0);
    ck_assert_int_eq(viewer_accepts_gzip("*"), 1);
    ck_assert_int_eq(viewer_accepts_gzip("x-gzip"), 0);
    ck_assert_int_eq(viewer_accepts_gzip("identity;q=1, *;q=0"), 0);
}
END_TEST

START_TEST(missing_viewer_is_a_problem_not_a_blank_page)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/no-such-dir", top);
    setenv("TESSERA_VIEWER_DIR", p, 1);
    tt_resp r = fetch("GET", "/", NULL, NULL);
    tt_assert_problem("/", &r, 404, NULL);
    ck_assert_msg(r.body && strstr(r.body, "TESSERA_VIEWER_DIR"), "detail should say how to fix it: %s",
                  r.body ? r.body : "");
    tt_resp_free(&r);
}
END_TEST

/* viewer.dir and viewer.node_modules of the configuration win over the environment (set
 * by the fixture) and the installed paths. */
START_TEST(config_viewer_dirs_win_over_the_environment)
{
    char p[1024], q[1024];
    mkdir_in(top, "conf-viewer");
    mkdir_in(top, "conf-nm");
    mkdir_in(top, "conf-nm/aladin-lite");
    mkdir_in(top, "conf-nm/aladin-lite/dist");
    snprintf(p, sizeof(p), "%s/conf-viewer", top);
    write_file(p, "index.html", "<!doctype html><title>from viewer.dir</title>\n");
    snprintf(q, sizeof(q), "%s/conf-nm/aladin-lite/dist", top);
    write_file(q, "aladin.js", "/* from viewer.node_modules */\n");
    snprintf(q, sizeof(q), "%s/conf-nm", top);
    ck_assert_ptr_nonnull(cfg.viewer_dir = strdup(p));
    ck_assert_ptr_nonnull(cfg.viewer_node_modules = strdup(q));
    tt_resp r = fetch("GET", "/", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(r.body && strstr(r.body, "from viewer.dir"), "body: %s", r.body ? r.body : "");
    tt_resp_free(&r);
    r = fetch("GET", "/vendor/aladin-lite/aladin.js", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(r.body && strstr(r.body, "from viewer.node_modules"), "body: %s",
                  r.body ? r.body : "");
    tt_resp_free(&r);
}
END_TEST

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("viewer");
    TCase *tc = tcase_create("static");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, index_is_served_with_etag_and_revalidation);
    tcase_add_test(tc, config_viewer_dirs_win_over_the_environment);
    tcase_add_test(tc, viewer_and_vendor_files_have_their_types);
    tcase_add_test(tc, edited_file_is_served_fresh);
    tcase_add_test(tc, nothing_outside_is_reachable);
    tcase_add_test(tc, only_get_and_head);
    tcase_add_test(tc, missing_viewer_is_a_problem_not_a_blank_page);
    tcase_add_test(tc, text_files_are_sent_compressed_when_accepted);
    tcase_add_test(tc, accept_encoding_is_parsed);
    suite_add_tcase(s, tc);
    int rc = tt_run_suite(s);
    curl_global_cleanup();
    return rc;
}
