/* tessera hips: a static HiPS tree of an image, the deepest order resampled by the engine, each lower one merged from its children. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "engine/base/error.h"
#include "engine/base/hugemem.h"
#include "engine/base/pool.h"
#include "engine/fits/fitsimg.h"
#include "engine/hips/healpix.h"
#include "engine/image/pyramid.h"
#include "engine/image/render.h"
#include "engine/sky/kernels.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

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
    "                         cubehelix, Greys, coolwarm, RdBu, twilight, turbo, jet;\n"
    "                         NAME_r reversed\n"
    "  --max-coord-error PX   bound on the coordinate grid's error, tile pixels\n"
    "                         (default 0.001; 0 = exact transform at every pixel)\n"
    "  --threads N            threads (default 0 = one per core)\n"
    "  --quiet                no progress bar (it is drawn only on a terminal anyway)\n"
    "  --timing               print the time of each phase\n"
    "DIR must not exist or be empty.  The tree is written in a temporary directory next\n"
    "to DIR and renamed at the end; on failure or interruption nothing is left.\n"
    "Exit status: 0 done, 1 failure (input, WCS, I/O, memory, no finite pixel), 2 bad\n"
    "command line, 130 interrupted (SIGINT/SIGTERM).\n";

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

/* Parses `tessera hips ...` arguments (argv[0] is "hips"): options take their value as
 * the next argument or after '='.  Returns 0, -1 (--help shown), or CLI_EXIT_USAGE /
 * CLI_EXIT_FAIL (out of memory) after printing why. */
