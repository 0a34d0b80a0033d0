/* GET /api/node/{uuid}/{name}/raw/{dims}/{size}/{offset}[/{format}]: DVID-shaped raw reads.
 *
 * DVID's voxel API for 2-D cuts (its imageblk "raw" GET): the stored values of a plane,
 * xz or yz cut as an 8- or 16-bit greyscale PNG (the default) or as raw little-endian
 * values ("octet-stream"), row 0 of the image being the offset's row (y = Y for xy, z = Z
 * for xz and yz) and column 0 its column, in Tessera's pixel coordinates (y = 0 is FITS
 * row 1; the last row of a PNG frame).  The cut is the slice route's (slice_serve), so it
 * is cached and limited as slices are. */
#include "daemon/api/handlers.h"
#include "daemon/api/dvid.h"
#include "daemon/problem.h"
#include "engine/base/error.h"

#include <stdio.h>
#include <string.h>

/* Reads n '_'-separated decimal numbers (at most 12 digits each) ending at '/' or the
 * end of s; advances *s past the '/'. */
static int path_numbers(const char **s, long *out, int n)
{
    const char *q = *s;
    for (int i = 0; i < n; i++) {
        if (param_path_digits(&q, &out[i]))
            return TESS_EINVAL;
        if (i + 1 < n ? *q != '_' : (*q != '\0' && *q != '/'))
            return TESS_EINVAL;
        if (*q)
            q++;
    }
    *s = q;
    return 0;
}

int dvid_parse_path(const char *s, dvid_params *p, param_error *e)
{
    memset(p, 0, sizeof(*p));
    const char *slash = strchr(s, '/');
    if (!slash || slash == s)
        return param_fail(e, "path", "the path is /api/node/{uuid}/{name}/raw/{dims}/{size}/"
                          "{offset}[/{format}]");
    s = slash + 1;
    size_t n = strcspn(s, "/");
    if (n == 0 || n >= sizeof(p->name) || strncmp(s + n, "/raw/", 5) != 0)
        return param_fail(e, "path", "the path is /api/node/{uuid}/{name}/raw/{dims}/{size}/"
                          "{offset}[/{format}]");
    memcpy(p->name, s, n);
    s += n + 5;
    static const char *const dims[][2] = {{"0_1", "xy"}, {"0_2", "xz"}, {"1_2", "yz"},
                                          {"xy", "xy"}, {"xz", "xz"}, {"yz", "yz"}};
    size_t dn = strcspn(s, "/");
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++)
        if (dn == strlen(dims[i][0]) && strncmp(s, dims[i][0], dn) == 0)
            memcpy(p->cut.plane, dims[i][1], 3);
    if (!p->cut.plane[0] || s[dn] != '/')
        return param_fail(e, "dims", "dims must be 0_1 (xy), 0_2 (xz) or 1_2 (yz): only 2-d "
                          "cuts are served, got '%.*s'", (int)(dn < 20 ? dn : 20), s);
    s += dn + 1;
    long size[2], off[3];
    if (path_numbers(&s, size, 2) || size[0] < 1 || size[1] < 1 || size[0] > 65536 ||
        size[1] > 65536)
        return param_fail(e, "size", "size must be {W}_{H}, 1..65536 voxels each");
    if (path_numbers(&s, off, 3))
        return param_fail(e, "offset", "offset must be {X}_{Y}_{Z} in voxels, 0-based");
    if (*s == '\0' && s[-1] == '/')
        return param_fail(e, "format", "format must be png or octet-stream, got ''");
    if (*s == '\0' || strcmp(s, "png") == 0)
        p->octets = 0;
    else if (strcmp(s, "octet-stream") == 0)
        p->octets = 1;
    else
        return param_fail(e, "format", "format must be png or octet-stream, got '%.20s'", s);
    p->cut.w = size[0];
    p->cut.h = size[1];
    p->cut.x = off[0];
    p->cut.y = off[1];
    p->cut.z = off[2];
    p->cut.format = p->octets ? FMT_RAW : FMT_PNG;
    return 0;
}

void handle_dvid(hreq *r, const route_match *m)
{
    static const char *const known[] = {"throttle", NULL};
    if (hreq_only_args(r, known))
        return;
    dvid_params p;
    param_error pe;
    if (dvid_parse_path(m->rest, &p, &pe)) {
        problem_reply(r, strcmp(pe.parameter, "path") == 0 ? 404 : 400, pe.parameter, "%s",
                      pe.detail);
        return;
    }
    const dataset *d = handler_dataset(r, p.name, strlen(p.name));
    if (!d)
        return;
    render_params rp;
    memset(&rp, 0, sizeof rp);
    slice_serve(r, d, &p.cut, &rp, p.octets ? SLICE_OCTETS : SLICE_DVID_PNG);
}
