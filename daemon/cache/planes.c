/* Plane store: planes read once and shared by reference, reduced by 2x2 means, cuts cached. */
#include "daemon/cache/planes.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/fits/fitsimg.h"
#include "engine/image/pyramid.h"
#include "engine/image/stack.h"
#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"
#include "engine/base/hugemem.h"
#include "engine/base/clock.h"
#include "engine/base/lru.h"

/* Layout.  One mutex guards the whole store: the hash table of planes, their LRU list,
 * the byte count, the cut cache and the counters.  It is never held while a file is
 * read or a plane reduced, only while entries are looked up and linked (and for the
 * once-a-second stat(2) of a cached plane's file).  Each plane entry has its own
 * condition variable (on that mutex): the first user of a plane creates the entry in
 * the LOADING state, reads it with the lock released, and broadcasts; later users of a
 * LOADING entry wait on it, so concurrent first uses read a file once.
 *
 * Lifetime.  An entry is referenced by each view handed out and by its loader.  It is
 * "in the table" (findable, and on the LRU list) until it is evicted, found stale, fails
 * to load, or the store is freed; after that it lives on until its last reference goes.
 * Eviction only takes entries that nobody references, least recently used first, until
 * the bytes held fit max_bytes; a plane in use is never freed.  The store itself lives
 * until planestore_free has been called and its last entry has gone, so views may be
 * released after planestore_free. */

#define PS_NBUCKETS 1024          /* hash chains of plane entries */
#define PS_MAX_CUTS 256           /* cut levels remembered (plane, cut parameters) */
/* Seconds between two stat(2) of a cached plane's file: 0, a stat at every use, so that
 * a plane served is never older than the version a request put in its cache key (which
 * was taken before; see dataset_version).  A stat costs about a microsecond. */
#define PS_RECHECK_S 0.0

enum { PE_LOADING, PE_READY, PE_FAILED };

typedef struct pentry {
    struct planestore *store;
    char *path;                   /* the plane's file (canonical, from the dataset) */
    int hdu;                      /* 0-based HDU */
    long zf;                      /* plane within that file (0 for a stack frame) */
    int level;                    /* reduction level, 0 = full resolution */
    uint64_t hash;
    int state;                    /* PE_LOADING, PE_READY, PE_FAILED */
    int in_table;                 /* findable: on its hash chain and the LRU list */
    int refs;                     /* views held plus the loader */
    rp_plane plane;
    uint32_t *counts;             /* finite level-0 pixels under each pixel, or NULL when
                                     every level-0 pixel of the plane is finite (then the
                                     count is the block's area) */
    int nonfinite;                /* some level-0 pixel of the plane is NaN or infinite */
    size_t bytes;                 /* charged against max_bytes while READY */
    tess_file_id id;              /* of the file when the plane was read (stat before) */
    char version[48];
    double checked;               /* monotonic time of the last stat(2) */
    int errcode;                  /* PE_FAILED: the TESS_E* code and its text */
    char err[256];
    pthread_cond_t cond;          /* broadcast when state leaves PE_LOADING */
    struct pentry *hnext;         /* hash chain */
    lru_node lru;                 /* LRU list, most recently used first */
} pentry;

enum { CE_EMPTY, CE_COMPUTING, CE_READY };

/* Cut levels of one plane version for one pair of cut parameters. */
typedef struct cutentry {
    int state;
    char *path;
    int hdu;
    long zf;
    char version[48];
    render_cut min_cut, max_cut;
    double lo, hi;
    unsigned long long used;      /* LRU stamp */
} cutentry;

struct planestore {
    pthread_mutex_t lock;
    pthread_cond_t cut_cond;      /* broadcast when a cut computation ends */
    size_t max_bytes;
    size_t bytes;                 /* of READY entries, in the table or not */
    size_t nentries;              /* entries alive, in the table or not */
    int closing;                  /* planestore_free was called */
    pentry *buckets[PS_NBUCKETS];
    lru_list lru;                 /* the entries in the table */
    cutentry cuts[PS_MAX_CUTS];
    unsigned long long cut_clock;
    planestore_stats st;
};

