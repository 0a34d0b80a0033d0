/* Order-0 HiPS tiles as doubles, rendered once and shared by the order-0 tiles and the Allsky picture.
 *
 * The browser's first all-sky view asks for the order-0 tiles and Norder3/Allsky at once;
 * the Allsky's cells of order 9 are the pixels of those same tiles, so each is rendered
 * once (the costly part: some 260 000 exact WCS transforms) and both are encoded from it. */
#include "daemon/api/hipsbase.h"
#include "engine/base/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys being rendered now, process-wide: a second caller of one waits on `done`. */
typedef struct pending {
    char *key;
    struct pending *next;
} pending;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static pending *rendering;

static int is_pending(const char *key)
{
    for (pending *p = rendering; p; p = p->next)
        if (strcmp(p->key, key) == 0)
            return 1;
    return 0;
}

static void unpend(const char *key)
{
    for (pending **pp = &rendering; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->key, key) == 0) {
            pending *p = *pp;
            *pp = p->next;
            free(p);
            return;
        }
}

/* The tile of body `t`: its finite count and doubles. */
static long unpack(tile *t, const double **data)
{
    int64_t finite;
    memcpy(&finite, t->data, sizeof(finite));
    *data = (const double *)(void *)(t->data + sizeof(int64_t));
    return (long)finite;
}

/* hipsbase_get when `wait`; else hipsbase_prefetch (then 0 when the tile was cached or
 * being rendered, nothing held). */
static long base_take(tilecache *cache, const char *key, const hips_source *src, int64_t npix,
                      int galactic, int wait, tile **held, const double **data, char *err,
                      size_t errlen)
{
    *held = NULL;
    *data = NULL;
    size_t klen = strlen(key) + 32;
    pending *mine = malloc(sizeof(*mine));
    char *full = malloc(klen);
    if (!mine || !full) {
        free(mine);
        free(full);
        snprintf(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    snprintf(full, klen, "%s|base%lld", key, (long long)npix);
    pthread_mutex_lock(&lock);
    tile *t;
    while (!(t = tilecache_get(cache, full)) && is_pending(full) && wait)
        pthread_cond_wait(&done, &lock);
    if (!t && !wait && is_pending(full)) {
        pthread_mutex_unlock(&lock);
        free(mine);
        free(full);
        return 0;
    }
    if (t) {
        pthread_mutex_unlock(&lock);
        free(mine);
        free(full);
        if (!wait) {
            tile_release(t);
            return 0;
        }
        *held = t;
        return unpack(t, data);
    }
    mine->key = full;
    mine->next = rendering;
    rendering = mine;
    pthread_mutex_unlock(&lock);

    size_t n = (size_t)HIPS_TILE_WIDTH * HIPS_TILE_WIDTH;
    unsigned char *body = malloc(sizeof(int64_t) + n * sizeof(double));
    long finite = TESS_ENOMEM;
    if (body)
        finite = hips_render_tile(src, 0, npix, HIPS_TILE_SHIFT, galactic, HIPS_ROWS_FITS,
                                  (double *)(void *)(body + sizeof(int64_t)), err, errlen);
    else
        snprintf(err, errlen, "out of memory");
    if (finite >= 0) {
        int64_t f = finite;
        memcpy(body, &f, sizeof(f));
        t = tile_new_internal(body, sizeof(int64_t) + n * sizeof(double),
                              "application/octet-stream");
        body = NULL;
        if (t)
            tilecache_put(cache, full, t);
        else {
            snprintf(err, errlen, "out of memory");
            finite = TESS_ENOMEM;
        }
    }
    free(body);
    pthread_mutex_lock(&lock);
    unpend(full);
    pthread_cond_broadcast(&done);
    pthread_mutex_unlock(&lock);
    free(full);
    if (finite < 0)
        return finite;
    if (!wait) {
        tile_release(t);
        return 0;
    }
    *held = t;
    return unpack(t, data);
}

long hipsbase_get(tilecache *cache, const char *key, const hips_source *src, int64_t npix,
                  int galactic, tile **held, const double **data, char *err, size_t errlen)
{
    return base_take(cache, key, src, npix, galactic, 1, held, data, err, errlen);
}

int hipsbase_prefetch(tilecache *cache, const char *key, const hips_source *src, int64_t npix,
                      int galactic, char *err, size_t errlen)
{
    tile *held;
    const double *data;
    long rc = base_take(cache, key, src, npix, galactic, 0, &held, &data, err, errlen);
    return rc < 0 ? (int)rc : 0;
}
