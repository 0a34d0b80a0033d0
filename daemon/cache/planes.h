/* Plane store: dataset planes read once and shared in memory, with reduced copies and cut levels. */
#ifndef TESSERA_DAEMON_CACHE_PLANES_H
#define TESSERA_DAEMON_CACHE_PLANES_H

#include <stddef.h>
#include "engine/image/render.h"
#include "engine/sky/plane.h"
#include "daemon/catalog.h"

typedef struct planestore planestore;

/* A plane held by the store: `plane` is read-only and stays valid until
 * planestore_release(handle).  Level 0 is the plane at full resolution (physical values,
 * BSCALE/BZERO applied, BLANK as NaN; RP_F64 for BITPIX -64 and 32/64-bit integers,
 * RP_F32 otherwise); level k > 0 is the plane reduced by 2^k on both axes: pixel (i, j)
 * is the mean of the finite pixels of the 2^k x 2^k block at (i 2^k, j 2^k) of level 0
 * (blocks at the right and top edges are partial), NaN when none is finite;
 * nx = ceil(NX / 2^k), ny = ceil(NY / 2^k) (engine/image/pyramid.h).  Row 0 = FITS row 1. */
typedef struct plane_view {
    const rp_plane *plane;
    int level;
    void *handle;              /* private: pass to planestore_release */
} plane_view;

/* A store that keeps at most `max_bytes` of planes (least recently used planes not in use
 * are dropped first).  Returns NULL on allocation failure. */
planestore *planestore_new(size_t max_bytes);

/* Frees the store; views still held stay valid until released (planestore_release of
 * such a view then frees the plane, and the last one what is left of the store).
 * NULL is ignored.  No planestore_get, planestore_cuts or planestore_version may run on
 * the store during or after the call. */
void planestore_free(planestore *s);

/* Gets plane z (0-based; frame z of a stack) of dataset `d` at reduction level `level`
 * (0..30, capped at the level where the plane is 1x1), reading and reducing it on first
 * use.  Concurrent first uses of one plane read it once.  A plane whose file changed
 * since it was read (its tess_file_id: inode, size, mtime or ctime, stat(2) at every
 * use) is read again.  A plane of a stack with a current ingest store (dataset_ingested)
 * is read from the store, its frame neither opened nor decoded; the version stays the
 * frame's (planestore_view_version), the values are the same.
 * Returns 0, or TESS_ERANGE (z outside the dataset), TESS_EIO (`err` says why),
 * TESS_ELIMIT (a frame over the decode budgets, engine/base/decodelimit.h, checked
 * first, or a plane of 2^32 pixels or more, which the store cannot hold: refused before
 * its plane is allocated; the HTTP routes answer 413 as for any decode budget),
 * TESS_ENOMEM. */
int planestore_get(planestore *s, const dataset *d, long z, int level, plane_view *v,
                   char *err, size_t errlen);

/* Releases a view from planestore_get and clears it (a cleared or zeroed view is
 * ignored, so releasing twice is harmless).  Safe after planestore_free(s): the view
 * knows its store, `s` is not looked at.  Cannot fail. */
void planestore_release(planestore *s, plane_view *v);

/* The identity of the file contents behind a held view: "SIZE-HASH" in hex (file size
 * in bytes, the hash of its tess_file_id: inode, size, mtime, ctime; for a stack, of the
 * frame's file), as stat(2) gave them before the plane was read.  For cache keys.  Valid
 * while the view is held. */
const char *planestore_view_version(const plane_view *v);

/* The version (as planestore_view_version) that planestore_get would serve now for plane
 * z of `d`: the cached plane's when it is still current (the same once-a-second check as
 * planestore_get, which marks a changed plane for reloading), else that of the file as
 * it is now.  Reads no pixels: cheap enough for every request.  Returns 0, or
 * TESS_ERANGE (z outside the dataset), TESS_EIO (cannot stat the file; `err` says why). */
int planestore_version(planestore *s, const dataset *d, long z, char *out, size_t outlen,
                       char *err, size_t errlen);

typedef struct planestore_stats {
    unsigned long long reads;      /* planes read from files (level 0) */
    unsigned long long reductions; /* reduced levels built */
    unsigned long long hits;       /* planestore_get answered from memory */
    unsigned long long reloads;    /* cached planes dropped because their file changed */
    unsigned long long cut_computations; /* percentile cuts computed (not from the cache) */
    size_t bytes;                  /* bytes of planes held (cached or in use) */
    size_t entries;                /* planes held */
    size_t max_bytes;
} planestore_stats;

/* Counters since planestore_new, read under the store's lock.  Cannot fail. */
void planestore_get_stats(planestore *s, planestore_stats *st);

/* Cut levels of `rp` (percentiles over the finite pixels of the full-resolution plane,
 * or absolute values) for plane z of `d`, cached per plane and parameters: every tile of
 * one dataset is then rendered with the same cuts.  Returns 0 or a TESS_E* code. */
int planestore_cuts(planestore *s, const dataset *d, long z, const render_params *rp,
                    double *lo, double *hi, char *err, size_t errlen);

#endif
