/* HiPS tiles on the nested HEALPix grid: tile pixel layout, orders, footprints and tile rendering. */
#ifndef TESSERA_ENGINE_HIPS_HEALPIX_H
#define TESSERA_ENGINE_HIPS_HEALPIX_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "engine/image/render.h"
#include "engine/sky/kernels.h"
#include "engine/sky/plane.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

/* References:
 *  [G05]  Górski et al. 2005, ApJ 622, 759: HEALPix; nested numbering (section 4): the
 *         cell (i, j) of base face f at order k has index f 4^k + s, where the even bits
 *         of s are the bits of i and the odd bits those of j (i counts from the face's
 *         south corner toward its east corner, j from the south corner toward the west
 *         corner; Healpix_Base xyf2nest).
 *  [CR07] Calabretta & Roukema 2007, MNRAS 381, 865: the HEALPix projection as the FITS
 *         WCS projection HPX (H = 4, K = 3), in which every HEALPix cell is a square
 *         rotated by 45 degrees.
 *  [HiPS] IVOA HiPS 1.0 (Fernique et al. 2017): 4.1 directory structure
 *         (NorderK/DirD/NpixN, D = N / 10000 * 10000); 4.2.1 image tiles (a tile of order
 *         K holds the 2^S x 2^S cells of order K + S; FITS lines bottom-up, PNG/JPEG lines
 *         top-down) with the table and formula of the deepest order; 4.3.2 the Allsky
 *         preview; 4.4.1 the properties file; 4.4.2 the Moc.fits file.
 *
 * Tile pixel layout (the xy2hpx table of CDS Hipsgen, Context.fillUp, indexed by
 * y W + x with y counted from the bottom as Aladin's Fits.setPixelDouble counts it; the
 * same as hipspy's FITS writer, np.rot90 of hips_tile_healpix_ipix_array): in a
 * tile of width W = 2^S, the cell with face coordinates (i, j) relative to the tile
 * (0 <= i, j < W; its nested index is N 4^S + s with s interleaving i and j as [G05])
 * lies in column c = j and in row i counted from the top of the picture, i.e. in FITS
 * row W - i (1-based; row 0-based r = W - 1 - i counted from FITS row 1, which FITS
 * stores first).  FITS tiles store rows from the bottom of the picture and PNG/JPEG from
 * the top, so both show the same picture: the tile's south corner at the top left, its
 * north corner at the bottom right, the east corner at the bottom left and the west
 * corner at the top right (the sky seen mirrored, as every HiPS tile is). */

#define HIPS_ORDER_MAX 29          /* deepest HEALPix order (nside 2^29) */
#define HIPS_TILE_SHIFT 9          /* S: log2 of the tile width */
#define HIPS_TILE_WIDTH 512        /* W = 2^S */
#define HIPS_ALLSKY_ORDER 3        /* the order of Norder3/Allsky.* */
#define HIPS_ALLSKY_SHIFT 6        /* log2 of the width of one tile in the Allsky picture */
#define HIPS_ALLSKY_CELL 64        /* 2^HIPS_ALLSKY_SHIFT */
#define HIPS_ALLSKY_COLS 27        /* tiles per row: floor(sqrt(768)) */

/* Rows of a tile array: HIPS_ROWS_FITS puts row 0 = FITS row 1 (the bottom of the
 * picture, stored first in a FITS file); HIPS_ROWS_TOPDOWN puts row 0 at the top (as
 * PNG and JPEG store it). */
typedef enum { HIPS_ROWS_FITS = 0, HIPS_ROWS_TOPDOWN = 1 } hips_rows;

/* 12 4^order, the number of cells (tiles) of an order 0..29; 0 outside.  Cannot fail. */
int64_t hips_npix_count(int order);

/* 1 when 0 <= order <= 29 and 0 <= npix < 12 4^order, else 0.  Cannot fail. */
int hips_tile_valid(int order, int64_t npix);

