/* Helpers shared by the job types on cubes and stacks: body checks, work files, FITS products. */
#ifndef TESSERA_DAEMON_JOBS_JOB_COMMON_H
#define TESSERA_DAEMON_JOBS_JOB_COMMON_H

#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>
#include "daemon/catalog.h"
#include "daemon/jobs/jobkind.h"
#include "engine/cube/transpose.h"
#include "engine/image/chunkstore.h"

/* Aim for at least this many blocks per stage. */
#define JOBC_MIN_BLOCKS 16

static inline long jobc_lmin(long a, long b) { return a < b ? a : b; }
static inline long jobc_lmax(long a, long b) { return a > b ? a : b; }

/* ---- the typed request of the job types on a cube or stack ---- */

/* What parse makes of a body of ingest, rechunk, recenter, reduce or power_spectrum. */
typedef struct jobc_req {
    char type[32];          /* body.type */
    const char *const *known;   /* the fields the type takes, in their order */
    const dataset *d;       /* body.dataset */
    char output[72];        /* body.output.name; "" for a type without an output */
    long size[2];           /* recenter: body.size, W and H */
    int op, axis;           /* reduce: body.op (stack_zop), body.axis (zreduce_axis) */
} jobc_req;

/* A job type's own checks of body (after body.dataset, in r->d), filling its fields of
 * r: 0, or -1 with *pb. */
typedef int (*jobc_req_check)(const json_t *body, jobc_req *r, job_problem *pb);

/* The parse (jobkind.h) of these types: every key of body one of `known`
 * (NULL-terminated), body.dataset (jobc_check_dataset), `check` (NULL: none), then, when
 * `output`, body.output (jobc_check_output).  0 with *req (a jobc_req: free(3) it), or -1
 * with *pb (500 when out of memory). */
int jobc_parse(const json_t *body, const job_env *env, int accepted,
               const char *const *known, jobc_req_check check, int output, void **req,
               job_problem *pb);

/* The req_json (jobkind.h) of a jobc_req: the fields of r->known in that order, from the
 * request (dataset by its catalog name, op and axis by name). */
json_t *jobc_req_json(const void *req);

/* body.dataset names a cube or stack of env->cat with at least 2 planes and fewer than
 * 2^32 - 1 pixels a plane: *out = it.  Else -1 with *pb: 400 missing or not a string,
 * 404 unknown, 422 an image or a single plane, 413 too many pixels. */
int jobc_check_dataset(const json_t *body, const job_env *env, const dataset **out,
                       job_problem *pb);

/* body.output is {"name": NAME}, NAME a valid dataset name, unused unless `accepted`:
 * copied to name (len bytes).  0, or -1 with *pb (400, 409 when taken). */
int jobc_check_output(const json_t *body, const job_env *env, int accepted, char *name,
                      size_t len, job_problem *pb);

/* ---- the steps every job type takes ---- */

/* A zeroed state of `size` bytes for a plan (free(3) it, or hand it to
 * jobc_plan_one_stage).  NULL with err "out of memory" when it cannot be allocated. */
void *jobc_state_new(size_t size, char *err, size_t errlen);

/* The end of a plan of one stage of `nblocks` blocks: with rc 0 the plan takes `state`
 * and 0 is returned; otherwise `state` is freed (free(3)) and rc returned. */
int jobc_plan_one_stage(job_plan *out, void *state, long nblocks, int rc);

/* The end of finish: the product built at `from` (NULL: already at tmp_path) linked to
 * tmp_path (jobc_link_file), then *prod registering it as the dataset `name`
 * (jobc_product_dataset) or attaching it to the dataset `name` with `content_type`
 * (jobc_product_attach).  Return 0, or jobc_link_file's codes with err (prod untouched). */
int jobc_product_dataset(const char *from, const char *tmp_path, const char *name,
                         job_product *prod, char *err, size_t errlen);
int jobc_product_attach(const char *from, const char *tmp_path, const char *name,
                        const char *content_type, job_product *prod, char *err,
                        size_t errlen);

/* ---- work files ---- */

/* Writes n bytes at `off` of the existing file `path`.  0 or TESS_EIO with err. */
int jobc_write_at(const char *path, const void *buf, size_t n, off_t off, char *err,
                  size_t errlen);

/* The marker <workdir>/plan.ok says that plan() made the work files: written last by
 * the first plan, tested by a plan after a restart.  touch: 0 or TESS_EIO with err;
 * exists: 1 or 0. */
int jobc_touch_marker(const char *workdir, char *err, size_t errlen);
int jobc_marker_exists(const char *workdir);

