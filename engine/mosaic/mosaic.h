/* Mosaics: many celestial images reprojected onto one grid, background-matched and coadded,
 * as stages of independent blocks whose results live in a work directory. */
#ifndef TESSERA_ENGINE_MOSAIC_MOSAIC_H
#define TESSERA_ENGINE_MOSAIC_MOSAIC_H

#include <stddef.h>
#include "engine/fits/fitsimg.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

/* How the values of the inputs at one output pixel are combined (w = the input's weight
 * there: 1 where its reprojection is finite for interpolation, the covered fraction for
 * exact; inputs with w = 0 do not count):
 *   MEAN   sum(w v) / sum(w)            (reproject_and_coadd "mean", SWarp WEIGHTED)
 *   SUM    sum(w v)                     (reproject_and_coadd "sum")
 *   MEDIAN median of v (mean of the two middle values for an even count; unweighted)
 *   MIN, MAX   extremes of v
 *   FIRST, LAST  v of the first / last input in the order given */
typedef enum {
    MOS_MEAN, MOS_SUM, MOS_MEDIAN, MOS_MIN, MOS_MAX, MOS_FIRST, MOS_LAST
} mos_combine;

/* Background matching: none, planes a + b x + c y per input, or constant levels. */
typedef enum { MOS_BG_NONE, MOS_BG_PLANE, MOS_BG_LEVEL } mos_bg;

/* "mean", "sum", ... (lower case).  Returns 0 and *c, or TESS_EINVAL. */
int mos_combine_parse(const char *s, mos_combine *c);
const char *mos_combine_name(mos_combine c);
const char *mos_bg_name(mos_bg b);   /* "none", "plane", "level" */

/* One input: the 2-D image in HDU `hdu` (0-based) of the FITS file `path`, named `name`
 * in the provenance cards (a dataset name or the path as given; NULL = path). */
typedef struct mos_input {
    const char *path;
    const char *name;
    int hdu;
    double offset;              /* a level taken off the input's values before they are
                                   combined (and before overlaps are fitted), in its pixel
                                   units; 0 = none (a collection's background offset,
                                   daemon/collection/colbackground.h) */
} mos_input;

/* An input's header as a plan uses it, read once (mos_read_header) and handed to
 * mos_plan through mos_spec.headers so that a plan and an estimate read no header again. */
typedef struct mos_header {
    long nx, ny;
    char bunit[72];
    char *cards;                /* the header cards (NULL: not read) */
    int nkeys;
    skywcs *cel;                /* celestial 2-D WCS (skywcs_celestial_image) */
    fitsimg_layout lay;         /* where its pixels are (zeroed: not known; the blocks
                                   then read the header again) */
} mos_header;

/* Reads HDU `hdu` of `path` and applies the celestial-image rule
 * (skywcs_celestial_image).  Returns 0 with *h filled (mos_header_release it), or
 * TESS_EIO / TESS_EINVAL / TESS_ENOMEM with *h empty and *chk saying what failed:
 * chk->why SKYWCS_IMAGE_OK with `err` the reader's message when the file could not be
 * read as a FITS image, else the rule's answer (and `err` empty).  Counts the read
 * (mos_header_reads). */
int mos_read_header(const char *path, int hdu, mos_header *h, skywcs_image_check *chk,
                    char *err, size_t errlen);
void mos_header_release(mos_header *h);

/* How many headers mos_read_header has read in this process (for tests). */
unsigned long mos_header_reads(void);

/* What to mosaic.  The target is either `target_cards` (nkeys 80-character cards with
 * NAXIS1, NAXIS2 and a celestial WCS) or, when target_cards is NULL, automatic (see
 * mos_auto_target) in `auto_frame` (SKY_FRAME_NONE: the first input's frame) with the
 * projection code `auto_proj` ("" = TAN). */
typedef struct mos_spec {
    int ninputs;                /* 1 .. MOS_MAX_INPUTS */
    const mos_input *inputs;
    const char *target_cards;
    int target_nkeys;
    sky_frame auto_frame;
    char auto_proj[8];
    rp_method method;
    mos_combine combine;
    mos_bg bg;
    const mos_header *headers;  /* NULL, or ninputs headers read already (mos_read_header;
                                   those with cards NULL are read by mos_plan) */
    const char *auto_cards;     /* the automatic target computed already from these
                                   headers (mos_auto_target), or NULL */
    int auto_nkeys;
    long auto_nx, auto_ny;
    long max_pixels;            /* largest output (NAXIS1 x NAXIS2) allowed; 0 = 2^31 */
    double max_block_bytes;     /* memory one block may use (see mos_cost); a reprojection
                                   block whose input pixels would take more fails with
                                   TESS_ETOOBIG before it allocates them; 0 = no limit */
    struct pool *pool;          /* NULL, or workers (engine/base/pool.h) on which mos_plan
                                   reads the inputs' headers and places them on the target
                                   in `threads` slices (the caller's thread takes part);
                                   the plan and its messages are the same either way */
} mos_spec;

