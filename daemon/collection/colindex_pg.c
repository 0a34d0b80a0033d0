/* The collection index in PostgreSQL (colindex_impl.h): the database of jobs.database,
 * tables of the same schema as SQLite's, shared by the servers that name it.  Blocking
 * calls on one connection, each statement bounded by statement_timeout; a broken
 * connection is reset once before a call fails. */
#include "daemon/collection/colindex_impl.h"
#include "engine/base/error.h"

#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pg_index {
    PGconn *conn;
    pthread_mutex_t lock;
};

static const char pg_schema[] =
    "CREATE TABLE IF NOT EXISTS col_meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS col_image("
    " id BIGSERIAL PRIMARY KEY, collection TEXT NOT NULL, relpath TEXT NOT NULL,"
    " dev BIGINT, ino BIGINT, size BIGINT, mtime_ns BIGINT,"
    " nx BIGINT, ny BIGINT, nz BIGINT, bitpix INTEGER, wcs TEXT,"
    " footprint TEXT, ra DOUBLE PRECISION, dec DOUBLE PRECISION, radius DOUBLE PRECISION,"
    " pixscale DOUBLE PRECISION, filter TEXT, em_min DOUBLE PRECISION,"
    " em_max DOUBLE PRECISION, t_min DOUBLE PRECISION, t_max DOUBLE PRECISION,"
    " exptime DOUBLE PRECISION, error TEXT, UNIQUE(collection, relpath));"
    "CREATE TABLE IF NOT EXISTS col_cell("
    " collection TEXT NOT NULL, nuniq BIGINT NOT NULL, image BIGINT NOT NULL,"
    " PRIMARY KEY(collection, nuniq, image));"
    "CREATE INDEX IF NOT EXISTS col_cell_image ON col_cell(image);"
    "INSERT INTO col_meta VALUES('schema', '1') ON CONFLICT DO NOTHING;"
    /* version 2: the background offsets (colbackground.h), added to a version 1 index */
    "ALTER TABLE col_image ADD COLUMN IF NOT EXISTS bg_offset DOUBLE PRECISION;"
    "CREATE TABLE IF NOT EXISTS col_bgpair("
    " collection TEXT NOT NULL, a TEXT NOT NULL, b TEXT NOT NULL, n DOUBLE PRECISION,"
    " diff DOUBLE PRECISION, PRIMARY KEY(collection, a, b));"
    "CREATE INDEX IF NOT EXISTS col_bgpair_b ON col_bgpair(collection, b);"
    "UPDATE col_meta SET value = '2' WHERE key = 'schema' AND value = '1';";

/* Runs sql with text parameters; the result (the caller clears it) when its status is
 * `want`, else NULL (cleared).  A broken connection is reset once and the call retried. */
static PGresult *run(pg_index *x, ExecStatusType want, const char *sql, int n,
                     const char *const *params)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        PGresult *r = PQexecParams(x->conn, sql, n, NULL, params, NULL, NULL, 0);
        if (r && PQresultStatus(r) == want)
            return r;
        if (r && attempt == 0 && PQstatus(x->conn) != CONNECTION_OK) {
            PQclear(r);
            PQreset(x->conn);
            continue;
        }
        if (r)
            fprintf(stderr, "tesserad: collection index (PostgreSQL): %s",
                    PQresultErrorMessage(r));
        PQclear(r);
        return NULL;
    }
    return NULL;
}

/* run under the connection's lock. */
static PGresult *run_locked(pg_index *x, ExecStatusType want, const char *sql, int n,
                            const char *const *params)
{
    pthread_mutex_lock(&x->lock);
    PGresult *r = run(x, want, sql, n, params);
    pthread_mutex_unlock(&x->lock);
    return r;
}

int pgx_open(const char *uri, double timeout_s, pg_index **out, char *err, size_t errlen)
{
    pg_index *x = calloc(1, sizeof(*x));
    if (!x)
        return TESS_ENOMEM;
    char ct[16];
    snprintf(ct, sizeof(ct), "%d", timeout_s < 2 ? 2 : (int)ceil(timeout_s));
    const char *const keys[] = {"dbname", "connect_timeout", NULL};
    const char *const vals[] = {uri, ct, NULL};
    x->conn = PQconnectdbParams(keys, vals, 1);
    if (!x->conn || PQstatus(x->conn) != CONNECTION_OK) {
        tess_seterr(err, errlen, "collection index: cannot connect to jobs.database: %s",
                    x->conn ? PQerrorMessage(x->conn) : "out of memory");
        PQfinish(x->conn);
        free(x);
        return TESS_EIO;
    }
    int said = 0;
    char set[128];
    snprintf(set, sizeof(set), "SET client_min_messages = warning; SET statement_timeout = %ld",
             (long)ceil(timeout_s * 1000.0));
    PGresult *r = PQexec(x->conn, set);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    /* One server at a time creates the tables (the others wait on the lock). */
    if (ok) {
        r = PQexec(x->conn, "BEGIN; SELECT pg_advisory_xact_lock(7341733);");
        ok = r && PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
    }
    if (ok) {
        r = PQexec(x->conn, pg_schema);
        ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok) {
            tess_seterr(err, errlen, "collection index: cannot create its tables: %s",
                        PQerrorMessage(x->conn));
            said = 1;
        }
        PQclear(r);
    }
    r = PQexec(x->conn, ok ? "COMMIT" : "ROLLBACK");
    PQclear(r);
    if (!ok) {
        if (!said)
            tess_seterr(err, errlen, "collection index: %s", PQerrorMessage(x->conn));
        PQfinish(x->conn);
        free(x);
        return TESS_EIO;
    }
    pthread_mutex_init(&x->lock, NULL);
    *out = x;
    return 0;
}