/* A plan's parameters that are not a pure function of the request and the dataset (the
 * thread count, a memory bound, whether a copy is attached) decided once: block k of a
 * stage must name the same work on every planning of the job (jobkind.h), by whichever
 * server or worker plans it, whatever its settings.  fresh (the job's first plan, before
 * jobc_touch_marker): writes vals[0 .. n-1] (1 <= n <= JOBC_PLAN_MAX_VALUES) as decimal
 * text, one line, to <workdir>/<name>.plan atomically (a temporary file, fsync, rename,
 * fsync of the directory) and returns 0.  Otherwise reads them back into vals: 0; 1 when
 * the file does not exist (a work directory of a build before the record: vals are left
 * as the caller computed them, from its own settings, as that build did); TESS_EIO with
 * err when it cannot be read or does not hold exactly n integers.  The caller checks the
 * values' ranges.  TESS_EINVAL for a bad n or a name too long. */
#define JOBC_PLAN_MAX_VALUES 16
int jobc_plan_record(const char *workdir, int fresh, const char *name, long *vals, int n,
                     char *err, size_t errlen);

/* The identity (dataset_version) of the files of d that the job's work files in
 * `workdir` are derived from, in `ver` (at least 64 bytes): recorded in
 * <workdir>/source.version by the job's first plan, read back by a plan that resumes it,
 * so that finish() can refuse partial results computed from files since replaced
 * (jobc_source_check).  0 or TESS_EIO with err. */
int jobc_source_pin(const dataset *d, const char *workdir, char *ver, size_t len, char *err,
                    size_t errlen);

/* 0 when the files of d are still the ones `ver` names (dataset_copy_current), else
 * TESS_EIO with err: "the files of dataset 'NAME' changed while the job ran: its partial
 * results are of the files it started with; submit it again". */
int jobc_source_check(const dataset *d, const char *ver, char *err, size_t errlen);

/* Puts the work file `from` at `to` for finish(): a hard link, replacing what is at `to`
 * (a copy across file systems).  `from` stays in the work directory until the job ends,
 * so that finish can run again when the process died after the runner moved the product
 * into place and before it recorded the job's end.  A missing `from` with an existing
 * `to` counts as done.  0 or TESS_EIO with err. */
int jobc_link_file(const char *from, const char *to, char *err, size_t errlen);

/* ---- jobs of frames: a stage of blocks of consecutive planes ---- */

/* The frames of d in blocks of *per_block consecutive planes (the last one shorter),
 * *nblocks of them: at least JOBC_MIN_BLOCKS when d has that many planes. */
void jobc_frame_blocks(const dataset *d, long *per_block, long *nblocks);

/* A plane of a frames job as jobc_frames_run hands it over: its 8-bit stored values
 * (u8: nx * ny, row y at u8 + y nx; only when asked for and the frame holds exactly its
 * physical values as uint8, stack_plane) or else its values as doubles (v); the other
 * is NULL.  Both are valid during the call only. */
typedef struct jobc_frame {
    long z;
    const unsigned char *u8;
    const double *v;
} jobc_frame;

typedef int (*jobc_frame_fn)(void *arg, const jobc_frame *f, char *err, size_t errlen);

/* Block `block` of a frames job on d (planes block * per_block onwards, at most per_block
 * of them; jobc_frame_blocks): for each plane, stops with TESS_ECANCELED when *cancel is
 * set, gets the plane through dataset_stack (as 8 bits when want_u8 and the frame has
 * them, else as doubles) and calls fn(arg, plane).  0, or the first error of fn or of
 * the read (TESS_EIO when a mapped frame was truncated while read, TESS_ENOMEM). */
int jobc_frames_run(const dataset *d, long per_block, long block, int want_u8,
                    const volatile int *cancel, jobc_frame_fn fn, void *arg, char *err,
                    size_t errlen);

/* The FITS product at `path` of a job whose blocks write planes at fixed offsets: made by
 * the first plan (jobc_fits_create of t, its bitpix, 3 axes naxes[], no WCS, `cards`),
 * and, when side_path is not NULL, a side file of side_bytes zero bytes, then the marker
 * (jobc_touch_marker); a plan after a restart finds the marker and only reads the data
 * offset.  *datastart = the offset of the data.  0 or a TESS_E* code with err. */
int jobc_plane_product(const char *workdir, const char *path, cs_dtype t, const long *naxes,
                       const char *const *cards, const char *side_path, off_t side_bytes,
                       long long *datastart, char *err, size_t errlen);

/* Opens the existing work file `path` for writing: a descriptor, or -1 with err
 * ("cannot open PATH: reason", TESS_EIO). */
int jobc_open_work(const char *path, char *err, size_t errlen);

/* Writes plane z (n bytes) at datastart + z n of work file fd (named path in the error).
 * 0 or TESS_EIO with err. */
