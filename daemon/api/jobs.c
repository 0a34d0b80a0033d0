/* /api/v1/jobs: submit, list, inspect, cancel jobs and fetch their products (daemon/jobs/jobs.h). */
#include "daemon/api/handlers.h"
#include "daemon/jobs/jobs.h"
#include "daemon/problem.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/hash.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Compares in time that depends only on the lengths, not on where the bytes differ. */
static int same_secret(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na; i++)
        diff |= (unsigned char)(a[i] ^ b[nb ? i % nb : 0]);
    return diff == 0;
}

/* Mutating calls need "Authorization: Bearer TOKEN" when jobs.token is set: 401 when
 * missing, 403 when wrong.  An empty token (which a configuration file cannot give:
 * daemon/config.c refuses it) matches nothing.  Returns 0 when allowed. */
int jobs_api_check_token(hreq *r)
{
    const char *token = r->srv->cfg->jobs_token;
    if (!token)
        return 0;
    const char *h = hreq_header(r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        problem_reply(r, 401, "Authorization",
                      "this server needs \"Authorization: Bearer TOKEN\" to create or cancel jobs");
        r->rep.www_authenticate = "Bearer realm=\"tessera-jobs\"";
        return -1;
    }
    const char *given = h + 7;
    while (*given == ' ')
        given++;
    if (!*token || !same_secret(given, token)) {
        problem_reply(r, 403, "Authorization", "the bearer token is not the server's jobs.token");
        return -1;
    }
    return 0;
}

/* 503 with Retry-After: the jobs database cannot be reached (jobs.h). */
static void reply_unreachable(hreq *r)
{
    problem_reply(r, 503, NULL, "the jobs database cannot be reached; retry later");
    r->rep.retry_after = 5;
}

int prepare_jobs(hreq *r, route_match *m)
{
    if (!r->srv->app->jobs) {
        /* 404, not 503: nothing will change by retrying; the fix is configuration. */
        problem_reply(r, 404, NULL,
                      "this server has no job endpoints: jobs.dir is not set in its configuration");
        return -1;
    }
    if (m->segment_at && m->segment_len >= 40) {
        problem_reply(r, 404, "id", "no job '%.32s'", m->segment_at);
        return -1;
    }
    return 0;
}

/* What a queued submission carries to its worker (jobs_api_submit_async). */
typedef struct submit_arg {
    char *text;                 /* malloc'd, or NULL: the request's body */
    size_t len;
    double queued;              /* tess_mono_s() when it was handed to the pool */
    jobs_api_answer_fn answer;
} submit_arg;

static void submit_arg_free(void *p)
{
    submit_arg *a = p;
    if (a)
        free(a->text);
    free(a);
}

/* On a pool worker: the submission's validation, estimate and insert, then its answer. */
static void submit_work(hreq *r)
{
    submit_arg *a = r->work_arg;
    job_problem pb = {0};
    if (tess_mono_s() - a->queued > JOBS_SUBMIT_QUEUE_S) {
        jobkind_problem(&pb, 503, NULL, "the server is busy: the submission waited more than "
                        "%.0f s for a worker; retry shortly", JOBS_SUBMIT_QUEUE_S);
        a->answer(r, -1, NULL, &pb);
        return;
    }
    char *doc = NULL;
    int rc = jobs_submit(r->srv->app->jobs, a->text ? a->text : r->body, a->len, &doc, &pb);
    a->answer(r, rc, rc ? NULL : doc, &pb);
    if (rc)
        free(doc);
}

int jobs_api_submit_async(hreq *r, char *text, size_t len, jobs_api_answer_fn answer)
{
    submit_arg *a = calloc(1, sizeof(*a));
    if (!a) {
        free(text);
        job_problem pb = {0};
        jobkind_problem(&pb, 500, NULL, "out of memory");
        answer(r, -1, NULL, &pb);
        return 0;
    }
    a->text = text;
    a->len = len;
    a->queued = tess_mono_s();
    a->answer = answer;
    r->bulk = 1;
    return hreq_run_async(r, submit_work, a, submit_arg_free);
}

static void answer_submit(hreq *r, int rc, char *doc, const job_problem *pb)
{
    if (rc) {
        problem_reply(r, pb->status ? pb->status : 400, pb->field[0] ? pb->field : NULL, "%s",
                      pb->detail);
        if (pb->status == 503)
            r->rep.retry_after = 5;
        return;
    }
    /* The Location of the new job: its id is the value of "id" in the document. */
    const char *p = strstr(doc, "\"id\": \"");
    if (p) {
        char loc[64];
        snprintf(loc, sizeof(loc), "/api/v1/jobs/%.16s", p + 7);
        r->rep.location = strdup(loc);
    }
    hreq_reply_json(r, 202, doc);
}

