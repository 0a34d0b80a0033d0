/* The IVOA access layer: DataLink 1.1 links, SODA 1.0 sync cutouts, VOSI capabilities and availability, and a dataset's FITS file. */
#include "daemon/api/handlers.h"
#include "daemon/api/soda.h"
#include "daemon/api/vo.h"
#include "daemon/api/vo_xml.h"
#include "daemon/collection/colmembers.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/hash.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/tiffframe.h"
#include "engine/sky/skywcs.h"

#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- parameters: the query and a form-encoded POST body ------------------------------ */

static int hexval(int c)
{
    return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* Decodes s[0..n) of a form body ('+' is a blank, %XX a byte) into a new string. */
static char *form_decode(const char *s, size_t n)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            *o++ = ' ';
        } else if (s[i] == '%' && i + 2 < n && hexval((unsigned char)s[i + 1]) >= 0
                   && hexval((unsigned char)s[i + 2]) >= 0) {
            *o++ = (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

static int vo_params_add(vo_params *p, const char *key, size_t klen, const char *value,
                         size_t vlen, int decode)
{
    if (p->n == VO_MAX_PARAMS)
        return TESS_ERANGE;
    char *k = decode ? form_decode(key, klen) : strndup(key, klen);
    char *v = decode ? form_decode(value, vlen) : strndup(value, vlen);
    if (!k || !v) {
        free(k);
        free(v);
        return TESS_ENOMEM;
    }
    p->key[p->n] = k;
    p->value[p->n] = v;
    p->n++;
    return 0;
}

static void add_query_arg(void *cls, const char *key, const char *value)
{
    vo_params *p = cls;
    if (!value)
        value = "";
    int rc = vo_params_add(p, key, strlen(key), value, strlen(value), 0);
    if (rc && !p->failed)
        p->failed = rc;
}

int vo_params_collect(hreq *r, vo_params *p)
{
    memset(p, 0, sizeof(*p));
    hreq_args_each(r, add_query_arg, p);
    const char *ct = hreq_header(r, "Content-Type");
    if (r->body && r->body_len
        && (!ct || strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0)) {
        const char *s = r->body, *end = r->body + r->body_len;
        while (s < end && !p->failed) {
            const char *amp = memchr(s, '&', (size_t)(end - s));
            const char *stop = amp ? amp : end;
            const char *eq = memchr(s, '=', (size_t)(stop - s));
            if (stop > s) {
                const char *kend = eq ? eq : stop;
                const char *v = eq ? eq + 1 : stop;
                while (kend > s && (kend[-1] == '\r' || kend[-1] == '\n'))
                    kend--;
                const char *vend = stop;
                while (vend > v && (vend[-1] == '\r' || vend[-1] == '\n'))
                    vend--;
                int rc = vo_params_add(p, s, (size_t)(kend - s), v, (size_t)(vend - v), 1);
                if (rc && !p->failed)
                    p->failed = rc;
            }
            s = stop + 1;
        }
    }
    return p->failed;
}

int vo_params_take(hreq *r, vo_params *p)
{
    int rc = vo_params_collect(r, p);
    if (rc == 0)
        return 0;
    vo_params_release(p);
    if (rc == TESS_ERANGE)
        vo_reply_text(r, 400, "UsageError: more than %d parameters in one request",
                      VO_MAX_PARAMS);
    else
        vo_reply_text(r, 500, "FatalFault: out of memory");
    return -1;
}

const char *vo_params_get(const vo_params *p, const char *key, int *count)
{
    const char *first = NULL;
    int n = 0;
    for (int i = 0; i < p->n; i++)
        if (strcasecmp(p->key[i], key) == 0) {
            if (!first)
                first = p->value[i];
            n++;
        }
    if (count)
        *count = n;
    return first;
}

void vo_params_release(vo_params *p)
{
    for (int i = 0; i < p->n; i++) {
        free(p->key[i]);
        free(p->value[i]);
    }
    p->n = 0;
}

/* ---- replies ------------------------------------------------------------------------- */

void vo_reply_text(hreq *r, int status, const char *fmt, ...)
{
    char text[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof(text) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(text) - 2)
        n = (int)sizeof(text) - 2;
    text[n++] = '\n';
    unsigned char *body = malloc((size_t)n);
    if (!body) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    memcpy(body, text, (size_t)n);
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, status, tile_new_take(body, (size_t)n, "text/plain; charset=utf-8"));
}

void vo_reply_xml(hreq *r, int status, voxml *x, const char *content_type)
{
    size_t len = 0;
    char *text = x ? voxml_finish(x, &len) : NULL;
    if (!text) {
        vo_reply_text(r, 500, "FatalFault: out of memory");
        return;
    }
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, status, tile_new_take((unsigned char *)text, len, content_type));
}