int jobc_write_plane(int fd, const char *path, const void *buf, size_t n, long long datastart,
                     long z, char *err, size_t errlen);

/* Closes fd from jobc_open_work (ignored when < 0) and returns rc, or TESS_EIO with err
 * when rc was 0 and the close failed. */
int jobc_close_work(int fd, const char *path, int rc, char *err, size_t errlen);

/* A job kind's release for a state that is one malloc'd block. */
void jobc_free_state(void *state);

/* ---- value types and FITS products ---- */

/* The value type that holds the physical values of `d` exactly (job_stack.h): u1 for
 * BITPIX 8, u2 for BITPIX 16 with BZERO 32768, i2 for plain BITPIX 16, else f4 (also
 * with BLANK or BSCALE != 1); u2/u1 for 16/8-bit PNG frames. */
cs_dtype jobc_choose_dtype(const dataset *d);

/* BITPIX of a product holding type t: 8, 16 (u2 as BZERO 32768, i2) or -32. */
int jobc_fits_bitpix(cs_dtype t);

/* Creates `path` holding an image HDU of naxis (1-3) axes naxes[] (NAXIS1 first) and
 * `bitpix`, with a data unit of zeros; *datastart = the byte offset of the data.  The
 * header: when `wcs_from` is given, those of its cards that describe the celestial axes
 * 1 and 2 (CTYPEi, CUNITi, CRVALi, CRPIXi, CDELTi, CROTAi, CDi_j, PCi_j, PV1_m, PV2_m for
 * i, j in 1..2; RADESYS, RADECSYS, EQUINOX, EPOCH, LONPOLE, LATPOLE) or the observation
 * (MJD-OBS, DATE-OBS, OBJECT, TELESCOP, INSTRUME), in the source's order; BZERO 32768
 * when t is u2 and bitpix 16; then `cards` (NULL-terminated card texts).  0, or
 * TESS_ENOMEM / the errors of fitswrite_file with err. */
int jobc_fits_create(const char *path, cs_dtype t, int bitpix, int naxis, const long *naxes,
                     const dataset *wcs_from, const char *const *cards, long long *datastart,
                     char *err, size_t errlen);

/* Big-endian FITS encoding of n values of type t (as jobc_fits_bitpix(t)) into dst; u2
 * is stored as value - 32768 (BZERO 32768).  Cannot fail. */
void jobc_fits_encode(cs_dtype t, const double *v, unsigned char *dst, long n);

/* ---- transposes ---- */

/* The transpose source of dataset d: its reader, shape, jobc_choose_dtype and name
 * (borrowed from d). */
void jobc_source(const dataset *d, cube_source *src);

/* The stages of a transpose: stage 0 the groups (ngroups * split blocks when the groups
 * are split in parts) and stage 1 the bands, or one stage of bands when it is direct. */
void jobc_plan_stages(const cube_transpose *t, job_plan *out);

/* The bytes a decoded frame of d takes in its reader (stack.h): a PNG or TIFF frame of a
 * stack as stored (1, 2 or 4 bytes a pixel), a tile-compressed FITS frame of a stack as
 * doubles; 0 for frames read through a mapping (their pages are the page cache's) and
 * for cubes.  Reads the first frame's header at most. */
double jobc_frame_bytes(const dataset *d);

/* Adds to *c the decoded frames of d a job keeps in memory: to the state, what the
 * dataset's reader keeps in its LRU once the job has read through it (stack_cache_bound),
 * and to the block, `held` frames a block holds (they may have left the LRU meanwhile).
 * Nothing for mapped frames.  Cannot fail. */
void jobc_frames_cost(const dataset *d, long held, job_cost *c);

/* What a transpose of d (cube_transpose_init with out_bytes_per_value) needs, into *c:
 * state = its permutation (4 bytes a pixel) and the reader's decoded frames
 * (jobc_frames_cost); block = the larger of a group's buffers (unless `direct`: the
 * planes it holds and a tile row of each in the store's type, a tile row of doubles; its
 * values go straight into the mapped staging file) and a band's (its series) plus
 * `band_extra` bytes per value of the band; work = the staging file unless `direct`.
 * The caller adds its product.  Cannot fail. */
void jobc_transpose_cost(const dataset *d, long out_bytes_per_value, int direct,
                         double band_extra, job_cost *c);

/* The buffers of a stage A group of d holding zmax planes at once, in bytes: a tile row
 * of each held plane in the store's type and a tile row of doubles, at least one plane of
 * CUBE_TILE values and doubles a pixel; the decoded frames it holds not included.
 * Cannot fail. */
double jobc_transpose_group_bytes(const dataset *d, long zmax);

#endif
