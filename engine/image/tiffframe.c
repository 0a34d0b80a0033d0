/* TIFF frames: pages checked and decoded with libtiff, a strip or tile at a time, within the decode budgets. */
#include "engine/image/tiffframe.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitscard.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <unistd.h>

#define TF_MAX_PAGES 100000
#define TF_POOL 4     /* idle libtiff handles kept per open file */
#define TF_CACHE 8    /* files whose page offsets are kept process-wide */

/* The I/O of one libtiff handle: the file's descriptor (shared), this handle's position,
 * and the first message libtiff gave it. */
typedef struct tf_io {
    int fd;
    uint64_t pos, size;
    int have_error;          /* msg holds an error (else a warning, or nothing) */
    char msg[200];
} tf_io;

typedef struct tf_handle {
    TIFF *tif;
    tf_io io;
    uint64_t dir;            /* offset of the directory loaded */
    struct tf_handle *next;  /* idle list */
} tf_handle;

struct tiffframe {
    char *path;
    int fd;
    tess_file_id id;
    tiffframe_shape sh;
    long long tile_px;       /* pixels of the largest tile of any page; 0 when striped */
    uint64_t *offs;          /* directory offset of each page */
    pthread_mutex_t lock;
    tf_handle *idle;
    int nidle;
};

/* What one directory says, checked. */
typedef struct tf_page {
    long nx, ny;
    tiffframe_type type;
    int esize;
    int tiled, reduced;
    long tw, th;             /* tile size, tiled */
    long rps;                /* rows per strip (at most ny), striped */
} tf_page;

/* ---- libtiff's messages and I/O ---------------------------------------------------- */

static int tf_on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    tf_io *io = user;
    if (!io->have_error) {
        int n = module ? snprintf(io->msg, sizeof io->msg, "%s: ", module) : 0;
        if (n < 0 || (size_t)n >= sizeof io->msg)
            n = 0;
        vsnprintf(io->msg + n, sizeof io->msg - (size_t)n, fmt, ap);
        io->have_error = 1;
    }
    return 1;   /* handled: the process-wide handlers are not called */
}

static int tf_on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    (void)module;
    tf_io *io = user;
    if (!io->have_error && !io->msg[0])
        vsnprintf(io->msg, sizeof io->msg, fmt, ap);
    return 1;
}

static void tf_clear(tf_io *io)
{
    io->have_error = 0;
    io->msg[0] = '\0';
}

static const char *tf_msg(const tf_io *io)
{
    return io->msg[0] ? io->msg : "no reason given";
}

static tmsize_t tf_read(thandle_t h, void *buf, tmsize_t n)
{
    tf_io *io = h;
    tmsize_t done = 0;
    while (done < n) {
        ssize_t got = pread(io->fd, (char *)buf + done, (size_t)(n - done), (off_t)io->pos);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        done += got;
        io->pos += (uint64_t)got;
    }
    return done;
}

static tmsize_t tf_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h;
    (void)buf;
    (void)n;
    return 0;
}

static toff_t tf_seek(thandle_t h, toff_t off, int whence)
{
    tf_io *io = h;
    if (whence == SEEK_SET)
        io->pos = off;
    else if (whence == SEEK_CUR)
        io->pos += off;
    else if (whence == SEEK_END)
        io->pos = io->size + off;
    return io->pos;
}

static int tf_closeproc(thandle_t h)
{
    (void)h;   /* the descriptor is the tiffframe's */
    return 0;
}

static toff_t tf_size(thandle_t h)
{
    return ((tf_io *)h)->size;
}

static int tf_map(thandle_t h, void **base, toff_t *size)
{
    (void)h;
    (void)base;
    (void)size;
    return 0;   /* never mapped: a truncated file reads short, it cannot fault */
}

static void tf_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h;
    (void)base;
    (void)size;
}

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void tf_quiet(void)
{
    TIFFSetErrorHandler(NULL);
    TIFFSetWarningHandler(NULL);
}