/* The directory number of a tile: npix / 10000 * 10000 [HiPS 4.1].  Cannot fail. */
int64_t hips_dir(int64_t npix);

/* The nested index, relative to the tile (0 <= s < 4^shift), of the tile pixel in column
 * x (0-based) and row y (0-based, in `rows` order) of a tile of width 2^shift
 * (1 <= shift <= 16); the cell's absolute index at order K + shift is npix 4^shift + s.
 * Cannot fail (x and y are taken modulo the width). */
uint64_t hips_tile_subindex(int shift, long x, long y, hips_rows rows);

/* The inverse: column *x and row *y (in `rows` order) of relative nested index s.
 * Cannot fail. */
void hips_tile_xy(int shift, uint64_t s, hips_rows rows, long *x, long *y);

/* Centres of the W x W pixels of tile (order, npix), W = 2^shift, order + shift <= 29:
 * lon[y W + x], lat[y W + x] in degrees (the HEALPix sphere's longitude in [0, 360) and
 * latitude, i.e. in the HiPS frame), row y in `rows` order.  Computed by chealpix
 * (pix2ang_nest64) at nside 2^(order + shift).  Returns 0, or TESS_EINVAL (invalid tile
 * or depth). */
int hips_tile_centres(int order, int64_t npix, int shift, hips_rows rows, double *lon,
                      double *lat);

/* The nested index at `order` (0..29) of the cell holding (lon, lat) degrees of the
 * HEALPix sphere, or -1 for a non-finite position.  Cannot fail otherwise. */
int64_t hips_ang2pix(int order, double lon, double lat);

/* The angular size of a cell of `order`: sqrt(4 pi / (12 4^order)) in degrees, the
 * theta of [HiPS 4.2.1] (order 9: 6.871 arcmin, order 12: 51.53 arcsec).  Cannot fail. */
double hips_cell_size(int order);

/* The HiPS order of a survey whose input pixels are `pixscale` degrees: the smallest
 * tile order K (0 <= K <= 29 - shift) with hips_cell_size(K + shift) <= pixscale, i.e.
 * whose tile pixels are at least as fine as the input pixels [HiPS 4.2.1]; 29 - shift
 * when even that is coarser; 0 for a non-finite or non-positive scale.  Cannot fail. */
int hips_order_for_scale(double pixscale, int shift);

/* The shallowest deepest order a survey is given: Hipsgen never builds a survey with
 * fewer than 4 orders, and clients (Aladin) expect the Norder3 Allsky to belong to the
 * tree. */
#define HIPS_ORDER_FLOOR 3

/* The deepest tile order of a survey of input pixels `pixscale` degrees, the hips_order
 * of its properties: hips_order_for_scale(pixscale, HIPS_TILE_SHIFT), never shallower
 * than HIPS_ORDER_FLOOR.  Cannot fail. */
int hips_survey_order(double pixscale);

/* The FITS WCS of tile (order, npix), W = 2^shift, as cards for the FITS tile: the HPX
 * projection [CR07] (RA---HPX/DEC--HPX with RADESYS ICRS, or GLON-HPX/GLAT-HPX when
 * `galactic`), CRVAL1 the multiple of 90 degrees that puts the tile's base face in the
 * middle of the projection plane, CRVAL2 0, and a CD matrix of +-45 / (W 2^order)
 * degrees that maps the pixel grid (1-based, rows as FITS stores them, see the layout
 * above) onto the cells: the pixel centres are the cell centres (hips_tile_centres).
 * order + shift <= 29.  *cards is malloc'd (80-character cards, concatenated,
 * NUL-terminated, no END) and *nkeys set.  Returns 0, TESS_EINVAL (invalid tile or
 * depth) or TESS_ENOMEM. */
int hips_tile_header(int order, int64_t npix, int shift, int galactic, char **cards,
                     int *nkeys);