void vo_base_url(hreq *r, char *out, size_t len)
{
    const char *host = hreq_header(r, "Host");
    const char *proto = hreq_header(r, "X-Forwarded-Proto");
    char fallback[96];
    if (!host || !*host || strlen(host) > 200
        || strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]")
               != strlen(host)) {
        snprintf(fallback, sizeof(fallback), "127.0.0.1:%d", tserver_port(r->srv));
        host = fallback;
    }
    snprintf(out, len, "%s://%s", proto && strcmp(proto, "https") == 0 ? "https" : "http", host);
}

/* The dataset an IVOA identifier names (the dataset name, or ivo://tessera/{name}), with
 * the checks of every route (catalog_lookup): 0, TESS_ENOTFOUND, or TESS_EIO with `why`
 * when its header changed since the start (the request then answers 500, as every other
 * route of the dataset does). */
static int vo_find(hreq *r, const char *id, const dataset **d, char *why, size_t whylen)
{
    static const char prefix[] = "ivo://tessera/";
    if (strncmp(id, prefix, sizeof(prefix) - 1) == 0)
        id += sizeof(prefix) - 1;
    return catalog_lookup(r->srv->app->cat, id, strlen(id), d, why, whylen);
}

/* 1 when the dataset's pixels are in FITS files (not a TIFF file, not a stack of PNG or
 * TIFF frames, whose header hash is 0): SODA cuts them with cfitsio's image sections. */
static int has_fits(const dataset *d)
{
    if (tiffframe_is_tiff(d->paths[0]))
        return 0;
    return d->kind != DS_STACK || (d->header_hash && d->header_hash[0] != 0);
}

/* ---- DataLink ------------------------------------------------------------------------ */

/* How many bytes of s, at most max, end on a UTF-8 character boundary: a name quoted
 * in part is not cut inside a character. */
static int utf8_prefix(const char *s, int max)
{
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max)
        return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

static void field(voxml *x, const char *name, const char *id, const char *datatype,
                  const char *ucd, const char *unit)
{
    voxml_start(x, "FIELD");
    voxml_attr(x, "name", name);
    voxml_attr(x, "ID", id);
    voxml_attr(x, "datatype", datatype);
    if (strcmp(datatype, "char") == 0)
        voxml_attr(x, "arraysize", "*");
    voxml_attr(x, "ucd", ucd);
    voxml_attr(x, "unit", unit);
    voxml_end(x);
}

/* One row of the {links} table; NULL cells are empty (null). */
static void link_row(voxml *x, const char *id, const char *url, const char *service_def,
                     const char *error, const char *semantics, const char *description,
                     const char *content_type, long long length)
{
    const char *cells[7] = {id, url, service_def, error, semantics, description, content_type};
    voxml_start(x, "TR");
    for (int i = 0; i < 7; i++)
        voxml_element(x, "TD", cells[i] ? cells[i] : "");
    if (length >= 0)
        voxml_elementf(x, "TD", "%lld", length);
    else
        voxml_element(x, "TD", "");
    voxml_end(x);
}

static int band_planes(const dataset *d, double lo, double hi, long *z0, long *z1, char *why,
                       size_t len);

/* Whether d has a celestial WCS on the sky: a solar frame is not the sky (no ICRS
 * regions, no HiPS). */
static int on_sky(const dataset *d)
{
    return d->cel && !sky_frame_is_solar(skywcs_frame(d->cel, NULL));
}

/* What SODA can cut of d: 0 nothing, else SODA_REGION (a celestial image or cube) and/or
 * SODA_BAND (a cube whose axis 3 gives wavelengths: every BAND would be refused
 * otherwise). */
