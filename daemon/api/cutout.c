/* GET and POST /api/v1/cutout: a reprojected image of a dataset on any celestial WCS. */
#include "daemon/api/cutout.h"
#include "daemon/api/handlers.h"
#include "daemon/cache/planes.h"
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/collection/colmembers.h"
#include "engine/mosaic/coadd.h"
#include "engine/fits/fitscard.h"
#include "engine/sky/reproject.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/hash.h"

#include <ctype.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------------------- */

/* A lookup that hides "cmap" (FITS answers have no colours: hips2fits' clients send one
 * all the same). */
typedef struct no_cmap {
    param_lookup get;
    void *cls;
} no_cmap;

static const char *no_cmap_get(void *cls, const char *key)
{
    no_cmap *n = cls;
    return strcmp(key, "cmap") == 0 ? NULL : n->get(n->cls, key);
}

/* The prefix of the HiPS IDs (creator_did) our properties files give. */
#define CUTOUT_HIPS_ID_PREFIX "ivo://tessera/"

/* The parameters both cutout forms share: dataset (or hips), method, max_coord_error,
 * format, plane, rendering. */
static int common_cutout(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    const char *s = get(cls, "dataset"), *h = get(cls, "hips");
    if (h && strncmp(h, CUTOUT_HIPS_ID_PREFIX, strlen(CUTOUT_HIPS_ID_PREFIX)) == 0)
        h += strlen(CUTOUT_HIPS_ID_PREFIX);
    if (s && h && strcmp(s, h) != 0)
        return param_fail(e, "hips", "hips ('%.40s') and dataset ('%.40s') name two datasets: "
                          "give one", h, s);
    const char *which = s ? "dataset" : "hips";
    if (!s)
        s = h;
    if (!s || !*s)
        return param_fail(e, "dataset", "dataset (or hips) is required: a dataset name");
    if (strlen(s) >= sizeof(p->dataset))
        return param_fail(e, which, "%s name is too long", which);
    snprintf(p->dataset, sizeof(p->dataset), "%s", s);
    p->method = RP_BILINEAR;
    if ((s = get(cls, "method")) && rp_method_parse(s, &p->method))
        return param_fail(e, "method", "method must be nearest, bilinear, bicubic, lanczos3 or "
                          "exact, got '%.40s'", s);
    p->max_coord_error = 0.001;
    if (param_opt_double(get, cls, "max_coord_error", 0, 10, &p->max_coord_error, e))
        return TESS_EINVAL;
    p->solar_surface = SOLAR_SPHERE;
    if ((s = get(cls, "solar_surface"))) {
        if (strcmp(s, "screen") == 0)
            p->solar_surface = SOLAR_SCREEN;
        else if (strcmp(s, "sphere") != 0)
            return param_fail(e, "solar_surface", "solar_surface must be sphere or screen, "
                              "got '%.40s'", s);
    }
    p->format = FMT_PNG;
    if ((s = get(cls, "format"))
        && (out_format_parse(s, &p->format)
            || (p->format != FMT_PNG && p->format != FMT_JPG && p->format != FMT_FITS)))
        return param_fail(e, "format", "format must be png, jpg or fits, got '%.40s'", s);
    p->plane = 0;
    if (param_plane(get, cls, &p->plane, e))
        return TESS_EINVAL;
    no_cmap nc = { get, cls };
    if (p->format == FMT_FITS)
        return params_render(no_cmap_get, &nc, &p->render, e);
    return params_render(get, cls, &p->render, e);
}

/* The parameters a `wcs` header replaces. */
static const char *const by_wcs[] = {"ra", "dec", "fov", "width", "height", "projection",
    "coordsys", "rotation_angle", NULL};

/* The query names of the projection parameters PV2_0 .. PV2_29. */
#define PV_NAMES "pv2_0", "pv2_1", "pv2_2", "pv2_3", "pv2_4", "pv2_5", "pv2_6", "pv2_7", \
    "pv2_8", "pv2_9", "pv2_10", "pv2_11", "pv2_12", "pv2_13", "pv2_14", "pv2_15", "pv2_16", \
    "pv2_17", "pv2_18", "pv2_19", "pv2_20", "pv2_21", "pv2_22", "pv2_23", "pv2_24", \
    "pv2_25", "pv2_26", "pv2_27", "pv2_28", "pv2_29"
static const char *const pv_names[SKYWCS_CUTOUT_PVN] = {PV_NAMES};

