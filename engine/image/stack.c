/* Frames of a stack, one file at a time: format dispatch (FITS, PNG, TIFF), the canonical-path rule, header hashes and the PNG writer. */
#include "engine/image/stack_int.h"
#include "engine/image/pngframe.h"
#include "engine/image/tiffframe.h"
#include "engine/base/mapguard.h"
#include "engine/base/checked.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"
#include "engine/base/clock.h"
#include "engine/base/lru.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitshead.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- PNG frames ---------------------------------------------------------------- */

int frame_is_png(const char *path)
{
    unsigned char sig[8];
    return tess_read_prefix(path, sig, sizeof(sig)) && png_sig_cmp(sig, 0, sizeof(sig)) == 0;
}

/* frame_set_canonical_only: refuse paths that do not resolve to themselves. */
static atomic_int canonical_only;

void frame_set_canonical_only(int on)
{
    atomic_store(&canonical_only, on != 0);
}

/* Under frame_set_canonical_only(1): 0 when realpath(path) is path itself (or the file is
 * gone, which the read reports), else TESS_EIO with err.  The link's target is not named:
 * the message may reach a client. */
int stack_path_guard(const char *path, char *err, size_t errlen)
{
    if (!atomic_load(&canonical_only))
        return 0;
    char *real = realpath(path, NULL);
    if (!real)
        return 0;
    int same = strcmp(real, path) == 0;
    free(real);
    if (same)
        return 0;
    tess_seterr(err, errlen, "%s is no longer the file that was configured (it or a directory "
                "above it is now a symbolic link): not read", path);
    return TESS_EIO;
}

int frame_read_info(const char *path, int hdu, fitsimg_info *info, char *err, size_t errlen)
{
    int g = stack_path_guard(path, err, errlen);
    if (g) {
        memset(info, 0, sizeof(*info));
        return g;
    }
    if (tiffframe_is_tiff(path))
        return tiffframe_read_info(path, info, err, errlen);
    if (!frame_is_png(path))
        return fitsimg_read_info(path, hdu, info, err, errlen);
    memset(info, 0, sizeof(*info));
    tess_file_id id;
    int rc = tess_file_id_of(path, 0, &id, err, errlen);
    if (rc)
        return rc;
    long w, h;
    int bits;
    rc = pngframe_header(path, &w, &h, &bits, err, errlen);
    if (rc)
        return rc;
    info->naxis = 2;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        info->naxes[i] = 1;
    info->naxes[0] = w;
    info->naxes[1] = h;
    info->bitpix = bits;
    info->bscale = 1;
    info->bzero = 0;
    char c[FITSCARD_LEN];
    snprintf(c, sizeof c, "a %d-bit greyscale PNG frame", bits);
    fitscard_list l;
    fitscard_list_init(&l, 5);
    fitscard_list_logical(&l, "SIMPLE", 1, c);
    fitscard_list_int(&l, "BITPIX", bits, NULL);
    fitscard_list_int(&l, "NAXIS", 2, NULL);
    fitscard_list_int(&l, "NAXIS1", w, NULL);
    fitscard_list_int(&l, "NAXIS2", h, NULL);
    int n = 0;
    if (fitscard_list_take(&l, &info->header, &n) != 0)
        return TESS_ENOMEM;
    info->nkeys = n;
    info->file_size = id.size;
    info->mtime_ns = id.mtime_ns;
    return 0;
}

int frame_decode_check(const char *path, char *err, size_t errlen)
{
    int g = stack_path_guard(path, err, errlen);
    if (g)
        return g;
    if (tiffframe_is_tiff(path))
        return tiffframe_decode_check(path, err, errlen);
    if (!frame_is_png(path))
        return 0;
    long w, h;
    int bits;
    int rc = pngframe_header(path, &w, &h, &bits, err, errlen);
    return rc ? rc : pngframe_budget(path, w, h, bits, err, errlen);
}

