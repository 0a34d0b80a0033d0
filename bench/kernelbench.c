/* Tessera's side of bench/kernels: the interpolation kernels on a given coordinate map,
 * alone and inside a whole reprojection that computes its own coordinates.
 *
 * usage: kernelbench DIR ROUNDS METHOD...
 *   DIR holds src.npy (float32, NY x NX, C order), mapx.npy and mapy.npy (float32,
 *   H x W: the input position, 0-based, of each output pixel) and geom.txt ("NX NY W H
 *   ROT": the map is output pixel (i, j) rotated by ROT degrees about the centres of
 *   both grids, which is what a TAN target with the same reference point, rotated by
 *   ROT, gives; bench/kernels writes all four).
 *   METHOD: nearest, bilinear, bicubic, lanczos3 or exact.
 * Times are CPU seconds of the working thread (cpu_s); for each method, best of ROUNDS:
 *   "RESULT method kernel MPIXS": rp_kernel_sample on the map, a row at a time, the
 *     map's floats widened to doubles and the values narrowed to float32 included, the
 *     kernel's preparation (bicubic's prefilter) not (exact has none: it is not a point
 *     kernel);
 *   "RESULT method coords MPIXS": rp_reproject of the float32 source onto the rotated
 *     TAN grid with 1 thread (coordinates by the approximate grid, preparation and
 *     everything else included, no footprint), the way a request runs it;
 *   "RESULT memcpy - MPIXS": memcpy of the output's W x H float32 values (the copy bound),
 *     printed once;
 *   "CHECK method N": output values where the two Tessera runs differ by more than 1e-3
 *     of the source's range (the map's float32 positions against the engine's doubles).
 * With KERNELBENCH_DUMP=DIR set, each method's two outputs are also written raw (float32,
 * H x W) to DIR/METHOD.kernel.f32 and DIR/METHOD.coords.f32, to compare builds with cmp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/hugemem.h"
#include "engine/sky/kernels.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

/* CPU seconds of the calling thread: what "per core" means, and what other load on the
 * machine stretches much less than the wall clock (every timed call runs on this thread:
 * rp_reproject with 1 thread works on its caller's). */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Reads a float32 C-order .npy file of 2 dimensions: returns its values (tess_alloc_huge,
 * as the plane store and the command line hold a source plane) and
 * *rows, *cols, or NULL with a message on stderr. */
static float *read_npy(const char *path, long *rows, long *cols)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    unsigned char pre[10];
    float *v = NULL;
    char *hdr = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) {
        fprintf(stderr, "%s: not a version 1 .npy file\n", path);
        goto out;
    }
    size_t hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    hdr = calloc(1, hl + 1);
    if (!hdr || fread(hdr, 1, hl, f) != hl) {
        fprintf(stderr, "%s: short header\n", path);
        goto out;
    }
    const char *s = strstr(hdr, "'shape': (");
    if (!strstr(hdr, "'descr': '<f4'") || !strstr(hdr, "'fortran_order': False") || !s
        || sscanf(s + 10, "%ld, %ld", rows, cols) != 2 || *rows < 1 || *cols < 1) {
        fprintf(stderr, "%s: not a 2-D little-endian float32 C-order array\n", path);
        goto out;
    }
    size_t n = (size_t)*rows * (size_t)*cols;
    v = tess_alloc_huge(n * sizeof(float));
    if (!v || fread(v, sizeof(float), n, f) != n) {
        fprintf(stderr, "%s: short data\n", path);
        free(v);
        v = NULL;
    }
out:
    free(hdr);
    fclose(f);
    return v;
}

/* Writes n floats to DIR/NAME.WHAT.f32 when KERNELBENCH_DUMP=DIR is set.  Returns 0 or -1
 * (message on stderr). */
static int dump(const char *name, const char *what, const float *v, size_t n)
{
    const char *d = getenv("KERNELBENCH_DUMP");
    if (!d || !*d)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.f32", d, name, what);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(v, sizeof(float), n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        perror(path);
    return ok ? 0 : -1;
}

