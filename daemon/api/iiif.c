/* GET /iiif/3/{id}/...: IIIF Image API 3.0 (info.json and image requests) over dataset planes. */
#include "daemon/api/handlers.h"
#include "daemon/api/iiif.h"
#include "engine/image/encode.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* References: "IIIF Image API 3.0" (https://iiif.io/api/image/3.0/), cited below as
 * "Image API §n"; its Compliance page (https://iiif.io/api/image/3.0/compliance/) and
 * Implementation Notes (https://iiif.io/api/image/3.0/implementation/, "notes §n").
 *
 * The image is the rendered picture of a plane: FITS row 1 at the bottom, so region
 * y = 0 is the top row, FITS row NAXIS2 (docs/DESIGN.md, "Pictures").  The identifier is a
 * dataset name, or "name~Z" for plane Z (0-based) of a cube or frame Z of a stack; the
 * bare name of a cube or stack is its plane 0. */

#define IIIF_TILE 512             /* tiles[0].width (and height) */
#define IIIF_JPEG_QUALITY 90
#define IIIF_MAX_SIDE 65500L      /* JPEG_MAX_DIMENSION: maxWidth and maxHeight at most */
#define IIIF_MAX_COORD (1LL << 40)/* larger numbers in a region or size are refused */

static const char *const quality_names[] = {"default", "color", "gray", "bitonal"};

/* The size limits announced in info.json (maxWidth, maxHeight, maxArea: Image API §5.2). */
typedef struct iiif_limits {
    long max_w, max_h;
    long long max_area;
} iiif_limits;

/* What the pool thread needs: a validated request, nothing raw. */
typedef struct iiif_job {
    const dataset *ds;
    long z;
    iiif_request q;
    render_params render;
    int cuts_picture;         /* cuts=picture: percentiles of the picture's own values */
    char version[48];         /* of the plane, as in the cache key */
    char rkey[160];           /* canonical rendering parameters, as in the cache key */
} iiif_job;

static int fail(iiif_error *e, int status, const char *parameter, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(iiif_error *e, int status, const char *parameter, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->pe.parameter, sizeof e->pe.parameter, "%s", parameter ? parameter : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->pe.detail, sizeof e->pe.detail, fmt, ap);
    va_end(ap);
    return TESS_EINVAL;
}

/* Answers the problem of a parse failure. */
static void error_reply(hreq *r, const iiif_error *e)
{
    problem_reply(r, e->status, e->pe.parameter[0] ? e->pe.parameter : NULL, "%s", e->pe.detail);
}

/* The limits for limits.max_output_pixels = max_pixels. */
static iiif_limits limits_of(long long max_pixels)
{
    iiif_limits l;
    l.max_area = max_pixels;
    l.max_w = l.max_area < IIIF_MAX_SIDE ? (long)l.max_area : IIIF_MAX_SIDE;
    l.max_h = l.max_w;
    return l;
}

/* ---- parsing ------------------------------------------------------------------------ */

/* A non-negative decimal integer spanning exactly s[0..n): digits only, at most 2^40.
 * Returns 0 or TESS_EINVAL. */
static int parse_uint(const char *s, size_t n, long long *out)
{
    if (n == 0 || n > 13)
        return TESS_EINVAL;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return TESS_EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    if (v > IIIF_MAX_COORD)
        return TESS_EINVAL;
    *out = v;
    return 0;
}

/* A non-negative decimal number spanning exactly s[0..n): digits with at most one '.',
 * at least one digit, no sign or exponent, as Image API §4.1-§4.3 write percentages
 * and degrees.  Returns 0 or TESS_EINVAL. */
static int parse_decimal(const char *s, size_t n, double *out)
{
    if (n == 0 || n > 32)
        return TESS_EINVAL;
    int digits = 0, dots = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else if (s[i] == '.' && ++dots == 1)
            continue;
        else
            return TESS_EINVAL;
    }
    if (!digits)
        return TESS_EINVAL;
    char tmp[40];
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    double v = strtod(tmp, NULL);
    if (!isfinite(v))
        return TESS_EINVAL;
    *out = v;
    return 0;
}

/* Splits "a,b,c,d" (exactly `want` comma-separated fields; empty fields allowed) into
 * field starts and lengths.  Returns 0 or TESS_EINVAL. */
static int split_commas(const char *s, int want, const char **f, size_t *len)
{
    int k = 0;
    const char *p = s;
    for (;;) {
        const char *c = strchr(p, ',');
        if (k == want)
            return TESS_EINVAL;
        f[k] = p;
        len[k] = c ? (size_t)(c - p) : strlen(p);
        k++;
        if (!c)
            break;
        p = c + 1;
    }
    return k == want ? 0 : TESS_EINVAL;
}

/* Image API §4.1 Region, on a W x H image: "full"; "square" (the largest centred
 * square); "x,y,w,h" in pixels; "pct:x,y,w,h" in percent of W and H (rounded to the
 * nearest pixel: x0 = round(x W / 100), x1 = round((x + w) W / 100), at least one
 * pixel).  A region running past the right or bottom edge is cropped to the image; one
 * with zero width or height, or entirely outside the image, is a 400. */
static int parse_region(const char *s, long W, long H, iiif_request *q, iiif_error *e)
{
    long long x, y, w, h;
    if (strcmp(s, "full") == 0) {
        q->x = q->y = 0;
        q->w = W;
        q->h = H;
        return 0;
    }
    if (strcmp(s, "square") == 0) {
        long side = W < H ? W : H;
        q->x = (W - side) / 2;
        q->y = (H - side) / 2;
        q->w = q->h = side;
        return 0;
    }
    const char *f[4];
    size_t n[4];
    if (strncmp(s, "pct:", 4) == 0) {
        double v[4];
        if (split_commas(s + 4, 4, f, n) || parse_decimal(f[0], n[0], &v[0]) ||
            parse_decimal(f[1], n[1], &v[1]) || parse_decimal(f[2], n[2], &v[2]) ||
            parse_decimal(f[3], n[3], &v[3]))
            return fail(e, 400, "region", "region 'pct:%.60s' is not pct:x,y,w,h with "
                        "non-negative decimal percentages", s + 4);
        if (v[2] <= 0.0 || v[3] <= 0.0)
            return fail(e, 400, "region", "region '%.60s' has a zero width or height", s);
        if (v[0] >= 100.0 || v[1] >= 100.0)
            return fail(e, 400, "region", "region '%.60s' lies outside the %ldx%ld image", s,
                        W, H);
        double x1 = (v[0] + v[2]) * (double)W / 100.0, y1 = (v[1] + v[3]) * (double)H / 100.0;
        x = llround(v[0] * (double)W / 100.0);
        y = llround(v[1] * (double)H / 100.0);
        /* A start under 100% that rounds to the far edge lies in the last pixel. */
        x = x >= W ? W - 1 : x;
        y = y >= H ? H - 1 : y;
        long long xe = x1 > (double)IIIF_MAX_COORD ? IIIF_MAX_COORD : llround(x1);
        long long ye = y1 > (double)IIIF_MAX_COORD ? IIIF_MAX_COORD : llround(y1);
        w = xe > x ? xe - x : 1;
        h = ye > y ? ye - y : 1;
    } else {
        if (split_commas(s, 4, f, n) || parse_uint(f[0], n[0], &x) ||
            parse_uint(f[1], n[1], &y) || parse_uint(f[2], n[2], &w) ||
            parse_uint(f[3], n[3], &h))
            return fail(e, 400, "region", "region '%.60s' is not full, square, x,y,w,h or "
                        "pct:x,y,w,h", s);
        if (w == 0 || h == 0)
            return fail(e, 400, "region", "region '%.60s' has a zero width or height", s);
    }
    if (x >= W || y >= H)
        return fail(e, 400, "region", "region '%.60s' lies outside the %ldx%ld image", s, W, H);
    q->x = (long)x;
    q->y = (long)y;
    q->w = (long)(x + w > W ? W - x : w);
    q->h = (long)(y + h > H ? H - y : h);
    return 0;
}

/* Scales (w, h) by s, rounding to the nearest pixel, at least 1. */
static void scale_round(long w, long h, double s, long *ow, long *oh)
{
    double a = floor((double)w * s + 0.5), b = floor((double)h * s + 0.5);
    *ow = a < 1.0 ? 1 : (long)a;
    *oh = b < 1.0 ? 1 : (long)b;
}

/* Image API §4.2 Size, for the region q->w x q->h: "max" (the region, made smaller
 * only to fit the limits, as in notes §4), "w,", ",h" (the other side keeps the aspect
 * ratio, rounded to the nearest pixel), "pct:n", "w,h" (exact, may distort), "!w,h" (the
 * largest size that keeps the aspect ratio and fits in w x h and, without "^", in the
 * region).  A "^" prefix allows upscaling; without it a size larger than the region is a
 * 400.  A width or height that comes out as zero is a 400; a size beyond maxWidth,
 * maxHeight or maxArea a 413 (docs/DESIGN.md, "Status codes": a result larger than the
 * configured limit). */
static int parse_size(const char *s, const iiif_limits *lim, iiif_request *q, iiif_error *e)
{
    const char *orig = s;
    int up = 0;
    if (*s == '^') {
        up = 1;
        s++;
    }
    long rw = q->w, rh = q->h;
    long long ow = 0, oh = 0;
    if (strcmp(s, "max") == 0) {
        double k = fmin((double)lim->max_w / (double)rw, (double)lim->max_h / (double)rh);
        k = fmin(k, sqrt((double)lim->max_area / ((double)rw * (double)rh)));
        if (!up && k > 1.0)
            k = 1.0;
        if (k == 1.0) {
            ow = rw;
            oh = rh;
        } else {
            ow = (long long)floor((double)rw * k);
            oh = (long long)floor((double)rh * k);
            if (ow < 1)
                ow = 1;
            if (oh < 1)
                oh = 1;
            while (ow * oh > lim->max_area && (ow > 1 || oh > 1)) {
                if (ow >= oh)
                    ow--;
                else
                    oh--;
            }
        }
    } else if (strncmp(s, "pct:", 4) == 0) {
        double n;
        if (parse_decimal(s + 4, strlen(s + 4), &n))
            return fail(e, 400, "size", "size '%.60s' is not pct:n with a decimal n", orig);
        if (n <= 0.0)
            return fail(e, 400, "size", "size '%.60s' is zero", orig);
        if (!up && n > 100.0)
            return fail(e, 400, "size", "size '%.60s' is larger than the region; upscaling "
                        "needs the ^ prefix", orig);
        double a = floor((double)rw * n / 100.0 + 0.5), b = floor((double)rh * n / 100.0 + 0.5);
        if (a > (double)IIIF_MAX_COORD || b > (double)IIIF_MAX_COORD)
            return fail(e, 413, "size", "size '%.60s' is larger than maxWidth %ld x maxHeight "
                        "%ld", orig, lim->max_w, lim->max_h);
        ow = (long long)a;
        oh = (long long)b;
    } else {
        int confined = 0;
        if (*s == '!') {
            confined = 1;
            s++;
        }
        const char *f[2];
        size_t n[2];
        long long w = -1, h = -1;
        if (split_commas(s, 2, f, n) || (n[0] && parse_uint(f[0], n[0], &w)) ||
            (n[1] && parse_uint(f[1], n[1], &h)) || (n[0] == 0 && n[1] == 0) ||
            (confined && (n[0] == 0 || n[1] == 0)))
            return fail(e, 400, "size", "size '%.60s' is not max, w,, ,h, pct:n, w,h or !w,h "
                        "(with an optional ^)", orig);
        if (w == 0 || h == 0)
            return fail(e, 400, "size", "size '%.60s' has a zero width or height", orig);
        if (confined) {
            double k = fmin((double)w / (double)rw, (double)h / (double)rh);
            if (!up && k > 1.0)
                k = 1.0;
            long a, b;
            scale_round(rw, rh, k, &a, &b);
            ow = a > w ? w : a;
            oh = b > h ? h : b;
        } else {
            if (!up && (w > rw || h > rh))
                return fail(e, 400, "size", "size '%.60s' is larger than the %ldx%ld region; "
                            "upscaling needs the ^ prefix", orig, rw, rh);
            if (w > 0 && h > 0) {
                ow = w;
                oh = h;
            } else if (w > 0) {
                ow = w;
                oh = (long long)floor((double)rh * (double)w / (double)rw + 0.5);
            } else {
                oh = h;
                ow = (long long)floor((double)rw * (double)h / (double)rh + 0.5);
            }
        }
    }
    if (ow < 1 || oh < 1)
        return fail(e, 400, "size", "size '%.60s' of the %ldx%ld region gives %lldx%lld "
                    "pixels", orig, rw, rh, ow, oh);
    if (ow > lim->max_w || oh > lim->max_h || ow > lim->max_area / oh)
        return fail(e, 413, "size", "size %lldx%lld is more than maxWidth %ld, maxHeight %ld "
                    "or maxArea %lld (limits.max_output_pixels)", ow, oh, lim->max_w,
                    lim->max_h, lim->max_area);
    q->ow = (long)ow;
    q->oh = (long)oh;
    return 0;
}

/* Image API §4.3 Rotation: an optional "!" (mirror: reflect on the vertical axis, before
 * rotating) and clockwise degrees 0..360.  Multiples of 90 are served (360 is 0); other
 * angles are a 400 (rotationArbitrary is not offered). */
static int parse_rotation(const char *s, iiif_request *q, iiif_error *e)
{
    const char *orig = s;
    q->mirror = 0;
    if (*s == '!') {
        q->mirror = 1;
        s++;
    }
    double deg;
    if (parse_decimal(s, strlen(s), &deg) || deg > 360.0)
        return fail(e, 400, "rotation", "rotation '%.40s' is not [!]n with 0 <= n <= 360", orig);
    if (fmod(deg, 90.0) != 0.0)
        return fail(e, 400, "rotation", "rotation '%.40s' is not supported: only 0, 90, 180 "
                    "and 270 (with ! to mirror)", orig);
    q->rotation = (int)deg % 360;
    return 0;
}

/* Image API §4.4 Quality and §4.5 Format: "{quality}.{format}". */
static int parse_quality_format(const char *s, iiif_request *q, iiif_error *e)
{
    const char *dot = strrchr(s, '.');
    if (!dot)
        return fail(e, 400, "format", "'%.40s' is not {quality}.{format}", s);
    size_t n = (size_t)(dot - s);
    int found = 0;
    for (int i = 0; i < 4; i++) {
        if (strlen(quality_names[i]) == n && strncmp(s, quality_names[i], n) == 0) {
            q->quality = (iiif_quality)i;
            found = 1;
        }
    }
    if (!found)
        return fail(e, 400, "quality", "quality '%.*s' is not default, color, gray or bitonal",
                    (int)(n > 40 ? 40 : n), s);
    const char *f = dot + 1;
    if (strcmp(f, "png") == 0)
        q->format = IIIF_F_PNG;
    else if (strcmp(f, "jpg") == 0)
        q->format = IIIF_F_JPG;
    else
        return fail(e, 400, "format", "format '%.20s' is not supported: png or jpg", f);
    return 0;
}

int iiif_path_split(const char *path, iiif_path *p)
{
    memset(p, 0, sizeof(*p));
    p->path = path;
    if (!(p->copy = strdup(path)))
        return TESS_ENOMEM;
    for (char *s = p->copy; p->nseg < IIIF_MAX_SEGMENTS;) {
        p->seg[p->nseg++] = s;
        char *slash = strchr(s, '/');
        if (!slash)
            break;
        *slash = '\0';
        s = slash + 1;
    }
    if (p->nseg == 1 || (p->nseg == 2 && p->seg[1][0] == '\0'))
        p->kind = IIIF_PATH_BASE;
    else if (p->nseg == 2 && strcmp(p->seg[1], "info.json") == 0)
        p->kind = IIIF_PATH_INFO;
    else if (p->nseg == 2 && strcmp(p->seg[1], "manifest.json") == 0)
        p->kind = IIIF_PATH_MANIFEST;
    else
        p->kind = IIIF_PATH_IMAGE;
    return 0;
}

void iiif_path_release(iiif_path *p)
{
    if (!p)
        return;
    free(p->copy);
    p->copy = NULL;
}

int iiif_parse_image(const iiif_path *p, long W, long H, long long max_pixels,
                     iiif_request *q, iiif_error *e)
{
    static const char *const part[] = {"identifier", "region", "size", "rotation", "quality"};
    memset(q, 0, sizeof(*q));
    memset(e, 0, sizeof(*e));
    if (p->nseg < 5)
        return fail(e, 400, part[p->nseg], "an image request is "
                    "{identifier}/{region}/{size}/{rotation}/{quality}.{format}; the %s is "
                    "missing", part[p->nseg]);
    if (p->nseg > 5)
        return fail(e, 404, NULL, "no such IIIF resource: %.200s", p->path);
    iiif_limits lim = limits_of(max_pixels);
    if (parse_region(p->seg[1], W, H, q, e) || parse_size(p->seg[2], &lim, q, e) ||
        parse_rotation(p->seg[3], q, e) || parse_quality_format(p->seg[4], q, e))
        return TESS_EINVAL;
    return 0;
}

/* The dataset and plane named by an identifier (see the top of the file), found by
 * catalog_lookup with the checks of every route: a 404, or a 500 when the dataset's
 * header changed since the start. */
static int parse_identifier(catalog *cat, const char *id, const dataset **d, long *z,
                            iiif_error *e)
{
    *z = 0;
    if (!*id)
        return fail(e, 404, "identifier", "no image identifier in the path");
    char why[600];
    int rc = catalog_lookup(cat, id, strlen(id), d, why, sizeof why);
    const char *tilde = strrchr(id, '~');
    long long zz;
    if (rc == TESS_ENOTFOUND && tilde && tilde > id &&
        parse_uint(tilde + 1, strlen(tilde + 1), &zz) == 0) {
        rc = catalog_lookup(cat, id, (size_t)(tilde - id), d, why, sizeof why);
        if (rc == 0 && zz >= (*d)->nz)
            return fail(e, 404, "identifier", "'%.*s' has no plane %lld (planes 0..%ld)",
                        (int)(tilde - id), id, zz, (*d)->nz - 1);
        if (rc == 0)
            *z = (long)zz;
    }
    if (rc == TESS_EIO)
        return fail(e, 500, NULL, "%s", why);
    if (rc)
        return fail(e, 404, "identifier", "no image '%.100s' (a dataset name, or name~Z for "
                    "plane Z)", id);
    return 0;
}

/* ---- info.json ---------------------------------------------------------------------- */

/* 1 when h[0..n) is a plausible Host value: 1 to 255 characters of letters, digits and
 * ".-_:[]" (a name or an address, with an optional port). */
static int host_ok(const char *h, size_t n)
{
    if (!h || n == 0 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z')
              || (h[i] >= '0' && h[i] <= '9') || strchr(".-_:[]", h[i]) != NULL))
            return 0;
    return 1;
}

