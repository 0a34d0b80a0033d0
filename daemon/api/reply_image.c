/* Encoding of an image result to PNG, JPEG, FITS, NPY or raw float32 for the image handlers. */
#include "daemon/api/handlers.h"
#include "engine/image/encode.h"
#include "daemon/problem.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JPEG quality of rendered images (libjpeg's scale). */
#define REPLY_JPEG_QUALITY 90

void reply_image_shape(hreq *r, out_format fmt, long w, long h)
{
    if (fmt == FMT_RAW)
        snprintf(r->rep.x_shape, sizeof(r->rep.x_shape), "%ld,%ld", h, w);
    else
        r->rep.x_shape[0] = '\0';
}

/* Little-endian float32 of the values, row-major.  Returns malloc'd bytes or NULL. */
static unsigned char *raw_f32(const double *data, size_t n)
{
    unsigned char *out = malloc(n * 4);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        float f = (float)data[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        out[4 * i] = (unsigned char)(u & 0xff);
        out[4 * i + 1] = (unsigned char)((u >> 8) & 0xff);
        out[4 * i + 2] = (unsigned char)((u >> 16) & 0xff);
        out[4 * i + 3] = (unsigned char)(u >> 24);
    }
    return out;
}

void reply_image(hreq *r, const double *data, long w, long h, out_format fmt,
                 const render_params *rp, const char *cards, int ncards)
{
    unsigned char *out = NULL;
    size_t len = 0;
    int rc;
    reply_image_shape(r, fmt, w, h);
    if (fmt == FMT_PNG || fmt == FMT_JPG) {
        uint8_t *rgba = malloc((size_t)w * (size_t)h * 4);
        if (!rgba) {
            problem_reply(r, 500, NULL, "out of memory rendering %ldx%ld pixels", w, h);
            return;
        }
        rc = render_rgba(data, w, h, rp, rgba);
        if (rc == 0)
            rc = fmt == FMT_PNG ? png_encode_rgba(rgba, w, h, &out, &len)
                                : jpeg_encode_rgb(rgba, w, h, REPLY_JPEG_QUALITY, &out, &len);
        free(rgba);
    } else if (fmt == FMT_FITS) {
        rc = fits_encode_f64(data, w, h, 1, cards, ncards, NULL, &out, &len);
    } else if (fmt == FMT_RAW) {
        len = (size_t)w * (size_t)h * 4;
        out = raw_f32(data, (size_t)w * (size_t)h);
        rc = out ? 0 : -1;
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
