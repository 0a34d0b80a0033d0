/* GET /api/v1/datasets and /api/v1/datasets/{name}: kind, shape, BITPIX, BUNIT, WCS summary. */
#include "daemon/api/handlers.h"
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <string.h>

/* The WCS summary of docs/DESIGN.md ("Dataset descriptions"), or JSON null when the header
 * has no WCS keywords. */
static json_t *wcs_json(const dataset *d)
{
    if (!d->wcs)
        return json_null();
    skywcs_summary s;
    skywcs_describe(d->wcs, &s);
    int any = 0;
    for (int i = 0; i < s.naxis; i++)
        if (s.ctype[i][0])
            any = 1;
    if (!any)
        return json_null();
    json_t *o = json_object();
    json_t *ctype = json_array(), *crval = json_array(), *crpix = json_array();
    json_t *cunit = json_array();
    for (int i = 0; i < s.naxis; i++) {
        json_array_append_new(ctype, json_string(s.ctype[i]));
        json_array_append_new(cunit, json_string(s.cunit[i]));
        json_array_append_new(crval, json_real(s.crval[i]));
        json_array_append_new(crpix, json_real(s.crpix[i]));
    }
    json_object_set_new(o, "ctype", ctype);
    json_object_set_new(o, "cunit", cunit);
    json_object_set_new(o, "crval", crval);
    json_object_set_new(o, "crpix", crpix);
    /* The linear part as CD (= CDELT_i PC_ij) when the header gave CD or the PC matrix is
     * not the identity (a DSS plate solution becomes PC + CDELT in wcslib); CDELT alone
     * would misstate the pixel scale there. */
    int diagonal = 1;
    for (int i = 0; i < s.naxis; i++)
        for (int j = 0; j < s.naxis; j++)
            if (s.cd[i * s.naxis + j] != (i == j ? s.cdelt[i] : 0.0))
                diagonal = 0;
    if (s.has_cd || !diagonal) {
        json_t *cd = json_array();
        for (int i = 0; i < s.naxis; i++) {
            json_t *row = json_array();
            for (int j = 0; j < s.naxis; j++)
                json_array_append_new(row, json_real(s.cd[i * s.naxis + j]));
            json_array_append_new(cd, row);
        }
        json_object_set_new(o, "cd", cd);
    } else {
        json_t *cdelt = json_array();
        for (int i = 0; i < s.naxis; i++)
            json_array_append_new(cdelt, json_real(s.cdelt[i]));
        json_object_set_new(o, "cdelt", cdelt);
    }
    if (s.frame != SKY_FRAME_NONE) {
        json_object_set_new(o, "frame", json_string(sky_frame_name(s.frame)));
        if (s.equinox > 0)
            json_object_set_new(o, "equinox", json_real(s.equinox));
    } else {
        json_object_set_new(o, "frame", json_null());
    }
    return o;
}

/* The solar description of a WCS in a solar frame: the frame, the solar radius
 * (RSUN_REF, metres), the observer (Stonyhurst longitude and latitude in degrees,
 * distance in metres, Carrington longitude when the header gives it; null when the
 * header does not place it) and the date (DATE-OBS, else DATE-AVG; null when absent). */
static json_t *solar_json(const skywcs *w)
{
    const solar_obs *so = skywcs_solar(w);
    json_t *o = json_object();
    json_object_set_new(o, "frame", json_string(sky_frame_name(skywcs_frame(w, NULL))));
    json_object_set_new(o, "rsun_ref", json_real(so->rsun));
    json_object_set_new(o, "date_obs", so->date[0] ? json_string(so->date) : json_null());
    if (so->known) {
        json_t *ob = json_object();
        json_object_set_new(ob, "hgln_obs", json_real(so->lon));
        json_object_set_new(ob, "hglt_obs", json_real(so->lat));
        json_object_set_new(ob, "dsun_obs", json_real(so->dist));
        json_object_set_new(ob, "crln_obs",
                            so->has_carr ? json_real(so->lon + so->carr_off) : json_null());
        json_object_set_new(o, "observer", ob);
    } else {
        json_object_set_new(o, "observer", json_null());
    }
    return o;
}