/* A libtiff handle on the file open as fd (first directory loaded), or NULL with err. */
static tf_handle *tf_handle_open(int fd, uint64_t size, const char *path, int *rc, char *err,
                                 size_t errlen)
{
    tf_handle *h = calloc(1, sizeof(*h));
    TIFFOpenOptions *o = h ? TIFFOpenOptionsAlloc() : NULL;
    if (!o) {
        free(h);
        tess_seterr(err, errlen, "out of memory opening %s", path);
        *rc = TESS_ENOMEM;
        return NULL;
    }
    h->io.fd = fd;
    h->io.size = size;
    unsigned long long maxb;
    decodelimit_get(&maxb, NULL);
    if (maxb > (unsigned long long)(PTRDIFF_MAX / 2))
        maxb = (unsigned long long)(PTRDIFF_MAX / 2);
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, (tmsize_t)maxb);
    TIFFOpenOptionsSetErrorHandlerExtR(o, tf_on_error, &h->io);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tf_on_warning, &h->io);
    /* "O": strip and tile offsets are read when used, not every one at each directory */
    h->tif = TIFFClientOpenExt(path, "rO", &h->io, tf_read, tf_write, tf_seek, tf_closeproc,
                               tf_size, tf_map, tf_unmap, o);
    TIFFOpenOptionsFree(o);
    if (!h->tif) {
        tess_seterr(err, errlen, "%s: not a readable TIFF file (%s)", path, tf_msg(&h->io));
        free(h);
        *rc = TESS_EIO;
        return NULL;
    }
    h->dir = TIFFCurrentDirOffset(h->tif);
    return h;
}

static void tf_handle_close(tf_handle *h)
{
    if (h) {
        TIFFClose(h->tif);
        free(h);
    }
}

/* ---- directories ------------------------------------------------------------------- */

static const char *type_name(tiffframe_type t)
{
    switch (t) {
    case TIFFFRAME_U8: return "8-bit unsigned";
    case TIFFFRAME_U16: return "16-bit unsigned";
    case TIFFFRAME_I16: return "16-bit signed";
    case TIFFFRAME_F32: return "32-bit float";
    }
    return "?";
}

