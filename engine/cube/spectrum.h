/* Power spectra along z of every pixel's series: |FFT|^2 with fftw3, band by band. */
#ifndef TESSERA_ENGINE_CUBE_SPECTRUM_H
#define TESSERA_ENGINE_CUBE_SPECTRUM_H

#include <stddef.h>
#include "engine/cube/transpose.h"

/* P[k] = |sum_n s[n] exp(-2 pi i k n / nz)|^2 for k = 0..nz-1 of a series s of nz
 * physical values (blank values count as 0; no mean removal, no window): what
 * abs(numpy.fft.fft(s))**2 gives, all nz frequencies (P[k] = P[nz - k] for k > nz/2).
 * Computed by fftw3 (real-to-complex, batches of 32 series) in double precision, then
 * rounded to float32.  Units: those of the values, squared. */
typedef struct cube_spectrum cube_spectrum;

/* Plans the transforms of series of nz values (2 <= nz <= INT_MAX).  fftw's planner is
 * not thread-safe: plans are made and destroyed here under one lock, so any thread may
 * call this.  Returns 0 and *out (free with cube_spectrum_free), or TESS_ENOMEM with err
 * when no plan can be made. */
int cube_spectrum_new(long nz, cube_spectrum **out, char *err, size_t errlen);

/* Frees a plan (NULL is ignored).  Thread-safe. */
void cube_spectrum_free(cube_spectrum *sp);

/* Band `band` of transpose t (t->nz = the plan's nz): its series gathered by
 * cube_transpose_band, their spectra written into the float32 FITS cube (nx, ny, nz) at
 * `out_path`, whose data unit starts at byte `datastart`: plane k (frequency index k, in
 * cycles per nz samples) of rows [band * band_rows, ...) of the band, big-endian IEEE
 * float32 (FITS 4.0 section 5.2), one pwrite per plane.  Idempotent.  Polls *cancel
 * between batches.  Concurrent calls with one plan are allowed (fftw's new-array execute
 * is thread-safe; the plan keeps the band buffers for reuse under a lock of its own).  Returns 0, TESS_ECANCELED, TESS_ENOMEM, or TESS_EIO (reading the
 * series, writing out_path). */
int cube_spectrum_band(cube_spectrum *sp, const cube_transpose *t, long band,
                       const char *out_path, long long datastart, const volatile int *cancel,
                       char *err, size_t errlen);

#endif
