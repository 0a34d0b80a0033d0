/* Writing FITS files and memory buffers through cfitsio: image HDUs with given cards, binary tables, big-endian data. */
#ifndef TESSERA_ENGINE_FITS_FITSWRITE_H
#define TESSERA_ENGINE_FITS_FITSWRITE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/fits/fitsimg.h"

/* An image HDU to write.  Its header is cfitsio's: SIMPLE (or XTENSION 'IMAGE'),
 * BITPIX, NAXIS, NAXISn, EXTEND (primary) or PCOUNT/GCOUNT, and in a primary HDU the two
 * COMMENT cards citing the FITS paper (2001A&A...376..359H); then for `u16` cfitsio's
 * BZERO = 32768 and BSCALE = 1 (integers, with its comments); then in this order BSCALE
 * and BZERO when `scaled`, EXTNAME when given, and the `cards`, except the structural
 * ones (fitscard_is_structural) and copies of those two COMMENT cards. */
typedef struct fitswrite_image {
    int bitpix;                    /* 8, 16, 32, 64, -32, -64 */
    int naxis;                     /* 1..FITSIMG_MAXDIM */
    long naxes[FITSIMG_MAXDIM];    /* NAXISn, FITS order: naxes[0] = NAXIS1 (x, fastest) */
    int scaled;                    /* 1: BSCALE = bscale and BZERO = bzero are written
                                      (physical = BZERO + BSCALE x stored, FITS 4.0
                                      section 4.4.2.5; BZERO 32768 for unsigned 16-bit) */
    double bscale, bzero;
    int u16;                       /* 1 with BITPIX 16 and `scaled` 0: unsigned 16-bit
                                      values 0..65535, stored as cfitsio's USHORT_IMG
                                      (value - 32768); data are then encoded with
                                      fitswrite_encode(16, 32768, ...) */
    const char *extname;           /* EXTNAME value, or NULL for none */
    const char *extname_comment;   /* its comment, or NULL */
    const char *cards;             /* ncards 80-character cards (concatenated), or NULL */
    int ncards;
} fitswrite_image;

/* A FITS file or buffer being written: a cfitsio handle.  While one is open, the
 * calling thread holds the cfitsio lock (fitsimg_cfitsio_lock): it must call no other
 * engine/fits function before fitswrite_close or fitswrite_take.  Not thread-safe. */
typedef struct fitswrite fitswrite;

/* A new FITS file in memory, growing by realloc from `size_hint` bytes (a good hint
 * avoids copies; 0 gives 64 blocks).  Returns 0 and *out, or TESS_ENOMEM / TESS_EIO. */
int fitswrite_new_mem(size_t size_hint, fitswrite **out);

/* A new FITS file at `path` (a plain file name, no cfitsio filename syntax; an existing
 * file is replaced).  Returns 0 and *out, or TESS_EIO / TESS_ENOMEM with `err`. */
int fitswrite_new_file(const char *path, fitswrite **out, char *err, size_t errlen);

/* The existing FITS file at `path`, opened to append HDUs after its last one.  Returns 0
 * and *out, or TESS_EIO / TESS_ENOMEM with `err`. */
int fitswrite_open_file(const char *path, fitswrite **out, char *err, size_t errlen);

/* The number of HDUs written so far (or found in an opened file), 0 on error. */
int fitswrite_nhdu(fitswrite *w);

/* Appends the image HDU `im` (the primary HDU when it is the first); `data` holds
 * naxes[0] x naxes[1] x ... values in FITS order (x fastest, row 0 = FITS row 1),
 * converted by cfitsio to BITPIX (and to stored values when scaled), or is NULL to leave
 * the data unit to the caller (fitswrite_file).  Returns 0, TESS_EINVAL (a bad shape, or
 * a card cfitsio refuses), TESS_ENOMEM or TESS_EIO, with `err`. */
int fitswrite_image_hdu(fitswrite *w, const fitswrite_image *im, const double *data,
                        char *err, size_t errlen);

/* A column of a binary table: TTYPE, TFORM ("1J" 32-bit integers from longs, "1K" 64-bit,
 * "1D" doubles, "1E" floats), TUNIT ("" or NULL for none), and nrows values. */
typedef struct fitswrite_column {
    const char *name;
    const char *form;
    const char *unit;
    const long *ivalues;           /* the values of an integer column, else NULL */
    const double *dvalues;         /* the values of a real column, else NULL */
} fitswrite_column;

/* Appends a binary table extension (FITS 4.0, section 7.3) named `extname`, of nrows
 * rows and ncols columns, then the `cards` (ncards 80-character cards, or NULL) after
 * cfitsio's own.  Returns 0, TESS_EINVAL (a card or column refused), TESS_ENOMEM or
 * TESS_EIO, with `err`. */
int fitswrite_table_hdu(fitswrite *w, const char *extname, long nrows, int ncols,
                        const fitswrite_column *cols, const char *cards, int ncards,
                        char *err, size_t errlen);

