/* Planes of a stack turned into per-pixel series (transpose.h). */
#include "engine/cube/transpose.h"

#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/wmap.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BLOCK_BYTES (64L << 20)   /* memory of one block's main buffer */
#define MIN_BLOCKS 16             /* aim for at least this many blocks per stage */
#define ZGROUP 64                 /* planes held at once by a band or a group (gather_rows) */

/* Stage A's mapping of the destination, made by the first group that runs (see
 * cube_transpose_group).  `rc`/`err`: the outcome of that one attempt, given to every
 * group after it. */
struct cube_dest {
    pthread_mutex_t lock;
    pthread_cond_t made_cv;
    int tried, rc;
    tess_wmap m;
    char err[256];
    unsigned char *made;   /* rowwise: per tile row, ROW_* */
    struct group_share *share;   /* split: per group (t->ngroups), made with the mapping */
};

#define SPLIT_MAX 16   /* parts of a group at most (bits of group_share.done) */

/* The planes of one group, held once for all its parts (t->split): every part claims the
 * next planes not yet claimed and holds them into hp[], then waits until all gk are held
 * (or one failed), gathers the tile rows it claims (claim_row) from them, and the last
 * part to finish releases them (cube_transpose_release releases what a cancelled group left held).
 * Under cube_dest.lock; waits on made_cv. */
struct group_share {
    long claimed, held;    /* planes claimed / held so far (of gk) */
    int rc;                /* the first failure to hold one of them */
    long lo[SPLIT_MAX], hi[SPLIT_MAX];   /* part p's share: rows lo[p] .. hi[p]-1 unclaimed
                                            (the part-th of split even shares at first) */
    long claimed_rows, rows_done;   /* tile rows claimed / finished by the group's parts */
    int wrc;               /* the first failure to write one of them (werr) */
    char werr[256];
    unsigned done;         /* bit p: part p finished with these planes */
    int released;          /* the planes were released (by the last part) */
    char err[256];
    unsigned char ok[ZGROUP];   /* hp[j] is held */
    stack_plane hp[ZGROUP];
};

enum { ROW_NONE, ROW_MAKING, ROW_MADE, ROW_FAILED };

static long lmin(long a, long b) { return a < b ? a : b; }
static long lmax(long a, long b) { return a > b ? a : b; }

void cube_transpose_sizes(long nx, long ny, long nz, int es, long out_bytes_per_value,
                          long *g, long *band_rows)
{
    long plane_bytes = nx * ny * es;
    *g = lmax(1, lmin(BLOCK_BYTES / lmax(1, plane_bytes), (nz + MIN_BLOCKS - 1) / MIN_BLOCKS));
    long per_row = nx * nz * lmax(es, out_bytes_per_value);
    long tile_rows = (ny + CUBE_TILE - 1) / CUBE_TILE;
    long trows = lmax(1, lmin(BLOCK_BYTES / lmax(1, per_row * CUBE_TILE),
                              (tile_rows + MIN_BLOCKS - 1) / MIN_BLOCKS));
    *band_rows = trows * CUBE_TILE;
}

