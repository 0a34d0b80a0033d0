/* The "power_spectrum" job type (job_stack.h): |FFT|^2 along z of every pixel, over engine/cube. */
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/hugemem.h"
#include "engine/cube/spectrum.h"
#include "engine/cube/transpose.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/chunkstore.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ps_state {
    cube_transpose t;
    char out_path[PATH_MAX];
    char name[128];
    long long datastart;
    cube_spectrum *plan;      /* transforms of series of nz values */
    const dataset *d;
    char source[64];          /* the identity of the files the work files are of */
} ps_state;

static int ps_parse(const json_t *body, const job_env *env, int accepted, void **req,
                    job_problem *pb)
{
    static const char *const known[] = {"type", "dataset", "output", NULL};
    return jobc_parse(body, env, accepted, known, NULL, 1, req, pb);
}

static void ps_release(void *state)
{
    ps_state *s = state;
    if (!s)
        return;
    cube_spectrum_free(s->plan);
    cube_transpose_release(&s->t);
    free(s);
}

/* 1 when the attached chunk store of d is current and matches its shape. */
static int usable_profile(const dataset *d, char *path, size_t len)
{
    if (!dataset_profile_path(d, path, len))
        return 0;
    chunkstore_info ci;
    char e[256];
    if (chunkstore_read_info(path, &ci, e, sizeof e) != 0)
        return 0;
    return ci.nx == d->nx && ci.ny == d->ny && ci.nz == d->nz && ci.tx == CUBE_TILE &&
           ci.ty == CUBE_TILE && ci.dtype == jobc_choose_dtype(d) &&
           dataset_copy_current(d, ci.source_version);
}

/* The disk blocks of the cube's data allocated at once, as unwritten extents (where the
 * file system has fallocate; elsewhere nothing changes), so that the spectra's pwrite
 * calls find their blocks mapped instead of reserving each 4 KB block for delayed
 * allocation (ext4_da_get_block_prep, ext4_block_write_begin: a third of the write's
 * kernel time).  bench/stackbench ps, 2000 frames of 256 x 256, 1 worker, 4 runs
 * alternated with the build before: system time 0.71 -> 0.61 s, the job's CPU 1.48 ->
 * 1.32 s.  The staging file gained nothing from the same (it is written through a
 * mapping), so it is left sparse.  A restart finds the blocks already allocated. */
static void prealloc_cube(const char *path, long long datastart, const dataset *d)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)datastart,
                    (off_t)d->nx * (off_t)d->ny * (off_t)d->nz * 4);
    close(fd);
}

/* Stage A's groups: planned for `threads` workers when the work files are made, and
 * recorded in <workdir>/groups.plan ("G SPLIT", jobc_plan_record), since block k of
 * stage A names a different part of a different group under another G or SPLIT (a runner
 * restarted with another thread count would leave groups unwritten).  A work directory
 * without that file was made by a build that kept cube_transpose_init's groups: they
 * stay. */
static int stage_a_plan(ps_state *s, const dataset *d, int threads, int fresh,
                        const char *workdir, char *err, size_t errlen)
{
    long v[2] = {0, 0};
    if (fresh) {
        job_stack_group_plan(&s->t, d, threads);
        v[0] = s->t.g;
        v[1] = s->t.split;
    }
    int rc = jobc_plan_record(workdir, fresh, "groups", v, 2, err, errlen);
    if (rc != 0 || fresh)
        return rc < 0 ? rc : 0;
    if (!job_stack_group_valid(d, v[0], v[1])) {
        tess_seterr(err, errlen, "%s/groups.plan does not hold a plan of groups", workdir);
        return TESS_EIO;
    }
    job_stack_group_set(&s->t, v[0], v[1]);
    return 0;
}

/* Whether the job planned in `workdir` (its marker made) reads the rechunk copy named in
 * <workdir>/direct.path (into src, PATH_MAX) rather than running stage A. */
static int recorded_direct(const char *workdir, char *src, size_t len)
{
    char flag[PATH_MAX];
    snprintf(flag, sizeof flag, "%s/direct.path", workdir);
    FILE *f = fopen(flag, "r");
    if (!f)
        return 0;
    int direct = fgets(src, (int)len, f) != NULL && src[0] != 0;
    fclose(f);
    return direct;
}

