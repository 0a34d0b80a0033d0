/* Unit tests of engine/sky/skywcs: parsing as astropy does, frames, conversions, cutout headers. */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sky/coordmap.h"
#include "engine/sky/skywcs.h"
#include "engine/sky/solar.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* Expected values below were computed with Debian's astropy 5.2.1 (/usr/bin/python3):
 * SkyCoord(...).transform_to(...) and WCS(header).pixel_to_world_values(...). */

/* ---- helpers ------------------------------------------------------------------------ */

static skywcs *parse_lines(const char *const *lines)
{
    int nk;
    char *cards = tt_make_cards(lines, &nk);
    skywcs *w = NULL;
    char err[256] = "";
    int rc = skywcs_parse(cards, nk, &w, err, sizeof err);
    free(cards);
    ck_assert_msg(rc == 0, "skywcs_parse: %s", err);
    return w;
}

/* The primary header of FITS file `name` in directory `dir`, parsed. */
static skywcs *parse_file(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fitsfile *f = NULL;
    int st = 0, nk = 0;
    char *hdr = NULL;
    fits_open_file(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s", path);
    fits_hdr2str(f, 1, NULL, 0, &hdr, &nk, &st);
    ck_assert_int_eq(st, 0);
    skywcs *w = NULL;
    char err[256] = "";
    int rc = skywcs_parse(hdr, nk, &w, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    fits_free_memory(hdr, &st);
    fits_close_file(f, &st);
    return w;
}

/* The primary header of a FITS file in the demo directory, parsed. */
static skywcs *parse_demo(const char *name)
{
    return parse_file(TESSERA_DEMO_DIR, name);
}

static skywcs *parse_testdata(const char *name)
{
    return parse_file(TESSERA_TESTDATA_DIR, name);
}

/* Angular separation in degrees (Vincenty's formula, stable at all distances). */
static double sep_deg(double l1, double b1, double l2, double b2)
{
    const double d = M_PI / 180.0;
    double dl = (l2 - l1) * d, p1 = b1 * d, p2 = b2 * d;
    double num = hypot(cos(p2) * sin(dl), cos(p1) * sin(p2) - sin(p1) * cos(p2) * cos(dl));
    double den = sin(p1) * sin(p2) + cos(p1) * cos(p2) * cos(dl);
    return atan2(num, den) / d;
}

static void check_convert(sky_frame a, double ea, sky_frame b, double eb, double lon, double lat,
                          double want_lon, double want_lat, double tol_deg)
{
    double l = lon, t = lat;
    sky_convert(a, ea, b, eb, 1, &l, &t);
    ck_assert_msg(sep_deg(l, t, want_lon, want_lat) <= tol_deg,
                  "%s->%s (%.10f, %.10f): got (%.15f, %.15f) want (%.15f, %.15f)",
                  sky_frame_name(a), sky_frame_name(b), lon, lat, l, t, want_lon, want_lat);
}

/* ---- frames and conversions -------------------------------------------------------- */

START_TEST(test_galactic_centre)
{
    check_convert(SKY_FRAME_GALACTIC, 0, SKY_FRAME_ICRS, 0, 0.0, 0.0,
                  266.4049882865447, -28.936177761791473, 1e-10);
    check_convert(SKY_FRAME_GALACTIC, 0, SKY_FRAME_FK5, 2000.0, 0.0, 0.0,
                  266.4049962340225, -28.936172403391783, 1e-10);
    check_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_GALACTIC, 0, 266.4049882865447, -28.936177761791473,
                  0.0, 0.0, 1e-10);
    /* The Crab nebula, ICRS to galactic. */
    check_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_GALACTIC, 0, 83.6331, 22.0145,
                  184.5574661924734, -5.784343652078102, 1e-10);
}
END_TEST

/* ICRS -> FK5 J2000 is the frame bias: tens of milliarcseconds, as astropy computes it. */
START_TEST(test_icrs_fk5_bias)
{
    static const double cases[3][5] = {
        /* ICRS lon, lat; FK5 lon, lat; separation in mas */
        { 0.0, 0.0, 6.3611113549858424e-06, 2.5277771640709686e-06, 24.6418 },
        { 90.0, 30.0, 90.00000782052385, 29.999994472221907, 31.4721 },
        { 200.0, -60.0, 200.0000168555431, -60.00000048472157, 30.3901 },
    };
    for (int i = 0; i < 3; i++) {
        const double *c = cases[i];
        check_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_FK5, 2000.0, c[0], c[1], c[2], c[3], 1e-10);
        double l = c[0], b = c[1];
        sky_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_FK5, 2000.0, 1, &l, &b);
        double mas = sep_deg(c[0], c[1], l, b) * 3.6e6;
        ck_assert_msg(fabs(mas - c[4]) < 1e-3, "bias %.4f mas, want %.4f", mas, c[4]);
        ck_assert(mas > 10.0 && mas < 40.0);
        check_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_ICRS, 0, c[2], c[3], c[0], c[1], 1e-10);
    }
}
END_TEST

START_TEST(test_precession_and_fk4)
{
    /* FK5 J2000 -> J2050 (IAU 2006 precession, as astropy's precession_matrix_Capitaine). */
    check_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_FK5, 2050.0, 10.0, 40.0,
                  10.682807014052074, 40.27380683556004, 1e-10);
    /* FK4 B1950 (with E-terms) -> FK5 J2000. */
    check_convert(SKY_FRAME_FK4, 1950.0, SKY_FRAME_FK5, 2000.0, 10.0, 40.0,
                  10.682811601696157, 40.27382837572751, 1e-10);
    /* ICRS -> mean ecliptic of J2000 (astropy BarycentricMeanEcliptic). */
    check_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_ECLIPTIC, 2000.0, 0.0, 0.0,
                  1.8848594922608164e-06, -5.8482058407152255e-06, 1e-10);
}
END_TEST

/* Round trips through every pair of frames come back to 1e-11 degree; through the FK4
 * <-> FK5 matrix of Standish (1982), which is not exactly orthogonal, to 7e-9 degree,
 * as in astropy (FK5 -> FK4 -> FK5 of (0, 0) misses by 6.94e-9 degree there too). */
START_TEST(test_round_trips)
{
    const sky_frame fr[5] = { SKY_FRAME_ICRS, SKY_FRAME_FK5, SKY_FRAME_FK4, SKY_FRAME_GALACTIC,
                              SKY_FRAME_ECLIPTIC };
    const double eq[5] = { 0, 2000.0, 1950.0, 0, 2000.0 };
    double lon[6] = { 0.0, 45.0, 123.456, 266.4, 300.0, 359.9 };
    double lat[6] = { 0.0, 89.5, -33.3, -28.9, 60.0, -89.0 };
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            double l[6], t[6];
            memcpy(l, lon, sizeof l);
            memcpy(t, lat, sizeof t);
            sky_convert(fr[a], eq[a], fr[b], eq[b], 6, l, t);
            sky_convert(fr[b], eq[b], fr[a], eq[a], 6, l, t);
            int via_b = (fr[a] == SKY_FRAME_FK4) != (fr[b] == SKY_FRAME_FK4)
                        && fr[a] != SKY_FRAME_GALACTIC && fr[b] != SKY_FRAME_GALACTIC;
            double tol = via_b ? 1e-8 : 1e-11;
            for (int i = 0; i < 6; i++) {
                ck_assert_msg(l[i] >= 0.0 && l[i] < 360.0, "lon %.17g", l[i]);
                ck_assert_msg(sep_deg(l[i], t[i], lon[i], lat[i]) < tol,
                              "%s<->%s point %d off by %.3e deg", sky_frame_name(fr[a]),
                              sky_frame_name(fr[b]), i, sep_deg(l[i], t[i], lon[i], lat[i]));
            }
        }
    /* Identical frames are a no-op, NaN stays NaN. */
    double l = 12.5, t = -7.25, n1 = NAN, n2 = 3.0;
    sky_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_FK5, 2000.0, 1, &l, &t);
    ck_assert_double_eq(l, 12.5);
    ck_assert_double_eq(t, -7.25);
    sky_convert(SKY_FRAME_ICRS, 0, SKY_FRAME_GALACTIC, 0, 1, &n1, &n2);
    ck_assert(isnan(n1) && isnan(n2));
}
END_TEST

START_TEST(test_frame_names)
{
    static const struct { const char *name; sky_frame f; } names[] = {
        { "icrs", SKY_FRAME_ICRS }, { "Galactic", SKY_FRAME_GALACTIC },
        { "fk5", SKY_FRAME_FK5 }, { "fk4", SKY_FRAME_FK4 }, { "ecliptic", SKY_FRAME_ECLIPTIC },
        { "Helioprojective", SKY_FRAME_HELIOPROJECTIVE },
        { "stonyhurst", SKY_FRAME_STONYHURST }, { "carrington", SKY_FRAME_CARRINGTON } };
    sky_frame f;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ck_assert_int_eq(sky_frame_parse(names[i].name, &f), 0);
        ck_assert_int_eq(f, names[i].f);
    }
    ck_assert_int_eq(sky_frame_parse("none", &f), TESS_EINVAL);
    ck_assert_int_eq(sky_frame_parse("supergalactic", &f), TESS_EINVAL);
    ck_assert_str_eq(sky_frame_name(SKY_FRAME_ICRS), "icrs");
    ck_assert_str_eq(sky_frame_name(SKY_FRAME_GALACTIC), "galactic");
    ck_assert_str_eq(sky_frame_name(SKY_FRAME_NONE), "none");
}
END_TEST

/* ---- parsing and frames by the FITS rules ----------------------------------------- */

static void check_frame(const char *extra1, const char *extra2, const char *ct1, const char *ct2,
                        sky_frame want, double want_eq)
{
    char c1[81], c2[81];
    snprintf(c1, sizeof c1, "CTYPE1  = '%s'", ct1);
    snprintf(c2, sizeof c2, "CTYPE2  = '%s'", ct2);
    const char *lines[] = { c1, c2, "CRVAL1  = 10.0", "CRVAL2  = 20.0", "CRPIX1  = 1.0",
                            "CRPIX2  = 1.0", "CDELT1  = -0.01", "CDELT2  = 0.01",
                            extra1, extra2, NULL };
    if (!extra1)
        lines[8] = NULL;
    else if (!extra2)
        lines[9] = NULL;
    skywcs *w = parse_lines(lines);
    double eq = -1;
    sky_frame f = skywcs_frame(w, &eq);
    ck_assert_msg(f == want, "%s %s %s: frame %s, want %s", ct1, extra1 ? extra1 : "",
                  extra2 ? extra2 : "", sky_frame_name(f), sky_frame_name(want));
    ck_assert_double_eq_tol(eq, want_eq, 1e-12);
    skywcs_free(w);
}

START_TEST(test_frame_rules)
{
    check_frame(NULL, NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_ICRS, 0.0);
    check_frame("EQUINOX = 2000.0", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK5, 2000.0);
    check_frame("EQUINOX = 1950.0", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK4, 1950.0);
    check_frame("EQUINOX = 1983.9", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK4, 1983.9);
    check_frame("EQUINOX = 1984.0", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK5, 1984.0);
    check_frame("EPOCH   = 1950.0", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK4, 1950.0);
    check_frame("RADESYS = 'FK5'", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK5, 2000.0);
    check_frame("RADESYS = 'FK4'", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_FK4, 1950.0);
    check_frame("RADESYS = 'ICRS'", "EQUINOX = 1950.0", "RA---TAN", "DEC--TAN", SKY_FRAME_ICRS, 0.0);
    check_frame("RADESYS = 'FK5'", "EQUINOX = 2010.5", "RA---TAN", "DEC--TAN", SKY_FRAME_FK5, 2010.5);
    check_frame("RADESYS = 'GAPPT'", NULL, "RA---TAN", "DEC--TAN", SKY_FRAME_NONE, 0.0);
    check_frame(NULL, NULL, "GLON-CAR", "GLAT-CAR", SKY_FRAME_GALACTIC, 0.0);
    check_frame("EQUINOX = 2000.0", NULL, "GLON-CAR", "GLAT-CAR", SKY_FRAME_GALACTIC, 0.0);
    check_frame(NULL, NULL, "ELON-CAR", "ELAT-CAR", SKY_FRAME_ECLIPTIC, 2000.0);
    check_frame(NULL, NULL, "HPLN-TAN", "HPLT-TAN", SKY_FRAME_HELIOPROJECTIVE, 0.0);
    check_frame(NULL, NULL, "HGLN-CAR", "HGLT-CAR", SKY_FRAME_STONYHURST, 0.0);
    check_frame(NULL, NULL, "CRLN-CEA", "CRLT-CEA", SKY_FRAME_CARRINGTON, 0.0);
}
END_TEST

