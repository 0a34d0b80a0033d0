/* The caches under injected faults (tests/faults/faultloop.h): the tile cache (put, get,
 * replace, evict), the disk cache (put, get, evict, close and reopen as after a restart)
 * and the plane store over a catalog of tests/data files (every level of every plane,
 * cut levels, versions, region reads), with every allocation and file operation failing
 * in turn.  A cache may lose entries to a fault, never serve a wrong one; the disk cache's
 * directory and index must agree after any fault. */
#include "daemon/cache/diskcache.h"
#include "daemon/cache/planes.h"
#include "daemon/cache/tilecache.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "engine/base/error.h"
#include "engine/image/render.h"
#include "tests/faults/faultloop.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- tiles the scenarios store ------------------------------------------------------
 * Tile i, version v: (300 + 37 i) bytes, byte k = (k * 7 + i * 13 + v * 101) mod 251. */
#define NTILES 12

static size_t tile_len(int i)
{
    return 300 + 37 * (size_t)i;
}

static unsigned char tile_byte(int i, int v, size_t k)
{
    return (unsigned char)((k * 7 + (size_t)i * 13 + (size_t)v * 101) % 251);
}

static void tile_key(int i, char *key, size_t len)
{
    snprintf(key, len, "ds/hips/%d/%d.png?v=%d", i % 3, i, i * 7);
}

/* A tile made by the harness (not a fault point); NULL when out of memory anyway. */
static tile *make_tile(int i, int v)
{
    fi_hold(1);
    size_t n = tile_len(i);
    unsigned char *b = malloc(n);
    tile *t = NULL;
    if (b) {
        for (size_t k = 0; k < n; k++)
            b[k] = tile_byte(i, v, k);
        t = tile_new_take(b, n, v ? "image/jpeg" : "image/png");
    }
    fi_hold(0);
    return t;
}

/* A tile got back for tile i must be version v (or one of the versions allowed). */
static int is_version(const tile *t, int i, int v)
{
    if (t->len != tile_len(i) || strcmp(t->content_type, v ? "image/jpeg" : "image/png") != 0)
        return 0;
    for (size_t k = 0; k < t->len; k++)
        if (t->data[k] != tile_byte(i, v, k))
            return 0;
    return 1;
}

/* ---- the tile cache ------------------------------------------------------------------ */

static void tc_reset(void *ctx)
{
    (void)ctx;
}

/* Puts tile i, version v; a put that fails for want of memory leaves the cache unchanged
 * (tilecache.h), so `ok[i]` (the versions a get may give: bit v) keeps the old one. */
static void tc_put(tilecache *c, int i, int v, unsigned *ok)
{
    char key[64];
    tile_key(i, key, sizeof key);
    tile *t = make_tile(i, v);
    if (!t)
        return;
    int rc = tilecache_put(c, key, t);
    tile_release(t);
    fl_require(rc == 0 || rc == TESS_ENOMEM, "tilecache_put of tile %d: code %d", i, rc);
    if (rc == 0)
        ok[i] = 1u << v;
}

static void tc_get(tilecache *c, int i, const unsigned *ok)
{
    char key[64];
    tile_key(i, key, sizeof key);
    tile *t = tilecache_get(c, key);
    if (!t)
        return;
    int good = 0;
    for (int v = 0; v < 2; v++)
        good |= (ok[i] >> v & 1) && is_version(t, i, v);
    tile_release(t);
    fl_require(good, "tilecache_get of tile %d: a body that was not put last", i);
}

static int tc_run(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    /* Room for about 8 of the 12 tiles, in 2 shards. */
    size_t budget = 8 * (tile_len(NTILES / 2) + 40 + TILECACHE_ENTRY_OVERHEAD);
    tilecache *c = tilecache_new(budget, 2);
    if (!c) {
        tess_seterr(err, errlen, "tilecache_new: out of memory");
        return TESS_ENOMEM;
    }
    unsigned ok[NTILES] = {0};
    for (int i = 0; i < NTILES; i++) {
        tc_put(c, i, 0, ok);
        tc_get(c, i / 2, ok);
    }
    for (int i = 0; i < NTILES; i += 3)
        tc_put(c, i, 1, ok);   /* replaced */
    for (int i = 0; i < NTILES; i++)
        tc_get(c, i, ok);
    tilecache_stats st;
    tilecache_get_stats(c, &st);
    fl_require(st.bytes <= budget && st.entries <= NTILES, "tile cache holds %zu bytes in %zu "
               "entries, budget %zu", st.bytes, st.entries, budget);
    tilecache_free(c);
    return 0;
}

