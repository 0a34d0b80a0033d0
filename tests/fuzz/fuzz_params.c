/* libFuzzer target: the query-string parsers the handlers call, of cutouts (GET and POST,
 * daemon/api/cutout.c), HiPS tiles (daemon/api/hips.c) and rendering (daemon/api/params.c),
 * slice paths (daemon/api/slices.c), Zarr keys (daemon/api/zarr.c), DVID raw-read paths
 * (daemon/api/dvid.c), and the cutout WCS built from parameters that parse.
 * Input: "selector byte" + a query string or path (selector 0xfe: a Zarr key, 0xff: a
 * DVID path, else by its value modulo 5). */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/api/cutout.h"
#include "daemon/api/dvid.h"
#include "daemon/api/hips.h"
#include "daemon/api/params.h"
#include "daemon/api/slices.h"
#include "daemon/api/zarr.h"
#include "engine/sky/skywcs.h"

#include <math.h>
#include <stdio.h>

static void check_cutout(const cutout_params *p)
{
    /* What the GET handler does next with parameters that passed validation. */
    char *cards = NULL;
    int nkeys = 0;
    char err[256];
    if (p->width > 4096 || p->height > 4096)
        return;
    if (skywcs_cutout_header(p->lon, p->lat, p->fov, p->width, p->height, p->projection,
                             p->coordsys, p->rotation, p->pv, &cards, &nkeys, err, sizeof err) == 0) {
        skywcs *w = NULL;
        if (skywcs_parse(cards, nkeys, &w, err, sizeof err) == 0) {
            skywcs *cel = skywcs_celestial(w);
            if (cel) {
                double x = 0.5 * (double)p->width, y = 0.5 * (double)p->height, lon, lat;
                skywcs_pix2sky(cel, 1, &x, &y, &lon, &lat);
                skywcs_free(cel);
            }
        }
        skywcs_free(w);
    }
    free(cards);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fz_cstr_tail(data, size, 8192);
    if (!s)
        return 0;
    param_error e;
    memset(&e, 0, sizeof e);
    if (data[0] == 0xfe) {
        zarr_key k;
        if (zarr_parse_key(s, &k) == 0 && k.kind == ZARR_KEY_CHUNK &&
            (k.nidx < 2 || k.nidx > 3 || k.array > ZARR_MAX_LEVEL))
            __builtin_trap(); /* a chunk key the handler cannot index */
        free(s);
        return 0;
    }
    if (data[0] == 0xff) {
        dvid_params dp;
        if (dvid_parse_path(s, &dp, &e) == 0 &&
            (dp.cut.w < 1 || dp.cut.h < 1 || dp.cut.w > 65536 || dp.cut.h > 65536 ||
             !dp.name[0]))
            __builtin_trap();
        free(s);
        return 0;
    }
    unsigned sel = data[0] % 5;
    if (sel == 4) {
        slice_params sp;
        slice_parse_path(s, &sp, &e);
        free(s);
        return 0;
    }
    fz_query q;
    fz_query_split(s, &q);
    switch (sel) {
    case 0: {
        cutout_params p;
        int ok = cutout_parse_get(fz_query_get, &q, &p, &e) == 0;
        if (ok && p.has_wcs) {
            /* hips2fits' wcs= header: what the handler turns it into */
            char *cards = NULL;
            int nkeys = 0;
            if (cutout_wcs_cards(fz_query_get(&q, "wcs"), &cards, &nkeys, &e) == 0 &&
                (!cards || (int)strlen(cards) != nkeys * 80))
                __builtin_trap();
            free(cards);
        } else if (ok) {
            if (!(p.fov > 0 && p.fov <= 360) || p.width < 1 || p.height < 1)
                __builtin_trap(); /* validation let an out-of-range value through */
            check_cutout(&p);
        }
        break;
    }
    case 1: {
        cutout_params p;
        cutout_parse_post(fz_query_get, &q, &p, &e);
        break;
    }
    case 2: {
        hips_query hq;
        hips_parse_query(fz_query_get, &q, &hq, &e);
        break;
    }
    default: {
        render_params rp;
        if (params_render(fz_query_get, &q, &rp, &e) == 0) {
            char key[160];
            params_render_key(&rp, key, sizeof key);
        }
        break;
    }
    }
    /* The problem detail must be a terminated string of bounded length. */
    if (strnlen(e.detail, sizeof e.detail) == sizeof e.detail ||
        strnlen(e.parameter, sizeof e.parameter) == sizeof e.parameter)
        __builtin_trap();
    free(s);
    return 0;
}
