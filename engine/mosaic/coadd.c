/* Pixel-by-pixel combination of reprojected images (coadd.h). */
#include "engine/mosaic/coadd.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine/base/byteswap.h"
#include "engine/base/error.h"
#include "engine/fits/fitswrite.h"

/* The loops every pixel of a mosaic passes through: at -O3 (vectorised), with AVX-512
 * (x86-64-v4) and AVX2 clones chosen at load time on x86-64 with GCC (as
 * engine/sky/simd.h's RP_HOT).  No product and sum are fused (fp-contract=off, though
 * x86-64-v4 has FMA): every clone gives the results of the plain code.  The AVX-512
 * clone adds 8 values a vector with mask registers where AVX2 adds 4 and blends: the
 * 64-input mosaic's coadd took 0.044 s of CPU against 0.050 s with the AVX2 clone
 * (1 thread, median of 9 alternated, AMD EPYC with AVX-512). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ACCUM_HOT                                                                          \
    __attribute__((optimize("O3", "no-trapping-math", "fp-contract=off"),                 \
                   target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define ACCUM_HOT __attribute__((optimize("O3", "no-trapping-math", "fp-contract=off")))
#else
#define ACCUM_HOT
#endif

double mos_accum_bytes(mos_combine combine, size_t pixels, int max_inputs)
{
    double b = 16.0 * (double)pixels;
    if (combine == MOS_MEDIAN)
        b += 4.0 * (double)pixels * (1.0 + (double)(max_inputs > 0 ? max_inputs : 1));
    return b;
}

int mos_accum_init(mos_accum *a, mos_combine combine, size_t capacity, int max_inputs)
{
    memset(a, 0, sizeof(*a));
    if (capacity < 1 || max_inputs < 1 || capacity > SIZE_MAX / 16 ||
        (combine == MOS_MEDIAN && capacity > SIZE_MAX / sizeof(float) / (size_t)max_inputs))
        return TESS_EINVAL;
    a->combine = combine;
    a->capacity = capacity;
    a->max_inputs = max_inputs;
    a->acc = malloc(sizeof(double) * capacity);
    a->accw = malloc(sizeof(double) * capacity);
    if (combine == MOS_MEDIAN) {
        a->list = malloc(sizeof(float) * capacity * (size_t)max_inputs);
        a->cnt = malloc(sizeof(int) * capacity);
    }
    if (!a->acc || !a->accw || (combine == MOS_MEDIAN && (!a->list || !a->cnt))) {
        mos_accum_free(a);
        return TESS_ENOMEM;
    }
    mos_accum_reset(a, capacity);
    return 0;
}

void mos_accum_reset(mos_accum *a, size_t np)
{
    a->np = np <= a->capacity ? np : a->capacity;
    /* 0.0 is all zero bits (IEEE 754): the sums and the weights start by memset. */
    if (a->combine == MOS_MEAN || a->combine == MOS_SUM) {
        if (a->clean >= a->np)
            return;   /* cleared by mos_accum_take_be, nothing added since */
        memset(a->acc, 0, sizeof(double) * a->np);
    } else {
        for (size_t i = 0; i < a->np; i++)
            a->acc[i] = NAN;
    }
    memset(a->accw, 0, sizeof(double) * a->np);
    if (a->cnt)
        memset(a->cnt, 0, sizeof(int) * a->np);
}

/* The adding of one row, for values and weights of type T (float: mos_accum_add, double:
 * mos_accum_add_d).  One body for both, so that they cannot drift apart; the float
 * instance is the code as it always was (each value and weight widened to double). */
