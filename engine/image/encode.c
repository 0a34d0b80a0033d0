/* Encoders of pixel arrays to response bytes: PNG (libpng), JPEG (libjpeg), FITS (engine/fits/fitswrite), NPY. */
#include "engine/image/encode.h"

#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "engine/fits/fitswrite.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"

/* ---- PNG -------------------------------------------------------------------------- */

/* Where libpng's output goes: a malloc'd buffer that doubles as it fills. */
typedef struct png_mem {
    unsigned char *data;
    size_t len, alloc;
    int nomem;            /* set when growing failed */
    uint8_t *scratch;     /* the grey+alpha image (2 bytes a pixel), or NULL */
} png_mem;

static void png_mem_write(png_structp png, png_bytep bytes, png_size_t n)
{
    png_mem *m = png_get_io_ptr(png);
    if (n > SIZE_MAX - m->len) {
        m->nomem = 1;
        png_error(png, "PNG larger than memory");
    }
    if (m->len + n > m->alloc) {
        size_t want = m->alloc ? m->alloc : 4096;
        while (want < m->len + n)
            want = want > SIZE_MAX / 2 ? m->len + n : want * 2;
        unsigned char *p = realloc(m->data, want);
        if (!p) {
            m->nomem = 1;
            png_error(png, "out of memory");
        }
        m->data = p;
        m->alloc = want;
    }
    memcpy(m->data + m->len, bytes, n);
    m->len += n;
}

static void png_mem_flush(png_structp png)
{
    (void)png;
}

/* libpng errors end in a longjmp back to png_encode_rgba, without printing. */
static void png_quiet_error(png_structp png, png_const_charp msg)
{
    (void)msg;
    png_longjmp(png, 1);
}

static void png_quiet_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* A libpng write struct and its info struct that report errors by longjmp, without
 * printing.  Returns 0, or TESS_ENOMEM with nothing left allocated. */
static int png_start(png_structp *png, png_infop *info)
{
    *png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_quiet_error,
                                   png_quiet_warning);
    *info = *png ? png_create_info_struct(*png) : NULL;
    if (!*info) {
        png_destroy_write_struct(png, NULL);
        return TESS_ENOMEM;
    }
    return 0;
}

/* Whether every pixel is grey (red = green = blue); if so, and ga is not NULL, packs
 * them as grey+alpha into ga (2 bytes a pixel).  Stops at the first coloured pixel. */
static int pack_grey(const uint8_t *rgba, size_t n, uint8_t *ga)
{
    for (size_t p = 0; p < n; p++) {
        const uint8_t *q = rgba + 4 * p;
        if (q[0] != q[1] || q[0] != q[2])
            return 0;
        if (ga) {
            ga[2 * p] = q[0];
            ga[2 * p + 1] = q[3];
        }
    }
    return 1;
}

/* Writes an h-row PNG of `bits`-bit samples of PNG colour type `color` into m (rows of
 * `stride` bytes from `rows`; 16-bit samples little-endian when swap16), at zlib level 1,
 * with no row filter when no_filter.  libpng reports errors by longjmp: everything that
 * must survive it (the output buffer, any packed image) lives on the heap behind m, set
 * before setjmp, and nothing is changed here after setjmp.  Returns 0 (m->data, m->len:
 * the PNG), TESS_ENOMEM or TESS_EINVAL (m->data freed). */
static int png_write_mem(png_mem *m, long w, long h, int bits, int color, const uint8_t *rows,
                         size_t stride, int swap16, int no_filter)
{
    png_structp png;
    png_infop info;
    if (png_start(&png, &info))
        return TESS_ENOMEM;
    if (setjmp(png_jmpbuf(png))) {
        int rc = m->nomem ? TESS_ENOMEM : TESS_EINVAL;
        png_destroy_write_struct(&png, &info);
        free(m->data);
        m->data = NULL;
        m->len = 0;
        return rc;
    }
    png_set_write_fn(png, m, png_mem_write, png_mem_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, bits, color, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 1);
    if (no_filter)
        png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
    png_write_info(png, info);
    if (swap16)
        png_set_swap(png);        /* PNG samples are big-endian, ours little-endian */
    for (long y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(rows + (size_t)y * stride));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return 0;
}

int png_encode_rgba(const uint8_t *rgba, long w, long h, unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!rgba || w <= 0 || h <= 0 || w > PNG_UINT_31_MAX || h > PNG_UINT_31_MAX ||
        (unsigned long)w > SIZE_MAX / 4 / (unsigned long)h)
        return TESS_EINVAL;

    png_mem *m = calloc(1, sizeof *m);
    if (!m)
        return TESS_ENOMEM;
    /* Grey+alpha when the picture is grey (half the bytes of RGBA to compress, and what
     * readers give as grey values: PIL's mode "LA"); RGBA otherwise.  No palette: readers
     * (PIL, hipspy) would hand out its indices instead of the values. */
    size_t npx = (size_t)w * (size_t)h;
    m->scratch = malloc(npx * 2);
    if (m->scratch && !pack_grey(rgba, npx, m->scratch)) {
        free(m->scratch);
        m->scratch = NULL;
    }
    /* zlib level 1 and no row filter: on renderings of the demo data (M13 grey and
     * viridis, HorseHead grey, allsky magma) this encodes 5 to 8 times faster than
     * libpng's defaults (level 6, adaptive filters) and the output is smaller, except
     * HorseHead in grey (20% larger); colour-mapped pixels repeat exactly, which
     * filters hide from zlib. */
    int rc = m->scratch
                 ? png_write_mem(m, w, h, 8, PNG_COLOR_TYPE_GRAY_ALPHA, m->scratch,
                                 (size_t)w * 2, 0, 1)
                 : png_write_mem(m, w, h, 8, PNG_COLOR_TYPE_RGB_ALPHA, rgba, (size_t)w * 4,
                                 0, 1);
    if (rc == 0) {
        *out = m->data;
        *outlen = m->len;
    }
    free(m->scratch);
    free(m);
    return rc;
}

