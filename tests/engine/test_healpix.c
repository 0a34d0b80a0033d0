/* Unit tests of engine/hips/healpix: HiPS tile layout against Hipsgen's and chealpix, orders, footprints, rendering. */
#include <check.h>
#include <chealpix.h>
#include <fitsio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/hips/healpix.h"
#include "engine/sky/coordmap.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#define DEMO(name) TESSERA_DEMO_DIR "/" name

/* ---- an independent statement of the tile layout ------------------------------------ */

/* Hipsgen's xy2hpx table (CDS Aladin, HiPS generator: Context.fillUp and
 * createHealpixOrder), rewritten from its algorithm: entry y W + x, with y counted from
 * the bottom of the tile (Aladin's Fits.setPixelDouble "y compte a partir du bas", the
 * order in which FITS stores rows), receives the nested index relative to the tile.  At
 * each level the quadrant number is (dg << 1) | bh with dg = 1 on the right half and
 * bh = 1 on the first half of the rows, and each quadrant is numbered recursively in the
 * order its pixels come. */
static void fill_up(int *npix, int nsize, const int *pos)
{
    int size = nsize * nsize, q4 = size / 4;
    int *fils = malloc(sizeof(int) * (size_t)size);
    int nb[4] = {0, 0, 0, 0};
    ck_assert_ptr_nonnull(fils);
    for (int i = 0; i < size; i++) {
        int dg = (i % nsize) < (nsize / 2) ? 0 : 1;
        int bh = i < (size / 2) ? 1 : 0;
        int quad = (dg << 1) | bh;
        int j = pos ? pos[i] : i;
        npix[j] = npix[j] << 2 | quad;
        fils[quad * q4 + nb[quad]++] = j;
    }
    if (size > 4)
        for (int q = 0; q < 4; q++)
            fill_up(npix, nsize / 2, fils + q * q4);
    free(fils);
}

static int *hipsgen_xy2hpx(int w)
{
    int *t = calloc((size_t)w * (size_t)w, sizeof(int));
    ck_assert_ptr_nonnull(t);
    fill_up(t, w, NULL);
    return t;
}

/* Great-circle distance in degrees. */
static double angdist(double l1, double b1, double l2, double b2)
{
    double d = M_PI / 180.0;
    double sb = sin((b2 - b1) * d / 2), sl = sin((l2 - l1) * d / 2);
    return 2.0 * asin(sqrt(sb * sb + cos(b1 * d) * cos(b2 * d) * sl * sl)) / d;
}

/* The sky position of nested cell `ipix` at `order` from chealpix, in degrees. */
static void cell_centre(int order, int64_t ipix, double *lon, double *lat)
{
    double theta, phi;
    pix2ang_nest64((int64_t)1 << order, ipix, &theta, &phi);
    *lon = phi * 180.0 / M_PI;
    *lat = 90.0 - theta * 180.0 / M_PI;
}

/* The 2-D celestial WCS of a demo file and its size. */
static skywcs *demo_wcs(const char *path, long *nx, long *ny)
{
    fitsimg_info fi;
    char err[256] = "";
    ck_assert_msg(fitsimg_read_info(path, 0, &fi, err, sizeof err) == 0, "%s", err);
    skywcs *w = NULL;
    ck_assert_msg(skywcs_parse(fi.header, fi.nkeys, &w, err, sizeof err) == 0, "%s", err);
    skywcs *cel = skywcs_celestial(w);
    ck_assert_ptr_nonnull(cel);
    *nx = fi.naxes[0];
    *ny = fi.naxes[1];
    skywcs_free(w);
    fitsimg_info_release(&fi);
    return cel;
}

/* ---- tests --------------------------------------------------------------------------- */

START_TEST(test_counts_and_dirs)
{
    ck_assert_int_eq(hips_npix_count(0), 12);
    ck_assert_int_eq(hips_npix_count(3), 768);
    ck_assert_int_eq(hips_npix_count(29), (int64_t)12 << 58);
    ck_assert_int_eq(hips_npix_count(30), 0);
    ck_assert_int_eq(hips_npix_count(-1), 0);
    ck_assert(hips_tile_valid(0, 0));
    ck_assert(hips_tile_valid(0, 11));
    ck_assert(!hips_tile_valid(0, 12));
    ck_assert(hips_tile_valid(3, 767));
    ck_assert(!hips_tile_valid(3, 768));
    ck_assert(!hips_tile_valid(3, -1));
    ck_assert(hips_tile_valid(29, ((int64_t)12 << 58) - 1));
    ck_assert(!hips_tile_valid(30, 0));
    ck_assert(!hips_tile_valid(-1, 0));
    /* HiPS 1.0, 4.1: Dir = Npix / 10000 * 10000 */
    ck_assert_int_eq(hips_dir(0), 0);
    ck_assert_int_eq(hips_dir(9999), 0);
    ck_assert_int_eq(hips_dir(10000), 10000);
    ck_assert_int_eq(hips_dir(30889), 30000);
    ck_assert_int_eq(hips_dir(1462680), 1460000);
    ck_assert_int_eq(hips_dir(123456789012LL), 123456780000LL);
}
END_TEST

START_TEST(test_subindex_round_trip)
{
    /* (Check writes every assertion's location to a file: loops count failures and assert
     * once.) */
    for (int shift = 1; shift <= 9; shift++) {
        long w = 1L << shift, bad = 0;
        unsigned char *seen = calloc((size_t)w * (size_t)w, 1);
        for (long y = 0; y < w; y++)
            for (long x = 0; x < w; x++) {
                uint64_t s = hips_tile_subindex(shift, x, y, HIPS_ROWS_FITS);
                if (s >= (uint64_t)(w * w) || seen[s]) {
                    bad++;
                    continue;
                }
                seen[s] = 1;
                long bx, by, tx, ty;
                hips_tile_xy(shift, s, HIPS_ROWS_FITS, &bx, &by);
                hips_tile_xy(shift, s, HIPS_ROWS_TOPDOWN, &tx, &ty);
                /* The same cell is row w - 1 - y counted from the top. */
                bad += bx != x || by != y || tx != x || ty != w - 1 - y ||
                       hips_tile_subindex(shift, x, w - 1 - y, HIPS_ROWS_TOPDOWN) != s;
            }
        ck_assert_msg(bad == 0, "shift %d: %ld pixels wrong", shift, bad);
        free(seen);
    }
}
END_TEST

START_TEST(test_layout_is_hipsgen)
{
    /* The 4 x 4 tile as a picture (top row first) and as FITS stores it (row 1 first). */
    static const int picture[4][4] = {
        {0, 2, 8, 10},
        {1, 3, 9, 11},
        {4, 6, 12, 14},
        {5, 7, 13, 15},
    };
    for (long r = 0; r < 4; r++)
        for (long x = 0; x < 4; x++) {
            ck_assert_uint_eq(hips_tile_subindex(2, x, r, HIPS_ROWS_TOPDOWN), picture[r][x]);
            ck_assert_uint_eq(hips_tile_subindex(2, x, 3 - r, HIPS_ROWS_FITS), picture[r][x]);
        }
    /* Hipsgen's table, for every width up to the 512 of real tiles. */
    for (int shift = 1; shift <= 9; shift++) {
        long w = 1L << shift;
        int *t = hipsgen_xy2hpx((int)w);
        long bad = 0, bx = -1, by = -1;
        for (long y = 0; y < w; y++)
            for (long x = 0; x < w; x++)
                if (hips_tile_subindex(shift, x, y, HIPS_ROWS_FITS) != (uint64_t)t[y * w + x]) {
                    if (bad++ == 0)
                        bx = x, by = y;
                }
        ck_assert_msg(bad == 0, "W %ld: %ld pixels differ from Hipsgen's table, first (%ld, %ld)",
                      w, bad, bx, by);
        if (shift == 2)
            ck_assert_int_eq(t[0], 5);   /* FITS row 1 starts with cell 5 */
        free(t);
    }
}
END_TEST