/* The same parsed (skywcs_parse): a 2-D skywcs of the tile (caller frees), or NULL for
 * an invalid tile or depth or on allocation failure. */
skywcs *hips_tile_wcs(int order, int64_t npix, int shift, int galactic);

/* What a dataset looks like on the sky, from its celestial WCS `cel` (2-D; not
 * modified: the function works on its own copy) and its size nx x ny (level-0 pixels):
 * the centre of pixel ((nx-1)/2, (ny-1)/2) in ICRS (*ra, *dec) and in the frame of the
 * HiPS (*lon, *lat: ICRS, or galactic when `galactic`), the pixel size *pixscale
 * (degrees: the square root of the solid angle of the centre pixel, from its corners)
 * and *fov (degrees: max(nx, ny) times that size, at most 180; edge-to-edge distances
 * fail on all-sky maps, whose edges meet).  Any output pointer may be NULL.  Returns 0,
 * or TESS_ENOWCS (no WCS, or no celestial transform at the centre), TESS_ENOMEM. */
int hips_dataset_geometry(const skywcs *cel, long nx, long ny, int galactic, double *ra,
                          double *dec, double *lon, double *lat, double *pixscale,
                          double *fov);

/* Whether tile (order, npix) of a HiPS in `galactic` (1) or ICRS (0) frame may hold
 * pixels of the image nx x ny on `cel` (2-D celestial WCS, not modified).  The tile is
 * cut in 16 x 16 blocks; a block may hold pixels when one of its corners (computed on
 * the face as Healpix_Base::xyf2loc does [G05]; a corner whose round trip sky -> pixel
 * -> sky misses by more than two input pixels is ignored) maps within the block's
 * diagonal (in input pixels, at most twice the block's angular size over the pixel
 * size) plus one pixel of the image's extent [-0.5, n - 0.5] on both axes, or when one
 * of 5 x 5 sample points of the image (corners, edges, centre) falls in it.
 * Conservative wherever the WCS is close to linear over a block: a tile that holds an
 * input pixel is reported (a false 1 only costs a render that finds no finite pixel).
 * Returns 1, 0, TESS_EINVAL (invalid tile), TESS_ENOMEM. */
int hips_tile_overlaps(const skywcs *cel, long nx, long ny, int galactic, int order,
                       int64_t npix);

/* The tiles of `order` that may overlap the image (hips_tile_overlaps, tested from order
 * 0 down through the children of overlapping tiles), in increasing npix order: *list is
 * malloc'd (caller frees; NULL when none) and *n set.  Returns 0, TESS_EINVAL,
 * TESS_ENOMEM. */
int hips_tiles_covering(const skywcs *cel, long nx, long ny, int galactic, int order,
                        int64_t **list, size_t *n);

/* The reduction level (0..30) of a source plane suited to tiles of `order`: the largest
 * k with 2^k input pixels no larger than one tile pixel, floor(log2(hips_cell_size(order
 * + shift) / pixscale)), 0 when tile pixels are finer than the input.  Cannot fail. */
int hips_source_level(int order, int shift, double pixscale);

/* A source of tile pixels: a plane of the dataset, full resolution or reduced, prepared
 * for sampling.  The WCS describes the full-resolution (level-0) pixel grid of nx x ny
 * pixels; the plane sampled is level `level` of it (pixel (i, j) of level k is the mean
 * of the 2^k x 2^k block at (i 2^k, j 2^k), engine/image/pyramid.h), whose pixel centres
 * sit at level-0 position i 2^k + (2^k - 1) / 2. */
