/* GET /api/v1/datasets/{name}/slice/...: the parsed slice path (parser of daemon/api/slices.c). */
#ifndef TESSERA_DAEMON_API_SLICES_H
#define TESSERA_DAEMON_API_SLICES_H

#include "daemon/api/params.h"

/* The part of a slice URL after "slice/": "{xy|xz|yz}/{W}_{H}/{X}_{Y}_{Z}.{png|jpg|fits|
 * npy|raw}".  Sizes 1..65536, offsets 0..2^40, 0-based (checked against the dataset by
 * the handler). */
typedef struct slice_params {
    char plane[3];             /* "xy", "xz" or "yz" */
    long w, h, x, y, z;
    out_format format;
} slice_params;

/* Parses `s` into *p.  Returns 0, or TESS_EINVAL with `e` naming "plane", "size",
 * "offset" or "format". */
int slice_parse_path(const char *s, slice_params *p, param_error *e);

#endif
