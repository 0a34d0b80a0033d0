/* Zarr chunk bytes: physical values packed as a numpy dtype, then stored raw or deflated. */
#ifndef TESSERA_ENGINE_IMAGE_ZCHUNK_H
#define TESSERA_ENGINE_IMAGE_ZCHUNK_H

#include <stddef.h>

/* The element types of Tessera's Zarr views (and of the stored-value replies): little
 * endian, as numpy names them in a Zarr v2 .zarray ("|u1", "<i2", ...). */
typedef enum {
    ZCHUNK_U1, ZCHUNK_I1, ZCHUNK_U2, ZCHUNK_I2, ZCHUNK_U4, ZCHUNK_I4, ZCHUNK_F4
} zchunk_dtype;

/* Bytes of one element (1, 1, 2, 2, 4, 4, 4). */
int zchunk_esize(zchunk_dtype t);
/* The numpy type string of Zarr v2 ("|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<f4"). */
const char *zchunk_numpy_name(zchunk_dtype t);
/* The data_type of Zarr v3 ("uint8", "int8", "uint16", "int16", "uint32", "int32",
 * "float32"). */
const char *zchunk_v3_name(zchunk_dtype t);
/* 1 for the integer types, 0 for float32. */
int zchunk_is_integer(zchunk_dtype t);

/* Packs n doubles into dst (n * zchunk_esize(t) bytes, little endian).  Integer types
 * take only values that are integers in the type's range (no NaN): anything else stops
 * the packing with TESS_ERANGE and its index in *bad (when not NULL); float32 rounds
 * to nearest (NaN stays NaN).  Returns 0 or TESS_ERANGE. */
int zchunk_pack(zchunk_dtype t, const double *src, size_t n, void *dst, size_t *bad);

/* How the packed bytes are stored: as they are, as a zlib stream (RFC 1950: numcodecs
 * "zlib"), as a gzip member (RFC 1952: numcodecs "gzip", Zarr v3 "gzip"), or as a Blosc
 * frame (c-blosc 1.x, libblosc: numcodecs "blosc" and Zarr v3 "blosc" with cname "lz4",
 * the byte shuffle over elements of `typesize` bytes, automatic block size). */
typedef enum { ZCHUNK_RAW, ZCHUNK_ZLIB, ZCHUNK_GZIP, ZCHUNK_BLOSC_LZ4 } zchunk_codec;

/* Stores len bytes of src with codec c at level `level` (1..9, zlib's scale or Blosc's
 * clevel; ignored for raw); `typesize` is the element size for Blosc's shuffle (1..255;
 * ignored otherwise).  *out is malloc'd (caller frees).  Returns 0, TESS_EINVAL (level
 * or typesize out of range, or len over what the codec takes in one call: 4 GiB for
 * zlib, 2 GiB less Blosc's overhead for Blosc) or TESS_ENOMEM (then *out is NULL). */
int zchunk_compress(zchunk_codec c, int level, int typesize, const void *src, size_t len,
                    unsigned char **out, size_t *outlen);

#endif
