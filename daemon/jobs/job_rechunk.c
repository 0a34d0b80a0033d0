/* The "rechunk" job type (job_stack.h): a cube or stack as a chunk store, over engine/cube. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/cube/transpose.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rechunk: a band of CUBE_TILE rows across all planes up to this size is gathered in
 * memory straight from the planes (cube_transpose_rows), with no staging file (see below). */
#define RECHUNK_BAND_BYTES (256L << 20)

static long band_bytes_limit = RECHUNK_BAND_BYTES;   /* job_stack_set_band_bytes */

void job_stack_set_band_bytes(long bytes)
{
    band_bytes_limit = bytes > 0 ? bytes : RECHUNK_BAND_BYTES;
}

/* Rechunk in one stage when a band of CUBE_TILE rows across all planes fits in
 * RECHUNK_BAND_BYTES: each block holds its band's series in memory, reads the planes in
 * groups of 64 (each plane of a group opened once per block, 8-bit frames
 * read in place from the mapping, others converted), transposes tile row by tile row
 * (a group's values of one pixel are 64 contiguous bytes of the band) and
 * writes the band with one pwrite at its fixed offset in the store (idempotent).  Larger
 * volumes go through the two-stage transpose (engine/cube/transpose.h: a staging file). */
typedef struct rechunk_state {
    cube_transpose t;
    int inmem;                /* 1: one stage of bands in memory */
    long band_rows, nbands;   /* inmem: rows per block (a multiple of CUBE_TILE), blocks */
    char store_path[PATH_MAX];
    char name[128];
} rechunk_state;

/* What the stack's frame cache keeps: 256 MB of decoded frames (engine/image/stack.c)
 * and 64 open frames (the catalog's bound for a dataset).  A stack of PNG frames past
 * either would be decoded again for every band of the one-stage plan (4 times at 300
 * frames of 500 x 500, 8 at 2000 of 1000 x 1000 on 2 threads), so it takes the two-stage
 * plan, which decodes every frame once. */
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

static int rechunk_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", NULL};
    const dataset *d;
    if (jobkind_only_fields(body, known, NULL, pb) != 0)
        return -1;
    return jobc_check_dataset(body, env, &d, pb);
}

static void rechunk_release(void *state)
{
    rechunk_state *s = state;
    if (!s)
        return;
    cube_transpose_release(&s->t);
    free(s);
}

static int rechunk_plan(const json_t *body, const job_env *env, const char *workdir,
                        job_plan *out, char *err, size_t errlen)
{
    const dataset *d;
    int rc = jobc_plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    rechunk_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    cube_source src;
    jobc_source(d, &src);
    rc = cube_transpose_init(&s->t, &src, 0, 0, NULL, workdir, err, errlen);
    snprintf(s->store_path, sizeof s->store_path, "%s/profile.tcs", workdir);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    if (!rc && inmem_rows(d, env->threads, &s->band_rows)) {
        s->inmem = 1;
        s->nbands = (d->ny + s->band_rows - 1) / s->band_rows;
    }
    if (!rc && !jobc_marker_exists(workdir)) {
        dataset_version(d, s->t.ci.source_version, sizeof s->t.ci.source_version);
        if (!s->inmem)
            rc = cube_transpose_create_files(&s->t, err, errlen);
        if (!rc)
            rc = chunkstore_create(s->store_path, &s->t.ci, err, errlen);
        if (!rc)
            rc = jobc_touch_marker(workdir, err, errlen);
    }
    if (rc) {
        rechunk_release(s);
        return rc;
    }
    if (s->inmem) {
        out->nstages = 1;
        out->nblocks[0] = s->nbands;
    } else {
        jobc_plan_stages(&s->t, out);
    }
    out->state = s;
    return 0;
}

/* One in-memory band (see RECHUNK_BAND_BYTES). */
static int rechunk_band(rechunk_state *s, long b, const volatile int *cancel, char *err,
                        size_t errlen)
{
    const cube_transpose *t = &s->t;
    long nx = t->nx, ny = t->ny, nz = t->nz;
    long y0 = b * s->band_rows, y1 = jobc_lmin(ny, y0 + s->band_rows);
    long p0 = y0 * nx, np = (y1 - y0) * nx;
    size_t es = (size_t)t->es;
    unsigned char *out = malloc((size_t)np * nz * es);
    int rc = out ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    else
        rc = cube_transpose_rows(t, y0, y1, out, cancel, err, errlen);
    if (!rc)
        rc = jobc_write_at(s->store_path, out, (size_t)np * nz * es,
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
        return cube_transpose_group(&s->t, block, cancel, err, errlen);
    const cube_transpose *t = &s->t;
    unsigned char *buf = malloc((size_t)t->band_rows * t->nx * t->nz * t->es);
    if (!buf) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    long p0, p1;
    int rc = cube_transpose_band(t, block, buf, &p0, &p1, cancel, err, errlen);
    if (!rc)
        rc = jobc_write_at(s->store_path, buf, (size_t)(p1 - p0) * t->nz * t->es,
                           (off_t)(CHUNKSTORE_HEADER + (long long)p0 * t->nz * t->es), err,
                           errlen);
    free(buf);
    return rc;
}

static int rechunk_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                          size_t errlen)
{
    rechunk_state *s = state;
    int rc = jobc_link_file(s->store_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    if (!s->inmem)
        unlink(s->t.stage_path);
    memset(prod, 0, sizeof *prod);
    snprintf(prod->attach_to, sizeof prod->attach_to, "%s", s->name);
    snprintf(prod->content_type, sizeof prod->content_type, "application/octet-stream");
    return 0;
}

/* The store (header and every series), the staging file of the two-stage plan; a block of
 * the one-stage plan holds its band's series, a group of 64 planes' tile rows and a tile
 * row of doubles (cube_transpose_rows). */
static int rechunk_estimate(const json_t *body, const job_env *env, job_cost *c,
                            job_problem *pb)
{
    const dataset *d;
    if (jobc_check_dataset(body, env, &d, pb) != 0)
        return -1;
    long rows = 0;
    int inmem = inmem_rows(d, env->threads, &rows);
    jobc_transpose_cost(d, 0, inmem, 0.0, c);
    double es = (double)chunkstore_esize(jobc_choose_dtype(d)), nx = (double)d->nx;
    double store = (double)CHUNKSTORE_HEADER + nx * (double)d->ny * (double)d->nz * es;
    if (inmem) {
        rows = jobc_lmin(rows, d->ny);
        c->block_bytes = (double)rows * nx * (double)d->nz * es + 64.0 * CUBE_TILE * nx * es
                         + CUBE_TILE * nx * 8.0;
        snprintf(c->what, sizeof c->what, "a band of %ld rows of %ld series of %ld values",
                 rows, d->nx, d->nz);
    }
    c->work_bytes += store;
    c->product_bytes = store;
    return 0;
}

const job_kind job_kind_rechunk = {"rechunk", rechunk_validate, rechunk_plan, rechunk_run,
                                   rechunk_finish, rechunk_release, rechunk_estimate};
