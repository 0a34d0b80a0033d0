/* The stack's private parts: the open frame, the stack and the functions its files share (as SQLite's vdbeInt.h). */
#ifndef TESSERA_ENGINE_IMAGE_STACK_INT_H
#define TESSERA_ENGINE_IMAGE_STACK_INT_H

/* Only the files of the stack include this header: stack.c (frame dispatch, PNG writer),
 * stack_frames.c (the open-frame LRU), stack_read.c (conversion, boxes and cuts) and
 * zreduce_kernels.c (the reductions along z and their partials on disk).  Everything
 * else goes through engine/image/stack.h. */

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "engine/base/fileio.h"
#include "engine/base/lru.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"

/* Decoded frames (PNG, compressed FITS) held at most, in bytes, besides the max_open
 * bound: keeps a stack of large 16-bit frames from holding gigabytes. */
#define STACK_MAX_DECODED_BYTES ((size_t)256 << 20)

/* Decoded frames one z-reduction chunk holds at most, in bytes, plus one frame
 * (stack_zreduce): a chunk of up to ZR_CHUNK frames ends early once the decoded frames it
 * acquired (PNG, compressed FITS: heap copies, pinned while held even when the LRU above
 * has dropped them) pass it.  Mapped FITS frames count nothing (their pages are the page
 * cache's).  256 decoded 2000x2000 16-bit PNG frames were 2 GB a reader thread; 16 MB is
 * 2 of them, or 16 of 1000x1000 8-bit frames (one ZR_GROUP of reads).  Chunks cut short
 * go on in the same narrow sums (up to 256 frames), so the bound costs no extra flush:
 * 1000 PNG frames of 1000x1000, the reduce job along z, 2 threads, 4 alternated runs:
 * 2.45-2.74 s of CPU at 64 MB, 2.47-2.50 s at 16 MB; page faults 76-80 k, 49-64 k; the
 * decoded frames' peak 119 MB, 62 MB (the frame cache's 64 frames, as at 250 frames);
 * peak RssAnon 134-145 MB, 102-109 MB. */
#define ZR_CHUNK_BYTES ((size_t)16 << 20)
/* ... and at most this many decoded frames, whatever their size: 16 MB was 256 frames of
 * 256 x 256, so the peak grew with the frame count up to that (bench/stack's flatness
 * pass: RssAnon of the mean along z 7.3 MB at 250 frames, 34.7-36.1 MB at 4000), and
 * folding 16 frames at a time costs no more (4000 frames of 256 x 256, 2 threads,
 * alternated: 0.82-0.86 s of CPU at 256 frames a chunk, 0.74-0.79 s at 16). */
#define ZR_HOLD_FRAMES STACK_ZR_HOLD_FRAMES

typedef enum { SRC_MMAP, SRC_MEM8, SRC_MEM16, SRC_MEMF64, SRC_CFITSIO, SRC_TIFF } src_kind;

/* One open file of the volume: a mapping of an uncompressed FITS file, a decoded frame
 * in memory (PNG, an 8/16-bit unsigned TIFF frame, or a compressed FITS frame), a cfitsio
 * fallback for compressed cubes, or a TIFF file read through libtiff at each read (the
 * pages of a multi-page file, signed or float frames). */
typedef struct frame {
    long idx;                 /* index into s->paths */
    src_kind kind;
    int refs;                 /* readers using it now (under s->lock) */
    int dead;                 /* evicted while in use: freed by the last release */
    lru_node lru;             /* LRU list, most recently used first */
    struct frame *close_next; /* next on a local list of frames to close (close_chain) */
    void *map;                /* SRC_MMAP: the whole file */
    size_t maplen;
    const unsigned char *data;/* SRC_MMAP: first byte of the HDU's data */
    int bitpix;
    double bscale, bzero;
    int has_blank;
    long long blank;
    void *pix;                /* SRC_MEM*: nx*ny values, row 0 = y 0 */
    size_t pixbytes;
    int png;                  /* pix is a pngframe_decode's (given back by pngframe_release) */
    tess_file_id id;          /* of the file when opened (stat(2) before reading it) */
    long long datastart;      /* SRC_MMAP: file offset of `data` */
    double checked;           /* monotonic seconds of the last staleness check */
    int guard;                /* SRC_MMAP: mapguard slot of the map, or -1 */
    tiffframe *tif;           /* SRC_TIFF: the open file */
} frame;

