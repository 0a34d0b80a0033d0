/* Catalog of configured datasets: path resolution inside the data roots, headers, WCS. */
#include "daemon/catalog.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/image/chunkstore.h"
#include "engine/image/stack.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/clock.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"

#include <glob.h>
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CATALOG_MAX_FRAMES 100000
/* Frames (files) of one dataset kept open (mapped or decoded) at most. */
#define CATALOG_MAX_OPEN_FRAMES 64

/* Mutable part of a dataset: its current version, rechecked at most once a second. */
struct ds_state {
    pthread_mutex_t lock;
    double checked;          /* CLOCK_MONOTONIC seconds of the last check */
    char version[64];
    char header_error[512];  /* why the dataset is refused: a header changed since it was
                                opened (check_headers), or "" */
    char *profile_path;      /* profile-friendly copy (a rechunk product), or NULL */
    char profile_version[64];/* the dataset_version it was made from ("" unknown: never
                                served) */
    stack *reader;           /* lazy reader of the pixels (engine/image/stack.h) */
    stack *ingested;         /* reader of the attached plane store (an ingest product), or
                                NULL; served while the version is ingested_version */
    char ingested_version[64];
    stack **retired;         /* readers of stores replaced since: freed with the dataset,
                                as a read may still hold one */
    int nretired;
};

/* The identity of every path (tess_file_id: inode, size, mtime, ctime; for the first
 * path also the hash of its header block) folded into a version string "<total size in
 * hex>-<hash>"; a path that cannot be stat(2)ed, or read for the header block, adds a
 * marker instead, so that deletion changes the version too. */
static void compute_version(const dataset *d, char *out, size_t len)
{
    unsigned long long size = 0;
    uint64_t h = TESS_FNV64_OFFSET;
    for (int i = 0; i < d->npaths; i++) {
        tess_file_id id;
        if (tess_file_id_of(d->paths[i], i == 0, &id, NULL, 0) == 0) {
            size += (unsigned long long)id.size;
            h = tess_file_id_hash(&id, h);
        } else {
            unsigned long long gone[2] = {0xdeadULL, (unsigned long long)i};
            h = tess_fnv1a64(gone, sizeof(gone), h);
        }
    }
    snprintf(out, len, "%llx-%llx", size, (unsigned long long)h);
}

/* The keyword of the first card of the header of d->paths[0] as it is now that differs
 * from the one read at start, copied to `out` ("" when none is found or it cannot be
 * read). */
static void changed_card(const dataset *d, char *out, size_t len)
{
    fitsimg_info info;
    out[0] = '\0';
    if (frame_read_info(d->paths[0], d->hdu, &info, NULL, 0) != 0)
        return;
    for (int i = 0; i < info.nkeys || i < d->nkeys; i++) {
        const char *c = i < info.nkeys ? info.header + (size_t)i * 80 : NULL;
        const char *was = i < d->nkeys ? d->header + (size_t)i * 80 : NULL;
        if (c && was && memcmp(c, was, 80) == 0)
            continue;
        const char *k = c ? c : was;
        int n = 8;
        while (n > 0 && k[n - 1] == ' ')
            n--;
        snprintf(out, len, "%.*s", n, k);
        break;
    }
    fitsimg_info_release(&info);
}

/* Whether a header of `d` differs from the one hashed at open (d->header_hash): the reason
 * into out, else "".  A file that cannot be read is left to the pixel readers to report. */
static void check_headers(const dataset *d, char *out, size_t len)
{
    out[0] = '\0';
    for (int i = 0; d->header_hash && i < d->npaths; i++) {
        uint64_t h;
        if (!d->header_hash[i] ||
            frame_header_hash(d->paths[i], d->hdu, &h, NULL, 0) != 0 || h == d->header_hash[i])
            continue;
        char card[16] = "";
        if (i == 0)
            changed_card(d, card, sizeof(card));
        snprintf(out, len, "dataset '%s': the header of %s changed since the server started%s%s%s;"
                 " restart tesserad to serve the new header", d->name, d->paths[i],
                 card[0] ? " (" : "", card, card[0] ? ")" : "");
        return;
    }
}

