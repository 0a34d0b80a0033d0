/* Request parsing the endpoint families share: strict values, formats, rendering, header bodies. */
#include "daemon/api/params.h"
#include "engine/base/error.h"
#include "engine/fits/fitscard.h"

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

int param_path_digits(const char **s, long *out)
{
    const char *q = *s;
    long v = 0;
    int n = 0;
    while (isdigit((unsigned char)*q)) {
        if (++n > 12)
            return TESS_EINVAL;
        v = v * 10 + (*q++ - '0');
    }
    if (n == 0)
        return TESS_EINVAL;
    *out = v;
    *s = q;
    return 0;
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

/* The answer for number parameter `key` given as `s` (NULL: absent) once param_double or
 * param_long returned rc: 0, or the problem naming `range` ("LO and HI") or what the value
 * must be (`kind`). */
static int number_result(param_error *e, const char *key, const char *s, int rc,
                         const char *range, const char *kind)
{
    if (rc == TESS_ERANGE)
        return fail(e, key, "%s must be between %s, got '%.40s'", key, range, s);
    if (rc)
        return fail(e, key, "%s must be %s, got '%.40s'", key, kind, s);
    return 0;
}

int param_opt_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                     double *out, param_error *e)
{
    const char *s = get(cls, key);
    char range[64];
    snprintf(range, sizeof(range), "%g and %g", lo, hi);
    return number_result(e, key, s, s ? param_double(s, lo, hi, out) : 0, range,
                         "a finite number");
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
    char range[64];
    snprintf(range, sizeof(range), "%ld and %ld", lo, hi);
    return number_result(e, key, s, s ? param_long(s, lo, hi, out) : 0, range, "an integer");
}

int param_req_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                   param_error *e)
{
    if (!get(cls, key))
        return fail(e, key, "%s is required", key);
    return param_opt_long(get, cls, key, lo, hi, out, e);
}

int param_plane(param_lookup get, void *cls, long *z, param_error *e)
{
    return param_opt_long(get, cls, "plane", 0, PARAM_PLANE_MAX, z, e);
}

int params_render(param_lookup get, void *cls, render_params *rp, param_error *e)
{
    render_params_default(rp);
    const char *s;
    if ((s = get(cls, "stretch")) && render_stretch_parse(s, &rp->stretch))
        return fail(e, "stretch", "stretch must be linear, sqrt, log, asinh or power, got '%.40s'", s);
    if ((s = get(cls, "cmap")) && render_cmap_parse(s, &rp->cmap)) {
        char names[320];
        render_cmap_list(names, sizeof names);
        return fail(e, "cmap", "cmap must be %s; got '%.40s'", names, s);
    }
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

int params_header_cards(const char *text, size_t len, int max_cards, char **cards, int *nkeys,
                        param_error *e)
{
    char why[256];
    *cards = NULL;
    *nkeys = 0;
    if (fitscard_text_check_cut(text, len, why, sizeof why))
        return fail(e, "body", "%s", why);
    int rc = fitscard_parse(text, len, max_cards, cards, nkeys, why, sizeof why);
    if (rc == TESS_EINVAL)
        return fail(e, "body", "%s", why);
    return rc;
}
