/* GET / and the viewer's static files: /viewer/{path} from the viewer directory and
 * /vendor/{package}/{path} from a fixed list of npm packages under node_modules. */
#include "daemon/api/handlers.h"
#include "daemon/problem.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Where `make install` puts them (Makefile.am). */
#define TESSERA_VIEWER_DIR TESSERA_PKGDATADIR "/viewer"
#define TESSERA_NODE_MODULES_DIR TESSERA_PKGDATADIR "/node_modules"

/* Largest static file served (aladin.js is about 2.4 MB). */
#define VIEWER_MAX_FILE ((off_t)32 * 1024 * 1024)

/* The npm packages the viewer loads, by the name used under /vendor/, and the directory
 * inside node_modules their files are served from.  Nothing else of node_modules is
 * reachable. */
static const struct vendor_pkg {
    const char *name;
    const char *subdir;
} vendor_pkgs[] = {
    {"aladin-lite", "aladin-lite/dist"},
    {"openseadragon", "openseadragon/build/openseadragon"},
    {"uplot", "uplot/dist"},
    {"neuroglancer", "@janelia-flyem/neuroglancer/dist/min"},   /* its prebuilt bundle */
};

/* The extensions served and their Content-Type; any other file is 404. */
static const struct ext_type {
    const char *ext;
    const char *type;
} ext_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".png", "image/png"},
    {".svg", "image/svg+xml"},
    {".ico", "image/x-icon"},
    {".wasm", "application/wasm"},
    {".txt", "text/plain; charset=utf-8"},
};

const char *viewer_dir(const tess_config *cfg)
{
    if (cfg && cfg->viewer_dir)
        return cfg->viewer_dir;
    const char *d = getenv("TESSERA_VIEWER_DIR");
    return d && *d ? d : TESSERA_VIEWER_DIR;
}

const char *viewer_node_modules_dir(const tess_config *cfg)
{
    if (cfg && cfg->viewer_node_modules)
        return cfg->viewer_node_modules;
    const char *d = getenv("TESSERA_NODE_MODULES");
    return d && *d ? d : TESSERA_NODE_MODULES_DIR;
}

const char *viewer_content_type(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    if (!dot)
        return NULL;
    for (size_t i = 0; i < sizeof(ext_types) / sizeof(ext_types[0]); i++)
        if (strcmp(dot, ext_types[i].ext) == 0)
            return ext_types[i].type;
    return NULL;
}

int viewer_path_ok(const char *rel)
{
    if (!rel || !*rel || rel[0] == '/' || strlen(rel) > 200)
        return 0;
    const char *seg = rel;
    for (const char *p = rel;; p++) {
        char ch = *p;
        if (ch == '/' || ch == '\0') {
            size_t n = (size_t)(p - seg);
            /* Empty segments ("a//b", trailing '/') and any segment starting with '.'
             * ("..", ".", hidden files) are refused. */
            if (n == 0 || seg[0] == '.')
                return 0;
            if (ch == '\0')
                return 1;
            seg = p + 1;
            continue;
        }
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
}

/* Reads root/rel into a tile when it is a regular file inside root (after resolving
 * links) with a served extension; `key` receives its cache key.  Returns the tile, or
 * NULL with *status 404 (or 500). */
static tile *read_static(hreq *r, const char *root, const char *rel, int *status,
                         char *key, size_t keylen)
{
    *status = 404;
    const char *ctype = viewer_content_type(rel);
    if (!ctype || !viewer_path_ok(rel))
        return NULL;
    char rootreal[PATH_MAX], joined[PATH_MAX], real[PATH_MAX];
    if (!realpath(root, rootreal))
        return NULL;
    int n = snprintf(joined, sizeof(joined), "%s/%s", rootreal, rel);
    if (n < 0 || (size_t)n >= sizeof(joined) || !realpath(joined, real))
        return NULL;
    size_t rl = strlen(rootreal);
    if (strncmp(real, rootreal, rl) != 0 || real[rl] != '/')
        return NULL;
    struct stat st;
    int fd = tess_open_regular(real, 0, &st, NULL, 0);   /* a FIFO there: 404, no wait */
    if (fd < 0)
        return NULL;
    if (st.st_size > VIEWER_MAX_FILE) {
        close(fd);
        return NULL;
    }
    /* Cached by path, size and mtime, so that an edited file is served fresh. */
    snprintf(key, keylen, "static:%s:%lld:%lld.%09ld", real, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    tile *t = tilecache_get(r->srv->app->cache, key);
    if (t) {
        close(fd);
        return t;
    }
    size_t len = (size_t)st.st_size;
    unsigned char *data = malloc(len ? len : 1);
    int bad = !data || tess_read_all(fd, data, len) != 0;
    close(fd);
    if (bad) {
        free(data);
        *status = 500;
        return NULL;
    }
    t = tile_new_take(data, len, ctype);
    if (!t) {
        *status = 500;
        return NULL;
    }
    tilecache_put(r->srv->app->cache, key, t);
    return t;
}

/* 1 when the Accept-Encoding header `ae` takes gzip: a "gzip" (or "*") coding whose q is
 * not 0; else 0. */
int viewer_accepts_gzip(const char *ae)
{
    if (!ae)
        return 0;
    int star = 0;
    for (const char *p = ae; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ",; ");
        const char *name = p;
        p += n;
        double q = 1.0;
        const char *end = p + strcspn(p, ",");
        const char *qs = strstr(p, "q=");
        if (qs && qs < end)
            q = strtod(qs + 2, NULL);
        p = end;
        if (n == 4 && strncasecmp(name, "gzip", 4) == 0)
            return q > 0.0;
        if (n == 1 && name[0] == '*')
            star = q > 0.0;
    }
    return star;
}

/* 1 for the Content-Types worth compressing (text, JSON, SVG, WebAssembly). */
static int compressible(const char *ctype)
{
    return strncmp(ctype, "text/", 5) == 0 || strcmp(ctype, "application/json") == 0 ||
           strcmp(ctype, "image/svg+xml") == 0 || strcmp(ctype, "application/wasm") == 0;
}

/* The gzip form of `t` (zlib, level 9), kept in the response cache under "gz:" and the
 * key of `t`, so that a file is compressed once; NULL when it cannot be made (the plain
 * file is then served). */
static tile *gzip_tile(hreq *r, const char *key, const tile *t)
{
    size_t klen = strlen(key) + 4;
    char *gzkey = malloc(klen);
    if (!gzkey)
        return NULL;
    snprintf(gzkey, klen, "gz:%s", key);
    tile *z = tilecache_get(r->srv->app->cache, gzkey);
    if (z) {
        free(gzkey);
        return z;
    }
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(gzkey);
        return NULL;
    }
    uLong cap = deflateBound(&zs, (uLong)t->len);
    unsigned char *out = malloc(cap ? cap : 1);
    int ok = 0;
    if (out) {
        zs.next_in = t->data;
        zs.avail_in = (uInt)t->len;
        zs.next_out = out;
        zs.avail_out = (uInt)cap;
        ok = deflate(&zs, Z_FINISH) == Z_STREAM_END;
    }
    size_t len = (size_t)zs.total_out;
    deflateEnd(&zs);
    if (!ok) {
        free(out);
        free(gzkey);
        return NULL;
    }
    z = tile_new_take(out, len, t->content_type);
    if (z)
        tilecache_put(r->srv->app->cache, gzkey, z);
    free(gzkey);
    return z;
}

