/* SODA 1.0 sky regions: CIRCLE, POLYGON and POS parsed, and the pixel box a region
 * selects on a celestial image, bounded in work (vo.c computes it on the pool). */
#ifndef TESSERA_DAEMON_API_SODA_H
#define TESSERA_DAEMON_API_SODA_H

#include <stddef.h>
#include "engine/sky/skywcs.h"

#define SODA_MAX_POINTS 4096      /* boundary points of a region */
#define SODA_MAX_VERTICES 256     /* vertices of a POLYGON */

enum { SODA_NONE, SODA_CIRCLE, SODA_RANGE, SODA_POLYGON };

/* A region, ICRS degrees: its shape (circle: ra dec r; range: lon0 lon1 lat0 lat1 with
 * 0 <= lon0 < 360 and lon0 < lon1 <= lon0 + 360; polygon: vertices as lon, lat pairs,
 * edges on great circles as DALI 1.1 defines them) and its boundary as a closed ring of
 * points (lon, lat pairs, in order along the edge). */
typedef struct soda_region {
    int kind;                /* SODA_*; SODA_NONE with `whole` 0: no region given */
    int whole;               /* the region covers every longitude and latitude */
    double shape[4];
    double vert[2 * SODA_MAX_VERTICES];
    double vu[3 * SODA_MAX_VERTICES];   /* the vertices' unit vectors */
    int nvert;
    double lon[SODA_MAX_POINTS], lat[SODA_MAX_POINTS];
    int n;
} soda_region;

/* Reads up to max numbers separated by blanks, tabs or commas from s; "+Inf", "-Inf"
 * allowed, NaN not.  Returns how many, -2 when s holds more than max, -1 for anything
 * else in s. */
int soda_read_numbers(const char *s, double *v, int max);

/* Parses the values of CIRCLE, POLYGON and POS (each NULL when absent; at most one
 * given) into g: CIRCLE "ra dec r" (r in (0, 180]), POLYGON "ra dec ..." (3 to
 * SODA_MAX_VERTICES vertices), POS "CIRCLE ...", "RANGE ra1 ra2 dec1 dec2" (each pair
 * in order; -Inf as a lower and +Inf as an upper bound, declinations within -90..90;
 * a longitude interval of 360 degrees or more is every longitude) or "POLYGON ...".
 * All degrees.  None given: g->kind SODA_NONE.  Returns 0, or -1 with `why` (the
 * UsageError's text, naming the value at fault). */
int soda_region_parse(const char *circle, const char *polygon, const char *pos,
                      soda_region *g, char *why, size_t len);

/* Whether the ICRS position (lon, lat), degrees, lies in g.  Cannot fail. */
int soda_region_contains(const soda_region *g, double lon, double lat);

/* The pixel box [box[0], box[1]) x [box[2], box[3]) (0-based, clipped to the image) of
 * the pixels of an nx x ny image with celestial WCS `cel` (a private copy: the call
 * uses it) that region g selects.  Where the whole boundary projects onto the image's
 * plane, the box is that of the region clipped to the image, from the boundary's points
 * inside, its crossings of the image's edges and the corners inside the region; else
 * from pixel centres on a grid tested against the region (every pixel of images up to
 * 512 on a side for circles and ranges; for polygons a coarser grid, at most
 * SODA_GRID_TESTS vertex tests in all, the box widened by the grid step).  `cancel`
 * (may be NULL) is polled between rows.  Returns 0, 1 (the region misses the image),
 * TESS_ECANCELED or TESS_ENOMEM. */
#define SODA_GRID_TESTS (1L << 22)
int soda_region_box(skywcs *cel, long nx, long ny, const soda_region *g,
                    const volatile int *cancel, long box[4]);

#endif
