/* Unit tests of the stack job types (daemon/jobs/job_stack.c) and the chunk store
 * (engine/image/chunkstore.c), driven through the job_kind interface as the job runner drives
 * them: validate, plan, every block of every stage (on two threads, some blocks twice, a
 * re-plan between stages as after a restart), finish.  References are computed here from
 * the source files read with cfitsio: an O(n^2) DFT in double precision for the power
 * spectra, direct loops for centroids and reductions.  And one HTTP test: GET
 * .../reduce and a posted reduce job give the same FITS cards and the same bits. */
#include <check.h>
#include <dirent.h>
#include <fitsio.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cube/transpose.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/job_stack.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* An assertion for inner loops: Check records every passing ck_assert (a write to its
 * pipe), which costs seconds over a few hundred thousand values; this one calls Check only
 * on failure. */
#define EXPECT(cond, ...) \
    do { \
        if (!(cond)) \
            ck_abort_msg(__VA_ARGS__); \
    } while (0)

/* ---- fixtures: a catalog with l1448_13co, m13, horsehead and two generated stacks ---- */

static char gendir[64];
static tess_config cfg;
static catalog *cat;
static job_env env;

#define GEN_NX 37
#define GEN_NY 23
#define GEN_NZ 6
#define NAN_NX 19
#define NAN_NY 13
#define NAN_NZ 5
/* A long int16 stack: 300 frames make power_spectrum's staging groups 64 frames long on
 * 2 threads (job_rechunk_group_planes; more than one sub-group of interleaving, TG_SUB =
 * 16) and its last group shorter (44). */
#define LONG_NX 9
#define LONG_NY 7
#define LONG_NZ 300

/* genpng16: gen_value times this, up to 206 x 300 = 61800 (more than int16 holds). */
#define PNG16_SCALE 300

/* Pixel (x, y) of generated frame z (BITPIX 8): a texture and a bright 5x5 patch that
 * drifts across the frames. */
static double gen_value(long x, long y, long z)
{
    long bx = 4 + 5 * z, by = 3 + 3 * z;
    if (x >= bx && x < bx + 5 && y >= by && y < by + 5)
        return 200 + ((x + y + z) % 7);
    return (double)((x * 7 + y * 13 + z * 5) % 50);
}

/* Pixel of the long int16 stack: negative and positive values, no pattern along z
 * that an FFT would reduce to a few lines. */
static double long_value(long x, long y, long z)
{
    return (double)((x * 37 + y * 101 + z * z * 7 + z * 13) % 2001 - 1000);
}

/* Pixel of the float stack with blanks: NaN at a few places, pixel (3, 4) NaN in every
 * frame. */
static double nan_value(long x, long y, long z)
{
    if ((x == 3 && y == 4) || (x + 2 * y + z) % 11 == 0)
        return NAN;
    return sin(0.3 * x + 0.7 * y) * 10 + cos(1.3 * z + x) * 3 + 0.25 * z;
}

static void write_frame(const char *path, int bitpix, long nx, long ny, const double *v)
{
    char name[600];
    snprintf(name, sizeof name, "!%s", path);
    fitsfile *f = NULL;
    int st = 0;
    long naxes[2] = {nx, ny};
    fits_create_file(&f, name, &st);
    fits_create_img(f, bitpix, 2, naxes, &st);
    fits_write_img(f, TDOUBLE, 1, nx * ny, (double *)v, &st);
    fits_close_file(f, &st);
    ck_assert_msg(st == 0, "cfitsio %d writing %s", st, path);
}

/* Writes frames gendir/PREFIX_000.fits ... of nz planes nx x ny, BITPIX bitpix, pixel
 * (x, y) of frame z = value(x, y, z). */
static void write_stack(const char *prefix, int bitpix, long nx, long ny, long nz,
                        double (*value)(long, long, long))
{
    double *v = malloc(sizeof(double) * (size_t)(nx * ny));
    for (long z = 0; z < nz; z++) {
        for (long y = 0; y < ny; y++)
            for (long x = 0; x < nx; x++)
                v[y * nx + x] = value(x, y, z);
        char p[128];
        snprintf(p, sizeof p, "%s/%s_%03ld.fits", gendir, prefix, z);
        write_frame(p, bitpix, nx, ny, v);
    }
    free(v);
}

static void setup(void)
{
    tt_tmpdir_make(gendir, sizeof gendir, "stackjobs");
    write_stack("gen", 8, GEN_NX, GEN_NY, GEN_NZ, gen_value);
    write_stack("long", 16, LONG_NX, LONG_NY, LONG_NZ, long_value);
    write_stack("nan", -32, NAN_NX, NAN_NY, NAN_NZ, nan_value);
    /* The "gen" frames again as 8-bit PNGs. */
    unsigned short *pv = malloc(sizeof(unsigned short) * GEN_NX * GEN_NY);
    for (long z = 0; z < GEN_NZ; z++) {
        for (long y = 0; y < GEN_NY; y++)
            for (long x = 0; x < GEN_NX; x++)
                pv[y * GEN_NX + x] = (unsigned short)gen_value(x, y, z);
        char p[128], e[256];
        snprintf(p, sizeof p, "%s/png_%03ld.png", gendir, z);
        ck_assert_msg(frame_write_png(p, pv, GEN_NX, GEN_NY, 8, 1, e, sizeof e) == 0, "%s", e);
    }
    /* And as 16-bit PNGs, scaled past 32767 (PNG samples are unsigned). */
    for (long z = 0; z < GEN_NZ; z++) {
        for (long y = 0; y < GEN_NY; y++)
            for (long x = 0; x < GEN_NX; x++)
                pv[y * GEN_NX + x] = (unsigned short)(gen_value(x, y, z) * PNG16_SCALE);
        char p[128], e[256];
        snprintf(p, sizeof p, "%s/p16_%03ld.png", gendir, z);
        ck_assert_msg(frame_write_png(p, pv, GEN_NX, GEN_NY, 16, 1, e, sizeof e) == 0, "%s", e);
    }
    free(pv);
    char text[2048], err[256];
    snprintf(text, sizeof text,
             "{\"data_roots\": [\"%s\", \"%s\"], \"datasets\": ["
             "{\"name\": \"l1448_13co\", \"path\": \"l1448_13co.fits\"},"
             "{\"name\": \"horsehead\", \"path\": \"HorseHead.fits\"},"
             "{\"name\": \"m13\", \"frames\": \"M13_blue_*.fits\"},"
             "{\"name\": \"gen\", \"frames\": \"%s/gen_*.fits\"},"
             "{\"name\": \"gennan\", \"frames\": \"%s/nan_*.fits\"},"
             "{\"name\": \"genlong\", \"frames\": \"%s/long_*.fits\"},"
             "{\"name\": \"genpng\", \"frames\": \"%s/png_*.png\"},"
             "{\"name\": \"genpng16\", \"frames\": \"%s/p16_*.png\"}]}",
             TESSERA_DEMO_DIR, gendir, gendir, gendir, gendir, gendir, gendir);
    ck_assert_int_eq(config_init(&cfg), 0);
    int rc = config_load_text(text, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "config: %s", err);
    rc = catalog_open(&cfg, &cat, err, sizeof err);
    ck_assert_msg(rc == 0, "catalog: %s", err);
    env.cfg = &cfg;
    env.cat = cat;
    env.threads = 2;
}

static void rm_tree(const char *dir)
{
    DIR *dd = opendir(dir);
    if (!dd)
        return;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(dd);
    rmdir(dir);
}

static void teardown(void)
{
    catalog_free(cat);
    config_release(&cfg);
    rm_tree(gendir);
}

/* ---- driving a job ------------------------------------------------------------------ */

typedef struct stage_run {
    const job_kind *k;
    void *state;
    int stage;
    long nblocks;
    long next;
    pthread_mutex_t lock;
    int rc;
    char err[256];
} stage_run;

static void *stage_worker(void *arg)
{
    stage_run *sr = arg;
    static const volatile int no_cancel = 0;
    for (;;) {
        pthread_mutex_lock(&sr->lock);
        long b = sr->next < sr->nblocks ? sr->nblocks - 1 - sr->next++ : -1;
        pthread_mutex_unlock(&sr->lock);
        if (b < 0)
            break;
        char err[256] = "";
        int rc = sr->k->run_block(sr->state, sr->stage, b, &no_cancel, err, sizeof err);
        if (rc) {
            pthread_mutex_lock(&sr->lock);
            sr->rc = rc;
            snprintf(sr->err, sizeof sr->err, "block %ld: %s", b, err);
            pthread_mutex_unlock(&sr->lock);
        }
    }
    return NULL;
}

/* Runs job `body` of kind k to the end; the product goes to `product` (a path in the
 * generated directory).  Every block runs on two threads (last block first); block 0 of
 * every stage runs a second time; after stage 0 the state is released and the job
 * planned again on the same work directory, as after a restart (the power spectrum's
 * on one thread: its groups must stay those recorded).  Returns the total
 * number of blocks; *nstages = stages of the plan. */
/* The request of an accepted job of kind k for body (asserted to parse). */
static void *accepted_req(const job_kind *k, const json_t *body)
{
    void *req = NULL;
    job_problem pb;
    memset(&pb, 0, sizeof pb);
    ck_assert_msg(jobkind_parse(k, body, &env, 1, &req, &pb) == 0, "parse: %s: %s", pb.field,
                  pb.detail);
    return req;
}

