/* GET /hips/{name}/...: any dataset with a celestial WCS served as an IVOA HiPS 1.0 survey, tiles made on demand. */
#include "daemon/api/hips.h"
#include "daemon/api/handlers.h"
#include "daemon/api/hipsbase.h"
#include "daemon/cache/planes.h"
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/collection/colmembers.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/pool.h"
#include "engine/fits/fitscard.h"
#include "engine/mosaic/coadd.h"
#include "engine/sky/skywcs.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- parsing ------------------------------------------------------------------------- */

static int fail(param_error *e, int rc, const char *parameter, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(param_error *e, int rc, const char *parameter, const char *fmt, ...)
{
    snprintf(e->parameter, sizeof(e->parameter), "%s", parameter ? parameter : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
    va_end(ap);
    return rc;
}

/* Reads a run of decimal digits (at most 18) at *s into *v and advances *s.  Returns 0,
 * or -1 when there is no digit or too many. */
static int read_digits(const char **s, int64_t *v)
{
    const char *p = *s;
    int64_t x = 0;
    int n = 0;
    while (isdigit((unsigned char)*p)) {
        if (++n > 18)
            return -1;
        x = x * 10 + (*p++ - '0');
    }
    if (n == 0)
        return -1;
    *s = p;
    *v = x;
    return 0;
}

/* 1 when the number at s is written with a leading zero ("03"): HiPS paths name every
 * order, directory and tile one way only (Norder3/Dir0/Npix42), so that a tile has one
 * URL and one cache entry. */
static int leading_zero(const char *s)
{
    return s[0] == '0' && isdigit((unsigned char)s[1]);
}

/* The extension after a '.': png, jpg or fits, and nothing after it. */
static int read_ext(const char *s, int allow_fits, hips_format *f)
{
    if (strcmp(s, "png") == 0)
        *f = HIPS_FMT_PNG;
    else if (strcmp(s, "jpg") == 0)
        *f = HIPS_FMT_JPEG;
    else if (allow_fits && strcmp(s, "fits") == 0)
        *f = HIPS_FMT_FITS;
    else
        return -1;
    return 0;
}

/* The plane suffix "_{z}" of a cube's tile or Allsky at *s, if any: *plane = z and *s
 * advanced past it; without one *plane = -1.  Returns 0, TESS_EINVAL (a malformed or too
 * large z) or TESS_ENOTFOUND (a leading zero), `e` set. */
static int read_plane(const char **s, long *plane, param_error *e)
{
    *plane = -1;
    if (**s != '_')
        return 0;
    const char *q = *s + 1;
    int64_t z;
    if (leading_zero(q))
        return fail(e, TESS_ENOTFOUND, "plane", "no HiPS resource '_%.20s': planes are written without "
                    "leading zeros", q);
    if (read_digits(&q, &z) || z > PARAM_PLANE_MAX)
        return fail(e, TESS_EINVAL, "plane", "the plane suffix _{z} must be an integer between 0 and "
                    "%ld", PARAM_PLANE_MAX);
    *plane = (long)z;
    *s = q;
    return 0;
}

int hips_parse_path(const char *rest, hips_path *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    memset(e, 0, sizeof(*e));
    p->plane = -1;
    const char *slash = strchr(rest, '/');
    size_t nlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (nlen == 0)
        return fail(e, TESS_ENOTFOUND, "dataset", "the path names no dataset: use /hips/{name}/");
    if (nlen >= sizeof(p->name))
        return fail(e, TESS_EINVAL, "dataset", "dataset name longer than %zu characters",
                    sizeof(p->name) - 1);
    memcpy(p->name, rest, nlen);
    p->name[nlen] = '\0';
    if (!slash || slash[1] == '\0') {
        p->kind = HIPS_REQ_INDEX;
        return 0;
    }
    const char *q = slash + 1;
    if (strcmp(q, "properties") == 0) {
        p->kind = HIPS_REQ_PROPERTIES;
        return 0;
    }
    if (strcmp(q, "Moc.fits") == 0) {
        p->kind = HIPS_REQ_MOC;
        return 0;
    }
    if (strncmp(q, "Norder", 6) != 0)
        return fail(e, TESS_ENOTFOUND, NULL, "no HiPS resource '%.100s' (properties, Moc.fits, "
                    "Norder{K}/Dir{D}/Npix{N}[_{z}].{png,jpg,fits}, "
                    "Norder3/Allsky[_{z}].{png,jpg,fits})", q);
    q += 6;
    int64_t order;
    if (leading_zero(q))
        return fail(e, TESS_ENOTFOUND, "Norder", "no HiPS resource 'Norder%.20s': orders are "
                    "written without leading zeros", q);
    if (read_digits(&q, &order) || order > HIPS_ORDER_MAX)
        return fail(e, TESS_EINVAL, "Norder", "Norder must be an order between 0 and %d",
                    HIPS_ORDER_MAX);
    p->order = (int)order;
    if (*q != '/')
        return fail(e, TESS_ENOTFOUND, NULL, "no HiPS resource after Norder%d", p->order);
    q++;
    if (strncmp(q, "Allsky", 6) == 0 && (q[6] == '.' || q[6] == '_')) {
        q += 6;
        int rc = read_plane(&q, &p->plane, e);
        if (rc)
            return rc;
        if (*q != '.' || read_ext(q + 1, 1, &p->format))
            return fail(e, TESS_EINVAL, "format", "Allsky is served as .png, .jpg or .fits, not "
                        "'%.20s'", q);
        if (p->order != HIPS_ALLSKY_ORDER)
            return fail(e, TESS_ENOTFOUND, "Norder", "the Allsky picture is at Norder%d, not "
                        "Norder%d", HIPS_ALLSKY_ORDER, p->order);
        p->kind = HIPS_REQ_ALLSKY;
        return 0;
    }
    if (strncmp(q, "Dir", 3) != 0)
        return fail(e, TESS_ENOTFOUND, NULL, "no HiPS resource '%.100s' in Norder%d", q, p->order);
    q += 3;
    int64_t dir, npix;
    if (leading_zero(q))
        return fail(e, TESS_ENOTFOUND, "Dir", "no HiPS resource 'Dir%.20s': directories are "
                    "written without leading zeros", q);
    if (read_digits(&q, &dir))
        return fail(e, TESS_EINVAL, "Dir", "Dir must be followed by a number");
    if (strncmp(q, "/Npix", 5) != 0)
        return fail(e, TESS_ENOTFOUND, NULL, "no HiPS resource in Norder%d/Dir%lld", p->order,
                    (long long)dir);
    q += 5;
    if (leading_zero(q))
        return fail(e, TESS_ENOTFOUND, "Npix", "no HiPS resource 'Npix%.20s': tiles are "
                    "written without leading zeros", q);
    if (read_digits(&q, &npix) || !hips_tile_valid(p->order, npix))
        return fail(e, TESS_EINVAL, "Npix", "Npix must be a tile index between 0 and %lld at "
                    "Norder%d", (long long)(hips_npix_count(p->order) - 1), p->order);
    p->npix = npix;
    int rc = read_plane(&q, &p->plane, e);
    if (rc)
        return rc;
    if (*q != '.' || read_ext(q + 1, 1, &p->format))
        return fail(e, TESS_EINVAL, "format", "tiles are served as .png, .jpg or .fits, not "
                    "'%.20s'", q);
    if (dir != hips_dir(npix))
        return fail(e, TESS_ENOTFOUND, "Dir", "tile Npix%lld lies in Dir%lld, not Dir%lld",
                    (long long)npix, (long long)hips_dir(npix), (long long)dir);
    p->kind = HIPS_REQ_TILE;
    return 0;
}

int hips_parse_query(param_lookup get, void *cls, hips_query *q, param_error *e)
{
    memset(q, 0, sizeof(*q));
    memset(e, 0, sizeof(*e));
    const char *s;
    q->method = RP_BILINEAR;
    if ((s = get(cls, "method")) && (rp_method_parse(s, &q->method) || q->method == RP_EXACT))
        return fail(e, TESS_EINVAL, "method", "method must be nearest, bilinear, bicubic or "
                    "lanczos3 for HiPS tiles, got '%.40s'", s);
    q->max_coord_error = 0.001;
    if ((s = get(cls, "max_coord_error")) && param_double(s, 0.0, 10.0, &q->max_coord_error))
        return fail(e, TESS_EINVAL, "max_coord_error", "max_coord_error must be a number of "
                    "tile pixels between 0 and 10, got '%.40s'", s);
    q->plane = 0;
    if (param_plane(get, cls, &q->plane, e))
        return TESS_EINVAL;
    if (params_render(get, cls, &q->render, e))
        return TESS_EINVAL;
    return 0;
}

/* ---- work on the pool ---------------------------------------------------------------- */

/* Everything a work function needs, checked on the HTTP thread. */
typedef struct hips_job {
    const dataset *ds;         /* the dataset, or a member of `col` while one is rendered */
    hips_path path;
    hips_query q;
    collection *col;           /* a collection's HiPS (hips_collection), else NULL */
    unsigned long long sky;    /* col's collection_version when the request came (its cache
                                  key): every tile of the answer is of that sky, with
                                  that solution's offsets (colbg_offsets_at) */
} hips_job;

/* A plane of the dataset held for sampling. */
typedef struct source_hold {
    plane_view view;
    rp_kernel *kernel;
    hips_source src;
} source_hold;

/* Gets plane q.plane at `level` and prepares its kernel, without replying (thread safe:
 * member renders run on the pool).  Returns 0, or the HTTP status of the failure with
 * *param (the parameter, or NULL) and err set (nothing to release). */
static int source_open(hreq *r, const hips_job *j, int level, source_hold *h,
                       const char **param, char *err, size_t errlen)
{
    const dataset *d = j->ds;
    char e[256] = "";
    memset(h, 0, sizeof(*h));
    *param = NULL;
    int rc = planestore_get(r->srv->app->planes, d, j->q.plane, level, &h->view, e, sizeof(e));
    if (rc) {
        *param = rc == TESS_ERANGE ? "plane" : NULL;
        snprintf(err, errlen, "cannot read plane %ld of dataset '%s': %s", j->q.plane, d->name,
                 e);
        return problem_read_status(rc, rc == TESS_ERANGE ? 400 : 500);
    }
    h->kernel = rp_kernel_new(j->q.method, h->view.plane, e, sizeof(e));
    if (!h->kernel) {
        planestore_release(r->srv->app->planes, &h->view);
        snprintf(err, errlen, "cannot prepare the %s kernel: %s", rp_method_name(j->q.method), e);
        return 500;
    }
    h->src.cel = d->cel;
    h->src.nx = d->nx;
    h->src.ny = d->ny;
    h->src.kernel = h->kernel;
    h->src.knx = h->view.plane->nx;
    h->src.kny = h->view.plane->ny;
    h->src.level = h->view.level;
    h->src.method = j->q.method;
    h->src.max_coord_error = j->q.max_coord_error;
    if (j->path.format != HIPS_FMT_FITS) {
        /* Pictures: the display grid (healpix.h), positions within max_coord_error. */
        h->src.grid_margin = HIPS_PICTURE_MARGIN;
        h->src.grid_cell_min = HIPS_PICTURE_CELL_MIN;
    }
    return 0;
}

/* source_open, the failure answered as a problem (then -1). */
static int source_acquire(hreq *r, const hips_job *j, int level, source_hold *h)
{
    const char *param;
    char err[600];
    int status = source_open(r, j, level, h, &param, err, sizeof(err));
    if (status) {
        problem_reply(r, status, param, "%s", err);
        return -1;
    }
    return 0;
}

static void source_release(hreq *r, source_hold *h)
{
    rp_kernel_free(h->kernel);
    planestore_release(r->srv->app->planes, &h->view);
}

/* The image's pixel size in degrees; on failure the problem reply is set and -1
 * returned. */
static int pixel_scale(hreq *r, const dataset *d, double *pixscale)
{
    int rc = hips_dataset_geometry(d->cel, d->nx, d->ny, d->hips_galactic, NULL, NULL, NULL,
                                   NULL, pixscale, NULL);
    if (rc == TESS_ENOMEM) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    if (rc) {
        problem_reply(r, 422, "dataset", "the WCS of dataset '%s' gives no sky position at the "
                      "image centre", d->name);
        return -1;
    }
    return 0;
}

/* Cut levels of the rendering for PNG and JPEG (those of the whole plane). */
static int cut_levels(hreq *r, const hips_job *j, double *lo, double *hi)
{
    char err[256] = "";
    int rc = planestore_cuts(r->srv->app->planes, j->ds, j->q.plane, &j->q.render, lo, hi, err,
                             sizeof(err));
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL,
                      "cannot compute the cut levels of '%s': %s", j->ds->name, err);
        return -1;
    }
    return 0;
}

