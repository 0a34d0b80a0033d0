/* The "ingest" job type (job_stack.h): a stack's frames decoded once into a plane store. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ingest_state {
    const dataset *d;
    long per_block, nblocks;
    cs_dtype dt;
    long long datastart;
    char out_path[PATH_MAX];
    char name[128];
} ingest_state;

/* The stack d may be ingested: frames (not a cube), whose values a store type holds
 * exactly (integers, or BITPIX -32).  0 or -1 with *pb (422). */
static int ingest_check(const json_t *body, jobc_req *r, job_problem *pb)
{
    (void)body;
    const dataset *d = r->d;
    if (d->kind != DS_STACK) {
        jobkind_problem(pb, 422, "dataset", "dataset '%s' is not a stack of frames: its "
                        "planes are read in place already", d->name);
        return -1;
    }
    if (jobc_choose_dtype(d) == CS_F32 && d->bitpix != -32) {
        jobkind_problem(pb, 422, "dataset", "the values of dataset '%s' (BITPIX %d, scaled "
                        "or with BLANK) have no exact store type", d->name, d->bitpix);
        return -1;
    }
    return 0;
}

static int ingest_parse(const json_t *body, const job_env *env, int accepted, void **req,
                        job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", NULL};
    return jobc_parse(body, env, accepted, known, ingest_check, 0, req, pb);
}

static int ingest_plan(const void *req, const job_env *env, const char *workdir,
                       job_plan *out, char *err, size_t errlen)
{
    (void)env;
    const dataset *d = ((const jobc_req *)req)->d;
    int rc;
    ingest_state *s = jobc_state_new(sizeof *s, err, errlen);
    if (!s)
        return TESS_ENOMEM;
    s->d = d;
    s->dt = jobc_choose_dtype(d);
    jobc_frame_blocks(d, &s->per_block, &s->nblocks);
    snprintf(s->out_path, sizeof s->out_path, "%s/ingest.fits", workdir);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    char c_src[81], c_ver[81], ver[64];
    fitscard_string(c_src, "INGSRC", d->name, 0, "the stack these planes are of");
    fitscard_string(c_ver, "INGVER", dataset_version(d, ver, sizeof ver), 0,
                    "its version when ingested");
    c_src[80] = c_ver[80] = '\0';
    const char *cards[] = {c_src, c_ver, NULL};
    long naxes[3] = {d->nx, d->ny, d->nz};
    rc = jobc_plane_product(workdir, s->out_path, s->dt, naxes, cards, NULL, 0, &s->datastart,
                            err, errlen);
    return jobc_plan_one_stage(out, s, s->nblocks, rc);
}

typedef struct ingest_block {
    const ingest_state *s;
    int fd;
    size_t n;             /* bytes a plane in the store */
    unsigned char *enc;   /* a plane encoded in the store's type */
} ingest_block;

/* One frame: its 8-bit values as they are, others encoded in the store's type; written at
 * its fixed offset. */
static int ingest_frame(void *arg, const jobc_frame *f, char *err, size_t errlen)
{
    ingest_block *b = arg;
    const dataset *d = b->s->d;
    const unsigned char *src = f->u8;
    if (!src) {
        jobc_fits_encode(b->s->dt, f->v, b->enc, d->nx * d->ny);
        src = b->enc;
    }
    return jobc_write_plane(b->fd, b->s->out_path, src, b->n, b->s->datastart, f->z, err,
                            errlen);
}

/* One group of frames, each read once. */
static int ingest_run(void *state, int stage, long block, const volatile int *cancel,
                      char *err, size_t errlen)
{
    (void)stage;
    ingest_state *s = state;
    const dataset *d = s->d;
    ingest_block b = {s, -1, (size_t)d->nx * (size_t)d->ny * (size_t)chunkstore_esize(s->dt),
                      NULL};
    if (!(b.enc = malloc(b.n))) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    int rc = (b.fd = jobc_open_work(s->out_path, err, errlen)) < 0 ? TESS_EIO : 0;
    if (!rc)
        rc = jobc_frames_run(d, s->per_block, block, s->dt == CS_U8, cancel, ingest_frame, &b,
                             err, errlen);
    rc = jobc_close_work(b.fd, s->out_path, rc, err, errlen);
    free(b.enc);
    return rc;
}

static int ingest_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                         size_t errlen)
{
    ingest_state *s = state;
    return jobc_product_attach(s->out_path, tmp_path, s->name, "application/fits", prod, err,
                               errlen);
}

/* The store (every plane in the store type, and its header); a block holds a plane of
 * doubles and one encoded. */
static int ingest_estimate(const void *req, const job_env *env, job_cost *c,
                           job_problem *pb)
{
    (void)env;
    (void)pb;
    const dataset *d = ((const jobc_req *)req)->d;
    double es = (double)chunkstore_esize(jobc_choose_dtype(d));
    double npix = (double)d->nx * (double)d->ny;
    memset(c, 0, sizeof *c);
    c->block_bytes = npix * (8.0 + es);
    snprintf(c->what, sizeof c->what, "a frame of %ld x %ld pixels", d->nx, d->ny);
    c->product_bytes = npix * (double)d->nz * es + 2.0 * 2880.0;
    c->work_bytes = c->product_bytes;
    jobc_frames_cost(d, 1, c);   /* the reader's decoded frames, the one read */
    return 0;
}

const job_kind job_kind_ingest = {
    .type = "ingest",
    .parse = ingest_parse,
    .req_free = free,
    .req_json = jobc_req_json,
    .plan = ingest_plan,
    .run_block = ingest_run,
    .finish = ingest_finish,
    .release = jobc_free_state,
    .estimate = ingest_estimate,
};
