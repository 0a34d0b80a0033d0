/* Member images opened as datasets, shared and bounded (colmembers.h). */
#include "daemon/collection/colmembers.h"
#include "daemon/collection/collection.h"
#include "engine/base/error.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *key;               /* "{collection}\n{relpath}\n{dev}-{ino}-{size}-{mtime_ns}" */
    dataset *d;
    int refs;
    unsigned long long used; /* tick of the last get */
} entry;

struct colmembers {
    const tess_config *cfg;
    pthread_mutex_t lock;
    entry *e;
    int n, cap, max_open;
    unsigned long long tick, opened;
    double *spare[COLMEMBERS_SPARE_MAX]; /* scratch buffers given back, spare_len doubles */
    int nspare;
    size_t spare_len;
};

colmembers *colmembers_new(const tess_config *cfg, int max_open)
{
    colmembers *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->cfg = cfg;
    m->max_open = max_open > 0 ? max_open : 1;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void colmembers_free(colmembers *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++) {
        dataset_close(m->e[i].d);
        free(m->e[i].key);
    }
    free(m->e);
    for (int i = 0; i < m->nspare; i++)
        free(m->spare[i]);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

double *colmembers_scratch_take(colmembers *m, size_t n)
{
    double *p = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->nspare > 0 && m->spare_len == n)
        p = m->spare[--m->nspare];
    pthread_mutex_unlock(&m->lock);
    return p ? p : malloc(n * sizeof(double));
}

void colmembers_scratch_give(colmembers *m, double *p, size_t n)
{
    if (!p)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->nspare == 0)
        m->spare_len = n;
    if (m->nspare < COLMEMBERS_SPARE_MAX && m->spare_len == n) {
        m->spare[m->nspare++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    free(p);
}

/* The open member of `key`, taken (a reference more, used now) into *out: 1, with the
 * lock released; 0 (lock still held) when none is open. */
static int take_open_locked(colmembers *m, const char *key, const dataset **out)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->e[i].key, key) == 0) {
            m->e[i].refs++;
            m->e[i].used = ++m->tick;
            *out = m->e[i].d;
            pthread_mutex_unlock(&m->lock);
            return 1;
        }
    return 0;
}

/* Closes the least recently used entries no request holds while more than max_open are
 * open (under the lock). */
static void trim_locked(colmembers *m)
{
    while (m->n > m->max_open) {
        int victim = -1;
        for (int i = 0; i < m->n; i++)
            if (m->e[i].refs == 0 && (victim < 0 || m->e[i].used < m->e[victim].used))
                victim = i;
        if (victim < 0)
            return;
        dataset_close(m->e[victim].d);
        free(m->e[victim].key);
        m->e[victim] = m->e[--m->n];
    }
}

int colmembers_get(colset *s, collection *c, const char *relpath, const dataset **out,
                   char *err, size_t errlen)
{
    colmembers *m = s->members;
    *out = NULL;
    char path[PATH_MAX];
    int rc = collection_member_path(s, c, relpath, path, sizeof(path));
    if (rc) {
        tess_seterr(err, errlen, "member '%s' of collection '%s' cannot be read", relpath,
                    c->name);
        return rc == TESS_EIO ? TESS_EIO : TESS_ENOTFOUND;
    }
    /* The identity the index holds: a changed file is a new entry. */
    long long id[4] = {0, 0, 0, 0};
    pthread_rwlock_rdlock(&c->lock);
    int lo = 0, hi = c->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, k = strcmp(c->m[mid].relpath, relpath);
        if (k == 0) {
            id[0] = c->m[mid].dev;
            id[1] = c->m[mid].ino;
            id[2] = c->m[mid].size;
            id[3] = c->m[mid].mtime_ns;
            break;
        }
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    pthread_rwlock_unlock(&c->lock);
    char *key = NULL;
    if (asprintf(&key, "%s\n%s\n%lld-%lld-%lld-%lld", c->name, relpath, id[0], id[1], id[2],
                 id[3]) < 0) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    pthread_mutex_lock(&m->lock);
    if (take_open_locked(m, key, out)) {
        free(key);
        return 0;
    }
    pthread_mutex_unlock(&m->lock);
    /* Opened outside the lock (it reads the header); two requests may race to open the
     * same member, the loser's copy is closed. */
    char name[PATH_MAX + 300];
    snprintf(name, sizeof(name), "%s/%s", c->name, relpath);
    ds_config dc = {.name = name, .path = path, .hdu = c->hdu};
    dataset *d = NULL;
    if ((rc = dataset_open_file(m->cfg, &dc, &d, err, errlen))) {
        free(key);
        return rc;
    }
    pthread_mutex_lock(&m->lock);
    if (take_open_locked(m, key, out)) {
        free(key);
        dataset_close(d);
        return 0;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 16;
        entry *g = realloc(m->e, sizeof(*g) * (size_t)cap);
        if (!g) {
            pthread_mutex_unlock(&m->lock);
            free(key);
            dataset_close(d);
            tess_seterr(err, errlen, "out of memory");
            return TESS_ENOMEM;
        }
        m->e = g;
        m->cap = cap;
    }
    m->e[m->n++] = (entry){key, d, 1, ++m->tick};
    m->opened++;
    trim_locked(m);
    pthread_mutex_unlock(&m->lock);
    *out = d;
    return 0;
}

void colmembers_release(colset *s, const dataset *d)
{
    if (!d)
        return;
    colmembers *m = s->members;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++)
        if (m->e[i].d == d) {
            m->e[i].refs--;
            break;
        }
    trim_locked(m);
    pthread_mutex_unlock(&m->lock);
}

unsigned long long colmembers_opened(const colmembers *m)
{
    return m ? m->opened : 0;
}
