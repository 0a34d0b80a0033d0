/* Unit tests of engine/sky/exact: golden reproject_exact results and a brute-force spherical overlap reference. */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sky/exact.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* One arcsecond, in degrees. */
#define ARCSEC (1.0 / 3600.0)

/* ---- WCS helpers ----------------------------------------------------------------------- */

/* A 2-D celestial WCS: CTYPE `lon`/`lat` (e.g. "RA---TAN", "DEC--TAN"), CRVAL, CRPIX
 * (1-based), CDELT (degrees) and a rotation `rot` (degrees, PC = [[cos, -sin], [sin, cos]]).
 * Equatorial axes are ICRS. */
static skywcs *make_wcs(const char *lon, const char *lat, double crval1, double crval2,
                        double crpix1, double crpix2, double cdelt1, double cdelt2, double rot)
{
    char cards[16 * 80 + 1];
    int n = 0;
    double c = cos(rot * M_PI / 180.0), s = sin(rot * M_PI / 180.0);
    char line[16][81];
    snprintf(line[n++], 81, "WCSAXES = %20d", 2);
    snprintf(line[n++], 81, "CTYPE1  = '%s'", lon);
    snprintf(line[n++], 81, "CTYPE2  = '%s'", lat);
    snprintf(line[n++], 81, "CRVAL1  = %20.15g", crval1);
    snprintf(line[n++], 81, "CRVAL2  = %20.15g", crval2);
    snprintf(line[n++], 81, "CRPIX1  = %20.15g", crpix1);
    snprintf(line[n++], 81, "CRPIX2  = %20.15g", crpix2);
    snprintf(line[n++], 81, "CDELT1  = %20.17g", cdelt1);
    snprintf(line[n++], 81, "CDELT2  = %20.17g", cdelt2);
    snprintf(line[n++], 81, "PC1_1   = %20.17g", c);
    snprintf(line[n++], 81, "PC1_2   = %20.17g", -s);
    snprintf(line[n++], 81, "PC2_1   = %20.17g", s);
    snprintf(line[n++], 81, "PC2_2   = %20.17g", c);
    if (lon[0] == 'R')
        snprintf(line[n++], 81, "RADESYS = 'ICRS'");
    for (int i = 0; i < n; i++) {
        memset(cards + i * 80, ' ', 80);
        memcpy(cards + i * 80, line[i], strlen(line[i]));
    }
    cards[n * 80] = '\0';
    return tt_parse_wcs(cards, n);
}

/* make_wcs with CRPIX chosen so that the sky position (lon, lat) (degrees, in the
 * WCS's frame) falls on 0-based pixel (px, py). */
static skywcs *make_wcs_at(const char *lon, const char *lat, double crval1, double crval2,
                           double cdelt1, double cdelt2, double rot, double plon, double plat,
                           double px, double py)
{
    skywcs *probe = make_wcs(lon, lat, crval1, crval2, 0.0, 0.0, cdelt1, cdelt2, rot);
    double x, y;
    ck_assert_int_eq(skywcs_sky2pix(probe, 1, &plon, &plat, &x, &y), 0);
    skywcs_free(probe);
    return make_wcs(lon, lat, crval1, crval2, px - x, py - y, cdelt1, cdelt2, rot);
}

/* rp_exact_rows over all rows, or a test failure; returns the finite count. */
static long exact_all(const skywcs *in, const rp_plane *p, const skywcs *out, long nx, long ny,
                      double max_err, double *dst, double *fp)
{
    char err[256] = "";
    long n = rp_exact_rows(in, p, out, nx, ny, 0, ny, max_err, dst, fp, err, sizeof err);
    ck_assert_msg(n >= 0, "rp_exact_rows: %s", err);
    return n;
}

/* ---- the reference: brute-force overlap of great-circle quadrilaterals ----------------- */

/* One pixel on the sphere: corner unit vectors in lattice order (i, j), (i+1, j),
 * (i+1, j+1), (i, j+1), mean direction, angular radius. */
typedef struct sph_pix {
    double q[4][3];
    double c[3];
    double rad;
    int ok;
} sph_pix;

static double dot3(const double *a, const double *b)
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross3(const double *a, const double *b, double *r)
{
    r[0] = a[1] * b[2] - a[2] * b[1];
    r[1] = a[2] * b[0] - a[0] * b[2];
    r[2] = a[0] * b[1] - a[1] * b[0];
}

/* Angle between unit vectors, stable for small angles. */
static double angle3(const double *a, const double *b)
{
    double r[3];
    cross3(a, b, r);
    return atan2(sqrt(dot3(r, r)), dot3(a, b));
}

/* The pixels of an nx x ny image on WCS w, corners converted to frame (to, eq). */
static sph_pix *sph_pixels(skywcs *w, long nx, long ny, sky_frame to, double eq)
{
    size_t n = (size_t)(nx + 1) * (size_t)(ny + 1);
    double *x = malloc(sizeof(double) * n * 4), *y = x + n, *lon = x + 2 * n, *lat = x + 3 * n;
    for (long j = 0; j <= ny; j++)
        for (long i = 0; i <= nx; i++) {
            x[j * (nx + 1) + i] = i - 0.5;
            y[j * (nx + 1) + i] = j - 0.5;
        }
    ck_assert_int_eq(skywcs_pix2sky(w, n, x, y, lon, lat), 0);
    double eqw = 0.0;
    sky_frame fw = skywcs_frame(w, &eqw);
    sky_convert(fw, eqw, to, eq, n, lon, lat);
    sph_pix *p = calloc((size_t)(nx * ny), sizeof *p);
    for (long j = 0; j < ny; j++)
        for (long i = 0; i < nx; i++) {
            sph_pix *s = &p[j * nx + i];
            const size_t k0 = (size_t)(j * (nx + 1) + i), k1 = k0 + (size_t)(nx + 1);
            size_t k[4] = { k0, k0 + 1, k1 + 1, k1 };
            s->ok = 1;
            for (int c = 0; c < 4; c++) {
                double a = lon[k[c]] * M_PI / 180.0, b = lat[k[c]] * M_PI / 180.0;
                if (!isfinite(a) || !isfinite(b))
                    s->ok = 0;
                s->q[c][0] = cos(b) * cos(a);
                s->q[c][1] = cos(b) * sin(a);
                s->q[c][2] = sin(b);
            }
            if (!s->ok)
                continue;
            for (int d = 0; d < 3; d++)
                s->c[d] = s->q[0][d] + s->q[1][d] + s->q[2][d] + s->q[3][d];
            double cn = sqrt(dot3(s->c, s->c));
            for (int d = 0; d < 3; d++)
                s->c[d] /= cn;
            s->rad = 0.0;
            for (int c = 0; c < 4; c++)
                s->rad = fmax(s->rad, angle3(s->c, s->q[c]));
        }
    free(x);
    return p;
}

