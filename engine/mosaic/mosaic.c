/* Mosaics as stages of blocks: per-input reprojection over its own box, overlap fits,
 * a global background solve, and a coadd by bands of output rows (see mosaic.h). */
#include "engine/mosaic/mosaic.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/base/byteswap.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Stage kinds. */
enum { ST_REPROJECT, ST_OVERLAPS, ST_SOLVE, ST_COADD };

/* Points an overlap fit keeps at most (before subsampling rounds it). */
#define FIT_POINTS ((long)1 << 20)
/* Weight a pixel needs to count in an overlap fit. */
#define FIT_MIN_WEIGHT 0.999
/* Bytes a coadd row group may hold in its buffers. */
#define COADD_BYTES ((size_t)64 << 20)
/* Bytes of input pixels (as float32) a reprojection band may read before bands are made
 * shorter. */
#define BAND_INPUT_BYTES ((double)((size_t)64 << 20))
/* Intervals an outline edge has at most. */
#define OUTLINE_MAX 65536
/* Slabs of rows a box is cut into to estimate the input pixels of its bands (at first, at
 * most), and samples per slab boundary (twice that, with the midpoints). */
#define EST_SLABS_MIN 64
#define EST_SLABS_MAX 4096
#define EST_EDGE 16
/* Slabs one plan maps in all, beyond the first EST_SLABS_MIN of each input (about 2.3
 * million transformed points), so that many large inputs cannot make planning slow. */
#define EST_SLABS_TOTAL 65536
/* Memory of a reprojection block besides its pixels (coordinate maps, kernel tables). */
#define REPROJECT_OVERHEAD ((double)((size_t)8 << 20))

/* One input as planned. */
typedef struct src {
    char *path, *name;
    int hdu;
    long nx, ny;
    char *cards;           /* the input's header cards */
    int nkeys;
    int crop_ok;           /* 1 when a crop may carry a shifted CRPIX (no pixel-based
                              distortion tables) and the method is local */
    skywcs *cel;           /* celestial 2-D WCS of the whole input */
    char bunit[72];
    long box[4];           /* x0, y0, w, h in output pixels; w = 0: no overlap */
    long rows;             /* rows per reprojection band */
    int rows_cut;          /* 1: fewer rows than the default (a large input) */
    double crop_px;        /* input pixels a band reads at most (estimate) */
    long nbands;
    long block0;           /* first block of the reprojection stage */
} src;

/* Moments of one overlap fit (normalised coordinates u = (x - cx) / s, v = (y - cy) / s):
 * m = sum of [1 u v]^T [1 u v] (upper triangle: 11 1u 1v uu uv vv), r = sum of [1 u v] d. */
typedef struct ov_rec {
    int32_t j, pad;
    double n;
    double m[6];
    double r[3];
} ov_rec;

struct mosaic {
    char *workdir;
    int n;
    src *in;
    rp_method method;
    mos_combine combine;
    mos_bg bg;
    char *tcards;          /* the target's WCS cards (structural keywords removed) */
    int tkeys;
    skywcs *tcel;          /* celestial WCS of the full target grid */
    long nx, ny;
    long coadd_rows, coadd_bands;
    double max_block;      /* spec->max_block_bytes */
    long est_slabs;        /* slabs mapped by fit_band_rows so far (EST_SLABS_TOTAL) */
    int nstages;
    int kind[4];
    long nblocks[4];
    /* mosaic.fits layout */
    size_t h0, d0, h1, d1;
    /* corrections in output pixels (n x 3), loaded once after the solve stage */
    pthread_mutex_t lock;
    int corr_loaded;
    double *corr;
};

/* ------------------------------------------------------------------------------------ */
/* Names                                                                                  */

static const char *const combine_names[] = { "mean", "sum", "median", "min", "max", "first",
                                             "last" };

int mos_combine_parse(const char *s, mos_combine *c)
{
    for (int i = 0; s && i < 7; i++)
        if (strcasecmp(s, combine_names[i]) == 0) {
            *c = (mos_combine)i;
            return 0;
        }
    return TESS_EINVAL;
}

const char *mos_combine_name(mos_combine c)
{
    return (int)c >= 0 && (int)c < 7 ? combine_names[c] : "unknown";
}

const char *mos_bg_name(mos_bg b)
{
    return b == MOS_BG_PLANE ? "plane" : b == MOS_BG_LEVEL ? "level" : "none";
}

/* ------------------------------------------------------------------------------------ */
/* Cards                                                                                  */

/* The mosaic's headers are fitscard lists (engine/fits/fitscard.h) of at most this many
 * cards. */
#define MOS_MAX_CARDS 100000

/* A string card, padded to 8 characters; a value too long for one card keeps its end,
 * which names the file, after "...". */
static void add_str(fitscard_list *b, const char *key, const char *s, const char *comment)
{
    char t[64];
    size_t len = strlen(s);
    if (len > 60) {
        snprintf(t, sizeof t, "...%s", s + len - 57);
        s = t;
    }
    fitscard_list_string(b, key, s, 8, comment);
}

int mos_cards_from_text(const char *text, size_t len, char **cards, int *nkeys, char *err,
                        size_t errlen)
{
    return fitscard_parse(text, len, MOS_MAX_CARDS, cards, nkeys, err, errlen);
}

/* A copy of `cards` whose pixel origin is moved to (dx, dy) (fitsimg_header_shift; a
 * CRPIXn the header leaves at its default 0 is added): a WCS for the sub-grid whose pixel
 * (0, 0) is (dx, dy) of the original.  Returns the parsed WCS or NULL with `err`. */
static skywcs *shifted_wcs(const char *cards, int nkeys, long dx, long dy, char *err,
                           size_t errlen)
{
    fitscard_list b;
    fitscard_list_init(&b, nkeys + 2);
    int has[2] = { 0, 0 };
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        has[0] |= fitscard_key_is(c, "CRPIX1");
        has[1] |= fitscard_key_is(c, "CRPIX2");
    }
    fitscard_list_cards(&b, cards, nkeys);
    const double shift[2] = { (double)dx, (double)dy };
    for (int k = 0; k < 2; k++)
        if (!has[k])
            fitscard_list_real(&b, k ? "CRPIX2" : "CRPIX1", 0.0, 14, NULL);
    skywcs *w = NULL, *cel = NULL;
    if (b.rc) {
        tess_seterr(err, errlen, "out of memory");
    } else {
        fitsimg_header_shift(b.cards, b.n, shift, 2);
        if (skywcs_parse(b.cards, b.n, &w, err, errlen) == 0) {
            cel = skywcs_celestial(w);
            if (!cel)
                tess_seterr(err, errlen, "the WCS has no celestial axes");
        }
    }
    skywcs_free(w);
    fitscard_list_release(&b);
    return cel;
}

/* ------------------------------------------------------------------------------------ */
/* Geometry                                                                               */

/* n points of the outline of the rectangle [x0, x1] x [y0, y1], edges sampled every
 * `step` (at least 16 and at most OUTLINE_MAX intervals an edge), in order round the
 * outline.  *px, *py malloc'd. */
static long outline(double x0, double y0, double x1, double y1, double step, double **px,
                    double **py)
{
    double fnx = ceil((x1 - x0) / step), fny = ceil((y1 - y0) / step);
    long nx = fnx < OUTLINE_MAX ? (long)fnx : OUTLINE_MAX;
    long ny = fny < OUTLINE_MAX ? (long)fny : OUTLINE_MAX;
    if (nx < 16)
        nx = 16;
    if (ny < 16)
        ny = 16;
    long n = 2 * (nx + ny);
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    if (!x || !y) {
        free(x);
        free(y);
        return -1;
    }
    long k = 0;
    for (long i = 0; i < nx; i++, k++) {
        x[k] = x0 + (x1 - x0) * (double)i / (double)nx;
        y[k] = y0;
    }
    for (long i = 0; i < ny; i++, k++) {
        x[k] = x1;
        y[k] = y0 + (y1 - y0) * (double)i / (double)ny;
    }
    for (long i = 0; i < nx; i++, k++) {
        x[k] = x1 - (x1 - x0) * (double)i / (double)nx;
        y[k] = y1;
    }
    for (long i = 0; i < ny; i++, k++) {
        x[k] = x0;
        y[k] = y1 - (y1 - y0) * (double)i / (double)ny;
    }
    *px = x;
    *py = y;
    return n;
}

/* Transforms n pixel positions of `from` to pixel positions of `to` in place (frames
 * converted).  Returns 0 or a TESS_E* code. */
static int pix2pix(skywcs *from, skywcs *to, long n, double *x, double *y)
{
    double *lon = malloc(sizeof(double) * (size_t)n), *lat = malloc(sizeof(double) * (size_t)n);
    int rc = TESS_ENOMEM;
    if (lon && lat) {
        rc = skywcs_pix2sky(from, (size_t)n, x, y, lon, lat);
        if (rc == 0) {
            skywcs_convert(from, to, (size_t)n, lon, lat);
            rc = skywcs_sky2pix(to, (size_t)n, lon, lat, x, y);
        }
    }
    free(lon);
    free(lat);
    return rc;
}

/* The box of the pixel positions (x, y) on an nx x ny grid, padded by `pad` and clipped;
 * the whole grid when some position is NaN or consecutive points jump by more than
 * `jump`; w = h = -1 when every position is NaN.  box = {x0, y0, w, h}. */
static void points_box(long n, const double *x, const double *y, long nx, long ny, long pad,
                       double jump, long box[4])
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int whole = 0;
    for (long k = 0; k < n && !whole; k++) {
        if (!isfinite(x[k]) || !isfinite(y[k])) {
            whole = 1;   /* 1: no point maps; 2: some do */
            for (long q = 0; q < n; q++)
                if (isfinite(x[q]) && isfinite(y[q]))
                    whole = 2;
            break;
        }
        long p = k ? k - 1 : n - 1;
        if (isfinite(x[p]) && isfinite(y[p])
            && (fabs(x[k] - x[p]) > jump || fabs(y[k] - y[p]) > jump))
            whole = 2;
        xmin = fmin(xmin, x[k]);
        xmax = fmax(xmax, x[k]);
        ymin = fmin(ymin, y[k]);
        ymax = fmax(ymax, y[k]);
    }
    if (whole == 1) {
        /* No point of the outline maps: the two grids may still overlap when one holds
         * the other whole; the caller checks. */
        box[0] = box[1] = 0;
        box[2] = box[3] = -1;
        return;
    }
    if (whole) {
        box[0] = 0;
        box[1] = 0;
        box[2] = nx;
        box[3] = ny;
        return;
    }
    /* Keep the arithmetic in doubles until clipped: positions may be far off the grid. */
    double fx0 = floor(xmin) - (double)pad, fx1 = ceil(xmax) + 1.0 + (double)pad;
    double fy0 = floor(ymin) - (double)pad, fy1 = ceil(ymax) + 1.0 + (double)pad;
    fx0 = fmax(fx0, 0.0);
    fy0 = fmax(fy0, 0.0);
    fx1 = fmin(fx1, (double)nx);
    fy1 = fmin(fy1, (double)ny);
    if (fx1 <= fx0 || fy1 <= fy0) {
        box[0] = box[1] = box[2] = box[3] = 0;
        return;
    }
    box[0] = (long)fx0;
    box[1] = (long)fy0;
    box[2] = (long)fx1 - box[0];
    box[3] = (long)fy1 - box[1];
}

