/* The "recenter" job type (job_stack.h): frames cropped around their object, over engine/cube. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/cube/centroid.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/chunkstore.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static int recenter_size(const json_t *body, jobc_req *r, job_problem *pb)
{
    const dataset *d = r->d;
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
    r->size[0] = (long)w;
    r->size[1] = (long)h;
    return 0;
}

static int recenter_parse(const json_t *body, const job_env *env, int accepted, void **req,
                          job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "size", "output", NULL};
    return jobc_parse(body, env, accepted, known, recenter_size, 1, req, pb);
}

static int recenter_plan(const void *req, const job_env *env, const char *workdir,
                         job_plan *out, char *err, size_t errlen)
{
    (void)env;
    const jobc_req *r = req;
    const dataset *d = r->d;
    recenter_state *s = jobc_state_new(sizeof *s, err, errlen);
    if (!s)
        return TESS_ENOMEM;
    int rc;
    s->d = d;
    s->w = r->size[0];
    s->h = r->size[1];
    s->dt = jobc_choose_dtype(d);
    jobc_frame_blocks(d, &s->per_block, &s->nblocks);
    snprintf(s->out_path, sizeof s->out_path, "%s/recentered.fits", workdir);
    snprintf(s->origins_path, sizeof s->origins_path, "%s/origins.bin", workdir);
    snprintf(s->name, sizeof s->name, "%s", r->output);
    if (s->w < 1 || s->h < 1 || s->w > d->nx || s->h > d->ny) {
        tess_seterr(err, errlen, "size: crops do not fit in the frames");
        free(s);
        return TESS_EINVAL;
    }
    char c_src[81], c_w[81], text[72];
    fitscard_string(c_src, "RCSOURCE", d->name, 0, NULL);
    snprintf(text, sizeof text, "Frames cropped around their intensity centroid, %ldx%ld",
             s->w, s->h);
    fitscard_commentary(c_w, "COMMENT", text);
    c_src[80] = c_w[80] = '\0';
    const char *cards[] = {c_w, "COMMENT Crop origins (0-based) in the ORIGINS table", c_src,
                           NULL};
    long naxes[3] = {s->w, s->h, d->nz};
    rc = jobc_plane_product(workdir, s->out_path, s->dt, naxes, cards, s->origins_path,
                            (off_t)(d->nz * (long)sizeof(origin_rec)), &s->datastart, err,
                            errlen);
    return jobc_plan_one_stage(out, s, s->nblocks, rc);
}

typedef struct recenter_block {
    const recenter_state *s;
    int fd, ofd;
    size_t n;              /* bytes of a crop in the product */
    double *scratch;       /* a frame of doubles for cube_centroid (not for 8-bit frames) */
    double *crop;
    unsigned char *enc;    /* a crop in the product's type */
} recenter_block;

/* One frame: its centroid, the crop around it (8-bit frames copied as they are, others
 * encoded in the product's type), the crop and its origin written at their offsets. */
