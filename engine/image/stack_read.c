/* Reading a stack: stored values converted to doubles, boxes of a plane and cuts through the planes. */
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

/* ---- conversion ---------------------------------------------------------------------- */

/* Converts n pixels of `f` starting at element `off` of its data, `stride` elements
 * apart, into out[0..n-1], as cfitsio does: v * BSCALE + BZERO (not applied when they
 * are 1 and 0), BLANK -> NaN for integers. */
void stack_convert_run(const frame *f, size_t off, size_t n, size_t stride, double *out)
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
/* IEEE floats: the bits in big-endian order, NaN kept as the blank value. */
#define FLOAT_RUN(T, U, LOAD, SIZE)                                                       \
    do {                                                                                  \
        for (size_t k = 0; k < n; k++) {                                                  \
            U u = LOAD(d + (SIZE) * (off + k * stride));                                  \
            T v;                                                                          \
            memcpy(&v, &u, sizeof(v));                                                    \
            out[k] = scaled && !isnan(v) ? v * sc + zo : v;                               \
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
        FLOAT_RUN(float, uint32_t, be32, 4);
        break;
    case -64:
        FLOAT_RUN(double, uint64_t, be64, 8);
        break;
    default:
        for (size_t k = 0; k < n; k++)
            out[k] = NAN;
    }
#undef INT_RUN
#undef FLOAT_RUN
#undef GET8
#undef GET16
#undef GET32
#undef GET64
}

/* The box (x0, y0, w, h) of plane zf of frame f into out (row-major w x h). */
int stack_frame_box(stack *s, frame *f, long zf, long x0, long y0, long w, long h, double *out,
                     char *err, size_t errlen)
{
    if (f->kind == SRC_CFITSIO)
        return fitsimg_read_region(s->paths[f->idx], s->hdu, zf, x0, y0, w, h, out, err, errlen);
    if (f->kind == SRC_TIFF)
        return tiffframe_read(f->tif, zf, x0, y0, w, h, TIFFFRAME_OUT_F64, out, err, errlen);
    size_t plane = (size_t)zf * (size_t)s->nx * (size_t)s->ny;
    if (w == 1) {
        stack_convert_run(f, plane + (size_t)y0 * (size_t)s->nx + (size_t)x0, (size_t)h, (size_t)s->nx,
                    out);
        return 0;
    }
    for (long j = 0; j < h; j++)
        stack_convert_run(f, plane + (size_t)(y0 + j) * (size_t)s->nx + (size_t)x0, (size_t)w, 1,
                    out + (size_t)j * (size_t)w);
    return 0;
}

/* File index and plane inside it of plane z. */
void stack_locate(const stack *s, long z, long *idx, long *zf)
{
    if (s->npaths == 1) {
        *idx = 0;
        *zf = z;
    } else {
        *idx = z;
        *zf = 0;
    }
}

/* The frame that holds plane z, acquired (stack_frame_release it), with the file index and the
 * plane inside the file.  TESS_ERANGE for z outside the stack, else stack_frame_acquire's codes. */
int stack_plane_frame(stack *s, long z, frame **f, long *idx, long *zf, char *err,
                       size_t errlen)
{
    if (z < 0 || z >= s->nz) {
        tess_seterr(err, errlen, "plane %ld outside the %ld planes", z, s->nz);
        return TESS_ERANGE;
    }
    stack_locate(s, z, idx, zf);
    return stack_frame_acquire(s, *idx, f, err, errlen);
}

static int box_at(stack *s, long z, long x0, long y0, long w, long h, double *out, char *err,
                  size_t errlen)
{
    long idx, zf;
    frame *f;
    int rc = stack_plane_frame(s, z, &f, &idx, &zf, err, errlen);
    if (rc)
        return rc;
    rc = stack_frame_box(s, f, zf, x0, y0, w, h, out, err, errlen);
    if (stack_frame_release(s, f) && rc == 0)
        rc = stack_frame_fault_error(s, idx, err, errlen);
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
    if ((rc = stack_frame_acquire(s, 0, &f, err, errlen)))
        return rc;
    if (f->kind == SRC_MMAP) {
        size_t plane = (size_t)s->nx * (size_t)s->ny;
        stack_convert_run(f, (size_t)z0 * plane + (size_t)y * (size_t)s->nx + (size_t)x, (size_t)n,
                    plane, out);
    } else {
        for (long k = 0; k < n && !rc; k++)
            rc = stack_frame_box(s, f, z0 + k, x, y, 1, 1, out + k, err, errlen);
    }
    if (stack_frame_release(s, f) && rc == 0)
        rc = stack_frame_fault_error(s, 0, err, errlen);
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

