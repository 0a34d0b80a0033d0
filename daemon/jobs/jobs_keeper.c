/* Products as datasets: registration of a job's product, again at start-up, and the keeper
 * thread of a shared store, which renews this runner's leases and registers the products
 * other servers made (jobs_impl.h). */
#include "daemon/jobs/jobs_impl.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Registers a product (lock not held).  Returns 0 or a code with err.  A dataset this
 * product already is (registered by an earlier end of the same job whose state could not
 * be written) counts as registered. */
int jobs_register_product(jobs *J, const job_product *prod, const char *path, char *err,
                            size_t errlen)
{
    if (prod->dataset[0]) {
        ds_config dc = {0};
        dc.name = (char *)prod->dataset;
        dc.path = (char *)path;
        int rc = catalog_add(J->cat, &dc, err, errlen);
        const dataset *d = rc == TESS_EEXIST ? catalog_find(J->cat, prod->dataset) : NULL;
        if (d && d->npaths == 1 && strcmp(d->paths[0], path) == 0)
            rc = 0;
        if (rc)
            return rc;
    }
    if (prod->attach_to[0]) {
        const dataset *d = catalog_find(J->cat, prod->attach_to);
        if (!d) {
            tess_seterr(err, errlen, "dataset '%s' is gone", prod->attach_to);
            return TESS_ENOTFOUND;
        }
        return dataset_attach_profile(d, path);
    }
    return 0;
}

/* The succeeded jobs a query found, to register outside the lock. */
typedef struct product_ref {
    char id[17];
    char dataset[128], attach_to[128], ctype[64];
    double finished;
} product_ref;

typedef struct product_list {
    product_ref *v;
    size_t n, cap;
} product_list;

static void product_cb(void *ctx, const char *id, const char *ds, const char *at,
                       const char *ct, double finished)
{
    product_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        product_ref *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    product_ref *r = &l->v[l->n++];
    snprintf(r->id, sizeof r->id, "%s", id);
    snprintf(r->dataset, sizeof r->dataset, "%s", ds ? ds : "");
    snprintf(r->attach_to, sizeof r->attach_to, "%s", at ? at : "");
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    r->finished = finished;
}

static int seen_has(const jobs *J, const char *id)
{
    for (size_t i = 0; i < J->nseen; i++)
        if (strcmp(J->seen[i], id) == 0)
            return 1;
    return 0;
}

/* Remembers that this process registered job id's product (the keeper looks for those
 * it has not).  Lock held. */
void jobs_seen_add(jobs *J, const char *id)
{
    if (seen_has(J, id))
        return;
    if (J->nseen == J->capseen) {
        size_t cap = J->capseen ? 2 * J->capseen : 64;
        char (*v)[17] = realloc(J->seen, cap * sizeof *v);
        if (!v)
            return;
        J->seen = v;
        J->capseen = cap;
    }
    snprintf(J->seen[J->nseen++], 17, "%s", id);
}

/* Registers the products in *l not yet registered here (lock not held: catalog calls). */
static void register_list(jobs *J, product_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        product_ref *r = &l->v[i];
        pthread_mutex_lock(&J->lock);
        int have = seen_has(J, r->id);
        pthread_mutex_unlock(&J->lock);
        if (have)
            continue;
        job_product prod = {0};
        snprintf(prod.dataset, sizeof(prod.dataset), "%s", r->dataset);
        snprintf(prod.attach_to, sizeof(prod.attach_to), "%s", r->attach_to);
        char final[PATH_MAX], err[256];
        jobs_result_path(J, r->id, r->ctype, final);
        if (access(final, R_OK) != 0)
            continue;
        int rc = jobs_register_product(J, &prod, final, err, sizeof(err));
        size_t fl = strlen(final);
        if (rc == TESS_ENOTFOUND && !J->src->dir_shared && prod.attach_to[0] && fl > 5 &&
            strcmp(final + fl - 5, ".fits") == 0) {
            /* a plane store (ingest) of a dataset no longer configured: swept (not in a
             * shared store, whose other servers may serve that dataset) */
            unlink(final);
            fprintf(stderr, "tesserad: product of job %s removed: %s\n", r->id, err);
        } else if (rc) {
            fprintf(stderr, "tesserad: product of job %s not registered: %s\n", r->id, err);
        }
        pthread_mutex_lock(&J->lock);
        if (J->src->dir_shared)   /* others make products too: the keeper looks again */
            jobs_seen_add(J, r->id);
        /* Another server's clock may lag: look a minute back. */
        if (!isnan(r->finished) && r->finished - 60.0 > J->seen_since)
            J->seen_since = r->finished - 60.0;
        pthread_mutex_unlock(&J->lock);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

void jobs_reregister(jobs *J)
{
    product_list l = {0};
    pthread_mutex_lock(&J->lock);
    jobstore_succeeded(J->st, -INFINITY, product_cb, &l);
    pthread_mutex_unlock(&J->lock);
    register_list(J, &l);
}

/* Shared stores: every lease_s / 4 (at most a second) renews this runner's leases, and
 * registers the products other servers made since the last look. */
static void *keeper(void *arg)
{
    jobs *J = arg;
    double period = J->lease_s / 4.0 < 1.0 ? J->lease_s / 4.0 : 1.0;
    pthread_mutex_lock(&J->lock);
    while (!J->stopping) {
        /* A lost database is probed here, the lock released: every other call fails at
         * once while it is lost, so the lock is never held waiting for it. */
        if (!jobstore_available(J->st)) {
            pthread_mutex_unlock(&J->lock);
            jobstore_probe(J->st);
            pthread_mutex_lock(&J->lock);
        }
        long renewed = 0;
        if (jobstore_renew(J->st, J->owner, J->lease_s, J->held_job, J->nheld, J->held_stage,
                           J->held_block, &renewed) == 0)
            J->renewals += (unsigned long long)renewed;
        product_list l = {0};
        jobstore_succeeded(J->st, J->seen_since, product_cb, &l);
        pthread_mutex_unlock(&J->lock);
        register_list(J, &l);
        pthread_mutex_lock(&J->lock);
        double until = tess_mono_s() + period;
        while (!J->stopping && tess_mono_s() < until)
            jobs_wait_locked(J, (long)((until - tess_mono_s()) * 1000.0) + 1);
    }
    pthread_mutex_unlock(&J->lock);
    return NULL;
}

int jobs_keeper_start(jobs *J)
{
    if (pthread_create(&J->keeper, NULL, keeper, J) != 0)
        return TESS_ENOMEM;
    J->keeper_started = 1;
    return 0;
}