static int parse_hips(int argc, char **argv, hips_args *a)
{
    memset(a, 0, sizeof *a);
    a->order = -1;
    a->formats = HIPS_FMT_BIT(HIPS_FMT_PNG) | HIPS_FMT_BIT(HIPS_FMT_FITS);
    a->method = RP_BILINEAR;
    a->max_coord_error = 0.001;
    render_params_default(&a->render);
    cli_args c = { NULL, 0, 0 };
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        int t = cli_take_arg("hips", hips_usage, argv[i], &c);
        if (t == CLI_ARG_HELP)
            return -1;
        if (t == CLI_ARG_BAD)
            return CLI_EXIT_USAGE;
        if (t == CLI_ARG_TAKEN)
            continue;
        static const char *const opts[] = { "-o", "--output", "--order", "--format", "--frame",
                                            "--method", "--plane", "--stretch", "--min-cut",
                                            "--max-cut", "--cmap", "--max-coord-error",
                                            "--threads", NULL };
        const char *val = NULL;
        int which = cli_option_value(argc, argv, &i, "hips", opts, &val), bad = 0;
        const char *want = NULL;
        switch (which) {
        case -1:
            return CLI_EXIT_USAGE;
        case 0:
        case 1:
            out = val;
            break;
        case 2:
            bad = cli_parse_int(val, HIPS_ORDER_FLOOR, HIPS_DEEPEST, &a->order);
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
            bad = cli_parse_int(val, 0, INT_MAX, &z);
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
            want = "grey, viridis, inferno, magma, plasma, cubehelix, Greys, coolwarm, "
                   "RdBu, twilight, turbo or jet, or one of them with _r";
            break;
        case 11:
            bad = cli_parse_double(val, &a->max_coord_error) || !isfinite(a->max_coord_error)
                  || a->max_coord_error < 0.0 || a->max_coord_error > 10.0;
            want = "a number of tile pixels from 0 to 10";
            break;
        default:
            bad = cli_parse_int(val, 0, 1024, &a->threads);
            want = "an integer from 0 to 1024";
            break;
        }
        if (bad) {
            cli_msg("hips: %s must be %s, not '%s'", opts[which], want, val);
            return CLI_EXIT_USAGE;
        }
    }
    const char *in = c.input;
    a->quiet = c.quiet;
    a->timing = c.timing;
    const render_cut *lo = &a->render.min_cut, *hi = &a->render.max_cut;
    if (lo->is_percent == hi->is_percent && lo->value > hi->value) {
        cli_msg("hips: --min-cut (%g%s) is above --max-cut (%g%s)", lo->value,
                lo->is_percent ? "%" : "", hi->value, hi->is_percent ? "%" : "");
        return CLI_EXIT_USAGE;
    }
    if (!in || !out) {
        cli_msg("hips: %s is required (see tessera hips --help)", !in ? "an input file" : "-o DIR");
        return CLI_EXIT_USAGE;
    }
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n == 0 || strcmp(out, "/") == 0) {
        cli_msg("hips: -o needs the name of a directory to create, not '%s'", out);
        return CLI_EXIT_USAGE;
    }
    int rc = cli_split_hdu(in, &a->in_path, &a->in_hdu);
    if (rc == 0 && !(a->out_dir = strndup(out, n)))
        rc = TESS_ENOMEM;
    if (rc == TESS_ENOMEM) {
        cli_msg("hips: out of memory");
        return CLI_EXIT_FAIL;
    }
    if (rc) {
        cli_msg("hips: bad HDU number in '%s'", in);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* The image as the server holds a dataset (daemon/catalog.c, daemon/cache/planes.c): the
 * header read by fitsimg, its celestial WCS, and one plane of physical values (float32
 * for BITPIX 8, 16 and -32, float64 otherwise, scaled and BLANK-masked as
 * fitsimg_read_region does), so that the tiles are the server's to the bit. */
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
 * at once on `workers`.  Returns 0 or CLI_EXIT_FAIL after printing why. */
static int read_hips_input(pool *workers, int threads, const char *path, int hdu, long z,
                           hips_input *in)
{
    memset(in, 0, sizeof *in);
    char err[256] = "";
    if (fitsimg_read_info(path, hdu, &in->info, err, sizeof err)) {
        cli_msg("cannot read input '%s': %s", path, err);
        return CLI_EXIT_FAIL;
    }
    const fitsimg_info *fi = &in->info;
    long nx = fi->naxes[0], ny = fi->naxes[1];
    in->nz = fi->naxis >= 3 ? fi->naxes[2] : 1;
    if (fi->naxis < 2 || (fi->naxis == 4 && fi->naxes[3] != 1) || nx < 1 || ny < 1) {
        cli_msg("HDU %d of '%s' is not an image or cube (NAXIS = %d)", hdu, path, fi->naxis);
        goto fail;
    }
    if (z >= in->nz) {
        cli_msg("--plane %ld: '%s' has %ld plane%s (0..%ld)", z, path, in->nz,
                in->nz == 1 ? "" : "s", in->nz - 1);
        goto fail;
    }
    int wrc = skywcs_parse(fi->header, fi->nkeys, &in->wcs, err, sizeof err);
    if (wrc == TESS_EINVAL) {
        cli_msg("'%s' has no usable WCS: %s", path, err);
        goto fail;
    }
    if (wrc != 0 || !(in->cel = skywcs_celestial(in->wcs))) {
        cli_msg("'%s' has no celestial WCS%s%s: it cannot be made a HiPS survey", path,
                err[0] ? ": " : "", err);
        goto fail;
    }
    /* Counts of finite pixels under a reduced pixel are uint32 (engine/image/pyramid.h). */
    if ((unsigned long long)nx * (unsigned long long)ny >= 0xFFFFFFFFULL) {
        cli_msg("the plane of '%s' (%ld x %ld) is too large", path, nx, ny);
        goto fail;
    }
    int bp = fi->bitpix, f64 = bp == -64 || bp == 32 || bp == 64;
    in->plane.dtype = f64 ? RP_F64 : RP_F32;
    in->plane.nx = nx;
    in->plane.ny = ny;
    size_t n = (size_t)nx * (size_t)ny, es = f64 ? sizeof(double) : sizeof(float);
    in->plane.data = tess_alloc_huge(n * es);
    if (!in->plane.data) {
        cli_msg("out of memory for the plane of '%s' (%zu pixels)", path, n);
        goto fail;
    }
    if (cli_read_values(workers, threads, path, hdu, f64 ? FITSIMG_F64 : FITSIMG_F32,
                        (size_t)z * n, in->plane.data, n, es) != 0)
        goto fail;
    return CLI_EXIT_OK;
fail:
    hips_input_release(in);
    return CLI_EXIT_FAIL;
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
 * `method`.  Returns 0 or CLI_EXIT_FAIL after printing why. */
static int hips_level_init(hips_level *l, const hips_input *in, int level, const hips_args *a)
{
    memset(l, 0, sizeof *l);
    const rp_plane *p = &in->plane;
    int top = pyramid_top_level(p->nx, p->ny);
    if (level > top)
        level = top;
    if (level > 0) {
        if (pyramid_level(p, level, &l->reduced) != 0) {
            cli_msg("out of memory reducing the plane to level %d", level);
            return CLI_EXIT_FAIL;
        }
        p = &l->reduced;
    }
    char err[256] = "";
    l->kernel = rp_kernel_new(a->method, p, err, sizeof err);
    if (!l->kernel) {
        cli_msg("cannot prepare the %s kernel: %s", rp_method_name(a->method), err);
        free(l->reduced.data);
        return CLI_EXIT_FAIL;
    }
    l->src = (hips_source){ in->cel, in->plane.nx, in->plane.ny, l->kernel, p->nx, p->ny,
                            level, a->method, a->max_coord_error, 0.0, 0 };
    return CLI_EXIT_OK;
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
 * renamed onto it); CLI_EXIT_FAIL after printing why otherwise. */
static int check_out_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            return CLI_EXIT_OK;
        cli_msg("cannot use output directory '%s': %s", dir, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (!S_ISDIR(st.st_mode)) {
        cli_msg("'%s' exists and is not a directory", dir);
        return CLI_EXIT_FAIL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        cli_msg("cannot read output directory '%s': %s", dir, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    if (!empty) {
        cli_msg("'%s' exists and is not empty: tessera hips writes a new tree (remove it or "
                "choose another directory)", dir);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
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
    unsigned char *made;               /* made[i]: tile ord[deepest].npix[i] was written */
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
        long at = tile_index(&r->ord[k], t);
        if (at >= 0)
            r->made[at] = 1;
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
 * least 4 tiles a thread (the deepest when none has).  Returns 0 or CLI_EXIT_FAIL after
 * printing why. */
static int plan_tree(hips_run *r, const hips_input *in, int threads)
{
    int K = r->deepest;
    int rc = hips_tiles_covering(in->cel, in->plane.nx, in->plane.ny, r->a->galactic, K,
                                 &r->ord[K].npix, &r->ord[K].n);
    if (rc) {
        cli_msg("cannot list the tiles of order %d: %s", K,
                rc == TESS_ENOMEM ? "out of memory" : "bad WCS");
        return CLI_EXIT_FAIL;
    }
    if (!(r->made = calloc(r->ord[K].n ? r->ord[K].n : 1, 1))) {
        cli_msg("out of memory");
        return CLI_EXIT_FAIL;
    }
    for (int k = K - 1; k >= 0; k--) {
        const tile_set *below = &r->ord[k + 1];
        tile_set *s = &r->ord[k];
        if (below->n == 0)
            continue;
        if (!(s->npix = malloc(sizeof(int64_t) * below->n))) {
            cli_msg("out of memory");
            return CLI_EXIT_FAIL;
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
    return CLI_EXIT_OK;
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
 * into r->dir.  Returns 0 or CLI_EXIT_FAIL after printing why. */
static int write_survey_files(hips_run *r, const hips_input *in, double pixscale,
                              const double geo[3], double dmin, double dmax)
{
    const hips_args *a = r->a;
    char path[PATH_MAX], err[256] = "";
    int e = 0;
    hips_level al;
    if (hips_level_init(&al, in, hips_source_level(HIPS_ALLSKY_ORDER, HIPS_ALLSKY_SHIFT,
                                                   pixscale), a) != CLI_EXIT_OK)
        return CLI_EXIT_FAIL;
    snprintf(path, sizeof path, "%s/Norder%d", r->dir, HIPS_ALLSKY_ORDER);
    if ((e = make_dir(path)) != 0) {
        cli_msg("cannot create '%s': %s", path, strerror(e));
        hips_level_release(&al);
        return CLI_EXIT_FAIL;
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
            cli_msg("cannot make the Allsky picture: %s", err);
            hips_level_release(&al);
            return CLI_EXIT_FAIL;
        }
        snprintf(path, sizeof path, "%s/Norder%d/Allsky.%s", r->dir, HIPS_ALLSKY_ORDER,
                 hips_format_ext(fmts[f]));
        e = write_file(path, bytes, len);
        free(bytes);
        if (e) {
            cli_msg("cannot write '%s': %s", path, strerror(e));
            hips_level_release(&al);
            return CLI_EXIT_FAIL;
        }
    }
    hips_level_release(&al);
    run_step(r);

    unsigned char *moc = NULL;
    size_t len = 0;
    /* The coverage: the tiles of the deepest order that were written, so that every cell
     * has its file. */
    const tile_set *deep = &r->ord[r->deepest];
    size_t nmade = 0;
    for (size_t i = 0; i < deep->n; i++)
        if (r->made[i])
            deep->npix[nmade++] = deep->npix[i];
    int rc = hips_moc_fits_cells(deep->npix, nmade, r->deepest, a->galactic, &moc, &len, NULL);
    if (rc) {
        cli_msg("cannot write the coverage (Moc.fits): %s",
                rc == TESS_ENOMEM ? "out of memory" : "bad tile list");
        return CLI_EXIT_FAIL;
    }
    snprintf(path, sizeof path, "%s/Moc.fits", r->dir);
    e = write_file(path, moc, len);
    free(moc);
    if (e) {
        cli_msg("cannot write '%s': %s", path, strerror(e));
        return CLI_EXIT_FAIL;
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
        cli_msg("out of memory");
        return CLI_EXIT_FAIL;
    }
    snprintf(path, sizeof path, "%s/properties", r->dir);
    e = write_file(path, text, len);
    free(text);
    if (!e) {
        snprintf(path, sizeof path, "%s/index.html", r->dir);
        e = write_index(path, name, a, in, r->deepest);
    }
    if (e) {
        cli_msg("cannot write '%s': %s", path, strerror(e));
        return CLI_EXIT_FAIL;
    }
    run_step(r);
    return CLI_EXIT_OK;
}

int cmd_hips(int argc, char **argv)
{
    hips_args a;
    int rc = parse_hips(argc, argv, &a);
    if (rc != 0) {
        free(a.in_path);
        free(a.out_dir);
        return rc == -1 ? CLI_EXIT_OK : rc;
    }
    double t0 = cli_now_s(), t_read = t0, t_tiles = t0;
    int threads = cli_threads(a.threads);
    atomic_int cancel = 0;
    pthread_t sigth;
    /* SIGINT/SIGTERM raise `cancel`: the threads stop between tiles and the temporary
     * tree is removed. */
    int have_sigth = cli_signals_start(cli_signal_flag, &cancel, &sigth);
    pool *workers = cli_workers_new(threads);
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
    if (rc == CLI_EXIT_OK)
        rc = read_hips_input(workers, threads, a.in_path, a.in_hdu, a.plane, &in);
    if (rc != CLI_EXIT_OK)
        goto done;
    if (atomic_load(&cancel))       /* a signal while the input was read */
        goto interrupted;
    t_read = cli_now_s();
    rc = CLI_EXIT_FAIL;
    double geo[3], pixscale;
    int grc = hips_dataset_geometry(in.cel, in.plane.nx, in.plane.ny, a.galactic, &geo[0],
                                    &geo[1], NULL, NULL, &pixscale, &geo[2]);
    if (grc == TESS_ENOMEM) {
        cli_msg("out of memory");
        goto done;
    }
    if (grc) {
        cli_msg("the WCS of '%s' gives no sky position at the image centre", a.in_path);
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
        cli_msg("out of memory computing the cut levels");
        goto done;
    }
    r.a = &a;
    r.cancel = &cancel;
    r.deepest = a.order >= 0 ? a.order : hips_survey_order(pixscale);
    if (hips_level_init(&tl, &in, hips_source_level(r.deepest, HIPS_TILE_SHIFT, pixscale), &a)
        != CLI_EXIT_OK || plan_tree(&r, &in, threads) != CLI_EXIT_OK)
        goto done;
    size_t tlen = strlen(a.out_dir) + 32;
    if (!(tmp = malloc(tlen))) {
        cli_msg("out of memory");
        goto done;
    }
    snprintf(tmp, tlen, "%s.tmp-%ld", a.out_dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0) {
        cli_msg("cannot create the temporary directory '%s': %s", tmp, strerror(errno));
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
    t_tiles = cli_now_s();
    if (atomic_load(&cancel))
        goto interrupted;
    if (mrc != 0) {
        cli_msg("%s", r.err);
        goto done;
    }
    if (atomic_load(&r.written) == 0) {
        cli_msg("plane %ld of '%s' has no finite pixel on the sky: no tile to write", a.plane,
                a.in_path);
        goto done;
    }
    if (write_survey_files(&r, &in, pixscale, geo, dmin, dmax) != CLI_EXIT_OK)
        goto done;
    if (atomic_load(&cancel))
        goto interrupted;
    if (rename(tmp, a.out_dir) != 0) {
        cli_msg("cannot rename '%s' to '%s': %s", tmp, a.out_dir, strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;
    rc = CLI_EXIT_OK;
    if (a.timing)
        fprintf(stderr, "tessera: read %.3f s, tiles %.3f s, Allsky, Moc and properties "
                "%.3f s, total %.3f s (%ld tiles, orders 0..%d, %d threads)\n", t_read - t0,
                t_tiles - t_read, cli_now_s() - t_tiles, cli_now_s() - t0,
                (long)atomic_load(&r.written), r.deepest, threads);
    if (r.b)
        fprintf(stderr, "tessera: wrote %s (%ld tiles, orders 0..%d, %s frame) in %.2f s\n",
                a.out_dir, (long)atomic_load(&r.written), r.deepest,
                a.galactic ? "galactic" : "equatorial", cli_now_s() - t0);
    goto done;
interrupted:
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    b.last = -1;
    cli_msg("interrupted; nothing written");
    rc = CLI_EXIT_INTERRUPTED;
done:
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    pool_free(workers);
    if (have_sigth)
        cli_signals_stop(sigth);
    if (tmp) {
        remove_tree(tmp);
        free(tmp);
    }
    for (int k = 0; k <= HIPS_DEEPEST; k++) {
        tile_set_drop_data(&r.ord[k]);
        free(r.ord[k].npix);
    }
    free(r.made);
    pthread_mutex_destroy(&r.bar_lock);
    hips_level_release(&tl);
    hips_input_release(&in);
    free(a.in_path);
    free(a.out_dir);
    return rc;
}

