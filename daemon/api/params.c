/* Request parsing: strict numbers, cutout and slice parameters, FITS header bodies. */
#include "daemon/api/params.h"
#include "engine/base/error.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(param_error *e, const char *parameter, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(param_error *e, const char *parameter, const char *fmt, ...)
{
    if (e) {
        snprintf(e->parameter, sizeof(e->parameter), "%s", parameter);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
        va_end(ap);
    }
    return TESS_EINVAL;
}

int param_double(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s)
        return TESS_EINVAL;
    /* Decimal notation only: strtod would also take hex, "inf", "nan" and blanks. */
    if (s[strspn(s, "0123456789+-.eE")] != '\0')
        return TESS_EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return TESS_EINVAL;
    if (v < lo || v > hi)
        return TESS_ERANGE;
    *out = v;
    return 0;
}

int param_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '-' || *s == '+'))
        return TESS_EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno == ERANGE)
        return TESS_EINVAL;
    if (v < lo || v > hi)
        return TESS_ERANGE;
    *out = v;
    return 0;
}

int out_format_parse(const char *s, out_format *f)
{
    if (strcmp(s, "png") == 0)
        *f = FMT_PNG;
    else if (strcmp(s, "fits") == 0)
        *f = FMT_FITS;
    else if (strcmp(s, "npy") == 0)
        *f = FMT_NPY;
    else if (strcmp(s, "jpg") == 0)
        *f = FMT_JPG;
    else if (strcmp(s, "raw") == 0)
        *f = FMT_RAW;
    else
        return TESS_EINVAL;
    return 0;
}

const char *out_format_name(out_format f)
{
    switch (f) {
    case FMT_PNG: return "png";
    case FMT_FITS: return "fits";
    case FMT_NPY: return "npy";
    case FMT_JPG: return "jpg";
    case FMT_RAW: return "raw";
    }
    return "png";
}

const char *out_format_mime(out_format f)
{
    return f == FMT_PNG ? "image/png" : f == FMT_FITS ? "application/fits"
         : f == FMT_JPG ? "image/jpeg" : "application/octet-stream";
}

/* Reads an optional double; absent keeps *out.  Errors name the parameter. */
static int opt_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                      double *out, param_error *e)
{
    const char *s = get(cls, key);
    if (!s)
        return 0;
    int rc = param_double(s, lo, hi, out);
    if (rc == TESS_ERANGE)
        return fail(e, key, "%s must be between %g and %g, got '%.40s'", key, lo, hi, s);
    if (rc)
        return fail(e, key, "%s must be a finite number, got '%.40s'", key, s);
    return 0;
}

static int req_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                      double *out, param_error *e)
{
    if (!get(cls, key))
        return fail(e, key, "%s is required", key);
    return opt_double(get, cls, key, lo, hi, out, e);
}

static int opt_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                    param_error *e)
{
    const char *s = get(cls, key);
    if (!s)
        return 0;
    int rc = param_long(s, lo, hi, out);
    if (rc == TESS_ERANGE)
        return fail(e, key, "%s must be between %ld and %ld, got '%.40s'", key, lo, hi, s);
    if (rc)
        return fail(e, key, "%s must be an integer, got '%.40s'", key, s);
    return 0;
}

static int req_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                    param_error *e)
{
    if (!get(cls, key))
        return fail(e, key, "%s is required", key);
    return opt_long(get, cls, key, lo, hi, out, e);
}

int params_render(param_lookup get, void *cls, render_params *rp, param_error *e)
{
    render_params_default(rp);
    const char *s;
    if ((s = get(cls, "stretch")) && render_stretch_parse(s, &rp->stretch))
        return fail(e, "stretch", "stretch must be linear, sqrt, log, asinh or power, got '%.40s'", s);
    if ((s = get(cls, "cmap")) && render_cmap_parse(s, &rp->cmap))
        return fail(e, "cmap",
                    "cmap must be grey, viridis, inferno, magma, plasma or cubehelix, got '%.40s'", s);
    if ((s = get(cls, "min_cut")) && render_cut_parse(s, &rp->min_cut))
        return fail(e, "min_cut", "min_cut must be a number or a percentile like 0.5%%, got '%.40s'", s);
    if ((s = get(cls, "max_cut")) && render_cut_parse(s, &rp->max_cut))
        return fail(e, "max_cut", "max_cut must be a number or a percentile like 99.5%%, got '%.40s'", s);
    if (rp->min_cut.is_percent == rp->max_cut.is_percent && rp->min_cut.value > rp->max_cut.value)
        return fail(e, "min_cut", "min_cut (%g%s) is above max_cut (%g%s)", rp->min_cut.value,
                    rp->min_cut.is_percent ? "%" : "", rp->max_cut.value,
                    rp->max_cut.is_percent ? "%" : "");
    return 0;
}

void params_render_key(const render_params *rp, char *out, size_t len)
{
    snprintf(out, len, "%s,%.17g%s,%.17g%s,%s", render_stretch_name(rp->stretch),
             rp->min_cut.value, rp->min_cut.is_percent ? "%" : "", rp->max_cut.value,
             rp->max_cut.is_percent ? "%" : "", render_cmap_name(rp->cmap));
}

