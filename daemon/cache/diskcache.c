/* Disk tier of the tile cache: one file per entry, an in-memory LRU index, a byte budget. */
#include "daemon/cache/diskcache.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"
#include "engine/base/lru.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* File layout: MAGIC, then u32 key length, u32 content-type length, u64 body length,
 * 40 bytes of ETag (NUL-padded), the key, the content type, the body.  Native byte
 * order: the files belong to this machine's server. */
#define DC_MAGIC "TSRTILE1"
#define DC_HEADER (8 + 4 + 4 + 8 + 40)
#define DC_MAX_KEY (1u << 20)

typedef struct dc_entry {
    uint64_t hash;
    size_t bytes;
    lru_node lru;                   /* LRU list, most recent first */
    struct dc_entry *chain;         /* hash bucket chain */
} dc_entry;

struct diskcache {
    pthread_mutex_t lock;
    char *dir;
    diskcache_stats st;             /* the counters, the bytes and entries held, the bound */
    dc_entry **buckets;
    size_t nbuckets;                /* a power of two */
    lru_list lru;
    unsigned long tmp_counter;
};

/* FNV-1a 64 of the key, the file's name. */
static uint64_t key_hash(const char *key)
{
    return tess_fnv1a64(key, strlen(key), TESS_FNV64_OFFSET);
}

static void entry_path(const diskcache *c, uint64_t h, char *out, size_t len)
{
    snprintf(out, len, "%s/%016llx.tile", c->dir, (unsigned long long)h);
}

static dc_entry *find(diskcache *c, uint64_t h)
{
    for (dc_entry *e = c->buckets[h & (c->nbuckets - 1)]; e; e = e->chain)
        if (e->hash == h)
            return e;
    return NULL;
}

