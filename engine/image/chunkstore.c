/* Chunk store: header, pixel order and series reads (see chunkstore.h). */
#include "engine/image/chunkstore.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define CS_SWAP 1
#else
#define CS_SWAP 0
#endif

struct chunkstore {
    int fd;
    chunkstore_info info;
};

int chunkstore_esize(cs_dtype t)
{
    switch (t) {
    case CS_U8: return 1;
    case CS_U16: case CS_I16: return 2;
    default: return 4;
    }
}

const char *chunkstore_dtype_name(cs_dtype t)
{
    static const char *const names[] = {"u1", "u2", "i2", "f4"};
    return (unsigned)t < 4 ? names[t] : "f4";
}

long long chunkstore_pixel_index(const chunkstore_info *in, long x, long y)
{
    long y0 = y - y % in->ty, x0 = x - x % in->tx;
    long h = in->ny - y0 < in->ty ? in->ny - y0 : in->ty;
    long w = in->nx - x0 < in->tx ? in->nx - x0 : in->tx;
    return (long long)y0 * in->nx + (long long)x0 * h + (long long)(y - y0) * w + (x - x0);
}

void chunkstore_pixel_at(const chunkstore_info *in, long long idx, long *x, long *y)
{
    long y0 = (long)(idx / ((long long)in->ty * in->nx)) * in->ty;
    long h = in->ny - y0 < in->ty ? in->ny - y0 : in->ty;
    long long r = idx - (long long)y0 * in->nx;     /* index inside the tile row */
    long x0 = (long)(r / ((long long)in->tx * h)) * in->tx;
    long w = in->nx - x0 < in->tx ? in->nx - x0 : in->tx;
    long long q = r - (long long)x0 * h;            /* index inside the tile */
    *y = y0 + (long)(q / w);
    *x = x0 + (long)(q % w);
}

long long chunkstore_file_size(const chunkstore_info *in)
{
    size_t data, total;
    if (in->data_offset < 0 ||
        tess_size_dims((size_t)chunkstore_esize(in->dtype), (const long[]){in->nx, in->ny, in->nz},
                       3, &data) ||
        tess_size_add(data, (size_t)in->data_offset, &total))
        return -1;
    return (long long)total;
}

int chunkstore_create(const char *path, const chunkstore_info *in, char *err, size_t errlen)
{
    if (in->nx < 1 || in->ny < 1 || in->nz < 1 || in->tx < 1 || in->ty < 1 ||
        (unsigned)in->dtype > CS_F32 || in->data_offset != CHUNKSTORE_HEADER ||
        chunkstore_file_size(in) < 0) {
        tess_seterr(err, errlen, "chunk store: bad shape %ldx%ldx%ld tile %ldx%ld", in->nx,
                    in->ny, in->nz, in->tx, in->ty);
        return TESS_EINVAL;
    }
    json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:s, s:[I,I], s:I, s:s, s:s, s:s}",
                          "format", "tessera-chunkstore", "version", 1, "nx", (json_int_t)in->nx,
                          "ny", (json_int_t)in->ny, "nz", (json_int_t)in->nz, "dtype",
                          chunkstore_dtype_name(in->dtype), "tile", (json_int_t)in->tx,
                          (json_int_t)in->ty, "data_offset", (json_int_t)in->data_offset,
                          "byteorder", "little", "source", in->source, "source_version",
                          in->source_version);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) {
        tess_seterr(err, errlen, "chunk store: out of memory");
        return TESS_ENOMEM;
    }
    char hdr[CHUNKSTORE_HEADER];
    size_t n = strlen(text);
    if (n >= sizeof hdr) {
        free(text);
        tess_seterr(err, errlen, "chunk store: header too long");
        return TESS_EINVAL;
    }
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, text, n);
    hdr[sizeof hdr - 1] = '\n';
    free(text);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        tess_seterr(err, errlen, "chunk store: cannot create %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    int bad = tess_pwrite_all(fd, hdr, sizeof hdr, 0) != 0 ||
              ftruncate(fd, (off_t)chunkstore_file_size(in)) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        tess_seterr(err, errlen, "chunk store: cannot write %s: %s", path, strerror(e));
        return TESS_EIO;
    }
    return 0;
}