int mos_bbox(skywcs *in, long nx, long ny, skywcs *out, long out_nx, long out_ny, long box[4])
{
    double *x, *y;
    long n = outline(-0.5, -0.5, (double)nx - 0.5, (double)ny - 0.5, 8.0, &x, &y);
    if (n < 0)
        return TESS_ENOMEM;
    int rc = pix2pix(in, out, n, x, y);
    if (rc == 0)
        points_box(n, x, y, out_nx, out_ny, 1,
                   0.25 * (double)(out_nx > out_ny ? out_nx : out_ny), box);
    free(x);
    free(y);
    if (rc == 0 && box[2] < 0) {
        /* The outline has no position on the output: either far apart, or the output
         * lies inside the input (whose edges are then beyond the output's projection):
         * test the output's centre. */
        double cx = 0.5 * (double)(out_nx - 1), cy = 0.5 * (double)(out_ny - 1);
        rc = pix2pix(out, in, 1, &cx, &cy);
        int in_input = rc == 0 && cx >= -0.5 && cy >= -0.5 && cx <= (double)nx - 0.5
                       && cy <= (double)ny - 0.5;
        box[0] = box[1] = 0;
        box[2] = in_input ? out_nx : 0;
        box[3] = in_input ? out_ny : 0;
    }
    return rc;
}

/* Bytes a reprojection block holds per input pixel it reads: the float32 pixels, and for
 * bicubic the spline coefficients (double) and three byte masks (engine/sky/kernels.c). */
static double input_bpp(rp_method method)
{
    return method == RP_BICUBIC ? 15.0 : 4.0;
}

/* Crops of the slabs of s's box: rows [sy[k], sy[k + 1]) of the box (0-based from its
 * top) as boxes {x0, y0, w, h} on the input, estimated from the slab edges: the ns + 1
 * row boundaries sampled 2 x EST_EDGE times across the box and the sides at each slab's
 * middle, mapped onto the input once (adjacent slabs share a boundary), each slab's
 * points boxed as points_box does (the whole input when some point does not map or the
 * outline jumps) and padded by 4 pixels and by twice the largest distance of a mapped
 * midpoint from the chord of its neighbours (how far the mapped edges bend between
 * samples, which bounds what the finer outline of run_reproject adds).  Returns 0 or
 * TESS_ENOMEM. */
static int slab_crops(const mosaic *m, const src *s, long ns, const long *sy, long (*sc)[4])
{
    const long ne = 2 * EST_EDGE + 1, nl = ns + 1, npt = nl * ne + 2 * ns;
    double *x = malloc(sizeof(double) * (size_t)npt), *y = malloc(sizeof(double) * (size_t)npt);
    double *ox = malloc(sizeof(double) * (size_t)(2 * ne + 2));
    double *oy = malloc(sizeof(double) * (size_t)(2 * ne + 2));
    if (!x || !y || !ox || !oy) {
        free(x);
        free(y);
        free(ox);
        free(oy);
        return TESS_ENOMEM;
    }
    const double x0 = (double)s->box[0] - 0.5, w = (double)s->box[2];
    const double top = (double)s->box[1] - 0.5;
    for (long l = 0; l < nl; l++)
        for (long j = 0; j < ne; j++) {
            x[l * ne + j] = x0 + w * (double)j / (double)(ne - 1);
            y[l * ne + j] = top + (double)sy[l];
        }
    for (long k = 0; k < ns; k++)
        for (int side = 0; side < 2; side++) {
            x[nl * ne + 2 * k + side] = side ? x0 + w : x0;
            y[nl * ne + 2 * k + side] = top + 0.5 * (double)(sy[k] + sy[k + 1]);
        }
    int mapped = pix2pix(m->tcel, s->cel, npt, x, y) == 0;
    const double most = (double)s->nx + (double)s->ny;
    const double jump = 0.25 * (double)(s->nx > s->ny ? s->nx : s->ny);
    for (long k = 0; k < ns; k++) {
        long *c = sc[k];
        c[0] = c[1] = 0;
        c[2] = s->nx;
        c[3] = s->ny;
        if (!mapped)
            continue;
        /* The slab's outline in order: its top boundary, right middle, bottom boundary
         * backwards, left middle. */
        const double *tx = x + k * ne, *ty = y + k * ne;
        const double *bx = x + (k + 1) * ne, *by = y + (k + 1) * ne;
        long n = 0;
        for (long j = 0; j < ne; j++, n++) {
            ox[n] = tx[j];
            oy[n] = ty[j];
        }
        ox[n] = x[nl * ne + 2 * k + 1];
        oy[n++] = y[nl * ne + 2 * k + 1];
        for (long j = ne - 1; j >= 0; j--, n++) {
            ox[n] = bx[j];
            oy[n] = by[j];
        }
        ox[n] = x[nl * ne + 2 * k];
        oy[n++] = y[nl * ne + 2 * k];
        /* Midpoints: every other sample of the boundaries; the sides' middles. */
        double bend = 0.0;
        for (long q = 1; q < n; q += 2) {
            long r = q + 1 < n ? q + 1 : 0;
            if (isfinite(ox[q]) && isfinite(oy[q]) && isfinite(ox[q - 1]) && isfinite(oy[q - 1])
                && isfinite(ox[r]) && isfinite(oy[r]))
                bend = fmax(bend, fmax(fabs(ox[q] - 0.5 * (ox[q - 1] + ox[r])),
                                       fabs(oy[q] - 0.5 * (oy[q - 1] + oy[r]))));
        }
        long pad = 4 + (long)ceil(fmin(2.0 * bend, most));
        points_box(n, ox, oy, s->nx, s->ny, pad, jump, c);
        if (c[2] < 0) {
            c[0] = c[1] = 0;
            c[2] = s->nx;
            c[3] = s->ny;
        }
    }
    free(x);
    free(y);
    free(ox);
    free(oy);
    return 0;
}

/* The input pixels the largest band of `r` rows reads by the slab estimate (a band lies in
 * the slabs it touches, so its pixels in the union of their crops). */
static double worst_band(const src *s, long ns, const long *sy, long (*sc)[4], long r)
{
    long bh = s->box[3], k0 = 0;
    double worst = 0.0;
    for (long r0 = 0; r0 < bh; r0 += r) {
        long r1 = r0 + r < bh ? r0 + r : bh;
        while (sy[k0 + 1] <= r0)
            k0++;
        long bx0 = LONG_MAX, by0 = LONG_MAX, bx1 = -1, by1 = -1;
        for (long k = k0; k < ns && sy[k] < r1; k++) {
            if (sc[k][2] <= 0 || sc[k][3] <= 0)
                continue;
            bx0 = sc[k][0] < bx0 ? sc[k][0] : bx0;
            by0 = sc[k][1] < by0 ? sc[k][1] : by0;
            bx1 = sc[k][0] + sc[k][2] > bx1 ? sc[k][0] + sc[k][2] : bx1;
            by1 = sc[k][1] + sc[k][3] > by1 ? sc[k][1] + sc[k][3] : by1;
        }
        if (bx1 > bx0 && by1 > by0)
            worst = fmax(worst, (double)(bx1 - bx0) * (double)(by1 - by0));
    }
    return worst;
}

/* Bands of a large input (over BAND_INPUT_BYTES as float32): *rows halved until the
 * largest band reads at most BAND_INPUT_BYTES by the slab estimate, or is one row.  The
 * slabs start at EST_SLABS_MIN and are made four times finer while the bands are
 * shorter than two slabs (up to EST_SLABS_MAX or one row each, and while the plan's
 * EST_SLABS_TOTAL allows), so the cost follows the bands needed.  Sets s->crop_px (the
 * largest band's input pixels) and s->rows_cut.  Returns 0 or TESS_ENOMEM. */
static int fit_band_rows(mosaic *m, src *s, long *rows)
{
    long bh = s->box[3], r = *rows, ns = bh < EST_SLABS_MIN ? bh : EST_SLABS_MIN;
    double worst = 0.0;
    for (;;) {
        long (*sc)[4] = malloc(sizeof *sc * (size_t)ns);
        long *sy = malloc(sizeof(long) * (size_t)(ns + 1));
        int rc = sc && sy ? 0 : TESS_ENOMEM;
        for (long k = 0; rc == 0 && k <= ns; k++)
            sy[k] = (long)((long long)k * bh / ns);
        if (rc == 0)
            rc = slab_crops(m, s, ns, sy, sc);
        r = *rows;
        for (; rc == 0; r = (r + 1) / 2) {
            worst = worst_band(s, ns, sy, sc, r);
            if (worst * 4.0 <= BAND_INPUT_BYTES || r == 1)
                break;
        }
        free(sc);
        free(sy);
        if (rc)
            return rc;
        long finer = ns * 4 < EST_SLABS_MAX ? ns * 4 : EST_SLABS_MAX;
        if (finer > bh)
            finer = bh;
        if (r * ns >= 2 * bh || finer <= ns || m->est_slabs + finer > EST_SLABS_TOTAL)
            break;
        m->est_slabs += finer;
        ns = finer;
    }
    s->rows_cut = r != *rows;
    s->crop_px = worst;
    *rows = r;
    return 0;
}

/* Unit vector of (lon, lat) degrees. */
static void unit(double lon, double lat, double v[3])
{
    double a = lon * M_PI / 180.0, b = lat * M_PI / 180.0;
    v[0] = cos(b) * cos(a);
    v[1] = cos(b) * sin(a);
    v[2] = sin(b);
}

static double sep_deg(double l1, double b1, double l2, double b2)
{
    double u[3], v[3];
    unit(l1, b1, u);
    unit(l2, b2, v);
    double c[3] = { u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2],
                    u[0] * v[1] - u[1] * v[0] };
    double s = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
    double d = u[0] * v[0] + u[1] * v[1] + u[2] * v[2];
    return atan2(s, d) * 180.0 / M_PI;
}

