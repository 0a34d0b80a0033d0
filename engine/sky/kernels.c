/* Interpolation kernels: nearest, bilinear, bicubic B-spline and Lanczos-3 sampling of a plane. */
#include "engine/sky/kernels.h"
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
#include <sys/mman.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- constants ---------------------------------------------------------------------- */

/* The pole of the cubic B-spline prefilter, z = sqrt(3) - 2 (Unser, "Splines: a perfect
 * fit for signal and image processing", IEEE Signal Processing Magazine 16(6), 1999,
 * Box 2; scipy ni_splines.c get_filter_poles). */
#define BSPLINE_Z (-0.267949192431122706472553658494127633)

/* Terms of the causal initial sum beyond which |z|^k < 1e-18 (|z|^32 = 5.3e-19):
 * longer lines truncate the sum there (Thevenaz, Blu & Unser, "Interpolation
 * revisited", IEEE Trans. Medical Imaging 19(7), 2000, InitialCausalCoefficient), which
 * also keeps z^k clear of denormals. */
#define BSPLINE_HORIZON 32

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

/* ---- the kernel object -------------------------------------------------------------- */

typedef void sample_fn(const rp_kernel *k, size_t n, const double *restrict x,
                       const double *restrict y, double *restrict out);

struct rp_kernel {
    rp_method method;
    rp_plane src;          /* the caller's plane (its pixels are not copied) */
    sample_fn *fn;         /* the sampler for method and dtype */
    double *coef;          /* bicubic: B-spline coefficients, (nx + 2) x (ny + 2) */
    unsigned char *bad;    /* bicubic: 1 where the 4x4 support starting at padded
                              (sx, sy) touches a non-finite pixel, at (sy + 1) * (nx + 2)
                              + sx + 1; NULL when every pixel is finite */
    const double *lz;      /* lanczos3: L(k / LZ_RES), k = 0 .. LZ_TABLEN - 1 (shared) */
    const double *lzp;     /* lanczos3 (shared): for k = 0 .. LZ_RES, at lzp + 8 k (64-byte
                              aligned), L(k'), L(k' + 1) - L(k') for k' = k, k + LZ_RES,
                              k + 2 LZ_RES (in table units; lz values), then two zeros */
};

/* ---- shared pieces of the samplers -------------------------------------------------- */

/* Cubic B-spline weights of the four coefficients at padded positions floor(c) - 1 ..
 * floor(c) + 2 for t = c - floor(c) in [0, 1): beta3(t + 1), beta3(t), beta3(1 - t),
 * beta3(2 - t), with beta3(u) = 2/3 - u^2 + |u|^3 / 2 for |u| < 1 and (2 - |u|)^3 / 6
 * for 1 <= |u| < 2 (Unser 1999, eq. (3)); written as scipy's
 * get_spline_interpolation_weights (ni_splines.c) does, the last weight being 1 minus
 * the others.  Cannot fail. */
static inline void bspline3_weights(double t, double w[4])
{
    double s = 1.0 - t;
    w[1] = (t * t * (t - 2.0) * 3.0 + 4.0) / 6.0;
    w[2] = (s * s * (s - 2.0) * 3.0 + 4.0) / 6.0;
    w[0] = s * s * s / 6.0;
    w[3] = 1.0 - w[0] - w[1] - w[2];
}

/* Index p of a padded axis of length len (>= 3) mirrored into [0, len - 1] for p within
 * one of the ends (scipy's mirror rule: -1 -> 1, len -> len - 2).  Cannot fail. */
static inline long mirror1(long p, long len)
{
    return p < 0 ? -p : p >= len ? 2 * len - 2 - p : p;
}

/* Lanczos-3 weights of input pixels floor(c) - 3 .. floor(c) + 2 (0-based) for padded
 * coordinate c with t = c - floor(c) in [0, 1): L(t + 2), L(t + 1), L(t), L(1 - t),
 * L(2 - t), L(3 - t), each interpolated linearly in the table `tab`.  Returns their sum.
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
    return w[0] + w[1] + w[2] + w[3] + w[4] + w[5];
}

/* Clamps i into [0, n - 1].  Cannot fail. */
static inline long clampl(long i, long n)
{
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* ---- points of the samplers that read the plane in place, one per pixel type ------- */

/* Every sampler first rejects positions outside [-0.5, n - 0.5] (NaN included; the loop
 * is RP_POINTS, below), then its point function works in the coordinates c = x + 1 of the array padded by one edge pixel, where
 * c >= 0.5, so that (long)c == floor(c) and padded index p is image index p - 1
 * (clamped: the padding repeats the edge pixels).
 *
 * nearest:  pixel floor(c + 0.5) of the padded array (scipy order 0, ni_interpolation.c);
 * bilinear: scipy order 1: w0 = 1 - (c - floor c), w1 = 1 - w0 on each axis, the four
 *           products value * wy * wx summed in C order, so that results match
 *           engine/sky/reproject.c sample() and astropy reproject bit for bit (as long as
 *           the compiler does not contract a * b + c into FMAs: GCC does not in ISO C
 *           mode, -std=c11, which the build uses); NaN pixels propagate through any
 *           weight, zero included;
 * lanczos3: sum of L(x - i) L(y - j) v(i, j) over the finite pixels of the 6x6 support
 *           (image pixels floor(c) - 3 .. floor(c) + 2, clamped to the image: edge
 *           extension), divided by the sum of the same weights (NaN below
 *           LZ_MIN_WEIGHT); with all 36 finite, computed as the plain sum divided by
 *           (sum wx)(sum wy), which in the interior is SWarp's LANCZOS3 (interpolate.c
 *           make_kernel: the 6 weights of each axis scaled to unit sum). */
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
    }                                                                                     \
                                                                                          \
    static inline double lanczos3_##SFX(const rp_kernel *k, const T *restrict src, long nx, \
                                        long ny, double px, double py)                   \
    {                                                                                     \
        const double *tab = k->lz;                                                        \
        const double cx = px + 1.0, cy = py + 1.0;                                        \
        const long fx = (long)cx, fy = (long)cy;                                          \
        double wx[6], wy[6];                                                              \
        const double sx = lanczos3_weights(tab, cx - (double)fx, wx);                     \
        const double sy = lanczos3_weights(tab, cy - (double)fy, wy);                     \
        /* Support in the image: plain sum first, the NaN-aware one only when that is    \
         * not finite (a non-finite pixel, whatever its weight, makes it so). */         \
        const long i0 = fx - 3, j0 = fy - 3;                                              \
        long ix[6];                                                                       \
        const T *row[6];                                                                  \
        const int xin = i0 >= 0 && i0 + 5 < nx;   /* no clamping along x */              \
        for (int q = 0; q < 6; q++)                                                       \
            ix[q] = clampl(i0 + q, nx);                                                   \
        if (j0 >= 0 && j0 + 5 < ny) {                                                     \
            for (int q = 0; q < 6; q++)                                                   \
                row[q] = src + (j0 + q) * nx;                                             \
        } else {                                                                          \
            for (int q = 0; q < 6; q++)                                                   \
                row[q] = src + clampl(j0 + q, ny) * nx;                                   \
        }                                                                                 \
        double sum = 0.0;                                                                 \
        if (xin) {                                                                        \
            for (int jj = 0; jj < 6; jj++) {                                              \
                const T *r = row[jj] + i0;                                                \
                sum += wy[jj] * ((wx[0] * (double)r[0] + wx[1] * (double)r[1])            \
                                 + (wx[2] * (double)r[2] + wx[3] * (double)r[3])          \
                                 + (wx[4] * (double)r[4] + wx[5] * (double)r[5]));        \
            }                                                                             \
        } else {                                                                          \
            for (int jj = 0; jj < 6; jj++) {                                              \
                const T *r = row[jj];                                                     \
                sum += wy[jj] * ((wx[0] * (double)r[ix[0]] + wx[1] * (double)r[ix[1]])    \
                                 + (wx[2] * (double)r[ix[2]] + wx[3] * (double)r[ix[3]])  \
                                 + (wx[4] * (double)r[ix[4]] + wx[5] * (double)r[ix[5]])); \
            }                                                                             \
        }                                                                                 \
        if (fabs(sum) <= DBL_MAX)                                                         \
            return sum / (sx * sy);                                                       \
        double wsum = 0.0;                                                                \
        sum = 0.0;                                                                        \
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
        return wsum >= LZ_MIN_WEIGHT * (sx * sy) ? sum / wsum : NAN;                      \
    }

RP_DEFINE_POINTS(float, f32)
RP_DEFINE_POINTS(double, f64)

/* ---- bicubic ------------------------------------------------------------------------ */

