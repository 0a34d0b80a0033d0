/* Tests of stack_zreduce (engine/image/stack.h): the integer mode against the double mode on
 * generated uint8 / int16 / unsigned-16 (BZERO 32768) FITS stacks, PNG stacks and a
 * cube, the switch to doubles at a frame with BLANK, float frames with NaN, split and
 * merged ranges, partials saved and loaded, stack_reduce_plane (one value a plane), and
 * every result against numpy's nansum / nanmean / nanmin / nanmax / nanstd
 * (/usr/bin/python3 with astropy); chunks of decoded frames (PNG, compressed FITS) cut by
 * their bound of bytes held, against plain loops.  And engine/image/zreduce.h: op and axis
 * names, the z-ranges, zreduce_image against the ranges merged in order (as a reduce job
 * merges them) and numpy, zreduce_planes, the card classes and the result's header. */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/pool.h"
#include "engine/image/stack.h"
#include "engine/image/zreduce.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#define NX 97          /* 97 x 61 = 5917 pixels: more than one 4096-pixel block */
#define NY 61
#define NZ 37          /* not a multiple of the 16-frame read group */
#define NPIX (NX * NY)

static const char *const opname[] = {"mean", "sum", "min", "max", "std"};

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* Kinds of generated volumes. */
enum { G_U8, G_I16, G_U16Z, G_U8_BLANK, G_F32_NAN, G_PNG8, G_PNG16, G_CUBE16 };

/* Writes frame z (or the cube) of kind g into dir; returns the path list count. */
static void write_fits_frame(const char *path, int g, long z, long nz)
{
    fitsfile *f;
    int st = 0;
    char fn[600];
    snprintf(fn, sizeof fn, "!%s", path);
    fits_create_file(&f, fn, &st);
    int bitpix = g == G_U8 || g == G_U8_BLANK ? BYTE_IMG : g == G_F32_NAN ? FLOAT_IMG : SHORT_IMG;
    long naxes[3] = {NX, NY, nz};
    fits_create_img(f, bitpix, nz > 1 ? 3 : 2, naxes, &st);
    if (g == G_U16Z || g == G_CUBE16) {
        double bz = 32768;
        fits_write_key(f, TDOUBLE, "BZERO", &bz, NULL, &st);
        fits_set_bscale(f, 1.0, 32768.0, &st);
    }
    if (g == G_U8_BLANK && z == 20) {
        int blank = 7;
        fits_write_key(f, TINT, "BLANK", &blank, NULL, &st);
    }
    long n = (long)NPIX * nz;
    double *v = malloc(sizeof(double) * (size_t)n);
    for (long i = 0; i < n; i++) {
        switch (g) {
        case G_U8:
        case G_U8_BLANK:
            v[i] = (double)(rnd() % 256);
            if (g == G_U8_BLANK && z == 20 && i % 5 == 0)
                v[i] = 7;   /* blanks */
            break;
        case G_I16:
            v[i] = (double)((int)(rnd() % 65536) - 32768);
            break;
        case G_U16Z:
        case G_CUBE16:
            v[i] = (double)(rnd() % 65536);
            break;
        case G_F32_NAN:
            v[i] = z == 3 || i % 11 == 0 ? NAN : (double)(rnd() % 100000) / 7.0 - 3000.0;
            break;
        }
    }
    if (g == G_F32_NAN) {
        float *fv = malloc(sizeof(float) * (size_t)n);
        for (long i = 0; i < n; i++)
            fv[i] = (float)v[i];
        fits_write_img(f, TFLOAT, 1, n, fv, &st);
        free(fv);
    } else {
        fits_write_img(f, TDOUBLE, 1, n, v, &st);
    }
    fits_close_file(f, &st);
    ck_assert_msg(st == 0, "cannot write %s: cfitsio %d", path, st);
    free(v);
}

typedef struct vol {
    char dir[128];
    char *paths[NZ];
    int npaths;
    stack *s;
} vol;

static void vol_make(vol *v, int g)
{
    tt_tmpdir_make(v->dir, sizeof v->dir, "zreduce");
    if (g == G_CUBE16) {
        v->npaths = 1;
        v->paths[0] = malloc(300);
        snprintf(v->paths[0], 300, "%s/cube.fits", v->dir);
        write_fits_frame(v->paths[0], g, 0, NZ);
    } else {
        v->npaths = NZ;
        for (long z = 0; z < NZ; z++) {
            v->paths[z] = malloc(300);
            char err[256];
            if (g == G_PNG8 || g == G_PNG16) {
                snprintf(v->paths[z], 300, "%s/f%03ld.png", v->dir, z);
                unsigned short *d = malloc(sizeof(unsigned short) * NPIX);
                for (long i = 0; i < NPIX; i++)
                    d[i] = (unsigned short)(rnd() % (g == G_PNG8 ? 256 : 65536));
                ck_assert_int_eq(frame_write_png(v->paths[z], d, NX, NY, g == G_PNG8 ? 8 : 16, 1,
                                                 err, sizeof err), 0);
                free(d);
            } else {
                snprintf(v->paths[z], 300, "%s/f%03ld.fits", v->dir, z);
                write_fits_frame(v->paths[z], g, z, 1);
            }
        }
    }
    v->s = stack_new((const char *const *)v->paths, v->npaths, 0, NX, NY, NZ, 8);
    ck_assert_ptr_nonnull(v->s);
}

static void vol_free(vol *v)
{
    stack_free(v->s);
    for (int i = 0; i < v->npaths; i++) {
        unlink(v->paths[i]);
        free(v->paths[i]);
    }
    rmdir(v->dir);
}

