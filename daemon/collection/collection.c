/* Collections: the scan of a collection's folder by file identity, the reading of a
 * member's header into the index, the rescan thread, and the spherical geometry of the
 * discovery queries. */
#include "daemon/collection/collection.h"
#include "daemon/collection/colbackground.h"
#include "engine/base/fileio.h"
#include "daemon/collection/colmembers.h"
#include "daemon/catalog.h"
#include "engine/base/error.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/hips/healpix.h"
#include "engine/sky/skywcs.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEG (M_PI / 180.0)

static atomic_ullong headers_read;

unsigned long long colset_headers_read(void)
{
    return atomic_load(&headers_read);
}

/* ---- geometry ------------------------------------------------------------------------ */

static void vec(double ra, double dec, double v[3])
{
    v[0] = cos(dec * DEG) * cos(ra * DEG);
    v[1] = cos(dec * DEG) * sin(ra * DEG);
    v[2] = sin(dec * DEG);
}

static double dot(const double a[3], const double b[3])
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross(const double a[3], const double b[3], double c[3])
{
    c[0] = a[1] * b[2] - a[2] * b[1];
    c[1] = a[2] * b[0] - a[0] * b[2];
    c[2] = a[0] * b[1] - a[1] * b[0];
}

static double vangle(const double a[3], const double b[3])
{
    double c[3];
    cross(a, b, c);
    return atan2(sqrt(dot(c, c)), dot(a, b)) / DEG;
}

double col_distance(double ra1, double dec1, double ra2, double dec2)
{
    double a[3], b[3];
    vec(ra1, dec1, a);
    vec(ra2, dec2, b);
    return vangle(a, b);
}

/* The gnomonic projection about unit vector c: east and north basis. */
typedef struct tangent {
    double c[3], e[3], n[3];
} tangent;

static void tangent_at(const double c[3], tangent *t)
{
    memcpy(t->c, c, sizeof(t->c));
    double z[3] = {0, 0, 1};
    cross(z, c, t->e);
    double len = sqrt(dot(t->e, t->e));
    if (len < 1e-12) {   /* at a pole: any east */
        t->e[0] = 0;
        t->e[1] = 1;
        t->e[2] = 0;
        len = 1;
    }
    for (int i = 0; i < 3; i++)
        t->e[i] /= len;
    cross(c, t->e, t->n);
}

/* Projects (ra, dec); 0 when the point lies on the far hemisphere. */
static int project(const tangent *t, double ra, double dec, double *x, double *y)
{
    double v[3];
    vec(ra, dec, v);
    double w = dot(v, t->c);
    if (w < 1e-6)
        return 0;
    *x = dot(v, t->e) / w;
    *y = dot(v, t->n) / w;
    return 1;
}

/* Even-odd rule: whether (px, py) lies in the planar polygon. */
static int in_planar(const double *xy, int n, double px, double py)
{
    int in = 0;
    for (int i = 0, j = n - 1; i < n; j = i++) {
        double xi = xy[2 * i], yi = xy[2 * i + 1], xj = xy[2 * j], yj = xy[2 * j + 1];
        if ((yi > py) != (yj > py) && px < (xj - xi) * (py - yi) / (yj - yi) + xi)
            in = !in;
    }
    return in;
}

static double orient(double ax, double ay, double bx, double by, double cx, double cy)
{
    return (bx - ax) * (cy - ay) - (by - ay) * (cx - ax);
}

static int segments_cross(const double *p, const double *q, const double *r, const double *s)
{
    double d1 = orient(r[0], r[1], s[0], s[1], p[0], p[1]);
    double d2 = orient(r[0], r[1], s[0], s[1], q[0], q[1]);
    double d3 = orient(p[0], p[1], q[0], q[1], r[0], r[1]);
    double d4 = orient(p[0], p[1], q[0], q[1], s[0], s[1]);
    return ((d1 > 0) != (d2 > 0)) && ((d3 > 0) != (d4 > 0));
}

/* The centre (normalised vector sum) of a polygon. */
static void poly_centre(const double *p, int n, double c[3])
{
    c[0] = c[1] = c[2] = 0;
    for (int i = 0; i < n; i++) {
        double v[3];
        vec(p[2 * i], p[2 * i + 1], v);
        for (int k = 0; k < 3; k++)
            c[k] += v[k];
    }
    double len = sqrt(dot(c, c));
    for (int k = 0; k < 3; k++)
        c[k] = len > 0 ? c[k] / len : (k == 2);
}

#define COL_MAX_POLY 64

