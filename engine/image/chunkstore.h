/* Chunk store: a profile-friendly copy of a cube or stack (the product of a rechunk job),
 * in which the series of any pixel along z is one contiguous run of bytes.
 *
 * Why this format.  A FITS cube is plane-major: a series at one pixel touches every plane
 * (nz reads of one value, nz pages).  The copy must instead make a series one read.  The
 * options were (a) a FITS cube holding the transposed data (NAXIS1 = z), (b) a FITS
 * tile-compressed cube with tiles of (1, 1, nz) or (tx, ty, nz) through cfitsio, or (c) a
 * small documented chunk store.  (b) needs cfitsio to decompress a whole tile, with its
 * per-call open, header parse and tile-index lookup, for every series, and a block
 * writer cannot write its tiles at fixed offsets (compressed sizes vary), which the job
 * framework needs for idempotent, restartable blocks.  (a) would do, but FITS has no way
 * to say "this is cube X transposed" and every FITS reader would show it as a nonsense
 * image; it would also tempt callers to open it through cfitsio, which costs far more
 * than the read itself.  So (c): one file, a 4096-byte JSON header and then raw
 * little-endian values at offsets computed from the header, in the spirit of a Zarr
 * array with chunks of (ty, tx, nz) stored in one file.  A series read is one pread(2) of
 * nz * esize bytes at a computed offset; a ty x tx tile of series is one contiguous run
 * of ty * tx * nz * esize bytes.
 *
 * Layout.  Bytes 0..4095: a JSON object, then blanks, then '\n' as byte 4095:
 *   {"format": "tessera-chunkstore", "version": 1, "nx": NX, "ny": NY, "nz": NZ,
 *    "dtype": "u1"|"u2"|"i2"|"f4", "tile": [TX, TY], "data_offset": 4096,
 *    "byteorder": "little", "source": NAME, "source_version": VERSION}
 * From data_offset: NX*NY series of NZ values each, z fastest, values are the physical
 * values of the source (BSCALE/BZERO applied) in dtype: u1 = uint8, u2 = uint16, i2 =
 * int16 (exact for integer sources whose physical values fit and have no BLANK), f4 =
 * IEEE float32 (every other source; NaN for blanks).  Pixels are ordered by tile rows of
 * TY image rows (the last one may be shorter); in each tile row by tiles of TX columns
 * from left to right (the last one may be narrower); in each tile row by row, each row
 * left to right.  So pixel (x, y) (0-based, y = row counted from FITS row 1), with
 * y0 = y - y % TY, x0 = x - x % TX, h = min(TY, NY - y0), w = min(TX, NX - x0), has the
 * index  y0*NX + x0*h + (y - y0)*w + (x - x0)  and its series starts at byte
 * data_offset + index * NZ * esize.  A tile row is a contiguous range of indices.
 */
#ifndef TESSERA_ENGINE_IMAGE_CHUNKSTORE_H
#define TESSERA_ENGINE_IMAGE_CHUNKSTORE_H

#include <stddef.h>

#define CHUNKSTORE_HEADER 4096

typedef enum { CS_U8 = 0, CS_U16 = 1, CS_I16 = 2, CS_F32 = 3 } cs_dtype;

typedef struct chunkstore_info {
    long nx, ny, nz;          /* shape of the source (FITS order) */
    cs_dtype dtype;
    long tx, ty;              /* tile size in pixels (>= 1) */
    long long data_offset;    /* CHUNKSTORE_HEADER */
    char source[128];         /* dataset name ("" when unknown) */
    char source_version[64];  /* dataset_version() of the source when written ("") */
} chunkstore_info;

/* Bytes of one value of `t` (1, 2, 2, 4). */
int chunkstore_esize(cs_dtype t);
/* "u1", "u2", "i2", "f4". */
const char *chunkstore_dtype_name(cs_dtype t);

/* The index of pixel (x, y) in the store's pixel order (see above); x, y in range. */
long long chunkstore_pixel_index(const chunkstore_info *in, long x, long y);
/* The inverse: the pixel with index `idx` (0 <= idx < nx*ny). */
void chunkstore_pixel_at(const chunkstore_info *in, long long idx, long *x, long *y);
/* Total file size: data_offset + nx*ny*nz*esize, or -1 when a size is negative or the
 * sum overflows (engine/base/checked.h). */
long long chunkstore_file_size(const chunkstore_info *in);

/* Creates (or truncates) the file at `path`: writes the header and sets the file size so
 * that every series is present (zero-filled until written).  Returns 0, TESS_EINVAL (bad
 * shape) or TESS_EIO. */
int chunkstore_create(const char *path, const chunkstore_info *in, char *err, size_t errlen);

/* Reads and checks the header of the store at `path` (format, version, shape, file size).
 * Returns 0, TESS_EIO (cannot read) or TESS_EINVAL (not a chunk store / inconsistent). */
int chunkstore_read_info(const char *path, chunkstore_info *out, char *err, size_t errlen);

/* Converts n stored values of type `t` (little-endian, at `src`) to doubles. */
void chunkstore_decode(cs_dtype t, const void *src, double *out, long n);
/* Converts n doubles to type `t` (little-endian) at `dst`: u1/u2/i2 round to the nearest
 * integer (the caller vouches that the values are integers in range); f4 rounds to float. */
void chunkstore_encode(cs_dtype t, const double *src, void *dst, long n);

/* An open store, for many reads: chunkstore_open / chunkstore_series / chunkstore_close.
 * A handle may be used by several threads at once (pread only). */
typedef struct chunkstore chunkstore;
int chunkstore_open(const char *path, chunkstore **out, char *err, size_t errlen);
const chunkstore_info *chunkstore_get_info(const chunkstore *s);
/* The series of pixel (x, y) (0-based; y = row from FITS row 1): nz values into `out` as
 * doubles (NaN where the source was blank), with one pread(2) of nz*esize bytes.  `nz`
 * must equal the store's nz.  Returns 0, TESS_ERANGE (x, y outside, or nz differs),
 * TESS_EIO or TESS_ENOMEM. */
int chunkstore_series(chunkstore *s, long x, long y, double *out, long nz, char *err,
                      size_t errlen);
void chunkstore_close(chunkstore *s);   /* NULL is ignored */

/* One-shot: opens the store at `path`, reads the series of (x, y) as chunkstore_series
 * does (one pread of the header, one pread of nz*esize bytes), closes it.  Same errors
 * as chunkstore_open and chunkstore_series. */
int chunkstore_read_series(const char *path, long x, long y, double *out, long nz, char *err,
                           size_t errlen);

#endif