START_TEST(test_orientation)
{
    /* Norder0/Npix4 is the equatorial base cell centred on (0, 0), with its corners at
     * S (0, -41.81), E (45, 0), N (0, 41.81), W (315, 0).  In the picture of the tile the
     * south corner is at the top left, north at the bottom right, east at the bottom left
     * and west at the top right: the sky seen mirrored. */
    const int shift = 4;
    const long w = 1L << shift;
    double lon[256], lat[256];
    ck_assert_int_eq(hips_tile_centres(0, 4, shift, HIPS_ROWS_TOPDOWN, lon, lat), 0);
    double zlat = asin(2.0 / 3.0) * 180.0 / M_PI;
    struct { long x, y; double l, b; } c[4] = {
        {0, 0, 0.0, -zlat}, {w - 1, w - 1, 0.0, zlat}, {0, w - 1, 45.0, 0.0},
        {w - 1, 0, 315.0, 0.0}};
    for (int k = 0; k < 4; k++) {
        long i = c[k].y * w + c[k].x;
        double d = angdist(lon[i], lat[i], c[k].l, c[k].b);
        ck_assert_msg(d < 4.0, "corner %d at (%g, %g), %g deg from (%g, %g)", k, lon[i], lat[i],
                      d, c[k].l, c[k].b);
    }
    /* Rows go north-east (south corner to east corner) downwards, columns north-west. */
    ck_assert_double_gt(lat[(w - 1) * w], lat[0]);
    ck_assert_double_gt(lat[w - 1], lat[0]);
    /* The same holds in a polar cell (Npix0: N corner at the pole) and a southern one. */
    ck_assert_int_eq(hips_tile_centres(0, 0, shift, HIPS_ROWS_TOPDOWN, lon, lat), 0);
    ck_assert_double_gt(lat[w * w - 1], 85.0);
    ck_assert_double_lt(fabs(lat[0]), 5.0);
    ck_assert_int_eq(hips_tile_centres(0, 8, shift, HIPS_ROWS_TOPDOWN, lon, lat), 0);
    ck_assert_double_lt(lat[0], -85.0);
    ck_assert_double_lt(fabs(lat[w * w - 1]), 5.0);
    /* The FITS WCS of a tile says the same: CD has a positive determinant (mirrored). */
    char *cards;
    int nk;
    ck_assert_int_eq(hips_tile_header(3, 300, 9, 0, &cards, &nk), 0);
    char v1[80], v2[80], v3[80], v4[80];
    ck_assert(fitscard_get(cards, nk, "CD1_1", v1, sizeof v1));
    ck_assert(fitscard_get(cards, nk, "CD1_2", v2, sizeof v2));
    ck_assert(fitscard_get(cards, nk, "CD2_1", v3, sizeof v3));
    ck_assert(fitscard_get(cards, nk, "CD2_2", v4, sizeof v4));
    double det = atof(v1) * atof(v4) - atof(v2) * atof(v3);
    ck_assert_double_gt(det, 0.0);
    free(cards);
}
END_TEST

START_TEST(test_centres_against_chealpix)
{
    /* Tiles of every kind of base cell (north polar, equatorial, south polar), from order
     * 0 to 20; each tile pixel's cell from Hipsgen's table, its centre from chealpix. */
    static const struct { int order; int64_t npix; } tiles[] = {
        {0, 0}, {0, 4}, {0, 6}, {0, 11}, {3, 300}, {3, 767}, {5, 1234}, {9, 1462680},
        {12, 123456789}, {20, ((int64_t)12 << 40) - 1}};
    const int shift = 9;
    const long w = 512;
    int *t = hipsgen_xy2hpx((int)w);
    double *lon = malloc(sizeof(double) * 512 * 512), *lat = malloc(sizeof(double) * 512 * 512);
    double *x = malloc(sizeof(double) * 512 * 512), *y = malloc(sizeof(double) * 512 * 512);
    double *wl = malloc(sizeof(double) * 512 * 512), *wb = malloc(sizeof(double) * 512 * 512);
    for (size_t k = 0; k < sizeof(tiles) / sizeof(tiles[0]); k++) {
        int order = tiles[k].order;
        int64_t npix = tiles[k].npix;
        ck_assert_int_eq(hips_tile_centres(order, npix, shift, HIPS_ROWS_FITS, lon, lat), 0);
        skywcs *tw = hips_tile_wcs(order, npix, shift, k % 2);
        ck_assert_ptr_nonnull(tw);
        for (long j = 0; j < w; j++)
            for (long i = 0; i < w; i++) {
                x[j * w + i] = (double)i;
                y[j * w + i] = (double)j;
            }
        ck_assert_int_eq(skywcs_pix2sky(tw, (size_t)(w * w), x, y, wl, wb), 0);
        double cell = hips_cell_size(order + shift), worst1 = 0.0, worst2 = 0.0;
        for (long j = 0; j < w; j++)
            for (long i = 0; i < w; i++) {
                int64_t ip = (npix << (2 * shift)) + t[j * w + i];
                double l, b;
                cell_centre(order + shift, ip, &l, &b);
                double d1 = angdist(l, b, lon[j * w + i], lat[j * w + i]);
                double d2 = angdist(l, b, wl[j * w + i], wb[j * w + i]);
                worst1 = d1 > worst1 || isnan(d1) ? d1 : worst1;
                worst2 = d2 > worst2 || isnan(d2) ? d2 : worst2;
            }
        /* hips_tile_centres is chealpix itself; the HPX WCS of the tile agrees to
         * rounding (1e-12 degree, far below a cell even at order 29). */
        ck_assert_msg(worst1 < 1e-12 && worst2 < 1e-9 && worst2 < 1e-4 * cell,
                      "Norder%d/Npix%lld: %g / %g deg", order, (long long)npix, worst1, worst2);
        /* The cell of each centre is the cell itself (ang2pix of the centre). */
        int64_t ip = hips_ang2pix(order + shift, lon[777], lat[777]);
        ck_assert_int_eq(ip, (npix << (2 * shift)) + t[777]);
        ck_assert_int_eq(hips_ang2pix(order, lon[777], lat[777]), npix);
        skywcs_free(tw);
    }
    free(t);
    free(lon);
    free(lat);
    free(x);
    free(y);
    free(wl);
    free(wb);
    double l, b;
    ck_assert_int_eq(hips_tile_centres(21, 0, 9, HIPS_ROWS_FITS, &l, &b), TESS_EINVAL);
    ck_assert_int_eq(hips_tile_centres(3, 768, 9, HIPS_ROWS_FITS, &l, &b), TESS_EINVAL);
}
END_TEST