int cutout_parse_get(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    for (int m = 0; m < SKYWCS_CUTOUT_PVN; m++)
        p->pv[m] = NAN;
    if (common_cutout(get, cls, p, e))
        return TESS_EINVAL;
    if (get(cls, "wcs")) {
        for (int i = 0; by_wcs[i]; i++)
            if (get(cls, by_wcs[i]))
                return param_fail(e, by_wcs[i], "%s cannot go with wcs: the wcs header sets "
                                  "the target (NAXIS1, NAXIS2 and its WCS)", by_wcs[i]);
        for (int m = 0; m < SKYWCS_CUTOUT_PVN; m++)
            if (get(cls, pv_names[m]))
                return param_fail(e, pv_names[m], "%s cannot go with wcs: give PV2_%d as a "
                                  "card of the wcs header", pv_names[m], m);
        p->has_wcs = 1;
        return 0;
    }
    p->coordsys = SKY_FRAME_ICRS;
    const char *s = get(cls, "coordsys");
    if (s && sky_frame_parse(s, &p->coordsys) != 0)
        return param_fail(e, "coordsys", "coordsys must be icrs, fk5, fk4, galactic, ecliptic, "
                          "helioprojective, stonyhurst or carrington, got '%.40s'", s);
    /* Helioprojective angles are given in arcseconds, as solar data states them. */
    double unit = p->coordsys == SKY_FRAME_HELIOPROJECTIVE ? 3600.0 : 1.0;
    if (param_req_double(get, cls, "ra", -360 * unit, 360 * unit, &p->lon, e) ||
        param_req_double(get, cls, "dec", -90 * unit, 90 * unit, &p->lat, e) ||
        param_req_double(get, cls, "fov", 1e-9 * unit, 360 * unit, &p->fov, e) ||
        param_req_long(get, cls, "width", 1, 65536, &p->width, e) ||
        param_req_long(get, cls, "height", 1, 65536, &p->height, e))
        return TESS_EINVAL;
    p->lon /= unit;
    p->lat /= unit;
    p->fov /= unit;
    s = get(cls, "projection");
    if (!s)
        s = "TAN";
    if (strlen(s) != 3 || !isalpha((unsigned char)s[0]) || !isalpha((unsigned char)s[1]) ||
        !isalpha((unsigned char)s[2]))
        return param_fail(e, "projection", "projection must be a three-letter FITS code such as "
                          "TAN, SIN, CAR or AIT, got '%.40s'", s);
    for (int i = 0; i < 3; i++)
        p->projection[i] = (char)toupper((unsigned char)s[i]);
    p->projection[3] = '\0';
    p->rotation = 0;
    if (param_opt_double(get, cls, "rotation_angle", -360, 360, &p->rotation, e))
        return TESS_EINVAL;
    for (int m = 0; m < SKYWCS_CUTOUT_PVN; m++)
        if (param_opt_double(get, cls, pv_names[m], -DBL_MAX, DBL_MAX, &p->pv[m], e))
            return TESS_EINVAL;
    return 0;
}

/* Whether `k` can be a FITS keyword: 1 to 8 of A-Z, 0-9, '-', '_'. */
static int keyword_ok(const char *k)
{
    size_t n = strlen(k);
    return n >= 1 && n <= 8 && strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == n;
}

int cutout_wcs_cards(const char *text, char **cards, int *nkeys, param_error *e)
{
    *cards = NULL;
    *nkeys = 0;
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return param_fail(e, "wcs", "wcs must be a JSON object of FITS header cards "
                          "({\"NAXIS1\": 100, \"CTYPE1\": \"RA---TAN\", ...}): %.120s",
                          o ? "not an object" : jerr.text);
    }
    if (json_object_size(o) > CUTOUT_WCS_MAX_CARDS) {
        json_decref(o);
        return param_fail(e, "wcs", "wcs has more than %d cards", CUTOUT_WCS_MAX_CARDS);
    }
    fitscard_list l;
    fitscard_list_init(&l, CUTOUT_WCS_MAX_CARDS);
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, k, v) {
        if (!keyword_ok(k)) {
            rc = param_fail(e, "wcs", "wcs: '%.40s' is not a FITS keyword (1 to 8 of A-Z, "
                            "0-9, - and _)", k);
            break;
        }
        if (json_is_string(v)) {
            const char *sv = json_string_value(v);
            for (const char *c = sv; *c; c++)
                if ((unsigned char)*c < 32 || (unsigned char)*c > 126) {
                    rc = param_fail(e, "wcs", "wcs: the value of %s is not printable ASCII", k);
                    break;
                }
            if (rc)
                break;
            if (strcmp(k, "COMMENT") == 0 || strcmp(k, "HISTORY") == 0)
                fitscard_list_commentary(&l, k, sv);
            else
                fitscard_list_string(&l, k, sv, 8, NULL);
        } else if (json_is_boolean(v)) {
            fitscard_list_logical(&l, k, json_is_true(v), NULL);
        } else if (json_is_integer(v)) {
            fitscard_list_int(&l, k, json_integer_value(v), NULL);
        } else if (json_is_real(v)) {
            fitscard_list_real(&l, k, json_real_value(v), FITSCARD_EXACT, NULL);
        } else {
            rc = param_fail(e, "wcs", "wcs: the value of %s must be a string, number or "
                            "boolean", k);
            break;
        }
    }
    json_decref(o);
    if (rc) {
        fitscard_list_release(&l);
        return rc;
    }
    rc = fitscard_list_take(&l, cards, nkeys);
    if (rc == TESS_ENOMEM)
        return rc;
    if (rc)
        return param_fail(e, "wcs", "wcs: a card cannot be written");
    return 0;
}

