/* Validation helpers shared by the job types (see jobkind.h). */
#include "daemon/jobs/jobkind.h"
#include "engine/base/error.h"

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jobkind_problem(job_problem *pb, int status, const char *field, const char *fmt, ...)
{
    pb->status = status;
    snprintf(pb->field, sizeof(pb->field), "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pb->detail, sizeof(pb->detail), fmt, ap);
    va_end(ap);
}

static atomic_ulong parses;

int jobkind_parse(const job_kind *k, const json_t *body, const job_env *env, int accepted,
                  void **req, job_problem *pb)
{
    *req = NULL;
    atomic_fetch_add(&parses, 1);
    return k->parse(body, env, accepted, req, pb);
}

unsigned long jobkind_parses(void)
{
    return atomic_load(&parses);
}

int jobkind_problem_error(const job_problem *pb, char *err, size_t errlen)
{
    tess_seterr(err, errlen, "%s: %s", pb->field, pb->detail);
    return pb->status == 500 ? TESS_ENOMEM : TESS_EINVAL;
}

int jobkind_only_fields(const json_t *o, const char *const *known, const char *prefix,
                        job_problem *pb)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(known[i], key) == 0;
        if (!ok) {
            char field[128];
            snprintf(field, sizeof(field), "%s%s%.60s", prefix ? prefix : "",
                     prefix && *prefix ? "." : "", key);
            jobkind_problem(pb, 400, field, "unknown field '%.60s'", key);
            return -1;
        }
    }
    return 0;
}

int jobkind_check_new_name(const job_env *env, const char *name, const char *field,
                           job_problem *pb)
{
    size_t n = strlen(name);
    int ok = n >= 1 && n <= 64 && name[0] != '.';
    for (size_t i = 0; i < n && ok; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    }
    if (!ok) {
        jobkind_problem(pb, 400, field,
                        "'%.64s' is not a valid dataset name: use 1 to 64 of A-Z a-z 0-9 _ - . "
                        "not starting with '.'", name);
        return -1;
    }
    if (catalog_find(env->cat, name)) {
        jobkind_problem(pb, 409, field, "a dataset named '%s' already exists", name);
        return -1;
    }
    return 0;
}

/* `path` (absolute) with empty, "." and ".." components removed as text, into out
 * (PATH_MAX): "/a/./b//../c" gives "/a/c"; ".." above "/" stays at "/". */
static void lexical_clean(const char *path, char *out)
{
    size_t len = 0;
    out[len++] = '/';
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t n = (size_t)(e - p);
        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (len > 1 && out[len - 1] != '/')
                len--;
            if (len > 1)
                len--;
        } else if (len + n + 1 < PATH_MAX) {
            if (len > 1)
                out[len++] = '/';
            memcpy(out + len, p, n);
            len += n;
        }
        p = e;
    }
    out[len] = '\0';
}

int jobkind_lookup(const job_env *env, const char *name, const char *field,
                   const dataset **ds, job_problem *pb)
{
    char why[512];
    int rc = catalog_lookup(env->cat, name, strlen(name), ds, why, sizeof why);
    if (rc == TESS_EIO) {
        *ds = NULL;
        jobkind_problem(pb, 500, field, "%s", why);
        return -1;
    }
    if (rc != 0)
        *ds = NULL;
    return 0;
}

/* The one answer for what is not an input (see jobkind.h). */
static int no_input(job_problem *pb, const char *field, const char *s)
{
    jobkind_problem(pb, 404, field, "no dataset or file under a data root named '%.200s'", s);
    return -1;
}

int jobkind_resolve_input(const job_env *env, const char *s, const char *field,
                          const dataset **ds, char *path, job_problem *pb)
{
    if (jobkind_lookup(env, s, field, ds, pb) != 0)
        return -1;
    if (*ds) {
        if ((*ds)->npaths < 1) {
            jobkind_problem(pb, 422, field, "dataset '%s' has no file", s);
            return -1;
        }
        snprintf(path, PATH_MAX, "%s", (*ds)->paths[0]);
        return 0;
    }
    if (!strchr(s, '/') && !strstr(s, ".fit"))
        return no_input(pb, field, s);
    if (env->cfg->n_roots < 1) {
        jobkind_problem(pb, 403, field, "no data roots are configured");
        return -1;
    }
    char joined[PATH_MAX], clean[PATH_MAX];
    int n = s[0] == '/' ? snprintf(joined, sizeof(joined), "%s", s)
                        : snprintf(joined, sizeof(joined), "%s/%s", env->cfg->data_roots[0], s);
    if (n < 0 || (size_t)n >= sizeof(joined)) {
        jobkind_problem(pb, 400, field, "path too long");
        return -1;
    }
    lexical_clean(joined, clean);
    if (!catalog_path_allowed(env->cfg, clean))
        return no_input(pb, field, s);
    char *real = realpath(joined, NULL);
    int ok = real && catalog_path_allowed(env->cfg, real);
    if (ok)
        snprintf(path, PATH_MAX, "%s", real);
    free(real);
    return ok ? 0 : no_input(pb, field, s);
}