int cube_transpose_init(cube_transpose *t, const cube_source *src, long out_bytes_per_value,
                        int direct, const char *src_path, const char *workdir, char *err,
                        size_t errlen)
{
    memset(t, 0, sizeof *t);
    /* perm holds uint32 indices, and the staging file npix * nz values. */
    size_t npix, staged;
    if (src->nx < 1 || src->ny < 1 || src->nz < 1 ||
        tess_size_dims(1, (const long[]){src->nx, src->ny}, 2, &npix) || npix > UINT32_MAX ||
        tess_size_dims((size_t)chunkstore_esize(src->dtype),
                       (const long[]){src->nx, src->ny, src->nz}, 3, &staged)) {
        tess_seterr(err, errlen, "cannot transpose %ld x %ld x %ld values: planes hold fewer "
                    "than 2^32 pixels", src->nx, src->ny, src->nz);
        return TESS_ERANGE;
    }
    t->st = src->st;
    t->nx = src->nx;
    t->ny = src->ny;
    t->nz = src->nz;
    t->npix = (long)npix;
    t->dt = src->dtype;
    t->es = chunkstore_esize(t->dt);
    t->ci.nx = src->nx;
    t->ci.ny = src->ny;
    t->ci.nz = src->nz;
    t->ci.dtype = t->dt;
    t->ci.tx = CUBE_TILE;
    t->ci.ty = CUBE_TILE;
    t->ci.data_offset = CHUNKSTORE_HEADER;
    snprintf(t->ci.source, sizeof t->ci.source, "%s", src->name);
    snprintf(t->name, sizeof t->name, "%s", src->name);
    t->perm = malloc((size_t)t->npix * sizeof *t->perm);
    t->dest = calloc(1, sizeof *t->dest);
    if (t->dest) {
        pthread_mutex_init(&t->dest->lock, NULL);
        pthread_cond_init(&t->dest->made_cv, NULL);
    }
    if (!t->perm || !t->dest) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long long idx = 0;
    for (long y0 = 0; y0 < t->ny; y0 += CUBE_TILE) {
        long h = lmin(CUBE_TILE, t->ny - y0);
        for (long x0 = 0; x0 < t->nx; x0 += CUBE_TILE) {
            long w = lmin(CUBE_TILE, t->nx - x0);
            for (long yy = 0; yy < h; yy++)
                for (long xx = 0; xx < w; xx++)
                    t->perm[idx++] = (uint32_t)((y0 + yy) * t->nx + x0 + xx);
        }
    }
    cube_transpose_sizes(t->nx, t->ny, t->nz, t->es, out_bytes_per_value, &t->g, &t->band_rows);
    t->ngroups = (t->nz + t->g - 1) / t->g;
    t->nbands = (t->ny + t->band_rows - 1) / t->band_rows;
    t->direct = direct;
    snprintf(t->stage_path, sizeof t->stage_path, "%s/staging.bin", workdir);
    snprintf(t->dest_path, sizeof t->dest_path, "%s", t->stage_path);
    snprintf(t->src_path, sizeof t->src_path, "%s", src_path ? src_path : "");
    return 0;
}

void cube_transpose_release(cube_transpose *t)
{
    free(t->perm);
    t->perm = NULL;
    if (t->dest) {
        char e[8];
        tess_wmap_close(&t->dest->m, e, sizeof e);   /* a fault was reported by its group */
        pthread_mutex_destroy(&t->dest->lock);
        pthread_cond_destroy(&t->dest->made_cv);
        free(t->dest->made);
        for (long gi = 0; t->dest->share && gi < t->ngroups; gi++)   /* cancelled groups */
            for (int j = 0; j < ZGROUP; j++)
                if (t->dest->share[gi].ok[j])
                    stack_plane_release(t->st, &t->dest->share[gi].hp[j]);
        free(t->dest->share);
        free(t->dest);
        t->dest = NULL;
    }
}

