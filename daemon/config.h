/* Daemon configuration: the JSON file of docs/operations.md, command-line overrides, demo
 * defaults. */
#ifndef TESSERA_DAEMON_CONFIG_H
#define TESSERA_DAEMON_CONFIG_H

#include <stddef.h>

/* One configured dataset: either one FITS file (`path`, HDU `hdu`, 0-based) or a stack of
 * 2-D frames (`frames`, a glob pattern).  Relative paths resolve against data_roots[0]. */
typedef struct ds_config {
    char *name;
    char *path;      /* NULL for stacks */
    int hdu;         /* 0-based HDU index, default 0 */
    char *frames;    /* glob pattern, NULL for single files */
    int hips_galactic; /* "hips_frame": "galactic" (1) or "equatorial" (0, the default) */
    double rest_frequency; /* "rest_frequency": Hz, for a cube whose header gives none
                              (RESTFRQ, RESTFREQ, RESTWAV); 0 = none */
} ds_config;

/* One collection (a dataset of "kind": "collection"): the FITS files that `images`, a
 * glob under a data root ("**" any depth), names, indexed by daemon/collection/. */
typedef struct col_config {
    char *name;
    char *images;    /* the glob as configured; relative to data_roots[0] */
    int hdu;         /* 0-based HDU of every member */
    int combine;     /* 0 mean, 1 median, 2 first */
    int match_background;
} col_config;

typedef struct tess_config {
    char *listen_addr;           /* IPv4 or IPv6 literal, default "127.0.0.1" */
    int port;                    /* default 8080; 0 = any free port */
    int threads;                 /* worker threads, 0 = one per core */
    char **data_roots;           /* absolute, canonical (realpath) directories */
    int n_roots;
    size_t cache_memory_mb;      /* cache.memory_mb, default 256 */
    size_t planes_memory_mb;     /* cache.planes_mb: source planes kept in memory, default 1024 */
    char *cache_disk_dir;        /* cache.disk_dir: the disk tier, or NULL */
    size_t cache_disk_mb;        /* cache.disk_mb */
    long long max_output_pixels; /* limits.max_output_pixels, default 16777216 */
    size_t max_body_mb;          /* limits.max_body_mb, default 64 */
    size_t max_bodies_mb;        /* limits.max_bodies_mb: request bodies held at once (all
                                    requests together), default 256 or max_body_mb if more */
    size_t max_decoded_mb;       /* limits.max_decoded_mb: the most one decoded input (a PNG
                                    frame, a compression tile) may take, default 1024 */
    long long max_input_pixels;  /* limits.max_input_pixels: the largest frame or tile
                                    decoded, in pixels, default 2^28 */
    int max_queued_jobs;         /* limits.max_queued_jobs, default 64 */
    size_t max_queue;            /* pool queue length before 503, default 256 */
    int max_connections;         /* simultaneous connections, default 256 */
    int connection_timeout_s;    /* limits.connection_timeout_s: idle connection closed, default 30 */
    int max_connections_per_address; /* limits.max_connections_per_address: connections from
                                    one client address; the requests of more are answered
                                    503 (Retry-After 1, Connection: close); default 128 */
    int header_timeout_s;        /* limits.header_timeout_s: a request line and its headers
                                    must arrive within this, default 10 */
    int shutdown_grace_s;        /* limits.shutdown_grace_s: seconds requests in flight get after
                                    SIGTERM/SIGINT before tesserad exits anyway, default 10 */
    char *access_log;            /* access_log: Combined Log Format file, "-" = stderr, NULL = none */
    char *error_log;             /* error_log: JSON-lines file of 5xx and job failures, "-" = stderr
                                    (the default), NULL after "none" */
    char *jobs_dir;              /* jobs.dir, may be NULL */
    char *jobs_database;         /* jobs.database: PostgreSQL connection URI of a job store
                                    shared by several servers; NULL = SQLite in jobs.dir */
    double jobs_lease_s;         /* jobs.lease_s: lease of a block in a shared store, default 10 */
    double jobs_database_timeout_s; /* jobs.database_timeout_s: bound of one call to the shared
                                    store (its connection, each statement), default 5 */
    char *jobs_token;            /* jobs.token, may be NULL (no authentication); from a file
                                    at least 16 visible ASCII characters, no spaces */
    size_t jobs_memory_mb;       /* jobs.memory_mb: memory of one job's blocks in flight and
                                    its plan, default 4096 */
    size_t jobs_max_product_mb;  /* jobs.max_product_mb: the largest product, default 8192 */
    size_t jobs_disk_mb;         /* jobs.disk_mb: work files and products in jobs.dir with
                                    what accepted jobs will write, default 65536; 0 = no total */
    char *viewer_dir;            /* viewer.dir: the web viewer's files, NULL = $TESSERA_VIEWER_DIR,
                                    else the installed PKGDATADIR/viewer */
    char *viewer_node_modules;   /* viewer.node_modules: the npm packages it loads, NULL =
                                    $TESSERA_NODE_MODULES, else PKGDATADIR/node_modules */
    ds_config *datasets;
    int n_datasets;
    col_config *collections;     /* datasets of kind "collection" (colconfig_parse) */
    int n_collections;
    double collections_rescan_s; /* seconds between rescans of the collections, default 5 */
} tess_config;

/* Fills `c` with the defaults above and no datasets.  Returns 0 or TESS_ENOMEM. */
int config_init(tess_config *c);

/* Reads the JSON configuration at `path` over the defaults.  Relative data_roots are
 * taken relative to the directory that holds the file.  Unknown keys, wrong types
 * and out-of-range values are errors naming the key (`err`).  A path that is not a
 * regular file (a FIFO, a device) is refused (tess_open_regular), never waited on.
 * Returns 0, TESS_EIO, TESS_EINVAL or TESS_ENOMEM; on error `c` is released. */
int config_load_file(const char *path, tess_config *c, char *err, size_t errlen);

/* The same from JSON text. */
int config_load_text(const char *text, tess_config *c, char *err, size_t errlen);

/* The bundled demo: data root `demo_dir` (NULL: $TESSERA_DEMO_DIR, else the installed
 * PKGDATADIR/demo) and the datasets horsehead, gc_2mass_k, gc_msx_e, allsky_rosat, l1448_13co
 * and the stack m13.  Returns 0, TESS_EIO (directory missing) or TESS_ENOMEM. */
int config_load_demo(tess_config *c, const char *demo_dir, char *err, size_t errlen);

/* Parses "ADDR:PORT", "[V6ADDR]:PORT" or ":PORT" into c->listen_addr / c->port.
 * Returns 0 or TESS_EINVAL. */
int config_set_listen(tess_config *c, const char *s, char *err, size_t errlen);

/* Frees everything `c` owns.  Cannot fail. */
void config_release(tess_config *c);

/* Values accepted but doubtful, which tesserad logs at start (one line each, after
 * "tesserad: warning: "), never errors:
 *   limits.max_connections_per_address under CONFIG_CLIENT_CONNECTIONS (100: aiohttp's
 *     connector limit, so fsspec's HTTP store, zarr and dask, open that many at once,
 *     and zarr-python 2 reads a chunk refused with 503 as its fill_value, silently);
 *   limits.max_connections_per_address over limits.max_connections (never reached).
 * Writes at most `max` NUL-terminated lines (no newline) into warn; returns how many
 * there are (which may be more than max).  Cannot fail. */
#define CONFIG_CLIENT_CONNECTIONS 100
#define CONFIG_WARN_LEN 320
int config_warnings(const tess_config *c, char (*warn)[CONFIG_WARN_LEN], int max);

#endif
