/* Rendering of physical pixel values to 8-bit RGBA: cut levels, stretch, colour map. */
#ifndef TESSERA_ENGINE_IMAGE_RENDER_H
#define TESSERA_ENGINE_IMAGE_RENDER_H

#include <stdint.h>
#include <stddef.h>

typedef enum { STRETCH_LINEAR, STRETCH_SQRT, STRETCH_LOG, STRETCH_ASINH, STRETCH_POWER } render_stretch;
typedef enum {
    CMAP_GREY, CMAP_VIRIDIS, CMAP_INFERNO, CMAP_MAGMA, CMAP_PLASMA, CMAP_CUBEHELIX,
    CMAP_GREYS, CMAP_COOLWARM, CMAP_RDBU, CMAP_TWILIGHT, CMAP_TURBO, CMAP_JET,
    CMAP_COUNT,
    /* A map or'ed with CMAP_REVERSED runs the other way (matplotlib's "_r"). */
    CMAP_REVERSED = 0x100
} render_cmap;

/* A cut level: an absolute value, or a percentile (0..100) of the finite pixels. */
typedef struct render_cut {
    double value;
    int is_percent;
} render_cut;

typedef struct render_params {
    render_stretch stretch;   /* default STRETCH_LINEAR */
    render_cut min_cut;       /* default 0.5% */
    render_cut max_cut;       /* default 99.5% */
    render_cmap cmap;         /* default CMAP_GREY */
} render_params;

/* Fills `p` with the defaults above.  Cannot fail. */
void render_params_default(render_params *p);

/* Parsers for the query-parameter forms of docs/DESIGN.md, "Query forms" ("asinh",
 * "viridis", "12.5", "99.5%").  Colour maps: grey, viridis, inferno, magma, plasma,
 * cubehelix, and matplotlib's Greys, coolwarm, RdBu, twilight, turbo and jet (tables of
 * engine/image/cmap_mpl.h); any of them with "_r" reversed (gray_r, RdBu_r ...).
 * render_cmap_parse also takes "gray" and matplotlib's names of the nearest maps: gray,
 * binary_r, gist_gray, gist_yarg_r, bone (grey), cividis (viridis), hot, afmhot,
 * gist_heat (inferno).  Return 0, or TESS_EINVAL for an unknown name / malformed or
 * non-finite number / percentile outside 0..100. */
int render_stretch_parse(const char *s, render_stretch *out);
int render_cmap_parse(const char *s, render_cmap *out);
int render_cut_parse(const char *s, render_cut *out);

/* Canonical names, for cache keys and messages. */
const char *render_stretch_name(render_stretch s);
const char *render_cmap_name(render_cmap c);

/* Resolves the cut levels of `p` against the finite values of `data` (n values):
 * percentiles are taken over finite pixels (linear interpolation between order
 * statistics, as numpy.percentile).  Returns 0, or TESS_ENOMEM. When no pixel is finite,
 * lo = hi = 0. */
int render_resolve_cuts(const double *data, size_t n, const render_params *p, double *lo, double *hi);

/* render_resolve_cuts over n single-precision values (each widened to double first, so a
 * float plane and its double copy give the same cuts).  Returns 0, or TESS_ENOMEM. */
int render_resolve_cuts_f32(const float *data, size_t n, const render_params *p, double *lo,
                            double *hi);

/* Renders a w x h array to RGBA (4*w*h bytes).  `data` is row-major with row 0 = FITS
 * row 1 (the bottom of the picture); `rgba` row 0 is the top of the picture, so FITS row
 * 1 ends at the bottom.  Values are clipped to [lo, hi] (from render_resolve_cuts),
 * normalised to t in [0, 1], stretched (sqrt: sqrt t; log: log(1000 t + 1)/log(1001);
 * asinh: asinh(10 t)/asinh(10); power: t^2, as in astropy.visualization's defaults),
 * quantised to 255 levels k = round(254 s) and coloured with entry (255 k + 127) / 254
 * of the map's 256-entry table (both ends included).  NaN pixels are transparent (alpha 0),
 * others opaque.  Returns 0, or
 * TESS_ENOMEM, TESS_EINVAL (w or h not positive), TESS_ERANGE (size overflows). */
int render_rgba(const double *data, long w, long h, const render_params *p, uint8_t *rgba);

/* render_rgba with the cut levels given: `lo` and `hi` (physical values) replace the
 * cuts of `p`, whose stretch and colour map still apply.  Tiles of one image rendered
 * with the cuts of the whole image (planestore_cuts) then match at their seams.  Same
 * layout and errors as render_rgba. */
int render_rgba_cuts(const double *data, long w, long h, const render_params *p, double lo,
                     double hi, uint8_t *rgba);

#endif
