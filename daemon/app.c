/* The composition root of tesserad (app.h): the server and the worker are built here. */
#include "daemon/app.h"
#include "daemon/collection/collection.h"
#include "daemon/jobs/jobs.h"
#include "daemon/jobs/jobtypes.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/image/pngframe.h"
#include "engine/image/stack.h"
#include "engine/image/tiffframe.h"

#include <stdio.h>
#include <stdlib.h>

int tess_app_open(const tess_config *cfg, tess_app **out, char *err, size_t errlen)
{
    *out = NULL;
    tess_app *a = calloc(1, sizeof(*a));
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    a->cfg = cfg;
    pthread_mutex_init(&a->pool_lock, NULL);
    /* Dataset paths are resolved and checked against the data roots once, here; later
     * reads refuse a path that has become a link (engine/image/stack.h). */
    frame_set_canonical_only(1);
    /* Every decoder (PNG frames, compression tiles) checks these before it allocates. */
    decodelimit_set((unsigned long long)cfg->max_decoded_mb << 20,
                    (unsigned long long)cfg->max_input_pixels, "limits.max_decoded_mb",
                    "limits.max_input_pixels");
    int rc = catalog_open(cfg, &a->cat, err, errlen);
    if (rc)
        goto fail;
    a->cache = tilecache_new(cfg->cache_memory_mb * 1024 * 1024, 16);
    a->workers = pool_new(cfg->threads, cfg->max_queue);
    a->planes = planestore_new(cfg->planes_memory_mb * 1024 * 1024);
    if (!a->cache || !a->workers || !a->planes) {
        snprintf(err, errlen, "cannot create the cache, the worker pool or the plane store");
        rc = TESS_ENOMEM;
        goto fail;
    }
    if (cfg->cache_disk_dir && cfg->cache_disk_mb > 0) {
        a->disk = diskcache_open(cfg->cache_disk_dir, cfg->cache_disk_mb * 1024 * 1024, err,
                                 errlen);
        if (!a->disk) {
            rc = TESS_EIO;
            goto fail;
        }
    }
    if ((rc = colset_open(cfg, &a->collections, err, errlen)))
        goto fail;
    if (cfg->jobs_dir) {
        jobtypes_register_all();
        if ((rc = jobs_open(cfg->jobs_dir, cfg, a->cat, a->collections, a->workers, &a->jobs, err, errlen)))
            goto fail;
    }
    *out = a;
    return 0;
fail:
    tess_app_close(a);
    return rc;
}

void tess_app_drain(tess_app *a)
{
    if (!a)
        return;
    jobs_close(a->jobs);
    a->jobs = NULL;
    pthread_mutex_lock(&a->pool_lock);
    pool *p = a->workers;
    a->workers = NULL;
    pthread_mutex_unlock(&a->pool_lock);
    pool_free(p);
}

void tess_app_close(tess_app *a)
{
    if (!a)
        return;
    tess_app_drain(a);
    colset_close(a->collections);
    planestore_free(a->planes);
    diskcache_close(a->disk);
    tilecache_free(a->cache);
    catalog_free(a->cat);
    pthread_mutex_destroy(&a->pool_lock);
    free(a);
}

size_t tess_app_queue_depth(tess_app *a)
{
    pthread_mutex_lock(&a->pool_lock);
    size_t depth = a->workers ? pool_queue_depth(a->workers) : 0;
    pthread_mutex_unlock(&a->pool_lock);
    return depth;
}

int tess_app_jobs_reachable(tess_app *a)
{
    return !a->jobs || jobs_database_reachable(a->jobs);
}

void tess_app_metrics(tess_app *a, buf *b)
{
    tilecache_stats cs;
    tilecache_get_stats(a->cache, &cs);
    buf_printf(b, "# HELP tessera_cache_hits_total Answers served from the memory cache.\n"
                  "# TYPE tessera_cache_hits_total counter\ntessera_cache_hits_total %llu\n",
               (unsigned long long)cs.hits);
    buf_printf(b, "# HELP tessera_cache_misses_total Cacheable requests not found in the memory cache.\n"
                  "# TYPE tessera_cache_misses_total counter\ntessera_cache_misses_total %llu\n",
               (unsigned long long)cs.misses);
    buf_printf(b, "# HELP tessera_cache_bytes Bytes held by the memory cache.\n"
                  "# TYPE tessera_cache_bytes gauge\ntessera_cache_bytes %zu\n", cs.bytes);
    if (a->disk) {
        diskcache_stats ds;
        diskcache_get_stats(a->disk, &ds);
        buf_printf(b, "# HELP tessera_disk_cache_hits_total Answers served from the disk cache.\n"
                      "# TYPE tessera_disk_cache_hits_total counter\n"
                      "tessera_disk_cache_hits_total %llu\n"
                      "# HELP tessera_disk_cache_bytes Bytes held by the disk cache.\n"
                      "# TYPE tessera_disk_cache_bytes gauge\ntessera_disk_cache_bytes %zu\n",
                   (unsigned long long)ds.hits, ds.bytes);
    }
    buf_printf(b, "# HELP tessera_frames_decoded_total Decodes of compressed frame files "
                  "(a whole PNG, a region of a TIFF page), by format; an ingested stack "
                  "(the ingest job) is read from its store and adds none.\n"
                  "# TYPE tessera_frames_decoded_total counter\n"
                  "tessera_frames_decoded_total{format=\"png\"} %llu\n"
                  "tessera_frames_decoded_total{format=\"tiff\"} %llu\n",
               pngframe_decodes(), tiffframe_reads());
    buf_printf(b, "# HELP tessera_pool_queue_depth Tasks waiting in the worker pool's queue.\n"
                  "# TYPE tessera_pool_queue_depth gauge\ntessera_pool_queue_depth %zu\n",
               tess_app_queue_depth(a));
    if (a->jobs) {
        static const char *const st[5] = {"queued", "running", "succeeded", "failed", "cancelled"};
        long counts[5];
        jobs_counts(a->jobs, counts);
        buf_adds(b, "# HELP tessera_jobs Jobs by state.\n# TYPE tessera_jobs gauge\n");
        for (int i = 0; i < 5; i++)
            buf_printf(b, "tessera_jobs{state=\"%s\"} %ld\n", st[i], counts[i]);
        char *jm = jobs_metrics_text(a->jobs);
        if (jm)
            buf_adds(b, jm);
        free(jm);
    }
}