/* `s` with every byte but letters, digits and "-._~" percent-encoded (RFC 3986).
 * Returns a malloc'd string or NULL. */
static char *pct_encode(const char *s)
{
    char *enc = malloc(3 * strlen(s) + 1);
    if (!enc)
        return NULL;
    char *o = enc;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p)) {
            *o++ = (char)*p;
        } else {
            snprintf(o, 4, "%%%02X", *p);
            o += 3;
        }
    }
    *o = '\0';
    return enc;
}

/* The service's base URI (Image API §2, §5.1 "id"): scheme and authority from the
 * request (behind a reverse proxy its X-Forwarded-Host, the first one when a chain of
 * proxies listed several, else Host; X-Forwarded-Proto https gives https), "/iiif/3/",
 * the identifier percent-encoded.  A value that is not a plausible host is ignored.
 * Returns a malloc'd string or NULL. */
static char *base_uri(hreq *r, const char *id)
{
    char host[300];
    const char *fwd = hreq_header(r, "X-Forwarded-Host"), *h = hreq_header(r, "Host");
    size_t fn = fwd ? strcspn(fwd, ",") : 0;
    while (fn > 0 && fwd[fn - 1] == ' ')
        fn--;
    if (host_ok(fwd, fn))
        snprintf(host, sizeof host, "%.*s", (int)fn, fwd);
    else if (host_ok(h, h ? strlen(h) : 0))
        snprintf(host, sizeof host, "%s", h);
    else {
        const char *a = r->srv->cfg->listen_addr;
        snprintf(host, sizeof host, strchr(a, ':') ? "[%s]:%d" : "%s:%d", a, r->srv->port);
    }
    const char *proto = hreq_header(r, "X-Forwarded-Proto");
    const char *scheme = proto && strcmp(proto, "https") == 0 ? "https" : "http";
    char *enc = pct_encode(id);
    if (!enc)
        return NULL;
    char *uri = NULL;
    if (asprintf(&uri, "%s://%s/iiif/3/%s", scheme, host, enc) < 0)
        uri = NULL;
    free(enc);
    return uri;
}

