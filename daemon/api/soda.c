/* SODA 1.0 sky regions: CIRCLE, POLYGON and POS parsed, and the pixel box a region selects on a celestial image. */
#include "daemon/api/soda.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int soda_read_numbers(const char *s, double *v, int max)
{
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t')
            s++;
        if (!*s)
            break;
        if (n == max)
            return -2;
        char *end;
        v[n] = strtod(s, &end);
        if (end == s || isnan(v[n]))
            return -1;
        n++;
        s = end;
        if (*s && *s != ' ' && *s != ',' && *s != '\t')
            return -1;
    }
    return n;
}

/* The unit vector of (lon, lat), degrees. */
static void unit_vector(double lon, double lat, double u[3])
{
    const double k = M_PI / 180.0;
    u[0] = cos(lat * k) * cos(lon * k);
    u[1] = cos(lat * k) * sin(lon * k);
    u[2] = sin(lat * k);
}

static void region_add(soda_region *g, double lon, double lat)
{
    if (g->n < SODA_MAX_POINTS && isfinite(lon) && isfinite(lat)) {
        g->lon[g->n] = lon;
        g->lat[g->n] = lat;
        g->n++;
    }
}

/* The edge of the circle of radius rad around (ra, dec), degrees: 180 points. */
static void ring_circle(soda_region *g, double ra, double dec, double rad)
{
    const double k = M_PI / 180.0;
    double d0 = dec * k, r = rad * k;
    for (int i = 0; i < 180; i++) {
        double t = 2.0 * M_PI * i / 180.0;
        double sd = sin(d0) * cos(r) + cos(d0) * sin(r) * cos(t);
        double lat = asin(sd > 1 ? 1 : sd < -1 ? -1 : sd);
        double lon = d0 == M_PI / 2 ? t : atan2(sin(t) * sin(r) * cos(d0),
                                                  cos(r) - sin(d0) * sd);
        region_add(g, fmod(ra + lon / k + 720.0, 360.0), lat / k);
    }
}

/* The edges of the polygon of g's vertices, each sampled along its great circle
 * (at most SODA_MAX_POINTS points in all). */
static void ring_polygon(soda_region *g)
{
    int per_edge = SODA_MAX_POINTS / g->nvert;
    if (per_edge > 64)
        per_edge = 64;
    for (int i = 0; i < g->nvert; i++) {
        const double *a = g->vu + 3 * i, *b = g->vu + 3 * ((i + 1) % g->nvert);
        double dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
        double th = acos(dot > 1 ? 1 : dot < -1 ? -1 : dot), s = sin(th);
        for (int k = 0; k < per_edge; k++) {
            double f = k / (double)per_edge, u[3];
            double wa = s > 1e-12 ? sin((1 - f) * th) / s : 1 - f;
            double wb = s > 1e-12 ? sin(f * th) / s : f;
            for (int c = 0; c < 3; c++)
                u[c] = wa * a[c] + wb * b[c];
            double lon = atan2(u[1], u[0]) * 180.0 / M_PI;
            region_add(g, lon < 0 ? lon + 360.0 : lon,
                       atan2(u[2], hypot(u[0], u[1])) * 180.0 / M_PI);
        }
    }
}

/* The edges of a range: its parallels and meridians, 64 points each. */
static void ring_range(soda_region *g)
{
    double lo0 = g->shape[0], lo1 = g->shape[1], la0 = g->shape[2], la1 = g->shape[3];
    double c[5][2] = {{lo0, la0}, {lo1, la0}, {lo1, la1}, {lo0, la1}, {lo0, la0}};
    for (int e = 0; e < 4; e++)
        for (int k = 0; k < 64; k++) {
            double f = k / 64.0;
            region_add(g, fmod(c[e][0] + f * (c[e + 1][0] - c[e][0]) + 720.0, 360.0),
                       c[e][1] + f * (c[e + 1][1] - c[e][1]));
        }
}

