/* PNG frame decoders side by side: libpng (row by row, as engine/image/stack.c decoded
 * frames before engine/image/pngframe), libspng, and engine/image/pngframe (the chunks
 * parsed here, the IDAT stream inflated at once by libdeflate), on the same files.
 *
 * usage: pngdecode [-z] [-d DUMPDIR] [-r ROUNDS] [-m DECODER] FILE...
 * Decodes every FILE with each decoder ROUNDS times (default 3, the best round counts),
 * prints "RESULT decoder ms_per_frame" lines, and checks that every decoder gives the
 * same samples (row 0 = the last PNG row, native-endian 16-bit).  -m runs only the
 * decoder of that name (for perf).  -z also weighs a store of the decoded frames
 * compressed frame by frame (LZ4, zstd level 1) against an uncompressed one: compressed
 * size, and ms/frame to decompress vs to copy a frame (the read of a store in the page
 * cache).  With -d, the pngframe
 * samples of each of the first 20 files are written to DUMPDIR/N.raw for a comparison
 * with another reader (bench/pngdecode.py does it with skimage). */
#include <lz4.h>
#include <spng.h>
#include <zstd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/image/pngframe.h"

typedef int (*decoder)(const char *path, void **pix, long *nx, long *ny, int *bits);

static int dec_libpng(const char *path, void **pix, long *nx, long *ny, int *bits)
{
    char err[256];
    return pngframe_decode_libpng(path, pix, nx, ny, bits, err, sizeof err);
}

static int dec_pngframe(const char *path, void **pix, long *nx, long *ny, int *bits)
{
    char err[256];
    return pngframe_decode(path, pix, nx, ny, bits, err, sizeof err);
}

/* libspng, row by row into the flipped rows as the others give them. */
static int dec_spng(const char *path, void **pix, long *nx, long *ny, int *bits)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ih;
    int rc = -1;
    unsigned char *out = NULL;
    if (!ctx || spng_set_png_file(ctx, f) || spng_get_ihdr(ctx, &ih) || ih.color_type != 0)
        goto done;
    size_t esz = ih.bit_depth == 16 ? 2 : 1, rowbytes = ih.width * esz;
    out = malloc(rowbytes * ih.height);
    if (!out || spng_decode_image(ctx, NULL, 0, SPNG_FMT_PNG, SPNG_DECODE_PROGRESSIVE))
        goto done;
    struct spng_row_info ri;
    int e;
    do {
        if ((e = spng_get_row_info(ctx, &ri)) != 0)
            break;
        e = spng_decode_row(ctx, out + (size_t)(ih.height - 1 - ri.row_num) * rowbytes,
                            rowbytes);
    } while (e == 0);
    if (e != SPNG_EOI)
        goto done;
    *pix = out;
    out = NULL;
    *nx = ih.width;
    *ny = ih.height;
    *bits = ih.bit_depth == 16 ? 16 : 8;
    rc = 0;
done:
    free(out);
    spng_ctx_free(ctx);
    fclose(f);
    return rc;
}

