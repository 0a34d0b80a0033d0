/* Daemon configuration: JSON (jansson) with strict keys, demo defaults, listen address. */
#include "daemon/config.h"
#include "daemon/collection/collection.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int config_init(tess_config *c)
{
    memset(c, 0, sizeof(*c));
    c->listen_addr = strdup("127.0.0.1");
    if (!c->listen_addr)
        return TESS_ENOMEM;
    c->port = 8080;
    c->threads = 0;
    c->cache_memory_mb = 256;
    c->planes_memory_mb = 1024;
    c->max_output_pixels = 16777216;
    c->max_body_mb = 64;
    c->max_bodies_mb = 256;
    c->max_decoded_mb = DECODELIMIT_DEFAULT_MB;
    c->max_input_pixels = (long long)DECODELIMIT_DEFAULT_PIXELS;
    c->max_queued_jobs = 64;
    c->jobs_memory_mb = 4096;
    c->jobs_max_product_mb = 8192;
    c->jobs_disk_mb = 65536;
    c->jobs_lease_s = 10.0;
    c->jobs_database_timeout_s = 5.0;
    c->max_queue = 256;
    c->max_connections = 256;
    c->connection_timeout_s = 30;
    c->max_connections_per_address = 128;
    c->header_timeout_s = 10;
    c->shutdown_grace_s = 10;
    c->collections_rescan_s = 5.0;
    c->error_log = strdup("-");
    if (!c->error_log)
        return TESS_ENOMEM;
    return 0;
}

int config_warnings(const tess_config *c, char (*warn)[CONFIG_WARN_LEN], int max)
{
    int n = 0;
    int per = c->max_connections_per_address;
    if (per < CONFIG_CLIENT_CONNECTIONS) {
        if (n < max)
            snprintf(warn[n], CONFIG_WARN_LEN, "limits.max_connections_per_address = %d is "
                     "under %d: fsspec's HTTP store (aiohttp, so zarr and dask) opens up to "
                     "%d connections at once, and zarr-python 2 reads a chunk refused with "
                     "503 as its fill_value, without an error", per, CONFIG_CLIENT_CONNECTIONS,
                     CONFIG_CLIENT_CONNECTIONS);
        n++;
    }
    if (per > c->max_connections) {
        if (n < max)
            snprintf(warn[n], CONFIG_WARN_LEN, "limits.max_connections_per_address = %d is "
                     "over limits.max_connections = %d: it can never be reached (the server "
                     "refuses past limits.max_connections first)", per, c->max_connections);
        n++;
    }
    return n;
}

void config_release(tess_config *c)
{
    free(c->listen_addr);
    for (int i = 0; i < c->n_roots; i++)
        free(c->data_roots[i]);
    free(c->data_roots);
    free(c->cache_disk_dir);
    free(c->jobs_dir);
    free(c->jobs_database);
    free(c->jobs_token);
    free(c->access_log);
    free(c->error_log);
    free(c->viewer_dir);
    free(c->viewer_node_modules);
    for (int i = 0; i < c->n_datasets; i++) {
        free(c->datasets[i].name);
        free(c->datasets[i].path);
        free(c->datasets[i].frames);
    }
    free(c->datasets);
    colconfig_release(c);
    memset(c, 0, sizeof(*c));
}

/* Adds a data root, canonicalised with realpath(3); it must be an existing directory. */
static int add_root(tess_config *c, const char *dir, const char *base, char *err, size_t errlen)
{
    char joined[PATH_MAX];
    if (base && dir[0] != '/') {
        int n = snprintf(joined, sizeof(joined), "%s/%s", base, dir);
        if (n < 0 || (size_t)n >= sizeof(joined)) {
            tess_seterr(err, errlen, "data root '%s' is too long", dir);
            return TESS_EINVAL;
        }
        dir = joined;
    }
    char *real = realpath(dir, NULL);
    struct stat st;
    if (!real || stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
        tess_seterr(err, errlen, "data root '%s' is not a readable directory", dir);
        free(real);
        return TESS_EIO;
    }
    char **r = realloc(c->data_roots, (size_t)(c->n_roots + 1) * sizeof(*r));
    if (!r) {
        free(real);
        return TESS_ENOMEM;
    }
    c->data_roots = r;
    c->data_roots[c->n_roots++] = real;
    return 0;
}

