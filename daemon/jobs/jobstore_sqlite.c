/* The SQLite job store: jobs.dir/jobs.sqlite (WAL), one server per jobs directory. */
#include "daemon/jobs/jobstore_impl.h"
#include "engine/base/error.h"

#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sq_store {
    jobstore base;
    sqlite3 *db;
} sq_store;

#define DB(S) (((sq_store *)(S))->db)

static int exec_sql(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        tess_seterr(err, errlen, "jobs database: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return TESS_EIO;
    }
    return 0;
}

/* Runs one statement with text/double/int64 parameters given as a format string:
 * 't' const char * (NULL = NULL), 'd' double, 'i' long long.  Returns SQLITE_DONE/ROW
 * code of the single step, or an error code (then nothing ran: a parameter that cannot
 * be bound - a text's copy out of memory - would otherwise run as NULL). */
static int sql_vrun(sqlite3 *db, const char *sql, const char *fmt, va_list ap)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errmsg(db));
        return SQLITE_ERROR;
    }
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        if (fmt[i] == 't') {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(st, i + 1, s, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(st, i + 1);
        } else if (fmt[i] == 'd') {
            rc = sqlite3_bind_double(st, i + 1, va_arg(ap, double));
        } else {
            rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, long long));
        }
    }
    if (rc != SQLITE_OK) {
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errstr(rc));
        sqlite3_finalize(st);
        return rc;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        fprintf(stderr, "tesserad: jobs database: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

static int sql_run(sqlite3 *db, const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sql_vrun(db, sql, fmt, ap);
    va_end(ap);
    return rc;
}

/* sql_run for a change that a client is told about (a job accepted, a job's end): its
 * commit syncs the WAL before it returns.  The database runs with synchronous = NORMAL,
 * under which a power loss takes back the commits made since the WAL was last synced:
 * harmless for progress and recorded blocks (blocks not recorded run again), not for a
 * job acknowledged or reported ended. */
static int sql_run_durable(sqlite3 *db, const char *sql, const char *fmt, ...)
{
    sqlite3_exec(db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
    va_list ap;
    va_start(ap, fmt);
    int rc = sql_vrun(db, sql, fmt, ap);
    va_end(ap);
    sqlite3_exec(db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
    return rc;
}

/* 0 for a statement that ran to its end, else TESS_EIO. */
static int done_or_eio(int rc)
{
    return rc == SQLITE_DONE ? 0 : TESS_EIO;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static double col_time(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const char *s = col_text(st, i);
    return s ? strdup(s) : NULL;
}

/* ---- jobs ---------------------------------------------------------------------------- */

#define JOB_COLS "id, type, state, body, created, started, finished, done, total, error, " \
                 "result, run_done0, run_t0"

/* Reads the row `st` (columns as JOB_COLS) into *j; TESS_ENOMEM when a copy failed. */
static int read_row(sqlite3_stmt *st, jobstore_job *j)
{
    memset(j, 0, sizeof *j);
    snprintf(j->id, sizeof j->id, "%s", col_text(st, 0) ? col_text(st, 0) : "");
    snprintf(j->type, sizeof j->type, "%s", col_text(st, 1) ? col_text(st, 1) : "");
    snprintf(j->state, sizeof j->state, "%s", col_text(st, 2) ? col_text(st, 2) : "");
    j->body = col_dup(st, 3);
    j->created = col_time(st, 4);
    j->started = col_time(st, 5);
    j->finished = col_time(st, 6);
    j->done = sqlite3_column_int64(st, 7);
    j->total = sqlite3_column_int64(st, 8);
    j->error = col_dup(st, 9);
    j->result = col_dup(st, 10);
    j->run_done0 = sqlite3_column_int64(st, 11);
    j->run_t0 = col_time(st, 12);
    if ((col_text(st, 3) && !j->body) || (col_text(st, 9) && !j->error) ||
        (col_text(st, 10) && !j->result)) {
        jobstore_job_clear(j);
        return TESS_ENOMEM;
    }
    return 0;
}

static int sq_get(jobstore *S, const char *id, jobstore_job *out)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT " JOB_COLS " FROM jobs WHERE id = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return TESS_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW ? read_row(st, out) : rc == SQLITE_DONE ? TESS_ENOTFOUND : TESS_EIO;
    sqlite3_finalize(st);
    return rc;
}

static int sq_list(jobstore *S, int limit, void (*cb)(void *, const jobstore_job *), void *ctx)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT " JOB_COLS " FROM jobs ORDER BY seq DESC LIMIT ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return TESS_EIO;
    sqlite3_bind_int(st, 1, limit);
    while (sqlite3_step(st) == SQLITE_ROW) {
        jobstore_job j;
        if (read_row(st, &j) == 0) {
            cb(ctx, &j);
            jobstore_job_clear(&j);
        }
    }
    sqlite3_finalize(st);
    return 0;
}

static int sq_counts(jobstore *S, long counts[5])
{
    static const char *const names[5] = {"queued", "running", "succeeded", "failed",
                                         "cancelled"};
    for (int i = 0; i < 5; i++)
        counts[i] = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT state, COUNT(*) FROM jobs GROUP BY state", -1, &st,
                           NULL) != SQLITE_OK)
        return TESS_EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *s = col_text(st, 0);
        for (int i = 0; i < 5; i++)
            if (s && strcmp(s, names[i]) == 0)
                counts[i] = (long)sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return 0;
}

