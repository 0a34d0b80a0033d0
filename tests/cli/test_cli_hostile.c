/* Hostile inputs to the tessera command: FIFOs and devices named as files, -o naming an input, and a job server that answers terminal escapes and malformed JSON. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

extern char **environ;

#define HH TESSERA_DEMO_DIR "/HorseHead.fits"
#define HH_TARGET TESSERA_TESTDATA_DIR "/reference/horsehead_rot30_bilinear.target.hdr"

static char dir[256];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "clihostile");
}

static void teardown(void)
{
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

/* What one run of tessera did. */
typedef struct run {
    int status;               /* exit status, -1 when killed */
    double took;              /* seconds */
    long maxrss_kb;           /* the most memory the run held (getrusage's ru_maxrss) */
    char out[8192], err[8192];/* the start of stdout and stderr */
} run;

static void slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs tessera with the NULL-terminated arguments; a run still going after limit_s gets
 * SIGTERM, and SIGKILL 2 s later (status -1: the test then fails on it). */
static void run_bounded(run *r, double limit_s, const char *const *args)
{
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)TESSERA_BIN;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char o[PATH_MAX], e[PATH_MAX];
    in_dir(".stdout", o, sizeof o);
    in_dir(".stderr", e, sizeof e);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, o, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, TESSERA_BIN, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    double t0 = tt_now_s();
    int ws = 0, sent = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &ws, WNOHANG, &ru) == 0) {
        double t = tt_now_s() - t0;
        if (!sent && t > limit_s) {
            kill(pid, SIGTERM);
            sent = 1;
        } else if (t > limit_s + 2.0) {
            kill(pid, SIGKILL);
            wait4(pid, &ws, 0, &ru);
            break;
        }
        usleep(5000);
    }
    r->took = tt_now_s() - t0;
    r->maxrss_kb = ru.ru_maxrss;
    r->status = WIFEXITED(ws) && !sent ? WEXITSTATUS(ws) : -1;
    slurp(o, r->out, sizeof r->out);
    slurp(e, r->err, sizeof r->err);
    unlink(o);
    unlink(e);
}

/* The run ended by itself within the bound with `status` and a message holding `what`. */
static void expect(const run *r, int status, const char *what, const char *case_name)
{
    ck_assert_msg(r->status != -1, "%s: still running after %.1f s (killed): %s", case_name,
                  r->took, r->err);
    ck_assert_msg(r->status == status, "%s: exit %d, not %d: %s", case_name, r->status, status,
                  r->err);
    ck_assert_msg(strstr(r->err, what), "%s: the message does not say '%s': %s", case_name,
                  what, r->err);
}

/* ---- FIFOs and devices named as inputs ------------------------------------------------- */

START_TEST(test_fifo_and_device_inputs)
{
    char fifo[PATH_MAX], out[PATH_MAX], hips[PATH_MAX];
    ck_assert_int_eq(mkfifo(in_dir("pipe", fifo, sizeof fifo), 0600), 0);
    in_dir("o.fits", out, sizeof out);
    in_dir("tree", hips, sizeof hips);
    const double lim = 5.0 * tt_time_scale();
    struct {
        const char *name;
        const char *args[12];
        const char *what;
    } cases[] = {
        { "reproject --target FIFO", { "reproject", HH, "--target", fifo, "-o", out, NULL },
          "is a FIFO" },
        { "reproject --target /dev/zero",
          { "reproject", HH, "--target", "/dev/zero", "-o", out, NULL }, "a character device" },
        { "reproject FIFO input", { "reproject", fifo, "--target", HH_TARGET, "-o", out, NULL },
          "is a FIFO" },
        { "reproject /dev/zero input",
          { "reproject", "/dev/zero", "--target", HH_TARGET, "-o", out, NULL },
          "a character device" },
        { "mosaic --target FIFO", { "mosaic", HH, "--target", fifo, "-o", out, NULL },
          "is a FIFO" },
        { "mosaic --target /dev/zero", { "mosaic", HH, "--target", "/dev/zero", "-o", out, NULL },
          "a character device" },
        { "mosaic FIFO input", { "mosaic", HH, fifo, "-o", out, NULL }, "is a FIFO" },
        { "hips FIFO input", { "hips", fifo, "-o", hips, NULL }, "is a FIFO" },
        { "hips /dev/zero input", { "hips", "/dev/zero", "-o", hips, NULL },
          "a character device" },
        { "submit FIFO", { "submit", "--server", "http://127.0.0.1:9", fifo, NULL }, "is a FIFO" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run r;
        run_bounded(&r, lim, cases[k].args);
        printf("%s: exit %d after %.2f s: %s", cases[k].name, r.status, r.took, r.err);
        expect(&r, strncmp(cases[k].name, "submit", 6) == 0 ? 2 : 1, cases[k].what,
               cases[k].name);
        ck_assert_int_eq(access(out, F_OK), -1);
        ck_assert_int_eq(access(hips, F_OK), -1);
    }
    /* Only the FIFO is left: no temporary file or work directory either. */
    ck_assert_int_eq(tt_count_entries(dir), 1);
}
END_TEST

/* ---- -o naming an input ------------------------------------------------------------------ */

/* The bytes of a file (malloc'd), its length in *n. */
static char *file_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = file_bytes(from, &n);
    FILE *f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
}

