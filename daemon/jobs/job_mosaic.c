/* The "mosaic" and "reproject" job types: the body parsed into a typed request (each
 * input's header read once) and the job_kind glue over engine/mosaic. */
#include "daemon/jobs/job_mosaic.h"
#include "engine/fits/fitscard.h"
#include "engine/mosaic/mosaic.h"
#include "engine/base/error.h"
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/collection/colregion.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cards a target header may have at most. */
#define MAX_TARGET_CARDS 10000
/* The most members a job over a collection may take (each header is read at parse). */
#define COLJOB_MAX_MEMBERS 4096

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
    char *coll;            /* inputs from this collection (its members in names), or NULL */
    json_t *region;        /* the region the members were selected by, as stored */
    double minscale;       /* the finest pixel scale of the members (degrees) */
    col_region reg;
    double *bg_offsets;    /* n: the members' background offsets when the collection
                              matches backgrounds (chosen at submit, stored), or NULL */
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
    free(r->coll);
    free(r->bg_offsets);
    json_decref(r->region);
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

/* Input i, resolved to r->paths[i] (ds its dataset or NULL for a plain file): its header
 * read once into r->hdrs[i], its name kept.  A dataset's header that cannot be read is
 * left unread here (the automatic target or mos_plan says why, as they did before headers
 * were read at parse). */
static int read_input(mreq *r, int i, const dataset *ds, int hdu, const char *name,
                      const char *field, job_problem *pb)
{
    skywcs_image_check chk;
    char e[256] = "";
    int rc = mos_read_header(r->paths[i], hdu, &r->hdrs[i], &chk, e, sizeof e);
    if (rc == TESS_ENOMEM) {
        jobkind_problem(pb, 500, field, "out of memory");
        return -1;
    }
    if (rc && !ds)
        return input_file_problem(rc, &chk, e, field, pb);
    r->names[i] = strdup(name);
    if (!r->names[i]) {
        jobkind_problem(pb, 500, field, "out of memory");
        return -1;
    }
    r->inputs[i] = (mos_input){ r->paths[i], r->names[i], hdu, 0.0 };
    return 0;
}

/* Input i, the string v: resolved, its catalog entry or file checked, its header read
 * (read_input). */
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
    return read_input(r, i, ds, hdu, json_string_value(v), field, pb);
}

/* Room for n inputs in r. */
static int alloc_inputs(mreq *r, int n, job_problem *pb)
{
    r->n = n;
    r->inputs = calloc((size_t)n, sizeof(mos_input));
    r->paths = calloc((size_t)n, PATH_MAX);
    r->names = calloc((size_t)n, sizeof(char *));
    r->hdrs = calloc((size_t)n, sizeof(mos_header));
    if (!r->inputs || !r->paths || !r->names || !r->hdrs) {
        jobkind_problem(pb, 500, "inputs", "out of memory");
        return -1;
    }
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
    if (alloc_inputs(r, (int)json_array_size(in), pb))
        return -1;
    for (int i = 0; i < r->n; i++)
        if (parse_input(json_array_get(in, (size_t)i), env, r, i, pb))
            return -1;
    return 0;
}

/* "region": exactly one of {"circle": [ra, dec, radius]}, {"polygon": [ra1, dec1, ...]},
 * {"range": [ra_min, ra_max, dec_min, dec_max]} (degrees, ICRS), into r->reg, and kept as
 * given (numbers as reals) in r->region for the stored body. */
static int parse_region(const json_t *g, const char *field, mreq *r, job_problem *pb)
{
    static const struct {
        const char *key;
        col_region_kind kind;
    } kinds[] = { { "circle", COL_REGION_CIRCLE }, { "polygon", COL_REGION_POLYGON },
                  { "range", COL_REGION_RANGE } };
    const char *usage = "{\"circle\": [ra, dec, radius]}, {\"polygon\": [ra1, dec1, ...]} or "
                        "{\"range\": [ra_min, ra_max, dec_min, dec_max]} (degrees)";
    if (!g) {
        jobkind_problem(pb, 400, field, "'%s' is required: %s", field, usage);
        return -1;
    }
    const char *key = json_is_object(g) && json_object_size(g) == 1 ? json_object_iter_key(
        json_object_iter((json_t *)g)) : NULL;
    int k = -1;
    for (int i = 0; key && i < 3; i++)
        if (strcmp(key, kinds[i].key) == 0)
            k = i;
    json_t *a = k >= 0 ? json_object_get(g, key) : NULL;
    if (k < 0 || !json_is_array(a) || json_array_size(a) > 2 * COL_POLY_MAX) {
        jobkind_problem(pb, 400, field, "'%s' must be %s", field, usage);
        return -1;
    }
    double v[2 * COL_POLY_MAX];
    int n = (int)json_array_size(a);
    for (int i = 0; i < n; i++) {
        json_t *x = json_array_get(a, (size_t)i);
        if (!json_is_number(x)) {
            jobkind_problem(pb, 400, field, "'%s.%s' must be an array of numbers", field, key);
            return -1;
        }
        v[i] = json_number_value(x);
    }
    const char *why = col_region_make(&r->reg, kinds[k].kind, v, n);
    if (why) {
        jobkind_problem(pb, 400, field, "'%s.%s': %s", field, key, why);
        return -1;
    }
    json_t *nums = json_array();
    for (int i = 0; nums && i < n; i++)
        if (json_array_append_new(nums, json_real(v[i])) != 0) {
            json_decref(nums);
            nums = NULL;
        }
    r->region = nums ? json_pack("{s:o}", key, nums) : NULL;
    if (!r->region) {
        jobkind_problem(pb, 500, field, "out of memory");
        return -1;
    }
    return 0;
}