static int sq_active(jobstore *S, long *n)
{
    *n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT COUNT(*) FROM jobs WHERE state IN ('queued','running')",
                           -1, &st, NULL) != SQLITE_OK)
        return TESS_EIO;
    if (sqlite3_step(st) == SQLITE_ROW)
        *n = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int sq_needs(jobstore *S, void (*cb)(void *, const char *, const char *, double),
                    void *ctx)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT id, state, disk_need FROM jobs WHERE state IN "
                           "('queued', 'running') AND disk_need > 0", -1, &st, NULL) != SQLITE_OK)
        return TESS_EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = col_text(st, 0), *state = col_text(st, 1);
        if (id && state)
            cb(ctx, id, state, sqlite3_column_double(st, 2));
    }
    sqlite3_finalize(st);
    return 0;
}

static int sq_insert(jobstore *S, const char *id, const char *type, const char *body,
                     double created, double disk_need)
{
    return done_or_eio(sql_run_durable(DB(S),
                       "INSERT INTO jobs (id, seq, type, state, body, created, done, total, "
                       "disk_need) "
                       "VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), ?2, 'queued', "
                       "?3, ?4, 0, 0, ?5)",
                       "tttdd", id, type, body, created, disk_need));
}

static int sq_state(jobstore *S, const char *id, char *state)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT state FROM jobs WHERE id = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        return TESS_EIO;
    int rc = TESS_ENOTFOUND;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(state, 16, "%s", col_text(st, 0) ? col_text(st, 0) : "");
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}

static int sq_end(jobstore *S, const char *id, const char *state, double finished,
                  const char *error_json, int *changed)
{
    int rc = done_or_eio(sql_run_durable(DB(S), "UPDATE jobs SET state = ?2, finished = ?3, "
                                         "error = ?4 WHERE id = ?1 AND state IN ('queued', "
                                         "'running')",
                                         "ttdt", id, state, finished, error_json));
    *changed = rc == 0 && sqlite3_changes(DB(S)) > 0;
    return rc;
}

static int sq_content_type(jobstore *S, const char *id, char *ctype)
{
    ctype[0] = '\0';
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT content_type FROM jobs WHERE id = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return TESS_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW && col_text(st, 0))
        snprintf(ctype, 64, "%s", col_text(st, 0));
    sqlite3_finalize(st);
    return 0;
}

static int sq_type_body(jobstore *S, const char *id, char *type, char **body)
{
    *body = NULL;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT type, body FROM jobs WHERE id = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        return TESS_EIO;
    int rc = TESS_EIO;
    const char *t, *bd;
    if (sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && (t = col_text(st, 0)) && (bd = col_text(st, 1))) {
        snprintf(type, 64, "%s", t);
        *body = strdup(bd);
        rc = *body ? 0 : TESS_ENOMEM;
    }
    sqlite3_finalize(st);
    return rc;
}

