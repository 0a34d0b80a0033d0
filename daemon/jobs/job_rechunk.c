/* The "rechunk" job type (job_stack.h): a cube or stack as a chunk store, over engine/cube. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/wmap.h"
#include "engine/cube/transpose.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rechunk: a band of CUBE_TILE rows across all planes up to this size is gathered
 * straight from the planes (cube_transpose_rows) into its place in the store (see below). */
#define RECHUNK_BAND_BYTES (256L << 20)

static long band_bytes_limit = RECHUNK_BAND_BYTES;   /* job_stack_set_band_bytes */

void job_stack_set_band_bytes(long bytes)
{
    band_bytes_limit = bytes > 0 ? bytes : RECHUNK_BAND_BYTES;
}

/* Rechunk is one stage, writing the store in place through mappings (wmap.h), each block
 * idempotent.  Bands ("inmem"), when a band of CUBE_TILE rows across all planes fits in
 * RECHUNK_BAND_BYTES: a block reads the planes in groups of 64 (each plane of a group
 * opened once per block, 8-bit frames read in place from the mapping, others converted)
 * and transposes tile row by tile row into its band's series (a group's values of one
 * pixel are 64 contiguous bytes).  Otherwise groups of planes (transpose.h, stage A with
 * the store as destination), each in a part per worker (cube_transpose.split): the parts
 * of a group hold its planes once between them and each writes their values into the
 * series of its own share of the tile rows; the store is whole when all groups are
 * done.  Parts, not a group per worker: the frames held at once halve (250 PNG frames of
 * 1000 x 1000 on 2 workers: 84 MB peak anonymous against 141, 25k minor faults against
 * 37k), and fit the PNG buffer pool (pngframe.h) from the second group on. */
typedef struct rechunk_state {
    cube_transpose t;
    int inmem;                /* 1: blocks are bands of rows; 0: groups of planes */
    long band_rows, nbands;   /* inmem: rows per block (a multiple of CUBE_TILE), blocks */
    char store_path[PATH_MAX];
    char name[128];
} rechunk_state;

/* What the stack's frame cache keeps: 256 MB of decoded frames (engine/image/stack_int.h)
 * and 64 open frames (the catalog's bound for a dataset).  A stack of PNG frames past
 * either would be decoded again for every band of the one-stage plan (4 times at 300
 * frames of 500 x 500, 8 at 2000 of 1000 x 1000 on 2 threads), so it takes the plan of
 * groups, which decodes every frame once. */
#define RECHUNK_DECODED_CACHE_BYTES (256.0 * 1048576.0)
#define RECHUNK_CACHED_FRAMES 64

/* 1 when a band of CUBE_TILE rows across all planes of d fits the band limit (the
 * one-stage plan), with *band_rows: bands as large as the limit allows, but at least two
 * per worker thread. */
static int inmem_rows(const dataset *d, int threads, long *band_rows)
{
    long per_tile_row = d->nx * d->nz * chunkstore_esize(jobc_choose_dtype(d)) * CUBE_TILE;
    if (per_tile_row > band_bytes_limit)
        return 0;
    double samples = (double)d->nx * (double)d->ny * (double)d->nz *
                     (double)chunkstore_esize(jobc_choose_dtype(d));
    if (d->npaths > 1 &&
        (samples > RECHUNK_DECODED_CACHE_BYTES || d->npaths > RECHUNK_CACHED_FRAMES) &&
        frame_is_png(d->paths[0]) && !dataset_ingested(d))
        return 0;
    long tile_rows = (d->ny + CUBE_TILE - 1) / CUBE_TILE;
    long want = jobc_lmax(2, 2L * threads);
    long trows = jobc_lmax(1, jobc_lmin(band_bytes_limit / per_tile_row,
                                        (tile_rows + want - 1) / want));
    *band_rows = trows * CUBE_TILE;
    return 1;
}

/* Planes a group holds (the plan of groups): every pass over the store writes that many
 * values side by side into each series, so fewer, larger groups write each cache line of
 * the store fewer times (16 planes: 16 passes over a 250 MB store at 250 frames of
 * 1000 x 1000, each line read for ownership and written back once per pass).  At most
 * RECHUNK_GROUP_PLANES planes and RECHUNK_GROUP_BYTES of their values (one plane at
 * least), fewer when the stack has fewer than two groups' worth a worker: the frames a
 * block holds stay the same from RECHUNK_GROUP_PLANES * 2 * threads frames up. */
#define RECHUNK_GROUP_PLANES 64
#define RECHUNK_GROUP_BYTES (64L << 20)
#define RECHUNK_SPLIT_MAX 16   /* parts of a group (cube_transpose.split) at most */

long job_rechunk_group_planes(const dataset *d, int threads)
{
    long plane = d->nx * d->ny * chunkstore_esize(jobc_choose_dtype(d));
    long want = 2L * jobc_lmax(1, threads);
    long cap = jobc_lmin(RECHUNK_GROUP_PLANES, RECHUNK_GROUP_BYTES / jobc_lmax(1, plane));
    return jobc_lmax(1, jobc_lmin(cap, (d->nz + want - 1) / want));
}