/* Solid angle of the planar polygon (X, Y, n) of a gnomonic projection (tangent plane at
 * distance 1): fan of triangles, each by Van Oosterom & Strackee's formula. */
static double gnomonic_solid_angle(const double *X, const double *Y, int n)
{
    double total = 0.0;
    for (int t = 1; t + 1 < n; t++) {
        int a = 0, b = t, c = t + 1;
        double na = sqrt(1 + X[a] * X[a] + Y[a] * Y[a]), nb = sqrt(1 + X[b] * X[b] + Y[b] * Y[b]);
        double nc = sqrt(1 + X[c] * X[c] + Y[c] * Y[c]);
        double det = (X[b] - X[a]) * (Y[c] - Y[a]) - (X[c] - X[a]) * (Y[b] - Y[a]);
        double ab = (X[a] * X[b] + Y[a] * Y[b] + 1) / (na * nb);
        double bc = (X[b] * X[c] + Y[b] * Y[c] + 1) / (nb * nc);
        double ca = (X[c] * X[a] + Y[c] * Y[a] + 1) / (nc * na);
        total += 2.0 * atan2(det / (na * nb * nc), 1.0 + ab + bc + ca);
    }
    return total;
}

/* Overlap (steradians) of the spherical quadrilaterals a and b: both projected
 * gnomonically about b's centre (great circles are straight there), a clipped by each
 * edge of b (Sutherland-Hodgman; b is convex), the result measured exactly. */
static double sph_overlap(const sph_pix *a, const sph_pix *b)
{
    if (!a->ok || !b->ok || angle3(a->c, b->c) > a->rad + b->rad + 1e-15)
        return 0.0;
    double e1[3], e2[3], u[3] = { 0, 0, 0 };
    u[fabs(b->c[0]) < 0.5 ? 0 : fabs(b->c[1]) < 0.5 ? 1 : 2] = 1.0;
    cross3(u, b->c, e1);
    double en = sqrt(dot3(e1, e1));
    for (int d = 0; d < 3; d++)
        e1[d] /= en;
    cross3(b->c, e1, e2);
    double px[32], py[32], qx[4], qy[4];
    int np = 4;
    for (int k = 0; k < 4; k++) {
        double za = dot3(a->q[k], b->c), zb = dot3(b->q[k], b->c);
        ck_assert(za > 0.0 && zb > 0.0);
        px[k] = dot3(a->q[k], e1) / za;
        py[k] = dot3(a->q[k], e2) / za;
        qx[k] = dot3(b->q[k], e1) / zb;
        qy[k] = dot3(b->q[k], e2) / zb;
    }
    /* Counterclockwise both. */
    double sa = (px[2] - px[0]) * (py[3] - py[1]) - (px[3] - px[1]) * (py[2] - py[0]);
    double sb = (qx[2] - qx[0]) * (qy[3] - qy[1]) - (qx[3] - qx[1]) * (qy[2] - qy[0]);
    if (sa < 0) {
        double t;
        t = px[1], px[1] = px[3], px[3] = t;
        t = py[1], py[1] = py[3], py[3] = t;
    }
    if (sb < 0) {
        double t;
        t = qx[1], qx[1] = qx[3], qx[3] = t;
        t = qy[1], qy[1] = qy[3], qy[3] = t;
    }
    for (int e = 0; e < 4 && np >= 3; e++) {
        double x0 = qx[e], y0 = qy[e], dx = qx[(e + 1) & 3] - x0, dy = qy[(e + 1) & 3] - y0;
        double ox[32], oy[32];
        int no = 0;
        for (int i = 0; i < np; i++) {
            int j = (i + 1) % np;
            double di = dx * (py[i] - y0) - dy * (px[i] - x0);
            double dj = dx * (py[j] - y0) - dy * (px[j] - x0);
            if (di >= 0) {
                ox[no] = px[i];
                oy[no++] = py[i];
            }
            if ((di > 0 && dj < 0) || (di < 0 && dj > 0)) {
                double f = di / (di - dj);
                ox[no] = px[i] + (px[j] - px[i]) * f;
                oy[no++] = py[i] + (py[j] - py[i]) * f;
            }
        }
        memcpy(px, ox, sizeof(double) * (size_t)no);
        memcpy(py, oy, sizeof(double) * (size_t)no);
        np = no;
    }
    return np >= 3 ? gnomonic_solid_angle(px, py, np) : 0.0;
}

/* Solid angle of one pixel. */
static double sph_area(const sph_pix *p)
{
    return sph_overlap(p, p);
}

/* reproject_exact's result computed by brute force over all pixel pairs (NaN inputs
 * left out, as rp_exact_rows does): dst = sum v A / sum A, fp = sum A / area(out). */
