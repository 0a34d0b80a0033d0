/* Nearest and bilinear sampling of float32 planes straight into float32 output with a
 * footprint (rp_kernel_sample_f32): the fused samplers, plain (GCC vector extensions),
 * AVX2 and AVX-512 (chosen at run time).  The kernel object and the point functions
 * they match bit for bit are in kernels_impl.h; the other samplers in kernels.c. */
#include "engine/sky/kernels_impl.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- nearest and bilinear straight into float32 output ------------------------------ */


/* The prefetch of rp_kernel_sample_f32: one hint for each group of four positions
 * sampled, at the group's first index among the pn positions (pfx, pfy) (every 4th),
 * issued inside the sampling loop rather than in a burst before it.  Measured on 4096^2
 * rotated by 20 deg (AMD EPYC Zen 4, 1 thread, nearest, rp_reproject 8 rows ahead,
 * alternated runs): 232-249 Mpix/s spread in the loop, 213-231 in a burst (a burst of
 * prefetches fills the miss buffers, and the loop stalls behind them); every 8th
 * position, 4 rows ahead, two hints a group or the T1/T2/NTA hints measured the same
 * within the noise.  RP_PREFETCH_FAST (AVX2 samplers) against RP_PREFETCH_POINT,
 * alternated: bilinear 180-187 against 179-181 Mpix/s, nearest level within the noise. */

/* The value of lanes outside the valid range: (float)NAN. */
static const float rp_nan_f32 = NAN;

typedef uint32_t rp_v4u __attribute__((vector_size(16)));
typedef uint64_t rp_v4p __attribute__((vector_size(32)));

/* Finishes n float32 values d written by bit copies of source pixels: a NaN gets its
 * quiet bit (the rest of its payload kept), as the widening and narrowing conversions of
 * rp_kernel_sample and its caller make it on x86-64 and AArch64; footprint fp (may be
 * NULL) 1.0f where finite, 0.0f elsewhere.  Four lanes at a time over values still in
 * the L1 cache.  Returns the number of finite values.  Cannot fail. */
RP_HOT static long finish_f32(float *restrict d, float *restrict fp, size_t n)
{
    long fin = 0;
    size_t c = 0;
    for (; c + 4 <= n; c += 4) {
        rp_v4u b;
        memcpy(&b, d + c, sizeof b);
        const rp_v4u mag = b & 0x7fffffffu;
        b |= (rp_v4u)(mag > 0x7f800000u) & 0x00400000u;
        memcpy(d + c, &b, sizeof b);
        const rp_v4u f = (rp_v4u)(mag < 0x7f800000u);   /* all ones where finite */
        fin -= (long)(int32_t)(f[0] + f[1] + f[2] + f[3]);
        if (fp) {
            const rp_v4u one = f & 0x3f800000u;   /* the bits of 1.0f */
            memcpy(fp + c, &one, sizeof one);
        }
    }
    for (; c < n; c++) {
        uint32_t b;
        memcpy(&b, d + c, sizeof b);
        const uint32_t mag = b & 0x7fffffffu;
        b |= mag > 0x7f800000u ? 0x00400000u : 0u;
        memcpy(d + c, &b, sizeof b);
        fin += mag < 0x7f800000u;
        if (fp)
            fp[c] = mag < 0x7f800000u ? 1.0f : 0.0f;
    }
    return fin;
}

/* rp_kernel_sample_f32 for nearest on a float plane: nearest_f32's pixel (the same
 * range test, truncations and clamps as RP_SAMPLER4, four lanes at a time), its float32
 * bits copied, and rp_nan_f32 outside the valid range: each lane's address is selected
 * in the vector (the pixel's, or rp_nan_f32's for a lane outside, whose position is
 * zeroed first), so that the loads need no branch; the four values are stored one by
 * one as loaded (a vector assembled from four scalar loads measured 40% slower: it waits
 * in the store-to-load forwarding of the stack for each of them, serialising the cache
 * misses of successive groups); finish_f32 then quietens NaNs and counts. */
RP_HOT static long fused_nearest_f32(const rp_kernel *k, size_t n, const double *restrict x,
                                     const double *restrict y, float *restrict d,
                                     float *restrict fp, const double *restrict pfx,
                                     const double *restrict pfy, size_t pn)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1);
    const rp_v4i ny1 = RP_V4I_SPLAT((int32_t)ny - 1);
    const rp_v4d zero = { 0.0, 0.0, 0.0, 0.0 };
    const uint64_t base = (uint64_t)(uintptr_t)src, nanp = (uint64_t)(uintptr_t)&rp_nan_f32;
    const rp_v4p nanv = { nanp, nanp, nanp, nanp };
    const double pxm = (double)nx - 1.0, pym = (double)ny - 1.0;
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        if (m < pn)
            RP_PREFETCH_POINT((const char *)src, sizeof(float), nx, pxm, pym, pfx[m], pfy[m]);
        rp_v4d px, py;
        RP_V4D_LOAD(px, x + m);
        RP_V4D_LOAD(py, y + m);
        const rp_v4q in = (px >= -0.5) & (px <= xmax) & (py >= -0.5) & (py <= ymax);
        px = RP_V4D_SELECT(in, px, zero);
        py = RP_V4D_SELECT(in, py, zero);
        rp_v4i i = __builtin_convertvector((px + 1.0) + 0.5, rp_v4i) - 1;
        rp_v4i j = __builtin_convertvector((py + 1.0) + 0.5, rp_v4i) - 1;
        i = RP_V4I_MIN(i, nx1);
        j = RP_V4I_MIN(j, ny1);
        const rp_v4p off = (__builtin_convertvector(j, rp_v4p) * (uint64_t)nx
                            + __builtin_convertvector(i, rp_v4p)) * sizeof(float) + base;
        const rp_v4p addr = (off & (rp_v4p)in) | (nanv & ~(rp_v4p)in);
        for (int q = 0; q < 4; q++)
            memcpy(d + m + (size_t)q, (const void *)(uintptr_t)addr[q], sizeof(float));
    }
    for (; m < n; m++) {
        const double qx = x[m], qy = y[m];
        const float *p = &rp_nan_f32;
        if (qx >= -0.5 && qx <= xmax && qy >= -0.5 && qy <= ymax) {
            const long i = (long)((qx + 1.0) + 0.5) - 1, j = (long)((qy + 1.0) + 0.5) - 1;
            p = src + (j < ny ? j : ny - 1) * nx + (i < nx ? i : nx - 1);
        }
        memcpy(d + m, p, sizeof(float));
    }
    return finish_f32(d, fp, n);
}