/* The relpaths of c's usable members that overlap r->reg, in the index's order (by
 * relpath), into *out (*n of them, malloc'd; NULL when there are none or more than
 * `max`); the finest pixel scale into r->minscale.  Returns 0, or -1 out of memory. */
static int select_members(collection *c, mreq *r, int max, char ***out, int *n)
{
    int count = 0, kept = 0, bad = 0;
    char **rel = NULL;
    r->minscale = INFINITY;
    pthread_rwlock_rdlock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (m->error || !col_region_overlaps(&r->reg, m))
            continue;
        count++;
        if (m->pixscale < r->minscale)
            r->minscale = m->pixscale;
    }
    if (count <= max && count > 0) {
        rel = calloc((size_t)count, sizeof(char *));
        bad = !rel;
        for (int i = 0; !bad && i < c->n; i++) {
            const col_member *m = &c->m[i];
            if (m->error || !col_region_overlaps(&r->reg, m))
                continue;
            if (kept < count && !(rel[kept++] = strdup(m->relpath)))
                bad = 1;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    for (int i = 0; bad && rel && i < kept; i++)
        free(rel[i]);
    if (bad) {
        free(rel);
        return -1;
    }
    *out = rel;
    *n = count;
    return 0;
}

static void free_names(char **v, int n)
{
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* "inputs" (a reprojection's "input") as {"collection": NAME, "region": {...}}: the members
 * of the collection whose footprints overlap the region (members the index holds an error
 * for are skipped), selected once at submit and kept in the stored body as "members"
 * (relpaths), which an accepted job's parse reads instead of selecting again, so that a
 * restart plans the same inputs. */
static int parse_collection(const json_t *o, const job_env *env, int accepted, mreq *r,
                            job_problem *pb)
{
    static const char *const known[] = { "collection", "region", "members", "bg_offsets",
                                         NULL };
    const char *in = r->reproject ? "input" : "inputs";
    char f[40], fr[40], fm[40];
    snprintf(f, sizeof f, "%s.collection", in);
    snprintf(fr, sizeof fr, "%s.region", in);
    snprintf(fm, sizeof fm, "%s.members", in);
    const char *name;
    if (jobkind_only_fields(o, known, in, pb) || opt_string(o, "collection", f, &name, pb))
        return -1;
    if (!name) {
        jobkind_problem(pb, 400, f, "'%s' is required: the name of a collection", f);
        return -1;
    }
    collection *c = env->collections ? colset_find(env->collections, name) : NULL;
    if (!c) {
        jobkind_problem(pb, 404, f, "no collection named '%.64s'", name);
        return -1;
    }
    r->coll = strdup(name);
    if (!r->coll) {
        jobkind_problem(pb, 500, f, "out of memory");
        return -1;
    }
    if (parse_region(json_object_get(o, "region"), fr, r, pb))
        return -1;
    json_t *mem = json_object_get(o, "members"), *bgo = json_object_get(o, "bg_offsets");
    if (bgo && !accepted) {
        jobkind_problem(pb, 400, in, "'%s.bg_offsets' is written by the server (the "
                        "collection's background offsets of the members)", in);
        return -1;
    }
    if (mem && !accepted) {
        jobkind_problem(pb, 400, fm, "'%s' is written by the server (the members the region "
                        "selects); give the collection and the region", fm);
        return -1;
    }
    char **rel = NULL;
    int n = 0;
    if (mem) {
        if (!json_is_array(mem) || json_array_size(mem) < 1 ||
            json_array_size(mem) > COLJOB_MAX_MEMBERS) {
            jobkind_problem(pb, 400, fm, "'%s' must be a non-empty array of at most %d "
                            "member paths", fm, COLJOB_MAX_MEMBERS);
            return -1;
        }
        n = (int)json_array_size(mem);
        rel = calloc((size_t)n, sizeof(char *));
        for (int i = 0; rel && i < n; i++) {
            const char *s = json_string_value(json_array_get(mem, (size_t)i));
            if (!s) {
                free_names(rel, n);
                jobkind_problem(pb, 400, fm, "'%s' must be an array of strings", fm);
                return -1;
            }
            if (!(rel[i] = strdup(s))) {
                free_names(rel, n);
                rel = NULL;
            }
        }
        r->minscale = NAN;
    } else {
        int max = COLJOB_MAX_MEMBERS < MOS_MAX_INPUTS ? COLJOB_MAX_MEMBERS : MOS_MAX_INPUTS;
        if (select_members(c, r, max, &rel, &n) != 0) {
            jobkind_problem(pb, 500, in, "out of memory");
            return -1;
        }
        if (n == 0) {
            jobkind_problem(pb, 422, fr, "the region overlaps no usable member of collection "
                            "'%.64s'", name);
            return -1;
        }
        if (n > max) {
            jobkind_problem(pb, 413, fr, "the region overlaps %d members of collection "
                            "'%.64s': one job takes at most %d; give a smaller region", n,
                            name, max);
            return -1;
        }
    }
    if (!rel || alloc_inputs(r, n, pb)) {
        free_names(rel, n);
        jobkind_problem(pb, 500, in, "out of memory");
        return -1;
    }
    /* The offsets: as stored for an accepted job, else the collection's now (the same
     * members and offsets after a restart). */
    if (bgo && (!json_is_array(bgo) || (int)json_array_size(bgo) != n)) {
        free_names(rel, n);
        jobkind_problem(pb, 400, in, "'%s.bg_offsets' must hold one number a member", in);
        return -1;
    }
    if (c->match_background || bgo) {
        r->bg_offsets = calloc((size_t)n, sizeof(double));
        if (!r->bg_offsets) {
            free_names(rel, n);
            jobkind_problem(pb, 500, in, "out of memory");
            return -1;
        }
        for (int i = 0; bgo && i < n; i++)
            r->bg_offsets[i] = json_number_value(json_array_get(bgo, (size_t)i));
        if (!bgo && colbg_offsets(c, rel, n, r->bg_offsets) != 0) {
            free_names(rel, n);
            jobkind_problem(pb, 503, f, "collection '%.64s': its background offsets are "
                            "being solved; retry later", name);
            return -1;
        }
    }
    int bad = 0;
    for (int i = 0; !bad && i < n; i++) {
        char fi[64];
        snprintf(fi, sizeof fi, "%s[%d]", fm, i);
        if (collection_member_path(env->collections, c, rel[i], r->paths[i], PATH_MAX) != 0) {
            jobkind_problem(pb, 422, fi, "'%.200s' is no longer a usable member of collection "
                            "'%.64s'", rel[i], name);
            bad = 1;
        } else {
            bad = read_input(r, i, NULL, c->hdu, rel[i], fi, pb) != 0;
            if (!bad && r->bg_offsets)
                r->inputs[i].offset = r->bg_offsets[i];
        }
    }
    free_names(rel, n);
    return bad ? -1 : 0;
}

/* The inputs, from "inputs" or a reprojection's "input": a list, one input, or the members
 * of a collection that overlap a region (parse_collection). */
static int parse_input_list(const json_t *j, const job_env *env, int accepted, mreq *r,
                            job_problem *pb)
{
    json_t *v = json_object_get(j, r->reproject ? "input" : "inputs");
    if (json_is_object(v))
        return parse_collection(v, env, accepted, r, pb);
    if (!r->reproject)
        return parse_inputs(v, env, r, pb);
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

/* target {"region": true}: a TAN grid centred on the region, north up, east left, at the
 * finest pixel scale of the selected members, just covering the region (its circle, or
 * the circle about its centre through its farthest vertex), written as a target header so
 * that the stored body holds the grid itself. */
static int region_target(mreq *r, job_problem *pb)
{
    const col_region *g = &r->reg;
    double ra = g->ra, dec = g->dec, half = g->r;
    if (!g->circle) {
        double x = 0, y = 0, z = 0, d2r = M_PI / 180;
        for (int i = 0; i < g->n; i++) {
            double a = g->poly[2 * i] * d2r, d = g->poly[2 * i + 1] * d2r;
            x += cos(d) * cos(a);
            y += cos(d) * sin(a);
            z += sin(d);
        }
        ra = fmod(atan2(y, x) / d2r + 360.0, 360.0);
        dec = atan2(z, sqrt(x * x + y * y)) / d2r;
        half = 0;
        for (int i = 0; i < g->n; i++)
            half = fmax(half, col_distance(ra, dec, g->poly[2 * i], g->poly[2 * i + 1]));
    }
    if (!(r->minscale > 0) || !isfinite(r->minscale)) {
        jobkind_problem(pb, 422, "target.region", "the members selected have no pixel scale "
                        "in the index: give target.header or target.auto");
        return -1;
    }
    if (!(half < 80.0)) {
        jobkind_problem(pb, 422, "target.region", "the region is too large for a TAN grid "
                        "(more than 80 degrees from its centre): give target.header");
        return -1;
    }
    /* the grid's half width on the tangent plane, in pixels of the finest member */
    double w = tan(half * M_PI / 180) * 180 / M_PI / r->minscale;
    double nx = 2.0 * ceil(w) + 1.0;
    if (nx * nx > (double)(1L << 31)) {
        jobkind_problem(pb, 413, "target.region", "the region at the members' finest pixel "
                        "scale (%.3g arcsec) would be %.0f x %.0f pixels, more than 2^31",
                        r->minscale * 3600, nx, nx);
        return -1;
    }
    char h[800];
    snprintf(h, sizeof h, "NAXIS   = 2\nNAXIS1  = %.0f\nNAXIS2  = %.0f\n"
             "CTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\nCRVAL1  = %.12f\nCRVAL2  = %.12f\n"
             "CRPIX1  = %.1f\nCRPIX2  = %.1f\nCDELT1  = %.15g\nCDELT2  = %.15g\n"
             "CUNIT1  = 'deg'\nCUNIT2  = 'deg'\nRADESYS = 'ICRS'\n", nx, nx, ra, dec,
             (nx + 1) / 2, (nx + 1) / 2, -r->minscale, r->minscale);
    json_t *s = json_string(h);
    if (!s) {
        jobkind_problem(pb, 500, "target.region", "out of memory");
        return -1;
    }
    int rc = parse_target_header(s, r, pb);
    json_decref(s);
    return rc;
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

/* "target" (optional): exactly one of "header", "auto" and, for inputs from a collection,
 * "region": true. */
static int parse_target(const json_t *t, mreq *r, job_problem *pb)
{
    static const char *const tk[] = { "header", "auto", "region", NULL };
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
    json_t *g = json_object_get(t, "region");
    if ((h != NULL) + (a != NULL) + (g != NULL) != 1) {
        jobkind_problem(pb, 400, "target", "'target' needs exactly one of 'header', 'auto' "
                        "and 'region'");
        return -1;
    }
    if (g) {
        if (!json_is_true(g)) {
            jobkind_problem(pb, 400, "target.region", "'target.region' must be true");
            return -1;
        }
        if (!r->coll || isnan(r->minscale)) {
            jobkind_problem(pb, 400, "target.region", "'target.region' takes the region of "
                            "inputs from a collection: {\"collection\": ..., \"region\": ...}");
            return -1;
        }
        return region_target(r, pb);
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
    if (parse_input_list(j, env, accepted, r, pb) || parse_target(json_object_get(j, "target"), r, pb) ||
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

/* req_json: type, input(s) as given (from a collection: its name, the region and the
 * members selected), target (a region's as its header), method, combine and match_background (not for
 * a reprojection, which has neither), output. */
static json_t *mreq_json(const void *req)
{
    const mreq *r = req;
    json_t *in = r->reproject && !r->coll ? json_string(r->names[0]) : json_array();
    for (int i = 0; in && (!r->reproject || r->coll) && i < r->n; i++)
        if (json_array_append_new(in, json_string(r->names[i])) != 0) {
            json_decref(in);
            in = NULL;
        }
    if (in && r->coll)
        in = json_pack("{s:s, s:O, s:o}", "collection", r->coll, "region", r->region,
                       "members", in);
    json_t *bgo = in && r->coll && r->bg_offsets ? json_array() : NULL;
    for (int i = 0; bgo && i < r->n; i++)
        json_array_append_new(bgo, json_real(r->bg_offsets[i]));
    if (bgo)
        json_object_set_new(in, "bg_offsets", bgo);
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

/* The two types differ only in how their body is read. */
#define MOSAIC_KIND(TYPE, PARSE)                                                          \
    {                                                                                     \
        .type = TYPE, .parse = PARSE, .req_free = mreq_free, .req_json = mreq_json,       \
        .plan = mosaic_plan, .run_block = mosaic_run_block, .finish = mosaic_finish,      \
        .release = mosaic_release, .estimate = mosaic_estimate,                           \
    }

const job_kind job_kind_mosaic = MOSAIC_KIND("mosaic", mosaic_parse);
const job_kind job_kind_reproject = MOSAIC_KIND("reproject", reproject_parse);