/* Every HDU written here carries CHECKSUM and DATASUM (the FITS checksum convention,
 * FITS 4.0 appendix J): fitswrite_take sets them; a file (fitswrite_new_file,
 * fitswrite_open_file, fitswrite_file) gets the two cards with placeholder values, set by
 * fitswrite_checksum_file once its data are written. */

/* Ends a file in memory: *out (malloc'd, caller frees) holds the whole file, *outlen
 * bytes, with CHECKSUM and DATASUM set in every HDU, and `w` is freed.  Returns 0, or TESS_ENOMEM / TESS_EIO with *out NULL (w
 * freed all the same). */
int fitswrite_take(fitswrite *w, unsigned char **out, size_t *outlen);

/* Closes (and for a file, flushes) `w` and frees it; a buffer in memory is discarded
 * (then 0 is returned).  NULL is ignored.  Returns 0 or TESS_EIO with `err` (the file may
 * then be incomplete). */
int fitswrite_close(fitswrite *w, char *err, size_t errlen);

/* *len: the bytes of the file in memory fitswrite_image_hdu and fitswrite_take make of
 * the one image HDU `im`, found without its data: its header, written the same way for
 * an image of one pixel, and its data unit in whole blocks.  Returns 0, TESS_EINVAL
 * (`im` is not an image shape) or TESS_ENOMEM with `err`. */
int fitswrite_image_length(const fitswrite_image *im, size_t *len, char *err, size_t errlen);

/* Creates `path` (replacing it) holding the one image HDU `im` with a data unit of
 * zeros, sized to whole blocks without being written (a sparse file where the file
 * system allows), and returns in *datastart the byte offset of that data unit, where
 * the caller writes values encoded by fitswrite_encode.  Returns 0, TESS_EINVAL or
 * TESS_EIO with `err`. */
int fitswrite_file(const char *path, const fitswrite_image *im, long long *datastart,
                   char *err, size_t errlen);

/* Encodes n values as the stored values of a data unit of `bitpix` with offset `bzero`
 * (BSCALE 1): big-endian (FITS 4.0, section 5.2), integers rounded (lrint of v - bzero:
 * 8 unsigned, 16, 32 and 64 two's complement), -32 and -64 IEEE floats.  dst holds
 * n * |bitpix| / 8 bytes.  Values outside the stored type's range are the caller's to
 * avoid.  Cannot fail. */
void fitswrite_encode(int bitpix, double bzero, const double *v, unsigned char *dst, long n);

/* Sets CHECKSUM and DATASUM of every HDU of a whole FITS file: in memory (`fits`, `len`
 * bytes, a whole number of blocks) or at `path` (updated in place).  Each header is
 * read up to END; cards missing are put before END when its last block has room.
 * DATASUM is the 32-bit ones' complement sum of the data unit (padding included, as a
 * decimal string) and CHECKSUM the encoded complement of the sum of the HDU, so that
 * every HDU sums to -0.  Uses no cfitsio handle (no lock): callable from any thread.
 * Returns 0, or TESS_EINVAL (not FITS, a header without room), TESS_ENOMEM, TESS_EIO
 * (file), with `err` (may be NULL). */
int fitswrite_checksum_mem(unsigned char *fits, size_t len, char *err, size_t errlen);
int fitswrite_checksum_file(const char *path, char *err, size_t errlen);

/* The 32-bit ones' complement sum (FITS 4.0 appendix J; Seaman, Pence & Rots, "FITS
 * Checksum Proposal", 2002) of n bytes at p as stored in a file (big-endian 32-bit
 * words; n a multiple of 4, a trailing remainder is ignored), added to `sum` (0 to
 * start): the DATASUM of a data unit summed piece by piece.  Pieces that start at
 * multiples of 4 bytes from the data unit's start may be summed apart (on several
 * threads, in any order) and combined with fitswrite_sum_add; zero padding adds nothing.
 * Cannot fail. */
uint32_t fitswrite_sum32(const void *p, size_t n, uint32_t sum);
/* fitswrite_sum32 of n bytes at p that lie at byte `offset` of a data unit, whatever
 * the offset and length: the sum of the data unit's 32-bit words with every byte outside
 * [offset, offset + n) taken as zero, added to `sum`.  Pieces summed this way combine
 * with fitswrite_sum_add into the DATASUM of the whole (each byte in one piece), in any
 * order: e.g. rows of a BITPIX 8 image finished by different threads.  Cannot fail. */
uint32_t fitswrite_sum32_at(const void *p, size_t n, unsigned long long offset, uint32_t sum);
/* The ones' complement sum of two such partial sums. */
uint32_t fitswrite_sum_add(uint32_t a, uint32_t b);

/* fitswrite_checksum_file for a file whose first `nknown` HDUs have data units already
 * summed by the caller: datasum[i] (fitswrite_sum32 over HDU i's whole data unit, its
 * padding included) is taken as that HDU's DATASUM and its data unit is not read; the
 * headers are read and updated as there, and HDUs after the first nknown are summed
 * from the file.  The result is the same file fitswrite_checksum_file makes when the
 * sums are right.  Returns as fitswrite_checksum_file. */
int fitswrite_checksum_file_sums(const char *path, const uint32_t *datasum, int nknown,
                                 char *err, size_t errlen);

#endif
