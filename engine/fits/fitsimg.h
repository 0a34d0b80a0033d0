/* FITS image access through cfitsio: header metadata and physical pixel values. */
#ifndef TESSERA_ENGINE_FITS_FITSIMG_H
#define TESSERA_ENGINE_FITS_FITSIMG_H

#include <stddef.h>

#define FITSIMG_MAXDIM 4

/* What a FITS image HDU says about itself.  Axis order is FITS order:
 * naxes[0] = NAXIS1 (columns, x), naxes[1] = NAXIS2 (rows, y), naxes[2] = NAXIS3 (z). */
typedef struct fitsimg_info {
    int naxis;                     /* NAXIS, 0..FITSIMG_MAXDIM */
    long naxes[FITSIMG_MAXDIM];    /* NAXISn; unused entries are 1 */
    int bitpix;                    /* BITPIX as stored: 8, 16, 32, 64, -32, -64 */
    double bscale, bzero;          /* BSCALE, BZERO (1 and 0 when absent) */
    int has_blank;                 /* 1 when an integer image has a BLANK card */
    long long blank;               /* BLANK, the stored integer meaning "no data" */
    char bunit[72];                /* BUNIT, "" when absent */
    char *header;                  /* every card of the HDU except END, each exactly 80
                                      characters, concatenated with no separator and
                                      NUL-terminated: the layout wcspih() reads and
                                      engine/fits/fitscard.h works on */
    int nkeys;                     /* number of 80-character cards in `header` */
    long long mtime_ns;            /* file modification time (ns since the epoch) */
    long long file_size;           /* file size in bytes */
    long long data_offset;         /* byte offset of the data unit in the file, or -1 for a
                                      tile-compressed image (its pixels are in a table) */
} fitsimg_info;

/* Every function below that takes a `path` opens it with tess_open_regular
 * (engine/base/fileio.h): what is not a regular file (a FIFO, a device, a directory) is
 * refused with TESS_EIO and "cannot open PATH: it is a FIFO, not a regular file",
 * never opened in a way that could block. */

/* Refuses a whole-file compressed file: one that starts with the signature of gzip,
 * zip, pack, compress (.Z), LZH or bzip2, which cfitsio would decompress whole into
 * memory at every opening (a 1.5 MB gzip of a 20000 x 20000 float image: 1.6 GB and
 * seconds per read).  Every reader here applies it before cfitsio sees a file: such
 * files are not read at all, whatever their size, and the message says to decompress
 * them, or to tile-compress them with fpack, which is read a tile at a time within the
 * decode budgets (engine/base/decodelimit.h).  Returns 0 (anything else, an unreadable
 * file included: the open that follows reports it), or TESS_EINVAL with err. */
int fitsimg_check_not_compressed(const char *path, char *err, size_t errlen);

/* The same check on the file open as `fd` (read with pread at offset 0; `path` names it
 * in the message): what the readers apply to the descriptor they hand to cfitsio, so
 * that the file checked is the file read. */
int fitsimg_check_fd_not_compressed(int fd, const char *path, char *err, size_t errlen);

/* Reads the header of HDU `hdu` (0-based: 0 is the primary HDU) of the FITS file at
 * `path`.  The HDU must be an image that follows fitscard_check_image (every NAXISn at
 * least 1, the data size without overflow and, unless tile-compressed, within the file)
 * and whose cards pass fitscard_check_chars (bytes outside 32..126 in values and
 * comments are then '?' in `header`).  Returns 0, or TESS_EIO (cannot open/read, or the
 * file is shorter than its header says), TESS_EINVAL (a whole-file compressed file, not
 * an image HDU, NAXIS above FITSIMG_MAXDIM, an axis below 1, sizes that overflow, a card
 * that is not FITS, malformed), TESS_ENOMEM; on error `err` says why ("path: reason",
 * naming the card) and `info` holds nothing to release. */
int fitsimg_read_info(const char *path, int hdu, fitsimg_info *info, char *err, size_t errlen);

/* Frees what fitsimg_read_info allocated.  Cannot fail. */
void fitsimg_info_release(fitsimg_info *info);

/* The header cards of a target description at `path`: the header of HDU `hdu` (0-based,
 * an image) when the file is a FITS file (its first 2880 bytes start with a SIMPLE card
 * and hold no line feed, as fitscard_text_is_fits), else the file's text parsed by
 * fitscard_parse (`hdu` then unused), read up to max_cards * 82 bytes.  *cards is
 * malloc'd (80-character cards, NUL-terminated, no END) and *n set; *is_fits (unless
 * NULL) is 1 when the cards came from a FITS file, 0 from text.  Returns 0, TESS_EIO
 * (cannot open or read), TESS_EINVAL (not an image HDU, bad header text), TESS_ENOMEM,
 * with `err`; on error *cards is NULL. */