int cube_transpose_create_files(const cube_transpose *t, char *err, size_t errlen)
{
    if (t->direct || strcmp(t->dest_path, t->stage_path) != 0)
        return 0;
    int fd = open(t->stage_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)(CHUNKSTORE_HEADER + (long long)t->npix * t->nz *
                                        t->es)) != 0 || close(fd) != 0) {
        tess_seterr(err, errlen, "cannot create %s: %s", t->stage_path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

int cube_transpose_set_dest(cube_transpose *t, const char *path)
{
    if (strlen(path) >= sizeof t->dest_path)
        return TESS_ERANGE;
    snprintf(t->dest_path, sizeof t->dest_path, "%s", path);
    return 0;
}

static void encode1(cs_dtype t, double v, unsigned char *dst)
{
    switch (t) {
    case CS_U8:
        *dst = (unsigned char)lrint(v);
        break;
    case CS_U16:
    case CS_I16: {   /* exact integers in range (cube_source.dtype) */
        uint16_t u = t == CS_U16 ? (uint16_t)v : (uint16_t)(int16_t)v;
        dst[0] = (unsigned char)(u & 0xff);
        dst[1] = (unsigned char)(u >> 8);
        break;
    }
    default:
        chunkstore_encode(CS_F32, &v, dst, 1);
    }
}

/* Pixels 0..15 of rows 0..15 (16 bytes at src[j] + q each) transposed: dst + p * stride
 * gets pixel p's 16 values of rows 0..15 (SSE2: four rounds of interleaving, bytes, then
 * 16-, 32- and 64-bit pairs; scalar elsewhere). */
static void transpose16(const unsigned char *const src[16], size_t q, unsigned char *dst,
                        size_t stride)
{
#if defined(__SSE2__)
    __m128i a[16], b[16];
    for (int k = 0; k < 8; k++) {   /* a[k]: rows 2k, 2k+1 interleaved, pixels 0-7; a[k+8]: 8-15 */
        __m128i r0 = _mm_loadu_si128((const __m128i *)(const void *)(src[2 * k] + q));
        __m128i r1 = _mm_loadu_si128((const __m128i *)(const void *)(src[2 * k + 1] + q));
        a[k] = _mm_unpacklo_epi8(r0, r1);
        a[k + 8] = _mm_unpackhi_epi8(r0, r1);
    }
    for (int h = 0; h < 2; h++)     /* b[4g + m]: rows 4m..4m+3 of pixels 4g..4g+3 */
        for (int m = 0; m < 4; m++) {
            b[8 * h + m] = _mm_unpacklo_epi16(a[8 * h + 2 * m], a[8 * h + 2 * m + 1]);
            b[8 * h + 4 + m] = _mm_unpackhi_epi16(a[8 * h + 2 * m], a[8 * h + 2 * m + 1]);
        }
    for (int g = 0; g < 4; g++)     /* a[2e + m]: rows 8m..8m+7 of pixels 2e, 2e+1 */
        for (int m = 0; m < 2; m++) {
            a[4 * g + m] = _mm_unpacklo_epi32(b[4 * g + 2 * m], b[4 * g + 2 * m + 1]);
            a[4 * g + 2 + m] = _mm_unpackhi_epi32(b[4 * g + 2 * m], b[4 * g + 2 * m + 1]);
        }
    for (int e = 0; e < 8; e++) {
        _mm_storeu_si128((__m128i *)(void *)(dst + (size_t)(2 * e) * stride),
                         _mm_unpacklo_epi64(a[2 * e], a[2 * e + 1]));
        _mm_storeu_si128((__m128i *)(void *)(dst + (size_t)(2 * e + 1) * stride),
                         _mm_unpackhi_epi64(a[2 * e], a[2 * e + 1]));
    }
#else
    for (size_t p = 0; p < 16; p++)
        for (int j = 0; j < 16; j++)
            dst[p * stride + (size_t)j] = src[j][q + p];
#endif
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(RP_NO_AVX2)
#include <immintrin.h>
#define HAVE_WIDE 1
/* 16 pixels' values of planes 0 .. gk-1 (16 < gk <= 64; as transpose16 reads them)
 * into their series, gk bytes at dst + p * stride: transposed 16 planes at a time into a
 * 16 x 64 block that stays in L1 (the last 16 planes ending at gk, as in
 * scatter_tile_row), then written with one 64-byte store a pixel masked to its gk bytes
 * (AVX-512BW; the bytes masked off are neither written nor faulted), a quarter of the
 * stores of transpose16's rows at 64 planes (none fewer at 16: those go by transpose16).  Only where the CPU has AVX-512BW
 * (__builtin_cpu_supports), never with -DRP_NO_AVX2 (the plain paths' build). */
__attribute__((target("avx512f,avx512bw"))) static void
transpose_wide(const unsigned char *const *src, size_t q, long gk, unsigned char *dst,
               size_t stride)
{
    _Alignas(64) unsigned char blk[16 * 64];
    long j0 = 0;
    for (; j0 + 16 <= gk; j0 += 16)
        transpose16(src + j0, q, blk + j0, 64);
    if (j0 < gk)
        transpose16(src + gk - 16, q, blk + gk - 16, 64);
    __mmask64 m = gk >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << gk) - 1);
    for (int p = 0; p < 16; p++)
        _mm512_mask_storeu_epi8(dst + (size_t)p * stride, m,
                                _mm512_load_si512((const void *)(blk + p * 64)));
}
#endif

/* The series of the 16-pixel run PREFETCH_AHEAD store indices on (two runs ahead, in
 * the same tile row), asked for with intent to write: both cache lines that a run's gk
 * values (gk <= 64) touch in each of its 16 series.  A group's pass writes gk bytes into
 * every series of the store, lines that the earlier passes left in memory, and the
 * hardware prefetcher alone left the writes waiting on them: bench/stackbench rechunk,
 * 250 PNG frames of 1000 x 1000, 2 workers, user CPU median 0.77 s without, 0.69 s with
 * (AVX-512 path; the plain build's transpose16 path 0.77 and 0.69 s too).  A prefetch
 * never faults, and none reaches past the tile row. */
#define PREFETCH_AHEAD 32
static inline void prefetch_series(const unsigned char *pf, long gk, size_t nz)
{
    for (size_t p = 0; p < 16; p++) {
        __builtin_prefetch(pf + p * nz, 1, 3);
        __builtin_prefetch(pf + p * nz + (size_t)gk - 1, 1, 3);
    }
}

/* One tile row (th rows) of gk planes (src[j]: the tile row's first
 * value in plane j, es bytes a value, rows nx values apart) into the series of its store
 * indices: `dst` is the value of plane 0 in the series of the tile row's first index, a
 * series nz values long.  In store order a tile's row of w pixels is w adjacent series,
 * so 8-bit values go 16 pixels by 16 planes at a time (transpose16), or 16 pixels by up
 * to 64 planes (transpose_wide, with AVX-512BW); the rest value by value. */
static void scatter_tile_row(const cube_transpose *t, long th,
                             const unsigned char *const *src, long gk, unsigned char *dst)
{
    const long nx = t->nx;
    const size_t es = (size_t)t->es, nz = (size_t)t->nz;
    size_t i = 0;   /* store index from the tile row's first */
    const long last_pf = th * nx - PREFETCH_AHEAD - CUBE_TILE;   /* last run to prefetch for */
#ifdef HAVE_WIDE
    const int wide = __builtin_cpu_supports("avx512bw");
#endif
    for (long x0 = 0; x0 < nx; x0 += CUBE_TILE) {
        long w = lmin(CUBE_TILE, nx - x0);
        for (long yy = 0; yy < th; yy++, i += (size_t)w) {
            size_t q = (size_t)(yy * nx + x0);
            unsigned char *d = dst + i * nz * es;
            long j0 = 0;
#ifdef HAVE_WIDE
            if (es == 1 && w == 16 && gk > 16 && gk <= 64 && wide) {
                if ((long)i <= last_pf)
                    prefetch_series(d + PREFETCH_AHEAD * nz, gk, nz);
                transpose_wide(src, q, gk, d, nz);
                continue;
            }
#endif
            if (es == 1 && w == 16 && gk >= 16) {
                if (gk > 16 && gk <= 64 && (long)i <= last_pf)
                    prefetch_series(d + PREFETCH_AHEAD * nz, gk, nz);
                for (; j0 + 16 <= gk; j0 += 16)
                    transpose16(src + j0, q, d + j0, nz);
                /* the last gk % 16 planes: the 16 ending at gk again, so that the planes
                 * before them are written twice with the same values, instead of byte by
                 * byte (63 planes a group: 15 of every 63 values took a third of the time) */
                if (j0 < gk)
                    transpose16(src + gk - 16, q, d + gk - 16, nz);
                j0 = gk;
            }
            if (es == 1)   /* a byte each: no memcpy call of a size unknown here */
                for (long p = 0; p < w; p++)
                    for (long j = j0; j < gk; j++)
                        d[(size_t)p * nz + (size_t)j] = src[j][q + (size_t)p];
            else
                for (long p = 0; p < w; p++)
                    for (long j = j0; j < gk; j++)
                        memcpy(d + ((size_t)p * nz + (size_t)j) * es, src[j] + (q + (size_t)p) * es,
                               es);
        }
    }
}

/* Makes the pages of tile row ty0's series in the destination (t->rowwise) unless a
 * group made them before; a group that finds another making them waits for it.  Made
 * just before the first write there, each page is zeroed by the kernel and written while
 * in the cache, where pages made all at once for the whole store (250 MB at 250 frames
 * of 1000 x 1000) were zeroed into memory and read back for ownership by the first
 * group's writes, one worker making them while the other waited.  Returns 0 or
 * TESS_EIO with err (the disk full: tess_wmap_prepare). */
static int make_tile_row(const cube_transpose *t, struct cube_dest *d, long ty0, char *err,
                         size_t errlen)
{
    long r = ty0 / CUBE_TILE, th = lmin(CUBE_TILE, t->ny - ty0);
    size_t row = (size_t)t->nx * (size_t)t->nz * (size_t)t->es;
    pthread_mutex_lock(&d->lock);
    int st = d->made[r];
    if (st == ROW_NONE)
        d->made[r] = ROW_MAKING;
    while (st == ROW_MAKING) {
        pthread_cond_wait(&d->made_cv, &d->lock);
        st = d->made[r];
    }
    pthread_mutex_unlock(&d->lock);
    if (st == ROW_MADE)
        return 0;
    if (st == ROW_FAILED) {
        tess_seterr(err, errlen, "cannot write %s: no room for the data", t->dest_path);
        return TESS_EIO;
    }
    int rc = tess_wmap_prepare(&d->m, (size_t)ty0 * row, (size_t)th * row, err, errlen);
    pthread_mutex_lock(&d->lock);
    d->made[r] = rc ? ROW_FAILED : ROW_MADE;
    pthread_cond_broadcast(&d->made_cv);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

/* Gathers values z0 .. z1-1 of the series of rows [y0, y1) (whole tile rows) into `out`,
 * whose first series is store index p0 (value z of index i at ((i - p0) * nz + z) * es):
 * the planes are held zmax at a time (each plane of a hold opened or decoded once, 8-bit
 * frames not converted) and gathered a tile row at a time, so that a pixel gets up to
 * zmax values side by side.  A tile row of each held plane is first copied (8-bit: one
 * sequential copy of its th * nx bytes) or converted into `tmp`, zmax * CUBE_TILE * nx
 * values, which stays in the cache while scatter_tile_row reads it 16 bytes of 16 planes
 * at a time: read from the planes themselves, those reads were zmax * th streams, more
 * than the hardware prefetcher follows, and half of this function's time at 250 frames
 * of 1000 x 1000 waited on them.  Returns 0 or a TESS_E* code with err. */
/* The tile rows of [y0, y1) of held planes zg .. zg+gk-1 (hp[j]: plane zg + j) into
 * `out` as gather_rows describes; tmp and dbl as gather_rows makes them. */
static int scatter_held(const cube_transpose *t, long y0, long y1, long zg, long gk,
                        const stack_plane *hp, unsigned char *tmp, double *dbl,
                        unsigned char *out, long p0, struct cube_dest *rows_of, char *err,
                        size_t errlen)
{
    long nx = t->nx, ny = t->ny, nz = t->nz;
    size_t es = (size_t)t->es;
    int rc = 0;
    for (long ty0 = y0; ty0 < y1 && !rc; ty0 += CUBE_TILE) {
        long th = lmin(CUBE_TILE, ny - ty0);
        const unsigned char *src[ZGROUP];
        for (long j = 0; j < gk && !rc; j++) {
            unsigned char *e = tmp + (size_t)j * CUBE_TILE * nx * es;
            src[j] = e;
            if (t->dt == CS_U8 && hp[j].u8) {
                /* the tile row's th rows are th * nx adjacent bytes of the plane: one
                 * sequential copy into the cache-sized buffer (see scatter_tile_row) */
                memcpy(e, hp[j].u8 + (size_t)ty0 * nx, (size_t)(th * nx));
                continue;
            }
            rc = stack_read_region(t->st, zg + j, 0, ty0, nx, th, dbl, err, errlen);
            for (long i = 0; i < th * nx && !rc; i++)
                encode1(t->dt, dbl[i], e + (size_t)i * es);
        }
        if (!rc && rows_of)
            rc = make_tile_row(t, rows_of, ty0, err, errlen);
        if (!rc)
            scatter_tile_row(t, th, src, gk,
                             out + ((size_t)(ty0 * nx - p0) * (size_t)nz + (size_t)zg) * es);
    }
    return rc;
}

/* Releases held planes zg .. zg+n-1; TESS_EIO with err when one was truncated while
 * read, else rc. */
static int release_held(const cube_transpose *t, long zg, long n, stack_plane *hp, int rc,
                        char *err, size_t errlen)
{
    for (long j = 0; j < n; j++)
        if (stack_plane_release(t->st, &hp[j]) && !rc) {
            rc = TESS_EIO;
            tess_seterr(err, errlen, "frame %ld of '%s' was truncated while being read",
                        zg + j, t->name);
        }
    return rc;
}

/* Gathers values z0 .. z1-1 of the series of rows [y0, y1) (whole tile rows) into `out`,
 * whose first series is store index p0 (value z of index i at ((i - p0) * nz + z) * es):
 * the planes are held zmax at a time (each plane of a hold opened or decoded once, 8-bit
 * frames not converted) and gathered a tile row at a time, so that a pixel gets up to
 * zmax values side by side.  A tile row of each held plane is first copied (8-bit: one
 * sequential copy of its th * nx bytes) or converted into `tmp`, zmax * CUBE_TILE * nx
 * values, which stays in the cache while scatter_tile_row reads it 16 bytes of 16 planes
 * at a time: read from the planes themselves, those reads were zmax * th streams, more
 * than the hardware prefetcher follows, and half of this function's time at 250 frames
 * of 1000 x 1000 waited on them.  Returns 0 or a TESS_E* code with err. */
static int gather_rows(const cube_transpose *t, long y0, long y1, long z0, long z1, long zmax,
                       unsigned char *out, long p0, struct cube_dest *rows_of,
                       const volatile int *cancel, char *err, size_t errlen)
{
    size_t es = (size_t)t->es;
    zmax = lmax(1, lmin(zmax, ZGROUP));
    unsigned char *tmp = malloc((size_t)zmax * CUBE_TILE * t->nx * es);
    double *dbl = malloc(sizeof(double) * (size_t)CUBE_TILE * t->nx);
    stack_plane hp[ZGROUP];
    int rc = tmp && dbl ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    for (long zg = z0; zg < z1 && !rc; zg += zmax) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long gk = lmin(zmax, z1 - zg), held = 0;
        for (; held < gk && !rc; held++)
            rc = stack_plane_hold(t->st, zg + held, &hp[held], err, errlen);
        if (rc)
            held--;
        if (!rc)
            rc = scatter_held(t, y0, y1, zg, gk, hp, tmp, dbl, out, p0, rows_of, err, errlen);
        rc = release_held(t, zg, held, hp, rc, err, errlen);
    }
    free(tmp);
    free(dbl);
    return rc;
}

/* Planes held at once by a group: up to GROUP_HOLD_FRAMES, fewer when they would pass
 * this many bytes of stored values (large frames).  Held by number, not only by bytes:
 * at up to ZGROUP (64) small frames a group held 4 times the planes at 4000 frames of
 * 256 x 256 (groups of 250) as at 250 (groups of 16), and the peak grew with the frame
 * count (bench/stackbench rechunk, 2 workers: 11.7-11.8 MB anonymous at 4000 frames
 * against 8.2 at 250); 16 planes: 9.2 MB at 4000, for 3-4% more CPU (1.085-1.095 s
 * against 1.044-1.059 s, alternated) as a group makes 4 times the passes over the
 * store. */
#define GROUP_HOLD_FRAMES 16
#define GROUP_HOLD_BYTES (64L << 20)

long cube_transpose_group_hold(long nx, long ny, int es)
{
    return lmax(1, lmin(GROUP_HOLD_FRAMES, GROUP_HOLD_BYTES / lmax(1, nx * ny * es)));
}

/* Stage A, group k: frames z0 .. z0+gk-1 into the series of the destination, values
 * z0 .. z0+gk-1 of store index i at out[i * nz + z], gathered a tile row at a time from the
 * held planes (gather_rows) straight into a mapping of the file (engine/base/wmap.h): no
 * buffer of the group, no copy by pwrite, up to ZGROUP bytes side by side in each series.
 * A group writes a few bytes into every page of the file, so all groups share one
 * mapping, made by the first (its pages made then: MADV_POPULATE_WRITE; with t->rowwise
 * a tile row at a time by make_tile_row, ahead of the first writes there) and unmapped by
 * cube_transpose_release.  With a mapping per group, as before, each group made and
 * unmade the page table entries of the whole file: bench/mapwrite, a 2 GB store written
 * in 33 groups, took 2.7-7.2 s that way against 1.3 s through one mapping. */
/* Releases the planes a group share holds (none when already released); rc, or TESS_EIO
 * with err when one was truncated while read.  Call with the share's part of the work
 * done, outside the lock. */
static int share_release(const cube_transpose *t, struct group_share *g, long z0, int rc,
                         char *err, size_t errlen)
{
    for (long j = 0; j < ZGROUP; j++)
        if (g->ok[j]) {
            g->ok[j] = 0;
            rc = release_held(t, z0 + j, 1, &g->hp[j], rc, err, errlen);
        }
    return rc;
}

/* The next tile row part `part` of g's group gathers (claimed: -1 when none is left):
 * the first unclaimed row of its own share (the part-th of split even shares, so that
 * each part sweeps its own region of the destination, as with fixed shares), else the
 * last unclaimed row of the share with the most left.  Under cube_dest.lock. */
static long claim_row(struct group_share *g, long split, long part)
{
    long q = part;
    if (g->lo[q] >= g->hi[q])
        for (long p = 0; p < split; p++)
            if (g->hi[p] - g->lo[p] > g->hi[q] - g->lo[q])
                q = p;
    if (g->lo[q] >= g->hi[q])
        return -1;
    g->claimed_rows++;
    return q == part ? g->lo[q]++ : --g->hi[q];
}

/* Part `part` of group gi (t->split parts): holds its share of the group's planes (those
 * it claims first), waits for the other parts' holds, then gathers the series of the
 * group's tile rows from all of them, one tile row at a time as claim_row gives them,
 * waits until every claimed row is written, and releases the planes when it is the
 * last part done.  So a part returns 0 only when all of the group's rows, its own share
 * (the part-th of split even shares) among them, are written.  Rows are claimed, not
 * split in fixed shares, so that the parts finish together: with fixed shares the part
 * done first went on to hold the next group's planes while the other still held this
 * group's, and in some runs two groups' frames were held at once, decoded into fresh
 * pages past the PNG buffer pool (bench/stackbench rechunk, 250 PNG frames of
 * 1000 x 1000, 2 workers, 6 runs alternated: peak anonymous 78.9-123.5 MB, user CPU
 * median 0.74 s, system 0.26 s (0.16-0.59); claimed: 77.7-79.0 MB, 0.67 s, 0.19 s
 * (0.17-0.25)).  Each part takes its own share's rows first: with one counter for all,
 * the parts made adjacent tile rows side by side, and at 4000 frames of 256 x 256 the
 * minor faults rose from 8k to 14k-202k.  A part run again once the planes were
 * released gathers its own share from planes it holds itself (gather_rows). */
static int group_part(const cube_transpose *t, struct cube_dest *d, long gi, long part,
                      long z0, long gk, const volatile int *cancel, char *err,
                      size_t errlen)
{
    long split = t->split, trows = (t->ny + CUBE_TILE - 1) / CUBE_TILE;
    long y0 = part * trows / split * CUBE_TILE;
    long y1 = lmin(t->ny, (part + 1) * trows / split * CUBE_TILE);
    struct group_share *g = &d->share[gi];
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (g->released) {
        pthread_mutex_unlock(&d->lock);
        return gather_rows(t, y0, y1, z0, z0 + gk, gk, d->m.p, 0, t->rowwise ? d : NULL,
                           cancel, err, errlen);
    }
    while (!g->rc && g->claimed < gk) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long j = g->claimed++;
        pthread_mutex_unlock(&d->lock);
        stack_plane p;
        char e[256];
        int hrc = stack_plane_hold(t->st, z0 + j, &p, e, sizeof e);
        pthread_mutex_lock(&d->lock);
        if (hrc && !g->rc) {
            g->rc = hrc;
            snprintf(g->err, sizeof g->err, "%s", e);
        }
        if (!hrc) {
            g->hp[j] = p;
            g->ok[j] = 1;
        }
        g->held++;
        pthread_cond_broadcast(&d->made_cv);
    }
    while (!rc && !g->rc && g->held < gk)
        pthread_cond_wait(&d->made_cv, &d->lock);
    if (!rc && g->rc) {
        rc = g->rc;
        tess_seterr(err, errlen, "%s", g->err);
    }
    pthread_mutex_unlock(&d->lock);
    if (!rc) {
        unsigned char *tmp = malloc((size_t)gk * CUBE_TILE * t->nx * (size_t)t->es);
        double *dbl = malloc(sizeof(double) * (size_t)CUBE_TILE * t->nx);
        if (!tmp || !dbl) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        }
        pthread_mutex_lock(&d->lock);
        while (!rc && !g->wrc) {
            if (*cancel) {
                rc = TESS_ECANCELED;
                break;
            }
            long r = claim_row(g, split, part);
            if (r < 0)
                break;
            pthread_mutex_unlock(&d->lock);
            char e[256];
            int wrc = scatter_held(t, r * CUBE_TILE, lmin(t->ny, (r + 1) * CUBE_TILE), z0, gk,
                                   g->hp, tmp, dbl, d->m.p, 0, t->rowwise ? d : NULL, e,
                                   sizeof e);
            pthread_mutex_lock(&d->lock);
            if (wrc && !g->wrc) {
                g->wrc = wrc;
                snprintf(g->werr, sizeof g->werr, "%s", e);
            }
            g->rows_done++;
            pthread_cond_broadcast(&d->made_cv);
        }
        /* the rows other parts claimed, of this part's share perhaps, written or failed */
        while (!rc && g->rows_done < g->claimed_rows)
            pthread_cond_wait(&d->made_cv, &d->lock);
        if (!rc && g->wrc) {
            rc = g->wrc;
            tess_seterr(err, errlen, "%s", g->werr);
        }
        pthread_mutex_unlock(&d->lock);
        free(tmp);
        free(dbl);
    }
    pthread_mutex_lock(&d->lock);
    g->done |= 1u << part;
    /* the last part: no other reads the planes now, and every claim was held */
    int last = g->done == (1u << split) - 1 && g->held == g->claimed;
    if (last)
        g->released = 1;
    pthread_mutex_unlock(&d->lock);
    return last ? share_release(t, g, z0, rc, err, errlen) : rc;
}

