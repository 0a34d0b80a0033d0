/* tessera submit | jobs | cancel: the client side of the job API (libcurl + jansson). */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/buf.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

/* A job file read for submit: at most this many bytes. */
#define JOB_FILE_MAX ((size_t)64 << 20)
/* An answer of the job API held in memory (a job, the list of jobs): at most this many
 * bytes; a longer one ends the transfer (a server streaming without end). */
#define ANSWER_MAX ((size_t)32 << 20)
/* --timeout's default and bounds, seconds. */
#define TIMEOUT_DEFAULT 60L
#define TIMEOUT_MAX 3600L

static const char jobs_usage[] =
    "usage: tessera submit [--server URL] [--token T] [--timeout S] [--no-wait] [-o OUT] JOB.json\n"
    "       tessera jobs   [--server URL] [--timeout S]\n"
    "       tessera cancel [--server URL] [--token T] [--timeout S] ID\n"
    "  submit posts the job (a JSON file, '-' for stdin), then follows it with a progress\n"
    "  bar until it ends; -o downloads the product.  Ctrl-C stops following (the job goes\n"
    "  on).  jobs lists the server's jobs; cancel cancels one.\n"
    "  --server URL   default $TESSERA_SERVER, else http://127.0.0.1:8080\n"
    "  --token T      bearer token for jobs.token servers; default $TESSERA_TOKEN\n"
    "  --timeout S    seconds (1 to 3600, default 60) a call may take whole, and that a\n"
    "                 download of the product may go without a byte; connecting gets at\n"
    "                 most 10 of them.  An answer of the job API over 32 MiB is refused.\n"
    "  exit status: 0 succeeded, 1 job failed or was cancelled, 2 usage, 4 the server\n"
    "  refused or could not be reached, 130 stopped following by Ctrl-C (the job goes on)\n";

typedef struct http_resp {
    long status;
    buf body;                 /* the answer, at most ANSWER_MAX bytes (data NULL: empty) */
    int too_long;             /* the answer passed ANSWER_MAX: the transfer was ended */
} http_resp;

/* Appends a piece of the answer, at most ANSWER_MAX bytes in all (0 ends the transfer). */
static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
    http_resp *r = arg;
    int rc = buf_add(&r->body, p, sz * n);
    if (rc == TESS_ERANGE)
        r->too_long = 1;
    return rc ? 0 : sz * n;
}

/* --timeout: the seconds a call may take (in memory), or a download may stall. */
static long g_timeout_s = TIMEOUT_DEFAULT;

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Ends a download at Ctrl-C (libcurl's progress callback: nonzero aborts). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)arg, (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return g_stop != 0;
}

/* One request; returns 0 with *r filled (any HTTP status), or -1 when the transfer
 * failed (message printed: no connection within 10 s, no whole answer within
 * g_timeout_s, an answer over ANSWER_MAX).  `out` (may be NULL) receives the body
 * instead of memory: without an overall time limit, but ended by g_timeout_s seconds
 * without a byte or by Ctrl-C. */
static int request(const char *method, const char *url, const char *token, const char *body,
                   size_t len, FILE *out, http_resp *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->body, ANSWER_MAX);
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *h = NULL;
    char auth[512];
    if (token && *token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    if (body)
        h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, g_timeout_s < 10 ? g_timeout_s : 10L);
    if (out) {
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, g_timeout_s);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, g_timeout_s);
        /* refused at once when the answer says its length */
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)ANSWER_MAX);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    } else if (r->too_long || rc == CURLE_FILESIZE_EXCEEDED) {
        cli_msg("%s: the server's answer is longer than %zu MiB: not an answer of the job "
                "API", url, ANSWER_MAX >> 20);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        cli_msg("%s: %s within %ld s (--timeout): %s", url,
                out ? "no byte of the product" : "no whole answer", g_timeout_s,
                curl_easy_strerror(rc));
    } else {
        cli_msg("%s: %s", url, curl_easy_strerror(rc));
    }
    if (rc != CURLE_OK)
        buf_release(&r->body);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

/* Prints a problem+json reply's detail (or the start of the raw body) for a failed
 * call, with what the server wrote escaped (cli_safe). */
static void print_problem(const char *what, const http_resp *r)
{
    json_t *j = r->body.data ? json_loadb(r->body.data, r->body.len, 0, NULL) : NULL;
    const char *detail = j ? json_string_value(json_object_get(j, "detail")) : NULL;
    const char *param = j ? json_string_value(json_object_get(j, "parameter")) : NULL;
    char d[1024], pa[128];
    if (detail)
        cli_safe(detail, d, sizeof d);
    else
        cli_safe_bytes(r->body.data ? r->body.data : "", r->body.len, d, 300);
    cli_msg("%s: HTTP %ld: %s%s%s%s", what, r->status, d, param ? " (" : "",
            param ? cli_safe(param, pa, sizeof pa) : "", param ? ")" : "");
    json_decref(j);
}

