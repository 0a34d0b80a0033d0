/* Mosaic background matching: overlap fits between reprojected inputs and the global solve of each input's plane correction (the stages overlaps and solve). */
#include "engine/mosaic/mosaic_int.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/base/byteswap.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ */
/* Stage: overlaps                                                                        */

/* Normalised coordinates of output pixels. */
static void norm_params(const mosaic *m, double *cx, double *cy, double *sc)
{
    *cx = 0.5 * (double)(m->nx - 1);
    *cy = 0.5 * (double)(m->ny - 1);
    *sc = 0.5 * (double)(m->nx > m->ny ? m->nx : m->ny);
}

/* The k-th smallest of a[0..n) (a reordered). */
static double select_k(double *a, long n, long k)
{
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        double p = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] < p)
                i++;
            while (a[j] > p)
                j--;
            if (i <= j) {
                double t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return a[k];
    }
    return a[k];
}

/* Solves the np x np symmetric system a x = b (a overwritten) by Cholesky; returns 0, or
 * -1 when a is not positive definite. */
static int chol_solve(double *a, double *b, long np)
{
    for (long j = 0; j < np; j++) {
        double d = a[j * np + j];
        for (long k = 0; k < j; k++)
            d -= a[j * np + k] * a[j * np + k];
        if (!(d > 0.0))
            return -1;
        d = sqrt(d);
        a[j * np + j] = d;
        for (long i = j + 1; i < np; i++) {
            double s = a[i * np + j];
            for (long k = 0; k < j; k++)
                s -= a[i * np + k] * a[j * np + k];
            a[i * np + j] = s / d;
        }
    }
    for (long i = 0; i < np; i++) {
        double s = b[i];
        for (long k = 0; k < i; k++)
            s -= a[i * np + k] * b[k];
        b[i] = s / a[i * np + i];
    }
    for (long i = np - 1; i >= 0; i--) {
        double s = b[i];
        for (long k = i + 1; k < np; k++)
            s -= a[k * np + i] * b[k];
        b[i] = s / a[i * np + i];
    }
    return 0;
}

/* Fits d = p0 + p1 u + p2 v (np = 3) or d = p0 (np = 1) to the points with keep[i] set
 * (u and v may be NULL for np = 1: zeros).
 * Returns the number of parameters fitted (np, or 1 when the plane is degenerate), 0 when
 * no point is kept; p gets the fit; moments into rec. */
static int fit_points(long n, const double *u, const double *v, const double *d,
                      const unsigned char *keep, int np, double p[3], ov_rec *rec)
{
    double mm[6] = { 0 }, r[3] = { 0 };
    for (long i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        double ui = u ? u[i] : 0.0, vi = v ? v[i] : 0.0;
        mm[0] += 1.0;
        mm[1] += ui;
        mm[2] += vi;
        mm[3] += ui * ui;
        mm[4] += ui * vi;
        mm[5] += vi * vi;
        r[0] += d[i];
        r[1] += ui * d[i];
        r[2] += vi * d[i];
    }
    p[0] = p[1] = p[2] = 0.0;
    if (mm[0] < 1.0)
        return 0;
    int used = 1;
    if (np == 3 && mm[0] >= 10.0) {
        double a[9] = { mm[0], mm[1], mm[2], mm[1], mm[3], mm[4], mm[2], mm[4], mm[5] };
        double b[3] = { r[0], r[1], r[2] };
        /* Degenerate (points on a line): fall back to a level. */
        double det = mm[0] * (mm[3] * mm[5] - mm[4] * mm[4]) - mm[1] * (mm[1] * mm[5] - mm[4] * mm[2])
                     + mm[2] * (mm[1] * mm[4] - mm[3] * mm[2]);
        if (det > 1e-12 * mm[0] * mm[0] * mm[0] && chol_solve(a, b, 3) == 0) {
            p[0] = b[0];
            p[1] = b[1];
            p[2] = b[2];
            used = 3;
        }
    }
    if (used == 1)
        p[0] = r[0] / mm[0];
    memcpy(rec->m, mm, sizeof mm);
    memcpy(rec->r, r, sizeof r);
    rec->n = mm[0];
    if (used == 1) {
        /* Only the level is constrained by this pair. */
        rec->m[1] = rec->m[2] = rec->m[3] = rec->m[4] = rec->m[5] = 0.0;
        rec->r[1] = rec->r[2] = 0.0;
    }
    return used;
}

/* fit_points on the n points (keep[] set on entry), then three passes of 3-sigma clipping
 * (sigma = 1.4826 times the median absolute residual) refitting on the points kept;
 * res and tmp (n doubles each) are scratch.  Returns fit_points's count. */