/* numpy's five reductions (opname order) of the volume's files along z, 5 x NPIX
 * doubles, then over each plane, 5 x NZ doubles
 * (astropy gives physical values; integer BLANK pixels are set to NaN by hand). */
static double *numpy_reduce(const vol *v)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import sys, glob, numpy as np, warnings\n"
             "from astropy.io import fits\n"
             "warnings.simplefilter(\"ignore\")\n"
             "fs = sorted(glob.glob(\"%s/*\"))\n"
             "def rd(f):\n"
             "    if f.endswith(\".png\"):\n"
             "        from skimage.io import imread\n"
             "        return np.flipud(imread(f)).astype(np.float64)[None]\n"
             "    h = fits.open(f)[0]\n"
             "    d = h.data.astype(np.float64)\n"
             "    if \"BLANK\" in h.header:\n"
             "        raw = fits.open(f, do_not_scale_image_data=True)[0].data\n"
             "        d[raw == h.header[\"BLANK\"]] = np.nan\n"
             "    return d if d.ndim == 3 else d[None]\n"
             "a = np.concatenate([rd(f) for f in fs])\n"
             "for ax in (0, (1, 2)):\n"
             "    for op in (\"mean\", \"sum\", \"min\", \"max\", \"std\"):\n"
             "        r = getattr(np, \"nan\" + op)(a, axis=ax)\n"
             "        sys.stdout.buffer.write(r.astype(\"<f8\").tobytes())\n' 2>/dev/null",
             v->dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    double *r = malloc(sizeof(double) * 5 * (NPIX + NZ));
    size_t got = fread(r, sizeof(double), 5 * (NPIX + NZ), p);
    pclose(p);
    ck_assert_msg(got == 5 * (NPIX + NZ), "numpy gave %zu values", got);
    return r;
}

static double *run(vol *v, int op, long z0, long z1, int flags, int *intmode)
{
    char err[256];
    stack_zpart *p = NULL;
    int rc = stack_zreduce(v->s, (stack_zop)op, z0, z1, flags, NULL, &p, err, sizeof err);
    ck_assert_msg(rc == 0, "zreduce: %d %s", rc, err);
    double *out = malloc(sizeof(double) * NPIX);
    int im = stack_zpart_result(p, out);
    if (intmode)
        *intmode = im;
    stack_zpart_free(p);
    return out;
}

/* Merges the partial of the next planes into *all (taking it as *all when first). */
static void merge_next(stack_zpart **all, stack_zpart *p)
{
    if (!*all) {
        *all = p;
        return;
    }
    ck_assert_int_eq(stack_zpart_merge(*all, p), 0);
    stack_zpart_free(p);
}

/* a == b exactly (tol 0), or within tol relative (NaN equals NaN). */
static void compare(const double *a, const double *b, double tol, const char *what, int op)
{
    for (long i = 0; i < NPIX; i++) {
        if (isnan(a[i]) && isnan(b[i]))
            continue;
        double d = fabs(a[i] - b[i]), m = fabs(b[i]) > 1 ? fabs(b[i]) : 1;
        if (tol == 0 ? !(a[i] == b[i]) : !(d <= tol * m))
            ck_abort_msg("%s %s[%ld]: %.17g vs %.17g", what, opname[op], i, a[i], b[i]);
    }
}

/* Integer mode (expected: `want_int`) == double mode exactly for mean/sum/min/max and to
 * 1e-14 for std; both against numpy (exact for integer data's sum/min/max/mean). */
static void check_kind(int g, int want_int)
{
    vol v;
    vol_make(&v, g);
    double *refs = numpy_reduce(&v);
    for (int op = 0; op < 5; op++) {
        int im = -1, id = -1;
        double *fast = run(&v, op, 0, NZ, 0, &im);
        double *dbl = run(&v, op, 0, NZ, STACK_ZR_FORCE_DOUBLE, &id);
        ck_assert_int_eq(im, want_int);
        ck_assert_int_eq(id, 0);
        compare(fast, dbl, op == 4 ? 1e-14 : 0, "fast vs double", op);
        double tol = op == 4 || g == G_F32_NAN ? 1e-12 : 0;
        compare(fast, refs + (size_t)op * NPIX, tol, "fast vs numpy", op);
        /* split in three ranges (not on chunk bounds), merged in order, one saved and
         * loaded: the same as one range */
        char err[256], path[300];
        stack_zpart *a, *b, *c, *bl;
        ck_assert_int_eq(stack_zreduce(v.s, (stack_zop)op, 0, 5, 0, NULL, &a, err, sizeof err), 0);
        ck_assert_int_eq(stack_zreduce(v.s, (stack_zop)op, 5, 23, 0, NULL, &b, err, sizeof err), 0);
        ck_assert_int_eq(stack_zreduce(v.s, (stack_zop)op, 23, NZ, 0, NULL, &c, err, sizeof err), 0);
        snprintf(path, sizeof path, "%s/part.bin", v.dir);
        ck_assert_int_eq(stack_zpart_save(b, path, err, sizeof err), 0);
        ck_assert_int_eq(stack_zpart_load(path, &bl, err, sizeof err), 0);
        unlink(path);
        ck_assert_int_eq(stack_zpart_merge(a, bl), 0);
        ck_assert_int_eq(stack_zpart_merge(a, c), 0);
        double *merged = malloc(sizeof(double) * NPIX);
        stack_zpart_result(a, merged);
        compare(merged, fast, op == 4 || g == G_F32_NAN || g == G_U8_BLANK ? 1e-13 : 0, "merged",
                op);
        stack_zpart_free(a);
        stack_zpart_free(b);
        stack_zpart_free(bl);
        stack_zpart_free(c);
        free(merged);
        free(fast);
        free(dbl);
        /* each plane over its pixels: integers where the plane allows, else refused (1) */
        const double *pref = refs + (size_t)5 * NPIX + (size_t)op * NZ;
        for (long z = 0; z < NZ; z++) {
            double val = -1;
            int rc = stack_reduce_plane(v.s, z, (stack_zop)op, &val, err, sizeof err);
            int integer = g != G_F32_NAN && !(g == G_U8_BLANK && z == 20);
            ck_assert_int_eq(rc, integer ? 0 : 1);
            if (!integer)
                continue;
            double m = fabs(pref[z]) > 1 ? fabs(pref[z]) : 1;
            if (op == 4 ? !(fabs(val - pref[z]) <= 1e-12 * m) : !(val == pref[z]))
                ck_abort_msg("plane %ld %s: %.17g vs numpy %.17g", z, opname[op], val, pref[z]);
        }
    }
    free(refs);
    vol_free(&v);
}

