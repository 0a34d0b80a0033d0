/* Mosaic geometry: the automatic target grid (mos_auto_target), the bounding box of an input on the target (mos_bbox) and the outlines, bands and sizes that the plan and the reprojection share. */
#include "engine/mosaic/mosaic_int.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/base/byteswap.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ */
/* Geometry                                                                               */

/* n points of the outline of the rectangle [x0, x1] x [y0, y1], edges sampled every
 * `step` (at least 16 and at most OUTLINE_MAX intervals an edge), in order round the
 * outline.  *px, *py malloc'd. */
long mos_outline(double x0, double y0, double x1, double y1, double step, double **px,
                    double **py)
{
    double fnx = ceil((x1 - x0) / step), fny = ceil((y1 - y0) / step);
    long nx = fnx < OUTLINE_MAX ? (long)fnx : OUTLINE_MAX;
    long ny = fny < OUTLINE_MAX ? (long)fny : OUTLINE_MAX;
    if (nx < 16)
        nx = 16;
    if (ny < 16)
        ny = 16;
    long n = 2 * (nx + ny);
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    if (!x || !y) {
        free(x);
        free(y);
        return -1;
    }
    long k = 0;
    for (long i = 0; i < nx; i++, k++) {
        x[k] = x0 + (x1 - x0) * (double)i / (double)nx;
        y[k] = y0;
    }
    for (long i = 0; i < ny; i++, k++) {
        x[k] = x1;
        y[k] = y0 + (y1 - y0) * (double)i / (double)ny;
    }
    for (long i = 0; i < nx; i++, k++) {
        x[k] = x1 - (x1 - x0) * (double)i / (double)nx;
        y[k] = y1;
    }
    for (long i = 0; i < ny; i++, k++) {
        x[k] = x0;
        y[k] = y1 - (y1 - y0) * (double)i / (double)ny;
    }
    *px = x;
    *py = y;
    return n;
}

/* Transforms n pixel positions of `from` to pixel positions of `to` in place (frames
 * converted).  Returns 0 or a TESS_E* code. */
int mos_pix2pix(skywcs *from, skywcs *to, long n, double *x, double *y)
{
    double *lon = malloc(sizeof(double) * (size_t)n), *lat = malloc(sizeof(double) * (size_t)n);
    int rc = TESS_ENOMEM;
    if (lon && lat) {
        rc = skywcs_pix2sky(from, (size_t)n, x, y, lon, lat);
        if (rc == 0) {
            skywcs_convert(from, to, (size_t)n, lon, lat);
            rc = skywcs_sky2pix(to, (size_t)n, lon, lat, x, y);
        }
    }
    free(lon);
    free(lat);
    return rc;
}

/* The box of the pixel positions (x, y) on an nx x ny grid, padded by `pad` and clipped;
 * the whole grid when some position is NaN or consecutive points jump by more than
 * `jump`; w = h = -1 when every position is NaN.  box = {x0, y0, w, h}. */
void mos_points_box(long n, const double *x, const double *y, long nx, long ny, long pad,
                       double jump, long box[4])
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int whole = 0;
    for (long k = 0; k < n && !whole; k++) {
        if (!isfinite(x[k]) || !isfinite(y[k])) {
            whole = 1;   /* 1: no point maps; 2: some do */
            for (long q = 0; q < n; q++)
                if (isfinite(x[q]) && isfinite(y[q]))
                    whole = 2;
            break;
        }
        long p = k ? k - 1 : n - 1;
        if (isfinite(x[p]) && isfinite(y[p])
            && (fabs(x[k] - x[p]) > jump || fabs(y[k] - y[p]) > jump))
            whole = 2;
        xmin = fmin(xmin, x[k]);
        xmax = fmax(xmax, x[k]);
        ymin = fmin(ymin, y[k]);
        ymax = fmax(ymax, y[k]);
    }
    if (whole == 1) {
        /* No point of the outline maps: the two grids may still overlap when one holds
         * the other whole; the caller checks. */
        box[0] = box[1] = 0;
        box[2] = box[3] = -1;
        return;
    }
    if (whole) {
        box[0] = 0;
        box[1] = 0;
        box[2] = nx;
        box[3] = ny;
        return;
    }
    /* Keep the arithmetic in doubles until clipped: positions may be far off the grid. */
    double fx0 = floor(xmin) - (double)pad, fx1 = ceil(xmax) + 1.0 + (double)pad;
    double fy0 = floor(ymin) - (double)pad, fy1 = ceil(ymax) + 1.0 + (double)pad;
    fx0 = fmax(fx0, 0.0);
    fy0 = fmax(fy0, 0.0);
    fx1 = fmin(fx1, (double)nx);
    fy1 = fmin(fy1, (double)ny);
    if (fx1 <= fx0 || fy1 <= fy0) {
        box[0] = box[1] = box[2] = box[3] = 0;
        return;
    }
    box[0] = (long)fx0;
    box[1] = (long)fy0;
    box[2] = (long)fx1 - box[0];
    box[3] = (long)fy1 - box[1];
}

