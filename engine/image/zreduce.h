/* Reductions of a volume along z: the op set, the image along z, the value of each plane,
 * and the header of the result.  GET .../reduce and the reduce job both go through here. */
#ifndef TESSERA_ENGINE_IMAGE_ZREDUCE_H
#define TESSERA_ENGINE_IMAGE_ZREDUCE_H

#include <stddef.h>

#include "engine/base/pool.h"
#include "engine/image/stack.h"

/* The op set is stack_zop (engine/image/stack.h, whose kernels fold the planes): mean,
 * sum, min, max, std, NaN-aware as numpy's nanmean / nansum / nanmin / nanmax / nanstd
 * (ddof 0) of the physical values.  Blanks (BLANK, NaN) are skipped; a pixel (axis z) or
 * a plane (axis xy) without a value gives NaN, 0 for sum.  Volumes follow stack.h:
 * 0-based x (NAXIS1), y (NAXIS2, y = 0 is FITS row 1), z (plane or frame). */

/* "mean", "sum", "min", "max", "std"; "?" for a value outside the set.  Cannot fail. */
const char *zreduce_op_name(stack_zop op);

/* The op named `s` (exactly one of the names above).  Returns 0, or TESS_EINVAL for NULL
 * or any other text (*op untouched). */
int zreduce_op_parse(const char *s, stack_zop *op);

/* What is reduced: along z at each pixel (an nx x ny image), or over each plane (nz
 * values). */
typedef enum { ZREDUCE_AXIS_Z = 0, ZREDUCE_AXIS_XY = 1 } zreduce_axis;

/* "z", "xy"; "?" outside the set.  Cannot fail. */
const char *zreduce_axis_name(zreduce_axis axis);

/* The axis named `s` ("z" or "xy").  Returns 0, or TESS_EINVAL (*axis untouched). */
int zreduce_axis_parse(const char *s, zreduce_axis *axis);

/* ---- z-ranges ------------------------------------------------------------------------ */

/* The planes 0..nz-1 (nz >= 1) are cut into zreduce_nranges(nz) ranges (at most 16) of
 * ceil(nz / 16) planes, the last one shorter; range k is [*z0, *z1).  Axis z folds each
 * range into a partial (stack_zreduce) and merges the partials in z order, one after
 * the other into the first (stack_zpart_merge); the endpoint does it on threads
 * (zreduce_image), the job as one block a range, so both give the same bits whatever
 * ran where.  Cannot fail (k is 0 <= k < zreduce_nranges(nz)). */
long zreduce_nranges(long nz);
void zreduce_range(long nz, long k, long *z0, long *z1);

/* ---- axis z -------------------------------------------------------------------------- */

/* The image along z of the nx x ny x nz volume `s` (nz as given to stack_new):
 * out[y * nx + x] (nx*ny doubles) reduces v(x, y, 0..nz-1).  The ranges above are
 * claimed by the calling thread and by up to min(pool_threads, 8, ranges) - 1 helper
 * tasks queued on `workers` at priority `prio` (NULL: the calling thread does every
 * range); a helper that starts when no range is left returns at once, so the call never
 * waits on a range that nobody runs.  Partials are merged as soon as every earlier range
 * is in, so about one partial per thread is held at a time (2 to 20 bytes a pixel).
 * `cancel` (may be NULL) is polled before each range and by stack_zreduce within it.
 * Returns 0, TESS_ECANCELED, TESS_ENOMEM, or a read error of stack_zreduce (TESS_EIO...)
 * with `err`. */
int zreduce_image(stack *s, long nz, stack_zop op, pool *workers, pool_priority prio,
                  const volatile int *cancel, double *out, char *err, size_t errlen);

/* ---- axis xy ------------------------------------------------------------------------- */

/* The reduction of the n values v[0..n-1], as numpy's nan-function of them (std two-pass:
 * the mean, then the mean squared deviation).  Cannot fail. */
double zreduce_values(stack_zop op, const double *v, size_t n);

