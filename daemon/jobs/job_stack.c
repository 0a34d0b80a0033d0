/* Job types on cubes and stacks: rechunk, power_spectrum, recenter, reduce (job_stack.h). */
#include "daemon/jobs/job_stack.h"

#include "engine/image/chunkstore.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/render.h"
#include "engine/image/stack.h"
#include "engine/image/zreduce.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <fftw3.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TILE 16                       /* chunk store tile (pixels) */
#define BLOCK_BYTES (64L << 20)       /* memory of one block's main buffer */
#define MIN_BLOCKS 16                 /* aim for at least this many blocks per stage */
#define FFT_BATCH 32                  /* series per fftw execution */
#define MARKER "plan.ok"

/* ---- small helpers ------------------------------------------------------------------- */

/* pwrite of n bytes at `off` of the existing file `path`. */
static int write_file_at(const char *path, const void *buf, size_t n, off_t off, char *err,
                         size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || tess_pwrite_all(fd, buf, n, off) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TESS_EIO;
    }
    if (close(fd) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int touch_marker(const char *workdir, char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", workdir, MARKER);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || tess_pwrite_all(fd, "ok\n", 3, 0) != 0 || close(fd) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", p, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

static int marker_exists(const char *workdir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", workdir, MARKER);
    return file_exists(p);
}

/* Moves `from` to `to` (rename, or copy then unlink across file systems).  A missing
 * `from` with an existing `to` counts as done (finish run twice). */
static int move_file(const char *from, const char *to, char *err, size_t errlen)
{
    if (rename(from, to) == 0)
        return 0;
    if (errno == ENOENT && file_exists(to))
        return 0;
    if (errno != EXDEV) {
        tess_seterr(err, errlen, "cannot move %s to %s: %s", from, to, strerror(errno));
        return TESS_EIO;
    }
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char *buf = malloc(1 << 20);
    int rc = in >= 0 && out >= 0 && buf ? 0 : TESS_EIO;
    off_t off = 0;
    while (rc == 0) {
        ssize_t k = pread(in, buf, 1 << 20, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 || (k > 0 && tess_pwrite_all(out, buf, (size_t)k, off) != 0))
            rc = TESS_EIO;
        if (k <= 0)
            break;
        off += k;
    }
    free(buf);
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        rc = TESS_EIO;
    if (rc) {
        tess_seterr(err, errlen, "cannot copy %s to %s", from, to);
        unlink(to);
        return rc;
    }
    unlink(from);
    return 0;
}

/* The value type that holds the physical values of `d` exactly (see job_stack.h).  PNG
 * frames hold unsigned samples (0..255, 0..65535) under a BITPIX 8 or 16 header without
 * BZERO (engine/image/stack.h): 16-bit ones are uint16, not int16. */
static cs_dtype choose_dtype(const dataset *d)
{
    if (d->kind == DS_STACK && d->npaths > 0 && frame_is_png(d->paths[0]))
        return d->bitpix == 16 ? CS_U16 : CS_U8;
    char v[80];
    double bscale = 1, bzero = 0;
    int blank = 0;
    if (d->header) {
        if (fitscard_get(d->header, d->nkeys, "BSCALE", v, sizeof v))
            bscale = atof(v);
        if (fitscard_get(d->header, d->nkeys, "BZERO", v, sizeof v))
            bzero = atof(v);
        blank = fitscard_get(d->header, d->nkeys, "BLANK", v, sizeof v);
    }
    if (blank || bscale != 1.0)
        return CS_F32;
    if (d->bitpix == 8 && bzero == 0)
        return CS_U8;
    if (d->bitpix == 16 && bzero == 32768)
        return CS_U16;
    if (d->bitpix == 16 && bzero == 0)
        return CS_I16;
    return CS_F32;
}

static long lmin(long a, long b) { return a < b ? a : b; }
static long lmax(long a, long b) { return a > b ? a : b; }

/* ---- validation helpers -------------------------------------------------------------- */

static int check_dataset(const json_t *body, const job_env *env, const dataset **out,
                         job_problem *pb)
{
    json_t *v = json_object_get(body, "dataset");
    if (!v) {
        jobkind_problem(pb, 400, "dataset", "'dataset' is required: the name of a cube or stack");
        return -1;
    }
    if (!json_is_string(v)) {
        jobkind_problem(pb, 400, "dataset", "'dataset' must be a string");
        return -1;
    }
    const dataset *d = catalog_find(env->cat, json_string_value(v));
    if (!d) {
        jobkind_problem(pb, 404, "dataset", "no dataset named '%.64s'", json_string_value(v));
        return -1;
    }
    if (d->kind == DS_IMAGE || d->nz < 2) {
        jobkind_problem(pb, 422, "dataset",
                        "'%.64s' is an image; this job needs a cube or stack of 2 planes or more",
                        d->name);
        return -1;
    }
    if ((double)d->nx * (double)d->ny >= 4294967295.0) {
        jobkind_problem(pb, 413, "dataset", "'%.64s' has too many pixels per plane", d->name);
        return -1;
    }
    *out = d;
    return 0;
}

static int check_output(const json_t *body, const job_env *env, job_problem *pb)
{
    json_t *o = json_object_get(body, "output");
    if (!o) {
        jobkind_problem(pb, 400, "output", "'output' is required: {\"name\": NEW}");
        return -1;
    }
    if (!json_is_object(o)) {
        jobkind_problem(pb, 400, "output", "'output' must be an object {\"name\": NEW}");
        return -1;
    }
    static const char *const known[] = {"name", NULL};
    if (jobkind_only_fields(o, known, "output", pb) != 0)
        return -1;
    json_t *n = json_object_get(o, "name");
    if (!json_is_string(n)) {
        jobkind_problem(pb, 400, "output.name", "'output.name' must be a string");
        return -1;
    }
    return jobkind_check_new_name(env, json_string_value(n), "output.name", pb);
}

static const char *output_name(const json_t *body)
{
    return json_string_value(json_object_get(json_object_get(body, "output"), "name"));
}

static int plan_dataset(const json_t *body, const job_env *env, const dataset **d, char *err,
                        size_t errlen)
{
    job_problem pb;
    if (check_dataset(body, env, d, &pb) != 0) {
        tess_seterr(err, errlen, "%s: %s", pb.field, pb.detail);
        return TESS_EINVAL;
    }
    return 0;
}

/* ---- FITS products ------------------------------------------------------------------- */

/* 1 when the card's keyword belongs to the celestial (axes 1 and 2) WCS or is a harmless
 * descriptive keyword worth keeping. */
static int spatial_card(const char *card)
{
    char kw[9];
    int n = 0;
    while (n < 8 && card[n] != ' ' && card[n] != '=') {
        kw[n] = card[n];
        n++;
    }
    kw[n] = 0;
    static const char *const exact[] = {
        "CTYPE1", "CTYPE2", "CUNIT1", "CUNIT2", "CRVAL1", "CRVAL2", "CRPIX1", "CRPIX2",
        "CDELT1", "CDELT2", "CROTA1", "CROTA2", "CD1_1", "CD1_2", "CD2_1", "CD2_2", "PC1_1",
        "PC1_2", "PC2_1", "PC2_2", "RADESYS", "RADECSYS", "EQUINOX", "EPOCH", "LONPOLE",
        "LATPOLE", "MJD-OBS", "DATE-OBS", "OBJECT", "TELESCOP", "INSTRUME", NULL};
    for (int i = 0; exact[i]; i++)
        if (strcmp(kw, exact[i]) == 0)
            return 1;
    return strncmp(kw, "PV1_", 4) == 0 || strncmp(kw, "PV2_", 4) == 0;
}

static int fits_bitpix(cs_dtype t)
{
    return t == CS_U8 ? 8 : t == CS_U16 || t == CS_I16 ? 16 : -32;
}

/* Creates `path` holding an image HDU of the given shape: header (the source's celestial
 * WCS when `wcs_from` is given, BZERO 32768 for u2, the `cards`, NULL-terminated), and a
 * zero data unit; *datastart = the byte offset of the data. */
static int fits_out_create(const char *path, cs_dtype t, int bitpix, int naxis, const long *naxes,
                           const dataset *wcs_from, const char *const *cards,
                           long long *datastart, char *err, size_t errlen)
{
    fitscard_list h;
    fitscard_list_init(&h, 100000);
    if (wcs_from && wcs_from->header) {
        for (int i = 0; i < wcs_from->nkeys; i++)
            if (spatial_card(wcs_from->header + 80 * i))
                fitscard_list_cards(&h, wcs_from->header + 80 * i, 1);
    }
    for (int i = 0; cards && cards[i]; i++)
        fitscard_list_text(&h, cards[i]);
    fitswrite_image im = { .bitpix = bitpix, .naxis = naxis, .naxes = { naxes[0],
                           naxis > 1 ? naxes[1] : 1, naxis > 2 ? naxes[2] : 1 },
                           .scaled = bitpix == 16 && t == CS_U16, .bscale = 1, .bzero = 32768,
                           .cards = h.cards, .ncards = h.n };
    int rc = h.rc;
    if (rc)
        tess_seterr(err, errlen, "cannot create %s: out of memory", path);
    else
        rc = fitswrite_file(path, &im, datastart, err, errlen);
    fitscard_list_release(&h);
    return rc;
}

/* Big-endian FITS encoding of n values of type t (as fits_bitpix(t)); u2 is stored as
 * value - 32768 (BZERO 32768). */
static void fits_encode(cs_dtype t, const double *v, unsigned char *dst, long n)
{
    fitswrite_encode(fits_bitpix(t), t == CS_U16 ? 32768.0 : 0.0, v, dst, n);
}

static void be_float(float f, unsigned char *dst)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    dst[0] = (unsigned char)(u >> 24);
    dst[1] = (unsigned char)(u >> 16);
    dst[2] = (unsigned char)(u >> 8);
    dst[3] = (unsigned char)u;
}

/* ---- the transpose engine shared by rechunk and power_spectrum ------------------------ */

/* Rechunk: a band of TILE rows across all planes up to this size is gathered in memory
 * straight from the planes (band_series_inmem), with no staging file (see below). */
#define RECHUNK_BAND_BYTES (256L << 20)
#define RECHUNK_ZGROUP 64

static long band_bytes_limit = RECHUNK_BAND_BYTES;   /* job_stack_set_band_bytes */

void job_stack_set_band_bytes(long bytes)
{
    band_bytes_limit = bytes > 0 ? bytes : RECHUNK_BAND_BYTES;
}

/* Stage A (groups of g planes): group k's planes are written to the staging file at
 * offset z0*npix*es as [pixel index (store order)][plane of the group].  Stage B (bands of
 * whole tile rows): the band's pixel range [p0, p1) gathered from every group into
 * [pixel][z] (series contiguous), then handed to the job's `band` function. */
typedef struct transpose {
    const dataset *d;
    long nx, ny, nz, npix;
    cs_dtype dt;
    int es;
    chunkstore_info ci;        /* tiling of the pixel order */
    uint32_t *perm;            /* perm[idx] = y*nx + x of store index idx */
    long g, ngroups;           /* planes per group, groups */
    long band_rows, nbands;    /* rows per band (multiple of TILE), bands */
    int direct;                /* 1: no stage A; bands read the attached store `src` */
    char stage_path[PATH_MAX];
    char src_path[PATH_MAX];
} transpose;

static int transpose_init(transpose *t, const dataset *d, long out_bytes_per_value,
                          int direct, const char *src_path, const char *workdir, char *err,
                          size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->d = d;
    t->nx = d->nx;
    t->ny = d->ny;
    t->nz = d->nz;
    t->npix = d->nx * d->ny;
    t->dt = choose_dtype(d);
    t->es = chunkstore_esize(t->dt);
    t->ci.nx = d->nx;
    t->ci.ny = d->ny;
    t->ci.nz = d->nz;
    t->ci.dtype = t->dt;
    t->ci.tx = TILE;
    t->ci.ty = TILE;
    t->ci.data_offset = CHUNKSTORE_HEADER;
    snprintf(t->ci.source, sizeof t->ci.source, "%s", d->name);
    t->perm = malloc((size_t)t->npix * sizeof *t->perm);
    if (!t->perm) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long long idx = 0;
    for (long y0 = 0; y0 < t->ny; y0 += TILE) {
        long h = lmin(TILE, t->ny - y0);
        for (long x0 = 0; x0 < t->nx; x0 += TILE) {
            long w = lmin(TILE, t->nx - x0);
            for (long yy = 0; yy < h; yy++)
                for (long xx = 0; xx < w; xx++)
                    t->perm[idx++] = (uint32_t)((y0 + yy) * t->nx + x0 + xx);
        }
    }
    long plane_bytes = t->npix * t->es;
    t->g = lmax(1, lmin(BLOCK_BYTES / lmax(1, plane_bytes), (t->nz + MIN_BLOCKS - 1) / MIN_BLOCKS));
    t->ngroups = (t->nz + t->g - 1) / t->g;
    long per_row = t->nx * t->nz * lmax(t->es, out_bytes_per_value);
    long tile_rows = (t->ny + TILE - 1) / TILE;
    long trows = lmax(1, lmin(BLOCK_BYTES / lmax(1, per_row * TILE),
                              (tile_rows + MIN_BLOCKS - 1) / MIN_BLOCKS));
    t->band_rows = trows * TILE;
    t->nbands = (t->ny + t->band_rows - 1) / t->band_rows;
    t->direct = direct;
    snprintf(t->stage_path, sizeof t->stage_path, "%s/staging.bin", workdir);
    snprintf(t->src_path, sizeof t->src_path, "%s", src_path ? src_path : "");
    return 0;
}

static void transpose_free(transpose *t)
{
    free(t->perm);
    t->perm = NULL;
}

static int transpose_create_files(transpose *t, char *err, size_t errlen)
{
    if (t->direct)
        return 0;
    int fd = open(t->stage_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)t->npix * t->nz * t->es) != 0 || close(fd) != 0) {
        tess_seterr(err, errlen, "cannot create %s: %s", t->stage_path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

static void encode1(cs_dtype t, double v, unsigned char *dst)
{
    switch (t) {
    case CS_U8:
        *dst = (unsigned char)lrint(v);
        break;
    case CS_U16:
    case CS_I16: {   /* exact integers in range (choose_dtype) */
        uint16_t u = t == CS_U16 ? (uint16_t)v : (uint16_t)(int16_t)v;
        dst[0] = (unsigned char)(u & 0xff);
        dst[1] = (unsigned char)(u >> 8);
        break;
    }
    default:
        chunkstore_encode(CS_F32, &v, dst, 1);
    }
}

/* Frames encoded together before they are interleaved into a group's series: each
 * pixel then gets TG_SUB values written side by side instead of one value per cache
 * line touched (a frame-by-frame scatter at a stride of g values was the stage's cost). */
#define TG_SUB 16

/* Stage A, group k: frames z0 .. z0+gk-1 into out[i * gk + j] (store order i, frame j),
 * written at the group's place in the staging file. */
static int transpose_group(const transpose *t, long k, const volatile int *cancel, char *err,
                           size_t errlen)
{
    long z0 = k * t->g, gk = lmin(t->g, t->nz - z0);
    const size_t es = (size_t)t->es, npix = (size_t)t->npix;
    unsigned char *out = malloc(npix * (size_t)gk * es);
    /* [frame of the sub-group][i], rows `pitch` bytes apart: a whole number of cache
     * lines plus one, so that the TG_SUB rows read side by side below fall in different
     * cache sets (at a power-of-two distance they evict each other). */
    const size_t pitch = (npix * es + 63) / 64 * 64 + 64;
    unsigned char *sub = malloc(pitch * TG_SUB);
    double *plane = malloc(npix * sizeof *plane);
    int rc = 0;
    if (!out || !sub || !plane) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
    }
    for (long j0 = 0; j0 < gk && !rc; j0 += TG_SUB) {
        long ns = lmin(TG_SUB, gk - j0);
        for (long jj = 0; jj < ns && !rc; jj++) {
            if (*cancel) {
                rc = TESS_ECANCELED;
                break;
            }
            rc = dataset_read_region(t->d, z0 + j0 + jj, 0, 0, t->nx, t->ny, plane, err,
                                     errlen);
            if (rc)
                break;
            unsigned char *p = sub + (size_t)jj * pitch;
            if (t->dt == CS_U8) {
                for (size_t i = 0; i < npix; i++)
                    p[i] = (unsigned char)plane[t->perm[i]];   /* exact integers 0..255 */
            } else {
                for (size_t i = 0; i < npix; i++)
                    encode1(t->dt, plane[t->perm[i]], p + i * es);
            }
        }
        if (rc)
            break;
        const size_t stride = (size_t)gk * es;
        if (es == 1) {
            for (size_t i = 0; i < npix; i++) {
                unsigned char *d = out + i * stride + (size_t)j0;
                for (long jj = 0; jj < ns; jj++)
                    d[jj] = sub[(size_t)jj * pitch + i];
            }
        } else {
            for (size_t i = 0; i < npix; i++) {
                unsigned char *d = out + i * stride + (size_t)j0 * es;
                for (long jj = 0; jj < ns; jj++)
                    memcpy(d + (size_t)jj * es, sub + (size_t)jj * pitch + i * es, es);
            }
        }
    }
    if (!rc)
        rc = write_file_at(t->stage_path, out, npix * (size_t)gk * es,
                           (off_t)z0 * t->npix * t->es, err, errlen);
    free(out);
    free(sub);
    free(plane);
    return rc;
}

/* Stage B, band b: fills `buf` ((p1-p0) * nz * es bytes) with the band's series. */
static int transpose_band(const transpose *t, long b, unsigned char *buf, long *p0_out,
                          long *p1_out, const volatile int *cancel, char *err, size_t errlen)
{
    long y0 = b * t->band_rows, y1 = lmin(t->ny, y0 + t->band_rows);
    long p0 = y0 * t->nx, p1 = y1 * t->nx, np = p1 - p0;
    *p0_out = p0;
    *p1_out = p1;
    size_t es = (size_t)t->es;
    if (t->direct) {
        int fd = open(t->src_path, O_RDONLY | O_CLOEXEC);
        off_t off = (off_t)(CHUNKSTORE_HEADER + (long long)p0 * t->nz * es);
        int bad = fd < 0 || tess_pread_all(fd, buf, (size_t)np * t->nz * es, off) != 0;
        if (fd >= 0)
            close(fd);
        if (bad) {
            tess_seterr(err, errlen, "cannot read %s", t->src_path);
            return TESS_EIO;
        }
        return 0;
    }
    unsigned char *tmp = malloc((size_t)np * t->g * es);
    int fd = open(t->stage_path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (!tmp || fd < 0) {
        tess_seterr(err, errlen, "cannot read %s", t->stage_path);
        rc = tmp ? TESS_EIO : TESS_ENOMEM;
    }
    for (long k = 0; k < t->ngroups && !rc; k++) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long z0 = k * t->g, gk = lmin(t->g, t->nz - z0);
        size_t run = (size_t)gk * es;
        if (tess_pread_all(fd, tmp, (size_t)np * run, (off_t)((long long)z0 * t->npix * es +
                                                              (long long)p0 * run)) != 0) {
            tess_seterr(err, errlen, "cannot read %s", t->stage_path);
            rc = TESS_EIO;
            break;
        }
        for (long i = 0; i < np; i++)
            memcpy(buf + ((size_t)i * t->nz + z0) * es, tmp + (size_t)i * run, run);
    }
    if (fd >= 0)
        close(fd);
    free(tmp);
    return rc;
}

static void plan_stages(const transpose *t, job_plan *out)
{
    if (t->direct) {
        out->nstages = 1;
        out->nblocks[0] = t->nbands;
    } else {
        out->nstages = 2;
        out->nblocks[0] = t->ngroups;
        out->nblocks[1] = t->nbands;
    }
}

/* ---- rechunk ------------------------------------------------------------------------- */

/* Rechunk in one stage when a band of TILE rows across all planes fits in
 * RECHUNK_BAND_BYTES: each block holds its band's series in memory, reads the planes in
 * groups of RECHUNK_ZGROUP (each plane of a group opened once per block, 8-bit frames
 * read in place from the mapping, others converted), transposes tile row by tile row
 * (a group's values of one pixel are RECHUNK_ZGROUP contiguous bytes of the band) and
 * writes the band with one pwrite at its fixed offset in the store (idempotent).  Larger
 * volumes go through the two-stage transpose (staging file) above. */
typedef struct rechunk_state {
    transpose t;
    int inmem;                /* 1: one stage of bands in memory */
    long band_rows, nbands;   /* inmem: rows per block (a multiple of TILE), blocks */
    char store_path[PATH_MAX];
    char name[128];
} rechunk_state;

static int rechunk_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", NULL};
    const dataset *d;
    if (jobkind_only_fields(body, known, NULL, pb) != 0)
        return -1;
    return check_dataset(body, env, &d, pb);
}

