/* GET /api/v1/datasets/{name}/reduce?op=mean|sum|min|max|std&axis=z|xy[&format=]: NaN-aware
 * reductions of a cube or stack along z (an image) or over each plane (one value a plane).
 *
 * As numpy's nanmean / nansum / nanmin / nanmax / nanstd (ddof 0): NaN (blank) values are
 * skipped; where no value is left the result is NaN (0 for sum).  axis=z: pixel (x, y) of
 * the result reduces v(x, y, 0..nz-1), an nx x ny image (png|jpg|fits|npy|raw, rendering
 * parameters; FITS keeps the celestial WCS); the planes are split in z-ranges over the
 * worker pool and reduced by stack_zreduce (engine/image/stack.h: an exact integer mode for
 * 8/16-bit frames without BLANK, else doubles with Welford's std).  axis=xy: value k
 * reduces plane k (json|npy|csv with the z axis of series).
 * Requests that would read more than REDUCE_MAX_INPUT_BYTES of stored pixels are refused
 * with 413: a "reduce" job (POST /api/v1/jobs) does those in the background. */
#include "daemon/api/handlers.h"
#include "engine/image/stack.h"
#include "daemon/http.h"
#include "engine/base/pool.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stored bytes a request may read at most (2 GiB). */
#define REDUCE_MAX_INPUT_BYTES (2ULL << 30)

typedef enum { OP_MEAN, OP_SUM, OP_MIN, OP_MAX, OP_STD } reduce_op;
static const char *const op_names[] = {"mean", "sum", "min", "max", "std"};

typedef struct reduce_job {
    const dataset *ds;
    reduce_op op;
    int along_z;             /* 1: axis=z (an image), 0: axis=xy (a value per plane) */
    out_format format;       /* axis=z */
    profile_format pformat;  /* axis=xy */
    render_params render;
} reduce_job;

/* The reduction of n values (one plane), as numpy's nan-functions. */
static double reduce_values(reduce_op op, const double *v, size_t n)
{
    double s = 0, best = NAN;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(v[i]))
            continue;
        c++;
        s += v[i];
        if ((op == OP_MIN && !(v[i] >= best)) || (op == OP_MAX && !(v[i] <= best)))
            best = v[i];
    }
    switch (op) {
    case OP_SUM: return s;
    case OP_MIN:
    case OP_MAX: return best;
    case OP_MEAN: return c ? s / (double)c : NAN;
    case OP_STD:
        break;
    }
    if (!c)
        return NAN;
    double mean = s / (double)c, ss = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            ss += (v[i] - mean) * (v[i] - mean);
    return sqrt(ss / (double)c);
}

/* The dataset's header without the cards of axes beyond 2 (and WCSAXES), for the FITS of
 * an axis=z result.  Returns malloc'd cards or NULL. */
static char *cards_2d(const dataset *d, int *nkeys)
{
    char *out = malloc((size_t)d->nkeys * 80 + 1);
    if (!out)
        return NULL;
    int n = 0;
    for (int i = 0; i < d->nkeys; i++) {
        const char *c = d->header + (size_t)i * 80;
        char key[9];
        memcpy(key, c, 8);
        key[8] = '\0';
        for (int k = 7; k >= 0 && key[k] == ' '; k--)
            key[k] = '\0';
        int drop = strcmp(key, "WCSAXES") == 0;
        static const char *const ax[] = {"CTYPE", "CRPIX", "CRVAL", "CDELT", "CUNIT", "CROTA"};
        for (int a = 0; a < 6 && !drop; a++)
            if (strncmp(key, ax[a], 5) == 0 && key[5] >= '3' && key[5] <= '9')
                drop = 1;
        if ((strncmp(key, "PC", 2) == 0 || strncmp(key, "CD", 2) == 0) && strchr(key, '_') &&
            (strchr(key, '3') || strchr(key, '4')))
            drop = 1;
        if (!drop)
            memcpy(out + (size_t)n++ * 80, c, 80);
    }
    out[(size_t)n * 80] = '\0';
    *nkeys = n;
    return out;
}

/* Axis z on the worker pool: the planes are cut into z-ranges (at most one per pool
 * thread, ZSPLIT_MAX), each reduced by stack_zreduce into its own partial; the request's
 * thread and up to nchunks-1 helper tasks (interactive priority) claim ranges from a
 * counter, so a helper that starts late finds nothing left and returns, and the request
 * thread never waits on a range nobody runs.  Partials merge in z order, so the result
 * does not depend on which thread ran what.  z-ranges rather than row bands: each frame
 * is then opened and read by one thread (the reader keeps at most 64 frames open). */
#define ZSPLIT_MAX 8

