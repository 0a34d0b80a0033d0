/* Flux-conserving reprojection by exact overlap of pixels on the sphere (reproject_exact). */
#ifndef TESSERA_REPROJECT_EXACT_H
#define TESSERA_REPROJECT_EXACT_H

#include <stddef.h>
#include "reproject/plane.h"
#include "reproject/skywcs.h"

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

#endif
