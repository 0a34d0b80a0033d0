/* Collections: a folder of FITS images named by one glob, served as one dataset.  The
 * members are indexed once (colindex.h) and kept current by a rescan by file identity in
 * a background thread; a restart with an unchanged folder reads no header. */
#ifndef TESSERA_DAEMON_COLLECTION_COLLECTION_H
#define TESSERA_DAEMON_COLLECTION_COLLECTION_H

#include <pthread.h>
#include <stddef.h>
#include "daemon/collection/colindex.h"
#include "daemon/config.h"
#include "engine/mosaic/mosaic.h"

struct json_t;

/* Parses one datasets[] entry with a "kind" (only "collection" is known) into
 * c->collections: name, images (a glob: '*', '?', '[...]' within a name, "**" for any
 * number of directories), hdu, combine ("mean", "median", "first"), match_background.
 * Returns 0 or TESS_EINVAL / TESS_ENOMEM with err naming the key. */
int colconfig_parse(struct json_t *d, const char *where, tess_config *c, char *err,
                    size_t errlen);
void colconfig_release(tess_config *c);

/* The most files one collection may hold, and the deepest directory walked. */
#define COL_MAX_FILES 1000000
#define COL_MAX_DEPTH 32

typedef struct collection {
    char *name;
    char *root;              /* canonical directory the glob starts from */
    char *pattern;           /* the glob relative to root */
    int hdu;
    pthread_rwlock_t lock;   /* guards m and n (swapped whole by a rescan) */
    col_member *m;           /* sorted by relpath */
    int n;
    unsigned long long version; /* under lock: a hash of every member's relpath and file
                                   identity, set by each scan that changed a member (the
                                   sky routes' cache keys, colsky) */
    double extent[3];        /* under lock, set with `version`: the sky the readable
                                members cover as a circle (ra, dec of the mean direction
                                of their centres, radius to their farthest footprint
                                corner; ICRS degrees), all NaN without one */
    int combine;             /* col_config's: 0 mean, 1 median, 2 first */
    int match_background;
    unsigned long long bg_version;    /* under lock: the `version` whose members the
                                         offsets (col_member.bg_offset) were solved for,
                                         0 = none (colbackground.h) */
    unsigned long long bg_generation; /* under lock: solves so far (in collection_version) */
} collection;

typedef struct colset {
    const tess_config *cfg;
    collection *c;
    int n;
    colindex *index;
    struct colmembers *members; /* member images opened as datasets (colmembers.h) */
    pthread_mutex_t scan_lock; /* one scan at a time */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    int stop;
    int thread_running;
    pthread_t thread;
} colset;

/* Opens the index (jobs.dir/collections.sqlite, or memory without jobs.dir), loads the
 * members it holds and scans every collection once (reading only new or changed files),
 * then starts the rescan thread when cfg->collections_rescan_s > 0.  An empty set (no
 * collections) is returned as NULL with 0.  Returns 0 or TESS_EINVAL (a root outside the
 * data roots), TESS_EIO, TESS_ENOMEM with err. */
int colset_open(const tess_config *cfg, colset **out, char *err, size_t errlen);
void colset_close(colset *s);

/* One scan of every collection now (what the thread does every rescan_s).  Returns 0 or
 * the first error. */
int colset_rescan(colset *s);

collection *colset_find(colset *s, const char *name);

/* The relpaths of the usable members of c whose footprint overlaps the circle (ra, dec,
 * r degrees), in path order: at most `max` into *out (malloc'd, each malloc'd:
 * col_relpaths_free), *n of them, *total all of them; when polys is not NULL, *polys
 * (malloc'd) gets each kept member's footprint (col_member.poly, 8 doubles each).  Reads
 * no file.  Returns 0 or TESS_ENOMEM. */
int collection_overlapping_circle(collection *c, double ra, double dec, double r, int max,
                                  char ***out, double **polys, int *n, int *total);
void col_relpaths_free(char **p, int n);

/* 1 when `relpath` is a usable member of c whose footprint overlaps polygon `poly` (npts
 * (ra, dec) vertices, degrees, less than a hemisphere), else 0.  Reads no file. */
int collection_member_overlaps(collection *c, const char *relpath, const double *poly,
                               int npts);

/* How c's members combine pixel by pixel (its `combine`): MOS_MEAN, MOS_MEDIAN or
 * MOS_FIRST. */
mos_combine collection_combine(const collection *c);

/* The finest pixel scale (degrees) of c's usable members, INFINITY without one. */
double collection_finest_pixscale(collection *c);

/* c->version read under its lock, mixed with the generation of its background offsets
 * (bg_generation, 0 until the first solve): the sky routes' cache key. */
unsigned long long collection_version(collection *c);
/* The same, with c's lock held by the caller. */
unsigned long long collection_version_locked(const collection *c);

/* The member of m[0..n) (sorted by relpath) with that relpath, or NULL. */
const col_member *col_member_find(const col_member *m, int n, const char *relpath);

/* FITS headers read by the scans of this process (the test of an unchanged restart). */
unsigned long long colset_headers_read(void);

/* The absolute path of member `relpath` of c, checked: canonical, under a data root and
 * a member of the index.  Returns 0 or TESS_ENOTFOUND / TESS_EIO. */
int collection_member_path(const colset *s, collection *c, const char *relpath, char *out,
                           size_t len);

/* ---- geometry (degrees, ICRS) ---------------------------------------------------------- */

/* Whether the footprint `poly` (npts (ra, dec) vertices) overlaps the circle. */
int col_overlaps_circle(const double *poly, int npts, double ra, double dec, double r);
/* Whether two polygons overlap (each spans less than a hemisphere). */
int col_overlaps_polygon(const double *a, int na, const double *b, int nb);
/* Great-circle distance in degrees. */
double col_distance(double ra1, double dec1, double ra2, double dec2);

#endif
