/* The mosaic's private parts: the planned inputs, the mosaic struct and the functions its files share (mosaic.c, mosaic_target.c, mosaic_background.c). */
#ifndef TESSERA_ENGINE_MOSAIC_MOSAIC_INT_H
#define TESSERA_ENGINE_MOSAIC_MOSAIC_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "engine/fits/fitscard.h"
#include "engine/mosaic/mosaic.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"


/* Stage kinds. */
enum { ST_REPROJECT, ST_OVERLAPS, ST_SOLVE, ST_COADD };

/* Points an overlap fit keeps at most (before subsampling rounds it). */
#define FIT_POINTS ((long)1 << 20)
/* Weight a pixel needs to count in an overlap fit. */
#define FIT_MIN_WEIGHT 0.999
/* Bytes a coadd row group may hold in its buffers (the accumulator, the float32 values
 * and coverage): small enough to stay in a core's cache while the group's inputs are
 * added, combined and written, since they are reused from group to group, together with
 * the band's gathered output (COADD_WRITE_BYTES a plane) and the page cache's pages the
 * write fills.  With 1 MB groups and 1 MB writes that came to 3-4 MB, past a 2 MB L2:
 * the 64-input mosaic's coadd (512^2 tiles, 1 thread, median of 9 alternated, Intel
 * Xeon, 2 MB L2) took 0.048 s of CPU (0.046-0.056) with 512 KB groups and 256 KB writes
 * against 0.051 s (0.050-0.082); in a first sweep 512 KB writes and 1 MB groups were
 * each slower than 256 KB, and 256 KB groups no faster than 512 KB. */
#define COADD_GROUP_BYTES ((size_t)1 << 19)
/* Bytes of each output plane (values, coverage) a coadd band gathers from its groups
 * before it writes them: a pwrite(2) of a few hundred KB lets the page cache take the
 * data in larger folios, where a write of a group's rows pays more per 4 KB page: 115 MB
 * written as 168,000-byte pieces took 25.6 ms of CPU, as 1 MB pieces 19.0 ms, as 3.6 MB
 * 15.5 ms (ext4, Linux 6.18, best of 5, AMD EPYC).  Larger buffers leave the cache, so
 * that the coadd stage as a whole was slower with 2 and 4 MB than with 1 MB on the EPYC
 * (1 MB L2), and with 1 MB than with 256 KB on the Xeon (above). */
#define COADD_WRITE_BYTES ((size_t)1 << 18)
/* Inputs of a coadd band whose planes are mapped for the whole band (two mappings each
 * for exact); a band met by more maps each input's rows a group at a time, so that the
 * mappings stay far below the kernel's vm.max_map_count (65530 by default). */
#define COADD_MAPS 1024
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
/* Memory of a reprojection block besides its pixels and the kernel's scratch
 * (rp_scratch_bytes): WCS copies, cfitsio's buffers. */
#define REPROJECT_OVERHEAD ((double)((size_t)8 << 20))

/* A grid's WCS parsed once, for the WCS of its sub-grids (shifted_wcs in mosaic.c):
 * `full` is NULL when each sub-grid's cards must be parsed instead (a CRPIX1 or CRPIX2
 * card given twice, a parse that failed); card[k] is CRPIXk as the cards hold it (or as
 * shifted_wcs adds it when they lack it). */
typedef struct mos_origin {
    skywcs *full;
    char card[2][80];
} mos_origin;

/* One input as planned. */
typedef struct src {
    char *path, *name;
    int hdu;
    double offset;         /* mos_input's */
    long nx, ny;
    char *cards;           /* the input's header cards */
    int nkeys;
    int crop_ok;           /* 1 when a crop may carry a shifted CRPIX (no pixel-based
                              distortion tables) and the method is local */
    skywcs *cel;           /* celestial 2-D WCS of the whole input */
    mos_origin origin;     /* for the WCS of a crop */
    fitsimg_layout lay;    /* its pixels' layout as the plan read it (reads by it) */
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

/* An input read whole for its reprojection bands (band_input in mosaic.c). */
typedef struct mos_whole {
    float *pix;        /* nx x ny float32, row-major, or NULL */
    int state;         /* WHOLE_NONE, WHOLE_READING, WHOLE_READY, WHOLE_DONE */
    int users;         /* bands reading pix now */
    long done;         /* bands of the input done */
} mos_whole;

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
    mos_origin torigin;    /* for the WCS of an output band */
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
    /* The staged planes held in anonymous memory (mos_stage_in_memory), or NULL: in the
     * work directory's r_K.val / r_K.wgt.  staged[f * n + k]: plane f (0 values, 1
     * weights for exact) of input k, box[2] x box[3] float32 row-major, in one
     * tess_alloc_huge buffer (stage_base) that mos_free frees. */
    float **staged;
    void *stage_base;
    /* With the staged planes in memory, the inputs read whole for their bands
     * (band_input): whole[k] (n entries; NULL: each band reads its crop), the bytes they
     * hold now in whole_bytes; both under lock. */
    mos_whole *whole;
    size_t whole_bytes;
};

