/* GET /api/v1/datasets/{name}/series?x=&y=[&format=json|npy|csv]: the values along z at one
 * pixel, with the z world coordinate; and the z axis and 1-D replies that reduce.c shares. */
#include "daemon/api/handlers.h"
#include "engine/image/chunkstore.h"
#include "engine/image/encode.h"
#include "engine/fits/fitscard.h"
#include "engine/image/stack.h"
#include "engine/sky/skywcs.h"
#include "daemon/problem.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- the z axis ------------------------------------------------------------------------ */

/* World coordinate of axis 3 at pixels (x, y, z), z = 0..n-1, from the header's WCS read
 * as astropy reads it (skywcs_parse: wcspih at full relaxation behind its guards, wcsfix
 * without cylfix, wcsset).  Returns 0 when the WCS has a third axis with a CTYPE,
 * filling name, unit, values. */
static int wcs_axis3(const dataset *d, long x, long y, zaxis *za)
{
    skywcs *w = NULL;
    char err[160];
    if (skywcs_parse(d->header, d->nkeys, &w, err, sizeof(err)) != 0)
        return -1;
    int rc = skywcs_zaxis(w, (double)x, (double)y, za->n, za->values, za->name,
                          sizeof(za->name), za->unit, sizeof(za->unit));
    skywcs_free(w);
    return rc ? -1 : 0;
}

/* Seconds since the epoch of an ISO 8601 "YYYY-MM-DD[Thh:mm:ss[.fff]]" (UTC), or NAN. */
static double iso_seconds(const char *s)
{
    int Y, M, D, h = 0, m = 0;
    double sec = 0;
    int n = sscanf(s, "%4d-%2d-%2dT%2d:%2d:%lf", &Y, &M, &D, &h, &m, &sec);
    if (n != 3 && n != 6)
        return NAN;
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    return (double)timegm(&tm) + sec;
}

/* Time of each frame of a FITS stack from MJD-OBS (days) or DATE-OBS (seconds since the
 * first frame's).  Returns 0 when every frame has the same keyword. */
static int stack_times(const dataset *d, zaxis *za)
{
    if (frame_is_png(d->paths[0]))
        return -1;
    int use_mjd = -1;
    for (long k = 0; k < za->n; k++) {
        fitsimg_info info;
        char err[128], val[80];
        if (frame_read_info(d->paths[k], d->hdu, &info, err, sizeof(err)))
            return -1;
        double v = NAN;
        if (use_mjd != 0 && fitscard_get(info.header, info.nkeys, "MJD-OBS", val, sizeof(val))) {
            char *end;
            v = strtod(val, &end);
            if (end == val)
                v = NAN;
            use_mjd = 1;
        } else if (use_mjd != 1 &&
                   fitscard_get(info.header, info.nkeys, "DATE-OBS", val, sizeof(val))) {
            v = iso_seconds(val);
            if (k == 0)
                snprintf(za->origin, sizeof(za->origin), "%.40s", val);
            use_mjd = 0;
        }
        fitsimg_info_release(&info);
        if (!isfinite(v))
            return -1;
        za->values[k] = v;
    }
    if (use_mjd == 1) {
        snprintf(za->name, sizeof(za->name), "MJD-OBS");
        snprintf(za->unit, sizeof(za->unit), "d");
        za->origin[0] = '\0';
    } else {
        double t0 = za->values[0];
        for (long k = 0; k < za->n; k++)
            za->values[k] -= t0;
        snprintf(za->name, sizeof(za->name), "DATE-OBS");
        snprintf(za->unit, sizeof(za->unit), "s");
    }
    return 0;
}

int zaxis_compute(const dataset *d, long x, long y, zaxis *za)
{
    memset(za, 0, sizeof(*za));
    za->n = d->nz;
    za->values = malloc((size_t)d->nz * sizeof(double));
    if (!za->values)
        return TESS_ENOMEM;
    if (d->kind != DS_STACK && wcs_axis3(d, x, y, za) == 0)
        return 0;
    if (d->kind == DS_STACK && stack_times(d, za) == 0)
        return 0;
    za->origin[0] = '\0';
    snprintf(za->name, sizeof(za->name), d->kind == DS_STACK ? "frame" : "plane");
    za->unit[0] = '\0';
    for (long k = 0; k < d->nz; k++)
        za->values[k] = (double)k;
    return 0;
}

void zaxis_release(zaxis *za)
{
    free(za->values);
    za->values = NULL;
}

/* ---- 1-D replies ------------------------------------------------------------------------ */

int profile_format_parse(const char *s, profile_format *f)
{
    if (!s || strcmp(s, "json") == 0)
        *f = PROFILE_JSON;
    else if (strcmp(s, "npy") == 0)
        *f = PROFILE_NPY;
    else if (strcmp(s, "csv") == 0)
        *f = PROFILE_CSV;
    else
        return TESS_EINVAL;
    return 0;
}