int cube_transpose_group(const cube_transpose *t, long k, const volatile int *cancel,
                         char *err, size_t errlen)
{
    long split = t->split > 1 ? t->split : 1, gi = k / split;
    long z0 = gi * t->g, gk = lmin(t->g, t->nz - z0);
    const size_t es = (size_t)t->es, npix = (size_t)t->npix;
    struct cube_dest *d = t->dest;
    pthread_mutex_lock(&d->lock);
    if (!d->tried) {
        d->tried = 1;
        d->rc = tess_wmap_open(t->dest_path, (off_t)CHUNKSTORE_HEADER,
                               npix * (size_t)t->nz * es, !t->rowwise, &d->m, d->err,
                               sizeof d->err);
        if (!d->rc && t->rowwise &&
            !(d->made = calloc((size_t)(t->ny + CUBE_TILE - 1) / CUBE_TILE, 1))) {
            d->rc = TESS_ENOMEM;
            snprintf(d->err, sizeof d->err, "out of memory");
        }
        if (!d->rc && split > 1 && !(d->share = calloc((size_t)t->ngroups, sizeof *d->share))) {
            d->rc = TESS_ENOMEM;
            snprintf(d->err, sizeof d->err, "out of memory");
        }
        /* every part's share of every group's tile rows, all unclaimed */
        const long trows = (t->ny + CUBE_TILE - 1) / CUBE_TILE;
        for (long gj = 0; !d->rc && split > 1 && gj < t->ngroups; gj++)
            for (long p = 0; p < split; p++) {
                d->share[gj].lo[p] = p * trows / split;
                d->share[gj].hi[p] = (p + 1) * trows / split;
            }
    }
    int rc = d->rc;
    if (rc)
        tess_seterr(err, errlen, "%s", d->err);
    pthread_mutex_unlock(&d->lock);
    if (rc)
        return rc;
    if (split > 1)
        rc = group_part(t, d, gi, k % split, z0, gk, cancel, err, errlen);
    else
        rc = gather_rows(t, 0, t->ny, z0, z0 + gk,
                         t->hold > 0 ? t->hold : cube_transpose_group_hold(t->nx, t->ny, t->es),
                         d->m.p, 0, t->rowwise ? d : NULL, cancel, err, errlen);
    return rc ? rc : tess_wmap_check(&d->m, err, errlen);
}