int png_encode_grey(const void *samples, long w, long h, int bits, unsigned char **out,
                    size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!samples || (bits != 8 && bits != 16) || w <= 0 || h <= 0 || w > PNG_UINT_31_MAX ||
        h > PNG_UINT_31_MAX || (unsigned long)w > SIZE_MAX / 2 / (unsigned long)h)
        return TESS_EINVAL;
    png_mem *m = calloc(1, sizeof *m);
    if (!m)
        return TESS_ENOMEM;
    int rc = png_write_mem(m, w, h, bits, PNG_COLOR_TYPE_GRAY, samples,
                           (size_t)w * (size_t)(bits / 8), bits == 16, 0);
    if (rc == 0) {
        *out = m->data;
        *outlen = m->len;
    }
    free(m);
    return rc;
}

/* ---- JPEG ------------------------------------------------------------------------- */

/* libjpeg's error manager, extended with the place to longjmp to: libjpeg's default
 * error_exit calls exit(), which a server must never do. */
typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
} jpeg_err;

static void jpeg_quiet_exit(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    longjmp(e->jump, 1);
}

static void jpeg_quiet_message(j_common_ptr cinfo)
{
    (void)cinfo;
}

/* What must survive a longjmp out of libjpeg: on the heap, behind a pointer set before
 * setjmp (the locals of the function are indeterminate after the jump). */
typedef struct jpeg_state {
    struct jpeg_compress_struct cinfo;
    jpeg_err err;
    unsigned char *mem;        /* jpeg_mem_dest's buffer (malloc'd by libjpeg) */
    unsigned long memlen;
    unsigned char *row;        /* one RGB row */
} jpeg_state;

int jpeg_encode_rgb(const uint8_t *rgba, long w, long h, int quality, unsigned char **out,
                    size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!rgba || w <= 0 || h <= 0 || w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION ||
        quality < 1 || quality > 100)
        return TESS_EINVAL;
    jpeg_state *st = calloc(1, sizeof *st);
    if (!st)
        return TESS_ENOMEM;
    st->row = malloc((size_t)w * 3);
    if (!st->row) {
        free(st);
        return TESS_ENOMEM;
    }
    st->cinfo.err = jpeg_std_error(&st->err.mgr);
    st->err.mgr.error_exit = jpeg_quiet_exit;
    st->err.mgr.output_message = jpeg_quiet_message;
    if (setjmp(st->err.jump)) {
        /* Every failure past this point is an allocation failure: the arguments were
         * checked above and the destination is memory. */
        jpeg_destroy_compress(&st->cinfo);
        free(st->mem);
        free(st->row);
        free(st);
        return TESS_ENOMEM;
    }
    jpeg_create_compress(&st->cinfo);
    jpeg_mem_dest(&st->cinfo, &st->mem, &st->memlen);
    /* A picture whose every pixel is grey is written with one component (as PNG writes
     * grey+alpha): a third of the samples, and clients read it as greyscale. */
    int nc = pack_grey(rgba, (size_t)w * (size_t)h, NULL) ? 1 : 3;
    st->cinfo.image_width = (JDIMENSION)w;
    st->cinfo.image_height = (JDIMENSION)h;
    st->cinfo.input_components = nc;
    st->cinfo.in_color_space = nc == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&st->cinfo);
    jpeg_set_quality(&st->cinfo, quality, TRUE);
    jpeg_start_compress(&st->cinfo, TRUE);
    for (long y = 0; y < h; y++) {
        const uint8_t *src = rgba + (size_t)y * (size_t)w * 4;
        unsigned char *dst = st->row;
        for (long x = 0; x < w; x++, src += 4, dst += nc) {
            unsigned a = src[3];
            for (int c = 0; c < nc; c++)
                dst[c] = a == 255 ? src[c] : (unsigned char)((src[c] * a + 127) / 255);
        }
        JSAMPROW rows[1] = {st->row};
        jpeg_write_scanlines(&st->cinfo, rows, 1);
    }
    jpeg_finish_compress(&st->cinfo);
    jpeg_destroy_compress(&st->cinfo);
    *out = st->mem;
    *outlen = (size_t)st->memlen;
    free(st->row);
    free(st);
    return 0;
}

/* ---- FITS ------------------------------------------------------------------------- */

