/* Internal to the interpolation kernels (engine/sky/kernels.c and kernels_f32.c; not
 * installed, no other module includes it): the kernel object, the sampler type, the point
 * functions of nearest and bilinear, and the macros and inline helpers that both files'
 * samplers use.  Everything here is static inline or a macro, so that each sampler
 * inlines it as it did when the two files were one.  Positions are 0-based pixel
 * coordinates (x along a row, y down the rows), planes row-major, nx pixels a row. */
#ifndef TESSERA_ENGINE_SKY_KERNELS_IMPL_H
#define TESSERA_ENGINE_SKY_KERNELS_IMPL_H

#include "engine/sky/kernels.h"
#include "engine/sky/simd.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- the kernel object -------------------------------------------------------------- */

/* A sampler: out[i] (n doubles, caller's) the value of k's plane at 0-based pixel
 * position (x[i], y[i]), NaN outside [-0.5, nx - 0.5] x [-0.5, ny - 0.5] (NaN positions
 * included); the arrays do not overlap.  Cannot fail.  One per method and pixel type
 * (and instruction set), picked by rp_kernel_new. */
typedef void sample_fn(const rp_kernel *k, size_t n, const double *restrict x,
                       const double *restrict y, double *restrict out);

/* A fused sampler of rp_kernel_sample_f32 (kernels.h): k's values at the n positions
 * (x, y) narrowed to float32 into d, the footprint into fp (may be NULL), the number of
 * finite values returned; pfx, pfy, pn: the prefetch positions of rp_kernel_sample_f32.
 * Cannot fail. */
typedef long fused_fn(const rp_kernel *k, size_t n, const double *restrict x,
                      const double *restrict y, float *restrict d, float *restrict fp,
                      const double *restrict pfx, const double *restrict pfy, size_t pn);

struct rp_kernel {
    rp_method method;
    rp_plane src;          /* the caller's plane (its pixels are not copied) */
    sample_fn *fn;         /* the sampler for method and dtype */
    fused_fn *ffn;         /* lanczos3 of float planes with FMA, bicubic of float
                              coefficients with AVX2: fn's twin that writes float32 output
                              (kernels.c, kernels_bicubic.inc; rp_kernel_sample_f32), the
                              same groups and arithmetic, so (float) of fn's values; or NULL */
    void *coef;            /* bicubic: B-spline coefficients, (nx + 2) x (ny + 2) doubles
                              (rp_bspline_prepare), or floats for a float32 plane from
                              rp_kernel_new_f32 (rp_bspline_prepare_f32) */
    unsigned char *bad;    /* bicubic: 1 where the 4x4 support starting at padded
                              (sx, sy) touches a non-finite pixel, at (sy + 1) * (nx + 2)
                              + sx + 1; NULL when every pixel is finite */
    /* lanczos3's shared tables, filled once per process (LZ_RES, LZ_TABLEN: kernels.c) */
    const double *lz;      /* lanczos3: L(k / LZ_RES), k = 0 .. LZ_TABLEN - 1 (shared) */
    const double *lzt;     /* lanczos3 (shared): for k = 0 .. LZ_RES, at lzt + 8 k (64-byte
                              aligned), L(k'), then L(k' + 1) - L(k'), for k' = k, k + LZ_RES,
                              k + 2 LZ_RES (in table units; lz values), each group of three
                              followed by a zero */
    const float *lzf;      /* lanczos3 of float planes (shared): the same fields as lzt in
                              float, 8 floats (32 bytes, 32-byte aligned) an entry: the
                              three L rounded to float, a zero, the three differences of
                              those floats (one float subtraction each), a zero */
    const float *lzw;      /* lanczos3 of float planes with FMA (shared): for k = 0 .. LZ_RES - 1,
                              at lzw + 16 k (64-byte aligned), with k' = LZ_RES - 1 - k and
                              L, D the fields of lzf: L(k + 2R), L(k + R), L(k), L(k'),
                              L(k' + R), L(k' + 2R), the sum of the first three, the sum of
                              the next three (R = LZ_RES), then the same eight of D */
};

/* ---- points of nearest and bilinear, one per pixel type ---------------------------- */

/* Every sampler first rejects positions outside [-0.5, n - 0.5] (NaN included; the loops
 * RP_POINTS of kernels.c and RP_FUSED_POINTS of kernels_f32.c), then its point function
 * works in the coordinates c = x + 1 of the array padded by one edge pixel, where
 * c >= 0.5, so that (long)c == floor(c) and padded index p is image index p - 1
 * (clamped: the padding repeats the edge pixels).
 *
 * nearest:  pixel floor(c + 0.5) of the padded array (scipy order 0, ni_interpolation.c);
 * bilinear: scipy order 1: w0 = 1 - (c - floor c), w1 = 1 - w0 on each axis, the four
 *           products value * wy * wx summed in C order, so that results match
 *           engine/sky/reproject.c sample() and astropy reproject bit for bit (as long as
 *           the compiler does not contract a * b + c into FMAs: GCC does not in ISO C
 *           mode, -std=c11, which the build uses); NaN pixels propagate through any
 *           weight, zero included.  (lanczos3 and bicubic: kernels.c.) */
