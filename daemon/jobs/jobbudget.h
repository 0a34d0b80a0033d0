/* Job budgets: the memory and disk a job may take (jobs.memory_mb, jobs.max_product_mb,
 * jobs.disk_mb), checked before a job is accepted and while it runs. */
#ifndef TESSERA_DAEMON_JOBS_JOBBUDGET_H
#define TESSERA_DAEMON_JOBS_JOBBUDGET_H

#include "daemon/config.h"
#include "daemon/jobs/jobkind.h"

/* Bytes of disk the files under the n `paths` take: their allocated blocks (st_blocks),
 * so a sparse work file counts what was written, and a file linked in two places (a
 * product linked from its work file) once.  Symbolic links are not followed; a missing
 * path counts 0.  Cannot fail. */
double jobbudget_du(const char *const *paths, int n);

/* The disk a job needs at most: the larger of its work files and its product (bytes). */
double jobbudget_disk_need(const job_cost *c);

/* Checks the cost of a new job against cfg's budgets, in this order: state + one block
 * (with 4 MB for what the allocator and libraries keep for a block in flight, measured)
 * within jobs.memory_mb; the product within jobs.max_product_mb; when jobs.disk_mb > 0,
 * its disk need within jobs.disk_mb less `used` (bytes under jobs.dir now) and
 * `promised` (what accepted jobs will still write).  Returns 0, or -1 with *pb: 413
 * naming the key and the figures in MB (1 MB = 2^20 bytes). */
int jobbudget_admit(const tess_config *cfg, const job_cost *c, double used, double promised,
                    job_problem *pb);

/* Blocks of a job of cost c that may be in flight at once on `threads` workers:
 * (jobs.memory_mb - state) / (block + 4 MB), at least 1 and at most threads. */
int jobbudget_blocks(const tess_config *cfg, const job_cost *c, int threads);

/* The anonymous memory a job of cost c may take at once on `threads` workers, in bytes:
 * state + jobbudget_blocks(cfg, c, threads) * (block + 4 MB), the bound the runner keeps
 * it to (what bench/stack checks a job's measured peak against). */
double jobbudget_peak(const tess_config *cfg, const job_cost *c, int threads);

/* Writes into detail (len bytes) why jobs.dir's files are over jobs.disk_mb, when they
 * are: `used` bytes under jobs.dir, `job` bytes of them the running job's.  Returns 1
 * when over (the job should fail with 413), else 0; always 0 when jobs.disk_mb is 0. */
int jobbudget_over_disk(const tess_config *cfg, double used, double job, char *detail,
                        size_t len);

/* Writes into detail why a product of `bytes` is over jobs.max_product_mb, when it is.
 * Returns 1 when over, else 0. */
int jobbudget_over_product(const tess_config *cfg, double bytes, char *detail, size_t len);

#endif
