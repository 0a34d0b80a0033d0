/* Cubic B-spline coefficients of a plane for bicubic sampling (engine-internal: kernels.c). */
#ifndef TESSERA_ENGINE_SKY_BSPLINE_H
#define TESSERA_ENGINE_SKY_BSPLINE_H

#include "engine/sky/plane.h"

/* Computes the coefficients of scipy's order-3 spline of plane p (scipy
 * ndimage.spline_filter(padded, order=3, mode='mirror') of p edge-padded by one pixel;
 * docs/DESIGN.md "Kernel definitions"):
 *   *coef  (nx + 2) x (ny + 2) doubles, row-major, padded pixel (i, j) at
 *          j * (nx + 2) + i, image pixel (i, j) at padded (i + 1, j + 1); missing
 *          (non-finite) pixels are first filled from their neighbours;
 *   *bad   NULL when every pixel is finite, else (nx + 2) x (ny + 2) bytes: 1 at
 *          (sy + 1) * (nx + 2) + sx + 1 where the 4x4 support starting at padded
 *          (sx, sy), sx in [-1, nx], sy in [-1, ny], touches a missing pixel.
 * Both are the caller's, to free().  Needs nx, ny >= 1 and (nx + 2)(ny + 2) doubles
 * addressable.  Returns 0, or -1 when out of memory (then *coef and *bad are NULL). */
int rp_bspline_prepare(const rp_plane *p, double **coef, unsigned char **bad);

/* rp_bspline_prepare with the coefficients stored as floats: *coef gets (nx + 2) x
 * (ny + 2) floats in the same layout, each rp_bspline_prepare's double coefficient
 * rounded to nearest once (relative error <= u = 2^-24; the prefilter's arithmetic is
 * double throughout), *bad the same mask.  Half the memory (67 MB for a 4096^2 plane).
 * Magnitudes: the prefilter is the separable filter h(k) = sqrt(3) z^|k|, z = sqrt(3) - 2,
 * per axis (Unser 1999, Box 2: 6 / (z^-1 + 4 + z) expanded), whose absolute sum is
 * sqrt(3) (1 + |z|) / (1 - |z|) = 3, so |coefficient| <= 9 max |pixel| (a
 * checkerboard reaches it), and a coefficient of a float32 plane never overflows a float
 * unless pixels lie within a factor 9 of FLT_MAX.  Working memory: a ring of 128 rows of
 * doubles (4.2 MB for nx = 4096) beside the result; a plane with a missing pixel takes
 * the double path first ((nx + 2) (ny + 2) doubles for a while).  Returns 0, or -1 when
 * out of memory (then *coef and *bad are NULL); the caller frees both with free(). */
int rp_bspline_prepare_f32(const rp_plane *p, float **coef, unsigned char **bad);

/* Index p of a padded axis of length len (>= 3) mirrored into [0, len - 1] for p within
 * one of the ends (scipy's mirror rule: -1 -> 1, len -> len - 2).  Cannot fail. */
static inline long mirror1(long p, long len)
{
    return p < 0 ? -p : p >= len ? 2 * len - 2 - p : p;
}

/* Clamps i into [0, n - 1].  Cannot fail. */
static inline long clampl(long i, long n)
{
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

#endif
