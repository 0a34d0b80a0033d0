/* Unit tests of engine/cube: transpose, power spectra, centroids on small known arrays. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/cube/centroid.h"
#include "engine/cube/spectrum.h"
#include "engine/cube/transpose.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"
#include "tests/testutil.h"

/* Edge tiles on both axes (20 = 16 + 4, 18 = 16 + 2). */
#define NX 20
#define NY 18

static const volatile int no_cancel = 0;

/* Writes the float32 cube v (NX x NY x nz, x fastest) as `path`. */
static void write_cube(const char *path, const double *v, long nz)
{
    fitswrite_image im = {.bitpix = -32, .naxis = 3, .naxes = {NX, NY, nz}};
    long long ds = 0;
    char err[256];
    ck_assert_msg(fitswrite_file(path, &im, &ds, err, sizeof err) == 0, "%s", err);
    long n = (long)NX * NY * nz;
    unsigned char *be = malloc((size_t)n * 4);
    ck_assert_ptr_nonnull(be);
    fitswrite_encode(-32, 0, v, be, n);
    ck_assert_int_eq(tess_pwrite_file(path, be, (size_t)n * 4, (off_t)ds), 0);
    free(be);
}

/* Plane k (0-based) of the FITS cube at path as doubles (tt_fits_plane; the caller frees),
 * checked to be NX x NY. */
static double *nxny_plane(const char *path, long k)
{
    long nx = 0, ny = 0;
    double *p = tt_fits_plane(path, k, &nx, &ny);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(nx, NX);
    ck_assert_int_eq(ny, NY);
    return p;
}

/* A transpose of the cube at `path` through the staging file (both stages run). */
static stack *open_cube(const char *path, long nz)
{
    const char *paths[] = {path};
    stack *st = stack_new(paths, 1, 0, NX, NY, nz, 2);
    ck_assert_ptr_nonnull(st);
    return st;
}

/* Blocks k, k + 2, ... of stage A of the transpose in `arg` (rowwise: two threads side
 * by side): groups, or parts of groups with t->split. */
static long stage_a_blocks(const cube_transpose *t)
{
    return t->ngroups * (t->split > 1 ? t->split : 1);
}

static void *odd_groups(void *arg)
{
    cube_transpose *t = arg;
    char err[256];
    for (long k = 1; k < stage_a_blocks(t); k += 2)
        if (cube_transpose_group(t, k, &no_cancel, err, sizeof err) != 0)
            return t;
    return NULL;
}

/* rowwise 1: the destination's pages made a tile row at a time, as rechunk does, each
 * group holding all its planes at once, the odd groups on a second thread; rowwise > 1:
 * that too, each group in `rowwise` parts (cube_transpose.split) whose blocks alternate
 * between the two threads, so that the parts of a group run side by side or one after
 * the other. */