/* A little- or big-endian unsigned integer of n bytes (2, 4 or 8) at b. */
static uint64_t tf_uint(const unsigned char *b, int n, int big_endian)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)b[big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

/* The entries the directory at `diroff` of the file read by io has for the tags
 * `tags[0..n)`, read from the file itself (libtiff pads a short offset or byte-count array
 * with zeros, and splits a single uncompressed strip into many, so its own arrays and
 * strip counts cannot tell): counts[i] = the entry's count, or -1 when the tag is absent;
 * values[i] = its value when it is one SHORT, LONG or LONG8 held in the entry, else 0.
 * Entries are read 64 at a time.  Returns 0, or -1 when the directory cannot be read
 * (libtiff has read it, so only a file changed since can do that). */
static int tf_entries(const tf_io *io, uint64_t diroff, int bigtiff, const uint16_t *tags,
                      long long *counts, uint64_t *values, int n)
{
    unsigned char hdr[8], buf[64 * 20];
    for (int i = 0; i < n; i++) {
        counts[i] = -1;
        values[i] = 0;
    }
    if (pread(io->fd, hdr, 2, 0) != 2)
        return -1;
    const int be = hdr[0] == 'M';
    const int csize = bigtiff ? 8 : 2, esize = bigtiff ? 20 : 12, nsize = bigtiff ? 8 : 4;
    if (pread(io->fd, hdr, (size_t)csize, (off_t)diroff) != csize)
        return -1;
    uint64_t nent = tf_uint(hdr, csize, be);
    if (nent > 65535)   /* libtiff reads no more (TIFF_MAX_DIR_COUNT in 4.5) */
        return -1;
    uint64_t pos = diroff + (uint64_t)csize;
    while (nent > 0) {
        size_t k = nent < 64 ? (size_t)nent : 64;
        if (pread(io->fd, buf, k * (size_t)esize, (off_t)pos) != (ssize_t)(k * (size_t)esize))
            return -1;
        for (size_t e = 0; e < k; e++) {
            const unsigned char *p = buf + e * (size_t)esize;
            uint16_t tag = (uint16_t)tf_uint(p, 2, be);
            for (int i = 0; i < n; i++)
                if (tag == tags[i] && counts[i] < 0) {
                    uint64_t c = tf_uint(p + 4, nsize, be);
                    uint16_t type = (uint16_t)tf_uint(p + 2, 2, be);
                    counts[i] = c > (uint64_t)LLONG_MAX ? LLONG_MAX : (long long)c;
                    if (c == 1 && (type == TIFF_SHORT || type == TIFF_LONG ||
                                   (type == TIFF_LONG8 && bigtiff)))
                        values[i] = tf_uint(p + 4 + nsize,
                                            type == TIFF_SHORT ? 2 : type == TIFF_LONG ? 4 : 8,
                                            be);
                }
        }
        nent -= k;
        pos += k * (uint64_t)esize;
    }
    return 0;
}

/* Whether the strip or tile arrays of the current directory of `tif` (page `dirno`) have
 * an entry for every strip or tile.  libtiff pads a short array with zeros, so a strip
 * past its end would be read from offset 0: the file's own header and tags as pixels.
 * Returns 0 or TESS_EINVAL with err. */
static int tf_check_striles(TIFF *tif, const char *path, long dirno, int tiled, char *err,
                            size_t errlen)
{
    static const char *const names[] = {"StripOffsets", "StripByteCounts", "TileOffsets",
                                        "TileByteCounts"};
    const uint16_t tags[3] = {tiled ? TIFFTAG_TILEOFFSETS : TIFFTAG_STRIPOFFSETS,
                              tiled ? TIFFTAG_TILEBYTECOUNTS : TIFFTAG_STRIPBYTECOUNTS,
                              TIFFTAG_ROWSPERSTRIP};
    long long counts[3];
    uint64_t values[3];
    const tf_io *io = (const tf_io *)TIFFClientdata(tif);
    if (tf_entries(io, TIFFCurrentDirOffset(tif), TIFFIsBigTIFF(tif), tags, counts, values, 3)) {
        tess_seterr(err, errlen, "%s: directory %ld cannot be read again", path, dirno);
        return TESS_EINVAL;
    }
    long long want;
    if (tiled) {
        want = (long long)TIFFNumberOfTiles(tif);
    } else {   /* the strips the file declares (RowsPerStrip absent or 0: one) */
        uint32_t h = 0;
        TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
        uint64_t rps = values[2] >= 1 && values[2] < h ? values[2] : h;
        want = (long long)((h + rps - 1) / rps);
    }
    for (int i = 0; i < 2; i++) {
        if (counts[i] >= 0 && counts[i] < want) {
            tess_seterr(err, errlen, "%s: directory %ld has %lld %s for %lld %s", path, dirno,
                        counts[i], names[2 * tiled + i], want, tiled ? "tiles" : "strips");
            return TESS_EINVAL;
        }
    }
    return 0;
}

/* The current directory of `tif`, checked.  Returns 0 or TESS_EINVAL with err. */
static int tf_describe(TIFF *tif, const char *path, long dirno, tf_page *pg, char *err,
                       size_t errlen)
{
    uint32_t w = 0, h = 0, sub = 0, rps = 0, tw = 0, th = 0;
    uint16_t bps = 1, spp = 1, fmt = SAMPLEFORMAT_UINT, photo = PHOTOMETRIC_MINISBLACK;
    uint16_t comp = COMPRESSION_NONE;
    memset(pg, 0, sizeof(*pg));
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
    if (TIFFGetField(tif, TIFFTAG_SUBFILETYPE, &sub) && (sub & FILETYPE_REDUCEDIMAGE))
        pg->reduced = 1;
    if (w < 1 || h < 1 || w > INT32_MAX || h > INT32_MAX) {
        tess_seterr(err, errlen, "%s: directory %ld is %lu x %lu pixels", path, dirno,
                    (unsigned long)w, (unsigned long)h);
        return TESS_EINVAL;
    }
    if (spp != 1) {
        tess_seterr(err, errlen, "%s: directory %ld has %u samples per pixel (colour or alpha); "
                    "only greyscale TIFF (SamplesPerPixel 1) is read", path, dirno, spp);
        return TESS_EINVAL;
    }
    if (TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo) && photo != PHOTOMETRIC_MINISBLACK &&
        photo != PHOTOMETRIC_MINISWHITE) {
        tess_seterr(err, errlen, "%s: directory %ld has PhotometricInterpretation %u (palette "
                    "or colour); only greyscale TIFF is read", path, dirno, photo);
        return TESS_EINVAL;
    }
    if (bps == 8 && fmt == SAMPLEFORMAT_UINT) {
        pg->type = TIFFFRAME_U8;
        pg->esize = 1;
    } else if (bps == 16 && fmt == SAMPLEFORMAT_UINT) {
        pg->type = TIFFFRAME_U16;
        pg->esize = 2;
    } else if (bps == 16 && fmt == SAMPLEFORMAT_INT) {
        pg->type = TIFFFRAME_I16;
        pg->esize = 2;
    } else if (bps == 32 && fmt == SAMPLEFORMAT_IEEEFP) {
        pg->type = TIFFFRAME_F32;
        pg->esize = 4;
    } else {
        tess_seterr(err, errlen, "%s: directory %ld has %u-bit samples of SampleFormat %u; "
                    "read are 8 or 16-bit unsigned, 16-bit signed and 32-bit float", path,
                    dirno, bps, fmt);
        return TESS_EINVAL;
    }
    if (!TIFFIsCODECConfigured(comp)) {
        tess_seterr(err, errlen, "%s: directory %ld uses compression %u, which this libtiff "
                    "does not decode", path, dirno, comp);
        return TESS_EINVAL;
    }
    pg->nx = (long)w;
    pg->ny = (long)h;
    pg->tiled = TIFFIsTiled(tif) != 0;
    if (pg->tiled) {
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) ||
            !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || tw < 1 || th < 1 ||
            tw > INT32_MAX || th > INT32_MAX) {
            tess_seterr(err, errlen, "%s: directory %ld has tiles of %lu x %lu pixels", path,
                        dirno, (unsigned long)tw, (unsigned long)th);
            return TESS_EINVAL;
        }
        pg->tw = (long)tw;
        pg->th = (long)th;
    } else {
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps < 1) {
            tess_seterr(err, errlen, "%s: directory %ld has RowsPerStrip 0", path, dirno);
            return TESS_EINVAL;
        }
        pg->rps = rps > h ? (long)h : (long)rps;
    }
    return tf_check_striles(tif, path, dirno, pg->tiled, err, errlen);
}