int cutout_parse_post(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    return common_cutout(get, cls, p, e);
}

/* ---- the handlers -------------------------------------------------------------------- */

/* Everything the work function needs, parsed and validated on the HTTP thread. */
typedef struct cutout_job {
    const dataset *ds;    /* NULL for a collection */
    collection *col;      /* the collection cut from (colcut_work), or NULL */
    cutout_params p;
    char *cards;          /* target header: 80-character cards */
    int nkeys;
    skywcs *target;       /* 2-D celestial part of the target; owned */
    long width, height;
} cutout_job;

static void cutout_job_free(void *arg)
{
    cutout_job *j = arg;
    if (!j)
        return;
    free(j->cards);
    skywcs_free(j->target);
    free(j);
}

/* The engine's options of a cutout's reprojection: the method and grid bound asked for,
 * on the server's pool at the request's priority, stopped when its client leaves. */
static void reproject_options(hreq *r, const cutout_job *j, rp_options *o)
{
    rp_options_init(o);
    o->method = j->p.method;
    o->max_coord_error = j->p.max_coord_error;
    o->workers = r->srv->app->workers;
    o->priority = hreq_priority(r);
    o->cancel = &r->cancel;
}

/* Runs on a pool thread: take the source plane from the plane store (read once, shared
 * with tiles and other cutouts, float32 for 8/16-bit and float32 files), reproject (the
 * engine's other blocks go to the same pool as interactive helpers; this thread works on
 * blocks too, so a busy pool cannot deadlock it; no new block starts once the client has
 * gone), encode. */
static void cutout_work(hreq *r)
{
    cutout_job *j = r->work_arg;
    const dataset *d = j->ds;
    char err[256] = "";
    size_t nout = (size_t)j->width * (size_t)j->height;
    plane_view v;
    int rc = planestore_get(r->srv->app->planes, d, j->p.plane, 0, &v, err, sizeof(err));
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      d->name, err);
        return;
    }
    double *dst = malloc(nout * sizeof(double));
    if (!dst) {
        planestore_release(r->srv->app->planes, &v);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    rp_cube in = { (void *)v.plane->data, v.plane->dtype, d->nx, d->ny, 1 };
    rp_cube out = { dst, RP_F64, j->width, j->height, 1 };
    rp_options o;
    reproject_options(r, j, &o);
    /* The spherical screen is centred on the dataset's observer: mark a copy of its WCS. */
    skywcs *src = j->p.solar_surface == SOLAR_SCREEN ? skywcs_copy(d->cel) : NULL;
    if (j->p.solar_surface == SOLAR_SCREEN && !src) {
        planestore_release(r->srv->app->planes, &v);
        problem_reply(r, 500, NULL, "out of memory");
        goto done;
    }
    skywcs_set_solar_surface(src, SOLAR_SCREEN);
    long finite = rp_reproject(src ? src : d->cel, &in, j->target, &out, NULL, &o, err,
                               sizeof(err));
    skywcs_free(src);
    planestore_release(r->srv->app->planes, &v);
    if (finite == TESS_ECANCELED || (finite > 0 && hreq_cancelled(r))) {
        /* Stopped, or its client went as the last rows were done: nothing to encode. */
        hreq_reply_cancelled(r);
        goto done;
    }
    if (finite == TESS_ENOOVERLAP || finite == 0) {
        problem_reply(r, 422, NULL, "the target does not overlap dataset '%s'", d->name);
        goto done;
    }
    if (finite == TESS_ENOMEM) {
        problem_reply(r, 500, NULL, "out of memory");
        goto done;
    }
    if (finite < 0) {
        problem_reply(r, 422, NULL, "cannot reproject '%s' onto the target: %s", d->name, err);
        goto done;
    }
    reply_image(r, dst, j->width, j->height, j->p.format, &j->p.render, j->cards, j->nkeys);
done:
    free(dst);
}

/* ---- collections: a cutout across member images --------------------------------------- */

/* The most member images one cutout of a collection is made from (a larger region
 * answers 413: cut it in parts, or run a mosaic job). */
#define COLCUT_MAX_MEMBERS 64
/* The most bytes the combination of one cutout holds (mos_accum_bytes: MEDIAN keeps every
 * member's value of every pixel). */
