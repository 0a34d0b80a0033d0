/* In-memory tile cache: shards of a chained hash table and an intrusive LRU list each. */
#include "daemon/cache/tilecache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/hash.h"
#include "engine/base/lru.h"


#define SHARDS_MAX 256
#define BUCKETS_MIN 16

static uint64_t fnv1a64(const void *p, size_t n)
{
    return tess_fnv1a64(p, n, TESS_FNV64_OFFSET);
}

/* The splitmix64 finaliser: spreads FNV's weak high bits, which pick the shard. */
static uint64_t mix64(uint64_t h)
{
    h ^= h >> 30;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 27;
    h *= UINT64_C(0x94d049bb133111eb);
    h ^= h >> 31;
    return h;
}

/* ---- tiles ---- */

/* A tile owning `data`, with the ETag of its body when `etag`, else "". */
static tile *tile_make(unsigned char *data, size_t len, const char *content_type, int etag)
{
    tile *t = malloc(sizeof *t);
    if (!t) {
        free(data);
        return NULL;
    }
    t->data = data;
    t->len = len;
    snprintf(t->content_type, sizeof t->content_type, "%s", content_type ? content_type : "");
    t->etag[0] = '\0';
    if (etag)
        snprintf(t->etag, sizeof t->etag, "\"%016" PRIx64 "\"", fnv1a64(data, data ? len : 0));
    atomic_init(&t->refs, 1);
    return t;
}

tile *tile_new_take(unsigned char *data, size_t len, const char *content_type)
{
    return tile_make(data, len, content_type, 1);
}

tile *tile_new_internal(unsigned char *data, size_t len, const char *content_type)
{
    return tile_make(data, len, content_type, 0);
}

tile *tile_ref(tile *t)
{
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

void tile_release(tile *t)
{
    if (!t)
        return;
    /* acq_rel: the freeing thread must see every write made before other releases. */
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1) {
        free(t->data);
        free(t);
    }
}

/* ---- the cache ---- */

typedef struct entry {
    struct entry *hnext;          /* next in the hash bucket's chain */
    lru_node lru;                 /* LRU list: prev toward the front (most recent) */
    uint64_t hash;                /* mixed hash of the key */
    tile *t;                      /* the cache's own reference */
    size_t charge;                /* bytes counted against the shard's budget */
    size_t keylen;                /* strlen(key) */
    char key[];                   /* NUL-terminated */
} entry;

typedef struct shard {
    pthread_mutex_t lock;
    entry **buckets;              /* nbuckets chains; nbuckets a power of two */
    size_t nbuckets;
    lru_list lru;                 /* front and back: most and least recently used */
    size_t bytes, budget, entries;
    uint64_t hits, misses, insertions, evictions;
} shard;

struct tilecache {
    size_t max_bytes;
    int nshards;
    shard shards[];
};

static shard *shard_for(tilecache *c, uint64_t h)
{
    /* High bits pick the shard, low bits the bucket, so the two stay independent. */
    return &c->shards[(size_t)(h >> 32) % (size_t)c->nshards];
}

/* Returns the entry for key or NULL; `link` (if not NULL) receives the chain slot that
 * points at it.  Caller holds the shard lock. */
static entry *shard_find(shard *s, uint64_t h, const char *key, size_t keylen, entry ***link)
{
    entry **pp = &s->buckets[h & (s->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->hnext) {
        entry *e = *pp;
        if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0) {
            if (link)
                *link = pp;
            return e;
        }
    }
    return NULL;
}

/* Removes `e` from the table and the LRU list and takes its charge off the shard.
 * The caller frees it (with entry_free), preferably after dropping the lock. */
static void shard_detach(shard *s, entry *e)
{
    entry **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    e->hnext = NULL;
    lru_remove(&s->lru, &e->lru);
    s->bytes -= e->charge;
    s->entries--;
}

static void entry_free(entry *e)
{
    tile_release(e->t);
    free(e);
}

/* Doubles the bucket array when the chains average more than one entry.  An allocation
 * failure is not an error: the table keeps working with longer chains. */