static void tc_check(void *ctx, int rc, long faults)
{
    (void)ctx;
    (void)rc;
    (void)faults;
}

/* ---- the disk cache ------------------------------------------------------------------ */

static char dc_dir[PATH_MAX];
#define DC_BUDGET (6 * (tile_len(NTILES / 2) + 40 + 120))

static void rm_rf(const char *dir)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void dc_reset(void *ctx)
{
    (void)ctx;
    rm_rf(dc_dir);
}

/* Each disk cache entry may give the versions of tile i whose bit is set in ok[i]. */
static void dc_get(diskcache *c, int i, const unsigned *ok)
{
    char key[64];
    tile_key(i, key, sizeof key);
    tile *t = diskcache_get(c, key);
    if (!t)
        return;
    int good = 0;
    for (int v = 0; v < 2; v++)
        good |= (ok[i] >> v & 1) && is_version(t, i, v);
    tile_release(t);
    fl_require(good, "diskcache_get of tile %d: a body that was not put", i);
}

static void dc_put(diskcache *c, int i, int v, unsigned *ok)
{
    char key[64];
    tile_key(i, key, sizeof key);
    tile *t = make_tile(i, v);
    if (!t)
        return;
    /* Until the put returns, either version may be on disk (a replacement that failed
     * leaves the old file or none). */
    ok[i] |= 1u << v;
    int rc = diskcache_put(c, key, t);
    fi_hold(1);
    tile_release(t);
    fi_hold(0);
    fl_require(rc == 0 || rc == TESS_EIO || rc == TESS_ENOMEM, "diskcache_put of tile %d: "
               "code %d", i, rc);
    if (rc == 0)
        ok[i] = 1u << v;
}

/* Bytes and count of the entry files in the cache directory; fails on a *.tmp. */
static size_t dc_files(size_t *count)
{
    DIR *d = opendir(dc_dir);
    fl_require(d != NULL, "cannot list %s", dc_dir);
    size_t bytes = 0;
    *count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        fl_require(n < 4 || strcmp(e->d_name + n - 4, ".tmp") != 0,
                   "a temporary file is left: %s", e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".tile") == 0) {
            char p[PATH_MAX + 256];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", dc_dir, e->d_name);
            fl_require(stat(p, &st) == 0, "cannot stat %s", p);
            bytes += (size_t)st.st_size;
            (*count)++;
        }
    }
    closedir(d);
    return bytes;
}

/* The index of `c` counts exactly the entry files of the directory, within the budget. */
static void dc_require_agree(diskcache *c, const char *when)
{
    fi_hold(1);
    size_t count, bytes = dc_files(&count);
    diskcache_stats st;
    diskcache_get_stats(c, &st);
    fi_hold(0);
    fl_require(st.bytes == bytes && st.entries == count,
               "%s: the index says %zu bytes in %zu entries, the directory holds %zu in %zu",
               when, st.bytes, st.entries, bytes, count);
    fl_require(bytes <= DC_BUDGET, "%s: %zu bytes on disk, budget %zu", when, bytes,
               (size_t)DC_BUDGET);
}

static unsigned dc_ok[NTILES];

static int dc_run(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    memset(dc_ok, 0, sizeof dc_ok);
    diskcache *c = diskcache_open(dc_dir, DC_BUDGET, err, errlen);
    if (!c)
        return TESS_EIO;
    for (int i = 0; i < NTILES; i++) {
        dc_put(c, i, 0, dc_ok);
        dc_get(c, i / 2, dc_ok);
    }
    for (int i = 0; i < NTILES; i += 4)
        dc_put(c, i, 1, dc_ok);
    dc_require_agree(c, "after the puts");
    diskcache_close(c);
    /* A restart: the entries left are indexed again. */
    c = diskcache_open(dc_dir, DC_BUDGET, err, errlen);
    if (!c)
        return TESS_EIO;
    for (int i = 0; i < NTILES; i++)
        dc_get(c, i, dc_ok);
    dc_put(c, 1, 1, dc_ok);
    dc_get(c, 1, dc_ok);
    dc_require_agree(c, "after the restart");
    diskcache_close(c);
    return 0;
}