static long run_job(const job_kind *k, const char *body_text, const char *product,
                    job_product *prod, int *nstages)
{
    json_error_t je;
    json_t *body = json_loads(body_text, 0, &je);
    ck_assert_msg(body != NULL, "bad test body %s", body_text);
    job_problem pb;
    memset(&pb, 0, sizeof pb);
    void *req = NULL;
    ck_assert_msg(jobkind_parse(k, body, &env, 0, &req, &pb) == 0, "parse %s: %s: %s", body_text,
                  pb.field, pb.detail);
    /* the stored (normalised) body parses into the same request */
    json_t *norm = k->req_json(req);
    ck_assert_ptr_nonnull(norm);
    ck_assert_str_eq(json_string_value(json_object_get(norm, "dataset")),
                     json_string_value(json_object_get(body, "dataset")));
    void *again_req = accepted_req(k, norm);
    json_t *norm2 = k->req_json(again_req);
    ck_assert_msg(json_equal(norm, norm2), "%s: not stable", body_text);
    json_decref(norm2);
    json_decref(norm);
    k->req_free(again_req);
    char wd[64], err[256] = "";
    tt_tmpdir_make(wd, sizeof wd, "sjwork");
    job_plan plan;
    memset(&plan, 0, sizeof plan);
    int rc = k->plan(req, &env, wd, &plan, err, sizeof err);
    ck_assert_msg(rc == 0, "plan: %s", err);
    long total = 0;
    for (int s = 0; s < plan.nstages; s++)
        total += plan.nblocks[s];
    for (int s = 0; s < plan.nstages; s++) {
        stage_run sr = {k, plan.state, s, plan.nblocks[s], 0, PTHREAD_MUTEX_INITIALIZER, 0, ""};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, stage_worker, &sr);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        ck_assert_msg(sr.rc == 0, "stage %d: %s", s, sr.err);
        static const volatile int no_cancel = 0;
        rc = k->run_block(plan.state, s, 0, &no_cancel, err, sizeof err);
        ck_assert_msg(rc == 0, "block 0 again: %s", err);
        if (s == 0) {
            job_plan again;
            memset(&again, 0, sizeof again);
            k->release(plan.state);
            /* the power spectrum planned again by a runner of another thread count keeps
             * its groups (recorded in the work directory): the same blocks */
            if (k == &job_kind_power_spectrum)
                env.threads = 1;
            rc = k->plan(req, &env, wd, &again, err, sizeof err);
            env.threads = 2;
            ck_assert_msg(rc == 0, "plan again: %s", err);
            ck_assert_int_eq(again.nstages, plan.nstages);
            for (int i = 0; i < plan.nstages; i++)
                ck_assert_int_eq(again.nblocks[i], plan.nblocks[i]);
            plan = again;
        }
    }
    unlink(product);
    rc = k->finish(plan.state, product, prod, err, sizeof err);
    ck_assert_msg(rc == 0, "finish: %s", err);
    k->release(plan.state);
    k->req_free(req);
    rm_tree(wd);
    json_decref(body);
    if (nstages)
        *nstages = plan.nstages;
    return total;
}

static void product_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", gendir, name);
}

/* Every plane of a dataset as doubles, read here with cfitsio: [z][y*nx+x]. */
static double *read_cube(const dataset *d)
{
    double *all = malloc(sizeof(double) * (size_t)(d->nx * d->ny * d->nz));
    int png16 = strcmp(d->name, "genpng16") == 0;
    if (strcmp(d->name, "genpng") == 0 || png16) {   /* the values its PNGs were written from */
        for (long z = 0; z < d->nz; z++)
            for (long y = 0; y < d->ny; y++)
                for (long x = 0; x < d->nx; x++)
                    all[(z * d->ny + y) * d->nx + x] = gen_value(x, y, z) * (png16 ? PNG16_SCALE : 1);
        return all;
    }
    for (long z = 0; z < d->nz; z++) {
        long nx, ny;
        double *p = d->kind == DS_STACK ? tt_fits_plane(d->paths[z], 0, &nx, &ny)
                                        : tt_fits_plane(d->paths[0], z, &nx, &ny);
        ck_assert_int_eq(nx, d->nx);
        ck_assert_int_eq(ny, d->ny);
        memcpy(all + z * nx * ny, p, sizeof(double) * (size_t)(nx * ny));
        free(p);
    }
    return all;
}

static const dataset *ds(const char *name)
{
    const dataset *d = catalog_find(cat, name);
    ck_assert_msg(d != NULL, "no dataset %s", name);
    return d;
}

/* ---- chunk store --------------------------------------------------------------------- */

START_TEST(test_chunkstore_order)
{
    chunkstore_info in = {.nx = 37, .ny = 23, .nz = 3, .dtype = CS_F32, .tx = 16, .ty = 16,
                          .data_offset = CHUNKSTORE_HEADER};
    /* The index is a permutation of 0..nx*ny-1 and pixel_at inverts it. */
    char *seen = calloc(37 * 23, 1);
    for (long y = 0; y < 23; y++)
        for (long x = 0; x < 37; x++) {
            long long i = chunkstore_pixel_index(&in, x, y);
            EXPECT(i >= 0 && i < 37 * 23 && !seen[i], "index %lld of (%ld,%ld)", i, x, y);
            seen[i] = 1;
            long bx, by;
            chunkstore_pixel_at(&in, i, &bx, &by);
            EXPECT(bx == x && by == y, "(%ld,%ld) -> %lld -> (%ld,%ld)", x, y, i, bx, by);
        }
    free(seen);
    /* By hand: the second tile of the first tile row starts after 16x16 pixels; the
     * second tile row (7 rows high) starts at 16*37; its last tile is 5 wide. */
    ck_assert_int_eq(chunkstore_pixel_index(&in, 16, 0), 256);
    ck_assert_int_eq(chunkstore_pixel_index(&in, 17, 1), 256 + 16 + 1);
    ck_assert_int_eq(chunkstore_pixel_index(&in, 0, 16), 16 * 37);
    ck_assert_int_eq(chunkstore_pixel_index(&in, 33, 17), 16 * 37 + 32 * 7 + 5 + 1);
    ck_assert_int_eq(chunkstore_file_size(&in), 4096 + 37 * 23 * 3 * 4);
}
END_TEST