START_TEST(test_parse_errors)
{
    skywcs *w = (skywcs *)&w;
    char err[256] = "";
    ck_assert_int_eq(skywcs_parse("", 0, &w, err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_null(w);
    /* Fewer characters than nkeys cards. */
    ck_assert_int_eq(skywcs_parse("NAXIS   = 2", 1, &w, err, sizeof err), TESS_EINVAL);
    /* An unknown projection code makes wcsset fail; the message names the card. */
    const char *bad[] = { "CTYPE1  = 'RA---QQQ'", "CTYPE2  = 'DEC--QQQ'", NULL };
    int nk;
    char *cards = tt_make_cards(bad, &nk);
    err[0] = '\0';
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "CTYPE1 = 'RA---QQQ'") != NULL, "err: %s", err);
    free(cards);
    /* No WCS keywords at all (wcspih would hand back a default linear WCS). */
    for (int naxis = 0; naxis <= 2; naxis += 2) {
        const char *none[] = { "SIMPLE  = T", "BITPIX  = 16",
                               naxis ? "NAXIS   = 2" : "NAXIS   = 0", NULL };
        cards = tt_make_cards(none, &nk);
        err[0] = '\0';
        ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_ENOWCS);
        ck_assert_msg(strstr(err, "no WCS") != NULL, "err: %s", err);
        free(cards);
    }
    /* A header cut inside a string value (a truncated upload): the card is left out and
     * the error names it. */
    const char *cut[] = { "NAXIS   = 2", "CTYPE1  = 'RA---T", NULL };
    cards = tt_make_cards(cut, &nk);
    err[0] = '\0';
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_ENOWCS);
    ck_assert_msg(strstr(err, "no WCS") && strstr(err, "card 2, CTYPE1,")
                      && strstr(err, "no closing quote"), "err: %s", err);
    free(cards);
    /* A string-valued WCS card with an undefined (blank) value before cards holding
     * quotes overflowed a buffer inside wcspih (glibc aborted; tests/fuzz/fuzz_header):
     * such a card defines nothing and is left out, the rest is parsed. */
    const char *undef[] = { "CTYPE1  =", "'    CRPIX", "CTYPE0  = '", NULL };
    cards = tt_make_cards(undef, &nk);
    err[0] = '\0';
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_ENOWCS);
    ck_assert_msg(strstr(err, "no WCS") != NULL, "err: %s", err);
    free(cards);
    const char *undef2[] = { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CTYPE3  =",
                             "'    X", "COMMENT = '", "CRVAL1  = 10.0", "CRVAL2  = 20.0",
                             "CDELT1  = -0.001", "CDELT2  = 0.001", NULL };
    cards = tt_make_cards(undef2, &nk);
    err[0] = '\0';
    ck_assert_msg(skywcs_parse(cards, nk, &w, err, sizeof err) == 0, "err: %s", err);
    skywcs_free(w);
    w = NULL;
    free(cards);
    /* A later WCS error names the card too; a header that parses does not mention it. */
    const char *cut2[] = { "CTYPE1  = 'RA---QQQ'", "CTYPE2  = 'DEC--QQQ'", "OBJECT  = 'M1",
                           NULL };
    cards = tt_make_cards(cut2, &nk);
    err[0] = '\0';
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "CTYPE1") && strstr(err, "OBJECT"), "err: %s", err);
    free(cards);
    const char *ok[] = { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "OBJECT  = 'M1", NULL };
    cards = tt_make_cards(ok, &nk);
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), 0);
    skywcs_free(w);
    free(cards);
    /* Bytes above 126 crashed wcspih's lexer (SEGV; tests/fuzz/fuzz_dataset, a dataset's
     * header): they are read as '?', and a WCS beside them still parses. */
    const char *high[] = { "NAXIS   = 2", "                \xe0\xdf \xdf" "1", NULL };
    cards = tt_make_cards(high, &nk);
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, err, sizeof err), TESS_ENOWCS);
    free(cards);
    const char *high2[] = { "NAXIS   = 2", "                \xe0\xdf \xdf" "1",
                            "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'",
                            "COMMENT   Fran\xe7ois", NULL };
    cards = tt_make_cards(high2, &nk);
    ck_assert_msg(skywcs_parse(cards, nk, &w, err, sizeof err) == 0, "err: %s", err);
    skywcs_free(w);
    free(cards);
}
END_TEST

/* ---- pixel <-> world against astropy ----------------------------------------------- */

static void check_pix(skywcs *w, double x, double y, double lon, double lat, double tol_deg)
{
    double l, b, xb, yb;
    ck_assert_int_eq(skywcs_pix2sky(w, 1, &x, &y, &l, &b), 0);
    ck_assert_msg(sep_deg(l, b, lon, lat) <= tol_deg, "(%g, %g) -> (%.15f, %.15f), want (%.15f, %.15f)",
                  x, y, l, b, lon, lat);
    ck_assert_int_eq(skywcs_sky2pix(w, 1, &l, &b, &xb, &yb), 0);
    ck_assert_double_eq_tol(xb, x, 1e-8);
    ck_assert_double_eq_tol(yb, y, 1e-8);
}

/* HorseHead.fits carries a DSS plate solution: wcslib at full relaxation turns it into
 * a TAN WCS with a DSS polynomial distortion, as astropy does; the 2MASS image has
 * EQUINOX 2000 and no RADESYS (FK5); the ROSAT map is a galactic AIT all-sky map. */
START_TEST(test_demo_headers)
{
    skywcs *hh = parse_demo("HorseHead.fits");
    double eq = -1;
    ck_assert_int_eq(skywcs_frame(hh, &eq), SKY_FRAME_ICRS);
    check_pix(hh, 0, 0, 85.39972237512458, -2.5832157206380004, 1e-10);
    check_pix(hh, 445, 446, 85.27499401702345, -2.4582964408350017, 1e-10);
    check_pix(hh, 890, 892, 85.15029560500143, -2.3333594278396843, 1e-10);
    /* A deep copy (for another thread) transforms identically. */
    skywcs *cp = skywcs_copy(hh);
    ck_assert_ptr_nonnull(cp);
    check_pix(cp, 445, 446, 85.27499401702345, -2.4582964408350017, 1e-10);
    skywcs_free(cp);
    skywcs_free(hh);

    skywcs *gc = parse_demo("gc_2mass_k.fits");
    ck_assert_int_eq(skywcs_frame(gc, &eq), SKY_FRAME_FK5);
    ck_assert_double_eq(eq, 2000.0);
    check_pix(gc, 0, 0, 266.97405524800655, -29.431392187293646, 1e-10);
    check_pix(gc, 360, 359.5, 266.4, -28.93333, 1e-10);
    check_pix(gc, 720, 719, 265.8314486584729, -28.432855911589424, 1e-10);
    skywcs_free(gc);

    skywcs *ro = parse_demo("allsky_rosat.fits");
    ck_assert_int_eq(skywcs_frame(ro, &eq), SKY_FRAME_GALACTIC);
    check_pix(ro, 239.5, 119.5, 0.0, 0.0, 1e-10);
    check_pix(ro, 100, 50, 127.90238324168074, -41.83490924101775, 1e-10);
    /* The corners of the AIT map are off the sky: NaN, and the batch goes on. */
    double x[3] = { 0, 100, NAN }, y[3] = { 0, 50, 3 }, l[3], b[3];
    ck_assert_int_eq(skywcs_pix2sky(ro, 3, x, y, l, b), 0);
    ck_assert(isnan(l[0]) && isnan(b[0]));
    ck_assert(isfinite(l[1]) && isfinite(b[1]));
    ck_assert(isnan(l[2]) && isnan(b[2]));
    skywcs_free(ro);
}
END_TEST

/* The celestial axes of a 3-D cube (RA, DEC, VOPT) as a 2-D WCS, the frame kept. */
START_TEST(test_celestial_subset)
{
    skywcs *cube = parse_testdata("equatorial_3d.fits");
    ck_assert_int_eq(skywcs_naxis(cube), 3);
    ck_assert_int_eq(skywcs_has_celestial(cube), 1);
    double x = 0, y = 0;
    double lon, lat;
    ck_assert_int_eq(skywcs_pix2sky(cube, 1, &x, &y, &lon, &lat), TESS_EINVAL);
    skywcs *cel = skywcs_celestial(cube);
    ck_assert_ptr_nonnull(cel);
    ck_assert_int_eq(skywcs_naxis(cel), 2);
    double eq;
    ck_assert_int_eq(skywcs_frame(cel, &eq), SKY_FRAME_FK5);
    ck_assert_double_eq(eq, 2000.0);
    /* CRPIX (3, 4) is CRVAL (60, 32). */
    x = 2.0;
    y = 3.0;
    ck_assert_int_eq(skywcs_pix2sky(cel, 1, &x, &y, &lon, &lat), 0);
    ck_assert_double_eq_tol(lon, 60.0, 1e-12);
    ck_assert_double_eq_tol(lat, 32.0, 1e-12);
    skywcs_free(cel);
    skywcs_free(cube);

    const char *lin[] = { "CTYPE1  = 'LINEAR'", "CTYPE2  = 'LINEAR'", NULL };
    skywcs *w = parse_lines(lin);
    ck_assert_int_eq(skywcs_has_celestial(w), 0);
    ck_assert_ptr_null(skywcs_celestial(w));
    skywcs_free(w);
}
END_TEST

START_TEST(test_describe)
{
    skywcs_summary s;
    skywcs *gc = parse_demo("gc_2mass_k.fits");
    skywcs_describe(gc, &s);
    ck_assert_int_eq(s.naxis, 2);
    ck_assert_str_eq(s.ctype[0], "RA---TAN");
    ck_assert_str_eq(s.ctype[1], "DEC--TAN");
    ck_assert_str_eq(s.cunit[0], "deg");
    ck_assert_double_eq(s.crpix[0], 361.0);
    ck_assert_double_eq(s.crpix[1], 360.5);
    ck_assert_double_eq(s.crval[0], 266.4);
    ck_assert_double_eq(s.cdelt[0], -0.001388889);
    ck_assert_int_eq(s.has_cd, 0);
    ck_assert_int_eq(s.frame, SKY_FRAME_FK5);
    ck_assert_double_eq(s.equinox, 2000.0);
    skywcs_free(gc);

    const char *cd[] = { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRVAL1  = 85.25",
                         "CRVAL2  = -2.45", "CRPIX1  = 200.5", "CRPIX2  = 150.5",
                         "CD1_1   = -0.0004", "CD1_2   = 0.0001", "CD2_1   = 0.0002",
                         "CD2_2   = 0.0003", "RADESYS = 'ICRS'", NULL };
    skywcs *w = parse_lines(cd);
    skywcs_describe(w, &s);
    ck_assert_int_eq(s.has_cd, 1);
    ck_assert_double_eq(s.cd[0], -0.0004);
    ck_assert_double_eq(s.cd[1], 0.0001);
    ck_assert_double_eq(s.cd[2], 0.0002);
    ck_assert_double_eq(s.cd[3], 0.0003);
    ck_assert_int_eq(s.frame, SKY_FRAME_ICRS);
    ck_assert_double_eq(s.equinox, 0.0);
    skywcs_free(w);
}
END_TEST

