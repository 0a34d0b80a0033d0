/* libFuzzer target: the body of POST /api/v1/cutout, a FITS header as text (one card a
 * line) or raw 80-column cards: params_header_cards, then what handle_cutout_post does
 * with the cards (NAXISn, skywcs_parse through wcslib, the celestial axes, one pixel). */
#include "tests/fuzz/fuzz_common.h"
#include "engine/fits/fitscard.h"
#include "engine/sky/skywcs.h"
#include "daemon/api/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    /* The server NUL-terminates bodies but passes the length: embedded NULs included. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *cards = NULL;
    int nkeys = 0;
    param_error e;
    if (params_header_cards(text, size, 10000, &cards, &nkeys, &e) == 0) {
        if (nkeys < 0 || nkeys > 10000 || strlen(cards) != (size_t)nkeys * 80)
            __builtin_trap();
        char val[80];
        long n1 = 0, n2 = 0;
        if (fitscard_get(cards, nkeys, "NAXIS1", val, sizeof val))
            param_long(val, 1, 65536, &n1);
        if (fitscard_get(cards, nkeys, "NAXIS2", val, sizeof val))
            param_long(val, 1, 65536, &n2);
        char err[256];
        skywcs *w = NULL;
        if (skywcs_parse(cards, nkeys, &w, err, sizeof err) == 0) {
            skywcs *cel = skywcs_celestial(w);
            if (cel) {
                double x = n1 > 0 ? 0.5 * (double)n1 : 1.0, y = n2 > 0 ? 0.5 * (double)n2 : 1.0;
                double lon, lat;
                skywcs_pix2sky(cel, 1, &x, &y, &lon, &lat);
                skywcs_sky2pix(cel, 1, &lon, &lat, &x, &y);
                skywcs_free(cel);
            }
        }
        skywcs_free(w);
        free(cards);
    }
    free(text);
    return 0;
}
