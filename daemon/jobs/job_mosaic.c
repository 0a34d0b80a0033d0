/* The "mosaic" job type: body validation and the job_kind glue over engine/mosaic. */
#include "daemon/jobs/job_mosaic.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/mosaic/mosaic.h"
#include "engine/base/error.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cards a target header may have at most. */
#define MAX_TARGET_CARDS 10000

/* A parsed body. */
typedef struct body {
    int n;
    mos_input *inputs;
    char (*paths)[PATH_MAX];
    char **names;
    char *tcards;          /* NULL: automatic */
    int tkeys;
    sky_frame frame;
    char proj[8];
    rp_method method;
    mos_combine combine;
    mos_bg bg;
    char output[128];
} body;

static void body_free(body *b)
{
    free(b->inputs);
    free(b->paths);
    if (b->names)
        for (int i = 0; i < b->n; i++)
            free(b->names[i]);
    free(b->names);
    free(b->tcards);
    memset(b, 0, sizeof *b);
}

/* A string member, or NULL with a 400 naming the field when present and not a string. */
static int opt_string(const json_t *o, const char *key, const char *field, const char **out,
                      job_problem *pb)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string(v)) {
        jobkind_problem(pb, 400, field, "'%s' must be a string", field);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* Checks an input's file: a 2-D image whose axes 1 and 2 are celestial. */
static int check_input_file(const char *path, int hdu, const char *field, job_problem *pb)
{
    fitsimg_info info;
    char e[256] = "";
    if (fitsimg_read_info(path, hdu, &info, e, sizeof e) != 0) {
        jobkind_problem(pb, 422, field, "not a readable FITS image: %s", e);
        return -1;
    }
    int ok = info.naxis >= 2;
    for (int k = 2; k < info.naxis; k++)
        ok = ok && info.naxes[k] == 1;
    if (!ok) {
        fitsimg_info_release(&info);
        jobkind_problem(pb, 422, field, "not a 2-D image (NAXIS = %d)", info.naxis);
        return -1;
    }
    skywcs *w = NULL;
    int rc = skywcs_parse(info.header, info.nkeys, &w, e, sizeof e);
    fitsimg_info_release(&info);
    skywcs *c = rc == 0 ? skywcs_celestial(w) : NULL;
    skywcs_free(w);
    if (rc == TESS_EINVAL) {
        jobkind_problem(pb, 422, field, "the image has no usable WCS: %s", e);
        return -1;
    }
    if (!c) {
        jobkind_problem(pb, 422, field, "the image has no celestial WCS%s%s", rc ? ": " : "",
                        rc ? e : "");
        return -1;
    }
    skywcs_free(c);
    return 0;
}

/* The largest angular distance (degrees) between the centres of the n inputs (pixel
 * centre ((nx-1)/2, (ny-1)/2), in the first input's frame), by the haversine formula;
 * 0 when a centre has no sky position.  Only used to explain an oversized target. */
static double max_centre_separation(int n, skywcs *const *ws, const long *nx, const long *ny)
{
    double *lon = malloc((size_t)n * sizeof(double)), *lat = malloc((size_t)n * sizeof(double));
    double best = 0.0, eq0 = 0.0;
    if (!lon || !lat) {
        free(lon);
        free(lat);
        return 0.0;
    }
    sky_frame f0 = skywcs_frame(ws[0], &eq0);
    for (int i = 0; i < n; i++) {
        double x = (double)(nx[i] - 1) / 2.0, y = (double)(ny[i] - 1) / 2.0, eq = 0.0;
        sky_frame f = skywcs_frame(ws[i], &eq);   /* sets eq: not inside the call below */
        skywcs_pix2sky(ws[i], 1, &x, &y, &lon[i], &lat[i]);
        sky_convert(f, eq, f0, eq0, 1, &lon[i], &lat[i]);
    }
    const double d2r = 3.14159265358979323846 / 180.0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double sl = sin((lat[j] - lat[i]) * d2r / 2.0), so = sin((lon[j] - lon[i]) * d2r / 2.0);
            double h = sl * sl + cos(lat[i] * d2r) * cos(lat[j] * d2r) * so * so;
            double d = 2.0 * asin(sqrt(h < 1.0 ? h : 1.0)) / d2r;
            if (d > best)   /* NaN compares false */
                best = d;
        }
    free(lon);
    free(lat);
    return best;
}

