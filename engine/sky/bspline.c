/* Bicubic sampling's cubic B-spline prefilter: a plane's coefficients, in bands kept in cache. */
#include "engine/sky/bspline.h"
#include "engine/base/hugemem.h"
#include "engine/sky/simd.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The pole of the cubic B-spline prefilter, z = sqrt(3) - 2 (Unser, "Splines: a perfect
 * fit for signal and image processing", IEEE Signal Processing Magazine 16(6), 1999,
 * Box 2; scipy ni_splines.c get_filter_poles). */
#define BSPLINE_Z (-0.267949192431122706472553658494127633)

/* Terms of the causal initial sum beyond which |z|^k < 1e-18 (|z|^32 = 5.3e-19):
 * longer lines truncate the sum there (Thevenaz, Blu & Unser, "Interpolation
 * revisited", IEEE Trans. Medical Imaging 19(7), 2000, InitialCausalCoefficient), which
 * also keeps z^k clear of denormals. */
#define BSPLINE_HORIZON 32

/* Where the column passes find padded row k of a W-wide array: at base + (k % R) W.  The
 * general path and the prefilter into doubles keep every row (R = H, so row k is at
 * base + k W); the prefilter into floats keeps only the rows still in work in a ring of
 * R rows of doubles (R a multiple of BAND_ROWS, so that a band's rows lie side by side) and
 * narrows each row once it is final (bicubic_prefilter_finite). */
typedef struct bs_rows {
    double *base;
    long W, R;
} bs_rows;

