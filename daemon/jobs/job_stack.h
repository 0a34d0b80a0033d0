/* Job types on cubes and stacks: rechunk, power_spectrum, recenter, reduce, ingest.
 *
 * Bodies (every other field is refused with 400 naming it):
 *   {"type": "rechunk", "dataset": NAME}
 *       A profile-friendly copy of a cube or stack: an engine/image/chunkstore.h store (series
 *       of every pixel contiguous, in tiles of 16 x 16 pixels; values in the smallest type
 *       that holds the physical values exactly: u1 for BITPIX 8, u2 for BITPIX 16 with
 *       BZERO 32768, i2 for plain BITPIX 16, else float32).  Attached to NAME
 *       (job_product.attach_to), not registered as a dataset.
 *       One stage when a band of 16 rows across all planes fits in 256 MB (the band
 *       limit, job_stack_set_band_bytes): bands of rows (whole tile rows), each gathered
 *       from the planes in memory and written at its fixed offset of the store.  Larger
 *       volumes: groups of planes (job_rechunk_group_planes), each writing its values
 *       into every series of the store.  (Every frame is read once in the plan of
 *       groups; a PNG frame, decoded whole, is decoded once per band in the plan of
 *       bands and kept by the stack's frame cache, so a stack of PNG frames of more than
 *       256 MB of samples or more than 64 frames, more than that cache holds, takes the
 *       plan of groups.)  Which plan, and its bands' rows or its groups' planes and
 *       parts (both sized for the planning process's threads), are decided by the job's
 *       first plan and recorded in <workdir>/rechunk.plan, so that a restart or another
 *       node of other settings runs the same blocks.
 *   {"type": "power_spectrum", "dataset": NAME, "output": {"name": NEW}}
 *       P[k](x, y) = |sum_n s[n] exp(-2 pi i k n / nz)|^2 for k = 0..nz-1, s = the raw
 *       series of pixel (x, y) (physical values; no mean removal, no window; blank
 *       values count as 0): abs(numpy.fft.fft(s))**2, all nz frequencies (the upper half
 *       mirrors the lower one, P[k] = P[nz-k], kept so that the series has the length
 *       of numpy's).  Computed with fftw3 (r2c, one plan per job, made under a
 *       mutex: fftw's planner is not thread-safe) in double precision, then rounded to
 *       float32 (a single-precision transform misses 1e-4 relative on the smallest
 *       coefficients of l1448_13co: 1.7e-4), written as a float32 FITS cube (nx, ny, nz): plane k =
 *       frequency index k in cycles per nz samples; the source's celestial WCS cards are
 *       copied, the third axis has no WCS.  Registered as dataset NEW (a cube).
 *       Stages: 1) groups of planes into a staging file (a store of rechunk's layout),
 *       as rechunk's plan of groups (job_stack_group_plan: groups of
 *       job_rechunk_group_planes frames, at most 64 and 64 MB, each in a part per
 *       worker holding its frames once, recorded in the work directory so that a
 *       restart under another thread count keeps the blocks); 2) bands, each writing
 *       its spectra into the cube.  (Bands gathered from the planes in memory, as
 *       rechunk's one-stage plan, cost more: each band of 16 rows would open every
 *       frame again.)  When the dataset has a current rechunk copy
 *       attached at planning time, one stage of bands reads the series from it.
 *       Anonymous memory, whatever the frame count beyond what it names: at most
 *       state + W * (block + 4 MB) bytes on W workers (jobbudget_peak of the estimate),
 *       state = 4 nx ny (the pixel order) + the reader's decoded frames (PNG, TIFF:
 *       min(64, nz) frames, at most 256 MB and one frame) + 32 nz + 64 KB (the FFT's
 *       plan), block = the larger of stage 1's group (its G = job_rechunk_group_planes
 *       held frames and a tile row of each, jobc_transpose_group_bytes) and a block of
 *       spectra (engine/cube/spectrum.h: the block budget B = 16 MB rounded up to 2 MB
 *       pages, or 16 x 16 pixels' nz / 2 + 1 float32 when larger, and 32 (nz (es + 8) +
 *       20 (nz / 2 + 1)) bytes of FFT buffers, es the bytes of a stored value) plus G
 *       frames (stage 1's, which the PNG decoder's pool of buffers may keep through
 *       stage 2).  So it rises with nz until a block holds B (near nz = 2 B / (64 nx)
 *       for nx of 256 or more) and G reaches 64, then by the FFT's 32 (es + 18) bytes a
 *       frame a worker only: bench/stackbench, 256 x 256 8-bit PNG, 2 workers, peak
 *       RssAnon 15.3, 46.4 and 53.1-54.9 MB at 250, 4000 and 8000 frames against bounds
 *       of 26.1, 59.4 and 65.0 MB (1.6-3.2 MB before the job included; stage 1 alone
 *       10.3-14.2 MB); 250 frames of 1000 x 1000: 110.5-118.8 MB against 240.8 (stage
 *       1's groups of 63 frames).
 *   {"type": "recenter", "dataset": NAME, "size": [W, H], "output": {"name": NEW}}
 *       Per frame z: the centroid of the object, cx = sum(w x) / sum(w), cy likewise,
 *       with w = I - b over the pixels brighter than b + 3 s, b the median of the finite
 *       pixels and s = 1.4826 MAD (over those brighter than b when none is; x, y 0-based
 *       pixel indices; the frame centre (nx/2, ny/2) when none is brighter than b); crop
 *       origin x0 = (long)cx - W/2 (integer
 *       division), clamped to 0..nx-W (the same for y); the W x H crop at (x0, y0).
 *       Output: a FITS cube (W, H, nz) in the source's value type (BITPIX 8, 16 with
 *       BZERO 32768, 16, or -32), with a binary table extension ORIGINS (FRAME, X0, Y0
 *       0-based; CX, CY), registered as dataset NEW.  Blocks: groups of frames (each
 *       frame read once).
 *   {"type": "reduce", "dataset": NAME, "op": "mean|sum|min|max|std",
 *    "axis": "z|xy" (default "z"), "output": {"name": NEW}}
 *       NaN-aware as numpy's nanmean / nansum / nanmin / nanmax / nanstd (ddof 0): blank
 *       values are skipped; no finite value gives NaN (0 for sum).  axis z: a float64
 *       image (nx, ny); axis xy: a float64 FITS image of nz x 1 pixels (NAXIS1 = nz),
 *       value z = the reduction of plane z.  The header is zreduce_header's
 *       (engine/image/zreduce.h: axis z the source's WCS of axes 1-2, both OBJECT,
 *       TELESCOP, INSTRUME, DATE-OBS, MJD-OBS, BUNIT, then REDUCEOP and REDSRC).  Blocks:
 *       the z-ranges of zreduce_range (axis z: partial sums / Welford moments / extremes
 *       per range in the work directory, merged in plane order by finish), so the product
 *       is, card for card and bit for bit, what GET .../reduce?format=fits gives.
 *   {"type": "ingest", "dataset": NAME}
 *       A stack's frames decoded once (dask's persist): a plane store, a FITS cube (nx,
 *       ny, nz) of the stored values in the type that holds them exactly (BITPIX 8 for
 *       8-bit PNG or FITS frames, 16 with BZERO 32768 for 16-bit PNG, 16, or -32 for
 *       float frames; 422 for scaled frames or frames with BLANK, and for a cube), plane z
 *       = frame z in the reader's orientation, cards INGSRC (NAME) and INGVER (the
 *       dataset_version at planning time).  Attached to NAME (dataset_attach_profile):
 *       afterwards every route and job reads its memory-mapped planes, as a FITS cube,
 *       while no frame changed.  Blocks: groups of frames, each frame read once and
 *       written at its fixed offset (8-bit frames straight from their decoded bytes).
 *       Uncompressed: a plane is then read at the page cache's speed through the map
 *       (bench/stack measured LZ4 and zstd -1 decoding slower than that read).  The
 *       runner's start-up sweep removes a store whose dataset is no longer configured.
 *
 * All: the dataset must be a cube or stack of at least 2 planes (422 otherwise), 404
 * when unknown.  Blocks poll the cancel flag between planes.  plan() derives everything
 * from the body and the dataset's shape, and creates its work files only once (a marker
 * file says they exist), so a restarted job keeps the blocks already written.
 *
 * One file per type (job_rechunk.c, job_power_spectrum.c, job_recenter.c, job_reduce.c,
 * job_ingest.c)
 * over engine/cube and engine/image/zreduce.h; job_common.h holds what they share. */
