/* TIFF frames read with libtiff: greyscale pages of 8/16-bit integers or 32-bit floats. */
#ifndef TESSERA_ENGINE_IMAGE_TIFFFRAME_H
#define TESSERA_ENGINE_IMAGE_TIFFFRAME_H

#include <stddef.h>
#include "engine/fits/fitsimg.h"

/* A TIFF file (classic or BigTIFF) is a chain of pages (image file directories); each page
 * is one plane z (0-based, in the order of the chain), all of one shape and sample type.
 * Pages marked as reduced-resolution copies (NewSubfileType bit 0: thumbnails, pyramid
 * levels) are skipped.  Read: one sample per pixel (SamplesPerPixel 1; colour and
 * alpha are refused), BitsPerSample 8 or 16 unsigned, 16 signed, or 32-bit IEEE float,
 * PhotometricInterpretation min-is-black or min-is-white (values as stored, not
 * inverted), striped or tiled, any compression this libtiff decodes (none, deflate, LZW,
 * PackBits, ...; predictors included).
 *
 * Orientation is that of PNG frames (engine/image/stack.h): y = 0 is the LAST row of the
 * page (the bottom of the picture), x = 0 its first column, so a rendering shows the page
 * as a TIFF viewer does and IIIF regions are TIFF pixel coordinates; a numpy user sees
 * plane z as numpy.flipud(tifffile.imread(path, key=z)).  Values are the stored samples,
 * unscaled.
 *
 * Hostile files: the structure is checked before anything is decoded (dimensions >= 1,
 * every page of the first page's shape and type, sizes that fit, offset and byte-count
 * arrays (StripOffsets/StripByteCounts, TileOffsets/TileByteCounts) with an entry for
 * every strip or tile: libtiff pads a short one with zeros, which would read the file's
 * header as pixels), again at every read of a page, a strip or tile whose offset is 0
 * refused when read (TESS_EIO), and a page is decoded
 * only once its size (and a tile's) passes decodelimit_check (engine/base/decodelimit.h):
 * over it, every read of its pixels fails with TESS_ELIMIT and nothing is allocated.
 * libtiff's own allocations are capped at the decoded-bytes budget.  libtiff's errors and
 * warnings go to the caller's err (the first error, else the first warning, after the
 * reason), never to stderr: the first tiffframe_open sets libtiff's process-wide
 * handlers to print nothing.  The file is read with pread(2), never mapped, so a file
 * truncated while read gives TESS_EIO. */

/* Sample types. */
typedef enum {
    TIFFFRAME_U8 = 1,   /* BitsPerSample 8, unsigned */
    TIFFFRAME_U16,      /* 16, unsigned */
    TIFFFRAME_I16,      /* 16, signed (two's complement) */
    TIFFFRAME_F32       /* 32, IEEE float */
} tiffframe_type;

typedef struct tiffframe_shape {
    long nx, ny;          /* columns (ImageWidth) and rows (ImageLength) of every page */
    long npages;          /* pages read as planes (>= 1) */
    tiffframe_type type;
    int esize;            /* bytes of one stored sample: 1, 2, 2, 4 */
} tiffframe_shape;

/* Whether `path` starts with a TIFF signature ("II*\0", "MM\0*", or BigTIFF's "II+\0",
 * "MM\0+").  1 yes, 0 no or unreadable. */
int tiffframe_is_tiff(const char *path);

/* An open TIFF file with the offsets of its pages, read once at the opening (a page is
 * then reached directly, not by walking the chain).  The offsets of the last few files
 * opened are kept process-wide under the file's identity (inode, size, mtime, ctime:
 * tess_file_id), so opening the same unchanged file again does not walk its chain.
 * Thread-safe: any number of threads may read one at once. */
typedef struct tiffframe tiffframe;

/* Opens `path` (tess_open_regular: a regular file) and checks every page as above.
 * Returns 0 with *out, or TESS_EIO (cannot open or read, libtiff's error), TESS_EINVAL
 * (not a TIFF file, a page of another shape or type, a sample type or colour layout not
 * read here, a short offset or byte-count array, more than 100000 pages), TESS_ENOMEM, with err. */
int tiffframe_open(const char *path, tiffframe **out, char *err, size_t errlen);

/* Closes the file.  No read may be running.  NULL is ignored. */
void tiffframe_close(tiffframe *t);

/* The shape of the open file.  Cannot fail. */
void tiffframe_get_shape(const tiffframe *t, tiffframe_shape *sh);

/* Whether a page may be decoded within the decode budgets: the page (nx x ny samples of
 * esize bytes) and, for a tiled file, one tile.  Returns 0 or TESS_ELIMIT with err. */
int tiffframe_budget(const tiffframe *t, char *err, size_t errlen);

/* What tiffframe_read writes: doubles, floats, or the stored samples in native byte
 * order (uint8_t, uint16_t, int16_t or float, as the type). */
typedef enum { TIFFFRAME_OUT_F64 = 0, TIFFFRAME_OUT_F32, TIFFFRAME_OUT_STORED } tiffframe_out;

/* Reads the w x h region at (x0, y0) of page `page` (the orientation above):
 * out[j * w + i] = v(x0 + i, y0 + j), only the strips or tiles it touches being decoded.
 * Returns 0, or TESS_ERANGE (outside the file), TESS_ELIMIT (tiffframe_budget),
 * TESS_EIO (unreadable, corrupt or truncated data, a page changed since the opening:
 * libtiff's message in err), TESS_ENOMEM. */
int tiffframe_read(tiffframe *t, long page, long x0, long y0, long w, long h, tiffframe_out as,
                   void *out, char *err, size_t errlen);

/* How many times tiffframe_read was called in this process (regions decoded, or
 * attempts that failed): the frames-decoded metric (/metrics).  Thread-safe. */
unsigned long long tiffframe_reads(void);

/* fitsimg_read_info for a TIFF file: naxis 2 (one page) or 3 (naxes[2] = pages), the
 * bitpix and bzero of the FITS image that holds the same values (8; 16 with bzero 32768
 * for unsigned 16-bit; 16; -32), bscale 1, no BLANK, and a header of the cards SIMPLE,
 * BITPIX, NAXIS, NAXISn and, for unsigned 16-bit, BZERO = 32768 and BSCALE = 1.
 * Returns 0 or tiffframe_open's errors. */
int tiffframe_read_info(const char *path, fitsimg_info *info, char *err, size_t errlen);

/* tiffframe_budget of the file at `path`.  Returns 0, TESS_ELIMIT or tiffframe_open's
 * errors. */
int tiffframe_decode_check(const char *path, char *err, size_t errlen);

/* tiffframe_read of the file at `path` (opened and closed around it; the page offsets
 * come from the process-wide cache when the file is unchanged).  Same errors, and
 * tiffframe_open's. */
int tiffframe_read_path(const char *path, long page, long x0, long y0, long w, long h,
                        tiffframe_out as, void *out, char *err, size_t errlen);

/* Writes an nx x ny single-page greyscale TIFF of `bits` 8 or 16 (unsigned) from `data`
 * (row 0 = y = 0, which goes to the LAST TIFF row: the orientation above), values clamped
 * to 0..2^bits-1, in strips of 16 rows, deflate-compressed (zlib level 1) when `deflate`
 * is 1, else uncompressed.  Returns 0 or TESS_EIO (libtiff's message in err) /
 * TESS_EINVAL (bad parameters) / TESS_ENOMEM. */
int tiffframe_write(const char *path, const unsigned short *data, long nx, long ny, int bits,
                    int deflate, char *err, size_t errlen);

#endif