static void transpose_staged(cube_transpose *t, stack *st, long nz, cs_dtype dtype,
                             long out_bytes, const char *dir, int rowwise)
{
    cube_source src = {.st = st, .nx = NX, .ny = NY, .nz = nz, .dtype = dtype, .name = "t"};
    char err[256];
    ck_assert_msg(cube_transpose_init(t, &src, out_bytes, 0, NULL, dir, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(cube_transpose_create_files(t, err, sizeof err) == 0, "%s", err);
    pthread_t th;
    if (rowwise) {
        t->rowwise = 1;
        t->hold = t->g;
        t->split = rowwise;
        ck_assert_int_eq(pthread_create(&th, NULL, odd_groups, t), 0);
    }
    for (long k = 0; k < stage_a_blocks(t); k += 1 + (rowwise > 0))
        ck_assert_msg(cube_transpose_group(t, k, &no_cancel, err, sizeof err) == 0, "%s", err);
    if (rowwise) {
        void *bad = t;
        ck_assert_int_eq(pthread_join(th, &bad), 0);
        ck_assert_ptr_null(bad);
    }
}

/* Every band's series, from the staging file and from the planes directly, equals the
 * series of its pixel read with stack_read_series. */
START_TEST(test_transpose)
{
    const long nz = 37;
    char dir[256], path[300];
    tt_tmpdir_make(dir, sizeof dir, "cube");
    snprintf(path, sizeof path, "%s/cube.fits", dir);
    double *v = malloc(sizeof(double) * NX * NY * nz);
    ck_assert_ptr_nonnull(v);
    for (long z = 0; z < nz; z++)
        for (long i = 0; i < NX * NY; i++)
            v[z * NX * NY + i] = (double)(i + 1000 * z) * 0.5 - 7;   /* exact in float32 */
    write_cube(path, v, nz);
    stack *st = open_cube(path, nz);
    cube_transpose t;
    transpose_staged(&t, st, nz, CS_F32, 0, dir, 0);
    ck_assert_int_eq(t.es, 4);
    ck_assert_int_gt(t.ngroups, 1);   /* several groups are gathered into a band */
    size_t bytes = (size_t)t.band_rows * NX * nz * 4;
    unsigned char *buf = malloc(bytes), *rows = malloc(bytes);
    double *got = malloc(sizeof(double) * nz), *want = malloc(sizeof(double) * nz);
    char err[256];
    long seen = 0;
    for (long b = 0; b < t.nbands; b++) {
        long p0 = -1, p1 = -1;
        ck_assert_msg(cube_transpose_band(&t, b, buf, &p0, &p1, &no_cancel, err, sizeof err)
                      == 0, "%s", err);
        long y0 = b * t.band_rows, y1 = y0 + t.band_rows < NY ? y0 + t.band_rows : NY;
        ck_assert_int_eq(p0, y0 * NX);
        ck_assert_int_eq(p1, y1 * NX);
        ck_assert_msg(cube_transpose_rows(&t, y0, y1, rows, &no_cancel, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(memcmp(buf, rows, (size_t)(p1 - p0) * nz * 4), 0);
        for (long i = p0; i < p1; i++) {
            long x = t.perm[i] % NX, y = t.perm[i] / NX;
            ck_assert_int_ge(y, y0);
            ck_assert_int_lt(y, y1);
            chunkstore_decode(CS_F32, buf + (size_t)(i - p0) * nz * 4, got, nz);
            ck_assert_int_eq(stack_read_series(st, x, y, 0, nz, want, err, sizeof err), 0);
            for (long z = 0; z < nz; z++)
                ck_assert_double_eq(got[z], want[z]);
            seen++;
        }
    }
    ck_assert_int_eq(seen, NX * NY);
    /* store order: the first tile's 16 x 16 pixels row by row, then the next tile */
    ck_assert_int_eq(t.perm[0], 0);
    ck_assert_int_eq(t.perm[15], 15);
    ck_assert_int_eq(t.perm[16], NX);
    ck_assert_int_eq(t.perm[256], 16);
    free(buf);
    free(rows);
    free(got);
    free(want);
    cube_transpose_release(&t);
    stack_free(st);
    free(v);
    const char *names[] = {"cube.fits", "staging.bin"};
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 2), 0);
}
END_TEST

/* fftw transforms cube_spectrum_fft_batch(nz) series at a time, 32 (the batch read and
 * scattered) halved until the doubles and coefficients of those series fit 512 KB:
 * 16 nz + 16 bytes a series for even nz, 16 nz + 8 for odd. */
START_TEST(test_spectrum_fft_batch)
{
    static const long nz[] = {1, 2, 250, 1023, 1024, 2047, 2048, 4000, 4095, 4096, 16383,
                              16384, 1L << 20};
    static const long want[] = {32, 32, 32, 32, 16, 16, 8, 8, 8, 4, 2, 1, 1};
    for (size_t i = 0; i < sizeof nz / sizeof nz[0]; i++)
        ck_assert_msg(cube_spectrum_fft_batch(nz[i]) == want[i], "nz %ld: %ld, want %ld", nz[i],
                      cube_spectrum_fft_batch(nz[i]), want[i]);
}
END_TEST

/* A value of pixel i at z whose spectrum has no zero bin, and differs from pixel to pixel
 * (a and the chirp's phase vary with i), so that a series transformed in another's place
 * shows in every plane. */
static double chirp_value(long i, long z)
{
    double a = 1.0 + (double)(i % 37) * 0.25;
    return (double)(i % 3) + a * sin(0.37 * (double)i + 0.011 * (double)z * (double)z);
}

/* cs[2 m], cs[2 m + 1]: cos and sin of 2 pi m / nz, the table of check_power_plane. */
static void dft_angle(double *cs, long m, long nz)
{
    cs[2 * m] = cos(2 * M_PI * (double)m / (double)nz);
    cs[2 * m + 1] = sin(2 * M_PI * (double)m / (double)nz);
}

/* Asserts that p (npix values) is plane k of the power spectra along z of the series
 * v[z * npix + i] (nz values each), |sum_z v_z e^(-2 pi i k z / nz)|^2 by a direct DFT on
 * the table cs (dft_angle for m = 0 .. nz - 1, the angle's multiple k z reduced mod nz
 * first): within 1e-6 relative (the float32 rounding of the power, 6e-8, and fftw's
 * double rounding) plus 1e-6 absolute.  bi: the block budget's number, for the message. */
static void check_power_plane(const double *p, const double *v, const double *cs, long npix,
                              long nz, long k, int bi)
{
    for (long i = 0; i < npix; i++) {
        double re = 0, im_ = 0;
        for (long z = 0; z < nz; z++) {
            long m = (long)((long long)k * z % nz);
            re += v[z * npix + i] * cs[2 * m];
            im_ -= v[z * npix + i] * cs[2 * m + 1];
        }
        double want = re * re + im_ * im_;
        ck_assert_msg(fabs(p[i] - want) <= 1e-6 * want + 1e-6,
                      "nz %ld budget %d k %ld pixel %ld: %.9g, want %.9g", nz, bi, k, i, p[i],
                      want);
    }
}

/* The spectra of series of nz = 2 and 3 (32 series an fftw execution), 1025 (16), 2049
 * (8) and 4097 (4), against a direct DFT of the float32 samples in double precision, at
 * planes 0, 1, 2, nz / 3, nz / 2 - 1, nz / 2, nz / 2 + 1 (a mirror) and nz - 1, under
 * three block budgets: whole tile rows (blocks of 320 and 40 pixels: a last batch of 8
 * series, half of fftw's 16 at nz = 1025), 5 rows (100 pixels: 32, 32, 32 and 4 series,
 * the 4 short of fftw's 8 at 2049) and one row of 16 columns (16 and 4 pixels).
 * Tolerance 1e-6 relative (the float32 rounding of the power, 6e-8, and fftw's double
 * rounding) plus 1e-6 absolute. */
START_TEST(test_spectrum_batches)
{
    static const long nzs[] = {2, 3, 1025, 2049, 4097};
    static const long fb[] = {32, 32, 16, 8, 4};
    for (size_t ni = 0; ni < sizeof nzs / sizeof nzs[0]; ni++) {
        const long nz = nzs[ni], nh = nz / 2 + 1;
        ck_assert_int_eq(cube_spectrum_fft_batch(nz), fb[ni]);
        char dir[256], path[300], out[300], err[256];
        tt_tmpdir_make(dir, sizeof dir, "cubepsb");
        snprintf(path, sizeof path, "%s/cube.fits", dir);
        snprintf(out, sizeof out, "%s/ps.fits", dir);
        double *v = malloc(sizeof(double) * NX * NY * (size_t)nz);
        double *cs = malloc(sizeof(double) * 2 * (size_t)nz);   /* cos, sin of 2 pi m / nz */
        ck_assert_ptr_nonnull(v);
        ck_assert_ptr_nonnull(cs);
        for (long z = 0; z < nz; z++) {
            for (long i = 0; i < NX * NY; i++)
                v[z * NX * NY + i] = (double)(float)chirp_value(i, z);
            dft_angle(cs, z, nz);
        }
        write_cube(path, v, nz);
        stack *st = open_cube(path, nz);
        cube_transpose t;
        transpose_staged(&t, st, nz, CS_F32, 4, dir, 0);
        cube_spectrum *sp = NULL;
        ck_assert_msg(cube_spectrum_new(nz, &sp, err, sizeof err) == 0, "%s", err);
        fitswrite_image im = {.bitpix = -32, .naxis = 3, .naxes = {NX, NY, nz}};
        long long ds = 0;
        const long budgets[] = {0, 5 * NX * nh * 4, 16 * nh * 4};
        const long planes[] = {0, 1, 2, nz / 3, nz / 2 - 1, nz / 2, nz / 2 + 1, nz - 1};
        for (int bi = 0; bi < 3; bi++) {
            cube_spectrum_set_block_bytes(budgets[bi]);
            ck_assert_msg(fitswrite_file(out, &im, &ds, err, sizeof err) == 0, "%s", err);
            for (long b = 0; b < cube_spectrum_nblocks(&t); b++)
                ck_assert_msg(cube_spectrum_block(sp, &t, b, out, ds, &no_cancel, err,
                                                  sizeof err) == 0, "%s", err);
            for (size_t pi = 0; pi < sizeof planes / sizeof planes[0]; pi++) {
                const long k = planes[pi];
                if (k < 0 || k >= nz)
                    continue;
                double *p = nxny_plane(out, k);
                check_power_plane(p, v, cs, NX * NY, nz, k, bi);
                free(p);
            }
        }
        cube_spectrum_set_block_bytes(0);
        cube_spectrum_free(sp);
        cube_transpose_release(&t);
        stack_free(st);
        free(v);
        free(cs);
        const char *names[] = {"cube.fits", "ps.fits", "staging.bin"};
        ck_assert_int_eq(tt_tmpdir_remove(dir, names, 3), 0);
    }
}
END_TEST

/* Widths whose batches are no multiple of four series and spectra of no multiple of four
 * bins (spectrum.c computes the powers four series by four bins where the CPU has AVX2,
 * the rest the plain way): a 21 x 3 cube, so 63 pixels (batches of 32 and 31 series), and
 * under a budget of one row of 16 columns blocks of 16 and 5 pixels; nz = 9 (5 bins) and
 * 10 (6), every plane against a direct DFT of the float32 samples (tolerance as in
 * test_spectrum_batches). */
START_TEST(test_spectrum_odd_widths)
{
    enum { W = 21, H = 3 };
    static const long nzs[] = {9, 10};
    for (size_t ni = 0; ni < sizeof nzs / sizeof nzs[0]; ni++) {
        const long nz = nzs[ni], nh = nz / 2 + 1;
        char dir[256], path[300], out[300], err[256];
        tt_tmpdir_make(dir, sizeof dir, "cubepso");
        snprintf(path, sizeof path, "%s/cube.fits", dir);
        snprintf(out, sizeof out, "%s/ps.fits", dir);
        double v[W * H * 10], cs[2 * 10];
        for (long z = 0; z < nz; z++) {
            for (long i = 0; i < W * H; i++)
                v[z * W * H + i] = (double)(float)chirp_value(i, z);
            dft_angle(cs, z, nz);
        }
        fitswrite_image im = {.bitpix = -32, .naxis = 3, .naxes = {W, H, nz}};
        long long ds = 0;
        ck_assert_msg(fitswrite_file(path, &im, &ds, err, sizeof err) == 0, "%s", err);
        unsigned char be[W * H * 10 * 4];
        fitswrite_encode(-32, 0, v, be, W * H * nz);
        ck_assert_int_eq(tess_pwrite_file(path, be, (size_t)(W * H * nz) * 4, (off_t)ds), 0);
        const char *paths[] = {path};
        stack *st = stack_new(paths, 1, 0, W, H, nz, 2);
        ck_assert_ptr_nonnull(st);
        cube_source src = {.st = st, .nx = W, .ny = H, .nz = nz, .dtype = CS_F32, .name = "t"};
        cube_transpose t;
        ck_assert_msg(cube_transpose_init(&t, &src, 4, 0, NULL, dir, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(cube_transpose_create_files(&t, err, sizeof err) == 0, "%s", err);
        for (long k = 0; k < t.ngroups * (t.split > 1 ? t.split : 1); k++)
            ck_assert_msg(cube_transpose_group(&t, k, &no_cancel, err, sizeof err) == 0, "%s",
                          err);
        cube_spectrum *sp = NULL;
        ck_assert_msg(cube_spectrum_new(nz, &sp, err, sizeof err) == 0, "%s", err);
        im.naxes[2] = nz;
        const long budgets[] = {0, 16 * nh * 4};
        const long nblocks[] = {1, 32};   /* one tile row; 16 rows x 2 column blocks */
        for (int bi = 0; bi < 2; bi++) {
            cube_spectrum_set_block_bytes(budgets[bi]);
            ck_assert_int_eq(cube_spectrum_nblocks(&t), nblocks[bi]);
            ck_assert_msg(fitswrite_file(out, &im, &ds, err, sizeof err) == 0, "%s", err);
            for (long b = 0; b < cube_spectrum_nblocks(&t); b++)
                ck_assert_msg(cube_spectrum_block(sp, &t, b, out, ds, &no_cancel, err,
                                                  sizeof err) == 0, "%s", err);
            for (long k = 0; k < nz; k++) {
                long nx = 0, ny = 0;
                double *p = tt_fits_plane(out, k, &nx, &ny);
                ck_assert_ptr_nonnull(p);
                ck_assert_int_eq(nx, W);
                ck_assert_int_eq(ny, H);
                check_power_plane(p, v, cs, W * H, nz, k, bi);
                free(p);
            }
        }
        cube_spectrum_set_block_bytes(0);
        cube_spectrum_free(sp);
        cube_transpose_release(&t);
        stack_free(st);
        const char *names[] = {"cube.fits", "ps.fits", "staging.bin"};
        ck_assert_int_eq(tt_tmpdir_remove(dir, names, 3), 0);
    }
}
END_TEST

/* 8-bit values (dtype u8), 300 planes: groups of 19 planes and holds of 64 go through
 * the 16 x 16 byte transpose and the values left over (one by one below 16 planes, else
 * by a last transpose of the 16 planes ending the hold), on both edge tiles; every series
 * of the staging file and of cube_transpose_rows is the formula's, with the staging
 * file's pages made all at once and a tile row at a time (rowwise, two threads), and
 * with groups in 2 and 3 parts that share their planes (rechunk's plan of groups). */
static unsigned char u8_value(long x, long y, long z)
{
    return (unsigned char)((x * 7 + y * 13 + z * 29 + x * y * z) % 256);
}

/* A cube of nz planes of u8_value written to path (FITS, through write_cube) and opened. */
static stack *u8_cube(const char *path, long nz)
{
    double *v = malloc(sizeof(double) * NX * NY * nz);
    ck_assert_ptr_nonnull(v);
    for (long z = 0; z < nz; z++)
        for (long i = 0; i < NX * NY; i++)
            v[z * NX * NY + i] = u8_value(i % NX, i / NX, z);
    write_cube(path, v, nz);
    free(v);
    return open_cube(path, nz);
}

START_TEST(test_transpose_u8)
{
    const long nz = 300;
    char dir[256], path[300], err[256];
    tt_tmpdir_make(dir, sizeof dir, "cube8");
    snprintf(path, sizeof path, "%s/cube.fits", dir);
    stack *st = u8_cube(path, nz);
    for (int rowwise = 0; rowwise < 4; rowwise++) {   /* 2, 3: groups in parts */
        cube_transpose t;
        transpose_staged(&t, st, nz, CS_U8, 0, dir, rowwise);
        ck_assert_int_eq(t.es, 1);
        ck_assert_int_gt(t.g, 16);
        size_t bytes = (size_t)NX * NY * nz;
        unsigned char *staged = malloc(bytes), *rows = malloc(bytes);
        ck_assert_ptr_nonnull(staged);
        ck_assert_ptr_nonnull(rows);
        int fd = cube_transpose_series_open(&t);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(tess_pread_all(fd, staged, bytes, CHUNKSTORE_HEADER), 0);
        ck_assert_int_eq(cube_transpose_series_close(&t, fd, 0, err, sizeof err), 0);
        ck_assert_msg(cube_transpose_rows(&t, 0, NY, rows, &no_cancel, err, sizeof err) == 0, "%s",
                      err);
        for (long i = 0; i < NX * NY; i++) {
            long x = t.perm[i] % NX, y = t.perm[i] / NX;
            for (long z = 0; z < nz; z++) {
                ck_assert_uint_eq(staged[i * nz + z], u8_value(x, y, z));
                ck_assert_uint_eq(rows[i * nz + z], u8_value(x, y, z));
            }
        }
        free(staged);
        free(rows);
        cube_transpose_release(&t);
    }
    stack_free(st);
    const char *names[] = {"cube.fits", "staging.bin"};
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 2), 0);
}
END_TEST

/* Groups in parts (cube_transpose.split 2, rechunk's plan of groups) claim tile rows
 * from each other: part 0 of a group run alone (a worker that came first, or the only
 * one) writes every tile row of its group, the other part's share too, and leaves the
 * other groups' values untouched (zero in the sparse file); the other part, run after,
 * succeeds, and with the second group's parts the staging file holds every series. */
START_TEST(test_transpose_parts_claim_rows)
{
    const long nz = 40, g = 20;
    char dir[256], path[300], err[256];
    tt_tmpdir_make(dir, sizeof dir, "cubepart");
    snprintf(path, sizeof path, "%s/cube.fits", dir);
    stack *st = u8_cube(path, nz);
    cube_source src = {.st = st, .nx = NX, .ny = NY, .nz = nz, .dtype = CS_U8, .name = "t"};
    cube_transpose t;
    ck_assert_msg(cube_transpose_init(&t, &src, 0, 0, NULL, dir, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(cube_transpose_create_files(&t, err, sizeof err) == 0, "%s", err);
    t.g = t.hold = g;
    t.ngroups = nz / g;
    t.rowwise = 1;
    t.split = 2;   /* NY = 18: tile rows 0 (part 0's share) and 1 (part 1's) */
    size_t bytes = (size_t)NX * NY * nz;
    unsigned char *staged = malloc(bytes);
    ck_assert_ptr_nonnull(staged);
    for (long k = 0; k < 4; k++) {   /* group 0 part 0, part 1, group 1 part 0, part 1 */
        ck_assert_msg(cube_transpose_group(&t, k, &no_cancel, err, sizeof err) == 0, "%s",
                      err);
        if (k != 0 && k != 3)
            continue;
        int fd = cube_transpose_series_open(&t);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(tess_pread_all(fd, staged, bytes, CHUNKSTORE_HEADER), 0);
        ck_assert_int_eq(cube_transpose_series_close(&t, fd, 0, err, sizeof err), 0);
        for (long i = 0; i < NX * NY; i++) {
            long x = t.perm[i] % NX, y = t.perm[i] / NX;
            for (long z = 0; z < nz; z++)
                ck_assert_uint_eq(staged[i * nz + z],
                                  (k == 0 && z >= g) ? 0 : u8_value(x, y, z));
        }
    }
    free(staged);
    cube_transpose_release(&t);
    stack_free(st);
    const char *names[] = {"cube.fits", "staging.bin"};
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 2), 0);
}
END_TEST

/* s[n] = c + A sin(2 pi f n / N), N = 32, f = 5: numpy.fft.fft(s) is c N at k = 0,
 * -i A N / 2 at k = f and +i A N / 2 at k = N - f, 0 elsewhere, so |FFT|^2 is (c N)^2
 * at 0, (A N / 2)^2 at f and N - f (for A = 3: 48^2 = 2304; c = 2: 64^2 = 4096), 0
 * elsewhere (up to the float32 rounding of the samples).  A and c vary by pixel. */
START_TEST(test_spectrum)
{
    const long nz = 32, f = 5;
    char dir[256], path[300], out[300], err[256];
    tt_tmpdir_make(dir, sizeof dir, "cubeps");
    snprintf(path, sizeof path, "%s/cube.fits", dir);
    snprintf(out, sizeof out, "%s/ps.fits", dir);
    double *v = malloc(sizeof(double) * NX * NY * nz);
    ck_assert_ptr_nonnull(v);
    for (long i = 0; i < NX * NY; i++) {
        double a = 1 + (double)(i % 7), c = (double)(i % 3);
        for (long z = 0; z < nz; z++)
            v[z * NX * NY + i] = c + a * sin(2 * M_PI * (double)(f * z) / (double)nz);
    }
    v[5 * NX * NY + 3] = NAN;   /* counts as 0: pixel 3's series loses sample 5 */
    write_cube(path, v, nz);
    stack *st = open_cube(path, nz);
    cube_transpose t;
    transpose_staged(&t, st, nz, CS_F32, 4, dir, 0);
    fitswrite_image im = {.bitpix = -32, .naxis = 3, .naxes = {NX, NY, nz}};
    long long ds = 0;
    cube_spectrum *sp = NULL;
    ck_assert_msg(cube_spectrum_new(nz, &sp, err, sizeof err) == 0, "%s", err);
    /* Block budgets (the spectra a block holds: planes 0 .. 16 of float32, 68 bytes a
     * pixel): whole tile rows (the default); 4 of the 16 rows of a tile row (5 rows of 20
     * fit, 6800 bytes); one row of 16 columns and one of the 4 left (1088 bytes: no row
     * of 20 fits). */
    static const long budgets[] = {0, 6800, 1088, 6800};
    static const long nblocks[] = {2, 8, 64, 8};   /* 64: 16 rows of 2 blocks a tile row */
    /* the largest block's spectra: 16 rows (the band) of 20, 4 rows of 20, 16 pixels, at
     * 68 bytes a pixel */
    static const size_t spectra[] = {16 * 20 * 68, 4 * 20 * 68, 16 * 68, 4 * 20 * 68};
    /* The blocks read the series in place from stage A's mapping; the last round, on a
     * transpose whose stage A ran before it was set up (a resumed job), by pread. */
    cube_transpose t2;
    cube_source src2 = {.st = st, .nx = NX, .ny = NY, .nz = nz, .dtype = CS_F32, .name = "t"};
    ck_assert_msg(cube_transpose_init(&t2, &src2, 4, 0, NULL, dir, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_ptr_nonnull(cube_transpose_staged(&t));
    ck_assert_ptr_null(cube_transpose_staged(&t2));
    for (int bi = 0; bi < 4; bi++) {
        const cube_transpose *tb = bi < 3 ? &t : &t2;
        cube_spectrum_set_block_bytes(budgets[bi]);
        ck_assert_int_eq(cube_spectrum_nblocks(tb), nblocks[bi]);
        ck_assert_uint_eq(cube_spectrum_spectra_bytes(NX, NY, nz, 4), spectra[bi]);
        ck_assert_msg(fitswrite_file(out, &im, &ds, err, sizeof err) == 0, "%s", err);
        for (long b = 0; b < cube_spectrum_nblocks(tb); b++)
            ck_assert_msg(cube_spectrum_block(sp, tb, b, out, ds, &no_cancel, err, sizeof err) == 0,
                          "%s", err);
        for (long k = 0; k < nz; k++) {
            double *p = nxny_plane(out, k);
            for (long i = 0; i < NX * NY; i++) {
                double a = 1 + (double)(i % 7), c = (double)(i % 3), want = 0;
                if (k == 0)
                    want = (c * nz) * (c * nz);
                else if (k == f || k == nz - f)
                    want = (a * nz / 2) * (a * nz / 2);
                if (i == 3) {
                    /* the series minus its sample 5, s5 = c + a sin(2 pi 25 / 32):
                     * X'[k] = X[k] - s5 exp(-2 pi i 5 k / 32) */
                    double s5 = c + a * sin(2 * M_PI * (double)(f * 5) / (double)nz);
                    double re = k == 0 ? c * nz : 0, imag = 0;
                    if (k == f)
                        imag = -a * nz / 2;
                    else if (k == nz - f)
                        imag = a * nz / 2;
                    re -= s5 * cos(2 * M_PI * 5.0 * (double)k / (double)nz);
                    imag += s5 * sin(2 * M_PI * 5.0 * (double)k / (double)nz);
                    want = re * re + imag * imag;
                }
                ck_assert_msg(fabs(p[i] - want) <= 1e-5 * (want + 1) + 1e-3,
                              "k %ld pixel %ld: %.9g, want %.9g", k, i, p[i], want);
            }
            free(p);
        }
    }
    cube_spectrum_set_block_bytes(0);
    cube_spectrum_free(sp);
    cube_spectrum_free(NULL);
    cube_transpose_release(&t2);
    cube_transpose_release(&t);
    stack_free(st);
    free(v);
    const char *names[] = {"cube.fits", "ps.fits", "staging.bin"};
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 3), 0);
}
END_TEST

START_TEST(test_median)
{
    const double a[] = {3, NAN, 1, 2, 10};
    ck_assert_double_eq(cube_median(a, 4), 2);       /* 3, 1, 2 */
    ck_assert_double_eq(cube_median(a, 5), 2.5);     /* numpy.percentile([3,1,2,10], 50) */
    const double none[] = {NAN, NAN};
    ck_assert_double_eq(cube_median(none, 2), 0);   /* render_resolve_cuts' rule */
}
END_TEST

/* A Gaussian patch (amplitude 400, sigma 2.5 px) at (37.3, 22.6) on a background of 100
 * with uniform noise of +-5 (s.d. 2.9): the thresholded centroid lies within 0.1 px. */
START_TEST(test_centroid)
{
    enum { W = 64, H = 48 };
    double *v = malloc(sizeof(double) * W * H), *scratch = malloc(sizeof(double) * W * H);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(scratch);
    uint32_t rng = 12345;
    const double x0 = 37.3, y0 = 22.6, s = 2.5;
    for (long y = 0; y < H; y++)
        for (long x = 0; x < W; x++) {
            rng = rng * 1664525u + 1013904223u;
            double noise = ((double)(rng >> 8) / 16777216.0 - 0.5) * 10;
            double r2 = ((double)x - x0) * ((double)x - x0) + ((double)y - y0) * ((double)y - y0);
            v[y * W + x] = 100 + noise + 400 * exp(-r2 / (2 * s * s));
        }
    v[3 * W + 4] = NAN;   /* skipped */
    double cx = 0, cy = 0;
    cube_centroid(v, W, H, scratch, &cx, &cy);
    ck_assert_msg(fabs(cx - x0) < 0.1 && fabs(cy - y0) < 0.1, "centroid (%g, %g)", cx, cy);
    /* a flat frame has nothing above its median: the frame centre */
    for (long i = 0; i < W * H; i++)
        v[i] = 7;
    cube_centroid(v, W, H, scratch, &cx, &cy);
    ck_assert_double_eq(cx, W / 2.0);
    ck_assert_double_eq(cy, H / 2.0);
    /* and so has a frame of blanks */
    for (long i = 0; i < W * H; i++)
        v[i] = NAN;
    cube_centroid(v, W, H, scratch, &cx, &cy);
    ck_assert_double_eq(cx, W / 2.0);
    ck_assert_double_eq(cy, H / 2.0);
    free(v);
    free(scratch);
}
END_TEST

/* cube_centroid as cube_centroid.h states it, by cube_median alone. */
static void ref_centroid(const double *v, long nx, long ny, double *scratch, double *cx,
                         double *cy)
{
    size_t n = (size_t)nx * (size_t)ny;
    *cx = nx / 2.0;
    *cy = ny / 2.0;
    double b = cube_median(v, n);
    for (size_t i = 0; i < n; i++)
        scratch[i] = fabs(v[i] - b);
    double t = b + 3.0 * 1.4826 * cube_median(scratch, n);
    for (int pass = 0; pass < 2; pass++) {
        double lim = pass == 0 ? t : b, si = 0, sx = 0, sy = 0;
        for (long y = 0; y < ny; y++) {
            double rs = 0, rx = 0;
            for (long x = 0; x < nx; x++) {
                double w = v[y * nx + x] - b;
                if (v[y * nx + x] > lim) {
                    rs += w;
                    rx += w * (double)x;
                }
            }
            si += rs;
            sx += rx;
            sy += rs * (double)y;
        }
        if (si > 0) {
            *cx = sx / si;
            *cy = sy / si;
            return;
        }
    }
}

/* Frames of integers 0..65535 large enough for the histogram median: the same centroid,
 * bit for bit, as by cube_median's quickselects (even and odd pixel counts, 8- and 16-bit
 * ranges, values at both ends, flat frames, and one non-integer value). */
START_TEST(test_centroid_integers)
{
    static const long shapes[][2] = {{256, 256}, {255, 257}, {300, 200}};
    static const unsigned ranges[] = {256, 65536, 4, 1};
    for (size_t si = 0; si < 3; si++)
        for (size_t ri = 0; ri < 4; ri++) {
            long W = shapes[si][0], H = shapes[si][1];
            size_t n = (size_t)W * (size_t)H;
            double *v = malloc(sizeof(double) * n), *sa = malloc(sizeof(double) * n);
            ck_assert(v && sa);
            uint32_t rng = 99u + (uint32_t)(si * 7 + ri);
            for (long y = 0; y < H; y++)
                for (long x = 0; x < W; x++) {
                    rng = rng * 1664525u + 1013904223u;
                    unsigned k = (rng >> 8) % ranges[ri];
                    long dx = x - W / 3, dy = y - H / 4;
                    if (dx * dx + dy * dy < 400 && ranges[ri] > 4)
                        k = ranges[ri] - 1 - k / 8;
                    v[y * W + x] = k;
                }
            v[0] = 0;
            v[n - 1] = ranges[ri] - 1;
            double cx, cy, rx, ry;
            cube_centroid(v, W, H, sa, &cx, &cy);
            ref_centroid(v, W, H, sa, &rx, &ry);
            ck_assert_msg(cx == rx && cy == ry, "%zu %zu: (%.17g, %.17g) vs (%.17g, %.17g)",
                          si, ri, cx, cy, rx, ry);
            if (ranges[ri] <= 256) {   /* the 8-bit path: the same bits from the bytes */
                unsigned char *u = malloc(n);
                ck_assert(u);
                for (size_t i = 0; i < n; i++)
                    u[i] = (unsigned char)v[i];
                cube_centroid_u8(u, W, H, &cx, &cy);
                ck_assert_msg(cx == rx && cy == ry, "u8 %zu %zu: (%.17g, %.17g) vs (%.17g, "
                              "%.17g)", si, ri, cx, cy, rx, ry);
                free(u);
            }
            v[5] += 0.5;
            cube_centroid(v, W, H, sa, &cx, &cy);
            ref_centroid(v, W, H, sa, &rx, &ry);
            ck_assert(cx == rx && cy == ry);
            free(v);
            free(sa);
        }
}
END_TEST

/* Small 8-bit frames (cube_centroid takes cube_median there, not a histogram): the u8
 * path gives the reference's bits, flat frames (the frame centre) included. */
START_TEST(test_centroid_u8_small)
{
    static const long shapes[][2] = {{1, 1}, {2, 1}, {7, 5}, {16, 9}, {33, 31}};
    for (size_t si = 0; si < 5; si++)
        for (unsigned range = 1; range <= 256; range *= 4) {
            long W = shapes[si][0], H = shapes[si][1];
            size_t n = (size_t)W * (size_t)H;
            double *v = malloc(sizeof(double) * n), *sa = malloc(sizeof(double) * n);
            unsigned char *u = malloc(n);
            ck_assert(v && sa && u);
            uint32_t rng = 7u + (uint32_t)si * 31u + range;
            for (size_t i = 0; i < n; i++) {
                rng = rng * 1664525u + 1013904223u;
                u[i] = (unsigned char)((rng >> 8) % (range > 255 ? 256 : range));
                v[i] = u[i];
            }
            double cx, cy, rx, ry;
            cube_centroid_u8(u, W, H, &cx, &cy);
            ref_centroid(v, W, H, sa, &rx, &ry);
            ck_assert_msg(cx == rx && cy == ry, "%ldx%ld range %u: (%.17g, %.17g) vs (%.17g, "
                          "%.17g)", W, H, range, cx, cy, rx, ry);
            free(v);
            free(sa);
            free(u);
        }
}
END_TEST

/* chunkstore_decode's vector path (16 or 8 values at a time) and its scalar tail: every
 * u8 value, and u16/i16 words over their whole range (extremes and sign boundary
 * included) from little-endian bytes at every misalignment and every length 0 .. 40,
 * each against the integer the bytes spell (exact in double: the reference needs no
 * tolerance). */
START_TEST(test_decode_integers)
{
    enum { N = 300 };
    unsigned char raw[2 * N + 16];
    double got[N + 1];
    for (int k = 0; k < (int)sizeof raw; k++)
        raw[k] = (unsigned char)(k * 151 + 7);
    static const int words[] = {0, 1, 255, 256, 32767, 32768, 32769, 65534, 65535};
    for (int k = 0; k < 9; k++) {   /* extremes at the start, the middle and a tail */
        raw[2 * k + 1] = (unsigned char)words[k];
        raw[2 * k + 2] = (unsigned char)(words[k] >> 8);
        raw[2 * (k + 150) + 1] = (unsigned char)words[k];
        raw[2 * (k + 150) + 2] = (unsigned char)(words[k] >> 8);
    }
    for (int a = 0; a < 16; a++)
        for (long n = 0; n <= N; n += n < 40 ? 1 : 37) {
            const unsigned char *b = raw + a;
            got[n] = -7.0;   /* the sentinel past the end stays */
            chunkstore_decode(CS_U8, b, got, n);
            for (long i = 0; i < n; i++)
                ck_assert_msg(got[i] == (double)b[i], "u8 a=%d n=%ld i=%ld", a, n, i);
            ck_assert(got[n] == -7.0);
            chunkstore_decode(CS_U16, b, got, n);
            for (long i = 0; i < n; i++)
                ck_assert_msg(got[i] == (double)(b[2 * i] | b[2 * i + 1] << 8), "u16 a=%d "
                              "n=%ld i=%ld: %g", a, n, i, got[i]);
            ck_assert(got[n] == -7.0);
            chunkstore_decode(CS_I16, b, got, n);
            for (long i = 0; i < n; i++) {
                long u = b[2 * i] | b[2 * i + 1] << 8;
                ck_assert_msg(got[i] == (double)(u >= 32768 ? u - 65536 : u), "i16 a=%d "
                              "n=%ld i=%ld: %g", a, n, i, got[i]);
            }
            ck_assert(got[n] == -7.0);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cube");
    TCase *tc = tcase_create("cube");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transpose);
    tcase_add_test(tc, test_transpose_u8);
    tcase_add_test(tc, test_transpose_parts_claim_rows);
    tcase_add_test(tc, test_spectrum);
    tcase_add_test(tc, test_spectrum_fft_batch);
    tcase_add_test(tc, test_spectrum_batches);
    tcase_add_test(tc, test_spectrum_odd_widths);
    tcase_add_test(tc, test_median);
    tcase_add_test(tc, test_centroid);
    tcase_add_test(tc, test_centroid_integers);
    tcase_add_test(tc, test_centroid_u8_small);
    tcase_add_test(tc, test_decode_integers);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
