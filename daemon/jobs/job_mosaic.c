/* The "mosaic" and "reproject" job types: the body parsed into a typed request (each
 * input's header read once) and the job_kind glue over engine/mosaic. */
#include "daemon/jobs/job_mosaic.h"
#include "engine/fits/fitscard.h"
#include "engine/mosaic/mosaic.h"
#include "engine/base/error.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cards a target header may have at most. */
#define MAX_TARGET_CARDS 10000

/* A mosaic's (or reprojection's) typed request: the body parsed, each input's header
 * read once, the automatic target computed once. */
typedef struct mreq {
    int reproject;
    int n;
    mos_input *inputs;
    char (*paths)[PATH_MAX];
    char **names;
    mos_header *hdrs;      /* each input's header (cards NULL: not read; mos_plan reads it
                              and says why) */
    char *theader;         /* target.header as given; NULL: automatic */
    char *tcards;          /* its cards */
    int tkeys;
    char *acards;          /* the automatic target (NULL: not computed; mos_plan does) */
    int akeys;
    long anx, any;
    sky_frame frame;
    char proj[8];
    rp_method method;
    mos_combine combine;
    mos_bg bg;
    char output[128];
} mreq;

static void mreq_free(void *req)
{
    mreq *r = req;
    if (!r)
        return;
    free(r->inputs);
    free(r->paths);
    for (int i = 0; r->names && i < r->n; i++)
        free(r->names[i]);
    free(r->names);
    for (int i = 0; r->hdrs && i < r->n; i++)
        mos_header_release(&r->hdrs[i]);
    free(r->hdrs);
    free(r->theader);
    free(r->tcards);
    free(r->acards);
    free(r);
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

/* The problem of an input file that mos_read_header refused (rc, chk, its message e). */
static int input_file_problem(int rc, const skywcs_image_check *chk, const char *e,
                              const char *field, job_problem *pb)
{
    if (e[0])
        jobkind_problem(pb, 422, field, "not a readable FITS image: %s", e);
    else if (chk->why == SKYWCS_IMAGE_NOT_2D || chk->why == SKYWCS_IMAGE_NOT_IMAGE)
        jobkind_problem(pb, 422, field, "not a 2-D image (NAXIS = %d)", chk->naxis);
    else if (chk->why == SKYWCS_IMAGE_BAD_WCS && rc == TESS_EINVAL)
        jobkind_problem(pb, 422, field, "the image has no usable WCS: %s", chk->err);
    else
        jobkind_problem(pb, 422, field, "the image has no celestial WCS%s%s",
                        chk->why == SKYWCS_IMAGE_BAD_WCS ? ": " : "",
                        chk->why == SKYWCS_IMAGE_BAD_WCS ? chk->err : "");
    return -1;
}

/* Input i, the string v: resolved, its catalog entry or file checked, its header read
 * once into r->hdrs[i].  A dataset's header that cannot be read is left unread here (the
 * automatic target or mos_plan says why, as they did before headers were read at parse). */
static int parse_input(const json_t *v, const job_env *env, mreq *r, int i, job_problem *pb)
{
    char field[32];
    snprintf(field, sizeof field, r->reproject ? "input" : "inputs[%d]", i);
    if (!json_is_string(v)) {
        jobkind_problem(pb, 400, field, "'%s' must be a string", field);
        return -1;
    }
    const dataset *ds = NULL;
    if (jobkind_resolve_input(env, json_string_value(v), field, &ds, r->paths[i], pb))
        return -1;
    int hdu = 0;
    if (ds) {
        if (ds->kind != DS_IMAGE) {
            jobkind_problem(pb, 422, field, "dataset '%s' is a %s: a %s takes 2-D images",
                            ds->name, ds_kind_name(ds->kind),
                            r->reproject ? "reprojection" : "mosaic");
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
    }
    skywcs_image_check chk;
    char e[256] = "";
    int rc = mos_read_header(r->paths[i], hdu, &r->hdrs[i], &chk, e, sizeof e);
    if (rc == TESS_ENOMEM) {
        jobkind_problem(pb, 500, field, "out of memory");
        return -1;
    }
    if (rc && !ds)
        return input_file_problem(rc, &chk, e, field, pb);
    r->names[i] = strdup(json_string_value(v));
    if (!r->names[i]) {
        jobkind_problem(pb, 500, field, "out of memory");
        return -1;
    }
    r->inputs[i] = (mos_input){ r->paths[i], r->names[i], hdu };
    return 0;
}

/* The inputs of the body: `in` is the "inputs" array (NULL when absent); a reprojection's
 * single "input" comes as a one-element array and is named "input" in problems. */
static int parse_inputs(const json_t *in, const job_env *env, mreq *r, job_problem *pb)
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
    r->n = (int)json_array_size(in);
    r->inputs = calloc((size_t)r->n, sizeof(mos_input));
    r->paths = calloc((size_t)r->n, PATH_MAX);
    r->names = calloc((size_t)r->n, sizeof(char *));
    r->hdrs = calloc((size_t)r->n, sizeof(mos_header));
    if (!r->inputs || !r->paths || !r->names || !r->hdrs) {
        jobkind_problem(pb, 500, "inputs", "out of memory");
        return -1;
    }
    for (int i = 0; i < r->n; i++)
        if (parse_input(json_array_get(in, (size_t)i), env, r, i, pb))
            return -1;
    return 0;
}

/* The inputs, from "inputs" or a reprojection's "input". */
static int parse_input_list(const json_t *j, const job_env *env, mreq *r, job_problem *pb)
{
    if (!r->reproject)
        return parse_inputs(json_object_get(j, "inputs"), env, r, pb);
    json_t *v = json_object_get(j, "input");
    if (!v) {
        jobkind_problem(pb, 400, "input", "'input' is required: a dataset name or a file path");
        return -1;
    }
    json_t *one = json_pack("[O]", v);
    if (!one) {
        jobkind_problem(pb, 500, "input", "out of memory");
        return -1;
    }
    int bad = parse_inputs(one, env, r, pb);
    json_decref(one);
    return bad;
}

/* target.header: FITS cards with a size of at most 2^31 pixels and a celestial WCS. */
static int parse_target_header(const json_t *h, mreq *r, job_problem *pb)
{
    if (!json_is_string(h)) {
        jobkind_problem(pb, 400, "target.header", "'target.header' must be a string of FITS "
                        "cards");
        return -1;
    }
    r->theader = strdup(json_string_value(h));
    if (!r->theader) {
        jobkind_problem(pb, 500, "target.header", "out of memory");
        return -1;
    }
    char why[256] = "out of memory";
    int rc = fitscard_parse(json_string_value(h), json_string_length(h), MAX_TARGET_CARDS,
                            &r->tcards, &r->tkeys, why, sizeof why);
    if (rc) {
        jobkind_problem(pb, rc == TESS_ENOMEM ? 500 : 400, "target.header", "%s", why);
        return -1;
    }
    char v[80];
    long sz[2];
    for (int k = 0; k < 2; k++) {
        char *end;
        if (!fitscard_get(r->tcards, r->tkeys, k ? "NAXIS2" : "NAXIS1", v, sizeof v)) {
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
        jobkind_problem(pb, 413, "target.header", "%ld x %ld pixels is more than 2^31", sz[0],
                        sz[1]);
        return -1;
    }
    skywcs *w = NULL, *c = NULL;
    char e[256] = "";
    rc = skywcs_parse(r->tcards, r->tkeys, &w, e, sizeof e);
    if (rc == TESS_EINVAL) {
        jobkind_problem(pb, 400, "target.header", "the target header has no usable WCS: %s", e);
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
    return 0;
}

/* target.auto: {"frame": ..., "projection": ...}, both optional. */
static int parse_target_auto(const json_t *a, mreq *r, job_problem *pb)
{
    static const char *const ak[] = { "frame", "projection", NULL };
    const char *s;
    if (!json_is_object(a)) {
        jobkind_problem(pb, 400, "target.auto", "'target.auto' must be an object");
        return -1;
    }
    if (jobkind_only_fields(a, ak, "target.auto", pb))
        return -1;
    if (opt_string(a, "frame", "target.auto.frame", &s, pb))
        return -1;
    if (s && (sky_frame_parse(s, &r->frame) != 0 || r->frame == SKY_FRAME_NONE)) {
        jobkind_problem(pb, 400, "target.auto.frame", "unknown frame '%.32s' (icrs, fk5, fk4, "
                        "galactic, ecliptic; helioprojective, stonyhurst, carrington for "
                        "images of the Sun)", s);
        return -1;
    }
    if (opt_string(a, "projection", "target.auto.projection", &s, pb))
        return -1;
    if (s) {
        int ok = strlen(s) == 3;
        for (int k = 0; ok && k < 3; k++)
            ok = s[k] >= 'A' && s[k] <= 'Z';
        if (!ok) {
            jobkind_problem(pb, 400, "target.auto.projection", "'%.16s' is not a three-letter "
                            "projection code such as TAN", s);
            return -1;
        }
        snprintf(r->proj, sizeof r->proj, "%s", s);
    }
    return 0;
}

/* "target" (optional): exactly one of "header" and "auto". */
static int parse_target(const json_t *t, mreq *r, job_problem *pb)
{
    static const char *const tk[] = { "header", "auto", NULL };
    if (!t)
        return 0;
    if (!json_is_object(t)) {
        jobkind_problem(pb, 400, "target", "'target' must be an object: {\"header\": ...} or "
                        "{\"auto\": {...}}");
        return -1;
    }
    if (jobkind_only_fields(t, tk, "target", pb))
        return -1;
    json_t *h = json_object_get(t, "header"), *a = json_object_get(t, "auto");
    if ((h != NULL) == (a != NULL)) {
        jobkind_problem(pb, 400, "target", "'target' needs exactly one of 'header' and 'auto'");
        return -1;
    }
    return h ? parse_target_header(h, r, pb) : parse_target_auto(a, r, pb);
}

/* "method", "combine", "match_background". */
static int parse_options(const json_t *j, mreq *r, job_problem *pb)
{
    const char *s;
    if (opt_string(j, "method", "method", &s, pb))
        return -1;
    if (s && rp_method_parse(s, &r->method) != 0) {
        jobkind_problem(pb, 400, "method", "unknown method '%.32s' (nearest, bilinear, bicubic, "
                        "lanczos3, exact)", s);
        return -1;
    }
    if (opt_string(j, "combine", "combine", &s, pb))
        return -1;
    if (s && mos_combine_parse(s, &r->combine) != 0) {
        jobkind_problem(pb, 400, "combine", "unknown combine '%.32s' (mean, sum, median, min, "
                        "max, first, last)", s);
        return -1;
    }
    json_t *mb = json_object_get(j, "match_background");
    if (!mb)
        return 0;
    if (json_is_boolean(mb)) {
        r->bg = json_is_true(mb) ? MOS_BG_PLANE : MOS_BG_NONE;
    } else if (json_is_string(mb) && strcmp(json_string_value(mb), "level") == 0) {
        r->bg = MOS_BG_LEVEL;
    } else {
        jobkind_problem(pb, 400, "match_background", "'match_background' must be true, false "
                        "or \"level\"");
        return -1;
    }
    return 0;
}

/* "output": {"name": NAME}; the name new unless the job was accepted already. */
static int parse_output(const json_t *j, const job_env *env, int accepted, mreq *r,
                        job_problem *pb)
{
    static const char *const ok[] = { "name", NULL };
    const char *s;
    json_t *o = json_object_get(j, "output");
    if (!o) {
        jobkind_problem(pb, 400, "output", "'output' is required: {\"name\": ...}");
        return -1;
    }
    if (!json_is_object(o)) {
        jobkind_problem(pb, 400, "output", "'output' must be an object {\"name\": ...}");
        return -1;
    }
    if (jobkind_only_fields(o, ok, "output", pb) || opt_string(o, "name", "output.name", &s, pb))
        return -1;
    if (!s) {
        jobkind_problem(pb, 400, "output.name", "'output.name' is required");
        return -1;
    }
    if (!accepted) {
        if (jobkind_check_new_name(env, s, "output.name", pb))
            return -1;
    } else if (strlen(s) >= sizeof r->output) {
        jobkind_problem(pb, 400, "output.name", "too long");
        return -1;
    }
    snprintf(r->output, sizeof r->output, "%s", s);
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

/* Input i's header, which parse could not read, read again to say why (a failure only:
 * no read is repeated for a request that goes on). */
static int header_problem(const mreq *r, int i, job_problem *pb)
{
    char field[32], e[256] = "";
    snprintf(field, sizeof field, r->reproject ? "input" : "inputs[%d]", i);
    mos_header h;
    skywcs_image_check chk;
    int rc = mos_read_header(r->inputs[i].path, r->inputs[i].hdu, &h, &chk, e, sizeof e);
    mos_header_release(&h);
    if (e[0] && rc != TESS_ENOMEM)
        jobkind_problem(pb, 422, field, "%s", e);
    else
        jobkind_problem(pb, rc == TESS_ENOMEM ? 500 : 422, field, rc == TESS_ENOMEM ?
                        "out of memory" : "no celestial WCS");
    return -1;
}

/* The automatic target, once, from the headers read at parse.  Before the job is accepted
 * an impossible or oversized one is refused; after, a failure leaves it to mos_plan,
 * which says why in the job's error as it did before the target was computed here. */
static int auto_target(mreq *r, int accepted, job_problem *pb)
{
    for (int i = 0; i < r->n; i++)
        if (!r->hdrs[i].cards)
            return accepted ? 0 : header_problem(r, i, pb);
    size_t n = r->n > 0 ? (size_t)r->n : 1;
    skywcs **ws = calloc(n, sizeof(skywcs *));
    long *nx = calloc(n, sizeof(long)), *ny = calloc(n, sizeof(long));
    int rc = 0;
    if (!ws || !nx || !ny) {
        jobkind_problem(pb, 500, "inputs", "out of memory");
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < r->n; i++) {
        ws[i] = r->hdrs[i].cel;
        nx[i] = r->hdrs[i].nx;
        ny[i] = r->hdrs[i].ny;
    }
    char e[256] = "";
    int mr = rc ? 0 : mos_auto_target(r->n, ws, nx, ny, r->frame, r->proj, &r->acards,
                                      &r->akeys, &r->anx, &r->any, e, sizeof e);
    if (rc == 0 && mr != 0) {
        free(r->acards);
        r->acards = NULL;
        if (!accepted || mr == TESS_ENOMEM) {
            jobkind_problem(pb, mr == TESS_ENOMEM ? 500 : 422, "target.auto",
                            "no automatic target: %s", e);
            rc = -1;
        }
    } else if (rc == 0 && !accepted && (double)r->anx * (double)r->any > (double)(1L << 31)) {
        double sep = max_centre_separation(r->n, ws, nx, ny);
        if (sep > 30.0)
            jobkind_problem(pb, 413, "target.auto", "the mosaic would be %ld x %ld pixels, "
                            "more than 2^31: the inputs' centres are up to %.1f degrees apart "
                            "on the sky; mosaic inputs that are near each other, or give "
                            "target.header", r->anx, r->any, sep);
        else
            jobkind_problem(pb, 413, "target.auto", "the mosaic would be %ld x %ld pixels, "
                            "more than 2^31", r->anx, r->any);
        rc = -1;
    }
    free(ws);
    free(nx);
    free(ny);
    return rc;
}

/* The whole body.  `reproject`: the "reproject" type, a mosaic of the one image "input"
 * onto the required "target", each output pixel the input's reprojected value (combine
 * "first": no arithmetic on it). */
static int parse_body(const json_t *j, const job_env *env, int accepted, mreq *r,
                      job_problem *pb)
{
    r->method = RP_BILINEAR;
    r->combine = r->reproject ? MOS_FIRST : MOS_MEAN;
    r->bg = MOS_BG_NONE;
    if (!json_is_object(j)) {
        jobkind_problem(pb, 400, "", "the body must be a JSON object");
        return -1;
    }
    static const char *const known[] = { "type", "inputs", "target", "method", "combine",
                                         "match_background", "output", NULL };
    static const char *const known_rp[] = { "type", "input", "target", "method", "output",
                                            NULL };
    if (jobkind_only_fields(j, r->reproject ? known_rp : known, "", pb))
        return -1;
    const char *s;
    if (opt_string(j, "type", "type", &s, pb))
        return -1;
    const char *type = r->reproject ? "reproject" : "mosaic";
    if (!s || strcmp(s, type) != 0) {
        jobkind_problem(pb, 400, "type", "'type' must be \"%s\"", type);
        return -1;
    }
    if (r->reproject && !json_object_get(j, "target")) {
        jobkind_problem(pb, 400, "target", "'target' is required: {\"header\": FITS cards} or "
                        "{\"auto\": {\"frame\": ..., \"projection\": ...}}");
        return -1;
    }
    if (parse_input_list(j, env, r, pb) || parse_target(json_object_get(j, "target"), r, pb) ||
        parse_options(j, r, pb) || parse_output(j, env, accepted, r, pb))
        return -1;
    return r->tcards ? 0 : auto_target(r, accepted, pb);
}

static int parse_kind(const json_t *j, const job_env *env, int accepted, int reproject,
                      void **req, job_problem *pb)
{
    mreq *r = calloc(1, sizeof *r);
    if (!r) {
        jobkind_problem(pb, 500, NULL, "out of memory");
        return -1;
    }
    r->reproject = reproject;
    if (parse_body(j, env, accepted, r, pb) != 0) {
        mreq_free(r);
        return -1;
    }
    *req = r;
    return 0;
}

static int mosaic_parse(const json_t *j, const job_env *env, int accepted, void **req,
                        job_problem *pb)
{
    return parse_kind(j, env, accepted, 0, req, pb);
}

static int reproject_parse(const json_t *j, const job_env *env, int accepted, void **req,
                           job_problem *pb)
{
    return parse_kind(j, env, accepted, 1, req, pb);
}

static void fill_spec(const mreq *r, mos_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->ninputs = r->n;
    sp->inputs = r->inputs;
    sp->headers = r->hdrs;
    sp->target_cards = r->tcards;
    sp->target_nkeys = r->tkeys;
    sp->auto_cards = r->acards;
    sp->auto_nkeys = r->akeys;
    sp->auto_nx = r->anx;
    sp->auto_ny = r->any;
    sp->auto_frame = r->frame;
    snprintf(sp->auto_proj, sizeof sp->auto_proj, "%s", r->proj);
    sp->method = r->method;
    sp->combine = r->combine;
    sp->bg = r->bg;
}

/* The target as the stored body gives it: the header as given, or "auto" with the frame
 * and projection asked for (none: the defaults, decided from the headers at each parse). */
static json_t *target_json(const mreq *r)
{
    if (r->theader)
        return json_pack("{s:s}", "header", r->theader);
    json_t *a = json_object();
    if (a && r->frame != SKY_FRAME_NONE &&
        json_object_set_new(a, "frame", json_string(sky_frame_name(r->frame))) != 0) {
        json_decref(a);
        return NULL;
    }
    if (a && r->proj[0] && json_object_set_new(a, "projection", json_string(r->proj)) != 0) {
        json_decref(a);
        return NULL;
    }
    return a ? json_pack("{s:o}", "auto", a) : NULL;
}

/* req_json: type, input(s) as given, target, method, combine and match_background (not for
 * a reprojection, which has neither), output. */
static json_t *mreq_json(const void *req)
{
    const mreq *r = req;
    json_t *in = r->reproject ? json_string(r->names[0]) : json_array();
    for (int i = 0; in && !r->reproject && i < r->n; i++)
        if (json_array_append_new(in, json_string(r->names[i])) != 0) {
            json_decref(in);
            in = NULL;
        }
    json_t *bg = r->bg == MOS_BG_LEVEL ? json_string("level") : json_boolean(r->bg == MOS_BG_PLANE);
    json_t *o = NULL;
    if (r->reproject)
        o = json_pack("{s:s, s:o, s:o, s:s, s:{s:s}}", "type", "reproject", "input", in,
                      "target", target_json(r), "method", rp_method_name(r->method), "output",
                      "name", r->output);
    else
        o = json_pack("{s:s, s:o, s:o, s:s, s:s, s:o, s:{s:s}}", "type", "mosaic", "inputs",
                      in, "target", target_json(r), "method", rp_method_name(r->method),
                      "combine", mos_combine_name(r->combine), "match_background", bg,
                      "output", "name", r->output);
    if (r->reproject)
        json_decref(bg);
    return o;
}

typedef struct mjob {
    mosaic *m;
    char output[128];
} mjob;

static int mosaic_plan(const void *req, const job_env *env, const char *workdir,
                       job_plan *out, char *err, size_t errlen)
{
    const mreq *r = req;
    memset(out, 0, sizeof *out);
    mjob *mj = calloc(1, sizeof *mj);
    if (!mj) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    snprintf(mj->output, sizeof mj->output, "%s", r->output);
    mos_spec sp;
    fill_spec(r, &sp);
    sp.max_block_bytes = (double)env->cfg->jobs_memory_mb * 1048576.0;
    int rc = mos_plan(&sp, workdir, env->threads, &mj->m, err, errlen);
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

/* What mos_plan (without a work directory) and mos_estimate say the mosaic needs.  A
 * request that cannot be planned gets no figures: the job fails when it runs, as it did
 * before estimates existed, with the planner's reason. */
static int mosaic_estimate(const void *req, const job_env *env, job_cost *c, job_problem *pb)
{
    memset(c, 0, sizeof *c);
    mos_spec sp;
    fill_spec(req, &sp);
    mosaic *m = NULL;
    char e[256];
    int rc = mos_plan(&sp, NULL, env->threads, &m, e, sizeof e);
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
    .parse = mosaic_parse,
    .req_free = mreq_free,
    .req_json = mreq_json,
    .plan = mosaic_plan,
    .run_block = mosaic_run_block,
    .finish = mosaic_finish,
    .release = mosaic_release,
    .estimate = mosaic_estimate,
};

const job_kind job_kind_reproject = {
    .type = "reproject",
    .parse = reproject_parse,
    .req_free = mreq_free,
    .req_json = mreq_json,
    .plan = mosaic_plan,
    .run_block = mosaic_run_block,
    .finish = mosaic_finish,
    .release = mosaic_release,
    .estimate = mosaic_estimate,
};
