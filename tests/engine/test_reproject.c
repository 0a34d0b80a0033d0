/* Unit tests of engine/sky/reproject: kernels, round trip, golden astropy references, the parallel block engine. */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/fits/fitscard.h"
#include "engine/sky/kernels.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"
#include "engine/base/pool.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* Reads HDU `hdu` of a 2-D FITS image: the header as cards and the pixels as
 * astropy.io.fits delivers them (integer images with BSCALE/BZERO scaled in float32,
 * as astropy does for BITPIX 8 and 16; float32 images as float32; both widened to
 * double), so that the reference arrays can be matched to rounding. */
static double *read_fits(const char *path, int hdu, long *nx, long *ny, char **cards, int *nkeys)
{
    int f32 = 0;
    void *px = tt_read_image(path, hdu + 1, nx, ny, cards, nkeys, &f32);
    if (!f32)
        return px;
    long n = *nx * *ny;
    double *out = malloc(sizeof(double) * (size_t)n);
    for (long i = 0; i < n; i++)
        out[i] = ((const float *)px)[i];
    free(px);
    return out;
}

/* A small 2-D equatorial header on projection `proj` (CAR at (0, 0) with power-of-two
 * CDELT is exactly linear in wcslib, which the kernel tests rely on). */
static skywcs *eq_wcs(const char *proj, double ra, double dec, double cdelt, double crpix1,
                      double crpix2, const char *radesys)
{
    char l[8][81];
    snprintf(l[0], 81, "CTYPE1  = 'RA---%s'", proj);
    snprintf(l[1], 81, "CTYPE2  = 'DEC--%s'", proj);
    snprintf(l[2], 81, "CRVAL1  = %.15g", ra);
    snprintf(l[3], 81, "CRVAL2  = %.15g", dec);
    snprintf(l[4], 81, "CRPIX1  = %.15g", crpix1);
    snprintf(l[5], 81, "CRPIX2  = %.15g", crpix2);
    snprintf(l[6], 81, "CDELT1  = %.15g", -cdelt);
    snprintf(l[7], 81, "CDELT2  = %.15g", cdelt);
    const char *lines[11] = { l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], NULL, NULL, NULL };
    char rs[81];
    if (radesys) {
        snprintf(rs, sizeof rs, "RADESYS = '%s'", radesys);
        lines[8] = rs;
    }
    int nk;
    char *cards = tt_make_cards(lines, &nk);
    skywcs *w = tt_parse_wcs(cards, nk);
    free(cards);
    return w;
}

/* ---- kernels ------------------------------------------------------------------------ */

/* A 5x4 image onto itself: every pixel centre maps to itself, both kernels return the
 * input exactly. */
START_TEST(test_identity)
{
    skywcs *w = eq_wcs("TAN", 10.0, 20.0, 0.001, 3.0, 2.5, "ICRS");
    double src[20], dst[20];
    for (int i = 0; i < 20; i++)
        src[i] = i * 1.5 - 3.0;
    for (int m = 0; m < 2; m++) {
        long n = reproject_plane(w, src, 5, 4, w, 5, 4, m ? RP_BILINEAR : RP_NEAREST, 0.0,
                                 dst, NULL, 0);
        ck_assert_int_eq(n, 20);
        for (int i = 0; i < 20; i++)
            ck_assert_double_eq_tol(dst[i], src[i], 1e-9);
    }
    skywcs_free(w);
}
END_TEST

/* The output grid shifted by half an input pixel along x (same projection, CRPIX moved):
 * bilinear averages neighbours, nearest rounds .5 up (scipy's floor(x + 0.5)), and the
 * edge pixel is extended up to -0.5 / n - 0.5 and NaN beyond. */
START_TEST(test_half_pixel_shift)
{
    /* Input 4x1 and output 6x1 on the same CAR grid, the output starting 1.5 px left. */
    skywcs *in = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 1.0, 1.0, "ICRS");
    skywcs *out = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 2.5, 1.0, "ICRS");   /* out x = in x + 1.5 */
    double src[4] = { 1.0, 2.0, 4.0, 8.0 }, dst[6];
    /* Output pixel i sits at input pixel i - 1.5. */
    long n = reproject_plane(in, src, 4, 1, out, 6, 1, RP_BILINEAR, 0.0, dst, NULL, 0);
    ck_assert(isnan(dst[0]));                         /* -1.5: outside */
    ck_assert_double_eq_tol(dst[1], 1.0, 1e-9);       /* -0.5: edge, extended */
    ck_assert_double_eq_tol(dst[2], 1.5, 1e-9);       /* 0.5 */
    ck_assert_double_eq_tol(dst[3], 3.0, 1e-9);       /* 1.5 */
    ck_assert_double_eq_tol(dst[4], 6.0, 1e-9);       /* 2.5 */
    ck_assert_double_eq_tol(dst[5], 8.0, 1e-9);       /* 3.5 = n - 0.5: edge */
    ck_assert_int_eq(n, 5);
    n = reproject_plane(in, src, 4, 1, out, 6, 1, RP_NEAREST, 0.0, dst, NULL, 0);
    ck_assert(isnan(dst[0]));
    ck_assert_double_eq(dst[1], 1.0);                 /* floor(-0.5 + 0.5) = 0 */
    ck_assert_double_eq(dst[2], 2.0);                 /* floor(1.0) = 1 */
    ck_assert_double_eq(dst[3], 4.0);
    ck_assert_double_eq(dst[4], 8.0);
    ck_assert_double_eq(dst[5], 8.0);
    ck_assert_int_eq(n, 5);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* Every output pixel on a rounding boundary: a 320x320 output on the input's exactly
 * linear CAR grid (power-of-two CDELT) shifted by 10.5 pixels on both axes, so output
 * pixel (i, j) sits at input (i - 10.5, j - 10.5), the edges -0.5 and n - 0.5 included.
 * Nearest takes pixel floor(x + 0.5) (scipy order 0, clamped to n - 1 at x = n - 0.5)
 * and NaN outside: with the approximate grid too (max_coord_error 0.001), whose
 * interpolated positions miss the half-integers by rounding, since positions within
 * the grid's error bound of a decision are recomputed exactly (reproject.c
 * fix_decisions; next_near_round_avx2 or _avx512 by CPU).  On TAN the grid's result must
 * equal the exact transform's bit for bit. */