static json_t *dataset_json(const dataset *d)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "kind", json_string(ds_kind_name(d->kind)));
    json_t *shape = json_array();
    json_array_append_new(shape, json_integer(d->nx));
    json_array_append_new(shape, json_integer(d->ny));
    if (d->kind != DS_IMAGE)
        json_array_append_new(shape, json_integer(d->nz));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "bitpix", json_integer(d->bitpix));
    json_object_set_new(o, "bunit", d->bunit[0] ? json_string(d->bunit) : json_null());
    /* A solar frame is not the sky: `celestial` says whether the dataset has a place on
     * the sky, `solar` describes the Sun and observer of a solar one (else null). */
    const solar_obs *so = skywcs_solar(d->cel);
    json_object_set_new(o, "celestial", json_boolean(d->cel != NULL && !so));
    json_object_set_new(o, "solar", so ? solar_json(d->cel) : json_null());
    json_object_set_new(o, "wcs", wcs_json(d));
    json_object_set_new(o, "wcs_error",
                        d->wcs_error[0] ? json_string(d->wcs_error) : json_null());
    return o;
}

void handler_reply_unsolved(hreq *r, const struct collection *c)
{
    problem_reply(r, 503, NULL, "collection '%s': its background offsets are being solved "
                  "(or were solved again during this request); retry later", c->name);
    r->rep.retry_after = COLBG_RETRY_AFTER_S;
}

const dataset *handler_dataset(hreq *r, const char *name, size_t len)
{
    const dataset *d;
    char why[600];
    int rc = catalog_lookup(r->srv->app->cat, name, len, &d, why, sizeof(why));
    if (rc == TESS_ENOTFOUND) {   /* a name too long to be one is shown cut to 64 bytes */
        problem_reply(r, 404, "dataset", "no dataset named '%.*s'",
                      (int)(len < 72 ? len : 64), name);
        return NULL;
    }
    if (rc) {   /* a header changed since the start */
        problem_reply(r, 500, NULL, "%s", why);
        return NULL;
    }
    return d;
}

int handler_need_celestial(hreq *r, const dataset *d, const char *without)
{
    if (d->wcs_error[0]) {
        problem_reply(r, 422, "dataset", "dataset '%s' has no usable WCS: %s", d->name,
                      d->wcs_error);
        return -1;
    }
    if (!d->cel) {
        problem_reply(r, 422, "dataset", "dataset '%s' has no celestial WCS: %s", d->name,
                      without);
        return -1;
    }
    return 0;
}

int handler_need_sky(hreq *r, const dataset *d, const char *param, const char *asked)
{
    if (handler_need_celestial(r, d, "it has no sky coordinates"))
        return -1;
    sky_frame f = skywcs_frame(d->cel, NULL);
    if (sky_frame_is_solar(f)) {
        problem_reply(r, 422, param, "dataset '%s' is in the solar frame %s (%s), not on the "
                      "sky: the sky frame %s does not apply to it", d->name, sky_frame_name(f),
                      sky_frame_axes(f), asked);
        return -1;
    }
    return 0;
}

/* One pixel coordinate `key` in 0..n-1 (the 0-based pixel `axis`); 400 naming it otherwise. */
static int pixel_coord(hreq *r, const char *key, long n, const char *axis, long *out)
{
    const char *s = hreq_arg(r, key);
    if (!s) {
        problem_reply(r, 400, key, "%s is required (0-based pixel %s)", key, axis);
        return -1;
    }
    int rc = param_long(s, 0, n - 1, out);
    if (rc == TESS_ERANGE) {
        problem_reply(r, 400, key, "%s = %.40s is outside 0..%ld", key, s, n - 1);
        return -1;
    }
    if (rc) {
        problem_reply(r, 400, key, "%s must be an integer (0-based pixel %s), got '%.40s'", key,
                      axis, s);
        return -1;
    }
    return 0;
}