START_TEST(test_cell_sizes_and_orders)
{
    /* HiPS 1.0, table of 4.2.1: pixel angular size of 512 x 512 tiles by order. */
    ck_assert_double_eq_tol(hips_cell_size(9) * 60.0, 6.871, 0.001);          /* order 0 */
    ck_assert_double_eq_tol(hips_cell_size(12) * 3600.0, 51.53, 0.01);        /* order 3 */
    ck_assert_double_eq_tol(hips_cell_size(16) * 3600.0, 3.221, 0.001);       /* order 7 */
    ck_assert_double_eq_tol(hips_cell_size(18) * 3600e3, 805.2, 0.1);         /* order 9 */
    ck_assert_double_eq_tol(hips_cell_size(0), 58.63, 0.01);                  /* one base cell */
    /* The XMM example of 4.2.1: 4" pixels need order 16 cells, tiles of order 7. */
    ck_assert_int_eq(hips_order_for_scale(4.0 / 3600.0, 9), 7);
    ck_assert_int_eq(hips_order_for_scale(3.22 / 3600.0, 9), 8);
    ck_assert_int_eq(hips_order_for_scale(3.222 / 3600.0, 9), 7);
    ck_assert_int_eq(hips_order_for_scale(90.0, 9), 0);
    ck_assert_int_eq(hips_order_for_scale(1e-12, 9), 20);
    ck_assert_int_eq(hips_order_for_scale(0.0, 9), 0);
    ck_assert_int_eq(hips_order_for_scale(NAN, 9), 0);
    /* Reduction levels: 2^k input pixels per tile pixel at most. */
    ck_assert_int_eq(hips_source_level(9, 9, 1.0 / 3600.0), 0);
    ck_assert_int_eq(hips_source_level(8, 9, 1.0 / 3600.0), 0);
    ck_assert_int_eq(hips_source_level(7, 9, 1.0 / 3600.0), 1);
    ck_assert_int_eq(hips_source_level(3, 9, 1.0 / 3600.0), 5);   /* 51.5" / 1" = 51.5 */
    ck_assert_int_eq(hips_source_level(0, 9, 0.75), 0);

    /* The demo images: pixel size, then order (HiPS 4.2.1: the first order whose cells
     * are no larger than the input pixels). */
    static const struct { const char *file; double arcsec; int order; } demo[] = {
        {DEMO("HorseHead.fits"), 1.008, 9},
        {DEMO("gc_2mass_k.fits"), 5.0, 7},
        {DEMO("gc_msx_e.fits"), 24.0, 5},
        {DEMO("allsky_rosat.fits"), 2430.0, 0},   /* AIT, at the centre */
        {DEMO("l1448_13co.fits"), 23.0, 5},
    };
    for (size_t k = 0; k < sizeof(demo) / sizeof(demo[0]); k++) {
        long nx, ny;
        skywcs *cel = demo_wcs(demo[k].file, &nx, &ny);
        double scale = 0.0;
        ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 0, NULL, NULL, NULL, NULL, &scale,
                                                NULL), 0);
        ck_assert_msg(fabs(scale * 3600.0 - demo[k].arcsec) < 0.02 * demo[k].arcsec,
                      "%s: %g arcsec", demo[k].file, scale * 3600.0);
        ck_assert_msg(hips_order_for_scale(scale, 9) == demo[k].order, "%s: order %d",
                      demo[k].file, hips_order_for_scale(scale, 9));
        skywcs_free(cel);
    }
}
END_TEST

START_TEST(test_dataset_geometry)
{
    long nx, ny;
    skywcs *cel = demo_wcs(DEMO("gc_2mass_k.fits"), &nx, &ny);
    double ra, dec, l, b, scale, fov;
    ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 1, &ra, &dec, &l, &b, &scale, &fov), 0);
    /* CRVAL (266.4, -28.93333), FK5 J2000, sits at CRPIX (361, 360.5), the centre pixel
     * (360, 359.5); in ICRS it moves by the frame bias (about 20 mas). */
    double ira = 266.4, idec = -28.93333;
    sky_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_ICRS, 0.0, 1, &ira, &idec);
    ck_assert_double_gt(angdist(ira, idec, 266.4, -28.93333), 1e-6);
    ck_assert_double_lt(angdist(ra, dec, ira, idec), 1e-9);
    double gl = 266.4, gb = -28.93333;
    sky_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_GALACTIC, 0.0, 1, &gl, &gb);
    ck_assert_double_lt(angdist(l, b, gl, gb), 1e-9);
    ck_assert_double_lt(angdist(l, b, 0.0, 0.0), 0.1);   /* the Galactic centre, nearly */
    ck_assert_double_eq_tol(fov, 721 * 0.001388889, 1e-4);
    skywcs_free(cel);
    ck_assert_int_eq(hips_dataset_geometry(NULL, 10, 10, 0, &ra, &dec, NULL, NULL, NULL, NULL),
                     TESS_ENOWCS);
}
END_TEST

START_TEST(test_tile_header)
{
    char *cards;
    int nk;
    char v[80];
    ck_assert_int_eq(hips_tile_header(9, 1462680, 9, 0, &cards, &nk), 0);
    ck_assert(fitscard_get(cards, nk, "CTYPE1", v, sizeof v));
    ck_assert_str_eq(v, "RA---HPX");
    ck_assert(fitscard_get(cards, nk, "CTYPE2", v, sizeof v));
    ck_assert_str_eq(v, "DEC--HPX");
    ck_assert(fitscard_get(cards, nk, "RADESYS", v, sizeof v));
    ck_assert_str_eq(v, "ICRS");
    skywcs *w = NULL;
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), 0);
    ck_assert_int_eq(skywcs_frame(w, NULL), SKY_FRAME_ICRS);
    skywcs_free(w);
    free(cards);
    ck_assert_int_eq(hips_tile_header(3, 5, 9, 1, &cards, &nk), 0);
    ck_assert(fitscard_get(cards, nk, "CTYPE1", v, sizeof v));
    ck_assert_str_eq(v, "GLON-HPX");
    ck_assert(!fitscard_get(cards, nk, "RADESYS", v, sizeof v));
    ck_assert_int_eq(skywcs_parse(cards, nk, &w, NULL, 0), 0);
    ck_assert_int_eq(skywcs_frame(w, NULL), SKY_FRAME_GALACTIC);
    skywcs_free(w);
    free(cards);
    ck_assert_int_eq(hips_tile_header(21, 0, 9, 0, &cards, &nk), TESS_EINVAL);
    ck_assert_ptr_null(cards);
    ck_assert_int_eq(hips_tile_header(3, 768, 9, 0, &cards, &nk), TESS_EINVAL);
    ck_assert_ptr_null(hips_tile_wcs(0, 12, 9, 0));
}
END_TEST

