/* Rendering of physical pixel values to 8-bit RGBA: cut levels, stretch, colour map. */
#include "engine/image/render.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image/cmap_mpl.h"
#include "engine/image/cmap_tables.h"
#include "engine/base/error.h"

void render_params_default(render_params *p)
{
    p->stretch = STRETCH_LINEAR;
    p->min_cut.value = 0.5;
    p->min_cut.is_percent = 1;
    p->max_cut.value = 99.5;
    p->max_cut.is_percent = 1;
    p->cmap = CMAP_GREY;
}

static const char *const stretch_names[] = {
    [STRETCH_LINEAR] = "linear", [STRETCH_SQRT] = "sqrt", [STRETCH_LOG] = "log",
    [STRETCH_ASINH] = "asinh", [STRETCH_POWER] = "power",
};

static const char *const cmap_names[] = {
    [CMAP_GREY] = "grey", [CMAP_VIRIDIS] = "viridis", [CMAP_INFERNO] = "inferno",
    [CMAP_MAGMA] = "magma", [CMAP_PLASMA] = "plasma", [CMAP_CUBEHELIX] = "cubehelix",
    [CMAP_GREYS] = "Greys", [CMAP_COOLWARM] = "coolwarm", [CMAP_RDBU] = "RdBu",
    [CMAP_TWILIGHT] = "twilight", [CMAP_TURBO] = "turbo", [CMAP_JET] = "jet",
};

/* The reversed maps' names, for render_cmap_name. */
static const char *const cmap_names_r[] = {
    [CMAP_GREY] = "grey_r", [CMAP_VIRIDIS] = "viridis_r", [CMAP_INFERNO] = "inferno_r",
    [CMAP_MAGMA] = "magma_r", [CMAP_PLASMA] = "plasma_r", [CMAP_CUBEHELIX] = "cubehelix_r",
    [CMAP_GREYS] = "Greys_r", [CMAP_COOLWARM] = "coolwarm_r", [CMAP_RDBU] = "RdBu_r",
    [CMAP_TWILIGHT] = "twilight_r", [CMAP_TURBO] = "turbo_r", [CMAP_JET] = "jet_r",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

int render_stretch_parse(const char *s, render_stretch *out)
{
    if (!s)
        return TESS_EINVAL;
    for (size_t i = 0; i < NELEM(stretch_names); i++) {
        if (strcmp(s, stretch_names[i]) == 0) {
            *out = (render_stretch)i;
            return 0;
        }
    }
    return TESS_EINVAL;
}

/* Matplotlib's names (as hips2fits' clients send them) for the map of ours nearest to
 * each: the black-to-white linear greys, and the sequential maps closest in hue and
 * lightness to the ones we have.  (astroquery's default, "Greys_r", is matplotlib's
 * own, reversed Greys, as CDS's hips2fits renders it.) */
static const struct { const char *name; render_cmap cmap; } cmap_aliases[] = {
    {"gray", CMAP_GREY}, {"binary_r", CMAP_GREY},
    {"gist_gray", CMAP_GREY}, {"gist_yarg_r", CMAP_GREY}, {"bone", CMAP_GREY},
    {"cividis", CMAP_VIRIDIS}, {"hot", CMAP_INFERNO}, {"afmhot", CMAP_INFERNO},
    {"gist_heat", CMAP_INFERNO},
};

int render_cmap_parse(const char *s, render_cmap *out)
{
    if (!s)
        return TESS_EINVAL;
    for (size_t i = 0; i < NELEM(cmap_aliases); i++) {
        if (strcmp(s, cmap_aliases[i].name) == 0) {
            *out = cmap_aliases[i].cmap;
            return 0;
        }
    }
    size_t len = strlen(s);
    int rev = len > 2 && strcmp(s + len - 2, "_r") == 0;
    size_t base = rev ? len - 2 : len;
    for (size_t i = 0; i < NELEM(cmap_names); i++) {
        if (strlen(cmap_names[i]) == base && strncmp(s, cmap_names[i], base) == 0) {
            *out = (render_cmap)(i | (rev ? CMAP_REVERSED : 0));
            return 0;
        }
        /* gray_r: matplotlib's spelling of the grey map, reversed. */
        if (rev && i == CMAP_GREY && base == 4 && strncmp(s, "gray", 4) == 0) {
            *out = (render_cmap)(CMAP_GREY | CMAP_REVERSED);
            return 0;
        }
    }
    return TESS_EINVAL;
}

/* A decimal number ([+-]digits[.digits][e[+-]digits]) optionally followed by '%'.
 * Only the characters of that form are allowed, so strtod's "inf", "nan", hex floats
 * and leading blanks are refused. */
int render_cut_parse(const char *s, render_cut *out)
{
    if (!s || !*s)
        return TESS_EINVAL;
    size_t len = strlen(s);
    int pct = s[len - 1] == '%';
    size_t nlen = pct ? len - 1 : len;
    if (nlen == 0)
        return TESS_EINVAL;
    for (size_t i = 0; i < nlen; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '+' || c == '-' || c == 'e' ||
              c == 'E'))
            return TESS_EINVAL;
    }
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s + nlen || !isfinite(v))
        return TESS_EINVAL;
    if (pct && (v < 0.0 || v > 100.0))
        return TESS_EINVAL;
    out->value = v;
    out->is_percent = pct;
    return 0;
}