/* Positions m .. e - 1 of a fused sampler one at a time: POINT's value (NaN
 * outside the valid range) narrowed to float32 and finished by finish_f32 (a NaN quiet,
 * the footprint), counted in fin; m is left as it was.  Uses the sampler's k, src, nx,
 * ny, xmax, ymax, x, y, d, fp and fin. */
#define RP_FUSED_POINTS(POINT, e)                                                         \
    for (size_t q_ = m; q_ < (e); q_++) {                                                 \
        const double qx_ = x[q_], qy_ = y[q_];                                            \
        const float v_ = (float)(qx_ >= -0.5 && qx_ <= xmax && qy_ >= -0.5 && qy_ <= ymax \
                                 ? POINT(k, src, nx, ny, qx_, qy_) : NAN);                \
        memcpy(d + q_, &v_, sizeof v_);                                                   \
        fin += finish_f32(d + q_, fp ? fp + q_ : NULL, 1);                                \
    }

#ifdef RP_AVX2_SAMPLERS
/* The head of an iteration of the 8-position fused AVX2 samplers (m .. m + 7): the
 * prefetch hints for positions m and m + 4 of (pfx, pfy) (those below pn); the positions
 * into x0, x1 (lanes 0-3, 4-7) and y0, y1; inm, bit q set when position m + q is inside
 * the valid range (NaN is not); a group wholly outside stores eight NaNs (and footprint
 * zeros) and the loop goes on.  Uses the sampler's constants lo, hx, hy (-0.5, xmax,
 * ymax as vectors) and its src, nx, x, y, d, fp, pfx, pfy, pn and m. */
#define RP_AVX2_GROUP8                                                                    \
    if (m < pn)                                                                           \
        RP_PREFETCH_FAST(src, nx, pfx[m], pfy[m]);                                        \
    if (m + 4 < pn)                                                                       \
        RP_PREFETCH_FAST(src, nx, pfx[m + 4], pfy[m + 4]);                                \
    const __m256d x0 = _mm256_loadu_pd(x + m), x1 = _mm256_loadu_pd(x + m + 4);          \
    const __m256d y0 = _mm256_loadu_pd(y + m), y1 = _mm256_loadu_pd(y + m + 4);          \
    const int inm = _mm256_movemask_pd(_mm256_and_pd(                                     \
                        _mm256_and_pd(_mm256_cmp_pd(x0, lo, _CMP_GE_OQ),                  \
                                      _mm256_cmp_pd(x0, hx, _CMP_LE_OQ)),                 \
                        _mm256_and_pd(_mm256_cmp_pd(y0, lo, _CMP_GE_OQ),                  \
                                      _mm256_cmp_pd(y0, hy, _CMP_LE_OQ))))                \
                    | _mm256_movemask_pd(_mm256_and_pd(                                   \
                          _mm256_and_pd(_mm256_cmp_pd(x1, lo, _CMP_GE_OQ),                \
                                        _mm256_cmp_pd(x1, hx, _CMP_LE_OQ)),               \
                          _mm256_and_pd(_mm256_cmp_pd(y1, lo, _CMP_GE_OQ),                \
                                        _mm256_cmp_pd(y1, hy, _CMP_LE_OQ)))) << 4;        \
    if (inm == 0) {   /* the whole group outside: NaN, (float)NAN */                     \
        _mm256_storeu_si256((__m256i *)(void *)(d + m), _mm256_set1_epi32(0x7fc00000));   \
        if (fp)                                                                           \
            _mm256_storeu_si256((__m256i *)(void *)(fp + m), _mm256_setzero_si256());     \
        continue;                                                                         \
    }

