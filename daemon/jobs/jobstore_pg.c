/* The PostgreSQL job store (libpq): one database shared by every server and worker of a
 * cluster; blocks are leased with SELECT ... FOR UPDATE SKIP LOCKED. */
#include "daemon/jobs/jobstore_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The schema's version, in table tessera_schema.  Version 1: jobs, blocks with leases. */
#define PG_VERSION 1


typedef struct pg_store {
    jobstore base;
    PGconn *conn;    /* NULL after a connection was dropped: made again at the next call */
    char *uri;
    int said_down;   /* an unreachable database was reported; said again once it is back */
    char said_err[160];   /* the last error reported (the same not again within a minute) */
    double said_err_at;   /* when (tess_mono_s) */
    char said_bad[48];    /* the last malformed job id reported */
    char lost_msg[160];   /* why the connection was last dropped */
    /* Statements prepared on this connection (server-side, named "t<index>"): the text
     * of each (the string literals of this file, told apart by address), so that the
     * statements run per block are parsed and planned once per connection. */
    const char *prepared[48];
    int nprepared;
} pg_store;

#define CONN(S) (((pg_store *)(S))->conn)
#define JOBSTORE_MAX_STAGES 64   /* more than any plan has (JOB_MAX_STAGES) */

static const char PG_SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS tessera_schema (version integer NOT NULL); "
    "CREATE TABLE IF NOT EXISTS jobs (id text PRIMARY KEY, seq bigserial, type text NOT NULL, "
    "state text NOT NULL, body text NOT NULL, created double precision, "
    "started double precision, finished double precision, done bigint NOT NULL DEFAULT 0, "
    "total bigint NOT NULL DEFAULT 0, error text, result text, product_dataset text, "
    "attach_to text, content_type text, run_done0 bigint, run_t0 double precision, "
    "disk_need double precision, finisher text, finish_expires timestamptz); "
    "CREATE INDEX IF NOT EXISTS jobs_state_seq ON jobs (state, seq); "
    "CREATE TABLE IF NOT EXISTS blocks (job text NOT NULL, stage integer NOT NULL, "
    "block bigint NOT NULL, done boolean NOT NULL DEFAULT false, owner text, "
    "expires timestamptz, PRIMARY KEY (job, stage, block)); "
    "CREATE INDEX IF NOT EXISTS blocks_owner ON blocks (owner) WHERE owner IS NOT NULL;";

/* Reports the database's state changing (once per outage, not once per call). */
static void note_down(pg_store *P, const char *msg)
{
    if (!P->said_down) {
        char line[300];
        snprintf(line, sizeof line, "%s", msg ? msg : "unreachable");
        line[strcspn(line, "\n")] = '\0';
        fprintf(stderr, "tesserad: jobs database: %s\n", line);
        P->said_down = 1;
    }
}

/* Ends the connection (made again at the next call) after the database was lost: no
 * answer by the deadline, the connection broken, the server shutting down. */
static void drop(pg_store *P, const char *msg)
{
    snprintf(P->lost_msg, sizeof P->lost_msg, "%s", msg ? msg : "unreachable");
    P->lost_msg[strcspn(P->lost_msg, "\n")] = '\0';
    note_down(P, P->lost_msg);
    PQfinish(P->conn);
    P->conn = NULL;
    P->nprepared = 0;   /* a new connection: nothing prepared there */
    P->base.lost = 1;
}

/* Waits until P->conn's socket is ready for `events` or the deadline (tess_mono_s) passes:
 * > 0 ready, 0 the deadline passed, < 0 the socket is gone. */
