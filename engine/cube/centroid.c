/* The median and the thresholded centroid of a frame (centroid.h). */
#include "engine/cube/centroid.h"

#include "engine/image/render.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

double cube_median(const double *a, size_t m)
{
    render_params p;
    render_params_default(&p);
    p.min_cut = p.max_cut = (render_cut){ 50.0, 1 };
    double lo = NAN, hi = NAN;
    if (render_resolve_cuts(a, m, &p, &lo, &hi) != 0)
        return NAN;
    return lo;
}

/* Frames of integers 0..65535 (PNG frames, 8/16-bit FITS) take their median and MAD
 * from a histogram instead of two quickselects over doubles. */
#define HIST_BINS 65536

/* numpy.percentile's 50th of m values whose two middle order statistics (ranks
 * floor((m-1)/2) and the next) are va <= vb, in render.c's steps: the same double. */
static double median_of(double va, double vb, size_t m)
{
    double vi = (double)(m - 1) * 0.5;
    size_t prev = (size_t)floor(vi);
    if (m == 1)
        return va;
    double gamma = vi - (double)prev;
    double d = vb - va;
    return gamma >= 0.5 ? vb - d * (1.0 - gamma) : va + d * gamma;
}

/* The median b and MAD (median of |v - b|) of the n values of v, when all are integers
 * in 0..65535, from a histogram in `hist` (HIST_BINS counts).  1 done, 0 not such data.
 * Exactly the values of cube_median on v and on |v - b|: the same order statistics, the
 * same interpolation, and |v - b| computed as the same double. */
static int hist_median_mad(const double *v, size_t n, uint32_t *hist, double *b, double *mad)
{
    if (n < 1 || n > UINT32_MAX)
        return 0;
    memset(hist, 0, HIST_BINS * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        if (!(x >= 0.0 && x <= 65535.0))
            return 0;
        uint32_t k = (uint32_t)x;
        if ((double)k != x)
            return 0;
        hist[k]++;
    }
    size_t r1 = (n - 1) / 2, r2 = n > 1 ? r1 + 1 : r1, cum = 0;
    double va = -1, vb = -1;
    for (uint32_t k = 0; k < HIST_BINS && vb < 0; k++) {
        cum += hist[k];
        if (va < 0 && cum > r1)
            va = k;
        if (cum > r2)
            vb = k;
    }
    *b = median_of(va, vb, n);
    /* |k - b| grows walking away from b on either side: merge the two walks */
    long lo = (long)floor(*b), hi = lo + 1;
    double da = -1, db = -1;
    cum = 0;
    while (db < 0) {
        double dl = lo >= 0 ? fabs((double)lo - *b) : INFINITY;
        double dh = hi < HIST_BINS ? fabs((double)hi - *b) : INFINITY;
        double d;
        uint32_t c;
        if (dl <= dh) {
            d = dl;
            c = hist[lo--];
        } else {
            d = dh;
            c = hist[hi++];
        }
        cum += c;
        if (da < 0 && cum > r1)
            da = d;
        if (cum > r2)
            db = d;
    }
    *mad = median_of(da, db, n);
    return 1;
}

void cube_centroid(const double *v, long nx, long ny, double *scratch, double *cx, double *cy)
{
    size_t n = (size_t)nx * (size_t)ny;
    *cx = nx / 2.0;
    *cy = ny / 2.0;
    double b, mad;
    if (n * sizeof(double) < HIST_BINS * sizeof(uint32_t) ||
        !hist_median_mad(v, n, (uint32_t *)(void *)scratch, &b, &mad)) {
        b = cube_median(v, n);
        if (!isfinite(b))
            return;
        for (size_t i = 0; i < n; i++)
            scratch[i] = fabs(v[i] - b);
        mad = cube_median(scratch, n);
    }
    double t = b + 3.0 * 1.4826 * mad;
    if (!isfinite(t))
        t = b;
    for (int pass = 0; pass < 2; pass++) {
        double lim = pass == 0 ? t : b, si = 0, sx = 0, sy = 0;
        for (long y = 0; y < ny; y++) {
            const double *row = v + y * nx;
            double rs = 0, rx = 0;
            for (long x = 0; x < nx; x++) {
                double w = row[x] - b;
                if (row[x] > lim && isfinite(w)) {
                    rs += w;
                    rx += w * (double)x;
                }
            }
            si += rs;
            sx += rx;
            sy += rs * (double)y;
        }
        if (si > 0 && isfinite(si) && isfinite(sx) && isfinite(sy)) {
            *cx = sx / si;
            *cy = sy / si;
            return;
        }
    }
}
