/* Request parsing the endpoint families share: strict values, formats, rendering, header bodies.
 *
 * Each family's own parser stands in its file (cutout.h, slices.h, hips.h, iiif.h); what
 * they share is here.  Failures fill a param_error for a 400 problem reply. */
#ifndef TESSERA_DAEMON_API_PARAMS_H
#define TESSERA_DAEMON_API_PARAMS_H

#include <stddef.h>
#include "engine/image/render.h"

/* A parse failure: the parameter at fault and why (for a 400 problem reply). */
typedef struct param_error {
    char parameter[64];
    char detail[512];
} param_error;

/* Lookup of a query parameter by name: returns the value or NULL when absent. */
typedef const char *(*param_lookup)(void *cls, const char *key);

/* Strict numbers: the whole string must parse, be finite and lie in [lo, hi].
 * Return 0 or TESS_EINVAL (TESS_ERANGE when it parses but is outside the range). */
int param_double(const char *s, double lo, double hi, double *out);
int param_long(const char *s, long lo, long hi, long *out);

/* Reads the decimal number of 1 to 12 digits at *s into *out and moves *s past it (for
 * numbers inside URL paths).  Returns 0, or TESS_EINVAL (no digit, or a 13th) with *s
 * unchanged. */
int param_path_digits(const char **s, long *out);

/* Fills `e` (when not NULL) with `parameter` and the formatted detail.  Returns TESS_EINVAL. */
int param_fail(param_error *e, const char *parameter, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Query parameter `key` as a strict number in [lo, hi] (param_double, param_long): the
 * _opt forms keep *out when it is absent, the _req forms fail then.  Return 0 or
 * TESS_EINVAL with `e` naming `key` ("KEY is required", "... must be between LO and HI",
 * "... must be a finite number" or "an integer"). */
int param_opt_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                     double *out, param_error *e);
int param_req_double(param_lookup get, void *cls, const char *key, double lo, double hi,
                     double *out, param_error *e);
int param_opt_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                   param_error *e);
int param_req_long(param_lookup get, void *cls, const char *key, long lo, long hi, long *out,
                   param_error *e);

/* The plane a request names, as a query parameter (?plane=, default 0) or in a path
 * (a HiPS tile's _{z}): an integer 0..PARAM_PLANE_MAX.  param_plane reads ?plane= into
 * *z (kept when absent); 0 or TESS_EINVAL with `e` naming "plane".  Whether the dataset
 * has that plane is told once, by handler_plane (handlers.h). */
#define PARAM_PLANE_MAX (1L << 30)
int param_plane(param_lookup get, void *cls, long *z, param_error *e);

/* FMT_RAW: little-endian float32, row-major (row 0 = FITS row 1), no header: the shape
 * travels in the X-Shape response header. */
typedef enum { FMT_PNG, FMT_FITS, FMT_NPY, FMT_JPG, FMT_RAW } out_format;
int out_format_parse(const char *s, out_format *f);   /* "png", "fits", "npy", "jpg", "raw" */
const char *out_format_name(out_format f);
const char *out_format_mime(out_format f);            /* image/png, application/fits, ... */

/* Rendering parameters (stretch, min_cut, max_cut, cmap) over their defaults. */
int params_render(param_lookup get, void *cls, render_params *rp, param_error *e);

/* Canonical text of rendering parameters, for cache keys (e.g. "asinh,0.5%,99.5%,grey").
 * Cannot fail; truncates to `len`. */
void params_render_key(const render_params *rp, char *out, size_t len);

/* Turns the body of a POST cutout into FITS cards: fitscard_parse (engine/fits/fitscard.h:
 * text with one card a line, raw 80-character cards, or a whole FITS file; up to END;
 * printable ASCII only; numeric WCS cards finite), at most `max_cards` cards.  Text whose
 * last line lacks its line end and is not a whole card is refused as a truncated upload
 * (fitscard_text_check_cut), as are raw cards or a FITS file opening with SIMPLE (or
 * XTENSION) without END, whatever their length.  *cards is
 * malloc'd (80-character cards, NUL-terminated).  Returns 0, TESS_EINVAL with `e`
 * (parameter "body"), or TESS_ENOMEM. */
int params_header_cards(const char *text, size_t len, int max_cards, char **cards, int *nkeys,
                        param_error *e);

#endif