/* The 32 bits at p, as an integer (an unaligned load). */
static inline int32_t rp_ld32(const float *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The float32 bits of the four pixels at 64-bit indices idx of the plane src, loaded
 * one by one straight into the lanes (vpinsrd).  Cannot fail. */
static inline __attribute__((target("avx2"), always_inline)) __m128i
rp_avx2_load4(const float *src, __m256i idx)
{
    const float *p[4];
    rp_avx2_addr4(src, idx, p);
    const __m128i b = _mm_insert_epi32(_mm_cvtsi32_si128(rp_ld32(p[0])), rp_ld32(p[1]), 1);
    return _mm_insert_epi32(_mm_insert_epi32(b, rp_ld32(p[2]), 2), rp_ld32(p[3]), 3);
}

/* fused_nearest_f32 with AVX2: the same positions, truncations and clamps, lane for
 * lane, eight positions an iteration: the range test and the rounding in double, four
 * lanes at a time; the clamps, the quiet bit of NaNs, the finite count and the footprint
 * in eight int32 lanes; 64-bit plane indices by vpmuldq; the pixels loaded straight into
 * the lanes (rp_avx2_load4), without a second pass.  A group wholly outside the valid
 * range stores eight NaNs; one partly outside (the edges of the footprint) and the last
 * n % 8 positions take nearest_f32 one at a time. */
RP_AVX2 static long fused_nearest_f32_avx2(const rp_kernel *k, size_t n,
                                           const double *restrict x, const double *restrict y,
                                           float *restrict d, float *restrict fp,
                                           const double *restrict pfx,
                                           const double *restrict pfy, size_t pn)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const __m256d lo = _mm256_set1_pd(-0.5), hx = _mm256_set1_pd(xmax);
    const __m256d hy = _mm256_set1_pd(ymax), one = _mm256_set1_pd(1.0);
    const __m256d half = _mm256_set1_pd(0.5);
    const __m256i nx1 = _mm256_set1_epi32((int32_t)nx - 1), ny1 = _mm256_set1_epi32((int32_t)ny - 1);
    const __m256i c1 = _mm256_set1_epi32(1), nx64 = _mm256_set1_epi64x(nx);
    const __m256i mag = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x00400000), onef = _mm256_set1_epi32(0x3f800000);
    long fin = 0;
    size_t m = 0;
    for (; m + 8 <= n; m += 8) {
        RP_AVX2_GROUP8;
        if (inm != 0xff) {
            RP_FUSED_POINTS(nearest_f32, m + 8);
            continue;
        }
        /* floor((x + 1) + 0.5) - 1 by truncation (x + 1 + 0.5 >= 1), clamped above. */
        __m256i i = _mm256_setr_m128i(
            _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_add_pd(x0, one), half)),
            _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_add_pd(x1, one), half)));
        __m256i j = _mm256_setr_m128i(
            _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_add_pd(y0, one), half)),
            _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_add_pd(y1, one), half)));
        i = _mm256_min_epi32(_mm256_sub_epi32(i, c1), nx1);
        j = _mm256_min_epi32(_mm256_sub_epi32(j, c1), ny1);
        const __m128i il = _mm256_castsi256_si128(i), ih = _mm256_extracti128_si256(i, 1);
        const __m128i jl = _mm256_castsi256_si128(j), jh = _mm256_extracti128_si256(j, 1);
        const __m128i b0 = rp_avx2_load4(src, _mm256_add_epi64(
            _mm256_mul_epi32(_mm256_cvtepu32_epi64(jl), nx64), _mm256_cvtepu32_epi64(il)));
        const __m128i b1 = rp_avx2_load4(src, _mm256_add_epi64(
            _mm256_mul_epi32(_mm256_cvtepu32_epi64(jh), nx64), _mm256_cvtepu32_epi64(ih)));
        __m256i b = _mm256_setr_m128i(b0, b1);
        const __m256i mg = _mm256_and_si256(b, mag);
        b = _mm256_or_si256(b, _mm256_and_si256(_mm256_cmpgt_epi32(mg, inf), quiet));
        _mm256_storeu_si256((__m256i *)(void *)(d + m), b);
        const __m256i f = _mm256_cmpgt_epi32(inf, mg);   /* finite lanes */
        fin += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(f)));
        if (fp)
            _mm256_storeu_si256((__m256i *)(void *)(fp + m), _mm256_and_si256(f, onef));
    }
    RP_FUSED_POINTS(nearest_f32, n);
    return fin;
}
#endif

#ifdef RP_AVX2_SAMPLERS
/* Bilinear of a float plane in float32 arithmetic, the point of fused_bilinear_f32_avx2
 * (its tail and its groups at an edge): the fractions c - floor(c) of the padded
 * coordinates taken exactly in double, as bilinear_f32 takes them, then rounded to
 * float32 (gx, gy); weights wx1 = gx, wx0 = 1 - gx (the same along y); the four
 * products value * wy * wx summed in bilinear_f32's order, in float32.  Against
 * bilinear_f32 (double arithmetic) the value differs by at most 7 u (|v00| + |v01| +
 * |v10| + |v11|) + O(u^2), u = 2^-24: each weight within u of its double (one rounding
 * of gx, one of 1 - gx), each product two roundings, the sum three (the first addition,
 * to 0, is exact); tests/engine/test_kernels.c checks 8 u.  Returns the float32 value
 * widened (exactly) to double.  Cannot fail. */
static inline double bilinear_f32f(const rp_kernel *k, const float *restrict src, long nx,
                                   long ny, double px, double py)
{
    (void)k;
    const double cx = px + 1.0, cy = py + 1.0;
    const long fx = (long)cx, fy = (long)cy;
    const float gx = (float)(cx - (double)fx), gy = (float)(cy - (double)fy);
    const float wx1 = gx, wy1 = gy, wx0 = 1.0f - gx, wy0 = 1.0f - gy;
    long ia = fx - 1, ib = fx, ja = fy - 1, jb = fy;
    ia = ia < 0 ? 0 : ia;
    ja = ja < 0 ? 0 : ja;
    ib = ib < nx ? ib : nx - 1;
    jb = jb < ny ? jb : ny - 1;
    const float *ra = src + ja * nx, *rb = src + jb * nx;
    float t = 0.0f;
    t += ra[ia] * wy0 * wx0;
    t += ra[ib] * wy0 * wx1;
    t += rb[ia] * wy1 * wx0;
    t += rb[ib] * wy1 * wx1;
    return (double)t;
}

/* The 2 x 2 taps at the four 64-bit plane indices idx of the float plane src (nx wide):
 * into *ra the pairs (v[idx], v[idx + 1]) of each lane, into *rb those one row below
 * (idx + nx), one 64-bit load each (rp_avx2_pairs' layout).  Cannot fail. */
static inline __attribute__((target("avx2"), always_inline)) void
rp_avx2_quads(const float *src, __m256i idx, long nx, __m256 *ra, __m256 *rb)
{
    const float *p[4];
    rp_avx2_addr4(src, idx, p);
    *ra = _mm256_castsi256_ps(_mm256_setr_epi64x(rp_ld64(p[0]), rp_ld64(p[1]), rp_ld64(p[2]),
                                                 rp_ld64(p[3])));
    *rb = _mm256_castsi256_ps(_mm256_setr_epi64x(rp_ld64(p[0] + nx), rp_ld64(p[1] + nx),
                                                 rp_ld64(p[2] + nx), rp_ld64(p[3] + nx)));
}

/* Four 64-bit plane indices j * nx + i of int32 lanes i, j (non-negative). */
#define RP_AVX2_INDEX_V(i, j, nx64)                                                       \
    _mm256_add_epi64(_mm256_mul_epi32(_mm256_cvtepi32_epi64(j), (nx64)),                  \
                     _mm256_cvtepi32_epi64(i))

/* rp_kernel_sample_f32 for bilinear on a float plane with AVX2: bilinear_f32f's
 * arithmetic eight positions at a time in float32 lanes (one vector where the double
 * form took two).  A group whose eight positions are inside the valid range and away
 * from the edges (1 <= floor(c) <= n - 1 on both axes, so that ib = ia + 1 and jb = ja + 1)
 * loads both horizontal taps of a row with one 64-bit load a lane, both rows from one
 * address (rp_avx2_quads), the lanes
 * taken in the order 0, 1, 4, 5 and 2, 3, 6, 7 so that one vshufps splits the pairs
 * into natural order; a group wholly outside stores NaN; the other groups (edges of the
 * footprint and of the image) and the last n % 8 positions take bilinear_f32f.  Values
 * are bilinear_f32f's bit for bit (lane arithmetic in its order; the intrinsics name
 * every operation: no FMA contraction); a NaN result is quiet (x86 arithmetic). */
