/* Unit tests of daemon/cache/tilecache: ETags, byte bound, LRU order, replacement, refcounts, threads. */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cache/tilecache.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

/* Reference FNV-1a 64 from the published constants, written apart from the module's. */
static uint64_t ref_fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* A tile of `len` bytes all equal to `fill`. */
static tile *make_tile(size_t len, unsigned char fill)
{
    unsigned char *d = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(d);
    memset(d, fill, len);
    tile *t = tile_new_take(d, len, "application/octet-stream");
    ck_assert_ptr_nonnull(t);
    return t;
}

static size_t charge(size_t len, const char *key)
{
    return len + strlen(key) + TILECACHE_ENTRY_OVERHEAD;
}

static int refs(tile *t)
{
    return atomic_load(&t->refs);
}

/* Puts a fresh tile and drops the caller's reference; returns put's result. */
static int put_new(tilecache *c, const char *key, size_t len, unsigned char fill)
{
    tile *t = make_tile(len, fill);
    int rc = tilecache_put(c, key, t);
    tile_release(t);
    return rc;
}

static int present(tilecache *c, const char *key)
{
    tile *t = tilecache_get(c, key);
    tile_release(t);
    return t != NULL;
}

START_TEST(test_etag_known_vectors)
{
    unsigned char *a = malloc(1);
    a[0] = 'a';
    tile *t = tile_new_take(a, 1, "image/png");
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->etag, "\"af63dc4c8601ec8c\"");
    ck_assert_str_eq(t->content_type, "image/png");
    ck_assert_int_eq(refs(t), 1);
    tile_release(t);

    tile *e = tile_new_take(NULL, 0, "text/plain");
    ck_assert_str_eq(e->etag, "\"cbf29ce484222325\"");   /* the offset basis */
    tile_release(e);

    const char *body = "SIMPLE  =                    T / Tessera tile body";
    size_t n = strlen(body);
    unsigned char *d = malloc(n);
    memcpy(d, body, n);
    char want[40];
    snprintf(want, sizeof want, "\"%016" PRIx64 "\"", ref_fnv1a64(d, n));
    tile *b = tile_new_take(d, n, NULL);
    ck_assert_str_eq(b->etag, want);
    ck_assert_str_eq(b->content_type, "");
    ck_assert_uint_eq(strlen(b->etag), 18);
    tile_release(b);
}
END_TEST

START_TEST(test_refcount)
{
    tile *t = make_tile(10, 1);
    ck_assert_ptr_eq(tile_ref(t), t);
    ck_assert_int_eq(refs(t), 2);
    tile_release(t);
    ck_assert_int_eq(refs(t), 1);
    tile_release(t);
    tile_release(NULL);
}
END_TEST

START_TEST(test_put_get_counts)
{
    tilecache *c = tilecache_new(1 << 20, 4);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(tilecache_get(c, "hips/x/Norder3/Dir0/Npix1.png"));

    tile *t = make_tile(1000, 7);
    ck_assert_int_eq(tilecache_put(c, "hips/x/Norder3/Dir0/Npix1.png", t), 0);
    ck_assert_int_eq(refs(t), 2);
    tile *g = tilecache_get(c, "hips/x/Norder3/Dir0/Npix1.png");
    ck_assert_ptr_eq(g, t);
    ck_assert_int_eq(refs(t), 3);
    tile_release(g);
    ck_assert_ptr_null(tilecache_get(c, "hips/x/Norder3/Dir0/Npix2.png"));

    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.hits, 1);
    ck_assert_uint_eq(s.misses, 2);
    ck_assert_uint_eq(s.insertions, 1);
    ck_assert_uint_eq(s.evictions, 0);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.bytes, charge(1000, "hips/x/Norder3/Dir0/Npix1.png"));
    ck_assert_uint_eq(s.max_bytes, 1 << 20);

    tilecache_free(c);
    ck_assert_int_eq(refs(t), 1);
    tile_release(t);
}
END_TEST