/* The WCS cards of a frame and projection, CRVAL, CRPIX, square pixels of `cdelt`. */
static void frame_cards(fitscard_list *b, sky_frame frame, const solar_obs *sol,
                        const char *proj, double crval1, double crval2, double crpix1,
                        double crpix2, double cdelt)
{
    /* The CTYPE prefixes: "RA/DEC", "GLON/GLAT", ... "CRLN/CRLT" (RA and DEC padded). */
    const char *ax = sky_frame_axes(frame);
    char lon[8] = "RA--", lat[8] = "DEC-";
    if (strcmp(ax, "RA/DEC") != 0 && strlen(ax) == 9) {
        snprintf(lon, sizeof lon, "%.4s", ax);
        snprintf(lat, sizeof lat, "%.4s", ax + 5);
    }
    char t[16];
    fitscard_list_int(b, "WCSAXES", 2, "Number of coordinate axes");
    snprintf(t, sizeof t, "%s-%.3s", lon, proj);
    add_str(b, "CTYPE1", t, NULL);
    snprintf(t, sizeof t, "%s-%.3s", lat, proj);
    add_str(b, "CTYPE2", t, NULL);
    fitscard_list_real(b, "CRVAL1", crval1, 14, "[deg] Coordinate value at reference point");
    fitscard_list_real(b, "CRVAL2", crval2, 14, "[deg] Coordinate value at reference point");
    fitscard_list_real(b, "CRPIX1", crpix1, 14, "Pixel coordinate of reference point");
    fitscard_list_real(b, "CRPIX2", crpix2, 14, "Pixel coordinate of reference point");
    fitscard_list_real(b, "CDELT1", -cdelt, 14, "[deg] Coordinate increment at reference point");
    fitscard_list_real(b, "CDELT2", cdelt, 14, "[deg] Coordinate increment at reference point");
    add_str(b, "CUNIT1", "deg", NULL);
    add_str(b, "CUNIT2", "deg", NULL);
    if (frame == SKY_FRAME_ICRS) {
        add_str(b, "RADESYS", "ICRS", NULL);
    } else if (frame == SKY_FRAME_FK5) {
        add_str(b, "RADESYS", "FK5", NULL);
        fitscard_list_real(b, "EQUINOX", 2000.0, 14, NULL);
    } else if (frame == SKY_FRAME_FK4) {
        add_str(b, "RADESYS", "FK4", NULL);
        fitscard_list_real(b, "EQUINOX", 1950.0, 14, NULL);
    } else if (frame == SKY_FRAME_ECLIPTIC) {
        fitscard_list_real(b, "EQUINOX", 2000.0, 14, NULL);
    } else if (sol) {
        /* A solar target is seen by the first input's observer (skywcs_parse reads these). */
        fitscard_list_real(b, "RSUN_REF", sol->rsun, FITSCARD_EXACT, NULL);
        if (sol->known) {
            fitscard_list_real(b, "HGLN_OBS", sol->lon, FITSCARD_EXACT, NULL);
            fitscard_list_real(b, "HGLT_OBS", sol->lat, FITSCARD_EXACT, NULL);
            fitscard_list_real(b, "DSUN_OBS", sol->dist, FITSCARD_EXACT, NULL);
            if (sol->has_carr)
                fitscard_list_real(b, "CRLN_OBS", sol->lon + sol->carr_off, FITSCARD_EXACT,
                                   NULL);
        }
        if (sol->date[0])
            add_str(b, "DATE-OBS", sol->date, NULL);
    }
}

int mos_auto_target(int n, skywcs *const *wcs, const long *nx, const long *ny, sky_frame frame,
                    const char *proj, char **cards, int *nkeys, long *out_nx, long *out_ny,
                    char *err, size_t errlen)
{
    *cards = NULL;
    *nkeys = 0;
    if (n < 1) {
        tess_seterr(err, errlen, "no input");
        return TESS_EINVAL;
    }
    if (!proj || !*proj)
        proj = "TAN";
    if (strlen(proj) != 3) {
        tess_seterr(err, errlen, "projection '%s' is not a three-letter code", proj);
        return TESS_EINVAL;
    }
    double ef = 0.0;
    if (frame == SKY_FRAME_NONE)
        frame = skywcs_frame(wcs[0], NULL);
    if (frame == SKY_FRAME_NONE) {
        tess_seterr(err, errlen, "the first input has no celestial frame: give one");
        return TESS_EINVAL;
    }
    /* Solar inputs make a solar target seen by the first input's observer; the frames of
     * the Sun and of the sky do not mix. */
    const solar_obs *sol0 = skywcs_solar(wcs[0]);
    for (int k = 0; k < n; k++) {
        sky_frame fk = skywcs_frame(wcs[k], NULL);
        if (sky_frame_is_solar(fk) != sky_frame_is_solar(frame) ||
            (sky_frame_is_solar(frame) && !sol0)) {
            tess_seterr(err, errlen, "input %d is in the %s frame %s, the target in the %s "
                        "frame %s: solar and sky frames do not mix", k + 1,
                        sky_frame_is_solar(fk) ? "solar" : "sky", sky_frame_name(fk),
                        sky_frame_is_solar(frame) ? "solar" : "sky", sky_frame_name(frame));
            return TESS_EINVAL;
        }
    }
    ef = frame == SKY_FRAME_FK4 ? 1950.0 : frame == SKY_FRAME_FK5 || frame == SKY_FRAME_ECLIPTIC
                                               ? 2000.0 : 0.0;
    double sum[3] = { 0, 0, 0 }, res = INFINITY;
    double *clon = malloc(sizeof(double) * 4 * (size_t)n);
    double *clat = malloc(sizeof(double) * 4 * (size_t)n);
    int rc = 0;
    if (!clon || !clat) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        skywcs_summary s;
        skywcs_describe(wcs[k], &s);
        double cx = s.crpix[0] - 1.0, cy = s.crpix[1] - 1.0;
        /* The reference pixel, the four corners, then points at +-8 and +-16 pixels
         * along each axis: the pixel scale is extrapolated from the two baselines
         * (Richardson: (4 s(8) - s(16)) / 3 cancels the projection's second-order
         * term), long enough that the rounding of the sky positions does not count. */
        double px[13] = { cx, -0.5, (double)nx[k] - 0.5, (double)nx[k] - 0.5, -0.5,
                          cx - 8, cx + 8, cx - 16, cx + 16, cx, cx, cx, cx };
        double py[13] = { cy, -0.5, -0.5, (double)ny[k] - 0.5, (double)ny[k] - 0.5,
                          cy, cy, cy, cy, cy - 8, cy + 8, cy - 16, cy + 16 };
        double lon[13], lat[13], ek = 0.0;
        sky_frame fk = skywcs_frame(wcs[k], &ek);
        rc = skywcs_pix2sky(wcs[k], 13, px, py, lon, lat);
        if (rc) {
            tess_seterr(err, errlen, "input %d: no 2-D celestial WCS", k + 1);
            goto done;
        }
        for (int i = 0; i < 13; i++)
            if (!isfinite(lon[i]) || !isfinite(lat[i])) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "input %d: a corner or the reference pixel has no "
                            "sky position", k + 1);
                goto done;
            }
        double sx = (4.0 * sep_deg(lon[5], lat[5], lon[6], lat[6]) / 16.0
                     - sep_deg(lon[7], lat[7], lon[8], lat[8]) / 32.0) / 3.0;
        double sy = (4.0 * sep_deg(lon[9], lat[9], lon[10], lat[10]) / 16.0
                     - sep_deg(lon[11], lat[11], lon[12], lat[12]) / 32.0) / 3.0;
        res = fmin(res, fmin(sx, sy));
        if (sol0)
            solar_convert(fk, skywcs_solar(wcs[k]), frame, sol0, SOLAR_SPHERE, NULL, 5, lon,
                          lat);
        else
            sky_convert(fk, ek, frame, ef, 5, lon, lat);
        double v[3];
        unit(lon[0], lat[0], v);
        for (int i = 0; i < 3; i++)
            sum[i] += v[i];
        for (int i = 0; i < 4; i++) {
            clon[4 * k + i] = lon[1 + i];
            clat[4 * k + i] = lat[1 + i];
        }
    }
    double norm = sqrt(sum[0] * sum[0] + sum[1] * sum[1] + sum[2] * sum[2]);
    if (!(norm > 0.0) || !(res > 0.0) || !isfinite(res)) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the inputs' centres cancel out or a pixel scale is 0");
        goto done;
    }
    double lon0 = atan2(sum[1], sum[0]) * 180.0 / M_PI;
    double lat0 = asin(fmax(-1.0, fmin(1.0, sum[2] / norm))) * 180.0 / M_PI;
    if (lon0 < 0.0)
        lon0 += 360.0;
    if (lon0 >= 360.0)
        lon0 -= 360.0;
    fitscard_list b;
    fitscard_list_init(&b, MOS_MAX_CARDS);
    frame_cards(&b, frame, sol0, proj, lon0, lat0, 1.0, 1.0, res);
    skywcs *w = NULL;
    if (b.rc) {
        rc = b.rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "bad target WCS values");
        fitscard_list_release(&b);
        goto done;
    }
    rc = skywcs_parse(b.cards, b.n, &w, err, errlen);
    fitscard_list_release(&b);
    if (rc)
        goto done;
    double *x = malloc(sizeof(double) * 4 * (size_t)n), *y = malloc(sizeof(double) * 4 * (size_t)n);
    if (!x || !y) {
        free(x);
        free(y);
        skywcs_free(w);
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    rc = skywcs_sky2pix(w, 4 * (size_t)n, clon, clat, x, y);
    skywcs_free(w);
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (long i = 0; rc == 0 && i < 4L * n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            rc = TESS_EINVAL;
            tess_seterr(err, errlen, "a corner of input %ld is off the %s projection", i / 4 + 1,
                        proj);
            break;
        }
        xmin = fmin(xmin, x[i]);
        xmax = fmax(xmax, x[i]);
        ymin = fmin(ymin, y[i]);
        ymax = fmax(ymax, y[i]);
    }
    free(x);
    free(y);
    if (rc)
        goto done;
    /* Positions are 0-based here; astropy works 1-based: CRPIX = (1 - min1) + 0.5 with
     * min1 = min0 + 1. */
    double w1 = nearbyint(xmax - xmin), h1 = nearbyint(ymax - ymin);
    if (!(w1 >= 1.0 && h1 >= 1.0 && w1 < 1e9 && h1 < 1e9)) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the automatic target would be %.0f x %.0f pixels", w1, h1);
        goto done;
    }
    fitscard_list o;
    fitscard_list_init(&o, MOS_MAX_CARDS);
    frame_cards(&o, frame, sol0, proj, lon0, lat0, 0.5 - xmin, 0.5 - ymin, res);
    fitscard_list_int(&o, "NAXIS1", (long)w1, NULL);
    fitscard_list_int(&o, "NAXIS2", (long)h1, NULL);
    if ((rc = fitscard_list_take(&o, cards, nkeys)) != 0) {
        rc = rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory" : "bad target WCS values");
        goto done;
    }
    *out_nx = (long)w1;
    *out_ny = (long)h1;
done:
    free(clon);
    free(clat);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Files                                                                                  */

/* WORKDIR/<pre><k><post>. */
static void wpath(const mosaic *m, char *out, size_t len, const char *pre, long k,
                  const char *post)
{
    snprintf(out, len, "%s/%s%ld%s", m->workdir, pre, k, post);
}

/* Writes a small file whole: to NAME.tmp, then renamed (no fsync: the job runner syncs
 * the work directory before it records a block).  Returns 0 or TESS_EIO. */
static int write_small(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || tess_pwrite_all(fd, data, n, 0) != 0) {
        tess_seterr(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return TESS_EIO;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        tess_seterr(err, errlen, "cannot rename '%s': %s", tmp, strerror(errno));
        unlink(tmp);
        return TESS_EIO;
    }
    return 0;
}

/* Reads a whole small file (malloc'd, NUL-terminated).  Returns 0 or TESS_EIO. */
static int read_small(const char *path, char **data, size_t *n)
{
    *data = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TESS_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || st.st_size > ((off_t)1 << 31)) {
        close(fd);
        return TESS_EIO;
    }
    char *d = malloc((size_t)st.st_size + 1);
    if (!d || tess_pread_all(fd, d, (size_t)st.st_size, 0) != 0) {
        free(d);
        close(fd);
        return TESS_EIO;
    }
    close(fd);
    d[st.st_size] = '\0';
    *data = d;
    *n = (size_t)st.st_size;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Plan                                                                                   */

