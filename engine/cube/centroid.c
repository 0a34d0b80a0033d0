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
static void hist_stats(const uint32_t *hist, long nbins, size_t n, double *b, double *mad);

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
    hist_stats(hist, HIST_BINS, n, b, mad);
    return 1;
}

/* The median b and MAD of the n values counted in hist[0..nbins-1] (n >= 1). */
static void hist_stats(const uint32_t *hist, long nbins, size_t n, double *b, double *mad)
{
    size_t r1 = (n - 1) / 2, r2 = n > 1 ? r1 + 1 : r1, cum = 0;
    double va = -1, vb = -1;
    for (long k = 0; k < nbins && vb < 0; k++) {
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
        double dh = hi < nbins ? fabs((double)hi - *b) : INFINITY;
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

/* GCC's -O2 cost model leaves the two loops below scalar; they are the whole cost of an
 * 8-bit centroid, next to the frame's decode. */
#if defined(__GNUC__) && !defined(__clang__)
#define CENTROID_VECTORIZE __attribute__((optimize("O3")))
#else
#define CENTROID_VECTORIZE
#endif

/* Counts of the n bytes of v in hist[256], through four interleaved histograms (runs of
 * equal values would otherwise wait on their own increments). */
CENTROID_VECTORIZE static void hist_u8(const unsigned char *v, size_t n, uint32_t *hist)
{
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h[0][v[i]]++;
        h[1][v[i + 1]]++;
        h[2][v[i + 2]]++;
        h[3][v[i + 3]]++;
    }
    for (; i < n; i++)
        h[0][v[i]]++;
    for (int k = 0; k < 256; k++)
        hist[k] = h[0][k] + h[1][k] + h[2][k] + h[3][k];
}

/* Columns summed per run with 32-bit sums: 255 * 4095 * 4096 / 2 < 2^32. */
#define CENTROID_RUN 4096

/* Over the bytes row[0..n-1] above ilim: *sv += their sum, *c += their count, *sx += the
 * sum of their indices, *svx += the sum of value times index (n <= CENTROID_RUN). */
CENTROID_VECTORIZE static void run_sums(const unsigned char *row, long n, int ilim,
                                        uint64_t *sv, uint64_t *c, uint64_t *sx,
                                        uint64_t *svx)
{
    uint32_t a = 0, b = 0, d = 0, e = 0;
    for (long x = 0; x < n; x++) {
        uint32_t m = row[x] > ilim ? 0xFFFFFFFFu : 0u;
        uint32_t val = row[x] & m;
        a += val;
        b += m & 1u;
        d += (uint32_t)x & m;
        e += val * (uint32_t)x;
    }
    *sv += a;
    *c += b;
    *sx += d;
    *svx += e;
}

void cube_centroid_u8(const unsigned char *v, long nx, long ny, double *cx, double *cy)
{
    size_t n = (size_t)nx * (size_t)ny;
    *cx = nx / 2.0;
    *cy = ny / 2.0;
    if (n < 1 || n > UINT32_MAX)
        return;
    uint32_t hist[256];
    hist_u8(v, n, hist);
    double b, mad;
    hist_stats(hist, 256, n, &b, &mad);
    double t = b + 3.0 * 1.4826 * mad;
    if (!isfinite(t))
        t = b;
    /* For integer v, v > lim exactly when v > floor(lim).  The sums of (v - b) and of
     * (v - b) x over a row are S - c b and VX - b X from the integer sums S (of v), c (of
     * pixels), X (of x) and VX (of v x); b is a multiple of 1/2, so each is the exact
     * value that cube_centroid's running double sums reach (all below 2^53). */
    for (int pass = 0; pass < 2; pass++) {
        double lim = floor(pass == 0 ? t : b), si = 0, sx = 0, sy = 0;
        if (lim >= 255.0)
            continue;
        int ilim = lim < -1.0 ? -1 : (int)lim;
        for (long y = 0; y < ny; y++) {
            const unsigned char *row = v + (size_t)y * (size_t)nx;
            uint64_t sv = 0, c = 0, sxx = 0, svx = 0;
            for (long x0 = 0; x0 < nx; x0 += CENTROID_RUN) {
                uint64_t v0 = sv, c0 = c;
                long k = nx - x0 < CENTROID_RUN ? nx - x0 : CENTROID_RUN;
                run_sums(row + x0, k, ilim, &sv, &c, &sxx, &svx);
                /* indices of the run from x0: shift its sums to the row's */
                sxx += (uint64_t)x0 * (c - c0);
                svx += (uint64_t)x0 * (sv - v0);
            }
            double rs = (double)sv - (double)c * b;
            double rx = (double)svx - b * (double)sxx;
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
