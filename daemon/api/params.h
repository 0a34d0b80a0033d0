/* Request parsing: query values, slice paths, header bodies, into plain validated structs. */
#ifndef TESSERA_SERVER_PARAMS_H
#define TESSERA_SERVER_PARAMS_H

#include <stddef.h>
#include "engine/image/render.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

/* A parse failure: the parameter at fault and why (for a 400 problem reply). */
typedef struct param_error {
    char parameter[64];
    char detail[256];
} param_error;

/* Lookup of a query parameter by name: returns the value or NULL when absent. */
typedef const char *(*param_lookup)(void *cls, const char *key);

/* Strict numbers: the whole string must parse, be finite and lie in [lo, hi].
 * Return 0 or TESS_EINVAL (TESS_ERANGE when it parses but is outside the range). */
int param_double(const char *s, double lo, double hi, double *out);
int param_long(const char *s, long lo, long hi, long *out);

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

/* GET /api/v1/cutout: every parameter of DESIGN.md, validated. */
typedef struct cutout_params {
    char dataset[72];
    double lon, lat;           /* ra/dec (l/b galactic, ecliptic lon/lat), degrees */
    double fov;                /* degrees, the larger side, (0, 360] */
    long width, height;        /* output pixels, 1..65536 each */
    char projection[4];        /* three-letter wcslib code, upper case */
    sky_frame coordsys;        /* icrs, fk5 (J2000), fk4 (B1950), galactic, ecliptic (J2000) */
    double rotation;           /* degrees */
    rp_method method;
    double max_coord_error;    /* output pixels, >= 0 */
    out_format format;         /* png, jpg or fits */
    render_params render;
    long plane;                /* plane of a cube or frame of a stack, 0-based */
} cutout_params;
int params_cutout_get(param_lookup get, void *cls, cutout_params *p, param_error *e);

/* POST /api/v1/cutout query: dataset, format, method, max_coord_error, plane, rendering. */
int params_cutout_post(param_lookup get, void *cls, cutout_params *p, param_error *e);

/* The part of a slice URL after "slice/": "{xy|xz|yz}/{W}_{H}/{X}_{Y}_{Z}.{png|jpg|fits|
 * npy|raw}".  Sizes 1..65536, offsets 0..2^40 (checked against the dataset by the handler). */
typedef struct slice_params {
    char plane[3];             /* "xy", "xz" or "yz" */
    long w, h, x, y, z;
    out_format format;
} slice_params;
int params_slice_path(const char *s, slice_params *p, param_error *e);

/* Turns the body of a POST cutout into FITS cards: text with one card a line (lines
 * longer than 80 characters are an error, shorter ones are blank-padded, CR LF accepted)
 * or a raw FITS header (a multiple of 80 characters without newlines), or a whole FITS
 * file (first card SIMPLE, a first block of 2880 bytes without a newline, a multiple of 80
 * bytes; the data after END are not read).
 * Stops at END.
 * Only printable ASCII is allowed; numeric WCS cards (NAXISn, CRPIXn, CRVALn, CDELTn,
 * CROTAn, CDi_j, PCi_j, PVi_m, LONPOLE, LATPOLE, EQUINOX) must hold a finite number.
 * At most `max_cards` cards.  *cards is malloc'd
 * (80-character cards, NUL-terminated).  Returns 0, TESS_EINVAL with `e` (parameter
 * "body"), or TESS_ENOMEM. */
int params_header_cards(const char *text, size_t len, int max_cards, char **cards, int *nkeys,
                        param_error *e);

#endif
