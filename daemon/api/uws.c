/* UWS 1.1 over the job runner: job list, job documents, phase, results, error and long polling, as XML of the UWS schema. */
#include "daemon/api/handlers.h"
#include "daemon/api/vo.h"
#include "daemon/api/vo_xml.h"
#include "daemon/jobs/jobs.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The longest WAIT served (seconds); how many are served at once: HREQ_PARK_MAX. */
#define UWS_WAIT_MAX_S 10

/* The UWS phase of a Tessera job state. */
static const char *uws_phase(const char *state)
{
    static const struct { const char *state, *phase; } map[] = {
        {"queued", "QUEUED"}, {"running", "EXECUTING"}, {"succeeded", "COMPLETED"},
        {"failed", "ERROR"}, {"cancelled", "ABORTED"},
    };
    for (size_t i = 0; state && i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(state, map[i].state) == 0)
            return map[i].phase;
    return "UNKNOWN";
}

static int phase_is_active(const char *phase)
{
    return strcmp(phase, "QUEUED") == 0 || strcmp(phase, "EXECUTING") == 0
           || strcmp(phase, "PENDING") == 0;
}

int prepare_uws(hreq *r, route_match *m)
{
    if (!r->srv->app->jobs) {
        vo_reply_text(r, 404, "NotFoundFault: this server runs no jobs (jobs.dir is not set)");
        return -1;
    }
    if (m->segment_at && (m->segment_len == 0 || m->segment_len >= 40)) {
        vo_reply_text(r, 404, "NotFoundFault: no job '%.32s'", m->segment_at);
        return -1;
    }
    return 0;
}

/* 503 with Retry-After: the jobs database cannot be reached, so whether the job exists
 * is not known (never NotFoundFault for it). */
static void uws_unreachable(hreq *r)
{
    vo_reply_text(r, 503, "ServiceUnavailable: the jobs database cannot be reached; retry "
                  "later");
    r->rep.retry_after = 5;
}

/* The job document of `id` parsed, or NULL after a 404/500/503 answer. */
static json_t *load_job(hreq *r, const char *id)
{
    int missing = 0;
    char *doc = jobs_get_json(r->srv->app->jobs, id, &missing);
    json_t *j = doc ? json_loads(doc, 0, NULL) : NULL;
    free(doc);
    if (!j) {
        if (missing == 2)
            uws_unreachable(r);
        else if (missing)
            vo_reply_text(r, 404, "NotFoundFault: no job '%.32s'", id);
        else
            vo_reply_text(r, 500, "FatalFault: out of memory");
    }
    return j;
}

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static const char *job_phase(const json_t *job)
{
    return uws_phase(jstr(job, "state"));
}

/* Writes a time element, or one that is nil. */
static void time_element(voxml *x, const char *name, const char *iso)
{
    voxml_start(x, name);
    if (iso)
        voxml_text(x, iso);
    else
        voxml_attr(x, "xsi:nil", "true");
    voxml_end(x);
}

/* One parameter per member of the request: strings as they are, other values as JSON
 * text; nested objects flattened with dotted names (output.name), as a job is made from
 * them (handle_uws_create). */
static void write_parameters(voxml *x, const char *prefix, const json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        char name[200];
        snprintf(name, sizeof(name), "%s%s%s", prefix, *prefix ? "." : "", key);
        if (json_is_object(v) && json_object_size(v) > 0) {
            write_parameters(x, name, v);
            continue;
        }
        voxml_start(x, "uws:parameter");
        voxml_attr(x, "id", name);
        if (json_is_string(v)) {
            voxml_text(x, json_string_value(v));
        } else {
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            voxml_text(x, t ? t : "");
            free(t);
        }
        voxml_end(x);
    }
}

/* The namespaces of a document's root; `version` only where UWS 1.1 has the attribute
 * (uws:job and uws:jobs: its schema refuses it on uws:results and uws:parameters). */
static void uws_namespaces(voxml *x, int version)
{
    voxml_attr(x, "xmlns:uws", "http://www.ivoa.net/xml/UWS/v1.0");
    voxml_attr(x, "xmlns:xlink", "http://www.w3.org/1999/xlink");
    voxml_attr(x, "xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance");
    if (version)
        voxml_attr(x, "version", "1.1");
}

