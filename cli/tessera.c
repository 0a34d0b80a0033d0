/* The tessera command: offline reprojection of FITS images and cubes, and static HiPS trees, with the Tessera engine. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fitsio.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/pyramid.h"
#include "engine/image/render.h"
#include "engine/hips/healpix.h"
#include "engine/sky/kernels.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"
#include "engine/base/byteswap.h"
#include "engine/base/pool.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hugemem.h"

/* Exit statuses (documented in the usage text). */
enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,        /* unreadable input, bad WCS, I/O error, out of memory */
    EXIT_USAGE = 2,       /* bad command line */
    EXIT_NOOVERLAP = 3,   /* the target does not overlap the input */
    EXIT_INTERRUPTED = 130
};

/* Cards in a text header file at most (a cap on input that grows). */
#define MAX_CARDS 100000

static const char reproject_usage[] =
    "usage: tessera reproject IN.fits[HDU] --target HDR_OR_FITS[HDU] -o OUT.fits\n"
    "                         [--method M] [--max-coord-error PX] [--threads N]\n"
    "                         [--quiet] [--timing]\n"
    "\n"
    "Reprojects the image (or cube) in HDU number HDU of IN.fits (0-based, default 0)\n"
    "onto the celestial WCS and size (NAXIS1, NAXIS2) of the target: a text header (one\n"
    "80-character card a line) or a FITS file whose header is used.\n"
    "  --method M             nearest, bilinear (default), bicubic, lanczos3, exact\n"
    "  --max-coord-error PX   bound on the coordinate grid's error, output pixels\n"
    "                         (default 0.001; 0 = exact transform at every pixel)\n"
    "  --threads N            threads (default 0 = one per core)\n"
    "  --quiet                no progress bar (it is drawn only on a terminal anyway)\n"
    "  --timing               print the time of each phase (read, reproject, write)\n"
    "OUT.fits: HDU 0 the reprojected data with the target's WCS cards; HDU 1 FOOTPRINT,\n"
    "for interpolation 1 where the output is finite and 0 elsewhere (BITPIX 8), for\n"
    "exact the covered fraction of each pixel (BITPIX -32).  Data are float32 (BITPIX\n"
    "-32) for BITPIX 8, 16 and -32 inputs, float64 for BITPIX 32, 64 and -64; BSCALE and\n"
    "BZERO are applied (in float32 for BITPIX 8 and 16, as astropy does) and BLANK\n"
    "pixels become NaN.  A cube's celestial axes (axes 1 and 2) are reprojected and its\n"
    "third axis is passed through (the target may be 2-D, or 3-D with the same axis).\n"
    "The output is written to a temporary file next to OUT.fits and renamed at the end.\n"
    "Exit status: 0 done, 1 failure (input, WCS, I/O, memory), 2 bad command line,\n"
    "3 the target does not overlap the input, 130 interrupted (SIGINT/SIGTERM).\n";

static const char hips_usage[] =
    "usage: tessera hips IN.fits[HDU] -o DIR [--order K] [--format png,fits]\n"
    "                    [--frame equatorial|galactic] [--method M] [--plane Z]\n"
    "                    [--stretch S] [--min-cut C] [--max-cut C] [--cmap NAME]\n"
    "                    [--max-coord-error PX] [--threads N] [--quiet] [--timing]\n"
    "\n"
    "Writes plane Z of the image (or cube) in HDU number HDU of IN.fits (0-based, default\n"
    "0) as a static IVOA HiPS 1.0 survey that any web server can serve.  At the deepest\n"
    "order the tiles are those tesserad serves at /hips/{name}/ for the same image, frame\n"
    "and method; lower orders are averaged from their children (as Hipsgen does), where\n"
    "tesserad resamples reduced copies of the image, so they differ slightly.\n"
    "  DIR/properties, DIR/index.html, DIR/Moc.fits, DIR/Norder3/Allsky.{png,fits}\n"
    "  DIR/Norder{K}/Dir{D}/Npix{N}.{png,fits}: 512 x 512 tiles, nested HEALPix\n"
    "The deepest order is resampled from the image; every lower order down to 0 is made\n"
    "from its children (each pixel the mean of the finite pixels of its 2 x 2 children),\n"
    "as Hipsgen does.  Tiles without a finite pixel are not written.\n"
    "  --order K              deepest order, 3..20 (default: the first order whose tile\n"
    "                         pixels are as fine as the image's pixels, at least 3)\n"
    "  --format LIST          tile formats, comma-separated: png, jpg, fits\n"
    "                         (default png,fits)\n"
    "  --frame F              equatorial (ICRS, default) or galactic\n"
    "  --method M             nearest, bilinear (default), bicubic, lanczos3\n"
    "  --plane Z              plane of a cube, 0-based (default 0)\n"
    "  --stretch S            PNG/JPEG: linear (default), sqrt, log, asinh, power\n"
    "  --min-cut C            PNG/JPEG: lower cut, a value or a percentile such as 0.5%\n"
    "                         (default 0.5%)\n"
    "  --max-cut C            PNG/JPEG: upper cut (default 99.5%); percentiles are those\n"
    "                         of the whole plane, so that neighbouring tiles match\n"
    "  --cmap NAME            PNG/JPEG: grey (default), viridis, inferno, magma, plasma,\n"
    "                         cubehelix\n"
    "  --max-coord-error PX   bound on the coordinate grid's error, tile pixels\n"
    "                         (default 0.001; 0 = exact transform at every pixel)\n"
    "  --threads N            threads (default 0 = one per core)\n"
    "  --quiet                no progress bar (it is drawn only on a terminal anyway)\n"
    "  --timing               print the time of each phase\n"
    "DIR must not exist or be empty.  The tree is written in a temporary directory next\n"
    "to DIR and renamed at the end; on failure or interruption nothing is left.\n"
    "Exit status: 0 done, 1 failure (input, WCS, I/O, memory, no finite pixel), 2 bad\n"
    "command line, 130 interrupted (SIGINT/SIGTERM).\n";

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "tessera: <message>\n" on stderr. */
static void msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tessera: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* cfitsio's text for a status code. */
static const char *fits_text(int status, char buf[FLEN_STATUS])
{
    fits_get_errstatus(status, buf);
    return buf;
}

/* ------------------------------------------------------------------------------------ */
/* Command line                                                                           */

typedef struct reproject_args {
    char *in_path;
    int in_hdu;
    char *target_path;
    int target_hdu;
    const char *out_path;
    rp_method method;
    double max_coord_error;
    int threads;
    int quiet;
    int timing;
} reproject_args;

/* Splits "path[N]" into a malloc'd path and N (0-based HDU); a name without a trailing
 * "[digits]" is all path, HDU 0.  Returns 0, or TESS_EINVAL (bad HDU number) /
 * TESS_ENOMEM. */
static int split_hdu(const char *arg, char **path, int *hdu)
{
    size_t n = strlen(arg);
    *hdu = 0;
    if (n >= 3 && arg[n - 1] == ']') {
        const char *lb = strrchr(arg, '[');
        if (lb && lb > arg) {
            const char *p = lb + 1;
            long v = 0;
            int digits = 0;
            while (*p >= '0' && *p <= '9') {
                if (v > 100000)
                    return TESS_EINVAL;
                v = v * 10 + (*p - '0');
                p++;
                digits++;
            }
            if (digits > 0 && p == arg + n - 1) {
                *hdu = (int)v;
                n = (size_t)(lb - arg);
            }
        }
    }
    *path = strndup(arg, n);
    return *path ? 0 : TESS_ENOMEM;
}

/* Parses a number; returns 0 or -1. */
static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return (errno || end == s || *end) ? -1 : 0;
}

static int parse_int(const char *s, long lo, long hi, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = (int)x;
    return 0;
}

/* Matches argv[*i] against `opts`, options that take a value ("--name VALUE" or
 * "--name=VALUE"), and moves *i onto the last argument used.  Returns the option's index
 * in `opts` with *val set, or -1 after printing why (unknown option, missing value;
 * `cmd` names the command in the message). */
static int option_value(int argc, char **argv, int *i, const char *cmd,
                        const char *const *opts, const char **val)
{
    const char *arg = argv[*i];
    for (int k = 0; opts[k]; k++) {
        size_t len = strlen(opts[k]);
        if (strncmp(arg, opts[k], len) != 0 || (arg[len] != '\0' && arg[len] != '='))
            continue;
        if (arg[len] == '=') {
            *val = arg + len + 1;
        } else if (*i + 1 < argc) {
            *val = argv[++*i];
        } else {
            msg("%s: %s needs a value", cmd, arg);
            return -1;
        }
        return k;
    }
    msg("%s: unknown option '%s' (see tessera %s --help)", cmd, arg, cmd);
    return -1;
}

/* Parses `tessera reproject ...` arguments (argv[0] is "reproject").  Options take their
 * value as the next argument or after '='.  Returns 0, 1 (--help shown) or EXIT_USAGE
 * after printing why. */
