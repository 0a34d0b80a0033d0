/* Tests of engine/image/tiffframe and TIFF volumes in engine/image/stack: files written here
 * by libtiff (striped, tiled, 8/16-bit, float, compressions, multi-page) read back exactly;
 * colour and odd samples refused; hostile files (truncated, huge, bad offsets, loops,
 * compression bombs) refused without a crash or a word on stderr. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"
#include "tests/testutil.h"

static char dir[256];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "tiff");
}

static void teardown(void)
{
    char cmd[300];
    decodelimit_set(DECODELIMIT_DEFAULT_MB << 20, DECODELIMIT_DEFAULT_PIXELS, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void assert_has(const char *s, const char *part)
{
    if (!strstr(s, part))
        ck_abort_msg("'%s' does not contain '%s'", s, part);
}

/* The value stored at column x, TIFF row r (0 = first row of the file), page p. */
static double val(tiffframe_type t, long x, long r, long p)
{
    long u = (x * 257 + r * 1031 + p * 4099) & 65535;
    switch (t) {
    case TIFFFRAME_U8: return (double)((x * 7 + r * 13 + p * 29) & 255);
    case TIFFFRAME_U16: return (double)u;
    case TIFFFRAME_I16: return (double)(int16_t)(uint16_t)u;
    case TIFFFRAME_F32: return (double)(float)(x * 0.5 - r * 1.25 + p * 100.0 + 0.125);
    }
    return 0;
}

static void put(unsigned char *b, tiffframe_type t, long i, double v)
{
    if (t == TIFFFRAME_U8) {
        b[i] = (unsigned char)v;
    } else if (t == TIFFFRAME_F32) {
        float f = (float)v;
        memcpy(b + 4 * i, &f, 4);
    } else {
        uint16_t u = t == TIFFFRAME_I16 ? (uint16_t)(int16_t)v : (uint16_t)v;
        memcpy(b + 2 * i, &u, 2);
    }
}

static int esize_of(tiffframe_type t)
{
    return t == TIFFFRAME_U8 ? 1 : t == TIFFFRAME_F32 ? 4 : 2;
}

/* Writes an nx x ny TIFF of `np` pages of type t: tiled in 16 x 16 tiles or in strips of 3
 * rows, with compression `comp` (horizontal predictor for LZW of integers). */
static void write_tiff(const char *path, tiffframe_type t, int tiled, int comp, long nx, long ny,
                       long np)
{
    TIFF *tif = TIFFOpen(path, "w");
    ck_assert_ptr_nonnull(tif);
    int es = esize_of(t);
    unsigned char *buf = calloc((size_t)(nx + 16) * (size_t)(ny + 16), (size_t)es);
    for (long p = 0; p < np; p++) {
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)nx);
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)ny);
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)(8 * es));
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
        TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT,
                     (uint16_t)(t == TIFFFRAME_F32 ? SAMPLEFORMAT_IEEEFP
                                : t == TIFFFRAME_I16 ? SAMPLEFORMAT_INT : SAMPLEFORMAT_UINT));
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
        TIFFSetField(tif, TIFFTAG_PLANARCONFIG, (uint16_t)PLANARCONFIG_CONTIG);
        TIFFSetField(tif, TIFFTAG_COMPRESSION, (uint16_t)comp);
        if (comp == COMPRESSION_LZW && t != TIFFFRAME_F32)
            TIFFSetField(tif, TIFFTAG_PREDICTOR, (uint16_t)PREDICTOR_HORIZONTAL);
        if (np > 1)
            TIFFSetField(tif, TIFFTAG_SUBFILETYPE, (uint32_t)FILETYPE_PAGE);
        if (tiled) {
            TIFFSetField(tif, TIFFTAG_TILEWIDTH, (uint32_t)16);
            TIFFSetField(tif, TIFFTAG_TILELENGTH, (uint32_t)16);
            for (long ty = 0; ty < ny; ty += 16)
                for (long tx = 0; tx < nx; tx += 16) {
                    for (long j = 0; j < 16; j++)
                        for (long i = 0; i < 16; i++)
                            put(buf, t, j * 16 + i, tx + i < nx && ty + j < ny
                                                        ? val(t, tx + i, ty + j, p) : 0);
                    ck_assert_int_ge(TIFFWriteTile(tif, buf, (uint32_t)tx, (uint32_t)ty, 0, 0), 0);
                }
        } else {
            TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, (uint32_t)3);
            for (long r = 0; r < ny; r++) {
                for (long i = 0; i < nx; i++)
                    put(buf, t, i, val(t, i, r, p));
                ck_assert_int_eq(TIFFWriteScanline(tif, buf, (uint32_t)r, 0), 1);
            }
        }
        ck_assert_int_eq(TIFFWriteDirectory(tif), 1);
    }
    TIFFClose(tif);
    free(buf);
}

