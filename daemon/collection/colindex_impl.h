/* The backends of the collection index (colindex.h): SQLite (colindex_sqlite.c) and
 * PostgreSQL (colindex_pg.c), one schema; colindex.c picks one and forwards each call. */
#ifndef TESSERA_DAEMON_COLLECTION_COLINDEX_IMPL_H
#define TESSERA_DAEMON_COLLECTION_COLINDEX_IMPL_H

#include "daemon/collection/colindex.h"

#include <stddef.h>

/* The columns of col_image a member is loaded from, in the order both back ends decode a
 * row (0 relpath ... 20 error, 21 bg_offset; sq_load, pgx_load). */
#define COL_MEMBER_COLUMNS                                                                  \
    "relpath, dev, ino, size, mtime_ns, nx, ny, nz, bitpix, footprint, ra, dec, radius,"    \
    " pixscale, filter, em_min, em_max, t_min, t_max, exptime, error, bg_offset"

/* The real-valued members of col_member and their column in COL_MEMBER_COLUMNS, decoded
 * alike by both back ends (NULL -> NaN). */
#define COL_MEMBER_REALS                                                                    \
    { offsetof(col_member, ra), 10 }, { offsetof(col_member, dec), 11 },                   \
    { offsetof(col_member, radius), 12 }, { offsetof(col_member, pixscale), 13 },          \
    { offsetof(col_member, em_min), 15 }, { offsetof(col_member, em_max), 16 },            \
    { offsetof(col_member, t_min), 17 }, { offsetof(col_member, t_max), 18 },              \
    { offsetof(col_member, exptime), 19 }, { offsetof(col_member, bg_offset), 21 }

typedef struct col_real_column {
    size_t offset;   /* of a double in col_member */
    int column;      /* 0-based, in COL_MEMBER_COLUMNS */
} col_real_column;

static const col_real_column col_member_reals[] = { COL_MEMBER_REALS };

/* The cells whose presence means a member may overlap tile (order, npix): its ancestors
 * (itself included) down to order 0 as NUNIQ (anc, *na, at most COL_MOC_ORDER + 1), and,
 * for a tile coarser than COL_MOC_ORDER, the NUNIQ range [*lo, *hi] of its descendants of
 * that order (else *lo > *hi).  Returns 0 or TESS_EINVAL (no such tile). */
int colindex_tile_cells(int order, int64_t npix, int64_t *anc, int *na, int64_t *lo,
                        int64_t *hi);

typedef struct sq_index sq_index;
int sq_open(const char *path, sq_index **out, char *err, size_t errlen);
void sq_close(sq_index *x);
int sq_load(sq_index *x, const char *collection, col_member **out, int *n);
int sq_begin(sq_index *x);
int sq_commit(sq_index *x);
int sq_put(sq_index *x, const char *collection, const col_member *m, const char *wcs,
           const int64_t *nuniq, size_t ncells);
int sq_remove(sq_index *x, const char *collection, const char *relpath);
int sq_overlap(sq_index *x, const char *collection, int order, int64_t npix,
               void (*fn)(void *cls, const char *relpath), void *cls);
int sq_cells(sq_index *x, const char *collection, int64_t **out, size_t *n);
int sq_wcs(sq_index *x, const char *collection, const char *relpath, char **out);
int sq_bg_pairs(sq_index *x, const char *collection,
                void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                void *cls);
int sq_bg_put_pair(sq_index *x, const char *collection, const char *a, const char *b,
                   double n, double diff);
int sq_bg_set(sq_index *x, const char *collection, const char *relpath, double offset);

typedef struct pg_index pg_index;
int pgx_open(const char *uri, double timeout_s, pg_index **out, char *err, size_t errlen);
void pgx_close(pg_index *x);
int pgx_load(pg_index *x, const char *collection, col_member **out, int *n);
int pgx_begin(pg_index *x);
int pgx_commit(pg_index *x);
int pgx_put(pg_index *x, const char *collection, const col_member *m, const char *wcs,
            const int64_t *nuniq, size_t ncells);
int pgx_remove(pg_index *x, const char *collection, const char *relpath);
int pgx_overlap(pg_index *x, const char *collection, int order, int64_t npix,
                void (*fn)(void *cls, const char *relpath), void *cls);
int pgx_cells(pg_index *x, const char *collection, int64_t **out, size_t *n);
int pgx_wcs(pg_index *x, const char *collection, const char *relpath, char **out);
int pgx_bg_pairs(pg_index *x, const char *collection,
                 void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                 void *cls);
int pgx_bg_put_pair(pg_index *x, const char *collection, const char *a, const char *b,
                    double n, double diff);
int pgx_bg_set(pg_index *x, const char *collection, const char *relpath, double offset);

#endif
