/* GET and POST /api/v1/cutout: the parsed, validated request (parser of daemon/api/cutout.c). */
#ifndef TESSERA_DAEMON_API_CUTOUT_H
#define TESSERA_DAEMON_API_CUTOUT_H

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
    double pv[SKYWCS_CUTOUT_PVN];  /* pv2_0 .. pv2_29: PV2_m of the projection, NaN absent */
    rp_method method;
    double max_coord_error;    /* output pixels, >= 0 */
    out_format format;         /* png, jpg or fits */
    render_params render;
    long plane;                /* plane of a cube or frame of a stack, 0-based */
    int has_wcs;               /* GET with `wcs`: the target is that header
                                  (cutout_wcs_cards); lon ... rotation are unset */
    int solar_surface;         /* SOLAR_SPHERE (default) or SOLAR_SCREEN: solar_surface */
} cutout_params;

/* The most cards a `wcs` parameter may hold. */
#define CUTOUT_WCS_MAX_CARDS 1000

/* GET /api/v1/cutout and /hips-image-services/hips2fits (hips2fits' parameter set):
 * dataset (or hips: the dataset name, or the creator_did ivo://tessera/NAME of its HiPS),
 * then either ra, dec, fov, width, height (required), projection, coordsys,
 * rotation_angle, pv2_0 .. pv2_29 (the projection's PV2_m cards), or wcs alone
 * (p->has_wcs; its text is for cutout_wcs_cards); method,
 * max_coord_error, solar_surface, format, plane and the rendering parameters (cmap is
 * not looked at for format=fits).  For coordsys=helioprojective, ra, dec and fov are in
 * arcseconds (Tx, Ty; fov up to 1296000) and come back in degrees in `p`; for
 * stonyhurst and carrington they are heliographic longitude and latitude in degrees.
 * Returns 0, or TESS_EINVAL with `e` naming the parameter. */
int cutout_parse_get(param_lookup get, void *cls, cutout_params *p, param_error *e);

/* The `wcs` parameter of hips2fits: a JSON object of header cards, as astroquery sends
 * it ({"NAXIS1": 300, "CTYPE1": "RA---TAN", "CRVAL1": 83.8, ...}), into *cards
 * (malloc'd 80-character cards, NUL-terminated) and *nkeys, in the object's order:
 * strings as string cards (COMMENT and HISTORY as commentary cards), booleans as
 * logical, integers as integer and other numbers as real cards.  Keys must be FITS
 * keywords, at most CUTOUT_WCS_MAX_CARDS.  Returns 0, TESS_EINVAL with `e` (parameter
 * "wcs"), or TESS_ENOMEM. */
int cutout_wcs_cards(const char *text, char **cards, int *nkeys, param_error *e);

/* POST /api/v1/cutout query (the target is the body): dataset, format, method,
 * max_coord_error, solar_surface, plane, rendering.  Returns 0, or TESS_EINVAL with `e`. */
int cutout_parse_post(param_lookup get, void *cls, cutout_params *p, param_error *e);

struct hreq;
struct collection;

/* The values of collection c on a grid as its cutouts make them (each member the index
 * says overlaps the grid reprojected with `method` within max_coord_error output pixels,
 * its footprint the weight, combined with the collection's `combine`): `cards` (nkeys
 * 80-character cards) the grid's celestial WCS, w x h pixels, into dst (w h doubles, row
 * 0 = FITS row 1, NaN where no member reaches).  Returns the number of finite pixels (0:
 * none), or -1 with r's problem reply set (413: more than 64 members; 500). */
long cutout_collection_values(struct hreq *r, struct collection *c, const char *cards,
                              int nkeys, long w, long h, rp_method method,
                              double max_coord_error, double *dst);

#endif