/* The inputs of the body: `in` is the "inputs" array (NULL when absent); a reprojection's
 * single "input" comes as a one-element array and is named "input" in problems.  Fills
 * b->n, b->inputs, b->paths, b->names.  Returns 0 or -1 with *pb. */
static int parse_inputs(const json_t *in, const job_env *env, int reproject, body *b,
                        job_problem *pb)
{
    if (!in) {
        jobkind_problem(pb, 400, "inputs", "'inputs' is required: a list of dataset names or "
                        "file paths");
        return -1;
    }
    if (!json_is_array(in) || json_array_size(in) < 1) {
        jobkind_problem(pb, 400, "inputs", "'inputs' must be a non-empty array of strings");
        return -1;
    }
    if (json_array_size(in) > MOS_MAX_INPUTS) {
        jobkind_problem(pb, 413, "inputs", "at most %d inputs", MOS_MAX_INPUTS);
        return -1;
    }
    b->n = (int)json_array_size(in);
    b->inputs = calloc((size_t)b->n, sizeof(mos_input));
    b->paths = calloc((size_t)b->n, PATH_MAX);
    b->names = calloc((size_t)b->n, sizeof(char *));
    if (!b->inputs || !b->paths || !b->names) {
        jobkind_problem(pb, 500, "inputs", "out of memory");
        return -1;
    }
    for (int i = 0; i < b->n; i++) {
        char field[32];
        snprintf(field, sizeof field, reproject ? "input" : "inputs[%d]", i);
        json_t *v = json_array_get(in, (size_t)i);
        if (!json_is_string(v)) {
            jobkind_problem(pb, 400, field, "'%s' must be a string", field);
            return -1;
        }
        const dataset *ds = NULL;
        if (jobkind_resolve_input(env, json_string_value(v), field, &ds, b->paths[i], pb))
            return -1;
        int hdu = 0;
        if (ds) {
            if (ds->kind != DS_IMAGE) {
                jobkind_problem(pb, 422, field, "dataset '%s' is a %s: a %s takes 2-D images",
                                ds->name, ds_kind_name(ds->kind),
                                reproject ? "reprojection" : "mosaic");
                return -1;
            }
            if (ds->wcs_error[0]) {
                jobkind_problem(pb, 422, field, "dataset '%s' has no usable WCS: %s", ds->name,
                                ds->wcs_error);
                return -1;
            }
            if (!ds->cel) {
                jobkind_problem(pb, 422, field, "dataset '%s' has no celestial WCS", ds->name);
                return -1;
            }
            hdu = ds->hdu;
        } else if (check_input_file(b->paths[i], 0, field, pb)) {
            return -1;
        }
        b->names[i] = strdup(json_string_value(v));
        if (!b->names[i]) {
            jobkind_problem(pb, 500, field, "out of memory");
            return -1;
        }
        b->inputs[i] = (mos_input){ b->paths[i], b->names[i], hdu };
    }
    return 0;
}

/* Parses and checks the whole body.  `check_name`: the output name must be new (validate;
 * after acceptance the name is the job's, so plan does not ask again).  `reproject`: the
 * "reproject" type, a mosaic of the one image "input" onto the required "target", each
 * output pixel the input's reprojected value (combine "first": no arithmetic on it). */