/* Looks at the files again when the last check is more than a second old (lock held):
 * the version, and the headers when the version changed. */
static void refresh_locked(const dataset *d, struct ds_state *st)
{
    double t = tess_mono_s();
    if (t - st->checked <= 1.0)
        return;
    char now[sizeof(st->version)];
    compute_version(d, now, sizeof(now));
    if (strcmp(now, st->version) != 0)
        check_headers(d, st->header_error, sizeof(st->header_error));
    snprintf(st->version, sizeof(st->version), "%s", now);
    st->checked = t;
}

const char *dataset_version(const dataset *d, char *out, size_t len)
{
    struct ds_state *st = d->state;
    pthread_mutex_lock(&st->lock);
    refresh_locked(d, st);
    snprintf(out, len, "%s", st->version);
    pthread_mutex_unlock(&st->lock);
    return out;
}

int dataset_check(const dataset *d, char *err, size_t errlen)
{
    struct ds_state *st = d->state;
    pthread_mutex_lock(&st->lock);
    refresh_locked(d, st);
    int rc = st->header_error[0] ? TESS_EIO : 0;
    if (rc)
        tess_seterr(err, errlen, "%s", st->header_error);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

const char *ds_kind_name(ds_kind k)
{
    switch (k) {
    case DS_IMAGE: return "image";
    case DS_CUBE: return "cube";
    case DS_STACK: return "stack";
    }
    return "image";
}

int catalog_path_allowed(const tess_config *cfg, const char *path)
{
    for (int i = 0; i < cfg->n_roots; i++) {
        const char *root = cfg->data_roots[i];
        size_t n = strlen(root);
        if (strcmp(root, "/") == 0)
            return 1;
        if (strncmp(path, root, n) == 0 && path[n] == '/')
            return 1;
    }
    return 0;
}

/* Joins `rel` to the first data root unless absolute, canonicalises it and checks that
 * it stays inside a root.  Returns a malloc'd path or NULL with `err`. */
static char *resolve(const tess_config *cfg, const char *rel, const char *dsname, int trusted,
                     char *err, size_t errlen)
{
    char joined[PATH_MAX];
    int n = rel[0] == '/' ? snprintf(joined, sizeof(joined), "%s", rel)
                          : snprintf(joined, sizeof(joined), "%s/%s", cfg->data_roots[0], rel);
    if (n < 0 || (size_t)n >= sizeof(joined)) {
        tess_seterr(err, errlen, "dataset '%s': path too long", dsname);
        return NULL;
    }
    char *real = realpath(joined, NULL);
    if (!real) {
        tess_seterr(err, errlen, "dataset '%s': cannot open '%s'", dsname, joined);
        return NULL;
    }
    if (!trusted && !catalog_path_allowed(cfg, real)) {
        tess_seterr(err, errlen, "dataset '%s': '%s' is outside the data roots", dsname, rel);
        free(real);
        return NULL;
    }
    return real;
}

/* TESS_ENOMEM with the reason, for dataset `name`. */
static int no_memory(const char *name, char *err, size_t errlen)
{
    tess_seterr(err, errlen, "dataset '%s': out of memory", name);
    return TESS_ENOMEM;
}

static void dataset_release(dataset *d)
{
    free(d->name);
    for (int i = 0; i < d->npaths; i++)
        free(d->paths[i]);
    free(d->paths);
    free(d->header);
    free(d->header_hash);
    skywcs_free(d->wcs);
    skywcs_free(d->cel);
    if (d->state) {
        pthread_mutex_destroy(&d->state->lock);
        free(d->state->profile_path);
        stack_free(d->state->reader);
        stack_free(d->state->ingested);
        for (int i = 0; i < d->state->nretired; i++)
            stack_free(d->state->retired[i]);
        free(d->state->retired);
        free(d->state);
    }
    memset(d, 0, sizeof(*d));
}

/* Lists the frames of a stack: glob(3) under the first root, sorted by name. */
static int stack_paths(const tess_config *cfg, const ds_config *dc, dataset *d, char *err,
                       size_t errlen)
{
    char pattern[PATH_MAX];
    int n = dc->frames[0] == '/'
                ? snprintf(pattern, sizeof(pattern), "%s", dc->frames)
                : snprintf(pattern, sizeof(pattern), "%s/%s", cfg->data_roots[0], dc->frames);
    if (n < 0 || (size_t)n >= sizeof(pattern)) {
        tess_seterr(err, errlen, "dataset '%s': frames pattern too long", dc->name);
        return TESS_EINVAL;
    }
    glob_t g;
    int grc = glob(pattern, GLOB_ERR, NULL, &g);
    if (grc != 0 || g.gl_pathc == 0) {
        if (grc == 0)
            globfree(&g);
        tess_seterr(err, errlen, "dataset '%s': no frames match '%s'", dc->name, dc->frames);
        return TESS_EIO;
    }
    if (g.gl_pathc > CATALOG_MAX_FRAMES) {
        tess_seterr(err, errlen, "dataset '%s': more than %d frames", dc->name, CATALOG_MAX_FRAMES);
        globfree(&g);
        return TESS_ERANGE;
    }
    d->paths = calloc(g.gl_pathc, sizeof(char *));
    if (!d->paths) {
        globfree(&g);
        return no_memory(dc->name, err, errlen);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        d->paths[i] = resolve(cfg, g.gl_pathv[i], dc->name, 0, err, errlen);
        if (!d->paths[i]) {
            globfree(&g);
            return TESS_EIO;
        }
        d->npaths++;
    }
    globfree(&g);
    return 0;
}

static int open_one(const tess_config *cfg, const ds_config *dc, int trusted, dataset *d,
                    char *err, size_t errlen)
{
    char why[256];
    int rc;
    d->name = strdup(dc->name);
    if (!d->name)
        return no_memory(dc->name, err, errlen);
    d->hdu = dc->hdu;
    d->hips_galactic = dc->hips_galactic;
    d->rest_frequency = dc->rest_frequency;
    if (dc->frames) {
        if ((rc = stack_paths(cfg, dc, d, err, errlen)))
            return rc;
    } else {
        d->paths = calloc(1, sizeof(char *));
        if (!d->paths)
            return no_memory(dc->name, err, errlen);
        d->paths[0] = resolve(cfg, dc->path, dc->name, trusted, err, errlen);
        if (!d->paths[0])
            return TESS_EIO;
        d->npaths = 1;
    }

    d->header_hash = calloc((size_t)d->npaths, sizeof(uint64_t));
    if (!d->header_hash)
        return no_memory(dc->name, err, errlen);
    for (int i = 0; i < d->npaths; i++) {
        fitsimg_info info;
        if ((rc = frame_read_info(d->paths[i], d->hdu, &info, why, sizeof(why)))) {
            tess_seterr(err, errlen, "dataset '%s': %s", d->name, why);
            return rc;
        }
        if ((rc = frame_header_hash(d->paths[i], d->hdu, &d->header_hash[i], why,
                                    sizeof(why)))) {
            fitsimg_info_release(&info);
            tess_seterr(err, errlen, "dataset '%s': %s", d->name, why);
            return rc;
        }
        if (i == 0) {
            if (info.naxis < 2 || (info.naxis >= 3 && dc->frames && info.naxes[2] != 1) ||
                (info.naxis == 4 && info.naxes[3] != 1)) {
                tess_seterr(err, errlen, "dataset '%s': NAXIS = %d with shape not usable as %s",
                            d->name, info.naxis, dc->frames ? "2-D frames" : "an image or cube");
                fitsimg_info_release(&info);
                return TESS_EINVAL;
            }
            d->nx = info.naxes[0];
            d->ny = info.naxes[1];
            d->nz = dc->frames ? d->npaths : (info.naxis >= 3 ? info.naxes[2] : 1);
            d->kind = dc->frames ? DS_STACK : (d->nz > 1 ? DS_CUBE : DS_IMAGE);
            d->bitpix = info.bitpix;
            snprintf(d->bunit, sizeof(d->bunit), "%s", info.bunit);
            d->header = info.header;
            d->nkeys = info.nkeys;
            info.header = NULL;
        } else if (info.naxes[0] != d->nx || info.naxes[1] != d->ny ||
                   (info.naxis >= 3 && info.naxes[2] != 1)) {
            tess_seterr(err, errlen,
                        "dataset '%s': frame '%s' is %ldx%ld, the first frame is %ldx%ld",
                        d->name, d->paths[i], info.naxes[0], info.naxes[1], d->nx, d->ny);
            fitsimg_info_release(&info);
            return TESS_EINVAL;
        } else if (info.bitpix != d->bitpix) {
            /* one BITPIX for the whole volume: its FITS copy, Zarr chunks and raw reads
             * hold every plane in the first frame's sample type */
            tess_seterr(err, errlen, "dataset '%s': frame '%s' is BITPIX %d, the first frame "
                        "is BITPIX %d; the frames of a stack must have one bit depth",
                        d->name, d->paths[i], info.bitpix, d->bitpix);
            fitsimg_info_release(&info);
            return TESS_EINVAL;
        }
        fitsimg_info_release(&info);
    }
    size_t vol;
    if (tess_size_dims(sizeof(double), (const long[]){d->nx, d->ny, d->nz}, 3, &vol)) {
        tess_seterr(err, errlen, "dataset '%s': %ld x %ld x %ld pixels: the volume is too "
                    "large to address (its values as doubles pass %zu bytes)", d->name, d->nx,
                    d->ny, d->nz, TESS_SIZE_MAX);
        return TESS_ERANGE;
    }
    d->state = calloc(1, sizeof(*d->state));
    if (!d->state)
        return no_memory(dc->name, err, errlen);
    pthread_mutex_init(&d->state->lock, NULL);
    compute_version(d, d->version, sizeof(d->version));
    snprintf(d->state->version, sizeof(d->state->version), "%s", d->version);
    d->state->checked = tess_mono_s();
    d->state->reader = stack_new((const char *const *)d->paths, d->npaths, d->hdu, d->nx, d->ny,
                                 d->nz, CATALOG_MAX_OPEN_FRAMES);
    if (!d->state->reader || stack_expect_headers(d->state->reader, d->header_hash))
        return no_memory(dc->name, err, errlen);
    stack_expect_bitpix(d->state->reader, d->bitpix);

    /* A header without WCS keywords, or with one that breaks the validity rule
     * (skywcs.h), leaves a dataset of pixels alone; the reason for a refused WCS is kept
     * for the sky routes to give.  Only the celestial part matters for reprojection.  Out
     * of memory is an error, not a dataset without WCS. */
    rc = skywcs_parse(d->header, d->nkeys, &d->wcs, why, sizeof(why));
    if (rc == TESS_ENOMEM)
        return no_memory(dc->name, err, errlen);
    if (rc == 0) {
        d->cel = skywcs_celestial(d->wcs);
        if (!d->cel && skywcs_has_celestial(d->wcs))
            return no_memory(dc->name, err, errlen);
    } else if (rc != TESS_ENOWCS) {
        snprintf(d->wcs_error, sizeof(d->wcs_error), "%s", why);
    }
    return 0;
}

static void dataset_free(dataset *d)
{
    if (d) {
        dataset_release(d);
        free(d);
    }
}

/* Appends `d` (taken) under the lock; refuses a duplicate name. */
static int append(catalog *c, dataset *d, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->items[i]->name, d->name) == 0) {
            pthread_mutex_unlock(&c->lock);
            tess_seterr(err, errlen, "a dataset named '%s' already exists", d->name);
            return TESS_EEXIST;
        }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        dataset **items = realloc(c->items, (size_t)cap * sizeof(*items));
        if (!items) {
            pthread_mutex_unlock(&c->lock);
            return no_memory(d->name, err, errlen);
        }
        c->items = items;
        c->cap = cap;
    }
    c->items[c->n++] = d;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static int open_and_append(catalog *c, const tess_config *cfg, const ds_config *dc, int trusted,
                           char *err, size_t errlen)
{
    dataset *d = calloc(1, sizeof(*d));
    if (!d)
        return no_memory(dc->name, err, errlen);
    int rc = open_one(cfg, dc, trusted, d, err, errlen);
    if (rc == 0)
        rc = append(c, d, err, errlen);
    if (rc)
        dataset_free(d);
    return rc;
}