/* bicubic: scipy order 3 on the padded array: the cubic B-spline of coefficients c,
 * sum over the 4x4 coefficients at padded floor(c) - 1 .. floor(c) + 2 (mirrored at the
 * ends, scipy's rule) of c * wy * wx (bspline3_weights); NaN where the support touches a
 * non-finite input pixel (k->bad).  Reads only k->coef, so it serves both pixel types. */
static inline double bicubic_point(const rp_kernel *k, const double *restrict c, long nx,
                                   long ny, double px, double py)
{
    const unsigned char *bad = k->bad;
    const long W = nx + 2, H = ny + 2;
    const double cx = px + 1.0, cy = py + 1.0;
    const long fx = (long)cx, fy = (long)cy;
    const long sx = fx - 1, sy = fy - 1;   /* in [-1, nx] and [-1, ny] */
    if (bad && bad[(sy + 1) * W + sx + 1])
        return NAN;
    double wx[4], wy[4];
    bspline3_weights(cx - (double)fx, wx);
    bspline3_weights(cy - (double)fy, wy);
    long ix[4];
    const double *row[4];
    if (sx >= 0 && sx + 3 < W) {
        for (int q = 0; q < 4; q++)
            ix[q] = sx + q;
    } else {
        for (int q = 0; q < 4; q++)
            ix[q] = mirror1(sx + q, W);
    }
    if (sy >= 0 && sy + 3 < H) {
        for (int q = 0; q < 4; q++)
            row[q] = c + (sy + q) * W;
    } else {
        for (int q = 0; q < 4; q++)
            row[q] = c + mirror1(sy + q, H) * W;
    }
    double t = 0.0;
    for (int q = 0; q < 4; q++) {
        const double *r = row[q];
        t += wy[q] * (wx[0] * r[ix[0]] + wx[1] * r[ix[1]] + wx[2] * r[ix[2]]
                      + wx[3] * r[ix[3]]);
    }
    return t;
}

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

/* What every sampler reads: src (the array SRC of element type T), nx, ny and the ends
 * xmax, ymax of the valid range. */
#define RP_SAMPLER_VARS(T, SRC)                                                           \
    const T *restrict src = (const T *)(SRC);                                             \
    const long nx = k->src.nx, ny = k->src.ny;                                            \
    const double xmax = (double)nx - 0.5, ymax = (double)ny - 0.5

/* In a sampler's loop over groups of four (m), loads positions m .. m + 3 into px, py and
 * their padded coordinates c = x + 1 into cx, cy, truncated into fx, fy; a group with a
 * position outside the valid range (or NaN) is sampled by POINT one position at a time
 * and the loop goes on.  Truncating to int32 is exact in range: c <= n + 0.5 and
 * n <= INT_MAX (rp_kernel_new). */
#define RP_GROUP(POINT)                                                                   \
    rp_v4d px, py;                                                                        \
    RP_V4D_LOAD(px, x + m);                                                               \
    RP_V4D_LOAD(py, y + m);                                                               \
    const rp_v4q in_ = (px >= -0.5) & (px <= xmax) & (py >= -0.5) & (py <= ymax);         \
    if (!(in_[0] & in_[1] & in_[2] & in_[3])) {                                           \
        RP_POINTS(POINT, m, m + 4)                                                        \
        continue;                                                                         \
    }                                                                                     \
    const rp_v4d cx = px + 1.0, cy = py + 1.0;                                            \
    const rp_v4i fx = __builtin_convertvector(cx, rp_v4i);                                \
    const rp_v4i fy = __builtin_convertvector(cy, rp_v4i)

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
#if defined(__GNUC__) && defined(__x86_64__)
#define RP_AVX2_SAMPLERS 1
#define RP_AVX2 __attribute__((target("avx2")))

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
 * vector-extension sampler at 94-107 (AMD EPYC Zen 4). */
