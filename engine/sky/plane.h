/* A 2-D pixel array in memory, float32 or float64, as the reprojection engine reads it. */
#ifndef TESSERA_ENGINE_SKY_PLANE_H
#define TESSERA_ENGINE_SKY_PLANE_H

#include <stddef.h>

typedef enum { RP_F32 = 0, RP_F64 = 1 } rp_dtype;

/* nx columns (NAXIS1) by ny rows (NAXIS2), row-major, row 0 = FITS row 1, native byte
 * order, NaN = no data.  Pixel (i, j) is at data[j * nx + i]; pixel centres are at
 * integer 0-based coordinates. */
typedef struct rp_plane {
    void *data;
    rp_dtype dtype;
    long nx, ny;
} rp_plane;

/* The value of pixel (i, j) as a double (no bounds check). */
static inline double rp_plane_get(const rp_plane *p, long i, long j)
{
    size_t k = (size_t)j * (size_t)p->nx + (size_t)i;
    return p->dtype == RP_F32 ? (double)((const float *)p->data)[k] : ((const double *)p->data)[k];
}

#endif
