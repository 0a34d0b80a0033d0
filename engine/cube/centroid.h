/* Robust statistics of a frame: its median, and the centroid of its object above the background. */
#ifndef TESSERA_ENGINE_CUBE_CENTROID_H
#define TESSERA_ENGINE_CUBE_CENTROID_H

#include <stddef.h>

/* The median of the finite values among the m of a (numpy.percentile's 50th, linear
 * between the two middle values; by engine/image/render.h's quickselect, O(m)); 0 when
 * none is finite (render_resolve_cuts' rule), NaN when memory is short.  a is not
 * changed. */
double cube_median(const double *a, size_t m);

/* The centroid of the object in frame v (nx x ny values, row y = v + y * nx, x and y
 * 0-based pixel indices with pixel centres on integers; NaN values skipped):
 *   b = the median of the finite pixels (cube_median), s = 1.4826 MAD (the median of
 *   |v - b|, scaled to a Gaussian's sigma), threshold t = b + 3 s;
 *   cx = sum(w x) / sum(w), cy = sum(w y) / sum(w), w = v - b, over the pixels with
 *   v > t: the barycentre of the background-subtracted pixels above a detection
 *   threshold, as SExtractor measures one (Bertin & Arnouts 1996, A&AS 117, 393);
 *   over the pixels with v > b when none is above t; (nx / 2, ny / 2) (the frame
 *   centre) when none is above b (a frame without a finite value among them) or
 *   the statistics cannot be had.
 * A plain intensity centroid counts the background too, which pulls it towards the
 * middle of the frame.  `scratch` holds nx * ny values (overwritten).  Writes *cx, *cy
 * in pixels.  Cannot fail. */
void cube_centroid(const double *v, long nx, long ny, double *scratch, double *cx, double *cy);

/* cube_centroid of a frame of 8-bit values (row y = v + y * nx), the same cx and cy to
 * the last bit (its sums are exact), from integer sums and a 256-bin histogram, without
 * a copy as doubles or scratch.  Cannot fail. */
void cube_centroid_u8(const unsigned char *v, long nx, long ny, double *cx, double *cy);

#endif
