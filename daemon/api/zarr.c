/* GET /zarr/{name}/{key}: every dataset as a read-only Zarr store (v2 and v3) with OME-Zarr metadata.
 *
 * The store is a group (OME-Zarr 0.4 "multiscales" in its .zattrs, 0.5 under "ome" in its
 * v3 zarr.json) of levels: the array "0", shape (ny, nx) for an image, (nz, ny, nx)
 * for a cube or stack, numpy order, so that index [z, y, x] is pixel (x, y) of plane z as
 * every other route numbers it (y = 0 is FITS row 1; for PNG frames the last row of the
 * file, engine/image/stack.h).  Its dtype holds the physical values: integers when the
 * stored type, BSCALE, BZERO and BLANK allow (zarr_dtype_of), else float32 with NaN for
 * blanks.  Chunks are planes (1, cy, cx) cut into at most 1024 x 1024 pieces of near equal
 * size.  Levels "1", "2" ... halve the planes (y and x) while the level below has a side
 * over 256 pixels: the server's reduced planes (daemon/cache/planes.h, 2x2 means of finite
 * pixels), rounded for integer types.  When a rechunk job has attached its profile copy,
 * the array "profile" holds the
 * same values in chunks (nz, p, p), so that the series of a pixel is one chunk.  Chunks
 * are made on demand from the dataset's reader, Blosc-compressed (lz4, byte shuffle), cached
 * like tiles (with ETags); a chunk outside the grid is 404, which Zarr reads as missing. */
#include "daemon/api/handlers.h"
#include "daemon/api/zarr.h"
#include "daemon/cache/planes.h"
#include "daemon/jobs/job_common.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/fits/fitscard.h"
#include "engine/image/chunkstore.h"
#include "engine/image/zchunk.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest side of a plane chunk, and the most elements of a profile chunk. */
#define ZARR_PLANE_CHUNK 1024
#define ZARR_PROFILE_ELEMENTS (1L << 20)
/* Blosc's clevel of the chunks (numcodecs' default). */
#define ZARR_BLOSC_LEVEL 5

/* ---- keys ----------------------------------------------------------------------------- */

/* Reads up to 3 '/'-separated chunk indices from s to its end; "00" or "01" is no key a
 * store holds (zarr writes indices in decimal without leading zeros). */
static int parse_indices(const char *s, zarr_key *k)
{
    k->nidx = 0;
    while (*s) {
        if (k->nidx == 3 || (s[0] == '0' && isdigit((unsigned char)s[1])))
            return TESS_ENOTFOUND;
        long v;
        if (param_path_digits(&s, &v) || (*s && *s != '/') || (*s == '/' && !s[1]))
            return TESS_ENOTFOUND;
        k->idx[k->nidx++] = v;
        if (*s == '/')
            s++;
    }
    return k->nidx >= 2 ? 0 : TESS_ENOTFOUND;
}

int zarr_parse_key(const char *s, zarr_key *k)
{
    memset(k, 0, sizeof(*k));
    static const struct {
        const char *key;
        zarr_key_kind kind;
    } group[] = {{".zgroup", ZARR_KEY_ZGROUP}, {".zattrs", ZARR_KEY_ZATTRS},
                 {".zmetadata", ZARR_KEY_ZMETADATA}, {"zarr.json", ZARR_KEY_GROUP_V3}};
    for (size_t i = 0; i < sizeof(group) / sizeof(group[0]); i++)
        if (strcmp(s, group[i].key) == 0) {
            k->kind = group[i].kind;
            return 0;
        }
    if (strncmp(s, "profile/", 8) == 0) {
        k->array = ZARR_ARRAY_PROFILE;
        s += 8;
    } else if (isdigit((unsigned char)s[0]) && s[1] == '/') {
        k->array = s[0] - '0';
        s += 2;
    } else if (s[0] >= '1' && s[0] <= '9' && isdigit((unsigned char)s[1]) && s[2] == '/') {
        k->array = (s[0] - '0') * 10 + (s[1] - '0');
        s += 3;
        if (k->array > ZARR_MAX_LEVEL)
            return TESS_ENOTFOUND;
    } else {
        return TESS_ENOTFOUND;
    }
    if (strcmp(s, ".zarray") == 0)
        k->kind = ZARR_KEY_ZARRAY;
    else if (strcmp(s, ".zattrs") == 0)
        k->kind = ZARR_KEY_ARRAY_ZATTRS;
    else if (strcmp(s, "zarr.json") == 0)
        k->kind = ZARR_KEY_ARRAY_V3;
    else {
        k->kind = ZARR_KEY_CHUNK;
        if (strncmp(s, "c/", 2) == 0) {
            k->v3 = 1;
            s += 2;
        }
        return parse_indices(s, k);
    }
    return 0;
}