START_TEST(test_u8) { check_kind(G_U8, 1); }
END_TEST
START_TEST(test_i16) { check_kind(G_I16, 1); }
END_TEST
START_TEST(test_u16_bzero) { check_kind(G_U16Z, 1); }
END_TEST
START_TEST(test_cube_u16) { check_kind(G_CUBE16, 1); }
END_TEST
START_TEST(test_png8) { check_kind(G_PNG8, 1); }
END_TEST
START_TEST(test_png16) { check_kind(G_PNG16, 1); }
END_TEST
/* frame 20 has BLANK: the range switches to doubles there (frames 0..15 were integer) */
START_TEST(test_u8_blank_frame) { check_kind(G_U8_BLANK, 0); }
END_TEST
/* float frames: a frame all NaN, pixels NaN in every frame (mean/min/max/std NaN, sum 0) */
START_TEST(test_f32_nan) { check_kind(G_F32_NAN, 0); }
END_TEST

/* Frames larger than one read piece (65536 pixels) and ranges longer than one chunk
 * (256 frames) or one group (16 frames): 300 uint8 frames of 300 x 230, and a cube of
 * 40 int16 planes of that size (whose planes share one descriptor).  The integer mode
 * equals the double mode; ranges as a reduce job cuts them (125 frames), saved, loaded
 * and merged, equal the whole range. */
#define BX 300
#define BY 230
#define BPIX (BX * BY)
static void check_big(int cube)
{
    const long nz = cube ? 40 : 300;
    char dir[128], err[256];
    tt_tmpdir_make(dir, sizeof dir, "zreduce-big");
    char **paths = calloc((size_t)nz, sizeof(char *));
    int npaths = cube ? 1 : (int)nz;
    unsigned char *u8 = malloc(BPIX);
    short *i16 = malloc(sizeof(short) * BPIX * (size_t)nz);
    for (int f = 0; f < npaths; f++) {
        paths[f] = malloc(300);
        snprintf(paths[f], 300, "%s/%s%03d.fits", dir, cube ? "cube" : "f", f);
        char fn[320];
        snprintf(fn, sizeof fn, "!%s", paths[f]);
        fitsfile *ff;
        int st = 0;
        long naxes[3] = {BX, BY, nz};
        fits_create_file(&ff, fn, &st);
        fits_create_img(ff, cube ? SHORT_IMG : BYTE_IMG, cube ? 3 : 2, naxes, &st);
        if (cube) {
            for (long i = 0; i < BPIX * nz; i++)
                i16[i] = (short)((int)(rnd() % 65536) - 32768);
            fits_write_img(ff, TSHORT, 1, BPIX * nz, i16, &st);
        } else {
            for (long i = 0; i < BPIX; i++)
                u8[i] = (unsigned char)(rnd() % 256);
            fits_write_img(ff, TBYTE, 1, BPIX, u8, &st);
        }
        fits_close_file(ff, &st);
        ck_assert_msg(st == 0, "cannot write %s: cfitsio %d", paths[f], st);
    }
    stack *s = stack_new((const char *const *)paths, npaths, 0, BX, BY, nz, 8);
    ck_assert_ptr_nonnull(s);
    double *a = malloc(sizeof(double) * BPIX), *b = malloc(sizeof(double) * BPIX);
    for (int op = 0; op < 5; op++) {
        stack_zpart *p, *q;
        ck_assert_int_eq(stack_zreduce(s, (stack_zop)op, 0, nz, 0, NULL, &p, err, sizeof err), 0);
        ck_assert_int_eq(stack_zreduce(s, (stack_zop)op, 0, nz, STACK_ZR_FORCE_DOUBLE, NULL, &q,
                                       err, sizeof err), 0);
        ck_assert_int_eq(stack_zpart_result(p, a), 1);
        ck_assert_int_eq(stack_zpart_result(q, b), 0);
        for (long i = 0; i < BPIX; i++) {
            double m = fabs(b[i]) > 1 ? fabs(b[i]) : 1;
            if (op == 4 ? !(fabs(a[i] - b[i]) <= 1e-14 * m) : !(a[i] == b[i]))
                ck_abort_msg("%s %s[%ld]: %.17g vs double %.17g", cube ? "cube" : "stack",
                             opname[op], i, a[i], b[i]);
        }
        stack_zpart_free(p);
        stack_zpart_free(q);
        /* blocks of 125 planes, each saved and loaded, merged in order */
        stack_zpart *all = NULL;
        for (long z0 = 0; z0 < nz; z0 += 125) {
            long z1 = z0 + 125 < nz ? z0 + 125 : nz;
            char path[300];
            snprintf(path, sizeof path, "%s/part.bin", dir);
            ck_assert_int_eq(stack_zreduce(s, (stack_zop)op, z0, z1, 0, NULL, &p, err, sizeof err), 0);
            ck_assert_int_eq(stack_zpart_save(p, path, err, sizeof err), 0);
            stack_zpart_free(p);
            ck_assert_int_eq(stack_zpart_load(path, &p, err, sizeof err), 0);
            unlink(path);
            merge_next(&all, p);
        }
        stack_zpart_result(all, b);
        stack_zpart_free(all);
        for (long i = 0; i < BPIX; i++)
            if (!(a[i] == b[i]))
                ck_abort_msg("blocks %s[%ld]: %.17g vs %.17g", opname[op], i, b[i], a[i]);
    }
    stack_free(s);
    for (int f = 0; f < npaths; f++) {
        unlink(paths[f]);
        free(paths[f]);
    }
    rmdir(dir);
    free(paths);
    free(u8);
    free(i16);
    free(a);
    free(b);
}