START_TEST(test_chunkstore_errors)
{
    char p[128], err[256];
    product_path(p, sizeof p, "bad.tcs");
    FILE *f = fopen(p, "w");
    fputs("SIMPLE  = T", f);
    fclose(f);
    double v[4];
    ck_assert_int_eq(chunkstore_read_series(p, 0, 0, v, 4, err, sizeof err), TESS_EIO);
    chunkstore_info in = {.nx = 3, .ny = 2, .nz = 4, .dtype = CS_U16, .tx = 2, .ty = 2,
                          .data_offset = CHUNKSTORE_HEADER};
    ck_assert_int_eq(chunkstore_create(p, &in, err, sizeof err), 0);
    ck_assert_int_eq(chunkstore_read_series(p, 3, 0, v, 4, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(chunkstore_read_series(p, 0, 0, v, 3, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(chunkstore_read_series(p, 2, 1, v, 4, err, sizeof err), 0);
    ck_assert(v[0] == 0 && v[3] == 0);
    chunkstore_info back;
    ck_assert_int_eq(chunkstore_read_info(p, &back, err, sizeof err), 0);
    ck_assert_int_eq(back.dtype, CS_U16);
    ck_assert_int_eq(back.tx, 2);
    ck_assert_int_eq(truncate(p, 4096 + 10), 0);
    ck_assert_int_eq(chunkstore_read_series(p, 0, 0, v, 4, err, sizeof err), TESS_EINVAL);
    unlink(p);
}
END_TEST

/* ---- rechunk ------------------------------------------------------------------------- */

/* Rechunks `name`, compares every (step-th) series with the plane-major values, and
 * returns the store's path in `store`. */
/* The plan the next rechunk must have, always one stage: blocks that are bands of rows
 * gathered from the planes by default (0), groups of planes written into every series of
 * the store (1) under a band limit of 1 byte (job_stack_set_band_bytes). */
static int want_groups = 0;

static void check_rechunk(const char *name, long step, cs_dtype want, char *store, size_t len)
{
    const dataset *d = ds(name);
    char body[256];
    snprintf(body, sizeof body, "{\"type\": \"rechunk\", \"dataset\": \"%s\"}", name);
    char file[64];
    snprintf(file, sizeof file, "%s.tcs", name);
    product_path(store, len, file);
    job_product prod;
    int nst = 0;
    long nb = run_job(&job_kind_rechunk, body, store, &prod, &nst);
    /* bands when a band of 16 rows across all planes fits in the band limit (256 MB:
     * every volume here), else groups of planes (transpose.h's stage A into the store) */
    ck_assert_int_eq(nst, 1);
    if (want_groups) {
        long g = job_rechunk_group_planes(d, 2);   /* run_job's two workers */
        /* each group in a part per worker (cube_transpose.split), at most a tile row each */
        long split = (d->ny + CUBE_TILE - 1) / CUBE_TILE < 2 ? 1 : 2;
        ck_assert_int_eq(nb, (d->nz + g - 1) / g * split);
        ck_assert_int_gt(nb, 1);
    }
    ck_assert_str_eq(prod.attach_to, name);
    ck_assert_str_eq(prod.dataset, "");
    if (strcmp(name, "l1448_13co") == 0)
        ck_assert_int_ge(nb, 4);   /* 7 tile rows, at least 2 bands per thread */
    chunkstore_info ci;
    char err[256];
    ck_assert_int_eq(chunkstore_read_info(store, &ci, err, sizeof err), 0);
    ck_assert_int_eq(ci.dtype, want);
    ck_assert_int_eq(ci.nx, d->nx);
    ck_assert_int_eq(ci.nz, d->nz);
    ck_assert_str_eq(ci.source, name);
    double *cube = read_cube(d);
    double *s = malloc(sizeof(double) * (size_t)d->nz);
    long checked = 0;
    for (long y = 0; y < d->ny; y += step)
        for (long x = 0; x < d->nx; x += step) {
            int rc = chunkstore_read_series(store, x, y, s, d->nz, err, sizeof err);
            EXPECT(rc == 0, "%s", err);
            for (long z = 0; z < d->nz; z++) {
                double ref = cube[(z * d->ny + y) * d->nx + x];
                if (want == CS_F32)
                    ref = (float)ref;
                EXPECT(s[z] == ref || (isnan(s[z]) && isnan(ref)),
                              "%s (%ld,%ld,%ld): %g != %g", name, x, y, z, s[z], ref);
            }
            checked++;
        }
    ck_assert_int_gt(checked, 100);
    free(s);
    free(cube);
}

START_TEST(test_rechunk_l1448)
{
    char store[256];
    check_rechunk("l1448_13co", 1, CS_F32, store, sizeof store);
    unlink(store);
}
END_TEST

START_TEST(test_rechunk_m13)
{
    char store[256];
    check_rechunk("m13", 7, CS_U16, store, sizeof store);
    unlink(store);
}
END_TEST

START_TEST(test_rechunk_gen)
{
    char store[256];
    check_rechunk("genpng16", 1, CS_U16, store, sizeof store);
    unlink(store);
    check_rechunk("gen", 1, CS_U8, store, sizeof store);
    check_rechunk("gennan", 1, CS_F32, store, sizeof store);
    unlink(store);
}
END_TEST

/* The two-stage plan (staging file), forced by a band limit of 1 byte. */
START_TEST(test_rechunk_staged)
{
    char store[256];
    job_stack_set_band_bytes(1);
    want_groups = 1;
    check_rechunk("gen", 1, CS_U8, store, sizeof store);
    check_rechunk("l1448_13co", 1, CS_F32, store, sizeof store);
    want_groups = 0;
    job_stack_set_band_bytes(0);
    unlink(store);
}
END_TEST

/* ---- power spectrum ------------------------------------------------------------------ */

/* |DFT(s)|^2 by the definition, in double precision. */
static void dft_power(const double *s, long n, double *p)
{
    double *c = malloc(sizeof(double) * (size_t)n), *sn = malloc(sizeof(double) * (size_t)n);
    for (long m = 0; m < n; m++) {   /* exp(-2 pi i m / n) */
        c[m] = cos(-2 * M_PI * (double)m / (double)n);
        sn[m] = sin(-2 * M_PI * (double)m / (double)n);
    }
    for (long k = 0; k < n; k++) {
        double re = 0, im = 0;
        for (long j = 0; j < n; j++) {
            long m = (k * j) % n;
            double v = isnan(s[j]) ? 0 : s[j];
            re += v * c[m];
            im += v * sn[m];
        }
        p[k] = re * re + im * im;
    }
    free(c);
    free(sn);
}

/* Runs power_spectrum on `name` and compares every (step-th) pixel's spectrum with
 * dft_power of its series in float32 (the values the job transforms).  Returns the
 * number of stages of the job's plan. */
static int check_power(const char *name, const char *out, long step)
{
    const dataset *d = ds(name);
    char body[256];
    snprintf(body, sizeof body,
             "{\"type\": \"power_spectrum\", \"dataset\": \"%s\", \"output\": {\"name\": \"%s\"}}",
             name, out);
    char path[256], file[64];
    snprintf(file, sizeof file, "%s.fits", out);
    product_path(path, sizeof path, file);
    job_product prod;
    int nst = 0;
    long nb = run_job(&job_kind_power_spectrum, body, path, &prod, &nst);
    ck_assert_str_eq(prod.dataset, out);
    ck_assert_str_eq(prod.attach_to, "");
    if (strcmp(name, "l1448_13co") == 0)
        ck_assert_int_ge(nb, 10);
    double *cube = read_cube(d);
    /* The product: a float32 cube of the source's shape. */
    double *spec = malloc(sizeof(double) * (size_t)(d->nx * d->ny * d->nz));
    for (long k = 0; k < d->nz; k++) {
        long nx, ny;
        double *p = tt_fits_plane(path, k, &nx, &ny);
        ck_assert_int_eq(nx, d->nx);
        ck_assert_int_eq(ny, d->ny);
        memcpy(spec + k * nx * ny, p, sizeof(double) * (size_t)(nx * ny));
        free(p);
    }
    double *s = malloc(sizeof(double) * (size_t)d->nz), *ref = malloc(sizeof(double) * (size_t)d->nz);
    double worst = 0;
    for (long y = 0; y < d->ny; y += step)
        for (long x = 0; x < d->nx; x += step) {
            double peak = 0;
            for (long z = 0; z < d->nz; z++)
                s[z] = (float)cube[(z * d->ny + y) * d->nx + x];
            dft_power(s, d->nz, ref);
            for (long k = 0; k < d->nz; k++)
                peak = ref[k] > peak ? ref[k] : peak;
            for (long k = 0; k < d->nz; k++) {
                double got = spec[(k * d->ny + y) * d->nx + x];
                /* 1e-4 relative (a floor of 1e-12 of the peak only for exact zeros). */
                double tol = 1e-4 * ref[k] + 1e-12 * peak;
                double e = ref[k] > 0 ? fabs(got - ref[k]) / ref[k] : 0;
                worst = e > worst ? e : worst;
                EXPECT(fabs(got - ref[k]) <= tol, "%s (%ld,%ld) k=%ld: %.9g vs %.9g", name, x, y,
                       k, got, ref[k]);
            }
        }
    fprintf(stderr, "power_spectrum %s: worst relative error %.3g\n", name, worst);
    free(s);
    free(ref);
    free(spec);
    free(cube);
    unlink(path);
    return nst;
}

START_TEST(test_power_l1448)
{
    ck_assert_int_eq(check_power("l1448_13co", "ps_l1448", 1), 2);
}
END_TEST

START_TEST(test_power_m13_gen)
{
    check_power("m13", "ps_m13", 13);
    check_power("gen", "ps_gen", 1);
    check_power("gennan", "ps_nan", 1);
    check_power("genlong", "ps_long", 1);
    ck_assert_int_eq(check_power("genpng", "ps_png", 1), 2);   /* PNG frames */
}
END_TEST

/* With a current rechunk copy attached, the spectrum is computed from it in one stage. */
START_TEST(test_power_from_profile)
{
    char store[256];
    check_rechunk("gen", 1, CS_U8, store, sizeof store);
    ck_assert_int_eq(dataset_attach_profile(ds("gen"), store), 0);
    ck_assert_int_eq(check_power("gen", "ps_gen2", 1), 1);
    unlink(store);
}
END_TEST

/* ---- a job resumed by a runner of another thread count -------------------------------- */

/* Job body of kind k as the job runner resumes it after a restart on other settings, or
 * as a cluster's servers and workers share it: planned on 2 threads, blocks [0, n / 2)
 * of stage 0 (n of its blocks) run and recorded done by their index only, the state
 * released; planned again on `threads2` threads on the same work directory, the blocks of
 * stage 0 from n / 2 on by the new plan's indices and every block of the later stages
 * run; finished into `product`.  Returns 1 when the new plan had the first one's stages
 * and blocks, else 0. */
static int run_resumed(const job_kind *k, const char *body_text, int threads2,
                       const char *product)
{
    static const volatile int no_cancel = 0;
    json_t *body = json_loads(body_text, 0, NULL);
    ck_assert_ptr_nonnull(body);
    void *req = accepted_req(k, body);
    char wd[64], err[256] = "";
    tt_tmpdir_make(wd, sizeof wd, "sjresume");
    job_plan plan, again;
    memset(&plan, 0, sizeof plan);
    memset(&again, 0, sizeof again);
    env.threads = 2;
    int rc = k->plan(req, &env, wd, &plan, err, sizeof err);
    ck_assert_msg(rc == 0, "plan: %s", err);
    long half = plan.nblocks[0] / 2;
    ck_assert_int_ge(half, 1);
    for (long b = 0; b < half; b++) {
        rc = k->run_block(plan.state, 0, b, &no_cancel, err, sizeof err);
        ck_assert_msg(rc == 0, "block %ld: %s", b, err);
    }
    k->release(plan.state);
    env.threads = threads2;
    rc = k->plan(req, &env, wd, &again, err, sizeof err);
    env.threads = 2;
    ck_assert_msg(rc == 0, "plan again: %s", err);
    for (int st = 0; st < again.nstages; st++)
        for (long b = st == 0 ? half : 0; b < again.nblocks[st]; b++) {
            rc = k->run_block(again.state, st, b, &no_cancel, err, sizeof err);
            ck_assert_msg(rc == 0, "stage %d block %ld: %s", st, b, err);
        }
    unlink(product);
    job_product prod;
    rc = k->finish(again.state, product, &prod, err, sizeof err);
    ck_assert_msg(rc == 0, "finish: %s", err);
    k->release(again.state);
    int same = again.nstages == plan.nstages;
    for (int st = 0; same && st < plan.nstages; st++)
        same = again.nblocks[st] == plan.nblocks[st];
    if (!same)
        fprintf(stderr, "%s: %ld blocks in stage 0 on 2 threads, %ld on %d\n", body_text,
                plan.nblocks[0], again.nblocks[0], threads2);
    k->req_free(req);
    rm_tree(wd);
    json_decref(body);
    return same;
}

/* 1 when files a and b hold the same bytes. */
static int same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    ck_assert_msg(fa && fb, "cannot open %s or %s", a, b);
    int ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    return ca == cb;
}

/* Rechunk (bands of rows, and groups of planes in parts under a band limit of 1 byte) and
 * the power spectrum (stage A's groups) of l1448_13co (105 x 105 x 53: 7 tile rows), each
 * stopped half-way through its first stage on 2 threads and resumed on 1 and on 3: the
 * plan stays the first one's (recorded in the work directory) and the product has the
 * bytes of an uninterrupted run (itself checked against cfitsio's values and a DFT
 * above).  On other thread counts the bands (4 on 2 threads, 2 on 1) and the groups
 * (14 planes in 2 parts on 2 threads, 27 in 1 on 1, 9 in 3 on 3) are other blocks. */
START_TEST(test_resumed_on_other_threads)
{
    static const struct { const char *type, *body; long band_bytes; } jobs[] = {
        {"rechunk", "{\"type\": \"rechunk\", \"dataset\": \"l1448_13co\"}", 0},
        {"rechunk", "{\"type\": \"rechunk\", \"dataset\": \"l1448_13co\"}", 1},
        {"power_spectrum", "{\"type\": \"power_spectrum\", \"dataset\": \"l1448_13co\", "
                           "\"output\": {\"name\": \"ps_resumed\"}}", 0},
    };
    char ref[256], got[256];
    product_path(ref, sizeof ref, "resumed_ref");
    product_path(got, sizeof got, "resumed_got");
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        const job_kind *k = strcmp(jobs[i].type, "rechunk") == 0 ? &job_kind_rechunk
                                                                : &job_kind_power_spectrum;
        job_stack_set_band_bytes(jobs[i].band_bytes);
        job_product prod;
        run_job(k, jobs[i].body, ref, &prod, NULL);
        for (int threads2 = 1; threads2 <= 3; threads2 += 2) {
            int same = run_resumed(k, jobs[i].body, threads2, got);
            ck_assert_msg(same_bytes(ref, got), "%s (band limit %ld) resumed on %d threads: "
                          "not the product of an uninterrupted run", jobs[i].type,
                          jobs[i].band_bytes, threads2);
            ck_assert_msg(same, "%s (band limit %ld) resumed on %d threads: another plan",
                          jobs[i].type, jobs[i].band_bytes, threads2);
            unlink(got);
        }
        unlink(ref);
    }
    job_stack_set_band_bytes(0);
}
END_TEST

/* The record of rechunk's plan (<workdir>/rechunk.plan): without it (a work directory of
 * a build before it) a later plan takes this process's thread count, as that build did;
 * a record that is not four integers of a plan of the dataset fails the plan (TESS_EIO). */
START_TEST(test_plan_record_missing_or_bad)
{
    static const char *body = "{\"type\": \"rechunk\", \"dataset\": \"l1448_13co\"}";
    json_t *b = json_loads(body, 0, NULL);
    void *req = accepted_req(&job_kind_rechunk, b);
    char wd[64], rec[128], err[256] = "";
    tt_tmpdir_make(wd, sizeof wd, "sjrecord");
    snprintf(rec, sizeof rec, "%s/rechunk.plan", wd);
    job_plan plan;
    memset(&plan, 0, sizeof plan);
    ck_assert_int_eq(job_kind_rechunk.plan(req, &env, wd, &plan, err, sizeof err), 0);
    job_kind_rechunk.release(plan.state);
    ck_assert_int_eq(plan.nblocks[0], 4);   /* 7 tile rows in bands of 2 on 2 threads */
    static const struct { const char *text; int rc; long nblocks; } cases[] = {
        {NULL, 0, 2},                /* no record: bands of 4 tile rows on 1 thread */
        {"1 32 0 0\n", 0, 4},        /* the record of 2 threads */
        {"1 32 0\n", TESS_EIO, 0},   /* three values */
        {"1 32 0 0 5\n", TESS_EIO, 0},
        {"1 24 0 0\n", TESS_EIO, 0}, /* not whole tile rows */
        {"0 0 54 1\n", TESS_EIO, 0}, /* a group of more planes than the cube's 53 */
        {"0 0 27 8\n", TESS_EIO, 0}, /* more parts than tile rows */
        {"x\n", TESS_EIO, 0},
    };
    env.threads = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(rec);
        if (cases[i].text) {
            FILE *f = fopen(rec, "w");
            fputs(cases[i].text, f);
            fclose(f);
        }
        memset(&plan, 0, sizeof plan);
        err[0] = '\0';
        int rc = job_kind_rechunk.plan(req, &env, wd, &plan, err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "record %s: rc %d (%s)", cases[i].text, rc, err);
        if (rc == 0) {
            ck_assert_int_eq(plan.nblocks[0], cases[i].nblocks);
            job_kind_rechunk.release(plan.state);
        } else {
            ck_assert_msg(strstr(err, "rechunk.plan") != NULL, "%s", err);
        }
    }
    env.threads = 2;
    job_kind_rechunk.req_free(req);
    json_decref(b);
    rm_tree(wd);
}
END_TEST

/* The estimate of a job resumed on another thread count (the runner estimates it again
 * with env.workdir set before planning it) counts the blocks its first plan recorded
 * there, not those this process's threads would give: planned on 1 thread, estimated on
 * 3.  l1448_13co's rechunk bands (64 rows on 1 thread, 32 on 3) and its groups under a
 * band limit of 1 byte (27 planes on 1 thread, 9 on 3: the same bytes, a FITS cube's
 * planes are read through its map, not held); the PNG stack genpng's groups of decoded
 * frames (3 on 1 thread, 1 on 3), for rechunk and for the spectrum's stage A.  Without the marker (no plan made yet)
 * or without a workdir (at submit) the local plan is counted, and the estimate writes
 * nothing there. */
START_TEST(test_estimate_of_resumed_plan)
{
    static const struct {
        const char *body, *what1, *what3;
        long band_bytes;
        int smaller;   /* 3 threads' block is smaller than 1 thread's */
    } jobs[] = {
        {"{\"type\": \"rechunk\", \"dataset\": \"l1448_13co\"}",
         "a band of 64 rows of 105 series of 53 values",
         "a band of 32 rows of 105 series of 53 values", 0, 1},
        {"{\"type\": \"rechunk\", \"dataset\": \"l1448_13co\"}",
         "a group of 27 planes of 105 x 105 pixels", "a group of 9 planes of 105 x 105 pixels",
         1, 0},
        {"{\"type\": \"rechunk\", \"dataset\": \"genpng\"}",
         "a group of 3 planes of 37 x 23 pixels", "a group of 1 planes of 37 x 23 pixels", 1,
         1},
        {"{\"type\": \"power_spectrum\", \"dataset\": \"genpng\", \"output\": "
         "{\"name\": \"ps_estimated\"}}", "a group of 3 planes of 37 x 23 pixels",
         "a group of 1 planes of 37 x 23 pixels", 0, 1},
    };
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        const job_kind *k = strstr(jobs[i].body, "rechunk") ? &job_kind_rechunk
                                                            : &job_kind_power_spectrum;
        job_stack_set_band_bytes(jobs[i].band_bytes);
        json_t *b = json_loads(jobs[i].body, 0, NULL);
        void *req = accepted_req(k, b);
        char wd[64], err[256] = "", rec[128];
        tt_tmpdir_make(wd, sizeof wd, "sjestimate");
        job_cost one, three, resumed, early;
        job_problem pb;
        env.threads = 1;
        ck_assert_int_eq(k->estimate(req, &env, &one, &pb), 0);
        ck_assert_str_eq(one.what, jobs[i].what1);
        env.threads = 3;
        ck_assert_int_eq(k->estimate(req, &env, &three, &pb), 0);
        ck_assert_str_eq(three.what, jobs[i].what3);
        ck_assert_msg(jobs[i].smaller ? three.block_bytes < one.block_bytes
                                      : three.block_bytes == one.block_bytes,
                      "%zu: %.0f vs %.0f", i, three.block_bytes, one.block_bytes);
        /* Estimated in the work directory before any plan: the local plan, nothing written. */
        env.workdir = wd;
        ck_assert_int_eq(k->estimate(req, &env, &early, &pb), 0);
        ck_assert_str_eq(early.what, jobs[i].what3);
        snprintf(rec, sizeof rec, "%s/%s.plan", wd, k == &job_kind_rechunk ? "rechunk"
                                                                          : "groups");
        ck_assert_int_ne(access(rec, F_OK), 0);
        /* Planned on 1 thread, then estimated on 3 in its work directory: the record's. */
        env.threads = 1;
        job_plan plan;
        memset(&plan, 0, sizeof plan);
        ck_assert_msg(k->plan(req, &env, wd, &plan, err, sizeof err) == 0, "%s", err);
        k->release(plan.state);
        ck_assert_int_eq(access(rec, F_OK), 0);
        env.threads = 3;
        ck_assert_int_eq(k->estimate(req, &env, &resumed, &pb), 0);
        ck_assert_str_eq(resumed.what, jobs[i].what1);
        ck_assert(resumed.block_bytes == one.block_bytes);
        ck_assert(resumed.state_bytes == one.state_bytes);
        /* At submit (no work directory): the local plan again. */
        env.workdir = NULL;
        ck_assert_int_eq(k->estimate(req, &env, &resumed, &pb), 0);
        ck_assert_str_eq(resumed.what, jobs[i].what3);
        env.threads = 2;
        k->req_free(req);
        json_decref(b);
        rm_tree(wd);
    }
    job_stack_set_band_bytes(0);
}
END_TEST