/* Dataset names appear in URLs: letters, digits, '_', '-', '.', 1..64 characters, not
 * starting with '.'.  '~' is reserved for IIIF plane identifiers. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
    return 1;
}

static int add_dataset(tess_config *c, const char *name, const char *path, int hdu,
                       const char *frames, char *err, size_t errlen)
{
    if (!valid_name(name)) {
        tess_seterr(err, errlen, "datasets: name '%s' must be 1-64 characters of [A-Za-z0-9_.-]",
                    name);
        return TESS_EINVAL;
    }
    for (int i = 0; i < c->n_datasets; i++)
        if (strcmp(c->datasets[i].name, name) == 0) {
            tess_seterr(err, errlen, "datasets: name '%s' appears twice", name);
            return TESS_EINVAL;
        }
    ds_config *d = realloc(c->datasets, (size_t)(c->n_datasets + 1) * sizeof(*d));
    if (!d)
        return TESS_ENOMEM;
    c->datasets = d;
    ds_config *n = &c->datasets[c->n_datasets];
    memset(n, 0, sizeof(*n));
    n->name = strdup(name);
    n->path = path ? strdup(path) : NULL;
    n->frames = frames ? strdup(frames) : NULL;
    n->hdu = hdu;
    if (!n->name || (path && !n->path) || (frames && !n->frames)) {
        free(n->name);
        free(n->path);
        free(n->frames);
        return TESS_ENOMEM;
    }
    c->n_datasets++;
    return 0;
}

/* Reads an integer member in [lo, hi]; absent leaves *out unchanged. */
static int get_int(json_t *obj, const char *key, const char *where, long long lo, long long hi,
                   long long *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v)) {
        tess_seterr(err, errlen, "%s%s must be an integer", where, key);
        return TESS_EINVAL;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        tess_seterr(err, errlen, "%s%s must be between %lld and %lld", where, key, lo, hi);
        return TESS_EINVAL;
    }
    *out = x;
    return 0;
}

/* Reads a string (or null) member; absent leaves *out unchanged. */
static int get_str(json_t *obj, const char *key, const char *where, char **out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (json_is_null(v)) {
        free(*out);
        *out = NULL;
        return 0;
    }
    if (!json_is_string(v)) {
        tess_seterr(err, errlen, "%s%s must be a string or null", where, key);
        return TESS_EINVAL;
    }
    char *s = strdup(json_string_value(v));
    if (!s)
        return TESS_ENOMEM;
    free(*out);
    *out = s;
    return 0;
}

/* jobs.token, when a string: a secret of JOBS_TOKEN_MIN or more visible ASCII characters
 * (0x21-0x7e: what an Authorization header carries unchanged).  An empty one would read as
 * "no authentication"; a short one is guessed.  null or absent: no token, the job
 * endpoints are open (as documented). */
/* The rest frequency of the 13CO J=1-0 line (CDMS: 110201.3543 MHz). */
#define REST_13CO_1_0_HZ 110201354300.0

#define JOBS_TOKEN_MIN 16
static int check_jobs_token(const json_t *v, char *err, size_t errlen)
{
    if (!json_is_string(v))
        return 0;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v), visible = 0;
    int bad = strlen(s) != n;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        bad |= ch < 0x21 || ch > 0x7e;
        visible += ch > 0x20 && ch < 0x7f;
    }
    if (visible == 0) {
        tess_seterr(err, errlen, "jobs.token is empty: give a secret of at least %d characters, "
                    "or null for job endpoints without authentication", JOBS_TOKEN_MIN);
        return TESS_EINVAL;
    }
    if (bad) {
        tess_seterr(err, errlen, "jobs.token may hold only visible ASCII characters (no spaces, "
                    "control or non-ASCII characters)");
        return TESS_EINVAL;
    }
    if (n < JOBS_TOKEN_MIN) {
        tess_seterr(err, errlen, "jobs.token has %zu characters: at least %d are needed", n,
                    JOBS_TOKEN_MIN);
        return TESS_EINVAL;
    }
    return 0;
}