/* The JSON of a successful answer to `what`, or NULL after saying what is wrong with it
 * (no body, not JSON: where and the start of the body, escaped). */
static json_t *parse_answer(const char *what, const http_resp *r)
{
    json_error_t je;
    json_t *j = r->body.data ? json_loadb(r->body.data, r->body.len, 0, &je) : NULL;
    if (!j) {
        char why[160], start[128];
        if (r->body.data)
            cli_msg("%s: the server's answer (HTTP %ld) is not JSON: %s at byte %d; it "
                    "starts \"%s\"", what, r->status, cli_safe(je.text, why, sizeof why),
                    je.position, cli_safe_bytes(r->body.data, r->body.len, start, sizeof start));
        else
            cli_msg("%s: the server's answer (HTTP %ld) is empty, not JSON", what, r->status);
    }
    return j;
}

/* The string member `key` of object o escaped for printing (cli_safe), "-" when absent
 * or not a string. */
static const char *field(json_t *o, const char *key, char *out, size_t len)
{
    return cli_safe(json_string_value(json_object_get(o, key)), out, len);
}

/* 1 when s can be a job id (what the server makes: hex; letters, digits, '-' and '_'
 * accepted, 1 to 64 of them), so that it is safe in a URL path and a message. */
static int job_id_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-' || s[i] == '_'))
            return 0;
    return 1;
}

typedef struct common {
    const char *server;
    const char *token;
    const char *out;
    int no_wait;
} common;

/* Parses the shared options; returns optind of the first operand or -1 on error (the usage
 * printed). */
static int parse_common(int argc, char **argv, common *o)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"token", required_argument, NULL, 't'},
        {"no-wait", no_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 'T'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->server = getenv("TESSERA_SERVER");
    if (!o->server || !*o->server)
        o->server = "http://127.0.0.1:8080";
    o->token = getenv("TESSERA_TOKEN");
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:t:no:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': o->server = optarg; break;
        case 't': o->token = optarg; break;
        case 'n': o->no_wait = 1; break;
        case 'o': o->out = optarg; break;
        case 'T': {
            int t;
            if (cli_parse_int(optarg, 1, TIMEOUT_MAX, &t)) {
                cli_msg("--timeout: '%s' is not a whole number of seconds from 1 to %ld", optarg,
                        TIMEOUT_MAX);
                return -1;
            }
            g_timeout_s = t;
            break;
        }
        case 'h': fputs(jobs_usage, stdout); exit(0);
        default: fputs(jobs_usage, stderr); return -1;
        }
    }
    return optind;
}

/* Parses the shared options of a command that takes `noperands` operands; returns the
 * index of the first, or -1 on error (the usage printed). */
static int parse_operands(int argc, char **argv, int noperands, common *o)
{
    int i = parse_common(argc, argv, o);
    if (i >= 0 && argc - i != noperands) {
        fputs(jobs_usage, stderr);
        i = -1;
    }
    return i;
}

/* Reads the job file `path` ("-": standard input) whole, at most JOB_FILE_MAX bytes: a
 * malloc'd, NUL-terminated copy and its length, or NULL with the reason in err.  A path
 * that is not a regular file (a FIFO, a device) is refused, not read. */
static char *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = stdin;
    if (strcmp(path, "-") != 0) {
        int fd = tess_open_regular(path, 0, NULL, err, errlen);
        if (fd < 0)
            return NULL;
        if (!(f = fdopen(fd, "rb"))) {
            tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && n <= JOB_FILE_MAX && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t)
                free(s);
            s = t;
        }
    }
    if (!s)
        tess_seterr(err, errlen, "out of memory reading %s", path);
    else if (ferror(f))
        tess_seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else if (n > JOB_FILE_MAX)
        tess_seterr(err, errlen, "%s is longer than %zu bytes: not a job", path, JOB_FILE_MAX);
    if (s && (ferror(f) || n > JOB_FILE_MAX)) {
        free(s);
        s = NULL;
    }
    if (f != stdin)
        fclose(f);
    if (s)
        s[n] = '\0';
    *len = n;
    return s;
}

