/* Interpolation kernels: nearest, bilinear, bicubic B-spline and Lanczos-3 sampling of a plane. */
#include "engine/sky/kernels_impl.h"
#include "engine/sky/bspline.h"
#include "engine/sky/simd.h"
#include "engine/base/error.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- constants ---------------------------------------------------------------------- */

/* Lanczos-3 table: samples per unit of |u|, a power of two so that t * LZ_RES is exact.
 * Linear interpolation in the table misses L(u) by at most h^2/8 max|L''| with
 * h = 1 / LZ_RES and max|L''| = 3.6554 (at u = 0): 2.73e-8 per 1-D weight. */
#define LZ_RES 4096
#define LZ_A 3
#define LZ_TABLEN (LZ_A * LZ_RES + 2)

/* A Lanczos-3 sample is NaN unless the finite pixels of its support carry at least this
 * fraction of the weight of the whole support.  At 1/2 a finite sample always has a
 * finite pixel among the 2x2 nearest (the positive weights outside them sum to at most
 * 0.196 of the whole), so NaN regions keep about the footprint nearest would give them
 * (the edge of a NaN half-plane falls at the pixel edge, 0.5 pixel from the last finite
 * centre), the renormalisation amplifies the finite pixels at most 4.8 times
 * (sum |w| / (sum w / 2), at t = 1/2 on both axes), and no island of values
 * extrapolated through the kernel's positive outer lobe appears inside a NaN region,
 * which a fraction such as 1e-3 lets through 2 to 3 pixels from the finite pixels. */
#define LZ_MIN_WEIGHT 0.5

/* ---- shared pieces of the samplers -------------------------------------------------- */

/* Cubic B-spline weights of the four coefficients at padded positions floor(c) - 1 ..
 * floor(c) + 2 for t = c - floor(c) in [0, 1): beta3(t + 1), beta3(t), beta3(1 - t),
 * beta3(2 - t), with beta3(u) = 2/3 - u^2 + |u|^3 / 2 for |u| < 1 and (2 - |u|)^3 / 6
 * for 1 <= |u| < 2 (Unser 1999, eq. (3)); written as scipy's
 * get_spline_interpolation_weights (ni_splines.c) does, the last weight being 1 minus
 * the others, except that scipy's (u^2 (u - 2) 3 + 4) / 6 and u^3 / 6 are computed as
 * u^2 (u - 2) / 2 + 2/3 and u^3 (1/6): multiplications instead of three divisions (the
 * vector sampler's divisions were a fifth of its time), each weight within an ulp or
 * two of scipy's.  Cannot fail. */
#define BSPLINE3_TWO_THIRDS (2.0 / 3.0)
#define BSPLINE3_SIXTH (1.0 / 6.0)
static inline void bspline3_weights(double t, double w[4])
{
    double s = 1.0 - t;
    w[1] = t * t * (t - 2.0) * 0.5 + BSPLINE3_TWO_THIRDS;
    w[2] = s * s * (s - 2.0) * 0.5 + BSPLINE3_TWO_THIRDS;
    w[0] = s * s * s * BSPLINE3_SIXTH;
    w[3] = 1.0 - w[0] - w[1] - w[2];
}

/* Lanczos-3 weights of input pixels floor(c) - 3 .. floor(c) + 2 (0-based) for padded
 * coordinate c with t = c - floor(c) in [0, 1): L(t + 2), L(t + 1), L(t), L(1 - t),
 * L(2 - t), L(3 - t), each interpolated linearly in the table `tab`.  Returns their sum,
 * added as ((w2 + w3) + (w1 + w4)) + (w0 + w5) (the order of the AVX2 sampler's lanes).
 * Cannot fail. */
static inline double lanczos3_weights(const double *tab, double t, double w[6])
{
    double u = t * LZ_RES, v = LZ_RES - u;
    long iu = (long)u, iv = (long)v;
    double fu = u - (double)iu, fv = v - (double)iv;
    const double *a = tab + iu, *b = tab + iv;
    w[0] = a[2 * LZ_RES] + fu * (a[2 * LZ_RES + 1] - a[2 * LZ_RES]);
    w[1] = a[LZ_RES] + fu * (a[LZ_RES + 1] - a[LZ_RES]);
    w[2] = a[0] + fu * (a[1] - a[0]);
    w[3] = b[0] + fv * (b[1] - b[0]);
    w[4] = b[LZ_RES] + fv * (b[LZ_RES + 1] - b[LZ_RES]);
    w[5] = b[2 * LZ_RES] + fv * (b[2 * LZ_RES + 1] - b[2 * LZ_RES]);
    return ((w[2] + w[3]) + (w[1] + w[4])) + (w[0] + w[5]);
}

/* lanczos3_weights in float for float planes, from the float table tabf (struct
 * rp_kernel, lzf): u, v and their integer parts as lanczos3_weights splits them (in
 * double, exact), the fractions fu, fv rounded to float, then each weight L + f D in
 * float (one multiplication, one addition: L + fu * D with fu, L, D floats) and their
 * sum in the same order.  Each weight within 4 2^-24 of lanczos3_weights' (L rounded
 * to float, the difference of two rounded values, the product and the sum: see
 * tests/engine/test_kernels.c, lanczos3_f32_bound), which is within 2.7e-8 of L(u).
 * Cannot fail. */
static inline float lanczos3_weights_f32(const float *tabf, double t, float w[6])
{
    const double u = t * LZ_RES, v = LZ_RES - u;
    const long iu = (long)u, iv = (long)v;
    const float fu = (float)(u - (double)iu), fv = (float)(v - (double)iv);
    const float *a = tabf + 8 * iu, *b = tabf + 8 * iv;
    w[2] = a[0] + fu * a[4];
    w[1] = a[1] + fu * a[5];
    w[0] = a[2] + fu * a[6];
    w[3] = b[0] + fv * b[4];
    w[4] = b[1] + fv * b[5];
    w[5] = b[2] + fv * b[6];
    return ((w[2] + w[3]) + (w[1] + w[4])) + (w[0] + w[5]);
}

/* Lanczos-3's plain sum over the 6x6 support, columns first: with v(j, i) the pixel of
 * row j, column i of the support (widened exactly to double), the column sums
 * c(i) = RP_LZ_SUM6(wy, v(., i)), then the sum RP_LZ_SUM6(wx, c), where
 * RP_LZ_SUM6(w, a) = ((w0 a0 + w2 a2) + w4 a4) + ((w1 a1 + w3 a3) + w5 a5), every
 * product and sum one IEEE double operation in exactly this order (no FMA contraction
 * in ISO C mode).  The point functions compute it one position at a time, the samplers
 * in vector lanes (the lanes of four positions, or of the columns of one: the AVX2
 * sampler), all bit for bit alike, for float32 and float64 planes alike.  (Before, the
 * sum went row by row; either order rounds 42 times in double: the two differ by a few
 * 2^-53 of sum |w v|.) */
#define RP_LZ_SUM6(w, a)                                                                  \
    ((((w)[0] * (a)[0] + (w)[2] * (a)[2]) + (w)[4] * (a)[4])                              \
     + (((w)[1] * (a)[1] + (w)[3] * (a)[3]) + (w)[5] * (a)[5]))

/* Float planes: the plain sum in float (every product and sum one IEEE float operation),
 * the columns c(i) = RP_LZ_SUM6(wy, v(., i)) of float weights and pixels, then across
 * them RP_LZ_ACROSS(wx, c) = ((q0 + q4) + q2) + ((q1 + q5) + q3), q_i = wx_i c(i): the
 * order in which the AVX2 sampler reduces the eight lanes of one position (columns in
 * lanes 0-5).  The point function and every sampler of float planes use exactly this. */
#define RP_LZ_ACROSS(w, c)                                                                \
    ((((w)[0] * (c)[0] + (w)[4] * (c)[4]) + (w)[2] * (c)[2])                              \
     + (((w)[1] * (c)[1] + (w)[5] * (c)[5]) + (w)[3] * (c)[3]))

/* The point of lanczos3, in the padded coordinates c = x + 1 of the points of nearest
 * and bilinear (kernels_impl.h):
 *
 * lanczos3: sum of L(x - i) L(y - j) v(i, j) over the finite pixels of the 6x6 support
 *           (image pixels floor(c) - 3 .. floor(c) + 2, clamped to the image: edge
 *           extension), divided by the sum of the same weights (NaN below
 *           LZ_MIN_WEIGHT); with all 36 finite, computed as the plain sum divided by
 *           (sum wx)(sum wy), which in the interior is SWarp's LANCZOS3 (interpolate.c
 *           make_kernel: the 6 weights of each axis scaled to unit sum).  Double planes
 *           in double (lanczos3_f64), float planes in float (lanczos3_f32: weights and
 *           plain sum in float, the division in double). */

/* The 6x6 support of padded position (fx, fy) in the image: columns ix[0..5], rows
 * row[0..5] (image pixels fx - 3 .. fx + 2, fy - 3 .. fy + 2 clamped into it). */
#define RP_LZ_SUPPORT(T, SFX)                                                             \
    static inline void lanczos3_support_##SFX(const T *src, long nx, long ny, long fx,   \
                                              long fy, long ix[6], const T *row[6])      \
    {                                                                                     \
        const long i0 = fx - 3, j0 = fy - 3;                                              \
        for (int q = 0; q < 6; q++)                                                       \
            ix[q] = clampl(i0 + q, nx);                                                   \
        if (j0 >= 0 && j0 + 5 < ny) {                                                     \
            for (int q = 0; q < 6; q++)                                                   \
                row[q] = src + (j0 + q) * nx;                                             \
        } else {                                                                          \
            for (int q = 0; q < 6; q++)                                                   \
                row[q] = src + clampl(j0 + q, ny) * nx;                                   \
        }                                                                                 \
    }                                                                                     \
                                                                                          \
    /* The NaN-aware sum over the finite pixels of the support (row, ix) with weights    \
     * wx, wy (double), whose 36 products sum to `den`: sum / (sum of the finite         \
     * pixels' weights), NaN when those carry less than LZ_MIN_WEIGHT of den. */         \
    static double lanczos3_masked_##SFX(const T *const row[6], const long ix[6],          \
                                        const double wx[6], const double wy[6], double den) \
    {                                                                                     \
        double sum = 0.0, wsum = 0.0;                                                     \
        for (int jj = 0; jj < 6; jj++) {                                                  \
            double rs = 0.0, rw = 0.0;                                                    \
            for (int ii = 0; ii < 6; ii++) {                                              \
                const double v = (double)row[jj][ix[ii]];                                 \
                if (fabs(v) <= DBL_MAX) {                                                 \
                    rs += wx[ii] * v;                                                     \
                    rw += wx[ii];                                                         \
                }                                                                         \
            }                                                                             \
            sum += wy[jj] * rs;                                                           \
            wsum += wy[jj] * rw;                                                          \
        }                                                                                 \
        return wsum >= LZ_MIN_WEIGHT * den ? sum / wsum : NAN;                            \
    }

