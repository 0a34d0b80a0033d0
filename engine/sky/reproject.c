/* The reprojection engine: output blocks run in parallel, each mapping its coordinates once and sampling every plane. */
#include "engine/sky/reproject.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/sky/coordmap.h"
#include "engine/sky/exact.h"
#include "engine/sky/kernels.h"
#include "engine/sky/simd.h"
#include "engine/base/error.h"
#include "engine/base/hugemem.h"

/* Default block edge, output pixels. */
#define RP_BLOCK 256

/* Sampling a block row by row, the source pixels of the row RP_PREFETCH_ROWS ahead are
 * prefetched at every RP_PREFETCH_STEP-th position (rp_kernel_prefetch before the row
 * is sampled; for float output of nearest and bilinear, rp_kernel_sample_f32 issues the
 * same hints inside its loop, one a group of four positions).  Measured on
 * 4096^2 rotated by 20 deg (AMD EPYC Zen 4, 1 thread), nearest's sampling time per pixel:
 * 4.2 ns without, 2.4 (4 rows, step 2), 2.25 (8, 4), 2.4 (16, 4), 2.4 (8, 8). */
#define RP_PREFETCH_ROWS 8
#define RP_PREFETCH_STEP 4

/* Exact (default block): bands per thread at least, unless bands would get shorter
 * than RP_EXACT_MIN_BAND rows.  8 rather than 4: on 1000 x 1000 pixels with 2 threads,
 * 63-row bands took 0.060-0.062 s where 125-row bands took 0.066-0.069 s (the last band
 * to finish is shorter), and 32-row bands 0.075 s (their corner cost). */
#define RP_EXACT_SHARE 8
#define RP_EXACT_MIN_BAND 32

/* Positions gathered per batch when interpolated positions next to a sampling decision
 * are recomputed exactly. */
#define RP_FIXCAP 1024

/* Bytes of prepared kernels (bicubic coefficients) held at once for a cube: planes are
 * reprojected in groups that fit, one coordinate map per block and group. */
#define RP_KERNEL_BUDGET ((size_t)256 << 20)

static const char *const method_names[] = { "nearest", "bilinear", "bicubic", "lanczos3", "exact" };

int rp_method_parse(const char *s, rp_method *m)
{
    if (!s || !m)
        return TESS_EINVAL;
    for (int i = 0; i < (int)(sizeof method_names / sizeof method_names[0]); i++) {
        if (strcasecmp(s, method_names[i]) == 0) {
            *m = (rp_method)i;
            return 0;
        }
    }
    return TESS_EINVAL;
}

const char *rp_method_name(rp_method m)
{
    if ((int)m < 0 || (int)m >= (int)(sizeof method_names / sizeof method_names[0]))
        return "unknown";
    return method_names[m];
}

void rp_options_init(rp_options *o)
{
    memset(o, 0, sizeof *o);
    o->method = RP_BILINEAR;
    o->max_coord_error = 0.001;
    o->priority = POOL_BATCH;
}

/* The coordinate map's chunks and lattices of one block, at most (coordmap.c). */
#define RP_MAP_BYTES ((double)((size_t)1 << 20))

double rp_scratch_bytes(rp_method method, long in_nx, long in_ny, long out_nx, long out_ny)
{
    if (in_nx < 1 || in_ny < 1 || out_nx < 1 || out_ny < 1)
        return 0.0;
    if (method == RP_EXACT) {   /* worker_init and rp_exact_rows_ctx of one band */
        long band = RP_BLOCK / 2 < out_ny ? RP_BLOCK / 2 : out_ny;
        return (double)band * (double)out_nx * 2.0 * sizeof(double)
               + rp_exact_scratch_bytes(in_nx, in_ny, out_nx, band) + RP_MAP_BYTES;
    }
    return (double)RP_BLOCK * RP_BLOCK * 3.0 * sizeof(double)
           + (double)RP_FIXCAP * (4.0 * sizeof(double) + sizeof(size_t)) + RP_MAP_BYTES;
}

/* ------------------------------------------------------------------------------------ */
/* One run: the blocks of one group of planes, shared by the caller and its helpers      */

/* What every block of a run reads.  Owned by the caller, valid while a block runs. */
typedef struct job {
    const skywcs *in, *out;        /* 2-D celestial (exact) or as given (interpolation) */
    const rp_cube *src;
    rp_cube *dst;
    float *footprint;
    const rp_options *opt;         /* the caller's: method, coordinate error, callbacks */
    long block, nbx;               /* interpolation: block edge, blocks per row */
    long ring;                     /* opt->ring_rows (rows of dst held), 0: every row */
    long band, nbands;             /* exact: rows per band, bands per plane */
    long z0;                       /* first plane of the group */
    long nz;                       /* planes in the group */
    rp_kernel *const *kern;        /* kern[z - z0] (interpolation) */
    long done_base, total;         /* progress: blocks of earlier groups, all blocks */
} job;

/* The shared state of a run; refcounted, since a helper task queued on a pool may start
 * after the caller has returned (it then only looks at `next`/`stop` and leaves). */
typedef struct run {
    pthread_mutex_t lock;
    pthread_cond_t idle;           /* signalled when inflight drops to 0 */
    pthread_cond_t freed;          /* with a ring: a row of blocks released, or stop */
    long *released;                /* with a ring: per row of blocks, blocks whose
                                      block_done has returned */
    long next, nunits;             /* next block to take, blocks in the run */
    long inflight;                 /* blocks being worked on */
    long done;
    int refs;
    int stop;
    int rc;                        /* first error, 0 if none */
    long finite, inside;           /* finite output values; pixels proving an overlap */
    char err[256];
    const job *j;                  /* read only by a thread that has just taken a block,
                                      which the caller waits for */
} run;

/* The scratch of one thread working on interpolation blocks. */
typedef struct worker {
    rp_coordmap *map;              /* output pixels -> input pixels */
    double *xi, *yi;               /* block * block each */
    size_t xi_bytes;               /* the buffer at xi (xi, yi and val), in bytes */
    double *val;                   /* block: the values of one row of a block */
    double *fx, *fy, *gx, *gy;     /* RP_FIXCAP each */
    size_t *fidx;
    double *band, *fband;          /* exact: band * nx each */
    rp_exact_ctx *ex;              /* exact: scratch kept from band to band */
} worker;

/* The block scratch (xi, yi, val) of the calling thread's last worker, kept for its next
 * one: a mosaic runs rp_reproject once per input and output block on the same pool
 * thread, and a fresh buffer each time is a 2 MiB huge page faulted in and zero-filled.
 * One buffer a thread, at most RP_KEEP_MAX bytes, freed when the thread exits (the key's
 * destructor; the main thread's stays reachable until the process ends). */
