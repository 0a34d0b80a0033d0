/* tessera mkstack: synthetic EM-like stacks of frames (PNG, FITS or TIFF) for tests and benchmarks.
 *
 * Each frame z (0-based) is W x H pixels: a flat background with noise, and a bright
 * textured disc (radius R = min(W, H) / 5, a soft one-pixel edge) whose centre is
 *   cx(z) = cx0 + z * dx,   cy(z) = cy0 + z * dy
 * (pixel coordinates, x = column, y = row with y = 0 the bottom row: FITS row 1, the last
 * row of a PNG or TIFF, see engine/image/stack.h).  The texture is smoothed noise (a coarse random
 * grid of 8-pixel cells, bilinearly interpolated) that moves with the disc by whole
 * pixels.  By default the disc travels 0.4 W along x and 0.2 H along y over the stack,
 * centred on the frame centre; --drift sets (dx, dy) in pixels per frame.  Values are
 * 8-bit (background 20, disc 110..230, noise +-12) or 16-bit (the same times 256).
 * The parameters go to DIR/stack.json, so that a test knows the true trajectory.
 * Files are DIR/frame_00000.png ... (or .fits, .tif), in frame order by name. */
#include "cli/commands.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char mkstack_usage[] =
    "usage: tessera mkstack --frames N --size WxH -o DIR [--format png|fits|tiff]\n"
    "                       [--bitpix 8|16]\n"
    "                       [--seed S] [--drift DX,DY] [--threads T]\n"
    "  writes N synthetic EM-like frames DIR/frame_00000.png ... (a bright textured disc\n"
    "  drifting by DX,DY pixels a frame over a noisy background; default: 0.4 W and 0.2 H\n"
    "  over the stack) and DIR/stack.json with the parameters.  PNG frames are written\n"
    "  with fast zlib settings; FITS frames are BITPIX 8, or 16 with BZERO 32768; TIFF\n"
    "  frames are unsigned 8 or 16-bit strips, deflate-compressed with fast settings.\n"
    "  exit status: 0 done, 1 cannot write, 2 usage\n";

const char *cmd_mkstack_usage(void)
{
    return mkstack_usage;
}

typedef struct mk_args {
    long frames, w, h;
    int fits, tiff, bitpix;
    unsigned long long seed;
    double dx, dy;
    int have_drift;
    int threads;
    const char *dir;
} mk_args;

typedef struct mk_shared {
    const mk_args *a;
    float *texture;           /* w x h, 0..1 */
    double cx0, cy0, radius;
    long next;                /* next frame to write (under lock) */
    int failed;
    char err[512];
    pthread_mutex_t lock;
} mk_shared;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Smoothed noise in 0..1: a random grid of `cell`-pixel cells, bilinear in between. */
static float *make_texture(long w, long h, uint64_t seed)
{
    const long cell = 8;
    long gw = w / cell + 2, gh = h / cell + 2;
    float *grid = malloc((size_t)gw * (size_t)gh * sizeof(float));
    float *t = malloc((size_t)w * (size_t)h * sizeof(float));
    if (!grid || !t) {
        free(grid);
        free(t);
        return NULL;
    }
    uint64_t s = seed ^ 0x5DEECE66DULL;
    for (long i = 0; i < gw * gh; i++)
        grid[i] = (float)((splitmix(&s) >> 11) * (1.0 / 9007199254740992.0));
    for (long y = 0; y < h; y++) {
        long gy = y / cell;
        float fy = (float)(y % cell) / (float)cell;
        for (long x = 0; x < w; x++) {
            long gx = x / cell;
            float fx = (float)(x % cell) / (float)cell;
            const float *g0 = grid + gy * gw + gx, *g1 = g0 + gw;
            t[y * w + x] = (1 - fy) * ((1 - fx) * g0[0] + fx * g0[1]) +
                           fy * ((1 - fx) * g1[0] + fx * g1[1]);
        }
    }
    free(grid);
    return t;
}