static void reply_bytes(hreq *r, long rc, unsigned char *out, size_t len, const char *mime,
                        const char *err)
{
    if (rc == TESS_ENOMEM)
        problem_reply(r, 500, NULL, "out of memory");
    else if (rc < 0)
        problem_reply(r, 422, NULL, "cannot render the HiPS tile: %s", err);
    else
        hreq_reply_tile(r, 200, tile_new_take(out, len, mime));
}

/* The order-0 tiles shared with the Allsky picture (hipsbase.h): the key of the render
 * of job `j` from `h`, and the base source of hips_allsky_encode_from over it. */
typedef struct base_ctx {
    hreq *r;
    const hips_job *j;
    const source_hold *h;
    char key[256];
    tile *held;
} base_ctx;

static void base_init(base_ctx *b, hreq *r, const hips_job *j, const source_hold *h)
{
    char version[64];
    dataset_version(j->ds, version, sizeof(version));
    b->r = r;
    b->j = j;
    b->h = h;
    b->held = NULL;
    snprintf(b->key, sizeof(b->key), "hips|base|%s|%s|%ld|%d|%s|%.17g|%.17g|%ld", j->ds->name,
             version, j->q.plane, h->src.level, rp_method_name(j->q.method),
             j->q.max_coord_error, h->src.grid_margin, h->src.grid_cell_min);
}

static long base_get(void *cls, int64_t npix, const double **data, char *err, size_t errlen)
{
    base_ctx *b = cls;
    return hipsbase_get(b->r->srv->app->cache, b->key, &b->h->src, npix, b->j->ds->hips_galactic,
                        &b->held, data, err, errlen);
}

static void base_release(void *cls, int64_t npix)
{
    base_ctx *b = cls;
    (void)npix;
    tile_release(b->held);
    b->held = NULL;
}

/* Tiles the coverage walk tests at most (hips_footprint_cells): some 0.3 ms each, so that
 * the coverage of any shape is found in about a second, at a coarser order than the
 * survey's when its cells are too many to test (a huge image, a tiny pixel scale). */
#define HIPS_MOC_MAX_TESTS 2048

/* The coverage of dataset d (hips_footprint_cells at the survey's order), from the cache
 * or computed and put there: *held the cache entry (release it), *cells its *n cells of
 * order *order.  On failure the problem reply is set and -1 returned. */
static int coverage_get(hreq *r, const dataset *d, double pixscale, tile **held,
                        const int64_t **cells, size_t *n, int *order)
{
    char version[64], key[256];
    dataset_version(d, version, sizeof(version));
    snprintf(key, sizeof(key), "hips|cells|%s|%s", d->name, version);
    tile *t = tilecache_get(r->srv->app->cache, key);
    if (!t) {
        int64_t *list = NULL;
        size_t nl = 0;
        int reached = 0;
        int rc = hips_footprint_cells(d->cel, d->nx, d->ny, d->hips_galactic, pixscale,
                                      hips_survey_order(pixscale), HIPS_MOC_MAX_TESTS, &list,
                                      &nl, &reached);
        if (rc) {
            problem_reply(r, rc == TESS_ENOMEM ? 500 : 422, NULL, "cannot compute the "
                          "coverage of dataset '%s'", d->name);
            return -1;
        }
        unsigned char *body = malloc(sizeof(int64_t) * (nl + 1));
        if (!body) {
            free(list);
            problem_reply(r, 500, NULL, "out of memory");
            return -1;
        }
        int64_t head = reached;
        memcpy(body, &head, sizeof(head));
        if (nl)
            memcpy(body + sizeof(int64_t), list, sizeof(int64_t) * nl);
        free(list);
        if (!(t = tile_new_internal(body, sizeof(int64_t) * (nl + 1),
                                    "application/octet-stream"))) {
            problem_reply(r, 500, NULL, "out of memory");
            return -1;
        }
        tilecache_put(r->srv->app->cache, key, t);
    }
    int64_t head;
    memcpy(&head, t->data, sizeof(head));
    *held = t;
    *order = (int)head;
    *n = t->len / sizeof(int64_t) - 1;
    *cells = (const int64_t *)(void *)(t->data + sizeof(int64_t));
    return 0;
}