START_TEST(test_footprints)
{
    long nx, ny;
    skywcs *cel = demo_wcs(DEMO("HorseHead.fits"), &nx, &ny);
    double ra, dec;
    ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 0, &ra, &dec, NULL, NULL, NULL, NULL), 0);
    int64_t centre = hips_ang2pix(9, ra, dec);
    ck_assert_int_eq(hips_tile_overlaps(cel, nx, ny, 0, 9, centre), 1);
    ck_assert_int_eq(hips_tile_overlaps(cel, nx, ny, 0, 9, hips_ang2pix(9, ra + 180.0, -dec)), 0);
    ck_assert_int_eq(hips_tile_overlaps(cel, nx, ny, 0, 0, hips_ang2pix(0, ra, dec)), 1);
    ck_assert_int_eq(hips_tile_overlaps(cel, nx, ny, 0, 29, -1), TESS_EINVAL);
    int64_t *list;
    size_t n;
    ck_assert_int_eq(hips_tiles_covering(cel, nx, ny, 0, 9, &list, &n), 0);
    ck_assert_uint_ge(n, 4);
    ck_assert_uint_le(n, 40);
    /* Every corner and the centre of the image lie in listed tiles; nothing listed is far. */
    double px[5] = {-0.5, nx - 0.5, -0.5, nx - 0.5, (nx - 1) / 2.0};
    double py[5] = {-0.5, -0.5, ny - 0.5, ny - 0.5, (ny - 1) / 2.0};
    double pl[5], pb[5];
    ck_assert_int_eq(skywcs_pix2sky(cel, 5, px, py, pl, pb), 0);
    double eq = 0.0;
    sky_frame fr = skywcs_frame(cel, &eq);   /* sets eq before it is passed on */
    sky_convert(fr, eq, SKY_FRAME_ICRS, 0.0, 5, pl, pb);
    for (int k = 0; k < 5; k++) {
        int64_t t = hips_ang2pix(9, pl[k], pb[k]);
        int found = 0;
        for (size_t i = 0; i < n; i++)
            found |= list[i] == t;
        ck_assert_msg(found, "tile %lld of point %d not listed", (long long)t, k);
    }
    for (size_t i = 0; i < n; i++) {
        ck_assert(i == 0 || list[i] > list[i - 1]);
        double l, b;
        cell_centre(9, list[i], &l, &b);
        ck_assert_double_lt(angdist(l, b, ra, dec), 0.35);
    }
    free(list);
    /* Far from the image nothing is listed, at any order. */
    ck_assert_int_eq(hips_tiles_covering(cel, nx, ny, 0, 3, &list, &n), 0);
    ck_assert_uint_ge(n, 1);
    ck_assert_uint_le(n, 24);
    free(list);
    skywcs_free(cel);

    /* A map of the whole sky covers every tile; galactic HiPS frame. */
    cel = demo_wcs(DEMO("allsky_rosat.fits"), &nx, &ny);
    ck_assert_int_eq(hips_tiles_covering(cel, nx, ny, 1, 3, &list, &n), 0);
    ck_assert_uint_eq(n, 768);
    free(list);
    skywcs_free(cel);
}
END_TEST

/* A synthetic image: TAN at (83.8, -5.4), 7.2" pixels rotated by 20 degrees, value
 * 3 + 0.5 x - 0.25 y at pixel (x, y): bilinear interpolation reproduces it exactly. */
#define LX 200
#define LY 150
static double linear_value(double x, double y)
{
    return 3.0 + 0.5 * x - 0.25 * y;
}

static skywcs *linear_wcs(void)
{
    static const char *const lines[] = {
        "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'", "CRVAL1  = 83.8", "CRVAL2  = -5.4",
        "CRPIX1  = 100.5", "CRPIX2  = 75.5", "CD1_1   = -0.0018793852415718",
        "CD1_2   = 0.00068404028665134", "CD2_1   = 0.00068404028665134",
        "CD2_2   = 0.0018793852415718", "RADESYS = 'FK5'", "EQUINOX = 2000.0", NULL};
    int n = 0;
    while (lines[n])
        n++;
    char *cards = malloc((size_t)n * 80 + 1);
    for (int i = 0; i < n; i++) {
        memset(cards + i * 80, ' ', 80);
        memcpy(cards + i * 80, lines[i], strlen(lines[i]));
    }
    cards[n * 80] = '\0';
    skywcs *w = NULL;
    char err[256] = "";
    ck_assert_msg(skywcs_parse(cards, n, &w, err, sizeof err) == 0, "%s", err);
    free(cards);
    return w;
}

/* Checks a rendered tile (FITS rows) against the expected value of every cell centre:
 * chealpix centre -> FK5 -> input pixel (x, y) -> NaN outside [-0.5, n - 0.5], else
 * value(clamp(x, lo, hi), clamp(y, ...)) (the edge padding of the kernel; lo/hi the
 * outermost pixel centres of the plane sampled, in level-0 pixels).  Returns the number of
 * finite expected values. */
static long check_tile(const double *tile, int order, int64_t npix, skywcs *cel, double lo,
                       double hix, double hiy)
{
    const long w = 512;
    const size_t n = (size_t)w * (size_t)w;
    int *t = hipsgen_xy2hpx((int)w);
    double *l = malloc(sizeof(double) * n * 4), *b = l + n, *X = l + 2 * n, *Y = l + 3 * n;
    for (size_t i = 0; i < n; i++)
        cell_centre(order + 9, (npix << 18) + t[i], &l[i], &b[i]);
    sky_convert(SKY_FRAME_ICRS, 0.0, SKY_FRAME_FK5, 2000.0, n, l, b);
    ck_assert_int_eq(skywcs_sky2pix(cel, n, l, b, X, Y), 0);
    long finite = 0, checked = 0, bad = 0;
    char first[160] = "";
    for (size_t i = 0; i < n; i++) {
        double v = tile[i];
        int in = X[i] >= -0.5 && X[i] <= LX - 0.5 && Y[i] >= -0.5 && Y[i] <= LY - 0.5;
        double edge = fmin(fmin(fabs(X[i] + 0.5), fabs(X[i] - (LX - 0.5))),
                           fmin(fabs(Y[i] + 0.5), fabs(Y[i] - (LY - 0.5))));
        if (edge < 1e-6)
            continue;
        checked++;
        double e = in ? linear_value(fmin(fmax(X[i], lo), hix), fmin(fmax(Y[i], lo), hiy)) : NAN;
        if (in ? !(fabs(v - e) < 1e-6) : !isnan(v)) {
            if (bad++ == 0)
                snprintf(first, sizeof first, "pixel %zu at input (%g, %g): %.12g, expected "
                         "%.12g", i, X[i], Y[i], v, e);
        }
        finite += in;
    }
    ck_assert_msg(bad == 0, "%ld pixels wrong, first %s", bad, first);
    ck_assert_int_gt(checked, w * w / 2);
    free(l);
    free(t);
    return finite;
}

