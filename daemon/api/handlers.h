/* Endpoint handlers: each family parses into a plain struct, answers or goes async on the pool.
 *
 * Layout: one file per endpoint family, registered in the route table (daemon/routes.c),
 * which calls a handler once the path and method are its own; a family's parser stands in
 * its file, declared in the family's header for tests and fuzz targets (cutout.h, slices.h,
 * hips.h, iiif.h); params.h holds what the families share.  Every handler is a
 * route_handler: `m` carries what the route captured (m->ds, m->rest, m->segment). */
#ifndef TESSERA_DAEMON_API_HANDLERS_H
#define TESSERA_DAEMON_API_HANDLERS_H

#include "daemon/http.h"
#include "daemon/routes.h"
#include "daemon/api/params.h"
#include "engine/image/zchunk.h"

/* The dataset named by name[0..len) (not terminated), found by catalog_lookup (the look-up
 * and checks of every route, VO and IIIF included), or NULL after a 404 problem reply
 * (parameter "dataset") when the catalog has none of that name, or a 500 one when its
 * header changed since the start (datasets.c). */
const dataset *handler_dataset(hreq *r, const char *name, size_t len);

/* 0 when `d` has a usable celestial WCS; otherwise a 422 problem reply (parameter
 * "dataset": "dataset 'NAME' has no usable WCS: REASON", or "... has no celestial WCS: "
 * and `without`, what cannot be done) and -1 (datasets.c). */
int handler_need_celestial(hreq *r, const dataset *d, const char *without);
/* handler_need_celestial, and a sky frame: a dataset in a solar frame is refused with a
 * 422 problem (parameter `param`) naming its frame and the sky frame `asked` (what the
 * request needs: "icrs", "equatorial or galactic (HiPS)").  0 or -1 (reply set). */
int handler_need_sky(hreq *r, const dataset *d, const char *param, const char *asked);

/* The one check of the plane z a request names against dataset `d` (HiPS, cutouts,
 * values, histogram): 0 when 0 <= z < d->nz; else a problem reply (parameter "plane",
 * `status`: 400 for ?plane=, 404 for a plane named by the path) "dataset 'NAME' has N
 * plane(s): no plane Z" and -1 (datasets.c). */
int handler_plane(hreq *r, const dataset *d, long z, int status);

/* The pixel a request names by ?x= (0-based column, 0..nx-1) and ?y= (row, 0..ny-1) of
 * dataset `d`, both required, read in one place for values and series: 0, or -1 after a
 * 400 problem naming the parameter at fault (datasets.c). */
int handler_pixel_xy(hreq *r, const dataset *d, long *x, long *y);

/* When the request target (as sent, before decoding) starts with prefix[0..plen) and the
 * path component after it holds an encoded slash (%2F), which no dataset name holds
 * (config: [A-Za-z0-9_.-]): sets a 404 problem naming `parameter` that quotes the name
 * as asked, decoded, cut to 64 bytes, bytes outside printable ASCII shown as '?' (e.g.
 * "no dataset named '/etc/passwd'"; the decoded path split it, so the routes would
 * otherwise see another name), and returns 1.  Else returns 0 (datasets.c). */
int handler_slashed_name(hreq *r, const char *prefix, size_t plen, const char *parameter);

struct collection;
/* The answer of a collection's sky route while its background offsets are being solved
 * (colbg_pending, colbg_offsets*): 503 with Retry-After COLBG_RETRY_AFTER_S (datasets.c). */
void handler_reply_unsolved(hreq *r, const struct collection *c);

/* route_prepare of the {dataset} routes: m->ds from m->segment, or 404 (datasets.c);
 * a segment sent with %2F is told by handler_slashed_name. */
int prepare_dataset(hreq *r, route_match *m);
/* prepare_dataset, or m->ds NULL when the segment names a collection (the routes that
 * serve a collection too: values, footprint). */
int prepare_dataset_or_collection(hreq *r, route_match *m);

/* GET /api/v1/datasets and GET /api/v1/datasets/{name} (datasets.c). */
void handle_datasets_list(hreq *r, const route_match *m);
void handle_dataset_info(hreq *r, const route_match *m);

/* The description of `d` those routes give (docs/DESIGN.md, "Dataset descriptions"), a
 * new jansson object (json_t); `with_header` adds the header's cards and, for stacks, the
 * frames' file names, as the route of one dataset does.  Cannot fail but for memory
 * (jansson then leaves members out). */
struct json_t;
struct json_t *dataset_describe(const dataset *d, int with_header);