static inline __attribute__((target("avx2"), always_inline)) __m256
rp_avx2_pairs(const float *src, __m256i idx)
{
    const __m128i il = _mm256_castsi256_si128(idx), ih = _mm256_extracti128_si256(idx, 1);
    int64_t a, b, c, d;
    memcpy(&a, src + _mm_cvtsi128_si64(il), 8);
    memcpy(&b, src + _mm_extract_epi64(il, 1), 8);
    memcpy(&c, src + _mm_cvtsi128_si64(ih), 8);
    memcpy(&d, src + _mm_extract_epi64(ih, 1), 8);
    return _mm256_castsi256_ps(_mm256_setr_epi64x(a, b, c, d));
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
#endif
/* ---- lanczos3, four positions at a time ---------------------------------------------- */

/* Lanes (i0, i1, i2, i3) of the eight lanes of a then b (0-3 a, 4-7 b), as an rp_v4d. */
#if defined(__clang__)
#define RP_V4D_SHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector((a), (b), i0, i1, i2, i3)
#else
#define RP_V4D_SHUF(a, b, i0, i1, i2, i3) __builtin_shuffle((a), (b), (rp_v4q){ i0, i1, i2, i3 })
#endif

/* The six fields L(k), D(k), L(k + R), D(k + R), L(k + 2R), D(k + 2R) of the entries
 * k = idx[0 .. 3] of the paired table lzp (R = LZ_RES, D(k) = L(k + 1) - L(k)) as six
 * rp_v4d f[0..5], lane q of f[i] being field i of entry idx[q]: per lane two aligned
 * 32-byte loads (the entry is one cache line), then a 4x4 and a 4x2 transpose. */
#define RP_LZ_FIELDS4(lzp, idx, f)                                                        \
    do {                                                                                  \
        rp_v4d a0_, a1_, a2_, a3_, b0_, b1_, b2_, b3_;                                    \
        const double *e0_ = (lzp) + 8 * (size_t)(idx)[0], *e1_ = (lzp) + 8 * (size_t)(idx)[1]; \
        const double *e2_ = (lzp) + 8 * (size_t)(idx)[2], *e3_ = (lzp) + 8 * (size_t)(idx)[3]; \
        RP_V4D_LOAD(a0_, e0_);                                                            \
        RP_V4D_LOAD(a1_, e1_);                                                            \
        RP_V4D_LOAD(a2_, e2_);                                                            \
        RP_V4D_LOAD(a3_, e3_);                                                            \
        RP_V4D_LOAD(b0_, e0_ + 4);                                                        \
        RP_V4D_LOAD(b1_, e1_ + 4);                                                        \
        RP_V4D_LOAD(b2_, e2_ + 4);                                                        \
        RP_V4D_LOAD(b3_, e3_ + 4);                                                        \
        const rp_v4d p01_ = RP_V4D_SHUF(a0_, a1_, 0, 4, 2, 6);                            \
        const rp_v4d q01_ = RP_V4D_SHUF(a0_, a1_, 1, 5, 3, 7);                            \
        const rp_v4d p23_ = RP_V4D_SHUF(a2_, a3_, 0, 4, 2, 6);                            \
        const rp_v4d q23_ = RP_V4D_SHUF(a2_, a3_, 1, 5, 3, 7);                            \
        const rp_v4d s01_ = RP_V4D_SHUF(b0_, b1_, 0, 4, 1, 5);                            \
        const rp_v4d s23_ = RP_V4D_SHUF(b2_, b3_, 0, 4, 1, 5);                            \
        (f)[0] = RP_V4D_SHUF(p01_, p23_, 0, 1, 4, 5);                                     \
        (f)[1] = RP_V4D_SHUF(q01_, q23_, 0, 1, 4, 5);                                     \
        (f)[2] = RP_V4D_SHUF(p01_, p23_, 2, 3, 6, 7);                                     \
        (f)[3] = RP_V4D_SHUF(q01_, q23_, 2, 3, 6, 7);                                     \
        (f)[4] = RP_V4D_SHUF(s01_, s23_, 0, 1, 4, 5);                                     \
        (f)[5] = RP_V4D_SHUF(s01_, s23_, 2, 3, 6, 7);                                     \
    } while (0)

/* lanczos3_weights for the fractions t of four lanes: the same table values and the same
 * arithmetic in each lane (u = t * LZ_RES, v = LZ_RES - u, truncated to int32: u and v
 * are within [0, LZ_RES]; a[1] - a[0] read from the paired table, where it was computed
 * by the same subtraction), so bit for bit the same weights.  Writes w[0..5]; s receives
 * the sums, added left to right as lanczos3_weights adds them. */
#define RP_LZ_WEIGHTS4(lzp, t, w, s)                                                      \
    do {                                                                                  \
        const rp_v4d u_ = (t) * (double)LZ_RES, v_ = (double)LZ_RES - u_;                 \
        const rp_v4i iu_ = __builtin_convertvector(u_, rp_v4i);                           \
        const rp_v4i iv_ = __builtin_convertvector(v_, rp_v4i);                           \
        const rp_v4d fu_ = u_ - __builtin_convertvector(iu_, rp_v4d);                     \
        const rp_v4d fv_ = v_ - __builtin_convertvector(iv_, rp_v4d);                     \
        rp_v4d fa_[6], fb_[6];                                                            \
        RP_LZ_FIELDS4(lzp, iu_, fa_);                                                     \
        RP_LZ_FIELDS4(lzp, iv_, fb_);                                                     \
        (w)[0] = fa_[4] + fu_ * fa_[5];                                                   \
        (w)[1] = fa_[2] + fu_ * fa_[3];                                                   \
        (w)[2] = fa_[0] + fu_ * fa_[1];                                                   \
        (w)[3] = fb_[0] + fv_ * fb_[1];                                                   \
        (w)[4] = fb_[2] + fv_ * fb_[3];                                                   \
        (w)[5] = fb_[4] + fv_ * fb_[5];                                                   \
        (s) = (w)[0] + (w)[1] + (w)[2] + (w)[3] + (w)[4] + (w)[5];                        \
    } while (0)

/* Four float lanes, and lanes (i0, i1, i2, i3) of the eight lanes of a then b (0-3 a,
 * 4-7 b) as such a vector. */
typedef float rp_v4f __attribute__((vector_size(16)));
#if defined(__clang__)
#define RP_V4F_SHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector((a), (b), i0, i1, i2, i3)
#else
#define RP_V4F_SHUF(a, b, i0, i1, i2, i3) __builtin_shuffle((a), (b), (rp_v4i){ i0, i1, i2, i3 })
#endif

/* The six float pixels at r0 .. r3 (one row of the supports of four lanes, const void
 * pointers to floats) as six rp_v4d v[0..5], v[i] holding pixel i of each lane: per lane
 * two overlapping 16-byte loads (pixels 0-3 and 2-5), then a 4x4 and a 4x2 transpose in
 * float lanes, then the widening (exact) to double.  The same values as four scalar loads per v[i]. */
#define RP_LZ_ROW_F32(r0, r1, r2, r3, v)                                                  \
    do {                                                                                  \
        rp_v4f q0_, q1_, q2_, q3_, h0_, h1_, h2_, h3_;                                    \
        memcpy(&q0_, (r0), 16);                                                           \
        memcpy(&q1_, (r1), 16);                                                           \
        memcpy(&q2_, (r2), 16);                                                           \
        memcpy(&q3_, (r3), 16);                                                           \
        memcpy(&h0_, (const char *)(r0) + 8, 16);                                         \
        memcpy(&h1_, (const char *)(r1) + 8, 16);                                         \
        memcpy(&h2_, (const char *)(r2) + 8, 16);                                         \
        memcpy(&h3_, (const char *)(r3) + 8, 16);                                         \
        const rp_v4f t0_ = RP_V4F_SHUF(q0_, q1_, 0, 4, 1, 5);                             \
        const rp_v4f t1_ = RP_V4F_SHUF(q0_, q1_, 2, 6, 3, 7);                             \
        const rp_v4f t2_ = RP_V4F_SHUF(q2_, q3_, 0, 4, 1, 5);                             \
        const rp_v4f t3_ = RP_V4F_SHUF(q2_, q3_, 2, 6, 3, 7);                             \
        const rp_v4f u0_ = RP_V4F_SHUF(h0_, h1_, 2, 6, 3, 7);                             \
        const rp_v4f u1_ = RP_V4F_SHUF(h2_, h3_, 2, 6, 3, 7);                             \
        (v)[0] = __builtin_convertvector(RP_V4F_SHUF(t0_, t2_, 0, 1, 4, 5), rp_v4d);      \
        (v)[1] = __builtin_convertvector(RP_V4F_SHUF(t0_, t2_, 2, 3, 6, 7), rp_v4d);      \
        (v)[2] = __builtin_convertvector(RP_V4F_SHUF(t1_, t3_, 0, 1, 4, 5), rp_v4d);      \
        (v)[3] = __builtin_convertvector(RP_V4F_SHUF(t1_, t3_, 2, 3, 6, 7), rp_v4d);      \
        (v)[4] = __builtin_convertvector(RP_V4F_SHUF(u0_, u1_, 0, 1, 4, 5), rp_v4d);      \
        (v)[5] = __builtin_convertvector(RP_V4F_SHUF(u0_, u1_, 2, 3, 6, 7), rp_v4d);      \
    } while (0)

/* The same definition as lanczos3_SFX, four positions at a time: groups whose four 6x6
 * supports lie inside the image (no clamping) and whose plain sums are finite are
 * computed in vector lanes, each lane with the scalar arithmetic in the scalar order
 * (bit-identical); any other lane takes the point function. */
#define RP_LANCZOS4(T, SFX)                                                               \
    RP_HOT static void sample_lanczos3_##SFX(const rp_kernel *k, size_t n,                \
                                             const double *restrict x,                    \
                                             const double *restrict y, double *restrict out) \
    {                                                                                     \
        RP_SAMPLER_VARS(T, k->src.data);                                                  \
        const double *lzp = k->lzp;                                                       \
        /* Interior: the support floor(c) - 3 .. floor(c) + 2 within the image on both    \
         * axes, 3 <= floor(c) <= n - 3. */                                               \
        const rp_v4i three = RP_V4I_SPLAT(3);                                             \
        const rp_v4i nx3 = RP_V4I_SPLAT((int32_t)nx - 3);                                 \
        const rp_v4i ny3 = RP_V4I_SPLAT((int32_t)ny - 3);                                 \
        size_t m = 0;                                                                     \
        for (; m + 4 <= n; m += 4) {                                                      \
            RP_GROUP(lanczos3_##SFX);                                                     \
            {                                                                             \
                const rp_v4i ok = (fx >= three) & (fx <= nx3) & (fy >= three) & (fy <= ny3); \
                if (!(ok[0] & ok[1] & ok[2] & ok[3]))                                     \
                    goto point_##SFX;                                                     \
                rp_v4d wx[6], wy[6], sx, sy;                                              \
                RP_LZ_WEIGHTS4(lzp, cx - __builtin_convertvector(fx, rp_v4d), wx, sx);    \
                RP_LZ_WEIGHTS4(lzp, cy - __builtin_convertvector(fy, rp_v4d), wy, sy);    \
                const T *base[4];                                                         \
                for (int q = 0; q < 4; q++)                                               \
                    base[q] = src + (size_t)(fy[q] - 3) * (size_t)nx + (size_t)(fx[q] - 3); \
                rp_v4d sum = { 0.0, 0.0, 0.0, 0.0 };                                      \
                for (int jj = 0; jj < 6; jj++) {                                          \
                    const size_t o = (size_t)jj * (size_t)nx;                             \
                    const T *r0 = base[0] + o, *r1 = base[1] + o, *r2 = base[2] + o,      \
                            *r3 = base[3] + o;                                            \
                    rp_v4d v[6], acc;                                                     \
                    if (sizeof(T) == sizeof(float))                                       \
                        RP_LZ_ROW_F32(r0, r1, r2, r3, v);                                 \
                    else                                                                  \
                        for (int ii = 0; ii < 6; ii++)                                    \
                            v[ii] = (rp_v4d){ (double)r0[ii], (double)r1[ii],             \
                                              (double)r2[ii], (double)r3[ii] };           \
                    acc = ((wx[0] * v[0] + wx[1] * v[1]) + (wx[2] * v[2] + wx[3] * v[3])) \
                          + (wx[4] * v[4] + wx[5] * v[5]);                                \
                    sum += wy[jj] * acc;                                                  \
                }                                                                         \
                const rp_v4d r = sum / (sx * sy);                                         \
                const rp_v4q fin = (sum <= DBL_MAX) & (sum >= -DBL_MAX);                  \
                if (fin[0] & fin[1] & fin[2] & fin[3]) {                                  \
                    RP_V4D_STORE(out + m, r);                                             \
                    continue;                                                             \
                }                                                                         \
            }                                                                             \
        point_##SFX:                                                                      \
            RP_POINTS(lanczos3_##SFX, m, m + 4)                                           \
        }                                                                                 \
        RP_POINTS(lanczos3_##SFX, m, n)                                                   \
    }

RP_LANCZOS4(float, f32)
RP_LANCZOS4(double, f64)
/* ---- bicubic, four positions at a time ----------------------------------------------- */

/* bspline3_weights for the fractions t of four lanes, the same arithmetic in each lane. */
#define RP_BSPLINE_WEIGHTS4(t, w)                                                         \
    do {                                                                                  \
        const rp_v4d s_ = 1.0 - (t);                                                      \
        (w)[1] = ((t) * (t) * ((t) - 2.0) * 3.0 + 4.0) / 6.0;                             \
        (w)[2] = (s_ * s_ * (s_ - 2.0) * 3.0 + 4.0) / 6.0;                                \
        (w)[0] = s_ * s_ * s_ / 6.0;                                                      \
        (w)[3] = 1.0 - (w)[0] - (w)[1] - (w)[2];                                          \
    } while (0)

/* The same definition as bicubic_point, four positions at a time: groups whose four 4x4
 * supports need no mirroring and touch no flagged pixel are computed in vector lanes,
 * each lane with the scalar arithmetic in the scalar order (bit-identical); any other
 * lane takes bicubic_point.  The support starts at padded sx = floor(c) - 1, c = x + 1:
 * no mirroring for 1 <= floor(c) <= n - 1. */
RP_HOT static void sample_bicubic(const rp_kernel *k, size_t n, const double *restrict x,
                                  const double *restrict y, double *restrict out)
{
    RP_SAMPLER_VARS(double, k->coef);
    const unsigned char *bad = k->bad;
    const long W = nx + 2;
    const rp_v4i one = RP_V4I_SPLAT(1);
    const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1), ny1 = RP_V4I_SPLAT((int32_t)ny - 1);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        RP_GROUP(bicubic_point);
        {
            const rp_v4i ok = (fx >= one) & (fx <= nx1) & (fy >= one) & (fy <= ny1);
            const double *base[4];
            int good = ok[0] & ok[1] & ok[2] & ok[3];
            for (int q = 0; q < 4 && good; q++) {
                /* padded (sx, sy) = (fx - 1, fy - 1) */
                const size_t o = (size_t)(fy[q] - 1) * (size_t)W + (size_t)(fx[q] - 1);
                good = !(bad && bad[o + (size_t)W + 1]);
                base[q] = src + o;
            }
            if (good) {
                rp_v4d wx[4], wy[4];
                const rp_v4d tx = cx - __builtin_convertvector(fx, rp_v4d);
                const rp_v4d ty = cy - __builtin_convertvector(fy, rp_v4d);
                RP_BSPLINE_WEIGHTS4(tx, wx);
                RP_BSPLINE_WEIGHTS4(ty, wy);
                rp_v4d t = { 0.0, 0.0, 0.0, 0.0 };
                for (int jj = 0; jj < 4; jj++) {
                    const size_t o = (size_t)jj * (size_t)W;
                    const double *r0 = base[0] + o, *r1 = base[1] + o, *r2 = base[2] + o,
                                 *r3 = base[3] + o;
                    const rp_v4d v0 = { r0[0], r1[0], r2[0], r3[0] };
                    const rp_v4d v1 = { r0[1], r1[1], r2[1], r3[1] };
                    const rp_v4d v2 = { r0[2], r1[2], r2[2], r3[2] };
                    const rp_v4d v3 = { r0[3], r1[3], r2[3], r3[3] };
                    t += wy[jj] * (wx[0] * v0 + wx[1] * v1 + wx[2] * v2 + wx[3] * v3);
                }
                RP_V4D_STORE(out + m, t);
                continue;
            }
        }
        RP_POINTS(bicubic_point, m, m + 4)
    }
    RP_POINTS(bicubic_point, m, n)
}


#ifdef RP_AVX2_SAMPLERS
/* Positions ahead of the current group whose four coefficient rows sample_bicubic_avx2
 * prefetches: the rows of a rotated target's support are a padded row (8 (nx + 2)
 * bytes) apart, which the hardware's stream prefetchers do not follow (Intel 64 and
 * IA-32 Architectures Optimization Reference Manual, "Software prefetch"). */
#define RP_BICUBIC_AHEAD 32

/* sample_bicubic again for CPUs with AVX2 (rp_kernel_new checks at run time): the same
 * groups, weights and lane arithmetic in the same order (bit for bit the same values),
 * but each row of a lane's 4x4 support comes in one 32-byte load and the four lanes' rows
 * are transposed into tap vectors by two unpacks and two lane permutations, 16 loads and
 * 32 shuffles a group instead of 64 scalar loads and their inserts; and the four rows
 * of the support RP_BICUBIC_AHEAD positions ahead are prefetched.  The prefetch is what
 * makes the wide loads pay: without it this sampler ran at 100-103 Mpix/s against the
 * scalar loads' 138-140, with it at 143-150 (2048^2 rotated by 20 deg, kernel only,
 * AMD EPYC, 1 thread); a distance of 8 to 96 positions, or a second line per row,
 * measured the same. */
RP_AVX2 static void sample_bicubic_avx2(const rp_kernel *k, size_t n,
                                        const double *restrict x, const double *restrict y,
                                        double *restrict out)
{
    RP_SAMPLER_VARS(double, k->coef);
    const unsigned char *bad = k->bad;
    const long W = nx + 2, H = ny + 2;
    const rp_v4i one = RP_V4I_SPLAT(1);
    const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1), ny1 = RP_V4I_SPLAT((int32_t)ny - 1);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        if (m + RP_BICUBIC_AHEAD < n) {
            const double qx = x[m + RP_BICUBIC_AHEAD], qy = y[m + RP_BICUBIC_AHEAD];
            if (qx >= -0.5 && qx <= xmax && qy >= -0.5 && qy <= ymax) {
                /* padded support start (fx - 1, fy - 1), fx, fy in [0, n] */
                const long sx = (long)(qx + 1.0) - 1, sy = (long)(qy + 1.0) - 1;
                const double *p = src + (sx < 0 ? 0 : sx);
                for (long q = 0; q < 4; q++)
                    _mm_prefetch((const char *)(p + clampl(sy + q, H) * W), _MM_HINT_T0);
            }
        }
        RP_GROUP(bicubic_point);
        {
            const rp_v4i ok = (fx >= one) & (fx <= nx1) & (fy >= one) & (fy <= ny1);
            const double *base[4];
            int good = ok[0] & ok[1] & ok[2] & ok[3];
            for (int q = 0; q < 4 && good; q++) {
                const size_t o = (size_t)(fy[q] - 1) * (size_t)W + (size_t)(fx[q] - 1);
                good = !(bad && bad[o + (size_t)W + 1]);
                base[q] = src + o;
            }
            if (good) {
                rp_v4d wx[4], wy[4];
                const rp_v4d tx = cx - __builtin_convertvector(fx, rp_v4d);
                const rp_v4d ty = cy - __builtin_convertvector(fy, rp_v4d);
                RP_BSPLINE_WEIGHTS4(tx, wx);
                RP_BSPLINE_WEIGHTS4(ty, wy);
                rp_v4d t = { 0.0, 0.0, 0.0, 0.0 };
                for (int jj = 0; jj < 4; jj++) {
                    const size_t o = (size_t)jj * (size_t)W;
                    const __m256d a = _mm256_loadu_pd(base[0] + o);
                    const __m256d b = _mm256_loadu_pd(base[1] + o);
                    const __m256d c = _mm256_loadu_pd(base[2] + o);
                    const __m256d d = _mm256_loadu_pd(base[3] + o);
                    const __m256d ab02 = _mm256_unpacklo_pd(a, b), ab13 = _mm256_unpackhi_pd(a, b);
                    const __m256d cd02 = _mm256_unpacklo_pd(c, d), cd13 = _mm256_unpackhi_pd(c, d);
                    const rp_v4d v0 = (rp_v4d)_mm256_permute2f128_pd(ab02, cd02, 0x20);
                    const rp_v4d v1 = (rp_v4d)_mm256_permute2f128_pd(ab13, cd13, 0x20);
                    const rp_v4d v2 = (rp_v4d)_mm256_permute2f128_pd(ab02, cd02, 0x31);
                    const rp_v4d v3 = (rp_v4d)_mm256_permute2f128_pd(ab13, cd13, 0x31);
                    t += wy[jj] * (wx[0] * v0 + wx[1] * v1 + wx[2] * v2 + wx[3] * v3);
                }
                RP_V4D_STORE(out + m, t);
                continue;
            }
        }
        RP_POINTS(bicubic_point, m, m + 4)
    }
    RP_POINTS(bicubic_point, m, n)
}
#endif
/* Weights w[0 .. *m - 1] of the causal initial value c+(0) = sum w[k] s(k) of a line of
 * n >= 2 samples with mirror boundaries (s(-k) = s(k), s(n - 1 + k) = s(n - 1 - k)):
 * for n <= BSPLINE_HORIZON the exact sum over one period 2n - 2 folded onto the line,
 * (z^k + z^(2n-2-k)) / (1 - z^(2n-2)) (Unser 1999, Box 2; Thevenaz et al. 2000,
 * InitialCausalCoefficient "full loop"); otherwise z^k truncated at the horizon.
 * w holds BSPLINE_HORIZON entries.  Cannot fail. */