/* The mosaic's headers are fitscard lists (engine/fits/fitscard.h) of at most this many
 * cards. */
#define MOS_MAX_CARDS 100000

/* ---- shared by the mosaic's files ---- */

/* A string card, padded to 8 characters; a value too long for one card keeps its end,
 * which names the file, after "...". */
void mos_add_str(fitscard_list *b, const char *key, const char *s, const char *comment);

/* Reads a whole small file (malloc'd, NUL-terminated).  Returns 0 or TESS_EIO. */
int mos_read_small(const char *path, char **data, size_t *n);

/* Writes a small file whole: to NAME.tmp, then renamed (no fsync: the job runner syncs
 * the work directory before it records a block).  Returns 0 or TESS_EIO. */
int mos_write_small(const char *path, const void *data, size_t n, char *err, size_t errlen);

/* WORKDIR/<pre><k><post>. */
void mos_wpath(const mosaic *m, char *out, size_t len, const char *pre, long k,
                  const char *post);

/* Bytes a reprojection block holds per input pixel it reads: the float32 pixels, and for
 * bicubic the spline coefficients (double) and three byte masks (engine/sky/kernels.c). */
double mos_input_bpp(rp_method method);

/* Bands of a large input (over BAND_INPUT_BYTES as float32): *rows halved until the
 * largest band reads at most BAND_INPUT_BYTES by the slab estimate, or is one row.  The
 * slabs start at EST_SLABS_MIN and are made four times finer while the bands are
 * shorter than two slabs (up to EST_SLABS_MAX or one row each, and while the plan's
 * EST_SLABS_TOTAL allows), so the cost follows the bands needed.  Sets s->crop_px (the
 * largest band's input pixels) and s->rows_cut.  Returns 0 or TESS_ENOMEM. */
int mos_fit_band_rows(mosaic *m, src *s, long *rows);

/* n points of the outline of the rectangle [x0, x1] x [y0, y1], edges sampled every
 * `step` (at least 16 and at most OUTLINE_MAX intervals an edge), in order round the
 * outline.  *px, *py malloc'd. */
long mos_outline(double x0, double y0, double x1, double y1, double step, double **px,
                    double **py);

/* Transforms n pixel positions of `from` to pixel positions of `to` in place (frames
 * converted).  Returns 0 or a TESS_E* code. */
int mos_pix2pix(skywcs *from, skywcs *to, long n, double *x, double *y);

/* The box of the pixel positions (x, y) on an nx x ny grid, padded by `pad` and clipped;
 * the whole grid when some position is NaN or consecutive points jump by more than
 * `jump`; w = h = -1 when every position is NaN.  box = {x0, y0, w, h}. */
void mos_points_box(long n, const double *x, const double *y, long nx, long ny, long pad,
                       double jump, long box[4]);

/* 1 when *cancel (may be NULL) is set. */
int mos_canceled(const volatile int *cancel);

/* Reads rows [y0, y1) (output rows) and columns [x0, x1) of input k's reprojection:
 * values into v and, for exact, weights into w (else w gets 1 where v is finite, 0
 * elsewhere).  Rows are contiguous at stride x1 - x0.  Returns 0 or TESS_EIO. */
int mos_read_rows(const mosaic *m, int k, long x0, long x1, long y0, long y1, long ystep,
                     float *v, float *w, char *err, size_t errlen);

/* Block i of the stage overlaps: the fits of the overlaps of one input with the others,
 * saved to the work directory.  Returns 0 or a TESS_E* code with err. */
int mos_run_overlaps(mosaic *m, long i, const volatile int *cancel, char *err, size_t errlen);

/* The stage solve: the overlap fits read back and the plane correction of every input
 * solved, saved as bg.bin.  Returns 0 or a TESS_E* code with err. */
int mos_run_solve(mosaic *m, char *err, size_t errlen);

/* Loads bg.bin once (zeros without matching). */
int mos_load_corr(mosaic *m, char *err, size_t errlen);

#endif