static void sph_reproject(skywcs *in, const double *src, long inx, long iny, skywcs *out,
                          long onx, long ony, double *dst, double *fp)
{
    double eq = 0.0;
    sky_frame fo = skywcs_frame(out, &eq);
    sph_pix *pi = sph_pixels(in, inx, iny, fo, eq), *po = sph_pixels(out, onx, ony, fo, eq);
    for (long q = 0; q < onx * ony; q++) {
        double s = 0.0, w = 0.0;
        for (long k = 0; k < inx * iny; k++) {
            if (!isfinite(src[k]))
                continue;
            double a = sph_overlap(&pi[k], &po[q]);
            s += src[k] * a;
            w += a;
        }
        dst[q] = w > 0.0 ? s / w : NAN;
        fp[q] = po[q].ok ? w / sph_area(&po[q]) : 0.0;
    }
    free(pi);
    free(po);
}

/* Largest |a - b| over pixels finite in both, and checks that finiteness agrees wherever
 * the reference footprint is above `fpmin`. */
static double max_diff(const double *a, const double *b, const double *fpref, long n,
                       double fpmin)
{
    double worst = 0.0;
    for (long q = 0; q < n; q++) {
        if (fpref[q] > fpmin)
            ck_assert_msg(isfinite(a[q]) && isfinite(b[q]), "pixel %ld: %g vs %g (fp %g)", q,
                          a[q], b[q], fpref[q]);
        if (isfinite(a[q]) && isfinite(b[q]))
            worst = fmax(worst, fabs(a[q] - b[q]));
    }
    return worst;
}

/* A smooth test image. */
static void fill_image(double *v, long nx, long ny)
{
    for (long j = 0; j < ny; j++)
        for (long i = 0; i < nx; i++)
            v[j * nx + i] = 10.0 + 3.0 * sin(0.7 * i) * cos(0.45 * j) + 0.2 * i - 0.1 * j;
}

/* Runs rp_exact_rows and the spherical reference on in -> out and returns the largest
 * value difference relative to the image's range and the largest footprint difference. */
static void compare_with_sphere(skywcs *in, const double *src, long inx, long iny, skywcs *out,
                                long onx, long ony, double max_err, double *dv, double *dfp,
                                long *nfinite)
{
    long n = onx * ony;
    double *d = malloc(sizeof(double) * (size_t)n * 4), *f = d + n;
    double *rd = d + 2 * n, *rf = d + 3 * n;
    rp_plane p = { (void *)src, RP_F64, inx, iny };
    *nfinite = exact_all(in, &p, out, onx, ony, max_err, d, f);
    sph_reproject(in, src, inx, iny, out, onx, ony, rd, rf);
    double lo = INFINITY, hi = -INFINITY;
    for (long k = 0; k < inx * iny; k++)
        if (isfinite(src[k])) {
            lo = fmin(lo, src[k]);
            hi = fmax(hi, src[k]);
        }
    *dv = max_diff(d, rd, rf, n, 1e-9) / (hi - lo);
    *dfp = 0.0;
    for (long q = 0; q < n; q++)
        *dfp = fmax(*dfp, fabs(f[q] - rf[q]));
    free(d);
}

/* ---- golden references (astropy reproject 0.10 reproject_exact) ------------------------ */

/* Reprojects `source` onto `name`.target.hdr and compares with `name`.fits: value
 * difference relative to the peak, flux ratio over pixels finite in both, agreement of
 * the footprints (finite vs NaN), and the largest footprint difference. */