/* After any run: the directory reopens, its index counts exactly the files there, within
 * the budget, and every entry gives its tile's last version put (or a miss). */
static void dc_check(void *ctx, int rc, long faults)
{
    (void)ctx;
    (void)rc;
    (void)faults;
    char err[512] = "";
    diskcache *c = diskcache_open(dc_dir, DC_BUDGET, err, sizeof err);
    ck_assert_msg(c != NULL, "the disk cache does not reopen: %s", err);
    dc_require_agree(c, "reopened");
    for (int i = 0; i < NTILES; i++)
        dc_get(c, i, dc_ok);
    diskcache_close(c);
}

/* ---- the plane store ----------------------------------------------------------------- */

static tess_config pl_cfg;

/* What the scenario reads of each dataset without faults. */
#define PL_MAX 24
typedef struct pl_ref {
    char name[32];
    int has_wcs, has_cel, nkeys;   /* what the catalog made of the dataset's header */
    long z;
    int level;
    rp_plane p;
    double lo, hi;
    char version[64];
} pl_ref;
static pl_ref pl_refs[PL_MAX];
static int pl_nrefs;
static double *pl_region;      /* 8 x 6 at (3, 2) of plane 0 of the first dataset */

static void pl_reset(void *ctx)
{
    (void)ctx;
}

static size_t plane_bytes(const rp_plane *p)
{
    return (size_t)p->nx * (size_t)p->ny * (p->dtype == RP_F32 ? sizeof(float) : sizeof(double));
}

/* Reads every plane of the list (first pass: records them as the references). */
static int pl_pass(int record, char *err, size_t errlen)
{
    catalog *cat = NULL;
    int rc = catalog_open(&pl_cfg, &cat, err, errlen);
    if (rc)
        return rc;
    planestore *s = planestore_new((size_t)4 << 20);
    if (!s) {
        catalog_free(cat);
        tess_seterr(err, errlen, "planestore_new: out of memory");
        return TESS_ENOMEM;
    }
    render_params rp;
    render_params_default(&rp);
    int k = 0;
    for (int i = 0; i < catalog_count(cat) && !rc; i++) {
        const dataset *d = catalog_at(cat, i);
        long zs[2] = {0, d->nz - 1};
        for (int zi = 0; zi < 2 && !rc; zi++) {
            for (int level = 0; level < 3 && !rc; level++, k++) {
                plane_view v = {0};
                rc = planestore_get(s, d, zs[zi], level, &v, err, errlen);
                if (rc)
                    break;
                double lo = 0, hi = 0;
                char ver[64] = "";
                rc = planestore_cuts(s, d, zs[zi], &rp, &lo, &hi, err, errlen);
                if (!rc)
                    rc = planestore_version(s, d, zs[zi], ver, sizeof ver, err, errlen);
                if (!rc && record) {
                    ck_assert_int_lt(k, PL_MAX);
                    pl_ref *r = &pl_refs[k];
                    snprintf(r->name, sizeof r->name, "%s", d->name);
                    r->has_wcs = d->wcs != NULL;
                    r->has_cel = d->cel != NULL;
                    r->nkeys = d->nkeys;
                    r->z = zs[zi];
                    r->level = level;
                    r->p = *v.plane;
                    r->p.data = malloc(plane_bytes(v.plane));
                    memcpy(r->p.data, v.plane->data, plane_bytes(v.plane));
                    r->lo = lo;
                    r->hi = hi;
                    snprintf(r->version, sizeof r->version, "%s", ver);
                    pl_nrefs = k + 1;
                } else if (!rc) {
                    const pl_ref *r = &pl_refs[k];
                    fl_require((d->wcs != NULL) == r->has_wcs && (d->cel != NULL) == r->has_cel
                               && d->nkeys == r->nkeys, "dataset %s opened with %s WCS and %s "
                               "celestial WCS (%d cards), without faults %s and %s (%d cards)",
                               d->name, d->wcs ? "a" : "no", d->cel ? "a" : "no", d->nkeys,
                               r->has_wcs ? "a" : "none", r->has_cel ? "a" : "none", r->nkeys);
                    fl_require(v.plane->nx == r->p.nx && v.plane->ny == r->p.ny &&
                               v.plane->dtype == r->p.dtype &&
                               memcmp(v.plane->data, r->p.data, plane_bytes(v.plane)) == 0,
                               "%s plane %ld level %d differs from the run without faults",
                               d->name, zs[zi], level);
                    fl_require(lo == r->lo && hi == r->hi && strcmp(ver, r->version) == 0,
                               "%s plane %ld: cuts or version differ", d->name, zs[zi]);
                }
                planestore_release(s, &v);
            }
        }
    }
    if (!rc) {
        double out[48];
        rc = dataset_read_region(catalog_at(cat, 0), 0, 3, 2, 8, 6, out, err, errlen);
        if (!rc && record) {
            pl_region = malloc(sizeof out);
            memcpy(pl_region, out, sizeof out);
        } else if (!rc) {
            for (int i = 0; i < 48; i++)
                fl_require(out[i] == pl_region[i] || (isnan(out[i]) && isnan(pl_region[i])),
                           "region pixel %d differs from the run without faults", i);
        }
    }
    planestore_free(s);
    catalog_free(cat);
    return rc;
}