/* The parameters both cutout forms share: dataset, method, max_coord_error, format, plane,
 * rendering. */
static int common_cutout(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    const char *s = get(cls, "dataset");
    if (!s || !*s)
        return fail(e, "dataset", "dataset is required");
    if (strlen(s) >= sizeof(p->dataset))
        return fail(e, "dataset", "dataset name is too long");
    snprintf(p->dataset, sizeof(p->dataset), "%s", s);
    p->method = RP_BILINEAR;
    if ((s = get(cls, "method")) && rp_method_parse(s, &p->method))
        return fail(e, "method", "method must be nearest, bilinear, bicubic, lanczos3 or "
                    "exact, got '%.40s'", s);
    p->max_coord_error = 0.001;
    if (opt_double(get, cls, "max_coord_error", 0, 10, &p->max_coord_error, e))
        return TESS_EINVAL;
    p->format = FMT_PNG;
    if ((s = get(cls, "format"))
        && (out_format_parse(s, &p->format)
            || (p->format != FMT_PNG && p->format != FMT_JPG && p->format != FMT_FITS)))
        return fail(e, "format", "format must be png, jpg or fits, got '%.40s'", s);
    p->plane = 0;
    if (opt_long(get, cls, "plane", 0, 1L << 30, &p->plane, e))
        return TESS_EINVAL;
    return params_render(get, cls, &p->render, e);
}

int params_cutout_get(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    if (common_cutout(get, cls, p, e))
        return TESS_EINVAL;
    if (req_double(get, cls, "ra", -360, 360, &p->lon, e) ||
        req_double(get, cls, "dec", -90, 90, &p->lat, e) ||
        req_double(get, cls, "fov", 1e-9, 360, &p->fov, e) ||
        req_long(get, cls, "width", 1, 65536, &p->width, e) ||
        req_long(get, cls, "height", 1, 65536, &p->height, e))
        return TESS_EINVAL;
    const char *s = get(cls, "projection");
    if (!s)
        s = "TAN";
    if (strlen(s) != 3 || !isalpha((unsigned char)s[0]) || !isalpha((unsigned char)s[1]) ||
        !isalpha((unsigned char)s[2]))
        return fail(e, "projection", "projection must be a three-letter FITS code such as TAN, "
                    "SIN, CAR or AIT, got '%.40s'", s);
    for (int i = 0; i < 3; i++)
        p->projection[i] = (char)toupper((unsigned char)s[i]);
    p->projection[3] = '\0';
    p->coordsys = SKY_FRAME_ICRS;
    s = get(cls, "coordsys");
    if (s && sky_frame_parse(s, &p->coordsys) != 0)
        return fail(e, "coordsys", "coordsys must be icrs, fk5, fk4, galactic or ecliptic, "
                    "got '%.40s'", s);
    p->rotation = 0;
    if (opt_double(get, cls, "rotation_angle", -360, 360, &p->rotation, e))
        return TESS_EINVAL;
    return 0;
}

int params_cutout_post(param_lookup get, void *cls, cutout_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    return common_cutout(get, cls, p, e);
}

/* Reads a decimal integer of at most 12 digits ending at one of `stops`. */
static int path_long(const char **s, const char *stops, long *out)
{
    const char *q = *s;
    long v = 0;
    int n = 0;
    while (isdigit((unsigned char)*q)) {
        if (++n > 12)
            return TESS_EINVAL;
        v = v * 10 + (*q - '0');
        q++;
    }
    if (n == 0 || !*q || !strchr(stops, *q))
        return TESS_EINVAL;
    *out = v;
    *s = q + 1;
    return 0;
}

int params_slice_path(const char *s, slice_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    int known = strncmp(s, "xy", 2) == 0 || strncmp(s, "xz", 2) == 0 || strncmp(s, "yz", 2) == 0;
    if (known && (s[2] == '\0' || (s[2] == '/' && s[3] == '\0')))
        return fail(e, "size", "the slice path goes on after the plane: "
                    "%.2s/{W}_{H}/{X}_{Y}_{Z}.{png|jpg|fits|npy|raw}", s);
    if (!known || s[2] != '/')
        return fail(e, "plane", "slice plane must be xy, xz or yz, got '%.20s'", s);
    memcpy(p->plane, s, 2);
    p->plane[2] = '\0';
    s += 3;
    if (path_long(&s, "_", &p->w) || path_long(&s, "/", &p->h))
        return fail(e, "size", "slice size must be {W}_{H} in pixels");
    if (path_long(&s, "_", &p->x) || path_long(&s, "_", &p->y) || path_long(&s, ".", &p->z))
        return fail(e, "offset", "slice offset must be {X}_{Y}_{Z} in pixels, 0-based");
    if (out_format_parse(s, &p->format))
        return fail(e, "format", "slice format must be png, jpg, fits, npy or raw, got '%.20s'", s);
    if (p->w < 1 || p->h < 1 || p->w > 65536 || p->h > 65536)
        return fail(e, "size", "slice width and height must be 1..65536");
    return 0;
}