RP_AVX2 static long fused_bilinear_f32_avx2(const rp_kernel *k, size_t n,
                                            const double *restrict x, const double *restrict y,
                                            float *restrict d, float *restrict fp,
                                            const double *restrict pfx,
                                            const double *restrict pfy, size_t pn)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const __m256d lo = _mm256_set1_pd(-0.5), hx = _mm256_set1_pd(xmax);
    const __m256d hy = _mm256_set1_pd(ymax), one = _mm256_set1_pd(1.0);
    const __m256 onef = _mm256_set1_ps(1.0f), fmax_ = _mm256_set1_ps(FLT_MAX);
    const __m256 absf = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i c1 = _mm256_set1_epi32(1), nx1 = _mm256_set1_epi32((int32_t)nx - 1);
    const __m256i ny1 = _mm256_set1_epi32((int32_t)ny - 1), nx64 = _mm256_set1_epi64x(nx);
    long fin = 0;
    size_t m = 0;
    for (; m + 8 <= n; m += 8) {
        RP_AVX2_GROUP8;
        const __m256d cx0 = _mm256_add_pd(x0, one), cx1 = _mm256_add_pd(x1, one);
        const __m256d cy0 = _mm256_add_pd(y0, one), cy1 = _mm256_add_pd(y1, one);
        const __m128i fx0 = _mm256_cvttpd_epi32(cx0), fx1 = _mm256_cvttpd_epi32(cx1);
        const __m128i fy0 = _mm256_cvttpd_epi32(cy0), fy1 = _mm256_cvttpd_epi32(cy1);
        const __m256i fx = _mm256_setr_m128i(fx0, fx1), fy = _mm256_setr_m128i(fy0, fy1);
        const __m256i edge = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpgt_epi32(c1, fx), _mm256_cmpgt_epi32(fx, nx1)),
            _mm256_or_si256(_mm256_cmpgt_epi32(c1, fy), _mm256_cmpgt_epi32(fy, ny1)));
        if (inm != 0xff || !_mm256_testz_si256(edge, edge)) {
            RP_FUSED_POINTS(bilinear_f32f, m + 8);
            continue;
        }
        /* Fractions exactly in double, then rounded to float32: lanes 0..7. */
        const __m256 gx = _mm256_setr_m128(_mm256_cvtpd_ps(_mm256_sub_pd(cx0, _mm256_cvtepi32_pd(fx0))),
                                           _mm256_cvtpd_ps(_mm256_sub_pd(cx1, _mm256_cvtepi32_pd(fx1))));
        const __m256 gy = _mm256_setr_m128(_mm256_cvtpd_ps(_mm256_sub_pd(cy0, _mm256_cvtepi32_pd(fy0))),
                                           _mm256_cvtpd_ps(_mm256_sub_pd(cy1, _mm256_cvtepi32_pd(fy1))));
        const __m256 wx1 = gx, wy1 = gy;
        const __m256 wx0 = _mm256_sub_ps(onef, gx), wy0 = _mm256_sub_ps(onef, gy);
        /* Away from the edges, rows ja = fy - 1, jb = fy and columns ia = fx - 1, ib = fx:
         * both taps of both rows from the address of (ia, ja).  Lanes 0, 1, 4, 5 (A) and
         * 2, 3, 6, 7 (B). */
        const __m128i one4 = _mm_set1_epi32(1);
        const __m128i ia0 = _mm_sub_epi32(fx0, one4), ia1 = _mm_sub_epi32(fx1, one4);
        const __m128i ja0 = _mm_sub_epi32(fy0, one4), ja1 = _mm_sub_epi32(fy1, one4);
        __m256 pa, pb, qa, qb;
        rp_avx2_quads(src, RP_AVX2_INDEX_V(_mm_unpacklo_epi64(ia0, ia1),
                                           _mm_unpacklo_epi64(ja0, ja1), nx64), nx, &pa, &pb);
        rp_avx2_quads(src, RP_AVX2_INDEX_V(_mm_unpackhi_epi64(ia0, ia1),
                                           _mm_unpackhi_epi64(ja0, ja1), nx64), nx, &qa, &qb);
        const __m256 aa = _mm256_shuffle_ps(pa, qa, 0x88), ab = _mm256_shuffle_ps(pa, qa, 0xdd);
        const __m256 ba = _mm256_shuffle_ps(pb, qb, 0x88), bb = _mm256_shuffle_ps(pb, qb, 0xdd);
        __m256 t = _mm256_setzero_ps();
        t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(aa, wy0), wx0));
        t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(ab, wy0), wx1));
        t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(ba, wy1), wx0));
        t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(bb, wy1), wx1));
        _mm256_storeu_ps(d + m, t);
        const __m256 f = _mm256_cmp_ps(_mm256_and_ps(t, absf), fmax_, _CMP_LE_OQ);
        fin += __builtin_popcount((unsigned)_mm256_movemask_ps(f));
        if (fp)
            _mm256_storeu_ps(fp + m, _mm256_and_ps(f, onef));
    }
    RP_FUSED_POINTS(bilinear_f32f, n);
    return fin;
}
#endif

#ifdef RP_AVX2_SAMPLERS
/* ---- nearest and bilinear into float32 with AVX-512 (chosen at run time) ------------ */