/* /api/v1/jobs (jobs.c): GET lists (?limit=), POST submits; /api/v1/jobs/{id}: GET
 * inspects, DELETE cancels; /api/v1/jobs/{id}/result: GET fetches the product.
 * prepare_jobs is their route_prepare: 404 when jobs.dir is not set, or for an id too
 * long to be one. */
int prepare_jobs(hreq *r, route_match *m);
void handle_jobs_list(hreq *r, const route_match *m);
void handle_jobs_submit(hreq *r, const route_match *m);
void handle_job(hreq *r, const route_match *m);
void handle_job_cancel(hreq *r, const route_match *m);
void handle_job_result(hreq *r, const route_match *m);
/* The jobs.token check of the calls that create or cancel jobs (here and UWS): 0 when
 * allowed, else -1 after a 401 or 403 problem reply. */
int jobs_api_check_token(hreq *r);
/* A job submission off the HTTP thread: validating and estimating a body reads every
 * input's header (a 10,000-input mosaic takes seconds), so the handler checks only what
 * costs nothing (token, a body at all) and hands jobs_submit of text[0..len) to the pool
 * at bulk priority (one worker always stays free for tiles; a full queue answers 503).
 * A submission still waiting after JOBS_SUBMIT_QUEUE_S seconds is answered 503 with
 * Retry-After without being looked at; one whose client left before it started is
 * dropped (no job is created).  On the worker, `answer` replies: rc is jobs_submit's,
 * `doc` the new job's JSON (taken) when rc is 0, else *pb says why.  `text` is taken
 * (freed after the reply; NULL with text_is_body: the request's own body is used).
 * Always returns 0. */
#define JOBS_SUBMIT_QUEUE_S 30.0
struct job_problem;
typedef void (*jobs_api_answer_fn)(hreq *r, int rc, char *doc, const struct job_problem *pb);
int jobs_api_submit_async(hreq *r, char *text, size_t len, jobs_api_answer_fn answer);

/* GET and POST /api/v1/cutout (cutout.c; parser in cutout.h). */
void handle_cutout_get(hreq *r, const route_match *m);
void handle_cutout_post(hreq *r, const route_match *m);

/* GET /api/v1/datasets/{name}/slice/{rest} (slices.c; parser in slices.h): m->rest is
 * {xy|xz|yz}/{W}_{H}/{X}_{Y}_{Z}.fmt. */
void handle_slice(hreq *r, const route_match *m);

/* How a slice answers: rendered (the rendering parameters apply), or its stored values
 * (the dataset's zarr_dtype_of type) as a greyscale PNG with row 0 at the top = the
 * highest y, as renderings show it (stretch=none: 8-bit for uint8, 16-bit for uint16
 * datasets), as a greyscale PNG with row 0 = the first row of the cut (the DVID route),
 * or as raw little-endian values of that type, first row first (DVID's octet-stream). */
typedef enum { SLICE_RENDERED, SLICE_GREY_PNG, SLICE_DVID_PNG, SLICE_OCTETS } slice_answer;

/* Checks the cut `s` of d against the dataset and the limits, then answers it as `how`
 * (from the cache or on the pool); `rp` is used for SLICE_RENDERED only.  Answers 400
 * (outside the dataset; a PNG of values that are not uint8 or uint16), 413, or the
 * slice (slices.c). */
struct slice_params;
void slice_serve(hreq *r, const dataset *d, const struct slice_params *s,
                 const render_params *rp, slice_answer how);

/* GET /api/node/{uuid}/{name}/raw/{dims}/{size}/{offset}[/{format}] (dvid.c): DVID's raw
 * reads of a 2-D cut, m->rest is the part after "/api/node/". */
void handle_dvid(hreq *r, const route_match *m);

/* GET /zarr/{name}/{key} (zarr.c; key parser in zarr.h): m->ds, and m->rest the key. */
void handle_zarr(hreq *r, const route_match *m);

/* The element type of d's physical values in the Zarr views and stored-value replies:
 * the type jobc_choose_dtype gives (uint8, uint16, int16), else int8, int32 or uint32 for
 * BITPIX 8 / 32 with BSCALE 1, no BLANK and the BZERO of that type, else float32 (zarr.c).
 * Read from the header of the first file. */
zchunk_dtype zarr_dtype_of(const dataset *d);

/* GET /api/v1/datasets/{name}/series?x=&y=[&format=json|npy|csv] (series.c). */
void handle_series(hreq *r, const route_match *m);

/* GET /api/v1/datasets/{name}/reduce?op=&axis=[&format=] (reduce.c). */
void handle_reduce(hreq *r, const route_match *m);

