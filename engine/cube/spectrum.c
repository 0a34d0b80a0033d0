/* Power spectra along z of every pixel's series (spectrum.h); fftw3 stands only here. */
#include "engine/cube/spectrum.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hugemem.h"
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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FFT_BATCH 32   /* series gathered and scattered together (whole tile rows) */
/* The bytes of one fftw execution's series (nz doubles each) and coefficients (nz / 2 + 1
 * complex each): a batch of FFT_BATCH series is transformed cube_spectrum_fft_batch(nz)
 * at a time, so that these stay in L2 (2 MB a core here).  fftw alone at nz = 4000 took
 * 5.4-6.5 us a series 32 at a time, 4.7-4.9 us 1 to 8 at a time; decoded, transformed
 * and squared, 2.54-2.70 ns a value 32 at a time, 2.36-2.49 16, 2.38-2.43 8 (flat at
 * nz = 2000, 2.29-2.38 for 1 to 32).  4000 frames of 256 x 256, 2 workers, the spectrum
 * from the copy, five rounds in rotated order: 32 a time 1.39-1.55 s of CPU (median
 * 1.46), 1 MB (16) 1.31-1.46 (1.37), 512 KB (8) 1.20-1.35 (1.31); from the frames,
 * medians 2.53, 2.71 and 2.28 s.  The products are byte-identical. */
#define FFT_CACHE_BYTES (1L << 19)
#define POOL_MAX 16    /* band buffers kept for reuse (one a worker) */

/* The memory of one block: the series of one FFT batch as stored, and the block's spectra
 * as they go to the file ([k][row][x] for k = 0 .. nz/2, big-endian float32: plane nz - k
 * is plane k's copy). */
typedef struct band_mem {
    unsigned char *series;
    unsigned char *spectra;
    size_t series_len, spectra_len;
    /* the FFT's scratch, kept with them: made and freed per block, glibc's rising mmap
     * threshold left them in the arenas, 9 MB more a worker at 4000 frames than these
     * buffers hold */
    double *in;           /* nz values a series, fft_batch series */
    fftw_complex *spec;   /* nz / 2 + 1 a series, fft_batch series */
    uint32_t *pw;         /* as many powers a series, FFT_BATCH series */
} band_mem;

struct cube_spectrum {
    fftw_plan plan;    /* r2c of fft_batch series of nz values */
    long nz;
    long fft_batch;    /* series per fftw execution: a power of two <= FFT_BATCH */
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
static long lmax(long a, long b) { return a > b ? a : b; }

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
        /* Every batch stores a few bytes into each of the block's nz / 2 + 1 planes:
         * thousands of 4 KB pages a batch at large nz, a TLB miss each; on 2 MB pages
         * the spectrum from the copy took 1.36-1.41 s of CPU against 1.45-1.49 s
         * (4000 frames of 256 x 256, 2 workers, alternated), for at most 2 MB more a
         * worker (peak anonymous memory 44.7-46.0 MB before, 46.6-49.5 MB after). */
        free(b->spectra);
        b->spectra = tess_alloc_huge(spectra_len);
        b->spectra_len = b->spectra ? spectra_len : 0;
    }
    size_t nh = (size_t)sp->nz / 2 + 1;
    if (!b->in)
        b->in = fftw_malloc(sizeof(double) * (size_t)sp->nz * (size_t)sp->fft_batch);
    if (!b->spec)
        b->spec = fftw_malloc(sizeof(fftw_complex) * nh * (size_t)sp->fft_batch);
    if (!b->pw)
        b->pw = malloc(sizeof *b->pw * nh * FFT_BATCH);
    return b->series && b->spectra && b->in && b->spec && b->pw ? 0 : TESS_ENOMEM;
}

static void band_mem_free(band_mem *b)
{
    free(b->series);
    free(b->spectra);
    fftw_free(b->in);
    fftw_free(b->spec);
    free(b->pw);
}