typedef struct hips_source {
    const skywcs *cel;         /* 2-D celestial WCS of level 0 (not modified; copied) */
    long nx, ny;               /* level-0 size (NAXIS1, NAXIS2) */
    const rp_kernel *kernel;   /* rp_kernel_new(method, plane) of the level-k plane */
    long knx, kny;             /* the level-k plane's size */
    int level;                 /* k */
    rp_method method;          /* the kernel's method (nearest rounds at half-integers) */
    double max_coord_error;    /* bound of the coordinate grid, pixels (of the tile and of
                                  the input, the larger: coordmap.h); 0 = exact */
    double grid_margin;        /* rp_coordmap_set_grid's margin and finest cell for the */
    long grid_cell_min;        /* grid, or 0, 0: coordmap's defaults (HIPS_PICTURE_*) */
} hips_source;

/* The grid of the pictures (PNG, JPEG tiles and Allsky): margin 8 and finest cells of 8
 * pixels with max_coord_error HIPS_PICTURE_MCE, so that every position is within
 * 0.01 pixel of the exact transform (measured by test_healpix on the demo data). */
#define HIPS_PICTURE_MARGIN 8.0
#define HIPS_PICTURE_CELL_MIN 8
#define HIPS_PICTURE_MCE 0.01

/* Renders tile (order, npix) of width W = 2^shift (4 <= shift <= 16, order + shift <= 29)
 * of a HiPS in `galactic` (1) or ICRS (0) frame.  Only the bounding box of the blocks
 * that hips_tile_overlaps finds may hold data is computed (the rest is NaN); there,
 * every tile pixel centre (the centre of its HEALPix cell) is mapped to the source's
 * input pixels (frames converted with sky_convert, then the dataset's WCS, by the
 * approximate grid of coordmap.h bounded by max_coord_error; points within the grid's
 * error of a sampling decision — the plane's edges -0.5 and n - 0.5, nearest's
 * half-integers — are transformed exactly) and sampled with the kernel (NaN outside the
 * plane, as reproject_interp).  `out` receives W x W doubles in
 * `rows` order (HIPS_ROWS_FITS for a FITS tile and for render_rgba, which flips).
 * Returns the number of finite pixels (0: the tile holds no data), or TESS_EINVAL
 * (invalid tile, WCS without a supported frame; `err` says why) / TESS_ENOMEM (then
 * out's contents are unspecified).  Each pixel of out is written once (NaN outside the
 * box, the sample inside), so out needs no clearing before.  Thread safe: several
 * threads may render from one source at once. */
long hips_render_tile(const hips_source *src, int order, int64_t npix, int shift,
                      int galactic, hips_rows rows, double *out, char *err, size_t errlen);

/* A tile of order K from its four children of order K + 1 (child[c] is tile 4 npix + c,
 * or NULL for a child with no data), W = 2^shift: each pixel the mean of the finite
 * values of the 2 x 2 child pixels of its cell, NaN when none [HiPS 4.2.1, "other HiPS
 * orders": the average, as Hipsgen does by default].  All arrays W x W in `rows` order.
 * Cannot fail. */
void hips_tile_merge_children(int shift, const double *const child[4], hips_rows rows,
                              double *parent);

/* The quadrant of that parent that child c (0..3, tile 4 npix + c; NULL: no data, NaN)
 * makes, as hips_tile_merge_children writes it; the other pixels of `parent` are left as
 * they are, so a parent can be made one child at a time.  Cannot fail. */
void hips_tile_merge_child(int shift, int c, const double *child, hips_rows rows,
                           double *parent);

/* Encodes a W x W tile of doubles (row 0 = FITS row 1) as a FITS file with BITPIX -32
 * (NaN kept) and the tile's WCS (hips_tile_header) plus ORDER and NPIX cards.  *out is
 * malloc'd (caller frees).  Returns 0, TESS_EINVAL or TESS_ENOMEM. */
int hips_encode_fits(const double *data, int order, int64_t npix, int shift, int galactic,
                     unsigned char **out, size_t *outlen);

/* Tile formats [HiPS 4.2.1]: the file extension is "png", "jpg" or "fits". */
typedef enum { HIPS_FMT_PNG = 0, HIPS_FMT_JPEG, HIPS_FMT_FITS } hips_format;