/* Fills frame z (values in 8-bit units, scaled to 16 bits by the caller's `scale`). */
static void render_frame(const mk_shared *sh, long z, unsigned short *out)
{
    const mk_args *a = sh->a;
    const long w = a->w, h = a->h;
    const unsigned scale = a->bitpix == 16 ? 256 : 1;
    uint64_t s = a->seed * 0x2545F4914F6CDD1DULL + (uint64_t)z * 0x9E3779B97F4A7C15ULL + 1;
    uint64_t rnd = splitmix(&s);
    /* Background with noise: two uniform bytes give a triangular spread of +-12. */
    for (long i = 0; i < w * h; i++) {
        if ((i & 3) == 0)
            rnd = splitmix(&s);
        unsigned b = (unsigned)(rnd >> (16 * (i & 3)));
        int n = (int)((b & 0xff) % 13) + (int)(((b >> 8) & 0xff) % 13) - 12;
        out[i] = (unsigned short)((20 + n) * (int)scale);
    }
    double cx = sh->cx0 + (double)z * a->dx, cy = sh->cy0 + (double)z * a->dy;
    double r = sh->radius;
    long x0 = (long)floor(cx - r - 1), x1 = (long)ceil(cx + r + 1);
    long y0 = (long)floor(cy - r - 1), y1 = (long)ceil(cy + r + 1);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > w - 1) x1 = w - 1;
    if (y1 > h - 1) y1 = h - 1;
    long sx = (long)floor(cx), sy = (long)floor(cy);
    for (long y = y0; y <= y1; y++) {
        double ddy = (double)y - cy;
        long ty = ((y - sy + h / 2) % h + h) % h;   /* disc centre on the texture centre */
        for (long x = x0; x <= x1; x++) {
            double ddx = (double)x - cx;
            double m = r - sqrt(ddx * ddx + ddy * ddy) + 0.5;
            if (m <= 0)
                continue;
            if (m > 1)
                m = 1;
            long tx = ((x - sx + w / 2) % w + w) % w;
            double v = 110.0 + 120.0 * sh->texture[ty * w + tx];
            double bg = out[y * w + x] / (double)scale;
            double o = bg + m * (v - 20.0);
            if (o > 255)
                o = 255;
            out[y * w + x] = (unsigned short)lround(o * scale);
        }
    }
}

/* Writes frame `pix` (w x h values, row 0 = FITS row 1) to `path` as BITPIX 8, or 16
 * unsigned (BZERO 32768); `row` holds w doubles and `enc` w * h * bitpix / 8 bytes. */
static int write_fits(const char *path, const unsigned short *pix, long w, long h, int bitpix,
                      double *row, unsigned char *enc, char *err, size_t errlen)
{
    fitswrite_image im = { .bitpix = bitpix, .naxis = 2, .naxes = { w, h },
                           .u16 = bitpix == 16 };
    long long start = 0;
    int rc = fitswrite_file(path, &im, &start, err, errlen);
    if (rc)
        return rc;
    size_t es = (size_t)bitpix / 8;
    for (long y = 0; y < h; y++) {
        for (long x = 0; x < w; x++)
            row[x] = pix[y * w + x];
        fitswrite_encode(bitpix, bitpix == 16 ? 32768.0 : 0.0, row, enc + (size_t)(y * w) * es,
                         w);
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int bad = fd < 0 || tess_pwrite_all(fd, enc, (size_t)(w * h) * es, (off_t)start) != 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(e));
        return TESS_EIO;
    }
    return fitswrite_checksum_file(path, err, errlen);
}

static void *worker(void *arg)
{
    mk_shared *sh = arg;
    const mk_args *a = sh->a;
    size_t n = (size_t)a->w * (size_t)a->h;
    unsigned short *pix = malloc(n * sizeof(unsigned short));
    double *row = malloc((size_t)a->w * sizeof(double));
    unsigned char *enc = malloc(n * sizeof(unsigned short));
    char err[512] = "";
    int failed = !pix || !row || !enc;
    if (failed)
        snprintf(err, sizeof(err), "out of memory");
    for (;;) {
        pthread_mutex_lock(&sh->lock);
        long z = sh->failed || failed ? a->frames : sh->next++;
        pthread_mutex_unlock(&sh->lock);
        if (z >= a->frames)
            break;
        render_frame(sh, z, pix);
        char path[4096];
        snprintf(path, sizeof(path), "%s/frame_%05ld.%s", a->dir, z,
                 a->fits ? "fits" : a->tiff ? "tif" : "png");
        int rc = a->fits ? write_fits(path, pix, a->w, a->h, a->bitpix, row, enc, err,
                                      sizeof(err))
                 : a->tiff ? tiffframe_write(path, pix, a->w, a->h, a->bitpix, 1, err, sizeof(err))
                         : frame_write_png(path, pix, a->w, a->h, a->bitpix, 1, err, sizeof(err));
        if (rc)
            failed = 1;
    }
    if (failed) {
        pthread_mutex_lock(&sh->lock);
        if (!sh->failed)
            snprintf(sh->err, sizeof(sh->err), "%s", err);
        sh->failed = 1;
        pthread_mutex_unlock(&sh->lock);
    }
    free(pix);
    free(row);
    free(enc);
    return NULL;
}

/* mkdir -p: creates `dir` and its missing parents.  Returns 0 or -1 with errno. */
static int mkdir_p(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return -1;
            *q = '/';
        }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Prints "tessera mkstack: WHAT 'V'" and the usage; returns the usage exit status. */
static int usage_error(const char *what, const char *v)
{
    fprintf(stderr, "tessera mkstack: %s", what);
    if (v)
        fprintf(stderr, " '%s'", v);
    fprintf(stderr, "\n%s", mkstack_usage);
    return 2;
}