static void run_golden(const char *name, const char *source, double max_err, double *rel,
                       double *flux, double *agree, double *fpdiff)
{
    char path[1024];
    long snx, sny, rnx, rny, fnx, fny;
    char *scards, *rcards;
    int snk, rnk, tnk, sf32, rf32;
    snprintf(path, sizeof path, "%s/%s", TESSERA_DEMO_DIR, source);
    void *src = tt_read_image(path, 1, &snx, &sny, &scards, &snk, &sf32);
    snprintf(path, sizeof path, "%s/reference/%s.fits", TESSERA_TESTDATA_DIR, name);
    double *ref = tt_read_image(path, 1, &rnx, &rny, &rcards, &rnk, &rf32);
    void *fpraw = tt_read_image(path, 2, &fnx, &fny, NULL, NULL, &rf32);
    double *reffp = malloc(sizeof(double) * (size_t)(fnx * fny));
    for (long q = 0; q < fnx * fny; q++)
        reffp[q] = rf32 ? (double)((float *)fpraw)[q] : ((double *)fpraw)[q];
    free(fpraw);
    ck_assert(fnx == rnx && fny == rny);
    snprintf(path, sizeof path, "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, name);
    char *tcards = tt_read_hdr_file(path, &tnk);
    skywcs *win = tt_parse_wcs(scards, snk), *wout = tt_parse_wcs(tcards, tnk);

    size_t n = (size_t)(rnx * rny);
    double *dst = malloc(sizeof(double) * n * 2), *fp = dst + n;
    rp_plane p = { src, sf32 ? RP_F32 : RP_F64, snx, sny };
    exact_all(win, &p, wout, rnx, rny, max_err, dst, fp);

    double peak = 0.0, maxdiff = 0.0, s1 = 0.0, s2 = 0.0;
    size_t same = 0, both = 0;
    *fpdiff = 0.0;
    for (size_t q = 0; q < n; q++) {
        if (isfinite(ref[q]) && fabs(ref[q]) > peak)
            peak = fabs(ref[q]);
        if (!!isfinite(ref[q]) == !!isfinite(dst[q]))
            same++;
        if (isfinite(ref[q]) && isfinite(dst[q])) {
            both++;
            maxdiff = fmax(maxdiff, fabs(dst[q] - ref[q]));
            s1 += dst[q];
            s2 += ref[q];
            *fpdiff = fmax(*fpdiff, fabs(fp[q] - reffp[q]));
        }
    }
    *rel = maxdiff / peak;
    *flux = s1 / s2;
    *agree = (double)same / (double)n;
    fprintf(stderr,
            "golden %-22s max_err=%g: max|diff|/peak=%.3e flux ratio-1=%.3e footprint agree=%.5f "
            "max|fp diff|=%.3e finite=%zu\n",
            name, max_err, *rel, *flux - 1.0, *agree, *fpdiff, both);
    ck_assert(both > n / 2);
    free(dst);
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    free(ref);
    free(reffp);
    free(tcards);
    fits_free_memory(scards, &(int){ 0 });
    fits_free_memory(rcards, &(int){ 0 });
}

static void check_golden(const char *name, const char *source)
{
    const double errs[2] = { 0.0, 0.001 };
    for (int e = 0; e < 2; e++) {
        double rel, flux, agree, fpdiff;
        run_golden(name, source, errs[e], &rel, &flux, &agree, &fpdiff);
        ck_assert_msg(rel <= 1e-3, "%s: max diff / peak %.3e", name, rel);
        ck_assert_msg(fabs(flux - 1.0) <= 1e-4, "%s: flux ratio %.9f", name, flux);
        ck_assert_msg(agree >= 0.995, "%s: footprint agreement %.5f", name, agree);
        ck_assert_msg(fpdiff <= 1e-3, "%s: footprint differs by %.3e", name, fpdiff);
    }
}

START_TEST(test_golden_gc2massk_to_ga)
{
    check_golden("gc2massk_to_ga_exact", "gc_2mass_k.fits");
}
END_TEST

START_TEST(test_golden_gcmsx_to_eq)
{
    check_golden("gcmsx_to_eq_exact", "gc_msx_e.fits");
}
END_TEST

/* ---- synthetic cases ----------------------------------------------------------------- */

/* The flux of a constant image c on `in` (ni x ni) reprojected onto `out` (no x no),
 * sum(dst * fp * area(out pixel)) / (c * sum(area(in pixel))), areas on the sphere; all
 * finite outputs must equal c.  The input must lie inside the output grid. */
static double sphere_flux_ratio(skywcs *in, long ni, skywcs *out, long no, double c)
{
    double *src = malloc(sizeof(double) * (size_t)(ni * ni + 2 * no * no));
    double *d = src + ni * ni, *f = d + no * no;
    for (long k = 0; k < ni * ni; k++)
        src[k] = c;
    rp_plane p = { src, RP_F64, ni, ni };
    exact_all(in, &p, out, no, no, 0.0, d, f);
    double eq = 0.0;
    sky_frame fo = skywcs_frame(out, &eq);
    sph_pix *po = sph_pixels(out, no, no, fo, eq), *pi = sph_pixels(in, ni, ni, fo, eq);
    double fin = 0.0, fout = 0.0;
    for (long k = 0; k < ni * ni; k++)
        fin += c * sph_area(&pi[k]);
    for (long q = 0; q < no * no; q++) {
        if (isfinite(d[q])) {
            /* Values of pixels with a footprint f carry ~1e-16 / f relative rounding
             * (the cover of their row cancels down to f). */
            ck_assert_msg(fabs(d[q] - c) <= (1e-12 + 1e-15 / f[q]) * c, "pixel %ld: %.17g fp %g",
                          q, d[q], f[q]);
            fout += d[q] * f[q] * sph_area(&po[q]);
        } else {
            ck_assert(f[q] == 0.0);
        }
    }
    ck_assert(isnan(d[0]) && isnan(d[no - 1]) && isnan(d[no * no - 1]));
    free(po);
    free(pi);
    free(src);
    return fout / fin;
}

/* Flux conservation with a constant image: onto a rotated, shifted grid lying inside it,
 * every output is the constant with footprint 1; the input inside a rotated, shifted
 * output grid with the same tangent point conserves sum(dst * fp) * (output pixel area)
 * = c * (input pixels) * (input pixel area) (planar areas, exact in the common tangent
 * plane); with another tangent point and frame, or with 1 degree pixels (where the
 * solid angle correction is active), the flux measured with spherical pixel areas. */
START_TEST(test_flux_conservation)
{
    enum { NI = 80, NO = 20 };
    static double src[NI * NI];
    for (int k = 0; k < NI * NI; k++)
        src[k] = 7.25;
    rp_plane p = { src, RP_F64, NI, NI };
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 150.0, 2.0, 40.5, 40.5, -ARCSEC, ARCSEC, 0.0);
    skywcs *out = make_wcs("RA---TAN", "DEC--TAN", 150.0003, 2.0002, 10.3, 9.8, -2.1 * ARCSEC,
                           2.1 * ARCSEC, 27.0);
    double dst[NO * NO], fp[NO * NO];
    ck_assert_int_eq(exact_all(in, &p, out, NO, NO, 0.0, dst, fp), NO * NO);
    double worst = 0.0, worstfp = 0.0;
    for (int q = 0; q < NO * NO; q++) {
        worst = fmax(worst, fabs(dst[q] - 7.25));
        worstfp = fmax(worstfp, fabs(fp[q] - 1.0));
    }
    fprintf(stderr, "flux: output inside input: max|v - c| = %.2e, max|fp - 1| = %.2e\n", worst,
            worstfp);
    ck_assert(worst <= 1e-12 * 7.25);
    ck_assert(worstfp <= 1e-10);
    skywcs_free(out);

    /* Input (80 x 1") inside the output (40 x 3.3", rotated 33 degrees, shifted), same
     * tangent point. */
    enum { NO2 = 32, NO3 = 40 };
    const double s2 = 3.3 * ARCSEC;
    double *d2 = malloc(sizeof(double) * NO3 * NO3 * 2), *f2 = d2 + NO3 * NO3;
    out = make_wcs("RA---TAN", "DEC--TAN", 150.0, 2.0, 20.5 + 0.37, 20.5 - 0.21, -s2, s2, 33.0);
    exact_all(in, &p, out, NO3, NO3, 0.0, d2, f2);
    ck_assert(isnan(d2[0]) && isnan(d2[NO3 * NO3 - 1]));
    double sum = 0.0;
    for (int q = 0; q < NO3 * NO3; q++)
        if (isfinite(d2[q]))
            sum += d2[q] * f2[q];
    double planar = sum * s2 * s2 / (7.25 * NI * NI * ARCSEC * ARCSEC);
    fprintf(stderr, "flux: input inside output, planar: flux ratio - 1 = %.2e\n", planar - 1.0);
    ck_assert_msg(fabs(planar - 1.0) <= 1e-12, "planar flux ratio %.15f", planar);
    skywcs_free(out);
    free(d2);

    /* On the sphere: the output (32 x 5", galactic) with its tangent point 0.2 degree away
     * (|g| < EX_G_MIN: no solid angle correction). */
    double sc[2] = { 150.0, 2.0 }, xy[2];
    sky_convert(SKY_FRAME_ICRS, 0.0, SKY_FRAME_GALACTIC, 0.0, 1, &sc[0], &sc[1]);
    out = make_wcs("GLON-TAN", "GLAT-TAN", sc[0] + 0.2, sc[1] - 0.1, 10.0, 10.0, -5.0 * ARCSEC,
                   5.0 * ARCSEC, 33.0);
    ck_assert_int_eq(skywcs_sky2pix(out, 1, &sc[0], &sc[1], &xy[0], &xy[1]), 0);
    skywcs_free(out);
    out = make_wcs("GLON-TAN", "GLAT-TAN", sc[0] + 0.2, sc[1] - 0.1, 10.0 + 15.5 - xy[0] + 0.37,
                   10.0 + 15.5 - xy[1] - 0.21, -5.0 * ARCSEC, 5.0 * ARCSEC, 33.0);
    double ratio = sphere_flux_ratio(in, NI, out, NO2, 7.25);
    fprintf(stderr, "flux: input inside output, sphere: flux ratio - 1 = %.2e\n", ratio - 1.0);
    ck_assert_msg(fabs(ratio - 1.0) <= 1e-9, "flux ratio %.15f", ratio);
    skywcs_free(in);
    skywcs_free(out);

    /* 1 degree pixels: 6 x 6 input (SIN, 0.9 degree) inside a TAN output (12 x 1 degree)
     * 20 degrees from its tangent point. */
    in = make_wcs("RA---SIN", "DEC--SIN", 40.0, 65.0, 3.5, 3.5, -0.9, 0.9, 10.0);
    out = make_wcs_at("RA---TAN", "DEC--TAN", 40.0, 45.0, -1.0, 1.0, -20.0, 40.0, 65.0, 5.8, 5.3);
    ratio = sphere_flux_ratio(in, 6, out, 12, 7.25);
    fprintf(stderr, "flux: 1 degree pixels, sphere: flux ratio - 1 = %.2e\n", ratio - 1.0);
    ck_assert_msg(fabs(ratio - 1.0) <= 3e-6, "flux ratio %.15f", ratio);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* CDELT1 > 0 input onto the same sky with CDELT1 < 0: the output is the mirrored input
 * (to 1e-9: the coordinate transforms, in degrees, round pixel corners by up to ~1e-10
 * pixel, which leaves slivers of the neighbours). */
START_TEST(test_parity_flip)
{
    double src[25], dst[25], fp[25];
    for (int k = 0; k < 25; k++)
        src[k] = 1.0 + k * 0.37 + (k % 3) * 2.0;
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 30.0, -40.0, 3.0, 3.0, ARCSEC, ARCSEC, 0.0);
    skywcs *out = make_wcs("RA---TAN", "DEC--TAN", 30.0, -40.0, 3.0, 3.0, -ARCSEC, ARCSEC, 0.0);
    rp_plane p = { src, RP_F64, 5, 5 };
    ck_assert_int_eq(exact_all(in, &p, out, 5, 5, 0.0, dst, fp), 25);
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 5; i++) {
            double want = src[j * 5 + (4 - i)];
            ck_assert_msg(fabs(dst[j * 5 + i] - want) <= 1e-9 * want, "(%d, %d): %.17g vs %.17g",
                          i, j, dst[j * 5 + i], want);
            ck_assert(fabs(fp[j * 5 + i] - 1.0) <= 1e-9);
        }
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* 0.005" pixels: a 200 x 200 block of ones covering exactly one 1" output pixel gives 1
 * with footprint 1; a smooth 0.005" image onto a rotated 0.011" grid matches the
 * spherical reference (reproject itself loses precision below 0.05"). */
START_TEST(test_tiny_pixels)
{
    const double s = 0.005 * ARCSEC;
    double *ones = malloc(sizeof(double) * 200 * 200);
    for (int k = 0; k < 200 * 200; k++)
        ones[k] = 1.0;
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 83.8, -5.4, 100.5, 100.5, -s, s, 0.0);
    skywcs *out = make_wcs("RA---TAN", "DEC--TAN", 83.8, -5.4, 2.0, 2.0, -ARCSEC, ARCSEC, 0.0);
    rp_plane p = { ones, RP_F64, 200, 200 };
    double dst[9], fp[9];
    exact_all(in, &p, out, 3, 3, 0.0, dst, fp);
    fprintf(stderr, "tiny: 200x200 of 0.005\" onto 1\": value-1 = %.2e, footprint-1 = %.2e\n",
            dst[4] - 1.0, fp[4] - 1.0);
    ck_assert(fabs(dst[4] - 1.0) <= 1e-12);
    ck_assert(fabs(fp[4] - 1.0) <= 1e-9);
    for (int q = 0; q < 9; q++)
        if (q != 4)
            ck_assert_msg(fp[q] <= 1e-9, "neighbour %d footprint %g", q, fp[q]);
    free(ones);
    skywcs_free(in);
    skywcs_free(out);

    enum { NI = 24, NO = 12 };
    double src[NI * NI];
    fill_image(src, NI, NI);
    in = make_wcs("RA---TAN", "DEC--TAN", 83.8, -5.4, 12.5, 12.5, -s, s, 0.0);
    out = make_wcs("RA---TAN", "DEC--TAN", 83.8 + 1e-6, -5.4 + 1e-6, 6.2, 6.7, -0.011 * ARCSEC,
                   0.011 * ARCSEC, 21.0);
    double dv, dfp;
    long nf;
    compare_with_sphere(in, src, NI, NI, out, NO, NO, 0.0, &dv, &dfp, &nf);
    fprintf(stderr, "tiny: 0.005\" onto 0.011\" vs sphere: max|diff|/range = %.2e, "
            "max|fp diff| = %.2e\n", dv, dfp);
    ck_assert(nf > NO * NO / 2);
    ck_assert(dv <= 1e-6);
    ck_assert(dfp <= 1e-6);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* Pixels crossing RA = 0/360, onto a TAN grid and onto a CAR grid, against the spherical
 * reference. */
START_TEST(test_ra_wrap)
{
    enum { NI = 14, NO = 11 };
    double src[NI * NI];
    fill_image(src, NI, NI);
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 0.0004, 12.0, 7.3, 7.6, -2.0 * ARCSEC,
                          2.0 * ARCSEC, 8.0);
    skywcs *outs[2] = {
        make_wcs("RA---TAN", "DEC--TAN", 359.9997, 12.0004, 6.1, 5.7, -2.5 * ARCSEC,
                 2.5 * ARCSEC, -17.0),
        make_wcs("RA---CAR", "DEC--CAR", 0.0, 0.0, 6.0 + 0.0003 * 3600 / 2.5,
                 6.2 - 12.0 * 3600 / 2.5, -2.5 * ARCSEC, 2.5 * ARCSEC, 0.0) };
    for (int o = 0; o < 2; o++) {
        double dv, dfp;
        long nf;
        compare_with_sphere(in, src, NI, NI, outs[o], NO, NO, 0.0, &dv, &dfp, &nf);
        fprintf(stderr, "ra wrap (%s): max|diff|/range = %.2e, max|fp diff| = %.2e, finite %ld\n",
                o ? "CAR" : "TAN", dv, dfp, nf);
        ck_assert(nf > NO * NO / 2);
        /* CAR: straight edges in the CAR plane miss the great circles (~1e-7 here). */
        ck_assert(dv <= (o ? 1e-6 : 1e-9));
        ck_assert(dfp <= (o ? 1e-6 : 1e-9));
        skywcs_free(outs[o]);
    }
    skywcs_free(in);
}
END_TEST