static void rechunk_release(void *state)
{
    rechunk_state *s = state;
    if (!s)
        return;
    transpose_free(&s->t);
    free(s);
}

static int rechunk_plan(const json_t *body, const job_env *env, const char *workdir,
                        job_plan *out, char *err, size_t errlen)
{
    const dataset *d;
    int rc = plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    rechunk_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    rc = transpose_init(&s->t, d, 0, 0, NULL, workdir, err, errlen);
    snprintf(s->store_path, sizeof s->store_path, "%s/profile.tcs", workdir);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    long per_tile_row = d->nx * d->nz * s->t.es * TILE;
    if (!rc && per_tile_row <= band_bytes_limit) {
        /* bands as large as memory allows, but at least two per worker thread */
        long tile_rows = (d->ny + TILE - 1) / TILE, want = lmax(2, 2L * env->threads);
        long trows = lmax(1, lmin(band_bytes_limit / per_tile_row,
                                  (tile_rows + want - 1) / want));
        s->inmem = 1;
        s->band_rows = trows * TILE;
        s->nbands = (d->ny + s->band_rows - 1) / s->band_rows;
    }
    if (!rc && !marker_exists(workdir)) {
        dataset_version(d, s->t.ci.source_version, sizeof s->t.ci.source_version);
        if (!s->inmem)
            rc = transpose_create_files(&s->t, err, errlen);
        if (!rc)
            rc = chunkstore_create(s->store_path, &s->t.ci, err, errlen);
        if (!rc)
            rc = touch_marker(workdir, err, errlen);
    }
    if (rc) {
        rechunk_release(s);
        return rc;
    }
    if (s->inmem) {
        out->nstages = 1;
        out->nblocks[0] = s->nbands;
    } else {
        plan_stages(&s->t, out);
    }
    out->state = s;
    return 0;
}

