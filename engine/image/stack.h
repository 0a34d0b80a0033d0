/* Volumes of planes: FITS cubes and stacks of 2-D frames (FITS or PNG), read lazily. */
#ifndef TESSERA_ENGINE_IMAGE_STACK_H
#define TESSERA_ENGINE_IMAGE_STACK_H

#include <stddef.h>
#include <stdint.h>
#include "engine/base/pool.h"
#include "engine/fits/fitsimg.h"

/* Coordinates everywhere here are 0-based pixels in the volume's own axis order:
 * x = column (NAXIS1), y = row (NAXIS2, y = 0 is FITS row 1), z = plane of a cube or
 * frame of a stack (in the order of the `paths` given, which the catalog sorts by name).
 * Values are physical: stored * BSCALE + BZERO, integer pixels equal to BLANK and float
 * NaNs become NaN, exactly as cfitsio's fits_read_pix gives them in double precision.
 *
 * PNG frames (greyscale, 1/2/4/8/16 bits; colour PNGs are refused) hold their stored
 * sample values (0..255 or 0..65535, no scaling) and keep their stored orientation:
 * y = 0 is the LAST row of the PNG file (the bottom of the picture), so that a rendering,
 * which puts y = 0 at the bottom as it does FITS row 1, shows the frame as the PNG shows
 * it, and IIIF regions (top-left origin) are PNG pixel coordinates.  A numpy user sees
 * the array of a PNG frame as numpy.flipud(imread(frame)).
 *
 * TIFF files (engine/image/tiffframe.h: greyscale 8/16-bit unsigned, 16-bit signed,
 * 32-bit float) are read the same way, y = 0 the last TIFF row, values as stored: a
 * single-page file is a frame of a stack (or an image), a multi-page file a cube of its
 * pages.  frame_read_info gives them the header of the FITS image of the same values.
 *
 * Decoding is bounded (engine/base/decodelimit.h): a PNG frame, and a tile-compressed
 * FITS frame of a stack (held whole as doubles), is decoded only once the size its header
 * declares passes decodelimit_check; over it, every read of its pixels fails with
 * TESS_ELIMIT and nothing is allocated.  Its header alone (frame_read_info) is always
 * read.  Ancillary PNG chunks are skipped unread.  A whole-file compressed FITS file
 * (gzip...) is refused with TESS_EINVAL (fitsimg_check_not_compressed). */

/* With `on` (the server sets it at start, for the whole process), frame_read_info,
 * frame_read_region(_f32) and the stack reader refuse, with TESS_EIO, a path that no
 * longer resolves to itself (realpath): the server resolves every dataset path once, checks
 * it against the data roots, and from then on reads only that file, so a file or directory
 * replaced by a symbolic link while it is served is not followed out of the roots.  (A
 * link swapped in between the check and the open is not caught.)  Off by default: the
 * command line reads the paths it is given. */
void frame_set_canonical_only(int on);

/* Whether `path` is a PNG file (by its 8-byte signature).  1 yes, 0 no or unreadable. */
int frame_is_png(const char *path);

/* fitsimg_read_info for a FITS file or a PNG frame.  For a PNG: naxis 2, naxes = width,
 * height, bitpix 8 (bit depth <= 8) or 16 (the samples are unsigned: 0..65535), bscale 1,
 * bzero 0, no BLANK, and a header of the cards SIMPLE, BITPIX, NAXIS, NAXIS1, NAXIS2.
 * `hdu` is ignored for PNG.
 * Returns 0 or TESS_EIO / TESS_EINVAL (not greyscale, malformed) / TESS_ENOMEM. */
int frame_read_info(const char *path, int hdu, fitsimg_info *info, char *err, size_t errlen);

/* Whether the pixels of the frame at `path` may be decoded within the decode budgets: for
 * a PNG frame, the size its IHDR declares (its header alone is read); 0 for a FITS file,
 * whose compression tiles each read checks itself.  For a caller that allocates a buffer
 * for the whole frame before reading it (the plane store), so that a frame that will be
 * refused costs no such allocation.  Returns 0, TESS_ELIMIT, or the errors of
 * frame_read_info, with err. */