/* Follows job `id` until it ends; returns the exit status. */
static int follow(const common *o, const char *id)
{
    char url[1024];
    snprintf(url, sizeof(url), "%s/api/v1/jobs/%s", o->server, id);
    int tty = isatty(2);
    bar b = {-1, cli_now_s(), "blocks"};
    signal(SIGINT, on_sigint);
    for (;;) {
        http_resp r;
        if (request("GET", url, NULL, NULL, 0, NULL, &r)) {
            buf_release(&r.body);
            return CLI_EXIT_SERVER;
        }
        if (r.status != 200) {
            print_problem("job status", &r);
            buf_release(&r.body);
            return CLI_EXIT_SERVER;
        }
        json_t *j = parse_answer("job status", &r);
        buf_release(&r.body);
        if (!j)
            return CLI_EXIT_SERVER;
        const char *st = json_string_value(json_object_get(j, "state"));
        if (!st) {
            cli_msg("job status: the server's answer has no \"state\" string");
            json_decref(j);
            return CLI_EXIT_SERVER;
        }
        json_t *pr = json_object_get(j, "progress");
        long done = (long)json_integer_value(json_object_get(pr, "done"));
        long total = (long)json_integer_value(json_object_get(pr, "total"));
        if (tty && total > 0 && strcmp(st, "queued") != 0)
            bar_update(&b, done, total);
        if (strcmp(st, "queued") != 0 && strcmp(st, "running") != 0) {
            if (tty && b.last >= 0 && done != total)
                fputc('\n', stderr);
            int rc = CLI_EXIT_OK;
            char ds[256], stc[64], detail[1024];
            if (strcmp(st, "succeeded") == 0) {
                json_t *res = json_object_get(j, "result");
                printf("%s succeeded", id);
                if (json_string_value(json_object_get(res, "dataset")))
                    printf(": dataset %s", field(res, "dataset", ds, sizeof ds));
                printf(" (%s/api/v1/jobs/%s/result)\n", o->server, id);
            } else {
                json_t *e = json_object_get(j, "error");
                int has = json_string_value(json_object_get(e, "detail")) != NULL;
                cli_msg("job %s %s%s%s", id, cli_safe(st, stc, sizeof stc), has ? ": " : "",
                        has ? field(e, "detail", detail, sizeof detail) : "");
                rc = CLI_EXIT_FAIL;
            }
            json_decref(j);
            return rc;
        }
        json_decref(j);
        if (g_stop) {
            if (tty)
                fputc('\n', stderr);
            cli_msg("stopped following; job %s goes on (tessera cancel %s)", id, id);
            return CLI_EXIT_INTERRUPTED;
        }
        usleep(250000);
    }
}