#define RP_DEFINE_POINTS(T, SFX)                                                          \
    static inline double nearest_##SFX(const rp_kernel *k, const T *restrict src, long nx, \
                                       long ny, double px, double py)                    \
    {                                                                                     \
        long i = (long)((px + 1.0) + 0.5) - 1, j = (long)((py + 1.0) + 0.5) - 1;          \
        i = i < nx ? i : nx - 1;                                                          \
        j = j < ny ? j : ny - 1;                                                          \
        return (double)src[j * nx + i];                                                   \
    }                                                                                     \
                                                                                          \
    static inline double bilinear_##SFX(const rp_kernel *k, const T *restrict src, long nx, \
                                        long ny, double px, double py)                   \
    {                                                                                     \
        const double cx = px + 1.0, cy = py + 1.0;                                        \
        const long fx = (long)cx, fy = (long)cy;                                          \
        const double wx0 = 1.0 - (cx - (double)fx), wy0 = 1.0 - (cy - (double)fy);       \
        const double wx1 = 1.0 - wx0, wy1 = 1.0 - wy0;                                    \
        /* padded fx, fx + 1 are image fx - 1, fx: ia >= -1, ib <= nx */                 \
        long ia = fx - 1, ib = fx, ja = fy - 1, jb = fy;                                  \
        ia = ia < 0 ? 0 : ia;                                                             \
        ja = ja < 0 ? 0 : ja;                                                             \
        ib = ib < nx ? ib : nx - 1;                                                       \
        jb = jb < ny ? jb : ny - 1;                                                       \
        const T *ra = src + ja * nx, *rb = src + jb * nx;                                 \
        double t = 0.0;                                                                   \
        t += (double)ra[ia] * wy0 * wx0;                                                  \
        t += (double)ra[ib] * wy0 * wx1;                                                  \
        t += (double)rb[ia] * wy1 * wx0;                                                  \
        t += (double)rb[ib] * wy1 * wx1;                                                  \
        return t;                                                                         \
    }

RP_DEFINE_POINTS(float, f32)
RP_DEFINE_POINTS(double, f64)

/* ---- shared pieces of the samplers -------------------------------------------------- */

/* The output side of a sampler that serves both rp_kernel_sample (double values into
 * out) and rp_kernel_sample_f32 (float32 into d, footprint fp): value v of position p
 * stored as store_row_f32 (engine/sky/reproject.c) stores a value of rp_kernel_sample,
 * (float)v, its footprint 1.0f where v is finite (|v| <= DBL_MAX, tested on the double:
 * a finite v beyond FLT_MAX narrows to an infinity and still counts), counted in *fin;
 * when d is NULL, out[p] = v.  Inlined into samplers where d is a constant, so that each
 * keeps one path. */
static inline __attribute__((always_inline)) void rp_put1(double *restrict out,
                                                          float *restrict d,
                                                          float *restrict fp, long *fin,
                                                          size_t p, double v)
{
    if (!d) {
        out[p] = v;
        return;
    }
    const int f = fabs(v) <= DBL_MAX;
    d[p] = (float)v;
    *fin += f;
    if (fp)
        fp[p] = f ? 1.0f : 0.0f;
}

/* What every sampler reads: src (the array SRC of element type T), nx, ny and the ends
 * xmax, ymax of the valid range. */
#define RP_SAMPLER_VARS(T, SRC)                                                           \
    const T *restrict src = (const T *)(SRC);                                             \
    const long nx = k->src.nx, ny = k->src.ny;                                            \
    const double xmax = (double)nx - 0.5, ymax = (double)ny - 0.5

/* Asks for the cache line of the pixel under (x, y) of the plane at `base` (element
 * size es, nx wide, xm = nx - 1, ym = ny - 1), rounded and clamped into the plane (NaN
 * and far-off positions clamp to an edge: a harmless address; converted through long,
 * one instruction, where a conversion to size_t takes a compare and a branch).  A macro: GCC's
 * pure-const analysis takes a function whose only effect is __builtin_prefetch for a
 * const one and deletes its calls (GCC 12, -O2: no prefetch left in the loops). */
#define RP_PREFETCH_POINT(base, es, nx, xm, ym, x, y)                                    \
    do {                                                                                  \
        double u_ = (x) + 0.5, v_ = (y) + 0.5;                                            \
        u_ = u_ > 0.0 ? (u_ < (xm) ? u_ : (xm)) : 0.0;   /* NaN -> 0 */                   \
        v_ = v_ > 0.0 ? (v_ < (ym) ? v_ : (ym)) : 0.0;                                    \
        __builtin_prefetch((base) + ((size_t)(long)v_ * (size_t)(nx) + (size_t)(long)u_) * (es)); \
    } while (0)