START_TEST(test_nearest_grid_decisions)
{
    enum { N = 300, M = 320 };
    const double d = 10.5;
    skywcs *in = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 150.0, 150.0, "ICRS");
    skywcs *out = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 150.0 + d, 150.0 + d, "ICRS");
    double *src = malloc(sizeof(double) * N * N), *dst = malloc(sizeof(double) * M * M);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (int k = 0; k < N * N; k++)
        src[k] = (double)k;
    for (int g = 0; g < 2; g++) {
        long n = reproject_plane(in, src, N, N, out, M, M, RP_NEAREST, g ? 0.001 : 0.0, dst,
                                 NULL, 0);
        long want = 0;
        for (int j = 0; j < M; j++)
            for (int i = 0; i < M; i++) {
                const double x = i - d, y = j - d, v = dst[j * M + i];
                if (x < -0.5 || x > N - 0.5 || y < -0.5 || y > N - 0.5) {
                    ck_assert_msg(isnan(v), "grid %d (%d, %d): %g, want NaN", g, i, j, v);
                    continue;
                }
                long pi = (long)floor(x + 0.5), pj = (long)floor(y + 0.5);
                pi = pi < N ? pi : N - 1;
                pj = pj < N ? pj : N - 1;
                ck_assert_msg(v == src[pj * N + pi], "grid %d (%d, %d): %g, want %g", g, i, j,
                              v, src[pj * N + pi]);
                want++;
            }
        ck_assert_int_eq(n, want);
    }
    skywcs_free(in);
    skywcs_free(out);
    /* The same on TAN away from the origin: exact positions now carry rounding noise
     * around the half-integers, so the reference is the exact transform of every point:
     * the grid must round each position the same way. */
    in = eq_wcs("TAN", 83.8, -5.4, 1.0 / 1024.0, 150.0, 150.0, "ICRS");
    out = eq_wcs("TAN", 83.8, -5.4, 1.0 / 1024.0, 150.0 + d, 150.0 + d, "ICRS");
    double *ref = malloc(sizeof(double) * M * M);
    ck_assert_ptr_nonnull(ref);
    long n0 = reproject_plane(in, src, N, N, out, M, M, RP_NEAREST, 0.0, ref, NULL, 0);
    long n1 = reproject_plane(in, src, N, N, out, M, M, RP_NEAREST, 0.001, dst, NULL, 0);
    ck_assert_int_eq(n1, n0);
    for (int k = 0; k < M * M; k++)
        ck_assert_msg(memcmp(&dst[k], &ref[k], sizeof(double)) == 0,
                      "TAN (%d, %d): grid %g, exact %g", k % M, k / M, dst[k], ref[k]);
    free(ref);
    free(src);
    free(dst);
    skywcs_free(in);
    skywcs_free(out);
}
END_TEST

/* The decisions of test_nearest_grid_decisions with float32 planes, where nearest and
 * bilinear sample straight into the output (kernels.h rp_kernel_sample_f32): on the
 * half-pixel-shifted CAR and TAN pairs (every position on a rounding boundary, the
 * edges -0.5 and n - 0.5 among them), a 2-plane cube with the approximate grid
 * (max_coord_error 0.001) gives the float32 narrowing of what the double output path
 * gives (rp_kernel_sample, then narrowing), bit for bit for nearest and within the
 * bound of float32 arithmetic for bilinear (kernels_f32.c bilinear_f32f), the same
 * footprint and finite count, on both planes; the exact transform's footprint and finite count (the edges
 * -0.5 and n - 0.5 are decisions for both kernels); and for nearest also the exact
 * transform's values. */
START_TEST(test_grid_decisions_f32)
{
    enum { N = 300, M = 320, P = M * M * 2 };
    const double d = 10.5;
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR };
    static const char *const proj[] = { "CAR", "TAN" };
    float *src = malloc(sizeof(float) * N * N * 2), *out = malloc(sizeof(float) * P * 5);
    double *ref = malloc(sizeof(double) * P);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(ref);
    for (int k = 0; k < N * N; k++) {
        src[k] = (float)k;
        src[N * N + k] = (float)(3 * k % 1009) - 500.0f;
    }
    src[N * N + 7 * N + 11] = NAN;
    float *grid = out, *exact = out + P, *gfp = out + 2 * P, *efp = out + 3 * P;
    float *rfp = out + 4 * P;
    for (int pj = 0; pj < 2; pj++) {
        double lon = pj ? 83.8 : 0.0, lat = pj ? -5.4 : 0.0;
        skywcs *in = eq_wcs(proj[pj], lon, lat, 1.0 / 1024.0, 150.0, 150.0, "ICRS");
        skywcs *ow = eq_wcs(proj[pj], lon, lat, 1.0 / 1024.0, 150.0 + d, 150.0 + d, "ICRS");
        for (int mi = 0; mi < 2; mi++) {
            const char *name = rp_method_name(ms[mi]);
            rp_cube s = { src, RP_F32, N, N, 2 };
            rp_cube dg = { grid, RP_F32, M, M, 2 }, de = { exact, RP_F32, M, M, 2 };
            rp_cube dr = { ref, RP_F64, M, M, 2 };
            rp_options o;
            rp_options_init(&o);
            o.method = ms[mi];
            o.threads = 1;
            char err[256] = "";
            o.max_coord_error = 0.001;
            long ng = rp_reproject(in, &s, ow, &dg, gfp, &o, err, sizeof err);
            long nr = rp_reproject(in, &s, ow, &dr, rfp, &o, err, sizeof err);
            ck_assert_msg(ng > 0 && ng == nr, "%s %s: %ld finite, %ld with double output (%s)",
                          proj[pj], name, ng, nr, err);
            /* Bilinear of float planes into float output interpolates in float32
             * (kernels_f32.c bilinear_f32f): within 8 u (|v00| + |v01| + |v10| + |v11|) of
             * the double path, u = 2^-24, here bounded by 32 u times the plane's
             * largest |value| (N * N - 1 on plane 0, 508 on plane 1). */
            for (int k = 0; k < P; k++) {
                const float r = (float)ref[k];
                const double tol = ldexp(32.0, -24) * (k < P / 2 ? (double)(N * N - 1) : 508.0);
                const int same = ms[mi] == RP_NEAREST
                                 ? memcmp(&grid[k], &r, sizeof r) == 0
                                 : (isnan(grid[k]) && isnan(ref[k]))
                                       || fabs((double)grid[k] - ref[k]) <= tol;
                ck_assert_msg(same && gfp[k] == rfp[k],
                              "%s %s: pixel %d: %.9g (footprint %g), double path %.9g (%g)",
                              proj[pj], name, k, (double)grid[k], (double)gfp[k], ref[k],
                              (double)rfp[k]);
            }
            o.max_coord_error = 0.0;
            long ne = rp_reproject(in, &s, ow, &de, efp, &o, err, sizeof err);
            ck_assert_int_eq(ne, ng);
            if (ms[mi] != RP_NEAREST) {
                /* Bilinear: the edges are decisions too (reproject.c next_near_edge_avx2
                 * or _avx512 by CPU), so the footprint is the exact transform's. */
                ck_assert_msg(memcmp(gfp, efp, sizeof(float) * P) == 0,
                              "%s bilinear: grid and exact footprints differ", proj[pj]);
                continue;
            }
            ck_assert_msg(memcmp(grid, exact, sizeof(float) * P) == 0
                          && memcmp(gfp, efp, sizeof(float) * P) == 0,
                          "%s nearest: grid and exact transform differ", proj[pj]);
        }
        skywcs_free(in);
        skywcs_free(ow);
    }
    free(src);
    free(out);
    free(ref);
}
END_TEST