struct stack {
    char **paths;
    int npaths;
    int hdu;
    long nx, ny, nz;
    int max_open;
    pthread_mutex_t lock;
    frame **table;            /* by path index, NULL when not open */
    lru_list lru;             /* the open frames, most recently used first */
    int nopen;
    size_t decoded_bytes;     /* of the frames in the LRU (STACK_MAX_DECODED_BYTES) */
    size_t live_bytes;        /* of every decoded frame in memory: in the LRU, or dropped
                                 from it but still held by a reader */
    size_t live_peak;         /* highest live_bytes */
    size_t zr_chunk_bytes;    /* ZR_CHUNK_BYTES, or stack_set_zr_chunk_bytes's */
    size_t zr_held_peak;      /* most decoded bytes one z-reduction chunk held */
    unsigned long long opens, hits;
    unsigned long long data_bytes; /* 0 = not computed yet */
    uint64_t *header_hash;    /* per path, frame_header_hash when the dataset was opened
                                 (0: not checked), or NULL (stack_expect_headers) */
    int bitpix;               /* of every PNG or TIFF frame (0: not checked;
                                 stack_expect_bitpix) */
};

/* ---- big-endian stored values (FITS) ---- */

static inline uint16_t be16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* ---- stack.c ---- */

/* Under frame_set_canonical_only(1): 0 when realpath(path) is path itself (or the file is
 * missing: its opening reports that), else TESS_EACCES with err.  0 otherwise. */
int stack_path_guard(const char *path, char *err, size_t errlen);

/* ---- stack_frames.c: the open-frame LRU ---- */

/* Whether `st` (of a descriptor opened anew on the path) is the file that frame `f`
 * read: the same identity (inode, size, mtime, ctime).  Cannot fail. */
int stack_same_file(const frame *f, const struct stat *st);
/* The open frame of file `idx` with a reference for the caller (stack_frame_release it).
 * Returns 0, or TESS_EIO / TESS_EINVAL / TESS_ENOMEM / TESS_EACCES with err. */
int stack_frame_acquire(stack *s, long idx, frame **out, char *err, size_t errlen);
/* Drops the caller's reference.  Returns 1 when the frame's map took a SIGBUS (the file
 * was truncated while mapped: what was read from it is not the file's), else 0; the
 * caller then fails its read with stack_frame_fault_error. */
int stack_frame_release(stack *s, frame *f);
/* Sets err to "the file of frame idx was truncated while being read"; returns TESS_EIO. */
int stack_frame_fault_error(stack *s, long idx, char *err, size_t errlen);

/* ---- stack_read.c: conversion and boxes ---- */

/* Converts n pixels of `f` starting at element `off` of its data, `stride` elements
 * apart, into out[0..n-1], as cfitsio does: v * BSCALE + BZERO (not applied when they
 * are 1 and 0), BLANK -> NaN for integers.  Cannot fail. */
void stack_convert_run(const frame *f, size_t off, size_t n, size_t stride, double *out);
/* The box (x0, y0, w, h) of plane zf of frame f into out (row-major w x h).  Returns 0
 * or the error of the cfitsio or libtiff read, with err. */
int stack_frame_box(stack *s, frame *f, long zf, long x0, long y0, long w, long h, double *out,
                    char *err, size_t errlen);
/* File index and plane inside it of plane z.  Cannot fail. */
void stack_locate(const stack *s, long z, long *idx, long *zf);
/* The frame that holds plane z, acquired (stack_frame_release it), with the file index
 * and the plane inside the file.  TESS_ERANGE for z outside the stack, else
 * stack_frame_acquire's codes. */
int stack_plane_frame(stack *s, long z, frame **f, long *idx, long *zf, char *err,
                      size_t errlen);

#endif