/* Fails on any member of `obj` not in the NULL-terminated list `known`. */
static int check_keys(json_t *obj, const char *where, const char *const *known, char *err,
                      size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            if (strcmp(key, known[i]) == 0)
                ok = 1;
        if (!ok) {
            tess_seterr(err, errlen, "unknown configuration key '%s%s'", where, key);
            return TESS_EINVAL;
        }
    }
    return 0;
}

/* Makes a relative path *p relative to the configuration file's directory `base`. */
static int relative_to(const char *base, char **p)
{
    if (!*p || (*p)[0] == '/' || !base)
        return 0;
    size_t n = strlen(base) + strlen(*p) + 2;
    char *joined = malloc(n);
    if (!joined)
        return TESS_ENOMEM;
    snprintf(joined, n, "%s/%s", base, *p);
    free(*p);
    *p = joined;
    return 0;
}

static int load_json(json_t *root, tess_config *c, const char *base, char *err, size_t errlen)
{
    static const char *const top_keys[] = {"listen", "threads", "data_roots", "cache", "limits",
                                           "jobs", "datasets", "access_log", "error_log",
                                           "viewer", "collections_rescan_s", NULL};
    static const char *const cache_keys[] = {"memory_mb", "planes_mb", "disk_dir", "disk_mb",
                                             NULL};
    static const char *const limit_keys[] = {"max_output_pixels", "max_body_mb", "max_bodies_mb",
                                             "max_queued_jobs", "max_queue", "max_connections",
                                             "max_connections_per_address",
                                             "connection_timeout_s", "header_timeout_s",
                                             "max_decoded_mb", "max_input_pixels",
                                             "shutdown_grace_s", NULL};
    static const char *const job_keys[] = {"dir", "token", "memory_mb", "max_product_mb",
                                           "disk_mb", "database", "lease_s",
                                           "database_timeout_s", NULL};
    static const char *const ds_keys[] = {"name", "path", "hdu", "frames", "hips_frame",
                                          "rest_frequency", NULL};
    static const char *const viewer_keys[] = {"dir", "node_modules", NULL};
    int rc;
    long long v;

    if (!json_is_object(root)) {
        tess_seterr(err, errlen, "configuration must be a JSON object");
        return TESS_EINVAL;
    }
    if ((rc = check_keys(root, "", top_keys, err, errlen)))
        return rc;
    json_t *listen = json_object_get(root, "listen");
    if (listen) {
        if (!json_is_string(listen)) {
            tess_seterr(err, errlen, "listen must be a string \"ADDR:PORT\"");
            return TESS_EINVAL;
        }
        if ((rc = config_set_listen(c, json_string_value(listen), err, errlen)))
            return rc;
    }
    v = c->threads;
    if ((rc = get_int(root, "threads", "", 0, 1024, &v, err, errlen)))
        return rc;
    c->threads = (int)v;
    v = (long long)c->collections_rescan_s;
    if ((rc = get_int(root, "collections_rescan_s", "", 0, 3600, &v, err, errlen)))
        return rc;
    c->collections_rescan_s = (double)v;

    json_t *roots = json_object_get(root, "data_roots");
    if (roots) {
        if (!json_is_array(roots) || json_array_size(roots) == 0) {
            tess_seterr(err, errlen, "data_roots must be a non-empty array of directories");
            return TESS_EINVAL;
        }
        size_t i;
        json_t *r;
        json_array_foreach(roots, i, r) {
            if (!json_is_string(r)) {
                tess_seterr(err, errlen, "data_roots[%zu] must be a string", i);
                return TESS_EINVAL;
            }
            if ((rc = add_root(c, json_string_value(r), base, err, errlen)))
                return rc;
        }
    }

    json_t *cache = json_object_get(root, "cache");
    if (cache) {
        if (!json_is_object(cache)) {
            tess_seterr(err, errlen, "cache must be an object");
            return TESS_EINVAL;
        }
        if ((rc = check_keys(cache, "cache.", cache_keys, err, errlen)))
            return rc;
        v = (long long)c->cache_memory_mb;
        if ((rc = get_int(cache, "memory_mb", "cache.", 0, 1 << 20, &v, err, errlen)))
            return rc;
        c->cache_memory_mb = (size_t)v;
        v = (long long)c->planes_memory_mb;
        if ((rc = get_int(cache, "planes_mb", "cache.", 1, 1 << 24, &v, err, errlen)))
            return rc;
        c->planes_memory_mb = (size_t)v;
        v = (long long)c->cache_disk_mb;
        if ((rc = get_int(cache, "disk_mb", "cache.", 0, 1 << 24, &v, err, errlen)))
            return rc;
        c->cache_disk_mb = (size_t)v;
        if ((rc = get_str(cache, "disk_dir", "cache.", &c->cache_disk_dir, err, errlen)))
            return rc;
    }

    json_t *limits = json_object_get(root, "limits");
    if (limits) {
        if (!json_is_object(limits)) {
            tess_seterr(err, errlen, "limits must be an object");
            return TESS_EINVAL;
        }
        if ((rc = check_keys(limits, "limits.", limit_keys, err, errlen)))
            return rc;
        v = c->max_output_pixels;
        if ((rc = get_int(limits, "max_output_pixels", "limits.", 1, 1LL << 34, &v, err, errlen)))
            return rc;
        c->max_output_pixels = v;
        v = (long long)c->max_body_mb;
        if ((rc = get_int(limits, "max_body_mb", "limits.", 1, 4096, &v, err, errlen)))
            return rc;
        c->max_body_mb = (size_t)v;
        v = c->max_queued_jobs;
        if ((rc = get_int(limits, "max_queued_jobs", "limits.", 1, 1 << 20, &v, err, errlen)))
            return rc;
        c->max_queued_jobs = (int)v;
        v = (long long)c->max_queue;
        if ((rc = get_int(limits, "max_queue", "limits.", 1, 1 << 20, &v, err, errlen)))
            return rc;
        c->max_queue = (size_t)v;
        v = c->max_connections;
        if ((rc = get_int(limits, "max_connections", "limits.", 1, 1 << 16, &v, err, errlen)))
            return rc;
        c->max_connections = (int)v;
        v = c->connection_timeout_s;
        if ((rc = get_int(limits, "connection_timeout_s", "limits.", 1, 3600, &v, err, errlen)))
            return rc;
        c->connection_timeout_s = (int)v;
        v = c->max_connections_per_address;
        if ((rc = get_int(limits, "max_connections_per_address", "limits.", 1, 1 << 16, &v, err,
                          errlen)))
            return rc;
        c->max_connections_per_address = (int)v;
        v = c->header_timeout_s;
        if ((rc = get_int(limits, "header_timeout_s", "limits.", 1, 3600, &v, err, errlen)))
            return rc;
        c->header_timeout_s = (int)v;
        /* One body of max_body_mb must fit in the budget of all bodies: by default the
         * budget grows to it, a smaller one given is an error. */
        if (json_object_get(limits, "max_bodies_mb")) {
            v = (long long)c->max_bodies_mb;
            if ((rc = get_int(limits, "max_bodies_mb", "limits.", 1, 1 << 20, &v, err, errlen)))
                return rc;
            if ((size_t)v < c->max_body_mb) {
                tess_seterr(err, errlen, "limits.max_bodies_mb (%lld) must be at least "
                            "limits.max_body_mb (%zu)", v, c->max_body_mb);
                return TESS_EINVAL;
            }
            c->max_bodies_mb = (size_t)v;
        } else if (c->max_bodies_mb < c->max_body_mb) {
            c->max_bodies_mb = c->max_body_mb;
        }
        v = (long long)c->max_decoded_mb;
        if ((rc = get_int(limits, "max_decoded_mb", "limits.", 1, 1 << 24, &v, err, errlen)))
            return rc;
        c->max_decoded_mb = (size_t)v;
        v = c->max_input_pixels;
        if ((rc = get_int(limits, "max_input_pixels", "limits.", 1, 1LL << 40, &v, err, errlen)))
            return rc;
        c->max_input_pixels = v;
        v = c->shutdown_grace_s;
        if ((rc = get_int(limits, "shutdown_grace_s", "limits.", 0, 3600, &v, err, errlen)))
            return rc;
        c->shutdown_grace_s = (int)v;
    }
    if ((rc = get_str(root, "access_log", "", &c->access_log, err, errlen)) ||
        (rc = get_str(root, "error_log", "", &c->error_log, err, errlen)))
        return rc;
    if (c->error_log && strcmp(c->error_log, "none") == 0) {
        free(c->error_log);
        c->error_log = NULL;
    }
    if (c->access_log && strcmp(c->access_log, "none") == 0) {
        free(c->access_log);
        c->access_log = NULL;
    }

    json_t *jobs = json_object_get(root, "jobs");
    if (jobs) {
        if (!json_is_object(jobs)) {
            tess_seterr(err, errlen, "jobs must be an object");
            return TESS_EINVAL;
        }
        if ((rc = check_keys(jobs, "jobs.", job_keys, err, errlen)))
            return rc;
        if ((rc = get_str(jobs, "dir", "jobs.", &c->jobs_dir, err, errlen)) ||
            (rc = get_str(jobs, "token", "jobs.", &c->jobs_token, err, errlen)) ||
            (rc = get_str(jobs, "database", "jobs.", &c->jobs_database, err, errlen)) ||
            (rc = check_jobs_token(json_object_get(jobs, "token"), err, errlen)))
            return rc;
        v = (long long)c->jobs_memory_mb;
        if ((rc = get_int(jobs, "memory_mb", "jobs.", 16, 1 << 24, &v, err, errlen)))
            return rc;
        c->jobs_memory_mb = (size_t)v;
        v = (long long)c->jobs_max_product_mb;
        if ((rc = get_int(jobs, "max_product_mb", "jobs.", 1, 1 << 24, &v, err, errlen)))
            return rc;
        c->jobs_max_product_mb = (size_t)v;
        v = (long long)c->jobs_disk_mb;
        if ((rc = get_int(jobs, "disk_mb", "jobs.", 0, 1 << 30, &v, err, errlen)))
            return rc;
        c->jobs_disk_mb = (size_t)v;
        v = (long long)c->jobs_lease_s;
        if ((rc = get_int(jobs, "lease_s", "jobs.", 1, 3600, &v, err, errlen)))
            return rc;
        c->jobs_lease_s = (double)v;
        v = (long long)c->jobs_database_timeout_s;
        if ((rc = get_int(jobs, "database_timeout_s", "jobs.", 1, 600, &v, err, errlen)))
            return rc;
        c->jobs_database_timeout_s = (double)v;
        /* "" would be libpq's defaults (a local socket, the user's name): never meant. */
        if (c->jobs_database && !c->jobs_database[strspn(c->jobs_database, " \t\r\n")]) {
            tess_seterr(err, errlen, "jobs.database must not be empty: give a PostgreSQL "
                        "connection URI (postgresql:///tessera?host=/run/postgresql), or null "
                        "to keep the jobs in jobs.dir");
            return TESS_EINVAL;
        }
        /* Like data_roots, a relative jobs.dir is relative to the configuration file. */
        if (c->jobs_dir && c->jobs_dir[0] != '/' && base) {
            size_t n = strlen(base) + strlen(c->jobs_dir) + 2;
            char *joined = malloc(n);
            if (!joined)
                return TESS_ENOMEM;
            snprintf(joined, n, "%s/%s", base, c->jobs_dir);
            free(c->jobs_dir);
            c->jobs_dir = joined;
        }
    }

    json_t *viewer = json_object_get(root, "viewer");
    if (viewer) {
        if (!json_is_object(viewer)) {
            tess_seterr(err, errlen, "viewer must be an object");
            return TESS_EINVAL;
        }
        if ((rc = check_keys(viewer, "viewer.", viewer_keys, err, errlen)) ||
            (rc = get_str(viewer, "dir", "viewer.", &c->viewer_dir, err, errlen)) ||
            (rc = get_str(viewer, "node_modules", "viewer.", &c->viewer_node_modules, err,
                          errlen)) ||
            (rc = relative_to(base, &c->viewer_dir)) ||
            (rc = relative_to(base, &c->viewer_node_modules)))
            return rc;
    }

    json_t *ds = json_object_get(root, "datasets");
    if (ds) {
        if (!json_is_array(ds)) {
            tess_seterr(err, errlen, "datasets must be an array");
            return TESS_EINVAL;
        }
        if (c->n_roots == 0) {
            tess_seterr(err, errlen, "datasets need data_roots");
            return TESS_EINVAL;
        }
        size_t i;
        json_t *d;
        json_array_foreach(ds, i, d) {
            char where[48];
            snprintf(where, sizeof(where), "datasets[%zu].", i);
            if (!json_is_object(d)) {
                tess_seterr(err, errlen, "datasets[%zu] must be an object", i);
                return TESS_EINVAL;
            }
            if (json_object_get(d, "kind")) {   /* a collection: daemon/collection/ */
                if ((rc = colconfig_parse(d, where, c, err, errlen)))
                    return rc;
                continue;
            }
            if ((rc = check_keys(d, where, ds_keys, err, errlen)))
                return rc;
            json_t *name = json_object_get(d, "name");
            json_t *path = json_object_get(d, "path");
            json_t *frames = json_object_get(d, "frames");
            if (!json_is_string(name)) {
                tess_seterr(err, errlen, "%sname must be a string", where);
                return TESS_EINVAL;
            }
            if ((path && !json_is_string(path)) || (frames && !json_is_string(frames)) ||
                (!path == !frames)) {
                tess_seterr(err, errlen,
                            "%s needs exactly one of \"path\" or \"frames\" (a string)", where);
                return TESS_EINVAL;
            }
            long long hdu = 0;
            if ((rc = get_int(d, "hdu", where, 0, 1000, &hdu, err, errlen)))
                return rc;
            json_t *hf = json_object_get(d, "hips_frame");
            int galactic = 0;
            if (hf) {
                const char *fr = json_is_string(hf) ? json_string_value(hf) : "";
                if (strcmp(fr, "galactic") == 0)
                    galactic = 1;
                else if (strcmp(fr, "equatorial") != 0) {
                    tess_seterr(err, errlen,
                                "%ships_frame must be \"equatorial\" or \"galactic\"", where);
                    return TESS_EINVAL;
                }
            }
            json_t *rf = json_object_get(d, "rest_frequency");
            double rest = 0.0;
            if (rf && (!json_is_number(rf) || !(json_number_value(rf) > 0.0) ||
                       !isfinite(json_number_value(rf)))) {
                tess_seterr(err, errlen, "%srest_frequency must be a frequency in Hz above 0",
                            where);
                return TESS_EINVAL;
            }
            if (rf)
                rest = json_number_value(rf);
            if ((rc = add_dataset(c, json_string_value(name),
                                  path ? json_string_value(path) : NULL, (int)hdu,
                                  frames ? json_string_value(frames) : NULL, err, errlen)))
                return rc;
            c->datasets[c->n_datasets - 1].hips_galactic = galactic;
            c->datasets[c->n_datasets - 1].rest_frequency = rest;
        }
    }
    return 0;
}