/* Every layout, type and compression: tiffframe_read of the whole page, of an inner
 * region and through frame_read_region / the stack reader give the written values with
 * y = 0 the last TIFF row. */
START_TEST(test_layouts_exact)
{
    static const int comps[] = {COMPRESSION_NONE, COMPRESSION_ADOBE_DEFLATE, COMPRESSION_LZW,
                                COMPRESSION_PACKBITS};
    static const tiffframe_type types[] = {TIFFFRAME_U8, TIFFFRAME_U16, TIFFFRAME_I16,
                                           TIFFFRAME_F32};
    const long nx = 37, ny = 23, np = 3;
    char path[300], err[512];
    double *out = malloc((size_t)(nx * ny) * sizeof(double));
    float *outf = malloc((size_t)(nx * ny) * sizeof(float));
    for (int ti = 0; ti < 4; ti++)
        for (int tiled = 0; tiled < 2; tiled++)
            for (int ci = 0; ci < 4; ci++) {
                tiffframe_type t = types[ti];
                snprintf(path, sizeof path, "%s/t%d_%d_%d.tif", dir, ti, tiled, ci);
                write_tiff(path, t, tiled, comps[ci], nx, ny, np);
                ck_assert_int_eq(tiffframe_is_tiff(path), 1);
                tiffframe *tf;
                ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), 0);
                tiffframe_shape sh;
                tiffframe_get_shape(tf, &sh);
                ck_assert_int_eq(sh.nx, nx);
                ck_assert_int_eq(sh.ny, ny);
                ck_assert_int_eq(sh.npages, np);
                ck_assert_int_eq(sh.type, t);
                for (long p = 0; p < np; p++) {
                    ck_assert_int_eq(tiffframe_read(tf, p, 0, 0, nx, ny, TIFFFRAME_OUT_F64, out,
                                                    err, sizeof err), 0);
                    for (long y = 0; y < ny; y++)
                        for (long x = 0; x < nx; x++)
                            if (out[y * nx + x] != val(t, x, ny - 1 - y, p))
                                ck_abort_msg("%s page %ld (%ld, %ld): %g != %g", path, p, x, y,
                                             out[y * nx + x], val(t, x, ny - 1 - y, p));
                }
                /* an inner region crossing strips and tiles, as floats, by path */
                long x0 = 5, y0 = 4, w = 20, h = 17;
                ck_assert_int_eq(frame_read_region_f32(path, 0, 2, x0, y0, w, h, outf, err,
                                                       sizeof err), 0);
                for (long j = 0; j < h; j++)
                    for (long i = 0; i < w; i++)
                        ck_assert(outf[j * w + i] ==
                                  (float)val(t, x0 + i, ny - 1 - (y0 + j), 2));
                ck_assert_int_eq(tiffframe_read(tf, 3, 0, 0, 1, 1, TIFFFRAME_OUT_F64, out, err,
                                                sizeof err), TESS_ERANGE);
                ck_assert_int_eq(tiffframe_read(tf, 0, 30, 0, 8, 1, TIFFFRAME_OUT_F64, out, err,
                                                sizeof err), TESS_ERANGE);
                tiffframe_close(tf);

                /* the stack reader of the file as a cube of 3 planes */
                const char *pp[1] = {path};
                stack *s = stack_new(pp, 1, 0, nx, ny, np, 4);
                ck_assert_ptr_nonnull(s);
                ck_assert_int_eq(stack_read_series(s, 36, 0, 0, np, out, err, sizeof err), 0);
                for (long p = 0; p < np; p++)
                    ck_assert(out[p] == val(t, 36, ny - 1, p));
                ck_assert_int_eq(stack_read_xz(s, 7, 0, 0, nx, np, out, err, sizeof err), 0);
                for (long p = 0; p < np; p++)
                    for (long x = 0; x < nx; x++)
                        ck_assert(out[p * nx + x] == val(t, x, ny - 1 - 7, p));
                stack_free(s);
            }
    free(out);
    free(outf);
}
END_TEST