/* A set of tile formats: the bits HIPS_FMT_BIT(f) of an unsigned. */
#define HIPS_FMT_BIT(f) (1u << (unsigned)(f))

/* "png", "jpg", "fits" (the extension) and "image/png", "image/jpeg",
 * "application/fits".  Cannot fail. */
const char *hips_format_ext(hips_format f);
const char *hips_format_mime(hips_format f);

/* Quality of JPEG tiles and Allsky pictures (libjpeg's 1..100 scale). */
#define HIPS_JPEG_QUALITY 90

/* A w x h picture of doubles (row 0 = the bottom row, FITS order) as PNG or JPEG bytes:
 * render_rgba_cuts with the cut levels lo and hi and the stretch and colour map of `rp`,
 * NaN transparent in PNG and black in JPEG (quality HIPS_JPEG_QUALITY).  *out is malloc'd
 * (caller frees).  Returns 0, or TESS_EINVAL (bad size, or fmt HIPS_FMT_FITS) /
 * TESS_ENOMEM / TESS_ERANGE. */
int hips_encode_picture(const double *data, long w, long h, hips_format fmt,
                        const render_params *rp, double lo, double hi, unsigned char **out,
                        size_t *outlen);

/* A tile as the bytes of its file: hips_render_tile at width HIPS_TILE_WIDTH, then FITS
 * (hips_encode_fits) or, for PNG and JPEG, render_rgba_cuts with the cut levels lo and
 * hi (those of the whole plane, so that neighbouring tiles match) and the stretch and
 * colour map of `rp` (ignored for FITS), NaN transparent in PNG and black in JPEG.
 * Returns the number of finite tile pixels, >= 0, with *out malloc'd (caller frees) and
 * *outlen set (0: a blank tile; a server asks hips_cells_hold first whether the tile
 * exists); or TESS_EINVAL / TESS_ENOMEM with `err`. */
long hips_tile_encode(const hips_source *src, int order, int64_t npix, int galactic,
                      hips_format fmt, const render_params *rp, double lo, double hi,
                      unsigned char **out, size_t *outlen, char *err, size_t errlen);

/* The encoding half of hips_tile_encode: `data` a W x W tile (HIPS_TILE_WIDTH, row 0 =
 * FITS row 1) as hips_render_tile gave it, `finite` what it returned.  Returns `finite`
 * with *out malloc'd when it is >= 0 (a tile of the footprint whose data is all NaN is
 * encoded blank: transparent, or NaN in FITS); `finite` itself (*out NULL) when it is
 * negative; or TESS_EINVAL / TESS_ENOMEM with `err`. */
long hips_tile_encode_data(const double *data, long finite, int order, int64_t npix,
                           int galactic, hips_format fmt, const render_params *rp, double lo,
                           double hi, unsigned char **out, size_t *outlen, char *err,
                           size_t errlen);

/* Size of the Allsky picture of an order-3 HiPS with cells of `cell` pixels [HiPS
 * 4.3.2]: 768 tiles, 27 a row, in increasing npix from the top left: width 27 cell,
 * height 29 cell (1728 x 1856 for 64).  Cannot fail. */
void hips_allsky_size(int cell, long *w, long *h);

/* The top-left corner (*x column, *y row from the top) of tile npix (0..767) in the
 * Allsky picture.  Cannot fail. */
void hips_allsky_origin(int64_t npix, int cell, long *x, long *y);

/* The Allsky picture [HiPS 4.3.2] as doubles: every order-3 tile that may hold data
 * (hips_tiles_covering) at HIPS_ALLSKY_CELL pixels a side (cells of order 3 +
 * HIPS_ALLSKY_SHIFT = 9, the tile reduced by 8 as the standard asks) and laid out as
 * hips_allsky_origin says, each in its tile's orientation; NaN elsewhere.  `src` should
 * be at level hips_source_level(HIPS_ALLSKY_ORDER, HIPS_ALLSKY_SHIFT, pixscale).
 * *out is malloc'd, w x h doubles (hips_allsky_size), row 0 = the BOTTOM row of the
 * picture (FITS order, as render_rgba expects).  Returns the number of finite pixels
 * (>= 0), or TESS_EINVAL / TESS_ENOMEM with `err`. */