int mos_bbox(skywcs *in, long nx, long ny, skywcs *out, long out_nx, long out_ny, long box[4])
{
    double *x, *y;
    long n = mos_outline(-0.5, -0.5, (double)nx - 0.5, (double)ny - 0.5, 8.0, &x, &y);
    if (n < 0)
        return TESS_ENOMEM;
    int rc = mos_pix2pix(in, out, n, x, y);
    if (rc == 0)
        mos_points_box(n, x, y, out_nx, out_ny, 1,
                       0.25 * (double)(out_nx > out_ny ? out_nx : out_ny), box);
    free(x);
    free(y);
    if (rc == 0 && box[2] < 0) {
        /* The outline has no position on the output: either far apart, or the output
         * lies inside the input (whose edges are then beyond the output's projection):
         * test the output's centre. */
        double cx = 0.5 * (double)(out_nx - 1), cy = 0.5 * (double)(out_ny - 1);
        rc = mos_pix2pix(out, in, 1, &cx, &cy);
        int in_input = rc == 0 && cx >= -0.5 && cy >= -0.5 && cx <= (double)nx - 0.5
                       && cy <= (double)ny - 0.5;
        box[0] = box[1] = 0;
        box[2] = in_input ? out_nx : 0;
        box[3] = in_input ? out_ny : 0;
    }
    return rc;
}

/* Bytes a reprojection block holds per input pixel it reads: the float32 pixels, and for
 * bicubic the spline coefficients (double) and three byte masks (engine/sky/kernels.c). */
double mos_input_bpp(rp_method method)
{
    return method == RP_BICUBIC ? 15.0 : 4.0;
}

/* Crops of the slabs of s's box: rows [sy[k], sy[k + 1]) of the box (0-based from its
 * top) as boxes {x0, y0, w, h} on the input, estimated from the slab edges: the ns + 1
 * row boundaries sampled 2 x EST_EDGE times across the box and the sides at each slab's
 * middle, mapped onto the input once (adjacent slabs share a boundary), each slab's
 * points boxed as points_box does (the whole input when some point does not map or the
 * outline jumps) and padded by 4 pixels and by twice the largest distance of a mapped
 * midpoint from the chord of its neighbours (how far the mapped edges bend between
 * samples, which bounds what the finer outline of run_reproject adds).  Returns 0 or
 * TESS_ENOMEM. */
