/* The collection index in SQLite (colindex_impl.h): a file of its own in jobs.dir
 * (collections.sqlite), or in memory without jobs.dir (every start reads the headers). */
#include "daemon/collection/colindex_impl.h"
#include "engine/base/error.h"

#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sq_index {
    sqlite3 *db;
    pthread_mutex_t lock;   /* one statement at a time on the connection */
};

/* Version 1 of the schema.  col_image holds one row per file; col_cell its coverage, so
 * that "which members overlap this tile" is one indexed look-up (colindex_overlap).
 * Version 2 (migrate_v2) adds the background offsets: col_image.bg_offset and the
 * pairwise differences col_bgpair (colbackground.h). */
static const char schema[] =
    "CREATE TABLE IF NOT EXISTS col_meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS col_image("
    " id INTEGER PRIMARY KEY, collection TEXT NOT NULL, relpath TEXT NOT NULL,"
    " dev INTEGER, ino INTEGER, size INTEGER, mtime_ns INTEGER,"
    " nx INTEGER, ny INTEGER, nz INTEGER, bitpix INTEGER, wcs TEXT,"
    " footprint TEXT, ra REAL, dec REAL, radius REAL, pixscale REAL,"
    " filter TEXT, em_min REAL, em_max REAL, t_min REAL, t_max REAL, exptime REAL,"
    " error TEXT, UNIQUE(collection, relpath));"
    "CREATE TABLE IF NOT EXISTS col_cell("
    " collection TEXT NOT NULL, nuniq INTEGER NOT NULL, image INTEGER NOT NULL,"
    " PRIMARY KEY(collection, nuniq, image)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS col_cell_image ON col_cell(image);"
    "INSERT OR IGNORE INTO col_meta VALUES('schema', '1');";

/* Version 1 to 2, once (an index of version 1 keeps its rows; no offset is solved yet). */
static const char migrate_v2[] =
    "BEGIN IMMEDIATE;"
    "ALTER TABLE col_image ADD COLUMN bg_offset REAL;"
    "CREATE TABLE IF NOT EXISTS col_bgpair("
    " collection TEXT NOT NULL, a TEXT NOT NULL, b TEXT NOT NULL, n REAL, diff REAL,"
    " PRIMARY KEY(collection, a, b)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS col_bgpair_b ON col_bgpair(collection, b);"
    "UPDATE col_meta SET value = '2' WHERE key = 'schema';"
    "COMMIT;";

