/* Tests of engine/image/stack: cube and stack readers (mmap, PNG, cfitsio fallback) against
 * independent reads of the same files with cfitsio and libpng. */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/image/pngframe.h"
#include "engine/image/stack.h"
#include "engine/base/pool.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#define DEMO(name) TESSERA_DEMO_DIR "/" name

/* Asserts that two doubles are the same value (NaN equals NaN). */
static void assert_same(double a, double b, const char *what, long i)
{
    if (!((isnan(a) && isnan(b)) || a == b))   /* no Check message for passing pixels */
        ck_abort_msg("%s[%ld]: %.17g != %.17g", what, i, a, b);
}

/* The whole cube of `path` read plane by plane with cfitsio (tt_fits_plane). */
static double *cfitsio_cube(const char *path, long nz, long *nx, long *ny)
{
    double *all = NULL;
    for (long z = 0; z < nz; z++) {
        double *p = tt_fits_plane(path, z, nx, ny);
        size_t n = (size_t)*nx * (size_t)*ny;
        if (!all)
            all = malloc(n * (size_t)nz * sizeof(double));
        memcpy(all + n * (size_t)z, p, n * sizeof(double));
        free(p);
    }
    return all;
}

#define REF(x, y, z) ref[((size_t)(z) * (size_t)ny + (size_t)(y)) * (size_t)nx + (size_t)(x)]

/* Checks the xz, yz and series cuts of `s` read under `o` (NULL: the plain calls) against
 * `ref` (nx x ny x nz, x fastest); `out` holds any of them. */
static void check_cuts(stack *s, const stack_cut_opts *o, const double *ref, long nx, long ny,
                       long nz, double *out)
{
    char err[256];
    long h = ny / 4, x0 = nx / 5, y0 = ny / 3;
    /* xz at row y0: all of x, all of z */
    ck_assert_int_eq(o ? stack_read_xz_on(s, o, y0, 0, 0, nx, nz, out, err, sizeof err)
                       : stack_read_xz(s, y0, 0, 0, nx, nz, out, err, sizeof err), 0);
    for (long k = 0; k < nz; k++)
        for (long i = 0; i < nx; i++)
            assert_same(out[k * nx + i], REF(i, y0, k), "xz", k * nx + i);
    /* yz at column x0, a part */
    long zz = nz > 2 ? nz - 1 : nz, zstart = nz - zz;
    ck_assert_int_eq(o ? stack_read_yz_on(s, o, x0, y0, zstart, h, zz, out, err, sizeof err)
                       : stack_read_yz(s, x0, y0, zstart, h, zz, out, err, sizeof err), 0);
    for (long k = 0; k < zz; k++)
        for (long j = 0; j < h; j++)
            assert_same(out[k * h + j], REF(x0, y0 + j, zstart + k), "yz", k * h + j);
    /* series at a few pixels, including the corners */
    long px[4][2] = {{0, 0}, {nx - 1, ny - 1}, {x0, y0}, {nx / 2, ny / 2}};
    for (int p = 0; p < 4; p++) {
        ck_assert_int_eq(o ? stack_read_series_on(s, o, px[p][0], px[p][1], 0, nz, out, err,
                                                  sizeof err)
                           : stack_read_series(s, px[p][0], px[p][1], 0, nz, out, err,
                                               sizeof err), 0);
        for (long k = 0; k < nz; k++)
            assert_same(out[k], REF(px[p][0], px[p][1], k), "series", k);
    }
}

/* Checks region, xz, yz and series reads of `s` against `ref` (nx x ny x nz, x fastest):
 * the plain calls, and the cuts on a pool of three workers and cancelled. */