/* Measured on an Intel Xeon with AVX-512 (Sapphire/Granite Rapids class, 2 MB L2 a
 * core, KVM, gather_data_sampling "Not affected"), 4096^2 rotated by 20 deg through
 * rp_reproject, 1 thread, bench/kernelbench "coords" (CPU time), six rounds each
 * alternated with the build before (medians, ranges):
 *   nearest:  339 (329-343) Mpix/s with fused_nearest_f32_avx512; 387 (382-394) with
 *             one vpgatherdd instead of the sixteen scalar loads; 429 (412-444) with the
 *             prefetch hints to L2 (_MM_HINT_T1) and the block sampled in strips of 128
 *             columns (rp_kernel_f32_strip).
 *   bilinear: 272 (258-279) with fused_bilinear_f32_avx512; 329 (323-334) with four
 *             vpgatherdq of tap pairs; 362 (350-375) with the hints to L2 and the strips.
 * Four vgatherdps of single taps instead of the pairs: 276 (270-290) against 322
 * (317-326).  On this CPU the scalar loads compile to a chain of vpinsrd/vpinsrq (port
 * 5) behind a store and reload of the addresses, where a gather issues its loads from
 * one instruction; on AMD Zen 4, where fused_*_avx512 were tuned, the gathers measured
 * slower (their comments): so these run on Intel CPUs only (rp_gather_ok), and the Zen 4
 * path is unchanged.  Prefetch hints, one a four positions as there (nearest, five
 * rounds each): with whole rows T1 387 and T0 373, NTA 209 (the lines are reused from
 * L2); one a eight positions 385, a sixteen 366, none 277 against 380; with strips of
 * 128, T1 419 against T0 393 (six rounds). */

/* The prefetch hint of the gathering samplers: RP_PREFETCH_FAST's address, into L2
 * (and L3) rather than L1 (__builtin_prefetch locality 2: prefetcht1). */
#define RP_PREFETCH_L2(base, nx, x, y)                                                    \
    __builtin_prefetch((const void *)((uintptr_t)(base)                                   \
                                      + ((uintptr_t)_mm_cvttsd_si64(_mm_set_sd(y))        \
                                         * (uintptr_t)(nx)                                \
                                         + (uintptr_t)_mm_cvttsd_si64(_mm_set_sd(x)))     \
                                        * sizeof(float)),                                 \
                       0, 2)

/* The head of an iteration of the 16-position fused AVX-512 samplers (m .. m + 15): the
 * prefetch hints of RP_AVX2_GROUP8 for positions m, m + 4, m + 8 and m + 12 (those below
 * pn: one hint a four positions, as there; into L2 with RP_PREFETCH_L2 for the gathering
 * samplers, gather_ nonzero); the positions into x0, x1 (lanes 0-7, 8-15)
 * and y0, y1; inm, bit q set when position m + q is inside the valid range (NaN is not:
 * ordered compares into mask registers); a group wholly outside stores sixteen NaNs (and
 * footprint zeros) and the loop goes on.  Uses the sampler's constants lo, hx, hy and
 * its src, nx, x, y, d, fp, pfx, pfy, pn and m.  RP_AVX512_GROUP16_BODY is the part
 * after the hints. */
#define RP_AVX512_GROUP16(gather_)                                                        \
    for (size_t h_ = 0; h_ < 16; h_ += 4)                                                 \
        if (m + h_ < pn) {                                                                \
            if (gather_)                                                                  \
                RP_PREFETCH_L2(src, nx, pfx[m + h_], pfy[m + h_]);                        \
            else                                                                          \
                RP_PREFETCH_FAST(src, nx, pfx[m + h_], pfy[m + h_]);                      \
        }                                                                                 \
    RP_AVX512_GROUP16_BODY
#define RP_AVX512_GROUP16_BODY                                                            \
    const __m512d x0 = _mm512_loadu_pd(x + m), x1 = _mm512_loadu_pd(x + m + 8);           \
    const __m512d y0 = _mm512_loadu_pd(y + m), y1 = _mm512_loadu_pd(y + m + 8);           \
    const unsigned inm =                                                                  \
        (unsigned)(__mmask8)(_mm512_cmp_pd_mask(x0, lo, _CMP_GE_OQ)                       \
                             & _mm512_cmp_pd_mask(x0, hx, _CMP_LE_OQ)                     \
                             & _mm512_cmp_pd_mask(y0, lo, _CMP_GE_OQ)                     \
                             & _mm512_cmp_pd_mask(y0, hy, _CMP_LE_OQ))                    \
        | (unsigned)(__mmask8)(_mm512_cmp_pd_mask(x1, lo, _CMP_GE_OQ)                     \
                               & _mm512_cmp_pd_mask(x1, hx, _CMP_LE_OQ)                   \
                               & _mm512_cmp_pd_mask(y1, lo, _CMP_GE_OQ)                   \
                               & _mm512_cmp_pd_mask(y1, hy, _CMP_LE_OQ)) << 8;            \
    if (inm == 0) {   /* the whole group outside: NaN, (float)NAN */                     \
        _mm512_storeu_si512(d + m, _mm512_set1_epi32(0x7fc00000));                        \
        if (fp)                                                                           \
            _mm512_storeu_si512(fp + m, _mm512_setzero_si512());                          \
        continue;                                                                         \
    }

/* Sixteen int32 lanes from two vectors of eight (lo in lanes 0-7, hi in 8-15). */
#define RP_AVX512_JOIN_I(lo_, hi_)                                                        \
    _mm512_inserti64x4(_mm512_castsi256_si512(lo_), (hi_), 1)

/* The fused samplers of nearest and bilinear with AVX-512 are one body each, in two
 * instances: gather = 0 fetches the pixels by scalar loads (every CPU with AVX-512F but
 * those of rp_gather_ok; tuned on AMD Zen 4), gather = 1 by hardware gathers at 32-bit
 * plane indices, with hints into L2 (Intel, rp_gather_ok: planes of fewer than 2^31
 * pixels, so that every index of a lane inside the valid range fits).  Everything else
 * is the same lane for lane, so the two give the same bits. */
#define RP_AVX512_SAMPLER_ARGS                                                            \
    const rp_kernel *k, size_t n, const double *restrict x, const double *restrict y,     \
        float *restrict d, float *restrict fp, const double *restrict pfx,                \
        const double *restrict pfy, size_t pn

