/* The collection index: the backend the configuration names (PostgreSQL with
 * jobs.database, else SQLite), one schema. */
#include "daemon/collection/colindex_impl.h"
#include "engine/base/error.h"

#include <stdlib.h>

struct colindex {
    sq_index *sq;
    pg_index *pg;
};

int colindex_open(const char *path, const char *pg_uri, double timeout_s, colindex **out,
                  char *err, size_t errlen)
{
    colindex *x = calloc(1, sizeof(*x));
    if (!x)
        return TESS_ENOMEM;
    int rc = pg_uri ? pgx_open(pg_uri, timeout_s, &x->pg, err, errlen)
                    : sq_open(path, &x->sq, err, errlen);
    if (rc) {
        free(x);
        return rc;
    }
    *out = x;
    return 0;
}

void colindex_close(colindex *x)
{
    if (!x)
        return;
    if (x->pg)
        pgx_close(x->pg);
    else
        sq_close(x->sq);
    free(x);
}

int colindex_load(colindex *x, const char *collection, col_member **out, int *n)
{
    return x->pg ? pgx_load(x->pg, collection, out, n) : sq_load(x->sq, collection, out, n);
}

int colindex_begin(colindex *x)
{
    return x->pg ? pgx_begin(x->pg) : sq_begin(x->sq);
}

int colindex_commit(colindex *x)
{
    return x->pg ? pgx_commit(x->pg) : sq_commit(x->sq);
}

int colindex_put(colindex *x, const char *collection, const col_member *m, const char *wcs,
                 const int64_t *nuniq, size_t ncells)
{
    return x->pg ? pgx_put(x->pg, collection, m, wcs, nuniq, ncells)
                 : sq_put(x->sq, collection, m, wcs, nuniq, ncells);
}

int colindex_remove(colindex *x, const char *collection, const char *relpath)
{
    return x->pg ? pgx_remove(x->pg, collection, relpath)
                 : sq_remove(x->sq, collection, relpath);
}

int colindex_overlap(colindex *x, const char *collection, int order, int64_t npix,
                     void (*fn)(void *cls, const char *relpath), void *cls)
{
    return x->pg ? pgx_overlap(x->pg, collection, order, npix, fn, cls)
                 : sq_overlap(x->sq, collection, order, npix, fn, cls);
}

int colindex_wcs(colindex *x, const char *collection, const char *relpath, char **out)
{
    return x->pg ? pgx_wcs(x->pg, collection, relpath, out)
                 : sq_wcs(x->sq, collection, relpath, out);
}

int colindex_is_pg(const colindex *x)
{
    return x->pg != NULL;
}

int colindex_tile_cells(int order, int64_t npix, int64_t *anc, int *na, int64_t *lo,
                        int64_t *hi)
{
    if (order < 0 || order > 29 || npix < 0 || npix >= 12LL << (2 * order))
        return TESS_EINVAL;
    *na = 0;
    for (int k = order < COL_MOC_ORDER ? order : COL_MOC_ORDER; k >= 0; k--)
        anc[(*na)++] = (4LL << (2 * k)) + (npix >> (2 * (order - k)));
    *lo = 0;
    *hi = -1;
    if (order < COL_MOC_ORDER) {
        int s = 2 * (COL_MOC_ORDER - order);
        *lo = (4LL << (2 * COL_MOC_ORDER)) + (npix << s);
        *hi = (4LL << (2 * COL_MOC_ORDER)) + ((npix + 1) << s) - 1;
    }
    return 0;
}

void col_member_release(col_member *m)
{
    free(m->relpath);
    free(m->error);
    m->relpath = m->error = NULL;
}

void col_members_free(col_member *m, int n)
{
    for (int i = 0; i < n; i++)
        col_member_release(&m[i]);
    free(m);
}

int colindex_cells(colindex *x, const char *collection, int64_t **out, size_t *n)
{
    return x->pg ? pgx_cells(x->pg, collection, out, n) : sq_cells(x->sq, collection, out, n);
}

int colindex_bg_pairs(colindex *x, const char *collection,
                      void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                      void *cls)
{
    return x->pg ? pgx_bg_pairs(x->pg, collection, fn, cls)
                 : sq_bg_pairs(x->sq, collection, fn, cls);
}

int colindex_bg_put_pair(colindex *x, const char *collection, const char *a, const char *b,
                         double n, double diff)
{
    return x->pg ? pgx_bg_put_pair(x->pg, collection, a, b, n, diff)
                 : sq_bg_put_pair(x->sq, collection, a, b, n, diff);
}

int colindex_bg_set(colindex *x, const char *collection, const char *relpath, double offset)
{
    return x->pg ? pgx_bg_set(x->pg, collection, relpath, offset)
                 : sq_bg_set(x->sq, collection, relpath, offset);
}