static inline double *bs_row(const bs_rows *c, long k)
{
    return c->base + (k % c->R) * c->W;
}

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
RP_HOT static void bspline_cols_init(const bs_rows *c, const double *w, long m)
{
    const long W = c->W, W4 = W - W % 4;
    double *r0 = bs_row(c, 0);
    for (long i = 0; i < W; i++)
        r0[i] *= w[0];
    for (long k = 1; k < m; k++) {
        const double *rk = bs_row(c, k);
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

RP_HOT static void bspline_cols_causal(const bs_rows *c, long k0, long k1)
{
    const double z = BSPLINE_Z;
    const long W = c->W, W4 = W - W % 4;
    for (long k = k0; k < k1; k++) {
        double *r = bs_row(c, k);
        const double *p = bs_row(c, k - 1);
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

/* One step of the anticausal recursion of the columns over a row of W:
 * o = z (q - r), q the row below's anticausal values, r the row's causal ones (o may be
 * r or q).  For a final row f (W floats, or NULL) also takes each value rounded once
 * while it is in the registers, so that the row is not read again to be narrowed: the
 * same doubles, and the same floats as (float) of them.  Always inlined, so that a NULL
 * f costs no test in the loop.  Cannot fail. */
static inline __attribute__((always_inline)) void
bspline_anticausal_row(double *o, const double *r, const double *q, long W, float *restrict f)
{
    const double z = BSPLINE_Z;
    const long W4 = W - W % 4;
    long i = 0;
    for (; i < W4; i += 4) {
        rp_v4d u, v;
        RP_V4D_LOAD(u, r + i);
        RP_V4D_LOAD(v, q + i);
        u = z * (v - u);
        RP_V4D_STORE(o + i, u);
        if (f) {
            const rp_v4f uf = __builtin_convertvector(u, rp_v4f);
            memcpy(f + i, &uf, sizeof uf);
        }
    }
    for (; i < W; i++) {
        o[i] = z * (q[i] - r[i]);
        if (f)
            f[i] = (float)o[i];
    }
}

RP_HOT static void bspline_cols_anticausal(const bs_rows *c, long a, long H)
{
    const double z = BSPLINE_Z, za = z / (z * z - 1.0);
    const long W = c->W;
    double *rl = bs_row(c, H - 1);
    const double *rp = bs_row(c, H - 2);
    for (long i = 0; i < W; i++)
        rl[i] = za * (rl[i] + z * rp[i]);
    for (long k = H - 2; k >= a; k--)
        bspline_anticausal_row(bs_row(c, k), bs_row(c, k), bs_row(c, k + 1), W, NULL);
}

/* Rows of the column prefilter's anticausal pass finished together (bspline_cols_finish),
 * and the rows beyond a block its recursion starts from.  The anticausal coefficient
 * c-(k) = -sum_{i >= 0} z^(i+1) c+(k + i) (Unser 1999, Box 2) is started
 * BSPLINE_BLOCK_LEAD rows below a block from c-(e + 1) = 0 instead of from the end of
 * the column: the terms left out weigh at most |z|^33 = 1.4e-19 of the column's values,
 * below half an ulp (1.1e-16), as BSPLINE_HORIZON truncates the causal initial sum. */
#define BSPLINE_BLOCK 64
#define BSPLINE_BLOCK_LEAD (BSPLINE_HORIZON + 1)

/* The anticausal pass of the columns over rows a .. b - 1 of a W-wide row-major array
 * whose rows a .. e hold causal coefficients (b <= e): started at row e from
 * c-(e + 1) = 0 in the scratch row t (W doubles; rows b .. e are read, not written),
 * then written in place over rows b - 1 .. a.  Each step is bspline_cols_anticausal's
 * c-(k) = z (c-(k + 1) - c+(k)).  With `out` (W x H floats) not NULL, rows a .. b - 1
 * are also rounded into out as they are written (bspline_anticausal_row with f).
 * Cannot fail. */
RP_HOT static void bspline_cols_anticausal_block(const bs_rows *c, long a, long b, long e,
                                                 double *restrict t, float *out)
{
    const double z = BSPLINE_Z;
    const long W = c->W;
    const double *re = bs_row(c, e);
    for (long i = 0; i < W; i++)
        t[i] = z * (0.0 - re[i]);
    for (long k = e - 1; k >= a; k--) {
        double *r = bs_row(c, k);
        /* c-(k + 1) in t down to row b, in place above */
        const double *q = k >= b - 1 ? t : bs_row(c, k + 1);
        if (k >= b || !out)
            bspline_anticausal_row(k >= b ? t : r, r, q, W, NULL);
        else
            bspline_anticausal_row(r, r, q, W, out + k * W);
    }
}

/* Finishes the columns' anticausal pass as far as the causal pass allows: *fin is the
 * first row not yet final, `done` the rows through which the causal pass has run.
 * Rows go in blocks of BSPLINE_BLOCK from row 0, each started BSPLINE_BLOCK_LEAD rows
 * below it (bspline_cols_anticausal_block) while that start lies above the last row;
 * the rows after the last such block are finished from the end of the columns
 * (bspline_cols_anticausal) once done = H.  The blocks depend only on H, so any order of
 * calls gives the same values.  t: a scratch row of W doubles.  With `out` not NULL, the
 * blocks' rows are rounded into it as they are finished and *nar (the rows rounded so
 * far) follows *fin; the rows of the end are left to the caller.  Cannot fail. */
static void bspline_cols_finish(const bs_rows *c, long H, long *fin, long done, double *t,
                                float *out, long *nar)
{
    while (*fin + BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD <= H - 1
           && *fin + BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD <= done) {
        const long b = *fin + BSPLINE_BLOCK;
        bspline_cols_anticausal_block(c, *fin, b, b + BSPLINE_BLOCK_LEAD - 1, t, out);
        *fin = b;
        if (out)
            *nar = b;
    }
    if (done == H && *fin < H) {
        bspline_cols_anticausal(c, *fin, H);
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

/* Builds *bad (see rp_bspline_prepare) of plane p from the list of missing pixels.
 * Returns 0 or -1 (out of memory). */
static int bicubic_mask(const rp_plane *p, unsigned char **bad, const size_t *miss, size_t nmiss)
{
    const long nx = p->nx, ny = p->ny, W = nx + 2, H = ny + 2;
    long *lox = malloc(sizeof(long) * (size_t)(W + H) * 2);
    unsigned char *isbad = calloc((size_t)nx * (size_t)ny, 1);
    unsigned char *tmp = calloc((size_t)ny * (size_t)W, 1);
    *bad = calloc((size_t)W * (size_t)H, 1);
    if (!lox || !isbad || !tmp || !*bad) {
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
        unsigned char *o = *bad + s * W;
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
 * doubles (widening a float is exact).  The floats are widened one by one in a vector
 * literal, which the compiler turns into one widening load (vcvtps2pd ymm, m128 with
 * AVX2); through a memcpy into an rp_v4f and __builtin_convertvector it widened the two
 * halves apart, the upper ones stored to the stack and reloaded. */
#define RP_LOAD4_PIX(v, r, i, f32)                                                        \
    do {                                                                                  \
        if (f32) {                                                                        \
            const float *p_ = (const float *)(r) + (i);                                   \
            (v) = (rp_v4d){ (double)p_[0], (double)p_[1], (double)p_[2], (double)p_[3] }; \
        } else {                                                                          \
            memcpy(&(v), (const double *)(r) + (i), sizeof(v));                           \
        }                                                                                 \
    } while (0)

/* Rows of a band of bspline_band: four lanes times BAND_G vectors.  Four recursions side
 * by side (16 lines) rather than two: 2 ms less on a 4096^2 plane (35 to 33 ms), once
 * BAND_UNROLL (the literal of BAND_G) makes the compiler keep them in registers
 * (without it four ran 7 ms slower than two). */
#define BAND_G 4
#define BAND_ROWS (4 * BAND_G)
#define BAND_UNROLL _Pragma("GCC unroll 4")

/* Rows of doubles the prefilter into floats keeps (rp_bspline_prepare_f32; a multiple
 * of BAND_ROWS).  bicubic_prefilter_finite works on rows fin .. j0 + BAND_ROWS - 1
 * while filtering band j0: bspline_cols_finish left fin > j0 - BSPLINE_BLOCK -
 * BSPLINE_BLOCK_LEAD (or fin >= H - BSPLINE_BLOCK - BSPLINE_BLOCK_LEAD near the end), so
 * at most BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD - 1 + BAND_ROWS = 112 rows, and the first
 * band's column pass (bspline_cols_init) reads rows 0 .. BSPLINE_HORIZON - 1.  128 rows
 * of a 4096-pixel plane are 4.2 MB. */
#define BSPLINE_RING 128
_Static_assert(BSPLINE_RING % BAND_ROWS == 0
               && BSPLINE_RING >= BSPLINE_BLOCK + BSPLINE_BLOCK_LEAD - 1 + BAND_ROWS
               && BSPLINE_RING >= BSPLINE_HORIZON + BAND_ROWS,
               "the ring holds every row in work");

/* bicubic_prefilter_finite's work on the BAND_ROWS padded rows j0 .. j0 + BAND_ROWS - 1
 * of W = nx + 2 (rows of c from c + j0 W): bicubic_padded_row's values (pixel times g2,
 * edges repeated) filtered along the rows as bspline_line filters each, with the lines
 * in vector lanes: the pixels go into s (W x BAND_ROWS doubles: padded column k at
 * s + BAND_ROWS k, rows 0-3, then rows 4-7, ...) in 4x4 transposed blocks, the BAND_G
 * four-lane recursions run side by side over s, and s is transposed back into c.  Every
 * lane does bicubic_padded_row's and bspline_line's arithmetic in their order, so the
 * values are bit for bit theirs, and no row of c is written twice; the recursions, each
 * bound by the latency of a multiply and an add on one line (bspline_lines4 interleaves
 * four), advance BAND_ROWS lines a step.  With `prev` (the row above the band, W
 * doubles) not NULL, the rows above hold the causal pass of the columns, and the band's
 * rows get it too on the
 * way back into c (bspline_cols_causal's c(k) + z c(k - 1), row after row), so that they
 * are not read and written once more.  Returns 0, or 1 when a pixel is not finite (c
 * is then incomplete).  Cannot fail. */
RP_HOT static int bspline_band(const rp_plane *p, long j0, double g2, double *restrict c,
                               const double *w, long m, double *restrict s,
                               const double *prev)
{
    const int causal = prev != NULL;
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
    BAND_UNROLL
    for (int g = 0; g < BAND_G; g++)
        pv[g] = (rp_v4d){ 0.0, 0.0, 0.0, 0.0 };
    for (long k = 0; k < m; k++) {
        BAND_UNROLL
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] += w[k] * v;
        }
    }
    BAND_UNROLL
    for (int g = 0; g < BAND_G; g++)
        RP_V4D_STORE(s + 4 * g, pv[g]);
    for (long k = 1; k < n; k++) {
        BAND_UNROLL
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] = v + z * pv[g];
            RP_V4D_STORE(s + R * k + 4 * g, pv[g]);
        }
    }
    const long l = n - 1;
    BAND_UNROLL
    for (int g = 0; g < BAND_G; g++) {
        rp_v4d u;
        RP_V4D_LOAD(v, s + R * l + 4 * g);
        RP_V4D_LOAD(u, s + R * (l - 1) + 4 * g);
        pv[g] = za * (v + z * u);
        RP_V4D_STORE(s + R * l + 4 * g, pv[g]);
    }
    for (long k = n - 2; k >= 0; k--) {
        BAND_UNROLL
        for (int g = 0; g < BAND_G; g++) {
            RP_V4D_LOAD(v, s + R * k + 4 * g);
            pv[g] = z * (pv[g] - v);
            RP_V4D_STORE(s + R * k + 4 * g, pv[g]);
        }
    }
    const long w4 = n - n % 4;
    for (int g = 0; g < BAND_G; g++) {
        double *a = c + 4 * g * n;
        const double *pa = g == 0 ? prev : a - n;   /* the row above a (causal only) */
        long k = 0;
        for (; k < w4; k += 4) {
            rp_v4d ca, cb, cc, cd, r0, r1, r2, r3;
            RP_V4D_LOAD(ca, s + R * k + 4 * g);
            RP_V4D_LOAD(cb, s + R * (k + 1) + 4 * g);
            RP_V4D_LOAD(cc, s + R * (k + 2) + 4 * g);
            RP_V4D_LOAD(cd, s + R * (k + 3) + 4 * g);
            RP_T4X4(ca, cb, cc, cd, r0, r1, r2, r3);
            if (causal) {
                rp_v4d pr;
                RP_V4D_LOAD(pr, pa + k);
                r0 += z * pr;
                r1 += z * r0;
                r2 += z * r1;
                r3 += z * r2;
            }
            RP_V4D_STORE(a + k, r0);
            RP_V4D_STORE(a + n + k, r1);
            RP_V4D_STORE(a + 2 * n + k, r2);
            RP_V4D_STORE(a + 3 * n + k, r3);
        }
        for (; k < n; k++)
            for (int q = 0; q < 4; q++) {
                double e = s[R * k + 4 * g + q];
                if (causal)
                    e += z * (q == 0 ? pa[k] : a[(q - 1) * n + k]);
                a[q * n + k] = e;
            }
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
 * two agree bit for bit.  The rows live in c (bs_rows): the whole array, or, with `out`
 * (W x H floats) not NULL, a ring of BSPLINE_RING rows from which each row, once final,
 * is rounded into out (so out holds the double coefficients rounded once; the rows in
 * work span fewer than BSPLINE_RING: see there): the rows of the anticausal blocks as
 * they are written, which saves reading the ring once more (4096^2 float32, Intel Xeon
 * with AVX-512, 1 thread, 5 runs alternated, best of 6 each: 48.4-49.7 ms before,
 * 42.4-44.0 after), the rows of the end afterwards.  Returns 0, 1 as soon as a pixel is not
 * finite (the general path must then run), or -1 (out of memory). */
static int bicubic_prefilter_finite(const rp_plane *p, const bs_rows *c, float *out,
                                    double g2)
{
    const long W = p->nx + 2, H = p->ny + 2;
    double wr[BSPLINE_HORIZON], wc[BSPLINE_HORIZON];
    long mr, mc, causal = 0;   /* causal: rows through which the column pass has run */
    long fin = 0;              /* rows final (bspline_cols_finish) */
    long nar = 0;              /* rows narrowed into out */
    bspline_causal_weights(W, wr, &mr);
    bspline_causal_weights(H, wc, &mc);
    /* bspline_band's scratch, and bspline_cols_finish's row */
    double *s = malloc(sizeof(double) * BAND_ROWS * (size_t)W);
    if (!s)
        return -1;
    for (long j0 = 0; j0 < H; j0 += BAND_ROWS) {
        const long nr = H - j0 < BAND_ROWS ? H - j0 : BAND_ROWS;
        double *r = bs_row(c, j0);
        long q = 0;
        /* the column pass done through row j0 - 1: the band takes its rows through it */
        const int fused = causal > 0 && causal == j0 && nr == BAND_ROWS;
        if (nr == BAND_ROWS) {
            if (bspline_band(p, j0, g2, r, wr, mr, s, fused ? bs_row(c, j0 - 1) : NULL) != 0) {
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
            bspline_cols_init(c, wc, mc);
            causal = 1;
        }
        if (causal > 0) {
            if (!fused)
                bspline_cols_causal(c, causal, done);
            causal = done;
            bspline_cols_finish(c, H, &fin, done, s, out, &nar);
        }
        for (; out && nar < fin; nar++) {   /* the last rows, each value rounded once */
            const double *f = bs_row(c, nar);
            float *o = out + nar * W;
            for (long i = 0; i < W; i++)
                o[i] = (float)f[i];
        }
    }
    free(s);
    return 0;
}

/* See bspline.h.  Copies the plane, edge-padded by one pixel, into *coef (non-finite
 * pixels filled, see fill_missing, and flagged in *bad), then applies the cubic B-spline
 * prefilter with mirror boundaries along rows and columns (scipy
 * spline_filter(padded, order=3, mode='mirror'), which docs/DESIGN.md's "Kernel
 * definitions" name as the reference), gain (1 - z)(1 - 1/z) = 6 per axis.  A plane with
 * no missing pixel takes bicubic_prefilter_finite (unless finite_first is 0: the caller
 * knows one is missing). */
static int bspline_prepare(const rp_plane *p, double **coef, unsigned char **bad,
                           int finite_first);

/* rp_bspline_prepare, trying bicubic_prefilter_finite first where finite_first is set. */
static int bspline_prepare_double(const rp_plane *p, double **coef, unsigned char **bad,
                                  int finite_first)
{
    *coef = NULL;
    *bad = NULL;
    if (bspline_prepare(p, coef, bad, finite_first) == 0)
        return 0;
    free(*coef);
    free(*bad);
    *coef = NULL;
    *bad = NULL;
    return -1;
}

int rp_bspline_prepare(const rp_plane *p, double **coef, unsigned char **bad)
{
    return bspline_prepare_double(p, coef, bad, 1);
}

static int bspline_prepare(const rp_plane *p, double **coef, unsigned char **bad,
                           int finite_first)
{
    const long nx = p->nx, ny = p->ny, W = nx + 2, H = ny + 2;
    /* on transparent huge pages where the system has them: with 4 KiB pages a 4096^2
     * plane's 134 MB cost 33,000 page faults on first touch, and the sampler, reading
     * rows far apart when the grids are rotated, misses the TLB */
    double *c = tess_alloc_huge(sizeof(double) * (size_t)W * (size_t)H);
    if (!c)
        return -1;
    *coef = c;
    const double gain = (1.0 - BSPLINE_Z) * (1.0 - 1.0 / BSPLINE_Z);
    const double g2 = gain * gain;
    const bs_rows rows = { c, W, H };
    const int fr = finite_first ? bicubic_prefilter_finite(p, &rows, NULL, g2) : 1;
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
            rc = bicubic_mask(p, bad, miss, nmiss);
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
    bspline_cols_init(&rows, w, m);
    bspline_cols_causal(&rows, 1, H);
    double *t = malloc(sizeof(double) * (size_t)W);
    if (!t)
        return -1;
    long fin = 0;
    bspline_cols_finish(&rows, H, &fin, H, t, NULL, NULL);
    free(t);
    return 0;
}

/* See bspline.h.  A plane with no missing pixel takes bicubic_prefilter_finite through a
 * ring of BSPLINE_RING rows of doubles (or all of them, for fewer rows), each final row
 * rounded into the float array; any other takes bspline_prepare into doubles, rounded
 * afterwards (the same values: the two paths agree bit for bit in double). */
int rp_bspline_prepare_f32(const rp_plane *p, float **coef, unsigned char **bad)
{
    const long W = p->nx + 2, H = p->ny + 2;
    const long R = H <= BSPLINE_RING ? H : BSPLINE_RING;
    *coef = NULL;
    *bad = NULL;
    float *c = tess_alloc_huge(sizeof(float) * (size_t)W * (size_t)H);
    /* the ring on huge pages as well: 4.2 MB of a 4096-pixel plane span 1,025 small
     * pages, and the band and column passes sweep it row after row (prefilter alone,
     * 4096^2, Intel Xeon, best of 6, 5 runs alternated: 42.7-44.1 ms from malloc,
     * 38.2-42.0 ms) */
    double *ring = tess_alloc_huge(sizeof(double) * (size_t)W * (size_t)R);
    int rc = c && ring ? 0 : -1;
    if (rc == 0) {
        const bs_rows rows = { ring, W, R };
        const double gain = (1.0 - BSPLINE_Z) * (1.0 - 1.0 / BSPLINE_Z);
        rc = bicubic_prefilter_finite(p, &rows, c, gain * gain);
    }
    free(ring);
    if (rc == 1) {   /* a missing pixel: the general path, then rounded */
        double *d = NULL;
        rc = bspline_prepare_double(p, &d, bad, 0);
        if (rc == 0) {
            const size_t n = (size_t)W * (size_t)H;
            for (size_t i = 0; i < n; i++)
                c[i] = (float)d[i];
        }
        free(d);
    }
    if (rc != 0) {
        free(c);
        return -1;
    }
    *coef = c;
    return 0;
}
