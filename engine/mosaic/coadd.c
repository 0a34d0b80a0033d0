/* Pixel-by-pixel combination of reprojected images (coadd.h). */
#include "engine/mosaic/coadd.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine/base/error.h"

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
    double start = a->combine == MOS_MEAN || a->combine == MOS_SUM ? 0.0 : NAN;
    for (size_t i = 0; i < a->np; i++) {
        a->acc[i] = start;
        a->accw[i] = 0.0;
    }
    if (a->cnt)
        memset(a->cnt, 0, sizeof(int) * a->np);
}

/* The adding of one row, for values and weights of type T (float: mos_accum_add, double:
 * mos_accum_add_d).  One body for both, so that they cannot drift apart; the float
 * instance is the code as it always was (each value and weight widened to double). */
#define ACCUM_ADD_IMPL(NAME, T)                                                            \
    /* The sums: the common case, without the switch of the others. */                    \
    static void NAME##_sums(mos_accum *a, size_t o, const T *v, const T *w, long n,       \
                            double base, double slope, long x0)                           \
    {                                                                                     \
        double *ar = a->acc + o, *wa = a->accw + o;                                       \
        for (long x = 0; x < n; x++) {                                                    \
            double wt = w ? (double)w[x] : 1.0;                                           \
            if (wt > 0.0 && isfinite(v[x])) {                                             \
                ar[x] += wt * ((double)v[x] - (base + slope * (double)(x0 + x)));         \
                wa[x] += wt;                                                              \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
                                                                                          \
    void NAME(mos_accum *a, size_t o, const T *v, const T *w, long n, double base,        \
              double slope, long x0)                                                      \
    {                                                                                     \
        if (n <= 0 || o >= a->np)                                                         \
            return;                                                                       \
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

void mos_accum_result(mos_accum *a, float *out, float *cov)
{
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