int frame_decode_check(const char *path, char *err, size_t errlen);

/* fitsimg_read_region / fitsimg_read_region_f32 for a FITS file or a PNG frame (whose
 * only plane is z = 0).  Same arguments, same errors (TESS_ELIMIT also for a PNG frame
 * over the decode budgets); each call reads the file anew. */
int frame_read_region(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                      double *out, char *err, size_t errlen);
int frame_read_region_f32(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                          float *out, char *err, size_t errlen);

/* The FNV-1a 64 hash (engine/base/hash.h) of the header of HDU `hdu` of the FITS file at
 * `path`: its raw bytes, every 2880-byte header block from the HDU's first card to the
 * block holding END; 0 for a PNG frame (whose header is its shape, checked anyway).
 * Returns 0 or TESS_EIO / TESS_EINVAL (a whole-file compressed file) with err. */
int frame_header_hash(const char *path, int hdu, uint64_t *hash, char *err, size_t errlen);

/* Writes an nx x ny greyscale PNG of `bits` 8 or 16 from `data` (row 0 = y = 0, which
 * goes to the LAST PNG row, the convention above), values clamped to 0..2^bits-1 and
 * rounded.  zlib level `level` (0..9; 1 is fast).  Returns 0 or TESS_EIO / TESS_EINVAL. */
int frame_write_png(const char *path, const unsigned short *data, long nx, long ny, int bits,
                    int level, char *err, size_t errlen);

/* A reader of one volume.  Frames are opened on first use and kept in an LRU of at
 * most `max_open` open frames (mapped FITS files, decoded PNGs), so a stack of any
 * number of files holds a bounded number of descriptors and maps.  An uncompressed FITS
 * HDU is read through mmap(2) (data offset from cfitsio once, big-endian conversion and
 * scaling here); a tile-compressed one through cfitsio.  A file whose identity changed
 * (inode, size, mtime or ctime: tess_file_id, stat(2) at every read) is opened and
 * mapped again, so a file renamed over or rewritten in place is read anew even when it
 * kept its size and mtime; a FITS file truncated while mapped gives TESS_EIO, not SIGBUS
 * (engine/base/mapguard.h).  A path that is not a regular file is refused (TESS_EIO),
 * never opened in a way that could block (tess_open_regular).
 * Thread-safe: any number of threads may read at once. */
typedef struct stack stack;

/* Opens a volume of nx x ny x nz pixels: a cube when npaths == 1 (nz planes of HDU
 * `hdu` of paths[0]), a stack when npaths == nz (one 2-D frame per path).  The shape is
 * what the caller already read (frame_read_info); files are only opened when read.
 * `paths` is copied.  The volume's nx x ny x nz values as doubles must fit in
 * TESS_SIZE_MAX bytes (engine/base/checked.h), so that no offset or size the reader
 * computes from them overflows.  Returns NULL on allocation failure or inconsistent
 * arguments (a size below 1, npaths neither 1 nor nz, a volume past that bound). */
stack *stack_new(const char *const *paths, int npaths, int hdu, long nx, long ny, long nz,
                 int max_open);

/* Pins the headers of the volume's files: hashes[i] (copied; npaths of them) is the
 * frame_header_hash of paths[i] as the caller read it (0: not checked).  From then on a
 * file opened again (its identity changed) whose header hash differs is refused: its
 * reads fail with TESS_EIO, "the header of PATH changed since it was opened", so new
 * pixels are never read under an old header.  Call before any read.  Returns 0 or
 * TESS_ENOMEM. */
int stack_expect_headers(stack *s, const uint64_t *hashes);