/* The compliance level (Image API §6), as the Link of every answer. */
#define IIIF_PROFILE_LINK "<http://iiif.io/api/image/3/level2.json>;rel=\"profile\""

/* The Link header of an image answer: the canonical URI of the request (Image API §4.7:
 * region "full" or x,y,w,h; size "max" when the region is not scaled, else w,h with "^"
 * when it is enlarged; rotation with its "!"; quality "default" for color; then the
 * rendering parameters given, in a fixed order) as rel="canonical", and the profile.
 * Returns a malloc'd string or NULL. */
static char *image_link(hreq *r, const char *id, const dataset *d, const iiif_request *q)
{
    char region[96], size[64];
    if (q->x == 0 && q->y == 0 && q->w == d->nx && q->h == d->ny)
        snprintf(region, sizeof region, "full");
    else
        snprintf(region, sizeof region, "%ld,%ld,%ld,%ld", q->x, q->y, q->w, q->h);
    if (q->ow == q->w && q->oh == q->h)
        snprintf(size, sizeof size, "max");
    else
        snprintf(size, sizeof size, "%s%ld,%ld", q->ow > q->w || q->oh > q->h ? "^" : "",
                 q->ow, q->oh);
    static const char *const rkeys[] = {"stretch", "min_cut", "max_cut", "cmap", "cuts"};
    char query[512] = "";
    size_t ql = 0;
    for (size_t i = 0; i < sizeof rkeys / sizeof rkeys[0]; i++) {
        const char *v = hreq_arg(r, rkeys[i]);
        char *ev = v ? pct_encode(v) : NULL;
        if (ev && ql < sizeof query)
            ql += (size_t)snprintf(query + ql, sizeof query - ql, "%c%s=%s", ql ? '&' : '?',
                                   rkeys[i], ev);
        free(ev);
    }
    if (ql >= sizeof query)
        query[0] = '\0';
    char *uri = base_uri(r, id), *link = NULL;
    if (uri && asprintf(&link, "<%s/%s/%s/%s%d/%s.%s%s>;rel=\"canonical\", %s", uri, region,
                        size, q->mirror ? "!" : "", q->rotation,
                        quality_names[q->quality == IIIF_Q_COLOR ? IIIF_Q_DEFAULT : q->quality],
                        q->format == IIIF_F_PNG ? "png" : "jpg", query, IIIF_PROFILE_LINK) < 0)
        link = NULL;
    free(uri);
    return link;
}