static int slab_crops(const mosaic *m, const src *s, long ns, const long *sy, long (*sc)[4])
{
    const long ne = 2 * EST_EDGE + 1, nl = ns + 1, npt = nl * ne + 2 * ns;
    double *x = malloc(sizeof(double) * (size_t)npt), *y = malloc(sizeof(double) * (size_t)npt);
    double *ox = malloc(sizeof(double) * (size_t)(2 * ne + 2));
    double *oy = malloc(sizeof(double) * (size_t)(2 * ne + 2));
    if (!x || !y || !ox || !oy) {
        free(x);
        free(y);
        free(ox);
        free(oy);
        return TESS_ENOMEM;
    }
    const double x0 = (double)s->box[0] - 0.5, w = (double)s->box[2];
    const double top = (double)s->box[1] - 0.5;
    for (long l = 0; l < nl; l++)
        for (long j = 0; j < ne; j++) {
            x[l * ne + j] = x0 + w * (double)j / (double)(ne - 1);
            y[l * ne + j] = top + (double)sy[l];
        }
    for (long k = 0; k < ns; k++)
        for (int side = 0; side < 2; side++) {
            x[nl * ne + 2 * k + side] = side ? x0 + w : x0;
            y[nl * ne + 2 * k + side] = top + 0.5 * (double)(sy[k] + sy[k + 1]);
        }
    int mapped = mos_pix2pix(m->tcel, s->cel, npt, x, y) == 0;
    const double most = (double)s->nx + (double)s->ny;
    const double jump = 0.25 * (double)(s->nx > s->ny ? s->nx : s->ny);
    for (long k = 0; k < ns; k++) {
        long *c = sc[k];
        c[0] = c[1] = 0;
        c[2] = s->nx;
        c[3] = s->ny;
        if (!mapped)
            continue;
        /* The slab's outline in order: its top boundary, right middle, bottom boundary
         * backwards, left middle. */
        const double *tx = x + k * ne, *ty = y + k * ne;
        const double *bx = x + (k + 1) * ne, *by = y + (k + 1) * ne;
        long n = 0;
        for (long j = 0; j < ne; j++, n++) {
            ox[n] = tx[j];
            oy[n] = ty[j];
        }
        ox[n] = x[nl * ne + 2 * k + 1];
        oy[n++] = y[nl * ne + 2 * k + 1];
        for (long j = ne - 1; j >= 0; j--, n++) {
            ox[n] = bx[j];
            oy[n] = by[j];
        }
        ox[n] = x[nl * ne + 2 * k];
        oy[n++] = y[nl * ne + 2 * k];
        /* Midpoints: every other sample of the boundaries; the sides' middles. */
        double bend = 0.0;
        for (long q = 1; q < n; q += 2) {
            long r = q + 1 < n ? q + 1 : 0;
            if (isfinite(ox[q]) && isfinite(oy[q]) && isfinite(ox[q - 1]) && isfinite(oy[q - 1])
                && isfinite(ox[r]) && isfinite(oy[r]))
                bend = fmax(bend, fmax(fabs(ox[q] - 0.5 * (ox[q - 1] + ox[r])),
                                       fabs(oy[q] - 0.5 * (oy[q - 1] + oy[r]))));
        }
        long pad = 4 + (long)ceil(fmin(2.0 * bend, most));
        mos_points_box(n, ox, oy, s->nx, s->ny, pad, jump, c);
        if (c[2] < 0) {
            c[0] = c[1] = 0;
            c[2] = s->nx;
            c[3] = s->ny;
        }
    }
    free(x);
    free(y);
    free(ox);
    free(oy);
    return 0;
}

/* The input pixels the largest band of `r` rows reads by the slab estimate (a band lies in
 * the slabs it touches, so its pixels in the union of their crops). */
static double worst_band(const src *s, long ns, const long *sy, long (*sc)[4], long r)
{
    long bh = s->box[3], k0 = 0;
    double worst = 0.0;
    for (long r0 = 0; r0 < bh; r0 += r) {
        long r1 = r0 + r < bh ? r0 + r : bh;
        while (sy[k0 + 1] <= r0)
            k0++;
        long bx0 = LONG_MAX, by0 = LONG_MAX, bx1 = -1, by1 = -1;
        for (long k = k0; k < ns && sy[k] < r1; k++) {
            if (sc[k][2] <= 0 || sc[k][3] <= 0)
                continue;
            bx0 = sc[k][0] < bx0 ? sc[k][0] : bx0;
            by0 = sc[k][1] < by0 ? sc[k][1] : by0;
            bx1 = sc[k][0] + sc[k][2] > bx1 ? sc[k][0] + sc[k][2] : bx1;
            by1 = sc[k][1] + sc[k][3] > by1 ? sc[k][1] + sc[k][3] : by1;
        }
        if (bx1 > bx0 && by1 > by0)
            worst = fmax(worst, (double)(bx1 - bx0) * (double)(by1 - by0));
    }
    return worst;
}

/* Bands of a large input (over BAND_INPUT_BYTES as float32): *rows halved until the
 * largest band reads at most BAND_INPUT_BYTES by the slab estimate, or is one row.  The
 * slabs start at EST_SLABS_MIN and are made four times finer while the bands are
 * shorter than two slabs (up to EST_SLABS_MAX or one row each, and while the plan's
 * EST_SLABS_TOTAL allows), so the cost follows the bands needed.  Sets s->crop_px (the
 * largest band's input pixels) and s->rows_cut.  Returns 0 or TESS_ENOMEM. */