RP_LZ_SUPPORT(float, f32)
RP_LZ_SUPPORT(double, f64)

/* lanczos3 of a plane of T (see above) with weights and sums in W: weights WEIGHTS from
 * the table k->TAB, columns RP_LZ_SUM6, across them ACROSS, divided in double by
 * (double)sx (double)sy; the NaN-aware sum (in double, from the weights widened) only
 * when the plain sum exceeds WMAX in magnitude or is NaN (a non-finite pixel, whatever its
 * weight, makes it so).  lanczos3_f64: double planes in double, RP_LZ_SUM6 across;
 * lanczos3_f32: float planes in float (an AVX2 vector holds 8 floats), RP_LZ_ACROSS
 * across, which every sampler of float planes follows bit for bit (its distance from
 * lanczos3_f64 of the same values: tests/engine/test_kernels.c, lanczos3_f32_bound). */
#define RP_LZ_POINT(T, W, SFX, WEIGHTS, TAB, ACROSS, WMAX)                                \
    static inline double lanczos3_##SFX(const rp_kernel *k, const T *restrict src, long nx, \
                                        long ny, double px, double py)                   \
    {                                                                                     \
        const double cx = px + 1.0, cy = py + 1.0;                                        \
        const long fx = (long)cx, fy = (long)cy;                                          \
        W wx[6], wy[6], c[6];                                                             \
        const W sx = WEIGHTS(k->TAB, cx - (double)fx, wx);                                \
        const W sy = WEIGHTS(k->TAB, cy - (double)fy, wy);                                \
        long ix[6];                                                                       \
        const T *row[6];                                                                  \
        lanczos3_support_##SFX(src, nx, ny, fx, fy, ix, row);                             \
        for (int ii = 0; ii < 6; ii++) {                                                  \
            const T v[6] = { row[0][ix[ii]], row[1][ix[ii]], row[2][ix[ii]],              \
                             row[3][ix[ii]], row[4][ix[ii]], row[5][ix[ii]] };            \
            c[ii] = RP_LZ_SUM6(wy, v);                                                    \
        }                                                                                 \
        const W sum = ACROSS(wx, c);                                                      \
        const double den = (double)sx * (double)sy;                                       \
        if (fabs((double)sum) <= (WMAX))                                                  \
            return (double)sum / den;                                                     \
        double dx[6], dy[6];                                                              \
        for (int q = 0; q < 6; q++) {                                                     \
            dx[q] = wx[q];                                                                \
            dy[q] = wy[q];                                                                \
        }                                                                                 \
        return lanczos3_masked_##SFX(row, ix, dx, dy, den);                               \
    }

RP_LZ_POINT(double, double, f64, lanczos3_weights, lz, RP_LZ_SUM6, DBL_MAX)
RP_LZ_POINT(float, float, f32, lanczos3_weights_f32, lzf, RP_LZ_ACROSS, FLT_MAX)

/* ---- the samplers: four positions at a time, the point functions above for the rest -- */

/* The scalar path of every sampler, positions m0 .. m1 - 1: NaN outside [-0.5, n - 0.5]
 * on either axis (NaN included), POINT(k, src, nx, ny, x, y) inside.  Takes the groups
 * of four the vector lanes do not, and the last n % 4 positions; uses the sampler's k,
 * src, nx, ny, xmax, ymax, x, y and out. */
#define RP_POINTS(POINT, m0, m1)                                                          \
    for (size_t p_ = (m0); p_ < (m1); p_++) {                                             \
        const double qx_ = x[p_], qy_ = y[p_];                                            \
        out[p_] = qx_ >= -0.5 && qx_ <= xmax && qy_ >= -0.5 && qy_ <= ymax                \
                  ? POINT(k, src, nx, ny, qx_, qy_) : NAN;                                \
    }

/* RP_POINTS for the samplers that also serve rp_kernel_sample_f32: each value stored by
 * rp_put1 (kernels_impl.h; uses the sampler's out, d, fp and fin as well). */
#define RP_POINTS_TO(POINT, m0, m1)                                                       \
    for (size_t p_ = (m0); p_ < (m1); p_++) {                                             \
        const double qx_ = x[p_], qy_ = y[p_];                                            \
        rp_put1(out, d, fp, &fin, p_,                                                     \
                qx_ >= -0.5 && qx_ <= xmax && qy_ >= -0.5 && qy_ <= ymax                  \
                    ? POINT(k, src, nx, ny, qx_, qy_) : NAN);                             \
    }

/* In a sampler's loop over groups of four (m), loads positions m .. m + 3 into px, py and
 * their padded coordinates c = x + 1 into cx, cy, truncated into fx, fy; a group with a
 * position outside the valid range (or NaN) is sampled by POINT one position at a time
 * and the loop goes on.  Truncating to int32 is exact in range: c <= n + 0.5 and
 * n <= INT_MAX (rp_kernel_new).  RP_GROUP_WITH: the same, the positions outside
 * stored by POINTS (RP_POINTS or RP_POINTS_TO). */
#define RP_GROUP_WITH(POINTS, POINT)                                                      \
    rp_v4d px, py;                                                                        \
    RP_V4D_LOAD(px, x + m);                                                               \
    RP_V4D_LOAD(py, y + m);                                                               \
    const rp_v4q in_ = (px >= -0.5) & (px <= xmax) & (py >= -0.5) & (py <= ymax);         \
    if (!(in_[0] & in_[1] & in_[2] & in_[3])) {                                           \
        POINTS(POINT, m, m + 4)                                                           \
        continue;                                                                         \
    }                                                                                     \
    const rp_v4d cx = px + 1.0, cy = py + 1.0;                                            \
    const rp_v4i fx = __builtin_convertvector(cx, rp_v4i);                                \
    const rp_v4i fy = __builtin_convertvector(cy, rp_v4i)
#define RP_GROUP(POINT) RP_GROUP_WITH(RP_POINTS, POINT)

/* ---- nearest and bilinear, four positions at a time --------------------------------- */

/* The same definitions as nearest_SFX and bilinear_SFX, four positions at a time in the
 * lanes of rp_v4d (simd.h): the range test, the truncations, the weights and the four
 * products summed in the same order are computed for the four lanes at once, each lane
 * doing the scalar arithmetic, so the values are bit for bit those of the point
 * functions (tests/engine/test_kernels.c checks both paths against each other).  Only
 * the pixel loads are scalar.  A group of four with a lane outside the valid range takes
 * the point functions.  Indices are truncated to int32: in range, c = x + 1 <= nx + 0.5
 * and nx <= INT_MAX (rp_kernel_new). */