/* A NaN input pixel only spoils the bilinear samples that touch it. */
START_TEST(test_nan_input)
{
    skywcs *w = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 1.0, 1.0, "ICRS");
    skywcs *o = eq_wcs("CAR", 0.0, 0.0, 1.0 / 1024.0, 1.5, 1.0, "ICRS");   /* out x = in x + 0.5 */
    double src[4] = { 1.0, NAN, 4.0, 8.0 }, dst[4];
    long n = reproject_plane(w, src, 4, 1, o, 4, 1, RP_BILINEAR, 0.0, dst, NULL, 0);
    ck_assert_double_eq_tol(dst[0], 1.0, 1e-9);   /* -0.5 */
    ck_assert(isnan(dst[1]));                     /* 0.5 touches the NaN */
    ck_assert(isnan(dst[2]));                     /* 1.5 */
    ck_assert_double_eq_tol(dst[3], 6.0, 1e-9);   /* 2.5 */
    ck_assert_int_eq(n, 2);
    skywcs_free(w);
    skywcs_free(o);
}
END_TEST

START_TEST(test_method_names)
{
    static const char *const names[] = { "nearest", "bilinear", "bicubic", "lanczos3", "exact" };
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3, RP_EXACT };
    rp_method m;
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(rp_method_parse(names[i], &m), 0);
        ck_assert_int_eq(m, ms[i]);
        ck_assert_str_eq(rp_method_name(ms[i]), names[i]);
    }
    ck_assert_int_eq(rp_method_parse("BiCubic", &m), 0);
    ck_assert_int_eq(m, RP_BICUBIC);
    ck_assert_int_eq(rp_method_parse("bicubic-ish", &m), TESS_EINVAL);
    ck_assert_int_eq(rp_method_parse("", &m), TESS_EINVAL);
    ck_assert_str_eq(rp_method_name((rp_method)99), "unknown");
}
END_TEST

START_TEST(test_bad_arguments)
{
    skywcs *w = eq_wcs("TAN", 0.0, 0.0, 0.001, 1.0, 1.0, "ICRS");
    const char *lin[] = { "CTYPE1  = 'X'", "CTYPE2  = 'Y'", "CRPIX1  = 1", "CRPIX2  = 1", NULL };
    int nk;
    char *cards = tt_make_cards(lin, &nk);
    skywcs *plain = tt_parse_wcs(cards, nk);
    free(cards);
    double src[4] = { 0 }, dst[4];
    char err[128] = "";
    ck_assert_int_eq(reproject_plane(w, src, 0, 2, w, 2, 2, RP_BILINEAR, 0, dst, err, sizeof err),
                     TESS_EINVAL);
    ck_assert_int_eq(reproject_plane(w, src, 2, 2, w, 2, 2, RP_BILINEAR, -1, dst, err, sizeof err),
                     TESS_EINVAL);
    ck_assert_int_eq(reproject_plane(w, src, 2, 2, w, 2, 2, RP_BILINEAR, NAN, dst, err, sizeof err),
                     TESS_EINVAL);
    err[0] = '\0';
    ck_assert_int_eq(reproject_plane(plain, src, 2, 2, w, 2, 2, RP_BILINEAR, 0, dst, err, sizeof err),
                     TESS_EINVAL);
    ck_assert_msg(strstr(err, "celestial") != NULL, "err: %s", err);
    ck_assert_int_eq(reproject_plane(w, src, 2, 2, plain, 2, 2, RP_BILINEAR, 0, dst, err, sizeof err),
                     TESS_EINVAL);
    skywcs_free(plain);
    skywcs_free(w);
}
END_TEST

/* ---- golden references (astropy reproject 0.10) ---------------------------------- */

typedef struct golden_case {
    const char *name;
    const char *source;   /* in TESSERA_DEMO_DIR */
    rp_method method;
} golden_case;

static const golden_case golden[] = {
    { "gc2massk_to_ga_bilinear", "gc_2mass_k.fits", RP_BILINEAR },
    { "gc2massk_to_ga_nearest", "gc_2mass_k.fits", RP_NEAREST },
    { "rosat_to_eqcar_bilinear", "allsky_rosat.fits", RP_BILINEAR },
    { "rosat_to_eqcar_nearest", "allsky_rosat.fits", RP_NEAREST },
    { "horsehead_rot30_bilinear", "HorseHead.fits", RP_BILINEAR },
};

/* Reprojects golden case i with the given max_coord_error and compares with the
 * reference: max |diff| / peak over pixels finite in both, footprint agreement. */