static void band_mem_put(cube_spectrum *sp, band_mem *b)
{
    pthread_mutex_lock(&sp->lock);
    if (sp->npool < POOL_MAX) {
        sp->pool[sp->npool++] = *b;
        b = NULL;
    }
    pthread_mutex_unlock(&sp->lock);
    if (b)
        band_mem_free(b);
}

long cube_spectrum_fft_batch(long nz)
{
    size_t per = (size_t)(nz > 0 ? nz : 1) * sizeof(double)
                 + (size_t)(nz / 2 + 1) * sizeof(fftw_complex);
    long b = FFT_BATCH;
    while (b > 1 && (size_t)b * per > (size_t)FFT_CACHE_BYTES)
        b /= 2;
    return b;
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
    sp->fft_batch = cube_spectrum_fft_batch(nz);
    const int howmany = (int)sp->fft_batch;
    pthread_mutex_init(&sp->lock, NULL);
    pthread_mutex_init(&sp->write_lock, NULL);
    double *in = fftw_malloc(sizeof(double) * (size_t)n * (size_t)howmany);
    fftw_complex *o = fftw_malloc(sizeof(fftw_complex) * (size_t)(n / 2 + 1) * (size_t)howmany);
    /* Series contiguous (idist = nz): fftw 3.3.10 runs each 250-value transform with its
     * AVX codelets (hc2cfdftv_10_avx, n1fv_25_avx), 298 ns a series here.  Interleaved
     * (istride = FFT_BATCH, idist = 1, the powers then read bin-major) it took 595 ns
     * under FFTW_ESTIMATE and 561 under FFTW_MEASURE (15.9 against 5.4 us at nz = 4000);
     * 64 series a batch, 298 ns; FFTW_R2HC (r2r), 610 ns.  fft_batch series an execution
     * (FFT_CACHE_BYTES): at nz = 4000, 8 (512 KB) against 32 (2 MB) took the CPU per
     * frame of the spectrum from the copy from 1.20 to 1.07 times that at 250 frames
     * (4.7-4.9 against 5.4-6.5 us a series in fftw alone).  FFTW_MEASURE: 5.3 us a series
     * at nz = 4000, but 0.33 s to plan, as much as all the transforms of 256 x 256 x
     * 4000. */
    pthread_mutex_lock(&fftw_plan_lock);
    if (in && o)
        sp->plan = fftw_plan_many_dft_r2c(1, &n, howmany, in, NULL, 1, n, o, NULL, 1,
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
    for (int i = 0; i < sp->npool; i++)
        band_mem_free(&sp->pool[i]);
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
/* pw[h * FFT_BATCH + j] = |X_j[h]|^2 as big-endian float32 for the series j < m whose nh
 * coefficients lie at spec + j * nh, in plain C: bin by bin, so that pw's rows are
 * written in order; the reads stride by a series, m cache lines that serve four bins
 * each (written series by series, a store every 128 bytes was a fifth of
 * cube_spectrum_block's time).  j_from, h_from: the first series and bin to make. */
static void powers_plain(const fftw_complex *spec, long nh, long m, long j_from, long h_from,
                         uint32_t *pw)
{
    for (long h = h_from; h < nh; h++) {
        const fftw_complex *c = spec + j_from * nh + h;
        uint32_t *p = pw + h * FFT_BATCH;
        for (long j = j_from; j < m; j++, c += nh)
            p[j] = be_bits((float)((*c)[0] * (*c)[0] + (*c)[1] * (*c)[1]));
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(RP_NO_AVX2)
#include <immintrin.h>
#define SPECTRUM_AVX2 1
/* powers_plain with AVX2, four series by four bins at a time: each series' four complex
 * values (two 32-byte loads) squared and summed pairwise (hadd: re * re + im * im, the
 * plain path's products and sum, so the same bits: no FMA is enabled here), rounded to
 * float32 (cvtpd2ps, as the plain cast: to nearest), the 4 x 4 block turned bin-major in
 * registers, its bytes reversed (pshufb) and stored as four 16-byte rows of pw.  The
 * bins past the last multiple of four and the series past it go the plain way.  The
 * plain loop was half of cube_spectrum_block's samples in `perf` (mulsd, cvtsd2ss and
 * bswap a value, 1.26e8 values at 250 frames of 1000 x 1000). */
__attribute__((target("avx2"))) static void powers_avx2(const fftw_complex *spec, long nh,
                                                         long m, uint32_t *pw)
{
    const __m128i swap = _mm_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
    const long m4 = m & ~3L, h4 = nh & ~3L;
    for (long j = 0; j < m4; j += 4) {
        const double *s = (const double *)(const void *)(spec + j * nh);
        const size_t step = 2 * (size_t)nh;   /* doubles from one series to the next */
        for (long h = 0; h < h4; h += 4) {
            __m128 r[4];
            for (int q = 0; q < 4; q++) {
                const double *c = s + q * step + 2 * h;
                __m256d a = _mm256_loadu_pd(c), b = _mm256_loadu_pd(c + 4);
                /* (|X[h]|^2, |X[h+2]|^2, |X[h+1]|^2, |X[h+3]|^2): hadd works per lane */
                r[q] = _mm256_cvtpd_ps(_mm256_hadd_pd(_mm256_mul_pd(a, a),
                                                      _mm256_mul_pd(b, b)));
            }
            _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);   /* r[q]: one bin, 4 series */
            uint32_t *p = pw + h * FFT_BATCH + j;
            _mm_storeu_si128((__m128i *)(void *)p,
                             _mm_shuffle_epi8(_mm_castps_si128(r[0]), swap));
            _mm_storeu_si128((__m128i *)(void *)(p + FFT_BATCH),
                             _mm_shuffle_epi8(_mm_castps_si128(r[2]), swap));
            _mm_storeu_si128((__m128i *)(void *)(p + 2 * FFT_BATCH),
                             _mm_shuffle_epi8(_mm_castps_si128(r[1]), swap));
            _mm_storeu_si128((__m128i *)(void *)(p + 3 * FFT_BATCH),
                             _mm_shuffle_epi8(_mm_castps_si128(r[3]), swap));
        }
    }
    if (h4 < nh)
        powers_plain(spec, nh, m4, 0, h4, pw);
    if (m4 < m)
        powers_plain(spec, nh, m, m4, 0, pw);
}
#endif

/* The powers of m <= FFT_BATCH series (powers_plain), by the AVX2 path where the CPU has
 * it. */
static void powers(const fftw_complex *spec, long nh, long m, uint32_t *pw)
{
#ifdef SPECTRUM_AVX2
    if (__builtin_cpu_supports("avx2")) {
        powers_avx2(spec, nh, m, pw);
        return;
    }
#endif
    powers_plain(spec, nh, m, 0, 0, pw);
}

/* The bytes one block's spectra may hold (nz / 2 + 1 float32 a pixel: the planes past nz / 2
 * are copies of those below), whatever nz is (cube_spectrum_set_block_bytes).  A smaller
 * budget flattens the anonymous memory but shortens the product's pwrite runs (budget /
 * ((nz / 2 + 1) * 4) pixels), and the page cache's cost is per run and per page: 1 GB in
 * runs of 2, 8, 32 and 128 KB took 0.92, 0.60, 0.35 and 0.21 s of CPU here.  4000 frames
 * of 256 x 256, 2 workers, the spectrum from the copy, three alternated rounds: 16 MB
 * 1.64-1.66 s of CPU and 44.5 MB anonymous peak, 8 MB 1.80-1.97 s and 29 MB, 4 MB
 * 2.09-2.24 s and 21 MB. */
#define BLOCK_BYTES_DEFAULT (16L << 20)
static long block_bytes = BLOCK_BYTES_DEFAULT;

void cube_spectrum_set_block_bytes(long bytes)
{
    block_bytes = bytes > 0 ? bytes : BLOCK_BYTES_DEFAULT;
}

long cube_spectrum_block_bytes(void)
{
    return block_bytes;
}

/* The shape of a transpose's blocks (see cube_spectrum_nblocks): rows per block (a multiple
 * of CUBE_TILE: whole tile rows; else fewer rows of one tile row), blocks per tile row
 * down (nsub) and across (ncol), columns per block (nx, or a multiple of CUBE_TILE when
 * a single row passes the budget). */
typedef struct geom {
    long rows, cols, nsub, ncol;
} geom;

static void geom_of(long nx, long nz, long band_rows, geom *g)
{
    double per_px = (double)(nz / 2 + 1) * 4.0;
    long fit_rows = (long)((double)block_bytes / (per_px * (double)nx));
    g->cols = nx;
    g->nsub = g->ncol = 1;
    if (fit_rows >= CUBE_TILE) {
        /* whole tile rows, at most band_rows (at least two blocks a worker then) */
        g->rows = lmin(band_rows, fit_rows / CUBE_TILE * CUBE_TILE);
        return;
    }
    if (fit_rows >= 1) {
        g->nsub = (CUBE_TILE + fit_rows - 1) / fit_rows;
        g->rows = (CUBE_TILE + g->nsub - 1) / g->nsub;
        return;
    }
    g->rows = 1;
    g->nsub = CUBE_TILE;
    long fit_cols = (long)((double)block_bytes / per_px) / CUBE_TILE * CUBE_TILE;
    g->cols = lmin(nx, lmax(CUBE_TILE, fit_cols));
    g->ncol = (nx + g->cols - 1) / g->cols;
}

static void block_geom(const cube_transpose *t, geom *g)
{
    geom_of(t->nx, t->nz, t->band_rows, g);
}

size_t cube_spectrum_spectra_bytes(long nx, long ny, long nz, int es)
{
    long gz = 1, band_rows = CUBE_TILE;
    cube_transpose_sizes(nx, ny, nz, es, 4, &gz, &band_rows);
    geom g;
    geom_of(nx, nz, band_rows, &g);
    return (size_t)g.rows * (size_t)g.cols * (size_t)(nz / 2 + 1) * 4;
}

long cube_spectrum_nblocks(const cube_transpose *t)
{
    geom g;
    block_geom(t, &g);
    if (g.rows >= CUBE_TILE)
        return (t->ny + g.rows - 1) / g.rows;
    return (t->ny + CUBE_TILE - 1) / CUBE_TILE * g.nsub * g.ncol;
}

/* The store index of the block's series i (read_series's order): the first of a run of
 * *n adjacent in the store (at most `left`). */
static long long series_index(const cube_transpose *t, const geom *g, long y0, long y1,
                              long x0, long i, long left, long *n)
{
    if (g->rows >= CUBE_TILE) {
        *n = left;
        return (long long)y0 * t->nx + i;
    }
    long ty0 = y0 / CUBE_TILE * CUBE_TILE, h = lmin(CUBE_TILE, t->ny - ty0);
    long per_tile = (y1 - y0) * CUBE_TILE, k = i / per_tile, q = i - k * per_tile;
    long tx0 = x0 + k * CUBE_TILE, w = lmin(CUBE_TILE, t->nx - tx0);
    *n = lmin(left, (y1 - y0) * w - q);
    return (long long)ty0 * t->nx + (long long)tx0 * h + (y0 - ty0) * w + q;
}

/* Reads the series i0 .. i0 + n - 1 of block b's pixels (rows [y0, y1), columns [x0, x1)
 * of the image), in the block's order, from fd into buf: store order when whole tile rows
 * (one read); else tile by tile, the rows of the block in each (within a tile the pixels
 * are row-major, so a tile's part is one read: series_index's runs).  0, or -1 when a
 * read fails. */
static int read_series(const cube_transpose *t, const geom *g, int fd, long y0, long y1,
                       long x0, long i0, long n, unsigned char *buf)
{
    size_t sz = (size_t)t->nz * (size_t)t->es;
    while (n > 0) {
        long m;
        long long first = series_index(t, g, y0, y1, x0, i0, n, &m);
        if (tess_pread_all(fd, buf, (size_t)m * sz,
                           (off_t)(CHUNKSTORE_HEADER + first * (long long)sz)) != 0)
            return -1;
        buf += (size_t)m * sz;
        i0 += m;
        n -= m;
    }
    return 0;
}

/* The place of the block's series i (in read_block's order) in its part of a plane
 * ([row - y0][x - x0]), in values. */
static size_t block_offset(const cube_transpose *t, const geom *g, long y0, long y1, long x0,
                           long x1, long i)
{
    if (g->rows >= CUBE_TILE) {
        uint32_t pix = t->perm[y0 * t->nx + i];
        return (size_t)(pix / t->nx - y0) * (size_t)t->nx + pix % t->nx;
    }
    long per_tile = (y1 - y0) * CUBE_TILE, k = i / per_tile;
    long w = lmin(CUBE_TILE, x1 - (x0 + k * CUBE_TILE)), q = i - k * per_tile;
    return (size_t)(q / w) * (size_t)(x1 - x0) + (size_t)(k * CUBE_TILE + q % w);
}

/* The block's spectra buffer from which the scatter below stores with non-temporal
 * stores (put_tile_row): at least this many bytes.  A block of 16 MB (250 frames of
 * 1000 x 1000, 4000 of 256 x 256) outlives the caches between its stores and the pwrite
 * that reads it back, and every 64-byte store missed and first read its line
 * (read-for-ownership): streamed, cube_spectrum_block's samples in `perf` fell 35% at 4000
 * frames of 256 x 256 (897-1068 against 1361-1557, the spectrum from the copy, 3 rounds
 * alternated) and about 20% at 250 frames of 1000 x 1000 (637-789 against 783-1061, 4
 * rounds, where only even rows' tile rows are line-aligned).  Blocks of 2 MB (250 frames
 * of 256 x 256) stay in the caches until written: streaming them gained nothing there
 * (0.073-0.075 s of CPU against 0.070-0.075). */
#define STREAM_BYTES (8L << 20)

_Static_assert(CUBE_TILE * 4 == 64, "a tile row of float32 is one 64-byte cache line");

/* Stores a tile row of CUBE_TILE powers (64 bytes) at dst: with non-temporal stores when
 * `stream` and dst starts a cache line (the line is then written whole, never read), else
 * by a copy. */
static void put_tile_row(unsigned char *dst, const uint32_t *src, int stream)
{
#if defined(__SSE2__)
    if (stream && ((uintptr_t)dst & 63) == 0) {
        const __m128i *a = (const __m128i *)(const void *)src;
        __m128i *d = (__m128i *)(void *)dst;
        _mm_stream_si128(d, _mm_loadu_si128(a));
        _mm_stream_si128(d + 1, _mm_loadu_si128(a + 1));
        _mm_stream_si128(d + 2, _mm_loadu_si128(a + 2));
        _mm_stream_si128(d + 3, _mm_loadu_si128(a + 3));
        return;
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, CUBE_TILE * 4);
}

int cube_spectrum_block(cube_spectrum *sp, const cube_transpose *t, long block,
                        const char *out_path, long long datastart, const volatile int *cancel,
                        char *err, size_t errlen)
{
    long nz = t->nz, nh = nz / 2 + 1;
    geom g;
    block_geom(t, &g);
    long y0, y1, x0 = 0, x1 = t->nx;
    if (g.rows >= CUBE_TILE) {
        y0 = block * g.rows;
        y1 = lmin(t->ny, y0 + g.rows);
    } else {
        long per_trow = g.nsub * g.ncol, ty = block / per_trow, r = block % per_trow;
        long top = ty * CUBE_TILE, bottom = lmin(t->ny, top + CUBE_TILE);
        y0 = top + r / g.ncol * g.rows;
        y1 = lmin(bottom, y0 + g.rows);
        x0 = r % g.ncol * g.cols;
        x1 = lmin(t->nx, x0 + g.cols);
        if (y0 >= bottom)
            return 0;   /* the last tile row is shorter: nothing left for this block */
    }
    if (*cancel)
        return TESS_ECANCELED;
    /* The block's part of plane k of the cube is rows y1 - y0 of columns [x0, x1), at k *
     * ny * nx values from its part of plane 0: the spectra are made in that order in
     * memory, then written a plane at a time (a row at a time when the block is narrower
     * than the image).  Written with pwrite, the pages of the product are made by the
     * copy; through a mapping, each was first made and zeroed by a fault, and on this VM
     * (fresh memory faulted in on the host) that cost up to twice as much:
     * bench/cubewrite, 8 GB of 64000-byte runs from cold memory, one thread, 46.3 and
     * 26.4 s through a mapping against 20.5 and 15.9 s with pwrite.  Tried again with no
     * spectra buffer at all (each batch's powers stored straight into a shared mapping of
     * the fallocated product over the block's span of the nz planes): the anonymous
     * memory went flat (13-15 MB at 250 and 4000 frames of 256 x 256 against 13-15 and
     * 45-49 MB), but the spectrum from the copy took 0.090-0.094 s of CPU at 250 frames
     * against 0.068-0.073 s and 2.7-3.7 s at 4000 against 1.36-1.50 s (2 workers, A B A B);
     * prefaulting each plane's band (MADV_POPULATE_WRITE) and 128 MB blocks, 1.9-2.3 s.
     * `perf`: zeroing the file's fresh folios, ext4's write_begin and block_dirty_folio,
     * a third of the CPU, which pwrite over whole runs does not pay. */
    const long wx = x1 - x0, np = (y1 - y0) * wx;
    const size_t run = (size_t)np * 4, plane_stride = (size_t)t->ny * t->nx * 4;
    /* Every block asks for the buffers of the largest, so that the plan's kept buffers
     * always serve the next block (asked as large as each block, the smaller ones left
     * behind as others were made: 61 MB anonymous against 31 at 4000 frames).  The series
     * are read a batch at a time and only the planes k <= nz / 2 are held (nz - k is a
     * copy of k), so a pixel costs 2 bytes a frame where it cost es + 4 (5 to 8): blocks
     * of 2.5-4 times as many pixels in the same budget, and as many times fewer, longer
     * writes of the cube (its pwrite calls were half the job's CPU at 4000 frames). */
    const size_t most = (size_t)g.rows * (size_t)g.cols;
    band_mem bm;
    int rc = band_mem_get(sp, (size_t)FFT_BATCH * nz * t->es, most * nh * 4, &bm);
    if (rc) {
        band_mem_put(sp, &bm);
        tess_seterr(err, errlen, "out of memory");
        return rc;
    }
    unsigned char *buf = bm.series, *out = bm.spectra;   /* out: [k][row][x], run bytes a k */
    double *in = bm.in;
    fftw_complex *spec = bm.spec;
    uint32_t *pw = bm.pw;
    const long fb = sp->fft_batch;
    /* Stage A's mapping, when this process made it, is read in place: pread would copy
     * each series once more (5% of the job's CPU at 250 frames of 1000 x 1000). */
    const unsigned char *staged = cube_transpose_staged(t);
    const size_t sz = (size_t)nz * (size_t)t->es;
    /* (a smaller budget streams from half of it: blocks of the tests' budgets take the
     * streamed path too) */
    const int stream = most * (size_t)nh * 4 >= (size_t)lmin(STREAM_BYTES, block_bytes / 2);
    int sfd = staged ? -1 : cube_transpose_series_open(t), bad = !staged && sfd < 0;
    for (long i0 = 0; i0 < np && !rc && !bad; i0 += FFT_BATCH) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long nb = lmin(FFT_BATCH, np - i0);
        /* the batch's series in place in stage A's mapping, else read into buf */
        const unsigned char *ser[FFT_BATCH];
        if (staged) {
            for (long j = 0, n = 0; j < nb; j += n) {
                long long idx = series_index(t, &g, y0, y1, x0, i0 + j, nb - j, &n);
                for (long m = 0; m < n; m++)
                    ser[j + m] = staged + (size_t)(idx + m) * sz;
            }
        } else if (read_series(t, &g, sfd, y0, y1, x0, i0, nb, buf) != 0) {
            bad = 1;
            break;
        } else {
            for (long j = 0; j < nb; j++)
                ser[j] = buf + (size_t)j * sz;
        }
        /* fftw runs fb of the batch's series at a time (fb = FFT_BATCH unless nz is
         * large, cube_spectrum_fft_batch), decoded just before into the same buffers */
        for (long j0 = 0; j0 < nb; j0 += fb) {
            const long m = lmin(fb, nb - j0);
            for (long j = 0; j < fb; j++) {
                double *dst = in + j * nz;
                if (j >= m) {   /* past the block's last series: transformed, unused */
                    memset(dst, 0, sizeof(double) * (size_t)nz);
                    continue;
                }
                chunkstore_decode(t->dt, ser[j0 + j], dst, nz);
                for (long z = 0; t->dt == CS_F32 && z < nz; z++)   /* integers are finite */
                    dst[z] = isfinite(dst[z]) ? dst[z] : 0.0;
            }
            fftw_execute_dft_r2c(sp->plan, in, spec);
            /* |X[h]|^2 of these series once per h < nh, as big-endian floats, bin-major
             * (pw[h][j]): plane k takes bin min(k, nz - k), |X[nz-k]| = |X[k]| for a real
             * series. */
            powers(spec, nh, m, pw + j0);
        }
        /* The batch is whole rows of 16x16 store tiles, so its pixels make a few runs of
         * adjacent values in every plane of the block: each plane gets them as a few
         * copies, not one scattered store per pixel (a pixel-major scatter over nz planes
         * was 70% of this function; a value-by-value one over the batch, 9% of the CPU of
         * rechunk and both spectra on 2000 frames of 1000 x 1000, `perf`). */
        long run0[FFT_BATCH], runn[FFT_BATCH], nrun = 0;
        size_t off[FFT_BATCH];
        for (long j = 0; j < nb; j++) {
            off[j] = block_offset(t, &g, y0, y1, x0, x1, i0 + j) * 4;
            if (j > 0 && off[j] == off[j - 1] + 4) {
                runn[nrun - 1]++;
            } else {
                run0[nrun] = j;
                runn[nrun++] = 1;
            }
        }
        for (long k = 0; k < nh; k++) {
            const uint32_t *src = pw + k * FFT_BATCH;
            unsigned char *plane = out + (size_t)k * run;
            for (long r = 0; r < nrun; r++) {
                unsigned char *dst = plane + off[run0[r]];
                if (runn[r] == CUBE_TILE)   /* a whole tile's row: a copy of known size */
                    put_tile_row(dst, src + run0[r], stream);
                else
                    memcpy(dst, src + run0[r], (size_t)runn[r] * 4);
            }
        }
    }
#if defined(__SSE2__)
    if (stream)
        _mm_sfence();   /* the streamed stores ordered before the writes read them */
#endif
    int src_rc = staged ? 0 : cube_transpose_series_close(t, sfd, bad, err, errlen);
    if (!rc)
        rc = src_rc;
    int fd = rc ? -1 : open(out_path, O_WRONLY | O_CLOEXEC);
    if (!rc && fd < 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", out_path, strerror(errno));
        rc = TESS_EIO;
    }
    /* whole rows: one run a plane; narrower blocks: one a row of each plane */
    const long wrows = wx == t->nx ? 1 : y1 - y0;
    const size_t wlen = wx == t->nx ? run : (size_t)wx * 4;
    off_t at = (off_t)(datastart + ((long long)y0 * t->nx + x0) * 4);
    /* Plane k and its mirror nz - k (k = 1 .. nz - nh) one after the other: the mirror's
     * copy reads the run while it is still in the caches (in plane order it was read
     * again nz - 2k planes later, from memory). */
    pthread_mutex_lock(&sp->write_lock);
    for (long k = 0; k < nh && !rc; k++)
        for (int mirror = 0; mirror < 2 && !rc; mirror++) {
            long kk = mirror ? nz - k : k;
            if (mirror && (k == 0 || kk < nh))
                break;
            for (long r = 0; r < wrows && !rc; r++)
                if (tess_pwrite_all(fd, out + (size_t)k * run + (size_t)r * wlen, wlen,
                                    at + (off_t)(kk * plane_stride + (size_t)r * t->nx * 4))) {
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
    return rc;
}
