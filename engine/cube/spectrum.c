/* Power spectra along z of every pixel's series (spectrum.h); fftw3 stands only here. */
#include "engine/cube/spectrum.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/wmap.h"
#include "engine/image/chunkstore.h"

#include <errno.h>
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FFT_BATCH 32   /* series per fftw execution */

struct cube_spectrum {
    fftw_plan plan;    /* r2c of FFT_BATCH series of nz values */
    long nz;
};

static pthread_mutex_t fftw_plan_lock = PTHREAD_MUTEX_INITIALIZER;

static long lmin(long a, long b) { return a < b ? a : b; }

int cube_spectrum_new(long nz, cube_spectrum **out, char *err, size_t errlen)
{
    *out = NULL;
    cube_spectrum *sp = calloc(1, sizeof *sp);
    if (!sp) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int n = (int)nz;
    sp->nz = nz;
    double *in = fftw_malloc(sizeof(double) * (size_t)n * FFT_BATCH);
    fftw_complex *o = fftw_malloc(sizeof(fftw_complex) * (size_t)(n / 2 + 1) * FFT_BATCH);
    pthread_mutex_lock(&fftw_plan_lock);
    if (in && o)
        sp->plan = fftw_plan_many_dft_r2c(1, &n, FFT_BATCH, in, NULL, 1, n, o, NULL, 1,
                                           n / 2 + 1, FFTW_ESTIMATE);
    pthread_mutex_unlock(&fftw_plan_lock);
    fftw_free(in);
    fftw_free(o);
    if (!sp->plan) {
        free(sp);
        tess_seterr(err, errlen, "cannot plan an FFT of %d values", n);
        return TESS_ENOMEM;
    }
    *out = sp;
    return 0;
}

void cube_spectrum_free(cube_spectrum *sp)
{
    if (!sp)
        return;
    pthread_mutex_lock(&fftw_plan_lock);
    fftw_destroy_plan(sp->plan);
    pthread_mutex_unlock(&fftw_plan_lock);
    free(sp);
}

/* The bytes of `f` in FITS order (big-endian), as a word to store in native order. */
static uint32_t be_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    const unsigned char b[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16),
                                (unsigned char)(u >> 8), (unsigned char)u};
    memcpy(&u, b, 4);
    return u;
}
int cube_spectrum_band(const cube_spectrum *sp, const cube_transpose *t, long band,
                       const char *out_path, long long datastart, const volatile int *cancel,
                       char *err, size_t errlen)
{
    long nz = t->nz, nh = nz / 2 + 1;
    long rows = lmin(t->band_rows, t->ny - band * t->band_rows);
    unsigned char *buf = malloc((size_t)rows * t->nx * nz * t->es);
    /* The band's part of every plane of the cube, written in place through one mapping
     * from its first value in plane 0 to its last in plane nz - 1 (engine/base/wmap.h):
     * run k (rows * nx values) starts at k * ny * nx values; the pages between runs
     * belong to other bands and are neither made nor touched here. */
    const size_t run = (size_t)rows * t->nx * 4, plane_stride = (size_t)t->ny * t->nx * 4;
    long y0 = band * t->band_rows;
    tess_wmap m;
    int rc = tess_wmap_open(out_path, (off_t)(datastart + (long long)y0 * t->nx * 4),
                            (size_t)(nz - 1) * plane_stride + run, 0, &m, err, errlen);
    if (rc) {
        free(buf);
        return rc;
    }
    for (long k = 0; k < nz && !rc; k++)
        rc = tess_wmap_prepare(&m, (size_t)k * plane_stride, run, err, errlen);
    unsigned char *out = m.p;   /* [k][row][x], big-endian floats, planes plane_stride apart */
    double *in = fftw_malloc(sizeof(double) * (size_t)nz * FFT_BATCH);
    fftw_complex *spec = fftw_malloc(sizeof(fftw_complex) * (size_t)nh * FFT_BATCH);
    uint32_t *pw = malloc(sizeof *pw * (size_t)nh * FFT_BATCH);
    long p0 = 0, p1 = 0;
    if (!rc && (!buf || !in || !spec || !pw)) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
    }
    if (!rc)
        rc = cube_transpose_band(t, band, buf, &p0, &p1, cancel, err, errlen);
    for (long i0 = p0; i0 < p1 && !rc; i0 += FFT_BATCH) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long nb = lmin(FFT_BATCH, p1 - i0);
        for (long j = 0; j < FFT_BATCH; j++) {
            double *dst = in + j * nz;
            if (j >= nb) {
                memset(dst, 0, sizeof(double) * (size_t)nz);
                continue;
            }
            chunkstore_decode(t->dt, buf + (size_t)(i0 - p0 + j) * nz * t->es, dst, nz);
            for (long z = 0; t->dt == CS_F32 && z < nz; z++)   /* integers are finite */
                dst[z] = isfinite(dst[z]) ? dst[z] : 0.0;
        }
        fftw_execute_dft_r2c(sp->plan, in, spec);
        /* |X[h]|^2 of the batch's series once per h < nh, as big-endian floats, bin-major
         * (pw[h][j]): plane k takes bin min(k, nz - k), |X[nz-k]| = |X[k]| for a real
         * series. */
        for (long j = 0; j < nb; j++) {
            const fftw_complex *c = spec + j * nh;
            for (long h = 0; h < nh; h++)
                pw[h * FFT_BATCH + j] = be_bits((float)(c[h][0] * c[h][0] + c[h][1] * c[h][1]));
        }
        /* The batch is whole rows of one 16x16 store tile (perm), so its pixels make a few
         * runs of adjacent values in every plane of the band: each plane gets them as a few
         * copies, not one scattered store per pixel (a pixel-major scatter over nz planes
         * was 70% of this function; a value-by-value one over the batch, 9% of the CPU of
         * rechunk and both spectra on 2000 frames of 1000 x 1000, `perf`). */
        long run0[FFT_BATCH], runn[FFT_BATCH], nrun = 0;
        size_t off[FFT_BATCH];
        for (long j = 0; j < nb; j++) {
            uint32_t pix = t->perm[i0 + j];
            off[j] = ((size_t)(pix / t->nx - y0) * (size_t)t->nx + pix % t->nx) * 4;
            if (j > 0 && off[j] == off[j - 1] + 4) {
                runn[nrun - 1]++;
            } else {
                run0[nrun] = j;
                runn[nrun++] = 1;
            }
        }
        for (long k = 0; k < nz; k++) {
            const uint32_t *src = pw + (k < nh ? k : nz - k) * FFT_BATCH;
            unsigned char *plane = out + (size_t)k * plane_stride;
            for (long r = 0; r < nrun; r++)
                memcpy(plane + off[run0[r]], src + run0[r], (size_t)runn[r] * 4);
        }
    }
    int crc = tess_wmap_close(&m, rc ? NULL : err, rc ? 0 : errlen);
    if (!rc)
        rc = crc;
    free(buf);
    free(pw);
    fftw_free(in);
    fftw_free(spec);
    return rc;
}