/* The results list (with the namespaces when it stands alone: `whole`). */
static void write_results(voxml *x, const char *base, const json_t *job, int whole)
{
    voxml_start(x, "uws:results");
    if (whole)
        uws_namespaces(x, 0);
    const json_t *res = json_object_get(job, "result");
    if (strcmp(job_phase(job), "COMPLETED") == 0 && json_is_object(res)) {
        voxml_start(x, "uws:result");
        voxml_attr(x, "id", "result");
        voxml_attr(x, "xlink:type", "simple");
        voxml_attrf(x, "xlink:href", "%s/api/v1/jobs/%s/result", base, jstr(job, "id"));
        json_int_t bytes = json_integer_value(json_object_get(res, "bytes"));
        if (bytes > 0)
            voxml_attrf(x, "size", "%lld", (long long)bytes);
        voxml_end(x);
    }
    voxml_end(x);
}

/* The error summary's message: the problem's detail (or title), with every absolute
 * file path in it cut to its last component ("cannot read /srv/jobs/work/x/in.fits: ..."
 * says "cannot read in.fits: ..."): clients are not shown the server's directories.  A
 * path starts with '/' at the start of the text or after a blank, quote, '(', '[' or
 * '=', and runs to a blank, quote, ':', ',', ';' or ')'.  Into out (len bytes). */
static const char *error_message(const json_t *job, char *out, size_t len)
{
    const json_t *e = json_object_get(job, "error");
    const char *s = jstr(e, "detail");
    if (!s)
        s = jstr(e, "title") ? jstr(e, "title") : "the job failed";
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 1 < len;) {
        if (s[i] == '/' && (i == 0 || strchr(" \t\"'([=", s[i - 1]))) {
            size_t end = i + strcspn(s + i, " \t\"':,;)");
            size_t last = i;
            for (size_t k = i; k < end; k++)
                if (s[k] == '/' && k + 1 < end)
                    last = k + 1;
            i = last;
            while (i < end && o + 1 < len)
                out[o++] = s[i++];
            continue;
        }
        out[o++] = s[i++];
    }
    out[o] = '\0';
    return out;
}

static void write_job(voxml *x, const char *base, const json_t *job)
{
    voxml_start(x, "uws:job");
    uws_namespaces(x, 1);
    voxml_element(x, "uws:jobId", jstr(job, "id"));
    voxml_element(x, "uws:runId", jstr(job, "type"));
    time_element(x, "uws:ownerId", NULL);
    voxml_element(x, "uws:phase", job_phase(job));
    time_element(x, "uws:quote", NULL);
    time_element(x, "uws:creationTime", jstr(job, "created"));
    time_element(x, "uws:startTime", jstr(job, "started"));
    time_element(x, "uws:endTime", jstr(job, "finished"));
    voxml_element(x, "uws:executionDuration", "0");
    time_element(x, "uws:destruction", NULL);
    voxml_start(x, "uws:parameters");
    const json_t *req = json_object_get(job, "request");
    if (json_is_object(req))
        write_parameters(x, "", req);
    voxml_end(x);
    write_results(x, base, job, 0);
    if (strcmp(job_phase(job), "ERROR") == 0) {
        voxml_start(x, "uws:errorSummary");
        voxml_attr(x, "type", "fatal");
        voxml_attr(x, "hasDetail", "true");
        char msg[1024];
        voxml_element(x, "uws:message", error_message(job, msg, sizeof(msg)));
        voxml_end(x);
    }
    voxml_end(x);
}

/* What a parked WAIT looks at: the job, and the phase it waits to leave. */
typedef struct wait_arg {
    char id[40];
    char phase[16];
} wait_arg;

static void reply_job(hreq *r, const json_t *job)
{
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = voxml_new();
    if (x)
        write_job(x, base, job);
    vo_reply_xml(r, 200, x, "application/xml");
}

/* Whether a WAIT on a job now in `now` goes on: UWS 1.1 (section 2.2.3.1) blocks while
 * the phase is the one it was asked in (or PHASE= names) and the job is active. */
static int still_waits(const char *now, const char *phase)
{
    return phase_is_active(now) && strcmp(now, phase) == 0;
}

