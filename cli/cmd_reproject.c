/* tessera reproject: a FITS image or cube onto a target WCS, its blocks written out as the engine finishes them. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "engine/base/byteswap.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hugemem.h"
#include "engine/base/pool.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

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

/* Parses `tessera reproject ...` arguments (argv[0] is "reproject").  Options take their
 * value as the next argument or after '='.  Returns 0, 1 (--help shown) or CLI_EXIT_USAGE
 * after printing why. */
static int parse_reproject(int argc, char **argv, reproject_args *a)
{
    memset(a, 0, sizeof *a);
    a->method = RP_BILINEAR;
    a->max_coord_error = 0.001;
    cli_args c = { NULL, 0, 0 };
    const char *target = NULL;
    for (int i = 1; i < argc; i++) {
        int t = cli_take_arg("reproject", reproject_usage, argv[i], &c);
        if (t == CLI_ARG_HELP)
            return 1;
        if (t == CLI_ARG_BAD)
            return CLI_EXIT_USAGE;
        if (t == CLI_ARG_TAKEN)
            continue;
        static const char *const opts[] = { "--target", "-o", "--output", "--method",
                                            "--max-coord-error", "--threads", NULL };
        const char *val = NULL;
        int which = cli_option_value(argc, argv, &i, "reproject", opts, &val);
        if (which < 0)
            return CLI_EXIT_USAGE;
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
                cli_msg("reproject: --method must be nearest, bilinear, bicubic, lanczos3 or "
                        "exact, not '%s'", val);
                return CLI_EXIT_USAGE;
            }
            break;
        case 4:
            if (cli_parse_double(val, &a->max_coord_error) || !isfinite(a->max_coord_error)
                || a->max_coord_error < 0.0) {
                cli_msg("reproject: --max-coord-error must be a number >= 0, not '%s'", val);
                return CLI_EXIT_USAGE;
            }
            break;
        default:
            if (cli_parse_int(val, 0, 1024, &a->threads)) {
                cli_msg("reproject: --threads must be an integer from 0 to 1024, not '%s'", val);
                return CLI_EXIT_USAGE;
            }
            break;
        }
    }
    const char *in = c.input;
    a->quiet = c.quiet;
    a->timing = c.timing;
    if (!in || !target || !a->out_path) {
        cli_msg("reproject: %s is required (see tessera reproject --help)",
                !in ? "an input file" : !target ? "--target" : "-o OUT.fits");
        return CLI_EXIT_USAGE;
    }
    if (cli_split_hdu(in, &a->in_path, &a->in_hdu)
        || cli_split_hdu(target, &a->target_path, &a->target_hdu)) {
        cli_msg("reproject: bad HDU number in '%s' or '%s'", in, target);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

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

/* 1 when the CTYPE value names a celestial axis with a projection ("RA---TAN",
 * "GLAT-CAR", "DEC--SFL"...: four characters of axis type, '-', a projection code). */
static int celestial_ctype(const char *v)
{
    static const char *const kinds[] = { "RA--", "DEC-", "GLON", "GLAT", "ELON", "ELAT",
                                         "SLON", "SLAT", "HLON", "HLAT", "HPLN", "HPLT",
                                         "HGLN", "HGLT", "CRLN", "CRLT", NULL };
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
        cli_msg("cannot read input '%s': %s", path, err);
        return CLI_EXIT_FAIL;
    }
    const fitsimg_info *fi = &in->info;
    const long *naxes = fi->naxes;
    int naxis = fi->naxis, bitpix = fi->bitpix;
    long nz = 1;
    if (naxis == 4 && naxes[3] != 1) {
        cli_msg("'%s' has %d axes: tessera reprojects images and cubes (axes 4 and up of "
                "length 1)", path, naxis);
        goto fail;
    }
    /* fitsimg_read_info has checked the structure: every NAXISn >= 1, the data unit
     * within the file (fitscard_check_image). */
    if (naxis < 2) {
        cli_msg("HDU %d of '%s' is not an image (NAXIS = %d)", hdu, path, naxis);
        goto fail;
    }
    if (naxis >= 3)
        nz = naxes[2];
    if (skywcs_parse(fi->header, fi->nkeys, &in->wcs, err, sizeof err)) {
        cli_msg("'%s' has no usable WCS: %s", path, err);
        goto fail;
    }
    if (!fitscard_get(fi->header, fi->nkeys, "CTYPE1", v, sizeof v) || !celestial_ctype(v)
        || !fitscard_get(fi->header, fi->nkeys, "CTYPE2", v, sizeof v) || !celestial_ctype(v)
        || !skywcs_has_celestial(in->wcs)) {
        cli_msg("'%s': axes 1 and 2 must be celestial or solar (CTYPE1/CTYPE2 like RA---TAN, "
                "DEC--TAN or HPLN-TAN, HPLT-TAN)", path);
        goto fail;
    }
    int f32 = bitpix == 8 || bitpix == 16 || bitpix == -32;
    size_t es = f32 ? sizeof(float) : sizeof(double), bytes;
    if (tess_size_dims(es, (const long[]){naxes[0], naxes[1], nz}, 3, &bytes)) {
        cli_msg("'%s': %ld x %ld x %ld values are too many to hold", path, naxes[0], naxes[1],
                nz);
        goto fail;
    }
    size_t n = bytes / es;
    in->cube.dtype = f32 ? RP_F32 : RP_F64;
    in->cube.nx = naxes[0];
    in->cube.ny = naxes[1];
    in->cube.nz = nz;
    in->cube.data = tess_alloc_huge(bytes);
    if (!in->cube.data) {
        cli_msg("out of memory for the input (%zu pixels)", n);
        goto fail;
    }
    /* Integers are scaled in float32 arithmetic, (float)raw * (float)BSCALE then
     * + (float)BZERO, as astropy.io.fits does for BITPIX 8 and 16, so that results
     * match astropy's to the bit (cfitsio would scale in double and round once);
     * unscaled IEEE floats are read as stored. */
    if (cli_read_values(workers, threads, path, hdu, f32 ? FITSIMG_F32_ASTROPY : FITSIMG_F64, 0,
                      in->cube.data, n, es) != 0)
        goto fail;
    return CLI_EXIT_OK;
fail:
    input_release(in);
    return CLI_EXIT_FAIL;
}