#ifndef TESSERA_DAEMON_JOBS_JOB_STACK_H
#define TESSERA_DAEMON_JOBS_JOB_STACK_H

#include "daemon/jobs/jobkind.h"

extern const job_kind job_kind_rechunk, job_kind_power_spectrum, job_kind_recenter,
    job_kind_reduce, job_kind_ingest;

/* Sets the band limit (bytes of a band of 16 rows across all planes) under which
 * rechunk gathers bands in memory in one stage; 0 restores the
 * default, 256 MB.  For tests of the two-stage plan on small volumes; set it before
 * plan() (it is read there).  Not thread-safe with running plans. */
void job_stack_set_band_bytes(long bytes);

/* The planes a group of rechunk's plan of groups holds for dataset d on `threads`
 * workers (the group's size): at most 64 and 64 MB of stored values (at least one
 * plane), at most ceil(nz / (2 * threads)).  Its blocks are ceil(nz / that) groups. */
long job_rechunk_group_planes(const dataset *d, int threads);

/* Stage A of transpose t (cube_transpose_init of dataset d) set up as rechunk's plan of
 * groups on `threads` workers: groups of job_rechunk_group_planes planes, all held at
 * once (t->hold), the destination's pages made a tile row at a time (t->rowwise), each
 * group in min(threads, 16, tile rows) parts (t->split) holding its planes once between
 * them.  Stage A's blocks are then t->ngroups * t->split.  Used by rechunk (plan of
 * groups) and power_spectrum (its staging file, the same store layout). */
struct cube_transpose;
void job_stack_group_plan(struct cube_transpose *t, const dataset *d, int threads);
/* The same with groups of g planes (1..64) in `split` parts (1..16) given, as a job
 * planned again finds them recorded in its work directory. */
void job_stack_group_set(struct cube_transpose *t, long g, long split);
/* Whether g planes a group in `split` parts is a plan of groups job_stack_group_plan could
 * have made for dataset d on some thread count (1 <= g <= min(64, nz), 1 <= split <=
 * min(16, tile rows)): the check of a plan read back from a work directory. */
int job_stack_group_valid(const dataset *d, long g, long split);

#endif
