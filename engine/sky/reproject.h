/* The reprojection engine: image planes and cubes from one celestial WCS onto another, in parallel blocks. */
#ifndef TESSERA_ENGINE_SKY_REPROJECT_H
#define TESSERA_ENGINE_SKY_REPROJECT_H

#include <stdatomic.h>
#include <stddef.h>
#include "engine/sky/plane.h"
#include "engine/sky/skywcs.h"
#include "engine/base/pool.h"

typedef enum { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3, RP_EXACT } rp_method;

/* "nearest", "bilinear", "bicubic", "lanczos3", "exact" (any case).  Returns 0 and *m,
 * or TESS_EINVAL. */
int rp_method_parse(const char *s, rp_method *m);

/* The name rp_method_parse accepts for m ("unknown" for a value outside the enum).
 * Cannot fail. */
const char *rp_method_name(rp_method m);

/* nz planes of nx columns (NAXIS1) by ny rows (NAXIS2), one dtype, contiguous: plane k,
 * pixel (i, j) is element (k * ny + j) * nx + i (FITS order; row 0 = FITS row 1; pixel
 * centres at integer 0-based coordinates; NaN = no data).  A 2-D image is nz = 1. */
typedef struct rp_cube {
    void *data;
    rp_dtype dtype;
    long nx, ny, nz;
} rp_cube;

/* Called after each finished block with the number of blocks done (strictly increasing,
 * 1..total) and the total.  Called from whichever thread finished the block, never
 * concurrently; it must not call back into the engine. */
typedef void (*rp_progress_fn)(void *arg, long done, long total);

/* Called when the engine has written a block of the output — planes [z0, z0 + nz),
 * columns [x0, x0 + w), rows [y0, y0 + h) of dst and of the footprint — and will not
 * touch that region again: the caller may transform it in place (byte order, encoding)
 * or stream it out while other blocks are still being computed.  Called from the
 * thread that did the block, concurrently for different blocks; never for a block whose
 * work failed. */
typedef void (*rp_block_fn)(void *arg, long z0, long nz, long x0, long y0, long w, long h);

/* How to reproject.  Fill with rp_options_init, then change fields. */
typedef struct rp_options {
    rp_method method;           /* default RP_BILINEAR */
    double max_coord_error;     /* bound on the coordinate grid's error, output pixels
                                   (default 0.001; 0 = exact transform of every pixel) */
    pool *workers;              /* NULL (default): the engine starts its own threads */
    pool_priority priority;     /* of the helper tasks queued on `workers` (default
                                   POOL_BATCH) */
    int threads;                /* most threads working at once, the caller's included
                                   (0, the default: one per online CPU without `workers`,
                                   pool_threads(workers) + 1 with them) */
    long block;                 /* block edge, output pixels (0 = 256); exact works in
                                   bands of block / 2 rows of the full width (each band
                                   call of rp_exact_rows has a fixed cost: fewer, taller
                                   bands are faster); with 0 and several threads, bands
                                   are shortened (not below 32 rows) so that each
                                   thread gets at least 8 */
    rp_progress_fn progress;    /* may be NULL */
    void *progress_arg;
    rp_block_fn block_done;     /* may be NULL */
    void *block_arg;
    long ring_rows;             /* 0 (default): dst and the footprint hold every row.
                                   > 0, interpolation methods only: they hold ring_rows
                                   rows of each plane, row y of plane z at element
                                   (z * ring_rows + y % ring_rows) * nx + x (a multiple of
                                   the block edge, at least twice it; not 0 for `block`).
                                   No block starts before block_done has returned for
                                   every block of the rows it reuses (those ring_rows
                                   above), so block_done must take a band's values away
                                   once its last block is done: the output streams
                                   through ring_rows x nx x nz values of memory, which
                                   are reused instead of fresh (zero-filled) pages.  The
                                   values are those of the full array. */
    const atomic_int *cancel;   /* may be NULL; when it becomes nonzero no new block starts
                                   and the call returns TESS_ECANCELED */
} rp_options;

/* Sets the defaults above.  Cannot fail. */
void rp_options_init(rp_options *o);