/* Pixels of a dataset (pixels.c; shapes in the README's API table):
 * GET /api/v1/datasets/{name}/values?x=&y=[&plane=][&size=N]: the physical values of the
 * N x N box (N <= 64, clipped at the edges) from 0-based pixel (x, y), rows from y up;
 * .../histogram?[plane=][&bins=B]: min, max, B counts (B <= 4096) and the 0.5, 1, 99 and
 * 99.5 percentiles of the plane's finite pixels;
 * .../footprint?[frame=icrs|galactic][&n=]: the outline of the image on the sky (422
 * without a usable celestial WCS);
 * .../transform?x=&y=[&frame=] or ?lon=&lat=[&frame=icrs|galactic]: 0-based pixel
 * positions to sky coordinates in degrees ({"frame", "world": [[lon, lat], ...]}) or the
 * reverse ({"frame", "pixel": [[x, y], ...]}) through the full WCS (distortions, a DSS
 * plate solution), comma-separated lists of up to 256 numbers, null off the projection
 * (422 without a usable celestial WCS, 400 for malformed lists);
 * .../fits: the dataset as a FITS file (attachment). */
void handle_values(hreq *r, const route_match *m);
void handle_histogram(hreq *r, const route_match *m);
void handle_footprint(hreq *r, const route_match *m);
void handle_transform(hreq *r, const route_match *m);
void handle_fits(hreq *r, const route_match *m);
/* The length in bytes of what handle_fits sends of dataset d straight from its file (the
 * primary HDU of an uncompressed FITS file), or -1 when it writes a copy instead. */
long long dataset_fits_stored_length(const dataset *d);
/* The length in bytes of handle_fits' answer for d, stored or written anew (the copy's
 * header written as handle_fits writes it, without the data), or -1 when it answers
 * 413 (more than max_output_pixels) or the length cannot be found. */
long long dataset_fits_length(const dataset *d, long long max_output_pixels);

/* The z axis of a dataset (series.c), for series and per-plane results: values[k] is the
 * world coordinate of plane k (0-based) — axis 3 of the header's WCS at pixel (x, y) as
 * wcslib computes it (name = CTYPE3, unit = CUNIT3 as wcslib normalises it, e.g. VOPT in
 * m/s); for stacks of FITS frames the frame time: MJD-OBS (name "MJD-OBS", unit "d") or
 * DATE-OBS (name "DATE-OBS", unit "s", seconds since the first frame's DATE-OBS, given in
 * `origin`); otherwise the index (name "frame" for stacks, "plane" else, unit "").
 * Returns 0 or TESS_ENOMEM; release with zaxis_release. */
typedef struct zaxis {
    char name[72], unit[72], origin[48];
    double *values;
    long n;
} zaxis;
int zaxis_compute(const dataset *d, long x, long y, zaxis *za);
void zaxis_release(zaxis *za);

/* 1-D results: JSON (`doc` plus "z_axis": {name, unit[, origin], values} and "values",
 * NaN as null), NPY (float64, shape (n,)) or CSV (a header line "NAME [UNIT],value
 * [VALUE_UNIT]" then "z,value" lines, %.17g, NaN as nan).  `doc` (a jansson object, taken)
 * carries the other fields of the JSON form.  Answers 200 or a problem. */
typedef enum { PROFILE_JSON, PROFILE_NPY, PROFILE_CSV } profile_format;
int profile_format_parse(const char *s, profile_format *f);  /* NULL = json; 0 or TESS_EINVAL */
const char *profile_format_name(profile_format f);
struct json_t;
void reply_profile(hreq *r, profile_format f, struct json_t *doc, const zaxis *za,
                   const double *values, long n, const char *value_unit);

/* GET /hips/{rest} (hips.c; parser in hips.h): {name}/ (an index page), properties,
 * Norder{K}/Dir{D}/Npix{N}.{png,jpg,fits}, Norder3/Allsky.{png,jpg,fits}, Moc.fits;
 * m->rest is the part after "/hips/". */
void handle_hips(hreq *r, const route_match *m);

/* GET /iiif/3/{rest} (iiif.c; parser in iiif.h): info.json and image requests; m->rest is
 * the part after "/iiif/3/". */
void handle_iiif(hreq *r, const route_match *m);

/* The IVOA access layer (vo.c, uws.c; docs in the README's API table): DataLink 1.1
 * (GET /vo/datalink?ID=...: a {links} VOTable with a SODA service descriptor), SODA 1.0
 * sync (GET|POST /vo/soda/sync: a FITS cutout of native pixels; errors text/plain),
 * VOSI (/vo/capabilities, /vo/availability); DataLink's #this is GET
 * /api/v1/datasets/{name}/fits (handle_fits). */
void handle_vo_datalink(hreq *r, const route_match *m);
void handle_vo_soda(hreq *r, const route_match *m);
void handle_vo_capabilities(hreq *r, const route_match *m);
void handle_vo_availability(hreq *r, const route_match *m);