/* The AVX2 and AVX-512 samplers (x86-64 with GCC or clang, chosen at run time with
 * __builtin_cpu_supports; left out with -DRP_NO_AVX2) and the target attributes of their
 * functions. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(RP_NO_AVX2)
#define RP_AVX2_SAMPLERS 1
#define RP_AVX2 __attribute__((target("avx2")))
#define RP_AVX512 __attribute__((target("avx512f")))
#define RP_AVX2_FMA __attribute__((target("avx2,fma")))

/* The four addresses src + idx[q] of 64-bit lane indices idx. */
static inline __attribute__((target("avx2"), always_inline)) void
rp_avx2_addr4(const float *src, __m256i idx, const float *p[4])
{
    const __m128i il = _mm256_castsi256_si128(idx), ih = _mm256_extracti128_si256(idx, 1);
    p[0] = src + _mm_cvtsi128_si64(il);
    p[1] = src + _mm_extract_epi64(il, 1);
    p[2] = src + _mm_cvtsi128_si64(ih);
    p[3] = src + _mm_extract_epi64(ih, 1);
}

/* The 64 bits at p, as an integer (an unaligned load). */
static inline int64_t rp_ld64(const float *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The prefetch hint of the AVX2 fused samplers (kernels_f32.c, and kernels.c's of
 * lanczos3 and bicubic) for position (x, y): the cache line of pixel
 * (trunc x, trunc y) (the pixel or its left or lower neighbour: a hint), without
 * clamping: truncated by cvttsd2si (defined for every input: NaN and out-of-range give
 * INT64_MIN), the address formed in uintptr_t arithmetic (implementation-defined, never
 * dereferenced).  A prefetch never faults; one of a far-off or NaN position is a wasted
 * hint.  Half the instructions of RP_PREFETCH_POINT. */
#define RP_PREFETCH_FAST(base, nx, x, y)                                                  \
    __builtin_prefetch((const void *)((uintptr_t)(base)                                   \
                                      + ((uintptr_t)_mm_cvttsd_si64(_mm_set_sd(y))        \
                                         * (uintptr_t)(nx)                                \
                                         + (uintptr_t)_mm_cvttsd_si64(_mm_set_sd(x)))     \
                                        * sizeof(float)))

/* rp_put1 for the four values r of positions m .. m + 3, vector stores (the same
 * conversions: vcvtpd2ps rounds and quietens as the scalar cast does). */
static inline __attribute__((target("avx2"), always_inline)) void
rp_put4(double *restrict out, float *restrict d, float *restrict fp, long *fin, size_t m,
        __m256d r)
{
    if (!d) {
        _mm256_storeu_pd(out + m, r);
        return;
    }
    _mm_storeu_ps(d + m, _mm256_cvtpd_ps(r));
    const __m256d f = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), r),
                                    _mm256_set1_pd(DBL_MAX), _CMP_LE_OQ);
    *fin += __builtin_popcount((unsigned)_mm256_movemask_pd(f));
    if (fp) {
        const __m128 lo = _mm_castpd_ps(_mm256_castpd256_pd128(f));
        const __m128 hi = _mm_castpd_ps(_mm256_extractf128_pd(f, 1));
        _mm_storeu_ps(fp + m, _mm_and_ps(_mm_shuffle_ps(lo, hi, 0x88), _mm_set1_ps(1.0f)));
    }
}

/* rp_put1 for the eight values r of positions m .. m + 7, in AVX-512F code: one
 * vcvtpd2ps and the finite lanes in a mask register. */
static inline __attribute__((target("avx512f"), always_inline)) void
rp_put8(double *restrict out, float *restrict d, float *restrict fp, long *fin, size_t m,
        __m512d r)
{
    if (d) {
        _mm256_storeu_ps(d + m, _mm512_cvtpd_ps(r));
        const __mmask8 f = _mm512_cmp_pd_mask(_mm512_abs_pd(r), _mm512_set1_pd(DBL_MAX),
                                              _CMP_LE_OQ);
        *fin += __builtin_popcount((unsigned)f);
        if (fp)
            _mm256_storeu_ps(fp + m,
                             _mm512_cvtpd_ps(_mm512_maskz_mov_pd(f, _mm512_set1_pd(1.0))));
    } else {
        _mm512_storeu_pd(out + m, r);
    }
}

/* kernels.c's AVX2 bilinear sampler of float planes, which rp_kernel_new picks where the
 * CPU has AVX2: rp_kernel_sample_f32 runs its fused bilinear samplers only for kernels
 * whose k->fn is it. */
extern sample_fn *const rp_sample_bilinear_f32_avx2;
#endif

#endif
