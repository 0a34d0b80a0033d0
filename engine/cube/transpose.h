/* Planes of a stack turned into per-pixel series: the group and band transpose. */
#ifndef TESSERA_ENGINE_CUBE_TRANSPOSE_H
#define TESSERA_ENGINE_CUBE_TRANSPOSE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"

#define CUBE_TILE 16   /* side of the square tiles of the pixel order (pixels) */

/* What is transposed: the planes of `st`, nx = NAXIS1 columns, ny = NAXIS2 rows, nz
 * planes (0-based), read as physical values (stack_read_region) and stored as `dtype`
 * (chunkstore.h: u1 and u2/i2 little-endian hold exact integers in range, f4 anything;
 * the caller picks a type that holds the values). */
typedef struct cube_source {
    stack *st;          /* the reader, borrowed; must outlive the transpose */
    long nx, ny, nz;    /* nx * ny < 2^32 */
    cs_dtype dtype;
    const char *name;   /* the dataset's name: the store's source field, messages (copied) */
} cube_source;

/* The transpose of one volume.  Pixel order ("store order"): tiles of CUBE_TILE x
 * CUBE_TILE pixels, tile rows from y = 0, tiles from x = 0 within a tile row, pixels
 * row by row within a tile (edge tiles narrower); perm[i] = y * nx + x of store index i.
 * A series is nz values of es bytes, z fastest.
 *
 * Two stages of independent blocks:
 *   A (groups): group k holds planes z0 = k * g .. z0 + gk - 1 (gk = min(g, nz - z0));
 *     cube_transpose_group writes their values into the series of the destination, a
 *     file in store order (CHUNKSTORE_HEADER bytes, then series after series: value z of
 *     store index i at byte CHUNKSTORE_HEADER + (i * nz + z) * es), through a mapping:
 *     the staging file <workdir>/staging.bin, or a chunk store of this shape named by
 *     cube_transpose_set_dest (which is then whole once every group is done: no B);
 *   B (bands): band b holds rows y0 = b * band_rows .. min(ny, y0 + band_rows) - 1 (whole
 *     tile rows), store indices [y0 * nx, y1 * nx); cube_transpose_band reads their
 *     series in one piece from the staging file, or, when `direct`, from an existing
 *     chunk store of this shape and type at src_path (no stage A).
 * cube_transpose_rows gathers the series of a band from the planes in memory, with no
 * staging file (rechunk's one-stage plan).  Read-only after init: blocks may run
 * concurrently. */
typedef struct cube_transpose {
    stack *st;
    long nx, ny, nz, npix;
    cs_dtype dt;
    int es;                    /* bytes of one value */
    chunkstore_info ci;        /* the store of this tiling (source = name; version unset) */
    uint32_t *perm;            /* perm[idx] = y*nx + x of store index idx (owned) */
    long g, ngroups;           /* planes per group, groups */
    long hold;                 /* planes a group holds at once (0: cube_transpose_group_hold) */
    int rowwise;               /* 1: stage A makes the destination's pages a tile row at a
                                * time, just before the first group writes there (0: all
                                * of them when the first group maps it) */
    long split;                /* stage A in parts (0 or 1: none): block k of
                                * ngroups * split is part k % split of group k / split, the
                                * part-th of split even shares of its tile rows; the parts
                                * hold the group's planes once between them (each decodes
                                * some), then claim the group's tile rows one at a time,
                                * and a part returns 0 once all of them are written (its
                                * share among them).  Needs g <= 64 and split <= 16. */
    long band_rows, nbands;    /* rows per band (multiple of CUBE_TILE), bands */
    int direct;                /* 1: no stage A; bands read the chunk store src_path */
    char stage_path[PATH_MAX]; /* <workdir>/staging.bin */
    char dest_path[PATH_MAX];  /* where stage A writes: stage_path unless set */
    char src_path[PATH_MAX];
    char name[128];
    struct cube_dest *dest;    /* stage A's one mapping of the destination (owned, lazy) */
} cube_transpose;

/* Sets up the transpose of `src`: groups of planes of at most 64 MB (and at least 16
 * groups when nz allows), bands whose series take at most 64 MB at
 * max(es, out_bytes_per_value) bytes a value (at least 16 bands when ny allows).
 * `src_path` (may be NULL when !direct) and `workdir` are copied.  Creates no file.
 * Returns 0, TESS_ERANGE (a size below 1, a plane of 2^32 pixels or more, or the values
 * overflowing as bytes: engine/base/checked.h) or TESS_ENOMEM with err; release with
 * cube_transpose_release either way. */
int cube_transpose_init(cube_transpose *t, const cube_source *src, long out_bytes_per_value,
                        int direct, const char *src_path, const char *workdir, char *err,
                        size_t errlen);

