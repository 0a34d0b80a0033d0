/* Volumes of planes: FITS cubes and stacks of FITS/PNG frames, memory-mapped or decoded, in an LRU. */
#include "imageio/stack.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Decoded frames (PNG, compressed FITS) held at most, in bytes, besides the max_open
 * bound: keeps a stack of large 16-bit frames from holding gigabytes. */
#define STACK_MAX_DECODED_BYTES ((size_t)256 << 20)

/* ---- PNG frames ---------------------------------------------------------------- */

int frame_is_png(const char *path)
{
    unsigned char sig[8];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(sig, 1, sizeof(sig), f);
    fclose(f);
    return n == sizeof(sig) && png_sig_cmp(sig, 0, sizeof(sig)) == 0;
}

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
    in->f = fopen(path, "rb");
    if (!in->f) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
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

/* Decodes the whole PNG at `path` into a malloc'd array of nx*ny uint8 or uint16
 * (bits 8 / 16), row 0 = y = 0 = the last PNG row.  Returns 0 or a TESS_E* code. */
static int png_decode_frame(const char *path, void **pix, long *nx, long *ny, int *bits,
                            char *err, size_t errlen)
{
    png_in in;
    int rc = png_in_open(&in, path, nx, ny, bits, err, errlen);
    if (rc)
        return rc;
    size_t esz = *bits == 16 ? 2 : 1;
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

/* Appends the card "KEY     = value" (integer) to `hdr` (which has room). */
static void add_card(char *hdr, int *n, const char *key, long v)
{
    char card[81];
    int len = snprintf(card, sizeof(card), "%-8.8s= %20ld", key, v);
    memset(card + len, ' ', (size_t)(80 - len));
    memcpy(hdr + (size_t)*n * 80, card, 80);
    (*n)++;
    hdr[(size_t)*n * 80] = '\0';
}

int frame_read_info(const char *path, int hdu, fitsimg_info *info, char *err, size_t errlen)
{
    if (!frame_is_png(path))
        return fitsimg_read_info(path, hdu, info, err, errlen);
    memset(info, 0, sizeof(*info));
    struct stat st;
    if (stat(path, &st) != 0) {
        tess_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    png_in in;
    long w, h;
    int bits;
    int rc = png_in_open(&in, path, &w, &h, &bits, err, errlen);
    if (rc)
        return rc;
    png_in_close(&in);
    info->naxis = 2;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        info->naxes[i] = 1;
    info->naxes[0] = w;
    info->naxes[1] = h;
    info->bitpix = bits;
    info->bscale = 1;
    info->bzero = 0;
    info->header = malloc(7 * 80 + 1);
    if (!info->header)
        return TESS_ENOMEM;
    info->header[0] = '\0';
    int n = 0;
    char simple[81];
    memset(simple, ' ', 80);
    int sl = snprintf(simple, sizeof(simple), "SIMPLE  =                    T / a %d-bit "
                      "greyscale PNG frame", bits);
    simple[sl] = ' ';
    memcpy(info->header, simple, 80);
    info->header[80] = '\0';
    n = 1;
    add_card(info->header, &n, "BITPIX", (long)bits);
    add_card(info->header, &n, "NAXIS", 2);
    add_card(info->header, &n, "NAXIS1", w);
    add_card(info->header, &n, "NAXIS2", h);
    info->nkeys = n;
    info->file_size = (long long)st.st_size;
    info->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return 0;
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
    int rc = png_decode_frame(path, &pix, &nx, &ny, &bits, err, errlen);
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
    if (frame_is_png(path))
        return png_region(path, z, x0, y0, w, h, out, NULL, err, errlen);
    return fitsimg_read_region(path, hdu, z, x0, y0, w, h, out, err, errlen);
}

int frame_read_region_f32(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                          float *out, char *err, size_t errlen)
{
    if (frame_is_png(path))
        return png_region(path, z, x0, y0, w, h, NULL, out, err, errlen);
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

/* ---- open frames ------------------------------------------------------------------ */

typedef enum { SRC_MMAP, SRC_MEM8, SRC_MEM16, SRC_MEMF64, SRC_CFITSIO } src_kind;

/* One open file of the volume: a mapping of an uncompressed FITS file, a decoded frame
 * in memory (PNG, or a compressed FITS frame), or a cfitsio fallback for compressed cubes. */
typedef struct frame {
    long idx;                 /* index into s->paths */
    src_kind kind;
    int refs;                 /* readers using it now (under s->lock) */
    int dead;                 /* evicted while in use: freed by the last release */
    struct frame *prev, *next;/* LRU list, most recently used first */
    void *map;                /* SRC_MMAP: the whole file */
    size_t maplen;
    const unsigned char *data;/* SRC_MMAP: first byte of the HDU's data */
    int bitpix;
    double bscale, bzero;
    int has_blank;
    long long blank;
    void *pix;                /* SRC_MEM*: nx*ny values, row 0 = y 0 */
    size_t pixbytes;
    long long size, mtime_ns; /* of the file when opened */
    double checked;           /* monotonic seconds of the last staleness check */
} frame;

struct stack {
    char **paths;
    int npaths;
    int hdu;
    long nx, ny, nz;
    int max_open;
    pthread_mutex_t lock;
    frame **table;            /* by path index, NULL when not open */
    frame *head, *tail;       /* LRU */
    int nopen;
    size_t decoded_bytes;
    unsigned long long opens, hits;
    unsigned long long data_bytes; /* 0 = not computed yet */
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

stack *stack_new(const char *const *paths, int npaths, int hdu, long nx, long ny, long nz,
                 int max_open)
{
    if (npaths < 1 || nx < 1 || ny < 1 || nz < 1 || (npaths != 1 && npaths != nz))
        return NULL;
    stack *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->paths = calloc((size_t)npaths, sizeof(char *));
    s->table = calloc((size_t)npaths, sizeof(frame *));
    if (!s->paths || !s->table) {
        free(s->paths);
        free(s->table);
        free(s);
        return NULL;
    }
    for (int i = 0; i < npaths; i++) {
        if (!(s->paths[i] = strdup(paths[i]))) {
            s->npaths = i;
            stack_free(s);
            return NULL;
        }
    }
    s->npaths = npaths;
    s->hdu = hdu;
    s->nx = nx;
    s->ny = ny;
    s->nz = nz;
    s->max_open = max_open < 1 ? 1 : max_open;
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

static void frame_close(frame *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->maplen);
    free(f->pix);
    free(f);
}

void stack_free(stack *s)
{
    if (!s)
        return;
    for (frame *f = s->head; f;) {
        frame *next = f->next;
        frame_close(f);
        f = next;
    }
    for (int i = 0; i < s->npaths; i++)
        free(s->paths[i]);
    free(s->paths);
    free(s->table);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static int stat_file(const char *path, long long *size, long long *mtime_ns)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    *size = (long long)st.st_size;
    *mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return 0;
}

/* Number of planes file `idx` must hold. */
static long planes_in_file(const stack *s)
{
    return s->npaths == 1 ? s->nz : 1;
}

/* Opens a FITS file: maps it when the HDU is an uncompressed image, else decodes a frame
 * (stacks) or falls back to cfitsio per read (compressed cubes). */
static int open_fits(stack *s, frame *f, const char *path, char *err, size_t errlen)
{
    fitsfile *ff = NULL;
    int status = 0, compressed = 0, bitpix = 0, naxis = 0;
    long naxes[FITSIMG_MAXDIM] = {1, 1, 1, 1};
    LONGLONG headstart = 0, datastart = 0, dataend = 0;
    double bscale = 1, bzero = 0;
    long long blank = 0;
    int has_blank = 0;
    fitsimg_cfitsio_lock();
    fits_open_diskfile(&ff, path, READONLY, &status);
    if (!status)
        fits_movabs_hdu(ff, s->hdu + 1, NULL, &status);
    if (!status)
        compressed = fits_is_compressed_image(ff, &status);
    if (!status)
        fits_get_img_param(ff, FITSIMG_MAXDIM, &bitpix, &naxis, naxes, &status);
    if (!status)
        fits_get_hduaddrll(ff, &headstart, &datastart, &dataend, &status);
    if (!status) {
        int st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BSCALE", &bscale, NULL, &st2))
            bscale = 1;
        st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BZERO", &bzero, NULL, &st2))
            bzero = 0;
        st2 = 0;
        if (bitpix > 0 && fits_read_key(ff, TLONGLONG, "BLANK", &blank, NULL, &st2) == 0)
            has_blank = 1;
    }
    char msg[FLEN_ERRMSG] = "";
    if (status)
        fits_get_errstatus(status, msg);
    int st3 = 0;
    if (ff)
        fits_close_file(ff, &st3);
    fitsimg_cfitsio_unlock();
    if (status) {
        tess_seterr(err, errlen, "%s: %s", path, msg);
        return TESS_EIO;
    }
    long nplanes = naxes[2] * naxes[3];
    if (naxis < 2 || naxes[0] != s->nx || naxes[1] != s->ny || nplanes < planes_in_file(s)) {
        tess_seterr(err, errlen, "%s is now %ld x %ld x %ld, not the %ld x %ld volume it was "
                    "when opened", path, naxes[0], naxes[1], nplanes, s->nx, s->ny);
        return TESS_EIO;
    }
    f->bitpix = bitpix;
    f->bscale = bscale;
    f->bzero = bzero;
    f->has_blank = has_blank;
    f->blank = blank;
    if (compressed) {
        if (s->npaths == 1) {
            f->kind = SRC_CFITSIO;
            return 0;
        }
        size_t n = (size_t)s->nx * (size_t)s->ny;
        double *pix = malloc(n * sizeof(double));
        if (!pix)
            return TESS_ENOMEM;
        int rc = fitsimg_read_region(path, s->hdu, 0, 0, 0, s->nx, s->ny, pix, err, errlen);
        if (rc) {
            free(pix);
            return rc;
        }
        f->kind = SRC_MEMF64;
        f->pix = pix;
        f->pixbytes = n * sizeof(double);
        return 0;
    }
    size_t bytes = (size_t)(bitpix < 0 ? -bitpix : bitpix) / 8 * (size_t)s->nx * (size_t)s->ny *
                   (size_t)planes_in_file(s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (unsigned long long)st.st_size < (unsigned long long)datastart + bytes) {
        close(fd);
        tess_seterr(err, errlen, "%s is shorter than its header says", path);
        return TESS_EIO;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        tess_seterr(err, errlen, "cannot map %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    f->kind = SRC_MMAP;
    f->map = map;
    f->maplen = (size_t)st.st_size;
    f->data = (const unsigned char *)map + datastart;
    return 0;
}

static int frame_open(stack *s, long idx, frame **out, char *err, size_t errlen)
{
    const char *path = s->paths[idx];
    frame *f = calloc(1, sizeof(*f));
    if (!f)
        return TESS_ENOMEM;
    f->idx = idx;
    f->refs = 1;
    f->checked = mono_s();
    if (stat_file(path, &f->size, &f->mtime_ns) != 0) {
        free(f);
        tess_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    int rc;
    if (frame_is_png(path)) {
        long nx, ny;
        int bits;
        rc = png_decode_frame(path, &f->pix, &nx, &ny, &bits, err, errlen);
        if (rc == 0 && (nx != s->nx || ny != s->ny || s->npaths == 1)) {
            tess_seterr(err, errlen, "%s is now %ld x %ld, not the %ld x %ld it was when opened",
                        path, nx, ny, s->nx, s->ny);
            rc = TESS_EIO;
        }
        if (rc == 0) {
            f->kind = bits == 16 ? SRC_MEM16 : SRC_MEM8;
            f->bitpix = bits;
            f->pixbytes = (size_t)nx * (size_t)ny * (bits == 16 ? 2 : 1);
        }
    } else {
        rc = open_fits(s, f, path, err, errlen);
    }
    if (rc) {
        frame_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

static void lru_unlink(stack *s, frame *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        s->head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    else
        s->tail = f->prev;
    f->prev = f->next = NULL;
}

static void lru_push_front(stack *s, frame *f)
{
    f->prev = NULL;
    f->next = s->head;
    if (s->head)
        s->head->prev = f;
    s->head = f;
    if (!s->tail)
        s->tail = f;
}

/* Removes `f` from the table and the LRU (under the lock); returns it when it may be
 * closed now (no reader), else marks it dead for the last release.  */
static frame *evict_locked(stack *s, frame *f)
{
    lru_unlink(s, f);
    s->table[f->idx] = NULL;
    s->nopen--;
    s->decoded_bytes -= f->pixbytes;
    if (f->refs == 0)
        return f;
    f->dead = 1;
    return NULL;
}

/* Evicts least recently used frames over the bounds (under the lock); the ones that
 * can be closed are chained through ->next into *closeme. */
static void trim_locked(stack *s, frame **closeme)
{
    frame *f = s->tail;
    while (f && (s->nopen > s->max_open || s->decoded_bytes > STACK_MAX_DECODED_BYTES) &&
           f != s->head) {
        frame *prev = f->prev;
        frame *c = evict_locked(s, f);
        if (c) {
            c->next = *closeme;
            *closeme = c;
        }
        f = prev;
    }
}

static void close_chain(frame *f)
{
    while (f) {
        frame *next = f->next;
        frame_close(f);
        f = next;
    }
}

/* The open frame of file `idx` with a reference for the caller (stack_release it). */
static int frame_acquire(stack *s, long idx, frame **out, char *err, size_t errlen)
{
    frame *closeme = NULL;
    pthread_mutex_lock(&s->lock);
    frame *f = s->table[idx];
    if (f) {
        double t = mono_s();
        if (t - f->checked > 1.0) {
            long long size, mtime;
            f->checked = t;
            if (stat_file(s->paths[idx], &size, &mtime) != 0 || size != f->size ||
                mtime != f->mtime_ns) {
                frame *c = evict_locked(s, f);
                if (c) {
                    c->next = NULL;
                    closeme = c;
                }
                f = NULL;
            }
        }
    }
    if (f) {
        f->refs++;
        s->hits++;
        lru_unlink(s, f);
        lru_push_front(s, f);
        pthread_mutex_unlock(&s->lock);
        close_chain(closeme);
        *out = f;
        return 0;
    }
    pthread_mutex_unlock(&s->lock);
    close_chain(closeme);
    closeme = NULL;

    frame *fresh = NULL;
    int rc = frame_open(s, idx, &fresh, err, errlen);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    s->opens++;
    f = s->table[idx];
    if (f) {                         /* another reader opened it meanwhile: use that one */
        f->refs++;
        lru_unlink(s, f);
        lru_push_front(s, f);
        fresh->next = NULL;
        closeme = fresh;
    } else {
        f = fresh;
        s->table[idx] = f;
        s->nopen++;
        s->decoded_bytes += f->pixbytes;
        lru_push_front(s, f);
        trim_locked(s, &closeme);
    }
    pthread_mutex_unlock(&s->lock);
    close_chain(closeme);
    *out = f;
    return 0;
}

static void frame_release(stack *s, frame *f)
{
    pthread_mutex_lock(&s->lock);
    int closeit = --f->refs == 0 && f->dead;
    pthread_mutex_unlock(&s->lock);
    if (closeit)
        frame_close(f);
}

/* ---- conversion ---------------------------------------------------------------------- */

static inline uint16_t be16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* Converts n pixels of `f` starting at element `off` of its data, `stride` elements
 * apart, into out[0..n-1], as cfitsio does: v * BSCALE + BZERO (not applied when they
 * are 1 and 0), BLANK -> NaN for integers. */
static void convert_run(const frame *f, size_t off, size_t n, size_t stride, double *out)
{
    const int scaled = !(f->bscale == 1.0 && f->bzero == 0.0);
    const double sc = f->bscale, zo = f->bzero;
    switch (f->kind) {
    case SRC_MEM8: {
        const uint8_t *p = (const uint8_t *)f->pix + off;
        for (size_t k = 0; k < n; k++)
            out[k] = p[k * stride];
        return;
    }
    case SRC_MEM16: {
        const uint16_t *p = (const uint16_t *)f->pix + off;
        for (size_t k = 0; k < n; k++)
            out[k] = p[k * stride];
        return;
    }
    case SRC_MEMF64: {
        const double *p = (const double *)f->pix + off;
        for (size_t k = 0; k < n; k++)
            out[k] = p[k * stride];
        return;
    }
    case SRC_CFITSIO:
        return;   /* not reached: read through cfitsio by the caller */
    case SRC_MMAP:
        break;
    }
    const unsigned char *d = f->data;
    const int blank = f->has_blank;
    const long long bv = f->blank;
/* One loop per case, so that the common ones (no BLANK, no scaling) are tight. */
#define INT_RUN(T, GET)                                                                   \
    do {                                                                                  \
        if (!blank && !scaled) {                                                          \
            for (size_t k = 0; k < n; k++)                                                \
                out[k] = (double)(T)GET(off + k * stride);                                \
        } else {                                                                          \
            for (size_t k = 0; k < n; k++) {                                              \
                T v = (T)GET(off + k * stride);                                           \
                out[k] = blank && v == bv ? NAN : scaled ? (double)v * sc + zo : (double)v; \
            }                                                                             \
        }                                                                                 \
    } while (0)
#define GET8(i) d[i]
#define GET16(i) be16(d + 2 * (i))
#define GET32(i) be32(d + 4 * (i))
#define GET64(i) be64(d + 8 * (i))
    switch (f->bitpix) {
    case 8:
        INT_RUN(uint8_t, GET8);
        break;
    case 16:
        INT_RUN(int16_t, GET16);
        break;
    case 32:
        INT_RUN(int32_t, GET32);
        break;
    case 64:
        INT_RUN(int64_t, GET64);
        break;
    case -32:
        for (size_t k = 0; k < n; k++) {
            uint32_t u = be32(d + 4 * (off + k * stride));
            float v;
            memcpy(&v, &u, sizeof(v));
            out[k] = scaled && !isnan(v) ? v * sc + zo : v;
        }
        break;
    case -64:
        for (size_t k = 0; k < n; k++) {
            uint64_t u = be64(d + 8 * (off + k * stride));
            double v;
            memcpy(&v, &u, sizeof(v));
            out[k] = scaled && !isnan(v) ? v * sc + zo : v;
        }
        break;
    default:
        for (size_t k = 0; k < n; k++)
            out[k] = NAN;
    }
#undef INT_RUN
#undef GET8
#undef GET16
#undef GET32
#undef GET64
}

/* The box (x0, y0, w, h) of plane zf of frame f into out (row-major w x h). */
static int frame_box(stack *s, frame *f, long zf, long x0, long y0, long w, long h, double *out,
                     char *err, size_t errlen)
{
    if (f->kind == SRC_CFITSIO)
        return fitsimg_read_region(s->paths[f->idx], s->hdu, zf, x0, y0, w, h, out, err, errlen);
    size_t plane = (size_t)zf * (size_t)s->nx * (size_t)s->ny;
    if (w == 1) {
        convert_run(f, plane + (size_t)y0 * (size_t)s->nx + (size_t)x0, (size_t)h, (size_t)s->nx,
                    out);
        return 0;
    }
    for (long j = 0; j < h; j++)
        convert_run(f, plane + (size_t)(y0 + j) * (size_t)s->nx + (size_t)x0, (size_t)w, 1,
                    out + (size_t)j * (size_t)w);
    return 0;
}

/* File index and plane inside it of plane z. */
static void locate(const stack *s, long z, long *idx, long *zf)
{
    if (s->npaths == 1) {
        *idx = 0;
        *zf = z;
    } else {
        *idx = z;
        *zf = 0;
    }
}

static int box_at(stack *s, long z, long x0, long y0, long w, long h, double *out, char *err,
                  size_t errlen)
{
    long idx, zf;
    locate(s, z, &idx, &zf);
    frame *f;
    int rc = frame_acquire(s, idx, &f, err, errlen);
    if (rc)
        return rc;
    rc = frame_box(s, f, zf, x0, y0, w, h, out, err, errlen);
    frame_release(s, f);
    return rc;
}

static int check_box(const stack *s, long x0, long y0, long z0, long w, long h, long d,
                     char *err, size_t errlen)
{
    if (x0 < 0 || y0 < 0 || z0 < 0 || w < 1 || h < 1 || d < 1 || x0 > s->nx - w ||
        y0 > s->ny - h || z0 > s->nz - d) {
        tess_seterr(err, errlen, "%ld x %ld x %ld at (%ld, %ld, %ld) is outside the "
                    "%ld x %ld x %ld volume", w, h, d, x0, y0, z0, s->nx, s->ny, s->nz);
        return TESS_ERANGE;
    }
    return 0;
}

int stack_read_region(stack *s, long z, long x0, long y0, long w, long h, double *out,
                      char *err, size_t errlen)
{
    int rc = check_box(s, x0, y0, z, w, h, 1, err, errlen);
    return rc ? rc : box_at(s, z, x0, y0, w, h, out, err, errlen);
}

int stack_read_xz(stack *s, long y, long x0, long z0, long w, long h, double *out,
                  char *err, size_t errlen)
{
    int rc = check_box(s, x0, y, z0, w, 1, h, err, errlen);
    for (long k = 0; k < h && !rc; k++)
        rc = box_at(s, z0 + k, x0, y, w, 1, out + (size_t)k * (size_t)w, err, errlen);
    return rc;
}

int stack_read_yz(stack *s, long x, long y0, long z0, long w, long h, double *out,
                  char *err, size_t errlen)
{
    int rc = check_box(s, x, y0, z0, 1, w, h, err, errlen);
    for (long k = 0; k < h && !rc; k++)
        rc = box_at(s, z0 + k, x, y0, 1, w, out + (size_t)k * (size_t)w, err, errlen);
    return rc;
}

int stack_read_series(stack *s, long x, long y, long z0, long n, double *out,
                      char *err, size_t errlen)
{
    int rc = check_box(s, x, y, z0, 1, 1, n, err, errlen);
    if (rc)
        return rc;
    if (s->npaths == 1) {
        /* One file: hold it once and walk the pixel down the planes. */
        frame *f;
        if ((rc = frame_acquire(s, 0, &f, err, errlen)))
            return rc;
        if (f->kind == SRC_MMAP) {
            size_t plane = (size_t)s->nx * (size_t)s->ny;
            convert_run(f, (size_t)z0 * plane + (size_t)y * (size_t)s->nx + (size_t)x, (size_t)n,
                        plane, out);
        } else {
            for (long k = 0; k < n && !rc; k++)
                rc = frame_box(s, f, z0 + k, x, y, 1, 1, out + k, err, errlen);
        }
        frame_release(s, f);
        return rc;
    }
    for (long k = 0; k < n && !rc; k++)
        rc = box_at(s, z0 + k, x, y, 1, 1, out + k, err, errlen);
    return rc;
}

unsigned long long stack_data_bytes(stack *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned long long b = s->data_bytes;
    pthread_mutex_unlock(&s->lock);
    if (b)
        return b;
    fitsimg_info info;
    char err[64];
    if (frame_read_info(s->paths[0], s->hdu, &info, err, sizeof(err)))
        return 0;
    int bp = info.bitpix < 0 ? -info.bitpix : info.bitpix;
    fitsimg_info_release(&info);
    b = (unsigned long long)s->nx * (unsigned long long)s->ny * (unsigned long long)s->nz *
        (unsigned long long)(bp / 8);
    pthread_mutex_lock(&s->lock);
    s->data_bytes = b;
    pthread_mutex_unlock(&s->lock);
    return b;
}

void stack_get_stats(stack *s, stack_stats *st)
{
    pthread_mutex_lock(&s->lock);
    st->opens = s->opens;
    st->hits = s->hits;
    st->open_now = s->nopen;
    pthread_mutex_unlock(&s->lock);
}

/* ---- reductions along z ------------------------------------------------------------- */

#define ZR_CHUNK 64      /* frames folded together over one pixel block (<= 257) */
#define ZR_BLOCK 4096    /* pixels of one block (accumulators stay in L1/L2) */
#define ZR_MAGIC 0x5a504152u   /* "ZPAR" */

enum { ZM_INT = 1, ZM_DBL = 2 };
/* Stored layouts the integer mode reads directly. */
enum { RAW_NONE = 0, RAW_U8, RAW_I16BE, RAW_U16 };

struct stack_zpart {
    int op;
    int mode;
    long npix;
    /* ZM_INT: every pixel has n values (no blanks); physical = stored + bzero */
    long long n;
    long long bzero;
    int64_t *s1;      /* sum of stored values (sum, mean, std) */
    uint64_t *s2;     /* sum of their squares (std) */
    int32_t *mm;      /* min or max stored value */
    /* ZM_DBL */
    uint32_t *cnt;    /* values seen */
    double *a;        /* sum (sum, mean), min, max, or Welford's mean (std) */
    double *b;        /* Welford's M2 (std) */
};

void stack_zpart_free(stack_zpart *p)
{
    if (!p)
        return;
    free(p->s1);
    free(p->s2);
    free(p->mm);
    free(p->cnt);
    free(p->a);
    free(p->b);
    free(p);
}

static int zop_sums(int op)
{
    return op == STACK_ZOP_SUM || op == STACK_ZOP_MEAN || op == STACK_ZOP_STD;
}

static int zop_minmax(int op)
{
    return op == STACK_ZOP_MIN || op == STACK_ZOP_MAX;
}

/* A new integer-mode partial of nothing yet. */
static stack_zpart *zpart_new_int(int op, long npix, long long bzero)
{
    stack_zpart *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->op = op;
    p->mode = ZM_INT;
    p->npix = npix;
    p->bzero = bzero;
    size_t n = (size_t)npix;
    int ok = 1;
    if (zop_sums(op))
        ok = ok && (p->s1 = calloc(n, sizeof(int64_t)));
    if (op == STACK_ZOP_STD)
        ok = ok && (p->s2 = calloc(n, sizeof(uint64_t)));
    if (zop_minmax(op)) {
        ok = ok && (p->mm = malloc(n * sizeof(int32_t)));
        for (size_t i = 0; ok && i < n; i++)
            p->mm[i] = op == STACK_ZOP_MIN ? INT32_MAX : INT32_MIN;
    }
    if (!ok) {
        stack_zpart_free(p);
        return NULL;
    }
    return p;
}

static stack_zpart *zpart_new_dbl(int op, long npix)
{
    stack_zpart *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->op = op;
    p->mode = ZM_DBL;
    p->npix = npix;
    size_t n = (size_t)npix;
    p->cnt = calloc(n, sizeof(uint32_t));
    p->a = calloc(n, sizeof(double));
    if (op == STACK_ZOP_STD)
        p->b = calloc(n, sizeof(double));
    if (!p->cnt || !p->a || (op == STACK_ZOP_STD && !p->b)) {
        stack_zpart_free(p);
        return NULL;
    }
    return p;
}

/* n*S2 - S1^2 (exact: n * the sum of squared deviations), as a double. */
static double int_m2n(long long n, int64_t s1, uint64_t s2)
{
    __int128 num = (__int128)n * (__int128)s2 - (__int128)s1 * (__int128)s1;
    return (double)num;
}

/* Converts an integer-mode partial to double mode in place (exact for sums below 2^53). */
static int zpart_to_dbl(stack_zpart *p)
{
    if (p->mode == ZM_DBL)
        return 0;
    stack_zpart *q = zpart_new_dbl(p->op, p->npix);
    if (!q)
        return TESS_ENOMEM;
    for (long i = 0; i < p->npix && p->n > 0; i++) {
        q->cnt[i] = (uint32_t)p->n;
        switch (p->op) {
        case STACK_ZOP_SUM:
        case STACK_ZOP_MEAN:
            q->a[i] = (double)(p->s1[i] + p->n * p->bzero);
            break;
        case STACK_ZOP_MIN:
        case STACK_ZOP_MAX:
            q->a[i] = (double)((long long)p->mm[i] + p->bzero);
            break;
        case STACK_ZOP_STD:
            q->a[i] = (double)p->s1[i] / (double)p->n + (double)p->bzero;
            q->b[i] = int_m2n(p->n, p->s1[i], p->s2[i]) / (double)p->n;
            break;
        }
    }
    free(p->s1);
    free(p->s2);
    free(p->mm);
    p->s1 = NULL;
    p->s2 = NULL;
    p->mm = NULL;
    p->mode = ZM_DBL;
    p->cnt = q->cnt;
    p->a = q->a;
    p->b = q->b;
    q->cnt = NULL;
    q->a = q->b = NULL;
    stack_zpart_free(q);
    return 0;
}

int stack_zpart_merge(stack_zpart *into, const stack_zpart *from)
{
    if (into->op != from->op || into->npix != from->npix)
        return TESS_EINVAL;
    long np = into->npix;
    if (into->mode == ZM_INT && from->mode == ZM_INT && into->bzero == from->bzero) {
        for (long i = 0; i < np && into->s1; i++)
            into->s1[i] += from->s1[i];
        for (long i = 0; i < np && into->s2; i++)
            into->s2[i] += from->s2[i];
        if (into->op == STACK_ZOP_MIN)
            for (long i = 0; i < np; i++)
                into->mm[i] = from->mm[i] < into->mm[i] ? from->mm[i] : into->mm[i];
        else if (into->op == STACK_ZOP_MAX)
            for (long i = 0; i < np; i++)
                into->mm[i] = from->mm[i] > into->mm[i] ? from->mm[i] : into->mm[i];
        into->n += from->n;
        return 0;
    }
    const stack_zpart *src = from;
    stack_zpart *tmp = NULL;
    if (from->mode == ZM_INT) {
        /* a converted copy of `from` */
        tmp = zpart_new_int(from->op, from->npix, from->bzero);
        if (!tmp)
            return TESS_ENOMEM;
        tmp->n = from->n;
        if (tmp->s1)
            memcpy(tmp->s1, from->s1, (size_t)np * sizeof(int64_t));
        if (tmp->s2)
            memcpy(tmp->s2, from->s2, (size_t)np * sizeof(uint64_t));
        if (tmp->mm)
            memcpy(tmp->mm, from->mm, (size_t)np * sizeof(int32_t));
        if (zpart_to_dbl(tmp)) {
            stack_zpart_free(tmp);
            return TESS_ENOMEM;
        }
        src = tmp;
    }
    if (zpart_to_dbl(into)) {
        stack_zpart_free(tmp);
        return TESS_ENOMEM;
    }
    for (long i = 0; i < np; i++) {
        uint32_t nb = src->cnt[i];
        if (nb == 0)
            continue;
        uint32_t na = into->cnt[i];
        switch (into->op) {
        case STACK_ZOP_SUM:
        case STACK_ZOP_MEAN:
            into->a[i] += src->a[i];
            break;
        case STACK_ZOP_MIN:
            if (na == 0 || src->a[i] < into->a[i])
                into->a[i] = src->a[i];
            break;
        case STACK_ZOP_MAX:
            if (na == 0 || src->a[i] > into->a[i])
                into->a[i] = src->a[i];
            break;
        case STACK_ZOP_STD: {   /* Chan, Golub & LeVeque's pairwise update */
            double dna = na, dnb = nb, nt = dna + dnb, delta = src->a[i] - into->a[i];
            into->a[i] += delta * dnb / nt;
            into->b[i] += src->b[i] + delta * delta * dna * dnb / nt;
            break;
        }
        }
        into->cnt[i] = na + nb;
    }
    stack_zpart_free(tmp);
    return 0;
}

int stack_zpart_result(const stack_zpart *p, double *out)
{
    long np = p->npix;
    if (p->mode == ZM_INT) {
        double n = (double)p->n;
        for (long i = 0; i < np; i++) {
            if (p->n == 0) {
                out[i] = p->op == STACK_ZOP_SUM ? 0.0 : NAN;
                continue;
            }
            switch (p->op) {
            case STACK_ZOP_SUM:
                out[i] = (double)(p->s1[i] + p->n * p->bzero);
                break;
            case STACK_ZOP_MEAN:
                out[i] = (double)(p->s1[i] + p->n * p->bzero) / n;
                break;
            case STACK_ZOP_MIN:
            case STACK_ZOP_MAX:
                out[i] = (double)((long long)p->mm[i] + p->bzero);
                break;
            case STACK_ZOP_STD:
                out[i] = sqrt(int_m2n(p->n, p->s1[i], p->s2[i]) / (n * n));
                break;
            }
        }
        return 1;
    }
    for (long i = 0; i < np; i++) {
        uint32_t c = p->cnt[i];
        switch (p->op) {
        case STACK_ZOP_SUM:
            out[i] = c ? p->a[i] : 0.0;
            break;
        case STACK_ZOP_MEAN:
            out[i] = c ? p->a[i] / c : NAN;
            break;
        case STACK_ZOP_MIN:
        case STACK_ZOP_MAX:
            out[i] = c ? p->a[i] : NAN;
            break;
        case STACK_ZOP_STD:
            out[i] = c ? sqrt(p->b[i] / c) : NAN;
            break;
        }
    }
    return 0;
}

/* The layout frame `f` gives the integer mode, with its BZERO in *bzero, or RAW_NONE. */
static int raw_kind(const frame *f, long long *bzero)
{
    *bzero = 0;
    if (f->kind == SRC_MEM8)
        return RAW_U8;
    if (f->kind == SRC_MEM16)
        return RAW_U16;
    if (f->kind != SRC_MMAP || f->has_blank || f->bscale != 1.0 ||
        (f->bitpix != 8 && f->bitpix != 16) || f->bzero != floor(f->bzero) ||
        fabs(f->bzero) > 2147483648.0)
        return RAW_NONE;
    *bzero = (long long)f->bzero;
    return f->bitpix == 8 ? RAW_U8 : RAW_I16BE;
}

/* First byte of plane zf of a frame read by the integer mode. */
static const unsigned char *raw_plane(const stack *s, const frame *f, long zf)
{
    size_t np = (size_t)s->nx * (size_t)s->ny;
    if (f->kind == SRC_MMAP)
        return f->data + (size_t)zf * np * (size_t)(f->bitpix / 8);
    return f->pix;
}

/* The folds are the hot loops: with GCC, vectorise them (-O2 of GCC 12 does not), with
 * an AVX2 variant picked at load time where the CPU has it. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ZR_HOT __attribute__((optimize("O3"), target_clones("avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define ZR_HOT __attribute__((optimize("O3")))
#else
#define ZR_HOT
#endif

/* Integer folds of k frames over pixels [b0, b0+n): one function per stored layout.
 * Sums of a chunk go through narrow temporaries (16 frames of uint8 fit in uint16), so
 * the inner loops vectorise; then once into the 64-bit accumulators. */
#define ZR_INT_FOLD(NAME, GET, TSUM, TSQ)                                                   \
    ZR_HOT static void NAME(stack_zpart *p, const unsigned char *const *pl, int k, size_t b0,       \
                     size_t n)                                                               \
    {                                                                                        \
        TSUM t1[ZR_BLOCK];                                                                   \
        TSQ t2[ZR_BLOCK];                                                                    \
        switch (p->op) {                                                                     \
        case STACK_ZOP_SUM:                                                                  \
        case STACK_ZOP_MEAN:                                                                 \
        case STACK_ZOP_STD: {                                                                \
            const int sq = p->op == STACK_ZOP_STD;                                           \
            memset(t1, 0, n * sizeof(TSUM));                                                 \
            if (sq)                                                                          \
                memset(t2, 0, n * sizeof(TSQ));                                              \
            for (int j = 0; j < k; j++) {                                                    \
                const unsigned char *d = pl[j];                                              \
                if (sq) {                                                                    \
                    for (size_t i = 0; i < n; i++) {                                         \
                        TSQ v = (TSQ)GET(b0 + i);                                            \
                        t1[i] += (TSUM)GET(b0 + i);                                          \
                        t2[i] += v * v;                                                      \
                    }                                                                        \
                } else {                                                                     \
                    for (size_t i = 0; i < n; i++)                                           \
                        t1[i] += (TSUM)GET(b0 + i);                                          \
                }                                                                            \
            }                                                                                \
            int64_t *s1 = p->s1 + b0;                                                        \
            for (size_t i = 0; i < n; i++)                                                   \
                s1[i] += t1[i];                                                              \
            if (sq) {                                                                        \
                uint64_t *s2 = p->s2 + b0;                                                   \
                for (size_t i = 0; i < n; i++)                                               \
                    s2[i] += (uint64_t)t2[i];                                                \
            }                                                                                \
            break;                                                                           \
        }                                                                                    \
        case STACK_ZOP_MIN:                                                                  \
            for (int j = 0; j < k; j++) {                                                    \
                const unsigned char *d = pl[j];                                              \
                int32_t *m = p->mm + b0;                                                     \
                for (size_t i = 0; i < n; i++) {                                             \
                    int32_t v = (int32_t)GET(b0 + i);                                        \
                    m[i] = v < m[i] ? v : m[i];                                              \
                }                                                                            \
            }                                                                                \
            break;                                                                           \
        case STACK_ZOP_MAX:                                                                  \
            for (int j = 0; j < k; j++) {                                                    \
                const unsigned char *d = pl[j];                                              \
                int32_t *m = p->mm + b0;                                                     \
                for (size_t i = 0; i < n; i++) {                                             \
                    int32_t v = (int32_t)GET(b0 + i);                                        \
                    m[i] = v > m[i] ? v : m[i];                                              \
                }                                                                            \
            }                                                                                \
            break;                                                                           \
        }                                                                                    \
    }
#define ZGET_U8(i) d[i]
#define ZGET_I16BE(i) ((int16_t)be16(d + 2 * (i)))
#define ZGET_U16(i) (((const uint16_t *)(const void *)d)[i])
ZR_INT_FOLD(fold_u8, ZGET_U8, uint16_t, uint32_t)
ZR_INT_FOLD(fold_i16be, ZGET_I16BE, int32_t, uint64_t)
ZR_INT_FOLD(fold_u16, ZGET_U16, uint32_t, uint64_t)
#undef ZGET_U8
#undef ZGET_I16BE
#undef ZGET_U16
#undef ZR_INT_FOLD

/* Double fold of n values v (pixels b0..) into p. */
ZR_HOT static void fold_dbl(stack_zpart *p, size_t b0, const double *v, size_t n)
{
    uint32_t *c = p->cnt + b0;
    double *a = p->a + b0;
    switch (p->op) {
    case STACK_ZOP_SUM:
    case STACK_ZOP_MEAN:
        for (size_t i = 0; i < n; i++)
            if (!isnan(v[i])) {
                c[i]++;
                a[i] += v[i];
            }
        break;
    case STACK_ZOP_MIN:
        for (size_t i = 0; i < n; i++)
            if (!isnan(v[i]) && (c[i]++ == 0 || v[i] < a[i]))
                a[i] = v[i];
        break;
    case STACK_ZOP_MAX:
        for (size_t i = 0; i < n; i++)
            if (!isnan(v[i]) && (c[i]++ == 0 || v[i] > a[i]))
                a[i] = v[i];
        break;
    case STACK_ZOP_STD: {
        double *b = p->b + b0;
        for (size_t i = 0; i < n; i++)
            if (!isnan(v[i])) {
                uint32_t k = ++c[i];
                double d = v[i] - a[i];
                a[i] += d / k;
                b[i] += d * (v[i] - a[i]);
            }
        break;
    }
    }
}

/* Asks the kernel to read ahead the pages of plane zf of a mapped frame and to map them. */
static void advise_plane(const stack *s, const frame *f, long zf)
{
    if (f->kind != SRC_MMAP)
        return;
    size_t es = (size_t)(f->bitpix < 0 ? -f->bitpix : f->bitpix) / 8;
    size_t np = (size_t)s->nx * (size_t)s->ny;
    uintptr_t a = (uintptr_t)(f->data + (size_t)zf * np * es);
    uintptr_t e = a + np * es;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    a &= ~(pg - 1);
    madvise((void *)a, e - a, MADV_WILLNEED);
#ifdef MADV_POPULATE_READ
    /* map every page of the plane in one call rather than a fault per 16 pages (Linux
     * 5.14; older kernels refuse it and the faults happen as before) */
    madvise((void *)a, e - a, MADV_POPULATE_READ);
#endif
}

int stack_zreduce(stack *s, stack_zop op, long z0, long z1, int flags,
                  const volatile int *cancel, stack_zpart **out, char *err, size_t errlen)
{
    *out = NULL;
    if (z0 < 0 || z1 > s->nz || z0 >= z1 || (int)op < 0 || op > STACK_ZOP_STD) {
        tess_seterr(err, errlen, "planes %ld..%ld outside the %ld planes", z0, z1 - 1, s->nz);
        return TESS_ERANGE;
    }
    size_t np = (size_t)s->nx * (size_t)s->ny;
    stack_zpart *p = NULL;
    double *tmp = NULL;       /* double mode: one block of converted values */
    double *whole = NULL;     /* double mode, cfitsio frames: one plane */
    int rc = 0;
    for (long zc = z0; zc < z1 && !rc; zc += ZR_CHUNK) {
        if (cancel && *cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        int k = (int)(z1 - zc < ZR_CHUNK ? z1 - zc : ZR_CHUNK), got = 0;
        frame *fr[ZR_CHUNK] = {NULL};
        long zf[ZR_CHUNK];
        for (; got < k && !rc; got++) {
            long idx;
            locate(s, zc + got, &idx, &zf[got]);
            rc = frame_acquire(s, idx, &fr[got], err, errlen);
            if (rc)
                break;
            advise_plane(s, fr[got], zf[got]);
        }
        if (rc) {
            for (int j = 0; j < got; j++)
                frame_release(s, fr[j]);
            break;
        }
        /* integer mode when every frame of the chunk has one layout and BZERO */
        long long bz0 = 0;
        int rk = flags & STACK_ZR_FORCE_DOUBLE ? RAW_NONE : raw_kind(fr[0], &bz0);
        for (int j = 1; j < k && rk != RAW_NONE; j++) {
            long long bz;
            if (raw_kind(fr[j], &bz) != rk || bz != bz0)
                rk = RAW_NONE;
        }
        if (!p)
            p = rk != RAW_NONE ? zpart_new_int(op, (long)np, bz0) : zpart_new_dbl(op, (long)np);
        if (!p)
            rc = TESS_ENOMEM;
        else if (p->mode == ZM_INT && (rk == RAW_NONE || bz0 != p->bzero))
            rc = zpart_to_dbl(p);
        if (!rc && p->mode == ZM_INT) {
            const unsigned char *pl[ZR_CHUNK];
            for (int j = 0; j < k; j++)
                pl[j] = raw_plane(s, fr[j], zf[j]);
            size_t es = rk == RAW_U8 ? 1 : 2;
            for (size_t b0 = 0; b0 < np; b0 += ZR_BLOCK) {
                size_t n = np - b0 < ZR_BLOCK ? np - b0 : ZR_BLOCK;
                /* The hardware prefetcher stops at page ends and each frame is its own
                 * stream: ask for the next block of every frame while folding this one. */
                if (b0 + n < np) {
                    size_t nb = np - b0 - n < ZR_BLOCK ? np - b0 - n : ZR_BLOCK;
                    for (int j = 0; j < k; j++)
                        for (size_t o = 0; o < nb * es; o += 64)
                            __builtin_prefetch(pl[j] + (b0 + n) * es + o, 0, 2);
                }
                if (rk == RAW_U8)
                    fold_u8(p, pl, k, b0, n);
                else if (rk == RAW_I16BE)
                    fold_i16be(p, pl, k, b0, n);
                else
                    fold_u16(p, pl, k, b0, n);
            }
            p->n += k;
        } else if (!rc) {
            int viacfitsio = 0;
            for (int j = 0; j < k; j++)
                viacfitsio |= fr[j]->kind == SRC_CFITSIO;
            if (viacfitsio) {
                if (!whole && !(whole = malloc(np * sizeof(double))))
                    rc = TESS_ENOMEM;
                for (int j = 0; j < k && !rc; j++) {
                    rc = frame_box(s, fr[j], zf[j], 0, 0, s->nx, s->ny, whole, err, errlen);
                    if (!rc)
                        fold_dbl(p, 0, whole, np);
                }
            } else {
                if (!tmp && !(tmp = malloc(ZR_BLOCK * sizeof(double))))
                    rc = TESS_ENOMEM;
                for (size_t b0 = 0; b0 < np && !rc; b0 += ZR_BLOCK) {
                    size_t n = np - b0 < ZR_BLOCK ? np - b0 : ZR_BLOCK;
                    for (int j = 0; j < k; j++) {
                        convert_run(fr[j], (size_t)zf[j] * np + b0, n, 1, tmp);
                        fold_dbl(p, b0, tmp, n);
                    }
                }
            }
        }
        for (int j = 0; j < k; j++)
            frame_release(s, fr[j]);
    }
    free(tmp);
    free(whole);
    if (rc) {
        if (rc == TESS_ENOMEM)
            tess_seterr(err, errlen, "out of memory");
        stack_zpart_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int stack_plane_hold(stack *s, long z, stack_plane *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    if (z < 0 || z >= s->nz) {
        tess_seterr(err, errlen, "plane %ld outside the %ld planes", z, s->nz);
        return TESS_ERANGE;
    }
    long idx, zf;
    locate(s, z, &idx, &zf);
    frame *f;
    int rc = frame_acquire(s, idx, &f, err, errlen);
    if (rc)
        return rc;
    p->frame_ = f;
    long long bz;
    if (raw_kind(f, &bz) == RAW_U8 && bz == 0)
        p->u8 = raw_plane(s, f, zf);
    return 0;
}

void stack_plane_release(stack *s, stack_plane *p)
{
    if (p->frame_)
        frame_release(s, p->frame_);
    memset(p, 0, sizeof(*p));
}

/* Sums, sum of squares, min and max of n stored values of one layout (pixels b0..). */
#define ZR_PLANE_STATS(NAME, GET)                                                         \
    ZR_HOT static void NAME(const unsigned char *d, size_t b0, size_t n, int64_t *s1,       \
                            unsigned __int128 *s2, int32_t *mn, int32_t *mx)               \
    {                                                                                      \
        int64_t a = 0;                                                                     \
        uint64_t q = 0;                                                                    \
        int32_t lo = *mn, hi = *mx;                                                        \
        for (size_t i = 0; i < n; i++) {                                                   \
            int32_t v = (int32_t)GET(b0 + i);                                              \
            a += v;                                                                        \
            q += (uint64_t)((int64_t)v * v);                                               \
            lo = v < lo ? v : lo;                                                          \
            hi = v > hi ? v : hi;                                                          \
        }                                                                                  \
        *s1 += a;                                                                          \
        *s2 += q;                                                                          \
        *mn = lo;                                                                          \
        *mx = hi;                                                                          \
    }
#define ZGET_U8(i) d[i]
#define ZGET_I16BE(i) ((int16_t)be16(d + 2 * (i)))
#define ZGET_U16(i) (((const uint16_t *)(const void *)d)[i])
ZR_PLANE_STATS(stats_u8, ZGET_U8)
ZR_PLANE_STATS(stats_i16be, ZGET_I16BE)
ZR_PLANE_STATS(stats_u16, ZGET_U16)
#undef ZGET_U8
#undef ZGET_I16BE
#undef ZGET_U16
#undef ZR_PLANE_STATS

int stack_reduce_plane(stack *s, long z, stack_zop op, double *out, char *err, size_t errlen)
{
    if (z < 0 || z >= s->nz) {
        tess_seterr(err, errlen, "plane %ld outside the %ld planes", z, s->nz);
        return TESS_ERANGE;
    }
    long idx, zf;
    locate(s, z, &idx, &zf);
    frame *f;
    int rc = frame_acquire(s, idx, &f, err, errlen);
    if (rc)
        return rc;
    long long bz;
    int rk = raw_kind(f, &bz);
    if (rk == RAW_NONE) {
        frame_release(s, f);
        return 1;
    }
    const unsigned char *d = raw_plane(s, f, zf);
    size_t np = (size_t)s->nx * (size_t)s->ny;
    int64_t s1 = 0;
    unsigned __int128 s2 = 0;
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    /* blocks of 4096: the 64-bit sum of squares of a block cannot overflow */
    for (size_t b0 = 0; b0 < np; b0 += ZR_BLOCK) {
        size_t n = np - b0 < ZR_BLOCK ? np - b0 : ZR_BLOCK;
        if (rk == RAW_U8)
            stats_u8(d, b0, n, &s1, &s2, &mn, &mx);
        else if (rk == RAW_I16BE)
            stats_i16be(d, b0, n, &s1, &s2, &mn, &mx);
        else
            stats_u16(d, b0, n, &s1, &s2, &mn, &mx);
    }
    frame_release(s, f);
    double n = (double)np;
    switch (op) {
    case STACK_ZOP_SUM:
        *out = (double)(s1 + (int64_t)np * bz);
        break;
    case STACK_ZOP_MEAN:
        *out = (double)(s1 + (int64_t)np * bz) / n;
        break;
    case STACK_ZOP_MIN:
        *out = (double)((long long)mn + bz);
        break;
    case STACK_ZOP_MAX:
        *out = (double)((long long)mx + bz);
        break;
    case STACK_ZOP_STD: {
        __int128 num = (__int128)np * (__int128)s2 - (__int128)s1 * (__int128)s1;
        *out = sqrt((double)num) / n;
        break;
    }
    }
    return 0;
}

/* ---- partials on disk: a header, then the arrays of the mode ---- */

typedef struct zpart_hdr {
    uint32_t magic;
    int32_t op, mode;
    int32_t pad;
    int64_t npix, n, bzero;
} zpart_hdr;

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The arrays of a partial in file order, with their element sizes. */
static int zpart_arrays(stack_zpart *p, void **arr, size_t *es)
{
    int k = 0;
    if (p->mode == ZM_INT) {
        if (zop_sums(p->op)) {
            arr[k] = p->s1;
            es[k++] = sizeof(int64_t);
        }
        if (p->op == STACK_ZOP_STD) {
            arr[k] = p->s2;
            es[k++] = sizeof(uint64_t);
        }
        if (zop_minmax(p->op)) {
            arr[k] = p->mm;
            es[k++] = sizeof(int32_t);
        }
    } else {
        arr[k] = p->cnt;
        es[k++] = sizeof(uint32_t);
        arr[k] = p->a;
        es[k++] = sizeof(double);
        if (p->op == STACK_ZOP_STD) {
            arr[k] = p->b;
            es[k++] = sizeof(double);
        }
    }
    return k;
}

/* 1 when every sum of an integer partial fits in 32 bits (pad bit 0 of the header: the
 * sums are then stored as int32, halving the file of a block of 8-bit frames). */
static int zpart_narrow(const stack_zpart *p)
{
    if (p->mode != ZM_INT || !p->s1)
        return 0;
    for (long i = 0; i < p->npix; i++)
        if (p->s1[i] < INT32_MIN || p->s1[i] > INT32_MAX)
            return 0;
    return 1;
}

int stack_zpart_save(const stack_zpart *p, const char *path, char *err, size_t errlen)
{
    int narrow = zpart_narrow(p);
    zpart_hdr h = {ZR_MAGIC, p->op, p->mode, narrow, p->npix, p->n, p->bzero};
    void *arr[3];
    size_t es[3];
    int k = zpart_arrays((stack_zpart *)p, arr, es);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || write_all(fd, &h, sizeof(h)) != 0;
    int32_t *tmp = narrow ? malloc((size_t)p->npix * sizeof(int32_t)) : NULL;
    if (narrow && !tmp)
        bad = 1;
    for (int i = 0; i < k && !bad; i++) {
        if (narrow && arr[i] == p->s1) {
            for (long j = 0; j < p->npix; j++)
                tmp[j] = (int32_t)p->s1[j];
            bad = write_all(fd, tmp, sizeof(int32_t) * (size_t)p->npix) != 0;
        } else {
            bad = write_all(fd, arr[i], es[i] * (size_t)p->npix) != 0;
        }
    }
    free(tmp);
    if (fd >= 0 && close(fd) != 0)
        bad = 1;
    if (bad) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

int stack_zpart_load(const char *path, stack_zpart **out, char *err, size_t errlen)
{
    *out = NULL;
    zpart_hdr h;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read_all(fd, &h, sizeof(h)) != 0) {
        if (fd >= 0)
            close(fd);
        tess_seterr(err, errlen, "cannot read %s", path);
        return TESS_EIO;
    }
    if (h.magic != ZR_MAGIC || h.op < 0 || h.op > STACK_ZOP_STD || h.npix < 1 ||
        (h.mode != ZM_INT && h.mode != ZM_DBL)) {
        close(fd);
        tess_seterr(err, errlen, "%s is not a reduction partial", path);
        return TESS_EINVAL;
    }
    stack_zpart *p = h.mode == ZM_INT ? zpart_new_int(h.op, (long)h.npix, h.bzero)
                                      : zpart_new_dbl(h.op, (long)h.npix);
    if (!p) {
        close(fd);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    p->n = h.n;
    void *arr[3];
    size_t es[3];
    int k = zpart_arrays(p, arr, es), bad = 0;
    int narrow = h.mode == ZM_INT && (h.pad & 1) && p->s1;
    for (int i = 0; i < k && !bad; i++) {
        if (narrow && arr[i] == p->s1) {
            /* int32 sums, widened in place from the end of the array */
            int32_t *n32 = (int32_t *)(void *)p->s1;
            bad = read_all(fd, n32, sizeof(int32_t) * (size_t)p->npix) != 0;
            for (long j = p->npix - 1; j >= 0 && !bad; j--)
                p->s1[j] = n32[j];
        } else {
            bad = read_all(fd, arr[i], es[i] * (size_t)p->npix) != 0;
        }
    }
    close(fd);
    if (bad) {
        stack_zpart_free(p);
        tess_seterr(err, errlen, "cannot read %s (short)", path);
        return TESS_EIO;
    }
    *out = p;
    return 0;
}