/* Fills `out` with the series of rows [y0, y1) (whole tile rows) in store order:
 * (y1 - y0) * nx * nz values of es bytes, pixel p0 = y0 * nx first, each pixel's nz
 * values contiguous.  The planes are read in groups of RECHUNK_ZGROUP (each plane of a
 * group opened once, 8-bit frames read in place) a tile row at a time, so a band needs
 * no staging file.  Returns 0 or a TESS_E* code with err. */
static int band_series_inmem(const transpose *t, long y0, long y1, unsigned char *out,
                             const volatile int *cancel, char *err, size_t errlen)
{
    long nx = t->nx, ny = t->ny, nz = t->nz;
    long p0 = y0 * nx;
    size_t es = (size_t)t->es;
    stack *st = dataset_stack(t->d);
    unsigned char *tmp = malloc((size_t)RECHUNK_ZGROUP * TILE * nx * es);
    double *dbl = malloc(sizeof(double) * (size_t)TILE * nx);
    stack_plane hp[RECHUNK_ZGROUP];
    int rc = tmp && dbl ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    for (long zg = 0; zg < nz && !rc; zg += RECHUNK_ZGROUP) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long gk = lmin(RECHUNK_ZGROUP, nz - zg), held = 0;
        for (; held < gk && !rc; held++)
            rc = stack_plane_hold(st, zg + held, &hp[held], err, errlen);
        if (rc)
            held--;
        for (long ty0 = y0; ty0 < y1 && !rc; ty0 += TILE) {
            long th = lmin(TILE, ny - ty0);
            const unsigned char *src[RECHUNK_ZGROUP];
            for (long j = 0; j < gk && !rc; j++) {
                if (t->dt == CS_U8 && hp[j].u8) {
                    src[j] = hp[j].u8 + (size_t)ty0 * nx;
                    continue;
                }
                unsigned char *e = tmp + (size_t)j * TILE * nx * es;
                rc = dataset_read_region(t->d, zg + j, 0, ty0, nx, th, dbl, err, errlen);
                for (long i = 0; i < th * nx && !rc; i++)
                    encode1(t->dt, dbl[i], e + (size_t)i * es);
                src[j] = e;
            }
            /* the tile row's store indices are [ty0*nx, (ty0+th)*nx) */
            for (long i = ty0 * nx; i < (ty0 + th) * nx && !rc; i++) {
                size_t q = t->perm[i] - (size_t)ty0 * nx;
                unsigned char *dst = out + ((size_t)(i - p0) * nz + zg) * es;
                if (es == 1)
                    for (long j = 0; j < gk; j++)
                        dst[j] = src[j][q];
                else
                    for (long j = 0; j < gk; j++)
                        memcpy(dst + j * es, src[j] + q * es, es);
            }
        }
        for (long j = 0; j < held; j++)
            if (stack_plane_release(st, &hp[j]) && !rc) {
                rc = TESS_EIO;
                tess_seterr(err, errlen, "frame %ld of '%s' was truncated while being read",
                            zg + j, t->d->name);
            }
    }
    free(tmp);
    free(dbl);
    return rc;
}