static void bspline_causal_weights(long n, double *w, long *m)
{
    const double z = BSPLINE_Z;
    if (n > BSPLINE_HORIZON) {
        double zk = 1.0;
        for (long k = 0; k < BSPLINE_HORIZON; k++, zk *= z)
            w[k] = zk;
        *m = BSPLINE_HORIZON;
        return;
    }
    double zn1 = pow(z, (double)(n - 1));      /* z^(n-1) */
    double d = 1.0 / (1.0 - zn1 * zn1);        /* 1 / (1 - z^(2n-2)) */
    w[0] = d;
    w[n - 1] = zn1 * d;
    double zk = z, zr = zn1 * zn1 / z;         /* z^k and z^(2n-2-k) at k = 1 */
    for (long k = 1; k < n - 1; k++, zk *= z, zr /= z)
        w[k] = (zk + zr) * d;
    *m = n;
}

/* Applies the cubic B-spline prefilter (gain not included) in place to one line of n
 * samples at stride s: causal pass c+(k) = s(k) + z c+(k-1), anticausal pass
 * c-(k) = z (c-(k+1) - c+(k)) started from c-(n-1) = z / (z^2 - 1) (c+(n-1) +
 * z c+(n-2)) (Unser 1999, Box 2; mirror boundaries).  w, m from bspline_causal_weights.
 * Cannot fail. */
