/* Unit tests of the WCS validity rule of engine/sky/skywcs: every broken card kind of
 * tests/wcsrule_cases.h through every engine path that reads a WCS (cards, header text,
 * target files as text and FITS, dataset files, mosaic inputs and targets), each giving
 * the same reason; and the headers the rule must still accept. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/mosaic/mosaic.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"
#include "tests/wcsrule_cases.h"

static char dir[256];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "wcsrule");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* skywcs_parse of `cards`: 0 (the WCS freed) or the code, the reason in err. */
static int parse_cards(const char *cards, int nkeys, char *err, size_t errlen)
{
    skywcs *w = NULL;
    err[0] = '\0';
    int rc = skywcs_parse(cards, nkeys, &w, err, errlen);
    ck_assert(rc == 0 ? w != NULL : w == NULL);
    skywcs_free(w);
    return rc;
}

/* Asserts that `what` refused case `c` with its reason, or accepted the good WCS (c
 * NULL). */
static void expect_rule(const wr_case *c, const char *what, int rc, const char *err)
{
    if (!c) {
        ck_assert_msg(rc == 0, "good WCS, %s: refused: %s", what, err);
        return;
    }
    ck_assert_msg(rc == TESS_EINVAL, "%s, %s: accepted (rc %d)", c->name, what, rc);
    ck_assert_msg(strstr(err, c->why) != NULL, "%s, %s: '%s' lacks '%s'", c->name, what, err,
                  c->why);
}

