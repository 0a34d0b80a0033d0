/* The documents the runner gives out: a job, the list of jobs, the counts per state and the
 * metrics (jobs.h).  HTTP threads call these. */
#include "daemon/jobs/jobs_impl.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void iso_time(double t, char *out, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    int ms = (int)((t - (double)s) * 1000.0);
    if (ms < 0)
        ms = 0;
    if (ms > 999)
        ms = 999;
    char buf[32];
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03dZ", buf, ms);
}

/* Builds the JSON of the job row `j`. */
static json_t *row_json(const jobstore_job *j)
{
    const char *id = j->id, *state = j->state;
    long long done = j->done, total = j->total;
    json_t *o = json_object();
    int bad = 0;   /* a member not set (memory): the document is not given out short */
    bad |= json_object_set_new(o, "id", json_string(id)) != 0;
    bad |= json_object_set_new(o, "type", json_string(j->type)) != 0;
    bad |= json_object_set_new(o, "state", json_string(state)) != 0;
    json_t *pr = json_object();
    bad |= json_object_set_new(pr, "done", json_integer(done)) != 0;
    bad |= json_object_set_new(pr, "total", json_integer(total)) != 0;
    bad |= json_object_set_new(pr, "fraction",
                               json_real(total > 0 ? (double)done / (double)total : 0.0)) != 0;
    bad |= json_object_set_new(o, "progress", pr) != 0;
    /* ETA from the rate of this run (blocks done since the process took the job up). */
    json_t *eta = json_null();
    if (strcmp(state, "running") == 0 && !isnan(j->run_t0)) {
        long long d0 = j->run_done0;
        double el = jobs_now() - j->run_t0;
        if (done > d0 && el > 0) {
            double rate = (double)(done - d0) / el;
            json_decref(eta);
            eta = json_real((double)(total - done) / rate);
        }
    }
    bad |= json_object_set_new(o, "eta_s", eta) != 0;
    static const char *const tnames[] = {"created", "started", "finished"};
    const double times[3] = {j->created, j->started, j->finished};
    for (int k = 0; k < 3; k++) {
        if (isnan(times[k])) {
            bad |= json_object_set_new(o, tnames[k], json_null()) != 0;
        } else {
            char iso[40];
            iso_time(times[k], iso, sizeof(iso));
            bad |= json_object_set_new(o, tnames[k], json_string(iso)) != 0;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *txt = k == 0 ? j->error : j->result;
        json_t *v = txt ? json_loads(txt, 0, NULL) : NULL;
        bad |= json_object_set_new(o, k == 0 ? "error" : "result", v ? v : json_null()) != 0;
    }
    json_t *links = json_object();
    char buf[64];
    snprintf(buf, sizeof(buf), "/api/v1/jobs/%s", id);
    bad |= json_object_set_new(links, "self", json_string(buf)) != 0;
    if (strcmp(state, "succeeded") == 0) {
        snprintf(buf, sizeof(buf), "/api/v1/jobs/%s/result", id);
        bad |= json_object_set_new(links, "result", json_string(buf)) != 0;
    }
    bad |= json_object_set_new(o, "links", links) != 0;
    json_t *b = j->body ? json_loads(j->body, 0, NULL) : NULL;
    bad |= json_object_set_new(o, "request", b ? b : json_null()) != 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- calls from HTTP threads ------------------------------------------------------ */

/* The HTTP threads never wait on the database past its bound: while the store's circuit
 * is open (the database was lost), they do not call it at all and answer 503; otherwise
 * each store call is bounded (jobstore.h), and the runner's lock, which the runner holds
 * through its own bounded calls, is waited for at most twice that. */
int jobs_http_lock(jobs *J)
{
    double bound = 2.0 * J->store_bound_s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)bound;
    return pthread_mutex_timedlock(&J->lock, &ts) == 0 ? 0 : TESS_EIO;
}

/* HTTP reads of the embedded store take the runner's lock, so that a job seen ended has
 * its files removed already (the runner ends it and removes them under the lock).  Those
 * of a shared store go without it: other servers end jobs too, and the runner may hold
 * the lock through a call to a stalled database.  0, or TESS_EIO. */
int jobs_http_read_begin(jobs *J)
{
    return J->src->reads_unlocked ? 0 : jobs_http_lock(J);
}

void jobs_http_read_end(jobs *J)
{
    if (!J->src->reads_unlocked)
        pthread_mutex_unlock(&J->lock);
}

/* *rc (may be NULL): jobstore_get's code. */
static json_t *job_json_rc_locked(jobs *J, const char *id, int *rc)
{
    jobstore_job j;
    int r = jobstore_get(J->st, id, &j);
    if (rc)
        *rc = r;
    if (r != 0)
        return NULL;
    json_t *o = row_json(&j);
    jobstore_job_clear(&j);
    if (!o && rc)
        *rc = TESS_ENOMEM;
    return o;
}

json_t *jobs_job_json_locked(jobs *J, const char *id)
{
    return job_json_rc_locked(J, id, NULL);
}

char *jobs_get_json(jobs *J, const char *id, int *missing)
{
    *missing = 0;
    if (!jobs_valid_id(id)) {
        *missing = 1;
        return NULL;
    }
    int rc = TESS_EIO;
    json_t *o = NULL;
    if (jobstore_available(J->st) && jobs_http_read_begin(J) == 0) {
        o = job_json_rc_locked(J, id, &rc);
        jobs_http_read_end(J);
    }
    if (!o) {
        *missing = rc == TESS_EIO ? 2 : rc == TESS_ENOMEM ? 0 : 1;
        return NULL;
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

static void list_cb(void *ctx, const jobstore_job *j)
{
    json_array_append_new(ctx, row_json(j));
}

char *jobs_list_json(jobs *J, int limit, int *unavailable)
{
    *unavailable = 0;
    json_t *a = json_array();
    if (!a)
        return NULL;
    int rc = TESS_EIO;
    if (jobstore_available(J->st) && jobs_http_read_begin(J) == 0) {
        rc = jobstore_list(J->st, limit, list_cb, a);
        jobs_http_read_end(J);
    }
    if (rc != 0) {
        json_decref(a);
        *unavailable = 1;
        return NULL;
    }
    char *s = json_dumps(a, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(a);
    return s;
}

int jobs_counts(jobs *J, long counts[5])
{
    long now[5];
    int rc = jobstore_available(J->st) ? jobstore_counts_now(J->st, now) : TESS_EIO;
    for (int i = 0; i < 5; i++) {
        if (rc == 0)
            __atomic_store_n(&J->counts[i], now[i], __ATOMIC_RELAXED);
        counts[i] = __atomic_load_n(&J->counts[i], __ATOMIC_RELAXED);
    }
    return rc;
}

/* Appends `text` to the malloc'd string *s; 0 (and *s freed, NULL) when out of memory. */
static int append_text(char **s, const char *text)
{
    size_t a = strlen(*s), b = strlen(text);
    char *t = realloc(*s, a + b + 1);
    if (!t) {
        free(*s);
        *s = NULL;
        return 0;
    }
    memcpy(t + a, text, b + 1);
    *s = t;
    return 1;
}

char *jobs_metrics_text(jobs *J)
{
    /* Without the lock: the runner may hold it through a call to a stalled database. */
    unsigned long long blocks = __atomic_load_n(&J->blocks_run, __ATOMIC_RELAXED);
    unsigned long long ren = __atomic_load_n(&J->renewals, __ATOMIC_RELAXED);
    unsigned long long exp = __atomic_load_n(&J->expiries, __ATOMIC_RELAXED);
    unsigned long long fexp = __atomic_load_n(&J->finish_expiries, __ATOMIC_RELAXED);
    double dbs = jobstore_seconds(J->st);
    unsigned long long calls[JOBSTORE_NOPS];
    double secs[JOBSTORE_NOPS];
    for (int i = 0; i < JOBSTORE_NOPS; i++) {
        calls[i] = jobstore_op_calls(J->st, i);
        secs[i] = jobstore_op_seconds(J->st, i);
    }
    char *out = NULL;
    if (asprintf(&out,
                 "# HELP tessera_job_blocks_total Job blocks this process ran to completion.\n"
                 "# TYPE tessera_job_blocks_total counter\n"
                 "tessera_job_blocks_total %llu\n"
                 "# HELP tessera_job_lease_renewals_total Block and finish leases this process "
                 "renewed (shared job store).\n"
                 "# TYPE tessera_job_lease_renewals_total counter\n"
                 "tessera_job_lease_renewals_total %llu\n"
                 "# HELP tessera_job_lease_expiries_total Expired leases of other processes "
                 "this process took over: blocks and job claims (plan, finish) (shared job "
                 "store).\n"
                 "# TYPE tessera_job_lease_expiries_total counter\n"
                 "tessera_job_lease_expiries_total %llu\n"
                 "# HELP tessera_job_finish_expiries_total Expired job claims (first plan, "
                 "finish) of other processes this process took over (shared job store; also "
                 "counted in tessera_job_lease_expiries_total).\n"
                 "# TYPE tessera_job_finish_expiries_total counter\n"
                 "tessera_job_finish_expiries_total %llu\n"
                 "# HELP tessera_job_database_errors_total Job-store calls that failed (the "
                 "database refused or could not be reached).\n"
                 "# TYPE tessera_job_database_errors_total counter\n"
                 "tessera_job_database_errors_total %llu\n"
                 "# HELP tessera_job_database_seconds_total Time spent in job-store calls "
                 "(leases, renewals, records, state), by every thread of the runner.\n"
                 "# TYPE tessera_job_database_seconds_total counter\n"
                 "tessera_job_database_seconds_total %.6f\n"
                 "# HELP tessera_job_database_up Whether the last job-store call reached the "
                 "database.\n"
                 "# TYPE tessera_job_database_up gauge\n"
                 "tessera_job_database_up %d\n"
                 "# HELP tessera_job_database_calls_total Job-store calls (one statement "
                 "each) by operation.\n"
                 "# TYPE tessera_job_database_calls_total counter\n",
                 blocks, ren, exp + fexp, fexp, jobstore_errors(J->st), dbs,
                 jobstore_reachable(J->st)) < 0)
        return NULL;
    /* Per operation, those called at least once: calls, then seconds. */
    for (int pass = 0; pass < 2 && out; pass++) {
        if (pass == 1 && !append_text(&out, "# HELP tessera_job_database_op_seconds_total "
                                      "Time spent in job-store calls by operation.\n"
                                      "# TYPE tessera_job_database_op_seconds_total counter\n"))
            return NULL;
        for (int i = 0; i < JOBSTORE_NOPS && out; i++) {
            if (!calls[i])
                continue;
            char line[160];
            if (pass == 0)
                snprintf(line, sizeof line, "tessera_job_database_calls_total{op=\"%s\"} %llu\n",
                         jobstore_op_name(i), calls[i]);
            else
                snprintf(line, sizeof line,
                         "tessera_job_database_op_seconds_total{op=\"%s\"} %.6f\n",
                         jobstore_op_name(i), secs[i]);
            if (!append_text(&out, line))
                return NULL;
        }
    }
    return out;
}