/* The parked WAIT's look (hreq_park, on the parking thread): answers the job once its
 * phase has left a->phase, or at the last look. */
static int wait_look(hreq *r, int last)
{
    wait_arg *a = r->work_arg;
    json_t *job = load_job(r, a->id);
    if (!job)
        return 1;                      /* gone from the store: answered 404 (or 500) */
    int waits = !last && still_waits(job_phase(job), a->phase);
    if (!waits)
        reply_job(r, job);
    json_decref(job);
    return !waits;
}

/* WAIT= of a job's GET (UWS 1.1 blocking; NULL: absent): *seconds the longest wait, 0
 * when absent, UWS_WAIT_MAX_S for -1 or more than that.  Returns 0, or -1 after a 400. */
static int wait_seconds(hreq *r, const char *wait, double *seconds)
{
    *seconds = 0;
    if (!wait)
        return 0;
    char *end;
    long w = strtol(wait, &end, 10);
    if (*end || end == wait || w < -1) {
        vo_reply_text(r, 400, "UsageError: WAIT must be a number of seconds (-1: as long "
                      "as the server waits, %d s), got '%.30s'", UWS_WAIT_MAX_S, wait);
        return -1;
    }
    *seconds = w < 0 || w > UWS_WAIT_MAX_S ? UWS_WAIT_MAX_S : (double)w;
    return 0;
}

void handle_uws_job(hreq *r, const route_match *m)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    double seconds;
    if (wait_seconds(r, vo_params_get(&p, "WAIT", NULL), &seconds)) {
        vo_params_release(&p);
        return;
    }
    const char *phase = vo_params_get(&p, "PHASE", NULL);
    json_t *job = load_job(r, m->segment);
    if (!job) {
        vo_params_release(&p);
        return;
    }
    const char *now = job_phase(job);
    wait_arg *a = NULL;
    if (seconds > 0 && still_waits(now, phase ? phase : now)) {
        a = calloc(1, sizeof(*a));
        if (a) {
            snprintf(a->id, sizeof(a->id), "%.39s", m->segment);
            snprintf(a->phase, sizeof(a->phase), "%s", phase ? phase : now);
        }
    }
    vo_params_release(&p);
    /* Parked, the wait holds no worker; when the parking is full (HREQ_PARK_MAX waits)
     * the job is answered as it is now, which UWS allows. */
    if (a && hreq_park(r, wait_look, a, free, seconds) == 0) {
        json_decref(job);
        return;
    }
    free(a);
    reply_job(r, job);
    json_decref(job);
}

static int uws_known_phase(const char *ph)
{
    static const char *const known[] = {"PENDING", "QUEUED", "EXECUTING", "COMPLETED",
                                        "ERROR", "ABORTED", "UNKNOWN", "HELD", "SUSPENDED",
                                        "ARCHIVED"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(ph, known[i]) == 0)
            return 1;
    return 0;
}

static int by_created_desc(const void *a, const void *b)
{
    const char *ca = jstr(*(json_t *const *)a, "created");
    const char *cb = jstr(*(json_t *const *)b, "created");
    return strcmp(cb ? cb : "", ca ? ca : "");
}

/* The job list filtered as UWS 1.1 lets a client ask: PHASE= (repeatable: jobs in any
 * of those phases), AFTER= (created after that ISO 8601 UTC instant), LAST=n (the n most
 * recently created, newest first).  Returns the new array, or NULL after a 400. */
