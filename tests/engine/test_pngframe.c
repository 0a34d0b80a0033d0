/* Tests of engine/image/pngframe: the direct decode (chunks parsed, IDAT inflated by
 * libdeflate, rows unfiltered) gives libpng's samples for every filter type, depth and
 * chunking, and every file it does not decode itself (interlaced, 1/2/4-bit, damaged)
 * decodes or fails exactly as with libpng. */
#include <check.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/image/pngframe.h"
#include "tests/testutil.h"

static char dir[256];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "pngframe");
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes a w x h greyscale PNG of `depth` with libpng: `filters` (PNG_FILTER_* bits),
 * zlib buffer `zbuf` bytes (small: many IDAT chunks), interlaced or not; samples from a
 * fixed pseudo-random walk that each filter type predicts differently. */
static void write_png(const char *path, long w, long h, int depth, int filters, size_t zbuf,
                      int interlace)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(png && info);
    ck_assert_int_eq(setjmp(png_jmpbuf(png)), 0);
    png_init_io(png, f);
    png_set_filter(png, 0, filters);
    png_set_compression_buffer_size(png, zbuf);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, PNG_COLOR_TYPE_GRAY,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t rowbytes = ((size_t)w * (size_t)depth + 7) / 8;
    unsigned char *img = malloc(rowbytes * (size_t)h);
    png_bytep *rows = malloc((size_t)h * sizeof(png_bytep));
    ck_assert(img && rows);
    uint32_t x = 12345;
    for (size_t i = 0; i < rowbytes * (size_t)h; i++) {
        x = x * 1103515245u + 12345u;
        img[i] = (unsigned char)((i % 7 < 3) ? (x >> 24) : (i * 3 + (i / rowbytes) * 5));
    }
    for (long r = 0; r < h; r++)
        rows[r] = img + (size_t)r * rowbytes;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(img);
    ck_assert_int_eq(fclose(f), 0);
}

/* pngframe_decode and pngframe_decode_libpng agree on `path`: the same code, and when 0
 * the same shape and samples. */
static void assert_same(const char *path, int want_rc)
{
    char e1[256] = "", e2[256] = "";
    void *a = NULL, *b = NULL;
    long ax = 0, ay = 0, bx = 0, by = 0;
    int abits = 0, bbits = 0;
    int ra = pngframe_decode(path, &a, &ax, &ay, &abits, e1, sizeof e1);
    int rb = pngframe_decode_libpng(path, &b, &bx, &by, &bbits, e2, sizeof e2);
    ck_assert_int_eq(ra, want_rc);
    ck_assert_int_eq(rb, want_rc);
    if (ra == 0) {
        ck_assert_int_eq(ax, bx);
        ck_assert_int_eq(ay, by);
        ck_assert_int_eq(abits, bbits);
        ck_assert_mem_eq(a, b, (size_t)ax * (size_t)ay * (abits == 16 ? 2 : 1));
        long w, h;
        int bits;
        ck_assert_int_eq(pngframe_header(path, &w, &h, &bits, e1, sizeof e1), 0);
        ck_assert_int_eq(w, ax);
        ck_assert_int_eq(h, ay);
        ck_assert_int_eq(bits, abits);
    } else {
        ck_assert_str_eq(e1, e2);
    }
    free(a);
    free(b);
}

/* pngframe_release: a buffer given back is the next decode's of its size, and that decode
 * overwrites every sample of it (libpng's samples of the second frame); a buffer of
 * another size is not handed out; a buffer past PNGFRAME_KEEP_BYTES is freed at once. */
START_TEST(test_release_reuse)
{
    char p1[512], p2[512], p3[512], e[256];
    snprintf(p1, sizeof p1, "%s/r1.png", dir);
    snprintf(p2, sizeof p2, "%s/r2.png", dir);
    snprintf(p3, sizeof p3, "%s/r3.png", dir);
    write_png(p1, 301, 17, 8, PNG_ALL_FILTERS, 8192, 0);
    write_png(p2, 301, 17, 16, PNG_FILTER_PAETH, 8192, 0);   /* 2 x the bytes of p1 */
    write_png(p3, 602, 17, 8, PNG_FILTER_SUB, 64, 0);        /* p2's bytes, other samples */
    void *a = NULL, *b = NULL, *ref = NULL;
    long x, y;
    int bits;
    ck_assert_int_eq(pngframe_decode(p2, &a, &x, &y, &bits, e, sizeof e), 0);
    ck_assert_int_eq(bits, 16);
    size_t n = (size_t)x * (size_t)y * 2;
    memset(a, 0xa5, n);   /* stale content the next decode must overwrite */
    pngframe_release(a, n);
    ck_assert_int_eq(pngframe_decode(p1, &b, &x, &y, &bits, e, sizeof e), 0);
    ck_assert_ptr_ne(b, a);   /* half the size: not the kept buffer */
    free(b);
    ck_assert_int_eq(pngframe_decode(p3, &b, &x, &y, &bits, e, sizeof e), 0);
    ck_assert_ptr_eq(b, a);   /* the same size: the kept buffer */
    ck_assert_int_eq(pngframe_decode_libpng(p3, &ref, &x, &y, &bits, e, sizeof e), 0);
    ck_assert_int_eq(x * y, (long)n);
    ck_assert_mem_eq(b, ref, n);
    free(ref);
    pngframe_release(b, n);
    pngframe_release(NULL, 0);
    void *big = malloc(PNGFRAME_KEEP_BYTES + 1);   /* over the bound: freed (valgrind) */
    ck_assert_ptr_nonnull(big);
    pngframe_release(big, PNGFRAME_KEEP_BYTES + 1);
}
END_TEST