int mos_nstages(const mosaic *m)
{
    return m->nstages;
}

int mos_input_overlaps(const mosaic *m, int k)
{
    return k >= 0 && k < m->n && m->in[k].box[2] > 0;
}

long mos_nblocks(const mosaic *m, int stage)
{
    return stage >= 0 && stage < m->nstages ? m->nblocks[stage] : 0;
}

const char *mos_stage_name(const mosaic *m, int stage)
{
    static const char *const names[] = { "reproject", "overlaps", "solve", "coadd" };
    return stage >= 0 && stage < m->nstages ? names[m->kind[stage]] : "none";
}

void mos_target_size(const mosaic *m, long *nx, long *ny)
{
    *nx = m->nx;
    *ny = m->ny;
}

void mos_input_box(const mosaic *m, int k, long box[4])
{
    memcpy(box, m->in[k].box, 4 * sizeof(long));
}

/* Keeps the larger of c->block_bytes and `bytes`, with its description. */
static void est_block(mos_cost *c, double bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void est_block(mos_cost *c, double bytes, const char *fmt, ...)
{
    if (!(bytes > c->block_bytes))
        return;
    c->block_bytes = bytes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->block_what, sizeof c->block_what, fmt, ap);
    va_end(ap);
}

void mos_estimate(const mosaic *m, mos_cost *c)
{
    memset(c, 0, sizeof *c);
    double bpp = input_bpp(m->method), nxo = (double)m->nx;
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    c->product_bytes = (double)(m->h0 + m->d0 + m->h1 + m->d1);
    c->work_bytes = c->product_bytes + (double)m->tkeys * 81.0 + 256.0;
    c->state_bytes = (double)sizeof *m + (double)m->tkeys * 80.0;
    for (int k = 0; k < m->n; k++) {
        const src *s = &m->in[k];
        c->state_bytes += (double)sizeof *s + (double)s->nkeys * 80.0 + 16384.0;
        c->work_bytes += (double)strlen(s->path) + 160.0;
        if (s->box[2] <= 0 || s->box[3] <= 0)
            continue;
        double bw = (double)s->box[2], bh = (double)s->box[3];
        c->work_bytes += bw * bh * 4.0 * (m->method == RP_EXACT ? 2.0 : 1.0);
        /* reprojection: a band's input pixels and its output band (values, footprint) */
        double rows = (double)s->rows;
        est_block(c, s->crop_px * bpp + bw * rows * 8.0 + REPROJECT_OVERHEAD,
                  "reprojection of input '%.80s': a band of %.0f x %.0f output pixels reads "
                  "up to %.0f input pixels", s->name, bw, rows, s->crop_px);
        /* overlap fit: the samples of the largest overlap, at most the box itself (see
         * run_overlaps: at most cw * (h / step + 1) samples, step >= sqrt(area / 2^20)) */
        if (m->bg != MOS_BG_NONE) {
            double area = bw * bh, nin = fmin(area, 1024.0 * sqrt(area) + bw);
            est_block(c, 57.0 * nin + (double)m->n * (double)sizeof(ov_rec),
                      "overlap fit of input '%.80s': up to %.0f samples", s->name, nin);
        }
    }
    if (m->bg != MOS_BG_NONE) {
        double nn = (double)m->n * np;
        est_block(c, nn * nn * 8.0 + nn * 8.0 + (double)m->n * 28.0,
                  "background solve: a %.0f x %.0f normal matrix", nn, nn);
        double pairs = 0.0;
        if (m->n <= 20000) {
            for (int i = 0; i < m->n; i++)
                for (int j = i + 1; j < m->n; j++) {
                    const long *a = m->in[i].box, *b = m->in[j].box;
                    pairs += a[2] > 0 && b[2] > 0 && a[0] < b[0] + b[2] && b[0] < a[0] + a[2]
                             && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
                }
        } else {
            pairs = (double)m->n * (double)(m->n - 1) / 2.0;
        }
        c->work_bytes += pairs * (double)sizeof(ov_rec) + (double)m->n * 32.0;
    }
    /* coadd: the buffers of run_coadd for each band */
    for (long band = 0; band < m->coadd_bands; band++) {
        long y0 = band * m->coadd_rows, y1 = y0 + m->coadd_rows < m->ny ? y0 + m->coadd_rows
                                                                        : m->ny;
        double rowbytes = nxo * 16.0, maxw = 1.0;
        long nk = 0;
        for (int k = 0; k < m->n; k++) {
            const src *s = &m->in[k];
            if (s->box[2] > 0 && s->box[1] < y1 && s->box[1] + s->box[3] > y0) {
                nk++;
                rowbytes += (double)s->box[2] * 8.0;
                maxw = fmax(maxw, (double)s->box[2]);
            }
        }
        int median = m->combine == MOS_MEDIAN;
        if (median)
            rowbytes += nxo * (double)(nk > 0 ? nk : 1) * 4.0 + nxo * 4.0;
        double g = floor((double)COADD_BYTES / rowbytes);
        g = fmin(fmax(g, 1.0), (double)(y1 - y0));
        double gp = g * nxo;
        est_block(c, gp * 24.0 + 8.0 * g * maxw
                  + (median ? gp * (double)(nk > 0 ? nk : 1) * 4.0 + gp * 4.0 : 0.0)
                  + (double)m->n * 4.0,
                  "coadd of %.0f rows of %.0f pixels from %ld inputs", g, nxo, nk);
    }
}