int fitsimg_read_cards(const char *path, int hdu, int max_cards, char **cards, int *n,
                       int *is_fits, char *err, size_t errlen);

/* The byte offset in the file at `path` of the data unit of HDU `hdu` (0-based, an
 * image): where its first pixel is.  Returns 0 and *offset, or TESS_EIO / TESS_EINVAL
 * with `err`. */
int fitsimg_data_offset(const char *path, int hdu, long long *offset, char *err,
                        size_t errlen);

/* Reads a w x h region of plane z (all 0-based; x0 column, y0 row counted from FITS row 1)
 * of HDU `hdu` as physical values (BSCALE*stored+BZERO) in double precision.  Integer
 * pixels equal to BLANK and float NaNs become NaN.  `out` receives w*h values, row-major,
 * out[0] = pixel (x0, y0): row 0 of `out` is the lowest FITS row of the region.  The
 * region must lie inside the image (TESS_ERANGE otherwise).  Unscaled IEEE data of the
 * output's width (BITPIX -64 here, -32 for fitsimg_read_region_f32; no BSCALE or BZERO
 * card, not tile-compressed), which cfitsio would hand over as stored, are read with
 * pread in row groups (through at most 1 MB of scratch) and byte-swapped, outside the
 * cfitsio lock; so are integer images of BITPIX 8, 16 and 32 (not tile-compressed),
 * converted as cfitsio converts them (BLANK, when the type can hold it, to NaN; else
 * stored * BSCALE + BZERO in double precision, rounded once to the output type).  A
 * file shorter than its header says is TESS_EIO.  Safe to call from
 * several threads at once (each call opens its own handle).  Returns 0 or a TESS_E* code:
 * TESS_ELIMIT when the image is tile-compressed with tiles larger than the decode
 * budgets (engine/base/decodelimit.h; nothing decompressed). */
int fitsimg_read_region(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                        double *out, char *err, size_t errlen);

/* The same as fitsimg_read_region into single precision: `out` receives w*h floats
 * (physical values computed by cfitsio in double precision, then rounded to float; BLANK
 * and float NaNs become NaN).  For planes kept in memory as float (BITPIX 8, 16, -32),
 * where this halves the memory of a double read.  Same arguments, same errors. */
int fitsimg_read_region_f32(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                            float *out, char *err, size_t errlen);

/* Where and how an image HDU stores its pixels, as fitsimg_read_info found them: what a
 * caller that read the header once keeps to read regions later without cfitsio opening
 * and parsing the file again (fitsimg_read_region_f32_at).  Plain values, no pointers:
 * copy it freely.  Zeroed (bitpix 0) it means "not known". */
typedef struct fitsimg_layout {
    int bitpix;                    /* BITPIX as stored; 0: unknown */
    int naxis;                     /* NAXIS */
    long naxes[FITSIMG_MAXDIM];    /* NAXISn, FITS order; unused entries 1 */
    double bscale, bzero;          /* as fitsimg_info */
    int has_blank;
    long long blank;
    long long data_offset;         /* byte offset of the data unit; -1: tile-compressed */
    long long mtime_ns, file_size; /* the file as it was read (stat) */
} fitsimg_layout;

/* The layout part of `info` (from fitsimg_read_info).  Cannot fail. */
void fitsimg_layout_of(const fitsimg_info *info, fitsimg_layout *lay);

/* fitsimg_read_region_f32 of HDU `hdu` of `path`, whose header gave `lay` (NULL or
 * unknown: exactly fitsimg_read_region_f32).  When the layout is one that
 * fitsimg_read_region_f32 reads without cfitsio (BITPIX -32 with BSCALE 1 and BZERO 0,
 * or BITPIX 8, 16, 32; not tile-compressed) and the file opened has the size and
 * modification time the layout was read with, the region is read with pread from that
 * descriptor, one open and no header parse, with the same values (bit for bit) and the
 * same region check (TESS_ERANGE outside NAXISn) and errors; otherwise (another layout,
 * or the file changed since) it is read as fitsimg_read_region_f32 reads it.  Thread-safe
 * as that function.  Returns 0 or a TESS_E* code, with err. */
int fitsimg_read_region_f32_at(const char *path, int hdu, const fitsimg_layout *lay, long z,
                               long x0, long y0, long w, long h, float *out, char *err,
                               size_t errlen);

/* How fitsimg_read_values gives values. */
typedef enum fitsimg_values {
    FITSIMG_F64 = 0,          /* double: BSCALE * stored + BZERO computed by cfitsio in
                                 double precision (as fitsimg_read_region) */
    FITSIMG_F32 = 1,          /* float: the same rounded to float (as
                                 fitsimg_read_region_f32) */
    FITSIMG_F32_ASTROPY = 2   /* float: integers scaled in float32 arithmetic,
                                 (float)stored * (float)BSCALE, then + (float)BZERO, as
                                 astropy.io.fits scales BITPIX 8 and 16; float data scaled
                                 by cfitsio in double precision and rounded to float */
} fitsimg_values;