int col_overlaps_polygon(const double *a, int na, const double *b, int nb)
{
    if (na < 3 || nb < 3 || na > COL_MAX_POLY || nb > COL_MAX_POLY)
        return 0;
    double c[3];
    poly_centre(b, nb, c);
    tangent t;
    tangent_at(c, &t);
    double pa[2 * COL_MAX_POLY], pb[2 * COL_MAX_POLY];
    for (int i = 0; i < na; i++)
        if (!project(&t, a[2 * i], a[2 * i + 1], &pa[2 * i], &pa[2 * i + 1]))
            return 0;   /* a reaches the far side of b's centre: too far to meet it */
    for (int i = 0; i < nb; i++)
        if (!project(&t, b[2 * i], b[2 * i + 1], &pb[2 * i], &pb[2 * i + 1]))
            return 0;
    /* Great circles are straight lines in a gnomonic projection: plane geometry. */
    for (int i = 0; i < na; i++)
        if (in_planar(pb, nb, pa[2 * i], pa[2 * i + 1]))
            return 1;
    for (int i = 0; i < nb; i++)
        if (in_planar(pa, na, pb[2 * i], pb[2 * i + 1]))
            return 1;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (segments_cross(&pa[2 * i], &pa[2 * ((i + 1) % na)], &pb[2 * j],
                               &pb[2 * ((j + 1) % nb)]))
                return 1;
    return 0;
}

/* Distance (degrees) from p to the great-circle arc a-b. */
static double arc_distance(const double p[3], const double a[3], const double b[3])
{
    double n[3];
    cross(a, b, n);
    double len = sqrt(dot(n, n));
    if (len > 1e-15) {
        for (int k = 0; k < 3; k++)
            n[k] /= len;
        double pn = dot(p, n);
        double q[3] = {p[0] - pn * n[0], p[1] - pn * n[1], p[2] - pn * n[2]};
        double aq[3], qb[3];
        cross(a, q, aq);
        cross(q, b, qb);
        if (dot(aq, n) >= 0 && dot(qb, n) >= 0)
            return asin(fabs(pn) > 1 ? 1 : fabs(pn)) / DEG;
    }
    double da = vangle(p, a), db = vangle(p, b);
    return da < db ? da : db;
}

int col_overlaps_circle(const double *poly, int npts, double ra, double dec, double r)
{
    if (npts < 3 || npts > COL_MAX_POLY)
        return 0;
    double p[3];
    vec(ra, dec, p);
    tangent t;
    tangent_at(p, &t);
    double xy[2 * COL_MAX_POLY];
    int all = 1;
    for (int i = 0; i < npts && all; i++)
        all = project(&t, poly[2 * i], poly[2 * i + 1], &xy[2 * i], &xy[2 * i + 1]);
    if (all && in_planar(xy, npts, 0.0, 0.0))
        return 1;
    for (int i = 0; i < npts; i++) {
        double a[3], b[3];
        int j = (i + 1) % npts;
        vec(poly[2 * i], poly[2 * i + 1], a);
        vec(poly[2 * j], poly[2 * j + 1], b);
        if (arc_distance(p, a, b) <= r)
            return 1;
    }
    return 0;
}

/* ---- headers ------------------------------------------------------------------------- */

/* "YYYY-MM-DD[Thh:mm:ss[.s]]" as MJD (UTC taken as is), NaN when not a date. */
static double date_to_mjd(const char *s)
{
    int y, mo, d, h = 0, mi = 0;
    double sec = 0;
    int n = sscanf(s, "%d-%d-%dT%d:%d:%lf", &y, &mo, &d, &h, &mi, &sec);
    if (n < 3 || mo < 1 || mo > 12 || d < 1 || d > 31)
        return NAN;
    /* Days from 1970-01-01 of the proleptic Gregorian date (civil calendar arithmetic). */
    y -= mo <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153L * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    long days = era * 146097 + doe - 719468;
    return (double)days + 40587.0 + (h + mi / 60.0 + sec / 3600.0) / 24.0;
}

static double card_real(const char *cards, int n, const char *key)
{
    char v[72];
    if (!fitscard_get(cards, n, key, v, sizeof(v)) || !*v)
        return NAN;
    char *end;
    for (char *q = v; *q; q++)
        if (*q == 'D' || *q == 'd')
            *q = 'E';
    double x = strtod(v, &end);
    return end != v && isfinite(x) ? x : NAN;
}

