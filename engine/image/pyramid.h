/* Resolution pyramid of a plane: each level the 2x2 means of the finite pixels of the level below. */
#ifndef TESSERA_ENGINE_IMAGE_PYRAMID_H
#define TESSERA_ENGINE_IMAGE_PYRAMID_H

#include <stdint.h>
#include "engine/sky/plane.h"

/* Levels.  Level 0 is the plane itself, NX x NY pixels of either rp_dtype.  Level k > 0
 * is the plane reduced by 2^k on both axes: pixel (i, j) is the mean of the finite
 * pixels of the 2^k x 2^k block of level 0 at (i 2^k, j 2^k) (blocks at the right and
 * top edges are partial), NaN when none is finite; nx = ceil(NX / 2^k),
 * ny = ceil(NY / 2^k); the dtype of level 0; row 0 = FITS row 1.  Level k + 1 is made
 * from level k: a pixel is the mean of its (up to) 2 x 2 children weighted by their
 * counts of finite level-0 pixels, summed in double in the order (2i, 2j), (2i+1, 2j),
 * (2i, 2j+1), (2i+1, 2j+1) and rounded once to the dtype, so that the server's reduced
 * planes and `tessera hips` agree to the bit.  Counts are uint32: a plane of 2^32
 * pixels or more has no pyramid. */

#define PYRAMID_MAX_LEVEL 30

/* The level at which an nx x ny plane is 1 x 1: ceil(log2(max(nx, ny))), at most
 * PYRAMID_MAX_LEVEL.  Cannot fail. */
int pyramid_top_level(long nx, long ny);

/* Makes level kb + 1 from `src`, level kb (>= 0) of a plane whose level 0 is nx0 x ny0
 * pixels.  `counts` holds the finite level-0 pixels under each pixel of src
 * (src->nx * src->ny values), or is NULL: at kb = 0 a pixel then counts 1 when finite
 * and 0 when not; at kb > 0 NULL says that every level-0 pixel is finite, and a pixel
 * counts the level-0 pixels of its block.  *dst receives the reduced plane (dst->data
 * malloc'd, the caller frees it) and, when dst_counts is not NULL, *dst_counts its
 * counts (malloc'd, the caller frees them).  Returns 0 or TESS_ENOMEM (nothing
 * allocated, *dst zeroed). */
int pyramid_reduce(const rp_plane *src, const uint32_t *counts, int kb, long nx0, long ny0,
                   rp_plane *dst, uint32_t **dst_counts);

/* Level `level` (1 .. pyramid_top_level(p0->nx, p0->ny)) of the level-0 plane p0, made
 * level by level with pyramid_reduce: *out receives it (out->data malloc'd, the caller
 * frees it).  Returns 0, or TESS_EINVAL (level out of range) / TESS_ENOMEM, with *out
 * zeroed. */
int pyramid_level(const rp_plane *p0, int level, rp_plane *out);

#endif