/* Region of a decoded PNG frame as double or float. */
static int png_region(const char *path, long z, long x0, long y0, long w, long h, double *outd,
                      float *outf, char *err, size_t errlen)
{
    void *pix;
    long nx, ny;
    int bits;
    if (w < 1 || h < 1 || x0 < 0 || y0 < 0 || z != 0) {
        tess_seterr(err, errlen, "region outside the frame");
        return TESS_ERANGE;
    }
    int rc = pngframe_decode(path, &pix, &nx, &ny, &bits, err, errlen);
    if (rc)
        return rc;
    if (x0 + w > nx || y0 + h > ny) {
        free(pix);
        tess_seterr(err, errlen, "region %ldx%ld at (%ld, %ld) outside the %ldx%ld frame %s", w, h,
                    x0, y0, nx, ny, path);
        return TESS_ERANGE;
    }
    for (long j = 0; j < h; j++)
        for (long i = 0; i < w; i++) {
            size_t k = (size_t)(y0 + j) * (size_t)nx + (size_t)(x0 + i);
            double v = bits == 16 ? ((const uint16_t *)pix)[k] : ((const uint8_t *)pix)[k];
            if (outd)
                outd[j * w + i] = v;
            else
                outf[j * w + i] = (float)v;
        }
    free(pix);
    return 0;
}

int frame_read_region(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                      double *out, char *err, size_t errlen)
{
    int g = stack_path_guard(path, err, errlen);
    if (g)
        return g;
    if (frame_is_png(path))
        return png_region(path, z, x0, y0, w, h, out, NULL, err, errlen);
    if (tiffframe_is_tiff(path))
        return tiffframe_read_path(path, z, x0, y0, w, h, TIFFFRAME_OUT_F64, out, err, errlen);
    return fitsimg_read_region(path, hdu, z, x0, y0, w, h, out, err, errlen);
}

int frame_read_region_f32(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                          float *out, char *err, size_t errlen)
{
    int g = stack_path_guard(path, err, errlen);
    if (g)
        return g;
    if (frame_is_png(path))
        return png_region(path, z, x0, y0, w, h, NULL, out, err, errlen);
    if (tiffframe_is_tiff(path))
        return tiffframe_read_path(path, z, x0, y0, w, h, TIFFFRAME_OUT_F32, out, err, errlen);
    return fitsimg_read_region_f32(path, hdu, z, x0, y0, w, h, out, err, errlen);
}

int frame_write_png(const char *path, const unsigned short *data, long nx, long ny, int bits,
                    int level, char *err, size_t errlen)
{
    if ((bits != 8 && bits != 16) || nx < 1 || ny < 1 || level < 0 || level > 9) {
        tess_seterr(err, errlen, "bad PNG frame parameters");
        return TESS_EINVAL;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        tess_seterr(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    size_t rowbytes = (size_t)nx * (bits == 16 ? 2 : 1);
    unsigned char *row = malloc(rowbytes);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!row || !png || !info) {
        if (png)
            png_destroy_write_struct(&png, info ? &info : NULL);
        free(row);
        fclose(f);
        return TESS_ENOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(row);
        fclose(f);
        tess_seterr(err, errlen, "cannot write %s", path);
        return TESS_EIO;
    }
    png_init_io(png, f);
    png_set_compression_level(png, level);
    png_set_filter(png, 0, level <= 1 ? PNG_FILTER_NONE : PNG_ALL_FILTERS);
    png_set_IHDR(png, info, (png_uint_32)nx, (png_uint_32)ny, bits, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    unsigned maxv = bits == 16 ? 65535u : 255u;
    for (long r = 0; r < ny; r++) {
        const unsigned short *src = data + (size_t)(ny - 1 - r) * (size_t)nx;
        for (long i = 0; i < nx; i++) {
            unsigned v = src[i] > maxv ? maxv : src[i];
            if (bits == 16) {
                row[2 * i] = (unsigned char)(v >> 8);
                row[2 * i + 1] = (unsigned char)(v & 0xff);
            } else {
                row[i] = (unsigned char)v;
            }
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    if (fclose(f) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}


int frame_header_hash(const char *path, int hdu, uint64_t *hash, char *err, size_t errlen)
{
    *hash = 0;
    if (frame_is_png(path) || tiffframe_is_tiff(path))
        return 0;
    int bitpix = 0, naxis = 0, has_blank = 0;
    long naxes[FITSIMG_MAXDIM] = {1, 1, 1, 1};
    long long ds = 0, blank = 0;
    double bscale = 1, bzero = 0;
    if (hdu == 0 && fitshead_plain(path, &bitpix, &naxis, naxes, &ds, &bscale, &bzero,
                                      &has_blank, &blank, hash))
        return 0;
    return fitshead_hash(path, hdu, hash, err, errlen);
}

double stack_cache_bound(const stack *s, double frame_bytes)
{
    if (!s || !(frame_bytes > 0.0))
        return 0.0;
    double n = (double)(s->max_open < s->npaths ? s->max_open : s->npaths);
    double cap = (double)STACK_MAX_DECODED_BYTES + frame_bytes;
    return n * frame_bytes < cap ? n * frame_bytes : cap;
}