#define MOS_MAX_INPUTS 99999

/* The automatic target of astropy reproject's find_optimal_celestial_wcs (auto_rotate
 * off): square pixels of the finest input pixel scale (the smaller column norm of each
 * input's pixel-scale matrix at its reference pixel, measured on the sky by central
 * differences over +-8 and +-16 pixels combined by Richardson extrapolation), CRVAL at the normalised mean of the unit vectors of the inputs' reference
 * pixels (CRPIX), converted to `frame`, projection `proj` with CDELT1 < 0, no rotation,
 * and CRPIX / NAXIS chosen so that the outer corners (-0.5, -0.5) ... (n - 0.5, n - 0.5)
 * of every input fall inside: CRPIXi = 0.5 - min (0-based pixel position of the corners
 * with CRPIX = 1), NAXISi = round-half-even(max - min).  The inputs are given by their
 * celestial 2-D WCS and sizes.  *cards is malloc'd (80-character cards: WCSAXES, CTYPE,
 * CRVAL, CRPIX, CDELT, CUNIT, LONPOLE, LATPOLE, RADESYS/EQUINOX as applicable, NAXIS1,
 * NAXIS2).  Returns 0, or TESS_EINVAL (unknown projection, a corner off the projection,
 * bad frame) / TESS_ENOMEM, with `err`. */
int mos_auto_target(int n, skywcs *const *wcs, const long *nx, const long *ny, sky_frame frame,
                    const char *proj, char **cards, int *nkeys, long *out_nx, long *out_ny,
                    char *err, size_t errlen);

/* The box of output pixels that an nx x ny input on `in` can touch on the output grid
 * `out` (out_nx x out_ny): the outline of the input, (-0.5 .. n-0.5) sampled every 8
 * pixels along each edge (at least 16 points an edge), transformed to output pixels
 * (frames converted), padded by one pixel and clipped to the grid.  Longitude wrap needs
 * no care: positions are compared in the output's pixel plane.  When some outline point
 * has no valid transform, or consecutive points jump by more than a quarter of the
 * output's larger side (a projection seam), the whole grid is used; when none has, the
 * whole grid if the output's centre falls on the input, else nothing.  Writes x0, y0
 * (0-based) and w, h; w = h = 0 when the box misses the grid.  Returns 0 or
 * TESS_EINVAL / TESS_ENOMEM. */
int mos_bbox(skywcs *in, long nx, long ny, skywcs *out, long out_nx, long out_ny, long box[4]);

/* Turns header text into concatenated cards up to END: fitscard_parse
 * (engine/fits/fitscard.h) with a cap of 100000 cards.  Returns 0, TESS_EINVAL or
 * TESS_ENOMEM, with `err`. */
int mos_cards_from_text(const char *text, size_t len, char **cards, int *nkeys, char *err,
                        size_t errlen);

/* A planned mosaic.  Stages, in order (those of background matching only when asked):
 *   "reproject"  one block per input and band of rows of its box in the output: the
 *                input reprojected (rp_reproject on the calling thread, no pool) onto
 *                the band, written to WORKDIR/r_K.val (float32, native order, box width
 *                x box height, NaN = no data) and, for exact, r_K.wgt (the footprint);
 *   "overlaps"   one block per input i: for every later input j whose box meets i's,
 *                the difference v_i - v_j on the common pixels (weights >= 0.999;
 *                rows and columns subsampled to about 2^20 points), fitted by least
 *                squares with a plane (or a constant) in output pixel coordinates with
 *                three passes of 3-sigma clipping (sigma = 1.4826 MAD), and the
 *                moments of the points kept written to WORKDIR/ov_I.bin;
 *   "solve"      one block: the corrections P_k(x, y) = a_k + b_k x + c_k y minimising
 *                sum over pairs and kept points of (P_i - P_j - d)^2, the mean of the
 *                corrections of each connected group of inputs constrained to zero
 *                (Montage mBgModel's model; reproject's match_background, which fits
 *                levels only, is the "level" case); written to WORKDIR/bg.bin.  An
 *                input overlapping no other gets no correction;
 *   "coadd"      one block per band of output rows: each input's band minus its
 *                correction, combined, written as big-endian rows into
 *                WORKDIR/mosaic.fits (HDU 0 the coadd, HDU 1 COVERAGE, the summed
 *                weight), and the band's parts of the two DATASUMs (fitswrite_sum32 of
 *                its rows as written) to its 16 bytes of WORKDIR/sums.bin.
 *                Pixels no input covers are NaN (coverage 0).
 * Blocks only write their own byte ranges of files in the work directory and are
 * idempotent; a block of one stage reads only what earlier stages wrote, so after a
 * restart mos_plan on the same spec and directory continues where the work stopped.
 * A reprojection block reads the input pixels its band can use (the band's outline
 * mapped onto the input, padded; the whole input for bicubic or pixel-based distortion
 * tables) as float32, BSCALE/BLANK applied.  Bands have at most 2^22 output pixels and
 * about an eighth of the box's rows; when the input is larger than 64 MB as float32,
 * bands are made shorter (down to one row) until the pixels one band reads are at most
 * 64 MB by the estimate of mos_estimate.  Outlines are sampled every 8 pixels, at most
 * 65536 intervals an edge. */