static void run_golden(int i, double max_coord_error, double *rel, double *agree)
{
    const golden_case *g = &golden[i];
    char path[1024];
    long snx, sny, rnx, rny;
    char *scards, *rcards;
    int snk, rnk, tnk;
    snprintf(path, sizeof path, "%s/%s", TESSERA_DEMO_DIR, g->source);
    double *src = read_fits(path, 0, &snx, &sny, &scards, &snk);
    snprintf(path, sizeof path, "%s/reference/%s.fits", TESSERA_TESTDATA_DIR, g->name);
    double *ref = read_fits(path, 0, &rnx, &rny, &rcards, &rnk);
    snprintf(path, sizeof path, "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, g->name);
    char *tcards = tt_read_hdr_file(path, &tnk);

    skywcs *win = tt_parse_wcs(scards, snk);
    skywcs *wout = tt_parse_wcs(tcards, tnk);
    double *dst = malloc(sizeof(double) * (size_t)(rnx * rny));
    char err[256] = "";
    long nfin = reproject_plane(win, src, snx, sny, wout, rnx, rny, g->method, max_coord_error,
                                dst, err, sizeof err);
    ck_assert_msg(nfin >= 0, "%s: %s", g->name, err);

    double peak = 0.0, maxdiff = 0.0;
    long same = 0, count = 0;
    for (long k = 0; k < rnx * rny; k++) {
        if (isfinite(ref[k]) && fabs(ref[k]) > peak)
            peak = fabs(ref[k]);
        if (isfinite(dst[k]))
            count++;
        if (!!isfinite(ref[k]) == !!isfinite(dst[k]))
            same++;
        if (isfinite(ref[k]) && isfinite(dst[k]) && fabs(dst[k] - ref[k]) > maxdiff)
            maxdiff = fabs(dst[k] - ref[k]);
    }
    ck_assert_int_eq(nfin, count);
    *rel = maxdiff / peak;
    *agree = (double)same / (double)(rnx * rny);
    fprintf(stderr, "golden %-26s max_coord_error=%-6g max|diff|/peak=%.3e footprint=%.6f finite=%ld\n",
            g->name, max_coord_error, *rel, *agree, nfin);
    free(dst);
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    free(ref);
    free(tcards);
    fits_free_memory(scards, &(int){ 0 });
    fits_free_memory(rcards, &(int){ 0 });
}

START_TEST(test_golden_exact)
{
    double rel, agree;
    run_golden(_i, 0.0, &rel, &agree);
    ck_assert_msg(rel <= 2e-6, "%s: max diff / peak %.3e", golden[_i].name, rel);
    ck_assert_msg(agree >= 0.995, "%s: footprint agreement %.5f", golden[_i].name, agree);
}
END_TEST

START_TEST(test_golden_grid)
{
    double rel, agree;
    run_golden(_i, 0.001, &rel, &agree);
    ck_assert_msg(rel <= 2e-6, "%s: max diff / peak %.3e", golden[_i].name, rel);
    ck_assert_msg(agree >= 0.995, "%s: footprint agreement %.5f", golden[_i].name, agree);
}
END_TEST

/* The 2MASS Galactic-centre image onto a field at the north celestial pole region. */
START_TEST(test_no_overlap)
{
    char path[1024];
    long snx, sny;
    char *scards;
    int snk, nk;
    snprintf(path, sizeof path, "%s/gc_2mass_k.fits", TESSERA_DEMO_DIR);
    double *src = read_fits(path, 0, &snx, &sny, &scards, &snk);
    skywcs *win = tt_parse_wcs(scards, snk);
    char *cards = NULL;
    ck_assert_int_eq(skywcs_cutout_header(0.0, 60.0, 1.0, 64, 48, "TAN", SKY_FRAME_ICRS, 0.0,
                                          NULL, &cards, &nk, NULL, 0), 0);
    skywcs *wout = tt_parse_wcs(cards, nk);
    double *dst = malloc(sizeof(double) * 64 * 48);
    for (int m = 0; m < 2; m++) {
        long n = reproject_plane(win, src, snx, sny, wout, 64, 48, RP_BILINEAR,
                                 m ? 0.001 : 0.0, dst, NULL, 0);
        ck_assert_int_eq(n, 0);
        for (int k = 0; k < 64 * 48; k++)
            ck_assert(isnan(dst[k]));
    }
    free(dst);
    free(cards);
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    fits_free_memory(scards, &(int){ 0 });
}
END_TEST

/* The horsehead reference target is exactly the hips2fits-style header of a 400x300
 * TAN cutout at (85.25, -2.45), 0.2 deg wide, rotated by 30 deg: reprojecting onto the
 * header skywcs_cutout_header builds reproduces the reference too. */
START_TEST(test_cutout_header_matches_reference)
{
    char path[1024];
    long snx, sny, rnx, rny;
    char *scards, *rcards, *cards = NULL;
    int snk, rnk, nk;
    snprintf(path, sizeof path, "%s/HorseHead.fits", TESSERA_DEMO_DIR);
    double *src = read_fits(path, 0, &snx, &sny, &scards, &snk);
    snprintf(path, sizeof path, "%s/reference/horsehead_rot30_bilinear.fits", TESSERA_TESTDATA_DIR);
    double *ref = read_fits(path, 0, &rnx, &rny, &rcards, &rnk);
    ck_assert_int_eq(skywcs_cutout_header(85.25, -2.45, 0.2, 400, 300, "TAN", SKY_FRAME_ICRS,
                                          30.0, NULL, &cards, &nk, NULL, 0), 0);
    skywcs *win = tt_parse_wcs(scards, snk);
    skywcs *wout = tt_parse_wcs(cards, nk);
    double *dst = malloc(sizeof(double) * 400 * 300);
    long n = reproject_plane(win, src, snx, sny, wout, 400, 300, RP_BILINEAR, 0.0, dst, NULL, 0);
    ck_assert_int_eq(n, 117292);
    double peak = 0, md = 0;
    for (long k = 0; k < 400 * 300; k++) {
        ck_assert_int_eq(!!isfinite(dst[k]), !!isfinite(ref[k]));
        if (isfinite(ref[k])) {
            peak = fmax(peak, fabs(ref[k]));
            md = fmax(md, fabs(dst[k] - ref[k]));
        }
    }
    ck_assert_msg(md / peak < 1e-9, "max diff / peak %.3e", md / peak);
    free(dst);
    free(cards);
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    free(ref);
    fits_free_memory(scards, &(int){ 0 });
    fits_free_memory(rcards, &(int){ 0 });
}
END_TEST

/* ---- threads ------------------------------------------------------------------------ */

typedef struct thread_job {
    const skywcs *in, *out;
    const double *src;
    long snx, sny;
    double *dst;
    double mce;
    long n;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->n = reproject_plane(j->in, j->src, j->snx, j->sny, j->out, 149, 149, RP_BILINEAR, j->mce,
                           j->dst, NULL, 0);
    return NULL;
}

/* Eight concurrent calls sharing the same two skywcs give bit-identical results. */
START_TEST(test_shared_wcs_threads)
{
    char path[1024];
    long snx, sny;
    char *scards, *tcards;
    int snk, tnk;
    snprintf(path, sizeof path, "%s/gc_2mass_k.fits", TESSERA_DEMO_DIR);
    double *src = read_fits(path, 0, &snx, &sny, &scards, &snk);
    snprintf(path, sizeof path, "%s/reference/gc2massk_to_ga_bilinear.target.hdr", TESSERA_TESTDATA_DIR);
    tcards = tt_read_hdr_file(path, &tnk);
    skywcs *win = tt_parse_wcs(scards, snk);
    skywcs *wout = tt_parse_wcs(tcards, tnk);
    enum { NT = 8 };
    pthread_t th[NT];
    thread_job jobs[NT];
    for (int t = 0; t < NT; t++) {
        jobs[t] = (thread_job){ win, wout, src, snx, sny, malloc(sizeof(double) * 149 * 149),
                                (t & 1) ? 0.001 : 0.0, -99 };
        ck_assert_int_eq(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    }
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) {
        ck_assert_int_eq(jobs[t].n, 18836);
        ck_assert_int_eq(memcmp(jobs[t].dst, jobs[t & 1].dst, sizeof(double) * 149 * 149), 0);
    }
    for (int t = 0; t < NT; t++)
        free(jobs[t].dst);
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    free(tcards);
    fits_free_memory(scards, &(int){ 0 });
}
END_TEST


/* ---- the block engine (rp_reproject) -------------------------------------------------- */

/* A source and target for the engine tests: the HorseHead plate (891x893, float32 values
 * as astropy reads them) onto the 400x300 rotated TAN grid of its golden case. */
typedef struct scene {
    skywcs *in, *out;
    float *src;
    long snx, sny, onx, ony;
    char *scards;
} scene;

static void scene_load(scene *sc, const char *source, const char *target_case)
{
    char path[1024];
    int snk, tnk;
    snprintf(path, sizeof path, "%s/%s", TESSERA_DEMO_DIR, source);
    double *d = read_fits(path, 0, &sc->snx, &sc->sny, &sc->scards, &snk);
    sc->src = malloc(sizeof(float) * (size_t)(sc->snx * sc->sny));
    for (long k = 0; k < sc->snx * sc->sny; k++)
        sc->src[k] = (float)d[k];
    free(d);
    snprintf(path, sizeof path, "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, target_case);
    char *tc = tt_read_hdr_file(path, &tnk);
    sc->in = tt_parse_wcs(sc->scards, snk);
    sc->out = tt_parse_wcs(tc, tnk);
    char v[80];
    ck_assert(fitscard_get(tc, tnk, "NAXIS1", v, sizeof v));
    sc->onx = atol(v);
    ck_assert(fitscard_get(tc, tnk, "NAXIS2", v, sizeof v));
    sc->ony = atol(v);
    free(tc);
}

static void scene_release(scene *sc)
{
    skywcs_free(sc->in);
    skywcs_free(sc->out);
    free(sc->src);
    fits_free_memory(sc->scards, &(int){ 0 });
}

/* Runs the engine on the scene into a fresh float32 output (and footprint). */
static long scene_run(const scene *sc, const rp_options *o, float **dst, float **fp)
{
    size_t n = (size_t)(sc->onx * sc->ony);
    *dst = malloc(sizeof(float) * n);
    *fp = malloc(sizeof(float) * n);
    rp_cube in = { sc->src, RP_F32, sc->snx, sc->sny, 1 };
    rp_cube out = { *dst, RP_F32, sc->onx, sc->ony, 1 };
    char err[256] = "";
    long r = rp_reproject(sc->in, &in, sc->out, &out, *fp, o, err, sizeof err);
    ck_assert_msg(r >= 0 || r == TESS_ECANCELED, "rp_reproject: %ld %s", r, err);
    return r;
}

/* Every method with the coordinate grid (and bilinear without it): results do not depend
 * on the block size (16, 100, 256, one block for the whole image) — bit for bit. */
START_TEST(test_blocks_identical)
{
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3, RP_EXACT };
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    size_t n = (size_t)(sc.onx * sc.ony);
    for (int mi = 0; mi < 5; mi++) {
        for (int g = ms[mi] == RP_BILINEAR ? 0 : 1; g < 2; g++) {
            rp_options o;
            rp_options_init(&o);
            o.method = ms[mi];
            o.max_coord_error = g ? 0.001 : 0.0;
            o.threads = 1;
            o.block = 100000;
            float *d0, *f0;
            long n0 = scene_run(&sc, &o, &d0, &f0);
            ck_assert_int_gt(n0, 100000);
            static const long blocks[] = { 16, 100, 0 };
            for (int b = 0; b < 3; b++) {
                o.block = blocks[b];
                float *d1, *f1;
                long n1 = scene_run(&sc, &o, &d1, &f1);
                ck_assert_int_eq(n1, n0);
                ck_assert_msg(memcmp(d0, d1, n * sizeof(float)) == 0,
                              "%s mce %g block %ld: data differ", rp_method_name(ms[mi]),
                              o.max_coord_error, blocks[b]);
                ck_assert_msg(memcmp(f0, f1, n * sizeof(float)) == 0,
                              "%s block %ld: footprints differ", rp_method_name(ms[mi]), blocks[b]);
                free(d1);
                free(f1);
            }
            free(d0);
            free(f0);
        }
    }
    scene_release(&sc);
}
END_TEST

/* Nearest and bilinear into float32 give the same bits, footprints and counts with the
 * gathering samplers and the strips of columns they bring (rp_kernel_f32_gathers,
 * rp_kernel_f32_strip: on Intel CPUs with AVX-512F) and without them, with blocks of
 * 256 (two strips of 128), 300 (128, 128 and 44, the last block columns narrower) and
 * 100 (narrower than a strip: whole rows), with and without the coordinate grid. */
START_TEST(test_gathers_identical)
{
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR };
    static const long blocks[] = { 0, 300, 100 };
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    size_t n = (size_t)(sc.onx * sc.ony);
    for (int mi = 0; mi < 2; mi++)
        for (int b = 0; b < 3; b++)
            for (int g = 0; g < 2; g++) {
                rp_options o;
                rp_options_init(&o);
                o.method = ms[mi];
                o.threads = 1;
                o.block = blocks[b];
                o.max_coord_error = g ? 0.001 : 0.0;
                float *d0, *f0, *d1, *f1;
                ck_assert_int_eq(rp_kernel_f32_gathers(0), 1);
                long n0 = scene_run(&sc, &o, &d0, &f0);
                ck_assert_int_eq(rp_kernel_f32_gathers(1), 0);
                long n1 = scene_run(&sc, &o, &d1, &f1);
                ck_assert_int_gt(n0, 100000);
                ck_assert_int_eq(n1, n0);
                ck_assert_msg(memcmp(d0, d1, n * sizeof(float)) == 0,
                              "%s block %ld mce %g: data differ", rp_method_name(ms[mi]),
                              blocks[b], o.max_coord_error);
                ck_assert_msg(memcmp(f0, f1, n * sizeof(float)) == 0,
                              "%s block %ld: footprints differ", rp_method_name(ms[mi]),
                              blocks[b]);
                free(d0);
                free(f0);
                free(d1);
                free(f1);
            }
    scene_release(&sc);
}
END_TEST