/* Appends one 80-character card, KEY = VALUE (a number, or the quoted text when s is not
 * NULL), to `cards`. */
static void card(char *cards, int *n, const char *key, double v, const char *s)
{
    char c[81];
    if (s)
        snprintf(c, sizeof c, "%-8s= '%s'", key, s);
    else
        snprintf(c, sizeof c, "%-8s= %.17g", key, v);
    snprintf(cards + (size_t)*n * 80, 81, "%-80s", c);
    (*n)++;
}

/* A TAN WCS of nx x ny pixels of 1", reference point at the centre, rotated by rot
 * degrees (the PC matrix of bench/reproject's headers). */
static skywcs *tan_wcs(long nx, long ny, double rot)
{
    static char cards[16 * 80 + 1];
    int n = 0;
    double c = cos(rot * M_PI / 180.0), s = sin(rot * M_PI / 180.0);
    card(cards, &n, "NAXIS", 2, NULL);
    card(cards, &n, "NAXIS1", (double)nx, NULL);
    card(cards, &n, "NAXIS2", (double)ny, NULL);
    card(cards, &n, "CTYPE1", 0, "RA---TAN");
    card(cards, &n, "CTYPE2", 0, "DEC--TAN");
    card(cards, &n, "CRVAL1", 150.0, NULL);
    card(cards, &n, "CRVAL2", 30.0, NULL);
    card(cards, &n, "CRPIX1", (double)(nx + 1) / 2.0, NULL);
    card(cards, &n, "CRPIX2", (double)(ny + 1) / 2.0, NULL);
    card(cards, &n, "CDELT1", -1.0 / 3600.0, NULL);
    card(cards, &n, "CDELT2", 1.0 / 3600.0, NULL);
    card(cards, &n, "PC1_1", c, NULL);
    card(cards, &n, "PC1_2", -s, NULL);
    card(cards, &n, "PC2_1", s, NULL);
    card(cards, &n, "PC2_2", c, NULL);
    card(cards, &n, "RADESYS", 0, "ICRS");
    skywcs *w = NULL;
    char err[256];
    if (skywcs_parse(cards, n, &w, err, sizeof err) != 0) {
        fprintf(stderr, "kernelbench: %s\n", err);
        return NULL;
    }
    return w;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: kernelbench DIR ROUNDS METHOD...\n");
        return 2;
    }
    const char *dir = argv[1];
    int rounds = atoi(argv[2]);
    rounds = rounds < 1 ? 1 : rounds;
    char path[4096];
    long ny, nx, h, w, h2, w2, gnx, gny, gw, gh;
    double rot;
    snprintf(path, sizeof path, "%s/geom.txt", dir);
    FILE *g = fopen(path, "r");
    if (!g || fscanf(g, "%ld %ld %ld %ld %lf", &gnx, &gny, &gw, &gh, &rot) != 5) {
        fprintf(stderr, "kernelbench: cannot read %s\n", path);
        return 1;
    }
    fclose(g);
    snprintf(path, sizeof path, "%s/src.npy", dir);
    float *src = read_npy(path, &ny, &nx);
    snprintf(path, sizeof path, "%s/mapx.npy", dir);
    float *mx = read_npy(path, &h, &w);
    snprintf(path, sizeof path, "%s/mapy.npy", dir);
    float *my = read_npy(path, &h2, &w2);
    if (!src || !mx || !my || h != h2 || w != w2 || nx != gnx || ny != gny || w != gw
        || h != gh) {
        fprintf(stderr, "kernelbench: inputs missing or of different sizes\n");
        return 1;
    }
    size_t npx = (size_t)w * (size_t)h;
    float *outk = tess_alloc_huge(npx * sizeof(float));
    float *outc = tess_alloc_huge(npx * sizeof(float));
    double *xr = malloc(sizeof(double) * (size_t)w * 3), *yr = xr + w, *vr = xr + 2 * w;
    skywcs *win = tan_wcs(nx, ny, 0.0), *wout = tan_wcs(w, h, rot);
    if (!outk || !outc || !xr || !win || !wout)
        return 1;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t k = 0; k < (size_t)nx * (size_t)ny; k++) {
        lo = src[k] < lo ? src[k] : lo;
        hi = src[k] > hi ? src[k] : hi;
    }

    /* The copy bound, into memory already mapped (as every run's output is after its
     * first round). */
    memset(outk, 0, npx * sizeof(float));
    memset(outc, 0, npx * sizeof(float));
    double best = INFINITY;
    for (int r = 0; r < rounds; r++) {
        double t0 = cpu_s();
        memcpy(outk, src, npx <= (size_t)nx * (size_t)ny ? npx * sizeof(float) : 0);
        double t = cpu_s() - t0;
        best = t < best ? t : best;
    }
    printf("RESULT memcpy - %.1f\n", (double)npx / best / 1e6);
    fflush(stdout);

    for (int a = 3; a < argc; a++) {
        rp_method m;
        if (rp_method_parse(argv[a], &m) != 0) {
            fprintf(stderr, "kernelbench: unknown method %s\n", argv[a]);
            return 2;
        }
        char err[256];
        rp_plane pl = { src, RP_F32, nx, ny };
        rp_kernel *k = m == RP_EXACT ? NULL : rp_kernel_new(m, &pl, err, sizeof err);
        if (m != RP_EXACT && !k) {
            fprintf(stderr, "kernelbench: %s\n", err);
            return 1;
        }
        if (k) {
            best = INFINITY;
            for (int r = 0; r < rounds; r++) {
                double t0 = cpu_s();
                for (long j = 0; j < h; j++) {
                    const float *px = mx + (size_t)j * (size_t)w, *py = my + (size_t)j * (size_t)w;
                    for (long i = 0; i < w; i++) {
                        xr[i] = px[i];
                        yr[i] = py[i];
                    }
                    rp_kernel_sample(k, (size_t)w, xr, yr, vr);
                    float *o = outk + (size_t)j * (size_t)w;
                    for (long i = 0; i < w; i++)
                        o[i] = (float)vr[i];
                }
                double t = cpu_s() - t0;
                best = t < best ? t : best;
            }
            printf("RESULT %s kernel %.1f\n", argv[a], (double)npx / best / 1e6);
            if (dump(argv[a], "kernel", outk, npx) != 0)
                return 1;
            fflush(stdout);
            rp_kernel_free(k);
        }
        rp_cube sc = { src, RP_F32, nx, ny, 1 }, dc = { outc, RP_F32, w, h, 1 };
        rp_options o;
        rp_options_init(&o);
        o.method = m;
        o.threads = 1;
        best = INFINITY;
        for (int r = 0; r < rounds; r++) {
            double t0 = cpu_s();
            long rc = rp_reproject(win, &sc, wout, &dc, NULL, &o, err, sizeof err);
            double t = cpu_s() - t0;
            if (rc < 0) {
                fprintf(stderr, "kernelbench: %s: %s\n", argv[a], err);
                return 1;
            }
            best = t < best ? t : best;
        }
        printf("RESULT %s coords %.1f\n", argv[a], (double)npx / best / 1e6);
        if (dump(argv[a], "coords", outc, npx) != 0)
            return 1;
        if (m != RP_EXACT) {
            /* Bicubic and lanczos3 amplify the map's float32 rounding (5e-4 pixel at 4096)
             * by the local gradient: compare within 1e-3 of the range. */
            double tol = 1e-3 * ((double)hi - (double)lo);
            size_t bad = 0;
            for (size_t q = 0; q < npx; q++) {
                int fa = isfinite(outk[q]), fb = isfinite(outc[q]);
                bad += fa != fb || (fa && fabs((double)outk[q] - (double)outc[q]) > tol);
            }
            printf("CHECK %s %zu\n", argv[a], bad);
        }
        fflush(stdout);
    }
    skywcs_free(win);
    skywcs_free(wout);
    free(src);
    free(mx);
    free(my);
    free(outk);
    free(outc);
    free(xr);
    return 0;
}
