/* Discovery of collection members: IVOA SIA 2.0 (/vo/sia/query, ObsCore-shaped rows with a
 * DataLink service descriptor), SIA 1.0 (/vo/sia1/query), the members' FITS files and the
 * collections' JSON descriptions.  The geometry is daemon/collection/collection.c's. */
#include "daemon/api/handlers.h"
#include "daemon/api/vo.h"
#include "daemon/api/vo_xml.h"
#include "daemon/collection/collection.h"
#include "daemon/collection/colmembers.h"
#include "daemon/collection/colregion.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIA_MAX_REGIONS 16
#define SIA_MAXREC_DEFAULT 1000
#define SIA_MAXREC_LIMIT 100000
typedef col_region region;

typedef struct interval {
    double lo, hi;
} interval;

typedef struct sia_query {
    region pos[SIA_MAX_REGIONS];
    int npos;
    interval band[SIA_MAX_REGIONS], time[SIA_MAX_REGIONS];
    int nband, ntime;
    const char *coll[SIA_MAX_REGIONS];
    int ncoll;
    long maxrec;
} sia_query;

static int parse_numbers(const char *s, double *v, int max)
{
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (!*s)
            break;
        if (n == max)
            return -1;
        char *end;
        if (strncasecmp(s, "-inf", 4) == 0) {
            v[n++] = -INFINITY;
            end = (char *)s + 4;
        } else if (strncasecmp(s, "+inf", 4) == 0 || strncasecmp(s, "inf", 3) == 0) {
            v[n++] = INFINITY;
            end = (char *)s + (s[0] == '+' ? 4 : 3);
        } else {
            v[n] = strtod(s, &end);
            if (end == s || isnan(v[n]))
                return -1;
            n++;
        }
        if (*end && *end != ' ' && *end != '\t' && *end != ',')
            return -1;
        s = end;
    }
    return n;
}

static int valid_point(double ra, double dec)
{
    return ra >= 0 && ra <= 360 && dec >= -90 && dec <= 90;
}

/* Parses a SIA 2.0 POS value into g; NULL, or why not. */
static const char *parse_pos(const char *s, region *g)
{
    static const struct {
        const char *word;
        col_region_kind kind;
    } kinds[] = { { "CIRCLE", COL_REGION_CIRCLE }, { "RANGE", COL_REGION_RANGE },
                  { "POLYGON", COL_REGION_POLYGON } };
    double v[2 * COL_POLY_MAX + 2];
    memset(g, 0, sizeof(*g));
    while (*s == ' ')
        s++;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t len = strlen(kinds[i].word);
        if (strncasecmp(s, kinds[i].word, len) == 0) {
            int n = parse_numbers(s + len, v, 2 * COL_POLY_MAX + 1);
            if (n < 0)
                n = 2 * COL_POLY_MAX + 2;   /* too many, or not numbers: refused below */
            return col_region_make(g, kinds[i].kind, v, n);
        }
    }
    return "POS must be CIRCLE ra dec radius, RANGE ra1 ra2 dec1 dec2 or POLYGON ra dec ...";
}

static int overlaps(double a0, double a1, const interval *iv)
{
    return isfinite(a0) && isfinite(a1) && a0 <= iv->hi && a1 >= iv->lo;
}

static int member_matches(const sia_query *q, const col_member *m)
{
    if (m->error)
        return 0;
    int ok = q->npos == 0;
    for (int i = 0; i < q->npos && !ok; i++)
        ok = col_region_overlaps(&q->pos[i], m);
    if (!ok)
        return 0;
    ok = q->nband == 0;
    for (int i = 0; i < q->nband && !ok; i++)
        ok = overlaps(m->em_min, m->em_max, &q->band[i]);
    if (!ok)
        return 0;
    ok = q->ntime == 0;
    for (int i = 0; i < q->ntime && !ok; i++)
        ok = overlaps(m->t_min, m->t_max, &q->time[i]);
    return ok;
}

static const char *parse_interval(const char *s, interval *iv)
{
    double v[2];
    int n = parse_numbers(s, v, 2);
    if (n == 1)
        v[1] = v[0];
    if (n < 1 || !(v[0] <= v[1]))
        return "takes one value or an interval lo hi with lo <= hi (-Inf and +Inf allowed)";
    iv->lo = v[0];
    iv->hi = v[1];
    return NULL;
}