static int wait_sock(PGconn *c, short events, double deadline)
{
    for (;;) {
        int fd = PQsocket(c);
        if (fd < 0)
            return -1;
        double left = deadline - tess_mono_s();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {fd, events, 0};
        int n = poll(&pfd, 1, (int)ceil(left * 1000.0));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static int pg_simple(pg_store *P, const char *sql, double deadline);

/* Connects to P->uri by the deadline, without blocking past it, and sets the session up.
 * Returns 0, or -1 with the connection dropped (P->base.lost) or the setup refused. */
static int connect_by(pg_store *P, double deadline)
{
    char ct[16], set[96];
    int secs = (int)ceil(P->base.timeout_s);
    snprintf(ct, sizeof ct, "%d", secs < 2 ? 2 : secs);
    /* After the URI (dbname, expanded): these override what it says. */
    const char *const keys[] = {"dbname", "connect_timeout", "keepalives", "keepalives_idle",
                                "keepalives_interval", "keepalives_count", NULL};
    const char *const vals[] = {P->uri, ct, "1", "5", "2", "3", NULL};
    P->conn = PQconnectStartParams(keys, vals, 1);
    if (!P->conn) {
        drop(P, "out of memory for a connection");
        return -1;
    }
    PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
    while (PQstatus(P->conn) != CONNECTION_BAD && ps != PGRES_POLLING_OK &&
           ps != PGRES_POLLING_FAILED) {
        int w = wait_sock(P->conn, ps == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (w == 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "no answer to the connection within %g s",
                     P->base.timeout_s);
            drop(P, msg);
            return -1;
        }
        if (w < 0)
            break;
        ps = PQconnectPoll(P->conn);
    }
    if (PQstatus(P->conn) != CONNECTION_OK) {
        drop(P, PQerrorMessage(P->conn));
        return -1;
    }
    PQsetnonblocking(P->conn, 1);
    /* The server holds statements to the same bound (a stalled lock, a slow plan). */
    snprintf(set, sizeof set, "SET client_min_messages = warning; SET statement_timeout = "
             "%ld", (long)ceil(P->base.timeout_s * 1000.0));
    return pg_simple(P, set, deadline);
}

/* The results of what was sent on P->conn, by the deadline: the first error result, else
 * the last one.  NULL (the connection dropped: P->base.lost) when none came in time or the
 * connection broke. */
static PGresult *await_result(pg_store *P, double deadline)
{
    PGconn *c = P->conn;
    char msg[96];
    snprintf(msg, sizeof msg, "no answer within %g s (jobs.database_timeout_s)",
             P->base.timeout_s);
    int f;
    while ((f = PQflush(c)) > 0) {
        int w = wait_sock(c, POLLIN | POLLOUT, deadline);
        if (w <= 0 || !PQconsumeInput(c)) {
            drop(P, w == 0 ? msg : PQerrorMessage(c));
            return NULL;
        }
    }
    if (f < 0) {
        drop(P, PQerrorMessage(c));
        return NULL;
    }
    PGresult *keep = NULL;
    for (;;) {
        while (PQisBusy(c)) {
            int w = wait_sock(c, POLLIN, deadline);
            if (w <= 0 || !PQconsumeInput(c)) {
                PQclear(keep);
                drop(P, w == 0 ? msg : PQerrorMessage(c));
                return NULL;
            }
        }
        PGresult *r = PQgetResult(c);
        if (!r)
            break;
        ExecStatusType st = PQresultStatus(keep);
        if (keep && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            PQclear(r);
        } else {
            PQclear(keep);
            keep = r;
        }
    }
    if (!keep)
        drop(P, PQerrorMessage(c));
    return keep;
}

/* Sorts out a failed statement's result r (freed): the database lost (connection classes
 * 08 and 57: shut down, cancelled by statement_timeout), or a refusal that retrying will
 * not change (42: a table, column or privilege missing; 3F; 22 and 23: data the store
 * does not take), reported once; other errors (40: a deadlock) pass by retrying. */
static void failed(pg_store *P, PGresult *r)
{
    const char *c = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    char msg[160], sqlstate[8];
    snprintf(msg, sizeof msg, "%s", m ? m : PQresultErrorMessage(r));
    msg[strcspn(msg, "\n")] = '\0';
    snprintf(sqlstate, sizeof sqlstate, "%s", c ? c : "");
    const char *code = c ? sqlstate : NULL;
    PQclear(r);
    if (!code || PQstatus(P->conn) != CONNECTION_OK || strncmp(code, "08", 2) == 0 ||
        strncmp(code, "57", 2) == 0) {
        drop(P, msg);
        return;
    }
    if (strncmp(code, "42", 2) == 0 || strncmp(code, "3F", 2) == 0 ||
        strncmp(code, "22", 2) == 0 || strncmp(code, "23", 2) == 0) {
        P->base.refused = 1;
        snprintf(P->base.detail, sizeof P->base.detail, "%s", msg);
    }
    if (strcmp(P->said_err, msg) != 0 || tess_mono_s() - P->said_err_at >= 60.0) {
        fprintf(stderr, "tesserad: jobs database: %s (SQLSTATE %s)\n", msg, code);
        snprintf(P->said_err, sizeof P->said_err, "%s", msg);
        P->said_err_at = tess_mono_s();
    }
}

/* Runs SQL text (one or more statements, no parameters) by the deadline: 0 or -1. */
static int pg_simple(pg_store *P, const char *sql, double deadline)
{
    if (!PQsendQuery(P->conn, sql)) {
        drop(P, PQerrorMessage(P->conn));
        return -1;
    }
    PGresult *r = await_result(P, deadline);
    if (!r)
        return -1;
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        failed(P, r);
        return -1;
    }
    PQclear(r);
    return 0;
}

/* Runs one statement with text parameters (NULL = SQL NULL), connecting first when there
 * is no connection, all within the store's timeout.  Returns the result, or NULL when the
 * database refused it or cannot be reached (P->base.lost, P->base.refused say which). */
static PGresult *pg_q(jobstore *S, const char *sql, int n, const char *const *vals)
{
    pg_store *P = (pg_store *)S;
    double deadline = tess_mono_s() + S->timeout_s;
    if (P->conn && PQstatus(P->conn) != CONNECTION_OK)
        drop(P, PQerrorMessage(P->conn));
    if (!P->conn) {
        S->lost = 0;
        if (connect_by(P, deadline))
            return NULL;
    }
    int k = 0;
    while (k < P->nprepared && P->prepared[k] != sql)
        k++;
    char name[16];
    snprintf(name, sizeof name, "t%d", k);
    if (k == P->nprepared && k < (int)(sizeof P->prepared / sizeof P->prepared[0])) {
        if (!PQsendPrepare(P->conn, name, sql, n, NULL)) {
            drop(P, PQerrorMessage(P->conn));
            return NULL;
        }
        PGresult *p = await_result(P, deadline);
        if (!p)
            return NULL;
        if (PQresultStatus(p) != PGRES_COMMAND_OK) {
            failed(P, p);
            return NULL;
        }
        PQclear(p);
        P->prepared[P->nprepared++] = sql;
    }
    int sent = k < P->nprepared
                   ? PQsendQueryPrepared(P->conn, name, n, vals, NULL, NULL, 0)
                   : PQsendQueryParams(P->conn, sql, n, NULL, vals, NULL, NULL, 0);
    if (!sent) {
        drop(P, PQerrorMessage(P->conn));
        return NULL;
    }
    PGresult *r = await_result(P, deadline);
    if (!r)
        return NULL;
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        failed(P, r);
        return NULL;
    }
    if (P->said_down)
        fprintf(stderr, "tesserad: jobs database reachable again\n");
    P->said_down = 0;
    return r;
}

