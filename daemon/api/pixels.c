/* GET /api/v1/datasets/{name}/values, /histogram, /footprint, /transform and /fits: pixel values, their
 * distribution, the outline on the sky and the dataset as a FITS file; /values and
 * /footprint of a collection: its members combined at a position (as its cutouts make
 * them) and their outlines. */
#include "daemon/api/cutout.h"
#include "daemon/api/handlers.h"
#include "daemon/collection/collection.h"
#include "daemon/cache/planes.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"
#include "engine/sky/skywcs.h"

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest box of the values route, pixels on a side. */
#define VALUES_MAX_SIZE 64
/* Most bins of the histogram route. */
#define HISTOGRAM_MAX_BINS 4096
/* Most points per image edge of the footprint route. */
#define FOOTPRINT_MAX_POINTS 1024

/* Answers `doc` (taken) as JSON: 200, or 500 when it cannot be written. */
static void reply_doc(hreq *r, json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(doc);
    if (!text) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_json(r, 200, text);
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Query parameter `key` as an integer in lo..hi, `def` when absent; a 400 problem naming
 * it (and -1) otherwise. */
static int int_arg(hreq *r, const char *key, long lo, long hi, long def, const char *what,
                   long *out)
{
    const char *s = hreq_arg(r, key);
    *out = def;
    if (!s)
        return 0;
    int rc = param_long(s, lo, hi, out);
    if (rc == TESS_ERANGE) {
        problem_reply(r, 400, key, "%s = %.40s is outside %ld..%ld", key, s, lo, hi);
        return -1;
    }
    if (rc) {
        problem_reply(r, 400, key, "%s must be an integer (%s), got '%.40s'", key, what, s);
        return -1;
    }
    return 0;
}

/* The plane argument (0..nz-1, default 0) of dataset `d`. */
static int plane_arg(hreq *r, const dataset *d, long *z)
{
    param_error pe;
    *z = 0;
    if (param_plane(hreq_arg_lookup, r, z, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        return -1;
    }
    return handler_plane(r, d, *z, 400);
}

/* A cache key "KIND|NAME|VERSION|TAIL" in r->cache_key; 500 problem and -1 on failure. */
static int set_key(hreq *r, const char *kind, const dataset *d, const char *tail)
{
    char version[64];
    dataset_version(d, version, sizeof(version));
    if (asprintf(&r->cache_key, "%s|%s|%s|%s", kind, d->name, version, tail) < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    return 0;
}

static void handle_collection_values(hreq *r, collection *c);
static void handle_collection_footprint(hreq *r, collection *c);

typedef struct pixels_job {
    const dataset *ds;
    long x, y, z, size, bins;
    sky_frame frame;
    long npoints;
} pixels_job;

static int start_job(hreq *r, const pixels_job *j0, void (*work)(hreq *))
{
    pixels_job *j = malloc(sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    *j = *j0;
    return hreq_run_async(r, work, j, free);
}

/* ---- values ----------------------------------------------------------------------------- */

/* w x h values (row by row) as a JSON array of rows, null for NaN. */
static json_t *value_rows(const double *v, long w, long h)
{
    json_t *rows = json_array();
    for (long y = 0; y < h; y++) {
        json_t *row = json_array();
        for (long x = 0; x < w; x++)
            json_array_append_new(row, real_or_null(v[y * w + x]));
        json_array_append_new(rows, row);
    }
    return rows;
}

static void values_work(hreq *r)
{
    pixels_job *j = r->work_arg;
    const dataset *d = j->ds;
    long w = j->size < d->nx - j->x ? j->size : d->nx - j->x;
    long h = j->size < d->ny - j->y ? j->size : d->ny - j->y;
    double *v = malloc((size_t)w * (size_t)h * sizeof(double));
    char err[256] = "";
    if (!v) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc = dataset_read_region(d, j->z, j->x, j->y, w, h, v, err, sizeof(err));
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      d->name, err);
        free(v);
        return;
    }
    json_t *doc = json_object(), *rows = value_rows(v, w, h);
    free(v);
    json_object_set_new(doc, "x", json_integer(j->x));
    json_object_set_new(doc, "y", json_integer(j->y));
    json_object_set_new(doc, "plane", json_integer(j->z));
    json_object_set_new(doc, "size", json_integer(j->size));
    json_object_set_new(doc, "values", rows);
    json_object_set_new(doc, "unit", d->bunit[0] ? json_string(d->bunit) : json_null());
    reply_doc(r, doc);
}

void handle_values(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    if (!d) {   /* a collection (prepare_dataset_or_collection) */
        handle_collection_values(r, colset_find(r->srv->app->collections, m->segment));
        return;
    }
    static const char *const known[] = {"x", "y", "plane", "size", NULL};
    if (hreq_only_args(r, known))
        return;
    pixels_job j = {.ds = d};
    if (handler_pixel_xy(r, d, &j.x, &j.y) || plane_arg(r, d, &j.z) ||
        int_arg(r, "size", 1, VALUES_MAX_SIZE, 1, "pixels on a side", &j.size))
        return;
    char tail[96];
    snprintf(tail, sizeof(tail), "%ld|%ld|%ld|%ld", j.x, j.y, j.z, j.size);
    if (set_key(r, "values", d, tail) || hreq_try_cache(r))
        return;
    start_job(r, &j, values_work);
}

/* ---- histogram -------------------------------------------------------------------------- */

/* Percentile `p` (0..100) of the finite pixels of plane z through the plane store's cut
 * levels: the exact value the tiles use for the same cut (numpy.percentile's linear
 * interpolation), cached per plane. */
static int plane_percentiles(hreq *r, const pixels_job *j, double plo, double phi, double *lo,
                             double *hi)
{
    render_params rp;
    render_params_default(&rp);
    rp.min_cut = (render_cut){plo, 1};
    rp.max_cut = (render_cut){phi, 1};
    char err[256] = "";
    int rc = planestore_cuts(r->srv->app->planes, j->ds, j->z, &rp, lo, hi, err, sizeof(err));
    if (rc)
        problem_reply(r, problem_read_status(rc, 500), NULL,
                      "cannot compute the percentiles of '%s': %s", j->ds->name, err);
    return rc ? -1 : 0;
}

static void histogram_work(hreq *r)
{
    pixels_job *j = r->work_arg;
    const dataset *d = j->ds;
    double p05, p995, p1, p99;
    if (plane_percentiles(r, j, 0.5, 99.5, &p05, &p995) ||
        plane_percentiles(r, j, 1.0, 99.0, &p1, &p99))
        return;
    plane_view v;
    char err[256] = "";
    int rc = planestore_get(r->srv->app->planes, d, j->z, 0, &v, err, sizeof(err));
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL,
                      "cannot read plane %ld of dataset '%s': %s", j->z, d->name, err);
        return;
    }
    const rp_plane *p = v.plane;
    size_t n = (size_t)p->nx * (size_t)p->ny;
    double mn = INFINITY, mx = -INFINITY;
    for (size_t k = 0; k < n; k++) {
        double x = p->dtype == RP_F32 ? (double)((const float *)p->data)[k]
                                      : ((const double *)p->data)[k];
        if (isfinite(x)) {
            if (x < mn)
                mn = x;
            if (x > mx)
                mx = x;
        }
    }
    long long *counts = calloc((size_t)j->bins, sizeof(long long));
    if (!counts) {
        planestore_release(r->srv->app->planes, &v);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    double width = mx > mn ? (mx - mn) / (double)j->bins : 0.0;
    for (size_t k = 0; isfinite(mn) && k < n; k++) {
        double x = p->dtype == RP_F32 ? (double)((const float *)p->data)[k]
                                      : ((const double *)p->data)[k];
        if (!isfinite(x))
            continue;
        long b = width > 0 ? (long)((x - mn) / width) : 0;
        counts[b >= j->bins ? j->bins - 1 : b < 0 ? 0 : b]++;
    }
    planestore_release(r->srv->app->planes, &v);
    json_t *doc = json_object(), *ca = json_array(), *pc = json_object();
    for (long b = 0; b < j->bins; b++)
        json_array_append_new(ca, json_integer(counts[b]));
    free(counts);
    json_object_set_new(pc, "0.5", real_or_null(p05));
    json_object_set_new(pc, "1", real_or_null(p1));
    json_object_set_new(pc, "99", real_or_null(p99));
    json_object_set_new(pc, "99.5", real_or_null(p995));
    json_object_set_new(doc, "plane", json_integer(j->z));
    json_object_set_new(doc, "min", real_or_null(mn));
    json_object_set_new(doc, "max", real_or_null(mx));
    json_object_set_new(doc, "bins", json_integer(j->bins));
    json_object_set_new(doc, "counts", ca);
    json_object_set_new(doc, "percentiles", pc);
    reply_doc(r, doc);
}

void handle_histogram(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    static const char *const known[] = {"plane", "bins", NULL};
    if (hreq_only_args(r, known))
        return;
    pixels_job j = {.ds = d};
    if (plane_arg(r, d, &j.z) ||
        int_arg(r, "bins", 1, HISTOGRAM_MAX_BINS, 256, "number of bins", &j.bins))
        return;
    char tail[64];
    snprintf(tail, sizeof(tail), "%ld|%ld", j.z, j.bins);
    if (set_key(r, "histogram", d, tail) || hreq_try_cache(r))
        return;
    start_job(r, &j, histogram_work);
}

/* ---- the frame of footprint and transform -------------------------------------------- */

/* The frame a footprint or transform request answers in (`frame`): for a dataset in a sky
 * frame icrs (default) or galactic; for a dataset in a solar frame its own frame (default)
 * or another solar frame of the same observer (helioprojective, stonyhurst,
 * carrington).  A sky frame asked of a solar dataset, or a solar frame of a sky one, is
 * a 422 problem naming both.  Returns 0, or -1 after the problem reply. */
static int request_frame(hreq *r, const dataset *d, sky_frame *out)
{
    const char *fs = hreq_arg(r, "frame");
    sky_frame native = skywcs_frame(d->cel, NULL);
    int solar = sky_frame_is_solar(native);
    sky_frame f = solar ? native : SKY_FRAME_ICRS;
    if (fs && (sky_frame_parse(fs, &f) ||
               (!sky_frame_is_solar(f) && f != SKY_FRAME_ICRS && f != SKY_FRAME_GALACTIC))) {
        problem_reply(r, 400, "frame", "frame must be icrs or galactic (sky) or "
                      "helioprojective, stonyhurst or carrington (solar), got '%.40s'", fs);
        return -1;
    }
    if (sky_frame_is_solar(f) != solar) {
        problem_reply(r, 422, "frame", "dataset '%s' is in the %s frame %s (%s): the %s frame "
                      "%s does not apply to it", d->name, solar ? "solar" : "sky",
                      sky_frame_name(native), sky_frame_axes(native),
                      solar ? "sky" : "solar", sky_frame_name(f));
        return -1;
    }
    const solar_obs *so = skywcs_solar(d->cel);
    if (solar && f != native) {
        const char *gap = NULL;
        if ((f == SKY_FRAME_HELIOPROJECTIVE || native == SKY_FRAME_HELIOPROJECTIVE) &&
            !so->known)
            gap = "its observer (HGLN_OBS, HGLT_OBS and DSUN_OBS; or CRLN_OBS, CRLT_OBS and "
                  "DSUN_OBS with DATE-OBS; or HEEQ_X/Y/Z; or HCIX/Y/Z_OBS, HAEX/Y/Z_OBS or "
                  "HEEX/Y/Z_OBS with DATE-OBS)";
        else if ((f == SKY_FRAME_CARRINGTON || native == SKY_FRAME_CARRINGTON) && !so->has_carr)
            gap = "the observer's Carrington offset (its observer with DATE-OBS, or "
                  "CRLN_OBS with HGLN_OBS)";
        if (gap) {
            problem_reply(r, 422, "frame", "dataset '%s' (frame %s) cannot give %s "
                          "coordinates: its header lacks %s", d->name, sky_frame_name(native),
                          sky_frame_name(f), gap);
            return -1;
        }
    }
    *out = f;
    return 0;
}

/* The unit positions are given in for `frame`: arcseconds for helioprojective (as solar
 * headers and sunpy state Tx and Ty), degrees for every other frame. */
static const char *frame_unit(sky_frame f)
{
    return f == SKY_FRAME_HELIOPROJECTIVE ? "arcsec" : "deg";
}

/* Converts n positions (degrees, in place) from the frame of `w` to `to`: sky_convert for
 * a sky frame, solar_convert with the dataset's own observer for a solar one; then
 * helioprojective positions to arcseconds and helioprojective and Stonyhurst longitudes
 * into (-180, 180] as sunpy wraps them (Carrington and the sky: [0, 360)). */
static void world_out(const skywcs *w, sky_frame to, size_t n, double *lon, double *lat)
{
    double eq = 0.0;
    sky_frame from = skywcs_frame(w, &eq);
    const solar_obs *so = skywcs_solar(w);
    if (!so) {
        sky_convert(from, eq, to, 0.0, n, lon, lat);
        return;
    }
    solar_convert(from, so, to, so, SOLAR_SPHERE, NULL, n, lon, lat);
    for (size_t k = 0; k < n; k++) {
        if (to != SKY_FRAME_CARRINGTON && lon[k] > 180.0)
            lon[k] -= 360.0;
        if (to == SKY_FRAME_HELIOPROJECTIVE) {
            lon[k] *= 3600.0;
            lat[k] *= 3600.0;
        }
    }
}

/* The inverse of world_out: positions of frame `from` (arcseconds for helioprojective)
 * into the frame of `w` (degrees), in place. */
static void world_in(const skywcs *w, sky_frame from, size_t n, double *lon, double *lat)
{
    double eq = 0.0;
    sky_frame to = skywcs_frame(w, &eq);
    const solar_obs *so = skywcs_solar(w);
    if (!so) {
        sky_convert(from, 0.0, to, eq, n, lon, lat);
        return;
    }
    if (from == SKY_FRAME_HELIOPROJECTIVE)
        for (size_t k = 0; k < n; k++) {
            lon[k] /= 3600.0;
            lat[k] /= 3600.0;
        }
    solar_convert(from, so, to, so, SOLAR_SPHERE, NULL, n, lon, lat);
}

/* ---- footprint -------------------------------------------------------------------------- */

/* Traces the outline of an nx x ny image of WCS `cel` along the outer edges of its
 * pixels (npoints per edge, counter-clockwise in pixels from the corner (-0.5, -0.5)), in
 * frame `to`, into lon and lat (4 npoints each, degrees; NaN off the projection).
 * Returns 0, TESS_EINVAL (not celestial) or TESS_ENOMEM. */
static int footprint_trace(const skywcs *cel, long nx, long ny, long npoints, sky_frame to,
                    double *lon, double *lat)
{
    skywcs *w = skywcs_copy(cel);
    if (!w)
        return TESS_ENOMEM;
    size_t n = 4 * (size_t)npoints;
    double *x = malloc(2 * n * sizeof(double));
    if (!x) {
        skywcs_free(w);
        return TESS_ENOMEM;
    }
    double *y = x + n;
    /* Counter-clockwise in pixels from the corner (-0.5, -0.5): bottom, right, top, left
     * edges, npoints each (the next corner starts the next edge). */
    double x0 = -0.5, y0 = -0.5, x1 = (double)nx - 0.5, y1 = (double)ny - 0.5;
    for (long k = 0; k < npoints; k++) {
        double t = (double)k / (double)npoints;
        x[k] = x0 + t * (x1 - x0);
        y[k] = y0;
        x[npoints + k] = x1;
        y[npoints + k] = y0 + t * (y1 - y0);
        x[2 * npoints + k] = x1 - t * (x1 - x0);
        y[2 * npoints + k] = y1;
        x[3 * npoints + k] = x0;
        y[3 * npoints + k] = y1 - t * (y1 - y0);
    }
    int rc = skywcs_pix2sky(w, n, x, y, lon, lat);
    if (rc == 0)
        world_out(w, to, n, lon, lat);
    free(x);
    skywcs_free(w);
    return rc;
}

static void footprint_work(hreq *r)
{
    pixels_job *j = r->work_arg;
    const dataset *d = j->ds;
    size_t n = 4 * (size_t)j->npoints;
    double *lon = malloc(2 * n * sizeof(double));
    if (!lon) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    double *lat = lon + n;
    int rc = footprint_trace(d->cel, d->nx, d->ny, j->npoints, j->frame, lon, lat);
    if (rc) {
        free(lon);
        problem_reply(r, rc == TESS_ENOMEM ? 500 : 422, rc == TESS_ENOMEM ? NULL : "dataset",
                      "cannot trace the outline of dataset '%s'", d->name);
        return;
    }
    /* A helioprojective image traced in a heliographic frame: its edge points beyond the
     * limb have no position on the sphere (NaN, as sunpy's pixel_to_world gives them), and
     * the points left would be no outline: refused, naming the frame that has one. */
    size_t off = 0;
    for (size_t k = 0; k < n; k++)
        off += !isfinite(lon[k]) || !isfinite(lat[k]);
    sky_frame native = skywcs_frame(d->cel, NULL);
    if (off && native == SKY_FRAME_HELIOPROJECTIVE && j->frame != native) {
        free(lon);
        problem_reply(r, 422, "frame", "the edge of dataset '%s' lies off the solar disk at "
                      "%zu of its %zu points: no %s outline (beyond the limb a line of sight "
                      "meets no point of the Sun); ask frame=helioprojective", d->name, off, n,
                      sky_frame_name(j->frame));
        return;
    }
    json_t *doc = json_object(), *poly = json_array();
    for (size_t k = 0; k < n; k++) {
        if (!isfinite(lon[k]) || !isfinite(lat[k]))
            continue;   /* an edge point off the projection (all-sky maps) */
        json_t *pt = json_array();
        json_array_append_new(pt, json_real(lon[k]));
        json_array_append_new(pt, json_real(lat[k]));
        json_array_append_new(poly, pt);
    }
    free(lon);
    json_object_set_new(doc, "frame", json_string(sky_frame_name(j->frame)));
    json_object_set_new(doc, "unit", json_string(frame_unit(j->frame)));
    json_object_set_new(doc, "polygon", poly);
    reply_doc(r, doc);
}

void handle_footprint(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    if (!d) {   /* a collection (prepare_dataset_or_collection) */
        handle_collection_footprint(r, colset_find(r->srv->app->collections, m->segment));
        return;
    }
    static const char *const known[] = {"frame", "n", NULL};
    if (hreq_only_args(r, known))
        return;
    pixels_job j = {.ds = d, .frame = SKY_FRAME_ICRS};
    if (int_arg(r, "n", 1, FOOTPRINT_MAX_POINTS, 16, "points per edge", &j.npoints))
        return;
    if (handler_need_celestial(r, d, "it has no footprint on the sky") ||
        request_frame(r, d, &j.frame))
        return;
    char tail[64];
    snprintf(tail, sizeof(tail), "%s|%ld", sky_frame_name(j.frame), j.npoints);
    if (set_key(r, "footprint", d, tail) || hreq_try_cache(r))
        return;
    start_job(r, &j, footprint_work);
}

/* ---- the values of a collection: its members combined at a position ------------------ */

/* Largest box of the values route, pixels on a side (as for a dataset). */
#define COLVALUES_MAX_SIZE 64
/* Most member outlines one footprint answer lists (then `truncated`). */
#define COLFOOTPRINT_MAX 10000

/* Serves r by its cache key (NULL: out of memory) from the cache, else by `work` on a
 * malloc'd copy of the job (`size` bytes at `job`). */
static void serve_copy(hreq *r, const void *job, size_t size, void (*work)(hreq *))
{
    void *copy = r->cache_key ? malloc(size) : NULL;
    if (!copy) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    memcpy(copy, job, size);
    hreq_serve(r, work, copy, free);
}

typedef struct colvalues_job {
    collection *c;
    double ra, dec, scale;
    long size;
    rp_method method;
    double max_coord_error;
} colvalues_job;

/* The size x size TAN grid (ICRS, north up, east left) centred on (ra, dec), `scale`
 * degrees a pixel, and the collection's values on it (cutout_collection_values). */
static void colvalues_work(hreq *r)
{
    colvalues_job *j = r->work_arg;
    double pv[SKYWCS_CUTOUT_PVN];
    for (int k = 0; k < SKYWCS_CUTOUT_PVN; k++)
        pv[k] = NAN;
    char *cards = NULL, err[256] = "";
    int nkeys = 0;
    if (skywcs_cutout_header(j->ra, j->dec, j->scale * (double)j->size, j->size, j->size,
                             "TAN", SKY_FRAME_ICRS, 0.0, pv, &cards, &nkeys, err,
                             sizeof(err))) {
        problem_reply(r, 422, "scale", "cannot make the grid of the values: %s", err);
        return;
    }
    size_t n = (size_t)j->size * (size_t)j->size;
    double *v = malloc(n * sizeof(double));
    if (!v) {
        free(cards);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    long finite = cutout_collection_values(r, j->c, cards, nkeys, j->size, j->size, j->method,
                                           j->max_coord_error, v);
    free(cards);
    if (finite < 0) {
        free(v);
        return;
    }
    if (finite == 0)   /* no member reaches the grid: its values are all null */
        for (size_t k = 0; k < n; k++)
            v[k] = NAN;
    json_t *doc = json_object(), *rows = value_rows(v, j->size, j->size);
    free(v);
    json_object_set_new(doc, "ra", json_real(j->ra));
    json_object_set_new(doc, "dec", json_real(j->dec));
    json_object_set_new(doc, "size", json_integer(j->size));
    json_object_set_new(doc, "scale", json_real(j->scale));
    json_object_set_new(doc, "frame", json_string("icrs"));
    json_object_set_new(doc, "values", rows);
    json_object_set_new(doc, "unit", json_null());
    reply_doc(r, doc);
}

static void handle_collection_values(hreq *r, collection *c)
{
    static const char *const known[] = {"ra", "dec", "size", "scale", "method",
                                        "max_coord_error", NULL};
    if (hreq_only_args(r, known))
        return;
    colvalues_job j = {.c = c, .method = RP_BILINEAR, .max_coord_error = 0.001, .size = 1,
                       .scale = collection_finest_pixscale(c)};
    param_error pe;
    const char *s;
    if (!isfinite(j.scale)) {
        problem_reply(r, 404, "dataset", "collection '%s' has no usable member image", c->name);
        return;
    }
    if (param_req_double(hreq_arg_lookup, r, "ra", -360.0, 360.0, &j.ra, &pe) ||
        param_req_double(hreq_arg_lookup, r, "dec", -90.0, 90.0, &j.dec, &pe) ||
        param_opt_long(hreq_arg_lookup, r, "size", 1, COLVALUES_MAX_SIZE, &j.size, &pe) ||
        param_opt_double(hreq_arg_lookup, r, "scale", 1e-9, 1.0, &j.scale, &pe) ||
        param_opt_double(hreq_arg_lookup, r, "max_coord_error", 0.0, 10.0,
                         &j.max_coord_error, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        return;
    }
    if ((s = hreq_arg(r, "method")) && rp_method_parse(s, &j.method)) {
        problem_reply(r, 400, "method", "method must be nearest, bilinear, bicubic, lanczos3 "
                      "or exact, got '%.40s'", s);
        return;
    }
    if (j.ra < 0.0)
        j.ra += 360.0;
    if (asprintf(&r->cache_key, "values|col|%s|%llx|%d|%.17g|%.17g|%ld|%.17g|%s|%.17g",
                 c->name, collection_version(c), c->combine, j.ra, j.dec, j.size, j.scale,
                 rp_method_name(j.method), j.max_coord_error) < 0)
        r->cache_key = NULL;
    serve_copy(r, &j, sizeof(j), colvalues_work);
}

/* ---- the footprint of a collection ---------------------------------------------------- */

typedef struct colfoot_job {
    collection *c;
    sky_frame frame;
} colfoot_job;

/* Each usable member's outline from the index (its four pixel-edge corners, in pixel
 * order from (-0.5, -0.5)), in path order, converted to the frame asked for. */
static void colfoot_work(hreq *r)
{
    colfoot_job *j = r->work_arg;
    collection *c = j->c;
    json_t *doc = json_object(), *polys = json_array();
    long usable = 0;
    pthread_rwlock_rdlock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (m->error)
            continue;
        if (usable++ >= COLFOOTPRINT_MAX)
            continue;
        double lon[4], lat[4];
        for (int k = 0; k < 4; k++) {
            lon[k] = m->poly[2 * k];
            lat[k] = m->poly[2 * k + 1];
        }
        sky_convert(SKY_FRAME_ICRS, 0.0, j->frame, 0.0, 4, lon, lat);
        json_t *poly = json_array();
        for (int k = 0; k < 4; k++) {
            json_t *pt = json_array();
            json_array_append_new(pt, json_real(lon[k]));
            json_array_append_new(pt, json_real(lat[k]));
            json_array_append_new(poly, pt);
        }
        json_array_append_new(polys, poly);
    }
    pthread_rwlock_unlock(&c->lock);
    json_object_set_new(doc, "frame", json_string(sky_frame_name(j->frame)));
    json_object_set_new(doc, "unit", json_string("deg"));
    json_object_set_new(doc, "polygons", polys);
    json_object_set_new(doc, "members", json_integer(usable));
    json_object_set_new(doc, "truncated", json_boolean(usable > COLFOOTPRINT_MAX));
    reply_doc(r, doc);
}

static void handle_collection_footprint(hreq *r, collection *c)
{
    static const char *const known[] = {"frame", NULL};
    if (hreq_only_args(r, known))
        return;
    colfoot_job j = {.c = c, .frame = SKY_FRAME_ICRS};
    const char *fs = hreq_arg(r, "frame");
    if (fs && (sky_frame_parse(fs, &j.frame) ||
               (j.frame != SKY_FRAME_ICRS && j.frame != SKY_FRAME_GALACTIC))) {
        problem_reply(r, 400, "frame", "frame must be icrs or galactic for collection '%s', "
                      "got '%.40s'", c->name, fs);
        return;
    }
    if (asprintf(&r->cache_key, "footprint|col|%s|%llx|%s", c->name, collection_version(c),
                 sky_frame_name(j.frame)) < 0)
        r->cache_key = NULL;
    serve_copy(r, &j, sizeof(j), colfoot_work);
}

/* ---- transform: pixel <-> sky through the full WCS -------------------------------------- */

/* Most points of one transform request. */
#define TRANSFORM_MAX_POINTS 256

/* Parses `key`, a comma-separated list of finite numbers (at most TRANSFORM_MAX_POINTS),
 * into v; *n the count.  Returns 0, or -1 with a 400 problem naming `key`. */
static int number_list(hreq *r, const char *key, double *v, size_t *n)
{
    const char *s = hreq_arg(r, key);
    *n = 0;
    if (!s || !*s) {
        problem_reply(r, 400, key, "%s is required: a comma-separated list of numbers", key);
        return -1;
    }
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[64];
        if (*n == TRANSFORM_MAX_POINTS) {
            problem_reply(r, 400, key, "%s holds more than %d numbers", key, TRANSFORM_MAX_POINTS);
            return -1;
        }
        if (len == 0 || len >= sizeof(item)) {
            problem_reply(r, 400, key, "%s must be a comma-separated list of numbers", key);
            return -1;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        if (param_double(item, -1e300, 1e300, &v[*n])) {
            problem_reply(r, 400, key, "%s: '%.40s' is not a finite number", key, item);
            return -1;
        }
        (*n)++;
        s = e ? e + 1 : s + len;
        if (e && !*s) {
            problem_reply(r, 400, key, "%s must not end with a comma", key);
            return -1;
        }
    }
    return 0;
}

void handle_transform(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    static const char *const known[] = {"x", "y", "lon", "lat", "frame", NULL};
    if (hreq_only_args(r, known))
        return;
    sky_frame frame = SKY_FRAME_ICRS;
    if (handler_need_celestial(r, d, "it has no sky coordinates") ||
        request_frame(r, d, &frame))
        return;
    int to_sky = hreq_arg(r, "x") || hreq_arg(r, "y");
    if (to_sky && (hreq_arg(r, "lon") || hreq_arg(r, "lat"))) {
        problem_reply(r, 400, "lon", "give x and y (pixel to sky) or lon and lat (sky to "
                      "pixel), not both");
        return;
    }
    double a[TRANSFORM_MAX_POINTS], b[TRANSFORM_MAX_POINTS];
    double p[TRANSFORM_MAX_POINTS], q[TRANSFORM_MAX_POINTS];
    size_t na, nb;
    const char *ka = to_sky ? "x" : "lon", *kb = to_sky ? "y" : "lat";
    if (number_list(r, ka, a, &na) || number_list(r, kb, b, &nb))
        return;
    if (na != nb) {
        problem_reply(r, 400, kb, "%s holds %zu numbers, %s %zu: give one %s per %s", ka, na, kb,
                      nb, kb, ka);
        return;
    }
    skywcs *w = skywcs_copy(d->cel);
    if (!w) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc;
    if (to_sky) {
        rc = skywcs_pix2sky(w, na, a, b, p, q);
        if (rc == 0)
            world_out(w, frame, na, p, q);
    } else {
        memcpy(p, a, sizeof(double) * na);
        memcpy(q, b, sizeof(double) * na);
        world_in(w, frame, na, p, q);
        double lon[TRANSFORM_MAX_POINTS], lat[TRANSFORM_MAX_POINTS];
        memcpy(lon, p, sizeof(double) * na);
        memcpy(lat, q, sizeof(double) * na);
        rc = skywcs_sky2pix(w, na, lon, lat, p, q);
    }
    skywcs_free(w);
    if (rc == TESS_ENOMEM) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    json_t *doc = json_object(), *pts = json_array();
    for (size_t k = 0; k < na; k++) {
        json_t *pt = json_array();
        int ok = rc == 0 && isfinite(p[k]) && isfinite(q[k]);
        json_array_append_new(pt, ok ? json_real(p[k]) : json_null());
        json_array_append_new(pt, ok ? json_real(q[k]) : json_null());
        json_array_append_new(pts, pt);
    }
    json_object_set_new(doc, "frame", json_string(sky_frame_name(frame)));
    if (to_sky)
        json_object_set_new(doc, "unit", json_string(frame_unit(frame)));
    json_object_set_new(doc, to_sky ? "world" : "pixel", pts);
    reply_doc(r, doc);
}

/* ---- the dataset as a FITS file --------------------------------------------------------- */

/* The file name of the download: the dataset's name with ".fits". */
static void download_name(const dataset *d, char *out, size_t len)
{
    snprintf(out, len, "%.60s.fits", d->name);
}

/* 1 when path is a FITS file (not a PNG or TIFF image served as a dataset). */
static int is_fits_file(const char *path)
{
    return !frame_is_png(path) && !tiffframe_is_tiff(path);
}

/* The length of the primary HDU of an uncompressed file: its header and data unit are the
 * first data_offset + data size (in whole blocks) bytes.  -1 when the dataset is not that
 * simple. */
static long long primary_length(const dataset *d, const fitsimg_info *info)
{
    if (d->hdu != 0 || info->data_offset < 0)
        return -1;
    unsigned long long bytes = (unsigned long long)(info->bitpix < 0 ? -info->bitpix
                                                                     : info->bitpix) / 8;
    for (int i = 0; i < info->naxis; i++)
        bytes *= (unsigned long long)info->naxes[i];
    unsigned long long len = (unsigned long long)info->data_offset + (bytes + 2879) / 2880 * 2880;
    if (len > (unsigned long long)info->file_size)
        return -1;
    return (long long)len;
}

long long dataset_fits_stored_length(const dataset *d)
{
    if (d->kind == DS_STACK || !is_fits_file(d->paths[0]))
        return -1;
    fitsimg_info info;
    char err[256];
    if (fitsimg_read_info(d->paths[0], d->hdu, &info, err, sizeof(err)))
        return -1;
    long long len = primary_length(d, &info);
    fitsimg_info_release(&info);
    return len;
}

/* The primary HDU of an uncompressed file, sent from the file itself (primary_length
 * bytes).  Returns 1 when answered, 0 when the file is not that simple (then nothing is
 * set). */
static int fits_send_primary(hreq *r, const dataset *d, const fitsimg_info *info)
{
    long long plen = primary_length(d, info);
    if (plen < 0)
        return 0;
    unsigned long long len = (unsigned long long)plen;
    int fd = tess_open_regular(d->paths[0], 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    char version[64];
    dataset_version(d, version, sizeof(version));
    unsigned long long h = tess_fnv1a64(version, strlen(version), TESS_FNV64_OFFSET);
    r->rep.status = 200;
    r->rep.file_fd = fd;
    r->rep.file_len = len;
    snprintf(r->rep.file_type, sizeof(r->rep.file_type), "application/fits");
    snprintf(r->rep.file_etag, sizeof(r->rep.file_etag), "\"%016llx\"", h);
    download_name(d, r->rep.file_name, sizeof(r->rep.file_name));
    return 1;
}

/* The header cards of the written copy: those of `cards` but the structural ones (which
 * fitswrite writes) and the scaling (the copy holds physical values). */
static int copy_cards(const char *cards, int n, char **out, int *nout)
{
    char *c = malloc((size_t)n * 80 + 1);
    if (!c)
        return TESS_ENOMEM;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *card = cards + (size_t)i * 80;
        if (fitscard_is_structural(card) || fitscard_key_is(card, "BSCALE") ||
            fitscard_key_is(card, "BZERO") || fitscard_key_is(card, "BLANK") ||
            fitscard_key_is(card, "EXTNAME") || fitscard_key_is(card, "CHECKSUM") ||
            fitscard_key_is(card, "DATASUM"))
            continue;
        memcpy(c + (size_t)k * 80, card, 80);
        k++;
    }
    c[(size_t)k * 80] = '\0';
    *out = c;
    *nout = k;
    return 0;
}

/* The image HDU fits_work writes of d with the header cards of copy_cards: BITPIX -64
 * for data read in double (-64, 32- and 64-bit integers), else -32; a stack or cube is
 * a cube. */
static fitswrite_image written_image(const dataset *d, const char *cards, int ncards)
{
    int wide = d->bitpix == -64 || d->bitpix == 32 || d->bitpix == 64;
    fitswrite_image im = {
        .bitpix = wide ? -64 : -32, .naxis = d->nz > 1 || d->kind != DS_IMAGE ? 3 : 2,
        .naxes = {d->nx, d->ny, d->nz, 1}, .cards = cards, .ncards = ncards,
    };
    return im;
}

long long dataset_fits_length(const dataset *d, long long max_output_pixels)
{
    long long stored = dataset_fits_stored_length(d);
    if (stored >= 0)
        return stored;
    if ((long long)d->nx * d->ny * d->nz > max_output_pixels)
        return -1;   /* handle_fits answers 413 */
    char *cards = NULL, err[256];
    int ncards = 0;
    if (copy_cards(d->header, d->nkeys, &cards, &ncards))
        return -1;
    fitswrite_image im = written_image(d, cards, ncards);
    size_t len = 0;
    int rc = fitswrite_image_length(&im, &len, err, sizeof(err));
    free(cards);
    return rc || len > (size_t)LLONG_MAX ? -1 : (long long)len;
}

/* Any other dataset (an extension, a tile-compressed image, a stack of frames) written
 * anew as one primary HDU of physical values: BITPIX -64 for data read in double (-64,
 * 32- and 64-bit integers), else -32; a stack becomes a cube of its frames in order. */
static void fits_work(hreq *r)
{
    pixels_job *j = r->work_arg;
    const dataset *d = j->ds;
    char err[256] = "";
    size_t plane = (size_t)d->nx * (size_t)d->ny;
    double *data = malloc(plane * (size_t)d->nz * sizeof(double));
    if (!data) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    for (long z = 0; z < d->nz; z++) {
        if (hreq_cancelled(r)) {
            free(data);
            hreq_reply_cancelled(r);
            return;
        }
        int rc = dataset_read_region(d, z, 0, 0, d->nx, d->ny, data + (size_t)z * plane, err,
                                     sizeof(err));
        if (rc) {
            free(data);
            problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                          d->name, err);
            return;
        }
    }
    char *cards = NULL;
    int ncards = 0;
    if (copy_cards(d->header, d->nkeys, &cards, &ncards)) {
        free(data);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    fitswrite_image im = written_image(d, cards, ncards);
    size_t hint = plane * (size_t)d->nz * (size_t)(-im.bitpix / 8) +
                  fitscard_header_size(ncards + 16);
    fitswrite *w = NULL;
    unsigned char *out = NULL;
    size_t len = 0;
    int rc = fitswrite_new_mem(hint, &w);
    if (rc == 0) {
        rc = fitswrite_image_hdu(w, &im, data, err, sizeof(err));
        if (rc == 0)
            rc = fitswrite_take(w, &out, &len);
        else
            fitswrite_close(w, NULL, 0);
    }
    free(cards);
    free(data);
    if (rc) {
        problem_reply(r, 500, NULL, "cannot write the FITS file of '%s': %s", d->name,
                      err[0] ? err : "out of memory");
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take(out, len, "application/fits"));
}

void handle_fits(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    static const char *const known[] = {NULL};
    if (hreq_only_args(r, known))
        return;
    if (d->kind != DS_STACK && is_fits_file(d->paths[0])) {
        fitsimg_info info;
        char err[256] = "";
        int rc = fitsimg_read_info(d->paths[0], d->hdu, &info, err, sizeof(err));
        if (rc) {
            problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                          d->name, err);
            return;
        }
        int sent = fits_send_primary(r, d, &info);
        fitsimg_info_release(&info);
        if (sent)
            return;
    }
    long long pixels = (long long)d->nx * d->ny * d->nz;
    if (pixels > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, NULL, "the FITS file of %lld pixels is more than "
                      "limits.max_output_pixels = %lld", pixels, r->srv->cfg->max_output_pixels);
        return;
    }
    char download[72];
    download_name(d, download, sizeof(download));
    if (set_key(r, "fits", d, "") || hreq_try_cache(r)) {
        snprintf(r->rep.file_name, sizeof(r->rep.file_name), "%s", download);
        return;
    }
    snprintf(r->rep.file_name, sizeof(r->rep.file_name), "%s", download);
    pixels_job j = {.ds = d};
    start_job(r, &j, fits_work);
}