/* fused_nearest_f32_avx2 sixteen positions an iteration for CPUs with AVX-512F
 * (rp_kernel_sample_f32 checks at run time): the same range test, truncations and
 * clamps lane for lane, the range test in mask registers; NaNs quietened, counted and
 * the footprint written in sixteen int32 lanes.  The bits are fused_nearest_f32's and
 * fused_nearest_f32_avx2's: a copy of the pixel's bits, a NaN with its quiet bit set.
 * The last n % 16 positions take nearest_f32 one at a time.  The pixels:
 *   gather = 0: each lane's address (64-bit index j * nx + i by vpmuldq) blended with
 *     that of rp_nan_f32 for a lane outside, so that a group at an edge of the footprint
 *     needs no scalar pass, and the sixteen pixels loaded one by one into the lanes.
 *     4096^2 rotated by 20 deg through rp_reproject, 1 thread, AMD EPYC (Zen 4), A B
 *     alternated (bench/kernelbench "coords"): 374-376 Mpix/s with
 *     fused_nearest_f32_avx2, 382-388 with two masked vgatherqps instead of the scalar
 *     loads, 402-404 with these;
 *   gather = 1: one vpgatherdd of the sixteen pixels at j * nx + i, the lanes outside
 *     masked off the gather and given the bits of rp_nan_f32.
 * Valgrind, whose CPU has no AVX-512, gets fused_nearest_f32_avx2. */
static inline __attribute__((target("avx512f"), always_inline)) long
nearest_f32_avx512_run(RP_AVX512_SAMPLER_ARGS, const int gather)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const __m512d lo = _mm512_set1_pd(-0.5), hx = _mm512_set1_pd(xmax);
    const __m512d hy = _mm512_set1_pd(ymax), one = _mm512_set1_pd(1.0);
    const __m512d half = _mm512_set1_pd(0.5);
    const __m512i nx1 = _mm512_set1_epi32((int32_t)nx - 1), ny1 = _mm512_set1_epi32((int32_t)ny - 1);
    const __m512i c1 = _mm512_set1_epi32(1), nx64 = _mm512_set1_epi64(nx);
    const __m512i nx32 = _mm512_set1_epi32((int32_t)nx);
    const __m512i mag = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x00400000), onef = _mm512_set1_epi32(0x3f800000);
    const __m512i nanv = _mm512_castps_si512(_mm512_set1_ps(rp_nan_f32));
    long fin = 0;
    size_t m = 0;
    for (; m + 16 <= n; m += 16) {
        RP_AVX512_GROUP16(gather);
        /* floor((x + 1) + 0.5) - 1 by truncation (x + 1 + 0.5 >= 1), clamped above;
         * lanes outside are not loaded, their indices unused. */
        __m512i i = RP_AVX512_JOIN_I(
            _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_add_pd(x0, one), half)),
            _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_add_pd(x1, one), half)));
        __m512i j = RP_AVX512_JOIN_I(
            _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_add_pd(y0, one), half)),
            _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_add_pd(y1, one), half)));
        i = _mm512_min_epi32(_mm512_sub_epi32(i, c1), nx1);
        j = _mm512_min_epi32(_mm512_sub_epi32(j, c1), ny1);
        __m512i b;
        if (gather) {
            const __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(j, nx32), i);
            b = _mm512_mask_i32gather_epi32(nanv, (__mmask16)inm, idx, src, 4);
        } else {
            const __m512i o0 = _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(j)), nx64),
                _mm512_cvtepi32_epi64(_mm512_castsi512_si256(i)));
            const __m512i o1 = _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(j, 1)), nx64),
                _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(i, 1)));
            const __m512i base = _mm512_set1_epi64((long long)(uintptr_t)src);
            const __m512i nanp = _mm512_set1_epi64((long long)(uintptr_t)&rp_nan_f32);
            uint64_t a[16];
            _mm512_storeu_si512(a, _mm512_mask_blend_epi64((__mmask8)inm, nanp,
                                                           _mm512_add_epi64(base, _mm512_slli_epi64(o0, 2))));
            _mm512_storeu_si512(a + 8, _mm512_mask_blend_epi64((__mmask8)(inm >> 8), nanp,
                                                               _mm512_add_epi64(base, _mm512_slli_epi64(o1, 2))));
#define RP_LDA(q) rp_ld32((const float *)(uintptr_t)a[q])
            b = _mm512_setr_epi32(RP_LDA(0), RP_LDA(1), RP_LDA(2), RP_LDA(3), RP_LDA(4),
                                  RP_LDA(5), RP_LDA(6), RP_LDA(7), RP_LDA(8), RP_LDA(9),
                                  RP_LDA(10), RP_LDA(11), RP_LDA(12), RP_LDA(13),
                                  RP_LDA(14), RP_LDA(15));
#undef RP_LDA
        }
        const __m512i mg = _mm512_and_si512(b, mag);
        b = _mm512_mask_or_epi32(b, _mm512_cmpgt_epi32_mask(mg, inf), b, quiet);
        _mm512_storeu_si512(d + m, b);
        const __mmask16 f = _mm512_cmplt_epi32_mask(mg, inf);   /* finite lanes */
        fin += __builtin_popcount((unsigned)f);
        if (fp)
            _mm512_storeu_si512(fp + m, _mm512_maskz_mov_epi32(f, onef));
    }
    RP_FUSED_POINTS(nearest_f32, n);
    return fin;
}

RP_AVX512 static long fused_nearest_f32_avx512(RP_AVX512_SAMPLER_ARGS)
{
    return nearest_f32_avx512_run(k, n, x, y, d, fp, pfx, pfy, pn, 0);
}

RP_AVX512 static long fused_nearest_f32_avx512g(RP_AVX512_SAMPLER_ARGS)
{
    return nearest_f32_avx512_run(k, n, x, y, d, fp, pfx, pfy, pn, 1);
}