/* frame_read_info gives the FITS image of the same values; frame_header_hash is 0. */
START_TEST(test_info)
{
    char path[300], err[256];
    path_in(path, sizeof path, "u16.tif");
    write_tiff(path, TIFFFRAME_U16, 0, COMPRESSION_ADOBE_DEFLATE, 9, 5, 4);
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 3);
    ck_assert_int_eq(info.naxes[0], 9);
    ck_assert_int_eq(info.naxes[1], 5);
    ck_assert_int_eq(info.naxes[2], 4);
    ck_assert_int_eq(info.bitpix, 16);
    ck_assert(info.bzero == 32768);
    assert_has(info.header, "BZERO   =                32768");
    assert_has(info.header, "NAXIS3  =                    4");
    fitsimg_info_release(&info);
    uint64_t hh = 1;
    ck_assert_int_eq(frame_header_hash(path, 0, &hh, err, sizeof err), 0);
    ck_assert_uint_eq(hh, 0);
    path_in(path, sizeof path, "f.tif");
    write_tiff(path, TIFFFRAME_F32, 1, COMPRESSION_NONE, 9, 5, 1);
    ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 2);
    ck_assert_int_eq(info.bitpix, -32);
    ck_assert(info.bzero == 0);
    fitsimg_info_release(&info);
    ck_assert_int_eq(frame_decode_check(path, err, sizeof err), 0);
}
END_TEST

/* Single-page frames as a stack: 8-bit frames are decoded whole and reduced in the exact
 * integer mode; the mean equals the one computed here. */
START_TEST(test_frames_stack)
{
    const long nx = 40, ny = 30, n = 5;
    char paths[5][300], err[256];
    const char *pp[5];
    for (long k = 0; k < n; k++) {
        snprintf(paths[k], sizeof paths[k], "%s/f%03ld.tif", dir, k);
        write_tiff(paths[k], TIFFFRAME_U8, k % 2, k % 2 ? COMPRESSION_LZW : COMPRESSION_NONE,
                   nx, ny, 1);
        /* page 0 of each file holds the values of page k */
        pp[k] = paths[k];
    }
    stack *s = stack_new(pp, (int)n, 0, nx, ny, n, 2);
    ck_assert_ptr_nonnull(s);
    double *out = malloc((size_t)(nx * ny) * sizeof(double));
    ck_assert_int_eq(stack_read_series(s, 3, 4, 0, n, out, err, sizeof err), 0);
    for (long k = 0; k < n; k++)
        ck_assert(out[k] == val(TIFFFRAME_U8, 3, ny - 1 - 4, 0));
    stack_plane pl;
    ck_assert_int_eq(stack_plane_hold(s, 2, &pl, err, sizeof err), 0);
    ck_assert_ptr_nonnull(pl.u8);
    ck_assert_int_eq(pl.u8[5 * nx + 6], (int)val(TIFFFRAME_U8, 6, ny - 1 - 5, 0));
    stack_plane_release(s, &pl);
    stack_zpart *zp;
    ck_assert_int_eq(stack_zreduce(s, STACK_ZOP_MEAN, 0, n, 0, NULL, &zp, err, sizeof err), 0);
    ck_assert_int_eq(stack_zpart_result(zp, out), 1);
    for (long y = 0; y < ny; y++)
        for (long x = 0; x < nx; x++)
            ck_assert(out[y * nx + x] == val(TIFFFRAME_U8, x, ny - 1 - y, 0));
    stack_zpart_free(zp);
    stack_free(s);

    /* float frames are read through libtiff; the reduction takes the double mode */
    for (long k = 0; k < 2; k++)
        write_tiff(paths[k], TIFFFRAME_F32, 0, COMPRESSION_ADOBE_DEFLATE, nx, ny, 1);
    s = stack_new(pp, 2, 0, nx, ny, 2, 2);
    ck_assert_int_eq(stack_zreduce(s, STACK_ZOP_SUM, 0, 2, 0, NULL, &zp, err, sizeof err), 0);
    ck_assert_int_eq(stack_zpart_result(zp, out), 0);
    ck_assert(out[0] == 2 * val(TIFFFRAME_F32, 0, ny - 1, 0));
    stack_zpart_free(zp);
    stack_free(s);
    free(out);
}
END_TEST