static void bspline_line(double *c, long n, long s, const double *w, long m)
{
    const double z = BSPLINE_Z;
    double c0 = 0.0;
    for (long k = 0; k < m; k++)
        c0 += w[k] * c[k * s];
    c[0] = c0;
    for (long k = 1; k < n; k++)
        c[k * s] += z * c[(k - 1) * s];
    c[(n - 1) * s] = z / (z * z - 1.0) * (c[(n - 1) * s] + z * c[(n - 2) * s]);
    for (long k = n - 2; k >= 0; k--)
        c[k * s] = z * (c[(k + 1) * s] - c[k * s]);
}

/* Four lines of n samples at stride 1 filtered as bspline_line filters each, their
 * operations interleaved so that the four recursions (each bound by the latency of a
 * multiply and an add) overlap; each line gets exactly bspline_line's arithmetic.
 * Cannot fail. */
static void bspline_lines4(double *restrict a, double *restrict b, double *restrict c,
                           double *restrict d, long n, const double *w, long m)
{
    const double z = BSPLINE_Z, za = z / (z * z - 1.0);
    double a0 = 0.0, b0 = 0.0, c0 = 0.0, d0 = 0.0;
    for (long k = 0; k < m; k++) {
        a0 += w[k] * a[k];
        b0 += w[k] * b[k];
        c0 += w[k] * c[k];
        d0 += w[k] * d[k];
    }
    a[0] = a0;
    b[0] = b0;
    c[0] = c0;
    d[0] = d0;
    for (long k = 1; k < n; k++) {
        a0 = a[k] += z * a0;
        b0 = b[k] += z * b0;
        c0 = c[k] += z * c0;
        d0 = d[k] += z * d0;
    }
    const long l = n - 1;
    a0 = a[l] = za * (a[l] + z * a[l - 1]);
    b0 = b[l] = za * (b[l] + z * b[l - 1]);
    c0 = c[l] = za * (c[l] + z * c[l - 1]);
    d0 = d[l] = za * (d[l] + z * d[l - 1]);
    for (long k = n - 2; k >= 0; k--) {
        a0 = a[k] = z * (a0 - a[k]);
        b0 = b[k] = z * (b0 - b[k]);
        c0 = c[k] = z * (c0 - c[k]);
        d0 = d[k] = z * (d0 - d[k]);
    }
}

/* The same filter along the columns of a W x H row-major array, run on whole rows at a
 * time so that memory is read in order, four columns at a time in vector lanes (each
 * lane the scalar arithmetic), in three steps: bspline_cols_init the causal initial
 * values into row 0 (rows 0 .. m - 1 read), bspline_cols_causal the causal pass over rows
 * k0 .. k1 - 1 (k0 >= 1, rows before k0 done), bspline_cols_anticausal the rest.
 * Cannot fail. */
RP_HOT static void bspline_cols_init(double *c, long W, const double *w, long m)
{
    const long W4 = W - W % 4;
    double *r0 = c;
    for (long i = 0; i < W; i++)
        r0[i] *= w[0];
    for (long k = 1; k < m; k++) {
        const double *rk = c + k * W;
        long i = 0;
        for (; i < W4; i += 4) {
            rp_v4d a, b;
            RP_V4D_LOAD(a, r0 + i);
            RP_V4D_LOAD(b, rk + i);
            a += w[k] * b;
            RP_V4D_STORE(r0 + i, a);
        }
        for (; i < W; i++)
            r0[i] += w[k] * rk[i];
    }
}

RP_HOT static void bspline_cols_causal(double *c, long W, long k0, long k1)
{
    const double z = BSPLINE_Z;
    const long W4 = W - W % 4;
    for (long k = k0; k < k1; k++) {
        double *r = c + k * W;
        const double *p = r - W;
        long i = 0;
        for (; i < W4; i += 4) {
            rp_v4d a, b;
            RP_V4D_LOAD(a, r + i);
            RP_V4D_LOAD(b, p + i);
            a += z * b;
            RP_V4D_STORE(r + i, a);
        }
        for (; i < W; i++)
            r[i] += z * p[i];
    }
}

RP_HOT static void bspline_cols_anticausal(double *c, long W, long H)
{
    const double z = BSPLINE_Z, za = z / (z * z - 1.0);
    const long W4 = W - W % 4;
    double *rl = c + (H - 1) * W;
    const double *rp = rl - W;
    for (long i = 0; i < W; i++)
        rl[i] = za * (rl[i] + z * rp[i]);
    for (long k = H - 2; k >= 0; k--) {
        double *r = c + k * W;
        const double *q = r + W;
        long i = 0;
        for (; i < W4; i += 4) {
            rp_v4d a, b;
            RP_V4D_LOAD(a, r + i);
            RP_V4D_LOAD(b, q + i);
            a = z * (b - a);
            RP_V4D_STORE(r + i, a);
        }
        for (; i < W; i++)
            r[i] = z * (q[i] - r[i]);
    }
}


/* Rows of the column prefilter's anticausal pass finished together (bspline_cols_finish),
 * and the rows beyond a block its recursion starts from.  The anticausal coefficient
 * c-(k) = -sum_{i >= 0} z^(i+1) c+(k + i) (Unser 1999, Box 2) is started BSPLINE_BLOCK_LEAD
 * rows below a block from c-(e + 1) = 0 instead of from the end of the column: the terms
 * left out weigh at most |z|^33 = 1.4e-19 of the column's values, below half an ulp
 * (1.1e-16), the truncation BSPLINE_HORIZON makes of the causal initial sum. */
#define BSPLINE_BLOCK 64
#define BSPLINE_BLOCK_LEAD (BSPLINE_HORIZON + 1)

/* The anticausal pass of the columns over rows a .. b - 1 of a W-wide row-major array
 * whose rows a .. e hold causal coefficients (b <= e): started at row e from
 * c-(e + 1) = 0 in the scratch row t (W doubles; rows b .. e are read, not written),
 * then written in place over rows b - 1 .. a.  Each step is bspline_cols_anticausal's
 * c-(k) = z (c-(k + 1) - c+(k)).  Cannot fail. */
RP_HOT static void bspline_cols_anticausal_block(double *c, long W, long a, long b, long e,
                                                 double *restrict t)
{
    const double z = BSPLINE_Z;
    const long W4 = W - W % 4;
    const double *re = c + e * W;
    for (long i = 0; i < W; i++)
        t[i] = z * (0.0 - re[i]);
    for (long k = e - 1; k >= a; k--) {
        double *r = c + k * W;
        const double *q = k >= b - 1 ? t : r + W;   /* c-(k + 1) */
        double *o = k >= b ? t : r;
        long i = 0;
        for (; i < W4; i += 4) {
            rp_v4d u, v;
            RP_V4D_LOAD(u, r + i);
            RP_V4D_LOAD(v, q + i);
            u = z * (v - u);
            RP_V4D_STORE(o + i, u);
        }
        for (; i < W; i++)
            o[i] = z * (q[i] - r[i]);
    }
}

/* Finishes the columns' anticausal pass as far as the causal pass allows: *fin is the
 * first row not yet final, `done` the rows through which the causal pass has run.
 * Rows go in blocks of BSPLINE_BLOCK from row 0, each started BSPLINE_BLOCK_LEAD rows
 * below it (bspline_cols_anticausal_block) while that start lies above the last row;
 * the rows after the last such block are finished from the end of the columns
 * (bspline_cols_anticausal) once done = H.  The blocks depend only on H, so any order of
 * calls gives the same values.  t: a scratch row of W doubles.  Cannot fail. */