enum { SODA_REGION = 1, SODA_BAND = 2 };
static int soda_cuts(const dataset *d)
{
    if (!has_fits(d))
        return 0;
    long z0, z1;
    char why[256];
    int cuts = on_sky(d) ? SODA_REGION : 0;
    if (d->kind == DS_CUBE && band_planes(d, -INFINITY, INFINITY, &z0, &z1, why,
                                          sizeof(why)) == 0)
        cuts |= SODA_BAND;
    return cuts;
}

static void dataset_links(voxml *x, const char *base, const char *id, const dataset *d,
                          int cuts, long long max_output_pixels)
{
    char url[512], text[256];
    long long stored = dataset_fits_stored_length(d);
    snprintf(url, sizeof(url), "%s/api/v1/datasets/%s/fits", base, d->name);
    snprintf(text, sizeof(text), "%s as a FITS file: %s", d->name,
             d->kind == DS_STACK ? "a cube of its frames"
             : stored >= 0 ? "its primary HDU as stored" : "the HDU's image");
    link_row(x, id, url, NULL, NULL, "#this", text, "application/fits",
             dataset_fits_length(d, max_output_pixels));
    if (cuts) {
        snprintf(text, sizeof(text), "cutouts of %s (SODA sync: %s): native pixels, the WCS "
                 "kept", d->name, cuts == SODA_BAND ? "BAND"
                 : cuts & SODA_BAND ? "CIRCLE, POLYGON, POS, BAND" : "CIRCLE, POLYGON, POS");
        link_row(x, id, NULL, cuts & SODA_BAND ? "soda-band" : "soda", NULL, "#cutout", text,
                 "application/fits", -1);
    }
    long side = d->nx > d->ny ? d->nx : d->ny;
    snprintf(url, sizeof(url), "%s/iiif/3/%s/full/%s/0/default.png", base, d->name,
             side <= 1024 ? "max" : "!1024,1024");
    snprintf(text, sizeof(text), "a PNG preview of %s%s", d->name,
             d->nz > 1 ? " (its first plane)" : "");
    link_row(x, id, url, NULL, NULL, "#preview", text, "image/png", -1);
    snprintf(url, sizeof(url), "%s/iiif/3/%s/info.json", base, d->name);
    /* application/json: what a GET without Accept: application/ld+json is answered (IIIF
     * Image API 3.0, section 5.1; reply_info in iiif.c). */
    snprintf(text, sizeof(text), "IIIF Image API 3.0 view of %s (info.json)", d->name);
    link_row(x, id, url, NULL, NULL, "#auxiliary", text, "application/json", -1);
    /* The Presentation API 3.0 manifest (one canvas a plane or frame): what Mirador and
     * other IIIF viewers open; typed as a GET without Accept is answered (reply_ld). */
    snprintf(url, sizeof(url), "%s/iiif/3/%s/manifest.json", base, d->name);
    snprintf(text, sizeof(text), "IIIF Presentation API 3.0 manifest of %s%s", d->name,
             d->nz > 1 ? (d->kind == DS_STACK ? " (a canvas a frame)" : " (a canvas a plane)")
                       : "");
    link_row(x, id, url, NULL, NULL, "#auxiliary", text, "application/json", -1);
    if (on_sky(d)) {
        snprintf(url, sizeof(url), "%s/hips/%s/", base, d->name);
        snprintf(text, sizeof(text), "HiPS 1.0 survey of %s%s (give this URL to a HiPS "
                 "client)", d->name, d->nz > 1 ? ", a HiPS cube" : "");
        link_row(x, id, url, NULL, NULL, "#auxiliary", text, "text/html", -1);
    }
}

/* The SODA service descriptor: ID "soda" with the region parameters, or "soda-band"
 * with BAND as well (for cubes whose axis 3 gives wavelengths). */
