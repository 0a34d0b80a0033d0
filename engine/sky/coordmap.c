/* Pixel-to-pixel coordinate mapping between two celestial WCSs: exact transforms with the round trip check, and an adaptive approximate grid. */
#include "engine/sky/coordmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/sky/simd.h"
#include "engine/sky/solar.h"

/* Points transformed per batch of wcslib calls (bounds the scratch memory). */
#define CM_CHUNK 4096

/* Between solar frames on the solar sphere, a point whose view cosine from the
 * helioprojective observers is at least CM_SOLAR_MU, or at most -CM_SOLAR_MU (about 0.6
 * degree of heliographic arc from the limb), skips the costly way back of the round
 * trip: it comes back to itself, or (hidden) to the near side of its line of sight, and
 * the conversion finds that where it found the point (solar_convert_trip).  The points
 * nearer the limb take the whole round trip. */
#define CM_SOLAR_MU 0.01

/* Node spacing of the coarsest grid level and of the finest, in `from` pixels (powers
 * of two).  A cell that fails its check is split in four (spacing halved) until the
 * spacing reaches CM_CELL_MIN; a failing cell at CM_CELL_MIN is transformed exactly. */
#define CM_CELL_TOP 128
#define CM_CELL_MIN 16

/* A cell is interpolated only when the error measured at its test points, times
 * CM_SAFETY, is within the bound.  The margin is wide on purpose: the test points sample
 * the error rather than bound it, and at the default bound of 0.001 pixel it keeps
 * interpolated positions within ~1e-7 pixel of the exact transform, below what float32
 * pixel values resolve, so the grid changes results only at the level of rounding.  A
 * smooth mapping interpolated by cubics over 128 pixels is that accurate already
 * (TAN to rotated TAN: ~1e-9 pixel); wide fields with strong curvature get finer cells. */
#define CM_SAFETY 1e4

/* The per-point error bound reported for an interpolated point: CM_EPS_FACTOR times the
 * largest error measured at its cell's test points, plus CM_EPS_FLOOR (pixels). */
#define CM_EPS_FACTOR 8.0
#define CM_EPS_FLOOR 1e-10

struct rp_coordmap {
    skywcs *from, *to;           /* private 2-D celestial copies */
    double margin;               /* acceptance margin of a cell (CM_SAFETY by default) */
    long cell_min;               /* finest cell spacing (CM_CELL_MIN by default) */
    sky_frame ffrom, fto;
    double eqfrom, eqto;
    double *lon, *lat, *xr, *yr; /* CM_CHUNK each */
    double *lon0, *lat0;         /* CM_CHUNK each, for a solar pair (NULL otherwise) */
    unsigned char *cls;          /* CM_CHUNK, for a solar pair (NULL otherwise) */
    solar_fastmap *fast;         /* a solar pair of plain WCSs (NULL otherwise) */
    double *gx;                  /* 4 CM_CHUNK, with `fast`: the points it leaves */
    unsigned char *fcls;         /* CM_CHUNK, with `fast` */
};

/* A private 2-D celestial copy of w (its celestial axes when it has more), or NULL. */
static skywcs *private_celestial(const skywcs *w)
{
    if (!skywcs_has_celestial(w))
        return NULL;
    return skywcs_naxis(w) == 2 ? skywcs_copy(w) : skywcs_celestial(w);
}

