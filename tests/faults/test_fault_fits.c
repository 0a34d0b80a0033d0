/* FITS reading under injected faults: fitsimg's header, cards, data offset and pixel
 * reads of the files of tests/data, with every allocation and every file operation
 * failing in turn (tests/faults/faultloop.h).  A read that succeeds must give exactly what
 * it gives without faults; one that fails must say why. */
#include "engine/base/error.h"
#include "engine/fits/fitsimg.h"
#include "tests/faults/faultloop.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const files[] = {
    TESSERA_TESTDATA_DIR "/galactic_2d.fits",
    TESSERA_TESTDATA_DIR "/equatorial_3d.fits",
    TESSERA_TESTDATA_DIR "/mosaic/tile_1.fits",
    TESSERA_TESTDATA_DIR "/headers/cube.hdr",
};
#define NFILES (int)(sizeof files / sizeof files[0])

/* What each file gives without faults. */
typedef struct ref {
    int is_fits;
    fitsimg_info info;
    char *cards;
    int ncards;
    long long offset;
    long z;                  /* the plane read: the last */
    double *f64;
    float *f32, *astropy;
} ref;
static ref refs[NFILES];

static int same_f64(const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))))
            return 0;
    return 1;
}

static int same_f32(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))))
            return 0;
    return 1;
}

/* Reads file i as the scenario does into r (faults as armed); 0 or the first error. */
static int read_file(int i, ref *r, char *err, size_t errlen)
{
    const char *path = files[i];
    memset(r, 0, sizeof *r);
    int rc = fitsimg_read_cards(path, 0, 2000, &r->cards, &r->ncards, &r->is_fits, err,
                                errlen);
    if (rc || !r->is_fits)
        return rc;
    rc = fitsimg_read_info(path, 0, &r->info, err, errlen);
    if (rc)
        return rc;
    rc = fitsimg_data_offset(path, 0, &r->offset, err, errlen);
    if (rc)
        return rc;
    long nx = r->info.naxes[0], ny = r->info.naxes[1];
    size_t n = (size_t)nx * (size_t)ny;
    r->z = r->info.naxis >= 3 ? r->info.naxes[2] - 1 : 0;
    /* The harness's own buffers: not fault points. */
    fi_hold(1);
    r->f64 = malloc(n * sizeof *r->f64);
    r->f32 = malloc(n * sizeof *r->f32);
    r->astropy = malloc(n * sizeof *r->astropy);
    fi_hold(0);
    if (!r->f64 || !r->f32 || !r->astropy) {
        tess_seterr(err, errlen, "out of memory for the pixels of %s", path);
        return TESS_ENOMEM;
    }
    rc = fitsimg_read_region(path, 0, r->z, 0, 0, nx, ny, r->f64, err, errlen);
    if (!rc)
        rc = fitsimg_read_region_f32(path, 0, r->z, 0, 0, nx, ny, r->f32, err, errlen);
    if (!rc)
        rc = fitsimg_read_values(path, 0, FITSIMG_F32_ASTROPY, (size_t)r->z * n, n, r->astropy,
                                 err, errlen);
    return rc;
}

static void ref_free(ref *r)
{
    free(r->cards);
    fitsimg_info_release(&r->info);
    free(r->f64);
    free(r->f32);
    free(r->astropy);
    memset(r, 0, sizeof *r);
}

/* Everything r holds equals the reference of file i (a read that succeeded). */
static void require_same(int i, const ref *r)
{
    const ref *w = &refs[i];
    const char *p = files[i];
    fl_require(r->ncards == w->ncards && r->cards && memcmp(r->cards, w->cards,
               (size_t)w->ncards * 80) == 0, "%s: cards differ from the run without faults", p);
    if (!w->is_fits)
        return;
    fl_require(r->info.naxis == w->info.naxis && r->info.bitpix == w->info.bitpix &&
               memcmp(r->info.naxes, w->info.naxes, sizeof w->info.naxes) == 0 &&
               r->info.nkeys == w->info.nkeys && r->info.bscale == w->info.bscale &&
               r->info.bzero == w->info.bzero && r->info.data_offset == w->info.data_offset &&
               strcmp(r->info.header, w->info.header) == 0 &&
               strcmp(r->info.bunit, w->info.bunit) == 0,
               "%s: header differs from the run without faults", p);
    fl_require(r->offset == w->offset, "%s: data offset %lld, want %lld", p, r->offset,
               w->offset);
    size_t n = (size_t)w->info.naxes[0] * (size_t)w->info.naxes[1];
    fl_require(same_f64(r->f64, w->f64, n), "%s: float64 pixels differ", p);
    fl_require(same_f32(r->f32, w->f32, n), "%s: float32 pixels differ", p);
    fl_require(same_f32(r->astropy, w->astropy, n), "%s: astropy-scaled pixels differ", p);
}

/* ---- the scenario ------------------------------------------------------------------- */

static void fits_reset(void *ctx)
{
    (void)ctx;
}

static int fits_run(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    for (int i = 0; i < NFILES; i++) {
        ref r;
        int rc = read_file(i, &r, err, errlen);
        if (rc == 0)
            require_same(i, &r);
        ref_free(&r);
        if (rc)
            return rc;
    }
    return 0;
}

static void fits_check(void *ctx, int rc, long faults)
{
    (void)ctx;
    (void)rc;
    (void)faults;
}

static const fl_scenario fits_scenario = {"fits reading", fits_reset, fits_run, fits_check,
                                          NULL, 0};

static void setup(void)
{
    char err[512] = "";
    for (int i = 0; i < NFILES; i++)
        ck_assert_msg(read_file(i, &refs[i], err, sizeof err) == 0, "%s", err);
}

static void teardown(void)
{
    for (int i = 0; i < NFILES; i++)
        ref_free(&refs[i]);
}

START_TEST(test_fits_alloc)
{
    fl_loop_modes(&fits_scenario, FI_ALLOC);
}
END_TEST

START_TEST(test_fits_io)
{
    fl_loop_modes(&fits_scenario, FI_IO);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault_fits");
    TCase *tc = tcase_create("fits");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_fits_alloc);
    tcase_add_test(tc, test_fits_io);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
