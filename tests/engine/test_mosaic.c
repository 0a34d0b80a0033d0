/* Unit tests of engine/mosaic: the six-tile problem of tests/data/mosaic (reference
 * coadd, background matching against the truth, automatic target), RA wrap, NaN for
 * uncovered pixels, combine modes, idempotent blocks and checksums from the bands. */
#include <check.h>
#include <dirent.h>
#include <fitsio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/fits/fitscard.h"
#include "engine/fits/fitswrite.h"
#include "engine/mosaic/coadd.h"
#include "engine/mosaic/mosaic.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"
#include "engine/base/error.h"
#include "engine/base/pool.h"

/* The mosaic problem of tests/data/mosaic (copied from the project's shared data). */
#define MOSAIC_DIR TESSERA_TESTDATA_DIR "/mosaic"

/* A per-pixel check: Check writes to its pipe on every ck_assert, so loops over pixels
 * test the condition themselves and call ck_abort_msg only on failure. */
#define PIX_CHECK(cond, ...)                \
    do {                                    \
        if (!(cond))                        \
            ck_abort_msg(__VA_ARGS__);      \
    } while (0)

static char tile_paths[6][256];
static mos_input tiles[6];

static void setup_tiles(void)
{
    for (int i = 0; i < 6; i++) {
        snprintf(tile_paths[i], sizeof tile_paths[i], "%s/tile_%d.fits", MOSAIC_DIR, i + 1);
        tiles[i] = (mos_input){ tile_paths[i], NULL, 0, 0.0 };
    }
}

/* Removes the files of a flat directory and the directory. */
static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static mos_spec base_spec(const mos_input *in, int n, const char *tcards, int tkeys)
{
    mos_spec s;
    memset(&s, 0, sizeof s);
    s.ninputs = n;
    s.inputs = in;
    s.target_cards = tcards;
    s.target_nkeys = tkeys;
    s.method = RP_BILINEAR;
    s.combine = MOS_MEAN;
    s.bg = MOS_BG_NONE;
    return s;
}

/* Plans in a fresh work directory under `scratch`, runs every block in order and writes
 * the product to scratch/<name>.  stage_bound >= 0: the staged planes are offered
 * mos_stage_in_memory(m, stage_bound) first, which must answer `staged`, and the first
 * input's staged file must then be missing (staged) or there (files) after the
 * reprojection stage.  Returns the total number of blocks. */
static long run_mosaic_staged(const mos_spec *s, const char *scratch, const char *name,
                              double stage_bound, int staged)
{
    char work[512], out[512], err[512] = "";
    snprintf(work, sizeof work, "%s/work-%s", scratch, name);
    snprintf(out, sizeof out, "%s/%s", scratch, name);
    ck_assert_int_eq(mkdir(work, 0755), 0);
    mosaic *m = NULL;
    int rc = mos_plan(s, work, 1, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "mos_plan: %s", err);
    if (stage_bound >= 0)
        ck_assert_int_eq(mos_stage_in_memory(m, stage_bound), staged);
    long total = 0;
    for (int st = 0; st < mos_nstages(m); st++) {
        for (long b = 0; b < mos_nblocks(m, st); b++) {
            rc = mos_run_block(m, st, b, NULL, err, sizeof err);
            ck_assert_msg(rc == 0, "stage %d block %ld: %s", st, b, err);
            total++;
        }
        if (st == 0 && stage_bound >= 0) {
            char path[600];
            snprintf(path, sizeof path, "%s/r_0.val", work);
            ck_assert_int_eq(access(path, F_OK) == 0, !staged);
        }
    }
    rc = mos_finish(m, out, err, sizeof err);
    ck_assert_msg(rc == 0, "mos_finish: %s", err);
    mos_free(m);
    rm_dir(work);
    return total;
}

static long run_mosaic(const mos_spec *s, const char *scratch, const char *name)
{
    return run_mosaic_staged(s, scratch, name, -1, 0);
}

static float *read_f32(const char *path, int hdu, long *nx, long *ny, char **cards, int *nkeys)
{
    int f32 = 0;
    float *p = tt_read_image(path, hdu, nx, ny, cards, nkeys, &f32);
    ck_assert_int_eq(f32, 1);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median absolute deviation of (a - truth) about its median, over pixels finite in both. */
static double mad_vs_truth(const float *a, const float *truth, long n)
{
    double *d = malloc(sizeof(double) * (size_t)n);
    long k = 0;
    for (long i = 0; i < n; i++)
        if (isfinite(a[i]) && isfinite(truth[i]))
            d[k++] = (double)a[i] - (double)truth[i];
    ck_assert_int_gt(k, 1000);
    double med = median(d, k);
    for (long i = 0; i < k; i++)
        d[i] = fabs(d[i] - med);
    double mad = median(d, k);
    free(d);
    return mad;
}

static char *reference_target(int *nkeys)
{
    return tt_read_hdr_file(MOSAIC_DIR "/reference_target.hdr", nkeys);
}

/* (a) and (f): bilinear mean onto reference_target.hdr without matching agrees with
 * reproject_and_coadd (reference_mean.fits) to 1e-4 relative on the interior (pixels whose
 * 5 x 5 neighbourhood is covered; values near zero compared with 1e-4 absolute); the
 * coverage equals reproject's footprint sum everywhere; uncovered pixels are NaN. */
/* The double path gives what the float path gives for values a float holds, and keeps
 * the digits a float would lose. */
START_TEST(test_accum_double)
{
    const float vf[4] = { 1.0f, 2.0f, NAN, 4.0f }, wf[4] = { 1.0f, 0.5f, 1.0f, 0.0f };
    const double vd[4] = { 1.0, 2.0, NAN, 4.0 }, wd[4] = { 1.0, 0.5, 1.0, 0.0 };
    const float v2f[4] = { 3.0f, 6.0f, 5.0f, 7.0f };
    const double v2d[4] = { 3.0, 6.0, 5.0, 7.0 };
    const mos_combine all[] = { MOS_MEAN, MOS_SUM, MOS_MEDIAN, MOS_MIN, MOS_MAX, MOS_FIRST,
                                MOS_LAST };
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        mos_accum a, b;
        ck_assert_int_eq(mos_accum_init(&a, all[k], 4, 2), 0);
        ck_assert_int_eq(mos_accum_init(&b, all[k], 4, 2), 0);
        mos_accum_add(&a, 0, vf, wf, 4, 0.5, 0.25, 2);
        mos_accum_add(&a, 0, v2f, NULL, 4, 0.0, 0.0, 0);
        mos_accum_add_d(&b, 0, vd, wd, 4, 0.5, 0.25, 2);
        mos_accum_add_d(&b, 0, v2d, NULL, 4, 0.0, 0.0, 0);
        float fo[4], fc[4];
        double dout[4], dc[4];
        mos_accum_result(&a, fo, fc);
        mos_accum_result_d(&b, dout, dc);
        for (int i = 0; i < 4; i++) {
            ck_assert_msg(fo[i] == (float)dout[i], "%s pixel %d: %g and %g",
                          mos_combine_name(all[k]), i, fo[i], dout[i]);
            ck_assert_float_eq(fc[i], (float)dc[i]);
        }
        mos_accum_free(&a);
        mos_accum_free(&b);
    }
    /* the mean of 1 + 1e-12 and 1 + 3e-12 is 1 + 2e-12 in double */
    mos_accum d;
    ck_assert_int_eq(mos_accum_init(&d, MOS_MEAN, 1, 2), 0);
    const double p1 = 1.0 + 1e-12, p2 = 1.0 + 3e-12;
    mos_accum_add_d(&d, 0, &p1, NULL, 1, 0.0, 0.0, 0);
    mos_accum_add_d(&d, 0, &p2, NULL, 1, 0.0, 0.0, 0);
    double m;
    mos_accum_result_d(&d, &m, NULL);
    ck_assert_double_eq_tol(m, 1.0 + 2e-12, 1e-15);
    mos_accum_free(&d);
}
END_TEST