/* Colour, bilevel, 32-bit integers and pages of another shape are refused with a reason. */
START_TEST(test_refused)
{
    char path[300], err[512];
    tiffframe *tf;
    path_in(path, sizeof path, "rgb.tif");
    TIFF *tif = TIFFOpen(path, "w");
    unsigned char row[3 * 4] = {0};
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)4);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)2);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)8);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)3);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_RGB);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, (uint16_t)PLANARCONFIG_CONTIG);
    for (uint32_t r = 0; r < 2; r++)
        TIFFWriteScanline(tif, row, r, 0);
    TIFFClose(tif);
    ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), TESS_EINVAL);
    assert_has(err, "3 samples per pixel");
    assert_has(err, "only greyscale TIFF (SamplesPerPixel 1) is read");

    path_in(path, sizeof path, "u32.tif");
    tif = TIFFOpen(path, "w");
    uint32_t px[4] = {0};
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)4);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)1);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)32);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
    TIFFWriteScanline(tif, px, 0, 0);
    TIFFClose(tif);
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), TESS_EINVAL);
    assert_has(err, "32-bit samples of SampleFormat 1");

    /* two pages of different shapes */
    char a[300];
    path_in(a, sizeof a, "two.tif");
    tif = TIFFOpen(a, "w");
    unsigned char b[8] = {0};
    for (int p = 0; p < 2; p++) {
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)(4 + p));
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)1);
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)8);
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
        TIFFWriteScanline(tif, b, 0, 0);
        TIFFWriteDirectory(tif);
    }
    TIFFClose(tif);
    ck_assert_int_eq(tiffframe_open(a, &tf, err, sizeof err), TESS_EINVAL);
    assert_has(err, "page 1 is 5 x 1 8-bit unsigned, page 0 is 4 x 1 8-bit unsigned");

    /* a FITS file is not a TIFF */
    ck_assert_int_eq(tiffframe_is_tiff(TESSERA_DEMO_DIR "/m13.fits"), 0);
}
END_TEST

/* ---- hand-made files ----------------------------------------------------------------- */

typedef struct ent {
    uint16_t tag, type;
    uint32_t count, value;
} ent;

/* A little-endian classic TIFF: the header, one directory at offset 8 of the n entries
 * (sorted by tag; values inline) with `next` as the next directory's offset, then `data`
 * at offset `doff`. */
static void write_raw(const char *path, const ent *e, int n, uint32_t next, const void *data,
                      size_t dlen, uint32_t doff)
{
    size_t size = doff + dlen;
    unsigned char *f = calloc(1, size < 4096 ? 4096 : size);
    memcpy(f, "II*\0\x08\0\0\0", 8);
    f[8] = (unsigned char)n;
    for (int i = 0; i < n; i++) {
        unsigned char *p = f + 10 + 12 * i;
        memcpy(p, &e[i].tag, 2);
        memcpy(p + 2, &e[i].type, 2);
        memcpy(p + 4, &e[i].count, 4);
        memcpy(p + 8, &e[i].value, 4);
    }
    memcpy(f + 10 + 12 * n, &next, 4);
    if (dlen)
        memcpy(f + doff, data, dlen);
    FILE *o = fopen(path, "wb");
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_eq(fwrite(f, 1, size, o), size);
    fclose(o);
    free(f);
}

/* The entries of a w x h 8-bit greyscale image in one strip at `off` of `bytes`. */
static int grey_entries(ent *e, uint32_t w, uint32_t h, uint16_t comp, uint32_t off,
                        uint32_t bytes)
{
    const ent all[] = {{256, 4, 1, w},   {257, 4, 1, h},  {258, 3, 1, 8},
                       {259, 3, 1, comp}, {262, 3, 1, 1}, {273, 4, 1, off},
                       {277, 3, 1, 1},   {278, 4, 1, h},  {279, 4, 1, bytes}};
    memcpy(e, all, sizeof all);
    return (int)(sizeof all / sizeof all[0]);
}