/* Fills q from p; NULL, or the text of a UsageError. */
static const char *parse_query(const vo_params *p, sia_query *q, char *why, size_t len)
{
    memset(q, 0, sizeof(*q));
    q->maxrec = SIA_MAXREC_DEFAULT;
    for (int i = 0; i < p->n; i++) {
        const char *k = p->key[i], *v = p->value[i] ? p->value[i] : "";
        const char *bad = NULL;
        if (strcasecmp(k, "POS") == 0) {
            if (q->npos == SIA_MAX_REGIONS)
                bad = "at most 16 values";
            else
                bad = parse_pos(v, &q->pos[q->npos++]);
        } else if (strcasecmp(k, "BAND") == 0) {
            bad = q->nband == SIA_MAX_REGIONS ? "at most 16 values"
                                               : parse_interval(v, &q->band[q->nband++]);
            if (!bad && isfinite(q->band[q->nband - 1].lo) && q->band[q->nband - 1].lo < 0)
                bad = "takes wavelengths in metres, 0 or more (-Inf and +Inf allowed)";
        } else if (strcasecmp(k, "TIME") == 0) {
            bad = q->ntime == SIA_MAX_REGIONS ? "at most 16 values"
                                               : parse_interval(v, &q->time[q->ntime++]);
        } else if (strcasecmp(k, "COLLECTION") == 0) {
            if (q->ncoll == SIA_MAX_REGIONS)
                bad = "at most 16 values";
            else
                q->coll[q->ncoll++] = v;
        } else if (strcasecmp(k, "MAXREC") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 0)
                bad = "must be an integer 0 or more";
            else
                q->maxrec = n > SIA_MAXREC_LIMIT ? SIA_MAXREC_LIMIT : n;
        } else if (strcasecmp(k, "RESPONSEFORMAT") == 0) {
            if (*v && strncmp(v, "application/x-votable+xml", 25) != 0 &&
                strcasecmp(v, "votable") != 0 && strcmp(v, "text/xml") != 0)
                bad = "only application/x-votable+xml is served";
        }
        if (bad) {
            snprintf(why, len, "UsageError: %.20s '%.100s' %s", k, v, bad);
            return why;
        }
    }
    return NULL;
}

static int wanted(const sia_query *q, const char *name)
{
    for (int i = 0; i < q->ncoll; i++)
        if (strcmp(q->coll[i], name) == 0)
            return 1;
    return q->ncoll == 0;
}

/* Percent-encodes a relative path for a URL, '/' kept. */
static void url_path(const char *s, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~/", c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
}

static void sfield(voxml *x, const char *name, const char *datatype, const char *ucd,
                   const char *unit, const char *utype)
{
    voxml_start(x, "FIELD");
    voxml_attr(x, "name", name);
    if (strcmp(name, "obs_publisher_did") == 0)
        voxml_attr(x, "ID", "obs_publisher_did");
    voxml_attr(x, "datatype", datatype);
    if (strcmp(datatype, "char") == 0)
        voxml_attr(x, "arraysize", "*");
    voxml_attr(x, "ucd", ucd);
    voxml_attr(x, "unit", unit);
    voxml_attr(x, "utype", utype);
    voxml_end(x);
}

static void td_real(voxml *x, double v, int digits)
{
    if (isfinite(v))
        voxml_elementf(x, "TD", "%.*g", digits, v);
    else
        voxml_element(x, "TD", "");
}

