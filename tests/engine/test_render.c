/* Unit tests of engine/image/render and the PNG encoder: cuts against numpy, stretches, maps. */
#include <check.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image/encode.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/render.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#define DEMO(name) TESSERA_DEMO_DIR "/" name

START_TEST(test_parse)
{
    render_stretch s;
    render_cmap c;
    render_cut k;
    const char *stretches[] = {"linear", "sqrt", "log", "asinh", "power"};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(render_stretch_parse(stretches[i], &s), 0);
        ck_assert_str_eq(render_stretch_name(s), stretches[i]);
    }
    ck_assert_int_eq(render_stretch_parse("Linear", &s), TESS_EINVAL);
    ck_assert_int_eq(render_stretch_parse("", &s), TESS_EINVAL);
    ck_assert_int_eq(render_stretch_parse("sinh", &s), TESS_EINVAL);
    const char *cmaps[] = {"grey", "viridis", "inferno", "magma", "plasma", "cubehelix",
                           "Greys", "coolwarm", "RdBu", "twilight", "turbo", "jet",
                           "viridis_r", "RdBu_r", "jet_r", "cubehelix_r", "grey_r"};
    for (int i = 0; i < 17; i++) {
        ck_assert_int_eq(render_cmap_parse(cmaps[i], &c), 0);
        ck_assert_str_eq(render_cmap_name(c), cmaps[i]);
    }
    ck_assert_int_eq(render_cmap_parse("gray", &c), 0);
    ck_assert_int_eq(c, CMAP_GREY);
    ck_assert_int_eq(render_cmap_parse("gray_r", &c), 0);
    ck_assert_int_eq(c, CMAP_GREY | CMAP_REVERSED);
    ck_assert_int_eq(render_cmap_parse("Greys_r", &c), 0);   /* astroquery's default */
    ck_assert_int_eq(c, CMAP_GREYS | CMAP_REVERSED);
    ck_assert_int_eq(render_cmap_parse("rainbow", &c), TESS_EINVAL);
    ck_assert_int_eq(render_cmap_parse("jet_r_r", &c), TESS_EINVAL);
    ck_assert_int_eq(render_cmap_parse("_r", &c), TESS_EINVAL);
    ck_assert_int_eq(render_cmap_parse("hot_r", &c), TESS_EINVAL);

    ck_assert_int_eq(render_cut_parse("12.5", &k), 0);
    ck_assert_double_eq(k.value, 12.5);
    ck_assert_int_eq(k.is_percent, 0);
    ck_assert_int_eq(render_cut_parse("-3e2", &k), 0);
    ck_assert_double_eq(k.value, -300.0);
    ck_assert_int_eq(k.is_percent, 0);
    ck_assert_int_eq(render_cut_parse("99.5%", &k), 0);
    ck_assert_double_eq(k.value, 99.5);
    ck_assert_int_eq(k.is_percent, 1);
    ck_assert_int_eq(render_cut_parse("0%", &k), 0);
    ck_assert_int_eq(render_cut_parse("100%", &k), 0);
    ck_assert_int_eq(render_cut_parse("+.5", &k), 0);
    ck_assert_double_eq(k.value, 0.5);
    const char *bad[] = {"", "%", "abc", "101%", "-1%", "100.0001%", "nan", "inf", "-inf",
                         "1e999", " 5", "5 ", "0x10", "12.5%%", "1,5", "--1", "e5", "5e"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(render_cut_parse(bad[i], &k) == TESS_EINVAL, "'%s' accepted", bad[i]);
    ck_assert_int_eq(render_cut_parse(NULL, &k), TESS_EINVAL);

    render_params p;
    render_params_default(&p);
    ck_assert_int_eq(p.stretch, STRETCH_LINEAR);
    ck_assert_int_eq(p.cmap, CMAP_GREY);
    ck_assert_double_eq(p.min_cut.value, 0.5);
    ck_assert_int_eq(p.min_cut.is_percent, 1);
    ck_assert_double_eq(p.max_cut.value, 99.5);
    ck_assert_int_eq(p.max_cut.is_percent, 1);
}
END_TEST