int config_load_text(const char *text, tess_config *c, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        tess_seterr(err, errlen, "configuration is not valid JSON: %s (line %d, column %d)",
                    je.text, je.line, je.column);
        config_release(c);
        return TESS_EINVAL;
    }
    int rc = load_json(root, c, NULL, err, errlen);
    json_decref(root);
    if (rc)
        config_release(c);
    return rc;
}

int config_load_file(const char *path, tess_config *c, char *err, size_t errlen)
{
    json_error_t je;
    /* A FIFO or a device named as the configuration is refused, not waited on. */
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0) {
        config_release(c);
        return fd;
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    if (!root) {
        tess_seterr(err, errlen, "%s: %s (line %d, column %d)", path, je.text, je.line, je.column);
        config_release(c);
        return TESS_EINVAL;
    }
    /* Relative data roots are relative to the directory of the configuration file. */
    char *copy = strdup(path);
    if (!copy) {
        json_decref(root);
        config_release(c);
        return TESS_ENOMEM;
    }
    char *slash = strrchr(copy, '/');
    const char *base = ".";
    if (slash) {
        *slash = '\0';
        base = copy[0] ? copy : "/";
    }
    int rc = load_json(root, c, base, err, errlen);
    free(copy);
    json_decref(root);
    if (rc)
        config_release(c);
    return rc;
}

