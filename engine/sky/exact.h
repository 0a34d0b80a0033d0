/* Flux-conserving reprojection by exact overlap of pixels on the sphere (reproject_exact). */
#ifndef TESSERA_ENGINE_SKY_EXACT_H
#define TESSERA_ENGINE_SKY_EXACT_H

#include <stddef.h>
#include "engine/sky/plane.h"
#include "engine/sky/skywcs.h"

/* Reprojects rows [out_y0, out_y1) of the output grid (out_nx x out_ny pixels on the 2-D
 * celestial WCS `out`) from `src` on the 2-D celestial WCS `in`, conserving flux as
 * astropy reproject's reproject_exact does: each output pixel receives
 *     sum_k v_k A_k / sum_k A_k
 * over the input pixels k whose footprint on the sky overlaps it, A_k being the area of
 * the overlap (spherical polygons bounded by great circles); dst is NaN where no finite
 * input pixel overlaps.  `footprint` (may be NULL) receives sum_k A_k divided by the
 * output pixel's area (1 for a pixel fully covered).  dst and footprint are the full
 * out_nx x out_ny arrays (row 0 = FITS row 1); only rows out_y0..out_y1-1 are written.
 * max_coord_error as for interpolation (0: exact transforms of every pixel corner).
 * Correct for tiny pixels (no precision loss below 0.01"), parity flips, CRPIX far outside
 * the image and pixels crossing RA = 0/360.  Thread-safe for disjoint row ranges (the call
 * makes its own WCS copies).  Returns the number of finite output pixels written (>= 0),
 * or TESS_EINVAL / TESS_ENOMEM with `err`. */
long rp_exact_rows(const skywcs *in, const rp_plane *src, const skywcs *out, long out_nx,
                   long out_ny, long out_y0, long out_y1, double max_coord_error,
                   double *dst, double *footprint, char *err, size_t errlen);

/* A WCS pair prepared for rp_exact_rows_ctx: private copies of `in` and `out` (the
 * caller's may change or be freed afterwards), the coordinate map between them, and what
 * rp_exact_rows would otherwise redo on every call (the mapped corners of the coarse
 * cells that select the input region of a band, the test whether the solid angle
 * correction matters) plus scratch memory (accumulation cells, corner lattices) grown
 * on demand and kept, so that a thread reprojecting band after band allocates and
 * page-faults it once.  One call at a time per context (one context per thread).
 * rp_exact_ctx_new returns NULL with `err` on the errors rp_exact_rows reports for its
 * WCSs (no celestial pair, unsupported frame, celestial axes coupled to others) and out
 * of memory; rp_exact_ctx_free(NULL) does nothing. */
typedef struct rp_exact_ctx rp_exact_ctx;
rp_exact_ctx *rp_exact_ctx_new(const skywcs *in, const skywcs *out, char *err, size_t errlen);
void rp_exact_ctx_free(rp_exact_ctx *ctx);

/* rp_exact_rows(in, src, out, ...) on the pair ctx was made from: the same results bit
 * for bit, the same errors (TESS_EINVAL also for a NULL ctx).  src may differ from call to
 * call (planes of a cube).  ctx keeps about 32 bytes per output pixel of the largest row
 * range asked for (48 with the solid angle correction; see exact.c) until freed. */
long rp_exact_rows_ctx(rp_exact_ctx *ctx, const rp_plane *src, long out_nx, long out_ny,
                       long out_y0, long out_y1, double max_coord_error, double *dst,
                       double *footprint, char *err, size_t errlen);

/* The most bytes of scratch rp_exact_rows_ctx keeps and allocates for one call on an
 * input of in_nx x in_ny pixels and `rows` output rows of out_nx pixels: the selection
 * nodes and cells, the corner lattices, the accumulation cells (with the solid angle
 * moments, the larger case).  For estimates of what a thread of an exact reprojection
 * holds; computed alone, no allocation. */
double rp_exact_scratch_bytes(long in_nx, long in_ny, long out_nx, long rows);

#endif
