/* Order-0 HiPS tiles as doubles, rendered once and shared by the order-0 tiles and the Allsky picture. */
#ifndef TESSERA_DAEMON_API_HIPSBASE_H
#define TESSERA_DAEMON_API_HIPSBASE_H

#include <stdint.h>
#include "daemon/cache/tilecache.h"
#include "engine/hips/healpix.h"

/* Tile (0, npix) of `src` rendered by hips_render_tile at HIPS_TILE_SHIFT in
 * HIPS_ROWS_FITS, what both the tile Norder0/NpixN (of any format) and the Allsky picture
 * (hips_allsky_render_from) are made of: kept in the response cache `cache` under
 * `key` (which must name everything the render depends on: dataset, version, plane,
 * method, max_coord_error, frame) and NPIX, as a body of 8 bytes (the finite count, a
 * native int64) then 512 x 512 native doubles.  One render per key at a time in the
 * process: a caller asking for a tile being rendered waits for it.  Returns the finite
 * count (>= 0) with *held (release with tile_release) and *data (its doubles), or
 * TESS_EINVAL / TESS_ENOMEM with err (nothing held). */
long hipsbase_get(tilecache *cache, const char *key, const hips_source *src, int64_t npix,
                  int galactic, tile **held, const double **data, char *err, size_t errlen);

/* Renders and keeps tile (0, npix) as hipsbase_get does, unless it is kept already or
 * being rendered (then at once): for a caller that needs several, so that it renders
 * those no other thread is rendering before it waits for the others.  Returns 0, or
 * TESS_EINVAL / TESS_ENOMEM with err. */
int hipsbase_prefetch(tilecache *cache, const char *key, const hips_source *src, int64_t npix,
                      int galactic, char *err, size_t errlen);

#endif