static void bspline_cols_finish(double *c, long W, long H, long *fin, long done, double *t)
{
    while (*fin + BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD <= H - 1
           && *fin + BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD <= done) {
        const long b = *fin + BSPLINE_BLOCK;
        bspline_cols_anticausal_block(c, W, *fin, b, b + BSPLINE_BLOCK_LEAD - 1, t);
        *fin = b;
    }
    if (done == H && *fin < H) {
        bspline_cols_anticausal(c + *fin * W, W, H - *fin);
        *fin = H;
    }
}
/* Linear interpolation between (a, va) and (b, vb) at i, a < i < b.  Cannot fail. */
static inline double lerp_at(long a, double va, long b, double vb, long i)
{
    return va + (vb - va) * (double)(i - a) / (double)(b - a);
}

/* Replaces the non-finite pixels of the nx x ny array `a` (row stride `st`; they are
 * NaN on entry) by finite values, so that the prefilter spreads no NaN: the mean of the
 * linear interpolations along the row and along the column between the nearest finite
 * pixels on either side (or the nearest one when only one side has any; a single
 * missing pixel thus gets the mean of its four neighbours), or, where neither row nor
 * column holds a finite pixel, the mean of all finite pixels (0 when there is none).
 * miss[] lists the nmiss missing pixels as j * nx + i in increasing order.  Returns 0 or
 * -1 (out of memory; then `a` is unchanged). */
static int fill_missing(double *a, long nx, long ny, long st, const size_t *miss, size_t nmiss,
                        double fallback)
{
    double *rv = malloc(sizeof(double) * nmiss);   /* row interpolation, NaN if none */
    long *up = malloc(sizeof(long) * nmiss);       /* previous finite row, -1 if none */
    long *colj = malloc(sizeof(long) * (size_t)nx);
    if (!rv || !up || !colj) {
        free(rv);
        free(up);
        free(colj);
        return -1;
    }
    /* Along rows: walk the list, which is sorted by row then column. */
    for (size_t q = 0; q < nmiss;) {
        long j = (long)(miss[q] / (size_t)nx);
        const double *r = a + j * st;
        size_t q1 = q;
        while (q1 < nmiss && (long)(miss[q1] / (size_t)nx) == j)
            q1++;
        for (size_t p = q; p < q1;) {
            long i0 = (long)(miss[p] % (size_t)nx), i1 = i0;
            size_t p1 = p + 1;
            while (p1 < q1 && (long)(miss[p1] % (size_t)nx) == i1 + 1) {
                i1++;
                p1++;
            }
            long l = i0 - 1, h = i1 + 1;   /* finite neighbours of the run, if in range */
            for (long i = i0; i <= i1; i++, p++) {
                if (l >= 0 && h < nx)
                    rv[p] = lerp_at(l, r[l], h, r[h], i);
                else if (l >= 0)
                    rv[p] = r[l];
                else if (h < nx)
                    rv[p] = r[h];
                else
                    rv[p] = NAN;
            }
        }
        q = q1;
    }
    /* Down the columns: the last finite row above each missing pixel. */
    for (long i = 0; i < nx; i++)
        colj[i] = -1;
    size_t q = 0;
    for (long j = 0; j < ny; j++) {
        size_t base = (size_t)j * (size_t)nx;
        for (long i = 0; i < nx; i++) {
            if (q < nmiss && miss[q] == base + (size_t)i)
                up[q++] = colj[i];
            else
                colj[i] = j;
        }
    }
    /* Up the columns: the first finite row below; combine and write (a written pixel is
     * never read again as a neighbour: neighbours are original finite pixels). */
    for (long i = 0; i < nx; i++)
        colj[i] = -1;
    q = nmiss;
    for (long j = ny - 1; j >= 0; j--) {
        size_t base = (size_t)j * (size_t)nx;
        for (long i = nx - 1; i >= 0; i--) {
            if (q > 0 && miss[q - 1] == base + (size_t)i) {
                q--;
                long u = up[q], d = colj[i];
                double cv;
                if (u >= 0 && d >= 0)
                    cv = lerp_at(u, a[u * st + i], d, a[d * st + i], j);
                else if (u >= 0)
                    cv = a[u * st + i];
                else if (d >= 0)
                    cv = a[d * st + i];
                else
                    cv = NAN;
                double v = rv[q];
                v = isnan(v) ? cv : isnan(cv) ? v : 0.5 * (v + cv);
                a[j * st + i] = isnan(v) ? fallback : v;
            } else {
                colj[i] = j;
            }
        }
    }
    free(rv);
    free(up);
    free(colj);
    return 0;
}

/* For each support start s in [-1, n] (padded) of one axis of n image pixels, the range
 * [lo[s + 1], hi[s + 1]] of image pixels whose values its four mirrored padded
 * coefficients repeat.  Cannot fail. */
static void support_ranges(long n, long *lo, long *hi)
{
    const long len = n + 2;
    for (long s = -1; s <= n; s++) {
        long a = n, b = -1;
        for (long q = 0; q < 4; q++) {
            long i = clampl(mirror1(s + q, len) - 1, n);
            a = i < a ? i : a;
            b = i > b ? i : b;
        }
        lo[s + 1] = a;
        hi[s + 1] = b;
    }
}

/* Builds k->bad from the list of missing pixels.  Returns 0 or -1 (out of memory). */
static int bicubic_mask(rp_kernel *k, const size_t *miss, size_t nmiss)
{
    const long nx = k->src.nx, ny = k->src.ny, W = nx + 2, H = ny + 2;
    long *lox = malloc(sizeof(long) * (size_t)(W + H) * 2);
    unsigned char *isbad = calloc((size_t)nx * (size_t)ny, 1);
    unsigned char *tmp = calloc((size_t)ny * (size_t)W, 1);
    k->bad = calloc((size_t)W * (size_t)H, 1);
    if (!lox || !isbad || !tmp || !k->bad) {
        free(lox);
        free(isbad);
        free(tmp);
        return -1;
    }
    long *hix = lox + W, *loy = lox + 2 * W, *hiy = loy + H;
    support_ranges(nx, lox, hix);
    support_ranges(ny, loy, hiy);
    for (size_t q = 0; q < nmiss; q++)
        isbad[miss[q]] = 1;
    for (long j = 0; j < ny; j++) {
        const unsigned char *r = isbad + j * nx;
        unsigned char *t = tmp + j * W;
        for (long s = 0; s < W; s++) {
            unsigned char b = 0;
            for (long i = lox[s]; i <= hix[s]; i++)
                b |= r[i];
            t[s] = b;
        }
    }
    for (long s = 0; s < H; s++) {
        unsigned char *o = k->bad + s * W;
        for (long j = loy[s]; j <= hiy[s]; j++) {
            const unsigned char *t = tmp + j * W;
            for (long i = 0; i < W; i++)
                o[i] |= t[i];
        }
    }
    free(lox);
    free(isbad);
    free(tmp);
    return 0;
}

/* One padded row of the coefficient array (row j of H = ny + 2: image row j - 1 clamped
 * into [0, ny - 1], the edge pixels repeated at both ends) times the gain g2.  Returns 0,
 * or 1 when a pixel is not finite (the row is then incomplete).  Cannot fail. */
static int bicubic_padded_row(const rp_plane *p, long j, double g2, double *restrict r)
{
    const long nx = p->nx, sj = clampl(j - 1, p->ny);
    int bad = 0;
    if (p->dtype == RP_F32) {
        const float *s = (const float *)p->data + (size_t)sj * (size_t)nx;
        for (long i = 0; i < nx; i++) {
            const double v = (double)s[i];
            bad |= !(fabs(v) <= DBL_MAX);
            r[i + 1] = v * g2;
        }
    } else {
        const double *s = (const double *)p->data + (size_t)sj * (size_t)nx;
        for (long i = 0; i < nx; i++) {
            const double v = s[i];
            bad |= !(fabs(v) <= DBL_MAX);
            r[i + 1] = v * g2;
        }
    }
    r[0] = r[1];
    r[nx + 1] = r[nx];
    return bad;
}


/* Transposes the 4x4 block of doubles whose rows are a, b, c, d into its columns v0 .. v3
 * (v0 = { a[0], b[0], c[0], d[0] }, ...); exact (values are only moved). */
