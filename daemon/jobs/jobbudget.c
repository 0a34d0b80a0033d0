/* Job budgets: memory and disk checks before and while a job runs (jobbudget.h). */
#include "daemon/jobs/jobbudget.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define MB 1048576.0
/* What a block in flight holds beyond its estimate: the allocator's free chunks in the
 * arena of the worker that ran it (freed frames and buffers glibc keeps for reuse) and
 * the libraries' buffers (libpng, zlib, cfitsio, FFTW).  Measured 2.7 MB with one block
 * of a power_spectrum in flight and 7 MB with two (tests/daemon/test_jobmem). */
#define BLOCK_SLACK (4.0 * MB)

/* nftw has no user pointer: the walk in progress (one walk at a time per thread): the sum,
 * and the identities of the files with more than one link already counted. */
typedef struct du_walk {
    double sum;
    struct du_id {
        dev_t dev;
        ino_t ino;
    } *seen;
    size_t n, cap;
} du_walk;
static __thread du_walk *du_cur;

static int du_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)path;
    (void)f;
    du_walk *w = du_cur;
    if (flag != FTW_F && flag != FTW_D && flag != FTW_DP && flag != FTW_SL)
        return 0;
    if (flag == FTW_F && st->st_nlink > 1) {
        for (size_t i = 0; i < w->n; i++)
            if (w->seen[i].dev == st->st_dev && w->seen[i].ino == st->st_ino)
                return 0;
        if (w->n == w->cap) {
            size_t cap = w->cap ? 2 * w->cap : 16;
            struct du_id *g = realloc(w->seen, cap * sizeof *g);
            if (g) {
                w->seen = g;
                w->cap = cap;
            }
        }
        if (w->n < w->cap)
            w->seen[w->n++] = (struct du_id){st->st_dev, st->st_ino};
    }
    w->sum += (double)st->st_blocks * 512.0;
    return 0;
}

double jobbudget_du(const char *const *paths, int n)
{
    du_walk w = {0};
    du_cur = &w;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (lstat(paths[i], &st) == 0)
            nftw(paths[i], du_cb, 16, FTW_PHYS);
    }
    du_cur = NULL;
    free(w.seen);
    return w.sum;
}

double jobbudget_disk_need(const job_cost *c)
{
    return fmax(c->work_bytes, c->product_bytes);
}

int jobbudget_admit(const tess_config *cfg, const job_cost *c, double used, double promised,
                    job_problem *pb)
{
    double mem = c->state_bytes + c->block_bytes + BLOCK_SLACK;
    double budget = (double)cfg->jobs_memory_mb * MB;
    if (mem > budget) {
        jobkind_problem(pb, 413, NULL, "this job needs %.0f MB of memory at once (%.0f MB for "
                        "one block%s%.240s, %.0f MB for its plan, %.0f MB for the allocator), "
                        "more than jobs.memory_mb = %zu", ceil(mem / MB),
                        ceil(c->block_bytes / MB), c->what[0] ? ": " : "", c->what,
                        ceil(c->state_bytes / MB), BLOCK_SLACK / MB, cfg->jobs_memory_mb);
        return -1;
    }
    if (c->product_bytes > (double)cfg->jobs_max_product_mb * MB) {
        jobkind_problem(pb, 413, NULL, "the product would be %.0f MB, more than "
                        "jobs.max_product_mb = %zu", ceil(c->product_bytes / MB),
                        cfg->jobs_max_product_mb);
        return -1;
    }
    if (cfg->jobs_disk_mb > 0) {
        double need = jobbudget_disk_need(c), total = (double)cfg->jobs_disk_mb * MB;
        double left = fmax(0.0, total - used - promised);
        if (need > left || (need == 0.0 && used >= total)) {
            jobkind_problem(pb, 413, NULL, "this job needs %.0f MB of disk for its work files "
                            "and product, and jobs.disk_mb = %zu leaves %.0f MB (%.0f MB are in "
                            "jobs.dir, %.0f MB promised to queued and running jobs)",
                            ceil(need / MB), cfg->jobs_disk_mb, round(left / MB),
                            round(used / MB), round(promised / MB));
            return -1;
        }
    }
    return 0;
}

int jobbudget_blocks(const tess_config *cfg, const job_cost *c, int threads)
{
    if (threads < 1)
        threads = 1;
    if (!(c->block_bytes > 0.0))
        return threads;
    double room = (double)cfg->jobs_memory_mb * MB - c->state_bytes;
    double n = floor(room / (c->block_bytes + BLOCK_SLACK));
    return n >= (double)threads ? threads : n >= 1.0 ? (int)n : 1;
}

double jobbudget_peak(const tess_config *cfg, const job_cost *c, int threads)
{
    return c->state_bytes + (double)jobbudget_blocks(cfg, c, threads) *
                                (c->block_bytes + BLOCK_SLACK);
}

int jobbudget_over_disk(const tess_config *cfg, double used, double job, char *detail,
                        size_t len)
{
    if (cfg->jobs_disk_mb == 0 || used <= (double)cfg->jobs_disk_mb * MB)
        return 0;
    snprintf(detail, len, "jobs.dir holds %.0f MB of work files and products, more than "
             "jobs.disk_mb = %zu (%.0f MB of them this job's work files)", ceil(used / MB),
             cfg->jobs_disk_mb, ceil(job / MB));
    return 1;
}

int jobbudget_over_product(const tess_config *cfg, double bytes, char *detail, size_t len)
{
    if (bytes <= (double)cfg->jobs_max_product_mb * MB)
        return 0;
    snprintf(detail, len, "the product is %.0f MB, more than jobs.max_product_mb = %zu",
             ceil(bytes / MB), cfg->jobs_max_product_mb);
    return 1;
}