#define RP_SAMPLER4(T, SFX)                                                               \
    RP_HOT static void sample_nearest_##SFX(const rp_kernel *k, size_t n,                 \
                                            const double *restrict x,                     \
                                            const double *restrict y, double *restrict out) \
    {                                                                                     \
        RP_SAMPLER_VARS(T, k->src.data);                                                  \
        const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1);                                 \
        const rp_v4i ny1 = RP_V4I_SPLAT((int32_t)ny - 1);                                 \
        size_t m = 0;                                                                     \
        for (; m + 4 <= n; m += 4) {                                                      \
            RP_GROUP(nearest_##SFX);                                                      \
            (void)fx;                                                                     \
            (void)fy;                                                                     \
            rp_v4i i = __builtin_convertvector(cx + 0.5, rp_v4i) - 1;                     \
            rp_v4i j = __builtin_convertvector(cy + 0.5, rp_v4i) - 1;                     \
            i = RP_V4I_MIN(i, nx1);                                                       \
            j = RP_V4I_MIN(j, ny1);                                                       \
            for (int q = 0; q < 4; q++)                                                   \
                out[m + (size_t)q] = (double)src[(size_t)j[q] * (size_t)nx + (size_t)i[q]]; \
        }                                                                                 \
        RP_POINTS(nearest_##SFX, m, n)                                                    \
    }                                                                                     \
                                                                                          \
    RP_HOT static void sample_bilinear_##SFX(const rp_kernel *k, size_t n,                \
                                             const double *restrict x,                    \
                                             const double *restrict y, double *restrict out) \
    {                                                                                     \
        RP_SAMPLER_VARS(T, k->src.data);                                                  \
        const rp_v4i zero = RP_V4I_SPLAT(0);                                              \
        const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1);                                 \
        const rp_v4i ny1 = RP_V4I_SPLAT((int32_t)ny - 1);                                 \
        size_t m = 0;                                                                     \
        for (; m + 4 <= n; m += 4) {                                                      \
            RP_GROUP(bilinear_##SFX);                                                     \
            const rp_v4d wx0 = 1.0 - (cx - __builtin_convertvector(fx, rp_v4d));          \
            const rp_v4d wy0 = 1.0 - (cy - __builtin_convertvector(fy, rp_v4d));          \
            const rp_v4d wx1 = 1.0 - wx0, wy1 = 1.0 - wy0;                                \
            rp_v4i ia = fx - 1, ib = fx, ja = fy - 1, jb = fy;                            \
            ia = RP_V4I_MAX(ia, zero);                                                    \
            ja = RP_V4I_MAX(ja, zero);                                                    \
            ib = RP_V4I_MIN(ib, nx1);                                                     \
            jb = RP_V4I_MIN(jb, ny1);                                                     \
            rp_v4d aa, ab, ba, bb;                                                        \
            for (int q = 0; q < 4; q++) {                                                 \
                const T *ra = src + (size_t)ja[q] * (size_t)nx;                           \
                const T *rb = src + (size_t)jb[q] * (size_t)nx;                           \
                aa[q] = (double)ra[ia[q]];                                                \
                ab[q] = (double)ra[ib[q]];                                                \
                ba[q] = (double)rb[ia[q]];                                                \
                bb[q] = (double)rb[ib[q]];                                                \
            }                                                                             \
            rp_v4d t = { 0.0, 0.0, 0.0, 0.0 };                                            \
            t += aa * wy0 * wx0;                                                          \
            t += ab * wy0 * wx1;                                                          \
            t += ba * wy1 * wx0;                                                          \
            t += bb * wy1 * wx1;                                                          \
            RP_V4D_STORE(out + m, t);                                                     \
        }                                                                                 \
        RP_POINTS(bilinear_##SFX, m, n)                                                   \
    }

RP_SAMPLER4(float, f32)
RP_SAMPLER4(double, f64)

/* ---- bilinear of float planes with AVX2 (x86-64, chosen at run time) ---------------- */

/* The same definition as bilinear_f32 again, four positions a vector, written with AVX2
 * intrinsics: the range test is a lane mask rather than a branch (a lane outside
 * [-0.5, n - 0.5], NaN included, samples pixel (0, 0), a safe address, and its result is
 * replaced by NaN with a blend; a group with no lane inside just stores NaN), and the two
 * horizontal taps of a row come in one 64-bit load (RP_AVX2_TAPS_f32).  Lane arithmetic
 * is the scalar arithmetic in the scalar order (the intrinsics name every add and
 * multiply: no FMA contraction), so the values are bit for bit those of the point
 * function and of RP_SAMPLER4.  Indices into the plane are 64-bit (j * nx + i, j and nx
 * below 2^31: rp_kernel_new).  rp_kernel_new picks it where
 * __builtin_cpu_supports("avx2") says the CPU has AVX2; other CPUs and targets (NEON
 * included), double planes and nearest keep RP_SAMPLER4.  Nearest in the same masked
 * form (its four loads gathered or scalar) measured slower on 4096^2 rotated by 20 deg
 * (AMD EPYC Zen 4, 1 thread: 106-120 against 170-176 Mpix/s on whole rows without
 * prefetching, level within the noise inside rp_reproject). */
#ifdef RP_AVX2_SAMPLERS
/* Loads positions m .. m + 3 into px, py; `in` is the lane mask of those inside the
 * valid range, and px, py are zeroed in the other lanes.  Uses the sampler's x, y, m
 * and the constants lo_, hx_, hy_. */
#define RP_AVX2_GROUP                                                                     \
    __m256d px = _mm256_loadu_pd(x + m), py = _mm256_loadu_pd(y + m);                     \
    const __m256d in = _mm256_and_pd(                                                     \
        _mm256_and_pd(_mm256_cmp_pd(px, lo_, _CMP_GE_OQ), _mm256_cmp_pd(px, hx_, _CMP_LE_OQ)), \
        _mm256_and_pd(_mm256_cmp_pd(py, lo_, _CMP_GE_OQ), _mm256_cmp_pd(py, hy_, _CMP_LE_OQ))); \
    if (_mm256_testz_pd(in, in)) {                                                        \
        _mm256_storeu_pd(out + m, nan_);                                                  \
        continue;                                                                         \
    }                                                                                     \
    px = _mm256_and_pd(px, in);                                                           \
    py = _mm256_and_pd(py, in)

/* The constants of RP_AVX2_GROUP and of the index arithmetic. */
#define RP_AVX2_CONSTS                                                                    \
    const __m256d lo_ = _mm256_set1_pd(-0.5), hx_ = _mm256_set1_pd(xmax);                 \
    const __m256d hy_ = _mm256_set1_pd(ymax), one_ = _mm256_set1_pd(1.0);                 \
    const __m256d nan_ = _mm256_set1_pd(NAN);                                             \
    const __m128i nx1_ = _mm_set1_epi32((int32_t)nx - 1), ny1_ = _mm_set1_epi32((int32_t)ny - 1); \
    const __m128i c1_ = _mm_set1_epi32(1), c0_ = _mm_setzero_si128();                     \
    const __m256i nx64_ = _mm256_set1_epi64x(nx);                                         \
    (void)c0_

/* 64-bit plane indices j * nx + i of four int32 lanes i, j (non-negative). */
#define RP_AVX2_INDEX(i, j)                                                               \
    _mm256_add_epi64(_mm256_mul_epi32(_mm256_cvtepi32_epi64(j), nx64_),                   \
                     _mm256_cvtepi32_epi64(i))

/* Four pixel values as doubles at 64-bit indices idx of the float plane src. */
#define RP_AVX2_GATHER_f32(src, idx) _mm256_cvtps_pd(_mm256_i64gather_ps((src), (idx), 4))

/* Bilinear's four taps (ia, ja), (ib, ja), (ia, jb), (ib, jb) of a float plane into aa,
 * ab, ba, bb.  Where every lane has ib = ia + 1 (1 <= fx <= nx - 1: no clamping along x),
 * one 64-bit load a lane and row fetches both horizontal neighbours (rp_avx2_pairs),
 * the pairs then split by a permutation; elsewhere four gathers.  Scalar 64-bit loads
 * rather than vgatherqpd: on whole 4096-pixel rows without prefetching (source pixels
 * not in the cache) the gathers ran at 80-91 Mpix/s, these at 87-102, the
 * vector-extension sampler at 94-107 (AMD EPYC Zen 4).  rp_avx2_addr4
 * (kernels_impl.h): the four addresses src + idx[q] of 64-bit lane indices idx. */
static inline __attribute__((target("avx2"), always_inline)) __m256
rp_avx2_pairs(const float *src, __m256i idx)
{
    const float *p[4];
    rp_avx2_addr4(src, idx, p);
    return _mm256_castsi256_ps(_mm256_setr_epi64x(rp_ld64(p[0]), rp_ld64(p[1]), rp_ld64(p[2]),
                                                  rp_ld64(p[3])));
}
#define RP_AVX2_PAIRS(src, idx) rp_avx2_pairs((src), (idx))

#define RP_AVX2_TAPS_f32(src, ia, ib, ja, jb, fx, aa, ab, ba, bb)                          \
    do {                                                                                  \
        const __m128i edge_ = _mm_or_si128(_mm_cmpgt_epi32(c1_, (fx)),                    \
                                           _mm_cmpgt_epi32((fx), nx1_));                  \
        if (_mm_testz_si128(edge_, edge_)) {                                              \
            const __m256i split_ = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);             \
            const __m256 ra_ = _mm256_permutevar8x32_ps(                                  \
                RP_AVX2_PAIRS(src, RP_AVX2_INDEX(ia, ja)), split_);                       \
            const __m256 rb_ = _mm256_permutevar8x32_ps(                                  \
                RP_AVX2_PAIRS(src, RP_AVX2_INDEX(ia, jb)), split_);                       \
            (aa) = _mm256_cvtps_pd(_mm256_castps256_ps128(ra_));                          \
            (ab) = _mm256_cvtps_pd(_mm256_extractf128_ps(ra_, 1));                        \
            (ba) = _mm256_cvtps_pd(_mm256_castps256_ps128(rb_));                          \
            (bb) = _mm256_cvtps_pd(_mm256_extractf128_ps(rb_, 1));                        \
        } else {                                                                          \
            (aa) = RP_AVX2_GATHER_f32(src, RP_AVX2_INDEX(ia, ja));                        \
            (ab) = RP_AVX2_GATHER_f32(src, RP_AVX2_INDEX(ib, ja));                        \
            (ba) = RP_AVX2_GATHER_f32(src, RP_AVX2_INDEX(ia, jb));                        \
            (bb) = RP_AVX2_GATHER_f32(src, RP_AVX2_INDEX(ib, jb));                        \
        }                                                                                 \
    } while (0)