static int parse_body(const json_t *j, const job_env *env, int check_name, int reproject,
                      body *b, job_problem *pb)
{
    memset(b, 0, sizeof *b);
    b->method = RP_BILINEAR;
    b->combine = reproject ? MOS_FIRST : MOS_MEAN;
    b->bg = MOS_BG_NONE;
    if (!json_is_object(j)) {
        jobkind_problem(pb, 400, "", "the body must be a JSON object");
        return -1;
    }
    static const char *const known[] = { "type", "inputs", "target", "method", "combine",
                                         "match_background", "output", NULL };
    static const char *const known_rp[] = { "type", "input", "target", "method", "output",
                                            NULL };
    if (jobkind_only_fields(j, reproject ? known_rp : known, "", pb))
        return -1;
    const char *s;
    if (opt_string(j, "type", "type", &s, pb))
        return -1;
    const char *type = reproject ? "reproject" : "mosaic";
    if (!s || strcmp(s, type) != 0) {
        jobkind_problem(pb, 400, "type", "'type' must be \"%s\"", type);
        return -1;
    }
    if (reproject && !json_object_get(j, "target")) {
        jobkind_problem(pb, 400, "target", "'target' is required: {\"header\": FITS cards} or "
                        "{\"auto\": {\"frame\": ..., \"projection\": ...}}");
        return -1;
    }
    /* inputs ("input" of a reprojection: the same, one of them) */
    json_t *one = NULL, *in = json_object_get(j, "inputs");
    if (reproject) {
        json_t *v = json_object_get(j, "input");
        if (!v) {
            jobkind_problem(pb, 400, "input", "'input' is required: a dataset name or a file "
                            "path");
            return -1;
        }
        in = one = json_pack("[O]", v);
        if (!one) {
            jobkind_problem(pb, 500, "input", "out of memory");
            return -1;
        }
    }
    int bad = parse_inputs(in, env, reproject, b, pb);
    json_decref(one);
    if (bad)
        return -1;
    /* target */
    json_t *t = json_object_get(j, "target");
    if (t) {
        static const char *const tk[] = { "header", "auto", NULL };
        if (!json_is_object(t)) {
            jobkind_problem(pb, 400, "target", "'target' must be an object: {\"header\": ...} "
                            "or {\"auto\": {...}}");
            return -1;
        }
        if (jobkind_only_fields(t, tk, "target", pb))
            return -1;
        json_t *h = json_object_get(t, "header"), *a = json_object_get(t, "auto");
        if ((h != NULL) == (a != NULL)) {
            jobkind_problem(pb, 400, "target", "'target' needs exactly one of 'header' and "
                            "'auto'");
            return -1;
        }
        if (h) {
            if (!json_is_string(h)) {
                jobkind_problem(pb, 400, "target.header", "'target.header' must be a string "
                                "of FITS cards");
                return -1;
            }
            char why[256] = "out of memory";
            int rc = fitscard_parse(json_string_value(h), json_string_length(h),
                                    MAX_TARGET_CARDS, &b->tcards, &b->tkeys, why, sizeof why);
            if (rc) {
                jobkind_problem(pb, rc == TESS_ENOMEM ? 500 : 400, "target.header", "%s", why);
                return -1;
            }
            char v[80];
            long sz[2];
            for (int k = 0; k < 2; k++) {
                char *end;
                if (!fitscard_get(b->tcards, b->tkeys, k ? "NAXIS2" : "NAXIS1", v, sizeof v)) {
                    jobkind_problem(pb, 422, "target.header", "the header has no %s",
                                    k ? "NAXIS2" : "NAXIS1");
                    return -1;
                }
                sz[k] = strtol(v, &end, 10);
                if (*end || sz[k] < 1 || sz[k] > 10000000) {
                    jobkind_problem(pb, 422, "target.header", "%s = %s is not a size",
                                    k ? "NAXIS2" : "NAXIS1", v);
                    return -1;
                }
            }
            if ((double)sz[0] * (double)sz[1] > (double)(1L << 31)) {
                jobkind_problem(pb, 413, "target.header", "%ld x %ld pixels is more than 2^31",
                                sz[0], sz[1]);
                return -1;
            }
            skywcs *w = NULL, *c = NULL;
            char e[256] = "";
            rc = skywcs_parse(b->tcards, b->tkeys, &w, e, sizeof e);
            if (rc == TESS_EINVAL) {
                jobkind_problem(pb, 400, "target.header", "the target header has no usable "
                                "WCS: %s", e);
                return -1;
            }
            if (rc == 0)
                c = skywcs_celestial(w);
            skywcs_free(w);
            if (!c) {
                jobkind_problem(pb, 422, "target.header", "no celestial WCS in the header%s%s",
                                *e ? ": " : "", e);
                return -1;
            }
            skywcs_free(c);
        } else {
            static const char *const ak[] = { "frame", "projection", NULL };
            if (!json_is_object(a)) {
                jobkind_problem(pb, 400, "target.auto", "'target.auto' must be an object");
                return -1;
            }
            if (jobkind_only_fields(a, ak, "target.auto", pb))
                return -1;
            if (opt_string(a, "frame", "target.auto.frame", &s, pb))
                return -1;
            if (s && (sky_frame_parse(s, &b->frame) != 0 || b->frame == SKY_FRAME_NONE)) {
                jobkind_problem(pb, 400, "target.auto.frame", "unknown frame '%.32s' (icrs, "
                                "fk5, fk4, galactic, ecliptic; helioprojective, stonyhurst, "
                                "carrington for images of the Sun)", s);
                return -1;
            }
            if (opt_string(a, "projection", "target.auto.projection", &s, pb))
                return -1;
            if (s) {
                int ok = strlen(s) == 3;
                for (int k = 0; ok && k < 3; k++)
                    ok = s[k] >= 'A' && s[k] <= 'Z';
                if (!ok) {
                    jobkind_problem(pb, 400, "target.auto.projection", "'%.16s' is not a "
                                    "three-letter projection code such as TAN", s);
                    return -1;
                }
                snprintf(b->proj, sizeof b->proj, "%s", s);
            }
        }
    }
    /* method, combine, match_background */
    if (opt_string(j, "method", "method", &s, pb))
        return -1;
    if (s && rp_method_parse(s, &b->method) != 0) {
        jobkind_problem(pb, 400, "method", "unknown method '%.32s' (nearest, bilinear, bicubic, "
                        "lanczos3, exact)", s);
        return -1;
    }
    if (opt_string(j, "combine", "combine", &s, pb))
        return -1;
    if (s && mos_combine_parse(s, &b->combine) != 0) {
        jobkind_problem(pb, 400, "combine", "unknown combine '%.32s' (mean, sum, median, min, "
                        "max, first, last)", s);
        return -1;
    }
    json_t *mb = json_object_get(j, "match_background");
    if (mb) {
        if (json_is_boolean(mb)) {
            b->bg = json_is_true(mb) ? MOS_BG_PLANE : MOS_BG_NONE;
        } else if (json_is_string(mb) && strcmp(json_string_value(mb), "level") == 0) {
            b->bg = MOS_BG_LEVEL;
        } else {
            jobkind_problem(pb, 400, "match_background", "'match_background' must be true, "
                            "false or \"level\"");
            return -1;
        }
    }
    /* output */
    json_t *o = json_object_get(j, "output");
    if (!o) {
        jobkind_problem(pb, 400, "output", "'output' is required: {\"name\": ...}");
        return -1;
    }
    if (!json_is_object(o)) {
        jobkind_problem(pb, 400, "output", "'output' must be an object {\"name\": ...}");
        return -1;
    }
    static const char *const ok[] = { "name", NULL };
    if (jobkind_only_fields(o, ok, "output", pb))
        return -1;
    if (opt_string(o, "name", "output.name", &s, pb))
        return -1;
    if (!s) {
        jobkind_problem(pb, 400, "output.name", "'output.name' is required");
        return -1;
    }
    if (check_name) {
        if (jobkind_check_new_name(env, s, "output.name", pb))
            return -1;
    } else if (strlen(s) >= sizeof b->output) {
        jobkind_problem(pb, 400, "output.name", "too long");
        return -1;
    }
    snprintf(b->output, sizeof b->output, "%s", s);
    return 0;
}