/* Interpolated float32 output: the footprint is exactly 1 where the value is finite and 0
 * elsewhere, and the count returned is the number of finite values, with block widths
 * that are and are not multiples of four (reproject.c stores rows four values at a time
 * and the rest one by one). */
START_TEST(test_footprint_f32)
{
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3 };
    static const long blocks[] = { 16, 37, 0 };
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    size_t n = (size_t)(sc.onx * sc.ony);
    for (int mi = 0; mi < 4; mi++) {
        for (int b = 0; b < 3; b++) {
            rp_options o;
            rp_options_init(&o);
            o.method = ms[mi];
            o.threads = 1;
            o.block = blocks[b];
            float *d, *f;
            long nfin = scene_run(&sc, &o, &d, &f), count = 0;
            for (size_t k = 0; k < n; k++) {
                ck_assert_msg(f[k] == (isfinite(d[k]) ? 1.0f : 0.0f),
                              "%s block %ld: pixel %zu value %g footprint %g",
                              rp_method_name(ms[mi]), blocks[b], k, (double)d[k], (double)f[k]);
                count += isfinite(d[k]) != 0;
            }
            ck_assert_int_eq(nfin, count);
            free(d);
            free(f);
        }
    }
    scene_release(&sc);
}
END_TEST

/* 1, 2 and 4 threads of the engine's own, and helpers on a pool, give identical results. */
START_TEST(test_threads_identical)
{
    static const rp_method ms[] = { RP_BILINEAR, RP_LANCZOS3, RP_EXACT };
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    size_t n = (size_t)(sc.onx * sc.ony);
    pool *p = pool_new(3, 64);
    ck_assert_ptr_nonnull(p);
    for (int mi = 0; mi < 3; mi++) {
        rp_options o;
        rp_options_init(&o);
        o.method = ms[mi];
        o.block = 64;
        o.threads = 1;
        float *d0, *f0;
        long n0 = scene_run(&sc, &o, &d0, &f0);
        for (int t = 0; t < 3; t++) {
            o.threads = t == 0 ? 2 : 4;
            o.workers = t == 2 ? p : NULL;
            float *d1, *f1;
            long n1 = scene_run(&sc, &o, &d1, &f1);
            ck_assert_int_eq(n1, n0);
            ck_assert_msg(memcmp(d0, d1, n * sizeof(float)) == 0, "%s, run %d: data differ",
                          rp_method_name(ms[mi]), t);
            ck_assert(memcmp(f0, f1, n * sizeof(float)) == 0);
            free(d1);
            free(f1);
        }
        free(d0);
        free(f0);
    }
    pool_free(p);
    scene_release(&sc);
}
END_TEST

