/* HiPS tiles on the nested HEALPix grid: tile pixel layout, orders, footprints and tile rendering. */
#include "engine/hips/healpix.h"

#include <chealpix.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image/encode.h"
#include "engine/image/pyramid.h"
#include "engine/sky/coordmap.h"
#include "engine/sky/simd.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitswrite.h"

#define DEG2RAD (M_PI / 180.0)
#define RAD2DEG (180.0 / M_PI)

static void put_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen > 0)
        snprintf(err, errlen, "%s", msg);
}

/* ---- nested indices ------------------------------------------------------------------ */

/* Spreads the low 32 bits of v to the even bits of the result (bit k -> bit 2k). */
static uint64_t spread_bits(uint64_t v)
{
    v &= 0xffffffffULL;
    v = (v | (v << 16)) & 0x0000ffff0000ffffULL;
    v = (v | (v << 8)) & 0x00ff00ff00ff00ffULL;
    v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0fULL;
    v = (v | (v << 2)) & 0x3333333333333333ULL;
    v = (v | (v << 1)) & 0x5555555555555555ULL;
    return v;
}

/* The inverse of spread_bits: the even bits of v packed into the low 32 bits. */
static uint64_t compact_bits(uint64_t v)
{
    v &= 0x5555555555555555ULL;
    v = (v | (v >> 1)) & 0x3333333333333333ULL;
    v = (v | (v >> 2)) & 0x0f0f0f0f0f0f0f0fULL;
    v = (v | (v >> 4)) & 0x00ff00ff00ff00ffULL;
    v = (v | (v >> 8)) & 0x0000ffff0000ffffULL;
    v = (v | (v >> 16)) & 0x00000000ffffffffULL;
    return v;
}

int64_t hips_npix_count(int order)
{
    if (order < 0 || order > HIPS_ORDER_MAX)
        return 0;
    return (int64_t)12 << (2 * order);
}

int hips_tile_valid(int order, int64_t npix)
{
    return order >= 0 && order <= HIPS_ORDER_MAX && npix >= 0 && npix < hips_npix_count(order);
}

int64_t hips_dir(int64_t npix)
{
    return npix / 10000 * 10000;
}

uint64_t hips_tile_subindex(int shift, long x, long y, hips_rows rows)
{
    uint64_t w = (uint64_t)1 << shift;
    uint64_t c = (uint64_t)x & (w - 1), r = (uint64_t)y & (w - 1);
    uint64_t i = rows == HIPS_ROWS_TOPDOWN ? r : w - 1 - r;
    return spread_bits(i) | (spread_bits(c) << 1);
}

void hips_tile_xy(int shift, uint64_t s, hips_rows rows, long *x, long *y)
{
    uint64_t w = (uint64_t)1 << shift;
    uint64_t i = compact_bits(s) & (w - 1), j = compact_bits(s >> 1) & (w - 1);
    *x = (long)j;
    *y = (long)(rows == HIPS_ROWS_TOPDOWN ? i : w - 1 - i);
}