void handle_viewer(hreq *r, const route_match *m)
{
    const char *path = r->url;
    const char *root, *rel, *cache_control;
    char vendor_root[PATH_MAX];
    if (strcmp(path, "/") == 0 || strcmp(path, "/viewer/") == 0) {
        root = viewer_dir(r->srv->cfg);
        rel = "index.html";
        cache_control = "no-cache";
    } else if (strncmp(path, "/viewer/", 8) == 0) {
        root = viewer_dir(r->srv->cfg);
        rel = path + 8;
        cache_control = "no-cache";
    } else if (strncmp(path, "/vendor/", 8) == 0) {
        const char *pkg = path + 8;
        const char *slash = strchr(pkg, '/');
        const struct vendor_pkg *vp = NULL;
        for (size_t i = 0; slash && i < sizeof(vendor_pkgs) / sizeof(vendor_pkgs[0]); i++)
            if (strlen(vendor_pkgs[i].name) == (size_t)(slash - pkg) &&
                strncmp(pkg, vendor_pkgs[i].name, (size_t)(slash - pkg)) == 0)
                vp = &vendor_pkgs[i];
        if (!vp) {
            problem_reply(r, 404, NULL, "no such resource: %.200s", path);
            return;
        }
        int n = snprintf(vendor_root, sizeof(vendor_root), "%s/%s", viewer_node_modules_dir(r->srv->cfg),
                         vp->subdir);
        if (n < 0 || (size_t)n >= sizeof(vendor_root)) {
            problem_reply(r, 404, NULL, "no such resource: %.200s", path);
            return;
        }
        root = vendor_root;
        rel = slash + 1;
        cache_control = "public, max-age=86400";
    } else {
        problem_reply(r, 404, NULL, "no such resource: %.200s", path);
        return;
    }
    int status;
    char key[PATH_MAX + 64];
    tile *t = read_static(r, root, rel, &status, key, sizeof(key));
    if (!t) {
        if (status == 500)
            problem_reply(r, 500, NULL, "cannot read %.200s", path);
        else if (strcmp(rel, "index.html") == 0 && strncmp(path, "/vendor/", 8) != 0)
            problem_reply(r, 404, NULL,
                          "the viewer is not installed: no index.html in '%.200s' (set "
                          "viewer.dir in the configuration, or TESSERA_VIEWER_DIR)", root);
        else
            problem_reply(r, 404, NULL, "no such resource: %.200s", path);
        return;
    }
    if (compressible(t->content_type)) {
        /* Each encoding has its own body, so its own ETag (the hash of what is sent). */
        r->rep.vary = "Accept-Encoding";
        tile *z = viewer_accepts_gzip(hreq_header(r, "Accept-Encoding")) && t->len > 256
                  ? gzip_tile(r, key, t) : NULL;
        if (z) {
            tile_release(t);
            t = z;
            r->rep.content_encoding = "gzip";
        }
    }
    hreq_reply_tile(r, 200, t);
    r->rep.cache_control = cache_control;
}