/* fused_bilinear_f32_avx2 sixteen positions an iteration for CPUs with AVX-512F
 * (rp_kernel_sample_f32 checks at run time): bilinear_f32f's arithmetic in sixteen
 * float32 lanes, in its order (every operation an intrinsic: no FMA contraction), so
 * that the values are bilinear_f32f's and fused_bilinear_f32_avx2's bit for bit.  A
 * group whose sixteen positions are inside the valid range and away from the edges
 * (1 <= floor(c) <= n - 1 on both axes) fetches, per lane, the two horizontal taps of
 * row ja and those of row ja + 1, then splits the pairs with two-source permutations;
 * other groups (edges of the footprint and of the image) and the last n % 16 positions
 * take bilinear_f32f.  The pairs:
 *   gather = 0: one 64-bit load each (the offsets j * nx + i through the stack).
 *     Measured as nearest (bench/kernelbench "coords", AMD Zen 4): 291-294 Mpix/s with
 *     fused_bilinear_f32_avx2, 274-279 with four vgatherqpd of eight pairs instead of
 *     the scalar loads, 301-302 with these;
 *   gather = 1: four vpgatherdq of eight pairs at the 32-bit plane index ja * nx + ia
 *     (away from the edges ja * nx + ia + nx + 1 < nx * ny).
 * Valgrind, whose CPU has no AVX-512, gets fused_bilinear_f32_avx2. */
static inline __attribute__((target("avx512f"), always_inline)) long
bilinear_f32_avx512_run(RP_AVX512_SAMPLER_ARGS, const int gather)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const __m512d lo = _mm512_set1_pd(-0.5), hx = _mm512_set1_pd(xmax);
    const __m512d hy = _mm512_set1_pd(ymax), one = _mm512_set1_pd(1.0);
    const __m512 onef = _mm512_set1_ps(1.0f), fmax_ = _mm512_set1_ps(FLT_MAX);
    const __m512i absf = _mm512_set1_epi32(0x7fffffff);
    const __m512i c1 = _mm512_set1_epi32(1), nx1 = _mm512_set1_epi32((int32_t)nx - 1);
    const __m512i ny1 = _mm512_set1_epi32((int32_t)ny - 1), nx64 = _mm512_set1_epi64(nx);
    const __m512i nx32 = _mm512_set1_epi32((int32_t)nx);
    const __m512i nxp1 = _mm512_set1_epi32((int32_t)nx + 1);
    /* float q of the pair vectors P (lanes 0-7) and Q (lanes 8-15): the first taps at
     * the even floats of P then of Q, the second at the odd ones */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                           26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const float *srcb = src + nx;   /* row ja + 1 */
    long fin = 0;
    size_t m = 0;
    for (; m + 16 <= n; m += 16) {
        RP_AVX512_GROUP16(gather);
        const __m512d cx0 = _mm512_add_pd(x0, one), cx1 = _mm512_add_pd(x1, one);
        const __m512d cy0 = _mm512_add_pd(y0, one), cy1 = _mm512_add_pd(y1, one);
        const __m256i fx0 = _mm512_cvttpd_epi32(cx0), fx1 = _mm512_cvttpd_epi32(cx1);
        const __m256i fy0 = _mm512_cvttpd_epi32(cy0), fy1 = _mm512_cvttpd_epi32(cy1);
        const __m512i fx = RP_AVX512_JOIN_I(fx0, fx1), fy = RP_AVX512_JOIN_I(fy0, fy1);
        const __mmask16 edge = _mm512_cmplt_epi32_mask(fx, c1) | _mm512_cmpgt_epi32_mask(fx, nx1)
                               | _mm512_cmplt_epi32_mask(fy, c1)
                               | _mm512_cmpgt_epi32_mask(fy, ny1);
        if (inm != 0xffff || edge != 0) {
            RP_FUSED_POINTS(bilinear_f32f, m + 16);
            continue;
        }
        /* Fractions exactly in double, then rounded to float32: lanes 0..15. */
        const __m256 gx0 = _mm512_cvtpd_ps(_mm512_sub_pd(cx0, _mm512_cvtepi32_pd(fx0)));
        const __m256 gx1 = _mm512_cvtpd_ps(_mm512_sub_pd(cx1, _mm512_cvtepi32_pd(fx1)));
        const __m256 gy0 = _mm512_cvtpd_ps(_mm512_sub_pd(cy0, _mm512_cvtepi32_pd(fy0)));
        const __m256 gy1 = _mm512_cvtpd_ps(_mm512_sub_pd(cy1, _mm512_cvtepi32_pd(fy1)));
        const __m512 gx = _mm512_castsi512_ps(
            RP_AVX512_JOIN_I(_mm256_castps_si256(gx0), _mm256_castps_si256(gx1)));
        const __m512 gy = _mm512_castsi512_ps(
            RP_AVX512_JOIN_I(_mm256_castps_si256(gy0), _mm256_castps_si256(gy1)));
        const __m512 wx1 = gx, wy1 = gy;
        const __m512 wx0 = _mm512_sub_ps(onef, gx), wy0 = _mm512_sub_ps(onef, gy);
        __m512 pa, qa, pb, qb;
        if (gather) {
            /* Away from the edges ia = fx - 1, ja = fy - 1: the index ja * nx + ia is
             * fy * nx + fx - (nx + 1). */
            const __m512i o = _mm512_sub_epi32(
                _mm512_add_epi32(_mm512_mullo_epi32(fy, nx32), fx), nxp1);
            const __m256i ol = _mm512_castsi512_si256(o), oh = _mm512_extracti64x4_epi64(o, 1);
            pa = _mm512_castsi512_ps(_mm512_i32gather_epi64(ol, src, 4));
            qa = _mm512_castsi512_ps(_mm512_i32gather_epi64(oh, src, 4));
            pb = _mm512_castsi512_ps(_mm512_i32gather_epi64(ol, srcb, 4));
            qb = _mm512_castsi512_ps(_mm512_i32gather_epi64(oh, srcb, 4));
        } else {
            /* Away from the edges ia = fx - 1, ja = fy - 1, ib = ia + 1, jb = ja + 1. */
            const __m512i ia = _mm512_sub_epi32(fx, c1), ja = _mm512_sub_epi32(fy, c1);
            const __m512i o0 = _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(ja)), nx64),
                _mm512_cvtepi32_epi64(_mm512_castsi512_si256(ia)));
            const __m512i o1 = _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ja, 1)), nx64),
                _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ia, 1)));
            int64_t off[16];
            _mm512_storeu_si512(off, o0);
            _mm512_storeu_si512(off + 8, o1);