/* The output file while it is written: a temporary file next to the final name, sized,
 * with both headers in place.  The engine's threads write the pixels into anonymous
 * memory on transparent huge pages (few page faults, where a shared file mapping takes
 * one per page: costly under virtualisation, and contended when two threads fault the
 * same folio); each band of rows, once all its blocks are done, is made big-endian and
 * written with pwrite by the thread that finished it.  For interpolation that memory is
 * a ring of a few bands (rp_options.ring_rows) reused from band to band, so that the
 * output does not fault in and zero-fill fresh pages for every band (about 7% of a
 * 1-thread 4000^2 bilinear run); for exact it holds every row and each band's pages are
 * released once written. */
typedef struct outfile {
    char *path, *tmp;
    int fd;
    unsigned char *data;  /* HDU 0 values (tess_alloc_huge) */
    unsigned char *fp;    /* HDU 1 values (tess_alloc_huge) */
    long ny;              /* rows of a plane */
    long held;            /* rows of a plane held in data and fp: ny, or the engine's
                             ring (rp_options.ring_rows) */
    size_t size;
    size_t d0, d1;        /* file offsets of the data of HDU 0 and HDU 1 */
    size_t n, es, fes;    /* values per HDU, bytes per HDU 0 and HDU 1 value */
    atomic_int werr;      /* errno of the first failed write, 0 if none */
    atomic_size_t wrote;  /* values written to the file so far */
    atomic_ullong dsum;   /* ones' complement sums (fitswrite_sum32) of the data units */
    atomic_ullong fsum;   /* of HDU 0 and 1 as finished so far, unfolded */
} outfile;

