/* PNG frames of a stack: the header of a greyscale PNG and its samples, decoded whole. */
#ifndef TESSERA_ENGINE_IMAGE_PNGFRAME_H
#define TESSERA_ENGINE_IMAGE_PNGFRAME_H

#include <stddef.h>

/* Whether the n bytes at `sig` start with the 8-byte PNG signature.  1 yes, 0 no. */
int pngframe_sig_ok(const unsigned char *sig, size_t n);

/* The width, height and bits (8, or 16: the samples are unsigned 0..65535; 1/2/4-bit grey
 * counts as 8, expanded as the decode expands it) of the greyscale PNG at `path`, from its
 * chunks up to the first IDAT (ancillary ones skipped unread).  The file is opened with
 * tess_open_regular.  Returns 0 or TESS_EIO (unreadable, malformed) / TESS_EINVAL (not
 * greyscale without alpha: a colour type other than 0) / TESS_ENOMEM, with err. */
int pngframe_header(const char *path, long *w, long *h, int *bits, char *err, size_t errlen);

/* Whether a w x h frame of `bits` 8 or 16 may be decoded (decodelimit_check of its
 * samples, "the PNG frame").  Returns 0 or TESS_ELIMIT with err. */
int pngframe_budget(const char *path, long w, long h, int bits, char *err, size_t errlen);

/* Decodes the whole PNG at `path` into *pix, a malloc'd array (the caller frees it) of
 * nx * ny uint8 (bits 8) or native-endian uint16 (bits 16) samples, row 0 = y = 0 = the
 * LAST row of the file (engine/image/stack.h's orientation), 1/2/4-bit grey expanded to
 * 0..255 (v * 255 / (2^depth - 1)).  Nothing is allocated for the pixels before the size
 * the IHDR declares has passed pngframe_budget.  Non-interlaced 8- and 16-bit frames, the
 * stacks' usual form, are parsed here: the chunks' CRCs of IHDR, IDAT and IEND checked,
 * the concatenated IDAT data inflated at once by libdeflate (zlib stream and Adler-32
 * checked) and unfiltered (all five filter types); any other frame, or one whose stream or
 * chunks are anything but well-formed, is decoded by libpng, so every file decodes to
 * the same samples and fails with the same errors as with libpng alone.  Thread-safe.
 * Returns 0, TESS_ELIMIT (over a budget: nothing decoded), TESS_EIO (unreadable,
 * malformed, truncated), TESS_EINVAL (not greyscale) or TESS_ENOMEM, with err. */
int pngframe_decode(const char *path, void **pix, long *nx, long *ny, int *bits, char *err,
                    size_t errlen);

/* Gives back the pixels of a decode (`bytes`: nx * ny * bits / 8, what the decode made;
 * NULL is ignored) for a later pngframe_decode of the same size to reuse instead of
 * memory the system must fault in and zero again: a stack job holding dozens of decoded
 * frames and freeing them in turn had its decodes write into fresh pages (at 250 frames
 * of 1000 x 1000, every page fault of rechunk).  Up to PNGFRAME_KEEP_BYTES (64 MB) of
 * such buffers are kept, process-wide, the rest freed; freeing the pixels with free()
 * instead is always allowed.  Thread-safe. */
#define PNGFRAME_KEEP_BYTES ((size_t)64 << 20)
void pngframe_release(void *pix, size_t bytes);

/* How many times pngframe_decode was called in this process (a frame decoded, or an
 * attempt that failed): the frames-decoded metric (/metrics), which lets tests see that
 * a route read an ingest store instead of the frames.  Thread-safe. */
unsigned long long pngframe_decodes(void);

/* The same, by libpng alone (benchmarks and tests compare the two). */
int pngframe_decode_libpng(const char *path, void **pix, long *nx, long *ny, int *bits,
                           char *err, size_t errlen);

#endif