const char *render_stretch_name(render_stretch s)
{
    if ((unsigned)s < NELEM(stretch_names))
        return stretch_names[s];
    return "unknown";
}

const char *render_cmap_name(render_cmap c)
{
    unsigned k = (unsigned)c & ~(unsigned)CMAP_REVERSED;
    if (k < NELEM(cmap_names))
        return ((unsigned)c & CMAP_REVERSED) ? cmap_names_r[k] : cmap_names[k];
    return "unknown";
}

/* ---- order statistics ------------------------------------------------------------- */

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

static void swap_d(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

static double median3(double a, double b, double c)
{
    if (a > b)
        swap_d(&a, &b);
    if (b > c)
        swap_d(&b, &c);
    if (a > b)
        swap_d(&a, &b);
    return b;
}

/* Reorders the n finite values of a so that a[k] is the k-th smallest (0-based), with
 * no larger value before it and no smaller one after it.  Quickselect (Hoare 1961)
 * with the median of three pseudo-randomly placed elements as pivot (so sorted input,
 * or the order a previous call leaves, is no worst case) and a three-way partition
 * (so runs of equal pixels, common in images, cost one pass).  After 2 log2(n) + 8
 * partitions it sorts what is left, so the worst case is O(n log n).  Cannot fail. */
static void select_kth(double *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    int budget = 8;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ n;   /* xorshift64, deterministic per call */
    while (hi - lo > 16) {
        if (budget-- == 0) {
            qsort(a + lo, hi - lo, sizeof *a, cmp_double);
            return;
        }
        size_t pick[3];
        for (int j = 0; j < 3; j++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            pick[j] = lo + (size_t)(rng % (hi - lo));
        }
        double pivot = median3(a[pick[0]], a[pick[1]], a[pick[2]]);
        size_t lt = lo, i = lo, gt = hi;   /* [lo,lt) < pivot, [lt,i) == pivot, [gt,hi) > pivot */
        while (i < gt) {
            if (a[i] < pivot)
                swap_d(&a[lt++], &a[i++]);
            else if (a[i] > pivot)
                swap_d(&a[i], &a[--gt]);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return;
    }
    for (size_t i = lo + 1; i < hi; i++) {
        double v = a[i];
        size_t j = i;
        while (j > lo && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

/* The pct-th percentile (0..100) of the m > 0 finite values in a (reordered), computed
 * as numpy.percentile's default "linear" method (Hyndman & Fan 1996, definition 7) and
 * in the same floating-point steps as numpy 1.24 (_quantile and _lerp in
 * numpy/lib/function_base.py): index (m-1)*q, and the interpolation written from the
 * nearer neighbour.  Cannot fail. */
static double percentile(double *a, size_t m, double pct)
{
    double q = pct / 100.0;
    double vi = (double)(m - 1) * q;
    size_t prev, next;
    if (vi >= (double)(m - 1)) {
        prev = next = m - 1;
    } else {
        prev = (size_t)floor(vi);
        next = prev + 1;
    }
    double gamma = vi - (double)prev;
    select_kth(a, m, prev);
    double va = a[prev], vb = va;
    if (next != prev) {
        vb = a[next];
        for (size_t i = next + 1; i < m; i++)
            if (a[i] < vb)
                vb = a[i];
    }
    double d = vb - va;
    return gamma >= 0.5 ? vb - d * (1.0 - gamma) : va + d * gamma;
}

/* The cuts over n values given as doubles (d64) or, when d64 is NULL, as floats (d32),
 * the finite ones gathered as doubles.  Absolute cuts need no pass over the data.  A
 * percentile cut over data with no finite value gives lo = hi = 0. */
static int resolve_cuts(const double *d64, const float *d32, size_t n, const render_params *p,
                        double *lo, double *hi)
{
    if (!p->min_cut.is_percent && !p->max_cut.is_percent) {
        *lo = p->min_cut.value;
        *hi = p->max_cut.value;
        return 0;
    }
    if (n > SIZE_MAX / sizeof(double))
        return TESS_ENOMEM;
    double *a = malloc((n ? n : 1) * sizeof(double));
    if (!a)
        return TESS_ENOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        double v = d64 ? d64[i] : (double)d32[i];
        if (isfinite(v))
            a[m++] = v;
    }
    if (m == 0) {
        *lo = *hi = 0.0;
    } else {
        *lo = p->min_cut.is_percent ? percentile(a, m, p->min_cut.value) : p->min_cut.value;
        *hi = p->max_cut.is_percent ? percentile(a, m, p->max_cut.value) : p->max_cut.value;
    }
    free(a);
    return 0;
}

int render_resolve_cuts(const double *data, size_t n, const render_params *p, double *lo, double *hi)
{
    return resolve_cuts(data, NULL, n, p, lo, hi);
}

/* The finite values are gathered as doubles, then cut exactly as render_resolve_cuts. */
int render_resolve_cuts_f32(const float *data, size_t n, const render_params *p, double *lo,
                            double *hi)
{
    return resolve_cuts(NULL, data, n, p, lo, hi);
}

/* ---- stretches and colour maps ---------------------------------------------------- */

/* The stretches of astropy.visualization with their default parameters (astropy 5.2,
 * astropy/visualization/stretch.py): SqrtStretch, LogStretch(a=1000):
 * log(a t + 1) / log(a + 1), AsinhStretch(a=0.1): asinh(t/a) / asinh(1/a), and
 * PowerStretch(a=2).  t is in [0, 1] and so is the result. */
static double stretch_apply(render_stretch s, double t)
{
    switch (s) {
    case STRETCH_SQRT:
        return sqrt(t);
    case STRETCH_LOG:
        return log(1000.0 * t + 1.0) / log(1001.0);
    case STRETCH_ASINH:
        return asinh(10.0 * t) / asinh(10.0);
    case STRETCH_POWER:
        return t * t;
    case STRETCH_LINEAR:
    default:
        return t;
    }
}

static uint8_t to_byte(double c)
{
    if (!(c > 0.0))
        return 0;
    if (c >= 1.0)
        return 255;
    return (uint8_t)lround(c * 255.0);
}

/* Cubehelix of Green, D. A. 2011, Bull. Astr. Soc. India 39, 289 (eq. 2), with
 * matplotlib's defaults for its "cubehelix" map: start 0.5, rotations -1.5, hue 1,
 * gamma 1.  Components are clipped to [0, 1] as matplotlib does. */
static void cubehelix(double t, double rgb[3])
{
    const double start = 0.5, rot = -1.5, hue = 1.0, gamma = 1.0;
    double lg = pow(t, gamma);
    double amp = hue * lg * (1.0 - lg) / 2.0;
    double phi = 2.0 * M_PI * (start / 3.0 + rot * t);
    double c = cos(phi), s = sin(phi);
    rgb[0] = lg + amp * (-0.14861 * c + 1.78277 * s);
    rgb[1] = lg + amp * (-0.29227 * c - 0.90649 * s);
    rgb[2] = lg + amp * (1.97294 * c);
}

static void build_anchored(render_cmap c, uint8_t lut[256][3]);

/* Fills lut[i] with the colour of t = i/255 in map c (reversed: of 1 - t).  Cannot
 * fail. */
static void build_lut(render_cmap cr, uint8_t lut[256][3])
{
    render_cmap c = (render_cmap)((unsigned)cr & ~(unsigned)CMAP_REVERSED);
    const uint8_t (*full)[3] = NULL;
    switch (c) {
    case CMAP_GREYS:    full = cmap_mpl_greys; break;
    case CMAP_COOLWARM: full = cmap_mpl_coolwarm; break;
    case CMAP_RDBU:     full = cmap_mpl_rdbu; break;
    case CMAP_TWILIGHT: full = cmap_mpl_twilight; break;
    case CMAP_TURBO:    full = cmap_mpl_turbo; break;
    case CMAP_JET:      full = cmap_mpl_jet; break;
    default: break;
    }
    int rev = ((unsigned)cr & CMAP_REVERSED) != 0;
    if (rev && c == CMAP_TWILIGHT) {
        full = cmap_mpl_twilight_r;   /* a table of its own (cmap_mpl.h) */
        rev = 0;
    }
    if (full)
        memcpy(lut, full, sizeof(uint8_t) * 256 * 3);
    else
        build_anchored(c, lut);
    if (rev)
        for (int i = 0; i < 128; i++)
            for (int j = 0; j < 3; j++) {
                uint8_t v = lut[i][j];
                lut[i][j] = lut[255 - i][j];
                lut[255 - i][j] = v;
            }
}

/* build_lut for the maps of anchors (cmap_tables.h), cubehelix and grey. */
static void build_anchored(render_cmap c, uint8_t lut[256][3])
{
    const float (*tab)[3] = NULL;
    switch (c) {
    case CMAP_VIRIDIS: tab = cmap_viridis; break;
    case CMAP_INFERNO: tab = cmap_inferno; break;
    case CMAP_MAGMA:   tab = cmap_magma; break;
    case CMAP_PLASMA:  tab = cmap_plasma; break;
    default: break;
    }
    for (int i = 0; i < 256; i++) {
        double t = i / 255.0, rgb[3];
        if (c == CMAP_CUBEHELIX) {
            cubehelix(t, rgb);
        } else if (tab) {
            double pos = t * (CMAP_NANCHORS - 1);
            int k = (int)pos;
            if (k > CMAP_NANCHORS - 2)
                k = CMAP_NANCHORS - 2;
            double f = pos - k;
            for (int j = 0; j < 3; j++)
                rgb[j] = tab[k][j] + (tab[k + 1][j] - tab[k][j]) * f;
        } else {
            rgb[0] = rgb[1] = rgb[2] = t;
        }
        for (int j = 0; j < 3; j++)
            lut[i][j] = c == CMAP_GREY ? (uint8_t)i : to_byte(rgb[j]);
    }
}

/* Cuts come from render_resolve_cuts over this same array; a caller that wants cuts
 * from a larger image (tiles of one dataset) resolves them first and passes them as
 * absolute values.  With hi < lo the ramp is reversed; with hi == lo, values above the
 * cut are white and the rest black.  Each pixel's stretched t is quantised to
 * round(255 t) and looked up in a 256-entry table of the map.  Returns 0, TESS_EINVAL
 * (w or h not positive), TESS_ERANGE (4 w h overflows size_t) or TESS_ENOMEM. */
int render_rgba(const double *data, long w, long h, const render_params *p, uint8_t *rgba)
{
    if (w <= 0 || h <= 0)
        return TESS_EINVAL;
    if ((unsigned long)w > SIZE_MAX / 4 / (unsigned long)h)
        return TESS_ERANGE;
    size_t n = (size_t)w * (size_t)h;
    double lo, hi;
    int rc = render_resolve_cuts(data, n, p, &lo, &hi);
    if (rc)
        return rc;
    return render_rgba_cuts(data, w, h, p, lo, hi, rgba);
}

/* The pixel loop of render_rgba; the cuts of `p` are not looked at. */
int render_rgba_cuts(const double *data, long w, long h, const render_params *p, double lo,
                     double hi, uint8_t *rgba)
{
    if (w <= 0 || h <= 0)
        return TESS_EINVAL;
    if ((unsigned long)w > SIZE_MAX / 4 / (unsigned long)h)
        return TESS_ERANGE;

    uint8_t lut[256][3];
    build_lut(p->cmap, lut);
    double span = hi - lo;
    for (long y = 0; y < h; y++) {
        const double *src = data + (size_t)(h - 1 - y) * (size_t)w;
        uint8_t *dst = rgba + (size_t)y * (size_t)w * 4;
        for (long x = 0; x < w; x++, dst += 4) {
            double v = src[x];
            if (isnan(v)) {
                dst[0] = dst[1] = dst[2] = dst[3] = 0;
                continue;
            }
            double t;
            if (span != 0.0)
                t = (v - lo) / span;
            else
                t = v > lo ? 1.0 : 0.0;
            if (!(t > 0.0))
                t = 0.0;
            else if (t > 1.0)
                t = 1.0;
            t = stretch_apply(p->stretch, t);
            /* 255 levels, both ends of the map included (with transparent, 256 colours
             * at most). */
            int level = (int)(t * 254.0 + 0.5);
            if (level > 254)
                level = 254;
            else if (level < 0)
                level = 0;
            level = (level * 255 + 127) / 254;
            dst[0] = lut[level][0];
            dst[1] = lut[level][1];
            dst[2] = lut[level][2];
            dst[3] = 255;
        }
    }
    return 0;
}