/* ---- copies of frames that changed ---------------------------------------------------- */

static double other_value(long x, long y, long z)
{
    return 255.0 - gen_value(x, y, z);
}

/* Replaces frame z of "gen" (gendir/gen_00z.fits) by one of other_value, renamed over it,
 * and waits out the catalog's identity check interval (a second). */
static void replace_gen_frame(long z)
{
    double *v = malloc(sizeof(double) * GEN_NX * GEN_NY);
    for (long y = 0; y < GEN_NY; y++)
        for (long x = 0; x < GEN_NX; x++)
            v[y * GEN_NX + x] = other_value(x, y, z);
    char p[128], tmp[140];
    snprintf(p, sizeof p, "%s/gen_%03ld.fits", gendir, z);
    snprintf(tmp, sizeof tmp, "%s.new", p);
    write_frame(tmp, 8, GEN_NX, GEN_NY, v);
    ck_assert_int_eq(rename(tmp, p), 0);
    free(v);
    usleep((useconds_t)(1.2e6 * tt_time_scale()));
}

/* A rechunk copy is served (dataset_profile_path: series and /zarr/{name}/profile) only
 * while the frames it was made from are the dataset's: a frame replaced with other pixels
 * makes it stale (its series read the frames, which give the new values), and so does a
 * catalog opened again (a restart) with the same name and shape on other frames. */