static void cuts(const double *d, size_t n, double pmin, double pmax, double *lo, double *hi)
{
    render_params p;
    render_params_default(&p);
    p.min_cut = (render_cut){pmin, 1};
    p.max_cut = (render_cut){pmax, 1};
    ck_assert_int_eq(render_resolve_cuts(d, n, &p, lo, hi), 0);
}

/* Expected values: numpy 1.24.2 numpy.percentile (linear) of the same float64 arrays. */
START_TEST(test_percentiles_numpy)
{
    char err[256];
    double lo, hi;
    double *plane = malloc(105 * 105 * sizeof *plane);
    ck_assert_ptr_nonnull(plane);
    ck_assert_int_eq(fitsimg_read_region(DEMO("l1448_13co.fits"), 0, 20, 0, 0, 105, 105, plane,
                                         err, sizeof err), 0);
    cuts(plane, 105 * 105, 0.5, 99.5, &lo, &hi);
    ck_assert_double_eq(lo, -0.2212762176990509);
    ck_assert_double_eq(hi, 3.0091025066375665);
    cuts(plane, 105 * 105, 37.3, 50, &lo, &hi);
    ck_assert_double_eq(lo, 0.34955813145637515);
    ck_assert_double_eq(hi, 0.52275824546813965);
    cuts(plane, 105 * 105, 0, 100, &lo, &hi);
    ck_assert_double_eq(lo, -0.4656413197517395);
    ck_assert_double_eq(hi, 3.5080227851867676);
    cuts(plane, 105 * 105, 99, 1, &lo, &hi);    /* reversed order is allowed */
    ck_assert_double_eq(lo, 2.7904568481445313);
    ck_assert_double_eq(hi, -0.18115417242050169);
    free(plane);

    /* M13: 1.4 million integer values with long runs of ties */
    double *m13 = malloc(1392 * 1040 * sizeof *m13);
    ck_assert_ptr_nonnull(m13);
    ck_assert_int_eq(fitsimg_read_region(DEMO("M13_blue_0003.fits"), 0, 0, 0, 0, 1392, 1040, m13,
                                         err, sizeof err), 0);
    cuts(m13, 1392 * 1040, 0.5, 99.5, &lo, &hi);
    ck_assert_double_eq(lo, 375.0);
    ck_assert_double_eq(hi, 587.0);
    cuts(m13, 1392 * 1040, 50, 50, &lo, &hi);
    ck_assert_double_eq(lo, 510.0);
    free(m13);

    double *gc = malloc(721 * 720 * sizeof *gc);
    ck_assert_ptr_nonnull(gc);
    ck_assert_int_eq(fitsimg_read_region(DEMO("gc_2mass_k.fits"), 0, 0, 0, 0, 721, 720, gc,
                                         err, sizeof err), 0);
    cuts(gc, 721 * 720, 0.5, 99.5, &lo, &hi);
    ck_assert_double_eq_tol(lo, 477.55363628039936, 1e-9);
    ck_assert_double_eq_tol(hi, 1310.6370738853022, 1e-9);
    free(gc);
}
END_TEST