#define RP_SAMPLER_AVX2(T, SFX)                                                           \
    RP_AVX2 static void sample_bilinear_##SFX##_avx2(const rp_kernel *k, size_t n,        \
                                                     const double *restrict x,            \
                                                     const double *restrict y,            \
                                                     double *restrict out)                \
    {                                                                                     \
        RP_SAMPLER_VARS(T, k->src.data);                                                  \
        RP_AVX2_CONSTS;                                                                   \
        size_t m = 0;                                                                     \
        for (; m + 4 <= n; m += 4) {                                                      \
            RP_AVX2_GROUP;                                                                \
            /* bilinear_SFX: weights from c = x + 1 and its truncation f */              \
            const __m256d cx = _mm256_add_pd(px, one_), cy = _mm256_add_pd(py, one_);     \
            const __m128i fx = _mm256_cvttpd_epi32(cx), fy = _mm256_cvttpd_epi32(cy);     \
            const __m256d wx0 = _mm256_sub_pd(one_, _mm256_sub_pd(cx, _mm256_cvtepi32_pd(fx))); \
            const __m256d wy0 = _mm256_sub_pd(one_, _mm256_sub_pd(cy, _mm256_cvtepi32_pd(fy))); \
            const __m256d wx1 = _mm256_sub_pd(one_, wx0), wy1 = _mm256_sub_pd(one_, wy0); \
            const __m128i ia = _mm_max_epi32(_mm_sub_epi32(fx, c1_), c0_);                \
            const __m128i ja = _mm_max_epi32(_mm_sub_epi32(fy, c1_), c0_);                \
            const __m128i ib = _mm_min_epi32(fx, nx1_), jb = _mm_min_epi32(fy, ny1_);     \
            __m256d aa, ab, ba, bb;                                                       \
            RP_AVX2_TAPS_##SFX(src, ia, ib, ja, jb, fx, aa, ab, ba, bb);                  \
            __m256d t = _mm256_setzero_pd();                                              \
            t = _mm256_add_pd(t, _mm256_mul_pd(_mm256_mul_pd(aa, wy0), wx0));             \
            t = _mm256_add_pd(t, _mm256_mul_pd(_mm256_mul_pd(ab, wy0), wx1));             \
            t = _mm256_add_pd(t, _mm256_mul_pd(_mm256_mul_pd(ba, wy1), wx0));             \
            t = _mm256_add_pd(t, _mm256_mul_pd(_mm256_mul_pd(bb, wy1), wx1));             \
            _mm256_storeu_pd(out + m, _mm256_blendv_pd(nan_, t, in));                     \
        }                                                                                 \
        RP_POINTS(bilinear_##SFX, m, n)                                                   \
    }

RP_SAMPLER_AVX2(float, f32)

/* See kernels_impl.h. */
sample_fn *const rp_sample_bilinear_f32_avx2 = sample_bilinear_f32_avx2;
#endif

/* ---- lanczos3, four positions at a time ---------------------------------------------- */

/* The six fields L(k), D(k), L(k + R), D(k + R), L(k + 2R), D(k + 2R) of the entries
 * k = idx[0 .. 3] of the table lzt (R = LZ_RES, D(k) = L(k + 1) - L(k); an entry holds
 * the three L, a zero, the three D, a zero) as six rp_v4d f[0..5], lane q of f[i] being
 * field i of entry idx[q]: per lane two aligned 32-byte loads (the entry is one cache
 * line), then two 4x4 transposes (their fourth rows, the zeros, unused). */
#define RP_LZ_FIELDS4(lzt, idx, f)                                                        \
    do {                                                                                  \
        const double *e_[4];                                                              \
        for (int q_ = 0; q_ < 4; q_++)                                                    \
            e_[q_] = (lzt) + 8 * (size_t)(idx)[q_];                                       \
        for (int h_ = 0; h_ < 2; h_++) {                                                  \
            rp_v4d a0_, a1_, a2_, a3_;                                                    \
            RP_V4D_LOAD(a0_, e_[0] + 4 * h_);                                             \
            RP_V4D_LOAD(a1_, e_[1] + 4 * h_);                                             \
            RP_V4D_LOAD(a2_, e_[2] + 4 * h_);                                             \
            RP_V4D_LOAD(a3_, e_[3] + 4 * h_);                                             \
            const rp_v4d p01_ = RP_V4D_SHUF(a0_, a1_, 0, 4, 2, 6);                        \
            const rp_v4d q01_ = RP_V4D_SHUF(a0_, a1_, 1, 5, 3, 7);                        \
            const rp_v4d p23_ = RP_V4D_SHUF(a2_, a3_, 0, 4, 2, 6);                        \
            const rp_v4d q23_ = RP_V4D_SHUF(a2_, a3_, 1, 5, 3, 7);                        \
            (f)[h_] = RP_V4D_SHUF(p01_, p23_, 0, 1, 4, 5);                                \
            (f)[2 + h_] = RP_V4D_SHUF(q01_, q23_, 0, 1, 4, 5);                            \
            (f)[4 + h_] = RP_V4D_SHUF(p01_, p23_, 2, 3, 6, 7);                            \
        }                                                                                 \
    } while (0)

/* lanczos3_weights for the fractions t of four lanes: the same table values and the same
 * arithmetic in each lane (u = t * LZ_RES, v = LZ_RES - u, truncated to int32: u and v
 * are within [0, LZ_RES]; a[1] - a[0] read from the table lzt, where it was computed
 * by the same subtraction), so bit for bit the same weights.  Writes w[0..5]; s receives
 * the sums, added in the order lanczos3_weights adds them. */
#define RP_LZ_WEIGHTS4(lzt, t, w, s)                                                      \
    do {                                                                                  \
        const rp_v4d u_ = (t) * (double)LZ_RES, v_ = (double)LZ_RES - u_;                 \
        const rp_v4i iu_ = __builtin_convertvector(u_, rp_v4i);                           \
        const rp_v4i iv_ = __builtin_convertvector(v_, rp_v4i);                           \
        const rp_v4d fu_ = u_ - __builtin_convertvector(iu_, rp_v4d);                     \
        const rp_v4d fv_ = v_ - __builtin_convertvector(iv_, rp_v4d);                     \
        rp_v4d fa_[6], fb_[6];                                                            \
        RP_LZ_FIELDS4(lzt, iu_, fa_);                                                     \
        RP_LZ_FIELDS4(lzt, iv_, fb_);                                                     \
        (w)[0] = fa_[4] + fu_ * fa_[5];                                                   \
        (w)[1] = fa_[2] + fu_ * fa_[3];                                                   \
        (w)[2] = fa_[0] + fu_ * fa_[1];                                                   \
        (w)[3] = fb_[0] + fv_ * fb_[1];                                                   \
        (w)[4] = fb_[2] + fv_ * fb_[3];                                                   \
        (w)[5] = fb_[4] + fv_ * fb_[5];                                                   \
        (s) = (((w)[2] + (w)[3]) + ((w)[1] + (w)[4])) + ((w)[0] + (w)[5]);                \
    } while (0)

/* lanczos3_f64, four positions at a time: groups whose four 6x6 supports lie inside the
 * image (no clamping) and whose plain sums are finite are computed in vector lanes, each
 * lane with the scalar arithmetic in the scalar order (RP_LZ_SUM6; bit-identical); any
 * other lane takes the point function. */
RP_HOT static void sample_lanczos3_f64(const rp_kernel *k, size_t n, const double *restrict x,
                                       const double *restrict y, double *restrict out)
{
    RP_SAMPLER_VARS(double, k->src.data);
    const double *lzt = k->lzt;
    /* Interior: the support floor(c) - 3 .. floor(c) + 2 within the image on both axes,
     * 3 <= floor(c) <= n - 3. */
    const rp_v4i three = RP_V4I_SPLAT(3);
    const rp_v4i nx3 = RP_V4I_SPLAT((int32_t)nx - 3);
    const rp_v4i ny3 = RP_V4I_SPLAT((int32_t)ny - 3);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        RP_GROUP(lanczos3_f64);
        {
            const rp_v4i ok = (fx >= three) & (fx <= nx3) & (fy >= three) & (fy <= ny3);
            if (!(ok[0] & ok[1] & ok[2] & ok[3]))
                goto point;
            rp_v4d wx[6], wy[6], sx, sy;
            RP_LZ_WEIGHTS4(lzt, cx - __builtin_convertvector(fx, rp_v4d), wx, sx);
            RP_LZ_WEIGHTS4(lzt, cy - __builtin_convertvector(fy, rp_v4d), wy, sy);
            const double *base[4];
            for (int q = 0; q < 4; q++)
                base[q] = src + (size_t)(fy[q] - 3) * (size_t)nx + (size_t)(fx[q] - 3);
            rp_v4d v[6][6], c[6];
            for (int jj = 0; jj < 6; jj++) {
                const size_t o = (size_t)jj * (size_t)nx;
                for (int ii = 0; ii < 6; ii++)
                    v[jj][ii] = (rp_v4d){ base[0][o + ii], base[1][o + ii], base[2][o + ii],
                                          base[3][o + ii] };
            }
            for (int ii = 0; ii < 6; ii++) {
                const rp_v4d col[6] = { v[0][ii], v[1][ii], v[2][ii],
                                        v[3][ii], v[4][ii], v[5][ii] };
                c[ii] = RP_LZ_SUM6(wy, col);
            }
            const rp_v4d sum = RP_LZ_SUM6(wx, c);
            const rp_v4d r = sum / (sx * sy);
            const rp_v4q fin = (sum <= DBL_MAX) & (sum >= -DBL_MAX);
            if (fin[0] & fin[1] & fin[2] & fin[3]) {
                RP_V4D_STORE(out + m, r);
                continue;
            }
        }
    point:
        RP_POINTS(lanczos3_f64, m, m + 4)
    }
    RP_POINTS(lanczos3_f64, m, n)
}

/* Lanes (i0, i1, i2, i3) of the eight lanes of the rp_v4f a then b (0-3 a, 4-7 b). */
#if defined(__clang__)
#define RP_V4F_SHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector((a), (b), i0, i1, i2, i3)
#else
#define RP_V4F_SHUF(a, b, i0, i1, i2, i3) __builtin_shuffle((a), (b), (rp_v4i){ i0, i1, i2, i3 })
#endif

/* lanczos3 of a float plane in four float lanes (GCC vector extensions: SSE2 on any
 * x86-64, NEON on AArch64, scalar code elsewhere), the sampler where the CPU lacks AVX2:
 * what lanczos3_f32 computes, bit for bit, one position at a time.  Weights as
 * lanczos3_weights_f32 (a table entry's four L and four D in two vectors: wr = (w2, w1,
 * w0, 0), wf = (w3, w4, w5, 0)); the six rows of the support loaded as columns 0-3 and
 * 2-5 (two overlapping 4-pixel loads, never past column 5), each summed down the
 * columns as RP_LZ_SUM6 with wy_j in every lane (columns 2 and 3 twice, alike), then
 * across as RP_LZ_ACROSS.  As in the other samplers, a group of four positions is taken
 * here when every support lies inside the image (3 <= floor(c) <= n - 3 on both axes:
 * NaN fails it, and it implies the valid range); other groups, the last n % 4
 * positions and positions whose plain sum is not finite take the point function (so
 * that a batch and its positions one at a time compare the two: test_kernels). */
static void sample_lanczos3_f32(const rp_kernel *k, size_t n, const double *restrict x,
                                const double *restrict y, double *restrict out)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const float *lzf = k->lzf;
    const size_t st = (size_t)nx;
    const double cxe = (double)(nx - 2), cye = (double)(ny - 2);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        int inside = 1;
        for (int q = 0; q < 4; q++) {
            const double cx = x[m + q] + 1.0, cy = y[m + q] + 1.0;
            inside &= cx >= 3.0 && cx < cxe && cy >= 3.0 && cy < cye;
        }
        if (!inside) {
            RP_POINTS(lanczos3_f32, m, m + 4)
            continue;
        }
        for (size_t p = m; p < m + 4; p++) {
            const double cx = x[p] + 1.0, cy = y[p] + 1.0;
            const long fx = (long)cx, fy = (long)cy;
            const double ux = (cx - (double)fx) * LZ_RES, vx = LZ_RES - ux;
            const double uy = (cy - (double)fy) * LZ_RES, vy = LZ_RES - uy;
            const long iux = (long)ux, ivx = (long)vx, iuy = (long)uy, ivy = (long)vy;
            const float fux = (float)(ux - (double)iux), fvx = (float)(vx - (double)ivx);
            const float fuy = (float)(uy - (double)iuy), fvy = (float)(vy - (double)ivy);
            rp_v4f la, da, lb, db;
            memcpy(&la, lzf + 8 * iux, sizeof la);
            memcpy(&da, lzf + 8 * iux + 4, sizeof da);
            memcpy(&lb, lzf + 8 * ivx, sizeof lb);
            memcpy(&db, lzf + 8 * ivx + 4, sizeof db);
            const rp_v4f xr = la + fux * da, xf = lb + fvx * db;
            memcpy(&la, lzf + 8 * iuy, sizeof la);
            memcpy(&da, lzf + 8 * iuy + 4, sizeof da);
            memcpy(&lb, lzf + 8 * ivy, sizeof lb);
            memcpy(&db, lzf + 8 * ivy + 4, sizeof db);
            const rp_v4f yr = la + fuy * da, yf = lb + fvy * db;
            const rp_v4f tx = xr + xf, ty = yr + yf;
            const float sx = (tx[0] + tx[1]) + tx[2], sy = (ty[0] + ty[1]) + ty[2];
            const float wy[6] = { yr[2], yr[1], yr[0], yf[0], yf[1], yf[2] };
            const float *r = src + (size_t)(fy - 3) * st + (size_t)(fx - 3);
            rp_v4f v[6][2];
            for (int j = 0; j < 6; j++) {
                memcpy(&v[j][0], r + (size_t)j * st, sizeof(rp_v4f));
                memcpy(&v[j][1], r + (size_t)j * st + 2, sizeof(rp_v4f));
            }
            rp_v4f c[2];
            for (int h = 0; h < 2; h++)
                c[h] = ((wy[0] * v[0][h] + wy[2] * v[2][h]) + wy[4] * v[4][h])
                       + ((wy[1] * v[1][h] + wy[3] * v[3][h]) + wy[5] * v[5][h]);
            /* (q0, q1, q2, q3) and (q2, q3, q4, q5), q_i = wx_i c(i) */
            const rp_v4f ql = RP_V4F_SHUF(xr, xf, 2, 1, 0, 4) * c[0];
            const rp_v4f qh = RP_V4F_SHUF(xr, xf, 0, 4, 5, 6) * c[1];
            const float sum = ((ql[0] + qh[2]) + ql[2]) + ((ql[1] + qh[3]) + ql[3]);
            out[p] = fabsf(sum) <= FLT_MAX ? (double)sum / ((double)sx * (double)sy)
                                           : lanczos3_f32(k, src, nx, ny, x[p], y[p]);
        }
    }
    RP_POINTS(lanczos3_f32, m, n)
}