static json_t *uws_filter(hreq *r, json_t *all)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return NULL;
    const char *after = vo_params_get(&p, "AFTER", NULL);
    const char *last = vo_params_get(&p, "LAST", NULL);
    int nphase = 0;
    vo_params_get(&p, "PHASE", &nphase);
    char why[160] = "";
    long nlast = -1;
    if (last) {
        char *end;
        nlast = strtol(last, &end, 10);
        if (end == last || *end || nlast < 1)
            snprintf(why, sizeof(why), "LAST must be a positive integer, got '%.30s'", last);
    }
    if (after && !why[0]) {
        int y, mo, d, h, mi;
        if (sscanf(after, "%4d-%2d-%2dT%2d:%2d", &y, &mo, &d, &h, &mi) != 5
            || strlen(after) > 30)
            snprintf(why, sizeof(why), "AFTER must be an ISO 8601 time "
                     "(YYYY-MM-DDThh:mm:ss, UTC), got '%.30s'", after);
    }
    for (int i = 0; !why[0] && i < p.n; i++)
        if (strcasecmp(p.key[i], "PHASE") == 0 && !uws_known_phase(p.value[i]))
            snprintf(why, sizeof(why), "PHASE must be a UWS phase (PENDING, QUEUED, "
                     "EXECUTING, COMPLETED, ERROR, ABORTED ...), got '%.20s'", p.value[i]);
    json_t *out = why[0] ? NULL : json_array();
    size_t i;
    json_t *job;
    json_array_foreach(all, i, job) {
        if (!out)
            break;
        const char *ph = job_phase(job), *created = jstr(job, "created");
        int keep = nphase == 0;
        for (int k = 0; !keep && k < p.n; k++)
            keep = strcasecmp(p.key[k], "PHASE") == 0 && strcmp(p.value[k], ph) == 0;
        /* ISO 8601 UTC times in one form compare as strings; "2026-12-02T13:00" is
         * before every instant of that minute but the first. */
        if (keep && after && (!created || strcmp(created, after) <= 0))
            keep = 0;
        if (keep)
            json_array_append(out, job);
    }
    vo_params_release(&p);
    if (why[0]) {
        vo_reply_text(r, 400, "UsageError: %s", why);
        return NULL;
    }
    if (!out) {
        vo_reply_text(r, 500, "FatalFault: out of memory");
        return NULL;
    }
    if (nlast > 0) {
        size_t n = json_array_size(out);
        json_t **v = n ? malloc(n * sizeof(*v)) : NULL;
        json_t *sorted = json_array();
        if ((n && !v) || !sorted) {
            free(v);
            json_decref(sorted);
            json_decref(out);
            vo_reply_text(r, 500, "FatalFault: out of memory");
            return NULL;
        }
        for (size_t k = 0; k < n; k++)
            v[k] = json_array_get(out, k);
        qsort(v, n, sizeof(*v), by_created_desc);
        for (size_t k = 0; k < n && k < (size_t)nlast; k++)
            json_array_append(sorted, v[k]);
        free(v);
        json_decref(out);
        out = sorted;
    }
    return out;
}

void handle_uws_jobs(hreq *r, const route_match *m)
{
    int unavailable = 0;
    char *list = jobs_list_json(r->srv->app->jobs, 1000, &unavailable);
    json_t *listed = list ? json_loads(list, 0, NULL) : NULL;
    free(list);
    if (unavailable) {
        uws_unreachable(r);
        return;
    }
    if (!listed) {
        vo_reply_text(r, 500, "FatalFault: the job list could not be read");
        return;
    }
    json_t *all = uws_filter(r, listed);
    json_decref(listed);
    if (!all)
        return;
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = all ? voxml_new() : NULL;
    if (x) {
        voxml_start(x, "uws:jobs");
        uws_namespaces(x, 1);
        size_t i;
        json_t *job;
        json_array_foreach(all, i, job) {
            voxml_start(x, "uws:jobref");
            voxml_attr(x, "id", jstr(job, "id"));
            voxml_attr(x, "xlink:type", "simple");
            voxml_attrf(x, "xlink:href", "%s/vo/uws/jobs/%s", base, jstr(job, "id"));
            voxml_element(x, "uws:phase", job_phase(job));
            voxml_element(x, "uws:runId", jstr(job, "type"));
            time_element(x, "uws:creationTime", jstr(job, "created"));
            voxml_end(x);
        }
    }
    json_decref(all);
    vo_reply_xml(r, 200, x, "application/xml");
}

/* Sets body[key] = value, key dotted for members of nested objects ("output.name"):
 * value is read as JSON when it is a JSON value (numbers, true, arrays, objects ...),
 * else taken as a string.  Returns 0, or -1 when the key clashes with a non-object. */