/* The -z figures over the pngframe decodes of the n files. */
static int weigh_codecs(char **files, int n)
{
    size_t raw = 0, c_lz4 = 0, c_zstd = 0;
    double t_copy = 0, t_lz4 = 0, t_zstd = 0;
    for (int i = 0; i < n; i++) {
        void *pix = NULL;
        long nx, ny;
        int bits;
        if (dec_pngframe(files[i], &pix, &nx, &ny, &bits) != 0)
            return -1;
        size_t nb = (size_t)nx * (size_t)ny * (bits == 16 ? 2 : 1);
        size_t cap = (size_t)LZ4_compressBound((int)nb) + ZSTD_compressBound(nb);
        char *c = malloc(cap), *out = malloc(nb);
        if (!c || !out)
            return -1;
        int nl = LZ4_compress_default(pix, c, (int)nb, (int)cap);
        memset(out, 1, nb);   /* faulted in: the copy times the copy alone */
        double t0 = tess_mono_s();
        memcpy(out, pix, nb);
        t_copy += tess_mono_s() - t0;
        t0 = tess_mono_s();
        int ok = LZ4_decompress_safe(c, out, nl, (int)nb) == (int)nb;
        t_lz4 += tess_mono_s() - t0;
        ok = ok && memcmp(out, pix, nb) == 0;
        size_t nz = ZSTD_compress(c, cap, pix, nb, 1);
        t0 = tess_mono_s();
        ok = ok && !ZSTD_isError(nz) && ZSTD_decompress(out, nb, c, nz) == nb;
        t_zstd += tess_mono_s() - t0;
        ok = ok && memcmp(out, pix, nb) == 0;
        raw += nb;
        c_lz4 += (size_t)nl;
        c_zstd += nz;
        free(c);
        free(out);
        free(pix);
        if (!ok) {
            fprintf(stderr, "pngdecode: a codec failed on %s\n", files[i]);
            return -1;
        }
    }
    printf("STORE raw: %.1f MB, copy %.3f ms/frame (%.0f MB/s)\n", raw / 1048576.0,
           1000 * t_copy / n, raw / 1048576.0 / t_copy);
    printf("STORE lz4: %.1f MB (%.1f%%), decompress %.3f ms/frame (%.0f MB/s)\n",
           c_lz4 / 1048576.0, 100.0 * (double)c_lz4 / (double)raw, 1000 * t_lz4 / n,
           raw / 1048576.0 / t_lz4);
    printf("STORE zstd-1: %.1f MB (%.1f%%), decompress %.3f ms/frame (%.0f MB/s)\n",
           c_zstd / 1048576.0, 100.0 * (double)c_zstd / (double)raw, 1000 * t_zstd / n,
           raw / 1048576.0 / t_zstd);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dump = NULL, *only = NULL;
    int rounds = 3, a = 1, codecs = 0;
    for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
        if (strcmp(argv[a], "-z") == 0) {
            codecs = 1;
            a--;
            continue;
        }
        if (strcmp(argv[a], "-d") == 0)
            dump = argv[a + 1];
        else if (strcmp(argv[a], "-m") == 0)
            only = argv[a + 1];
        else if (strcmp(argv[a], "-r") == 0)
            rounds = atoi(argv[a + 1]);
    }
    int n = argc - a;
    if (n < 1 || rounds < 1) {
        fprintf(stderr, "usage: pngdecode [-z] [-d DUMPDIR] [-r ROUNDS] [-m DECODER] FILE...\n");
        return 2;
    }
    char **files = argv + a;
    static const struct { const char *name; decoder fn; } decs[] = {
        {"libpng", dec_libpng}, {"libspng", dec_spng}, {"pngframe_libdeflate", dec_pngframe}};
    const int ndec = (int)(sizeof decs / sizeof decs[0]);
    uint64_t sums[3] = {0};
    int failed = 0;
    for (int d = 0; d < ndec; d++) {
        if (only && strcmp(only, decs[d].name) != 0) {
            sums[d] = sums[0];
            continue;
        }
        double best = -1;
        for (int r = 0; r < rounds; r++) {
            uint64_t sum = 1469598103934665603ull;
            double t0 = tess_mono_s();
            for (int i = 0; i < n; i++) {
                void *pix = NULL;
                long nx, ny;
                int bits;
                if (decs[d].fn(files[i], &pix, &nx, &ny, &bits) != 0) {
                    fprintf(stderr, "pngdecode: %s cannot decode %s\n", decs[d].name, files[i]);
                    return 1;
                }
                size_t nb = (size_t)nx * (size_t)ny * (bits == 16 ? 2 : 1);
                if (r == 0) {   /* FNV-1a of the samples, outside the timing only once */
                    const unsigned char *p = pix;
                    for (size_t k = 0; k < nb; k++)
                        sum = (sum ^ p[k]) * 1099511628211ull;
                    if (dump && d == ndec - 1 && i < 20) {
                        char out[4096];
                        snprintf(out, sizeof out, "%s/%d.raw", dump, i);
                        FILE *f = fopen(out, "wb");
                        if (!f || fwrite(pix, 1, nb, f) != nb || fclose(f) != 0) {
                            fprintf(stderr, "pngdecode: cannot write %s\n", out);
                            return 1;
                        }
                    }
                }
                free(pix);
            }
            double t = tess_mono_s() - t0;
            if (r == 0) {
                sums[d] = sum;
                continue;   /* the first round checksums: not timed */
            }
            if (best < 0 || t < best)
                best = t;
        }
        if (rounds == 1)
            best = 0;
        printf("RESULT %s %.3f ms/frame (%d frames, best of %d rounds)\n", decs[d].name,
               1000 * best / n, n, rounds > 1 ? rounds - 1 : 1);
        if (!only && sums[d] != sums[0]) {
            printf("MISMATCH %s: samples differ from libpng's\n", decs[d].name);
            failed = 1;
        }
    }
    if (codecs && weigh_codecs(files, n) != 0)
        return 1;
    if (!failed && !only)
        printf("SAME samples from all %d decoders (FNV-1a %016llx)\n", ndec,
               (unsigned long long)sums[0]);
    return failed;
}
