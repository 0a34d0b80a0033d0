/* Background offsets of a collection: pairwise levels over the members' overlaps and
 * their global least-squares solution, kept in the index (colbackground.h). */
#include "daemon/collection/colbackground.h"
#include "daemon/collection/collection.h"
#include "daemon/collection/colmembers.h"
#include "engine/base/error.h"
#include "engine/mosaic/mosaic.h"
#include "engine/sky/reproject.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most difference points one pair is reduced from (rows and columns subsampled). */
#define COLBG_FIT_POINTS (1L << 20)
/* A reprojected pixel counts when its footprint is at least this (as the mosaic's). */
#define COLBG_MIN_WEIGHT 0.999

static atomic_ullong pairs_measured;

unsigned long long colbg_pairs_measured(void)
{
    return atomic_load(&pairs_measured);
}

int colbg_pending(collection *c)
{
    if (!c->match_background)
        return 0;
    pthread_rwlock_rdlock(&c->lock);
    int p = c->bg_version != c->version;
    pthread_rwlock_unlock(&c->lock);
    return p;
}

double colbg_offset(collection *c, const char *relpath)
{
    if (!c->match_background)
        return 0.0;
    pthread_rwlock_rdlock(&c->lock);
    const col_member *m = col_member_find(c->m, c->n, relpath);
    double o = m && isfinite(m->bg_offset) ? m->bg_offset : 0.0;
    pthread_rwlock_unlock(&c->lock);
    return o;
}

int colbg_offsets_at(collection *c, char *const *rel, int n, double *out,
                     unsigned long long sky)
{
    if (!c->match_background) {
        for (int i = 0; i < n; i++)
            out[i] = 0.0;
        return 0;
    }
    pthread_rwlock_rdlock(&c->lock);
    int pending = c->bg_version != c->version ||
                  (sky && sky != collection_version_locked(c));
    for (int i = 0; !pending && i < n; i++) {
        const col_member *m = col_member_find(c->m, c->n, rel[i]);
        out[i] = m && isfinite(m->bg_offset) ? m->bg_offset : 0.0;
    }
    pthread_rwlock_unlock(&c->lock);
    return pending;
}

int colbg_offsets(collection *c, char *const *rel, int n, double *out)
{
    return colbg_offsets_at(c, rel, n, out, 0);
}

void colbg_loaded(collection *c)
{
    if (!c->match_background)
        return;
    pthread_rwlock_wrlock(&c->lock);
    int all = 1;
    for (int i = 0; i < c->n; i++)
        if (!c->m[i].error && !isfinite(c->m[i].bg_offset))
            all = 0;
    if (all) {
        c->bg_version = c->version;
        c->bg_generation++;
    }
    pthread_rwlock_unlock(&c->lock);
}

/* The usable members when the update starts (path order). */
typedef struct snap {
    char **rel;
    double *poly;      /* 8 a member */
    double *ctr;       /* ra, dec, radius a member */
    int n;
    unsigned long long version;
} snap;

static void snap_free(snap *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->rel[i]);
    free(p->rel);
    free(p->poly);
    free(p->ctr);
}

static int snap_take(collection *c, snap *p)
{
    memset(p, 0, sizeof(*p));
    pthread_rwlock_rdlock(&c->lock);
    int cap = c->n > 0 ? c->n : 1, rc = 0;
    p->rel = calloc((size_t)cap, sizeof(char *));
    p->poly = malloc(sizeof(double) * 8 * (size_t)cap);
    p->ctr = malloc(sizeof(double) * 3 * (size_t)cap);
    p->version = c->version;
    if (!p->rel || !p->poly || !p->ctr)
        rc = TESS_ENOMEM;
    for (int i = 0; i < c->n && !rc; i++) {
        const col_member *m = &c->m[i];
        if (m->error || !isfinite(m->ra) || !isfinite(m->dec) || !isfinite(m->radius))
            continue;
        if (!(p->rel[p->n] = strdup(m->relpath))) {
            rc = TESS_ENOMEM;
            break;
        }
        memcpy(p->poly + 8 * (size_t)p->n, m->poly, sizeof(m->poly));
        p->ctr[3 * p->n] = m->ra;
        p->ctr[3 * p->n + 1] = m->dec;
        p->ctr[3 * p->n + 2] = m->radius;
        p->n++;
    }
    pthread_rwlock_unlock(&c->lock);
    if (rc)
        snap_free(p);
    return rc;
}