/* 1 when the 8-character keyword field `kw` is a numeric WCS keyword of FITS WCS Papers
 * I-II (NAXISn, CRPIXn, CRVALn, CDELTn, CROTAn, CDi_j, PCi_j, PVi_m, with an optional
 * alternate letter; LONPOLE, LATPOLE, EQUINOX). */
static int numeric_wcs_keyword(const char *kw)
{
    static const char *const indexed[] = {"NAXIS", "CRPIX", "CRVAL", "CDELT", "CROTA", "CD",
                                          "PC", "PV"};
    static const char *const plain[] = {"LONPOLE", "LATPOLE", "EQUINOX"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        size_t n = strlen(plain[i]);
        if (strncmp(kw, plain[i], n) == 0 && (n == 8 || kw[n] == ' ' || isupper((unsigned char)kw[n])))
            return 1;
    }
    for (size_t i = 0; i < sizeof indexed / sizeof indexed[0]; i++) {
        size_t n = strlen(indexed[i]);
        if (strncmp(kw, indexed[i], n) == 0 && isdigit((unsigned char)kw[n]))
            return 1;
    }
    return 0;
}

/* The value of a numeric WCS card must be a finite number (FITS allows a D exponent);
 * wcslib would otherwise drop the card silently and use a default.  Returns 0 or -1. */
static int check_numeric_card(const char *card, int line, param_error *e)
{
    if (card[8] != '=' || !numeric_wcs_keyword(card))
        return 0;
    char v[72];
    size_t n = 0;
    for (size_t i = 9; i < 80 && card[i] != '/' && n + 1 < sizeof v; i++)
        if (card[i] != ' ')
            v[n++] = (char)(card[i] == 'D' || card[i] == 'd' ? 'E' : card[i]);
    v[n] = '\0';
    char *end;
    double d = n ? strtod(v, &end) : NAN;
    if (n == 0 || *end != '\0' || !isfinite(d)) {
        fail(e, "body", "header line %d: %.8s must be a finite number, got '%.30s'", line,
             card, v);
        return -1;
    }
    return 0;
}

int params_header_cards(const char *text, size_t len, int max_cards, char **cards, int *nkeys,
                        param_error *e)
{
    *cards = NULL;
    *nkeys = 0;
    /* Raw cards: no newline at all, or a whole FITS file (its first card SIMPLE and a
     * first header block of 2880 bytes without a newline, then cards to END; the data
     * after the header, which may hold any byte, are not read).  A text header that
     * starts with SIMPLE has its first newline at byte 80 or before. */
    int fits_file = len >= 2880 && memchr(text, '\n', 2880) == NULL
                    && strncmp(text, "SIMPLE  =", 9) == 0;
    int raw = fits_file || memchr(text, '\n', len) == NULL;
    if (raw && len % 80 != 0)
        return fail(e, "body", "header must be text with one 80-character card a line, or a "
                    "FITS header of whole 80-character cards (got %zu bytes, %s)", len,
                    fits_file ? "not a whole number of cards" : "without newlines");
    char *out = malloc((size_t)max_cards * 80 + 1);
    if (!out)
        return TESS_ENOMEM;
    int n = 0, seen_end = 0;
    size_t pos = 0;
    int line = 0;
    while (pos < len && !seen_end) {
        size_t l;
        if (raw) {
            l = 80;
        } else {
            const char *nl = memchr(text + pos, '\n', len - pos);
            l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        }
        line++;
        size_t cl = l;
        if (!raw && cl > 0 && text[pos + cl - 1] == '\r')
            cl--;
        if (cl > 80) {
            free(out);
            return fail(e, "body", "header line %d is %zu characters long; FITS cards are 80",
                        line, cl);
        }
        for (size_t i = 0; i < cl; i++) {
            unsigned char ch = (unsigned char)text[pos + i];
            if (ch < 32 || ch > 126) {
                free(out);
                return fail(e, "body", "header line %d has a non-printable character (byte %u)",
                            line, ch);
            }
        }
        int blank = 1;
        for (size_t i = 0; i < cl; i++)
            if (text[pos + i] != ' ')
                blank = 0;
        if (cl >= 3 && strncmp(text + pos, "END", 3) == 0 &&
            (cl == 3 || strspn(text + pos + 3, " ") >= cl - 3)) {
            seen_end = 1;
        } else if (!blank || raw) {
            if (!blank) {
                if (n >= max_cards) {
                    free(out);
                    return fail(e, "body", "header has more than %d cards", max_cards);
                }
                memcpy(out + (size_t)n * 80, text + pos, cl);
                memset(out + (size_t)n * 80 + cl, ' ', 80 - cl);
                if (check_numeric_card(out + (size_t)n * 80, line, e)) {
                    free(out);
                    return TESS_EINVAL;
                }
                n++;
            }
        }
        pos += l + (raw ? 0 : 1);
    }
    if (n == 0) {
        free(out);
        return fail(e, "body", "header has no cards");
    }
    out[(size_t)n * 80] = '\0';
    *cards = out;
    *nkeys = n;
    return 0;
}
