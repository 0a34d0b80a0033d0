/* The "reduce" job type (job_stack.h): NaN-aware reductions, over engine/image/zreduce. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/stack.h"
#include "engine/image/zreduce.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct reduce_state {
    const dataset *d;
    stack_zop op;
    zreduce_axis axis;
    long nblocks;            /* zreduce_nranges(nz): block k reduces zreduce_range k */
    char workdir[PATH_MAX];
    char name[128];
    char source[64];         /* the identity of the files the partials are of */
} reduce_state;

static int reduce_fields(const json_t *body, jobc_req *r, job_problem *pb)
{
    stack_zop opv;
    zreduce_axis axv;
    stack_zop *op = &opv;
    zreduce_axis *axis = &axv;
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
    r->op = (int)opv;
    r->axis = (int)axv;
    return 0;
}

static int reduce_parse(const json_t *body, const job_env *env, int accepted, void **req,
                        job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "op", "axis", "output", NULL};
    return jobc_parse(body, env, accepted, known, reduce_fields, 1, req, pb);
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

static int reduce_plan(const void *req, const job_env *env, const char *workdir,
                       job_plan *out, char *err, size_t errlen)
{
    (void)env;
    const jobc_req *r = req;
    const dataset *d = r->d;
    reduce_state *s = jobc_state_new(sizeof *s, err, errlen);
    if (!s)
        return TESS_ENOMEM;
    s->d = d;
    s->op = (stack_zop)r->op;
    s->axis = (zreduce_axis)r->axis;
    s->nblocks = zreduce_nranges(d->nz);
    snprintf(s->workdir, sizeof s->workdir, "%s", workdir);
    snprintf(s->name, sizeof s->name, "%s", r->output);
    int rc = jobc_source_pin(d, workdir, s->source, sizeof s->source, err, errlen);
    return jobc_plan_one_stage(out, s, s->nblocks, rc);
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
        rc = jobc_fits_create(path, CS_F32, -64, 2, naxes, NULL, list, datastart, err, errlen);
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
    int bad = jobc_source_check(d, s->source, err, errlen);
    if (bad)
        return bad;
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
                fitswrite_encode(-64, 0.0, out, be, nx * ny);
                rc = jobc_write_at(tmp_path, be, (size_t)nx * ny * 8, (off_t)ds, err, errlen);
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
    return jobc_product_dataset(NULL, tmp_path, s->name, prod, err, errlen);
}

/* Axis z: a float64 image and one partial per z-range (at most 20 bytes a pixel: counts,
 * sums or moments); a block holds its partial and a plane of doubles, finish two partials,
 * the image and its encoding.  Axis xy: nz doubles, a plane per block. */
static int reduce_estimate(const void *req, const job_env *env, job_cost *c,
                           job_problem *pb)
{
    (void)env;
    (void)pb;
    const jobc_req *r = req;
    const dataset *d = r->d;
    zreduce_axis axis = (zreduce_axis)r->axis;
    double npix = (double)d->nx * (double)d->ny, nz = (double)d->nz;
    double parts = (double)zreduce_nranges(d->nz);
    memset(c, 0, sizeof *c);
    if (axis == ZREDUCE_AXIS_Z) {
        c->block_bytes = 56.0 * npix;
        c->product_bytes = 8.0 * npix + 4.0 * 2880.0;
        c->work_bytes = 20.0 * npix * parts + c->product_bytes;
    } else {
        c->block_bytes = 8.0 * npix + 8.0 * nz;
        c->product_bytes = 8.0 * nz + 4.0 * 2880.0;
        c->work_bytes = 8.0 * nz + parts * 4096.0 + c->product_bytes;
    }
    snprintf(c->what, sizeof c->what, "planes of %ld x %ld pixels", d->nx, d->ny);
    /* decoded frames: a z-reduction chunk holds 16 MB of them and one more,
     * STACK_ZR_HOLD_FRAMES at most (stack.h) */
    double frame = jobc_frame_bytes(d);
    long held = frame > 0.0 ? (long)floor(16.0 * 1048576.0 / frame) + 1 : 0;
    jobc_frames_cost(d, held < STACK_ZR_HOLD_FRAMES ? held : STACK_ZR_HOLD_FRAMES, c);
    return 0;
}

const job_kind job_kind_reduce = {
    .type = "reduce",
    .parse = reduce_parse,
    .req_free = free,
    .req_json = jobc_req_json,
    .plan = reduce_plan,
    .run_block = reduce_run,
    .finish = reduce_finish,
    .release = jobc_free_state,
    .estimate = reduce_estimate,
};