static void check_volume(stack *s, const double *ref, long nx, long ny, long nz)
{
    char err[256];
    long w = nx / 3, h = ny / 4, x0 = nx / 5, y0 = ny / 3, z0 = nz / 2;
    double *out = malloc((size_t)(nx > ny ? nx : ny) * (size_t)(ny > nz ? ny : nz) * 8 + 64 * 8);
    ck_assert_int_eq(stack_read_region(s, z0, x0, y0, w, h, out, err, sizeof err), 0);
    for (long j = 0; j < h; j++)
        for (long i = 0; i < w; i++)
            assert_same(out[j * w + i], REF(x0 + i, y0 + j, z0), "xy", j * w + i);
    check_cuts(s, NULL, ref, nx, ny, nz, out);
    pool *p = pool_new(3, 64);
    ck_assert_ptr_nonnull(p);
    volatile int cancel = 0;
    stack_cut_opts o = {p, POOL_INTERACTIVE, &cancel};
    check_cuts(s, &o, ref, nx, ny, nz, out);
    cancel = 1;
    ck_assert_int_eq(stack_read_xz_on(s, &o, y0, 0, 0, nx, nz, out, err, sizeof err),
                     TESS_ECANCELED);
    ck_assert_int_eq(stack_read_series_on(s, &o, 0, 0, 0, nz, out, err, sizeof err),
                     TESS_ECANCELED);
    pool_free(p);
    /* out of range */
    ck_assert_int_eq(stack_read_region(s, nz, 0, 0, 1, 1, out, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(stack_read_xz(s, ny, 0, 0, 1, 1, out, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(stack_read_yz(s, 0, ny - 1, 0, 2, 1, out, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(stack_read_series(s, nx, 0, 0, nz, out, err, sizeof err), TESS_ERANGE);
    free(out);
}
#undef REF

/* l1448_13co: BITPIX -32 cube with NaNs, read through mmap. */
START_TEST(test_cube_mmap_equals_cfitsio)
{
    const char *path = DEMO("l1448_13co.fits");
    long nx, ny, nz = 53;
    double *ref = cfitsio_cube(path, nz, &nx, &ny);
    ck_assert_int_eq(nx, 105);
    const char *paths[1] = {path};
    stack *s = stack_new(paths, 1, 0, nx, ny, nz, 4);
    ck_assert_ptr_nonnull(s);
    check_volume(s, ref, nx, ny, nz);
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_int_eq((int)st.opens, 1);
    ck_assert_uint_eq(stack_data_bytes(s), 105ULL * 105 * 53 * 4);
    stack_free(s);
    free(ref);
}
END_TEST

/* Blank pixels: NaN in a float cube, BLANK in a scaled 32-bit integer cube. */
START_TEST(test_blanks)
{
    char dir[128], path[256];
    tt_tmpdir_make(dir, sizeof dir, "stackb");
    const long nx = 11, ny = 7, nz = 3, n = nx * ny * nz;
    for (int kind = 0; kind < 2; kind++) {
        snprintf(path, sizeof path, "%s/b%d.fits", dir, kind);
        fitsfile *f = NULL;
        int st = 0;
        long naxes[3] = {nx, ny, nz};
        fits_create_file(&f, path, &st);
        fits_create_img(f, kind == 0 ? FLOAT_IMG : LONG_IMG, 3, naxes, &st);
        if (kind == 0) {
            float *v = malloc(n * sizeof(float));
            for (long i = 0; i < n; i++)
                v[i] = i % 5 == 0 ? NAN : (float)i * 0.25f - 3.0f;
            fits_write_img(f, TFLOAT, 1, n, v, &st);
            free(v);
        } else {
            double bscale = 0.5, bzero = 100.0;
            long long blank = -99;
            fits_write_key(f, TDOUBLE, "BSCALE", &bscale, NULL, &st);
            fits_write_key(f, TDOUBLE, "BZERO", &bzero, NULL, &st);
            fits_write_key(f, TLONGLONG, "BLANK", &blank, NULL, &st);
            fits_set_bscale(f, 1.0, 0.0, &st);
            int *v = malloc(n * sizeof(int));
            for (long i = 0; i < n; i++)
                v[i] = i % 4 == 1 ? -99 : (int)(i * 3 - 50);
            fits_write_img(f, TINT, 1, n, v, &st);
            free(v);
        }
        fits_close_file(f, &st);
        ck_assert_int_eq(st, 0);
        long rx, ry;
        double *ref = cfitsio_cube(path, nz, &rx, &ry);
        int nans = 0;
        for (long i = 0; i < n; i++)
            nans += isnan(ref[i]);
        ck_assert_int_gt(nans, 10);
        const char *pp[1] = {path};
        stack *s = stack_new(pp, 1, 0, nx, ny, nz, 2);
        check_volume(s, ref, nx, ny, nz);
        stack_free(s);
        free(ref);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

/* Scaled 16-bit images: BZERO 32768 (M13) and BSCALE/BZERO (2MASS K). */
START_TEST(test_scaled_integers_equal_cfitsio)
{
    const char *files[2] = {DEMO("gc_2mass_k.fits"), DEMO("HorseHead.fits")};
    for (int f = 0; f < 2; f++) {
        long nx, ny;
        double *ref = tt_fits_plane(files[f], 0, &nx, &ny);
        stack *s = stack_new(&files[f], 1, 0, nx, ny, 1, 4);
        check_volume(s, ref, nx, ny, 1);
        stack_free(s);
        free(ref);
    }
}
END_TEST

/* The M13 frames as a stack with room for two open frames: reads are right and no more
 * than two frames are ever open. */
START_TEST(test_m13_stack_lru)
{
    char paths[5][256];
    const char *pp[5];
    for (int i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof paths[i], DEMO("M13_blue_%04d.fits"), i + 1);
        pp[i] = paths[i];
    }
    long nx, ny;
    double *ref = NULL;
    for (int i = 0; i < 5; i++) {
        double *p = tt_fits_plane(pp[i], 0, &nx, &ny);
        if (!ref)
            ref = malloc((size_t)nx * (size_t)ny * 5 * sizeof(double));
        memcpy(ref + (size_t)i * (size_t)nx * (size_t)ny, p, (size_t)nx * (size_t)ny * 8);
        free(p);
    }
    stack *s = stack_new(pp, 5, 0, nx, ny, 5, 2);
    check_volume(s, ref, nx, ny, 5);
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_int_le(st.open_now, 2);
    ck_assert_msg(st.opens > 5, "frames were closed and opened again (%llu opens)", st.opens);
    fitsimg_info info;
    char err[256];
    ck_assert_int_eq(frame_read_info(pp[0], 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.bitpix, 16);
    fitsimg_info_release(&info);
    stack_free(s);
    free(ref);
}
END_TEST

/* Writes a greyscale PNG with plain libpng: rows[r][c] = v(r, c), r = 0 the first row. */
static void write_png_plain(const char *path, long w, long h, int bits, unsigned (*v)(long, long))
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, bits, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    unsigned char *row = malloc((size_t)w * 2);
    for (long r = 0; r < h; r++) {
        for (long c = 0; c < w; c++) {
            unsigned x = v(r, c);
            if (bits == 16) {
                row[2 * c] = (unsigned char)(x >> 8);
                row[2 * c + 1] = (unsigned char)(x & 0xff);
            } else {
                row[c] = (unsigned char)x;
            }
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

static long g_frame;
static unsigned v8(long r, long c)
{
    return (unsigned)((r * 7 + c * 3 + g_frame * 11) % 256);
}
static unsigned v16(long r, long c)
{
    return (unsigned)((r * 1031 + c * 37 + g_frame * 4099) % 65536);
}

/* PNG frames: values as stored, y = 0 the LAST PNG row; 8 and 16 bits; frame_read_info
 * and frame_read_region agree with the stack reader. */
START_TEST(test_png_frames_orientation)
{
    char dir[128];
    tt_tmpdir_make(dir, sizeof dir, "stack");
    const long w = 37, h = 23, nz = 4;
    for (int bits = 8; bits <= 16; bits += 8) {
        char paths[4][256];
        const char *pp[4];
        for (long z = 0; z < nz; z++) {
            snprintf(paths[z], sizeof paths[z], "%s/f%d_%ld.png", dir, bits, z);
            pp[z] = paths[z];
            g_frame = z;
            write_png_plain(paths[z], w, h, bits, bits == 8 ? v8 : v16);
        }
        double *ref = malloc((size_t)(w * h * nz) * sizeof(double));
        for (long z = 0; z < nz; z++) {
            g_frame = z;
            for (long y = 0; y < h; y++)
                for (long x = 0; x < w; x++)
                    ref[(z * h + y) * w + x] = (bits == 8 ? v8 : v16)(h - 1 - y, x);
        }
        fitsimg_info info;
        char err[256];
        ck_assert_int_eq(frame_is_png(pp[0]), 1);
        ck_assert_int_eq(frame_read_info(pp[0], 0, &info, err, sizeof err), 0);
        ck_assert_int_eq(info.naxes[0], w);
        ck_assert_int_eq(info.naxes[1], h);
        ck_assert_int_eq(info.bitpix, bits);
        ck_assert_int_eq(info.nkeys, 5);
        ck_assert_int_eq((int)strlen(info.header), 5 * 80);
        fitsimg_info_release(&info);
        stack *s = stack_new(pp, (int)nz, 0, w, h, nz, 3);
        check_volume(s, ref, w, h, nz);
        stack_free(s);
        double reg[6];
        float regf[6];
        ck_assert_int_eq(frame_read_region(pp[2], 0, 0, 4, 5, 3, 2, reg, err, sizeof err), 0);
        ck_assert_int_eq(frame_read_region_f32(pp[2], 0, 0, 4, 5, 3, 2, regf, err, sizeof err), 0);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 3; i++) {
                double e = ref[(2 * h + 5 + j) * w + 4 + i];
                ck_assert(reg[j * 3 + i] == e);
                ck_assert(regf[j * 3 + i] == (float)e);
            }
        free(ref);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* frame_write_png puts y = 0 in the last PNG row, read back with plain libpng. */
START_TEST(test_png_write_orientation)
{
    char dir[128], path[256], err[256];
    tt_tmpdir_make(dir, sizeof dir, "stackw");
    snprintf(path, sizeof path, "%s/w.png", dir);
    unsigned short data[6 * 4];
    for (int i = 0; i < 24; i++)
        data[i] = (unsigned short)(i * 2000);
    ck_assert_int_eq(frame_write_png(path, data, 6, 4, 16, 1, err, sizeof err), 0);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    FILE *f = fopen(path, "rb");
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_read_info(png, info);
    ck_assert_int_eq(png_get_bit_depth(png, info), 16);
    unsigned char rows[4][12];
    for (int r = 0; r < 4; r++)
        png_read_row(png, rows[r], NULL);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++) {
            unsigned v = (unsigned)rows[r][2 * c] << 8 | rows[r][2 * c + 1];
            ck_assert_uint_eq(v, data[(3 - r) * 6 + c]);
        }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Tile-compressed FITS: a compressed cube goes through cfitsio, compressed frames are
 * decoded; both give cfitsio's values. */
START_TEST(test_compressed_fallback)
{
    char dir[128], path[256], cpath[300];
    tt_tmpdir_make(dir, sizeof dir, "stackc");
    snprintf(path, sizeof path, "%s/c.fits", dir);
    snprintf(cpath, sizeof cpath, "%s[compress R 10,10,1]", path);
    const long nx = 30, ny = 20, nz = 6;
    short *v = malloc(nx * ny * nz * sizeof(short));
    for (long i = 0; i < nx * ny * nz; i++)
        v[i] = (short)((i * 37) % 2000 - 1000);
    fitsfile *f = NULL;
    int st = 0;
    long naxes[3] = {nx, ny, nz};
    fits_create_file(&f, cpath, &st);
    fits_create_img(f, SHORT_IMG, 3, naxes, &st);
    fits_write_img(f, TSHORT, 1, nx * ny * nz, v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    double *ref = malloc(nx * ny * nz * sizeof(double));
    for (long i = 0; i < nx * ny * nz; i++)
        ref[i] = v[i];
    /* the compressed image is HDU 1 (0-based) */
    const char *pp[1] = {path};
    stack *s = stack_new(pp, 1, 1, nx, ny, nz, 2);
    check_volume(s, ref, nx, ny, nz);
    stack_free(s);
    /* the same file twice as a stack of one-plane frames is refused by shape at read */
    free(ref);
    free(v);
    unlink(path);
    rmdir(dir);
}
END_TEST

typedef struct thr_arg {
    stack *s;
    const double *ref;
    long nx, ny, nz;
    int bad;
} thr_arg;

static void *reader_thread(void *p)
{
    thr_arg *a = p;
    double out[64];
    char err[256];
    for (int it = 0; it < 200; it++) {
        long x = (it * 13) % a->nx, y = (it * 7) % a->ny;
        if (stack_read_series(a->s, x, y, 0, a->nz, out, err, sizeof err))
            a->bad++;
        for (long k = 0; k < a->nz; k++) {
            double e = a->ref[((size_t)k * a->ny + y) * a->nx + x];
            if (!((isnan(e) && isnan(out[k])) || e == out[k]))
                a->bad++;
        }
    }
    return NULL;
}

/* Several threads reading series of a stack through an LRU of two frames. */
START_TEST(test_threads)
{
    char dir[128];
    tt_tmpdir_make(dir, sizeof dir, "stackt");
    const long w = 16, h = 12, nz = 9;
    char paths[9][256];
    const char *pp[9];
    double *ref = malloc((size_t)(w * h * nz) * sizeof(double));
    for (long z = 0; z < nz; z++) {
        snprintf(paths[z], sizeof paths[z], "%s/t%ld.png", dir, z);
        pp[z] = paths[z];
        g_frame = z;
        write_png_plain(paths[z], w, h, 8, v8);
        for (long y = 0; y < h; y++)
            for (long x = 0; x < w; x++)
                ref[(z * h + y) * w + x] = v8(h - 1 - y, x);
    }
    stack *s = stack_new(pp, (int)nz, 0, w, h, nz, 2);
    thr_arg a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg){s, ref, w, h, nz, 0};
        pthread_create(&t[i], NULL, reader_thread, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
    }
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_int_le(st.open_now, 2);
    stack_free(s);
    free(ref);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A cut read in a task of a pool whose only worker runs that task (the server's request
 * on a busy pool): the task takes every frame itself instead of waiting for helpers. */
typedef struct nested_arg {
    stack *s;
    pool *p;
    double *out;
    long nx, nz;
    int rc;
    atomic_int done;
} nested_arg;

static void nested_task(void *arg)
{
    nested_arg *a = arg;
    char err[256];
    stack_cut_opts o = {a->p, POOL_INTERACTIVE, NULL};
    a->rc = stack_read_xz_on(a->s, &o, 2, 0, 0, a->nx, a->nz, a->out, err, sizeof err);
    atomic_store(&a->done, 1);
}

/* A stack of nz 8-bit PNG frames of w x h (v8) in a fresh directory, as p<z>.png, and
 * their values ref (w x h x nz, x fastest) computed from v8. */
typedef struct png_stack_fx {
    char dir[128];
    char (*paths)[256];
    const char **pp;
    double *ref;
    long w, h, nz;
} png_stack_fx;

static void png_stack_make(png_stack_fx *fx, const char *tag, long w, long h, long nz)
{
    tt_tmpdir_make(fx->dir, sizeof fx->dir, tag);
    fx->w = w;
    fx->h = h;
    fx->nz = nz;
    fx->paths = malloc((size_t)nz * sizeof *fx->paths);
    fx->pp = malloc((size_t)nz * sizeof *fx->pp);
    fx->ref = malloc((size_t)(w * h * nz) * sizeof(double));
    for (long z = 0; z < nz; z++) {
        snprintf(fx->paths[z], 256, "%s/p%03ld.png", fx->dir, z);
        fx->pp[z] = fx->paths[z];
        g_frame = z;
        write_png_plain(fx->paths[z], w, h, 8, v8);
        for (long y = 0; y < h; y++)
            for (long x = 0; x < w; x++)
                fx->ref[(z * h + y) * w + x] = v8(h - 1 - y, x);
    }
}

static void png_stack_done(png_stack_fx *fx)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fx->dir);
    ck_assert_int_eq(system(cmd), 0);
    free(fx->paths);
    free(fx->pp);
    free(fx->ref);
}

START_TEST(test_cut_in_pool_task)
{
    png_stack_fx fx;
    png_stack_make(&fx, "stackn", 21, 9, 30);
    double out[21 * 30];
    stack *s = stack_new(fx.pp, 30, 0, 21, 9, 30, 4);
    pool *p = pool_new(1, 16);
    nested_arg a = {s, p, out, 21, 30, -1, 0};
    ck_assert_int_eq(pool_submit(p, POOL_INTERACTIVE, nested_task, &a), 0);
    for (int i = 0; i < 10000 && !atomic_load(&a.done); i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&a.done), 1);
    ck_assert_int_eq(a.rc, 0);
    for (long k = 0; k < 30; k++)
        for (long i = 0; i < 21; i++)
            assert_same(out[k * 21 + i], fx.ref[(k * 9 + 2) * 21 + i], "xz", k * 21 + i);
    pool_free(p);
    stack_free(s);
    png_stack_done(&fx);
}
END_TEST

/* Truncates the file at `path` to half its size. */
static void truncate_half(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    ck_assert_int_eq(truncate(path, len / 2), 0);
}

/* A truncated frame fails every cut through it with the error of a single-frame read of
 * that frame, on the calling thread and on a pool alike; with two bad frames the lower
 * one is named, whichever thread got there first. */
START_TEST(test_truncated_frame_named)
{
    enum { W = 40, H = 30, NZ = 24 };
    png_stack_fx fx;
    png_stack_make(&fx, "stacke", W, H, NZ);
    const char **pp = fx.pp;
    double *buf = fx.ref, out[W * NZ];   /* the values are not needed: a scratch frame */
    truncate_half(fx.paths[17]);
    char want[256], err[256];
    int want_rc = frame_read_region(pp[17], 0, 0, 0, 0, W, H, buf, want, sizeof want);
    ck_assert_int_ne(want_rc, 0);
    ck_assert_ptr_nonnull(strstr(want, "p017.png"));
    pool *p = pool_new(3, 64);
    stack_cut_opts par = {p, POOL_INTERACTIVE, NULL};
    for (int round = 0; round < 2; round++) {
        for (int on = 0; on < 2; on++) {
            const stack_cut_opts *o = on ? &par : NULL;
            stack *s = stack_new(pp, NZ, 0, W, H, NZ, 4);
            err[0] = 0;
            ck_assert_int_eq(stack_read_xz_on(s, o, 3, 0, 0, W, NZ, out, err, sizeof err), want_rc);
            ck_assert_str_eq(err, want);
            err[0] = 0;
            ck_assert_int_eq(stack_read_yz_on(s, o, 5, 0, 0, H, NZ, out, err, sizeof err), want_rc);
            ck_assert_str_eq(err, want);
            err[0] = 0;
            ck_assert_int_eq(stack_read_series_on(s, o, 1, 1, 0, NZ, out, err, sizeof err),
                             want_rc);
            ck_assert_str_eq(err, want);
            /* a cut that stops before the bad frame reads */
            ck_assert_int_eq(stack_read_series_on(s, o, 1, 1, 0, 17, out, err, sizeof err), 0);
            stack_free(s);
        }
        if (round == 0)   /* a second, later bad frame: the error still names frame 17 */
            truncate_half(fx.paths[20]);
    }
    /* a bad frame before 17: the error now names it */
    truncate_half(fx.paths[4]);
    ck_assert_int_eq(frame_read_region(pp[4], 0, 0, 0, 0, W, H, buf, want, sizeof want), want_rc);
    stack *s = stack_new(pp, NZ, 0, W, H, NZ, 4);
    ck_assert_int_eq(stack_read_xz_on(s, &par, 3, 0, 0, W, NZ, out, err, sizeof err), want_rc);
    ck_assert_str_eq(err, want);
    ck_assert_ptr_nonnull(strstr(err, "p004.png"));
    stack_free(s);
    pool_free(p);
    png_stack_done(&fx);
}
END_TEST

static unsigned v_zero(long r, long c)
{
    (void)r;
    (void)c;
    return 0;
}

/* Replaces frame z of fx with a w x h PNG of `bits` (v16 or v8 values), renamed over it. */
static void png_replace(png_stack_fx *fx, long z, long w, long h, int bits,
                        unsigned (*v)(long, long))
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/new.png", fx->dir);
    g_frame = z;
    write_png_plain(tmp, w, h, bits, v);
    ck_assert_int_eq(rename(tmp, fx->paths[z]), 0);
}

/* A stack of 8-bit PNG frames pinned to BITPIX 8: a frame replaced by a 16-bit one is
 * refused on every read through it, naming the frame and both depths (its 16-bit values
 * were read as the 8-bit stack's before: 65400 in a BITPIX 8 volume), and a frame replaced
 * by a much larger PNG is refused from its header, never decoded; the other frames read. */
START_TEST(test_png_frame_depth_and_size_pinned)
{
    enum { W = 12, H = 10, NZ = 4 };
    png_stack_fx fx;
    png_stack_make(&fx, "stackd", W, H, NZ);
    stack *s = stack_new(fx.pp, NZ, 0, W, H, NZ, 4);
    stack_expect_bitpix(s, 8);
    double out[W * H], series[NZ];
    char err[512];
    ck_assert_int_eq(stack_read_region(s, 1, 0, 0, W, H, out, err, sizeof err), 0);
    png_replace(&fx, 1, W, H, 16, v16);
    err[0] = '\0';
    ck_assert_int_eq(stack_read_region(s, 1, 0, 0, W, H, out, err, sizeof err), TESS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "p001.png is now BITPIX 16, not the stack's BITPIX 8"));
    err[0] = '\0';
    ck_assert_int_eq(stack_read_series(s, 2, 3, 0, NZ, series, err, sizeof err), TESS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "p001.png is now BITPIX 16"));
    ck_assert_int_eq(stack_read_region(s, 2, 0, 0, W, H, out, err, sizeof err), 0);
    for (long k = 0; k < W * H; k++)
        assert_same(out[k], fx.ref[2 * W * H + k], "frame 2", k);

    /* 4000 x 4000 zeros: 16 MB decoded, a few KB stored */
    png_replace(&fx, 3, 4000, 4000, 8, v_zero);
    unsigned long long before = pngframe_decodes();
    err[0] = '\0';
    ck_assert_int_eq(stack_read_region(s, 3, 0, 0, W, H, out, err, sizeof err), TESS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "p003.png is now 4000 x 4000, not the 12 x 10"));
    ck_assert_uint_eq(pngframe_decodes(), before);
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_uint_le(st.decoded_peak, (size_t)(W * H) * NZ);
    stack_free(s);
    png_stack_done(&fx);
}
END_TEST

/* A colour PNG is refused with TESS_EINVAL. */
START_TEST(test_colour_png_refused)
{
    char dir[128], path[256], err[256];
    tt_tmpdir_make(dir, sizeof dir, "stackrgb");
    snprintf(path, sizeof path, "%s/rgb.png", dir);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = 4;
    im.height = 4;
    im.format = PNG_FORMAT_RGB;
    unsigned char px[48] = {0};
    ck_assert(png_image_write_to_file(&im, path, 0, px, 0, NULL));
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "greyscale"));
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stack");
    TCase *tc = tcase_create("stack");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_cube_mmap_equals_cfitsio);
    tcase_add_test(tc, test_scaled_integers_equal_cfitsio);
    tcase_add_test(tc, test_blanks);
    tcase_add_test(tc, test_m13_stack_lru);
    tcase_add_test(tc, test_png_frames_orientation);
    tcase_add_test(tc, test_png_write_orientation);
    tcase_add_test(tc, test_compressed_fallback);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_cut_in_pool_task);
    tcase_add_test(tc, test_truncated_frame_named);
    tcase_add_test(tc, test_colour_png_refused);
    tcase_add_test(tc, test_png_frame_depth_and_size_pinned);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