static int parse_reproject(int argc, char **argv, reproject_args *a)
{
    memset(a, 0, sizeof *a);
    a->method = RP_BILINEAR;
    a->max_coord_error = 0.001;
    const char *in = NULL, *target = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(reproject_usage, stdout);
            return 1;
        }
        if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
            a->quiet = 1;
            continue;
        }
        if (strcmp(arg, "--timing") == 0) {
            a->timing = 1;
            continue;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (in) {
                msg("reproject: one input file only ('%s' and '%s')", in, arg);
                return EXIT_USAGE;
            }
            in = arg;
            continue;
        }
        static const char *const opts[] = { "--target", "-o", "--output", "--method",
                                            "--max-coord-error", "--threads", NULL };
        const char *val = NULL;
        int which = option_value(argc, argv, &i, "reproject", opts, &val);
        if (which < 0)
            return EXIT_USAGE;
        switch (which) {
        case 0:
            target = val;
            break;
        case 1:
        case 2:
            a->out_path = val;
            break;
        case 3:
            if (rp_method_parse(val, &a->method)) {
                msg("reproject: --method must be nearest, bilinear, bicubic, lanczos3 or exact, "
                    "not '%s'", val);
                return EXIT_USAGE;
            }
            break;
        case 4:
            if (parse_double(val, &a->max_coord_error) || !isfinite(a->max_coord_error)
                || a->max_coord_error < 0.0) {
                msg("reproject: --max-coord-error must be a number >= 0, not '%s'", val);
                return EXIT_USAGE;
            }
            break;
        default:
            if (parse_int(val, 0, 1024, &a->threads)) {
                msg("reproject: --threads must be an integer from 0 to 1024, not '%s'", val);
                return EXIT_USAGE;
            }
            break;
        }
    }
    if (!in || !target || !a->out_path) {
        msg("reproject: %s is required (see tessera reproject --help)",
            !in ? "an input file" : !target ? "--target" : "-o OUT.fits");
        return EXIT_USAGE;
    }
    if (split_hdu(in, &a->in_path, &a->in_hdu)
        || split_hdu(target, &a->target_path, &a->target_hdu)) {
        msg("reproject: bad HDU number in '%s' or '%s'", in, target);
        return EXIT_USAGE;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Reading                                                                                */

/* An input image: header (info.header, info.nkeys), WCS, pixels. */
typedef struct input {
    fitsimg_info info;
    skywcs *wcs;
    rp_cube cube;
} input;

static void input_release(input *in)
{
    fitsimg_info_release(&in->info);
    skywcs_free(in->wcs);
    free(in->cube.data);
    memset(in, 0, sizeof *in);
}

/* A parallel read: slices of the data unit, each through fitsimg_read_values. */
typedef struct read_arg {
    const char *path;
    int hdu;
    fitsimg_values kind;
    size_t first;             /* slice [i0, i1) reads values first + i0 .. first + i1 - 1 */
    unsigned char *dst;       /* ... into dst + i0 es */
    size_t es;
    atomic_int failed;        /* the first failure's TESS_E* code */
    char err[256];            /* its reason, written by the thread that set `failed` */
} read_arg;

static void read_slice(void *p, size_t i0, size_t i1)
{
    read_arg *a = p;
    char err[256] = "";
    int rc = fitsimg_read_values(a->path, a->hdu, a->kind, a->first + i0, i1 - i0,
                                 a->dst + i0 * a->es, err, sizeof err);
    int none = 0;
    if (rc && atomic_compare_exchange_strong(&a->failed, &none, rc))
        snprintf(a->err, sizeof a->err, "%s", err);
}

/* Reads values [first, first + n) of HDU `hdu` of `path` as `kind` (es bytes each) into
 * dst, in up to `threads` slices at once on `workers` and this thread.  Returns 0 or -1
 * after printing why. */
static int read_parallel(pool *workers, int threads, const char *path, int hdu,
                         fitsimg_values kind, size_t first, void *dst, size_t n, size_t es)
{
    read_arg a = { path, hdu, kind, first, dst, es, 0, "" };
    /* Slices of whole 4 KiB of values keep every pread page-aligned in the file cache. */
    pool_for(workers, POOL_BATCH, threads, n, 4096, read_slice, &a);
    if (atomic_load(&a.failed)) {
        msg("cannot read the pixels of '%s': %s", path, a.err);
        return -1;
    }
    return 0;
}

/* Opens `path` as a plain disk file (no extended-filename syntax) at HDU `hdu`
 * (0-based), which must be an image.  Returns the handle or NULL after printing why. */
static fitsfile *open_image_hdu(const char *path, int hdu, const char *what)
{
    fitsfile *f = NULL;
    int st = 0, type = 0;
    char t[FLEN_STATUS];
    if (fits_open_diskfile(&f, path, READONLY, &st)) {
        msg("cannot open %s '%s': %s", what, path, fits_text(st, t));
        return NULL;
    }
    if (fits_movabs_hdu(f, hdu + 1, &type, &st)) {
        msg("%s '%s' has no HDU %d: %s", what, path, hdu, fits_text(st, t));
        st = 0;
        fits_close_file(f, &st);
        return NULL;
    }
    if (type != IMAGE_HDU) {
        msg("HDU %d of %s '%s' is a table, not an image", hdu, what, path);
        st = 0;
        fits_close_file(f, &st);
        return NULL;
    }
    return f;
}

/* The value text of `key` in concatenated 80-character cards (quotes and blanks
 * stripped), or 0 when the card is absent. */
static int card_value(const char *cards, int nkeys, const char *key, char *val, size_t vlen)
{
    size_t kl = strlen(key);
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        if (strncmp(c, key, kl) != 0 || (kl < 8 && c[kl] != ' ') || c[8] != '=')
            continue;
        size_t i0 = 10, i1;
        while (i0 < 80 && c[i0] == ' ')
            i0++;
        if (i0 < 80 && c[i0] == '\'') {
            i0++;
            for (i1 = i0; i1 < 80 && c[i1] != '\''; i1++)
                ;
        } else {
            for (i1 = i0; i1 < 80 && c[i1] != '/'; i1++)
                ;
        }
        while (i1 > i0 && c[i1 - 1] == ' ')
            i1--;
        const char *p = c + i0, *q = c + i1;
        size_t n = (size_t)(q - p) < vlen - 1 ? (size_t)(q - p) : vlen - 1;
        memcpy(val, p, n);
        val[n] = '\0';
        return 1;
    }
    return 0;
}

/* 1 when the CTYPE value names a celestial axis with a projection ("RA---TAN",
 * "GLAT-CAR", "DEC--SFL"...: four characters of axis type, '-', a projection code). */
static int celestial_ctype(const char *v)
{
    static const char *const kinds[] = { "RA--", "DEC-", "GLON", "GLAT", "ELON", "ELAT",
                                         "SLON", "SLAT", "HLON", "HLAT", NULL };
    if (strlen(v) < 8 || v[4] != '-')
        return 0;
    for (int i = 0; kinds[i]; i++)
        if (strncmp(v, kinds[i], 4) == 0)
            return 1;
    return 0;
}

/* Reads the input image or cube: float32 for BITPIX 8, 16, -32 and float64 otherwise,
 * scaled (integers of BITPIX 8 and 16 in float32, as astropy does), BLANK as NaN, with
 * up to `threads` slices at once on `workers`.  Returns 0 or an exit status after
 * printing why. */
static int read_input(pool *workers, int threads, const char *path, int hdu, input *in)
{
    memset(in, 0, sizeof *in);
    char err[256] = "", v[72];
    if (fitsimg_read_info(path, hdu, &in->info, err, sizeof err)) {
        msg("cannot read input '%s': %s", path, err);
        return EXIT_FAIL;
    }
    const fitsimg_info *fi = &in->info;
    const long *naxes = fi->naxes;
    int naxis = fi->naxis, bitpix = fi->bitpix;
    long nz = 1;
    if (naxis == 4 && naxes[3] != 1) {
        msg("'%s' has %d axes: tessera reprojects images and cubes (axes 4 and up of "
            "length 1)", path, naxis);
        goto fail;
    }
    if (naxis < 2 || naxes[0] < 1 || naxes[1] < 1) {
        msg("HDU %d of '%s' is not an image (NAXIS = %d)", hdu, path, naxis);
        goto fail;
    }
    if (naxis >= 3)
        nz = naxes[2];
    if (nz < 1) {
        msg("'%s' has an empty third axis", path);
        goto fail;
    }
    if (skywcs_parse(fi->header, fi->nkeys, &in->wcs, err, sizeof err)) {
        msg("'%s' has no usable WCS: %s", path, err);
        goto fail;
    }
    if (!card_value(fi->header, fi->nkeys, "CTYPE1", v, sizeof v) || !celestial_ctype(v)
        || !card_value(fi->header, fi->nkeys, "CTYPE2", v, sizeof v) || !celestial_ctype(v)
        || !skywcs_has_celestial(in->wcs)) {
        msg("'%s': axes 1 and 2 must be celestial (CTYPE1/CTYPE2 like RA---TAN, DEC--TAN)",
            path);
        goto fail;
    }
    int f32 = bitpix == 8 || bitpix == 16 || bitpix == -32;
    size_t n = (size_t)naxes[0] * (size_t)naxes[1] * (size_t)nz;
    /* A data unit longer than the file (a truncated file, or a header that lies about
     * NAXISn) is named as such before anything is allocated for it.  Tile-compressed
     * images keep their pixels in a table of their own size: not checked here. */
    if (fi->data_offset >= 0) {
        double need = (double)fi->data_offset + (double)n * (double)(abs(bitpix) / 8);
        if (need > (double)fi->file_size) {
            msg("'%s' is shorter than its header says: %ld x %ld x %ld values of BITPIX %d "
                "need %.0f bytes, the file has %lld", path, naxes[0], naxes[1], nz, bitpix,
                need, fi->file_size);
            goto fail;
        }
    }
    in->cube.dtype = f32 ? RP_F32 : RP_F64;
    in->cube.nx = naxes[0];
    in->cube.ny = naxes[1];
    in->cube.nz = nz;
    size_t es = f32 ? sizeof(float) : sizeof(double);
    in->cube.data = tess_alloc_huge(n * es);
    if (!in->cube.data) {
        msg("out of memory for the input (%zu pixels)", n);
        goto fail;
    }
    /* Integers are scaled in float32 arithmetic, (float)raw * (float)BSCALE then
     * + (float)BZERO, as astropy.io.fits does for BITPIX 8 and 16, so that results
     * match astropy's to the bit (cfitsio would scale in double and round once);
     * unscaled IEEE floats are read as stored. */
    if (read_parallel(workers, threads, path, hdu, f32 ? FITSIMG_F32_ASTROPY : FITSIMG_F64, 0,
                      in->cube.data, n, es) != 0)
        goto fail;
    return EXIT_OK;
fail:
    input_release(in);
    return EXIT_FAIL;
}

/* Reads the target header: the header of a FITS file (HDU `hdu`) or a text file of
 * cards, one a line (up to END; it may start with SIMPLE like a FITS header).  *cards
 * is malloc'd 80-character cards.  Returns 0 or an exit status after printing why. */