int catalog_open(const tess_config *cfg, catalog **out, char *err, size_t errlen)
{
    catalog *c = calloc(1, sizeof(*c));
    if (!c) {
        tess_seterr(err, errlen, "out of memory for the catalog");
        return TESS_ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->cfg = cfg;
    for (int i = 0; i < cfg->n_datasets; i++) {
        int rc = open_and_append(c, cfg, &cfg->datasets[i], 0, err, errlen);
        if (rc) {
            catalog_free(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

int catalog_add(catalog *c, const ds_config *dc, char *err, size_t errlen)
{
    return open_and_append(c, c->cfg, dc, 1, err, errlen);
}

int dataset_open_file(const tess_config *cfg, const ds_config *dc, dataset **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    dataset *d = calloc(1, sizeof(*d));
    if (!d)
        return no_memory(dc->name, err, errlen);
    int rc = open_one(cfg, dc, 1, d, err, errlen);
    if (rc)
        dataset_free(d);
    else
        *out = d;
    return rc;
}

void dataset_close(dataset *d)
{
    dataset_free(d);
}

void catalog_free(catalog *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        dataset_free(c->items[i]);
    free(c->items);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int catalog_count(catalog *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->n;
    pthread_mutex_unlock(&c->lock);
    return n;
}

const dataset *catalog_at(catalog *c, int i)
{
    pthread_mutex_lock(&c->lock);
    const dataset *d = i >= 0 && i < c->n ? c->items[i] : NULL;
    pthread_mutex_unlock(&c->lock);
    return d;
}

const dataset *catalog_find(catalog *c, const char *name)
{
    const dataset *d = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n && !d; i++)
        if (strcmp(c->items[i]->name, name) == 0)
            d = c->items[i];
    pthread_mutex_unlock(&c->lock);
    return d;
}

int catalog_lookup(catalog *c, const char *name, size_t len, const dataset **out, char *why,
                   size_t whylen)
{
    char key[CATALOG_NAME_MAX];
    *out = NULL;
    if (len == 0 || len >= sizeof(key) || memchr(name, '\0', len))
        return TESS_ENOTFOUND;
    memcpy(key, name, len);
    key[len] = '\0';
    const dataset *d = catalog_find(c, key);
    if (!d)
        return TESS_ENOTFOUND;
    *out = d;
    return dataset_check(d, why, whylen) ? TESS_EIO : 0;
}

/* Attaches the plane store at `path` (a FITS cube of the dataset's shape whose INGVER card
 * is the version it was ingested at).  Returns 0 or TESS_EINVAL / TESS_EIO / TESS_ENOMEM. */
static int attach_ingested(const dataset *d, const char *path)
{
    char real[PATH_MAX], err[256], ver[64];
    if (!realpath(path, real))
        return TESS_EIO;
    fitsimg_info info;
    int rc = fitsimg_read_info(real, 0, &info, err, sizeof err);
    if (rc)
        return rc;
    int ok = info.naxis == 3 && info.naxes[0] == d->nx && info.naxes[1] == d->ny &&
             info.naxes[2] == d->nz && fitscard_get(info.header, info.nkeys, "INGVER", ver,
                                                    sizeof ver);
    fitsimg_info_release(&info);
    if (!ok)
        return TESS_EINVAL;
    const char *paths[1] = {real};
    stack *st = stack_new(paths, 1, 0, d->nx, d->ny, d->nz, 4);
    if (!st)
        return TESS_ENOMEM;
    struct ds_state *s = d->state;
    pthread_mutex_lock(&s->lock);
    stack **r = s->ingested ? realloc(s->retired, sizeof(stack *) * (size_t)(s->nretired + 1))
                            : s->retired;
    if (s->ingested && !r) {
        pthread_mutex_unlock(&s->lock);
        stack_free(st);
        return TESS_ENOMEM;
    }
    if (s->ingested) {
        s->retired = r;
        s->retired[s->nretired++] = s->ingested;
    }
    s->ingested = st;
    snprintf(s->ingested_version, sizeof s->ingested_version, "%s", ver);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int dataset_copy_current(const dataset *d, const char *made_from)
{
    char now[64];
    return made_from && made_from[0] &&
           strcmp(dataset_version(d, now, sizeof now), made_from) == 0;
}

int dataset_attach_profile(const dataset *d, const char *path)
{
    unsigned char head[9] = {0};
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd >= 0) {
        if (pread(fd, head, 8, 0) != 8)
            head[0] = 0;
        close(fd);
    }
    if (memcmp(head, "SIMPLE  ", 8) == 0)
        return attach_ingested(d, path);
    /* the identity of the frames it was made from, read once: a copy of other frames, or
     * of another shape, or unreadable, is attached but never served */
    chunkstore_info ci;
    char err[256], made[64] = "";
    if (chunkstore_read_info(path, &ci, err, sizeof err) == 0 && ci.nx == d->nx &&
        ci.ny == d->ny && ci.nz == d->nz)
        snprintf(made, sizeof made, "%s", ci.source_version);
    char *p = strdup(path);
    if (!p)
        return TESS_ENOMEM;
    pthread_mutex_lock(&d->state->lock);
    free(d->state->profile_path);
    d->state->profile_path = p;
    snprintf(d->state->profile_version, sizeof d->state->profile_version, "%s", made);
    pthread_mutex_unlock(&d->state->lock);
    return 0;
}

int dataset_profile_path(const dataset *d, char *out, size_t len)
{
    char made[64];
    pthread_mutex_lock(&d->state->lock);
    int have = d->state->profile_path != NULL;
    if (have)
        snprintf(out, len, "%s", d->state->profile_path);
    snprintf(made, sizeof made, "%s", d->state->profile_version);
    pthread_mutex_unlock(&d->state->lock);
    return have && dataset_copy_current(d, made);
}

int dataset_read_region(const dataset *d, long z, long x0, long y0, long w, long h, double *out,
                        char *err, size_t errlen)
{
    if (z < 0 || z >= d->nz) {
        tess_seterr(err, errlen, "plane %ld outside 0..%ld", z, d->nz - 1);
        return TESS_ERANGE;
    }
    return stack_read_region(dataset_stack(d), z, x0, y0, w, h, out, err, errlen);
}

stack *dataset_ingested(const dataset *d)
{
    struct ds_state *s = d->state;
    if (!s)
        return NULL;   /* a dataset made by hand, not opened by the catalog (tests) */
    pthread_mutex_lock(&s->lock);
    stack *ing = s->ingested;
    char at[64];
    snprintf(at, sizeof at, "%s", s->ingested_version);
    pthread_mutex_unlock(&s->lock);
    return ing && dataset_copy_current(d, at) ? ing : NULL;
}

stack *dataset_stack(const dataset *d)
{
    stack *ing = dataset_ingested(d);
    return ing ? ing : d->state->reader;
}

double dataset_rest_frequency(const dataset *d)
{
    char v[72];
    if ((fitscard_get(d->header, d->nkeys, "RESTFRQ", v, sizeof(v)) ||
         fitscard_get(d->header, d->nkeys, "RESTFREQ", v, sizeof(v))) && atof(v) > 0.0)
        return atof(v);
    if (fitscard_get(d->header, d->nkeys, "RESTWAV", v, sizeof(v)) && atof(v) > 0.0)
        return 299792458.0 / atof(v);
    return d->rest_frequency > 0.0 ? d->rest_frequency : 0.0;
}