/* What the progress callback saw. */
typedef struct progress_log {
    long calls, last, total, bad;
    atomic_int *cancel;       /* raised at the first call when not NULL */
} progress_log;

static void progress_cb(void *arg, long done, long total)
{
    progress_log *l = arg;
    if (done != l->last + 1 || (l->total && total != l->total) || done > total)
        l->bad++;
    l->calls++;
    l->last = done;
    l->total = total;
    if (l->cancel)
        atomic_store(l->cancel, 1);
}

/* The callback advances by one block at a time, from 1 to the number of blocks. */
START_TEST(test_progress)
{
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    for (int t = 1; t <= 2; t++) {
        for (int exact = 0; exact < 2; exact++) {
            rp_options o;
            rp_options_init(&o);
            o.method = exact ? RP_EXACT : RP_BILINEAR;
            o.block = 64;
            o.threads = t;
            progress_log l = { 0, 0, 0, 0, NULL };
            o.progress = progress_cb;
            o.progress_arg = &l;
            float *d, *f;
            scene_run(&sc, &o, &d, &f);
            long expect = exact ? (sc.ony + 31) / 32 : ((sc.onx + 63) / 64) * ((sc.ony + 63) / 64);
            ck_assert_int_eq(l.bad, 0);
            ck_assert_int_eq(l.total, expect);
            ck_assert_int_eq(l.calls, expect);
            ck_assert_int_eq(l.last, expect);
            free(d);
            free(f);
        }
    }
    scene_release(&sc);
}
END_TEST

/* Raising the cancel flag stops the work between blocks with TESS_ECANCELED. */
START_TEST(test_cancel)
{
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    for (int t = 1; t <= 2; t++) {
        atomic_int cancel = 0;
        rp_options o;
        rp_options_init(&o);
        o.block = 16;
        o.threads = t;
        o.cancel = &cancel;
        progress_log l = { 0, 0, 0, 0, &cancel };
        o.progress = progress_cb;
        o.progress_arg = &l;
        float *d, *f;
        long r = scene_run(&sc, &o, &d, &f);
        ck_assert_int_eq(r, TESS_ECANCELED);
        ck_assert_int_ge(l.calls, 1);
        ck_assert_int_le(l.calls, t);       /* each thread finishes the block it holds */
        ck_assert_int_lt(l.calls, l.total);
        free(d);
        free(f);
        /* A flag raised before the call: nothing is done. */
        l = (progress_log){ 0, 0, 0, 0, NULL };
        r = scene_run(&sc, &o, &d, &f);
        ck_assert_int_eq(r, TESS_ECANCELED);
        ck_assert_int_eq(l.calls, 0);
        free(d);
        free(f);
    }
    scene_release(&sc);
}
END_TEST

/* A caller of the ring (rp_options.ring_rows): each block, as block_done hands it over,
 * copied from the ring into full planes. */
typedef struct ring_copy {
    const float *ring, *ringfp;
    float *full, *fullfp;
    long nx, ny, rows;
} ring_copy;

static void ring_block(void *arg, long z0, long nz, long x0, long y0, long w, long h)
{
    ring_copy *c = arg;
    for (long z = z0; z < z0 + nz; z++)
        for (long y = y0; y < y0 + h; y++) {
            size_t from = ((size_t)z * (size_t)c->rows + (size_t)(y % c->rows)) * (size_t)c->nx
                          + (size_t)x0;
            size_t to = ((size_t)z * (size_t)c->ny + (size_t)y) * (size_t)c->nx + (size_t)x0;
            memcpy(c->full + to, c->ring + from, sizeof(float) * (size_t)w);
            memcpy(c->fullfp + to, c->ringfp + from, sizeof(float) * (size_t)w);
        }
}

/* The output streamed through a ring of rows (2 and 3 rows of blocks, of a two-plane
 * cube whose second plane is the first times -2) equals the full output bit for bit, with
 * 1, 2 and 4 threads of the engine's own and with helpers on a pool; a cancelled ring run
 * returns; ring_rows that are not whole rows of blocks, or given for exact, are refused. */
START_TEST(test_ring_identical)
{
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR, RP_LANCZOS3 };
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    const long nx = sc.onx, ny = sc.ony, block = 32;
    const size_t plane = (size_t)sc.snx * (size_t)sc.sny, n = (size_t)(nx * ny);
    float *src = malloc(2 * plane * sizeof(float));
    ck_assert_ptr_nonnull(src);
    for (size_t k = 0; k < plane; k++) {
        src[k] = sc.src[k];
        src[plane + k] = -2.0f * sc.src[k];
    }
    rp_cube in = { src, RP_F32, sc.snx, sc.sny, 2 };
    float *d0 = malloc(2 * n * sizeof(float)), *f0 = malloc(2 * n * sizeof(float));
    float *d1 = malloc(2 * n * sizeof(float)), *f1 = malloc(2 * n * sizeof(float));
    float *rd = malloc(2 * 3 * (size_t)block * (size_t)nx * sizeof(float));
    float *rf = malloc(2 * 3 * (size_t)block * (size_t)nx * sizeof(float));
    pool *p = pool_new(3, 64);
    ck_assert(d0 && f0 && d1 && f1 && rd && rf && p);
    char err[256];
    for (int mi = 0; mi < 3; mi++) {
        rp_options o;
        rp_options_init(&o);
        o.method = ms[mi];
        o.block = block;
        o.threads = 1;
        rp_cube full = { d0, RP_F32, nx, ny, 2 };
        long n0 = rp_reproject(sc.in, &in, sc.out, &full, f0, &o, err, sizeof err);
        ck_assert_msg(n0 > 100000, "%ld %s", n0, err);
        for (int run = 0; run < 8; run++) {
            long rows = block * (2 + run % 2);
            ring_copy c = { rd, rf, d1, f1, nx, ny, rows };
            memset(d1, 0, 2 * n * sizeof(float));
            memset(f1, 0, 2 * n * sizeof(float));
            o.threads = run / 2 == 0 ? 1 : run / 2 == 1 ? 2 : 4;
            o.workers = run / 2 == 3 ? p : NULL;
            o.ring_rows = rows;
            o.block_done = ring_block;
            o.block_arg = &c;
            rp_cube ring = { rd, RP_F32, nx, ny, 2 };
            long n1 = rp_reproject(sc.in, &in, sc.out, &ring, rf, &o, err, sizeof err);
            ck_assert_msg(n1 == n0, "%s run %d: %ld of %ld (%s)", rp_method_name(ms[mi]), run, n1,
                          n0, err);
            ck_assert_msg(memcmp(d0, d1, 2 * n * sizeof(float)) == 0, "%s run %d: data differ",
                          rp_method_name(ms[mi]), run);
            ck_assert(memcmp(f0, f1, 2 * n * sizeof(float)) == 0);
        }
    }
    /* Cancelled at the first block done: each thread returns, none waits forever. */
    for (int t = 1; t <= 2; t++) {
        atomic_int cancel = 0;
        rp_options o;
        rp_options_init(&o);
        o.block = block;
        o.threads = t;
        o.ring_rows = 2 * block;
        o.cancel = &cancel;
        progress_log l = { 0, 0, 0, 0, &cancel };
        o.progress = progress_cb;
        o.progress_arg = &l;
        rp_cube ring = { rd, RP_F32, nx, ny, 2 };
        ck_assert_int_eq(rp_reproject(sc.in, &in, sc.out, &ring, rf, &o, err, sizeof err),
                         TESS_ECANCELED);
    }
    static const struct { rp_method m; long block, rows; } bad[] = {
        { RP_BILINEAR, 32, 48 }, { RP_BILINEAR, 32, 32 }, { RP_BILINEAR, 0, 512 },
        { RP_EXACT, 32, 64 }, { RP_BILINEAR, 32, -64 } };
    for (int b = 0; b < 5; b++) {
        rp_options o;
        rp_options_init(&o);
        o.method = bad[b].m;
        o.block = bad[b].block;
        o.ring_rows = bad[b].rows;
        rp_cube ring = { rd, RP_F32, nx, ny, 2 };
        ck_assert_int_eq(rp_reproject(sc.in, &in, sc.out, &ring, rf, &o, err, sizeof err),
                         TESS_EINVAL);
        ck_assert_msg(strstr(err, "ring_rows") != NULL, "%s", err);
    }
    pool_free(p);
    free(src);
    free(d0);
    free(f0);
    free(d1);
    free(f1);
    free(rd);
    free(rf);
    scene_release(&sc);
}
END_TEST

