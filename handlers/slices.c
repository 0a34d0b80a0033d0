/* GET /api/v1/datasets/{name}/slice/xy/{W}_{H}/{X}_{Y}_{Z}.{png|fits|npy}: plane cuts. */
#include "handlers/handlers.h"
#include "imageio/fitsimg.h"
#include "server/problem.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slice_job {
    const dataset *ds;
    slice_params s;
    render_params render;
} slice_job;

static const char *lookup(void *cls, const char *key)
{
    return hreq_arg(cls, key);
}

/* Rewrites the value of a numeric card in place ("CRPIX1  = <value>"). */
static void set_card_number(char *card, double v)
{
    char tmp[81];
    snprintf(tmp, sizeof(tmp), "%-8.8s= %20.15G", card, v);
    size_t n = strlen(tmp);
    memset(card, ' ', 80);
    memcpy(card, tmp, n);
}

/* The WCS cards of the slice: the plane's header with CRPIXn moved by the offset, so
 * that a pixel of the slice keeps its world coordinates.  Returns malloc'd cards or NULL. */
static char *slice_cards(const dataset *d, const slice_params *s, int *nkeys)
{
    char *hdr = NULL;
    int n = 0;
    if (d->kind == DS_STACK) {
        fitsimg_info info;
        char err[128];
        if (fitsimg_read_info(d->paths[s->z], d->hdu, &info, err, sizeof(err)) == 0) {
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
    for (int i = 0; i < n; i++) {
        char *c = hdr + (size_t)i * 80;
        if (strncmp(c, "CRPIX", 5) == 0 && c[5] >= '1' && c[5] <= '3' && c[6] == ' ' &&
            c[8] == '=') {
            int axis = c[5] - '1';
            if (shift[axis] != 0) {
                char val[80];
                char key[8] = {'C', 'R', 'P', 'I', 'X', c[5], '\0'};
                if (fitsimg_header_get(c, 1, key, val, sizeof(val))) {
                    double v = strtod(val, NULL);
                    set_card_number(c, v - shift[axis]);
                }
            }
        }
    }
    *nkeys = n;
    return hdr;
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
    if (dataset_read_region(d, s->z, s->x, s->y, s->w, s->h, data, err, sizeof(err))) {
        problem_reply(r, 500, NULL, "cannot read dataset '%s': %s", d->name, err);
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

void handle_slice(hreq *r, const dataset *d, const char *rest)
{
    static const char *const known[] = {"stretch", "min_cut", "max_cut", "cmap", NULL};
    if (hreq_only_args(r, known))
        return;
    slice_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    param_error pe;
    if (params_slice_path(rest, &j->s, &pe) || params_render(lookup, r, &j->render, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        free(j);
        return;
    }
    slice_params *s = &j->s;
    if (s->x + s->w > d->nx || s->y + s->h > d->ny) {
        problem_reply(r, 400, "offset", "region %ldx%ld at (%ld, %ld) runs outside the %ldx%ld "
                      "plane of '%s'", s->w, s->h, s->x, s->y, d->nx, d->ny, d->name);
        free(j);
        return;
    }
    if (s->z >= d->nz) {
        problem_reply(r, 400, "offset", "plane Z = %ld is outside 0..%ld of '%s'", s->z,
                      d->nz - 1, d->name);
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
    if (asprintf(&r->cache_key, "slice|%s|%s|xy|%ld|%ld|%ld|%ld|%ld|%s|%s", d->name, version,
                 s->w, s->h, s->x, s->y, s->z, out_format_name(s->format),
                 s->format == FMT_PNG ? rk : "") < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        free(j);
        return;
    }
    if (hreq_try_cache(r)) {
        free(j);
        return;
    }
    hreq_run_async(r, slice_work, j, free);
}