/* CRPIX far outside both images (8 and 5 degrees from the tangent points). */
START_TEST(test_crpix_far)
{
    enum { NI = 12, NO = 10 };
    double src[NI * NI];
    fill_image(src, NI, NI);
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 200.0, 30.0, -28000.5, 9000.25, -ARCSEC,
                          ARCSEC, 12.0);
    double x = 5.5, y = 5.5, lon, lat;
    ck_assert_int_eq(skywcs_pix2sky(in, 1, &x, &y, &lon, &lat), 0);
    /* The output's tangent point 5 degrees north of the input image, CRPIX placed so that
     * the image sits on the grid. */
    skywcs *out = make_wcs_at("RA---TAN", "DEC--TAN", lon, lat + 5.0, -1.3 * ARCSEC,
                              1.3 * ARCSEC, -25.0, lon, lat, 5.6, 5.4);
    double dv, dfp;
    long nf;
    compare_with_sphere(in, src, NI, NI, out, NO, NO, 0.0, &dv, &dfp, &nf);
    fprintf(stderr, "crpix far: max|diff|/range = %.2e, max|fp diff| = %.2e, finite %ld\n", dv,
            dfp, nf);
    ck_assert(nf > NO * NO / 2);
    ck_assert(dv <= 1e-9);
    ck_assert(dfp <= 1e-9);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* A NaN input pixel changes only the outputs it overlaps (they become the mean of the
 * other overlapping pixels, with a smaller footprint), matching the spherical reference
 * with the NaN left out; reproject 0.10 would make them NaN. */