static int read_target(const char *path, int hdu, char **cards, int *nkeys)
{
    *cards = NULL;
    *nkeys = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        msg("cannot open target '%s': %s", path, strerror(errno));
        return EXIT_FAIL;
    }
    /* A FITS file starts with a SIMPLE card and has no line ends: its cards run on. */
    char head[81] = "";
    size_t got = fread(head, 1, 81, fp);
    int is_fits = got == 81 && memcmp(head, "SIMPLE  =", 9) == 0 && !memchr(head, '\n', 81)
                  && !memchr(head, '\r', 81);
    if (is_fits) {
        fclose(fp);
        fitsfile *f = open_image_hdu(path, hdu, "target");
        if (!f)
            return EXIT_FAIL;
        int st = 0;
        char *fc = NULL;
        char t[FLEN_STATUS];
        if (fits_hdr2str(f, 1, NULL, 0, &fc, nkeys, &st)) {
            msg("cannot read the header of target '%s': %s", path, fits_text(st, t));
            st = 0;
            fits_close_file(f, &st);
            return EXIT_FAIL;
        }
        *cards = strdup(fc);
        st = 0;
        fits_free_memory(fc, &st);
        fits_close_file(f, &st);
        if (!*cards) {
            msg("out of memory");
            return EXIT_FAIL;
        }
        return EXIT_OK;
    }
    rewind(fp);
    size_t cap = 256, n = 0;
    char *c = malloc(cap * 80 + 1);
    char line[1024];
    int rc = EXIT_OK;
    while (c && fgets(line, sizeof line, fp)) {
        size_t len = strcspn(line, "\r\n");
        if (len == 0)
            continue;
        if (len > 80) {
            msg("target '%s': line %zu is longer than 80 characters (one card a line "
                "expected)", path, n + 1);
            rc = EXIT_FAIL;
            break;
        }
        if (len >= 3 && strncmp(line, "END", 3) == 0 && strspn(line + 3, " ") == len - 3)
            break;
        if (n == cap) {
            if (cap >= MAX_CARDS) {
                msg("target '%s' has more than %d cards", path, MAX_CARDS);
                rc = EXIT_FAIL;
                break;
            }
            char *nc = realloc(c, cap * 2 * 80 + 1);
            if (!nc) {
                free(c);
                c = NULL;
                break;
            }
            c = nc;
            cap *= 2;
        }
        memset(c + n * 80, ' ', 80);
        memcpy(c + n * 80, line, len);
        n++;
    }
    fclose(fp);
    if (!c) {
        msg("out of memory");
        return EXIT_FAIL;
    }
    if (rc != EXIT_OK || n == 0) {
        if (rc == EXIT_OK)
            msg("target '%s' holds no header cards", path);
        free(c);
        return EXIT_FAIL;
    }
    c[n * 80] = '\0';
    *cards = c;
    *nkeys = (int)n;
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Writing: headers formatted here, data written in place through a shared mapping        */

/* A header under construction: 80-character cards, growing (capped by MAX_CARDS). */
typedef struct hdr {
    char *buf;
    size_t n, cap;        /* cards */
} hdr;

/* Appends a card (text padded with blanks to 80 characters).  Returns 0 or -1. */
static int hdr_add(hdr *h, const char *text, size_t len)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        if (cap > MAX_CARDS + 64)
            return -1;
        char *b = realloc(h->buf, cap * 80);
        if (!b)
            return -1;
        h->buf = b;
        h->cap = cap;
    }
    char *c = h->buf + h->n * 80;
    memset(c, ' ', 80);
    memcpy(c, text, len > 80 ? 80 : len);
    h->n++;
    return 0;
}

/* Appends "KEY     =                  VAL" in the fixed format of FITS 4.0 sec. 4.2.3
 * (value right-justified to column 30); `val` is a number or T/F. */
static int hdr_fixed(hdr *h, const char *key, const char *val)
{
    char c[81];
    int len = snprintf(c, sizeof c, "%-8.8s= %20s", key, val);
    return hdr_add(h, c, (size_t)len);
}

static int hdr_long(hdr *h, const char *key, long v)
{
    char val[32];
    snprintf(val, sizeof val, "%ld", v);
    return hdr_fixed(h, key, val);
}

/* Appends END and pads the header to whole 2880-byte blocks; returns its size in bytes,
 * or 0 on allocation failure. */
static size_t hdr_end(hdr *h)
{
    if (hdr_add(h, "END", 3) != 0)
        return 0;
    while (h->n % 36 != 0)
        if (hdr_add(h, "", 0) != 0)
            return 0;
    return h->n * 80;
}

/* 1 for the cards of the target header that describe its own data layout rather than
 * the WCS, which the output HDU writes itself. */
