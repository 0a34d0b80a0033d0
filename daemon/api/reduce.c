/* GET /api/v1/datasets/{name}/reduce?op=mean|sum|min|max|std&axis=z|xy[&format=]: NaN-aware
 * reductions of a cube or stack along z (an image) or over each plane (one value a plane).
 *
 * As numpy's nanmean / nansum / nanmin / nanmax / nanstd (ddof 0): NaN (blank) values are
 * skipped; where no value is left the result is NaN (0 for sum).  axis=z: pixel (x, y) of
 * the result reduces v(x, y, 0..nz-1), an nx x ny image (png|jpg|fits|npy|raw, rendering
 * parameters), computed by zreduce_image (engine/image/zreduce.h) over the worker pool,
 * the FITS header by zreduce_header: the same values and cards as a "reduce" job's
 * product.  axis=xy: value k reduces plane k (json|npy|csv with the z axis of series).
 * Requests that would read more than REDUCE_MAX_INPUT_BYTES of stored pixels are refused
 * with 413: a "reduce" job (POST /api/v1/jobs) does those in the background. */
#include "daemon/api/handlers.h"
#include "engine/image/zreduce.h"
#include "daemon/http.h"
#include "engine/base/pool.h"
#include "daemon/problem.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stored bytes a request may read at most (2 GiB). */
#define REDUCE_MAX_INPUT_BYTES (2ULL << 30)

typedef struct reduce_job {
    const dataset *ds;
    stack_zop op;
    zreduce_axis axis;
    out_format format;       /* axis=z */
    profile_format pformat;  /* axis=xy */
    render_params render;
} reduce_job;

/* Axis z: zreduce_image on the worker pool (interactive priority, the request's thread
 * taking its share); FITS gets zreduce_header's cards. */
static void reduce_z(hreq *r, reduce_job *j)
{
    const dataset *d = j->ds;
    size_t bytes;
    char *cards = NULL, err[256];
    int nkeys = 0;
    (void)tess_size_dims(sizeof(double), (const long[]){d->nx, d->ny}, 2, &bytes);
    double *acc = malloc(bytes);   /* the plane was checked against max_output_pixels */
    if (!acc) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc = zreduce_image(dataset_stack(d), d->nz, j->op, r->srv->app->workers, hreq_priority(r),
                           &r->cancel_v, acc, err, sizeof err);
    if (!rc && j->format == FMT_FITS)
        rc = zreduce_header(d->header, d->nkeys, j->op, j->axis, d->name, &cards, &nkeys, err,
                            sizeof err);
    if (rc == TESS_ECANCELED)
        hreq_reply_cancelled(r);
    else if (rc == TESS_ENOMEM)
        problem_reply(r, 500, NULL, "out of memory");
    else if (rc)
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      d->name, err);
    else
        reply_image(r, acc, d->nx, d->ny, j->format, &j->render, cards, nkeys);
    free(cards);
    free(acc);
}

static void reduce_xy(hreq *r, reduce_job *j)
{
    const dataset *d = j->ds;
    char err[256];
    double *vals = malloc((size_t)d->nz * sizeof(double));
    if (!vals) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc = zreduce_planes(dataset_stack(d), d->nx, d->ny, d->nz, j->op, 0, d->nz,
                            &r->cancel_v, vals, err, sizeof err);
    if (rc) {
        if (rc == TESS_ECANCELED)
            hreq_reply_cancelled(r);
        else if (rc == TESS_ENOMEM)
            problem_reply(r, 500, NULL, "out of memory");
        else
            problem_reply(r, problem_read_status(rc, 500), NULL,
                          "cannot read dataset '%s': %s", d->name, err);
        goto done;
    }
    zaxis za;
    if (zaxis_compute(d, d->nx / 2, d->ny / 2, &za)) {
        problem_reply(r, 500, NULL, "out of memory");
        goto done;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "dataset", json_string(d->name));
    json_object_set_new(doc, "op", json_string(zreduce_op_name(j->op)));
    json_object_set_new(doc, "axis", json_string(zreduce_axis_name(j->axis)));
    json_object_set_new(doc, "unit", d->bunit[0] ? json_string(d->bunit) : json_null());
    reply_profile(r, j->pformat, doc, &za, vals, d->nz, d->bunit);
    zaxis_release(&za);
done:
    free(vals);
}