START_TEST(test_render_linear_field)
{
    skywcs *cel = linear_wcs();
    double *data = malloc(sizeof(double) * LX * LY);
    for (long j = 0; j < LY; j++)
        for (long i = 0; i < LX; i++)
            data[j * LX + i] = linear_value((double)i, (double)j);
    rp_plane plane = {data, RP_F64, LX, LY};
    char err[256] = "";
    rp_kernel *k = rp_kernel_new(RP_BILINEAR, &plane, err, sizeof err);
    ck_assert_ptr_nonnull(k);
    hips_source src = {cel, LX, LY, k, LX, LY, 0, RP_BILINEAR, 0.001, 0.0, 0};
    double scale;
    ck_assert_int_eq(hips_dataset_geometry(cel, LX, LY, 0, NULL, NULL, NULL, NULL, &scale, NULL), 0);
    int order = hips_order_for_scale(scale, 9);
    ck_assert_int_eq(order, 6);
    double *tile = malloc(sizeof(double) * 512 * 512);
    double *flip = malloc(sizeof(double) * 512 * 512);

    /* The tile of the image centre and the one of its corner (partly outside). */
    double cx = (LX - 1) / 2.0, cy = (LY - 1) / 2.0, cl, cb, kx = -0.5, ky = -0.5, kl, kb;
    skywcs_pix2sky(cel, 1, &cx, &cy, &cl, &cb);
    skywcs_pix2sky(cel, 1, &kx, &ky, &kl, &kb);
    sky_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_ICRS, 0.0, 1, &cl, &cb);
    sky_convert(SKY_FRAME_FK5, 2000.0, SKY_FRAME_ICRS, 0.0, 1, &kl, &kb);
    int64_t tiles[2] = {hips_ang2pix(order, cl, cb), hips_ang2pix(order, kl, kb)};
    for (int q = 0; q < 2; q++) {
        long f = hips_render_tile(&src, order, tiles[q], 9, 0, HIPS_ROWS_FITS, tile, err,
                                  sizeof err);
        ck_assert_msg(f > 0, "%s", err);
        long expect = check_tile(tile, order, tiles[q], cel, 0.0, LX - 1.0, LY - 1.0);
        ck_assert_int_ge(f, expect);
        ck_assert_int_le(f, expect + 2048);   /* the points within 1e-6 of an edge */
        /* Top-down rows are the same rows in the other order. */
        ck_assert_int_eq(hips_render_tile(&src, order, tiles[q], 9, 0, HIPS_ROWS_TOPDOWN, flip,
                                          err, sizeof err), f);
        long diff = 0;
        for (long y = 0; y < 512; y++)
            for (long x = 0; x < 512; x++) {
                double a = tile[y * 512 + x], b = flip[(511 - y) * 512 + x];
                diff += !(a == b || (isnan(a) && isnan(b)));
            }
        ck_assert_int_eq(diff, 0);
    }
    /* A tile far away holds nothing. */
    ck_assert_int_eq(hips_render_tile(&src, order, hips_ang2pix(order, cl + 180.0, -cb), 9, 0,
                                      HIPS_ROWS_FITS, tile, err, sizeof err), 0);
    long nfinite = 0;
    for (long i = 0; i < 512 * 512; i++)
        nfinite += !isnan(tile[i]);
    ck_assert_int_eq(nfinite, 0);

    /* Level 1: 2 x 2 block means (all blocks full: LX, LY even) of a linear field are the
     * field at the block centres, which sit at level-0 positions 2i + 0.5. */
    double *red = malloc(sizeof(double) * (LX / 2) * (LY / 2));
    for (long j = 0; j < LY / 2; j++)
        for (long i = 0; i < LX / 2; i++)
            red[j * (LX / 2) + i] = linear_value(2.0 * i + 0.5, 2.0 * j + 0.5);
    rp_plane rplane = {red, RP_F64, LX / 2, LY / 2};
    rp_kernel *rk = rp_kernel_new(RP_BILINEAR, &rplane, err, sizeof err);
    hips_source rsrc = {cel, LX, LY, rk, LX / 2, LY / 2, 1, RP_BILINEAR, 0.001, 0.0, 0};
    ck_assert_int_gt(hips_render_tile(&rsrc, order, tiles[1], 9, 0, HIPS_ROWS_FITS, tile, err,
                                      sizeof err), 0);
    check_tile(tile, order, tiles[1], cel, 0.5, LX - 1.5, LY - 1.5);
    /* The exact transform (max_coord_error 0) gives the same values. */
    src.max_coord_error = 0.0;
    ck_assert_int_gt(hips_render_tile(&src, order, tiles[0], 9, 0, HIPS_ROWS_FITS, tile, err,
                                      sizeof err), 0);
    check_tile(tile, order, tiles[0], cel, 0.0, LX - 1.0, LY - 1.0);

    ck_assert_int_eq(hips_render_tile(&src, order, tiles[0], 3, 0, HIPS_ROWS_FITS, tile, err,
                                      sizeof err), TESS_EINVAL);
    ck_assert_int_eq(hips_render_tile(&src, 21, 0, 9, 0, HIPS_ROWS_FITS, tile, err, sizeof err),
                     TESS_EINVAL);
    rp_kernel_free(rk);
    rp_kernel_free(k);
    free(red);
    free(tile);
    free(flip);
    free(data);
    skywcs_free(cel);
}
END_TEST