static int parse_header(const char *hdr, long long fsize, const char *path, chunkstore_info *out,
                        char *err, size_t errlen)
{
    json_error_t je;
    size_t len = CHUNKSTORE_HEADER;   /* the JSON text without the padding blanks */
    while (len > 0 && (hdr[len - 1] == ' ' || hdr[len - 1] == '\n'))
        len--;
    json_t *o = json_loadb(hdr, len, 0, &je);
    const char *fmt = NULL, *dtype = NULL, *src = "", *ver = "";
    int version = 0;
    json_int_t nx = 0, ny = 0, nz = 0, tx = 0, ty = 0, off = 0;
    if (!o || json_unpack(o, "{s:s, s:i, s:I, s:I, s:I, s:s, s:[I,I], s:I, s?s, s?s}", "format",
                          &fmt, "version", &version, "nx", &nx, "ny", &ny, "nz", &nz, "dtype",
                          &dtype, "tile", &tx, &ty, "data_offset", &off, "source", &src,
                          "source_version", &ver) != 0 ||
        strcmp(fmt, "tessera-chunkstore") != 0 || version != 1) {
        json_decref(o);
        tess_seterr(err, errlen, "%s is not a tessera chunk store (version 1)", path);
        return TESS_EINVAL;
    }
    memset(out, 0, sizeof *out);
    out->nx = (long)nx;
    out->ny = (long)ny;
    out->nz = (long)nz;
    out->tx = (long)tx;
    out->ty = (long)ty;
    out->data_offset = off;
    out->dtype = CS_F32;
    int known = 0;
    for (int t = CS_U8; t <= CS_F32; t++)
        if (strcmp(dtype, chunkstore_dtype_name((cs_dtype)t)) == 0) {
            out->dtype = (cs_dtype)t;
            known = 1;
        }
    snprintf(out->source, sizeof out->source, "%s", src);
    snprintf(out->source_version, sizeof out->source_version, "%s", ver);
    json_decref(o);
    if (!known || nx < 1 || ny < 1 || nz < 1 || tx < 1 || ty < 1 || off != CHUNKSTORE_HEADER ||
        nx > LONG_MAX || ny > LONG_MAX || nz > LONG_MAX || tx > LONG_MAX || ty > LONG_MAX ||
        chunkstore_file_size(out) != fsize) {
        tess_seterr(err, errlen, "chunk store %s: inconsistent header or size", path);
        return TESS_EINVAL;
    }
    return 0;
}