START_TEST(test_rechunk_copy_stale)
{
    char store[256], path[4096], err[256];
    check_rechunk("gen", 1, CS_U8, store, sizeof store);
    const dataset *d = ds("gen");
    ck_assert_int_eq(dataset_attach_profile(d, store), 0);
    ck_assert_int_eq(dataset_profile_path(d, path, sizeof path), 1);
    ck_assert_str_eq(path, store);
    double s[GEN_NZ];
    ck_assert_int_eq(chunkstore_read_series(store, 4, 5, s, GEN_NZ, err, sizeof err), 0);
    ck_assert_double_eq(s[3], gen_value(4, 5, 3));

    replace_gen_frame(3);
    ck_assert_int_eq(dataset_profile_path(d, path, sizeof path), 0);
    ck_assert_int_eq(stack_read_series(dataset_stack(d), 4, 5, 0, GEN_NZ, s, err, sizeof err), 0);
    ck_assert_double_eq(s[3], other_value(4, 5, 3));
    ck_assert_double_eq(s[2], gen_value(4, 5, 2));
    /* attached again (as a restart re-attaches a job's product): still stale */
    ck_assert_int_eq(dataset_attach_profile(d, store), 0);
    ck_assert_int_eq(dataset_profile_path(d, path, sizeof path), 0);
    /* a power spectrum plans from the frames, not from the stale copy */
    ck_assert_int_eq(check_power("gen", "ps_stale", 1), 2);

    /* a restart on other frames of the same name and shape */
    write_stack("oth", 8, GEN_NX, GEN_NY, GEN_NZ, other_value);
    char text[512];
    snprintf(text, sizeof text, "{\"data_roots\": [\"%s\"], \"datasets\": [{\"name\": \"gen\", "
             "\"frames\": \"%s/oth_*.fits\"}]}", gendir, gendir);
    tess_config c2;
    catalog *cat2;
    ck_assert_int_eq(config_init(&c2), 0);
    ck_assert_int_eq(config_load_text(text, &c2, err, sizeof err), 0);
    ck_assert_int_eq(catalog_open(&c2, &cat2, err, sizeof err), 0);
    const dataset *d2 = catalog_find(cat2, "gen");
    ck_assert_int_eq(dataset_attach_profile(d2, store), 0);
    ck_assert_int_eq(dataset_profile_path(d2, path, sizeof path), 0);
    catalog_free(cat2);
    config_release(&c2);
    unlink(store);
}
END_TEST

/* A reduction or a power spectrum whose frames changed between its blocks fails at its
 * end, naming the dataset, instead of merging partial results of two sets of frames. */
START_TEST(test_partials_of_changed_frames)
{
    static const job_kind *const kinds[] = {&job_kind_reduce, &job_kind_power_spectrum};
    for (int k = 0; k < 2; k++) {
        json_t *body = k == 0 ? json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "reduce",
                                          "dataset", "gen", "op", "mean", "output", "name",
                                          "mixed")
                              : json_pack("{s:s, s:s, s:{s:s}}", "type", "power_spectrum",
                                          "dataset", "gen", "output", "name", "mixed");
        char wd[64], err[256], tmp[300];
        tt_tmpdir_make(wd, sizeof wd, "sjmixed");
        snprintf(tmp, sizeof tmp, "%s/product.tmp", wd);
        job_plan plan;
        void *req = accepted_req(kinds[k], body);
        ck_assert_int_eq(kinds[k]->plan(req, &env, wd, &plan, err, sizeof err), 0);
        static const volatile int go = 0;
        ck_assert_int_eq(kinds[k]->run_block(plan.state, 0, 0, &go, err, sizeof err), 0);
        kinds[k]->release(plan.state);
        replace_gen_frame(k == 0 ? GEN_NZ - 1 : 0);
        /* resumed (as after a restart): the identity the first plan saw is kept */
        ck_assert_int_eq(kinds[k]->plan(req, &env, wd, &plan, err, sizeof err), 0);
        for (int st = 0; st < plan.nstages; st++)
            for (long b = st == 0 ? 1 : 0; b < plan.nblocks[st]; b++)
                ck_assert_int_eq(kinds[k]->run_block(plan.state, st, b, &go, err, sizeof err),
                                 0);
        job_product prod;
        err[0] = '\0';
        ck_assert_int_eq(kinds[k]->finish(plan.state, tmp, &prod, err, sizeof err), TESS_EIO);
        ck_assert_msg(strstr(err, "the files of dataset 'gen' changed while the job ran"), "%s",
                      err);
        kinds[k]->release(plan.state);
        kinds[k]->req_free(req);
        json_decref(body);
        rm_tree(wd);
    }
}
END_TEST

/* ---- recenter ------------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the finite values of v[0..n), by sorting a copy. */
static double sorted_median(const double *v, long n)
{
    double *c = malloc(sizeof(double) * (size_t)n);
    long m = 0;
    for (long i = 0; i < n; i++)
        if (isfinite(v[i]))
            c[m++] = v[i];
    qsort(c, (size_t)m, sizeof *c, cmp_d);
    double r = m % 2 ? c[m / 2] : 0.5 * (c[m / 2 - 1] + c[m / 2]);
    free(c);
    return r;
}

/* The recentring job against the definition of job_stack.h, computed here by sorting:
 * background b = median, s = 1.4826 MAD, weights I - b over I > b + 3 s.  For "gen" the
 * object is a 5x5 patch centred on (6 + 5z, 5 + 3z) over a texture of 0..49: its
 * centroid must land within half a pixel of that (a plain intensity centroid, which the
 * job used, was dragged towards the middle of the frame by the texture). */
