/* Unit tests of checked size arithmetic (engine/base/checked.h) and of the structural rule
 * of image HDUs (fitscard_check_image, fitscard_check_chars, NAXISn in fitscard_parse) on
 * generated hostile headers: shapes whose sizes overflow 64 bits, shapes that fit in 64
 * bits but not in their file, axes of length 0, non-ASCII cards; then the readers built on
 * them (fitsimg, stack, chunkstore, transpose) and the bounded walk of a HiPS MOC. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/cube/transpose.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/hips/healpix.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"
#include "engine/sky/skywcs.h"
#include "tests/testutil.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    tt_tmpdir_make(tmpdir, sizeof tmpdir, "sizes");
}

static void rm_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* tmpdir/name into p. */
static const char *in_tmp(char *p, size_t len, const char *name)
{
    snprintf(p, len, "%s/%s", tmpdir, name);
    return p;
}

/* Writes tmpdir/name (tt_write_fits_image) and returns its path, in p. */
static const char *write_image(char *p, size_t len, const char *name, int bitpix, int naxis,
                               const long long *axes, const char *const *extra,
                               long long data_bytes)
{
    tt_write_fits_image(in_tmp(p, len, name), bitpix, naxis, axes, extra, data_bytes);
    return p;
}

/* ---- the helper ----------------------------------------------------------------------- */

START_TEST(test_checked_arithmetic)
{
    size_t r = 7;
    ck_assert_int_eq(tess_size_mul(0, SIZE_MAX, &r), 0);
    ck_assert_uint_eq(r, 0);
    ck_assert_int_eq(tess_size_mul(3, 5, &r), 0);
    ck_assert_uint_eq(r, 15);
    ck_assert_int_eq(tess_size_mul(TESS_SIZE_MAX, 1, &r), 0);
    ck_assert_uint_eq(r, (size_t)PTRDIFF_MAX);
    /* Past PTRDIFF_MAX but within 64 bits, and past 64 bits. */
    ck_assert_int_eq(tess_size_mul((size_t)1 << 32, (size_t)1 << 31, &r), TESS_ERANGE);
    ck_assert_uint_eq(r, TESS_SIZE_MAX);
    ck_assert_int_eq(tess_size_mul((size_t)1 << 32, (size_t)1 << 32, &r), TESS_ERANGE);
    ck_assert_int_eq(tess_size_mul(SIZE_MAX, 2, &r), TESS_ERANGE);
    ck_assert_int_eq(tess_size_add(TESS_SIZE_MAX - 1, 1, &r), 0);
    ck_assert_uint_eq(r, TESS_SIZE_MAX);
    ck_assert_int_eq(tess_size_add(TESS_SIZE_MAX, 1, &r), TESS_ERANGE);
    ck_assert_int_eq(tess_size_add(SIZE_MAX, SIZE_MAX, &r), TESS_ERANGE);

    /* Shapes: the F1 file's 2^31 x 2^31 of 4 bytes is 2^64, which wraps to 0 unchecked. */
    ck_assert_int_eq(tess_size_dims(4, (const long[]){2147483648L, 2147483648L}, 2, &r),
                     TESS_ERANGE);
    ck_assert_uint_eq(r, TESS_SIZE_MAX);
    ck_assert_int_eq(tess_size_dims(1, (const long[]){2147483647L, 2147483647L}, 2, &r), 0);
    ck_assert_uint_eq(r, 4611686014132420609ULL);
    ck_assert_int_eq(tess_size_dims(8, (const long[]){891, 893, 2}, 3, &r), 0);
    ck_assert_uint_eq(r, 8ULL * 891 * 893 * 2);
    ck_assert_int_eq(tess_size_dims(8, NULL, 0, &r), 0);
    ck_assert_uint_eq(r, 8);
    /* A zero anywhere gives 0, even after factors that overflow; a negative is refused. */
    ck_assert_int_eq(tess_size_dims(8, (const long[]){LONG_MAX, LONG_MAX, 0}, 3, &r), 0);
    ck_assert_uint_eq(r, 0);
    ck_assert_int_eq(tess_size_dims(8, (const long[]){4, -1}, 2, &r), TESS_EINVAL);
    ck_assert_uint_eq(r, 0);
    /* NAXIS3 huge for a cube, and four axes. */
    ck_assert_int_eq(tess_size_dims(2, (const long[]){2, 2, 1L << 61}, 3, &r), TESS_ERANGE);
    ck_assert_int_eq(tess_size_dims(1, (const long[]){2, 2, 1, 1L << 61}, 4, &r), TESS_ERANGE);
    ck_assert_int_eq(tess_size_dims(1, (const long[]){2, 2, 1, 1L << 60}, 4, &r), 0);

    long l = 0;
    ck_assert_int_eq(tess_long_mul(1L << 31, 1L << 31, &l), 0);
    ck_assert_int_eq(l, 1L << 62);
    ck_assert_int_eq(tess_long_mul(1L << 32, 1L << 31, &l), TESS_ERANGE);
    ck_assert_int_eq(l, LONG_MAX);
    ck_assert_int_eq(tess_long_mul(-1, 5, &l), TESS_ERANGE);
    ck_assert_int_eq(tess_long_mul(0, LONG_MAX, &l), 0);
    ck_assert_int_eq(l, 0);
}
END_TEST