/* Pins the bit depth of the volume's PNG and TIFF frames: `bitpix` is what
 * frame_read_info gave every frame when the caller opened the volume (8 or 16; -32 for a
 * float TIFF), 0 not to check.  From then on such a frame opened again (its identity
 * changed) of another depth is refused before it is decoded: its reads fail with TESS_EIO,
 * "frame PATH is now BITPIX B, not the stack's BITPIX A" (a FITS frame's BITPIX is part
 * of its header: stack_expect_headers).  A PNG frame's size and depth are read from its
 * header, so a frame replaced by one of another size is refused undecoded too.  Call
 * before any read.  Cannot fail. */
void stack_expect_bitpix(stack *s, int bitpix);

/* Unmaps and closes everything.  No read may be running.  NULL is ignored. */
void stack_free(stack *s);

/* Reads the w x h region at (x0, y0) of plane z: out[j * w + i] = v(x0 + i, y0 + j, z).
 * All reads return 0, or TESS_ERANGE (outside the volume), TESS_EIO (file missing,
 * changed shape, unreadable: `err` says which), TESS_EINVAL (a whole-file compressed
 * FITS file), TESS_ELIMIT (a frame or tile over the decode budgets), TESS_ENOMEM. */
int stack_read_region(stack *s, long z, long x0, long y0, long w, long h, double *out,
                      char *err, size_t errlen);

/* The xz cut at row y: out[k * w + i] = v(x0 + i, y, z0 + k), k < h (h planes). */
int stack_read_xz(stack *s, long y, long x0, long z0, long w, long h, double *out,
                  char *err, size_t errlen);

/* The yz cut at column x: out[k * w + j] = v(x, y0 + j, z0 + k), j < w, k < h. */
int stack_read_yz(stack *s, long x, long y0, long z0, long w, long h, double *out,
                  char *err, size_t errlen);

/* The series at pixel (x, y): out[k] = v(x, y, z0 + k), k < n. */
int stack_read_series(stack *s, long x, long y, long z0, long n, double *out,
                      char *err, size_t errlen);

/* How the cuts below (stack_read_xz_on, _yz_on, _series_on) read the frames of a stack
 * of files (npaths > 1: each frame a file, decoded whole when compressed): `workers` NULL
 * reads them one after another on the calling thread; else the calling thread and up to
 * pool_threads(workers) - 1 helper tasks queued at `prio` take frames in z order from a
 * shared counter, each reading its frame's part straight into `out`, so N compressed
 * frames cost about N decodes / threads.  The caller takes part and never waits on a
 * helper that has not started, so it may run in one of the pool's own tasks.  Each thread
 * holds one frame at a time (beyond the LRU's bounds: at most one decoded frame per
 * thread).  A volume of one file (a cube) is always read on the calling thread (mapped:
 * no decoding to share).  `cancel` (may be NULL) is polled before each frame: once it is
 * nonzero the read stops with TESS_ECANCELED.  On errors the read stops; the error
 * returned (code and `err`) is that of the lowest failing frame, as in z order. */
typedef struct stack_cut_opts {
    pool *workers;
    pool_priority prio;
    const volatile int *cancel;
} stack_cut_opts;

/* stack_read_xz / _yz / _series under `o` (NULL: as the plain calls, which read on the
 * calling thread alone).  Same arguments and errors, plus TESS_ECANCELED. */
int stack_read_xz_on(stack *s, const stack_cut_opts *o, long y, long x0, long z0, long w,
                     long h, double *out, char *err, size_t errlen);
int stack_read_yz_on(stack *s, const stack_cut_opts *o, long x, long y0, long z0, long w,
                     long h, double *out, char *err, size_t errlen);
int stack_read_series_on(stack *s, const stack_cut_opts *o, long x, long y, long z0, long n,
                         double *out, char *err, size_t errlen);

/* Bytes of stored pixel data of the whole volume (nx ny nz |BITPIX|/8, with the BITPIX
 * of the first file; PNG as 8 or 16 bits).  0 when unknown (first file unreadable). */
unsigned long long stack_data_bytes(stack *s);