START_TEST(test_big_u8) { check_big(0); }
END_TEST
START_TEST(test_big_cube_i16) { check_big(1); }
END_TEST

/* ---- the bound of decoded bytes a chunk holds (ZR_CHUNK_BYTES) ----
 * A chunk of up to 256 frames holds them all while folding; decoded frames (PNG,
 * compressed FITS) are heap copies, so the chunk ends early once those it holds pass the
 * bound.  Small frames and a bound of 5.5 frames (stack_set_zr_chunk_bytes) stand for
 * large frames and the 16 MB bound: a default chunk would hold 256 frames, 46 times it. */
#define CX 64
#define CY 48
#define CPIX (CX * CY)
#define C_PNG8 8
#define C_PNG16 16
#define C_FITSZ 0      /* tile-compressed FITS frames (decoded to doubles: 8 bytes a pixel) */

typedef struct cvol {
    char dir[128];
    char **paths;
    long nz;
    uint16_t *v;       /* nz x CPIX values: v[z * CPIX + y * CX + x] */
    stack *s;
} cvol;

static void cvol_make(cvol *c, int kind, long nz)
{
    char err[256];
    tt_tmpdir_make(c->dir, sizeof c->dir, "zrbound");
    c->nz = nz;
    c->paths = calloc((size_t)nz, sizeof(char *));
    c->v = malloc(sizeof(uint16_t) * CPIX * (size_t)nz);
    unsigned maxv = kind == C_PNG8 ? 255 : 65535;
    for (long z = 0; z < nz; z++) {
        uint16_t *d = c->v + (size_t)z * CPIX;
        for (long i = 0; i < CPIX; i++)
            d[i] = (uint16_t)(rnd() % (maxv + 1));
        d[0] = (uint16_t)maxv;   /* the largest sum a chunk can make (uint16 for 8 bits) */
        d[1] = 0;
        c->paths[z] = malloc(300);
        if (kind == C_FITSZ) {
            snprintf(c->paths[z], 300, "%s/f%03ld.fits", c->dir, z);
            char fn[320];
            snprintf(fn, sizeof fn, "!%s[compress R]", c->paths[z]);
            fitsfile *ff;
            int st = 0;
            long naxes[2] = {CX, CY};
            fits_create_file(&ff, fn, &st);
            fits_create_img(ff, USHORT_IMG, 2, naxes, &st);
            fits_write_img(ff, TUSHORT, 1, CPIX, d, &st);
            fits_close_file(ff, &st);
            ck_assert_msg(st == 0, "cannot write %s: cfitsio %d", c->paths[z], st);
        } else {
            snprintf(c->paths[z], 300, "%s/f%03ld.png", c->dir, z);
            ck_assert_int_eq(frame_write_png(c->paths[z], d, CX, CY, kind, 1, err, sizeof err), 0);
        }
    }
    /* compressed frames are HDU 1 (the primary HDU is empty) */
    c->s = stack_new((const char *const *)c->paths, (int)nz, kind == C_FITSZ ? 1 : 0, CX, CY,
                     nz, 4);
    ck_assert_ptr_nonnull(c->s);
}

static void cvol_free(cvol *c)
{
    stack_free(c->s);
    for (long z = 0; z < c->nz; z++) {
        unlink(c->paths[z]);
        free(c->paths[z]);
    }
    free(c->paths);
    free(c->v);
    rmdir(c->dir);
}

/* op over planes [z0, z1) of the values written, plain loops: sum, min, max exact, mean =
 * sum / n, std two-pass in long double. */
static void plain_reduce(const cvol *c, int op, long z0, long z1, double *out)
{
    double n = (double)(z1 - z0);
    for (long i = 0; i < CPIX; i++) {
        long long sum = 0;
        int mn = 1 << 30, mx = -1;
        for (long z = z0; z < z1; z++) {
            int x = c->v[z * CPIX + i];
            sum += x;
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
        }
        long double mean = (long double)sum / (long double)n, m2 = 0;
        for (long z = z0; op == 4 && z < z1; z++) {
            long double d = (long double)c->v[z * CPIX + i] - mean;
            m2 += d * d;
        }
        out[i] = op == 0 ? (double)sum / n : op == 1 ? (double)sum : op == 2 ? mn
                 : op == 3 ? mx : (double)sqrtl(m2 / (long double)n);
    }
}