/* ---- what the arrays are ------------------------------------------------------------- */

zchunk_dtype zarr_dtype_of(const dataset *d)
{
    switch (jobc_choose_dtype(d)) {
    case CS_U8: return ZCHUNK_U1;
    case CS_U16: return ZCHUNK_U2;
    case CS_I16: return ZCHUNK_I2;
    default: break;
    }
    /* Integer types the rechunk job stores as float32 but that are exact here. */
    char v[80];
    double bscale = 1, bzero = 0;
    if (!d->header || fitscard_get(d->header, d->nkeys, "BLANK", v, sizeof v))
        return ZCHUNK_F4;
    if (fitscard_get(d->header, d->nkeys, "BSCALE", v, sizeof v))
        bscale = strtod(v, NULL);
    if (fitscard_get(d->header, d->nkeys, "BZERO", v, sizeof v))
        bzero = strtod(v, NULL);
    if (bscale != 1.0)
        return ZCHUNK_F4;
    if (d->bitpix == 8 && bzero == -128)
        return ZCHUNK_I1;
    if (d->bitpix == 32 && bzero == 0)
        return ZCHUNK_I4;
    if (d->bitpix == 32 && bzero == 2147483648.0)
        return ZCHUNK_U4;
    return ZCHUNK_F4;
}

/* The shape of one array: numpy order, chunk shape, element type. */
typedef struct zarr_geom {
    int ndim;
    long shape[3], chunks[3];
    zchunk_dtype dtype;
    int level;                /* the reduction level (0 for the profile array) */
    char profile[PATH_MAX];   /* ZARR_ARRAY_PROFILE: the chunk store's path */
} zarr_geom;

/* Levels go on while the level below has a side over this many pixels. */
#define ZARR_LEVEL_MIN_SIDE 256

/* The number of levels of d: 1, and one more for each halving of a plane whose larger
 * side is still over ZARR_LEVEL_MIN_SIDE (m13, 1392 x 1040: 0..3). */
static int zarr_nlevels(const dataset *d)
{
    int n = 1;
    long side = d->nx > d->ny ? d->nx : d->ny;
    while (side > ZARR_LEVEL_MIN_SIDE && n <= ZARR_MAX_LEVEL) {
        side = (side + 1) / 2;
        n++;
    }
    return n;
}

/* The side of the chunks of an axis of n pixels: n cut into ceil(n / 1024) near equal
 * pieces. */
static long plane_chunk(long n)
{
    long pieces = (n + ZARR_PLANE_CHUNK - 1) / ZARR_PLANE_CHUNK;
    return (n + pieces - 1) / pieces;
}

/* Fills g for array `a` (a level or ZARR_ARRAY_PROFILE) of d.  Returns 0, or
 * TESS_ENOTFOUND (a level past zarr_nlevels, no profile copy attached, or it cannot be
 * read). */