static char *fmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_error(const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return strdup(msg);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The image's HEALPix coverage as NUNIQ cells: the cells of the points of a grid over the
 * image and a margin of two steps around it, the step an eighth of a cell (at most
 * COL_COVER_GRID points a side: a coarser order for images of very many cells), so that
 * a cell the image reaches holds a grid point; much cheaper than testing each candidate
 * tile (hips_footprint_cells), a few hundred transforms for a small image.  Nothing on
 * failure (no memory): the image is then found by the in-memory geometry only. */
#define COL_COVER_GRID 512
static void coverage_cells(skywcs *cel, long nx, long ny, double pixscale, int64_t **cells,
                           size_t *ncells)
{
    int order = COL_MOC_ORDER;
    double step;
    long gx, gy;
    for (;; order--) {
        step = hips_cell_size(order) / 8.0 / pixscale;   /* pixels */
        gx = (long)ceil((nx + 4 * step) / step) + 1;
        gy = (long)ceil((ny + 4 * step) / step) + 1;
        if ((gx <= COL_COVER_GRID && gy <= COL_COVER_GRID) || order == 0)
            break;
    }
    if (gx > COL_COVER_GRID)
        gx = COL_COVER_GRID;
    if (gy > COL_COVER_GRID)
        gy = COL_COVER_GRID;
    size_t n = (size_t)gx * (size_t)gy;
    double *x = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    double *lon = malloc(n * sizeof(double)), *lat = malloc(n * sizeof(double));
    int64_t *list = malloc(n * sizeof(int64_t));
    if (!x || !y || !lon || !lat || !list)
        goto out;
    double x0 = -0.5 - 2 * step, x1 = nx - 0.5 + 2 * step;
    double y0 = -0.5 - 2 * step, y1 = ny - 0.5 + 2 * step;
    for (long j = 0; j < gy; j++)
        for (long i = 0; i < gx; i++) {
            x[j * gx + i] = x0 + (x1 - x0) * (double)i / (double)(gx - 1);
            y[j * gx + i] = y0 + (y1 - y0) * (double)j / (double)(gy - 1);
        }
    if (skywcs_pix2sky(cel, n, x, y, lon, lat))
        goto out;
    double eq = 0;
    sky_frame f = skywcs_frame(cel, &eq);
    sky_convert(f, eq, SKY_FRAME_ICRS, 0, n, lon, lat);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(lon[i]) && isfinite(lat[i]))
            list[k++] = (4LL << (2 * order)) + hips_ang2pix(order, lon[i], lat[i]);
    qsort(list, k, sizeof(*list), cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || list[u - 1] != list[i])
            list[u++] = list[i];
    *cells = list;
    *ncells = u;
    list = NULL;
out:
    free(x);
    free(y);
    free(lon);
    free(lat);
    free(list);
}

/* Reads the header of `abs` (the member relpath of c) into m, its header text into *wcs
 * and its coverage into *cells.  An unreadable image gets m->error. */
