/* Unit tests of daemon/cache/planes: levels computed by hand, reloads, single reads, eviction. */
#include <check.h>
#include <fcntl.h>
#include <fitsio.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/fits/fitsimg.h"
#include "engine/image/render.h"
#include "daemon/cache/planes.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* A scratch directory under /tmp, emptied and removed by rm_tmpdir. */
static char tmpdir[64];

static void make_tmpdir(void)
{
    tt_tmpdir_make(tmpdir, sizeof tmpdir, "planes");
}

static void rm_tmpdir(const char *const *names, int n)
{
    ck_assert_int_eq(tt_tmpdir_remove(tmpdir, names, n), 0);
}

static void tmp_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmpdir, name);
}

/* Writes an nx x ny x nz image.  Float BITPIX: `vals` are the pixel values.  Integer
 * BITPIX: `vals` are the stored integers, and BSCALE/BZERO (when bscale != 1 or bzero != 0)
 * and BLANK (when has_blank) are written as cards. */
static void write_fits(const char *path, int bitpix, long nx, long ny, long nz, const double *vals,
                       double bscale, double bzero, int has_blank, long long blank)
{
    char name[600];
    snprintf(name, sizeof name, "!%s", path);
    fitsfile *f = NULL;
    int st = 0;
    long naxes[3] = {nx, ny, nz};
    fits_create_file(&f, name, &st);
    fits_create_img(f, bitpix, nz > 1 ? 3 : 2, naxes, &st);
    if (bitpix > 0) {
        if (bscale != 1.0 || bzero != 0.0) {
            fits_write_key(f, TDOUBLE, "BSCALE", &bscale, NULL, &st);
            fits_write_key(f, TDOUBLE, "BZERO", &bzero, NULL, &st);
        }
        if (has_blank)
            fits_write_key(f, TLONGLONG, "BLANK", &blank, NULL, &st);
        fits_set_bscale(f, 1.0, 0.0, &st);
    }
    fits_write_img(f, TDOUBLE, 1, nx * ny * nz, (double *)vals, &st);
    fits_close_file(f, &st);
    ck_assert_msg(st == 0, "writing %s: cfitsio status %d", path, st);
}

/* A dataset of one file, as the catalog would describe it. */
static dataset one_file(char **path, ds_kind kind, long nx, long ny, long nz)
{
    dataset d;
    memset(&d, 0, sizeof d);
    d.name = "t";
    d.kind = kind;
    d.paths = path;
    d.npaths = 1;
    d.nx = nx;
    d.ny = ny;
    d.nz = nz;
    return d;
}

/* Level k of an nx x ny level-0 array, straight from the definition of planes.h: pixel
 * (i, j) is the mean of the finite level-0 pixels of its 2^k block (partial at the right
 * and top edges), NaN when there is none. */
static double level_value(const double *v, long nx, long ny, int k, long i, long j)
{
    long b = 1L << k;
    double sum = 0;
    long n = 0;
    for (long y = j * b; y < (j + 1) * b && y < ny; y++)
        for (long x = i * b; x < (i + 1) * b && x < nx; x++)
            if (isfinite(v[y * nx + x])) {
                sum += v[y * nx + x];
                n++;
            }
    return n ? sum / (double)n : NAN;
}

static void assert_level(planestore *s, const dataset *d, long z, int k, const double *v, long nx,
                         long ny, double tol)
{
    plane_view pv;
    char err[256] = "";
    int rc = planestore_get(s, d, z, k, &pv, err, sizeof err);
    ck_assert_msg(rc == 0, "level %d: %d %s", k, rc, err);
    long b = 1L << k;
    ck_assert_int_eq(pv.level, k);
    ck_assert_int_eq(pv.plane->nx, (nx + b - 1) / b);
    ck_assert_int_eq(pv.plane->ny, (ny + b - 1) / b);
    for (long j = 0; j < pv.plane->ny; j++)
        for (long i = 0; i < pv.plane->nx; i++) {
            double want = level_value(v, nx, ny, k, i, j);
            double got = rp_plane_get(pv.plane, i, j);
            if (isnan(want))
                ck_assert_msg(isnan(got), "level %d (%ld,%ld): %g, want NaN", k, i, j, got);
            else
                ck_assert_msg(fabs(got - want) <= tol * fmax(1.0, fabs(want)),
                              "level %d (%ld,%ld): %.9g, want %.9g", k, i, j, got, want);
        }
    planestore_release(s, &pv);
    ck_assert_ptr_null(pv.handle);
}