typedef struct zsplit {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int refs;
    long next, nchunks, done;
    stack *st;
    stack_zop op;
    long nz;
    stack_zpart *parts[ZSPLIT_MAX];
    int rc;
    char err[256];
} zsplit;

static void zsplit_unref(zsplit *z)
{
    pthread_mutex_lock(&z->lock);
    int last = --z->refs == 0;
    pthread_mutex_unlock(&z->lock);
    if (!last)
        return;
    for (int i = 0; i < ZSPLIT_MAX; i++)
        stack_zpart_free(z->parts[i]);
    pthread_mutex_destroy(&z->lock);
    pthread_cond_destroy(&z->cv);
    free(z);
}

static void zsplit_work(zsplit *z)
{
    for (;;) {
        pthread_mutex_lock(&z->lock);
        long c = z->next < z->nchunks && !z->rc ? z->next++ : -1;
        pthread_mutex_unlock(&z->lock);
        if (c < 0)
            return;
        char err[256] = "";
        stack_zpart *part = NULL;
        int rc = stack_zreduce(z->st, z->op, c * z->nz / z->nchunks, (c + 1) * z->nz / z->nchunks,
                               0, NULL, &part, err, sizeof(err));
        pthread_mutex_lock(&z->lock);
        z->parts[c] = part;
        if (rc && !z->rc) {
            z->rc = rc;
            snprintf(z->err, sizeof(z->err), "%s", err);
        }
        z->done++;
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->lock);
    }
}

static void zsplit_task(void *arg)
{
    zsplit_work(arg);
    zsplit_unref(arg);
}

