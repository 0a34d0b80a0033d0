/* Unit tests of engine/sky/kernels: scipy values, bicubic golden, NaN locality, Lanczos table. */
#include <check.h>
#include <fitsio.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sky/kernels.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* A plane over caller-owned data. */
static rp_plane plane_of(void *data, rp_dtype t, long nx, long ny)
{
    rp_plane p = { data, t, nx, ny };
    return p;
}

/* A kernel for `m` on `p`, or a test failure. */
static rp_kernel *kernel_or_die(rp_method m, const rp_plane *p)
{
    char err[256] = "";
    rp_kernel *k = rp_kernel_new(m, p, err, sizeof err);
    ck_assert_msg(k != NULL, "rp_kernel_new(%d): %s", (int)m, err);
    return k;
}

/* A kernel from rp_kernel_new_f32 for `m` on `p`, or a test failure. */
static rp_kernel *kernel_f32_or_die(rp_method m, const rp_plane *p)
{
    char err[256] = "";
    rp_kernel *k = rp_kernel_new_f32(m, p, err, sizeof err);
    ck_assert_msg(k != NULL, "rp_kernel_new_f32(%d): %s", (int)m, err);
    return k;
}

/* Samples one position. */
static double sample1(const rp_kernel *k, double x, double y)
{
    double v;
    rp_kernel_sample(k, 1, &x, &y, &v);
    return v;
}

/* A deterministic pseudo-random double in [0, 1) (xorshift64*). */
static double rnd(unsigned long long *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
}

/* n positions (x[i], y[i]) = (-0.5 + w rnd, -0.5 + h rnd), x drawn before y each time. */
static void random_positions(double *x, double *y, int n, double w, double h,
                             unsigned long long *s)
{
    for (int i = 0; i < n; i++) {
        x[i] = -0.5 + rnd(s) * w;
        y[i] = -0.5 + rnd(s) * h;
    }
}

/* The Lanczos-3 kernel computed directly (no table): sinc(u) sinc(u / 3), |u| < 3. */
static double lanczos3_direct(double u)
{
    u = fabs(u);
    if (u >= 3.0)
        return 0.0;
    if (u == 0.0)
        return 1.0;
    double a = M_PI * u, b = a / 3.0;
    return sin(a) * sin(b) / (a * b);
}

/* Lanczos-3 at (x, y) of an nx x ny double image, untabulated: 6x6 support of the pixel
 * containing the position, indices clamped, weights renormalised over finite pixels, as
 * SWarp's LANCZOS3 does with per-axis unit-sum weights when every pixel is finite. */
static double lanczos3_ref(const double *img, long nx, long ny, double x, double y)
{
    long fx = (long)floor(x + 1.0), fy = (long)floor(y + 1.0);
    double sum = 0.0, wsum = 0.0;
    for (long j = fy - 3; j < fy + 3; j++) {
        double wy = lanczos3_direct(y - (double)j);
        long jc = j < 0 ? 0 : j >= ny ? ny - 1 : j;
        for (long i = fx - 3; i < fx + 3; i++) {
            double wx = lanczos3_direct(x - (double)i);
            long ic = i < 0 ? 0 : i >= nx ? nx - 1 : i;
            double v = img[jc * nx + ic];
            if (isfinite(v)) {
                sum += wx * wy * v;
                wsum += wx * wy;
            }
        }
    }
    return sum / wsum;
}

/* How far lanczos3 of a float32 plane (kernels.c lanczos3_f32: float weights, float
 * sums) may lie from lanczos3 of the same values as a float64 plane (double throughout),
 * r64 being the latter at (x, y), from a first-order rounding analysis with u = 2^-24
 * (the float64 path's own roundings, ~2^-53, are negligible against it):
 *  - each float weight is within e_w = 4u of the double one (L rounded to float: u |L|
 *    <= u; the difference of two rounded table values: 2u; the product f D and the sum
 *    L + f D: u |w| plus a term below 1e-3 u), so the 36 products w_x w_y v move by at
 *    most e_w T, T = sum (|wx_i| + |wy_j|) |v_ij|;
 *  - each product w_y v passes at most 8 float roundings on its way into the sum (the
 *    product, at most 3 additions down its column (RP_LZ_SUM6), the product with w_x,
 *    at most 3 additions across (RP_LZ_ACROSS)): at most 8u S, S = sum |wx_i wy_j v_ij|;
 *  - each axis's weight sum, 6 weights off by e_w plus 3 additions, is off by at most
 *    6 e_w + 3u sum |w|: relative error E = that / |sum w| per axis, for the divisor
 *    (sum wx)(sum wy) (its double product of floats exact to 2^-53).
 * So |r32 - r64| <= (8u S + e_w T) / |W| + |r64| (Ex + Ey), W = (sum wx)(sum wy).
 * With a NaN in the support both paths take the NaN-aware sum in double over the finite
 * pixels, the float path with its float weights widened: only the weight terms remain,
 * e_w T / |W| + |r64| e_w U / |W| with S, T, W and U = sum (|wx_i| + |wy_j|) over the
 * finite pixels.  The weights here are the untabulated ones (within 2.7e-8 of the
 * table's); the factor 1.25 covers that and the second-order terms. */
static double lanczos3_f32_bound(const double *img, long nx, long ny, double x, double y,
                                 double r64)
{
    const double u = 0x1.0p-24, ew = 4.0 * u;
    const long fx = (long)floor(x + 1.0), fy = (long)floor(y + 1.0);
    double wxs[6], wys[6], S = 0.0, T = 0.0, U = 0.0, W = 0.0;
    double sx = 0.0, sy = 0.0, ax = 0.0, ay = 0.0;
    long cols[6], rows[6];
    for (long q = 0; q < 6; q++) {
        const long i = fx - 3 + q, j = fy - 3 + q;
        wxs[q] = lanczos3_direct(x - (double)i);
        wys[q] = lanczos3_direct(y - (double)j);
        cols[q] = i < 0 ? 0 : i >= nx ? nx - 1 : i;
        rows[q] = j < 0 ? 0 : j >= ny ? ny - 1 : j;
        sx += wxs[q];
        sy += wys[q];
        ax += fabs(wxs[q]);
        ay += fabs(wys[q]);
    }
    int all = 1;
    for (int q = 0; q < 36; q++) {
        const double wx = wxs[q % 6], wy = wys[q / 6], v = img[rows[q / 6] * nx + cols[q % 6]];
        if (!isfinite(v)) {
            all = 0;
            continue;
        }
        S += fabs(wx * wy * v);
        T += (fabs(wx) + fabs(wy)) * fabs(v);
        U += fabs(wx) + fabs(wy);
        W += wx * wy;
    }
    double b;
    if (all)
        b = (8.0 * u * S + ew * T) / fabs(W)
            + fabs(r64) * ((6.0 * ew + 3.0 * u * ax) / fabs(sx) + (6.0 * ew + 3.0 * u * ay) / fabs(sy));
    else
        b = (ew * T + fabs(r64) * ew * U) / fabs(W);
    return 1.25 * b;
}

/* How far the FMA sampler of float32 planes (kernels.c sample_lanczos3_f32_fma, where
 * rp_kernel_fma says so) may lie from the point function lanczos3_f32 at the same
 * position (kernels.h, RP_LZ_FMA_BOUND), r being the point function's value, from a
 * first-order rounding analysis with u = 2^-24 (the two read the same float table
 * values L and D, so the table's own rounding cancels):
 *  - a weight: alone fl(L + fl(f D)), within u |f D| + u |w| of L + f D; fused
 *    fl(f' D + L), within u |w| of f' D + L, where f' is the same fraction (a side) or
 *    fl(1 - fu) against fv = fl(1 - fu in double) (b side: |f' - fv| <= 3u; where fu = 0
 *    the fused b side reads the entry one below with f' = 1, L + D within u |D| of the
 *    next L); |D| < 2^-11 (max |L'| / LZ_RES), so the two weights differ by at most
 *    2u |w| + 2^-9 u and the 36 products wx wy v by 4u S + 2^-9 u T;
 *  - the sums: each product w_y v passes at most 8 roundings in either order (alone:
 *    the product, 3 additions down a column, the product with wx, 3 across; fused: the
 *    product or an fma and 2 fmas down a chain, the addition of the chains, the product
 *    with wx, 3 additions across): 8u S each, 16u S apart;
 *  - the weight sum of an axis: alone the six weights (each within u |w| + 2^-11 u of
 *    L + f D) added in 3 levels, 4u sum |w| + 6 2^-11 u; fused the two sides' sums of L
 *    and D (two additions each, from the table), an fma each and one addition, 4u sum |w|
 *    + 33 2^-11 u: apart by at most 9u sum |w| + 2^-5 u, E = that / |sum w|;
 * so |fused - alone| <= (20u S + 2^-9 u T) / |W| + |r| (Ex + Ey), S, T, W as in
 * lanczos3_f32_bound.  The weights here are the untabulated ones; 1.25 covers that and the
 * second-order terms.  0 (the same bits required) where a support pixel is not finite:
 * both then take the point function. */
static double lanczos3_fma_bound(const double *img, long nx, long ny, double x, double y,
                                 double r)
{
    const double u = 0x1.0p-24;
    const long fx = (long)floor(x + 1.0), fy = (long)floor(y + 1.0);
    double wxs[6], wys[6], S = 0.0, T = 0.0, sx = 0.0, sy = 0.0, ax = 0.0, ay = 0.0;
    for (long q = 0; q < 6; q++) {
        wxs[q] = lanczos3_direct(x - (double)(fx - 3 + q));
        wys[q] = lanczos3_direct(y - (double)(fy - 3 + q));
        sx += wxs[q];
        sy += wys[q];
        ax += fabs(wxs[q]);
        ay += fabs(wys[q]);
    }
    for (int q = 0; q < 36; q++) {
        const long i = fx - 3 + q % 6, j = fy - 3 + q / 6;
        const double v = img[(j < 0 ? 0 : j >= ny ? ny - 1 : j) * nx
                             + (i < 0 ? 0 : i >= nx ? nx - 1 : i)];
        if (!isfinite(v))
            return 0.0;
        S += fabs(wxs[q % 6] * wys[q / 6] * v);
        T += (fabs(wxs[q % 6]) + fabs(wys[q / 6])) * fabs(v);
    }
    const double e = 0x1.0p-5 * u;
    return 1.25 * ((20.0 * u * S + 0x1.0p-9 * u * T) / fabs(sx * sy)
                   + fabs(r) * ((9.0 * u * ax + e) / fabs(sx) + (9.0 * u * ay + e) / fabs(sy)));
}

/* ---- the 5x5 image sampled at known points (values from scipy) ---------------------- */

/* The image, row 0 first. */
static const double img5[25] = {
    3, 1, 4, 1, 5,
    9, 2, 6, 5, 3,
    5, 8, 9, 7, 9,
    3, 2, 3, 8, 4,
    6, 2, 6, 4, 3,
};
#define NP5 10
static const double px5[NP5] = { -0.5, 0.0, 1.25, 2.3, 3.75, 4.5, 0.6, 2.0, -0.2, 4.49 };
static const double py5[NP5] = { -0.5, 0.0, 2.5, 1.7, 0.2, 4.5, 3.9, 2.0, 4.4, -0.3 };

