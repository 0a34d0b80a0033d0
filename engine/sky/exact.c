/* Flux-conserving reprojection by exact pixel overlap (reproject_exact), integrated along the input pixel edges in the output pixel plane. */
#include "engine/sky/exact.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sky/coordmap.h"
#include "engine/sky/simd.h"
#include "engine/base/error.h"
#include "engine/base/hugemem.h"

/*
 * The model is astropy reproject's reproject_exact (reproject/spherical_intersect,
 * descended from Montage mProject's overlap computation): every pixel, input or output,
 * is the spherical quadrilateral whose corners are the pixel's corners and whose edges
 * are great circles; output pixel p receives sum_k v_k W_kp / sum_k W_kp and the
 * footprint sum_k W_kp, with W_kp = area(k n p) / area(p).
 *
 * How it is computed here:
 *  1. The corners of the input pixels are mapped to output pixel coordinates
 *     (rp_coordmap_lattice, band by band, only for the input cells that can reach the
 *     requested output rows), so each input pixel becomes a planar quadrilateral.
 *  2. Its overlap with every output pixel follows from Green's theorem: the area of a
 *     region within a pixel is the integral, along the region's outline, of the width
 *     of the pixel to the right of the outline (signed by the direction in y).  The
 *     outline pieces that cross a pixel deposit their exact share there; the pixels
 *     further right in the same row receive the full height of the piece as "cover",
 *     which a running sum along each row hands on (the accumulation rasteriser of font
 *     renderers: FreeType's smooth rasteriser, ftgrays.c, cells of area and cover).
 *     Because the sums are linear, an input pixel edge shared by two pixels is walked
 *     once, weighted by the difference of their values, and only the edges of the
 *     input grid are walked: the cost grows with the perimeter of the input pixels,
 *     not with the number of pieces.  The cover of the weight sum is exact (heights are
 *     rounded to multiples of 2^-48 pixel, whose sums are exact), so that pixels beyond
 *     the data get exactly zero, never rounding noise.
 *  3. Planar areas become solid angles with the area element J of the output
 *     projection (solid angle per unit of output pixel area), linearised about the
 *     output pixel centre c: area(piece) / area(p) = a + g . m, where a is the piece's
 *     area and m its first moment about c, in output pixels (also integrated along the
 *     outline), and g = grad ln J at c.  This is exact for a J linear over the pixel,
 *     leaving a relative error of order (pixel size in radians)^2.  g comes from the
 *     spherical areas of the neighbouring output pixels at nodes every EX_GSTEP
 *     pixels, bilinearly interpolated; where it is below EX_G_MIN everywhere (small
 *     fields near the tangent point of TAN, or the equator of CAR) the moments are
 *     skipped.
 * How it runs: the per-pixel tests of step 1 four input pixels at a time
 * (band_row_signs), and the edges of step 2 in batches (ex_short_flush): a vector step
 * computes, four edges at a time, the pieces of every edge short enough to cross at most
 * one row and one column boundary in all (nearly all of them where input pixels are no
 * larger than output pixels), with the scalar code's arithmetic in the same order, and
 * the products that the deposits add; a scalar pass then adds them to the cells edge by
 * edge, in the order of the edges, and walks the others with the general code.  Every
 * cell receives the same terms in the same order as from the scalar walk alone, so the
 * results do not depend on the path (nor on the CPU's vector width: simd.h).  Edges of
 * two input pixels that are both left out are not looked at; the final pass of a band
 * leaves its cells at 0 for the next.
 * For a gnomonic (TAN) output, the output pixel plane is a linear image of the tangent
 * plane, where great circles are straight lines: steps 1-2 are then exact, and only the
 * linearisation of step 3 approximates.  For other output projections great circles are
 * curved in the pixel plane; the straight edges used here miss them by the sagitta,
 * about L^2 k / 8 for an edge of L pixels and a curvature k of the mapped great circle
 * (second order in the pixel size; ~1e-7 of a pixel for arcsecond pixels).
 *
 * Precision: corners are used as the coordinate map gives them (wcslib rounds sky
 * positions in degrees to ~1e-10 output pixel for arcsecond pixels); sums telescope, so
 * a pixel's footprint is good to ~1e-16 absolute and its value to ~1e-16 / footprint
 * relative (a barely covered pixel gets its value as a small difference of the covers
 * handed along its row).  Nothing depends on the size of the pixels: 0.005" pixels
 * are as exact as 1" ones (reproject_exact loses precision below ~0.05").
 *
 * Input pixels left out (they add nothing to either sum): a non-finite value (so that a
 * NaN pixel reduces the footprint of the outputs it overlaps instead of turning them NaN,
 * as reproject 0.10 does); a corner off either projection, or failing the round trip of
 * rp_coordmap; a degenerate (zero area) or self-intersecting (folded) quadrilateral; a
 * quadrilateral with an edge much longer than the lattice edges next to it, which happens
 * where the edge crosses a seam of the output projection (the +-180 degree meridian of
 * CAR, AIT, ...) and runs across the whole map.  Concave quadrilaterals need no special
 * care (Green's theorem holds for any simple outline).  Quadrilaterals whose
 * orientation is reversed (parity flips) count with their absolute area.
 */

/* Input pixels per side of the cells used to select the input region that reaches the
 * requested rows (a power of two); also the height of the bands whose corners are mapped
 * together. */
#define EX_CELL 32

/* Cap on the number of selection nodes: EX_CELL doubles until the node grid fits. */
#define EX_MAX_NODES (1L << 18)

/* Output pixels between the nodes where the area gradient g is measured. */
#define EX_GSTEP 32

/* Below this |g| (per output pixel, on both axes) at every probe, the solid angle
 * correction would change no weight by more than (|gx| + |gy|) / 2 <= 1e-6 relative (the
 * first moment of a piece about the pixel centre is at most half its area per axis; only
 * partly covered pixels and mixtures of values are affected) and is skipped, which
 * halves the cost.  That is below what reproject_exact resolves itself (its footprints
 * carry ~1e-5 of rounding at arcsecond scales).  For 1" pixels the correction starts
 * ~4 degrees from a TAN tangent point, or at latitude ~12 degrees in CAR; for 10" pixels
 * at 0.4 and 1.2 degrees. */
#define EX_G_MIN 1e-6

/* Seam test: an edge longer than EX_SEAM_MIN output pixels and EX_SEAM_RATIO times its
 * longest neighbour on the same lattice line is taken to cross a seam. */
#define EX_SEAM_MIN 2.0
#define EX_SEAM_RATIO 4.0

/* Corners farther than this from the output grid's origin (pixels) are treated as off the
 * map: only projections' singularities produce them, and the pixel arithmetic (long
 * indices, 2^-48 quantisation) stays exact well within it. */
#define EX_COORD_MAX 1e12

/* Heights within a row are rounded to multiples of 2^-48 pixel by adding and removing
 * EX_QUANT = 1.5 * 2^4 (the spacing of doubles in [16, 32) is 2^-48); sums of such
 * heights are exact, so the cover of closed outlines cancels exactly.  Needs IEEE
 * double arithmetic without reassociation (no -ffast-math). */
#define EX_QUANT 24.0

/* ------------------------------------------------------------------------------------ */
/* Spherical areas and the area element of the output projection                          */

/* Unit vector of (lon, lat) in degrees.  Cannot fail. */
static void unit_vector(double lon, double lat, double v[3])
{
    const double d2r = M_PI / 180.0;
    double cl = cos(lat * d2r);
    v[0] = cl * cos(lon * d2r);
    v[1] = cl * sin(lon * d2r);
    v[2] = sin(lat * d2r);
}

/* Solid angle (steradians) of the spherical quadrilateral with great-circle edges and the
 * corners (lon[k], lat[k]), k = 0..3 in order (degrees).  The corners are projected
 * gnomonically about their mean direction (great circles become straight lines), the
 * quadrilateral is fanned into two triangles, and each triangle's solid angle comes from
 * Van Oosterom & Strackee (IEEE Trans. Biomed. Eng. 30, 125, 1983),
 *     tan(E / 2) = a . (b x c) / (1 + a . b + b . c + c . a),
 * with a = (X, Y, 1) / |(X, Y, 1)| in the tangent frame, where the triple product is the
 * planar determinant of the projected points (differences of small numbers: no loss of
 * precision for tiny pixels, unlike spherical excess from angles).  Returns NaN when a
 * corner is NaN or 90 degrees or more from the mean direction. */
static double quad_solid_angle(const double *lon, const double *lat)
{
    double q[4][3], c[3] = { 0.0, 0.0, 0.0 };
    for (int k = 0; k < 4; k++) {
        unit_vector(lon[k], lat[k], q[k]);
        for (int i = 0; i < 3; i++)
            c[i] += q[k][i];
    }
    double cn = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
    if (!(cn > 0.0))
        return NAN;
    for (int i = 0; i < 3; i++)
        c[i] /= cn;
    /* e1 = normalised (axis of the smallest |c_i|) x c, e2 = c x e1. */
    int ax = fabs(c[0]) <= fabs(c[1]) ? (fabs(c[0]) <= fabs(c[2]) ? 0 : 2)
                                      : (fabs(c[1]) <= fabs(c[2]) ? 1 : 2);
    double u[3] = { 0.0, 0.0, 0.0 }, e1[3], e2[3];
    u[ax] = 1.0;
    e1[0] = u[1] * c[2] - u[2] * c[1];
    e1[1] = u[2] * c[0] - u[0] * c[2];
    e1[2] = u[0] * c[1] - u[1] * c[0];
    double en = sqrt(e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2]);
    for (int i = 0; i < 3; i++)
        e1[i] /= en;
    e2[0] = c[1] * e1[2] - c[2] * e1[1];
    e2[1] = c[2] * e1[0] - c[0] * e1[2];
    e2[2] = c[0] * e1[1] - c[1] * e1[0];
    double X[4], Y[4], N[4];
    for (int k = 0; k < 4; k++) {
        double z = q[k][0] * c[0] + q[k][1] * c[1] + q[k][2] * c[2];
        if (!(z > 0.0))
            return NAN;
        X[k] = (q[k][0] * e1[0] + q[k][1] * e1[1] + q[k][2] * e1[2]) / z;
        Y[k] = (q[k][0] * e2[0] + q[k][1] * e2[1] + q[k][2] * e2[2]) / z;
        N[k] = sqrt(1.0 + X[k] * X[k] + Y[k] * Y[k]);
    }
    double total = 0.0;
    for (int t = 1; t <= 2; t++) {
        int a = 0, b = t, d = t + 1;
        double det = (X[b] - X[a]) * (Y[d] - Y[a]) - (X[d] - X[a]) * (Y[b] - Y[a]);
        double ab = (X[a] * X[b] + Y[a] * Y[b] + 1.0) / (N[a] * N[b]);
        double bd = (X[b] * X[d] + Y[b] * Y[d] + 1.0) / (N[b] * N[d]);
        double da = (X[d] * X[a] + Y[d] * Y[a] + 1.0) / (N[d] * N[a]);
        total += 2.0 * atan2(det / (N[a] * N[b] * N[d]), 1.0 + ab + bd + da);
    }
    return fabs(total);
}

/* For n nodes (output pixel positions u[k], v[k]), grad ln J by central differences of
 * the spherical areas of the four neighbouring pixels: gx = (ln area(u + 1, v) -
 * ln area(u - 1, v)) / 2, gy likewise; 0 where a neighbour is not all on the sky.
 * Returns 0 or TESS_ENOMEM. */
