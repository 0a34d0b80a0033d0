/* Reprojection of one image plane from one celestial WCS onto another. */
#ifndef TESSERA_REPROJECT_REPROJECT_H
#define TESSERA_REPROJECT_REPROJECT_H

#include <stddef.h>
#include "reproject/skywcs.h"

typedef enum { RP_NEAREST, RP_BILINEAR } rp_method;

int rp_method_parse(const char *s, rp_method *m);   /* "nearest", "bilinear"; 0 or TESS_EINVAL */
const char *rp_method_name(rp_method m);

/* Reprojects `src` (in_nx x in_ny doubles, row-major, row 0 = FITS row 1, NaN = no data)
 * on the 2-D celestial WCS `in` onto the out_nx x out_ny grid of the 2-D celestial WCS
 * `out`, writing `dst` (same layout).  Frames are converted (sky_convert) when `in` and
 * `out` differ.  Each output pixel centre is mapped to the input pixel grid, then
 * sampled as astropy reproject's reproject_interp does: samples are valid within
 * [-0.5, n-0.5] on each axis (edge pixels extended), NaN beyond; a position whose
 * round trip (out -> in -> out) misses by more than one pixel is NaN.
 * nearest: value at (floor(x+0.5), floor(y+0.5)); bilinear: the usual four-point
 * interpolation of the edge-padded array.
 * max_coord_error: bound, in output pixels, on the error of the coordinate grid: exact
 * transforms on a coarse grid (a node every 16 output pixels), cubic (4-point Lagrange)
 * interpolation between nodes, cells whose interpolation misses the exact transform at
 * their centre and edge midpoints by more than the bound / 32 (the error being taken in
 * input and in output pixels, whichever is larger), or that touch an invalid node, are
 * transformed exactly; interpolated positions next to a sampling decision (the edges
 * of the valid range, nearest's rounding boundaries) are transformed exactly too;
 * 0 = exact transform at every pixel.
 * `in` and `out` are not modified (the call works on its own copies) so one skywcs may be
 * shared by concurrent calls.
 * A WCS with more than two axes is reduced to its celestial pair (skywcs_celestial).
 * Returns the number of output pixels with a finite value (>= 0), or TESS_EINVAL
 * (non-celestial WCS or unsupported frame, bad sizes, max_coord_error < 0 or not
 * finite), TESS_ENOMEM; `err` says why. */
long reproject_plane(const skywcs *in, const double *src, long in_nx, long in_ny,
                     const skywcs *out, long out_nx, long out_ny,
                     rp_method method, double max_coord_error,
                     double *dst, char *err, size_t errlen);

#endif