int mos_fit_band_rows(mosaic *m, src *s, long *rows)
{
    long bh = s->box[3], r = *rows, ns = bh < EST_SLABS_MIN ? bh : EST_SLABS_MIN;
    double worst = 0.0;
    for (;;) {
        long (*sc)[4] = malloc(sizeof *sc * (size_t)ns);
        long *sy = malloc(sizeof(long) * (size_t)(ns + 1));
        int rc = sc && sy ? 0 : TESS_ENOMEM;
        for (long k = 0; rc == 0 && k <= ns; k++)
            sy[k] = (long)((long long)k * bh / ns);
        if (rc == 0)
            rc = slab_crops(m, s, ns, sy, sc);
        r = *rows;
        for (; rc == 0; r = (r + 1) / 2) {
            worst = worst_band(s, ns, sy, sc, r);
            if (worst * 4.0 <= BAND_INPUT_BYTES || r == 1)
                break;
        }
        free(sc);
        free(sy);
        if (rc)
            return rc;
        long finer = ns * 4 < EST_SLABS_MAX ? ns * 4 : EST_SLABS_MAX;
        if (finer > bh)
            finer = bh;
        if (r * ns >= 2 * bh || finer <= ns || m->est_slabs + finer > EST_SLABS_TOTAL)
            break;
        m->est_slabs += finer;
        ns = finer;
    }
    s->rows_cut = r != *rows;
    s->crop_px = worst;
    *rows = r;
    return 0;
}

/* Unit vector of (lon, lat) degrees. */
static void unit(double lon, double lat, double v[3])
{
    double a = lon * M_PI / 180.0, b = lat * M_PI / 180.0;
    v[0] = cos(b) * cos(a);
    v[1] = cos(b) * sin(a);
    v[2] = sin(b);
}

static double sep_deg(double l1, double b1, double l2, double b2)
{
    double u[3], v[3];
    unit(l1, b1, u);
    unit(l2, b2, v);
    double c[3] = { u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2],
                    u[0] * v[1] - u[1] * v[0] };
    double s = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
    double d = u[0] * v[0] + u[1] * v[1] + u[2] * v[2];
    return atan2(s, d) * 180.0 / M_PI;
}

/* The WCS cards of a frame and projection, CRVAL, CRPIX, square pixels of `cdelt`. */
static void frame_cards(fitscard_list *b, sky_frame frame, const solar_obs *sol,
                        const char *proj, double crval1, double crval2, double crpix1,
                        double crpix2, double cdelt)
{
    /* The CTYPE prefixes: "RA/DEC", "GLON/GLAT", ... "CRLN/CRLT" (RA and DEC padded). */
    const char *ax = sky_frame_axes(frame);
    char lon[8] = "RA--", lat[8] = "DEC-";
    if (strcmp(ax, "RA/DEC") != 0 && strlen(ax) == 9) {
        snprintf(lon, sizeof lon, "%.4s", ax);
        snprintf(lat, sizeof lat, "%.4s", ax + 5);
    }
    char t[16];
    fitscard_list_int(b, "WCSAXES", 2, "Number of coordinate axes");
    snprintf(t, sizeof t, "%s-%.3s", lon, proj);
    mos_add_str(b, "CTYPE1", t, NULL);
    snprintf(t, sizeof t, "%s-%.3s", lat, proj);
    mos_add_str(b, "CTYPE2", t, NULL);
    fitscard_list_real(b, "CRVAL1", crval1, 14, "[deg] Coordinate value at reference point");
    fitscard_list_real(b, "CRVAL2", crval2, 14, "[deg] Coordinate value at reference point");
    fitscard_list_real(b, "CRPIX1", crpix1, 14, "Pixel coordinate of reference point");
    fitscard_list_real(b, "CRPIX2", crpix2, 14, "Pixel coordinate of reference point");
    fitscard_list_real(b, "CDELT1", -cdelt, 14, "[deg] Coordinate increment at reference point");
    fitscard_list_real(b, "CDELT2", cdelt, 14, "[deg] Coordinate increment at reference point");
    mos_add_str(b, "CUNIT1", "deg", NULL);
    mos_add_str(b, "CUNIT2", "deg", NULL);
    if (frame == SKY_FRAME_ICRS) {
        mos_add_str(b, "RADESYS", "ICRS", NULL);
    } else if (frame == SKY_FRAME_FK5) {
        mos_add_str(b, "RADESYS", "FK5", NULL);
        fitscard_list_real(b, "EQUINOX", 2000.0, 14, NULL);
    } else if (frame == SKY_FRAME_FK4) {
        mos_add_str(b, "RADESYS", "FK4", NULL);
        fitscard_list_real(b, "EQUINOX", 1950.0, 14, NULL);
    } else if (frame == SKY_FRAME_ECLIPTIC) {
        fitscard_list_real(b, "EQUINOX", 2000.0, 14, NULL);
    } else if (sol) {
        /* A solar target is seen by the first input's observer (skywcs_parse reads these). */
        fitscard_list_real(b, "RSUN_REF", sol->rsun, FITSCARD_EXACT, NULL);
        if (sol->known) {
            fitscard_list_real(b, "HGLN_OBS", sol->lon, FITSCARD_EXACT, NULL);
            fitscard_list_real(b, "HGLT_OBS", sol->lat, FITSCARD_EXACT, NULL);
            fitscard_list_real(b, "DSUN_OBS", sol->dist, FITSCARD_EXACT, NULL);
            if (sol->has_carr)
                fitscard_list_real(b, "CRLN_OBS", sol->lon + sol->carr_off, FITSCARD_EXACT,
                                   NULL);
        }
        if (sol->date[0])
            mos_add_str(b, "DATE-OBS", sol->date, NULL);
    }
}