#define RP_T4X4(a, b, c, d, v0, v1, v2, v3)                                               \
    do {                                                                                  \
        const rp_v4d t0_ = RP_V4D_SHUF(a, b, 0, 4, 2, 6), t1_ = RP_V4D_SHUF(a, b, 1, 5, 3, 7); \
        const rp_v4d t2_ = RP_V4D_SHUF(c, d, 0, 4, 2, 6), t3_ = RP_V4D_SHUF(c, d, 1, 5, 3, 7); \
        (v0) = RP_V4D_SHUF(t0_, t2_, 0, 1, 4, 5);                                         \
        (v1) = RP_V4D_SHUF(t1_, t3_, 0, 1, 4, 5);                                         \
        (v2) = RP_V4D_SHUF(t0_, t2_, 2, 3, 6, 7);                                         \
        (v3) = RP_V4D_SHUF(t1_, t3_, 2, 3, 6, 7);                                         \
    } while (0)

/* Four consecutive pixels of row r (float or double, f32 says which) from index i, as
 * doubles (widening a float is exact). */
#define RP_LOAD4_PIX(v, r, i, f32)                                                        \
    do {                                                                                  \
        if (f32) {                                                                        \
            rp_v4f f_;                                                                    \
            memcpy(&f_, (const float *)(r) + (i), sizeof f_);                             \
            (v) = __builtin_convertvector(f_, rp_v4d);                                    \
        } else {                                                                          \
            memcpy(&(v), (const double *)(r) + (i), sizeof(v));                           \
        }                                                                                 \
    } while (0)

/* Rows of a band of bspline_band: four lanes times BAND_G vectors. */
#define BAND_G 2
#define BAND_ROWS (4 * BAND_G)

/* bicubic_prefilter_finite's work on the BAND_ROWS padded rows j0 .. j0 + BAND_ROWS - 1
 * of W = nx + 2 (rows of c from c + j0 W): bicubic_padded_row's values (pixel times g2,
 * edges repeated) filtered along the rows as bspline_line filters each, with the lines
 * in vector lanes: the pixels go into s (W x BAND_ROWS doubles: padded column k at
 * s + BAND_ROWS k, rows 0-3, then rows 4-7, ...) in 4x4 transposed blocks, the BAND_G
 * four-lane recursions run side by side over s, and s is transposed back into c.  Every
 * lane does bicubic_padded_row's and bspline_line's arithmetic in their order, so the
 * values are bit for bit theirs, and no row of c is written twice; the recursions, each
 * bound by the latency of a multiply and an add on one line (bspline_lines4 interleaves
 * four), advance BAND_ROWS lines a step.  Returns 0, or 1 when a pixel is not finite (c
 * is then incomplete).  Cannot fail. */
RP_HOT static int bspline_band(const rp_plane *p, long j0, double g2, double *restrict c,
                               const double *w, long m, double *restrict s)
{
    const double z = BSPLINE_Z, za = z / (z * z - 1.0);
    const long nx = p->nx, n = nx + 2, n4 = nx - nx % 4;
    const int f32 = p->dtype == RP_F32;
    const size_t es = f32 ? sizeof(float) : sizeof(double);
    enum { R = BAND_ROWS };
    rp_v4q fin = { -1, -1, -1, -1 };
    for (int g = 0; g < BAND_G; g++) {
        const char *r[4];
        for (int q = 0; q < 4; q++)
            r[q] = (const char *)p->data
                   + (size_t)clampl(j0 + 4 * g + q - 1, p->ny) * (size_t)nx * es;
        long i = 0;
        for (; i < n4; i += 4) {
            rp_v4d a, b, cc, d, v0, v1, v2, v3;
            RP_LOAD4_PIX(a, r[0], i, f32);
            RP_LOAD4_PIX(b, r[1], i, f32);
            RP_LOAD4_PIX(cc, r[2], i, f32);
            RP_LOAD4_PIX(d, r[3], i, f32);
            RP_T4X4(a, b, cc, d, v0, v1, v2, v3);
            fin &= (v0 <= DBL_MAX) & (v0 >= -DBL_MAX) & (v1 <= DBL_MAX) & (v1 >= -DBL_MAX);
            fin &= (v2 <= DBL_MAX) & (v2 >= -DBL_MAX) & (v3 <= DBL_MAX) & (v3 >= -DBL_MAX);
            v0 = v0 * g2;
            v1 = v1 * g2;
            v2 = v2 * g2;
            v3 = v3 * g2;
            double *o = s + R * (i + 1) + 4 * g;
            RP_V4D_STORE(o, v0);
            RP_V4D_STORE(o + R, v1);
            RP_V4D_STORE(o + 2 * R, v2);
            RP_V4D_STORE(o + 3 * R, v3);
        }
        for (; i < nx; i++)
            for (int q = 0; q < 4; q++) {
                const double v = f32 ? (double)((const float *)r[q])[i]
                                     : ((const double *)r[q])[i];
                if (!(fabs(v) <= DBL_MAX))
                    fin[0] = 0;
                s[R * (i + 1) + 4 * g + q] = v * g2;
            }
    }
    if (!(fin[0] & fin[1] & fin[2] & fin[3]))
        return 1;
    memcpy(s, s + R, R * sizeof(double));                         /* r[0] = r[1] */
    memcpy(s + R * (n - 1), s + R * (n - 2), R * sizeof(double)); /* r[nx + 1] = r[nx] */
    rp_v4d pv[BAND_G], v;
    for (int g = 0; g < BAND_G; g++)
        pv[g] = (rp_v4d){ 0.0, 0.0, 0.0, 0.0 };
    for (long k = 0; k < m; k++)
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] += w[k] * v;
        }
    for (int g = 0; g < BAND_G; g++)
        RP_V4D_STORE(s + 4 * g, pv[g]);
    for (long k = 1; k < n; k++)
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] = v + z * pv[g];
            RP_V4D_STORE(s + R * k + 4 * g, pv[g]);
        }
    const long l = n - 1;
    for (int g = 0; g < BAND_G; g++) {
        rp_v4d u;
        RP_V4D_LOAD(v, s + R * l + 4 * g);
        RP_V4D_LOAD(u, s + R * (l - 1) + 4 * g);
        pv[g] = za * (v + z * u);
        RP_V4D_STORE(s + R * l + 4 * g, pv[g]);
    }
    for (long k = n - 2; k >= 0; k--)
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] = z * (pv[g] - v);
            RP_V4D_STORE(s + R * k + 4 * g, pv[g]);
        }
    const long w4 = n - n % 4;
    for (int g = 0; g < BAND_G; g++) {
        double *a = c + 4 * g * n;
        long k = 0;
        for (; k < w4; k += 4) {
            rp_v4d ca, cb, cc, cd, r0, r1, r2, r3;
            RP_V4D_LOAD(ca, s + R * k + 4 * g);
            RP_V4D_LOAD(cb, s + R * (k + 1) + 4 * g);
            RP_V4D_LOAD(cc, s + R * (k + 2) + 4 * g);
            RP_V4D_LOAD(cd, s + R * (k + 3) + 4 * g);
            RP_T4X4(ca, cb, cc, cd, r0, r1, r2, r3);
            RP_V4D_STORE(a + k, r0);
            RP_V4D_STORE(a + n + k, r1);
            RP_V4D_STORE(a + 2 * n + k, r2);
            RP_V4D_STORE(a + 3 * n + k, r3);
        }
        for (; k < n; k++)
            for (int q = 0; q < 4; q++)
                a[q * n + k] = s[R * k + 4 * g + q];
    }
    return 0;
}

/* bicubic_prepare's prefilter for a plane whose pixels are all finite, in one pass over
 * the coefficient array instead of five: each group of BAND_ROWS padded rows is copied
 * with the gain and filtered along the rows (bspline_band; bicubic_padded_row and
 * bspline_lines4 for the last rows) and taken through the causal pass of the columns
 * while it is in cache, and the anticausal pass of the columns follows BSPLINE_BLOCK +
 * BSPLINE_BLOCK_LEAD rows behind (bspline_cols_finish), over rows still in the cache.
 * Every coefficient gets the arithmetic of the general path in the same order, so the
 * two agree bit for bit.  Returns 0, 1 as soon as a pixel is not finite (the general
 * path must then run), or -1 (out of memory). */