void job_stack_group_set(cube_transpose *t, long g, long split)
{
    t->hold = t->g = g;
    t->rowwise = 1;
    t->ngroups = (t->nz + t->g - 1) / t->g;
    t->split = split;
}

int job_stack_group_valid(const dataset *d, long g, long split)
{
    long tile_rows = (d->ny + CUBE_TILE - 1) / CUBE_TILE;
    return g >= 1 && g <= RECHUNK_GROUP_PLANES && g <= d->nz && split >= 1 &&
           split <= RECHUNK_SPLIT_MAX && split <= tile_rows;
}

void job_stack_group_plan(cube_transpose *t, const dataset *d, int threads)
{
    job_stack_group_set(t, job_rechunk_group_planes(d, threads),
                        jobc_lmin(RECHUNK_SPLIT_MAX,
                                  jobc_lmin(threads, (d->ny + CUBE_TILE - 1) / CUBE_TILE)));
}

static int rechunk_parse(const json_t *body, const job_env *env, int accepted, void **req,
                         job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", NULL};
    return jobc_parse(body, env, accepted, known, NULL, 0, req, pb);
}

static void rechunk_release(void *state)
{
    rechunk_state *s = state;
    if (!s)
        return;
    cube_transpose_release(&s->t);
    free(s);
}

/* Whether v (rechunk.plan's "INMEM BAND_ROWS G SPLIT") is a plan of d: bands of whole
 * tile rows within the cube, or a plan of groups job_stack_group_valid allows. */
static int rechunk_record_valid(const dataset *d, const long *v)
{
    long tile_rows = (d->ny + CUBE_TILE - 1) / CUBE_TILE;
    return v[0] == 1 ? v[1] >= CUBE_TILE && v[1] % CUBE_TILE == 0 &&
                           v[1] <= tile_rows * CUBE_TILE
                     : v[0] == 0 && job_stack_group_valid(d, v[2], v[3]);
}

/* The plan's shape (bands of rows, or groups of planes in parts), decided for `threads`
 * workers, the band limit and whether d was ingested when the job's work files are made
 * (fresh), and recorded in <workdir>/rechunk.plan ("INMEM BAND_ROWS G SPLIT",
 * jobc_plan_record): block k names another band, or another part of another group, under
 * another shape, so a runner of another thread count (a restart, a worker of a cluster)
 * takes the recorded one.  A work directory without the record (made by a build before
 * it) is planned from this process's settings, as that build did. */
static int rechunk_shape(rechunk_state *s, const dataset *d, int threads, int fresh,
                         const char *workdir, char *err, size_t errlen)
{
    long v[4] = {0, 0, 0, 0};
    if (inmem_rows(d, threads, &v[1])) {
        v[0] = 1;
    } else {
        job_stack_group_plan(&s->t, d, threads);
        v[2] = s->t.g;
        v[3] = s->t.split;
    }
    int rc = jobc_plan_record(workdir, fresh, "rechunk", v, 4, err, errlen);
    if (rc < 0)
        return rc;
    if (!rechunk_record_valid(d, v)) {
        tess_seterr(err, errlen, "%s/rechunk.plan does not hold a plan of this dataset",
                    workdir);
        return TESS_EIO;
    }
    s->inmem = (int)v[0];
    if (s->inmem) {
        s->band_rows = v[1];
        s->nbands = (d->ny + s->band_rows - 1) / s->band_rows;
    } else {
        job_stack_group_set(&s->t, v[2], v[3]);
    }
    return 0;
}

static int rechunk_plan(const void *req, const job_env *env, const char *workdir,
                        job_plan *out, char *err, size_t errlen)
{
    const dataset *d = ((const jobc_req *)req)->d;
    rechunk_state *s = jobc_state_new(sizeof *s, err, errlen);
    if (!s)
        return TESS_ENOMEM;
    int rc;
    cube_source src;
    jobc_source(d, &src);
    rc = cube_transpose_init(&s->t, &src, 0, 0, NULL, workdir, err, errlen);
    snprintf(s->store_path, sizeof s->store_path, "%s/profile.tcs", workdir);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    int fresh = !jobc_marker_exists(workdir);
    if (!rc)
        rc = rechunk_shape(s, d, env->threads, fresh, workdir, err, errlen);
    if (!rc && !s->inmem && cube_transpose_set_dest(&s->t, s->store_path) != 0) {
        tess_seterr(err, errlen, "the work directory's name is too long");
        rc = TESS_ERANGE;
    }
    if (!rc && fresh) {
        dataset_version(d, s->t.ci.source_version, sizeof s->t.ci.source_version);
        rc = chunkstore_create(s->store_path, &s->t.ci, err, errlen);
        if (!rc)
            rc = jobc_touch_marker(workdir, err, errlen);
    }
    if (rc) {
        rechunk_release(s);
        return rc;
    }
    return jobc_plan_one_stage(out, s, s->inmem ? s->nbands
                                          : s->t.ngroups * jobc_lmax(1, s->t.split), 0);
}