/* Every op over each range, against plain_reduce: exact, std to 1e-12. */
static void check_ranges(cvol *c, const long (*rg)[2], int nrg, int flags, int want_int)
{
    char err[256];
    double *got = malloc(sizeof(double) * CPIX), *ref = malloc(sizeof(double) * CPIX);
    for (int r = 0; r < nrg; r++) {
        for (int op = 0; op < 5; op++) {
            stack_zpart *p = NULL;
            int rc = stack_zreduce(c->s, (stack_zop)op, rg[r][0], rg[r][1], flags, NULL, &p, err,
                                   sizeof err);
            ck_assert_msg(rc == 0, "zreduce %ld..%ld: %d %s", rg[r][0], rg[r][1], rc, err);
            ck_assert_int_eq(stack_zpart_result(p, got), want_int);
            stack_zpart_free(p);
            plain_reduce(c, op, rg[r][0], rg[r][1], ref);
            for (long i = 0; i < CPIX; i++) {
                double m = fabs(ref[i]) > 1 ? fabs(ref[i]) : 1;
                if (op == 4 ? !(fabs(got[i] - ref[i]) <= 1e-12 * m) : !(got[i] == ref[i]))
                    ck_abort_msg("planes %ld..%ld %s[%ld]: %.17g, plain loops %.17g", rg[r][0],
                                 rg[r][1], opname[op], i, got[i], ref[i]);
            }
        }
    }
    free(got);
    free(ref);
}

/* Ranges over the 6-frame chunks of a bound of 5.5 frames: longer than ZR_CHUNK (256)
 * frames, exactly one chunk (8-bit sum / mean: its uint16 sums kept as the partial's),
 * one frame past a chunk (must not be taken for one chunk), 257 frames, one frame, the
 * last frames (a short last chunk). */
static void check_bound(int kind, long nz, int flags)
{
    cvol c;
    cvol_make(&c, kind, nz);
    const size_t fb = (size_t)CPIX * (kind == C_PNG8 ? 1 : kind == C_PNG16 ? 2 : 8);
    const size_t bound = 5 * fb + fb / 2;
    stack_set_zr_chunk_bytes(c.s, bound);
    const long rg[][2] = {{0, nz}, {0, 6}, {0, 7}, {nz - 257 > 0 ? nz - 257 : 1, nz}, {7, 8},
                          {nz - 13, nz}};
    int want_int = kind != C_FITSZ && !(flags & STACK_ZR_FORCE_DOUBLE);
    check_ranges(&c, rg, (int)(sizeof rg / sizeof rg[0]), flags, want_int);

    stack_stats st;
    stack_get_stats(c.s, &st);
    /* a chunk took frames until it held the bound: 6 frames, never more */
    ck_assert_uint_eq(st.zr_held_peak, 6 * fb);
    ck_assert_uint_le(st.zr_held_peak, bound + fb);
    /* in memory at once: the LRU's 4 frames (5 while one is opened), the chunk's frames
     * dropped from it but held, nothing else */
    ck_assert_uint_le(st.decoded_peak, (4 + 1) * fb + bound + fb);
    ck_assert_uint_ge(st.decoded_peak, 6 * fb);
    /* released: only the LRU's frames stay decoded */
    ck_assert_int_le(st.open_now, 4);
    ck_assert_uint_eq(st.decoded_now, (size_t)st.open_now * fb);

    if (nz > 256) {
        /* the default bound (16 MB) would let a chunk take its 256 frames here; the
         * bound in frames (ZR_HOLD_FRAMES, 16) stops it at 16 of these small ones */
        stack_set_zr_chunk_bytes(c.s, 0);
        const long all[][2] = {{0, nz}, {0, 256}};
        check_ranges(&c, all, 2, flags, want_int);
        stack_get_stats(c.s, &st);
        ck_assert_uint_eq(st.zr_held_peak, 16 * fb);
        ck_assert_uint_eq(st.decoded_now, (size_t)st.open_now * fb);
    }
    cvol_free(&c);
}

START_TEST(test_bound_png16) { check_bound(C_PNG16, 300, 0); }
END_TEST
START_TEST(test_bound_png8) { check_bound(C_PNG8, 300, 0); }
END_TEST
START_TEST(test_bound_png16_double) { check_bound(C_PNG16, 300, STACK_ZR_FORCE_DOUBLE); }
END_TEST
START_TEST(test_bound_fits_compressed) { check_bound(C_FITSZ, 40, 0); }
END_TEST

/* Partials of ranges cut into bounded chunks, saved, loaded and merged (the reduce job's
 * blocks): the chunks of a block go on in one run of uint16 sums up to 256 8-bit frames
 * (47 chunks of a 256-frame block), a 257th frame moves them into 64-bit sums first; all
 * merge into the whole range's sums, equal to plain loops' (std within 1e-12). */
START_TEST(test_bound_blocks_merge)
{
    cvol c;
    const long nz = 550;
    cvol_make(&c, C_PNG8, nz);
    stack_set_zr_chunk_bytes(c.s, 5 * CPIX + CPIX / 2);
    char err[256], path[300];
    snprintf(path, sizeof path, "%s/part.bin", c.dir);
    double *got = malloc(sizeof(double) * CPIX), *ref = malloc(sizeof(double) * CPIX);
    /* one chunk, three chunks, 256 frames in 47 chunks, three chunks, 257 frames, one */
    const long cut[] = {0, 6, 19, 275, 290, 547, 550};
    for (int op = 0; op < 5; op++) {
        stack_zpart *all = NULL, *p = NULL;
        for (int b = 0; b + 1 < (int)(sizeof cut / sizeof cut[0]); b++) {
            ck_assert_int_eq(stack_zreduce(c.s, (stack_zop)op, cut[b], cut[b + 1], 0, NULL, &p,
                                           err, sizeof err), 0);
            ck_assert_int_eq(stack_zpart_save(p, path, err, sizeof err), 0);
            stack_zpart_free(p);
            ck_assert_int_eq(stack_zpart_load(path, &p, err, sizeof err), 0);
            unlink(path);
            if (!all) {
                all = p;
            } else {
                ck_assert_int_eq(stack_zpart_merge(all, p), 0);
                stack_zpart_free(p);
            }
        }
        ck_assert_int_eq(stack_zpart_result(all, got), 1);
        stack_zpart_free(all);
        plain_reduce(&c, op, 0, nz, ref);
        for (long i = 0; i < CPIX; i++) {
            double m = fabs(ref[i]) > 1 ? fabs(ref[i]) : 1;
            if (op == 4 ? !(fabs(got[i] - ref[i]) <= 1e-12 * m) : !(got[i] == ref[i]))
                ck_abort_msg("merged %s[%ld]: %.17g, plain loops %.17g", opname[op], i, got[i],
                             ref[i]);
        }
    }
    free(got);
    free(ref);
    cvol_free(&c);
}
END_TEST

