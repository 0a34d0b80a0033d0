/* FITS headers read for the frames of a stack: the fast path of a plain primary header, and any HDU through cfitsio. */
#ifndef TESSERA_ENGINE_FITS_FITSHEAD_H
#define TESSERA_ENGINE_FITS_FITSHEAD_H

#include <stddef.h>
#include <stdint.h>

/* The primary header of a plain FITS image, parsed here rather than by cfitsio, whose
 * opening of a file (fopen, a read for its compression check, realpath, under the
 * global cfitsio lock) was a tenth of a reduction over a stack of 1 MB frames.  Reads
 * SIMPLE = T, BITPIX, NAXIS, NAXISn (the first 4: naxes has FITSIMG_MAXDIM entries,
 * those past NAXIS set to 1), BSCALE, BZERO, BLANK (first occurrences, as fits_read_key;
 * the caller presets *bscale 1, *bzero 0, *has_blank 0) up to END; *datastart is the
 * byte where the data start, the next 2880-byte block.  Values are read by
 * fitscard_number (engine/fits/fitscard.h).  Returns 1 with the fields set, or 0 for
 * anything else (no SIMPLE = T first, random groups, NAXIS < 2, an unparsable value, no
 * END in the first 100 blocks, a file that cannot be read): the caller then reads the
 * file through cfitsio.  *hhash receives the FNV-1a 64 hash of the header blocks read
 * (the whole header, END's block included). */
int fitshead_plain(const char *path, int *bitpix, int *naxis, long *naxes,
                   long long *datastart, double *bscale, double *bzero, int *has_blank,
                   long long *blank, uint64_t *hhash);

/* The image parameters of HDU `hdu` (0-based) of `path` through cfitsio (any FITS file:
 * extensions, tile-compressed images; not a whole-file compressed one,
 * fitsimg_check_not_compressed): *compressed (a tile-compressed image), BITPIX, NAXIS,
 * the first FITSIMG_MAXDIM NAXISn, the byte where the data start, BSCALE (1 when
 * absent), BZERO (0), BLANK (integer images; *has_blank set when present).  Returns 0
 * or TESS_EIO / TESS_EINVAL with err. */
int fitshead_image_params(const char *path, int hdu, int *compressed, int *bitpix, int *naxis,
                          long *naxes, long long *datastart, double *bscale, double *bzero,
                          int *has_blank, long long *blank, char *err, size_t errlen);

/* The FNV-1a 64 hash of the header of HDU `hdu` (0-based) through cfitsio: its bytes
 * from the HDU's start to its data, read from the descriptor cfitsio was given.  For
 * hdu 0 of a plain image it equals fitshead_plain's *hhash.  Returns 0 or TESS_EIO /
 * TESS_EINVAL with err. */
int fitshead_hash(const char *path, int hdu, uint64_t *hash, char *err, size_t errlen);

#endif