/* skywcs_zaxis: the linear third axis of a cube, world = CRVAL3 + (k + 1 - CRPIX3) CDELT3
 * at 0-based plane k, with its CTYPE3 and CUNIT3; the demo cube matches astropy (see
 * test_slices' series); a 2-D WCS has no z axis. */
START_TEST(test_zaxis)
{
    const char *cube[] = { "NAXIS   = 3", "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'",
                           "CRVAL1  = 10", "CRVAL2  = 20", "CDELT1  = -0.01", "CDELT2  = 0.01",
                           "CTYPE3  = 'VRAD'", "CUNIT3  = 'm/s'", "CRVAL3  = 1000.0",
                           "CDELT3  = -250.0", "CRPIX3  = 2.0", NULL };
    skywcs *w = parse_lines(cube);
    double v[4];
    char ctype[72], cunit[72];
    ck_assert_int_eq(skywcs_zaxis(w, 3.0, 4.0, 4, v, ctype, sizeof ctype, cunit, sizeof cunit),
                     0);
    ck_assert_str_eq(ctype, "VRAD");
    ck_assert_str_eq(cunit, "m/s");
    ck_assert_double_eq_tol(v[0], 1250.0, 1e-9);
    ck_assert_double_eq_tol(v[1], 1000.0, 1e-9);
    ck_assert_double_eq_tol(v[3], 500.0, 1e-9);
    skywcs_free(w);

    skywcs *l = parse_demo("l1448_13co.fits");
    double z[53];
    ck_assert_int_eq(skywcs_zaxis(l, 50.0, 50.0, 53, z, ctype, sizeof ctype, cunit,
                                  sizeof cunit), 0);
    ck_assert_str_eq(ctype, "VOPT");
    ck_assert_str_eq(cunit, "m s-1");
    ck_assert_double_eq_tol(z[0], 2528.19489695, 1e-8);
    ck_assert_double_eq_tol(z[52], 5982.222616949999, 1e-8);
    skywcs_free(l);

    skywcs *gc = parse_demo("gc_2mass_k.fits");
    strcpy(ctype, "x");
    ck_assert_int_eq(skywcs_zaxis(gc, 0.0, 0.0, 4, v, ctype, sizeof ctype, cunit,
                                  sizeof cunit), TESS_EINVAL);
    ck_assert_str_eq(ctype, "");
    skywcs_free(gc);
}
END_TEST

/* ---- cutout headers ------------------------------------------------------------------ */

/* The horsehead reference target (400x300 TAN, 0.0005 deg/px, rotated 30 deg, written
 * with CD cards) is the same WCS as the cutout header for its parameters. */
START_TEST(test_cutout_header_rotation)
{
    char path[1024];
    int nk, rk;
    char *cards = NULL;
    char err[256] = "";
    ck_assert_int_eq(skywcs_cutout_header(85.25, -2.45, 0.2, 400, 300, "TAN", SKY_FRAME_ICRS,
                                          30.0, NULL, &cards, &nk, err, sizeof err), 0);
    ck_assert_int_eq((int)strlen(cards), nk * 80);
    snprintf(path, sizeof path, "%s/reference/horsehead_rot30_bilinear.target.hdr",
             TESSERA_TESTDATA_DIR);
    char *rcards = tt_read_hdr_file(path, &rk);
    skywcs *a = NULL, *b = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &a, err, sizeof err), 0);
    ck_assert_int_eq(skywcs_parse(rcards, rk, &b, err, sizeof err), 0);
    ck_assert_int_eq(skywcs_frame(a, NULL), SKY_FRAME_ICRS);
    double x[5] = { 0, 399, 0, 399, 199.5 }, y[5] = { 0, 0, 299, 299, 149.5 };
    double la[5], ba[5], lb[5], bb[5];
    skywcs_pix2sky(a, 5, x, y, la, ba);
    skywcs_pix2sky(b, 5, x, y, lb, bb);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(sep_deg(la[i], ba[i], lb[i], bb[i]) < 1e-12, "pixel %d", i);
    ck_assert_double_eq_tol(la[4], 85.25, 1e-12);
    ck_assert_double_eq_tol(ba[4], -2.45, 1e-12);
    skywcs_free(a);
    skywcs_free(b);
    free(rcards);
    free(cards);
}
END_TEST

/* A galactic AIT cutout: centre, pixel scale along the larger side, north up. */
START_TEST(test_cutout_header_galactic)
{
    char *cards = NULL;
    int nk;
    ck_assert_int_eq(skywcs_cutout_header(10.0, -5.0, 2.0, 200, 100, "AIT", SKY_FRAME_GALACTIC,
                                          0.0, NULL, &cards, &nk, NULL, 0), 0);
    ck_assert_ptr_nonnull(strstr(cards, "CTYPE1  = 'GLON-AIT'"));
    ck_assert_ptr_nonnull(strstr(cards, "CTYPE2  = 'GLAT-AIT'"));
    skywcs *w = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), 0);
    ck_assert_int_eq(skywcs_frame(w, NULL), SKY_FRAME_GALACTIC);
    double x[3] = { 99.5, 99.5, 100.5 }, y[3] = { 49.5, 50.5, 49.5 }, l[3], b[3];
    skywcs_pix2sky(w, 3, x, y, l, b);
    ck_assert_double_eq_tol(l[0], 10.0, 1e-12);
    ck_assert_double_eq_tol(b[0], -5.0, 1e-12);
    /* One pixel up is 0.01 deg north, one pixel right 0.01 deg towards smaller l. */
    ck_assert_double_eq_tol(sep_deg(l[0], b[0], l[1], b[1]), 0.01, 1e-8);
    ck_assert(b[1] > b[0]);
    ck_assert_double_eq_tol(sep_deg(l[0], b[0], l[2], b[2]), 0.01, 1e-8);
    ck_assert(l[2] < l[0]);
    skywcs_free(w);
    free(cards);
}
END_TEST

/* Solar cutouts put the longitude increasing to the right (CDELT1 > 0: solar west for
 * helioprojective, as AIA and sunpy write it), helioprojective in arcseconds. */
START_TEST(test_cutout_header_solar_orientation)
{
    solar_obs sol = { .known = 1, .lon = 0.0, .lat = 1.0, .dist = 1.47e11, .rsun = 696e6,
                      .has_carr = 1, .carr_off = 100.0 };
    char *cards = NULL;
    int nk;
    double px = 2455.5 / 128.0;
    ck_assert_int_eq(skywcs_cutout_header_solar(0.0, 0.0, 2455.5 / 3600.0, 128, 128, "TAN",
                                                SKY_FRAME_HELIOPROJECTIVE, &sol, 0.0, NULL,
                                                &cards, &nk, NULL, 0), 0);
    ck_assert_ptr_nonnull(strstr(cards, "CUNIT1  = 'arcsec'"));
    ck_assert_ptr_nonnull(strstr(cards, "CUNIT2  = 'arcsec'"));
    skywcs *w = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), 0);
    ck_assert_int_eq(skywcs_frame(w, NULL), SKY_FRAME_HELIOPROJECTIVE);
    skywcs_summary s;
    skywcs_describe(w, &s);
    ck_assert_double_eq_tol(s.cdelt[0] * 3600.0, px, 1e-9);
    ck_assert_double_eq_tol(s.cdelt[1] * 3600.0, px, 1e-9);
    double x[3] = { 63.5, 64.5, 63.5 }, y[3] = { 63.5, 63.5, 64.5 }, l[3], b[3];
    skywcs_pix2sky(w, 3, x, y, l, b);
    ck_assert(l[1] > l[0]); /* one pixel right: west */
    ck_assert(b[2] > b[1]);
    skywcs_free(w);
    free(cards);
    ck_assert_int_eq(skywcs_cutout_header_solar(120.0, 0.0, 60.0, 120, 60, "CAR",
                                                SKY_FRAME_CARRINGTON, &sol, 0.0, NULL,
                                                &cards, &nk, NULL, 0), 0);
    ck_assert_ptr_nonnull(strstr(cards, "CUNIT1  = 'deg'"));
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), 0);
    skywcs_describe(w, &s);
    ck_assert_double_eq_tol(s.cdelt[0], 0.5, 1e-12);
    skywcs_pix2sky(w, 3, x, y, l, b);
    ck_assert(l[1] > l[0]);
    skywcs_free(w);
    free(cards);
}
END_TEST

START_TEST(test_cutout_header_errors)
{
    char *cards = (char *)1;
    int nk = 7;
    char err[256] = "";
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 10, 10, "XYZ", SKY_FRAME_ICRS, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_null(cards);
    ck_assert_int_eq(nk, 0);
    ck_assert_ptr_nonnull(strstr(err, "projection"));
    ck_assert_int_eq(skywcs_cutout_header(0, 91, 1, 10, 10, "TAN", SKY_FRAME_ICRS, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "lat"));
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 0, 10, 10, "TAN", SKY_FRAME_ICRS, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "fov"));
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 0, 10, "TAN", SKY_FRAME_ICRS, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(skywcs_cutout_header(NAN, 0, 1, 10, 10, "TAN", SKY_FRAME_ICRS, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 10, 10, "TAN", SKY_FRAME_NONE, 0, NULL, &cards, &nk,
                                          err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 10, 10, "TAN", SKY_FRAME_ICRS, INFINITY, NULL, &cards,
                                          &nk, err, sizeof err), TESS_EINVAL);
    /* Lower case codes are accepted. */
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 10, 10, "sin", SKY_FRAME_FK5, 0, NULL, &cards, &nk,
                                          err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(cards, "'RA---SIN'"));
    free(cards);
}
END_TEST

/* ---- solar frames -------------------------------------------------------------------- */

/* The observers of SDO/AIA and STEREO-A on 2011-02-15 (the headers of the real AIA and
 * SECCHI files under tests/data; STEREO-A's observer taken at AIA's time). */
static const char *const aia_lines[] = {
    "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CUNIT1  = 'arcsec'",
    "CUNIT2  = 'arcsec'", "CRPIX1  = 64.5", "CRPIX2  = 64.5", "CRVAL1  = 0.0",
    "CRVAL2  = 0.0", "CDELT1  = 19.183648", "CDELT2  = 19.183648",
    "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544",
    "DSUN_OBS= 147724815128.0", "CRLN_OBS= 22.814522", "RSUN_REF= 696000000.0", NULL };
static const char *const sta_lines[] = {
    "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CUNIT1  = 'arcsec'",
    "CUNIT2  = 'arcsec'", "CRPIX1  = 64.5", "CRPIX2  = 64.5", "CRVAL1  = 0.0",
    "CRVAL2  = 0.0", "CDELT1  = 25.4", "CDELT2  = 25.4",
    "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 87.0595795624",
    "HGLT_OBS= -2.81251143039", "DSUN_OBS= 143667689819.0", "RSUN_REF= 695700000.0", NULL };