START_TEST(test_percentiles_nonfinite)
{
    double lo, hi;
    /* finite values 3, 1, 2, 5: numpy.percentile([3,1,2,5], [50,25,10,90]) */
    const double d[] = {3, NAN, 1, INFINITY, 2, 5, -INFINITY};
    cuts(d, 7, 50, 25, &lo, &hi);
    ck_assert_double_eq_tol(lo, 2.5, 1e-15);
    ck_assert_double_eq_tol(hi, 1.75, 1e-15);
    cuts(d, 7, 10, 90, &lo, &hi);
    ck_assert_double_eq_tol(lo, 1.3, 1e-15);
    ck_assert_double_eq_tol(hi, 4.4, 1e-15);

    const double nan3[] = {NAN, NAN, INFINITY};
    cuts(nan3, 3, 0.5, 99.5, &lo, &hi);
    ck_assert_double_eq(lo, 0.0);
    ck_assert_double_eq(hi, 0.0);
    cuts(nan3, 0, 0.5, 99.5, &lo, &hi);
    ck_assert_double_eq(lo, 0.0);
    ck_assert_double_eq(hi, 0.0);

    render_params p;
    render_params_default(&p);
    p.min_cut = (render_cut){-7.5, 0};
    p.max_cut = (render_cut){100, 1};
    ck_assert_int_eq(render_resolve_cuts(d, 7, &p, &lo, &hi), 0);
    ck_assert_double_eq(lo, -7.5);
    ck_assert_double_eq(hi, 5.0);
    p.max_cut = (render_cut){1e6, 0};
    ck_assert_int_eq(render_resolve_cuts(NULL, 0, &p, &lo, &hi), 0);
    ck_assert_double_eq(lo, -7.5);
    ck_assert_double_eq(hi, 1e6);
}
END_TEST

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's linear percentile written out on a sorted array (numpy/lib/function_base.py) */
static double sorted_percentile(const double *s, size_t n, double pct)
{
    double q = pct / 100.0, vi = (double)(n - 1) * q;
    size_t i = vi >= (double)(n - 1) ? n - 1 : (size_t)floor(vi);
    size_t j = i == n - 1 ? i : i + 1;
    double g = vi - (double)i, d = s[j] - s[i];
    return g >= 0.5 ? s[j] - d * (1.0 - g) : s[i] + d * g;
}

/* Selection against sorting on arrays made to defeat naive quickselect: sorted,
 * reversed, constant, few distinct values, organ-pipe, random. */
START_TEST(test_percentiles_vs_sort)
{
    enum { N = 200003 };
    double *d = malloc(N * sizeof *d), *s = malloc(N * sizeof *s);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(s);
    uint64_t x = 88172645463325252ULL;
    const double pcts[] = {0, 0.5, 1, 12.34, 50, 63.7, 99.5, 100};
    for (int kind = 0; kind < 6; kind++) {
        for (size_t i = 0; i < N; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            switch (kind) {
            case 0: d[i] = (double)i; break;
            case 1: d[i] = (double)(N - i); break;
            case 2: d[i] = 42.0; break;
            case 3: d[i] = (double)(x % 5); break;
            case 4: d[i] = (double)(i < N / 2 ? i : N - i); break;
            default: d[i] = (double)(x >> 11) * 0x1p-53 * 1e6 - 3e5; break;
            }
        }
        memcpy(s, d, N * sizeof *d);
        qsort(s, N, sizeof *s, cmp_d);
        for (size_t k = 0; k < sizeof pcts / sizeof pcts[0]; k++) {
            double lo, hi;
            cuts(d, N, pcts[k], 100 - pcts[k], &lo, &hi);
            ck_assert_double_eq(lo, sorted_percentile(s, N, pcts[k]));
            ck_assert_double_eq(hi, sorted_percentile(s, N, 100 - pcts[k]));
        }
    }
    free(d);
    free(s);
}
END_TEST

static void render_row(const double *d, long n, render_stretch st, render_cmap cm, uint8_t *rgba)
{
    render_params p;
    render_params_default(&p);
    p.stretch = st;
    p.cmap = cm;
    p.min_cut = (render_cut){0.0, 0};
    p.max_cut = (render_cut){1.0, 0};
    ck_assert_int_eq(render_rgba(d, n, 1, &p, rgba), 0);
}

/* Levels: 255 levels of the stretches of astropy.visualization, k = round(254 *
 * stretch(t)), shown as grey (255 k + 127) / 254 (integer division) so that both ends are
 * 0 and 255; values computed with numpy from those formulas. */
