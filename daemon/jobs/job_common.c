/* Helpers shared by the job types on cubes and stacks (job_common.h). */
#include "daemon/jobs/job_common.h"

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/image/stack.h"
#include "engine/image/zreduce.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARKER "plan.ok"

/* ---- files --------------------------------------------------------------------------- */

int jobc_write_at(const char *path, const void *buf, size_t n, off_t off, char *err,
                  size_t errlen)
{
    if (tess_pwrite_file(path, buf, n, off) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int jobc_touch_marker(const char *workdir, char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", workdir, MARKER);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || tess_pwrite_all(fd, "ok\n", 3, 0) != 0 || close(fd) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", p, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

int jobc_marker_exists(const char *workdir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", workdir, MARKER);
    return file_exists(p);
}

/* Writes `text` to `path` whole: a unique temporary name beside it, fsync, rename over
 * `path`, fsync of the directory.  0 or TESS_EIO with err. */
static int write_whole(const char *dir, const char *path, const char *text, char *err,
                       size_t errlen)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
        tess_seterr(err, errlen, "the work directory's name is too long");
        return TESS_EIO;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    int bad = tess_pwrite_all(fd, text, strlen(text), 0) != 0 || fsync(fd) != 0;
    bad |= close(fd) != 0;
    if (bad || rename(tmp, path) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return TESS_EIO;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        tess_seterr(err, errlen, "cannot sync %s: %s", dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return TESS_EIO;
    }
    close(dfd);
    return 0;
}

int jobc_plan_record(const char *workdir, int fresh, const char *name, long *vals, int n,
                     char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (n < 1 || n > JOBC_PLAN_MAX_VALUES ||
        snprintf(path, sizeof path, "%s/%s.plan", workdir, name) >= (int)sizeof path) {
        tess_seterr(err, errlen, "no plan record '%s' of %d values in the work directory",
                    name, n);
        return TESS_EINVAL;
    }
    if (fresh) {
        char text[JOBC_PLAN_MAX_VALUES * 24 + 2];
        size_t len = 0;
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%ld", i ? " " : "",
                                    vals[i]);
        snprintf(text + len, sizeof text - len, "\n");
        return write_whole(workdir, path, text, err, errlen);
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        tess_seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    long got[JOBC_PLAN_MAX_VALUES];
    int k = 0, c;
    while (k < n && fscanf(f, "%ld", &got[k]) == 1)
        k++;
    while ((c = fgetc(f)) == ' ' || c == '\n')
        ;
    fclose(f);
    if (k != n || c != EOF) {
        tess_seterr(err, errlen, "%s does not hold the plan's %d values", path, n);
        return TESS_EIO;
    }
    memcpy(vals, got, sizeof(long) * (size_t)n);
    return 0;
}

int jobc_source_pin(const dataset *d, const char *workdir, char *ver, size_t len, char *err,
                    size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/source.version", workdir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {   /* a resumed job: the identity its first plan saw */
        ssize_t n = read(fd, ver, len - 1);
        close(fd);
        if (n > 0) {
            ver[n] = '\0';
            return 0;
        }
        /* empty (lost to a power cut before it reached the disk): pinned anew */
    }
    dataset_version(d, ver, len);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || tess_pwrite_all(fd, ver, strlen(ver), 0) != 0;
    if ((fd >= 0 && close(fd) != 0) || bad) {
        tess_seterr(err, errlen, "cannot write %s: %s", p, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

int jobc_source_check(const dataset *d, const char *ver, char *err, size_t errlen)
{
    if (dataset_copy_current(d, ver))
        return 0;
    tess_seterr(err, errlen, "the files of dataset '%s' changed while the job ran: its "
                "partial results are of the files it started with; submit it again", d->name);
    return TESS_EIO;
}

/* Links `from` to `to` (a copy across file systems); see job_common.h. */
int jobc_link_file(const char *from, const char *to, char *err, size_t errlen)
{
    if (!file_exists(from) && file_exists(to))
        return 0;
    if (unlink(to) != 0 && errno != ENOENT) {
        tess_seterr(err, errlen, "cannot replace %s: %s", to, strerror(errno));
        return TESS_EIO;
    }
    if (link(from, to) == 0)
        return 0;
    if (errno != EXDEV) {
        tess_seterr(err, errlen, "cannot link %s to %s: %s", from, to, strerror(errno));
        return TESS_EIO;
    }
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char *buf = malloc(1 << 20);
    struct stat st;
    int rc = in >= 0 && out >= 0 && buf && fstat(in, &st) == 0 ? 0 : TESS_EIO;
    for (off_t off = 0; rc == 0 && off < st.st_size; off += 1 << 20) {
        size_t k = st.st_size - off < (1 << 20) ? (size_t)(st.st_size - off) : 1 << 20;
        if (tess_pread_all(in, buf, k, off) != 0 || tess_pwrite_all(out, buf, k, off) != 0)
            rc = TESS_EIO;
    }
    free(buf);
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        rc = TESS_EIO;
    if (rc) {
        tess_seterr(err, errlen, "cannot copy %s to %s", from, to);
        unlink(to);
        return rc;
    }
    return 0;
}

/* The value type that holds the physical values of `d` exactly (see job_stack.h).  PNG
 * frames hold unsigned samples (0..255, 0..65535) under a BITPIX 8 or 16 header without
 * BZERO (engine/image/stack.h): 16-bit ones are uint16, not int16. */
cs_dtype jobc_choose_dtype(const dataset *d)
{
    if (d->kind == DS_STACK && d->npaths > 0 && frame_is_png(d->paths[0]))
        return d->bitpix == 16 ? CS_U16 : CS_U8;
    char v[80];
    double bscale = 1, bzero = 0;
    int blank = 0;
    if (d->header) {
        if (fitscard_get(d->header, d->nkeys, "BSCALE", v, sizeof v))
            bscale = atof(v);
        if (fitscard_get(d->header, d->nkeys, "BZERO", v, sizeof v))
            bzero = atof(v);
        blank = fitscard_get(d->header, d->nkeys, "BLANK", v, sizeof v);
    }
    if (blank || bscale != 1.0)
        return CS_F32;
    if (d->bitpix == 8 && bzero == 0)
        return CS_U8;
    if (d->bitpix == 16 && bzero == 32768)
        return CS_U16;
    if (d->bitpix == 16 && bzero == 0)
        return CS_I16;
    return CS_F32;
}

/* ---- jobs of frames ----------------------------------------------------------------- */

void jobc_frame_blocks(const dataset *d, long *per_block, long *nblocks)
{
    *per_block = jobc_lmax(1, (d->nz + JOBC_MIN_BLOCKS - 1) / JOBC_MIN_BLOCKS);
    *nblocks = (d->nz + *per_block - 1) / *per_block;
}

int jobc_frames_run(const dataset *d, long per_block, long block, int want_u8,
                    const volatile int *cancel, jobc_frame_fn fn, void *arg, char *err,
                    size_t errlen)
{
    size_t npix = (size_t)d->nx * (size_t)d->ny;
    double *plane = NULL;
    stack *st = dataset_stack(d);
    long z0 = block * per_block, z1 = jobc_lmin(d->nz, z0 + per_block);
    int rc = 0;
    for (long z = z0; z < z1 && !rc; z++) {
        if (*cancel) {
            rc = TESS_ECANCELED;
            break;
        }
        stack_plane p = {0};
        if (want_u8 && (rc = stack_plane_hold(st, z, &p, err, errlen)) != 0)
            break;
        jobc_frame f = {z, p.u8, NULL};
        if (!p.u8) {
            if (!plane && !(plane = malloc(sizeof(double) * npix))) {
                tess_seterr(err, errlen, "out of memory for a plane of '%s'", d->name);
                rc = TESS_ENOMEM;
            }
            if (!rc)
                rc = stack_read_region(st, z, 0, 0, d->nx, d->ny, plane, err, errlen);
            f.v = plane;
        }
        if (!rc)
            rc = fn(arg, &f, err, errlen);
        if (stack_plane_release(st, &p) && !rc) {
            tess_seterr(err, errlen, "a frame of '%s' was truncated while read", d->name);
            rc = TESS_EIO;
        }
    }
    free(plane);
    return rc;
}

int jobc_plane_product(const char *workdir, const char *path, cs_dtype t, const long *naxes,
                       const char *const *cards, const char *side_path, off_t side_bytes,
                       long long *datastart, char *err, size_t errlen)
{
    if (jobc_marker_exists(workdir))
        return fitsimg_data_offset(path, 0, datastart, err, errlen);
    int rc = jobc_fits_create(path, t, jobc_fits_bitpix(t), 3, naxes, NULL, cards, datastart,
                              err, errlen);
    if (!rc && side_path) {
        int fd = open(side_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ftruncate(fd, side_bytes) != 0 || close(fd) != 0) {
            tess_seterr(err, errlen, "cannot create %s", side_path);
            rc = TESS_EIO;
        }
    }
    return rc ? rc : jobc_touch_marker(workdir, err, errlen);
}

int jobc_open_work(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return fd;
}

int jobc_write_plane(int fd, const char *path, const void *buf, size_t n, long long datastart,
                     long z, char *err, size_t errlen)
{
    if (tess_pwrite_all(fd, buf, n, (off_t)(datastart + (long long)z * (long long)n)) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    return 0;
}

int jobc_close_work(int fd, const char *path, int rc, char *err, size_t errlen)
{
    if (fd >= 0 && close(fd) != 0 && !rc) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        rc = TESS_EIO;
    }
    return rc;
}

void jobc_free_state(void *state)
{
    free(state);
}

/* ---- validation helpers -------------------------------------------------------------- */

int jobc_check_dataset(const json_t *body, const job_env *env, const dataset **out,
                         job_problem *pb)
{
    json_t *v = json_object_get(body, "dataset");
    if (!v) {
        jobkind_problem(pb, 400, "dataset", "'dataset' is required: the name of a cube or stack");
        return -1;
    }
    if (!json_is_string(v)) {
        jobkind_problem(pb, 400, "dataset", "'dataset' must be a string");
        return -1;
    }
    const dataset *d = NULL;
    if (jobkind_lookup(env, json_string_value(v), "dataset", &d, pb) != 0)
        return -1;
    if (!d) {
        jobkind_problem(pb, 404, "dataset", "no dataset named '%.64s'", json_string_value(v));
        return -1;
    }
    if (d->kind == DS_IMAGE || d->nz < 2) {
        jobkind_problem(pb, 422, "dataset",
                        "'%.64s' is an image; this job needs a cube or stack of 2 planes or more",
                        d->name);
        return -1;
    }
    if ((double)d->nx * (double)d->ny >= 4294967295.0) {
        jobkind_problem(pb, 413, "dataset", "'%.64s' has too many pixels per plane", d->name);
        return -1;
    }
    *out = d;
    return 0;
}

int jobc_check_output(const json_t *body, const job_env *env, int accepted, char *name,
                      size_t len, job_problem *pb)
{
    json_t *o = json_object_get(body, "output");
    if (!o) {
        jobkind_problem(pb, 400, "output", "'output' is required: {\"name\": NEW}");
        return -1;
    }
    if (!json_is_object(o)) {
        jobkind_problem(pb, 400, "output", "'output' must be an object {\"name\": NEW}");
        return -1;
    }
    static const char *const known[] = {"name", NULL};
    if (jobkind_only_fields(o, known, "output", pb) != 0)
        return -1;
    json_t *n = json_object_get(o, "name");
    if (!json_is_string(n)) {
        jobkind_problem(pb, 400, "output.name", "'output.name' must be a string");
        return -1;
    }
    if (!accepted && jobkind_check_new_name(env, json_string_value(n), "output.name", pb))
        return -1;
    if (json_string_length(n) >= len) {
        jobkind_problem(pb, 400, "output.name", "too long");
        return -1;
    }
    snprintf(name, len, "%s", json_string_value(n));
    return 0;
}

int jobc_parse(const json_t *body, const job_env *env, int accepted,
               const char *const *known, jobc_req_check check, int output, void **req,
               job_problem *pb)
{
    *req = NULL;
    jobc_req *r = calloc(1, sizeof *r);
    if (!r) {
        jobkind_problem(pb, 500, NULL, "out of memory");
        return -1;
    }
    snprintf(r->type, sizeof r->type, "%s", json_string_value(json_object_get(body, "type")));
    r->known = known;
    if (jobkind_only_fields(body, known, NULL, pb) != 0 ||
        jobc_check_dataset(body, env, &r->d, pb) != 0 || (check && check(body, r, pb) != 0) ||
        (output && jobc_check_output(body, env, accepted, r->output, sizeof r->output, pb))) {
        free(r);
        return -1;
    }
    *req = r;
    return 0;
}

json_t *jobc_req_json(const void *req)
{
    const jobc_req *r = req;
    json_t *o = json_object();
    int bad = !o;
    for (int i = 0; !bad && r->known[i]; i++) {
        const char *k = r->known[i];
        json_t *v = NULL;
        if (strcmp(k, "type") == 0)
            v = json_string(r->type);
        else if (strcmp(k, "dataset") == 0)
            v = json_string(r->d->name);
        else if (strcmp(k, "size") == 0)
            v = json_pack("[I, I]", (json_int_t)r->size[0], (json_int_t)r->size[1]);
        else if (strcmp(k, "op") == 0)
            v = json_string(zreduce_op_name((stack_zop)r->op));
        else if (strcmp(k, "axis") == 0)
            v = json_string(zreduce_axis_name((zreduce_axis)r->axis));
        else if (strcmp(k, "output") == 0)
            v = json_pack("{s:s}", "name", r->output);
        bad = json_object_set_new(o, k, v) != 0;
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- the steps every job type takes --------------------------------------------------- */

void *jobc_state_new(size_t size, char *err, size_t errlen)
{
    void *s = calloc(1, size);
    if (!s)
        tess_seterr(err, errlen, "out of memory");
    return s;
}

int jobc_plan_one_stage(job_plan *out, void *state, long nblocks, int rc)
{
    if (rc) {
        free(state);
        return rc;
    }
    out->nstages = 1;
    out->nblocks[0] = nblocks;
    out->state = state;
    return 0;
}

int jobc_product_dataset(const char *from, const char *tmp_path, const char *name,
                         job_product *prod, char *err, size_t errlen)
{
    int rc = from ? jobc_link_file(from, tmp_path, err, errlen) : 0;
    if (rc)
        return rc;
    memset(prod, 0, sizeof *prod);
    snprintf(prod->dataset, sizeof prod->dataset, "%s", name);
    return 0;
}

int jobc_product_attach(const char *from, const char *tmp_path, const char *name,
                        const char *content_type, job_product *prod, char *err,
                        size_t errlen)
{
    int rc = from ? jobc_link_file(from, tmp_path, err, errlen) : 0;
    if (rc)
        return rc;
    memset(prod, 0, sizeof *prod);
    snprintf(prod->attach_to, sizeof prod->attach_to, "%s", name);
    snprintf(prod->content_type, sizeof prod->content_type, "%s", content_type);
    return 0;
}

/* ---- FITS products ------------------------------------------------------------------- */

/* 1 when the card's keyword belongs to the celestial (axes 1 and 2) WCS or is a harmless
 * descriptive keyword worth keeping. */
static int spatial_card(const char *card)
{
    char kw[9];
    int n = 0;
    while (n < 8 && card[n] != ' ' && card[n] != '=') {
        kw[n] = card[n];
        n++;
    }
    kw[n] = 0;
    static const char *const exact[] = {
        "CTYPE1", "CTYPE2", "CUNIT1", "CUNIT2", "CRVAL1", "CRVAL2", "CRPIX1", "CRPIX2",
        "CDELT1", "CDELT2", "CROTA1", "CROTA2", "CD1_1", "CD1_2", "CD2_1", "CD2_2", "PC1_1",
        "PC1_2", "PC2_1", "PC2_2", "RADESYS", "RADECSYS", "EQUINOX", "EPOCH", "LONPOLE",
        "LATPOLE", "MJD-OBS", "DATE-OBS", "OBJECT", "TELESCOP", "INSTRUME", NULL};
    for (int i = 0; exact[i]; i++)
        if (strcmp(kw, exact[i]) == 0)
            return 1;
    return strncmp(kw, "PV1_", 4) == 0 || strncmp(kw, "PV2_", 4) == 0;
}

int jobc_fits_bitpix(cs_dtype t)
{
    return t == CS_U8 ? 8 : t == CS_U16 || t == CS_I16 ? 16 : -32;
}

/* Creates `path` holding an image HDU of the given shape: header (the source's celestial
 * WCS when `wcs_from` is given, BZERO 32768 for u2, the `cards`, NULL-terminated), and a
 * zero data unit; *datastart = the byte offset of the data. */
int jobc_fits_create(const char *path, cs_dtype t, int bitpix, int naxis, const long *naxes,
                           const dataset *wcs_from, const char *const *cards,
                           long long *datastart, char *err, size_t errlen)
{
    fitscard_list h;
    fitscard_list_init(&h, 100000);
    if (wcs_from && wcs_from->header) {
        for (int i = 0; i < wcs_from->nkeys; i++)
            if (spatial_card(wcs_from->header + 80 * i))
                fitscard_list_cards(&h, wcs_from->header + 80 * i, 1);
    }
    for (int i = 0; cards && cards[i]; i++)
        fitscard_list_text(&h, cards[i]);
    fitswrite_image im = { .bitpix = bitpix, .naxis = naxis, .naxes = { naxes[0],
                           naxis > 1 ? naxes[1] : 1, naxis > 2 ? naxes[2] : 1 },
                           .scaled = bitpix == 16 && t == CS_U16, .bscale = 1, .bzero = 32768,
                           .cards = h.cards, .ncards = h.n };
    int rc = h.rc;
    if (rc)
        tess_seterr(err, errlen, "cannot create %s: out of memory", path);
    else
        rc = fitswrite_file(path, &im, datastart, err, errlen);
    fitscard_list_release(&h);
    return rc;
}

void jobc_fits_encode(cs_dtype t, const double *v, unsigned char *dst, long n)
{
    fitswrite_encode(jobc_fits_bitpix(t), t == CS_U16 ? 32768.0 : 0.0, v, dst, n);
}

/* ---- the transpose of a dataset ------------------------------------------------------ */

void jobc_source(const dataset *d, cube_source *src)
{
    src->st = dataset_stack(d);
    src->nx = d->nx;
    src->ny = d->ny;
    src->nz = d->nz;
    src->dtype = jobc_choose_dtype(d);
    src->name = d->name;
}

void jobc_plan_stages(const cube_transpose *t, job_plan *out)
{
    if (t->direct) {
        out->nstages = 1;
        out->nblocks[0] = t->nbands;
    } else {
        out->nstages = 2;
        out->nblocks[0] = t->ngroups * (t->split > 1 ? t->split : 1);
        out->nblocks[1] = t->nbands;
    }
}

double jobc_frame_bytes(const dataset *d)
{
    if (d->kind != DS_STACK || d->npaths < 2)
        return 0.0;
    double npix = (double)d->nx * (double)d->ny;
    if (d->header_hash && d->header_hash[0] == 0)   /* PNG or TIFF: decoded as stored */
        return npix * (double)(abs(d->bitpix) > 8 ? abs(d->bitpix) / 8 : 1);
    fitsimg_info info;
    char e[256];
    if (fitsimg_read_info(d->paths[0], d->hdu, &info, e, sizeof e) != 0)
        return npix * 8.0;   /* unreadable now: counted as the larger case */
    double bytes = info.data_offset < 0 ? npix * 8.0 : 0.0;
    fitsimg_info_release(&info);
    return bytes;
}

void jobc_frames_cost(const dataset *d, long held, job_cost *c)
{
    double frame = jobc_frame_bytes(d);
    if (frame <= 0.0)
        return;
    c->state_bytes += stack_cache_bound(dataset_stack(d), frame);
    c->block_bytes += (double)jobc_lmin(held, d->nz) * frame;
}

double jobc_transpose_group_bytes(const dataset *d, long zmax)
{
    double es = (double)chunkstore_esize(jobc_choose_dtype(d));
    double nx = (double)d->nx, npix = nx * (double)d->ny;
    return fmax(npix * ((double)CUBE_TILE * es + 8.0),
                (double)zmax * CUBE_TILE * nx * es + CUBE_TILE * nx * 8.0);
}

void jobc_transpose_cost(const dataset *d, long out_bytes_per_value, int direct,
                         double band_extra, job_cost *c)
{
    double es = (double)chunkstore_esize(jobc_choose_dtype(d));
    double npix = (double)d->nx * (double)d->ny, nz = (double)d->nz;
    long g = 1, rows = CUBE_TILE;
    cube_transpose_sizes(d->nx, d->ny, d->nz, (int)es, out_bytes_per_value, &g, &rows);
    double band_px = (double)jobc_lmin(rows, d->ny) * (double)d->nx;
    memset(c, 0, sizeof *c);
    c->state_bytes = 4.0 * npix;
    c->block_bytes = band_px * nz * (es + band_extra);
    snprintf(c->what, sizeof c->what, "a band of %ld rows of %ld series of %ld values",
             jobc_lmin(rows, d->ny), d->nx, d->nz);
    long held = 0;
    double frame = jobc_frame_bytes(d);
    if (!direct) {
        /* the tile rows of the planes it holds and a tile row of doubles, at least the
         * figure of one plane of CUBE_TILE values and doubles this estimate always gave;
         * and the decoded frames it holds */
        long zmax = cube_transpose_group_hold(d->nx, d->ny, (int)es);
        long gheld = jobc_lmin(g, zmax);
        double group = jobc_transpose_group_bytes(d, zmax) + (double)gheld * frame;
        if (group > c->block_bytes) {
            c->block_bytes = group - (double)gheld * frame;   /* jobc_frames_cost adds them */
            held = gheld;
            snprintf(c->what, sizeof c->what, "a group of %ld planes of %ld x %ld pixels", g,
                     d->nx, d->ny);
        }
        c->work_bytes = npix * nz * es;
    }
    jobc_frames_cost(d, held, c);
}