static void read_member(const colset *s, const collection *c, const char *abs, col_member *m,
                        char **wcs, int64_t **cells, size_t *ncells)
{
    *wcs = NULL;
    *cells = NULL;
    *ncells = 0;
    m->ra = m->dec = m->radius = m->pixscale = NAN;
    m->em_min = m->em_max = m->t_min = m->t_max = m->exptime = NAN;
    for (int k = 0; k < 8; k++)
        m->poly[k] = NAN;
    char *real = realpath(abs, NULL);
    if (!real) {
        m->error = fmt_error("cannot resolve %s: %s", m->relpath, strerror(errno));
        return;
    }
    if (!catalog_path_allowed(s->cfg, real)) {
        m->error = fmt_error("%s resolves outside the data roots", m->relpath);
        free(real);
        return;
    }
    fitsimg_info info;
    char err[512];
    atomic_fetch_add(&headers_read, 1);
    if (fitsimg_read_info(real, c->hdu, &info, err, sizeof(err))) {
        /* The reason names the file by its obs_id, not by the server's path. */
        char *at = strstr(err, real);
        unsigned char head[6];
        if (tess_read_prefix(real, head, sizeof head) && memcmp(head, "SIMPLE", 6) != 0 &&
            !(head[0] == 0x1f && head[1] == 0x8b)) {   /* gzip: cfitsio reads it */
            m->error = fmt_error("%s is not a FITS file (it does not begin with SIMPLE)",
                                 m->relpath);
        } else if (at) {
            size_t rl = strlen(real);
            m->error = fmt_error("%.*s%s%s", (int)(at - err), err, m->relpath, at + rl);
        } else {
            m->error = strdup(err);
        }
        free(real);
        return;
    }
    free(real);
    m->nx = info.naxes[0];
    m->ny = info.naxes[1];
    m->nz = info.naxis >= 3 ? info.naxes[2] : 1;
    m->bitpix = info.bitpix;
    char v[72];
    if (fitscard_get(info.header, info.nkeys, "FILTER", v, sizeof(v)))
        snprintf(m->filter, sizeof(m->filter), "%s", v);
    double wl = card_real(info.header, info.nkeys, "WAVELENG");
    double rf = card_real(info.header, info.nkeys, "RESTFRQ");
    if (!isfinite(rf))
        rf = card_real(info.header, info.nkeys, "RESTFREQ");
    if (isfinite(wl) && wl > 0)
        m->em_min = m->em_max = wl;
    else if (isfinite(rf) && rf > 0)
        m->em_min = m->em_max = 299792458.0 / rf;
    m->exptime = card_real(info.header, info.nkeys, "EXPTIME");
    m->t_min = card_real(info.header, info.nkeys, "MJD-OBS");
    if (!isfinite(m->t_min) && fitscard_get(info.header, info.nkeys, "DATE-OBS", v, sizeof(v)))
        m->t_min = date_to_mjd(v);
    if (isfinite(m->t_min))
        m->t_max = m->t_min + (isfinite(m->exptime) && m->exptime > 0 ? m->exptime / 86400.0 : 0);
    skywcs *w = NULL, *cel = NULL;
    err[0] = '\0';
    if (skywcs_parse(info.header, info.nkeys, &w, err, sizeof(err)) || !w ||
        !skywcs_has_celestial(w) || !(cel = skywcs_celestial(w))) {
        m->error = fmt_error("%s has no usable celestial WCS: %s", m->relpath,
                             !w && err[0] ? err
                             : "no celestial pair of axes (CTYPEi such as RA---TAN and "
                               "DEC--TAN)");
        goto done;
    }
    *wcs = info.header;
    info.header = NULL;
    double fov;
    if (hips_dataset_geometry(cel, m->nx, m->ny, 0, &m->ra, &m->dec, NULL, NULL, &m->pixscale,
                              &fov)) {
        m->error = fmt_error("%s: the WCS gives no sky position at the image's centre",
                             m->relpath);
        goto done;
    }
    double x[4] = {-0.5, m->nx - 0.5, m->nx - 0.5, -0.5};
    double y[4] = {-0.5, -0.5, m->ny - 0.5, m->ny - 0.5};
    double lon[4], lat[4];
    if (skywcs_pix2sky(cel, 4, x, y, lon, lat)) {
        m->error = fmt_error("%s: a corner of the image has no sky position", m->relpath);
        goto done;
    }
    double eq = 0;
    sky_frame f = skywcs_frame(cel, &eq);
    sky_convert(f, eq, SKY_FRAME_ICRS, 0, 4, lon, lat);
    m->radius = 0;
    for (int k = 0; k < 4; k++) {
        if (!isfinite(lon[k]) || !isfinite(lat[k])) {
            m->error = fmt_error("%s: a corner of the image has no sky position", m->relpath);
            goto done;
        }
        m->poly[2 * k] = lon[k];
        m->poly[2 * k + 1] = lat[k];
        double dd = col_distance(m->ra, m->dec, lon[k], lat[k]);
        if (dd > m->radius)
            m->radius = dd;
    }
    coverage_cells(cel, m->nx, m->ny, m->pixscale, cells, ncells);
done:
    skywcs_free(cel);
    skywcs_free(w);
    fitsimg_info_release(&info);
}

/* ---- the walk ------------------------------------------------------------------------ */

typedef struct found {
    char *relpath;
    struct stat st;
} found;

typedef struct walk {
    const char *const *pc;  /* the pattern's components */
    int npc;
    found *f;
    int n, cap;
    int failed;
} walk;

static int match_parts(const char *const *pc, int npc, char **sc, int nsc)
{
    if (npc == 0)
        return nsc == 0;
    if (strcmp(pc[0], "**") == 0)
        return match_parts(pc + 1, npc - 1, sc, nsc) ||
               (nsc > 0 && match_parts(pc, npc, sc + 1, nsc - 1));
    return nsc > 0 && fnmatch(pc[0], sc[0], FNM_PERIOD) == 0 &&
           match_parts(pc + 1, npc - 1, sc + 1, nsc - 1);
}

static int rel_matches(const walk *w, const char *rel)
{
    char buf[PATH_MAX];
    char *sc[COL_MAX_DEPTH + 2];
    int nsc = 0;
    snprintf(buf, sizeof(buf), "%s", rel);
    for (char *save = NULL, *t = strtok_r(buf, "/", &save); t && nsc < COL_MAX_DEPTH + 2;
         t = strtok_r(NULL, "/", &save))
        sc[nsc++] = t;
    return match_parts(w->pc, w->npc, sc, nsc);
}