static int structural_card(const char *c, int drop_wcsaxes)
{
    static const char *const keys[] = { "SIMPLE", "XTENSION", "BITPIX", "EXTEND", "PCOUNT",
                                        "GCOUNT", "BSCALE", "BZERO", "BLANK", "CHECKSUM",
                                        "DATASUM", "EXTNAME", "END", NULL };
    char key[9];
    memcpy(key, c, 8);
    key[8] = '\0';
    for (int i = 7; i >= 0 && key[i] == ' '; i--)
        key[i] = '\0';
    if (key[0] == '\0')
        return 1;
    if (strncmp(key, "NAXIS", 5) == 0)
        return 1;
    if (drop_wcsaxes && strcmp(key, "WCSAXES") == 0)
        return 1;
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

/* 1 for the keywords of a cube's third (spectral) axis, copied from the input when the
 * target header is 2-D. */
static int axis3_card(const char *c)
{
    static const char *const keys[] = { "CTYPE3", "CRPIX3", "CRVAL3", "CDELT3", "CUNIT3",
                                        "CROTA3", "PC3_3", "CD3_3", "CNAME3", "SPECSYS",
                                        "SSYSOBS", "RESTFRQ", "RESTFREQ", "RESTWAV", "VELREF",
                                        "SSYSSRC", "ZSOURCE", "VELOSYS", NULL };
    char key[9];
    memcpy(key, c, 8);
    key[8] = '\0';
    for (int i = 7; i >= 0 && key[i] == ' '; i--)
        key[i] = '\0';
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

/* The output file while it is written: a temporary file next to the final name, sized,
 * with both headers in place.  The engine's threads write the pixels into anonymous
 * memory on transparent huge pages (few page faults, where a shared file mapping takes
 * one per page: costly under virtualisation, and contended when two threads fault the
 * same folio); each band of rows, once all its blocks are done, is made big-endian and
 * written with pwrite by the thread that finished it, then its memory is released. */
typedef struct outfile {
    char *path, *tmp;
    int fd;
    unsigned char *data;  /* HDU 0 values (tess_alloc_huge) */
    unsigned char *fp;    /* HDU 1 values (tess_alloc_huge) */
    size_t size;
    size_t d0, d1;        /* file offsets of the data of HDU 0 and HDU 1 */
    size_t n, es, fes;    /* values per HDU, bytes per HDU 0 and HDU 1 value */
    atomic_int werr;      /* errno of the first failed write, 0 if none */
    atomic_size_t wrote;  /* values written to the file so far */
} outfile;

/* Bytes rounded up to whole 2880-byte FITS blocks. */
static size_t fits_blocks(size_t bytes)
{
    return (bytes + 2879) / 2880 * 2880;
}

/* What goes into the output file's headers. */
typedef struct outspec {
    const char *tcards;   /* target header */
    int tkeys;
    const input *in;      /* for a cube's axis-3 cards when the target is 2-D */
    int target_3d;        /* the target header describes the third axis itself */
    rp_dtype dtype;
    long nx, ny, nz;
    rp_method method;
} outspec;

/* Builds the two headers into h0 and h1.  Returns 0 or -1 (out of memory). */
static int build_headers(const outspec *o, hdr *h0, hdr *h1)
{
    int naxis = o->nz > 1 || o->target_3d ? 3 : 2;
    int add_axis3 = o->nz > 1 && !o->target_3d;
    long naxes[3] = { o->nx, o->ny, o->nz };
    static const char *const nk[3] = { "NAXIS1", "NAXIS2", "NAXIS3" };
    int bad = hdr_fixed(h0, "SIMPLE", "T") || hdr_long(h0, "BITPIX", o->dtype == RP_F32 ? -32 : -64)
              || hdr_long(h0, "NAXIS", naxis);
    for (int k = 0; k < naxis; k++)
        bad = bad || hdr_long(h0, nk[k], naxes[k]);
    bad = bad || hdr_fixed(h0, "EXTEND", "T");
    for (int i = 0; i < o->tkeys && !bad; i++) {
        const char *c = o->tcards + (size_t)i * 80;
        if (!structural_card(c, add_axis3))
            bad = hdr_add(h0, c, 80);
    }
    for (int i = 0; add_axis3 && i < o->in->info.nkeys && !bad; i++) {
        const char *c = o->in->info.header + (size_t)i * 80;
        if (axis3_card(c))
            bad = hdr_add(h0, c, 80);
    }
    char hist[81];
    int hl = snprintf(hist, sizeof hist, "HISTORY tessera reproject, method %s",
                      rp_method_name(o->method));
    bad = bad || hdr_add(h0, hist, (size_t)hl) || hdr_end(h0) == 0;
    static const char ext[] = "XTENSION= 'IMAGE   '           / image extension";
    static const char name[] = "EXTNAME = 'FOOTPRINT'          / coverage of each output pixel";
    bad = bad || hdr_add(h1, ext, sizeof ext - 1)
          || hdr_long(h1, "BITPIX", o->method == RP_EXACT ? -32 : 8)
          || hdr_long(h1, "NAXIS", naxis);
    for (int k = 0; k < naxis; k++)
        bad = bad || hdr_long(h1, nk[k], naxes[k]);
    bad = bad || hdr_long(h1, "PCOUNT", 0) || hdr_long(h1, "GCOUNT", 1)
          || hdr_add(h1, name, sizeof name - 1) || hdr_end(h1) == 0;
    return bad ? -1 : 0;
}

/* Removes the temporary file and releases everything.  Cannot fail. */
static void out_abort(outfile *f)
{
    free(f->data);
    free(f->fp);
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    free(f->tmp);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* Creates the temporary file for `path`, sized, with both headers written, and the
 * memory for the pixels.  Returns 0 or EXIT_FAIL after printing why. */
static int out_create(outfile *f, const char *path, const outspec *o)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    hdr h0 = { NULL, 0, 0 }, h1 = { NULL, 0, 0 };
    size_t plen = strlen(path) + 32;
    f->tmp = malloc(plen);
    if (!f->tmp || build_headers(o, &h0, &h1) != 0) {
        msg("out of memory");
        free(h0.buf);
        free(h1.buf);
        out_abort(f);
        return EXIT_FAIL;
    }
    snprintf(f->tmp, plen, "%s.tmp-%ld", path, (long)getpid());
    f->n = (size_t)o->nx * (size_t)o->ny * (size_t)o->nz;
    f->es = o->dtype == RP_F32 ? 4 : 8;
    f->d0 = h0.n * 80;
    f->fes = o->method == RP_EXACT ? 4 : 1;
    f->d1 = f->d0 + fits_blocks(f->n * f->es) + h1.n * 80;
    f->size = f->d1 + fits_blocks(f->n * f->fes);
    atomic_init(&f->werr, 0);
    atomic_init(&f->wrote, 0);
    /* A new file only: O_EXCL fails on anything already there, a symbolic link included
     * (the name is predictable). */
    f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    const char *what = "create";
    if (f->fd >= 0) {
        what = "write";
        if (ftruncate(f->fd, (off_t)f->size) == 0
            && tess_pwrite_all(f->fd, (const unsigned char *)h0.buf, h0.n * 80, 0) == 0
            && tess_pwrite_all(f->fd, (const unsigned char *)h1.buf, h1.n * 80,
                               (off_t)(f->d1 - h1.n * 80)) == 0) {
            what = NULL;
            f->data = tess_alloc_huge(f->n * f->es);
            f->fp = tess_alloc_huge(f->n * f->fes);
            if (!f->data || !f->fp) {
                free(h0.buf);
                free(h1.buf);
                msg("out of memory for a %zu-value output", f->n);
                out_abort(f);
                return EXIT_FAIL;
            }
        }
    }
    free(h0.buf);
    free(h1.buf);
    if (what) {
        msg("cannot %s the output file '%s': %s", what, f->tmp, strerror(errno));
        if (f->fd < 0) {          /* what is there is not ours: leave it */
            free(f->tmp);
            f->tmp = NULL;
        }
        out_abort(f);
        return EXIT_FAIL;
    }
    f->path = (char *)path;
    return EXIT_OK;
}

/* Finishes the output block by block as the engine hands blocks over (rp_block_fn):
 * the footprint (isfinite of the data, as bytes, unless the engine wrote it) and both
 * arrays to big-endian while the block is still in cache; once every block of a band of
 * rows is done, the band is written to the file and its memory released, so that the
 * work runs on every thread alongside the reprojection and the peak memory stays near
 * input + output. */
typedef struct finisher {
    outfile *f;
    long nx, ny;
    long page;
    atomic_long *done;    /* per plane and first row of a band: pixels finished in it */
} finisher;

/* Releases the whole pages inside [p, p + len) from this process.  Cannot fail. */
static void release_pages(unsigned char *p, size_t len, long page)
{
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)p + len) / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void finish_block(void *arg, long z0, long nz, long x0, long y0, long w, long h)
{
    finisher *fi = arg;
    outfile *f = fi->f;
    for (long z = z0; z < z0 + nz; z++) {
        for (long y = y0; y < y0 + h; y++) {
            size_t k = ((size_t)z * (size_t)fi->ny + (size_t)y) * (size_t)fi->nx + (size_t)x0;
            unsigned char *d = f->data + k * f->es;
            unsigned char *fp = f->fp + k * f->fes;
            if (f->fes == 4) {                /* exact: the engine's float footprint */
                tess_be_swap(fp, (size_t)w, 4);
                tess_be_swap(d, (size_t)w, f->es);
            } else if (f->es == 4) {
                tess_be_swap_f32_finite((float *)d, fp, (size_t)w);
            } else {
                for (long i = 0; i < w; i++)
                    fp[i] = isfinite(((double *)d)[i]) != 0;
                tess_be_swap(d, (size_t)w, 8);
            }
        }
        long full = atomic_fetch_add(&fi->done[(size_t)z * (size_t)fi->ny + (size_t)y0], w) + w;
        if (full == fi->nx) {
            size_t k = ((size_t)z * (size_t)fi->ny + (size_t)y0) * (size_t)fi->nx;
            size_t n = (size_t)h * (size_t)fi->nx;
            if (atomic_load(&f->werr) == 0
                && (tess_pwrite_all(f->fd, f->data + k * f->es, n * f->es,
                                    (off_t)(f->d0 + k * f->es)) != 0
                    || tess_pwrite_all(f->fd, f->fp + k * f->fes, n * f->fes,
                                       (off_t)(f->d1 + k * f->fes)) != 0)) {
                int e = errno ? errno : EIO, zero = 0;
                atomic_compare_exchange_strong(&f->werr, &zero, e);
            }
            atomic_fetch_add(&f->wrote, n);
            release_pages(f->data + k * f->es, n * f->es, fi->page);
            release_pages(f->fp + k * f->fes, n * f->fes, fi->page);
        }
    }
}

/* Closes the finished file and renames it to its final name.  Returns 0 or EXIT_FAIL
 * after printing why (the temporary file is then removed). */
static int out_commit(outfile *f)
{
    int e = atomic_load(&f->werr);
    if (e == 0 && atomic_load(&f->wrote) != f->n) {
        msg("internal error: %zu of %zu output values were handed over by the engine",
            atomic_load(&f->wrote), f->n);
        out_abort(f);
        return EXIT_FAIL;
    }
    if (e == 0 && close(f->fd) != 0)
        e = errno;
    else if (e != 0)
        close(f->fd);
    f->fd = -1;
    if (e == 0 && rename(f->tmp, f->path) != 0)
        e = errno;
    if (e != 0) {
        msg("cannot write '%s': %s", f->path, strerror(e));
        out_abort(f);
        return EXIT_FAIL;
    }
    free(f->data);
    free(f->fp);
    f->data = f->fp = NULL;
    free(f->tmp);
    f->tmp = NULL;
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Progress and interruption                                                              */

static double now_s(void)
{
    return cli_now_s();
}

/* Waits for SIGINT or SIGTERM (blocked in every other thread) and raises the cancel flag
 * that the engine checks between blocks.  Ended with pthread_cancel. */
static void *signal_thread(void *arg)
{
    atomic_int *cancel = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0)
            atomic_store(cancel, sig);
    }
    return NULL;
}

/* Blocks SIGINT and SIGTERM in this thread and every thread started from here on and
 * starts signal_thread on `cancel`.  Returns 1 when *th was started (end it with
 * release_signals), 0 when it could not be (the signals then stay blocked). */
static int catch_signals(atomic_int *cancel, pthread_t *th)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    return pthread_create(th, NULL, signal_thread, cancel) == 0;
}

/* Ends the thread of catch_signals.  Cannot fail. */
static void release_signals(pthread_t th)
{
    pthread_cancel(th);
    pthread_join(th, NULL);
}

/* The workers of a command that runs `threads` threads, the calling one included:
 * threads - 1 of them, or NULL for one thread or when they cannot be started (the work
 * then runs on the calling thread alone).  Start them after catch_signals, so that they
 * leave SIGINT and SIGTERM to its thread.  Free with pool_free. */
static pool *workers_new(int threads)
{
    return threads > 1 ? pool_new(threads - 1, 4 * (size_t)threads) : NULL;
}

/* ------------------------------------------------------------------------------------ */
/* tessera reproject                                                                      */

