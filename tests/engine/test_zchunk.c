/* Unit tests of engine/image/zchunk (packing to numpy dtypes; raw, zlib, gzip and Blosc
 * storage) and of png_encode_grey (engine/image/encode). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <blosc.h>
#include <zlib.h>

#include "engine/base/error.h"
#include "engine/image/encode.h"
#include "engine/image/zchunk.h"
#include "tests/testutil.h"

START_TEST(test_names)
{
    ck_assert_str_eq(zchunk_numpy_name(ZCHUNK_U1), "|u1");
    ck_assert_str_eq(zchunk_numpy_name(ZCHUNK_I2), "<i2");
    ck_assert_str_eq(zchunk_numpy_name(ZCHUNK_F4), "<f4");
    ck_assert_str_eq(zchunk_v3_name(ZCHUNK_U2), "uint16");
    ck_assert_str_eq(zchunk_v3_name(ZCHUNK_I4), "int32");
    ck_assert_int_eq(zchunk_esize(ZCHUNK_U4), 4);
    ck_assert_int_eq(zchunk_esize(ZCHUNK_I1), 1);
    ck_assert(zchunk_is_integer(ZCHUNK_U2));
    ck_assert(!zchunk_is_integer(ZCHUNK_F4));
}
END_TEST

START_TEST(test_pack)
{
    unsigned char b[16];
    size_t bad = 99;
    ck_assert_int_eq(zchunk_pack(ZCHUNK_U2, (const double[]){0, 1, 258, 65535}, 4, b, &bad), 0);
    static const unsigned char u2[] = {0, 0, 1, 0, 2, 1, 255, 255};
    ck_assert_mem_eq(b, u2, 8);
    ck_assert_int_eq(zchunk_pack(ZCHUNK_I2, (const double[]){-1, -32768, 32767}, 3, b, NULL), 0);
    static const unsigned char i2[] = {255, 255, 0, 128, 255, 127};
    ck_assert_mem_eq(b, i2, 6);
    ck_assert_int_eq(zchunk_pack(ZCHUNK_I4, (const double[]){-2}, 1, b, NULL), 0);
    static const unsigned char i4[] = {254, 255, 255, 255};
    ck_assert_mem_eq(b, i4, 4);
    /* Out of range, a fraction, NaN: refused, with the index of the first. */
    ck_assert_int_eq(zchunk_pack(ZCHUNK_U1, (const double[]){3, 256}, 2, b, &bad), TESS_ERANGE);
    ck_assert_uint_eq(bad, 1);
    ck_assert_int_eq(zchunk_pack(ZCHUNK_I2, (const double[]){0.5}, 1, b, &bad), TESS_ERANGE);
    ck_assert_uint_eq(bad, 0);
    ck_assert_int_eq(zchunk_pack(ZCHUNK_U2, (const double[]){1, NAN}, 2, b, &bad), TESS_ERANGE);
    ck_assert_uint_eq(bad, 1);
    ck_assert_int_eq(zchunk_pack(ZCHUNK_U1, (const double[]){-1}, 1, b, &bad), TESS_ERANGE);
    /* float32 keeps NaN and rounds. */
    ck_assert_int_eq(zchunk_pack(ZCHUNK_F4, (const double[]){NAN, 0.1}, 2, b, NULL), 0);
    float f[2];
    memcpy(f, b, 8);   /* the tests run on little-endian machines */
    ck_assert(isnan(f[0]));
    ck_assert(f[1] == 0.1f);
}
END_TEST

START_TEST(test_compress_roundtrip)
{
    enum { N = 40000 };
    uint16_t *v = malloc(N * 2);
    ck_assert_ptr_nonnull(v);
    for (int i = 0; i < N; i++)
        v[i] = (uint16_t)(1000 + (i * 7919) % 97);
    unsigned char *out = NULL, *back = malloc(N * 2);
    size_t len = 0;
    ck_assert_int_eq(zchunk_compress(ZCHUNK_RAW, 1, 2, v, N * 2, &out, &len), 0);
    ck_assert_uint_eq(len, N * 2);
    ck_assert_mem_eq(out, v, N * 2);
    free(out);
    /* zlib and gzip: inflate with the matching window bits gives the bytes back. */
    for (int gz = 0; gz < 2; gz++) {
        ck_assert_int_eq(zchunk_compress(gz ? ZCHUNK_GZIP : ZCHUNK_ZLIB, 1, 2, v, N * 2, &out,
                                         &len), 0);
        ck_assert(len < N * 2);
        if (gz)
            ck_assert(out[0] == 0x1f && out[1] == 0x8b);
        else
            ck_assert(out[0] == 0x78);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        ck_assert_int_eq(inflateInit2(&zs, gz ? 31 : 15), Z_OK);
        zs.next_in = out;
        zs.avail_in = (uInt)len;
        zs.next_out = back;
        zs.avail_out = N * 2;
        ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
        ck_assert_uint_eq(zs.total_out, N * 2);
        inflateEnd(&zs);
        ck_assert_mem_eq(back, v, N * 2);
        free(out);
    }
    ck_assert_int_eq(zchunk_compress(ZCHUNK_BLOSC_LZ4, 5, 2, v, N * 2, &out, &len), 0);
    ck_assert(len < N * 2);
    ck_assert_int_eq(blosc_decompress_ctx(out, back, N * 2, 1), N * 2);
    ck_assert_mem_eq(back, v, N * 2);
    free(out);
    ck_assert_int_eq(zchunk_compress(ZCHUNK_ZLIB, 0, 2, v, 2, &out, &len), TESS_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(zchunk_compress(ZCHUNK_BLOSC_LZ4, 5, 0, v, 2, &out, &len), TESS_EINVAL);
    free(back);
    free(v);
}
END_TEST

START_TEST(test_png_grey)
{
    unsigned char *out = NULL;
    size_t len = 0;
    static const unsigned char px[6] = {0, 1, 2, 3, 4, 255};
    ck_assert_int_eq(png_encode_grey(px, 3, 2, 8, &out, &len), 0);
    ck_assert(len > 33 && memcmp(out, "\x89PNG", 4) == 0);
    ck_assert_int_eq(out[24], 8);    /* IHDR bit depth */
    ck_assert_int_eq(out[25], 0);    /* colour type greyscale */
    free(out);
    ck_assert_int_eq(png_encode_grey(px, 3, 1, 16, &out, &len), 0);
    ck_assert_int_eq(out[24], 16);
    free(out);
    ck_assert_int_eq(png_encode_grey(px, 3, 2, 4, &out, &len), TESS_EINVAL);
    ck_assert_ptr_null(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("zchunk");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_pack);
    tcase_add_test(tc, test_compress_roundtrip);
    tcase_add_test(tc, test_png_grey);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