static void walk_dir(walk *w, const char *root, const char *rel, int depth)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp)) && !w->failed) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX], abs[PATH_MAX];
        if (snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name) >=
                (int)sizeof(sub) ||
            snprintf(abs, sizeof(abs), "%s/%s", root, sub) >= (int)sizeof(abs))
            continue;
        struct stat st;
        if (lstat(abs, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {   /* a link to a directory is not followed: no loops */
            if (depth < COL_MAX_DEPTH)
                walk_dir(w, root, sub, depth + 1);
            continue;
        }
        if (!rel_matches(w, sub))
            continue;
        if (S_ISLNK(st.st_mode) && stat(abs, &st))
            continue;   /* a dangling link */
        if (!S_ISREG(st.st_mode))
            continue;
        if (w->n >= COL_MAX_FILES)
            break;
        if (w->n == w->cap) {
            int nc = w->cap ? w->cap * 2 : 256;
            found *nf = realloc(w->f, (size_t)nc * sizeof(*nf));
            if (!nf) {
                w->failed = 1;
                break;
            }
            w->f = nf;
            w->cap = nc;
        }
        if (!(w->f[w->n].relpath = strdup(sub))) {
            w->failed = 1;
            break;
        }
        w->f[w->n++].st = st;
    }
    closedir(dp);
}

static int found_cmp(const void *a, const void *b)
{
    return strcmp(((const found *)a)->relpath, ((const found *)b)->relpath);
}

