/* Encoders of pixel arrays to response bytes: PNG (libpng), JPEG (libjpeg), FITS (engine/fits/fitswrite), NPY. */
#ifndef TESSERA_ENGINE_IMAGE_ENCODE_H
#define TESSERA_ENGINE_IMAGE_ENCODE_H

#include <stdint.h>
#include <stddef.h>

/* Encodes w x h RGBA pixels (row 0 at the top) as a PNG: 8-bit grey+alpha (colour type
 * 4) when every pixel is grey (red = green = blue: renderings through the grey map),
 * 8-bit RGBA (colour type 6) otherwise; never a palette.  Either decodes to exactly the
 * given values (grey+alpha expanded to RGBA gives them back).  On success
 * *out is malloc'd (caller frees) and 0 is returned; TESS_ENOMEM or TESS_EINVAL
 * otherwise, with *out NULL. */
int png_encode_rgba(const uint8_t *rgba, long w, long h, unsigned char **out, size_t *outlen);

/* Encodes w x h greyscale samples (row 0 at the top) as a PNG of bit depth `bits`: 8
 * (`samples` are bytes) or 16 (little-endian byte pairs), values as given,
 * zlib level 1.  On success *out is malloc'd (caller frees) and 0 is returned;
 * TESS_EINVAL (bits not 8 or 16, bad size) or TESS_ENOMEM otherwise, with *out NULL. */
int png_encode_grey(const void *samples, long w, long h, int bits, unsigned char **out,
                    size_t *outlen);

/* Encodes w x h RGBA pixels (row 0 at the top) as a baseline 8-bit RGB JPEG (JFIF,
 * 4:2:0 chroma subsampling), or greyscale (one component) when every pixel is grey, of
 * `quality` 1..100 (libjpeg's scale).  JPEG has no alpha:
 * each colour is composited over black (c * alpha / 255), so transparent pixels (NaN,
 * off-footprint) come out black.  w and h must be 1..65500 (JPEG_MAX_DIMENSION).  On
 * success *out is malloc'd (caller frees) and 0 is returned; TESS_EINVAL (bad size or
 * quality) or TESS_ENOMEM otherwise, with *out NULL. */
int jpeg_encode_rgb(const uint8_t *rgba, long w, long h, int quality, unsigned char **out,
                    size_t *outlen);

/* Encodes a w x h x nz array of doubles (x fastest, then y with row 0 = FITS row 1,
 * then z) as a single-HDU FITS file with BITPIX -64, NAXIS 2 (nz == 1) or 3, NaN kept.
 * `cards` (ncards 80-character cards, concatenated, may be NULL) are copied into the
 * header except the structural keywords (fitscard_is_structural: SIMPLE, BITPIX, NAXIS*,
 * EXTEND, BSCALE, BZERO, BLANK, EXTNAME, DATAMIN, DATAMAX, ...) — pass the WCS of the
 * result there.  If `footprint` is not NULL a second
 * HDU, an image extension named FOOTPRINT of the same shape (w x h, BITPIX -64), holds
 * it.  On success *out is malloc'd and 0 returned; TESS_E* otherwise. */
int fits_encode_f64(const double *data, long w, long h, long nz,
                    const char *cards, int ncards, const double *footprint,
                    unsigned char **out, size_t *outlen);

/* Encodes a w x h array of doubles as a NumPy .npy (format 1.0, dtype '<f8',
 * shape (h, w), C order: row 0 = FITS row 1 as numpy/astropy read it).  On success
 * *out is malloc'd and 0 returned; TESS_EINVAL (no data, w or h below 1) or
 * TESS_ENOMEM otherwise, with *out NULL. */
int npy_encode_f64(const double *data, long w, long h, unsigned char **out, size_t *outlen);

/* The same for a 1-D array of n >= 0 doubles (shape (n,)); data may be NULL when n is
 * 0.  Returns 0 (*out malloc'd), TESS_EINVAL (n negative) or TESS_ENOMEM. */
int npy_encode_f64_1d(const double *data, long n, unsigned char **out, size_t *outlen);

#endif