START_TEST(test_output_is_an_input)
{
    char in[PATH_MAX], hard[PATH_MAX], soft[PATH_MAX], hdr[PATH_MAX], other[PATH_MAX];
    in_dir("in.fits", in, sizeof in);
    in_dir("hard.fits", hard, sizeof hard);
    in_dir("soft.fits", soft, sizeof soft);
    in_dir("t.hdr", hdr, sizeof hdr);
    in_dir("other.fits", other, sizeof other);
    copy_file(HH, in);
    copy_file(HH_TARGET, hdr);
    copy_file(HH, other);
    ck_assert_int_eq(link(in, hard), 0);
    ck_assert_int_eq(symlink(in, soft), 0);
    size_t n0, t0;
    char *before = file_bytes(in, &n0);
    char *tbefore = file_bytes(hdr, &t0);
    const double lim = 20.0 * tt_time_scale();
    struct {
        const char *name;
        const char *says;       /* what stderr must hold */
        const char *args[12];
    } cases[] = {
        { "reproject -o IN", "is the input",
          { "reproject", in, "--target", hdr, "-o", in, NULL } },
        { "reproject -o a hard link to IN", "is the input",
          { "reproject", in, "--target", hdr, "-o", hard, NULL } },
        { "reproject IN through a symbolic link", "is the input",
          { "reproject", soft, "--target", hdr, "-o", in, NULL } },
        { "reproject -o TARGET", "is the target",
          { "reproject", in, "--target", hdr, "-o", hdr, NULL } },
        { "reproject -o a FITS TARGET", "is the target",
          { "reproject", in, "--target", other, "-o", other, NULL } },
        { "mosaic -o the second input", "is the input",
          { "mosaic", other, in, "-o", hard, NULL } },
        { "mosaic -o TARGET", "is the target",
          { "mosaic", in, "--target", hdr, "-o", hdr, NULL } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run r;
        run_bounded(&r, lim, cases[k].args);
        printf("%s: exit %d: %s", cases[k].name, r.status, r.err);
        expect(&r, 1, cases[k].says, cases[k].name);
    }
    run r;
    const char *hips[] = { "hips", in, "-o", in, NULL };
    run_bounded(&r, lim, hips);
    expect(&r, 1, "not a directory", "hips -o IN");
    size_t n1, t1;
    char *after = file_bytes(in, &n1);
    char *tafter = file_bytes(hdr, &t1);
    ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "the input was changed");
    ck_assert_msg(t0 == t1 && memcmp(tbefore, tafter, t0) == 0, "the target was changed");
    free(before);
    free(after);
    free(tbefore);
    free(tafter);
    /* Nothing left beside them (no temporary output). */
    ck_assert_int_eq(tt_count_entries(dir), 5);
    /* Another output name works. */
    char out[PATH_MAX];
    const char *ok[] = { "reproject", soft, "--target", hdr, "-o", in_dir("o.fits", out, sizeof out),
                         "--quiet", NULL };
    run_bounded(&r, lim, ok);
    ck_assert_msg(r.status == 0, "reproject to another name: exit %d: %s", r.status, r.err);
}
END_TEST

/* ---- a hostile job server ---------------------------------------------------------------- */

/* One canned answer: to a request whose request line starts with `line`. */
typedef struct canned {
    const char *line;          /* "GET /api/v1/jobs " */
    int status;
    const char *body;
} canned;

