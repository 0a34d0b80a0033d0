/* The median and the thresholded centroid of a frame (centroid.h). */
#include "engine/cube/centroid.h"

#include "engine/image/render.h"

#include <math.h>

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

void cube_centroid(const double *v, long nx, long ny, double *scratch, double *cx, double *cy)
{
    size_t n = (size_t)nx * (size_t)ny;
    *cx = nx / 2.0;
    *cy = ny / 2.0;
    double b = cube_median(v, n);
    if (!isfinite(b))
        return;
    for (size_t i = 0; i < n; i++)
        scratch[i] = fabs(v[i] - b);
    double t = b + 3.0 * 1.4826 * cube_median(scratch, n);
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