static int cmd_reproject(int argc, char **argv)
{
    reproject_args a;
    int rc = parse_reproject(argc, argv, &a);
    if (rc != 0) {
        free(a.in_path);
        free(a.target_path);
        return rc == 1 ? EXIT_OK : rc;
    }
    double t0 = now_s();
    input in;
    memset(&in, 0, sizeof in);
    char *tcards = NULL;
    int tkeys = 0;
    skywcs *twcs = NULL;
    rp_cube out = { NULL, RP_F32, 0, 0, 0 };
    outfile of;
    memset(&of, 0, sizeof of);
    of.fd = -1;
    char err[256] = "", v[72];
    atomic_int cancel = 0;
    pthread_t sigth;
    int have_sigth = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = a.threads > 0 ? a.threads : ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (int)ncpu;

    /* SIGINT/SIGTERM raise `cancel`: the engine stops between blocks and the temporary
     * output is removed. */
    have_sigth = catch_signals(&cancel, &sigth);
    pool *workers = workers_new(threads);

    if (!cli_output_ok("tessera", a.out_path)) {
        rc = EXIT_FAIL;
        goto done;
    }
    rc = read_input(workers, threads, a.in_path, a.in_hdu, &in);
    double t_read = now_s();
    if (rc != EXIT_OK)
        goto done;
    rc = read_target(a.target_path, a.target_hdu, &tcards, &tkeys);
    if (rc != EXIT_OK)
        goto done;
    rc = EXIT_FAIL;
    if (skywcs_parse(tcards, tkeys, &twcs, err, sizeof err)) {
        msg("target '%s' has no usable WCS: %s", a.target_path, err);
        goto done;
    }
    long tn[3] = { 0, 0, 1 };
    static const char *const nk[3] = { "NAXIS1", "NAXIS2", "NAXIS3" };
    for (int k = 0; k < 3; k++) {
        if (!card_value(tcards, tkeys, nk[k], v, sizeof v)) {
            if (k < 2) {
                msg("target '%s' has no %s: the output size comes from NAXIS1 and NAXIS2",
                    a.target_path, nk[k]);
                goto done;
            }
            continue;
        }
        char *end;
        errno = 0;
        tn[k] = strtol(v, &end, 10);
        if (errno || *end || tn[k] < 1 || tn[k] > 1000000) {
            msg("target '%s': %s = %s is not a size from 1 to 1000000", a.target_path, nk[k], v);
            goto done;
        }
    }
    int target_3d = card_value(tcards, tkeys, "NAXIS3", v, sizeof v)
                    || card_value(tcards, tkeys, "CTYPE3", v, sizeof v);
    if (target_3d && tn[2] != in.cube.nz) {
        msg("the target has %ld planes (NAXIS3) and the input %ld: the third axis is passed "
            "through, not resampled", tn[2], in.cube.nz);
        goto done;
    }
    if (target_3d && in.cube.nz > 1) {
        static const char *const ax3[4] = { "CTYPE3", "CRPIX3", "CRVAL3", "CDELT3" };
        for (int k = 0; k < 4; k++) {
            char vi[72] = "", vt[72] = "";
            int hi = card_value(in.info.header, in.info.nkeys, ax3[k], vi, sizeof vi);
            int ht = card_value(tcards, tkeys, ax3[k], vt, sizeof vt);
            double di, dt;
            int same = hi == ht && (!hi || strcmp(vi, vt) == 0
                                    || (parse_double(vi, &di) == 0 && parse_double(vt, &dt) == 0
                                        && fabs(di - dt) <= 1e-9 * fmax(fabs(di), fabs(dt))));
            if (!same) {
                msg("the target's third axis differs from the input's (%s): tessera passes "
                    "the spectral axis through unchanged", ax3[k]);
                goto done;
            }
        }
    }
    out.dtype = in.cube.dtype;
    out.nx = tn[0];
    out.ny = tn[1];
    out.nz = in.cube.nz;
    outspec spec = { tcards, tkeys, &in, target_3d, out.dtype, out.nx, out.ny, out.nz,
                     a.method };
    if (out_create(&of, a.out_path, &spec) != EXIT_OK)
        goto done;
    out.data = of.data;
    float *footprint = a.method == RP_EXACT ? (float *)of.fp : NULL;

    bar b = { -1, t0, "blocks" };
    rp_options o;
    rp_options_init(&o);
    o.method = a.method;
    o.max_coord_error = a.max_coord_error;
    o.threads = threads;
    o.workers = workers;
    o.cancel = &cancel;
    if (!a.quiet && isatty(STDERR_FILENO)) {
        o.progress = bar_update;
        o.progress_arg = &b;
    }
    finisher fin = { &of, out.nx, out.ny, sysconf(_SC_PAGESIZE), NULL };
    fin.done = malloc(sizeof(atomic_long) * (size_t)out.ny * (size_t)out.nz);
    if (!fin.done) {
        msg("out of memory");
        goto done;
    }
    for (size_t k = 0; k < (size_t)out.ny * (size_t)out.nz; k++)
        atomic_init(&fin.done[k], 0);
    o.block_done = finish_block;
    o.block_arg = &fin;
    double t_start = now_s();
    long n = rp_reproject(in.wcs, &in.cube, twcs, &out, footprint, &o, err, sizeof err);
    double t_done = now_s();
    free(fin.done);
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    if (n == TESS_ECANCELED || atomic_load(&cancel)) {
        msg("interrupted; nothing written");
        rc = EXIT_INTERRUPTED;
        goto done;
    }
    if (n == TESS_ENOOVERLAP) {
        msg("the target does not overlap '%s': no output pixel falls on the input image",
            a.in_path);
        rc = EXIT_NOOVERLAP;
        goto done;
    }
    if (n < 0) {
        msg("cannot reproject '%s': %s", a.in_path, err);
        goto done;
    }
    /* The input is no longer needed: release it before the output's finishing pass. */
    free(in.cube.data);
    in.cube.data = NULL;
    rc = out_commit(&of);
    if (rc == EXIT_OK && atomic_load(&cancel)) {
        unlink(a.out_path);
        msg("interrupted; nothing written");
        rc = EXIT_INTERRUPTED;
    }
    if (rc == EXIT_OK && a.timing)
        fprintf(stderr, "tessera: read %.3f s, set-up %.3f s, reproject %.3f s, finish and "
                "write %.3f s, total %.3f s (%d threads)\n", t_read - t0, t_start - t_read,
                t_done - t_start, now_s() - t_done, now_s() - t0, threads);
    if (rc == EXIT_OK && o.progress) {
        char shape[64];
        snprintf(shape, sizeof shape, out.nz > 1 ? "%ldx%ldx%ld" : "%ldx%ld", out.nx, out.ny,
                 out.nz);
        fprintf(stderr, "tessera: wrote %s (%s, %s, %ld finite values) in %.2f s\n",
                a.out_path, shape, rp_method_name(a.method), n, now_s() - t0);
    }
done:
    pool_free(workers);
    if (have_sigth)
        release_signals(sigth);
    if (of.tmp)
        out_abort(&of);
    skywcs_free(twcs);
    free(tcards);
    input_release(&in);
    free(a.in_path);
    free(a.target_path);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* tessera hips                                                                           */

/* The deepest tile order: its tile pixels are cells of order 29, HEALPix's deepest. */
#define HIPS_DEEPEST (HIPS_ORDER_MAX - HIPS_TILE_SHIFT)

/* Values in one tile. */
#define TILE_N ((size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH)

typedef struct hips_args {
    char *in_path;
    int in_hdu;
    char *out_dir;            /* without trailing slashes */
    int order;                /* deepest order, -1: hips_survey_order of the pixel size */
    unsigned formats;         /* HIPS_FMT_BIT of each format to write */
    int galactic;             /* HiPS frame: galactic (1) or ICRS (0) */
    rp_method method;
    double max_coord_error;
    long plane;
    render_params render;
    int threads;
    int quiet;
    int timing;
} hips_args;

/* Parses "png,fits" (png, jpg or jpeg, fits; at least one, comma-separated) into a set of
 * HIPS_FMT_BIT.  Returns 0 or -1. */
static int parse_formats(const char *s, unsigned *set)
{
    *set = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 3 && strncmp(s, "png", 3) == 0)
            *set |= HIPS_FMT_BIT(HIPS_FMT_PNG);
        else if ((n == 3 && strncmp(s, "jpg", 3) == 0) || (n == 4 && strncmp(s, "jpeg", 4) == 0))
            *set |= HIPS_FMT_BIT(HIPS_FMT_JPEG);
        else if (n == 4 && strncmp(s, "fits", 4) == 0)
            *set |= HIPS_FMT_BIT(HIPS_FMT_FITS);
        else
            return -1;
        s += n;
        if (*s == ',' && *++s == '\0')
            return -1;
    }
    return *set ? 0 : -1;
}

/* Parses `tessera hips ...` arguments (argv[0] is "hips") as parse_reproject does.
 * Returns 0, -1 (--help shown), or EXIT_USAGE / EXIT_FAIL (out of memory) after printing
 * why. */
static int parse_hips(int argc, char **argv, hips_args *a)
{
    memset(a, 0, sizeof *a);
    a->order = -1;
    a->formats = HIPS_FMT_BIT(HIPS_FMT_PNG) | HIPS_FMT_BIT(HIPS_FMT_FITS);
    a->method = RP_BILINEAR;
    a->max_coord_error = 0.001;
    render_params_default(&a->render);
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(hips_usage, stdout);
            return -1;
        }
        if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
            a->quiet = 1;
            continue;
        }
        if (strcmp(arg, "--timing") == 0) {
            a->timing = 1;
            continue;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (in) {
                msg("hips: one input file only ('%s' and '%s')", in, arg);
                return EXIT_USAGE;
            }
            in = arg;
            continue;
        }
        static const char *const opts[] = { "-o", "--output", "--order", "--format", "--frame",
                                            "--method", "--plane", "--stretch", "--min-cut",
                                            "--max-cut", "--cmap", "--max-coord-error",
                                            "--threads", NULL };
        const char *val = NULL;
        int which = option_value(argc, argv, &i, "hips", opts, &val), bad = 0;
        const char *want = NULL;
        switch (which) {
        case -1:
            return EXIT_USAGE;
        case 0:
        case 1:
            out = val;
            break;
        case 2:
            bad = parse_int(val, HIPS_ORDER_FLOOR, HIPS_DEEPEST, &a->order);
            want = "an order from 3 (the order of the Allsky picture) to 20";
            break;
        case 3:
            bad = parse_formats(val, &a->formats);
            want = "a comma-separated list of png, jpg and fits";
            break;
        case 4:
            a->galactic = strcmp(val, "galactic") == 0;
            bad = !a->galactic && strcmp(val, "equatorial") != 0;
            want = "equatorial or galactic";
            break;
        case 5:
            bad = rp_method_parse(val, &a->method) || a->method == RP_EXACT;
            want = "nearest, bilinear, bicubic or lanczos3 (HiPS tiles are interpolated)";
            break;
        case 6: {
            int z = 0;
            bad = parse_int(val, 0, INT_MAX, &z);
            a->plane = z;
            want = "a plane number >= 0";
            break;
        }
        case 7:
            bad = render_stretch_parse(val, &a->render.stretch) != 0;
            want = "linear, sqrt, log, asinh or power";
            break;
        case 8:
            bad = render_cut_parse(val, &a->render.min_cut) != 0;
            want = "a number or a percentile like 0.5%";
            break;
        case 9:
            bad = render_cut_parse(val, &a->render.max_cut) != 0;
            want = "a number or a percentile like 99.5%";
            break;
        case 10:
            bad = render_cmap_parse(val, &a->render.cmap) != 0;
            want = "grey, viridis, inferno, magma, plasma or cubehelix";
            break;
        case 11:
            bad = parse_double(val, &a->max_coord_error) || !isfinite(a->max_coord_error)
                  || a->max_coord_error < 0.0 || a->max_coord_error > 10.0;
            want = "a number of tile pixels from 0 to 10";
            break;
        default:
            bad = parse_int(val, 0, 1024, &a->threads);
            want = "an integer from 0 to 1024";
            break;
        }
        if (bad) {
            msg("hips: %s must be %s, not '%s'", opts[which], want, val);
            return EXIT_USAGE;
        }
    }
    const render_cut *lo = &a->render.min_cut, *hi = &a->render.max_cut;
    if (lo->is_percent == hi->is_percent && lo->value > hi->value) {
        msg("hips: --min-cut (%g%s) is above --max-cut (%g%s)", lo->value,
            lo->is_percent ? "%" : "", hi->value, hi->is_percent ? "%" : "");
        return EXIT_USAGE;
    }
    if (!in || !out) {
        msg("hips: %s is required (see tessera hips --help)", !in ? "an input file" : "-o DIR");
        return EXIT_USAGE;
    }
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n == 0 || strcmp(out, "/") == 0) {
        msg("hips: -o needs the name of a directory to create, not '%s'", out);
        return EXIT_USAGE;
    }
    int rc = split_hdu(in, &a->in_path, &a->in_hdu);
    if (rc == 0 && !(a->out_dir = strndup(out, n)))
        rc = TESS_ENOMEM;
    if (rc == TESS_ENOMEM) {
        msg("hips: out of memory");
        return EXIT_FAIL;
    }
    if (rc) {
        msg("hips: bad HDU number in '%s'", in);
        return EXIT_USAGE;
    }
    return 0;
}