/* Stage B, band b: fills `buf` ((p1-p0) * nz * es bytes) with the band's series, read
 * in one piece from the staging file (stage A wrote them in store order) or from the
 * chunk store at src_path when direct. */
int cube_transpose_band(const cube_transpose *t, long b, unsigned char *buf, long *p0_out,
                        long *p1_out, const volatile int *cancel, char *err, size_t errlen)
{
    long y0 = b * t->band_rows, y1 = lmin(t->ny, y0 + t->band_rows);
    long p0 = y0 * t->nx, p1 = y1 * t->nx, np = p1 - p0;
    *p0_out = p0;
    *p1_out = p1;
    if (*cancel)
        return TESS_ECANCELED;
    size_t es = (size_t)t->es;
    int fd = cube_transpose_series_open(t);
    off_t off = (off_t)(CHUNKSTORE_HEADER + (long long)p0 * t->nz * es);
    int bad = fd < 0 || tess_pread_all(fd, buf, (size_t)np * t->nz * es, off) != 0;
    return cube_transpose_series_close(t, fd, bad, err, errlen);
}

int cube_transpose_series_open(const cube_transpose *t)
{
    return open(t->direct ? t->src_path : t->dest_path, O_RDONLY | O_CLOEXEC);
}

const unsigned char *cube_transpose_staged(const cube_transpose *t)
{
    if (t->direct || !t->dest || strcmp(t->dest_path, t->stage_path) != 0)
        return NULL;
    pthread_mutex_lock(&t->dest->lock);
    const unsigned char *p = t->dest->tried && !t->dest->rc ? t->dest->m.p : NULL;
    pthread_mutex_unlock(&t->dest->lock);
    return p;
}

int cube_transpose_series_close(const cube_transpose *t, int fd, int bad, char *err,
                                size_t errlen)
{
    if (fd >= 0)
        close(fd);
    if (bad || fd < 0) {
        tess_seterr(err, errlen, "cannot read %s", t->direct ? t->src_path : t->dest_path);
        return TESS_EIO;
    }
    return 0;
}

int cube_transpose_rows(const cube_transpose *t, long y0, long y1, unsigned char *out,
                        const volatile int *cancel, char *err, size_t errlen)
{
    return gather_rows(t, y0, y1, 0, t->nz, ZGROUP, out, y0 * t->nx, NULL, cancel, err,
                       errlen);
}