rp_coordmap *rp_coordmap_new(const skywcs *from, const skywcs *to, char *err, size_t errlen)
{
    if (!from || !to || !skywcs_has_celestial(from) || !skywcs_has_celestial(to)) {
        int from_ok = from && skywcs_has_celestial(from);
        tess_seterr(err, errlen, "%s", from_ok ? "`to` WCS has no celestial axes"
                                               : "`from` WCS has no celestial axes");
        return NULL;
    }
    rp_coordmap *m = calloc(1, sizeof *m);
    if (!m) {
        tess_seterr(err, errlen, "out of memory");
        return NULL;
    }
    m->margin = CM_SAFETY;
    m->cell_min = CM_CELL_MIN;
    m->ffrom = skywcs_frame(from, &m->eqfrom);
    m->fto = skywcs_frame(to, &m->eqto);
    if (m->ffrom == SKY_FRAME_NONE || m->fto == SKY_FRAME_NONE) {
        tess_seterr(err, errlen, "%s", m->ffrom == SKY_FRAME_NONE
                                           ? "`from` WCS has an unsupported celestial frame"
                                           : "`to` WCS has an unsupported celestial frame");
        free(m);
        return NULL;
    }
    if (skywcs_check_pair(from, to, err, errlen)) {
        free(m);
        return NULL;
    }
    m->from = private_celestial(from);
    m->to = private_celestial(to);
    m->lon = malloc(sizeof(double) * CM_CHUNK * 4);
    if (!m->from || !m->to || !m->lon) {
        /* skywcs_celestial also refuses celestial axes coupled to other axes. */
        int coupled = (!m->from && skywcs_naxis(from) != 2) || (!m->to && skywcs_naxis(to) != 2);
        tess_seterr(err, errlen, "%s", coupled ? "celestial axes not separable from the others"
                                               : "out of memory");
        rp_coordmap_free(m);
        return NULL;
    }
    m->lat = m->lon + CM_CHUNK;
    m->xr = m->lon + 2 * CM_CHUNK;
    m->yr = m->lon + 3 * CM_CHUNK;
    if (skywcs_convert_trip(m->from, m->to, CM_SOLAR_MU, 0, NULL, NULL, NULL, NULL, NULL)) {
        m->lon0 = malloc(sizeof(double) * CM_CHUNK * 2);
        m->cls = malloc(CM_CHUNK);
        if (!m->lon0 || !m->cls) {
            tess_seterr(err, errlen, "out of memory");
            rp_coordmap_free(m);
            return NULL;
        }
        m->lat0 = m->lon0 + CM_CHUNK;
        m->fast = solar_fastmap_new(m->from, m->to, CM_SOLAR_MU);
        if (m->fast) {
            m->gx = malloc(sizeof(double) * CM_CHUNK * 4);
            m->fcls = malloc(CM_CHUNK);
            if (!m->gx || !m->fcls) {
                tess_seterr(err, errlen, "out of memory");
                rp_coordmap_free(m);
                return NULL;
            }
        }
    }
    return m;
}

int rp_coordmap_set_grid(rp_coordmap *m, double margin, long cell_min)
{
    if (!m || !isfinite(margin) || margin < 1.0 || cell_min < 2 || cell_min > CM_CELL_TOP ||
        (cell_min & (cell_min - 1)) != 0)
        return TESS_EINVAL;
    m->margin = margin;
    m->cell_min = cell_min;
    return 0;
}

void rp_coordmap_free(rp_coordmap *m)
{
    if (!m)
        return;
    skywcs_free(m->from);
    skywcs_free(m->to);
    free(m->lon);
    free(m->lon0);
    free(m->cls);
    solar_fastmap_free(m->fast);
    free(m->gx);
    free(m->fcls);
    free(m);
}

/* map_points' rule: whether a point whose round trip misses by (dx, dy) pixels is
 * dropped. */
static int trip_misses(double dx, double dy, int strict)
{
    return strict ? !(dx <= 1.0 && dy <= 1.0) : (dx > 1.0 || dy > 1.0);
}

/* map_points' transforms for a solar pair, for k points (px, py) of `from`: the `to`
 * pixels into (qx, qy) and where the round trip ends into m->xr, m->yr.  The forward
 * conversion classes the points (skywcs_convert_trip): those of classes 1 and 2 end
 * where it says, and a class 2 point that thereby misses (most of the far side) is
 * dropped before the costly `to` projection (cls 3, qx = qy = NaN); only the points
 * of class 0 go back through `to`'s WCS and the frame conversion.  Returns 0 or
 * TESS_ENOMEM. */
