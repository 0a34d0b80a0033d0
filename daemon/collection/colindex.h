/* The collection index's store: one row per member image of a collection and its HEALPix
 * coverage cells, in SQLite or PostgreSQL (colindex_impl.h).  Schema in
 * docs/collections.md. */
#ifndef TESSERA_DAEMON_COLLECTION_COLINDEX_H
#define TESSERA_DAEMON_COLLECTION_COLINDEX_H

#include <stddef.h>
#include <stdint.h>

/* The order of the coverage cells kept per image (NUNIQ of this order or coarser: an
 * image whose walk was cut short, hips_footprint_cells, keeps coarser cells). */
#define COL_MOC_ORDER 8

/* One member image.  Angles in degrees (ICRS), wavelengths in metres, times in MJD;
 * NaN where the header does not say. */
typedef struct col_member {
    char *relpath;           /* path relative to the collection's root */
    long long dev, ino, size, mtime_ns; /* the file's identity when indexed */
    long nx, ny, nz;
    int bitpix;
    double ra, dec;          /* centre */
    double radius;           /* largest distance from the centre to a corner */
    double pixscale;
    double poly[8];          /* footprint corners (ra, dec) x 4, pixel edges, in order */
    char filter[72];
    double em_min, em_max, t_min, t_max, exptime;
    char *error;             /* why the image is not usable, or NULL */
    double bg_offset;        /* the additive background offset solved for it (the image's
                                units; subtracted when combined with match_background),
                                NaN until solved (colbackground.h) */
} col_member;

typedef struct colindex colindex;

/* Opens (creates, migrates) the index: in PostgreSQL at `pg_uri` when it is not NULL
 * (each statement bounded by timeout_s), else in SQLite at `path` (NULL: an in-memory
 * database).  Returns 0 or TESS_EIO with err. */
int colindex_open(const char *path, const char *pg_uri, double timeout_s, colindex **out,
                  char *err, size_t errlen);
/* 1 when the index is PostgreSQL's. */
int colindex_is_pg(const colindex *x);
void colindex_close(colindex *x);

/* Every member of `collection`, sorted by relpath: *out malloc'd (col_members_free). */
int colindex_load(colindex *x, const char *collection, col_member **out, int *n);

/* A transaction around many puts and removes (one fsync per scan). */
int colindex_begin(colindex *x);
int colindex_commit(colindex *x);

/* Inserts or replaces a member with its WCS header text (may be NULL) and coverage cells
 * (NUNIQ values).  Returns 0 or TESS_EIO. */
int colindex_put(colindex *x, const char *collection, const col_member *m, const char *wcs,
                 const int64_t *nuniq, size_t ncells);
int colindex_remove(colindex *x, const char *collection, const char *relpath);

/* The relpaths of the members whose coverage holds tile (order, npix): one indexed
 * query on the cells (ancestors of the tile, or its descendants at COL_MOC_ORDER),
 * reading no file.  fn is called per member; returns the count or TESS_EIO. */
int colindex_overlap(colindex *x, const char *collection, int order, int64_t npix,
                     void (*fn)(void *cls, const char *relpath), void *cls);

/* The distinct coverage cells (NUNIQ) of every member of `collection`, ascending: *out
 * malloc'd (NULL when none), *n set.  The union of the members' coverage (Moc.fits).
 * Returns 0, TESS_EIO or TESS_ENOMEM. */
int colindex_cells(colindex *x, const char *collection, int64_t **out, size_t *n);

/* The WCS header text stored for a member into *out (malloc'd) or NULL. */
int colindex_wcs(colindex *x, const char *collection, const char *relpath, char **out);

/* Background matching (colbackground.h).  A pair (a, b), a < b by relpath, holds the
 * difference a - b measured on their common pixels (diff, in the images' units) and the
 * number of points it rests on (n; 0 when they share too few usable pixels: then it is
 * no constraint, but measured).  Putting or removing a member deletes its pairs and its
 * offset (NULL).  colindex_bg_pairs calls fn per pair and returns the count or TESS_EIO;
 * the others return 0 or TESS_EIO.  colindex_bg_set stores one member's offset (NaN:
 * NULL); call it between colindex_begin and colindex_commit for many. */
int colindex_bg_pairs(colindex *x, const char *collection,
                      void (*fn)(void *cls, const char *a, const char *b, double n, double diff),
                      void *cls);
int colindex_bg_put_pair(colindex *x, const char *collection, const char *a, const char *b,
                         double n, double diff);
int colindex_bg_set(colindex *x, const char *collection, const char *relpath, double offset);

void col_member_release(col_member *m);
void col_members_free(col_member *m, int n);

#endif
