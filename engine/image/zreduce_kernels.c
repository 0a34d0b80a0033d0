/* The reductions along z of a stack (stack_zreduce, stack_reduce_plane): the kernels, the partials and their files. */
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
/* A partial of nothing yet in `mode`, its arrays not allocated. */
static stack_zpart *zpart_alloc(int op, int mode, long npix)
{
    stack_zpart *p = calloc(1, sizeof(*p));
    if (p) {
        p->op = op;
        p->mode = mode;
        p->npix = npix;
    }
    return p;
}

static stack_zpart *zpart_new_int(int op, long npix, long long bzero, int sums)
{
    stack_zpart *p = zpart_alloc(op, ZM_INT, npix);
    if (!p)
        return NULL;
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
    stack_zpart *p = zpart_alloc(op, ZM_DBL, npix);
    if (!p)
        return NULL;
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
    if (fd >= 0 && !stack_same_file(f, &st)) {
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
                         int k, int fresh, zr_acc *acc, char *err, size_t errlen)
{
    size_t np = (size_t)s->nx * (size_t)s->ny;
    size_t es = rk == RAW_U8 ? 1 : 2, tsz = rk == RAW_U8 ? sizeof(uint16_t) : sizeof(uint32_t);
    size_t qsz = rk == RAW_U8 ? sizeof(uint32_t) : sizeof(uint64_t);
    const int batch = rk == RAW_U8 && (p->op == STACK_ZOP_SUM || p->op == STACK_ZOP_MEAN);
    if (!fresh)
        ;   /* the sums go on from the previous chunk's */
    else if (rk == RAW_U8)
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
    /* The narrow sums of acc hold the last `nrun` frames folded (of layout run_rk), not
     * yet moved into the partial: chunks cut short by `bound` go on in them up to
     * ZR_CHUNK frames, so that a shorter bound costs no extra flush. */
    int nrun = 0, run_rk = RAW_NONE;
    pthread_mutex_lock(&s->lock);
    size_t bound = s->zr_chunk_bytes;
    pthread_mutex_unlock(&s->lock);
    for (long zc = z0; zc < z1 && !rc;) {
        if (cancel && *cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        /* Up to ZR_CHUNK frames, ending early once the decoded frames held pass `bound`
         * (ZR_CHUNK_BYTES) or number ZR_HOLD_FRAMES: at least one frame, so at most
         * min(bound + one frame, ZR_HOLD_FRAMES frames) held.  k is
         * the frames taken; the next chunk starts after them. */
        int kmax = (int)(z1 - zc < ZR_CHUNK ? z1 - zc : ZR_CHUNK), k = 0, nheld = 0;
        size_t held = 0;
        frame *fr[ZR_CHUNK] = {NULL};
        long zf[ZR_CHUNK];
        while (k < kmax && (k == 0 || (held < bound && nheld < ZR_HOLD_FRAMES))) {
            long idx;
            stack_locate(s, zc + k, &idx, &zf[k]);
            rc = stack_frame_acquire(s, idx, &fr[k], err, errlen);
            if (rc)
                break;
            if (k == 0 || fr[k] != fr[k - 1]) {   /* a cube's planes share one frame */
                held += fr[k]->pixbytes;
                nheld += fr[k]->pixbytes > 0;
            }
            k++;
        }
        if (rc) {
            for (int j = 0; j < k; j++)
                stack_frame_release(s, fr[j]);
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
        /* the narrow sums so far go into the partial first when this chunk is of another
         * layout or BZERO, or would pass ZR_CHUNK frames with them */
        if (nrun && (rk != run_rk || bz0 != p->bzero || nrun + k > ZR_CHUNK)) {
            rc = zr_flush(p, run_rk, &acc, np);
            if (!rc)
                p->n += nrun;
            nrun = 0;
        }
        if (!rc && !p) {
            p = rk != RAW_NONE ? zpart_new_int(op, (long)np, bz0, 0) : zpart_new_dbl(op, (long)np);
            if (!p)
                rc = TESS_ENOMEM;
        }
        if (!rc && p->mode == ZM_INT && (rk == RAW_NONE || bz0 != p->bzero))
            rc = zpart_to_dbl(p);
        if (!rc && p->mode == ZM_INT) {
            if (!acc.buf && zr_acc_alloc(&acc, op, np) != 0)
                rc = TESS_ENOMEM;
            if (!rc)
                rc = zr_fold_chunk(s, p, rk, fr, zf, k, nrun == 0, &acc, err, errlen);
            if (!rc) {
                nrun += k;
                run_rk = rk;
            }
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
                        rc = stack_frame_box(s, fr[j], zf[j], 0, 0, s->nx, s->ny, whole, err, errlen);
                        if (!rc)
                            fold_dbl(p, 0, whole, np);
                    }
                } else {
                    if (!tmp && !(tmp = malloc(ZR_BLOCK * sizeof(double))))
                        rc = TESS_ENOMEM;
                    for (size_t b0 = 0; b0 < np && !rc; b0 += ZR_BLOCK) {
                        size_t n = np - b0 < ZR_BLOCK ? np - b0 : ZR_BLOCK;
                        for (int j = j0; j < j1; j++) {
                            stack_convert_run(fr[j], (size_t)zf[j] * np + b0, n, 1, tmp);
                            fold_dbl(p, b0, tmp, n);
                        }
                    }
                }
            }
        }
        for (int j = 0; j < k; j++) {
            long fi = fr[j]->idx;
            if (stack_frame_release(s, fr[j]) && rc == 0)
                rc = stack_frame_fault_error(s, fi, err, errlen);
        }
        zc += k;
    }
    if (!rc && nrun) {
        if (p->n == 0 && nrun == z1 - z0 && run_rk == RAW_U8 &&
            (op == STACK_ZOP_SUM || op == STACK_ZOP_MEAN)) {
            /* The range folded in one run of narrow sums (a job block of at most ZR_CHUNK
             * 8-bit frames): its uint16 sums become the partial's as they are, saved as
             * they are (stack_zpart_save); widened only when merged.  This spares an
             * 8-byte-a-pixel array written, scanned and narrowed again per block. */
            p->s16 = acc.t1;
            acc.t1 = NULL;
        } else {
            rc = zr_flush(p, run_rk, &acc, np);
        }
        if (!rc)
            p->n += nrun;
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
    int rc = stack_plane_frame(s, z, &f, &idx, &zf, err, errlen);
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
    int faulted = p->frame_ ? stack_frame_release(s, p->frame_) : 0;
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
    int rc = stack_plane_frame(s, z, &f, &idx, &zf, err, errlen);
    if (rc)
        return rc;
    long long bz;
    int rk = raw_kind(f, &bz);
    if (rk == RAW_NONE) {
        stack_frame_release(s, f);
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
    if (stack_frame_release(s, f) && !rc)
        rc = stack_frame_fault_error(s, idx, err, errlen);
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

/* One piece of narrowed sums, as written and read. */
typedef union zp_piece {
    uint16_t u16[ZP_PIECE];
    int32_t i32[ZP_PIECE];
} zp_piece;

/* Writes the n sums s1 as uint16 or int32 (`narrow`), a piece at a time. */
static int write_narrow(int fd, const int64_t *s1, long n, int narrow)
{
    zp_piece t;
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
    zp_piece t;
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