/* The schema version the index holds (0 when unreadable). */
static int schema_version(sqlite3 *db)
{
    sqlite3_stmt *st;
    int v = 0;
    if (sqlite3_prepare_v2(db, "SELECT value FROM col_meta WHERE key = 'schema'", -1, &st,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

int sq_open(const char *path, sq_index **out, char *err, size_t errlen)
{
    sq_index *x = calloc(1, sizeof(*x));
    if (!x)
        return TESS_ENOMEM;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path ? path : ":memory:", &x->db, flags, NULL) != SQLITE_OK) {
        tess_seterr(err, errlen, "collection index %s: %s", path ? path : "(memory)",
                    x->db ? sqlite3_errmsg(x->db) : "cannot open");
        sqlite3_close(x->db);
        free(x);
        return TESS_EIO;
    }
    sqlite3_busy_timeout(x->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(x->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_exec(x->db, schema, NULL, NULL, &msg) != SQLITE_OK ||
        (schema_version(x->db) == 1 &&
         sqlite3_exec(x->db, migrate_v2, NULL, NULL, &msg) != SQLITE_OK)) {
        sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
        tess_seterr(err, errlen, "collection index %s: %s", path ? path : "(memory)",
                    msg ? msg : sqlite3_errmsg(x->db));
        sqlite3_free(msg);
        sqlite3_close(x->db);
        free(x);
        return TESS_EIO;
    }
    pthread_mutex_init(&x->lock, NULL);
    *out = x;
    return 0;
}

void sq_close(sq_index *x)
{
    if (!x)
        return;
    sqlite3_close(x->db);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static double col_double(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

int sq_load(sq_index *x, const char *collection, col_member **out, int *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    pthread_mutex_lock(&x->lock);
    if (sqlite3_prepare_v2(x->db,
            "SELECT " COL_MEMBER_COLUMNS " FROM col_image WHERE collection = ?"
            " ORDER BY relpath", -1, &st, NULL) != SQLITE_OK) {
        pthread_mutex_unlock(&x->lock);
        return TESS_EIO;
    }
    sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
    col_member *v = NULL;
    int cnt = 0, cap = 0, rc = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (cnt == cap) {
            int nc = cap ? cap * 2 : 64;
            col_member *nv = realloc(v, (size_t)nc * sizeof(*nv));
            if (!nv) {
                rc = TESS_ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        col_member *m = &v[cnt];
        memset(m, 0, sizeof(*m));
        m->relpath = col_text(st, 0);
        if (!m->relpath) {
            rc = TESS_ENOMEM;
            break;
        }
        cnt++;
        m->dev = sqlite3_column_int64(st, 1);
        m->ino = sqlite3_column_int64(st, 2);
        m->size = sqlite3_column_int64(st, 3);
        m->mtime_ns = sqlite3_column_int64(st, 4);
        m->nx = (long)sqlite3_column_int64(st, 5);
        m->ny = (long)sqlite3_column_int64(st, 6);
        m->nz = (long)sqlite3_column_int64(st, 7);
        m->bitpix = sqlite3_column_int(st, 8);
        const char *fp = (const char *)sqlite3_column_text(st, 9);
        for (int k = 0; k < 8; k++)
            m->poly[k] = NAN;
        if (fp)
            sscanf(fp, "%lf %lf %lf %lf %lf %lf %lf %lf", &m->poly[0], &m->poly[1], &m->poly[2],
                   &m->poly[3], &m->poly[4], &m->poly[5], &m->poly[6], &m->poly[7]);
        for (size_t k = 0; k < sizeof col_member_reals / sizeof col_member_reals[0]; k++)
            *(double *)((char *)m + col_member_reals[k].offset) =
                col_double(st, col_member_reals[k].column);
        const unsigned char *f = sqlite3_column_text(st, 14);
        snprintf(m->filter, sizeof(m->filter), "%s", f ? (const char *)f : "");
        if (sqlite3_column_type(st, 20) != SQLITE_NULL && !(m->error = col_text(st, 20))) {
            rc = TESS_ENOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&x->lock);
    if (rc) {
        col_members_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int exec_locked(sq_index *x, const char *sql)
{
    pthread_mutex_lock(&x->lock);
    int rc = sqlite3_exec(x->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : TESS_EIO;
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int sq_begin(sq_index *x)
{
    return exec_locked(x, "BEGIN IMMEDIATE");
}

int sq_commit(sq_index *x)
{
    return exec_locked(x, "COMMIT");
}

/* Binds v[0..n-1] to the parameters first..first+n-1 (1-based), a value that is not
 * finite as NULL. */
static void bind_reals(sqlite3_stmt *st, int first, const double *v, int n)
{
    for (int i = 0; i < n; i++) {
        if (isfinite(v[i]))
            sqlite3_bind_double(st, first + i, v[i]);
        else
            sqlite3_bind_null(st, first + i);
    }
}

/* Binds v[0..n-1] to the parameters first..first+n-1 (1-based). */
static void bind_ints(sqlite3_stmt *st, int first, const sqlite3_int64 *v, int n)
{
    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, first + i, v[i]);
}

int sq_put(sq_index *x, const char *collection, const col_member *m, const char *wcs,
                 const int64_t *nuniq, size_t ncells)
{
    if (sq_remove(x, collection, m->relpath))
        return TESS_EIO;
    char fp[8 * 26 + 8] = "";
    if (!m->error)
        snprintf(fp, sizeof(fp), "%.12g %.12g %.12g %.12g %.12g %.12g %.12g %.12g", m->poly[0],
                 m->poly[1], m->poly[2], m->poly[3], m->poly[4], m->poly[5], m->poly[6],
                 m->poly[7]);
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int rc = TESS_EIO;
    if (sqlite3_prepare_v2(x->db,
            "INSERT INTO col_image(collection, relpath, dev, ino, size, mtime_ns, nx, ny, nz,"
            " bitpix, wcs, footprint, ra, dec, radius, pixscale, filter, em_min, em_max, t_min,"
            " t_max, exptime, error) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, m->relpath, -1, SQLITE_STATIC);
    bind_ints(st, 3, (const sqlite3_int64[]){m->dev, m->ino, m->size, m->mtime_ns, m->nx, m->ny,
                                             m->nz, m->bitpix}, 8);
    if (wcs)
        sqlite3_bind_text(st, 11, wcs, -1, SQLITE_STATIC);
    if (fp[0])
        sqlite3_bind_text(st, 12, fp, -1, SQLITE_STATIC);
    bind_reals(st, 13, (const double[]){m->ra, m->dec, m->radius, m->pixscale}, 4);
    if (m->filter[0])
        sqlite3_bind_text(st, 17, m->filter, -1, SQLITE_STATIC);
    bind_reals(st, 18, (const double[]){m->em_min, m->em_max, m->t_min, m->t_max, m->exptime},
               5);
    if (m->error)
        sqlite3_bind_text(st, 23, m->error, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    if (step != SQLITE_DONE)
        goto out;
    sqlite3_int64 id = sqlite3_last_insert_rowid(x->db);
    if (ncells) {
        if (sqlite3_prepare_v2(x->db, "INSERT OR IGNORE INTO col_cell VALUES(?,?,?)", -1, &st,
                               NULL) != SQLITE_OK)
            goto out;
        for (size_t i = 0; i < ncells; i++) {
            sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, nuniq[i]);
            sqlite3_bind_int64(st, 3, id);
            if (sqlite3_step(st) != SQLITE_DONE) {
                sqlite3_finalize(st);
                goto out;
            }
            sqlite3_reset(st);
        }
        sqlite3_finalize(st);
    }
    rc = 0;
out:
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int sq_remove(sq_index *x, const char *collection, const char *relpath)
{
    pthread_mutex_lock(&x->lock);
    int rc = TESS_EIO;
    sqlite3_stmt *st;
    static const char *const sql[3] = {
        "DELETE FROM col_cell WHERE image IN (SELECT id FROM col_image WHERE collection = ?1"
        " AND relpath = ?2)",
        "DELETE FROM col_image WHERE collection = ?1 AND relpath = ?2",
        "DELETE FROM col_bgpair WHERE collection = ?1 AND (a = ?2 OR b = ?2)"};
    for (int k = 0; k < 3; k++) {
        if (sqlite3_prepare_v2(x->db, sql[k], -1, &st, NULL) != SQLITE_OK)
            goto out;
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, relpath, -1, SQLITE_STATIC);
        int step = sqlite3_step(st);
        sqlite3_finalize(st);
        if (step != SQLITE_DONE)
            goto out;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int sq_overlap(sq_index *x, const char *collection, int order, int64_t npix,
                     void (*fn)(void *cls, const char *relpath), void *cls)
{
    int64_t anc[COL_MOC_ORDER + 1], lo, hi;
    int na;
    if (colindex_tile_cells(order, npix, anc, &na, &lo, &hi))
        return TESS_EINVAL;
    char sql[512];
    /* Two range scans of the (collection, nuniq) key, no OR: SQLite plans each one on
     * the primary key. */
    int len = snprintf(sql, sizeof(sql),
                       "SELECT relpath FROM col_image WHERE id IN (SELECT image FROM col_cell"
                       " WHERE collection = ?1 AND nuniq BETWEEN ?2 AND ?3 UNION SELECT image"
                       " FROM col_cell WHERE collection = ?1 AND nuniq IN (");
    for (int i = 0; i < na; i++)
        len += snprintf(sql + len, sizeof(sql) - (size_t)len, "%s?%d", i ? "," : "", i + 4);
    snprintf(sql + len, sizeof(sql) - (size_t)len, ")) ORDER BY relpath");
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int count = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, lo);
        sqlite3_bind_int64(st, 3, hi);
        for (int i = 0; i < na; i++)
            sqlite3_bind_int64(st, i + 4, anc[i]);
        count = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (fn)
                fn(cls, (const char *)sqlite3_column_text(st, 0));
            count++;
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    return count;
}

int sq_wcs(sq_index *x, const char *collection, const char *relpath, char **out)
{
    *out = NULL;
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int rc = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, "SELECT wcs FROM col_image WHERE collection = ? AND relpath = ?",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, relpath, -1, SQLITE_STATIC);
        rc = 0;
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
            !(*out = col_text(st, 0)))
            rc = TESS_ENOMEM;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int sq_cells(sq_index *x, const char *collection, int64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int rc = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, "SELECT DISTINCT nuniq FROM col_cell WHERE collection = ?"
                           " ORDER BY nuniq", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        rc = 0;
        while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
            if (*n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                int64_t *g = realloc(*out, nc * sizeof(int64_t));
                if (!g) {
                    rc = TESS_ENOMEM;
                    break;
                }
                *out = g;
                cap = nc;
            }
            (*out)[(*n)++] = (int64_t)sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int sq_bg_pairs(sq_index *x, const char *collection,
                void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                void *cls)
{
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int count = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, "SELECT a, b, n, diff FROM col_bgpair WHERE collection = ?",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        count = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            fn(cls, (const char *)sqlite3_column_text(st, 0),
               (const char *)sqlite3_column_text(st, 1), col_double(st, 2), col_double(st, 3));
            count++;
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    return count;
}

int sq_bg_put_pair(sq_index *x, const char *collection, const char *a, const char *b,
                   double n, double diff)
{
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int rc = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, "INSERT OR REPLACE INTO col_bgpair VALUES(?,?,?,?,?)", -1,
                           &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, collection, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, a, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, b, -1, SQLITE_STATIC);
        bind_reals(st, 4, (const double[]){ n, diff }, 2);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : TESS_EIO;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

int sq_bg_set(sq_index *x, const char *collection, const char *relpath, double offset)
{
    pthread_mutex_lock(&x->lock);
    sqlite3_stmt *st;
    int rc = TESS_EIO;
    if (sqlite3_prepare_v2(x->db, "UPDATE col_image SET bg_offset = ? WHERE collection = ?"
                           " AND relpath = ?", -1, &st, NULL) == SQLITE_OK) {
        bind_reals(st, 1, &offset, 1);
        sqlite3_bind_text(st, 2, collection, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, relpath, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : TESS_EIO;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}
