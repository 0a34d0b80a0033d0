/* Catalog of configured datasets: images, cubes and stacks, with their WCS, opened at start. */
#ifndef TESSERA_DAEMON_CATALOG_H
#define TESSERA_DAEMON_CATALOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/config.h"
#include "engine/sky/skywcs.h"

typedef enum { DS_IMAGE, DS_CUBE, DS_STACK } ds_kind;

/* One dataset.  Shapes are FITS-style: nx = NAXIS1 (columns), ny = NAXIS2 (rows),
 * nz = NAXIS3 (planes of a cube, frames of a stack; 1 for an image).  Immutable after
 * catalog_open, so any thread may read it. */
typedef struct dataset {
    char *name;
    ds_kind kind;
    char **paths;        /* canonical absolute paths: 1 for image/cube, nz for a stack */
    int npaths;
    int hdu;             /* 0-based HDU of every path */
    long nx, ny, nz;
    int bitpix;          /* BITPIX as stored (of the first frame for a stack) */
    char bunit[72];
    char *header;        /* the HDU's cards (first frame for stacks), 80 characters each */
    int nkeys;
    skywcs *wcs;         /* full WCS of the header, or NULL when it has none; read-only */
    skywcs *cel;         /* its celestial 2-D part, or NULL; read-only: copy before use */
    char wcs_error[256]; /* why the header's WCS was refused (skywcs_parse's reason: the
                            validity rule), or "" when it has none or it was accepted; a
                            refused WCS leaves wcs and cel NULL (pixels only) */
    int hips_galactic;   /* HiPS frame: 1 galactic, 0 equatorial */
    double rest_frequency; /* Hz, from the configuration (ds_config); 0 = none */
    uint64_t *header_hash; /* per path, frame_header_hash (engine/image/stack.h) when
                            opened: the header every path must keep (0: a PNG or TIFF
                            frame) */
    char version[64];    /* identity of the file contents when opened (inode, size, mtime
                            and ctime of every path, the first one's header block); use
                            dataset_version() for the current one */
    struct ds_state *state; /* private: the current version, rechecked once a second */
} dataset;

/* The datasets, configured ones first, then those registered while serving (job
 * products).  Datasets are never removed while the catalog lives, so a pointer from
 * catalog_find/catalog_at stays valid until catalog_free.  Thread-safe. */
typedef struct catalog {
    dataset **items;     /* private: use catalog_count/catalog_at/catalog_find */
    int n, cap;
    pthread_mutex_t lock;
    const tess_config *cfg;
} catalog;

/* Opens every dataset of `cfg`: resolves paths against the data roots (a path that
 * resolves outside every root is refused), reads each header and WCS (a WCS that breaks
 * the validity rule of skywcs_parse is not used: the dataset is served for its pixels,
 * the reason in wcs_error), checks that the frames of a stack share one 2-D shape.  Returns 0, or TESS_EIO / TESS_EINVAL /
 * TESS_ENOMEM with `err` naming the dataset and the reason. */
int catalog_open(const tess_config *cfg, catalog **out, char *err, size_t errlen);

void catalog_free(catalog *c);

/* Opens one more dataset while serving (a job's product): as catalog_open does for one
 * entry, except that the path, which must be absolute, is not checked against the data
 * roots (the caller vouches for it: the jobs directory).  Returns 0, TESS_EEXIST when
 * the name is taken, or the errors of catalog_open.  Thread-safe. */
int catalog_add(catalog *c, const ds_config *dc, char *err, size_t errlen);

/* Opens one dataset outside the catalog (a member image of a collection,
 * daemon/collection/colmembers.c): as catalog_add, the path absolute and vouched for by the
 * caller, but the dataset is the caller's (dataset_close), never listed or found by name.
 * Returns 0 with *out set, or the errors of catalog_open. */
int dataset_open_file(const tess_config *cfg, const ds_config *dc, dataset **out, char *err,
                      size_t errlen);
void dataset_close(dataset *d);
/* The number of datasets, and dataset i (0-based, NULL past the end).  Thread-safe. */
int catalog_count(catalog *c);
const dataset *catalog_at(catalog *c, int i);

/* The dataset called `name`, or NULL.  Thread-safe. */
const dataset *catalog_find(catalog *c, const char *name);

/* The one dataset look-up of the routes (daemon/api: handler_dataset, VO, IIIF): the
 * dataset named name[0..len) (not terminated), with the checks every route makes.
 * Returns 0 with *out set; TESS_ENOTFOUND (*out NULL) when the catalog has none of that
 * name (an empty name, one of CATALOG_NAME_MAX bytes or more, or one holding a NUL names
 * none); TESS_EIO with *out set and `why` saying so (dataset_check) when a file's header
 * changed since the server started.  Thread-safe. */
#define CATALOG_NAME_MAX 256
int catalog_lookup(catalog *c, const char *name, size_t len, const dataset **out, char *why,
                   size_t whylen);

const char *ds_kind_name(ds_kind k);
/* The rest frequency (Hz) of d's spectral axis: the header's RESTFRQ (or RESTFREQ), else
 * c / RESTWAV, else the configured rest_frequency; 0 when none. */
double dataset_rest_frequency(const dataset *d);   /* "image", "cube", "stack" */