START_TEST(test_encode_fits)
{
    double *tile = malloc(sizeof(double) * 512 * 512);
    for (long i = 0; i < 512 * 512; i++)
        tile[i] = i % 7 == 0 ? NAN : (double)i * 0.25;
    unsigned char *out;
    size_t len;
    ck_assert_int_eq(hips_encode_fits(tile, 9, 1462680, 9, 0, &out, &len), 0);
    ck_assert_uint_eq(len % 2880, 0);
    fitsfile *f = NULL;
    int st = 0, bitpix = 0, naxis = 0, anynul = 0;
    void *mem = out;
    size_t msize = len;
    fits_open_memfile(&f, "tile.fits", READONLY, &mem, &msize, 0, NULL, &st);
    ck_assert_int_eq(st, 0);
    long naxes[2];
    fits_get_img_param(f, 2, &bitpix, &naxis, naxes, &st);
    ck_assert_int_eq(bitpix, -32);
    ck_assert_int_eq(naxis, 2);
    ck_assert_int_eq(naxes[0], 512);
    ck_assert_int_eq(naxes[1], 512);
    long order = 0, npix = 0;
    fits_read_key(f, TLONG, "ORDER", &order, NULL, &st);
    fits_read_key(f, TLONG, "NPIX", &npix, NULL, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(order, 9);
    ck_assert_int_eq(npix, 1462680);
    float *v = malloc(sizeof(float) * 512 * 512);
    float fnan = NAN;
    fits_read_img(f, TFLOAT, 1, 512 * 512, &fnan, v, &anynul, &st);
    ck_assert_int_eq(st, 0);
    long bad = 0;
    for (long i = 0; i < 512 * 512; i++)
        bad += i % 7 == 0 ? !isnan(v[i]) : v[i] != (float)tile[i];
    ck_assert_int_eq(bad, 0);
    fits_close_file(f, &st);
    free(v);
    free(out);
    free(tile);
    ck_assert_int_eq(hips_encode_fits(NULL, 9, 0, 9, 0, &out, &len), TESS_EINVAL);
}
END_TEST

START_TEST(test_allsky)
{
    long w, h, x, y;
    hips_allsky_size(64, &w, &h);
    ck_assert_int_eq(w, 1728);
    ck_assert_int_eq(h, 1856);
    hips_allsky_origin(0, 64, &x, &y);
    ck_assert(x == 0 && y == 0);
    hips_allsky_origin(26, 64, &x, &y);
    ck_assert(x == 26 * 64 && y == 0);
    hips_allsky_origin(27, 64, &x, &y);
    ck_assert(x == 0 && y == 64);
    hips_allsky_origin(767, 64, &x, &y);
    ck_assert(x == 11 * 64 && y == 28 * 64);

    /* The synthetic image in the Allsky: finite cells only where its order-3 tile (at 64
     * pixels, cells of order 9) says so, placed by the layout above. */
    skywcs *cel = linear_wcs();
    double *data = malloc(sizeof(double) * LX * LY);
    for (long i = 0; i < LX * LY; i++)
        data[i] = 1.0;
    rp_plane plane = {data, RP_F64, LX, LY};
    char err[256] = "";
    rp_kernel *k = rp_kernel_new(RP_NEAREST, &plane, err, sizeof err);
    hips_source src = {cel, LX, LY, k, LX, LY, 0, RP_NEAREST, 0.001, 0.0, 0};
    double *pic = NULL;
    long f = hips_allsky_render(&src, 0, &pic, &w, &h, err, sizeof err);
    ck_assert_msg(f > 0, "%s", err);
    double *cell = malloc(sizeof(double) * 64 * 64);
    long total = 0, diff = 0;
    for (int64_t t = 0; t < 768; t++) {
        long cf = hips_render_tile(&src, 3, t, 6, 0, HIPS_ROWS_TOPDOWN, cell, err, sizeof err);
        ck_assert_int_ge(cf, 0);
        total += cf;
        hips_allsky_origin(t, 64, &x, &y);
        for (long r = 0; r < 64; r++)
            for (long c = 0; c < 64; c++) {
                double a = cell[r * 64 + c], b = pic[(h - 1 - (y + r)) * w + x + c];
                diff += !(a == b || (isnan(a) && isnan(b)));
            }
    }
    ck_assert_int_eq(diff, 0);
    ck_assert_int_eq(total, f);
    /* The image is about 0.4 x 0.3 degrees: roughly 0.12 / 0.0131 cells of order 9. */
    ck_assert_int_ge(f, 5);
    ck_assert_int_le(f, 40);
    free(cell);
    free(pic);
    rp_kernel_free(k);
    free(data);
    skywcs_free(cel);
}
END_TEST

/* A base source that renders each order-0 tile and counts the calls per tile. */
typedef struct counting_base {
    const hips_source *src;
    double *buf;
    int calls[12];
} counting_base;

static long counting_get(void *cls, int64_t npix, const double **data, char *err, size_t errlen)
{
    counting_base *b = cls;
    b->calls[npix]++;
    *data = b->buf;
    return hips_render_tile(b->src, 0, npix, 9, 1, HIPS_ROWS_FITS, b->buf, err, errlen);
}

/* The whole sky: the Allsky cut from the 12 order-0 tiles, each asked for once, holds
 * what the order-3 tiles rendered at 64 pixels hold (to the coordinate grid's rounding,
 * 1e-7 input pixel, of a bilinear kernel), in every cell. */
START_TEST(test_allsky_from_base_tiles)
{
    long nx, ny;
    skywcs *cel = demo_wcs(DEMO("allsky_rosat.fits"), &nx, &ny);
    long px, py;
    double *data = tt_fits_plane(DEMO("allsky_rosat.fits"), 0, &px, &py);
    rp_plane plane = {data, RP_F64, nx, ny};
    char err[256] = "";
    rp_kernel *k = rp_kernel_new(RP_BILINEAR, &plane, err, sizeof err);
    hips_source src = {cel, nx, ny, k, nx, ny, 0, RP_BILINEAR, 0.001, 0.0, 0};
    counting_base b = {&src, malloc(sizeof(double) * 512 * 512), {0}};
    hips_base_source bs = {counting_get, NULL, &b};
    double *pic = NULL;
    long w, h, x, y;
    long f = hips_allsky_render_from(&src, 1, &bs, &pic, &w, &h, err, sizeof err);
    ck_assert_msg(f > 0, "%s", err);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(b.calls[i], 1);
    double *cell = malloc(sizeof(double) * 64 * 64);
    long worse = 0, nan_mismatch = 0;
    for (int64_t t = 0; t < 768; t += 37) {
        ck_assert_int_ge(hips_render_tile(&src, 3, t, 6, 1, HIPS_ROWS_TOPDOWN, cell, err,
                                          sizeof err), 0);
        hips_allsky_origin(t, 64, &x, &y);
        for (long r = 0; r < 64; r++)
            for (long c = 0; c < 64; c++) {
                double a = cell[r * 64 + c], v = pic[(h - 1 - (y + r)) * w + x + c];
                if (isnan(a) || isnan(v))
                    nan_mismatch += isnan(a) != isnan(v);
                else
                    worse += fabs(a - v) > 1e-6 * (fabs(a) + 1.0);
            }
    }
    ck_assert_int_eq(nan_mismatch, 0);
    ck_assert_int_eq(worse, 0);
    /* The engine's own path gives the same picture, bit for bit. */
    double *pic2 = NULL;
    ck_assert_int_eq(hips_allsky_render(&src, 1, &pic2, &w, &h, err, sizeof err), f);
    ck_assert(memcmp(pic, pic2, sizeof(double) * (size_t)(w * h)) == 0);
    free(pic2);
    /* Without a source (a sky of several images) every face is asked of the base source
     * once: the same picture for an image that covers all 12. */
    pic2 = NULL;
    ck_assert_int_eq(hips_allsky_render_from(NULL, 1, &bs, &pic2, &w, &h, err, sizeof err), f);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(b.calls[i], 2);
    ck_assert(memcmp(pic, pic2, sizeof(double) * (size_t)(w * h)) == 0);
    free(pic2);
    free(cell);
    free(pic);
    free(b.buf);
    rp_kernel_free(k);
    free(data);
    skywcs_free(cel);
}
END_TEST

/* The pictures' coordinate grid (HIPS_PICTURE_*: margin 8, finest cells of 8 pixels,
 * max_coord_error 0.01) against the exact transform of every tile pixel, on the tiles
 * the viewer opens each demo dataset with (and order 3): the largest position error,
 * in input pixels and in tile pixels (input error over the local scale, the shorter
 * step between neighbours' exact positions), stays within 0.01 pixel; the grid
 * interpolates most pixels (what makes it fast: the exact transform of each is ~4
 * wcslib calls), every point is within the error bound it is given (hips_render_tile
 * recomputes the points that close to an edge), and the points that are NaN are the
 * same. */
START_TEST(test_picture_grid_error)
{
    static const struct { const char *file; int galactic, order; } ds[] = {
        {DEMO("allsky_rosat.fits"), 1, 0}, {DEMO("allsky_rosat.fits"), 1, 3},
        {DEMO("gc_2mass_k.fits"), 0, 6},   {DEMO("gc_2mass_k.fits"), 0, 3},
        {DEMO("gc_msx_e.fits"), 1, 5},     {DEMO("HorseHead.fits"), 0, 8},
        {DEMO("HorseHead.fits"), 0, 5},    {DEMO("l1448_13co.fits"), 0, 5},
    };
    int vg = tt_under_valgrind();
    int shift = vg ? 7 : 9;
    size_t maxtiles = vg ? 1 : 4;
    long w = 1L << shift;
    size_t n = (size_t)w * (size_t)w;
    double *gx = malloc(sizeof(double) * n * 4), *gy = gx + n, *ex = gx + 2 * n, *ey = gx + 3 * n;
    float *eb = malloc(sizeof(float) * n);
    ck_assert_ptr_nonnull(gx);
    ck_assert_ptr_nonnull(eb);
    double worst_in = 0.0, worst_tile = 0.0;
    size_t interp = 0, finite = 0, over = 0;
    for (size_t d = 0; d < sizeof ds / sizeof ds[0]; d++) {
        long nx, ny;
        skywcs *cel = demo_wcs(ds[d].file, &nx, &ny);
        int64_t *list = NULL;
        size_t nl = 0;
        ck_assert_int_eq(hips_tiles_covering(cel, nx, ny, ds[d].galactic, ds[d].order, &list,
                                             &nl), 0);
        ck_assert_uint_gt(nl, 0);
        char err[256] = "";
        for (size_t t = 0; t < nl && t < maxtiles; t++) {
            skywcs *tw = hips_tile_wcs(ds[d].order, list[t], shift, ds[d].galactic);
            ck_assert_ptr_nonnull(tw);
            rp_coordmap *grid = rp_coordmap_new(tw, cel, err, sizeof err);
            rp_coordmap *exact = rp_coordmap_new(tw, cel, err, sizeof err);
            ck_assert_msg(grid && exact, "%s", err);
            ck_assert_int_eq(rp_coordmap_set_grid(grid, HIPS_PICTURE_MARGIN,
                                                  HIPS_PICTURE_CELL_MIN), 0);
            ck_assert_int_eq(rp_coordmap_lattice(grid, 0, 0, w, w, HIPS_PICTURE_MCE, gx, gy,
                                                 eb), 0);
            ck_assert_int_eq(rp_coordmap_lattice(exact, 0, 0, w, w, 0.0, ex, ey, NULL), 0);
            for (long j = 0; j < w; j++)
                for (long i = 0; i < w; i++) {
                    size_t k = (size_t)j * (size_t)w + (size_t)i;
                    ck_assert_msg(isfinite(gx[k]) == isfinite(ex[k]),
                                  "%s order %d tile %lld (%ld, %ld): NaN differs", ds[d].file,
                                  ds[d].order, (long long)list[t], i, j);
                    if (!isfinite(ex[k]))
                        continue;
                    finite++;
                    interp += eb[k] > 0.0f;
                    double e = hypot(gx[k] - ex[k], gy[k] - ey[k]);
                    size_t kx = i + 1 < w ? k + 1 : k - 1, ky = j + 1 < w ? k + w : k - w;
                    double sx = hypot(ex[kx] - ex[k], ey[kx] - ey[k]);
                    double sy = hypot(ex[ky] - ex[k], ey[ky] - ey[k]);
                    double sc = fmin(sx, sy);
                    worst_in = fmax(worst_in, e);
                    over += e > (double)eb[k];
                    if (isfinite(sc) && sc > 0.0)
                        worst_tile = fmax(worst_tile, e / sc);
                }
            rp_coordmap_free(grid);
            rp_coordmap_free(exact);
            skywcs_free(tw);
        }
        free(list);
        skywcs_free(cel);
    }
    fprintf(stderr, "picture grid: largest error %.3g input pixel, %.3g tile pixel; %.1f%% of "
            "%zu pixels interpolated, %zu beyond their bound\n", worst_in, worst_tile,
            100.0 * (double)interp / (double)finite, finite, over);
    ck_assert_double_le(worst_in, HIPS_PICTURE_MCE);
    ck_assert_double_le(worst_tile, HIPS_PICTURE_MCE);
    ck_assert_uint_gt(finite, 0);
    ck_assert_uint_eq(over, 0); /* every point within the bound that edge decisions use */
    ck_assert_msg((double)interp >= 0.9 * (double)finite, "only %zu of %zu interpolated",
                  interp, finite);
    /* Invalid grid settings are refused. */
    skywcs *tw = hips_tile_wcs(0, 0, 4, 0);
    rp_coordmap *m = rp_coordmap_new(tw, tw, NULL, 0);
    ck_assert_int_eq(rp_coordmap_set_grid(m, 0.5, 8), TESS_EINVAL);
    ck_assert_int_eq(rp_coordmap_set_grid(m, 8.0, 12), TESS_EINVAL);
    ck_assert_int_eq(rp_coordmap_set_grid(m, 8.0, 256), TESS_EINVAL);
    ck_assert_int_eq(rp_coordmap_set_grid(m, NAN, 8), TESS_EINVAL);
    ck_assert_int_eq(rp_coordmap_set_grid(NULL, 8.0, 8), TESS_EINVAL);
    rp_coordmap_free(m);
    skywcs_free(tw);
    free(eb);
    free(gx);
}
END_TEST

START_TEST(test_merge_children)
{
    /* Children holding their cells' own nested indices: each parent pixel is the mean of
     * its cell's four children, 4 p + 1.5, in both row orders.  One child value missing
     * makes its parent the mean of the other three. */
    const int shift = 5;
    const long w = 32;
    const int64_t npix = 1000;
    for (int rows = 0; rows < 2; rows++) {
        hips_rows ro = (hips_rows)rows;
        double *c[4], parent[32 * 32];
        for (int k = 0; k < 4; k++) {
            c[k] = malloc(sizeof(double) * w * w);
            for (long y = 0; y < w; y++)
                for (long x = 0; x < w; x++)
                    c[k][y * w + x] = (double)(((npix * 4 + k) << (2 * shift)) +
                                               (int64_t)hips_tile_subindex(shift, x, y, ro));
        }
        int64_t lost = (int64_t)c[3][0], p0 = lost >> 2, m = lost - 4 * p0;
        c[3][0] = NAN;
        const double *const cc[4] = {c[0], c[1], c[2], c[3]};
        hips_tile_merge_children(shift, cc, ro, parent);
        long bad = 0;
        for (long y = 0; y < w; y++)
            for (long x = 0; x < w; x++) {
                int64_t p = (npix << (2 * shift)) + (int64_t)hips_tile_subindex(shift, x, y, ro);
                double e = p == p0 ? (12.0 * p + 6.0 - (double)m) / 3.0 : 4.0 * p + 1.5;
                bad += fabs(parent[y * w + x] - e) > 1e-9 * e;
            }
        ck_assert_int_eq(bad, 0);
        /* Child by child (hips_tile_merge_child): the same parent, bit for bit; one call
         * writes its quadrant only (a quarter of the pixels), the others kept. */
        double *part = malloc(sizeof(double) * w * w);
        for (long i = 0; i < w * w; i++)
            part[i] = -1.0;
        hips_tile_merge_child(shift, 2, c[2], ro, part);
        long kept = 0;
        for (long i = 0; i < w * w; i++)
            kept += part[i] == -1.0;
        ck_assert_int_eq(kept, 3 * w * w / 4);
        for (int k = 0; k < 4; k++)
            if (k != 2)
                hips_tile_merge_child(shift, k, c[k], ro, part);
        ck_assert_int_eq(memcmp(part, parent, sizeof(double) * w * w), 0);
        free(part);
        const double *const one[4] = {c[0], NULL, NULL, NULL};
        hips_tile_merge_children(shift, one, ro, parent);
        long finite = 0;
        for (long i = 0; i < w * w; i++)
            finite += isfinite(parent[i]);
        ck_assert_int_eq(finite, w * w / 4);
        for (int k = 0; k < 4; k++)
            free(c[k]);
    }
}
END_TEST

/* Reads the UNIQ column of a Moc.fits in memory, whose COORDSYS must be `sys`; *order
 * gets MOCORDER. */
static int64_t *read_moc_in(unsigned char *buf, size_t len, const char *sys, long *nrows,
                            long *order)
{
    fitsfile *f = NULL;
    int st = 0, hdutype = 0, anynul = 0;
    void *mem = buf;
    size_t msize = len;
    fits_open_memfile(&f, "moc.fits", READONLY, &mem, &msize, 0, NULL, &st);
    fits_movabs_hdu(f, 2, &hdutype, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(hdutype, BINARY_TBL);
    char v[80];
    fits_read_key(f, TSTRING, "ORDERING", v, NULL, &st);
    ck_assert_str_eq(v, "NUNIQ");
    fits_read_key(f, TSTRING, "COORDSYS", v, NULL, &st);
    ck_assert_str_eq(v, sys);
    fits_read_key(f, TLONG, "MOCORDER", order, NULL, &st);
    fits_get_num_rows(f, nrows, &st);
    int64_t *u = malloc(sizeof(int64_t) * (size_t)(*nrows + 1));
    fits_read_col(f, TLONGLONG, 1, 1, 1, *nrows, NULL, u, &anynul, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    return u;
}

static int64_t *read_moc(unsigned char *buf, size_t len, long *nrows, long *order)
{
    return read_moc_in(buf, len, "C", nrows, order);
}

/* 1 when cell (order, npix) or one of its ancestors is in the NUNIQ list. */
static int moc_covers(const int64_t *u, long n, int order, int64_t npix)
{
    for (int k = order; k >= 0; k--, npix >>= 2)
        for (long i = 0; i < n; i++)
            if (u[i] == ((int64_t)4 << (2 * k)) + npix)
                return 1;
    return 0;
}

START_TEST(test_moc)
{
    long nx, ny, nrows, order;
    skywcs *cel = demo_wcs(DEMO("HorseHead.fits"), &nx, &ny);
    unsigned char *out;
    size_t len, ncells;
    double pixscale;
    ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 0, NULL, NULL, NULL, NULL, &pixscale,
                                           NULL), 0);
    ck_assert_int_eq(hips_moc_fits(cel, nx, ny, 0, pixscale, 9, 0, &out, &len, &ncells), 0);
    ck_assert_uint_eq(len % 2880, 0);
    int64_t *u = read_moc(out, len, &nrows, &order);
    ck_assert_int_eq(order, 9);
    ck_assert_int_eq(nrows, (long)ncells);
    ck_assert_int_ge(nrows, 4);
    for (long i = 1; i < nrows; i++)
        ck_assert(u[i] > u[i - 1]);
    double ra, dec;
    ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 0, &ra, &dec, NULL, NULL, NULL, NULL), 0);
    ck_assert(moc_covers(u, nrows, 9, hips_ang2pix(9, ra, dec)));
    ck_assert(!moc_covers(u, nrows, 9, hips_ang2pix(9, ra + 1.0, dec)));
    free(u);
    free(out);
    skywcs_free(cel);
    /* The whole sky: 768 order-3 cells merge into the 12 base cells, NUNIQ 4..15. */
    cel = demo_wcs(DEMO("allsky_rosat.fits"), &nx, &ny);
    ck_assert_int_eq(hips_moc_fits(cel, nx, ny, 0, 0.675, 3, 0, &out, &len, &ncells), 0);
    u = read_moc(out, len, &nrows, &order);
    ck_assert_int_eq(nrows, 12);
    for (long i = 0; i < 12; i++)
        ck_assert_int_eq(u[i], 4 + i);
    free(u);
    free(out);
    skywcs_free(cel);
    /* A galactic survey: galactic cells, COORDSYS G (HiPS 1.0 4.4.2: the MOC is in the
     * frame of the HiPS).  gc_msx_e is centred on l = b = 0, RA 266.40, Dec -28.94. */
    cel = demo_wcs(DEMO("gc_msx_e.fits"), &nx, &ny);
    ck_assert_int_eq(hips_dataset_geometry(cel, nx, ny, 1, NULL, NULL, NULL, NULL, &pixscale,
                                           NULL), 0);
    int mo = hips_survey_order(pixscale);
    ck_assert_int_eq(hips_moc_fits(cel, nx, ny, 1, pixscale, mo, 0, &out, &len, &ncells), 0);
    u = read_moc_in(out, len, "G", &nrows, &order);
    ck_assert_int_eq(order, mo);
    ck_assert(moc_covers(u, nrows, mo, hips_ang2pix(mo, 0.0, 0.0)));
    ck_assert(!moc_covers(u, nrows, mo, hips_ang2pix(mo, 266.40, -28.94)));
    free(u);
    free(out);
    skywcs_free(cel);
}
END_TEST