/* Produced once with Debian's python3-reproject 0.10.0 / scipy 1.10.1:
 *   from reproject.array_utils import map_coordinates
 *   map_coordinates(img, np.array([py, px]), order=ORDER, cval=np.nan, mode='constant')
 * (the function reproject_interp samples with: edge padding, scipy map_coordinates). */
static const double nearest5[NP5] = { 3.0, 3.0, 2.0, 9.0, 5.0, 3.0, 2.0, 9.0, 6.0, 5.0 };
static const double bilinear5[NP5] = {
    3.0, 3.0, 5.25, 7.590000000000001, 3.9, 3.0, 3.4800000000000004, 9.0, 6.0, 5.0 };
static const double bicubic5[NP5] = {
    2.67920881102071, 3.0000000000000013, 5.771701674602443, 8.465476297500006,
    3.6128511242603545, 3.0937520802514804, 2.9522699446153853, 9.000000000000004,
    6.673249090650891, 5.7731951640694845 };
/* Produced once with numpy, untabulated: np.sinc(u) * np.sinc(u / 3) weights of the
 * pixels floor(x + 1) - 3 .. floor(x + 1) + 2 on each axis, indices clipped to the image,
 * sum(w * v) / sum(w) over the 6x6 support. */
static const double lanczos5[NP5] = {
    2.4360600779773165, 3.0000000000000004, 5.839860732409096, 8.54902919178608,
    3.594060510458061, 3.025217095935728, 2.845020322805013, 9.0, 6.91674771888872,
    6.031916237279464 };

/* Checks kernel m against `want` on the 5x5 image, as float64 and float32 planes. */
static void check_5x5(rp_method m, const double *want, double tol)
{
    float f[25];
    for (int i = 0; i < 25; i++)
        f[i] = (float)img5[i];
    rp_plane p64 = plane_of((void *)img5, RP_F64, 5, 5), p32 = plane_of(f, RP_F32, 5, 5);
    rp_kernel *k64 = kernel_or_die(m, &p64), *k32 = kernel_or_die(m, &p32);
    double out64[NP5], out32[NP5];
    rp_kernel_sample(k64, NP5, px5, py5, out64);
    rp_kernel_sample(k32, NP5, px5, py5, out32);
    for (int i = 0; i < NP5; i++) {
        ck_assert_msg(fabs(out64[i] - want[i]) <= tol,
                      "method %d point %d (%g, %g): %.17g, want %.17g", (int)m, i, px5[i],
                      py5[i], out64[i], want[i]);
        /* lanczos3 of float planes is computed in float (lanczos3_f32_bound); the other
         * kernels in double for both pixel types, bit for bit alike */
        const double tol32 =
            m == RP_LANCZOS3 ? lanczos3_f32_bound(img5, 5, 5, px5[i], py5[i], out64[i]) : 0.0;
        ck_assert_msg(fabs(out32[i] - out64[i]) <= tol32 || out32[i] == out64[i],
                      "method %d point %d: f32 %.17g f64 %.17g (tolerance %.3g)", (int)m, i,
                      out32[i], out64[i], tol32);
    }
    rp_kernel_free(k64);
    rp_kernel_free(k32);
}

START_TEST(test_nearest_5x5)
{
    check_5x5(RP_NEAREST, nearest5, 0.0);
}
END_TEST

START_TEST(test_bilinear_5x5)
{
    check_5x5(RP_BILINEAR, bilinear5, 0.0);   /* bit for bit */
}
END_TEST

START_TEST(test_bicubic_5x5)
{
    check_5x5(RP_BICUBIC, bicubic5, 1e-13);
}
END_TEST

START_TEST(test_lanczos3_5x5)
{
    /* Table error: 2.7e-8 per weight, well inside 1e-6 of values up to 9. */
    check_5x5(RP_LANCZOS3, lanczos5, 1e-6);
}
END_TEST

/* engine/sky/reproject.c sample() as it stood before this module (astropy-exact scalar
 * bilinear and nearest), copied here as the reference the kernels must match bit for bit. */
static double sample_ref(const double *src, long nx, long ny, double x, double y, int nearest)
{
    if (!(x >= -0.5 && x <= (double)nx - 0.5 && y >= -0.5 && y <= (double)ny - 0.5))
        return NAN;
    double cx = x + 1.0, cy = y + 1.0;
    if (nearest) {
        long i = (long)floor(cx + 0.5) - 1, j = (long)floor(cy + 0.5) - 1;
        i = i < 0 ? 0 : i >= nx ? nx - 1 : i;
        j = j < 0 ? 0 : j >= ny ? ny - 1 : j;
        return src[j * nx + i];
    }
    double fx = floor(cx), fy = floor(cy);
    double wx0 = 1.0 - (cx - fx), wy0 = 1.0 - (cy - fy);
    double wx1 = 1.0 - wx0, wy1 = 1.0 - wy0;
    long ia = (long)fx - 1, ja = (long)fy - 1;
    long ib = ia + 1, jb = ja + 1;
    ia = ia < 0 ? 0 : ia >= nx ? nx - 1 : ia;
    ib = ib < 0 ? 0 : ib >= nx ? nx - 1 : ib;
    ja = ja < 0 ? 0 : ja >= ny ? ny - 1 : ja;
    jb = jb < 0 ? 0 : jb >= ny ? ny - 1 : jb;
    double t = 0.0;
    t += src[ja * nx + ia] * wy0 * wx0;
    t += src[ja * nx + ib] * wy0 * wx1;
    t += src[jb * nx + ia] * wy1 * wx0;
    t += src[jb * nx + ib] * wy1 * wx1;
    return t;
}

/* Random positions over and around a random image with a NaN pixel: nearest and
 * bilinear equal sample_ref bit for bit (NaN where it is NaN). */
START_TEST(test_bilinear_matches_reproject)
{
    enum { NX = 31, NY = 17, N = 50000 };
    static double img[NX * NY], x[N], y[N], o[N];
    unsigned long long s = 2024;
    for (int i = 0; i < NX * NY; i++)
        img[i] = 1e3 * rnd(&s) - 300.0;
    img[8 * NX + 3] = NAN;
    for (int i = 0; i < N; i++) {
        x[i] = -0.6 + rnd(&s) * (NX + 0.2);
        y[i] = -0.6 + rnd(&s) * (NY + 0.2);
        if (i % 7 == 0)
            x[i] = floor(x[i] * 2.0) / 2.0;   /* half-integers: nearest's rounding edges */
    }
    rp_plane p = plane_of(img, RP_F64, NX, NY);
    for (int nearest = 0; nearest < 2; nearest++) {
        rp_kernel *k = kernel_or_die(nearest ? RP_NEAREST : RP_BILINEAR, &p);
        rp_kernel_sample(k, N, x, y, o);
        for (int i = 0; i < N; i++) {
            double r = sample_ref(img, NX, NY, x[i], y[i], nearest);
            ck_assert_msg((isnan(r) && isnan(o[i])) || r == o[i],
                          "%s at (%.17g, %.17g): %.17g, want %.17g",
                          nearest ? "nearest" : "bilinear", x[i], y[i], o[i], r);
        }
        rp_kernel_free(k);
    }
}
END_TEST

/* The bound of bilinear in float32 arithmetic (kernels_f32.c bilinear_f32f) against double
 * arithmetic at (x, y) inside the valid range of the nx x ny float plane img:
 * 8 u (|v00| + |v01| + |v10| + |v11|), u = 2^-24, over the four taps as the kernel
 * clamps them.  The derivation (kernels_f32.c): each weight within u(1 + u) of its double
 * value (gx = fl(frac) and fl(1 - gx)), two roundings a product, three in the sum: 7 u
 * and terms in u^2; 8 leaves room for those. */
static double bilinear_f32_bound(const float *img, long nx, long ny, double x, double y)
{
    const long fx = (long)(x + 1.0), fy = (long)(y + 1.0);
    const long ia = fx - 1 < 0 ? 0 : fx - 1, ib = fx < nx ? fx : nx - 1;
    const long ja = fy - 1 < 0 ? 0 : fy - 1, jb = fy < ny ? fy : ny - 1;
    const double s = fabs((double)img[ja * nx + ia]) + fabs((double)img[ja * nx + ib])
                     + fabs((double)img[jb * nx + ia]) + fabs((double)img[jb * nx + ib]);
    return ldexp(8.0, -24) * s;
}

/* rp_kernel_sample_f32 (the path rp_reproject takes for float output) gives: for
 * nearest, the float32 bits of rp_kernel_sample's values narrowed, NaNs quiet as the
 * narrowing leaves them; for bilinear (float32 arithmetic, kernels_f32.c bilinear_f32f)
 * values within bilinear_f32_bound of rp_kernel_sample's (double arithmetic), NaN and
 * infinite where those are; for both, the same bits one position a call as in a batch,
 * a footprint of 1 where finite, and the count of finite values: nearest and bilinear of
 * a float plane with a quiet NaN, a signalling NaN (0x7fa00000: the double round trip
 * sets its quiet bit) and both infinities, at random positions over and around it (NaN
 * and far-off positions, half-integers, a count not a multiple of 4, groups of four
 * straddling the edges or wholly outside), with prefetch positions that include NaN and
 * far-off ones. */