void pgx_close(pg_index *x)
{
    if (!x)
        return;
    PQfinish(x->conn);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static double num(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NAN : strtod(PQgetvalue(r, row, col), NULL);
}

int pgx_load(pg_index *x, const char *collection, col_member **out, int *n)
{
    *out = NULL;
    *n = 0;
    const char *p[1] = {collection};
    PGresult *r = run_locked(x, PGRES_TUPLES_OK,
        "SELECT " COL_MEMBER_COLUMNS " FROM col_image WHERE collection = $1"
        " ORDER BY relpath COLLATE \"C\"", 1, p);
    if (!r)
        return TESS_EIO;
    int rows = PQntuples(r);
    col_member *v = calloc((size_t)rows + 1, sizeof(*v));
    int rc = v ? 0 : TESS_ENOMEM;
    for (int i = 0; i < rows && !rc; i++) {
        col_member *m = &v[i];
        m->relpath = strdup(PQgetvalue(r, i, 0));
        m->dev = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        m->ino = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        m->size = strtoll(PQgetvalue(r, i, 3), NULL, 10);
        m->mtime_ns = strtoll(PQgetvalue(r, i, 4), NULL, 10);
        m->nx = strtol(PQgetvalue(r, i, 5), NULL, 10);
        m->ny = strtol(PQgetvalue(r, i, 6), NULL, 10);
        m->nz = strtol(PQgetvalue(r, i, 7), NULL, 10);
        m->bitpix = atoi(PQgetvalue(r, i, 8));
        for (int k = 0; k < 8; k++)
            m->poly[k] = NAN;
        if (!PQgetisnull(r, i, 9))
            sscanf(PQgetvalue(r, i, 9), "%lf %lf %lf %lf %lf %lf %lf %lf", &m->poly[0],
                   &m->poly[1], &m->poly[2], &m->poly[3], &m->poly[4], &m->poly[5],
                   &m->poly[6], &m->poly[7]);
        for (size_t k = 0; k < sizeof col_member_reals / sizeof col_member_reals[0]; k++)
            *(double *)((char *)m + col_member_reals[k].offset) =
                num(r, i, col_member_reals[k].column);
        snprintf(m->filter, sizeof(m->filter), "%s", PQgetvalue(r, i, 14));
        if (!PQgetisnull(r, i, 20))
            m->error = strdup(PQgetvalue(r, i, 20));
        if (!m->relpath || (!PQgetisnull(r, i, 20) && !m->error))
            rc = TESS_ENOMEM;
    }
    PQclear(r);
    if (rc) {
        col_members_free(v, rows);
        return rc;
    }
    *out = v;
    *n = rows;
    return 0;
}

static int simple(pg_index *x, const char *sql)
{
    PGresult *r = run_locked(x, PGRES_COMMAND_OK, sql, 0, NULL);
    PQclear(r);
    return r ? 0 : TESS_EIO;
}

int pgx_begin(pg_index *x)
{
    return simple(x, "BEGIN");
}

int pgx_commit(pg_index *x)
{
    return simple(x, "COMMIT");
}

/* A double as text, NULL (SQL NULL) when not finite. */
static const char *real_text(char *buf, size_t len, double v)
{
    if (!isfinite(v))
        return NULL;
    snprintf(buf, len, "%.17g", v);
    return buf;
}

int pgx_put(pg_index *x, const char *collection, const col_member *m, const char *wcs,
            const int64_t *nuniq, size_t ncells)
{
    char ints[8][24], reals[10][32], fp[8 * 26 + 8] = "";
    long long iv[8] = {m->dev, m->ino, m->size, m->mtime_ns, m->nx, m->ny, m->nz, m->bitpix};
    for (int i = 0; i < 8; i++)
        snprintf(ints[i], sizeof(ints[i]), "%lld", iv[i]);
    if (!m->error)
        snprintf(fp, sizeof(fp), "%.12g %.12g %.12g %.12g %.12g %.12g %.12g %.12g", m->poly[0],
                 m->poly[1], m->poly[2], m->poly[3], m->poly[4], m->poly[5], m->poly[6],
                 m->poly[7]);
    double rv[9] = {m->ra, m->dec, m->radius, m->pixscale, m->em_min, m->em_max, m->t_min,
                    m->t_max, m->exptime};
    const char *p[23] = {collection, m->relpath, ints[0], ints[1], ints[2], ints[3], ints[4],
                         ints[5], ints[6], ints[7], wcs, fp[0] ? fp : NULL};
    for (int i = 0; i < 4; i++)
        p[12 + i] = real_text(reals[i], sizeof(reals[i]), rv[i]);
    p[16] = m->filter[0] ? m->filter : NULL;
    for (int i = 4; i < 9; i++)
        p[13 + i] = real_text(reals[i], sizeof(reals[i]), rv[i]);
    p[22] = m->error;
    pthread_mutex_lock(&x->lock);
    /* An upsert: two servers indexing the same file never collide on the key. */
    PGresult *r = run(x, PGRES_TUPLES_OK,
        "INSERT INTO col_image(collection, relpath, dev, ino, size, mtime_ns, nx, ny, nz,"
        " bitpix, wcs, footprint, ra, dec, radius, pixscale, filter, em_min, em_max, t_min,"
        " t_max, exptime, error) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,"
        "$16,$17,$18,$19,$20,$21,$22,$23) ON CONFLICT (collection, relpath) DO UPDATE SET"
        " dev = EXCLUDED.dev, ino = EXCLUDED.ino, size = EXCLUDED.size,"
        " mtime_ns = EXCLUDED.mtime_ns, nx = EXCLUDED.nx, ny = EXCLUDED.ny, nz = EXCLUDED.nz,"
        " bitpix = EXCLUDED.bitpix, wcs = EXCLUDED.wcs, footprint = EXCLUDED.footprint,"
        " ra = EXCLUDED.ra, dec = EXCLUDED.dec, radius = EXCLUDED.radius,"
        " pixscale = EXCLUDED.pixscale, filter = EXCLUDED.filter, em_min = EXCLUDED.em_min,"
        " em_max = EXCLUDED.em_max, t_min = EXCLUDED.t_min, t_max = EXCLUDED.t_max,"
        " exptime = EXCLUDED.exptime, error = EXCLUDED.error, bg_offset = NULL RETURNING id",
        23, p);
    int rc = TESS_EIO;
    if (r && PQntuples(r) == 1) {
        char id[24];
        snprintf(id, sizeof(id), "%s", PQgetvalue(r, 0, 0));
        const char *pd[1] = {id};
        PGresult *d = run(x, PGRES_COMMAND_OK, "DELETE FROM col_cell WHERE image = $1", 1, pd);
        rc = d ? 0 : TESS_EIO;
        PQclear(d);
        const char *pp[2] = {collection, m->relpath};
        PGresult *e = rc ? NULL : run(x, PGRES_COMMAND_OK, "DELETE FROM col_bgpair WHERE"
                                      " collection = $1 AND (a = $2 OR b = $2)", 2, pp);
        rc = rc || !e ? TESS_EIO : 0;
        PQclear(e);
        for (size_t i = 0; i < ncells && !rc; i++) {
            char cell[24];
            snprintf(cell, sizeof(cell), "%lld", (long long)nuniq[i]);
            const char *pc[3] = {collection, cell, id};
            PGresult *c = run(x, PGRES_COMMAND_OK, "INSERT INTO col_cell VALUES($1, $2, $3)"
                              " ON CONFLICT DO NOTHING", 3, pc);
            rc = c ? 0 : TESS_EIO;
            PQclear(c);
        }
    }
    PQclear(r);
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int pgx_remove(pg_index *x, const char *collection, const char *relpath)
{
    const char *p[2] = {collection, relpath};
    pthread_mutex_lock(&x->lock);
    PGresult *a = run(x, PGRES_COMMAND_OK,
                      "DELETE FROM col_cell WHERE image IN (SELECT id FROM col_image WHERE"
                      " collection = $1 AND relpath = $2)", 2, p);
    PGresult *b = a ? run(x, PGRES_COMMAND_OK, "DELETE FROM col_image WHERE collection = $1"
                          " AND relpath = $2", 2, p) : NULL;
    PGresult *c = b ? run(x, PGRES_COMMAND_OK, "DELETE FROM col_bgpair WHERE collection = $1"
                          " AND (a = $2 OR b = $2)", 2, p) : NULL;
    pthread_mutex_unlock(&x->lock);
    int rc = a && b && c ? 0 : TESS_EIO;
    PQclear(a);
    PQclear(b);
    PQclear(c);
    return rc;
}

int pgx_overlap(pg_index *x, const char *collection, int order, int64_t npix,
                void (*fn)(void *cls, const char *relpath), void *cls)
{
    int64_t anc[COL_MOC_ORDER + 1], lo, hi;
    int na;
    if (colindex_tile_cells(order, npix, anc, &na, &lo, &hi))
        return TESS_EINVAL;
    char arr[(COL_MOC_ORDER + 1) * 24 + 4], los[24], his[24];
    int len = snprintf(arr, sizeof(arr), "{");
    for (int i = 0; i < na; i++)
        len += snprintf(arr + len, sizeof(arr) - (size_t)len, "%s%lld", i ? "," : "",
                        (long long)anc[i]);
    snprintf(arr + len, sizeof(arr) - (size_t)len, "}");
    snprintf(los, sizeof(los), "%lld", (long long)lo);
    snprintf(his, sizeof(his), "%lld", (long long)hi);
    const char *p[4] = {collection, los, his, arr};
    PGresult *r = run_locked(x, PGRES_TUPLES_OK,
        "SELECT relpath FROM col_image WHERE id IN (SELECT image FROM col_cell"
        " WHERE collection = $1 AND nuniq BETWEEN $2 AND $3 UNION SELECT image"
        " FROM col_cell WHERE collection = $1 AND nuniq = ANY($4::bigint[]))"
        " ORDER BY relpath COLLATE \"C\"", 4, p);
    if (!r)
        return TESS_EIO;
    int n = PQntuples(r);
    for (int i = 0; fn && i < n; i++)
        fn(cls, PQgetvalue(r, i, 0));
    PQclear(r);
    return n;
}

int pgx_wcs(pg_index *x, const char *collection, const char *relpath, char **out)
{
    *out = NULL;
    const char *p[2] = {collection, relpath};
    PGresult *r = run_locked(x, PGRES_TUPLES_OK,
        "SELECT wcs FROM col_image WHERE collection = $1 AND relpath = $2", 2, p);
    if (!r)
        return TESS_EIO;
    int rc = 0;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) && !(*out = strdup(PQgetvalue(r, 0, 0))))
        rc = TESS_ENOMEM;
    PQclear(r);
    return rc;
}