START_TEST(test_stretches)
{
    const double d[] = {0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, -1.0};
    static const uint8_t want[5][8] = {
        [STRETCH_LINEAR] = {0, 25, 64, 128, 192, 255, 255, 0},
        [STRETCH_SQRT] = {0, 80, 128, 181, 221, 255, 255, 0},
        [STRETCH_LOG] = {0, 171, 204, 230, 244, 255, 255, 0},
        [STRETCH_ASINH] = {0, 75, 141, 197, 231, 255, 255, 0},
        [STRETCH_POWER] = {0, 3, 16, 64, 144, 255, 255, 0},
    };
    uint8_t rgba[8 * 4];
    for (int s = 0; s < 5; s++) {
        render_row(d, 8, (render_stretch)s, CMAP_GREY, rgba);
        for (int i = 0; i < 8; i++) {
            ck_assert_msg(rgba[4 * i] == want[s][i], "%s at %g: %d, want %d",
                          render_stretch_name((render_stretch)s), d[i], rgba[4 * i], want[s][i]);
            ck_assert_int_eq(rgba[4 * i + 1], want[s][i]);
            ck_assert_int_eq(rgba[4 * i + 2], want[s][i]);
            ck_assert_int_eq(rgba[4 * i + 3], 255);
        }
    }

    /* reversed cuts reverse the ramp; equal cuts split at the cut */
    render_params p;
    render_params_default(&p);
    p.min_cut = (render_cut){1.0, 0};
    p.max_cut = (render_cut){0.0, 0};
    ck_assert_int_eq(render_rgba(d, 8, 1, &p, rgba), 0);
    ck_assert_int_eq(rgba[0], 255);
    ck_assert_int_eq(rgba[4 * 2], 192);
    ck_assert_int_eq(rgba[4 * 5], 0);
    p.min_cut = p.max_cut = (render_cut){0.5, 0};
    ck_assert_int_eq(render_rgba(d, 8, 1, &p, rgba), 0);
    ck_assert_int_eq(rgba[4 * 2], 0);
    ck_assert_int_eq(rgba[4 * 3], 0);
    ck_assert_int_eq(rgba[4 * 4], 255);

    ck_assert_int_eq(render_rgba(d, 0, 1, &p, rgba), TESS_EINVAL);
    ck_assert_int_eq(render_rgba(d, 1, -1, &p, rgba), TESS_EINVAL);
}
END_TEST

START_TEST(test_nan_transparent_and_row_flip)
{
    /* 2 x 3, row 0 = FITS row 1 = bottom of the picture */
    const double d[] = {0.0, NAN,     /* FITS row 1 */
                        0.5, 0.5,     /* FITS row 2 */
                        1.0, -INFINITY};  /* FITS row 3 */
    uint8_t rgba[2 * 3 * 4];
    render_params p;
    render_params_default(&p);
    p.min_cut = (render_cut){0.0, 0};
    p.max_cut = (render_cut){1.0, 0};
    p.cmap = CMAP_VIRIDIS;
    ck_assert_int_eq(render_rgba(d, 2, 3, &p, rgba), 0);
    const uint8_t *top = rgba, *mid = rgba + 8, *bottom = rgba + 16;
    ck_assert_int_eq(top[0], 253);           /* 1.0: viridis' last colour */
    ck_assert_int_eq(top[3], 255);
    ck_assert_int_eq(top[4], 68);            /* -inf clipped to the first colour */
    ck_assert_int_eq(top[7], 255);
    ck_assert_int_eq(mid[3], 255);
    ck_assert_int_eq(memcmp(mid, mid + 4, 4), 0);
    ck_assert_int_eq(bottom[0], 68);
    ck_assert_int_eq(bottom[1], 1);
    ck_assert_int_eq(bottom[2], 84);
    ck_assert_int_eq(bottom[3], 255);
    for (int k = 0; k < 4; k++)              /* NaN: transparent (and black) */
        ck_assert_int_eq(bottom[4 + k], 0);

    /* default percentile cuts, all NaN: every pixel transparent */
    const double nan4[] = {NAN, NAN, NAN, NAN};
    render_params_default(&p);
    ck_assert_int_eq(render_rgba(nan4, 2, 2, &p, rgba), 0);
    for (int k = 0; k < 16; k++)
        ck_assert_int_eq(rgba[k], 0);
}
END_TEST