#define COLCUT_MAX_ACCUM_BYTES (512.0 * 1024 * 1024)

/* The circle around the target grid (its centre, and the largest distance from there to
 * a corner or edge middle of the pixel edges), 180 degrees when a point has no sky
 * position.  Returns 0 or -1 (no position at the centre). */
static int target_circle(skywcs *t, long w, long h, double *ra, double *dec, double *rad)
{
    double x[9] = {(w - 1) / 2.0, -0.5, w - 0.5, w - 0.5, -0.5, (w - 1) / 2.0, w - 0.5,
                   (w - 1) / 2.0, -0.5};
    double y[9] = {(h - 1) / 2.0, -0.5, -0.5, h - 0.5, h - 0.5, -0.5, (h - 1) / 2.0,
                   h - 0.5, (h - 1) / 2.0};
    double lon[9], lat[9];
    if (skywcs_pix2sky(t, 9, x, y, lon, lat) || !isfinite(lon[0]) || !isfinite(lat[0]))
        return -1;
    *ra = lon[0];
    *dec = lat[0];
    *rad = 0.0;
    for (int k = 1; k < 9; k++) {
        double d = isfinite(lon[k]) && isfinite(lat[k]) ? col_distance(lon[0], lat[0], lon[k],
                                                                        lat[k]) : 180.0;
        *rad = d > *rad ? d : *rad;
    }
    return 0;
}

/* The part of the target grid member polygon `poly` may reach, as reproject_and_coadd
 * takes it (the box of its corners' target pixels) widened by COLCUT_BOX_MARGIN pixels
 * for curved edges: columns [*x0, *x0 + *w), rows [*y0, *y0 + *h), clipped to the grid;
 * the whole grid when a corner has no target pixel.  Returns 0, or 1 when the box misses
 * the grid. */
#define COLCUT_BOX_MARGIN 2
static int member_box(const cutout_job *j, const double *poly, long *x0, long *y0, long *w,
                      long *h)
{
    double lon[4], lat[4], x[4], y[4];
    for (int k = 0; k < 4; k++) {
        lon[k] = poly[2 * k];
        lat[k] = poly[2 * k + 1];
    }
    *x0 = *y0 = 0;
    *w = j->width;
    *h = j->height;
    if (skywcs_sky2pix(j->target, 4, lon, lat, x, y))
        return 0;
    double xl = INFINITY, xh = -INFINITY, yl = INFINITY, yh = -INFINITY;
    for (int k = 0; k < 4; k++) {
        if (!isfinite(x[k]) || !isfinite(y[k]))
            return 0;
        xl = x[k] < xl ? x[k] : xl;
        xh = x[k] > xh ? x[k] : xh;
        yl = y[k] < yl ? y[k] : yl;
        yh = y[k] > yh ? y[k] : yh;
    }
    double m = COLCUT_BOX_MARGIN;
    double bx0 = floor(xl + 0.5 - m), bx1 = ceil(xh + 0.5 + m);
    double by0 = floor(yl + 0.5 - m), by1 = ceil(yh + 0.5 + m);
    bx0 = bx0 > 0 ? bx0 : 0;
    by0 = by0 > 0 ? by0 : 0;
    bx1 = bx1 < (double)j->width ? bx1 : (double)j->width;
    by1 = by1 < (double)j->height ? by1 : (double)j->height;
    if (bx1 <= bx0 || by1 <= by0)
        return 1;
    *x0 = (long)bx0;
    *y0 = (long)by0;
    *w = (long)(bx1 - bx0);
    *h = (long)(by1 - by0);
    return 0;
}

/* The target's celestial WCS for its part at column x0, row y0 (CRPIX moved by them): a
 * copy of the target's cards with CRPIX1 and CRPIX2 replaced (or added).  NULL when out
 * of memory or refused. */
static skywcs *sub_target(const cutout_job *j, long x0, long y0)
{
    char *cards = malloc((size_t)(j->nkeys + 2) * 80 + 1);
    if (!cards)
        return NULL;
    memcpy(cards, j->cards, (size_t)j->nkeys * 80);
    int n = j->nkeys;
    for (int a = 0; a < 2; a++) {
        const char *key = a ? "CRPIX2" : "CRPIX1";
        double v = 0.0;   /* FITS: CRPIXj defaults to 0 */
        fitscard_value_real(cards, n, key, &v);
        int at = n;
        for (int k = 0; k < n; k++)
            if (strncmp(cards + (size_t)k * 80, key, 6) == 0 && cards[(size_t)k * 80 + 6] == ' ')
                at = k;
        if (fitscard_real(cards + (size_t)at * 80, key, v - (double)(a ? y0 : x0),
                          FITSCARD_EXACT, NULL)) {
            free(cards);
            return NULL;
        }
        n += at == n;
    }
    cards[(size_t)n * 80] = '\0';
    skywcs *full = NULL, *cel = NULL;
    char err[256];
    if (skywcs_parse(cards, n, &full, err, sizeof(err)) == 0)
        cel = skywcs_celestial(full);
    skywcs_free(full);
    free(cards);
    return cel;
}