#ifdef RP_AVX2_SAMPLERS
/* The float weights of one position along one axis (lanczos3_weights_f32) from the
 * table entries ea = lzf + 8 iu, eb = lzf + 8 iv and the float fractions fu, fv: wr =
 * (w2, w1, w0, 0), wf = (w3, w4, w5, 0), each lane L + f D. */
#define RP_LZ_TAPS_F32(ea, eb, fu, fv, wr, wf)                                            \
    do {                                                                                  \
        (wr) = _mm_add_ps(_mm_load_ps(ea), _mm_mul_ps((fu), _mm_load_ps((ea) + 4)));      \
        (wf) = _mm_add_ps(_mm_load_ps(eb), _mm_mul_ps((fv), _mm_load_ps((eb) + 4)));      \
    } while (0)

/* The sum of the weights (wr, wf) as lanczos3_weights_f32 adds them,
 * ((w2 + w3) + (w1 + w4)) + (w0 + w5), in the low lane of an __m128. */
#define RP_LZ_TAPSUM_F32(wr, wf)                                                          \
    __extension__({                                                                       \
        const __m128 t_ = _mm_add_ps((wr), (wf));                                         \
        _mm_add_ss(_mm_add_ss(t_, _mm_shuffle_ps(t_, t_, 1)), _mm_movehl_ps(t_, t_));     \
    })

/* The low lane of the __m128 v in every lane (lane q of it is then the value). */
#define RP_LZ_LANE(v) _mm_shuffle_ps((v), (v), 0)

/* The constants of the interior test of lanczos3_group_inside for a plane nx x ny. */
typedef struct {
    __m256d one;
    __m128i three, nx3, nx5, ny3, ny4;
} rp_lz_bounds;

static inline __attribute__((target("avx2"), always_inline)) rp_lz_bounds
lanczos3_bounds(long nx, long ny)
{
    return (rp_lz_bounds){ .one = _mm256_set1_pd(1.0), .three = _mm_set1_epi32(3),
                           .nx3 = _mm_set1_epi32((int32_t)nx - 3),
                           .nx5 = _mm_set1_epi32((int32_t)nx - 5),
                           .ny3 = _mm_set1_epi32((int32_t)ny - 3),
                           .ny4 = _mm_set1_epi32((int32_t)ny - 4) };
}

/* The interior test of a group of four positions (x[0..3], y[0..3]) of the AVX2
 * lanczos3 samplers of float planes, b from lanczos3_bounds: c = x + 1 (cx, cy)
 * truncated (fx, fy) is in the interior when 3 <= fx <= nx - 3 (and so for fy), which
 * also puts x inside [-0.5, nx - 0.5] (a NaN or huge x truncates to INT_MIN: outside);
 * the last row's 8-pixel load ends inside the plane when fx <= nx - 5 or fy <= ny - 4.
 * Returns nonzero when all four positions are in; cx, cy, fx, fy are set either way. */
static inline __attribute__((target("avx2"), always_inline)) int
lanczos3_group_inside(const rp_lz_bounds *b, const double *x, const double *y,
                      __m256d *cx, __m256d *cy, __m128i *fx, __m128i *fy)
{
    *cx = _mm256_add_pd(_mm256_loadu_pd(x), b->one);
    *cy = _mm256_add_pd(_mm256_loadu_pd(y), b->one);
    const __m128i ix = _mm256_cvttpd_epi32(*cx), iy = _mm256_cvttpd_epi32(*cy);
    *fx = ix;
    *fy = iy;
    const __m128i bad = _mm_or_si128(
        _mm_or_si128(_mm_or_si128(_mm_cmpgt_epi32(ix, b->nx3), _mm_cmpgt_epi32(iy, b->ny3)),
                     _mm_or_si128(_mm_cmpgt_epi32(b->three, ix), _mm_cmpgt_epi32(b->three, iy))),
        _mm_and_si128(_mm_cmpgt_epi32(ix, b->nx5), _mm_cmpgt_epi32(iy, b->ny4)));
    return _mm_testz_si128(bad, bad);
}

/* lanczos3 of a float plane with AVX2 intrinsics, the sampler of CPUs with AVX2 but no
 * FMA (with FMA: sample_lanczos3_f32_fma below): what lanczos3_f32 computes, bit for
 * bit, one position at a time in 8 float lanes: the six rows of its support loaded 8
 * pixels each (pixels 0-5 of the support and two beyond, which only reach lanes 6 and 7),
 * summed down the columns with wy_j broadcast (RP_LZ_SUM6 in every lane), then the lanes
 * multiplied by wx (lanes 0-5: w0 .. w5) and reduced as RP_LZ_ACROSS adds them (lanes 6
 * and 7 never enter).  A group of four positions is taken here when every support lies
 * inside the image and its last 8-pixel load ends inside the plane (fx + 4 < nx or a row
 * below remains); other groups, and groups with a sum that is not finite, take the point
 * function.  The weights wy_j are broadcast from registers (an in-lane permutation of
 * (w2, w1, w0, 0) or (w3, w4, w5, 0) held in both halves) and each position's sums are
 * blended into lane q of the group's vectors: stored to the stack and read back (wy
 * as eight floats, the sums as four narrow stores under one 16-byte load, which cannot
 * be forwarded), it ran at 73.4-75.4 Mpix/s against 79.1-83.2 (4096^2 float32 onto a
 * grid rotated by 20 deg, coordinates included, 1 thread, AMD EPYC Zen 4, A B
 * alternated in two sessions).  Slower, on the same case: the loop over the group's
 * four positions unrolled (#pragma GCC unroll 4: 56-58), two positions in the halves
 * of AVX-512 vectors (49-54), y's weights computed in both halves from broadcast
 * table loads (level).  Slower too (medians of 5 rounds A B against 84-86; each
 * bit-identical to this): the group's sums reduced once, its four 8-lane products
 * transposed and the weight sums added as four columns, no per-position reduction or
 * blend (about 7 shuffles a position fewer: 77); the set-up of a block of 64 positions
 * (table entries, fractions, support starts) done ahead in a pass of its own (69);
 * prefetching the support rows of the position 16 ahead (81).  Level: the
 * int-to-double conversions as _mm256_cvtepi32_pd (GCC splits __builtin_convertvector's
 * into halves).  Taking parts away (results no longer right) gives: the six rows read
 * from a fixed 8x8 window +7%, two row products instead of six +8%, constant table
 * entries +6%, constant fractions and entries +10%, no division by the weight sums 0%,
 * no interior work at all 470 Mpix/s: the time is spread over the position's work. */