#define RP_KEEP_MAX ((size_t)16 << 20)

typedef struct kept_scratch {
    double *buf;
    size_t bytes;
} kept_scratch;

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static int kept_ok;

static void kept_destroy(void *p)
{
    kept_scratch *k = p;
    free(k->buf);
    free(k);
}

static void kept_init(void)
{
    kept_ok = pthread_key_create(&kept_key, kept_destroy) == 0;
}

/* A block scratch of at least `bytes` (contents undefined), its size in *got: the
 * thread's kept one when large enough, else a fresh tess_alloc_huge (NULL when out of
 * memory).  Freed with scratch_put or free(). */
static double *scratch_get(size_t bytes, size_t *got)
{
    pthread_once(&kept_once, kept_init);
    kept_scratch *k = kept_ok ? pthread_getspecific(kept_key) : NULL;
    *got = bytes;
    if (k && k->buf && k->bytes >= bytes) {
        double *b = k->buf;
        *got = k->bytes;
        k->buf = NULL;
        return b;
    }
    return tess_alloc_huge(bytes);
}

/* Keeps buf (`bytes` long, from scratch_get; may be NULL) for the thread's next worker,
 * freeing the one kept before, or frees it when it is over RP_KEEP_MAX or cannot be
 * kept.  Cannot fail. */
static void scratch_put(double *buf, size_t bytes)
{
    if (!buf)
        return;
    pthread_once(&kept_once, kept_init);
    kept_scratch *k = kept_ok && bytes <= RP_KEEP_MAX ? pthread_getspecific(kept_key) : NULL;
    if (kept_ok && bytes <= RP_KEEP_MAX && !k) {
        k = calloc(1, sizeof *k);
        if (k && pthread_setspecific(kept_key, k) != 0) {
            free(k);
            k = NULL;
        }
    }
    if (!k) {
        free(buf);
        return;
    }
    free(k->buf);
    k->buf = buf;
    k->bytes = bytes;
}

static void worker_release(worker *w)
{
    rp_coordmap_free(w->map);
    scratch_put(w->xi, w->xi_bytes);
    free(w->fx);
    free(w->fidx);
    free(w->band);
    rp_exact_ctx_free(w->ex);
    memset(w, 0, sizeof *w);
}

/* Allocates the scratch for the job's method.  Returns 0 or TESS_ENOMEM / TESS_EINVAL
 * with err. */
static int worker_init(worker *w, const job *j, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (j->opt->method == RP_EXACT) {
        size_t n = (size_t)j->band * (size_t)j->dst->nx;
        w->band = malloc(sizeof(double) * n * 2);
        if (!w->band) {
            tess_seterr(err, errlen, "out of memory");
            return TESS_ENOMEM;
        }
        /* The pair was validated by rp_reproject: only memory can be missing. */
        w->ex = rp_exact_ctx_new(j->in, j->out, err, errlen);
        if (!w->ex) {
            worker_release(w);
            return TESS_ENOMEM;
        }
        w->fband = w->band + n;
        return 0;
    }
    w->map = rp_coordmap_new(j->out, j->in, err, errlen);
    if (!w->map)
        return TESS_ENOMEM;
    size_t n = (size_t)j->block * (size_t)j->block;
    /* 1 MiB at the default block: on huge pages (engine/base/hugemem.h), the thread's
     * kept buffer when it has one (scratch_get). */
    w->xi = n <= SIZE_MAX / (3 * sizeof(double))
            ? scratch_get(sizeof(double) * (n * 2 + (size_t)j->block), &w->xi_bytes) : NULL;
    w->fx = malloc(sizeof(double) * RP_FIXCAP * 4);
    w->fidx = malloc(sizeof(size_t) * RP_FIXCAP);
    if (!w->xi || !w->fx || !w->fidx) {
        worker_release(w);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    w->yi = w->xi + n;
    w->val = w->xi + 2 * n;
    w->fy = w->fx + RP_FIXCAP;
    w->gx = w->fx + 2 * RP_FIXCAP;
    w->gy = w->fx + 3 * RP_FIXCAP;
    return 0;
}

/* Recomputes exactly the w->fidx[0..n) positions gathered by fix_decisions.  Returns 0
 * or TESS_ENOMEM. */
static int fix_flush(worker *w, size_t n)
{
    if (n == 0)
        return 0;
    if (rp_coordmap_points(w->map, n, w->fx, w->fy, w->gx, w->gy) != 0)
        return TESS_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        w->xi[w->fidx[k]] = w->gx[k];
        w->yi[w->fidx[k]] = w->gy[k];
    }
    return 0;
}

/* What makes a position next to a sampling decision: within e of the edges -0.5 and
 * hx = nx - 0.5, hy = ny - 0.5 of the valid range, and for nearest (round != 0) within e
 * of a rounding boundary. */
typedef struct near_test {
    double e, hx, hy;
    int round;
} near_test;

/* Whether (x, y) is next to a decision.  Branch-free (bitwise, not short-circuit; the
 * fraction by truncation, not floor()).  Rounding is tested only for positions inside
 * the valid range, where x + 0.5 >= 0 so that truncation is floor and the fraction is
 * the one floor() gives; a position outside the range and farther than e from its edges
 * samples NaN whatever its rounding, exact or interpolated, so leaving it as it is
 * changes no output.  Cannot fail. */
static inline int near_point(const near_test *t, double x, double y)
{
    const double e = t->e;
    int near = (fabs(x + 0.5) <= e) | (fabs(x - t->hx) <= e) | (fabs(y + 0.5) <= e)
               | (fabs(y - t->hy) <= e);
    if (t->round) {
        const int in = (x >= -0.5) & (x <= t->hx) & (y >= -0.5) & (y <= t->hy);
        const double u = in ? x + 0.5 : 0.5, v = in ? y + 0.5 : 0.5;
        const double fx = u - (double)(int32_t)u, fy = v - (double)(int32_t)v;
        near |= in & ((fx <= e) | (fx >= 1.0 - e) | (fy <= e) | (fy >= 1.0 - e));
    }
    return near;
}

/* The first k' in [k, n) whose position (xi[k'], yi[k']) is next to a decision
 * (near_point), or n: four positions at a time, each lane computing what near_point
 * computes (|a| <= e as -e <= a <= e; truncation to int32 is exact in range, where
 * x + 0.5 <= nx <= INT_MAX).  Cannot fail. */