/* One in-memory band (see RECHUNK_BAND_BYTES). */
static int rechunk_band(rechunk_state *s, long b, const volatile int *cancel, char *err,
                        size_t errlen)
{
    const transpose *t = &s->t;
    long nx = t->nx, ny = t->ny, nz = t->nz;
    long y0 = b * s->band_rows, y1 = lmin(ny, y0 + s->band_rows);
    long p0 = y0 * nx, np = (y1 - y0) * nx;
    size_t es = (size_t)t->es;
    unsigned char *out = malloc((size_t)np * nz * es);
    int rc = out ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    else
        rc = band_series_inmem(t, y0, y1, out, cancel, err, errlen);
    if (!rc)
        rc = write_file_at(s->store_path, out, (size_t)np * nz * es,
                           (off_t)(CHUNKSTORE_HEADER + (long long)p0 * nz * es), err, errlen);
    free(out);
    return rc;
}

static int rechunk_run(void *state, int stage, long block, const volatile int *cancel,
                       char *err, size_t errlen)
{
    rechunk_state *s = state;
    if (s->inmem)
        return rechunk_band(s, block, cancel, err, errlen);
    if (stage == 0)
        return transpose_group(&s->t, block, cancel, err, errlen);
    const transpose *t = &s->t;
    unsigned char *buf = malloc((size_t)t->band_rows * t->nx * t->nz * t->es);
    if (!buf) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long p0, p1;
    int rc = transpose_band(t, block, buf, &p0, &p1, cancel, err, errlen);
    if (!rc)
        rc = write_file_at(s->store_path, buf, (size_t)(p1 - p0) * t->nz * t->es,
                           (off_t)(CHUNKSTORE_HEADER + (long long)p0 * t->nz * t->es), err,
                           errlen);
    free(buf);
    return rc;
}

static int rechunk_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                          size_t errlen)
{
    rechunk_state *s = state;
    int rc = move_file(s->store_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    if (!s->inmem)
        unlink(s->t.stage_path);
    memset(prod, 0, sizeof *prod);
    snprintf(prod->attach_to, sizeof prod->attach_to, "%s", s->name);
    snprintf(prod->content_type, sizeof prod->content_type, "application/octet-stream");
    return 0;
}

const job_kind job_kind_rechunk = {"rechunk", rechunk_validate, rechunk_plan, rechunk_run,
                                   rechunk_finish, rechunk_release};

/* ---- power_spectrum ------------------------------------------------------------------ */

static pthread_mutex_t fftw_plan_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct ps_state {
    transpose t;
    char out_path[PATH_MAX];
    char name[128];
    long long datastart;
    fftw_plan plan;           /* r2c of FFT_BATCH series of nz values */
} ps_state;

static int ps_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "output", NULL};
    const dataset *d;
    if (jobkind_only_fields(body, known, NULL, pb) != 0 || check_dataset(body, env, &d, pb) != 0)
        return -1;
    return check_output(body, env, pb);
}

static void ps_release(void *state)
{
    ps_state *s = state;
    if (!s)
        return;
    if (s->plan) {
        pthread_mutex_lock(&fftw_plan_lock);
        fftw_destroy_plan(s->plan);
        pthread_mutex_unlock(&fftw_plan_lock);
    }
    transpose_free(&s->t);
    free(s);
}

/* 1 when the attached chunk store of d is current and matches its shape. */
static int usable_profile(const dataset *d, char *path, size_t len)
{
    if (!dataset_profile_path(d, path, len))
        return 0;
    chunkstore_info ci;
    char e[256], ver[64];
    if (chunkstore_read_info(path, &ci, e, sizeof e) != 0)
        return 0;
    dataset_version(d, ver, sizeof ver);
    return ci.nx == d->nx && ci.ny == d->ny && ci.nz == d->nz && ci.tx == TILE &&
           ci.ty == TILE && ci.dtype == choose_dtype(d) && strcmp(ci.source_version, ver) == 0;
}

