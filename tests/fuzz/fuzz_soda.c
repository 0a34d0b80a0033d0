/* libFuzzer target: the SODA region parser and box (daemon/api/soda.c).  Input: a first
 * byte choosing the parameter (CIRCLE, POLYGON or POS), then its value; a region that
 * parses is checked and boxed on a 48 x 40 TAN image around (83.8, -5.4). */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/soda.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>

#define NX 48
#define NY 40

static skywcs *image_wcs(void)
{
    static const char *const cards[] = {
        "NAXIS   = 2", "NAXIS1  = 48", "NAXIS2  = 40", "CTYPE1  = 'RA---TAN'",
        "CTYPE2  = 'DEC--TAN'", "CRVAL1  = 83.8", "CRVAL2  = -5.4", "CRPIX1  = 24.5",
        "CRPIX2  = 20.5", "CDELT1  = -0.01", "CDELT2  = 0.01", "RADESYS = 'ICRS'"};
    enum { N = sizeof(cards) / sizeof(cards[0]) };
    char text[N * 80 + 1];
    for (int i = 0; i < N; i++)
        snprintf(text + i * 80, 81, "%-80s", cards[i]);
    skywcs *w = NULL;
    char err[256];
    if (skywcs_parse(text, N, &w, err, sizeof err) != 0)
        __builtin_trap();
    return w;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fz_cstr_tail(data, size, 8192);
    if (!s)
        return 0;
    static soda_region g;
    char why[240] = "";
    int which = data[0] % 3;
    int rc = soda_region_parse(which == 0 ? s : NULL, which == 1 ? s : NULL,
                               which == 2 ? s : NULL, &g, why, sizeof why);
    if (rc != 0) {
        if (rc != -1 || !why[0])
            __builtin_trap();
        free(s);
        return 0;
    }
    if (g.n < 0 || g.n > SODA_MAX_POINTS || (g.kind == SODA_POLYGON && (g.nvert < 3 || g.nvert > SODA_MAX_VERTICES)))
        __builtin_trap();
    if (g.kind == SODA_RANGE
        && !(g.shape[0] >= 0 && g.shape[0] < 360 && g.shape[0] <= g.shape[1]
             && g.shape[1] <= g.shape[0] + 360 && g.shape[2] >= -90 && g.shape[2] <= g.shape[3]
             && g.shape[3] <= 90))
        __builtin_trap();
    for (int i = 0; i < g.n; i++)
        if (!isfinite(g.lon[i]) || !isfinite(g.lat[i]))
            __builtin_trap();
    static skywcs *w;
    if (!w)
        w = image_wcs();
    long box[4];
    rc = soda_region_box(w, NX, NY, &g, NULL, box);
    if (rc == 0 && !(box[0] >= 0 && box[0] < box[1] && box[1] <= NX && box[2] >= 0
                     && box[2] < box[3] && box[3] <= NY))
        __builtin_trap();
    if (rc != 0 && rc != 1 && rc != TESS_ENOMEM)
        __builtin_trap();
    free(s);
    return 0;
}