int hips_tile_centres(int order, int64_t npix, int shift, hips_rows rows, double *lon,
                      double *lat)
{
    if (!hips_tile_valid(order, npix) || shift < 0 || shift > 16 || order + shift > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    long w = 1L << shift;
    int64_t nside = (int64_t)1 << (order + shift);
    int64_t base = npix << (2 * shift);
    for (long y = 0; y < w; y++)
        for (long x = 0; x < w; x++) {
            double theta, phi;
            pix2ang_nest64(nside, base + (int64_t)hips_tile_subindex(shift, x, y, rows), &theta,
                           &phi);
            double l = phi * RAD2DEG;
            if (l >= 360.0)
                l -= 360.0;
            lon[y * w + x] = l < 0.0 ? l + 360.0 : l;
            lat[y * w + x] = 90.0 - theta * RAD2DEG;
        }
    return 0;
}

int64_t hips_ang2pix(int order, double lon, double lat)
{
    if (!isfinite(lon) || !isfinite(lat) || order < 0 || order > HIPS_ORDER_MAX)
        return -1;
    double theta = (90.0 - lat) * DEG2RAD;
    if (theta < 0.0)
        theta = 0.0;
    if (theta > M_PI)
        theta = M_PI;
    double phi = fmod(lon, 360.0);
    if (phi < 0.0)
        phi += 360.0;
    int64_t ipix = -1;
    ang2pix_nest64((int64_t)1 << order, theta, phi * DEG2RAD, &ipix);
    return ipix;
}

double hips_cell_size(int order)
{
    return sqrt(4.0 * M_PI / (12.0 * ldexp(1.0, 2 * order))) * RAD2DEG;
}

int hips_order_for_scale(double pixscale, int shift)
{
    if (!(pixscale > 0.0) || !isfinite(pixscale))
        return 0;
    int kmax = HIPS_ORDER_MAX - shift;
    for (int k = 0; k < kmax; k++)
        if (hips_cell_size(k + shift) <= pixscale)
            return k;
    return kmax;
}

int hips_survey_order(double pixscale)
{
    int order = hips_order_for_scale(pixscale, HIPS_TILE_SHIFT);
    return order < HIPS_ORDER_FLOOR ? HIPS_ORDER_FLOOR : order;
}

int hips_source_level(int order, int shift, double pixscale)
{
    if (!(pixscale > 0.0) || !isfinite(pixscale))
        return 0;
    double r = hips_cell_size(order + shift) / pixscale;
    if (!(r >= 2.0))
        return 0;
    int k = (int)floor(log2(r));
    return k > 30 ? 30 : k;
}

/* ---- the tile's WCS ------------------------------------------------------------------ */

/* Card k of the 80-character cards at `cards`, written with engine/fits/fitscard.h (the
 * keywords below are valid and the values finite, so those writes cannot fail). */
static char *card_at(char *cards, int k)
{
    return cards + (size_t)k * FITSCARD_LEN;
}

/* Cards of the tile WCS written from card n on; returns the count written (15 at most).
 * No validation: the tile and depth are trusted (order + shift <= 29). */
static int tile_cards(char *cards, int n, int order, int64_t npix, int shift, int galactic)
{
    int face = (int)(npix >> (2 * order));
    uint64_t p = (uint64_t)npix & (((uint64_t)1 << (2 * order)) - 1);
    double tx = (double)compact_bits(p), ty = (double)compact_bits(p >> 1);
    double w = ldexp(1.0, shift);
    double a = 45.0 / ldexp(1.0, order + shift);     /* plane degrees per cell along x and y */
    /* The face's centre (xc, yc) in the HPX plane [CR07] once CRVAL1 = crval1 shifts it
     * next to the reference point: polar faces centred at x = 45, equatorial at x = 0. */
    double xc, yc, crval1;
    if (face < 4) {
        xc = 45.0, yc = 45.0, crval1 = 90.0 * face;
    } else if (face < 8) {
        xc = 0.0, yc = 0.0, crval1 = 90.0 * (face - 4);
    } else {
        xc = 45.0, yc = -45.0, crval1 = 90.0 * (face - 8);
    }
    /* Face coordinates u (toward the east corner) and v (toward the west corner) of the
     * pixel at 1-based (p1, p2): u = (tx w + w + 1/2 - p2) / M, v = (ty w + p1 - 1/2) / M,
     * M = w 2^order; plane x = xc + 45 (u - v), y = yc - 45 + 45 (u + v).  Hence the CD
     * matrix below and the reference pixel where x = y = 0. */
    double crpix1 = 0.5 * ((xc - yc + 45.0) / a - 2.0 * ty * w + 1.0);
    double crpix2 = 0.5 * ((xc + yc - 45.0) / a + 2.0 * tx * w + 2.0 * w + 1.0);
    int k = n;
    fitscard_int(card_at(cards, k++), "WCSAXES", 2,
                 "HEALPix cells of the tile, HPX projection");
    const char *lon = galactic ? "GLON-HPX" : "RA---HPX", *lat = galactic ? "GLAT-HPX" : "DEC--HPX";
    fitscard_string(card_at(cards, k++), "CTYPE1", lon, 8, NULL);
    fitscard_string(card_at(cards, k++), "CTYPE2", lat, 8, NULL);
    fitscard_real(card_at(cards, k++), "CRPIX1", crpix1, 17, NULL);
    fitscard_real(card_at(cards, k++), "CRPIX2", crpix2, 17, NULL);
    fitscard_real(card_at(cards, k++), "CRVAL1", crval1, 17, NULL);
    fitscard_real(card_at(cards, k++), "CRVAL2", 0.0, 17, NULL);
    fitscard_real(card_at(cards, k++), "CD1_1", -a, 17, NULL);
    fitscard_real(card_at(cards, k++), "CD1_2", -a, 17, NULL);
    fitscard_real(card_at(cards, k++), "CD2_1", a, 17, NULL);
    fitscard_real(card_at(cards, k++), "CD2_2", -a, 17, NULL);
    fitscard_real(card_at(cards, k++), "PV2_1", 4.0, 17, "HPX H: facets along the equator");
    fitscard_real(card_at(cards, k++), "PV2_2", 3.0, 17, "HPX K: HEALPix");
    fitscard_real(card_at(cards, k++), "LONPOLE", 0.0, 17, NULL);
    if (!galactic)
        fitscard_string(card_at(cards, k++), "RADESYS", "ICRS", 8, NULL);
    return k - n;
}

#define TILE_CARDS_MAX 15

int hips_tile_header(int order, int64_t npix, int shift, int galactic, char **cards,
                     int *nkeys)
{
    *cards = NULL;
    *nkeys = 0;
    if (!hips_tile_valid(order, npix) || shift < 0 || shift > 16 || order + shift > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    char *c = malloc(TILE_CARDS_MAX * 80 + 1);
    if (!c)
        return TESS_ENOMEM;
    int n = tile_cards(c, 0, order, npix, shift, galactic);
    c[n * 80] = '\0';
    *cards = c;
    *nkeys = n;
    return 0;
}

skywcs *hips_tile_wcs(int order, int64_t npix, int shift, int galactic)
{
    if (!hips_tile_valid(order, npix) || shift < 0 || shift > 16 || order + shift > HIPS_ORDER_MAX)
        return NULL;
    char c[TILE_CARDS_MAX * 80 + 1];
    int n = tile_cards(c, 0, order, npix, shift, galactic);
    c[n * 80] = '\0';
    skywcs *w = NULL;
    if (skywcs_parse(c, n, &w, NULL, 0) != 0)
        return NULL;
    return w;
}

/* ---- datasets on the sky ------------------------------------------------------------- */

/* Great-circle distance in degrees (haversine); NaN when an input is. */
static double angdist(double l1, double b1, double l2, double b2)
{
    double sb = sin(0.5 * (b2 - b1) * DEG2RAD), sl = sin(0.5 * (l2 - l1) * DEG2RAD);
    double h = sb * sb + cos(b1 * DEG2RAD) * cos(b2 * DEG2RAD) * sl * sl;
    return 2.0 * asin(sqrt(h > 1.0 ? 1.0 : h)) * RAD2DEG;
}

static void unit_vector(double lon, double lat, double v[3])
{
    double cl = cos(lat * DEG2RAD);
    v[0] = cl * cos(lon * DEG2RAD);
    v[1] = cl * sin(lon * DEG2RAD);
    v[2] = sin(lat * DEG2RAD);
}

int hips_dataset_geometry(const skywcs *cel, long nx, long ny, int galactic, double *ra,
                          double *dec, double *lon, double *lat, double *pixscale,
                          double *fov)
{
    skywcs *w = cel ? skywcs_copy(cel) : NULL;
    if (!w)
        return cel ? TESS_ENOMEM : TESS_ENOWCS;
    double cx = 0.5 * (double)(nx - 1), cy = 0.5 * (double)(ny - 1);
    /* centre, then the corners of the centre pixel */
    double px[5] = {cx, cx - 0.5, cx + 0.5, cx + 0.5, cx - 0.5};
    double py[5] = {cy, cy - 0.5, cy - 0.5, cy + 0.5, cy + 0.5};
    double sl[5], sb[5];
    int rc = skywcs_pix2sky(w, 5, px, py, sl, sb);
    double eq = 0.0;
    sky_frame f = skywcs_frame(w, &eq);
    skywcs_free(w);
    if (rc == TESS_ENOMEM)
        return rc;
    for (int i = 0; i < 5; i++)
        if (rc != 0 || !isfinite(sl[i]) || !isfinite(sb[i]))
            return TESS_ENOWCS;
    double v[4][3];
    for (int i = 0; i < 4; i++)
        unit_vector(sl[i + 1], sb[i + 1], v[i]);
    /* Area of the quadrilateral from its diagonals: |d1 x d2| / 2 (steradians). */
    double d1[3], d2[3];
    for (int k = 0; k < 3; k++) {
        d1[k] = v[2][k] - v[0][k];
        d2[k] = v[3][k] - v[1][k];
    }
    double cr[3] = {d1[1] * d2[2] - d1[2] * d2[1], d1[2] * d2[0] - d1[0] * d2[2],
                    d1[0] * d2[1] - d1[1] * d2[0]};
    double scale = sqrt(0.5 * sqrt(cr[0] * cr[0] + cr[1] * cr[1] + cr[2] * cr[2])) * RAD2DEG;
    double l1 = sl[0], b1 = sb[0], l2 = sl[0], b2 = sb[0];
    sky_convert(f, eq, SKY_FRAME_ICRS, 0.0, 1, &l1, &b1);
    sky_convert(f, eq, galactic ? SKY_FRAME_GALACTIC : SKY_FRAME_ICRS, 0.0, 1, &l2, &b2);
    if (ra)
        *ra = l1;
    if (dec)
        *dec = b1;
    if (lon)
        *lon = l2;
    if (lat)
        *lat = b2;
    if (pixscale)
        *pixscale = scale;
    if (fov) {
        double s = (double)(nx > ny ? nx : ny) * scale;
        *fov = s > 180.0 ? 180.0 : s;
    }
    return 0;
}

/* ---- footprints ---------------------------------------------------------------------- */

/* Where a point of a base face lies on the sphere: face coordinates x (toward the east
 * corner) and y (toward the west corner) in [0, 1], as Healpix_Base::xyf2loc [G05]
 * (equatorial zone z = (2 - jr) 2/3, polar caps z = +-(1 - nr^2 / 3)).  Degrees out. */
static const int jrll[12] = {2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4};
static const int jpll[12] = {1, 3, 5, 7, 0, 2, 4, 6, 1, 3, 5, 7};

static void face_loc(int face, double x, double y, double *lon, double *lat)
{
    double jr = jrll[face] - x - y, nr, z;
    if (jr < 1.0) {
        nr = jr;
        z = 1.0 - nr * nr / 3.0;
    } else if (jr > 3.0) {
        nr = 4.0 - jr;
        z = nr * nr / 3.0 - 1.0;
    } else {
        nr = 1.0;
        z = (2.0 - jr) * 2.0 / 3.0;
    }
    double t = jpll[face] * nr + x - y;
    if (t < 0.0)
        t += 8.0;
    if (t >= 8.0)
        t -= 8.0;
    double phi = nr < 1e-15 ? 0.0 : 0.25 * M_PI * t / nr;
    *lon = phi * RAD2DEG;
    *lat = asin(z > 1.0 ? 1.0 : z < -1.0 ? -1.0 : z) * RAD2DEG;
}

/* Blocks per side of the coarse plan of a tile, and the samples of the image. */
#define PLAN_SHIFT 4
#define PLAN_N (1 << PLAN_SHIFT)
#define IMG_SAMPLES 5

/* The image as the footprint tests see it: a private WCS copy, its frame, and a sample
 * of IMG_SAMPLES^2 positions (corners, edges, centre) in the HiPS frame. */
typedef struct image_ref {
    skywcs *w;
    sky_frame frame, hframe;
    double eq;
    long nx, ny;
    double lon[IMG_SAMPLES * IMG_SAMPLES], lat[IMG_SAMPLES * IMG_SAMPLES];
    double pixscale; /* input pixel size near the centre, degrees (0: unknown) */
    double tol;      /* round-trip tolerance, degrees: about two input pixels */
} image_ref;

static int image_ref_init(image_ref *ir, const skywcs *cel, long nx, long ny, int galactic)
{
    memset(ir, 0, sizeof(*ir));
    if (!cel)
        return TESS_EINVAL;
    if (!(ir->w = skywcs_copy(cel)))
        return TESS_ENOMEM;
    ir->frame = skywcs_frame(ir->w, &ir->eq);
    ir->hframe = galactic ? SKY_FRAME_GALACTIC : SKY_FRAME_ICRS;
    ir->nx = nx;
    ir->ny = ny;
    enum { NS = IMG_SAMPLES * IMG_SAMPLES };
    double x[NS], y[NS];
    for (int j = 0; j < IMG_SAMPLES; j++)
        for (int i = 0; i < IMG_SAMPLES; i++) {
            x[j * IMG_SAMPLES + i] = -0.5 + (double)nx * i / (IMG_SAMPLES - 1);
            y[j * IMG_SAMPLES + i] = -0.5 + (double)ny * j / (IMG_SAMPLES - 1);
        }
    if (skywcs_pix2sky(ir->w, NS, x, y, ir->lon, ir->lat) == TESS_ENOMEM) {
        skywcs_free(ir->w);
        ir->w = NULL;
        return TESS_ENOMEM;
    }
    /* The pixel size from the samples around the centre (the middle row and column). */
    int c = (IMG_SAMPLES / 2) * IMG_SAMPLES + IMG_SAMPLES / 2;
    double sx = angdist(ir->lon[c], ir->lat[c], ir->lon[c + 1], ir->lat[c + 1]) /
                ((double)nx / (IMG_SAMPLES - 1));
    double sy = angdist(ir->lon[c], ir->lat[c], ir->lon[c + IMG_SAMPLES], ir->lat[c + IMG_SAMPLES]) /
                ((double)ny / (IMG_SAMPLES - 1));
    double ps = fmax(isfinite(sx) ? sx : 0.0, isfinite(sy) ? sy : 0.0);
    ir->pixscale = ps;
    ir->tol = ps > 0.0 ? 2.0 * ps : 180.0;
    sky_convert(ir->frame, ir->eq, ir->hframe, 0.0, NS, ir->lon, ir->lat);
    return 0;
}

static void image_ref_release(image_ref *ir)
{
    skywcs_free(ir->w);
    ir->w = NULL;
}

/* Which of the PLAN_N x PLAN_N blocks of a tile may hold input pixels: mask[i][j] for
 * the block of face rows i (toward the east corner: i = 0 is the top of the picture)
 * and columns j.  A block is marked when one of its corners maps within its own
 * diagonal (in input pixels, plus one) of the image's extent [-0.5, n - 0.5], or when a
 * sample of the image falls in it. */
typedef struct tile_plan {
    unsigned char mask[PLAN_N][PLAN_N];
    int any;
} tile_plan;

static int plan_tile(image_ref *ir, int order, int64_t npix, tile_plan *p)
{
    enum { L = PLAN_N + 1, NP = L * L };
    double lon[NP], lat[NP], x[NP], y[NP];
    memset(p, 0, sizeof(*p));
    int face = (int)(npix >> (2 * order));
    uint64_t sub = (uint64_t)npix & (((uint64_t)1 << (2 * order)) - 1);
    double tx = (double)compact_bits(sub), ty = (double)compact_bits(sub >> 1);
    double side = ldexp(1.0, -order);
    for (int a = 0; a < L; a++)        /* a: face x (i), b: face y (j) */
        for (int b = 0; b < L; b++)
            face_loc(face, (tx + (double)a / PLAN_N) * side, (ty + (double)b / PLAN_N) * side,
                     &lon[a * L + b], &lat[a * L + b]);
    sky_convert(ir->hframe, 0.0, ir->frame, ir->eq, NP, lon, lat);
    if (skywcs_sky2pix(ir->w, NP, lon, lat, x, y) == TESS_ENOMEM)
        return TESS_ENOMEM;
    /* The round trip (as reproject's pixel_to_pixel_with_roundtrip): far outside its
     * domain a distortion's inverse can land anywhere, even inside the image. */
    double bl[NP], bb[NP];
    if (skywcs_pix2sky(ir->w, NP, x, y, bl, bb) == TESS_ENOMEM)
        return TESS_ENOMEM;
    for (int k = 0; k < NP; k++)
        if (!(angdist(bl[k], bb[k], lon[k], lat[k]) <= ir->tol))
            x[k] = y[k] = NAN;
    double maxdiag = 0.0;
    double diag[PLAN_N][PLAN_N];
    for (int a = 0; a < PLAN_N; a++)
        for (int b = 0; b < PLAN_N; b++) {
            int k00 = a * L + b, k11 = k00 + L + 1, k01 = k00 + 1, k10 = k00 + L;
            double d1 = hypot(x[k11] - x[k00], y[k11] - y[k00]);
            double d2 = hypot(x[k10] - x[k01], y[k10] - y[k01]);
            double d = isfinite(d1) && isfinite(d2) ? fmax(d1, d2) : NAN;
            /* Where the block could reach the image the mapping is close to its scale at
             * the image: a block whose corners lie far apart in input pixels (across the
             * horizon of a zenithal projection, say) gets no more margin than its angular
             * size in input pixels allows. */
            if (ir->pixscale > 0.0) {
                double ang = fmax(angdist(lon[k00], lat[k00], lon[k11], lat[k11]),
                                  angdist(lon[k01], lat[k01], lon[k10], lat[k10]));
                double cap = 2.0 * ang / ir->pixscale;
                if (!(d <= cap))
                    d = cap;
            }
            diag[a][b] = d;
            if (isfinite(d) && d > maxdiag)
                maxdiag = d;
        }
    double ex = (double)ir->nx - 0.5, ey = (double)ir->ny - 0.5;
    for (int a = 0; a < PLAN_N; a++)
        for (int b = 0; b < PLAN_N; b++) {
            double m = (isfinite(diag[a][b]) ? diag[a][b] : maxdiag) + 1.0;
            int ks[4] = {a * L + b, a * L + b + 1, (a + 1) * L + b, (a + 1) * L + b + 1};
            for (int c = 0; c < 4; c++) {
                double u = x[ks[c]], v = y[ks[c]];
                if (u >= -0.5 - m && u <= ex + m && v >= -0.5 - m && v <= ey + m) {
                    p->mask[a][b] = 1;
                    p->any = 1;
                    break;
                }
            }
        }
    /* The image in the tile: its samples' cells at order + d (d <= PLAN_SHIFT). */
    int d = HIPS_ORDER_MAX - order < PLAN_SHIFT ? HIPS_ORDER_MAX - order : PLAN_SHIFT;
    for (int k = 0; k < IMG_SAMPLES * IMG_SAMPLES; k++) {
        int64_t ip = hips_ang2pix(order + d, ir->lon[k], ir->lat[k]);
        if (ip < 0 || (ip >> (2 * d)) != npix)
            continue;
        uint64_t s = (uint64_t)ip & (((uint64_t)1 << (2 * d)) - 1);
        int a0 = (int)compact_bits(s) << (PLAN_SHIFT - d);
        int b0 = (int)compact_bits(s >> 1) << (PLAN_SHIFT - d);
        int span = 1 << (PLAN_SHIFT - d);
        for (int a = a0; a < a0 + span; a++)
            for (int b = b0; b < b0 + span; b++)
                p->mask[a][b] = 1;
        p->any = 1;
    }
    return 0;
}

/* image_ref_init for a test of tile (order, npix), whose finest samples are at order
 * `deepest`: TESS_EINVAL for an invalid tile, no image or too deep an order. */
static int tile_ref_init(image_ref *ir, const skywcs *cel, long nx, long ny, int galactic,
                         int order, int64_t npix, int deepest)
{
    if (!hips_tile_valid(order, npix) || !cel || deepest > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    return image_ref_init(ir, cel, nx, ny, galactic);
}

int hips_tile_overlaps(const skywcs *cel, long nx, long ny, int galactic, int order,
                       int64_t npix)
{
    image_ref ir;
    int rc = tile_ref_init(&ir, cel, nx, ny, galactic, order, npix, order);
    if (rc)
        return rc;
    tile_plan p;
    rc = plan_tile(&ir, order, npix, &p);
    image_ref_release(&ir);
    return rc ? rc : p.any;
}

/* hips_tiles_covering down to `order`, or, when max_tests > 0, down to the deepest order
 * the walk reaches with at most max_tests tiles tested in all (order 0's 12 always are):
 * *reached is the order of the list. */
static int covering_walk(const skywcs *cel, long nx, long ny, int galactic, int order,
                         size_t max_tests, int64_t **list, size_t *n, int *reached)
{
    *list = NULL;
    *n = 0;
    *reached = order;
    if (!cel || order < 0 || order > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    image_ref ir;
    int rc = image_ref_init(&ir, cel, nx, ny, galactic);
    if (rc)
        return rc;
    int64_t *cur = malloc(sizeof(int64_t) * 12), *next = NULL;
    size_t ncur = 0, tested = 0;
    if (!cur) {
        rc = TESS_ENOMEM;
        goto done;
    }
    for (int k = 0; k <= order; k++) {
        /* Candidates at order k: the 12 base cells, then the children of the tiles kept. */
        size_t ncand = k == 0 ? 12 : 4 * ncur;
        if (k > 0 && max_tests > 0 && ncand > max_tests - tested) {
            *reached = k - 1;
            break;
        }
        tested += ncand;
        if (!(next = malloc(sizeof(int64_t) * (ncand ? ncand : 1)))) {
            rc = TESS_ENOMEM;
            goto done;
        }
        size_t nn = 0;
        for (size_t c = 0; c < ncand; c++) {
            int64_t t = k == 0 ? (int64_t)c : cur[c / 4] * 4 + (int64_t)(c % 4);
            tile_plan p;
            if ((rc = plan_tile(&ir, k, t, &p)) != 0)
                goto done;
            if (p.any)
                next[nn++] = t;
        }
        free(cur);
        cur = next;
        next = NULL;
        ncur = nn;
        if (ncur == 0)
            break;
    }
    if (ncur > 0) {
        *list = cur;
        *n = ncur;
        cur = NULL;
    }
done:
    free(cur);
    free(next);
    image_ref_release(&ir);
    return rc;
}

int hips_tiles_covering(const skywcs *cel, long nx, long ny, int galactic, int order,
                        int64_t **list, size_t *n)
{
    int reached;
    return covering_walk(cel, nx, ny, galactic, order, 0, list, n, &reached);
}

/* ---- rendering ----------------------------------------------------------------------- */

/* 1 when level-k coordinate v lies within e of a sampling decision of an axis of n
 * pixels: the edges -0.5 and n - 0.5, and for nearest every half-integer. */
static inline int near_decision(double v, double e, double n, int nearest)
{
    if (fabs(v + 0.5) <= e || fabs(v - (n - 0.5)) <= e)
        return 1;
    return nearest && isfinite(v) && fabs(v - floor(v) - 0.5) <= e;
}

/* Frees what a tile's rectangle of samples used (the map, its coordinates and their
 * error bounds; each may be NULL) and returns rc. */
static int rect_scratch_free(rp_coordmap *m, double *xo, float *eb, int rc)
{
    free(eb);
    free(xo);
    rp_coordmap_free(m);
    return rc;
}

/* map_rect's pass over whole groups of four positions when no decision lies inside the
 * plane (every kernel but nearest): xo, yo become level-k positions (x - off) scale, and
 * the index of each position within its error bound e = eb scale of an edge (-0.5 or
 * n - 0.5) on either axis is appended to *redo (allocated for n indices at the first,
 * the caller frees it).  Four lanes at once and no branch but the rare append: the same
 * arithmetic and comparisons as near_decision's, lane by lane, so the same flags and
 * positions.  Returns the first index left to the caller (n rounded down to a multiple
 * of four), or (size_t)-1 when out of memory. */
RP_HOT static size_t level_k_edges(size_t n, double *xo, double *yo, const float *eb,
                                   double scale, double off, double knx, double kny,
                                   size_t **redo, size_t *nredo)
{
    const rp_v4q absm = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    const rp_v4d zero = {0.0, 0.0, 0.0, 0.0};
    const double hx = knx - 0.5, hy = kny - 0.5;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        rp_v4d x, y;
        RP_V4D_LOAD(x, xo + i);
        RP_V4D_LOAD(y, yo + i);
        rp_v4d e = {(double)eb[i], (double)eb[i + 1], (double)eb[i + 2], (double)eb[i + 3]};
        e = e * scale;
        rp_v4d xk = (x - off) * scale, yk = (y - off) * scale;
        rp_v4d ax0 = (rp_v4d)((rp_v4q)(xk + 0.5) & absm);
        rp_v4d ax1 = (rp_v4d)((rp_v4q)(xk - hx) & absm);
        rp_v4d ay0 = (rp_v4d)((rp_v4q)(yk + 0.5) & absm);
        rp_v4d ay1 = (rp_v4d)((rp_v4q)(yk - hy) & absm);
        rp_v4q m = (e > zero) & ((ax0 <= e) | (ax1 <= e) | (ay0 <= e) | (ay1 <= e));
        RP_V4D_STORE(xo + i, xk);
        RP_V4D_STORE(yo + i, yk);
        if (RP_V4Q_ANY(m)) {
            if (!*redo && !(*redo = malloc(sizeof(size_t) * n)))
                return (size_t)-1;
            for (int l = 0; l < 4; l++)
                if (m[l])
                    (*redo)[(*nredo)++] = i + (size_t)l;
        }
    }
    return i;
}

/* Maps the tile pixels of the rectangle [x0, x0 + w) x [y0, y0 + h) (FITS row order) to
 * level-k input positions xo, yo (w h each, row-major). */
static int map_rect(rp_coordmap *m, const hips_source *src, long x0, long y0, long w, long h,
                    double *xo, double *yo, float *eb)
{
    size_t n = (size_t)w * (size_t)h;
    double mce = src->max_coord_error;
    if (!(mce >= 0.0) || !isfinite(mce))
        mce = 0.0;
    if (rp_coordmap_lattice(m, (double)x0, (double)y0, w, h, mce, xo, yo, eb) != 0)
        return TESS_ENOMEM;
    /* Level-k positions: pixel i of level k is centred at level-0 i 2^k + (2^k - 1) / 2. */
    double scale = ldexp(1.0, -src->level);
    double off = 0.5 * (ldexp(1.0, src->level) - 1.0);
    int nearest = src->method == RP_NEAREST;
    double knx = (double)src->knx, kny = (double)src->kny;
    size_t nredo = 0, *redo = NULL;
    size_t i = nearest ? 0 : level_k_edges(n, xo, yo, eb, scale, off, knx, kny, &redo, &nredo);
    if (i == (size_t)-1)
        return TESS_ENOMEM;
    for (; i < n; i++) {
        double e = (double)eb[i] * scale;
        double xk = (xo[i] - off) * scale, yk = (yo[i] - off) * scale;
        if (e > 0.0 && (near_decision(xk, e, knx, nearest) ||
                        near_decision(yk, e, kny, nearest))) {
            if (!redo && !(redo = malloc(sizeof(size_t) * n)))
                return TESS_ENOMEM;
            redo[nredo++] = i;
        }
        xo[i] = xk;
        yo[i] = yk;
    }
    if (nredo == 0)
        return 0;
    /* Points next to a decision: the exact transform, as the engine does. */
    double *pm = malloc(sizeof(double) * nredo * 4);
    if (!pm) {
        free(redo);
        return TESS_ENOMEM;
    }
    double *px = pm, *py = pm + nredo, *qx = pm + 2 * nredo, *qy = pm + 3 * nredo;
    for (size_t t = 0; t < nredo; t++) {
        px[t] = (double)(x0 + (long)(redo[t] % (size_t)w));
        py[t] = (double)(y0 + (long)(redo[t] / (size_t)w));
    }
    int rc = rp_coordmap_points(m, nredo, px, py, qx, qy);
    if (rc == 0)
        for (size_t t = 0; t < nredo; t++) {
            xo[redo[t]] = (qx[t] - off) * scale;
            yo[redo[t]] = (qy[t] - off) * scale;
        }
    free(pm);
    free(redo);
    return rc ? TESS_ENOMEM : 0;
}

/* The pixels of tile (order, npix) that may hold data: the bounding box of the blocks
 * plan_tile marks, as a rectangle of tile pixels *x0, *y0, *w, *h (FITS rows: block row
 * a covers face rows [a c, (a + 1) c), i.e. FITS rows W - (a + 1) c ..).  Returns 0 when
 * no block is marked, 1 when one is, or TESS_ENOMEM. */
static int plan_rect(image_ref *ir, int order, int64_t npix, int shift, tile_plan *plan,
                     long *x0, long *y0, long *w, long *h)
{
    int rc = plan_tile(ir, order, npix, plan);
    if (rc)
        return rc;
    if (!plan->any)
        return 0;
    long W = 1L << shift, c = W / PLAN_N;
    int a0 = PLAN_N, a1 = -1, b0 = PLAN_N, b1 = -1;
    for (int a = 0; a < PLAN_N; a++)
        for (int b = 0; b < PLAN_N; b++)
            if (plan->mask[a][b]) {
                a0 = a < a0 ? a : a0;
                a1 = a > a1 ? a : a1;
                b0 = b < b0 ? b : b0;
                b1 = b > b1 ? b : b1;
            }
    *x0 = b0 * c;
    *w = (b1 - b0 + 1) * c;
    *y0 = W - (a1 + 1) * c;
    *h = (a1 - a0 + 1) * c;
    return 1;
}

/* The coordinate map from the pixels of tile (order, npix) to the level-0 input pixels
 * of `src`, with the grid of src; NULL with `err` on failure. */
static rp_coordmap *tile_map(const hips_source *src, int order, int64_t npix, int shift,
                             int galactic, char *err, size_t errlen)
{
    skywcs *tw = hips_tile_wcs(order, npix, shift, galactic);
    if (!tw) {
        put_err(err, errlen, "cannot build the tile's WCS");
        return NULL;
    }
    rp_coordmap *m = rp_coordmap_new(tw, src->cel, err, errlen);
    skywcs_free(tw);
    if (m && src->grid_margin > 0.0 &&
        rp_coordmap_set_grid(m, src->grid_margin, src->grid_cell_min) != 0) {
        rp_coordmap_free(m);
        put_err(err, errlen, "invalid coordinate grid (margin, finest cell)");
        return NULL;
    }
    return m;
}

/* 1 when level-k position (x, y) lies on the level-k plane of src, [-0.5, n - 0.5] on
 * both axes: where every kernel samples (kernels.c). */
static inline int on_plane(const hips_source *src, double x, double y)
{
    return x >= -0.5 && x <= (double)src->knx - 0.5 && y >= -0.5 &&
           y <= (double)src->kny - 0.5;
}

/* The number of finite values among v[0 .. n): isfinite's test, an exponent field not
 * all ones, on four lanes at once. */
RP_HOT static long count_finite(const double *v, size_t n)
{
    const int64_t ex = INT64_C(0x7ff0000000000000);
    const rp_v4q expm = {ex, ex, ex, ex};
    rp_v4q acc = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        rp_v4q b;
        memcpy(&b, v + i, sizeof(b));
        acc -= (b & expm) != expm;   /* a true lane is -1 */
    }
    long c = (long)(acc[0] + acc[1] + acc[2] + acc[3]);
    for (; i < n; i++)
        c += isfinite(v[i]) != 0;
    return c;
}

/* NaN in every pixel of the w x w tile out that lies outside the rectangle of tile pixels
 * [x0, x0 + rw) x [y0, y0 + rh) (FITS rows, placed as `rows` asks): what
 * hips_render_tile writes no value to. */
static void fill_outside(double *out, long w, hips_rows rows, long x0, long y0, long rw,
                         long rh)
{
    for (long row = 0; row < w; row++) {
        long fr = rows == HIPS_ROWS_TOPDOWN ? w - 1 - row : row;
        double *o = out + (size_t)row * (size_t)w;
        long a = w, b = w;   /* the columns left unwritten: [0, a) and [b, w) */
        if (fr >= y0 && fr < y0 + rh) {
            a = x0;
            b = x0 + rw;
        }
        for (long i = 0; i < a; i++)
            o[i] = NAN;
        for (long i = b; i < w; i++)
            o[i] = NAN;
    }
}

long hips_render_tile(const hips_source *src, int order, int64_t npix, int shift,
                      int galactic, hips_rows rows, double *out, char *err, size_t errlen)
{
    if (!src || !src->cel || !src->kernel || !out || shift < PLAN_SHIFT || shift > 16 ||
        !hips_tile_valid(order, npix) || order + shift > HIPS_ORDER_MAX) {
        put_err(err, errlen, "invalid tile, depth or source");
        return TESS_EINVAL;
    }
    long w = 1L << shift;
    image_ref ir;
    tile_plan plan;
    long rx0 = 0, ry0 = 0, rw = 0, rh = 0;
    int prc = image_ref_init(&ir, src->cel, src->nx, src->ny, galactic);
    if (prc == 0) {
        prc = plan_rect(&ir, order, npix, shift, &plan, &rx0, &ry0, &rw, &rh);
        image_ref_release(&ir);
    }
    if (prc <= 0) {
        fill_outside(out, w, rows, 0, 0, 0, 0);
        if (prc < 0)
            put_err(err, errlen, prc == TESS_ENOMEM ? "out of memory" : "invalid source WCS");
        return prc;
    }
    /* Only the pixels outside the rectangle get NaN; those inside get the samples, straight
     * into out where the rectangle's rows are whole FITS rows (one run of memory). */
    fill_outside(out, w, rows, rx0, ry0, rw, rh);
    size_t nr = (size_t)rw * (size_t)rh;
    int direct = rw == w && rows == HIPS_ROWS_FITS;
    rp_coordmap *m = tile_map(src, order, npix, shift, galactic, err, errlen);
    if (!m)
        return TESS_EINVAL;
    /* Room for the samples too even when they go into out: one size for every render of
     * a tile size, so that glibc hands the same chunk back each time (measured: a 2 nr
     * buffer here got trimmed and faulted in again on every render, ~5% of the time). */
    double *xo = malloc(sizeof(double) * nr * 3);
    float *eb = malloc(sizeof(float) * nr);
    long rc = 0;
    if (!xo || !eb || map_rect(m, src, rx0, ry0, rw, rh, xo, xo + nr, eb) != 0) {
        put_err(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
        goto done;
    }
    double *val = direct ? out + (size_t)ry0 * (size_t)w : xo + 2 * nr;
    rp_kernel_sample(src->kernel, nr, xo, xo + nr, val);
    long finite = direct ? count_finite(val, nr) : 0;
    for (long r = 0; r < rh && !direct; r++) {
        long row = ry0 + r;
        if (rows == HIPS_ROWS_TOPDOWN)
            row = w - 1 - row;
        const double *v = val + (size_t)r * (size_t)rw;
        double *o = out + (size_t)row * (size_t)w + (size_t)rx0;
        memcpy(o, v, sizeof(double) * (size_t)rw);
        finite += count_finite(o, (size_t)rw);
    }
    rc = finite;
done:
    return rect_scratch_free(m, xo, eb, rc);
}

/* ---- the footprint ------------------------------------------------------------------- */

/* hips_tile_in_footprint over ir, the image and level of `src` (no kernel needed). */
static int footprint_test(image_ref *ir, const hips_source *src, int order, int64_t npix)
{
    const int shift = HIPS_TILE_SHIFT;
    tile_plan plan;
    long rx0 = 0, ry0 = 0, rw = 0, rh = 0;
    int rc = plan_rect(ir, order, npix, shift, &plan, &rx0, &ry0, &rw, &rh);
    if (rc <= 0)
        return rc;
    char err[128];
    rp_coordmap *m = tile_map(src, order, npix, shift, ir->hframe == SKY_FRAME_GALACTIC,
                              err, sizeof(err));
    if (!m)
        return TESS_ENOMEM;
    /* First the centre pixel of each marked block, transformed exactly: one on the plane
     * by more than the grid's error is on it in the render too. */
    long W = 1L << shift, c = W / PLAN_N;
    double px[PLAN_N * PLAN_N], py[PLAN_N * PLAN_N], qx[PLAN_N * PLAN_N], qy[PLAN_N * PLAN_N];
    size_t np = 0;
    for (int a = 0; a < PLAN_N; a++)
        for (int b = 0; b < PLAN_N; b++)
            if (plan.mask[a][b]) {
                px[np] = (double)(b * c + c / 2);
                py[np] = (double)(W - a * c - c / 2);
                np++;
            }
    double scale = ldexp(1.0, -src->level), off = 0.5 * (ldexp(1.0, src->level) - 1.0);
    double *xo = NULL;
    float *eb = NULL;
    int found = 0;
    if (rp_coordmap_points(m, np, px, py, qx, qy) != 0) {
        rc = TESS_ENOMEM;
        goto done;
    }
    double margin = src->max_coord_error * scale + 1e-9;
    for (size_t k = 0; k < np && !found; k++) {
        double x = (qx[k] - off) * scale, y = (qy[k] - off) * scale;
        found = x >= -0.5 + margin && x <= (double)src->knx - 0.5 - margin &&
                y >= -0.5 + margin && y <= (double)src->kny - 0.5 - margin;
    }
    if (!found) {
        /* Else every pixel of the rectangle, as the render maps them. */
        size_t nr = (size_t)rw * (size_t)rh;
        xo = malloc(sizeof(double) * nr * 2);
        eb = malloc(sizeof(float) * nr);
        if (!xo || !eb || map_rect(m, src, rx0, ry0, rw, rh, xo, xo + nr, eb) != 0) {
            rc = TESS_ENOMEM;
            goto done;
        }
        for (size_t i = 0; i < nr && !found; i++)
            found = on_plane(src, xo[i], xo[nr + i]);
    }
    rc = found;
done:
    return rect_scratch_free(m, xo, eb, rc);
}

/* The level-k geometry of an nx x ny image as the plane store holds it (level clamped to
 * the top of the pyramid, each level (n + 1) / 2 of the one below), with the grid of the
 * FITS tiles: a source for footprint_test. */
static void footprint_source(hips_source *s, const skywcs *cel, long nx, long ny, int level)
{
    memset(s, 0, sizeof(*s));
    int top = pyramid_top_level(nx, ny);
    s->cel = cel;
    s->nx = nx;
    s->ny = ny;
    s->level = level < 0 ? 0 : level > top ? top : level;
    s->knx = nx;
    s->kny = ny;
    for (int k = 0; k < s->level; k++) {
        s->knx = (s->knx + 1) / 2;
        s->kny = (s->kny + 1) / 2;
    }
    s->method = RP_BILINEAR;
    s->max_coord_error = HIPS_FOOTPRINT_MCE;
}

int hips_tile_in_footprint(const skywcs *cel, long nx, long ny, int galactic, int level,
                           int order, int64_t npix)
{
    image_ref ir;
    int rc = tile_ref_init(&ir, cel, nx, ny, galactic, order, npix, order + HIPS_TILE_SHIFT);
    if (rc)
        return rc;
    hips_source s;
    footprint_source(&s, ir.w, nx, ny, level);
    rc = footprint_test(&ir, &s, order, npix);
    image_ref_release(&ir);
    return rc;
}

/* ---- parents from children ----------------------------------------------------------- */

void hips_tile_merge_child(int shift, int c, const double *child, hips_rows rows,
                           double *parent)
{
    long w = 1L << shift, h = w / 2;
    /* Face row i (from the top) and column j of a parent pixel of quadrant c: its cell's
     * four children are rows 2i', 2i' + 1 and columns 2j', 2j' + 1 of child tile c =
     * (j >= h) << 1 | (i >= h), with i' = i mod h, j' = j mod h. */
    long i0 = (c & 1) ? h : 0, j0 = (c & 2) ? h : 0;
    for (long i = i0; i < i0 + h; i++) {
        long y = rows == HIPS_ROWS_TOPDOWN ? i : w - 1 - i;
        for (long j = j0; j < j0 + h; j++) {
            double sum = 0.0;
            int n = 0;
            if (child)
                for (long di = 0; di < 2; di++)
                    for (long dj = 0; dj < 2; dj++) {
                        long ci = 2 * (i % h) + di, cj = 2 * (j % h) + dj;
                        long cy = rows == HIPS_ROWS_TOPDOWN ? ci : w - 1 - ci;
                        double v = child[cy * w + cj];
                        if (isfinite(v)) {
                            sum += v;
                            n++;
                        }
                    }
            parent[y * w + j] = n ? sum / n : NAN;
        }
    }
}

void hips_tile_merge_children(int shift, const double *const child[4], hips_rows rows,
                              double *parent)
{
    for (int c = 0; c < 4; c++)
        hips_tile_merge_child(shift, c, child[c], rows, parent);
}

/* ---- FITS tiles ---------------------------------------------------------------------- */

/* Appends CHECKSUM and DATASUM with placeholder values (fitswrite_checksum_mem sets
 * them) at card *k of `cards`. */
static void checksum_cards(char *cards, int *k)
{
    fitscard_string(card_at(cards, (*k)++), "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_string(card_at(cards, (*k)++), "DATASUM", "0", 0, "data unit checksum");
}

/* A FITS file with BITPIX -32 of w x h doubles (row 0 = FITS row 1, NaN kept), its
 * primary header holding the structural cards, then `extra` (nextra cards), CHECKSUM and
 * DATASUM.  Returns 0, TESS_ENOMEM. */
static int encode_fits_f32(const double *data, long w, long h, const char *extra, int nextra,
                           unsigned char **out, size_t *outlen)
{
    size_t ncards = 7 + (size_t)nextra;
    char *cards = malloc(ncards * 80);
    if (!cards)
        return TESS_ENOMEM;
    int k = 0;
    fitscard_logical(card_at(cards, k++), "SIMPLE", 1, "conforms to FITS standard");
    fitscard_int(card_at(cards, k++), "BITPIX", -32, "IEEE single precision");
    fitscard_int(card_at(cards, k++), "NAXIS", 2, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS1", w, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS2", h, NULL);
    if (nextra > 0)
        memcpy(card_at(cards, k), extra, (size_t)nextra * FITSCARD_LEN);
    k += nextra;
    checksum_cards(cards, &k);
    size_t hlen = fitscard_header_size(k);
    size_t n = (size_t)w * (size_t)h, dlen = n * 4;
    size_t plen = (dlen + 2879) / 2880 * 2880;
    unsigned char *b = malloc(hlen + plen);
    if (!b) {
        free(cards);
        return TESS_ENOMEM;
    }
    fitscard_header_write((char *)b, cards, k);
    free(cards);
    unsigned char *d = b + hlen;
    fitswrite_encode(-32, 0.0, data, d, (long)n);
    memset(d + dlen, 0, plen - dlen);
    int rc = fitswrite_checksum_mem(b, hlen + plen, NULL, 0);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    *outlen = hlen + plen;
    return 0;
}

int hips_encode_fits(const double *data, int order, int64_t npix, int shift, int galactic,
                     unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!data || !hips_tile_valid(order, npix) || shift < 1 || shift > 16 ||
        order + shift > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    char cards[(2 + TILE_CARDS_MAX) * 80];
    fitscard_int(card_at(cards, 0), "ORDER", order, "HiPS tile order (Norder)");
    fitscard_int(card_at(cards, 1), "NPIX", npix, "HiPS tile index, nested HEALPix (Npix)");
    int n = 2 + tile_cards(cards, 2, order, npix, shift, galactic);
    long w = 1L << shift;
    return encode_fits_f32(data, w, w, cards, n, out, outlen);
}

/* ---- encoded tiles ------------------------------------------------------------------ */

const char *hips_format_ext(hips_format f)
{
    return f == HIPS_FMT_FITS ? "fits" : f == HIPS_FMT_JPEG ? "jpg" : "png";
}

const char *hips_format_mime(hips_format f)
{
    return f == HIPS_FMT_FITS ? "application/fits" : f == HIPS_FMT_JPEG ? "image/jpeg"
                                                                        : "image/png";
}

int hips_encode_picture(const double *data, long w, long h, hips_format fmt,
                        const render_params *rp, double lo, double hi, unsigned char **out,
                        size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!data || !rp || fmt == HIPS_FMT_FITS || w <= 0 || h <= 0)
        return TESS_EINVAL;
    if ((size_t)w > SIZE_MAX / 4 / (size_t)h)
        return TESS_ERANGE;
    uint8_t *rgba = malloc((size_t)w * (size_t)h * 4);
    if (!rgba)
        return TESS_ENOMEM;
    int rc = render_rgba_cuts(data, w, h, rp, lo, hi, rgba);
    if (rc == 0)
        rc = fmt == HIPS_FMT_JPEG ? jpeg_encode_rgb(rgba, w, h, HIPS_JPEG_QUALITY, out, outlen)
                                  : png_encode_rgba(rgba, w, h, out, outlen);
    free(rgba);
    return rc;
}

long hips_tile_encode(const hips_source *src, int order, int64_t npix, int galactic,
                      hips_format fmt, const render_params *rp, double lo, double hi,
                      unsigned char **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (!rp && fmt != HIPS_FMT_FITS) {
        put_err(err, errlen, "no rendering parameters");
        return TESS_EINVAL;
    }
    size_t n = (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH;
    double *data = malloc(sizeof(double) * n);
    if (!data) {
        put_err(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long finite = hips_render_tile(src, order, npix, HIPS_TILE_SHIFT, galactic, HIPS_ROWS_FITS,
                                   data, err, errlen);
    finite = hips_tile_encode_data(data, finite, order, npix, galactic, fmt, rp, lo, hi, out,
                                   outlen, err, errlen);
    free(data);
    return finite;
}

long hips_tile_encode_data(const double *data, long finite, int order, int64_t npix,
                           int galactic, hips_format fmt, const render_params *rp, double lo,
                           double hi, unsigned char **out, size_t *outlen, char *err,
                           size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (finite < 0)
        return finite;
    if (!rp && fmt != HIPS_FMT_FITS) {
        put_err(err, errlen, "no rendering parameters");
        return TESS_EINVAL;
    }
    int rc = fmt == HIPS_FMT_FITS
                 ? hips_encode_fits(data, order, npix, HIPS_TILE_SHIFT, galactic, out, outlen)
                 : hips_encode_picture(data, HIPS_TILE_WIDTH, HIPS_TILE_WIDTH, fmt, rp, lo, hi,
                                       out, outlen);
    if (rc != 0) {
        put_err(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "cannot encode the tile");
        return rc;
    }
    return finite;
}

/* ---- Allsky -------------------------------------------------------------------------- */

void hips_allsky_size(int cell, long *w, long *h)
{
    long ntiles = 768;
    long rows = (ntiles + HIPS_ALLSKY_COLS - 1) / HIPS_ALLSKY_COLS;
    *w = (long)HIPS_ALLSKY_COLS * cell;
    *h = rows * cell;
}

void hips_allsky_origin(int64_t npix, int cell, long *x, long *y)
{
    *x = (long)(npix % HIPS_ALLSKY_COLS) * cell;
    *y = (long)(npix / HIPS_ALLSKY_COLS) * cell;
}

long hips_allsky_render(const hips_source *src, int galactic, double **out, long *w, long *h,
                        char *err, size_t errlen)
{
    *out = NULL;
    hips_allsky_size(HIPS_ALLSKY_CELL, w, h);
    if (!src || !src->cel) {
        put_err(err, errlen, "no source");
        return TESS_EINVAL;
    }
    int64_t *tiles = NULL;
    size_t ntiles = 0;
    int rc = hips_tiles_covering(src->cel, src->nx, src->ny, galactic, HIPS_ALLSKY_ORDER, &tiles,
                                 &ntiles);
    if (rc != 0) {
        put_err(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "cannot list the tiles");
        return rc;
    }
    size_t npic = (size_t)*w * (size_t)*h, ncell = (size_t)HIPS_ALLSKY_CELL * HIPS_ALLSKY_CELL;
    double *pic = malloc(sizeof(double) * npic);
    double *cell = malloc(sizeof(double) * ncell);
    if (!pic || !cell) {
        free(tiles);
        free(pic);
        free(cell);
        put_err(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    for (size_t i = 0; i < npic; i++)
        pic[i] = NAN;
    long finite = 0;
    for (size_t t = 0; t < ntiles; t++) {
        long f = hips_render_tile(src, HIPS_ALLSKY_ORDER, tiles[t], HIPS_ALLSKY_SHIFT, galactic,
                                  HIPS_ROWS_TOPDOWN, cell, err, errlen);
        if (f < 0) {
            finite = f;
            break;
        }
        if (f == 0)
            continue;
        finite += f;
        long x0, y0;
        hips_allsky_origin(tiles[t], HIPS_ALLSKY_CELL, &x0, &y0);
        for (long r = 0; r < HIPS_ALLSKY_CELL; r++) {
            /* Picture row y0 + r from the top is row h - 1 - (y0 + r) from the bottom. */
            double *dst = pic + (size_t)(*h - 1 - (y0 + r)) * (size_t)*w + (size_t)x0;
            memcpy(dst, cell + (size_t)r * HIPS_ALLSKY_CELL, sizeof(double) * HIPS_ALLSKY_CELL);
        }
    }
    free(tiles);
    free(cell);
    if (finite < 0) {
        free(pic);
        return finite;
    }
    *out = pic;
    return finite;
}

long hips_allsky_render_from(const hips_source *src, int galactic, const hips_base_source *bs,
                             double **out, long *w, long *h, char *err, size_t errlen)
{
    *out = NULL;
    hips_allsky_size(HIPS_ALLSKY_CELL, w, h);
    if ((src && !src->cel) || !bs || !bs->get) {
        put_err(err, errlen, "no source");
        return TESS_EINVAL;
    }
    /* The order-0 tiles that may hold data, and all their order-3 tiles: a cell that no
     * pixel of the image reaches is NaN in its base tile as it would be rendered alone
     * (both renders mark the blocks that may hold data conservatively), so the walk down
     * to order 3 (some 900 000 WCS transforms for an all-sky map) is not needed.  Without
     * a source (several images: bs knows which faces hold data) every face is asked. */
    int64_t *faces = NULL;
    size_t nfaces = 0;
    int rc = 0;
    if (src) {
        rc = hips_tiles_covering(src->cel, src->nx, src->ny, galactic, 0, &faces, &nfaces);
    } else if ((faces = malloc(sizeof(int64_t) * 12))) {
        for (nfaces = 0; nfaces < 12; nfaces++)
            faces[nfaces] = (int64_t)nfaces;
    } else {
        rc = TESS_ENOMEM;
    }
    if (rc != 0) {
        put_err(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "cannot list the tiles");
        return rc;
    }
    const size_t per_face = (size_t)1 << (2 * HIPS_ALLSKY_ORDER);
    size_t ntiles = nfaces * per_face;
    int64_t *tiles = malloc(sizeof(int64_t) * (ntiles ? ntiles : 1));
    for (size_t k = 0; tiles && k < ntiles; k++)
        tiles[k] = faces[k / per_face] * (int64_t)per_face + (int64_t)(k % per_face);
    free(faces);
    size_t npic = (size_t)*w * (size_t)*h;
    double *pic = tiles ? malloc(sizeof(double) * npic) : NULL;
    if (!pic) {
        free(tiles);
        put_err(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    for (size_t i = 0; i < npic; i++)
        pic[i] = NAN;
    /* Cell pixel (x, y) of order-3 tile T is the HEALPix cell (T << 12) | s of order 9,
     * s its index in the cell: pixel (T mod 64) << 12 | s of base tile T >> 6 (a tile of
     * order 0 at shift 9), which holds the cells of its 64 order-3 tiles, 64 x 64 each.
     * The tiles come in increasing npix, so those of one base tile follow each other. */
    const int bshift = HIPS_ALLSKY_ORDER + HIPS_ALLSKY_SHIFT;
    const long bw = 1L << bshift;
    long finite = 0;
    for (size_t t = 0; t < ntiles && finite >= 0;) {
        int64_t face = tiles[t] >> (2 * HIPS_ALLSKY_ORDER);
        size_t t1 = t;
        while (t1 < ntiles && tiles[t1] >> (2 * HIPS_ALLSKY_ORDER) == face)
            t1++;
        const double *base = NULL;
        long f = bs->get(bs->cls, face, &base, err, errlen);
        if (f < 0) {
            finite = f;
            break;
        }
        for (size_t k = t; f > 0 && k < t1; k++) {
            uint64_t sub = (uint64_t)tiles[k] & (((uint64_t)1 << (2 * HIPS_ALLSKY_ORDER)) - 1);
            long x0, y0;
            hips_allsky_origin(tiles[k], HIPS_ALLSKY_CELL, &x0, &y0);
            for (long r = 0; r < HIPS_ALLSKY_CELL; r++) {
                /* Picture row y0 + r from the top is row h - 1 - (y0 + r) from the bottom;
                 * cell row r from the top. */
                double *dst = pic + (size_t)(*h - 1 - (y0 + r)) * (size_t)*w + (size_t)x0;
                for (long c = 0; c < HIPS_ALLSKY_CELL; c++) {
                    uint64_t s = hips_tile_subindex(HIPS_ALLSKY_SHIFT, c, r, HIPS_ROWS_TOPDOWN);
                    long bx, by;
                    hips_tile_xy(bshift, sub << (2 * HIPS_ALLSKY_SHIFT) | s, HIPS_ROWS_FITS, &bx,
                                 &by);
                    double v = base[(size_t)by * (size_t)bw + (size_t)bx];
                    dst[c] = v;
                    finite += isfinite(v) != 0;
                }
            }
        }
        if (bs->release)
            bs->release(bs->cls, face);
        t = t1;
    }
    free(tiles);
    if (finite < 0) {
        free(pic);
        return finite;
    }
    *out = pic;
    return finite;
}

long hips_allsky_encode(const hips_source *src, int galactic, hips_format fmt,
                        const render_params *rp, double lo, double hi, unsigned char **out,
                        size_t *outlen, char *err, size_t errlen)
{
    return hips_allsky_encode_from(src, galactic, NULL, fmt, rp, lo, hi, out, outlen, err,
                                   errlen);
}

long hips_allsky_encode_from(const hips_source *src, int galactic, const hips_base_source *bs,
                             hips_format fmt, const render_params *rp, double lo, double hi,
                             unsigned char **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (!rp && fmt != HIPS_FMT_FITS) {
        put_err(err, errlen, "no rendering parameters");
        return TESS_EINVAL;
    }
    double *pic = NULL;
    long w, h;
    long finite = bs ? hips_allsky_render_from(src, galactic, bs, &pic, &w, &h, err, errlen)
                     : hips_allsky_render(src, galactic, &pic, &w, &h, err, errlen);
    if (finite < 0)
        return finite;
    int rc;
    if (fmt == HIPS_FMT_FITS) {
        char cards[80];
        fitscard_int(cards, "ORDER", 3, "HiPS order of the Allsky tiles (Norder3)");
        rc = encode_fits_f32(pic, w, h, cards, 1, out, outlen);
    } else {
        rc = hips_encode_picture(pic, w, h, fmt, rp, lo, hi, out, outlen);
    }
    free(pic);
    if (rc != 0) {
        put_err(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "cannot encode the picture");
        return rc;
    }
    return finite;
}

/* ---- MOC ----------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int hips_footprint_cells(const skywcs *cel, long nx, long ny, int galactic, double pixscale,
                         int order, size_t max_tests, int64_t **list, size_t *n, int *reached)
{
    int rc = covering_walk(cel, nx, ny, galactic, order, max_tests, list, n, reached);
    if (rc || *n == 0)
        return rc;
    image_ref ir;
    if ((rc = image_ref_init(&ir, cel, nx, ny, galactic)) != 0) {
        free(*list);
        *list = NULL;
        *n = 0;
        return rc;
    }
    hips_source s;
    footprint_source(&s, ir.w, nx, ny, hips_source_level(*reached, HIPS_TILE_SHIFT, pixscale));
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        rc = footprint_test(&ir, &s, *reached, (*list)[i]);
        if (rc < 0)
            break;
        if (rc)
            (*list)[kept++] = (*list)[i];
        rc = 0;
    }
    image_ref_release(&ir);
    *n = kept;
    if (rc || kept == 0) {
        free(*list);
        *list = NULL;
        *n = 0;
    }
    return rc;
}

int hips_cells_hold(const int64_t *cells, size_t n, int M, int order, int64_t npix)
{
    int64_t lo, hi;
    if (order <= M) {
        lo = npix << (2 * (M - order));
        hi = (npix + 1) << (2 * (M - order));
    } else {
        lo = npix >> (2 * (order - M));
        hi = lo + 1;
    }
    /* The first cell >= lo. */
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (cells[mid] < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < n && cells[a] < hi;
}

int hips_moc_fits(const skywcs *cel, long nx, long ny, int galactic, double pixscale,
                  int order, size_t max_tests, unsigned char **out, size_t *outlen,
                  size_t *ncells)
{
    *out = NULL;
    *outlen = 0;
    if (ncells)
        *ncells = 0;
    int64_t *tiles = NULL;
    size_t n = 0;
    int rc = hips_footprint_cells(cel, nx, ny, galactic, pixscale, order, max_tests, &tiles,
                                  &n, &order);
    if (rc)
        return rc;
    rc = hips_moc_fits_cells(tiles, n, order, galactic, out, outlen, ncells);
    free(tiles);
    return rc;
}

int hips_moc_fits_cells(const int64_t *cells, size_t n, int order, int galactic,
                        unsigned char **out, size_t *outlen, size_t *ncells)
{
    *out = NULL;
    *outlen = 0;
    if (ncells)
        *ncells = 0;
    if (order < 0 || order > HIPS_ORDER_MAX)
        return TESS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!hips_tile_valid(order, cells[i]) || (i > 0 && cells[i] <= cells[i - 1]))
            return TESS_EINVAL;
    int64_t *tiles = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!tiles)
        return TESS_ENOMEM;
    if (n)
        memcpy(tiles, cells, sizeof(int64_t) * n);
    /* NUNIQ = 4^(k+1) + npix, cells merged upwards while all four siblings are present
     * (the list is sorted, so siblings are consecutive). */
    uint64_t *uniq = malloc(sizeof(uint64_t) * (n ? n : 1));
    int64_t *cur = tiles;
    if (!uniq) {
        free(tiles);
        return TESS_ENOMEM;
    }
    size_t nu = 0, ncur = n;
    for (int k = order; k >= 0 && ncur > 0; k--) {
        size_t nn = 0;
        for (size_t i = 0; i < ncur;) {
            int64_t t = cur[i];
            if (k > 0 && (t & 3) == 0 && i + 3 < ncur && cur[i + 3] == t + 3) {
                cur[nn++] = t >> 2;      /* the parent goes up one order */
                i += 4;
            } else {
                uniq[nu++] = ((uint64_t)4 << (2 * k)) + (uint64_t)t;
                i++;
            }
        }
        ncur = nn;
    }
    free(tiles);
    qsort(uniq, nu, sizeof(uint64_t), cmp_u64);

    char cards[40 * 80];
    int k = 0;
    fitscard_logical(card_at(cards, k++), "SIMPLE", 1, NULL);
    fitscard_int(card_at(cards, k++), "BITPIX", 8, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS", 0, NULL);
    fitscard_logical(card_at(cards, k++), "EXTEND", 1, NULL);
    checksum_cards(cards, &k);
    int prim = k;
    fitscard_string(card_at(cards, k++), "XTENSION", "BINTABLE", 8, NULL);
    fitscard_int(card_at(cards, k++), "BITPIX", 8, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS", 2, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS1", 8, NULL);
    fitscard_int(card_at(cards, k++), "NAXIS2", (long long)nu, NULL);
    fitscard_int(card_at(cards, k++), "PCOUNT", 0, NULL);
    fitscard_int(card_at(cards, k++), "GCOUNT", 1, NULL);
    fitscard_int(card_at(cards, k++), "TFIELDS", 1, NULL);
    fitscard_string(card_at(cards, k++), "TTYPE1", "UNIQ", 8, NULL);
    fitscard_string(card_at(cards, k++), "TFORM1", "1K", 8, NULL);
    fitscard_string(card_at(cards, k++), "PIXTYPE", "HEALPIX", 8, "HEALPix magic code");
    fitscard_string(card_at(cards, k++), "ORDERING", "NUNIQ", 8, "NUNIQ coding method");
    fitscard_string(card_at(cards, k++), "COORDSYS", galactic ? "G" : "C",
                    8, galactic ? "Galactic frame (the HiPS frame)" : "ICRS reference frame");
    fitscard_int(card_at(cards, k++), "MOCORDER", order, "MOC resolution (best order)");
    fitscard_string(card_at(cards, k++), "MOCTOOL", "Tessera", 8, NULL);
    checksum_cards(cards, &k);
    size_t h1 = fitscard_header_size(prim);
    size_t h2 = fitscard_header_size(k - prim);
    size_t dlen = nu * 8, plen = (dlen + 2879) / 2880 * 2880;
    unsigned char *b = malloc(h1 + h2 + plen);
    if (!b) {
        free(uniq);
        return TESS_ENOMEM;
    }
    fitscard_header_write((char *)b, cards, prim);
    fitscard_header_write((char *)b + h1, card_at(cards, prim), k - prim);
    unsigned char *d = b + h1 + h2;
    for (size_t i = 0; i < nu; i++)
        for (int byte = 0; byte < 8; byte++)
            d[8 * i + (size_t)byte] = (unsigned char)(uniq[i] >> (56 - 8 * byte));
    memset(d + dlen, 0, plen - dlen);
    free(uniq);
    int rc = fitswrite_checksum_mem(b, h1 + h2 + plen, NULL, 0);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    *outlen = h1 + h2 + plen;
    if (ncells)
        *ncells = nu;
    return 0;
}

/* ---- properties ---------------------------------------------------------------------- */

int hips_properties_text(const hips_properties *p, char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!p || !p->name || !p->builder || !p->tile_formats)
        return TESS_EINVAL;
    char date[32];
    struct tm tm;
    time_t t = p->released;
    if (!gmtime_r(&t, &tm) || strftime(date, sizeof(date), "%Y-%m-%dT%H:%MZ", &tm) == 0)
        return TESS_EINVAL;
    buf b;
    buf_init(&b, 1 << 16);
    int bad = 0;
    bad |= buf_printf(&b, "%-20s = ivo://tessera/%s\n", "creator_did", p->name);
    bad |= buf_printf(&b, "%-20s = %s\n", "obs_title", p->name);
    if (p->description && p->description[0])
        bad |= buf_printf(&b, "%-20s = %s\n", "obs_description", p->description);
    if (p->cube_depth > 1) {
        bad |= buf_printf(&b, "%-20s = %s\n", "dataproduct_type", "cube");
        bad |= buf_printf(&b, "%-20s = %ld\n", "hips_cube_depth", p->cube_depth);
        bad |= buf_printf(&b, "%-20s = %ld\n", "hips_cube_firstframe", p->cube_firstframe);
        if (isfinite(p->cube_crval3) && isfinite(p->cube_cdelt3) && p->cube_cdelt3 != 0.0) {
            bad |= buf_printf(&b, "%-20s = %d\n", "data_cube_crpix3", 1);
            bad |= buf_printf(&b, "%-20s = %.17g\n", "data_cube_crval3", p->cube_crval3);
            bad |= buf_printf(&b, "%-20s = %.17g\n", "data_cube_cdelt3", p->cube_cdelt3);
            if (p->cube_bunit3 && p->cube_bunit3[0])
                bad |= buf_printf(&b, "%-20s = %s\n", "data_cube_bunit3", p->cube_bunit3);
        }
    } else {
        bad |= buf_printf(&b, "%-20s = %s\n", "dataproduct_type", "image");
    }
    if (isfinite(p->em_min) && isfinite(p->em_max) && p->em_min > 0.0 && p->em_max > 0.0) {
        bad |= buf_printf(&b, "%-20s = %.17g\n", "em_min", p->em_min);
        bad |= buf_printf(&b, "%-20s = %.17g\n", "em_max", p->em_max);
    }
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_version", "1.4");
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_builder", p->builder);
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_release_date", date);
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_status", "public master clonableOnce");
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_tile_format", p->tile_formats);
    bad |= buf_printf(&b, "%-20s = %d\n", "hips_tile_width", HIPS_TILE_WIDTH);
    bad |= buf_printf(&b, "%-20s = %d\n", "hips_order", p->order);
    bad |= buf_printf(&b, "%-20s = %d\n", "hips_order_min", 0);
    bad |= buf_printf(&b, "%-20s = %s\n", "hips_frame", p->galactic ? "galactic" : "equatorial");
    bad |= buf_printf(&b, "%-20s = %d\n", "hips_pixel_bitpix", -32);
    bad |= buf_printf(&b, "%-20s = %.10g %.10g\n", "hips_pixel_cut", p->cut_lo, p->cut_hi);
    bad |= buf_printf(&b, "%-20s = %.10g %.10g\n", "hips_data_range", p->data_min, p->data_max);
    bad |= buf_printf(&b, "%-20s = %.10g\n", "hips_pixel_scale",
                      hips_cell_size(p->order + HIPS_TILE_SHIFT));
    bad |= buf_printf(&b, "%-20s = %.10f\n", "hips_initial_ra", p->ra);
    bad |= buf_printf(&b, "%-20s = %.10f\n", "hips_initial_dec", p->dec);
    bad |= buf_printf(&b, "%-20s = %.10g\n", "hips_initial_fov", p->fov);
    if (p->bunit && p->bunit[0])
        bad |= buf_printf(&b, "%-20s = %s\n", "data_pixel_unit", p->bunit);
    char *text = bad ? NULL : buf_detach(&b, outlen);
    buf_release(&b);
    if (!text) {
        *outlen = 0;
        return TESS_ENOMEM;
    }
    *out = text;
    return 0;
}

/* Appends s with the HTML special characters escaped; errors as buf_add. */
static int html_escaped(buf *b, const char *s)
{
    int bad = 0;
    for (; *s && !bad; s++) {
        switch (*s) {
        case '<': bad = buf_adds(b, "&lt;"); break;
        case '>': bad = buf_adds(b, "&gt;"); break;
        case '&': bad = buf_adds(b, "&amp;"); break;
        case '"': bad = buf_adds(b, "&quot;"); break;
        default: bad = buf_add(b, s, 1); break;
        }
    }
    return bad;
}

int hips_index_html(const hips_index *x, char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    static const hips_format order[] = { HIPS_FMT_PNG, HIPS_FMT_JPEG, HIPS_FMT_FITS };
    const char *first = NULL;
    for (int i = 0; i < 3 && x && !first; i++)
        if (x->formats & HIPS_FMT_BIT(order[i]))
            first = hips_format_ext(order[i]);
    if (!x || !x->name || !x->made_by || !x->source || !x->how || !first)
        return TESS_EINVAL;
    buf b;
    buf_init(&b, 1 << 16);
    int bad = buf_adds(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">");
    if (x->base_href) {
        bad |= buf_adds(&b, "<base href=\"");
        bad |= html_escaped(&b, x->base_href);
        bad |= buf_adds(&b, "\">");
    }
    bad |= buf_adds(&b, "<title>HiPS ");
    bad |= html_escaped(&b, x->name);
    bad |= buf_adds(&b, "</title></head>\n<body>\n<h1>HiPS ");
    bad |= html_escaped(&b, x->name);
    bad |= buf_printf(&b, "</h1>\n<p>An IVOA HiPS 1.0 survey %s <b>", x->made_by);
    bad |= html_escaped(&b, x->source);
    if (x->images > 0)
        bad |= buf_printf(&b, "</b> (%ld images, %s frame", x->images,
                          x->galactic ? "galactic" : "equatorial");
    else
        bad |= buf_printf(&b, "</b> (%ld x %ld pixels, %s frame", x->nx, x->ny,
                          x->galactic ? "galactic" : "equatorial");
    if (x->order >= 0)
        bad |= buf_printf(&b, ", orders 0 to %d", x->order);
    bad |= buf_printf(&b, "). %s, or read the <a href=\"properties\">properties</a>.</p>\n"
                      "<ul>\n<li><a href=\"Norder3/Allsky.%s\">Norder3/Allsky.%s</a>, "
                      "<a href=\"Moc.fits\">Moc.fits</a></li>\n<li>tiles: Norder{K}/Dir{D}/Npix{N}",
                      x->how, first, first);
    const char *sep = ".";
    for (int i = 0; i < 3; i++)
        if (x->formats & HIPS_FMT_BIT(order[i])) {
            bad |= buf_printf(&b, "%s%s", sep, hips_format_ext(order[i]));
            sep = ", .";
        }
    bad |= buf_printf(&b, " (%d x %d)</li>\n</ul>\n</body></html>\n", HIPS_TILE_WIDTH,
                      HIPS_TILE_WIDTH);
    char *text = bad ? NULL : buf_detach(&b, outlen);
    buf_release(&b);
    if (!text) {
        *outlen = 0;
        return TESS_ENOMEM;
    }
    *out = text;
    return 0;
}
