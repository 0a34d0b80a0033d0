/* IIIF Image API 3.0 request parsing: what handle_iiif calls (daemon/api/iiif.c), for tests and fuzzing. */
#ifndef TESSERA_DAEMON_API_IIIF_H
#define TESSERA_DAEMON_API_IIIF_H

#include "daemon/api/params.h"

/* The path after "/iiif/3/" cut at each '/' (Image API §3, §4): "{identifier}" or
 * "{identifier}/" (the base URI), "{identifier}/info.json", or an image request
 * "{identifier}/{region}/{size}/{rotation}/{quality}.{format}". */
#define IIIF_MAX_SEGMENTS 6
typedef enum { IIIF_PATH_BASE, IIIF_PATH_INFO, IIIF_PATH_IMAGE, IIIF_PATH_MANIFEST } iiif_path_kind;
typedef struct iiif_path {
    const char *path;         /* the path as given (the caller's; must outlive this) */
    char *copy;               /* malloc'd storage of the segments */
    char *seg[IIIF_MAX_SEGMENTS]; /* seg[0] the identifier; of a longer path only the
                                     first IIIF_MAX_SEGMENTS are kept */
    int nseg;                 /* 1..IIIF_MAX_SEGMENTS */
    iiif_path_kind kind;      /* IMAGE for every shape but BASE and INFO: iiif_parse_image
                                 tells what is wrong with it */
} iiif_path;

/* Splits `path` into *p.  Returns 0 or TESS_ENOMEM; release with iiif_path_release (NULL
 * is ignored). */
int iiif_path_split(const char *path, iiif_path *p);
void iiif_path_release(iiif_path *p);

typedef enum { IIIF_Q_DEFAULT, IIIF_Q_COLOR, IIIF_Q_GRAY, IIIF_Q_BITONAL } iiif_quality;
typedef enum { IIIF_F_PNG, IIIF_F_JPG } iiif_format;

/* A parsed and validated image request (Image API §4) on a W x H picture whose row 0 is
 * the top (FITS row NAXIS2). */
typedef struct iiif_request {
    long x, y, w, h;          /* region in the picture frame (top-left origin), already
                                 cropped to the image: Image API §4.1 */
    long ow, oh;              /* the scaled region, before rotation: Image API §4.2 */
    int mirror;               /* "!" of the rotation: reflect before rotating */
    int rotation;             /* clockwise degrees: 0, 90, 180, 270 (Image API §4.3) */
    iiif_quality quality;     /* Image API §4.4 */
    iiif_format format;       /* Image API §4.5 */
} iiif_request;

/* A 400/404/413 parse failure: the status, the parameter at fault ("" when none), and
 * why. */
typedef struct iiif_error {
    int status;
    param_error pe;
} iiif_error;

/* Parses the image request of `p` (p->kind IIIF_PATH_IMAGE) for a W x H image (W, H >= 1)
 * under limits.max_output_pixels = `max_pixels`.  Returns 0 and fills `q`, or TESS_EINVAL
 * with `e`: 400 for a part missing (named) or malformed, 404 for a path longer than an
 * image request, 413 for a size over the limits. */
int iiif_parse_image(const iiif_path *p, long W, long H, long long max_pixels,
                     iiif_request *q, iiif_error *e);

#endif