/* Collections (sia.c; docs/collections.md): SIA 2.0 (GET|POST /vo/sia/query) and SIA 1.0
 * (/vo/sia1/query) over the members of every collection; GET /api/v1/collections, GET
 * /api/v1/collections/{name} (members, unreadable files with their reasons) and GET
 * /api/v1/collections/{name}/fits/{obs_id} (a member's file). */
void handle_vo_sia(hreq *r, const route_match *m);
void handle_vo_sia1(hreq *r, const route_match *m);
void handle_collections_list(hreq *r, const route_match *m);
void handle_collection_info(hreq *r, const route_match *m);
void handle_collection_fits(hreq *r, const route_match *m);
/* The DataLink rows (#this, and #cutout by the "soda" descriptor) of a member's identifier
 * ivo://tessera/{collection}?{obs_id}:
 * 1 when written, 0 when `id` names no member. */
struct voxml;
int sia_datalink_member(hreq *r, struct voxml *x, const char *base, const char *id);
/* The member image of a collection that publisher DID `id` (ivo://tessera/{collection}?
 * {obs_id}) names, opened as a dataset (colmembers_get) and held in *d until
 * colmembers_release(r->srv->app->collections, *d).  Returns 0, or -1 when id names no
 * usable member. */
int sia_member_dataset(hreq *r, const char *id, const dataset **d);

/* UWS 1.1 over the job runner (uws.c): /vo/uws/jobs (GET the list, POST creates a job),
 * /vo/uws/jobs/{id} (GET the job, POST PHASE=RUN|ABORT or ACTION=DELETE, DELETE) and
 * /vo/uws/jobs/{id}/{phase,results,error,parameters,...} (m->rest).  prepare_uws is their
 * route_prepare: 404 (text) when jobs.dir is not set. */
int prepare_uws(hreq *r, route_match *m);
void handle_uws_jobs(hreq *r, const route_match *m);
void handle_uws_create(hreq *r, const route_match *m);
void handle_uws_job(hreq *r, const route_match *m);
void handle_uws_job_post(hreq *r, const route_match *m);
void handle_uws_job_delete(hreq *r, const route_match *m);
void handle_uws_job_part(hreq *r, const route_match *m);
void handle_uws_job_part_post(hreq *r, const route_match *m);

/* GET / (the viewer's index.html), /viewer/{path} (files of the viewer directory) and
 * /vendor/{package}/{path} (files of the npm packages aladin-lite, openseadragon, uplot and
 * neuroglancer, the prebuilt bundle of @janelia-flyem/neuroglancer, under node_modules) (viewer.c), by the whole URL path r->url.  Only files inside those
 * directories (after resolving links) with a known extension are served; anything else is
 * 404.  The directories: viewer.dir / viewer.node_modules of the configuration `cfg` (NULL:
 * none), else $TESSERA_VIEWER_DIR / $TESSERA_NODE_MODULES when set, else the installed
 * PKGDATADIR/viewer and PKGDATADIR/node_modules. */
void handle_viewer(hreq *r, const route_match *m);
const char *viewer_dir(const tess_config *cfg);
const char *viewer_node_modules_dir(const tess_config *cfg);
/* The Content-Type served for a file name by its extension, or NULL (not served). */
const char *viewer_content_type(const char *path);
/* 1 when `rel` is a safe relative path: segments of [A-Za-z0-9_.-] not starting with '.',
 * no empty segment, at most 200 characters; else 0. */
int viewer_path_ok(const char *rel);
/* 1 when an Accept-Encoding header value takes gzip ("gzip" or "*" with a q above 0),
 * else 0 (NULL included).  Text, JSON, SVG and WebAssembly files are then answered
 * gzip-compressed (compressed once, kept in the response cache), with
 * Vary: Accept-Encoding either way. */
int viewer_accepts_gzip(const char *ae);

/* Shared by the image handlers: encode a w x h result (row 0 = FITS row 1) as the
 * requested format into r->rep (200), or a problem reply.  `cards` is the WCS of the
 * result for FITS (may be NULL). */
#include "engine/image/render.h"
#include "daemon/api/params.h"
void reply_image(hreq *r, const double *data, long w, long h, out_format fmt,
                 const render_params *rp, const char *cards, int ncards);

/* Sets the headers that go with an image reply of `fmt` (X-Shape "H,W" — rows, columns,
 * numpy's order — for raw float32 bodies).  Call it before hreq_try_cache so that cache
 * hits carry them too (reply_image sets them as well).  Cannot fail. */
void reply_image_shape(hreq *r, out_format fmt, long w, long h);

#endif