/* The one rule of the survey's tiles (healpix.h, hips_cells_hold): 1 when tile (order,
 * npix) of dataset d exists, 0 when it does not (404), -1 with the problem reply set. */
static int tile_exists(hreq *r, const dataset *d, double pixscale, int order, int64_t npix)
{
    tile *held = NULL;
    const int64_t *cells;
    size_t n;
    int M;
    if (coverage_get(r, d, pixscale, &held, &cells, &n, &M))
        return -1;
    int in = hips_cells_hold(cells, n, M, order, npix);
    tile_release(held);
    if (in && order > M) {
        in = hips_tile_in_footprint(d->cel, d->nx, d->ny, d->hips_galactic,
                                    hips_source_level(order, HIPS_TILE_SHIFT, pixscale), order,
                                    npix);
        if (in < 0) {
            problem_reply(r, 500, NULL, "out of memory");
            return -1;
        }
    }
    return in;
}

static void tile_work(hreq *r)
{
    hips_job *j = r->work_arg;
    const dataset *d = j->ds;
    const hips_path *p = &j->path;
    double pixscale, lo = 0.0, hi = 0.0;
    if (pixel_scale(r, d, &pixscale))
        return;
    int ov = tile_exists(r, d, pixscale, p->order, p->npix);
    if (ov < 0)
        return;
    if (ov == 0) {
        problem_reply(r, 404, "Npix", "tile Norder%d/Npix%lld lies outside the footprint of "
                      "dataset '%s' (Moc.fits)", p->order, (long long)p->npix, d->name);
        return;
    }
    if (p->format != HIPS_FMT_FITS && cut_levels(r, j, &lo, &hi))
        return;
    if (hreq_cancelled(r)) {
        hreq_reply_cancelled(r);
        return;
    }
    source_hold h;
    if (source_acquire(r, j, hips_source_level(p->order, HIPS_TILE_SHIFT, pixscale), &h))
        return;
    char err[256] = "";
    unsigned char *out = NULL;
    size_t len = 0;
    long rc;
    if (p->order == 0) {
        base_ctx b;
        const double *data = NULL;
        base_init(&b, r, j, &h);
        rc = base_get(&b, p->npix, &data, err, sizeof(err));
        if (rc >= 0)
            rc = hips_tile_encode_data(data, rc, p->order, p->npix, d->hips_galactic,
                                       p->format, &j->q.render, lo, hi, &out, &len, err,
                                       sizeof(err));
        base_release(&b, p->npix);
    } else {
        rc = hips_tile_encode(&h.src, p->order, p->npix, d->hips_galactic, p->format,
                              &j->q.render, lo, hi, &out, &len, err, sizeof(err));
    }
    source_release(r, &h);
    reply_bytes(r, rc, out, len, hips_format_mime(p->format), err);
}

static void allsky_work(hreq *r)
{
    hips_job *j = r->work_arg;
    const dataset *d = j->ds;
    double pixscale, lo = 0.0, hi = 0.0;
    if (pixel_scale(r, d, &pixscale) ||
        (j->path.format != HIPS_FMT_FITS && cut_levels(r, j, &lo, &hi)))
        return;
    if (hreq_cancelled(r)) {
        hreq_reply_cancelled(r);
        return;
    }
    source_hold h;
    if (source_acquire(r, j, hips_source_level(HIPS_ALLSKY_ORDER, HIPS_ALLSKY_SHIFT, pixscale),
                       &h))
        return;
    char err[256] = "";
    unsigned char *out = NULL;
    size_t len = 0;
    base_ctx b;
    base_init(&b, r, j, &h);
    /* A survey of order 3 or less (an image of a good part of the sky, whose first view
     * asks for the order-0 tiles too) is cut from the order-0 tiles it shares with them,
     * the others cell by cell (hips_allsky_render_from says why).  The order-0 tiles no
     * other request is rendering are rendered first, the others waited for after (when
     * the cache keeps them: else each would be rendered twice). */
    int shared = hips_survey_order(pixscale) <= HIPS_ALLSKY_ORDER;
    int64_t *faces = NULL;
    size_t nfaces = 0;
    tilecache_stats cs;
    tilecache_get_stats(r->srv->app->cache, &cs);
    if (shared && cs.max_bytes > 0 &&
        hips_tiles_covering(d->cel, d->nx, d->ny, d->hips_galactic, 0, &faces, &nfaces) == 0)
        for (size_t k = nfaces; k-- > 0 && !hreq_cancelled(r);)
            hipsbase_prefetch(r->srv->app->cache, b.key, &h.src, faces[k], d->hips_galactic, err,
                              sizeof(err));
    free(faces);
    hips_base_source bs = {base_get, base_release, &b};
    long rc = hips_allsky_encode_from(&h.src, d->hips_galactic, shared ? &bs : NULL,
                                      j->path.format,
                                      &j->q.render, lo, hi, &out, &len, err, sizeof(err));
    source_release(r, &h);
    reply_bytes(r, rc, out, len, hips_format_mime(j->path.format), err);
}

/* The release date: the newest modification time of the dataset's files (now when none
 * can be read). */
static time_t release_time(const dataset *d)
{
    time_t newest = 0;
    for (int i = 0; i < d->npaths; i++) {
        struct stat st;
        if (stat(d->paths[i], &st) == 0 && st.st_mtime > newest)
            newest = st.st_mtime;
    }
    return newest ? newest : time(NULL);
}

static void moc_work(hreq *r)
{
    hips_job *j = r->work_arg;
    const dataset *d = j->ds;
    double pixscale;
    if (pixel_scale(r, d, &pixscale))
        return;
    tile *held = NULL;
    const int64_t *cells;
    size_t n;
    int order;
    if (coverage_get(r, d, pixscale, &held, &cells, &n, &order))
        return;
    unsigned char *out = NULL;
    size_t len = 0;
    int rc = hips_moc_fits_cells(cells, n, order, d->hips_galactic, &out, &len, NULL);
    tile_release(held);
    if (rc)
        problem_reply(r, 500, NULL, "cannot write the coverage of dataset '%s'", d->name);
    else
        hreq_reply_tile(r, 200, tile_new_take(out, len, "application/fits"));
}

/* The spectral axis of cube d for its properties: data_cube_* from the world values of
 * its planes (axis 3 at the image centre, wcslib), em_min/em_max from their wavelengths
 * with the header's rest frequency (RESTFRQ, RESTFREQ) or wavelength (RESTWAV), else the
 * configured one.  Leaves p as it is where the axis gives nothing; returns 0 or -1 (out
 * of memory). */
static int cube_axis(const dataset *d, hips_properties *p, char *unit, size_t unitlen)
{
    if (d->nz < 2 || !d->wcs)
        return 0;
    skywcs *w = skywcs_copy(d->wcs);
    double *world = malloc(sizeof(double) * (size_t)d->nz);
    if (!w || !world) {
        skywcs_free(w);
        free(world);
        return -1;
    }
    char ctype[72] = "";
    int rc = skywcs_zaxis(w, (double)(d->nx / 2), (double)(d->ny / 2), d->nz, world, ctype,
                          sizeof(ctype), unit, unitlen);
    skywcs_free(w);
    if (rc == TESS_ENOMEM) {
        free(world);
        return -1;
    }
    if (rc == 0 && isfinite(world[0]) && isfinite(world[1])) {
        p->cube_crval3 = world[0];
        p->cube_cdelt3 = world[1] - world[0];
        p->cube_bunit3 = unit;
        double rest = dataset_rest_frequency(d);
        double lo = INFINITY, hi = -INFINITY;
        for (long k = 0; k < d->nz; k++) {
            double lam = skywcs_spectral_wavelength(ctype, world[k], rest);
            if (!isfinite(lam)) {
                lo = hi = NAN;
                break;
            }
            lo = lam < lo ? lam : lo;
            hi = lam > hi ? lam : hi;
        }
        if (isfinite(lo) && isfinite(hi) && hi > lo) {
            p->em_min = lo;
            p->em_max = hi;
        }
    }
    free(world);
    return 0;
}