long hips_allsky_render(const hips_source *src, int galactic, double **out, long *w, long *h,
                        char *err, size_t errlen);

/* Where hips_allsky_render_from takes the order-0 tiles: get(cls, npix, &data, err,
 * errlen) returns what hips_render_tile returns for tile (0, npix) at shift 9 in
 * HIPS_ROWS_FITS (the finite count, or a negative TESS_E* code with err), with *data
 * pointing at its 512 x 512 doubles, valid until release(cls, npix) (may be NULL). */
typedef struct hips_base_source {
    long (*get)(void *cls, int64_t npix, const double **data, char *err, size_t errlen);
    void (*release)(void *cls, int64_t npix);
    void *cls;
} hips_base_source;

/* hips_allsky_render cut from the order-0 tiles of `bs` (a cache shared with the order-0
 * tiles, say): the cells of order 9 are the pixels of the order-0 tiles at
 * HIPS_TILE_WIDTH, so when bs gives what hips_render_tile gives the picture is the same
 * (every cell of each order-0 tile that may hold data is copied: a cell no image pixel
 * reaches is NaN there too).  It costs 12 order-0 renders whatever the image's size: the
 * cheaper path for an image covering much of the sky (whose order-0 tiles a viewer asks
 * for as well), the dearer for a small one.  `src` may be NULL (a sky of several images,
 * daemon/api/hips.c's collections): every order-0 tile is then asked of bs, and one it
 * gives with no finite pixel leaves its cells NaN.  Returns as hips_allsky_render. */
long hips_allsky_render_from(const hips_source *src, int galactic, const hips_base_source *bs,
                             double **out, long *w, long *h, char *err, size_t errlen);

/* hips_allsky_render encoded as hips_tile_encode does: PNG or JPEG through
 * render_rgba_cuts, or FITS (BITPIX -32, NaN kept, rows from the bottom of the picture as
 * for tiles, an ORDER card and no WCS).  Returns the number of finite pixels (>= 0; the
 * picture is written even when 0) with *out malloc'd, or TESS_EINVAL / TESS_ENOMEM with
 * `err`. */
long hips_allsky_encode(const hips_source *src, int galactic, hips_format fmt,
                        const render_params *rp, double lo, double hi, unsigned char **out,
                        size_t *outlen, char *err, size_t errlen);
/* hips_allsky_encode from the order-0 tiles of `bs` (hips_allsky_render_from; NULL:
 * hips_allsky_render). */
long hips_allsky_encode_from(const hips_source *src, int galactic, const hips_base_source *bs,
                             hips_format fmt, const render_params *rp, double lo, double hi,
                             unsigned char **out, size_t *outlen, char *err, size_t errlen);

/* The footprint of the image on a HiPS: a tile of order K holds it when the centre of
 * one of its pixels (a HEALPix cell of order K + HIPS_TILE_SHIFT) lies on the plane its
 * tiles are rendered from, [-0.5, n - 0.5] on both axes at the reduction level `level`
 * (hips_source_level; clamped to the top of the pyramid, engine/image/pyramid.h), among
 * the pixels hips_render_tile computes: exactly the tiles whose render has a pixel where
 * the kernel samples the plane (finite unless the data there is NaN), whatever the format,
 * since the render transforms exactly every point near the plane's edges.  Positions are
 * tested with the grid of HIPS_FOOTPRINT_MCE, after the exact transform of the centre of
 * each block of the plan.  Returns 1, 0, TESS_EINVAL (invalid tile), TESS_ENOMEM. */