void mos_free(mosaic *m)
{
    if (!m)
        return;
    for (int k = 0; m->in && k < m->n; k++) {   /* m->in is NULL when its calloc failed */
        free(m->in[k].path);
        free(m->in[k].name);
        free(m->in[k].cards);
        skywcs_free(m->in[k].cel);
    }
    free(m->in);
    free(m->tcards);
    skywcs_free(m->tcel);
    free(m->workdir);
    free(m->corr);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The headers of mosaic.fits; `corr` NULL gives zero coefficients (same card count).
 * Returns 0, or TESS_ENOMEM / TESS_EINVAL with both lists released. */
static int build_headers(const mosaic *m, const double *corr, fitscard_list *h0,
                         fitscard_list *h1)
{
    fitscard_list_init(h0, MOS_MAX_CARDS);
    fitscard_list_init(h1, MOS_MAX_CARDS);
    fitscard_list_logical(h0, "SIMPLE", 1, "conforms to FITS standard");
    fitscard_list_int(h0, "BITPIX", -32, "array data type");
    fitscard_list_int(h0, "NAXIS", 2, "number of array dimensions");
    fitscard_list_int(h0, "NAXIS1", m->nx, NULL);
    fitscard_list_int(h0, "NAXIS2", m->ny, NULL);
    fitscard_list_logical(h0, "EXTEND", 1, NULL);
    /* BUNIT when every input says the same. */
    int same = 1;
    for (int k = 1; k < m->n; k++)
        same = same && strcmp(m->in[k].bunit, m->in[0].bunit) == 0;
    add_str(h0, "BUNIT", same ? m->in[0].bunit : "", "of the inputs (empty when they differ)");
    fitscard_list_cards(h0, m->tcards, m->tkeys);
    add_str(h0, "ORIGIN", "Tessera", "tessera mosaic");
    fitscard_list_int(h0, "NINPUTS", m->n, "number of inputs");
    add_str(h0, "METHOD", rp_method_name(m->method), "reprojection method");
    add_str(h0, "COMBINE", mos_combine_name(m->combine), "how overlapping values combine");
    add_str(h0, "BGMATCH", mos_bg_name(m->bg), "background matching: none, plane, level");
    for (int k = 0; k < m->n; k++) {
        char key[16];
        snprintf(key, sizeof key, "INP%d", k + 1);
        add_str(h0, key, m->in[k].name,
                m->in[k].box[2] > 0 ? NULL : "does not overlap the target: adds nothing");
    }
    if (m->bg != MOS_BG_NONE) {
        fitscard_list_commentary(h0, "COMMENT", "Background of input n subtracted: BGAn + "
                                 "BGBn * x + BGCn * y,");
        fitscard_list_commentary(h0, "COMMENT", "x, y 0-based pixel coordinates of this "
                                 "image.");
        for (int k = 0; k < m->n; k++) {
            static const char *const p[3] = { "BGA", "BGB", "BGC" };
            for (int c = 0; c < 3; c++) {
                char key[16];
                snprintf(key, sizeof key, "%s%d", p[c], k + 1);
                fitscard_list_real(h0, key, corr ? corr[3 * k + c] : 0.0, 14, NULL);
            }
        }
    }
    fitscard_list_string(h0, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h0, "DATASUM", "0", 0, "data unit checksum");
    add_str(h1, "XTENSION", "IMAGE", "image extension");
    fitscard_list_int(h1, "BITPIX", -32, "array data type");
    fitscard_list_int(h1, "NAXIS", 2, "number of array dimensions");
    fitscard_list_int(h1, "NAXIS1", m->nx, NULL);
    fitscard_list_int(h1, "NAXIS2", m->ny, NULL);
    fitscard_list_int(h1, "PCOUNT", 0, NULL);
    fitscard_list_int(h1, "GCOUNT", 1, NULL);
    add_str(h1, "EXTNAME", "COVERAGE", "summed weight of the inputs at each pixel");
    fitscard_list_commentary(h1, "COMMENT", "Coverage: the sum of the inputs' weights at each "
                             "pixel (the number");
    fitscard_list_commentary(h1, "COMMENT", "of inputs for interpolation, covered fractions "
                             "for exact).");
    fitscard_list_cards(h1, m->tcards, m->tkeys);
    fitscard_list_string(h1, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h1, "DATASUM", "0", 0, "data unit checksum");
    int rc = h0->rc ? h0->rc : h1->rc;
    if (rc) {
        fitscard_list_release(h0);
        fitscard_list_release(h1);
        return rc == TESS_ENOMEM ? TESS_ENOMEM : TESS_EINVAL;
    }
    return 0;
}

static size_t blocks2880(size_t n)
{
    return (n + 2879) / 2880 * 2880;
}

/* Reads an input's header; fills s (path, name, hdu given). */
static int read_src(src *s, rp_method method, char *err, size_t errlen)
{
    fitsimg_info info;
    char e[256] = "";
    int rc = fitsimg_read_info(s->path, s->hdu, &info, e, sizeof e);
    if (rc) {
        tess_seterr(err, errlen, "input '%s': %s", s->name, e);
        return rc;
    }
    for (int k = 2; k < info.naxis; k++)
        if (info.naxes[k] != 1) {
            tess_seterr(err, errlen, "input '%s' is not a 2-D image (NAXIS%d = %ld)", s->name,
                        k + 1, info.naxes[k]);
            fitsimg_info_release(&info);
            return TESS_EINVAL;
        }
    if (info.naxis < 2) {
        tess_seterr(err, errlen, "input '%s' is not an image (NAXIS = %d)", s->name, info.naxis);
        fitsimg_info_release(&info);
        return TESS_EINVAL;
    }
    s->nx = info.naxes[0];
    s->ny = info.naxes[1];
    snprintf(s->bunit, sizeof s->bunit, "%s", info.bunit);
    s->cards = malloc((size_t)info.nkeys * 80 + 1);
    if (!s->cards) {
        fitsimg_info_release(&info);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    memcpy(s->cards, info.header, (size_t)info.nkeys * 80 + 1);
    s->nkeys = info.nkeys;
    fitsimg_info_release(&info);
    skywcs *w = NULL;
    rc = skywcs_parse(s->cards, s->nkeys, &w, e, sizeof e);
    if (rc) {
        tess_seterr(err, errlen, "input '%s' has no usable WCS: %s", s->name, e);
        return rc;
    }
    s->cel = skywcs_celestial(w);
    skywcs_free(w);
    if (!s->cel) {
        tess_seterr(err, errlen, "input '%s' has no celestial axes", s->name);
        return TESS_EINVAL;
    }
    /* Pixel-based distortion tables do not follow a shifted CRPIX; bicubic's spline
     * prefilter spans the whole image: read those inputs whole. */
    s->crop_ok = method != RP_BICUBIC;
    for (int i = 0; i < s->nkeys && s->crop_ok; i++) {
        const char *c = s->cards + (size_t)i * 80;
        if (memcmp(c, "CPDIS", 5) == 0 || memcmp(c, "CQDIS", 5) == 0
            || memcmp(c, "D2IM", 4) == 0 || memcmp(c, "DP1", 3) == 0
            || memcmp(c, "DP2", 3) == 0 || memcmp(c, "DQ1", 3) == 0 || memcmp(c, "DQ2", 3) == 0)
            s->crop_ok = 0;
    }
    return 0;
}

int mos_plan(const mos_spec *spec, const char *workdir, int threads, mosaic **out, char *err,
             size_t errlen)
{
    (void)threads;
    *out = NULL;
    if (!spec || spec->ninputs < 1 || spec->ninputs > MOS_MAX_INPUTS || !spec->inputs) {
        tess_seterr(err, errlen, "between 1 and %d inputs are needed", MOS_MAX_INPUTS);
        return TESS_EINVAL;
    }
    mosaic *m = calloc(1, sizeof *m);
    if (!m) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    int rc = TESS_ENOMEM;
    char *tc = NULL;
    char *plan = NULL;
    m->workdir = workdir ? strdup(workdir) : NULL;
    m->max_block = spec->max_block_bytes > 0 ? spec->max_block_bytes : 0.0;
    m->n = spec->ninputs;
    m->in = calloc((size_t)m->n, sizeof(src));
    m->method = spec->method;
    m->combine = spec->combine;
    m->bg = spec->bg;
    if ((workdir && !m->workdir) || !m->in) {
        tess_seterr(err, errlen, "out of memory");
        goto fail;
    }
    for (int k = 0; k < m->n; k++) {
        const mos_input *mi = &spec->inputs[k];
        src *s = &m->in[k];
        s->path = strdup(mi->path);
        s->name = strdup(mi->name ? mi->name : mi->path);
        s->hdu = mi->hdu;
        if (!s->path || !s->name) {
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        if ((rc = read_src(s, m->method, err, errlen)) != 0)
            goto fail;
    }
    /* The target. */
    int tn = 0;
    if (spec->target_cards) {
        char v[80];
        long sz[2] = { 0, 0 };
        for (int a = 0; a < 2; a++) {
            char *end;
            if (!fitscard_get(spec->target_cards, spec->target_nkeys,
                                    a ? "NAXIS2" : "NAXIS1", v, sizeof v)) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the target header has no %s", a ? "NAXIS2" : "NAXIS1");
                goto fail;
            }
            sz[a] = strtol(v, &end, 10);
            if (*end || sz[a] < 1 || sz[a] > 10000000) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the target's %s = %s is not a size from 1 to 10^7",
                            a ? "NAXIS2" : "NAXIS1", v);
                goto fail;
            }
        }
        m->nx = sz[0];
        m->ny = sz[1];
        tc = malloc((size_t)spec->target_nkeys * 80 + 1);
        if (!tc) {
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        memcpy(tc, spec->target_cards, (size_t)spec->target_nkeys * 80);
        tc[(size_t)spec->target_nkeys * 80] = '\0';
        tn = spec->target_nkeys;
    } else {
        skywcs **ws = malloc(sizeof(skywcs *) * (size_t)m->n);
        long *nxs = malloc(sizeof(long) * (size_t)m->n), *nys = malloc(sizeof(long) * (size_t)m->n);
        if (!ws || !nxs || !nys) {
            free(ws);
            free(nxs);
            free(nys);
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        for (int k = 0; k < m->n; k++) {
            ws[k] = m->in[k].cel;
            nxs[k] = m->in[k].nx;
            nys[k] = m->in[k].ny;
        }
        rc = mos_auto_target(m->n, ws, nxs, nys, spec->auto_frame, spec->auto_proj, &tc, &tn,
                             &m->nx, &m->ny, err, errlen);
        free(ws);
        free(nxs);
        free(nys);
        if (rc)
            goto fail;
    }
    long long maxpix = spec->max_pixels > 0 ? spec->max_pixels : (1LL << 31);
    if ((long long)m->nx * (long long)m->ny > maxpix) {
        rc = TESS_ETOOBIG;
        tess_seterr(err, errlen, "the mosaic would be %ld x %ld pixels, more than the %lld "
                    "allowed", m->nx, m->ny, maxpix);
        goto fail;
    }
    {
        /* Keep the WCS cards only: not the structural ones, nor BUNIT, which the mosaic
         * writes itself. */
        fitscard_list b;
        fitscard_list_init(&b, MOS_MAX_CARDS);
        for (int i = 0; i < tn; i++) {
            const char *c = tc + (size_t)i * 80;
            if (!fitscard_is_structural(c) && !fitscard_key_is(c, "BUNIT"))
                fitscard_list_cards(&b, c, 1);
        }
        if (b.rc || b.n == 0) {
            rc = b.rc ? TESS_ENOMEM : TESS_EINVAL;
            tess_seterr(err, errlen, b.rc ? "out of memory" : "the target header has no WCS");
            fitscard_list_release(&b);
            goto fail;
        }
        fitscard_list_take(&b, &m->tcards, &m->tkeys);
    }
    {
        skywcs *w = NULL;
        char e[256];
        if ((rc = skywcs_parse(m->tcards, m->tkeys, &w, e, sizeof e)) != 0) {
            tess_seterr(err, errlen, "the target has no usable WCS: %s", e);
            goto fail;
        }
        m->tcel = skywcs_celestial(w);
        skywcs_free(w);
        if (!m->tcel) {
            rc = TESS_EINVAL;
            tess_seterr(err, errlen, "the target WCS has no celestial axes");
            goto fail;
        }
    }
    /* Boxes and blocks. */
    long nb = 0;
    int any = 0;
    for (int k = 0; k < m->n; k++) {
        src *s = &m->in[k];
        char e[256];
        if ((rc = skywcs_check_pair(s->cel, m->tcel, e, sizeof e)) != 0) {
            tess_seterr(err, errlen, "input '%s': %s", s->name, e);
            goto fail;
        }
        if ((rc = mos_bbox(s->cel, s->nx, s->ny, m->tcel, m->nx, m->ny, s->box)) != 0) {
            tess_seterr(err, errlen, "input '%s': cannot place it on the target", s->name);
            goto fail;
        }
        s->block0 = nb;
        if (s->box[2] > 0 && s->box[3] > 0) {
            long bw = s->box[2], bh = s->box[3];
            long rows = (bh + 7) / 8;
            long cap = ((long)1 << 22) / bw;
            if (cap < 1)
                cap = 1;
            if (rows > cap)
                rows = cap;
            s->crop_px = (double)s->nx * (double)s->ny;
            if (s->crop_ok && s->crop_px * 4.0 > BAND_INPUT_BYTES
                && (rc = fit_band_rows(m, s, &rows)) != 0) {
                tess_seterr(err, errlen, "out of memory");
                goto fail;
            }
            s->rows = rows;
            s->nbands = (bh + rows - 1) / rows;
            nb += s->nbands;
            any = 1;
        }
    }
    if (!any) {
        rc = TESS_ENOOVERLAP;
        tess_seterr(err, errlen, "no input overlaps the target");
        goto fail;
    }
    {
        long rows = (m->ny + 15) / 16;
        long cap = ((long)1 << 21) / m->nx;
        if (cap < 8)
            cap = 8;
        if (rows > cap)
            rows = cap;
        if (rows < 1)
            rows = 1;
        m->coadd_rows = rows;
        m->coadd_bands = (m->ny + rows - 1) / rows;
    }
    m->kind[0] = ST_REPROJECT;
    m->nblocks[0] = nb;
    m->nstages = 1;
    if (m->bg != MOS_BG_NONE) {
        m->kind[1] = ST_OVERLAPS;
        m->nblocks[1] = m->n;
        m->kind[2] = ST_SOLVE;
        m->nblocks[2] = 1;
        m->nstages = 3;
    }
    m->kind[m->nstages] = ST_COADD;
    m->nblocks[m->nstages] = m->coadd_bands;
    m->nstages++;
    {
        fitscard_list h0, h1;
        if ((rc = build_headers(m, NULL, &h0, &h1)) != 0) {
            tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory"
                                                       : "the mosaic's header cannot be written");
            goto fail;
        }
        m->h0 = fitscard_header_size(h0.n);
        m->h1 = fitscard_header_size(h1.n);
        m->d0 = m->d1 = blocks2880((size_t)m->nx * (size_t)m->ny * 4);
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
    }
    /* plan.txt: the geometry; a different one from an earlier plan is an error.  (None
     * for a plan without a work directory.) */
    if (m->workdir) {
        size_t cap = (size_t)m->tkeys * 81 + (size_t)m->n * (PATH_MAX + 200) + 256, len = 0;
        plan = malloc(cap);
        if (!plan) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
            goto fail;
        }
        len += (size_t)snprintf(plan + len, cap - len, "tessera mosaic plan 1\n%ld %ld %s %s %s\n",
                                m->nx, m->ny, rp_method_name(m->method),
                                mos_combine_name(m->combine), mos_bg_name(m->bg));
        for (int i = 0; i < m->tkeys; i++) {
            memcpy(plan + len, m->tcards + (size_t)i * 80, 80);
            len += 80;
            plan[len++] = '\n';
        }
        /* Rows of the bands when a large input's were cut (not written otherwise, so
         * that the plans of earlier versions still compare equal). */
        for (int k = 0; k < m->n; k++) {
            const src *s = &m->in[k];
            len += (size_t)snprintf(plan + len, cap - len, "%s[%d] %ld %ld %ld %ld %ld %ld",
                                    s->path, s->hdu, s->nx, s->ny, s->box[0], s->box[1],
                                    s->box[2], s->box[3]);
            if (s->rows_cut)
                len += (size_t)snprintf(plan + len, cap - len, " rows %ld", s->rows);
            plan[len++] = '\n';
        }
        char path[PATH_MAX], *old = NULL;
        size_t oldn = 0;
        snprintf(path, sizeof path, "%s/plan.txt", m->workdir);
        if (read_small(path, &old, &oldn) == 0) {
            int same = oldn == len && memcmp(old, plan, len) == 0;
            free(old);
            if (!same) {
                rc = TESS_EINVAL;
                tess_seterr(err, errlen, "the inputs or the target changed since the mosaic "
                            "was planned in '%s'", m->workdir);
                goto fail;
            }
        } else if ((rc = write_small(path, plan, len, err, errlen)) != 0) {
            goto fail;
        }
    }
    free(plan);
    free(tc);
    *out = m;
    return 0;
fail:
    free(plan);
    free(tc);
    mos_free(m);
    return rc ? rc : TESS_ENOMEM;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: reproject                                                                       */

static int canceled(const volatile int *cancel)
{
    return cancel && *cancel;
}

static int run_reproject(mosaic *m, long block, char *err, size_t errlen)
{
    int k = 0;
    while (k + 1 < m->n && m->in[k + 1].block0 <= block)
        k++;
    src *s = &m->in[k];
    long b = block - s->block0;
    if (b < 0 || b >= s->nbands) {
        tess_seterr(err, errlen, "no reprojection block %ld", block);
        return TESS_EINVAL;
    }
    long bw = s->box[2], r0 = b * s->rows, r1 = r0 + s->rows < s->box[3] ? r0 + s->rows : s->box[3];
    long h = r1 - r0, ox = s->box[0], oy = s->box[1] + r0;
    size_t npix = (size_t)bw * (size_t)h;
    float *val = malloc(sizeof(float) * npix), *fp = malloc(sizeof(float) * npix);
    float *pix = NULL;
    skywcs *ow = NULL, *iw = NULL;
    int rc = TESS_ENOMEM;
    if (!val || !fp) {
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    ow = shifted_wcs(m->tcards, m->tkeys, ox, oy, err, errlen);
    if (!ow) {
        rc = TESS_EINVAL;
        goto done;
    }
    /* The input pixels this band can use: its outline mapped onto the input, padded by
     * four pixels (lanczos3's reach plus one). */
    long crop[4] = { 0, 0, s->nx, s->ny };
    if (s->crop_ok) {
        double *x, *y;
        long n = outline(-0.5, -0.5, (double)bw - 0.5, (double)h - 0.5, 8.0, &x, &y);
        if (n < 0) {
            tess_seterr(err, errlen, "out of memory");
            goto done;
        }
        rc = pix2pix(ow, s->cel, n, x, y);
        if (rc == 0)
            points_box(n, x, y, s->nx, s->ny, 4,
                       0.25 * (double)(s->nx > s->ny ? s->nx : s->ny), crop);
        free(x);
        free(y);
        if (rc) {
            tess_seterr(err, errlen, "input '%s': cannot map the band", s->name);
            goto done;
        }
        if (crop[2] < 0) {
            /* No point of the band's outline maps onto the input: read it whole. */
            crop[0] = crop[1] = 0;
            crop[2] = s->nx;
            crop[3] = s->ny;
        }
    }
    long n_ok = 0;
    double need = (double)crop[2] * (double)crop[3] * input_bpp(m->method) + (double)npix * 8.0;
    if (m->max_block > 0 && crop[2] > 0 && crop[3] > 0 && need > m->max_block) {
        rc = TESS_ETOOBIG;
        tess_seterr(err, errlen, "input '%s': a band of %ld x %ld output pixels reads %ld x "
                    "%ld input pixels (%.0f MB), more than the %.0f MB a block may use",
                    s->name, bw, h, crop[2], crop[3], need / 1048576.0,
                    m->max_block / 1048576.0);
        goto done;
    }
    if (crop[2] > 0 && crop[3] > 0) {
        pix = malloc(sizeof(float) * (size_t)crop[2] * (size_t)crop[3]);
        if (!pix) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory for %ld x %ld input pixels", crop[2], crop[3]);
            goto done;
        }
        char e[256] = "";
        rc = fitsimg_read_region_f32(s->path, s->hdu, 0, crop[0], crop[1], crop[2], crop[3], pix,
                                     e, sizeof e);
        if (rc) {
            tess_seterr(err, errlen, "input '%s': %s", s->name, e);
            goto done;
        }
        if (crop[0] == 0 && crop[1] == 0 && crop[2] == s->nx && crop[3] == s->ny) {
            iw = skywcs_copy(s->cel);
        } else {
            iw = shifted_wcs(s->cards, s->nkeys, crop[0], crop[1], err, errlen);
        }
        if (!iw) {
            rc = TESS_EINVAL;
            goto done;
        }
        rp_cube sc = { pix, RP_F32, crop[2], crop[3], 1 };
        rp_cube dc = { val, RP_F32, bw, h, 1 };
        rp_options o;
        rp_options_init(&o);
        o.method = m->method;
        o.threads = 1;
        char e2[256] = "";
        n_ok = rp_reproject(iw, &sc, ow, &dc, fp, &o, e2, sizeof e2);
        if (n_ok < 0 && n_ok != TESS_ENOOVERLAP) {
            rc = (int)n_ok;
            tess_seterr(err, errlen, "input '%s': %s", s->name, e2);
            goto done;
        }
    }
    if (n_ok <= 0) {
        for (size_t i = 0; i < npix; i++) {
            val[i] = NAN;
            fp[i] = 0.0f;
        }
    }
    char path[PATH_MAX];
    for (int f = 0; f < (m->method == RP_EXACT ? 2 : 1); f++) {
        wpath(m, path, sizeof path, "r_", k, f ? ".wgt" : ".val");
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || tess_pwrite_all(fd, f ? fp : val, sizeof(float) * npix,
                                      (off_t)r0 * (off_t)bw * (off_t)sizeof(float)) != 0) {
            tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            rc = TESS_EIO;
            goto done;
        }
        close(fd);
    }
    rc = 0;
done:
    skywcs_free(ow);
    skywcs_free(iw);
    free(pix);
    free(val);
    free(fp);
    return rc;
}

