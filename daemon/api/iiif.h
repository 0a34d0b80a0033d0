/* IIIF Image API 3.0 request parsing, exposed for tests and fuzzing (daemon/api/iiif.c). */
#ifndef TESSERA_HANDLERS_IIIF_H
#define TESSERA_HANDLERS_IIIF_H

#include "daemon/api/params.h"

/* The validated form of an image request on a W x H picture (top-left origin). */
typedef struct iiif_parsed {
    long x, y, w, h;      /* region, cropped to the image */
    long ow, oh;          /* output size before rotation */
    int mirror;           /* 1 for a "!" rotation */
    int rotation;         /* 0, 90, 180 or 270 (clockwise) */
    int quality;          /* 0 default, 1 color, 2 gray, 3 bitonal */
    int png;              /* 1 png, 0 jpg */
} iiif_parsed;

/* Parses "{region}/{size}/{rotation}/{quality}.{format}" (the part of an image request
 * after the identifier) as handle_iiif does, for a W x H image (W, H >= 1) under
 * limits.max_output_pixels = `max_pixels`.  Returns 0 and fills `q`, or TESS_EINVAL with
 * *status (400, 404 or 413) and `e` naming the part at fault. */
int iiif_parse_image_request(const char *path, long W, long H, long long max_pixels,
                             iiif_parsed *q, int *status, param_error *e);

#endif