static int ps_plan(const void *req, const job_env *env, const char *workdir, job_plan *out,
                   char *err, size_t errlen)
{
    const jobc_req *r = req;
    const dataset *d = r->d;
    int rc;
    ps_state *s = jobc_state_new(sizeof *s, err, errlen);
    if (!s)
        return TESS_ENOMEM;
    snprintf(s->out_path, sizeof s->out_path, "%s/spectrum.fits", workdir);
    snprintf(s->name, sizeof s->name, "%s", r->output);
    s->d = d;
    if ((rc = jobc_source_pin(d, workdir, s->source, sizeof s->source, err, errlen))) {
        free(s);
        return rc;
    }
    /* Whether stage A is needed is decided once, when the work files are created, and
     * remembered in the work directory (a later rechunk must not change the plan). */
    char direct_flag[PATH_MAX], src[PATH_MAX] = "";
    snprintf(direct_flag, sizeof direct_flag, "%s/direct.path", workdir);
    int fresh = !jobc_marker_exists(workdir);
    int direct = 0;
    if (fresh)
        direct = usable_profile(d, src, sizeof src);
    else
        direct = recorded_direct(workdir, src, sizeof src);
    cube_source cs;
    jobc_source(d, &cs);
    rc = cube_transpose_init(&s->t, &cs, 4, direct, src, workdir, err, errlen);
    /* Stage A as rechunk's plan of groups (the staging file is a store of the same
     * layout): groups of up to 64 planes held at once, each in a part per worker holding
     * them once, the file's pages made a tile row at a time.  bench/stackbench ps, 250
     * PNG frames of 1000 x 1000, 2 workers, 8 runs alternated with groups of 16 held
     * whole: CPU 1.658 -> 1.589 s (3.18 -> 3.00 x the decode floor), stage A's wall
     * 0.547 -> 0.411 s; memory: ps_estimate and job_stack.h. */
    if (!rc && !direct)
        rc = stage_a_plan(s, d, env->threads, fresh, workdir, err, errlen);
    if (!rc && fresh) {
        char c_src[81] = "", c_unit[81] = "", unit[48];
        fitscard_string(c_src, "PSSOURCE", d->name, 0, NULL);
        snprintf(unit, sizeof unit, "(%.40s)**2", d->bunit);
        if (d->bunit[0])
            fitscard_string(c_unit, "BUNIT", unit, 0, NULL);
        c_src[80] = c_unit[80] = '\0';
        const char *cards[] = {
            "COMMENT Power spectrum along z of each pixel: plane k = |FFT(series)[k]|^2,",
            "COMMENT k = 0..NAXIS3-1 cycles per NAXIS3 samples, no mean removal, no window",
            c_src, c_unit[0] ? c_unit : NULL, NULL};
        long naxes[3] = {d->nx, d->ny, d->nz};
        rc = jobc_fits_create(s->out_path, CS_F32, -32, 3, naxes, d, cards, &s->datastart, err,
                             errlen);
        if (!rc)
            prealloc_cube(s->out_path, s->datastart, d);
        if (!rc)
            rc = cube_transpose_create_files(&s->t, err, errlen);
        if (!rc && direct) {
            FILE *f = fopen(direct_flag, "w");
            if (!f || fputs(src, f) < 0 || fclose(f) != 0) {
                tess_seterr(err, errlen, "cannot write %s", direct_flag);
                rc = TESS_EIO;
            }
        }
        if (!rc)
            rc = jobc_touch_marker(workdir, err, errlen);
    } else if (!rc) {
        rc = fitsimg_data_offset(s->out_path, 0, &s->datastart, err, errlen);
    }
    if (!rc)
        rc = cube_spectrum_new(d->nz, &s->plan, err, errlen);
    if (rc) {
        ps_release(s);
        return rc;
    }
    jobc_plan_stages(&s->t, out);
    out->nblocks[out->nstages - 1] = cube_spectrum_nblocks(&s->t);   /* the spectra */
    out->state = s;
    return 0;
}

static int ps_run(void *state, int stage, long block, const volatile int *cancel, char *err,
                  size_t errlen)
{
    ps_state *s = state;
    if (stage == 0 && !s->t.direct)
        return cube_transpose_group(&s->t, block, cancel, err, errlen);
    return cube_spectrum_block(s->plan, &s->t, block, s->out_path, s->datastart, cancel, err,
                               errlen);
}

static int ps_finish(void *state, const char *tmp_path, job_product *prod, char *err,
                     size_t errlen)
{
    ps_state *s = state;
    int rc = jobc_source_check(s->d, s->source, err, errlen);
    if (!rc)
        rc = jobc_link_file(s->out_path, tmp_path, err, errlen);
    if (rc)
        return rc;
    if (!s->t.direct)
        unlink(s->t.stage_path);
    return jobc_product_dataset(NULL, tmp_path, s->name, prod, err, errlen);
}