START_TEST(test_filters)
{
    static const int filters[] = {PNG_FILTER_NONE, PNG_FILTER_SUB, PNG_FILTER_UP,
                                  PNG_FILTER_AVG, PNG_FILTER_PAETH, PNG_ALL_FILTERS};
    static const long shapes[][2] = {{1, 1}, {1, 9}, {7, 3}, {64, 48}, {301, 17}};
    char p[512];
    for (int depth = 8; depth <= 16; depth += 8)
        for (size_t fi = 0; fi < sizeof filters / sizeof filters[0]; fi++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                snprintf(p, sizeof p, "%s/f%d_%zu_%zu.png", dir, depth, fi, si);
                write_png(p, shapes[si][0], shapes[si][1], depth, filters[fi],
                          si % 2 ? 64 : 8192, 0);
                assert_same(p, 0);
            }
}
END_TEST

/* Frames the direct path leaves to libpng: interlaced, and depths below 8. */
START_TEST(test_libpng_forms)
{
    char p[512];
    for (int depth = 1; depth <= 16; depth *= 2) {
        snprintf(p, sizeof p, "%s/i%d.png", dir, depth);
        write_png(p, 37, 21, depth, PNG_ALL_FILTERS, 8192, 1);
        assert_same(p, 0);
        if (depth < 8) {
            snprintf(p, sizeof p, "%s/d%d.png", dir, depth);
            write_png(p, 37, 21, depth, PNG_ALL_FILTERS, 8192, 0);
            assert_same(p, 0);
        }
    }
}
END_TEST

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n);
    ck_assert(p && fread(p, 1, *n, f) == *n);
    fclose(f);
    return p;
}

static void spit(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(p, 1, n, f) == n);
    ck_assert_int_eq(fclose(f), 0);
}

/* Damaged files: each fails (or decodes) as libpng makes it, message included. */
START_TEST(test_damaged)
{
    char good[512], p[512];
    snprintf(good, sizeof good, "%s/good.png", dir);
    write_png(good, 64, 48, 8, PNG_ALL_FILTERS, 256, 0);
    size_t n;
    unsigned char *g = slurp(good, &n);
    unsigned char *c = malloc(n);
    ck_assert_ptr_nonnull(c);
    /* the CRC of IHDR, a byte of the first IDAT's data, the last bytes (IEND's CRC),
     * truncations in the image data and before IEND */
    static const size_t flips[] = {30, 45, 60};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(c, g, n);
        c[flips[i]] ^= 0x5a;
        snprintf(p, sizeof p, "%s/flip%zu.png", dir, i);
        spit(p, c, n);
        assert_same(p, TESS_EIO);
    }
    memcpy(c, g, n);
    c[n - 1] ^= 1;
    snprintf(p, sizeof p, "%s/iendcrc.png", dir);
    spit(p, c, n);
    char e[256];
    void *a = NULL, *b = NULL;
    long x, y;
    int bits;
    int ra = pngframe_decode(p, &a, &x, &y, &bits, e, sizeof e);
    int rb = pngframe_decode_libpng(p, &b, &x, &y, &bits, e, sizeof e);
    ck_assert_int_eq(ra, rb);
    free(a);
    free(b);
    static const size_t cuts[] = {40, 100, 12};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        snprintf(p, sizeof p, "%s/cut%zu.png", dir, i);
        spit(p, g, cuts[i] < 20 ? n - cuts[i] : cuts[i]);
        assert_same(p, TESS_EIO);
    }
    free(c);
    free(g);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pngframe");
    TCase *tc = tcase_create("pngframe");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_filters);
    tcase_add_test(tc, test_release_reuse);
    tcase_add_test(tc, test_libpng_forms);
    tcase_add_test(tc, test_damaged);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