static int sq_set_running(jobstore *S, const char *id, double now, long long total,
                          long long done)
{
    return done_or_eio(sql_run(DB(S),
            "UPDATE jobs SET state = 'running', started = COALESCE(started, ?2), total = ?3, "
            "done = ?4, run_done0 = ?4, run_t0 = ?2 WHERE id = ?1 AND state IN ('queued', "
            "'running')",
            "tdii", id, now, total, done));
}

static int sq_set_done(jobstore *S, const char *id, long long done)
{
    return done_or_eio(sql_run(DB(S), "UPDATE jobs SET done = ?2 WHERE id = ?1", "ti", id, done));
}

static int sq_set_result(jobstore *S, const char *id, const char *result_json,
                         const char *dataset, const char *attach_to, const char *content_type)
{
    return done_or_eio(sql_run(DB(S),
            "UPDATE jobs SET result = ?2, product_dataset = ?3, attach_to = ?4, "
            "content_type = ?5 WHERE id = ?1",
            "ttttt", id, result_json, dataset, attach_to, content_type));
}

static int sq_next(jobstore *S, char *id)
{
    id[0] = '\0';
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S),
                           "SELECT id FROM jobs WHERE state IN ('running','queued') "
                           "ORDER BY state = 'running' DESC, seq LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return TESS_EIO;
    const char *t;
    if (sqlite3_step(st) == SQLITE_ROW && (t = col_text(st, 0)))
        snprintf(id, 17, "%s", t);
    sqlite3_finalize(st);
    return 0;
}

static int sq_succeeded(jobstore *S, double since,
                        void (*cb)(void *, const char *, const char *, const char *,
                                   const char *, double),
                        void *ctx)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S),
                           "SELECT id, product_dataset, attach_to, content_type, finished FROM "
                           "jobs WHERE state = 'succeeded' AND COALESCE(finished, 0) > ?1 "
                           "ORDER BY seq",
                           -1, &st, NULL) != SQLITE_OK)
        return TESS_EIO;
    sqlite3_bind_double(st, 1, isnan(since) || since < -1e300 ? -1e300 : since);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = col_text(st, 0);
        if (id)
            cb(ctx, id, col_text(st, 1), col_text(st, 2), col_text(st, 3), col_time(st, 4));
    }
    sqlite3_finalize(st);
    return 0;
}

/* ---- blocks -------------------------------------------------------------------------- */

static int sq_reset_blocks(jobstore *S, const char *id)
{
    return done_or_eio(sql_run(DB(S), "DELETE FROM blocks WHERE job = ?1", "t", id));
}

static int sq_prune_blocks(jobstore *S)
{
    return exec_sql(DB(S),
                    "DELETE FROM blocks WHERE job NOT IN (SELECT id FROM jobs WHERE state = "
                    "'running')",
                    NULL, 0);
}

static int sq_done_blocks(jobstore *S, const char *id, void (*cb)(void *, int, long), void *ctx)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(DB(S), "SELECT stage, block FROM blocks WHERE job = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return TESS_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW)
        cb(ctx, sqlite3_column_int(st, 0), (long)sqlite3_column_int64(st, 1));
    sqlite3_finalize(st);
    return 0;
}

static int sq_record_blocks(jobstore *S, const char *id, int n, const int *stages,
                            const long *blocks)
{
    sqlite3_exec(DB(S), "BEGIN", NULL, NULL, NULL);
    for (int i = 0; i < n; i++)
        sql_run(DB(S), "INSERT OR IGNORE INTO blocks (job, stage, block) VALUES (?1, ?2, ?3)",
                "tii", id, (long long)stages[i], (long long)blocks[i]);
    sqlite3_exec(DB(S), "COMMIT", NULL, NULL, NULL);
    return 0;
}
/* ---- the store: checked before it is used ----------------------------------------- */

/* The schema.  Version 0 is the tables of the first releases, which left user_version at 0
 * and no application_id; version 1 adds jobs.disk_need (the disk an accepted job was
 * estimated to need) and marks the file with STORE_APP_ID. */
#define STORE_VERSION 1
#define STORE_APP_ID 0x54657373   /* "Tess", PRAGMA application_id of a job store */

static const char *const JOBS_COLS_V0[] = {
    "id", "seq", "type", "state", "body", "created", "started", "finished", "done", "total",
    "error", "result", "product_dataset", "attach_to", "content_type", "run_done0", "run_t0",
    NULL};