START_TEST(test_sample_f32_matches)
{
    enum { NX = 29, NY = 19, N = 20003 };
    static float img[NX * NY], out[N], fp[N];
    static double x[N], y[N], v[N];
    unsigned long long s = 7;
    for (int i = 0; i < NX * NY; i++)
        img[i] = (float)(1e3 * rnd(&s) - 300.0);
    const uint32_t snan = 0x7fa00000u;
    memcpy(&img[5 * NX + 7], &snan, sizeof snan);
    img[11 * NX + 20] = NAN;
    img[0] = INFINITY;
    img[NX * NY - 1] = -INFINITY;
    for (int i = 0; i < N; i++) {
        x[i] = -1.0 + rnd(&s) * (NX + 1.0);
        y[i] = -1.0 + rnd(&s) * (NY + 1.0);
        if (i % 5 == 0)
            x[i] = floor(x[i] * 2.0) / 2.0;   /* half-integers: nearest's rounding edges */
        if (i % 97 == 0)
            y[i] = NAN;
        if (i % 89 == 0)
            x[i] = -1e30;
        if (i >= 400 && i < 448)
            x[i] = -5.0;   /* whole groups of four outside */
    }
    rp_plane p = plane_of(img, RP_F32, NX, NY);
    for (int nearest = 0; nearest < 2; nearest++) {
        rp_kernel *k = kernel_or_die(nearest ? RP_NEAREST : RP_BILINEAR, &p);
        rp_kernel_sample(k, N, x, y, v);
        for (int withfp = 0; withfp < 2; withfp++) {
            memset(out, 0, sizeof out);
            memset(fp, 0xff, sizeof fp);
            long fin = rp_kernel_sample_f32(k, N, x, y, out, withfp ? fp : NULL, y, x, N);
            if (fin < 0) {   /* bilinear on a CPU without AVX2: no fused path */
                ck_assert(!nearest);
                continue;
            }
            long want = 0;
            for (int i = 0; i < N; i++) {
                const float r = (float)v[i];
                uint32_t a, b;
                memcpy(&a, &out[i], sizeof a);
                memcpy(&b, &r, sizeof b);
                if (nearest || !isfinite(v[i]))
                    ck_assert_msg(a == b || (!nearest && isnan(v[i]) && isnan(out[i])),
                                  "%s at (%.17g, %.17g): %08x, want %08x",
                                  nearest ? "nearest" : "bilinear", x[i], y[i], a, b);
                else
                    ck_assert_msg(fabs((double)out[i] - v[i]) <= bilinear_f32_bound(img, NX, NY,
                                                                                    x[i], y[i]),
                                  "bilinear at (%.17g, %.17g): %.9g, double arithmetic %.17g",
                                  x[i], y[i], (double)out[i], v[i]);
                want += isfinite(v[i]) != 0;
                if (withfp)
                    ck_assert(fp[i] == (isfinite(v[i]) ? 1.0f : 0.0f));
            }
            ck_assert_int_eq(fin, want);
            /* One position a call (the point function of the tail) gives the batch's
             * bits, footprint and count. */
            for (int i = 0; i < 3000; i++) {
                float o1 = -1.0f, f1 = -1.0f;
                long c1 = rp_kernel_sample_f32(k, 1, x + i, y + i, &o1, withfp ? &f1 : NULL,
                                               NULL, NULL, 0);
                ck_assert_msg(memcmp(&o1, &out[i], sizeof o1) == 0,
                              "%s at (%.17g, %.17g): alone %.9g, in the batch %.9g",
                              nearest ? "nearest" : "bilinear", x[i], y[i], (double)o1,
                              (double)out[i]);
                ck_assert_int_eq(c1, isfinite(out[i]) != 0);
                if (withfp)
                    ck_assert(f1 == fp[i]);
            }
        }
        rp_kernel_free(k);
    }
}
END_TEST

/* The nx x ny float plane of test_sample_f32_rows and test_sample_f32_fused: pixels
 * 2e3 rnd - 700 drawn from s, a signalling NaN (0x7fa00000) at (41, 30), a quiet NaN at
 * (17, 52) and the infinity inf at (60, 20) (0-based column, row). */
static void special_plane_f32(float *img, int nx, int ny, float inf, unsigned long long *s)
{
    for (int i = 0; i < nx * ny; i++)
        img[i] = (float)(2e3 * rnd(s) - 700.0);
    const uint32_t snan = 0x7fa00000u;
    memcpy(&img[30 * nx + 41], &snan, sizeof snan);
    img[52 * nx + 17] = NAN;
    img[20 * nx + 60] = inf;
}

/* The offset (u, w) from pixel (48, 35) rotated by 20 deg: the position (x, y). */
static void rotated20(double u, double w, double *x, double *y)
{
    const double c = cos(20.0 * M_PI / 180.0), sn = sin(20.0 * M_PI / 180.0);
    *x = 48.0 + c * u - sn * w;
    *y = 35.0 + sn * u + c * w;
}

/* The same on whole rows of a grid rotated by 20 deg over a 97 x 71 float plane (the
 * layout rp_reproject hands the fused samplers: most groups of 8 or 16 positions wholly
 * inside and away from the edges, where the vector paths run; rows of 101 positions, not
 * a multiple of 16), with a quiet NaN, a signalling NaN and an infinity inside: for
 * nearest the float32 bits of rp_kernel_sample's values narrowed, for bilinear the bits
 * of the point function (one position a call) and values within bilinear_f32_bound of
 * rp_kernel_sample's; the footprint and the count of finite values. */
START_TEST(test_sample_f32_rows)
{
    enum { NX = 97, NY = 71, W = 101, H = 80, N = W * H };
    static float img[NX * NY], out[N], fp[N];
    static double x[N], y[N], v[N];
    unsigned long long s = 11;
    special_plane_f32(img, NX, NY, -INFINITY, &s);
    for (int r = 0; r < H; r++)
        for (int q = 0; q < W; q++)
            rotated20(0.93 * q - 46.0, 0.93 * r - 37.0, &x[r * W + q], &y[r * W + q]);
    rp_plane p = plane_of(img, RP_F32, NX, NY);
    for (int nearest = 0; nearest < 2; nearest++) {
        rp_kernel *k = kernel_or_die(nearest ? RP_NEAREST : RP_BILINEAR, &p);
        rp_kernel_sample(k, N, x, y, v);
        long fin = 0, want = 0;
        for (int r = 0; r < H; r++) {
            const long f = rp_kernel_sample_f32(k, W, x + r * W, y + r * W, out + r * W,
                                                fp + r * W, x + r * W, y + r * W, W);
            if (f < 0) {   /* bilinear on a CPU without AVX2: no fused path */
                ck_assert(!nearest);
                break;
            }
            fin += f;
        }
        if (fin == 0 && !nearest) {
            rp_kernel_free(k);
            continue;
        }
        for (int i = 0; i < N; i++) {
            const float r = (float)v[i];
            float o1 = -1.0f;
            rp_kernel_sample_f32(k, 1, x + i, y + i, &o1, NULL, NULL, NULL, 0);
            ck_assert_msg(memcmp(&o1, &out[i], sizeof o1) == 0,
                          "%s at (%.17g, %.17g): alone %.9g, in the row %.9g",
                          nearest ? "nearest" : "bilinear", x[i], y[i], (double)o1,
                          (double)out[i]);
            if (nearest || !isfinite(v[i]))
                ck_assert_msg(memcmp(&r, &out[i], sizeof r) == 0
                              || (!nearest && isnan(v[i]) && isnan(out[i])),
                              "%s at (%.17g, %.17g): %.9g, want %.9g",
                              nearest ? "nearest" : "bilinear", x[i], y[i], (double)out[i],
                              v[i]);
            else
                ck_assert_msg(fabs((double)out[i] - v[i])
                                  <= bilinear_f32_bound(img, NX, NY, x[i], y[i]),
                              "bilinear at (%.17g, %.17g): %.9g, double arithmetic %.17g",
                              x[i], y[i], (double)out[i], v[i]);
            want += isfinite(v[i]) != 0;
            ck_assert(fp[i] == (isfinite(v[i]) ? 1.0f : 0.0f));
        }
        ck_assert_int_eq(fin, want);
        ck_assert(want > N / 2 && want < N);
        rp_kernel_free(k);
    }
}
END_TEST

/* rp_kernel_sample_f32 with and without its gathering samplers (rp_kernel_f32_gathers;
 * on Intel CPUs with AVX-512F the two runs take fused_*_avx512g and fused_*_avx512,
 * elsewhere the same path twice) gives the same bits, footprints and counts, for nearest
 * and bilinear: on the 97 x 71 float plane of test_sample_f32_rows (quiet and
 * signalling NaNs, an infinity) and one with a patch of FLT_MAX (bilinear's sums
 * overflowing), along the rows of a grid rotated by 20 deg running over the image's
 * edges (the footprint's edges inside groups of 16, groups on the image's first and last
 * rows and columns, groups wholly outside) in calls of 1 to 40 positions (every n % 16),
 * and at random positions (NaN, far-off, half-integers).  rp_kernel_f32_strip is 0 with
 * the gathers off, and 0 or 128 with them on: 128 exactly where the CPU is an Intel one
 * with AVX-512F (kernels.h). */
START_TEST(test_sample_f32_gathers)
{
    enum { NX = 97, NY = 71, W = 131, H = 90, N = W * H };
    static float img[NX * NY], on[N], off[N], fpon[N], fpoff[N];
    static double x[N], y[N];
    unsigned long long s = 31;
    special_plane_f32(img, NX, NY, INFINITY, &s);
    for (int plane = 0; plane < 2; plane++) {
        if (plane == 1)
            for (int j = 0; j < 9; j++)
                for (int i = 80; i < NX; i++)
                    img[j * NX + i] = FLT_MAX;
        rp_plane p = plane_of(img, RP_F32, NX, NY);
        for (int layout = 0; layout < 2; layout++) {
            for (int i = 0; i < N; i++) {
                if (layout == 0) {
                    rotated20(0.83 * (i % W) - 56.0, 0.83 * (i / W) - 40.0, &x[i], &y[i]);
                    continue;
                }
                x[i] = -2.0 + rnd(&s) * (NX + 3.0);
                y[i] = -2.0 + rnd(&s) * (NY + 3.0);
                if (i % 7 == 0)
                    y[i] = floor(y[i] * 2.0) / 2.0;
                if (i % 61 == 0)
                    x[i] = NAN;
                if (i % 83 == 0)
                    y[i] = 1e300;
            }
            for (int nearest = 0; nearest < 2; nearest++) {
                rp_kernel *k = kernel_or_die(nearest ? RP_NEAREST : RP_BILINEAR, &p);
                long fon = 0, foff = 0;
                int had = 1;
                for (int g = 0; g < 2; g++) {
                    const int was = rp_kernel_f32_gathers(g);
                    ck_assert_int_eq(was, g == 0);   /* the default is on, restored below */
                    const size_t strip = rp_kernel_f32_strip(k);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(RP_NO_AVX2)
                    const int want = g && (nearest || __builtin_cpu_supports("avx2"))
                                     && __builtin_cpu_supports("avx512f")
                                     && __builtin_cpu_is("intel");
#else
                    const int want = 0;
#endif
                    ck_assert_uint_eq(strip, want ? 128u : 0u);
                    float *o = g ? on : off, *f = g ? fpon : fpoff;
                    long *fin = g ? &fon : &foff;
                    memset(o, 0, sizeof on);
                    memset(f, 0xff, sizeof fpon);
                    /* calls of 1, 2, ... 40 positions, the prefetch positions those of
                     * the next call (NaN and far-off ones in layout 1) */
                    size_t m = 0, c = 1;
                    while (m < N) {
                        const size_t len = c < N - m ? c : N - m;
                        const size_t pn = m + 2 * len <= N ? len : 0;
                        const long r = rp_kernel_sample_f32(k, len, x + m, y + m, o + m, f + m,
                                                            pn ? x + m + len : NULL,
                                                            pn ? y + m + len : NULL, pn);
                        if (r < 0) {   /* bilinear on a CPU without AVX2: no fused path */
                            ck_assert(!nearest);
                            had = 0;
                            break;
                        }
                        *fin += r;
                        m += len;
                        c = c % 40 + 1;
                    }
                }
                rp_kernel_f32_gathers(1);
                if (had) {
                    for (int i = 0; i < N; i++) {
                        ck_assert_msg(memcmp(&on[i], &off[i], sizeof on[i]) == 0,
                                      "%s at (%.17g, %.17g): %.9g with gathers, %.9g without",
                                      nearest ? "nearest" : "bilinear", x[i], y[i],
                                      (double)on[i], (double)off[i]);
                        ck_assert(fpon[i] == fpoff[i]);
                        ck_assert(fpon[i] == (isfinite(on[i]) ? 1.0f : 0.0f));
                    }
                    ck_assert_int_eq(fon, foff);
                    ck_assert(fon > N / 4 && fon < N);
                }
                rp_kernel_free(k);
            }
        }
    }
}
END_TEST