const col_member *col_member_find(const col_member *m, int n, const char *relpath)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(m[mid].relpath, relpath);
        if (c == 0)
            return &m[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static long long mtime_ns(const struct stat *st)
{
    return (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static void unit_vector(double ra, double dec, double v[3])
{
    double a = ra * M_PI / 180.0, d = dec * M_PI / 180.0;
    v[0] = cos(d) * cos(a);
    v[1] = cos(d) * sin(a);
    v[2] = sin(d);
}

/* The extent of a member list (collection.extent): the mean direction of the readable
 * members' centres and the distance to their farthest footprint corner, degrees; all NaN
 * without a readable member (or when the centres cancel out). */
static void members_extent(const col_member *m, int n, double ext[3])
{
    double s[3] = {0, 0, 0}, v[3];
    int k = 0;
    ext[0] = ext[1] = ext[2] = NAN;
    for (int i = 0; i < n; i++) {
        if (m[i].error)
            continue;
        unit_vector(m[i].ra, m[i].dec, v);
        s[0] += v[0];
        s[1] += v[1];
        s[2] += v[2];
        k++;
    }
    double len = sqrt(s[0] * s[0] + s[1] * s[1] + s[2] * s[2]);
    if (!k || !(len > 1e-12 * k))
        return;
    double mindot = 1.0;
    for (int i = 0; i < n; i++) {
        if (m[i].error)
            continue;
        for (int j = 0; j < 4; j++) {
            unit_vector(m[i].poly[2 * j], m[i].poly[2 * j + 1], v);
            double dot = (s[0] * v[0] + s[1] * v[1] + s[2] * v[2]) / len;
            if (dot < mindot)
                mindot = dot;
        }
    }
    double ra = atan2(s[1], s[0]) * 180.0 / M_PI;
    ext[0] = ra < 0 ? ra + 360.0 : ra;
    ext[1] = asin(s[2] / len) * 180.0 / M_PI;
    ext[2] = acos(mindot < -1.0 ? -1.0 : mindot) * 180.0 / M_PI;
}

/* The version of a member list: FNV-1a over each relpath and file identity. */
static unsigned long long members_hash(const col_member *m, int n)
{
    unsigned long long h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++) {
        long long id[4] = {m[i].dev, m[i].ino, m[i].size, m[i].mtime_ns};
        const unsigned char *p = (const unsigned char *)m[i].relpath;
        for (size_t k = 0; p[k]; k++)
            h = (h ^ p[k]) * 1099511628211ULL;
        p = (const unsigned char *)id;
        for (size_t k = 0; k < sizeof(id); k++)
            h = (h ^ p[k]) * 1099511628211ULL;
    }
    return h;
}

/* One scan of c: new and changed files are read and put in the index, removed ones
 * taken out, unchanged ones only stat(2)ed.  The member list is swapped whole. */
static int scan_collection(colset *s, collection *c)
{
    char *parts[COL_MAX_DEPTH + 2];
    char pat[PATH_MAX];
    snprintf(pat, sizeof(pat), "%s", c->pattern);
    int npc = 0;
    for (char *save = NULL, *t = strtok_r(pat, "/", &save); t && npc < COL_MAX_DEPTH + 2;
         t = strtok_r(NULL, "/", &save))
        parts[npc++] = t;
    walk w = {(const char *const *)parts, npc, NULL, 0, 0, 0};
    walk_dir(&w, c->root, "", 0);
    int rc = 0;
    if (w.failed) {
        rc = TESS_ENOMEM;
        goto out;
    }
    qsort(w.f, (size_t)w.n, sizeof(*w.f), found_cmp);
    col_member *nm = calloc((size_t)w.n + 1, sizeof(*nm));
    if (!nm) {
        rc = TESS_ENOMEM;
        goto out;
    }
    int changed = 0, began = 0;
    for (int i = 0; i < w.n; i++) {
        const struct stat *st = &w.f[i].st;
        const col_member *old = col_member_find(c->m, c->n, w.f[i].relpath);
        col_member *m = &nm[i];
        if (old && old->dev == (long long)st->st_dev && old->ino == (long long)st->st_ino &&
            old->size == (long long)st->st_size && old->mtime_ns == mtime_ns(st)) {
            *m = *old;
            m->relpath = strdup(old->relpath);
            m->error = old->error ? strdup(old->error) : NULL;
            if (!m->relpath || (old->error && !m->error))
                rc = TESS_ENOMEM;
            continue;
        }
        if (!(m->relpath = strdup(w.f[i].relpath))) {   /* w.f stays whole: bsearch below */
            rc = TESS_ENOMEM;
            continue;
        }
        m->bg_offset = NAN;   /* its pairs and offset are measured again (colbackground.h) */
        m->dev = (long long)st->st_dev;
        m->ino = (long long)st->st_ino;
        m->size = (long long)st->st_size;
        m->mtime_ns = mtime_ns(st);
        char abs[PATH_MAX];
        snprintf(abs, sizeof(abs), "%s/%s", c->root, m->relpath);
        char *wcs;
        int64_t *cells;
        size_t ncells;
        read_member(s, c, abs, m, &wcs, &cells, &ncells);
        if (!began && !colindex_begin(s->index))
            began = 1;
        if (colindex_put(s->index, c->name, m, wcs, cells, ncells))
            rc = TESS_EIO;
        free(wcs);
        free(cells);
        changed++;
    }
    for (int i = 0; i < c->n; i++) {
        found key = {c->m[i].relpath, {0}};
        if (!bsearch(&key, w.f, (size_t)w.n, sizeof(*w.f), found_cmp)) {
            if (!began && !colindex_begin(s->index))
                began = 1;
            if (colindex_remove(s->index, c->name, c->m[i].relpath))
                rc = TESS_EIO;
            changed++;
        }
    }
    if (began && colindex_commit(s->index))
        rc = TESS_EIO;
    if (changed && rc != TESS_ENOMEM) {   /* a member without its path is never listed */
        double ext[3];
        members_extent(nm, w.n, ext);
        pthread_rwlock_wrlock(&c->lock);
        col_member *old = c->m;
        int oldn = c->n;
        c->m = nm;
        c->n = w.n;
        c->version = members_hash(nm, w.n);
        memcpy(c->extent, ext, sizeof(ext));
        pthread_rwlock_unlock(&c->lock);
        col_members_free(old, oldn);
    } else {
        col_members_free(nm, w.n);
    }
out:
    for (int i = 0; i < w.n; i++)
        free(w.f[i].relpath);
    free(w.f);
    return rc;
}

int colset_rescan(colset *s)
{
    if (!s)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&s->scan_lock);
    for (int i = 0; i < s->n; i++) {
        int r = scan_collection(s, &s->c[i]);
        if (r && !rc)
            rc = r;
    }
    pthread_mutex_unlock(&s->scan_lock);
    return rc;
}

static void *rescan_main(void *arg)
{
    colset *s = arg;
    pthread_mutex_lock(&s->wake_lock);
    while (!s->stop) {
        pthread_mutex_unlock(&s->wake_lock);
        for (int i = 0; i < s->n; i++) {   /* background offsets of what a scan changed */
            int rc = colbg_pending(&s->c[i]) ? colbg_update(s, &s->c[i]) : 0;
            if (rc != 0 && rc != TESS_ECANCELED)
                fprintf(stderr, "tesserad: collection '%s': the background offsets could "
                        "not be solved (error %d); retried after the next rescan\n",
                        s->c[i].name, rc);
        }
        pthread_mutex_lock(&s->wake_lock);
        if (s->stop)
            break;
        if (s->cfg->collections_rescan_s > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double at = ts.tv_sec + ts.tv_nsec * 1e-9 + s->cfg->collections_rescan_s;
            ts.tv_sec = (time_t)at;
            ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&s->wake, &s->wake_lock, &ts);
        } else {
            pthread_cond_wait(&s->wake, &s->wake_lock);   /* no rescans: only the stop */
        }
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->wake_lock);
        int rc = colset_rescan(s);
        if (rc)
            fprintf(stderr, "tesserad: a rescan of the collections failed (error %d)\n", rc);
        pthread_mutex_lock(&s->wake_lock);
    }
    pthread_mutex_unlock(&s->wake_lock);
    return NULL;
}