RP_AVX2 static void sample_lanczos3_f32_avx2(const rp_kernel *k, size_t n,
                                             const double *restrict x,
                                             const double *restrict y, double *restrict out)
{
    RP_SAMPLER_VARS(float, k->src.data);
    const float *lzf = k->lzf;
    const rp_lz_bounds bd = lanczos3_bounds(nx, ny);
    /* lanes 0-5 of the wx vector: w0, w1, w2 from wr (reversed), w3, w4, w5 from wf */
    const __m256i wxidx = _mm256_setr_epi32(2, 1, 0, 4, 5, 6, 3, 7);
    const size_t st = (size_t)nx;
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        __m256d cxv, cyv;
        __m128i fxv, fyv;
        if (!lanczos3_group_inside(&bd, x + m, y + m, &cxv, &cyv, &fxv, &fyv))
            goto point;
        {
            const rp_v4d cx = (rp_v4d)cxv, cy = (rp_v4d)cyv;
            const rp_v4i fx = (rp_v4i)fxv, fy = (rp_v4i)fyv;
            /* u = t LZ_RES, v = LZ_RES - u and their parts, as lanczos3_weights_f32. */
            const rp_v4d ux = (cx - __builtin_convertvector(fx, rp_v4d)) * (double)LZ_RES;
            const rp_v4d uy = (cy - __builtin_convertvector(fy, rp_v4d)) * (double)LZ_RES;
            const rp_v4d vx = (double)LZ_RES - ux, vy = (double)LZ_RES - uy;
            const rp_v4i iux = __builtin_convertvector(ux, rp_v4i);
            const rp_v4i ivx = __builtin_convertvector(vx, rp_v4i);
            const rp_v4i iuy = __builtin_convertvector(uy, rp_v4i);
            const rp_v4i ivy = __builtin_convertvector(vy, rp_v4i);
            const rp_v4f fux = __builtin_convertvector(ux - __builtin_convertvector(iux, rp_v4d), rp_v4f);
            const rp_v4f fvx = __builtin_convertvector(vx - __builtin_convertvector(ivx, rp_v4d), rp_v4f);
            const rp_v4f fuy = __builtin_convertvector(uy - __builtin_convertvector(iuy, rp_v4d), rp_v4f);
            const rp_v4f fvy = __builtin_convertvector(vy - __builtin_convertvector(ivy, rp_v4d), rp_v4f);
            __m128 sum = _mm_setzero_ps(), sxv = sum, syv = sum;
            for (int q = 0; q < 4; q++) {
                __m128 xr, xf, yr, yf;
                RP_LZ_TAPS_F32(lzf + 8 * (size_t)iux[q], lzf + 8 * (size_t)ivx[q],
                               _mm_set1_ps(fux[q]), _mm_set1_ps(fvx[q]), xr, xf);
                RP_LZ_TAPS_F32(lzf + 8 * (size_t)iuy[q], lzf + 8 * (size_t)ivy[q],
                               _mm_set1_ps(fuy[q]), _mm_set1_ps(fvy[q]), yr, yf);
                /* lane q of sxv, syv, sum: no narrow stores reloaded as a vector */
                const __m128 lq = _mm_castsi128_ps(
                    _mm_cmpeq_epi32(_mm_set1_epi32(q), _mm_setr_epi32(0, 1, 2, 3)));
                sxv = _mm_blendv_ps(sxv, RP_LZ_LANE(RP_LZ_TAPSUM_F32(xr, xf)), lq);
                syv = _mm_blendv_ps(syv, RP_LZ_LANE(RP_LZ_TAPSUM_F32(yr, yf)), lq);
                /* wy_j broadcast from registers: (w2, w1, w0, 0) and (w3, w4, w5, 0) in
                 * both halves, then one in-lane permutation a weight */
                const __m256 yr2 = _mm256_insertf128_ps(_mm256_castps128_ps256(yr), yr, 1);
                const __m256 yf2 = _mm256_insertf128_ps(_mm256_castps128_ps256(yf), yf, 1);
                const float *r = src + (size_t)(fy[q] - 3) * st + (size_t)(fx[q] - 3);
#define RP_LZ_P(j, w2, l) _mm256_mul_ps(_mm256_permute_ps((w2), (l) * 0x55), _mm256_loadu_ps(r + (j) * st))
                const __m256 c = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(RP_LZ_P(0, yr2, 2), RP_LZ_P(2, yr2, 0)),
                                  RP_LZ_P(4, yf2, 1)),
                    _mm256_add_ps(_mm256_add_ps(RP_LZ_P(1, yr2, 1), RP_LZ_P(3, yf2, 0)),
                                  RP_LZ_P(5, yf2, 2)));
#undef RP_LZ_P
                const __m256 wx = _mm256_permutevar8x32_ps(
                    _mm256_insertf128_ps(_mm256_castps128_ps256(xr), xf, 1), wxidx);
                const __m256 p = _mm256_mul_ps(wx, c);
                /* ((q0 + q4) + q2) + ((q1 + q5) + q3) */
                const __m128 lo = _mm256_castps256_ps128(p);
                const __m128 h = _mm_add_ps(_mm_add_ps(lo, _mm256_extractf128_ps(p, 1)),
                                            _mm_movehl_ps(lo, lo));
                sum = _mm_blendv_ps(sum, RP_LZ_LANE(_mm_add_ss(h, _mm_movehdup_ps(h))), lq);
            }
            const __m128 fin = _mm_and_ps(_mm_cmp_ps(sum, _mm_set1_ps(FLT_MAX), _CMP_LE_OQ),
                                          _mm_cmp_ps(sum, _mm_set1_ps(-FLT_MAX), _CMP_GE_OQ));
            if (_mm_movemask_ps(fin) == 0xF) {
                const __m256d den = _mm256_mul_pd(_mm256_cvtps_pd(sxv), _mm256_cvtps_pd(syv));
                _mm256_storeu_pd(out + m, _mm256_div_pd(_mm256_cvtps_pd(sum), den));
                continue;
            }
        }
    point:
        RP_POINTS(lanczos3_f32, m, m + 4)
    }
    RP_POINTS(lanczos3_f32, m, n)
}

/* lanczos3 of a float plane with AVX2 and FMA, the sampler rp_kernel_new picks where
 * the CPU has both: the definition of lanczos3_f32 computed with fused multiply-adds in
 * the order that ran fastest, so not bit for bit the point function but within
 * RP_LZ_FMA_BOUND of it (kernels.h; derived in tests/engine/test_kernels.c,
 * lanczos3_fma_bound).  Per position and axis one 64-byte entry of lz_tapsw (k->lzw)
 * at iu = floor(t LZ_RES): the six L and six D of the taps in column order, the b side
 * (w3 .. w5) at LZ_RES - 1 - iu with fraction fv = 1 - fu (float), and the sums of the
 * two sides' L and D in lanes 6 and 7, so that one 8-lane fma, (fu, fu, fu, fv, fv, fv,
 * fu, fv) D + L, gives wx = (w0, .., w5, sa, sb) in column order and the weight sum as
 * sa + sb (one table line where the other samplers read two, no permutation).  The six
 * rows of the support (8 pixels each, as sample_lanczos3_f32_avx2) are summed down the
 * columns in two fma chains, rows 0, 2, 4 and 1, 3, 5, added, multiplied by wx and
 * reduced over lanes 0-5 as there (lanes 6 and 7, pixels beyond the support times the
 * sums, never enter); wy_j are broadcast from a stack copy of wy (loads, not shuffles);
 * the position's sum goes into lane 3 of the group's vector with one alignr, the weight
 * sums are added for the group at once (two hadd); t = c - trunc(c) and the fraction of
 * u come from roundings toward zero (vroundpd, one instruction where the conversion to
 * int32 and back takes four with GCC; the same values, +2%).  The same groups as in
 * sample_lanczos3_f32_avx2 take the point function, as do groups whose sum is not
 * finite.  On 4096^2 float32 onto a grid rotated by 20 deg, coordinates included, 1
 * thread, AMD EPYC Zen 4, 5 rounds A B alternated: 96-100 Mpix/s against 83-84 for
 * sample_lanczos3_f32_avx2 (user CPU of the whole run 1.10 s against 1.27).  Level or slower, same case: the fma alone in the old layout
 * (two 128-bit entries an axis: level), wy broadcast by in-lane permutations of the
 * halves or by vpermps (level), the y weights as six fmas of table broadcasts (-8%),
 * table offsets and support starts for the group stored ahead as integers (-3%), the
 * group's four sums reduced at once with hadd (-2%), fv as float(1 - fu) blended (-4%),
 * the columns in one fma chain (-5%) or three (level), the reduction as a 128-bit
 * product and an fma with lanes 6 and 7 of wx zeroed (-3%), the weights of the group's
 * four positions computed ahead of its rows (-15% on the kernel alone), the loop over
 * them unrolled (#pragma GCC unroll 2: -4%, 4: -35%), the next group's table lines
 * prefetched (-7%), the supports' starts stored ahead as int64 (-3%), the position's
 * indices and fractions taken from lane 0 of vectors shifted down each time instead of
 * the stack (level, -4% on the kernel alone), the b side stored as L(k' + 1) and -D(k')
 * so that a weight is fmaf(fu, D, L) without the fraction vector (-4%): the time goes with the length of each position's chain of
 * dependent operations and with its instruction count, not with the table's L2 reads. */
static inline __attribute__((target("avx2,fma"), always_inline)) long
lanczos3_fma_run(const rp_kernel *k, size_t n, const double *restrict x,
                 const double *restrict y, double *restrict out, float *restrict d,
                 float *restrict fp, const double *restrict pfx, const double *restrict pfy,
                 size_t pn)
{
    RP_SAMPLER_VARS(float, k->src.data);
    long fin = 0;
    const rp_lz_bounds bd = lanczos3_bounds(nx, ny);
    const __m256d res = _mm256_set1_pd((double)LZ_RES);
    const float *lzw = k->lzw;
    /* (fu, fu, fu, fv, fv, fv, fu, fv) = sgn fu + off, fv = 1 - fu */
    const __m256 sgn = _mm256_setr_ps(1.0f, 1.0f, 1.0f, -1.0f, -1.0f, -1.0f, 1.0f, -1.0f);
    const __m256 off = _mm256_setr_ps(0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f, 1.0f);
    const size_t st = (size_t)nx;
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        if (m < pn)   /* the group's pixel RP_PREFETCH_ROWS rows ahead (kernels_f32.c) */
            RP_PREFETCH_FAST(src, nx, pfx[m], pfy[m]);
        __m256d cxv, cyv;
        __m128i fxv, fyv;
        if (!lanczos3_group_inside(&bd, x + m, y + m, &cxv, &cyv, &fxv, &fyv))
            goto point;
        {
            const rp_v4i fx = (rp_v4i)fxv, fy = (rp_v4i)fyv;
            /* u = t LZ_RES and its parts (truncation as rounding toward zero: c, u >= 0) */
#define RP_LZ_TZ(v) _mm256_round_pd((v), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
            const __m256d ux = _mm256_mul_pd(_mm256_sub_pd(cxv, RP_LZ_TZ(cxv)), res);
            const __m256d uy = _mm256_mul_pd(_mm256_sub_pd(cyv, RP_LZ_TZ(cyv)), res);
            const rp_v4i iux = (rp_v4i)_mm256_cvttpd_epi32(ux), iuy = (rp_v4i)_mm256_cvttpd_epi32(uy);
            const rp_v4f fux = (rp_v4f)_mm256_cvtpd_ps(_mm256_sub_pd(ux, RP_LZ_TZ(ux)));
            const rp_v4f fuy = (rp_v4f)_mm256_cvtpd_ps(_mm256_sub_pd(uy, RP_LZ_TZ(uy)));
#undef RP_LZ_TZ
            __m128 sum = _mm_setzero_ps(), sw[4];
            for (int q = 0; q < 4; q++) {
                const float *ex = lzw + 16 * (size_t)iux[q], *ey = lzw + 16 * (size_t)iuy[q];
                const __m256 wx = _mm256_fmadd_ps(_mm256_fmadd_ps(sgn, _mm256_set1_ps(fux[q]), off),
                                                  _mm256_load_ps(ex + 8), _mm256_load_ps(ex));
                const __m256 wy = _mm256_fmadd_ps(_mm256_fmadd_ps(sgn, _mm256_set1_ps(fuy[q]), off),
                                                  _mm256_load_ps(ey + 8), _mm256_load_ps(ey));
                /* (sa, sb) of x, then of y */
                sw[q] = _mm_shuffle_ps(_mm256_extractf128_ps(wx, 1), _mm256_extractf128_ps(wy, 1), 0xEE);
                _Alignas(32) float yw[8];
                _mm256_store_ps(yw, wy);
                const float *r = src + (size_t)(fy[q] - 3) * st + (size_t)(fx[q] - 3);
#define RP_LZ_W(j) _mm256_broadcast_ss(yw + (j))
#define RP_LZ_R(j) _mm256_loadu_ps(r + (j) * st)
                __m256 ca = _mm256_mul_ps(RP_LZ_W(0), RP_LZ_R(0));
                __m256 cb = _mm256_mul_ps(RP_LZ_W(1), RP_LZ_R(1));
                ca = _mm256_fmadd_ps(RP_LZ_W(2), RP_LZ_R(2), ca);
                cb = _mm256_fmadd_ps(RP_LZ_W(3), RP_LZ_R(3), cb);
                ca = _mm256_fmadd_ps(RP_LZ_W(4), RP_LZ_R(4), ca);
                cb = _mm256_fmadd_ps(RP_LZ_W(5), RP_LZ_R(5), cb);
#undef RP_LZ_W
#undef RP_LZ_R
                const __m256 p = _mm256_mul_ps(wx, _mm256_add_ps(ca, cb));
                const __m128 lo = _mm256_castps256_ps128(p);
                const __m128 h = _mm_add_ps(_mm_add_ps(lo, _mm256_extractf128_ps(p, 1)),
                                            _mm_movehl_ps(lo, lo));
                /* lane 0 of the total shifted into sum's lane 3 */
                sum = _mm_castsi128_ps(_mm_alignr_epi8(
                    _mm_castps_si128(_mm_add_ss(h, _mm_movehdup_ps(h))), _mm_castps_si128(sum), 4));
            }
            /* (sx0, sy0, sx1, sy1) and (sx2, sy2, sx3, sy3) */
            const __m128 s01 = _mm_hadd_ps(sw[0], sw[1]), s23 = _mm_hadd_ps(sw[2], sw[3]);
            const __m256d den = _mm256_mul_pd(_mm256_cvtps_pd(_mm_shuffle_ps(s01, s23, 0x88)),
                                              _mm256_cvtps_pd(_mm_shuffle_ps(s01, s23, 0xDD)));
            const __m128 ok = _mm_and_ps(_mm_cmp_ps(sum, _mm_set1_ps(FLT_MAX), _CMP_LE_OQ),
                                         _mm_cmp_ps(sum, _mm_set1_ps(-FLT_MAX), _CMP_GE_OQ));
            if (_mm_movemask_ps(ok) == 0xF) {
                /* finite: |sum| <= FLT_MAX and den >= 0.98 (each axis' weight sum lies
                 * within [0.994, 1] of L's, the table within 2^-20 of that) */
                const __m256d r = _mm256_div_pd(_mm256_cvtps_pd(sum), den);
                if (!d) {
                    _mm256_storeu_pd(out + m, r);
                } else {
                    _mm_storeu_ps(d + m, _mm256_cvtpd_ps(r));
                    fin += 4;
                    if (fp)
                        _mm_storeu_ps(fp + m, _mm_set1_ps(1.0f));
                }
                continue;
            }
        }
    point:
        RP_POINTS_TO(lanczos3_f32, m, m + 4)
    }
    RP_POINTS_TO(lanczos3_f32, m, n)
    return fin;
}