/* rp_kernel_sample_f32 for lanczos3 (the fused path of sample_lanczos3_f32_fma, where
 * rp_kernel_fma says the kernel has it) and for bicubic from float coefficients
 * (rp_kernel_new_f32; the fused paths of the AVX2 and AVX-512 samplers, valgrind taking
 * the AVX2 one) gives the float32 bits of rp_kernel_sample's values for the same batch
 * narrowed as engine/sky/reproject.c narrows them, (float)v, NaN quiet; footprint 1.0f
 * where v is finite in double and the count of those, a finite v beyond FLT_MAX
 * included (it narrows to an infinity): on a 97 x 71 float plane with a quiet NaN, a
 * signalling NaN (0x7fa00000), an infinity, a 4 x 3 NaN hole (lanczos3 renormalised
 * around it, NaN inside) and a patch of FLT_MAX (lanczos3's sums beyond FLT_MAX: the
 * point function in double), along the rows of a grid rotated by 20 deg that runs over
 * the edges (rows of 101 positions: groups inside, at the edges and outside, a tail of
 * 1), with the prefetch hints of the row 8 ahead, and at random positions (NaN, far-off
 * and half-integer ones, whole groups outside, n not a multiple of 4, prefetch positions
 * NaN and far-off), with and without a footprint.  Where the kernel has no fused path
 * (lanczos3 without FMA, -DRP_NO_AVX2), -1 and nothing written. */
START_TEST(test_sample_f32_fused)
{
    enum { NX = 97, NY = 71, W = 101, H = 80, N = W * H };
    static float img[NX * NY], out[N], fp[N];
    static double x[N], y[N], v[N];
    unsigned long long s = 23;
    special_plane_f32(img, NX, NY, INFINITY, &s);
    for (int j = 40; j < 43; j++)
        for (int i = 70; i < 74; i++)
            img[j * NX + i] = NAN;
    for (int j = 10; j < 18; j++)
        for (int i = 15; i < 27; i++)
            img[j * NX + i] = FLT_MAX;
    rp_plane p = plane_of(img, RP_F32, NX, NY);
    for (int bicubic = 0; bicubic < 2; bicubic++)
    for (int layout = 0; layout < 2; layout++) {
        for (int r = 0; r < H; r++)
            for (int q = 0; q < W; q++) {
                const int i = r * W + q;
                if (layout == 0) {
                    rotated20(1.03 * q - 52.0, 1.03 * r - 41.0, &x[i], &y[i]);
                    continue;
                }
                x[i] = -2.0 + rnd(&s) * (NX + 3.0);
                y[i] = -2.0 + rnd(&s) * (NY + 3.0);
                if (i % 5 == 0)
                    x[i] = floor(x[i] * 2.0) / 2.0;
                if (i % 97 == 0)
                    y[i] = NAN;
                if (i % 89 == 0)
                    x[i] = -1e30;
                if (i >= 400 && i < 448)
                    x[i] = -5.0;
            }
        /* layout 1: one batch of N - 3 positions; layout 0: rows, as rp_reproject */
        const int rows = layout == 0 ? H : 1, rw = layout == 0 ? W : N - 3;
        rp_kernel *k = bicubic ? rp_kernel_new_f32(RP_BICUBIC, &p, NULL, 0)
                               : kernel_or_die(RP_LANCZOS3, &p);
        ck_assert_ptr_nonnull(k);
        /* lanczos3: whether it has the path; bicubic: whether the first call took one */
        int has = bicubic ? -1 : rp_kernel_fma(k);
        for (int r = 0; r < rows; r++)
            rp_kernel_sample(k, (size_t)rw, x + r * rw, y + r * rw, v + r * rw);
        for (int withfp = 0; withfp < 2; withfp++) {
            memset(out, 0, sizeof out);
            memset(fp, 0xff, sizeof fp);
            long fin = 0, want = 0, big = 0;
            for (int r = 0; r < rows; r++) {
                const size_t pn = r + 8 < rows ? (size_t)rw : layout == 1 ? (size_t)rw : 0;
                const double *pfx = layout == 0 ? x + (r + 8) * rw : y;
                const double *pfy = layout == 0 ? y + (r + 8) * rw : x;
                const long f = rp_kernel_sample_f32(k, (size_t)rw, x + r * rw, y + r * rw,
                                                    out + r * rw, withfp ? fp + r * rw : NULL,
                                                    pn ? pfx : NULL, pn ? pfy : NULL, pn);
                if (has < 0)
                    has = f >= 0;
                if (!has) {
                    ck_assert_int_eq(f, -1);
                    ck_assert(out[r * rw] == 0.0f && out[(r + 1) * rw - 1] == 0.0f);
                    continue;
                }
                ck_assert(f >= 0);
                fin += f;
            }
            if (!has)
                break;
            for (int i = 0; i < rows * rw; i++) {
                const float r = (float)v[i];
                ck_assert_msg(memcmp(&r, &out[i], sizeof r) == 0,
                              "%s at (%.17g, %.17g): %.9g, want %.9g",
                              bicubic ? "bicubic" : "lanczos3", x[i], y[i], (double)out[i],
                              v[i]);
                const int f = isfinite(v[i]) != 0;
                want += f;
                big += f && isinf(out[i]);
                if (withfp)
                    ck_assert(fp[i] == (f ? 1.0f : 0.0f));
            }
            ck_assert_int_eq(fin, want);
            ck_assert(want > rows * rw / 2 && want < rows * rw);
            if (layout == 0 && !bicubic)
                ck_assert(big > 0);   /* the FLT_MAX patch: finite, narrowed to infinity */
        }
        rp_kernel_free(k);
    }
}
END_TEST

/* ---- edges, arguments --------------------------------------------------------------- */

/* Every kernel is defined on [-0.5, n - 0.5] of each axis and NaN beyond or for a NaN
 * position. */
START_TEST(test_valid_range)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    rp_plane p = plane_of((void *)img5, RP_F64, 5, 5);
    for (int q = 0; q < 4; q++) {
        rp_kernel *k = kernel_or_die(ms[q], &p);
        ck_assert(isfinite(sample1(k, -0.5, 2.0)));
        ck_assert(isfinite(sample1(k, 4.5, 2.0)));
        ck_assert(isfinite(sample1(k, 2.0, -0.5)));
        ck_assert(isfinite(sample1(k, 2.0, 4.5)));
        ck_assert(isnan(sample1(k, nextafter(-0.5, -1.0), 2.0)));
        ck_assert(isnan(sample1(k, nextafter(4.5, 5.0), 2.0)));
        ck_assert(isnan(sample1(k, 2.0, -0.75)));
        ck_assert(isnan(sample1(k, 2.0, 7.0)));
        ck_assert(isnan(sample1(k, NAN, 2.0)));
        ck_assert(isnan(sample1(k, 2.0, NAN)));
        ck_assert(isnan(sample1(k, INFINITY, 2.0)));
        rp_kernel_free(k);
    }
}
END_TEST

START_TEST(test_bad_arguments)
{
    char err[128] = "";
    rp_plane p = plane_of((void *)img5, RP_F64, 5, 5);
    ck_assert_ptr_null(rp_kernel_new(RP_EXACT, &p, err, sizeof err));
    ck_assert_msg(strstr(err, "method") != NULL, "err: %s", err);
    ck_assert_ptr_null(rp_kernel_new((rp_method)99, &p, err, sizeof err));
    ck_assert_ptr_null(rp_kernel_new(RP_BILINEAR, NULL, err, sizeof err));
    rp_plane bad = plane_of((void *)img5, RP_F64, 0, 5);
    ck_assert_ptr_null(rp_kernel_new(RP_BICUBIC, &bad, err, sizeof err));
    bad = plane_of(NULL, RP_F64, 5, 5);
    ck_assert_ptr_null(rp_kernel_new(RP_LANCZOS3, &bad, NULL, 0));
    rp_kernel_free(NULL);
}
END_TEST

/* A one-pixel image: every kernel returns its value over [-0.5, 0.5]^2. */
START_TEST(test_single_pixel)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    double v = 7.25;
    rp_plane p = plane_of(&v, RP_F64, 1, 1);
    for (int q = 0; q < 4; q++) {
        rp_kernel *k = kernel_or_die(ms[q], &p);
        ck_assert_double_eq_tol(sample1(k, -0.5, 0.5), 7.25, 1e-12);
        ck_assert_double_eq_tol(sample1(k, 0.3, -0.1), 7.25, 1e-12);
        rp_kernel_free(k);
    }
}
END_TEST

/* ---- constant and ramp images ------------------------------------------------------- */

START_TEST(test_constant_image)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    enum { NX = 13, NY = 9, N = 2000 };
    double img[NX * NY], x[N], y[N], out[N];
    for (int i = 0; i < NX * NY; i++)
        img[i] = -3.5;
    unsigned long long s = 12345;
    random_positions(x, y, N, NX, NY, &s);
    rp_plane p = plane_of(img, RP_F64, NX, NY);
    for (int q = 0; q < 4; q++) {
        rp_kernel *k = kernel_or_die(ms[q], &p);
        rp_kernel_sample(k, N, x, y, out);
        for (int i = 0; i < N; i++)
            ck_assert_msg(fabs(out[i] + 3.5) <= 1e-12, "method %d at (%g, %g): %.17g",
                          (int)ms[q], x[i], y[i], out[i]);
        rp_kernel_free(k);
    }
}
END_TEST

/* A linear ramp v = 2x - 0.5y + 1: bilinear and bicubic reproduce it in the interior
 * (a cubic B-spline reproduces polynomials up to degree 3; the mirror boundary and edge
 * padding disturb it only near the edges, decaying as |z|^d, z = sqrt(3) - 2: samples
 * are kept 24 pixels, |z|^24 = 2e-14, from the edges).
 * Renormalised Lanczos-3 does not reproduce ramps exactly: its first moment is not zero
 * except at t = 0 and t = 1/2, and the error is at most 0.02 pixel times the slope
 * (measured with the untabulated kernel). */
START_TEST(test_ramp)
{
    enum { NX = 64, NY = 64, N = 4000 };
    static double img[NX * NY];
    double x[N], y[N], out[N];
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            img[j * NX + i] = 2.0 * i - 0.5 * j + 1.0;
    unsigned long long s = 777;
    for (int i = 0; i < N; i++) {
        x[i] = 24.0 + rnd(&s) * 16.0;
        y[i] = 24.0 + rnd(&s) * 16.0;
    }
    x[0] = 30.0, y[0] = 30.0;
    x[1] = 30.5, y[1] = 31.5;
    rp_plane p = plane_of(img, RP_F64, NX, NY);
    rp_kernel *kb = kernel_or_die(RP_BILINEAR, &p), *kc = kernel_or_die(RP_BICUBIC, &p);
    rp_kernel *kl = kernel_or_die(RP_LANCZOS3, &p);
    rp_kernel_sample(kb, N, x, y, out);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq_tol(out[i], 2.0 * x[i] - 0.5 * y[i] + 1.0, 1e-12);
    rp_kernel_sample(kc, N, x, y, out);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq_tol(out[i], 2.0 * x[i] - 0.5 * y[i] + 1.0, 1e-9);
    rp_kernel_sample(kl, N, x, y, out);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double e = fabs(out[i] - (2.0 * x[i] - 0.5 * y[i] + 1.0));
        worst = e > worst ? e : worst;
    }
    ck_assert_msg(worst <= 0.02 * (2.0 + 0.5), "lanczos3 ramp error %g", worst);
    ck_assert_double_eq_tol(out[0], 2.0 * 30.0 - 0.5 * 30.0 + 1.0, 1e-12);
    ck_assert_double_eq_tol(out[1], 2.0 * 30.5 - 0.5 * 31.5 + 1.0, 1e-6);
    rp_kernel_free(kb);
    rp_kernel_free(kc);
    rp_kernel_free(kl);
}
END_TEST