START_TEST(test_errors)
{
    vol v;
    vol_make(&v, G_U8);
    char err[256];
    stack_zpart *p = NULL, *q = NULL;
    ck_assert_int_eq(stack_zreduce(v.s, STACK_ZOP_SUM, 0, NZ + 1, 0, NULL, &p, err, sizeof err),
                     TESS_ERANGE);
    ck_assert_int_eq(stack_zreduce(v.s, STACK_ZOP_SUM, 3, 3, 0, NULL, &p, err, sizeof err),
                     TESS_ERANGE);
    static const volatile int cancel = 1;
    ck_assert_int_eq(stack_zreduce(v.s, STACK_ZOP_SUM, 0, NZ, 0, &cancel, &p, err, sizeof err),
                     TESS_ECANCELED);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(stack_zreduce(v.s, STACK_ZOP_SUM, 0, 2, 0, NULL, &p, err, sizeof err), 0);
    ck_assert_int_eq(stack_zreduce(v.s, STACK_ZOP_MAX, 0, 2, 0, NULL, &q, err, sizeof err), 0);
    ck_assert_int_eq(stack_zpart_merge(p, q), TESS_EINVAL);
    char path[300];
    snprintf(path, sizeof path, "%s/f000.fits", v.dir);
    stack_zpart *bad = NULL;
    ck_assert_int_eq(stack_zpart_load(path, &bad, err, sizeof err), TESS_EINVAL);
    stack_zpart_free(p);
    stack_zpart_free(q);
    vol_free(&v);
}
END_TEST

/* ---- zreduce.h: names, ranges, the image and plane values, the header ------------------ */

START_TEST(test_names)
{
    for (int op = 0; op < 5; op++) {
        stack_zop got = STACK_ZOP_STD;
        ck_assert_str_eq(zreduce_op_name((stack_zop)op), opname[op]);
        ck_assert_int_eq(zreduce_op_parse(opname[op], &got), 0);
        ck_assert_int_eq(got, op);
    }
    stack_zop op = STACK_ZOP_SUM;
    static const char *const bad[] = {"median", "MEAN", "mean ", "", NULL};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(zreduce_op_parse(bad[i], &op), TESS_EINVAL);
    ck_assert_int_eq(op, STACK_ZOP_SUM);
    ck_assert_str_eq(zreduce_op_name((stack_zop)5), "?");
    zreduce_axis a = ZREDUCE_AXIS_XY;
    ck_assert_int_eq(zreduce_axis_parse("z", &a), 0);
    ck_assert_int_eq(a, ZREDUCE_AXIS_Z);
    ck_assert_int_eq(zreduce_axis_parse("xy", &a), 0);
    ck_assert_int_eq(a, ZREDUCE_AXIS_XY);
    ck_assert_int_eq(zreduce_axis_parse("x", &a), TESS_EINVAL);
    ck_assert_int_eq(zreduce_axis_parse(NULL, &a), TESS_EINVAL);
    ck_assert_int_eq(a, ZREDUCE_AXIS_XY);
    ck_assert_str_eq(zreduce_axis_name(ZREDUCE_AXIS_Z), "z");
    ck_assert_str_eq(zreduce_axis_name(ZREDUCE_AXIS_XY), "xy");
}
END_TEST

/* The ranges cover 0..nz-1 in order, none empty, at most 16, all but the last of
 * ceil(nz / 16) planes. */
START_TEST(test_ranges)
{
    for (long nz = 1; nz <= 1000; nz++) {
        long n = zreduce_nranges(nz), per = (nz + 15) / 16, next = 0;
        ck_assert_msg(n >= 1 && n <= 16, "nz %ld: %ld ranges", nz, n);
        for (long k = 0; k < n; k++) {
            long z0, z1;
            zreduce_range(nz, k, &z0, &z1);
            ck_assert_msg(z0 == next && z1 > z0 && (z1 - z0 == per || k == n - 1),
                          "nz %ld range %ld: [%ld, %ld)", nz, k, z0, z1);
            next = z1;
        }
        ck_assert_int_eq(next, nz);
    }
    ck_assert_int_eq(zreduce_nranges(53), 14);   /* l1448_13co: 4 planes a range */
    ck_assert_int_eq(zreduce_nranges(5), 5);
}
END_TEST

/* zreduce_image, on the calling thread alone or with pool helpers, gives the bits of the
 * ranges folded one by one and merged in z order (what a reduce job does), and numpy's
 * values; zreduce_planes gives numpy's values of each plane, and for a float plane the
 * bits of zreduce_values over stack_read_region's values. */