static int node_gradients(skywcs *out, size_t n, const double *u, const double *v,
                          double *gx, double *gy)
{
    if (n == 0)
        return 0;
    const size_t np = n * 16;
    double *mem = malloc(sizeof(double) * np * 4);
    if (!mem)
        return TESS_ENOMEM;
    double *px = mem, *py = mem + np, *lon = mem + 2 * np, *lat = mem + 3 * np;
    for (size_t k = 0; k < n; k++)
        for (int b = 0; b < 4; b++)
            for (int a = 0; a < 4; a++) {
                px[k * 16 + (size_t)(b * 4 + a)] = u[k] - 1.5 + a;
                py[k * 16 + (size_t)(b * 4 + a)] = v[k] - 1.5 + b;
            }
    if (skywcs_pix2sky(out, np, px, py, lon, lat) != 0) {
        free(mem);
        return TESS_ENOMEM;
    }
    /* The pixels right of, left of, above and below the node, as indices b * 4 + a of
     * the 4 x 4 corner lattice around it. */
    static const int nb[4][4] = {
        { 1 * 4 + 2, 1 * 4 + 3, 2 * 4 + 3, 2 * 4 + 2 },
        { 1 * 4 + 0, 1 * 4 + 1, 2 * 4 + 1, 2 * 4 + 0 },
        { 2 * 4 + 1, 2 * 4 + 2, 3 * 4 + 2, 3 * 4 + 1 },
        { 0 * 4 + 1, 0 * 4 + 2, 1 * 4 + 2, 1 * 4 + 1 } };
    for (size_t k = 0; k < n; k++) {
        double area[4];
        int ok = 1;
        for (int p = 0; p < 4 && ok; p++) {
            double qlon[4], qlat[4];
            for (int c = 0; c < 4; c++) {
                qlon[c] = lon[k * 16 + (size_t)nb[p][c]];
                qlat[c] = lat[k * 16 + (size_t)nb[p][c]];
            }
            area[p] = quad_solid_angle(qlon, qlat);
            ok = area[p] > 0.0 && isfinite(area[p]);
        }
        gx[k] = ok ? 0.5 * log(area[0] / area[1]) : 0.0;
        gy[k] = ok ? 0.5 * log(area[2] / area[3]) : 0.0;
    }
    free(mem);
    return 0;
}

/* Whether the solid angle correction matters on the nx x ny output grid: |g| above
 * EX_G_MIN at one of 5 x 5 probes spread evenly over the whole grid, corners included
 * (the same answer for every block of rows; all-sky maps have probes off the sky).
 * Returns 1, 0, or TESS_ENOMEM. */
static int gradient_matters(skywcs *out, long nx, long ny)
{
    double u[25], v[25], gx[25], gy[25];
    for (int k = 0; k < 25; k++) {
        u[k] = (double)((nx - 1) * (k % 5)) / 4.0;
        v[k] = (double)((ny - 1) * (k / 5)) / 4.0;
    }
    if (node_gradients(out, 25, u, v, gx, gy) != 0)
        return TESS_ENOMEM;
    for (int k = 0; k < 25; k++)
        if (fabs(gx[k]) > EX_G_MIN || fabs(gy[k]) > EX_G_MIN)
            return 1;
    return 0;
}

/* Fills fields gx and gy (grad ln J per output pixel) of the accumulation cells of rows
 * [y0, y1) of the nx x ny output (`stride` doubles per cell, rows rowlen doubles apart),
 * from node_gradients at nodes every EX_GSTEP pixels of the whole grid (and on its last
 * row and column, so that every block of rows sees the same nodes), bilinearly
 * interpolated.  Returns 0 or TESS_ENOMEM. */