/* Runs f with stderr sent to a file; returns what was written to it (malloc'd). */
static char *stderr_of(void (*f)(void))
{
    char p[300];
    path_in(p, sizeof p, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
    f();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *in = fopen(p, "rb");
    char *s = calloc(1, 4096);
    size_t n = fread(s, 1, 4095, in);
    s[n] = '\0';
    fclose(in);
    return s;
}

static void hostile_cases(void)
{
    char path[300], err[512];
    ent e[16];
    tiffframe *tf;
    double v[4];
    unsigned char zeros[64] = {0};

    /* huge dimensions: the header reads, every read of the pixels is refused unallocated */
    path_in(path, sizeof path, "huge.tif");
    write_raw(path, e, grey_entries(e, 60000, 60000, 1, 512, 64), 0, zeros, 64, 512);
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxes[0], 60000);
    fitsimg_info_release(&info);
    ck_assert_int_eq(frame_read_region(path, 0, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "the TIFF page is 60000 x 60000 pixels (3600000000), more than");
    ck_assert_int_eq(frame_decode_check(path, err, sizeof err), TESS_ELIMIT);
    const char *pp[2] = {path, path};
    stack *s = stack_new(pp, 2, 0, 60000, 60000, 2, 2);
    ck_assert_int_eq(stack_read_region(s, 1, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_uint_eq(st.decoded_peak, 0);
    stack_free(s);

    /* a strip beyond the end of the file */
    path_in(path, sizeof path, "badoff.tif");
    write_raw(path, e, grey_entries(e, 8, 8, 1, 1u << 30, 64), 0, NULL, 0, 512);
    ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), 0);
    ck_assert_int_eq(tiffframe_read(tf, 0, 0, 0, 2, 2, TIFFFRAME_OUT_F64, v, err, sizeof err),
                     TESS_EIO);
    assert_has(err, "cannot decode strip 0");
    tiffframe_close(tf);

    /* a directory chain that loops onto itself */
    path_in(path, sizeof path, "loop.tif");
    write_raw(path, e, grey_entries(e, 8, 8, 1, 512, 64), 8, zeros, 64, 512);
    int rc = tiffframe_open(path, &tf, err, sizeof err);
    if (rc == 0) {   /* a libtiff that stops at the loop without an error: one page */
        tiffframe_shape sh;
        tiffframe_get_shape(tf, &sh);
        ck_assert_int_eq(sh.npages, 1);
        tiffframe_close(tf);
    } else {
        ck_assert_int_eq(rc, TESS_EIO);
    }

    /* a zero-width image, and a file that is only a header */
    path_in(path, sizeof path, "zero.tif");
    write_raw(path, e, grey_entries(e, 0, 8, 1, 512, 64), 0, zeros, 64, 512);
    ck_assert_int_lt(tiffframe_open(path, &tf, err, sizeof err), 0);
    path_in(path, sizeof path, "hdr.tif");
    FILE *o = fopen(path, "wb");
    fwrite("II*\0\x08\0\0\0", 1, 8, o);
    fclose(o);
    ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), TESS_EIO);
    assert_has(err, "not a readable TIFF file");

    /* truncated at every few bytes: refused or read, never a crash */
    char full[300];
    path_in(full, sizeof full, "full.tif");
    write_tiff(full, TIFFFRAME_U16, 1, COMPRESSION_ADOBE_DEFLATE, 40, 33, 2);
    FILE *in = fopen(full, "rb");
    unsigned char *bytes = malloc(1 << 16);
    size_t len = fread(bytes, 1, 1 << 16, in);
    fclose(in);
    double *px = malloc(40 * 33 * sizeof(double));
    for (size_t cut = 0; cut < len; cut += 13) {
        path_in(path, sizeof path, "cut.tif");
        o = fopen(path, "wb");
        fwrite(bytes, 1, cut, o);
        fclose(o);
        rc = tiffframe_open(path, &tf, err, sizeof err);
        ck_assert(rc == 0 || rc == TESS_EIO || rc == TESS_EINVAL);
        if (rc == 0) {
            rc = tiffframe_read(tf, 0, 0, 0, 40, 33, TIFFFRAME_OUT_F64, px, err, sizeof err);
            ck_assert(rc == 0 || rc == TESS_EIO);
            tiffframe_close(tf);
        }
    }
    free(px);
    free(bytes);
}

