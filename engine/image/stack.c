/* Volumes of planes: FITS cubes and stacks of FITS/PNG frames, memory-mapped or decoded, in an LRU. */
#include "engine/image/stack.h"
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

#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
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

/* Decoded frames (PNG, compressed FITS) held at most, in bytes, besides the max_open
 * bound: keeps a stack of large 16-bit frames from holding gigabytes. */
#define STACK_MAX_DECODED_BYTES ((size_t)256 << 20)

/* Decoded frames one z-reduction chunk holds at most, in bytes, plus one frame
 * (stack_zreduce): a chunk of up to ZR_CHUNK frames ends early once the decoded frames it
 * acquired (PNG, compressed FITS: heap copies, pinned while held even when the LRU above
 * has dropped them) pass it.  Mapped FITS frames count nothing (their pages are the page
 * cache's).  256 decoded 2000x2000 16-bit PNG frames were 2 GB a reader thread; 64 MB is
 * 8 of them, whose decoding costs far more than the extra flushes of the shorter
 * chunks' narrow sums. */
#define ZR_CHUNK_BYTES ((size_t)64 << 20)

/* ---- PNG frames ---------------------------------------------------------------- */

int frame_is_png(const char *path)
{
    /* open/pread, not stdio: this runs at every opening of a frame */
    unsigned char sig[8];
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, sig, sizeof(sig), 0);
    close(fd);
    return n == (ssize_t)sizeof(sig) && png_sig_cmp(sig, 0, sizeof(sig)) == 0;
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
static int path_guard(const char *path, char *err, size_t errlen)
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
    int g = path_guard(path, err, errlen);
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
    int g = path_guard(path, err, errlen);
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
    int g = path_guard(path, err, errlen);
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
    int g = path_guard(path, err, errlen);
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

/* ---- open frames ------------------------------------------------------------------ */

typedef enum { SRC_MMAP, SRC_MEM8, SRC_MEM16, SRC_MEMF64, SRC_CFITSIO, SRC_TIFF } src_kind;

/* One open file of the volume: a mapping of an uncompressed FITS file, a decoded frame
 * in memory (PNG, an 8/16-bit unsigned TIFF frame, or a compressed FITS frame), a cfitsio
 * fallback for compressed cubes, or a TIFF file read through libtiff at each read (the
 * pages of a multi-page file, signed or float frames). */
typedef struct frame {
    long idx;                 /* index into s->paths */
    src_kind kind;
    int refs;                 /* readers using it now (under s->lock) */
    int dead;                 /* evicted while in use: freed by the last release */
    lru_node lru;             /* LRU list, most recently used first */
    struct frame *close_next; /* next on a local list of frames to close (close_chain) */
    void *map;                /* SRC_MMAP: the whole file */
    size_t maplen;
    const unsigned char *data;/* SRC_MMAP: first byte of the HDU's data */
    int bitpix;
    double bscale, bzero;
    int has_blank;
    long long blank;
    void *pix;                /* SRC_MEM*: nx*ny values, row 0 = y 0 */
    size_t pixbytes;
    tess_file_id id;          /* of the file when opened (stat(2) before reading it) */
    long long datastart;      /* SRC_MMAP: file offset of `data` */
    double checked;           /* monotonic seconds of the last staleness check */
    int guard;                /* SRC_MMAP: mapguard slot of the map, or -1 */
    tiffframe *tif;           /* SRC_TIFF: the open file */
} frame;

struct stack {
    char **paths;
    int npaths;
    int hdu;
    long nx, ny, nz;
    int max_open;
    pthread_mutex_t lock;
    frame **table;            /* by path index, NULL when not open */
    lru_list lru;             /* the open frames, most recently used first */
    int nopen;
    size_t decoded_bytes;     /* of the frames in the LRU (STACK_MAX_DECODED_BYTES) */
    size_t live_bytes;        /* of every decoded frame in memory: in the LRU, or dropped
                                 from it but still held by a reader */
    size_t live_peak;         /* highest live_bytes */
    size_t zr_chunk_bytes;    /* ZR_CHUNK_BYTES, or stack_set_zr_chunk_bytes's */
    size_t zr_held_peak;      /* most decoded bytes one z-reduction chunk held */
    unsigned long long opens, hits;
    unsigned long long data_bytes; /* 0 = not computed yet */
    uint64_t *header_hash;    /* per path, frame_header_hash when the dataset was opened
                                 (0: not checked), or NULL (stack_expect_headers) */
    int bitpix;               /* of every PNG or TIFF frame (0: not checked;
                                 stack_expect_bitpix) */
};