/* Whether `id` (from a row) has the form of this server's job ids; a line on stderr for
 * one that has not (once per id in a row), which is then left out. */
static int good_id(pg_store *P, const char *id)
{
    size_t n = strlen(id);
    if (n == 16 && strspn(id, "0123456789abcdef") == 16)
        return 1;
    char shown[sizeof P->said_bad];
    size_t i = 0;
    for (; i + 1 < sizeof shown && id[i]; i++)
        shown[i] = id[i] >= 0x20 && id[i] < 0x7f ? id[i] : '?';
    shown[i] = '\0';
    if (strcmp(shown, P->said_bad) != 0) {
        fprintf(stderr, "tesserad: jobs database: ignored the job row with id '%s%s': not a "
                "job id of this server (16 lowercase hex characters)\n", shown,
                id[i] ? "..." : "");
        snprintf(P->said_bad, sizeof P->said_bad, "%s", shown);
    }
    return 0;
}

/* pg_q for statements whose rows are not read: 0 or TESS_EIO; *rows the rows affected. */
static int pg_cmd(jobstore *S, const char *sql, int n, const char *const *vals, long *rows)
{
    PGresult *r = pg_q(S, sql, n, vals);
    if (!r)
        return TESS_EIO;
    if (rows)
        *rows = atol(PQcmdTuples(r));
    PQclear(r);
    return 0;
}

/* Numbers as parameter text. */
typedef struct num {
    char s[40];
} num;

static num dnum(double v)
{
    num n;
    snprintf(n.s, sizeof n.s, "%.17g", v);
    return n;
}

static num inum(long long v)
{
    num n;
    snprintf(n.s, sizeof n.s, "%lld", v);
    return n;
}