#define RP_BL_LD8(b_, o_)                                                                 \
    _mm512_castsi512_ps(_mm512_setr_epi64(rp_ld64((b_) + (o_)[0]), rp_ld64((b_) + (o_)[1]), \
                                          rp_ld64((b_) + (o_)[2]), rp_ld64((b_) + (o_)[3]), \
                                          rp_ld64((b_) + (o_)[4]), rp_ld64((b_) + (o_)[5]), \
                                          rp_ld64((b_) + (o_)[6]), rp_ld64((b_) + (o_)[7])))
            pa = RP_BL_LD8(src, off);
            qa = RP_BL_LD8(src, off + 8);
            pb = RP_BL_LD8(srcb, off);
            qb = RP_BL_LD8(srcb, off + 8);
#undef RP_BL_LD8
        }
        const __m512 aa = _mm512_permutex2var_ps(pa, even, qa);
        const __m512 ab = _mm512_permutex2var_ps(pa, odd, qa);
        const __m512 ba = _mm512_permutex2var_ps(pb, even, qb);
        const __m512 bb = _mm512_permutex2var_ps(pb, odd, qb);
        __m512 t = _mm512_setzero_ps();
        t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(aa, wy0), wx0));
        t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(ab, wy0), wx1));
        t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(ba, wy1), wx0));
        t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(bb, wy1), wx1));
        _mm512_storeu_ps(d + m, t);
        const __mmask16 f = _mm512_cmp_ps_mask(
            _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(t), absf)), fmax_,
            _CMP_LE_OQ);
        fin += __builtin_popcount((unsigned)f);
        if (fp)
            _mm512_storeu_ps(fp + m, _mm512_maskz_mov_ps(f, onef));
    }
    RP_FUSED_POINTS(bilinear_f32f, n);
    return fin;
}

RP_AVX512 static long fused_bilinear_f32_avx512(RP_AVX512_SAMPLER_ARGS)
{
    return bilinear_f32_avx512_run(k, n, x, y, d, fp, pfx, pfy, pn, 0);
}

RP_AVX512 static long fused_bilinear_f32_avx512g(RP_AVX512_SAMPLER_ARGS)
{
    return bilinear_f32_avx512_run(k, n, x, y, d, fp, pfx, pfy, pn, 1);
}
#undef RP_AVX512_SAMPLER_ARGS
#endif

/* rp_kernel_f32_gathers' setting: 1, the gathering samplers where rp_gather_ok. */
static int rp_f32_gathers = 1;

/* See kernels.h. */
int rp_kernel_f32_gathers(int on)
{
    const int was = rp_f32_gathers;
    rp_f32_gathers = on != 0;
    return was;
}

/* Whether k is sampled by fused_nearest_f32_avx512g or fused_bilinear_f32_avx512g:
 * nearest, or bilinear where rp_kernel_new picked the AVX2 sampler, of a float plane of
 * fewer than 2^31 pixels (32-bit indices), on an Intel CPU with AVX-512F (measured
 * faster there, slower on AMD Zen 4: see above), gathers allowed. */
static int rp_gather_ok(const rp_kernel *k)
{
#ifdef RP_AVX2_SAMPLERS
    return rp_f32_gathers && k->src.dtype == RP_F32
           && (k->method == RP_NEAREST
               || (k->method == RP_BILINEAR && k->fn == rp_sample_bilinear_f32_avx2))
           && (uint64_t)k->src.nx * (uint64_t)k->src.ny < ((uint64_t)1 << 31)
           && __builtin_cpu_supports("avx512f") && __builtin_cpu_is("intel");
#else
    (void)k;
    return 0;
#endif
}

/* The strip width of rp_kernel_f32_strip.  Measured with the gathering samplers (see
 * above; nearest, medians of five or six alternated rounds): T0 hints one a eight
 * positions, strips of 32, 64 and 128 columns 285, 336 and 394 Mpix/s against 379 with
 * whole rows of 256; T0 hints one a four, 128: 393 against 375; T1 hints, 96: 431
 * against 449 with 128.  Narrower strips, less of the source's region between two uses
 * of a cache line (each line serves about six consecutive rows of a 20 deg rotation);
 * narrower still, rows of the output and of the positions cut short. */
#define RP_F32_STRIP 128

/* See kernels.h. */
size_t rp_kernel_f32_strip(const rp_kernel *k)
{
    return rp_gather_ok(k) ? RP_F32_STRIP : 0;
}

/* See kernels.h. */
long rp_kernel_sample_f32(const rp_kernel *k, size_t n, const double *x, const double *y,
                          float *out, float *footprint, const double *pfx, const double *pfy,
                          size_t pn)
{
    if (k->src.dtype != RP_F32)
        return -1;
#ifdef RP_AVX2_SAMPLERS
    if (k->method == RP_NEAREST && rp_gather_ok(k))
        return fused_nearest_f32_avx512g(k, n, x, y, out, footprint, pfx, pfy, pn);
    if (k->method == RP_NEAREST && __builtin_cpu_supports("avx512f"))
        return fused_nearest_f32_avx512(k, n, x, y, out, footprint, pfx, pfy, pn);
    if (k->method == RP_NEAREST && __builtin_cpu_supports("avx2"))
        return fused_nearest_f32_avx2(k, n, x, y, out, footprint, pfx, pfy, pn);
#endif
    if (k->method == RP_NEAREST)
        return fused_nearest_f32(k, n, x, y, out, footprint, pfx, pfy, pn);
#ifdef RP_AVX2_SAMPLERS
    if (k->method == RP_BILINEAR && rp_gather_ok(k))
        return fused_bilinear_f32_avx512g(k, n, x, y, out, footprint, pfx, pfy, pn);
    if (k->method == RP_BILINEAR && k->fn == rp_sample_bilinear_f32_avx2
        && __builtin_cpu_supports("avx512f"))
        return fused_bilinear_f32_avx512(k, n, x, y, out, footprint, pfx, pfy, pn);
    if (k->method == RP_BILINEAR && k->fn == rp_sample_bilinear_f32_avx2)
        return fused_bilinear_f32_avx2(k, n, x, y, out, footprint, pfx, pfy, pn);
#endif
    if (k->ffn)   /* lanczos3 and bicubic: kernels.c */
        return k->ffn(k, n, x, y, out, footprint, pfx, pfy, pn);
    return -1;
}
