/* Reprojection of one image plane between celestial WCSs, sampled as astropy reproject's reproject_interp. */
#include "reproject/reproject.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/error.h"

/* Output pixels transformed per batch (bounds the scratch memory). */
#define RP_CHUNK 4096

/* Node spacing of the approximate coordinate grid, in output pixels (even). */
#define RP_CELL 16

/* A cell is interpolated only when the error measured at its test points, times
 * RP_SAFETY, is within the bound: the test points sample the error of the cell rather
 * than bound it, and a smooth mapping interpolated by cubics over 16 pixels is accurate
 * to ~1e-9 pixel anyway, so the margin costs nothing where the grid pays off. */
#define RP_SAFETY 32.0

/* Interpolated positions closer than RP_EPS_FACTOR times the cell's measured error to
 * a sampling decision (the footprint edges at -0.5 and n - 0.5, and for nearest the
 * rounding boundaries at half-integers) are recomputed exactly, so that the grid takes
 * the same decisions as the exact transform. */
#define RP_EPS_FACTOR 8.0

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a formatted message into err (when given).  Cannot fail. */
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int rp_method_parse(const char *s, rp_method *m)
{
    if (!s || !m)
        return TESS_EINVAL;
    if (strcasecmp(s, "nearest") == 0) {
        *m = RP_NEAREST;
        return 0;
    }
    if (strcasecmp(s, "bilinear") == 0) {
        *m = RP_BILINEAR;
        return 0;
    }
    return TESS_EINVAL;
}

const char *rp_method_name(rp_method m)
{
    return m == RP_NEAREST ? "nearest" : "bilinear";
}

/* The state of one reproject_plane call: private WCS copies and scratch arrays. */
typedef struct rp_ctx {
    skywcs *in, *out;            /* private 2-D celestial copies */
    sky_frame fin, fout;
    double eqin, eqout;
    double *lon, *lat, *xr, *yr; /* RP_CHUNK each */
} rp_ctx;

/* Maps n output pixels (0-based) to input pixels as reproject's
 * pixel_to_pixel_with_roundtrip does (reproject/wcs_utils.py): out -> sky -> frame
 * conversion -> in, then back in -> sky -> out; a point whose round trip misses by more
 * than one pixel on either axis becomes NaN.  As in reproject, a round trip that is NaN
 * does not reset the point, unless `strict` (used for the grid nodes, which must be
 * trustworthy) is set.  Returns 0 or TESS_ENOMEM. */
static int map_points(rp_ctx *c, size_t n, const double *x, const double *y,
                      double *xi, double *yi, int strict)
{
    for (size_t off = 0; off < n; off += RP_CHUNK) {
        size_t m = n - off < RP_CHUNK ? n - off : RP_CHUNK;
        const double *px = x + off, *py = y + off;
        double *qx = xi + off, *qy = yi + off;
        if (skywcs_pix2sky(c->out, m, px, py, c->lon, c->lat) == TESS_ENOMEM)
            return TESS_ENOMEM;
        sky_convert(c->fout, c->eqout, c->fin, c->eqin, m, c->lon, c->lat);
        if (skywcs_sky2pix(c->in, m, c->lon, c->lat, qx, qy) == TESS_ENOMEM)
            return TESS_ENOMEM;
        if (skywcs_pix2sky(c->in, m, qx, qy, c->lon, c->lat) == TESS_ENOMEM)
            return TESS_ENOMEM;
        sky_convert(c->fin, c->eqin, c->fout, c->eqout, m, c->lon, c->lat);
        if (skywcs_sky2pix(c->out, m, c->lon, c->lat, c->xr, c->yr) == TESS_ENOMEM)
            return TESS_ENOMEM;
        for (size_t i = 0; i < m; i++) {
            double dx = fabs(c->xr[i] - px[i]), dy = fabs(c->yr[i] - py[i]);
            int reset = strict ? !(dx <= 1.0 && dy <= 1.0) : (dx > 1.0 || dy > 1.0);
            if (reset)
                qx[i] = qy[i] = NAN;
        }
    }
    return 0;
}

