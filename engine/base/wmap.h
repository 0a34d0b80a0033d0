/* Writing a region of a file through a shared mapping, its pages made up front. */
#ifndef TESSERA_ENGINE_BASE_WMAP_H
#define TESSERA_ENGINE_BASE_WMAP_H

#include <stddef.h>
#include <sys/types.h>

/* A job writing hundreds of MB into its product or work file with pwrite(2) copies
 * every byte once more and, on ext4, holds the inode's lock for each copy, so the
 * workers of a job take turns; written through a mapping, the values go straight into
 * the page cache and the workers write side by side.  The pages of the window are made
 * (faulted in for writing) before it is handed out, with MADV_POPULATE_WRITE where the
 * kernel has it (Linux 5.14): a full disk, a quota or an unwritable file are then an
 * error of tess_wmap_open instead of a SIGBUS in the middle of a loop.  The mapping is
 * registered with mapguard all the same (a file truncated by someone else, a kernel
 * without the advice): a fault makes tess_wmap_close fail.
 *
 * That is for writes of small pieces scattered over the window (a group of planes into
 * every series of a store).  Where a job writes whole runs of tens of KB into a file it
 * makes (the power spectrum's bands), pwrite(2) is the faster: it makes the pages by the
 * copy, where a mapping faults and zeroes each first (spectrum.c gives the figures).
 *
 * The window covers bytes [off, off + len) of the existing regular file `path` (it must
 * already be that long: ftruncate or fallocate it first; nothing here extends it).  The
 * pages may be made a range at a time (tess_wmap_prepare) when only parts of a large
 * window are written. */
typedef struct tess_wmap {
    unsigned char *p;    /* byte `off` of the file: p[0 .. len) are writable */
    size_t len;
    void *base;          /* the mapping (page-aligned, maplen bytes), owned */
    size_t maplen;
    off_t base_off;      /* file offset of base */
    int slot;            /* mapguard slot, or -1 */
    char path[256];      /* for messages */
} tess_wmap;

/* Maps [off, off + len) of `path` for writing (len >= 1).  `populate`: 1 makes every
 * page of the window now, 0 leaves that to tess_wmap_prepare (or to the first write).
 * Returns 0, TESS_EIO (cannot open or map; a page that cannot be made: disk full, I/O
 * error, beyond the end of the file) or TESS_ENOMEM, with err naming the file; on error
 * *m holds nothing to close. */
int tess_wmap_open(const char *path, off_t off, size_t len, int populate, tess_wmap *m,
                   char *err, size_t errlen);

/* Makes the pages of m->p[from .. from + n) (within the window) writable now, as
 * tess_wmap_open with populate does.  Returns 0 or TESS_EIO with err. */
int tess_wmap_prepare(tess_wmap *m, size_t from, size_t n, char *err, size_t errlen);

/* TESS_EIO with err naming the file when a write into the window hit a SIGBUS since
 * tess_wmap_open (mapguard.h: what was written is then not all in the file), else 0; the
 * window stays mapped.  For a window shared by several writers, each of which checks
 * after its writes; tess_wmap_close makes the same check. */
int tess_wmap_check(const tess_wmap *m, char *err, size_t errlen);

/* Unmaps the window (the values written stay in the page cache, to be written back or
 * synced by fsync(2) of the file).  Returns 0, or TESS_EIO with err when a write hit a
 * SIGBUS (what was written is then not all in the file).  Safe on a zeroed struct. */
int tess_wmap_close(tess_wmap *m, char *err, size_t errlen);

#endif