/* Removes e from the index (not the file). */
static void drop(diskcache *c, dc_entry *e)
{
    dc_entry **pp = &c->buckets[e->hash & (c->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    lru_remove(&c->lru, &e->lru);
    c->st.bytes -= e->bytes;
    c->st.entries--;
}

/* Doubles the bucket array when the table averages more than one entry a bucket; on
 * allocation failure the table keeps working with longer chains. */
static void maybe_grow(diskcache *c)
{
    if (c->st.entries < c->nbuckets)
        return;
    size_t n = c->nbuckets * 2;
    dc_entry **b = calloc(n, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < c->nbuckets; i++)
        for (dc_entry *e = c->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = n;
}

/* Adds an entry; `front` puts it first in LRU order (new writes), else last (start-up
 * scan, which inserts newest first).  Returns the entry or NULL on allocation failure. */
static dc_entry *add(diskcache *c, uint64_t h, size_t bytes, int front)
{
    dc_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->hash = h;
    e->bytes = bytes;
    e->chain = c->buckets[h & (c->nbuckets - 1)];
    c->buckets[h & (c->nbuckets - 1)] = e;
    if (front)
        lru_push_front(&c->lru, &e->lru);
    else
        lru_push_back(&c->lru, &e->lru);
    c->st.bytes += bytes;
    c->st.entries++;
    maybe_grow(c);
    return e;
}

/* Evicts least recently used entries until the total fits; deletes their files. */
static void trim(diskcache *c)
{
    while (c->st.bytes > c->st.max_bytes && !lru_empty(&c->lru)) {
        dc_entry *e = LRU_ENTRY(c->lru.back, dc_entry, lru);
        char path[4096];
        entry_path(c, e->hash, path, sizeof(path));
        unlink(path);
        drop(c, e);
        free(e);
        c->st.evictions++;
    }
}

typedef struct scan_item {
    uint64_t hash;
    size_t bytes;
    struct timespec mtime;
} scan_item;

static int newest_first(const void *a, const void *b)
{
    const scan_item *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 1;
    return 0;
}

/* Whether the temporary file `name` (HASH.PID.N.tmp, written by diskcache_put) may be
 * removed: its writer, a process of this machine, is gone.  A writer still running (another
 * server or a worker configured with the same cache.disk_dir) keeps its file, which it
 * renames or unlinks itself; a name without a process id is an old or foreign leftover. */
static int tmp_abandoned(const char *name)
{
    const char *dot = strchr(name, '.');
    if (!dot)
        return 1;
    char *end;
    errno = 0;
    long pid = strtol(dot + 1, &end, 10);
    if (errno || end == dot + 1 || *end != '.' || pid <= 0 || pid == (long)getpid())
        return 1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Indexes the files an earlier run left, newest first, and removes the temporary files of
 * writes that were interrupted. */
static int scan(diskcache *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return TESS_EIO;
    scan_item *items = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        snprintf(path, sizeof(path), "%s/%s", c->dir, name);
        if (len > 4 && strcmp(name + len - 4, ".tmp") == 0) {
            if (tmp_abandoned(name))
                unlink(path);
            continue;
        }
        if (len != 21 || strcmp(name + 16, ".tile") != 0)
            continue;
        char *end;
        unsigned long long h = strtoull(name, &end, 16);
        struct stat st;
        if (end != name + 16 || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            scan_item *ni = realloc(items, ncap * sizeof(*ni));
            if (!ni) {
                unlink(path);   /* out of memory: an entry not indexed is not kept */
                continue;
            }
            items = ni;
            cap = ncap;
        }
        items[n].hash = h;
        items[n].bytes = (size_t)st.st_size;
        items[n].mtime = st.st_mtim;
        n++;
    }
    closedir(d);
    if (n > 1)   /* qsort(NULL, 0, ...) is undefined behaviour (UBSan) */
        qsort(items, n, sizeof(*items), newest_first);
    for (size_t i = 0; i < n; i++)
        if (!find(c, items[i].hash) && !add(c, items[i].hash, items[i].bytes, 0)) {
            entry_path(c, items[i].hash, path, sizeof(path));
            unlink(path);
        }
    free(items);
    trim(c);
    return 0;
}

diskcache *diskcache_open(const char *dir, size_t max_bytes, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        tess_seterr(err, errlen, "cache.disk_dir '%s': %s", dir, strerror(errno));
        return NULL;
    }
    diskcache *c = calloc(1, sizeof(*c));
    if (!c) {
        tess_seterr(err, errlen, "out of memory");
        return NULL;
    }
    c->dir = strdup(dir);
    c->nbuckets = 256;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    c->st.max_bytes = max_bytes;
    if (!c->dir || !c->buckets) {
        diskcache_close(c);
        tess_seterr(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    if (scan(c) != 0) {
        tess_seterr(err, errlen, "cache.disk_dir '%s' cannot be read", dir);
        diskcache_close(c);
        return NULL;
    }
    return c;
}

void diskcache_close(diskcache *c)
{
    if (!c)
        return;
    for (lru_node *n = c->lru.front, *next; n; n = next) {
        next = n->next;
        free(LRU_ENTRY(n, dc_entry, lru));
    }
    if (c->buckets)
        pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    free(c->dir);
    free(c);
}

/* Reads and checks the file of `key`; NULL when it is missing, damaged or another key's. */
static tile *read_tile(const char *path, const char *key)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    unsigned char hdr[DC_HEADER];
    tile *t = NULL;
    char *k = NULL;
    unsigned char *body = NULL;
    if (tess_read_all(fd, hdr, sizeof(hdr)) != 0 || memcmp(hdr, DC_MAGIC, 8) != 0)
        goto done;
    uint32_t klen, clen;
    uint64_t blen;
    memcpy(&klen, hdr + 8, 4);
    memcpy(&clen, hdr + 12, 4);
    memcpy(&blen, hdr + 16, 8);
    char etag[41];
    memcpy(etag, hdr + 24, 40);
    etag[40] = '\0';
    char ctype[128];
    struct stat st;
    if (klen != strlen(key) || klen > DC_MAX_KEY || clen >= sizeof(ctype) || fstat(fd, &st) != 0 ||
        (uint64_t)st.st_size != DC_HEADER + (uint64_t)klen + clen + blen)
        goto done;
    k = malloc((size_t)klen + 1);
    body = malloc(blen ? (size_t)blen : 1);
    if (!k || !body || tess_read_all(fd, k, klen) != 0 || memcmp(k, key, klen) != 0 ||
        tess_read_all(fd, ctype, clen) != 0 || tess_read_all(fd, body, (size_t)blen) != 0)
        goto done;
    ctype[clen] = '\0';
    t = tile_new_take(body, (size_t)blen, ctype);
    body = NULL;
    /* The ETag is a hash of the body: recomputed by tile_new_take, it must match. */
    if (t && strcmp(t->etag, etag) != 0) {
        tile_release(t);
        t = NULL;
    }
done:
    free(k);
    free(body);
    close(fd);
    return t;
}

tile *diskcache_get(diskcache *c, const char *key)
{
    uint64_t h = key_hash(key);
    pthread_mutex_lock(&c->lock);
    dc_entry *e = find(c, h);
    if (e) {
        lru_move_front(&c->lru, &e->lru);
    }
    pthread_mutex_unlock(&c->lock);
    char path[4096];
    entry_path(c, h, path, sizeof(path));
    tile *t = e ? read_tile(path, key) : NULL;
    pthread_mutex_lock(&c->lock);
    if (t) {
        c->st.hits++;
    } else {
        c->st.misses++;
        /* An entry whose file is gone is forgotten; a damaged file (or another key's
         * under the same hash) stays until it is overwritten or evicted. */
        e = find(c, h);
        if (e && access(path, F_OK) != 0) {
            drop(c, e);
            free(e);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return t;
}

int diskcache_put(diskcache *c, const char *key, const tile *t)
{
    size_t klen = strlen(key), clen = strlen(t->content_type);
    size_t total = DC_HEADER + klen + clen + t->len;
    if (total > c->st.max_bytes || klen > DC_MAX_KEY)
        return TESS_ERANGE;
    uint64_t h = key_hash(key);
    char path[4096], tmp[4200];
    entry_path(c, h, path, sizeof(path));
    pthread_mutex_lock(&c->lock);
    unsigned long n = ++c->tmp_counter;
    pthread_mutex_unlock(&c->lock);
    snprintf(tmp, sizeof(tmp), "%s/%016llx.%ld.%lu.tmp", c->dir, (unsigned long long)h,
             (long)getpid(), n);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return TESS_EIO;
    unsigned char hdr[DC_HEADER];
    memset(hdr, 0, sizeof(hdr));
    memcpy(hdr, DC_MAGIC, 8);
    uint32_t k32 = (uint32_t)klen, c32 = (uint32_t)clen;
    uint64_t b64 = t->len;
    memcpy(hdr + 8, &k32, 4);
    memcpy(hdr + 12, &c32, 4);
    memcpy(hdr + 16, &b64, 8);
    memcpy(hdr + 24, t->etag, strnlen(t->etag, 40));
    int bad = tess_write_all(fd, hdr, sizeof(hdr)) || tess_write_all(fd, key, klen) ||
              tess_write_all(fd, t->content_type, clen) || tess_write_all(fd, t->data, t->len);
    if (close(fd) != 0)
        bad = 1;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return TESS_EIO;
    }
    pthread_mutex_lock(&c->lock);
    dc_entry *e = find(c, h);
    if (e) {
        c->st.bytes -= e->bytes;
        e->bytes = total;
        c->st.bytes += total;
        lru_move_front(&c->lru, &e->lru);
    } else if (!add(c, h, total, 1)) {
        /* Out of memory for the index entry: a file the index does not count would
         * escape the budget, so it goes. */
        unlink(path);
        pthread_mutex_unlock(&c->lock);
        return TESS_ENOMEM;
    }
    c->st.writes++;
    trim(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

void diskcache_get_stats(diskcache *c, diskcache_stats *s)
{
    pthread_mutex_lock(&c->lock);
    *s = c->st;
    pthread_mutex_unlock(&c->lock);
}