int handler_pixel_xy(hreq *r, const dataset *d, long *x, long *y)
{
    return pixel_coord(r, "x", d->nx, "column", x) || pixel_coord(r, "y", d->ny, "row", y)
           ? -1 : 0;
}

int handler_plane(hreq *r, const dataset *d, long z, int status)
{
    if (z >= 0 && z < d->nz)
        return 0;
    problem_reply(r, status, "plane", "dataset '%s' has %ld plane%s: no plane %ld (planes 0..%ld)",
                  d->name, d->nz, d->nz == 1 ? "" : "s", z, d->nz - 1);
    return -1;
}

/* The value of hex digit c, or -1. */
static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int handler_slashed_name(hreq *r, const char *prefix, size_t plen, const char *parameter)
{
    if (!r->target || strncmp(r->target, prefix, plen) != 0)
        return 0;
    const char *s = r->target + plen;
    size_t n = strcspn(s, "/?");
    int slash = 0;
    for (size_t i = 0; i + 2 < n; i++)
        slash |= s[i] == '%' && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'f';
    if (!slash)
        return 0;
    char asked[72];   /* shown cut to 64 bytes, as handler_dataset shows a long name */
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hex_digit(s[i + 1])) >= 0 &&
            (lo = hex_digit(s[i + 2])) >= 0) {
            asked[k] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            asked[k] = s[i];
        }
        if ((unsigned char)asked[k] < 32 || (unsigned char)asked[k] > 126)
            asked[k] = '?';   /* shown as printable ASCII: the problem is JSON text */
        k++;
    }
    problem_reply(r, 404, parameter, "no dataset named '%.*s' (dataset names hold no '/')",
                  (int)k, asked);
    return 1;
}

int prepare_dataset(hreq *r, route_match *m)
{
    const char *pat = m->route ? m->route->pattern : NULL;
    const char *brace = pat ? strchr(pat, '{') : NULL;
    if (brace && handler_slashed_name(r, pat, (size_t)(brace - pat), "dataset"))
        return -1;
    m->ds = handler_dataset(r, m->segment_at, m->segment_len);
    return m->ds ? 0 : -1;
}

int prepare_dataset_or_collection(hreq *r, route_match *m)
{
    if (m->segment[0] && colset_find(r->srv->app->collections, m->segment)) {
        m->ds = NULL;
        return 0;
    }
    return prepare_dataset(r, m);
}

void handle_datasets_list(hreq *r, const route_match *m)
{
    static const char *const known[] = {NULL};
    if (hreq_only_args(r, known))
        return;
    json_t *a = json_array();
    int n = catalog_count(r->srv->app->cat);
    for (int i = 0; i < n; i++)
        json_array_append_new(a, dataset_describe(catalog_at(r->srv->app->cat, i), 0));
    hreq_reply_json(r, 200, json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17)));
    json_decref(a);
}

json_t *dataset_describe(const dataset *d, int with_header)
{
    json_t *o = dataset_json(d);
    if (!with_header)
        return o;
    json_t *cards = json_array();
    for (int i = 0; i < d->nkeys; i++) {
        const char *c = d->header + (size_t)i * 80;
        int len = 80;
        while (len > 0 && c[len - 1] == ' ')
            len--;
        json_t *s = json_stringn(c, (size_t)len);
        json_array_append_new(cards, s ? s : json_string(""));
    }
    json_object_set_new(o, "header", cards);
    if (d->kind == DS_STACK) {
        json_t *frames = json_array();
        for (int i = 0; i < d->npaths; i++) {
            const char *base = strrchr(d->paths[i], '/');
            json_array_append_new(frames, json_string(base ? base + 1 : d->paths[i]));
        }
        json_object_set_new(o, "frames", frames);
    }
    return o;
}

void handle_dataset_info(hreq *r, const route_match *m)
{
    static const char *const known[] = {NULL};
    if (hreq_only_args(r, known))
        return;
    json_t *o = dataset_describe(m->ds, 1);
    hreq_reply_json(r, 200, json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)));
    json_decref(o);
}