static const char *const BLOCKS_COLS[] = {"job", "stage", "block", NULL};

static const char STORE_CREATE[] =
    "BEGIN; "
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER, type TEXT NOT NULL, "
    "state TEXT NOT NULL, body TEXT NOT NULL, created REAL, started REAL, finished REAL, "
    "done INTEGER, total INTEGER, error TEXT, result TEXT, product_dataset TEXT, "
    "attach_to TEXT, content_type TEXT, run_done0 INTEGER, run_t0 REAL, disk_need REAL); "
    "CREATE TABLE blocks (job TEXT, stage INTEGER, block INTEGER, "
    "PRIMARY KEY (job, stage, block)) WITHOUT ROWID; "
    "PRAGMA user_version = 1; PRAGMA application_id = 1415934835; "
    "COMMIT;";

/* The single integer a pragma or query returns, or -1 on error. */
static long long query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

/* The first of the NULL-terminated `cols` table `t` lacks (NULL: none); *exists = whether
 * the table is there. */
static const char *missing_column(sqlite3 *db, const char *t, const char *const *cols,
                                  int *exists)
{
    *exists = 0;
    const char *miss = NULL;
    for (int i = 0; cols[i] && !miss; i++) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
                               -1, &st, NULL) != SQLITE_OK)
            return cols[i];
        sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, cols[i], -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 1)
            miss = cols[i];
        sqlite3_finalize(st);
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                           "name = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
        *exists = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
        sqlite3_finalize(st);
    }
    return miss;
}

/* PRAGMA integrity_check over the whole file (0.9 s for a store of 100000 jobs and 10^6
 * block rows, 440 MB; quick_check takes 0.6 s and skips the indexes, which hold the job
 * ids): 0, or TESS_EIO with err saying what is wrong and where. */
static int check_integrity(sqlite3 *db, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(10)", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        int code = sqlite3_errcode(db) & 0xff;
        if (code == SQLITE_NOTADB)
            tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                        "away or set jobs.dir to another directory", path, sqlite3_errmsg(db));
        else if (code == SQLITE_CORRUPT)
            tess_seterr(err, errlen, "jobs database '%s' is damaged (%s); move it away (its "
                        "jobs are lost) or restore a copy", path, sqlite3_errmsg(db));
        else
            tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path,
                        sqlite3_errmsg(db));
        return TESS_EIO;
    }
    char first[300] = "";
    int n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 0);
        if (msg && strcmp(msg, "ok") == 0)
            break;
        /* The first message starts with a line naming the database ("*** in database
         * main ***"): keep what follows it. */
        if (msg && strncmp(msg, "*** ", 4) == 0 && strchr(msg, '\n'))
            msg = strchr(msg, '\n') + 1;
        if (n++ == 0)
            snprintf(first, sizeof first, "%s", msg ? msg : "?");
    }
    int code = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sqlite3_errcode(db) & 0xff;
    if (code && !first[0])
        snprintf(first, sizeof first, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (n == 0 && !code)
        return 0;
    first[strcspn(first, "\n")] = '\0';
    if (code == SQLITE_NOTADB)
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                    "away or set jobs.dir to another directory", path, first);
    else if (n == 0 && code != SQLITE_CORRUPT)
        tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path, first);
    else
        tess_seterr(err, errlen, "jobs database '%s' is damaged: database disk image is "
                    "malformed: %s%s; move it away (its jobs are lost) or restore a copy", path,
                    first, n > 1 ? " (and more)" : "");
    return TESS_EIO;
}

/* Whether the checked file is a job store this version reads: 1 (fresh: no schema at
 * all), 0 (a store), or TESS_EIO with err naming what does not fit.  Reads only. */
