/* Unit tests of engine/image/pyramid: levels against the block means of level 0, the all-finite shortcut, the top level. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "engine/base/error.h"
#include "engine/image/pyramid.h"
#include "tests/testutil.h"

/* A test plane: smooth values, NaN on a scattered set when `holes`. */
static rp_plane make_plane(long nx, long ny, rp_dtype dt, int holes)
{
    size_t n = (size_t)nx * (size_t)ny;
    rp_plane p = { malloc(n * (dt == RP_F64 ? sizeof(double) : sizeof(float))), dt, nx, ny };
    ck_assert_ptr_nonnull(p.data);
    for (size_t k = 0; k < n; k++) {
        double v = 10.0 + sin(0.3 * (double)(k % (size_t)nx)) + 0.01 * (double)(k / (size_t)nx);
        if (holes && (k % 7 == 3 || (k / (size_t)nx) % 5 == 2))
            v = NAN;
        if (dt == RP_F64)
            ((double *)p.data)[k] = v;
        else
            ((float *)p.data)[k] = (float)v;
    }
    return p;
}

/* Every pixel of level k is the mean of the finite level-0 pixels of its block (NaN
 * when none), to the precision of the type. */
static void check_block_means(const rp_plane *p0, int k, const rp_plane *lv)
{
    long b = 1L << k;
    ck_assert_int_eq(lv->nx, (p0->nx + b - 1) / b);
    ck_assert_int_eq(lv->ny, (p0->ny + b - 1) / b);
    ck_assert_int_eq(lv->dtype, p0->dtype);
    double tol = p0->dtype == RP_F64 ? 1e-12 : 1e-6;
    for (long j = 0; j < lv->ny; j++) {
        for (long i = 0; i < lv->nx; i++) {
            double sum = 0.0;
            long n = 0;
            for (long y = j * b; y < (j + 1) * b && y < p0->ny; y++)
                for (long x = i * b; x < (i + 1) * b && x < p0->nx; x++) {
                    double v = rp_plane_get(p0, x, y);
                    if (isfinite(v)) {
                        sum += v;
                        n++;
                    }
                }
            double got = rp_plane_get(lv, i, j);
            if (n == 0)
                ck_assert_msg(isnan(got), "level %d (%ld, %ld): %g, no finite pixel", k, i, j, got);
            else
                ck_assert_msg(fabs(got - sum / n) <= tol * fabs(sum / n),
                              "level %d (%ld, %ld): %.17g, block mean %.17g", k, i, j, got,
                              sum / n);
        }
    }
}

START_TEST(test_levels_are_block_means)
{
    static const long sizes[][2] = { { 37, 23 }, { 64, 64 }, { 1, 9 }, { 50, 1 } };
    for (int s = 0; s < 4; s++)
        for (int dt = 0; dt < 2; dt++)
            for (int holes = 0; holes < 2; holes++) {
                rp_plane p0 = make_plane(sizes[s][0], sizes[s][1], dt ? RP_F64 : RP_F32, holes);
                int top = pyramid_top_level(p0.nx, p0.ny);
                for (int k = 1; k <= top; k++) {
                    rp_plane lv;
                    ck_assert_int_eq(pyramid_level(&p0, k, &lv), 0);
                    check_block_means(&p0, k, &lv);
                    if (k == top)
                        ck_assert(lv.nx == 1 && lv.ny == 1);
                    free(lv.data);
                }
                rp_plane none;
                ck_assert_int_eq(pyramid_level(&p0, top + 1, &none), TESS_EINVAL);
                ck_assert_int_eq(pyramid_level(&p0, 0, &none), TESS_EINVAL);
                ck_assert_ptr_null(none.data);
                free(p0.data);
            }
}
END_TEST

/* Without a non-finite pixel, reducing without counts (each pixel weighted by its
 * block's area) gives the same bits as reducing with them, level after level. */
START_TEST(test_all_finite_shortcut_is_bit_identical)
{
    rp_plane p0 = make_plane(45, 30, RP_F32, 0);
    rp_plane a = p0, b = p0;
    uint32_t *ca = NULL;
    for (int k = 0; k < pyramid_top_level(45, 30); k++) {
        rp_plane na, nb;
        uint32_t *nca = NULL;
        ck_assert_int_eq(pyramid_reduce(&a, ca, k, 45, 30, &na, &nca), 0);
        ck_assert_int_eq(pyramid_reduce(&b, NULL, k, 45, 30, &nb, NULL), 0);
        ck_assert(na.nx == nb.nx && na.ny == nb.ny);
        for (long q = 0; q < na.nx * na.ny; q++)
            ck_assert(((float *)na.data)[q] == ((float *)nb.data)[q]);
        long bl = 2L << k;   /* the block of pixel (0, 0), cut by the plane's edges */
        ck_assert_uint_eq(nca[0], (uint32_t)((bl < 45 ? bl : 45) * (bl < 30 ? bl : 30)));
        if (k > 0) {
            free(a.data);
            free(b.data);
        }
        free(ca);
        a = na;
        b = nb;
        ca = nca;
    }
    free(a.data);
    free(b.data);
    free(ca);
    free(p0.data);
}
END_TEST

START_TEST(test_top_level)
{
    ck_assert_int_eq(pyramid_top_level(1, 1), 0);
    ck_assert_int_eq(pyramid_top_level(2, 1), 1);
    ck_assert_int_eq(pyramid_top_level(891, 893), 10);
    ck_assert_int_eq(pyramid_top_level(1024, 3), 10);
    ck_assert_int_eq(pyramid_top_level(1025, 3), 11);
    ck_assert_int_eq(pyramid_top_level(1L << 40, 1), PYRAMID_MAX_LEVEL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pyramid");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_levels_are_block_means);
    tcase_add_test(tc, test_all_finite_shortcut_is_bit_identical);
    tcase_add_test(tc, test_top_level);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