/* ---- Lanczos table error ------------------------------------------------------------ */

/* The tabulated kernel against the direct one on a random image: linear interpolation in
 * a table of 4096 samples per unit misses each 1-D weight by at most
 * eps = h^2/8 max|L''| = 2.73e-8 (h = 1/4096, max|L''| = 3.655 at 0); through 6 + 6
 * weights of absolute sum <= 1.3 each, the normalised sample moves by at most
 * ~ 2 * 6 * eps * 1.3 * 2 max|v| = 31 eps max|v|; measured: ~4 eps max|v|. */
START_TEST(test_lanczos3_table_error)
{
    enum { NX = 30, NY = 20, N = 20000 };
    static double img[NX * NY];
    static double x[N], y[N], out[N];
    unsigned long long s = 99;
    for (int i = 0; i < NX * NY; i++)
        img[i] = 2.0 * rnd(&s) - 1.0;
    random_positions(x, y, N, NX, NY, &s);
    rp_plane p = plane_of(img, RP_F64, NX, NY);
    rp_kernel *k = kernel_or_die(RP_LANCZOS3, &p);
    rp_kernel_sample(k, N, x, y, out);
    const double eps = 2.73e-8;
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double e = fabs(out[i] - lanczos3_ref(img, NX, NY, x[i], y[i]));
        worst = e > worst ? e : worst;
    }
    fprintf(stderr, "lanczos3 table: max |tabulated - direct| = %.3e (eps = %.3e, max|v| = 1)\n",
            worst, eps);
    ck_assert_msg(worst <= 31.0 * eps, "lanczos3 table error %.3e", worst);
    rp_kernel_free(k);
}
END_TEST

/* ---- float32 and float64 planes ----------------------------------------------------- */

/* Fills the n pixels of f (float32) and d (the same values as doubles) with values
 * uniform in [lo, lo + span) from the generator s, then makes pixel `hole` NaN in both. */
static void random_image(float *f, double *d, int n, int hole, double lo, double span,
                         unsigned long long *s)
{
    for (int i = 0; i < n; i++) {
        f[i] = (float)(span * rnd(s) + lo);
        d[i] = f[i];
    }
    f[hole] = NAN;
    d[hole] = NAN;
}

/* The same values as float32 and float64 planes give identical samples for nearest,
 * bilinear and bicubic (all arithmetic in double), and lanczos3 samples within
 * lanczos3_f32_bound of each other (float arithmetic for float planes), NaN at the same
 * positions. */
START_TEST(test_f32_f64_agree)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    enum { NX = 37, NY = 23, N = 5000 };
    static double d[NX * NY], x[N], y[N], o64[N], o32[N];
    static float f[NX * NY];
    unsigned long long s = 4242;
    random_image(f, d, NX * NY, 5 * NX + 7, -20.0, 100.0, &s);
    for (int i = 0; i < N; i++) {
        x[i] = -0.7 + rnd(&s) * (NX + 0.4);
        y[i] = -0.7 + rnd(&s) * (NY + 0.4);
    }
    rp_plane p64 = plane_of(d, RP_F64, NX, NY), p32 = plane_of(f, RP_F32, NX, NY);
    for (int q = 0; q < 4; q++) {
        rp_kernel *k64 = kernel_or_die(ms[q], &p64), *k32 = kernel_or_die(ms[q], &p32);
        rp_kernel_sample(k64, N, x, y, o64);
        rp_kernel_sample(k32, N, x, y, o32);
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            const double tol = ms[q] == RP_LANCZOS3 && !isnan(o64[i])
                               ? lanczos3_f32_bound(d, NX, NY, x[i], y[i], o64[i]) : 0.0;
            if (tol > 0.0 && fabs(o64[i] - o32[i]) / tol > worst)
                worst = fabs(o64[i] - o32[i]) / tol;
            ck_assert_msg((isnan(o64[i]) && isnan(o32[i])) || o64[i] == o32[i]
                          || fabs(o64[i] - o32[i]) <= tol,
                          "method %d at (%g, %g): %.17g vs %.17g (tolerance %.3g)", (int)ms[q],
                          x[i], y[i], o64[i], o32[i], tol);
        }
        if (ms[q] == RP_LANCZOS3)
            fprintf(stderr, "lanczos3 f32 vs f64: worst |difference| / bound = %.3f\n", worst);
        rp_kernel_free(k64);
        rp_kernel_free(k32);
    }
}
END_TEST

/* Nearest and bilinear sample groups of four positions in vector lanes (kernels.c
 * RP_SAMPLER4) and single positions with the point functions: a batch and the same
 * positions one at a time agree bit for bit, for both pixel types, with groups wholly
 * inside the valid range, groups straddling its edges, positions on the edges and on
 * nearest's rounding boundaries, NaN positions and a NaN pixel; so do bicubic and
 * lanczos3, except lanczos3 of the float plane where rp_kernel_fma says the kernel
 * uses fused multiply-adds: there within lanczos3_fma_bound (the same bits where the
 * support holds the NaN pixel). */
START_TEST(test_batch_matches_single)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    enum { NX = 41, NY = 29, N = 4003 };
    static double d[NX * NY], x[N], y[N], ob[N];
    static float f[NX * NY];
    unsigned long long s = 777;
    random_image(f, d, NX * NY, 7 * NX + 3, -10.0, 50.0, &s);
    for (int i = 0; i < N; i++) {
        double u = rnd(&s);
        x[i] = -0.6 + rnd(&s) * (NX + 0.2);
        y[i] = -0.6 + rnd(&s) * (NY + 0.2);
        if (u < 0.1)   /* on a rounding boundary or an edge */
            x[i] = floor(x[i]) + 0.5;
        else if (u < 0.15)
            y[i] = u < 0.125 ? -0.5 : NY - 0.5;
        else if (u < 0.16)
            x[i] = NAN;
    }
    /* the third: the float plane through rp_kernel_new_f32 (bicubic: float coefficients) */
    rp_plane ps[3] = { plane_of(d, RP_F64, NX, NY), plane_of(f, RP_F32, NX, NY),
                       plane_of(f, RP_F32, NX, NY) };
    for (int t = 0; t < 3; t++) {
        for (int q = 0; q < 4; q++) {
            rp_kernel *k = t < 2 ? kernel_or_die(ms[q], &ps[t]) : kernel_f32_or_die(ms[q], &ps[t]);
            rp_kernel_sample(k, N, x, y, ob);
            const int fused = rp_kernel_fma(k);
            ck_assert(!fused || (t >= 1 && ms[q] == RP_LANCZOS3));
            for (int i = 0; i < N; i++) {
                double v = sample1(k, x[i], y[i]);
                if (fused && !isnan(v) && !isnan(ob[i])) {
                    const double tol = lanczos3_fma_bound(d, NX, NY, x[i], y[i], v);
                    ck_assert_msg(v == ob[i] || fabs(v - ob[i]) <= tol,
                                  "fused lanczos3 at (%.17g, %.17g): batch %.17g, single %.17g,"
                                  " bound %.3g", x[i], y[i], ob[i], v, tol);
                    continue;
                }
                ck_assert_msg(memcmp(&v, &ob[i], sizeof v) == 0 || (isnan(v) && isnan(ob[i])),
                              "method %d, dtype %d at (%.17g, %.17g): batch %.17g, single %.17g",
                              (int)ms[q], t, x[i], y[i], ob[i], v);
            }
            rp_kernel_free(k);
        }
    }
}
END_TEST

/* The FMA sampler of float32 planes against the point function, position by position,
 * on planes chosen to strain lanczos3_fma_bound: uniform noise about an offset (results
 * far from zero), zero-mean noise of +-1e3 (results near zero out of large terms), a
 * step of 1e4 along a slanted line (the ringing beside a steep edge), a checkerboard of
 * +-1e6 and a ramp to 3e7; positions random over the interior and on a grid rotated by
 * 20 deg.  Each difference within the bound; the worst ratio is printed.  Where the
 * kernel does not fuse (rp_kernel_fma 0: a CPU without AVX2 and FMA, -DRP_NO_AVX2),
 * the same bits. */
START_TEST(test_lanczos3_fma_bound)
{
    enum { NX = 67, NY = 53, N = 8003, PLANES = 5 };
    static float f[NX * NY];
    static double d[NX * NY], x[N], y[N], ob[N];
    unsigned long long s = 99;
    double worst = 0.0;
    for (int pl = 0; pl < PLANES; pl++) {
        for (int j = 0; j < NY; j++)
            for (int i = 0; i < NX; i++) {
                double v;
                switch (pl) {
                case 0: v = 500.0 + 10.0 * rnd(&s); break;
                case 1: v = 2e3 * rnd(&s) - 1e3; break;
                case 2: v = (double)i * 0.36 - (double)j + 7.0 > 0.0 ? 1e4 : 0.0; break;
                case 3: v = ((i + j) % 2 ? 1e6 : -1e6) * (1.0 + 1e-3 * rnd(&s)); break;
                default: v = 1e4 * (double)(i + NX * j) + rnd(&s); break;
                }
                f[j * NX + i] = (float)v;
                d[j * NX + i] = f[j * NX + i];
            }
        for (int i = 0; i < N; i++) {
            if (i % 2) {
                x[i] = 2.0 + rnd(&s) * (NX - 5.0);
                y[i] = 2.0 + rnd(&s) * (NY - 5.0);
            } else {   /* a 20 deg rotated grid, rows of 61 */
                const double a = 20.0 * M_PI / 180.0, gi = (double)((i / 2) % 61) * 0.83;
                const double gj = (double)((i / 2) / 61) * 0.3;
                x[i] = 12.0 + gi * cos(a) - gj * sin(a) + 0.01 * (double)pl;
                y[i] = 4.0 + gi * sin(a) + gj * cos(a);
            }
        }
        rp_plane p = plane_of(f, RP_F32, NX, NY);
        rp_kernel *k = kernel_or_die(RP_LANCZOS3, &p);
        const int fused = rp_kernel_fma(k);
        rp_kernel_sample(k, N, x, y, ob);
        for (int i = 0; i < N; i++) {
            const double v = sample1(k, x[i], y[i]);
            const double tol = fused ? lanczos3_fma_bound(d, NX, NY, x[i], y[i], v) : 0.0;
            ck_assert_msg(isfinite(v) && (v == ob[i] || fabs(v - ob[i]) <= tol),
                          "plane %d at (%.17g, %.17g): batch %.17g, single %.17g, bound %.3g",
                          pl, x[i], y[i], ob[i], v, tol);
            if (tol > 0.0 && fabs(v - ob[i]) / tol > worst)
                worst = fabs(v - ob[i]) / tol;
        }
        rp_kernel_free(k);
    }
    fprintf(stderr, "lanczos3 fused vs point: worst |difference| / bound = %.3f\n", worst);
}
END_TEST