/* Writes `text` to dir/name; the path goes to `path`. */
static void write_text(const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* mos_plan of `input` onto `tcards` in a fresh work directory: the code, reason in err. */
static int plan_mosaic(const char *input, const char *tcards, int tkeys, char *err,
                       size_t errlen)
{
    char work[512];
    snprintf(work, sizeof work, "%s/work", dir);
    ck_assert_int_eq(mkdir(work, 0755), 0);
    mos_input in = { input, NULL, 0, 0.0 };
    mos_spec s;
    memset(&s, 0, sizeof s);
    s.ninputs = 1;
    s.inputs = &in;
    s.target_cards = tcards;
    s.target_nkeys = tkeys;
    s.method = RP_BILINEAR;
    s.combine = MOS_MEAN;
    s.bg = MOS_BG_NONE;
    mosaic *m = NULL;
    err[0] = '\0';
    int rc = mos_plan(&s, work, 1, &m, err, errlen);
    mos_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    ck_assert_int_eq(system(cmd), 0);
    return rc;
}

/* Case `i` (the good WCS for i = WR_NCASES) through every path.  The good header must
 * pass each one, each broken one must be refused with its reason by each. */
START_TEST(test_every_path)
{
    const wr_case *c = _i < WR_NCASES ? &wr_cases[_i] : NULL;
    char err[512], path[512], fits[512], good_fits[512], *cards = NULL;
    int nk = 0, rc;

    /* The cards as the datasets route and the cutout hold them. */
    char *text = wr_header_text(c, 40, 30);
    ck_assert_int_eq(fitscard_parse(text, strlen(text), 10000, &cards, &nk, err, sizeof err), 0);
    rc = parse_cards(cards, nk, err, sizeof err);
    expect_rule(c, "header text (POST /api/v1/cutout)", rc, err);
    free(cards);
    /* A mosaic target given as text. */
    ck_assert_int_eq(mos_cards_from_text(text, strlen(text), &cards, &nk, err, sizeof err), 0);
    int tkeys = nk;
    char *tcards = cards;
    /* A target file of text, and the FITS file of a dataset, as tessera --target reads
     * them. */
    write_text("target.hdr", text, path, sizeof path);
    ck_assert_int_eq(fitsimg_read_cards(path, 0, 10000, &cards, &nk, NULL, err, sizeof err), 0);
    rc = parse_cards(cards, nk, err, sizeof err);
    expect_rule(c, "text target file", rc, err);
    free(cards);
    snprintf(fits, sizeof fits, "%s/%s.fits", dir, c ? c->name : "good");
    ck_assert_int_eq(wr_write_fits(fits, c), 0);
    fitsimg_info info;
    if (wr_text_only(c)) {
        /* The FITS file is refused when opened, before its WCS is read. */
        ck_assert_int_ne(fitsimg_read_cards(fits, 0, 10000, &cards, &nk, NULL, err,
                                            sizeof err), 0);
        ck_assert_int_ne(fitsimg_read_info(fits, 0, &info, err, sizeof err), 0);
    } else {
        ck_assert_int_eq(fitsimg_read_cards(fits, 0, 10000, &cards, &nk, NULL, err,
                                            sizeof err), 0);
        rc = parse_cards(cards, nk, err, sizeof err);
        expect_rule(c, "FITS target file", rc, err);
        free(cards);
        /* The header of a dataset (the catalog, tessera's inputs, mosaic input files). */
        ck_assert_msg(fitsimg_read_info(fits, 0, &info, err, sizeof err) == 0, "%s", err);
        rc = parse_cards(info.header, info.nkeys, err, sizeof err);
        fitsimg_info_release(&info);
        expect_rule(c, "dataset file", rc, err);
    }
    /* The mosaic engine (tessera mosaic, mosaic jobs): the case as target, then as input. */
    snprintf(good_fits, sizeof good_fits, "%s/good_input.fits", dir);
    ck_assert_int_eq(wr_write_fits(good_fits, NULL), 0);
    rc = plan_mosaic(good_fits, tcards, tkeys, err, sizeof err);
    expect_rule(c, "mosaic target", rc, err);
    if (c) {
        ck_assert_msg(strstr(err, "the target has no usable WCS: "), "%s", err);
        char *gtext = wr_header_text(NULL, 40, 30);
        char *gcards = NULL;
        int gk = 0;
        ck_assert_int_eq(mos_cards_from_text(gtext, strlen(gtext), &gcards, &gk, err,
                                             sizeof err), 0);
        rc = plan_mosaic(fits, gcards, gk, err, sizeof err);
        if (wr_text_only(c)) {
            ck_assert_int_ne(rc, 0);
        } else {
            expect_rule(c, "mosaic input", rc, err);
            ck_assert_msg(strstr(err, "has no usable WCS: "), "%s", err);
        }
        free(gcards);
        free(gtext);
    }
    free(tcards);
    free(text);
}
END_TEST

/* Headers the rule accepts: what wcsfix repairs for astropy too (a cube whose CD names
 * only the celestial axes), rotations, tiny pixels, skewed but regular matrices, AIPS
 * CROTA and CD00i00j; and those it refuses for the reason shown, every card kind named. */
START_TEST(test_limits)
{
    char err[512];
    int nk;
    static const struct {
        const char *cards[12];
        int rc;
        const char *why;
    } h[] = {
        { { "NAXIS   = 3", "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CTYPE3  = 'FREQ'",
            "CD1_1   = -0.001", "CD2_2   = 0.001", "CRVAL3  = 1.4e9", NULL }, 0, NULL },
        { { "NAXIS   = 3", "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CTYPE3  = 'FREQ'",
            "CD1_1   = -0.001", "CD2_2   = 0.001", "CD3_3   = 0.0", NULL }, TESS_EINVAL,
          "CD3_j are all 0" },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = -1e-12",
            "CDELT2  = 1e-12", NULL }, 0, NULL },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = -1e-3",
            "CDELT2  = 1e-3", "CROTA2  = 30.0", NULL }, 0, NULL },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CD1_1   = 1.0",
            "CD1_2   = 1.0", "CD2_1   = 1.0", "CD2_2   = 1.000001", NULL }, 0, NULL },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CD001001= -0.001",
            "CD002002= 0.001", NULL }, 0, NULL },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CD001001= 0.0",
            "CD002002= 0.0", NULL }, TESS_EINVAL, "CD1_j are all 0" },
        /* An alternate's zero CD is its own: the primary is PC. */
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = -1e-3",
            "CDELT2  = 1e-3", "CTYPE1A = 'RA---TAN'", "CTYPE2A = 'DEC--TAN'",
            "CD1_1A  = 0.0", NULL }, 0, NULL },
        /* A D exponent is a finite number. */
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = -1.0D-3",
            "CDELT2  = 1.0D-3", NULL }, 0, NULL },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = 1e300",
            "PC1_1   = 1e300", NULL }, TESS_EINVAL, "row 1 overflows" },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "PC1_1   = 0.0", NULL },
          TESS_EINVAL, "PC1_j are all 0" },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "EQUINOX = 'J2000'", NULL },
          TESS_EINVAL, "EQUINOX must be a finite number, got 'J2000'" },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "NAXIS1  = 1.5.5", NULL },
          TESS_EINVAL, "NAXIS1 must be a finite number, got '1.5.5'" },
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRVAL1A = NaN", NULL },
          TESS_EINVAL, "CRVAL1A must be a finite number" },
        { { "CTYPE1  = 'RA---NCP'", "CTYPE2  = 'DEC--NCP'", "CDELT1  = -1e-3",
            "CDELT2  = 1e-3", "CRVAL2  = 30.0", NULL }, 0, NULL },
        /* A DSS keyword without a value (wcspih translates on the keyword alone, and a
         * bare PLTRAS crashed it: tests/fuzz/fuzz_dataset). */
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = ' '", "PLTRAS", NULL }, TESS_EINVAL,
          "a DSS plate solution needs CNPIX1" },
        /* No WCS keyword at all: a dataset of pixels, not a broken WCS. */
        { { "NAXIS   = 2", "OBJECT  = 'M1'", NULL }, TESS_ENOWCS, "no WCS keywords" },
        /* Regular but subnormal: its inverse overflows. */
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CD1_1   = -1e-310",
            "CD2_2   = 1e-310", NULL }, TESS_EINVAL, "cannot be inverted in double precision" },
        /* The reason quotes the header in printable ASCII, for JSON. */
        { { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRPIX1  = \x9d" "2", NULL },
          TESS_EINVAL, "CRPIX1 must be a finite number, got '?2'" },
        /* Only the numbers: a NaN that stands alone is still named. */
        { { "NAXIS   = 2", "CDELT1  = NaN", NULL }, TESS_EINVAL, "CDELT1 must be" },
    };
    for (size_t k = 0; k < sizeof h / sizeof h[0]; k++) {
        char *cards = tt_make_cards(h[k].cards, &nk);
        int rc = parse_cards(cards, nk, err, sizeof err);
        free(cards);
        ck_assert_msg(rc == h[k].rc, "header %zu: rc %d, want %d (%s)", k, rc, h[k].rc, err);
        if (h[k].why)
            ck_assert_msg(strstr(err, h[k].why) != NULL, "header %zu: '%s' lacks '%s'", k, err,
                          h[k].why);
    }
    /* The NULL err of callers that only want the verdict. */
    const char *nan[] = { "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CDELT1  = NaN", NULL };
    char *cards = tt_make_cards(nan, &nk);
    skywcs *w = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), TESS_EINVAL);
    ck_assert_ptr_null(w);
    free(cards);
}
END_TEST