START_TEST(test_solar_headers)
{
    skywcs *a = parse_lines(aia_lines);
    ck_assert_int_eq(skywcs_frame(a, NULL), SKY_FRAME_HELIOPROJECTIVE);
    const solar_obs *o = skywcs_solar(a);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(o->known, 1);
    ck_assert_double_eq(o->lon, 0.0);
    ck_assert_double_eq(o->lat, -6.820544);
    ck_assert_double_eq(o->dist, 147724815128.0);
    ck_assert_double_eq(o->rsun, 696000000.0);
    ck_assert_int_eq(o->has_carr, 1);
    /* sunpy's offset (L0 with the light travel time to the observer: 22.745784044, the
     * Carrington longitude sunpy 4.1 gives this observer), not the header's CRLN_OBS;
     * Tessera's L0 (ERFA's Earth, as sunpy's) within 1 mas (2.78e-7 degree) of sunpy's. */
    ck_assert_double_eq_tol(o->carr_off, 22.745784044, 2.78e-7);
    ck_assert_double_eq(o->carr_off, solar_carrington_offset(o->jd, o->dist));
    ck_assert_str_eq(o->date, "2011-02-15T00:00:00.34");
    skywcs_free(a);

    /* Heliographic frames; the IAU radius by default; the observer from HEEQ. */
    const char *hg[] = { "CTYPE1  = 'HGLN-CAR'", "CTYPE2  = 'HGLT-CAR'", "CRPIX1  = 180.5",
                         "CRPIX2  = 90.5", "CDELT1  = 1.0", "CDELT2  = 1.0",
                         "HEEQ_X  = 1.0E11", "HEEQ_Y  = 1.0E11", "HEEQ_Z  = 0.0", NULL };
    skywcs *h = parse_lines(hg);
    ck_assert_int_eq(skywcs_frame(h, NULL), SKY_FRAME_STONYHURST);
    o = skywcs_solar(h);
    ck_assert_double_eq(o->rsun, SOLAR_RSUN_IAU);
    ck_assert_int_eq(o->known, 1);
    ck_assert_double_eq_tol(o->lon, 45.0, 1e-12);
    ck_assert_double_eq_tol(o->dist, sqrt(2.0) * 1e11, 1e-3);
    ck_assert_int_eq(o->has_carr, 0);
    ck_assert_str_eq(o->date, "");
    skywcs_free(h);
    const char *cr[] = { "CTYPE1  = 'CRLN-CEA'", "CTYPE2  = 'CRLT-CEA'", "CRPIX1  = 180.5",
                         "CRPIX2  = 90.5", "CDELT1  = 1.0", "CDELT2  = 1.0",
                         "DATE-AVG= '2011-02-15T00:14:08.010'", "DATE-OBS= '2011-02-15'", NULL };
    skywcs *c = parse_lines(cr);
    ck_assert_int_eq(skywcs_frame(c, NULL), SKY_FRAME_CARRINGTON);
    ck_assert_int_eq(skywcs_solar(c)->known, 0);
    ck_assert_str_eq(skywcs_solar(c)->date, "2011-02-15");
    /* A sky WCS has no solar description. */
    skywcs *sky = parse_demo("HorseHead.fits");
    ck_assert_ptr_null(skywcs_solar(sky));
    skywcs_free(sky);
    skywcs_free(c);

    ck_assert_str_eq(sky_frame_axes(SKY_FRAME_CARRINGTON), "CRLN/CRLT");
    ck_assert_int_eq(sky_frame_is_solar(SKY_FRAME_ICRS), 0);
    /* sky_convert does not cross between sky and Sun. */
    double lon = 10.0, lat = 20.0;
    sky_convert(SKY_FRAME_HELIOPROJECTIVE, 0, SKY_FRAME_ICRS, 0, 1, &lon, &lat);
    ck_assert(isnan(lon) && isnan(lat));
}
END_TEST

/* Expected values computed with sunpy 4.1.2 and astropy 5.2.1 (Debian 12): SkyCoord(Tx,
 * Ty, frame=Helioprojective(observer=..., obstime=2011-02-15T00:00:00.340, rsun=...))
 * .transform_to(...) with the observers of aia_lines and sta_lines as
 * HeliographicStonyhurst coordinates at that obstime; the screen values within
 * Helioprojective.assume_spherical_screen(AIA's observer).  Tolerance 1e-7 arcsec
 * (0.0001 mas) for helioprojective, 1e-8 degree (0.036 mas) on the sphere for
 * heliographic (the points 20-70" inside the limb differ by up to 3e-9 degree: the line of sight meets the
 * sphere at a grazing angle there, and the two computations round differently). */
START_TEST(test_solar_points)
{
    skywcs *a = parse_lines(aia_lines), *b = parse_lines(sta_lines);
    const solar_obs *oa = skywcs_solar(a), *ob = skywcs_solar(b);
    static const struct {
        double tx, ty, hlon, hlat, btx, bty, stx, sty;
    } pts[] = {
        { 0, 0, 0.0, -6.820544, -991.139164269, -116.061436623, 0.0, 0.0 },
        { -500, 300, -31.619098595038, 12.131321934208, -855.102825375, 186.304644727,
          -63.636971966, 280.005954389 },
        { 700, -650, 81.488701116826, -43.307435362907, -70.848417866, -651.450778636,
          114.349851782, -630.297806335 },
        { 900, 100, 67.833774620862, 3.348334260218, -329.984301140, 104.987094971,
          33.398096132, 147.773182127 },
        { -100, -950, -55.345908588805, -82.820328029931, -76.171680418, -994.828945161,
          108.293075088, -974.043233172 },
    };
    solar_obs hgs = *oa;     /* Stonyhurst with AIA's rsun, as sunpy's frame had */
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        double lon = pts[i].tx / 3600.0, lat = pts[i].ty / 3600.0;
        solar_convert(SKY_FRAME_HELIOPROJECTIVE, oa, SKY_FRAME_STONYHURST, &hgs, SOLAR_SPHERE,
                      NULL, 1, &lon, &lat);
        double want = pts[i].hlon < 0 ? pts[i].hlon + 360.0 : pts[i].hlon;
        ck_assert_msg(fabs(lon - want) * cos(lat * M_PI / 180.0) < 1e-8 &&
                      fabs(lat - pts[i].hlat) < 1e-8,
                      "point %zu: HGS (%.12f, %.12f)", i, lon, lat);
        /* And back onto AIA's view. */
        solar_convert(SKY_FRAME_STONYHURST, &hgs, SKY_FRAME_HELIOPROJECTIVE, oa, SOLAR_SPHERE,
                      NULL, 1, &lon, &lat);
        double tx = (lon > 180 ? lon - 360 : lon) * 3600.0;
        ck_assert_msg(fabs(tx - pts[i].tx) < 1e-7 && fabs(lat * 3600.0 - pts[i].ty) < 1e-7,
                      "point %zu: back %.9f %.9f", i, tx, lat * 3600.0);
        for (int screen = 0; screen < 2; screen++) {
            lon = pts[i].tx / 3600.0;
            lat = pts[i].ty / 3600.0;
            solar_convert(SKY_FRAME_HELIOPROJECTIVE, oa, SKY_FRAME_HELIOPROJECTIVE, ob,
                          screen ? SOLAR_SCREEN : SOLAR_SPHERE, oa, 1, &lon, &lat);
            tx = (lon > 180 ? lon - 360 : lon) * 3600.0;
            double wx = screen ? pts[i].stx : pts[i].btx, wy = screen ? pts[i].sty : pts[i].bty;
            ck_assert_msg(fabs(tx - wx) < 1e-7 && fabs(lat * 3600.0 - wy) < 1e-7,
                          "point %zu screen %d: STEREO-A (%.9f, %.9f)", i, screen, tx,
                          lat * 3600.0);
        }
    }
    /* Stonyhurst points seen by AIA. */
    static const double hg[][4] = { { 10, 20, 159.234675165, 438.644472170 },
                                    { -40, -15, -605.563926277, -164.938507281 },
                                    { 80, 5, 954.121993648, 104.142225697 } };
    for (size_t i = 0; i < 3; i++) {
        double lon = hg[i][0], lat = hg[i][1];
        solar_convert(SKY_FRAME_STONYHURST, &hgs, SKY_FRAME_HELIOPROJECTIVE, oa, SOLAR_SPHERE,
                      NULL, 1, &lon, &lat);
        double tx = (lon > 180 ? lon - 360 : lon) * 3600.0;
        ck_assert_msg(fabs(tx - hg[i][2]) < 1e-7 && fabs(lat * 3600.0 - hg[i][3]) < 1e-7,
                      "HGS point %zu: (%.9f, %.9f)", i, tx, lat * 3600.0);
    }
    /* Off the disk (1100" from the centre; the limb is at 971.8"): NaN, as in sunpy. */
    double lon = 1100.0 / 3600.0, lat = 0.0;
    solar_convert(SKY_FRAME_HELIOPROJECTIVE, oa, SKY_FRAME_STONYHURST, &hgs, SOLAR_SPHERE, NULL,
                  1, &lon, &lat);
    ck_assert(isnan(lon) && isnan(lat));
    /* Carrington = Stonyhurst + sunpy's L0 with the light travel time to the observer. */
    lon = 10.0;
    lat = 20.0;
    solar_convert(SKY_FRAME_STONYHURST, &hgs, SKY_FRAME_CARRINGTON, oa, SOLAR_SPHERE, NULL, 1,
                  &lon, &lat);
    ck_assert_double_eq_tol(lon, 32.745784044, 2.78e-7);
    ck_assert_double_eq_tol(lat, 20.0, 1e-12);
    /* One observer: helioprojective to itself is the identity, off the disk too. */
    lon = 1100.0 / 3600.0;
    lat = 0.0;
    solar_convert(SKY_FRAME_HELIOPROJECTIVE, oa, SKY_FRAME_HELIOPROJECTIVE, oa, SOLAR_SPHERE,
                  NULL, 1, &lon, &lat);
    ck_assert_double_eq_tol(lon, 1100.0 / 3600.0, 1e-15);
    skywcs_free(a);
    skywcs_free(b);
}
END_TEST

/* The Stonyhurst frame between two times against sunpy 4.1.2 (astropy 5.2.1's ERFA
 * ephemeris): SkyCoord(0 deg, 0 deg, 1 au, HeliographicStonyhurst(obstime=t1))
 * .transform_to(HeliographicStonyhurst(obstime=t1 + dt)), whose longitude is the
 * rotation (and the Sun's barycentric motion, 4e-6 degree a day at 1 au).  With ERFA's
 * epv00 Earth and Sun, as astropy's, measured within 1.2e-10 degree for every span
 * (latitude within 1e-12); held to 1 mas (2.78e-7 degree).  The way back is the inverse
 * motion up to rounding: within 1 mm of 1 au (a few units in the last place). */
/* The Carrington longitude of Stonyhurst longitude 0 for an observer at the Earth's
 * distance, 0.3 au and 1.05 au (sunpy 4.1: SkyCoord(0, 0, d, HeliographicStonyhurst)
 * to HeliographicCarrington(observer="self"), L0 with its light-travel corrections;
 * the Earth's distance from sunpy.coordinates.sun.earth_distance), against
 * solar_carrington_offset: within 1 mas (2.78e-7 degree; 5e-9 degree measured for
 * 1995-2024 with ERFA's epv00 Earth, where Meeus' truncated VSOP87D was 4.2e-5 off). */
/* The observer from each form of the FITS solar conventions (solar_read_header): the AIA
 * observer of aia_lines (Stonyhurst 0, -6.820544, 147724815128 m at its DATE-OBS)
 * restated by sunpy 4.1 as Carrington (observer "self"), HCI, HAE (equinox J2000) and
 * HEE coordinates; each gives it back within 1 mas (2.78e-7 degree), but HCI's and
 * HEE's. HCI's longitude within 2e-6 degree: sunpy 4.1 finds the HCI axes from the
 * ecliptic pole as a point 1 m from the Sun carried through the barycentric frame
 * (_rotation_matrix_hgs_to_hci), where adding and removing the Sun's 7e8 m offset rounds
 * that 1 m vector by 1e-7 of it: its pole's HGS longitude on this date is 1.509e-6
 * degree off that of the pole at 1 au (or 1 km), and so is HCI's X axis; Tessera's axes
 * are the exact ones (1.509e-6 here). HEE's within 1e-6 degree: sunpy's
 * _rotation_matrix_hme_to_hee tilts the Sun-Earth vector onto X by an angle from arccos
 * of its cosine, which near 1 resolves no better than sqrt(2^-52) radian (8.54e-7
 * degree): its X axis is that far from the Sun-Earth direction here (HEE's unit vectors
 * through sunpy against the exact axes), the latitude read back 5.7e-7 degree off.  The
 * forms need a date but HGLN_OBS's and HEEQ's; HGLN_OBS, HGLT_OBS, DSUN_OBS come first. */