/* The image as the server holds a dataset (daemon/catalog.c, daemon/cache/planes.c): the
 * header read by imageio, its celestial WCS, and one plane of physical values (float32
 * for BITPIX 8, 16 and -32, float64 otherwise, scaled and BLANK-masked by cfitsio), so
 * that the tiles are the server's to the bit. */
typedef struct hips_input {
    fitsimg_info info;
    skywcs *wcs, *cel;
    long nz;
    rp_plane plane;           /* level 0 */
} hips_input;

static void hips_input_release(hips_input *in)
{
    fitsimg_info_release(&in->info);
    skywcs_free(in->cel);
    skywcs_free(in->wcs);
    free(in->plane.data);
    memset(in, 0, sizeof *in);
}

/* Reads the header, WCS and plane `z` of HDU `hdu` of `path`, in up to `threads` slices
 * at once on `workers`.  Returns 0 or EXIT_FAIL after printing why. */
static int read_hips_input(pool *workers, int threads, const char *path, int hdu, long z,
                           hips_input *in)
{
    memset(in, 0, sizeof *in);
    char err[256] = "";
    if (fitsimg_read_info(path, hdu, &in->info, err, sizeof err)) {
        msg("cannot read input '%s': %s", path, err);
        return EXIT_FAIL;
    }
    const fitsimg_info *fi = &in->info;
    long nx = fi->naxes[0], ny = fi->naxes[1];
    in->nz = fi->naxis >= 3 ? fi->naxes[2] : 1;
    if (fi->naxis < 2 || (fi->naxis == 4 && fi->naxes[3] != 1) || nx < 1 || ny < 1) {
        msg("HDU %d of '%s' is not an image or cube (NAXIS = %d)", hdu, path, fi->naxis);
        goto fail;
    }
    if (z >= in->nz) {
        msg("--plane %ld: '%s' has %ld plane%s (0..%ld)", z, path, in->nz,
            in->nz == 1 ? "" : "s", in->nz - 1);
        goto fail;
    }
    if (skywcs_parse(fi->header, fi->nkeys, &in->wcs, err, sizeof err) != 0
        || !(in->cel = skywcs_celestial(in->wcs))) {
        msg("'%s' has no celestial WCS%s%s: it cannot be made a HiPS survey", path,
            err[0] ? ": " : "", err);
        goto fail;
    }
    /* Counts of finite pixels under a reduced pixel are uint32, as the server's. */
    if ((unsigned long long)nx * (unsigned long long)ny >= 0xFFFFFFFFULL) {
        msg("the plane of '%s' (%ld x %ld) is too large", path, nx, ny);
        goto fail;
    }
    int bp = fi->bitpix;
    in->plane.dtype = bp == -64 || bp == 32 || bp == 64 ? RP_F64 : RP_F32;
    in->plane.nx = nx;
    in->plane.ny = ny;
    size_t n = (size_t)nx * (size_t)ny;
    in->plane.data = tess_alloc_huge(n * (in->plane.dtype == RP_F64 ? sizeof(double)
                                                                   : sizeof(float)));
    if (!in->plane.data) {
        msg("out of memory for the plane of '%s' (%zu pixels)", path, n);
        goto fail;
    }
    int f64 = in->plane.dtype == RP_F64;
    if (read_parallel(workers, threads, path, hdu, f64 ? FITSIMG_F64 : FITSIMG_F32, (size_t)z * n,
                      in->plane.data, n, f64 ? sizeof(double) : sizeof(float)) != 0)
        goto fail;
    return EXIT_OK;
fail:
    hips_input_release(in);
    return EXIT_FAIL;
}

/* The cut levels of `rp` over the finite pixels of plane p: the values themselves when
 * both are absolute, else render_resolve_cuts of the whole plane.  Returns 0 or
 * TESS_ENOMEM. */
static int plane_cuts(const rp_plane *p, const render_params *rp, double *lo, double *hi)
{
    if (!rp->min_cut.is_percent && !rp->max_cut.is_percent) {
        *lo = rp->min_cut.value;
        *hi = rp->max_cut.value;
        return 0;
    }
    size_t n = (size_t)p->nx * (size_t)p->ny;
    return p->dtype == RP_F64 ? render_resolve_cuts(p->data, n, rp, lo, hi)
                              : render_resolve_cuts_f32(p->data, n, rp, lo, hi);
}

/* A plane at a reduction level with its kernel: a hips_source ready for hips_render_tile
 * and hips_allsky_encode. */
typedef struct hips_level {
    rp_plane reduced;         /* level > 0: the reduced plane (ours) */
    rp_kernel *kernel;
    hips_source src;
} hips_level;

/* Prepares level `level` (capped at the top level, as the server caps it) of the input for
 * `method`.  Returns 0 or EXIT_FAIL after printing why. */
static int hips_level_init(hips_level *l, const hips_input *in, int level, const hips_args *a)
{
    memset(l, 0, sizeof *l);
    const rp_plane *p = &in->plane;
    int top = pyramid_top_level(p->nx, p->ny);
    if (level > top)
        level = top;
    if (level > 0) {
        if (pyramid_level(p, level, &l->reduced) != 0) {
            msg("out of memory reducing the plane to level %d", level);
            return EXIT_FAIL;
        }
        p = &l->reduced;
    }
    char err[256] = "";
    l->kernel = rp_kernel_new(a->method, p, err, sizeof err);
    if (!l->kernel) {
        msg("cannot prepare the %s kernel: %s", rp_method_name(a->method), err);
        free(l->reduced.data);
        return EXIT_FAIL;
    }
    l->src = (hips_source){ in->cel, in->plane.nx, in->plane.ny, l->kernel, p->nx, p->ny,
                            level, a->method, a->max_coord_error };
    return EXIT_OK;
}

static void hips_level_release(hips_level *l)
{
    rp_kernel_free(l->kernel);
    free(l->reduced.data);
    memset(l, 0, sizeof *l);
}

/* ---- files ---- */

/* Writes a whole file.  Returns 0 or an errno value. */
static int write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    const unsigned char *p = data;
    while (len > 0) {
        ssize_t got = write(fd, p, len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            close(fd);
            return e;
        }
        p += got;
        len -= (size_t)got;
    }
    return close(fd) == 0 ? 0 : errno;
}

/* Creates a directory that may exist already.  Returns 0 or an errno value. */
static int make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : errno;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes the directory tree at `path` (symbolic links not followed).  Cannot fail:
 * what cannot be removed stays. */
static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* 0 when `dir` does not exist or is an empty directory (so that the finished tree can be
 * renamed onto it); EXIT_FAIL after printing why otherwise. */
static int check_out_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            return EXIT_OK;
        msg("cannot use output directory '%s': %s", dir, strerror(errno));
        return EXIT_FAIL;
    }
    if (!S_ISDIR(st.st_mode)) {
        msg("'%s' exists and is not a directory", dir);
        return EXIT_FAIL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        msg("cannot read output directory '%s': %s", dir, strerror(errno));
        return EXIT_FAIL;
    }
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    if (!empty) {
        msg("'%s' exists and is not empty: tessera hips writes a new tree (remove it or "
            "choose another directory)", dir);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- the tile tree ---- */

/* The tiles of one order that may hold data, in increasing npix, and the tiles made of
 * them while they are needed (NULL: no data). */
typedef struct tile_set {
    int64_t *npix;
    size_t n;
    float **data;             /* n tiles of TILE_N values, row 0 = FITS row 1; or NULL */
} tile_set;

/* The index of tile t in s, or -1. */
static long tile_index(const tile_set *s, int64_t t)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->npix[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->npix[lo] == t ? (long)lo : -1;
}

static void tile_set_drop_data(tile_set *s)
{
    if (!s->data)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->data[i]);
    free(s->data);
    s->data = NULL;
}

/* The making of the tiles: the deepest order resampled, each lower order from its
 * children.  Orders from `split` up to the deepest are made depth first, one tile of
 * order `split` (and the subtree below it) a task, so that only a few tiles per order
 * are held at once; the tiles of order `split` are kept, and every lower order is then
 * made from the order below it, one tile a task. */
typedef struct hips_run {
    const hips_args *a;
    const char *dir;                   /* the temporary tree */
    const char *final_dir;             /* its name once finished */
    const hips_source *src;            /* for the deepest order */
    double lo, hi;                     /* cut levels of PNG and JPEG tiles */
    int deepest, split;
    tile_set ord[HIPS_DEEPEST + 1];
    int pass;                          /* the order being made */
    atomic_size_t next;                /* the next task of the pass */
    atomic_int *cancel;
    atomic_int failed;                 /* the first failure's TESS_E* code */
    char err[512];                     /* its reason (written by the thread that set it) */
    atomic_long written;               /* tiles written */
    bar *b;                            /* the progress bar, or NULL */
    pthread_mutex_t bar_lock;
    long done, total;                  /* under bar_lock */
} hips_run;

static int run_fail(hips_run *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first failure (its code and reason) and returns -1. */
static int run_fail(hips_run *r, int rc, const char *fmt, ...)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&r->failed, &none, rc ? rc : TESS_EIO)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int run_stopped(hips_run *r)
{
    return atomic_load(&r->failed) != 0 || atomic_load(r->cancel) != 0;
}

/* One more tile done, for the progress bar. */
static void run_step(hips_run *r)
{
    if (!r->b)
        return;
    pthread_mutex_lock(&r->bar_lock);
    r->done++;
    bar_update(r->b, r->done, r->total);
    pthread_mutex_unlock(&r->bar_lock);
}

/* Writes tile (order, npix), W x W doubles with row 0 = FITS row 1, in every format of
 * the run.  Returns 0 or -1 (run_fail). */