static int zarr_geometry(const dataset *d, int a, zarr_geom *g)
{
    memset(g, 0, sizeof(*g));
    if (a == ZARR_ARRAY_PROFILE) {
        chunkstore_info in;
        char err[256];
        if (!dataset_profile_path(d, g->profile, sizeof(g->profile)) ||
            chunkstore_read_info(g->profile, &in, err, sizeof err) || in.nz != d->nz)
            return TESS_ENOTFOUND;
        static const zchunk_dtype of_cs[] = {[CS_U8] = ZCHUNK_U1, [CS_U16] = ZCHUNK_U2,
                                             [CS_I16] = ZCHUNK_I2, [CS_F32] = ZCHUNK_F4};
        long p = in.tx < in.ty ? in.tx : in.ty;
        while (p > 1 && d->nz * p * p > ZARR_PROFILE_ELEMENTS)
            p /= 2;
        *g = (zarr_geom){3, {d->nz, d->ny, d->nx}, {d->nz, p, p}, of_cs[in.dtype], 0, ""};
        dataset_profile_path(d, g->profile, sizeof(g->profile));
        return 0;
    }
    if (a < 0 || a >= zarr_nlevels(d))
        return TESS_ENOTFOUND;
    g->dtype = zarr_dtype_of(d);
    g->level = a;
    long ny = (d->ny + (1L << a) - 1) >> a, nx = (d->nx + (1L << a) - 1) >> a;
    long cy = plane_chunk(ny), cx = plane_chunk(nx);
    if (d->kind == DS_IMAGE) {
        g->ndim = 2;
        g->shape[0] = ny, g->shape[1] = nx;
        g->chunks[0] = cy, g->chunks[1] = cx;
    } else {
        g->ndim = 3;
        g->shape[0] = d->nz, g->shape[1] = ny, g->shape[2] = nx;
        g->chunks[0] = 1, g->chunks[1] = cy, g->chunks[2] = cx;
    }
    return 0;
}

/* ---- metadata documents -------------------------------------------------------------- */