START_TEST(test_solar_observer_forms)
{
    static const char *const date = "DATE-OBS= '2011-02-15T00:00:00.34'";
    static const char *const forms[][4] = {
        { "CRLN_OBS= 22.745784044", "CRLT_OBS= -6.820544", "DSUN_OBS= 147724815128.0", NULL },
        { "HCIX_OBS= 50463895110.169319", "HCIY_OBS= 137725202544.829956",
          "HCIZ_OBS= -17543798873.025467", NULL },
        { "HAEX_OBS= -122167165963.596420", "HAEY_OBS= 83053020540.040085",
          "HAEZ_OBS= -18552642.227651", NULL },
        { "HEEX_OBS= 147724814178.355225", "HEEY_OBS= 726999.245132",
          "HEEZ_OBS= -16734504.911948", NULL },
    };
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        for (int dated = 0; dated < 2; dated++) {
            const char *lines[6] = { forms[f][0], forms[f][1], forms[f][2],
                                     dated ? date : NULL, NULL, NULL };
            int nk;
            char *cards = tt_make_cards(lines, &nk);
            solar_obs o;
            solar_read_header(cards, nk, &o);
            free(cards);
            ck_assert_int_eq(o.known, dated);
            if (!dated)
                continue;
            double tol = f == 1 ? 2e-6 : f == 3 ? 1e-6 : 2.78e-7;
            ck_assert_msg(fabs(o.lon) < tol && fabs(o.lat + 6.820544) < tol &&
                          fabs(o.dist / 147724815128.0 - 1.0) < 1e-12, "%s: %.9f %.9f %.3f",
                          forms[f][0], o.lon, o.lat, o.dist);
            /* Every dated observer has sunpy's offset; the Carrington form keeps its
             * CRLN_OBS as the observer's Carrington longitude. */
            ck_assert_int_eq(o.has_carr, 1);
            ck_assert_double_eq(o.carr_off, solar_carrington_offset(o.jd, o.dist));
            if (f == 0)
                ck_assert_double_eq_tol(o.lon + o.carr_off, 22.745784044, 1e-12);
        }
    }
    /* HGLN_OBS first: with HCI and CRLN_OBS too, the observer is HGLN_OBS's exactly. */
    const char *both[] = { "HGLN_OBS= 0.5", "HGLT_OBS= -6.0", "DSUN_OBS= 1.5E11", date,
                           forms[1][0], forms[1][1], forms[1][2], "CRLN_OBS= 23.0", NULL };
    int nk;
    char *cards = tt_make_cards(both, &nk);
    solar_obs o;
    solar_read_header(cards, nk, &o);
    free(cards);
    ck_assert(o.known && o.lon == 0.5 && o.lat == -6.0 && o.dist == 1.5e11);
    ck_assert(o.has_carr && o.carr_off == solar_carrington_offset(o.jd, o.dist));
    /* sunpy's AIAMap reads HAEX/Y/Z_OBS first, EUIMap (Solar Orbiter) HCIX/Y/Z_OBS:
     * with INSTRUME AIA or EUI the Cartesian form wins over HGLN_OBS (0.5 degree off),
     * and the observer is HGLN_OBS = 0 within 1 mas (HCI's within 2e-6 degree, above);
     * SECCHI keeps HGLN_OBS. */
    static const char *const inst[][2] = { { "INSTRUME= 'AIA_3'", NULL },
                                           { "INSTRUME= 'EUI'", "OBSRVTRY= 'Solar Orbiter'" },
                                           { "INSTRUME= 'SECCHI'", NULL },
                                           { "INSTRUME= 'EUI'", NULL } };
    for (size_t i = 0; i < 4; i++) {
        const char *const *cart = forms[i == 0 ? 2 : 1];
        const char *l[] = { "HGLN_OBS= 0.5", "HGLT_OBS= -6.820544", "DSUN_OBS= 147724815128.0",
                            date, cart[0], cart[1], cart[2], inst[i][0],
                            inst[i][1], NULL };
        cards = tt_make_cards(l, &nk);
        solar_read_header(cards, nk, &o);
        free(cards);
        ck_assert_msg(o.known && fabs(o.lon - (i < 2 ? 0.0 : 0.5)) < (i == 1 ? 2e-6 : 2.78e-7),
                      "%zu: %.9f", i, o.lon);
    }
    /* A Cartesian position at the origin is no observer. */
    const char *zero[] = { "HAEX_OBS= 0.0", "HAEY_OBS= 0.0", "HAEZ_OBS= 0.0", date, NULL };
    cards = tt_make_cards(zero, &nk);
    solar_read_header(cards, nk, &o);
    free(cards);
    ck_assert_int_eq(o.known, 0);
    /* A helioprojective WCS without an observer names every form it could have used. */
    const char *bare[] = { "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CDELT1  = 0.001",
                           "CDELT2  = 0.001", NULL };
    skywcs *n = parse_lines(bare), *a = parse_lines(aia_lines);
    char err[400] = "";
    ck_assert_int_eq(skywcs_check_pair(n, a, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "CRLN_OBS") && strstr(err, "HCIX/Y/Z_OBS") &&
                  strstr(err, "HAEX/Y/Z_OBS") && strstr(err, "HEEX/Y/Z_OBS"), "err: %s", err);
    skywcs_free(n);
    skywcs_free(a);
}
END_TEST

START_TEST(test_solar_carrington_offset)
{
    static const struct {
        const char *t;
        double dist, off;
    } ref[] = {
        { "1995-03-01T00:00:00", 148214727750.4, 292.111858964 },
        { "1995-03-01T00:00:00", 44879361210.0, 292.055270812 },
        { "1995-03-01T00:00:00", 157077764235.0, 292.116712509 },
        { "2003-10-28T00:00:00", 148664664138.0, 301.233136437 },
        { "2003-10-28T00:00:00", 44879361210.0, 301.176301893 },
        { "2003-10-28T00:00:00", 157077764235.0, 301.237743589 },
        { "2011-02-15T00:00:00.340", 147740323428.2, 22.745792537 },
        { "2011-02-15T00:00:00.340", 44879361210.0, 22.689464177 },
        { "2011-02-15T00:00:00.340", 157077764235.0, 22.750905874 },
        { "2020-07-01T12:00:00", 152093029874.7, 182.286304392 },
        { "2020-07-01T12:00:00", 44879361210.0, 182.227592418 },
        { "2020-07-01T12:00:00", 157077764235.0, 182.289034115 },
        { "2024-10-01T06:30:00", 149770323935.1, 205.901343481 },
        { "2024-10-01T06:30:00", 44879361210.0, 205.843903459 },
        { "2024-10-01T06:30:00", 157077764235.0, 205.905345156 },
    };
    double worst = 0.0;
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double jd;
        ck_assert_int_eq(solar_parse_date(ref[i].t, &jd), 0);
        double off = solar_carrington_offset(jd, ref[i].dist);
        double d = fabs(fmod(off - ref[i].off + 540.0, 360.0) - 180.0);
        ck_assert_msg(off >= 0.0 && off < 360.0 && d < 2.78e-7, "%s at %.4g m: %.9f", ref[i].t,
                      ref[i].dist, off);
        worst = fmax(worst, d);
    }
    printf("Carrington offset: worst %.2e degree against sunpy\n", worst);
    /* The Earth's distance within 1e-10 of sunpy's (ERFA epv00, as here). */
    double jd, e[3];
    ck_assert_int_eq(solar_parse_date("2011-02-15T00:00:00.340", &jd), 0);
    solar_earth(jd, e);
    ck_assert_double_eq_tol(sqrt(e[0] * e[0] + e[1] * e[1] + e[2] * e[2]) / 147740323428.2,
                            1.0, 1e-10);
    /* UTC to TT across the leap second of 2012-07-01: 66.184 s, then 67.184 s. */
    ck_assert_int_eq(solar_parse_date("2012-06-30T23:59:59", &jd), 0);
    ck_assert_double_eq_tol((solar_tt(jd) - jd) * 86400.0, 66.184, 1e-4);
    ck_assert_int_eq(solar_parse_date("2012-07-01T00:00:00", &jd), 0);
    ck_assert_double_eq_tol((solar_tt(jd) - jd) * 86400.0, 67.184, 1e-4);
}
END_TEST

START_TEST(test_solar_motion)
{
    static const struct {
        const char *t1;
        double dt, lon, lat;
    } ref[] = {
        { "2011-02-15T00:00:00.340", 14.0 / 1440, -0.009883095333, -0.000000179134 },
        { "2020-07-01T12:00:00", 14.0 / 1440, -0.009211972523, 0.000000348175 },
        { "2003-10-28T00:00:00", 14.0 / 1440, -0.009697384253, -0.000000126997 },
        { "2011-02-15T00:00:00.340", 14.55 / 1440, -0.010271359253, -0.000000186171 },
        { "2011-02-15T00:00:00.340", 1.0 / 24, -0.042355937089, -0.000000767746 },
        { "2020-07-01T12:00:00", 1.0 / 24, -0.039479944963, 0.000001492143 },
        { "2011-02-15T00:00:00.340", 0.5, -0.508239199538, -0.000009218263 },
        { "2003-10-28T00:00:00", 1.0, -0.997544706405, -0.000013033995 },
        { "2020-07-01T12:00:00", 1.0, -0.947568511884, 0.000035786600 },
        { "2011-02-15T00:00:00.340", 3.0, -3.048387333426, -0.000055483313 },
        { "2020-07-01T12:00:00", 10.0, -9.485017405871, 0.000355499078 },
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double jd, r[3][3], t[3], au = 149597870700.0;
        ck_assert_int_eq(solar_parse_date(ref[i].t1, &jd), 0);
        solar_hgs_motion(jd, jd + ref[i].dt, r, t);
        double x = r[0][0] * au + t[0], y = r[1][0] * au + t[1], z = r[2][0] * au + t[2];
        double lon = atan2(y, x) * 180.0 / M_PI, lat = atan2(z, hypot(x, y)) * 180.0 / M_PI;
        ck_assert_msg(fabs(lon - ref[i].lon) < 2.78e-7 && fabs(lat - ref[i].lat) < 2.78e-7,
                      "%s + %g d: (%.12f, %.12f)", ref[i].t1, ref[i].dt, lon, lat);
        /* Back again: the inverse motion. */
        double rb[3][3], tb[3], p[3] = { x, y, z }, q[3];
        solar_hgs_motion(jd + ref[i].dt, jd, rb, tb);
        for (int k = 0; k < 3; k++)
            q[k] = rb[k][0] * p[0] + rb[k][1] * p[1] + rb[k][2] * p[2] + tb[k];
        ck_assert_double_eq_tol(q[0], au, 1e-3);
        ck_assert_double_eq_tol(q[1], 0.0, 1e-3);
        ck_assert_double_eq_tol(q[2], 0.0, 1e-3);
    }
    /* Dates as FITS writes them. */
    double jd;
    ck_assert_int_eq(solar_parse_date("2000-01-01T12:00:00", &jd), 0);
    ck_assert_double_eq_tol(jd, 2451545.0, 1e-9);
    ck_assert_int_eq(solar_parse_date("2011-02-15", &jd), 0);
    ck_assert_double_eq_tol(jd, 2455607.5, 1e-9);
    ck_assert_int_eq(solar_parse_date("2011-02-15T00:14:00.006Z", &jd), 0);
    ck_assert_double_eq_tol(jd, 2455607.5 + 840.006 / 86400.0, 1e-9);
    ck_assert_int_eq(solar_parse_date("15/02/11", &jd), -1);
    ck_assert_int_eq(solar_parse_date("2011-02-15T00:14", &jd), -1);
    ck_assert_int_eq(solar_parse_date("2011-13-15", &jd), -1);
    /* ERFA's Gregorian calendar (eraCal2jd): no 30 February; 29 February in a leap year. */
    ck_assert_int_eq(solar_parse_date("2011-02-30", &jd), -1);
    ck_assert_int_eq(solar_parse_date("2012-02-29T12:00:00", &jd), 0);
    ck_assert_double_eq_tol(jd, 2455987.0, 1e-9);
    ck_assert_int_eq(solar_parse_date("2011-02-15Tx", &jd), -1);
}
END_TEST