static void check_recenter(const char *name, long w, long h)
{
    const dataset *d = ds(name);
    char body[256];
    snprintf(body, sizeof body,
             "{\"type\": \"recenter\", \"dataset\": \"%s\", \"size\": [%ld, %ld], "
             "\"output\": {\"name\": \"rc_%s\"}}",
             name, w, h, name);
    char path[256], file[64];
    snprintf(file, sizeof file, "rc_%s.fits", name);
    product_path(path, sizeof path, file);
    job_product prod;
    run_job(&job_kind_recenter, body, path, &prod, NULL);
    double *cube = read_cube(d);
    /* The ORIGINS table. */
    fitsfile *f = NULL;
    int st = 0;
    fits_open_file(&f, path, READONLY, &st);
    fits_movnam_hdu(f, BINARY_TBL, "ORIGINS", 0, &st);
    long nrows = 0;
    fits_get_num_rows(f, &nrows, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(nrows, d->nz);
    long *x0 = malloc(sizeof(long) * (size_t)d->nz), *y0 = malloc(sizeof(long) * (size_t)d->nz);
    double *cxs = malloc(sizeof(double) * (size_t)d->nz), *cys = malloc(sizeof(double) * (size_t)d->nz);
    fits_read_col(f, TLONG, 2, 1, 1, d->nz, NULL, x0, NULL, &st);
    fits_read_col(f, TLONG, 3, 1, 1, d->nz, NULL, y0, NULL, &st);
    fits_read_col(f, TDOUBLE, 4, 1, 1, d->nz, NULL, cxs, NULL, &st);
    fits_read_col(f, TDOUBLE, 5, 1, 1, d->nz, NULL, cys, NULL, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    long npx = d->nx * d->ny;
    double *dev = malloc(sizeof(double) * (size_t)npx);
    for (long z = 0; z < d->nz; z++) {
        const double *fr = cube + z * npx;
        double b = sorted_median(fr, npx);
        for (long i = 0; i < npx; i++)
            dev[i] = fabs(fr[i] - b);
        double t = b + 3.0 * 1.4826 * sorted_median(dev, npx);
        double si = 0, sx = 0, sy = 0;
        for (int pass = 0; pass < 2 && !(si > 0); pass++) {
            double lim = pass ? b : t;
            si = sx = sy = 0;
            for (long y = 0; y < d->ny; y++)
                for (long x = 0; x < d->nx; x++) {
                    double v = fr[y * d->nx + x];
                    if (v > lim) {
                        si += v - b;
                        sx += (v - b) * (double)x;
                        sy += (v - b) * (double)y;
                    }
                }
        }
        ck_assert_msg(si > 0, "%s frame %ld: nothing above the background", name, z);
        ck_assert_msg(fabs(cxs[z] - sx / si) < 1e-9 * d->nx && fabs(cys[z] - sy / si) < 1e-9 * d->ny,
                      "%s frame %ld: centroid (%.6f, %.6f), expected (%.6f, %.6f)", name, z,
                      cxs[z], cys[z], sx / si, sy / si);
        if (strcmp(name, "gen") == 0)
            ck_assert_msg(fabs(cxs[z] - (6 + 5 * z)) < 0.5 && fabs(cys[z] - (5 + 3 * z)) < 0.5,
                          "gen frame %ld: centroid (%.3f, %.3f), the patch is centred on (%ld, "
                          "%ld)", z, cxs[z], cys[z], 6 + 5 * z, 5 + 3 * z);
        long ex = (long)(sx / si) - w / 2, ey = (long)(sy / si) - h / 2;
        ex = ex < 0 ? 0 : ex > d->nx - w ? d->nx - w : ex;
        ey = ey < 0 ? 0 : ey > d->ny - h ? d->ny - h : ey;
        ck_assert_msg(x0[z] == ex && y0[z] == ey, "%s frame %ld: origin (%ld,%ld), expected (%ld,%ld)",
                      name, z, x0[z], y0[z], ex, ey);
        long nx, ny;
        double *crop = tt_fits_plane(path, z, &nx, &ny);
        ck_assert_int_eq(nx, w);
        ck_assert_int_eq(ny, h);
        for (long y = 0; y < h; y++)
            for (long x = 0; x < w; x++)
                EXPECT(crop[y * w + x] == fr[(ey + y) * d->nx + ex + x], "crop %ld (%ld,%ld)", z,
                       x, y);
        free(crop);
    }
    free(x0);
    free(y0);
    free(cxs);
    free(cys);
    free(dev);
    free(cube);
    unlink(path);
}

START_TEST(test_recenter)
{
    check_recenter("gen", 15, 9);
    /* 16-bit PNG frames hold values past 32767: the product keeps them (uint16 with BZERO
     * 32768; they were written as int16 and wrapped). */
    check_recenter("genpng16", 15, 9);
    check_recenter("m13", 400, 300);
    check_recenter("l1448_13co", 40, 30);
}
END_TEST

/* ---- reduce -------------------------------------------------------------------------- */

static double ref_reduce(const char *op, const double *v, long n, long stride)
{
    long c = 0;
    double s = 0, mn = INFINITY, mx = -INFINITY;
    for (long i = 0; i < n; i++) {
        double x = v[i * stride];
        if (isnan(x))
            continue;
        c++;
        s += x;
        mn = fmin(mn, x);
        mx = fmax(mx, x);
    }
    if (strcmp(op, "sum") == 0)
        return s;
    if (c == 0)
        return NAN;
    if (strcmp(op, "mean") == 0)
        return s / c;
    if (strcmp(op, "min") == 0)
        return mn;
    if (strcmp(op, "max") == 0)
        return mx;
    double m = s / c, q = 0;
    for (long i = 0; i < n; i++)
        if (!isnan(v[i * stride]))
            q += (v[i * stride] - m) * (v[i * stride] - m);
    return sqrt(q / c);
}

static void check_reduce(const char *name, const char *op, const char *axis)
{
    const dataset *d = ds(name);
    char body[256], out[64];
    snprintf(out, sizeof out, "r_%s_%s_%s", name, op, axis);
    snprintf(body, sizeof body,
             "{\"type\": \"reduce\", \"dataset\": \"%s\", \"op\": \"%s\", \"axis\": \"%s\", "
             "\"output\": {\"name\": \"%s\"}}",
             name, op, axis, out);
    char path[256], file[80];
    snprintf(file, sizeof file, "%s.fits", out);
    product_path(path, sizeof path, file);
    job_product prod;
    run_job(&job_kind_reduce, body, path, &prod, NULL);
    ck_assert_str_eq(prod.dataset, out);
    double *cube = read_cube(d);
    long nx, ny;
    double *img = tt_fits_plane(path, 0, &nx, &ny);
    long npix = d->nx * d->ny;
    if (strcmp(axis, "z") == 0) {
        ck_assert_int_eq(nx, d->nx);
        ck_assert_int_eq(ny, d->ny);
        for (long i = 0; i < npix; i++) {
            double r = ref_reduce(op, cube + i, d->nz, npix);
            EXPECT((isnan(r) && isnan(img[i])) || fabs(img[i] - r) <= 1e-12 * (1 + fabs(r)),
                          "%s %s z pixel %ld: %.17g vs %.17g", name, op, i, img[i], r);
        }
    } else {
        ck_assert_int_eq(nx, d->nz);
        ck_assert_int_eq(ny, 1);
        for (long z = 0; z < d->nz; z++) {
            double r = ref_reduce(op, cube + z * npix, npix, 1);
            EXPECT((isnan(r) && isnan(img[z])) || fabs(img[z] - r) <= 1e-11 * (1 + fabs(r)),
                          "%s %s xy plane %ld: %.17g vs %.17g", name, op, z, img[z], r);
        }
    }
    free(img);
    free(cube);
    unlink(path);
}

START_TEST(test_reduce_all)
{
    static const char *const ops[] = {"mean", "sum", "min", "max", "std"};
    static const char *const names[] = {"l1448_13co", "gennan", "gen"};
    for (int n = 0; n < 3; n++)
        for (int o = 0; o < 5; o++) {
            check_reduce(names[n], ops[o], "z");
            check_reduce(names[n], ops[o], "xy");
        }
    check_reduce("m13", "mean", "z");
    check_reduce("m13", "std", "xy");
}
END_TEST

/* ---- reduce over HTTP and as a job: one file ---------------------------------------- */

static tserver *srv;
static char base[64];
static char jobsdir[64];

/* A server on port 0 over this fixture's datasets, with a job runner and 4 worker threads
 * (so that GET .../reduce folds its z-ranges on helper threads). */
static void start_server(void)
{
    char err[512];
    tt_tmpdir_make(jobsdir, sizeof jobsdir, "sjjobs");
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof err), 0);
    cfg.threads = 4;
    cfg.jobs_dir = strdup(jobsdir);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof err) == 0, "%s", err);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", tserver_port(srv));
}

static void stop_server(void)
{
    tserver_stop(srv, 5);
    srv = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", jobsdir);
    ck_assert_int_eq(system(cmd), 0);
}

static tt_resp get_ok(const char *path)
{
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body ? r.body : "");
    return r;
}

/* POSTs a reduce job, waits for it to succeed and returns GET /api/v1/jobs/{id}/result. */
static tt_resp job_result(const char *name, const char *op, const char *axis, const char *out)
{
    char body[256], path[96];
    snprintf(body, sizeof body,
             "{\"type\": \"reduce\", \"dataset\": \"%s\", \"op\": \"%s\", \"axis\": \"%s\", "
             "\"output\": {\"name\": \"%s\"}}", name, op, axis, out);
    tt_resp r = tt_fetch(base, "POST", "/api/v1/jobs", body, strlen(body),
                         "Content-Type: application/json");
    ck_assert_msg(r.status == 202, "POST %s: %ld %s", body, r.status, r.body ? r.body : "");
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(j);
    char id[32];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    tt_resp_free(&r);
    snprintf(path, sizeof path, "/api/v1/jobs/%s", id);
    double t0 = tt_now_s();
    for (;;) {
        r = get_ok(path);
        j = json_loads(r.body, 0, &je);
        ck_assert_ptr_nonnull(j);
        const char *st = json_string_value(json_object_get(j, "state"));
        int running = strcmp(st, "queued") == 0 || strcmp(st, "running") == 0;
        ck_assert_msg(running || strcmp(st, "succeeded") == 0, "job %s: %s", body, r.body);
        json_decref(j);
        tt_resp_free(&r);
        if (!running)
            break;
        ck_assert_msg(tt_now_s() - t0 < 60 * tt_time_scale(), "job %s did not end", body);
        usleep(20000);
    }
    snprintf(path, sizeof path, "/api/v1/jobs/%s/result", id);
    return get_ok(path);
}