static void fill_spec(const body *b, mos_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->ninputs = b->n;
    sp->inputs = b->inputs;
    sp->target_cards = b->tcards;
    sp->target_nkeys = b->tkeys;
    sp->auto_frame = b->frame;
    snprintf(sp->auto_proj, sizeof sp->auto_proj, "%s", b->proj);
    sp->method = b->method;
    sp->combine = b->combine;
    sp->bg = b->bg;
}

static int validate_body(const json_t *j, const job_env *env, int reproject, job_problem *pb)
{
    body b;
    int rc = parse_body(j, env, 1, reproject, &b, pb);
    if (rc == 0 && !b.tcards) {
        /* The automatic target from the headers alone: an impossible or oversized one
         * is refused now rather than when the job runs. */
        skywcs **ws = calloc((size_t)b.n, sizeof(skywcs *));
        long *nx = calloc((size_t)b.n, sizeof(long)), *ny = calloc((size_t)b.n, sizeof(long));
        if (!ws || !nx || !ny) {
            jobkind_problem(pb, 500, "inputs", "out of memory");
            rc = -1;
        }
        for (int i = 0; rc == 0 && i < b.n; i++) {
            fitsimg_info info;
            char e[256] = "";
            char field[32];
            snprintf(field, sizeof field, reproject ? "input" : "inputs[%d]", i);
            if (fitsimg_read_info(b.inputs[i].path, b.inputs[i].hdu, &info, e, sizeof e) != 0) {
                jobkind_problem(pb, 422, field, "%s", e);
                rc = -1;
                break;
            }
            skywcs *w = NULL;
            if (skywcs_parse(info.header, info.nkeys, &w, e, sizeof e) == 0)
                ws[i] = skywcs_celestial(w);
            skywcs_free(w);
            nx[i] = info.naxes[0];
            ny[i] = info.naxes[1];
            fitsimg_info_release(&info);
            if (!ws[i]) {
                jobkind_problem(pb, 422, field, "no celestial WCS");
                rc = -1;
            }
        }
        if (rc == 0) {
            char *cards = NULL, e[256] = "";
            int nk = 0;
            long ox = 0, oy = 0;
            int r = mos_auto_target(b.n, ws, nx, ny, b.frame, b.proj, &cards, &nk, &ox, &oy, e,
                                    sizeof e);
            free(cards);
            if (r != 0) {
                jobkind_problem(pb, 422, "target.auto", "no automatic target: %s", e);
                rc = -1;
            } else if ((double)ox * (double)oy > (double)(1L << 31)) {
                double sep = max_centre_separation(b.n, ws, nx, ny);
                if (sep > 30.0)
                    jobkind_problem(pb, 413, "target.auto", "the mosaic would be %ld x %ld "
                                    "pixels, more than 2^31: the inputs' centres are up to "
                                    "%.1f degrees apart on the sky; mosaic inputs that are "
                                    "near each other, or give target.header", ox, oy, sep);
                else
                    jobkind_problem(pb, 413, "target.auto", "the mosaic would be %ld x %ld "
                                    "pixels, more than 2^31", ox, oy);
                rc = -1;
            }
        }
        for (int i = 0; ws && i < b.n; i++)
            skywcs_free(ws[i]);
        free(ws);
        free(nx);
        free(ny);
    }
    body_free(&b);
    return rc;
}