static int fit_clipped(long n, const double *u, const double *v, const double *d,
                       unsigned char *keep, double *res, double *tmp, int np, double p[3],
                       ov_rec *rec)
{
    int used = fit_points(n, u, v, d, keep, np, p, rec);
    for (int pass = 0; pass < 3 && used > 0; pass++) {
        for (long q = 0; q < n; q++) {
            double e = d[q] - p[0] - (u ? p[1] * u[q] : 0.0) - (v ? p[2] * v[q] : 0.0);
            res[q] = fabs(e);
        }
        /* sigma from the median absolute residual */
        memcpy(tmp, res, sizeof(double) * (size_t)n);
        double mad = select_k(tmp, n, n / 2);
        double lim = 3.0 * 1.4826 * mad;
        for (long q = 0; q < n; q++)
            keep[q] = res[q] <= lim;
        used = fit_points(n, u, v, d, keep, np, p, rec);
    }
    return used;
}

int mos_bg_fit_level(long n, const double *d, double *level, double *kept)
{
    *level = NAN;
    *kept = 0.0;
    if (n < 1)
        return 0;
    unsigned char *keep = malloc((size_t)n);
    double *res = malloc(sizeof(double) * (size_t)n), *tmp = malloc(sizeof(double) * (size_t)n);
    int rc = keep && res && tmp ? 0 : TESS_ENOMEM;
    if (rc == 0) {
        memset(keep, 1, (size_t)n);
        double p[3];
        ov_rec rec = { 0 };
        if (fit_clipped(n, NULL, NULL, d, keep, res, tmp, 1, p, &rec) > 0) {
            *level = p[0];
            *kept = rec.n;
        }
    }
    free(keep);
    free(res);
    free(tmp);
    return rc;
}

/* The overlap of the boxes of inputs a and b: [x0, x1) x [y0, y1) in output pixels, and
 * the sampling step that keeps it to about FIT_POINTS samples; 0 when they do not meet. */
static int overlap_of(const src *a, const src *b, long *x0, long *x1, long *y0, long *y1,
                      long *step)
{
    if (a->box[2] == 0 || b->box[2] == 0)
        return 0;
    *x0 = a->box[0] > b->box[0] ? a->box[0] : b->box[0];
    *y0 = a->box[1] > b->box[1] ? a->box[1] : b->box[1];
    *x1 = a->box[0] + a->box[2] < b->box[0] + b->box[2] ? a->box[0] + a->box[2]
                                                         : b->box[0] + b->box[2];
    *y1 = a->box[1] + a->box[3] < b->box[1] + b->box[3] ? a->box[1] + a->box[3]
                                                         : b->box[1] + b->box[3];
    if (*x1 <= *x0 || *y1 <= *y0)
        return 0;
    double area = (double)(*x1 - *x0) * (double)(*y1 - *y0);
    *step = (long)ceil(sqrt(area / (double)FIT_POINTS));
    if (*step < 1)
        *step = 1;
    return 1;
}