static int ps_plan(const json_t *body, const job_env *env, const char *workdir, job_plan *out,
                   char *err, size_t errlen)
{
    const dataset *d;
    int rc = plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    ps_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    snprintf(s->out_path, sizeof s->out_path, "%s/spectrum.fits", workdir);
    snprintf(s->name, sizeof s->name, "%s", output_name(body));
    /* Whether stage A is needed is decided once, when the work files are created, and
     * remembered in the work directory (a later rechunk must not change the plan). */
    char direct_flag[PATH_MAX], src[PATH_MAX] = "";
    snprintf(direct_flag, sizeof direct_flag, "%s/direct.path", workdir);
    int fresh = !marker_exists(workdir);
    int direct = 0;
    if (fresh) {
        direct = usable_profile(d, src, sizeof src);
    } else {
        FILE *f = fopen(direct_flag, "r");
        if (f) {
            direct = fgets(src, sizeof src, f) != NULL && src[0] != 0;
            fclose(f);
        }
    }
    rc = transpose_init(&s->t, d, 4, direct, src, workdir, err, errlen);
    if (!rc && fresh) {
        char c_src[81] = "", c_unit[81] = "", unit[48];
        fitscard_string(c_src, "PSSOURCE", d->name, 0, NULL);
        snprintf(unit, sizeof unit, "(%.40s)**2", d->bunit);
        if (d->bunit[0])
            fitscard_string(c_unit, "BUNIT", unit, 0, NULL);
        c_src[80] = c_unit[80] = '\0';
        const char *cards[] = {
            "COMMENT Power spectrum along z of each pixel: plane k = |FFT(series)[k]|^2,",
            "COMMENT k = 0..NAXIS3-1 cycles per NAXIS3 samples, no mean removal, no window",
            c_src, c_unit[0] ? c_unit : NULL, NULL};
        long naxes[3] = {d->nx, d->ny, d->nz};
        rc = fits_out_create(s->out_path, CS_F32, -32, 3, naxes, d, cards, &s->datastart, err,
                             errlen);
        if (!rc)
            rc = transpose_create_files(&s->t, err, errlen);
        if (!rc && direct) {
            FILE *f = fopen(direct_flag, "w");
            if (!f || fputs(src, f) < 0 || fclose(f) != 0) {
                tess_seterr(err, errlen, "cannot write %s", direct_flag);
                rc = TESS_EIO;
            }
        }
        if (!rc)
            rc = touch_marker(workdir, err, errlen);
    } else if (!rc) {
        rc = fitsimg_data_offset(s->out_path, 0, &s->datastart, err, errlen);
    }
    if (!rc) {
        int n = (int)d->nz;
        double *in = fftw_malloc(sizeof(double) * (size_t)n * FFT_BATCH);
        fftw_complex *o = fftw_malloc(sizeof(fftw_complex) * (size_t)(n / 2 + 1) * FFT_BATCH);
        pthread_mutex_lock(&fftw_plan_lock);
        if (in && o)
            s->plan = fftw_plan_many_dft_r2c(1, &n, FFT_BATCH, in, NULL, 1, n, o, NULL, 1,
                                              n / 2 + 1, FFTW_ESTIMATE);
        pthread_mutex_unlock(&fftw_plan_lock);
        fftw_free(in);
        fftw_free(o);
        if (!s->plan) {
            tess_seterr(err, errlen, "cannot plan an FFT of %d values", n);
            rc = TESS_ENOMEM;
        }
    }
    if (rc) {
        ps_release(s);
        return rc;
    }
    plan_stages(&s->t, out);
    out->state = s;
    return 0;
}

/* A band's output buffer (tens to hundreds of MB written plane by plane): mapped
 * anonymous memory with transparent huge pages asked for, so that writing nz planes a
 * few values at a time does not miss the TLB on every plane.  NULL when out of memory. */
static unsigned char *band_alloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);   /* advice only: without it, small pages */
#endif
    return p;
}

static void band_free(unsigned char *p, size_t n)
{
    if (p)
        munmap(p, n);
}

static int ps_band(const ps_state *s, long band, const volatile int *cancel, char *err,
                   size_t errlen)
{
    const transpose *t = &s->t;
    long nz = t->nz, nh = nz / 2 + 1;
    long rows = lmin(t->band_rows, t->ny - band * t->band_rows);
    unsigned char *buf = malloc((size_t)rows * t->nx * nz * t->es);
    unsigned char *out = band_alloc((size_t)rows * t->nx * nz * 4);   /* [k][row][x], BE */
    double *in = fftw_malloc(sizeof(double) * (size_t)nz * FFT_BATCH);
    fftw_complex *spec = fftw_malloc(sizeof(fftw_complex) * (size_t)nh * FFT_BATCH);
    long p0 = 0, p1 = 0;
    int rc = 0;
    if (!buf || !out || !in || !spec) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
    }
    if (!rc)
        rc = transpose_band(t, band, buf, &p0, &p1, cancel, err, errlen);
    long y0 = band * t->band_rows;
    for (long i0 = p0; i0 < p1 && !rc; i0 += FFT_BATCH) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        long nb = lmin(FFT_BATCH, p1 - i0);
        for (long j = 0; j < FFT_BATCH; j++) {
            double *dst = in + j * nz;
            if (j >= nb) {
                memset(dst, 0, sizeof(double) * (size_t)nz);
                continue;
            }
            chunkstore_decode(t->dt, buf + (size_t)(i0 - p0 + j) * nz * t->es, dst, nz);
            for (long z = 0; z < nz; z++)
                dst[z] = isfinite(dst[z]) ? dst[z] : 0.0;
        }
        fftw_execute_dft_r2c(s->plan, in, spec);
        /* Plane k of the band gets the batch's nb values together: the batch is whole
         * rows of one 16x16 store tile (perm), so they land in a few cache lines of plane
         * k instead of one line of every plane per pixel (a pixel-major scatter over
         * nz planes was 70% of this function). */
        size_t off[FFT_BATCH];
        for (long j = 0; j < nb; j++) {
            uint32_t pix = t->perm[i0 + j];
            off[j] = ((size_t)(pix / t->nx - y0) * (size_t)t->nx + pix % t->nx) * 4;
        }
        const size_t plane_bytes = (size_t)rows * (size_t)t->nx * 4;
        for (long k = 0; k < nz; k++) {
            long m = k < nh ? k : nz - k;   /* |X[nz-k]| = |X[k]| for a real series */
            unsigned char *plane = out + (size_t)k * plane_bytes;
            for (long j = 0; j < nb; j++) {
                const double *c = spec[j * nh + m];
                be_float((float)(c[0] * c[0] + c[1] * c[1]), plane + off[j]);
            }
        }
    }
    if (!rc) {
        int fd = open(s->out_path, O_WRONLY | O_CLOEXEC);
        size_t run = (size_t)rows * t->nx * 4;
        for (long k = 0; k < nz && !rc; k++) {
            off_t off = (off_t)(s->datastart + ((long long)k * t->ny + y0) * t->nx * 4);
            if (fd < 0 || tess_pwrite_all(fd, out + k * run, run, off) != 0) {
                tess_seterr(err, errlen, "cannot write %s: %s", s->out_path, strerror(errno));
                rc = TESS_EIO;
            }
        }
        if (fd >= 0 && close(fd) != 0 && !rc) {
            tess_seterr(err, errlen, "cannot write %s", s->out_path);
            rc = TESS_EIO;
        }
    }
    free(buf);
    band_free(out, (size_t)rows * t->nx * nz * 4);
    fftw_free(in);
    fftw_free(spec);
    return rc;
}