/* The ObsCore row of member m of collection c. */
static void obscore_row(voxml *x, const char *base, const collection *c, const col_member *m)
{
    char path[PATH_MAX * 3 / 2], url[PATH_MAX * 2];
    url_path(m->relpath, path, sizeof(path));
    voxml_start(x, "TR");
    voxml_element(x, "TD", m->nz > 1 ? "cube" : "image");
    voxml_element(x, "TD", "1");
    voxml_element(x, "TD", c->name);
    voxml_element(x, "TD", m->relpath);
    voxml_elementf(x, "TD", "ivo://tessera/%s?%s", c->name, m->relpath);
    snprintf(url, sizeof(url), "%s/api/v1/collections/%s/fits/%s", base, c->name, path);
    voxml_element(x, "TD", url);
    voxml_element(x, "TD", "application/fits");
    voxml_elementf(x, "TD", "%lld", (m->size + 1023) / 1024);
    td_real(x, m->ra, 12);
    td_real(x, m->dec, 12);
    td_real(x, 2 * m->radius, 8);
    voxml_elementf(x, "TD", "POLYGON ICRS %.10g %.10g %.10g %.10g %.10g %.10g %.10g %.10g",
                   m->poly[0], m->poly[1], m->poly[2], m->poly[3], m->poly[4], m->poly[5],
                   m->poly[6], m->poly[7]);
    td_real(x, m->pixscale * 3600.0, 8);
    voxml_elementf(x, "TD", "%ld", m->nx);
    voxml_elementf(x, "TD", "%ld", m->ny);
    td_real(x, m->t_min, 15);
    td_real(x, m->t_max, 15);
    td_real(x, m->exptime, 10);
    td_real(x, m->em_min, 10);
    td_real(x, m->em_max, 10);
    voxml_element(x, "TD", m->filter);
    voxml_end(x);
}

static void obscore_fields(voxml *x)
{
    sfield(x, "dataproduct_type", "char", "meta.code.class", NULL,
           "obscore:ObsDataset.dataProductType");
    sfield(x, "calib_level", "int", "meta.code;obs.calib", NULL, "obscore:ObsDataset.calibLevel");
    sfield(x, "obs_collection", "char", "meta.id", NULL, "obscore:DataID.Collection");
    sfield(x, "obs_id", "char", "meta.id", NULL, "obscore:DataID.observationID");
    sfield(x, "obs_publisher_did", "char", "meta.ref.ivoid", NULL,
           "obscore:Curation.PublisherDID");
    sfield(x, "access_url", "char", "meta.ref.url", NULL, "obscore:Access.Reference");
    sfield(x, "access_format", "char", "meta.code.mime", NULL, "obscore:Access.Format");
    sfield(x, "access_estsize", "long", "phys.size;meta.file", "kbyte", "obscore:Access.Size");
    sfield(x, "s_ra", "double", "pos.eq.ra", "deg", "obscore:Char.SpatialAxis.Coverage.Location.Coord.Position2D.Value2.C1");
    sfield(x, "s_dec", "double", "pos.eq.dec", "deg", "obscore:Char.SpatialAxis.Coverage.Location.Coord.Position2D.Value2.C2");
    sfield(x, "s_fov", "double", "phys.angSize;instr.fov", "deg", "obscore:Char.SpatialAxis.Coverage.Bounds.Extent.diameter");
    sfield(x, "s_region", "char", "pos.outline;obs.field", NULL, "obscore:Char.SpatialAxis.Coverage.Support.Area");
    sfield(x, "s_resolution", "double", "pos.angResolution", "arcsec", "obscore:Char.SpatialAxis.Resolution.Refval.value");
    sfield(x, "s_xel1", "long", "meta.number", NULL, "obscore:Char.SpatialAxis.numBins1");
    sfield(x, "s_xel2", "long", "meta.number", NULL, "obscore:Char.SpatialAxis.numBins2");
    sfield(x, "t_min", "double", "time.start;obs.exposure", "d", "obscore:Char.TimeAxis.Coverage.Bounds.Limits.StartTime");
    sfield(x, "t_max", "double", "time.end;obs.exposure", "d", "obscore:Char.TimeAxis.Coverage.Bounds.Limits.StopTime");
    sfield(x, "t_exptime", "double", "time.duration;obs.exposure", "s", "obscore:Char.TimeAxis.Coverage.Support.Extent");
    sfield(x, "em_min", "double", "em.wl;stat.min", "m", "obscore:Char.SpectralAxis.Coverage.Bounds.Limits.LoLimit");
    sfield(x, "em_max", "double", "em.wl;stat.max", "m", "obscore:Char.SpectralAxis.Coverage.Bounds.Limits.HiLimit");
    sfield(x, "filter", "char", "instr.filter", NULL, NULL);
}