typedef struct mosaic mosaic;

/* Plans the mosaic: reads every input header, makes or parses the target, computes
 * every box and band.  Writes WORKDIR/plan.txt (the geometry); when it exists already
 * and differs (the inputs changed under a planned job) fails with TESS_EINVAL.
 * `workdir` NULL plans without any file, for mos_estimate and the queries below only
 * (mos_run_block and mos_finish then fail with TESS_EINVAL).  `threads` is unused.
 * Returns 0 and *out, or TESS_EINVAL / TESS_EIO / TESS_ENOMEM / TESS_ENOOVERLAP (no
 * input touches the target) / TESS_ETOOBIG (output larger than spec->max_pixels) with
 * `err`. */
int mos_plan(const mos_spec *spec, const char *workdir, int threads, mosaic **out,
             char *err, size_t errlen);

/* What a planned mosaic will need, from its geometry alone (no pixel is read):
 *   block_bytes   memory of the largest block (bytes): a reprojection band's input
 *                 pixels (4 bytes each, 15 for bicubic's spline coefficients and
 *                 masks) and its output band, an overlap fit's samples, the solve's
 *                 normal matrix ((ninputs x 1 or 3)^2 doubles), a coadd band's buffers;
 *                 plus 8 MB for the reprojection's tables;
 *   block_what    which block that is, in words ("reprojection of input 'x.fits': ...");
 *   work_bytes    the files of the work directory once every block has run (the
 *                 reprojected inputs, the overlap fits, mosaic.fits);
 *   product_bytes the product mosaic_finish links (mosaic.fits, both HDUs);
 *   state_bytes   memory the plan itself holds (headers, WCS, boxes);
 *   coadd_traffic bytes the coadd stage moves through memory at the least: every staged
 *                 plane read once (values, and weights for exact: 4 bytes a pixel of
 *                 each input's box) and both data units of mosaic.fits written once
 *                 (4 bytes a pixel each), the bound bench/mosaic compares its time with.
 * The input pixels of a band are estimated from its outline sampled 64 times along its
 * longer side, mapped onto the input and padded by twice how far the mapped edges bend
 * between samples: a bound on the pixels run_block reads (a larger input-to-output scale
 * ratio gives more). */
typedef struct mos_cost {
    double block_bytes;
    char block_what[200];
    double work_bytes;
    double product_bytes;
    double state_bytes;
    double coadd_traffic;
} mos_cost;
void mos_estimate(const mosaic *m, mos_cost *c);

/* Bytes the staged planes of the reprojection stage take (4 bytes a pixel of each
 * input's box, values and for exact weights, each plane rounded up to 64 bytes, the whole
 * to whole 2 MB huge pages: tess_huge_bytes): what mos_stage_in_memory holds. */
double mos_stage_bytes(const mosaic *m);

/* Holds the staged planes in one buffer of mos_stage_bytes(m) (tess_alloc_huge:
 * transparent huge pages asked for) instead of the work directory's files, when that is
 * at most max_bytes: the reprojection blocks then write their bands straight into it and
 * the overlap fits and the coadd read it there (no file written, copied or mapped).  Only
 * for a mosaic whose blocks all run in this process from the start, after mos_plan with
 * a work directory and before any block (a job resumed after a restart needs the files:
 * the daemon keeps them).  Held in memory, the reprojection blocks also read each input
 * of at most 16 MB (as float32) whole, once for all its bands, holding at most 128 MB of
 * inputs at a time besides max_bytes (mosaic.c, band_input).  Returns 1 when held in
 * memory, 0 when the files stay (over max_bytes, no work directory, out of memory). */
