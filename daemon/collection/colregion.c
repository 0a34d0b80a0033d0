/* Regions of the sky (colregion.h): made from numbers, tested against footprints. */
#include "daemon/collection/colregion.h"
#include "daemon/collection/collection.h"

#include <math.h>
#include <string.h>

static int valid_point(double ra, double dec)
{
    return ra >= 0 && ra <= 360 && dec >= -90 && dec <= 90;
}

static const char *make_range(col_region *g, const double *v)
{
    if (!(v[0] <= v[1]) || !(v[2] <= v[3]))
        return "a range takes ra_min ra_max dec_min dec_max with ra_min <= ra_max and "
               "dec_min <= dec_max (degrees; -Inf and +Inf allowed)";
    for (int k = 0; k < 4; k++)   /* DALI: finite bounds lie on the sky */
        if (isfinite(v[k]) && (k < 2 ? v[k] < 0 || v[k] > 360 : v[k] < -90 || v[k] > 90))
            return "a range's ra bounds lie within 0..360 and its dec bounds within -90..90 "
                   "(degrees; -Inf and +Inf allowed)";
    g->range = 1;
    g->lo[0] = fmax(v[0], 0);
    g->hi[0] = fmin(v[1], 360);
    g->lo[1] = fmax(v[2], -90);
    g->hi[1] = fmin(v[3], 90);
    if (g->lo[0] > 360 || g->hi[0] < 0 || g->lo[1] > 90 || g->hi[1] < -90)
        return "the range lies off the sky";
    g->all = g->hi[0] - g->lo[0] >= 180 || g->hi[1] - g->lo[1] >= 90;
    int n = 0;
    for (int side = 0; side < 4; side++)
        for (int k = 0; k < COL_RANGE_STEPS; k++) {
            double f = (double)k / COL_RANGE_STEPS;
            double ra = side == 0 ? g->lo[0] + f * (g->hi[0] - g->lo[0])
                      : side == 1 ? g->hi[0]
                      : side == 2 ? g->hi[0] - f * (g->hi[0] - g->lo[0]) : g->lo[0];
            double dec = side == 0 ? g->lo[1]
                       : side == 1 ? g->lo[1] + f * (g->hi[1] - g->lo[1])
                       : side == 2 ? g->hi[1] : g->hi[1] - f * (g->hi[1] - g->lo[1]);
            g->poly[2 * n] = ra;
            g->poly[2 * n + 1] = dec;
            n++;
        }
    g->n = n;
    return NULL;
}

static void unit_vector(double ra, double dec, double u[3])
{
    double a = ra * (M_PI / 180), d = dec * (M_PI / 180);
    u[0] = cos(d) * cos(a);
    u[1] = cos(d) * sin(a);
    u[2] = sin(d);
}

/* Whether the n vertices (ra, dec pairs, degrees) enclose no area: all of them on one
 * great circle (coincident and antipodal points included), so the polygon has no inside
 * (DALI 1.1 section 3.3.7: a polygon is the area its edges enclose).  The plane is the one
 * through the origin and the two vertices furthest from parallel; a vertex more than
 * 1e-9 rad (0.2 mas) from it gives the polygon an area. */
static int polygon_degenerate(const double *v, int n)
{
    double u[COL_POLY_MAX][3], best = 0, nrm[3] = { 0, 0, 0 };
    for (int i = 0; i < n; i++)
        unit_vector(v[2 * i], v[2 * i + 1], u[i]);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double c[3] = { u[i][1] * u[j][2] - u[i][2] * u[j][1],
                            u[i][2] * u[j][0] - u[i][0] * u[j][2],
                            u[i][0] * u[j][1] - u[i][1] * u[j][0] };
            double len = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
            if (len > best) {
                best = len;
                for (int k = 0; k < 3; k++)
                    nrm[k] = c[k] / len;
            }
        }
    if (best < 1e-9)
        return 1;
    for (int i = 0; i < n; i++)
        if (fabs(nrm[0] * u[i][0] + nrm[1] * u[i][1] + nrm[2] * u[i][2]) > 1e-9)
            return 0;
    return 1;
}

const char *col_region_make(col_region *g, col_region_kind k, const double *v, int n)
{
    memset(g, 0, sizeof(*g));
    switch (k) {
    case COL_REGION_CIRCLE:
        if (n != 3 || !valid_point(v[0], v[1]) || !(v[2] > 0) || v[2] > 180)
            return "a circle takes ra dec radius (degrees, 0 <= ra <= 360, |dec| <= 90, "
                   "0 < radius <= 180)";
        g->circle = 1;
        g->ra = v[0];
        g->dec = v[1];
        g->r = v[2];
        return NULL;
    case COL_REGION_RANGE:
        if (n != 4)
            return "a range takes ra_min ra_max dec_min dec_max (degrees)";
        return make_range(g, v);
    case COL_REGION_POLYGON:
        if (n < 6 || n > 2 * COL_POLY_MAX || n % 2)
            return "a polygon takes 3 to 32 vertices ra dec ... (degrees)";
        for (int i = 0; i < n; i += 2)
            if (!valid_point(v[i], v[i + 1]))
                return "polygon vertices need 0 <= ra <= 360 and |dec| <= 90";
        if (polygon_degenerate(v, n / 2))
            return "the polygon's vertices lie on one great circle: it encloses no area";
        memcpy(g->poly, v, (size_t)n * sizeof(double));
        g->n = n / 2;
        return NULL;
    }
    return "unknown region";
}

static int in_range(const col_region *g, double ra, double dec)
{
    return ra >= g->lo[0] && ra <= g->hi[0] && dec >= g->lo[1] && dec <= g->hi[1];
}

int col_region_overlaps(const col_region *g, const col_member *m)
{
    if (g->circle)
        return col_distance(m->ra, m->dec, g->ra, g->dec) <= m->radius + g->r &&
               col_overlaps_circle(m->poly, 4, g->ra, g->dec, g->r);
    if (g->range) {
        if (in_range(g, m->ra, m->dec))
            return 1;
        for (int k = 0; k < 4; k++)
            if (in_range(g, m->poly[2 * k], m->poly[2 * k + 1]))
                return 1;
        return !g->all && col_overlaps_polygon(m->poly, 4, g->poly, g->n);
    }
    return col_overlaps_polygon(m->poly, 4, g->poly, g->n);
}