/* The DataLink service descriptor: /vo/datalink?ID=obs_publisher_did for every row. */
static void datalink_descriptor(voxml *x, const char *base)
{
    voxml_start(x, "RESOURCE");
    voxml_attr(x, "type", "meta");
    voxml_attr(x, "utype", "adhoc:service");
    voxml_attr(x, "ID", "datalink");
    voxml_char_param(x, "standardID", "ivo://ivoa.net/std/DataLink#links-1.1");
    char url[300];
    snprintf(url, sizeof url, "%s/vo/datalink", base);
    voxml_char_param(x, "accessURL", url);
    voxml_start(x, "GROUP");
    voxml_attr(x, "name", "inputParams");
    voxml_start(x, "PARAM");
    voxml_attr(x, "name", "ID");
    voxml_attr(x, "datatype", "char");
    voxml_attr(x, "arraysize", "*");
    voxml_attr(x, "ref", "obs_publisher_did");
    voxml_attr(x, "value", "");
    voxml_end(x);
    voxml_end(x);
    voxml_end(x);
}

/* Runs q over every collection, writing a row (SIA 2.0's, or SIA 1.0's with `sia1`) for
 * each match up to maxrec; returns whether more matched (an overflow).  Each collection's
 * read lock is held while its members are looked at. */
static int run_query(colset *s, const sia_query *q, voxml *x, const char *base, int sia1)
{
    long rows = 0;
    int overflow = 0;
    for (int i = 0; s && i < s->n && !overflow; i++) {
        collection *c = &s->c[i];
        if (!wanted(q, c->name))
            continue;
        pthread_rwlock_rdlock(&c->lock);
        for (int k = 0; k < c->n; k++) {
            const col_member *m = &c->m[k];
            if (!member_matches(q, m))
                continue;
            if (rows == q->maxrec) {
                overflow = 1;
                break;
            }
            rows++;
            if (!sia1) {
                obscore_row(x, base, c, m);
                continue;
            }
            char path[PATH_MAX * 3 / 2];
            url_path(m->relpath, path, sizeof(path));
            voxml_start(x, "TR");
            voxml_elementf(x, "TD", "%s/%s", c->name, m->relpath);
            td_real(x, m->ra, 12);
            td_real(x, m->dec, 12);
            voxml_element(x, "TD", "2");
            voxml_elementf(x, "TD", "%ld %ld", m->nx, m->ny);
            voxml_elementf(x, "TD", "%.8g %.8g", m->pixscale, m->pixscale);
            voxml_element(x, "TD", "image/fits");
            voxml_elementf(x, "TD", "%s/api/v1/collections/%s/fits/%s", base, c->name, path);
            voxml_end(x);
        }
        pthread_rwlock_unlock(&c->lock);
    }
    return overflow;
}

static void finish_table(voxml *x, int overflow)
{
    voxml_end(x);   /* TABLEDATA */
    voxml_end(x);   /* DATA */
    voxml_end(x);   /* TABLE */
    if (overflow)
        voxml_info(x, "QUERY_STATUS", "OVERFLOW");
    voxml_end(x);   /* RESOURCE */
}

void handle_vo_sia(hreq *r, const route_match *m)
{
    (void)m;
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    sia_query q;
    char why[300];
    if (parse_query(&p, &q, why, sizeof(why))) {
        vo_params_release(&p);
        vo_reply_text(r, 400, "%s", why);
        return;
    }
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = voxml_results_new("OK", "ivo://ivoa.net/std/SIA#query-2.0");
    if (x) {
        voxml_start(x, "TABLE");
        obscore_fields(x);
        voxml_start(x, "DATA");
        voxml_start(x, "TABLEDATA");
        int overflow = run_query(r->srv->app->collections, &q, x, base, 0);
        finish_table(x, overflow);
        datalink_descriptor(x, base);
    }
    vo_params_release(&p);
    vo_reply_xml(r, 200, x, "application/x-votable+xml");
}