/* "SIZE-HASH" in hex: the file's size and the hash of its whole identity. */
static void format_version(char *out, size_t len, const tess_file_id *id)
{
    snprintf(out, len, "%llx-%llx", (unsigned long long)id->size,
             (unsigned long long)tess_file_id_hash(id, TESS_FNV64_OFFSET));
}

/* The file holding plane z of `d` and the plane's index inside it. */
static void plane_file(const dataset *d, long z, const char **path, long *zf)
{
    if (d->kind == DS_STACK) {
        *path = d->paths[z];
        *zf = 0;
    } else {
        *path = d->paths[0];
        *zf = z;
    }
}

/* FNV-1a over the key: the path's bytes, then those of (hdu, zf, level) as long longs. */
static uint64_t key_hash(const char *path, int hdu, long zf, int level)
{
    long long parts[3] = {hdu, zf, level};
    uint64_t h = tess_fnv1a64(path, strlen(path), TESS_FNV64_OFFSET);
    return tess_fnv1a64(parts, sizeof parts, h);
}

/* ---- entries (all with the store's lock held) ------------------------------------ */

static pentry *find_entry(planestore *s, const char *path, int hdu, long zf, int level,
                          uint64_t h)
{
    for (pentry *e = s->buckets[h % PS_NBUCKETS]; e; e = e->hnext)
        if (e->hash == h && e->hdu == hdu && e->zf == zf && e->level == level &&
            strcmp(e->path, path) == 0)
            return e;
    return NULL;
}

/* Makes `e` unfindable; it is freed when its last reference goes (see entry_drop). */
static void table_unlink(planestore *s, pentry *e)
{
    if (!e->in_table)
        return;
    pentry **pp = &s->buckets[e->hash % PS_NBUCKETS];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
    lru_remove(&s->lru, &e->lru);
    e->in_table = 0;
}

static void entry_destroy(planestore *s, pentry *e)
{
    if (e->state == PE_READY)
        s->bytes -= e->bytes;
    s->nentries--;
    free(e->plane.data);
    free(e->counts);
    free(e->path);
    pthread_cond_destroy(&e->cond);
    free(e);
}

/* Frees `e` when it is out of the table and unreferenced. */
static void entry_maybe_free(planestore *s, pentry *e)
{
    if (!e->in_table && e->refs == 0)
        entry_destroy(s, e);
}

/* Drops unreferenced READY entries, least recently used first, until the bytes held
 * fit the budget or nothing more can go. */
static void evict(planestore *s)
{
    lru_node *n = s->lru.back;
    while (s->bytes > s->max_bytes && n) {
        lru_node *prev = n->prev;
        pentry *e = LRU_ENTRY(n, pentry, lru);
        if (e->refs == 0 && e->state == PE_READY) {
            table_unlink(s, e);
            entry_destroy(s, e);
        }
        n = prev;
    }
}

/* For a READY entry in the table: stats its file when the last check is PS_RECHECK_S
 * old or more, and unlinks the entry (counted as a reload) when the file's identity
 * (inode, size, mtime, ctime) changed or it cannot be stat'ed.  Returns 1 when the entry
 * was unlinked. */
static int entry_check_stale(planestore *s, pentry *e)
{
    double t = tess_mono_s();
    if (t - e->checked < PS_RECHECK_S)
        return 0;
    e->checked = t;
    tess_file_id now;
    if (tess_file_id_of(e->path, 0, &now, NULL, 0) == 0 && tess_file_id_same(&now, &e->id))
        return 0;
    table_unlink(s, e);
    s->st.reloads++;
    entry_maybe_free(s, e);
    return 1;
}

static void view_fill(plane_view *v, pentry *e)
{
    v->plane = &e->plane;
    v->level = e->level;
    v->handle = e;
}

/* ---- loading --------------------------------------------------------------------- */

/* The type of a level-0 plane of `d` whose file has `bitpix` (RP_F64 for BITPIX -64 and
 * 32/64-bit integers, else RP_F32) and its size in bytes.  Counts of finite pixels under
 * a reduced pixel are uint32: the plane must hold fewer than 2^32 pixels (TESS_ELIMIT
 * with err, answered 413 as every route's decode budget is). */