RP_AVX2_FMA static void sample_lanczos3_f32_fma(const rp_kernel *k, size_t n,
                                                const double *restrict x,
                                                const double *restrict y, double *restrict out)
{
    lanczos3_fma_run(k, n, x, y, out, NULL, NULL, NULL, NULL, 0);
}

/* The fused twin of sample_lanczos3_f32_fma (struct rp_kernel, ffn): the same groups
 * and arithmetic, each value narrowed to float32 as it is stored (a group's four by
 * vcvtpd2ps, the point function's by rp_put1), so the bits that store_row_f32
 * (engine/sky/reproject.c) makes of sample_lanczos3_f32_fma's row of doubles, without
 * that row and its second pass; a group's four values are finite (their sums are, and
 * each axis' weight sum is at least 0.99), so footprint 1.0f and four counted.  One
 * prefetch hint a group (RP_PREFETCH_FAST, kernels_impl.h) for its first position among
 * the pn positions (pfx, pfy), the pixel under the row RP_PREFETCH_ROWS ahead
 * (engine/sky/reproject.c): every source line is first read as the lowest row of a
 * support, a few output rows after the hint for the row 8 ahead brought it in.  On
 * 4096^2 float32 onto a grid rotated by 20 deg, coordinates included, 1 thread, AMD
 * EPYC Zen 4, 5 rounds alternated (bench/kernels lanczos3 coords, medians): 99.0 Mpix/s
 * through sample_lanczos3_f32_fma and store_row_f32, 100.5-100.8 fused without the hint,
 * 102.5-102.6 with it; two hints a group (positions m and m + 2: 101.2; the support's
 * first and last columns: 100.7) measured slower. */
RP_AVX2_FMA static long fused_lanczos3_f32_fma(const rp_kernel *k, size_t n,
                                               const double *restrict x,
                                               const double *restrict y, float *restrict d,
                                               float *restrict fp, const double *restrict pfx,
                                               const double *restrict pfy, size_t pn)
{
    return lanczos3_fma_run(k, n, x, y, NULL, d, fp, pfx, pfy, pn);
}
#endif
/* ---- bicubic, four positions at a time ----------------------------------------------- */

/* bspline3_weights for the fractions t of four lanes, the same arithmetic in each lane. */
#define RP_BSPLINE_WEIGHTS4(t, w)                                                         \
    do {                                                                                  \
        const rp_v4d s_ = 1.0 - (t);                                                      \
        (w)[1] = (t) * (t) * ((t) - 2.0) * 0.5 + BSPLINE3_TWO_THIRDS;                     \
        (w)[2] = s_ * s_ * (s_ - 2.0) * 0.5 + BSPLINE3_TWO_THIRDS;                        \
        (w)[0] = s_ * s_ * s_ * BSPLINE3_SIXTH;                                           \
        (w)[3] = 1.0 - (w)[0] - (w)[1] - (w)[2];                                          \
    } while (0)

/* After RP_GROUP in the bicubic samplers: good = 1 when the group's four 4x4 supports
 * need no mirroring and touch no flagged pixel, base[q] then lane q's support start in
 * the padded plane (padded (sx, sy) = (fx - 1, fy - 1)). */
#define RP_BICUBIC_SUPPORTS(good, base)                                                   \
    do {                                                                                  \
        const rp_v4i ok_ = (fx >= one) & (fx <= nx1) & (fy >= one) & (fy <= ny1);         \
        (good) = ok_[0] & ok_[1] & ok_[2] & ok_[3];                                       \
        for (int q_ = 0; q_ < 4 && (good); q_++) {                                        \
            const size_t o_ = (size_t)(fy[q_] - 1) * (size_t)W + (size_t)(fx[q_] - 1);   \
            (good) = !(bad && bad[o_ + (size_t)W + 1]);                                   \
            (base)[q_] = src + o_;                                                        \
        }                                                                                 \
    } while (0)

/* The group's horizontal and vertical weights (RP_BSPLINE_WEIGHTS4 of the fractions). */
#define RP_BICUBIC_GROUP_WEIGHTS(wx, wy)                                                  \
    do {                                                                                  \
        const rp_v4d tx_ = cx - __builtin_convertvector(fx, rp_v4d);                      \
        const rp_v4d ty_ = cy - __builtin_convertvector(fy, rp_v4d);                      \
        RP_BSPLINE_WEIGHTS4(tx_, wx);                                                     \
        RP_BSPLINE_WEIGHTS4(ty_, wy);                                                     \
    } while (0)

/* RP_BICUBIC_SUPPORTS, then, for a good group, RP_BICUBIC_GROUP_WEIGHTS: nonzero (the
 * group takes the vector path, base, wx and wy set) or 0 (the point function). */
#define RP_BICUBIC_GROUP_IN(base, wx, wy)                                                 \
    __extension__({                                                                       \
        int good_;                                                                        \
        RP_BICUBIC_SUPPORTS(good_, base);                                                 \
        if (good_)                                                                        \
            RP_BICUBIC_GROUP_WEIGHTS(wx, wy);                                             \
        good_;                                                                            \
    })

#ifdef RP_AVX2_SAMPLERS
/* Positions ahead of the current group whose four coefficient rows sample_bicubic_avx2
 * prefetches: the rows of a rotated target's support are a padded row (8 (nx + 2)
 * bytes, 4 (nx + 2) for float coefficients) apart, which the hardware's stream
 * prefetchers do not follow (Intel 64 and IA-32 Architectures Optimization Reference
 * Manual, "Software prefetch").  For float coefficients 16: bench/kernels bicubic coords,
 * 5 rounds alternated, medians 139.4, 137.8, 136.2 Mpix/s at 12, 16, 32 ahead, and
 * 122-126 at 64. */
#define RP_BICUBIC_AHEAD 32
#define RP_BICUBIC_AHEAD_F32 16

/* The bicubic samplers' prefetch: the four coefficient rows of the support of position
 * m + ahead, where that lies in the valid range (uses the sampler's x, y, n,
 * xmax, ymax, src, W and H).  A macro, as RP_PREFETCH_POINT (kernels_impl.h). */
#define RP_BICUBIC_PREFETCH(m, ahead)                                                     \
    do {                                                                                  \
        if ((m) + (ahead) < n) {                                                          \
            const double qx_ = x[(m) + (ahead)], qy_ = y[(m) + (ahead)];                  \
            if (qx_ >= -0.5 && qx_ <= xmax && qy_ >= -0.5 && qy_ <= ymax) {               \
                /* padded support start (fx - 1, fy - 1), fx, fy in [0, n] */             \
                const long sx_ = (long)(qx_ + 1.0) - 1, sy_ = (long)(qy_ + 1.0) - 1;      \
                const char *p_ = (const char *)(src + (sx_ < 0 ? 0 : sx_));               \
                const long rb_ = W * (long)sizeof *src;   /* bytes a padded row */        \
                for (long q_ = 0; q_ < 4; q_++)                                           \
                    _mm_prefetch(p_ + clampl(sy_ + q_, H) * rb_, _MM_HINT_T0);            \
            }                                                                             \
        }                                                                                 \
    } while (0)
#endif

/* The samplers of double coefficients (rp_kernel_new) and of float ones (rp_kernel_new_f32
 * of float32 planes): kernels_bicubic.inc. */
#define BC_T double
#define BC_SFX f64
#define BC_F32 0
#define BC_AHEAD RP_BICUBIC_AHEAD
#include "engine/sky/kernels_bicubic.inc"
#undef BC_AHEAD
#undef BC_F32
#undef BC_SFX
#undef BC_T
#define BC_T float
#define BC_SFX f32
#define BC_F32 1
#define BC_AHEAD RP_BICUBIC_AHEAD_F32
#include "engine/sky/kernels_bicubic.inc"
#undef BC_AHEAD
#undef BC_F32
#undef BC_SFX
#undef BC_T