START_TEST(test_reference_mean)
{
    setup_tiles();
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_spec s = base_spec(tiles, 6, tc, tk);
    long total = run_mosaic(&s, dir, "mean.fits");
    /* progress is counted in blocks: plenty of them on this small set */
    ck_assert_int_ge(total, 30);
    char path[512];
    snprintf(path, sizeof path, "%s/mean.fits", dir);
    long nx, ny, rx, ry, fx, fy, cx, cy;
    float *a = read_f32(path, 1, &nx, &ny, NULL, NULL);
    float *cov = read_f32(path, 2, &cx, &cy, NULL, NULL);
    float *ref = read_f32(MOSAIC_DIR "/reference_mean.fits", 1, &rx, &ry, NULL, NULL);
    float *fp = read_f32(MOSAIC_DIR "/reference_mean.fits", 2, &fx, &fy, NULL, NULL);
    ck_assert_int_eq(nx, 780);
    ck_assert_int_eq(ny, 781);
    ck_assert(rx == nx && ry == ny && cx == nx && cy == ny && fx == nx && fy == ny);
    long interior = 0, bad = 0, covered = 0;
    double worst = 0.0;
    for (long y = 0; y < ny; y++)
        for (long x = 0; x < nx; x++) {
            long i = y * nx + x;
            /* (f) NaN exactly where nothing covers, coverage = reproject's footprint */
            PIX_CHECK(isfinite(a[i]) == isfinite(ref[i]), "pixel (%ld, %ld): %g vs %g", x,
                          y, a[i], ref[i]);
            PIX_CHECK(cov[i] == fp[i], "coverage (%ld, %ld): %g vs %g", x, y, cov[i], fp[i]);
            if (!isfinite(ref[i])) {
                PIX_CHECK(cov[i] == 0.0f, "cov[i] = %g, not 0.0f", cov[i]);
                continue;
            }
            covered++;
            int in = x >= 2 && y >= 2 && x < nx - 2 && y < ny - 2;
            for (long dy = -2; in && dy <= 2; dy++)
                for (long dx = -2; in && dx <= 2; dx++)
                    in = isfinite(ref[(y + dy) * nx + x + dx]);
            if (!in)
                continue;
            interior++;
            double e = fabs((double)a[i] - (double)ref[i]) / fmax(fabs((double)ref[i]), 1.0);
            worst = fmax(worst, e);
            bad += e > 1e-4;
        }
    printf("test_reference_mean: %ld covered, %ld interior pixels, worst relative error %.3g\n",
           covered, interior, worst);
    ck_assert_int_gt(interior, 300000);
    ck_assert_int_eq(bad, 0);
    free(a);
    free(cov);
    free(ref);
    free(fp);
    free(tc);
    rm_dir(dir);
}
END_TEST

/* (b): with plane matching the median absolute deviation of (mosaic - truth - median) is
 * at most 0.2 (reproject's offsets-only matching gets 0.23); without matching about 3.65;
 * levels only in between.  The provenance cards are there. */
START_TEST(test_background_matching)
{
    setup_tiles();
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_spec s = base_spec(tiles, 6, tc, tk);
    s.bg = MOS_BG_PLANE;
    run_mosaic(&s, dir, "plane.fits");
    s.bg = MOS_BG_LEVEL;
    run_mosaic(&s, dir, "level.fits");
    s.bg = MOS_BG_NONE;
    run_mosaic(&s, dir, "none.fits");
    long nx, ny, tx, ty;
    float *truth = read_f32(MOSAIC_DIR "/truth_on_reference_target.fits", 1, &tx, &ty, NULL,
                            NULL);
    double mad[3];
    const char *names[3] = { "plane.fits", "level.fits", "none.fits" };
    char *cards = NULL;
    int nkeys = 0;
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        float *a = read_f32(path, 1, &nx, &ny, k == 0 ? &cards : NULL, k == 0 ? &nkeys : NULL);
        ck_assert(nx == tx && ny == ty);
        mad[k] = mad_vs_truth(a, truth, nx * ny);
        free(a);
    }
    printf("test_background_matching: MAD vs truth: planes %.4f, levels %.4f, none %.4f "
           "(reproject: 0.23 matched, 3.65 not)\n", mad[0], mad[1], mad[2]);
    ck_assert_double_le(mad[0], 0.2);
    ck_assert_double_lt(mad[1], 1.0);
    ck_assert_double_gt(mad[2], 3.0);
    char v[80];
    ck_assert(fitscard_get(cards, nkeys, "BGMATCH", v, sizeof v) && strcmp(v, "plane") == 0);
    ck_assert(fitscard_get(cards, nkeys, "NINPUTS", v, sizeof v) && atoi(v) == 6);
    ck_assert(fitscard_get(cards, nkeys, "INP6", v, sizeof v));
    ck_assert_msg(strstr(v, "mosaic/tile_6.fits") != NULL, "INP6 = %s", v);
    ck_assert(fitscard_get(cards, nkeys, "COMBINE", v, sizeof v) && strcmp(v, "mean") == 0);
    /* The corrections average to zero (the constraint); tile 4 has no background added,
     * so the others' planes relative to it follow the known offsets (5, -3, 8, 0, -6, 2
     * at the tile centres) within a few tenths. */
    double sum = 0.0, b[6];
    for (int k = 0; k < 6; k++) {
        char key[16];
        snprintf(key, sizeof key, "BGA%d", k + 1);
        ck_assert(fitscard_get(cards, nkeys, key, v, sizeof v));
        b[k] = atof(v);
        sum += b[k];
    }
    ck_assert_double_lt(fabs(sum), 1e-6);
    free(cards);
    free(truth);
    free(tc);
    rm_dir(dir);
}
END_TEST

/* (c): one input with matching: no correction, no NaN where the input covers. */
START_TEST(test_single_input_matching)
{
    setup_tiles();
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    mos_spec s = base_spec(tiles, 1, NULL, 0);
    s.bg = MOS_BG_PLANE;
    run_mosaic(&s, dir, "one.fits");
    s.bg = MOS_BG_NONE;
    run_mosaic(&s, dir, "plain.fits");
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/one.fits", dir);
    snprintf(p2, sizeof p2, "%s/plain.fits", dir);
    long nx, ny, mx, my;
    float *a = read_f32(p1, 1, &nx, &ny, NULL, NULL);
    float *b = read_f32(p2, 1, &mx, &my, NULL, NULL);
    ck_assert(nx == mx && ny == my);
    long finite = 0;
    for (long i = 0; i < nx * ny; i++) {
        PIX_CHECK(isfinite(a[i]) == isfinite(b[i]), "isfinite(a[i]) == isfinite(b[i])");
        if (isfinite(a[i])) {
            finite++;
            PIX_CHECK(a[i] == b[i], "a[i] = %g, not b[i]", a[i]);
        }
    }
    /* the tile has 320 x 300 pixels, 6992 of them NaN */
    ck_assert_int_gt(finite, 80000);
    free(a);
    free(b);
    rm_dir(dir);
}
END_TEST