/* Level k of the plane store is ceil(n / 2^k) pixels along an axis of n. */
static long level_len(long n, int k)
{
    return (long)(((unsigned long long)n + (1ULL << k) - 1) >> k);
}

/* Answers JSON-LD document o (taken; NULL: out of memory) of IIIF API `api` ("image",
 * "presentation"): application/ld+json with the API's context as profile when the client
 * asks for it in Accept (Image API §5.1, Presentation API §6.1), application/json
 * otherwise. */
static void reply_ld(hreq *r, json_t *o, const char *api)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char type[128] = "application/json";
    const char *accept = hreq_header(r, "Accept");
    if (accept && strstr(accept, "application/ld+json"))
        snprintf(type, sizeof type, "application/ld+json;profile=\"http://iiif.io/api/%s/3/"
                 "context.json\"", api);
    if (!text) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    r->rep.cache_control = "no-cache";
    hreq_reply_tile(r, 200, tile_new_take((unsigned char *)text, strlen(text), type));
}

/* Image API §5 Image Information (technical properties §5.2, sizes §5.3, tiles §5.4,
 * extra functionality §5.7).  Profile level2 (Compliance §3: regionByPx,
 * regionByPct, regionSquare, every size form, rotationBy90s, png and jpg, baseUriRedirect,
 * jsonldMediaType); beyond it mirroring and sizeUpscaling, and the qualities color, gray
 * and bitonal.  tiles: 512-pixel tiles at scale factors 1, 2, 4, ... up to the first at
 * which the whole image fits in one tile.  sizes: the plane store's reduced levels
 * (k >= 1, down to about 32 pixels on the longer side), smallest first. */