static void shard_maybe_grow(shard *s)
{
    if (s->entries < s->nbuckets || s->nbuckets > SIZE_MAX / 2 / sizeof(entry *))
        return;
    size_t n = s->nbuckets * 2;
    entry **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry *e = s->buckets[i];
        while (e) {
            entry *next = e->hnext;
            size_t j = e->hash & (n - 1);
            e->hnext = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

tilecache *tilecache_new(size_t max_bytes, int nshards)
{
    if (nshards < 1 || nshards > SHARDS_MAX)
        return NULL;
    tilecache *c = calloc(1, sizeof *c + (size_t)nshards * sizeof(shard));
    if (!c)
        return NULL;
    c->max_bytes = max_bytes;
    c->nshards = nshards;
    for (int i = 0; i < nshards; i++) {
        shard *s = &c->shards[i];
        s->budget = max_bytes / (size_t)nshards;
        s->nbuckets = BUCKETS_MIN;
        s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
        if (!s->buckets || pthread_mutex_init(&s->lock, NULL) != 0) {
            free(s->buckets);
            for (int j = 0; j < i; j++) {
                pthread_mutex_destroy(&c->shards[j].lock);
                free(c->shards[j].buckets);
            }
            free(c);
            return NULL;
        }
    }
    return c;
}

void tilecache_free(tilecache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nshards; i++) {
        shard *s = &c->shards[i];
        lru_node *n = s->lru.front;
        while (n) {
            lru_node *next = n->next;
            entry_free(LRU_ENTRY(n, entry, lru));
            n = next;
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    free(c);
}

tile *tilecache_get(tilecache *c, const char *key)
{
    size_t keylen = strlen(key);
    uint64_t h = mix64(fnv1a64(key, keylen));
    shard *s = shard_for(c, h);
    tile *t = NULL;

    pthread_mutex_lock(&s->lock);
    entry *e = shard_find(s, h, key, keylen, NULL);
    if (e) {
        lru_move_front(&s->lru, &e->lru);
        t = tile_ref(e->t);
        s->hits++;
    } else {
        s->misses++;
    }
    pthread_mutex_unlock(&s->lock);
    return t;
}

/* The entry is allocated before the lock is taken, so TESS_ENOMEM leaves the cache
 * untouched; entries pushed out (the replaced one, evicted ones) are chained on a local
 * list and released after the lock is dropped, since freeing a body may be slow. */
int tilecache_put(tilecache *c, const char *key, tile *t)
{
    if (c->max_bytes == 0)
        return 0;
    size_t keylen = strlen(key);
    uint64_t h = mix64(fnv1a64(key, keylen));
    shard *s = shard_for(c, h);

    /* charge = len + keylen + overhead, refused if it cannot fit in the shard at all */
    int fits = t->len <= s->budget && keylen <= s->budget - t->len &&
               TILECACHE_ENTRY_OVERHEAD <= s->budget - t->len - keylen;
    entry *ne = NULL;
    if (fits) {
        ne = malloc(sizeof *ne + keylen + 1);
        if (!ne)
            return TESS_ENOMEM;
        memcpy(ne->key, key, keylen + 1);
        ne->keylen = keylen;
        ne->hash = h;
        ne->charge = t->len + keylen + TILECACHE_ENTRY_OVERHEAD;
        ne->hnext = NULL;
        ne->lru.prev = ne->lru.next = NULL;
        ne->t = tile_ref(t);
    }

    entry *dead = NULL;           /* detached entries, chained through hnext */
    pthread_mutex_lock(&s->lock);
    entry *old = shard_find(s, h, key, keylen, NULL);
    if (old) {
        shard_detach(s, old);
        old->hnext = dead;
        dead = old;
    }
    if (ne) {
        while (s->bytes + ne->charge > s->budget && !lru_empty(&s->lru)) {
            entry *v = LRU_ENTRY(s->lru.back, entry, lru);
            shard_detach(s, v);
            v->hnext = dead;
            dead = v;
            s->evictions++;
        }
        size_t b = h & (s->nbuckets - 1);
        ne->hnext = s->buckets[b];
        s->buckets[b] = ne;
        lru_push_front(&s->lru, &ne->lru);
        s->bytes += ne->charge;
        s->entries++;
        s->insertions++;
        shard_maybe_grow(s);
    }
    pthread_mutex_unlock(&s->lock);

    while (dead) {
        entry *next = dead->hnext;
        entry_free(dead);
        dead = next;
    }
    return ne ? 0 : TESS_ERANGE;
}

void tilecache_get_stats(tilecache *c, tilecache_stats *st)
{
    memset(st, 0, sizeof *st);
    st->max_bytes = c->max_bytes;
    for (int i = 0; i < c->nshards; i++) {
        shard *s = &c->shards[i];
        pthread_mutex_lock(&s->lock);
        st->hits += s->hits;
        st->misses += s->misses;
        st->insertions += s->insertions;
        st->evictions += s->evictions;
        st->bytes += s->bytes;
        st->entries += s->entries;
        pthread_mutex_unlock(&s->lock);
    }
}