/* How the fake server answers: with the canned answers, with a 200 whose body never
 * ends (64 KiB writes until the client goes, at most 8 GiB or 60 s), or never (it reads
 * the request and waits for the client to go, at most 60 s). */
enum fake_mode { FAKE_CANNED, FAKE_ENDLESS, FAKE_SILENT };

typedef struct fake_server {
    int fd, port;
    enum fake_mode mode;
    const canned *answers;
    int n;
    int stop;                  /* atomic */
    pthread_t th;
} fake_server;

/* Reads one request (headers, and a body of Content-Length bytes) and answers it. */
static void serve_one(fake_server *s, int c)
{
    char req[65536];
    size_t n = 0;
    char *end = NULL;
    while (n < sizeof req - 1 && !end) {
        struct pollfd p = { c, POLLIN, 0 };
        if (poll(&p, 1, 5000) <= 0)
            return;
        ssize_t k = read(c, req + n, sizeof req - 1 - n);
        if (k <= 0)
            return;
        n += (size_t)k;
        req[n] = '\0';
        end = strstr(req, "\r\n\r\n");
    }
    if (!end)
        return;
    if (s->mode != FAKE_CANNED) {
        static char block[65536];
        static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   "Connection: close\r\n\r\n[";
        memset(block, ' ', sizeof block);
        double t0 = tt_now_s();
        if (s->mode == FAKE_ENDLESS && write(c, head, sizeof head - 1) < 0)
            return;
        for (long k = 0; k < (8L << 30) / (long)sizeof block && tt_now_s() - t0 < 60.0 &&
                         !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE); k++) {
            if (s->mode == FAKE_ENDLESS) {
                if (write(c, block, sizeof block) < 0)
                    return;
            } else {   /* silent: until the client closes (readable at its end) */
                struct pollfd p = { c, POLLIN, 0 };
                char sink[256];
                if (poll(&p, 1, 50) > 0 && read(c, sink, sizeof sink) <= 0)
                    return;
            }
        }
        return;
    }
    const char *cl = strcasestr(req, "\r\nContent-Length:");
    size_t want = (size_t)(end + 4 - req) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
    while (n < want && n < sizeof req - 1) {
        ssize_t k = read(c, req + n, sizeof req - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    const canned *a = NULL;
    for (int i = 0; i < s->n && !a; i++)
        if (strncmp(req, s->answers[i].line, strlen(s->answers[i].line)) == 0)
            a = &s->answers[i];
    char head[256];
    const char *body = a ? a->body : "{\"title\": \"no canned answer\"}";
    int hl = snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", a ? a->status : 404,
                      strlen(body));
    if (write(c, head, (size_t)hl) == hl && write(c, body, strlen(body)) < 0)
        return;
}

static void *fake_main(void *arg)
{
    fake_server *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = { s->fd, POLLIN, 0 };
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(s, c);
        close(c);
    }
    return NULL;
}

static void fake_start(fake_server *s, const canned *answers, int n)
{
    memset(s, 0, sizeof *s);
    if (!answers)
        s->mode = n;
    s->answers = answers;
    s->n = n;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(s->fd, 0);
    struct sockaddr_in a = { 0 };
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(s->fd, 16), 0);
    socklen_t al = sizeof a;
    ck_assert_int_eq(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&s->th, NULL, fake_main, s), 0);
}

static void fake_stop(fake_server *s)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    pthread_join(s->th, NULL);
    close(s->fd);
}

/* No byte a terminal acts on: no C0 control but the newline, no DEL, no C1 in UTF-8
 * (C2 80..C2 9F), no bidirectional override U+202E (E2 80 AE). */
static void assert_clean(const char *text, const char *what)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        ck_assert_msg((*p >= 0x20 || *p == '\n') && *p != 0x7f,
                      "%s: control byte 0x%02x printed raw: %s", what, *p, text);
        ck_assert_msg(!(p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f),
                      "%s: a C1 control printed raw: %s", what, text);
        ck_assert_msg(!(p[0] == 0xe2 && p[1] == 0x80 && p[2] == 0xae),
                      "%s: U+202E printed raw: %s", what, text);
    }
}

/* Runs `tessera CMD --server URL [FILE]` against a fake server with the n answers. */
static void run_fake(run *r, const canned *answers, int n, const char *cmd, const char *file)
{
    fake_server s;
    fake_start(&s, answers, n);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s.port);
    const char *args[] = { cmd, "--server", url, file, NULL };
    run_bounded(r, 10.0 * tt_time_scale(), args);
    fake_stop(&s);
}