/* A task on a one-thread pool runs the engine with that pool: its helpers can only run
 * once it is over, so the calling thread must do every block itself (and the helpers,
 * starting after the call has returned, must leave without touching anything). */
typedef struct pool_call {
    const scene *sc;
    pool *p;
    long result;
    float *d, *f;
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done;
} pool_call;

static void pool_call_task(void *arg)
{
    pool_call *c = arg;
    rp_options o;
    rp_options_init(&o);
    o.workers = c->p;
    o.priority = POOL_INTERACTIVE;
    o.block = 32;
    long r = scene_run(c->sc, &o, &c->d, &c->f);
    pthread_mutex_lock(&c->lock);
    c->result = r;
    c->done = 1;
    pthread_cond_signal(&c->done_cv);
    pthread_mutex_unlock(&c->lock);
}

START_TEST(test_pool_no_deadlock)
{
    scene sc;
    scene_load(&sc, "HorseHead.fits", "horsehead_rot30_bilinear");
    for (int nt = 1; nt <= 2; nt++) {
        pool *p = pool_new(nt, 256);
        pool_call c = { &sc, p, -99, NULL, NULL, PTHREAD_MUTEX_INITIALIZER,
                        PTHREAD_COND_INITIALIZER, 0 };
        ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, pool_call_task, &c), 0);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60;
        pthread_mutex_lock(&c.lock);
        while (!c.done && pthread_cond_timedwait(&c.done_cv, &c.lock, &until) == 0)
            ;
        int done = c.done;
        pthread_mutex_unlock(&c.lock);
        ck_assert_msg(done, "the engine deadlocked on a %d-thread pool", nt);
        ck_assert_int_eq(c.result, 117292);
        pool_free(p);
        free(c.d);
        free(c.f);
    }
    scene_release(&sc);
}
END_TEST

/* No output pixel on the input: TESS_ENOOVERLAP and an all-NaN output. */
START_TEST(test_no_overlap_error)
{
    scene sc;
    scene_load(&sc, "gc_2mass_k.fits", "gc2massk_to_ga_bilinear");
    char *cards = NULL;
    int nk;
    ck_assert_int_eq(skywcs_cutout_header(0.0, 60.0, 1.0, 64, 48, "TAN", SKY_FRAME_ICRS, 0.0,
                                          NULL, &cards, &nk, NULL, 0), 0);
    skywcs_free(sc.out);
    sc.out = tt_parse_wcs(cards, nk);
    free(cards);
    sc.onx = 64;
    sc.ony = 48;
    static const rp_method ms[] = { RP_NEAREST, RP_BILINEAR, RP_BICUBIC, RP_LANCZOS3, RP_EXACT };
    for (int mi = 0; mi < 5; mi++) {
        rp_options o;
        rp_options_init(&o);
        o.method = ms[mi];
        float *d = malloc(sizeof(float) * 64 * 48), *f = malloc(sizeof(float) * 64 * 48);
        rp_cube in = { sc.src, RP_F32, sc.snx, sc.sny, 1 };
        rp_cube out = { d, RP_F32, 64, 48, 1 };
        char err[256] = "";
        ck_assert_int_eq(rp_reproject(sc.in, &in, sc.out, &out, f, &o, err, sizeof err),
                         TESS_ENOOVERLAP);
        ck_assert_msg(strstr(err, "overlap") != NULL, "err: %s", err);
        for (int k = 0; k < 64 * 48; k++) {
            ck_assert(isnan(d[k]));
            ck_assert(f[k] == 0.0f);
        }
        free(d);
        free(f);
    }
    scene_release(&sc);
}
END_TEST

/* Bad shapes and options are refused with TESS_EINVAL. */
START_TEST(test_engine_bad_arguments)
{
    skywcs *w = eq_wcs("TAN", 0.0, 0.0, 0.001, 1.0, 1.0, "ICRS");
    float src[8] = { 0 }, dst[8];
    rp_cube in = { src, RP_F32, 2, 2, 2 };
    rp_cube out = { dst, RP_F32, 2, 2, 1 };
    rp_options o;
    rp_options_init(&o);
    char err[128] = "";
    ck_assert_int_eq(rp_reproject(w, &in, w, &out, NULL, &o, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "planes") != NULL, "err: %s", err);
    out.nz = 2;
    out.dtype = (rp_dtype)7;
    ck_assert_int_eq(rp_reproject(w, &in, w, &out, NULL, &o, err, sizeof err), TESS_EINVAL);
    out.dtype = RP_F32;
    o.method = (rp_method)42;
    ck_assert_int_eq(rp_reproject(w, &in, w, &out, NULL, &o, err, sizeof err), TESS_EINVAL);
    o.method = RP_BILINEAR;
    o.threads = -1;
    ck_assert_int_eq(rp_reproject(w, &in, w, &out, NULL, &o, err, sizeof err), TESS_EINVAL);
    o.threads = 0;
    ck_assert_int_eq(rp_reproject(w, &in, w, &out, NULL, &o, err, sizeof err), 8);
    ck_assert_int_eq(rp_reproject(NULL, &in, w, &out, NULL, &o, err, sizeof err), TESS_EINVAL);
    skywcs_free(w);
}
END_TEST