static int tile_write(hips_run *r, int order, int64_t npix, const double *data)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/Norder%d", r->dir, order);
    int e = n < (int)sizeof path ? make_dir(path) : ENAMETOOLONG;
    n = snprintf(path, sizeof path, "%s/Norder%d/Dir%lld", r->dir, order,
                 (long long)hips_dir(npix));
    e = e ? e : n < (int)sizeof path ? make_dir(path) : ENAMETOOLONG;
    if (e)
        return run_fail(r, TESS_EIO, "cannot create '%s': %s", path, strerror(e));
    static const hips_format fmts[] = { HIPS_FMT_FITS, HIPS_FMT_PNG, HIPS_FMT_JPEG };
    for (int f = 0; f < 3; f++) {
        if (!(r->a->formats & HIPS_FMT_BIT(fmts[f])))
            continue;
        unsigned char *bytes = NULL;
        size_t len = 0;
        int rc = fmts[f] == HIPS_FMT_FITS
                     ? hips_encode_fits(data, order, npix, HIPS_TILE_SHIFT, r->a->galactic,
                                        &bytes, &len)
                     : hips_encode_picture(data, HIPS_TILE_WIDTH, HIPS_TILE_WIDTH, fmts[f],
                                           &r->a->render, r->lo, r->hi, &bytes, &len);
        if (rc)
            return run_fail(r, rc, "cannot encode tile Norder%d/Npix%lld as %s: %s", order,
                            (long long)npix, hips_format_ext(fmts[f]),
                            rc == TESS_ENOMEM ? "out of memory" : "encoder error");
        n = snprintf(path, sizeof path, "%s/Norder%d/Dir%lld/Npix%lld.%s", r->dir, order,
                     (long long)hips_dir(npix), (long long)npix, hips_format_ext(fmts[f]));
        e = n < (int)sizeof path ? write_file(path, bytes, len) : ENAMETOOLONG;
        free(bytes);
        if (e)
            return run_fail(r, TESS_EIO, "cannot write '%s': %s", path, strerror(e));
    }
    return 0;
}

/* Scratch arrays of one thread: the tile being made and its four children widened. */
typedef struct scratch {
    double *tile;
    double *child[4];
} scratch;

/* Makes tile (order k, npix t): resampled at the deepest order, else merged from its
 * children (those of order <= split from the kept tiles, deeper ones made here first),
 * then written.  *out receives its values as written to FITS (float, malloc'd), or NULL
 * when it holds no finite pixel (nothing written).  Returns 0, or -1 when the run failed
 * or was cancelled. */
static int tile_make(hips_run *r, scratch *sc, int k, int64_t t, float **out)
{
    *out = NULL;
    if (run_stopped(r))
        return -1;
    if (k == r->deepest) {
        char err[256] = "";
        long f = hips_render_tile(r->src, k, t, HIPS_TILE_SHIFT, r->a->galactic,
                                  HIPS_ROWS_FITS, sc->tile, err, sizeof err);
        if (f < 0)
            return run_fail(r, (int)f, "cannot render tile Norder%d/Npix%lld: %s", k,
                            (long long)t, err);
        if (f == 0) {
            run_step(r);
            return 0;
        }
    } else {
        float *own[4] = { NULL, NULL, NULL, NULL };
        const float *child[4] = { NULL, NULL, NULL, NULL };
        int rc = 0;
        for (int c = 0; c < 4 && rc == 0; c++) {
            long at = tile_index(&r->ord[k + 1], 4 * t + c);
            if (at < 0)
                continue;
            if (k + 1 <= r->split)
                child[c] = r->ord[k + 1].data[at];
            else
                rc = tile_make(r, sc, k + 1, 4 * t + c, &own[c]);
            if (own[c])
                child[c] = own[c];
        }
        const double *wide[4] = { NULL, NULL, NULL, NULL };
        int any = 0;
        for (int c = 0; c < 4; c++) {
            if (rc == 0 && child[c]) {
                for (size_t i = 0; i < TILE_N; i++)
                    sc->child[c][i] = child[c][i];
                wide[c] = sc->child[c];
                any = 1;
            }
            free(own[c]);
        }
        if (rc)
            return rc;
        if (!any) {
            run_step(r);
            return 0;
        }
        hips_tile_merge_children(HIPS_TILE_SHIFT, wide, HIPS_ROWS_FITS, sc->tile);
    }
    if (tile_write(r, k, t, sc->tile))
        return -1;
    float *f = malloc(sizeof(float) * TILE_N);
    if (!f)
        return run_fail(r, TESS_ENOMEM, "out of memory");
    for (size_t i = 0; i < TILE_N; i++)
        f[i] = (float)sc->tile[i];
    *out = f;
    atomic_fetch_add(&r->written, 1);
    run_step(r);
    return 0;
}

/* A thread of a pass: takes the tiles of order r->pass one at a time. */
static void pass_thread(void *arg, size_t i0, size_t i1)
{
    (void)i0;
    (void)i1;
    hips_run *r = arg;
    double *mem = malloc(sizeof(double) * TILE_N * 5);
    if (!mem) {
        run_fail(r, TESS_ENOMEM, "out of memory");
        return;
    }
    scratch sc = { mem, { mem + TILE_N, mem + 2 * TILE_N, mem + 3 * TILE_N, mem + 4 * TILE_N } };
    tile_set *s = &r->ord[r->pass];
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= s->n || tile_make(r, &sc, r->pass, s->npix[i], &s->data[i]) != 0)
            break;
    }
    free(mem);
}

/* Lists the tiles of every order (the deepest from hips_tiles_covering, each lower one
 * the parents of the order below) and chooses the split order: the shallowest with at
 * least 4 tiles a thread (the deepest when none has).  Returns 0 or EXIT_FAIL after
 * printing why. */
static int plan_tree(hips_run *r, const hips_input *in, int threads)
{
    int K = r->deepest;
    int rc = hips_tiles_covering(in->cel, in->plane.nx, in->plane.ny, r->a->galactic, K,
                                 &r->ord[K].npix, &r->ord[K].n);
    if (rc) {
        msg("cannot list the tiles of order %d: %s", K,
            rc == TESS_ENOMEM ? "out of memory" : "bad WCS");
        return EXIT_FAIL;
    }
    for (int k = K - 1; k >= 0; k--) {
        const tile_set *below = &r->ord[k + 1];
        tile_set *s = &r->ord[k];
        if (below->n == 0)
            continue;
        if (!(s->npix = malloc(sizeof(int64_t) * below->n))) {
            msg("out of memory");
            return EXIT_FAIL;
        }
        for (size_t i = 0; i < below->n; i++)
            if (s->n == 0 || s->npix[s->n - 1] != below->npix[i] >> 2)
                s->npix[s->n++] = below->npix[i] >> 2;
    }
    r->split = K;
    for (int k = 0; k <= K; k++)
        if (r->ord[k].n >= 4 * (size_t)threads) {
            r->split = k;
            break;
        }
    for (int k = 0; k <= K; k++)
        r->total += (long)r->ord[k].n;
    r->total += 2;   /* the Allsky pictures, then Moc.fits, properties and index.html */
    return EXIT_OK;
}

/* Makes and writes every tile: the pass of order `split`, then of each lower order.
 * Returns 0 or -1 (failed or cancelled: r->failed, r->cancel). */
static int make_tree(hips_run *r, pool *workers, int threads)
{
    for (int k = r->split; k >= 0; k--) {
        tile_set *s = &r->ord[k];
        if (s->n > 0) {
            if (!(s->data = calloc(s->n, sizeof(float *))))
                return run_fail(r, TESS_ENOMEM, "out of memory");
            r->pass = k;
            atomic_store(&r->next, 0);
            int nt = (size_t)threads < s->n ? threads : (int)s->n;
            pool_for(workers, POOL_BATCH, nt, (size_t)nt, 1, pass_thread, r);
        }
        if (k < r->split)
            tile_set_drop_data(&r->ord[k + 1]);
        if (run_stopped(r))
            return -1;
    }
    tile_set_drop_data(&r->ord[0]);
    return 0;
}

/* The last component of a path (no trailing slash). */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Writes DIR/index.html [HiPS 4.4.5]: what the survey is and where its parts are.
 * Returns 0, an errno value, or ENOMEM. */
static int write_index(const char *path, const char *name, const hips_args *a,
                       const hips_input *in, int deepest)
{
    hips_index x = {
        .name = name, .made_by = "written by <code>tessera hips</code> from",
        .source = base_name(a->in_path), .nx = in->plane.nx, .ny = in->plane.ny,
        .galactic = a->galactic, .order = deepest,
        .how = "Serve this directory with any web server and open its URL in a HiPS client "
               "such as Aladin",
        .formats = a->formats,
    };
    char *text = NULL;
    size_t len = 0;
    if (hips_index_html(&x, &text, &len) != 0)
        return ENOMEM;
    int e = write_file(path, text, len);
    free(text);
    return e;
}

/* Writes the Allsky pictures, Moc.fits, properties and index.html of the finished tiles
 * into r->dir.  Returns 0 or EXIT_FAIL after printing why. */