/* Colours at t = 0, 0.5 and 1: matplotlib 3.6.3 colormaps[name](t), times 255, rounded.
 * The listed maps are drawn from anchors, within one level of matplotlib in between;
 * cubehelix is computed, and level 128 is matplotlib's entry 128 exactly. */
START_TEST(test_cmap_endpoints)
{
    static const struct { render_cmap c; uint8_t rgb[3][3]; int midtol; } want[] = {
        {CMAP_GREY,      {{0, 0, 0}, {128, 128, 128}, {255, 255, 255}}, 0},
        {CMAP_VIRIDIS,   {{68, 1, 84}, {33, 145, 140}, {253, 231, 37}}, 1},
        {CMAP_INFERNO,   {{0, 0, 4}, {188, 55, 84}, {252, 255, 164}}, 1},
        {CMAP_MAGMA,     {{0, 0, 4}, {183, 55, 121}, {252, 253, 191}}, 1},
        {CMAP_PLASMA,    {{13, 8, 135}, {204, 71, 120}, {240, 249, 33}}, 1},
        {CMAP_CUBEHELIX, {{0, 0, 0}, {161, 121, 74}, {255, 255, 255}}, 0},
    };
    const double d[] = {0.0, 0.5, 1.0};
    uint8_t rgba[12];
    for (size_t m = 0; m < sizeof want / sizeof want[0]; m++) {
        render_row(d, 3, STRETCH_LINEAR, want[m].c, rgba);
        for (int i = 0; i < 3; i++) {
            int tol = i == 1 ? want[m].midtol : 0;
            for (int j = 0; j < 3; j++)
                ck_assert_msg(abs(rgba[4 * i + j] - want[m].rgb[i][j]) <= tol,
                              "%s t=%g channel %d: %d, want %d", render_cmap_name(want[m].c),
                              d[i], j, rgba[4 * i + j], want[m].rgb[i][j]);
            ck_assert_int_eq(rgba[4 * i + 3], 255);
        }
    }
}
END_TEST

/* ---- PNG ----------------------------------------------------------------------------- */

typedef struct png_src {
    const unsigned char *data;
    size_t len, pos;
} png_src;

static void read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos)
        png_error(png, "truncated");
    memcpy(out, s->data + s->pos, n);
    s->pos += n;
}

/* Colour type of the last PNG decoded as stored in the file (before expansion). */
static int last_color_type;

/* Decodes an 8-bit RGBA or palette PNG from memory as RGBA; returns malloc'd pixels or
 * NULL. */
static uint8_t *decode_png(const unsigned char *b, size_t len, png_uint_32 *w, png_uint_32 *h)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_src src = {b, len, 0};
    uint8_t *volatile px = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(px);
        return NULL;
    }
    png_set_read_fn(png, &src, read_mem);
    png_read_info(png, info);
    int depth, ctype;
    png_get_IHDR(png, info, w, h, &depth, &ctype, NULL, NULL, NULL);
    last_color_type = ctype;
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        /* Palette images (at most 256 colours) expand to the same RGBA values. */
        png_set_palette_to_rgb(png);
        if (png_get_valid(png, info, PNG_INFO_tRNS))
            png_set_tRNS_to_alpha(png);
        else
            png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
        png_read_update_info(png, info);
        png_get_IHDR(png, info, w, h, &depth, &ctype, NULL, NULL, NULL);
    }
    if (ctype == PNG_COLOR_TYPE_GRAY_ALPHA) {
        png_set_gray_to_rgb(png);
        png_read_update_info(png, info);
        png_get_IHDR(png, info, w, h, &depth, &ctype, NULL, NULL, NULL);
    }
    if (depth != 8 || ctype != PNG_COLOR_TYPE_RGB_ALPHA)
        png_error(png, "not 8-bit RGBA");
    px = malloc((size_t)*w * *h * 4);
    for (png_uint_32 y = 0; y < *h; y++)
        png_read_row(png, px + (size_t)y * *w * 4, NULL);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    return px;
}