static const char *val(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

static double tval(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NAN : strtod(PQgetvalue(r, row, col), NULL);
}

static char *dupval(const PGresult *r, int row, int col)
{
    const char *s = val(r, row, col);
    return s ? strdup(s) : NULL;
}

/* ---- jobs ---------------------------------------------------------------------------- */

#define JOB_COLS "id, type, state, body, created, started, finished, done, total, error, " \
                 "result, run_done0, run_t0"

/* Row i of r into *j: 0, TESS_ENOMEM, or TESS_EINVAL for a row whose id is not one of
 * this server's (good_id). */
static int read_row(pg_store *P, const PGresult *r, int i, jobstore_job *j)
{
    memset(j, 0, sizeof *j);
    if (!good_id(P, PQgetvalue(r, i, 0)))
        return TESS_EINVAL;
    snprintf(j->id, sizeof j->id, "%s", PQgetvalue(r, i, 0));
    snprintf(j->type, sizeof j->type, "%s", PQgetvalue(r, i, 1));
    snprintf(j->state, sizeof j->state, "%s", PQgetvalue(r, i, 2));
    j->body = dupval(r, i, 3);
    j->created = tval(r, i, 4);
    j->started = tval(r, i, 5);
    j->finished = tval(r, i, 6);
    j->done = atoll(PQgetvalue(r, i, 7));
    j->total = atoll(PQgetvalue(r, i, 8));
    j->error = dupval(r, i, 9);
    j->result = dupval(r, i, 10);
    j->run_done0 = atoll(PQgetvalue(r, i, 11));
    j->run_t0 = tval(r, i, 12);
    if ((val(r, i, 3) && !j->body) || (val(r, i, 9) && !j->error) ||
        (val(r, i, 10) && !j->result)) {
        jobstore_job_clear(j);
        return TESS_ENOMEM;
    }
    return 0;
}

static int pg_get(jobstore *S, const char *id, jobstore_job *out)
{
    const char *v[] = {id};
    PGresult *r = pg_q(S, "SELECT " JOB_COLS " FROM jobs WHERE id = $1", 1, v);
    if (!r)
        return TESS_EIO;
    int rc = PQntuples(r) == 1 ? read_row((pg_store *)S, r, 0, out) : TESS_ENOTFOUND;
    if (rc == TESS_EINVAL)
        rc = TESS_ENOTFOUND;
    PQclear(r);
    return rc;
}

static int pg_list(jobstore *S, int limit, void (*cb)(void *, const jobstore_job *), void *ctx)
{
    num l = inum(limit);
    const char *v[] = {l.s};
    PGresult *r = pg_q(S, "SELECT " JOB_COLS " FROM jobs ORDER BY seq DESC LIMIT $1", 1, v);
    if (!r)
        return TESS_EIO;
    for (int i = 0; i < PQntuples(r); i++) {
        jobstore_job j;
        if (read_row((pg_store *)S, r, i, &j) == 0) {
            cb(ctx, &j);
            jobstore_job_clear(&j);
        }
    }
    PQclear(r);
    return 0;
}

static int pg_counts(jobstore *S, long counts[5])
{
    static const char *const names[5] = {"queued", "running", "succeeded", "failed",
                                         "cancelled"};
    for (int i = 0; i < 5; i++)
        counts[i] = 0;
    PGresult *r = pg_q(S, "SELECT state, count(*) FROM jobs GROUP BY state", 0, NULL);
    if (!r)
        return TESS_EIO;
    for (int row = 0; row < PQntuples(r); row++)
        for (int i = 0; i < 5; i++)
            if (strcmp(PQgetvalue(r, row, 0), names[i]) == 0)
                counts[i] = atol(PQgetvalue(r, row, 1));
    PQclear(r);
    return 0;
}

/* The single integer of a one-row, one-column query into *out. */
static int pg_int(jobstore *S, const char *sql, int n, const char *const *vals, long *out)
{
    PGresult *r = pg_q(S, sql, n, vals);
    if (!r)
        return TESS_EIO;
    int rc = PQntuples(r) == 1 ? 0 : TESS_EIO;
    if (!rc)
        *out = atol(PQgetvalue(r, 0, 0));
    PQclear(r);
    return rc;
}

static int pg_active(jobstore *S, long *n)
{
    *n = 0;
    return pg_int(S, "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')", 0, NULL,
                  n);
}

static int pg_needs(jobstore *S, void (*cb)(void *, const char *, const char *, double),
                    void *ctx)
{
    PGresult *r = pg_q(S, "SELECT id, state, disk_need FROM jobs WHERE state IN ('queued', "
                       "'running') AND disk_need > 0", 0, NULL);
    if (!r)
        return TESS_EIO;
    for (int i = 0; i < PQntuples(r); i++)
        if (good_id((pg_store *)S, PQgetvalue(r, i, 0)))
            cb(ctx, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), tval(r, i, 2));
    PQclear(r);
    return 0;
}

static int pg_insert(jobstore *S, const char *id, const char *type, const char *body,
                     double created, double disk_need)
{
    num c = dnum(created), d = dnum(disk_need);
    const char *v[] = {id, type, body, c.s, d.s};
    return pg_cmd(S, "INSERT INTO jobs (id, type, state, body, created, done, total, "
                  "disk_need) VALUES ($1, $2, 'queued', $3, $4, 0, 0, $5)", 5, v, NULL);
}

static int pg_state(jobstore *S, const char *id, char *state)
{
    const char *v[] = {id};
    PGresult *r = pg_q(S, "SELECT state FROM jobs WHERE id = $1", 1, v);
    if (!r)
        return TESS_EIO;
    int rc = TESS_ENOTFOUND;
    if (PQntuples(r) == 1) {
        snprintf(state, 16, "%s", PQgetvalue(r, 0, 0));
        rc = 0;
    }
    PQclear(r);
    return rc;
}

static int pg_end(jobstore *S, const char *id, const char *state, double finished,
                  const char *error_json, int *changed)
{
    num f = dnum(finished);
    const char *v[] = {id, state, f.s, error_json};
    long n = 0;
    int rc = pg_int(S,
                    "WITH e AS (UPDATE jobs SET state = $2, finished = $3, error = $4, "
                    "finisher = NULL WHERE id = $1 AND state IN ('queued', 'running') "
                    "RETURNING id), d AS (DELETE FROM blocks WHERE job IN (SELECT id FROM e)) "
                    "SELECT count(*) FROM e", 4, v, &n);
    /* Without its table of blocks (dropped under the cluster), the job still ends: the
     * error says why. */
    if (rc && S->refused) {
        S->refused = 0;
        rc = pg_int(S, "WITH e AS (UPDATE jobs SET state = $2, finished = $3, error = $4, "
                    "finisher = NULL WHERE id = $1 AND state IN ('queued', 'running') "
                    "RETURNING id) SELECT count(*) FROM e", 4, v, &n);
    }
    *changed = rc == 0 && n > 0;
    return rc;
}

static int pg_content_type(jobstore *S, const char *id, char *ctype)
{
    ctype[0] = '\0';
    const char *v[] = {id};
    PGresult *r = pg_q(S, "SELECT content_type FROM jobs WHERE id = $1", 1, v);
    if (!r)
        return TESS_EIO;
    if (PQntuples(r) == 1 && val(r, 0, 0))
        snprintf(ctype, 64, "%s", val(r, 0, 0));
    PQclear(r);
    return 0;
}