RP_HOT static size_t next_near(const near_test *t, const double *xi, const double *yi,
                               size_t k, size_t n)
{
    const double e = t->e, hx = t->hx, hy = t->hy, e1 = 1.0 - e;
    for (; k + 4 <= n; k += 4) {
        rp_v4d x, y;
        RP_V4D_LOAD(x, xi + k);
        RP_V4D_LOAD(y, yi + k);
        const rp_v4d a = x + 0.5, b = x - hx, c = y + 0.5, d = y - hy;
        rp_v4q m = ((a <= e) & (a >= -e)) | ((b <= e) & (b >= -e)) | ((c <= e) & (c >= -e))
                   | ((d <= e) & (d >= -e));
        if (t->round) {
            const rp_v4q in = (x >= -0.5) & (x <= hx) & (y >= -0.5) & (y <= hy);
            const rp_v4d half = { 0.5, 0.5, 0.5, 0.5 };
            const rp_v4d u = RP_V4D_SELECT(in, a, half), v = RP_V4D_SELECT(in, c, half);
            const rp_v4d fx = u - __builtin_convertvector(__builtin_convertvector(u, rp_v4i),
                                                          rp_v4d);
            const rp_v4d fy = v - __builtin_convertvector(__builtin_convertvector(v, rp_v4i),
                                                          rp_v4d);
            m |= in & ((fx <= e) | (fx >= e1) | (fy <= e) | (fy >= e1));
        }
        if (RP_V4Q_ANY(m))
            for (int q = 0; q < 4; q++)
                if (m[q])
                    return k + (size_t)q;
    }
    for (; k < n; k++)
        if (near_point(t, xi[k], yi[k]))
            return k;
    return n;
}

#if defined(__GNUC__) && defined(__x86_64__)
/* next_near for nearest (t->round) with AVX2, eight positions an iteration: with
 * u = x + 0.5, v = y + 0.5, a position is next to a decision when both lie within
 * [-e, n + e] and the fraction u - floor(u) or v - floor(v) is within e of 0 or 1.
 * Inside the valid range that is near_point's test (there u >= 0: floor is truncation;
 * the edges -0.5 and n - 0.5 are the rounding boundaries u = 0 and u = n); within e
 * outside an edge the fraction is within e of 1 (below 0) or of 0 (above n), so those
 * positions are caught too.  Positions farther than e outside the range on either axis
 * are not reported, where near_point reports those within e of the other axis's edges:
 * they sample NaN whether recomputed or not, so outputs are the same.
 * The vector loop pre-selects on the fractions only, in the form d = u - rint(u) (exact,
 * in [-0.5, 0.5]): for u >= 0 the fraction f = u - floor(u) is d or 1 + d
 * exactly, so f <= e or f >= e1 = fl(1 - e) is lo <= d <= e with lo = e1 - 1 (exact,
 * Sterbenz); for u in [-e, 0), where f = fl(1 + u) >= e1 always, d = u >= -e.  So
 * lo = min(e1 - 1, -e) selects every position the test reports (and a few more: within
 * an ulp of 1 of a bound, outside the range; every position when e >= 0.5); each
 * selected lane is then tested exactly as before, in scalar (rare: a position is
 * selected with probability about 4e).  The two-sided test lo <= d <= e is widened to
 * |d| <= max(e, -lo) (a superset), the two axes joined by vminpd of |du|, |dv| (when dv
 * is NaN it returns NaN and the lane is not selected: such a position fails the exact
 * test, v being NaN; when du is NaN, |dv| decides: a superset again).  About 13
 * instructions for four positions where the range and fraction tests took 24.  Cannot
 * fail. */
__attribute__((target("avx2"))) static size_t next_near_round_avx2(const near_test *t,
                                                                   const double *xi,
                                                                   const double *yi,
                                                                   size_t k, size_t n)
{
    const double ux = t->hx + 0.5 + t->e, uy = t->hy + 0.5 + t->e, e1 = 1.0 - t->e;
    const __m256d big = _mm256_set1_pd(fmax(t->e, -fmin(e1 - 1.0, -t->e)));
    const __m256d half = _mm256_set1_pd(0.5), sign = _mm256_set1_pd(-0.0);
    for (; k + 8 <= n; k += 8) {
        int bits = 0;
        for (int h = 0; h < 2; h++) {
            const __m256d u = _mm256_add_pd(_mm256_loadu_pd(xi + k + 4 * h), half);
            const __m256d v = _mm256_add_pd(_mm256_loadu_pd(yi + k + 4 * h), half);
            const __m256d du = _mm256_sub_pd(u, _mm256_round_pd(u, _MM_FROUND_TO_NEAREST_INT
                                                                      | _MM_FROUND_NO_EXC));
            const __m256d dv = _mm256_sub_pd(v, _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT
                                                                      | _MM_FROUND_NO_EXC));
            const __m256d d = _mm256_min_pd(_mm256_andnot_pd(sign, du), _mm256_andnot_pd(sign, dv));
            bits |= _mm256_movemask_pd(_mm256_cmp_pd(d, big, _CMP_LE_OQ)) << (4 * h);
        }
        while (bits) {
            const size_t c = k + (size_t)__builtin_ctz((unsigned)bits);
            const double u = xi[c] + 0.5, v = yi[c] + 0.5;
            const double fu = u - floor(u), fv = v - floor(v);
            if (u >= -t->e && u <= ux && v >= -t->e && v <= uy
                && (fu <= t->e || fu >= e1 || fv <= t->e || fv >= e1))
                return c;
            bits &= bits - 1;
        }
    }
    return next_near(t, xi, yi, k, n);
}
#define RP_NEAR_AVX2 1

/* next_near for bilinear (t->round == 0: the edges only) with AVX2, eight positions an
 * iteration: per axis the smaller of the two distances |x + 0.5| and |x - hx| tested
 * against e, which is near_point's four two-sided compares ((a <= e) & (a >= -e) is
 * |a| <= e exactly, fabs being exact; a NaN position fails both forms: vminpd returns
 * its second operand, from the same NaN coordinate, and the ordered compare is false).
 * About 14 instructions for four positions where the two-sided compares took 21.
 * Cannot fail. */