static void soda_descriptor(voxml *x, const char *base, int band)
{
    char url[512];
    voxml_start(x, "RESOURCE");
    voxml_attr(x, "type", "meta");
    voxml_attr(x, "utype", "adhoc:service");
    voxml_attr(x, "ID", band ? "soda-band" : "soda");
    voxml_start(x, "DESCRIPTION");
    voxml_text(x, band ? "SODA 1.0 sync cutouts of Tessera's spectral cubes (regions and "
               "wavelength bands)" : "SODA 1.0 sync cutouts of Tessera's datasets (regions)");
    voxml_end(x);
    static const struct { const char *name, *value; } meta[] = {
        {"standardID", "ivo://ivoa.net/std/SODA#sync-1.0"}, {"accessURL", NULL}};
    snprintf(url, sizeof(url), "%s/vo/soda/sync", base);
    for (int i = 0; i < 2; i++) {
        voxml_char_param(x, meta[i].name, meta[i].value ? meta[i].value : url);
    }
    voxml_start(x, "GROUP");
    voxml_attr(x, "name", "inputParams");
    static const struct {
        const char *name, *ucd, *unit, *datatype, *arraysize, *xtype, *what;
    } in[] = {
        {"ID", "meta.id;meta.dataset", NULL, "char", "*", NULL, "the dataset"},
        {"CIRCLE", "obs.field", "deg", "double", "3", "circle",
         "ICRS centre and radius, degrees"},
        {"POLYGON", "obs.field", "deg", "double", "*", "polygon",
         "ICRS vertices, degrees"},
        {"POS", "obs.field", NULL, "char", "*", NULL,
         "CIRCLE ra dec r, RANGE ra1 ra2 dec1 dec2 or POLYGON ra dec ..., degrees"},
        {"BAND", "em.wl;stat.interval", "m", "double", "2", "interval",
         "wavelengths (vacuum), metres, on the spectral axis of a cube"},
    };
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]) - (band ? 0 : 1); i++) {
        voxml_start(x, "PARAM");
        voxml_attr(x, "name", in[i].name);
        voxml_attr(x, "ucd", in[i].ucd);
        voxml_attr(x, "unit", in[i].unit);
        voxml_attr(x, "datatype", in[i].datatype);
        voxml_attr(x, "arraysize", in[i].arraysize);
        voxml_attr(x, "xtype", in[i].xtype);
        voxml_attr(x, "value", "");
        if (i == 0)
            voxml_attr(x, "ref", "dl_id");
        voxml_element(x, "DESCRIPTION", in[i].what);
        voxml_end(x);
    }
    voxml_end(x);   /* GROUP */
    voxml_end(x);   /* RESOURCE */
}

void handle_vo_datalink(hreq *r, const route_match *m)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    int nid = 0;
    vo_params_get(&p, "ID", &nid);
    const char *fmt = vo_params_get(&p, "RESPONSEFORMAT", NULL);
    if (fmt && *fmt && strncmp(fmt, "application/x-votable+xml", 25) != 0
        && strcmp(fmt, "votable") != 0 && strcmp(fmt, "text/xml") != 0) {
        vo_reply_text(r, 400, "UsageError: RESPONSEFORMAT '%.80s' is not served: DataLink "
                      "answers application/x-votable+xml;content=datalink", fmt);
        vo_params_release(&p);
        return;
    }
    if (nid == 0) {
        vo_params_release(&p);
        vo_reply_text(r, 400, "UsageError: give the dataset as ID= (one or more)");
        return;
    }
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = voxml_results_new("OK", "ivo://ivoa.net/std/DataLink#links-1.1");
    if (x) {
        voxml_start(x, "TABLE");
        field(x, "ID", "dl_id", "char", "meta.id;meta.main", NULL);
        field(x, "access_url", NULL, "char", "meta.ref.url", NULL);
        field(x, "service_def", NULL, "char", "meta.ref", NULL);
        field(x, "error_message", NULL, "char", "meta.code.error", NULL);
        field(x, "semantics", NULL, "char", "meta.code", NULL);
        field(x, "description", NULL, "char", "meta.note", NULL);
        field(x, "content_type", NULL, "char", "meta.code.mime", NULL);
        field(x, "content_length", NULL, "long", "phys.size;meta.file", "byte");
        voxml_start(x, "DATA");
        voxml_start(x, "TABLEDATA");
        int any_soda = 0, any_band = 0;
        for (int i = 0; i < p.n; i++) {
            if (strcasecmp(p.key[i], "ID") != 0)
                continue;
            const dataset *d;
            char why[600];
            int rc = vo_find(r, p.value[i], &d, why, sizeof(why));
            if (rc == TESS_EIO) {   /* as every other route of the dataset answers */
                size_t n;
                free(voxml_finish(x, &n));
                vo_params_release(&p);
                vo_reply_text(r, 500, "FatalFault: %s", why);
                return;
            }
            if (rc && sia_datalink_member(r, x, base, p.value[i])) {
                any_soda = 1;   /* a collection's member image */
                continue;
            }
            if (rc) {
                char msg[200];
                snprintf(msg, sizeof(msg), "NotFoundFault: no dataset '%.*s'",
                         utf8_prefix(p.value[i], 120), p.value[i]);
                link_row(x, p.value[i], NULL, NULL, msg, "#this", NULL, NULL, -1);
                continue;
            }
            int cuts = soda_cuts(d);
            dataset_links(x, base, p.value[i], d, cuts, r->srv->cfg->max_output_pixels);
            any_soda |= cuts && !(cuts & SODA_BAND);
            any_band |= cuts & SODA_BAND;
        }
        voxml_end(x);   /* TABLEDATA */
        voxml_end(x);   /* DATA */
        voxml_end(x);   /* TABLE */
        voxml_end(x);   /* RESOURCE */
        if (any_soda)
            soda_descriptor(x, base, 0);
        if (any_band)
            soda_descriptor(x, base, 1);
    }
    vo_params_release(&p);
    vo_reply_xml(r, 200, x, "application/x-votable+xml;content=datalink");
}