static int level0_size(const dataset *d, int bitpix, rp_dtype *dt, size_t *bytes, char *err,
                       size_t errlen)
{
    *dt = (bitpix == -64 || bitpix == 32 || bitpix == 64) ? RP_F64 : RP_F32;
    size_t esz = *dt == RP_F64 ? sizeof(double) : sizeof(float);
    if (tess_size_dims(esz, (const long[]){d->nx, d->ny}, 2, bytes) ||
        *bytes / esz >= 0xFFFFFFFFULL) {
        tess_seterr(err, errlen, "a plane of %ld x %ld pixels is more than the %llu pixels "
                    "a plane may hold in memory", d->nx, d->ny, 0xFFFFFFFFULL - 1);
        return TESS_ELIMIT;
    }
    return 0;
}

/* Gives entry `e` the level-0 plane `data` (n values of type dt, taken) of `d`. */
static void entry_fill(const dataset *d, pentry *e, void *data, rp_dtype dt, size_t n)
{
    int nonfinite = 0;
    if (dt == RP_F64) {
        const double *p = data;
        for (size_t i = 0; i < n && !nonfinite; i++)
            nonfinite = !isfinite(p[i]);
    } else {
        const float *p = data;
        for (size_t i = 0; i < n && !nonfinite; i++)
            nonfinite = !isfinite(p[i]);
    }
    e->plane.data = data;
    e->plane.dtype = dt;
    e->plane.nx = d->nx;
    e->plane.ny = d->ny;
    e->nonfinite = nonfinite;
    e->bytes = tess_huge_bytes(n * (dt == RP_F64 ? sizeof(double) : sizeof(float))) +
               sizeof(*e);
    format_version(e->version, sizeof e->version, &e->id);
}

/* Rows of doubles staged per read when a float plane is read from an ingest store. */
#define PS_STAGE_ROWS 64

/* Level 0 of plane z of the ingested stack `d` from its store `ing` (dataset_ingested):
 * the same values and type as from its frame (integers: float32, exact).  Returns 0 or
 * a TESS_E* code with err. */
static int load_ingested(const dataset *d, stack *ing, long z, pentry *e, char *err,
                         size_t errlen)
{
    rp_dtype dt;
    size_t bytes;
    int rc = level0_size(d, d->bitpix, &dt, &bytes, err, errlen);
    if (rc)
        return rc;
    size_t n = bytes / (dt == RP_F64 ? sizeof(double) : sizeof(float));
    long rows = dt == RP_F64 ? d->ny : (d->ny < PS_STAGE_ROWS ? d->ny : PS_STAGE_ROWS);
    void *data = tess_alloc_huge(bytes);
    double *stage = dt == RP_F64 ? data : malloc(sizeof(double) * (size_t)d->nx * (size_t)rows);
    if (!data || !stage) {
        free(data);
        if (stage != data)
            free(stage);
        tess_seterr(err, errlen, "out of memory for a %ld x %ld plane of '%s'", d->nx, d->ny,
                    d->name);
        return TESS_ENOMEM;
    }
    for (long y = 0; y < d->ny && !rc; y += rows) {
        long h = d->ny - y < rows ? d->ny - y : rows;
        rc = stack_read_region(ing, z, 0, y, d->nx, h, dt == RP_F64 ? stage + (size_t)y *
                               (size_t)d->nx : stage, err, errlen);
        if (!rc && dt == RP_F32) {
            float *out = (float *)data + (size_t)y * (size_t)d->nx;
            for (size_t i = 0; i < (size_t)h * (size_t)d->nx; i++)
                out[i] = (float)stage[i];
        }
    }
    if (stage != data)
        free(stage);
    if (rc) {
        free(data);
        return rc;
    }
    entry_fill(d, e, data, dt, n);
    return 0;
}

/* Reads level 0 of entry `e` (plane e->zf of e->path; plane z of `d`) into it, with the
 * lock released.
 * Returns 0 or a TESS_E* code with err. */