/* Answers a survey's properties file (HiPS 1.0 section 4.4), or 500 out of memory. */
static void reply_properties(hreq *r, const hips_properties *p)
{
    char *text = NULL;
    size_t len = 0;
    if (hips_properties_text(p, &text, &len)) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, len,
                                          "text/plain; charset=utf-8"));
}

static void properties_work(hreq *r)
{
    hips_job *j = r->work_arg;
    const dataset *d = j->ds;
    double ra, dec, pixscale, fov, lo, hi, dmin, dmax;
    int rc = hips_dataset_geometry(d->cel, d->nx, d->ny, d->hips_galactic, &ra, &dec, NULL, NULL,
                                   &pixscale, &fov);
    if (rc) {
        problem_reply(r, rc == TESS_ENOMEM ? 500 : 422, rc == TESS_ENOMEM ? NULL : "dataset",
                      "no sky position at the centre of dataset '%s'", d->name);
        return;
    }
    if (cut_levels(r, j, &lo, &hi))
        return;
    hips_job range = *j;
    range.q.render.min_cut = (render_cut){0.0, 1};
    range.q.render.max_cut = (render_cut){100.0, 1};
    if (cut_levels(r, &range, &dmin, &dmax))
        return;
    char description[64] = "";
    if (d->nz > 1)
        snprintf(description, sizeof(description), "plane %ld of %ld", j->q.plane, d->nz);
    hips_properties p = {
        .name = d->name, .description = description, .builder = "Tessera (on demand)",
        .tile_formats = "png jpeg fits", .bunit = d->bunit, .released = release_time(d),
        .order = hips_survey_order(pixscale), .galactic = d->hips_galactic, .ra = ra,
        .dec = dec, .fov = fov, .cut_lo = lo, .cut_hi = hi, .data_min = dmin, .data_max = dmax,
        .cube_depth = d->nz, .cube_firstframe = j->q.plane,
    };
    char unit3[72] = "";
    if (d->kind == DS_CUBE && cube_axis(d, &p, unit3, sizeof(unit3))) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    reply_properties(r, &p);
}

/* ---- collections: the sky of many images ---------------------------------------------- */

/* The most member images one tile of a collection is made from: a coarser tile over more
 * of them answers 422 (ask for a deeper one).  With MEDIAN the accumulator holds 4 bytes
 * a tile pixel for each (64 MiB at this bound). */
#define COLSKY_TILE_MAX_MEMBERS 64
/* Members whose cut levels the pictures of a collection share (colsky_cuts). */
#define COLSKY_CUT_SAMPLE 5

/* The relpaths colindex_overlap gives for a tile, at most `max` (n counts them all). */
typedef struct colsky_list {
    char **p;
    int n, kept, max, failed;
    collection *filter;        /* not NULL: only members of it whose footprint meets */
    double poly[8];            /* this polygon (4 (ra, dec) vertices) are taken */
} colsky_list;

static void colsky_list_add(void *cls, const char *relpath)
{
    colsky_list *l = cls;
    if (l->filter && !collection_member_overlaps(l->filter, relpath, l->poly, 4))
        return;
    l->n++;
    if (l->kept >= l->max || l->failed)
        return;
    if (!(l->p[l->kept] = strdup(relpath)))
        l->failed = 1;
    else
        l->kept++;
}

static void colsky_list_free(colsky_list *l)
{
    for (int i = 0; i < l->kept; i++)
        free(l->p[i]);
    free(l->p);
    memset(l, 0, sizeof(*l));
}

/* A quadrilateral holding tile (order, npix) of the equatorial HiPS frame, for a tile of
 * a few degrees or less: the centres of its corner pixels at 8 x 8, pushed out from the
 * tile's centre by 1.25 times (the corners themselves lie 8/7 times as far), in poly (4
 * (ra, dec) vertices).  Returns 0 or -1. */
static int colsky_tile_quad(int order, int64_t npix, double poly[8])
{
    double lon[64], lat[64], c[3], v[3];
    double clon, clat;
    if (hips_tile_centres(order, npix, 0, HIPS_ROWS_FITS, &clon, &clat) ||
        hips_tile_centres(order, npix, 3, HIPS_ROWS_FITS, lon, lat))
        return -1;
    const int corner[4] = {0, 7, 63, 56};
    double a = clon * M_PI / 180.0, b = clat * M_PI / 180.0;
    c[0] = cos(b) * cos(a);
    c[1] = cos(b) * sin(a);
    c[2] = sin(b);
    for (int k = 0; k < 4; k++) {
        double pa = lon[corner[k]] * M_PI / 180.0, pb = lat[corner[k]] * M_PI / 180.0;
        v[0] = cos(pb) * cos(pa);
        v[1] = cos(pb) * sin(pa);
        v[2] = sin(pb);
        for (int i = 0; i < 3; i++)
            v[i] = c[i] + 1.25 * (v[i] - c[i]);
        double ra = atan2(v[1], v[0]) * 180.0 / M_PI;
        poly[2 * k] = ra < 0.0 ? ra + 360.0 : ra;
        poly[2 * k + 1] = atan2(v[2], hypot(v[0], v[1])) * 180.0 / M_PI;
    }
    return 0;
}

/* The members the index says overlap tile (order, npix), at most max kept.  The index
 * knows cells of order COL_MOC_ORDER: for a deeper tile only the members whose footprint
 * meets a quadrilateral holding the tile (colsky_tile_quad) are taken, so that a deeper
 * tile has fewer.  Returns 0, or -1 with the problem reply set. */
static int colsky_overlap(hreq *r, collection *c, int order, int64_t npix, int max,
                          colsky_list *l)
{
    memset(l, 0, sizeof(*l));
    l->max = max;
    if (order > COL_MOC_ORDER && colsky_tile_quad(order, npix, l->poly) == 0)
        l->filter = c;
    if (!(l->p = calloc((size_t)max, sizeof(char *)))) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    int rc = colindex_overlap(r->srv->app->collections->index, c->name, order, npix,
                              colsky_list_add, l);
    if (rc < 0 || l->failed) {
        colsky_list_free(l);
        problem_reply(r, 500, NULL, "cannot read the index of collection '%s'", c->name);
        return -1;
    }
    return 0;
}

/* The relpaths of up to `max` usable members spread evenly over the sorted list. */
static int colsky_sample(collection *c, int max, colsky_list *l)
{
    memset(l, 0, sizeof(*l));
    l->max = max;
    if (!(l->p = calloc((size_t)max, sizeof(char *))))
        return -1;
    pthread_rwlock_rdlock(&c->lock);
    int usable = 0;
    for (int i = 0; i < c->n; i++)
        usable += !c->m[i].error;
    for (int i = 0, k = 0; i < c->n && l->kept < max; i++) {
        if (c->m[i].error)
            continue;
        /* usable member k is taken when it is the first of the next share of the list */
        if (usable <= max || k == (int)((long long)l->kept * usable / max))
            colsky_list_add(l, c->m[i].relpath);
        k++;
    }
    pthread_rwlock_unlock(&c->lock);
    return l->failed ? -1 : 0;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;
    return (p > q) - (p < q);
}

static int cmp_double(const void *x, const void *y)
{
    double p = *(const double *)x, q = *(const double *)y;
    return (p > q) - (p < q);
}