/* AIA's view at 00:00:00.34 onto STEREO-A's at its own DATE-OBS, 00:14:00.006, against
 * sunpy 4.1.2: Helioprojective(observer=AIA's HGS at t1, obstime=t1, rsun=696000 km)
 * .transform_to(Helioprojective(observer=STEREO-A's HGS at t2, obstime=t2)) and
 * .transform_to(HeliographicStonyhurst(obstime=t2)).  Helioprojective within 1 mas;
 * Stonyhurst within 2e-6 degree (24 m on the surface, 0.03 mas seen from 1 au). */
START_TEST(test_solar_two_times)
{
    skywcs *a = parse_lines(aia_lines);
    solar_obs oa = *skywcs_solar(a), ob = oa, hgs = oa;
    ob.lon = 87.0595795624;
    ob.lat = -2.81251143039;
    ob.dist = 143667689819.0;
    ck_assert_int_eq(solar_parse_date("2011-02-15T00:14:00.006", &ob.jd), 0);
    hgs.jd = ob.jd;
    static const double pts[][6] = {
        { 0, 0, -991.156703166, -116.070809326, -0.010398127796, -6.820519658097 },
        { -500, 300, -855.031151740, 186.296184639, -31.629143787853, 12.131133005810 },
        { 700, -650, -70.983294342, -651.452406574, 81.478003156132, -43.307761070113 },
        { 900, 100, -330.156981673, 104.983174937, 67.823213550792, 3.348312231715 },
        { -100, -950, -76.164251379, -994.830574650, -55.354673778044, -82.819613157833 },
    };
    double worst = 0.0;
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        double lon = pts[i][0] / 3600.0, lat = pts[i][1] / 3600.0;
        solar_convert(SKY_FRAME_HELIOPROJECTIVE, &oa, SKY_FRAME_HELIOPROJECTIVE, &ob,
                      SOLAR_SPHERE, NULL, 1, &lon, &lat);
        double tx = (lon > 180 ? lon - 360 : lon) * 3600.0, ty = lat * 3600.0;
        double e = fmax(fabs(tx - pts[i][2]), fabs(ty - pts[i][3])) * 1000.0;
        worst = fmax(worst, e);
        ck_assert_msg(e < 1.0, "point %zu: STEREO-A (%.9f, %.9f), %.4f mas", i, tx, ty, e);
        lon = pts[i][0] / 3600.0;
        lat = pts[i][1] / 3600.0;
        solar_convert(SKY_FRAME_HELIOPROJECTIVE, &oa, SKY_FRAME_STONYHURST, &hgs, SOLAR_SPHERE,
                      NULL, 1, &lon, &lat);
        double l = lon > 180 ? lon - 360 : lon;
        ck_assert_msg(fabs(l - pts[i][4]) * cos(lat * M_PI / 180) < 2e-6 &&
                      fabs(lat - pts[i][5]) < 2e-6, "point %zu: HGS(t2) (%.12f, %.12f)", i, l,
                      lat);
    }
    printf("test_solar_two_times: worst %.4f mas against sunpy\n", worst);
    /* Stonyhurst to Stonyhurst between the two times is no longer the identity. */
    double lon = 0.0, lat = 0.0;
    solar_convert(SKY_FRAME_STONYHURST, &oa, SKY_FRAME_STONYHURST, &hgs, SOLAR_SPHERE, NULL, 1,
                  &lon, &lat);
    ck_assert(lon > 359.98 && lon < 359.995);
    skywcs_free(a);
}
END_TEST

/* A Carrington CAR map, 2 degrees a pixel, of AIA's date and observer. */
static const char *const carr_lines[] = {
    "CTYPE1  = 'CRLN-CAR'", "CTYPE2  = 'CRLT-CAR'", "CUNIT1  = 'deg'", "CUNIT2  = 'deg'",
    "CRPIX1  = 90.5", "CRPIX2  = 45.5", "CRVAL1  = 180.0", "CRVAL2  = 0.0",
    "CDELT1  = 2.0", "CDELT2  = 2.0", "DATE-OBS= '2011-02-15T00:00:00.34'",
    "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544", "DSUN_OBS= 147724815128.0",
    "CRLN_OBS= 22.814522", "CRLT_OBS= -6.820544", "RSUN_REF= 696000000.0", NULL };

/* STEREO-A's observer with AIA's solar radius (the classes need one sphere). */
static const char *const sta696_lines[] = {
    "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CUNIT1  = 'arcsec'",
    "CUNIT2  = 'arcsec'", "CRPIX1  = 64.5", "CRPIX2  = 64.5", "CRVAL1  = 0.0",
    "CRVAL2  = 0.0", "CDELT1  = 25.4", "CDELT2  = 25.4",
    "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 87.0595795624",
    "HGLT_OBS= -2.81251143039", "DSUN_OBS= 143667689819.0", "RSUN_REF= 696000000.0", NULL };

/* Both values NaN, or equal to the bit. */
static int same_or_nan(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* Checks skywcs_convert_trip from f to t on n points: the positions are skywcs_convert's
 * to the bit; class 1 keeps (blon, blat) and comes back there through skywcs_convert,
 * class 2 comes back to the (blon, blat) it gives, both within 1e-7 degree on the sphere
 * (converting from helioprojective rounds to a few 1e-9 degree: the line of sight meets
 * the sphere through a difference of squares of the distance).  Counts the classes into
 * cnt[3]. */
static void check_trip(const skywcs *f, const skywcs *t, size_t n, const double *lon,
                       const double *lat, long cnt[3])
{
    double *m = malloc(sizeof(double) * n * 6);
    unsigned char *cls = malloc(n);
    ck_assert(m && cls);
    double *al = m, *ab = m + n, *bl = m + 2 * n, *bb = m + 3 * n, *rl = m + 4 * n,
           *rb = m + 5 * n;
    for (size_t i = 0; i < n; i++) {
        al[i] = rl[i] = bl[i] = lon[i];
        ab[i] = rb[i] = bb[i] = lat[i];
    }
    ck_assert_int_eq(skywcs_convert_trip(f, t, 0.01, n, al, ab, bl, bb, cls), 1);
    skywcs_convert(f, t, n, rl, rb);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(same_or_nan(al[i], rl[i]) && same_or_nan(ab[i], rb[i]),
                      "point %zu: %.17g %.17g against %.17g %.17g", i, al[i], ab[i], rl[i],
                      rb[i]);
        ck_assert_int_le(cls[i], 2);
        cnt[cls[i]]++;
        if (cls[i] == 1) {
            ck_assert(bl[i] == lon[i] && bb[i] == lat[i]);
        } else if (cls[i] == 0) {
            ck_assert(bl[i] == lon[i] && bb[i] == lat[i]);
            continue;
        }
        double x = rl[i], y = rb[i];
        skywcs_convert(t, f, 1, &x, &y);
        double dl = fabs(x - bl[i]);
        dl = (dl > 180.0 ? 360.0 - dl : dl) * cos(y * M_PI / 180.0);
        ck_assert_msg(hypot(dl, y - bb[i]) <= 1e-7,
                      "class %d point %zu: back at %.12f %.12f, given %.12f %.12f", cls[i], i, x,
                      y, bl[i], bb[i]);
    }
    free(m);
    free(cls);
}

/* Both NaN, or within 1e-7 pixel of each other: the fused map of solar.c (solar_fastmap)
 * goes the same way as wcslib and solar_convert with other roundings.  Most pixels
 * agree within 1e-11; near the limb and a pole the conditioning makes 4e-8 (a→c pixel
 * (61, 13) at latitude -85.9: each path 2e-8 from 40-digit arithmetic). */
static int near_or_nan(double a, double b)
{
    return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-7;
}

/* Maps the w x h pixels of f onto t with rp_coordmap_points and checks them, within
 * 1e-7 pixel and with the same NaN, against the whole round trip written out here
 * (reproject's rule: NaN where the way back misses by more than one pixel), and the
 * grid's lattice against them; counts the finite results into *fin. */