static int ps_run(void *state, int stage, long block, const volatile int *cancel, char *err,
                  size_t errlen)
{
    ps_state *s = state;
    if (stage == 0 && !s->t.direct)
        return transpose_group(&s->t, block, cancel, err, errlen);
    return ps_band(s, block, cancel, err, errlen);
}

static int ps_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                     size_t errlen)
{
    ps_state *s = state;
    int rc = move_file(s->out_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    if (!s->t.direct)
        unlink(s->t.stage_path);
    memset(prod, 0, sizeof *prod);
    snprintf(prod->dataset, sizeof prod->dataset, "%s", s->name);
    return 0;
}

const job_kind job_kind_power_spectrum = {"power_spectrum", ps_validate, ps_plan, ps_run,
                                          ps_finish, ps_release};

/* ---- recenter ------------------------------------------------------------------------ */

typedef struct recenter_state {
    const dataset *d;
    long w, h, per_block, nblocks;
    cs_dtype dt;
    long long datastart;
    char out_path[PATH_MAX];
    char origins_path[PATH_MAX];
    char name[128];
} recenter_state;

/* One origin record of origins.bin, at z * sizeof: centroid and crop origin. */
typedef struct origin_rec {
    double cx, cy;
    int64_t x0, y0;
} origin_rec;

static int recenter_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "size", "output", NULL};
    const dataset *d;
    if (jobkind_only_fields(body, known, NULL, pb) != 0 || check_dataset(body, env, &d, pb) != 0)
        return -1;
    json_t *sz = json_object_get(body, "size");
    if (!sz) {
        jobkind_problem(pb, 400, "size", "'size' is required: [W, H] of the crops in pixels");
        return -1;
    }
    if (!json_is_array(sz) || json_array_size(sz) != 2 ||
        !json_is_integer(json_array_get(sz, 0)) || !json_is_integer(json_array_get(sz, 1)) ||
        json_integer_value(json_array_get(sz, 0)) < 1 ||
        json_integer_value(json_array_get(sz, 1)) < 1) {
        jobkind_problem(pb, 400, "size", "'size' must be [W, H], two positive integers");
        return -1;
    }
    json_int_t w = json_integer_value(json_array_get(sz, 0));
    json_int_t h = json_integer_value(json_array_get(sz, 1));
    if (w > d->nx || h > d->ny) {
        jobkind_problem(pb, 422, "size", "crops of %lldx%lld do not fit in the %ldx%ld frames",
                        (long long)w, (long long)h, d->nx, d->ny);
        return -1;
    }
    return check_output(body, env, pb);
}

static int recenter_plan(const json_t *body, const job_env *env, const char *workdir,
                         job_plan *out, char *err, size_t errlen)
{
    const dataset *d;
    int rc = plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    recenter_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    json_t *sz = json_object_get(body, "size");
    s->d = d;
    s->w = (long)json_integer_value(json_array_get(sz, 0));
    s->h = (long)json_integer_value(json_array_get(sz, 1));
    s->dt = choose_dtype(d);
    s->per_block = lmax(1, (d->nz + MIN_BLOCKS - 1) / MIN_BLOCKS);
    s->nblocks = (d->nz + s->per_block - 1) / s->per_block;
    snprintf(s->out_path, sizeof s->out_path, "%s/recentered.fits", workdir);
    snprintf(s->origins_path, sizeof s->origins_path, "%s/origins.bin", workdir);
    snprintf(s->name, sizeof s->name, "%s", output_name(body));
    if (s->w < 1 || s->h < 1 || s->w > d->nx || s->h > d->ny) {
        tess_seterr(err, errlen, "size: crops do not fit in the frames");
        free(s);
        return TESS_EINVAL;
    }
    if (!marker_exists(workdir)) {
        char c_src[81], c_w[81], text[72];
        fitscard_string(c_src, "RCSOURCE", d->name, 0, NULL);
        snprintf(text, sizeof text, "Frames cropped around their intensity centroid, %ldx%ld",
                 s->w, s->h);
        fitscard_commentary(c_w, "COMMENT", text);
        c_src[80] = c_w[80] = '\0';
        const char *cards[] = {c_w, "COMMENT Crop origins (0-based) in the ORIGINS table", c_src,
                               NULL};
        long naxes[3] = {s->w, s->h, d->nz};
        rc = fits_out_create(s->out_path, s->dt, fits_bitpix(s->dt), 3, naxes, NULL, cards,
                             &s->datastart, err, errlen);
        if (!rc) {
            int fd = open(s->origins_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0 || ftruncate(fd, (off_t)(d->nz * sizeof(origin_rec))) != 0 ||
                close(fd) != 0) {
                tess_seterr(err, errlen, "cannot create %s", s->origins_path);
                rc = TESS_EIO;
            }
        }
        if (!rc)
            rc = touch_marker(workdir, err, errlen);
    } else {
        rc = fitsimg_data_offset(s->out_path, 0, &s->datastart, err, errlen);
    }
    if (rc) {
        free(s);
        return rc;
    }
    out->nstages = 1;
    out->nblocks[0] = s->nblocks;
    out->state = s;
    return 0;
}

/* The median of the finite values among the m of a (numpy.percentile's 50th, by the
 * renderer's quickselect, O(m)), NaN when none is finite or memory is short. */
static double median_of(const double *a, size_t m)
{
    render_params p;
    render_params_default(&p);
    p.min_cut = p.max_cut = (render_cut){ 50.0, 1 };
    double lo = NAN, hi = NAN;
    if (render_resolve_cuts(a, m, &p, &lo, &hi) != 0)
        return NAN;
    return lo;
}

/* The centroid of the object in frame v (nx x ny; NaN skipped) into *cx, *cy: the
 * background b is the median of the finite pixels and its noise s = 1.4826 MAD (the
 * median absolute deviation, scaled to a Gaussian's sigma); the centroid weights
 * v - b over the pixels above b + 3 s (a barycentre over the pixels above a detection
 * threshold, as SExtractor measures one; Bertin & Arnouts 1996, A&AS 117, 393), over
 * those above b when none is, and is the frame centre when none is above b (or the
 * statistics cannot be had).  A plain
 * intensity centroid counts the background too, which pulls it towards the middle of
 * the frame.  `scratch` holds nx * ny values.  Cannot fail. */
static void object_centroid(const double *v, long nx, long ny, double *scratch, double *cx,
                            double *cy)
{
    size_t n = (size_t)nx * (size_t)ny;
    *cx = nx / 2.0;
    *cy = ny / 2.0;
    double b = median_of(v, n);
    if (!isfinite(b))
        return;
    for (size_t i = 0; i < n; i++)
        scratch[i] = fabs(v[i] - b);
    double t = b + 3.0 * 1.4826 * median_of(scratch, n);
    if (!isfinite(t))
        t = b;
    for (int pass = 0; pass < 2; pass++) {
        double lim = pass == 0 ? t : b, si = 0, sx = 0, sy = 0;
        for (long y = 0; y < ny; y++) {
            const double *row = v + y * nx;
            double rs = 0, rx = 0;
            for (long x = 0; x < nx; x++) {
                double w = row[x] - b;
                if (row[x] > lim && isfinite(w)) {
                    rs += w;
                    rx += w * (double)x;
                }
            }
            si += rs;
            sx += rx;
            sy += rs * (double)y;
        }
        if (si > 0 && isfinite(si) && isfinite(sx) && isfinite(sy)) {
            *cx = sx / si;
            *cy = sy / si;
            return;
        }
    }
}