/* A DSS plate solution (HorseHead.fits) with one of the keywords wcspih stores for its
 * translation missing or unreadable: wcslib 7.12 read that slot uninitialised (valgrind)
 * and derived CRPIX, CRVAL and CD from it (tests/fuzz/fuzz_dataset: CRPIX1 = -inf, served
 * as a shorter crpix array since JSON has no infinity).  Each is named. */
START_TEST(test_dss_plate_solution)
{
    static const struct {
        const char *key, *card, *why;
    } c[] = {
        { "XPIXELSZ", "COMMENT", "a DSS plate solution needs XPIXELSZ (" },
        { "AMDY1   ", "COMMENT", "a DSS plate solution needs AMDY1 (" },
        { "PLTDECSN", "PLTDECSN= -1", "needs PLTDECSN as a string" },
        { "PPO3    ", "PPO3    = 'centre'", "PPO3 must be a finite number, got 'centre'" },
        { "CNPIX1  ", "CNPIX1  = 0x1p3", "CNPIX1 must be a finite number, got '0x1p3'" },
        { "YPIXELSZ", "YPIXELSZ=15.0", "'YPIXELSZ=15.0': a WCS card needs '= ' in columns" },
    };
    fitsimg_info info;
    char err[512];
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        ck_assert_msg(fitsimg_read_info(TESSERA_DEMO_DIR "/HorseHead.fits", 0, &info, err,
                                        sizeof err) == 0, "%s", err);
        if (k == 0)
            ck_assert_msg(parse_cards(info.header, info.nkeys, err, sizeof err) == 0, "%s", err);
        int found = 0;
        for (int i = 0; i < info.nkeys; i++) {
            char *card = info.header + (size_t)i * 80;
            if (strncmp(card, c[k].key, strlen(c[k].key)) == 0) {
                fitscard_from_text(card, c[k].card, strlen(c[k].card));
                found = 1;
            }
        }
        ck_assert(found);
        int rc = parse_cards(info.header, info.nkeys, err, sizeof err);
        fitsimg_info_release(&info);
        ck_assert_msg(rc == TESS_EINVAL, "%s: rc %d", c[k].card, rc);
        ck_assert_msg(strstr(err, c[k].why) != NULL, "%s: '%s' lacks '%s'", c[k].card, err,
                      c[k].why);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wcsrule");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_every_path, 0, WR_NCASES + 1);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_dss_plate_solution);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