static int map_solar(rp_coordmap *m, size_t k, const double *px, const double *py,
                     double *qx, double *qy, int strict)
{
    if (skywcs_pix2sky(m->from, k, px, py, m->lon, m->lat) == TESS_ENOMEM)
        return TESS_ENOMEM;
    memcpy(m->lon0, m->lon, sizeof(double) * k);
    memcpy(m->lat0, m->lat, sizeof(double) * k);
    skywcs_convert_trip(m->from, m->to, CM_SOLAR_MU, k, m->lon, m->lat, m->lon0, m->lat0,
                        m->cls);
    /* The ends of the trips the classes give (class 0's are replaced below). */
    if (skywcs_sky2pix(m->from, k, m->lon0, m->lat0, m->xr, m->yr) == TESS_ENOMEM)
        return TESS_ENOMEM;
    size_t c = 0;
    for (size_t i = 0; i < k; i++) {
        if (m->cls[i] == 2 &&
            trip_misses(fabs(m->xr[i] - px[i]), fabs(m->yr[i] - py[i]), strict)) {
            m->cls[i] = 3;
            continue;
        }
        m->lon[c] = m->lon[i];   /* c <= i: in place */
        m->lat[c] = m->lat[i];
        c++;
    }
    if (c > 0 && skywcs_sky2pix(m->to, c, m->lon, m->lat, qx, qy) == TESS_ENOMEM)
        return TESS_ENOMEM;
    /* Back to the points' own slots, from the last down: the j-th point kept, j <= i,
     * moves from slot j to its slot i (slots below i not yet read). */
    for (size_t i = k, j = c; i-- > 0;) {
        if (m->cls[i] == 3) {
            qx[i] = qy[i] = NAN;
        } else {
            j--;
            qx[i] = qx[j];
            qy[i] = qy[j];
        }
    }
    /* Class 0: the whole way back, in m->lon0, m->lat0 (free now) as scratch. */
    c = 0;
    for (size_t i = 0; i < k; i++)
        if (m->cls[i] == 0) {
            m->lon0[c] = qx[i];
            m->lat0[c] = qy[i];
            c++;
        }
    if (c == 0)
        return 0;
    if (skywcs_pix2sky(m->to, c, m->lon0, m->lat0, m->lon, m->lat) == TESS_ENOMEM)
        return TESS_ENOMEM;
    skywcs_convert(m->to, m->from, c, m->lon, m->lat);
    if (skywcs_sky2pix(m->from, c, m->lon, m->lat, m->lon0, m->lat0) == TESS_ENOMEM)
        return TESS_ENOMEM;
    for (size_t i = 0, j = 0; i < k; i++)
        if (m->cls[i] == 0) {
            m->xr[i] = m->lon0[j];
            m->yr[i] = m->lat0[j];
            j++;
        }
    return 0;
}

/* map_solar through the fused map (solar_fastmap_points): the points it leaves (near
 * the limb) take map_solar; the trips of the others end where they began. */
static int map_fast(rp_coordmap *m, size_t k, const double *px, const double *py,
                    double *qx, double *qy, int strict)
{
    double *gx = m->gx, *gy = gx + CM_CHUNK, *gqx = gx + 2 * CM_CHUNK, *gqy = gx + 3 * CM_CHUNK;
    solar_fastmap_points(m->fast, k, px, py, strict, qx, qy, m->fcls);
    size_t c = 0;
    for (size_t i = 0; i < k; i++)
        if (m->fcls[i] == 0) {
            gx[c] = px[i];
            gy[c] = py[i];
            c++;
        }
    if (c > 0 && map_solar(m, c, gx, gy, gqx, gqy, strict) == TESS_ENOMEM)
        return TESS_ENOMEM;
    /* Back to their slots from the last down, as map_solar does. */
    for (size_t i = k, j = c; i-- > 0;) {
        if (m->fcls[i] == 0) {
            j--;
            qx[i] = gqx[j];
            qy[i] = gqy[j];
            m->xr[i] = m->xr[j];
            m->yr[i] = m->yr[j];
        } else {
            m->xr[i] = px[i];
            m->yr[i] = py[i];
        }
    }
    return 0;
}

/* Maps n `from` pixels to `to` pixels as reproject's pixel_to_pixel_with_roundtrip does
 * (reproject/wcs_utils.py): from -> sky -> frame conversion -> to, then back
 * to -> sky -> from; a point whose round trip misses by more than one pixel on either
 * axis becomes NaN.  As in reproject, a round trip that is NaN does not reset the point,
 * unless `strict` (used for grid nodes and test points, which must be trustworthy) is
 * set.  Returns 0 or TESS_ENOMEM. */
static int map_points(rp_coordmap *m, size_t n, const double *x, const double *y,
                      double *xo, double *yo, int strict)
{
    for (size_t off = 0; off < n; off += CM_CHUNK) {
        size_t k = n - off < CM_CHUNK ? n - off : CM_CHUNK;
        const double *px = x + off, *py = y + off;
        double *qx = xo + off, *qy = yo + off;
        if (m->fast) {
            if (map_fast(m, k, px, py, qx, qy, strict) == TESS_ENOMEM)
                return TESS_ENOMEM;
        } else if (m->cls) {
            if (map_solar(m, k, px, py, qx, qy, strict) == TESS_ENOMEM)
                return TESS_ENOMEM;
        } else {
            if (skywcs_pix2sky(m->from, k, px, py, m->lon, m->lat) == TESS_ENOMEM)
                return TESS_ENOMEM;
            skywcs_convert(m->from, m->to, k, m->lon, m->lat);
            if (skywcs_sky2pix(m->to, k, m->lon, m->lat, qx, qy) == TESS_ENOMEM)
                return TESS_ENOMEM;
            if (skywcs_pix2sky(m->to, k, qx, qy, m->lon, m->lat) == TESS_ENOMEM)
                return TESS_ENOMEM;
            skywcs_convert(m->to, m->from, k, m->lon, m->lat);
            if (skywcs_sky2pix(m->from, k, m->lon, m->lat, m->xr, m->yr) == TESS_ENOMEM)
                return TESS_ENOMEM;
        }
        for (size_t i = 0; i < k; i++) {
            double dx = fabs(m->xr[i] - px[i]), dy = fabs(m->yr[i] - py[i]);
            if (trip_misses(dx, dy, strict))
                qx[i] = qy[i] = NAN;
        }
    }
    return 0;
}