/* ---- SODA ---------------------------------------------------------------------------- */

/* The planes [*z0, *z1) of cube d whose wavelengths lie in [lo, hi] metres.  Returns 0,
 * 1 when none does, or -1 with `why` (a UsageError), or TESS_ENOMEM. */
static int band_planes(const dataset *d, double lo, double hi, long *z0, long *z1, char *why,
                       size_t len)
{
    if (d->kind != DS_CUBE || !d->wcs) {
        snprintf(why, len, "BAND needs a cube with a spectral axis; dataset '%s' is %s %s",
                 d->name, d->kind == DS_IMAGE ? "an" : "a", ds_kind_name(d->kind));
        return -1;
    }
    skywcs *w = skywcs_copy(d->wcs);
    double *world = malloc(sizeof(double) * (size_t)d->nz);
    if (!w || !world) {
        skywcs_free(w);
        free(world);
        return TESS_ENOMEM;
    }
    char ctype[72] = "", cunit[72] = "";
    int rc = skywcs_zaxis(w, (double)(d->nx / 2), (double)(d->ny / 2), d->nz, world, ctype,
                          sizeof(ctype), cunit, sizeof(cunit));
    skywcs_free(w);
    if (rc) {
        free(world);
        if (rc == TESS_ENOMEM)
            return rc;
        snprintf(why, len, "BAND needs a spectral axis 3; dataset '%s' has none", d->name);
        return -1;
    }
    /* The header's rest frequency or wavelength, else the configured rest_frequency. */
    double rest = dataset_rest_frequency(d);
    long first = -1, last = -1;
    int spectral = 0;
    for (long k = 0; k < d->nz; k++) {
        double lam = skywcs_spectral_wavelength(ctype, world[k], rest);
        if (isnan(lam))
            continue;
        spectral = 1;
        if (lam >= lo && lam <= hi) {
            if (first < 0)
                first = k;
            last = k;
        }
    }
    free(world);
    if (!spectral) {
        snprintf(why, len, "BAND: axis 3 of dataset '%s' is %s%s: no wavelength to select by",
                 d->name, ctype[0] ? ctype : "not spectral",
                 ctype[0] && skywcs_spectral_needs_rest(ctype)
                     ? " without RESTFRQ, RESTWAV or a configured rest_frequency" : "");
        return -1;
    }
    if (first < 0)
        return 1;
    *z0 = first;
    *z1 = last + 1;
    return 0;
}

/* A SODA cut to make on the pool: the box lo/n of `path`'s HDU, as the region and the
 * band select it (found there too). */