int mos_run_overlaps(mosaic *m, long i, const volatile int *cancel, char *err, size_t errlen)
{
    ov_rec *recs = calloc((size_t)m->n, sizeof(ov_rec));
    int nrec = 0, rc = 0;
    double cx, cy, sc;
    norm_params(m, &cx, &cy, &sc);
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    if (!recs) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    const src *a = &m->in[i];
    /* The buffers, for the largest overlap of this input, made once and reused for every
     * pair (fresh ones for each pair were faulted in and zeroed each time). */
    size_t cap_in = 0, cap_p = 0;
    for (int j = (int)i + 1; j < m->n; j++) {
        long x0, x1, y0, y1, step;
        if (!overlap_of(a, &m->in[j], &x0, &x1, &y0, &y1, &step))
            continue;
        long cw = x1 - x0, nr = (y1 - y0 + step - 1) / step, ncol = (cw + step - 1) / step;
        if ((size_t)cw * (size_t)nr > cap_in)
            cap_in = (size_t)cw * (size_t)nr;
        if ((size_t)ncol * (size_t)nr > cap_p)
            cap_p = (size_t)ncol * (size_t)nr;
    }
    float *va = NULL, *wa = NULL, *vb = NULL, *wb = NULL;
    double *u = NULL, *v = NULL, *d = NULL, *res = NULL, *tmp = NULL;
    unsigned char *keep = NULL;
    if (cap_in > 0) {
        va = malloc(sizeof(float) * cap_in);
        wa = malloc(sizeof(float) * cap_in);
        vb = malloc(sizeof(float) * cap_in);
        wb = malloc(sizeof(float) * cap_in);
        u = malloc(sizeof(double) * cap_p);
        v = malloc(sizeof(double) * cap_p);
        d = malloc(sizeof(double) * cap_p);
        res = malloc(sizeof(double) * cap_p);
        tmp = malloc(sizeof(double) * cap_p);
        keep = malloc(cap_p);
        if (!va || !wa || !vb || !wb || !u || !v || !d || !res || !tmp || !keep) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        }
    }
    for (int j = (int)i + 1; j < m->n && rc == 0; j++) {
        if (mos_canceled(cancel)) {
            rc = TESS_ECANCELED;
            break;
        }
        long x0, x1, y0, y1, step;
        if (!overlap_of(a, &m->in[j], &x0, &x1, &y0, &y1, &step))
            continue;
        long cw = x1 - x0, nr = (y1 - y0 + step - 1) / step;
        if (rc == 0)
            rc = mos_read_rows(m, (int)i, x0, x1, y0, y1, step, va, wa, err, errlen);
        if (rc == 0)
            rc = mos_read_rows(m, j, x0, x1, y0, y1, step, vb, wb, err, errlen);
        long n = 0;
        for (long r = 0; rc == 0 && r < nr; r++) {
            double y = (double)(y0 + r * step);
            for (long c = 0; c < cw; c += step) {
                size_t q = (size_t)r * (size_t)cw + (size_t)c;
                if (!(wa[q] >= FIT_MIN_WEIGHT) || !(wb[q] >= FIT_MIN_WEIGHT) || !isfinite(va[q])
                    || !isfinite(vb[q]))
                    continue;
                u[n] = ((double)(x0 + c) - cx) / sc;
                v[n] = (y - cy) / sc;
                d[n] = ((double)va[q] - a->offset) - ((double)vb[q] - m->in[j].offset);
                keep[n] = 1;
                n++;
            }
        }
        if (rc == 0 && n >= 3) {
            double p[3];
            ov_rec rec = { 0 };
            int used = fit_clipped(n, u, v, d, keep, res, tmp, np, p, &rec);
            if (used > 0) {
                rec.j = j;
                recs[nrec++] = rec;
            }
        }
    }
    free(va);
    free(wa);
    free(vb);
    free(wb);
    free(u);
    free(v);
    free(d);
    free(res);
    free(tmp);
    free(keep);
    if (rc == 0) {
        char path[PATH_MAX];
        mos_wpath(m, path, sizeof path, "ov_", i, ".bin");
        size_t len = sizeof(int32_t) * 2 + sizeof(ov_rec) * (size_t)nrec;
        char *buf = calloc(1, len);
        if (!buf) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        } else {
            int32_t hdr[2] = { nrec, np };
            memcpy(buf, hdr, sizeof hdr);
            memcpy(buf + sizeof hdr, recs, sizeof(ov_rec) * (size_t)nrec);
            rc = mos_write_small(path, buf, len, err, errlen);
            free(buf);
        }
    }
    free(recs);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Stage: solve                                                                           */