int rp_coordmap_points(rp_coordmap *m, size_t n, const double *x, const double *y,
                       double *xo, double *yo)
{
    return map_points(m, n, x, y, xo, yo, 0);
}

/* ------------------------------------------------------------------------------------ */
/* The approximate grid                                                                   */

/* The lattice being mapped.  Points are named by absolute integer indices (a, b): the
 * lattice holds a in [ax, ax + w), b in [by, by + h), and index a sits at `from` pixel
 * position a + fx (fx in [0, 1)), so that point (i, j) of the caller is (ax + i, by + j).
 * Grid cells of spacing s cover indices [c s, (c + 1) s) on each axis, whatever the
 * lattice: two lattices with the same fractional offsets therefore see the same cells,
 * the same decisions and bit-identical positions, however the caller splits its work. */
typedef struct lattice {
    long ax, by, w, h;
    double fx, fy;
    double bound;
    double margin;        /* the map's acceptance margin */
    long cell_min;        /* the map's finest cell */
    double *xo, *yo;
    float *eb;
    float maxeb;          /* largest error bound given to any point */
} lattice;

/* Floor division for a possibly negative numerator and a positive divisor. */
static long floordiv(long a, long s)
{
    long q = a / s;
    return (a % s != 0 && a < 0) ? q - 1 : q;
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

/* Interpolates, with the separable weights wx (along x) and wy (along y), the nodes
 * r[j * stride + i], i, j = 0..3.  Cannot fail. */
static double eval16(const double *r, long stride, const double wx[4], const double wy[4])
{
    double s = 0.0;
    for (int i = 0; i < 4; i++) {
        const double *c = r + i;
        s += wx[i] * (wy[0] * c[0] + wy[1] * c[stride] + wy[2] * c[2 * stride]
                      + wy[3] * c[3 * stride]);
    }
    return s;
}

/* Exact transform of the points of the lattice in absolute index ranges [a0, a1) x
 * [b0, b1) (within the lattice), in batches of up to CM_CHUNK points; error bound 0.
 * Returns 0 or TESS_ENOMEM. */
static int exact_rect(rp_coordmap *m, const lattice *L, long a0, long a1, long b0, long b1)
{
    size_t width = (size_t)(a1 - a0), total = width * (size_t)(b1 - b0);
    if (total == 0)
        return 0;
    size_t cap = total < CM_CHUNK ? total : CM_CHUNK;
    double *mem = malloc(sizeof(double) * cap * 4);
    if (!mem)
        return TESS_ENOMEM;
    double *px = mem, *py = mem + cap, *qx = mem + 2 * cap, *qy = mem + 3 * cap;
    for (size_t done = 0; done < total;) {
        size_t n = total - done < cap ? total - done : cap;
        for (size_t k = 0; k < n; k++) {
            size_t t = done + k;
            px[k] = (double)(a0 + (long)(t % width)) + L->fx;
            py[k] = (double)(b0 + (long)(t / width)) + L->fy;
        }
        if (map_points(m, n, px, py, qx, qy, 0) != 0) {
            free(mem);
            return TESS_ENOMEM;
        }
        for (size_t k = 0; k < n; k++) {
            size_t t = done + k;
            size_t o = (size_t)(b0 + (long)(t / width) - L->by) * (size_t)L->w
                       + (size_t)(a0 + (long)(t % width) - L->ax);
            L->xo[o] = qx[k];
            L->yo[o] = qy[k];
            if (L->eb)
                L->eb[o] = 0.0f;
        }
        done += n;
    }
    free(mem);
    return 0;
}

/* Eight doubles (GCC and clang vector extension): one AVX-512 register, two AVX2 ones. */
typedef double cm_v8d __attribute__((vector_size(64)));

/* RP_HOT with one more clone, for CPUs with AVX-512 (x86-64-v4), where interp_cell's
 * eight-point steps take one register; the same IEEE operations lane by lane in every
 * clone (no contraction into FMAs in ISO C mode), so the same values.  Left out with
 * -DRP_NO_AVX2, as RP_HOT's clones are (simd.h). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(RP_NO_AVX2)
#define CM_HOT __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CM_HOT RP_HOT
#endif

/* Fills the lattice points of cell (cx, cy) of spacing s (clipped to the lattice) by
 * cubic interpolation of its 4 x 4 node stencil `g` (row stride `stride`, node (0, 0)
 * at cell corner minus one spacing on both axes) for x and `gy` for y, with error bound
 * `eps`.  Along each row the four column sums are formed once, then each point costs
 * two 4-term dot products.  Cannot fail. */
CM_HOT static void interp_cell(lattice *L, long s, long cx, long cy, const double *gx,
                               const double *gy, long stride, const double (*wt)[4],
                               const double *wtt, float eps)
{
    long a0 = cx * s, a1 = a0 + s, b0 = cy * s, b1 = b0 + s;
    long la0 = a0 > L->ax ? a0 : L->ax, la1 = a1 < L->ax + L->w ? a1 : L->ax + L->w;
    long lb0 = b0 > L->by ? b0 : L->by, lb1 = b1 < L->by + L->h ? b1 : L->by + L->h;
    for (long b = lb0; b < lb1; b++) {
        const double *wy = wt[b - b0];
        double colx[4], coly[4];
        for (int i = 0; i < 4; i++) {
            colx[i] = wy[0] * gx[i] + wy[1] * gx[stride + i] + wy[2] * gx[2 * stride + i]
                      + wy[3] * gx[3 * stride + i];
            coly[i] = wy[0] * gy[i] + wy[1] * gy[stride + i] + wy[2] * gy[2 * stride + i]
                      + wy[3] * gy[3 * stride + i];
        }
        size_t o = (size_t)(b - L->by) * (size_t)L->w + (size_t)(la0 - L->ax);
        double *xo = L->xo + o, *yo = L->yo + o;
        long a = la0;
        /* Eight, then four points at a time, the weights from the transposed table (each
         * lane the scalar sum, in its order). */
        for (; a + 8 <= la1; a += 8, xo += 8, yo += 8) {
            const size_t q = (size_t)(a - a0);
            cm_v8d w0, w1, w2, w3;
            memcpy(&w0, wtt + q, sizeof w0);
            memcpy(&w1, wtt + (size_t)s + q, sizeof w1);
            memcpy(&w2, wtt + 2 * (size_t)s + q, sizeof w2);
            memcpy(&w3, wtt + 3 * (size_t)s + q, sizeof w3);
            const cm_v8d vx = w0 * colx[0] + w1 * colx[1] + w2 * colx[2] + w3 * colx[3];
            const cm_v8d vy = w0 * coly[0] + w1 * coly[1] + w2 * coly[2] + w3 * coly[3];
            memcpy(xo, &vx, sizeof vx);
            memcpy(yo, &vy, sizeof vy);
        }
        for (; a + 4 <= la1; a += 4, xo += 4, yo += 4) {
            const size_t q = (size_t)(a - a0);
            rp_v4d w0, w1, w2, w3;
            RP_V4D_LOAD(w0, wtt + q);
            RP_V4D_LOAD(w1, wtt + (size_t)s + q);
            RP_V4D_LOAD(w2, wtt + 2 * (size_t)s + q);
            RP_V4D_LOAD(w3, wtt + 3 * (size_t)s + q);
            const rp_v4d vx = w0 * colx[0] + w1 * colx[1] + w2 * colx[2] + w3 * colx[3];
            const rp_v4d vy = w0 * coly[0] + w1 * coly[1] + w2 * coly[2] + w3 * coly[3];
            RP_V4D_STORE(xo, vx);
            RP_V4D_STORE(yo, vy);
        }
        for (; a < la1; a++) {
            const double *wx = wt[a - a0];
            *xo++ = wx[0] * colx[0] + wx[1] * colx[1] + wx[2] * colx[2] + wx[3] * colx[3];
            *yo++ = wx[0] * coly[0] + wx[1] * coly[1] + wx[2] * coly[2] + wx[3] * coly[3];
        }
        if (L->eb) {
            float *e = L->eb + o;
            for (long c = la0; c < la1; c++)
                *e++ = eps;
        }
    }
    if (lb1 > lb0 && la1 > la0 && eps > L->maxeb)
        L->maxeb = eps;
}

/* The indices, among a map_cells batch's test points, of cell (i, j)'s centre and bottom,
 * top, left and right edge midpoints (ncx cells a row; nc centres, nh horizontal edge
 * midpoints before the vertical ones). */
typedef struct cell_idx {
    size_t k[5];
} cell_idx;

static cell_idx cell_tests(long i, long j, long ncx, size_t nc, size_t nh)
{
    cell_idx c = {{(size_t)(j * ncx + i), nc + (size_t)(j * ncx + i),
                   nc + (size_t)((j + 1) * ncx + i), nc + nh + (size_t)(j * (ncx + 1) + i),
                   nc + nh + (size_t)(j * (ncx + 1) + i + 1)}};
    return c;
}

/* The smallest singular value of the Jacobian d(to)/d(from) estimated from a cell's
 * corner nodes g[q00], g[q00 + 1], g[q00 + stride] (spacing s), in closed form
 * (s1^2 + s2^2 = |J|_F^2, s1 s2 = |det J|); 0 when degenerate or not finite. */
static double jacobian_smin(const double *gx, const double *gy, long q00, long stride, long s)
{
    double a = (gx[q00 + 1] - gx[q00]) / (double)s;
    double b = (gx[q00 + stride] - gx[q00]) / (double)s;
    double c = (gy[q00 + 1] - gy[q00]) / (double)s;
    double d = (gy[q00 + stride] - gy[q00]) / (double)s;
    double ss = a * a + b * b + c * c + d * d, det = fabs(a * d - b * c);
    double smax = sqrt(0.5 * (ss + sqrt(fmax(ss * ss - 4.0 * det * det, 0.0))));
    double smin = smax > 0.0 ? det / smax : 0.0;
    return isfinite(smin) && smin > 0.0 ? smin : 0.0;
}

/* A finest cell that failed the cubic check (its stencil reaches across a seam or a kink
 * of the mapping, e.g. the meridian in the middle of a HEALPix polar face) may still be
 * smooth within itself: bilinear interpolation between its own 4 corner nodes (corner
 * (0, 0) at g[q00], row stride `stride`), tested at the same 5 points as the cubic
 * (the centre and edge midpoints, where the bilinear error of a smooth mapping peaks)
 * with the same criterion.  Returns the largest error measured (`to` pixels), or -1
 * when the cell fails. */
static double bilinear_check(const lattice *L, long s, const double *gx, const double *gy,
                             long q00, long stride, const double *ex, const double *ey,
                             cell_idx idx)
{
    const long c[4] = {q00, q00 + 1, q00 + stride, q00 + stride + 1};
    for (int k = 0; k < 4; k++)
        if (!isfinite(gx[c[k]]) || !isfinite(gy[c[k]]))
            return -1.0;
    double smin = jacobian_smin(gx, gy, q00, stride, s);
    if (!(smin > 0.0))
        return -1.0;
    double scale = smin < 1.0 ? smin : 1.0;
    /* (u, v) of the test points: centre, bottom, top, left, right. */
    static const double tu[5] = {0.5, 0.5, 0.5, 0.0, 1.0}, tv[5] = {0.5, 0.0, 1.0, 0.5, 0.5};
    double worst = 0.0;
    for (int p = 0; p < 5; p++) {
        double u = tu[p], v = tv[p];
        double w00 = (1 - u) * (1 - v), w10 = u * (1 - v), w01 = (1 - u) * v, w11 = u * v;
        double xi = w00 * gx[c[0]] + w10 * gx[c[1]] + w01 * gx[c[2]] + w11 * gx[c[3]];
        double yi = w00 * gy[c[0]] + w10 * gy[c[1]] + w01 * gy[c[2]] + w11 * gy[c[3]];
        double e = hypot(xi - ex[idx.k[p]], yi - ey[idx.k[p]]);
        if (!isfinite(e))
            return -1.0;
        worst = e > worst ? e : worst;
    }
    return worst / scale * L->margin <= L->bound ? worst : -1.0;
}

/* Fills the lattice points of cell (cx, cy) of spacing s (clipped to the lattice) by
 * bilinear interpolation of its corner nodes (corner (0, 0) at g[0], row stride
 * `stride`), with error bound `eps`.  Cannot fail. */
static void interp_bilinear(lattice *L, long s, long cx, long cy, const double *gx,
                            const double *gy, long stride, float eps)
{
    long a0 = cx * s, a1 = a0 + s, b0 = cy * s, b1 = b0 + s;
    long la0 = a0 > L->ax ? a0 : L->ax, la1 = a1 < L->ax + L->w ? a1 : L->ax + L->w;
    long lb0 = b0 > L->by ? b0 : L->by, lb1 = b1 < L->by + L->h ? b1 : L->by + L->h;
    for (long b = lb0; b < lb1; b++) {
        double v = (double)(b - b0) / (double)s;
        double x0 = (1 - v) * gx[0] + v * gx[stride], x1 = (1 - v) * gx[1] + v * gx[stride + 1];
        double y0 = (1 - v) * gy[0] + v * gy[stride], y1 = (1 - v) * gy[1] + v * gy[stride + 1];
        size_t o = (size_t)(b - L->by) * (size_t)L->w + (size_t)(la0 - L->ax);
        for (long a = la0; a < la1; a++, o++) {
            double u = (double)(a - a0) / (double)s;
            L->xo[o] = x0 + u * (x1 - x0);
            L->yo[o] = y0 + u * (y1 - y0);
            if (L->eb)
                L->eb[o] = eps;
        }
    }
    if (lb1 > lb0 && la1 > la0 && eps > L->maxeb)
        L->maxeb = eps;
}

/* Maps the lattice points of cells [cx0, cx1] x [cy0, cy1] (inclusive, spacing s):
 * exact transforms at the cells' nodes and test points; a cell is interpolated when its
 * 16 nodes are valid and, at its centre and edge midpoints (where the interpolation
 * error of a smooth mapping peaks), the interpolated position is within bound /
 * CM_SAFETY of the exact one, the error being taken in `to` pixels and in `from` pixels
 * (the `to` error divided by the smallest singular value of the local Jacobian),
 * whichever is larger; test points failing the strict round trip fail the cell.  A
 * failing cell is split in four (recursively) down to CM_CELL_MIN, then transformed
 * exactly.  Returns 0 or TESS_ENOMEM. */
static int map_cells(rp_coordmap *m, lattice *L, long s, long cx0, long cx1, long cy0,
                     long cy1)
{
    const long ncx = cx1 - cx0 + 1, ncy = cy1 - cy0 + 1;
    const long nnx = ncx + 3, nny = ncy + 3;
    const long h2 = s / 2;
    size_t nn = (size_t)nnx * (size_t)nny;
    /* Test points: centres (ncx * ncy), midpoints of horizontal edges (ncx * (ncy + 1)),
     * midpoints of vertical edges ((ncx + 1) * ncy). */
    size_t nc = (size_t)ncx * ncy, nh = (size_t)ncx * (ncy + 1), nv = (size_t)(ncx + 1) * ncy;
    size_t nt = nc + nh + nv, np = nn + nt;
    double *mem = malloc(sizeof(double) * np * 4 + sizeof(double) * (size_t)s * 8);
    if (!mem)
        return TESS_ENOMEM;
    double *px = mem, *py = mem + np, *qx = mem + 2 * np, *qy = mem + 3 * np;
    double (*wt)[4] = (double (*)[4])(mem + 4 * np);
    double *wtt = mem + 4 * np + 4 * (size_t)s;   /* wtt[k * s + p] = wt[p][k] */
    size_t k = 0;
    for (long j = 0; j < nny; j++)
        for (long i = 0; i < nnx; i++, k++) {
            px[k] = (double)((cx0 - 1 + i) * s) + L->fx;
            py[k] = (double)((cy0 - 1 + j) * s) + L->fy;
        }
    for (long cy = cy0; cy <= cy1; cy++)
        for (long cx = cx0; cx <= cx1; cx++, k++) {
            px[k] = (double)(cx * s + h2) + L->fx;
            py[k] = (double)(cy * s + h2) + L->fy;
        }
    for (long ky = cy0; ky <= cy1 + 1; ky++)
        for (long cx = cx0; cx <= cx1; cx++, k++) {
            px[k] = (double)(cx * s + h2) + L->fx;
            py[k] = (double)(ky * s) + L->fy;
        }
    for (long cy = cy0; cy <= cy1; cy++)
        for (long kx = cx0; kx <= cx1 + 1; kx++, k++) {
            px[k] = (double)(kx * s) + L->fx;
            py[k] = (double)(cy * s + h2) + L->fy;
        }
    int rc = map_points(m, np, px, py, qx, qy, 1);
    if (rc != 0) {
        free(mem);
        return rc;
    }
    for (long p = 0; p < s; p++) {
        lagrange4((double)p / (double)s, wt[p]);
        for (int q = 0; q < 4; q++)
            wtt[(size_t)q * (size_t)s + (size_t)p] = wt[p][q];
    }
    const double *gx = qx, *gy = qy, *ex = qx + nn, *ey = qy + nn;
    double w0[4], wh[4], w1[4];
    lagrange4(0.0, w0);
    lagrange4(0.5, wh);
    lagrange4(1.0, w1);
    const double *wxs[5] = { wh, wh, wh, w0, w1 };
    const double *wys[5] = { wh, w0, w1, wh, wh };

    for (long cy = cy0; cy <= cy1 && rc == 0; cy++) {
        for (long cx = cx0; cx <= cx1 && rc == 0; cx++) {
            long i = cx - cx0, j = cy - cy0;
            long q0 = j * nnx + i;                 /* stencil origin: node (-1, -1) */
            int good = 1;
            for (long jj = 0; jj < 4 && good; jj++)
                for (long ii = 0; ii < 4 && good; ii++) {
                    long q = q0 + jj * nnx + ii;
                    good = isfinite(gx[q]) && isfinite(gy[q]);
                }
            double worst = 0.0;
            if (good) {
                /* The local Jacobian's smallest singular value, from the corners. */
                double smin = jacobian_smin(gx, gy, q0 + nnx + 1, nnx, s);
                good = smin > 0.0;
                double scale = good && smin < 1.0 ? smin : 1.0;
                cell_idx idx = cell_tests(i, j, ncx, nc, nh);
                for (int p = 0; p < 5 && good; p++) {
                    double xi = eval16(gx + q0, nnx, wxs[p], wys[p]);
                    double yi = eval16(gy + q0, nnx, wxs[p], wys[p]);
                    double e = hypot(xi - ex[idx.k[p]], yi - ey[idx.k[p]]);
                    if (!isfinite(e))
                        good = 0;
                    else if (e > worst)
                        worst = e;
                }
                good = good && worst / scale * L->margin <= L->bound;
            }
            if (good) {
                interp_cell(L, s, cx, cy, gx + q0, gy + q0, nnx, (const double (*)[4])wt, wtt,
                            (float)(CM_EPS_FACTOR * worst + CM_EPS_FLOOR));
                continue;
            }
            long a0 = cx * s, a1 = a0 + s, b0 = cy * s, b1 = b0 + s;
            long la0 = a0 > L->ax ? a0 : L->ax, la1 = a1 < L->ax + L->w ? a1 : L->ax + L->w;
            long lb0 = b0 > L->by ? b0 : L->by, lb1 = b1 < L->by + L->h ? b1 : L->by + L->h;
            if (s / 2 >= L->cell_min) {
                long t = s / 2;
                rc = map_cells(m, L, t, floordiv(la0, t), floordiv(la1 - 1, t),
                               floordiv(lb0, t), floordiv(lb1 - 1, t));
            } else if (L->margin < CM_SAFETY &&
                       (worst = bilinear_check(L, s, gx, gy, q0 + nnx + 1, nnx, ex, ey,
                                               cell_tests(i, j, ncx, nc, nh))) >= 0.0) {
                interp_bilinear(L, s, cx, cy, gx + q0 + nnx + 1, gy + q0 + nnx + 1, nnx,
                                (float)(CM_EPS_FACTOR * worst + CM_EPS_FLOOR));
            } else {
                rc = exact_rect(m, L, la0, la1, lb0, lb1);
            }
        }
    }
    free(mem);
    return rc;
}

/* The lattice call behind both entry points: per-point bounds into err_bound (may be
 * NULL), the largest into *max_bound (may be NULL).  max_err = 0 (or not a positive
 * number): every point exactly, in batches; otherwise the grid of map_cells from
 * spacing CM_CELL_TOP. */
static int lattice_run(rp_coordmap *m, double x0, double y0, long w, long h, double max_err,
                       double *xo, double *yo, float *err_bound, double *max_bound)
{
    if (max_bound)
        *max_bound = 0.0;
    if (w <= 0 || h <= 0)
        return 0;
    lattice L;
    double gx = floor(x0), gy = floor(y0);
    L.ax = (long)gx;
    L.by = (long)gy;
    L.fx = x0 - gx;
    L.fy = y0 - gy;
    L.w = w;
    L.h = h;
    L.bound = max_err;
    L.margin = m->margin;
    L.cell_min = m->cell_min;
    L.xo = xo;
    L.yo = yo;
    L.eb = err_bound;
    L.maxeb = 0.0f;
    if (!(max_err > 0.0))
        return exact_rect(m, &L, L.ax, L.ax + w, L.by, L.by + h);
    const long s = CM_CELL_TOP;
    int rc = map_cells(m, &L, s, floordiv(L.ax, s), floordiv(L.ax + w - 1, s), floordiv(L.by, s),
                       floordiv(L.by + h - 1, s));
    if (max_bound)
        *max_bound = (double)L.maxeb;
    return rc;
}

int rp_coordmap_lattice(rp_coordmap *m, double x0, double y0, long w, long h, double max_err,
                        double *xo, double *yo, float *err_bound)
{
    return lattice_run(m, x0, y0, w, h, max_err, xo, yo, err_bound, NULL);
}

int rp_coordmap_lattice_bound(rp_coordmap *m, double x0, double y0, long w, long h,
                              double max_err, double *xo, double *yo, double *max_bound)
{
    return lattice_run(m, x0, y0, w, h, max_err, xo, yo, NULL, max_bound);
}