/* Reads rows [y0, y1) (output rows) and columns [x0, x1) of input k's reprojection:
 * values into v and, for exact, weights into w (else w gets 1 where v is finite, 0
 * elsewhere).  Rows are contiguous at stride x1 - x0.  Returns 0 or TESS_EIO. */
static int read_rows(const mosaic *m, int k, long x0, long x1, long y0, long y1, long ystep,
                     float *v, float *w, char *err, size_t errlen)
{
    const src *s = &m->in[k];
    char path[PATH_MAX];
    long cw = x1 - x0;
    int rc = 0;
    for (int f = 0; f < 2 && rc == 0; f++) {
        float *dst = f ? w : v;
        if (!dst)
            continue;
        if (f && m->method != RP_EXACT) {
            long nr = (y1 - y0 + ystep - 1) / ystep;
            for (size_t i = 0; i < (size_t)nr * (size_t)cw; i++)
                w[i] = isfinite(v[i]) ? 1.0f : 0.0f;
            continue;
        }
        wpath(m, path, sizeof path, "r_", k, f ? ".wgt" : ".val");
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            tess_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
            return TESS_EIO;
        }
        long row = 0;
        if (ystep == 1 && cw == s->box[2]) {
            off_t off = ((off_t)(y0 - s->box[1]) * s->box[2]) * (off_t)sizeof(float);
            if (tess_pread_all(fd, dst, sizeof(float) * (size_t)cw * (size_t)(y1 - y0), off) != 0)
                rc = TESS_EIO;
        } else {
            for (long y = y0; y < y1 && rc == 0; y += ystep, row++) {
                off_t off = ((off_t)(y - s->box[1]) * s->box[2] + (x0 - s->box[0]))
                            * (off_t)sizeof(float);
                if (tess_pread_all(fd, dst + (size_t)row * (size_t)cw,
                                   sizeof(float) * (size_t)cw, off) != 0)
                    rc = TESS_EIO;
            }
        }
        if (rc)
            tess_seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
    }
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: overlaps                                                                        */

/* Normalised coordinates of output pixels. */
static void norm_params(const mosaic *m, double *cx, double *cy, double *sc)
{
    *cx = 0.5 * (double)(m->nx - 1);
    *cy = 0.5 * (double)(m->ny - 1);
    *sc = 0.5 * (double)(m->nx > m->ny ? m->nx : m->ny);
}

/* The k-th smallest of a[0..n) (a reordered). */
static double select_k(double *a, long n, long k)
{
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        double p = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] < p)
                i++;
            while (a[j] > p)
                j--;
            if (i <= j) {
                double t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return a[k];
    }
    return a[k];
}

/* Solves the np x np symmetric system a x = b (a overwritten) by Cholesky; returns 0, or
 * -1 when a is not positive definite. */
static int chol_solve(double *a, double *b, long np)
{
    for (long j = 0; j < np; j++) {
        double d = a[j * np + j];
        for (long k = 0; k < j; k++)
            d -= a[j * np + k] * a[j * np + k];
        if (!(d > 0.0))
            return -1;
        d = sqrt(d);
        a[j * np + j] = d;
        for (long i = j + 1; i < np; i++) {
            double s = a[i * np + j];
            for (long k = 0; k < j; k++)
                s -= a[i * np + k] * a[j * np + k];
            a[i * np + j] = s / d;
        }
    }
    for (long i = 0; i < np; i++) {
        double s = b[i];
        for (long k = 0; k < i; k++)
            s -= a[i * np + k] * b[k];
        b[i] = s / a[i * np + i];
    }
    for (long i = np - 1; i >= 0; i--) {
        double s = b[i];
        for (long k = i + 1; k < np; k++)
            s -= a[k * np + i] * b[k];
        b[i] = s / a[i * np + i];
    }
    return 0;
}

/* Fits d = p0 + p1 u + p2 v (np = 3) or d = p0 (np = 1) to the points with keep[i] set.
 * Returns the number of parameters fitted (np, or 1 when the plane is degenerate), 0 when
 * no point is kept; p gets the fit; moments into rec. */
static int fit_points(long n, const double *u, const double *v, const double *d,
                      const unsigned char *keep, int np, double p[3], ov_rec *rec)
{
    double mm[6] = { 0 }, r[3] = { 0 };
    for (long i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        mm[0] += 1.0;
        mm[1] += u[i];
        mm[2] += v[i];
        mm[3] += u[i] * u[i];
        mm[4] += u[i] * v[i];
        mm[5] += v[i] * v[i];
        r[0] += d[i];
        r[1] += u[i] * d[i];
        r[2] += v[i] * d[i];
    }
    p[0] = p[1] = p[2] = 0.0;
    if (mm[0] < 1.0)
        return 0;
    int used = 1;
    if (np == 3 && mm[0] >= 10.0) {
        double a[9] = { mm[0], mm[1], mm[2], mm[1], mm[3], mm[4], mm[2], mm[4], mm[5] };
        double b[3] = { r[0], r[1], r[2] };
        /* Degenerate (points on a line): fall back to a level. */
        double det = mm[0] * (mm[3] * mm[5] - mm[4] * mm[4]) - mm[1] * (mm[1] * mm[5] - mm[4] * mm[2])
                     + mm[2] * (mm[1] * mm[4] - mm[3] * mm[2]);
        if (det > 1e-12 * mm[0] * mm[0] * mm[0] && chol_solve(a, b, 3) == 0) {
            p[0] = b[0];
            p[1] = b[1];
            p[2] = b[2];
            used = 3;
        }
    }
    if (used == 1)
        p[0] = r[0] / mm[0];
    memcpy(rec->m, mm, sizeof mm);
    memcpy(rec->r, r, sizeof r);
    rec->n = mm[0];
    if (used == 1) {
        /* Only the level is constrained by this pair. */
        rec->m[1] = rec->m[2] = rec->m[3] = rec->m[4] = rec->m[5] = 0.0;
        rec->r[1] = rec->r[2] = 0.0;
    }
    return used;
}