static int find_root(int *parent, int i)
{
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

int mos_run_solve(mosaic *m, char *err, size_t errlen)
{
    int np = m->bg == MOS_BG_PLANE ? 3 : 1;
    long nn = (long)m->n * np;
    double *a = calloc((size_t)nn * (size_t)nn, sizeof(double));
    double *b = calloc((size_t)nn, sizeof(double));
    int *parent = malloc(sizeof(int) * (size_t)m->n);
    double *corr = calloc((size_t)m->n * 3, sizeof(double));
    int rc = 0;
    if (!a || !b || !parent || !corr) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto done;
    }
    for (int k = 0; k < m->n; k++)
        parent[k] = k;
    for (int i = 0; i < m->n; i++) {
        char path[PATH_MAX], *data = NULL;
        size_t len = 0;
        mos_wpath(m, path, sizeof path, "ov_", i, ".bin");
        if (mos_read_small(path, &data, &len) != 0 || len < 2 * sizeof(int32_t)) {
            free(data);
            rc = TESS_EIO;
            tess_seterr(err, errlen, "cannot read '%s'", path);
            goto done;
        }
        int32_t hdr[2];
        memcpy(hdr, data, sizeof hdr);
        if (hdr[0] < 0 || len != sizeof hdr + sizeof(ov_rec) * (size_t)hdr[0] || hdr[1] != np) {
            free(data);
            rc = TESS_EIO;
            tess_seterr(err, errlen, "'%s' is damaged", path);
            goto done;
        }
        for (int q = 0; q < hdr[0]; q++) {
            ov_rec rec;
            memcpy(&rec, data + sizeof hdr + sizeof(ov_rec) * (size_t)q, sizeof rec);
            int j = rec.j;
            if (j <= i || j >= m->n || !(rec.n > 0))
                continue;
            /* full symmetric 3x3 (or 1x1) moment matrix */
            double mm[3][3] = { { rec.m[0], rec.m[1], rec.m[2] },
                                { rec.m[1], rec.m[3], rec.m[4] },
                                { rec.m[2], rec.m[4], rec.m[5] } };
            for (int r = 0; r < np; r++) {
                for (int c = 0; c < np; c++) {
                    a[(i * np + r) * nn + i * np + c] += mm[r][c];
                    a[(j * np + r) * nn + j * np + c] += mm[r][c];
                    a[(i * np + r) * nn + j * np + c] -= mm[r][c];
                    a[(j * np + r) * nn + i * np + c] -= mm[r][c];
                }
                b[i * np + r] += rec.r[r];
                b[j * np + r] -= rec.r[r];
            }
            int ri = find_root(parent, i), rj = find_root(parent, j);
            if (ri != rj)
                parent[ri < rj ? rj : ri] = ri < rj ? ri : rj;
        }
        free(data);
    }
    /* A tiny ridge keeps the system definite; the minimum-norm solution it approaches
     * has zero mean over each connected group, enforced exactly below. */
    double dmax = 0.0;
    for (long q = 0; q < nn; q++)
        dmax = fmax(dmax, a[q * nn + q]);
    double ridge = dmax > 0.0 ? 1e-10 * dmax : 1.0;
    for (long q = 0; q < nn; q++)
        a[q * nn + q] += ridge;
    if (chol_solve(a, b, nn) != 0) {
        rc = TESS_EINVAL;
        tess_seterr(err, errlen, "the background system is not solvable");
        goto done;
    }
    for (int g = 0; g < m->n; g++) {
        if (find_root(parent, g) != g)
            continue;
        double mean[3] = { 0, 0, 0 };
        int cnt = 0;
        for (int k = 0; k < m->n; k++)
            if (find_root(parent, k) == g) {
                cnt++;
                for (int r = 0; r < np; r++)
                    mean[r] += b[k * np + r];
            }
        for (int k = 0; k < m->n; k++)
            if (find_root(parent, k) == g)
                for (int r = 0; r < np; r++)
                    b[k * np + r] -= mean[r] / cnt;
    }
    double cx, cy, sc;
    norm_params(m, &cx, &cy, &sc);
    for (int k = 0; k < m->n; k++) {
        double p0 = b[k * np], p1 = np == 3 ? b[k * np + 1] : 0.0, p2 = np == 3 ? b[k * np + 2] : 0.0;
        if (!isfinite(p0) || !isfinite(p1) || !isfinite(p2))
            p0 = p1 = p2 = 0.0;
        corr[3 * k] = p0 - p1 * cx / sc - p2 * cy / sc;
        corr[3 * k + 1] = p1 / sc;
        corr[3 * k + 2] = p2 / sc;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bg.bin", m->workdir);
    rc = mos_write_small(path, corr, sizeof(double) * 3 * (size_t)m->n, err, errlen);
done:
    free(a);
    free(b);
    free(parent);
    free(corr);
    return rc;
}

/* Loads bg.bin once (zeros without matching). */
int mos_load_corr(mosaic *m, char *err, size_t errlen)
{
    pthread_mutex_lock(&m->lock);
    int rc = 0;
    if (!m->corr_loaded) {
        double *c = calloc((size_t)m->n * 3, sizeof(double));
        if (!c) {
            rc = TESS_ENOMEM;
            tess_seterr(err, errlen, "out of memory");
        } else if (m->bg != MOS_BG_NONE) {
            char path[PATH_MAX], *data = NULL;
            size_t len = 0;
            snprintf(path, sizeof path, "%s/bg.bin", m->workdir);
            if (mos_read_small(path, &data, &len) != 0 || len != sizeof(double) * 3 * (size_t)m->n) {
                rc = TESS_EIO;
                tess_seterr(err, errlen, "cannot read the background corrections '%s'", path);
            } else {
                memcpy(c, data, len);
            }
            free(data);
        }
        if (rc == 0) {
            m->corr = c;
            m->corr_loaded = 1;
        } else {
            free(c);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int mos_correction(mosaic *m, int k, double c[3])
{
    char err[64];
    c[0] = c[1] = c[2] = 0.0;
    if (k < 0 || k >= m->n)
        return TESS_EINVAL;
    int rc = mos_load_corr(m, err, sizeof err);
    if (rc == 0)
        memcpy(c, m->corr + 3 * k, 3 * sizeof(double));
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Levels from many pairs (collections): a sparse solve of the same least squares        */

int mos_bg_solve_levels(int n, const mos_bg_pair *pairs, long npairs, double *x)
{
    size_t len = (size_t)n + 1;
    double *diag = calloc(len, sizeof(double)), *b = calloc(len, sizeof(double));
    double *r = malloc(sizeof(double) * len), *z = malloc(sizeof(double) * len);
    double *p = malloc(sizeof(double) * len), *q = malloc(sizeof(double) * len);
    int *parent = malloc(sizeof(int) * len);
    int rc = 0;
    if (!diag || !b || !r || !z || !p || !q || !parent) {
        rc = TESS_ENOMEM;
        goto done;
    }
    for (int k = 0; k < n; k++) {
        parent[k] = k;
        x[k] = 0.0;
    }
    /* Normal equations of sum w (x_i - x_j - d)^2: the weighted graph Laplacian L x = b. */
    for (long e = 0; e < npairs; e++) {
        const mos_bg_pair *pr = &pairs[e];
        if (pr->i < 0 || pr->j < 0 || pr->i >= n || pr->j >= n || pr->i == pr->j ||
            !(pr->w > 0.0) || !isfinite(pr->d))
            continue;
        diag[pr->i] += pr->w;
        diag[pr->j] += pr->w;
        b[pr->i] += pr->w * pr->d;
        b[pr->j] -= pr->w * pr->d;
        int ri = find_root(parent, pr->i), rj = find_root(parent, pr->j);
        if (ri != rj)
            parent[ri < rj ? rj : ri] = ri < rj ? ri : rj;
    }
    /* Conjugate gradients with the diagonal as preconditioner, from x = 0: b sums to zero
     * over each connected group, so the iterates stay in L's range and approach the
     * solution of zero mean in each group (enforced exactly below). */
    double bn = 0.0;
    for (int k = 0; k < n; k++) {
        r[k] = b[k];
        z[k] = diag[k] > 0.0 ? r[k] / diag[k] : 0.0;
        p[k] = z[k];
        bn += b[k] * b[k];
    }
    double rz = 0.0;
    for (int k = 0; k < n; k++)
        rz += r[k] * z[k];
    long maxit = 10L * n + 100;
    for (long it = 0; it < maxit && bn > 0.0; it++) {
        double rn = 0.0;
        for (int k = 0; k < n; k++)
            rn += r[k] * r[k];
        if (rn <= 1e-30 * bn)
            break;
        for (int k = 0; k < n; k++)
            q[k] = diag[k] * p[k];
        for (long e = 0; e < npairs; e++) {
            const mos_bg_pair *pr = &pairs[e];
            if (pr->i < 0 || pr->j < 0 || pr->i >= n || pr->j >= n || pr->i == pr->j ||
                !(pr->w > 0.0) || !isfinite(pr->d))
                continue;
            q[pr->i] -= pr->w * p[pr->j];
            q[pr->j] -= pr->w * p[pr->i];
        }
        double pq = 0.0;
        for (int k = 0; k < n; k++)
            pq += p[k] * q[k];
        if (!(pq > 0.0))
            break;
        double alpha = rz / pq, rz2 = 0.0;
        for (int k = 0; k < n; k++) {
            x[k] += alpha * p[k];
            r[k] -= alpha * q[k];
            z[k] = diag[k] > 0.0 ? r[k] / diag[k] : 0.0;
            rz2 += r[k] * z[k];
        }
        double beta = rz2 / rz;
        rz = rz2;
        for (int k = 0; k < n; k++)
            p[k] = z[k] + beta * p[k];
    }
    /* The gauge: zero mean over each connected group (r and z reused as sums and counts). */
    for (int k = 0; k < n; k++)
        r[k] = z[k] = 0.0;
    for (int k = 0; k < n; k++) {
        int g = find_root(parent, k);
        r[g] += x[k];
        z[g] += 1.0;
    }
    for (int k = 0; k < n; k++) {
        int g = find_root(parent, k);
        x[k] -= r[g] / z[g];
        if (!isfinite(x[k]))
            x[k] = 0.0;
    }
done:
    free(diag);
    free(b);
    free(r);
    free(z);
    free(p);
    free(q);
    free(parent);
    return rc;
}