/* ---- NaN locality ------------------------------------------------------------------- */

/* The check of test_bicubic_finite_path and test_bicubic_f32_finite_path on the plane a,
 * NX x NY pixels of type t (RP_F64 or RP_F32) filled by the caller, b a plane as large:
 * sets a's pixel (I0, J0) = (20, 7) to fill_missing's value for a lone NaN there
 * (lerp_at at the midpoint, both axes) and checks that the pixel type holds it exactly,
 * copies a into b with a NaN at that pixel, samples the kernels `make` builds on both at
 * N = 3001 positions drawn from s and checks that they agree bit for bit wherever the
 * 4x4 support misses the pixel, on more than 80% of the positions. */
static void bicubic_finite_path_check(void *a, void *b, rp_dtype t, int NX, int NY,
                                      rp_kernel *(*make)(rp_method, const rp_plane *),
                                      unsigned long long *s)
{
    enum { I0 = 20, J0 = 7, N = 3001 };
    static double x[N], y[N], oa[N], ob[N];
    double *ad = a, *bd = b;
    float *af = a, *bf = b;
#define PX(i) (t == RP_F64 ? ad[i] : (double)af[i])
    const int c = J0 * NX + I0;
    const double rv = PX(c - 1) + (PX(c + 1) - PX(c - 1)) * 1.0 / 2.0;
    const double cv = PX(c - NX) + (PX(c + NX) - PX(c - NX)) * 1.0 / 2.0;
    const double fill = 0.5 * (rv + cv);
    if (t == RP_F64)
        ad[c] = fill;
    else
        af[c] = (float)fill;
    ck_assert(PX(c) == fill);
#undef PX
    memcpy(b, a, (t == RP_F64 ? sizeof(double) : sizeof(float)) * (size_t)(NX * NY));
    if (t == RP_F64)
        bd[c] = NAN;
    else
        bf[c] = NAN;
    random_positions(x, y, N, NX - 1.0, NY - 1.0, s);
    rp_plane pa = plane_of(a, t, NX, NY), pb = plane_of(b, t, NX, NY);
    rp_kernel *ka = make(RP_BICUBIC, &pa), *kb = make(RP_BICUBIC, &pb);
    rp_kernel_sample(ka, N, x, y, oa);
    rp_kernel_sample(kb, N, x, y, ob);
    int compared = 0;
    for (int i = 0; i < N; i++) {
        if (fabs(x[i] - I0) <= 3.0 && fabs(y[i] - J0) <= 3.0)
            continue;   /* the support may hold the pixel */
        ck_assert_msg(memcmp(&oa[i], &ob[i], sizeof oa[i]) == 0,
                      "%dx%d at (%.17g, %.17g): finite plane %.17g, general path %.17g",
                      NX, NY, x[i], y[i], oa[i], ob[i]);
        compared++;
    }
    ck_assert_int_gt(compared, N * 8 / 10);
    rp_kernel_free(ka);
    rp_kernel_free(kb);
}

/* Bicubic prepares a plane with no missing pixel in two passes (kernels.c
 * bicubic_prefilter_finite) and one with a NaN by the general path, which first fills
 * the NaN with the mean of the linear interpolations along its row and its column
 * (fill_missing).  A finite plane holding that very value there has the same
 * coefficients, so the two kernels must agree bit for bit wherever the 4x4 support
 * misses the pixel.  Sizes 45 x 39, 44 x 17, 46 x 30, 47 x 14 and 40 x 230: padded
 * lines longer than the 32 terms of the truncated causal sum, every width modulo 4 (the
 * band of rows filtered in vector lanes, kernels.c bspline_band, transposes 4x4 blocks
 * and leaves the rest of a line to scalar code), row counts that leave partial bands,
 * and columns long enough for the anticausal pass in blocks (bspline_cols_finish). */
START_TEST(test_bicubic_finite_path)
{
    static const int sizes[5][2] = { { 45, 39 }, { 44, 17 }, { 46, 30 }, { 47, 14 }, { 40, 230 } };
    static double a[40 * 230], b[40 * 230];
    unsigned long long s = 4242;
    for (int t = 0; t < 5; t++) {
        const int NX = sizes[t][0], NY = sizes[t][1];
        for (int i = 0; i < NX * NY; i++)
            a[i] = 100.0 * rnd(&s) - 20.0;
        bicubic_finite_path_check(a, b, RP_F64, NX, NY, kernel_or_die, &s);
    }
}
END_TEST

/* The anticausal pass of the columns runs in blocks started 33 rows below each block
 * (kernels.c bspline_cols_finish) only on columns longer than 97 padded rows; rows are
 * always filtered whole.  A 40 x 300 plane and its transpose, 300 x 40 (columns short
 * enough to be filtered whole, rows filtered whole), must then give the same samples
 * at transposed positions, to the rounding of the two orders of the separable filters:
 * 1e-14 of the peak (5.7e-16 measured; blocks whose recursion read causal values where
 * it should read its own missed by 0.16). */
START_TEST(test_bicubic_column_blocks)
{
    enum { NX = 40, NY = 300, N = 20000 };
    static double a[NX * NY], b[NX * NY], x[N], y[N], oa[N], ob[N];
    unsigned long long s = 99;
    double peak = 0.0;
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++) {
            const double v = 50.0 + 40.0 * sin(0.07 * i + 0.05 * j) + 10.0 * rnd(&s);
            a[j * NX + i] = v;
            b[i * NY + j] = v;
            peak = fabs(v) > peak ? fabs(v) : peak;
        }
    random_positions(x, y, N, NX - 1.0, NY - 1.0, &s);
    rp_plane pa = plane_of(a, RP_F64, NX, NY), pb = plane_of(b, RP_F64, NY, NX);
    rp_kernel *ka = kernel_or_die(RP_BICUBIC, &pa), *kb = kernel_or_die(RP_BICUBIC, &pb);
    rp_kernel_sample(ka, N, x, y, oa);
    rp_kernel_sample(kb, N, y, x, ob);
    double worst = 0.0;
    for (int q = 0; q < N; q++)
        worst = fmax(worst, fabs(oa[q] - ob[q]));
    fprintf(stderr, "bicubic column blocks: max|diff|/peak %.3e\n", worst / peak);
    ck_assert_msg(worst <= 1e-14 * peak, "bicubic, plane against its transpose: %.3e of the peak",
                  worst / peak);
    rp_kernel_free(ka);
    rp_kernel_free(kb);
}
END_TEST

/* One NaN pixel at (NI, NJ) of a smooth 50x50 image.  Samples on a 1/4-pixel lattice:
 *  bicubic:  NaN exactly where the 4x4 support (image pixels floor(c) - 2 ..
 *            floor(c) + 1, c = x + 1) holds the NaN pixel; elsewhere finite, and farther
 *            than 12 pixels from it equal to the result without the NaN to 1e-9 of the
 *            peak (the filled value enters the global prefilter, damped as |z|^d);
 *  lanczos3: NaN only where the 6x6 support holds it, and there exactly where the NaN
 *            pixel carries more than half the kernel's weight (kernels.c LZ_MIN_WEIGHT;
 *            fractions within 1e-6 of 1/2 are not judged); outside the support
 *            bit-identical to the result without the NaN (the kernel is local). */
#define NI 20
#define NJ 23
START_TEST(test_nan_locality)
{
    enum { NX = 50, NY = 50, STEPS = 4 * NX + 1, N = STEPS * STEPS };
    static double clean[NX * NY], holed[NX * NY], x[N], y[N], o1[N], o2[N];
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            clean[j * NX + i] = holed[j * NX + i] =
                10.0 + 3.0 * sin(0.31 * i) * cos(0.17 * j) + 0.05 * i * j;
    holed[NJ * NX + NI] = NAN;
    for (int j = 0; j < STEPS; j++)
        for (int i = 0; i < STEPS; i++) {
            x[j * STEPS + i] = -0.5 + 0.25 * i;
            y[j * STEPS + i] = -0.5 + 0.25 * j;
        }
    rp_plane pc = plane_of(clean, RP_F64, NX, NY), ph = plane_of(holed, RP_F64, NX, NY);

    /* bicubic */
    rp_kernel *kc = kernel_or_die(RP_BICUBIC, &pc), *kh = kernel_or_die(RP_BICUBIC, &ph);
    rp_kernel_sample(kc, N, x, y, o1);
    rp_kernel_sample(kh, N, x, y, o2);
    long nnan = 0;
    double worst = 0.0;
    for (int q = 0; q < N; q++) {
        long fx = (long)floor(x[q] + 1.0), fy = (long)floor(y[q] + 1.0);
        int touches = NI >= fx - 2 && NI <= fx + 1 && NJ >= fy - 2 && NJ <= fy + 1;
        ck_assert_msg((isnan(o2[q]) != 0) == touches, "bicubic at (%g, %g): %g, support %s the NaN",
                      x[q], y[q], o2[q], touches ? "holds" : "misses");
        ck_assert(isfinite(o1[q]));
        nnan += isnan(o2[q]) != 0;
        double d = fmax(fabs(x[q] - NI), fabs(y[q] - NJ));
        if (d > 12.0 && fabs(o2[q] - o1[q]) > worst)
            worst = fabs(o2[q] - o1[q]);
    }
    ck_assert_int_eq(nnan, 16 * 16);   /* 4 supports x 4 lattice points per pixel, each axis */
    ck_assert_msg(worst <= 1e-9 * 30.0, "bicubic far from the NaN differs by %g", worst);
    rp_kernel_free(kc);
    rp_kernel_free(kh);

    /* lanczos3 */
    kc = kernel_or_die(RP_LANCZOS3, &pc);
    kh = kernel_or_die(RP_LANCZOS3, &ph);
    rp_kernel_sample(kc, N, x, y, o1);
    rp_kernel_sample(kh, N, x, y, o2);
    nnan = 0;
    for (int q = 0; q < N; q++) {
        long fx = (long)floor(x[q] + 1.0), fy = (long)floor(y[q] + 1.0);
        int touches = NI >= fx - 3 && NI <= fx + 2 && NJ >= fy - 3 && NJ <= fy + 2;
        ck_assert(isfinite(o1[q]));
        if (!touches)
            ck_assert_msg(o2[q] == o1[q], "lanczos3 at (%g, %g): %.17g vs %.17g", x[q], y[q],
                          o2[q], o1[q]);
        else {
            double wx = 0.0, wy = 0.0;
            for (long i = fx - 3; i < fx + 3; i++)
                wx += lanczos3_direct(x[q] - (double)i);
            for (long j = fy - 3; j < fy + 3; j++)
                wy += lanczos3_direct(y[q] - (double)j);
            double frac = lanczos3_direct(x[q] - NI) * lanczos3_direct(y[q] - NJ) / (wx * wy);
            if (fabs(frac - 0.5) > 1e-6)
                ck_assert_msg((isnan(o2[q]) != 0) == (frac > 0.5),
                              "lanczos3 at (%g, %g): %g with %.4f of the weight on the NaN",
                              x[q], y[q], o2[q], frac);
            nnan += isnan(o2[q]) != 0;
        }
    }
    /* On the 1/4-pixel lattice: offsets (0, +-1/4, +-1/2)^2 from the NaN pixel but the
     * four corners (+-1/2, +-1/2), where the NaN pixel has 0.37 of the weight. */
    ck_assert_int_eq(nnan, 21);
    ck_assert(isnan(sample1(kh, NI, NJ)));
    rp_kernel_free(kc);
    rp_kernel_free(kh);
}
END_TEST