static int load_level0(const dataset *d, long z, pentry *e, char *err, size_t errlen)
{
    /* The identity before the pixels: what is read is never older than it. */
    int rc = tess_file_id_of(e->path, 0, &e->id, err, errlen);
    if (rc)
        return rc;
    /* An ingested stack's planes come from its store, whose shape and header are those
     * of the dataset (the frames are neither read nor decoded again). */
    stack *ing = d->kind == DS_STACK ? dataset_ingested(d) : NULL;
    if (ing)
        return load_ingested(d, ing, z, e, err, errlen);
    fitsimg_info info;
    rc = frame_read_info(e->path, e->hdu, &info, err, errlen);   /* FITS or PNG */
    if (rc)
        return rc;
    long nplanes;
    if (tess_long_mul(info.naxes[2], info.naxes[3], &nplanes) || info.naxes[0] != d->nx ||
        info.naxes[1] != d->ny || e->zf >= nplanes) {
        tess_seterr(err, errlen, "%s is now %ld x %ld x %ld, not the %ld x %ld x %ld it was when "
                "dataset '%s' was opened; restart the server to serve it", e->path,
                info.naxes[0], info.naxes[1], nplanes, d->nx, d->ny, d->nz, d->name);
        fitsimg_info_release(&info);
        return TESS_EIO;
    }
    int bitpix = info.bitpix;
    fitsimg_info_release(&info);
    /* New pixels are never read under the header of the file read at start. */
    long fi = d->kind == DS_STACK ? z : 0;
    uint64_t hh;
    if (d->header_hash && d->header_hash[fi]) {
        if ((rc = frame_header_hash(e->path, e->hdu, &hh, err, errlen)))
            return rc;
        if (hh != d->header_hash[fi]) {
            tess_seterr(err, errlen, "dataset '%s': the header of %s changed since the server "
                        "started; restart tesserad to serve the new header", d->name, e->path);
            return TESS_EIO;
        }
    }

    /* A frame that its decoder will refuse (a PNG or TIFF over the decode budgets) is
     * refused before its plane is sized or allocated, with the reason every other route
     * gives for it. */
    if ((rc = frame_decode_check(e->path, err, errlen)))
        return rc;
    rp_dtype dt;
    size_t bytes;
    if ((rc = level0_size(d, bitpix, &dt, &bytes, err, errlen)))
        return rc;
    size_t esz = dt == RP_F64 ? sizeof(double) : sizeof(float);
    size_t n = bytes / esz;
    void *data = tess_alloc_huge(bytes);
    if (!data) {
        tess_seterr(err, errlen, "out of memory for a %ld x %ld plane of %s", d->nx, d->ny,
                e->path);
        return TESS_ENOMEM;
    }
    if (dt == RP_F64)
        rc = frame_read_region(e->path, e->hdu, e->zf, 0, 0, d->nx, d->ny, data, err, errlen);
    else
        rc = frame_read_region_f32(e->path, e->hdu, e->zf, 0, 0, d->nx, d->ny, data, err,
                                   errlen);
    if (rc) {
        free(data);
        return rc;
    }
    entry_fill(d, e, data, dt, n);
    return 0;
}

/* Builds level e->level from the level below (got through the store, so it is read or
 * reduced once too), with the lock released: pyramid_reduce, which makes each pixel the
 * mean of its 2x2 children weighted by their counts of finite level-0 pixels, the mean
 * of the finite level-0 pixels of its block (planes.h).  Counts are kept only for a
 * plane with a pixel that is not finite.  Returns 0 or a TESS_E* code. */