#define ACCUM_ADD_IMPL(NAME, T)                                                            \
    /* The sums: the common case, without the switch of the others, branch-free so that   \
     * it vectorises (ACCUM_HOT).  A value that does not count adds +0.0 to both sums,     \
     * which leaves them as they were: they start at +0.0 and a sum of round-to-nearest    \
     * additions is never -0.0 unless both terms are, so x + 0.0 == x bit for bit.  The    \
     * column x0 + x is converted from int where it fits (exact either way). */           \
    ACCUM_HOT static void NAME##_sums(mos_accum *a, size_t o, const T *v, const T *w,     \
                                      long n, double base, double slope, long x0)         \
    {                                                                                     \
        double *restrict ar = a->acc + o, *restrict wa = a->accw + o;                     \
        if (x0 < INT_MIN || x0 > INT_MAX - n) {                                           \
            for (long x = 0; x < n; x++) {                                                \
                double wt = w ? (double)w[x] : 1.0;                                       \
                if (wt > 0.0 && isfinite(v[x])) {                                         \
                    ar[x] += wt * ((double)v[x] - (base + slope * (double)(x0 + x)));     \
                    wa[x] += wt;                                                          \
                }                                                                         \
            }                                                                             \
            return;                                                                       \
        }                                                                                 \
        int xi0 = (int)x0, ni = (int)n;                                                   \
        if (slope == 0.0 && x0 >= 0) {                                                    \
            /* A flat correction: slope * (x0 + x) is the same zero (slope's sign) at     \
             * every column x0 + x >= 0, so base + slope * (x0 + x) is this one value.   \
             * Without the background matched, the common case. */                        \
            const double p = base + slope * (double)xi0;                                  \
            if (w) {                                                                      \
                for (int x = 0; x < ni; x++) {                                            \
                    double wt = (double)w[x], val = (double)v[x];                         \
                    int ok = wt > 0.0 && isfinite(val);                                   \
                    double t = wt * (val - p);                                            \
                    ar[x] += ok ? t : 0.0;                                                \
                    wa[x] += ok ? wt : 0.0;                                               \
                }                                                                         \
            } else {                                                                      \
                for (int x = 0; x < ni; x++) {                                            \
                    double val = (double)v[x];                                            \
                    int ok = isfinite(val);                                               \
                    ar[x] += ok ? val - p : 0.0;                                          \
                    wa[x] += ok ? 1.0 : 0.0;                                              \
                }                                                                         \
            }                                                                             \
            return;                                                                       \
        }                                                                                 \
        if (w) {                                                                          \
            for (int x = 0; x < ni; x++) {                                                \
                double wt = (double)w[x], val = (double)v[x];                             \
                int ok = wt > 0.0 && isfinite(val);                                       \
                double t = wt * (val - (base + slope * (double)(xi0 + x)));               \
                ar[x] += ok ? t : 0.0;                                                    \
                wa[x] += ok ? wt : 0.0;                                                   \
            }                                                                             \
        } else {                                                                          \
            for (int x = 0; x < ni; x++) {                                                \
                double val = (double)v[x];                                                \
                int ok = isfinite(val);                                                   \
                double t = 1.0 * (val - (base + slope * (double)(xi0 + x)));              \
                ar[x] += ok ? t : 0.0;                                                    \
                wa[x] += ok ? 1.0 : 0.0;                                                  \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
                                                                                          \
    void NAME(mos_accum *a, size_t o, const T *v, const T *w, long n, double base,        \
              double slope, long x0)                                                      \
    {                                                                                     \
        if (n <= 0 || o >= a->np)                                                         \
            return;                                                                       \
        a->clean = 0;                                                                     \
        if ((size_t)n > a->np - o)                                                        \
            n = (long)(a->np - o);                                                        \
        if (a->combine == MOS_MEAN || a->combine == MOS_SUM) {                            \
            NAME##_sums(a, o, v, w, n, base, slope, x0);                                  \
            return;                                                                       \
        }                                                                                 \
        for (long x = 0; x < n; x++) {                                                    \
            double wt = w ? (double)w[x] : 1.0;                                           \
            if (!(wt > 0.0) || !isfinite(v[x]))                                          \
                continue;                                                                 \
            accum_one(a, o + (size_t)x,                                                   \
                      (double)v[x] - (base + slope * (double)(x0 + x)), wt);              \
        }                                                                                 \
    }

/* One value of the combines other than the sums at pixel p. */
static inline void accum_one(mos_accum *a, size_t p, double val, double wt)
{
    size_t nk = (size_t)a->max_inputs;
    switch (a->combine) {
    case MOS_MIN:
        if (!(a->acc[p] <= val))
            a->acc[p] = val;
        break;
    case MOS_MAX:
        if (!(a->acc[p] >= val))
            a->acc[p] = val;
        break;
    case MOS_FIRST:
        if (!(a->accw[p] > 0.0))
            a->acc[p] = val;
        break;
    case MOS_LAST:
        a->acc[p] = val;
        break;
    case MOS_MEDIAN:
        if ((size_t)a->cnt[p] >= nk)
            return;   /* more images than promised: the extra ones do not count */
        a->list[p * nk + (size_t)a->cnt[p]++] = (float)val;
        break;
    case MOS_MEAN:
    case MOS_SUM:
        break;   /* the sums */
    }
    a->accw[p] += wt;
}

ACCUM_ADD_IMPL(mos_accum_add, float)
ACCUM_ADD_IMPL(mos_accum_add_d, double)

static int cmp_float(const void *x, const void *y)
{
    float p = *(const float *)x, q = *(const float *)y;
    return (p > q) - (p < q);
}

static double median_of(float *l, int c)
{
    if (c == 1)
        return l[0];
    qsort(l, (size_t)c, sizeof(float), cmp_float);
    return c % 2 ? l[c / 2] : 0.5 * ((double)l[c / 2 - 1] + (double)l[c / 2]);
}

/* The combined value at pixel p (NaN where nothing counted). */
static double result_at(mos_accum *a, size_t p)
{
    double wt = a->accw[p];
    if (!(wt > 0.0))
        return NAN;
    if (a->combine == MOS_MEAN)
        return a->acc[p] / wt;
    if (a->combine == MOS_MEDIAN)
        return median_of(a->list + p * (size_t)a->max_inputs, a->cnt[p]);
    return a->acc[p];
}

/* MEAN and SUM: branch-free, vectorised (the same values as result_at). */
ACCUM_HOT static void result_sums(const mos_accum *a, float *restrict out, float *restrict cov)
{
    const double *restrict acc = a->acc, *restrict accw = a->accw;
    size_t np = a->np;
    if (a->combine == MOS_MEAN) {
        for (size_t p = 0; p < np; p++) {
            double wt = accw[p];
            out[p] = wt > 0.0 ? (float)(acc[p] / wt) : NAN;
        }
    } else {
        for (size_t p = 0; p < np; p++)
            out[p] = accw[p] > 0.0 ? (float)acc[p] : NAN;
    }
    if (cov)
        for (size_t p = 0; p < np; p++)
            cov[p] = (float)accw[p];
}

/* s folded to 32 bits with end-around carries (ones' complement addition). */
static inline uint64_t fold_sum(uint64_t s)
{
    while (s >> 32)
        s = (s & 0xffffffffu) + (s >> 32);
    return s;
}

/* f as 4 bytes of big-endian IEEE float32 (FITS BITPIX = -32), read as a native word. */
static inline uint32_t f32_be(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return u;
#else
    return __builtin_bswap32(u);
#endif
}

/* f's IEEE bits as a number: the value of the 4 bytes f32_be stores, read big-endian. */
static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Pixels summed into a 64-bit accumulator between folds: less than 2^32 words of at most
 * 2^32 - 1 cannot overflow it. */
#define SUM_CHUNK ((size_t)1 << 30)

/* result_sums with the values stored big-endian in the same pass, and the stored words'
 * (unfolded) sums added to s[0] (out) and s[1] (cov). */
ACCUM_HOT static void result_sums_be(const mos_accum *a, uint32_t *restrict out,
                                     uint32_t *restrict cov, uint64_t s[2], int clear)
{
    double *restrict acc = a->acc, *restrict accw = a->accw;
    const int mean = a->combine == MOS_MEAN;
    for (size_t p0 = 0; p0 < a->np; p0 += SUM_CHUNK) {
        size_t np = a->np - p0 < SUM_CHUNK ? a->np - p0 : SUM_CHUNK;
        double *restrict ac = acc + p0, *restrict aw = accw + p0;
        uint32_t *restrict o = out + p0;
        uint64_t t0 = 0, t1 = 0;
        if (cov) {
            /* Both planes in one pass, each sum and weight read once and, for
             * mos_accum_take_be, cleared while in the cache. */
            uint32_t *restrict c = cov + p0;
            for (size_t p = 0; p < np; p++) {
                double wt = aw[p], v = ac[p];
                float f = wt > 0.0 ? (float)(mean ? v / wt : v) : NAN, fc = (float)wt;
                t0 += f32_bits(f);
                o[p] = f32_be(f);
                t1 += f32_bits(fc);
                c[p] = f32_be(fc);
                if (clear) {
                    ac[p] = 0.0;
                    aw[p] = 0.0;
                }
            }
        } else {
            for (size_t p = 0; p < np; p++) {
                double wt = aw[p], v = ac[p];
                float f = wt > 0.0 ? (float)(mean ? v / wt : v) : NAN;
                t0 += f32_bits(f);
                o[p] = f32_be(f);
                if (clear) {
                    ac[p] = 0.0;
                    aw[p] = 0.0;
                }
            }
        }
        s[0] = fold_sum(s[0] + fold_sum(t0));
        s[1] = fold_sum(s[1] + fold_sum(t1));
    }
}

static void result_be(mos_accum *a, void *out, void *cov, uint32_t sums[2], int clear)
{
    uint64_t s[2] = { sums ? sums[0] : 0, sums ? sums[1] : 0 };
    if (a->combine == MOS_MEAN || a->combine == MOS_SUM) {
        result_sums_be(a, out, cov, s, clear);
        if (clear)
            a->clean = a->np;
    } else {
        mos_accum_result(a, out, cov);
        tess_be_swap(out, a->np, 4);
        if (cov)
            tess_be_swap(cov, a->np, 4);
        if (sums) {
            s[0] = fitswrite_sum32(out, 4 * a->np, (uint32_t)s[0]);
            s[1] = cov ? fitswrite_sum32(cov, 4 * a->np, (uint32_t)s[1]) : s[1];
        }
    }
    if (sums) {
        sums[0] = (uint32_t)fold_sum(s[0]);
        sums[1] = (uint32_t)fold_sum(s[1]);
    }
}

void mos_accum_result_be(mos_accum *a, void *out, void *cov, uint32_t sums[2])
{
    result_be(a, out, cov, sums, 0);
}

void mos_accum_take_be(mos_accum *a, void *out, void *cov, uint32_t sums[2])
{
    result_be(a, out, cov, sums, 1);
    if (a->combine != MOS_MEAN && a->combine != MOS_SUM)
        mos_accum_reset(a, a->np);
}

void mos_accum_result(mos_accum *a, float *out, float *cov)
{
    if (a->combine == MOS_MEAN || a->combine == MOS_SUM) {
        result_sums(a, out, cov);
        return;
    }
    for (size_t p = 0; p < a->np; p++) {
        out[p] = (float)result_at(a, p);
        if (cov)
            cov[p] = (float)a->accw[p];
    }
}

void mos_accum_result_d(mos_accum *a, double *out, double *cov)
{
    for (size_t p = 0; p < a->np; p++) {
        out[p] = result_at(a, p);
        if (cov)
            cov[p] = a->accw[p];
    }
}

void mos_accum_free(mos_accum *a)
{
    free(a->acc);
    free(a->accw);
    free(a->list);
    free(a->cnt);
    memset(a, 0, sizeof(*a));
}