static int recenter_run(void *state, int stage, long block, const volatile int *cancel,
                        char *err, size_t errlen)
{
    (void)stage;
    recenter_state *s = state;
    const dataset *d = s->d;
    long nx = d->nx, ny = d->ny;
    double *plane = malloc(sizeof(double) * (size_t)nx * ny);
    double *scratch = malloc(sizeof(double) * (size_t)nx * ny);
    double *crop = malloc(sizeof(double) * (size_t)s->w * s->h);
    int oes = chunkstore_esize(s->dt);
    unsigned char *enc = malloc((size_t)s->w * s->h * oes);
    int rc = plane && scratch && crop && enc ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    int fd = rc ? -1 : open(s->out_path, O_WRONLY | O_CLOEXEC);
    int ofd = rc ? -1 : open(s->origins_path, O_WRONLY | O_CLOEXEC);
    if (!rc && (fd < 0 || ofd < 0)) {
        tess_seterr(err, errlen, "cannot open the work files: %s", strerror(errno));
        rc = TESS_EIO;
    }
    long z0 = block * s->per_block, z1 = lmin(d->nz, z0 + s->per_block);
    for (long z = z0; z < z1 && !rc; z++) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        rc = dataset_read_region(d, z, 0, 0, nx, ny, plane, err, errlen);
        if (rc)
            break;
        origin_rec o;
        object_centroid(plane, nx, ny, scratch, &o.cx, &o.cy);
        long ox = isfinite(o.cx) && fabs(o.cx) < 1e15 ? (long)o.cx - s->w / 2 : 0;
        long oy = isfinite(o.cy) && fabs(o.cy) < 1e15 ? (long)o.cy - s->h / 2 : 0;
        o.x0 = lmax(0, lmin(ox, nx - s->w));
        o.y0 = lmax(0, lmin(oy, ny - s->h));
        for (long y = 0; y < s->h; y++)
            memcpy(crop + y * s->w, plane + (o.y0 + y) * nx + o.x0, sizeof(double) * (size_t)s->w);
        fits_encode(s->dt, crop, enc, s->w * s->h);
        size_t n = (size_t)s->w * s->h * oes;
        if (tess_pwrite_all(fd, enc, n, (off_t)(s->datastart + (long long)z * (long long)n))
                != 0 ||
            tess_pwrite_all(ofd, &o, sizeof o, (off_t)(z * (long)sizeof o)) != 0) {
            tess_seterr(err, errlen, "cannot write the work files: %s", strerror(errno));
            rc = TESS_EIO;
        }
    }
    if (fd >= 0 && close(fd) != 0 && !rc)
        rc = TESS_EIO;
    if (ofd >= 0)
        close(ofd);
    free(plane);
    free(scratch);
    free(crop);
    free(enc);
    return rc;
}

static int recenter_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                           size_t errlen)
{
    recenter_state *s = state;
    long nz = s->d->nz;
    origin_rec *rec = malloc(sizeof *rec * (size_t)nz);
    int fd = open(s->origins_path, O_RDONLY | O_CLOEXEC);
    if (!rec || fd < 0 || tess_pread_all(fd, rec, sizeof *rec * (size_t)nz, 0) != 0) {
        if (fd >= 0)
            close(fd);
        free(rec);
        tess_seterr(err, errlen, "cannot read %s", s->origins_path);
        return TESS_EIO;
    }
    close(fd);
    long *frame = malloc(sizeof(long) * (size_t)nz * 3);
    double *c = malloc(sizeof(double) * (size_t)nz * 2);
    int rc = frame && c ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    fitswrite *f = NULL;
    if (!rc)
        rc = fitswrite_open_file(s->out_path, &f, err, errlen);
    if (!rc && fitswrite_nhdu(f) < 2) {   /* not yet added (finish may run again after a crash) */
        for (long z = 0; z < nz; z++) {
            frame[z] = z;
            frame[nz + z] = (long)rec[z].x0;
            frame[2 * nz + z] = (long)rec[z].y0;
            c[z] = rec[z].cx;
            c[nz + z] = rec[z].cy;
        }
        const fitswrite_column cols[] = {
            {"FRAME", "1J", "", frame, NULL},
            {"X0", "1J", "pixel", frame + nz, NULL},
            {"Y0", "1J", "pixel", frame + 2 * nz, NULL},
            {"CX", "1D", "pixel", NULL, c},
            {"CY", "1D", "pixel", NULL, c + nz},
        };
        char note[80];
        fitscard_commentary(note, "COMMENT", "0-based crop origin and intensity centroid of "
                            "each frame");
        rc = fitswrite_table_hdu(f, "ORIGINS", nz, 5, cols, note, 1, err, errlen);
    }
    if (f) {
        char cerr[256];
        int crc = fitswrite_close(f, cerr, sizeof cerr);
        if (!rc && crc) {
            tess_seterr(err, errlen, "%s", cerr);
            rc = crc;
        }
    }
    free(frame);
    free(c);
    free(rec);
    if (rc)
        return rc;
    rc = move_file(s->out_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    memset(prod, 0, sizeof *prod);
    snprintf(prod->dataset, sizeof prod->dataset, "%s", s->name);
    return 0;
}

static void recenter_release(void *state)
{
    free(state);
}

const job_kind job_kind_recenter = {"recenter", recenter_validate, recenter_plan, recenter_run,
                                    recenter_finish, recenter_release};

/* ---- reduce -------------------------------------------------------------------------- */

typedef struct reduce_state {
    const dataset *d;
    stack_zop op;
    zreduce_axis axis;
    long nblocks;            /* zreduce_nranges(nz): block k reduces zreduce_range k */
    char workdir[PATH_MAX];
    char name[128];
} reduce_state;

static int reduce_parse(const json_t *body, stack_zop *op, zreduce_axis *axis, job_problem *pb)
{
    json_t *o = json_object_get(body, "op");
    if (!json_is_string(o) || zreduce_op_parse(json_string_value(o), op) != 0) {
        jobkind_problem(pb, 400, "op", "'op' must be one of mean, sum, min, max, std");
        return -1;
    }
    json_t *a = json_object_get(body, "axis");
    *axis = ZREDUCE_AXIS_Z;
    if (a && zreduce_axis_parse(json_is_string(a) ? json_string_value(a) : "", axis) != 0) {
        jobkind_problem(pb, 400, "axis", "'axis' must be \"z\" or \"xy\"");
        return -1;
    }
    return 0;
}

static int reduce_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "op", "axis", "output", NULL};
    const dataset *d;
    stack_zop op;
    zreduce_axis axis;
    if (jobkind_only_fields(body, known, NULL, pb) != 0 || check_dataset(body, env, &d, pb) != 0 ||
        reduce_parse(body, &op, &axis, pb) != 0)
        return -1;
    return check_output(body, env, pb);
}

static void part_path_in(const char *dir, long block, char *out, size_t len)
{
    if (snprintf(out, len, "%s/part%06ld.bin", dir, block) < 0)
        out[0] = 0;
}

static void part_path(const reduce_state *s, long block, char *out, size_t len)
{
    part_path_in(s->workdir, block, out, len);
}