const char *profile_format_name(profile_format f)
{
    return f == PROFILE_JSON ? "json" : f == PROFILE_NPY ? "npy" : "csv";
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

void reply_profile(hreq *r, profile_format f, struct json_t *doc, const zaxis *za, const double *values,
                   long n, const char *value_unit)
{
    if (f == PROFILE_NPY) {
        size_t len;
        unsigned char *out;
        int rc = npy_encode_f64_1d(values, n, &out, &len);
        json_decref(doc);
        if (rc) {
            problem_reply(r, 500, NULL, "out of memory");
            return;
        }
        hreq_reply_tile(r, 200, tile_new_take(out, len, "application/octet-stream"));
        return;
    }
    if (f == PROFILE_CSV) {
        json_decref(doc);
        buf b;
        buf_init(&b, (size_t)n * 64 + 4096);
        if (za->unit[0])
            buf_printf(&b, "%s [%s],value", za->name, za->unit);
        else
            buf_printf(&b, "%s,value", za->name);
        if (value_unit && value_unit[0])
            buf_printf(&b, " [%s]", value_unit);
        buf_adds(&b, "\n");
        for (long k = 0; k < n; k++)
            buf_printf(&b, "%.17g,%.17g\n", za->values[k], values[k]);
        size_t len;
        char *text = buf_detach(&b, &len);
        if (!text) {
            problem_reply(r, 500, NULL, "out of memory");
            return;
        }
        hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, len, "text/csv"));
        return;
    }
    json_t *zo = json_object(), *zv = json_array(), *vv = json_array();
    for (long k = 0; k < n; k++) {
        json_array_append_new(zv, real_or_null(za->values[k]));
        json_array_append_new(vv, real_or_null(values[k]));
    }
    json_object_set_new(zo, "name", json_string(za->name));
    json_object_set_new(zo, "unit", json_string(za->unit));
    if (za->origin[0])
        json_object_set_new(zo, "origin", json_string(za->origin));
    json_object_set_new(zo, "values", zv);
    json_object_set_new(doc, "z_axis", zo);
    json_object_set_new(doc, "values", vv);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(doc);
    if (!text) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, strlen(text),
                                          "application/json"));
}

/* ---- the series endpoint ------------------------------------------------------------- */

typedef struct series_job {
    const dataset *ds;
    long x, y;
    profile_format format;
} series_job;

/* The series from the attached rechunk copy when there is one that answers; 1 on
 * success, 0 to read the planes instead. */
static int series_from_profile(const dataset *d, long x, long y, double *out)
{
    char path[4096], err[256];
    if (!dataset_profile_path(d, path, sizeof(path)))
        return 0;
    return chunkstore_read_series(path, x, y, out, d->nz, err, sizeof(err)) == 0;
}

static void series_work(hreq *r)
{
    series_job *j = r->work_arg;
    const dataset *d = j->ds;
    char err[256];
    double *v = malloc((size_t)d->nz * sizeof(double));
    if (!v) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc = 0;
    /* The frames of a stack are read on the request's pool. */
    stack_cut_opts o = {r->srv->app->workers, hreq_priority(r), &r->cancel_v};
    if (!series_from_profile(d, j->x, j->y, v) &&
        (rc = stack_read_series_on(dataset_stack(d), &o, j->x, j->y, 0, d->nz, v, err,
                                   sizeof(err)))) {
        if (rc == TESS_ECANCELED) {
            hreq_reply_cancelled(r);
            free(v);
            return;
        }
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      d->name, err);
        free(v);
        return;
    }
    zaxis za;
    if (zaxis_compute(d, j->x, j->y, &za)) {
        problem_reply(r, 500, NULL, "out of memory");
        free(v);
        return;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "dataset", json_string(d->name));
    json_object_set_new(doc, "x", json_integer(j->x));
    json_object_set_new(doc, "y", json_integer(j->y));
    json_object_set_new(doc, "unit", d->bunit[0] ? json_string(d->bunit) : json_null());
    reply_profile(r, j->format, doc, &za, v, d->nz, d->bunit);
    zaxis_release(&za);
    free(v);
}

void handle_series(hreq *r, const route_match *m)
{
    const dataset *d = m->ds;
    static const char *const known[] = {"x", "y", "format", NULL};
    if (hreq_only_args(r, known))
        return;
    series_job j0;
    memset(&j0, 0, sizeof(j0));
    j0.ds = d;
    if (handler_pixel_xy(r, d, &j0.x, &j0.y))
        return;
    if (d->nz > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, NULL, "the series of %ld values is more than "
                      "limits.max_output_pixels = %lld", d->nz, r->srv->cfg->max_output_pixels);
        return;
    }
    const char *fs = hreq_arg(r, "format");
    if (profile_format_parse(fs, &j0.format)) {
        problem_reply(r, 400, "format", "format must be json, npy or csv, got '%.40s'", fs);
        return;
    }
    char version[64];
    dataset_version(d, version, sizeof(version));
    if (asprintf(&r->cache_key, "series|%s|%s|%ld|%ld|%s", d->name, version, j0.x, j0.y,
                 profile_format_name(j0.format)) < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    if (hreq_try_cache(r))
        return;
    series_job *j = malloc(sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    *j = j0;
    hreq_run_async(r, series_work, j, free);
}