START_TEST(test_levels_by_hand)
{
    /* 5 x 3, values x + 10 y, two NaNs: (1,0) and (4,2). */
    make_tmpdir();
    char path[256];
    tmp_path(path, sizeof path, "a.fits");
    double v[15];
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 5; i++)
            v[j * 5 + i] = i + 10 * j;
    v[1] = NAN;
    v[14] = NAN;
    write_fits(path, -32, 5, 3, 1, v, 1, 0, 0, 0);
    char *paths[1] = {path};
    dataset d = one_file(paths, DS_IMAGE, 5, 3, 1);
    planestore *s = planestore_new(1 << 20);
    ck_assert_ptr_nonnull(s);

    plane_view pv;
    char err[256];
    ck_assert_int_eq(planestore_get(s, &d, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->dtype, RP_F32);
    ck_assert(isnan(rp_plane_get(pv.plane, 1, 0)));
    ck_assert_double_eq(rp_plane_get(pv.plane, 3, 2), 23.0);
    planestore_release(s, &pv);

    /* Level 1 is 3 x 2.  By hand: (0,0) = mean(0, 10, 11) = 7 (the NaN left out);
     * (2,0) = mean(4, 14) = 9 (the right column is partial); (2,1) covers only pixel
     * (4,2), which is NaN, so NaN; (1,1) = mean(22, 23) = 22.5 (the top row is partial). */
    ck_assert_int_eq(planestore_get(s, &d, 0, 1, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->nx, 3);
    ck_assert_int_eq(pv.plane->ny, 2);
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 0, 0), 7.0, 1e-6);
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 2, 0), 9.0, 1e-6);
    ck_assert(isnan(rp_plane_get(pv.plane, 2, 1)));
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 1, 1), 22.5, 1e-6);
    planestore_release(s, &pv);
    /* Level 2 is 2 x 1: (0,0) = mean of x 0..3, y 0..2 without (1,0): (0+2+3 + 10+11+12+13
     * + 20+21+22+23) / 11 = 137 / 11; (1,0) = mean(4, 14) = 9. */
    ck_assert_int_eq(planestore_get(s, &d, 0, 2, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->nx, 2);
    ck_assert_int_eq(pv.plane->ny, 1);
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 0, 0), 137.0 / 11.0, 1e-5);
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 1, 0), 9.0, 1e-6);
    planestore_release(s, &pv);
    /* Level 3 is the mean of the 13 finite pixels: (137 + 4 + 14) / 13; levels past it
     * are capped there. */
    ck_assert_int_eq(planestore_get(s, &d, 0, 9, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.level, 3);
    ck_assert_int_eq(pv.plane->nx, 1);
    ck_assert_int_eq(pv.plane->ny, 1);
    ck_assert_double_eq_tol(rp_plane_get(pv.plane, 0, 0), 155.0 / 13.0, 1e-5);
    planestore_release(s, &pv);
    for (int k = 0; k <= 3; k++)
        assert_level(s, &d, 0, k, v, 5, 3, 1e-6);

    ck_assert_int_eq(planestore_get(s, &d, 0, -1, &pv, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(planestore_get(s, &d, 1, 0, &pv, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(planestore_get(s, &d, -1, 0, &pv, err, sizeof err), TESS_ERANGE);
    planestore_stats st;
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 1);
    ck_assert_uint_eq(st.reductions, 3);
    ck_assert_uint_eq(st.entries, 4);
    planestore_free(s);
    const char *names[] = {"a.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

/* A larger image with random NaNs and odd sides: every level against the definition. */
START_TEST(test_levels_random_odd)
{
    make_tmpdir();
    char path[256];
    tmp_path(path, sizeof path, "r.fits");
    long nx = 37, ny = 23;
    double *v = malloc((size_t)(nx * ny) * sizeof(double));
    unsigned rng = 12345;
    for (long i = 0; i < nx * ny; i++) {
        rng = rng * 1103515245u + 12345u;
        v[i] = (double)((rng >> 8) % 100000) / 7.0 - 3000.0;
        if ((rng >> 4) % 9 == 0)
            v[i] = NAN;
    }
    /* One all-NaN 4 x 4 block, so that level 2 has a NaN pixel. */
    for (long y = 4; y < 8; y++)
        for (long x = 8; x < 12; x++)
            v[y * nx + x] = NAN;
    write_fits(path, -64, nx, ny, 1, v, 1, 0, 0, 0);
    char *paths[1] = {path};
    dataset d = one_file(paths, DS_IMAGE, nx, ny, 1);
    planestore *s = planestore_new(1 << 22);
    for (int k = 0; k <= 6; k++)
        assert_level(s, &d, 0, k, v, nx, ny, 1e-12);
    plane_view pv;
    char err[256];
    ck_assert_int_eq(planestore_get(s, &d, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->dtype, RP_F64);
    planestore_release(s, &pv);
    ck_assert_int_eq(planestore_get(s, &d, 0, 2, &pv, err, sizeof err), 0);
    ck_assert(isnan(rp_plane_get(pv.plane, 2, 1)));
    planestore_release(s, &pv);
    planestore_free(s);
    free(v);
    const char *names[] = {"r.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

START_TEST(test_dtypes_scaling_blank)
{
    make_tmpdir();
    char p16[256], p32[256];
    tmp_path(p16, sizeof p16, "i16.fits");
    tmp_path(p32, sizeof p32, "i32.fits");
    /* BITPIX 16, BSCALE 2, BZERO 100, BLANK -1: physical 2 raw + 100, BLANK as NaN. */
    double raw[6] = {0, 1, -1, 3, 4, 5};
    write_fits(p16, 16, 3, 2, 1, raw, 2.0, 100.0, 1, -1);
    double big[4] = {100000, -7, 2147483647.0, 0};
    write_fits(p32, 32, 2, 2, 1, big, 1.0, 0.0, 0, 0);
    char *a[1] = {p16}, *b[1] = {p32};
    dataset d16 = one_file(a, DS_IMAGE, 3, 2, 1), d32 = one_file(b, DS_IMAGE, 2, 2, 1);
    planestore *s = planestore_new(1 << 20);
    plane_view pv;
    char err[256];
    ck_assert_int_eq(planestore_get(s, &d16, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->dtype, RP_F32);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 0), 100.0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 0), 102.0);
    ck_assert(isnan(rp_plane_get(pv.plane, 2, 0)));
    ck_assert_double_eq(rp_plane_get(pv.plane, 2, 1), 110.0);
    planestore_release(s, &pv);
    /* Level 1 of 3 x 2 is 2 x 1: (0,0) = mean(100, 102, 106, 108) = 104; (1,0) = 110. */
    ck_assert_int_eq(planestore_get(s, &d16, 0, 1, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 0), 104.0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 0), 110.0);
    planestore_release(s, &pv);
    /* BITPIX 32 is kept in double: 2147483647 is not a float. */
    ck_assert_int_eq(planestore_get(s, &d32, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_int_eq(pv.plane->dtype, RP_F64);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 1), 2147483647.0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 0), -7.0);
    planestore_release(s, &pv);
    planestore_free(s);
    const char *names[] = {"i16.fits", "i32.fits"};
    rm_tmpdir(names, 2);
}
END_TEST

START_TEST(test_cube_and_stack)
{
    make_tmpdir();
    char cube[256], f0[256], f1[256];
    tmp_path(cube, sizeof cube, "cube.fits");
    tmp_path(f0, sizeof f0, "f0.fits");
    tmp_path(f1, sizeof f1, "f1.fits");
    double v[4 * 3 * 3];
    for (int i = 0; i < 36; i++)
        v[i] = i;
    write_fits(cube, -32, 4, 3, 3, v, 1, 0, 0, 0);
    write_fits(f0, -32, 4, 3, 1, v, 1, 0, 0, 0);
    write_fits(f1, -32, 4, 3, 1, v + 12, 1, 0, 0, 0);
    char *cp[1] = {cube};
    char *sp[2] = {f0, f1};
    dataset dc = one_file(cp, DS_CUBE, 4, 3, 3);
    dataset ds = one_file(sp, DS_STACK, 4, 3, 2);
    ds.npaths = 2;
    planestore *s = planestore_new(1 << 20);
    plane_view pv;
    char err[256];
    ck_assert_int_eq(planestore_get(s, &dc, 2, 0, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 2), 24.0 + 1 + 8);
    planestore_release(s, &pv);
    ck_assert_int_eq(planestore_get(s, &dc, 3, 0, &pv, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(planestore_get(s, &ds, 1, 0, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 0), 12.0);
    planestore_release(s, &pv);
    /* Frame 1 of the stack and plane 1 of the cube hold the same values. */
    for (int k = 0; k <= 2; k++) {
        assert_level(s, &ds, 1, k, v + 12, 4, 3, 1e-6);
        assert_level(s, &dc, 1, k, v + 12, 4, 3, 1e-6);
    }
    /* A plane of a missing file fails with TESS_EIO and a reason, and is not cached. */
    unlink(f0);
    err[0] = '\0';
    ck_assert_int_eq(planestore_get(s, &ds, 0, 0, &pv, err, sizeof err), TESS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "f0.fits"));
    ck_assert_ptr_null(pv.handle);
    planestore_free(s);
    const char *names[] = {"cube.fits", "f0.fits", "f1.fits"};
    rm_tmpdir(names, 3);
}
END_TEST

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Moves the file's mtime `dsec` seconds from its current value. */
static void shift_mtime(const char *path, int dsec)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
    ts[1].tv_sec += dsec;
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

START_TEST(test_reload_after_change)
{
    make_tmpdir();
    char path[256];
    tmp_path(path, sizeof path, "c.fits");
    double v[4] = {1, 2, 3, 4};
    write_fits(path, -32, 2, 2, 1, v, 1, 0, 0, 0);
    char *paths[1] = {path};
    dataset d = one_file(paths, DS_IMAGE, 2, 2, 1);
    planestore *s = planestore_new(1 << 20);
    plane_view pv;
    char err[256], ver0[48], ver1[48];
    ck_assert_int_eq(planestore_version(s, &d, 0, ver0, sizeof ver0, err, sizeof err), 0);
    ck_assert_int_eq(planestore_get(s, &d, 0, 1, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 0), 2.5);
    ck_assert_str_eq(planestore_view_version(&pv), ver0);
    planestore_release(s, &pv);

    /* Same size, new contents, mtime moved on. */
    double w[4] = {10, 20, 30, 40};
    write_fits(path, -32, 2, 2, 1, w, 1, 0, 0, 0);
    shift_mtime(path, 5);
    sleep_ms(1100);
    ck_assert_int_eq(planestore_version(s, &d, 0, ver1, sizeof ver1, err, sizeof err), 0);
    ck_assert_str_ne(ver0, ver1);
    ck_assert_int_eq(planestore_get(s, &d, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 1), 40.0);
    ck_assert_str_eq(planestore_view_version(&pv), ver1);
    planestore_release(s, &pv);
    ck_assert_int_eq(planestore_get(s, &d, 0, 1, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 0, 0), 25.0);
    planestore_release(s, &pv);
    planestore_stats st;
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 2);
    ck_assert_uint_ge(st.reloads, 2);

    /* The file is looked at on every use, so a change is read at once (a plane is never
     * older than the version a request took before reading it: daemon/catalog.h). */
    write_fits(path, -32, 2, 2, 1, v, 1, 0, 0, 0);
    shift_mtime(path, 10);
    ck_assert_int_eq(planestore_get(s, &d, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 1), 4.0);
    planestore_release(s, &pv);
    ck_assert_int_eq(planestore_get(s, &d, 0, 0, &pv, err, sizeof err), 0);
    ck_assert_double_eq(rp_plane_get(pv.plane, 1, 1), 4.0);
    planestore_release(s, &pv);
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 3);   /* read again once, not at every use */
    planestore_free(s);
    const char *names[] = {"c.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

#define NTHREADS 8

typedef struct thread_arg {
    planestore *s;
    const dataset *d;
    pthread_barrier_t *barrier;
    int rc;
    const void *data;
    plane_view v;
} thread_arg;

static void *first_use(void *p)
{
    thread_arg *a = p;
    char err[256];
    pthread_barrier_wait(a->barrier);
    a->rc = planestore_get(a->s, a->d, 0, 2, &a->v, err, sizeof err);
    a->data = a->rc == 0 ? a->v.plane->data : NULL;
    return NULL;
}

START_TEST(test_concurrent_first_use_reads_once)
{
    make_tmpdir();
    char path[256];
    tmp_path(path, sizeof path, "big.fits");
    long n = 1024;
    double *v = malloc((size_t)(n * n) * sizeof(double));
    for (long i = 0; i < n * n; i++)
        v[i] = (double)(i % 977);
    write_fits(path, -32, n, n, 1, v, 1, 0, 0, 0);
    free(v);
    char *paths[1] = {path};
    dataset d = one_file(paths, DS_IMAGE, n, n, 1);
    planestore *s = planestore_new(64 << 20);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    pthread_t th[NTHREADS];
    thread_arg args[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (thread_arg){.s = s, .d = &d, .barrier = &barrier};
        ck_assert_int_eq(pthread_create(&th[i], NULL, first_use, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_int_eq(args[i].rc, 0);
        ck_assert_ptr_eq(args[i].data, args[0].data);
        ck_assert_int_eq(args[i].v.plane->nx, 256);
    }
    planestore_stats st;
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 1);
    ck_assert_uint_eq(st.reductions, 2);
    for (int i = 0; i < NTHREADS; i++)
        planestore_release(s, &args[i].v);
    pthread_barrier_destroy(&barrier);
    planestore_free(s);
    const char *names[] = {"big.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

START_TEST(test_eviction_spares_planes_in_use)
{
    make_tmpdir();
    char pa[256], pb[256];
    tmp_path(pa, sizeof pa, "a.fits");
    tmp_path(pb, sizeof pb, "b.fits");
    double v[100 * 100];
    for (int i = 0; i < 10000; i++)
        v[i] = i;
    write_fits(pa, -32, 100, 100, 1, v, 1, 0, 0, 0);
    for (int i = 0; i < 10000; i++)
        v[i] = -i;
    write_fits(pb, -32, 100, 100, 1, v, 1, 0, 0, 0);
    char *a[1] = {pa}, *b[1] = {pb};
    dataset da = one_file(a, DS_IMAGE, 100, 100, 1), db = one_file(b, DS_IMAGE, 100, 100, 1);
    /* Room for one 40 kB plane, not two. */
    planestore *s = planestore_new(60000);
    plane_view va, vb;
    char err[256];
    ck_assert_int_eq(planestore_get(s, &da, 0, 0, &va, err, sizeof err), 0);
    ck_assert_int_eq(planestore_get(s, &db, 0, 0, &vb, err, sizeof err), 0);
    planestore_stats st;
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 2);      /* over budget, but both in use */
    ck_assert_uint_gt(st.bytes, st.max_bytes);
    ck_assert_double_eq(rp_plane_get(va.plane, 99, 99), 9999.0);
    ck_assert_double_eq(rp_plane_get(vb.plane, 99, 99), -9999.0);
    planestore_release(s, &va);            /* a goes: nothing else holds it */
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_le(st.bytes, st.max_bytes);
    ck_assert_int_eq(planestore_get(s, &da, 0, 0, &va, err, sizeof err), 0);
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 3);        /* read again */
    planestore_release(s, &vb);
    planestore_release(s, &va);
    planestore_release(s, &va);            /* a second release is ignored */
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 1);

    /* Views outlive the store. */
    ck_assert_int_eq(planestore_get(s, &db, 0, 0, &vb, err, sizeof err), 0);
    planestore_free(s);
    ck_assert_double_eq(rp_plane_get(vb.plane, 1, 0), -1.0);
    planestore_release(s, &vb);
    planestore_free(NULL);
    planestore_release(NULL, NULL);
    const char *names[] = {"a.fits", "b.fits"};
    rm_tmpdir(names, 2);
}
END_TEST

START_TEST(test_cuts_cached_per_plane_and_parameters)
{
    make_tmpdir();
    char path[256];
    tmp_path(path, sizeof path, "k.fits");
    long nx = 61, ny = 47;
    double *v = malloc((size_t)(nx * ny) * sizeof(double));
    for (long i = 0; i < nx * ny; i++)
        v[i] = i % 13 == 0 ? NAN : sin((double)i) * 100.0;
    write_fits(path, -32, nx, ny, 1, v, 1, 0, 0, 0);
    /* The reference: render_resolve_cuts over the doubles of the file. */
    double *f = malloc((size_t)(nx * ny) * sizeof(double));
    char err[256];
    ck_assert_int_eq(fitsimg_read_region(path, 0, 0, 0, 0, nx, ny, f, err, sizeof err), 0);
    render_params rp;
    render_params_default(&rp);
    double wlo, whi, lo, hi;
    ck_assert_int_eq(render_resolve_cuts(f, (size_t)(nx * ny), &rp, &wlo, &whi), 0);
    char *paths[1] = {path};
    dataset d = one_file(paths, DS_IMAGE, nx, ny, 1);
    planestore *s = planestore_new(1 << 20);
    ck_assert_int_eq(planestore_cuts(s, &d, 0, &rp, &lo, &hi, err, sizeof err), 0);
    ck_assert_double_eq(lo, wlo);
    ck_assert_double_eq(hi, whi);
    ck_assert_int_eq(planestore_cuts(s, &d, 0, &rp, &lo, &hi, err, sizeof err), 0);
    planestore_stats st;
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.cut_computations, 1);
    /* Stretch and colour map do not change the cuts. */
    rp.stretch = STRETCH_ASINH;
    rp.cmap = CMAP_VIRIDIS;
    ck_assert_int_eq(planestore_cuts(s, &d, 0, &rp, &lo, &hi, err, sizeof err), 0);
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.cut_computations, 1);
    rp.min_cut.value = 5;
    ck_assert_int_eq(planestore_cuts(s, &d, 0, &rp, &lo, &hi, err, sizeof err), 0);
    ck_assert_int_eq(render_resolve_cuts(f, (size_t)(nx * ny), &rp, &wlo, &whi), 0);
    ck_assert_double_eq(lo, wlo);
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.cut_computations, 2);
    ck_assert_uint_eq(st.reads, 1);
    planestore_free(s);

    /* Absolute cuts read nothing. */
    s = planestore_new(1 << 20);
    rp.min_cut = (render_cut){-3.5, 0};
    rp.max_cut = (render_cut){7.25, 0};
    ck_assert_int_eq(planestore_cuts(s, &d, 0, &rp, &lo, &hi, err, sizeof err), 0);
    ck_assert_double_eq(lo, -3.5);
    ck_assert_double_eq(hi, 7.25);
    planestore_get_stats(s, &st);
    ck_assert_uint_eq(st.reads, 0);
    ck_assert_int_eq(planestore_cuts(s, &d, 1, &rp, &lo, &hi, err, sizeof err), TESS_ERANGE);
    planestore_free(s);
    free(v);
    free(f);
    const char *names[] = {"k.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("planes");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_levels_by_hand);
    tcase_add_test(tc, test_levels_random_odd);
    tcase_add_test(tc, test_dtypes_scaling_blank);
    tcase_add_test(tc, test_cube_and_stack);
    tcase_add_test(tc, test_reload_after_change);
    tcase_add_test(tc, test_concurrent_first_use_reads_once);
    tcase_add_test(tc, test_eviction_spares_planes_in_use);
    tcase_add_test(tc, test_cuts_cached_per_plane_and_parameters);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