/* Bytes rounded up to whole 2880-byte FITS blocks. */
static size_t fits_blocks(size_t bytes)
{
    return (bytes + 2879) / 2880 * 2880;
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

/* The engine's block edge when the output streams through a ring of rows (the engine's
 * default edge; results do not depend on it). */
#define RING_BLOCK 256

/* Cards in the target header, or in a header made here, at most. */
#define MAX_CARDS 100000

/* What goes into the headers of the output file. */
typedef struct outspec {
    const char *tcards;   /* target header */
    int tkeys;
    const char *in_cards; /* the input's header, for a cube's axis-3 cards when the */
    int in_nkeys;         /* target is 2-D */
    int target_3d;        /* the target header describes the third axis itself */
    int target_fits;      /* the target is a FITS file's header: its commentary cards
                             describe that file, not the output */
    rp_dtype dtype;
    long nx, ny, nz;
    rp_method method;
} outspec;

/* 1 for a target card the output's HDU 0 leaves out: the structural ones
 * (fitscard_is_structural), which it writes itself; blank-keyword cards; the COMMENT
 * and HISTORY cards of a FITS file (`from_fits`); WCSAXES when the cube's third axis is
 * added to a 2-D target (`adding_axis3`), as it would then count one axis too few. */
static int target_card_dropped(const char *c, int from_fits, int adding_axis3)
{
    return fitscard_is_structural(c) || memcmp(c, "        ", 8) == 0
           || (from_fits && (fitscard_key_is(c, "COMMENT") || fitscard_key_is(c, "HISTORY")))
           || (adding_axis3 && fitscard_key_is(c, "WCSAXES"));
}

/* 1 for the keywords of a cube's third (spectral) axis, copied from the input when the
 * target header is 2-D. */
static int axis3_card(const char *c)
{
    static const char *const keys[] = { "CTYPE3", "CRPIX3", "CRVAL3", "CDELT3", "CUNIT3",
                                        "CROTA3", "PC3_3", "CD3_3", "CNAME3", "SPECSYS",
                                        "SSYSOBS", "RESTFRQ", "RESTFREQ", "RESTWAV", "VELREF",
                                        "SSYSSRC", "ZSOURCE", "VELOSYS", NULL };
    for (int i = 0; keys[i]; i++)
        if (fitscard_key_is(c, keys[i]))
            return 1;
    return 0;
}

/* The cards of the output's HDU 0 (the data, with the target's WCS cards) into h0 and
 * of HDU 1 (FOOTPRINT) into h1, both without END.  Returns 0 or a negative TESS_E*
 * code (out of memory, too many cards). */
static int build_headers(const outspec *o, fitscard_list *h0, fitscard_list *h1)
{
    int naxis = o->nz > 1 || o->target_3d ? 3 : 2;
    int add_axis3 = o->nz > 1 && !o->target_3d;
    long naxes[3] = { o->nx, o->ny, o->nz };
    static const char *const nk[3] = { "NAXIS1", "NAXIS2", "NAXIS3" };
    fitscard_list_logical(h0, "SIMPLE", 1, NULL);
    fitscard_list_int(h0, "BITPIX", o->dtype == RP_F32 ? -32 : -64, NULL);
    fitscard_list_int(h0, "NAXIS", naxis, NULL);
    for (int k = 0; k < naxis; k++)
        fitscard_list_int(h0, nk[k], naxes[k], NULL);
    fitscard_list_logical(h0, "EXTEND", 1, NULL);
    for (int i = 0; i < o->tkeys; i++) {
        const char *c = o->tcards + (size_t)i * FITSCARD_LEN;
        if (!target_card_dropped(c, o->target_fits, add_axis3))
            fitscard_list_cards(h0, c, 1);
    }
    for (int i = 0; add_axis3 && i < o->in_nkeys; i++) {
        const char *c = o->in_cards + (size_t)i * FITSCARD_LEN;
        if (axis3_card(c))
            fitscard_list_cards(h0, c, 1);
    }
    char hist[FITSCARD_LEN];
    snprintf(hist, sizeof hist, "tessera reproject, method %s", rp_method_name(o->method));
    fitscard_list_commentary(h0, "HISTORY", hist);
    fitscard_list_string(h0, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h0, "DATASUM", "0", 0, "data unit checksum");
    fitscard_list_string(h1, "XTENSION", "IMAGE", 8, "image extension");
    fitscard_list_int(h1, "BITPIX", o->method == RP_EXACT ? -32 : 8, NULL);
    fitscard_list_int(h1, "NAXIS", naxis, NULL);
    for (int k = 0; k < naxis; k++)
        fitscard_list_int(h1, nk[k], naxes[k], NULL);
    fitscard_list_int(h1, "PCOUNT", 0, NULL);
    fitscard_list_int(h1, "GCOUNT", 1, NULL);
    fitscard_list_string(h1, "EXTNAME", "FOOTPRINT", 8, "coverage of each output pixel");
    fitscard_list_string(h1, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
    fitscard_list_string(h1, "DATASUM", "0", 0, "data unit checksum");
    return h0->rc ? h0->rc : h1->rc;
}

/* A header of the n cards in `l`, with END and padded to whole blocks: malloc'd, its
 * size in *len; NULL when out of memory. */
static char *header_bytes(const fitscard_list *l, size_t *len)
{
    *len = fitscard_header_size(l->n);
    char *h = malloc(*len);
    if (h)
        fitscard_header_write(h, l->cards ? l->cards : "", l->n);
    return h;
}

/* Reserves the file's blocks in one call where the file system can (Linux fallocate):
 * the bands written afterwards then land in allocated, unwritten extents instead of
 * reserving delayed-allocation space page by page (ext4), which cost about a quarter of
 * the time of writing 80 MB.  An optimisation only: a refusal (EOPNOTSUPP, or ENOSPC,
 * which the writes will report) is ignored, and nothing is written (no fallback that
 * writes zeros, as posix_fallocate has).  Cannot fail. */
static void out_reserve(int fd, size_t size)
{
#if defined(__linux__)
    (void)fallocate(fd, 0, 0, (off_t)size);
#else
    (void)fd;
    (void)size;
#endif
}

/* Creates the temporary file for `path`, sized, with both headers written, and the
 * memory for the pixels: `held` rows of each plane (o->ny, or a ring of fewer).  Returns
 * 0 or CLI_EXIT_FAIL after printing why. */
static int out_create(outfile *f, const char *path, const outspec *o, long held)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    fitscard_list l0, l1;
    fitscard_list_init(&l0, MAX_CARDS + 64);
    fitscard_list_init(&l1, 64);
    char *h0 = NULL, *h1 = NULL;
    size_t n0 = 0, n1 = 0;
    size_t plen = strlen(path) + 32;
    f->tmp = malloc(plen);
    if (f->tmp && build_headers(o, &l0, &l1) == 0) {
        h0 = header_bytes(&l0, &n0);
        h1 = header_bytes(&l1, &n1);
    }
    fitscard_list_release(&l0);
    fitscard_list_release(&l1);
    if (!h0 || !h1) {
        cli_msg("out of memory");
        free(h0);
        free(h1);
        out_abort(f);
        return CLI_EXIT_FAIL;
    }
    snprintf(f->tmp, plen, "%s.tmp-%ld", path, (long)getpid());
    f->n = (size_t)o->nx * (size_t)o->ny * (size_t)o->nz;
    f->ny = o->ny;
    f->held = held;
    size_t nheld = (size_t)o->nx * (size_t)held * (size_t)o->nz;
    f->es = o->dtype == RP_F32 ? 4 : 8;
    f->d0 = n0;
    f->fes = o->method == RP_EXACT ? 4 : 1;
    f->d1 = f->d0 + fits_blocks(f->n * f->es) + n1;
    f->size = f->d1 + fits_blocks(f->n * f->fes);
    atomic_init(&f->werr, 0);
    atomic_init(&f->wrote, 0);
    atomic_init(&f->dsum, 0);
    atomic_init(&f->fsum, 0);
    /* A new file only: O_EXCL fails on anything already there, a symbolic link included
     * (the name is predictable). */
    f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    const char *what = "create";
    if (f->fd >= 0) {
        what = "write";
        if (ftruncate(f->fd, (off_t)f->size) == 0 && (out_reserve(f->fd, f->size), 1)
            && tess_pwrite_all(f->fd, (const unsigned char *)h0, n0, 0) == 0
            && tess_pwrite_all(f->fd, (const unsigned char *)h1, n1, (off_t)(f->d1 - n1)) == 0) {
            what = NULL;
            f->data = tess_alloc_huge(nheld * f->es);
            f->fp = tess_alloc_huge(nheld * f->fes);
            if (!f->data || !f->fp) {
                free(h0);
                free(h1);
                cli_msg("out of memory for a %zu-value output", f->n);
                out_abort(f);
                return CLI_EXIT_FAIL;
            }
        }
    }
    free(h0);
    free(h1);
    if (what) {
        cli_msg("cannot %s the output file '%s': %s", what, f->tmp, strerror(errno));
        if (f->fd < 0) {          /* what is there is not ours: leave it */
            free(f->tmp);
            f->tmp = NULL;
        }
        out_abort(f);
        return CLI_EXIT_FAIL;
    }
    f->path = (char *)path;
    return CLI_EXIT_OK;
}

/* Finishes the output block by block as the engine hands blocks over (rp_block_fn):
 * the footprint (isfinite of the data, as bytes, unless the engine wrote it) and both
 * arrays to big-endian, and their checksums (DATASUM) summed, row by row while the
 * block is still in cache; once every block of a band of
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

/* The index in f->data (in values) of row y of plane z, nx values a row. */
static size_t held_index(const outfile *f, long nx, long z, long y)
{
    return ((size_t)z * (size_t)f->held + (size_t)(y % f->held)) * (size_t)nx;
}

static void finish_block(void *arg, long z0, long nz, long x0, long y0, long w, long h)
{
    finisher *fi = arg;
    outfile *f = fi->f;
    uint32_t ds = 0, fs = 0;
    for (long z = z0; z < z0 + nz; z++) {
        for (long y = y0; y < y0 + h; y++) {
            /* k: the value's index in the file's data unit; m: in memory */
            size_t k = ((size_t)z * (size_t)fi->ny + (size_t)y) * (size_t)fi->nx + (size_t)x0;
            size_t m = held_index(f, fi->nx, z, y) + (size_t)x0;
            unsigned char *d = f->data + m * f->es;
            unsigned char *fp = f->fp + m * f->fes;
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
            ds = fitswrite_sum32_at(d, (size_t)w * f->es, k * f->es, ds);
            fs = fitswrite_sum32_at(fp, (size_t)w * f->fes, k * f->fes, fs);
        }
        long full = atomic_fetch_add(&fi->done[(size_t)z * (size_t)fi->ny + (size_t)y0], w) + w;
        if (full == fi->nx) {
            /* The band's rows are consecutive in memory too: a ring holds whole bands. */
            size_t k = ((size_t)z * (size_t)fi->ny + (size_t)y0) * (size_t)fi->nx;
            size_t m = held_index(f, fi->nx, z, y0);
            size_t n = (size_t)h * (size_t)fi->nx;
            if (atomic_load(&f->werr) == 0
                && (tess_pwrite_all(f->fd, f->data + m * f->es, n * f->es,
                                    (off_t)(f->d0 + k * f->es)) != 0
                    || tess_pwrite_all(f->fd, f->fp + m * f->fes, n * f->fes,
                                       (off_t)(f->d1 + k * f->fes)) != 0)) {
                int e = errno ? errno : EIO, zero = 0;
                atomic_compare_exchange_strong(&f->werr, &zero, e);
            }
            atomic_fetch_add(&f->wrote, n);
            if (f->held == f->ny) {       /* no ring: memory not used again */
                release_pages(f->data + m * f->es, n * f->es, fi->page);
                release_pages(f->fp + m * f->fes, n * f->fes, fi->page);
            }
        }
    }
    atomic_fetch_add(&f->dsum, ds);
    atomic_fetch_add(&f->fsum, fs);
}

/* A ones' complement sum kept unfolded in 64 bits, folded to 32. */
static uint32_t fold_sum(unsigned long long s)
{
    while (s >> 32)
        s = (s & 0xffffffffu) + (s >> 32);
    return (uint32_t)s;
}

/* Closes the finished file and renames it to its final name.  Returns 0 or CLI_EXIT_FAIL
 * after printing why (the temporary file is then removed). */
static int out_commit(outfile *f)
{
    int e = atomic_load(&f->werr);
    if (e == 0 && atomic_load(&f->wrote) != f->n) {
        cli_msg("internal error: %zu of %zu output values were handed over by the engine",
                atomic_load(&f->wrote), f->n);
        out_abort(f);
        return CLI_EXIT_FAIL;
    }
    if (e == 0 && close(f->fd) != 0)
        e = errno;
    else if (e != 0)
        close(f->fd);
    f->fd = -1;
    char why[512];
    /* Every value was summed as its block was finished: only the headers are read. */
    const uint32_t sums[2] = { fold_sum(atomic_load(&f->dsum)), fold_sum(atomic_load(&f->fsum)) };
    if (e == 0 && fitswrite_checksum_file_sums(f->tmp, sums, 2, why, sizeof why) != 0) {
        cli_msg("cannot set the checksums of '%s': %s", f->path, why);
        out_abort(f);
        return CLI_EXIT_FAIL;
    }
    if (e == 0 && rename(f->tmp, f->path) != 0)
        e = errno;
    if (e != 0) {
        cli_msg("cannot write '%s': %s", f->path, strerror(e));
        out_abort(f);
        return CLI_EXIT_FAIL;
    }
    free(f->data);
    free(f->fp);
    f->data = f->fp = NULL;
    free(f->tmp);
    f->tmp = NULL;
    return CLI_EXIT_OK;
}

int cmd_reproject(int argc, char **argv)
{
    reproject_args a;
    int rc = parse_reproject(argc, argv, &a);
    if (rc != 0) {
        free(a.in_path);
        free(a.target_path);
        return rc == 1 ? CLI_EXIT_OK : rc;
    }
    double t0 = cli_now_s();
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
    int threads = cli_threads(a.threads);

    /* SIGINT/SIGTERM raise `cancel`: the engine stops between blocks and the temporary
     * output is removed. */
    have_sigth = cli_signals_start(cli_signal_flag, &cancel, &sigth);
    pool *workers = cli_workers_new(threads);

    const char *inputs[2] = { a.in_path, a.target_path };
    if (!cli_output_ok("tessera", a.out_path)
        || !cli_output_not_input("tessera", a.out_path, inputs, 2, 1)) {
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    rc = read_input(workers, threads, a.in_path, a.in_hdu, &in);
    double t_read = cli_now_s();
    if (rc != CLI_EXIT_OK)
        goto done;
    if (atomic_load(&cancel)) {     /* a signal while the input was read */
        cli_msg("interrupted; nothing written");
        rc = CLI_EXIT_INTERRUPTED;
        goto done;
    }
    rc = CLI_EXIT_FAIL;
    int target_fits = 0;
    if (fitsimg_read_cards(a.target_path, a.target_hdu, MAX_CARDS, &tcards, &tkeys,
                           &target_fits, err, sizeof err) != 0) {
        cli_msg("cannot read the target: %s", err);
        goto done;
    }
    if (skywcs_parse(tcards, tkeys, &twcs, err, sizeof err)) {
        cli_msg("target '%s' has no usable WCS: %s", a.target_path, err);
        goto done;
    }
    long tn[3] = { 0, 0, 1 };
    static const char *const nk[3] = { "NAXIS1", "NAXIS2", "NAXIS3" };
    for (int k = 0; k < 3; k++) {
        if (!fitscard_get(tcards, tkeys, nk[k], v, sizeof v)) {
            if (k < 2) {
                cli_msg("target '%s' has no %s: the output size comes from NAXIS1 and NAXIS2",
                        a.target_path, nk[k]);
                goto done;
            }
            continue;
        }
        char *end;
        errno = 0;
        tn[k] = strtol(v, &end, 10);
        if (errno || *end || tn[k] < 1 || tn[k] > 1000000) {
            cli_msg("target '%s': %s = %s is not a size from 1 to 1000000", a.target_path,
                    nk[k], v);
            goto done;
        }
    }
    int target_3d = fitscard_get(tcards, tkeys, "NAXIS3", v, sizeof v)
                    || fitscard_get(tcards, tkeys, "CTYPE3", v, sizeof v);
    if (target_3d && tn[2] != in.cube.nz) {
        cli_msg("the target has %ld planes (NAXIS3) and the input %ld: the third axis is passed "
                "through, not resampled", tn[2], in.cube.nz);
        goto done;
    }
    if (target_3d && in.cube.nz > 1) {
        static const char *const ax3[4] = { "CTYPE3", "CRPIX3", "CRVAL3", "CDELT3" };
        for (int k = 0; k < 4; k++) {
            char vi[72] = "", vt[72] = "";
            int hi = fitscard_get(in.info.header, in.info.nkeys, ax3[k], vi, sizeof vi);
            int ht = fitscard_get(tcards, tkeys, ax3[k], vt, sizeof vt);
            double di, dt;
            int same = hi == ht && (!hi || strcmp(vi, vt) == 0
                                    || (cli_parse_double(vi, &di) == 0
                                        && cli_parse_double(vt, &dt) == 0
                                        && fabs(di - dt) <= 1e-9 * fmax(fabs(di), fabs(dt))));
            if (!same) {
                cli_msg("the target's third axis differs from the input's (%s): tessera passes "
                        "the spectral axis through unchanged", ax3[k]);
                goto done;
            }
        }
    }
    out.dtype = in.cube.dtype;
    out.nx = tn[0];
    out.ny = tn[1];
    out.nz = in.cube.nz;
    outspec spec = { tcards, tkeys, in.info.header, in.info.nkeys, target_3d, target_fits,
                     out.dtype, out.nx, out.ny, out.nz, a.method };
    /* Interpolation streams the output through a ring of rows (rp_options.ring_rows):
     * enough rows of blocks that a thread seldom waits for a band to be written. */
    long ring = 0;
    if (a.method != RP_EXACT) {
        long nbx = (out.nx + RING_BLOCK - 1) / RING_BLOCK;
        ring = RING_BLOCK * (2 + ((long)threads + nbx - 1) / nbx);
        if (ring >= out.ny)
            ring = 0;
    }
    if (out_create(&of, a.out_path, &spec, ring ? ring : out.ny) != CLI_EXIT_OK)
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
        cli_msg("out of memory");
        goto done;
    }
    for (size_t k = 0; k < (size_t)out.ny * (size_t)out.nz; k++)
        atomic_init(&fin.done[k], 0);
    o.block_done = finish_block;
    o.block_arg = &fin;
    if (ring) {
        o.block = RING_BLOCK;
        o.ring_rows = ring;
    }
    double t_start = cli_now_s();
    long n = rp_reproject(in.wcs, &in.cube, twcs, &out, footprint, &o, err, sizeof err);
    double t_done = cli_now_s();
    free(fin.done);
    if (b.last >= 0 && b.last < 100)
        fputc('\n', stderr);
    if (n == TESS_ECANCELED || atomic_load(&cancel)) {
        cli_msg("interrupted; nothing written");
        rc = CLI_EXIT_INTERRUPTED;
        goto done;
    }
    if (n == TESS_ENOOVERLAP) {
        cli_msg("the target does not overlap '%s': no output pixel falls on the input image",
                a.in_path);
        rc = CLI_EXIT_NOOVERLAP;
        goto done;
    }
    if (n < 0) {
        cli_msg("cannot reproject '%s': %s", a.in_path, err);
        goto done;
    }
    /* The input is no longer needed: release it before the output's finishing pass. */
    free(in.cube.data);
    in.cube.data = NULL;
    rc = out_commit(&of);
    if (rc == CLI_EXIT_OK && atomic_load(&cancel)) {
        unlink(a.out_path);
        cli_msg("interrupted; nothing written");
        rc = CLI_EXIT_INTERRUPTED;
    }
    if (rc == CLI_EXIT_OK && a.timing)
        fprintf(stderr, "tessera: read %.3f s, set-up %.3f s, reproject %.3f s, finish and "
                "write %.3f s, total %.3f s (%d threads)\n", t_read - t0, t_start - t_read,
                t_done - t_start, cli_now_s() - t_done, cli_now_s() - t0, threads);
    if (rc == CLI_EXIT_OK && o.progress) {
        char shape[64];
        snprintf(shape, sizeof shape, out.nz > 1 ? "%ldx%ldx%ld" : "%ldx%ld", out.nx, out.ny,
                 out.nz);
        fprintf(stderr, "tessera: wrote %s (%s, %s, %ld finite values) in %.2f s\n",
                a.out_path, shape, rp_method_name(a.method), n, cli_now_s() - t0);
    }
done:
    pool_free(workers);
    if (have_sigth)
        cli_signals_stop(sigth);
    if (of.tmp)
        out_abort(&of);
    skywcs_free(twcs);
    free(tcards);
    input_release(&in);
    free(a.in_path);
    free(a.target_path);
    return rc;
}