__attribute__((target("avx2"))) static size_t next_near_edge_avx2(const near_test *t,
                                                                  const double *xi,
                                                                  const double *yi,
                                                                  size_t k, size_t n)
{
    const __m256d e = _mm256_set1_pd(t->e), half = _mm256_set1_pd(0.5);
    const __m256d hx = _mm256_set1_pd(t->hx), hy = _mm256_set1_pd(t->hy);
    const __m256d sign = _mm256_set1_pd(-0.0);
    for (; k + 8 <= n; k += 8) {
        int bits = 0;
        for (int h = 0; h < 2; h++) {
            const __m256d x = _mm256_loadu_pd(xi + k + 4 * h);
            const __m256d y = _mm256_loadu_pd(yi + k + 4 * h);
            const __m256d dx = _mm256_min_pd(_mm256_andnot_pd(sign, _mm256_add_pd(x, half)),
                                             _mm256_andnot_pd(sign, _mm256_sub_pd(x, hx)));
            const __m256d dy = _mm256_min_pd(_mm256_andnot_pd(sign, _mm256_add_pd(y, half)),
                                             _mm256_andnot_pd(sign, _mm256_sub_pd(y, hy)));
            bits |= _mm256_movemask_pd(_mm256_or_pd(_mm256_cmp_pd(dx, e, _CMP_LE_OQ),
                                                    _mm256_cmp_pd(dy, e, _CMP_LE_OQ)))
                    << (4 * h);
        }
        if (bits)
            return k + (size_t)__builtin_ctz((unsigned)bits);
    }
    return next_near(t, xi, yi, k, n);
}

/* next_near_round_avx2 sixteen positions an iteration for CPUs with AVX-512F
 * (fix_decisions checks at run time): the same pre-selection (|u - rint(u)| or
 * |v - rint(v)| within max(e, -lo), joined by vminpd, NaN handled as there), the lanes
 * selected in a mask register, each then tested exactly in scalar as there, so that it
 * reports the same positions.  Valgrind, whose CPU has no AVX-512, gets the AVX2 scan.
 * Cannot fail. */
__attribute__((target("avx512f"))) static size_t next_near_round_avx512(const near_test *t,
                                                                       const double *xi,
                                                                       const double *yi,
                                                                       size_t k, size_t n)
{
    const double ux = t->hx + 0.5 + t->e, uy = t->hy + 0.5 + t->e, e1 = 1.0 - t->e;
    const __m512d big = _mm512_set1_pd(fmax(t->e, -fmin(e1 - 1.0, -t->e)));
    const __m512d half = _mm512_set1_pd(0.5);
    for (; k + 16 <= n; k += 16) {
        unsigned bits = 0;
        for (int h = 0; h < 2; h++) {
            const __m512d u = _mm512_add_pd(_mm512_loadu_pd(xi + k + 8 * h), half);
            const __m512d v = _mm512_add_pd(_mm512_loadu_pd(yi + k + 8 * h), half);
            const __m512d du = _mm512_sub_pd(u, _mm512_roundscale_pd(u, _MM_FROUND_TO_NEAREST_INT
                                                                          | _MM_FROUND_NO_EXC));
            const __m512d dv = _mm512_sub_pd(v, _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT
                                                                          | _MM_FROUND_NO_EXC));
            const __m512d d = _mm512_min_pd(_mm512_abs_pd(du), _mm512_abs_pd(dv));
            bits |= (unsigned)_mm512_cmp_pd_mask(d, big, _CMP_LE_OQ) << (8 * h);
        }
        while (bits) {
            const size_t c = k + (size_t)__builtin_ctz(bits);
            const double u = xi[c] + 0.5, v = yi[c] + 0.5;
            const double fu = u - floor(u), fv = v - floor(v);
            if (u >= -t->e && u <= ux && v >= -t->e && v <= uy
                && (fu <= t->e || fu >= e1 || fv <= t->e || fv >= e1))
                return c;
            bits &= bits - 1;
        }
    }
    return next_near_round_avx2(t, xi, yi, k, n);
}

/* next_near_edge_avx2 sixteen positions an iteration for CPUs with AVX-512F
 * (fix_decisions checks at run time): the same per-axis distances and ordered compares,
 * into mask registers.  Cannot fail. */
__attribute__((target("avx512f"))) static size_t next_near_edge_avx512(const near_test *t,
                                                                      const double *xi,
                                                                      const double *yi,
                                                                      size_t k, size_t n)
{
    const __m512d e = _mm512_set1_pd(t->e), half = _mm512_set1_pd(0.5);
    const __m512d hx = _mm512_set1_pd(t->hx), hy = _mm512_set1_pd(t->hy);
    for (; k + 16 <= n; k += 16) {
        unsigned bits = 0;
        for (int h = 0; h < 2; h++) {
            const __m512d x = _mm512_loadu_pd(xi + k + 8 * h);
            const __m512d y = _mm512_loadu_pd(yi + k + 8 * h);
            const __m512d dx = _mm512_min_pd(_mm512_abs_pd(_mm512_add_pd(x, half)),
                                             _mm512_abs_pd(_mm512_sub_pd(x, hx)));
            const __m512d dy = _mm512_min_pd(_mm512_abs_pd(_mm512_add_pd(y, half)),
                                             _mm512_abs_pd(_mm512_sub_pd(y, hy)));
            bits |= (unsigned)(_mm512_cmp_pd_mask(dx, e, _CMP_LE_OQ)
                               | _mm512_cmp_pd_mask(dy, e, _CMP_LE_OQ)) << (8 * h);
        }
        if (bits)
            return k + (size_t)__builtin_ctz(bits);
    }
    return next_near_edge_avx2(t, xi, yi, k, n);
}
#endif

/* Transforms exactly the interpolated positions of a bw x bh block at (x0, y0) that lie
 * within e (the block's coordinate error bound) of a sampling decision: the edges of
 * the valid range [-0.5, n - 0.5] on each axis, and for nearest the rounding boundaries
 * at half-integers (next_near finds them, four positions at a time; in most blocks no
 * position comes near one).  Returns 0 or TESS_ENOMEM. */
static int fix_decisions(worker *w, const job *j, long x0, long y0, long bw, long bh, double e)
{
    size_t n = 0, npx = (size_t)bw * (size_t)bh;
    const near_test t = { e, (double)j->src->nx - 0.5, (double)j->src->ny - 0.5,
                          j->opt->method == RP_NEAREST };
    size_t (*next)(const near_test *, const double *, const double *, size_t, size_t) =
        next_near;
#ifdef RP_NEAR_AVX2
    if (__builtin_cpu_supports("avx2"))
        next = t.round ? next_near_round_avx2 : next_near_edge_avx2;
    if (__builtin_cpu_supports("avx512f"))
        next = t.round ? next_near_round_avx512 : next_near_edge_avx512;
#endif
    for (size_t k = next(&t, w->xi, w->yi, 0, npx); k < npx;
         k = next(&t, w->xi, w->yi, k + 1, npx)) {
        w->fx[n] = (double)(x0 + (long)(k % (size_t)bw));
        w->fy[n] = (double)(y0 + (long)(k / (size_t)bw));
        w->fidx[n++] = k;
        if (n == RP_FIXCAP) {
            if (fix_flush(w, n) != 0)
                return TESS_ENOMEM;
            n = 0;
        }
    }
    return fix_flush(w, n);
}