void handle_jobs_submit(hreq *r, const route_match *m)
{
    if (jobs_api_check_token(r))
        return;
    if (!r->body || r->body_len == 0) {
        problem_reply(r, 400, "body", "POST a JSON job description, e.g. {\"type\": \"mosaic\", ...}");
        return;
    }
    jobs_api_submit_async(r, NULL, r->body_len, answer_submit);
}

/* Answers for a job that cannot be reached (the database is away: 503) or does not
 * exist (404) and returns 1; 0 for any other rc. */
static int reply_job_missing(hreq *r, int rc, const char *id)
{
    if (rc == TESS_EIO)
        reply_unreachable(r);
    else if (rc == TESS_ENOTFOUND)
        problem_reply(r, 404, "id", "no job '%.32s'", id);
    else
        return 0;
    return 1;
}

static void send_result(hreq *r, const char *id)
{
    char path[PATH_MAX], ctype[64], state[16] = "";
    int rc = jobs_result(r->srv->app->jobs, id, path, ctype, state);
    if (reply_job_missing(r, rc, id))
        return;
    if (rc == TESS_EAGAIN) {
        problem_reply(r, 409, "id", "job %s has no product: it is %s", id, state);
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        problem_reply(r, 410, "id", "the product of job %s is no longer on disk", id);
        return;
    }
    r->rep.status = 200;
    r->rep.file_fd = fd;
    r->rep.file_len = (unsigned long long)st.st_size;
    snprintf(r->rep.file_type, sizeof(r->rep.file_type), "%s", ctype);
    /* A product is written once and renamed into place: its file identity is its
     * version (a job run again writes a new file). */
    uint64_t v[4] = { (uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
                      (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec };
    uint64_t h = tess_fnv1a64(v, sizeof v, TESS_FNV64_OFFSET);
    snprintf(r->rep.file_etag, sizeof r->rep.file_etag, "\"%016llx\"", (unsigned long long)h);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (*base && strlen(base) < sizeof r->rep.file_name
        && strspn(base, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
               == strlen(base))
        snprintf(r->rep.file_name, sizeof r->rep.file_name, "%s", base);
    r->rep.cache_control = "no-cache";
}

void handle_jobs_list(hreq *r, const route_match *m)
{
    static const char *const known[] = {"limit", NULL};
    if (hreq_only_args(r, known))
        return;
    long limit = 100;
    const char *l = hreq_arg(r, "limit");
    if (l) {
        char *end;
        limit = strtol(l, &end, 10);
        if (*end || limit < 1 || limit > 10000) {
            problem_reply(r, 400, "limit", "limit must be an integer 1..10000");
            return;
        }
    }
    int unavailable = 0;
    char *list = jobs_list_json(r->srv->app->jobs, (int)limit, &unavailable);
    if (!list) {
        if (unavailable)
            reply_unreachable(r);
        else
            problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_json(r, 200, list);
}

/* GET, and the answer of a DELETE that cancelled: the job's document. */
void handle_job(hreq *r, const route_match *m)
{
    const char *id = m->segment;
    int missing = 0;
    char *doc = jobs_get_json(r->srv->app->jobs, id, &missing);
    if (!doc) {
        if (missing == 2)
            reply_unreachable(r);
        else if (missing)
            problem_reply(r, 404, "id", "no job '%.32s'", id);
        else
            problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_json(r, 200, doc);
}

void handle_job_result(hreq *r, const route_match *m)
{
    send_result(r, m->segment);
}

void handle_job_cancel(hreq *r, const route_match *m)
{
    const char *id = m->segment;
    if (jobs_api_check_token(r))
        return;
    int rc = jobs_cancel(r->srv->app->jobs, id, 10.0);
    if (reply_job_missing(r, rc, id))
        return;
    if (rc == TESS_EINVAL) {
        char path[PATH_MAX], ctype[64], state[16] = "finished";
        if (jobs_result(r->srv->app->jobs, id, path, ctype, state) == 0)
            snprintf(state, sizeof(state), "succeeded");
        problem_reply(r, 409, "id", "job %s has already ended (%s); there is nothing to cancel", id,
                      state);
        return;
    }
    handle_job(r, m);
}