/* ---- the structural rule -------------------------------------------------------------- */

START_TEST(test_check_image_rule)
{
    static const struct {
        int bitpix, naxis;
        long naxes[4];
        long long offset, size;
        int rc;
        const char *why;          /* in the message */
    } cases[] = {
        /* The F1 file: 2^64 bytes, which an unchecked product makes 0. */
        {-32, 2, {2147483648L, 2147483648L}, 2880, 5760, TESS_EINVAL, "overflow"},
        /* In 64 bits (2^62 bytes) but not in the file. */
        {8, 2, {2147483647L, 2147483647L}, 2880, 5760, TESS_EIO, "shorter than its header"},
        /* Past size_t, past PTRDIFF_MAX only, NAXIS3 and NAXIS4 huge. */
        {8, 2, {1L << 62, 4}, 2880, 5760, TESS_EINVAL, "overflow"},
        {-64, 2, {3037000500L, 3037000500L}, 2880, 5760, TESS_EINVAL, "overflow"},
        {16, 3, {2, 2, 1L << 61}, 2880, 5760, TESS_EINVAL, "NAXIS1 to NAXIS3"},
        {8, 3, {1, 1, 1L << 40}, 2880, 5760, TESS_EIO, "1 x 1 x 1099511627776"},
        {8, 4, {2, 2, 1, 1L << 62}, 2880, 5760, TESS_EINVAL, "overflow"},
        /* The offset and the size overflow together. */
        {8, 1, {LONG_MAX}, 2880, 5760, TESS_EIO, "shorter than its header"},
        /* Axes of 0 (and below), named by their card. */
        {-32, 2, {0, 10}, 2880, 2880, TESS_EINVAL, "NAXIS1 = 0"},
        {8, 3, {4, 4, 0}, 2880, 2880, TESS_EINVAL, "NAXIS3 = 0"},
        {8, 2, {4, -3}, 2880, 2880, TESS_EINVAL, "NAXIS2 = -3"},
        {12, 2, {4, 4}, 2880, 5760, TESS_EINVAL, "BITPIX = 12"},
        {8, 5, {1, 1, 1, 1}, 2880, 5760, TESS_EINVAL, "NAXIS = 5"},
        /* What is fine: exactly the data, a truncated last block, compressed, no data. */
        {16, 2, {891, 893}, 14400, 14400 + 891 * 893 * 2, 0, NULL},
        {-32, 3, {4, 4, 3}, 2880, 2880 + 192, 0, NULL},
        {-32, 2, {1L << 30, 1L << 30}, -1, 5760, 0, NULL},
        {8, 0, {0}, 2880, 2880, 0, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char err[320] = "";
        size_t bytes = 99;
        int rc = fitscard_check_image(cases[k].bitpix, cases[k].naxis, cases[k].naxes, 4,
                                      cases[k].offset, cases[k].size, &bytes, err, sizeof err);
        ck_assert_msg(rc == cases[k].rc, "case %zu: rc %d, want %d (%s)", k, rc, cases[k].rc,
                      err);
        if (cases[k].why)
            ck_assert_msg(strstr(err, cases[k].why), "case %zu: '%s' lacks '%s'", k, err,
                          cases[k].why);
        if (rc)
            ck_assert_uint_eq(bytes, 0);
    }
    size_t bytes = 0;
    ck_assert_int_eq(fitscard_check_image(16, 2, (const long[]){891, 893}, 4, 14400,
                                          14400 + 891 * 893 * 2, &bytes, NULL, 0), 0);
    ck_assert_uint_eq(bytes, 891 * 893 * 2);
}
END_TEST

START_TEST(test_check_chars)
{
    static const char *const lines[] = {
        "SIMPLE  =                    T",
        "COMMENT caf\xe9 au lait \x01",
        "OBJECT  = 'M\xfcnchen'           / st\xe4" "dt",
        "lower   =                    1",
        "        blank keyword text",
        NULL};
    int n = 0;
    char *cards = tt_make_cards(lines, &n);
    int replaced = -1;
    char err[256] = "";
    ck_assert_int_eq(fitscard_check_chars(cards, n, &replaced, err, sizeof err), 0);
    ck_assert_int_eq(replaced, 4);
    ck_assert_int_eq(memcmp(cards + 80, "COMMENT caf? au lait ?", 22), 0);
    ck_assert_int_eq(memcmp(cards + 160, "OBJECT  = 'M?nchen'           / st?dt", 37), 0);
    for (int i = 0; i < n * 80; i++)
        ck_assert(cards[i] >= 32 && cards[i] <= 126);
    /* Again: nothing left to replace. */
    ck_assert_int_eq(fitscard_check_chars(cards, n, &replaced, err, sizeof err), 0);
    ck_assert_int_eq(replaced, 0);
    free(cards);

    /* Keywords cfitsio's writer refuses: a non-ASCII byte, an embedded blank, punctuation,
     * a leading blank.  The card and its keyword are named, bytes shown as \xHH. */
    static const struct { const char *card, *why; } bad[] = {
        {"K\xe9Y     =                    1", "card 2: keyword 'K\\xE9Y'"},
        {"DATE OBS= '2020-01-01'", "card 2: keyword 'DATE OBS'"},
        {"A.B     =                    1", "card 2: keyword 'A.B'"},
        {" KEY    =                    1", "card 2: keyword ' KEY'"},
        {"KEY\tX   =                    1", "keyword 'KEY\\x09X'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *two[] = {"SIMPLE  =                    T", bad[k].card, NULL};
        cards = tt_make_cards(two, &n);
        ck_assert_int_eq(fitscard_check_chars(cards, n, NULL, err, sizeof err), TESS_EINVAL);
        ck_assert_msg(strstr(err, bad[k].why), "'%s' lacks '%s'", err, bad[k].why);
        free(cards);
    }
    ck_assert_int_eq(fitscard_check_chars(NULL, 0, &replaced, err, sizeof err), 0);
}
END_TEST

START_TEST(test_parse_axis_cards)
{
    static const struct { const char *text, *why; } bad[] = {
        {"NAXIS   = 2\nNAXIS1  = 0\nNAXIS2  = 10\n", "header line 2: NAXIS1 = 0"},
        {"NAXIS   = 2\nNAXIS1  = 10\nNAXIS2  = -5\n", "header line 3: NAXIS2 = -5"},
        {"NAXIS1  = 1.5\n", "NAXIS1 = 1.5"},
        {"NAXIS1  = 1e308\n", "NAXIS1 = 1e308"},
        {"NAXIS1  = 99999999999999999999999\n", "NAXIS1 = 99999999999999999999999"},
    };
    char *cards = NULL, err[256];
    int n = 0;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(fitscard_parse(bad[k].text, strlen(bad[k].text), 100, &cards, &n, err,
                                        sizeof err), TESS_EINVAL);
        ck_assert_msg(strstr(err, bad[k].why) && strstr(err, "at least 1"), "'%s' lacks '%s'",
                      err, bad[k].why);
        ck_assert_ptr_null(cards);
    }
    const char *good = "NAXIS   = 2\nNAXIS1  =                 4096 / columns\nNAXIS2  = 1\n"
                       "NAXISA  = 0\nCOMMENT NAXIS1 = 0\n";
    ck_assert_int_eq(fitscard_parse(good, strlen(good), 100, &cards, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 5);
    free(cards);
}
END_TEST

/* ---- opening hostile files ------------------------------------------------------------ */

START_TEST(test_read_info_hostile_shapes)
{
    make_tmpdir();
    static const struct {
        const char *name;
        int bitpix, naxis;
        long long axes[4];
        long long data;          /* bytes of data written */
        int rc;
        const char *why;
    } cases[] = {
        {"f1.fits", -32, 2, {2147483648LL, 2147483648LL}, 2880, TESS_EINVAL, "overflow"},
        {"b8.fits", 8, 2, {2147483647LL, 2147483647LL}, 2880, TESS_EIO,
         "the file is shorter than its header says"},
        {"s62.fits", 8, 2, {1LL << 62, 4}, 2880, TESS_EINVAL, "overflow"},
        {"d64.fits", -64, 2, {3037000500LL, 3037000500LL}, 2880, TESS_EINVAL, "overflow"},
        {"cube61.fits", 16, 3, {2, 2, 1LL << 61}, 2880, TESS_EINVAL, "overflow"},
        {"cube40.fits", 8, 3, {1, 1, 1LL << 40}, 2880, TESS_EIO, "the file has 5760"},
        {"ax4.fits", 8, 4, {2, 2, 1, 1LL << 62}, 2880, TESS_EINVAL, "overflow"},
        {"zero1.fits", -32, 2, {0, 10}, 0, TESS_EINVAL, "NAXIS1 = 0"},
        {"zero3.fits", 8, 3, {4, 4, 0}, 0, TESS_EINVAL, "NAXIS3 = 0"},
        {"short.fits", -32, 2, {64, 48}, 4000, TESS_EIO, "need 12288 bytes of data from byte 2880"},
        {"ok.fits", -32, 2, {64, 48}, 64 * 48 * 4, 0, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char p[128], err[400] = "";
        write_image(p, sizeof p, cases[k].name, cases[k].bitpix, cases[k].naxis, cases[k].axes,
                    NULL, cases[k].data);
        fitsimg_info info;
        int rc = fitsimg_read_info(p, 0, &info, err, sizeof err);
        ck_assert_msg(rc == cases[k].rc, "%s: rc %d, want %d (%s)", cases[k].name, rc,
                      cases[k].rc, err);
        if (rc) {
            ck_assert_msg(strstr(err, p) && strstr(err, cases[k].why), "%s: '%s'",
                          cases[k].name, err);
            ck_assert_ptr_null(info.header);
            /* The same file through the reader of frames; the direct read of values checks
             * its range against the header's own sizes, unwrapped: the first values of
             * the file may be read (they are there), none of an empty shape. */
            ck_assert_int_eq(frame_read_info(p, 0, &info, err, sizeof err), rc);
            double v[16];
            int vr = fitsimg_read_values(p, 0, FITSIMG_F64, 0, 16, v, err, sizeof err);
            if (strstr(cases[k].why, "= 0"))
                ck_assert_msg(vr == TESS_ERANGE, "%s: read_values %d (%s)", cases[k].name,
                              vr, err);
            continue;
        }
        ck_assert_int_eq(info.naxes[0], 64);
        fitsimg_info_release(&info);
    }
    rm_tmpdir();
}
END_TEST

/* F8's header: bytes outside 32..126 in a comment and a string value become '?' in the
 * cards read (so JSON listings and FITS products show the same text); one in a keyword
 * refuses the file, naming the card. */
START_TEST(test_read_info_non_ascii)
{
    make_tmpdir();
    char p[128], err[400] = "";
    static const char *const extra[] = {"COMMENT caf\xe9 au lait",
                                        "OBJECT  = 'M\xfcnchen '           / st\xe4" "dt",
                                        "HISTORY tab\there", NULL};
    write_image(p, sizeof p, "na.fits", -32, 2, (const long long[]){8, 8}, extra, 256);
    fitsimg_info info;
    ck_assert_msg(fitsimg_read_info(p, 0, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.nkeys, 8);
    ck_assert_int_eq(memcmp(info.header + 5 * 80, "COMMENT caf? au lait ", 21), 0);
    ck_assert_int_eq(memcmp(info.header + 6 * 80, "OBJECT  = 'M?nchen '           / st?dt", 38), 0);
    ck_assert_int_eq(memcmp(info.header + 7 * 80, "HISTORY tab?here", 16), 0);
    char v[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "OBJECT", v, sizeof v), 1);
    ck_assert_str_eq(v, "M?nchen");
    fitsimg_info_release(&info);

    static const char *const key[] = {"K\xe9Y     =                    1", NULL};
    write_image(p, sizeof p, "nakey.fits", -32, 2, (const long long[]){8, 8}, key, 256);
    ck_assert_int_eq(fitsimg_read_info(p, 0, &info, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, p) && strstr(err, "card 6: keyword 'K\\xE9Y'"), "%s", err);
    rm_tmpdir();
}
END_TEST

/* The readers refuse what would overflow instead of computing with a wrapped size: the
 * volume of a stack, a chunk store's declared shape, a transpose's plane. */
START_TEST(test_readers_refuse_overflow)
{
    make_tmpdir();
    char p[128], err[256] = "";
    write_image(p, sizeof p, "f1.fits", -32, 2, (const long long[]){2147483648LL, 2147483648LL},
                NULL, 2880);
    const char *paths[] = {p};
    ck_assert_ptr_null(stack_new(paths, 1, 0, 2147483648L, 2147483648L, 1, 4));
    ck_assert_ptr_null(stack_new(paths, 1, 0, 1L << 20, 1L << 20, 1L << 20, 4));
    /* A volume that may be addressed but whose file holds none of it: the read says so. */
    write_image(p, sizeof p, "f2.fits", -32, 2, (const long long[]){1LL << 30, 1LL << 29},
                NULL, 2880);
    stack *s = stack_new(paths, 1, 0, 1L << 30, 1L << 29, 1, 4);
    ck_assert_ptr_nonnull(s);
    double out[16];
    ck_assert_int_eq(stack_read_region(s, 0, 0, 0, 4, 4, out, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "shorter than its header says"), "%s", err);
    stack_free(s);

    /* A chunk store whose header multiplies to 2^86 bytes: 0 mod 2^64, so a 4096-byte file
     * matched it before the sizes were checked. */
    chunkstore_info ci = {.nx = 1L << 32, .ny = 1L << 32, .nz = 1L << 20, .dtype = CS_F32,
                          .tx = 16, .ty = 16, .data_offset = CHUNKSTORE_HEADER};
    ck_assert_int_eq(chunkstore_file_size(&ci), -1);
    in_tmp(p, sizeof p, "cs.bin");
    ck_assert_int_eq(chunkstore_create(p, &ci, err, sizeof err), TESS_EINVAL);
    char hdr[CHUNKSTORE_HEADER];
    memset(hdr, ' ', sizeof hdr);
    int n = snprintf(hdr, sizeof hdr, "{\"format\":\"tessera-chunkstore\",\"version\":1,"
                     "\"nx\":4294967296,\"ny\":4294967296,\"nz\":1048576,\"dtype\":\"f4\","
                     "\"tile\":[16,16],\"data_offset\":4096,\"byteorder\":\"little\"}");
    hdr[n] = ' ';
    hdr[sizeof hdr - 1] = '\n';
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(hdr, 1, sizeof hdr, f), sizeof hdr);
    fclose(f);
    chunkstore_info back;
    ck_assert_int_eq(chunkstore_read_info(p, &back, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(chunkstore_read_series(p, 0, 0, out, 16, err, sizeof err), TESS_EINVAL);

    /* A plane of 2^32 pixels or more cannot be transposed (32-bit permutation). */
    cube_source src = {.st = NULL, .nx = 1L << 16, .ny = 1L << 16, .nz = 2, .dtype = CS_U8,
                       .name = "big"};
    cube_transpose t;
    ck_assert_int_eq(cube_transpose_init(&t, &src, 0, 0, NULL, tmpdir, err, sizeof err),
                     TESS_ERANGE);
    cube_transpose_release(&t);
    rm_tmpdir();
}
END_TEST

/* ---- bounded loops over header-derived counts ---------------------------------------- */

/* A TAN image of n x n pixels of `cdelt` degrees at (10, 10). */
static skywcs *tan_wcs(long n, double cdelt)
{
    char l[8][81];
    snprintf(l[0], 81, "CTYPE1  = 'RA---TAN'");
    snprintf(l[1], 81, "CTYPE2  = 'DEC--TAN'");
    snprintf(l[2], 81, "CRVAL1  = 10.0");
    snprintf(l[3], 81, "CRVAL2  = 10.0");
    snprintf(l[4], 81, "CRPIX1  = %.1f", (double)n / 2);
    snprintf(l[5], 81, "CRPIX2  = %.1f", (double)n / 2);
    snprintf(l[6], 81, "CDELT1  = %.3g", -cdelt);
    snprintf(l[7], 81, "CDELT2  = %.3g", cdelt);
    const char *lines[] = {l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], NULL};
    int nk = 0;
    char *cards = tt_make_cards(lines, &nk);
    skywcs *w = tt_parse_wcs(cards, nk);
    free(cards);
    skywcs *cel = skywcs_celestial(w);
    skywcs_free(w);
    ck_assert_ptr_nonnull(cel);
    return cel;
}

/* MOCORDER of a Moc.fits made by hips_moc_fits (the second HDU's card). */
static long moc_order(const unsigned char *b, size_t len)
{
    for (size_t at = 2880; at + 80 <= len; at += 80)
        if (memcmp(b + at, "MOCORDER= ", 10) == 0)
            return strtol((const char *)b + at + 10, NULL, 10);
    return -1;
}

START_TEST(test_moc_walk_bounded)
{
    /* 10^5 pixels of 1e-4 degrees (a 10-degree field) at the survey order of that scale,
     * 11: some 10^5 tiles to test, minutes; bounded to 2048 tests, well under a second. */
    skywcs *cel = tan_wcs(100000, 1e-4);
    int order = hips_survey_order(1e-4);
    ck_assert_int_eq(order, 11);
    unsigned char *out = NULL;
    size_t len = 0, cells = 0;
    double t0 = tt_now_s();
    ck_assert_int_eq(hips_moc_fits(cel, 100000, 100000, 0, 1e-4, order, 2048, &out, &len,
                                   &cells), 0);
    double dt = tt_now_s() - t0;
    ck_assert_msg(dt < 3.0 * tt_time_scale(), "bounded MOC took %.2f s", dt);
    long got = moc_order(out, len);
    ck_assert_msg(got >= 5 && got < order, "MOCORDER %ld", got);
    ck_assert_uint_gt(cells, 0);
    free(out);
    skywcs_free(cel);

    /* The shape of the F1 file with a tiny pixel: order 20 asked for, bounded all the same. */
    cel = tan_wcs(2147483647L, 1e-7);
    t0 = tt_now_s();
    ck_assert_int_eq(hips_moc_fits(cel, 2147483647L, 2147483647L, 0, 1e-7,
                                   hips_survey_order(1e-7), 2048, &out, &len, &cells), 0);
    dt = tt_now_s() - t0;
    ck_assert_msg(dt < 3.0 * tt_time_scale(), "bounded MOC took %.2f s", dt);
    ck_assert_uint_gt(cells, 0);
    free(out);
    skywcs_free(cel);

    /* A small image: the bound is not reached and the MOC is the unbounded one. */
    cel = tan_wcs(1000, 1e-4);
    unsigned char *all = NULL;
    size_t alen = 0;
    order = hips_survey_order(1e-4);
    ck_assert_int_eq(hips_moc_fits(cel, 1000, 1000, 0, 1e-4, order, 0, &all, &alen, NULL), 0);
    ck_assert_int_eq(hips_moc_fits(cel, 1000, 1000, 0, 1e-4, order, 2048, &out, &len, NULL), 0);
    ck_assert_uint_eq(len, alen);
    ck_assert_int_eq(memcmp(out, all, len), 0);
    ck_assert_int_eq(moc_order(out, len), order);
    free(out);
    free(all);
    skywcs_free(cel);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sizes");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checked_arithmetic);
    tcase_add_test(tc, test_check_image_rule);
    tcase_add_test(tc, test_check_chars);
    tcase_add_test(tc, test_parse_axis_cards);
    tcase_add_test(tc, test_read_info_hostile_shapes);
    tcase_add_test(tc, test_read_info_non_ascii);
    tcase_add_test(tc, test_readers_refuse_overflow);
    tcase_add_test(tc, test_moc_walk_bounded);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