/* Pointer to element 0 of plane z of a cube (bytes computed for its dtype). */
static void *cube_plane(const rp_cube *c, long z)
{
    size_t es = c->dtype == RP_F32 ? sizeof(float) : sizeof(double);
    return (char *)c->data + (size_t)z * (size_t)c->nx * (size_t)c->ny * es;
}

/* Narrows the n values v to float32 into d and, where fp is not NULL, writes their
 * footprint there (1 finite, 0 not); four at a time in vector lanes (the same rounding
 * as the scalar cast; finite as isfinite: |v| <= DBL_MAX).  Returns the number of
 * finite values.  Cannot fail. */
RP_HOT static long store_row_f32(float *restrict d, float *restrict fp, const double *restrict v,
                                 long n)
{
    typedef float v4f __attribute__((vector_size(16)));
    const rp_v4i one = RP_V4I_SPLAT(0x3f800000);   /* the bits of 1.0f */
    long f = 0, c = 0;
    for (; c + 4 <= n; c += 4) {
        rp_v4d x;
        RP_V4D_LOAD(x, v + c);
        const v4f y = __builtin_convertvector(x, v4f);
        memcpy(d + c, &y, sizeof y);
        const rp_v4i fin = __builtin_convertvector((x <= DBL_MAX) & (x >= -DBL_MAX), rp_v4i);
        f -= fin[0] + fin[1] + fin[2] + fin[3];
        if (fp) {
            const rp_v4i b = fin & one;
            memcpy(fp + c, &b, sizeof b);
        }
    }
    for (; c < n; c++) {
        d[c] = (float)v[c];
        f += isfinite(v[c]) != 0;
        if (fp)
            fp[c] = isfinite(v[c]) ? 1.0f : 0.0f;
    }
    return f;
}

/* Interpolation block u: coordinates once, then every plane of the group.  Adds to
 * *finite and *inside.  Returns 0 or a TESS_E* code with err. */
static int interp_block(worker *w, const job *j, long u, long *finite, long *inside,
                        char *err, size_t errlen)
{
    const long nx = j->dst->nx, ny = j->dst->ny;
    long x0 = (u % j->nbx) * j->block, y0 = (u / j->nbx) * j->block;
    long bw = nx - x0 < j->block ? nx - x0 : j->block;
    long bh = ny - y0 < j->block ? ny - y0 : j->block;
    size_t npx = (size_t)bw * (size_t)bh;
    double e = 0.0;
    if (rp_coordmap_lattice_bound(w->map, (double)x0, (double)y0, bw, bh,
                                  j->opt->max_coord_error, w->xi, w->yi, &e) != 0
        || (e > 0.0 && fix_decisions(w, j, x0, y0, bw, bh, e) != 0)) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long fin = 0;
    /* Rows of a plane held in dst: all, or the ring's. */
    const size_t held = (size_t)(j->ring ? j->ring : ny);
    const size_t es = j->dst->dtype == RP_F32 ? sizeof(float) : sizeof(double);
    for (long p = 0; p < j->nz; p++) {
        long z = j->z0 + p;
        void *plane = (char *)j->dst->data + (size_t)z * held * (size_t)nx * es;
        float *fp = j->footprint ? j->footprint + (size_t)z * held * (size_t)nx : NULL;
        /* Float planes (nearest, bilinear, lanczos3, bicubic; kernels.h): sampled
         * straight into the output, a row at a time or, where the kernel asks for them,
         * in strips of columns down the block's rows (rp_kernel_f32_strip); a row's
         * prefetch hints are for the same columns RP_PREFETCH_ROWS rows below. */
        const size_t strip = rp_kernel_f32_strip(j->kern[p]);
        const long sw = strip > 0 && strip < (size_t)bw ? (long)strip : bw;
        int fused = j->dst->dtype == RP_F32;
        for (long s0 = 0; fused && s0 < bw; s0 += sw) {
            const long cw = bw - s0 < sw ? bw - s0 : sw;
            for (long r = 0; r < bh; r++) {
                const size_t o = ((size_t)(y0 + r) % held) * (size_t)nx + (size_t)(x0 + s0);
                const size_t c = (size_t)r * (size_t)bw + (size_t)s0;
                const size_t q = (size_t)(r + RP_PREFETCH_ROWS) * (size_t)bw + (size_t)s0;
                const size_t pn = r + RP_PREFETCH_ROWS < bh ? (size_t)cw : 0;
                const long f = rp_kernel_sample_f32(j->kern[p], (size_t)cw, w->xi + c,
                                                    w->yi + c, (float *)plane + o,
                                                    fp ? fp + o : NULL,
                                                    pn ? w->xi + q : NULL,
                                                    pn ? w->yi + q : NULL, pn);
                if (f < 0) {
                    fused = 0;
                    break;
                }
                fin += f;
            }
        }
        if (fused)
            continue;
        /* A row at a time: its values are stored while they are still in the L1 cache. */
        for (long r = 0; r < bh; r++) {
            size_t o = ((size_t)(y0 + r) % held) * (size_t)nx + (size_t)x0;
            const double *v = w->val;
            const double *rx = w->xi + (size_t)r * (size_t)bw, *ry = w->yi + (size_t)r * (size_t)bw;
            const size_t q = (size_t)(r + RP_PREFETCH_ROWS) * (size_t)bw;
            const size_t pn = r + RP_PREFETCH_ROWS < bh ? (size_t)bw : 0;
            if (pn)
                rp_kernel_prefetch(j->kern[p], pn, w->xi + q, w->yi + q, RP_PREFETCH_STEP);
            rp_kernel_sample(j->kern[p], (size_t)bw, rx, ry, w->val);
            if (j->dst->dtype == RP_F32) {
                fin += store_row_f32((float *)plane + o, fp ? fp + o : NULL, v, bw);
                continue;
            }
            long f = 0;
            double *d = (double *)plane + o;
            for (long c = 0; c < bw; c++) {
                d[c] = v[c];
                f += isfinite(v[c]) != 0;
            }
            if (fp)
                for (long c = 0; c < bw; c++)
                    fp[o + (size_t)c] = isfinite(v[c]) ? 1.0f : 0.0f;
            fin += f;
        }
    }
    /* Overlap: a finite value proves it; otherwise count the positions that fall inside
     * the input (an input all NaN there still overlaps). */
    if (fin > 0) {
        *inside += fin;
    } else {
        const double xmax = (double)j->src->nx - 0.5, ymax = (double)j->src->ny - 0.5;
        for (size_t k = 0; k < npx; k++)
            *inside += w->xi[k] >= -0.5 && w->xi[k] <= xmax && w->yi[k] >= -0.5
                       && w->yi[k] <= ymax;
    }
    *finite += fin;
    return 0;
}