/* POS=RANGE's four numbers into g (see soda.h).  Returns 0 or -1 with `why`. */
static int parse_range(const double *v, const char *text, soda_region *g, char *why,
                       size_t len)
{
    static const char *const name[4] = {"ra1", "ra2", "dec1", "dec2"};
    for (int i = 0; i < 4; i++) {
        int upper = i % 2;
        if (isinf(v[i]) && (v[i] > 0) != upper) {
            snprintf(why, len, "POS=RANGE %s is %s: only the %s bound of a pair may be "
                     "%s, got '%.60s'", name[i], v[i] > 0 ? "+Inf" : "-Inf",
                     upper ? "lower" : "upper", v[i] > 0 ? "+Inf" : "-Inf", text);
            return -1;
        }
        if (i >= 2 && isfinite(v[i]) && fabs(v[i]) > 90) {
            snprintf(why, len, "POS=RANGE %s = %g lies outside -90..90 degrees, got '%.60s'",
                     name[i], v[i], text);
            return -1;
        }
    }
    if (v[0] > v[1] || v[2] > v[3]) {
        snprintf(why, len, "POS=RANGE must be ra1 ra2 dec1 dec2 with ra1 <= ra2 and dec1 <= "
                 "dec2, got '%.60s'", text);
        return -1;
    }
    double la0 = isfinite(v[2]) ? v[2] : -90, la1 = isfinite(v[3]) ? v[3] : 90;
    double width = v[1] - v[0];           /* +Inf for -Inf, or past DBL_MAX */
    double lo0 = 0, lo1 = 360;
    if (width < 360) {
        lo0 = fmod(v[0], 360.0);
        if (lo0 < 0)
            lo0 += 360.0;
        lo1 = lo0 + width;
    }
    if (lo1 - lo0 >= 360 && la0 <= -90 && la1 >= 90) {
        g->whole = 1;
        return 0;
    }
    g->kind = SODA_RANGE;
    g->shape[0] = lo0;
    g->shape[1] = lo1;
    g->shape[2] = la0;
    g->shape[3] = la1;
    ring_range(g);
    return 0;
}

