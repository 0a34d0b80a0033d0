/* The power spectrum's writes (engine/cube/spectrum.c) reduced to the writes: a float32
 * cube of NZ planes of NY x NX values after a 2880-byte header, filled band by band, a
 * band being BAND rows of every plane, so NZ runs of BAND * NX * 4 bytes at a stride of
 * one plane.  Two ways side by side, on a new sparse file each round:
 *   mapping   the band's runs mapped in one window (engine/base/wmap.h), their pages made
 *             a run at a time (tess_wmap_prepare), the values copied in (as bands were
 *             written up to 5ee98fc)
 *   pwrite    the band's values in a buffer in file order, one pwrite(2) a run
 *   pwrite_serial  the same, the bands' pwrites one band at a time under a lock (as now:
 *             the values of the next band are made meanwhile)
 * Each round sleeps SLEEP seconds first (default 5), so that memory freed by the round
 * before goes back to the host where the VM hands free memory back (free page reporting
 * waits 2 s) and each round makes its pages from cold memory, as a job does.
 *
 * usage: cubewrite DIR [NZ [NX [NY [BAND [THREADS [ROUNDS [SLEEP]]]]]]]
 *   defaults 2000 planes of 1000 x 1000 (an 8 GB cube: 2000 frames of 1000 x 1000) in
 *   bands of 16 rows, 1 thread, 2 rounds of mapping, pwrite, pwrite_serial.
 *   Needs NZ * NY * NX * 4 bytes free in DIR.  THREADS workers take the bands in turn.
 * Prints "RESULT way seconds" for each round (fsync not included), and checks that every
 * value of the cube holds what was written (the value at (x, y, k): (x + 3 y + 7 k) mod
 * 2^24, as a float). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/fileio.h"
#include "engine/base/wmap.h"

#define HEADER 2880

static long nz = 2000, nx = 1000, ny = 1000, band = 16;
static int threads = 1;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static float value(long x, long y, long k) { return (float)((x + 3 * y + 7 * k) & 0xFFFFFF); }

typedef struct worker_arg {
    const char *path;
    int way;        /* 0 mapping, 1 pwrite, 2 pwrite one band at a time */
    int first;      /* the worker's first band; it takes every threads-th */
    int rc;
} worker_arg;

/* The values of rows [y0, y0 + rows) of plane k, in file order, into dst. */
static void fill_run(float *dst, long y0, long rows, long k)
{
    for (long y = 0; y < rows; y++)
        for (long x = 0; x < nx; x++)
            dst[y * nx + x] = value(x, y0 + y, k);
}