/* The address that rp_exact_rows should take as element 0 of a full out_nx-wide array so
 * that its rows y0.. land in `band` (row y0 at band[0]).  rp_exact_rows only touches rows
 * [y0, y1) (exact.h), so only addresses inside `band` are ever dereferenced; the
 * arithmetic goes through uintptr_t (implementation-defined, flat addresses on every
 * platform Tessera builds on) rather than through out-of-object pointer arithmetic. */
static double *band_base(double *band, long y0, long nx)
{
    return (double *)((uintptr_t)band - (uintptr_t)y0 * (uintptr_t)nx * sizeof(double));
}

/* Exact unit u: rows [y0, y1) of plane z0 + u / nbands.  Adds to *finite, *inside. */
static int exact_band(worker *w, const job *j, long u, long *finite, long *inside,
                      char *err, size_t errlen)
{
    const long nx = j->dst->nx, ny = j->dst->ny;
    long z = j->z0 + u / j->nbands;
    long y0 = (u % j->nbands) * j->band, y1 = y0 + j->band < ny ? y0 + j->band : ny;
    size_t n = (size_t)(y1 - y0) * (size_t)nx, off = (size_t)y0 * (size_t)nx;
    rp_plane sp = { cube_plane(j->src, z), j->src->dtype, j->src->nx, j->src->ny };
    int f64 = j->dst->dtype == RP_F64;
    double *dbase = f64 ? (double *)cube_plane(j->dst, z) : band_base(w->band, y0, nx);
    long rc = rp_exact_rows_ctx(w->ex, &sp, nx, ny, y0, y1, j->opt->max_coord_error, dbase,
                                band_base(w->fband, y0, nx), err, errlen);
    if (rc < 0)
        return (int)rc;
    const double *v = f64 ? dbase + off : w->band;
    float *fp = j->footprint ? j->footprint + (size_t)z * (size_t)nx * (size_t)ny + off : NULL;
    long fin = 0, ins = 0;
    if (!f64) {
        float *d = (float *)cube_plane(j->dst, z) + off;
        for (size_t k = 0; k < n; k++)
            d[k] = (float)v[k];
    }
    for (size_t k = 0; k < n; k++) {
        fin += isfinite(v[k]) != 0;
        ins += w->fband[k] > 0.0;
        if (fp)
            fp[k] = (float)w->fband[k];
    }
    *finite += fin;
    *inside += ins;
    return 0;
}

/* Tells the caller (block_done) which region unit u covered.  Cannot fail. */
static void block_report(const job *j, long u)
{
    const long nx = j->dst->nx, ny = j->dst->ny;
    if (j->opt->method == RP_EXACT) {
        long y0 = (u % j->nbands) * j->band, y1 = y0 + j->band < ny ? y0 + j->band : ny;
        j->opt->block_done(j->opt->block_arg, j->z0 + u / j->nbands, 1, 0, y0, nx, y1 - y0);
        return;
    }
    long x0 = (u % j->nbx) * j->block, y0 = (u / j->nbx) * j->block;
    long bw = nx - x0 < j->block ? nx - x0 : j->block;
    long bh = ny - y0 < j->block ? ny - y0 : j->block;
    j->opt->block_done(j->opt->block_arg, j->z0, j->nz, x0, y0, bw, bh);
}

static void run_release(run *r)
{
    pthread_mutex_lock(&r->lock);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->lock);
    if (last) {
        free(r->released);
        pthread_cond_destroy(&r->freed);
        pthread_cond_destroy(&r->idle);
        pthread_mutex_destroy(&r->lock);
        free(r);
    }
}

/* Takes blocks from the run until none is left, the run stops (error, cancel) or is
 * over.  Scratch is made on the first block taken, so a helper that comes too late
 * touches nothing but the run itself.  Cannot fail (errors go into the run). */
static void work_loop(run *r)
{
    worker w;
    int ready = 0;
    char err[256];
    for (;;) {
        pthread_mutex_lock(&r->lock);
        if (r->stop || r->next >= r->nunits) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        const job *j = r->j;
        if (j->opt->cancel && atomic_load(j->opt->cancel)) {
            r->stop = 1;
            if (r->rc == 0) {
                r->rc = TESS_ECANCELED;
                snprintf(r->err, sizeof r->err, "cancelled");
            }
            pthread_cond_broadcast(&r->freed);
            pthread_mutex_unlock(&r->lock);
            break;
        }
        long u = r->next++;
        r->inflight++;
        /* With a ring, the rows this block overwrites must have been handed over. */
        long back = j->ring ? u / j->nbx - j->ring / j->block : -1;
        while (back >= 0 && !r->stop && r->released[back] < j->nbx)
            pthread_cond_wait(&r->freed, &r->lock);
        if (r->stop) {
            if (--r->inflight == 0)
                pthread_cond_broadcast(&r->idle);
            pthread_mutex_unlock(&r->lock);
            break;
        }
        pthread_mutex_unlock(&r->lock);

        long finite = 0, inside = 0;
        int rc = 0;
        err[0] = '\0';
        if (!ready) {
            rc = worker_init(&w, j, err, sizeof err);
            ready = rc == 0;
        }
        if (rc == 0)
            rc = j->opt->method == RP_EXACT
                     ? exact_band(&w, j, u, &finite, &inside, err, sizeof err)
                     : interp_block(&w, j, u, &finite, &inside, err, sizeof err);
        if (rc == 0 && j->opt->block_done)
            block_report(j, u);
        pthread_mutex_lock(&r->lock);
        r->inflight--;
        if (rc < 0) {
            if (r->rc == 0) {
                r->rc = rc;
                snprintf(r->err, sizeof r->err, "%s", err);
            }
            r->stop = 1;
            pthread_cond_broadcast(&r->freed);
        } else {
            if (j->ring && ++r->released[u / j->nbx] == j->nbx)
                pthread_cond_broadcast(&r->freed);
            r->finite += finite;
            r->inside += inside;
            r->done++;
            if (j->opt->progress)
                j->opt->progress(j->opt->progress_arg, j->done_base + r->done, j->total);
        }
        if (r->inflight == 0)
            pthread_cond_broadcast(&r->idle);
        pthread_mutex_unlock(&r->lock);
    }
    if (ready)
        worker_release(&w);
}