static int recenter_frame(void *arg, const jobc_frame *f, char *err, size_t errlen)
{
    recenter_block *b = arg;
    const recenter_state *s = b->s;
    long nx = s->d->nx, ny = s->d->ny;
    origin_rec o;
    if (f->u8) {
        cube_centroid_u8(f->u8, nx, ny, &o.cx, &o.cy);
    } else {
        if (!b->scratch && !(b->scratch = malloc(sizeof(double) * (size_t)nx * (size_t)ny))) {
            tess_seterr(err, errlen, "out of memory");
            return TESS_ENOMEM;
        }
        cube_centroid(f->v, nx, ny, b->scratch, &o.cx, &o.cy);
    }
    long ox = isfinite(o.cx) && fabs(o.cx) < 1e15 ? (long)o.cx - s->w / 2 : 0;
    long oy = isfinite(o.cy) && fabs(o.cy) < 1e15 ? (long)o.cy - s->h / 2 : 0;
    o.x0 = jobc_lmax(0, jobc_lmin(ox, nx - s->w));
    o.y0 = jobc_lmax(0, jobc_lmin(oy, ny - s->h));
    for (long y = 0; y < s->h; y++) {
        size_t at = (size_t)(o.y0 + y) * (size_t)nx + (size_t)o.x0;
        if (f->u8)
            memcpy(b->enc + y * s->w, f->u8 + at, (size_t)s->w);
        else
            memcpy(b->crop + y * s->w, f->v + at, sizeof(double) * (size_t)s->w);
    }
    if (!f->u8)
        jobc_fits_encode(s->dt, b->crop, b->enc, s->w * s->h);
    int rc = jobc_write_plane(b->fd, s->out_path, b->enc, b->n, s->datastart, f->z, err, errlen);
    if (!rc && tess_pwrite_all(b->ofd, &o, sizeof o, (off_t)(f->z * (long)sizeof o)) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", s->origins_path, strerror(errno));
        rc = TESS_EIO;
    }
    return rc;
}

static int recenter_run(void *state, int stage, long block, const volatile int *cancel,
                        char *err, size_t errlen)
{
    (void)stage;
    recenter_state *s = state;
    recenter_block b = {s, -1, -1, (size_t)s->w * (size_t)s->h * (size_t)chunkstore_esize(s->dt),
                        NULL, malloc(sizeof(double) * (size_t)s->w * (size_t)s->h), NULL};
    b.enc = malloc(b.n);
    int rc = b.crop && b.enc ? 0 : TESS_ENOMEM;
    if (rc)
        tess_seterr(err, errlen, "out of memory");
    if (!rc && (b.fd = jobc_open_work(s->out_path, err, errlen)) < 0)
        rc = TESS_EIO;
    if (!rc && (b.ofd = jobc_open_work(s->origins_path, err, errlen)) < 0)
        rc = TESS_EIO;
    if (!rc)
        rc = jobc_frames_run(s->d, s->per_block, block, s->dt == CS_U8, cancel, recenter_frame,
                             &b, err, errlen);
    rc = jobc_close_work(b.fd, s->out_path, rc, err, errlen);
    if (b.ofd >= 0)
        close(b.ofd);
    free(b.scratch);
    free(b.crop);
    free(b.enc);
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
    return jobc_product_dataset(s->out_path, tmp_path, s->name, prod, err, errlen);
}

/* The cube of crops (W, H, nz) and its ORIGINS table, the origins file; a block holds a
 * frame twice in doubles (the frame and the centroid's scratch) and one crop. */
static int recenter_estimate(const void *req, const job_env *env, job_cost *c,
                             job_problem *pb)
{
    (void)env;
    (void)pb;
    const jobc_req *r = req;
    const dataset *d = r->d;
    double w = (double)r->size[0], h = (double)r->size[1];
    double oes = (double)chunkstore_esize(jobc_choose_dtype(d)), nz = (double)d->nz;
    memset(c, 0, sizeof *c);
    c->block_bytes = 16.0 * (double)d->nx * (double)d->ny + w * h * (8.0 + oes);
    snprintf(c->what, sizeof c->what, "a frame of %ld x %ld pixels", d->nx, d->ny);
    c->state_bytes = nz * (sizeof(origin_rec) + 40.0);
    c->product_bytes = w * h * nz * oes + nz * 40.0 + 4.0 * 2880.0;
    c->work_bytes = c->product_bytes + nz * (double)sizeof(origin_rec);
    jobc_frames_cost(d, 1, c);   /* the reader's decoded frames, the one read */
    return 0;
}

const job_kind job_kind_recenter = {
    .type = "recenter",
    .parse = recenter_parse,
    .req_free = free,
    .req_json = jobc_req_json,
    .plan = recenter_plan,
    .run_block = recenter_run,
    .finish = recenter_finish,
    .release = jobc_free_state,
    .estimate = recenter_estimate,
};
