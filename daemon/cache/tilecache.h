/* In-memory tile cache: sharded LRU of encoded responses, bounded in bytes. */
#ifndef TESSERA_DAEMON_CACHE_TILECACHE_H
#define TESSERA_DAEMON_CACHE_TILECACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* An encoded response body, immutable once made and shared by reference count.
 * Several threads may hold references to the same tile. */
typedef struct tile {
    unsigned char *data;      /* the body bytes */
    size_t len;               /* body length in bytes */
    char content_type[128];    /* e.g. "image/png" */
    char etag[40];            /* strong ETag with quotes, e.g. "\"9f86d081884c7d65\"",
                                 a 64-bit FNV-1a hash of the body in hex */
    /* private */
    atomic_int refs;          /* C11 atomic reference count */
} tile;

/* Makes a tile that owns `data` (malloc'd; freed with the tile) with one reference held
 * by the caller.  Returns NULL on allocation failure (then `data` is freed too). */
tile *tile_new_take(unsigned char *data, size_t len, const char *content_type);

/* tile_new_take for a body that is cached but never sent (an intermediate, e.g. the
 * rendered doubles of a HiPS base tile): no hash is computed, etag is "".  Returns NULL
 * on allocation failure (then `data` is freed too). */
tile *tile_new_internal(unsigned char *data, size_t len, const char *content_type);

/* Takes one more reference.  Cannot fail. */
tile *tile_ref(tile *t);

/* Drops one reference; the last one frees the tile.  NULL is ignored. */
void tile_release(tile *t);

typedef struct tilecache tilecache;

/* What one entry costs against the byte budget besides its body and key: an estimate,
 * fixed so that the accounting is deterministic, of the entry record, its hash-bucket
 * slot, the tile header (struct tile) and allocator slack.  An entry's charge is
 * t->len + strlen(key) + TILECACHE_ENTRY_OVERHEAD. */
#define TILECACHE_ENTRY_OVERHEAD ((size_t)256)

/* A cache that holds at most `max_bytes` of tile bodies plus keys (0 disables
 * caching: every get misses, every put is dropped), spread over `nshards` shards
 * (1..256; each has its own lock and LRU list and max_bytes/nshards of the budget).
 * Every entry is charged its body, its key and TILECACHE_ENTRY_OVERHEAD.
 * Returns NULL on allocation failure or when nshards is outside 1..256. */
tilecache *tilecache_new(size_t max_bytes, int nshards);

/* Frees the cache and drops its references (tiles still held elsewhere live on). */
void tilecache_free(tilecache *c);

/* Looks up `key` (any NUL-terminated string).  On a hit returns the tile with a new
 * reference for the caller (tile_release it) and marks it most recently used; on a miss
 * returns NULL.  Counts hits and misses. Thread-safe. */
tile *tilecache_get(tilecache *c, const char *key);

/* Stores `t` under `key` (the cache takes its own reference; the caller keeps its own),
 * replacing an existing entry, and evicts least recently used entries of the shard until
 * it fits.  A tile larger than a shard's budget is not stored.  Returns 0, or
 * TESS_ENOMEM / TESS_ERANGE (too big; nothing stored). Thread-safe.
 * On TESS_ERANGE an existing entry under `key` is removed as well, so that a stale body
 * is never served in place of the refused one; on TESS_ENOMEM the cache is unchanged.
 * With caching disabled (max_bytes 0) the tile is dropped and 0 is returned. */
int tilecache_put(tilecache *c, const char *key, tile *t);

typedef struct tilecache_stats {
    uint64_t hits, misses, insertions, evictions;
    size_t bytes;      /* bytes held now (bodies + keys + TILECACHE_ENTRY_OVERHEAD each) */
    size_t entries;
    size_t max_bytes;
} tilecache_stats;

/* Fills `s` with the counters summed over all shards (each shard read under its lock,
 * so the totals are a near-instant, not atomic, snapshot).  Cannot fail. */
void tilecache_get_stats(tilecache *c, tilecache_stats *s);

#endif