typedef struct stack_stats {
    unsigned long long opens;    /* frames (files) opened: mapped, decoded or via cfitsio */
    unsigned long long hits;     /* reads served by an already open frame */
    int open_now;                /* frames open at this moment */
    size_t decoded_now;          /* bytes of decoded frames (PNG, compressed FITS) in memory
                                    now: in the LRU, or out of it but still held by a read */
    size_t decoded_peak;         /* the most decoded_now has been */
    size_t zr_held_peak;         /* the most decoded bytes one stack_zreduce chunk held at
                                    once (below its bound plus one frame) */
} stack_stats;

/* Counters since stack_new.  Cannot fail. */
void stack_get_stats(stack *s, stack_stats *st);

/* A plane held open for direct reads of its stored bytes (rechunk, reductions).  While
 * held (until stack_plane_release) the frame stays mapped even if the LRU drops it. */
typedef struct stack_plane {
    void *frame_;              /* private */
    const unsigned char *u8;   /* nx*ny uint8 values (row y at u8 + y*nx) when the frame
                                  stores exactly the physical values as uint8: an
                                  uncompressed BITPIX 8 FITS plane without BLANK, BSCALE 1,
                                  BZERO 0, or an 8-bit PNG; else NULL (read the plane
                                  with stack_read_region) */
} stack_plane;

/* Holds plane z (0 <= z < nz).  Returns 0, TESS_ERANGE or a read error (TESS_EIO...). */
int stack_plane_hold(stack *s, long z, stack_plane *p, char *err, size_t errlen);
/* Releases a held plane (a released or zeroed p is ignored).  Returns 1 when the file
 * was truncated under the map while held (engine/base/mapguard.h: what was read through
 * u8 may be zeros, not the file's; fail with TESS_EIO), else 0. */
int stack_plane_release(stack *s, stack_plane *p);

/* ---- reductions along z ------------------------------------------------------------ */

/* The kernels; engine/image/zreduce.h builds on them the op names, the z-ranges, the image
 * along z on a pool, the value of each plane and the result's header. */

/* NaN-aware reductions of planes z0..z1-1 at every pixel, as numpy's nansum / nanmean /
 * nanmin / nanmax / nanstd (ddof 0) along axis 0 of the (nz, ny, nx) array of physical
 * values: blanks (BLANK, NaN) are skipped; a pixel without values gives NaN (0 for sum).
 *
 * The work is a "partial" (stack_zpart) over a range of planes; partials of adjacent or
 * any ranges merge (stack_zpart_merge), so a reduction can be split over threads or job
 * blocks by z-range, each frame then being opened and read by one reader only.
 *
 * Two accumulation modes, chosen per range from the frames themselves:
 *  - integer: every frame of the range is an uncompressed FITS image of BITPIX 8 or 16
 *    without BLANK, with BSCALE 1 and an integer BZERO (the same for all; e.g. 32768 for
 *    unsigned 16-bit), or a PNG frame.  Stored values are folded straight from the
 *    mapping (no conversion to double): sums and sums of squares in exact 64-bit
 *    integers, min/max in the stored type, BZERO applied once at the end.  Sum, mean,
 *    min and max are then bit-identical to the double mode (whose sums of integers are
 *    exact below 2^53); std is sqrt((n*S2 - S1^2) / n^2) with the numerator an exact
 *    128-bit integer, so its relative error is at most about 2 ulp (numpy's float64
 *    two-pass nanstd differs from it by its own rounding, below 1e-14 relative).
 *  - double: anything else (floats with NaN, BLANK, scaled integers, BITPIX 32/64,
 *    compressed frames): values converted as stack_read_region gives them; sums in
 *    double, std by Welford's update per pixel, partials merged by Chan et al.'s formula.
 * A range whose frames change kind midway goes on in double mode (the integer sums so
 * far are converted exactly).  The integer mode reads uncompressed FITS frames with
 * pread(2) of 64 Ki pixels into a small buffer (not through the map: no page-table work
 * per page), folds chunks of 256 frames into narrow sums (uint16 for 8-bit frames) and
 * widens them once 256 frames are in them; a range of at most 256 8-bit frames keeps
 * them narrow, also in the saved partial.  A chunk holds its frames while folding them,
 * so it ends early (at least one frame) once its decoded frames (PNG, compressed FITS:
 * heap copies, unlike maps) pass 16 MB, the next chunk going on in the same narrow sums:
 * a thread then holds at most 16 MB plus a frame of them beyond the LRU's own bounds,
 * whatever the number of frames (not 256 frames: 2 GB of 2000x2000 16-bit PNG).
 * Data missing from the page cache is queued 64 frames ahead (MADV_WILLNEED).  The
 * double mode folds 64 mapped frames at a time over blocks of pixels, the frames given
 * madvise(MADV_WILLNEED) first.  A file replaced while its frame is open is read through
 * the frame's map; one truncated while read gives TESS_EIO. */