START_TEST(test_nan_pixel)
{
    enum { NI = 10, NO = 10 };
    double clean[NI * NI], holed[NI * NI], ind[NI * NI];
    fill_image(clean, NI, NI);
    memcpy(holed, clean, sizeof clean);
    holed[4 * NI + 5] = NAN;
    for (int k = 0; k < NI * NI; k++)
        ind[k] = k == 4 * NI + 5 ? 1.0 : NAN;
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 10.0, 20.0, 5.5, 5.5, -ARCSEC, ARCSEC, 0.0);
    skywcs *out = make_wcs("RA---TAN", "DEC--TAN", 10.0, 20.0, 5.8, 5.1, -1.1 * ARCSEC,
                           1.1 * ARCSEC, 14.0);
    double dc[NO * NO], fc[NO * NO], dh[NO * NO], fh[NO * NO], di[NO * NO], fi[NO * NO];
    rp_plane pc = { clean, RP_F64, NI, NI }, ph = { holed, RP_F64, NI, NI };
    rp_plane pn = { ind, RP_F64, NI, NI };
    exact_all(in, &pc, out, NO, NO, 0.0, dc, fc);
    exact_all(in, &ph, out, NO, NO, 0.0, dh, fh);
    exact_all(in, &pn, out, NO, NO, 0.0, di, fi);
    int touched = 0;
    for (int q = 0; q < NO * NO; q++) {
        if (fi[q] > 0.0) {
            touched++;
            ck_assert(fh[q] < fc[q]);
            ck_assert(fabs(fc[q] - fh[q] - fi[q]) <= 1e-12);
        } else {
            /* Unchanged but for rounding (the sums along a row pass the NaN's edges). */
            ck_assert(fabs(dh[q] - dc[q]) <= 1e-13 * fabs(dc[q]) || (isnan(dh[q]) && isnan(dc[q])));
            ck_assert(fabs(fh[q] - fc[q]) <= 1e-14);
        }
    }
    ck_assert(touched >= 2 && touched <= 6);
    double dv, dfp;
    long nf;
    compare_with_sphere(in, holed, NI, NI, out, NO, NO, 0.0, &dv, &dfp, &nf);
    fprintf(stderr, "nan pixel: %d outputs touched; vs sphere max|diff|/range = %.2e, "
            "max|fp diff| = %.2e\n",
            touched, dv, dfp);
    ck_assert(dv <= 1e-9 && dfp <= 1e-9);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* One block of rows for a thread of test_blocks. */