/* index.html: the names escaped, the raw phrases as given, the formats in the order
 * png, jpg, fits with the Allsky link on the first of them, the orders when given. */
START_TEST(test_index_html)
{
    hips_index x = { .name = "a<b>&\"c", .base_href = "/hips/a&b/", .made_by = "made <i>here</i>",
                     .source = "s&t.fits", .nx = 30, .ny = 20, .galactic = 1, .order = 7,
                     .how = "Look", .formats = HIPS_FMT_BIT(HIPS_FMT_FITS)
                                              | HIPS_FMT_BIT(HIPS_FMT_JPEG) };
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(hips_index_html(&x, &text, &len), 0);
    ck_assert_uint_eq(strlen(text), len);
    static const char want[] =
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><base href=\"/hips/a&amp;b/\">"
        "<title>HiPS a&lt;b&gt;&amp;&quot;c</title></head>\n<body>\n<h1>HiPS a&lt;b&gt;&amp;&quot;c"
        "</h1>\n<p>An IVOA HiPS 1.0 survey made <i>here</i> <b>s&amp;t.fits</b> (30 x 20 pixels, "
        "galactic frame, orders 0 to 7). Look, or read the <a href=\"properties\">properties</a>."
        "</p>\n<ul>\n<li><a href=\"Norder3/Allsky.jpg\">Norder3/Allsky.jpg</a>, <a href=\"Moc.fits"
        "\">Moc.fits</a></li>\n<li>tiles: Norder{K}/Dir{D}/Npix{N}.jpg, .fits (512 x 512)</li>\n"
        "</ul>\n</body></html>\n";
    ck_assert_str_eq(text, want);
    free(text);
    x.base_href = NULL;
    x.order = -1;
    x.galactic = 0;
    x.formats = HIPS_FMT_BIT(HIPS_FMT_PNG) | HIPS_FMT_BIT(HIPS_FMT_JPEG) | HIPS_FMT_BIT(HIPS_FMT_FITS);
    ck_assert_int_eq(hips_index_html(&x, &text, &len), 0);
    ck_assert_ptr_null(strstr(text, "<base"));
    ck_assert_ptr_nonnull(strstr(text, "(30 x 20 pixels, equatorial frame). Look"));
    ck_assert_ptr_nonnull(strstr(text, "Allsky.png\""));
    ck_assert_ptr_nonnull(strstr(text, "Npix{N}.png, .jpg, .fits (512"));
    free(text);
    x.formats = 0;
    ck_assert_int_eq(hips_index_html(&x, &text, &len), TESS_EINVAL);
    ck_assert_ptr_null(text);
    x.formats = HIPS_FMT_BIT(HIPS_FMT_PNG);
    x.how = NULL;
    ck_assert_int_eq(hips_index_html(&x, &text, &len), TESS_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("healpix");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_counts_and_dirs);
    tcase_add_test(tc, test_subindex_round_trip);
    tcase_add_test(tc, test_layout_is_hipsgen);
    tcase_add_test(tc, test_orientation);
    tcase_add_test(tc, test_centres_against_chealpix);
    tcase_add_test(tc, test_cell_sizes_and_orders);
    tcase_add_test(tc, test_dataset_geometry);
    tcase_add_test(tc, test_tile_header);
    tcase_add_test(tc, test_footprints);
    tcase_add_test(tc, test_render_linear_field);
    tcase_add_test(tc, test_encode_fits);
    tcase_add_test(tc, test_allsky);
    tcase_add_test(tc, test_allsky_from_base_tiles);
    tcase_add_test(tc, test_picture_grid_error);
    tcase_add_test(tc, test_moc);
    tcase_add_test(tc, test_merge_children);
    tcase_add_test(tc, test_index_html);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