static void reply_info(hreq *r, const dataset *d, const char *id)
{
    iiif_limits lim = limits_of(r->srv->cfg->max_output_pixels);
    char *uri = base_uri(r, id);
    if (!uri) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "@context", json_string("http://iiif.io/api/image/3/context.json"));
    json_object_set_new(o, "id", json_string(uri));
    json_object_set_new(o, "type", json_string("ImageService3"));
    json_object_set_new(o, "protocol", json_string("http://iiif.io/api/image"));
    json_object_set_new(o, "profile", json_string("level2"));
    json_object_set_new(o, "width", json_integer(d->nx));
    json_object_set_new(o, "height", json_integer(d->ny));
    json_object_set_new(o, "maxWidth", json_integer(lim.max_w));
    json_object_set_new(o, "maxHeight", json_integer(lim.max_h));
    json_object_set_new(o, "maxArea", json_integer(lim.max_area));

    long big = d->nx > d->ny ? d->nx : d->ny;
    json_t *sf = json_array();
    for (int k = 0; k <= 30; k++) {
        json_array_append_new(sf, json_integer(1LL << k));
        if (level_len(big, k) <= IIIF_TILE)
            break;
    }
    json_t *tobj = json_object();
    json_object_set_new(tobj, "width", json_integer(IIIF_TILE));
    json_object_set_new(tobj, "height", json_integer(IIIF_TILE));
    json_object_set_new(tobj, "scaleFactors", sf);
    json_t *tiles = json_array();
    json_array_append_new(tiles, tobj);
    json_object_set_new(o, "tiles", tiles);

    int top = 0;
    while (top < 30 && level_len(big, top + 1) >= 32)
        top++;
    if (top == 0 && big > 1)
        top = 1;
    json_t *sizes = json_array();
    for (int k = top; k >= 1; k--) {
        long w = level_len(d->nx, k), h = level_len(d->ny, k);
        if (w > lim.max_w || h > lim.max_h || (long long)w * h > lim.max_area)
            continue;
        json_t *sz = json_object();
        json_object_set_new(sz, "width", json_integer(w));
        json_object_set_new(sz, "height", json_integer(h));
        json_array_append_new(sizes, sz);
    }
    json_object_set_new(o, "sizes", sizes);
    json_t *eq = json_array();
    json_array_append_new(eq, json_string("color"));
    json_array_append_new(eq, json_string("gray"));
    json_array_append_new(eq, json_string("bitonal"));
    json_object_set_new(o, "extraQualities", eq);
    json_t *ef = json_array();
    json_array_append_new(ef, json_string("mirroring"));
    json_array_append_new(ef, json_string("sizeUpscaling"));
    json_object_set_new(o, "extraFeatures", ef);
    /* §5.7 partOf: the dataset's Presentation manifest (every plane's canvas). */
    char *man = base_uri(r, d->name);
    char *mid = NULL;
    if (man && asprintf(&mid, "%s/manifest.json", man) < 0)
        mid = NULL;
    free(man);
    if (mid)
        json_object_set_new(o, "partOf", json_pack("[{s:s, s:s}]", "id", mid, "type",
                                                   "Manifest"));
    free(mid);
    free(uri);
    free(r->rep.link);
    r->rep.link = strdup(IIIF_PROFILE_LINK);
    reply_ld(r, o, "image");
}

/* A IIIF Presentation API 3.0 manifest of dataset d: one canvas a plane (planes of a cube,
 * frames of a stack), each painted by the plane's full image with its Image API service
 * ({name}~{z} for planes after the first of a cube or stack, as info.json names them).
 * Returns the document or NULL (out of memory). */
