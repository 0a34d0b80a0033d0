/* Unit tests of util/buf: growth, the hard cap, detach. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"

START_TEST(test_add_and_printf)
{
    buf b;
    buf_init(&b, 1024);
    ck_assert_int_eq(buf_adds(&b, "NAXIS1  = "), 0);
    ck_assert_int_eq(buf_printf(&b, "%20d", 891), 0);
    ck_assert_uint_eq(b.len, 30);
    ck_assert_str_eq(b.data, "NAXIS1  =                  891");
    buf_release(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(test_cap_refuses_and_keeps_contents)
{
    buf b;
    buf_init(&b, 8);
    ck_assert_int_eq(buf_adds(&b, "12345678"), 0);
    ck_assert_int_eq(buf_adds(&b, "9"), TESS_ERANGE);
    ck_assert_int_eq(buf_printf(&b, "%d", 1), TESS_ERANGE);
    ck_assert_uint_eq(b.len, 8);
    ck_assert_str_eq(b.data, "12345678");
    buf_release(&b);
}
END_TEST

START_TEST(test_growth_many_appends)
{
    buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 10000; i++)
        ck_assert_int_eq(buf_add(&b, "abcdefgh", 8), 0);
    ck_assert_uint_eq(b.len, 80000);
    ck_assert_int_eq(memcmp(b.data + 79992, "abcdefgh", 8), 0);
    size_t len = 0;
    char *p = buf_detach(&b, &len);
    ck_assert_uint_eq(len, 80000);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    free(p);
}
END_TEST

START_TEST(test_reset_keeps_allocation)
{
    buf b;
    buf_init(&b, 100);
    buf_adds(&b, "hello");
    buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    ck_assert_int_eq(buf_adds(&b, "x"), 0);
    ck_assert_str_eq(b.data, "x");
    buf_release(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_add_and_printf);
    tcase_add_test(tc, test_cap_refuses_and_keeps_contents);
    tcase_add_test(tc, test_growth_many_appends);
    tcase_add_test(tc, test_reset_keeps_allocation);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