/* Reprojects member `relpath` onto its part of the target (member_box; values and
 * footprint as float32) and adds it to `a` with the footprint as its weight, less its
 * background offset `bg`.  Returns 0 or -1 with the problem reply set. */
static int colcut_add(hreq *r, cutout_job *j, const char *relpath, double bg,
                      const double *poly, float *val, float *fp, mos_accum *a)
{
    long bx, by, bw, bh;
    if (member_box(j, poly, &bx, &by, &bw, &bh))
        return 0;   /* its corners fall outside the grid */
    skywcs *part = bx || by || bw != j->width || bh != j->height ? sub_target(j, bx, by) : NULL;
    if ((bx || by || bw != j->width || bh != j->height) && !part) {
        problem_reply(r, 500, NULL, "cannot make the target of member '%s'", relpath);
        return -1;
    }
    colset *s = r->srv->app->collections;
    char err[256] = "";
    const dataset *d;
    int rc = colmembers_get(s, j->col, relpath, &d, err, sizeof(err));
    if (rc) {
        skywcs_free(part);
        problem_reply(r, problem_read_status(rc, 500), NULL, "collection '%s': %s",
                      j->col->name, err);
        return -1;
    }
    if (!d->cel) {
        skywcs_free(part);
        colmembers_release(s, d);
        return 0;
    }
    plane_view v;
    if ((rc = planestore_get(r->srv->app->planes, d, 0, 0, &v, err, sizeof(err)))) {
        skywcs_free(part);
        colmembers_release(s, d);
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read member '%s' of "
                      "collection '%s': %s", relpath, j->col->name, err);
        return -1;
    }
    rp_cube in = { (void *)v.plane->data, v.plane->dtype, d->nx, d->ny, 1 };
    rp_cube out = { val, RP_F32, bw, bh, 1 };
    rp_options o;
    reproject_options(r, j, &o);
    long finite = rp_reproject(d->cel, &in, part ? part : j->target, &out, fp, &o, err,
                               sizeof(err));
    skywcs_free(part);
    planestore_release(r->srv->app->planes, &v);
    colmembers_release(s, d);
    if (finite == TESS_ECANCELED) {
        hreq_reply_cancelled(r);
        return -1;
    }
    if (finite == TESS_ENOMEM) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    if (finite == TESS_ENOOVERLAP || finite == 0)
        return 0;   /* the circle is wider than the grid: this one misses it */
    if (finite < 0) {
        problem_reply(r, 422, NULL, "cannot reproject member '%s' of collection '%s' onto "
                      "the target: %s", relpath, j->col->name, err);
        return -1;
    }
    for (long y = 0; y < bh; y++) {
        size_t src = (size_t)y * (size_t)bw;
        mos_accum_add(a, (size_t)(by + y) * (size_t)j->width + (size_t)bx, val + src, fp + src,
                      bw, bg, 0.0, bx);
    }
    return 0;
}

/* The values of a cutout of collection j->col into dst (j->width x j->height doubles,
 * FITS rows): the members whose footprint (the index's polygon) overlaps the circle
 * around the target, each reprojected onto it (rp_reproject, the method asked for; its
 * footprint the weight) and combined pixel by pixel with the collection's `combine`
 * (mos_accum, float32 rows), as reproject_and_coadd does.  Returns the number of finite
 * pixels (0: no member reaches the grid), or -1 with the problem reply set. */