/* A helper: a pool task or a thread of the engine's own. */
static void helper_task(void *arg)
{
    run *r = arg;
    work_loop(r);
    run_release(r);
}

static void *helper_thread(void *arg)
{
    helper_task(arg);
    return NULL;
}

/* Runs the nunits blocks of `j` with up to `threads` threads (the caller's included) on
 * `workers` or on threads of its own.  Adds to *finite and *inside.  Returns 0 or the
 * first error (err set). */
static int run_blocks(const job *j, long nunits, pool *workers, pool_priority prio, int threads,
                      long *finite, long *inside, char *err, size_t errlen)
{
    run *r = calloc(1, sizeof *r);
    if (!r) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        tess_seterr(err, errlen, "cannot create a mutex");
        return TESS_ENOMEM;
    }
    if (pthread_cond_init(&r->idle, NULL) != 0) {
        pthread_mutex_destroy(&r->lock);
        free(r);
        tess_seterr(err, errlen, "cannot create a condition variable");
        return TESS_ENOMEM;
    }
    if (pthread_cond_init(&r->freed, NULL) != 0) {
        pthread_cond_destroy(&r->idle);
        pthread_mutex_destroy(&r->lock);
        free(r);
        tess_seterr(err, errlen, "cannot create a condition variable");
        return TESS_ENOMEM;
    }
    r->refs = 1;
    if (j->ring && !(r->released = calloc((size_t)(nunits / j->nbx + 1), sizeof(long)))) {
        run_release(r);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    r->nunits = nunits;
    r->j = j;
    long nhelp = (long)threads - 1;
    if (nhelp > nunits - 1)
        nhelp = nunits - 1;
    pthread_t *th = NULL;
    long started = 0;
    if (nhelp > 0 && !workers)
        th = malloc(sizeof(pthread_t) * (size_t)nhelp);
    for (long i = 0; i < nhelp && (workers || th); i++) {
        pthread_mutex_lock(&r->lock);
        r->refs++;
        pthread_mutex_unlock(&r->lock);
        int ok = workers ? pool_submit(workers, prio, helper_task, r) == 0
                         : pthread_create(&th[started], NULL, helper_thread, r) == 0;
        if (!ok) {
            pthread_mutex_lock(&r->lock);
            r->refs--;
            pthread_mutex_unlock(&r->lock);
            break;
        }
        started++;
    }
    work_loop(r);
    pthread_mutex_lock(&r->lock);
    while (r->inflight > 0)
        pthread_cond_wait(&r->idle, &r->lock);
    /* Blocks not yet taken are taken by nobody from here on. */
    r->stop = 1;
    int rc = r->rc;
    *finite += r->finite;
    *inside += r->inside;
    if (rc < 0)
        tess_seterr(err, errlen, "%s", r->err);
    pthread_mutex_unlock(&r->lock);
    if (!workers)
        for (long i = 0; i < started; i++)
            pthread_join(th[i], NULL);
    free(th);
    run_release(r);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* The entry points                                                                       */

/* A private 2-D celestial copy of w, or NULL (no separable celestial pair, no memory). */
static skywcs *celestial_copy(const skywcs *w)
{
    if (!skywcs_has_celestial(w))
        return NULL;
    return skywcs_naxis(w) == 2 ? skywcs_copy(w) : skywcs_celestial(w);
}

/* Checks sizes and dtypes; 0 or TESS_EINVAL with err. */
static int check_cubes(const rp_cube *src, const rp_cube *dst, char *err, size_t errlen)
{
    const rp_cube *c[2] = { src, dst };
    for (int i = 0; i < 2; i++) {
        if (!c[i]->data || c[i]->nx < 1 || c[i]->ny < 1 || c[i]->nz < 1
            || c[i]->nx > INT_MAX || c[i]->ny > INT_MAX
            || c[i]->nx > LONG_MAX / c[i]->ny || c[i]->nx * c[i]->ny > LONG_MAX / c[i]->nz
            || (c[i]->dtype != RP_F32 && c[i]->dtype != RP_F64)) {
            tess_seterr(err, errlen, "bad %s array (%ldx%ldx%ld, dtype %d)", i ? "output" : "input",
                    c[i]->nx, c[i]->ny, c[i]->nz, (int)c[i]->dtype);
            return TESS_EINVAL;
        }
    }
    if (src->nz != dst->nz) {
        tess_seterr(err, errlen, "input has %ld planes, output %ld", src->nz, dst->nz);
        return TESS_EINVAL;
    }
    return 0;
}

/* Fills every plane of dst (the rows it holds: `held` a plane) with NaN and the footprint
 * with 0.  Cannot fail. */
static void fill_nan(rp_cube *dst, long held, float *footprint)
{
    size_t n = (size_t)dst->nx * (size_t)held * (size_t)dst->nz;
    if (dst->dtype == RP_F32)
        for (size_t k = 0; k < n; k++)
            ((float *)dst->data)[k] = NAN;
    else
        for (size_t k = 0; k < n; k++)
            ((double *)dst->data)[k] = NAN;
    if (footprint)
        memset(footprint, 0, n * sizeof(float));
}

long rp_reproject(const skywcs *in, const rp_cube *src, const skywcs *out, rp_cube *dst,
                  float *footprint, const rp_options *opt, char *err, size_t errlen)
{
    if (!in || !out || !src || !dst || !opt) {
        tess_seterr(err, errlen, "missing WCS, array or options");
        return TESS_EINVAL;
    }
    int rc = check_cubes(src, dst, err, errlen);
    if (rc != 0)
        return rc;
    if ((int)opt->method < RP_NEAREST || (int)opt->method > RP_EXACT) {
        tess_seterr(err, errlen, "method: unknown");
        return TESS_EINVAL;
    }
    if (!isfinite(opt->max_coord_error) || opt->max_coord_error < 0.0) {
        tess_seterr(err, errlen, "max_coord_error: must be a finite number >= 0");
        return TESS_EINVAL;
    }
    if (opt->block < 0 || opt->threads < 0) {
        tess_seterr(err, errlen, "block and threads must be >= 0");
        return TESS_EINVAL;
    }
    /* Validates both WCSs (celestial pair, frame, separability) once. */
    if (skywcs_check_pair(in, out, err, errlen))
        return TESS_EINVAL;
    char perr[128] = "";
    rp_coordmap *probe = rp_coordmap_new(out, in, perr, sizeof perr);
    if (!probe) {
        tess_seterr(err, errlen, "%s", perr);
        return strstr(perr, "memory") ? TESS_ENOMEM : TESS_EINVAL;
    }
    rp_coordmap_free(probe);

    int threads = opt->threads;
    if (threads == 0) {
        long n = opt->workers ? pool_threads(opt->workers) + 1 : sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    long block = opt->block > 0 ? opt->block : RP_BLOCK;
    if (block > 8192)
        block = 8192;
    if (opt->ring_rows < 0 || (opt->ring_rows > 0 && (opt->method == RP_EXACT || opt->block == 0
                                                      || opt->ring_rows % block != 0
                                                      || opt->ring_rows < 2 * block))) {
        tess_seterr(err, errlen, "ring_rows: must be 0, or for interpolation a multiple of "
                    "the block edge given in block, at least twice it");
        return TESS_EINVAL;
    }

    job j = {.in = in, .out = out, .src = src, .dst = dst, .footprint = footprint, .opt = opt};
    long finite = 0, inside = 0;
    skywcs *cin = NULL, *cout = NULL;
    rp_kernel **kern = NULL;

    if (opt->method == RP_EXACT) {
        cin = celestial_copy(in);
        cout = celestial_copy(out);
        if (!cin || !cout) {
            tess_seterr(err, errlen, "out of memory");
            rc = TESS_ENOMEM;
            goto done;
        }
        j.in = cin;
        j.out = cout;
        j.band = block / 2 > 0 ? block / 2 : 1;
        /* By default, bands short enough that each thread gets RP_EXACT_SHARE of them
         * (taken in turn, so that a thread that drew cheap bands takes more and the
         * last band to finish is short), but not under RP_EXACT_MIN_BAND rows: every
         * band maps again the input corners next to its edges (measured on 1000 x 1000
         * pixels: 0.2 ms a band at 64 rows, 0.5 ms at 32, 1 ms at 16, of ~110 ms). */
        if (opt->block == 0 && threads > 1) {
            long share = (dst->ny + (long)threads * RP_EXACT_SHARE - 1)
                         / ((long)threads * RP_EXACT_SHARE);
            share = share > RP_EXACT_MIN_BAND ? share : RP_EXACT_MIN_BAND;
            j.band = share < j.band ? share : j.band;
        }
        if (j.band > dst->ny)
            j.band = dst->ny;
        j.nbands = (dst->ny + j.band - 1) / j.band;
        j.z0 = 0;
        j.nz = dst->nz;
        j.total = j.nbands * dst->nz;
        rc = run_blocks(&j, j.total, opt->workers, opt->priority, threads, &finite, &inside,
                        err, errlen);
        goto done;
    }

    j.block = block;
    j.ring = opt->ring_rows;
    j.nbx = (dst->nx + block - 1) / block;
    long nblocks = j.nbx * ((dst->ny + block - 1) / block);
    /* Planes per group: all of them, unless the prepared kernels (bicubic's coefficient
     * arrays) would pass RP_KERNEL_BUDGET. */
    long group = src->nz;
    if (opt->method == RP_BICUBIC) {
        /* floats for float32 planes onto float32 output (rp_kernel_new_f32) */
        const size_t es = src->dtype == RP_F32 && dst->dtype == RP_F32 ? sizeof(float)
                                                                       : sizeof(double);
        size_t per = (size_t)(src->nx + 2) * (size_t)(src->ny + 2) * es;
        size_t g = RP_KERNEL_BUDGET / per;
        group = g < 1 ? 1 : g < (size_t)src->nz ? (long)g : src->nz;
    }
    long ngroups = (src->nz + group - 1) / group;
    j.total = nblocks * ngroups;
    kern = calloc((size_t)group, sizeof *kern);
    if (!kern) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
        goto done;
    }
    for (long g = 0; g < ngroups && rc == 0; g++) {
        j.z0 = g * group;
        j.nz = src->nz - j.z0 < group ? src->nz - j.z0 : group;
        for (long p = 0; p < j.nz && rc == 0; p++) {
            rp_plane sp = { cube_plane(src, j.z0 + p), src->dtype, src->nx, src->ny };
            /* float32 output: bicubic of float32 planes from float coefficients, within
             * about the output's own rounding (kernels.h rp_kernel_new_f32) */
            kern[p] = dst->dtype == RP_F32 ? rp_kernel_new_f32(opt->method, &sp, err, errlen)
                                           : rp_kernel_new(opt->method, &sp, err, errlen);
            if (!kern[p])
                rc = TESS_ENOMEM;
        }
        j.kern = kern;
        j.done_base = g * nblocks;
        if (rc == 0)
            rc = run_blocks(&j, nblocks, opt->workers, opt->priority, threads, &finite, &inside,
                            err, errlen);
        for (long p = 0; p < j.nz; p++) {
            rp_kernel_free(kern[p]);
            kern[p] = NULL;
        }
    }
done:
    free(kern);
    skywcs_free(cin);
    skywcs_free(cout);
    if (rc != 0)
        return rc;
    if (inside == 0) {
        fill_nan(dst, opt->ring_rows > 0 ? opt->ring_rows : dst->ny, footprint);
        tess_seterr(err, errlen, "the target does not overlap the input image");
        return TESS_ENOOVERLAP;
    }
    return finite;
}

/* See reproject.h.  Errors: TESS_EINVAL, TESS_ENOMEM; `dst` is unspecified on error. */
long reproject_plane(const skywcs *in, const double *src, long in_nx, long in_ny,
                     const skywcs *out, long out_nx, long out_ny,
                     rp_method method, double max_coord_error,
                     double *dst, char *err, size_t errlen)
{
    if (!src || !dst) {
        tess_seterr(err, errlen, "missing WCS or pixel array");
        return TESS_EINVAL;
    }
    rp_cube s = { (void *)src, RP_F64, in_nx, in_ny, 1 };
    rp_cube d = { dst, RP_F64, out_nx, out_ny, 1 };
    rp_options o;
    rp_options_init(&o);
    o.method = method;
    o.max_coord_error = max_coord_error;
    o.threads = 1;
    long n = rp_reproject(in, &s, out, &d, NULL, &o, err, errlen);
    return n == TESS_ENOOVERLAP ? 0 : n;
}