static int run_overlaps(mosaic *m, long i, const volatile int *cancel, char *err, size_t errlen)
{
    ov_rec *recs = calloc((size_t)m->n, sizeof(ov_rec));
    int nrec = 0, rc = 0;
    double cx, cy, sc;
    norm_params(m, &cx, &cy, &sc);
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    if (!recs) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    const src *a = &m->in[i];
    for (int j = (int)i + 1; j < m->n && rc == 0; j++) {
        if (canceled(cancel)) {
            rc = TESS_ECANCELED;
            break;
        }
        const src *b = &m->in[j];
        if (a->box[2] == 0 || b->box[2] == 0)
            continue;
        long x0 = a->box[0] > b->box[0] ? a->box[0] : b->box[0];
        long y0 = a->box[1] > b->box[1] ? a->box[1] : b->box[1];
        long x1 = a->box[0] + a->box[2] < b->box[0] + b->box[2] ? a->box[0] + a->box[2]
                                                                 : b->box[0] + b->box[2];
        long y1 = a->box[1] + a->box[3] < b->box[1] + b->box[3] ? a->box[1] + a->box[3]
                                                                 : b->box[1] + b->box[3];
        if (x1 <= x0 || y1 <= y0)
            continue;
        double area = (double)(x1 - x0) * (double)(y1 - y0);
        long step = (long)ceil(sqrt(area / (double)FIT_POINTS));
        if (step < 1)
            step = 1;
        long cw = x1 - x0, nr = (y1 - y0 + step - 1) / step;
        size_t nin = (size_t)cw * (size_t)nr;
        float *va = malloc(sizeof(float) * nin), *wa = malloc(sizeof(float) * nin);
        float *vb = malloc(sizeof(float) * nin), *wb = malloc(sizeof(float) * nin);
        long ncol = (cw + step - 1) / step;
        size_t maxp = (size_t)ncol * (size_t)nr;
        double *u = malloc(sizeof(double) * maxp), *v = malloc(sizeof(double) * maxp);
        double *d = malloc(sizeof(double) * maxp), *res = malloc(sizeof(double) * maxp);
        unsigned char *keep = malloc(maxp);
        if (!va || !wa || !vb || !wb || !u || !v || !d || !res || !keep) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        }
        if (rc == 0)
            rc = read_rows(m, (int)i, x0, x1, y0, y1, step, va, wa, err, errlen);
        if (rc == 0)
            rc = read_rows(m, j, x0, x1, y0, y1, step, vb, wb, err, errlen);
        long n = 0;
        for (long r = 0; rc == 0 && r < nr; r++) {
            double y = (double)(y0 + r * step);
            for (long c = 0; c < cw; c += step) {
                size_t q = (size_t)r * (size_t)cw + (size_t)c;
                if (!(wa[q] >= FIT_MIN_WEIGHT) || !(wb[q] >= FIT_MIN_WEIGHT) || !isfinite(va[q])
                    || !isfinite(vb[q]))
                    continue;
                u[n] = ((double)(x0 + c) - cx) / sc;
                v[n] = (y - cy) / sc;
                d[n] = (double)va[q] - (double)vb[q];
                keep[n] = 1;
                n++;
            }
        }
        if (rc == 0 && n >= 3) {
            double p[3];
            ov_rec rec = { 0 };
            int used = fit_points(n, u, v, d, keep, np, p, &rec);
            for (int pass = 0; pass < 3 && used > 0; pass++) {
                for (long q = 0; q < n; q++) {
                    double e = d[q] - p[0] - p[1] * u[q] - p[2] * v[q];
                    res[q] = fabs(e);
                }
                /* sigma from the median absolute residual */
                double *tmp = malloc(sizeof(double) * (size_t)n);
                if (!tmp) {
                    rc = TESS_ENOMEM;
                    tess_seterr(err, errlen, "out of memory");
                    break;
                }
                memcpy(tmp, res, sizeof(double) * (size_t)n);
                double mad = select_k(tmp, n, n / 2);
                free(tmp);
                double lim = 3.0 * 1.4826 * mad;
                for (long q = 0; q < n; q++)
                    keep[q] = res[q] <= lim;
                used = fit_points(n, u, v, d, keep, np, p, &rec);
            }
            if (rc == 0 && used > 0) {
                rec.j = j;
                recs[nrec++] = rec;
            }
        }
        free(va);
        free(wa);
        free(vb);
        free(wb);
        free(u);
        free(v);
        free(d);
        free(res);
        free(keep);
    }
    if (rc == 0) {
        char path[PATH_MAX];
        wpath(m, path, sizeof path, "ov_", i, ".bin");
        size_t len = sizeof(int32_t) * 2 + sizeof(ov_rec) * (size_t)nrec;
        char *buf = calloc(1, len);
        if (!buf) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        } else {
            int32_t hdr[2] = { nrec, np };
            memcpy(buf, hdr, sizeof hdr);
            memcpy(buf + sizeof hdr, recs, sizeof(ov_rec) * (size_t)nrec);
            rc = write_small(path, buf, len, err, errlen);
            free(buf);
        }
    }
    free(recs);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: solve                                                                           */