static long colcut_values(hreq *r, cutout_job *j, double *dst)
{
    collection *c = j->col;
    double ra, dec, rad;
    if (target_circle(j->target, j->width, j->height, &ra, &dec, &rad)) {
        problem_reply(r, 422, NULL, "the target's centre has no sky position");
        return -1;
    }
    char **rel = NULL;
    double *polys = NULL;
    int n = 0, total = 0;
    if (collection_overlapping_circle(c, ra, dec, rad, COLCUT_MAX_MEMBERS, &rel, &polys, &n,
                                      &total)) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    mos_combine comb = collection_combine(c);
    size_t np = (size_t)j->width * (size_t)j->height;
    if (total > n || mos_accum_bytes(comb, np, n ? n : 1) > COLCUT_MAX_ACCUM_BYTES) {
        col_relpaths_free(rel, n);
        free(polys);
        problem_reply(r, 413, "fov", "the cutout overlaps %d member images of collection '%s': "
                      "at most %d are combined, in at most %.0f MiB; ask for a smaller region "
                      "or fewer pixels", total, c->name, COLCUT_MAX_MEMBERS,
                      COLCUT_MAX_ACCUM_BYTES / 1048576.0);
        return -1;
    }
    if (n == 0) {
        col_relpaths_free(rel, n);
        free(polys);
        return 0;
    }
    double bg[COLCUT_MAX_MEMBERS];   /* the members' offsets, of one solution */
    if (colbg_offsets(c, rel, n, bg)) {
        col_relpaths_free(rel, n);
        free(polys);
        handler_reply_unsolved(r, c);
        return -1;
    }
    mos_accum a;
    float *val = malloc(sizeof(float) * np), *fp = malloc(sizeof(float) * np);
    int failed = !val || !fp || mos_accum_init(&a, comb, np, n);
    if (failed)
        problem_reply(r, 500, NULL, "out of memory");
    for (int i = 0; i < n && !failed; i++)
        if (colcut_add(r, j, rel[i], bg[i], polys + 8 * (size_t)i, val, fp, &a)) {
            failed = 1;
            mos_accum_free(&a);
        }
    col_relpaths_free(rel, n);
    free(polys);
    long finite = -1;
    if (!failed) {
        mos_accum_result(&a, val, NULL);
        mos_accum_free(&a);
        finite = 0;
        for (size_t k = 0; k < np; k++) {
            dst[k] = (double)val[k];
            finite += isfinite(dst[k]) != 0;
        }
    }
    free(val);
    free(fp);
    return finite;
}

/* A cutout of a collection (colcut_values), encoded as asked. */
static void colcut_work(hreq *r)
{
    cutout_job *j = r->work_arg;
    double *dst = malloc(sizeof(double) * (size_t)j->width * (size_t)j->height);
    if (!dst) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    long finite = colcut_values(r, j, dst);
    if (finite == 0)
        problem_reply(r, 422, NULL, "the target does not overlap collection '%s'",
                      j->col->name);
    else if (finite > 0)
        reply_image(r, dst, j->width, j->height, j->p.format, &j->p.render, j->cards,
                    j->nkeys);
    free(dst);
}

long cutout_collection_values(hreq *r, collection *c, const char *cards, int nkeys, long w,
                              long h, rp_method method, double max_coord_error, double *dst)
{
    cutout_job j = {.col = c, .width = w, .height = h, .nkeys = nkeys};
    j.p.method = method;
    j.p.max_coord_error = max_coord_error;
    j.cards = (char *)cards;
    char err[256] = "";
    skywcs *full = NULL;
    if (skywcs_parse(cards, nkeys, &full, err, sizeof(err)) ||
        !(j.target = skywcs_celestial(full))) {
        skywcs_free(full);
        problem_reply(r, 500, NULL, "cannot make the grid: %s", err);
        return -1;
    }
    skywcs_free(full);
    long finite = colcut_values(r, &j, dst);
    skywcs_free(j.target);
    return finite;
}

/* Checks shared by both forms; on failure the problem reply is set and -1 returned. */
static int check_dataset(hreq *r, cutout_job *j)
{
    if ((j->col = colset_find(r->srv->app->collections, j->p.dataset))) {
        if (j->p.plane != 0) {
            problem_reply(r, 400, "plane", "collection '%s' has images of one plane",
                          j->p.dataset);
            return -1;
        }
        if (j->p.solar_surface == SOLAR_SCREEN) {
            problem_reply(r, 400, "solar_surface", "collection '%s' is a sky collection: "
                          "solar_surface does not apply", j->p.dataset);
            return -1;
        }
        if (colbg_pending(j->col)) {
            handler_reply_unsolved(r, j->col);
            return -1;
        }
        return 0;
    }
    j->ds = handler_dataset(r, j->p.dataset, strlen(j->p.dataset));
    if (!j->ds)
        return -1;
    if (j->ds->wcs_error[0]) {
        problem_reply(r, 422, "dataset", "dataset '%s' has no usable WCS: %s", j->p.dataset,
                      j->ds->wcs_error);
        return -1;
    }
    if (!j->ds->cel) {
        problem_reply(r, 422, "dataset", "dataset '%s' has no celestial WCS to reproject from",
                      j->p.dataset);
        return -1;
    }
    return handler_plane(r, j->ds, j->p.plane, 400);
}

/* Refuses (413) an output of w x h pixels over limits.max_output_pixels, naming what the
 * client sent: `param` the problem's parameter ("width", or "body"/"wcs" for a header)
 * and `sizes` the two fields in the detail ("width x height", "NAXIS1 x NAXIS2"). */
static int check_size(hreq *r, long w, long h, const char *param, const char *sizes)
{
    long long n = (long long)w * (long long)h;
    if (n > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, param, "%s = %ld x %ld = %lld output pixels is more than "
                      "limits.max_output_pixels = %lld", sizes, w, h, n,
                      r->srv->cfg->max_output_pixels);
        return -1;
    }
    return 0;
}