/* ---- lanczos3 ----------------------------------------------------------------------- */

/* The Lanczos-3 tables, made once per process (lanczos3_tables, under pthread_once) and
 * shared read-only by every kernel, so that a cube's planes, each with its own kernel,
 * do not each hold (and compute) a copy.  lz_table: L(k / LZ_RES), k = 0 .. LZ_TABLEN - 1;
 * lz_taps, lz_tapsf, lz_tapsw: see struct rp_kernel, fields lzt, lzf and lzw. */
static double lz_table[LZ_TABLEN];
static _Alignas(64) double lz_taps[8 * (LZ_RES + 1)];
static _Alignas(32) float lz_tapsf[8 * (LZ_RES + 1)];
static _Alignas(64) float lz_tapsw[16 * LZ_RES];
static pthread_once_t lz_once = PTHREAD_ONCE_INIT;

/* Fills lz_table with the Lanczos-3 kernel L(u) = sinc(u) sinc(u / 3) for |u| < 3, 0
 * beyond, sinc(v) = sin(pi v) / (pi v) (Duchon, "Lanczos filtering in one and two
 * dimensions", J. Applied Meteorology 18, 1979; Turkowski, "Filters for common
 * resampling tasks", Graphics Gems, 1990), tabulated at u = k / LZ_RES (exactly 1 at 0
 * and 0 at the other integers), then lz_taps from it: every value copied, every
 * difference L(k + 1) - L(k) computed once here, as lanczos3_weights computes it,
 * lz_tapsf: the values rounded to float, the differences of those floats in float, and
 * lz_tapsw: lz_tapsf's fields in the order of sample_lanczos3_f32_fma (struct
 * rp_kernel, lzw), with the sums of each side's three (two float additions).
 * Cannot fail. */
static void lanczos3_tables(void)
{
    double *t = lz_table;
    t[0] = 1.0;
    for (long q = 1; q < LZ_TABLEN; q++) {
        double u = (double)q / LZ_RES;
        if (q % LZ_RES == 0 || u >= LZ_A) {
            t[q] = 0.0;
            continue;
        }
        double a = M_PI * u, b = a / LZ_A;
        t[q] = sin(a) * sin(b) / (a * b);
    }
    for (long q = 0; q <= LZ_RES; q++) {
        double *e = lz_taps + 8 * q;
        float *g = lz_tapsf + 8 * q;
        for (int o = 0; o < 3; o++) {
            const double *v = t + q + o * LZ_RES;   /* q + 2 LZ_RES + 1 < LZ_TABLEN */
            e[o] = v[0];
            e[4 + o] = v[1] - v[0];
            g[o] = (float)v[0];
            g[4 + o] = (float)v[1] - (float)v[0];
        }
        e[3] = e[7] = 0.0;
        g[3] = g[7] = 0.0f;
    }
    for (long q = 0; q < LZ_RES; q++) {
        const float *a = lz_tapsf + 8 * q, *b = lz_tapsf + 8 * (LZ_RES - 1 - q);
        float *w = lz_tapsw + 16 * q;
        for (int h = 0; h < 2; h++) {
            float *o = w + 8 * h;
            o[0] = a[4 * h + 2];
            o[1] = a[4 * h + 1];
            o[2] = a[4 * h];
            o[3] = b[4 * h];
            o[4] = b[4 * h + 1];
            o[5] = b[4 * h + 2];
            o[6] = (o[0] + o[1]) + o[2];
            o[7] = (o[3] + o[4]) + o[5];
        }
    }
}

/* ---- public API --------------------------------------------------------------------- */

/* See kernels.h.  Errors (NULL returned, `err` set): NULL or malformed plane (no data,
 * sizes < 1, unknown dtype, too large to pad), unknown method (RP_EXACT is not a point
 * kernel: see exact.h), out of memory. */
static rp_kernel *kernel_new(rp_method method, const rp_plane *src, int f32coef, char *err,
                             size_t errlen);

rp_kernel *rp_kernel_new(rp_method method, const rp_plane *src, char *err, size_t errlen)
{
    return kernel_new(method, src, 0, err, errlen);
}

/* See kernels.h.  Float coefficients for bicubic of float32 planes only. */
rp_kernel *rp_kernel_new_f32(rp_method method, const rp_plane *src, char *err, size_t errlen)
{
    return kernel_new(method, src, src && src->dtype == RP_F32 && method == RP_BICUBIC, err,
                      errlen);
}

/* k->coef and k->bad of a bicubic kernel: doubles, or floats where f32coef is set.
 * Returns 0 or -1 (out of memory). */
static int bicubic_prepare(rp_kernel *k, int f32coef)
{
    int rc;
    if (f32coef) {
        float *c = NULL;
        rc = rp_bspline_prepare_f32(&k->src, &c, &k->bad);
        k->coef = c;
    } else {
        double *c = NULL;
        rc = rp_bspline_prepare(&k->src, &c, &k->bad);
        k->coef = c;
    }
    return rc;
}

/* rp_kernel_new, with bicubic's coefficients in float where f32coef is set. */
static rp_kernel *kernel_new(rp_method method, const rp_plane *src, int f32coef, char *err,
                             size_t errlen)
{
    if (!src || !src->data || src->nx < 1 || src->ny < 1
        || (src->dtype != RP_F32 && src->dtype != RP_F64)) {
        tess_seterr(err, errlen, "kernel: missing or malformed plane");
        return NULL;
    }
    if (src->nx > INT_MAX || src->ny > INT_MAX
        || (size_t)(src->nx + 2) * (size_t)(src->ny + 2) > SIZE_MAX / 2 / sizeof(double)) {
        tess_seterr(err, errlen, "kernel: plane too large (%ldx%ld)", src->nx, src->ny);
        return NULL;
    }
    int f32 = src->dtype == RP_F32;
    sample_fn *fn;
    fused_fn *ffn = NULL;
    switch (method) {
    case RP_NEAREST:
        fn = f32 ? sample_nearest_f32 : sample_nearest_f64;
        break;
    case RP_BILINEAR:
        fn = f32 ? sample_bilinear_f32 : sample_bilinear_f64;
#ifdef RP_AVX2_SAMPLERS
        if (f32 && __builtin_cpu_supports("avx2"))
            fn = sample_bilinear_f32_avx2;
#endif
        break;
    case RP_BICUBIC:
        fn = f32coef ? sample_bicubic_f32 : sample_bicubic_f64;
#ifdef RP_AVX2_SAMPLERS
        if (__builtin_cpu_supports("avx2")) {
            fn = f32coef ? sample_bicubic_avx2_f32 : sample_bicubic_avx2_f64;
            ffn = f32coef ? fused_bicubic_avx2_f32 : NULL;
        }
        if (__builtin_cpu_supports("avx512f") && src->nx <= INT32_MAX - 2) {
            fn = f32coef ? sample_bicubic_avx512_f32 : sample_bicubic_avx512_f64;
            ffn = f32coef ? fused_bicubic_avx512_f32 : NULL;
        }
#endif
        break;
    case RP_LANCZOS3:
        fn = f32 ? sample_lanczos3_f32 : sample_lanczos3_f64;
#ifdef RP_AVX2_SAMPLERS
        if (f32 && __builtin_cpu_supports("avx2"))
        {
            fn = __builtin_cpu_supports("fma") ? sample_lanczos3_f32_fma
                                               : sample_lanczos3_f32_avx2;
            ffn = fn == sample_lanczos3_f32_fma ? fused_lanczos3_f32_fma : NULL;
        }
#endif
        break;
    default:
        tess_seterr(err, errlen, "kernel: method %d is not an interpolation kernel", (int)method);
        return NULL;
    }
    rp_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        tess_seterr(err, errlen, "kernel: out of memory");
        return NULL;
    }
    k->method = method;
    k->src = *src;
    k->fn = fn;
    k->ffn = ffn;
    int rc = 0;
    if (method == RP_BICUBIC)
        rc = bicubic_prepare(k, f32coef);
    else if (method == RP_LANCZOS3) {
        rc = pthread_once(&lz_once, lanczos3_tables) == 0 ? 0 : -1;
        k->lz = lz_table;
        k->lzt = lz_taps;
        k->lzf = lz_tapsf;
        k->lzw = lz_tapsw;
    }
    if (rc != 0) {
        tess_seterr(err, errlen, "kernel: out of memory (%ldx%ld plane)", src->nx, src->ny);
        rp_kernel_free(k);
        return NULL;
    }
    return k;
}

void rp_kernel_free(rp_kernel *k)
{
    if (!k)
        return;
    free(k->coef);
    free(k->bad);
    free(k);
}

/* See kernels.h.  The pixel under each position, rounded and clamped into the plane
 * (NaN and far-off positions clamp to an edge: a harmless address); nearest and bilinear
 * only (bilinear's other taps share the line or lie one source row below, which the
 * next rows' hints bring in).  Software prefetching of a row of positions a few rows
 * ahead is the classic remedy for gathers the hardware prefetchers cannot follow
 * (Intel 64 and IA-32 Architectures Optimization Reference Manual, "Software
 * prefetch"): the rows of a rotated source are 4 KiB pages apart, which stream
 * prefetchers do not cross. */
void rp_kernel_prefetch(const rp_kernel *k, size_t n, const double *x, const double *y,
                        size_t step)
{
    if (k->method != RP_NEAREST && k->method != RP_BILINEAR)
        return;
    const char *base = k->src.data;
    const size_t es = k->src.dtype == RP_F32 ? sizeof(float) : sizeof(double);
    const long nx = k->src.nx;
    const double xm = (double)nx - 1.0, ym = (double)k->src.ny - 1.0;
    step = step < 1 ? 1 : step;
    for (size_t q = 0; q < n; q += step)
        RP_PREFETCH_POINT(base, es, nx, xm, ym, x[q], y[q]);
}

/* See kernels.h. */
int rp_kernel_fma(const rp_kernel *k)
{
#ifdef RP_AVX2_SAMPLERS
    return k->fn == sample_lanczos3_f32_fma;
#else
    (void)k;
    return 0;
#endif
}

void rp_kernel_sample(const rp_kernel *k, size_t n, const double *x, const double *y,
                      double *out)
{
    k->fn(k, n, x, y, out);
}
