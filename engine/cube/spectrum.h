/* Power spectra along z of every pixel's series: |FFT|^2 with fftw3, block by block, in bounded memory. */
#ifndef TESSERA_ENGINE_CUBE_SPECTRUM_H
#define TESSERA_ENGINE_CUBE_SPECTRUM_H

#include <stddef.h>
#include "engine/cube/transpose.h"

/* P[k] = |sum_n s[n] exp(-2 pi i k n / nz)|^2 for k = 0..nz-1 of a series s of nz
 * physical values (blank values count as 0; no mean removal, no window): what
 * abs(numpy.fft.fft(s))**2 gives, all nz frequencies (P[k] = P[nz - k] for k > nz/2).
 * Computed by fftw3 (real-to-complex, cube_spectrum_fft_batch(nz) series an execution) in
 * double precision, then rounded to float32.  Units: those of the values, squared. */
typedef struct cube_spectrum cube_spectrum;

/* Plans the transforms of series of nz values (2 <= nz <= INT_MAX).  fftw's planner is
 * not thread-safe: plans are made and destroyed here under one lock, so any thread may
 * call this.  Returns 0 and *out (free with cube_spectrum_free), or TESS_ENOMEM with err
 * when no plan can be made. */
int cube_spectrum_new(long nz, cube_spectrum **out, char *err, size_t errlen);

/* The series fftw transforms in one execution for series of nz values (nz >= 1): 32
 * (the batch the series are read and written in) halved until those series' nz doubles
 * and nz / 2 + 1 complex coefficients (about 16 nz bytes a series) fit 512 KB: 32 up to
 * nz = 1023, 16 up to 2047, 8 up to 4095, 1 from 16384; a power of two, 1 to 32.  The
 * spectra do not depend on it (fftw's result for a series does not depend on the number
 * of series a plan transforms: the products of bench/stackbench at 4000 frames are
 * byte-identical with 32, 16 and 8).  Cannot fail. */
long cube_spectrum_fft_batch(long nz);

/* Frees a plan (NULL is ignored).  Thread-safe. */
void cube_spectrum_free(cube_spectrum *sp);

/* The blocks of transpose t's spectra (t->nz = the plan's nz), each holding at most
 * cube_spectrum_set_block_bytes bytes (16 MB by default) of spectra (the planes k = 0 ..
 * nz / 2 of float32, so (nz / 2 + 1) * 4 bytes a pixel: plane nz - k is written from plane
 * k's) whatever nz is, and at least one 16x16 tile's (when nz is large enough that one
 * tile passes the budget); the series are read 32 at a time, 32 * nz * t->es bytes
 * beside them.  Shapes:
 *   whole tile rows when CUBE_TILE rows of nx pixels fit (at most t->band_rows rows);
 *   else part of the rows of one tile row, every column;
 *   else one row of part of the columns (a multiple of CUBE_TILE).
 * Block b is 0-based, < cube_spectrum_nblocks(t). */
long cube_spectrum_nblocks(const cube_transpose *t);

/* Sets the byte budget of one block (0 or less: the default, 16 MB); for tests and
 * benchmarks, before any job plans its blocks.  Not thread-safe. */
void cube_spectrum_set_block_bytes(long bytes);

/* The byte budget of one block now in force (for the jobs' estimates). */
long cube_spectrum_block_bytes(void);

/* The bytes of spectra cube_spectrum_block holds for the largest block of an nx x ny x nz
 * volume of es-byte values transposed for a spectrum (cube_transpose_init with
 * out_bytes_per_value 4), before its rounding to huge pages: rows x columns of the block
 * x (nz / 2 + 1) x 4, at most max(budget, 64 (nz / 2 + 1)) (one row of 16 pixels, the
 * smallest block) under the budget now in force.  For the jobs' estimates; cannot
 * fail. */
size_t cube_spectrum_spectra_bytes(long nx, long ny, long nz, int es);

/* Block `block` of transpose t: its series read from the staging file of stage A or the
 * chunk store t->src_path when t->direct (transpose.h), their spectra written into the
 * float32 FITS cube (nx, ny, nz) at `out_path`, whose data unit starts at byte
 * `datastart`: plane k (frequency index k, in cycles per nz samples) of the block's
 * pixels, big-endian IEEE float32 (FITS 4.0 section 5.2), by pwrite, one run a plane (a
 * run a row of each plane when the block is narrower than a row).  When stage A ran in
 * this process its mapping is read in place (cube_transpose_staged), else the series are
 * read by pread.  Memory, kept by the plan for reuse, one set a worker: the spectra of
 * the largest block (on transparent huge pages, engine/base/hugemem.h), S =
 * tess_huge_bytes(cube_spectrum_spectra_bytes(nx, ny, nz, es)) <= tess_huge_bytes(
 * max(budget, 64 (nz / 2 + 1))); a batch of 32 series as stored, 32 nz es; the FFT's
 * fb = cube_spectrum_fft_batch(nz) series of nz doubles and their nz / 2 + 1 complex
 * coefficients, fb (8 nz + 16 (nz / 2 + 1)); the batch's float32 powers, 128 (nz / 2 +
 * 1).  So at most S + 32 (nz (es + 8) + 20 (nz / 2 + 1)) bytes a worker (fb <= 32; S +
 * 608 nz for 8-bit values, what the jobs' estimates count) whatever the number of
 * pixels, and the plan's fftw plan (O(nz) twiddle factors).  S grows with nz until the block holds the
 * budget (16 rows of nx pixels cannot: nz >= 2 budget / (64 nx)), then stays.
 * Idempotent.  Polls *cancel between batches.  Concurrent calls with one plan are
 * allowed (fftw's new-array execute is thread-safe; the plan keeps the block buffers for
 * reuse under a lock of its own).  Returns 0, TESS_ECANCELED, TESS_ENOMEM, or
 * TESS_EIO (reading the series, writing out_path). */
int cube_spectrum_block(cube_spectrum *sp, const cube_transpose *t, long block,
                        const char *out_path, long long datastart, const volatile int *cancel,
                        char *err, size_t errlen);

#endif
