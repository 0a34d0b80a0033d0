/* Request parsing the endpoint families share: strict values, formats, rendering, header bodies. */
#include "daemon/api/params.h"
#include "engine/base/error.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int param_fail(param_error *e, const char *parameter, const char *fmt, ...)
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

/* The short name this file's parsers use. */
#define fail param_fail

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

int param_opt_double(param_lookup get, void *cls, const char *key, double lo, double hi,
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

int param_req_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                     double *out, param_error *e)
{
    if (!get(cls, key))
        return fail(e, key, "%s is required", key);
    return param_opt_double(get, cls, key, lo, hi, out, e);
}

int param_opt_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
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

int param_req_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                   param_error *e)
{
    if (!get(cls, key))
        return fail(e, key, "%s is required", key);
    return param_opt_long(get, cls, key, lo, hi, out, e);
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