static int pg_type_body(jobstore *S, const char *id, char *type, char **body)
{
    *body = NULL;
    const char *v[] = {id};
    PGresult *r = pg_q(S, "SELECT type, body FROM jobs WHERE id = $1", 1, v);
    if (!r)
        return TESS_EIO;
    int rc = TESS_ENOTFOUND;
    if (PQntuples(r) == 1) {
        snprintf(type, 64, "%s", PQgetvalue(r, 0, 0));
        *body = strdup(PQgetvalue(r, 0, 1));
        rc = *body ? 0 : TESS_ENOMEM;
    }
    PQclear(r);
    return rc;
}

/* The ETA's start (run_t0, run_done0) is the first server's: others join the same run. */
static int pg_set_running(jobstore *S, const char *id, double now, long long total,
                          long long done)
{
    (void)done;
    num t = dnum(now), n = inum(total);
    const char *v[] = {id, t.s, n.s};
    return pg_cmd(S,
                  "UPDATE jobs SET state = 'running', started = COALESCE(started, $2), "
                  "total = $3, done = d.n, run_done0 = COALESCE(run_done0, d.n), "
                  "run_t0 = COALESCE(run_t0, $2) FROM (SELECT count(*) AS n FROM blocks "
                  "WHERE job = $1 AND done) d WHERE id = $1 AND state IN ('queued', 'running')",
                  3, v, NULL);
}

static int pg_set_done(jobstore *S, const char *id, long long done)
{
    (void)done;
    const char *v[] = {id};
    return pg_cmd(S, "UPDATE jobs SET done = (SELECT count(*) FROM blocks WHERE job = $1 AND "
                  "done) WHERE id = $1", 1, v, NULL);
}

static int pg_set_result(jobstore *S, const char *id, const char *result_json,
                         const char *dataset, const char *attach_to, const char *content_type)
{
    const char *v[] = {id, result_json, dataset, attach_to, content_type};
    return pg_cmd(S, "UPDATE jobs SET result = $2, product_dataset = $3, attach_to = $4, "
                  "content_type = $5 WHERE id = $1", 5, v, NULL);
}

/* The job a runner should work on: the oldest running job with work for one more runner,
 * else the oldest queued one, among those whose id is of this server's form.  A running job has work when its first plan is not made and
 * nobody's claim on it is alive, when the lowest stage with blocks not done has some that
 * nobody holds a live lease on, or when every block is done and nobody's finish claim is
 * alive.  A job whose last blocks or whose finish another runner holds is left to it, so
 * the other runners take up the next job instead of waiting. */
