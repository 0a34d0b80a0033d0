/* GET and POST /api/v1/cutout: the parsed, validated request (parser of daemon/api/cutout.c). */
#ifndef TESSERA_HANDLERS_CUTOUT_H
#define TESSERA_HANDLERS_CUTOUT_H

#include "daemon/api/params.h"
#include "engine/sky/reproject.h"
#include "engine/sky/skywcs.h"

/* A cutout request, every parameter of the README's API table validated. */
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

/* GET /api/v1/cutout: dataset, ra, dec, fov, width, height (required), projection,
 * coordsys, rotation_angle, method, max_coord_error, format, plane and the rendering
 * parameters.  Returns 0, or TESS_EINVAL with `e` naming the parameter. */
int cutout_parse_get(param_lookup get, void *cls, cutout_params *p, param_error *e);

/* POST /api/v1/cutout query (the target is the body): dataset, format, method,
 * max_coord_error, plane, rendering.  Returns 0, or TESS_EINVAL with `e`. */
int cutout_parse_post(param_lookup get, void *cls, cutout_params *p, param_error *e);

#endif