typedef struct fits_job {
    const dataset *ds;
    const char *path;
    long lo[3], n[3];
    soda_region *region;     /* the region (kind SODA_NONE: none), owned */
    int band;                /* BAND given, [band_lo, band_hi] metres */
    double band_lo, band_hi;
    char band_text[64];
    struct colset *held_by;  /* not NULL: ds is a collection's member held from it */
} fits_job;

static void fits_job_free(void *arg)
{
    fits_job *j = arg;
    if (j->held_by)
        colmembers_release(j->held_by, j->ds);
    free(j->region);
    free(j);
}

/* Answers 413 when n[0] x n[1] x n[2] passes limits.max_output_pixels (returns 1). */
static int too_many_pixels(hreq *r, const long n[3])
{
    long long pixels = (long long)n[0] * n[1] * n[2];
    long long max = r->srv->cfg->max_output_pixels;
    if (max <= 0 || pixels <= max)
        return 0;
    vo_reply_text(r, 413, "UsageError: the cutout has %lld pixels, more than this server "
                  "gives at once (limits.max_output_pixels = %lld): cut a smaller region "
                  "or BAND", pixels, max);
    return 1;
}

/* On the pool: the region's pixel box and the BAND's planes into j->lo, j->n.
 * Returns 0, or -1 after an answer (or with the request stopped: its client left). */
static int soda_select(hreq *r, fits_job *j)
{
    const dataset *d = j->ds;
    if (j->region->kind != SODA_NONE || j->region->whole) {
        long box[4];
        skywcs *w = skywcs_copy(d->cel);
        int rc = w ? soda_region_box(w, d->nx, d->ny, j->region, &r->cancel_v, box)
                   : TESS_ENOMEM;
        skywcs_free(w);
        if (rc == TESS_ECANCELED) {
            hreq_reply_cancelled(r);
            return -1;
        }
        if (rc == TESS_ENOMEM) {
            vo_reply_text(r, 503, "TransientFault: out of memory; retry shortly");
            return -1;
        }
        if (rc) {
            vo_reply_text(r, 400, "NoOverlap: the region does not overlap dataset '%s'",
                          d->name);
            return -1;
        }
        j->lo[0] = box[0];
        j->n[0] = box[1] - box[0];
        j->lo[1] = box[2];
        j->n[1] = box[3] - box[2];
    }
    if (j->band) {
        char why[240];
        long z0 = 0, z1 = 0;
        int rc = band_planes(d, j->band_lo, j->band_hi, &z0, &z1, why, sizeof(why));
        if (rc == TESS_ENOMEM) {
            vo_reply_text(r, 503, "TransientFault: out of memory; retry shortly");
            return -1;
        }
        if (rc < 0) {
            vo_reply_text(r, 400, "UsageError: %s", why);
            return -1;
        }
        if (rc > 0) {
            vo_reply_text(r, 400, "NoOverlap: no plane of dataset '%s' lies in BAND %s",
                          d->name, j->band_text);
            return -1;
        }
        j->lo[2] = z0;
        j->n[2] = z1 - z0;
    }
    return too_many_pixels(r, j->n) ? -1 : 0;
}

static void fits_copy_work(hreq *r)
{
    fits_job *j = r->work_arg;
    if (soda_select(r, j))
        return;
    unsigned char *out = NULL;
    size_t len = 0;
    char err[256] = "";
    int rc = fitsimg_copy_section(j->path, j->ds->hdu, j->lo, j->n, &out, &len, err,
                                  sizeof(err));
    if (rc == 0) {
        r->rep.cache_control = "no-cache";
        hreq_reply_tile(r, 200, tile_new_take(out, len, "application/fits"));
    } else {
        vo_reply_text(r, rc == TESS_ENOMEM ? 503 : 500, "%s: cannot cut dataset '%s': %s",
                      rc == TESS_ENOMEM ? "TransientFault" : "FatalFault", j->ds->name, err);
    }
}

/* SODA sync.  The parameters are checked here (bounded: at most VO_MAX_PARAMS values,
 * a POLYGON of SODA_MAX_VERTICES); the region's pixel box, the BAND's planes and the
 * cut are made on the pool, off the HTTP threads. */