static int mosaic_validate(const json_t *j, const job_env *env, job_problem *pb)
{
    return validate_body(j, env, 0, pb);
}

static int reproject_validate(const json_t *j, const job_env *env, job_problem *pb)
{
    return validate_body(j, env, 1, pb);
}

typedef struct mjob {
    mosaic *m;
    char output[128];
} mjob;

static int plan_body(const json_t *j, const job_env *env, int reproject, const char *workdir,
                     job_plan *out, char *err, size_t errlen)
{
    body b;
    job_problem pb;
    memset(out, 0, sizeof *out);
    if (parse_body(j, env, 0, reproject, &b, &pb) != 0) {
        body_free(&b);
        tess_seterr(err, errlen, "%s: %s", pb.field, pb.detail);
        return pb.status == 500 ? TESS_ENOMEM : TESS_EINVAL;
    }
    mjob *mj = calloc(1, sizeof *mj);
    if (!mj) {
        body_free(&b);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    snprintf(mj->output, sizeof mj->output, "%s", b.output);
    mos_spec sp;
    fill_spec(&b, &sp);
    sp.max_block_bytes = (double)env->cfg->jobs_memory_mb * 1048576.0;
    int rc = mos_plan(&sp, workdir, env->threads, &mj->m, err, errlen);
    body_free(&b);
    if (rc) {
        free(mj);
        return rc;
    }
    int ns = mos_nstages(mj->m);
    if (ns > JOB_MAX_STAGES) {
        mos_free(mj->m);
        free(mj);
        tess_seterr(err, errlen, "too many stages");
        return TESS_EINVAL;
    }
    out->nstages = ns;
    for (int s = 0; s < ns; s++)
        out->nblocks[s] = mos_nblocks(mj->m, s);
    out->state = mj;
    return 0;
}

static int mosaic_plan(const json_t *j, const job_env *env, const char *workdir, job_plan *out,
                       char *err, size_t errlen)
{
    return plan_body(j, env, 0, workdir, out, err, errlen);
}

static int reproject_plan(const json_t *j, const job_env *env, const char *workdir,
                          job_plan *out, char *err, size_t errlen)
{
    return plan_body(j, env, 1, workdir, out, err, errlen);
}

/* What mos_plan (without a work directory) and mos_estimate say the mosaic needs.  A body
 * that cannot be planned gets no figures: the job fails when it runs, as it did before
 * estimates existed, with the planner's reason. */
static int estimate_body(const json_t *j, const job_env *env, int reproject, job_cost *c,
                         job_problem *pb)
{
    body b;
    memset(c, 0, sizeof *c);
    if (parse_body(j, env, 0, reproject, &b, pb) != 0) {
        body_free(&b);
        return -1;
    }
    mos_spec sp;
    fill_spec(&b, &sp);
    mosaic *m = NULL;
    char e[256];
    int rc = mos_plan(&sp, NULL, env->threads, &m, e, sizeof e);
    body_free(&b);
    if (rc == TESS_ENOMEM) {
        jobkind_problem(pb, 500, NULL, "out of memory");
        return -1;
    }
    if (rc)
        return 0;
    mos_cost mc;
    mos_estimate(m, &mc);
    mos_free(m);
    c->state_bytes = mc.state_bytes;
    c->block_bytes = mc.block_bytes;
    c->work_bytes = mc.work_bytes;
    c->product_bytes = mc.product_bytes;
    snprintf(c->what, sizeof c->what, "%s", mc.block_what);
    return 0;
}

static int mosaic_estimate(const json_t *j, const job_env *env, job_cost *c, job_problem *pb)
{
    return estimate_body(j, env, 0, c, pb);
}

static int reproject_estimate(const json_t *j, const job_env *env, job_cost *c,
                              job_problem *pb)
{
    return estimate_body(j, env, 1, c, pb);
}

static int mosaic_run_block(void *state, int stage, long block, const volatile int *cancel,
                            char *err, size_t errlen)
{
    mjob *mj = state;
    int rc = mos_run_block(mj->m, stage, block, cancel, err, errlen);
    if (rc == TESS_ETOOBIG) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, " (jobs.memory_mb)");
    }
    return rc;
}

static int mosaic_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                         size_t errlen)
{
    mjob *mj = state;
    int rc = mos_finish(mj->m, tmp_path, err, errlen);
    if (rc == 0) {
        memset(prod, 0, sizeof *prod);
        snprintf(prod->dataset, sizeof prod->dataset, "%s", mj->output);
    }
    return rc;
}

static void mosaic_release(void *state)
{
    mjob *mj = state;
    if (!mj)
        return;
    mos_free(mj->m);
    free(mj);
}

const job_kind job_kind_mosaic = {
    .type = "mosaic",
    .validate = mosaic_validate,
    .plan = mosaic_plan,
    .run_block = mosaic_run_block,
    .finish = mosaic_finish,
    .release = mosaic_release,
    .estimate = mosaic_estimate,
};

const job_kind job_kind_reproject = {
    .type = "reproject",
    .validate = reproject_validate,
    .plan = reproject_plan,
    .run_block = mosaic_run_block,
    .finish = mosaic_finish,
    .release = mosaic_release,
    .estimate = reproject_estimate,
};