typedef struct block_job {
    const skywcs *in, *out;
    const rp_plane *p;
    long nx, ny, y0, y1;
    double max_err, *dst, *fp;
    long result;
} block_job;

static void *run_block(void *arg)
{
    block_job *b = arg;
    b->result = rp_exact_rows(b->in, b->p, b->out, b->nx, b->ny, b->y0, b->y1, b->max_err,
                              b->dst, b->fp, NULL, 0);
    return NULL;
}

/* Rows computed in three blocks, one after the other and in three threads at once (the
 * engine's use), equal the rows computed in one call, bit for bit, with exact transforms
 * and with the approximate coordinate grid, with the solid angle correction off (CAR near
 * the equator) and on (TAN 3 degrees from its tangent point); float32 planes give the
 * same as float64 planes of the same values; the footprint is optional. */
START_TEST(test_blocks)
{
    enum { NI = 300, NX = 170, NY = 190 };
    double *src = malloc(sizeof(double) * NI * NI);
    float *src32 = malloc(sizeof(float) * NI * NI);
    fill_image(src, NI, NI);
    for (int k = 0; k < NI * NI; k++) {
        src32[k] = (float)src[k];
        src[k] = (double)src32[k];
    }
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 266.4, -28.9, 150.5, 150.5, -2.0 * ARCSEC,
                          2.0 * ARCSEC, 0.0);
    skywcs *outs[2] = {
        make_wcs("GLON-CAR", "GLAT-CAR", 359.95, 0.0, 80.0, 120.0, -3.1 * ARCSEC, 3.1 * ARCSEC,
                 35.0),
        make_wcs_at("RA---TAN", "DEC--TAN", 266.4, -25.9, -3.1 * ARCSEC, 3.1 * ARCSEC, -50.0,
                    266.4, -28.9, 90.3, 95.1) };
    size_t n = NX * NY;
    double *a = malloc(sizeof(double) * n * 6), *fa = a + n, *b = a + 2 * n, *fb = a + 3 * n;
    double *c = a + 4 * n, *fc = a + 5 * n;
    rp_plane p = { src, RP_F64, NI, NI }, p32 = { src32, RP_F32, NI, NI };
    const double errs[2] = { 0.0, 0.001 };
    const long cuts[4] = { 0, 37, 38, NY };   /* a one-row block in the middle */
    for (int o = 0; o < 2; o++)
        for (int e = 0; e < 2; e++) {
            long nall = exact_all(in, &p, outs[o], NX, NY, errs[e], a, fa);
            ck_assert(nall > (long)n / 4 && nall < (long)n);
            long nsum = 0;
            char err[256];
            for (int k = 0; k < 3; k++) {
                long r = rp_exact_rows(in, &p, outs[o], NX, NY, cuts[k], cuts[k + 1], errs[e], b,
                                       fb, err, sizeof err);
                ck_assert_msg(r >= 0, "%s", err);
                nsum += r;
            }
            ck_assert_int_eq(nsum, nall);
            for (size_t q = 0; q < n; q++) {
                ck_assert(a[q] == b[q] || (isnan(a[q]) && isnan(b[q])));
                ck_assert(fa[q] == fb[q]);
            }
            /* Concurrently, into the same arrays. */
            block_job jobs[3];
            pthread_t th[3];
            memset(c, 0, sizeof(double) * n * 2);
            for (int k = 0; k < 3; k++) {
                jobs[k] = (block_job){ in, outs[o], &p32, NX, NY, cuts[k], cuts[k + 1], errs[e], c,
                                       fc, 0 };
                ck_assert_int_eq(pthread_create(&th[k], NULL, run_block, &jobs[k]), 0);
            }
            nsum = 0;
            for (int k = 0; k < 3; k++) {
                pthread_join(th[k], NULL);
                ck_assert(jobs[k].result >= 0);
                nsum += jobs[k].result;
            }
            ck_assert_int_eq(nsum, nall);
            for (size_t q = 0; q < n; q++) {
                ck_assert(a[q] == c[q] || (isnan(a[q]) && isnan(c[q])));
                ck_assert(fa[q] == fc[q]);
            }
        }
    /* Footprint optional. */
    exact_all(in, &p, outs[0], NX, NY, 0.0, a, fa);
    ck_assert(rp_exact_rows(in, &p, outs[0], NX, NY, 0, NY, 0.0, b, NULL, NULL, 0) >= 0);
    for (size_t q = 0; q < n; q++)
        ck_assert(b[q] == a[q] || (isnan(a[q]) && isnan(b[q])));
    free(a);
    free(src);
    free(src32);
    skywcs_free(in);
    skywcs_free(outs[0]);
    skywcs_free(outs[1]);
}
END_TEST

/* Large pixels, where the area element varies across a pixel: the error of the
 * linearised solid angle (TAN output, 1 degree pixels, 10 degrees from the tangent point)
 * and of the straight edges (CAR output at latitude 60, 0.5 degree pixels), against the
 * spherical reference. */
