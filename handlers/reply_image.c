/* Encoding of an image result to PNG, FITS or NPY for the image handlers. */
#include "handlers/handlers.h"
#include "imageio/encode.h"
#include "server/problem.h"

#include <stdint.h>
#include <stdlib.h>

void reply_image(hreq *r, const double *data, long w, long h, out_format fmt,
                 const render_params *rp, const char *cards, int ncards)
{
    unsigned char *out = NULL;
    size_t len = 0;
    int rc;
    if (fmt == FMT_PNG) {
        uint8_t *rgba = malloc((size_t)w * (size_t)h * 4);
        if (!rgba) {
            problem_reply(r, 500, NULL, "out of memory rendering %ldx%ld pixels", w, h);
            return;
        }
        rc = render_rgba(data, w, h, rp, rgba);
        if (rc == 0)
            rc = png_encode_rgba(rgba, w, h, &out, &len);
        free(rgba);
    } else if (fmt == FMT_FITS) {
        rc = fits_encode_f64(data, w, h, 1, cards, ncards, NULL, &out, &len);
    } else {
        rc = npy_encode_f64(data, w, h, &out, &len);
    }
    if (rc || !out) {
        free(out);
        problem_reply(r, 500, NULL, "could not encode the %s result", out_format_name(fmt));
        return;
    }
    hreq_reply_tile(r, 200, tile_new_take(out, len, out_format_mime(fmt)));
}