void handle_vo_soda(hreq *r, const route_match *m)
{
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    char why[300] = "";
    int nid = 0, nband = 0, nc = 0, np = 0, npos = 0;
    const char *id = vo_params_get(&p, "ID", &nid);
    const char *band = vo_params_get(&p, "BAND", &nband);
    const char *fmt = vo_params_get(&p, "RESPONSEFORMAT", NULL);
    const char *circle = vo_params_get(&p, "CIRCLE", &nc);
    const char *poly = vo_params_get(&p, "POLYGON", &np);
    const char *pos = vo_params_get(&p, "POS", &npos);
    const dataset *d = NULL;
    fits_job *j = calloc(1, sizeof(*j));
    soda_region *g = j ? calloc(1, sizeof(*g)) : NULL;
    int status = 400;
    if (!g) {
        status = 500;
        snprintf(why, sizeof(why), "FatalFault: out of memory");
        goto fail;
    }
    j->region = g;
    const char *unserved = vo_params_get(&p, "TIME", NULL) ? "TIME"
                           : vo_params_get(&p, "POL", NULL) ? "POL" : NULL;
    if (unserved) {
        /* A filter that cannot be applied is refused, not ignored: the answer would hold
         * data outside what was asked. */
        snprintf(why, sizeof(why), "UsageError: %s is not served: Tessera's datasets have "
                 "no %s axis it can select (ID, CIRCLE, POLYGON, POS and BAND are)",
                 unserved, strcmp(unserved, "TIME") == 0 ? "time" : "polarization");
        goto fail;
    }
    /* One dataset, which may be named more than once: pyvo's SodaQuery.from_resource
     * given a whole DataLink table (not one row) sends the ID of every row, and a
     * dataset's rows (#this, #cutout ...) all hold its ID. */
    int ndiff = 0;
    for (int i = 0; i < p.n; i++)
        if (strcasecmp(p.key[i], "ID") == 0 && strcmp(p.value[i], id) != 0)
            ndiff++;
    if (nid == 0 || ndiff) {
        snprintf(why, sizeof(why), "UsageError: give one dataset as ID= (got %s)",
                 nid == 0 ? "none" : "IDs of more than one dataset; with pyvo, give "
                 "SodaQuery.from_resource one row of the DataLink table");
        goto fail;
    }
    if (fmt && *fmt && strcmp(fmt, "application/fits") != 0 && strcmp(fmt, "fits") != 0) {
        snprintf(why, sizeof(why), "UsageError: RESPONSEFORMAT '%.60s' is not served: cutouts "
                 "are application/fits", fmt);
        goto fail;
    }
    char changed[600];
    int found = vo_find(r, id, &d, changed, sizeof(changed));
    if (found == TESS_EIO) {
        status = 500;
        snprintf(why, sizeof(why), "FatalFault: %.280s", changed);
        goto fail;
    }
    if (found && sia_member_dataset(r, id, &d) == 0) {
        /* a collection's member image (its publisher DID), held until the job ends */
        found = 0;
        j->ds = d;
        j->held_by = r->srv->app->collections;
    }
    if (found) {
        status = 404;
        snprintf(why, sizeof(why), "NotFoundFault: no dataset '%.120s'", id);
        goto fail;
    }
    if (!has_fits(d)) {
        snprintf(why, sizeof(why), "UsageError: dataset '%s' is stored as PNG or TIFF, not FITS: "
                 "SODA cuts FITS pixels only (its /api/v1/datasets/%s/fits is a FITS copy)",
                 d->name, d->name);
        goto fail;
    }
    char reason[240];
    if (nc + np + npos > 1) {
        snprintf(why, sizeof(why), "UsageError: give one region: one CIRCLE, POLYGON or POS");
        goto fail;
    }
    if (soda_region_parse(circle, poly, pos, g, reason, sizeof(reason))) {
        snprintf(why, sizeof(why), "UsageError: %s", reason);
        goto fail;
    }
    if ((g->kind != SODA_NONE || g->whole) && !d->cel) {
        snprintf(why, sizeof(why), "UsageError: dataset '%.60s' has no celestial WCS "
                 "(%.120s): CIRCLE, POLYGON and POS cannot select its pixels", d->name,
                 d->wcs_error[0] ? d->wcs_error : "none in its header");
        goto fail;
    }
    if ((g->kind != SODA_NONE || g->whole) && sky_frame_is_solar(skywcs_frame(d->cel, NULL))) {
        sky_frame f = skywcs_frame(d->cel, NULL);
        snprintf(why, sizeof(why), "UsageError: dataset '%.60s' is in the solar frame %s (%s), "
                 "not on the sky: CIRCLE, POLYGON and POS are in the sky frame ICRS and cannot "
                 "select its pixels", d->name, sky_frame_name(f), sky_frame_axes(f));
        goto fail;
    }
    if (nband > 1) {
        snprintf(why, sizeof(why), "MultiValuedParamNotSupported: one BAND per request");
        goto fail;
    }
    if (band) {
        double b[2];
        if (soda_read_numbers(band, b, 2) != 2 || b[0] > b[1]) {
            snprintf(why, sizeof(why), "UsageError: BAND must be two wavelengths lo hi in "
                     "metres (-Inf, +Inf allowed), got '%.60s'", band);
            goto fail;
        }
        j->band = 1;
        j->band_lo = b[0];
        j->band_hi = b[1];
        snprintf(j->band_text, sizeof(j->band_text), "%.60s", band);
    }
    j->ds = d;
    j->path = d->paths[0];
    j->n[0] = d->nx;
    j->n[1] = d->ny;
    j->n[2] = d->kind == DS_CUBE ? d->nz : 1;
    vo_params_release(&p);
    hreq_run_async(r, fits_copy_work, j, fits_job_free);
    return;
fail:
    if (j)
        fits_job_free(j);
    vo_params_release(&p);
    vo_reply_text(r, status, "%s", why);
}

