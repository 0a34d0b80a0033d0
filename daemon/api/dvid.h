/* GET /api/node/{uuid}/{name}/raw/...: the parsed DVID raw-read path (parser of daemon/api/dvid.c). */
#ifndef TESSERA_DAEMON_API_DVID_H
#define TESSERA_DAEMON_API_DVID_H

#include "daemon/api/params.h"
#include "daemon/api/slices.h"

/* The part after "/api/node/": "{uuid}/{name}/raw/{dims}/{size}/{offset}[/{format}]" in
 * DVID's order: dims "0_1" or "xy", "0_2" or "xz", "1_2" or "yz" (axis 0 = x, 1 = y,
 * 2 = z); size "{W}_{H}" along the two axes of dims; offset "{X}_{Y}_{Z}", the first
 * voxel, 0-based; format "png" (the default) or "octet-stream".  The uuid (any segment)
 * names no version: Tessera serves its datasets as they are. */
typedef struct dvid_params {
    char name[72];             /* the dataset */
    slice_params cut;          /* plane, size and offset as the slice route takes them */
    int octets;                /* 1: octet-stream, 0: PNG */
} dvid_params;

/* Parses `s` into *p.  Returns 0, or TESS_EINVAL with `e` naming "path", "dims", "size",
 * "offset" or "format". */
int dvid_parse_path(const char *s, dvid_params *p, param_error *e);

#endif