/* The float32 cube (nx, ny, nz) and the staging file (none when a current rechunk copy
 * is attached: the blocks read it); a stage A block holds its group (rechunk's); a
 * spectrum block holds the spectra of the largest
 * block (planes k <= nz / 2: cube_spectrum_spectra_bytes, at most the block budget of
 * spectrum.h, 16 MB, or a row of 16 pixels' when that passes it), one batch of FFT_BATCH
 * series as stored, and the FFT's buffers of FFT_BATCH series (spectrum.c: nz doubles,
 * nz / 2 + 1 complex values and as many powers each); the plan keeps the FFT's plan (its
 * twiddle factors).  The bound this gives (jobbudget_peak) is job_stack.h's.  Whether
 * stage A runs and its groups are the plan's: for a job resumed in env->workdir (its
 * marker made) those its first plan recorded (direct.path, groups.plan: read only, as
 * ps_plan reads them; a runner of fewer threads recorded larger groups), else those of
 * this process. */
static int ps_estimate(const void *req, const job_env *env, job_cost *c, job_problem *pb)
{
    (void)pb;
    const dataset *d = ((const jobc_req *)req)->d;
    char src[PATH_MAX], why[256];
    int resumed = env->workdir && jobc_marker_exists(env->workdir);
    int direct = resumed ? recorded_direct(env->workdir, src, sizeof src)
                         : usable_profile(d, src, sizeof src);
    double es = (double)chunkstore_esize(jobc_choose_dtype(d));
    /* the permutation and the reader's decoded frames; no band (this job never holds
     * one: its blocks of spectra are bounded instead) and no group (asked as direct) */
    jobc_transpose_cost(d, 4, 1, -es, c);
    c->block_bytes = 0.0;
    double held = 0.0;   /* the decoded frames of a stage A block */
    if (!direct) {
        /* stage A's group as rechunk's (job_stack_group_plan): its buffers and the frames
         * it holds, counted for every block although the parts of a group share them (a
         * worker done with its part may hold the next group's meanwhile) */
        long hold = job_rechunk_group_planes(d, env->threads), v[2];
        if (resumed && jobc_plan_record(env->workdir, 0, "groups", v, 2, why, sizeof why) == 0
            && job_stack_group_valid(d, v[0], v[1]))
            hold = v[0];
        double frame = jobc_frame_bytes(d);
        held = frame > 0.0 ? (double)hold * frame : 0.0;
        c->block_bytes = jobc_transpose_group_bytes(d, hold) + held;
        snprintf(c->what, sizeof c->what, "a group of %ld planes of %ld x %ld pixels", hold,
                 d->nx, d->ny);
        c->work_bytes = (double)d->nx * (double)d->ny * (double)d->nz * es;
    }
    double nz = (double)d->nz, nh = floor(nz / 2.0) + 1.0;
    double fft = 32.0 * (8.0 * nz + 16.0 * nh + 4.0 * nh);
    /* the spectra of the largest block (k <= nz / 2), on huge pages: whole 2 MB of them
     * (hugemem.h) */
    size_t spectra = cube_spectrum_spectra_bytes(d->nx, d->ny, d->nz, (int)es);
    /* and the frames stage A's blocks held, which the PNG decoder's pool of buffers
     * (pngframe_release: up to 64 MB, process-wide) may keep through the spectra: 256 x
     * 256 frames, 8000 of them, 2 workers, peak 53.2-54.9 MB against 50.9-51.3 MB with
     * groups of 16 frames (a bound of 57.0 MB without them) */
    double block = (double)tess_huge_bytes(spectra) + fft + 32.0 * nz * es + held;
    if (strncmp(c->what, "a band", 6) == 0 || block > c->block_bytes) {
        /* the spectra's block (a group of stage A stays when larger) */
        c->block_bytes = block;
        snprintf(c->what, sizeof c->what, "a block of at most %.0f MB of series of %ld "
                 "values and their spectra", block / 1048576.0, d->nz);
    }
    c->state_bytes += 32.0 * nz + 65536.0;
    double cube = (double)d->nx * (double)d->ny * (double)d->nz * 4.0 + 2.0 * 2880.0
                  + (double)d->nkeys * 80.0;
    c->work_bytes += cube;
    c->product_bytes = cube;
    return 0;
}

const job_kind job_kind_power_spectrum = {
    .type = "power_spectrum",
    .parse = ps_parse,
    .req_free = free,
    .req_json = jobc_req_json,
    .plan = ps_plan,
    .run_block = ps_run,
    .finish = ps_finish,
    .release = ps_release,
    .estimate = ps_estimate,
};
