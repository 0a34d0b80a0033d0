/* Zarr chunk bytes: numpy dtypes from doubles; raw, zlib and gzip storage. */
#include "engine/image/zchunk.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <blosc.h>
#include <zlib.h>

static const struct {
    int esize;
    const char *numpy, *v3;
    double lo, hi;            /* range of the integer types */
} types[] = {
    [ZCHUNK_U1] = {1, "|u1", "uint8", 0, 255},
    [ZCHUNK_I1] = {1, "|i1", "int8", -128, 127},
    [ZCHUNK_U2] = {2, "<u2", "uint16", 0, 65535},
    [ZCHUNK_I2] = {2, "<i2", "int16", -32768, 32767},
    [ZCHUNK_U4] = {4, "<u4", "uint32", 0, 4294967295.0},
    [ZCHUNK_I4] = {4, "<i4", "int32", -2147483648.0, 2147483647.0},
    [ZCHUNK_F4] = {4, "<f4", "float32", 0, 0},
};

int zchunk_esize(zchunk_dtype t)
{
    return types[t].esize;
}

const char *zchunk_numpy_name(zchunk_dtype t)
{
    return types[t].numpy;
}

const char *zchunk_v3_name(zchunk_dtype t)
{
    return types[t].v3;
}

int zchunk_is_integer(zchunk_dtype t)
{
    return t != ZCHUNK_F4;
}

static void put_le(unsigned char *p, uint32_t u, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (unsigned char)(u >> (8 * k));
}

int zchunk_pack(zchunk_dtype t, const double *src, size_t n, void *dst, size_t *bad)
{
    unsigned char *p = dst;
    int es = types[t].esize;
    if (t == ZCHUNK_F4) {
        for (size_t i = 0; i < n; i++) {
            float f = (float)src[i];
            uint32_t u;
            memcpy(&u, &f, 4);
            put_le(p + 4 * i, u, 4);
        }
        return 0;
    }
    double lo = types[t].lo, hi = types[t].hi;
    for (size_t i = 0; i < n; i++) {
        double v = src[i];
        /* NaN fails both comparisons, and so does a fraction the floor moved. */
        if (!(v >= lo && v <= hi && floor(v) == v)) {
            if (bad)
                *bad = i;
            return TESS_ERANGE;
        }
        uint32_t u = v < 0 ? (uint32_t)(int32_t)v : (uint32_t)v;
        put_le(p + (size_t)es * i, u, es);
    }
    return 0;
}

/* Blosc with lz4 and the byte shuffle, on the calling thread: blosc_compress_ctx keeps
 * no global state, so any number of threads may call it at once. */
static int blosc_store(int level, int typesize, const void *src, size_t len,
                       unsigned char **out, size_t *outlen)
{
    if (typesize < 1 || typesize > 255 || len > (size_t)INT32_MAX - BLOSC_MAX_OVERHEAD)
        return TESS_EINVAL;
    size_t cap = len + BLOSC_MAX_OVERHEAD;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return TESS_ENOMEM;
    int n = blosc_compress_ctx(level, BLOSC_SHUFFLE, (size_t)typesize, len, src, buf, cap,
                               "lz4", 0, 1);
    if (n <= 0) {   /* cannot happen with a buffer of len + BLOSC_MAX_OVERHEAD */
        free(buf);
        return TESS_ENOMEM;
    }
    *out = buf;
    *outlen = (size_t)n;
    return 0;
}

int zchunk_compress(zchunk_codec c, int level, int typesize, const void *src, size_t len,
                    unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (c == ZCHUNK_RAW) {
        *out = malloc(len ? len : 1);
        if (!*out)
            return TESS_ENOMEM;
        memcpy(*out, src, len);
        *outlen = len;
        return 0;
    }
    if (level < 1 || level > 9)
        return TESS_EINVAL;
    if (c == ZCHUNK_BLOSC_LZ4)
        return blosc_store(level, typesize, src, len, out, outlen);
    if (len > UINT32_MAX)
        return TESS_EINVAL;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    /* windowBits 15: a zlib stream; 15 + 16: a gzip member with its header and CRC. */
    if (deflateInit2(&zs, level, Z_DEFLATED, c == ZCHUNK_GZIP ? 31 : 15, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return TESS_ENOMEM;
    uLong cap = deflateBound(&zs, (uLong)len) + 32;   /* + the gzip header and trailer */
    unsigned char *buf = malloc(cap);
    if (!buf) {
        deflateEnd(&zs);
        return TESS_ENOMEM;
    }
    zs.next_in = (Bytef *)(uintptr_t)src;
    zs.avail_in = (uInt)len;
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    int zr = deflate(&zs, Z_FINISH);
    size_t n = (size_t)zs.total_out;
    deflateEnd(&zs);
    if (zr != Z_STREAM_END) {
        free(buf);
        return TESS_ENOMEM;
    }
    *out = buf;
    *outlen = n;
    return 0;
}