/* The cut levels of the pictures of collection j->col, the same for every tile: the
 * median of the cut levels (j->q.render, as a dataset's) of up to COLSKY_CUT_SAMPLE
 * members spread evenly over the list by path (less each one's background offset), or
 * with `extremes` the smallest low and largest high cut (the data range).  Returns 0 or
 * -1 with the problem reply set. */
static int colsky_cuts(hreq *r, const hips_job *j, int extremes, double *lo, double *hi)
{
    colset *s = r->srv->app->collections;
    colsky_list l;
    if (colsky_sample(j->col, COLSKY_CUT_SAMPLE, &l)) {
        colsky_list_free(&l);
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    double los[COLSKY_CUT_SAMPLE], his[COLSKY_CUT_SAMPLE];
    int n = 0;
    char err[256] = "";
    for (int i = 0; i < l.kept; i++) {
        const dataset *d;
        int rc = colmembers_get(s, j->col, l.p[i], &d, err, sizeof(err));
        if (rc == 0) {
            rc = planestore_cuts(r->srv->app->planes, d, 0, &j->q.render, &los[n], &his[n],
                                 err, sizeof(err));
            colmembers_release(s, d);
            double o = colbg_offset(j->col, l.p[i]);   /* the levels of its matched values */
            los[n] -= o;
            his[n] -= o;
        }
        if (rc) {
            colsky_list_free(&l);
            problem_reply(r, problem_read_status(rc, 500), NULL, "cannot compute the cut "
                          "levels of collection '%s': %s", j->col->name, err);
            return -1;
        }
        n++;
    }
    colsky_list_free(&l);
    if (n == 0) {
        problem_reply(r, 404, "dataset", "collection '%s' has no usable member image",
                      j->col->name);
        return -1;
    }
    qsort(los, (size_t)n, sizeof(double), cmp_double);
    qsort(his, (size_t)n, sizeof(double), cmp_double);
    *lo = extremes ? los[0] : n % 2 ? los[n / 2] : 0.5 * (los[n / 2 - 1] + los[n / 2]);
    *hi = extremes ? his[n - 1] : n % 2 ? his[n / 2] : 0.5 * (his[n / 2 - 1] + his[n / 2]);
    return 0;
}

/* One member's render on a tile, made on any thread of a batch (colsky_direct). */
typedef struct colsky_part {
    const char *relpath;
    double *px;                /* W x W, FITS rows */
    long finite;               /* finite pixels, or -1: failed (status, param, err) */
    int status;
    const char *param;
    char err[600];
} colsky_part;

/* Renders member pt->relpath on tile (order, npix) into pt->px, as a dataset's tile is
 * made (hips_render_tile, the reduced plane of the tile's level, the kernel asked for),
 * without replying.  Returns the number of finite pixels, or -1 with pt's status, param
 * and err set. */
static long colsky_member_render(hreq *r, const hips_job *j, int order, int64_t npix,
                                 colsky_part *pt)
{
    colset *s = r->srv->app->collections;
    char e[256] = "";
    const dataset *d;
    int rc = colmembers_get(s, j->col, pt->relpath, &d, e, sizeof(e));
    pt->param = NULL;
    if (rc) {
        pt->status = problem_read_status(rc, 500);
        snprintf(pt->err, sizeof(pt->err), "collection '%s': %s", j->col->name, e);
        return -1;
    }
    double pixscale;
    if (!d->cel) {   /* the index lists no coverage for it: nothing to add */
        colmembers_release(s, d);
        return 0;
    }
    rc = hips_dataset_geometry(d->cel, d->nx, d->ny, d->hips_galactic, NULL, NULL, NULL,
                               NULL, &pixscale, NULL);
    if (rc) {
        colmembers_release(s, d);
        pt->status = rc == TESS_ENOMEM ? 500 : 422;
        snprintf(pt->err, sizeof(pt->err), "the WCS of member '%s' of collection '%s' gives no "
                 "sky position at the image centre", pt->relpath, j->col->name);
        return -1;
    }
    hips_job mj = *j;
    mj.ds = d;
    mj.q.plane = 0;
    source_hold h;
    pt->status = source_open(r, &mj, hips_source_level(order, HIPS_TILE_SHIFT, pixscale), &h,
                             &pt->param, pt->err, sizeof(pt->err));
    if (pt->status) {
        colmembers_release(s, d);
        return -1;
    }
    long n = hips_render_tile(&h.src, order, npix, HIPS_TILE_SHIFT, 0, HIPS_ROWS_FITS, pt->px,
                              e, sizeof(e));
    source_release(r, &h);
    colmembers_release(s, d);
    if (n < 0) {
        pt->status = n == TESS_ENOMEM ? 500 : 422;
        snprintf(pt->err, sizeof(pt->err), "cannot render member '%s' of collection '%s': %s",
                 pt->relpath, j->col->name, e);
        return -1;
    }
    return n;
}

/* The members of a batch rendered at once on the worker pool (pool_for). */
#define COLSKY_BATCH_MAX 8
typedef struct colsky_batch {
    hreq *r;
    const hips_job *j;
    int order;
    int64_t npix;
    colsky_part *part;
} colsky_batch;

static void colsky_batch_slice(void *arg, size_t i0, size_t i1)
{
    colsky_batch *b = arg;
    for (size_t i = i0; i < i1; i++)
        b->part[i].finite = colsky_member_render(b->r, b->j, b->order, b->npix, &b->part[i]);
}

/* The members `l` rendered on tile (order, npix) into out (W x W doubles, FITS rows) and
 * combined pixel by pixel with the collection's `combine` (mos_accum).  The members are
 * rendered in batches of one more than the pool's threads (at most COLSKY_BATCH_MAX, a
 * W x W buffer of doubles each, kept between requests: colmembers_scratch_take) at once
 * on the pool and this thread, and added to the
 * combination in path order, so the result does not depend on which thread ran which.
 * Returns the number of finite pixels, or -1 with the problem reply set. */
static long colsky_direct(hreq *r, const hips_job *j, const colsky_list *l, int order,
                          int64_t npix, double *out)
{
    const size_t np = (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH;
    double bg[COLSKY_TILE_MAX_MEMBERS];   /* the members' offsets, of one solution */
    if (colbg_offsets_at(j->col, l->p, l->kept, bg, j->sky)) {
        handler_reply_unsolved(r, j->col);
        return -1;
    }
    if (l->kept == 1) {
        /* One member: the combination of one value is that value (the mean's sum over
         * its weight 1, the median and the first alike), so its render less its offset
         * is the tile. */
        colsky_part one = {.relpath = l->p[0], .px = out};
        long finite = colsky_member_render(r, j, order, npix, &one);
        if (finite < 0)
            problem_reply(r, one.status, one.param, "%s", one.err);
        else if (finite == 0)
            for (size_t k = 0; k < np; k++)
                out[k] = NAN;
        else if (bg[0] != 0)
            for (size_t k = 0; k < np; k++)
                out[k] -= bg[0];
        return finite;
    }
    pool *workers = r->srv->app->workers;
    colmembers *cm = r->srv->app->collections->members;
    int nb = workers ? pool_threads(workers) + 1 : 1;
    nb = nb < COLSKY_BATCH_MAX ? nb : COLSKY_BATCH_MAX;
    nb = nb < l->kept ? nb : l->kept;
    colsky_part part[COLSKY_BATCH_MAX];
    int short_of = 0;
    part[0].px = out;   /* the first renders into out itself */
    for (int t = 1; t < nb; t++)
        short_of |= !(part[t].px = colmembers_scratch_take(cm, np));
    mos_accum a;
    if (short_of || mos_accum_init(&a, collection_combine(j->col), np, l->kept)) {
        for (int t = 1; t < nb; t++)
            colmembers_scratch_give(cm, part[t].px, np);
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    colsky_batch b = {r, j, order, npix, part};
    int failed = 0;
    for (int i0 = 0; i0 < l->kept && !failed; i0 += nb) {
        if (hreq_cancelled(r)) {
            hreq_reply_cancelled(r);
            failed = 1;
            break;
        }
        int k = l->kept - i0 < nb ? l->kept - i0 : nb;
        for (int t = 0; t < k; t++)
            part[t].relpath = l->p[i0 + t];
        pool_for(workers, hreq_priority(r), k, (size_t)k, 1, colsky_batch_slice, &b);
        for (int t = 0; t < k && !failed; t++) {
            if (part[t].finite < 0) {
                problem_reply(r, part[t].status, part[t].param, "%s", part[t].err);
                failed = 1;
            } else if (part[t].finite > 0) {
                mos_accum_add_d(&a, 0, part[t].px, NULL, (long)np, bg[i0 + t], 0.0, 0);
            }
        }
    }
    for (int t = 1; t < nb; t++)
        colmembers_scratch_give(cm, part[t].px, np);
    if (!failed)
        mos_accum_result_d(&a, out, NULL);
    mos_accum_free(&a);
    if (failed)
        return -1;
    long finite = 0;
    for (size_t k = 0; k < np; k++)
        finite += isfinite(out[k]) != 0;
    return finite;
}

/* One request's making of collection tiles (colsky_make): the member renders made so
 * far, at most COLSKY_BUILD_MAX_RENDERS. */
#define COLSKY_BUILD_MAX_RENDERS 512
typedef struct colsky_build {
    int renders;
} colsky_build;

/* The collection's hips_order: the order a dataset of its finest member pixel would get
 * (hips_survey_order), -1 without a usable member. */
static int colsky_order(collection *c)
{
    double finest = collection_finest_pixscale(c);
    return isfinite(finest) ? hips_survey_order(finest) : -1;
}

/* The cache key of the values of tile (order, npix) of j's collection (colsky_make). */
static void colsky_data_key(const hips_job *j, int order, int64_t npix, char *key,
                            size_t len)
{
    snprintf(key, len, "hips|cdata|%s|%llx|%d|%s|%.17g|%d|%d|%lld", j->col->name,
             j->sky, j->col->combine, rp_method_name(j->q.method),
             j->q.max_coord_error, j->path.format == HIPS_FMT_FITS, order, (long long)npix);
}

/* Puts the values of a tile (finite pixels, members, W x W doubles) in the memory cache;
 * a failure only costs a later render. */
static void colsky_data_put(hreq *r, const char *key, const double *out, long finite,
                            int members)
{
    const size_t np = (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH;
    unsigned char *body = malloc(2 * sizeof(int64_t) + np * sizeof(double));
    if (!body)
        return;
    int64_t head[2] = {finite, members};
    memcpy(body, head, sizeof(head));
    memcpy(body + sizeof(head), out, np * sizeof(double));
    tile *t = tile_new_internal(body, sizeof(head) + np * sizeof(double),
                                "application/octet-stream");
    if (t) {
        tilecache_put(r->srv->app->cache, key, t);
        tile_release(t);
    }
}

/* Tile (order, npix) of a collection into out (W x W doubles, FITS rows).  Over at most
 * COLSKY_TILE_MAX_MEMBERS members (those the index says overlap it), each member is
 * rendered as its own tile (hips_render_tile, the kernel asked for) and the renders are
 * combined pixel by pixel with the collection's `combine` (mos_accum).  A tile over more
 * is made from its four children of order + 1, each made the same way (recursively, down
 * to the deepest order served), as Hipsgen makes its coarser orders: each pixel the mean of the
 * finite values of its 2 x 2 child pixels (hips_tile_merge_child).  The values of a tile
 * made inside such a build (depth > 0) or from its children are kept in the memory cache
 * and taken from there, so a build stopped by its bound goes on where it stopped.  Bounds
 * of one request: COLSKY_BUILD_MAX_RENDERS member renders (then 503 with Retry-After: the
 * tiles made are kept), one W x W buffer of doubles (2 MiB) a level below `order`, and
 * the accumulator of at most COLSKY_TILE_MAX_MEMBERS members.  Returns the number of
 * finite pixels (*members the members found; 0 and out untouched when none), or -1 with
 * the problem reply set. */
static long colsky_make(hreq *r, const hips_job *j, colsky_build *b, int order, int64_t npix,
                        int depth, double *out, int *members)
{
    collection *c = j->col;
    const size_t np = (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH;
    char key[256];
    colsky_data_key(j, order, npix, key, sizeof(key));
    tile *t = tilecache_get(r->srv->app->cache, key);
    if (t) {
        int64_t head[2];
        memcpy(head, t->data, sizeof(head));
        if (head[1])
            memcpy(out, t->data + sizeof(head), np * sizeof(double));
        tile_release(t);
        *members = (int)head[1];
        return (long)head[0];
    }
    colsky_list l;
    *members = 0;
    if (colsky_overlap(r, c, order, npix, COLSKY_TILE_MAX_MEMBERS, &l))
        return -1;
    *members = l.n;
    if (l.n == 0) {
        colsky_list_free(&l);
        return 0;
    }
    if (l.n <= l.max) {
        if (b->renders + l.kept > COLSKY_BUILD_MAX_RENDERS) {
            colsky_list_free(&l);
            r->rep.retry_after = 1;
            problem_reply(r, 503, NULL, "tile Norder%d/Npix%lld of collection '%s' is being "
                          "made from its children: %d member renders in this request, at "
                          "most %d; the tiles made are kept, ask again", order,
                          (long long)npix, c->name, b->renders, COLSKY_BUILD_MAX_RENDERS);
            return -1;
        }
        b->renders += l.kept;
        long finite = colsky_direct(r, j, &l, order, npix, out);
        colsky_list_free(&l);
        if (finite >= 0 && depth > 0)
            colsky_data_put(r, key, out, finite, *members);
        return finite;
    }
    colsky_list_free(&l);
    if (order + 1 + HIPS_TILE_SHIFT > HIPS_ORDER_MAX) {
        problem_reply(r, 422, "Norder", "tile Norder%d/Npix%lld of collection '%s' overlaps %d "
                      "member images, more than the %d a tile of the deepest order is made "
                      "from", order, (long long)npix, c->name, *members,
                      COLSKY_TILE_MAX_MEMBERS);
        return -1;
    }
    double *child = malloc(np * sizeof(double));
    if (!child) {
        problem_reply(r, 500, NULL, "out of memory");
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        int cm;
        long cf = colsky_make(r, j, b, order + 1, 4 * npix + k, depth + 1, child, &cm);
        if (cf < 0) {
            free(child);
            return -1;
        }
        hips_tile_merge_child(HIPS_TILE_SHIFT, k, cm ? child : NULL, HIPS_ROWS_FITS, out);
    }
    free(child);
    long finite = 0;
    for (size_t k = 0; k < np; k++)
        finite += isfinite(out[k]) != 0;
    colsky_data_put(r, key, out, finite, *members);
    return finite;
}

static void colsky_tile_work(hreq *r)
{
    hips_job *j = r->work_arg;
    const hips_path *p = &j->path;
    double *px = malloc(sizeof(double) * (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH);
    if (!px) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int members;
    colsky_build b = {0};
    long finite = colsky_make(r, j, &b, p->order, p->npix, 0, px, &members);
    if (finite >= 0 && members == 0)
        problem_reply(r, 404, "Npix", "tile Norder%d/Npix%lld lies outside the footprint of "
                      "collection '%s' (Moc.fits)", p->order, (long long)p->npix,
                      j->col->name);
    double lo = 0.0, hi = 0.0;
    if (finite < 0 || members == 0 ||
        (p->format != HIPS_FMT_FITS && colsky_cuts(r, j, 0, &lo, &hi))) {
        free(px);
        return;
    }
    char err[256] = "";
    unsigned char *out = NULL;
    size_t len = 0;
    long rc = hips_tile_encode_data(px, finite, p->order, p->npix, 0, p->format,
                                    &j->q.render, lo, hi, &out, &len, err, sizeof(err));
    free(px);
    reply_bytes(r, rc, out, len, hips_format_mime(p->format), err);
}

/* The order-0 tiles of a collection for its Allsky (hips_base_source). */
typedef struct colsky_base {
    hreq *r;
    const hips_job *j;
    double *px;
    int replied;          /* a problem reply is set */
    colsky_build build;   /* shared by the 12 faces */
} colsky_base;

static long colsky_base_get(void *cls, int64_t npix, const double **data, char *err,
                            size_t errlen)
{
    colsky_base *b = cls;
    int members;
    long finite = colsky_make(b->r, b->j, &b->build, 0, npix, 0, b->px, &members);
    if (finite < 0) {
        b->replied = 1;
        tess_seterr(err, errlen, "order-0 tile %lld", (long long)npix);
        return TESS_EINVAL;
    }
    *data = b->px;
    return members ? finite : 0;
}

/* Norder3/Allsky of a collection: cut from its 12 order-0 tiles (colsky_make), those
 * no member overlaps left blank. */
static void colsky_allsky_work(hreq *r)
{
    hips_job *j = r->work_arg;
    double lo = 0.0, hi = 0.0;
    if (j->path.format != HIPS_FMT_FITS && colsky_cuts(r, j, 0, &lo, &hi))
        return;
    colsky_base b = {r, j, malloc(sizeof(double) * (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH),
                     0, {0}};
    if (!b.px) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hips_base_source bs = {colsky_base_get, NULL, &b};
    char err[256] = "";
    unsigned char *out = NULL;
    size_t len = 0;
    long rc = hips_allsky_encode_from(NULL, 0, &bs, j->path.format, &j->q.render, lo, hi,
                                      &out, &len, err, sizeof(err));
    free(b.px);
    if (!b.replied)
        reply_bytes(r, rc, out, len, hips_format_mime(j->path.format), err);
    else
        free(out);
}

/* The Moc.fits of a collection: the union of its members' coverage cells (the index's,
 * of order COL_MOC_ORDER or coarser), written at order COL_MOC_ORDER. */
static void colsky_moc_work(hreq *r)
{
    hips_job *j = r->work_arg;
    int64_t *uniq = NULL, *cells = NULL;
    size_t nu = 0, n = 0, cap = 0;
    int rc = colindex_cells(r->srv->app->collections->index, j->col->name, &uniq, &nu);
    for (size_t i = 0; rc == 0 && i < nu; i++) {
        int k = 0;   /* NUNIQ = 4^(k+1) + npix */
        while (k < COL_MOC_ORDER && uniq[i] >= (int64_t)4 << (2 * (k + 1)))
            k++;
        int64_t npix = uniq[i] - ((int64_t)4 << (2 * k));
        if (npix < 0 || npix >= hips_npix_count(k))
            continue;
        int shift = 2 * (COL_MOC_ORDER - k);
        int64_t first = npix << shift, count = (int64_t)1 << shift;
        if (n + (size_t)count > cap) {
            size_t nc = cap ? cap : 1024;
            while (nc < n + (size_t)count)
                nc *= 2;
            int64_t *g = realloc(cells, nc * sizeof(int64_t));
            if (!g) {
                rc = TESS_ENOMEM;
                break;
            }
            cells = g;
            cap = nc;
        }
        for (int64_t c = 0; c < count; c++)
            cells[n++] = first + c;
    }
    free(uniq);
    size_t m = 0;
    if (rc == 0 && n) {   /* sorted, each cell once */
        qsort(cells, n, sizeof(int64_t), cmp_i64);
        for (size_t i = 0; i < n; i++)
            if (m == 0 || cells[i] != cells[m - 1])
                cells[m++] = cells[i];
    }
    unsigned char *out = NULL;
    size_t len = 0;
    if (rc == 0)
        rc = hips_moc_fits_cells(cells, m, COL_MOC_ORDER, 0, &out, &len, NULL);
    free(cells);
    if (rc)
        problem_reply(r, 500, NULL, "cannot write the coverage of collection '%s'",
                      j->col->name);
    else
        hreq_reply_tile(r, 200, tile_new_take(out, len, "application/fits"));
}

/* The properties of a collection: hips_order from its finest member pixel scale, the
 * initial view the smallest circle around the members' centres (their mean direction)
 * that holds every member, cut levels from colsky_cuts. */
static void colsky_properties_work(hreq *r)
{
    hips_job *j = r->work_arg;
    collection *c = j->col;
    double v[3] = {0.0, 0.0, 0.0}, finest = INFINITY;
    long long newest = 0;
    pthread_rwlock_rdlock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (m->error || !isfinite(m->ra) || !isfinite(m->dec))
            continue;
        double a = m->ra * M_PI / 180.0, b = m->dec * M_PI / 180.0;
        v[0] += cos(b) * cos(a);
        v[1] += cos(b) * sin(a);
        v[2] += sin(b);
        if (m->pixscale > 0.0 && m->pixscale < finest)
            finest = m->pixscale;
        newest = m->mtime_ns > newest ? m->mtime_ns : newest;
    }
    double ra = atan2(v[1], v[0]) * 180.0 / M_PI, fov = 0.0;
    double dec = atan2(v[2], hypot(v[0], v[1])) * 180.0 / M_PI;
    if (ra < 0.0)
        ra += 360.0;
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (!m->error && isfinite(m->ra) && isfinite(m->dec)) {
            double reach = 2.0 * (col_distance(ra, dec, m->ra, m->dec) + m->radius);
            fov = reach > fov ? reach : fov;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    if (!isfinite(finest)) {
        problem_reply(r, 404, "dataset", "collection '%s' has no usable member image", c->name);
        return;
    }
    double lo, hi, dmin, dmax;
    hips_job range = *j;
    range.q.render.min_cut = (render_cut){0.0, 1};
    range.q.render.max_cut = (render_cut){100.0, 1};
    if (colsky_cuts(r, j, 0, &lo, &hi) || colsky_cuts(r, &range, 1, &dmin, &dmax))
        return;
    char description[96];
    snprintf(description, sizeof(description), "collection of %d images", c->n);
    hips_properties p = {
        .name = c->name, .description = description, .builder = "Tessera (on demand)",
        .tile_formats = "png jpeg fits", .released = (time_t)(newest / 1000000000LL),
        .order = hips_survey_order(finest), .galactic = 0, .ra = ra, .dec = dec,
        .fov = fov < 180.0 ? fov : 180.0, .cut_lo = lo, .cut_hi = hi, .data_min = dmin,
        .data_max = dmax,
    };
    reply_properties(r, &p);
}

/* The HiPS index.html [HiPS 4.4.5] of survey `name`: what it is (x, its name, base and
 * formats set here) and where its parts are. */
static void reply_index(hreq *r, const char *name, hips_index x)
{
    /* The base makes the relative links right for /hips/{name} and /hips/{name}/ alike. */
    size_t blen = strlen(name) + 8;
    char *base = malloc(blen);
    char *text = NULL;
    size_t len = 0;
    if (base) {
        snprintf(base, blen, "/hips/%s/", name);
        x.name = name;
        x.base_href = base;
        x.how = "Open this URL in a HiPS client such as Aladin";
        x.formats = HIPS_FMT_BIT(HIPS_FMT_PNG) | HIPS_FMT_BIT(HIPS_FMT_JPEG)
                    | HIPS_FMT_BIT(HIPS_FMT_FITS);
        if (hips_index_html(&x, &text, &len) != 0)
            text = NULL;
        free(base);
    }
    if (!text) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, len, "text/html; charset=utf-8"));
}

/* GET /hips/{collection}/...: the index page, properties, Moc.fits, Allsky and tiles as
 * for a dataset. */
static void hips_collection(hreq *r, const hips_path *hp, collection *c)
{
    static const char *const none[] = {NULL};
    static const char *const props[] = {"min_cut", "max_cut", NULL};
    static const char *const images[] = {"method", "max_coord_error", "stretch", "min_cut",
                                         "max_cut", "cmap", NULL};
    if (hp->kind == HIPS_REQ_INDEX) {
        if (hreq_only_args(r, none))
            return;
        long n = 0;
        pthread_rwlock_rdlock(&c->lock);
        for (int i = 0; i < c->n; i++)
            n += !c->m[i].error;
        pthread_rwlock_unlock(&c->lock);
        reply_index(r, c->name, (hips_index){.made_by = "made on demand by Tessera from "
                                             "collection", .source = c->name,
                                             .images = n > 0 ? n : 1, .order = colsky_order(c)});
        return;
    }
    if (hp->plane > 0) {
        problem_reply(r, 404, "plane", "collection '%s' has images of one plane", c->name);
        return;
    }
    const char *const *known = hp->kind == HIPS_REQ_MOC ? none
                               : hp->kind == HIPS_REQ_PROPERTIES ? props : images;
    if (hreq_only_args(r, known))
        return;
    if (hp->kind == HIPS_REQ_TILE && hp->order + HIPS_TILE_SHIFT > HIPS_ORDER_MAX) {
        problem_reply(r, 404, "Norder", "tiles are served down to Norder%d (their pixels are "
                      "HEALPix cells of order %d)", HIPS_ORDER_MAX - HIPS_TILE_SHIFT,
                      HIPS_ORDER_MAX);
        return;
    }
    if ((hp->kind == HIPS_REQ_TILE || hp->kind == HIPS_REQ_ALLSKY) && colbg_pending(c)) {
        handler_reply_unsolved(r, c);
        return;
    }
    hips_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->col = c;
    j->path = *hp;
    param_error pe;
    if (hips_parse_query(hreq_arg_lookup, r, &j->q, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        free(j);
        return;
    }
    if (hp->format != HIPS_FMT_FITS && !hreq_arg(r, "max_coord_error"))
        j->q.max_coord_error = HIPS_PICTURE_MCE;
    unsigned long long version = collection_version(c);
    j->sky = version;
    char rk[160];
    params_render_key(&j->q.render, rk, sizeof(rk));
    void (*work)(hreq *) = NULL;
    int n;
    if (hp->kind == HIPS_REQ_PROPERTIES) {
        work = colsky_properties_work;
        n = asprintf(&r->cache_key, "hips|cprops|%s|%llx|%.17g%s|%.17g%s", c->name, version,
                     j->q.render.min_cut.value, j->q.render.min_cut.is_percent ? "%" : "",
                     j->q.render.max_cut.value, j->q.render.max_cut.is_percent ? "%" : "");
    } else if (hp->kind == HIPS_REQ_MOC) {
        work = colsky_moc_work;
        n = asprintf(&r->cache_key, "hips|cmoc|%s|%llx", c->name, version);
    } else if (hp->kind == HIPS_REQ_ALLSKY) {
        work = colsky_allsky_work;
        n = asprintf(&r->cache_key, "hips|callsky|%s|%llx|%d|%s|%s|%.17g|%s", c->name,
                     version, c->combine, hips_format_ext(hp->format),
                     rp_method_name(j->q.method), j->q.max_coord_error,
                     hp->format == HIPS_FMT_FITS ? "" : rk);
    } else {
        work = colsky_tile_work;
        n = asprintf(&r->cache_key, "hips|ctile|%s|%llx|%d|%d|%lld|%s|%s|%.17g|%s", c->name,
                     version, c->combine, hp->order, (long long)hp->npix,
                     hips_format_ext(hp->format), rp_method_name(j->q.method),
                     j->q.max_coord_error, hp->format == HIPS_FMT_FITS ? "" : rk);
    }
    if (n < 0)
        r->cache_key = NULL;
    hreq_serve(r, work, j, free);
}

/* ---- the handler --------------------------------------------------------------------- */

void handle_hips(hreq *r, const route_match *m)
{
    static const char *const none[] = {NULL};
    static const char *const props[] = {"plane", "min_cut", "max_cut", NULL};
    static const char *const images[] = {"method", "max_coord_error", "plane", "stretch",
                                         "min_cut", "max_cut", "cmap", NULL};
    hips_path hp;
    param_error pe;
    if (handler_slashed_name(r, "/hips/", 6, "dataset"))
        return;
    int rc = hips_parse_path(m->rest, &hp, &pe);
    if (rc) {
        problem_reply(r, rc == TESS_ENOTFOUND ? 404 : 400, pe.parameter[0] ? pe.parameter : NULL,
                      "%s", pe.detail);
        return;
    }
    collection *col = colset_find(r->srv->app->collections, hp.name);
    if (col) {
        hips_collection(r, &hp, col);
        return;
    }
    const dataset *d = handler_dataset(r, hp.name, strlen(hp.name));
    if (!d)
        return;
    const char *const *known = hp.kind == HIPS_REQ_INDEX || hp.kind == HIPS_REQ_MOC ? none
                               : hp.kind == HIPS_REQ_PROPERTIES ? props : images;
    if (hreq_only_args(r, known))
        return;
    if (handler_need_celestial(r, d, "it cannot be served as a HiPS survey") ||
        handler_need_sky(r, d, "dataset", "equatorial or galactic of a HiPS survey (no HiPS of "
                         "solar images, hips_body: a HiPS tiles one fixed sphere, an image "
                         "of the Sun shows the half its observer saw at one time; for a "
                         "Carrington map, /api/v1/cutout with coordsys=carrington or a "
                         "reproject job)"))
        return;
    if (hp.kind == HIPS_REQ_INDEX) {
        reply_index(r, d->name, (hips_index){.made_by = "made on demand by Tessera from "
                                             "dataset", .source = d->name, .nx = d->nx,
                                             .ny = d->ny, .galactic = d->hips_galactic,
                                             .order = -1});
        return;
    }
    hips_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    j->path = hp;
    if (hips_parse_query(hreq_arg_lookup, r, &j->q, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        free(j);
        return;
    }
    if (hp.format != HIPS_FMT_FITS && !hreq_arg(r, "max_coord_error"))
        j->q.max_coord_error = HIPS_PICTURE_MCE;
    /* The plane, checked here once: a cube's tile or Allsky named by its plane (the
     * name says which: a plane it lacks is a resource not found), else ?plane=. */
    int plane_status = 400;
    if (hp.plane >= 0) {
        if (hreq_arg(r, "plane")) {
            problem_reply(r, 400, "plane", "the path names plane %ld: give no ?plane= with it",
                          hp.plane);
            free(j);
            return;
        }
        j->q.plane = hp.plane;
        plane_status = 404;
    }
    if (handler_plane(r, d, j->q.plane, plane_status)) {
        free(j);
        return;
    }
    if (hp.kind == HIPS_REQ_TILE && hp.order + HIPS_TILE_SHIFT > HIPS_ORDER_MAX) {
        problem_reply(r, 404, "Norder", "tiles are served down to Norder%d (their pixels are "
                      "HEALPix cells of order %d)", HIPS_ORDER_MAX - HIPS_TILE_SHIFT,
                      HIPS_ORDER_MAX);
        free(j);
        return;
    }
    char version[64], rk[160];
    dataset_version(d, version, sizeof(version));
    params_render_key(&j->q.render, rk, sizeof(rk));
    void (*work)(hreq *) = NULL;
    int n = -1;
    switch (hp.kind) {
    case HIPS_REQ_PROPERTIES:
        work = properties_work;
        n = asprintf(&r->cache_key, "hips|props|%s|%s|%ld|%.17g%s|%.17g%s", d->name, version,
                     j->q.plane, j->q.render.min_cut.value, j->q.render.min_cut.is_percent ? "%" : "",
                     j->q.render.max_cut.value, j->q.render.max_cut.is_percent ? "%" : "");
        break;
    case HIPS_REQ_TILE:
        work = tile_work;
        n = asprintf(&r->cache_key, "hips|tile|%s|%s|%ld|%d|%lld|%s|%s|%.17g|%s", d->name,
                     version, j->q.plane, hp.order, (long long)hp.npix,
                     hips_format_ext(hp.format), rp_method_name(j->q.method),
                     j->q.max_coord_error, hp.format == HIPS_FMT_FITS ? "" : rk);
        break;
    case HIPS_REQ_MOC:
        work = moc_work;
        n = asprintf(&r->cache_key, "hips|moc|%s|%s", d->name, version);
        break;
    default:
        work = allsky_work;
        n = asprintf(&r->cache_key, "hips|allsky|%s|%s|%ld|%s|%s|%.17g|%s", d->name, version,
                     j->q.plane, hips_format_ext(hp.format), rp_method_name(j->q.method),
                     j->q.max_coord_error, hp.format == HIPS_FMT_FITS ? "" : rk);
        break;
    }
    if (n < 0)
        r->cache_key = NULL;
    hreq_serve(r, work, j, free);
}