static void reduce_z(hreq *r, reduce_job *j)
{
    const dataset *d = j->ds;
    size_t n = (size_t)d->nx * (size_t)d->ny;
    char *cards = NULL;
    double *acc = malloc(n * sizeof(double));
    zsplit *z = calloc(1, sizeof(*z));
    if (!acc || !z) {
        free(acc);
        free(z);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    pthread_mutex_init(&z->lock, NULL);
    pthread_cond_init(&z->cv, NULL);
    z->st = dataset_stack(d);
    z->op = (stack_zop)j->op;   /* reduce_op lists the ops in stack_zop's order */
    z->nz = d->nz;
    long nt = pool_threads(r->srv->workers);
    z->nchunks = nt < 1 ? 1 : nt > ZSPLIT_MAX ? ZSPLIT_MAX : nt;
    if (z->nchunks > d->nz)
        z->nchunks = d->nz;
    z->refs = 1;
    for (long i = 1; i < z->nchunks; i++) {
        pthread_mutex_lock(&z->lock);
        z->refs++;
        pthread_mutex_unlock(&z->lock);
        if (pool_submit(r->srv->workers, POOL_INTERACTIVE, zsplit_task, z) != 0)
            zsplit_unref(z);   /* no helper: the request thread does that range itself */
    }
    zsplit_work(z);
    pthread_mutex_lock(&z->lock);
    while (z->done < z->next)
        pthread_cond_wait(&z->cv, &z->lock);
    int rc = z->rc;
    pthread_mutex_unlock(&z->lock);
    for (long c = 1; c < z->nchunks && !rc; c++)
        if (stack_zpart_merge(z->parts[0], z->parts[c]) != 0) {
            rc = TESS_ENOMEM;
            snprintf(z->err, sizeof(z->err), "out of memory");
        }
    if (rc) {
        if (rc == TESS_ENOMEM)
            problem_reply(r, 500, NULL, "out of memory");
        else
            problem_reply(r, 500, NULL, "cannot read dataset '%s': %s", d->name, z->err);
        goto done;
    }
    stack_zpart_result(z->parts[0], acc);
    int nkeys = 0;
    if (j->format == FMT_FITS)
        cards = cards_2d(d, &nkeys);
    reply_image(r, acc, d->nx, d->ny, j->format, &j->render, cards, nkeys);
done:
    zsplit_unref(z);
    free(cards);
    free(acc);
}

static void reduce_xy(hreq *r, reduce_job *j)
{
    const dataset *d = j->ds;
    size_t n = (size_t)d->nx * (size_t)d->ny;
    char err[256];
    double *plane = malloc(n * sizeof(double));
    double *vals = malloc((size_t)d->nz * sizeof(double));
    if (!plane || !vals) {
        problem_reply(r, 500, NULL, "out of memory");
        goto done;
    }
    for (long z = 0; z < d->nz; z++) {
        /* 8/16-bit planes in exact integers straight from the mapping, others as doubles */
        int rc = stack_reduce_plane(dataset_stack(d), z, (stack_zop)j->op, &vals[z], err,
                                    sizeof(err));
        if (rc == 0)
            continue;
        if (rc < 0 || dataset_read_region(d, z, 0, 0, d->nx, d->ny, plane, err, sizeof(err))) {
            problem_reply(r, 500, NULL, "cannot read dataset '%s': %s", d->name, err);
            goto done;
        }
        vals[z] = reduce_values(j->op, plane, n);
    }
    zaxis za;
    if (zaxis_compute(d, d->nx / 2, d->ny / 2, &za)) {
        problem_reply(r, 500, NULL, "out of memory");
        goto done;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "dataset", json_string(d->name));
    json_object_set_new(doc, "op", json_string(op_names[j->op]));
    json_object_set_new(doc, "axis", json_string("xy"));
    json_object_set_new(doc, "unit", json_string(d->bunit));
    reply_profile(r, j->pformat, doc, &za, vals, d->nz, d->bunit);
    zaxis_release(&za);
done:
    free(plane);
    free(vals);
}

static void reduce_work(hreq *r)
{
    reduce_job *j = r->work_arg;
    if (j->along_z)
        reduce_z(r, j);
    else
        reduce_xy(r, j);
}

static const char *lookup(void *cls, const char *key)
{
    return hreq_arg(cls, key);
}

void handle_reduce(hreq *r, const dataset *d)
{
    static const char *const known[] = {"op", "axis", "format", "stretch", "min_cut", "max_cut",
                                        "cmap", NULL};
    if (hreq_only_args(r, known))
        return;
    reduce_job j0;
    memset(&j0, 0, sizeof(j0));
    j0.ds = d;
    const char *s = hreq_arg(r, "op");
    int op = -1;
    for (int i = 0; s && i < 5; i++)
        if (strcmp(s, op_names[i]) == 0)
            op = i;
    if (op < 0) {
        problem_reply(r, 400, "op", "op must be mean, sum, min, max or std, got '%.40s'",
                      s ? s : "(none)");
        return;
    }
    j0.op = (reduce_op)op;
    s = hreq_arg(r, "axis");
    if (!s || (strcmp(s, "z") != 0 && strcmp(s, "xy") != 0)) {
        problem_reply(r, 400, "axis", "axis must be z (an image: the reduction along z at each "
                      "pixel) or xy (one value per plane)%s%.40s%s", s ? ", got '" : "",
                      s ? s : "", s ? "'" : "");
        return;
    }
    j0.along_z = strcmp(s, "z") == 0;
    s = hreq_arg(r, "format");
    if (j0.along_z) {
        j0.format = FMT_PNG;
        if (s && out_format_parse(s, &j0.format)) {
            problem_reply(r, 400, "format", "format must be png, jpg, fits, npy or raw for "
                          "axis=z, got '%.40s'", s);
            return;
        }
    } else if (profile_format_parse(s, &j0.pformat)) {
        problem_reply(r, 400, "format", "format must be json, npy or csv for axis=xy, got "
                      "'%.40s'", s);
        return;
    }
    param_error pe;
    if (params_render(lookup, r, &j0.render, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        return;
    }
    long long npix = (long long)d->nx * d->ny;
    if (j0.along_z && npix > r->srv->cfg->max_output_pixels) {
        problem_reply(r, 413, "axis", "the %ldx%ld result is more than limits.max_output_pixels "
                      "= %lld", d->nx, d->ny, r->srv->cfg->max_output_pixels);
        return;
    }
    unsigned long long bytes = stack_data_bytes(dataset_stack(d));
    if (bytes > REDUCE_MAX_INPUT_BYTES) {
        problem_reply(r, 413, "axis", "reducing '%s' reads %llu MB, more than the %llu MB a "
                      "request may read; post a job instead: POST /api/v1/jobs {\"type\": "
                      "\"reduce\", \"dataset\": \"%s\", \"op\": \"%s\", \"axis\": \"%s\", "
                      "\"output\": {\"name\": ...}}", d->name, bytes >> 20,
                      REDUCE_MAX_INPUT_BYTES >> 20, d->name, op_names[j0.op],
                      j0.along_z ? "z" : "xy");
        return;
    }
    char rk[160], version[64];
    params_render_key(&j0.render, rk, sizeof(rk));
    dataset_version(d, version, sizeof(version));
    int rendered = j0.along_z && (j0.format == FMT_PNG || j0.format == FMT_JPG);
    if (asprintf(&r->cache_key, "reduce|%s|%s|%s|%s|%s|%s", d->name, version, op_names[j0.op],
                 j0.along_z ? "z" : "xy",
                 j0.along_z ? out_format_name(j0.format) : profile_format_name(j0.pformat),
                 rendered ? rk : "") < 0) {
        r->cache_key = NULL;
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    if (j0.along_z)
        reply_image_shape(r, j0.format, d->nx, d->ny);
    if (hreq_try_cache(r))
        return;
    reduce_job *j = malloc(sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    *j = j0;
    hreq_run_async(r, reduce_work, j, free);
}