static void check_image_planes(int g)
{
    vol v;
    vol_make(&v, g);
    double *refs = numpy_reduce(&v);
    pool *workers = pool_new(3, 64);
    ck_assert_ptr_nonnull(workers);
    double *plane = malloc(sizeof(double) * NPIX), *got = malloc(sizeof(double) * NPIX),
           *want = malloc(sizeof(double) * NPIX), vals[NZ];
    char err[256];
    for (int op = 0; op < 5; op++) {
        stack_zpart *all = NULL;
        for (long k = 0; k < zreduce_nranges(NZ); k++) {
            long z0, z1;
            stack_zpart *p = NULL;
            zreduce_range(NZ, k, &z0, &z1);
            ck_assert_int_eq(stack_zreduce(v.s, (stack_zop)op, z0, z1, 0, NULL, &p, err,
                                           sizeof err), 0);
            merge_next(&all, p);
        }
        stack_zpart_result(all, want);
        stack_zpart_free(all);
        for (int t = 0; t < 2; t++) {
            ck_assert_int_eq(zreduce_image(v.s, NZ, (stack_zop)op, t ? workers : NULL,
                                           POOL_INTERACTIVE, NULL, got, err, sizeof err), 0);
            ck_assert_msg(memcmp(got, want, sizeof(double) * NPIX) == 0,
                          "%s: zreduce_image (%s) differs from the ranges merged in order",
                          opname[op], t ? "pool" : "one thread");
        }
        double tol = op == 4 || g == G_F32_NAN ? 1e-12 : 0;
        compare(got, refs + (size_t)op * NPIX, tol, "zreduce_image vs numpy", op);
        ck_assert_int_eq(zreduce_planes(v.s, NX, NY, NZ, (stack_zop)op, 0, NZ, NULL, vals, err,
                                        sizeof err), 0);
        const double *pref = refs + (size_t)5 * NPIX + (size_t)op * NZ;
        for (long z = 0; z < NZ; z++) {
            double m = fabs(pref[z]) > 1 ? fabs(pref[z]) : 1;
            ck_assert_msg((isnan(vals[z]) && isnan(pref[z])) || fabs(vals[z] - pref[z]) <= tol * m,
                          "plane %ld %s: %.17g vs numpy %.17g", z, opname[op], vals[z], pref[z]);
            if (g != G_F32_NAN)
                continue;
            ck_assert_int_eq(stack_read_region(v.s, z, 0, 0, NX, NY, plane, err, sizeof err), 0);
            double r = zreduce_values((stack_zop)op, plane, NPIX);
            ck_assert_msg((isnan(r) && isnan(vals[z])) || memcmp(&r, &vals[z], sizeof r) == 0,
                          "plane %ld %s: %.17g vs zreduce_values %.17g", z, opname[op], vals[z],
                          r);
        }
    }
    /* a range of planes, a wrong range, a cancel */
    ck_assert_int_eq(zreduce_planes(v.s, NX, NY, NZ, STACK_ZOP_MAX, 30, NZ, NULL, vals, err,
                                    sizeof err), 0);
    ck_assert_int_eq(zreduce_planes(v.s, NX, NY, NZ, STACK_ZOP_MAX, 30, NZ + 1, NULL, vals, err,
                                    sizeof err), TESS_ERANGE);
    static const volatile int cancel = 1;
    ck_assert_int_eq(zreduce_planes(v.s, NX, NY, NZ, STACK_ZOP_MAX, 0, NZ, &cancel, vals, err,
                                    sizeof err), TESS_ECANCELED);
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(zreduce_image(v.s, NZ, STACK_ZOP_MEAN, t ? workers : NULL,
                                       POOL_INTERACTIVE, &cancel, got, err, sizeof err),
                         TESS_ECANCELED);
    pool_free(workers);
    free(plane);
    free(got);
    free(want);
    free(refs);
    vol_free(&v);
}

START_TEST(test_image_planes_f32) { check_image_planes(G_F32_NAN); }
END_TEST
START_TEST(test_image_planes_u16) { check_image_planes(G_U16Z); }
END_TEST

START_TEST(test_values)
{
    const double v[] = {3, NAN, -1, 4, NAN, 1};
    ck_assert_double_eq(zreduce_values(STACK_ZOP_SUM, v, 6), 7);
    ck_assert_double_eq(zreduce_values(STACK_ZOP_MEAN, v, 6), 7.0 / 4);
    ck_assert_double_eq(zreduce_values(STACK_ZOP_MIN, v, 6), -1);
    ck_assert_double_eq(zreduce_values(STACK_ZOP_MAX, v, 6), 4);
    double m = 7.0 / 4, ss = (3 - m) * (3 - m) + (-1 - m) * (-1 - m) + (4 - m) * (4 - m) +
                              (1 - m) * (1 - m);
    ck_assert_double_eq(zreduce_values(STACK_ZOP_STD, v, 6), sqrt(ss / 4));
    const double none[] = {NAN, NAN};
    ck_assert_double_eq(zreduce_values(STACK_ZOP_SUM, none, 2), 0);
    for (int op = 0; op < 5; op++)
        if (op != STACK_ZOP_SUM)
            ck_assert(isnan(zreduce_values((stack_zop)op, none, 2)));
}
END_TEST