static void check_points(const skywcs *f, const skywcs *t, long w, long h, long *fin)
{
    size_t n = (size_t)(w * h);
    double *m = malloc(sizeof(double) * n * 8);
    ck_assert_ptr_nonnull(m);
    double *x = m, *y = m + n, *qx = m + 2 * n, *qy = m + 3 * n, *lo = m + 4 * n,
           *la = m + 5 * n, *ex = m + 6 * n, *ey = m + 7 * n;
    for (size_t i = 0; i < n; i++) {
        x[i] = (double)(i % (size_t)w);
        y[i] = (double)(i / (size_t)w);
    }
    char err[256] = "";
    rp_coordmap *cm = rp_coordmap_new(f, t, err, sizeof err);
    ck_assert_msg(cm != NULL, "rp_coordmap_new: %s", err);
    ck_assert_int_eq(rp_coordmap_points(cm, n, x, y, qx, qy), 0);
    /* The grid's lattice (its nodes and test points take the strict rule) drops the same
     * points and places the others within its bound. */
    double *gx = malloc(sizeof(double) * n * 2);
    ck_assert_ptr_nonnull(gx);
    ck_assert_int_eq(rp_coordmap_lattice(cm, 0.0, 0.0, w, h, 1e-3, gx, gx + n, NULL), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(isnan(gx[i]) == isnan(qx[i]) &&
                      (isnan(qx[i]) || (fabs(gx[i] - qx[i]) <= 1e-3 &&
                                        fabs(gx[n + i] - qy[i]) <= 1e-3)),
                      "lattice point %zu: %.17g %.17g against %.17g %.17g", i, gx[i],
                      gx[n + i], qx[i], qy[i]);
    /* The same map again (its scratch as the last call left it): the whole lattice, and a
     * window of it at an offset, bit for bit (positions depend on the cells only). */
    double *g2 = malloc(sizeof(double) * n * 2);
    ck_assert_ptr_nonnull(g2);
    ck_assert_int_eq(rp_coordmap_lattice(cm, 0.0, 0.0, w, h, 1e-3, g2, g2 + n, NULL), 0);
    ck_assert_int_eq(memcmp(g2, gx, sizeof(double) * n * 2), 0);
    const long ox = w / 4, oy = h / 3, ww = w / 2, wh = h / 2;
    const size_t wn = (size_t)(ww * wh);
    ck_assert_int_eq(rp_coordmap_lattice(cm, (double)ox, (double)oy, ww, wh, 1e-3, g2, g2 + wn,
                                         NULL), 0);
    for (size_t i = 0; i < wn; i++) {
        const size_t o = (size_t)(oy + (long)(i / (size_t)ww)) * (size_t)w
                         + (size_t)(ox + (long)(i % (size_t)ww));
        ck_assert_msg(memcmp(&g2[i], &gx[o], sizeof(double)) == 0
                      && memcmp(&g2[wn + i], &gx[n + o], sizeof(double)) == 0,
                      "window point %zu: %.17g %.17g against %.17g %.17g", i, g2[i],
                      g2[wn + i], gx[o], gx[n + o]);
    }
    free(g2);
    free(gx);
    rp_coordmap_free(cm);
    skywcs *fc = skywcs_copy(f), *tc = skywcs_copy(t);
    ck_assert_int_eq(skywcs_pix2sky(fc, n, x, y, lo, la), 0);
    skywcs_convert(fc, tc, n, lo, la);
    ck_assert_int_eq(skywcs_sky2pix(tc, n, lo, la, ex, ey), 0);
    ck_assert_int_eq(skywcs_pix2sky(tc, n, ex, ey, lo, la), 0);
    skywcs_convert(tc, fc, n, lo, la);
    double *rx = m, *ry = m + n;   /* x, y are no longer needed after this loop's reads */
    *fin = 0;
    for (size_t i = 0; i < n; i++) {
        double px = (double)(i % (size_t)w), py = (double)(i / (size_t)w), bx, by;
        ck_assert_int_eq(skywcs_sky2pix(fc, 1, &lo[i], &la[i], &bx, &by), 0);
        if (fabs(bx - px) > 1.0 || fabs(by - py) > 1.0)
            ex[i] = ey[i] = NAN;
        rx[i] = ex[i];
        ry[i] = ey[i];
        ck_assert_msg(near_or_nan(qx[i], rx[i]) && near_or_nan(qy[i], ry[i]),
                      "pixel %zu: %.17g %.17g against %.17g %.17g", i, qx[i], qy[i], rx[i],
                      ry[i]);
        *fin += isfinite(qx[i]) ? 1 : 0;
    }
    skywcs_free(fc);
    skywcs_free(tc);
    free(m);
}

/* The fused map (solar_fastmap, behind rp_coordmap for plain solar pairs) on more
 * shapes than test_solar_trip's: a Stonyhurst CEA map, a coarse Carrington map (10
 * degree pixels: hidden points whose trips end within a pixel stay), AIA with a rotated
 * PC matrix and its reference off the disk centre, each way, against the whole round
 * trip; and the pairs it takes and leaves. */
START_TEST(test_solar_fastmap)
{
    static const char *const cea_lines[] = {
        "CTYPE1  = 'HGLN-CEA'", "CTYPE2  = 'HGLT-CEA'", "CUNIT1  = 'deg'",
        "CUNIT2  = 'deg'", "CRPIX1  = 60.5", "CRPIX2  = 30.5", "CRVAL1  = 10.0",
        "CRVAL2  = 0.0", "CDELT1  = 3.0", "CDELT2  = 1.9", "PV2_1   = 1.0",
        "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544",
        "DSUN_OBS= 147724815128.0", "RSUN_REF= 696000000.0", NULL };
    static const char *const coarse_lines[] = {
        "CTYPE1  = 'CRLN-CAR'", "CTYPE2  = 'CRLT-CAR'", "CUNIT1  = 'deg'",
        "CUNIT2  = 'deg'", "CRPIX1  = 18.5", "CRPIX2  = 9.5", "CRVAL1  = 180.0",
        "CRVAL2  = 0.0", "CDELT1  = 10.0", "CDELT2  = 10.0",
        "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544",
        "DSUN_OBS= 147724815128.0", "CRLN_OBS= 22.814522", "RSUN_REF= 696000000.0", NULL };
    static const char *const rot_lines[] = {
        "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CUNIT1  = 'arcsec'",
        "CUNIT2  = 'arcsec'", "CRPIX1  = 40.5", "CRPIX2  = 70.5", "CRVAL1  = 310.0",
        "CRVAL2  = -420.0", "CDELT1  = 21.0", "CDELT2  = 21.0", "PC1_1   = 0.9659258263",
        "PC1_2   = -0.2588190451", "PC2_1   = 0.2588190451", "PC2_2   = 0.9659258263",
        "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544",
        "DSUN_OBS= 147724815128.0", "CRLN_OBS= 22.814522", "RSUN_REF= 696000000.0", NULL };
    static const char *const sin_lines[] = {
        "CTYPE1  = 'HPLN-SIN'", "CTYPE2  = 'HPLT-SIN'", "CUNIT1  = 'arcsec'",
        "CUNIT2  = 'arcsec'", "CRPIX1  = 64.5", "CRPIX2  = 64.5", "CRVAL1  = 0.0",
        "CRVAL2  = 0.0", "CDELT1  = 19.0", "CDELT2  = 19.0",
        "DATE-OBS= '2011-02-15T00:00:00.34'", "HGLN_OBS= 0.0", "HGLT_OBS= -6.820544",
        "DSUN_OBS= 147724815128.0", "CRLN_OBS= 22.814522", "RSUN_REF= 696000000.0", NULL };
    skywcs *a = parse_lines(aia_lines), *b = parse_lines(sta696_lines);
    skywcs *e = parse_lines(cea_lines), *c = parse_lines(coarse_lines);
    skywcs *r = parse_lines(rot_lines), *sn = parse_lines(sin_lines);
    skywcs *car = parse_lines(carr_lines);
    /* STEREO-A six hours later: the Stonyhurst frame moves between the two (no class 2). */
    const char *later_lines[sizeof sta696_lines / sizeof sta696_lines[0]];
    memcpy(later_lines, sta696_lines, sizeof later_lines);
    for (size_t i = 0; later_lines[i]; i++)
        if (strncmp(later_lines[i], "DATE-OBS", 8) == 0)
            later_lines[i] = "DATE-OBS= '2011-02-15T06:00:00.34'";
    skywcs *lt = parse_lines(later_lines);
    /* The pairs the fused map takes: plain TAN, CAR, CEA with a helioprojective side. */
    skywcs *take[][2] = { { e, a }, { a, e }, { c, a }, { r, car }, { car, r }, { r, b },
                          { lt, e }, { a, lt } };
    for (size_t i = 0; i < sizeof take / sizeof take[0]; i++) {
        solar_fastmap *fm = solar_fastmap_new(take[i][0], take[i][1], 0.01);
        ck_assert_msg(fm != NULL, "pair %zu not taken", i);
        solar_fastmap_free(fm);
    }
    /* And those it leaves: SIN, two heliographic maps, the identity. */
    ck_assert_ptr_null(solar_fastmap_new(sn, car, 0.01));
    ck_assert_ptr_null(solar_fastmap_new(car, e, 0.01));
    ck_assert_ptr_null(solar_fastmap_new(a, a, 0.01));
    long fin = 0;
    check_points(e, a, 120, 60, &fin);
    ck_assert_msg(fin > 1500 && fin < 5000, "finite %ld", fin);
    check_points(a, e, 128, 128, &fin);
    ck_assert_msg(fin > 8000 && fin < 16384, "finite %ld", fin);
    check_points(c, a, 36, 18, &fin);
    ck_assert_msg(fin > 100 && fin < 500, "finite %ld", fin);
    check_points(r, car, 96, 96, &fin);
    ck_assert_msg(fin > 2000 && fin < 9216, "finite %ld", fin);
    check_points(car, r, 180, 90, &fin);
    ck_assert_msg(fin > 100 && fin < 9000, "finite %ld", fin);
    check_points(r, b, 96, 96, &fin);
    ck_assert_msg(fin > 500 && fin < 9216, "finite %ld", fin);
    check_points(lt, e, 128, 128, &fin);
    ck_assert_msg(fin > 2000 && fin < 16384, "finite %ld", fin);
    check_points(a, lt, 128, 128, &fin);
    ck_assert_msg(fin > 2000 && fin < 8000, "finite %ld", fin);
    skywcs_free(lt);
    skywcs_free(a);
    skywcs_free(b);
    skywcs_free(e);
    skywcs_free(c);
    skywcs_free(r);
    skywcs_free(sn);
    skywcs_free(car);
}
END_TEST

/* The solar round trip cut short (skywcs_convert_trip, and map_points through it): the
 * classes where they must be, the positions those give as converting back would, and
 * the pixel mapping the same to the bit as the whole round trip. */
START_TEST(test_solar_trip)
{
    skywcs *a = parse_lines(aia_lines), *b = parse_lines(sta696_lines);
    skywcs *c = parse_lines(carr_lines), *b2 = parse_lines(sta_lines);
    double carr = skywcs_solar(c)->carr_off;
    /* The centre of AIA's view, its far side, 90 degrees off (inside 0.6 degree of the
     * limb as AIA, south of the equator, sees it). */
    double lon[3] = { carr, carr + 180.0, carr + 90.0 }, lat[3] = { -6.820544, 0.0, 0.0 };
    double al[3], ab[3], bl[3], bb[3];
    unsigned char cls[3];
    memcpy(al, lon, sizeof al);
    memcpy(ab, lat, sizeof ab);
    memcpy(bl, lon, sizeof bl);
    memcpy(bb, lat, sizeof bb);
    ck_assert_int_eq(skywcs_convert_trip(c, a, 0.01, 3, al, ab, bl, bb, cls), 1);
    ck_assert_int_eq(cls[0], 1);
    ck_assert_int_eq(cls[1], 2);
    ck_assert_int_eq(cls[2], 0);
    ck_assert_double_eq_tol(al[0], 0.0, 1e-12);
    ck_assert_double_eq_tol(ab[0], 0.0, 1e-12);
    /* The far side point comes back along AIA's line of sight to the near side: in the
     * plane of AIA's meridian (Carrington longitude carr), at about twice AIA's southern
     * latitude (the far point's line of sight passes close to the Sun's centre). */
    double dl = fabs(fmod(bl[1] - carr + 540.0, 360.0) - 180.0);
    ck_assert_msg(dl < 1e-9 && bb[1] > -14.0 && bb[1] < -13.0, "far side back at %.9f %.9f",
                  bl[1], bb[1]);

    long cnt[3] = { 0, 0, 0 };
    size_t n = 180 * 90;
    double *ll = malloc(sizeof(double) * n * 2);
    ck_assert_ptr_nonnull(ll);
    for (size_t i = 0; i < n; i++) {
        ll[i] = 2.0 * (double)(i % 180) + 1.0;
        ll[n + i] = 2.0 * (double)(i / 180) - 89.0;
    }
    check_trip(c, a, n, ll, ll + n, cnt);
    ck_assert_msg(cnt[1] > 6000 && cnt[2] > 6000 && cnt[0] > 0 && cnt[0] < 800,
                  "classes %ld %ld %ld", cnt[0], cnt[1], cnt[2]);
    /* Helioprojective on both sides (AIA to STEREO-A, 87 degrees apart), and back. */
    for (size_t i = 0; i < n; i++) {
        ll[i] = -0.3 + 0.6 * (double)(i % 180) / 179.0;
        ll[n + i] = -0.3 + 0.6 * (double)(i / 180) / 89.0;
    }
    long cab[3] = { 0, 0, 0 }, cba[3] = { 0, 0, 0 };
    check_trip(a, b, n, ll, ll + n, cab);
    check_trip(b, a, n, ll, ll + n, cba);
    ck_assert_msg(cab[1] > 1000 && cab[2] > 1000 && cba[1] > 1000 && cba[2] > 1000,
                  "classes %ld %ld %ld, %ld %ld %ld", cab[0], cab[1], cab[2], cba[0], cba[1],
                  cba[2]);
    /* From the map onto AIA: no helioprojective `from` side gives class 2 only through
     * `to`; from AIA onto the map every point on the disk is seen. */
    long cam[3] = { 0, 0, 0 };
    check_trip(a, c, n, ll, ll + n, cam);
    ck_assert_msg(cam[2] == 0 && cam[1] > 1000, "classes %ld %ld %ld", cam[0], cam[1], cam[2]);
    free(ll);

    /* Pixel to pixel: the map onto AIA and back, AIA onto STEREO-A and back
     * (over 4096 points: several batches). */
    long fin = 0;
    check_points(c, a, 180, 90, &fin);
    ck_assert_msg(fin > 6000 && fin < 9000, "finite %ld", fin);
    check_points(a, c, 128, 128, &fin);
    ck_assert_msg(fin > 8000 && fin < 16384, "finite %ld", fin);
    check_points(a, b, 128, 128, &fin);
    ck_assert_msg(fin > 2000 && fin < 8000, "finite %ld", fin);
    check_points(b, a, 128, 128, &fin);
    ck_assert_msg(fin > 2000 && fin < 8000, "finite %ld", fin);

    /* STEREO-A's own radius: no classes; the whole round trip, as before. */
    double x = 0.0, y = 0.0, bx = 0.0, by = 0.0;
    unsigned char k = 9;
    ck_assert_int_eq(skywcs_convert_trip(a, b2, 0.01, 1, &x, &y, &bx, &by, &k), 0);
    ck_assert_int_eq(k, 0);
    ck_assert(isfinite(x) && isfinite(y));
    check_points(a, b2, 128, 128, &fin);
    ck_assert_msg(fin > 2000 && fin < 8000, "finite %ld", fin);
    /* No classes for a screen, the identity, or sky frames. */
    x = y = 0.0;
    k = 9;
    ck_assert_int_eq(skywcs_convert_trip(a, a, 0.01, 1, &x, &y, &bx, &by, &k), 0);
    ck_assert_int_eq(k, 0);
    skywcs *sky = parse_demo("HorseHead.fits");
    k = 9;
    x = 85.0, y = -2.0;
    ck_assert_int_eq(skywcs_convert_trip(sky, sky, 0.01, 1, &x, &y, &bx, &by, &k), 0);
    ck_assert_int_eq(k, 0);
    ck_assert_double_eq_tol(x, 85.0, 1e-12);
    skywcs_set_solar_surface(a, SOLAR_SCREEN);
    k = 9;
    x = 0.0, y = 0.0;
    ck_assert_int_eq(skywcs_convert_trip(a, b, 0.01, 1, &x, &y, &bx, &by, &k), 0);
    ck_assert_int_eq(k, 0);
    ck_assert(isfinite(x) && isfinite(y));
    skywcs_free(sky);
    skywcs_free(a);
    skywcs_free(b);
    skywcs_free(b2);
    skywcs_free(c);
}
END_TEST

START_TEST(test_solar_pairs)
{
    skywcs *a = parse_lines(aia_lines), *b = parse_lines(sta_lines);
    skywcs *sky = parse_demo("HorseHead.fits");
    char err[300] = "";
    ck_assert_int_eq(skywcs_check_pair(a, b, err, sizeof err), 0);
    ck_assert_int_eq(skywcs_check_pair(a, sky, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "solar frame helioprojective") && strstr(err, "sky frame") &&
                  strstr(err, "do not mix"), "err: %s", err);
    ck_assert_int_eq(skywcs_check_pair(sky, b, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "input WCS is in the sky frame") && strstr(err, "solar frame helioprojective"),
                  "err: %s", err);
    /* A helioprojective WCS without its observer reaches no other observer. */
    const char *bare[] = { "CTYPE1  = 'HPLN-TAN'", "CTYPE2  = 'HPLT-TAN'", "CRPIX1  = 1.0",
                           "CRPIX2  = 1.0", "CDELT1  = 0.001", "CDELT2  = 0.001", NULL };
    skywcs *n = parse_lines(bare);
    ck_assert_int_eq(skywcs_check_pair(n, n, err, sizeof err), 0);
    ck_assert_int_eq(skywcs_check_pair(n, b, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "HGLN_OBS") != NULL, "err: %s", err);
    /* A cutout header in a solar frame carries the observer; mapped pixel to pixel. */
    char *cards = NULL;
    int nk = 0;
    ck_assert_int_eq(skywcs_cutout_header(0, 0, 1, 10, 10, "TAN", SKY_FRAME_HELIOPROJECTIVE,
                                          0, NULL, &cards, &nk, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(skywcs_cutout_header_solar(0, 0, 0.6, 64, 64, "TAN",
                                                SKY_FRAME_HELIOPROJECTIVE, skywcs_solar(b), 0,
                                                NULL, &cards, &nk, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(cards, "HGLN_OBS= "));
    skywcs *t = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &t, err, sizeof err), 0);
    free(cards);
    ck_assert_int_eq(skywcs_solar(t)->known, 1);
    ck_assert_double_eq(skywcs_solar(t)->dist, 143667689819.0);
    ck_assert_double_eq(skywcs_solar(t)->lon, 87.0595795624);
    /* AIA's disk centre seen from STEREO-A: at the pixel of sunpy's value of
     * test_solar_points in the 64 x 64 header. */
    double lon = 0.0, lat = 0.0, x, y, wl = 360.0 - 991.139164269 / 3600.0,
           wb = -116.061436623 / 3600.0, wx, wy;
    skywcs_convert(a, t, 1, &lon, &lat);
    ck_assert_int_eq(skywcs_sky2pix(t, 1, &lon, &lat, &x, &y), 0);
    ck_assert_int_eq(skywcs_sky2pix(t, 1, &wl, &wb, &wx, &wy), 0);
    ck_assert_double_eq_tol(x, wx, 1e-7);
    ck_assert_double_eq_tol(y, wy, 1e-7);
    /* Tx = -991": east of centre, to the left (solar west to the right, 33.75"/px). */
    ck_assert_double_eq_tol(x, 31.5 - 991.139164269 / 33.75, 0.05);
    skywcs_free(t);
    skywcs_free(n);
    skywcs_free(sky);
    skywcs_free(a);
    skywcs_free(b);
}
END_TEST

/* ---- skywcs_celestial_crpix ----------------------------------------------------------- */

/* `lines` with "CRPIX1  = " and "CRPIX2  = " replaced by the values crpix[] (%.17g: read
 * back exactly), parsed, celestial. */
static skywcs *celestial_with_crpix(const char *const *lines, const double crpix[2])
{
    const char *l2[32];
    char c[2][40];
    int n = 0;
    for (; lines[n]; n++) {
        l2[n] = lines[n];
        for (int k = 0; k < 2; k++)
            if (strncmp(lines[n], k ? "CRPIX2  = " : "CRPIX1  = ", 10) == 0
                && !isnan(crpix[k])) {
                snprintf(c[k], sizeof c[k], "CRPIX%d  = %.17g", k + 1, crpix[k]);
                l2[n] = c[k];
            }
    }
    l2[n] = NULL;
    skywcs *w = parse_lines(l2);
    skywcs *cel = skywcs_celestial(w);
    skywcs_free(w);
    ck_assert_ptr_nonnull(cel);
    return cel;
}

/* a and b give the same bits for pix2sky and sky2pix over a grid of pixels. */
static void check_same_bits(skywcs *a, skywcs *b)
{
    enum { N = 49 };
    double x[N], y[N], la[N], ba[N], lb[N], bb[N], xa[N], ya[N], xb[N], yb[N];
    for (int i = 0; i < N; i++) {
        x[i] = -300.25 + 97.5 * (i % 7);
        y[i] = -200.75 + 113.0 * (i / 7);
    }
    ck_assert_int_eq(skywcs_pix2sky(a, N, x, y, la, ba), 0);
    ck_assert_int_eq(skywcs_pix2sky(b, N, x, y, lb, bb), 0);
    ck_assert(memcmp(la, lb, sizeof la) == 0 && memcmp(ba, bb, sizeof ba) == 0);
    ck_assert_int_eq(skywcs_sky2pix(a, N, la, ba, xa, ya), 0);
    ck_assert_int_eq(skywcs_sky2pix(b, N, la, ba, xb, yb), 0);
    ck_assert(memcmp(xa, xb, sizeof xa) == 0 && memcmp(ya, yb, sizeof ya) == 0);
}

/* A parsed WCS with CRPIX1/2 replaced gives bit for bit what parsing the edited cards
 * gives, the pixel axes followed through the celestial extraction (a cube whose axis 1 is
 * spectral and whose celestial axes come latitude first); a NaN keeps the parsed value;
 * distortions are refused.  Reference values: astropy 5.2.1,
 * WCS(header).celestial.wcs_pix2world(..., 0) of the edited headers. */
START_TEST(test_celestial_crpix)
{
    static const char *const tan[] = {
        "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRVAL1  = 150.11",
        "CRVAL2  = 2.2", "CD1_1   = -5.4E-05", "CD1_2   = 1.9E-05", "CD2_1   = 1.9E-05",
        "CD2_2   = 5.4E-05", "CRPIX1  = 1781.8889140794", "CRPIX2  = 2066.5439603688", NULL };
    skywcs *w = parse_lines(tan);
    const double cp[2] = { 1781.8889140794 - 37.0, 2066.5439603688 - 1024.0 };
    skywcs *fast = skywcs_celestial_crpix(w, cp), *ref = celestial_with_crpix(tan, cp);
    ck_assert_ptr_nonnull(fast);
    check_same_bits(fast, ref);
    double x = 10.25, y = -3.5, lon, lat;
    ck_assert_int_eq(skywcs_pix2sky(fast, 1, &x, &y, &lon, &lat), 0);
    ck_assert_double_eq_tol(lon, 150.183810610242, 1e-11);
    ck_assert_double_eq_tol(lat, 2.110626809484, 1e-11);
    ck_assert_int_eq(skywcs_frame(fast, NULL), skywcs_frame(ref, NULL));
    skywcs_free(fast);
    skywcs_free(ref);
    const double keep[2] = { NAN, 17.0 };
    fast = skywcs_celestial_crpix(w, keep);
    ref = celestial_with_crpix(tan, keep);
    ck_assert_ptr_nonnull(fast);
    check_same_bits(fast, ref);
    skywcs_free(fast);
    skywcs_free(ref);
    const double inf[2] = { INFINITY, 1.0 };
    ck_assert_ptr_null(skywcs_celestial_crpix(w, inf));
    skywcs_free(w);

    static const char *const cube[] = {
        "NAXIS   = 3", "CTYPE1  = 'FREQ'", "CTYPE2  = 'DEC--SIN'", "CTYPE3  = 'RA---SIN'",
        "CRVAL1  = 1.4E9", "CRVAL2  = -30.5", "CRVAL3  = 201.25", "CDELT1  = 1E6",
        "CDELT2  = 0.002", "CDELT3  = -0.002", "CRPIX1  = 1.0", "CRPIX2  = 40.5",
        "CRPIX3  = 60.25", NULL };
    w = parse_lines(cube);
    const double cq[2] = { -99.0, 23.5 };     /* CRPIX1 is the spectral axis's */
    fast = skywcs_celestial_crpix(w, cq);
    ref = celestial_with_crpix(cube, cq);
    ck_assert_ptr_nonnull(fast);
    check_same_bits(fast, ref);
    /* Longitude first: pixel x runs along CTYPE3 (RA), y along CTYPE2 (DEC). */
    x = -3.5;
    y = 10.25;
    ck_assert_int_eq(skywcs_pix2sky(fast, 1, &x, &y, &lon, &lat), 0);
    ck_assert_double_eq_tol(lon, 201.395691054436, 1e-11);
    ck_assert_double_eq_tol(lat, -30.524419017883, 1e-11);
    skywcs_free(fast);
    skywcs_free(ref);
    skywcs_free(w);

    static const char *const sip[] = {
        "CTYPE1  = 'RA---TAN-SIP'", "CTYPE2  = 'DEC--TAN-SIP'", "CRVAL1  = 150.11",
        "CRVAL2  = 2.2", "CDELT1  = -5.4E-05", "CDELT2  = 5.4E-05", "CRPIX1  = 100.0",
        "CRPIX2  = 100.0", "A_ORDER = 2", "B_ORDER = 2", "A_2_0   = 1E-06",
        "B_0_2   = -1E-06", NULL };
    w = parse_lines(sip);
    ck_assert_ptr_null(skywcs_celestial_crpix(w, cp));
    skywcs_free(w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("skywcs");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_galactic_centre);
    tcase_add_test(tc, test_icrs_fk5_bias);
    tcase_add_test(tc, test_precession_and_fk4);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_frame_names);
    tcase_add_test(tc, test_frame_rules);
    tcase_add_test(tc, test_parse_errors);
    tcase_add_test(tc, test_demo_headers);
    tcase_add_test(tc, test_celestial_subset);
    tcase_add_test(tc, test_celestial_crpix);
    tcase_add_test(tc, test_describe);
    tcase_add_test(tc, test_zaxis);
    tcase_add_test(tc, test_cutout_header_rotation);
    tcase_add_test(tc, test_cutout_header_galactic);
    tcase_add_test(tc, test_cutout_header_solar_orientation);
    tcase_add_test(tc, test_cutout_header_errors);
    tcase_add_test(tc, test_solar_headers);
    tcase_add_test(tc, test_solar_points);
    tcase_add_test(tc, test_solar_observer_forms);
    tcase_add_test(tc, test_solar_carrington_offset);
    tcase_add_test(tc, test_solar_motion);
    tcase_add_test(tc, test_solar_two_times);
    tcase_add_test(tc, test_solar_pairs);
    tcase_add_test(tc, test_solar_trip);
    tcase_add_test(tc, test_solar_fastmap);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