/* The planes per group (*g) and rows per band (*band_rows) cube_transpose_init gives an
 * nx x ny x nz volume of es-byte values, computed alone (no permutation, no allocation):
 * for estimates of what a transpose will need.  A group holds g planes (at most 64 MB, or
 * one plane), a band band_rows rows (a multiple of CUBE_TILE) of series. */
void cube_transpose_sizes(long nx, long ny, long nz, int es, long out_bytes_per_value,
                          long *g, long *band_rows);
/* The planes cube_transpose_group holds at once for nx x ny planes of es-byte values:
 * at most 16, fewer when they would pass 64 MB of values, at least one.  For estimates. */
long cube_transpose_group_hold(long nx, long ny, int es);
/* Frees the permutation and unmaps the destination.  Safe on a zeroed or failed
 * transpose. */
void cube_transpose_release(cube_transpose *t);

/* Creates the staging file (CHUNKSTORE_HEADER + npix * nz * es bytes of zeros, sparse)
 * unless direct or the destination was set elsewhere.  Returns 0 or TESS_EIO with err. */
int cube_transpose_create_files(const cube_transpose *t, char *err, size_t errlen);

/* Stage A writes into the existing chunk store at `path` (chunkstore_create with t->ci)
 * instead of the staging file: copied.  Returns 0 or TESS_ERANGE (path too long). */
int cube_transpose_set_dest(cube_transpose *t, const char *path);

/* Stage A, group k (0-based, < ngroups; with t->split, block k < ngroups * split: that
 * part of group k / split, see split): reads the group's planes and writes their values
 * at their place in every series of the destination (its other values untouched: groups
 * may run concurrently), holding t->hold planes at once when set (at most 64), else at
 * most 16 planes (and 64 MB of their values, or one plane), whatever nz is.  Every group writes into every page of the destination, so the
 * first group to run maps all of it once, its pages made then, and the others write into
 * that mapping (held until cube_transpose_release): a mapping per group would make and
 * unmake every page table entry of the file once per group.  Idempotent.  Polls *cancel
 * between planes.  Returns 0,
 * TESS_ECANCELED, TESS_ENOMEM, TESS_EIO (the destination cannot be mapped or written),
 * or a read error of the stack. */
int cube_transpose_group(const cube_transpose *t, long k, const volatile int *cancel,
                         char *err, size_t errlen);

/* Stage B, band b (0-based, < nbands): fills `buf` (at least (*p1 - *p0) * nz * es
 * bytes) with the series of the band's store indices [*p0, *p1) = [y0 * nx, y1 * nx),
 * series after series.  Polls *cancel once.  Returns 0, TESS_ECANCELED or TESS_EIO
 * (staging file or store unreadable). */
int cube_transpose_band(const cube_transpose *t, long b, unsigned char *buf, long *p0,
                        long *p1, const volatile int *cancel, char *err, size_t errlen);

/* The file band reads take their series from (the staging file, or the chunk store at
 * src_path when direct), opened read-only: a descriptor, or -1.  Readers of stage B's
 * series (cube_transpose_band, engine/cube/spectrum.c) pair it with
 * cube_transpose_series_close, which closes fd (when >= 0) and returns 0, or TESS_EIO
 * with err naming the file when fd < 0 or `bad` (a read failed). */
int cube_transpose_series_open(const cube_transpose *t);

/* Stage A's mapping of the staging file, for stage B's readers in the same process: the
 * series of store index i at p + i * nz * es (borrowed; valid until
 * cube_transpose_release), or NULL when no such mapping is held (direct, a destination
 * set elsewhere, a job resumed after its stage A ran in another process, a mapping that
 * failed): the reader then opens the file (cube_transpose_series_open).  Call once
 * stage A is done. */
const unsigned char *cube_transpose_staged(const cube_transpose *t);
int cube_transpose_series_close(const cube_transpose *t, int fd, int bad, char *err,
                                size_t errlen);

/* The series of rows [y0, y1) (y0 a multiple of CUBE_TILE, y1 one too or ny) into `out`
 * ((y1 - y0) * nx * nz * es bytes) in store order from index y0 * nx, read from the
 * planes directly: planes held in groups of 64 (stack_plane_hold; 8-bit frames not
 * converted), a tile row at a time.  Polls *cancel between groups.  Returns 0,
 * TESS_ECANCELED, TESS_ENOMEM, TESS_EIO (a frame truncated while read) or a read error
 * of the stack. */
int cube_transpose_rows(const cube_transpose *t, long y0, long y1, unsigned char *out,
                        const volatile int *cancel, char *err, size_t errlen);

#endif
