/* Pixel-to-pixel coordinate mapping between two celestial WCSs, exact or by approximate grid. */
#ifndef TESSERA_ENGINE_SKY_COORDMAP_H
#define TESSERA_ENGINE_SKY_COORDMAP_H

#include <stddef.h>
#include "engine/sky/skywcs.h"

/* A mapping from the pixel grid of WCS `from` to the pixel grid of WCS `to` (both reduced
 * to their 2-D celestial pair; frames converted with sky_convert).  It holds private WCS
 * copies and scratch space: use one per thread. */
typedef struct rp_coordmap rp_coordmap;

/* Returns a new mapping, or NULL with `err` (no celestial pair, unsupported frame, out
 * of memory). */
rp_coordmap *rp_coordmap_new(const skywcs *from, const skywcs *to, char *err, size_t errlen);

void rp_coordmap_free(rp_coordmap *m);

/* Maps the w x h lattice of `from` pixel positions (x0 + i, y0 + j), 0 <= i < w,
 * 0 <= j < h (0-based pixel coordinates; x0, y0 may be half-integers, e.g. -0.5 for pixel
 * corners), to `to` pixel positions xo[j * w + i], yo[j * w + i].  A point off either
 * projection, or whose round trip (from -> to -> from) misses by more than one pixel on
 * either axis, is NaN (astropy reproject's pixel_to_pixel_with_roundtrip).
 * max_err = 0: exact transform of every point.  max_err > 0: exact transforms on a coarse
 * grid of nodes, interpolation between, and cells whose interpolation misses the exact
 * transform by more than max_err (measured in pixels of both WCSs, the larger) computed
 * exactly; *err_bound (may be NULL) receives, per point, an upper bound of the error of
 * that point's position in `to` pixels (0 for exactly computed points) — callers that
 * make discrete decisions on positions (edges, rounding) recompute points within that
 * distance of a decision with rp_coordmap_points.
 * The grid: square cells of 128 `from` pixels, each interpolated from its 4 x 4 node
 * stencil by cubic (4-point Lagrange) interpolation on both axes; a cell is accepted
 * when its 16 nodes pass the round trip and the interpolation error measured at its
 * centre and edge midpoints, times 10^4 (a safety margin: those points sample the error
 * rather than bound it, and at the default 0.001 pixel it keeps positions within ~1e-7
 * pixel of the exact transform, below what float32 values resolve), is within max_err;
 * a failing cell (a seam, the edge of a projection, strong distortion) is split in
 * four, down to cells of 16 pixels, and a failing 16-pixel cell is transformed point by
 * point.  Cells are aligned on absolute
 * positions (multiples of the cell size from x0 - floor(x0), y0 - floor(y0)), not on
 * the lattice: lattices with the same fractional origin get bit-identical positions for
 * the points they share, however a caller splits its work into blocks.  Nodes are not
 * cached between calls: lattices of at least 128 x 128 points (or whole blocks of rows)
 * amortise them best.
 * Returns 0, or TESS_ENOMEM. */
int rp_coordmap_lattice(rp_coordmap *m, double x0, double y0, long w, long h, double max_err,
                        double *xo, double *yo, float *err_bound);

/* Sets the acceptance of the approximate grid of `m` (default: margin 10^4, finest cell
 * 16 pixels, as described at rp_coordmap_lattice).  A cell is interpolated when the
 * largest error measured at its test points, times `margin` (>= 1), is within max_err;
 * failing cells are split down to `cell_min` pixels (a power of two, 2..128).  With a
 * margin below the default, a failing finest cell is also tried by bilinear
 * interpolation between its own 4 corner nodes (same test points, same criterion)
 * before it is transformed point by point: that keeps the cells next to a kink of the
 * mapping (the meridian in the middle of a HEALPix polar face, whose cubic stencils
 * reach across it) interpolated.  Meant for pictures (PNG and JPEG tiles), where a
 * position error of 0.01 pixel is invisible: with margin 8 (CM_EPS_FACTOR) the per-point
 * bound reported is within max_err.  Returns 0, or TESS_EINVAL (NULL m, margin < 1 or
 * not finite, cell_min not a power of two in range). */
int rp_coordmap_set_grid(rp_coordmap *m, double margin, long cell_min);

/* rp_coordmap_lattice with one error bound for the whole lattice instead of one per
 * point: *max_bound receives the largest of the per-point bounds (0 when every point
 * was transformed exactly), saving the per-point array where a caller only needs to
 * know how close to a decision a position must be to deserve an exact transform.
 * Returns 0 or TESS_ENOMEM. */
int rp_coordmap_lattice_bound(rp_coordmap *m, double x0, double y0, long w, long h,
                              double max_err, double *xo, double *yo, double *max_bound);

/* Maps n arbitrary `from` positions exactly (with the round-trip check).  Returns 0 or
 * TESS_ENOMEM. */
int rp_coordmap_points(rp_coordmap *m, size_t n, const double *x, const double *y,
                       double *xo, double *yo);

#endif
