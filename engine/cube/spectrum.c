/* Power spectra along z of every pixel's series (spectrum.h); fftw3 stands only here. */
#include "engine/cube/spectrum.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/image/chunkstore.h"

#include <errno.h>
#include <fcntl.h>
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FFT_BATCH 32   /* series per fftw execution */
#define POOL_MAX 16    /* band buffers kept for reuse (one a worker) */

/* The memory of one band: its series as stored, and its spectra as they go to the file
 * ([k][row][x], big-endian float32). */
typedef struct band_mem {
    unsigned char *series;
    unsigned char *spectra;
    size_t series_len, spectra_len;
} band_mem;

struct cube_spectrum {
    fftw_plan plan;    /* r2c of FFT_BATCH series of nz values */
    long nz;
    /* Band buffers are tens of MB (beyond glibc's mmap threshold): freed after each band,
     * every band would take fresh pages from the kernel, zeroed (and on a VM, faulted in
     * on the host too).  Kept here between bands, until cube_spectrum_free. */
    pthread_mutex_t lock;
    band_mem pool[POOL_MAX];
    int npool;
    /* One band writes at a time: two writers of one file take turns on ext4's inode lock
     * anyway, and spinning on it (13% of the CPU) made two writers slower than one:
     * bench/cubewrite, 8 GB, 2 threads, 24.0-25.5 s both writing against 17.2-21.1 s one
     * band at a time (the other computing meanwhile). */
    pthread_mutex_t write_lock;
};

static pthread_mutex_t fftw_plan_lock = PTHREAD_MUTEX_INITIALIZER;

static long lmin(long a, long b) { return a < b ? a : b; }

/* A band's buffers of at least the sizes given, from the pool or new; 0 or TESS_ENOMEM. */
static int band_mem_get(cube_spectrum *sp, size_t series_len, size_t spectra_len, band_mem *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_lock(&sp->lock);
    if (sp->npool > 0)
        *b = sp->pool[--sp->npool];
    pthread_mutex_unlock(&sp->lock);
    if (b->series_len < series_len) {
        free(b->series);
        b->series = malloc(series_len);
        b->series_len = b->series ? series_len : 0;
    }
    if (b->spectra_len < spectra_len) {
        free(b->spectra);
        b->spectra = malloc(spectra_len);
        b->spectra_len = b->spectra ? spectra_len : 0;
    }
    return b->series && b->spectra ? 0 : TESS_ENOMEM;
}

static void band_mem_put(cube_spectrum *sp, band_mem *b)
{
    pthread_mutex_lock(&sp->lock);
    if (sp->npool < POOL_MAX) {
        sp->pool[sp->npool++] = *b;
        b = NULL;
    }
    pthread_mutex_unlock(&sp->lock);
    if (b) {
        free(b->series);
        free(b->spectra);
    }
}

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
    pthread_mutex_init(&sp->lock, NULL);
    pthread_mutex_init(&sp->write_lock, NULL);
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
        pthread_mutex_destroy(&sp->lock);
        pthread_mutex_destroy(&sp->write_lock);
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
    for (int i = 0; i < sp->npool; i++) {
        free(sp->pool[i].series);
        free(sp->pool[i].spectra);
    }
    pthread_mutex_destroy(&sp->lock);
    pthread_mutex_destroy(&sp->write_lock);
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
int cube_spectrum_band(cube_spectrum *sp, const cube_transpose *t, long band,
                       const char *out_path, long long datastart, const volatile int *cancel,
                       char *err, size_t errlen)
{
    long nz = t->nz, nh = nz / 2 + 1;
    long rows = lmin(t->band_rows, t->ny - band * t->band_rows);
    /* The band's part of plane k of the cube is one run of rows * nx values, at k * ny * nx
     * values from its part of plane 0: the spectra are made in that order in memory, then
     * written a run at a time.  Written with pwrite, the pages of the product are made
     * by the copy; through a mapping, each was first made and zeroed by a fault, and on
     * this VM (fresh memory faulted in on the host) that cost up to twice as much:
     * bench/cubewrite, 8 GB of 64000-byte runs from cold memory, one thread, 46.3 and
     * 26.4 s through a mapping against 20.5 and 15.9 s with pwrite. */
    const size_t run = (size_t)rows * t->nx * 4, plane_stride = (size_t)t->ny * t->nx * 4;
    long y0 = band * t->band_rows;
    band_mem bm;
    int rc = band_mem_get(sp, (size_t)rows * t->nx * nz * t->es, (size_t)nz * run, &bm);
    if (rc) {
        band_mem_put(sp, &bm);
        tess_seterr(err, errlen, "out of memory");
        return rc;
    }
    unsigned char *buf = bm.series, *out = bm.spectra;   /* out: [k][row][x], run bytes a k */
    double *in = fftw_malloc(sizeof(double) * (size_t)nz * FFT_BATCH);
    fftw_complex *spec = fftw_malloc(sizeof(fftw_complex) * (size_t)nh * FFT_BATCH);
    uint32_t *pw = malloc(sizeof *pw * (size_t)nh * FFT_BATCH);
    long p0 = 0, p1 = 0;
    if (!in || !spec || !pw) {
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
            unsigned char *plane = out + (size_t)k * run;
            for (long r = 0; r < nrun; r++)
                memcpy(plane + off[run0[r]], src + run0[r], (size_t)runn[r] * 4);
        }
    }
    int fd = rc ? -1 : open(out_path, O_WRONLY | O_CLOEXEC);
    if (!rc && fd < 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", out_path, strerror(errno));
        rc = TESS_EIO;
    }
    off_t at = (off_t)(datastart + (long long)y0 * t->nx * 4);
    pthread_mutex_lock(&sp->write_lock);
    for (long k = 0; k < nz && !rc; k++) {
        if (tess_pwrite_all(fd, out + (size_t)k * run, run, at + (off_t)(k * plane_stride))) {
            tess_seterr(err, errlen, "cannot write %s: %s", out_path, strerror(errno));
            rc = TESS_EIO;
        }
    }
    pthread_mutex_unlock(&sp->write_lock);
    if (fd >= 0 && close(fd) != 0 && !rc) {
        tess_seterr(err, errlen, "cannot write %s: %s", out_path, strerror(errno));
        rc = TESS_EIO;
    }
    band_mem_put(sp, &bm);
    free(pw);
    fftw_free(in);
    fftw_free(spec);
    return rc;
}
