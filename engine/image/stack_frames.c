/* The open-frame LRU of a stack: files opened (mapped, decoded or read through cfitsio or libtiff), shared by readers, evicted over bounds. */
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

/* ---- open frames ------------------------------------------------------------------ */

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
    for (; s->npaths < npaths; s->npaths++) {   /* npaths: the paths held, for stack_free */
        if (!(s->paths[s->npaths] = strdup(paths[s->npaths]))) {
            stack_free(s);
            return NULL;
        }
    }
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
    if (f->png)
        pngframe_release(f->pix, f->pixbytes);
    else
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
int stack_same_file(const frame *f, const struct stat *st)
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
    /* The header's BITPIX, BSCALE, BZERO and BLANK are read straight into the frame. */
    int compressed = 0, naxis = 0;
    long naxes[FITSIMG_MAXDIM] = {1, 1, 1, 1};
    long long datastart = 0, ds = 0;
    uint64_t hhash = 0;
    f->bscale = 1;
    if (s->hdu == 0 && fitshead_plain(path, &f->bitpix, &naxis, naxes, &ds, &f->bscale,
                                      &f->bzero, &f->has_blank, &f->blank, &hhash)) {
        datastart = ds;
    } else {
        f->bitpix = naxis = 0;
        for (int a = 0; a < FITSIMG_MAXDIM; a++)
            naxes[a] = 1;
        f->bscale = 1;
        f->bzero = 0;
        f->has_blank = 0;
        f->blank = 0;
        int rc = fitshead_image_params(path, s->hdu, &compressed, &f->bitpix, &naxis, naxes,
                                       &datastart, &f->bscale, &f->bzero, &f->has_blank,
                                       &f->blank, err, errlen);
        if (!rc && s->header_hash && s->header_hash[f->idx])
            rc = fitshead_hash(path, s->hdu, &hhash, err, errlen);
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
    int sized = tess_size_dims((size_t)(f->bitpix < 0 ? -f->bitpix : f->bitpix) / 8,
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
    int g = stack_path_guard(path, err, errlen);
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
            f->png = 1;
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

/* Whether file `idx` is no longer the one open frame f was opened from (gone, or another
 * file at its path).  A stat(2) at every acquisition (about a microsecond), not once a
 * second: what a request reads is then never older than the version it put in its cache
 * key (taken before: daemon/catalog.h dataset_version), so a replaced file cannot leave
 * its old pixels in the cache under the new version.  Under the stack's lock. */
static int frame_replaced_locked(stack *s, frame *f, long idx)
{
    double t = tess_mono_s();
    if (t - f->checked < 0.0)
        return 0;
    f->checked = t;
    tess_file_id now;
    return tess_file_id_of(s->paths[idx], 0, &now, NULL, 0) != 0 ||
           !tess_file_id_same(&now, &f->id);
}

/* The open frame of file `idx` with a reference for the caller (stack_release it). */
int stack_frame_acquire(stack *s, long idx, frame **out, char *err, size_t errlen)
{
    frame *closeme = NULL;
    pthread_mutex_lock(&s->lock);
    frame *f = s->table[idx];
    /* A file truncated under the map (engine/base/mapguard.h) or replaced: open it again. */
    if (f && (mapguard_faulted(f->guard) || frame_replaced_locked(s, f, idx))) {
        frame *c = evict_locked(s, f);
        if (c) {
            c->close_next = NULL;
            closeme = c;
        }
        f = NULL;
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
 * caller then fails its read with stack_frame_fault_error. */
int stack_frame_release(stack *s, frame *f)
{
    int faulted = mapguard_faulted(f->guard);
    pthread_mutex_lock(&s->lock);
    int closeit = --f->refs == 0 && f->dead;
    pthread_mutex_unlock(&s->lock);
    if (closeit)
        frame_close(s, f);
    return faulted;
}

int stack_frame_fault_error(stack *s, long idx, char *err, size_t errlen)
{
    tess_seterr(err, errlen, "%s was truncated while being read", s->paths[idx]);
    return TESS_EIO;
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