void handle_vo_sia1(hreq *r, const route_match *m)
{
    (void)m;
    vo_params p;
    if (vo_params_take(r, &p))
        return;
    const char *pos = vo_params_get(&p, "POS", NULL);
    const char *size = vo_params_get(&p, "SIZE", NULL);
    const char *format = vo_params_get(&p, "FORMAT", NULL);
    int metadata = format && strcasecmp(format, "METADATA") == 0;
    double pv[3], sv[3];
    sia_query q;
    memset(&q, 0, sizeof(q));
    q.maxrec = SIA_MAXREC_LIMIT;
    const char *mr = vo_params_get(&p, "MAXREC", NULL);
    if (mr)
        q.maxrec = atol(mr) < 0 ? 0 : atol(mr) > SIA_MAXREC_LIMIT ? SIA_MAXREC_LIMIT : atol(mr);
    int np = pos ? parse_numbers(pos, pv, 3) : 0, ns = size ? parse_numbers(size, sv, 3) : 0;
    const char *bad = NULL;
    if (!metadata && (np != 2 || !valid_point(pv[0], pv[1])))
        bad = "POS must be ra,dec in degrees (0 <= ra <= 360, |dec| <= 90)";
    else if (!metadata && (ns < 1 || ns > 2 || !(sv[0] >= 0) || !(sv[ns - 1] >= 0) ||
                           sv[0] > 180 || sv[ns - 1] > 180))
        bad = "SIZE must be one or two angular sizes in degrees (0 to 180)";
    else if (format && !metadata && strcasecmp(format, "ALL") != 0 &&
             strcasecmp(format, "image/fits") != 0 && strcasecmp(format, "GRAPHIC") != 0)
        bad = "FORMAT must be ALL, image/fits, GRAPHIC or METADATA";
    if (bad) {
        vo_params_release(&p);
        voxml *x = voxml_results_new(NULL, NULL);
        if (x) {
            voxml_start(x, "INFO");
            voxml_attr(x, "name", "QUERY_STATUS");
            voxml_attr(x, "value", "ERROR");
            voxml_text(x, bad);
            voxml_end(x);
        }
        vo_reply_xml(r, 200, x, "text/xml");
        return;
    }
    int graphic = format && strcasecmp(format, "GRAPHIC") == 0;
    if (!metadata) {
        /* The box SIZE around POS, as a polygon on the tangent plane at POS. */
        double w = sv[0], h = sv[ns - 1];
        region *g = &q.pos[q.npos++];
        memset(g, 0, sizeof(*g));
        if (w == 0 && h == 0) {
            g->circle = 1;
            g->ra = pv[0];
            g->dec = pv[1];
            g->r = 1e-9;
        } else {
            double ra0 = pv[0] * M_PI / 180, dec0 = pv[1] * M_PI / 180;
            double xs[4] = {-w / 2, w / 2, w / 2, -w / 2}, ys[4] = {-h / 2, -h / 2, h / 2, h / 2};
            for (int k = 0; k < 4; k++) {
                double xi = tan(xs[k] * M_PI / 180), eta = tan(ys[k] * M_PI / 180);
                double den = cos(dec0) - eta * sin(dec0);
                double ra = ra0 + atan2(xi, den);
                double dec = atan2(sin(dec0) + eta * cos(dec0), sqrt(xi * xi + den * den));
                g->poly[2 * k] = fmod(ra * 180 / M_PI + 360, 360);
                g->poly[2 * k + 1] = dec * 180 / M_PI;
            }
            g->n = 4;
        }
    }
    char base[256];
    vo_base_url(r, base, sizeof(base));
    voxml *x = voxml_results_new("OK", NULL);
    if (x) {
        voxml_start(x, "TABLE");
        static const char *const f[8][4] = {
            {"title", "char", "VOX:Image_Title", NULL},
            {"ra", "double", "POS_EQ_RA_MAIN", "deg"},
            {"dec", "double", "POS_EQ_DEC_MAIN", "deg"},
            {"naxes", "int", "VOX:Image_Naxes", NULL},
            {"naxis", "int", "VOX:Image_Naxis", NULL},
            {"scale", "double", "VOX:Image_Scale", "deg/pix"},
            {"format", "char", "VOX:Image_Format", NULL},
            {"access_url", "char", "VOX:Image_AccessReference", NULL},
        };
        for (int i = 0; i < 8; i++) {
            voxml_start(x, "FIELD");
            voxml_attr(x, "name", f[i][0]);
            voxml_attr(x, "datatype", f[i][1]);
            if (strcmp(f[i][1], "char") == 0 || i == 4 || i == 5)
                voxml_attr(x, "arraysize", "*");
            voxml_attr(x, "ucd", f[i][2]);
            voxml_attr(x, "unit", f[i][3]);
            voxml_end(x);
        }
        voxml_start(x, "DATA");
        voxml_start(x, "TABLEDATA");
        int overflow = metadata || graphic ? 0 : run_query(r->srv->app->collections, &q, x, base, 1);
        finish_table(x, overflow);
    }
    vo_params_release(&p);
    vo_reply_xml(r, 200, x, "text/xml");
}