static void reduce_work(hreq *r)
{
    reduce_job *j = r->work_arg;
    if (j->axis == ZREDUCE_AXIS_Z)
        reduce_z(r, j);
    else
        reduce_xy(r, j);
}

void handle_reduce(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    static const char *const known[] = {"op", "axis", "format", "stretch", "min_cut", "max_cut",
                                        "cmap", NULL};
    if (hreq_only_args(r, known))
        return;
    reduce_job j0;
    memset(&j0, 0, sizeof(j0));
    j0.ds = d;
    const char *s = hreq_arg(r, "op");
    if (zreduce_op_parse(s, &j0.op)) {
        problem_reply(r, 400, "op", "op must be mean, sum, min, max or std, got '%.40s'",
                      s ? s : "(none)");
        return;
    }
    s = hreq_arg(r, "axis");
    if (zreduce_axis_parse(s, &j0.axis)) {
        problem_reply(r, 400, "axis", "axis must be z (an image: the reduction along z at each "
                      "pixel) or xy (one value per plane)%s%.40s%s", s ? ", got '" : "",
                      s ? s : "", s ? "'" : "");
        return;
    }
    int along_z = j0.axis == ZREDUCE_AXIS_Z;
    s = hreq_arg(r, "format");
    if (along_z) {
        j0.format = FMT_PNG;
        if (s && out_format_parse(s, &j0.format)) {
            problem_reply(r, 400, "format", "format must be png, jpg, fits, npy or raw for "
                          "axis=z, got '%.40s'", s);
            return;
        }
    } else if (profile_format_parse(s, &j0.pformat)) {
        problem_reply(r, 400, "format", "format must be json, npy or csv for axis=xy, got "
                      "'%.40s'", s);
        return;
    }
    param_error pe;
    if (params_render(hreq_arg_lookup, r, &j0.render, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        return;
    }
    long npix;
    if (along_z && (tess_long_mul(d->nx, d->ny, &npix) ||
                    npix > r->srv->cfg->max_output_pixels)) {
        problem_reply(r, 413, "axis", "the %ldx%ld result is more than limits.max_output_pixels "
                      "= %lld", d->nx, d->ny, r->srv->cfg->max_output_pixels);
        return;
    }
    if (!along_z && d->nz > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, "axis", "the %ld values of axis=xy are more than "
                      "limits.max_output_pixels = %lld", d->nz, r->srv->cfg->max_output_pixels);
        return;
    }
    unsigned long long bytes = stack_data_bytes(dataset_stack(d));
    if (bytes > REDUCE_MAX_INPUT_BYTES) {
        problem_reply(r, 413, "axis", "reducing '%s' reads %llu MB, more than the %llu MB a "
                      "request may read; post a job instead: POST /api/v1/jobs {\"type\": "
                      "\"reduce\", \"dataset\": \"%s\", \"op\": \"%s\", \"axis\": \"%s\", "
                      "\"output\": {\"name\": ...}}", d->name, bytes >> 20,
                      REDUCE_MAX_INPUT_BYTES >> 20, d->name, zreduce_op_name(j0.op),
                      zreduce_axis_name(j0.axis));
        return;
    }
    char rk[160], version[64];
    params_render_key(&j0.render, rk, sizeof(rk));
    dataset_version(d, version, sizeof(version));
    int rendered = along_z && (j0.format == FMT_PNG || j0.format == FMT_JPG);
    if (asprintf(&r->cache_key, "reduce|%s|%s|%s|%s|%s|%s", d->name, version,
                 zreduce_op_name(j0.op), zreduce_axis_name(j0.axis),
                 along_z ? out_format_name(j0.format) : profile_format_name(j0.pformat),
                 rendered ? rk : "") < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    if (along_z)
        reply_image_shape(r, j0.format, d->nx, d->ny);
    if (hreq_try_cache(r))
        return;
    reduce_job *j = malloc(sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    *j = j0;
    hreq_mark_bulk(r, (long long)d->nx * d->ny * d->nz);
    hreq_run_async(r, reduce_work, j, free);
}