/* Reads a float32 cube (HDU 0) as cards and nx * ny * nz floats. */
static float *read_cube(const char *path, long n[3], char **cards, int *nkeys)
{
    fitsfile *f = NULL;
    int st = 0, bitpix, naxis;
    n[0] = n[1] = n[2] = 1;
    fits_open_file(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s", path);
    fits_get_img_param(f, 3, &bitpix, &naxis, n, &st);
    fits_hdr2str(f, 1, NULL, 0, cards, nkeys, &st);
    size_t m = (size_t)(n[0] * n[1] * n[2]);
    float *d = malloc(sizeof(float) * m), nul = NAN;
    fits_read_img(f, TFLOAT, 1, (LONGLONG)m, &nul, d, &(int){ 0 }, &st);
    ck_assert_int_eq(st, 0);
    fits_close_file(f, &st);
    return d;
}

/* The l1448 13CO cube (RA/Dec SFL x VOPT) onto a galactic TAN grid: the celestial axes
 * reprojected, the 53 velocity planes passed through, against astropy reproject's
 * bilinear reference; each plane equals a 2-D reprojection of that plane alone. */
START_TEST(test_cube_reference)
{
    char path[1024];
    long sn[3], rn[3];
    char *scards, *rcards;
    int snk, rnk, tnk;
    snprintf(path, sizeof path, "%s/l1448_13co.fits", TESSERA_DEMO_DIR);
    float *src = read_cube(path, sn, &scards, &snk);
    snprintf(path, sizeof path, "%s/reference/l1448_to_galtan_cube_bilinear.fits",
             TESSERA_TESTDATA_DIR);
    fitsfile *f = NULL;
    int st = 0, bitpix, naxis;
    fits_open_file(&f, path, READONLY, &st);
    ck_assert_int_eq(st, 0);
    rn[0] = rn[1] = rn[2] = 1;
    fits_get_img_param(f, 3, &bitpix, &naxis, rn, &st);
    size_t m = (size_t)(rn[0] * rn[1] * rn[2]);
    double *ref = malloc(sizeof(double) * m), dnul = NAN;
    float *rfp = malloc(sizeof(float) * m), fnul = NAN;
    fits_read_img(f, TDOUBLE, 1, (LONGLONG)m, &dnul, ref, &(int){ 0 }, &st);
    fits_movabs_hdu(f, 2, NULL, &st);
    fits_read_img(f, TFLOAT, 1, (LONGLONG)m, &fnul, rfp, &(int){ 0 }, &st);
    ck_assert_int_eq(st, 0);
    fits_close_file(f, &st);
    rcards = NULL;
    (void)rnk;
    ck_assert_int_eq(sn[2], rn[2]);
    snprintf(path, sizeof path, "%s/reference/l1448_to_galtan_cube_bilinear.target.hdr",
             TESSERA_TESTDATA_DIR);
    char *tcards = tt_read_hdr_file(path, &tnk);
    skywcs *win = tt_parse_wcs(scards, snk), *wout = tt_parse_wcs(tcards, tnk);
    ck_assert_int_eq(skywcs_naxis(win), 3);
    ck_assert_int_eq(skywcs_naxis(wout), 3);

    float *dst = malloc(sizeof(float) * m), *fp = malloc(sizeof(float) * m);
    rp_cube in = { src, RP_F32, sn[0], sn[1], sn[2] };
    rp_cube out = { dst, RP_F32, rn[0], rn[1], rn[2] };
    rp_options o;
    rp_options_init(&o);
    o.max_coord_error = 0.0;
    char err[256] = "";
    progress_log l = { 0, 0, 0, 0, NULL };
    o.progress = progress_cb;
    o.progress_arg = &l;
    long nfin = rp_reproject(win, &in, wout, &out, fp, &o, err, sizeof err);
    ck_assert_msg(nfin >= 0, "rp_reproject: %s", err);
    ck_assert_int_eq(nfin, 659320);
    ck_assert_int_eq(l.last, l.total);    /* blocks, not blocks times planes */
    double peak = 0.0, md = 0.0;
    long agree = 0;
    for (size_t k = 0; k < m; k++) {
        if (isfinite(ref[k])) {
            peak = fmax(peak, fabs(ref[k]));
            if (isfinite(dst[k]))
                md = fmax(md, fabs(dst[k] - ref[k]));
        }
        agree += (fp[k] > 0.5f) == (rfp[k] > 0.5f);
    }
    fprintf(stderr, "golden l1448_to_galtan_cube_bilinear  max|diff|/peak=%.3e footprint=%.6f\n",
            md / peak, (double)agree / (double)m);
    ck_assert_msg(md / peak <= 2e-6, "max diff / peak %.3e", md / peak);
    ck_assert_int_eq(agree, (long)m);

    /* Plane 20 alone, through a 2-D call: the same values bit for bit. */
    size_t pl = (size_t)(rn[0] * rn[1]);
    float *one = malloc(sizeof(float) * pl);
    rp_cube in1 = { src + 20 * (size_t)(sn[0] * sn[1]), RP_F32, sn[0], sn[1], 1 };
    rp_cube out1 = { one, RP_F32, rn[0], rn[1], 1 };
    o.progress = NULL;
    ck_assert_int_ge(rp_reproject(win, &in1, wout, &out1, NULL, &o, err, sizeof err), 0);
    ck_assert(memcmp(one, dst + 20 * pl, pl * sizeof(float)) == 0);
    free(one);
    free(dst);
    free(fp);
    free(ref);
    free(rfp);
    free(src);
    free(tcards);
    skywcs_free(win);
    skywcs_free(wout);
    fits_free_memory(scards, &(int){ 0 });
    (void)rcards;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reproject");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_identity);
    tcase_add_test(tc, test_half_pixel_shift);
    tcase_add_test(tc, test_nearest_grid_decisions);
    tcase_add_test(tc, test_grid_decisions_f32);
    tcase_add_test(tc, test_nan_input);
    tcase_add_test(tc, test_method_names);
    tcase_add_test(tc, test_bad_arguments);
    int ng = (int)(sizeof golden / sizeof golden[0]);
    tcase_add_loop_test(tc, test_golden_exact, 0, ng);
    tcase_add_loop_test(tc, test_golden_grid, 0, ng);
    tcase_add_test(tc, test_no_overlap);
    tcase_add_test(tc, test_cutout_header_matches_reference);
    tcase_add_test(tc, test_shared_wcs_threads);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 300);
    tcase_add_test(te, test_blocks_identical);
    tcase_add_test(te, test_gathers_identical);
    tcase_add_test(te, test_footprint_f32);
    tcase_add_test(te, test_threads_identical);
    tcase_add_test(te, test_ring_identical);
    tcase_add_test(te, test_progress);
    tcase_add_test(te, test_cancel);
    tcase_add_test(te, test_pool_no_deadlock);
    tcase_add_test(te, test_no_overlap_error);
    tcase_add_test(te, test_engine_bad_arguments);
    tcase_add_test(te, test_cube_reference);
    suite_add_tcase(s, te);
    return tt_run_suite(s);
}