/* NaN in columns 0-9: bicubic is NaN exactly where its support reaches column 9;
 * lanczos3 is NaN below x = 9.5, the pixel edge (where the finite columns carry exactly
 * half the weight), finite above, with no finite island inside the NaN
 * columns, and stays within the range of the finite pixels' neighbourhood. */
START_TEST(test_nan_region)
{
    enum { NX = 24, NY = 16 };
    double img[NX * NY];
    for (int j = 0; j < NY; j++)
        for (int i = 0; i < NX; i++)
            img[j * NX + i] = i < 10 ? NAN : 1.0 + 0.1 * i + 0.2 * j;
    rp_plane p = plane_of(img, RP_F64, NX, NY);
    rp_kernel *kc = kernel_or_die(RP_BICUBIC, &p), *kl = kernel_or_die(RP_LANCZOS3, &p);
    for (double xx = -0.5; xx <= NX - 0.5; xx += 0.125)
        for (double yy = -0.5; yy <= NY - 0.5; yy += 0.5) {
            long fx = (long)floor(xx + 1.0);
            double vc = sample1(kc, xx, yy), vl = sample1(kl, xx, yy);
            ck_assert((isnan(vc) != 0) == (fx - 2 <= 9));
            if (xx != 9.5)   /* exactly half the weight there: decided by rounding */
                ck_assert_msg((isnan(vl) != 0) == (xx < 9.5), "lanczos3 at (%g, %g): %g", xx,
                              yy, vl);
            if (isfinite(vl))
                ck_assert(vl > 1.0 && vl < 1.0 + 0.1 * NX + 0.2 * NY);
        }
    rp_kernel_free(kc);
    rp_kernel_free(kl);
}
END_TEST

/* An all-NaN image gives NaN everywhere; an infinite pixel counts as no data for
 * bicubic and lanczos3 (NaN near it, finite elsewhere) and propagates through bilinear
 * as it does in scipy. */
START_TEST(test_all_nan_and_inf)
{
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    double img[12];
    for (int i = 0; i < 12; i++)
        img[i] = NAN;
    rp_plane p = plane_of(img, RP_F64, 4, 3);
    for (int q = 0; q < 4; q++) {
        rp_kernel *k = kernel_or_die(ms[q], &p);
        for (double xx = -0.5; xx <= 3.5; xx += 0.25)
            ck_assert(isnan(sample1(k, xx, 1.3)));
        rp_kernel_free(k);
    }
    enum { NX = 30 };
    double ramp[NX * NX];
    for (int i = 0; i < NX * NX; i++)
        ramp[i] = (double)(i % NX) + 0.1 * (double)(i / NX);
    p = plane_of(ramp, RP_F64, NX, NX);
    rp_kernel *k0 = kernel_or_die(RP_BICUBIC, &p);
    double clean = sample1(k0, 20.5, 20.25);
    rp_kernel_free(k0);
    ramp[10 * NX + 10] = INFINITY;
    rp_kernel *kc = kernel_or_die(RP_BICUBIC, &p), *kl = kernel_or_die(RP_LANCZOS3, &p);
    rp_kernel *kb = kernel_or_die(RP_BILINEAR, &p);
    ck_assert(isnan(sample1(kc, 10.2, 9.7)));
    ck_assert(isnan(sample1(kl, 10.0, 10.0)));
    ck_assert(isinf(sample1(kb, 10.0, 10.0)));
    /* The filled value (row and column interpolation) is the ramp's own value. */
    ck_assert_double_eq_tol(sample1(kc, 20.5, 20.25), clean, 1e-12);
    ck_assert_double_eq_tol(sample1(kl, 20.5, 20.5), 20.5 + 2.05, 1e-6);
    ck_assert(isfinite(sample1(kl, 10.6, 10.0)));   /* the inf pixel holds 0.37 of the weight */
    rp_kernel_free(kc);
    rp_kernel_free(kl);
    rp_kernel_free(kb);
}
END_TEST

/* ---- bicubic from float coefficients (rp_kernel_new_f32) ----------------------------- */

/* Index p of an axis of length len mirrored with period 2 len - 2 (scipy's mirror rule,
 * any distance from the line). */
static long mirror_any(long p, long len)
{
    const long per = 2 * len - 2;
    p %= per;
    p = p < 0 ? p + per : p;
    return p < len ? p : per - p;
}

/* The bicubic coefficients of the nx x ny image `img`, computed directly rather than
 * recursively: the image edge-padded by one pixel (W = nx + 2, H = ny + 2), extended by
 * mirroring, convolved along each axis with the prefilter's impulse response
 * h(k) = sqrt(3) z^|k|, z = sqrt(3) - 2 (6 / (z^-1 + 4 + z) expanded), |k| <= 40
 * (|z|^41 < 1e-23); coef: W x H doubles, row-major. */
static void bspline_coef_direct(const double *img, long nx, long ny, double *coef)
{
    const long W = nx + 2, H = ny + 2, K = 40;
    const double z = sqrt(3.0) - 2.0;
    double h[41];
    for (long k = 0; k <= K; k++)
        h[k] = sqrt(3.0) * pow(fabs(z), (double)k) * (k % 2 ? -1.0 : 1.0);
    double *pad = malloc(sizeof(double) * (size_t)(W * H)), *rows = malloc(sizeof(double) * (size_t)(W * H));
    for (long j = 0; j < H; j++)
        for (long i = 0; i < W; i++) {
            const long si = i - 1 < 0 ? 0 : i - 1 >= nx ? nx - 1 : i - 1;
            const long sj = j - 1 < 0 ? 0 : j - 1 >= ny ? ny - 1 : j - 1;
            pad[j * W + i] = img[sj * nx + si];
        }
    for (long j = 0; j < H; j++)
        for (long i = 0; i < W; i++) {
            double s = 0.0;
            for (long k = -K; k <= K; k++)
                s += h[labs(k)] * pad[j * W + mirror_any(i + k, W)];
            rows[j * W + i] = s;
        }
    for (long j = 0; j < H; j++)
        for (long i = 0; i < W; i++) {
            double s = 0.0;
            for (long k = -K; k <= K; k++)
                s += h[labs(k)] * rows[mirror_any(j + k, H) * W + i];
            coef[j * W + i] = s;
        }
    free(pad);
    free(rows);
}

/* The cubic B-spline beta3(u) (Unser 1999, eq. (3)). */
static double beta3(double u)
{
    u = fabs(u);
    return u < 1.0 ? 2.0 / 3.0 - u * u + u * u * u / 2.0 : u < 2.0 ? (2.0 - u) * (2.0 - u) * (2.0 - u) / 6.0 : 0.0;
}

/* How far bicubic from float coefficients may lie from bicubic from the double ones at
 * (x, y) (kernels.h rp_kernel_new_f32: the coefficients rounded to float, u, and the
 * column sums in float, 5u): 6 u sum wx_i wy_j |c_ij| over the 4x4 support at padded
 * floor(x + 1) - 1 .. floor(x + 1) + 2 (mirrored at the ends), u = 2^-24, with c the
 * directly computed coefficients (bspline_coef_direct) and weights beta3; the factor
 * 1.25 covers the second-order terms, the double roundings and the reference's own. */
static double bicubic_f32_bound(const double *coef, long nx, long ny, double x, double y)
{
    const long W = nx + 2, H = ny + 2;
    const long fx = (long)floor(x + 1.0), fy = (long)floor(y + 1.0);
    double s = 0.0;
    for (long q = 0; q < 4; q++)
        for (long r = 0; r < 4; r++) {
            const long i = fx - 1 + r, j = fy - 1 + q;
            s += beta3(x + 1.0 - (double)i) * beta3(y + 1.0 - (double)j)
                 * fabs(coef[mirror_any(j, H) * W + mirror_any(i, W)]);
        }
    return 1.25 * 6.0 * 0x1.0p-24 * s;
}

/* Bicubic of float32 planes from rp_kernel_new_f32 (float coefficients) against
 * rp_kernel_new of the same values as a float64 plane (double coefficients): within
 * bicubic_f32_bound everywhere in the valid range (edges included), on random planes, a
 * checkerboard of +-1000 (the largest coefficients, 9 times the pixels), steps of 1e4
 * over noise, and a 40 x 300 plane (more rows than the prefilter's ring of 128); a plane
 * with a NaN gives NaN at the same positions and elsewhere stays within
 * 54 u max |pixel| (kernels.h).  Other methods, and float64 planes, give rp_kernel_new's
 * kernel bit for bit. */
