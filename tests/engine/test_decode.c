/* Tests of the decode budgets (engine/base/decodelimit.h) and of every decoder that checks
 * them: PNG frames (engine/image/stack), tiles of tile-compressed FITS images and
 * compressed stack frames (engine/fits/fitsimg, the stack reader), and the refusal of
 * whole-file compressed FITS (gzip and the like), on files generated here, small on disk
 * however large they decode.  A refusal must come before the decoding: quickly, and with
 * the process's peak RSS far below the decoded size. */
#include <check.h>
#include <fitsio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/stack.h"
#include "tests/testutil.h"

#define RSS_BOUND_MB 64.0   /* the most the peak RSS may grow while a bomb is refused */

static char dir[256];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "decode");
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    decodelimit_set(DECODELIMIT_DEFAULT_MB << 20, DECODELIMIT_DEFAULT_PIXELS, NULL, NULL);
}

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void assert_has(const char *text, const char *needle)
{
    ck_assert_msg(strstr(text, needle) != NULL, "no '%s' in: %s", needle, text);
}

/* The budgets, their names in messages, and shapes whose products overflow. */
START_TEST(test_check)
{
    char err[256];
    unsigned long long b, p;
    decodelimit_get(&b, &p);
    ck_assert_uint_eq(b, 1024ULL << 20);
    ck_assert_uint_eq(p, 1ULL << 28);
    ck_assert_int_eq(decodelimit_check("x", "p", 16384, 16384, 1, 4, err, sizeof err), 0);
    ck_assert_int_eq(decodelimit_check("the PNG frame", "f.png", 16385, 16384, 1, 1, err,
                                       sizeof err), TESS_ELIMIT);
    assert_has(err, "the PNG frame is 16385 x 16384 pixels (268451840), more than the "
               "input-pixels budget = 268435456 may be decoded: f.png");
    decodelimit_set(8ULL << 20, 1000000, "--max-decoded-mb", "--max-input-pixels");
    ck_assert_int_eq(decodelimit_check("t", "p", 1000, 1000, 1, 8, err, sizeof err), 0);
    ck_assert_int_eq(decodelimit_check("t", "p", 1000, 1000, 1, 9, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "t is 1000 x 1000 pixels of 9 bytes: decoding it takes 9 MB, more than "
               "--max-decoded-mb = 8 MB: p");
    ck_assert_int_eq(decodelimit_check("c", "p", 100, 100, 101, 1, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "100 x 100 x 101 pixels (1010000), more than --max-input-pixels = 1000000");
    /* Products past TESS_SIZE_MAX (2^63 - 1) are over any budget instead of wrapping to
     * something small: pixels, then bytes. */
    decodelimit_set(~0ULL, ~0ULL - 1, NULL, NULL);
    ck_assert_int_eq(decodelimit_check("w", "p", 1LL << 40, 1LL << 40, 1, 1, err, sizeof err),
                     TESS_ELIMIT);
    assert_has(err, "(over 9223372036854775807)");
    decodelimit_set(~0ULL - 1, ~0ULL, NULL, NULL);
    ck_assert_int_eq(decodelimit_check("w", "p", 1LL << 31, 1LL << 30, 1, 8, err, sizeof err),
                     TESS_ELIMIT);
    assert_has(err, "decoding it takes over 8796093022208 MB, more than --max-decoded-mb");
    /* Dimensions below 1 count as 1; 0 budgets keep the ones in force. */
    decodelimit_set(0, 0, NULL, NULL);
    decodelimit_get(&b, &p);
    ck_assert_uint_eq(p, ~0ULL);
    ck_assert_int_eq(decodelimit_check("n", "p", -5, 0, -1, 0, err, sizeof err), 0);
}
END_TEST

/* A 30000 x 30000 PNG of zeros (890 KB): its header reads at once, and every read of its
 * pixels (one frame, a stack of two) is refused by limits on pixels before decoding;
 * with the pixel budget raised, the byte budget refuses a 16-bit one. */
START_TEST(test_png_bomb)
{
    char a[512], b[512], err[512];
    path_in(a, sizeof a, "a.png");
    path_in(b, sizeof b, "b.png");
    ck_assert_int_lt(tt_write_png_zeros(a, 30000, 30000, 8), 1 << 20);
    tt_write_png_zeros(b, 30000, 30000, 8);
    tt_cost cost = tt_cost_start();
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(a, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxes[0], 30000);
    ck_assert_int_eq(info.naxes[1], 30000);
    fitsimg_info_release(&info);
    double v[4];
    float vf[4];
    ck_assert_int_eq(frame_read_region(a, 0, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "the PNG frame is 30000 x 30000 pixels (900000000), more than the "
               "input-pixels budget = 268435456 may be decoded: ");
    assert_has(err, "/a.png");
    ck_assert_int_eq(frame_read_region_f32(a, 0, 0, 5, 5, 2, 2, vf, err, sizeof err),
                     TESS_ELIMIT);
    const char *paths[2] = {a, b};
    stack *s = stack_new(paths, 2, 0, 30000, 30000, 2, 4);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(stack_read_region(s, 1, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "b.png");
    ck_assert_int_eq(stack_read_series(s, 3, 3, 0, 2, v, err, sizeof err), TESS_ELIMIT);
    ck_assert_int_eq(stack_read_xz(s, 3, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    stack_stats st;
    stack_get_stats(s, &st);
    ck_assert_uint_eq(st.decoded_peak, 0);
    stack_free(s);

    decodelimit_set(64ULL << 20, 1ULL << 40, NULL, NULL);
    char c[512];
    path_in(c, sizeof c, "c.png");
    tt_write_png_zeros(c, 8000, 8000, 16);     /* 128 MB of samples */
    ck_assert_int_eq(frame_read_region(c, 0, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "the PNG frame is 8000 x 8000 pixels of 2 bytes: decoding it takes 123 MB, "
               "more than the decoded-bytes budget = 64 MB: ");
    tt_cost_check(&cost, RSS_BOUND_MB, 2.0, "the refusals");

    /* Within the budgets a frame of zeros decodes as before. */
    path_in(c, sizeof c, "small.png");
    tt_write_png_zeros(c, 300, 200, 16);
    double *px = malloc(300 * 200 * sizeof(double));
    ck_assert_int_eq(frame_read_region(c, 0, 0, 0, 0, 300, 200, px, err, sizeof err), 0);
    for (int i = 0; i < 300 * 200; i++)
        ck_assert(px[i] == 0.0);
    free(px);
}
END_TEST

/* A PNG whose header is followed by 100 zTXt chunks of 7.7 KB, each inflating to 7.9 MB:
 * libpng inflated all of them at every read of the header or pixels (3.5 s each here,
 * half a minute for 500 chunks); the readers skip ancillary chunks unread. */
START_TEST(test_png_text_chunks_skipped)
{
    char p[512], err[256];
    path_in(p, sizeof p, "text.png");
    ck_assert_int_lt(tt_write_png_ztxt(p, 64, 48, 100), 1 << 20);
    tt_cost cost = tt_cost_start();
    fitsimg_info info;
    ck_assert_int_eq(frame_read_info(p, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxes[0], 64);
    fitsimg_info_release(&info);
    double v[64 * 48];
    ck_assert_int_eq(frame_read_region(p, 0, 0, 0, 0, 64, 48, v, err, sizeof err), 0);
    for (int i = 0; i < 64 * 48; i++)
        ck_assert(v[i] == 0.0);
    tt_cost_check(&cost, RSS_BOUND_MB, 0.5, "reading the frame");
}
END_TEST

/* A W x H x nz float image, tile-compressed (GZIP_1) in HDU 1 with tiles tw x th x 1. */
static void write_tiled(const char *path, long w, long h, long nz, long tw, long th)
{
    size_t n = (size_t)w * (size_t)h * (size_t)nz;
    float *v = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 1000);
    long naxes[3] = {w, h, nz}, tile[3] = {tw, th, 1};
    int st = 0;
    fitsfile *f;
    unlink(path);
    fits_create_diskfile(&f, path, &st);
    fits_set_compression_type(f, GZIP_1, &st);
    fits_set_tile_dim(f, 3, tile, &st);
    fits_create_img(f, FLOAT_IMG, nz > 1 ? 3 : 2, naxes, &st);
    fits_write_img(f, TFLOAT, 1, (LONGLONG)n, v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(v);
}

/* Tile-compressed images: a tile over the budgets is refused by every read of pixels
 * (regions, values, the stack's reads of a cube), before cfitsio decompresses it; row
 * tiles of the same image are read.  A stack of compressed frames, each held whole as
 * doubles, is bounded the same way. */
START_TEST(test_tile_budget)
{
    char one[512], rows[512], cube[512], err[512];
    path_in(one, sizeof one, "one.fits");
    path_in(rows, sizeof rows, "rows.fits");
    path_in(cube, sizeof cube, "cube.fits");
    write_tiled(one, 600, 500, 1, 600, 500);
    write_tiled(rows, 600, 500, 1, 600, 1);
    write_tiled(cube, 600, 500, 2, 600, 500);
    decodelimit_set(0, 100000, NULL, "--max-input-pixels");
    fitsimg_info info;
    ck_assert_int_eq(fitsimg_read_info(one, 1, &info, err, sizeof err), 0);
    fitsimg_info_release(&info);
    double v[4];
    float fv[4];
    ck_assert_int_eq(fitsimg_read_region(one, 1, 0, 0, 0, 2, 2, v, err, sizeof err),
                     TESS_ELIMIT);
    assert_has(err, "one compression tile is 600 x 500 pixels (300000), more than "
               "--max-input-pixels = 100000 may be decoded: ");
    assert_has(err, "/one.fits");
    ck_assert_int_eq(fitsimg_read_region_f32(one, 1, 0, 0, 0, 2, 2, fv, err, sizeof err),
                     TESS_ELIMIT);
    ck_assert_int_eq(fitsimg_read_values(one, 1, FITSIMG_F64, 0, 4, v, err, sizeof err),
                     TESS_ELIMIT);
    ck_assert_int_eq(fitsimg_read_region(rows, 1, 0, 7, 9, 2, 2, v, err, sizeof err), 0);
    ck_assert(v[0] == (float)((9 * 600 + 7) % 1000));
    const char *cp[1] = {cube};
    stack *s = stack_new(cp, 1, 1, 600, 500, 2, 4);
    ck_assert_int_eq(stack_read_region(s, 1, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "cube.fits");
    stack_free(s);

    /* Frames of a stack: 600 x 500 doubles = 2.3 MB each, over a 2 MB budget. */
    decodelimit_set(2ULL << 20, 1ULL << 28, NULL, NULL);
    const char *fp[2] = {rows, rows};
    s = stack_new(fp, 2, 1, 600, 500, 2, 4);
    ck_assert_int_eq(stack_read_region(s, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_ELIMIT);
    assert_has(err, "the tile-compressed frame is 600 x 500 pixels of 8 bytes: decoding it "
               "takes 3 MB, more than the decoded-bytes budget = 2 MB: ");
    stack_free(s);
    decodelimit_set(4ULL << 20, 0, NULL, NULL);
    s = stack_new(fp, 2, 1, 600, 500, 2, 4);
    ck_assert_int_eq(stack_read_region(s, 1, 7, 9, 2, 2, v, err, sizeof err), 0);
    ck_assert(v[0] == (float)((9 * 600 + 7) % 1000));
    stack_free(s);
}
END_TEST

/* F7: a 1.6 MB gzip of a 20000 x 20000 float image (1.6 GB, which cfitsio decompressed at
 * every open: 6.5 s and 1.5 GB for the header alone) is refused by every reader at once,
 * with what to do; the other whole-file compressions too; a text header that happens to
 * start like one (BZERO) is still read. */
START_TEST(test_whole_file_compressed)
{
    char gz[512], err[512];
    path_in(gz, sizeof gz, "big.fits.gz");
    ck_assert_int_lt(tt_write_gzip_fits(gz, 20000, 20000, -32), 2 << 20);
    tt_cost cost = tt_cost_start();
    fitsimg_info info;
    ck_assert_int_eq(fitsimg_read_info(gz, 0, &info, err, sizeof err), TESS_EINVAL);
    assert_has(err, "a gzip-compressed file is not read (cfitsio would decompress all of it "
               "into memory at every read): gunzip ");
    assert_has(err, "/big.fits.gz, or compress it with fpack");
    ck_assert_int_eq(frame_read_info(gz, 0, &info, err, sizeof err), TESS_EINVAL);
    double v[4];
    ck_assert_int_eq(fitsimg_read_region(gz, 0, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_read_values(gz, 0, FITSIMG_F64, 0, 4, v, err, sizeof err),
                     TESS_EINVAL);
    long long off;
    ck_assert_int_eq(fitsimg_data_offset(gz, 0, &off, err, sizeof err), TESS_EINVAL);
    char *cards = NULL;
    int n = 0;
    ck_assert_int_eq(fitsimg_read_cards(gz, 0, 100, &cards, &n, NULL, err, sizeof err),
                     TESS_EINVAL);
    assert_has(err, "gzip-compressed");
    const char *paths[1] = {gz};
    stack *s = stack_new(paths, 1, 0, 20000, 20000, 1, 4);
    ck_assert_int_eq(stack_read_region(s, 0, 0, 0, 2, 2, v, err, sizeof err), TESS_EINVAL);
    assert_has(err, "gunzip");
    stack_free(s);
    tt_cost_check(&cost, RSS_BOUND_MB, 1.0, "the refusals");

    static const struct {
        const char *bytes, *name, *undo;
        size_t len;
    } heads[] = {
        {"PK\003\004rest", "zip", "unzip", 8},
        /* cfitsio takes any file starting "PK" for a zip archive (found by fuzz_dataset) */
        {"PK\203\004SIMPLE", "zip", "unzip", 10}, {"BZh91AY&SY", "bzip2", "bunzip2", 10},
        {"\037\235\220SIMPLE", "compress (.Z)", "uncompress", 9},
        {"\037\036xx", "pack", "unpack", 4}, {"\037\240xx", "LZH", "lha x", 4},
    };
    char p[512];
    path_in(p, sizeof p, "head.fits");
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(heads[i].bytes, 1, heads[i].len, f);
        fclose(f);
        ck_assert_int_eq(fitsimg_check_not_compressed(p, err, sizeof err), TESS_EINVAL);
        char want[600];
        snprintf(want, sizeof want, "a %s-compressed file", heads[i].name);
        assert_has(err, want);
        snprintf(want, sizeof want, "%s %s, or", heads[i].undo, p);
        assert_has(err, want);
    }
    /* Text headers, whatever their first card, and FITS files pass. */
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("BZERO   = 32768\nPKEY    = 1\nNAXIS   = 2\nNAXIS1  = 10\nNAXIS2  = 10\n", f);
    fclose(f);
    ck_assert_int_eq(fitsimg_check_not_compressed(p, err, sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_cards(p, 0, 100, &cards, &n, NULL, err, sizeof err), 0);
    ck_assert_int_eq(n, 5);
    free(cards);
    ck_assert_int_eq(fitsimg_check_not_compressed(TESSERA_DEMO_DIR "/HorseHead.fits", err,
                                                  sizeof err), 0);
    path_in(p, sizeof p, "missing.fits");
    ck_assert_int_eq(fitsimg_check_not_compressed(p, err, sizeof err), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_check);
    tcase_add_test(tc, test_png_bomb);
    tcase_add_test(tc, test_png_text_chunks_skipped);
    tcase_add_test(tc, test_tile_budget);
    tcase_add_test(tc, test_whole_file_compressed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(suite());
}