static int pg_next(jobstore *S, char *id)
{
    id[0] = '\0';
    PGresult *r = pg_q(S,
        "SELECT j.id FROM jobs j WHERE j.id ~ '^[0-9a-f]{16}$' AND ("
        "j.state = 'queued' OR (j.state = 'running' AND ("
        "((j.finisher IS NULL OR j.finish_expires < now()) AND NOT EXISTS (SELECT 1 FROM "
        "blocks b WHERE b.job = j.id AND NOT b.done)) OR EXISTS (SELECT 1 FROM blocks b "
        "WHERE b.job = j.id AND NOT b.done AND (b.expires IS NULL OR b.expires < now()) "
        "AND b.stage = (SELECT min(c.stage) FROM blocks c WHERE c.job = j.id AND NOT "
        "c.done))))) ORDER BY j.state = 'running' DESC, j.seq LIMIT 1", 0, NULL);
    if (!r)
        return TESS_EIO;
    if (PQntuples(r) == 1 && good_id((pg_store *)S, PQgetvalue(r, 0, 0)))
        snprintf(id, 17, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

static int pg_succeeded(jobstore *S, double since,
                        void (*cb)(void *, const char *, const char *, const char *,
                                   const char *, double),
                        void *ctx)
{
    num s = dnum(isnan(since) || since < -1e300 ? -1e300 : since);
    const char *v[] = {s.s};
    PGresult *r = pg_q(S, "SELECT id, product_dataset, attach_to, content_type, finished FROM "
                       "jobs WHERE state = 'succeeded' AND COALESCE(finished, 0) > $1 "
                       "ORDER BY seq", 1, v);
    if (!r)
        return TESS_EIO;
    for (int i = 0; i < PQntuples(r); i++)
        if (good_id((pg_store *)S, PQgetvalue(r, i, 0)))
            cb(ctx, PQgetvalue(r, i, 0), val(r, i, 1), val(r, i, 2), val(r, i, 3),
               tval(r, i, 4));
    PQclear(r);
    return 0;
}

/* ---- blocks -------------------------------------------------------------------------- */

static int pg_reset_blocks(jobstore *S, const char *id)
{
    const char *v[] = {id};
    return pg_cmd(S, "DELETE FROM blocks WHERE job = $1", 1, v, NULL);
}

static int pg_prune_blocks(jobstore *S)
{
    return pg_cmd(S, "DELETE FROM blocks WHERE job NOT IN (SELECT id FROM jobs WHERE state = "
                  "'running')", 0, NULL, NULL);
}

static int pg_done_blocks(jobstore *S, const char *id, void (*cb)(void *, int, long), void *ctx)
{
    const char *v[] = {id};
    PGresult *r = pg_q(S, "SELECT stage, block FROM blocks WHERE job = $1 AND done", 1, v);
    if (!r)
        return TESS_EIO;
    for (int i = 0; i < PQntuples(r); i++)
        cb(ctx, atoi(PQgetvalue(r, i, 0)), atol(PQgetvalue(r, i, 1)));
    PQclear(r);
    return 0;
}

/* "{a,b,c}": an array parameter of n integers (malloc'd; NULL when out of memory). */
static char *int_array(int n, const int *iv, const long *lv)
{
    size_t cap = 3 + (size_t)n * 21;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t at = 0;
    s[at++] = '{';
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s%ld", i ? "," : "",
                               iv ? (long)iv[i] : lv[i]);
    snprintf(s + at, cap - at, "}");
    return s;
}

/* Runs `sql` with $1 = id, $2 = the n ints as an array, $3 = the n longs as an array. */
static int pg_cmd_arrays(jobstore *S, const char *sql, const char *id, int n, const int *iv,
                         const long *lv)
{
    char *ia = int_array(n, iv, NULL), *la = int_array(n, NULL, lv);
    int rc = TESS_ENOMEM;
    if (ia && la) {
        const char *v[] = {id, ia, la};
        rc = pg_cmd(S, sql, 3, v, NULL);
    }
    free(ia);
    free(la);
    return rc;
}

static int pg_record_blocks(jobstore *S, const char *id, int n, const int *stages,
                            const long *blocks)
{
    /* DISTINCT: a block run twice here (its lease expired while the database was away,
     * and it came back) is in the list twice. */
    return pg_cmd_arrays(S, "INSERT INTO blocks (job, stage, block, done) SELECT DISTINCT $1, "
                         "s, b, true FROM unnest($2::integer[], $3::bigint[]) AS u(s, b) "
                         "ON CONFLICT (job, stage, block) DO UPDATE SET done = true, "
                         "owner = NULL, expires = NULL", id, n, stages, blocks);
}

/* ---- leases -------------------------------------------------------------------------- */

static int pg_plan_blocks(jobstore *S, const char *id, int nstages, const long *nblocks)
{
    int st[JOBSTORE_MAX_STAGES];
    if (nstages > JOBSTORE_MAX_STAGES)
        return TESS_ERANGE;
    for (int i = 0; i < nstages; i++)
        st[i] = i;
    /* One statement: the rows of a job are there all or none. */
    return pg_cmd_arrays(S, "INSERT INTO blocks (job, stage, block) SELECT $1, u.s, "
                         "generate_series(0, u.n - 1) FROM unnest($2::integer[], "
                         "$3::bigint[]) AS u(s, n) WHERE NOT EXISTS (SELECT 1 FROM blocks "
                         "WHERE job = $1) ON CONFLICT DO NOTHING", id, nstages, st, nblocks);
}

static int pg_renew(jobstore *S, const char *owner, double lease_s, const char *id, int n,
                    const int *stages, const long *blocks, long *renewed)
{
    num l = dnum(lease_s);
    char *sa = int_array(n, stages, NULL), *ba = int_array(n, NULL, blocks);
    *renewed = 0;
    int rc = TESS_ENOMEM;
    if (sa && ba) {
        const char *v[] = {owner, l.s, id, sa, ba};
        rc = pg_int(S,
                    "WITH h AS (SELECT $3::text AS job, u.s, u.b FROM "
                    "unnest($4::integer[], $5::bigint[]) AS u(s, b)), "
                    "a AS (UPDATE blocks t SET expires = now() + $2 * interval '1 second' "
                    "FROM h WHERE t.owner = $1 AND NOT t.done AND t.job = h.job AND "
                    "t.stage = h.s AND t.block = h.b RETURNING 1), "
                    "r AS (UPDATE blocks t SET owner = NULL, expires = NULL WHERE t.owner = $1 "
                    "AND NOT t.done AND NOT EXISTS (SELECT 1 FROM h WHERE t.job = h.job AND "
                    "t.stage = h.s AND t.block = h.b) RETURNING 1), "
                    "f AS (UPDATE jobs SET finish_expires = now() + $2 * interval '1 second' "
                    "WHERE finisher = $1 AND state IN ('queued', 'running') RETURNING 1) "
                    "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM f) + "
                    "0 * (SELECT count(*) FROM r)", 5, v, renewed);
    }
    free(sa);
    free(ba);
    return rc;
}

static int pg_planned(jobstore *S, const char *id, int *planned)
{
    const char *v[] = {id};
    long n = 0;
    int rc = pg_int(S, "SELECT count(*) FROM (SELECT 1 FROM blocks WHERE job = $1 LIMIT 1) b",
                    1, v, &n);
    *planned = n > 0;
    return rc;
}

static int pg_release(jobstore *S, const char *owner)
{
    const char *v[] = {owner};
    return pg_cmd(S, "WITH j AS (UPDATE jobs SET finisher = NULL, finish_expires = NULL "
                  "WHERE finisher = $1 RETURNING 1) UPDATE blocks SET owner = NULL, "
                  "expires = NULL WHERE owner = $1 AND NOT done", 1, v, NULL);
}

static int pg_claim_finish(jobstore *S, const char *id, const char *owner, double lease_s,
                           int *took_over)
{
    num l = dnum(lease_s);
    const char *v[] = {id, owner, l.s};
    *took_over = 0;
    /* o: the claim as it was (the row locked), to tell a claim taken over from another
     * owner whose lease expired. */
    PGresult *r = pg_q(S, "WITH o AS (SELECT finisher FROM jobs WHERE id = $1 FOR UPDATE) "
                       "UPDATE jobs SET finisher = $2, finish_expires = now() + $3 * "
                       "interval '1 second' FROM o WHERE id = $1 AND state IN ('queued', "
                       "'running') AND (jobs.finisher IS NULL OR jobs.finisher = $2 OR "
                       "finish_expires < now()) RETURNING o.finisher IS NOT NULL AND "
                       "o.finisher <> $2", 3, v);
    if (!r)
        return TESS_EIO;
    int rc = PQntuples(r) == 1 ? 0 : TESS_EAGAIN;
    if (!rc)
        *took_over = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return rc;
}

/* "{1,2,3}" (an integer array's text) into out[*n], at most max. */
static void parse_array(const char *s, long *out, int *n, int max)
{
    *n = 0;
    if (!s || *s++ != '{')
        return;
    while (*s && *s != '}' && *n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            break;
        out[(*n)++] = v;
        s = *end == ',' ? end + 1 : end;
    }
}

static int pg_record_lease(jobstore *S, const char *id, int n, const int *stages,
                           const long *blocks, int stage, const char *owner, double lease_s,
                           int max, long *out, int *nout, int *expired, long *left,
                           int *others, char *state)
{
    *nout = *expired = *others = 0;
    *left = 1;
    state[0] = '\0';
    num st = inum(stage), l = dnum(lease_s), m = inum(max);
    char *sa = int_array(n, stages, NULL), *ba = int_array(n, NULL, blocks);
    int rc = TESS_ENOMEM;
    if (sa && ba) {
        const char *v[] = {id, sa, ba, st.s, owner, l.s, m.s};
        /* h: the blocks done here; r: those of them not recorded before (a block run
         * twice, here or elsewhere, counts once), their leases ended; j: the job's
         * progress, its count of done blocks as this statement sees them plus r (never
         * less than before; the finish sets it exact); c, a: the lease, with SKIP LOCKED, of
         * blocks neither done nor leased and not among h (one row is not updated twice
         * in one statement).  The answer: state, blocks of the stage left (at most an
         * over-estimate while others record at the same time), the blocks leased, how
         * many of them were expired leases, the other owners holding leases of the job. */
        PGresult *r = pg_q(S,
            "WITH h AS (SELECT DISTINCT u.s, u.b FROM unnest($2::integer[], $3::bigint[]) "
            "AS u(s, b)), "
            "r AS (UPDATE blocks t SET done = true, owner = NULL, expires = NULL FROM h "
            "WHERE t.job = $1 AND t.stage = h.s AND t.block = h.b AND NOT t.done "
            "RETURNING t.stage), "
            "j AS (UPDATE jobs SET done = GREATEST(done, (SELECT count(*) FROM blocks "
            "WHERE job = $1 AND done) + (SELECT count(*) FROM r)) WHERE id = $1 AND "
            "EXISTS (SELECT 1 FROM r) RETURNING 1), "
            "c AS (SELECT b.block, b.expires FROM blocks b WHERE b.job = $1 AND "
            "b.stage = $4 AND NOT b.done AND (b.expires IS NULL OR b.expires < now()) "
            "AND NOT EXISTS (SELECT 1 FROM h WHERE h.s = b.stage AND h.b = b.block) "
            "AND EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND state = 'running') "
            "ORDER BY b.block LIMIT $7 FOR UPDATE OF b SKIP LOCKED), "
            "a AS (UPDATE blocks t SET owner = $5, expires = now() + $6 * "
            "interval '1 second' FROM c WHERE t.job = $1 AND t.stage = $4 AND "
            "t.block = c.block RETURNING t.block, c.expires IS NOT NULL AS was) "
            "SELECT (SELECT state FROM jobs WHERE id = $1), "
            "(SELECT count(*) FROM blocks WHERE job = $1 AND stage = $4 AND NOT done) - "
            "(SELECT count(*) FROM r WHERE r.stage = $4), "
            "(SELECT COALESCE(array_agg(block ORDER BY block), '{}') FROM a), "
            "(SELECT count(*) FROM a WHERE was), (SELECT count(*) FROM j), "
            "(SELECT count(DISTINCT owner) FROM blocks WHERE job = $1 AND NOT done AND "
            "owner IS NOT NULL AND owner <> $5)", 7, v);
        rc = TESS_EIO;
        if (r) {
            rc = 0;
            if (PQntuples(r) == 1 && val(r, 0, 0)) {
                snprintf(state, 16, "%s", PQgetvalue(r, 0, 0));
                *left = atol(PQgetvalue(r, 0, 1));
                parse_array(PQgetvalue(r, 0, 2), out, nout, max);
                *expired = atoi(PQgetvalue(r, 0, 3));
                *others = atoi(PQgetvalue(r, 0, 5));
            } else {
                rc = TESS_ENOTFOUND;
            }
            PQclear(r);
        }
    }
    free(sa);
    free(ba);
    return rc;
}

static int pg_finish_commit(jobstore *S, const char *id, const char *owner, double finished,
                            const char *result_json, const char *dataset,
                            const char *attach_to, const char *content_type, int *changed)
{
    num f = dnum(finished);
    const char *v[] = {id, owner, f.s, result_json, dataset, attach_to, content_type};
    long n = 0;
    /* One statement: the job's state is checked as the product is registered, so a
     * cancel that came first wins and one that comes later finds the job ended. */
    int rc = pg_int(S,
                    "WITH e AS (UPDATE jobs SET state = 'succeeded', finished = $3, "
                    "result = $4, product_dataset = $5, attach_to = $6, content_type = $7, "
                    "done = total, finisher = NULL, finish_expires = NULL WHERE id = $1 AND "
                    "state = 'running' AND finisher = $2 RETURNING id), "
                    "d AS (DELETE FROM blocks WHERE job IN (SELECT id FROM e)) "
                    "SELECT count(*) FROM e", 7, v, &n);
    *changed = rc == 0 && n > 0;
    return rc;
}

/* ---- open ---------------------------------------------------------------------------- */

static void pg_close(jobstore *S)
{
    PQfinish(CONN(S));
    free(((pg_store *)S)->uri);
    jobstore_base_fini(S);
    free(S);
}

static const jobstore_ops pg_ops = {
    pg_close, pg_get, pg_list, pg_counts, pg_active, pg_needs, pg_insert, pg_state, pg_end,
    pg_content_type, pg_type_body, pg_set_running, pg_set_done, pg_set_result, pg_next,
    pg_succeeded, pg_reset_blocks, pg_prune_blocks, pg_done_blocks, pg_record_blocks,
    pg_plan_blocks, pg_renew, pg_planned, pg_release, pg_claim_finish, pg_record_lease,
    pg_finish_commit,
};

/* Creates the schema or checks its version, in one transaction under the advisory lock,
 * each statement within the store's timeout. */
static int migrate(pg_store *P, char *err, size_t errlen)
{
    double timeout = P->base.timeout_s;
    int ok = pg_simple(P, "BEGIN", tess_mono_s() + timeout) == 0 &&
             pg_simple(P, "SELECT pg_advisory_xact_lock(1415934835)", /* "Tess" */
                       tess_mono_s() + timeout) == 0 &&
             pg_simple(P, PG_SCHEMA, tess_mono_s() + timeout) == 0;
    long ver = -1;
    if (ok) {
        ok = PQsendQuery(P->conn, "SELECT COALESCE(max(version), 0) FROM tessera_schema");
        PGresult *r = ok ? await_result(P, tess_mono_s() + timeout) : NULL;
        ok = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
        if (ok)
            ver = atol(PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    if (ok && ver > PG_VERSION) {
        tess_seterr(err, errlen, "jobs database: its schema is version %ld, made by a newer "
                    "tesserad (this one knows versions up to %d)", ver, PG_VERSION);
        return TESS_EIO;
    }
    if (ok && ver == 0)
        ok = pg_simple(P, "INSERT INTO tessera_schema (version) VALUES (1)",
                       tess_mono_s() + timeout) == 0;
    if (ok)
        ok = pg_simple(P, "COMMIT", tess_mono_s() + timeout) == 0;
    if (!ok) {
        tess_seterr(err, errlen, "jobs database: cannot create or check the schema: %s",
                    P->base.lost ? P->lost_msg : P->said_err);
        return TESS_EIO;
    }
    return 0;
}

int jobstore_open_pg(const char *uri, double timeout_s, jobstore **out, char *err,
                     size_t errlen)
{
    pg_store *P = calloc(1, sizeof *P);
    if (!P || !(P->uri = strdup(uri))) {
        free(P);
        tess_seterr(err, errlen, "out of memory for the job store");
        return TESS_ENOMEM;
    }
    jobstore_base_init(&P->base, &pg_ops, 1, timeout_s > 0 ? timeout_s : 5.0);
    P->said_down = 1;   /* said below, as the error of the start */
    int rc = 0;
    if (connect_by(P, tess_mono_s() + P->base.timeout_s) != 0) {
        tess_seterr(err, errlen, "jobs.database: cannot connect: %s",
                    P->lost_msg[0] ? P->lost_msg : P->said_err);
        rc = TESS_EIO;
    }
    if (!rc)
        rc = migrate(P, err, errlen);
    if (rc) {
        pg_close(&P->base);
        return rc;
    }
    P->said_down = 0;
    *out = &P->base;
    return 0;
}