/* The primary header of an in-memory FITS file: its cards before END (80 characters
 * each, concatenated, not NUL-terminated); *n = their count. */
static const char *fits_cards(const tt_resp *r, int *n)
{
    for (size_t i = 0; i + 80 <= r->len; i += 80)
        if (memcmp(r->body + i, "END     ", 8) == 0) {
            *n = (int)(i / 80);
            return r->body;
        }
    ck_abort_msg("no END card in %zu bytes", r->len);
    return NULL;
}

/* The card of `key` in the header, or NULL. */
static const char *find_card(const char *cards, int n, const char *key)
{
    char k[9];
    snprintf(k, sizeof k, "%-8s", key);
    for (int i = 0; i < n; i++)
        if (memcmp(cards + (size_t)i * 80, k, 8) == 0)
            return cards + (size_t)i * 80;
    return NULL;
}

/* 1 when the doubles are the same bits or both NaN. */
static int same_value(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* GET .../reduce?op=OP&axis=z&format=fits and the reduce job's product: every card the
 * same, in the same order (no card must differ: neither writes DATE, a time or a job
 * id), and every pixel the same bits.  The header follows zreduce_header: the WCS of axes
 * 1 and 2 and no card of axis 3, REDUCEOP and REDSRC, no SPECSYS. */
static void check_same_z(const char *name, const char *op)
{
    char path[160], out[64];
    snprintf(path, sizeof path, "/api/v1/datasets/%s/reduce?op=%s&axis=z&format=fits", name, op);
    snprintf(out, sizeof out, "hz_%s_%s", name, op);
    tt_resp h = get_ok(path), j = job_result(name, op, "z", out);
    int nh, nj;
    const char *ch = fits_cards(&h, &nh), *cj = fits_cards(&j, &nj);
    for (int i = 0; i < nh && i < nj; i++)
        ck_assert_msg(memcmp(ch + (size_t)i * 80, cj + (size_t)i * 80, 80) == 0,
                      "%s: card %d differs:\n  GET: %.80s\n  job: %.80s", path, i,
                      ch + (size_t)i * 80, cj + (size_t)i * 80);
    ck_assert_msg(nh == nj, "%s: %d cards over HTTP, %d in the job's product", path, nh, nj);
    char want[81];
    snprintf(want, sizeof want, "REDUCEOP= '%-8s'", op);
    const char *c = find_card(ch, nh, "REDUCEOP");
    ck_assert_msg(c && memcmp(c, want, strlen(want)) == 0, "%s: REDUCEOP %.80s", path,
                  c ? c : "(none)");
    c = find_card(ch, nh, "REDSRC");
    snprintf(want, sizeof want, "REDSRC  = '%s", name);
    ck_assert_msg(c && memcmp(c, want, strlen(want)) == 0, "%s: REDSRC %.80s", path,
                  c ? c : "(none)");
    static const char *const gone[] = {"CTYPE3", "CRVAL3", "CDELT3", "CRPIX3", "CUNIT3",
                                       "WCSAXES", "NAXIS3", "SPECSYS", "BSCALE", "BZERO",
                                       "HISTORY", "EXPTIME"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        ck_assert_msg(!find_card(ch, nh, gone[i]), "%s keeps %s", path, gone[i]);
    if (strcmp(name, "l1448_13co") == 0) {
        static const char *const kept[] = {"CTYPE1", "CTYPE2", "CRVAL1", "CRVAL2", "CRPIX1",
                                           "CRPIX2", "CDELT1", "CDELT2", "CUNIT1", "CUNIT2",
                                           "LONPOLE", "LATPOLE"};
        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
            ck_assert_msg(find_card(ch, nh, kept[i]), "%s drops %s", path, kept[i]);
    }
    if (strcmp(name, "m13") == 0)
        ck_assert_msg(find_card(ch, nh, "INSTRUME") && find_card(ch, nh, "DATE-OBS"),
                      "%s drops INSTRUME or DATE-OBS", path);
    const dataset *d = ds(name);
    long hx, hy, jx, jy;
    double *vh = tt_fits_mem_read(h.body, h.len, 1, &hx, &hy);
    double *vj = tt_fits_mem_read(j.body, j.len, 1, &jx, &jy);
    ck_assert_int_eq(hx, d->nx);
    ck_assert_int_eq(hy, d->ny);
    ck_assert_int_eq(jx, d->nx);
    ck_assert_int_eq(jy, d->ny);
    for (long i = 0; i < hx * hy; i++)
        EXPECT(same_value(vh[i], vj[i]), "%s pixel %ld: GET %.17g, job %.17g", path, i, vh[i],
               vj[i]);
    free(vh);
    free(vj);
    tt_resp_free(&h);
    tt_resp_free(&j);
}

/* GET .../reduce?op=OP&axis=xy&format=npy (little-endian float64, one per plane) and the
 * reduce job's nz x 1 product: every value the same bits. */
static void check_same_xy(const char *name, const char *op)
{
    char path[160], out[64];
    snprintf(path, sizeof path, "/api/v1/datasets/%s/reduce?op=%s&axis=xy&format=npy", name, op);
    snprintf(out, sizeof out, "hxy_%s_%s", name, op);
    tt_resp h = get_ok(path), j = job_result(name, op, "xy", out);
    const dataset *d = ds(name);
    ck_assert_msg(h.len > 10 && memcmp(h.body, "\x93NUMPY\x01", 7) == 0, "%s: not NPY 1.0", path);
    size_t hl = (size_t)(unsigned char)h.body[8] | (size_t)(unsigned char)h.body[9] << 8;
    ck_assert_msg(strstr(h.body + 10, "'<f8'") != NULL, "%s: not <f8", path);
    ck_assert_int_eq(h.len, 10 + hl + 8 * (size_t)d->nz);
    long jx, jy;
    double *vj = tt_fits_mem_read(j.body, j.len, 1, &jx, &jy);
    ck_assert_int_eq(jx, d->nz);
    ck_assert_int_eq(jy, 1);
    for (long z = 0; z < d->nz; z++) {
        double v;
        memcpy(&v, h.body + 10 + hl + 8 * (size_t)z, 8);
        ck_assert_msg(same_value(v, vj[z]), "%s plane %ld: GET %.17g, job %.17g", path, z, v,
                      vj[z]);
    }
    free(vj);
    tt_resp_free(&h);
    tt_resp_free(&j);
}

START_TEST(test_reduce_http_equals_job)
{
    start_server();
    static const char *const ops[] = {"mean", "sum", "min", "max", "std"};
    /* l1448_13co: a float32 cube with NaN, 53 planes in 14 ranges (the double mode);
     * m13: five 16-bit frames (the exact integer mode); genlong: 300 int16 frames in 16
     * ranges; gennan: float frames with NaN. */
    for (int o = 0; o < 5; o++) {
        check_same_z("l1448_13co", ops[o]);
        check_same_z("m13", ops[o]);
        check_same_xy("l1448_13co", ops[o]);
        check_same_xy("m13", ops[o]);
    }
    static const char *const more[] = {"genlong", "gennan", "gen"};
    for (int n = 0; n < 3; n++)
        for (int o = 0; o < 5; o += 4) {   /* mean and std */
            check_same_z(more[n], ops[o]);
            check_same_xy(more[n], ops[o]);
        }
    stop_server();
}
END_TEST

/* ---- validation and cancel ----------------------------------------------------------- */

static void expect_problem(const job_kind *k, const char *body_text, int status, const char *field)
{
    json_error_t je;
    json_t *body = json_loads(body_text, 0, &je);
    ck_assert(body != NULL);
    job_problem pb;
    memset(&pb, 0, sizeof pb);
    void *req = NULL;
    ck_assert_msg(jobkind_parse(k, body, &env, 0, &req, &pb) == -1, "accepted %s", body_text);
    ck_assert(req == NULL);
    ck_assert_msg(pb.status == status && strcmp(pb.field, field) == 0,
                  "%s: got %d '%s' (%s), expected %d '%s'", body_text, pb.status, pb.field,
                  pb.detail, status, field);
    ck_assert(pb.detail[0] != 0);
    json_decref(body);
}

START_TEST(test_validation)
{
    expect_problem(&job_kind_rechunk, "{\"type\":\"rechunk\"}", 400, "dataset");
    expect_problem(&job_kind_rechunk, "{\"type\":\"rechunk\",\"dataset\":7}", 400, "dataset");
    expect_problem(&job_kind_rechunk, "{\"type\":\"rechunk\",\"dataset\":\"nope\"}", 404, "dataset");
    expect_problem(&job_kind_rechunk, "{\"type\":\"rechunk\",\"dataset\":\"horsehead\"}", 422,
                   "dataset");
    expect_problem(&job_kind_rechunk, "{\"type\":\"rechunk\",\"dataset\":\"m13\",\"extra\":1}", 400,
                   "extra");
    expect_problem(&job_kind_power_spectrum, "{\"type\":\"power_spectrum\",\"dataset\":\"m13\"}",
                   400, "output");
    expect_problem(&job_kind_power_spectrum,
                   "{\"type\":\"power_spectrum\",\"dataset\":\"m13\",\"output\":{\"name\":\"m13\"}}",
                   409, "output.name");
    expect_problem(&job_kind_power_spectrum,
                   "{\"type\":\"power_spectrum\",\"dataset\":\"m13\",\"output\":{\"name\":\"a b\"}}",
                   400, "output.name");
    expect_problem(&job_kind_power_spectrum,
                   "{\"type\":\"power_spectrum\",\"dataset\":\"m13\",\"output\":{\"name\":\"x\","
                   "\"fmt\":1}}",
                   400, "output.fmt");
    expect_problem(&job_kind_recenter,
                   "{\"type\":\"recenter\",\"dataset\":\"gen\",\"output\":{\"name\":\"x\"}}", 400,
                   "size");
    expect_problem(&job_kind_recenter,
                   "{\"type\":\"recenter\",\"dataset\":\"gen\",\"size\":[0,3],\"output\":{\"name\":"
                   "\"x\"}}",
                   400, "size");
    expect_problem(&job_kind_recenter,
                   "{\"type\":\"recenter\",\"dataset\":\"gen\",\"size\":[38,3],\"output\":{\"name\":"
                   "\"x\"}}",
                   422, "size");
    expect_problem(&job_kind_reduce,
                   "{\"type\":\"reduce\",\"dataset\":\"gen\",\"op\":\"median\",\"output\":{\"name\":"
                   "\"x\"}}",
                   400, "op");
    expect_problem(&job_kind_reduce,
                   "{\"type\":\"reduce\",\"dataset\":\"gen\",\"op\":\"sum\",\"axis\":\"x\","
                   "\"output\":{\"name\":\"x\"}}",
                   400, "axis");
}
END_TEST

/* ---- ingest ----------------------------------------------------------------------- */

/* Everything read of dataset d: every plane, the xz and yz cuts through the middle, the
 * series of every pixel, the mean and std along z and the mean of each plane. */
static double *read_all(const dataset *d, size_t *n)
{
    long nx = d->nx, ny = d->ny, nz = d->nz;
    size_t np = (size_t)(nx * ny);
    *n = np * (size_t)nz * 2 + (size_t)((nx + ny) * nz) + 2 * np + (size_t)nz;
    double *v = malloc(sizeof(double) * *n), *o = v;
    char err[256];
    ck_assert_ptr_nonnull(v);
    for (long z = 0; z < nz; z++, o += np)
        ck_assert_msg(dataset_read_region(d, z, 0, 0, nx, ny, o, err, sizeof err) == 0, "%s", err);
    stack *st = dataset_stack(d);
    ck_assert_int_eq(stack_read_xz(st, ny / 2, 0, 0, nx, nz, o, err, sizeof err), 0);
    o += nx * nz;
    ck_assert_int_eq(stack_read_yz(st, nx / 2, 0, 0, ny, nz, o, err, sizeof err), 0);
    o += ny * nz;
    for (long y = 0; y < ny; y++)
        for (long x = 0; x < nx; x++, o += nz)
            ck_assert_int_eq(stack_read_series(st, x, y, 0, nz, o, err, sizeof err), 0);
    for (int op = 0; op < 2; op++, o += np) {
        stack_zpart *part = NULL;
        ck_assert_int_eq(stack_zreduce(st, op ? STACK_ZOP_STD : STACK_ZOP_MEAN, 0, nz, 0, NULL,
                                       &part, err, sizeof err), 0);
        stack_zpart_result(part, o);
        stack_zpart_free(part);
    }
    for (long z = 0; z < nz; z++, o++)
        if (stack_reduce_plane(st, z, STACK_ZOP_MEAN, o, err, sizeof err) == 1)
            *o = -12345;   /* a plane of another kind: counted as such */
    return v;
}

/* Ingests dataset `name` (restarted and repeated blocks: run_job), attaches the store as
 * the runner does, and checks that every read gives exactly the values it gave from the
 * frames, now from the store (another reader); then that a changed frame makes the
 * dataset read its frames again. */
static void check_ingest(const char *name)
{
    const dataset *d = ds(name);
    size_t n, n2;
    double *before = read_all(d, &n);
    stack *frames = dataset_stack(d);
    char body[256], store[256];
    snprintf(body, sizeof body, "{\"type\": \"ingest\", \"dataset\": \"%s\"}", name);
    snprintf(store, sizeof store, "%s/ingest_%s.fits", gendir, name);
    job_product prod;
    ck_assert_int_eq(run_job(&job_kind_ingest, body, store, &prod, NULL), d->nz);
    ck_assert_str_eq(prod.attach_to, name);
    ck_assert_int_eq(dataset_attach_profile(d, store), 0);
    ck_assert_ptr_ne(dataset_stack(d), frames);
    double *after = read_all(d, &n2);
    ck_assert_uint_eq(n, n2);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(same_value(before[i], after[i]), "%s: value %zu: %.17g, then %.17g",
                      name, i, before[i], after[i]);
    free(before);
    free(after);
}

START_TEST(test_ingest)
{
    check_ingest("genpng");
    check_ingest("genpng16");
    check_ingest("gen");
    check_ingest("gennan");
    /* a frame rewritten (its identity changes the version): the frames are read again */
    const dataset *d = ds("genpng");
    stack *store = dataset_stack(d);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.new' && touch -d '2001-01-01' '%s.new' && "
             "mv '%s.new' '%s'", d->paths[1], d->paths[1], d->paths[1], d->paths[1], d->paths[1]);
    ck_assert_int_eq(system(cmd), 0);
    sleep(1);   /* the version is rechecked at most once a second */
    ck_assert_ptr_ne(dataset_stack(d), store);
    /* a cube is read in place already; a cancelled block writes nothing more */
    expect_problem(&job_kind_ingest, "{\"type\": \"ingest\", \"dataset\": \"l1448_13co\"}",
                   422, "dataset");
    json_t *b = json_pack("{s:s, s:s}", "type", "ingest", "dataset", "genpng16");
    char wd[64], err[256];
    tt_tmpdir_make(wd, sizeof wd, "sjingest");
    job_plan plan;
    void *req = accepted_req(&job_kind_ingest, b);
    ck_assert_int_eq(job_kind_ingest.plan(req, &env, wd, &plan, err, sizeof err), 0);
    static const volatile int cancel = 1;
    ck_assert_int_eq(job_kind_ingest.run_block(plan.state, 0, 0, &cancel, err, sizeof err),
                     TESS_ECANCELED);
    job_kind_ingest.release(plan.state);
    job_kind_ingest.req_free(req);
    json_decref(b);
    rm_tree(wd);
}
END_TEST

START_TEST(test_cancel)
{
    json_t *body = json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "reduce", "dataset", "l1448_13co",
                             "op", "mean", "output", "name", "cancelled");
    char wd[64], err[256];
    tt_tmpdir_make(wd, sizeof wd, "sjcancel");
    job_plan plan;
    void *req = accepted_req(&job_kind_reduce, body);
    ck_assert_int_eq(job_kind_reduce.plan(req, &env, wd, &plan, err, sizeof err), 0);
    ck_assert_int_ge(plan.nblocks[0], 10);
    static const volatile int cancel = 1;
    ck_assert_int_eq(job_kind_reduce.run_block(plan.state, 0, 0, &cancel, err, sizeof err),
                     TESS_ECANCELED);
    job_kind_reduce.release(plan.state);
    job_kind_reduce.req_free(req);
    json_decref(body);
    body = json_pack("{s:s, s:s}", "type", "rechunk", "dataset", "l1448_13co");
    req = accepted_req(&job_kind_rechunk, body);
    ck_assert_int_eq(job_kind_rechunk.plan(req, &env, wd, &plan, err, sizeof err), 0);
    ck_assert_int_eq(job_kind_rechunk.run_block(plan.state, 0, 1, &cancel, err, sizeof err),
                     TESS_ECANCELED);
    job_kind_rechunk.release(plan.state);
    job_kind_rechunk.req_free(req);
    json_decref(body);
    rm_tree(wd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stackjobs");
    const struct { const char *name; const TTest *t; } tests[] = {
        {"chunkstore_order", test_chunkstore_order},
        {"chunkstore_errors", test_chunkstore_errors},
        {"rechunk_l1448", test_rechunk_l1448},
        {"rechunk_m13", test_rechunk_m13},
        {"rechunk_gen", test_rechunk_gen},
        {"rechunk_staged", test_rechunk_staged},
        {"power_l1448", test_power_l1448},
        {"power_m13_gen", test_power_m13_gen},
        {"power_from_profile", test_power_from_profile},
        {"resumed_on_other_threads", test_resumed_on_other_threads},
        {"plan_record_missing_or_bad", test_plan_record_missing_or_bad},
        {"estimate_of_resumed_plan", test_estimate_of_resumed_plan},
        {"rechunk_copy_stale", test_rechunk_copy_stale},
        {"partials_of_changed_frames", test_partials_of_changed_frames},
        {"recenter", test_recenter},
        {"reduce_all", test_reduce_all},
        {"reduce_http_equals_job", test_reduce_http_equals_job},
        {"validation", test_validation},
        {"cancel", test_cancel},
        {"ingest", test_ingest},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        TCase *tc = tcase_create(tests[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, tests[i].t);
        suite_add_tcase(s, tc);
    }
    return tt_run_suite(s);
}