static int reduce_plan(const json_t *body, const job_env *env, const char *workdir,
                       job_plan *out, char *err, size_t errlen)
{
    const dataset *d;
    int rc = plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    job_problem pb;
    stack_zop op;
    zreduce_axis axis;
    if (reduce_parse(body, &op, &axis, &pb) != 0) {
        tess_seterr(err, errlen, "%s: %s", pb.field, pb.detail);
        return TESS_EINVAL;
    }
    reduce_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    s->d = d;
    s->op = op;
    s->axis = axis;
    s->nblocks = zreduce_nranges(d->nz);
    snprintf(s->workdir, sizeof s->workdir, "%s", workdir);
    snprintf(s->name, sizeof s->name, "%s", output_name(body));
    out->nstages = 1;
    out->nblocks[0] = s->nblocks;
    out->state = s;
    return 0;
}

/* Axis z: the partial of the block's planes (stack_zreduce: exact integers for 8/16-bit
 * frames without BLANK, else doubles) saved as part<block>.bin. */
static int reduce_run_z(reduce_state *s, long block, const volatile int *cancel, char *err,
                        size_t errlen)
{
    const dataset *d = s->d;
    long z0, z1;
    zreduce_range(d->nz, block, &z0, &z1);
    stack_zpart *part = NULL;
    int rc = stack_zreduce(dataset_stack(d), s->op, z0, z1, 0, cancel, &part, err, errlen);
    if (!rc) {
        char p[PATH_MAX];
        part_path(s, block, p, sizeof p);
        rc = stack_zpart_save(part, p, err, errlen);
    }
    stack_zpart_free(part);
    return rc;
}

/* Axis xy: value of each plane of the block (zreduce_planes) as a double in
 * part<block>.bin. */
static int reduce_run_xy(reduce_state *s, long block, const volatile int *cancel, char *err,
                         size_t errlen)
{
    const dataset *d = s->d;
    long z0, z1;
    zreduce_range(d->nz, block, &z0, &z1);
    double *vals = malloc(sizeof(double) * (size_t)(z1 - z0));
    int rc = vals ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    else
        rc = zreduce_planes(dataset_stack(d), d->nx, d->ny, d->nz, s->op, z0, z1, cancel, vals,
                            err, errlen);
    if (!rc) {
        char p[PATH_MAX];
        part_path(s, block, p, sizeof p);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || tess_pwrite_all(fd, vals, sizeof *vals * (size_t)(z1 - z0), 0) != 0) {
            tess_seterr(err, errlen, "cannot write %s: %s", p, strerror(errno));
            rc = TESS_EIO;
        }
        if (fd >= 0 && close(fd) != 0 && !rc)
            rc = TESS_EIO;
    }
    free(vals);
    return rc;
}

static int reduce_run(void *state, int stage, long block, const volatile int *cancel,
                      char *err, size_t errlen)
{
    (void)stage;
    reduce_state *s = state;
    return s->axis == ZREDUCE_AXIS_Z ? reduce_run_z(s, block, cancel, err, errlen)
                                     : reduce_run_xy(s, block, cancel, err, errlen);
}

/* Merges the axis-z partials in block order into out[npix]. */
static int reduce_merge_z(reduce_state *s, double *out, char *err, size_t errlen)
{
    stack_zpart *all = NULL;
    int rc = 0;
    for (long k = 0; k < s->nblocks && !rc; k++) {
        char p[PATH_MAX];
        part_path(s, k, p, sizeof p);
        stack_zpart *part = NULL;
        rc = stack_zpart_load(p, &part, err, errlen);
        if (!rc && !all) {
            all = part;
            part = NULL;
        } else if (!rc && stack_zpart_merge(all, part) != 0) {
            tess_seterr(err, errlen, "%s does not match the other partials", p);
            rc = TESS_EINVAL;
        }
        stack_zpart_free(part);
    }
    if (!rc)
        stack_zpart_result(all, out);
    stack_zpart_free(all);
    return rc;
}

/* Creates the product at `path`, nx x ny float64 pixels, with zreduce_header's cards
 * (the same as GET .../reduce?format=fits gives); *datastart = where its data go. */
static int reduce_out_create(const reduce_state *s, const char *path, long nx, long ny,
                         long long *datastart, char *err, size_t errlen)
{
    const dataset *d = s->d;
    char *cards = NULL, *text = NULL;
    const char **list = NULL;
    int n = 0;
    int rc = zreduce_header(d->header, d->nkeys, s->op, s->axis, d->name, &cards, &n, err,
                            errlen);
    if (!rc && (!(text = malloc((size_t)n * 81)) ||
                !(list = calloc((size_t)n + 1, sizeof *list)))) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
    }
    for (int i = 0; !rc && i < n; i++) {
        memcpy(text + (size_t)i * 81, cards + (size_t)i * 80, 80);
        text[(size_t)i * 81 + 80] = '\0';
        list[i] = text + (size_t)i * 81;
    }
    long naxes[2] = {nx, ny};
    if (!rc)
        rc = fits_out_create(path, CS_F32, -64, 2, naxes, NULL, list, datastart, err, errlen);
    free(list);
    free(text);
    free(cards);
    return rc;
}

static int reduce_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                         size_t errlen)
{
    reduce_state *s = state;
    const dataset *d = s->d;
    int along_z = s->axis == ZREDUCE_AXIS_Z;
    long nx = along_z ? d->nx : d->nz, ny = along_z ? d->ny : 1;
    double *out = malloc(sizeof(double) * (size_t)nx * ny);
    if (!out) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int rc = 0;
    long long ds = 0;
    if (along_z) {
        rc = reduce_merge_z(s, out, err, errlen);
    } else {
        for (long k = 0; k < s->nblocks && !rc; k++) {
            char p[PATH_MAX];
            part_path(s, k, p, sizeof p);
            long z0, z1;
            zreduce_range(d->nz, k, &z0, &z1);
            int fd = open(p, O_RDONLY | O_CLOEXEC);
            if (fd < 0
                || tess_pread_all(fd, out + z0, sizeof(double) * (size_t)(z1 - z0), 0) != 0) {
                tess_seterr(err, errlen, "cannot read %s", p);
                rc = TESS_EIO;
            }
            if (fd >= 0)
                close(fd);
        }
    }
    if (!rc) {
        rc = reduce_out_create(s, tmp_path, nx, ny, &ds, err, errlen);
        if (!rc) {
            unsigned char *be = malloc((size_t)nx * ny * 8);
            if (!be) {
                tess_seterr(err, errlen, "out of memory");
                rc = TESS_ENOMEM;
            } else {
                for (long i = 0; i < nx * ny; i++) {
                    uint64_t u;
                    memcpy(&u, out + i, 8);
                    for (int j = 0; j < 8; j++)
                        be[8 * i + j] = (unsigned char)(u >> (56 - 8 * j));
                }
                rc = write_file_at(tmp_path, be, (size_t)nx * ny * 8, (off_t)ds, err, errlen);
                free(be);
            }
        }
    }
    free(out);
    if (rc)
        return rc;
    for (long k = 0; k < s->nblocks; k++) {
        char p[PATH_MAX];
        part_path(s, k, p, sizeof p);
        unlink(p);
    }
    memset(prod, 0, sizeof *prod);
    snprintf(prod->dataset, sizeof prod->dataset, "%s", s->name);
    return 0;
}

static void reduce_release(void *state)
{
    free(state);
}

const job_kind job_kind_reduce = {"reduce", reduce_validate, reduce_plan, reduce_run,
                                  reduce_finish, reduce_release};