int config_load_demo(tess_config *c, const char *demo_dir, char *err, size_t errlen)
{
    if (!demo_dir)
        demo_dir = getenv("TESSERA_DEMO_DIR");
    if (!demo_dir || !*demo_dir)
        demo_dir = TESSERA_PKGDATADIR "/demo";
    int rc = add_root(c, demo_dir, NULL, err, errlen);
    if (rc)
        return rc;
    /* l1448_13co is the 13CO J=1-0 line, whose rest frequency its header does not give. */
    static const struct { const char *name, *path, *frames; int galactic; double rest; } demo[] = {
        {"horsehead", "HorseHead.fits", NULL, 0, 0.0},
        {"gc_2mass_k", "gc_2mass_k.fits", NULL, 0, 0.0},
        {"gc_msx_e", "gc_msx_e.fits", NULL, 1, 0.0},
        {"allsky_rosat", "allsky_rosat.fits", NULL, 1, 0.0},
        {"l1448_13co", "l1448_13co.fits", NULL, 0, REST_13CO_1_0_HZ},
        {"m13", NULL, "M13_blue_*.fits", 0, 0.0},
    };
    for (size_t i = 0; i < sizeof(demo) / sizeof(demo[0]); i++) {
        if ((rc = add_dataset(c, demo[i].name, demo[i].path, 0, demo[i].frames, err, errlen)))
            return rc;
        c->datasets[c->n_datasets - 1].hips_galactic = demo[i].galactic;
        c->datasets[c->n_datasets - 1].rest_frequency = demo[i].rest;
    }
    return 0;
}

int config_set_listen(tess_config *c, const char *s, char *err, size_t errlen)
{
    const char *colon;
    char addr[64];
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof(addr)) {
            tess_seterr(err, errlen, "listen address '%s' must be [IPV6]:PORT", s);
            return TESS_EINVAL;
        }
        memcpy(addr, s + 1, (size_t)(close - s - 1));
        addr[close - s - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof(addr)) {
            tess_seterr(err, errlen, "listen address '%s' must be ADDR:PORT", s);
            return TESS_EINVAL;
        }
        memcpy(addr, s, (size_t)(colon - s));
        addr[colon - s] = '\0';
    }
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535) {
        tess_seterr(err, errlen, "listen port in '%s' must be 0..65535", s);
        return TESS_EINVAL;
    }
    char *a = strdup(addr[0] ? addr : "0.0.0.0");
    if (!a)
        return TESS_ENOMEM;
    free(c->listen_addr);
    c->listen_addr = a;
    c->port = (int)port;
    return 0;
}