START_TEST(test_lru_touch_saves_entry)
{
    /* one shard with room for exactly three entries of 100 bytes under 2-byte keys */
    size_t budget = 3 * charge(100, "k0");
    tilecache *c = tilecache_new(budget, 1);
    ck_assert_int_eq(put_new(c, "k0", 100, 0), 0);
    ck_assert_int_eq(put_new(c, "k1", 100, 1), 0);
    ck_assert_int_eq(put_new(c, "k2", 100, 2), 0);
    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.bytes, budget);
    ck_assert_uint_eq(s.entries, 3);

    tile *t = tilecache_get(c, "k0");           /* k0 becomes most recently used */
    ck_assert_ptr_nonnull(t);
    tile_release(t);
    ck_assert_int_eq(put_new(c, "k3", 100, 3), 0);   /* evicts k1, the oldest */
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.evictions, 1);
    ck_assert_uint_eq(s.entries, 3);
    ck_assert_uint_eq(s.bytes, budget);

    /* recency now (newest first): k3 k0 k2; check without touching, via the next eviction */
    ck_assert_int_eq(put_new(c, "k4", 100, 4), 0);   /* evicts k2 */
    ck_assert_int_eq(present(c, "k1"), 0);
    ck_assert_int_eq(present(c, "k2"), 0);
    ck_assert_int_eq(present(c, "k0"), 1);
    ck_assert_int_eq(present(c, "k3"), 1);
    ck_assert_int_eq(present(c, "k4"), 1);

    /* a larger tile pushes out as many of the oldest as it needs */
    ck_assert_int_eq(put_new(c, "k5", 100 + charge(100, "k0"), 5), 0);
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.evictions, 4);
    ck_assert_uint_eq(s.entries, 2);
    ck_assert_int_eq(present(c, "k4"), 1);          /* the most recent survives */
    ck_assert_int_eq(present(c, "k5"), 1);
    ck_assert_uint_le(s.bytes, budget);
    tilecache_free(c);
}
END_TEST

START_TEST(test_replace_frees_old_bytes)
{
    size_t budget = 2 * charge(100, "a");
    tilecache *c = tilecache_new(budget, 1);
    tile *old = make_tile(100, 1);
    ck_assert_int_eq(tilecache_put(c, "a", old), 0);
    ck_assert_int_eq(put_new(c, "b", 100, 2), 0);

    /* same size under the same key: the old bytes are freed first, nothing is evicted */
    tile *nw = make_tile(100, 9);
    ck_assert_int_eq(tilecache_put(c, "a", nw), 0);
    ck_assert_int_eq(refs(old), 1);             /* the cache dropped its reference */
    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.evictions, 0);
    ck_assert_uint_eq(s.entries, 2);
    ck_assert_uint_eq(s.bytes, budget);
    tile *g = tilecache_get(c, "a");
    ck_assert_ptr_eq(g, nw);
    ck_assert_uint_eq(g->data[0], 9);
    tile_release(g);
    ck_assert_int_eq(present(c, "b"), 1);

    /* replacing with the very same tile keeps it alive */
    ck_assert_int_eq(tilecache_put(c, "a", nw), 0);
    ck_assert_int_eq(refs(nw), 2);

    /* smaller body: the byte count follows */
    ck_assert_int_eq(put_new(c, "a", 10, 3), 0);
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.bytes, charge(10, "a") + charge(100, "b"));
    ck_assert_uint_eq(s.entries, 2);
    ck_assert_int_eq(refs(nw), 1);

    tile_release(old);
    tile_release(nw);
    tilecache_free(c);
}
END_TEST

START_TEST(test_oversize_refused)
{
    size_t budget = 1000;
    tilecache *c = tilecache_new(budget, 1);
    size_t biggest = budget - strlen("k") - TILECACHE_ENTRY_OVERHEAD;

    tile *t = make_tile(biggest + 1, 1);
    ck_assert_int_eq(tilecache_put(c, "k", t), TESS_ERANGE);
    ck_assert_int_eq(refs(t), 1);
    tile_release(t);
    ck_assert_int_eq(put_new(c, "k", biggest, 2), 0);
    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.bytes, budget);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.insertions, 1);

    /* a refused replacement drops the stale entry and evicts nothing else */
    ck_assert_int_eq(put_new(c, "k", 5000, 3), TESS_ERANGE);
    ck_assert_int_eq(present(c, "k"), 0);
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.bytes, 0);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.evictions, 0);
    tilecache_free(c);

    /* the limit is the shard's share, not the whole budget */
    c = tilecache_new(4000, 4);
    ck_assert_int_eq(put_new(c, "big", 900, 4), TESS_ERANGE);
    ck_assert_int_eq(put_new(c, "fit", 1000 - 3 - TILECACHE_ENTRY_OVERHEAD, 4), 0);
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.entries, 1);
    tilecache_free(c);
}
END_TEST

