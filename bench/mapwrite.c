/* Stage A of the transpose (engine/cube/transpose.c) reduced to its writes: a store of
 * NSERIES series of NZ bytes, filled by NZ/G groups, each of which writes its G bytes into
 * every series, so into every page of the file.  Two ways side by side, on a new sparse
 * file each round:
 *   per_group   every group maps the whole store (engine/base/wmap.h, pages made at
 *               open), writes, unmaps (as cube_transpose_group did before it shared one)
 *   shared      one mapping made before the first group, unmapped after the last
 * The bytes written are the same; what differs is that per_group makes and unmakes the
 * page table entries of the whole file once per group.
 *
 * usage: mapwrite DIR [NSERIES [NZ [G [ROUNDS]]]]
 *   defaults 1000000 series of 2000 bytes (a 2 GB store: 2000 frames of 1000 x 1000, 8-bit)
 *   in groups of 62 (what cube_transpose_sizes gives that stack), 2 rounds in the order
 *   per_group, shared, per_group, shared.  Needs NSERIES * NZ bytes free in DIR.
 * Prints "RESULT way seconds" for each round, and checks that both stores hold the same
 * bytes (value of series s at z: (s * 31 + z) & 255). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/wmap.h"

static long nseries = 1000000, nz = 2000, g = 62;

/* The value written at z of series s, and checked there. */
static unsigned char pattern(long s, long z) { return (unsigned char)((s * 31 + z) & 255); }

static void write_group(unsigned char *p, long z0, long gk)
{
    for (long s = 0; s < nseries; s++) {
        unsigned char *q = p + (size_t)s * (size_t)nz + (size_t)z0;
        for (long z = 0; z < gk; z++)
            q[z] = pattern(s, z0 + z);
    }
}

static int make_file(const char *path)
{
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)nseries * nz) != 0) {
        perror(path);
        return -1;
    }
    close(fd);
    return 0;
}

static double run(const char *path, int shared)
{
    char err[256];
    size_t len = (size_t)nseries * (size_t)nz;
    tess_wmap m = {0};
    if (make_file(path))
        return -1;
    double t0 = tess_mono_s();
    if (shared && tess_wmap_open(path, 0, len, 1, &m, err, sizeof err))
        goto fail;
    for (long z0 = 0; z0 < nz; z0 += g) {
        if (!shared && tess_wmap_open(path, 0, len, 1, &m, err, sizeof err))
            goto fail;
        write_group(m.p, z0, z0 + g <= nz ? g : nz - z0);
        if (!shared && tess_wmap_close(&m, err, sizeof err))
            goto fail;
    }
    if (shared && tess_wmap_close(&m, err, sizeof err))
        goto fail;
    return tess_mono_s() - t0;
fail:
    fprintf(stderr, "mapwrite: %s\n", err);
    tess_wmap_close(&m, err, sizeof err);
    return -1;
}

/* Counts the bytes of the store at `path` that differ from the pattern write_group writes. */
static long check(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *row = malloc((size_t)nz);
    long bad = 0;
    if (!f || !row) {
        perror(path);
        if (f)
            fclose(f);
        free(row);
        return -1;
    }
    for (long s = 0; s < nseries; s++) {
        if (fread(row, 1, (size_t)nz, f) != (size_t)nz) {
            bad = -1;
            break;
        }
        for (long z = 0; z < nz; z++)
            bad += row[z] != pattern(s, z);
    }
    fclose(f);
    free(row);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mapwrite DIR [NSERIES [NZ [G [ROUNDS]]]]\n");
        return 2;
    }
    int rounds = 2;
    if (argc > 2) nseries = atol(argv[2]);
    if (argc > 3) nz = atol(argv[3]);
    if (argc > 4) g = atol(argv[4]);
    if (argc > 5) rounds = atoi(argv[5]);
    if (nseries < 1 || nz < 1 || g < 1 || g > nz || rounds < 1) {
        fprintf(stderr, "mapwrite: NSERIES, NZ, G and ROUNDS must be positive, G <= NZ\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/mapwrite.store", argv[1]);
    printf("mapwrite: %ld series of %ld bytes (%.2f GB), %ld groups of %ld\n", nseries, nz,
           (double)nseries * (double)nz / 1e9, (nz + g - 1) / g, g);
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++)
        for (int shared = 0; shared < 2 && !rc; shared++) {
            double s = run(path, shared);
            if (s < 0) {
                rc = 1;
                break;
            }
            long bad = check(path);
            printf("RESULT %s %.3f\n", shared ? "shared" : "per_group", s);
            if (bad) {
                fprintf(stderr, "mapwrite: %ld bytes differ from what was written\n", bad);
                rc = 1;
            }
            fflush(stdout);
        }
    unlink(path);
    return rc;
}