typedef enum {
    STACK_ZOP_MEAN = 0, STACK_ZOP_SUM, STACK_ZOP_MIN, STACK_ZOP_MAX, STACK_ZOP_STD
} stack_zop;

#define STACK_ZR_FORCE_DOUBLE 1   /* flag: never use the integer mode (tests, comparisons) */

typedef struct stack_zpart stack_zpart;

/* Folds planes [z0, z1) (0 <= z0 < z1 <= nz) into a new partial *out (nx*ny pixels).
 * `cancel` (may be NULL) is polled every 64 planes.  Returns 0, TESS_ERANGE,
 * TESS_ECANCELED, TESS_ENOMEM or a read error (TESS_EIO with err). */
int stack_zreduce(stack *s, stack_zop op, long z0, long z1, int flags,
                  const volatile int *cancel, stack_zpart **out, char *err, size_t errlen);

/* Folds `from` (same op and pixel count) into `into`, as if `into`'s planes were followed
 * by `from`'s.  Returns 0, TESS_EINVAL (different op / size) or TESS_ENOMEM. */
int stack_zpart_merge(stack_zpart *into, const stack_zpart *from);

/* The result: out[y * nx + x] (npix doubles).  1 when the partial is in integer mode. */
int stack_zpart_result(const stack_zpart *p, double *out);

/* Writes the partial to `path` (created or truncated, write(2)) / reads it back.
 * Returns 0, TESS_EIO or TESS_ENOMEM (read: TESS_EINVAL when not a partial). */
int stack_zpart_save(const stack_zpart *p, const char *path, char *err, size_t errlen);
int stack_zpart_load(const char *path, stack_zpart **out, char *err, size_t errlen);

/* The reduction of plane z over all its nx*ny pixels (as numpy's nan-function of the
 * plane) into *out, done in exact integers when the plane is read by the integer mode
 * above: sum, mean, min, max then equal the double computation exactly and std is
 * sqrt(n*S2 - S1^2)/n from exact 128-bit integers.  Returns 0, 1 when the plane is of
 * another kind (nothing done: reduce stack_read_region's values instead), TESS_ERANGE
 * or a read error. */
int stack_reduce_plane(stack *s, long z, stack_zop op, double *out, char *err, size_t errlen);

void stack_zpart_free(stack_zpart *p);   /* NULL is ignored */

/* Tests and benchmarks: the bound of decoded bytes a stack_zreduce chunk holds (16 MB;
 * 0 restores it), for the reductions started after the call.  A chunk also stops at 16
 * decoded frames whatever their size, so a reduction's frames take at most
 * min(16 frames, bound + one frame) a thread, independent of the frame count. */
void stack_set_zr_chunk_bytes(stack *s, size_t bytes);
#define STACK_ZR_HOLD_FRAMES 16   /* that bound in frames (engine/image/stack_int.h) */

/* The most bytes the LRU of `s` keeps of decoded frames (PNG, TIFF, tile-compressed FITS
 * frames of a stack: heap copies) when each takes frame_bytes: min(max_open, files)
 * frames, at most the decoded bound (256 MB) plus one frame.  Frames a read holds
 * (stack_plane_hold) may stay in memory beyond it, dropped from the LRU: they are the
 * reader's.  For estimates of the memory a job adds; cannot fail. */
double stack_cache_bound(const stack *s, double frame_bytes);

#endif