static json_t *long_array(const long *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *dim_names(int ndim)
{
    json_t *a = json_array();
    static const char *const names[] = {"z", "y", "x"};
    for (int i = 3 - ndim; i < 3; i++)
        json_array_append_new(a, json_string(names[i]));
    return a;
}

static json_t *fill_value(zchunk_dtype t)
{
    return zchunk_is_integer(t) ? json_integer(0) : json_string("NaN");
}

static json_t *zarray_json(const zarr_geom *g)
{
    return json_pack("{s:i, s:o, s:o, s:s, s:{s:s, s:s, s:i, s:i, s:i}, s:o, s:s, s:n, s:s}",
                     "zarr_format", 2, "shape", long_array(g->shape, g->ndim), "chunks",
                     long_array(g->chunks, g->ndim), "dtype", zchunk_numpy_name(g->dtype),
                     "compressor", "id", "blosc", "cname", "lz4", "clevel", ZARR_BLOSC_LEVEL,
                     "shuffle", 1, "blocksize", 0, "fill_value",
                     fill_value(g->dtype), "order", "C", "filters", "dimension_separator",
                     "/");
}

static json_t *array_v3_json(const zarr_geom *g)
{
    return json_pack("{s:i, s:s, s:o, s:s, s:{s:s, s:{s:o}}, s:{s:s, s:{s:s}}, s:o, "
                     "s:[{s:s, s:{s:s}}, {s:s, s:{s:s, s:i, s:s, s:i, s:i}}], s:o, s:{}}",
                     "zarr_format", 3, "node_type", "array", "shape",
                     long_array(g->shape, g->ndim), "data_type", zchunk_v3_name(g->dtype),
                     "chunk_grid", "name", "regular", "configuration", "chunk_shape",
                     long_array(g->chunks, g->ndim), "chunk_key_encoding", "name", "default",
                     "configuration", "separator", "/", "fill_value", fill_value(g->dtype),
                     "codecs", "name", "bytes", "configuration", "endian", "little", "name",
                     "blosc", "configuration", "cname", "lz4", "clevel", ZARR_BLOSC_LEVEL,
                     "shuffle", "shuffle", "typesize", zchunk_esize(g->dtype), "blocksize", 0,
                     "dimension_names",
                     dim_names(g->ndim), "attributes");
}

/* The OME-NGFF name of a FITS CUNITn, or NULL when NGFF has none (degrees, velocities). */
static const char *ngff_unit(const char *cunit)
{
    static const char *const map[][2] = {
        {"m", "meter"}, {"mm", "millimeter"}, {"um", "micrometer"}, {"nm", "nanometer"},
        {"Angstrom", "angstrom"}, {"pc", "parsec"}, {"s", "second"}, {"ms", "millisecond"},
        {"min", "minute"}, {"h", "hour"}, {"d", "day"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(cunit, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

/* Axis `name` for FITS axis `fits_axis` (1..3) of d: its type, and its unit and pixel
 * scale (|CDELTn|) when CUNITn is an NGFF unit; *scale stays 1 otherwise. */
static json_t *axis_json(const dataset *d, const char *name, int fits_axis, double *scale)
{
    char key[9], unit[80] = "", delt[80];
    const char *type = "space";
    snprintf(key, sizeof key, "CUNIT%d", fits_axis);
    const char *u = d->header && fitscard_get(d->header, d->nkeys, key, unit, sizeof unit)
                        ? ngff_unit(unit) : NULL;
    if (fits_axis == 3 && d->kind == DS_STACK) {
        u = NULL;
        if (fitscard_get(d->header, d->nkeys, "MJD-OBS", delt, sizeof delt) ||
            fitscard_get(d->header, d->nkeys, "DATE-OBS", delt, sizeof delt))
            type = "time";
    } else if (fits_axis == 3) {
        char ctype[80];
        int has_ctype = fitscard_get(d->header, d->nkeys, "CTYPE3", ctype, sizeof ctype);
        if (has_ctype && !(u && strstr(u, "meter")))
            type = strstr(ctype, "TIME") ? "time" : "spectral";
    }
    snprintf(key, sizeof key, "CDELT%d", fits_axis);
    if (u && fitscard_get(d->header, d->nkeys, key, delt, sizeof delt) &&
        isfinite(strtod(delt, NULL)) && strtod(delt, NULL) != 0) {
        *scale = fabs(strtod(delt, NULL));
        return json_pack("{s:s, s:s, s:s}", "name", name, "type", type, "unit", u);
    }
    return json_pack("{s:s, s:s}", "name", name, "type", type);
}

/* The "multiscales" entry of d (without "version" when `v05`: 0.5 has it under "ome"):
 * one dataset a level, level k scaled by 2^k along y and x. */
static json_t *multiscale_json(const dataset *d, int v05)
{
    int ndim = d->kind == DS_IMAGE ? 2 : 3;
    json_t *axes = json_array(), *levels = json_array();
    static const char *const names[] = {"z", "y", "x"};
    double s[3] = {1, 1, 1};
    for (int i = 3 - ndim; i < 3; i++)
        json_array_append_new(axes, axis_json(d, names[i], 3 - i, &s[i]));
    for (int k = 0; k < zarr_nlevels(d); k++) {
        json_t *scale = json_array();
        for (int i = 3 - ndim; i < 3; i++)
            json_array_append_new(scale, json_real(i == 0 ? s[i] : s[i] * (double)(1L << k)));
        char path[4];
        snprintf(path, sizeof path, "%d", k);
        json_array_append_new(levels, json_pack("{s:s, s:[{s:s, s:o}]}", "path", path,
                                                "coordinateTransformations", "type", "scale",
                                                "scale", scale));
    }
    json_t *m = json_pack("{s:s, s:o, s:o}", "name", d->name, "axes", axes, "datasets", levels);
    if (m && !v05)
        json_object_set_new(m, "version", json_string("0.4"));
    if (m && zarr_nlevels(d) > 1)
        json_object_set_new(m, "metadata", json_pack("{s:s}", "method",
                            "means of the finite pixels of 2x2 blocks of the level below "
                            "(Tessera's reduced planes), rounded for integer types"));
    return m;
}

/* Tessera's own attributes: what the dataset is and how its indices read. */
static json_t *tessera_json(const dataset *d, int has_profile)
{
    json_t *t = json_pack("{s:s, s:s, s:s}", "kind", ds_kind_name(d->kind), "bunit",
                          d->bunit, "orientation",
                          "index [.., y, x] is pixel (x, y) of Tessera's API: y = 0 is FITS "
                          "row 1 (for PNG frames the last row of the file)");
    if (t && has_profile)
        json_object_set_new(t, "profile", json_string("profile"));
    return t;
}

/* How to show the data [OME-NGFF 0.4, "omero"]: one grey channel whose window is the
 * server's default cut levels of plane `z` (start, end) within its range of values (min,
 * max, the 0 and 100 percentiles of its finite pixels), z the default plane (rdefs), so
 * that viewers such as ome-zarr.js do not guess a window from the dtype (0..65535 for
 * float data). */
typedef struct zarr_window {
    long z;
    double start, end, min, max;
} zarr_window;

static json_t *omero_json(const dataset *d, const zarr_window *w, int v05)
{
    json_t *ch = json_pack("{s:b, s:f, s:s, s:s, s:b, s:s, s:{s:f, s:f, s:f, s:f}}", "active", 1,
                           "coefficient", 1.0, "color", "FFFFFF", "family", "linear",
                           "inverted", 0, "label", d->bunit[0] ? d->bunit : d->name, "window",
                           "start", w->start, "end", w->end, "min", w->min, "max", w->max);
    json_t *o = json_pack("{s:s, s:[o], s:{s:s, s:I}}", "name", d->name, "channels", ch,
                          "rdefs", "model", "greyscale", "defaultZ", (json_int_t)w->z);
    if (o && !v05)
        json_object_set_new(o, "version", json_string("0.4"));
    return o;
}

static json_t *group_attrs_json(const dataset *d, int has_profile, const zarr_window *w)
{
    return json_pack("{s:[o], s:o, s:o}", "multiscales", multiscale_json(d, 0), "omero",
                     omero_json(d, w, 0), "tessera", tessera_json(d, has_profile));
}

static json_t *group_v3_json(const dataset *d, int has_profile, const zarr_window *w)
{
    return json_pack("{s:i, s:s, s:{s:{s:s, s:[o], s:o}, s:o}}", "zarr_format", 3, "node_type",
                     "group", "attributes", "ome", "version", "0.5", "multiscales",
                     multiscale_json(d, 1), "omero", omero_json(d, w, 1), "tessera",
                     tessera_json(d, has_profile));
}

static json_t *array_attrs_json(int ndim)
{
    return json_pack("{s:o}", "_ARRAY_DIMENSIONS", dim_names(ndim));
}

/* .zmetadata: every v2 document of the store in one (zarr's consolidated format 1). */
static json_t *consolidated_json(const dataset *d, const zarr_geom *gp, const zarr_window *w)
{
    json_t *md = json_pack("{s:{s:i}, s:o}", ".zgroup", "zarr_format", 2, ".zattrs",
                           group_attrs_json(d, gp != NULL, w));
    for (int k = 0; md && k < zarr_nlevels(d); k++) {
        zarr_geom g;
        char key[16];
        zarr_geometry(d, k, &g);
        snprintf(key, sizeof key, "%d/.zarray", k);
        json_object_set_new(md, key, zarray_json(&g));
        snprintf(key, sizeof key, "%d/.zattrs", k);
        json_object_set_new(md, key, array_attrs_json(g.ndim));
    }
    if (md && gp) {
        json_object_set_new(md, "profile/.zarray", zarray_json(gp));
        json_object_set_new(md, "profile/.zattrs", array_attrs_json(gp->ndim));
    }
    return json_pack("{s:i, s:o}", "zarr_consolidated_format", 1, "metadata", md);
}

/* ---- chunks -------------------------------------------------------------------------- */

typedef struct zarr_job {
    const dataset *ds;
    tserver *srv;             /* its plane store, for the reduced levels */
    zarr_geom g;
    zarr_key k;
} zarr_job;

/* The w x h region at (x0, y0) of plane z at the chunk's level > 0, from the server's
 * plane store (daemon/cache/planes.h: 2x2 means of finite pixels, level by level), into
 * rows of chunks[n - 1] values of full; rounded to the nearest integer (halves up) for
 * integer types, whose means stay in range. */
static int read_reduced_chunk(const struct zarr_job *j, long z, long x0, long y0, long w,
                              long h, double *full, char *err, size_t errlen)
{
    plane_view v;
    int rc = planestore_get(j->srv->app->planes, j->ds, z, j->g.level, &v, err, errlen);
    if (rc)
        return rc;
    long cx = j->g.chunks[j->g.ndim - 1];
    int integer = zchunk_is_integer(j->g.dtype);
    for (long y = 0; y < h; y++)
        for (long x = 0; x < w; x++) {
            double val = rp_plane_get(v.plane, x0 + x, y0 + y);
            full[y * cx + x] = integer ? floor(val + 0.5) : val;
        }
    planestore_release(j->srv->app->planes, &v);
    return 0;
}

/* Reads the values of chunk k of a level's array into full (the chunk's shape, fill
 * values where it passes the edge).  Returns 0 or a TESS_E* code with err. */
static int read_plane_chunk(const zarr_job *j, double *full, char *err, size_t errlen)
{
    const zarr_geom *g = &j->g;
    int n = g->ndim;
    long cy = g->chunks[n - 2], cx = g->chunks[n - 1];
    long z = n == 3 ? j->k.idx[0] : 0;
    long y0 = j->k.idx[n - 2] * cy, x0 = j->k.idx[n - 1] * cx;
    long h = g->shape[n - 2] - y0 < cy ? g->shape[n - 2] - y0 : cy;
    long w = g->shape[n - 1] - x0 < cx ? g->shape[n - 1] - x0 : cx;
    if (g->level > 0)
        return read_reduced_chunk(j, z, x0, y0, w, h, full, err, errlen);
    if (w == cx && h == cy)
        return dataset_read_region(j->ds, z, x0, y0, w, h, full, err, errlen);
    double *part = malloc((size_t)w * (size_t)h * sizeof(double));
    if (!part)
        return TESS_ENOMEM;
    int rc = dataset_read_region(j->ds, z, x0, y0, w, h, part, err, errlen);
    for (long y = 0; rc == 0 && y < h; y++)
        memcpy(full + y * cx, part + y * w, (size_t)w * sizeof(double));
    free(part);
    return rc;
}

/* The same for a chunk (nz, p, p) of the profile array, one series a pixel. */
static int read_profile_chunk(const zarr_job *j, double *full, char *err, size_t errlen)
{
    const zarr_geom *g = &j->g;
    long nz = g->shape[0], p = g->chunks[1];
    long y0 = j->k.idx[1] * p, x0 = j->k.idx[2] * p;
    chunkstore *cs = NULL;
    int rc = chunkstore_open(g->profile, &cs, err, errlen);
    double *series = rc ? NULL : malloc((size_t)nz * sizeof(double));
    if (!rc && !series)
        rc = TESS_ENOMEM;
    for (long y = y0; rc == 0 && y < y0 + p && y < g->shape[1]; y++)
        for (long x = x0; rc == 0 && x < x0 + p && x < g->shape[2]; x++) {
            rc = chunkstore_series(cs, x, y, series, nz, err, errlen);
            for (long k = 0; rc == 0 && k < nz; k++)
                full[(k * p + (y - y0)) * p + (x - x0)] = series[k];
        }
    free(series);
    chunkstore_close(cs);
    return rc;
}

static void zarr_chunk_work(hreq *r)
{
    zarr_job *j = r->work_arg;
    const zarr_geom *g = &j->g;
    size_t n = 1;
    for (int i = 0; i < g->ndim; i++)
        n *= (size_t)g->chunks[i];
    double *full = malloc(n * sizeof(double));
    unsigned char *packed = malloc(n * (size_t)zchunk_esize(g->dtype));
    if (!full || !packed) {
        free(full);
        free(packed);
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    double fill = zchunk_is_integer(g->dtype) ? 0.0 : NAN;
    for (size_t i = 0; i < n; i++)
        full[i] = fill;
    char err[256];
    int rc = j->k.array == ZARR_ARRAY_PROFILE ? read_profile_chunk(j, full, err, sizeof err)
                                              : read_plane_chunk(j, full, err, sizeof err);
    size_t bad = 0;
    unsigned char *out = NULL;
    size_t len = 0;
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read dataset '%s': %s",
                      j->ds->name, err);
    } else if (zchunk_pack(g->dtype, full, n, packed, &bad)) {
        problem_reply(r, 500, NULL, "value %.17g of chunk element %zu of '%s' does not fit "
                      "the array's dtype %s (chosen from the first file's header)", full[bad],
                      bad, j->ds->name, zchunk_numpy_name(g->dtype));
    } else if (zchunk_compress(ZCHUNK_BLOSC_LZ4, ZARR_BLOSC_LEVEL, zchunk_esize(g->dtype),
                               packed, n * (size_t)zchunk_esize(g->dtype), &out, &len)) {
        problem_reply(r, 500, NULL, "out of memory compressing a chunk");
    } else {
        hreq_reply_tile(r, 200, tile_new_take(out, len, "application/octet-stream"));
    }
    free(full);
    free(packed);
}

/* The group documents (.zattrs, .zmetadata, zarr.json), on the pool: their window reads
 * the default plane (the middle one) for its cut levels and range (planestore_cuts, cached
 * per plane). */
typedef struct zarr_doc_job {
    const dataset *ds;
    int kind;                 /* ZARR_KEY_ZATTRS, _ZMETADATA or _GROUP_V3 */
    int has_profile;
    zarr_geom gp;
} zarr_doc_job;

static void reply_doc(hreq *r, json_t *doc);

static void zarr_doc_work(hreq *r)
{
    zarr_doc_job *j = r->work_arg;
    const dataset *d = j->ds;
    zarr_window w = {d->nz / 2, 0, 0, 0, 0};
    render_params rp, range;
    render_params_default(&rp);
    render_params_default(&range);
    range.min_cut = (render_cut){0.0, 1};
    range.max_cut = (render_cut){100.0, 1};
    char err[256] = "";
    int rc = planestore_cuts(r->srv->app->planes, d, w.z, &rp, &w.start, &w.end, err, sizeof err);
    if (rc == 0)
        rc = planestore_cuts(r->srv->app->planes, d, w.z, &range, &w.min, &w.max, err, sizeof err);
    if (rc) {
        problem_reply(r, problem_read_status(rc, 500), NULL, "cannot read plane %ld of '%s' "
                      "for its display window: %s", w.z, d->name, err);
        return;
    }
    json_t *doc = j->kind == ZARR_KEY_ZATTRS ? group_attrs_json(d, j->has_profile, &w)
                  : j->kind == ZARR_KEY_GROUP_V3 ? group_v3_json(d, j->has_profile, &w)
                  : consolidated_json(d, j->has_profile ? &j->gp : NULL, &w);
    reply_doc(r, doc);
}

static void doc_request(hreq *r, const dataset *d, int kind, int has_profile,
                        const zarr_geom *gp)
{
    zarr_doc_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    j->kind = kind;
    j->has_profile = has_profile;
    if (has_profile)
        j->gp = *gp;
    hreq_run_async(r, zarr_doc_work, j, free);
}

/* ---- the handler --------------------------------------------------------------------- */

static void reply_doc(hreq *r, json_t *doc)
{
    if (!doc) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    hreq_reply_json(r, 200, json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17)));
    json_decref(doc);
}

static void chunk_request(hreq *r, const dataset *d, const zarr_geom *g, const zarr_key *k)
{
    if (k->nidx != g->ndim) {
        problem_reply(r, 404, NULL, "the chunks of this array have %d indices", g->ndim);
        return;
    }
    for (int i = 0; i < g->ndim; i++) {
        long nchunks = (g->shape[i] + g->chunks[i] - 1) / g->chunks[i];
        if (k->idx[i] >= nchunks) {
            problem_reply(r, 404, NULL, "chunk index %ld of axis %d is outside 0..%ld",
                          k->idx[i], i, nchunks - 1);
            return;
        }
    }
    zarr_job *j = calloc(1, sizeof(*j));
    if (!j) {
        problem_reply(r, 500, NULL, "out of memory");
        return;
    }
    j->ds = d;
    j->srv = r->srv;
    j->g = *g;
    j->k = *k;
    char version[64];
    dataset_version(d, version, sizeof version);
    if (asprintf(&r->cache_key, "zarr|%s|%s|%s|%d|%d|%ld|%ld|%ld", d->name, version,
                 k->array == ZARR_ARRAY_PROFILE ? g->profile : "", k->array, k->v3,
                 k->idx[0], k->idx[1], k->nidx == 3 ? k->idx[2] : -1L) < 0)
        r->cache_key = NULL;
    hreq_serve(r, zarr_chunk_work, j, free);
}

void handle_zarr(hreq *r, const route_match *m)
{
    static const char *const known[] = {NULL};
    if (hreq_only_args(r, known))
        return;
    const dataset *d = m->ds;
    zarr_key k;
    if (zarr_parse_key(m->rest, &k)) {
        problem_reply(r, 404, NULL, "the Zarr store of '%s' has no key '%.80s'", d->name,
                      m->rest);
        return;
    }
    zarr_geom ga, gp;
    int has_profile = zarr_geometry(d, ZARR_ARRAY_PROFILE, &gp) == 0;
    const zarr_geom *g = k.array == ZARR_ARRAY_PROFILE ? &gp : &ga;
    if (k.kind >= ZARR_KEY_ZARRAY && k.array == ZARR_ARRAY_PROFILE && !has_profile) {
        problem_reply(r, 404, NULL, "'%s' has no profile copy (a rechunk job makes one)",
                      d->name);
        return;
    }
    if (k.kind >= ZARR_KEY_ZARRAY && k.array >= 0 && zarr_geometry(d, k.array, &ga)) {
        problem_reply(r, 404, NULL, "'%s' has levels 0..%d", d->name, zarr_nlevels(d) - 1);
        return;
    }
    switch (k.kind) {
    case ZARR_KEY_ZGROUP: reply_doc(r, json_pack("{s:i}", "zarr_format", 2)); break;
    case ZARR_KEY_ZATTRS:
    case ZARR_KEY_ZMETADATA:
    case ZARR_KEY_GROUP_V3: doc_request(r, d, k.kind, has_profile, &gp); break;
    case ZARR_KEY_ZARRAY: reply_doc(r, zarray_json(g)); break;
    case ZARR_KEY_ARRAY_ZATTRS: reply_doc(r, array_attrs_json(g->ndim)); break;
    case ZARR_KEY_ARRAY_V3: reply_doc(r, array_v3_json(g)); break;
    case ZARR_KEY_CHUNK: chunk_request(r, d, g, &k); break;
    }
}