int mos_stage_in_memory(mosaic *m, double max_bytes);

int mos_nstages(const mosaic *m);
long mos_nblocks(const mosaic *m, int stage);        /* >= 1 */
/* 1 when input k (0-based) covers some output pixel, 0 when it does not overlap the
 * target and adds nothing (its INPn card says so in the product). */
int mos_input_overlaps(const mosaic *m, int k);
const char *mos_stage_name(const mosaic *m, int stage);
void mos_target_size(const mosaic *m, long *nx, long *ny);
/* The box of input k (see mos_bbox), in output pixels. */
void mos_input_box(const mosaic *m, int k, long box[4]);

/* An order in which to run the mos_nblocks(m, stage) blocks of `stage` on `spread`
 * threads (order[i] = the block to start i-th; the caller's array of that many longs):
 * for the reproject stage, inputs taken `spread` at a time and their bands in turn (the
 * first band of each, then the second, ...), so that blocks running at once mostly
 * belong to different inputs and write different staging files (ext4 holds a file's
 * lock through each buffered write) and read different input files; any other stage,
 * or spread < 2: 0, 1, 2, ...  Any order gives the same product.  Cannot fail. */
void mos_block_order(const mosaic *m, int stage, int spread, long *order);

/* Runs block `block` of stage `stage` (both 0-based).  Thread-safe for blocks of one
 * stage.  Polls *cancel (may be NULL) and returns TESS_ECANCELED when it is set.
 * Returns 0 or TESS_EIO / TESS_ENOMEM / TESS_EINVAL / TESS_ETOOBIG (a reprojection band
 * over spec->max_block_bytes) with `err`. */
int mos_run_block(mosaic *m, int stage, long block, const volatile int *cancel, char *err,
                  size_t errlen);

/* The fitted correction of input k in output pixels, P(x, y) = c[0] + c[1] x + c[2] y
 * (0-based x, y), after the solve stage (zeros before, or without matching).  Returns 0,
 * or TESS_EIO when bg.bin cannot be read. */
int mos_correction(mosaic *m, int k, double c[3]);

/* After every block: writes the headers into WORKDIR/mosaic.fits (the target's WCS cards,
 * provenance: NINPUTS, INPn = name, METHOD, COMBINE, BGMATCH, and BGAn/BGBn/BGCn the
 * plane of each input), sets CHECKSUM and DATASUM of both HDUs (the data units' sums
 * combined from those each coadd block kept in WORKDIR/sums.bin, so that the data
 * are not read again; summed from the file when one is missing) and puts the file at
 * `out_path` (a hard link, or a copy where links fail; an existing out_path is
 * replaced).  Nothing is fsync'ed (the job runner
 * syncs; the command line does not need to).  Idempotent.  Returns 0 or TESS_EIO /
 * TESS_ENOMEM with `err`. */
int mos_finish(mosaic *m, const char *out_path, char *err, size_t errlen);

/* ---- background levels of many images (collections: daemon/collection/colbackground.h) --
 *
 * The "level" case of the overlaps and solve stages above, for callers that measure the
 * pairs themselves. */

/* The level of n differences d (an overlap's a - b, in the images' units) as the
 * overlaps stage fits it: the mean, then three passes of 3-sigma clipping (sigma =
 * 1.4826 MAD) refitting on the points kept.  *level gets it (NaN when n < 1), *kept the
 * number of points it rests on.  Returns 0 or TESS_ENOMEM. */
int mos_bg_fit_level(long n, const double *d, double *level, double *kept);

/* One measured pair: images i and j (0-based, i != j), d the level of v_i - v_j on their
 * common pixels, w its weight (the points it rests on; pairs with w <= 0 or d not finite
 * are no constraint). */
typedef struct mos_bg_pair {
    int i, j;
    double d, w;
} mos_bg_pair;

/* The levels x[0..n) minimising sum over pairs of w (x_i - x_j - d)^2 (Montage mBgModel's
 * least squares, the solve stage's "level" case) with the mean of each connected group
 * of images zero (the gauge; an image in no pair gets 0): conjugate gradients on the
 * weighted graph Laplacian, diagonal preconditioner, O(pairs) memory and time per
 * iteration, to a residual of 1e-15 of the right-hand side (exact data are recovered to
 * about 1e-12 relative).  Returns 0 or TESS_ENOMEM. */
int mos_bg_solve_levels(int n, const mos_bg_pair *pairs, long npairs, double *x);

/* Frees the mosaic (NULL is ignored); the work directory is left as it is. */
void mos_free(mosaic *m);

#endif