static int set_dotted(json_t *body, const char *key, const char *value)
{
    char k[200];
    snprintf(k, sizeof(k), "%s", key);
    for (char *c = k; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    json_t *o = body;
    char *part = k;
    for (char *dot; (dot = strchr(part, '.')) != NULL; part = dot + 1) {
        *dot = '\0';
        json_t *next = json_object_get(o, part);
        if (!next) {
            next = json_object();
            json_object_set_new(o, part, next);
        } else if (!json_is_object(next)) {
            return -1;
        }
        o = next;
    }
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(value);
    if (json_object_get(o, part) && json_is_object(json_object_get(o, part)))
        return (json_decref(v), -1);
    json_object_set_new(o, part, v);
    return 0;
}

static void redirect(hreq *r, const char *path)
{
    char base[256], url[400];
    vo_base_url(r, base, sizeof(base));
    snprintf(url, sizeof(url), "%s%s", base, path);
    r->rep.location = strdup(url);
    r->rep.status = 303;
    r->rep.cache_control = "no-cache";
}

/* The answer of a creation, on the worker that ran its submission
 * (jobs_api_submit_async): 303 to the new job, or the UsageError. */
static void answer_create(hreq *r, int rc, char *doc, const job_problem *pb)
{
    if (rc) {
        vo_reply_text(r, pb->status ? pb->status : 400, "UsageError: %s%s%s", pb->field,
                      pb->field[0] ? ": " : "", pb->detail);
        if (pb->status == 503)
            r->rep.retry_after = 5;
        return;
    }
    json_t *j = json_loads(doc, 0, NULL);
    free(doc);
    char path[80];
    snprintf(path, sizeof(path), "/vo/uws/jobs/%.32s", j ? jstr(j, "id") : "");
    json_decref(j);
    redirect(r, path);
}

void handle_uws_create(hreq *r, const route_match *m)
{
    if (jobs_api_check_token(r))
        return;
    char *text = NULL;
    const char *ct = hreq_header(r, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16) == 0) {
        text = r->body ? strndup(r->body, r->body_len) : NULL;
    } else {
        vo_params p;
        json_t *body = json_object();
        int got = vo_params_collect(r, &p);
        if (got == TESS_ERANGE) {
            vo_reply_text(r, 400, "UsageError: more than %d parameters in one request",
                          VO_MAX_PARAMS);
            vo_params_release(&p);
            json_decref(body);
            return;
        }
        int bad = got || !body;
        const char *clash = NULL;
        for (int i = 0; !bad && i < p.n; i++) {
            if (strcasecmp(p.key[i], "PHASE") == 0)
                continue;       /* PHASE=RUN: the job is queued at once anyway */
            int times = 0;
            vo_params_get(&p, p.key[i], &times);
            if (times > 1) {
                vo_reply_text(r, 400, "UsageError: parameter '%.60s' is given %d times "
                              "(once only)", p.key[i], times);
                vo_params_release(&p);
                json_decref(body);
                return;
            }
            if (set_dotted(body, p.key[i], p.value[i])) {
                clash = p.key[i];
                break;
            }
        }
        if (clash) {
            vo_reply_text(r, 400, "UsageError: parameter '%.60s' clashes with another one "
                          "(a dotted name is a member of an object)", clash);
            vo_params_release(&p);
            json_decref(body);
            return;
        }
        text = bad ? NULL : json_dumps(body, JSON_COMPACT);
        vo_params_release(&p);
        json_decref(body);
    }
    if (!text) {
        vo_reply_text(r, 400, "UsageError: give the job's parameters (type=...) as a form or "
                      "a JSON body");
        return;
    }
    jobs_api_submit_async(r, text, strlen(text), answer_create);
}

/* PHASE=RUN (a no-op: jobs are queued when created) or ABORT (cancels a queued or running
 * job; nothing for a finished one), then 303 to the job. */
/* Cancels job `id` for PHASE=ABORT or ACTION=DELETE; a job that has already ended stays
 * as it is.  Returns 0, or -1 after answering: the job token's refusal, uws_unreachable
 * when the job store cannot be reached, 404 when there is no such job. */
static int cancel_job(hreq *r, const char *id)
{
    if (jobs_api_check_token(r))
        return -1;
    int rc = jobs_cancel(r->srv->app->jobs, id, 10.0);
    if (rc == TESS_EIO) {
        uws_unreachable(r);
        return -1;
    }
    if (rc == TESS_ENOTFOUND) {
        vo_reply_text(r, 404, "NotFoundFault: no job '%.32s'", id);
        return -1;
    }
    return 0;                          /* cancelled, cancelling, or already ended */
}

