/* GET /api/v1/datasets/{name}/slice/{xy|xz|yz}/{W}_{H}/{X}_{Y}_{Z}.{fmt}: plane cuts on any axis.
 *
 * The result is W x H pixels, row 0 (FITS row 1, the bottom of a rendering) first:
 *   xy: pixel (i, j) = v(X + i, Y + j, Z)          W along x, H along y, plane Z
 *   xz: pixel (i, k) = v(X + i, Y, Z + k)          W along x, H along z, row Y
 *   yz: pixel (j, k) = v(X, Y + j, Z + k)          W along y, H along z, column X
 * so z grows upwards in renderings of xz and yz cuts, as y does in xy planes. */
#include "daemon/api/handlers.h"
#include "daemon/api/slices.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/encode.h"
#include "engine/image/stack.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a decimal integer of at most 12 digits ending at one of `stops`. */
static int path_long(const char **s, const char *stops, long *out)
{
    const char *q = *s;
    long v;
    if (param_path_digits(&q, &v) || !*q || !strchr(stops, *q))
        return TESS_EINVAL;
    *out = v;
    *s = q + 1;
    return 0;
}

int slice_parse_path(const char *s, slice_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    int known = strncmp(s, "xy", 2) == 0 || strncmp(s, "xz", 2) == 0 || strncmp(s, "yz", 2) == 0;
    if (known && (s[2] == '\0' || (s[2] == '/' && s[3] == '\0')))
        return param_fail(e, "size", "the slice path goes on after the plane: "
                          "%.2s/{W}_{H}/{X}_{Y}_{Z}.{png|jpg|fits|npy|raw}", s);
    if (!known || s[2] != '/')
        return param_fail(e, "plane", "slice plane must be xy, xz or yz, got '%.20s'", s);
    memcpy(p->plane, s, 2);
    p->plane[2] = '\0';
    s += 3;
    if (path_long(&s, "_", &p->w) || path_long(&s, "/", &p->h))
        return param_fail(e, "size", "slice size must be {W}_{H} in pixels");
    if (path_long(&s, "_", &p->x) || path_long(&s, "_", &p->y) || path_long(&s, ".", &p->z))
        return param_fail(e, "offset", "slice offset must be {X}_{Y}_{Z} in pixels, 0-based");
    if (out_format_parse(s, &p->format))
        return param_fail(e, "format", "slice format must be png, jpg, fits, npy or raw, got "
                          "'%.20s'", s);
    if (p->w < 1 || p->h < 1 || p->w > 65536 || p->h > 65536)
        return param_fail(e, "size", "slice width and height must be 1..65536");
    return 0;
}

/* The cards of an xz or yz cut: which cut it is, and the z axis's linear WCS (CTYPE3,
 * CUNIT3, CRVAL3, CDELT3, CRPIX3 moved by Z) as axis 2 when the header has them; the
 * spatial axis then gets the linear WCS of the source's pixel index (a celestial axis
 * alone is not a WCS): CTYPE1 'PIXEL', 0-based x (xz) or y (yz) of the source, so that
 * every axis of the WCS has its CTYPE, CRPIX and CRVAL (fitsverify asks for them).
 * Returns malloc'd cards or NULL. */
static char *cut_cards(const dataset *d, const slice_params *s, int *nkeys)
{
    fitscard_list l;
    fitscard_list_init(&l, 16);
    char comment[48];
    snprintf(comment, sizeof(comment), "plane cut: axis 1 %s, axis 2 z",
             s->plane[0] == 'x' ? "x" : "y");
    fitscard_list_string(&l, "SLICE", s->plane, 8, comment);
    snprintf(comment, sizeof(comment), "fixed 0-based %s of the cut",
             s->plane[0] == 'x' ? "row" : "column");
    fitscard_list_int(&l, s->plane[0] == 'x' ? "SLICEY" : "SLICEX",
                      s->plane[0] == 'x' ? s->y : s->x, comment);
    static const char *const keys[] = {"CTYPE3", "CUNIT3", "CRVAL3", "CDELT3", "CRPIX3"};
    char val3[80];
    if (d->kind == DS_CUBE && fitscard_get(d->header, d->nkeys, "CTYPE3", val3, sizeof val3)) {
        fitscard_list_string(&l, "CTYPE1", "PIXEL", 0, s->plane[0] == 'x'
                             ? "axis 1: 0-based source column" : "axis 1: 0-based source row");
        fitscard_list_real(&l, "CRPIX1", 1.0, 15, NULL);
        fitscard_list_real(&l, "CRVAL1", (double)(s->plane[0] == 'x' ? s->x : s->y), 15, NULL);
        fitscard_list_real(&l, "CDELT1", 1.0, 15, NULL);
    }
    if (d->kind == DS_CUBE) {
        for (int k = 0; k < 5; k++) {
            char val[80];
            if (!fitscard_get(d->header, d->nkeys, keys[k], val, sizeof(val)))
                continue;
            char key[9];
            snprintf(key, sizeof(key), "%.5s2", keys[k]);
            double v = strtod(val, NULL) - (k == 4 ? (double)s->z : 0.0);
            if (k < 2)
                fitscard_list_string(&l, key, val, 0, NULL);
            else if (isfinite(v))
                fitscard_list_real(&l, key, v, 15, NULL);
        }
    }
    char *cards = NULL;
    return fitscard_list_take(&l, &cards, nkeys) == 0 ? cards : NULL;
}