static json_t *manifest_json(hreq *r, const dataset *d)
{
    char *self = base_uri(r, d->name);
    if (!self)
        return NULL;
    json_t *items = json_array();
    int bad = !items;
    for (long z = 0; !bad && z < d->nz; z++) {
        char id[300], label[64], *canvas = NULL, *svc = NULL;
        if (d->nz > 1)
            snprintf(id, sizeof id, "%s~%ld", d->name, z);
        else
            snprintf(id, sizeof id, "%s", d->name);
        snprintf(label, sizeof label, d->nz > 1 ? "%s %ld (of %ld)" : "%s", d->nz > 1
                 ? (d->kind == DS_STACK ? "frame" : "plane") : d->name, z, d->nz);
        svc = base_uri(r, id);
        if (!svc || asprintf(&canvas, "%s/canvas/%ld", self, z) < 0) {
            free(svc);
            bad = 1;
            break;
        }
        char *img = NULL, *page = NULL, *anno = NULL;
        if (asprintf(&img, "%s/full/max/0/default.png", svc) < 0)
            img = NULL;
        if (asprintf(&page, "%s/page", canvas) < 0)
            page = NULL;
        if (asprintf(&anno, "%s/page/image", canvas) < 0)
            anno = NULL;
        json_t *c = img && page && anno ? json_pack(
            "{s:s, s:s, s:{s:[s]}, s:I, s:I, s:[{s:s, s:s, s:[{s:s, s:s, s:s, s:s, "
            "s:{s:s, s:s, s:s, s:I, s:I, s:[{s:s, s:s, s:s}]}}]}]}",
            "id", canvas, "type", "Canvas", "label", "none", label,
            "width", (json_int_t)d->nx, "height", (json_int_t)d->ny,
            "items", "id", page, "type", "AnnotationPage", "items",
            "id", anno, "type", "Annotation", "motivation", "painting", "target", canvas,
            "body", "id", img, "type", "Image", "format", "image/png",
            "width", (json_int_t)d->nx, "height", (json_int_t)d->ny,
            "service", "id", svc, "type", "ImageService3", "profile", "level2") : NULL;
        free(img);
        free(page);
        free(anno);
        free(canvas);
        free(svc);
        if (!c || json_array_append_new(items, c))
            bad = 1;
    }
    char *mid = NULL;
    if (!bad && asprintf(&mid, "%s/manifest.json", self) < 0)
        mid = NULL;
    free(self);
    json_t *m = !bad && mid ? json_pack("{s:s, s:s, s:s, s:{s:[s]}, s:o}", "@context",
                                        "http://iiif.io/api/presentation/3/context.json",
                                        "id", mid, "type", "Manifest", "label", "none",
                                        d->name, "items", items) : NULL;
    if (!m)
        json_decref(items);
    free(mid);
    return m;
}

static void reply_manifest(hreq *r, const dataset *d)
{
    reply_ld(r, manifest_json(r, d), "presentation");
}

/* ---- pixels ------------------------------------------------------------------------- */

/* Box-filter taps from one axis of plane level k to `nout` output pixels.  The region
 * covers level-0 coordinates [a0, a0 + len) of an axis of n pixels; its ends are mapped
 * into level-k coordinates piecewise linearly, so that level-k pixel i spans exactly its
 * block [i 2^k, min((i+1) 2^k, n)) of level 0 (the last block of an axis may be partial),
 * and the output pixels divide that level-k span evenly.  A region aligned on 2^k blocks
 * and scaled by 2^k, partial edge tile included (notes §3: ceil(len / 2^k) pixels), thus
 * takes each output pixel from exactly one level-k pixel.  Weights are the overlaps in
 * level-k coordinates. */
typedef struct taps {
    size_t *start;            /* nout + 1 offsets into idx and wt */
    long *idx;
    double *wt;
} taps;

static double to_level(long n, int k, long nk, double xx)
{
    double b = (double)(1L << k);
    double i = floor(xx / b);
    if (i >= (double)nk)
        return (double)nk;
    if (i < 0)
        i = 0;
    double width = fmin(b, (double)n - i * b);
    return i + (xx - i * b) / width;
}

static void taps_release(taps *t)
{
    free(t->start);
    free(t->idx);
    free(t->wt);
}

/* Returns 0 or TESS_ENOMEM. */
static int taps_build(long n, int k, long nk, long a0, long len, long nout, taps *t)
{
    memset(t, 0, sizeof(*t));
    size_t cap = (size_t)nout * 4 + 16, used = 0;
    t->start = malloc(((size_t)nout + 1) * sizeof(size_t));
    t->idx = malloc(cap * sizeof(long));
    t->wt = malloc(cap * sizeof(double));
    if (!t->start || !t->idx || !t->wt) {
        taps_release(t);
        return TESS_ENOMEM;
    }
    double u0 = to_level(n, k, nk, (double)a0), u1 = to_level(n, k, nk, (double)(a0 + len));
    double step = (u1 - u0) / (double)nout;
    for (long o = 0; o < nout; o++) {
        t->start[o] = used;
        double ua = u0 + (double)o * step;
        double ub = o + 1 == nout ? u1 : u0 + (double)(o + 1) * step;
        double span = ub - ua;
        for (long p = (long)floor(ua); p < nk && (double)p < ub; p++) {
            double w = fmin(ub, (double)p + 1.0) - fmax(ua, (double)p);
            if (w <= 1e-9 * span)
                continue;
            if (used == cap) {
                size_t ncap = cap * 2;
                long *ni = realloc(t->idx, ncap * sizeof(long));
                if (ni)
                    t->idx = ni;
                double *nw = ni ? realloc(t->wt, ncap * sizeof(double)) : NULL;
                if (!nw) {
                    taps_release(t);
                    return TESS_ENOMEM;
                }
                t->wt = nw;
                cap = ncap;
            }
            t->idx[used] = p;
            t->wt[used] = w;
            used++;
        }
    }
    t->start[nout] = used;
    return 0;
}

/* Resamples the FITS-frame region (fx0, fy0, w, h) of level 0 (an nx x ny plane) from
 * level view `p` (level k) to ow x oh doubles `out`, row 0 = the lowest FITS row, as a
 * NaN-aware box filter.  Polls *cancel before each output row.  Returns 0, TESS_ENOMEM
 * or TESS_ECANCELED. */