/* The card classes, and the header of a cube's result along z and over xy. */
START_TEST(test_header)
{
    static const char *const src[] = {
        "SIMPLE  =                    T",
        "BITPIX  =                  -32",
        "NAXIS   =                    3",
        "NAXIS1  =                   10",
        "NAXIS3  =                    4",
        "WCSAXES =                    3",
        "CTYPE1  = 'RA---TAN'",
        "CTYPE2  = 'DEC--TAN'",
        "CTYPE3  = 'FREQ    '",
        "CRPIX1  =                  5.0",
        "CRVAL3  =                1E+09",
        "PC1_1   =                  1.0",
        "PC2_1   =                  0.0",
        "PC1_3   =                  0.0",
        "PC3_3   =                  1.0",
        "CD2_2   =                  1.0",
        "PV2_1   =                  0.5",
        "PV3_1   =                  0.5",
        "PS1_0   = 'x       '",
        "CTYPE1A = 'RA---TAN'",
        "CTYPE12 = 'RA---TAN'",
        "CNAME2  = 'dec     '",
        "RADESYS = 'FK5     '",
        "EQUINOX =               2000.0",
        "SPECSYS = 'LSRK    '",
        "RESTFRQ =                1E+09",
        "BSCALE  =                  1.0",
        "BLANK   =                   -1",
        "DATAMAX =                  9.0",
        "BUNIT   = 'K       '           / brightness",
        "OBJECT  = 'L1448   '",
        "DATE-OBS= '2001-01-01'",
        "HISTORY made by hand",
        "COMMENT anything",
        NULL};
    int n = 0;
    char *cards = tt_make_cards(src, &n);
    static const char *const wcs[] = {"CTYPE1", "CTYPE2", "CRPIX1", "PC1_1", "PC2_1", "CD2_2",
                                      "PV2_1", "PS1_0", "CNAME2", "RADESYS", "EQUINOX", NULL};
    static const char *const obs[] = {"BUNIT", "OBJECT", "DATE-OBS", NULL};
    for (int i = 0; i < n; i++) {
        const char *c = cards + (size_t)i * 80;
        char key[9];
        zreduce_card want = ZREDUCE_CARD_OTHER;
        for (int k = 0; wcs[k]; k++)
            if (snprintf(key, sizeof key, "%-8s", wcs[k]) && memcmp(c, key, 8) == 0)
                want = ZREDUCE_CARD_WCS;
        for (int k = 0; obs[k]; k++)
            if (snprintf(key, sizeof key, "%-8s", obs[k]) && memcmp(c, key, 8) == 0)
                want = k == 0 ? ZREDUCE_CARD_BUNIT : ZREDUCE_CARD_OBS;
        ck_assert_msg(zreduce_card_class(c) == want, "%.20s: class %d, want %d", c,
                      zreduce_card_class(c), want);
    }
    char err[256], *out = NULL;
    int m = 0;
    ck_assert_int_eq(zreduce_header(cards, n, STACK_ZOP_STD, ZREDUCE_AXIS_Z, "l1448_13co", &out,
                                    &m, err, sizeof err), 0);
    /* the WCS, OBS and BUNIT cards in the source's order, then the provenance */
    static const char *const zkeys[] = {"CTYPE1", "CTYPE2", "CRPIX1", "PC1_1", "PC2_1", "CD2_2",
                                        "PV2_1", "PS1_0", "CNAME2", "RADESYS", "EQUINOX", "BUNIT",
                                        "OBJECT", "DATE-OBS", "REDUCEOP", "REDSRC"};
    ck_assert_int_eq(m, 16);
    ck_assert_uint_eq(strlen(out), 16 * 80);
    for (int i = 0; i < m; i++) {
        char key[9];
        snprintf(key, sizeof key, "%-8s", zkeys[i]);
        ck_assert_msg(memcmp(out + (size_t)i * 80, key, 8) == 0, "card %d: %.80s, want %s", i,
                      out + (size_t)i * 80, zkeys[i]);
    }
    ck_assert_int_eq(memcmp(out + 11 * 80, cards + 29 * 80, 80), 0);   /* copied as it was */
    char want[81];
    snprintf(want, sizeof want, "%-80s",
             "REDUCEOP= 'std     '           / NaN-aware reduction along axis z");
    ck_assert_int_eq(memcmp(out + 14 * 80, want, 80), 0);
    snprintf(want, sizeof want, "%-80s", "REDSRC  = 'l1448_13co'         / dataset reduced");
    ck_assert_int_eq(memcmp(out + 15 * 80, want, 80), 0);
    free(out);
    /* over xy: no WCS; a name with a quote, and one too long for the card */
    ck_assert_int_eq(zreduce_header(cards, n, STACK_ZOP_MEAN, ZREDUCE_AXIS_XY, "o'k", &out, &m,
                                    err, sizeof err), 0);
    ck_assert_int_eq(m, 5);
    ck_assert_int_eq(memcmp(out, "BUNIT   ", 8), 0);
    ck_assert_int_eq(memcmp(out + 3 * 80, "REDUCEOP= 'mean    '           / NaN-aware reduction "
                            "along axis xy", 63), 0);
    ck_assert_int_eq(memcmp(out + 4 * 80, "REDSRC  = 'o''k    '", 20), 0);
    free(out);
    char longname[101];
    memset(longname, 'a', 100);
    longname[100] = '\0';
    ck_assert_int_eq(zreduce_header(NULL, 0, STACK_ZOP_SUM, ZREDUCE_AXIS_Z, longname, &out, &m,
                                    err, sizeof err), 0);
    ck_assert_int_eq(m, 2);
    ck_assert_int_eq(out[80 + 10], '\'');
    ck_assert_int_eq(out[80 + 11 + 66], '\'');
    ck_assert_int_eq(out[80 + 11 + 65], 'a');
    free(out);
    free(cards);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("zreduce");
    TCase *tc = tcase_create("zreduce");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_u8);
    tcase_add_test(tc, test_i16);
    tcase_add_test(tc, test_u16_bzero);
    tcase_add_test(tc, test_cube_u16);
    tcase_add_test(tc, test_png8);
    tcase_add_test(tc, test_png16);
    tcase_add_test(tc, test_u8_blank_frame);
    tcase_add_test(tc, test_f32_nan);
    tcase_add_test(tc, test_big_u8);
    tcase_add_test(tc, test_big_cube_i16);
    tcase_add_test(tc, test_bound_png16);
    tcase_add_test(tc, test_bound_png8);
    tcase_add_test(tc, test_bound_png16_double);
    tcase_add_test(tc, test_bound_fits_compressed);
    tcase_add_test(tc, test_bound_blocks_merge);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_image_planes_f32);
    tcase_add_test(tc, test_image_planes_u16);
    tcase_add_test(tc, test_header);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