static int find_root(int *parent, int i)
{
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

static int run_solve(mosaic *m, char *err, size_t errlen)
{
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    long nn = (long)m->n * np;
    double *a = calloc((size_t)nn * (size_t)nn, sizeof(double));
    double *b = calloc((size_t)nn, sizeof(double));
    int *parent = malloc(sizeof(int) * (size_t)m->n);
    double *corr = calloc((size_t)m->n * 3, sizeof(double));
    int rc = 0;
    if (!a || !b || !parent || !corr) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    for (int k = 0; k < m->n; k++)
        parent[k] = k;
    for (int i = 0; i < m->n; i++) {
        char path[PATH_MAX], *data = NULL;
        size_t len = 0;
        wpath(m, path, sizeof path, "ov_", i, ".bin");
        if (read_small(path, &data, &len) != 0 || len < 2 * sizeof(int32_t)) {
            free(data);
            rc = TESS_EIO;
            tess_seterr(err, errlen, "cannot read '%s'", path);
            goto done;
        }
        int32_t hdr[2];
        memcpy(hdr, data, sizeof hdr);
        if (hdr[0] < 0 || len != sizeof hdr + sizeof(ov_rec) * (size_t)hdr[0] || hdr[1] != np) {
            free(data);
            rc = TESS_EIO;
            tess_seterr(err, errlen, "'%s' is damaged", path);
            goto done;
        }
        for (int q = 0; q < hdr[0]; q++) {
            ov_rec rec;
            memcpy(&rec, data + sizeof hdr + sizeof(ov_rec) * (size_t)q, sizeof rec);
            int j = rec.j;
            if (j <= i || j >= m->n || !(rec.n > 0))
                continue;
            /* full symmetric 3x3 (or 1x1) moment matrix */
            double mm[3][3] = { { rec.m[0], rec.m[1], rec.m[2] },
                                { rec.m[1], rec.m[3], rec.m[4] },
                                { rec.m[2], rec.m[4], rec.m[5] } };
            for (int r = 0; r < np; r++) {
                for (int c = 0; c < np; c++) {
                    a[(i * np + r) * nn + i * np + c] += mm[r][c];
                    a[(j * np + r) * nn + j * np + c] += mm[r][c];
                    a[(i * np + r) * nn + j * np + c] -= mm[r][c];
                    a[(j * np + r) * nn + i * np + c] -= mm[r][c];
                }
                b[i * np + r] += rec.r[r];
                b[j * np + r] -= rec.r[r];
            }
            int ri = find_root(parent, i), rj = find_root(parent, j);
            if (ri != rj)
                parent[ri < rj ? rj : ri] = ri < rj ? ri : rj;
        }
        free(data);
    }
    /* A tiny ridge keeps the system definite; the minimum-norm solution it approaches
     * has zero mean over each connected group, enforced exactly below. */
    double dmax = 0.0;
    for (long q = 0; q < nn; q++)
        dmax = fmax(dmax, a[q * nn + q]);
    double ridge = dmax > 0.0 ? 1e-10 * dmax : 1.0;
    for (long q = 0; q < nn; q++)
        a[q * nn + q] += ridge;
    if (chol_solve(a, b, nn) != 0) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the background system is not solvable");
        goto done;
    }
    for (int g = 0; g < m->n; g++) {
        if (find_root(parent, g) != g)
            continue;
        double mean[3] = { 0, 0, 0 };
        int cnt = 0;
        for (int k = 0; k < m->n; k++)
            if (find_root(parent, k) == g) {
                cnt++;
                for (int r = 0; r < np; r++)
                    mean[r] += b[k * np + r];
            }
        for (int k = 0; k < m->n; k++)
            if (find_root(parent, k) == g)
                for (int r = 0; r < np; r++)
                    b[k * np + r] -= mean[r] / cnt;
    }
    double cx, cy, sc;
    norm_params(m, &cx, &cy, &sc);
    for (int k = 0; k < m->n; k++) {
        double p0 = b[k * np], p1 = np == 3 ? b[k * np + 1] : 0.0, p2 = np == 3 ? b[k * np + 2] : 0.0;
        if (!isfinite(p0) || !isfinite(p1) || !isfinite(p2))
            p0 = p1 = p2 = 0.0;
        corr[3 * k] = p0 - p1 * cx / sc - p2 * cy / sc;
        corr[3 * k + 1] = p1 / sc;
        corr[3 * k + 2] = p2 / sc;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bg.bin", m->workdir);
    rc = write_small(path, corr, sizeof(double) * 3 * (size_t)m->n, err, errlen);
done:
    free(a);
    free(b);
    free(parent);
    free(corr);
    return rc;
}

/* Loads bg.bin once (zeros without matching). */
static int load_corr(mosaic *m, char *err, size_t errlen)
{
    pthread_mutex_lock(&m->lock);
    int rc = 0;
    if (!m->corr_loaded) {
        double *c = calloc((size_t)m->n * 3, sizeof(double));
        if (!c) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        } else if (m->bg != MOS_BG_NONE) {
            char path[PATH_MAX], *data = NULL;
            size_t len = 0;
            snprintf(path, sizeof path, "%s/bg.bin", m->workdir);
            if (read_small(path, &data, &len) != 0 || len != sizeof(double) * 3 * (size_t)m->n) {
                rc = TESS_EIO;
                tess_seterr(err, errlen, "cannot read the background corrections '%s'", path);
            } else {
                memcpy(c, data, len);
            }
            free(data);
        }
        if (rc == 0) {
            m->corr = c;
            m->corr_loaded = 1;
        } else {
            free(c);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int mos_correction(mosaic *m, int k, double c[3])
{
    char err[64];
    c[0] = c[1] = c[2] = 0.0;
    if (k < 0 || k >= m->n)
        return TESS_EINVAL;
    int rc = load_corr(m, err, sizeof err);
    if (rc == 0)
        memcpy(c, m->corr + 3 * k, 3 * sizeof(double));
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: coadd                                                                           */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int run_coadd(mosaic *m, long band, const volatile int *cancel, char *err, size_t errlen)
{
    int rc = load_corr(m, err, errlen);
    if (rc)
        return rc;
    long y0 = band * m->coadd_rows, y1 = y0 + m->coadd_rows < m->ny ? y0 + m->coadd_rows : m->ny;
    long nx = m->nx;
    /* Inputs meeting the band, and the bytes one row of them needs. */
    int *ks = malloc(sizeof(int) * (size_t)m->n);
    if (!ks) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int nk = 0;
    size_t rowbytes = (size_t)nx * 16;
    for (int k = 0; k < m->n; k++) {
        const src *s = &m->in[k];
        if (s->box[2] > 0 && s->box[1] < y1 && s->box[1] + s->box[3] > y0) {
            ks[nk++] = k;
            rowbytes += (size_t)s->box[2] * 8;
        }
    }
    int median = m->combine == MOS_MEDIAN;
    if (median)
        rowbytes += (size_t)nx * (size_t)(nk > 0 ? nk : 1) * sizeof(float) + (size_t)nx * 4;
    long g = (long)(COADD_BYTES / rowbytes);
    if (g < 1)
        g = 1;
    if (g > y1 - y0)
        g = y1 - y0;
    size_t gp = (size_t)g * (size_t)nx;
    double *acc = malloc(sizeof(double) * gp), *accw = malloc(sizeof(double) * gp);
    float *out = malloc(sizeof(float) * gp), *cov = malloc(sizeof(float) * gp);
    long maxw = 0;
    for (int q = 0; q < nk; q++)
        if (m->in[ks[q]].box[2] > maxw)
            maxw = m->in[ks[q]].box[2];
    float *v = malloc(sizeof(float) * (size_t)g * (size_t)(maxw ? maxw : 1));
    float *w = malloc(sizeof(float) * (size_t)g * (size_t)(maxw ? maxw : 1));
    float *list = median ? malloc(sizeof(float) * gp * (size_t)(nk ? nk : 1)) : NULL;
    int *cnt = median ? malloc(sizeof(int) * gp) : NULL;
    int fd = -1;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/mosaic.fits", m->workdir);
    if (!acc || !accw || !out || !cov || !v || !w || (median && (!list || !cnt))) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = TESS_EIO;
        tess_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        goto done;
    }
    for (long gy0 = y0; gy0 < y1 && rc == 0; gy0 += g) {
        if (canceled(cancel)) {
            rc = TESS_ECANCELED;
            break;
        }
        long gy1 = gy0 + g < y1 ? gy0 + g : y1, nr = gy1 - gy0;
        size_t np = (size_t)nr * (size_t)nx;
        int first_set = m->combine == MOS_FIRST;
        for (size_t i = 0; i < np; i++) {
            acc[i] = NAN;
            accw[i] = 0.0;
        }
        if (m->combine == MOS_MEAN || m->combine == MOS_SUM)
            for (size_t i = 0; i < np; i++)
                acc[i] = 0.0;
        if (median)
            memset(cnt, 0, sizeof(int) * np);
        for (int q = 0; q < nk && rc == 0; q++) {
            int k = ks[q];
            const src *s = &m->in[k];
            long ry0 = gy0 > s->box[1] ? gy0 : s->box[1];
            long ry1 = gy1 < s->box[1] + s->box[3] ? gy1 : s->box[1] + s->box[3];
            if (ry1 <= ry0)
                continue;
            long bw = s->box[2], bx = s->box[0];
            rc = read_rows(m, k, bx, bx + bw, ry0, ry1, 1, v, w, err, errlen);
            if (rc)
                break;
            const double *c = m->corr + 3 * k;
            for (long y = ry0; y < ry1; y++) {
                const float *vr = v + (size_t)(y - ry0) * (size_t)bw;
                const float *wr = w + (size_t)(y - ry0) * (size_t)bw;
                size_t o = (size_t)(y - gy0) * (size_t)nx + (size_t)bx;
                double base = c[0] + c[2] * (double)y;
                if (m->combine == MOS_MEAN || m->combine == MOS_SUM) {
                    /* the common case, without the switch */
                    double *ar = acc + o, *wa = accw + o;
                    for (long x = 0; x < bw; x++) {
                        double wt = wr[x];
                        if (wt > 0.0 && isfinite(vr[x])) {
                            ar[x] += wt * ((double)vr[x] - (base + c[1] * (double)(bx + x)));
                            wa[x] += wt;
                        }
                    }
                    continue;
                }
                for (long x = 0; x < bw; x++) {
                    double wt = wr[x];
                    if (!(wt > 0.0) || !isfinite(vr[x]))
                        continue;
                    double val = (double)vr[x] - (base + c[1] * (double)(bx + x));
                    size_t p = o + (size_t)x;
                    switch (m->combine) {
                    case MOS_MEAN:
                    case MOS_SUM:
                        acc[p] += wt * val;
                        break;
                    case MOS_MIN:
                        if (!(acc[p] <= val))
                            acc[p] = val;
                        break;
                    case MOS_MAX:
                        if (!(acc[p] >= val))
                            acc[p] = val;
                        break;
                    case MOS_FIRST:
                        if (!(accw[p] > 0.0))
                            acc[p] = val;
                        break;
                    case MOS_LAST:
                        acc[p] = val;
                        break;
                    case MOS_MEDIAN:
                        list[p * (size_t)nk + (size_t)cnt[p]++] = (float)val;
                        break;
                    }
                    accw[p] += wt;
                }
            }
        }
        (void)first_set;
        if (rc)
            break;
        for (size_t p = 0; p < np; p++) {
            double wt = accw[p];
            double val = NAN;
            if (wt > 0.0) {
                switch (m->combine) {
                case MOS_MEAN:
                    val = acc[p] / wt;
                    break;
                case MOS_MEDIAN: {
                    float *l = list + p * (size_t)nk;
                    int c = cnt[p];
                    if (c == 1) {
                        val = l[0];
                    } else {
                        qsort(l, (size_t)c, sizeof(float), cmp_float);
                        val = c % 2 ? l[c / 2] : 0.5 * ((double)l[c / 2 - 1] + (double)l[c / 2]);
                    }
                    break;
                }
                default:
                    val = acc[p];
                    break;
                }
            }
            out[p] = (float)val;
            cov[p] = (float)wt;
        }
        tess_be_swap(out, np, 4);
        tess_be_swap(cov, np, 4);
        off_t off0 = (off_t)m->h0 + (off_t)gy0 * nx * (off_t)sizeof(float);
        off_t off1 = (off_t)(m->h0 + m->d0 + m->h1) + (off_t)gy0 * nx * (off_t)sizeof(float);
        if (tess_pwrite_all(fd, out, sizeof(float) * np, off0) != 0
            || tess_pwrite_all(fd, cov, sizeof(float) * np, off1) != 0) {
            rc = TESS_EIO;
            tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        }
    }
done:
    if (fd >= 0)
        close(fd);
    free(ks);
    free(acc);
    free(accw);
    free(out);
    free(cov);
    free(v);
    free(w);
    free(list);
    free(cnt);
    return rc;
}

int mos_run_block(mosaic *m, int stage, long block, const volatile int *cancel, char *err,
                  size_t errlen)
{
    if (stage < 0 || stage >= m->nstages || block < 0 || block >= m->nblocks[stage]) {
        tess_seterr(err, errlen, "no block %ld in stage %d", block, stage);
        return TESS_EINVAL;
    }
    if (!m->workdir) {
        tess_seterr(err, errlen, "the mosaic was planned without a work directory");
        return TESS_EINVAL;
    }
    if (canceled(cancel))
        return TESS_ECANCELED;
    switch (m->kind[stage]) {
    case ST_REPROJECT:
        return run_reproject(m, block, err, errlen);
    case ST_OVERLAPS:
        return run_overlaps(m, block, cancel, err, errlen);
    case ST_SOLVE:
        return run_solve(m, err, errlen);
    default:
        return run_coadd(m, block, cancel, err, errlen);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Finish                                                                                 */

/* Writes the header cards + END, blank-padded to `size` bytes
 * (fitscard_header_size(h->n)), at `off`. */
static int write_header(int fd, const fitscard_list *h, size_t size, off_t off)
{
    char *buf = malloc(size);
    if (!buf)
        return -1;
    fitscard_header_write(buf, h->cards, h->n);
    int rc = tess_pwrite_all(fd, buf, size, off);
    free(buf);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    /* A new file only (the caller removed `to` just before): a symbolic link or file
     * put there since is not written through (errno EEXIST). */
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    size_t cap = (size_t)8 << 20;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -1;
    off_t off = 0;
    while (rc == 0) {
        ssize_t r = read(in, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0)
            break;
        rc = tess_pwrite_all(out, buf, (size_t)r, off);
        off += r;
    }
    free(buf);
    close(in);
    if (rc == 0 && fsync(out) != 0)
        rc = -1;
    if (close(out) != 0)
        rc = -1;
    return rc;
}

int mos_finish(mosaic *m, const char *out_path, char *err, size_t errlen)
{
    if (!m->workdir) {
        tess_seterr(err, errlen, "the mosaic was planned without a work directory");
        return TESS_EINVAL;
    }
    int rc = load_corr(m, err, errlen);
    if (rc)
        return rc;
    fitscard_list h0, h1;
    if ((rc = build_headers(m, m->corr, &h0, &h1)) != 0) {
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory"
                                                   : "the mosaic's header cannot be written");
        return rc;
    }
    if (fitscard_header_size(h0.n) != m->h0 || fitscard_header_size(h1.n) != m->h1) {
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
        tess_seterr(err, errlen, "internal error: header sizes changed");
        return TESS_EINVAL;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/mosaic.fits", m->workdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    off_t total = (off_t)(m->h0 + m->d0 + m->h1 + m->d1);
    if (fd < 0 || write_header(fd, &h0, m->h0, 0) != 0
        || write_header(fd, &h1, m->h1, (off_t)(m->h0 + m->d0)) != 0
        || ftruncate(fd, total) != 0) {
        tess_seterr(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        fitscard_list_release(&h0);
        fitscard_list_release(&h1);
        return TESS_EIO;
    }
    close(fd);
    fitscard_list_release(&h0);
    fitscard_list_release(&h1);
    /* The zero padding after each data unit comes from ftruncate only when the file
     * was shorter; data pads are never written otherwise, so they are zeros.  The
     * checksums come last, over the finished file. */
    if ((rc = fitswrite_checksum_file(path, err, errlen)) != 0)
        return rc;
    if (unlink(out_path) != 0 && errno != ENOENT) {
        tess_seterr(err, errlen, "cannot replace '%s': %s", out_path, strerror(errno));
        return TESS_EIO;
    }
    if (link(path, out_path) != 0 && copy_file(path, out_path) != 0) {
        int e = errno;
        tess_seterr(err, errlen, "cannot write '%s': %s", out_path, strerror(e));
        if (e != EEXIST)          /* what is there then is not ours: leave it */
            unlink(out_path);
        return TESS_EIO;
    }
    return 0;
}