static int resample(const rp_plane *p, int k, long nx, long ny, long fx0, long fy0, long w,
                    long h, long ow, long oh, const atomic_int *cancel, double *out)
{
    if (k == 0 && ow == w && oh == h) {
        for (long j = 0; j < oh; j++) {
            if (atomic_load_explicit(cancel, memory_order_relaxed))
                return TESS_ECANCELED;
            for (long i = 0; i < ow; i++)
                out[(size_t)j * (size_t)ow + (size_t)i] = rp_plane_get(p, fx0 + i, fy0 + j);
        }
        return 0;
    }
    taps tx, ty;
    if (taps_build(nx, k, p->nx, fx0, w, ow, &tx))
        return TESS_ENOMEM;
    if (taps_build(ny, k, p->ny, fy0, h, oh, &ty)) {
        taps_release(&tx);
        return TESS_ENOMEM;
    }
    int rc = 0;
    for (long j = 0; j < oh; j++) {
        if (atomic_load_explicit(cancel, memory_order_relaxed)) {
            rc = TESS_ECANCELED;
            break;
        }
        for (long i = 0; i < ow; i++) {
            double sum = 0.0, wsum = 0.0;
            for (size_t b = ty.start[j]; b < ty.start[j + 1]; b++) {
                for (size_t a = tx.start[i]; a < tx.start[i + 1]; a++) {
                    double v = rp_plane_get(p, tx.idx[a], ty.idx[b]);
                    if (isfinite(v)) {
                        double wt = tx.wt[a] * ty.wt[b];
                        sum += wt * v;
                        wsum += wt;
                    }
                }
            }
            out[(size_t)j * (size_t)ow + (size_t)i] = wsum > 0.0 ? sum / wsum : NAN;
        }
    }
    taps_release(&tx);
    taps_release(&ty);
    return rc;
}

/* Mirrors (reflection on the vertical axis) then rotates clockwise by `rot` degrees the
 * w x h RGBA image `src` into `dst` (h x w for 90 and 270).  Image API §4.3. */
static void orient(const uint8_t *src, long w, long h, int mirror, int rot, uint8_t *dst)
{
    long dw = (rot == 90 || rot == 270) ? h : w;
    long dh = (rot == 90 || rot == 270) ? w : h;
    for (long Y = 0; Y < dh; Y++) {
        for (long X = 0; X < dw; X++) {
            long sx, sy;
            switch (rot) {
            case 90:  sx = Y;         sy = h - 1 - X; break;
            case 180: sx = w - 1 - X; sy = h - 1 - Y; break;
            case 270: sx = w - 1 - Y; sy = X;         break;
            default:  sx = X;         sy = Y;         break;
            }
            if (mirror)
                sx = w - 1 - sx;
            memcpy(dst + ((size_t)Y * (size_t)dw + (size_t)X) * 4,
                   src + ((size_t)sy * (size_t)w + (size_t)sx) * 4, 4);
        }
    }
}

/* The reduced level to read for a request: the coarsest level k that still has at least
 * as many pixels across the region as the output on both axes, i.e. floor(log2(region /
 * size)) with the region measured in level-k pixels (a partial edge block counting as
 * one, so that the edge tile of scale factor 2^k, ceil(region / 2^k) wide, reads level k).
 * 0 when upscaling. */
static int level_for(long nx, long ny, const iiif_request *q, long fy0)
{
    int k = 0;
    while (k < 30) {
        int k1 = k + 1;
        long lx = level_len(nx, k1), ly = level_len(ny, k1);
        double sx = to_level(nx, k1, lx, (double)(q->x + q->w)) -
                    to_level(nx, k1, lx, (double)q->x);
        double sy = to_level(ny, k1, ly, (double)(fy0 + q->h)) - to_level(ny, k1, ly, (double)fy0);
        if (sx < (double)q->ow - 1e-9 || sy < (double)q->oh - 1e-9)
            break;
        k = k1;
    }
    return k;
}

static int status_of(int rc)
{
    return problem_read_status(rc, rc == TESS_ERANGE ? 404 : 500);
}

/* The canonical cache key of a job for plane version `version`: the resolved region and
 * size, so that "full/max" and "0,0,W,H/W,H" share one entry, and color spelled default.
 * Returns a malloc'd string or NULL. */
static char *cache_key(const iiif_job *j, const char *version)
{
    const iiif_request *q = &j->q;
    char *key = NULL;
    if (asprintf(&key, "iiif|%s|%ld|%s|%ld,%ld,%ld,%ld|%ld,%ld|%s%d|%s|%s|%s%s", j->ds->name,
                 j->z, version, q->x, q->y, q->w, q->h, q->ow, q->oh, q->mirror ? "!" : "",
                 q->rotation,
                 quality_names[q->quality == IIIF_Q_COLOR ? IIIF_Q_DEFAULT : q->quality],
                 q->format == IIIF_F_PNG ? "png" : "jpg", j->rkey,
                 j->cuts_picture ? "|cuts=picture" : "") < 0)
        return NULL;
    return key;
}

/* Runs on a pool thread: cuts of the whole plane (or, with cuts=picture, of the
 * resampled values), the reduced level, resampling, rendering, orientation, encoding. */