/* Splits the configured glob into the directory it starts from (the components before
 * the first one with a wildcard, canonical, under a data root) and the rest. */
static int collection_init(const tess_config *cfg, const col_config *cc, collection *c,
                           char *err, size_t errlen)
{
    char full[PATH_MAX];
    if (cc->images[0] == '/')
        snprintf(full, sizeof(full), "%s", cc->images);
    else
        snprintf(full, sizeof(full), "%s/%s", cfg->data_roots[0], cc->images);
    size_t cut = 0;   /* length of the literal directory prefix */
    for (size_t i = 0; full[i]; i++) {
        if (strchr("*?[", full[i]))
            break;
        if (full[i] == '/')
            cut = i;
    }
    if (!strpbrk(full, "*?[")) {   /* no wildcard: the last component is the pattern */
        char *sl = strrchr(full, '/');
        cut = (size_t)(sl - full);
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%.*s", (int)(cut ? cut : 1), full);
    c->name = strdup(cc->name);
    c->pattern = strdup(full + cut + 1);
    c->root = realpath(dir, NULL);
    c->hdu = cc->hdu;
    c->combine = cc->combine;
    c->match_background = cc->match_background;
    pthread_rwlock_init(&c->lock, NULL);
    if (!c->name || !c->pattern) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    if (!c->root) {
        tess_seterr(err, errlen, "collection '%s': cannot open the folder %s of its images: %s",
                    cc->name, dir, strerror(errno));
        return TESS_EIO;
    }
    size_t rl = strlen(c->root);
    int inside = 0;
    for (int i = 0; i < cfg->n_roots; i++) {
        size_t n = strlen(cfg->data_roots[i]);
        if (strcmp(cfg->data_roots[i], "/") == 0 ||
            (strncmp(c->root, cfg->data_roots[i], n) == 0 && (rl == n || c->root[n] == '/')))
            inside = 1;
    }
    if (!inside) {
        tess_seterr(err, errlen, "collection '%s': images '%s' lie outside every data root",
                    cc->name, cc->images);
        return TESS_EINVAL;
    }
    return 0;
}

int colset_open(const tess_config *cfg, colset **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->n_collections == 0)
        return 0;
    if (cfg->n_roots == 0) {
        tess_seterr(err, errlen, "collections need data_roots");
        return TESS_EINVAL;
    }
    colset *s = calloc(1, sizeof(*s));
    if (!s)
        return TESS_ENOMEM;
    s->cfg = cfg;
    pthread_mutex_init(&s->scan_lock, NULL);
    pthread_mutex_init(&s->wake_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    if (!(s->c = calloc((size_t)cfg->n_collections, sizeof(*s->c)))) {
        rc = TESS_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < cfg->n_collections; i++) {
        for (int j = 0; j < cfg->n_datasets; j++)
            if (strcmp(cfg->datasets[j].name, cfg->collections[i].name) == 0) {
                tess_seterr(err, errlen, "collection '%s' has the name of a dataset",
                            cfg->collections[i].name);
                rc = TESS_EINVAL;
                goto fail;
            }
        s->n++;
        if ((rc = collection_init(cfg, &cfg->collections[i], &s->c[i], err, errlen)))
            goto fail;
    }
    char path[PATH_MAX];
    if (cfg->jobs_dir) {
        mkdir(cfg->jobs_dir, 0700);
        snprintf(path, sizeof(path), "%s/collections.sqlite", cfg->jobs_dir);
    }
    if ((rc = colindex_open(cfg->jobs_dir ? path : NULL, cfg->jobs_database,
                            cfg->jobs_database_timeout_s, &s->index, err, errlen)))
        goto fail;
    for (int i = 0; i < s->n; i++)
        if ((rc = colindex_load(s->index, s->c[i].name, &s->c[i].m, &s->c[i].n))) {
            tess_seterr(err, errlen, "collection '%s': cannot load its index", s->c[i].name);
            goto fail;
        } else {
            s->c[i].version = members_hash(s->c[i].m, s->c[i].n);
            members_extent(s->c[i].m, s->c[i].n, s->c[i].extent);
            colbg_loaded(&s->c[i]);   /* offsets kept in the index, before the scan */
        }
    if (!(s->members = colmembers_new(cfg, COLMEMBERS_OPEN_MAX))) {
        rc = TESS_ENOMEM;
        goto fail;
    }
    if ((rc = colset_rescan(s))) {
        tess_seterr(err, errlen, "collections: the first scan failed (error %d)", rc);
        goto fail;
    }
    int matching = 0;
    for (int i = 0; i < s->n; i++)
        matching |= s->c[i].match_background;
    if ((cfg->collections_rescan_s > 0 || matching) &&
        pthread_create(&s->thread, NULL, rescan_main, s) == 0)
        s->thread_running = 1;
    *out = s;
    return 0;
fail:
    colset_close(s);
    return rc;
}

void colset_close(colset *s)
{
    if (!s)
        return;
    if (s->thread_running) {
        pthread_mutex_lock(&s->wake_lock);
        s->stop = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->wake_lock);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->n; i++) {
        collection *c = &s->c[i];
        free(c->name);
        free(c->root);
        free(c->pattern);
        col_members_free(c->m, c->n);
        pthread_rwlock_destroy(&c->lock);
    }
    colmembers_free(s->members);
    free(s->c);
    colindex_close(s->index);
    pthread_mutex_destroy(&s->scan_lock);
    pthread_mutex_destroy(&s->wake_lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}

int collection_overlapping_circle(collection *c, double ra, double dec, double r, int max,
                                  char ***out, double **polys, int *n, int *total)
{
    *out = NULL;
    *n = *total = 0;
    size_t cap = (size_t)(max > 0 ? max : 1);
    char **p = calloc(cap, sizeof(char *));
    double *pl = polys ? malloc(sizeof(double) * 8 * cap) : NULL;
    if (polys)
        *polys = NULL;
    if (!p || (polys && !pl)) {
        free(p);
        free(pl);
        return TESS_ENOMEM;
    }
    int rc = 0;
    pthread_rwlock_rdlock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        const col_member *m = &c->m[i];
        if (m->error || !col_overlaps_circle(m->poly, 4, ra, dec, r))
            continue;
        if (*n < max && rc == 0) {
            if (pl)
                memcpy(pl + 8 * (size_t)*n, m->poly, sizeof(m->poly));
            if ((p[*n] = strdup(m->relpath)))
                (*n)++;
            else
                rc = TESS_ENOMEM;
        }
        (*total)++;
    }
    pthread_rwlock_unlock(&c->lock);
    if (rc) {
        col_relpaths_free(p, *n);
        free(pl);
        *n = *total = 0;
        return rc;
    }
    *out = p;
    if (polys)
        *polys = pl;
    return 0;
}