/* The window of the store that band rows [y0, y1) fill: their series, written in place
 * through a mapping (engine/base/wmap.h), so a band is neither held in a buffer of its
 * own nor copied by pwrite. */
static int band_window(const rechunk_state *s, long y0, long y1, tess_wmap *m, char *err,
                       size_t errlen)
{
    const cube_transpose *t = &s->t;
    long long p0 = (long long)y0 * t->nx, np = (long long)(y1 - y0) * t->nx;
    return tess_wmap_open(s->store_path, (off_t)(CHUNKSTORE_HEADER + p0 * t->nz * t->es),
                          (size_t)(np * t->nz * t->es), 1, m, err, errlen);
}

/* One in-memory band (see RECHUNK_BAND_BYTES). */
static int rechunk_band(rechunk_state *s, long b, const volatile int *cancel, char *err,
                        size_t errlen)
{
    const cube_transpose *t = &s->t;
    long y0 = b * s->band_rows, y1 = jobc_lmin(t->ny, y0 + s->band_rows);
    tess_wmap m;
    int rc = band_window(s, y0, y1, &m, err, errlen);
    if (!rc)
        rc = cube_transpose_rows(t, y0, y1, m.p, cancel, err, errlen);
    int crc = tess_wmap_close(&m, rc ? NULL : err, rc ? 0 : errlen);
    return rc ? rc : crc;
}

static int rechunk_run(void *state, int stage, long block, const volatile int *cancel,
                       char *err, size_t errlen)
{
    rechunk_state *s = state;
    (void)stage;
    if (s->inmem)
        return rechunk_band(s, block, cancel, err, errlen);
    return cube_transpose_group(&s->t, block, cancel, err, errlen);
}

static int rechunk_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                          size_t errlen)
{
    rechunk_state *s = state;
    return jobc_product_attach(s->store_path, tmp_path, s->name, "application/octet-stream",
                               prod, err, errlen);
}

/* The store (header and every series), no staging file; a band block holds a group of 64
 * planes' tile rows and a tile row of doubles (cube_transpose_rows; its series are in the
 * store's mapping, counted as memory all the same: page cache the block fills).  The
 * bands or groups are the plan's: those recorded in env->workdir by the job's first plan
 * when it resumes (its marker made: read only, as rechunk_shape reads them; a runner of
 * fewer threads recorded larger ones: l1448_13co, groups of 27 planes on 1 thread, 9 on
 * 3), else those this process's threads give. */
static int rechunk_estimate(const void *req, const job_env *env, job_cost *c,
                            job_problem *pb)
{
    (void)pb;
    const dataset *d = ((const jobc_req *)req)->d;
    long rows = 0, hold = 0, v[4];
    char why[256];
    int inmem;
    if (env->workdir && jobc_marker_exists(env->workdir) &&
        jobc_plan_record(env->workdir, 0, "rechunk", v, 4, why, sizeof why) == 0 &&
        rechunk_record_valid(d, v)) {
        inmem = (int)v[0];
        rows = v[1];
        hold = v[2];
    } else {
        inmem = inmem_rows(d, env->threads, &rows);
        hold = job_rechunk_group_planes(d, env->threads);
    }
    jobc_transpose_cost(d, 0, inmem, 0.0, c);
    c->work_bytes = 0;   /* groups write straight into the store */
    double es = (double)chunkstore_esize(jobc_choose_dtype(d)), nx = (double)d->nx;
    double store = (double)CHUNKSTORE_HEADER + nx * (double)d->ny * (double)d->nz * es;
    if (!inmem) {
        /* a group of this job's own size: its buffers and the frames it holds (counted
         * for every block although the parts of a group share them: a worker done with
         * its part may hold the next group's while another still reads this one's) */
        double frame = jobc_frame_bytes(d);
        c->block_bytes = jobc_transpose_group_bytes(d, hold) +
                         (frame > 0.0 ? (double)hold * frame : 0.0);
        snprintf(c->what, sizeof c->what, "a group of %ld planes of %ld x %ld pixels", hold,
                 d->nx, d->ny);
    }
    if (inmem) {
        rows = jobc_lmin(rows, d->ny);
        c->block_bytes = (double)rows * nx * (double)d->nz * es + 64.0 * CUBE_TILE * nx * es
                         + CUBE_TILE * nx * 8.0;
        snprintf(c->what, sizeof c->what, "a band of %ld rows of %ld series of %ld values",
                 rows, d->nx, d->nz);
        jobc_frames_cost(d, 64, c);   /* the 64 planes it holds (cube_transpose_rows) */
    }
    c->work_bytes += store;
    c->product_bytes = store;
    return 0;
}

const job_kind job_kind_rechunk = {
    .type = "rechunk",
    .parse = rechunk_parse,
    .req_free = free,
    .req_json = jobc_req_json,
    .plan = rechunk_plan,
    .run_block = rechunk_run,
    .finish = rechunk_finish,
    .release = rechunk_release,
    .estimate = rechunk_estimate,
};
