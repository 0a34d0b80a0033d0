/* A region of the sky in which collection members are looked for: a circle, a polygon or
 * an ra/dec range.  Shared by the discovery queries (daemon/api/sia.c: POS) and the jobs
 * over a collection (daemon/jobs/job_mosaic.c: "region"). */
#ifndef TESSERA_DAEMON_COLLECTION_COLREGION_H
#define TESSERA_DAEMON_COLLECTION_COLREGION_H

#include "daemon/collection/colindex.h"

/* A range's parallels and meridians are cut in this many great-circle pieces each. */
#define COL_RANGE_STEPS 8
/* The most vertices of a polygon. */
#define COL_POLY_MAX 32

typedef enum col_region_kind {
    COL_REGION_CIRCLE,   /* ra dec radius */
    COL_REGION_RANGE,    /* ra_min ra_max dec_min dec_max (-Inf, +Inf allowed) */
    COL_REGION_POLYGON   /* ra1 dec1 ra2 dec2 ... (3 to COL_POLY_MAX vertices) */
} col_region_kind;

/* A circle, or a polygon (a range is made one, `range` keeping its bounds, `all` set when
 * it spans a hemisphere or more). Degrees, ICRS. */
typedef struct col_region {
    int circle;
    double ra, dec, r;
    double poly[2 * 4 * COL_RANGE_STEPS];
    int n;
    int range, all;
    double lo[2], hi[2];
} col_region;

/* Makes *g of kind k from the n numbers v.  Returns NULL, or why not (a sentence naming
 * what the kind takes, static text). */
const char *col_region_make(col_region *g, col_region_kind k, const double *v, int n);

/* Whether member m's footprint overlaps g. */
int col_region_overlaps(const col_region *g, const col_member *m);

#endif