static int open_fd(const char *path, chunkstore_info *info, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tess_seterr(err, errlen, "cannot open chunk store %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    char hdr[CHUNKSTORE_HEADER];
    struct stat st;
    if (fstat(fd, &st) != 0 || tess_pread_all(fd, hdr, sizeof hdr, 0) != 0) {
        close(fd);
        tess_seterr(err, errlen, "cannot read chunk store %s", path);
        return TESS_EIO;
    }
    int rc = parse_header(hdr, (long long)st.st_size, path, info, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int chunkstore_read_info(const char *path, chunkstore_info *out, char *err, size_t errlen)
{
    int fd = open_fd(path, out, err, errlen);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* Turns 4 bytes between little-endian (the file's order) and this machine's order: a
 * byte reversal on a big-endian machine, nothing on a little-endian one. */
static inline void le32_order(unsigned char q[4])
{
    if (CS_SWAP) {
        unsigned char s0 = q[0], s1 = q[1];
        q[0] = q[3];
        q[1] = q[2];
        q[2] = s1;
        q[3] = s0;
    }
}

#if defined(__SSE2__)
/* The 8 int32 lanes of lo, hi to doubles at out (unaligned): exact, every int32 is a double. */
static inline void put8_pd(double *out, __m128i lo, __m128i hi)
{
    _mm_storeu_pd(out, _mm_cvtepi32_pd(lo));
    _mm_storeu_pd(out + 2, _mm_cvtepi32_pd(_mm_srli_si128(lo, 8)));
    _mm_storeu_pd(out + 4, _mm_cvtepi32_pd(hi));
    _mm_storeu_pd(out + 6, _mm_cvtepi32_pd(_mm_srli_si128(hi, 8)));
}

/* The leading multiple of 16 (u8) or 8 (u16/i16 little-endian) values of b, widened to
 * int32 by SSE2 unpacks (zero- or sign-extended) and converted exactly; the values done. */
static long decode_sse2(cs_dtype t, const unsigned char *b, double *out, long n)
{
    const __m128i zero = _mm_setzero_si128();
    long i = 0;
    if (t == CS_U8) {
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
            __m128i w0 = _mm_unpacklo_epi8(v, zero), w1 = _mm_unpackhi_epi8(v, zero);
            put8_pd(out + i, _mm_unpacklo_epi16(w0, zero), _mm_unpackhi_epi16(w0, zero));
            put8_pd(out + i + 8, _mm_unpacklo_epi16(w1, zero), _mm_unpackhi_epi16(w1, zero));
        }
        return i;
    }
    if (CS_SWAP)
        return 0;   /* the lanes below are read in host order */
    for (; i + 8 <= n; i += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b + 2 * i));
        /* sign: the 16-bit lanes' top bits copied up (i16), or zeros (u16) */
        __m128i hi = t == CS_I16 ? _mm_srai_epi16(v, 15) : zero;
        put8_pd(out + i, _mm_unpacklo_epi16(v, hi), _mm_unpackhi_epi16(v, hi));
    }
    return i;
}
#endif

void chunkstore_decode(cs_dtype t, const void *src, double *out, long n)
{
    const unsigned char *b = src;
    long i0 = 0;
#if defined(__SSE2__)
    if (t == CS_U8 || t == CS_U16 || t == CS_I16)
        i0 = decode_sse2(t, b, out, n);
#endif
    switch (t) {
    case CS_U8:
        for (long i = i0; i < n; i++)
            out[i] = b[i];
        break;
    case CS_U16:
        for (long i = i0; i < n; i++)
            out[i] = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
        break;
    case CS_I16:
        for (long i = i0; i < n; i++)
            out[i] = (int16_t)(uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
        break;
    default:
        for (long i = 0; i < n; i++) {
            float f;
            unsigned char q[4];
            memcpy(q, b + 4 * i, 4);
            le32_order(q);
            memcpy(&f, q, 4);
            out[i] = f;
        }
    }
}

void chunkstore_encode(cs_dtype t, const double *src, void *dst, long n)
{
    unsigned char *b = dst;
    switch (t) {
    case CS_U8:
        for (long i = 0; i < n; i++)
            b[i] = (unsigned char)lrint(src[i]);
        break;
    case CS_U16:
    case CS_I16:
        for (long i = 0; i < n; i++) {
            uint16_t v = t == CS_U16 ? (uint16_t)lrint(src[i]) : (uint16_t)(int16_t)lrint(src[i]);
            b[2 * i] = (unsigned char)(v & 0xff);
            b[2 * i + 1] = (unsigned char)(v >> 8);
        }
        break;
    default:
        for (long i = 0; i < n; i++) {
            float f = (float)src[i];
            unsigned char q[4];
            memcpy(q, &f, 4);
            le32_order(q);
            memcpy(b + 4 * i, q, 4);
        }
    }
}

int chunkstore_open(const char *path, chunkstore **out, char *err, size_t errlen)
{
    *out = NULL;
    chunkstore *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    s->fd = open_fd(path, &s->info, err, errlen);
    if (s->fd < 0) {
        int rc = s->fd;
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

const chunkstore_info *chunkstore_get_info(const chunkstore *s)
{
    return &s->info;
}

static int series_fd(int fd, const chunkstore_info *in, long x, long y, double *out, long nz,
                     char *err, size_t errlen)
{
    if (x < 0 || y < 0 || x >= in->nx || y >= in->ny || nz != in->nz) {
        tess_seterr(err, errlen, "series (%ld, %ld) of %ld values outside the %ldx%ldx%ld store",
                    x, y, nz, in->nx, in->ny, in->nz);
        return TESS_ERANGE;
    }
    int es = chunkstore_esize(in->dtype);
    size_t n = (size_t)nz * (size_t)es;
    unsigned char stackbuf[16384];
    unsigned char *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    off_t off = (off_t)(in->data_offset + chunkstore_pixel_index(in, x, y) * nz * es);
    int rc = 0;
    if (tess_pread_all(fd, buf, n, off) != 0) {
        tess_seterr(err, errlen, "cannot read the series of (%ld, %ld) from the chunk store", x, y);
        rc = TESS_EIO;
    } else {
        chunkstore_decode(in->dtype, buf, out, nz);
    }
    if (buf != stackbuf)
        free(buf);
    return rc;
}

int chunkstore_series(chunkstore *s, long x, long y, double *out, long nz, char *err,
                      size_t errlen)
{
    return series_fd(s->fd, &s->info, x, y, out, nz, err, errlen);
}

void chunkstore_close(chunkstore *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s);
}

int chunkstore_read_series(const char *path, long x, long y, double *out, long nz, char *err,
                           size_t errlen)
{
    chunkstore_info in;
    int fd = open_fd(path, &in, err, errlen);
    if (fd < 0)
        return fd;
    int rc = series_fd(fd, &in, x, y, out, nz, err, errlen);
    close(fd);
    return rc;
}