/* ---- VOSI ---------------------------------------------------------------------------- */

static void capability(voxml *x, const char *base, const char *standard_id, const char *path)
{
    voxml_start(x, "capability");
    voxml_attr(x, "standardID", standard_id);
    voxml_start(x, "interface");
    voxml_attr(x, "xsi:type", "vs:ParamHTTP");
    voxml_attr(x, "role", "std");
    voxml_start(x, "accessURL");
    voxml_attr(x, "use", "full");
    char url[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    voxml_text(x, url);
    voxml_end(x);
    voxml_end(x);
    voxml_end(x);
}

void handle_vo_capabilities(hreq *r, const route_match *m)
{
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = voxml_new();
    if (x) {
        voxml_start(x, "vosi:capabilities");
        voxml_attr(x, "xmlns:vosi", "http://www.ivoa.net/xml/VOSICapabilities/v1.0");
        voxml_attr(x, "xmlns:vr", "http://www.ivoa.net/xml/VOResource/v1.0");
        voxml_attr(x, "xmlns:vs", "http://www.ivoa.net/xml/VODataService/v1.1");
        voxml_attr(x, "xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance");
        capability(x, base, "ivo://ivoa.net/std/VOSI#capabilities", "/vo/capabilities");
        capability(x, base, "ivo://ivoa.net/std/VOSI#availability", "/vo/availability");
        capability(x, base, "ivo://ivoa.net/std/DataLink#links-1.1", "/vo/datalink");
        capability(x, base, "ivo://ivoa.net/std/SODA#sync-1.0", "/vo/soda/sync");
        if (r->srv->app->jobs)
            capability(x, base, "ivo://ivoa.net/std/UWS", "/vo/uws/jobs");
        capability(x, base, "ivo://ivoa.net/std/SIA#query-2.0", "/vo/sia/query");
        capability(x, base, "ivo://ivoa.net/std/SIA", "/vo/sia1/query");
    }
    vo_reply_xml(r, 200, x, "application/xml");
}

void handle_vo_availability(hreq *r, const route_match *m)
{
    voxml *x = voxml_new();
    if (x) {
        voxml_start(x, "avl:availability");
        voxml_attr(x, "xmlns:avl", "http://www.ivoa.net/xml/VOSIAvailability/v1.0");
        voxml_element(x, "avl:available", "true");
        voxml_elementf(x, "avl:note", "Tessera serves %d datasets; jobs (UWS) are %s",
                       catalog_count(r->srv->app->cat), r->srv->app->jobs ? "enabled" : "disabled "
                       "(jobs.dir is not set)");
    }
    vo_reply_xml(r, 200, x, "application/xml");
}