/* The file is written into a memory buffer (engine/fits/fitswrite.h) whose length is
 * where the data of the last HDU end.  A card cfitsio refuses gives TESS_EINVAL, size
 * overflow TESS_ERANGE, memory TESS_ENOMEM, anything else TESS_EIO. */
int fits_encode_f64(const double *data, long w, long h, long nz,
                    const char *cards, int ncards, const double *footprint,
                    unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!data || w <= 0 || h <= 0 || nz <= 0 || ncards < 0 || (ncards > 0 && !cards))
        return TESS_EINVAL;
    /* 16 bytes a pixel bound the data and the footprint (8 each) with their blocks. */
    size_t bytes16;
    if (tess_size_dims(16, (const long[]){w, h, nz}, 3, &bytes16))
        return TESS_ERANGE;
    long npix = (long)(bytes16 / 16);

    /* One allocation that, in the usual case, holds the whole file: header blocks for
     * the cards and cfitsio's own, the data, and the FOOTPRINT HDU. */
    size_t hdr_blocks = ((size_t)ncards + 48) / 36 + 1;
    size_t data_bytes = (size_t)npix * 8 + 2880;
    size_t foot_bytes = footprint ? (size_t)w * (size_t)h * 8 + 2 * 2880 : 0;
    if (hdr_blocks > (SIZE_MAX - data_bytes - foot_bytes) / 2880)
        return TESS_ERANGE;
    size_t memsize = hdr_blocks * 2880 + data_bytes + foot_bytes;

    fitswrite *f = NULL;
    int rc = fitswrite_new_mem(memsize, &f);
    if (rc)
        return rc;
    char err[256];
    fitswrite_image im = { .bitpix = -64, .naxis = nz == 1 ? 2 : 3, .naxes = { w, h, nz },
                           .cards = cards, .ncards = ncards };
    rc = fitswrite_image_hdu(f, &im, data, err, sizeof err);
    if (!rc && footprint) {
        fitswrite_image fp = { .bitpix = -64, .naxis = 2, .naxes = { w, h },
                               .extname = "FOOTPRINT",
                               .extname_comment = "weight of the input in each pixel" };
        rc = fitswrite_image_hdu(f, &fp, footprint, err, sizeof err);
    }
    if (rc) {
        fitswrite_close(f, NULL, 0);
        return rc;
    }
    return fitswrite_take(f, out, outlen);
}

/* ---- NPY -------------------------------------------------------------------------- */

/* Format 1.0 of numpy/lib/format.py (NEP 1): the magic "\x93NUMPY", version 1.0, a
 * little-endian uint16 header length, then a Python dict literal padded with blanks
 * and a final '\n' so that the data start at a multiple of 64 bytes (numpy's
 * ARRAY_ALIGN), written with the same text numpy writes.  `shape` is the dict's shape
 * tuple, "(h, w)" or "(n,)"; n elements, n * 8 within SIZE_MAX - 4096. */
static int npy_encode(const double *data, size_t n, const char *shape, unsigned char **out,
                      size_t *outlen)
{
    char dict[160];
    int dlen = snprintf(dict, sizeof dict,
                        "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape);
    if (dlen < 0 || (size_t)dlen >= sizeof dict)
        return TESS_EINVAL;
    size_t hlen = 10 + (size_t)dlen + 1;          /* magic, version, length, dict, '\n' */
    size_t total_hdr = (hlen + 63) / 64 * 64;
    size_t total = total_hdr + n * 8;
    unsigned char *b = malloc(total);
    if (!b)
        return TESS_ENOMEM;
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    size_t header_len = total_hdr - 10;
    b[8] = (unsigned char)(header_len & 0xff);
    b[9] = (unsigned char)(header_len >> 8);
    memcpy(b + 10, dict, (size_t)dlen);
    memset(b + 10 + dlen, ' ', total_hdr - 10 - (size_t)dlen - 1);
    b[total_hdr - 1] = '\n';

    unsigned char *p = b + total_hdr;
    for (size_t i = 0; i < n; i++, p += 8) {
        uint64_t u;
        memcpy(&u, &data[i], 8);
        for (int k = 0; k < 8; k++)
            p[k] = (unsigned char)(u >> (8 * k));
    }
    *out = b;
    *outlen = total;
    return 0;
}

int npy_encode_f64(const double *data, long w, long h, unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!data || w <= 0 || h <= 0)
        return TESS_EINVAL;
    if ((unsigned long)w > (SIZE_MAX - 4096) / 8 / (unsigned long)h)
        return TESS_ENOMEM;
    char shape[48];
    snprintf(shape, sizeof shape, "(%ld, %ld)", h, w);
    return npy_encode(data, (size_t)w * (size_t)h, shape, out, outlen);
}

int npy_encode_f64_1d(const double *data, long n, unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (n < 0 || (!data && n > 0))
        return TESS_EINVAL;
    if ((unsigned long)n > (SIZE_MAX - 4096) / 8)
        return TESS_ENOMEM;
    char shape[32];
    snprintf(shape, sizeof shape, "(%ld,)", n);
    return npy_encode(data, (size_t)n, shape, out, outlen);
}