START_TEST(test_large_pixels)
{
    enum { NI = 14, NO = 12 };
    double src[NI * NI];
    fill_image(src, NI, NI);
    skywcs *in = make_wcs("RA---SIN", "DEC--SIN", 40.0, 55.0, 7.5, 7.5, -0.8, 0.8, 10.0);
    skywcs *tan = make_wcs("RA---TAN", "DEC--TAN", 40.0, 45.0, 6.5, -3.5, -1.0, 1.0, -20.0);
    skywcs *car = make_wcs("RA---CAR", "DEC--CAR", 40.0, 0.0, 6.5, 6.5 - 55.0 / 0.5 - 0.3, -0.5,
                           0.5, 0.0);
    double dv, dfp;
    long nf;
    compare_with_sphere(in, src, NI, NI, tan, NO, NO, 0.0, &dv, &dfp, &nf);
    fprintf(stderr, "large pixels, TAN 1 deg: max|diff|/range = %.2e, max|fp diff| = %.2e, "
            "finite %ld\n",
            dv, dfp, nf);
    ck_assert(nf > NO * NO / 3);
    ck_assert(dv <= 2e-4 && dfp <= 2e-4);
    compare_with_sphere(in, src, NI, NI, car, NO, NO, 0.0, &dv, &dfp, &nf);
    fprintf(stderr, "large pixels, CAR 0.5 deg at lat 55: max|diff|/range = %.2e, "
            "max|fp diff| = %.2e, finite %ld\n",
            dv, dfp, nf);
    ck_assert(nf > NO * NO / 3);
    ck_assert(dv <= 1e-2 && dfp <= 1e-2);
    skywcs_free(in);
    skywcs_free(tan);
    skywcs_free(car);
}
END_TEST

/* An input straddling the +-180 degree seam of an all-sky CAR output (the left and right
 * edges of the map): the input pixels crossing it are left out (footprint < 1 next to
 * the seam), every other output is the constant. */
START_TEST(test_seam)
{
    enum { NI = 20, NX = 360, NY = 20 };
    double src[NI * NI], *dst = malloc(sizeof(double) * NX * NY * 2), *fp = dst + NX * NY;
    for (int k = 0; k < NI * NI; k++)
        src[k] = 3.0;
    skywcs *in = make_wcs("RA---TAN", "DEC--TAN", 180.1, 0.0, 10.5, 10.5, -0.5, 0.5, 0.0);
    skywcs *out = make_wcs("RA---CAR", "DEC--CAR", 0.0, 0.0, 180.5, 10.5, -1.0, 1.0, 0.0);
    rp_plane p = { src, RP_F64, NI, NI };
    long nf = exact_all(in, &p, out, NX, NY, 0.0, dst, fp);
    double *rd = malloc(sizeof(double) * NX * NY * 2), *rf = rd + NX * NY;
    sph_reproject(in, src, NI, NI, out, NX, NY, rd, rf);
    double total = 0.0, rtotal = 0.0;
    for (int q = 0; q < NX * NY; q++) {
        if (isfinite(dst[q]))
            ck_assert_msg(fabs(dst[q] - 3.0) <= 1e-12, "pixel %d: %g", q, dst[q]);
        ck_assert_msg(fp[q] <= rf[q] + 1e-3, "pixel %d: fp %.12g, on the sphere %.12g", q, fp[q],
                      rf[q]);
        total += fp[q];
        rtotal += rf[q];
    }
    /* One column of 20 half-degree input pixels is about 5 output pixels. */
    fprintf(stderr, "seam: %ld finite outputs, total footprint %.4f, on the sphere %.4f\n", nf,
            total, rtotal);
    ck_assert(nf > 100 && rtotal - total > 4.5 && rtotal - total < 5.5);
    free(rd);
    free(dst);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* rp_exact_rows of plane p on w onto w (nx x 2 pixels), rows [y0, y1). */
static long rows_of(skywcs *w, const rp_plane *p, long nx, long y0, long y1, double mce,
                    double *dst, char *err, size_t errlen)
{
    return rp_exact_rows(w, p, w, nx, 2, y0, y1, mce, dst, NULL, err, errlen);
}

/* Argument errors, empty row ranges, and the identity. */
START_TEST(test_errors)
{
    double src[4] = { 1, 2, 3, 4 }, dst[4];
    skywcs *w = make_wcs("RA---TAN", "DEC--TAN", 10.0, 20.0, 1.5, 1.5, -ARCSEC, ARCSEC, 0.0);
    rp_plane p = { src, RP_F64, 2, 2 };
    char err[256] = "";
    ck_assert_int_eq(rows_of(w, &p, 2, 1, 3, 0.0, dst, err, sizeof err), TESS_EINVAL);
    ck_assert(strstr(err, "rows") != NULL);
    ck_assert_int_eq(rows_of(w, &p, 2, 1, 0, 0.0, dst, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(rows_of(w, &p, 2, 0, 2, -1.0, dst, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(rows_of(w, &p, 2, 0, 2, NAN, dst, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(rows_of(w, NULL, 2, 0, 2, 0.0, dst, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(rows_of(w, &p, 0, 0, 2, 0.0, dst, err, sizeof err), TESS_EINVAL);
    rp_plane bad = { src, (rp_dtype)7, 2, 2 };
    ck_assert_int_eq(rows_of(w, &bad, 2, 0, 2, 0.0, dst, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(rows_of(w, &p, 2, 1, 1, 0.0, dst, err, sizeof err), 0);
    ck_assert_int_eq(rows_of(w, &p, 2, 0, 2, 0.0, dst, err, sizeof err), 4);
    for (int k = 0; k < 4; k++)
        ck_assert(fabs(dst[k] - src[k]) <= 1e-9);
    skywcs_free(w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exact");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_golden_gc2massk_to_ga);
    tcase_add_test(tc, test_golden_gcmsx_to_eq);
    tcase_add_test(tc, test_flux_conservation);
    tcase_add_test(tc, test_parity_flip);
    tcase_add_test(tc, test_tiny_pixels);
    tcase_add_test(tc, test_ra_wrap);
    tcase_add_test(tc, test_crpix_far);
    tcase_add_test(tc, test_nan_pixel);
    tcase_add_test(tc, test_blocks);
    tcase_add_test(tc, test_large_pixels);
    tcase_add_test(tc, test_seam);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