static void iiif_work(hreq *r)
{
    iiif_job *j = r->work_arg;
    const dataset *d = j->ds;
    const iiif_request *q = &j->q;
    planestore *ps = r->srv->app->planes;
    char err[256];
    double lo = 0.0, hi = 0.0;
    int rc = j->cuts_picture ? 0 : planestore_cuts(ps, d, j->z, &j->render, &lo, &hi, err,
                                                   sizeof err);
    if (rc) {
        problem_reply(r, status_of(rc), NULL, "cannot read '%s': %s", d->name, err);
        return;
    }
    long fy0 = d->ny - q->y - q->h;     /* picture row y = FITS row ny - 1 - y */
    int k = level_for(d->nx, d->ny, q, fy0);
    plane_view v;
    rc = planestore_get(ps, d, j->z, k, &v, err, sizeof err);
    if (rc) {
        problem_reply(r, status_of(rc), NULL, "cannot read '%s': %s", d->name, err);
        return;
    }
    /* The file changed between the cache lookup and now: key the result by what was
     * read (or leave it uncached when that key cannot be made). */
    const char *vv = planestore_view_version(&v);
    if (strcmp(vv, j->version) != 0) {
        free(r->cache_key);
        r->cache_key = cache_key(j, vv);
    }
    size_t npix = (size_t)q->ow * (size_t)q->oh;
    double *vals = malloc(npix * sizeof(double));
    uint8_t *rgba = malloc(npix * 4);
    uint8_t *turned = (q->rotation || q->mirror) ? malloc(npix * 4) : NULL;
    if (!vals || !rgba || ((q->rotation || q->mirror) && !turned)) {
        planestore_release(ps, &v);
        free(vals);
        free(rgba);
        free(turned);
        problem_reply(r, 500, NULL, "out of memory for a %ldx%ld image", q->ow, q->oh);
        return;
    }
    rc = resample(v.plane, v.level, d->nx, d->ny, q->x, fy0, q->w, q->h, q->ow, q->oh,
                  &r->cancel, vals);
    planestore_release(ps, &v);
    if (rc == TESS_ECANCELED) {
        free(vals);
        free(rgba);
        free(turned);
        hreq_reply_cancelled(r);
        return;
    }
    render_params rp = j->render;
    if (q->quality == IIIF_Q_GRAY || q->quality == IIIF_Q_BITONAL)
        rp.cmap = CMAP_GREY;
    if (rc == 0 && j->cuts_picture)
        rc = render_resolve_cuts(vals, npix, &rp, &lo, &hi);
    if (rc == 0)
        rc = render_rgba_cuts(vals, q->ow, q->oh, &rp, lo, hi, rgba);
    free(vals);
    if (rc) {
        free(rgba);
        free(turned);
        problem_reply(r, 500, NULL, "out of memory rendering a %ldx%ld image", q->ow, q->oh);
        return;
    }
    if (q->quality == IIIF_Q_BITONAL) {
        for (size_t i = 0; i < npix; i++) {
            uint8_t b = rgba[4 * i] >= 128 ? 255 : 0;
            rgba[4 * i] = rgba[4 * i + 1] = rgba[4 * i + 2] = b;
        }
    }
    long fw = q->ow, fh = q->oh;
    if (turned) {
        orient(rgba, q->ow, q->oh, q->mirror, q->rotation, turned);
        free(rgba);
        rgba = turned;
        if (q->rotation == 90 || q->rotation == 270) {
            fw = q->oh;
            fh = q->ow;
        }
    }
    unsigned char *out = NULL;
    size_t len = 0;
    if (q->format == IIIF_F_PNG)
        rc = png_encode_rgba(rgba, fw, fh, &out, &len);
    else
        rc = jpeg_encode_rgb(rgba, fw, fh, IIIF_JPEG_QUALITY, &out, &len);
    free(rgba);
    if (rc) {
        problem_reply(r, 500, NULL, "could not encode the %ldx%ld image", fw, fh);
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take(out, len, q->format == IIIF_F_PNG ? "image/png"
                                                                            : "image/jpeg"));
}

/* ---- the handler -------------------------------------------------------------------- */

void handle_iiif(hreq *r, const route_match *m)
{
    static const char *const known[] = {"stretch", "min_cut", "max_cut", "cmap", "cuts", NULL};
    if (hreq_only_args(r, known))
        return;
    const char *cuts = hreq_arg(r, "cuts");
    if (cuts && strcmp(cuts, "plane") != 0 && strcmp(cuts, "picture") != 0) {
        problem_reply(r, 400, "cuts", "cuts must be plane (percentiles of the whole plane, "
                      "the default) or picture (of the picture's own pixels), got '%.40s'",
                      cuts);
        return;
    }
    if (handler_slashed_name(r, "/iiif/3/", 8, "identifier"))
        return;
    iiif_path p;
    if (iiif_path_split(m->rest, &p)) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    iiif_error e;
    const dataset *d = NULL;
    long z = 0;
    if (parse_identifier(r->srv->app->cat, p.seg[0], &d, &z, &e)) {
        error_reply(r, &e);
        iiif_path_release(&p);
        return;
    }
    if (p.kind == IIIF_PATH_BASE) {
        /* Image API §2.2: the base URI redirects (303) to the image information document. */
        char *uri = base_uri(r, p.seg[0]);
        char *body = NULL;
        if (!uri || asprintf(&body, "%s/info.json\n", uri) < 0) {
            free(uri);
            iiif_path_release(&p);
            problem_reply(r, 500, NULL, "out of memory");
            return;
        }
        r->rep.location = NULL;
        if (asprintf(&r->rep.location, "%s/info.json", uri) < 0)
            r->rep.location = NULL;
        free(uri);
        r->rep.cache_control = "no-cache";
        hreq_reply_tile(r, 303, tile_new_take((unsigned char *)body, strlen(body),
                                              "text/plain; charset=utf-8"));
        iiif_path_release(&p);
        return;
    }
    if (p.kind == IIIF_PATH_INFO) {
        reply_info(r, d, p.seg[0]);
        iiif_path_release(&p);
        return;
    }
    if (p.kind == IIIF_PATH_MANIFEST) {
        if (strcmp(p.seg[0], d->name) != 0)
            problem_reply(r, 404, NULL, "the manifest is the dataset's: /iiif/3/%s/manifest.json",
                          d->name);
        else
            reply_manifest(r, d);
        iiif_path_release(&p);
        return;
    }
    iiif_request q;
    int bad = iiif_parse_image(&p, d->nx, d->ny, r->srv->cfg->max_output_pixels, &q, &e);
    if (!bad) {
        free(r->rep.link);
        r->rep.link = image_link(r, p.seg[0], d, &q);
    }
    iiif_path_release(&p);
    if (bad) {
        error_reply(r, &e);
        return;
    }
    iiif_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    j->z = z;
    j->q = q;
    j->cuts_picture = cuts && strcmp(cuts, "picture") == 0;
    param_error pe;
    if (params_render(hreq_arg_lookup, r, &j->render, &pe)) {
        problem_reply(r, 400, pe.parameter, "%s", pe.detail);
        free(j);
        return;
    }
    char err[256];
    int rc = planestore_version(r->srv->app->planes, d, z, j->version, sizeof j->version, err,
                                sizeof err);
    if (rc) {
        problem_reply(r, 500, NULL, "cannot read '%s': %s", d->name, err);
        free(j);
        return;
    }
    render_params keyed = j->render;
    if (q.quality == IIIF_Q_GRAY || q.quality == IIIF_Q_BITONAL)
        keyed.cmap = CMAP_GREY;
    params_render_key(&keyed, j->rkey, sizeof j->rkey);
    r->cache_key = cache_key(j, j->version);
    hreq_serve(r, iiif_work, j, free);
}
