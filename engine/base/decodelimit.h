/* Decode budgets: the most bytes and pixels that one decoded or decompressed input may take. */
#ifndef TESSERA_ENGINE_BASE_DECODELIMIT_H
#define TESSERA_ENGINE_BASE_DECODELIMIT_H

#include <stddef.h>

/* The budgets in force until decodelimit_set: 1024 MiB and 2^28 pixels (16384^2), above
 * every frame and tile of the demo data and tests by orders of magnitude. */
#define DECODELIMIT_DEFAULT_MB 1024ULL
#define DECODELIMIT_DEFAULT_PIXELS (1ULL << 28)

/* A decoder is code that turns a small stored form into a large one held whole in
 * memory: a PNG frame decoded into its samples (engine/image/stack_frames.c), a compressed
 * stack frame converted to doubles, one tile of a tile-compressed (fpack) FITS image,
 * which cfitsio decompresses whole (engine/fits/fitsimg.c).  Such a form can be a
 * thousand times its file (a 900 KB PNG of 30000 x 30000 zeros), so each decoder asks
 * decodelimit_check with the shape the stored header declares BEFORE it allocates or
 * decompresses anything.  Reads of uncompressed FITS (memory-mapped, or read a region at
 * a time) are not decodes: they are bounded by the caller's own buffers.
 *
 * Sets the process-wide budgets: at most `max_bytes` bytes (> 0) and `max_pixels`
 * pixels (> 0) for one decoded input, and the names a refusal gives them (the server's
 * configuration keys, "limits.max_decoded_mb"; the command line's options), copied, at
 * most 63 characters; NULL keeps the current name (at first "the decoded-bytes budget",
 * "the input-pixels budget").  Thread-safe: decodes started afterwards see the new
 * budgets.  Cannot fail. */
void decodelimit_set(unsigned long long max_bytes, unsigned long long max_pixels,
                     const char *bytes_name, const char *pixels_name);

/* The budgets now in force (either pointer may be NULL).  Cannot fail. */
void decodelimit_get(unsigned long long *max_bytes, unsigned long long *max_pixels);

/* Whether decoding `what` (a phrase naming the thing, "the PNG frame") of the file at
 * `path` into nx x ny x nz pixels (nz = 1 for 2-D; a dimension below 1 counts as 1) of
 * `esize` bytes each fits both budgets.  Returns 0, or TESS_ELIMIT with err naming the
 * shape, what it needs, the budget with its name and, last (the part a short buffer may
 * cut), the file: "the PNG frame is 30000 x 30000 pixels (900000000), more than
 * limits.max_input_pixels = 268435456 may be decoded: /data/f.png".  No arithmetic here
 * can overflow, whatever the dimensions. */
int decodelimit_check(const char *what, const char *path, long long nx, long long ny,
                      long long nz, size_t esize, char *err, size_t errlen);

#endif