START_TEST(test_evicted_tile_lives_for_holder)
{
    tilecache *c = tilecache_new(2 * charge(500, "x"), 1);
    ck_assert_int_eq(put_new(c, "x", 500, 0xAB), 0);
    tile *held = tilecache_get(c, "x");
    ck_assert_ptr_nonnull(held);
    ck_assert_int_eq(put_new(c, "y", 500, 1), 0);
    ck_assert_int_eq(put_new(c, "z", 500, 2), 0);   /* evicts x */
    ck_assert_int_eq(present(c, "x"), 0);
    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.evictions, 1);
    ck_assert_int_eq(refs(held), 1);
    for (size_t i = 0; i < held->len; i++)
        ck_assert_uint_eq(held->data[i], 0xAB);

    /* and freeing the whole cache does not free what a holder still has */
    tile *z = tilecache_get(c, "z");
    tilecache_free(c);
    ck_assert_int_eq(refs(z), 1);
    ck_assert_uint_eq(z->data[499], 2);
    tile_release(z);
    tile_release(held);
}
END_TEST

START_TEST(test_disabled)
{
    tilecache *c = tilecache_new(0, 8);
    ck_assert_ptr_nonnull(c);
    tile *t = make_tile(10, 0);
    ck_assert_int_eq(tilecache_put(c, "k", t), 0);
    ck_assert_int_eq(refs(t), 1);
    ck_assert_ptr_null(tilecache_get(c, "k"));
    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.misses, 1);
    ck_assert_uint_eq(s.hits, 0);
    ck_assert_uint_eq(s.insertions, 0);
    ck_assert_uint_eq(s.bytes, 0);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.max_bytes, 0);
    tile_release(t);
    tilecache_free(c);
}
END_TEST

START_TEST(test_shard_count_range)
{
    ck_assert_ptr_null(tilecache_new(1000, 0));
    ck_assert_ptr_null(tilecache_new(1000, -3));
    ck_assert_ptr_null(tilecache_new(1000, 257));
    tilecache *c = tilecache_new(1 << 20, 256);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(put_new(c, "k", 100, 0), 0);
    ck_assert_int_eq(present(c, "k"), 1);
    tilecache_free(c);
    tilecache_free(NULL);
}
END_TEST

/* Many puts of random sizes over several shards: the bound holds after every one, an
 * entry is refused exactly when its charge exceeds the shard's share, and the byte count
 * equals the sum of the charges of the entries present. */