START_TEST(test_bicubic_f32_coefficients)
{
    enum { MAXPX = 40 * 300, N = 6000, CASES = 5 };
    static const int sizes[CASES][2] = { { 37, 23 }, { 33, 31 }, { 45, 40 }, { 40, 300 }, { 37, 23 } };
    static double d[MAXPX], coef[(40 + 2) * (300 + 2)], x[N], y[N], o64[N], o32[N];
    static float f[MAXPX];
    unsigned long long s = 2718;
    double worst = 0.0;
    for (int t = 0; t < CASES; t++) {
        const int NX = sizes[t][0], NY = sizes[t][1];
        double peak = 0.0;
        for (int j = 0; j < NY; j++)
            for (int i = 0; i < NX; i++) {
                double v;
                if (t == 1)
                    v = (i + j) % 2 ? 1000.0 : -1000.0;
                else if (t == 2)
                    v = ((i / 7 + j / 5) % 2 ? 1e4 : 0.0) + 50.0 * rnd(&s) - 25.0;
                else if (t == 3)
                    v = 300.0 * sin(0.21 * i) * cos(0.05 * j) + (j % 37 < 3 ? 2e3 : 0.0) + rnd(&s);
                else
                    v = 100.0 * rnd(&s) - 20.0;
                f[j * NX + i] = (float)v;
                d[j * NX + i] = f[j * NX + i];
                peak = fmax(peak, fabs(d[j * NX + i]));
            }
        if (t == 4)
            f[9 * NX + 11] = (float)(d[9 * NX + 11] = NAN);
        random_positions(x, y, N, NX - 1.0, NY - 1.0, &s);
        bspline_coef_direct(d, NX, NY, coef);
        rp_plane p64 = plane_of(d, RP_F64, NX, NY), p32 = plane_of(f, RP_F32, NX, NY);
        rp_kernel *k64 = kernel_or_die(RP_BICUBIC, &p64), *k32 = kernel_f32_or_die(RP_BICUBIC, &p32);
        rp_kernel_sample(k64, N, x, y, o64);
        rp_kernel_sample(k32, N, x, y, o32);
        long differ = 0;
        for (int i = 0; i < N; i++) {
            if (isnan(o64[i]) || isnan(o32[i])) {
                ck_assert_msg(isnan(o64[i]) && isnan(o32[i]), "%dx%d at (%g, %g): %g vs %g", NX,
                              NY, x[i], y[i], o64[i], o32[i]);
                continue;
            }
            const double b = t == 4 ? 54.0 * 0x1.0p-24 * peak : bicubic_f32_bound(coef, NX, NY, x[i], y[i]);
            const double e = fabs(o32[i] - o64[i]);
            if (t < 4)
                worst = fmax(worst, e / b);
            differ += e > 0.0;
            ck_assert_msg(e <= b, "%dx%d at (%.17g, %.17g): float coefficients %.17g, double %.17g (bound %.3g)",
                          NX, NY, x[i], y[i], o32[i], o64[i], b);
        }
        ck_assert_int_gt(differ, N / 4);   /* the float path did run */
        rp_kernel_free(k64);
        rp_kernel_free(k32);
    }
    fprintf(stderr, "bicubic float coefficients: worst |difference| / bound = %.3f\n", worst);
    /* float64 planes, and the other methods: rp_kernel_new's kernel */
    const rp_method ms[4] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < 2; t++) {
            if (ms[q] == RP_BICUBIC && t == 1)
                continue;
            rp_plane p = t ? plane_of(f, RP_F32, 37, 23) : plane_of(d, RP_F64, 37, 23);
            rp_kernel *ka = kernel_or_die(ms[q], &p), *kb = kernel_f32_or_die(ms[q], &p);
            rp_kernel_sample(ka, N, x, y, o64);
            rp_kernel_sample(kb, N, x, y, o32);
            ck_assert(memcmp(o64, o32, sizeof(double) * N) == 0);
            rp_kernel_free(ka);
            rp_kernel_free(kb);
        }
}
END_TEST

/* test_bicubic_finite_path for float coefficients: the finite path of
 * rp_bspline_prepare_f32 (the rows in a ring of 128, each final row rounded) and its
 * general path (double coefficients, rounded afterwards) agree bit for bit wherever the
 * support misses the filled pixel, on planes shorter and taller than the ring (230 and
 * 300 rows: rows pass through the ring twice).  Integer pixels make the filled value
 * (a quarter-integer) exact in float. */
START_TEST(test_bicubic_f32_finite_path)
{
    static const int sizes[4][2] = { { 45, 39 }, { 47, 14 }, { 40, 230 }, { 33, 300 } };
    static float a[33 * 300], b[33 * 300];
    unsigned long long s = 31337;
    for (int t = 0; t < 4; t++) {
        const int NX = sizes[t][0], NY = sizes[t][1];
        for (int i = 0; i < NX * NY; i++)
            a[i] = (float)floor(1000.0 * rnd(&s) - 200.0);
        bicubic_finite_path_check(a, b, RP_F32, NX, NY, kernel_f32_or_die, &s);
    }
}
END_TEST

/* ---- golden reference (astropy reproject 0.10) -------------------------------------- */

/* Input pixel positions of the n output pixels (ox, oy), as reproject's
 * pixel_to_pixel_with_roundtrip computes them (mirrors map_points() of
 * engine/sky/reproject.c): out -> sky -> frame conversion -> in, then back to out; a
 * point whose round trip misses by more than one pixel on either axis is NaN (a NaN
 * round trip does not reset it). */
static void map_to_input(skywcs *in, skywcs *out, size_t n, const double *ox, const double *oy,
                         double *ix, double *iy)
{
    double eqin = 0.0, eqout = 0.0;
    sky_frame fin = skywcs_frame(in, &eqin), fout = skywcs_frame(out, &eqout);
    double *lon = malloc(sizeof(double) * n * 4), *lat = lon + n, *rx = lon + 2 * n,
           *ry = lon + 3 * n;
    ck_assert_int_eq(skywcs_pix2sky(out, n, ox, oy, lon, lat), 0);
    sky_convert(fout, eqout, fin, eqin, n, lon, lat);
    ck_assert_int_eq(skywcs_sky2pix(in, n, lon, lat, ix, iy), 0);
    ck_assert_int_eq(skywcs_pix2sky(in, n, ix, iy, lon, lat), 0);
    sky_convert(fin, eqin, fout, eqout, n, lon, lat);
    ck_assert_int_eq(skywcs_sky2pix(out, n, lon, lat, rx, ry), 0);
    for (size_t i = 0; i < n; i++)
        if (fabs(rx[i] - ox[i]) > 1.0 || fabs(ry[i] - oy[i]) > 1.0)
            ix[i] = iy[i] = NAN;
    free(lon);
}

/* Samples `name` (a gc_2mass_k case) with kernel m at the exactly mapped output pixel
 * centres and compares with the reference: max |diff| / peak over pixels finite in both,
 * and the fraction of pixels finite in both or NaN in both. */
static void run_golden(const char *name, rp_method m, double *rel, double *agree)
{
    char path[1024];
    long snx, sny, rnx, rny;
    char *scards, *rcards;
    int snk, rnk, tnk, sf32, rf32;
    snprintf(path, sizeof path, "%s/gc_2mass_k.fits", TESSERA_DEMO_DIR);
    void *src = tt_read_image(path, 1, &snx, &sny, &scards, &snk, &sf32);
    ck_assert_int_eq(sf32, 1);
    snprintf(path, sizeof path, "%s/reference/%s.fits", TESSERA_TESTDATA_DIR, name);
    double *ref = tt_read_image(path, 1, &rnx, &rny, &rcards, &rnk, &rf32);
    ck_assert_int_eq(rf32, 0);
    snprintf(path, sizeof path, "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, name);
    char *tcards = tt_read_hdr_file(path, &tnk);
    skywcs *win = tt_parse_wcs(scards, snk), *wout = tt_parse_wcs(tcards, tnk);
    skywcs *cin = skywcs_celestial(win), *cout = skywcs_celestial(wout);
    ck_assert(cin && cout);

    size_t n = (size_t)(rnx * rny);
    double *buf = malloc(sizeof(double) * n * 5);
    double *ox = buf, *oy = buf + n, *ix = buf + 2 * n, *iy = buf + 3 * n, *dst = buf + 4 * n;
    for (long j = 0; j < rny; j++)
        for (long i = 0; i < rnx; i++) {
            ox[j * rnx + i] = (double)i;
            oy[j * rnx + i] = (double)j;
        }
    map_to_input(cin, cout, n, ox, oy, ix, iy);
    rp_plane p = plane_of(src, RP_F32, snx, sny);
    rp_kernel *k = kernel_or_die(m, &p);
    rp_kernel_sample(k, n, ix, iy, dst);

    double peak = 0.0, maxdiff = 0.0;
    size_t same = 0, both = 0;
    for (size_t q = 0; q < n; q++) {
        if (isfinite(ref[q]) && fabs(ref[q]) > peak)
            peak = fabs(ref[q]);
        if ((isfinite(ref[q]) != 0) == (isfinite(dst[q]) != 0))
            same++;
        if (isfinite(ref[q]) && isfinite(dst[q])) {
            both++;
            if (fabs(dst[q] - ref[q]) > maxdiff)
                maxdiff = fabs(dst[q] - ref[q]);
        }
    }
    *rel = maxdiff / peak;
    *agree = (double)same / (double)n;
    fprintf(stderr, "golden %-24s max|diff|/peak=%.3e footprint=%.6f finite=%zu\n", name, *rel,
            *agree, both);
    ck_assert(both > n / 2);
    rp_kernel_free(k);
    free(buf);
    skywcs_free(win);
    skywcs_free(wout);
    skywcs_free(cin);
    skywcs_free(cout);
    free(src);
    free(ref);
    free(tcards);
    fits_free_memory(scards, &(int){ 0 });
    fits_free_memory(rcards, &(int){ 0 });
}

START_TEST(test_golden_bicubic)
{
    double rel, agree;
    run_golden("gc2massk_to_ga_bicubic", RP_BICUBIC, &rel, &agree);
    /* 2.7e-11: the coordinates' share, as for bilinear below; sampled at the same
     * positions, the kernel matches scipy's map_coordinates to 5e-16 of the peak. */
    ck_assert_msg(rel <= 1e-10, "bicubic: max diff / peak %.3e", rel);
    ck_assert_msg(agree == 1.0, "bicubic: footprint agreement %.6f", agree);
}
END_TEST

START_TEST(test_golden_bilinear_nearest)
{
    double rel, agree;
    run_golden("gc2massk_to_ga_bilinear", RP_BILINEAR, &rel, &agree);
    /* 3.5e-11, as reproject_plane's exact transform gets: the coordinates (the galactic
     * conversion) differ from astropy's at that level, the kernel does not (see
     * test_bilinear_matches_reproject). */
    ck_assert_msg(rel <= 1e-10, "bilinear: max diff / peak %.3e", rel);
    ck_assert_msg(agree == 1.0, "bilinear: footprint agreement %.6f", agree);
    run_golden("gc2massk_to_ga_nearest", RP_NEAREST, &rel, &agree);
    ck_assert_msg(rel == 0.0, "nearest: max diff / peak %.3e", rel);
    ck_assert_msg(agree == 1.0, "nearest: footprint agreement %.6f", agree);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_nearest_5x5);
    tcase_add_test(tc, test_bilinear_5x5);
    tcase_add_test(tc, test_bicubic_5x5);
    tcase_add_test(tc, test_lanczos3_5x5);
    tcase_add_test(tc, test_bilinear_matches_reproject);
    tcase_add_test(tc, test_sample_f32_matches);
    tcase_add_test(tc, test_sample_f32_rows);
    tcase_add_test(tc, test_sample_f32_gathers);
    tcase_add_test(tc, test_sample_f32_fused);
    tcase_add_test(tc, test_valid_range);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_single_pixel);
    tcase_add_test(tc, test_constant_image);
    tcase_add_test(tc, test_ramp);
    tcase_add_test(tc, test_lanczos3_table_error);
    tcase_add_test(tc, test_f32_f64_agree);
    tcase_add_test(tc, test_batch_matches_single);
    tcase_add_test(tc, test_lanczos3_fma_bound);
    tcase_add_test(tc, test_bicubic_finite_path);
    tcase_add_test(tc, test_bicubic_column_blocks);
    tcase_add_test(tc, test_bicubic_f32_coefficients);
    tcase_add_test(tc, test_bicubic_f32_finite_path);
    tcase_add_test(tc, test_nan_locality);
    tcase_add_test(tc, test_nan_region);
    tcase_add_test(tc, test_all_nan_and_inf);
    tcase_add_test(tc, test_golden_bicubic);
    tcase_add_test(tc, test_golden_bilinear_nearest);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