/* The collection and relpath of publisher DID `id` (ivo://tessera/{collection}?{obs_id}):
 * the collection, or NULL when id is not of that form or names no collection. */
static collection *member_of(hreq *r, const char *id, const char **relpath)
{
    static const char prefix[] = "ivo://tessera/";
    if (strncmp(id, prefix, sizeof(prefix) - 1) != 0 || !strchr(id, '?'))
        return NULL;
    const char *name = id + sizeof(prefix) - 1, *q = strchr(name, '?');
    char cname[72];
    if ((size_t)(q - name) >= sizeof(cname))
        return NULL;
    snprintf(cname, sizeof(cname), "%.*s", (int)(q - name), name);
    *relpath = q + 1;
    return colset_find(r->srv->app->collections, cname);
}

int sia_datalink_member(hreq *r, voxml *x, const char *base, const char *id)
{
    const char *rel = NULL;
    collection *c = member_of(r, id, &rel);
    char abs[PATH_MAX];
    if (!c || collection_member_path(r->srv->app->collections, c, rel, abs, sizeof(abs)))
        return 0;
    char path[PATH_MAX * 3 / 2];
    url_path(rel, path, sizeof(path));
    struct stat st;
    voxml_start(x, "TR");
    voxml_element(x, "TD", id);
    voxml_elementf(x, "TD", "%s/api/v1/collections/%s/fits/%s", base, c->name, path);
    voxml_element(x, "TD", "");
    voxml_element(x, "TD", "");
    voxml_element(x, "TD", "#this");
    voxml_element(x, "TD", "the member image's FITS file");
    voxml_element(x, "TD", "application/fits");
    if (stat(abs, &st) == 0)
        voxml_elementf(x, "TD", "%lld", (long long)st.st_size);
    else
        voxml_element(x, "TD", "");
    voxml_end(x);
    /* its cutouts by SODA sync, the service descriptor "soda" (handle_vo_datalink) */
    voxml_start(x, "TR");
    voxml_element(x, "TD", id);
    voxml_element(x, "TD", "");
    voxml_element(x, "TD", "soda");
    voxml_element(x, "TD", "");
    voxml_element(x, "TD", "#cutout");
    voxml_element(x, "TD", "cutouts of the member image (SODA sync: CIRCLE, POLYGON, POS): "
                  "native pixels, the WCS kept");
    voxml_element(x, "TD", "application/fits");
    voxml_element(x, "TD", "");
    voxml_end(x);
    return 1;
}

int sia_member_dataset(hreq *r, const char *id, const dataset **d)
{
    const char *rel = NULL;
    collection *c = member_of(r, id, &rel);
    char err[256];
    if (!c || colmembers_get(r->srv->app->collections, c, rel, d, err, sizeof(err)))
        return -1;
    return 0;
}

/* ---- the collections' own routes ------------------------------------------------------ */

static collection *route_collection(hreq *r, const route_match *m)
{
    collection *c = m->segment[0] ? colset_find(r->srv->app->collections, m->segment) : NULL;
    if (!c)
        problem_reply(r, 404, "collection", "no collection '%.*s'", (int)(m->segment_len > 64 ? 64 : m->segment_len),
                      m->segment_at ? m->segment_at : "");
    return c;
}

/* The sky the readable members of c cover, as a circle (collection.extent, computed
 * once per member list by the scan): "ra", "dec" and "radius" of o (nothing without a
 * member).  Called under c's lock. */
static void extent_json(json_t *o, const collection *c)
{
    if (!isfinite(c->extent[2]))
        return;
    json_object_set_new(o, "ra", json_real(c->extent[0]));
    json_object_set_new(o, "dec", json_real(c->extent[1]));
    json_object_set_new(o, "radius", json_real(c->extent[2]));
}