/* The WCS cards of the slice: the plane's header with its pixel origin moved by the
 * offset (fitsimg_header_shift), so that a pixel of the slice keeps its world
 * coordinates.  Returns malloc'd cards or NULL. */
static char *slice_cards(const dataset *d, const slice_params *s, int *nkeys)
{
    char *hdr = NULL;
    int n = 0;
    if (strcmp(s->plane, "xy") != 0)
        return cut_cards(d, s, nkeys);
    if (d->kind == DS_STACK) {
        fitsimg_info info;
        char err[128];
        if (frame_read_info(d->paths[s->z], d->hdu, &info, err, sizeof(err)) == 0) {
            hdr = info.header;
            n = info.nkeys;
            info.header = NULL;
            fitsimg_info_release(&info);
        }
    } else {
        hdr = malloc((size_t)d->nkeys * 80 + 1);
        if (hdr) {
            memcpy(hdr, d->header, (size_t)d->nkeys * 80 + 1);
            n = d->nkeys;
        }
    }
    if (!hdr)
        return NULL;
    double shift[3] = {(double)s->x, (double)s->y, d->kind == DS_CUBE ? (double)s->z : 0};
    fitsimg_header_shift(hdr, n, shift, 3);
    *nkeys = n;
    return hdr;
}

/* What slice_work needs, validated on the HTTP thread. */
typedef struct slice_job {
    const dataset *ds;
    slice_params s;
    render_params render;
    slice_answer how;
    zchunk_dtype dtype;       /* stored-value answers: the dataset's element type */
} slice_job;

/* Answers the w x h values (row 0 = the first row of the cut) as their stored type:
 * a greyscale PNG (rows flipped for SLICE_GREY_PNG) or raw little-endian octets. */
static void reply_values(hreq *r, const slice_job *j, const double *data)
{
    long w = j->s.w, h = j->s.h;
    int es = zchunk_esize(j->dtype);
    size_t row = (size_t)w * (size_t)es, bad = 0;
    unsigned char *packed = malloc(row * (size_t)h), *out = NULL;
    size_t len = 0;
    if (!packed) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc = 0;
    for (long y = 0; rc == 0 && y < h; y++) {
        long to = j->how == SLICE_GREY_PNG ? h - 1 - y : y;
        rc = zchunk_pack(j->dtype, data + y * w, (size_t)w, packed + (size_t)to * row, &bad);
        if (rc)
            problem_reply(r, 500, NULL, "value %.17g in row %ld of the cut does not fit the "
                          "dataset's type %s (chosen from the first file's header)",
                          data[y * w + (long)bad], y, zchunk_numpy_name(j->dtype));
    }
    if (rc) {
        free(packed);
        return;
    }
    if (j->how == SLICE_OCTETS) {
        hreq_reply_tile(r, 200, tile_new_take(packed, row * (size_t)h,
                                              "application/octet-stream"));
        return;
    }
    rc = png_encode_grey(packed, w, h, es * 8, &out, &len);
    free(packed);
    if (rc) {
        problem_reply(r, 500, NULL, "could not encode the PNG");
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take(out, len, "image/png"));
}

static void slice_work(hreq *r)
{
    slice_job *j = r->work_arg;
    const dataset *d = j->ds;
    const slice_params *s = &j->s;
    char err[256];
    double *data = malloc((size_t)s->w * (size_t)s->h * sizeof(double));
    if (!data) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    int rc;
    /* The frames of a stack are read on the request's pool (one per frame for xz and yz). */
    stack_cut_opts o = {r->srv->app->workers, hreq_priority(r), &r->cancel_v};
    if (strcmp(s->plane, "xz") == 0)
        rc = stack_read_xz_on(dataset_stack(d), &o, s->y, s->x, s->z, s->w, s->h, data, err,
                              sizeof(err));
    else if (strcmp(s->plane, "yz") == 0)
        rc = stack_read_yz_on(dataset_stack(d), &o, s->x, s->y, s->z, s->w, s->h, data, err,
                              sizeof(err));
    else
        rc = dataset_read_region(d, s->z, s->x, s->y, s->w, s->h, data, err, sizeof(err));
    if (rc == TESS_ECANCELED) {
        hreq_reply_cancelled(r);
        free(data);
        return;
    }
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      d->name, err);
        free(data);
        return;
    }
    if (j->how != SLICE_RENDERED) {
        reply_values(r, j, data);
        free(data);
        return;
    }
    char *cards = NULL;
    int nkeys = 0;
    if (s->format == FMT_FITS)
        cards = slice_cards(d, s, &nkeys);
    reply_image(r, data, s->w, s->h, s->format, &j->render, cards, nkeys);
    free(cards);
    free(data);
}