/* Reads values [first, first + n) of the data unit of HDU `hdu` in storage order (value
 * (z * NAXIS2 + y) * NAXIS1 + x is pixel (x, y) of plane z, all 0-based, row 0 = FITS
 * row 1) as physical values of `kind` into out (n doubles or n floats).  Integer pixels
 * equal to BLANK become NaN; float data are not checked for nulls (NaN, infinities, -0
 * and subnormals pass as stored, then scaled).  Unscaled IEEE data of the width of the
 * output (BITPIX -32 read as float, -64 as double, no BSCALE or BZERO card, not
 * tile-compressed) are read with pread and byte-swapped rather than through cfitsio.
 * Each call opens its own handles, so threads may read disjoint ranges at once (how a
 * large read is made parallel).  Returns 0, or TESS_ERANGE (the range
 * passes the end of the data unit), TESS_EINVAL (not an image HDU, a bad kind), TESS_EIO
 * (cannot open or read; a file shorter than its header says), TESS_ELIMIT (tiles over
 * the decode budgets, as fitsimg_read_region), TESS_ENOMEM, with err. */
int fitsimg_read_values(const char *path, int hdu, fitsimg_values kind, size_t first,
                        size_t n, void *out, char *err, size_t errlen);

/* Checks the scaling of a data unit of `bitpix`: BSCALE and BZERO finite, BSCALE not 0,
 * and for integers the largest stored magnitude scaled within what the values are read
 * into (float32 for BITPIX 8 and 16, float64 for 32 and 64).  Returns 0 or TESS_EINVAL
 * with err.  fitsimg_read_info applies it. */
int fitsimg_check_scaling(int bitpix, double bscale, double bzero, char *err, size_t errlen);

/* Moves the pixel origin of the WCS in `header` (nkeys cards, rewritten in place) to
 * pixel (shift[0], shift[1], shift[2]) of the original grid (the first nshift <= 3
 * axes; pixels, any origin): afterwards pixel p of the sub-grid has the world
 * coordinates pixel p + shift had.  Every card that ties the WCS to pixel positions
 * moves: CRPIXn and the CRPIXna of alternate descriptions (reduced by shift[n-1]), and
 * the Digitized Sky Survey plate solution's CNPIX1/CNPIX2 (the sub-image's corner on
 * the plate, increased by shift[0], shift[1]): wcspih derives CRPIX, the linear part and
 * the DSS polynomial from the plate solution, ignoring the CRPIX cards (WCS Paper IV,
 * section 5.2, as wcslib's dis.h describes it; astropy reads such headers the same way).
 * A value written as an integer stays one when the new value is integral; any other is
 * written as a real of 15 significant digits (fitscard_real).  Cannot fail. */
void fitsimg_header_shift(char *header, int nkeys, const double *shift, int nshift);

/* Copies the box of image HDU `hdu` of `path` that starts at 0-based pixel (lo[0], lo[1],
 * lo[2]) and spans n[0] x n[1] x n[2] pixels (axes past the file's NAXIS ignored; axes
 * past the third taken whole) into a new FITS file in memory, as cfitsio's image
 * sections do (fits_copy_image_section): one primary HDU with the pixels as stored
 * (BITPIX, BSCALE/BZERO and BLANK kept), the header's other cards, CRPIXn less the
 * offset (LTVn added), and here also a Digitized Sky Survey plate's CNPIX1/CNPIX2 moved
 * (as fitsimg_header_shift), then CHECKSUM and DATASUM (fixed comments, no time: the
 * same box of the same file gives the same bytes).  The box must lie inside the
 * image.  *out is malloc'd, *outlen its length (a multiple of 2880).  Returns 0, or
 * TESS_EINVAL (a box outside the image, a table HDU, a whole-file compressed file),
 * TESS_EIO (cannot read), TESS_ENOMEM, with `err`. */
int fitsimg_copy_section(const char *path, int hdu, const long lo[3], const long n[3],
                         unsigned char **out, size_t *outlen, char *err, size_t errlen);

/* Serialises cfitsio for modules that call it directly (engine/fits/fitswrite.c, and any
 * other reader or writer of FITS files): takes a process-wide mutex when the linked
 * cfitsio was built without thread support (fits_is_reentrant() == 0) and does nothing
 * when it was (Debian's libcfitsio is).  Each lock must be paired with an unlock on the same
 * thread, and the pair must not nest.  Cannot fail. */
void fitsimg_cfitsio_lock(void);
void fitsimg_cfitsio_unlock(void);

#endif