static json_t *collection_json(collection *c, int with_members)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(c->name));
    json_object_set_new(o, "kind", json_string("collection"));
    pthread_rwlock_rdlock(&c->lock);
    int bad = 0;
    json_t *unreadable = json_array(), *members = with_members ? json_array() : NULL;
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (m->error) {
            bad++;
            if (json_array_size(unreadable) < 1000) {
                json_t *u = json_object();
                json_object_set_new(u, "obs_id", json_string(m->relpath));
                json_object_set_new(u, "reason", json_string(m->error));
                json_array_append_new(unreadable, u);
            }
        } else if (members && json_array_size(members) < 10000) {
            json_t *e = json_object();
            json_object_set_new(e, "obs_id", json_string(m->relpath));
            json_object_set_new(e, "shape", json_pack("[II]", (json_int_t)m->nx, (json_int_t)m->ny));
            json_object_set_new(e, "ra", json_real(m->ra));
            json_object_set_new(e, "dec", json_real(m->dec));
            json_object_set_new(e, "radius", json_real(m->radius));
            /* The footprint as s_region has it: four (ra, dec) corners, ICRS, degrees. */
            json_t *fp = json_array();
            for (int k = 0; k < 4; k++)
                json_array_append_new(fp, json_pack("[ff]", m->poly[2 * k], m->poly[2 * k + 1]));
            json_object_set_new(e, "footprint", fp);
            if (c->match_background)   /* null until solved (colbackground.h) */
                json_object_set_new(e, "bg_offset", isfinite(m->bg_offset)
                                                    ? json_real(m->bg_offset) : json_null());
            json_array_append_new(members, e);
        }
    }
    json_object_set_new(o, "members", json_integer(c->n - bad));
    extent_json(o, c);
    json_object_set_new(o, "unreadable_count", json_integer(bad));
    json_object_set_new(o, "unreadable", unreadable);
    json_object_set_new(o, "match_background", json_boolean(c->match_background));
    if (c->match_background)   /* "solved" when the offsets are the current members' */
        json_object_set_new(o, "background", json_pack("{s:s,s:I}", "state",
                            c->bg_version == c->version ? "solved" : "pending", "generation",
                            (json_int_t)c->bg_generation));
    if (members)
        json_object_set_new(o, "images", members);
    pthread_rwlock_unlock(&c->lock);
    return o;
}

/* Answers the JSON document `doc` (released): 200, or 500 when it cannot be written. */
static void reply_json_doc(hreq *r, json_t *doc)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(doc);
    hreq_reply_json(r, 200, text);   /* NULL: 500 */
}

void handle_collections_list(hreq *r, const route_match *m)
{
    (void)m;
    json_t *a = json_array();
    colset *s = r->srv->app->collections;
    for (int i = 0; s && i < s->n; i++)
        json_array_append_new(a, collection_json(&s->c[i], 0));
    reply_json_doc(r, a);
}

void handle_collection_info(hreq *r, const route_match *m)
{
    collection *c = route_collection(r, m);
    if (!c)
        return;
    json_t *o = collection_json(c, 1);
    reply_json_doc(r, o);
}

void handle_collection_fits(hreq *r, const route_match *m)
{
    collection *c = route_collection(r, m);
    if (!c)
        return;
    char abs[PATH_MAX];
    if (!m->rest || !*m->rest ||
        collection_member_path(r->srv->app->collections, c, m->rest, abs, sizeof(abs))) {
        problem_reply(r, 404, "obs_id", "collection '%s' has no readable image '%.200s'",
                      c->name, m->rest ? m->rest : "");
        return;
    }
    struct stat st;
    char err[300];
    int fd = tess_open_regular(abs, 0, &st, err, sizeof(err));
    if (fd < 0) {
        problem_reply(r, 500, NULL, "%s", err);
        return;
    }
    r->rep.status = 200;
    r->rep.file_fd = fd;
    r->rep.file_len = (unsigned long long)st.st_size;
    snprintf(r->rep.file_type, sizeof(r->rep.file_type), "application/fits");
    snprintf(r->rep.file_etag, sizeof(r->rep.file_etag), "\"%llx-%llx\"",
             (unsigned long long)st.st_ino, (unsigned long long)st.st_mtim.tv_sec);
    const char *bn = strrchr(abs, '/');
    snprintf(r->rep.file_name, sizeof(r->rep.file_name), "%.70s", bn ? bn + 1 : abs);
}