/* Reads the w x h region at (x0, y0) of plane z (0-based, as fitsimg_read_region) as
 * physical values, through the dataset's reader (dataset_stack).  Thread-safe.  Returns
 * 0 or a TESS_E* code with `err`. */
int dataset_read_region(const dataset *d, long z, long x0, long y0, long w, long h, double *out,
                        char *err, size_t errlen);

/* The reader of the dataset's pixels (engine/image/stack.h: planes on any axis, series; FITS
 * memory-mapped, PNG frames decoded, a bounded number of frames open), owned by the
 * dataset, thread-safe.  Never NULL for an opened dataset. */
struct stack;
struct stack *dataset_stack(const dataset *d);   /* see dataset_attach_profile */
/* The reader of the dataset's attached ingest store (dataset_attach_profile) while it is
 * current (the dataset's version is the one it was ingested at), else NULL: what
 * dataset_stack returns then.  Readers of planes by file (daemon/cache/planes) read it
 * instead of the frames.  Owned by the dataset, thread-safe. */
struct stack *dataset_ingested(const dataset *d);

/* The current identity of the dataset's files ("<size>-<hash>" in hex: the hash of the
 * tess_file_id of every path, engine/base/fileio.h, inode, size, mtime and ctime, and of
 * the first path's header block), copied to `out`: the files are looked at again when
 * the last check is more than a second old, so a replaced or rewritten file changes it,
 * even one that kept its size and mtime (ctime cannot be set back).  Put it in every
 * cache key, the disk tier's included, so that a changed source is never served from a
 * cache.  Thread-safe.  Returns `out`.
 *
 * What is guaranteed when a dataset's file changes while it is served (tests/daemon/
 * test_faults.c and test_hostile_files.c check each point):
 *  - Replaced (rename(2) over it, or rewritten in place, with or without its old size
 *    and mtime set back): every route answers from the new file at most about a second
 *    after the change (this check's interval), cached answers (memory and disk tiers)
 *    included.  Within that second an answer cached before the change may still be
 *    served, and an answer may be cached under the old version with the new pixels
 *    (never the reverse: the pixel readers, engine/image/stack and daemon/cache/planes,
 *    stat(2) the file at every read, after the key was made, and map or read it again
 *    when its identity changed, so what is cached under a version is never older than
 *    that version).
 *  - Truncated or deleted: 500 problem+json naming the file and the reason, no crash; a
 *    read racing with a truncation of a memory-mapped file gets TESS_EIO through
 *    engine/base/mapguard.h instead of SIGBUS.  Restored, it is served again as above.
 *  - Not guaranteed: a file rewritten in place (same inode) while a request reads it may
 *    give that request a mix of old and new pixels; replace files by rename(2).  Only the
 *    pixels are read anew: the header, WCS and shape are those read at start (a file
 *    whose shape or header changed answers 500 until the server is restarted:
 *    dataset_check). */
const char *dataset_version(const dataset *d, char *out, size_t len);

/* Whether the dataset may be served: TESS_EIO with err "dataset 'NAME': the header of
 * FILE changed since the server started (KEYWORD); restart tesserad to serve the new
 * header" when a file's header (all its header blocks, frame_header_hash) is no longer
 * the one read at start, else 0.  Looked at with the version (dataset_version: at most
 * once a second, the headers only when the version changed).  Every route of a dataset
 * answers 500 with that reason meanwhile (catalog_lookup, used by every route); the
 * pixel readers refuse such a file at once (stack_expect_headers).  Thread-safe. */
int dataset_check(const dataset *d, char *err, size_t errlen);

/* Whether a copy derived from the dataset's files (a rechunk copy, an ingest store, a
 * job's partial results) is current: `made_from` is the dataset_version the copy was made
 * from, and it still is the dataset's version, so the files the copy came from are the
 * files now served (same inode, size, mtime and ctime, and header).  A frame replaced
 * since, or a dataset restarted under the same name and shape with other files, makes
 * every such copy stale: 1 current, 0 stale or `made_from` NULL or "".  Thread-safe. */
int dataset_copy_current(const dataset *d, const char *made_from);

/* Attaches a profile-friendly copy of the dataset (the product of a rechunk job, at the
 * absolute `path`, a chunk store whose source_version is the dataset_version it was made
 * from): series requests and /zarr/{name}/profile read it instead of every plane while it
 * is current (dataset_copy_current; a copy of another shape, or whose info cannot be
 * read, never is).  Replaces an earlier one.  A FITS file at `path` is instead the plane store of an ingest job (job_stack.h): a
 * cube of the dataset's shape whose card INGVER is the dataset_version it was written
 * at; from then on, while the dataset's version is that one, dataset_stack (and so
 * every plane, cut, series, reduction and job read) reads the store's mapped planes
 * instead of decoding frames; a changed frame makes them read the frames again.
 * Returns 0 or TESS_ENOMEM (a plane store: TESS_EIO unreadable, TESS_EINVAL not such a
 * store).  Thread-safe. */
int dataset_attach_profile(const dataset *d, const char *path);
/* Copies the attached copy's path into `out` and returns 1 when it is current
 * (dataset_copy_current), or returns 0 when none is attached or it is stale (`out` may
 * then hold its path all the same). */
int dataset_profile_path(const dataset *d, char *out, size_t len);

/* 1 when canonical absolute `path` lies inside one of the configured roots. */
int catalog_path_allowed(const tess_config *cfg, const char *path);

#endif
