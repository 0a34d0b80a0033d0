/* HiPS requests: the parsed form of /hips/{name}/... paths and their query parameters. */
#ifndef TESSERA_DAEMON_API_HIPS_H
#define TESSERA_DAEMON_API_HIPS_H

#include <stdint.h>
#include "engine/image/render.h"
#include "engine/hips/healpix.h"
#include "engine/sky/reproject.h"
#include "daemon/api/params.h"

/* What a /hips/ path asks for (IVOA HiPS 1.0, 4.1 directory structure, 4.3.2 Allsky,
 * 4.4.1 properties, 4.4.5 index.html). */
typedef enum {
    HIPS_REQ_INDEX = 0,      /* {name} or {name}/: a small HTML page */
    HIPS_REQ_PROPERTIES,     /* {name}/properties */
    HIPS_REQ_TILE,           /* {name}/Norder{K}/Dir{D}/Npix{N}[_{z}].{png|jpg|fits} */
    HIPS_REQ_ALLSKY,         /* {name}/Norder3/Allsky[_{z}].{png|jpg|fits} */
    HIPS_REQ_MOC             /* {name}/Moc.fits (4.4.2) */
} hips_req_kind;

typedef struct hips_path {
    char name[72];           /* dataset name */
    hips_req_kind kind;
    int order;               /* K, 0..29 (tiles; 3 for Allsky) */
    int64_t npix;            /* N, 0 <= N < 12 4^K (tiles) */
    hips_format format;      /* tiles and Allsky */
    long plane;              /* the plane z of a HiPS cube's tile or Allsky named with the
                                suffix _{z} [HiPS 4.2.3] (0-based), -1 without it */
} hips_path;

/* Parses the part of the URL after "/hips/".  Returns 0 and fills `p`; or TESS_ENOTFOUND
 * (a path that names no HiPS resource, a Dir that is not N / 10000 * 10000, an Allsky at
 * an order other than 3: 404, `e` says why) or TESS_EINVAL (a malformed or out-of-range
 * Norder, Npix, plane suffix or extension: 400, `e` names the part — "Norder", "Dir",
 * "Npix", "plane", "format" — or "dataset" for a name too long).  Numbers, the plane
 * suffix's included, are written without leading zeros (404 else). */
int hips_parse_path(const char *rest, hips_path *p, param_error *e);

/* The query parameters of tiles and Allsky pictures (all optional). */
typedef struct hips_query {
    rp_method method;        /* nearest, bilinear (default), bicubic, lanczos3 */
    double max_coord_error;  /* tile pixels, 0..10 (default 0.001; handle_hips makes it
                                HIPS_PICTURE_MCE for PNG and JPEG when not given) */
    long plane;              /* plane of a cube, 0-based (default 0) */
    render_params render;    /* stretch, min_cut, max_cut, cmap (docs/DESIGN.md) */
} hips_query;

/* Parses method, max_coord_error, plane and the rendering parameters over their
 * defaults.  Returns 0, or TESS_EINVAL with `e` naming the parameter (method exact is
 * refused: HiPS tiles are resampled by interpolation). */
int hips_parse_query(param_lookup get, void *cls, hips_query *q, param_error *e);

#endif