static void post_phase(hreq *r, const char *id, const char *phase)
{
    if (!phase || (strcasecmp(phase, "RUN") != 0 && strcasecmp(phase, "ABORT") != 0)) {
        vo_reply_text(r, 400, "UsageError: PHASE must be RUN or ABORT, got '%.20s'",
                      phase ? phase : "");
        return;
    }
    json_t *job = load_job(r, id);
    if (!job)
        return;
    json_decref(job);
    if (strcasecmp(phase, "ABORT") == 0 && cancel_job(r, id))
        return;
    char path[96];
    snprintf(path, sizeof(path), "/vo/uws/jobs/%.40s", id);
    redirect(r, path);
}

static void delete_job(hreq *r, const char *id)
{
    if (cancel_job(r, id) == 0)
        redirect(r, "/vo/uws/jobs");
}

void handle_uws_job_post(hreq *r, const route_match *m)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    const char *action = vo_params_get(&p, "ACTION", NULL);
    const char *phase = vo_params_get(&p, "PHASE", NULL);
    if (action && strcasecmp(action, "DELETE") == 0)
        delete_job(r, m->segment);
    else if (phase)
        post_phase(r, m->segment, phase);
    else
        vo_reply_text(r, 400, "UsageError: POST PHASE=RUN|ABORT or ACTION=DELETE to a job");
    vo_params_release(&p);
}

void handle_uws_job_delete(hreq *r, const route_match *m)
{
    delete_job(r, m->segment);
}

void handle_uws_job_part(hreq *r, const route_match *m)
{
    json_t *job = load_job(r, m->segment);
    if (!job)
        return;
    const char *part = m->rest;
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = NULL;
    if (strcmp(part, "phase") == 0) {
        vo_reply_text(r, 200, "%s", job_phase(job));
    } else if (strcmp(part, "executionduration") == 0) {
        vo_reply_text(r, 200, "0");
    } else if (strcmp(part, "destruction") == 0 || strcmp(part, "quote") == 0
               || strcmp(part, "owner") == 0) {
        vo_reply_text(r, 200, "%s", "");
    } else if (strcmp(part, "error") == 0) {
        char msg[1024];
        if (strcmp(job_phase(job), "ERROR") == 0)
            vo_reply_text(r, 200, "%s", error_message(job, msg, sizeof(msg)));
        else
            vo_reply_text(r, 404, "NotFoundFault: job %s is %s: it has no error", m->segment,
                          job_phase(job));
    } else if (strcmp(part, "results") == 0 || strcmp(part, "parameters") == 0) {
        x = voxml_new();
        if (x && part[0] == 'r') {
            write_results(x, base, job, 1);
        } else if (x) {
            voxml_start(x, "uws:parameters");
            uws_namespaces(x, 0);
            const json_t *req = json_object_get(job, "request");
            if (json_is_object(req))
                write_parameters(x, "", req);
            voxml_end(x);
        }
        vo_reply_xml(r, 200, x, "application/xml");
    } else {
        vo_reply_text(r, 404, "NotFoundFault: a UWS job has no '%.40s' (phase, results, error, "
                      "parameters, executionduration, destruction, quote, owner)", part);
    }
    json_decref(job);
}

void handle_uws_job_part_post(hreq *r, const route_match *m)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    if (strcmp(m->rest, "phase") == 0) {
        post_phase(r, m->segment, vo_params_get(&p, "PHASE", NULL));
    } else if (strcmp(m->rest, "executionduration") == 0 || strcmp(m->rest, "destruction") == 0) {
        /* The server keeps its own (no limit, no destruction): UWS lets it. */
        json_t *job = load_job(r, m->segment);
        if (job) {
            char path[96];
            snprintf(path, sizeof(path), "/vo/uws/jobs/%.40s", m->segment);
            redirect(r, path);
            json_decref(job);
        }
    } else {
        vo_reply_text(r, 404, "NotFoundFault: nothing to POST at '%.40s' of a UWS job", m->rest);
    }
    vo_params_release(&p);
}