/* Builds the cache key, answers from the cache or queues the work.  A target whose frame
 * cannot be reached from the dataset's (a sky and a solar frame, a solar frame without
 * its observer) is refused first, naming both frames (`what`: the parameter that set the
 * target). */
static void start(hreq *r, cutout_job *j, const char *target_key, const char *what)
{
    char ferr[300];
    if (j->ds && skywcs_check_pair(j->ds->cel, j->target, ferr, sizeof(ferr))) {
        problem_reply(r, 422, what, "cannot cut dataset '%s' out onto this target: the "
                      "dataset's %s", j->ds->name, ferr);
        cutout_job_free(j);
        return;
    }
    sky_frame tf = skywcs_frame(j->target, NULL);
    if (j->col && sky_frame_is_solar(tf)) {
        problem_reply(r, 422, what, "collection '%s' is on the sky (sky frame icrs, the frame "
                      "of its index): the solar frame %s (%s) of the target does not apply "
                      "to it", j->col->name, sky_frame_name(tf), sky_frame_axes(tf));
        cutout_job_free(j);
        return;
    }
    char rk[160];
    params_render_key(&j->p.render, rk, sizeof(rk));
    const char *name = j->ds ? j->ds->name : j->col->name;
    size_t klen = strlen(target_key) + strlen(name) + 400;
    r->cache_key = malloc(klen);
    if (!r->cache_key) {
        cutout_job_free(j);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    /* The current version of the files (not the one at start): a replaced file is never
     * answered from the cache. */
    char version[64];
    if (j->ds)
        dataset_version(j->ds, version, sizeof(version));
    else   /* the members and their files, and how they combine */
        snprintf(version, sizeof(version), "col-%llx-%d", collection_version(j->col),
                 j->col->combine);
    snprintf(r->cache_key, klen, "cutout|%s|%s|%ld|%s|%s|%.17g|%s|%s|%s", name,
             version, j->p.plane, target_key, rp_method_name(j->p.method),
             j->p.max_coord_error,
             j->p.solar_surface == SOLAR_SCREEN ? "screen" : "sphere",
             out_format_name(j->p.format),
             j->p.format == FMT_FITS ? "" : rk);
    if (hreq_try_cache(r)) {
        cutout_job_free(j);
        return;
    }
    /* An exact (flux-conserving) output pixel costs about as much as ten interpolated
     * ones (bench/reproject). */
    hreq_mark_bulk(r, (long long)j->width * j->height * (j->p.method == RP_EXACT ? 10 : 1));
    hreq_run_async(r, j->col ? colcut_work : cutout_work, j, cutout_job_free);
}

/* The opening both cutout forms share: only `known` query parameters, a job parsed by
 * `parse`.  Returns the job, or NULL after setting the problem reply. */
static cutout_job *new_job(hreq *r, const char *const *known,
                           int (*parse)(param_lookup, void *, cutout_params *, param_error *))
{
    if (hreq_only_args(r, known))
        return NULL;
    cutout_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return NULL;
    }
    param_error pe;
    if (parse(hreq_arg_lookup, r, &j->p, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        cutout_job_free(j);
        return NULL;
    }
    return j;
}

/* The target is the header in j->cards (the POST body, or GET's `wcs`, named `what` in
 * problems): checks its size and WCS, then starts.  Returns 0 (started), or -1 after
 * setting the problem reply (j is the caller's to free). */
static int start_header(hreq *r, cutout_job *j, const char *what)
{
    char val[80];
    long n[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "NAXIS2" : "NAXIS1";
        if (!fitscard_get(j->cards, j->nkeys, key, val, sizeof(val))) {
            /* A loose card ("NAXIS1 = abc": the keyword not padded to 8 characters) is
             * named as it was given. */
            for (int k = 0; k < j->nkeys; k++) {
                const char *c = j->cards + (size_t)k * 80;
                if (strncmp(c, key, 6) == 0 && (c[6] == ' ' || c[6] == '=')) {
                    int len = 80;
                    while (len > 0 && c[len - 1] == ' ')
                        len--;
                    problem_reply(r, 400, what, "%s must be an integer between 1 and 65536 in "
                                  "a card '%-8s= value', got '%.*s'", key, key,
                                  len < 40 ? len : 40, c);
                    return -1;
                }
            }
            problem_reply(r, 400, what, "the header needs NAXIS1 and NAXIS2 between 1 and "
                          "65536; no card has the keyword %s", key);
            return -1;
        }
        if (param_long(val, 1, 65536, &n[i])) {
            problem_reply(r, 400, what, "%s must be an integer between 1 and 65536, got "
                          "'%.40s'", key, val);
            return -1;
        }
    }
    long n1 = n[0], n2 = n[1];
    if (check_size(r, n1, n2, what, "NAXIS1 x NAXIS2"))
        return -1;
    char err[256] = "";
    skywcs *full = NULL;
    if (skywcs_parse(j->cards, j->nkeys, &full, err, sizeof(err))) {
        problem_reply(r, 400, what, "the target header has no usable WCS: %s", err);
        return -1;
    }
    j->target = skywcs_celestial(full);
    skywcs_free(full);
    if (!j->target) {
        problem_reply(r, 400, what, "the header has no celestial WCS axes");
        return -1;
    }
    j->width = n1;
    j->height = n2;
    char tk[64];
    size_t clen = (size_t)j->nkeys * 80;
    snprintf(tk, sizeof(tk), "hdr:%zu:%016llx%016llx", clen,
             (unsigned long long)tess_fnv1a64(j->cards, clen, TESS_FNV64_OFFSET),
             (unsigned long long)tess_fnv1a64(j->cards, clen, 0x9E3779B97F4A7C15ULL));
    start(r, j, tk, what);
    return 0;
}

void handle_cutout_get(hreq *r, const route_match *m)
{
    static const char *const known[] = {"dataset", "hips", "ra", "dec", "fov", "width",
        "height", "projection", "coordsys", "rotation_angle", "wcs", "method",
        "max_coord_error", "solar_surface", "format", "stretch", "min_cut", "max_cut", "cmap",
        "plane", PV_NAMES, NULL};
    cutout_job *j = new_job(r, known, cutout_parse_get);
    if (!j)
        return;
    if (check_dataset(r, j))
        goto fail;
    if (j->p.has_wcs) {
        param_error pe;
        int rc = cutout_wcs_cards(hreq_arg(r, "wcs"), &j->cards, &j->nkeys, &pe);
        if (rc == TESS_ENOMEM) {
            problem_reply(r, 500, NULL, "out of memory");
            goto fail;
        }
        if (rc) {
            problem_reply(r, 400, pe.parameter, "%s", pe.detail);
            goto fail;
        }
        if (start_header(r, j, "wcs") == 0)
            return;
        goto fail;
    }
    if (check_size(r, j->p.width, j->p.height, "width", "width x height"))
        goto fail;
    char err[256] = "";
    if (skywcs_cutout_header_solar(j->p.lon, j->p.lat, j->p.fov, j->p.width, j->p.height,
                                   j->p.projection, j->p.coordsys,
                                   j->ds ? skywcs_solar(j->ds->cel) : NULL,
                                   j->p.rotation, j->p.pv, &j->cards, &j->nkeys, err,
                                   sizeof(err))) {
        problem_reply(r, 400, "projection", "cannot build the cutout WCS: %s", err);
        goto fail;
    }
    skywcs *full = NULL;
    if (skywcs_parse(j->cards, j->nkeys, &full, err, sizeof(err)) ||
        !(j->target = skywcs_celestial(full))) {
        skywcs_free(full);
        problem_reply(r, 400, "projection", "wcslib refuses the cutout WCS: %s", err);
        goto fail;
    }
    skywcs_free(full);
    j->width = j->p.width;
    j->height = j->p.height;
    char tk[256 + SKYWCS_CUTOUT_PVN * 32];
    int tl = snprintf(tk, 256, "%.17g,%.17g,%.17g,%ld,%ld,%s,%s,%.17g", j->p.lon, j->p.lat,
                      j->p.fov, j->p.width, j->p.height, j->p.projection,
                      sky_frame_name(j->p.coordsys), j->p.rotation);
    for (int k = 0; k < SKYWCS_CUTOUT_PVN && tl > 0; k++)
        if (isfinite(j->p.pv[k]))   /* 32 a value: ",pv29=" and 24 characters of %.17g */
            tl += snprintf(tk + tl, sizeof tk - (size_t)tl, ",pv%d=%.17g", k, j->p.pv[k]);
    start(r, j, tk, "coordsys");
    return;
fail:
    cutout_job_free(j);
}

void handle_cutout_post(hreq *r, const route_match *m)
{
    static const char *const known[] = {"dataset", "method", "max_coord_error",
        "solar_surface", "format",
        "stretch", "min_cut", "max_cut", "cmap", "plane", NULL};
    cutout_job *j = new_job(r, known, cutout_parse_post);
    if (!j)
        return;
    param_error pe;
    if (check_dataset(r, j))
        goto fail;
    if (!r->body || r->body_len == 0) {
        problem_reply(r, 400, "body", "the body must be the target FITS header (text, one "
                      "80-character card a line)");
        goto fail;
    }
    if (params_header_cards(r->body, r->body_len, 10000, &j->cards, &j->nkeys, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        goto fail;
    }
    if (start_header(r, j, "body") == 0)
        return;
fail:
    cutout_job_free(j);
}