static int write_survey_files(hips_run *r, const hips_input *in, double pixscale,
                              const double geo[3], double dmin, double dmax)
{
    const hips_args *a = r->a;
    char path[PATH_MAX], err[256] = "";
    int e = 0;
    hips_level al;
    if (hips_level_init(&al, in, hips_source_level(HIPS_ALLSKY_ORDER, HIPS_ALLSKY_SHIFT,
                                                   pixscale), a) != EXIT_OK)
        return EXIT_FAIL;
    snprintf(path, sizeof path, "%s/Norder%d", r->dir, HIPS_ALLSKY_ORDER);
    if ((e = make_dir(path)) != 0) {
        msg("cannot create '%s': %s", path, strerror(e));
        hips_level_release(&al);
        return EXIT_FAIL;
    }
    static const hips_format fmts[] = { HIPS_FMT_FITS, HIPS_FMT_PNG, HIPS_FMT_JPEG };
    for (int f = 0; f < 3; f++) {
        if (!(a->formats & HIPS_FMT_BIT(fmts[f])))
            continue;
        unsigned char *bytes = NULL;
        size_t len = 0;
        long n = hips_allsky_encode(&al.src, a->galactic, fmts[f], &a->render, r->lo, r->hi,
                                    &bytes, &len, err, sizeof err);
        if (n < 0) {
            msg("cannot make the Allsky picture: %s", err);
            hips_level_release(&al);
            return EXIT_FAIL;
        }
        snprintf(path, sizeof path, "%s/Norder%d/Allsky.%s", r->dir, HIPS_ALLSKY_ORDER,
                 hips_format_ext(fmts[f]));
        e = write_file(path, bytes, len);
        free(bytes);
        if (e) {
            msg("cannot write '%s': %s", path, strerror(e));
            hips_level_release(&al);
            return EXIT_FAIL;
        }
    }
    hips_level_release(&al);
    run_step(r);

    unsigned char *moc = NULL;
    size_t len = 0;
    int rc = hips_moc_fits(in->cel, in->plane.nx, in->plane.ny, r->deepest, &moc, &len, NULL);
    if (rc) {
        msg("cannot compute the coverage (Moc.fits): %s",
            rc == TESS_ENOMEM ? "out of memory" : "bad WCS");
        return EXIT_FAIL;
    }
    snprintf(path, sizeof path, "%s/Moc.fits", r->dir);
    e = write_file(path, moc, len);
    free(moc);
    if (e) {
        msg("cannot write '%s': %s", path, strerror(e));
        return EXIT_FAIL;
    }

    /* properties: the server's keywords, with the formats written here. */
    char formats[32] = "", description[64] = "";
    static const struct { hips_format f; const char *word; } words[] = {
        { HIPS_FMT_PNG, "png" }, { HIPS_FMT_JPEG, "jpeg" }, { HIPS_FMT_FITS, "fits" } };
    for (int i = 0; i < 3; i++)
        if (a->formats & HIPS_FMT_BIT(words[i].f))
            snprintf(formats + strlen(formats), sizeof formats - strlen(formats), "%s%s",
                     formats[0] ? " " : "", words[i].word);
    if (in->nz > 1)
        snprintf(description, sizeof description, "plane %ld of %ld", a->plane, in->nz);
    struct stat st;
    const char *name = base_name(r->final_dir);
    hips_properties p = {
        .name = name, .description = description, .builder = "Tessera (tessera hips)",
        .tile_formats = formats, .bunit = in->info.bunit,
        .released = stat(a->in_path, &st) == 0 ? st.st_mtime : time(NULL),
        .order = r->deepest, .galactic = a->galactic, .ra = geo[0], .dec = geo[1],
        .fov = geo[2], .cut_lo = r->lo, .cut_hi = r->hi, .data_min = dmin, .data_max = dmax,
    };
    char *text = NULL;
    if (hips_properties_text(&p, &text, &len) != 0) {
        msg("out of memory");
        return EXIT_FAIL;
    }
    snprintf(path, sizeof path, "%s/properties", r->dir);
    e = write_file(path, text, len);
    free(text);
    if (!e) {
        snprintf(path, sizeof path, "%s/index.html", r->dir);
        e = write_index(path, name, a, in, r->deepest);
    }
    if (e) {
        msg("cannot write '%s': %s", path, strerror(e));
        return EXIT_FAIL;
    }
    run_step(r);
    return EXIT_OK;
}

static int cmd_hips(int argc, char **argv)
{
    hips_args a;
    int rc = parse_hips(argc, argv, &a);
    if (rc != 0) {
        free(a.in_path);
        free(a.out_dir);
        return rc == -1 ? EXIT_OK : rc;
    }
    double t0 = now_s(), t_read = t0, t_tiles = t0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = a.threads > 0 ? a.threads : ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (int)ncpu;
    atomic_int cancel = 0;
    pthread_t sigth;
    /* SIGINT/SIGTERM raise `cancel`: the threads stop between tiles and the temporary
     * tree is removed. */
    int have_sigth = catch_signals(&cancel, &sigth);
    pool *workers = workers_new(threads);
    hips_input in;
    memset(&in, 0, sizeof in);
    hips_level tl;
    memset(&tl, 0, sizeof tl);
    hips_run r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.bar_lock, NULL);
    char *tmp = NULL;
    bar b = { -1, t0, "tiles" };

    rc = check_out_dir(a.out_dir);
    if (rc == EXIT_OK)
        rc = read_hips_input(workers, threads, a.in_path, a.in_hdu, a.plane, &in);
    if (rc != EXIT_OK)
        goto done;
    t_read = now_s();
    rc = EXIT_FAIL;
    double geo[3], pixscale;
    int grc = hips_dataset_geometry(in.cel, in.plane.nx, in.plane.ny, a.galactic, &geo[0],
                                    &geo[1], NULL, NULL, &pixscale, &geo[2]);
    if (grc == TESS_ENOMEM) {
        msg("out of memory");
        goto done;
    }
    if (grc) {
        msg("the WCS of '%s' gives no sky position at the image centre", a.in_path);
        goto done;
    }
    /* Cut levels of the whole plane (PNG and JPEG tiles, properties) and the data range
     * (its 0 and 100 percentiles), as the server's planestore_cuts gives them. */
    double dmin = 0.0, dmax = 0.0;
    render_params range = a.render;
    range.min_cut = (render_cut){ 0.0, 1 };
    range.max_cut = (render_cut){ 100.0, 1 };
    if (plane_cuts(&in.plane, &a.render, &r.lo, &r.hi) != 0
        || plane_cuts(&in.plane, &range, &dmin, &dmax) != 0) {
        msg("out of memory computing the cut levels");
        goto done;
    }
    r.a = &a;
    r.cancel = &cancel;
    r.deepest = a.order >= 0 ? a.order : hips_survey_order(pixscale);
    if (hips_level_init(&tl, &in, hips_source_level(r.deepest, HIPS_TILE_SHIFT, pixscale), &a)
        != EXIT_OK || plan_tree(&r, &in, threads) != EXIT_OK)
        goto done;
    size_t tlen = strlen(a.out_dir) + 32;
    if (!(tmp = malloc(tlen))) {
        msg("out of memory");
        goto done;
    }
    snprintf(tmp, tlen, "%s.tmp-%ld", a.out_dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0) {
        msg("cannot create the temporary directory '%s': %s", tmp, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    r.dir = tmp;
    r.final_dir = a.out_dir;
    r.src = &tl.src;
    if (!a.quiet && isatty(STDERR_FILENO))
        r.b = &b;
    int mrc = make_tree(&r, workers, threads);
    t_tiles = now_s();
    if (atomic_load(&cancel))
        goto interrupted;
    if (mrc != 0) {
        msg("%s", r.err);
        goto done;
    }
    if (atomic_load(&r.written) == 0) {
        msg("plane %ld of '%s' has no finite pixel on the sky: no tile to write", a.plane,
            a.in_path);
        goto done;
    }
    if (write_survey_files(&r, &in, pixscale, geo, dmin, dmax) != EXIT_OK)
        goto done;
    if (atomic_load(&cancel))
        goto interrupted;
    if (rename(tmp, a.out_dir) != 0) {
        msg("cannot rename '%s' to '%s': %s", tmp, a.out_dir, strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;
    rc = EXIT_OK;
    if (a.timing)
        fprintf(stderr, "tessera: read %.3f s, tiles %.3f s, Allsky, Moc and properties "
                "%.3f s, total %.3f s (%ld tiles, orders 0..%d, %d threads)\n", t_read - t0,
                t_tiles - t_read, now_s() - t_tiles, now_s() - t0,
                (long)atomic_load(&r.written), r.deepest, threads);
    if (r.b)
        fprintf(stderr, "tessera: wrote %s (%ld tiles, orders 0..%d, %s frame) in %.2f s\n",
                a.out_dir, (long)atomic_load(&r.written), r.deepest,
                a.galactic ? "galactic" : "equatorial", now_s() - t0);
    goto done;
interrupted:
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    b.last = -1;
    msg("interrupted; nothing written");
    rc = EXIT_INTERRUPTED;
done:
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    pool_free(workers);
    if (have_sigth)
        release_signals(sigth);
    if (tmp) {
        remove_tree(tmp);
        free(tmp);
    }
    for (int k = 0; k <= HIPS_DEEPEST; k++) {
        tile_set_drop_data(&r.ord[k]);
        free(r.ord[k].npix);
    }
    pthread_mutex_destroy(&r.bar_lock);
    hips_level_release(&tl);
    hips_input_release(&in);
    free(a.in_path);
    free(a.out_dir);
    return rc;
}

/* What `tessera`, `tessera --help` print: the commands; each has its own --help. */
static const char overview_usage[] =
    "usage: tessera COMMAND [ARGS]   (tessera COMMAND --help: its options and exit statuses)\n"
    "\n"
    "The engine of tesserad, offline:\n"
    "  reproject   a FITS image or cube onto a target WCS (nearest, bilinear, bicubic,\n"
    "              lanczos3, or exact flux-conserving)\n"
    "  mosaic      many images onto one grid: reprojected, backgrounds matched, coadded\n"
    "  hips        a static HiPS tree of an image (properties, tiles, Allsky, Moc.fits)\n"
    "  mkstack     a synthetic EM-like stack of frames and its true trajectory\n"
    "A server's job API (--server URL, default $TESSERA_SERVER or http://127.0.0.1:8080):\n"
    "  submit      post a job (a JSON file) and follow it with a progress bar\n"
    "  jobs        list the server's jobs\n"
    "  cancel      cancel a job\n";

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(overview_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    /* A file size limit (ulimit -f) then fails a write with EFBIG, reported like any
     * other write error, instead of killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    if (strcmp(argv[1], "reproject") == 0)
        return cmd_reproject(argc - 1, argv + 1);
    if (strcmp(argv[1], "hips") == 0)
        return cmd_hips(argc - 1, argv + 1);
    if (strcmp(argv[1], "submit") == 0)
        return cmd_submit(argc - 1, argv + 1);
    if (strcmp(argv[1], "jobs") == 0)
        return cmd_jobs(argc - 1, argv + 1);
    if (strcmp(argv[1], "cancel") == 0)
        return cmd_cancel(argc - 1, argv + 1);
    if (strcmp(argv[1], "mkstack") == 0)
        return cmd_mkstack(argc - 1, argv + 1);
    if (strcmp(argv[1], "mosaic") == 0)
        return cmd_mosaic(argc - 1, argv + 1);
    msg("unknown command '%s' (commands: reproject, hips, mosaic, submit, jobs, cancel, mkstack)", argv[1]);
    return EXIT_USAGE;
}
