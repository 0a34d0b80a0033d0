/* Disk tier of the tile cache: encoded responses in files under one directory, bounded in bytes. */
#ifndef TESSERA_DAEMON_CACHE_DISKCACHE_H
#define TESSERA_DAEMON_CACHE_DISKCACHE_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/cache/tilecache.h"

typedef struct diskcache diskcache;

/* Opens (creating it if needed) the cache directory `dir`, holding at most `max_bytes` of
 * files.  Entries left by an earlier run are indexed (newest modification first kept) and
 * the directory trimmed to the budget; temporary files of an interrupted write
 * ("*.tmp") are removed, and so are entries there is no memory to index.  Returns NULL with `err` when the directory cannot be created or
 * read. */
diskcache *diskcache_open(const char *dir, size_t max_bytes, char *err, size_t errlen);

/* Closes the index (the files stay for the next run).  NULL is ignored. */
void diskcache_close(diskcache *c);

/* Looks up `key`: on a hit returns a new tile (one reference for the caller) read from
 * its file, whose stored key must equal `key` exactly (a hash collision is a miss), and
 * marks it recently used; NULL on a miss or a damaged file (the ETag stored must match
 * the body's hash).  Thread-safe. */
tile *diskcache_get(diskcache *c, const char *key);

/* Stores `t` under `key`: written to a temporary file, then renamed into place, so a
 * crash never leaves a partial entry; least recently used files are deleted until the
 * total fits.  Returns 0, TESS_ERANGE (larger than the whole budget), TESS_EIO, or
 * TESS_ENOMEM (then no entry is left under `key`).  Thread-safe. */
int diskcache_put(diskcache *c, const char *key, const tile *t);

typedef struct diskcache_stats {
    uint64_t hits, misses, writes, evictions;
    size_t bytes, entries, max_bytes;
} diskcache_stats;
void diskcache_get_stats(diskcache *c, diskcache_stats *s);

#endif