int soda_region_parse(const char *circle, const char *polygon, const char *pos,
                      soda_region *g, char *why, size_t len)
{
    memset(g, 0, offsetof(soda_region, lon));
    g->n = 0;
    if (!!circle + !!polygon + !!pos > 1) {
        snprintf(why, len, "give one region: one CIRCLE, POLYGON or POS");
        return -1;
    }
    double v[2 * SODA_MAX_VERTICES];
    char shape[16] = "";
    const char *nums = NULL;
    if (circle) {
        snprintf(shape, sizeof(shape), "CIRCLE");
        nums = circle;
    } else if (polygon) {
        snprintf(shape, sizeof(shape), "POLYGON");
        nums = polygon;
    } else if (pos) {
        size_t k = strcspn(pos, " ");
        if (k >= sizeof(shape)) {
            snprintf(why, len, "POS must start with CIRCLE, RANGE or POLYGON");
            return -1;
        }
        memcpy(shape, pos, k);
        shape[k] = '\0';
        nums = pos + k;
        while (*nums == ' ')  /* quoted in messages without the separator */
            nums++;
    } else {
        return 0;
    }
    int n = soda_read_numbers(nums, v, 2 * SODA_MAX_VERTICES);
    if (n == -2 && strcasecmp(shape, "POLYGON") == 0) {
        snprintf(why, len, "POLYGON takes at most %d vertices", SODA_MAX_VERTICES);
        return -1;
    }
    if (strcasecmp(shape, "CIRCLE") == 0) {
        if (n != 3 || !isfinite(v[0]) || !isfinite(v[1]) || !(v[2] > 0) || v[2] > 180
            || fabs(v[1]) > 90) {
            snprintf(why, len, "CIRCLE must be three numbers: ra dec radius in degrees, ra "
                     "finite, dec from -90 to 90, radius above 0 and at most 180; got "
                     "'%.60s'", nums);
            return -1;
        }
        g->kind = SODA_CIRCLE;
        memcpy(g->shape, v, 3 * sizeof(double));
        ring_circle(g, v[0], v[1], v[2]);
    } else if (strcasecmp(shape, "POLYGON") == 0) {
        if (n < 6 || n % 2) {
            snprintf(why, len, "POLYGON must be at least three ra dec pairs (degrees), got "
                     "'%.60s'", nums);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (!isfinite(v[i]) || (i % 2 && fabs(v[i]) > 90)) {
                snprintf(why, len, "POLYGON vertices must be finite ra dec pairs in degrees, "
                         "dec from -90 to 90; got '%.60s'", nums);
                return -1;
            }
        g->kind = SODA_POLYGON;
        memcpy(g->vert, v, (size_t)n * sizeof(double));
        g->nvert = n / 2;
        for (int i = 0; i < g->nvert; i++)
            unit_vector(v[2 * i], v[2 * i + 1], g->vu + 3 * i);
        ring_polygon(g);
    } else if (strcasecmp(shape, "RANGE") == 0) {
        if (n != 4) {
            snprintf(why, len, "POS=RANGE must be four numbers ra1 ra2 dec1 dec2 (degrees, "
                     "-Inf and +Inf allowed as open bounds), got '%.60s'", nums);
            return -1;
        }
        return parse_range(v, nums, g, why, len);
    } else {
        snprintf(why, len, "POS must be CIRCLE, RANGE or POLYGON, got '%.20s'", shape);
        return -1;
    }
    return 0;
}

/* A circle by the angular distance to its centre; a range by its longitude (modulo
 * 360) and latitude intervals; a polygon (great-circle edges) by the winding number
 * about the position: the sum of the angles, seen from it, from each vertex to the next
 * is about 2 pi inside and about 0 outside. */
int soda_region_contains(const soda_region *g, double lon, double lat)
{
    if (g->whole)
        return 1;
    double p[3];
    unit_vector(lon, lat, p);
    if (g->kind == SODA_CIRCLE) {
        double c[3];
        unit_vector(g->shape[0], g->shape[1], c);
        double dot = p[0] * c[0] + p[1] * c[1] + p[2] * c[2];
        return dot >= cos(g->shape[2] * M_PI / 180.0);
    }
    if (g->kind == SODA_RANGE) {
        double dl = fmod(lon - g->shape[0] + 720.0, 360.0);
        return lat >= g->shape[2] && lat <= g->shape[3]
               && (dl <= g->shape[1] - g->shape[0] || g->shape[1] - g->shape[0] >= 360.0);
    }
    if (g->kind != SODA_POLYGON || g->nvert < 3)
        return 0;
    /* East and north unit vectors of the tangent plane at p. */
    double e[3] = {-p[1], p[0], 0}, ne = hypot(e[0], e[1]);
    if (ne < 1e-12) {
        e[0] = 1;
        e[1] = 0;
    } else {
        e[0] /= ne;
        e[1] /= ne;
    }
    double nth[3] = {p[1] * e[2] - p[2] * e[1], p[2] * e[0] - p[0] * e[2],
                     p[0] * e[1] - p[1] * e[0]};
    double sum = 0, prev = 0;
    for (int i = 0; i <= g->nvert; i++) {
        const double *v = g->vu + 3 * (i % g->nvert);
        double az = atan2(v[0] * e[0] + v[1] * e[1] + v[2] * e[2],
                          v[0] * nth[0] + v[1] * nth[1] + v[2] * nth[2]);
        if (i > 0) {
            double d = az - prev;
            if (d > M_PI)
                d -= 2 * M_PI;
            else if (d < -M_PI)
                d += 2 * M_PI;
            sum += d;
        }
        prev = az;
    }
    return fabs(sum) > M_PI;
}

/* Widens the box b (xmin, xmax, ymin, ymax) to hold (x, y). */
static void extend(double b[4], double x, double y)
{
    b[0] = fmin(b[0], x);
    b[1] = fmax(b[1], x);
    b[2] = fmin(b[2], y);
    b[3] = fmax(b[3], y);
}

/* Whether the pixel (x, y) of w lies in g. */
static int pixel_in(skywcs *w, sky_frame f, double eq, const soda_region *g, double x, double y)
{
    double lon, lat;
    if (skywcs_pix2sky(w, 1, &x, &y, &lon, &lat) || !isfinite(lon) || !isfinite(lat))
        return 0;
    sky_convert(f, eq, SKY_FRAME_ICRS, 2000.0, 1, &lon, &lat);
    return soda_region_contains(g, lon, lat);
}

/* The box of the region clipped to the image [-0.5, nx - 0.5] x [-0.5, ny - 0.5] from
 * its boundary ring (x, y: n points, all finite): the ring's points inside the image,
 * the crossings of its segments with the image's edges, and the image's corners that
 * lie in the region (the boundary of the clipped region is made of these pieces, so
 * its extremes are among them).  O(n): no pixel is visited. */
static void ring_box(skywcs *w, sky_frame f, double eq, const soda_region *g, long nx,
                     long ny, const double *x, const double *y, int n, double b[4])
{
    const double X[2] = {-0.5, (double)nx - 0.5}, Y[2] = {-0.5, (double)ny - 0.5};
    for (int i = 0; i < n; i++) {
        double ax = x[i], ay = y[i], cx = x[(i + 1) % n], cy = y[(i + 1) % n];
        if (ax >= X[0] && ax <= X[1] && ay >= Y[0] && ay <= Y[1])
            extend(b, ax, ay);
        for (int k = 0; k < 2; k++) {
            if ((ax - X[k]) * (cx - X[k]) < 0) {
                double yy = ay + (X[k] - ax) / (cx - ax) * (cy - ay);
                if (yy >= Y[0] && yy <= Y[1])
                    extend(b, X[k], yy);
            }
            if ((ay - Y[k]) * (cy - Y[k]) < 0) {
                double xx = ax + (Y[k] - ay) / (cy - ay) * (cx - ax);
                if (xx >= X[0] && xx <= X[1])
                    extend(b, xx, Y[k]);
            }
        }
    }
    for (int k = 0; k < 4; k++)
        if (pixel_in(w, f, eq, g, X[k & 1], Y[k >> 1]))
            extend(b, X[k & 1], Y[k >> 1]);
}

/* The box from pixel centres on a grid (see soda.h), widened by the grid step. */
static int grid_box(skywcs *w, sky_frame f, double eq, const soda_region *g, long nx,
                    long ny, const volatile int *cancel, double b[4])
{
    long big = nx > ny ? nx : ny;
    long step = (big + 511) / 512;
    long cost = g->kind == SODA_POLYGON ? g->nvert : 1;
    while (((nx - 1) / step + 2) * ((ny - 1) / step + 2) * cost > SODA_GRID_TESTS)
        step++;
    long sx = (nx - 1) / step + 2, sy = (ny - 1) / step + 2;
    size_t n = (size_t)sx * (size_t)sy;
    double *x = malloc(sizeof(double) * n * 4);
    if (!x)
        return TESS_ENOMEM;
    double *y = x + n, *lon = y + n, *lat = lon + n;
    for (long j = 0; j < sy; j++)
        for (long i = 0; i < sx; i++) {
            x[j * sx + i] = (double)(i * step < nx ? i * step : nx - 1);
            y[j * sx + i] = (double)(j * step < ny ? j * step : ny - 1);
        }
    int rc = skywcs_pix2sky(w, n, x, y, lon, lat);
    if (rc) {
        free(x);
        return rc == TESS_ENOMEM ? rc : 1;
    }
    sky_convert(f, eq, SKY_FRAME_ICRS, 2000.0, n, lon, lat);
    for (long j = 0; j < sy; j++) {
        if (cancel && *cancel) {
            free(x);
            return TESS_ECANCELED;
        }
        for (size_t k = (size_t)(j * sx); k < (size_t)((j + 1) * sx); k++)
            if (isfinite(lon[k]) && isfinite(lat[k]) && soda_region_contains(g, lon[k], lat[k])) {
                extend(b, x[k] - (double)(step - 1), y[k] - (double)(step - 1));
                extend(b, x[k] + (double)(step - 1), y[k] + (double)(step - 1));
            }
    }
    free(x);
    return 0;
}

int soda_region_box(skywcs *w, long nx, long ny, const soda_region *g,
                    const volatile int *cancel, long box[4])
{
    if (g->whole) {
        box[0] = box[2] = 0;
        box[1] = nx;
        box[3] = ny;
        return 0;
    }
    if (g->n < 3)
        return 1;
    double *x = malloc(sizeof(double) * (size_t)g->n * 4);
    if (!x)
        return TESS_ENOMEM;
    double *y = x + g->n, *lon = y + g->n, *lat = lon + g->n;
    memcpy(lon, g->lon, sizeof(double) * (size_t)g->n);
    memcpy(lat, g->lat, sizeof(double) * (size_t)g->n);
    double eq = 0;
    sky_frame f = skywcs_frame(w, &eq);
    sky_convert(SKY_FRAME_ICRS, 2000.0, f, eq, (size_t)g->n, lon, lat);
    int rc = skywcs_sky2pix(w, (size_t)g->n, lon, lat, x, y);
    double b[4] = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    int lost = 0;
    for (int i = 0; rc == 0 && i < g->n; i++)
        lost |= !isfinite(x[i]) || !isfinite(y[i]);
    if (rc == 0 && !lost)
        ring_box(w, f, eq, g, nx, ny, x, y, g->n, b);
    free(x);
    if (rc)
        return rc == TESS_ENOMEM ? rc : 1;
    /* Part of the boundary lies off the image's projection (beyond a zenithal
     * projection's hemisphere, say): the box comes from the image's pixels. */
    if (lost && (rc = grid_box(w, f, eq, g, nx, ny, cancel, b)) != 0)
        return rc;
    if (!(b[0] <= b[1]) || !(b[2] <= b[3]))
        return 1;
    /* Pixel i covers [i - 0.5, i + 0.5). */
    double bx0 = fmax(floor(b[0] + 0.5), 0), bx1 = fmin(floor(b[1] + 0.5) + 1, (double)nx);
    double by0 = fmax(floor(b[2] + 0.5), 0), by1 = fmin(floor(b[3] + 0.5) + 1, (double)ny);
    if (bx0 >= bx1 || by0 >= by1)
        return 1;
    box[0] = (long)bx0;
    box[1] = (long)bx1;
    box[2] = (long)by0;
    box[3] = (long)by1;
    return 0;
}