/* ---- the process-wide cache of page offsets ---------------------------------------- */

typedef struct tf_cached {
    char *path;
    tess_file_id id;
    tiffframe_shape sh;
    long long tile_px;
    uint64_t *offs;
} tf_cached;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tf_cached cache[TF_CACHE];
static int cache_next;

/* Copies the cached offsets of t's file into t: 1 when found, else 0. */
static int cache_get(tiffframe *t)
{
    int found = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < TF_CACHE && !found; i++) {
        tf_cached *c = &cache[i];
        if (!c->path || strcmp(c->path, t->path) != 0 || !tess_file_id_same(&c->id, &t->id))
            continue;
        t->offs = malloc((size_t)c->sh.npages * sizeof(uint64_t));
        if (t->offs) {
            memcpy(t->offs, c->offs, (size_t)c->sh.npages * sizeof(uint64_t));
            t->sh = c->sh;
            t->tile_px = c->tile_px;
            found = 1;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* Keeps a copy of t's offsets (nothing when out of memory). */
static void cache_put(const tiffframe *t)
{
    char *p = strdup(t->path);
    uint64_t *o = malloc((size_t)t->sh.npages * sizeof(uint64_t));
    if (!p || !o) {
        free(p);
        free(o);
        return;
    }
    memcpy(o, t->offs, (size_t)t->sh.npages * sizeof(uint64_t));
    pthread_mutex_lock(&cache_lock);
    tf_cached *c = &cache[cache_next];
    cache_next = (cache_next + 1) % TF_CACHE;
    free(c->path);
    free(c->offs);
    c->path = p;
    c->id = t->id;
    c->sh = t->sh;
    c->tile_px = t->tile_px;
    c->offs = o;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- opening ----------------------------------------------------------------------- */

static int tf_signature(const unsigned char *b)
{
    return (b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) && b[3] == 0) ||
           (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43));
}

int tiffframe_is_tiff(const char *path)
{
    unsigned char sig[4];
    return tess_read_prefix(path, sig, sizeof(sig)) && tf_signature(sig);
}

/* Walks the directory chain of t's file once: the shape, the offsets of the pages.  The
 * handle used is left loaded (*hout).  Returns 0 or TESS_E* with err. */
static int tf_walk(tiffframe *t, tf_handle **hout, char *err, size_t errlen)
{
    int rc = 0;
    tf_handle *h = tf_handle_open(t->fd, (uint64_t)t->id.size, t->path, &rc, err, errlen);
    if (!h)
        return rc;
    long cap = 0, n = 0;
    for (long dirno = 0;; dirno++) {
        tf_page pg;
        if ((rc = tf_describe(h->tif, t->path, dirno, &pg, err, errlen)))
            break;
        if (!pg.reduced) {
            if (n == 0) {
                t->sh.nx = pg.nx;
                t->sh.ny = pg.ny;
                t->sh.type = pg.type;
                t->sh.esize = pg.esize;
            } else if (pg.nx != t->sh.nx || pg.ny != t->sh.ny || pg.type != t->sh.type) {
                tess_seterr(err, errlen, "%s: page %ld is %ld x %ld %s, page 0 is %ld x %ld %s; "
                            "the pages of a TIFF stack must be alike", t->path, n, pg.nx, pg.ny,
                            type_name(pg.type), t->sh.nx, t->sh.ny, type_name(t->sh.type));
                rc = TESS_EINVAL;
                break;
            }
            if (n == TF_MAX_PAGES) {
                tess_seterr(err, errlen, "%s: more than %d pages", t->path, TF_MAX_PAGES);
                rc = TESS_EINVAL;
                break;
            }
            if (n == cap) {
                long nc = cap ? cap * 2 : 64;
                uint64_t *o = realloc(t->offs, (size_t)nc * sizeof(uint64_t));
                if (!o) {
                    tess_seterr(err, errlen, "out of memory opening %s", t->path);
                    rc = TESS_ENOMEM;
                    break;
                }
                t->offs = o;
                cap = nc;
            }
            if (pg.tiled && (long long)pg.tw * pg.th > t->tile_px)
                t->tile_px = (long long)pg.tw * pg.th;
            t->offs[n++] = TIFFCurrentDirOffset(h->tif);
        }
        tf_clear(&h->io);
        if (!TIFFReadDirectory(h->tif)) {
            if (h->io.have_error) {
                tess_seterr(err, errlen, "%s: directory %ld: %s", t->path, dirno + 1,
                            tf_msg(&h->io));
                rc = TESS_EIO;
            }
            break;
        }
    }
    if (!rc && n == 0) {
        tess_seterr(err, errlen, "%s: no full-resolution page", t->path);
        rc = TESS_EINVAL;
    }
    if (rc) {
        tf_handle_close(h);
        return rc;
    }
    t->sh.npages = n;
    h->dir = TIFFCurrentDirOffset(h->tif);
    *hout = h;
    return 0;
}

void tiffframe_close(tiffframe *t)
{
    if (!t)
        return;
    while (t->idle) {
        tf_handle *h = t->idle;
        t->idle = h->next;
        tf_handle_close(h);
    }
    if (t->fd >= 0)
        close(t->fd);
    pthread_mutex_destroy(&t->lock);
    free(t->offs);
    free(t->path);
    free(t);
}

int tiffframe_open(const char *path, tiffframe **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_once(&quiet_once, tf_quiet);
    struct stat st;
    int fd = tess_open_regular(path, 0, &st, err, errlen);
    if (fd < 0)
        return TESS_EIO;
    unsigned char sig[4];
    if (pread(fd, sig, sizeof(sig), 0) != (ssize_t)sizeof(sig) || !tf_signature(sig)) {
        close(fd);
        tess_seterr(err, errlen, "%s is not a TIFF file", path);
        return TESS_EINVAL;
    }
    tiffframe *t = calloc(1, sizeof(*t));
    if (!t || !(t->path = strdup(path))) {
        free(t);
        close(fd);
        tess_seterr(err, errlen, "out of memory opening %s", path);
        return TESS_ENOMEM;
    }
    t->fd = fd;
    tess_file_id_from_stat(&st, &t->id);
    pthread_mutex_init(&t->lock, NULL);
    if (!cache_get(t)) {
        tf_handle *h = NULL;
        int rc = tf_walk(t, &h, err, errlen);
        if (rc) {
            tiffframe_close(t);
            return rc;
        }
        t->idle = h;
        t->nidle = 1;
        cache_put(t);
    }
    *out = t;
    return 0;
}

void tiffframe_get_shape(const tiffframe *t, tiffframe_shape *sh)
{
    *sh = t->sh;
}

int tiffframe_budget(const tiffframe *t, char *err, size_t errlen)
{
    int rc = decodelimit_check("the TIFF page", t->path, t->sh.nx, t->sh.ny, 1,
                               (size_t)t->sh.esize, err, errlen);
    if (!rc && t->tile_px > 0)
        rc = decodelimit_check("a TIFF tile", t->path, t->tile_px, 1, 1, (size_t)t->sh.esize,
                               err, errlen);
    return rc;
}

/* ---- reading ----------------------------------------------------------------------- */

/* An idle handle of t (or a new one), or NULL with err. */
static tf_handle *tf_take(tiffframe *t, int *rc, char *err, size_t errlen)
{
    pthread_mutex_lock(&t->lock);
    tf_handle *h = t->idle;
    if (h) {
        t->idle = h->next;
        t->nidle--;
    }
    pthread_mutex_unlock(&t->lock);
    return h ? h : tf_handle_open(t->fd, (uint64_t)t->id.size, t->path, rc, err, errlen);
}

/* Gives h back to t's idle list, or closes it (failed: its state is unknown). */
static void tf_give(tiffframe *t, tf_handle *h, int failed)
{
    if (!failed) {
        pthread_mutex_lock(&t->lock);
        if (t->nidle < TF_POOL) {
            h->next = t->idle;
            t->idle = h;
            t->nidle++;
            h = NULL;
        }
        pthread_mutex_unlock(&t->lock);
    }
    tf_handle_close(h);
}

/* n samples of `type` at src into out (as `as`) from element `at`: one loop per type and
 * output, so that each is a plain conversion loop. */
#define TF_CONVERT(T, O)                                                                  \
    do {                                                                                  \
        O *o = (O *)out + at;                                                             \
        for (long i = 0; i < n; i++) {                                                    \
            T v;                                                                          \
            memcpy(&v, src + sizeof(T) * (size_t)i, sizeof(T));                           \
            o[i] = (O)v;                                                                  \
        }                                                                                 \
    } while (0)
#define TF_CONVERT_TO(O)                                                                  \
    do {                                                                                  \
        if (type == TIFFFRAME_U8)                                                         \
            TF_CONVERT(uint8_t, O);                                                       \
        else if (type == TIFFFRAME_U16)                                                   \
            TF_CONVERT(uint16_t, O);                                                      \
        else if (type == TIFFFRAME_I16)                                                   \
            TF_CONVERT(int16_t, O);                                                       \
        else                                                                              \
            TF_CONVERT(float, O);                                                         \
    } while (0)

static void tf_emit(void *out, tiffframe_out as, size_t at, const unsigned char *src,
                    tiffframe_type type, int esize, long n)
{
    if (as == TIFFFRAME_OUT_STORED)
        memcpy((unsigned char *)out + at * (size_t)esize, src, (size_t)n * (size_t)esize);
    else if (as == TIFFFRAME_OUT_F64)
        TF_CONVERT_TO(double);
    else
        TF_CONVERT_TO(float);
}
#undef TF_CONVERT_TO
#undef TF_CONVERT

/* Whether strip or tile k of the loaded page of h has no offset (0: an entry libtiff
 * added to a short array, whatever the directory's counts said), which would read the
 * file's header as pixels.  1 with err, else 0. */
static int tf_strile_unset(const tiffframe *t, tf_handle *h, uint32_t k, const char *what,
                           char *err, size_t errlen)
{
    int bad = 0;
    if (TIFFGetStrileOffsetWithErr(h->tif, k, &bad) == 0 || bad) {
        tess_seterr(err, errlen, "%s: %s %lu has no offset (a short offset array)", t->path,
                    what, (unsigned long)k);
        return 1;
    }
    return 0;
}

/* The region from the loaded page pg of handle h (see tiffframe_read). */
static int tf_decode(tiffframe *t, tf_handle *h, const tf_page *pg, long x0, long y0, long w,
                     long hgt, tiffframe_out as, void *out, char *err, size_t errlen)
{
    const long nx = pg->nx, ny = pg->ny, es = pg->esize;
    const long ty0 = ny - y0 - hgt, ty1 = ny - y0;   /* TIFF rows [ty0, ty1) */
    tmsize_t chunk = pg->tiled ? TIFFTileSize(h->tif) : TIFFStripSize(h->tif);
    long long need = pg->tiled ? (long long)pg->tw * pg->th * es : (long long)pg->rps * nx * es;
    if (chunk <= 0 || (long long)chunk < need) {
        tess_seterr(err, errlen, "%s: the %s size of the page is inconsistent (%s)", t->path,
                    pg->tiled ? "tile" : "strip", tf_msg(&h->io));
        return TESS_EIO;
    }
    unsigned char *buf = malloc((size_t)chunk);
    if (!buf) {
        tess_seterr(err, errlen, "out of memory decoding %s", t->path);
        return TESS_ENOMEM;
    }
    int rc = 0;
    if (!pg->tiled) {
        for (long s = ty0 / pg->rps; s * pg->rps < ty1 && !rc; s++) {
            long r0 = s * pg->rps, r1 = r0 + pg->rps < ny ? r0 + pg->rps : ny;
            if (tf_strile_unset(t, h, (uint32_t)s, "strip", err, errlen)) {
                rc = TESS_EIO;
                break;
            }
            tf_clear(&h->io);
            tmsize_t got = TIFFReadEncodedStrip(h->tif, (uint32_t)s, buf, chunk);
            if (got < (tmsize_t)((r1 - r0) * nx * es)) {
                tess_seterr(err, errlen, "%s: cannot decode strip %ld (%s)", t->path, s,
                            tf_msg(&h->io));
                rc = TESS_EIO;
                break;
            }
            for (long tr = r0 > ty0 ? r0 : ty0; tr < r1 && tr < ty1; tr++)
                tf_emit(out, as, (size_t)(ny - 1 - tr - y0) * (size_t)w,
                        buf + ((size_t)(tr - r0) * (size_t)nx + (size_t)x0) * (size_t)es,
                        pg->type, (int)es, w);
        }
    } else {
        for (long ty = ty0 / pg->th * pg->th; ty < ty1 && !rc; ty += pg->th) {
            for (long tx = x0 / pg->tw * pg->tw; tx < x0 + w && !rc; tx += pg->tw) {
                uint32_t tile = TIFFComputeTile(h->tif, (uint32_t)tx, (uint32_t)ty, 0, 0);
                if (tf_strile_unset(t, h, tile, "tile", err, errlen)) {
                    rc = TESS_EIO;
                    break;
                }
                tf_clear(&h->io);
                tmsize_t got = TIFFReadEncodedTile(h->tif, tile, buf, chunk);
                if (got < (tmsize_t)need) {
                    tess_seterr(err, errlen, "%s: cannot decode tile %lu (%s)", t->path,
                                (unsigned long)tile, tf_msg(&h->io));
                    rc = TESS_EIO;
                    break;
                }
                long c0 = tx > x0 ? tx : x0;
                long c1 = tx + pg->tw < x0 + w ? tx + pg->tw : x0 + w;
                for (long tr = ty > ty0 ? ty : ty0; tr < ty + pg->th && tr < ty1; tr++)
                    tf_emit(out, as, (size_t)(ny - 1 - tr - y0) * (size_t)w + (size_t)(c0 - x0),
                            buf + ((size_t)(tr - ty) * (size_t)pg->tw + (size_t)(c0 - tx)) *
                                      (size_t)es,
                            pg->type, (int)es, c1 - c0);
            }
        }
    }
    free(buf);
    return rc;
}

static unsigned long long nreads;   /* tiffframe_read calls */

unsigned long long tiffframe_reads(void)
{
    return __atomic_load_n(&nreads, __ATOMIC_RELAXED);
}

int tiffframe_read(tiffframe *t, long page, long x0, long y0, long w, long h, tiffframe_out as,
                   void *out, char *err, size_t errlen)
{
    __atomic_add_fetch(&nreads, 1, __ATOMIC_RELAXED);
    if (page < 0 || page >= t->sh.npages || x0 < 0 || y0 < 0 || w < 1 || h < 1 ||
        x0 > t->sh.nx - w || y0 > t->sh.ny - h) {
        tess_seterr(err, errlen, "region %ld x %ld at (%ld, %ld) of page %ld outside the %ld x "
                    "%ld x %ld TIFF file %s", w, h, x0, y0, page, t->sh.nx, t->sh.ny,
                    t->sh.npages, t->path);
        return TESS_ERANGE;
    }
    int rc = tiffframe_budget(t, err, errlen);
    if (rc)
        return rc;
    tf_handle *th = tf_take(t, &rc, err, errlen);
    if (!th)
        return rc;
    if (th->dir != t->offs[page]) {
        tf_clear(&th->io);
        if (!TIFFSetSubDirectory(th->tif, t->offs[page])) {
            tess_seterr(err, errlen, "%s: cannot read page %ld (%s)", t->path, page,
                        tf_msg(&th->io));
            tf_give(t, th, 1);
            return TESS_EIO;
        }
        th->dir = t->offs[page];
    }
    tf_page pg;
    rc = tf_describe(th->tif, t->path, page, &pg, err, errlen);
    if (!rc && (pg.nx != t->sh.nx || pg.ny != t->sh.ny || pg.type != t->sh.type ||
                (pg.tiled && (long long)pg.tw * pg.th > t->tile_px))) {
        tess_seterr(err, errlen, "%s: page %ld changed since the file was opened", t->path, page);
        rc = TESS_EIO;
    } else if (rc) {
        rc = TESS_EIO;
    }
    if (!rc)
        rc = tf_decode(t, th, &pg, x0, y0, w, h, as, out, err, errlen);
    tf_give(t, th, rc != 0);
    return rc;
}

/* ---- by path ----------------------------------------------------------------------- */

int tiffframe_read_info(const char *path, fitsimg_info *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof(*info));
    tiffframe *t;
    int rc = tiffframe_open(path, &t, err, errlen);
    if (rc)
        return rc;
    const tiffframe_shape *sh = &t->sh;
    static const int bitpix[] = {0, 8, 16, 16, -32};
    info->naxis = sh->npages > 1 ? 3 : 2;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        info->naxes[i] = 1;
    info->naxes[0] = sh->nx;
    info->naxes[1] = sh->ny;
    info->naxes[2] = sh->npages;
    info->bitpix = bitpix[sh->type];
    info->bscale = 1;
    info->bzero = sh->type == TIFFFRAME_U16 ? 32768 : 0;
    info->data_offset = -1;
    info->file_size = t->id.size;
    info->mtime_ns = t->id.mtime_ns;
    char c[FITSCARD_LEN];
    snprintf(c, sizeof c, "a TIFF file of %ld %s greyscale page%s", sh->npages,
             type_name(sh->type), sh->npages > 1 ? "s" : "");
    fitscard_list l;
    fitscard_list_init(&l, 8);
    fitscard_list_logical(&l, "SIMPLE", 1, c);
    fitscard_list_int(&l, "BITPIX", info->bitpix, NULL);
    fitscard_list_int(&l, "NAXIS", info->naxis, NULL);
    fitscard_list_int(&l, "NAXIS1", sh->nx, NULL);
    fitscard_list_int(&l, "NAXIS2", sh->ny, NULL);
    if (info->naxis == 3)
        fitscard_list_int(&l, "NAXIS3", sh->npages, "pages");
    if (sh->type == TIFFFRAME_U16) {
        fitscard_list_int(&l, "BZERO", 32768, "unsigned 16-bit samples");
        fitscard_list_int(&l, "BSCALE", 1, NULL);
    }
    tiffframe_close(t);
    int n = 0;
    if (fitscard_list_take(&l, &info->header, &n) != 0) {
        tess_seterr(err, errlen, "out of memory reading %s", path);
        return TESS_ENOMEM;
    }
    info->nkeys = n;
    return 0;
}

