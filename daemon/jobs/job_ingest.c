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
static int ingest_check(const dataset *d, job_problem *pb)
{
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

static int ingest_validate(const json_t *body, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", NULL};
    const dataset *d;
    if (jobkind_only_fields(body, known, NULL, pb) != 0 ||
        jobc_check_dataset(body, env, &d, pb) != 0)
        return -1;
    return ingest_check(d, pb);
}

static int ingest_plan(const json_t *body, const job_env *env, const char *workdir,
                       job_plan *out, char *err, size_t errlen)
{
    const dataset *d;
    int rc = jobc_plan_dataset(body, env, &d, err, errlen);
    if (rc)
        return rc;
    job_problem pb;
    if (ingest_check(d, &pb) != 0) {
        tess_seterr(err, errlen, "%s: %s", pb.field, pb.detail);
        return TESS_EINVAL;
    }
    ingest_state *s = calloc(1, sizeof *s);
    if (!s) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    s->d = d;
    s->dt = jobc_choose_dtype(d);
    s->per_block = jobc_lmax(1, (d->nz + JOBC_MIN_BLOCKS - 1) / JOBC_MIN_BLOCKS);
    s->nblocks = (d->nz + s->per_block - 1) / s->per_block;
    snprintf(s->out_path, sizeof s->out_path, "%s/ingest.fits", workdir);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    if (!jobc_marker_exists(workdir)) {
        char c_src[81], c_ver[81], ver[64];
        fitscard_string(c_src, "INGSRC", d->name, 0, "the stack these planes are of");
        fitscard_string(c_ver, "INGVER", dataset_version(d, ver, sizeof ver), 0,
                        "its version when ingested");
        c_src[80] = c_ver[80] = '\0';
        const char *cards[] = {c_src, c_ver, NULL};
        long naxes[3] = {d->nx, d->ny, d->nz};
        rc = jobc_fits_create(s->out_path, s->dt, jobc_fits_bitpix(s->dt), 3, naxes, NULL,
                              cards, &s->datastart, err, errlen);
        if (!rc)
            rc = jobc_touch_marker(workdir, err, errlen);
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

/* One group of frames: each read once (an 8-bit frame straight from its decoded bytes,
 * others as doubles encoded in the store's type) and written at its fixed offset. */
static int ingest_run(void *state, int stage, long block, const volatile int *cancel,
                      char *err, size_t errlen)
{
    (void)stage;
    ingest_state *s = state;
    const dataset *d = s->d;
    size_t npix = (size_t)d->nx * (size_t)d->ny, es = (size_t)chunkstore_esize(s->dt);
    double *plane = malloc(sizeof(double) * npix);
    unsigned char *enc = malloc(npix * es);
    int rc = plane && enc ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    int fd = rc ? -1 : open(s->out_path, O_WRONLY | O_CLOEXEC);
    if (!rc && fd < 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", s->out_path, strerror(errno));
        rc = TESS_EIO;
    }
    stack *st = dataset_stack(d);
    long z0 = block * s->per_block, z1 = jobc_lmin(d->nz, z0 + s->per_block);
    for (long z = z0; z < z1 && !rc; z++) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        const unsigned char *src = enc;
        stack_plane p = {0};
        if (s->dt == CS_U8 && (rc = stack_plane_hold(st, z, &p, err, errlen)) != 0)
            break;
        if (p.u8) {
            src = p.u8;
        } else {
            rc = dataset_read_region(d, z, 0, 0, d->nx, d->ny, plane, err, errlen);
            if (!rc)
                jobc_fits_encode(s->dt, plane, enc, (long)npix);
        }
        off_t off = (off_t)(s->datastart + (long long)z * (long long)(npix * es));
        if (!rc && tess_pwrite_all(fd, src, npix * es, off) != 0) {
            tess_seterr(err, errlen, "cannot write %s: %s", s->out_path, strerror(errno));
            rc = TESS_EIO;
        }
        if (stack_plane_release(st, &p) && !rc) {
            tess_seterr(err, errlen, "a frame of '%s' was truncated while read", d->name);
            rc = TESS_EIO;
        }
    }
    if (fd >= 0 && close(fd) != 0 && !rc) {
        tess_seterr(err, errlen, "cannot write %s: %s", s->out_path, strerror(errno));
        rc = TESS_EIO;
    }
    free(plane);
    free(enc);
    return rc;
}

static int ingest_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                         size_t errlen)
{
    ingest_state *s = state;
    int rc = jobc_link_file(s->out_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    memset(prod, 0, sizeof *prod);
    snprintf(prod->attach_to, sizeof prod->attach_to, "%s", s->name);
    snprintf(prod->content_type, sizeof prod->content_type, "application/fits");
    return 0;
}

static void ingest_release(void *state)
{
    free(state);
}

/* The store (every plane in the store type, and its header); a block holds a plane of
 * doubles and one encoded. */
static int ingest_estimate(const json_t *body, const job_env *env, job_cost *c,
                           job_problem *pb)
{
    const dataset *d;
    if (jobc_check_dataset(body, env, &d, pb) != 0 || ingest_check(d, pb) != 0)
        return -1;
    double es = (double)chunkstore_esize(jobc_choose_dtype(d));
    double npix = (double)d->nx * (double)d->ny;
    memset(c, 0, sizeof *c);
    c->block_bytes = npix * (8.0 + es);
    snprintf(c->what, sizeof c->what, "a frame of %ld x %ld pixels", d->nx, d->ny);
    c->product_bytes = npix * (double)d->nz * es + 2.0 * 2880.0;
    c->work_bytes = c->product_bytes;
    return 0;
}

const job_kind job_kind_ingest = {"ingest", ingest_validate, ingest_plan, ingest_run,
                                  ingest_finish, ingest_release, ingest_estimate};