/* Hostile files are refused with a reason, without a crash and with nothing on stderr. */
START_TEST(test_hostile)
{
    char *said = stderr_of(hostile_cases);
    ck_assert_msg(said[0] == '\0', "libtiff wrote to stderr: %s", said);
    free(said);
}
END_TEST

/* A deflate strip of zeros that expands to 16 MB: refused by the byte budget before any
 * decoding, read once the budget allows it. */
START_TEST(test_bomb)
{
    char path[300], err[512];
    path_in(path, sizeof path, "bomb.tif");
    write_tiff(path, TIFFFRAME_U16, 0, COMPRESSION_ADOBE_DEFLATE, 1, 1, 1);
    /* rewritten as a single strip of 2048 x 4096 16-bit zeros */
    TIFF *tif = TIFFOpen(path, "w");
    const uint32_t w = 2048, h = 4096;
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)16);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, (uint16_t)COMPRESSION_ADOBE_DEFLATE);
    TIFFSetField(tif, TIFFTAG_ZIPQUALITY, 9);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, h);
    size_t bytes = (size_t)w * h * 2;
    void *z = calloc(1, bytes);
    ck_assert_int_ge(TIFFWriteEncodedStrip(tif, 0, z, (tmsize_t)bytes), 0);
    TIFFClose(tif);
    free(z);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    ck_assert_int_lt(ftell(f), 1 << 18);   /* 16 MB of zeros in under 256 KB */
    fclose(f);
    decodelimit_set(4ULL << 20, 1ULL << 40, "limits.max_decoded_mb", NULL);
    tt_cost cost = tt_cost_start();
    double v[4];
    ck_assert_int_eq(frame_read_region(path, 0, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "more than limits.max_decoded_mb = 4 MB");
    tt_cost_check(&cost, 40, 2.0, "the refusal");
    decodelimit_set(32ULL << 20, 1ULL << 40, NULL, NULL);
    ck_assert_int_eq(frame_read_region(path, 0, 0, 100, 200, 2, 2, v, err, sizeof err), 0);
    ck_assert(v[0] == 0 && v[3] == 0);
}
END_TEST

/* Threads reading one multi-page file at once through the stack reader (one open file,
 * pooled libtiff handles) all get the written values. */
typedef struct reader_arg {
    stack *s;
    int seed, bad;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    double out[64];
    char err[256];
    unsigned r = (unsigned)a->seed;
    for (int it = 0; it < 300; it++) {
        r = r * 1103515245u + 12345u;
        long z = (long)(r >> 8) % 6, x0 = (long)(r >> 12) % 30, y0 = (long)(r >> 20) % 20;
        if (stack_read_region(a->s, z, x0, y0, 8, 4, out, err, sizeof err) != 0) {
            a->bad++;
            continue;
        }
        for (long j = 0; j < 4; j++)
            for (long i = 0; i < 8; i++)
                if (out[j * 8 + i] != val(TIFFFRAME_U16, x0 + i, 23 - 1 - (y0 + j), z))
                    a->bad++;
    }
    return NULL;
}

START_TEST(test_threads)
{
    char path[300];
    path_in(path, sizeof path, "mt.tif");
    write_tiff(path, TIFFFRAME_U16, 1, COMPRESSION_ADOBE_DEFLATE, 38, 23, 6);
    const char *pp[1] = {path};
    stack *s = stack_new(pp, 1, 0, 38, 23, 6, 4);
    pthread_t th[4];
    reader_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (reader_arg){s, i + 1, 0};
        pthread_create(&th[i], NULL, reader, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
    }
    stack_free(s);
}
END_TEST