int mos_auto_target(int n, skywcs *const *wcs, const long *nx, const long *ny, sky_frame frame,
                    const char *proj, char **cards, int *nkeys, long *out_nx, long *out_ny,
                    char *err, size_t errlen)
{
    *cards = NULL;
    *nkeys = 0;
    if (n < 1) {
        tess_seterr(err, errlen, "no input");
        return TESS_EINVAL;
    }
    if (!proj || !*proj)
        proj = "TAN";
    if (strlen(proj) != 3) {
        tess_seterr(err, errlen, "projection '%s' is not a three-letter code", proj);
        return TESS_EINVAL;
    }
    double ef = 0.0;
    if (frame == SKY_FRAME_NONE)
        frame = skywcs_frame(wcs[0], NULL);
    if (frame == SKY_FRAME_NONE) {
        tess_seterr(err, errlen, "the first input has no celestial frame: give one");
        return TESS_EINVAL;
    }
    /* Solar inputs make a solar target seen by the first input's observer; the frames of
     * the Sun and of the sky do not mix. */
    const solar_obs *sol0 = skywcs_solar(wcs[0]);
    for (int k = 0; k < n; k++) {
        sky_frame fk = skywcs_frame(wcs[k], NULL);
        if (sky_frame_is_solar(fk) != sky_frame_is_solar(frame) ||
            (sky_frame_is_solar(frame) && !sol0)) {
            tess_seterr(err, errlen, "input %d is in the %s frame %s, the target in the %s "
                        "frame %s: solar and sky frames do not mix", k + 1,
                        sky_frame_is_solar(fk) ? "solar" : "sky", sky_frame_name(fk),
                        sky_frame_is_solar(frame) ? "solar" : "sky", sky_frame_name(frame));
            return TESS_EINVAL;
        }
    }
    ef = frame == SKY_FRAME_FK4 ? 1950.0 : frame == SKY_FRAME_FK5 || frame == SKY_FRAME_ECLIPTIC
                                               ? 2000.0 : 0.0;
    double sum[3] = { 0, 0, 0 }, res = INFINITY;
    double *clon = malloc(sizeof(double) * 4 * (size_t)n);
    double *clat = malloc(sizeof(double) * 4 * (size_t)n);
    int rc = 0;
    if (!clon || !clat) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        skywcs_summary s;
        skywcs_describe(wcs[k], &s);
        double cx = s.crpix[0] - 1.0, cy = s.crpix[1] - 1.0;
        /* The reference pixel, the four corners, then points at +-8 and +-16 pixels
         * along each axis: the pixel scale is extrapolated from the two baselines
         * (Richardson: (4 s(8) - s(16)) / 3 cancels the projection's second-order
         * term), long enough that the rounding of the sky positions does not count. */
        double px[13] = { cx, -0.5, (double)nx[k] - 0.5, (double)nx[k] - 0.5, -0.5,
                          cx - 8, cx + 8, cx - 16, cx + 16, cx, cx, cx, cx };
        double py[13] = { cy, -0.5, -0.5, (double)ny[k] - 0.5, (double)ny[k] - 0.5,
                          cy, cy, cy, cy, cy - 8, cy + 8, cy - 16, cy + 16 };
        double lon[13], lat[13], ek = 0.0;
        sky_frame fk = skywcs_frame(wcs[k], &ek);
        rc = skywcs_pix2sky(wcs[k], 13, px, py, lon, lat);
        if (rc) {
            tess_seterr(err, errlen, "input %d: no 2-D celestial WCS", k + 1);
            goto done;
        }
        for (int i = 0; i < 13; i++)
            if (!isfinite(lon[i]) || !isfinite(lat[i])) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "input %d: a corner or the reference pixel has no "
                            "sky position", k + 1);
                goto done;
            }
        double sx = (4.0 * sep_deg(lon[5], lat[5], lon[6], lat[6]) / 16.0
                     - sep_deg(lon[7], lat[7], lon[8], lat[8]) / 32.0) / 3.0;
        double sy = (4.0 * sep_deg(lon[9], lat[9], lon[10], lat[10]) / 16.0
                     - sep_deg(lon[11], lat[11], lon[12], lat[12]) / 32.0) / 3.0;
        res = fmin(res, fmin(sx, sy));
        if (sol0)
            solar_convert(fk, skywcs_solar(wcs[k]), frame, sol0, SOLAR_SPHERE, NULL, 5, lon,
                          lat);
        else
            sky_convert(fk, ek, frame, ef, 5, lon, lat);
        double v[3];
        unit(lon[0], lat[0], v);
        for (int i = 0; i < 3; i++)
            sum[i] += v[i];
        for (int i = 0; i < 4; i++) {
            clon[4 * k + i] = lon[1 + i];
            clat[4 * k + i] = lat[1 + i];
        }
    }
    double norm = sqrt(sum[0] * sum[0] + sum[1] * sum[1] + sum[2] * sum[2]);
    if (!(norm > 0.0) || !(res > 0.0) || !isfinite(res)) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the inputs' centres cancel out or a pixel scale is 0");
        goto done;
    }
    double lon0 = atan2(sum[1], sum[0]) * 180.0 / M_PI;
    double lat0 = asin(fmax(-1.0, fmin(1.0, sum[2] / norm))) * 180.0 / M_PI;
    if (lon0 < 0.0)
        lon0 += 360.0;
    if (lon0 >= 360.0)
        lon0 -= 360.0;
    fitscard_list b;
    fitscard_list_init(&b, MOS_MAX_CARDS);
    frame_cards(&b, frame, sol0, proj, lon0, lat0, 1.0, 1.0, res);
    skywcs *w = NULL;
    if (b.rc) {
        rc = b.rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "bad target WCS values");
        fitscard_list_release(&b);
        goto done;
    }
    rc = skywcs_parse(b.cards, b.n, &w, err, errlen);
    fitscard_list_release(&b);
    if (rc)
        goto done;
    double *x = malloc(sizeof(double) * 4 * (size_t)n), *y = malloc(sizeof(double) * 4 * (size_t)n);
    if (!x || !y) {
        free(x);
        free(y);
        skywcs_free(w);
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    rc = skywcs_sky2pix(w, 4 * (size_t)n, clon, clat, x, y);
    skywcs_free(w);
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (long i = 0; rc == 0 && i < 4L * n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            rc = TESS_EINVAL;
            tess_seterr(err, errlen, "a corner of input %ld is off the %s projection", i / 4 + 1,
                        proj);
            break;
        }
        xmin = fmin(xmin, x[i]);
        xmax = fmax(xmax, x[i]);
        ymin = fmin(ymin, y[i]);
        ymax = fmax(ymax, y[i]);
    }
    free(x);
    free(y);
    if (rc)
        goto done;
    /* Positions are 0-based here; astropy works 1-based: CRPIX = (1 - min1) + 0.5 with
     * min1 = min0 + 1. */
    double w1 = nearbyint(xmax - xmin), h1 = nearbyint(ymax - ymin);
    if (!(w1 >= 1.0 && h1 >= 1.0 && w1 < 1e9 && h1 < 1e9)) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the automatic target would be %.0f x %.0f pixels", w1, h1);
        goto done;
    }
    fitscard_list o;
    fitscard_list_init(&o, MOS_MAX_CARDS);
    frame_cards(&o, frame, sol0, proj, lon0, lat0, 0.5 - xmin, 0.5 - ymin, res);
    fitscard_list_int(&o, "NAXIS1", (long)w1, NULL);
    fitscard_list_int(&o, "NAXIS2", (long)h1, NULL);
    if ((rc = fitscard_list_take(&o, cards, nkeys)) != 0) {
        rc = rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "bad target WCS values");
        goto done;
    }
    *out_nx = (long)w1;
    *out_ny = (long)h1;
done:
    free(clon);
    free(clat);
    return rc;
}