static int bicubic_prefilter_finite(const rp_plane *p, double *c, double g2)
{
    const long W = p->nx + 2, H = p->ny + 2;
    double wr[BSPLINE_HORIZON], wc[BSPLINE_HORIZON];
    long mr, mc, causal = 0;   /* causal: rows through which the column pass has run */
    long fin = 0;              /* rows final (bspline_cols_finish) */
    bspline_causal_weights(W, wr, &mr);
    bspline_causal_weights(H, wc, &mc);
    /* bspline_band's scratch, and bspline_cols_finish's row */
    double *s = malloc(sizeof(double) * BAND_ROWS * (size_t)W);
    if (!s)
        return -1;
    for (long j0 = 0; j0 < H; j0 += BAND_ROWS) {
        const long nr = H - j0 < BAND_ROWS ? H - j0 : BAND_ROWS;
        double *r = c + j0 * W;
        long q = 0;
        if (nr == BAND_ROWS) {
            if (bspline_band(p, j0, g2, r, wr, mr, s) != 0) {
                free(s);
                return 1;
            }
            q = BAND_ROWS;
        }
        for (long i = q; i < nr; i++)
            if (bicubic_padded_row(p, j0 + i, g2, r + i * W) != 0) {
                free(s);
                return 1;
            }
        for (; q + 4 <= nr; q += 4)
            bspline_lines4(r + q * W, r + (q + 1) * W, r + (q + 2) * W, r + (q + 3) * W, W,
                           wr, mr);
        for (; q < nr; q++)
            bspline_line(r + q * W, W, 1, wr, mr);
        const long done = j0 + nr;
        if (causal == 0 && done >= mc) {
            bspline_cols_init(c, W, wc, mc);
            causal = 1;
        }
        if (causal > 0) {
            bspline_cols_causal(c, W, causal, done);
            causal = done;
            bspline_cols_finish(c, W, H, &fin, done, s);
        }
    }
    free(s);
    return 0;
}

/* Allocates the coefficient array of `bytes` bytes; where the system has transparent huge
 * pages, asks for them over the array (madvise MADV_HUGEPAGE on the 2 MiB-aligned part):
 * with 4 KiB pages a 4096^2 plane's 134 MB cost 33,000 page faults on first touch (about
 * half of the preparation's time here), and the sampler, reading rows far apart when
 * the grids are rotated, misses the TLB.  The advice is a hint: its failure changes
 * nothing.  Returns NULL when out of memory. */
static double *coef_alloc(size_t bytes)
{
    double *c = malloc(bytes);
#if defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (c && bytes >= 4 * huge) {
        uintptr_t lo = ((uintptr_t)c + huge - 1) & ~(huge - 1);
        uintptr_t hi = ((uintptr_t)c + bytes) & ~(huge - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return c;
}

/* Prepares bicubic sampling: copies the plane, edge-padded by one pixel, into k->coef
 * (non-finite pixels filled, see fill_missing, and flagged in k->bad), then applies the
 * cubic B-spline prefilter with mirror boundaries along rows and columns (scipy
 * spline_filter(padded, order=3, mode='mirror'), which docs/DESIGN.md's "Kernel definitions"
 * name as the reference), gain (1 - z)(1 - 1/z) = 6 per axis.  Returns 0 or -1 (out of
 * memory).  A plane with no missing pixel takes bicubic_prefilter_finite. */
static int bicubic_prepare(rp_kernel *k)
{
    const rp_plane *p = &k->src;
    const long nx = p->nx, ny = p->ny, W = nx + 2, H = ny + 2;
    double *c = coef_alloc(sizeof(double) * (size_t)W * (size_t)H);
    if (!c)
        return -1;
    k->coef = c;
    const double gain = (1.0 - BSPLINE_Z) * (1.0 - 1.0 / BSPLINE_Z);
    const double g2 = gain * gain;
    const int fr = bicubic_prefilter_finite(p, c, g2);
    if (fr <= 0)
        return fr;

    /* Interior, counting the missing pixels and summing the finite ones. */
    size_t nmiss = 0;
    double fsum = 0.0;
    for (long j = 0; j < ny; j++) {
        double *r = c + (j + 1) * W + 1;
        for (long i = 0; i < nx; i++) {
            double v = rp_plane_get(p, i, j);
            if (fabs(v) <= DBL_MAX) {
                fsum += v;
            } else {
                v = NAN;
                nmiss++;
            }
            r[i] = v;
        }
    }
    if (nmiss > 0) {
        size_t *miss = malloc(sizeof(size_t) * nmiss);
        size_t q = 0;
        if (!miss)
            return -1;
        for (long j = 0; j < ny; j++) {
            const double *r = c + (j + 1) * W + 1;
            for (long i = 0; i < nx; i++)
                if (isnan(r[i]))
                    miss[q++] = (size_t)j * (size_t)nx + (size_t)i;
        }
        size_t nfin = (size_t)nx * (size_t)ny - nmiss;
        double fallback = nfin > 0 ? fsum / (double)nfin : 0.0;
        if (!isfinite(fallback))
            fallback = 0.0;
        int rc = fill_missing(c + W + 1, nx, ny, W, miss, nmiss, fallback);
        if (rc == 0)
            rc = bicubic_mask(k, miss, nmiss);
        free(miss);
        if (rc != 0)
            return -1;
    }
    /* Gain of both axes, then the edge padding. */
    for (long j = 1; j <= ny; j++) {
        double *r = c + j * W;
        for (long i = 1; i <= nx; i++)
            r[i] *= g2;
        r[0] = r[1];
        r[W - 1] = r[W - 2];
    }
    memcpy(c, c + W, sizeof(double) * (size_t)W);
    memcpy(c + (H - 1) * W, c + (H - 2) * W, sizeof(double) * (size_t)W);

    double w[BSPLINE_HORIZON];
    long m;
    bspline_causal_weights(W, w, &m);
    for (long j = 0; j < H; j++)
        bspline_line(c + j * W, W, 1, w, m);
    bspline_causal_weights(H, w, &m);
    bspline_cols_init(c, W, w, m);
    bspline_cols_causal(c, W, 1, H);
    double *t = malloc(sizeof(double) * (size_t)W);
    if (!t)
        return -1;
    long fin = 0;
    bspline_cols_finish(c, W, H, &fin, H, t);
    free(t);
    return 0;
}

/* ---- lanczos3 ----------------------------------------------------------------------- */

/* The Lanczos-3 tables, made once per process (lanczos3_tables, under pthread_once) and
 * shared read-only by every kernel, so that a cube's planes, each with its own kernel,
 * do not each hold (and compute) a copy.  lz_table: L(k / LZ_RES), k = 0 .. LZ_TABLEN - 1;
 * lz_pairs: see struct rp_kernel, field lzp. */
static double lz_table[LZ_TABLEN];
static _Alignas(64) double lz_pairs[8 * (LZ_RES + 1)];
static pthread_once_t lz_once = PTHREAD_ONCE_INIT;

/* Fills lz_table with the Lanczos-3 kernel L(u) = sinc(u) sinc(u / 3) for |u| < 3, 0
 * beyond, sinc(v) = sin(pi v) / (pi v) (Duchon, "Lanczos filtering in one and two
 * dimensions", J. Applied Meteorology 18, 1979; Turkowski, "Filters for common
 * resampling tasks", Graphics Gems, 1990), tabulated at u = k / LZ_RES (exactly 1 at 0
 * and 0 at the other integers), then lz_pairs from it: every value copied, every
 * difference L(k + 1) - L(k) computed once here, as lanczos3_weights computes it.
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
        double *e = lz_pairs + 8 * q;
        for (int o = 0; o < 3; o++) {
            const double *v = t + q + o * LZ_RES;   /* q + 2 LZ_RES + 1 < LZ_TABLEN */
            e[2 * o] = v[0];
            e[2 * o + 1] = v[1] - v[0];
        }
        e[6] = e[7] = 0.0;
    }
}

/* ---- public API --------------------------------------------------------------------- */

/* See kernels.h.  Errors (NULL returned, `err` set): NULL or malformed plane (no data,
 * sizes < 1, unknown dtype, too large to pad), unknown method (RP_EXACT is not a point
 * kernel: see exact.h), out of memory. */
rp_kernel *rp_kernel_new(rp_method method, const rp_plane *src, char *err, size_t errlen)
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
        fn = sample_bicubic;
#ifdef RP_AVX2_SAMPLERS
        if (__builtin_cpu_supports("avx2"))
            fn = sample_bicubic_avx2;
#endif
        break;
    case RP_LANCZOS3:
        fn = f32 ? sample_lanczos3_f32 : sample_lanczos3_f64;
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
    int rc = 0;
    if (method == RP_BICUBIC)
        rc = bicubic_prepare(k);
    else if (method == RP_LANCZOS3) {
        rc = pthread_once(&lz_once, lanczos3_tables) == 0 ? 0 : -1;
        k->lz = lz_table;
        k->lzp = lz_pairs;
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
    for (size_t q = 0; q < n; q += step) {
        double u = x[q] + 0.5, v = y[q] + 0.5;
        u = u > 0.0 ? (u < xm ? u : xm) : 0.0;   /* NaN -> 0 */
        v = v > 0.0 ? (v < ym ? v : ym) : 0.0;
        __builtin_prefetch(base + ((size_t)v * (size_t)nx + (size_t)u) * es);
    }
}

void rp_kernel_sample(const rp_kernel *k, size_t n, const double *x, const double *y,
                      double *out)
{
    k->fn(k, n, x, y, out);
}