stack *stack_new(const char *const *paths, int npaths, int hdu, long nx, long ny, long nz,
                 int max_open)
{
    size_t vol;
    if (npaths < 1 || nx < 1 || ny < 1 || nz < 1 || (npaths != 1 && npaths != nz) ||
        tess_size_dims(sizeof(double), (const long[]){nx, ny, nz}, 3, &vol))
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
    s->zr_chunk_bytes = ZR_CHUNK_BYTES;
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

/* Counts a decoded frame of `bytes` in (add) or out of memory (live_bytes). */
static void live_account(stack *s, size_t bytes, int add)
{
    if (!bytes)
        return;
    pthread_mutex_lock(&s->lock);
    if (add) {
        s->live_bytes += bytes;
        if (s->live_bytes > s->live_peak)
            s->live_peak = s->live_bytes;
    } else {
        s->live_bytes -= bytes;
    }
    pthread_mutex_unlock(&s->lock);
}

/* Frees frame f (not under the lock): pixbytes, counted in by frame_open, go out. */
static void frame_close(stack *s, frame *f)
{
    if (!f)
        return;
    live_account(s, f->pixbytes, 0);
    if (f->map) {
        mapguard_remove(f->guard);
        munmap(f->map, f->maplen);
    }
    tiffframe_close(f->tif);
    free(f->pix);
    free(f);
}

void stack_free(stack *s)
{
    if (!s)
        return;
    for (lru_node *n = s->lru.front; n;) {
        lru_node *next = n->next;
        frame_close(s, LRU_ENTRY(n, frame, lru));
        n = next;
    }
    for (int i = 0; i < s->npaths; i++)
        free(s->paths[i]);
    free(s->paths);
    free(s->table);
    free(s->header_hash);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Whether `st` (of a descriptor opened anew on the path) is the file that frame `f`
 * read: the same identity (inode, size, mtime, ctime). */
static int same_file(const frame *f, const struct stat *st)
{
    tess_file_id now;
    tess_file_id_from_stat(st, &now);
    return tess_file_id_same(&now, &f->id);
}

/* Number of planes file `idx` must hold. */
static long planes_in_file(const stack *s)
{
    return s->npaths == 1 ? s->nz : 1;
}

/* The value of header card `card` (80 characters) as an integer / a real: 1 when it is
 * one (digits, an optional sign, for reals a fraction and an E or D exponent, then only
 * blanks or a comment), else 0. */
static int card_value(const char *card, long long *iv, double *dv)
{
    char v[72];
    memcpy(v, card + 10, 70);
    v[70] = '\0';
    char *slash = strchr(v, '/');
    if (slash)
        *slash = '\0';
    for (char *c = v; *c; c++)
        if (*c == 'D' || *c == 'd')
            *c = 'E';   /* FITS allows a D exponent */
    char *end;
    errno = 0;
    if (iv)
        *iv = strtoll(v, &end, 10);
    else
        *dv = strtod(v, &end);
    if (end == v || errno)
        return 0;
    while (*end == ' ')
        end++;
    return *end == '\0';
}

/* The primary header of a plain FITS image, parsed here rather than by cfitsio, whose
 * opening of a file (fopen, a read for its compression check, realpath, under the
 * global cfitsio lock) was a tenth of a reduction over a stack of 1 MB frames.  Reads
 * SIMPLE = T, BITPIX, NAXIS, NAXISn (the first 4), BSCALE, BZERO, BLANK (first
 * occurrences, as fits_read_key) up to END; the data start at the next 2880-byte block.
 * Returns 1 with the fields set, or 0 for anything else (no SIMPLE = T first, random
 * groups, NAXIS < 2, an unparsable value, no END in the first 100 blocks): cfitsio then
 * reads the file as before.  *hhash receives the FNV-1a 64 hash of the header blocks
 * read (the whole header, END's block included). */
static int fits_plain_header(const char *path, int *bitpix, int *naxis, long *naxes,
                             long long *datastart, double *bscale, double *bzero,
                             int *has_blank, long long *blank, uint64_t *hhash)
{
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    char blk[2880];
    uint64_t h = TESS_FNV64_OFFSET;
    int ok = 0, seen_bitpix = 0, seen_naxis = 0, seen_bscale = 0, seen_bzero = 0;
    int seen_ax[FITSIMG_MAXDIM] = {0};
    for (int b = 0; b < 100 && !ok; b++) {
        if (pread(fd, blk, sizeof(blk), (off_t)b * 2880) != (ssize_t)sizeof(blk))
            break;
        h = tess_fnv1a64(blk, sizeof(blk), h);
        int bad = 0;
        for (int c = 0; c < 36 && !ok && !bad; c++) {
            const char *card = blk + c * 80;
            long long iv;
            double dv;
            int val = card[8] == '=' && card[9] == ' ';
            if (b == 0 && c == 0) {
                bad = memcmp(card, "SIMPLE  = ", 10) != 0 || card[29] != 'T';
            } else if (memcmp(card, "END     ", 8) == 0) {
                ok = 1;
                *datastart = (long long)(b + 1) * 2880;
            } else if (!val) {
                continue;   /* COMMENT, HISTORY, blank cards */
            } else if (memcmp(card, "BITPIX  ", 8) == 0 && !seen_bitpix) {
                bad = !card_value(card, &iv, NULL) ||
                      (iv != 8 && iv != 16 && iv != 32 && iv != 64 && iv != -32 && iv != -64);
                *bitpix = (int)iv;
                seen_bitpix = 1;
            } else if (memcmp(card, "NAXIS   ", 8) == 0 && !seen_naxis) {
                bad = !card_value(card, &iv, NULL) || iv < 2 || iv > 999;
                *naxis = (int)iv;
                seen_naxis = 1;
            } else if (memcmp(card, "NAXIS", 5) == 0 && card[5] >= '1' && card[5] <= '4' &&
                       card[6] == ' ') {
                int a = card[5] - '1';
                if (!seen_ax[a]) {
                    bad = !card_value(card, &iv, NULL) || iv < 1 || iv > 2147483647LL;
                    naxes[a] = (long)iv;
                    seen_ax[a] = 1;
                }
            } else if (memcmp(card, "GROUPS  ", 8) == 0) {
                bad = 1;    /* random groups */
            } else if (memcmp(card, "BSCALE  ", 8) == 0 && !seen_bscale) {
                bad = !card_value(card, NULL, &dv);
                *bscale = dv;
                seen_bscale = 1;
            } else if (memcmp(card, "BZERO   ", 8) == 0 && !seen_bzero) {
                bad = !card_value(card, NULL, &dv);
                *bzero = dv;
                seen_bzero = 1;
            } else if (memcmp(card, "BLANK   ", 8) == 0 && !*has_blank) {
                bad = !card_value(card, &iv, NULL);
                *blank = iv;
                *has_blank = 1;
            }
        }
        if (bad)
            break;
    }
    close(fd);
    if (!ok || !seen_bitpix || !seen_naxis)
        return 0;
    for (int a = 0; a < FITSIMG_MAXDIM; a++) {
        if (a < *naxis && !seen_ax[a])
            return 0;
        if (a >= *naxis)
            naxes[a] = 1;
    }
    if (*bitpix < 0)
        *has_blank = 0;   /* as cfitsio: BLANK only for integer images */
    *hhash = h;
    return 1;
}

/* A descriptor of `path` for cfitsio to open (tess_fd_name): a regular file that is not
 * whole-file compressed.  Returns it (>= 0; the caller closes it), or TESS_EIO / TESS_EINVAL
 * with err. */
static int open_for_cfitsio(const char *path, char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return TESS_EIO;
    int rc = fitsimg_check_fd_not_compressed(fd, path, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

/* The image parameters of HDU s->hdu of `path` through cfitsio (any FITS file: extensions,
 * tile-compressed images; not a whole-file compressed one, fitsimg_check_not_compressed).
 * Returns 0 or TESS_EIO / TESS_EINVAL with err. */
static int open_fits_cfitsio(stack *s, const char *path, int *compressed, int *bitpix,
                             int *naxis, long *naxes, LONGLONG *datastart, double *bscale,
                             double *bzero, int *has_blank, long long *blank, char *err,
                             size_t errlen)
{
    fitsfile *ff = NULL;
    int status = 0;
    LONGLONG headstart = 0, dataend = 0;
    int fd = open_for_cfitsio(path, err, errlen);
    if (fd < 0)
        return fd;
    char name[PATH_MAX];
    fitsimg_cfitsio_lock();
    fits_open_diskfile(&ff, tess_fd_name(fd, path, name, sizeof(name)), READONLY, &status);
    close(fd);
    if (!status)
        fits_movabs_hdu(ff, s->hdu + 1, NULL, &status);
    if (!status)
        *compressed = fits_is_compressed_image(ff, &status);
    if (!status)
        fits_get_img_param(ff, FITSIMG_MAXDIM, bitpix, naxis, naxes, &status);
    if (!status)
        fits_get_hduaddrll(ff, &headstart, datastart, &dataend, &status);
    if (!status) {
        int st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BSCALE", bscale, NULL, &st2))
            *bscale = 1;
        st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BZERO", bzero, NULL, &st2))
            *bzero = 0;
        st2 = 0;
        if (*bitpix > 0 && fits_read_key(ff, TLONGLONG, "BLANK", blank, NULL, &st2) == 0)
            *has_blank = 1;
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
    return 0;
}

/* The hash of the header of HDU `hdu` through cfitsio: its bytes from the HDU's start to
 * its data, read from the descriptor cfitsio was given.  Returns 0 or TESS_EIO /
 * TESS_EINVAL with err. */
static int header_hash_cfitsio(const char *path, int hdu, uint64_t *hash, char *err,
                               size_t errlen)
{
    fitsfile *ff = NULL;
    int status = 0;
    LONGLONG headstart = 0, datastart = 0, dataend = 0;
    int fd = open_for_cfitsio(path, err, errlen);
    if (fd < 0)
        return fd;
    char name[PATH_MAX], msg[FLEN_ERRMSG] = "";
    fitsimg_cfitsio_lock();
    fits_open_diskfile(&ff, tess_fd_name(fd, path, name, sizeof(name)), READONLY, &status);
    if (!status)
        fits_movabs_hdu(ff, hdu + 1, NULL, &status);
    if (!status)
        fits_get_hduaddrll(ff, &headstart, &datastart, &dataend, &status);
    if (status)
        fits_get_errstatus(status, msg);
    int st2 = 0;
    if (ff)
        fits_close_file(ff, &st2);
    fitsimg_cfitsio_unlock();
    if (status) {
        close(fd);
        tess_seterr(err, errlen, "%s: %s", path, msg);
        return TESS_EIO;
    }
    uint64_t h = TESS_FNV64_OFFSET;
    char blk[2880];
    for (LONGLONG at = headstart; at < datastart; at += (LONGLONG)sizeof(blk)) {
        size_t want = datastart - at < (LONGLONG)sizeof(blk) ? (size_t)(datastart - at)
                                                             : sizeof(blk);
        if (tess_pread_all(fd, blk, want, (off_t)at) != 0) {
            tess_seterr(err, errlen, "cannot read the header of %s: %s", path, strerror(errno));
            close(fd);
            return TESS_EIO;
        }
        h = tess_fnv1a64(blk, want, h);
    }
    close(fd);
    *hash = h;
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
    if (hdu == 0 && fits_plain_header(path, &bitpix, &naxis, naxes, &ds, &bscale, &bzero,
                                      &has_blank, &blank, hash))
        return 0;
    return header_hash_cfitsio(path, hdu, hash, err, errlen);
}

void stack_expect_bitpix(stack *s, int bitpix)
{
    s->bitpix = bitpix;
}

/* Whether a PNG or TIFF frame of stack s opened again (`path`) is of the
 * stack's shape and bit depth, from its header alone.  Returns 0 or TESS_EIO with err. */
static int frame_alike(const stack *s, const char *path, long nx, long ny, int bitpix,
                       char *err, size_t errlen)
{
    if (nx != s->nx || ny != s->ny) {
        tess_seterr(err, errlen, "%s is now %ld x %ld, not the %ld x %ld it was when opened",
                    path, nx, ny, s->nx, s->ny);
        return TESS_EIO;
    }
    if (s->bitpix && bitpix != s->bitpix) {
        tess_seterr(err, errlen, "frame %s is now BITPIX %d, not the stack's BITPIX %d", path,
                    bitpix, s->bitpix);
        return TESS_EIO;
    }
    return 0;
}

int stack_expect_headers(stack *s, const uint64_t *hashes)
{
    uint64_t *h = malloc((size_t)s->npaths * sizeof(*h));
    if (!h)
        return TESS_ENOMEM;
    memcpy(h, hashes, (size_t)s->npaths * sizeof(*h));
    free(s->header_hash);
    s->header_hash = h;
    return 0;
}

/* Opens a FITS file: maps it when the HDU is an uncompressed image, else decodes a frame
 * (stacks) or falls back to cfitsio per read (compressed cubes). */
static int open_fits(stack *s, frame *f, const char *path, char *err, size_t errlen)
{
    int compressed = 0, bitpix = 0, naxis = 0;
    long naxes[FITSIMG_MAXDIM] = {1, 1, 1, 1};
    LONGLONG datastart = 0;
    double bscale = 1, bzero = 0;
    long long blank = 0, ds = 0;
    int has_blank = 0;
    uint64_t hhash = 0;
    if (s->hdu == 0 && fits_plain_header(path, &bitpix, &naxis, naxes, &ds, &bscale, &bzero,
                                         &has_blank, &blank, &hhash)) {
        datastart = (LONGLONG)ds;
    } else {
        bitpix = naxis = 0;
        for (int a = 0; a < FITSIMG_MAXDIM; a++)
            naxes[a] = 1;
        bscale = 1;
        bzero = 0;
        has_blank = 0;
        blank = 0;
        int rc = open_fits_cfitsio(s, path, &compressed, &bitpix, &naxis, naxes, &datastart,
                                   &bscale, &bzero, &has_blank, &blank, err, errlen);
        if (!rc && s->header_hash && s->header_hash[f->idx])
            rc = header_hash_cfitsio(path, s->hdu, &hhash, err, errlen);
        if (rc)
            return rc;
    }
    if (s->header_hash && s->header_hash[f->idx] && hhash != s->header_hash[f->idx]) {
        tess_seterr(err, errlen, "the header of %s changed since it was opened; only its "
                    "pixels may change while it is read", path);
        return TESS_EIO;
    }
    long nplanes;
    if (tess_long_mul(naxes[2], naxes[3], &nplanes) || naxis < 2 || naxes[0] != s->nx ||
        naxes[1] != s->ny || nplanes < planes_in_file(s)) {
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
        int rc = decodelimit_check("the tile-compressed frame", path, s->nx, s->ny, 1,
                                   sizeof(double), err, errlen);
        if (rc)
            return rc;
        size_t n = (size_t)s->nx * (size_t)s->ny;
        double *pix = malloc(n * sizeof(double));
        if (!pix) {
            tess_seterr(err, errlen, "out of memory decompressing %s", path);
            return TESS_ENOMEM;
        }
        rc = fitsimg_read_region(path, s->hdu, 0, 0, 0, s->nx, s->ny, pix, err, errlen);
        if (rc) {
            free(pix);
            return rc;
        }
        f->kind = SRC_MEMF64;
        f->pix = pix;
        f->pixbytes = n * sizeof(double);
        return 0;
    }
    /* The data the volume reads must lie in the file: checked sizes, so that a header
     * whose product of NAXISn wraps around cannot pass for a small one. */
    size_t bytes, end = TESS_SIZE_MAX;
    int sized = tess_size_dims((size_t)(bitpix < 0 ? -bitpix : bitpix) / 8,
                               (const long[]){s->nx, s->ny, planes_in_file(s)}, 3, &bytes) == 0
                && datastart >= 0 && tess_size_add(bytes, (size_t)datastart, &end) == 0;
    struct stat st;
    int fd = tess_open_regular(path, 0, &st, err, errlen);
    if (fd < 0)
        return TESS_EIO;
    if (!sized || (unsigned long long)st.st_size < end) {
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
    f->guard = mapguard_add(map, f->maplen);
    f->data = (const unsigned char *)map + datastart;
    f->datastart = (long long)datastart;
    return 0;
}

/* Opens a TIFF file (engine/image/tiffframe.h): an 8 or 16-bit unsigned frame of a stack
 * is decoded whole, as a PNG frame; other frames and the pages of a file that is the
 * whole volume are read through libtiff at each read. */
static int open_tiff(stack *s, frame *f, const char *path, char *err, size_t errlen)
{
    tiffframe_shape sh;
    int rc = tiffframe_open(path, &f->tif, err, errlen);
    if (rc)
        return rc;
    tiffframe_get_shape(f->tif, &sh);
    if (sh.nx != s->nx || sh.ny != s->ny || sh.npages < planes_in_file(s)) {
        tess_seterr(err, errlen, "%s is now %ld x %ld x %ld, not the %ld x %ld volume it was "
                    "when opened", path, sh.nx, sh.ny, sh.npages, s->nx, s->ny);
        return TESS_EIO;
    }
    if ((rc = frame_alike(s, path, sh.nx, sh.ny,
                          sh.type == TIFFFRAME_F32 ? -32 : 8 * sh.esize, err, errlen)))
        return rc;
    f->kind = SRC_TIFF;
    if (s->npaths == 1 || (sh.type != TIFFFRAME_U8 && sh.type != TIFFFRAME_U16))
        return 0;
    size_t n = (size_t)s->nx * (size_t)s->ny;
    if ((rc = tiffframe_budget(f->tif, err, errlen)))
        return rc;
    if (!(f->pix = malloc(n * (size_t)sh.esize))) {
        tess_seterr(err, errlen, "out of memory decoding %s", path);
        return TESS_ENOMEM;
    }
    rc = tiffframe_read(f->tif, 0, 0, 0, s->nx, s->ny, TIFFFRAME_OUT_STORED, f->pix, err, errlen);
    tiffframe_close(f->tif);
    f->tif = NULL;
    f->kind = sh.esize == 1 ? SRC_MEM8 : SRC_MEM16;
    f->bitpix = 8 * sh.esize;
    f->pixbytes = n * (size_t)sh.esize;
    return rc;
}

static int frame_open(stack *s, long idx, frame **out, char *err, size_t errlen)
{
    const char *path = s->paths[idx];
    int g = path_guard(path, err, errlen);
    if (g)
        return g;
    frame *f = calloc(1, sizeof(*f));
    if (!f) {
        tess_seterr(err, errlen, "out of memory opening %s", path);
        return TESS_ENOMEM;
    }
    f->idx = idx;
    f->refs = 1;
    f->guard = -1;
    f->checked = tess_mono_s();
    if (tess_file_id_of(path, 0, &f->id, err, errlen) != 0) {
        free(f);
        return TESS_EIO;
    }
    int rc;
    if (tiffframe_is_tiff(path)) {
        rc = open_tiff(s, f, path, err, errlen);
    } else if (frame_is_png(path)) {
        long nx, ny;
        int bits;
        /* the header first: a frame of another size or depth is refused undecoded */
        rc = pngframe_header(path, &nx, &ny, &bits, err, errlen);
        if (rc == 0 && s->npaths == 1) {
            tess_seterr(err, errlen, "%s is now a PNG frame, not the volume it was when opened",
                        path);
            rc = TESS_EIO;
        }
        if (rc == 0)
            rc = frame_alike(s, path, nx, ny, bits, err, errlen);
        if (rc == 0)
            rc = pngframe_decode(path, &f->pix, &nx, &ny, &bits, err, errlen);
        if (rc == 0)   /* the file changed between its header and its decoding */
            rc = frame_alike(s, path, nx, ny, bits, err, errlen);
        if (rc == 0) {
            f->kind = bits == 16 ? SRC_MEM16 : SRC_MEM8;
            f->bitpix = bits;
            f->pixbytes = (size_t)nx * (size_t)ny * (bits == 16 ? 2 : 1);
        }
    } else {
        rc = open_fits(s, f, path, err, errlen);
    }
    if (rc) {
        f->pixbytes = 0;   /* never counted in */
        frame_close(s, f);
        return rc;
    }
    live_account(s, f->pixbytes, 1);
    *out = f;
    return 0;
}

/* Removes `f` from the table and the LRU (under the lock); returns it when it may be
 * closed now (no reader), else marks it dead for the last release.  */
static frame *evict_locked(stack *s, frame *f)
{
    lru_remove(&s->lru, &f->lru);
    s->table[f->idx] = NULL;
    s->nopen--;
    s->decoded_bytes -= f->pixbytes;
    if (f->refs == 0)
        return f;
    f->dead = 1;
    return NULL;
}

/* Evicts least recently used frames over the bounds (under the lock); the ones that
 * can be closed are chained through ->close_next into *closeme. */
static void trim_locked(stack *s, frame **closeme)
{
    lru_node *n = s->lru.back;
    while (n && (s->nopen > s->max_open || s->decoded_bytes > STACK_MAX_DECODED_BYTES) &&
           n != s->lru.front) {
        lru_node *prev = n->prev;
        frame *c = evict_locked(s, LRU_ENTRY(n, frame, lru));
        if (c) {
            c->close_next = *closeme;
            *closeme = c;
        }
        n = prev;
    }
}

static void close_chain(stack *s, frame *f)
{
    while (f) {
        frame *next = f->close_next;
        frame_close(s, f);
        f = next;
    }
}

/* The open frame of file `idx` with a reference for the caller (stack_release it). */
static int frame_acquire(stack *s, long idx, frame **out, char *err, size_t errlen)
{
    frame *closeme = NULL;
    pthread_mutex_lock(&s->lock);
    frame *f = s->table[idx];
    if (f && mapguard_faulted(f->guard)) {
        /* The file was truncated under the map (engine/base/mapguard.h): open it again. */
        frame *c = evict_locked(s, f);
        if (c) {
            c->close_next = NULL;
            closeme = c;
        }
        f = NULL;
    }
    if (f) {
        /* A stat(2) at every acquisition (about a microsecond), not once a second: what a
         * request reads is then never older than the version it put in its cache key
         * (taken before: daemon/catalog.h dataset_version), so a replaced file cannot
         * leave its old pixels in the cache under the new version. */
        double t = tess_mono_s();
        if (t - f->checked >= 0.0) {
            tess_file_id now;
            f->checked = t;
            if (tess_file_id_of(s->paths[idx], 0, &now, NULL, 0) != 0 ||
                !tess_file_id_same(&now, &f->id)) {
                frame *c = evict_locked(s, f);
                if (c) {
                    c->close_next = NULL;
                    closeme = c;
                }
                f = NULL;
            }
        }
    }
    if (f) {
        f->refs++;
        s->hits++;
        lru_move_front(&s->lru, &f->lru);
        pthread_mutex_unlock(&s->lock);
        close_chain(s, closeme);
        *out = f;
        return 0;
    }
    pthread_mutex_unlock(&s->lock);
    close_chain(s, closeme);
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
        lru_move_front(&s->lru, &f->lru);
        fresh->close_next = NULL;
        closeme = fresh;
    } else {
        f = fresh;
        s->table[idx] = f;
        s->nopen++;
        s->decoded_bytes += f->pixbytes;
        lru_push_front(&s->lru, &f->lru);
        trim_locked(s, &closeme);
    }
    pthread_mutex_unlock(&s->lock);
    close_chain(s, closeme);
    *out = f;
    return 0;
}

/* Drops the caller's reference.  Returns 1 when the frame's map took a SIGBUS (the file
 * was truncated while mapped: what was read from it is not the file's), else 0; the
 * caller then fails its read with frame_fault_error. */
static int frame_release(stack *s, frame *f)
{
    int faulted = mapguard_faulted(f->guard);
    pthread_mutex_lock(&s->lock);
    int closeit = --f->refs == 0 && f->dead;
    pthread_mutex_unlock(&s->lock);
    if (closeit)
        frame_close(s, f);
    return faulted;
}

static int frame_fault_error(stack *s, long idx, char *err, size_t errlen)
{
    tess_seterr(err, errlen, "%s was truncated while being read", s->paths[idx]);
    return TESS_EIO;
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
    case SRC_TIFF:
        return;   /* not reached: read through cfitsio or libtiff by the caller */
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
    if (f->kind == SRC_TIFF)
        return tiffframe_read(f->tif, zf, x0, y0, w, h, TIFFFRAME_OUT_F64, out, err, errlen);
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

/* The frame that holds plane z, acquired (frame_release it), with the file index and the
 * plane inside the file.  TESS_ERANGE for z outside the stack, else frame_acquire's codes. */
static int plane_frame(stack *s, long z, frame **f, long *idx, long *zf, char *err,
                       size_t errlen)
{
    if (z < 0 || z >= s->nz) {
        tess_seterr(err, errlen, "plane %ld outside the %ld planes", z, s->nz);
        return TESS_ERANGE;
    }
    locate(s, z, idx, zf);
    return frame_acquire(s, *idx, f, err, errlen);
}

static int box_at(stack *s, long z, long x0, long y0, long w, long h, double *out, char *err,
                  size_t errlen)
{
    long idx, zf;
    frame *f;
    int rc = plane_frame(s, z, &f, &idx, &zf, err, errlen);
    if (rc)
        return rc;
    rc = frame_box(s, f, zf, x0, y0, w, h, out, err, errlen);
    if (frame_release(s, f) && rc == 0)
        rc = frame_fault_error(s, idx, err, errlen);
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

/* A cut through the planes [z0, z0 + nplanes): plane z0 + k gives its box (x0, y0, bw x bh)
 * into out + k * step.  Shared by the threads reading it (stack_cut_opts). */
typedef struct cut_job {
    stack *s;
    long x0, y0, z0, bw, bh, nplanes;
    double *out;
    size_t step;
    const volatile int *cancel;
    atomic_long next;          /* the next plane to take */
    atomic_long stop;          /* the lowest plane that failed (nplanes: none); planes from
                                * there on are not read.  Written under `lock` */
    pthread_mutex_t lock;
    int rc;                    /* the error of plane `stop` */
    char err[512];
} cut_job;

/* Takes planes in order until none is left or one at or below it failed (a pool_for
 * slice: every slice runs the same loop).  A failure is kept when it is the lowest plane
 * so far, so the error returned is the one the planes read in z order would give. */
static void cut_slice(void *arg, size_t i0, size_t i1)
{
    (void)i0;
    (void)i1;
    cut_job *c = arg;
    char err[sizeof c->err];
    for (;;) {
        long k = atomic_fetch_add(&c->next, 1);
        if (k >= c->nplanes || k >= atomic_load(&c->stop))
            return;
        int rc;
        if (c->cancel && *c->cancel) {
            rc = TESS_ECANCELED;
            tess_seterr(err, sizeof err, "cancelled");
        } else {
            rc = box_at(c->s, c->z0 + k, c->x0, c->y0, c->bw, c->bh, c->out + (size_t)k * c->step,
                        err, sizeof err);
        }
        if (rc) {
            pthread_mutex_lock(&c->lock);
            if (k < atomic_load(&c->stop)) {
                atomic_store(&c->stop, k);
                c->rc = rc;
                memcpy(c->err, err, sizeof err);
            }
            pthread_mutex_unlock(&c->lock);
            return;
        }
    }
}

/* Reads the cut (check_box passed) under `o`: on the pool for a stack of files, else on
 * the calling thread. */
static int read_cut(stack *s, const stack_cut_opts *o, long x0, long y0, long z0, long bw,
                    long bh, long nplanes, double *out, size_t step, char *err, size_t errlen)
{
    cut_job c = {.s = s, .x0 = x0, .y0 = y0, .z0 = z0, .bw = bw, .bh = bh,
                 .nplanes = nplanes, .out = out, .step = step,
                 .cancel = o ? o->cancel : NULL, .rc = 0};
    atomic_init(&c.next, 0);
    atomic_init(&c.stop, nplanes);
    if (pthread_mutex_init(&c.lock, NULL) != 0) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    pool *workers = o && s->npaths > 1 && nplanes > 1 ? o->workers : NULL;
    int nt = workers ? pool_threads(workers) : 1;
    if (nt > nplanes)
        nt = (int)nplanes;
    /* One slice per thread; each takes planes one at a time from c.next. */
    pool_for(workers, o ? o->prio : POOL_INTERACTIVE, nt, (size_t)nt, 1, cut_slice, &c);
    pthread_mutex_destroy(&c.lock);
    if (c.rc)
        tess_seterr(err, errlen, "%s", c.err);
    return c.rc;
}

int stack_read_xz_on(stack *s, const stack_cut_opts *o, long y, long x0, long z0, long w,
                     long h, double *out, char *err, size_t errlen)
{
    int rc = check_box(s, x0, y, z0, w, 1, h, err, errlen);
    return rc ? rc : read_cut(s, o, x0, y, z0, w, 1, h, out, (size_t)w, err, errlen);
}

int stack_read_yz_on(stack *s, const stack_cut_opts *o, long x, long y0, long z0, long w,
                     long h, double *out, char *err, size_t errlen)
{
    int rc = check_box(s, x, y0, z0, 1, w, h, err, errlen);
    return rc ? rc : read_cut(s, o, x, y0, z0, 1, w, h, out, (size_t)w, err, errlen);
}

int stack_read_series_on(stack *s, const stack_cut_opts *o, long x, long y, long z0, long n,
                         double *out, char *err, size_t errlen)
{
    int rc = check_box(s, x, y, z0, 1, 1, n, err, errlen);
    if (rc)
        return rc;
    if (s->npaths > 1)
        return read_cut(s, o, x, y, z0, 1, 1, n, out, 1, err, errlen);
    /* One file: hold it once and walk the pixel down the planes. */
    if (o && o->cancel && *o->cancel) {
        tess_seterr(err, errlen, "cancelled");
        return TESS_ECANCELED;
    }
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
    if (frame_release(s, f) && rc == 0)
        rc = frame_fault_error(s, 0, err, errlen);
    return rc;
}

int stack_read_xz(stack *s, long y, long x0, long z0, long w, long h, double *out,
                  char *err, size_t errlen)
{
    return stack_read_xz_on(s, NULL, y, x0, z0, w, h, out, err, errlen);
}

int stack_read_yz(stack *s, long x, long y0, long z0, long w, long h, double *out,
                  char *err, size_t errlen)
{
    return stack_read_yz_on(s, NULL, x, y0, z0, w, h, out, err, errlen);
}

int stack_read_series(stack *s, long x, long y, long z0, long n, double *out,
                      char *err, size_t errlen)
{
    return stack_read_series_on(s, NULL, x, y, z0, n, out, err, errlen);
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
    size_t sz;
    (void)tess_size_dims((size_t)(bp / 8), (const long[]){s->nx, s->ny, s->nz}, 3, &sz);
    b = sz;   /* TESS_SIZE_MAX, more than any limit, should it overflow */
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
    st->decoded_now = s->live_bytes;
    st->decoded_peak = s->live_peak;
    st->zr_held_peak = s->zr_held_peak;
    pthread_mutex_unlock(&s->lock);
}

void stack_set_zr_chunk_bytes(stack *s, size_t bytes)
{
    pthread_mutex_lock(&s->lock);
    s->zr_chunk_bytes = bytes ? bytes : ZR_CHUNK_BYTES;
    pthread_mutex_unlock(&s->lock);
}

/* ---- reductions along z ------------------------------------------------------------- */

#define ZR_CHUNK 256     /* frames held and folded together at most (integer mode: <= 257,
                            so that the 8-bit sums of a chunk fit uint16); fewer when
                            decoded frames pass ZR_CHUNK_BYTES */
#define ZR_DBL_CHUNK 64  /* double mode: frames mapped and folded together */
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
    int64_t *s1;      /* sum of stored values (sum, mean, std); NULL while s16 holds them */
    uint16_t *s16;    /* sum / mean of at most 257 8-bit frames: the sums as the fold made
                         them (stack_zreduce of one chunk), not widened; see zpart_settle */
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
    free(p->s16);
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

/* A new integer-mode partial of nothing yet.  Without `sums` the sums (s1, s2) are
 * left unallocated, for stack_zreduce to set (zr_flush) or zpart_settle to zero. */
static stack_zpart *zpart_new_int(int op, long npix, long long bzero, int sums)
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
    if (zop_sums(op) && sums)
        ok = ok && (p->s1 = calloc(n, sizeof(int64_t)));
    if (op == STACK_ZOP_STD && sums)
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

/* Gives an integer partial its 64-bit sums: s16 widened into s1, or zeros where none
 * were set.  Returns 0 or TESS_ENOMEM (nothing changed). */
static int zpart_settle(stack_zpart *p)
{
    size_t n = (size_t)p->npix;
    if (p->mode != ZM_INT || !zop_sums(p->op))
        return 0;
    if (!p->s1) {
        int64_t *s1 = p->s16 ? malloc(n * sizeof(int64_t)) : calloc(n, sizeof(int64_t));
        if (!s1)
            return TESS_ENOMEM;
        for (size_t i = 0; p->s16 && i < n; i++)
            s1[i] = p->s16[i];
        free(p->s16);
        p->s16 = NULL;
        p->s1 = s1;
    }
    if (p->op == STACK_ZOP_STD && !p->s2 && !(p->s2 = calloc(n, sizeof(uint64_t))))
        return TESS_ENOMEM;
    return 0;
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
    if (zpart_settle(p))
        return TESS_ENOMEM;
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
        if (zpart_settle(into))
            return TESS_ENOMEM;
        if (from->s16)
            for (long i = 0; i < np; i++)
                into->s1[i] += from->s16[i];
        for (long i = 0; i < np && into->s1 && from->s1; i++)
            into->s1[i] += from->s1[i];
        for (long i = 0; i < np && into->s2 && from->s2; i++)
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
        tmp = zpart_new_int(from->op, from->npix, from->bzero, 1);
        if (!tmp)
            return TESS_ENOMEM;
        tmp->n = from->n;
        for (long i = 0; tmp->s1 && from->s16 && i < np; i++)
            tmp->s1[i] = from->s16[i];
        if (tmp->s1 && from->s1)
            memcpy(tmp->s1, from->s1, (size_t)np * sizeof(int64_t));
        if (tmp->s2 && from->s2)
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
                out[i] = (double)((p->s16 ? p->s16[i] : p->s1[i]) + p->n * p->bzero);
                break;
            case STACK_ZOP_MEAN:
                out[i] = (double)((p->s16 ? p->s16[i] : p->s1[i]) + p->n * p->bzero) / n;
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

/* Integer folds of one run of n stored values d of one frame (n consecutive pixels) into
 * the chunk's narrow accumulators at the same pixels: sums t1 (and sums of squares t2,
 * for std), or the running min / max in t1.  One function per stored layout.  The
 * narrow types hold a chunk of ZR_CHUNK frames without overflow (uint8: 256 * 255 fits
 * uint16, 256 * 255^2 fits uint32; 16-bit: int32 / uint32 sums, uint64 squares), so each
 * loop is an element-wise widening add that GCC vectorises (AVX2: 16 uint8 -> uint16
 * adds an instruction); zr_flush_* then moves them once into the partial. */
#define ZR_RUN_FOLD(NAME, GET, TSUM, TSQ)                                                  \
    ZR_HOT static void NAME(int op, const unsigned char *d, size_t n, void *t1v, void *t2v) \
    {                                                                                      \
        TSUM *t1 = t1v;                                                                    \
        TSQ *t2 = t2v;                                                                     \
        switch (op) {                                                                      \
        case STACK_ZOP_SUM:                                                                \
        case STACK_ZOP_MEAN:                                                               \
            for (size_t i = 0; i < n; i++)                                                 \
                t1[i] += (TSUM)GET(i);                                                     \
            break;                                                                         \
        case STACK_ZOP_STD:                                                                \
            for (size_t i = 0; i < n; i++) {                                               \
                TSQ v = (TSQ)GET(i);                                                       \
                t1[i] += (TSUM)GET(i);                                                     \
                t2[i] += v * v;                                                            \
            }                                                                              \
            break;                                                                         \
        case STACK_ZOP_MIN:                                                                \
            for (size_t i = 0; i < n; i++) {                                               \
                TSUM v = (TSUM)GET(i);                                                     \
                t1[i] = v < t1[i] ? v : t1[i];                                             \
            }                                                                              \
            break;                                                                         \
        case STACK_ZOP_MAX:                                                                \
            for (size_t i = 0; i < n; i++) {                                               \
                TSUM v = (TSUM)GET(i);                                                     \
                t1[i] = v > t1[i] ? v : t1[i];                                             \
            }                                                                              \
            break;                                                                         \
        }                                                                                  \
    }
/* Sample i of the frame bytes d, by storage type (shared by the fold and stats macros). */
#define ZGET_U8(i) d[i]
#define ZGET_I16BE(i) ((int16_t)be16(d + 2 * (i)))
#define ZGET_U16(i) (((const uint16_t *)(const void *)d)[i])
ZR_RUN_FOLD(zr_fold_u8, ZGET_U8, uint16_t, uint32_t)
ZR_RUN_FOLD(zr_fold_i16be, ZGET_I16BE, int32_t, uint64_t)
ZR_RUN_FOLD(zr_fold_u16, ZGET_U16, uint32_t, uint64_t)
#undef ZR_RUN_FOLD

/* The sums of four runs of n 8-bit values added at once into t1 (sum / mean): t1 is
 * read and written once for four frames, rather than once a frame. */
ZR_HOT static void zr_fold4_u8(const unsigned char *restrict a, const unsigned char *restrict b,
                               const unsigned char *restrict c, const unsigned char *restrict d,
                               size_t n, uint16_t *restrict t1)
{
    for (size_t i = 0; i < n; i++)
        t1[i] += (uint16_t)((uint16_t)a[i] + b[i] + c[i] + d[i]);
}

/* Sets the chunk's accumulators (np pixels) to "no frame yet": sums 0, min / max the
 * type's extreme.  (After a chunk every pixel has a value from every frame: the integer
 * mode has no blanks.) */
#define ZR_START(NAME, TSUM, TSQ, LO, HI)                                                 \
    static void NAME(int op, void *t1v, void *t2v, size_t np)                              \
    {                                                                                      \
        TSUM *t1 = t1v;                                                                    \
        if (op == STACK_ZOP_MIN || op == STACK_ZOP_MAX) {                                  \
            TSUM v = op == STACK_ZOP_MIN ? HI : LO;                                        \
            for (size_t i = 0; i < np; i++)                                                \
                t1[i] = v;                                                                 \
            return;                                                                        \
        }                                                                                  \
        memset(t1, 0, np * sizeof(TSUM));                                                  \
        if (op == STACK_ZOP_STD)                                                           \
            memset(t2v, 0, np * sizeof(TSQ));                                              \
    }
ZR_START(zr_start_u8, uint16_t, uint32_t, 0, UINT16_MAX)
ZR_START(zr_start_i16, int32_t, uint64_t, INT32_MIN, INT32_MAX)
ZR_START(zr_start_u16, uint32_t, uint64_t, 0, UINT32_MAX)
#undef ZR_START

/* Moves the chunk's accumulators (np pixels) into the partial: sums added to the 64-bit
 * sums (stored when `fresh`, the partial's first chunk: its newly allocated sums are then
 * written once instead of cleared, read and written), min / max folded into mm. */
#define ZR_FLUSH(NAME, TSUM, TSQ)                                                          \
    ZR_HOT static void NAME(stack_zpart *p, const void *t1v, const void *t2v, size_t np,    \
                            int fresh)                                                     \
    {                                                                                      \
        const TSUM *t1 = t1v;                                                              \
        const TSQ *t2 = t2v;                                                               \
        int32_t *mm = p->mm;                                                               \
        switch (p->op) {                                                                   \
        case STACK_ZOP_MIN:                                                                \
            for (size_t i = 0; i < np; i++)                                                \
                mm[i] = (int32_t)t1[i] < mm[i] ? (int32_t)t1[i] : mm[i];                   \
            return;                                                                        \
        case STACK_ZOP_MAX:                                                                \
            for (size_t i = 0; i < np; i++)                                                \
                mm[i] = (int32_t)t1[i] > mm[i] ? (int32_t)t1[i] : mm[i];                   \
            return;                                                                        \
        default:                                                                           \
            break;                                                                         \
        }                                                                                  \
        int64_t *s1 = p->s1;                                                               \
        uint64_t *s2 = p->s2;                                                              \
        if (fresh) {                                                                       \
            for (size_t i = 0; i < np; i++)                                                \
                s1[i] = t1[i];                                                             \
            if (s2)                                                                        \
                for (size_t i = 0; i < np; i++)                                            \
                    s2[i] = (uint64_t)t2[i];                                               \
        } else {                                                                           \
            for (size_t i = 0; i < np; i++)                                                \
                s1[i] += t1[i];                                                            \
            if (s2)                                                                        \
                for (size_t i = 0; i < np; i++)                                            \
                    s2[i] += (uint64_t)t2[i];                                              \
        }                                                                                  \
    }
ZR_FLUSH(zr_flush_u8, uint16_t, uint32_t)
ZR_FLUSH(zr_flush_i16, int32_t, uint64_t)
ZR_FLUSH(zr_flush_u16, uint32_t, uint64_t)
#undef ZR_FLUSH

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

/* ---- the integer mode's reads: pread(2) into a small buffer, not the map ----
 *
 * The integer fold reads a mapped FITS frame with pread(2) of ZR_PIECE pixels at a time
 * into a small reused buffer (as cat does), not through its map.  Folding from the map
 * costs a page-table entry per 4 KiB page, set up (a fault per 16 pages, or
 * MADV_POPULATE_READ) and torn down (munmap) for every frame: on 2000 warm-cache
 * 1000x1000 uint8 frames (one thread, the same fold) map + MADV_POPULATE_READ took
 * 0.64 s, map + faults 0.54 s, pread of 128 KiB 0.45 s; in the reduce job the madvise and
 * munmap calls were a quarter of the time.  The buffer stays in L2 and is folded at once.
 * Decoded frames (PNG) are folded from memory; so is a map whose file is no longer the
 * one on the path (zr_open), as every other read does.
 *
 * Order: a chunk (up to ZR_CHUNK = 256 frames, fewer where decoded frames would hold
 * more than ZR_CHUNK_BYTES) accumulates into narrow sums of the whole plane (np uint16
 * for 8-bit frames: 2 MB for 1000x1000, beside the partial's 8 MB of 64-bit sums), moved
 * into the 64-bit sums once a chunk (or kept as they are: a job block's partial,
 * stack_zpart's s16).  Frames are read ZR_GROUP at a time, piece by
 * piece, so the sums of a piece stay in L2 while the group is folded into them, with
 * ZR_GROUP descriptors open (a descriptor per frame of the chunk would bound a thread's
 * descriptors only by 256).  Piece sizes of 16, 32, 64 and 128 Ki pixels measured within
 * 5% of each other; 64 Ki was the best.
 *
 * Cold cache: every read first asks for what the page cache holds without waiting
 * (preadv2 RWF_NOWAIT: no extra system call when warm); where that falls short, the
 * planes of the next ZR_AHEAD frames are queued for reading (madvise WILLNEED on their
 * maps, a window moved forward at each short read): the deep read-ahead the map's
 * MADV_WILLNEED gave before. */

#define ZR_PIECE 65536   /* pixels a read: 64 KiB of uint8, 128 KiB of 16-bit values */
#define ZR_GROUP 16      /* frames read piece by piece together (descriptors open) */
#define ZR_BATCH 4       /* 8-bit sums: frames folded in one pass over the sums */
#define ZR_AHEAD 64      /* cold cache: frames whose planes are queued ahead */

/* Buffers of the integer mode for planes of np pixels: a read buffer and the chunk's
 * narrow accumulators (np of the widest types: int32 / uint32 sums, uint64 squares). */
typedef struct zr_acc {
    unsigned char *buf;
    void *t1, *t2;
} zr_acc;

static int zr_acc_alloc(zr_acc *a, int op, size_t np)
{
    a->buf = malloc(ZR_BATCH * ZR_PIECE * sizeof(uint16_t));
    a->t1 = malloc(np * sizeof(uint32_t));
    a->t2 = op == STACK_ZOP_STD ? malloc(np * sizeof(uint64_t)) : NULL;
    if (!a->buf || !a->t1 || (op == STACK_ZOP_STD && !a->t2)) {
        free(a->buf);
        free(a->t1);
        free(a->t2);
        a->buf = NULL;
        a->t1 = a->t2 = NULL;
        return TESS_ENOMEM;
    }
    return 0;
}

static void zr_acc_release(zr_acc *a)
{
    free(a->buf);
    free(a->t1);
    free(a->t2);
}

/* A descriptor of the file mapped by frame f, opened anew, or -1 when the file now on
 * the path is not the one mapped (replaced, changed) or cannot be opened: the fold then
 * reads the map, as every other read does. */
static int zr_open(const stack *s, const frame *f)
{
    if (f->kind != SRC_MMAP)
        return -1;
    struct stat st;
    int fd = tess_open_regular(s->paths[f->idx], 0, &st, NULL, 0);
    if (fd >= 0 && !same_file(f, &st)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Reads bytes [got, n) of the n at `off` into buf, retrying short and interrupted reads.
 * Returns 0, or -1 when the file ends early or read fails (errno; 0 at end of file). */
static int zr_pread(int fd, unsigned char *buf, size_t n, long long off, size_t got)
{
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + (long long)got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

/* How many of the n bytes at `off` the page cache gives into buf without waiting for
 * I/O (0 where RWF_NOWAIT is unknown or refused: the caller then treats it as cold). */
static size_t zr_pread_cached(int fd, unsigned char *buf, size_t n, long long off)
{
#ifdef RWF_NOWAIT
    struct iovec iov = {buf, n};
    ssize_t r = preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT);
    return r > 0 ? (size_t)r : 0;
#else
    (void)fd;
    (void)buf;
    (void)n;
    (void)off;
    return 0;
#endif
}

/* Asks the kernel to read plane zf of a mapped frame ahead (no page is mapped). */
static void zr_willneed(const stack *s, const frame *f, long zf)
{
    if (f->kind != SRC_MMAP)
        return;
    size_t len = (size_t)s->nx * (size_t)s->ny * (size_t)(f->bitpix / 8);
    uintptr_t a = (uintptr_t)raw_plane(s, f, zf), pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t e = a + len;
    a &= ~(pg - 1);
    madvise((void *)a, e - a, MADV_WILLNEED);
}

/* Folds the chunk's k frames (fr[j], plane zf[j], all of stored layout rk) into the
 * integer partial p, ZR_GROUP frames at a time, piece by piece.  Returns 0 or TESS_EIO
 * (a file shorter than when mapped, or unreadable: err says which). */
/* The `len` bytes at byte `pos` of plane zf[j] (frame fr[j]; descriptor fd, or -1; the
 * plane at file offset off0 and in memory at `plane`): read into buf, or where they are
 * in memory.  NULL on a read error (err set). */
static const unsigned char *zr_piece(const stack *s, frame *const *fr, const long *zf, int k,
                                     int j, int fd, long long off0, const unsigned char *plane,
                                     size_t pos, size_t len, unsigned char *buf, int *ahead,
                                     char *err, size_t errlen)
{
    if (fd < 0)
        return plane + pos;
    long long off = off0 + (long long)pos;
    size_t got = zr_pread_cached(fd, buf, len, off);
    if (got < len) {
        /* not all cached: keep the next ZR_AHEAD frames' planes queued */
        *ahead = *ahead > j ? *ahead : j;
        for (; *ahead < k && *ahead <= j + ZR_AHEAD; ++*ahead)
            zr_willneed(s, fr[*ahead], zf[*ahead]);
    }
    if (zr_pread(fd, buf, len, off, got) != 0) {
        tess_seterr(err, errlen, "cannot read %s: %s", s->paths[fr[j]->idx],
                    errno ? strerror(errno) : "shorter than when opened");
        return NULL;
    }
    return buf;
}

/* Folds the chunk's k frames (fr[j], plane zf[j], all of stored layout rk) into the
 * chunk's accumulators, ZR_GROUP frames at a time, piece by piece: the accumulators of a
 * piece (128 KiB of uint16 sums) stay in L2 while the group's frames are folded into
 * them.  The sum or mean of 8-bit frames folds ZR_BATCH frames in one pass
 * (zr_fold4_u8), the fold's cost being the traffic of those sums.  Returns 0 or
 * TESS_EIO (a file shorter than when mapped, or unreadable: err says which). */
static int zr_fold_chunk(stack *s, stack_zpart *p, int rk, frame *const *fr, const long *zf,
                         int k, zr_acc *acc, char *err, size_t errlen)
{
    size_t np = (size_t)s->nx * (size_t)s->ny;
    size_t es = rk == RAW_U8 ? 1 : 2, tsz = rk == RAW_U8 ? sizeof(uint16_t) : sizeof(uint32_t);
    size_t qsz = rk == RAW_U8 ? sizeof(uint32_t) : sizeof(uint64_t);
    const int batch = rk == RAW_U8 && (p->op == STACK_ZOP_SUM || p->op == STACK_ZOP_MEAN);
    if (rk == RAW_U8)
        zr_start_u8(p->op, acc->t1, acc->t2, np);
    else if (rk == RAW_I16BE)
        zr_start_i16(p->op, acc->t1, acc->t2, np);
    else
        zr_start_u16(p->op, acc->t1, acc->t2, np);
    int rc = 0, ahead = 0;   /* frames [.., ahead) were queued for reading */
    for (int g0 = 0; g0 < k && !rc; g0 += ZR_GROUP) {
        int g1 = k - g0 < ZR_GROUP ? k : g0 + ZR_GROUP;
        int fd[ZR_GROUP];
        long long off0[ZR_GROUP];
        const unsigned char *plane[ZR_GROUP];
        for (int j = g0; j < g1; j++) {
            /* the planes of a cube share its one descriptor */
            fd[j - g0] = j > g0 && fr[j] == fr[j - 1] ? fd[j - g0 - 1] : zr_open(s, fr[j]);
            plane[j - g0] = raw_plane(s, fr[j], zf[j]);
            off0[j - g0] = fr[j]->datastart + (long long)(plane[j - g0] - fr[j]->data);
        }
        for (size_t b0 = 0; b0 < np && !rc; b0 += ZR_PIECE) {
            size_t n = np - b0 < ZR_PIECE ? np - b0 : ZR_PIECE;
            unsigned char *t1 = (unsigned char *)acc->t1 + b0 * tsz;
            unsigned char *t2 = acc->t2 ? (unsigned char *)acc->t2 + b0 * qsz : NULL;
            for (int j = g0; j < g1 && !rc;) {
                int m = batch && g1 - j >= ZR_BATCH ? ZR_BATCH : 1;
                const unsigned char *d[ZR_BATCH];
                for (int q = 0; q < m && !rc; q++) {
                    int i = j + q - g0;
                    d[q] = zr_piece(s, fr, zf, k, j + q, fd[i], off0[i], plane[i], b0 * es,
                                    n * es, acc->buf + (size_t)q * ZR_PIECE * es,
                                    &ahead, err, errlen);
                    if (!d[q])
                        rc = TESS_EIO;
                }
                if (rc)
                    break;
                if (m == ZR_BATCH)
                    zr_fold4_u8(d[0], d[1], d[2], d[3], n, (uint16_t *)(void *)t1);
                else if (rk == RAW_U8)
                    zr_fold_u8(p->op, d[0], n, t1, t2);
                else if (rk == RAW_I16BE)
                    zr_fold_i16be(p->op, d[0], n, t1, t2);
                else
                    zr_fold_u16(p->op, d[0], n, t1, t2);
                j += m;
            }
        }
        for (int j = g0; j < g1; j++)
            if (fd[j - g0] >= 0 && !(j > g0 && fd[j - g0] == fd[j - g0 - 1]))
                close(fd[j - g0]);
    }
    return rc;
}

/* Moves the chunk's accumulators into the partial p, whose 64-bit sums are allocated
 * at the first chunk (and then stored, not added).  Returns 0 or TESS_ENOMEM. */
static int zr_flush(stack_zpart *p, int rk, const zr_acc *acc, size_t np)
{
    int fresh = 0;
    if (zop_sums(p->op) && !p->s1) {
        if (!(p->s1 = malloc(np * sizeof(int64_t))))
            return TESS_ENOMEM;
        if (p->op == STACK_ZOP_STD && !(p->s2 = malloc(np * sizeof(uint64_t)))) {
            free(p->s1);
            p->s1 = NULL;
            return TESS_ENOMEM;
        }
        fresh = 1;
    }
    if (rk == RAW_U8)
        zr_flush_u8(p, acc->t1, acc->t2, np, fresh);
    else if (rk == RAW_I16BE)
        zr_flush_i16(p, acc->t1, acc->t2, np, fresh);
    else
        zr_flush_u16(p, acc->t1, acc->t2, np, fresh);
    return 0;
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
    zr_acc acc = {NULL, NULL, NULL};     /* integer mode: read buffer, narrow sums */
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    size_t bound = s->zr_chunk_bytes;
    pthread_mutex_unlock(&s->lock);
    for (long zc = z0; zc < z1 && !rc;) {
        if (cancel && *cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        /* Up to ZR_CHUNK frames, ending early once the decoded frames held pass `bound`
         * (ZR_CHUNK_BYTES): at least one frame, so at most bound + one frame held.  k is
         * the frames taken; the next chunk starts after them. */
        int kmax = (int)(z1 - zc < ZR_CHUNK ? z1 - zc : ZR_CHUNK), k = 0;
        size_t held = 0;
        frame *fr[ZR_CHUNK] = {NULL};
        long zf[ZR_CHUNK];
        while (k < kmax && (k == 0 || held < bound)) {
            long idx;
            locate(s, zc + k, &idx, &zf[k]);
            rc = frame_acquire(s, idx, &fr[k], err, errlen);
            if (rc)
                break;
            if (k == 0 || fr[k] != fr[k - 1])   /* a cube's planes share one frame */
                held += fr[k]->pixbytes;
            k++;
        }
        if (rc) {
            for (int j = 0; j < k; j++)
                frame_release(s, fr[j]);
            break;
        }
        if (held) {
            pthread_mutex_lock(&s->lock);
            if (held > s->zr_held_peak)
                s->zr_held_peak = held;
            pthread_mutex_unlock(&s->lock);
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
            p = rk != RAW_NONE ? zpart_new_int(op, (long)np, bz0, 0) : zpart_new_dbl(op, (long)np);
        if (!p)
            rc = TESS_ENOMEM;
        else if (p->mode == ZM_INT && (rk == RAW_NONE || bz0 != p->bzero))
            rc = zpart_to_dbl(p);
        if (!rc && p->mode == ZM_INT) {
            if (!acc.buf && zr_acc_alloc(&acc, op, np) != 0)
                rc = TESS_ENOMEM;
            if (!rc)
                rc = zr_fold_chunk(s, p, rk, fr, zf, k, &acc, err, errlen);
            if (!rc && p->n == 0 && zc == z0 && zc + k == z1 && rk == RAW_U8 &&
                (op == STACK_ZOP_SUM || op == STACK_ZOP_MEAN)) {
                /* The range's one chunk (a job block), only when this chunk took every
                 * frame of the range (not when ZR_CHUNK_BYTES cut it short): its uint16
                 * sums become the partial's as they are, saved as they are
                 * (stack_zpart_save); widened only when merged.  This spares an
                 * 8-byte-a-pixel array written, scanned and narrowed again per block. */
                p->s16 = acc.t1;
                acc.t1 = NULL;
            } else if (!rc) {
                rc = zr_flush(p, rk, &acc, np);
            }
            if (!rc)
                p->n += k;
        } else if (!rc) {
            /* ZR_DBL_CHUNK frames at a time, mapped and folded over blocks of pixels */
            for (int j0 = 0; j0 < k && !rc; j0 += ZR_DBL_CHUNK) {
                int j1 = k - j0 < ZR_DBL_CHUNK ? k : j0 + ZR_DBL_CHUNK, viacfitsio = 0;
                for (int j = j0; j < j1; j++) {
                    viacfitsio |= fr[j]->kind == SRC_CFITSIO || fr[j]->kind == SRC_TIFF;
                    advise_plane(s, fr[j], zf[j]);
                }
                if (viacfitsio) {
                    if (!whole && !(whole = malloc(np * sizeof(double))))
                        rc = TESS_ENOMEM;
                    for (int j = j0; j < j1 && !rc; j++) {
                        rc = frame_box(s, fr[j], zf[j], 0, 0, s->nx, s->ny, whole, err, errlen);
                        if (!rc)
                            fold_dbl(p, 0, whole, np);
                    }
                } else {
                    if (!tmp && !(tmp = malloc(ZR_BLOCK * sizeof(double))))
                        rc = TESS_ENOMEM;
                    for (size_t b0 = 0; b0 < np && !rc; b0 += ZR_BLOCK) {
                        size_t n = np - b0 < ZR_BLOCK ? np - b0 : ZR_BLOCK;
                        for (int j = j0; j < j1; j++) {
                            convert_run(fr[j], (size_t)zf[j] * np + b0, n, 1, tmp);
                            fold_dbl(p, b0, tmp, n);
                        }
                    }
                }
            }
        }
        for (int j = 0; j < k; j++) {
            long fi = fr[j]->idx;
            if (frame_release(s, fr[j]) && rc == 0)
                rc = frame_fault_error(s, fi, err, errlen);
        }
        zc += k;
    }
    free(tmp);
    free(whole);
    zr_acc_release(&acc);
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
    long idx, zf;
    frame *f;
    int rc = plane_frame(s, z, &f, &idx, &zf, err, errlen);
    if (rc)
        return rc;
    p->frame_ = f;
    long long bz;
    if (raw_kind(f, &bz) == RAW_U8 && bz == 0)
        p->u8 = raw_plane(s, f, zf);
    return 0;
}

int stack_plane_release(stack *s, stack_plane *p)
{
    int faulted = p->frame_ ? frame_release(s, p->frame_) : 0;
    memset(p, 0, sizeof(*p));
    return faulted;
}

/* What op needs of n stored values of one layout (pixels b0.., n <= 4096): the sum
 * (sum, mean), with the sum of squares (std), or min and max.  Only that is computed,
 * and in 32-bit lanes where 4096 values fit them (sums of any layout, squares of 8-bit
 * values), so the loops vectorise; a block's totals then go into the 64/128-bit ones. */
#define ZR_PLANE_STATS(NAME, GET, TSUM, TSQ)                                              \
    ZR_HOT static void NAME(int op, const unsigned char *d, size_t b0, size_t n,           \
                            int64_t *s1, unsigned __int128 *s2, int32_t *mn, int32_t *mx)  \
    {                                                                                      \
        if (op == STACK_ZOP_MIN || op == STACK_ZOP_MAX) {                                  \
            int32_t lo = *mn, hi = *mx;                                                    \
            for (size_t i = 0; i < n; i++) {                                               \
                int32_t v = (int32_t)GET(b0 + i);                                          \
                lo = v < lo ? v : lo;                                                      \
                hi = v > hi ? v : hi;                                                      \
            }                                                                              \
            *mn = lo;                                                                      \
            *mx = hi;                                                                      \
        } else if (op == STACK_ZOP_STD) {                                                  \
            TSUM a = 0;                                                                    \
            TSQ q = 0;                                                                     \
            for (size_t i = 0; i < n; i++) {                                               \
                TSQ v = (TSQ)GET(b0 + i);                                                  \
                a += (TSUM)GET(b0 + i);                                                    \
                q += v * v;                                                                \
            }                                                                              \
            *s1 += a;                                                                      \
            *s2 += q;                                                                      \
        } else {                                                                           \
            TSUM a = 0;                                                                    \
            for (size_t i = 0; i < n; i++)                                                 \
                a += (TSUM)GET(b0 + i);                                                    \
            *s1 += a;                                                                      \
        }                                                                                  \
    }
ZR_PLANE_STATS(stats_u8, ZGET_U8, uint32_t, uint32_t)
ZR_PLANE_STATS(stats_i16be, ZGET_I16BE, int32_t, uint64_t)
ZR_PLANE_STATS(stats_u16, ZGET_U16, uint32_t, uint64_t)
#undef ZGET_U8
#undef ZGET_I16BE
#undef ZGET_U16
#undef ZR_PLANE_STATS

int stack_reduce_plane(stack *s, long z, stack_zop op, double *out, char *err, size_t errlen)
{
    long idx, zf;
    frame *f;
    int rc = plane_frame(s, z, &f, &idx, &zf, err, errlen);
    if (rc)
        return rc;
    long long bz;
    int rk = raw_kind(f, &bz);
    if (rk == RAW_NONE) {
        frame_release(s, f);
        return 1;
    }
    const unsigned char *plane = raw_plane(s, f, zf);
    size_t np = (size_t)s->nx * (size_t)s->ny, es = rk == RAW_U8 ? 1 : 2;
    int64_t s1 = 0;
    unsigned __int128 s2 = 0;
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    /* A mapped FITS plane is read with pread(2) a piece at a time, as stack_zreduce
     * does (no page-table work per page), a decoded one where it is. */
    int fd = zr_open(s, f), ahead = 0;
    unsigned char *buf = fd >= 0 ? malloc(ZR_PIECE * es) : NULL;
    long long off0 = f->datastart + (long long)(plane - f->data);
    if (fd >= 0 && !buf)
        rc = TESS_ENOMEM;
    for (size_t p0 = 0; p0 < np && !rc; p0 += ZR_PIECE) {
        size_t m = np - p0 < ZR_PIECE ? np - p0 : ZR_PIECE;
        const unsigned char *d = zr_piece(s, &f, &zf, 1, 0, fd, off0, plane, p0 * es, m * es,
                                          buf, &ahead, err, errlen);
        if (!d) {
            rc = TESS_EIO;
            break;
        }
        /* blocks of 4096: the 64-bit sum of squares of a block cannot overflow */
        for (size_t b0 = 0; b0 < m; b0 += ZR_BLOCK) {
            size_t n = m - b0 < ZR_BLOCK ? m - b0 : ZR_BLOCK;
            if (rk == RAW_U8)
                stats_u8(op, d, b0, n, &s1, &s2, &mn, &mx);
            else if (rk == RAW_I16BE)
                stats_i16be(op, d, b0, n, &s1, &s2, &mn, &mx);
            else
                stats_u16(op, d, b0, n, &s1, &s2, &mn, &mx);
        }
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    if (frame_release(s, f) && !rc)
        rc = frame_fault_error(s, idx, err, errlen);
    if (rc) {
        if (rc == TESS_ENOMEM)
            tess_seterr(err, errlen, "out of memory");
        return rc;
    }
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

/* Width of the sums of a partial on disk (the header's pad): an integer partial whose
 * sums all fit in uint16 (a job block of up to 257 8-bit frames) stores them as uint16
 * (bit 1), else when they fit int32 as int32 (bit 0), else as int64: the partials of a
 * reduce job are written and read back once per block, and were a tenth of its time. */
#define ZP_SUMS_I32 1
#define ZP_SUMS_U16 2

static int zpart_narrow(const stack_zpart *p)
{
    if (p->mode != ZM_INT || !p->s1)
        return 0;
    int64_t lo = 0, hi = 0;
    for (long i = 0; i < p->npix; i++) {
        lo = p->s1[i] < lo ? p->s1[i] : lo;
        hi = p->s1[i] > hi ? p->s1[i] : hi;
    }
    if (lo >= 0 && hi <= UINT16_MAX)
        return ZP_SUMS_U16;
    return lo >= INT32_MIN && hi <= INT32_MAX ? ZP_SUMS_I32 : 0;
}

#define ZP_PIECE 8192    /* sums converted a write / read at a time (32 KiB of stack) */

/* Writes the n sums s1 as uint16 or int32 (`narrow`), a piece at a time. */
static int write_narrow(int fd, const int64_t *s1, long n, int narrow)
{
    union {
        uint16_t u16[ZP_PIECE];
        int32_t i32[ZP_PIECE];
    } t;
    for (long i0 = 0; i0 < n; i0 += ZP_PIECE) {
        long m = n - i0 < ZP_PIECE ? n - i0 : ZP_PIECE;
        for (long j = 0; j < m; j++) {
            if (narrow == ZP_SUMS_U16)
                t.u16[j] = (uint16_t)s1[i0 + j];
            else
                t.i32[j] = (int32_t)s1[i0 + j];
        }
        size_t es = narrow == ZP_SUMS_U16 ? sizeof(uint16_t) : sizeof(int32_t);
        if (tess_write_all(fd, &t, es * (size_t)m) != 0)
            return -1;
    }
    return 0;
}

/* Reads n sums stored as uint16 or int32 (`narrow`) into s1, a piece at a time. */
static int read_narrow(int fd, int64_t *s1, long n, int narrow)
{
    union {
        uint16_t u16[ZP_PIECE];
        int32_t i32[ZP_PIECE];
    } t;
    for (long i0 = 0; i0 < n; i0 += ZP_PIECE) {
        long m = n - i0 < ZP_PIECE ? n - i0 : ZP_PIECE;
        size_t es = narrow == ZP_SUMS_U16 ? sizeof(uint16_t) : sizeof(int32_t);
        if (tess_read_all(fd, &t, es * (size_t)m) != 0)
            return -1;
        for (long j = 0; j < m; j++)
            s1[i0 + j] = narrow == ZP_SUMS_U16 ? (int64_t)t.u16[j] : (int64_t)t.i32[j];
    }
    return 0;
}

int stack_zpart_save(const stack_zpart *p, const char *path, char *err, size_t errlen)
{
    int narrow = p->s16 ? ZP_SUMS_U16 : zpart_narrow(p);
    zpart_hdr h = {ZR_MAGIC, p->op, p->mode, narrow, p->npix, p->n, p->bzero};
    void *arr[3];
    size_t es[3];
    int k = zpart_arrays((stack_zpart *)p, arr, es);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || tess_write_all(fd, &h, sizeof(h)) != 0;
    for (int i = 0; i < k && !bad; i++) {
        if (p->s16 && i == 0)   /* the sums come first */
            bad = tess_write_all(fd, p->s16, sizeof(uint16_t) * (size_t)p->npix) != 0;
        else if (narrow && arr[i] == p->s1)
            bad = write_narrow(fd, p->s1, p->npix, narrow) != 0;
        else
            bad = tess_write_all(fd, arr[i], es[i] * (size_t)p->npix) != 0;
    }
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
    if (fd < 0 || tess_read_all(fd, &h, sizeof(h)) != 0) {
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
    /* the sums are allocated, not cleared (zpart_settle): they are all read */
    stack_zpart *p = h.mode == ZM_INT ? zpart_new_int(h.op, (long)h.npix, h.bzero, 0)
                                      : zpart_new_dbl(h.op, (long)h.npix);
    if (p && p->mode == ZM_INT && zop_sums(h.op)) {
        p->s1 = malloc(sizeof(int64_t) * (size_t)h.npix);
        if (h.op == STACK_ZOP_STD)
            p->s2 = malloc(sizeof(uint64_t) * (size_t)h.npix);
        if (!p->s1 || (h.op == STACK_ZOP_STD && !p->s2)) {
            stack_zpart_free(p);
            p = NULL;
        }
    }
    if (!p) {
        close(fd);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    p->n = h.n;
    void *arr[3];
    size_t es[3];
    int k = zpart_arrays(p, arr, es), bad = 0;
    int narrow = h.mode != ZM_INT || !p->s1 ? 0
                 : h.pad & ZP_SUMS_U16 ? ZP_SUMS_U16
                 : h.pad & ZP_SUMS_I32 ? ZP_SUMS_I32 : 0;
    if (narrow == ZP_SUMS_U16 && (h.op == STACK_ZOP_SUM || h.op == STACK_ZOP_MEAN)) {
        /* uint16 sums stay so (s16) until merged: the reduce job loads one partial a
         * block, and widening each into 8 bytes a pixel was most of its merge */
        free(p->s1);
        p->s1 = NULL;
        if (!(p->s16 = malloc(sizeof(uint16_t) * (size_t)p->npix)))
            bad = 1;
        else
            bad = tess_read_all(fd, p->s16, sizeof(uint16_t) * (size_t)p->npix) != 0;
        k = 0;
    }
    for (int i = 0; i < k && !bad; i++) {
        if (narrow && arr[i] == p->s1) {
            bad = read_narrow(fd, p->s1, p->npix, narrow) != 0;
        } else {
            bad = tess_read_all(fd, arr[i], es[i] * (size_t)p->npix) != 0;
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

double stack_cache_bound(const stack *s, double frame_bytes)
{
    if (!s || !(frame_bytes > 0.0))
        return 0.0;
    double n = (double)(s->max_open < s->npaths ? s->max_open : s->npaths);
    double cap = (double)STACK_MAX_DECODED_BYTES + frame_bytes;
    return n * frame_bytes < cap ? n * frame_bytes : cap;
}