#define HIPS_FOOTPRINT_MCE 0.001
int hips_tile_in_footprint(const skywcs *cel, long nx, long ny, int galactic, int level,
                           int order, int64_t npix);

/* The cells of a HiPS's coverage: the tiles of `order` in the footprint
 * (hips_tile_in_footprint at the level of `pixscale`, the image's pixel size in degrees),
 * in the HiPS frame (`galactic` 1, else ICRS), in increasing npix order.  The candidates
 * come down the orders through the children of hips_tile_overlaps tiles; with max_tests
 * > 0 the walk tests at most max_tests tiles (each some 600 WCS transforms) and stops at
 * the deepest order it completes within them (*reached; `order` when not cut short): a
 * coarser list for an image of very many cells (a huge shape, a tiny pixel scale); 0
 * tests every candidate.  *list is malloc'd (NULL when none).  Returns 0, TESS_EINVAL,
 * TESS_ENOMEM. */
int hips_footprint_cells(const skywcs *cel, long nx, long ny, int galactic, double pixscale,
                         int order, size_t max_tests, int64_t **list, size_t *n, int *reached);

/* Whether the coverage `cells` (sorted, of order M) holds tile (order, npix): for order
 * <= M, one of its descendants of order M is a cell; deeper, its ancestor of order M is.
 * The rule of the survey's tiles: those it holds exist (with hips_tile_in_footprint for
 * tiles deeper than M), no other.  Returns 1 or 0.  Cannot fail. */
int hips_cells_hold(const int64_t *cells, size_t n, int M, int order, int64_t npix);

/* The Moc.fits of the survey [HiPS 4.4.2; IVOA MOC 2.0]: the cells of
 * hips_footprint_cells, written by hips_moc_fits_cells.  *out is malloc'd and *ncells (may
 * be NULL) gets the number of cells.  Returns 0, TESS_EINVAL, TESS_ENOMEM. */
int hips_moc_fits(const skywcs *cel, long nx, long ny, int galactic, double pixscale,
                  int order, size_t max_tests, unsigned char **out, size_t *outlen,
                  size_t *ncells);

/* A Moc.fits of `cells` (tiles of `order`, strictly increasing) in the HiPS frame, as
 * HiPS 1.0 asks (section 4.4.2) and Hipsgen writes: every four siblings merged into their
 * parent, as NUNIQ values (4^(k+1) + npix) in ascending order, in a FITS binary table (one
 * column UNIQ, 1K) with PIXTYPE HEALPIX, ORDERING NUNIQ, COORDSYS G (galactic) or C
 * (ICRS) and MOCORDER `order`.  *out is malloc'd and *ncells (may be NULL) gets the number
 * of NUNIQ values.  Returns 0, TESS_EINVAL (a cell out of order or of range),
 * TESS_ENOMEM. */
int hips_moc_fits_cells(const int64_t *cells, size_t n, int order, int galactic,
                        unsigned char **out, size_t *outlen, size_t *ncells);

/* What the properties file of a survey says [HiPS 4.4.1], gathered by its maker (the
 * server for a survey made on demand, `tessera hips` for a static tree), so that both
 * write the same keywords in the same format. */
