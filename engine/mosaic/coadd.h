/* Combining reprojected images pixel by pixel: the coadd of a mosaic job's bands and of
 * any grid made on demand from several images (engine/mosaic/mosaic.h, mos_combine).
 *
 * An accumulator holds `capacity` output pixels (row-major, index 0-based); images are
 * added row by row, each value v with its weight w (w = 1 for interpolation where the
 * reprojection is finite, the covered fraction for flux-conserving methods) and its
 * background correction P(x) = base + slope * x (x the output column, 0-based) taken
 * off first.  A value counts where w > 0 and v is finite.  The result at a pixel with
 * summed weight W > 0 is, for the values v_k - P_k in the order added:
 *   MEAN   sum(w v) / W      SUM    sum(w v)
 *   MEDIAN median (mean of the two middle values for an even count; unweighted)
 *   MIN, MAX   extremes      FIRST, LAST  the first / last added
 * and NaN where W = 0.  Sums are in double, each term w * (v - P) as astropy reproject's
 * reproject_and_coadd forms it (array * weight, summed in input order).
 * Memory: 16 bytes a pixel, plus for MEDIAN 4 bytes a pixel and 4 bytes a pixel for
 * each of the at most `max_inputs` images added between resets. */
#ifndef TESSERA_ENGINE_MOSAIC_COADD_H
#define TESSERA_ENGINE_MOSAIC_COADD_H

#include <stddef.h>
#include <stdint.h>
#include "engine/mosaic/mosaic.h"

typedef struct mos_accum {
    mos_combine combine;
    size_t capacity;      /* pixels */
    int max_inputs;       /* images between resets (MEDIAN's lists) */
    size_t np;            /* pixels in use since the last reset */
    double *acc;          /* sum(w v), or the extreme / first / last value */
    double *accw;         /* sum(w) */
    float *list;          /* MEDIAN: max_inputs values a pixel */
    int *cnt;             /* MEDIAN: values in each pixel's list */
    size_t clean;         /* MEAN, SUM: pixels 0 .. clean - 1 hold +0.0 sums (nothing
                           * added since mos_accum_take_be cleared them) */
} mos_accum;

/* Bytes an accumulator of `pixels` pixels takes (see above). */
double mos_accum_bytes(mos_combine combine, size_t pixels, int max_inputs);

/* Allocates an accumulator for `capacity` pixels (>= 1) and up to max_inputs (>= 1)
 * images between resets, reset for `capacity` pixels.  Returns 0, TESS_EINVAL or
 * TESS_ENOMEM (nothing left allocated). */
int mos_accum_init(mos_accum *a, mos_combine combine, size_t capacity, int max_inputs);

/* Starts over for the first np pixels (np <= capacity): nothing added. */
void mos_accum_reset(mos_accum *a, size_t np);

/* Adds n values of one image's row at pixels o .. o + n - 1: v[x] with weight w[x]
 * (w NULL: weight 1), less base + slope * (x0 + x).  Each image is added at most once
 * per pixel between resets, and at most max_inputs images between resets. */
void mos_accum_add(mos_accum *a, size_t o, const float *v, const float *w, long n,
                   double base, double slope, long x0);

/* The same for a row of doubles (a HiPS tile rendered by hips_render_tile): the same
 * arithmetic, in double from the start (one body with mos_accum_add, coadd.c). */
void mos_accum_add_d(mos_accum *a, size_t o, const double *v, const double *w, long n,
                     double base, double slope, long x0);

/* The combined values as doubles (NaN where nothing counted); cov may be NULL. */
void mos_accum_result_d(mos_accum *a, double *out, double *cov);

/* The combined values (NaN where nothing counted) and the summed weights of the np
 * pixels in use, as float32; cov may be NULL.  Sorts MEDIAN's lists in place. */
void mos_accum_result(mos_accum *a, float *out, float *cov);

/* mos_accum_result written as FITS stores it: out and cov (cov may be NULL) get np
 * 4-byte big-endian IEEE float32 values each (BITPIX = -32), the same values in one pass
 * for MEAN and SUM.  Sorts MEDIAN's lists in place.  out and cov need 4-byte alignment.
 * sums (may be NULL): sums[0] and sums[1] get the ones' complement sums of the words
 * written to out and cov added (fitswrite_sum32, FITS 4.0 appendix J: parts of the
 * DATASUMs, computed in the same pass for MEAN and SUM). */
void mos_accum_result_be(mos_accum *a, void *out, void *cov, uint32_t sums[2]);

/* mos_accum_result_be, leaving the accumulator as mos_accum_reset(a, a->np) does: for
 * MEAN and SUM the sums are cleared in the same pass, so that a following
 * mos_accum_reset to at most as many pixels has nothing left to clear (a coadd's row
 * groups: one pass over the accumulator a group less). */
void mos_accum_take_be(mos_accum *a, void *out, void *cov, uint32_t sums[2]);

/* Frees the buffers (a zeroed or freed accumulator is fine). */
void mos_accum_free(mos_accum *a);

#endif