static int snap_index(const snap *p, const char *rel)
{
    int lo = 0, hi = p->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, k = strcmp(p->rel[mid], rel);
        if (k == 0)
            return mid;
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* The pairs known: those stored and those measured now. */
typedef struct pairs {
    const snap *p;
    mos_bg_pair *v;
    long n, cap;
    int failed;
} pairs;

static int pairs_add(pairs *l, int i, int j, double d, double w)
{
    if (l->n == l->cap) {
        long nc = l->cap ? 2 * l->cap : 256;
        mos_bg_pair *g = realloc(l->v, sizeof(*g) * (size_t)nc);
        if (!g) {
            l->failed = 1;
            return TESS_ENOMEM;
        }
        l->v = g;
        l->cap = nc;
    }
    l->v[l->n++] = (mos_bg_pair){i, j, d, w};
    return 0;
}

static void stored_pair(void *cls, const char *a, const char *b, double n, double diff)
{
    pairs *l = cls;
    int i = snap_index(l->p, a), j = snap_index(l->p, b);
    if (i >= 0 && j >= 0 && i < j)
        pairs_add(l, i, j, isfinite(diff) ? diff : 0.0, isfinite(diff) && n > 0 ? n : 0.0);
}

static int cmp_pair(const void *x, const void *y)
{
    const mos_bg_pair *a = x, *b = y;
    return a->i != b->i ? (a->i > b->i) - (a->i < b->i) : (a->j > b->j) - (a->j < b->j);
}

/* Measures the level of a - b on a's pixels: *d and *n (0 when they share fewer than 3
 * usable pixels, or a member is not measurable).  Returns 0 or TESS_ENOMEM / TESS_EIO. */
static int measure(colset *s, collection *c, const char *ra, const char *rb, double *d,
                   double *n)
{
    *d = NAN;
    *n = 0.0;
    char err[256] = "";
    const dataset *da = NULL, *db = NULL;
    int rc = colmembers_get(s, c, ra, &da, err, sizeof(err));
    if (rc == 0)
        rc = colmembers_get(s, c, rb, &db, err, sizeof(err));
    if (rc) {
        if (da)
            colmembers_release(s, da);
        /* a member gone or unreadable since the snapshot: the next scan sees it */
        return rc == TESS_ENOMEM ? rc : 0;
    }
    double *pa = NULL, *pb = NULL, *out = NULL, *diff = NULL;
    float *fp = NULL;
    size_t na = (size_t)da->nx * (size_t)da->ny, nb = (size_t)db->nx * (size_t)db->ny;
    if (!da->cel || !db->cel || na > (size_t)COLBG_MAX_PIXELS || nb > (size_t)COLBG_MAX_PIXELS)
        goto done;
    pa = malloc(sizeof(double) * na);
    pb = malloc(sizeof(double) * nb);
    out = malloc(sizeof(double) * na);
    fp = malloc(sizeof(float) * na);
    long step = (long)ceil(sqrt((double)na / (double)COLBG_FIT_POINTS));
    step = step < 1 ? 1 : step;
    size_t maxp = (size_t)((da->nx + step - 1) / step) * (size_t)((da->ny + step - 1) / step);
    diff = malloc(sizeof(double) * maxp);
    if (!pa || !pb || !out || !fp || !diff) {
        rc = TESS_ENOMEM;
        goto done;
    }
    if (dataset_read_region(da, 0, 0, 0, da->nx, da->ny, pa, err, sizeof(err)) ||
        dataset_read_region(db, 0, 0, 0, db->nx, db->ny, pb, err, sizeof(err)))
        goto done;   /* unreadable now: no constraint (the rescan lists its reason) */
    rp_cube in = {pb, RP_F64, db->nx, db->ny, 1}, dst = {out, RP_F64, da->nx, da->ny, 1};
    rp_options o;
    rp_options_init(&o);
    o.threads = 1;   /* background work: one core */
    long fin = rp_reproject(db->cel, &in, da->cel, &dst, fp, &o, err, sizeof(err));
    if (fin == TESS_ENOMEM) {
        rc = TESS_ENOMEM;
        goto done;
    }
    atomic_fetch_add(&pairs_measured, 1);
    long k = 0;
    for (long y = 0; fin > 0 && y < da->ny; y += step)
        for (long x = 0; x < da->nx; x += step) {
            size_t q = (size_t)y * (size_t)da->nx + (size_t)x;
            if (fp[q] >= COLBG_MIN_WEIGHT && isfinite(out[q]) && isfinite(pa[q]))
                diff[k++] = pa[q] - out[q];
        }
    if (k >= 3 && (rc = mos_bg_fit_level(k, diff, d, n)) != 0)
        goto done;
    if (!(*n > 0.0) || !isfinite(*d)) {
        *d = NAN;
        *n = 0.0;
    }
done:
    free(pa);
    free(pb);
    free(out);
    free(fp);
    free(diff);
    colmembers_release(s, da);
    colmembers_release(s, db);
    return rc;
}

static int stopping(colset *s)
{
    pthread_mutex_lock(&s->wake_lock);
    int st = s->stop;
    pthread_mutex_unlock(&s->wake_lock);
    return st;
}

static int cmp_dec(const void *x, const void *y, void *ctr)
{
    const double *c = ctr;
    double a = c[3 * *(const int *)x + 1], b = c[3 * *(const int *)y + 1];
    return (a > b) - (a < b);
}

/* Measures every overlapping pair not in l (sorted): members swept in declination, a
 * pair tested when their circles meet, then by their polygons. */
static int measure_missing(colset *s, collection *c, const snap *p, pairs *l)
{
    int *ord = malloc(sizeof(int) * (size_t)(p->n > 0 ? p->n : 1));
    if (!ord)
        return TESS_ENOMEM;
    double rmax = 0.0;
    for (int i = 0; i < p->n; i++) {
        ord[i] = i;
        rmax = fmax(rmax, p->ctr[3 * i + 2]);
    }
    qsort_r(ord, (size_t)p->n, sizeof(int), cmp_dec, p->ctr);
    long known = l->n;
    int rc = 0;
    for (int u = 0; u < p->n && !rc; u++) {
        int a = ord[u];
        const double *ca = p->ctr + 3 * a;
        for (int v = u + 1; v < p->n && !rc; v++) {
            int b = ord[v];
            const double *cb = p->ctr + 3 * b;
            if (cb[1] - ca[1] > ca[2] + rmax)
                break;
            if (col_distance(ca[0], ca[1], cb[0], cb[1]) > ca[2] + cb[2] ||
                !col_overlaps_polygon(p->poly + 8 * (size_t)a, 4, p->poly + 8 * (size_t)b, 4))
                continue;
            mos_bg_pair key = {a < b ? a : b, a < b ? b : a, 0, 0};
            if (known > 0 && bsearch(&key, l->v, (size_t)known, sizeof(*l->v), cmp_pair))
                continue;
            if (stopping(s)) {
                rc = TESS_ECANCELED;
                break;
            }
            double d, n;
            if ((rc = measure(s, c, p->rel[key.i], p->rel[key.j], &d, &n)))
                break;
            if (colindex_bg_put_pair(s->index, c->name, p->rel[key.i], p->rel[key.j], n, d))
                rc = TESS_EIO;
            else
                rc = pairs_add(l, key.i, key.j, isfinite(d) ? d : 0.0, n);
        }
    }
    free(ord);
    return rc;
}

int colbg_update(colset *s, collection *c)
{
    if (!c->match_background)
        return 0;
    pthread_mutex_lock(&s->scan_lock);
    snap p;
    int rc = snap_take(c, &p);
    if (rc) {
        pthread_mutex_unlock(&s->scan_lock);
        return rc;
    }
    pairs l = {&p, NULL, 0, 0, 0};
    double *x = malloc(sizeof(double) * (size_t)(p.n > 0 ? p.n : 1));
    if (!x)
        rc = TESS_ENOMEM;
    if (!rc && colindex_bg_pairs(s->index, c->name, stored_pair, &l) < 0)
        rc = TESS_EIO;
    if (!rc && l.failed)
        rc = TESS_ENOMEM;
    if (!rc) {
        if (l.n > 1)   /* qsort(NULL, 0, ...) is undefined behaviour (UBSan) */
            qsort(l.v, (size_t)l.n, sizeof(*l.v), cmp_pair);
        rc = measure_missing(s, c, &p, &l);
    }
    if (!rc)
        rc = mos_bg_solve_levels(p.n, l.v, l.n, x);
    if (!rc) {
        int began = colindex_begin(s->index) == 0;
        for (int i = 0; i < p.n && !rc; i++)
            if (colindex_bg_set(s->index, c->name, p.rel[i], x[i]))
                rc = TESS_EIO;
        if (began && colindex_commit(s->index))
            rc = TESS_EIO;
    }
    if (!rc) {
        pthread_rwlock_wrlock(&c->lock);
        if (c->version == p.version) {
            for (int i = 0; i < c->n; i++) {
                int k = snap_index(&p, c->m[i].relpath);
                c->m[i].bg_offset = k >= 0 ? x[k] : NAN;
            }
            c->bg_version = c->version;
            c->bg_generation++;
        }
        pthread_rwlock_unlock(&c->lock);
    }
    pthread_mutex_unlock(&s->scan_lock);
    free(x);
    free(l.v);
    snap_free(&p);
    return rc;
}