START_TEST(test_byte_bound_random)
{
    const size_t max = 64 * 1024;
    const int nshards = 8;
    const size_t share = max / (size_t)nshards;
    enum { NKEYS = 300 };
    static size_t lens[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        lens[i] = (size_t)-1;
    tilecache *c = tilecache_new(max, nshards);
    unsigned seed = 12345;
    size_t refused = 0;
    for (int n = 0; n < 5000; n++) {
        int k = rand_r(&seed) % NKEYS;
        size_t len = (size_t)(rand_r(&seed) % 9000);
        char key[32];
        snprintf(key, sizeof key, "tile/%d", k);
        int rc = put_new(c, key, len, (unsigned char)k);
        if (charge(len, key) > share) {
            ck_assert_int_eq(rc, TESS_ERANGE);
            refused++;
        } else {
            ck_assert_int_eq(rc, 0);
        }
        lens[k] = rc == 0 ? len : (size_t)-1;
        tilecache_stats s;
        tilecache_get_stats(c, &s);
        ck_assert_uint_le(s.bytes, max);
    }
    ck_assert_uint_gt(refused, 0);

    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_gt(s.evictions, 0);
    size_t sum = 0, found = 0;
    for (int k = 0; k < NKEYS; k++) {
        char key[32];
        snprintf(key, sizeof key, "tile/%d", k);
        tile *t = tilecache_get(c, key);
        if (t) {
            ck_assert_uint_eq(t->len, lens[k]);   /* the latest stored body, never an old one */
            if (t->len)
                ck_assert_uint_eq(t->data[t->len - 1], (unsigned char)k);
            sum += charge(t->len, key);
            found++;
            tile_release(t);
        }
    }
    ck_assert_uint_eq(found, s.entries);
    ck_assert_uint_eq(sum, s.bytes);
    tilecache_free(c);
}
END_TEST

/* ---- 8 threads ---- */

enum { CT_THREADS = 8, CT_KEYS = 200, CT_OPS = 5000 };
static char ct_etag[CT_KEYS][40];
static pthread_barrier_t ct_start;

static size_t ct_len(int k)
{
    return 200 + (size_t)(k * 37 % 3000);
}

typedef struct ct_result {
    tilecache *c;
    unsigned seed;
    long gets, puts, bad;
} ct_result;

static void *ct_worker(void *arg)
{
    ct_result *r = arg;
    pthread_barrier_wait(&ct_start);
    for (int n = 0; n < CT_OPS; n++) {
        int k = rand_r(&r->seed) % CT_KEYS;
        char key[32];
        snprintf(key, sizeof key, "slice/xy/%d", k);
        if (rand_r(&r->seed) % 2) {
            r->gets++;
            tile *t = tilecache_get(r->c, key);
            if (!t)
                continue;
            if (t->len != ct_len(k) || strcmp(t->etag, ct_etag[k]) != 0 ||
                t->data[0] != (unsigned char)k || t->data[t->len - 1] != (unsigned char)k)
                r->bad++;
            tile_release(t);
        } else {
            size_t len = ct_len(k);
            unsigned char *d = malloc(len);
            if (!d) {
                r->bad++;
                continue;
            }
            memset(d, k, len);
            tile *t = tile_new_take(d, len, "image/png");
            if (!t || tilecache_put(r->c, key, t) != 0)
                r->bad++;
            else
                r->puts++;
            tile_release(t);
        }
    }
    return NULL;
}

START_TEST(test_concurrent_get_put)
{
    const size_t max = 128 * 1024;   /* far less than the key space: constant eviction */
    for (int k = 0; k < CT_KEYS; k++) {
        size_t len = ct_len(k);
        unsigned char *d = malloc(len);
        memset(d, k, len);
        snprintf(ct_etag[k], sizeof ct_etag[k], "\"%016" PRIx64 "\"", ref_fnv1a64(d, len));
        free(d);
    }
    tilecache *c = tilecache_new(max, 4);
    pthread_barrier_init(&ct_start, NULL, CT_THREADS);
    pthread_t th[CT_THREADS];
    ct_result res[CT_THREADS];
    for (int i = 0; i < CT_THREADS; i++) {
        res[i] = (ct_result){.c = c, .seed = 1000u + (unsigned)i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, ct_worker, &res[i]), 0);
    }
    long gets = 0, puts = 0, bad = 0;
    for (int i = 0; i < CT_THREADS; i++) {
        pthread_join(th[i], NULL);
        gets += res[i].gets;
        puts += res[i].puts;
        bad += res[i].bad;
    }
    pthread_barrier_destroy(&ct_start);
    ck_assert_int_eq(bad, 0);

    tilecache_stats s;
    tilecache_get_stats(c, &s);
    ck_assert_uint_eq(s.hits + s.misses, (uint64_t)gets);
    ck_assert_uint_eq(s.insertions, (uint64_t)puts);
    ck_assert_uint_gt(s.hits, 0);
    ck_assert_uint_gt(s.evictions, 0);
    ck_assert_uint_le(s.bytes, max);

    size_t sum = 0, found = 0;
    for (int k = 0; k < CT_KEYS; k++) {
        char key[32];
        snprintf(key, sizeof key, "slice/xy/%d", k);
        tile *t = tilecache_get(c, key);
        if (t) {
            ck_assert_str_eq(t->etag, ct_etag[k]);
            ck_assert_int_eq(refs(t), 2);
            sum += charge(t->len, key);
            found++;
            tile_release(t);
        }
    }
    ck_assert_uint_eq(found, s.entries);
    ck_assert_uint_eq(sum, s.bytes);
    tilecache_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tilecache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_etag_known_vectors);
    tcase_add_test(tc, test_refcount);
    tcase_add_test(tc, test_put_get_counts);
    tcase_add_test(tc, test_lru_touch_saves_entry);
    tcase_add_test(tc, test_replace_frees_old_bytes);
    tcase_add_test(tc, test_oversize_refused);
    tcase_add_test(tc, test_evicted_tile_lives_for_holder);
    tcase_add_test(tc, test_disabled);
    tcase_add_test(tc, test_shard_count_range);
    tcase_add_test(tc, test_byte_bound_random);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("threads");
    tcase_set_timeout(tt, 60);
    tcase_add_test(tt, test_concurrent_get_put);
    suite_add_tcase(s, tt);
    return tt_run_suite(s);
}
