/* Unit tests of engine/base/byteswap: big-endian conversion of 4- and 8-byte values and the float32 footprint pass. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/byteswap.h"
#include "tests/testutil.h"

/* The big-endian bytes of v, written out byte by byte. */
static void be_bytes(uint64_t v, size_t size, unsigned char *out)
{
    for (size_t b = 0; b < size; b++)
        out[b] = (unsigned char)(v >> (8 * (size - 1 - b)));
}

/* Every length from 0 to 80 at every offset 0..3 into the buffer (the AVX2 and SSE2
 * bodies, the scalar tail, unaligned starts), for both sizes; twice is the identity. */
START_TEST(test_swap_is_big_endian)
{
    for (size_t size = 4; size <= 8; size += 4) {
        for (size_t off = 0; off < 4; off++) {
            for (size_t n = 0; n <= 80; n++) {
                unsigned char raw[8 * 81 + 4], want[8 * 81];
                uint64_t vals[81];
                for (size_t i = 0; i < n; i++) {
                    vals[i] = 0x0102030405060708ULL * (i + 1) + 0x1111111111ULL * i;
                    if (size == 4)
                        vals[i] &= 0xffffffffULL;
                    be_bytes(vals[i], size, want + i * size);
                    if (size == 4) {
                        uint32_t v = (uint32_t)vals[i];
                        memcpy(raw + off + i * size, &v, 4);
                    } else {
                        memcpy(raw + off + i * size, &vals[i], 8);
                    }
                }
                tess_be_swap(raw + off, n, size);
                ck_assert_msg(memcmp(raw + off, want, n * size) == 0, "size %zu, n %zu, off %zu",
                              size, n, off);
                tess_be_swap(raw + off, n, size);
                for (size_t i = 0; i < n; i++) {
                    uint64_t v = 0;
                    memcpy(&v, raw + off + i * size, size);
                    ck_assert(v == vals[i]);
                }
            }
        }
    }
}
END_TEST

START_TEST(test_footprint_and_swap)
{
    for (size_t n = 0; n <= 100; n++) {
        float d[100], orig[100];
        unsigned char fp[100];
        for (size_t i = 0; i < n; i++) {
            d[i] = i % 5 == 1 ? NAN : i % 7 == 2 ? INFINITY : i % 11 == 3 ? -INFINITY
                 : i % 13 == 4 ? 1e-41f : (float)i - 20.5f;
            orig[i] = d[i];
        }
        memset(fp, 7, sizeof fp);
        tess_be_swap_f32_finite(d, fp, n);
        for (size_t i = 0; i < n; i++) {
            ck_assert_int_eq(fp[i], isfinite(orig[i]) ? 1 : 0);
            unsigned char want[4];
            uint32_t u;
            memcpy(&u, &orig[i], 4);
            be_bytes(u, 4, want);
            ck_assert(memcmp((unsigned char *)d + 4 * i, want, 4) == 0);
        }
        if (n < 100)
            ck_assert_int_eq(fp[n], 7);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("byteswap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_swap_is_big_endian);
    tcase_add_test(tc, test_footprint_and_swap);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