static int area_gradient(skywcs *out, long nx, long ny, long y0, long y1, double *cells,
                         size_t stride, size_t rowlen, int fgx, int fgy)
{
    const long rows = y1 - y0;
    const long nu = (nx - 1 + EX_GSTEP - 1) / EX_GSTEP + 1;
    const long l0 = y0 / EX_GSTEP, nv = (y1 - 1 + EX_GSTEP - 1) / EX_GSTEP - l0 + 1;
    const size_t nn = (size_t)nu * (size_t)nv;
    double *mem = malloc(sizeof(double) * nn * 4);
    if (!mem)
        return TESS_ENOMEM;
    double *nu_ = mem, *nv_ = mem + nn, *ngx = mem + 2 * nn, *ngy = mem + 3 * nn;
    for (long l = 0; l < nv; l++)
        for (long k = 0; k < nu; k++) {
            long gu = k * EX_GSTEP, gl = (l0 + l) * EX_GSTEP;
            nu_[l * nu + k] = (double)(gu < nx - 1 ? gu : nx - 1);
            nv_[l * nu + k] = (double)(gl < ny - 1 ? gl : ny - 1);
        }
    if (node_gradients(out, nn, nu_, nv_, ngx, ngy) != 0) {
        free(mem);
        return TESS_ENOMEM;
    }
    /* Per row: the nodes interpolated to the row, then linearly between them. */
    double *rg = malloc(sizeof(double) * (size_t)nu * 2);
    if (!rg) {
        free(mem);
        return TESS_ENOMEM;
    }
    for (long r = 0; r < rows; r++) {
        long l = nv > 1 ? (y0 + r) / EX_GSTEP - l0 : 0;
        if (l > nv - 2)
            l = nv > 1 ? nv - 2 : 0;
        const long lh = nv > 1 ? l + 1 : l;
        const double vl = nv_[l * nu], vh = nv_[lh * nu];
        const double t = vh > vl ? ((double)(y0 + r) - vl) / (vh - vl) : 0.0;
        for (long k = 0; k < nu; k++) {
            rg[2 * k] = (1 - t) * ngx[l * nu + k] + t * ngx[lh * nu + k];
            rg[2 * k + 1] = (1 - t) * ngy[l * nu + k] + t * ngy[lh * nu + k];
        }
        double *row = cells + (size_t)r * rowlen;
        if (nu == 1) {
            row[fgx] = rg[0];
            row[fgy] = rg[1];
            continue;
        }
        for (long k = 0; k + 1 < nu; k++) {
            const long ua = (long)nu_[k], ub = (long)nu_[k + 1];
            const double dgx = (rg[2 * k + 2] - rg[2 * k]) / (double)(ub - ua);
            const double dgy = (rg[2 * k + 3] - rg[2 * k + 1]) / (double)(ub - ua);
            const long cend = k + 2 < nu ? ub : ub + 1;
            for (long c = ua; c < cend; c++) {
                row[(size_t)c * stride + (size_t)fgx] = rg[2 * k] + (double)(c - ua) * dgx;
                row[(size_t)c * stride + (size_t)fgy] = rg[2 * k + 1] + (double)(c - ua) * dgy;
            }
        }
    }
    free(rg);
    free(mem);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Accumulation along the outlines                                                         */

/* The fields of an accumulation cell (doubles).  Row r holds nx cells, from
 * acc->cells + (r - y0) * rowlen.
 * "Running" fields are summed along the row at the end (a deposit there counts for its
 * pixel and every pixel right of it); "local" ones belong to their pixel alone. */
enum {
    EX_CW = 0,   /* weight: cover (running; exact) */
    EX_PW,       /* weight: area minus cover, plus the moment terms (local) */
    EX_CV,       /* value: cover (running) */
    EX_PV,       /* value: same as EX_PW */
    EX_NAREA,    /* cell size without the moments */
    EX_GX = EX_NAREA, /* gx of the pixel (set before the deposits) */
    EX_GY,       /* gy of the pixel */
    EX_NALL      /* cell size with the moments */
};

/* Where the outlines of one call accumulate. */
typedef struct ex_acc {
    double *cells;
    size_t stride;          /* EX_NAREA, or EX_NALL with the moments */
    size_t rowlen;          /* doubles from row to row: ex_rowlen */
    long nx, y0, y1;
} ex_acc;

/* Doubles from one row of accumulation cells to the next: nx cells of `stride` doubles
 * rounded up to an odd number of 64-byte lines, so that rows do not alias in the caches.
 * Unpadded, a row of 4096 cells is 128 KiB, a power of two: the ~40 rows one tile of
 * input pixels reaches all fall in the same sets of L1 and L2 and evict each other (the
 * deposits then missed the caches).  Cannot fail (nx * stride must fit size_t, less 16). */
static size_t ex_rowlen(long nx, size_t stride)
{
    size_t lines = ((size_t)nx * stride + 7) / 8;
    return (lines | 1) * 8;
}

/* floor(v + 0.5) as a long, for |v| well inside the range of long: the column (row) of
 * the output pixel whose cell [k - 1/2, k + 1/2) holds v.  Cannot fail. */
static inline long cell_of(double v)
{
    double t = v + 0.5;
    long k = (long)t;
    return k - (t < (double)k);
}

/* t (|t| <= 1/2) rounded to a multiple of 2^-48 (see EX_QUANT).  Cannot fail. */
static inline double quantize(double t)
{
    return (t + EX_QUANT) - EX_QUANT;
}

/* Inlined into the callers that pass `mom` (the moments on or off) as a constant, so that
 * the common path has no test of it. */
#if defined(__GNUC__)
#define EX_INLINE static inline __attribute__((always_inline))
#else
#define EX_INLINE static inline
#endif

/* Deposits in `cell` the outline piece from (ua, ta) to (ub, tb), coordinates relative
 * to the pixel centre (|u|, |t| <= 1/2, ta != tb, t quantised), with weights wv (value
 * sum) and ww (weight sum).  The region right of the piece has, with dy = tb - ta, the
 * area a = dy (1/2 - (ua + ub) / 2) in this pixel and dy in each pixel further right
 * (the cover, in running fields; a - dy goes to the local ones).  With the moments
 * (mom != 0, cells of EX_NALL), the piece also adds g . m to the local fields, the first
 * moments about the pixel centre taken from Green's theorem with integrands that vanish
 * on the pixel's sides, so that only pieces inside the pixel contribute: mx = -integral
 * (u^2 - 1/4) / 2 dt = dy (1/4 - (ua^2 + ua ub + ub^2) / 3) / 2 and my = integral
 * (t^2 - 1/4) / 2 du = (ub - ua) ((ta^2 + ta tb + tb^2) / 3 - 1/4) / 2 (signs as for the
 * area right of the piece: a counterclockwise outline sums to minus its area and
 * moments).  Cannot fail. */
EX_INLINE void deposit(double *cell, double ua, double ta, double ub, double tb, double wv,
                       double ww, const int mom)
{
    const double dy = tb - ta;
    double p = dy * (0.5 - 0.5 * (ua + ub)) - dy;
    if (mom) {
        const double mx = 0.5 * dy * (0.25 - (ua * ua + ua * ub + ub * ub) * (1.0 / 3.0));
        const double my = 0.5 * (ub - ua) * ((ta * ta + ta * tb + tb * tb) * (1.0 / 3.0) - 0.25);
        p += cell[EX_GX] * mx + cell[EX_GY] * my;
    }
    if (ww != 0.0) {
        cell[EX_CW] += ww * dy;
        cell[EX_PW] += ww * p;
    }
    cell[EX_CV] += wv * dy;
    cell[EX_PV] += wv * p;
}

/* Deposits the piece from (xa, ta) to (xb, tb) of a row (x in output pixels, within
 * [-1/2, nx - 1/2]; t relative to the row centre, quantised) column by column, cut at
 * the column boundaries, given its first and last columns ca != cb (cell_of of xa and xb
 * clamped to the grid).  Cannot fail. */
EX_INLINE void walk_cut(const ex_acc *acc, double *row, long ca, long cb, double xa,
                        double ta, double xb, double tb, double wv, double ww, const int mom)
{
    const size_t stride = mom ? EX_NALL : EX_NAREA;
    const long step = cb > ca ? 1 : -1;
    const double dtdx = (tb - ta) / (xb - xa);
    double x0 = xa, t0 = ta;
    for (long c = ca; c != cb; c += step) {
        const double x1 = (double)c + 0.5 * (double)step;
        const double t1 = quantize(ta + (x1 - xa) * dtdx);
        if (t1 != t0)
            deposit(row + (size_t)c * stride, x0 - (double)c, t0, x1 - (double)c, t1, wv, ww,
                    mom);
        x0 = x1;
        t0 = t1;
    }
    if (tb != t0)
        deposit(row + (size_t)cb * stride, x0 - (double)cb, t0, xb - (double)cb, tb, wv, ww,
                mom);
}

/* walk_cut from the clamped columns of xa and xb (one deposit when they are the same).
 * Cannot fail. */
EX_INLINE void walk_columns(const ex_acc *acc, double *row, double xa, double ta, double xb,
                            double tb, double wv, double ww, const int mom)
{
    const size_t stride = mom ? EX_NALL : EX_NAREA;
    const long last = acc->nx - 1;
    long ca = cell_of(xa), cb = cell_of(xb);
    ca = ca < 0 ? 0 : ca > last ? last : ca;
    cb = cb < 0 ? 0 : cb > last ? last : cb;
    if (ca == cb)
        deposit(row + (size_t)ca * stride, xa - (double)ca, ta, xb - (double)ca, tb, wv, ww,
                mom);
    else
        walk_cut(acc, row, ca, cb, xa, ta, xb, tb, wv, ww, mom);
}

/* The rare cases of row_piece: a piece that leaves the grid on the left or right.
 * Cannot fail. */
static void row_piece_clip(const ex_acc *acc, double *row, double xs, double ts, double xe,
                           double te, double wv, double ww, const int mom)
{
    const double xl = -0.5, xr = (double)acc->nx - 0.5;
    double px[4] = { xs, 0, 0, 0 }, pt[4] = { ts, 0, 0, 0 };
    int n = 1;
    const double cut[2] = { xe >= xs ? xl : xr, xe >= xs ? xr : xl };
    for (int k = 0; k < 2; k++)
        if ((xs - cut[k]) * (xe - cut[k]) < 0.0) {
            px[n] = cut[k];
            pt[n++] = quantize(ts + (cut[k] - xs) * ((te - ts) / (xe - xs)));
        }
    px[n] = xe;
    pt[n++] = te;
    for (int k = 0; k + 1 < n; k++) {
        if (pt[k] == pt[k + 1])
            continue;
        const double xm = 0.5 * (px[k] + px[k + 1]);
        if (xm < xl) {
            if (mom)
                deposit(row, -0.5, pt[k], -0.5, pt[k + 1], wv, ww, 1);
            else
                deposit(row, -0.5, pt[k], -0.5, pt[k + 1], wv, ww, 0);
        } else if (xm < xr) {
            if (mom)
                walk_columns(acc, row, px[k], pt[k], px[k + 1], pt[k + 1], wv, ww, 1);
            else
                walk_columns(acc, row, px[k], pt[k], px[k + 1], pt[k + 1], wv, ww, 0);
        }
    }
}

/* Deposits the piece from (xs, ts) to (xe, te) of output row `row` (ts != te): the parts
 * left of the grid become vertical pieces on its left edge (their area lies outside it,
 * their cover does not), the parts right of it are dropped, the rest is walked column
 * by column.  Cannot fail. */
EX_INLINE void row_piece(const ex_acc *acc, double *row, double xs, double ts, double xe,
                         double te, double wv, double ww, const int mom)
{
    const size_t stride = mom ? EX_NALL : EX_NAREA;
    const long cs = cell_of(xs), ce = cell_of(xe);
    const int in = cs >= 0 && cs < acc->nx && ce >= 0 && ce < acc->nx;
    if (cs == ce && in)                              /* the common case */
        deposit(row + (size_t)cs * stride, xs - (double)cs, ts, xe - (double)cs, te, wv, ww,
                mom);
    else if (in)
        walk_cut(acc, row, cs, ce, xs, ts, xe, te, wv, ww, mom);
    else
        row_piece_clip(acc, row, xs, ts, xe, te, wv, ww, mom);
}

/* Adds wv (value sum) and ww (weight sum) times the signed area right of the segment
 * from (xa, ya) to (xb, yb) (output pixel coordinates; positive for an upward segment),
 * pixel by pixel over the rows of the call.  Cannot fail. */
EX_INLINE void add_edge(const ex_acc *acc, double xa, double ya, double xb, double yb,
                        double wv, double ww, const int mom)
{
    if (ya == yb)
        return;
    if (ya > yb) {
        double t = xa;
        xa = xb;
        xb = t;
        t = ya;
        ya = yb;
        yb = t;
        wv = -wv;
        ww = -ww;
    }
    const double lo = (double)acc->y0 - 0.5, hi = (double)acc->y1 - 0.5;
    if (yb <= lo || ya >= hi)
        return;
    const size_t rowlen = acc->rowlen;
    if (ya >= lo) {
        /* The common case: the edge starts and ends in the same row (no slope needed). */
        const long r0 = cell_of(ya);
        if (yb <= (double)r0 + 0.5) {
            const double ts = quantize(ya - (double)r0), te = quantize(yb - (double)r0);
            if (te != ts)
                row_piece(acc, acc->cells + (size_t)(r0 - acc->y0) * rowlen, xa, ts, xb, te,
                          wv, ww, mom);
            return;
        }
    }
    const double dxdy = (xb - xa) / (yb - ya);
    const long r0 = ya < lo ? acc->y0 : cell_of(ya);
    double xs = ya < lo ? xa + (lo - ya) * dxdy : xa;
    double ts = ya < lo ? -0.5 : quantize(ya - (double)r0);
    double *row = acc->cells + (size_t)(r0 - acc->y0) * rowlen;
    for (long r = r0; r < acc->y1; r++, row += rowlen) {
        double xe, te;
        const int end = yb <= (double)r + 0.5;
        if (end) {
            xe = xb;
            te = quantize(yb - (double)r);
        } else {
            xe = xa + ((double)r + 0.5 - ya) * dxdy;
            te = 0.5;
        }
        if (te != ts)
            row_piece(acc, row, xs, ts, xe, te, wv, ww, mom);
        if (end)
            break;
        xs = xe;
        ts = -0.5;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Short edges, four at a time                                                             */

/* Edges gathered by band_edges before ex_short_flush (a multiple of 4). */
#define EX_EBUF 64

/* A batch of lattice edges for ex_short_flush, in the order add_edge would take them:
 * (xa, ya) to (xb, yb) in output pixels, weights wv and ww as add_edge takes them. */
typedef struct ex_edges {
    int n;
    double xa[EX_EBUF], ya[EX_EBUF], xb[EX_EBUF], yb[EX_EBUF], wv[EX_EBUF], ww[EX_EBUF];
} ex_edges;

/* Sink cells after the last row: one for each lane and piece of ex_short_classify, so
 * that the deposits of pieces that do not exist do not queue on one cell's additions. */
#define EX_NSINK 16

/* Deposits of a short edge (see ex_short). */
#define EX_NSLOT 3

/* What ex_short_classify finds for a batch.  An edge is short when it crosses at most
 * one row boundary and, in each row, at most one column boundary, and not one column
 * boundary in both rows, and its parts in the rows of the call lie within the columns of
 * the grid (its parts outside those rows are dropped, as add_edge drops them): it then
 * makes at most three deposits (EX_NSLOT), slot 0 the part of row 0 in its first
 * column, slot 1 that of row 1, slot 2 the part in a second column of either row (the
 * parts lie in different cells, so their order does not matter), each with the cell
 * offset off[k] (doubles from acc->cells; a sink cell for a piece that does not exist)
 * and the terms that deposit() adds: vdy[k][e], vp[k][e] to the value fields (the edge's
 * weight sv, negated when it was turned upwards, times the cover dy and the local part p)
 * and, where the edge's weight sw[e] is not 0, wdy[k][e], wp[k][e] to the weight fields
 * (sw times dy and p; not written in a group of four (eight: ex_short_classify8) edges
 * whose sw are all 0).  An edge
 * shorter than an output pixel side in x and y is short unless it leaves the columns
 * (rounding aside); non-short edges (fast 0) go through add_edge. */
typedef struct ex_short {
    int64_t fast[EX_EBUF], off[EX_NSLOT][EX_EBUF];
    double vdy[EX_NSLOT][EX_EBUF], vp[EX_NSLOT][EX_EBUF], wdy[EX_NSLOT][EX_EBUF];
    double wp[EX_NSLOT][EX_EBUF], sw[EX_EBUF];
} ex_short;

/* Two doubles: a cell's (cover, local) pair, fields EX_CV, EX_PV or EX_CW, EX_PW. */
typedef double ex_v2d __attribute__((vector_size(16)));

/* floor(v) for |v| < 2^51 (round to the nearest integer by adding and removing 1.5 *
 * 2^52, then step down where that went up); larger |v| give values as large, which the
 * range tests reject.  Lane-wise, no conversion to integers. */
#define EX_V4_FLOOR(v)                                                                    \
    __extension__({                                                                       \
        const rp_v4d f_ = ((v) + 6755399441055744.0) - 6755399441055744.0;               \
        RP_V4D_SELECT(f_ > (v), f_ - 1.0, f_);                                            \
    })

/* RP_HOT with one more clone, for CPUs with AVX-512 (x86-64-v4): the four-lane vectors
 * stay four lanes, but the 32 vector registers keep ex_short_classify's and
 * band_row_signs' working values out of the stack, and the masks are mask registers
 * (about 5% of the exact kernel's time on the bench/kernels case, AMD Zen 4).  The same
 * IEEE operations lane by lane (no contraction into FMAs in ISO C mode), so the same
 * values as the other clones. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(RP_NO_AVX2)
#define EX_HAVE_V8 1
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EX_HOT __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define EX_HOT RP_HOT
#endif

/* 2^52: an integer-valued double n, 0 <= n < 2^52, plus EX_I52 has the bits of EX_I52
 * plus n (its conversion to int64_t without a conversion instruction). */
#define EX_I52 4503599627370496.0
#define EX_V4_I52 ((rp_v4d){ EX_I52, EX_I52, EX_I52, EX_I52 })

/* The pieces of one row piece (xs, ts) to (xe, te) of an edge (vld: it exists and
 * te != ts), for lanes of rp_v4d: walk_cut's one column crossing, or row_piece's single
 * deposit, with the same arithmetic in the same order (so the same bits; deposit()'s
 * products by the weights sv, sww included, the latter stored only when anyw).  rowoff:
 * the offset of the row's first cell; sink0, sink1: the sink cells' offsets for the
 * parts.  Sets ok to 0 in lanes where the piece leaves the grid's columns or crosses more
 * than one column boundary, writes part 0 of lanes e..e+3 to slot k0 of S and leaves
 * part 1 in the rp_v4d lvalues o1, vdy1, vp1, wdy1, wp1 (offset, products) and its
 * existence in the rp_v4q lvalue v1. */
#define EX_V4_ROW_PIECE(S, e, k0, xs, ts, xe, te, vld, rowoff, sink0, sink1, nxd, strided, \
                        ok, sv, sww, anyw, o1, vdy1, vp1, wdy1, wp1, v1)                  \
    do {                                                                                  \
        const rp_v4d cs_ = EX_V4_FLOOR((xs) + 0.5), ce_ = EX_V4_FLOOR((xe) + 0.5);      \
        const rp_v4d dc_ = ce_ - cs_;                                                     \
        (ok) &= ~(vld) | ((cs_ >= 0.0) & (cs_ < (nxd)) & (ce_ >= 0.0) & (ce_ < (nxd))     \
                          & (dc_ <= 1.0) & (dc_ >= -1.0));                                \
        const rp_v4q split_ = cs_ != ce_;                                                 \
        const rp_v4d x1_ = cs_ + RP_V4D_SELECT(ce_ > cs_, half, -half);                  \
        const rp_v4d dtdx_ = ((te) - (ts)) / ((xe) - (xs));                               \
        const rp_v4d t1_ = (((ts) + (x1_ - (xs)) * dtdx_) + EX_QUANT) - EX_QUANT;         \
        /* Part 0: in column cs up to the crossing (or the whole piece); part 1: in ce. */ \
        const rp_v4d ua_ = (xs) - cs_, ub_ = RP_V4D_SELECT(split_, x1_, (xe)) - cs_;      \
        const rp_v4d tb_ = RP_V4D_SELECT(split_, t1_, (te));                              \
        const rp_v4d dy0_ = tb_ - (ts), dy1_ = (te) - t1_;                                \
        const rp_v4d ua1_ = x1_ - ce_, ub1_ = (xe) - ce_;                                 \
        const rp_v4d p0_ = dy0_ * (half - half * (ua_ + ub_)) - dy0_;                     \
        const rp_v4d p1_ = dy1_ * (half - half * (ua1_ + ub1_)) - dy1_;                   \
        const rp_v4q v0_ = (vld) & (tb_ != (ts));                                         \
        (v1) = (vld) & split_ & ((te) != t1_);                                            \
        const rp_v4d o0_ = RP_V4D_SELECT(v0_, (rowoff) + cs_ * (strided), (sink0));       \
        (o1) = RP_V4D_SELECT((v1), (rowoff) + ce_ * (strided), (sink1));                  \
        const rp_v4q i0_ = (rp_v4q)(o0_ + EX_I52) - (rp_v4q)EX_V4_I52;                     \
        memcpy(&(S)->off[(k0)][(e)], &i0_, sizeof i0_);                                   \
        const rp_v4d vdy0_ = (sv) * dy0_, vp0_ = (sv) * p0_;                              \
        (vdy1) = (sv) * dy1_;                                                             \
        (vp1) = (sv) * p1_;                                                               \
        RP_V4D_STORE(&(S)->vdy[(k0)][(e)], vdy0_);                                        \
        RP_V4D_STORE(&(S)->vp[(k0)][(e)], vp0_);                                          \
        (wdy1) = (sww) * dy1_;                                                            \
        (wp1) = (sww) * p1_;                                                              \
        if (anyw) {                                                                       \
            const rp_v4d wdy0_ = (sww) * dy0_, wp0_ = (sww) * p0_;                        \
            RP_V4D_STORE(&(S)->wdy[(k0)][(e)], wdy0_);                                    \
            RP_V4D_STORE(&(S)->wp[(k0)][(e)], wp0_);                                      \
        }                                                                                 \
    } while (0)

/* Classifies edges [0, E->n) of a batch (n rounded up to 8; the lanes past n are computed
 * and ignored) and computes the pieces of the short ones: add_edge, row_piece, walk_cut
 * and deposit for the edges that ex_short describes, four lanes at a time, with their
 * arithmetic unchanged (the same values bit for bit; no moments).  Cannot fail. */
EX_HOT static void ex_short_classify(const ex_acc *acc, const ex_edges *E, ex_short *S)
{
    const rp_v4d half = { 0.5, 0.5, 0.5, 0.5 };
    const double nxd = (double)acc->nx, y0d = (double)acc->y0, y1d = (double)acc->y1;
    const double rowlend = (double)acc->rowlen, strided = (double)acc->stride;
    /* Sink cell 4 * lane + slot (4 * lane + 3 unused). */
    const double sk = (double)(acc->y1 - acc->y0) * rowlend;
    const rp_v4d lane4 = { 0.0, 4.0, 8.0, 12.0 };
    const rp_v4d sink[4] = { sk + lane4 * strided, sk + (lane4 + 1.0) * strided,
                             sk + (lane4 + 2.0) * strided, sk + (lane4 + 3.0) * strided };
    for (int e = 0; e < E->n; e += 4) {
        rp_v4d xa, ya, xb, yb, wv, ww;
        RP_V4D_LOAD(xa, E->xa + e);
        RP_V4D_LOAD(ya, E->ya + e);
        RP_V4D_LOAD(xb, E->xb + e);
        RP_V4D_LOAD(yb, E->yb + e);
        RP_V4D_LOAD(wv, E->wv + e);
        RP_V4D_LOAD(ww, E->ww + e);
        /* add_edge: upwards, weights negated when turned. */
        const rp_v4q sw = ya > yb;
        const rp_v4d Xa = RP_V4D_SELECT(sw, xb, xa), Ya = RP_V4D_SELECT(sw, yb, ya);
        const rp_v4d Xb = RP_V4D_SELECT(sw, xa, xb), Yb = RP_V4D_SELECT(sw, ya, yb);
        const rp_v4d sv = RP_V4D_SELECT(sw, -wv, wv), sww = RP_V4D_SELECT(sw, -ww, ww);
        RP_V4D_STORE(S->sw + e, sww);
        const int anyw = RP_V4Q_ANY(sww != 0.0);
        const rp_v4d r0 = EX_V4_FLOOR(Ya + 0.5);
        const rp_v4q two = Yb > r0 + 0.5;
        rp_v4q ok = (Ya != Yb) & (Yb <= r0 + 1.5);
        /* Rows r0 and r0 + 1 within the call's rows: add_edge drops the parts outside
         * them, and cuts an edge that starts below row y0 at y0 - 1/2 = (r0 + 1) - 1/2,
         * the crossing xm computed below for r0 = y0 - 1, with the same operations. */
        const rp_v4q in0 = (r0 >= y0d) & (r0 < y1d), in1 = (r0 + 1.0 >= y0d) & (r0 + 1.0 < y1d);
        const rp_v4d ts = ((Ya - r0) + EX_QUANT) - EX_QUANT;
        const rp_v4d dxdy = (Xb - Xa) / (Yb - Ya);
        const rp_v4d xm = Xa + ((r0 + 0.5) - Ya) * dxdy;     /* where row r0 is left */
        const rp_v4d te0 = RP_V4D_SELECT(two, half, ((Yb - r0) + EX_QUANT) - EX_QUANT);
        const rp_v4d xe0 = RP_V4D_SELECT(two, xm, Xb);
        const rp_v4d te1 = ((Yb - (r0 + 1.0)) + EX_QUANT) - EX_QUANT, ts1 = -half;
        const rp_v4d row0 = (r0 - y0d) * rowlend, row1 = row0 + rowlend;
        rp_v4d o1a, vdy1a, vp1a, wdy1a, wp1a, o1b, vdy1b, vp1b, wdy1b, wp1b;
        rp_v4q v1a, v1b;
        const rp_v4q vld0 = in0 & (te0 != ts), vld1 = in1 & two & (te1 != ts1);
        EX_V4_ROW_PIECE(S, e, 0, Xa, ts, xe0, te0, vld0, row0, sink[0], sink[2], nxd, strided,
                        ok, sv, sww, anyw, o1a, vdy1a, vp1a, wdy1a, wp1a, v1a);
        EX_V4_ROW_PIECE(S, e, 1, xm, ts1, Xb, te1, vld1, row1, sink[1], sink[2], nxd, strided,
                        ok, sv, sww, anyw, o1b, vdy1b, vp1b, wdy1b, wp1b, v1b);
        /* Slot 2: the one second column part, of row 0 or of row 1 (an edge with both
         * goes through add_edge). */
        ok &= ~(v1a & v1b);
        const rp_v4d o2 = RP_V4D_SELECT(v1a, o1a, o1b);
        const rp_v4q i2 = (rp_v4q)(o2 + EX_I52) - (rp_v4q)EX_V4_I52;
        memcpy(&S->off[2][e], &i2, sizeof i2);
        const rp_v4d vdy2 = RP_V4D_SELECT(v1a, vdy1a, vdy1b);
        const rp_v4d vp2 = RP_V4D_SELECT(v1a, vp1a, vp1b);
        RP_V4D_STORE(&S->vdy[2][e], vdy2);
        RP_V4D_STORE(&S->vp[2][e], vp2);
        if (anyw) {
            const rp_v4d wdy2 = RP_V4D_SELECT(v1a, wdy1a, wdy1b);
            const rp_v4d wp2 = RP_V4D_SELECT(v1a, wp1a, wp1b);
            RP_V4D_STORE(&S->wdy[2][e], wdy2);
            RP_V4D_STORE(&S->wp[2][e], wp2);
        }
        RP_V4D_STORE(S->fast + e, ok);
    }
}

#ifdef EX_HAVE_V8
/* ex_short_classify eight lanes at a time, for Intel CPUs with AVX-512 (ex_short_flush
 * picks it at run time): the text of EX_V4_ROW_PIECE and ex_short_classify with vectors
 * of eight (lanes l and l + 4 share a sink cell; a group's anyw covers its eight edges),
 * so every lane does the same IEEE operations in the same order and the values are the
 * same bit for bit.  Intel's cores run 512-bit operations at full width, so eight lanes
 * halve the instructions of the step: bench/kernels exact coords (4096^2 onto a TAN grid
 * rotated by 20 deg, 1 thread, best of 3, Intel Xeon with AVX-512, 5 runs alternated)
 * 23.6-27.0 Mpix/s with the four-lane step, 26.0-29.6 with this.  Zen 4 executes them
 * as two halves; there the four-lane step (its EX_HOT clone), tuned on it, is kept (eight
 * lanes not measured there).  Keep the two in step. */
typedef double ex_v8d __attribute__((vector_size(64)));
typedef int64_t ex_v8q __attribute__((vector_size(64)));
#define EX_V8D_SELECT(m, a, b) ((ex_v8d)(((ex_v8q)(a) & (m)) | ((ex_v8q)(b) & ~(m))))
#define EX_V8D_LOAD(v, p) memcpy(&(v), (p), sizeof(ex_v8d))
#define EX_V8D_STORE(p, v) memcpy((p), &(v), sizeof(ex_v8d))
#define EX_V8Q_ANY(m)                                                                     \
    (((m)[0] | (m)[1] | (m)[2] | (m)[3] | (m)[4] | (m)[5] | (m)[6] | (m)[7]) != 0)
#define EX_V8_FLOOR(v)                                                                    \
    __extension__({                                                                       \
        const ex_v8d f_ = ((v) + 6755399441055744.0) - 6755399441055744.0;               \
        EX_V8D_SELECT(f_ > (v), f_ - 1.0, f_);                                            \
    })
#define EX_V8_I52 ((ex_v8d){ EX_I52, EX_I52, EX_I52, EX_I52, EX_I52, EX_I52, EX_I52, EX_I52 })
#define EX_AVX512 __attribute__((target("arch=x86-64-v4")))

#define EX_V8_ROW_PIECE(S, e, k0, xs, ts, xe, te, vld, rowoff, sink0, sink1, nxd, strided, \
                        ok, sv, sww, anyw, o1, vdy1, vp1, wdy1, wp1, v1)                  \
    do {                                                                                  \
        const ex_v8d cs_ = EX_V8_FLOOR((xs) + 0.5), ce_ = EX_V8_FLOOR((xe) + 0.5);      \
        const ex_v8d dc_ = ce_ - cs_;                                                     \
        (ok) &= ~(vld) | ((cs_ >= 0.0) & (cs_ < (nxd)) & (ce_ >= 0.0) & (ce_ < (nxd))     \
                          & (dc_ <= 1.0) & (dc_ >= -1.0));                                \
        const ex_v8q split_ = cs_ != ce_;                                                 \
        const ex_v8d x1_ = cs_ + EX_V8D_SELECT(ce_ > cs_, half, -half);                  \
        const ex_v8d dtdx_ = ((te) - (ts)) / ((xe) - (xs));                               \
        const ex_v8d t1_ = (((ts) + (x1_ - (xs)) * dtdx_) + EX_QUANT) - EX_QUANT;         \
        /* Part 0: in column cs up to the crossing (or the whole piece); part 1: in ce. */ \
        const ex_v8d ua_ = (xs) - cs_, ub_ = EX_V8D_SELECT(split_, x1_, (xe)) - cs_;      \
        const ex_v8d tb_ = EX_V8D_SELECT(split_, t1_, (te));                              \
        const ex_v8d dy0_ = tb_ - (ts), dy1_ = (te) - t1_;                                \
        const ex_v8d ua1_ = x1_ - ce_, ub1_ = (xe) - ce_;                                 \
        const ex_v8d p0_ = dy0_ * (half - half * (ua_ + ub_)) - dy0_;                     \
        const ex_v8d p1_ = dy1_ * (half - half * (ua1_ + ub1_)) - dy1_;                   \
        const ex_v8q v0_ = (vld) & (tb_ != (ts));                                         \
        (v1) = (vld) & split_ & ((te) != t1_);                                            \
        const ex_v8d o0_ = EX_V8D_SELECT(v0_, (rowoff) + cs_ * (strided), (sink0));       \
        (o1) = EX_V8D_SELECT((v1), (rowoff) + ce_ * (strided), (sink1));                  \
        const ex_v8q i0_ = (ex_v8q)(o0_ + EX_I52) - (ex_v8q)EX_V8_I52;                     \
        memcpy(&(S)->off[(k0)][(e)], &i0_, sizeof i0_);                                   \
        const ex_v8d vdy0_ = (sv) * dy0_, vp0_ = (sv) * p0_;                              \
        (vdy1) = (sv) * dy1_;                                                             \
        (vp1) = (sv) * p1_;                                                               \
        EX_V8D_STORE(&(S)->vdy[(k0)][(e)], vdy0_);                                        \
        EX_V8D_STORE(&(S)->vp[(k0)][(e)], vp0_);                                          \
        (wdy1) = (sww) * dy1_;                                                            \
        (wp1) = (sww) * p1_;                                                              \
        if (anyw) {                                                                       \
            const ex_v8d wdy0_ = (sww) * dy0_, wp0_ = (sww) * p0_;                        \
            EX_V8D_STORE(&(S)->wdy[(k0)][(e)], wdy0_);                                    \
            EX_V8D_STORE(&(S)->wp[(k0)][(e)], wp0_);                                      \
        }                                                                                 \
    } while (0)

EX_AVX512 static void ex_short_classify8(const ex_acc *acc, const ex_edges *E, ex_short *S)
{
    const ex_v8d half = { 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5 };
    const double nxd = (double)acc->nx, y0d = (double)acc->y0, y1d = (double)acc->y1;
    const double rowlend = (double)acc->rowlen, strided = (double)acc->stride;
    /* Sink cell 4 * (lane % 4) + slot: lanes l and l + 4 share theirs. */
    const double sk = (double)(acc->y1 - acc->y0) * rowlend;
    const ex_v8d lane4 = { 0.0, 4.0, 8.0, 12.0, 0.0, 4.0, 8.0, 12.0 };
    const ex_v8d sink[4] = { sk + lane4 * strided, sk + (lane4 + 1.0) * strided,
                             sk + (lane4 + 2.0) * strided, sk + (lane4 + 3.0) * strided };
    for (int e = 0; e < E->n; e += 8) {
        ex_v8d xa, ya, xb, yb, wv, ww;
        EX_V8D_LOAD(xa, E->xa + e);
        EX_V8D_LOAD(ya, E->ya + e);
        EX_V8D_LOAD(xb, E->xb + e);
        EX_V8D_LOAD(yb, E->yb + e);
        EX_V8D_LOAD(wv, E->wv + e);
        EX_V8D_LOAD(ww, E->ww + e);
        /* add_edge: upwards, weights negated when turned. */
        const ex_v8q sw = ya > yb;
        const ex_v8d Xa = EX_V8D_SELECT(sw, xb, xa), Ya = EX_V8D_SELECT(sw, yb, ya);
        const ex_v8d Xb = EX_V8D_SELECT(sw, xa, xb), Yb = EX_V8D_SELECT(sw, ya, yb);
        const ex_v8d sv = EX_V8D_SELECT(sw, -wv, wv), sww = EX_V8D_SELECT(sw, -ww, ww);
        EX_V8D_STORE(S->sw + e, sww);
        const int anyw = EX_V8Q_ANY(sww != 0.0);
        const ex_v8d r0 = EX_V8_FLOOR(Ya + 0.5);
        const ex_v8q two = Yb > r0 + 0.5;
        ex_v8q ok = (Ya != Yb) & (Yb <= r0 + 1.5);
        /* Rows r0 and r0 + 1 within the call's rows: add_edge drops the parts outside
         * them, and cuts an edge that starts below row y0 at y0 - 1/2 = (r0 + 1) - 1/2,
         * the crossing xm computed below for r0 = y0 - 1, with the same operations. */
        const ex_v8q in0 = (r0 >= y0d) & (r0 < y1d), in1 = (r0 + 1.0 >= y0d) & (r0 + 1.0 < y1d);
        const ex_v8d ts = ((Ya - r0) + EX_QUANT) - EX_QUANT;
        const ex_v8d dxdy = (Xb - Xa) / (Yb - Ya);
        const ex_v8d xm = Xa + ((r0 + 0.5) - Ya) * dxdy;     /* where row r0 is left */
        const ex_v8d te0 = EX_V8D_SELECT(two, half, ((Yb - r0) + EX_QUANT) - EX_QUANT);
        const ex_v8d xe0 = EX_V8D_SELECT(two, xm, Xb);
        const ex_v8d te1 = ((Yb - (r0 + 1.0)) + EX_QUANT) - EX_QUANT, ts1 = -half;
        const ex_v8d row0 = (r0 - y0d) * rowlend, row1 = row0 + rowlend;
        ex_v8d o1a, vdy1a, vp1a, wdy1a, wp1a, o1b, vdy1b, vp1b, wdy1b, wp1b;
        ex_v8q v1a, v1b;
        const ex_v8q vld0 = in0 & (te0 != ts), vld1 = in1 & two & (te1 != ts1);
        EX_V8_ROW_PIECE(S, e, 0, Xa, ts, xe0, te0, vld0, row0, sink[0], sink[2], nxd, strided,
                        ok, sv, sww, anyw, o1a, vdy1a, vp1a, wdy1a, wp1a, v1a);
        EX_V8_ROW_PIECE(S, e, 1, xm, ts1, Xb, te1, vld1, row1, sink[1], sink[2], nxd, strided,
                        ok, sv, sww, anyw, o1b, vdy1b, vp1b, wdy1b, wp1b, v1b);
        /* Slot 2: the one second column part, of row 0 or of row 1 (an edge with both
         * goes through add_edge). */
        ok &= ~(v1a & v1b);
        const ex_v8d o2 = EX_V8D_SELECT(v1a, o1a, o1b);
        const ex_v8q i2 = (ex_v8q)(o2 + EX_I52) - (ex_v8q)EX_V8_I52;
        memcpy(&S->off[2][e], &i2, sizeof i2);
        const ex_v8d vdy2 = EX_V8D_SELECT(v1a, vdy1a, vdy1b);
        const ex_v8d vp2 = EX_V8D_SELECT(v1a, vp1a, vp1b);
        EX_V8D_STORE(&S->vdy[2][e], vdy2);
        EX_V8D_STORE(&S->vp[2][e], vp2);
        if (anyw) {
            const ex_v8d wdy2 = EX_V8D_SELECT(v1a, wdy1a, wdy1b);
            const ex_v8d wp2 = EX_V8D_SELECT(v1a, wp1a, wp1b);
            EX_V8D_STORE(&S->wdy[2][e], wdy2);
            EX_V8D_STORE(&S->wp[2][e], wp2);
        }
        EX_V8D_STORE(S->fast + e, ok);
    }
}

#endif

/* Deposits a batch and empties it: ex_short_classify, then edge by edge, in order, the
 * pieces of the short edges and add_edge for the others, so that every cell receives the
 * same terms in the same order as from add_edge alone (a piece that does not exist adds
 * its terms to the sink cell, which nothing reads).  No moments.  Cannot fail. */
static void ex_short_flush(const ex_acc *acc, ex_edges *E, ex_short *S)
{
    const int n = E->n;
    if (n == 0)
        return;
    for (int e = n; e & 7; e++)   /* to a multiple of the lanes of either step */
        E->xa[e] = E->ya[e] = E->xb[e] = E->yb[e] = E->wv[e] = E->ww[e] = 0.0;
#ifdef EX_HAVE_V8
    /* the CPU's features, read from libgcc's table (no cpuid): once a batch of 64 */
    if (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx512f")
        && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512bw"))
        ex_short_classify8(acc, E, S);
    else
#endif
        ex_short_classify(acc, E, S);
    double *cells = acc->cells;
    for (int e = 0; e < n; e++) {
        if (!S->fast[e]) {
            add_edge(acc, E->xa[e], E->ya[e], E->xb[e], E->yb[e], E->wv[e], E->ww[e], 0);
            continue;
        }
        /* deposit(): cell[EX_CV] += wv dy, cell[EX_PV] += wv p as one pair (and the
         * weights likewise), the products made by ex_short_classify. */
        for (int k = 0; k < EX_NSLOT; k++) {
            double *c = cells + S->off[k][e];
            ex_v2d a;
            memcpy(&a, c + EX_CV, sizeof a);
            a += (ex_v2d){ S->vdy[k][e], S->vp[k][e] };
            memcpy(c + EX_CV, &a, sizeof a);
        }
        if (S->sw[e] != 0.0)
            for (int k = 0; k < EX_NSLOT; k++) {
                double *c = cells + S->off[k][e];
                ex_v2d a;
                memcpy(&a, c + EX_CW, sizeof a);
                a += (ex_v2d){ S->wdy[k][e], S->wp[k][e] };
                memcpy(c + EX_CW, &a, sizeof a);
            }
    }
    E->n = 0;
}

/* add_edge through the batch E (flushed when full; the caller flushes the rest), or at
 * once with the moments.  Cannot fail. */
EX_INLINE void push_edge(const ex_acc *acc, ex_edges *E, ex_short *S, double xa, double ya,
                         double xb, double yb, double wv, double ww, const int mom)
{
    if (mom) {
        add_edge(acc, xa, ya, xb, yb, wv, ww, 1);
        return;
    }
    const int n = E->n;
    E->xa[n] = xa;
    E->ya[n] = ya;
    E->xb[n] = xb;
    E->yb[n] = yb;
    E->wv[n] = wv;
    E->ww[n] = ww;
    E->n = n + 1;
    if (n + 1 == EX_EBUF)
        ex_short_flush(acc, E, S);
}

/* Walks each lattice edge of the band of input pixels [i0, i1) x [j0, j1) once, weighted
 * by (pixel on its left) - (pixel on its right) along the lattice direction, from the
 * signed values qv and weights qw of its pixels (rows of i1 - i0) and the lattice lx, ly
 * of its corners (rows of i1 - i0 + 3 points, one more all round); pixels outside the
 * band count as 0, so the band's outline is closed by itself.  The sign makes
 * counterclockwise outlines count positive (add_edge measures the area right of the
 * edge).  Tiles of cell x cell input pixels, for the locality of the output cells they
 * reach.  nz[2 (j - j0)], nz[2 (j - j0) + 1]: the first and last q = i - i0 of row j
 * whose qv or qw is not 0 (bw and -1 when none), so that the edges of two pixels that are
 * both 0, which add nothing, are not even looked at.  Cannot fail. */
EX_INLINE void band_edges(const ex_acc *acc, const double *qv, const double *qw,
                          const double *lx, const double *ly, const long *nz, long i0,
                          long i1, long j0, long j1, long cell, const int mom)
{
    const long bw = i1 - i0, w = bw + 3;
    ex_edges E;
    ex_short S;
    E.n = 0;
    for (long t0 = i0; t0 < i1; t0 += cell) {
        const long t1 = t0 + cell < i1 ? t0 + cell : i1;
        for (long jl = j0; jl <= j1; jl++) {
            /* Pixel rows above and below lattice row jl (NULL outside the band). */
            const double *av = jl < j1 ? qv + (jl - j0) * bw : NULL;
            const double *aw = jl < j1 ? qw + (jl - j0) * bw : NULL;
            const double *bv = jl > j0 ? qv + (jl - j0 - 1) * bw : NULL;
            const double *bwt = jl > j0 ? qw + (jl - j0 - 1) * bw : NULL;
            /* Pixels not 0 in either row: q in [qa, qb]. */
            long qa = bw, qb = -1;
            if (av) {
                qa = nz[2 * (jl - j0)];
                qb = nz[2 * (jl - j0) + 1];
            }
            if (bv) {
                qa = nz[2 * (jl - j0 - 1)] < qa ? nz[2 * (jl - j0 - 1)] : qa;
                qb = nz[2 * (jl - j0 - 1) + 1] > qb ? nz[2 * (jl - j0 - 1) + 1] : qb;
            }
            const long ha = i0 + qa > t0 ? i0 + qa : t0, hb = i0 + qb + 1 < t1 ? i0 + qb + 1 : t1;
            for (long i = ha; i < hb; i++) {
                const long q = i - i0;
                const double wv = (av ? av[q] : 0.0) - (bv ? bv[q] : 0.0);
                const double ww = (aw ? aw[q] : 0.0) - (bwt ? bwt[q] : 0.0);
                if (wv == 0.0 && ww == 0.0)
                    continue;
                const long p = (jl - j0 + 1) * w + q + 1;    /* lattice point (i, jl) */
                push_edge(acc, &E, &S, lx[p], ly[p], lx[p + 1], ly[p + 1], -wv, -ww, mom);
            }
        }
        const long il1 = t1 == i1 ? i1 + 1 : t1;
        for (long j = j0; j < j1; j++) {
            const double *rv = qv + (j - j0) * bw, *rw = qw + (j - j0) * bw;
            /* Lattice columns next to a pixel that is not 0: q in [qa, qb + 1]. */
            const long qa = nz[2 * (j - j0)], qb = nz[2 * (j - j0) + 1];
            const long va = i0 + qa > t0 ? i0 + qa : t0;
            const long vb = i0 + qb + 2 < il1 ? i0 + qb + 2 : il1;
            for (long il = va; il < vb; il++) {
                /* Pixels left (il - 1) and right (il) of lattice column il. */
                const long q = il - i0;
                const double wv = (il > i0 ? rv[q - 1] : 0.0) - (il < i1 ? rv[q] : 0.0);
                const double ww = (il > i0 ? rw[q - 1] : 0.0) - (il < i1 ? rw[q] : 0.0);
                if (wv == 0.0 && ww == 0.0)
                    continue;
                const long p = (j - j0 + 1) * w + q + 1;     /* lattice point (il, j) */
                push_edge(acc, &E, &S, lx[p], ly[p], lx[p + w], ly[p + w], -wv, -ww, mom);
            }
        }
    }
    if (!mom)
        ex_short_flush(acc, &E, &S);
}

/* The orientation of the quadrilateral (x[k], y[k]), k = 0..3: +1 counterclockwise, -1
 * clockwise, 0 when degenerate (zero area) or self-intersecting (two or more corners
 * turning against the orientation; a concave quadrilateral has one).  Cannot fail. */
static int quad_orientation(const double *x, const double *y)
{
    const double a2 = (x[2] - x[0]) * (y[3] - y[1]) - (x[3] - x[1]) * (y[2] - y[0]);
    if (!(a2 != 0.0))
        return 0;
    const double ex[4] = { x[1] - x[0], x[2] - x[1], x[3] - x[2], x[0] - x[3] };
    const double ey[4] = { y[1] - y[0], y[2] - y[1], y[3] - y[2], y[0] - y[3] };
    const double s = a2 > 0.0 ? 1.0 : -1.0;
    const int against = (s * (ex[3] * ey[0] - ey[3] * ex[0]) < 0.0)
                        + (s * (ex[0] * ey[1] - ey[0] * ex[1]) < 0.0)
                        + (s * (ex[1] * ey[2] - ey[1] * ex[2]) < 0.0)
                        + (s * (ex[2] * ey[3] - ey[2] * ex[3]) < 0.0);
    return against > 1 ? 0 : (int)s;
}

/* Chebyshev length (output pixels) of the lattice edge between points p and q. */
static double edge_len(const double *lx, const double *ly, size_t p, size_t q)
{
    double dx = fabs(lx[q] - lx[p]), dy = fabs(ly[q] - ly[p]);
    return dx > dy ? dx : dy;
}

/* 1 when the lattice edge from point p to p + step is longer than EX_SEAM_MIN and
 * EX_SEAM_RATIO times the longer of its (finite) neighbours on the same lattice line,
 * p - step to p and p + step to p + 2 step (which must exist): the edge crosses a seam of
 * the output projection.  Cannot fail. */
static int edge_breaks(const double *lx, const double *ly, size_t p, size_t step)
{
    double e = edge_len(lx, ly, p, p + step);
    if (!(e > EX_SEAM_MIN))
        return 0;
    double a = edge_len(lx, ly, p - step, p), b = edge_len(lx, ly, p + step, p + 2 * step);
    double nbr = a > b ? a : b;     /* NaN only when a or b is */
    if (isnan(nbr))
        nbr = isnan(a) ? b : a;
    return !isnan(nbr) && e > EX_SEAM_RATIO * nbr;
}

/* The orientation (+1, -1) of input pixel i of a band row, or 0 when it is left out:
 * value v not finite, wholly above or below the rows (ylo, yhi), a corner off the map,
 * degenerate or folded, or across a seam.  Its corners are lattice points p00, p00 + 1
 * (lower) and p00 + w, p00 + w + 1 (upper) of lx, ly.  Cannot fail. */
static int pixel_sign(const double *lx, const double *ly, size_t w, size_t p00, double v,
                      double ylo, double yhi)
{
    if (!isfinite(v))
        return 0;
    const size_t p01 = p00 + w;
    const double qx[4] = { lx[p00], lx[p00 + 1], lx[p01 + 1], lx[p01] };
    const double qy[4] = { ly[p00], ly[p00 + 1], ly[p01 + 1], ly[p01] };
    /* Wholly above or below the rows: none of its edges deposits here (add_edge drops
     * them), nor do the edges it shares with neighbours, so leaving it out changes
     * nothing. */
    if ((qy[0] <= ylo && qy[1] <= ylo && qy[2] <= ylo && qy[3] <= ylo)
        || (qy[0] >= yhi && qy[1] >= yhi && qy[2] >= yhi && qy[3] >= yhi))
        return 0;
    if (!(fabs(qx[0]) < EX_COORD_MAX && fabs(qx[1]) < EX_COORD_MAX
          && fabs(qx[2]) < EX_COORD_MAX && fabs(qx[3]) < EX_COORD_MAX
          && fabs(qy[0]) < EX_COORD_MAX && fabs(qy[1]) < EX_COORD_MAX
          && fabs(qy[2]) < EX_COORD_MAX && fabs(qy[3]) < EX_COORD_MAX))
        return 0;                                   /* NaN, or off towards infinity */
    const int o = quad_orientation(qx, qy);
    if (!o)
        return 0;
    /* Seam test for large quadrilaterals (their diagonals span their extent unless they
     * are self-intersecting, which were left out above). */
    if ((fabs(qx[2] - qx[0]) > EX_SEAM_MIN || fabs(qx[3] - qx[1]) > EX_SEAM_MIN
         || fabs(qy[2] - qy[0]) > EX_SEAM_MIN || fabs(qy[3] - qy[1]) > EX_SEAM_MIN)
        && (edge_breaks(lx, ly, p00, 1) || edge_breaks(lx, ly, p01, 1)
            || edge_breaks(lx, ly, p00, w) || edge_breaks(lx, ly, p00 + 1, w)))
        return 0;
    return o;
}

/* The signed value rv and weight rw (orientation times (v, 1), or 0 when left out:
 * pixel_sign) of input pixels [i0, i1) of a band row: values vf (float32) or vd (double)
 * indexed by i, lattice points from p0 (pixel i0's lower left corner at p0 + 1, rows w
 * apart), rv and rw indexed by i - i0; pixels of selection cells not included are 0.
 * Four pixels at a time with pixel_sign's tests as lane masks (the same values), the
 * rare quadrilateral large enough for the seam test by pixel_sign.  Cannot fail. */
EX_HOT static void band_row_signs(const double *lx, const double *ly, size_t w, size_t p0,
                                  long i0, long i1, const unsigned char *inc, int cshift,
                                  const float *vf, const double *vd, double ylo, double yhi,
                                  double *rv, double *rw)
{
    const rp_v4d one = { 1.0, 1.0, 1.0, 1.0 }, zero = { 0.0, 0.0, 0.0, 0.0 };
    long i = i0;
    while (i < i1) {
        /* Selection cells are a multiple of 4 wide and start at multiples of their
         * width, as i0 does: a group of 4 from i lies in one. */
        if (!inc[i >> cshift]) {
            long e = ((i >> cshift) + 1) << cshift;
            e = e < i1 ? e : i1;
            for (; i < e; i++)
                rv[i - i0] = rw[i - i0] = 0.0;
            continue;
        }
        const size_t p00 = p0 + (size_t)(i - i0 + 1), p01 = p00 + w;
        if (i + 4 > i1) {
            const double v = vf ? (double)vf[i] : vd[i];
            const int o = pixel_sign(lx, ly, w, p00, v, ylo, yhi);
            rv[i - i0] = o ? o * v : 0.0;
            rw[i - i0] = o;
            i++;
            continue;
        }
        rp_v4d v, x0, x1, x2, x3, y0, y1, y2, y3;
        if (vf) {
            typedef float ex_v4f __attribute__((vector_size(16)));
            ex_v4f t;
            memcpy(&t, vf + i, sizeof t);
            v = __builtin_convertvector(t, rp_v4d);
        } else {
            RP_V4D_LOAD(v, vd + i);
        }
        RP_V4D_LOAD(x0, lx + p00);
        RP_V4D_LOAD(x1, lx + p00 + 1);
        RP_V4D_LOAD(x2, lx + p01 + 1);
        RP_V4D_LOAD(x3, lx + p01);
        RP_V4D_LOAD(y0, ly + p00);
        RP_V4D_LOAD(y1, ly + p00 + 1);
        RP_V4D_LOAD(y2, ly + p01 + 1);
        RP_V4D_LOAD(y3, ly + p01);
        const rp_v4q fin = (v - v) == 0.0;
        const rp_v4q above = (y0 <= ylo) & (y1 <= ylo) & (y2 <= ylo) & (y3 <= ylo);
        const rp_v4q below = (y0 >= yhi) & (y1 >= yhi) & (y2 >= yhi) & (y3 >= yhi);
        const double M = EX_COORD_MAX;
        const rp_v4q inr = (x0 < M) & (x0 > -M) & (x1 < M) & (x1 > -M) & (x2 < M) & (x2 > -M)
                           & (x3 < M) & (x3 > -M) & (y0 < M) & (y0 > -M) & (y1 < M) & (y1 > -M)
                           & (y2 < M) & (y2 > -M) & (y3 < M) & (y3 > -M);
        /* quad_orientation, lane-wise. */
        const rp_v4d a2 = (x2 - x0) * (y3 - y1) - (x3 - x1) * (y2 - y0);
        const rp_v4d s = RP_V4D_SELECT(a2 > 0.0, one, -one);
        const rp_v4d ex0 = x1 - x0, ex1 = x2 - x1, ex2 = x3 - x2, ex3 = x0 - x3;
        const rp_v4d ey0 = y1 - y0, ey1 = y2 - y1, ey2 = y3 - y2, ey3 = y0 - y3;
        const rp_v4q against = -((s * (ex3 * ey0 - ey3 * ex0) < 0.0)
                                 + (s * (ex0 * ey1 - ey0 * ex1) < 0.0)
                                 + (s * (ex1 * ey2 - ey1 * ex2) < 0.0)
                                 + (s * (ex2 * ey3 - ey2 * ex3) < 0.0));
        const rp_v4q ok = fin & ~above & ~below & inr & (a2 != 0.0) & (against <= 1);
        const rp_v4d dx0 = x2 - x0, dx1 = x3 - x1, dy0 = y2 - y0, dy1 = y3 - y1;
        const double S = EX_SEAM_MIN;
        const rp_v4q big = ok & ((dx0 > S) | (dx0 < -S) | (dx1 > S) | (dx1 < -S) | (dy0 > S)
                                 | (dy0 < -S) | (dy1 > S) | (dy1 < -S));
        if (RP_V4Q_ANY(big)) {
            for (int k = 0; k < 4; k++) {
                const int o = pixel_sign(lx, ly, w, p00 + (size_t)k, v[k], ylo, yhi);
                rv[i - i0 + k] = o ? o * v[k] : 0.0;
                rw[i - i0 + k] = o;
            }
        } else {
            const rp_v4d sv = RP_V4D_SELECT(ok, s * v, zero), sw = RP_V4D_SELECT(ok, s, zero);
            RP_V4D_STORE(rv + (i - i0), sv);
            RP_V4D_STORE(rw + (i - i0), sw);
        }
        i += 4;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Selection of the input region and the main loop                                        */

/* Maps the corners of the selection cells (EX_CELL-sized blocks of input pixels; the
 * last ones smaller), (ncx + 1) x (ncy + 1) nodes, to output pixels qx, qy (NaN off the
 * map).  Returns 0 or TESS_ENOMEM. */
static int map_cell_nodes(rp_coordmap *m, long in_nx, long in_ny, long cell, long ncx,
                          long ncy, double *qx, double *qy)
{
    const size_t nn = (size_t)(ncx + 1) * (size_t)(ncy + 1);
    double *mem = malloc(sizeof(double) * nn * 2);
    if (!mem)
        return TESS_ENOMEM;
    double *px = mem, *py = mem + nn;
    for (long l = 0; l <= ncy; l++)
        for (long k = 0; k <= ncx; k++) {
            size_t o = (size_t)l * (size_t)(ncx + 1) + (size_t)k;
            px[o] = (double)(k * cell < in_nx ? k * cell : in_nx) - 0.5;
            py[o] = (double)(l * cell < in_ny ? l * cell : in_ny) - 0.5;
        }
    int rc = rp_coordmap_points(m, nn, px, py, qx, qy) != 0 ? TESS_ENOMEM : 0;
    free(mem);
    return rc;
}

/* Marks, in include[ncx * ncy], the selection cells that may reach output rows [y0, y1)
 * (qx, qy from map_cell_nodes): those whose mapped corners bound a box that, grown by 2
 * pixels plus a quarter of its size (the mapped cell may bulge beyond its corners),
 * meets the rows and the columns [0, nx); and every cell with a corner off the map.
 * Cannot fail. */
static void select_cells(const double *qx, const double *qy, long ncx, long ncy, long nx,
                         long y0, long y1, unsigned char *include)
{
    const double ylo = (double)y0 - 0.5, yhi = (double)y1 - 0.5, xhi = (double)nx - 0.5;
    for (long l = 0; l < ncy; l++)
        for (long k = 0; k < ncx; k++) {
            size_t c[4] = { (size_t)l * (size_t)(ncx + 1) + (size_t)k, 0, 0, 0 };
            c[1] = c[0] + 1;
            c[2] = c[0] + (size_t)(ncx + 1);
            c[3] = c[2] + 1;
            double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
            int bad = 0;
            for (int i = 0; i < 4; i++) {
                double a = qx[c[i]], b = qy[c[i]];
                if (isnan(a) || isnan(b)) {
                    bad = 1;
                    break;
                }
                xmin = a < xmin ? a : xmin;
                xmax = a > xmax ? a : xmax;
                ymin = b < ymin ? b : ymin;
                ymax = b > ymax ? b : ymax;
            }
            int in = 1;
            if (!bad) {
                double ext = xmax - xmin > ymax - ymin ? xmax - xmin : ymax - ymin;
                double g = 2.0 + 0.25 * ext;
                in = ymax + g > ylo && ymin - g < yhi && xmax + g > -0.5 && xmin - g < xhi;
            }
            include[(size_t)l * (size_t)ncx + (size_t)k] = (unsigned char)in;
        }
}

/* A WCS pair prepared for rp_exact_rows_ctx, with what does not change from band to
 * band (the coordinate map, the solid angle test, the mapped selection nodes) and
 * scratch buffers grown on demand, never shrunk, so that a thread running band after
 * band touches (and page-faults) its memory once. */
struct rp_exact_ctx {
    rp_coordmap *m;            /* input pixels -> output pixels */
    skywcs *wout;              /* the output's 2-D celestial WCS */
    long mom_nx, mom_ny;       /* output size `moments` was found for (0: none yet) */
    int moments;               /* gradient_matters for that size */
    long sel_nx, sel_ny;       /* input size the selection nodes are for (0: none yet) */
    long cell, ncx, ncy;       /* their selection cells */
    int cshift;                /* log2(cell) */
    double *nodes;             /* mapped nodes: x then y, (ncx + 1) x (ncy + 1) each */
    double *cells;             /* accumulation cells of the requested rows */
    size_t ncells;             /* doubles allocated */
    size_t zeroed;             /* the first `zeroed` of them are 0 (the last call's rows) */
    double *lat;               /* lattice corners and the signed values of one band */
    size_t nlat;
    unsigned char *include;    /* selection cells */
    size_t ninclude;
};

/* rp_exact_ctx_new, with the error code in *code (TESS_EINVAL or TESS_ENOMEM) when NULL
 * is returned. */
static rp_exact_ctx *ctx_create(const skywcs *in, const skywcs *out, int *code, char *err,
                                size_t errlen)
{
    *code = TESS_EINVAL;
    if (!in || !out) {
        tess_seterr(err, errlen, "missing WCS");
        return NULL;
    }
    if (skywcs_check_pair(in, out, err, errlen))
        return NULL;
    if (skywcs_naxis(in) != 2) {
        skywcs *t = skywcs_celestial(in);
        if (!t) {
            tess_seterr(err, errlen, "input celestial axes not separable from the others");
            return NULL;
        }
        skywcs_free(t);
    }
    rp_exact_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        *code = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        return NULL;
    }
    c->wout = skywcs_naxis(out) == 2 ? skywcs_copy(out) : skywcs_celestial(out);
    if (!c->wout) {
        int coupled = skywcs_naxis(out) != 2;
        *code = coupled ? TESS_EINVAL : TESS_ENOMEM;
        tess_seterr(err, errlen, "%s",
                    coupled ? "output celestial axes not separable from the others"
                            : "out of memory");
        free(c);
        return NULL;
    }
    char merr[128] = "";
    c->m = rp_coordmap_new(in, out, merr, sizeof merr);
    if (!c->m) {
        /* The pair passed skywcs_check_pair: only memory can be missing. */
        *code = TESS_ENOMEM;
        tess_seterr(err, errlen, "%s", merr);
        rp_exact_ctx_free(c);
        return NULL;
    }
    return c;
}

rp_exact_ctx *rp_exact_ctx_new(const skywcs *in, const skywcs *out, char *err, size_t errlen)
{
    int code;
    return ctx_create(in, out, &code, err, errlen);
}

void rp_exact_ctx_free(rp_exact_ctx *c)
{
    if (!c)
        return;
    rp_coordmap_free(c->m);
    skywcs_free(c->wout);
    free(c->nodes);
    free(c->cells);
    free(c->lat);
    free(c->include);
    free(c);
}

/* Makes *buf hold at least n elements of size es (contents not kept), from
 * tess_alloc_huge: the cells of a 128-row band of 4096 output pixels are 16.8 MB that
 * the deposits reach all over, which on small pages missed the TLB (bench/kernels exact
 * coords, 4096^2 rotated by 20 deg, 1 thread, Intel Xeon, 4 runs alternated: 25.2-26.2
 * Mpix/s from malloc, 26.3-27.2 on huge pages; ex_short_flush's share of the profile
 * 13% to 10%).  Returns the buffer or NULL (out of memory; *buf is then freed and *cap
 * 0). */
static void *ctx_grow(void **buf, size_t *cap, size_t n, size_t es)
{
    if (*cap >= n && *buf)
        return *buf;
    free(*buf);
    *cap = 0;
    *buf = n <= SIZE_MAX / es ? tess_alloc_huge(n * es) : NULL;
    if (*buf)
        *cap = n;
    return *buf;
}

/* What tess_alloc_huge reserves for b bytes (tess_huge_bytes), in double: the buffers of
 * ctx_grow from 1 MiB up are rounded up to whole 2 MiB.  Cannot fail. */
static double huge_rounded(double b)
{
    const double mib = (double)((size_t)1 << 20);
    return b < mib ? b : ceil(b / (2.0 * mib)) * (2.0 * mib);
}

double rp_exact_scratch_bytes(long in_nx, long in_ny, long out_nx, long rows)
{
    if (in_nx < 1 || in_ny < 1 || out_nx < 1 || rows < 1)
        return 0.0;
    long cell = EX_CELL;   /* as rp_exact_rows_ctx chooses it */
    while (((in_nx + cell - 1) / cell + 1) * ((in_ny + cell - 1) / cell + 1) > EX_MAX_NODES)
        cell *= 2;
    double ncx = (double)((in_nx + cell - 1) / cell), ncy = (double)((in_ny + cell - 1) / cell);
    double nn = (ncx + 1.0) * (ncy + 1.0);
    double nodes = 2.0 * nn * 2.0 * sizeof(double) + ncx * ncy;   /* kept, mapped, include */
    double lat = ((double)(in_nx + 3) * (EX_CELL + 3) * 2.0 + (double)in_nx * EX_CELL * 2.0)
                 * sizeof(double);
    double cells = ((double)rows * ((double)out_nx * EX_NALL + 16.0) + EX_NSINK * EX_NALL)
                   * sizeof(double);
    return nodes + huge_rounded(lat) + huge_rounded(cells);
}

/* See exact.h: a prepared pair for one call. */
long rp_exact_rows(const skywcs *in, const rp_plane *src, const skywcs *out, long out_nx,
                   long out_ny, long out_y0, long out_y1, double max_coord_error,
                   double *dst, double *footprint, char *err, size_t errlen)
{
    if (!in || !out || !src || !src->data || !dst) {
        tess_seterr(err, errlen, "missing WCS, plane or output array");
        return TESS_EINVAL;
    }
    int code;
    rp_exact_ctx *c = ctx_create(in, out, &code, err, errlen);
    if (!c)
        return code;
    long rc = rp_exact_rows_ctx(c, src, out_nx, out_ny, out_y0, out_y1, max_coord_error, dst,
                                footprint, err, errlen);
    rp_exact_ctx_free(c);
    return rc;
}

/* See exact.h.  Memory (in ctx, kept between calls): 32 bytes per output pixel of the
 * requested rows (48 with the solid angle correction), plus ~130 doubles per input column
 * for a band.  Errors: TESS_EINVAL (NULL arguments, sizes < 1 or too large, rows not
 * within 0 <= out_y0 <= out_y1 <= out_ny, an unknown dtype, max_coord_error negative or
 * not finite), TESS_ENOMEM; on error the requested rows of dst and footprint are
 * unspecified. */
long rp_exact_rows_ctx(rp_exact_ctx *ctx, const rp_plane *src, long out_nx, long out_ny,
                       long out_y0, long out_y1, double max_coord_error, double *dst,
                       double *footprint, char *err, size_t errlen)
{
    if (!ctx || !src || !src->data || !dst) {
        tess_seterr(err, errlen, "missing prepared WCS pair, plane or output array");
        return TESS_EINVAL;
    }
    if (src->dtype != RP_F32 && src->dtype != RP_F64) {
        tess_seterr(err, errlen, "unknown plane dtype %d", (int)src->dtype);
        return TESS_EINVAL;
    }
    const long in_nx = src->nx, in_ny = src->ny;
    if (in_nx < 1 || in_ny < 1 || out_nx < 1 || out_ny < 1 || in_nx >= INT_MAX
        || in_ny >= INT_MAX || out_nx >= INT_MAX || out_ny >= INT_MAX
        || in_nx > LONG_MAX / in_ny || out_nx > LONG_MAX / out_ny) {
        tess_seterr(err, errlen, "bad image size (%ldx%ld -> %ldx%ld)", in_nx, in_ny, out_nx,
                    out_ny);
        return TESS_EINVAL;
    }
    if (out_y0 < 0 || out_y1 < out_y0 || out_y1 > out_ny) {
        tess_seterr(err, errlen, "bad output rows [%ld, %ld) of %ld", out_y0, out_y1, out_ny);
        return TESS_EINVAL;
    }
    if (!isfinite(max_coord_error) || max_coord_error < 0.0) {
        tess_seterr(err, errlen, "max_coord_error: must be a finite number >= 0");
        return TESS_EINVAL;
    }
    if (out_y0 == out_y1)
        return 0;

    const long rows = out_y1 - out_y0;
    long rc = 0;
    rp_coordmap *m = ctx->m;
    skywcs *wout = ctx->wout;
    if (ctx->sel_nx != in_nx || ctx->sel_ny != in_ny) {
        long cell = EX_CELL;
        int cshift = 0;
        while ((1L << cshift) < cell)
            cshift++;
        while (((in_nx + cell - 1) / cell + 1) * ((in_ny + cell - 1) / cell + 1) > EX_MAX_NODES) {
            cell *= 2;
            cshift++;
        }
        const long ncx = (in_nx + cell - 1) / cell, ncy = (in_ny + cell - 1) / cell;
        const size_t nn = (size_t)(ncx + 1) * (size_t)(ncy + 1);
        free(ctx->nodes);
        ctx->sel_nx = ctx->sel_ny = 0;
        ctx->nodes = malloc(sizeof(double) * nn * 2);
        if (!ctx->nodes
            || map_cell_nodes(m, in_nx, in_ny, cell, ncx, ncy, ctx->nodes, ctx->nodes + nn) != 0) {
            rc = TESS_ENOMEM;
            goto done;
        }
        ctx->sel_nx = in_nx;
        ctx->sel_ny = in_ny;
        ctx->cell = cell;
        ctx->cshift = cshift;
        ctx->ncx = ncx;
        ctx->ncy = ncy;
    }
    if (ctx->mom_nx != out_nx || ctx->mom_ny != out_ny) {
        ctx->mom_nx = ctx->mom_ny = 0;
        ctx->moments = gradient_matters(wout, out_nx, out_ny);
        if (ctx->moments < 0) {
            rc = TESS_ENOMEM;
            goto done;
        }
        ctx->mom_nx = out_nx;
        ctx->mom_ny = out_ny;
    }
    const long cell = ctx->cell, ncx = ctx->ncx, ncy = ctx->ncy;
    const int cshift = ctx->cshift, moments = ctx->moments;
    ex_acc acc = { NULL, EX_NAREA, 0, out_nx, out_y0, out_y1 };
    unsigned char *include = ctx_grow((void **)&ctx->include, &ctx->ninclude,
                                      (size_t)ncx * (size_t)ncy, 1);
    const size_t latn = (size_t)(in_nx + 3) * (size_t)(EX_CELL + 3);
    const size_t qn = (size_t)in_nx * (size_t)EX_CELL;
    double *lx = ctx_grow((void **)&ctx->lat, &ctx->nlat, latn * 2 + qn * 2, sizeof(double));
    if (!include || !lx) {
        rc = TESS_ENOMEM;
        goto done;
    }
    acc.stride = moments ? EX_NALL : EX_NAREA;
    const size_t rowlen = ex_rowlen(out_nx, acc.stride);
    acc.rowlen = rowlen;
    /* The rows, then the sink cells of ex_short_flush. */
    const size_t sinks = (size_t)EX_NSINK * EX_NALL;
    const size_t nrows = (size_t)rows * rowlen;
    if (ctx->ncells < nrows + sinks)
        ctx->zeroed = 0;   /* ctx_grow allocates anew */
    acc.cells = (size_t)rows < SIZE_MAX / sizeof(double) / rowlen - EX_NSINK
                    ? ctx_grow((void **)&ctx->cells, &ctx->ncells, nrows + sinks, sizeof(double))
                    : NULL;
    /* The rows must start at 0: the final pass leaves those it read at 0 for the next call
     * (while they are in the caches), so only rows past the last call's are cleared here,
     * and the sink cells. */
    if (acc.cells) {
        if (ctx->zeroed < nrows)
            memset(acc.cells + ctx->zeroed, 0, sizeof(double) * (nrows - ctx->zeroed));
        memset(acc.cells + nrows, 0, sizeof(double) * sinks);
    }
    ctx->zeroed = 0;   /* until the final pass has cleared the rows again */
    if (!acc.cells
        || (moments && area_gradient(wout, out_nx, out_ny, out_y0, out_y1, acc.cells, acc.stride,
                                     rowlen, EX_GX, EX_GY) != 0)) {
        rc = TESS_ENOMEM;
        goto done;
    }
    select_cells(ctx->nodes, ctx->nodes + (size_t)(ncx + 1) * (size_t)(ncy + 1), ncx, ncy,
                 out_nx, out_y0, out_y1, include);
    double *ly = lx + latn, *qv = lx + 2 * latn, *qw = qv + qn;
    const double ylo = (double)out_y0 - 0.5, yhi = (double)out_y1 - 0.5;

    for (long l = 0; l < ncy; l++) {
        const unsigned char *inc = include + (size_t)l * (size_t)ncx;
        long a = 0, b = ncx - 1;
        while (a < ncx && !inc[a])
            a++;
        while (b >= a && !inc[b])
            b--;
        if (a > b)
            continue;
        const long i0 = a * cell, i1 = (b + 1) * cell < in_nx ? (b + 1) * cell : in_nx;
        const long jend = (l + 1) * cell < in_ny ? (l + 1) * cell : in_ny;
        const long bw = i1 - i0;
        /* Bands of EX_CELL input rows (cells grow on huge inputs; bands do not). */
        long nz[2 * EX_CELL];   /* band_edges' first and last pixels not 0, row by row */
        for (long j0 = l * cell; j0 < jend; j0 += EX_CELL) {
            const long j1 = j0 + EX_CELL < jend ? j0 + EX_CELL : jend;
            /* The corners of pixels [i0, i1) x [j0, j1) and one more all round, for the seam
             * test's neighbours (coordmap's positions do not depend on how the lattice is
             * cut, so every block sees the same corners). */
            const long w = bw + 3;
            if (rp_coordmap_lattice(m, (double)i0 - 1.5, (double)j0 - 1.5, w, j1 - j0 + 3,
                                    max_coord_error, lx, ly, NULL) != 0) {
                rc = TESS_ENOMEM;
                goto done;
            }
            /* The signed value and weight of each input pixel of the band: its orientation
             * times (v, 1), or 0 when it is left out. */
            for (long j = j0; j < j1; j++) {
                const size_t row = (size_t)j * (size_t)in_nx;
                const float *vf = src->dtype == RP_F32 ? (const float *)src->data + row : NULL;
                const double *vd = src->dtype == RP_F64 ? (const double *)src->data + row : NULL;
                const double *rv = qv + (j - j0) * bw, *rw = qw + (j - j0) * bw;
                band_row_signs(lx, ly, (size_t)w, (size_t)(j - j0 + 1) * (size_t)w, i0, i1,
                               inc, cshift, vf, vd, ylo, yhi, qv + (j - j0) * bw,
                               qw + (j - j0) * bw);
                long qa = 0, qb = bw - 1;
                while (qa < bw && rv[qa] == 0.0 && rw[qa] == 0.0)
                    qa++;
                while (qb >= qa && rv[qb] == 0.0 && rw[qb] == 0.0)
                    qb--;
                if (qa == bw)
                    qb = -1;
                nz[2 * (j - j0)] = qa;
                nz[2 * (j - j0) + 1] = qb;
            }
            /* Each lattice edge once (band_edges). */
            if (moments)
                band_edges(&acc, qv, qw, lx, ly, nz, i0, i1, j0, j1, cell, 1);
            else
                band_edges(&acc, qv, qw, lx, ly, nz, i0, i1, j0, j1, cell, 0);
        }
    }

    /* Running sums along the rows, then value = sum / weight.  A pixel is empty when its
     * exact cover plus local part is not positive: both are exactly 0 in pixels that no
     * outline crosses and no data covers. */
    double *fp = footprint ? footprint + (size_t)out_y0 * (size_t)out_nx : NULL;
    double *dv = dst + (size_t)out_y0 * (size_t)out_nx;
    for (long r = 0; r < rows; r++) {
        double *row = acc.cells + (size_t)r * rowlen;
        const double *cellp = row;
        double cw = 0.0, cv = 0.0;
        for (long c = 0; c < out_nx; c++, cellp += acc.stride) {
            const size_t k = (size_t)r * (size_t)out_nx + (size_t)c;
            cw += cellp[EX_CW];
            cv += cellp[EX_CV];
            const double wsum = cw + cellp[EX_PW], vsum = cv + cellp[EX_PV];
            if (wsum > 0.0) {
                dv[k] = vsum / wsum;
                if (fp)
                    fp[k] = wsum;
                rc++;
            } else {
                dv[k] = NAN;
                if (fp)
                    fp[k] = 0.0;
            }
        }
        memset(row, 0, sizeof(double) * rowlen);
    }
    ctx->zeroed = nrows;

done:
    if (rc < 0)
        tess_seterr(err, errlen, "out of memory");
    return rc;
}