/* tiffframe_write: values clamped, row 0 = y = 0 (the last TIFF row), read back exactly. */
START_TEST(test_write)
{
    char path[300], err[256];
    const long nx = 19, ny = 11;
    unsigned short data[19 * 11];
    double back[19 * 11];
    for (long i = 0; i < nx * ny; i++)
        data[i] = (unsigned short)(i * 613);
    for (int bits = 8; bits <= 16; bits += 8)
        for (int deflate = 0; deflate < 2; deflate++) {
            path_in(path, sizeof path, "w.tif");
            ck_assert_int_eq(tiffframe_write(path, data, nx, ny, bits, deflate, err, sizeof err), 0);
            ck_assert_int_eq(frame_read_region(path, 0, 0, 0, 0, nx, ny, back, err, sizeof err), 0);
            for (long i = 0; i < nx * ny; i++) {
                unsigned want = bits == 8 && data[i] > 255 ? 255 : data[i];
                ck_assert(back[i] == want);
            }
            TIFF *tif = TIFFOpen(path, "r");
            uint16_t comp = 0;
            TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
            ck_assert_int_eq(comp, deflate ? COMPRESSION_ADOBE_DEFLATE : COMPRESSION_NONE);
            unsigned char row[2 * 19];
            ck_assert_int_eq(TIFFReadScanline(tif, row, 0, 0), 1);   /* first TIFF row = y 10 */
            uint16_t v0 = bits == 8 ? row[0] : (uint16_t)(row[0] | row[1] << 8);
            ck_assert_int_eq(v0, bits == 8 && data[10 * nx] > 255 ? 255 : data[10 * nx]);
            TIFFClose(tif);
        }
    ck_assert_int_eq(tiffframe_write(path, data, 0, ny, 8, 0, err, sizeof err), TESS_EINVAL);
    path_in(path, sizeof path, "no/such/dir.tif");
    ck_assert_int_eq(tiffframe_write(path, data, nx, ny, 8, 0, err, sizeof err), TESS_EIO);
    assert_has(err, "cannot create");
}
END_TEST

/* A striped 8 x 12 (6 strips of 2 rows) or tiled 64 x 48 (12 tiles of 16 x 16) 8-bit
 * image whose offset and byte-count arrays have `noff` and `nbytes` entries (the file
 * still holds every strip or tile: only the arrays are short).  Pixel (x, TIFF row r) is
 * (x + 3 r) & 255. */
static void write_short_arrays(const char *path, int tiled, uint32_t noff, uint32_t nbytes)
{
    const uint32_t nx = tiled ? 64 : 8, ny = tiled ? 48 : 12, n = tiled ? 12 : 6;
    const uint32_t each = tiled ? 256 : 16, aoff = 256, boff = 320, doff = 512;
    unsigned char blob[512 + 12 * 256] = {0};
    for (uint32_t k = 0; k < n; k++) {
        uint32_t o = doff + k * each, c = each;
        memcpy(blob + aoff + 4 * k, &o, 4);
        memcpy(blob + boff + 4 * k, &c, 4);
        for (uint32_t i = 0; i < each; i++) {
            uint32_t x, r;
            if (tiled) {   /* tile k: column k % 4, row k / 4 of tiles */
                x = (k % 4) * 16 + i % 16;
                r = (k / 4) * 16 + i / 16;
            } else {
                x = i % 8;
                r = k * 2 + i / 8;
            }
            blob[o + i] = (unsigned char)((x + 3 * r) & 255);
        }
    }
    ent e[12];
    int k = 0;
    e[k++] = (ent){256, 4, 1, nx};
    e[k++] = (ent){257, 4, 1, ny};
    e[k++] = (ent){258, 3, 1, 8};
    e[k++] = (ent){259, 3, 1, 1};
    e[k++] = (ent){262, 3, 1, 1};
    if (!tiled)   /* a one-entry array is held in the entry itself */
        e[k++] = (ent){273, 4, noff, noff == 1 ? doff : aoff};
    e[k++] = (ent){277, 3, 1, 1};
    if (!tiled) {
        e[k++] = (ent){278, 4, 1, 2};
        e[k++] = (ent){279, 4, nbytes, nbytes == 1 ? each : boff};
    } else {
        e[k++] = (ent){322, 4, 1, 16};
        e[k++] = (ent){323, 4, 1, 16};
        e[k++] = (ent){324, 4, noff, noff == 1 ? doff : aoff};
        e[k++] = (ent){325, 4, nbytes, nbytes == 1 ? each : boff};
    }
    write_raw(path, e, k, 0, blob + aoff, doff + n * each - aoff, aoff);
}