typedef struct hips_properties {
    const char *name;          /* creator_did ivo://tessera/{name} and obs_title */
    const char *description;   /* obs_description; NULL or "" for none */
    const char *builder;       /* hips_builder */
    const char *tile_formats;  /* hips_tile_format: "png jpeg fits" or a part of it */
    const char *bunit;         /* data_pixel_unit (BUNIT); NULL or "" for none */
    time_t released;           /* hips_release_date, written in UTC to the minute */
    int order;                 /* hips_order, the deepest tile order (0..29 - S) */
    int galactic;              /* hips_frame: galactic (1) or equatorial (0) */
    double ra, dec;            /* hips_initial_ra, hips_initial_dec: ICRS degrees */
    double fov;                /* hips_initial_fov, degrees */
    double cut_lo, cut_hi;     /* hips_pixel_cut: the cut levels of PNG and JPEG tiles */
    double data_min, data_max; /* hips_data_range: the 0 and 100 percentiles */
    long cube_depth;           /* > 1: a HiPS cube [HiPS 4.2.3] of that many planes
                                  (hips_cube_depth); 0 or 1: an image */
    long cube_firstframe;      /* hips_cube_firstframe, 0-based (cubes only) */
    double cube_crval3;        /* cubes: the world value of plane 0 and the step from one */
    double cube_cdelt3;        /* plane to the next (data_cube_crval3, data_cube_cdelt3 with */
    const char *cube_bunit3;   /* data_cube_crpix3 1, data_cube_bunit3 the unit); written
                                  when cube_cdelt3 is finite and not 0 */
    double em_min, em_max;     /* em_min, em_max: the wavelengths (m) the survey spans;
                                  written when both are finite and > 0 (0: not known) */
} hips_properties;

/* The text of the properties file: one "keyword = value" line each (keywords padded to
 * 20 characters, as Hipsgen writes them), in the order creator_did, obs_title,
 * obs_description (when given), dataproduct_type (image, or cube with hips_cube_depth,
 * hips_cube_firstframe and, when the axis is known, data_cube_crpix3/crval3/cdelt3/bunit3
 * after it when cube_depth > 1), em_min and em_max (when known), hips_version 1.4, hips_builder,
 * hips_release_date, hips_status "public master clonableOnce", hips_tile_format,
 * hips_tile_width, hips_order, hips_order_min 0, hips_frame, hips_pixel_bitpix -32,
 * hips_pixel_cut, hips_data_range, hips_pixel_scale (hips_cell_size of order + S),
 * hips_initial_ra/dec/fov, data_pixel_unit (when given).  *out is malloc'd and
 * NUL-terminated, *outlen its length.  Returns 0, or TESS_EINVAL (no name, builder or
 * formats) / TESS_ENOMEM. */
int hips_properties_text(const hips_properties *p, char **out, size_t *outlen);

/* What the index.html of a survey says [HiPS 4.4.5], shared by the server (a survey made
 * on demand) and `tessera hips` (a static tree). */
typedef struct hips_index {
    const char *name;          /* the survey, in the title "HiPS {name}" */
    const char *base_href;     /* the page's <base href>, or NULL for none */
    const char *made_by;       /* HTML after "An IVOA HiPS 1.0 survey ", before the
                                  source: "made on demand by Tessera from dataset" */
    const char *source;        /* the image it was made from, in bold */
    long nx, ny;               /* the image's size, pixels */
    long images;               /* > 0: a survey of that many images (a collection), said
                                  in place of the size */
    int galactic;              /* frame: galactic (1) or equatorial (0) */
    int order;                 /* the deepest order, said as "orders 0 to K"; < 0: not said */
    const char *how;           /* HTML, how to use it, before ", or read the properties":
                                  "Open this URL in a HiPS client such as Aladin" */
    unsigned formats;          /* the tile formats, a set of HIPS_FMT_BIT: the tiles line
                                  lists them in the order png, jpg, fits, and the Allsky
                                  link names the first of them */
} hips_index;

/* The text of the index.html of x: the title and heading, one paragraph (who made the
 * survey from which image, its size and frame, how to use it, a link to the properties),
 * and a list of its parts (Norder3/Allsky and Moc.fits linked, the tile paths).  name,
 * base_href and source are HTML-escaped; made_by and how are written as they are.  *out
 * is malloc'd and NUL-terminated, *outlen its length.  Returns 0, or TESS_EINVAL (no
 * name, made_by, source or how, or no format) / TESS_ENOMEM. */
int hips_index_html(const hips_index *x, char **out, size_t *outlen);

#endif