/* (e): the automatic target reproduces find_optimal_celestial_wcs's reference_target.hdr. */
START_TEST(test_auto_target)
{
    setup_tiles();
    skywcs *w[6];
    long nx[6], ny[6];
    for (int i = 0; i < 6; i++) {
        long x, y;
        char *cards = NULL;
        int nk = 0, f32 = 0;
        free(tt_read_image(tile_paths[i], 1, &x, &y, &cards, &nk, &f32));
        skywcs *full = tt_parse_wcs(cards, nk);
        w[i] = skywcs_celestial(full);
        skywcs_free(full);
        free(cards);
        nx[i] = x;
        ny[i] = y;
    }
    char *cards = NULL, err[256] = "";
    int nk = 0;
    long ox = 0, oy = 0;
    int rc = mos_auto_target(6, w, nx, ny, SKY_FRAME_ICRS, "TAN", &cards, &nk, &ox, &oy, err,
                             sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    int rk = 0;
    char *ref = reference_target(&rk);
    static const char *const keys[] = { "CRVAL1", "CRVAL2", "CRPIX1", "CRPIX2", "CDELT1",
                                        "CDELT2", "NAXIS1", "NAXIS2" };
    static const double tol[] = { 1e-9, 1e-9, 1e-5, 1e-5, 1e-13, 1e-13, 0, 0 };
    for (int k = 0; k < 8; k++) {
        char a[80], b[80];
        ck_assert_msg(fitscard_get(cards, nk, keys[k], a, sizeof a), "no %s", keys[k]);
        ck_assert(fitscard_get(ref, rk, keys[k], b, sizeof b));
        ck_assert_msg(fabs(atof(a) - atof(b)) <= tol[k], "%s: %s vs %s", keys[k], a, b);
    }
    char v[80];
    ck_assert(fitscard_get(cards, nk, "CTYPE1", v, sizeof v) && strcmp(v, "RA---TAN") == 0);
    ck_assert_int_eq(ox, 780);
    ck_assert_int_eq(oy, 781);
    /* the frame defaults to the first input's */
    char *c2 = NULL;
    int n2 = 0;
    rc = mos_auto_target(6, w, nx, ny, SKY_FRAME_NONE, "", &c2, &n2, &ox, &oy, err, sizeof err);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(n2, nk);
    ck_assert_int_eq(memcmp(c2, cards, (size_t)nk * 80), 0);
    /* galactic: GLON/GLAT axes, same pixel scale */
    free(c2);
    rc = mos_auto_target(6, w, nx, ny, SKY_FRAME_GALACTIC, "CAR", &c2, &n2, &ox, &oy, err,
                         sizeof err);
    ck_assert_int_eq(rc, 0);
    ck_assert(fitscard_get(c2, n2, "CTYPE2", v, sizeof v) && strcmp(v, "GLAT-CAR") == 0);
    free(c2);
    free(cards);
    free(ref);
    for (int i = 0; i < 6; i++)
        skywcs_free(w[i]);
}
END_TEST

/* ---- RA wrap ----------------------------------------------------------------------------- */

/* A smooth function of the sky, continuous across RA 0. */
static double sky_f(double lon, double lat)
{
    double a = lon * M_PI / 180.0, b = lat * M_PI / 180.0;
    return 100.0 + 2000.0 * cos(b) * sin(a) + 500.0 * sin(b);
}

static void tile_cards(char *cards, double crval1, double crval2, long nx, long ny, double rot)
{
    char line[16][81];
    int n = 0;
    double c = cos(rot * M_PI / 180.0), s = sin(rot * M_PI / 180.0);
    snprintf(line[n++], 81, "CTYPE1  = 'RA---TAN'");
    snprintf(line[n++], 81, "CTYPE2  = 'DEC--TAN'");
    snprintf(line[n++], 81, "CRVAL1  = %20.12f", crval1);
    snprintf(line[n++], 81, "CRVAL2  = %20.12f", crval2);
    snprintf(line[n++], 81, "CRPIX1  = %20.12f", 0.5 * (double)(nx + 1));
    snprintf(line[n++], 81, "CRPIX2  = %20.12f", 0.5 * (double)(ny + 1));
    snprintf(line[n++], 81, "CDELT1  = %20.12f", -0.01);
    snprintf(line[n++], 81, "CDELT2  = %20.12f", 0.01);
    snprintf(line[n++], 81, "PC1_1   = %20.15f", c);
    snprintf(line[n++], 81, "PC1_2   = %20.15f", -s);
    snprintf(line[n++], 81, "PC2_1   = %20.15f", s);
    snprintf(line[n++], 81, "PC2_2   = %20.15f", c);
    snprintf(line[n++], 81, "RADESYS = 'ICRS'");
    for (int i = 0; i < n; i++) {
        memset(cards + i * 80, ' ', 80);
        memcpy(cards + i * 80, line[i], strlen(line[i]));
    }
    cards[n * 80] = '\0';
}

/* Writes a float32 tile whose pixels are sky_f at their centres; returns its WCS. */
static skywcs *write_tile(const char *path, double crval1, double crval2, long nx, long ny,
                          double rot)
{
    char cards[16 * 80 + 1];
    tile_cards(cards, crval1, crval2, nx, ny, rot);
    skywcs *w = tt_parse_wcs(cards, 13);
    size_t n = (size_t)nx * (size_t)ny;
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
    double *lon = malloc(sizeof(double) * n), *lat = malloc(sizeof(double) * n);
    float *px = malloc(sizeof(float) * n);
    for (long j = 0; j < ny; j++)
        for (long i = 0; i < nx; i++) {
            x[j * nx + i] = (double)i;
            y[j * nx + i] = (double)j;
        }
    ck_assert_int_eq(skywcs_pix2sky(w, n, x, y, lon, lat), 0);
    for (size_t k = 0; k < n; k++)
        px[k] = (float)sky_f(lon[k], lat[k]);
    fitsfile *f = NULL;
    int st = 0;
    long naxes[2] = { nx, ny };
    unlink(path);
    fits_create_file(&f, path, &st);
    fits_create_img(f, FLOAT_IMG, 2, naxes, &st);
    for (int i = 0; i < 13; i++) {
        char card[81];
        memcpy(card, cards + i * 80, 80);
        card[80] = '\0';
        fits_write_record(f, card, &st);
    }
    fits_write_img(f, TFLOAT, 1, (LONGLONG)n, px, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(x);
    free(y);
    free(lon);
    free(lat);
    free(px);
    return w;
}

/* 1 when sky position (lon, lat) falls inside tile `w` (nx x ny) by at least `margin`
 * pixels (margin < 0: outside by at least -margin). */
static int inside(skywcs *w, long nx, long ny, double lon, double lat, double margin)
{
    double x, y;
    skywcs_sky2pix(w, 1, &lon, &lat, &x, &y);
    if (!isfinite(x) || !isfinite(y))
        return 0;
    return x >= -0.5 + margin && y >= -0.5 + margin && x <= nx - 0.5 - margin
           && y <= ny - 0.5 - margin;
}

/* (d): two tiles straddling RA 0 (one centred at 359.75, one at 0.25, overlapping across
 * the wrap) mosaic onto the automatic target without loss: every output pixel inside
 * either tile is finite and equals the sky function, the overlap has coverage 2, and
 * (f) pixels outside both are NaN. */
START_TEST(test_ra_wrap)
{
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/wrap_a.fits", dir);
    snprintf(pb, sizeof pb, "%s/wrap_b.fits", dir);
    const long na = 60, ma = 50, nb = 55, mb = 45;
    skywcs *wa = write_tile(pa, 359.75, 10.0, na, ma, 0.0);
    skywcs *wb = write_tile(pb, 0.25, 10.1, nb, mb, 12.0);
    mos_input in[2] = { { pa, "a", 0, 0.0 }, { pb, "b", 0, 0.0 } };
    for (int variant = 0; variant < 2; variant++) {
        mos_spec s = base_spec(in, 2, NULL, 0);
        s.auto_frame = variant ? SKY_FRAME_GALACTIC : SKY_FRAME_ICRS;
        const char *name = variant ? "wrap_gal.fits" : "wrap.fits";
        run_mosaic(&s, dir, name);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        long nx, ny, cx, cy;
        char *cards = NULL;
        int nk = 0;
        float *a = read_f32(path, 1, &nx, &ny, &cards, &nk);
        float *cov = read_f32(path, 2, &cx, &cy, NULL, NULL);
        skywcs *full = tt_parse_wcs(cards, nk);
        skywcs *ow = skywcs_celestial(full);
        skywcs_free(full);
        long in_a = 0, in_b = 0, both = 0, outside = 0, wi = -1, wj = -1;
        double worst = 0.0;
        for (long j = 0; j < ny; j++)
            for (long i = 0; i < nx; i++) {
                double x = (double)i, y = (double)j, lon, lat;
                skywcs_pix2sky(ow, 1, &x, &y, &lon, &lat);
                double eq = 0.0;
                sky_frame fr = skywcs_frame(ow, &eq);
                sky_convert(fr, eq, SKY_FRAME_ICRS, 0.0, 1, &lon, &lat);
                long k = j * nx + i;
                int ia = inside(wa, na, ma, lon, lat, 0.6), ib = inside(wb, nb, mb, lon, lat, 0.6);
                int oa = !inside(wa, na, ma, lon, lat, -0.6), ob = !inside(wb, nb, mb, lon, lat, -0.6);
                if (ia || ib) {
                    PIX_CHECK(isfinite(a[k]), "pixel (%ld, %ld) at (%.4f, %.4f) lost", i, j,
                                  lon, lat);
                    /* values: away from the edge rows, which reproject pads, of either
                     * tile */
                    int ca = inside(wa, na, ma, lon, lat, 1.0), cb = inside(wb, nb, mb, lon, lat, 1.0);
                    if ((ca || oa) && (cb || ob) && fabs(a[k] - sky_f(lon, lat)) > worst) {
                        worst = fabs(a[k] - sky_f(lon, lat));
                        wi = i;
                        wj = j;
                    }
                    in_a += ia;
                    in_b += ib;
                    both += ia && ib;
                    if (ia && ib)
                        PIX_CHECK(cov[k] == 2.0f, "cov[k] = %g, not 2.0f", cov[k]);
                }
                if (oa && ob) {
                    PIX_CHECK(isnan(a[k]), "pixel (%ld, %ld) outside both tiles is %g", i, j,
                                  a[k]);
                    PIX_CHECK(cov[k] == 0.0f, "cov[k] = %g, not 0.0f", cov[k]);
                    outside++;
                }
            }
        printf("test_ra_wrap (%s): %ldx%ld, %ld pixels in tile a, %ld in b, %ld in both, %ld "
               "outside; worst error %.3g at (%ld, %ld)\n", variant ? "galactic" : "icrs", nx, ny,
               in_a, in_b, both, outside, worst, wi, wj);
        fflush(stdout);
        ck_assert_int_gt(in_a, 2500);
        ck_assert_int_gt(in_b, 2000);
        ck_assert_int_gt(both, 100);
        ck_assert_int_gt(outside, 100);
        ck_assert_double_lt(worst, 0.05);
        skywcs_free(ow);
        free(cards);
        free(a);
        free(cov);
    }
    skywcs_free(wa);
    skywcs_free(wb);
    rm_dir(dir);
}
END_TEST

/* Combine modes on the six tiles: where one tile covers, all agree with the mean; where
 * several do, min <= median <= max, min <= mean <= max, sum = mean x coverage, first and
 * last lie in [min, max]. */
START_TEST(test_combine_modes)
{
    setup_tiles();
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    int tk = 0;
    char *tc = reference_target(&tk);
    static const mos_combine modes[] = { MOS_MEAN, MOS_SUM, MOS_MEDIAN, MOS_MIN, MOS_MAX,
                                         MOS_FIRST, MOS_LAST };
    float *img[7], *cov = NULL;
    long nx = 0, ny = 0;
    for (int k = 0; k < 7; k++) {
        mos_spec s = base_spec(tiles, 6, tc, tk);
        s.combine = modes[k];
        char name[64], path[512];
        snprintf(name, sizeof name, "%s.fits", mos_combine_name(modes[k]));
        run_mosaic(&s, dir, name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        img[k] = read_f32(path, 1, &nx, &ny, NULL, NULL);
        if (k == 0)
            cov = read_f32(path, 2, &nx, &ny, NULL, NULL);
    }
    long multi = 0, first_ne_last = 0;
    for (long i = 0; i < nx * ny; i++) {
        float mean = img[0][i], sum = img[1][i], med = img[2][i], mn = img[3][i], mx = img[4][i];
        float fi = img[5][i], la = img[6][i];
        if (cov[i] == 0.0f) {
            for (int k = 0; k < 7; k++)
                PIX_CHECK(isnan(img[k][i]), "isnan(img[k][i])");
            continue;
        }
        double tol = 1e-4 * fmax(1.0, fabs(mean));
        PIX_CHECK(fabs(sum - mean * cov[i]) <= tol * cov[i], "fabs(sum - mean * cov[i]) <= tol * cov[i]");
        if (cov[i] == 1.0f) {
            for (int k = 2; k < 7; k++)
                PIX_CHECK(fabs(img[k][i] - mean) <= tol, "mode %d: %g vs %g", k, img[k][i],
                              mean);
            continue;
        }
        multi++;
        PIX_CHECK(mn <= med && med <= mx, "mn <= med && med <= mx");
        PIX_CHECK(mn - tol <= mean && mean <= mx + tol, "mn - tol <= mean && mean <= mx + tol");
        PIX_CHECK(mn <= fi && fi <= mx && mn <= la && la <= mx, "mn <= fi && fi <= mx && mn <= la && la <= mx");
        first_ne_last += fi != la;
    }
    ck_assert_int_gt(multi, 10000);
    ck_assert_int_gt(first_ne_last, multi / 2);
    for (int k = 0; k < 7; k++)
        free(img[k]);
    free(cov);
    free(tc);
    rm_dir(dir);
}
END_TEST

/* Reads a whole file. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)len + 1);
    ck_assert_int_eq(fread(d, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return d;
}

/* (g): the same plan run with blocks repeated, out of order, and across a re-plan (a
 * restart: later stages run by a new mosaic object on the same work directory) gives
 * the same bytes as a straight run. */
START_TEST(test_idempotent_blocks)
{
    setup_tiles();
    char dir[256], err[512] = "";
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_spec s = base_spec(tiles, 6, tc, tk);
    s.bg = MOS_BG_PLANE;
    run_mosaic(&s, dir, "straight.fits");

    char work[512], out[512];
    snprintf(work, sizeof work, "%s/work-again", dir);
    snprintf(out, sizeof out, "%s/again.fits", dir);
    ck_assert_int_eq(mkdir(work, 0755), 0);
    mosaic *m = NULL;
    ck_assert_int_eq(mos_plan(&s, work, 2, &m, err, sizeof err), 0);
    int ns = mos_nstages(m);
    ck_assert_int_eq(ns, 4);
    /* stage 0 backwards, with a few blocks twice */
    long n0 = mos_nblocks(m, 0);
    /* mos_block_order: a permutation; the reprojection's blocks of two inputs in turn
     * (input 0's first band, then input 1's: block 0 of input 1 is past input 0's
     * eight bands); in block order for another stage or one thread. */
    long *ord = malloc(sizeof(long) * (size_t)n0);
    char *seen = calloc((size_t)n0, 1);
    ck_assert(ord && seen);
    mos_block_order(m, 0, 2, ord);
    for (long i = 0; i < n0; i++) {
        ck_assert(ord[i] >= 0 && ord[i] < n0 && !seen[ord[i]]);
        seen[ord[i]] = 1;
    }
    ck_assert_int_eq(ord[0], 0);
    ck_assert_int_gt(ord[1], 1);
    ck_assert_int_eq(ord[2], 1);
    mos_block_order(m, 0, 1, ord);
    for (long i = 0; i < n0; i++)
        ck_assert_int_eq(ord[i], i);
    ck_assert_int_le(mos_nblocks(m, 1), n0);
    mos_block_order(m, 1, 2, ord);
    for (long i = 0; i < mos_nblocks(m, 1); i++)
        ck_assert_int_eq(ord[i], i);
    free(ord);
    free(seen);
    for (long b = n0 - 1; b >= 0; b--)
        ck_assert_int_eq(mos_run_block(m, 0, b, NULL, err, sizeof err), 0);
    for (long b = 0; b < n0; b += 7)
        ck_assert_int_eq(mos_run_block(m, 0, b, NULL, err, sizeof err), 0);
    for (long b = 0; b < mos_nblocks(m, 1); b++)
        ck_assert_int_eq(mos_run_block(m, 1, b, NULL, err, sizeof err), 0);
    ck_assert_int_eq(mos_run_block(m, 1, 2, NULL, err, sizeof err), 0);
    /* a restart: a new plan on the same directory continues with the later stages */
    mos_free(m);
    m = NULL;
    ck_assert_int_eq(mos_plan(&s, work, 2, &m, err, sizeof err), 0);
    for (int st = 2; st < ns; st++)
        for (long b = 0; b < mos_nblocks(m, st); b++)
            ck_assert_int_eq(mos_run_block(m, st, b, NULL, err, sizeof err), 0);
    ck_assert_int_eq(mos_run_block(m, 3, 3, NULL, err, sizeof err), 0);
    ck_assert_int_eq(mos_run_block(m, 0, 5, NULL, err, sizeof err), 0);
    ck_assert_int_eq(mos_finish(m, out, err, sizeof err), 0);
    ck_assert_int_eq(mos_finish(m, out, err, sizeof err), 0);
    /* a cancelled block says so */
    volatile int cancel = 1;
    ck_assert_int_eq(mos_run_block(m, 0, 0, &cancel, err, sizeof err), TESS_ECANCELED);
    mos_free(m);

    /* a different plan on the same directory is refused */
    mos_spec s2 = s;
    s2.combine = MOS_MEDIAN;
    ck_assert_int_eq(mos_plan(&s2, work, 1, &m, err, sizeof err), TESS_EINVAL);
    rm_dir(work);

    char p1[512];
    snprintf(p1, sizeof p1, "%s/straight.fits", dir);
    size_t n1, n2;
    char *a = slurp(p1, &n1), *b = slurp(out, &n2);
    ck_assert_int_eq(n1, n2);
    ck_assert_int_eq(n1 % 2880, 0);
    ck_assert_int_eq(memcmp(a, b, n1), 0);
    free(a);
    free(b);
    free(tc);
    rm_dir(dir);
}
END_TEST

/* HDU `hdu` (0-based) of `path`: cfitsio's verdict on its CHECKSUM and DATASUM (both 1
 * when they verify), and the DATASUM card's value. */
static void verify_hdu(const char *path, int hdu, unsigned long *datasum)
{
    fitsfile *f = NULL;
    int st = 0, dataok = 0, hduok = 0;
    char v[FLEN_VALUE];
    fits_open_file(&f, path, READONLY, &st);
    fits_movabs_hdu(f, hdu + 1, NULL, &st);
    fits_verify_chksum(f, &dataok, &hduok, &st);
    fits_read_key(f, TSTRING, "DATASUM", v, NULL, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_msg(dataok == 1 && hduok == 1, "%s HDU %d: data %d, hdu %d", path, hdu, dataok,
                  hduok);
    *datasum = strtoul(v, NULL, 10);
}

/* Writes n bytes at `off` of `path` (created if need be); n = 0: truncates it there. */
static void poke(const char *path, long off, const void *data, size_t n)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    if (n == 0) {
        ck_assert_int_eq(ftruncate(fileno(f), off), 0);
    } else {
        ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
        ck_assert_int_eq(fwrite(data, 1, n, f), n);
    }
    fclose(f);
}

/* The checksums mos_finish sets from the coadd bands' sums verify with cfitsio, equal
 * those summed from the file (a band's record garbled or missing: the same bytes), are
 * what DATASUM is made of (the data changed after the coadd: the band sums no longer
 * verify, while without them the file's sum does), and fitswrite_sum32 of a data unit
 * cut into pieces at multiples of 4 bytes, combined, gives its DATASUM.  (The product
 * is a hard link to the work directory's mosaic.fits, which each mos_finish rewrites:
 * every product is read before the next.) */
START_TEST(test_checksums_from_bands)
{
    setup_tiles();
    char dir[256], err[512] = "", work[512], out[512], sums[600], wfits[600];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    snprintf(out, sizeof out, "%s/sums.fits", dir);
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_combine cm[2] = { MOS_MEAN, MOS_MEDIAN };
    for (int c = 0; c < 2; c++) {
        mos_spec s = base_spec(tiles, 6, tc, tk);
        s.combine = cm[c];
        snprintf(work, sizeof work, "%s/work-%d", dir, c);
        snprintf(sums, sizeof sums, "%s/sums.bin", work);
        snprintf(wfits, sizeof wfits, "%s/mosaic.fits", work);
        ck_assert_int_eq(mkdir(work, 0755), 0);
        mosaic *m = NULL;
        ck_assert_int_eq(mos_plan(&s, work, 1, &m, err, sizeof err), 0);
        long nb = mos_nblocks(m, mos_nstages(m) - 1), nx = 0, ny = 0;
        ck_assert_int_ge(nb, 2);
        mos_target_size(m, &nx, &ny);
        for (int st = 0; st < mos_nstages(m); st++)
            for (long b = 0; b < mos_nblocks(m, st); b++)
                ck_assert_int_eq(mos_run_block(m, st, b, NULL, err, sizeof err), 0);
        size_t n[3], sn = 0;
        char *d[3], *saved = slurp(sums, &sn);
        ck_assert_uint_eq(sn, (size_t)nb * 16);
        unsigned long ds[2];
        ck_assert_msg(mos_finish(m, out, err, sizeof err) == 0, "%s", err);
        verify_hdu(out, 0, &ds[0]);
        verify_hdu(out, 1, &ds[1]);
        ck_assert(ds[0] != 0 && ds[1] != 0);
        d[0] = slurp(out, &n[0]);
        /* the last band's record garbled, then missing: summed from the file instead */
        poke(sums, (nb - 1) * 16 + 4, "garbage", 7);
        ck_assert_msg(mos_finish(m, out, err, sizeof err) == 0, "%s", err);
        d[1] = slurp(out, &n[1]);
        poke(sums, (nb - 1) * 16, NULL, 0);
        ck_assert_msg(mos_finish(m, out, err, sizeof err) == 0, "%s", err);
        d[2] = slurp(out, &n[2]);
        ck_assert(n[1] == n[0] && n[2] == n[0]);
        ck_assert_int_eq(memcmp(d[0], d[1], n[0]), 0);
        ck_assert_int_eq(memcmp(d[0], d[2], n[0]), 0);
        /* a data byte changed after the coadd: the bands' sums say what was written */
        size_t hl = 0;
        while (hl + 80 <= n[0] && strncmp(d[0] + hl, "END     ", 8) != 0)
            hl += 80;
        hl = (hl / 2880 + 1) * 2880;
        unsigned char flip = (unsigned char)(d[0][hl + 101] ^ 0x10);
        poke(wfits, (long)hl + 101, &flip, 1);
        poke(sums, 0, saved, sn);
        ck_assert_msg(mos_finish(m, out, err, sizeof err) == 0, "%s", err);
        fitsfile *ff = NULL;
        int st = 0, dataok = 0, hduok = 0;
        fits_open_file(&ff, out, READONLY, &st);
        fits_verify_chksum(ff, &dataok, &hduok, &st);
        fits_close_file(ff, &st);
        ck_assert(st == 0 && dataok == -1);
        ck_assert_int_eq(unlink(sums), 0);
        ck_assert_msg(mos_finish(m, out, err, sizeof err) == 0, "%s", err);
        unsigned long dflip;
        verify_hdu(out, 0, &dflip);
        ck_assert_uint_ne(dflip, ds[0]);
        mos_free(m);
        rm_dir(work);
        free(saved);
        /* HDU 0's data unit in pieces of 4, 4 x 7 and 4 x 331 bytes, summed in reverse */
        size_t dl = ((size_t)nx * (size_t)ny * 4 + 2879) / 2880 * 2880;
        ck_assert_uint_le(hl + dl, n[0]);
        uint32_t sum = 0;
        size_t end = dl, step[3] = { 4, 28, 1324 };
        for (int q = 0; end > 0; q = (q + 1) % 3) {
            size_t len = step[q] < end ? step[q] : end;
            sum = fitswrite_sum_add(sum, fitswrite_sum32(d[0] + hl + end - len, len, 0));
            end -= len;
        }
        ck_assert_uint_eq(sum, ds[0]);
        ck_assert_uint_eq(fitswrite_sum32(d[0] + hl, dl, 0), ds[0]);
        for (int k = 0; k < 3; k++)
            free(d[k]);
    }
    free(tc);
    rm_dir(dir);
}
END_TEST

/* Errors: no overlap, unreadable input, bad target. */
/* The staged planes held in memory (mos_stage_in_memory) give the product of the files
 * byte for byte (test_reference_mean checks the files' against reproject's), with and
 * without weights (exact) and background matching (the overlap fits read them); a bound
 * one byte short of mos_stage_bytes keeps the files. */
START_TEST(test_staged_in_memory)
{
    setup_tiles();
    char dir[256];
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_spec s = base_spec(tiles, 6, tc, tk);
    for (int c = 0; c < 2; c++) {
        s.method = c ? RP_EXACT : RP_BILINEAR;
        s.bg = c ? MOS_BG_PLANE : MOS_BG_NONE;
        mosaic *m = NULL;
        char err[512] = "";
        ck_assert_msg(mos_plan(&s, NULL, 1, &m, err, sizeof err) == 0, "%s", err);
        double need = mos_stage_bytes(m);
        ck_assert_int_eq(mos_stage_in_memory(m, 1e18), 0);   /* no work directory */
        mos_free(m);
        /* 6 inputs of about 300 x 300 output pixels, 4 bytes each, a plane or two */
        ck_assert(need > (c ? 2.0 : 1.0) * 6 * 4 * 250 * 250 && need < 1e8);
        run_mosaic(&s, dir, "files.fits");
        run_mosaic_staged(&s, dir, "mem.fits", need, 1);
        run_mosaic_staged(&s, dir, "short.fits", need - 1, 0);
        char pf[512], pm[512], ps[512];
        snprintf(pf, sizeof pf, "%s/files.fits", dir);
        snprintf(pm, sizeof pm, "%s/mem.fits", dir);
        snprintf(ps, sizeof ps, "%s/short.fits", dir);
        size_t nf = 0, nm = 0, ns = 0;
        char *f = slurp(pf, &nf), *mm = slurp(pm, &nm), *sh = slurp(ps, &ns);
        ck_assert(f && mm && sh);
        ck_assert_uint_gt(nf, 2 * 4 * 700 * 700);
        ck_assert_uint_eq(nm, nf);
        ck_assert_uint_eq(ns, nf);
        ck_assert(memcmp(f, mm, nf) == 0 && memcmp(f, sh, nf) == 0);
        free(f);
        free(mm);
        free(sh);
        unlink(pf);
        unlink(pm);
        unlink(ps);
    }
    free(tc);
    rm_dir(dir);
}
END_TEST

START_TEST(test_errors)
{
    setup_tiles();
    char dir[256], err[512] = "";
    tt_tmpdir_make(dir, sizeof dir, "mosaic");
    static const char *const far[] = {
        "NAXIS1  =                  100", "NAXIS2  =                  100",
        "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRVAL1  =                 10.0",
        "CRVAL2  =                 40.0", "CRPIX1  =                 50.5",
        "CRPIX2  =                 50.5", "CDELT1  =               -0.001",
        "CDELT2  =                0.001", NULL };
    int nk = 0;
    char *cards = tt_make_cards(far, &nk);
    mos_spec s = base_spec(tiles, 6, cards, nk);
    mosaic *m = NULL;
    ck_assert_int_eq(mos_plan(&s, dir, 1, &m, err, sizeof err), TESS_ENOOVERLAP);
    ck_assert_ptr_null(m);
    mos_input bad = { "/nonexistent/x.fits", NULL, 0, 0.0 };
    s = base_spec(&bad, 1, NULL, 0);
    ck_assert_int_lt(mos_plan(&s, dir, 1, &m, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "x.fits"));
    /* target without NAXIS2 */
    s = base_spec(tiles, 6, cards + 80, nk - 1);
    ck_assert_int_eq(mos_plan(&s, dir, 1, &m, err, sizeof err), TESS_EINVAL);
    /* too large for max_pixels */
    s = base_spec(tiles, 6, NULL, 0);
    s.max_pixels = 1000;
    ck_assert_int_eq(mos_plan(&s, dir, 1, &m, err, sizeof err), TESS_ETOOBIG);
    /* An input off the target is planned, and said to add nothing (the product's INPn
     * comment and the command line's warning come from mos_input_overlaps). */
    int tk = 0;
    char *tc = reference_target(&tk);
    mos_input two[2] = { tiles[0], { TESSERA_DEMO_DIR "/HorseHead.fits", NULL, 0, 0.0 } };
    s = base_spec(two, 2, tc, tk);
    ck_assert_msg(mos_plan(&s, dir, 1, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(mos_input_overlaps(m, 0), 1);
    ck_assert_int_eq(mos_input_overlaps(m, 1), 0);
    ck_assert_int_eq(mos_input_overlaps(m, 2), 0);
    mos_free(m);
    m = NULL;
    free(tc);
    free(cards);
    rm_dir(dir);
}
END_TEST

/* A plan made on a pool of workers (the headers read and the inputs placed in slices)
 * equals the plan made on one thread: the same target, the same box for every input;
 * and with unreadable inputs among them, the error names the first of them in input
 * order, as the serial plan does. */
START_TEST(test_plan_on_pool)
{
    setup_tiles();
    char err1[512] = "", err2[512] = "";
    pool *p = pool_new(2, 16);
    ck_assert_ptr_nonnull(p);
    mos_spec s = base_spec(tiles, 6, NULL, 0);
    mosaic *m1 = NULL, *m2 = NULL;
    ck_assert_msg(mos_plan(&s, NULL, 1, &m1, err1, sizeof err1) == 0, "%s", err1);
    s.pool = p;
    ck_assert_msg(mos_plan(&s, NULL, 3, &m2, err2, sizeof err2) == 0, "%s", err2);
    long nx1, ny1, nx2, ny2;
    mos_target_size(m1, &nx1, &ny1);
    mos_target_size(m2, &nx2, &ny2);
    ck_assert(nx1 == nx2 && ny1 == ny2);
    for (int k = 0; k < 6; k++) {
        long b1[4], b2[4];
        mos_input_box(m1, k, b1);
        mos_input_box(m2, k, b2);
        ck_assert_msg(memcmp(b1, b2, sizeof b1) == 0, "input %d: box %ld %ld %ld %ld, "
                      "not %ld %ld %ld %ld", k, b2[0], b2[1], b2[2], b2[3], b1[0], b1[1],
                      b1[2], b1[3]);
    }
    ck_assert_int_eq(mos_nblocks(m1, 0), mos_nblocks(m2, 0));
    mos_free(m1);
    mos_free(m2);
    mos_input mixed[7] = { tiles[0], tiles[1], { "/nonexistent/first.fits", NULL, 0, 0.0 },
                           tiles[2], tiles[3], { "/nonexistent/second.fits", NULL, 0, 0.0 },
                           tiles[4] };
    for (int t = 1; t <= 4; t++) {
        s = base_spec(mixed, 7, NULL, 0);
        s.pool = t > 1 ? p : NULL;
        m1 = NULL;
        ck_assert_int_lt(mos_plan(&s, NULL, t, &m1, err1, sizeof err1), 0);
        ck_assert_ptr_null(m1);
        ck_assert_msg(strstr(err1, "first.fits") && !strstr(err1, "second.fits"),
                      "%d threads: %s", t, err1);
    }
    pool_free(p);
}
END_TEST

/* The accumulator alone: each combination on three images of a 4-pixel row, with
 * weights, a NaN, a zero weight and a background plane, against values worked by hand. */
START_TEST(test_accum_by_hand)
{
    const float v1[4] = { 1.0f, 2.0f, NAN, 4.0f }, w1[4] = { 1.0f, 0.5f, 1.0f, 1.0f };
    const float v2[4] = { 3.0f, 6.0f, 5.0f, 0.0f }, w2[4] = { 1.0f, 0.5f, 0.0f, 1.0f };
    const float v3[3] = { 11.0f, 12.0f, 13.0f };
    /* image 3 covers pixels 1..3 with weight 1 and the correction 1 + 2 x (x = 1, 2, 3:
     * 3, 5, 7), so its values there are 8, 7, 6. */
    struct { mos_combine c; float want[4]; float cov[4]; } cases[] = {
        { MOS_MEAN, { 2.0f, (0.5f * 2 + 0.5f * 6 + 8) / 2.0f, 7.0f, (4 + 0 + 6) / 3.0f },
          { 2, 2, 1, 3 } },
        { MOS_SUM, { 4.0f, 12.0f, 7.0f, 10.0f }, { 2, 2, 1, 3 } },
        { MOS_MEDIAN, { 2.0f, 6.0f, 7.0f, 4.0f }, { 2, 2, 1, 3 } },
        { MOS_MIN, { 1.0f, 2.0f, 7.0f, 0.0f }, { 2, 2, 1, 3 } },
        { MOS_MAX, { 3.0f, 8.0f, 7.0f, 6.0f }, { 2, 2, 1, 3 } },
        { MOS_FIRST, { 1.0f, 2.0f, 7.0f, 4.0f }, { 2, 2, 1, 3 } },
        { MOS_LAST, { 3.0f, 8.0f, 7.0f, 6.0f }, { 2, 2, 1, 3 } },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        mos_accum a;
        ck_assert_int_eq(mos_accum_init(&a, cases[k].c, 4, 3), 0);
        for (int round = 0; round < 2; round++) {   /* a reset starts over */
            mos_accum_reset(&a, 4);
            mos_accum_add(&a, 0, v1, w1, 4, 0.0, 0.0, 0);
            mos_accum_add(&a, 0, v2, w2, 4, 0.0, 0.0, 0);
            mos_accum_add(&a, 1, v3, NULL, 3, 1.0, 2.0, 1);
            float out[4], cov[4];
            mos_accum_result(&a, out, cov);
            for (int i = 0; i < 4; i++) {
                ck_assert_msg(fabsf(out[i] - cases[k].want[i]) <= 1e-6f,
                              "%s pixel %d: %g, want %g", mos_combine_name(cases[k].c), i,
                              out[i], cases[k].want[i]);
                ck_assert_float_eq(cov[i], cases[k].cov[i]);
            }
        }
        /* a pixel nothing counted in is NaN with coverage 0 */
        mos_accum_reset(&a, 2);
        const float nan2[2] = { NAN, 1.0f }, zero2[2] = { 1.0f, 0.0f };
        mos_accum_add(&a, 0, nan2, zero2, 2, 0.0, 0.0, 0);
        float out[2], cov[2];
        mos_accum_result(&a, out, cov);
        ck_assert(isnan(out[0]) && isnan(out[1]));
        ck_assert_float_eq(cov[0], 0.0f);
        ck_assert_float_eq(cov[1], 0.0f);
        mos_accum_free(&a);
    }
    mos_accum a;
    ck_assert_int_eq(mos_accum_init(&a, MOS_MEAN, 0, 1), TESS_EINVAL);
    ck_assert_int_eq(mos_accum_init(&a, MOS_MEDIAN, 4, 0), TESS_EINVAL);
    ck_assert_double_eq(mos_accum_bytes(MOS_MEAN, 10, 5), 160.0);
    ck_assert_double_eq(mos_accum_bytes(MOS_MEDIAN, 10, 5), 160.0 + 4.0 * 10 * 6);
}
END_TEST

/* The collections' levels (mos_bg_solve_levels): offsets of 61 images recovered exactly
 * (to 1e-10 of their range) from exact pairwise differences on a graph of two connected
 * groups (a chain and 0..3 extra edges per image, weights 1..1000) and one image in no
 * pair: each group's mean is zero, the lone image gets 0.  And mos_bg_fit_level: a level
 * of 2.5 with +-0.01 noise and 10% outliers at 1000 is the mean of the 300 inliers. */
START_TEST(test_bg_levels)
{
    enum { N = 61, G = 40 };
    double truth[N], x[N];
    unsigned seed = 12345;
    for (int k = 0; k < N; k++) {
        seed = seed * 1103515245u + 12345u;
        truth[k] = ((double)(seed >> 8 & 0xffff) / 65536.0 - 0.5) * 40.0;
    }
    mos_bg_pair pairs[4 * N];
    long np = 0;
    for (int k = 0; k + 1 < N - 1; k++) {
        if (k + 1 == G)
            continue;   /* two groups: 0..39 and 40..59; 60 alone */
        int lo = k < G ? 0 : G, hi = k < G ? G : N - 1;
        pairs[np++] = (mos_bg_pair){k, k + 1, truth[k] - truth[k + 1],
                                    1.0 + (double)(k % 7) * 150.0};
        for (int e = 0; e < k % 4; e++) {
            seed = seed * 1103515245u + 12345u;
            int j = lo + (int)((seed >> 8) % (unsigned)(hi - lo));
            if (j != k)
                pairs[np++] = (mos_bg_pair){j, k, truth[j] - truth[k], 1.0 + (double)(e * 333)};
        }
    }
    pairs[np++] = (mos_bg_pair){3, 7, 1e9, 0.0};   /* no weight: no constraint */
    ck_assert_int_eq(mos_bg_solve_levels(N, pairs, np, x), 0);
    double mean[2] = {0, 0};
    for (int k = 0; k < N - 1; k++)
        mean[k >= G] += truth[k] / (k >= G ? (double)(N - 1 - G) : (double)G);
    for (int k = 0; k < N - 1; k++)
        ck_assert_msg(fabs(x[k] - (truth[k] - mean[k >= G])) <= 1e-10 * 40.0,
                      "image %d: %.15g, not %.15g", k, x[k], truth[k] - mean[k >= G]);
    ck_assert_double_eq(x[N - 1], 0.0);

    double d[330], level, kept;
    for (int k = 0; k < 330; k++)
        d[k] = k < 300 ? 2.5 + 0.01 * (double)(k % 3 - 1) : 1000.0;
    ck_assert_int_eq(mos_bg_fit_level(330, d, &level, &kept), 0);
    ck_assert_msg(fabs(level - 2.5) <= 1e-12, "level %.15g", level);
    ck_assert_double_eq(kept, 300.0);
    ck_assert_int_eq(mos_bg_fit_level(0, d, &level, &kept), 0);
    ck_assert(isnan(level) && kept == 0.0);
}
END_TEST

/* The vectorised rows of the sums against the formula of coadd.h worked pixel by pixel
 * in double (bit for bit: the same operations in the same order), over rows whose lengths
 * leave vector tails, with NaN, infinite, zero and negative weights, a background plane,
 * and a column origin past INT_MAX (the path that converts columns from long); and
 * mos_accum_result_be against mos_accum_result swapped to big-endian, for every combine,
 * with the DATASUM parts it adds. */
START_TEST(test_accum_rows_and_be)
{
    enum { N = 37, IMGS = 3 };
    float v[IMGS][N], w[IMGS][N];
    for (int k = 0; k < IMGS; k++)
        for (int x = 0; x < N; x++) {
            v[k][x] = (float)((x * 7 + k * 13) % 11) * 0.37f - 1.5f + (float)k;
            w[k][x] = (float)((x + 2 * k) % 5) * 0.25f - 0.25f;   /* -0.25 .. 0.75 */
        }
    v[0][3] = NAN;
    v[1][4] = INFINITY;
    v[2][5] = -INFINITY;
    const long x0s[2] = { 5, 3000000000L };
    for (int xi = 0; xi < 2; xi++) {
        for (int weighted = 0; weighted < 2; weighted++) {
            for (int c = 0; c < 2; c++) {
                mos_combine comb = c ? MOS_SUM : MOS_MEAN;
                mos_accum a;
                ck_assert_int_eq(mos_accum_init(&a, comb, N + 3, IMGS), 0);
                double ra[N], rw[N];
                for (int x = 0; x < N; x++)
                    ra[x] = rw[x] = 0.0;
                for (int k = 0; k < IMGS; k++) {
                    double base = 0.5 * k - 0.125, slope = 1e-9 * (k + 1);
                    mos_accum_add(&a, 2, v[k], weighted ? w[k] : NULL, N, base, slope, x0s[xi]);
                    for (int x = 0; x < N; x++) {
                        double wt = weighted ? (double)w[k][x] : 1.0;
                        if (wt > 0.0 && isfinite(v[k][x])) {
                            ra[x] += wt * ((double)v[k][x]
                                           - (base + slope * (double)(x0s[xi] + x)));
                            rw[x] += wt;
                        }
                    }
                }
                float out[N + 3], cov[N + 3];
                mos_accum_result(&a, out, cov);
                for (int x = 0; x < N; x++) {
                    float want = rw[x] > 0.0 ? (float)(c ? ra[x] : ra[x] / rw[x]) : NAN;
                    ck_assert_msg(memcmp(&out[2 + x], &want, 4) == 0 || (isnan(want)
                                  && isnan(out[2 + x])), "x0 %ld %s%s pixel %d: %.9g, want "
                                  "%.9g", x0s[xi], mos_combine_name(comb),
                                  weighted ? " weighted" : "", x, out[2 + x], want);
                    ck_assert_float_eq(cov[2 + x], (float)rw[x]);
                }
                ck_assert(isnan(out[0]) && isnan(out[N + 2]) && cov[0] == 0.0f);
                mos_accum_free(&a);
            }
        }
    }
    /* the result in FITS byte order, for every combine */
    for (int c = 0; c < 7; c++) {
        mos_accum a;
        ck_assert_int_eq(mos_accum_init(&a, (mos_combine)c, N, IMGS), 0);
        for (int k = 0; k < IMGS; k++)
            mos_accum_add(&a, 0, v[k], w[k], N, 0.25, 0.0, 0);
        float out[N], cov[N];
        unsigned char be[N][4], bc[N][4];
        uint32_t sums[2] = { 5, 0xfffffff0u };
        mos_accum_result_be(&a, be, bc, sums);
        /* the DATASUM parts added: those of the bytes as stored */
        ck_assert_uint_eq(sums[0], fitswrite_sum32(be, sizeof be, 5));
        ck_assert_uint_eq(sums[1], fitswrite_sum32(bc, sizeof bc, 0xfffffff0u));
        mos_accum_result(&a, out, cov);
        for (int x = 0; x < N; x++) {
            unsigned char o[4], q[4];
            memcpy(o, &out[x], 4);
            memcpy(q, &cov[x], 4);
            for (int b = 0; b < 4; b++) {
                int nb = 1;
                int idx = *(unsigned char *)&nb ? 3 - b : b;   /* little-endian host: reversed */
                ck_assert_msg(be[x][b] == o[idx] && bc[x][b] == q[idx],
                              "%s pixel %d byte %d", mos_combine_name((mos_combine)c), x, b);
            }
        }
        mos_accum_result_be(&a, be, NULL, NULL);   /* cov and sums may be NULL */
        mos_accum_free(&a);
    }
}
END_TEST

static Suite *mosaic_suite(void)
{
    Suite *s = suite_create("mosaic");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_accum_by_hand);
    tcase_add_test(tc, test_accum_double);
    tcase_add_test(tc, test_accum_rows_and_be);
    tcase_add_test(tc, test_reference_mean);
    tcase_add_test(tc, test_background_matching);
    tcase_add_test(tc, test_single_input_matching);
    tcase_add_test(tc, test_bg_levels);
    tcase_add_test(tc, test_auto_target);
    tcase_add_test(tc, test_ra_wrap);
    tcase_add_test(tc, test_combine_modes);
    tcase_add_test(tc, test_idempotent_blocks);
    tcase_add_test(tc, test_checksums_from_bands);
    tcase_add_test(tc, test_staged_in_memory);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_plan_on_pool);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(mosaic_suite());
}