int cmd_mkstack(int argc, char **argv)
{
    static const struct option opts[] = {
        {"frames", required_argument, NULL, 'n'}, {"size", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'}, {"format", required_argument, NULL, 'f'},
        {"bitpix", required_argument, NULL, 'b'}, {"seed", required_argument, NULL, 'S'},
        {"drift", required_argument, NULL, 'd'}, {"threads", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    mk_args a;
    memset(&a, 0, sizeof(a));
    a.bitpix = 8;
    a.seed = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    a.threads = ncpu > 0 ? (int)ncpu : 1;
    optind = 1;
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            a.frames = strtol(optarg, &end, 10);
            if (*end || a.frames < 1 || a.frames > 99999)
                return usage_error("--frames must be 1..99999, got", optarg);
            break;
        case 's':
            if (sscanf(optarg, "%ldx%ld", &a.w, &a.h) != 2 || a.w < 8 || a.h < 8 ||
                a.w > 65535 || a.h > 65535)
                return usage_error("--size must be WxH, 8..65535 each, got", optarg);
            break;
        case 'o':
            a.dir = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "png") && strcmp(optarg, "fits") && strcmp(optarg, "tiff"))
                return usage_error("--format must be png, fits or tiff, got", optarg);
            a.fits = strcmp(optarg, "fits") == 0;
            a.tiff = strcmp(optarg, "tiff") == 0;
            break;
        case 'b':
            if (strcmp(optarg, "8") && strcmp(optarg, "16"))
                return usage_error("--bitpix must be 8 or 16, got", optarg);
            a.bitpix = atoi(optarg) == 16 ? 16 : 8;
            break;
        case 'S':
            a.seed = strtoull(optarg, &end, 10);
            if (*end || !*optarg)
                return usage_error("--seed must be a non-negative integer, got", optarg);
            break;
        case 'd':
            if (sscanf(optarg, "%lf,%lf", &a.dx, &a.dy) != 2 || !isfinite(a.dx) || !isfinite(a.dy))
                return usage_error("--drift must be DX,DY in pixels a frame, got", optarg);
            a.have_drift = 1;
            break;
        case 't':
            a.threads = (int)strtol(optarg, &end, 10);
            if (*end || a.threads < 1 || a.threads > 256)
                return usage_error("--threads must be 1..256, got", optarg);
            break;
        case 'h':
            fputs(mkstack_usage, stdout);
            return 0;
        default:
            fputs(mkstack_usage, stderr);
            return 2;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    if (!a.frames || !a.w || !a.dir)
        return usage_error("--frames, --size and -o are required", NULL);
    if (!a.have_drift) {
        a.dx = 0.4 * (double)a.w / (double)a.frames;
        a.dy = 0.2 * (double)a.h / (double)a.frames;
    }
    if (mkdir_p(a.dir) != 0) {
        fprintf(stderr, "tessera mkstack: cannot create %s: %s\n", a.dir, strerror(errno));
        return 1;
    }
    mk_shared sh;
    memset(&sh, 0, sizeof(sh));
    sh.a = &a;
    sh.radius = (double)(a.w < a.h ? a.w : a.h) / 5.0;
    sh.cx0 = (double)a.w / 2.0 - 0.5 * (double)(a.frames - 1) * a.dx;
    sh.cy0 = (double)a.h / 2.0 - 0.5 * (double)(a.frames - 1) * a.dy;
    sh.texture = make_texture(a.w, a.h, a.seed);
    if (!sh.texture) {
        fprintf(stderr, "tessera mkstack: out of memory\n");
        return 1;
    }
    pthread_mutex_init(&sh.lock, NULL);
    int nt = a.threads > a.frames ? (int)a.frames : a.threads;
    pthread_t *th = calloc((size_t)nt, sizeof(pthread_t));
    int started = 0;
    for (int i = 0; th && i < nt; i++)
        if (pthread_create(&th[i], NULL, worker, &sh) == 0)
            started++;
        else
            break;
    if (started == 0)
        worker(&sh);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    free(sh.texture);
    pthread_mutex_destroy(&sh.lock);
    if (sh.failed) {
        fprintf(stderr, "tessera mkstack: %s\n", sh.err);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/stack.json", a.dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tessera mkstack: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\"frames\": %ld, \"size\": [%ld, %ld], \"format\": \"%s\", \"bitpix\": %d, "
            "\"seed\": %llu, \"radius\": %.17g, \"center0\": [%.17g, %.17g], "
            "\"drift\": [%.17g, %.17g], \"y0\": \"%s\"}\n",
            a.frames, a.w, a.h, a.fits ? "fits" : a.tiff ? "tiff" : "png", a.bitpix, a.seed,
            sh.radius, sh.cx0, sh.cy0, a.dx, a.dy,
            a.fits ? "FITS row 1" : a.tiff ? "last TIFF row" : "last PNG row");
    if (fclose(f) != 0) {
        fprintf(stderr, "tessera mkstack: cannot write %s\n", path);
        return 1;
    }
    return 0;
}