static int download(const common *o, const char *id)
{
    char url[1024];
    snprintf(url, sizeof(url), "%s/api/v1/jobs/%s/result", o->server, id);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.part", o->out);
    /* A new file (what was left there before is removed): never written through a
     * symbolic link, never a FIFO or a device opened. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        cli_msg("cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        return CLI_EXIT_FAIL;
    }
    http_resp r;
    int rc = request("GET", url, NULL, NULL, 0, f, &r);
    fclose(f);
    if (rc || r.status != 200) {
        if (!rc)
            cli_msg("result: HTTP %ld", r.status);
        remove(tmp);
        return g_stop ? CLI_EXIT_INTERRUPTED : CLI_EXIT_SERVER;
    }
    if (rename(tmp, o->out) != 0) {
        cli_msg("cannot rename %s to %s: %s", tmp, o->out, strerror(errno));
        remove(tmp);
        return CLI_EXIT_FAIL;
    }
    cli_msg("wrote %s", o->out);
    return CLI_EXIT_OK;
}

int cmd_submit(int argc, char **argv)
{
    common o = {0};
    int i = parse_operands(argc, argv, 1, &o);
    if (i < 0)
        return CLI_EXIT_USAGE;
    size_t len;
    char why[512];
    char *body = read_all(argv[i], &len, why, sizeof why);
    if (!body) {
        cli_msg("submit: %s", why);
        return CLI_EXIT_USAGE;
    }
    signal(SIGINT, on_sigint);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char url[1024];
    snprintf(url, sizeof(url), "%s/api/v1/jobs", o.server);
    http_resp r;
    int rc = request("POST", url, o.token, body, len, NULL, &r);
    free(body);
    if (rc) {
        curl_global_cleanup();
        return CLI_EXIT_SERVER;
    }
    if (r.status != 202) {
        print_problem("submit", &r);
        buf_release(&r.body);
        curl_global_cleanup();
        return CLI_EXIT_SERVER;
    }
    json_t *j = parse_answer("submit", &r);
    buf_release(&r.body);
    const char *id = j ? json_string_value(json_object_get(j, "id")) : NULL;
    if (!job_id_ok(id)) {
        char b[128];
        if (j && !id)
            cli_msg("submit: the server's answer has no job id (no \"id\" string)");
        else if (j)
            cli_msg("submit: the server's answer has no usable job id: \"id\" is \"%s\" (1 to "
                    "64 letters, digits, '-' or '_')", cli_safe(id, b, sizeof b));
        json_decref(j);
        curl_global_cleanup();
        return CLI_EXIT_SERVER;
    }
    char idc[72];
    snprintf(idc, sizeof(idc), "%s", id);
    json_decref(j);
    int x = CLI_EXIT_OK;
    if (o.no_wait) {
        printf("%s\n", idc);
    } else {
        cli_msg("job %s submitted", idc);
        x = follow(&o, idc);
        if (x == CLI_EXIT_OK && o.out)
            x = download(&o, idc);
    }
    curl_global_cleanup();
    return x;
}

/* The calls of `jobs` and `cancel`: `method` on `url` (the server's job API), which
 * answers 200 with JSON.  Returns CLI_EXIT_OK with *j the parsed reply (json_decref it),
 * or CLI_EXIT_SERVER after printing why, a reply that is not JSON included (`what`
 * names the call). */
static int call_api(const char *method, const char *url, const char *token, const char *what,
                    json_t **j)
{
    *j = NULL;
    http_resp r;
    int x = CLI_EXIT_OK;
    if (request(method, url, token, NULL, 0, NULL, &r)) {
        x = CLI_EXIT_SERVER;
    } else if (r.status != 200) {
        print_problem(what, &r);
        x = CLI_EXIT_SERVER;
    } else if (!(*j = parse_answer(what, &r))) {
        x = CLI_EXIT_SERVER;
    }
    buf_release(&r.body);
    return x;
}

int cmd_jobs(int argc, char **argv)
{
    common o = {0};
    if (parse_operands(argc, argv, 0, &o) < 0)
        return CLI_EXIT_USAGE;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char url[1024];
    snprintf(url, sizeof(url), "%s/api/v1/jobs", o.server);
    json_t *a = NULL;
    int x = call_api("GET", url, NULL, "jobs", &a);
    if (x == CLI_EXIT_OK && !json_is_array(a)) {
        cli_msg("jobs: the server's answer is JSON but not a list of jobs (an array)");
        x = CLI_EXIT_SERVER;
    }
    if (x == CLI_EXIT_OK) {
        printf("%-16s  %-14s  %-9s  %6s  %-24s  %s\n", "ID", "TYPE", "STATE", "DONE", "CREATED",
               "RESULT");
        size_t k;
        json_t *j;
        json_array_foreach(a, k, j) {
            if (!json_is_object(j) || !json_is_string(json_object_get(j, "id")) ||
                !json_is_string(json_object_get(j, "state"))) {
                cli_msg("jobs: entry %zu of the server's answer is not a job (an object with "
                        "\"id\" and \"state\" strings)", k + 1);
                x = CLI_EXIT_SERVER;
                continue;
            }
            json_t *pr = json_object_get(j, "progress");
            char id[128], type[128], state[64], created[64], ds[256];
            const char *dsv = json_string_value(
                json_object_get(json_object_get(j, "result"), "dataset"));
            printf("%-16s  %-14s  %-9s  %5.1f%%  %-24s  %s\n", field(j, "id", id, sizeof id),
                   field(j, "type", type, sizeof type), field(j, "state", state, sizeof state),
                   100.0 * json_number_value(json_object_get(pr, "fraction")),
                   field(j, "created", created, sizeof created),
                   dsv ? cli_safe(dsv, ds, sizeof ds) : "");
        }
    }
    json_decref(a);
    curl_global_cleanup();
    return x;
}

int cmd_cancel(int argc, char **argv)
{
    common o = {0};
    int i = parse_operands(argc, argv, 1, &o);
    if (i < 0)
        return CLI_EXIT_USAGE;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char url[1024];
    snprintf(url, sizeof(url), "%s/api/v1/jobs/%s", o.server, argv[i]);
    json_t *j = NULL;
    int x = call_api("DELETE", url, o.token, "cancel", &j);
    char id[128], state[64];
    if (x == CLI_EXIT_OK)
        printf("%s %s\n", cli_safe(argv[i], id, sizeof id), field(j, "state", state, sizeof state));
    json_decref(j);
    curl_global_cleanup();
    return x;
}

const char *cmd_jobs_usage(void)
{
    return jobs_usage;
}