int tiffframe_decode_check(const char *path, char *err, size_t errlen)
{
    tiffframe *t;
    int rc = tiffframe_open(path, &t, err, errlen);
    if (rc)
        return rc;
    rc = tiffframe_budget(t, err, errlen);
    tiffframe_close(t);
    return rc;
}

int tiffframe_read_path(const char *path, long page, long x0, long y0, long w, long h,
                        tiffframe_out as, void *out, char *err, size_t errlen)
{
    tiffframe *t;
    int rc = tiffframe_open(path, &t, err, errlen);
    if (rc)
        return rc;
    rc = tiffframe_read(t, page, x0, y0, w, h, as, out, err, errlen);
    tiffframe_close(t);
    return rc;
}

/* ---- writing ----------------------------------------------------------------------- */

int tiffframe_write(const char *path, const unsigned short *data, long nx, long ny, int bits,
                    int deflate, char *err, size_t errlen)
{
    if ((bits != 8 && bits != 16) || nx < 1 || ny < 1 || nx > INT32_MAX || ny > INT32_MAX) {
        tess_seterr(err, errlen, "bad TIFF frame parameters");
        return TESS_EINVAL;
    }
    pthread_once(&quiet_once, tf_quiet);
    tf_io io;
    memset(&io, 0, sizeof(io));
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    size_t es = bits == 16 ? 2 : 1;
    unsigned char *row = malloc((size_t)nx * es);
    if (!o || !row) {
        TIFFOpenOptionsFree(o);
        free(row);
        tess_seterr(err, errlen, "out of memory writing %s", path);
        return TESS_ENOMEM;
    }
    TIFFOpenOptionsSetErrorHandlerExtR(o, tf_on_error, &io);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tf_on_warning, &io);
    TIFF *tif = TIFFOpenExt(path, "w", o);
    TIFFOpenOptionsFree(o);
    if (!tif) {
        free(row);
        tess_seterr(err, errlen, "cannot create %s (%s)", path, tf_msg(&io));
        return TESS_EIO;
    }
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)nx);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)ny);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, (uint16_t)SAMPLEFORMAT_UINT);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, (uint16_t)PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, (uint32_t)16);
    TIFFSetField(tif, TIFFTAG_COMPRESSION,
                 (uint16_t)(deflate ? COMPRESSION_ADOBE_DEFLATE : COMPRESSION_NONE));
    if (deflate)
        TIFFSetField(tif, TIFFTAG_ZIPQUALITY, 1);
    unsigned maxv = bits == 16 ? 65535u : 255u;
    int ok = 1;
    for (long r = 0; r < ny && ok; r++) {
        const unsigned short *src = data + (size_t)(ny - 1 - r) * (size_t)nx;
        for (long i = 0; i < nx; i++) {
            unsigned v = src[i] > maxv ? maxv : src[i];
            if (bits == 16) {
                uint16_t u = (uint16_t)v;
                memcpy(row + 2 * i, &u, 2);
            } else {
                row[i] = (unsigned char)v;
            }
        }
        ok = TIFFWriteScanline(tif, row, (uint32_t)r, 0) == 1;
    }
    free(row);
    if (ok)
        ok = TIFFWriteDirectory(tif) == 1;
    TIFFClose(tif);
    if (!ok || io.have_error) {
        tess_seterr(err, errlen, "cannot write %s (%s)", path, tf_msg(&io));
        return TESS_EIO;
    }
    return 0;
}