/* Reprojects `src` (nz planes on the WCS `in`) onto `dst` (nz planes on the WCS `out`,
 * dst->nx x dst->ny pixels; with opt->ring_rows, dst->data holds only that many rows of
 * each plane).  Only the celestial pair of each WCS is used (a WCS with
 * more axes is reduced with skywcs_celestial); plane k of dst is plane k of src
 * reprojected — the other axis (spectral, time) is passed through — and one coordinate
 * map serves every plane.  Frames are converted (sky_convert) when `in` and `out`
 * differ.
 * Interpolation methods map each output pixel centre to the input pixel grid (astropy
 * reproject's pixel_to_pixel_with_roundtrip: NaN when the round trip out -> in -> out
 * misses by more than one pixel) and sample it with rp_kernel (kernels.h: samples only
 * within [-0.5, n-0.5] on each axis, NaN beyond, as reproject_interp).  RP_EXACT
 * conserves flux by spherical overlap (exact.h, as reproject_exact).
 * Coordinates: the approximate grid of coordmap.h bounded by max_coord_error, with
 * positions next to a sampling decision (the edges -0.5 and n - 0.5, nearest's rounding
 * at half-integers) transformed exactly, so the grid takes the decisions the exact
 * transform takes.
 * Work: the output is cut into blocks (block x block pixels; for exact, bands of
 * block / 2 rows, one per plane and row range); each block maps its coordinates and
 * samples every plane.  The calling thread runs blocks itself, helpers (own threads,
 * or tasks queued on `workers`) take blocks from the same counter, and the call waits
 * only for helpers that hold a block: it cannot deadlock when called from a task of
 * `workers`, and helper tasks that start after the call has returned exit at once.
 * Results do not depend on the block size or on the number of threads (bit-identical).
 * Memory: the input is read in place (float32 stays float32); each thread holds
 * 2 x block^2 + block doubles of scratch; bicubic prepares (nx + 2) x (ny + 2) doubles of
 * coefficients per plane, cubes in groups of planes within 256 MiB.
 * `footprint` (may be NULL): dst->nx * dst->ny * nz floats, same layout: 1 where the
 * output value is finite and 0 elsewhere (reproject_interp), or the fraction of the
 * output pixel covered by finite input pixels (reproject_exact).
 * `in` and `out` are not modified (every thread works on its own copies), so one skywcs
 * may be shared by concurrent calls.
 * Returns the number of finite output values over all planes (>= 0), or TESS_EINVAL
 * (NULL arguments, bad sizes or dtype, nz differing, unknown method, max_coord_error < 0
 * or not finite, ring_rows not as above, a WCS without a separable celestial pair or with an unsupported frame),
 * TESS_ENOOVERLAP (no output pixel maps inside the input image — for exact, none is
 * covered by a finite input pixel: dst is then all NaN),
 * TESS_ECANCELED, TESS_ENOMEM; `err` says why.  dst is unspecified after an error other
 * than TESS_ENOOVERLAP (the NaN are written after the last block_done call). */
long rp_reproject(const skywcs *in, const rp_cube *src, const skywcs *out, rp_cube *dst,
                  float *footprint, const rp_options *opt, char *err, size_t errlen);

/* The most bytes of scratch one thread of rp_reproject holds besides src, dst and the
 * footprint, for an input of in_nx x in_ny pixels onto out_nx x out_ny with `method`
 * and the default block: for RP_EXACT a band of up to RP_BLOCK / 2 output rows (values,
 * footprint and the kernel's accumulation cells, about 64 bytes an output pixel, plus
 * its corner lattices: about 1 KB an input column), for the others one block of
 * coordinates.  Bicubic's prepared coefficients are not included (see above).  For
 * estimates; computed alone, no allocation. */
double rp_scratch_bytes(rp_method method, long in_nx, long in_ny, long out_nx, long out_ny);

/* One plane of doubles with a single thread (the calling one), no footprint: the
 * original form the server used, kept for callers that hold doubles.  `src` is
 * in_nx x in_ny doubles, `dst` out_nx x out_ny doubles (row-major, row 0 = FITS row 1,
 * NaN = no data).  Returns the number of finite output pixels (>= 0; 0 when the target
 * does not overlap the input, dst then all NaN), or TESS_EINVAL / TESS_ENOMEM with
 * `err` as rp_reproject. */
long reproject_plane(const skywcs *in, const double *src, long in_nx, long in_ny,
                     const skywcs *out, long out_nx, long out_ny,
                     rp_method method, double max_coord_error,
                     double *dst, char *err, size_t errlen);

#endif