/* The value of the input image at input pixel (x, y), as reproject's map_coordinates
 * (reproject/array_utils.py) computes it: the image is padded by one edge pixel, scipy's
 * ndimage.map_coordinates samples the padded array at (x + 1, y + 1) (mode constant,
 * cval NaN), and samples outside [-0.5, n - 0.5] on either axis become NaN.  scipy's
 * order 0 takes the pixel floor(c + 0.5); order 1 weights floor(c) and floor(c) + 1 by
 * w0 = 1 - (c - floor c) and w1 = 1 - w0, summing value * wy * wx over the four points
 * in C order (scipy/ndimage/src/ni_interpolation.c, ni_splines.c).  NaN input pixels
 * propagate through any weight, zero included, as in scipy.  Cannot fail. */
static double sample(const double *src, long nx, long ny, double x, double y, rp_method m)
{
    if (!(x >= -0.5 && x <= (double)nx - 0.5 && y >= -0.5 && y <= (double)ny - 0.5))
        return NAN;
    double cx = x + 1.0, cy = y + 1.0;   /* coordinates in the padded array */
    if (m == RP_NEAREST) {
        long i = (long)floor(cx + 0.5) - 1, j = (long)floor(cy + 0.5) - 1;
        i = i < 0 ? 0 : i >= nx ? nx - 1 : i;
        j = j < 0 ? 0 : j >= ny ? ny - 1 : j;
        return src[j * nx + i];
    }
    double fx = floor(cx), fy = floor(cy);
    double wx0 = 1.0 - (cx - fx), wy0 = 1.0 - (cy - fy);
    double wx1 = 1.0 - wx0, wy1 = 1.0 - wy0;
    long ia = (long)fx - 1, ja = (long)fy - 1;   /* padded index p is image index p - 1 */
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

/* Exact transform of every output pixel, row by row.  Returns the number of finite
 * output pixels or TESS_ENOMEM. */
static long reproject_exact(rp_ctx *c, const double *src, long in_nx, long in_ny,
                            long out_nx, long out_ny, rp_method method, double *dst)
{
    size_t cap = out_nx < RP_CHUNK ? (size_t)out_nx : RP_CHUNK;
    double *buf = malloc(sizeof(double) * cap * 4);
    if (!buf)
        return TESS_ENOMEM;
    double *x = buf, *y = buf + cap, *xi = buf + 2 * cap, *yi = buf + 3 * cap;
    long finite = 0;
    for (long row = 0; row < out_ny; row++) {
        for (long col0 = 0; col0 < out_nx; col0 += (long)cap) {
            size_t m = (size_t)(out_nx - col0) < cap ? (size_t)(out_nx - col0) : cap;
            for (size_t i = 0; i < m; i++) {
                x[i] = (double)(col0 + (long)i);
                y[i] = (double)row;
            }
            if (map_points(c, m, x, y, xi, yi, 0) != 0) {
                free(buf);
                return TESS_ENOMEM;
            }
            double *d = dst + row * out_nx + col0;
            for (size_t i = 0; i < m; i++) {
                d[i] = sample(src, in_nx, in_ny, xi[i], yi[i], method);
                finite += isfinite(d[i]) != 0;
            }
        }
    }
    free(buf);
    return finite;
}

/* Cubic Lagrange weights for the nodes at -1, 0, 1, 2 (in node spacings) at t in [0, 1]
 * (Abramowitz & Stegun 25.2.13, four-point interpolation).  Cannot fail. */
static void lagrange4(double t, double w[4])
{
    w[0] = -t * (t - 1.0) * (t - 2.0) / 6.0;
    w[1] = (t + 1.0) * (t - 1.0) * (t - 2.0) / 2.0;
    w[2] = -(t + 1.0) * t * (t - 2.0) / 2.0;
    w[3] = (t + 1.0) * t * (t - 1.0) / 6.0;
}

/* The coordinate grid: node (kx, ky) sits at output pixel ((kx - 1) * RP_CELL,
 * (ky - 1) * RP_CELL), so cell (cx, cy), covering output pixels [cx, cx + 1) * RP_CELL
 * on x, is interpolated from nodes kx = cx .. cx + 3 and ky = cy .. cy + 3. */
typedef struct grid {
    long ncx, ncy;     /* cells */
    long nnx, nny;     /* nodes: ncx + 3, ncy + 3 */
    double *gx, *gy;   /* input pixel of each node, NaN when not trustworthy */
} grid;

/* Interpolates the input pixel of cell (cx, cy) with the separable weights wx (along
 * x) and wy (along y) of lagrange4.  Cannot fail. */
static void grid_eval(const grid *g, long cx, long cy, const double wx[4], const double wy[4],
                      double *xi, double *yi)
{
    double sx = 0.0, sy = 0.0;
    for (int j = 0; j < 4; j++) {
        const double *rx = g->gx + (cy + j) * g->nnx + cx;
        const double *ry = g->gy + (cy + j) * g->nnx + cx;
        double ax = wx[0] * rx[0] + wx[1] * rx[1] + wx[2] * rx[2] + wx[3] * rx[3];
        double ay = wx[0] * ry[0] + wx[1] * ry[1] + wx[2] * ry[2] + wx[3] * ry[3];
        sx += wy[j] * ax;
        sy += wy[j] * ay;
    }
    *xi = sx;
    *yi = sy;
}

/* Decides, for each cell, whether interpolation may replace the exact transform there:
 * its 16 nodes must be finite, and at its centre and edge midpoints (where the
 * interpolation error of a smooth mapping peaks) the interpolated input pixel must be
 * within `bound` of the exact one, that error being measured in input pixels and in
 * output pixels (divided by the smallest singular value of the local Jacobian) and the
 * larger of the two taken (see RP_SAFETY).  Test points that fail the round trip fail
 * the cell.  ok[cy * ncx + cx] receives 1 or 0, eps[] the distance (input pixels) within
 * which an interpolated position is too close to a sampling decision to be trusted.
 * Returns 0 or TESS_ENOMEM. */
static int grid_check(rp_ctx *c, const grid *g, double bound, unsigned char *ok, double *eps)
{
    const long H = RP_CELL, ncx = g->ncx, ncy = g->ncy;
    /* Test points: centres (ncx * ncy), midpoints of horizontal edges (ncx * (ncy + 1)),
     * midpoints of vertical edges ((ncx + 1) * ncy). */
    size_t nc = (size_t)ncx * ncy, nh = (size_t)ncx * (ncy + 1), nv = (size_t)(ncx + 1) * ncy;
    size_t nt = nc + nh + nv;
    double *mem = malloc(sizeof(double) * nt * 4);
    if (!mem)
        return TESS_ENOMEM;
    double *tx = mem, *ty = mem + nt, *ex = mem + 2 * nt, *ey = mem + 3 * nt;
    size_t k = 0;
    for (long cy = 0; cy < ncy; cy++)
        for (long cx = 0; cx < ncx; cx++, k++) {
            tx[k] = (double)(cx * H + H / 2);
            ty[k] = (double)(cy * H + H / 2);
        }
    for (long ky = 0; ky <= ncy; ky++)
        for (long cx = 0; cx < ncx; cx++, k++) {
            tx[k] = (double)(cx * H + H / 2);
            ty[k] = (double)(ky * H);
        }
    for (long cy = 0; cy < ncy; cy++)
        for (long kx = 0; kx <= ncx; kx++, k++) {
            tx[k] = (double)(kx * H);
            ty[k] = (double)(cy * H + H / 2);
        }
    if (map_points(c, nt, tx, ty, ex, ey, 1) != 0) {
        free(mem);
        return TESS_ENOMEM;
    }
    double w0[4], wh[4], w1[4];
    lagrange4(0.0, w0);
    lagrange4(0.5, wh);
    lagrange4(1.0, w1);

    for (long cy = 0; cy < ncy; cy++) {
        for (long cx = 0; cx < ncx; cx++) {
            int good = 1;
            for (long j = 0; j < 4 && good; j++)
                for (long i = 0; i < 4 && good; i++) {
                    long q = (cy + j) * g->nnx + cx + i;
                    good = isfinite(g->gx[q]) && isfinite(g->gy[q]);
                }
            if (!good) {
                ok[cy * ncx + cx] = 0;
                eps[cy * ncx + cx] = 0.0;
                continue;
            }
            /* Local Jacobian d(input)/d(output) from the cell's corner nodes, and its
             * singular values in closed form: s1^2 + s2^2 = |J|_F^2, s1 s2 = |det J|. */
            long q00 = (cy + 1) * g->nnx + cx + 1;
            double a = (g->gx[q00 + 1] - g->gx[q00]) / (double)H;
            double b = (g->gx[q00 + g->nnx] - g->gx[q00]) / (double)H;
            double cc = (g->gy[q00 + 1] - g->gy[q00]) / (double)H;
            double d = (g->gy[q00 + g->nnx] - g->gy[q00]) / (double)H;
            double s = a * a + b * b + cc * cc + d * d, det = fabs(a * d - b * cc);
            double smax = sqrt(0.5 * (s + sqrt(fmax(s * s - 4.0 * det * det, 0.0))));
            double smin = smax > 0.0 ? det / smax : 0.0;
            if (!(smin > 0.0) || !isfinite(smin)) {
                ok[cy * ncx + cx] = 0;
                eps[cy * ncx + cx] = 0.0;
                continue;
            }
            double scale = smin < 1.0 ? smin : 1.0;
            size_t idx[5] = {
                (size_t)(cy * ncx + cx),                          /* centre */
                nc + (size_t)(cy * ncx + cx),                     /* bottom edge */
                nc + (size_t)((cy + 1) * ncx + cx),               /* top edge */
                nc + nh + (size_t)(cy * (ncx + 1) + cx),          /* left edge */
                nc + nh + (size_t)(cy * (ncx + 1) + cx + 1) };    /* right edge */
            const double *wxs[5] = { wh, wh, wh, w0, w1 };
            const double *wys[5] = { wh, w0, w1, wh, wh };
            double worst = 0.0;
            for (int p = 0; p < 5 && good; p++) {
                double xi, yi;
                grid_eval(g, cx, cy, wxs[p], wys[p], &xi, &yi);
                double e = hypot(xi - ex[idx[p]], yi - ey[idx[p]]);
                if (!isfinite(e))
                    good = 0;
                else if (e > worst)
                    worst = e;
            }
            good = good && worst / scale * RP_SAFETY <= bound;
            ok[cy * ncx + cx] = (unsigned char)good;
            eps[cy * ncx + cx] = good ? RP_EPS_FACTOR * worst + 1e-10 : 0.0;
        }
    }
    free(mem);
    return 0;
}

/* Approximate coordinate grid (see reproject.h): exact transforms at the nodes and test
 * points, cubic interpolation inside accepted cells, exact per-pixel transforms (with
 * the round trip check) in the others.  Returns the number of finite output pixels or
 * TESS_ENOMEM. */
/* 1 when coordinate v (input pixels, n pixels on the axis) lies within eps of a
 * sampling decision: the valid range [-0.5, n - 0.5], and for nearest the half-integer
 * rounding boundaries (scipy's floor(c + 0.5) of the padded coordinate c = v + 1). */
static int near_decision(double v, long n, double eps, rp_method m)
{
    if (fabs(v + 0.5) <= eps || fabs(v - ((double)n - 0.5)) <= eps)
        return 1;
    if (m == RP_NEAREST) {
        double c = v + 1.0 + 0.5;
        double f = c - floor(c);
        return f <= eps || f >= 1.0 - eps;
    }
    return 0;
}

/* Approximate coordinate grid (see reproject.h): exact transforms at the nodes and test
 * points, cubic interpolation inside accepted cells (positions next to a sampling
 * decision transformed exactly), exact per-pixel transforms with the round trip check
 * in the other cells.  Returns the number of finite output pixels or TESS_ENOMEM. */
static long reproject_grid(rp_ctx *c, const double *src, long in_nx, long in_ny,
                           long out_nx, long out_ny, rp_method method, double bound,
                           double *dst)
{
    const long H = RP_CELL;
    grid g;
    g.ncx = (out_nx + H - 1) / H;
    g.ncy = (out_ny + H - 1) / H;
    g.nnx = g.ncx + 3;
    g.nny = g.ncy + 3;
    size_t nn = (size_t)g.nnx * (size_t)g.nny, ncell = (size_t)g.ncx * (size_t)g.ncy;
    double *nodes = malloc(sizeof(double) * nn * 4);
    unsigned char *ok = malloc(ncell);
    double *eps = malloc(sizeof(double) * ncell);
    double *cellbuf = malloc(sizeof(double) * H * H * 6);
    long *which = malloc(sizeof(long) * H * H);
    long finite = TESS_ENOMEM;
    if (!nodes || !ok || !eps || !cellbuf || !which)
        goto done;
    g.gx = nodes + 2 * nn;
    g.gy = nodes + 3 * nn;
    for (long ky = 0; ky < g.nny; ky++)
        for (long kx = 0; kx < g.nnx; kx++) {
            nodes[ky * g.nnx + kx] = (double)((kx - 1) * H);
            nodes[nn + ky * g.nnx + kx] = (double)((ky - 1) * H);
        }
    if (map_points(c, nn, nodes, nodes + nn, g.gx, g.gy, 1) != 0)
        goto done;
    if (grid_check(c, &g, bound, ok, eps) != 0)
        goto done;

    double wt[RP_CELL][4];
    for (long p = 0; p < H; p++)
        lagrange4((double)p / (double)H, wt[p]);

    finite = 0;
    double *qx = cellbuf, *qy = cellbuf + H * H;
    double *px = cellbuf + 2 * H * H, *py = cellbuf + 3 * H * H;
    double *rx = cellbuf + 4 * H * H, *ry = cellbuf + 5 * H * H;
    for (long cy = 0; cy < g.ncy; cy++) {
        long r0 = cy * H, r1 = r0 + H < out_ny ? r0 + H : out_ny;
        for (long cx = 0; cx < g.ncx; cx++) {
            long c0 = cx * H, c1 = c0 + H < out_nx ? c0 + H : out_nx;
            size_t m = 0, nx = 0;
            int accepted = ok[cy * g.ncx + cx];
            double e = eps[cy * g.ncx + cx];
            for (long row = r0; row < r1; row++)
                for (long col = c0; col < c1; col++, m++) {
                    int exact = !accepted;
                    if (accepted) {
                        grid_eval(&g, cx, cy, wt[col - c0], wt[row - r0], &qx[m], &qy[m]);
                        exact = near_decision(qx[m], in_nx, e, method)
                                || near_decision(qy[m], in_ny, e, method);
                    }
                    if (exact) {
                        px[nx] = (double)col;
                        py[nx] = (double)row;
                        which[nx++] = (long)m;
                    }
                }
            if (nx > 0) {
                if (map_points(c, nx, px, py, rx, ry, 0) != 0) {
                    finite = TESS_ENOMEM;
                    goto done;
                }
                for (size_t k = 0; k < nx; k++) {
                    qx[which[k]] = rx[k];
                    qy[which[k]] = ry[k];
                }
            }
            m = 0;
            for (long row = r0; row < r1; row++)
                for (long col = c0; col < c1; col++, m++) {
                    double v = sample(src, in_nx, in_ny, qx[m], qy[m], method);
                    dst[row * out_nx + col] = v;
                    finite += isfinite(v) != 0;
                }
        }
    }
done:
    free(nodes);
    free(ok);
    free(eps);
    free(cellbuf);
    free(which);
    return finite;
}

/* A private 2-D celestial copy of w (its celestial axes when it has more), or NULL. */
static skywcs *private_celestial(const skywcs *w)
{
    if (!skywcs_has_celestial(w))
        return NULL;
    return skywcs_naxis(w) == 2 ? skywcs_copy(w) : skywcs_celestial(w);
}

/* See reproject.h.  Errors: TESS_EINVAL (NULL arrays, sizes < 1 or too large, a WCS
 * without a celestial pair, an unknown celestial frame, a negative or non-finite
 * max_coord_error), TESS_ENOMEM; `dst` is unspecified on error. */
long reproject_plane(const skywcs *in, const double *src, long in_nx, long in_ny,
                     const skywcs *out, long out_nx, long out_ny,
                     rp_method method, double max_coord_error,
                     double *dst, char *err, size_t errlen)
{
    if (!in || !out || !src || !dst) {
        set_err(err, errlen, "missing WCS or pixel array");
        return TESS_EINVAL;
    }
    if (in_nx < 1 || in_ny < 1 || out_nx < 1 || out_ny < 1
        || in_nx > LONG_MAX / in_ny || out_nx > LONG_MAX / out_ny
        || in_nx > INT_MAX || in_ny > INT_MAX || out_nx > INT_MAX || out_ny > INT_MAX) {
        set_err(err, errlen, "bad image size (%ldx%ld -> %ldx%ld)", in_nx, in_ny, out_nx, out_ny);
        return TESS_EINVAL;
    }
    if (method != RP_NEAREST && method != RP_BILINEAR) {
        set_err(err, errlen, "method: unknown");
        return TESS_EINVAL;
    }
    if (!isfinite(max_coord_error) || max_coord_error < 0.0) {
        set_err(err, errlen, "max_coord_error: must be a finite number >= 0");
        return TESS_EINVAL;
    }
    if (!skywcs_has_celestial(in) || !skywcs_has_celestial(out)) {
        set_err(err, errlen, "%s WCS has no celestial axes", skywcs_has_celestial(in) ? "output" : "input");
        return TESS_EINVAL;
    }
    rp_ctx c;
    memset(&c, 0, sizeof c);
    c.fin = skywcs_frame(in, &c.eqin);
    c.fout = skywcs_frame(out, &c.eqout);
    if (c.fin == SKY_FRAME_NONE || c.fout == SKY_FRAME_NONE) {
        set_err(err, errlen, "%s WCS has an unsupported celestial frame",
                c.fin == SKY_FRAME_NONE ? "input" : "output");
        return TESS_EINVAL;
    }
    long rc;
    c.in = private_celestial(in);
    c.out = private_celestial(out);
    double *scratch = malloc(sizeof(double) * RP_CHUNK * 4);
    if (!scratch) {
        rc = TESS_ENOMEM;
        set_err(err, errlen, "out of memory");
        goto done;
    }
    if (!c.in || !c.out) {
        /* skywcs_celestial also refuses celestial axes coupled to other axes. */
        int multi = (!c.in && skywcs_naxis(in) != 2) || (!c.out && skywcs_naxis(out) != 2);
        rc = multi ? TESS_EINVAL : TESS_ENOMEM;
        set_err(err, errlen, "%s", multi ? "celestial axes not separable from the others"
                                         : "out of memory");
        goto done;
    }
    c.lon = scratch;
    c.lat = scratch + RP_CHUNK;
    c.xr = scratch + 2 * RP_CHUNK;
    c.yr = scratch + 3 * RP_CHUNK;

    if (max_coord_error > 0.0 && out_nx >= 2 * RP_CELL && out_ny >= 2 * RP_CELL)
        rc = reproject_grid(&c, src, in_nx, in_ny, out_nx, out_ny, method, max_coord_error, dst);
    else
        rc = reproject_exact(&c, src, in_nx, in_ny, out_nx, out_ny, method, dst);
    if (rc < 0)
        set_err(err, errlen, "out of memory");
done:
    skywcs_free(c.in);
    skywcs_free(c.out);
    free(scratch);
    return rc;
}