static int build_reduced(planestore *s, const dataset *d, long z, pentry *e, char *err,
                         size_t errlen)
{
    plane_view below;
    int rc = planestore_get(s, d, z, e->level - 1, &below, err, errlen);
    if (rc)
        return rc;
    const pentry *be = below.handle;
    const rp_plane *src = below.plane;
    uint32_t *counts = NULL;
    if (pyramid_reduce(src, be->counts, e->level - 1, d->nx, d->ny, &e->plane,
                       be->nonfinite ? &counts : NULL) != 0) {
        planestore_release(s, &below);
        tess_seterr(err, errlen, "out of memory reducing a %ld x %ld plane", src->nx, src->ny);
        return TESS_ENOMEM;
    }
    size_t n = (size_t)e->plane.nx * (size_t)e->plane.ny;
    size_t esz = src->dtype == RP_F64 ? sizeof(double) : sizeof(float);
    e->counts = counts;
    e->nonfinite = be->nonfinite;
    e->id = be->id;
    memcpy(e->version, be->version, sizeof e->version);
    e->bytes = n * esz + (counts ? n * sizeof(uint32_t) : 0) + sizeof(*e);
    planestore_release(s, &below);
    return 0;
}

/* ---- public ---------------------------------------------------------------------- */

planestore *planestore_new(size_t max_bytes)
{
    planestore *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    if (pthread_cond_init(&s->cut_cond, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    s->max_bytes = max_bytes;
    return s;
}

static void store_destroy(planestore *s)
{
    for (int i = 0; i < PS_MAX_CUTS; i++)
        free(s->cuts[i].path);
    pthread_cond_destroy(&s->cut_cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void planestore_free(planestore *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->closing = 1;
    for (int b = 0; b < PS_NBUCKETS; b++) {
        while (s->buckets[b]) {
            pentry *e = s->buckets[b];
            table_unlink(s, e);
            entry_maybe_free(s, e);
        }
    }
    int last = s->nentries == 0;
    pthread_mutex_unlock(&s->lock);
    if (last)
        store_destroy(s);
}

void planestore_release(planestore *s, plane_view *v)
{
    (void)s;
    if (!v || !v->handle)
        return;
    pentry *e = v->handle;
    planestore *st = e->store;
    v->handle = NULL;
    v->plane = NULL;
    pthread_mutex_lock(&st->lock);
    e->refs--;
    if (e->refs == 0) {
        if (!e->in_table)
            entry_destroy(st, e);
        else if (st->bytes > st->max_bytes)
            evict(st);
    }
    int last = st->closing && st->nentries == 0;
    pthread_mutex_unlock(&st->lock);
    if (last)
        store_destroy(st);
}

const char *planestore_view_version(const plane_view *v)
{
    if (!v || !v->handle)
        return "";
    return ((const pentry *)v->handle)->version;
}

/* The checks planestore_get and planestore_cuts start with: the store, the dataset and
 * their third pointer (`what` in the message) given, z a plane of the dataset.  Returns
 * 0, TESS_EINVAL or TESS_ERANGE. */
static int check_request(const planestore *s, const dataset *d, const void *arg,
                         const char *what, long z, char *err, size_t errlen)
{
    if (!s || !d || !arg) {
        tess_seterr(err, errlen, "no store, dataset or %s", what);
        return TESS_EINVAL;
    }
    if (z < 0 || z >= d->nz) {
        tess_seterr(err, errlen, "plane %ld outside 0..%ld of dataset '%s'", z, d->nz - 1, d->name);
        return TESS_ERANGE;
    }
    return 0;
}

int planestore_get(planestore *s, const dataset *d, long z, int level, plane_view *v,
                   char *err, size_t errlen)
{
    if (v)
        memset(v, 0, sizeof(*v));
    int rc = check_request(s, d, v, "view", z, err, errlen);
    if (rc)
        return rc;
    if (level < 0) {
        tess_seterr(err, errlen, "reduction level %d is negative", level);
        return TESS_ERANGE;
    }
    int top = pyramid_top_level(d->nx, d->ny);
    if (level > top)
        level = top;
    const char *path;
    long zf;
    plane_file(d, z, &path, &zf);
    uint64_t h = key_hash(path, d->hdu, zf, level);

    pthread_mutex_lock(&s->lock);
    pentry *e;
    for (;;) {
        e = find_entry(s, path, d->hdu, zf, level, h);
        if (!e)
            break;
        if (e->state == PE_LOADING) {
            e->refs++;
            while (e->state == PE_LOADING)
                pthread_cond_wait(&e->cond, &s->lock);
            if (e->state == PE_FAILED) {
                rc = e->errcode;
                tess_seterr(err, errlen, "%s", e->err);
                e->refs--;
                entry_maybe_free(s, e);
                pthread_mutex_unlock(&s->lock);
                return rc;
            }
            /* Just read: no need to look at the file again. */
            if (e->in_table) {
                lru_move_front(&s->lru, &e->lru);
            }
            s->st.hits++;
            pthread_mutex_unlock(&s->lock);
            view_fill(v, e);
            return 0;
        }
        if (entry_check_stale(s, e))
            continue;   /* unlinked: read it again */
        e->refs++;
        lru_move_front(&s->lru, &e->lru);
        s->st.hits++;
        pthread_mutex_unlock(&s->lock);
        view_fill(v, e);
        return 0;
    }

    /* First use: a LOADING entry that later users wait on. */
    e = calloc(1, sizeof(*e));
    char *pcopy = e ? strdup(path) : NULL;
    if (!e || !pcopy || pthread_cond_init(&e->cond, NULL) != 0) {
        pthread_mutex_unlock(&s->lock);
        free(pcopy);
        free(e);
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    e->store = s;
    e->path = pcopy;
    e->hdu = d->hdu;
    e->zf = zf;
    e->level = level;
    e->hash = h;
    e->state = PE_LOADING;
    e->refs = 1;
    e->in_table = 1;
    e->hnext = s->buckets[h % PS_NBUCKETS];
    s->buckets[h % PS_NBUCKETS] = e;
    lru_push_front(&s->lru, &e->lru);
    s->nentries++;
    pthread_mutex_unlock(&s->lock);

    char why[256] = "";
    rc = level == 0 ? load_level0(d, z, e, why, sizeof why)
                    : build_reduced(s, d, z, e, why, sizeof why);

    pthread_mutex_lock(&s->lock);
    if (rc) {
        e->state = PE_FAILED;
        e->errcode = rc;
        snprintf(e->err, sizeof e->err, "%s", why);
        table_unlink(s, e);
        pthread_cond_broadcast(&e->cond);
        e->refs--;
        entry_maybe_free(s, e);
        pthread_mutex_unlock(&s->lock);
        tess_seterr(err, errlen, "%s", why);
        return rc;
    }
    e->state = PE_READY;
    e->checked = tess_mono_s();
    s->bytes += e->bytes;
    if (level == 0)
        s->st.reads++;
    else
        s->st.reductions++;
    pthread_cond_broadcast(&e->cond);
    /* An entry unlinked while it loaded (planestore_free) is still handed out: the
     * caller's view keeps it alive. */
    if (e->in_table) {
        lru_move_front(&s->lru, &e->lru);
    }
    evict(s);
    pthread_mutex_unlock(&s->lock);
    view_fill(v, e);
    return 0;
}

int planestore_version(planestore *s, const dataset *d, long z, char *out, size_t outlen,
                       char *err, size_t errlen)
{
    if (!s || !d || z < 0 || z >= d->nz) {
        tess_seterr(err, errlen, "plane %ld outside the dataset", z);
        return TESS_ERANGE;
    }
    const char *path;
    long zf;
    plane_file(d, z, &path, &zf);
    uint64_t h = key_hash(path, d->hdu, zf, 0);
    pthread_mutex_lock(&s->lock);
    pentry *e = find_entry(s, path, d->hdu, zf, 0, h);
    if (e && e->state == PE_READY && !entry_check_stale(s, e)) {
        snprintf(out, outlen, "%s", e->version);
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    pthread_mutex_unlock(&s->lock);
    tess_file_id id;
    int rc = tess_file_id_of(path, 0, &id, err, errlen);
    if (rc)
        return rc;
    format_version(out, outlen, &id);
    return 0;
}

static int cut_equal(const render_cut *a, const render_cut *b)
{
    return a->value == b->value && a->is_percent == b->is_percent;
}

/* The cut entry for this key, or NULL (lock held). */
static cutentry *cut_find(planestore *s, const char *path, int hdu, long zf, const char *version,
                          const render_params *rp)
{
    for (int i = 0; i < PS_MAX_CUTS; i++) {
        cutentry *c = &s->cuts[i];
        if (c->state != CE_EMPTY && c->hdu == hdu && c->zf == zf &&
            cut_equal(&c->min_cut, &rp->min_cut) && cut_equal(&c->max_cut, &rp->max_cut) &&
            strcmp(c->version, version) == 0 && strcmp(c->path, path) == 0)
            return c;
    }
    return NULL;
}

/* A free slot, else the least recently used READY one (lock held); NULL when every slot
 * is being computed. */
static cutentry *cut_slot(planestore *s)
{
    cutentry *best = NULL;
    for (int i = 0; i < PS_MAX_CUTS; i++) {
        cutentry *c = &s->cuts[i];
        if (c->state == CE_EMPTY)
            return c;
        if (c->state == CE_READY && (!best || c->used < best->used))
            best = c;
    }
    return best;
}

/* Absolute cuts need no pixels; percentiles are computed once per plane version and
 * cut pair (one thread computes, the others wait for it) over level 0. */
int planestore_cuts(planestore *s, const dataset *d, long z, const render_params *rp,
                    double *lo, double *hi, char *err, size_t errlen)
{
    int rc = check_request(s, d, rp, "parameters", z, err, errlen);
    if (rc)
        return rc;
    if (!rp->min_cut.is_percent && !rp->max_cut.is_percent) {
        *lo = rp->min_cut.value;
        *hi = rp->max_cut.value;
        return 0;
    }
    plane_view v;
    rc = planestore_get(s, d, z, 0, &v, err, errlen);
    if (rc)
        return rc;
    const char *path;
    long zf;
    plane_file(d, z, &path, &zf);
    const char *version = planestore_view_version(&v);

    pthread_mutex_lock(&s->lock);
    cutentry *c;
    for (;;) {
        c = cut_find(s, path, d->hdu, zf, version, rp);
        if (c && c->state == CE_READY) {
            *lo = c->lo;
            *hi = c->hi;
            c->used = ++s->cut_clock;
            pthread_mutex_unlock(&s->lock);
            planestore_release(s, &v);
            return 0;
        }
        if (!c)
            break;
        pthread_cond_wait(&s->cut_cond, &s->lock);   /* being computed by another thread */
    }
    c = cut_slot(s);
    char *pcopy = c ? strdup(path) : NULL;
    if (c && pcopy) {
        free(c->path);
        c->path = pcopy;
        c->state = CE_COMPUTING;
        c->hdu = d->hdu;
        c->zf = zf;
        snprintf(c->version, sizeof c->version, "%s", version);
        c->min_cut = rp->min_cut;
        c->max_cut = rp->max_cut;
    } else {
        c = NULL;   /* no slot (or no memory): compute without remembering */
    }
    pthread_mutex_unlock(&s->lock);

    const rp_plane *p = v.plane;
    long pnx = p->nx, pny = p->ny;
    size_t n = (size_t)pnx * (size_t)pny;
    double l = 0, h = 0;
    rc = p->dtype == RP_F64 ? render_resolve_cuts(p->data, n, rp, &l, &h)
                            : render_resolve_cuts_f32(p->data, n, rp, &l, &h);

    pthread_mutex_lock(&s->lock);
    s->st.cut_computations++;
    if (c) {
        if (rc) {
            free(c->path);
            memset(c, 0, sizeof(*c));
        } else {
            c->lo = l;
            c->hi = h;
            c->used = ++s->cut_clock;
            c->state = CE_READY;
        }
        pthread_cond_broadcast(&s->cut_cond);
    }
    pthread_mutex_unlock(&s->lock);
    planestore_release(s, &v);
    if (rc) {
        tess_seterr(err, errlen, "out of memory computing the cut levels of a %ld x %ld plane",
                pnx, pny);
        return rc;
    }
    *lo = l;
    *hi = h;
    return 0;
}

void planestore_get_stats(planestore *s, planestore_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    *st = s->st;
    st->bytes = s->bytes;
    st->entries = s->nentries;
    st->max_bytes = s->max_bytes;
    pthread_mutex_unlock(&s->lock);
}