/* Offset or byte-count arrays shorter than the strips or tiles (which libtiff pads with
 * zeros, so a strip past the end read the file's header and tags as pixels) are refused at
 * the opening, naming the tag and both counts; with full arrays the same files read
 * exactly, and an offset of 0 in a full array is refused when its strip or tile is read. */
START_TEST(test_short_offset_arrays)
{
    char path[300], err[512];
    tiffframe *tf;
    static const struct {
        int tiled;
        uint32_t noff, nbytes;
        const char *says;
    } bad[] = {
        {0, 2, 6, "directory 0 has 2 StripOffsets for 6 strips"},
        {0, 1, 6, "directory 0 has 1 StripOffsets for 6 strips"},
        {0, 6, 2, "directory 0 has 2 StripByteCounts for 6 strips"},
        {1, 2, 12, "directory 0 has 2 TileOffsets for 12 tiles"},
        {1, 12, 11, "directory 0 has 11 TileByteCounts for 12 tiles"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path_in(path, sizeof path, "short.tif");
        write_short_arrays(path, bad[i].tiled, bad[i].noff, bad[i].nbytes);
        err[0] = '\0';
        ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), TESS_EINVAL);
        assert_has(err, bad[i].says);
        fitsimg_info info;
        ck_assert_int_eq(frame_read_info(path, 0, &info, err, sizeof err), TESS_EINVAL);
        assert_has(err, bad[i].says);
        double v[4];
        ck_assert_int_lt(frame_read_region(path, 0, 0, 0, 0, 2, 2, v, err, sizeof err), 0);
        assert_has(err, bad[i].says);
    }
    /* full arrays with an offset of 0 (strip 3, rows 6-7 of the file: y 4-5; tile 5): the
     * counts pass, reading that strip or tile is refused, the others read */
    for (int tiled = 0; tiled < 2; tiled++) {
        path_in(path, sizeof path, "zero_off.tif");
        write_short_arrays(path, tiled, tiled ? 12 : 6, tiled ? 12 : 6);
        int fd = open(path, O_WRONLY);
        const uint32_t zero = 0;
        ck_assert_int_eq(pwrite(fd, &zero, 4, 256 + 4 * (tiled ? 5 : 3)), 4);
        close(fd);
        ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), 0);
        double v[4];
        long x0 = tiled ? 16 : 0, y0 = tiled ? 48 - 32 : 4;   /* tile 5: column 1, row 1 */
        ck_assert_int_eq(tiffframe_read(tf, 0, x0, y0, 2, 2, TIFFFRAME_OUT_F64, v, err,
                                        sizeof err), TESS_EIO);
        assert_has(err, tiled ? "tile 5 has no offset" : "strip 3 has no offset");
        ck_assert_int_eq(tiffframe_read(tf, 0, 0, 0, 2, 2, TIFFFRAME_OUT_F64, v, err,
                                        sizeof err), 0);
        tiffframe_close(tf);
    }
    for (int tiled = 0; tiled < 2; tiled++) {
        path_in(path, sizeof path, tiled ? "full_tiled.tif" : "full_striped.tif");
        write_short_arrays(path, tiled, tiled ? 12 : 6, tiled ? 12 : 6);
        ck_assert_int_eq(tiffframe_open(path, &tf, err, sizeof err), 0);
        tiffframe_shape sh;
        tiffframe_get_shape(tf, &sh);
        double *px = malloc((size_t)(sh.nx * sh.ny) * sizeof(double));
        ck_assert_int_eq(tiffframe_read(tf, 0, 0, 0, sh.nx, sh.ny, TIFFFRAME_OUT_F64, px, err,
                                        sizeof err), 0);
        for (long y = 0; y < sh.ny; y++)   /* y = 0 is the last TIFF row */
            for (long x = 0; x < sh.nx; x++)
                ck_assert_double_eq(px[y * sh.nx + x], (double)((x + 3 * (sh.ny - 1 - y)) & 255));
        free(px);
        tiffframe_close(tf);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tiff");
    TCase *tc = tcase_create("tiff");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layouts_exact);
    tcase_add_test(tc, test_info);
    tcase_add_test(tc, test_frames_stack);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_short_offset_arrays);
    tcase_add_test(tc, test_bomb);
    tcase_add_test(tc, test_write);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