static int check_schema(sqlite3 *db, const char *path, long long *version, char *err,
                        size_t errlen)
{
    long long app = query_int(db, "PRAGMA application_id");
    long long ver = query_int(db, "PRAGMA user_version");
    long long objects = query_int(db, "SELECT COUNT(*) FROM sqlite_master");
    *version = ver;
    if (app < 0 || ver < 0 || objects < 0) {
        tess_seterr(err, errlen, "jobs database '%s' cannot be read: %s", path,
                    sqlite3_errmsg(db));
        return TESS_EIO;
    }
    if (app != 0 && app != STORE_APP_ID) {
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (application_id "
                    "0x%08llx); move it away or set jobs.dir to another directory", path,
                    (unsigned long long)app);
        return TESS_EIO;
    }
    if (objects == 0 && ver == 0)
        return 1;
    if (ver > STORE_VERSION) {
        tess_seterr(err, errlen, "jobs database '%s' was made by a newer tesserad (schema "
                    "version %lld; this one reads versions up to %d)", path, ver,
                    STORE_VERSION);
        return TESS_EIO;
    }
    static const struct {
        const char *table;
        const char *const *cols;
    } tables[] = {{"jobs", JOBS_COLS_V0}, {"blocks", BLOCKS_COLS}};
    for (int t = 0; t < 2; t++) {
        int exists;
        const char *miss = missing_column(db, tables[t].table, tables[t].cols, &exists);
        if (!exists || miss) {
            char what[96];
            if (!exists)
                snprintf(what, sizeof what, "table %s missing", tables[t].table);
            else
                snprintf(what, sizeof what, "table %s has no column %s", tables[t].table, miss);
            tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (%s); move it "
                        "away or set jobs.dir to another directory", path, what);
            return TESS_EIO;
        }
    }
    static const char *const v1[] = {"disk_need", NULL};
    int exists;
    if (ver == STORE_VERSION && missing_column(db, "jobs", v1, &exists)) {
        tess_seterr(err, errlen, "jobs database '%s': not a Tessera job store (table jobs has "
                    "no column disk_need)", path);
        return TESS_EIO;
    }
    return 0;
}


static void sq_close(jobstore *S)
{
    sqlite3_close(DB(S));
    jobstore_base_fini(S);
    free(S);
}

static const jobstore_ops sq_ops = {
    sq_close, sq_get, sq_list, sq_counts, sq_active, sq_needs, sq_insert, sq_state, sq_end,
    sq_content_type, sq_type_body, sq_set_running, sq_set_done, sq_set_result, sq_next,
    sq_succeeded, sq_reset_blocks, sq_prune_blocks, sq_done_blocks, sq_record_blocks,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};

int jobstore_open_sqlite(const char *dir, jobstore **out, char *err, size_t errlen)
{
    sq_store *q = calloc(1, sizeof *q);
    if (!q) {
        tess_seterr(err, errlen, "out of memory for the job store");
        return TESS_ENOMEM;
    }
    /* A local file: a call waits for another one (a slow fsync, the busy timeout) up to
     * 30 s rather than answer 503. */
    jobstore_base_init(&q->base, &sq_ops, 0, 30.0);
    char dbp[PATH_MAX + 16];
    snprintf(dbp, sizeof(dbp), "%s/jobs.sqlite", dir);
    if (sqlite3_open_v2(dbp, &q->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                         SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        tess_seterr(err, errlen, "jobs database '%s': %s", dbp,
                    q->db ? sqlite3_errmsg(q->db) : "cannot open");
        sqlite3_close(q->db);
        jobstore_base_fini(&q->base);
        free(q);
        return TESS_EIO;
    }
    sqlite3_busy_timeout(q->db, 5000);
    long long ver = 0;
    int rc = check_integrity(q->db, dbp, err, errlen);
    int fresh = rc ? rc : check_schema(q->db, dbp, &ver, err, errlen);
    rc = fresh < 0 ? fresh : 0;
    if (!rc)
        rc = exec_sql(q->db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;", err,
                      errlen);
    if (!rc && fresh)
        rc = exec_sql(q->db, STORE_CREATE, err, errlen);
    if (!rc && !fresh && ver < STORE_VERSION) {
        rc = exec_sql(q->db, "BEGIN; ALTER TABLE jobs ADD COLUMN disk_need REAL; "
                      "PRAGMA user_version = 1; PRAGMA application_id = 1415934835; COMMIT;",
                      err, errlen);
        if (rc)
            sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
    }
    if (rc) {
        sqlite3_close(q->db);
        jobstore_base_fini(&q->base);
        free(q);
        return rc;
    }
    *out = &q->base;
    return 0;
}