int pgx_cells(pg_index *x, const char *collection, int64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    const char *p[1] = {collection};
    PGresult *r = run_locked(x, PGRES_TUPLES_OK,
        "SELECT DISTINCT nuniq FROM col_cell WHERE collection = $1 ORDER BY nuniq", 1, p);
    if (!r)
        return TESS_EIO;
    int rc = 0, rows = PQntuples(r);
    if (rows > 0 && !(*out = malloc(sizeof(int64_t) * (size_t)rows)))
        rc = TESS_ENOMEM;
    for (int i = 0; rc == 0 && i < rows; i++)
        (*out)[i] = (int64_t)strtoll(PQgetvalue(r, i, 0), NULL, 10);
    if (rc == 0)
        *n = (size_t)(rows > 0 ? rows : 0);
    PQclear(r);
    return rc;
}

int pgx_bg_pairs(pg_index *x, const char *collection,
                 void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                 void *cls)
{
    const char *p[1] = {collection};
    PGresult *r = run_locked(x, PGRES_TUPLES_OK, "SELECT a, b, n, diff FROM col_bgpair WHERE"
                             " collection = $1", 1, p);
    if (!r)
        return TESS_EIO;
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++)
        fn(cls, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), num(r, i, 2), num(r, i, 3));
    PQclear(r);
    return rows;
}

int pgx_bg_put_pair(pg_index *x, const char *collection, const char *a, const char *b,
                    double n, double diff)
{
    char ns[32], ds[32];
    const char *p[5] = {collection, a, b, real_text(ns, sizeof(ns), n),
                        real_text(ds, sizeof(ds), diff)};
    PGresult *r = run_locked(x, PGRES_COMMAND_OK, "INSERT INTO col_bgpair VALUES($1,$2,$3,$4,"
                             "$5) ON CONFLICT (collection, a, b) DO UPDATE SET n = EXCLUDED.n,"
                             " diff = EXCLUDED.diff", 5, p);
    PQclear(r);
    return r ? 0 : TESS_EIO;
}

int pgx_bg_set(pg_index *x, const char *collection, const char *relpath, double offset)
{
    char os[32];
    const char *p[3] = {real_text(os, sizeof(os), offset), collection, relpath};
    PGresult *r = run_locked(x, PGRES_COMMAND_OK, "UPDATE col_image SET bg_offset = $1 WHERE"
                             " collection = $2 AND relpath = $3", 3, p);
    PQclear(r);
    return r ? 0 : TESS_EIO;
}
