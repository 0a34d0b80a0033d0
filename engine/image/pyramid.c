/* Resolution pyramid: 2x2 means of a plane weighted by counts of finite level-0 pixels. */
#include "engine/image/pyramid.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

int pyramid_top_level(long nx, long ny)
{
    int k = 0;
    while ((nx > 1 || ny > 1) && k < PYRAMID_MAX_LEVEL) {
        nx = (nx + 1) / 2;
        ny = (ny + 1) / 2;
        k++;
    }
    return k;
}

/* Number of level-0 pixels along one axis under pixel i of level k of an axis of n
 * level-0 pixels: min(2^k, n - i 2^k). */
static long block_len(long n, int k, long i)
{
    long b = 1L << k, rest = n - i * b;
    return rest < b ? rest : b;
}

int pyramid_reduce(const rp_plane *src, const uint32_t *counts, int kb, long nx0, long ny0,
                   rp_plane *dst, uint32_t **dst_counts)
{
    memset(dst, 0, sizeof *dst);
    if (dst_counts)
        *dst_counts = NULL;
    long nx = (src->nx + 1) / 2, ny = (src->ny + 1) / 2;
    size_t n = (size_t)nx * (size_t)ny;
    size_t esz = src->dtype == RP_F64 ? sizeof(double) : sizeof(float);
    void *data = malloc(n * esz);
    uint32_t *cnt = dst_counts ? malloc(n * sizeof(uint32_t)) : NULL;
    if (!data || (dst_counts && !cnt)) {
        free(data);
        free(cnt);
        return TESS_ENOMEM;
    }
    for (long j = 0; j < ny; j++) {
        for (long i = 0; i < nx; i++) {
            double sum = 0.0, c = 0.0;
            for (long cj = 2 * j; cj <= 2 * j + 1 && cj < src->ny; cj++) {
                for (long ci = 2 * i; ci <= 2 * i + 1 && ci < src->nx; ci++) {
                    double v = rp_plane_get(src, ci, cj);
                    double w;
                    if (counts)
                        w = (double)counts[(size_t)cj * (size_t)src->nx + (size_t)ci];
                    else if (kb == 0)
                        w = isfinite(v) ? 1.0 : 0.0;
                    else
                        w = (double)block_len(nx0, kb, ci) * (double)block_len(ny0, kb, cj);
                    if (w > 0.0) {
                        sum += w * v;
                        c += w;
                    }
                }
            }
            size_t at = (size_t)j * (size_t)nx + (size_t)i;
            double mean = c > 0.0 ? sum / c : NAN;
            if (src->dtype == RP_F64)
                ((double *)data)[at] = mean;
            else
                ((float *)data)[at] = (float)mean;
            if (cnt)
                cnt[at] = (uint32_t)c;
        }
    }
    *dst = (rp_plane){ data, src->dtype, nx, ny };
    if (dst_counts)
        *dst_counts = cnt;
    return 0;
}

int pyramid_level(const rp_plane *p0, int level, rp_plane *out)
{
    memset(out, 0, sizeof *out);
    if (level < 1 || level > pyramid_top_level(p0->nx, p0->ny))
        return TESS_EINVAL;
    rp_plane cur = *p0;
    uint32_t *counts = NULL;           /* of cur; NULL at level 0 (isfinite is the count) */
    for (int k = 0; k < level; k++) {
        rp_plane next;
        uint32_t *ncounts = NULL;
        int rc = pyramid_reduce(&cur, counts, k, p0->nx, p0->ny, &next, &ncounts);
        if (k > 0)
            free(cur.data);
        free(counts);
        if (rc)
            return rc;
        cur = next;
        counts = ncounts;
    }
    free(counts);
    *out = cur;
    return 0;
}