static void *worker(void *p)
{
    worker_arg *a = p;
    const size_t plane = (size_t)nx * (size_t)ny * 4;
    float *buf = malloc((size_t)band * (size_t)nx * 4 * (size_t)(a->way ? nz : 1));
    char err[256];
    int fd = a->way ? open(a->path, O_WRONLY) : -1;
    if (!buf || (a->way && fd < 0)) {
        a->rc = 1;
        free(buf);
        return NULL;
    }
    long nbands = (ny + band - 1) / band;
    for (long b = a->first; b < nbands && !a->rc; b += threads) {
        long y0 = b * band, rows = ny - y0 < band ? ny - y0 : band;
        size_t run = (size_t)rows * (size_t)nx * 4;
        off_t first = (off_t)HEADER + (off_t)y0 * nx * 4;
        if (a->way) {
            for (long k = 0; k < nz; k++)
                fill_run(buf + (size_t)k * (size_t)rows * (size_t)nx, y0, rows, k);
            if (a->way == 2)
                pthread_mutex_lock(&write_lock);
            for (long k = 0; k < nz && !a->rc; k++)
                if (tess_pwrite_all(fd, (unsigned char *)buf + (size_t)k * run, run,
                                    first + (off_t)((size_t)k * plane)))
                    a->rc = 1;
            if (a->way == 2)
                pthread_mutex_unlock(&write_lock);
            continue;
        }
        tess_wmap m;
        if (tess_wmap_open(a->path, first, (size_t)(nz - 1) * plane + run, 0, &m, err,
                           sizeof err)) {
            fprintf(stderr, "cubewrite: %s\n", err);
            a->rc = 1;
            break;
        }
        for (long k = 0; k < nz && !a->rc; k++)
            a->rc = tess_wmap_prepare(&m, (size_t)k * plane, run, err, sizeof err) != 0;
        for (long k = 0; k < nz && !a->rc; k++) {
            fill_run(buf, y0, rows, k);
            memcpy(m.p + (size_t)k * plane, buf, run);
        }
        if (tess_wmap_close(&m, err, sizeof err))
            a->rc = 1;
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

static double run(const char *path, int way)
{
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)HEADER + (off_t)nz * nx * ny * 4) != 0) {
        perror(path);
        return -1;
    }
    close(fd);
    double t0 = tess_mono_s();
    pthread_t th[64];
    worker_arg a[64];
    for (int i = 0; i < threads; i++) {
        a[i] = (worker_arg){path, way, i, 0};
        pthread_create(&th[i], NULL, worker, &a[i]);
    }
    int rc = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        rc |= a[i].rc;
    }
    return rc ? -1 : tess_mono_s() - t0;
}

/* Counts the values of the cube at `path` that differ from value(). */
static long check(const char *path)
{
    FILE *f = fopen(path, "rb");
    float *row = malloc((size_t)nx * 4);
    long bad = 0;
    if (!f || !row || fseek(f, HEADER, SEEK_SET) != 0) {
        perror(path);
        if (f)
            fclose(f);
        free(row);
        return -1;
    }
    for (long k = 0; k < nz && bad >= 0; k++)
        for (long y = 0; y < ny; y++) {
            if (fread(row, 4, (size_t)nx, f) != (size_t)nx) {
                bad = -1;
                break;
            }
            for (long x = 0; x < nx; x++)
                bad += row[x] != value(x, y, k);
        }
    fclose(f);
    free(row);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cubewrite DIR [NZ [NX [NY [BAND [THREADS [ROUNDS [SLEEP]]]]]]]\n");
        return 2;
    }
    int rounds = 2, pause = 5;
    if (argc > 2) nz = atol(argv[2]);
    if (argc > 3) nx = atol(argv[3]);
    if (argc > 4) ny = atol(argv[4]);
    if (argc > 5) band = atol(argv[5]);
    if (argc > 6) threads = atoi(argv[6]);
    if (argc > 7) rounds = atoi(argv[7]);
    if (argc > 8) pause = atoi(argv[8]);
    if (nz < 1 || nx < 1 || ny < 1 || band < 1 || threads < 1 || threads > 64 || rounds < 1 ||
        pause < 0) {
        fprintf(stderr, "cubewrite: sizes and ROUNDS positive, THREADS 1..64, SLEEP >= 0\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/cubewrite.fits", argv[1]);
    printf("cubewrite: %ld planes of %ld x %ld float32 (%.2f GB), bands of %ld rows, %d "
           "thread(s)\n", nz, nx, ny, (double)nz * nx * ny * 4 / 1e9, band, threads);
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++)
        for (int way = 0; way < 3 && !rc; way++) {
            sync();
            sleep((unsigned)pause);
            double s = run(path, way);
            if (s < 0) {
                fprintf(stderr, "cubewrite: a write failed\n");
                rc = 1;
                break;
            }
            printf("RESULT %s %.3f\n", way == 2 ? "pwrite_serial" : way ? "pwrite" : "mapping", s);
            fflush(stdout);
            long bad = check(path);
            if (bad) {
                fprintf(stderr, "cubewrite: %ld values differ from what was written\n", bad);
                rc = 1;
            }
        }
    unlink(path);
    return rc;
}
