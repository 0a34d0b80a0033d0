/* TIFF decode timing: 1000 x 1000 8-bit greyscale frames written by libtiff uncompressed,
 * deflate and LZW (strips of 16 rows, as tifffile and most microscopy writers make them;
 * also deflate and LZW with the horizontal predictor), each decoded whole N times through
 * engine/image/tiffframe (stored samples, as a stack frame is decoded) and through
 * frame_read_region (doubles, as the plane store reads a plane).
 *
 * usage: tiffbench WORKDIR [N]   (N decodes per file, default 50; files go to WORKDIR)
 * Prints "RESULT name value unit" lines: ms per frame (the median of N, and the least)
 * and the file size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"

#define NX 1000
#define NY 1000

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* An electron-microscopy-like frame: smooth structure and grain, deterministic. */
static void make_frame(unsigned char *px)
{
    uint32_t r = 12345;
    for (long y = 0; y < NY; y++)
        for (long x = 0; x < NX; x++) {
            r = r * 1664525u + 1013904223u;
            double v = 120 + 50 * sin(x / 17.0) * cos(y / 23.0) + (double)(r >> 28) - 8;
            px[y * NX + x] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
}

static int write_tiff(const char *path, const unsigned char *px, int comp, int predictor)
{
    TIFF *t = TIFFOpen(path, "w");
    if (!t)
        return -1;
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)NX);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)NY);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, (uint16_t)8);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)1);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, (uint16_t)PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_COMPRESSION, (uint16_t)comp);
    if (predictor)
        TIFFSetField(t, TIFFTAG_PREDICTOR, (uint16_t)PREDICTOR_HORIZONTAL);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, (uint32_t)16);
    unsigned char row[NX];   /* the predictor differences the row it is given in place */
    for (uint32_t y = 0; y < NY; y++) {
        memcpy(row, px + (size_t)y * NX, NX);
        if (TIFFWriteScanline(t, row, y, 0) != 1) {
            TIFFClose(t);
            return -1;
        }
    }
    TIFFClose(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tiffbench WORKDIR [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 50;
    if (n < 1)
        n = 1;
    static const struct { const char *name; int comp, pred; } kinds[] = {
        {"none", COMPRESSION_NONE, 0},
        {"deflate", COMPRESSION_ADOBE_DEFLATE, 0},
        {"lzw", COMPRESSION_LZW, 0},
        {"deflate_pred", COMPRESSION_ADOBE_DEFLATE, 1},
        {"lzw_pred", COMPRESSION_LZW, 1},
    };
    unsigned char *px = malloc(NX * NY), *back = malloc(NX * NY);
    double *d = malloc(NX * NY * sizeof(double)), *ms = malloc((size_t)n * sizeof(double));
    if (!px || !back || !d || !ms)
        return 1;
    make_frame(px);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char path[4096], err[256];
        snprintf(path, sizeof path, "%s/frame_%s.tif", argv[1], kinds[k].name);
        if (write_tiff(path, px, kinds[k].comp, kinds[k].pred) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        tiffframe *t;
        if (tiffframe_open(path, &t, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            double t0 = tess_mono_s();
            if (tiffframe_read(t, 0, 0, 0, NX, NY, TIFFFRAME_OUT_STORED, back, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            ms[i] = (tess_mono_s() - t0) * 1e3;
        }
        tiffframe_close(t);
        /* stored order: row 0 of the result is the last TIFF row */
        if (memcmp(back, px + (size_t)(NY - 1) * NX, NX) != 0) {
            fprintf(stderr, "%s: decoded values differ\n", path);
            return 1;
        }
        qsort(ms, (size_t)n, sizeof(double), cmp_double);
        printf("RESULT tiff_%s_file_kb %.1f KB\n", kinds[k].name, size / 1024.0);
        printf("RESULT tiff_%s_decode_u8 %.3f ms/frame (min %.3f)\n", kinds[k].name, ms[n / 2],
               ms[0]);
        for (int i = 0; i < n; i++) {
            double t0 = tess_mono_s();
            if (frame_read_region(path, 0, 0, 0, 0, NX, NY, d, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            ms[i] = (tess_mono_s() - t0) * 1e3;
        }
        qsort(ms, (size_t)n, sizeof(double), cmp_double);
        printf("RESULT tiff_%s_read_f64 %.3f ms/frame (min %.3f)\n", kinds[k].name, ms[n / 2],
               ms[0]);
        unlink(path);
    }
    free(px);
    free(back);
    free(d);
    free(ms);
    return 0;
}