/* out[k] = the reduction of plane z0 + k of the nx x ny x nz volume `s` over its nx*ny
 * pixels, for z0 <= z0 + k < z1: an 8/16-bit plane straight from the frame in exact
 * integers (stack_reduce_plane), any other read as doubles (stack_read_region) and
 * reduced by zreduce_values.  `cancel` (may be NULL) is polled before each plane.
 * Returns 0, TESS_ECANCELED, TESS_ENOMEM, TESS_ERANGE (planes outside 0..nz-1, a plane
 * whose size overflows: engine/base/checked.h) or a read error (TESS_EIO) with `err`. */
int zreduce_planes(stack *s, long nx, long ny, long nz, stack_zop op, long z0, long z1,
                   const volatile int *cancel, double *out, char *err, size_t errlen);

/* ---- the header of the result -------------------------------------------------------- */

/* What the result of a reduction keeps of its source's header, by keyword class:
 *  ZREDUCE_CARD_WCS: the WCS of image axes 1 and 2 -- CTYPEi CUNITi CRVALi CRPIXi CDELTi
 *    CROTAi CNAMEi CRDERi CSYERi (i = 1, 2), PCi_j CDi_j (i, j = 1, 2), PVi_m PSi_m
 *    (i = 1, 2) -- and the keys of its celestial frame (RADESYS, RADECSYS, EQUINOX,
 *    EPOCH, LONPOLE, LATPOLE).  The image along z has the source's pixel grid, so the
 *    WCS of that grid stays true of it; the cards of axis 3 and beyond, WCSAXES, and any
 *    PC/CD term coupling axes 1-2 to another go (axes 1-2 then get the world coordinates
 *    they have at the reference pixel of the other axes).  For a celestial pair on axes
 *    1-2 this is the 2-D WCS skywcs_celestial takes out (which refuses coupled axes),
 *    kept as the source's own cards rather than rewritten by wcslib.  Only the primary
 *    WCS: an alternate one (CTYPE1A...) would need its own frame keys.
 *  ZREDUCE_CARD_OBS: what was observed and when: OBJECT, TELESCOP, INSTRUME, DATE-OBS,
 *    MJD-OBS.
 *  ZREDUCE_CARD_BUNIT: BUNIT; every op of the set gives values in the source's unit.
 *  ZREDUCE_CARD_OTHER: everything else is dropped, because it may no longer be true of
 *    the result: the spectral or time axis's keys (RESTFRQ, SPECSYS, VELREF...), data
 *    statistics (DATAMIN, DATAMAX), checksums, scaling and BLANK, HISTORY and COMMENT.
 * A transform along z at each pixel whose values are not in the source's unit (a power
 * spectrum) would keep WCS and OBS only. */
typedef enum {
    ZREDUCE_CARD_OTHER = 0,
    ZREDUCE_CARD_WCS,
    ZREDUCE_CARD_OBS,
    ZREDUCE_CARD_BUNIT
} zreduce_card;

/* The class of the 80-character `card` (its keyword in columns 1-8).  Cannot fail. */
zreduce_card zreduce_card_class(const char *card);

/* The header cards of the result of `op` along `axis` over the volume whose header is
 * `src` (nkeys 80-character cards, concatenated, as fitsimg_info.header; may be NULL when
 * nkeys is 0) and whose name is `source`:
 *   the source's cards, in their order, of class WCS (axis z only: an axis=xy result is
 *   one value per plane, no spatial axis is left), OBS and BUNIT; then
 *   REDUCEOP= 'mean    '           / NaN-aware reduction along axis z
 *   REDSRC  = 'l1448_13co'         / dataset reduced
 * (quotes in `source` doubled, cut to fit the card).  No structural card (SIMPLE, BITPIX,
 * NAXISn, EXTEND), which the FITS writer adds for the result's shape: BITPIX -64, the
 * image (nx, ny) for axis z, (nz, 1) for axis xy.  *cards is malloc'd (concatenated,
 * NUL-terminated; the caller frees) and *ncards set.  Returns 0 or TESS_ENOMEM. */
int zreduce_header(const char *src, int nkeys, stack_zop op, zreduce_axis axis,
                   const char *source, char **cards, int *ncards, char *err, size_t errlen);

#endif