START_TEST(test_png_roundtrip)
{
    enum { W = 37, H = 23 };
    uint8_t rgba[W * H * 4];
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < sizeof rgba; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        rgba[i] = (uint8_t)x;
    }
    unsigned char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(png_encode_rgba(rgba, W, H, &out, &len), 0);
    ck_assert_uint_gt(len, 8);
    ck_assert_int_eq(memcmp(out, "\x89PNG\r\n\x1a\n", 8), 0);
    png_uint_32 w = 0, h = 0;
    uint8_t *back = decode_png(out, len, &w, &h);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(w, W);
    ck_assert_uint_eq(h, H);
    ck_assert_int_eq(memcmp(back, rgba, sizeof rgba), 0);
    ck_assert_int_eq(last_color_type, PNG_COLOR_TYPE_RGB_ALPHA);   /* > 256 colours */
    free(back);
    free(out);

    /* a rendering of real data, with transparent pixels: RGBA through a colour map, grey
     * and alpha through the grey one, each decoding to the same RGBA (never a palette,
     * whose indices readers such as PIL would hand out) */
    char err[256];
    double *plane = malloc(105 * 105 * sizeof *plane);
    uint8_t *img = malloc(105 * 105 * 4);
    ck_assert_ptr_nonnull(plane);
    ck_assert_ptr_nonnull(img);
    ck_assert_int_eq(fitsimg_read_region(DEMO("l1448_13co.fits"), 0, 20, 0, 0, 105, 105, plane,
                                         err, sizeof err), 0);
    plane[0] = NAN;
    render_params p;
    render_params_default(&p);
    p.cmap = CMAP_MAGMA;
    p.stretch = STRETCH_ASINH;
    ck_assert_int_eq(render_rgba(plane, 105, 105, &p, img), 0);
    ck_assert_int_eq(img[(104 * 105 + 0) * 4 + 3], 0);   /* FITS (0,0) at the bottom left */
    ck_assert_int_eq(png_encode_rgba(img, 105, 105, &out, &len), 0);
    back = decode_png(out, len, &w, &h);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(last_color_type, PNG_COLOR_TYPE_RGB_ALPHA);
    ck_assert_int_eq(memcmp(back, img, 105 * 105 * 4), 0);
    free(back);
    free(out);
    p.cmap = CMAP_GREY;
    ck_assert_int_eq(render_rgba(plane, 105, 105, &p, img), 0);
    ck_assert_int_eq(png_encode_rgba(img, 105, 105, &out, &len), 0);
    back = decode_png(out, len, &w, &h);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(last_color_type, PNG_COLOR_TYPE_GRAY_ALPHA);
    ck_assert_int_eq(memcmp(back, img, 105 * 105 * 4), 0);
    free(back);
    free(out);
    free(img);
    free(plane);

    ck_assert_int_eq(png_encode_rgba(rgba, 0, H, &out, &len), TESS_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(png_encode_rgba(NULL, W, H, &out, &len), TESS_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("render");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_percentiles_numpy);
    tcase_add_test(tc, test_percentiles_nonfinite);
    tcase_add_test(tc, test_percentiles_vs_sort);
    tcase_add_test(tc, test_stretches);
    tcase_add_test(tc, test_nan_transparent_and_row_flip);
    tcase_add_test(tc, test_cmap_endpoints);
    tcase_add_test(tc, test_png_roundtrip);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
