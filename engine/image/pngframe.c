/* PNG frames of a stack: greyscale PNG headers and whole-frame decodes (libdeflate, libpng). */
#include "engine/image/pngframe.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <libdeflate.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* libpng's own bound on a width or height (PNG_USER_WIDTH_MAX / HEIGHT_MAX): a larger
 * IHDR goes to libpng, which refuses it with its own message. */
#define PNGFRAME_DIM_MAX 1000000L

int pngframe_sig_ok(const unsigned char *sig, size_t n)
{
    return n >= 8 && png_sig_cmp(sig, 0, 8) == 0;
}

int pngframe_budget(const char *path, long w, long h, int bits, char *err, size_t errlen)
{
    return decodelimit_check("the PNG frame", path, w, h, 1, bits == 16 ? 2 : 1, err, errlen);
}

/* ---- libpng ------------------------------------------------------------------------ */

/* A PNG being read: libpng's structs and the file.  libpng reports errors by longjmp. */
typedef struct png_in {
    FILE *f;
    png_structp png;
    png_infop info;
    char msg[160];
} png_in;

static void png_in_error(png_structp png, png_const_charp msg)
{
    png_in *in = png_get_error_ptr(png);
    snprintf(in->msg, sizeof(in->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void png_in_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_in_close(png_in *in)
{
    if (in->png)
        png_destroy_read_struct(&in->png, in->info ? &in->info : NULL, NULL);
    if (in->f)
        fclose(in->f);
    in->png = NULL;
    in->info = NULL;
    in->f = NULL;
}

/* Opens `path` and reads its header into in: width, height, bits (8 or 16 after the
 * expansion of 1/2/4-bit grey).  Returns 0 or TESS_EIO / TESS_EINVAL / TESS_ENOMEM;
 * on error everything is closed.  The caller's setjmp covers later reads. */
static int png_in_open(png_in *in, const char *path, long *w, long *h, int *bits, char *err,
                       size_t errlen)
{
    memset(in, 0, sizeof(*in));
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    in->f = fdopen(fd, "rb");
    if (!in->f) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    in->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, in, png_in_error, png_in_warning);
    if (in->png)
        in->info = png_create_info_struct(in->png);
    if (!in->png || !in->info) {
        png_in_close(in);
        return TESS_ENOMEM;
    }
    if (setjmp(png_jmpbuf(in->png))) {
        tess_seterr(err, errlen, "%s: not a readable PNG (%s)", path, in->msg);
        png_in_close(in);
        return TESS_EIO;
    }
    png_init_io(in->png, in->f);
#ifdef PNG_HANDLE_AS_UNKNOWN_SUPPORTED
    /* Every ancillary chunk is skipped unread: none is used here, and compressed ones
     * (zTXt, iTXt, iCCP) would each cost libpng up to 8 MB of inflating. */
    png_set_keep_unknown_chunks(in->png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
#endif
    png_read_info(in->png, in->info);
    int ct = png_get_color_type(in->png, in->info);
    int depth = png_get_bit_depth(in->png, in->info);
    if (ct != PNG_COLOR_TYPE_GRAY) {
        tess_seterr(err, errlen, "%s: a frame must be a greyscale PNG without alpha "
                    "(colour type %d)", path, ct);
        png_in_close(in);
        return TESS_EINVAL;
    }
    if (depth < 8)
        png_set_expand_gray_1_2_4_to_8(in->png);
    if (depth == 16) {
        const uint16_t one = 1;
        if (*(const unsigned char *)&one == 1)
            png_set_swap(in->png);     /* PNG is big-endian; keep native uint16 */
    }
    png_read_update_info(in->png, in->info);
    *w = (long)png_get_image_width(in->png, in->info);
    *h = (long)png_get_image_height(in->png, in->info);
    *bits = depth == 16 ? 16 : 8;
    return 0;
}

static int libpng_header(const char *path, long *w, long *h, int *bits, char *err,
                         size_t errlen)
{
    png_in in;
    int rc = png_in_open(&in, path, w, h, bits, err, errlen);
    if (rc == 0)
        png_in_close(&in);
    return rc;
}

int pngframe_decode_libpng(const char *path, void **pix, long *nx, long *ny, int *bits,
                           char *err, size_t errlen)
{
    png_in in;
    int rc = png_in_open(&in, path, nx, ny, bits, err, errlen);
    if (rc)
        return rc;
    size_t esz = *bits == 16 ? 2 : 1;
    if ((rc = pngframe_budget(path, *nx, *ny, *bits, err, errlen))) {
        png_in_close(&in);
        return rc;
    }
    size_t rowbytes = (size_t)*nx * esz;
    unsigned char *buf = malloc(rowbytes * (size_t)*ny);
    png_bytep *rows = malloc((size_t)*ny * sizeof(png_bytep));
    if (!buf || !rows) {
        free(buf);
        free(rows);
        png_in_close(&in);
        return TESS_ENOMEM;
    }
    for (long r = 0; r < *ny; r++)
        rows[r] = buf + (size_t)(*ny - 1 - r) * rowbytes;
    if (setjmp(png_jmpbuf(in.png))) {
        tess_seterr(err, errlen, "%s: cannot decode the PNG (%s)", path, in.msg);
        free(buf);
        free(rows);
        png_in_close(&in);
        return TESS_EIO;
    }
    png_read_image(in.png, rows);
    png_read_end(in.png, NULL);
    free(rows);
    png_in_close(&in);
    *pix = buf;
    return 0;
}

/* ---- the direct path -------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int chunk_is(const unsigned char *type, const char *name)
{
    return memcmp(type, name, 4) == 0;
}

/* Whether the chunk whose 4-byte type is at `type`, followed by its `len` data bytes and
 * its CRC, has that CRC (over type and data). */
static int crc_ok(const unsigned char *type, uint32_t len)
{
    return libdeflate_crc32(0, type, 4 + (size_t)len) == be32(type + 4 + len);
}

/* The IHDR the direct path decodes: a valid non-interlaced greyscale frame of depth 8 or
 * 16 within libpng's size bounds.  `p` is the 13 data bytes.  1 yes, 0 leave it to libpng. */
static int ihdr_direct(const unsigned char *p, long *w, long *h, int *bits)
{
    uint32_t ww = be32(p), hh = be32(p + 4);
    if (ww < 1 || hh < 1 || ww > PNGFRAME_DIM_MAX || hh > PNGFRAME_DIM_MAX)
        return 0;
    if ((p[8] != 8 && p[8] != 16) || p[9] != 0 || p[10] != 0 || p[11] != 0 || p[12] != 0)
        return 0;
    *w = (long)ww;
    *h = (long)hh;
    *bits = p[8];
    return 1;
}

/* The PNG header by preads of the chunk headers up to the first IDAT.  1 when read here,
 * 0 when libpng must read it (anything unusual), or a negative TESS_E* from the open. */
static int direct_header(const char *path, long *w, long *h, int *bits, char *err,
                         size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    unsigned char b[33];
    int ok = 0;
    if (pread(fd, b, sizeof b, 0) == (ssize_t)sizeof b && pngframe_sig_ok(b, 8) &&
        be32(b + 8) == 13 && chunk_is(b + 12, "IHDR") && crc_ok(b + 12, 13) &&
        ihdr_direct(b + 16, w, h, bits)) {
        off_t pos = 33;
        for (int n = 0; n < 4096; n++) {   /* ancillary chunks before the image data */
            unsigned char c[8];
            if (pread(fd, c, sizeof c, pos) != (ssize_t)sizeof c)
                break;
            uint32_t len = be32(c);
            if (len > 0x7fffffffu)
                break;
            if (chunk_is(c + 4, "IDAT")) {
                ok = 1;
                break;
            }
            if (!(c[4] & 0x20))            /* critical: PLTE, IEND, unknown ones */
                break;
            pos += 12 + (off_t)len;
        }
    }
    close(fd);
    return ok;
}

int pngframe_header(const char *path, long *w, long *h, int *bits, char *err, size_t errlen)
{
    int rc = direct_header(path, w, h, bits, err, errlen);
    if (rc < 0)
        return rc;
    return rc ? 0 : libpng_header(path, w, h, bits, err, errlen);
}

/* The Paeth predictor of PNG's filter type 4. */
static inline unsigned paeth(unsigned a, unsigned b, unsigned c)
{
    int p = (int)a + (int)b - (int)c;
    int pa = abs(p - (int)a), pb = abs(p - (int)b), pc = abs(p - (int)c);
    if (pa <= pb && pa <= pc)
        return a;
    return pb <= pc ? b : c;
}

/* Unfilters one row of n bytes (`bpp` bytes a pixel) of filter type `ft` from `in` to
 * `out`, `prev` being the previous row unfiltered (NULL for the first row).  Returns 0,
 * or -1 for a filter type above 4. */
static int unfilter_row(int ft, const unsigned char *in, unsigned char *out,
                        const unsigned char *prev, size_t n, size_t bpp)
{
    size_t i;
    switch (ft) {
    case 0:
        memcpy(out, in, n);
        return 0;
    case 1:
        for (i = 0; i < bpp && i < n; i++)
            out[i] = in[i];
        for (; i < n; i++)
            out[i] = (unsigned char)(in[i] + out[i - bpp]);
        return 0;
    case 2:
        if (!prev)
            memcpy(out, in, n);
        else
            for (i = 0; i < n; i++)
                out[i] = (unsigned char)(in[i] + prev[i]);
        return 0;
    case 3:
        for (i = 0; i < bpp && i < n; i++)
            out[i] = (unsigned char)(in[i] + (prev ? prev[i] >> 1 : 0));
        for (; i < n; i++)
            out[i] = (unsigned char)(in[i] + ((out[i - bpp] + (prev ? prev[i] : 0)) >> 1));
        return 0;
    case 4:
        if (!prev) {   /* Paeth with a zero row above is Sub */
            for (i = 0; i < bpp && i < n; i++)
                out[i] = in[i];
            for (; i < n; i++)
                out[i] = (unsigned char)(in[i] + out[i - bpp]);
            return 0;
        }
        for (i = 0; i < bpp && i < n; i++)
            out[i] = (unsigned char)(in[i] + prev[i]);
        for (; i < n; i++)
            out[i] = (unsigned char)(in[i] + paeth(out[i - bpp], prev[i], prev[i - bpp]));
        return 0;
    default:
        return -1;
    }
}

/* A thread's buffers for the direct path, kept from one decode to the next (a stack
 * decodes thousands of frames of one size: fresh buffers each time cost more in page
 * faults than the unfiltering) and freed when the thread ends. */
typedef struct scratch {
    unsigned char *file, *filt;
    size_t filecap, filtcap;
    struct libdeflate_decompressor *d;
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_free(void *p)
{
    scratch *sc = p;
    free(sc->file);
    free(sc->filt);
    if (sc->d)
        libdeflate_free_decompressor(sc->d);
    free(sc);
}

static void scratch_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* Makes *p (of *cap bytes) at least `need` bytes, its content not kept.  0 or -1. */
static int grow(unsigned char **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    free(*p);
    *cap = 0;
    if (!(*p = malloc(need)))
        return -1;
    *cap = need;
    return 0;
}

/* The calling thread's scratch, its buffers of at least `filebytes` and `filtbytes`.
 * NULL when out of memory. */
static scratch *scratch_get(size_t filebytes, size_t filtbytes)
{
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_key_ok)
        return NULL;
    scratch *sc = pthread_getspecific(scratch_key);
    if (!sc) {
        sc = calloc(1, sizeof(*sc));
        if (!sc)
            return NULL;
        if (pthread_setspecific(scratch_key, sc) != 0) {
            free(sc);
            return NULL;
        }
    }
    if (!sc->d && !(sc->d = libdeflate_alloc_decompressor()))
        return NULL;
    if (grow(&sc->file, &sc->filecap, filebytes) != 0 ||
        grow(&sc->filt, &sc->filtcap, filtbytes) != 0)
        return NULL;
    return sc;
}

/* Reads the whole file `fd` of `size` bytes into p.  0 or -1. */
static int slurp(int fd, unsigned char *p, size_t size)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, p + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* Buffers given back by pngframe_release: at most KEEP_SLOTS, PNGFRAME_KEEP_BYTES in all,
 * freed when the process ends. */
#define KEEP_SLOTS 128
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static void *keep_buf[KEEP_SLOTS];
static size_t keep_len[KEEP_SLOTS], keep_bytes;
static int keep_n;

void pngframe_release(void *pix, size_t bytes)
{
    if (!pix)
        return;
    pthread_mutex_lock(&keep_lock);
    int kept = keep_n < KEEP_SLOTS && bytes <= PNGFRAME_KEEP_BYTES - keep_bytes;
    if (kept) {
        keep_buf[keep_n] = pix;
        keep_len[keep_n++] = bytes;
        keep_bytes += bytes;
    }
    pthread_mutex_unlock(&keep_lock);
    if (!kept)
        free(pix);
}

/* A kept buffer of exactly `bytes`, else a new one (NULL when out of memory). */
static void *take_buffer(size_t bytes)
{
    void *p = NULL;
    pthread_mutex_lock(&keep_lock);
    for (int i = keep_n - 1; i >= 0; i--)
        if (keep_len[i] == bytes) {
            p = keep_buf[i];
            keep_buf[i] = keep_buf[--keep_n];
            keep_len[i] = keep_len[keep_n];
            keep_bytes -= bytes;
            break;
        }
    pthread_mutex_unlock(&keep_lock);
    return p ? p : malloc(bytes);
}

__attribute__((destructor)) static void keep_free_all(void)
{
    pthread_mutex_lock(&keep_lock);
    while (keep_n > 0)
        free(keep_buf[--keep_n]);
    keep_bytes = 0;
    pthread_mutex_unlock(&keep_lock);
}

/* The direct decode.  1 decoded into *pix, 0 when libpng must decode the file (anything
 * but a well-formed non-interlaced 8/16-bit grey frame), or a negative TESS_E* code (the
 * open, the budget, memory) with err. */
static int direct_decode(const char *path, void **pix, long *nx, long *ny, int *bits,
                         char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    struct stat st;
    unsigned char hd[33];
    long w, h;
    int bt;
    if (fstat(fd, &st) != 0 || pread(fd, hd, sizeof hd, 0) != (ssize_t)sizeof hd ||
        !pngframe_sig_ok(hd, 8) || be32(hd + 8) != 13 || !chunk_is(hd + 12, "IHDR") ||
        !crc_ok(hd + 12, 13) || !ihdr_direct(hd + 16, &w, &h, &bt)) {
        close(fd);
        return 0;
    }
    int rc = pngframe_budget(path, w, h, bt, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    size_t bpp = bt == 16 ? 2 : 1;
    size_t rowbytes = (size_t)w * bpp, fbytes = (rowbytes + 1) * (size_t)h;
    /* The file is read whole when it is of a plausible size for its samples (deflate
     * expands incompressible data by a few bytes in 64 KB); a larger one is streamed by
     * libpng. */
    if ((unsigned long long)st.st_size > fbytes + fbytes / 8 + ((size_t)16 << 20)) {
        close(fd);
        return 0;
    }
    size_t fsize = (size_t)st.st_size;
    scratch *sc = scratch_get(fsize ? fsize : 1, fbytes);
    if (!sc) {
        close(fd);
        tess_seterr(err, errlen, "out of memory decoding %s", path);
        return TESS_ENOMEM;
    }
    unsigned char *file = sc->file;
    int got = slurp(fd, file, fsize);
    close(fd);
    if (got != 0)
        return 0;
    /* Walk the chunks: IDATs checked and their data moved together at the start of the
     * file buffer; ancillary chunks skipped; IEND ends it. */
    size_t pos = 33, zlen = 0;
    int seen_idat = 0, after_idat = 0, ended = 0, bad = 0;
    while (!bad && pos + 12 <= fsize) {
        uint32_t len = be32(file + pos);
        unsigned char *type = file + pos + 4;
        if (len > 0x7fffffffu || (size_t)len > fsize - pos - 12) {
            bad = 1;
            break;
        }
        if (chunk_is(type, "IDAT")) {
            if (after_idat || !crc_ok(type, len))
                bad = 1;
            else {
                memmove(file + zlen, type + 4, len);
                zlen += len;
                seen_idat = 1;
            }
        } else if (chunk_is(type, "IEND")) {
            if (len != 0 || !crc_ok(type, 0))
                bad = 1;
            ended = 1;
            break;
        } else if (!(type[0] & 0x20)) {
            bad = 1;                        /* PLTE or an unknown critical chunk */
        } else if (seen_idat) {
            after_idat = 1;
        }
        pos += 12 + (size_t)len;
    }
    if (bad || !ended || !seen_idat)
        return 0;
    unsigned char *filt = sc->filt;
    size_t in_used = 0, out_got = 0;
    enum libdeflate_result r =
        libdeflate_zlib_decompress_ex(sc->d, file, zlen, filt, fbytes, &in_used, &out_got);
    if (r != LIBDEFLATE_SUCCESS || out_got != fbytes)
        return 0;
    unsigned char *out = take_buffer(rowbytes * (size_t)h);
    if (!out) {
        tess_seterr(err, errlen, "out of memory decoding %s", path);
        return TESS_ENOMEM;
    }
    int ok = 1;
    const unsigned char *prev = NULL;
    for (long row = 0; ok && row < h; row++) {
        const unsigned char *in = filt + (size_t)row * (rowbytes + 1);
        unsigned char *o = out + (size_t)(h - 1 - row) * rowbytes;
        if (unfilter_row(in[0], in + 1, o, prev, rowbytes, bpp) != 0)
            ok = 0;
        prev = o;
    }
    if (!ok) {
        pngframe_release(out, rowbytes * (size_t)h);
        return 0;
    }
    if (bt == 16) {
        const uint16_t one = 1;
        if (*(const unsigned char *)&one == 1) {
            uint16_t *v = (uint16_t *)(void *)out;
            for (size_t i = 0, n = (size_t)w * (size_t)h; i < n; i++)
                v[i] = (uint16_t)(v[i] << 8 | v[i] >> 8);
        }
    }
    *pix = out;
    *nx = w;
    *ny = h;
    *bits = bt;
    return 1;
}

static unsigned long long ndecodes;   /* pngframe_decode calls that decoded pixels */

unsigned long long pngframe_decodes(void)
{
    return __atomic_load_n(&ndecodes, __ATOMIC_RELAXED);
}

int pngframe_decode(const char *path, void **pix, long *nx, long *ny, int *bits, char *err,
                    size_t errlen)
{
    __atomic_add_fetch(&ndecodes, 1, __ATOMIC_RELAXED);
    int rc = direct_decode(path, pix, nx, ny, bits, err, errlen);
    if (rc < 0)
        return rc;
    return rc ? 0 : pngframe_decode_libpng(path, pix, nx, ny, bits, err, errlen);
}