void handle_slice(hreq *r, const route_match *m)
{
    static const char *const known[] = {"stretch", "min_cut", "max_cut", "cmap", NULL};
    if (hreq_only_args(r, known))
        return;
    slice_params s;
    render_params rp;
    param_error pe;
    const char *stretch = hreq_arg(r, "stretch");
    int plain = stretch && strcmp(stretch, "none") == 0;
    if (slice_parse_path(m->rest, &s, &pe) ||
        (!plain && params_render(hreq_arg_lookup, r, &rp, &pe))) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        return;
    }
    if (plain) {
        memset(&rp, 0, sizeof rp);
        static const char *const render_only[] = {"min_cut", "max_cut", "cmap"};
        for (int i = 0; i < 3; i++)
            if (hreq_arg(r, render_only[i])) {
                problem_reply(r, 400, render_only[i], "stretch=none gives the stored values: "
                              "%s does not apply", render_only[i]);
                return;
            }
        if (s.format != FMT_PNG) {
            problem_reply(r, 400, "stretch", "stretch=none is a PNG of the stored values; "
                          "%s slices are never stretched", out_format_name(s.format));
            return;
        }
    }
    slice_serve(r, m->ds, &s, &rp, plain ? SLICE_GREY_PNG : SLICE_RENDERED);
}

void slice_serve(hreq *r, const dataset *d, const slice_params *sp, const render_params *rp,
                 slice_answer how)
{
    slice_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    j->s = *sp;
    j->render = *rp;
    j->how = how;
    j->dtype = zarr_dtype_of(d);
    if ((how == SLICE_GREY_PNG || how == SLICE_DVID_PNG) && j->dtype != ZCHUNK_U1 &&
        j->dtype != ZCHUNK_U2) {
        problem_reply(r, 400, how == SLICE_GREY_PNG ? "stretch" : "format",
                      "the values of '%s' are %s: a greyscale PNG holds uint8 or uint16 "
                      "only%s", d->name, zchunk_numpy_name(j->dtype),
                      how == SLICE_GREY_PNG ? " (ask for npy, raw or fits)"
                                            : " (ask for octet-stream)");
        free(j);
        return;
    }
    slice_params *s = &j->s;
    /* Extent of the cut along x, y and z. */
    long ex = s->w, ey = s->h, ez = 1;
    if (strcmp(s->plane, "xz") == 0) {
        ey = 1;
        ez = s->h;
    } else if (strcmp(s->plane, "yz") == 0) {
        ex = 1;
        ey = s->w;
        ez = s->h;
    }
    if (s->x + ex > d->nx || s->y + ey > d->ny) {
        problem_reply(r, 400, "offset", "%s cut %ldx%ld at (%ld, %ld) runs outside the %ldx%ld "
                      "plane of '%s'", s->plane, s->w, s->h, s->x, s->y, d->nx, d->ny, d->name);
        free(j);
        return;
    }
    if (s->z + ez > d->nz) {
        problem_reply(r, 400, "offset", "planes Z = %ld..%ld are outside 0..%ld of '%s'", s->z,
                      s->z + ez - 1, d->nz - 1, d->name);
        free(j);
        return;
    }
    long long npix = (long long)s->w * s->h;
    if (npix > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, "size", "%lld pixels is more than limits.max_output_pixels = %lld",
                      npix, r->srv->cfg->max_output_pixels);
        free(j);
        return;
    }
    char rk[160], version[64];
    params_render_key(&j->render, rk, sizeof(rk));
    dataset_version(d, version, sizeof(version));
    int rendered = how == SLICE_RENDERED && (s->format == FMT_PNG || s->format == FMT_JPG);
    static const char *const answer_name[] = {"", "grey", "dvid", "octets"};
    if (asprintf(&r->cache_key, "slice|%s|%s|%s|%ld|%ld|%ld|%ld|%ld|%s|%s%s", d->name, version,
                 s->plane, s->w, s->h, s->x, s->y, s->z, out_format_name(s->format),
                 rendered ? rk : "", answer_name[how]) < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        free(j);
        return;
    }
    reply_image_shape(r, s->format, s->w, s->h);
    if (hreq_try_cache(r)) {
        free(j);
        return;
    }
    hreq_run_async(r, slice_work, j, free);
}