static int pl_run(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    return pl_pass(0, err, errlen);
}

static void pl_setup(void)
{
    char err[512] = "";
    ck_assert_int_eq(config_init(&pl_cfg), 0);
    pl_cfg.data_roots = calloc(1, sizeof(char *));
    pl_cfg.data_roots[0] = realpath(TESSERA_TESTDATA_DIR, NULL);
    ck_assert_ptr_nonnull(pl_cfg.data_roots[0]);
    pl_cfg.n_roots = 1;
    static const char *const names[] = {"image", "cube", "stack"};
    pl_cfg.datasets = calloc(3, sizeof(ds_config));
    for (int i = 0; i < 3; i++)
        pl_cfg.datasets[i].name = strdup(names[i]);
    pl_cfg.datasets[0].path = strdup("galactic_2d.fits");
    pl_cfg.datasets[1].path = strdup("equatorial_3d.fits");
    pl_cfg.datasets[2].frames = strdup("mosaic/tile_[12].fits");
    pl_cfg.n_datasets = 3;
    ck_assert_msg(pl_pass(1, err, sizeof err) == 0, "%s", err);
}

static void pl_teardown(void)
{
    for (int i = 0; i < pl_nrefs; i++)
        free(pl_refs[i].p.data);
    pl_nrefs = 0;
    free(pl_region);
    pl_region = NULL;
    config_release(&pl_cfg);
}

/* ---- the tests ------------------------------------------------------------------------ */

static const fl_scenario tc_scenario = {"tile cache", tc_reset, tc_run, tc_check, NULL, 0};
static const fl_scenario dc_scenario = {"disk cache", dc_reset, dc_run, dc_check, NULL, 0};
static const fl_scenario pl_scenario = {"plane store", pl_reset, pl_run, tc_check, NULL, 0};

START_TEST(test_tilecache_alloc)
{
    fl_loop_modes(&tc_scenario, FI_ALLOC);
}
END_TEST

static void dc_setup(void)
{
    char tmp[64];
    tt_tmpdir_make(tmp, sizeof tmp, "faultdc");
    snprintf(dc_dir, sizeof dc_dir, "%s/cache", tmp);
}

static void dc_teardown(void)
{
    char *slash = strrchr(dc_dir, '/');
    *slash = '\0';
    rm_rf(dc_dir);
}

START_TEST(test_diskcache_alloc)
{
    fl_loop_modes(&dc_scenario, FI_ALLOC);
}
END_TEST

START_TEST(test_diskcache_io)
{
    fl_loop_modes(&dc_scenario, FI_IO);
}
END_TEST

START_TEST(test_planes_alloc)
{
    fl_loop_modes(&pl_scenario, FI_ALLOC);
}
END_TEST

START_TEST(test_planes_io)
{
    fl_loop_modes(&pl_scenario, FI_IO);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault_caches");
    TCase *tc = tcase_create("tilecache");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tilecache_alloc);
    suite_add_tcase(s, tc);
    tc = tcase_create("diskcache");
    tcase_add_checked_fixture(tc, dc_setup, dc_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_diskcache_alloc);
    tcase_add_test(tc, test_diskcache_io);
    suite_add_tcase(s, tc);
    tc = tcase_create("planes");
    tcase_add_checked_fixture(tc, pl_setup, pl_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_planes_alloc);
    tcase_add_test(tc, test_planes_io);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