void col_relpaths_free(char **p, int n)
{
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(p);
}

mos_combine collection_combine(const collection *c)
{
    return c->combine == 1 ? MOS_MEDIAN : c->combine == 2 ? MOS_FIRST : MOS_MEAN;
}

unsigned long long collection_version_locked(const collection *c)
{
    /* with match_background, each solve of the offsets is a new version of the sky */
    return c->version ^ (c->bg_generation * 0x9e3779b97f4a7c15ULL);
}

unsigned long long collection_version(collection *c)
{
    pthread_rwlock_rdlock(&c->lock);
    unsigned long long v = collection_version_locked(c);
    pthread_rwlock_unlock(&c->lock);
    return v;
}

collection *colset_find(colset *s, const char *name)
{
    for (int i = 0; s && i < s->n; i++)
        if (strcmp(s->c[i].name, name) == 0)
            return &s->c[i];
    return NULL;
}

int collection_member_path(const colset *s, collection *c, const char *relpath, char *out,
                           size_t len)
{
    pthread_rwlock_rdlock(&c->lock);
    const col_member *m = col_member_find(c->m, c->n, relpath);
    int ok = m && !m->error;
    pthread_rwlock_unlock(&c->lock);
    if (!ok)
        return TESS_ENOTFOUND;
    char abs[PATH_MAX];
    snprintf(abs, sizeof(abs), "%s/%s", c->root, relpath);
    char *real = realpath(abs, NULL);
    if (!real)
        return TESS_EIO;
    int allowed = catalog_path_allowed(s->cfg, real);
    if (allowed)
        snprintf(out, len, "%s", real);
    free(real);
    return allowed ? 0 : TESS_ENOTFOUND;
}

int collection_member_overlaps(collection *c, const char *relpath, const double *poly,
                               int npts)
{
    pthread_rwlock_rdlock(&c->lock);
    const col_member *m = col_member_find(c->m, c->n, relpath);
    int in = m && !m->error && col_overlaps_polygon(m->poly, 4, poly, npts);
    pthread_rwlock_unlock(&c->lock);
    return in;
}

double collection_finest_pixscale(collection *c)
{
    double finest = INFINITY;
    pthread_rwlock_rdlock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (!c->m[i].error && c->m[i].pixscale > 0.0 && c->m[i].pixscale < finest)
            finest = c->m[i].pixscale;
    pthread_rwlock_unlock(&c->lock);
    return finest;
}