#define ESCAPES "\\u001b]0;owned\\u0007\\u001b[2J\\u009b31m\\u202e"

START_TEST(test_jobs_escapes_sanitised)
{
    static const canned answers[] = {
        { "GET /api/v1/jobs ", 200,
          "[{\"id\": \"0123456789abcdef\", \"type\": \"mosaic" ESCAPES "\", \"state\": "
          "\"succeeded\", \"progress\": {\"fraction\": 1}, \"created\": \"" ESCAPES "\", "
          "\"result\": {\"dataset\": \"evil" ESCAPES "\"}}]" },
    };
    run r;
    run_fake(&r, answers, 1, "jobs", NULL);
    printf("tessera jobs against escapes: exit %d:\n%s", r.status, r.out);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    assert_clean(r.out, "tessera jobs");
    assert_clean(r.err, "tessera jobs (stderr)");
    ck_assert_msg(strstr(r.out, "mosaic\\x1b]0;owned\\x07\\x1b[2J\\u009b31m\\u202e"),
                  "the escapes are not shown escaped: %s", r.out);
    ck_assert_msg(strstr(r.out, "0123456789abcdef") && strstr(r.out, "evil\\x1b"), "%s", r.out);
}
END_TEST

START_TEST(test_jobs_malformed_answers)
{
    struct {
        const char *name;
        canned answer;
        const char *what;
    } cases[] = {
        { "not JSON", { "GET /api/v1/jobs ", 200, "{\"jobs\": [1, 2" }, "is not JSON" },
        { "an empty body", { "GET /api/v1/jobs ", 200, "" }, "is empty, not JSON" },
        { "an object", { "GET /api/v1/jobs ", 200, "{\"id\": \"x\"}" }, "not a list of jobs" },
        { "an entry that is not a job",
          { "GET /api/v1/jobs ", 200, "[{\"id\": \"a\", \"state\": \"queued\"}, 7]" },
          "entry 2 of the server's answer is not a job" },
        { "a problem with escapes",
          { "GET /api/v1/jobs ", 400, "{\"title\": \"t\", \"detail\": \"bad" ESCAPES "\"}" },
          "HTTP 400: bad\\x1b]0;owned" },
        { "a raw error body with escapes",
          { "GET /api/v1/jobs ", 500, "\x1b[31mboom\x07" }, "HTTP 500: \\x1b[31mboom\\x07" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run r;
        run_fake(&r, &cases[k].answer, 1, "jobs", NULL);
        printf("tessera jobs, %s: exit %d: %s", cases[k].name, r.status, r.err);
        expect(&r, 4, cases[k].what, cases[k].name);
        assert_clean(r.out, cases[k].name);
        assert_clean(r.err, cases[k].name);
    }
}
END_TEST

/* Writes a small job file, job.json of the test directory, and its path into `job`. */
static void write_job(char *job, size_t len)
{
    FILE *f = fopen(in_dir("job.json", job, len), "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"type\": \"mosaic\"}\n", f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_submit_malformed_answers)
{
    char job[PATH_MAX];
    write_job(job, sizeof job);
    struct {
        const char *name;
        canned answers[2];
        int status;
        const char *what;
    } cases[] = {
        { "202 not JSON", { { "POST /api/v1/jobs ", 202, "accepted!" } }, 4, "is not JSON" },
        { "202 without an id", { { "POST /api/v1/jobs ", 202, "{\"state\": \"queued\"}" } }, 4,
          "no job id" },
        { "202 with an id of escapes",
          { { "POST /api/v1/jobs ", 202, "{\"id\": \"" ESCAPES "\"}" } }, 4,
          "no usable job id: \"id\" is \"\\x1b]0;owned" },
        { "a job status that is not JSON",
          { { "POST /api/v1/jobs ", 202, "{\"id\": \"abc123\"}" },
            { "GET /api/v1/jobs/abc123 ", 200, "<html>" } }, 4, "job status: the server's "
                                                                  "answer (HTTP 200) is not JSON" },
        { "a job status without a state",
          { { "POST /api/v1/jobs ", 202, "{\"id\": \"abc123\"}" },
            { "GET /api/v1/jobs/abc123 ", 200, "{\"progress\": {}}" } }, 4, "no \"state\"" },
        { "a failed job with escapes",
          { { "POST /api/v1/jobs ", 202, "{\"id\": \"abc123\"}" },
            { "GET /api/v1/jobs/abc123 ", 200, "{\"state\": \"failed" ESCAPES "\", \"error\": "
                                               "{\"detail\": \"no" ESCAPES "\"}}" } }, 1,
          "job abc123 failed\\x1b]0;owned" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run r;
        run_fake(&r, cases[k].answers, cases[k].answers[1].line ? 2 : 1, "submit", job);
        printf("tessera submit, %s: exit %d: %s", cases[k].name, r.status, r.err);
        expect(&r, cases[k].status, cases[k].what, cases[k].name);
        assert_clean(r.out, cases[k].name);
        assert_clean(r.err, cases[k].name);
    }
    /* A missing job file: the reason, not only the name. */
    run r;
    char none[PATH_MAX];
    const char *args[] = { "submit", "--server", "http://127.0.0.1:9", in_dir("none.json", none,
                           sizeof none), NULL };
    run_bounded(&r, 10.0 * tt_time_scale(), args);
    expect(&r, 2, strerror(ENOENT), "submit of a missing file");
}
END_TEST

/* A server that streams an answer without end, and one that never answers: `tessera jobs`,
 * `submit --no-wait` and `cancel` end by themselves with exit 4 and a message saying
 * which, the first at the answer's cap (32 MiB) and within bounded memory (the answer grew
 * past 4 GB in 9 s before), the second at --timeout (before: 60 s, fixed). */
START_TEST(test_endless_and_silent_servers)
{
    char job[PATH_MAX];
    write_job(job, sizeof job);
    static const struct {
        enum fake_mode mode;
        const char *cmd;
        int file;
        const char *what;
    } cases[] = {
        { FAKE_ENDLESS, "jobs", 0, "the server's answer is longer than 32 MiB" },
        { FAKE_ENDLESS, "submit", 1, "the server's answer is longer than 32 MiB" },
        { FAKE_ENDLESS, "cancel", 0, "the server's answer is longer than 32 MiB" },
        { FAKE_SILENT, "jobs", 0, "no whole answer within 2 s (--timeout)" },
        { FAKE_SILENT, "submit", 1, "no whole answer within 2 s (--timeout)" },
        { FAKE_SILENT, "cancel", 0, "no whole answer within 2 s (--timeout)" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fake_server s;
        fake_start(&s, NULL, (int)cases[k].mode);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", s.port);
        /* jobs: no operand; submit --no-wait JOB; cancel ID */
        const char *args[] = { cases[k].cmd, "--server", url, "--timeout", "2", NULL, NULL,
                               NULL };
        if (cases[k].file) {
            args[5] = "--no-wait";
            args[6] = job;
        } else if (strcmp(cases[k].cmd, "cancel") == 0) {
            args[5] = "abc123";
        }
        run r;
        run_bounded(&r, 10.0 * tt_time_scale(), args);
        fake_stop(&s);
        char name[64];
        snprintf(name, sizeof name, "%s against a%s server", cases[k].cmd,
                 cases[k].mode == FAKE_ENDLESS ? "n endless" : " silent");
        printf("tessera %s: exit %d in %.2f s, %ld KiB at most: %s", name, r.status, r.took,
               r.maxrss_kb, r.err);
        expect(&r, 4, cases[k].what, name);
        assert_clean(r.err, name);
        /* 32 MiB held, doubled once while growing; the sanitizers' quarantine aside */
        ck_assert_msg(r.maxrss_kb < 400 * 1024, "%s: %ld KiB held", name, r.maxrss_kb);
        if (cases[k].mode == FAKE_SILENT)
            ck_assert_msg(r.took > 1.9 && r.took < 6.0 * tt_time_scale(), "%s: %.2f s", name,
                          r.took);
    }
}
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);   /* the fake server writes to clients that may be gone */
    Suite *s = suite_create("cli_hostile");
    TCase *tc = tcase_create("cli_hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_fifo_and_device_inputs);
    tcase_add_test(tc, test_output_is_an_input);
    tcase_add_test(tc, test_jobs_escapes_sanitised);
    tcase_add_test(tc, test_jobs_malformed_answers);
    tcase_add_test(tc, test_submit_malformed_answers);
    tcase_add_test(tc, test_endless_and_silent_servers);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
