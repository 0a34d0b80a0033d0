/* Offline driver of bench/stack: times plane, series and job steps on one stack through
 * the engine (catalog + dataset_read_region + the job types of daemon/jobs/job_stack.c, run
 * on T threads the way the job runner runs them), without the HTTP daemon.  The xz plane
 * and the series run the routes' own calls (stack_read_xz_on / stack_read_series_on) in a
 * task of a pool of T workers, as the server runs a request.
 *
 * usage: stackbench DIR PATTERN THREADS WORKDIR [SERIES_BEFORE]
 *   DIR      data root holding the frames; PATTERN their glob relative to DIR
 *   THREADS  worker threads for the jobs
 *   WORKDIR  scratch directory (job work directories and products go there)
 *   SERIES_BEFORE  pixels whose series is read plane by plane before rechunk (default 5)
 * STACKBENCH_PS_BLOCK_MB: the power spectrum's block budget (cube_spectrum_set_block_bytes).
 * STACKBENCH_ZR_CHUNK_MB: the decoded bytes a z-reduction chunk holds (stack_set_zr_chunk_bytes).
 * STACKBENCH_JOBS_ONLY=1: no check or series timings after rechunk (profiles of the jobs).
 * STACKBENCH_KEEP=1: the products are left in WORKDIR (to compare two builds' bytes).
 * STACKBENCH_VMSTAT=pgfault,...: those /proc/vmstat counters' change over each job.
 * Prints "RESULT name value unit" lines. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/image/chunkstore.h"
#include "engine/image/pngframe.h"
#include "engine/cube/spectrum.h"
#include "engine/image/stack.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/jobs/job_stack.h"
#include "daemon/jobs/jobbudget.h"
#include "engine/base/clock.h"
#include "engine/base/pool.h"
#include "engine/base/error.h"

/* CPU seconds (user + system) of the process so far: on a loaded machine a step's CPU
 * time against the floor's is steadier than their wall times. */
static double sys_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + sys_s();
}

/* Removes a product once timed, unless STACKBENCH_KEEP=1 (products left in WORKDIR, to
 * compare two builds' bytes). */
static void drop(const char *path)
{
    const char *k = getenv("STACKBENCH_KEEP");
    if (!k || *k != '1')
        unlink(path);
}

/* Dirty plus writeback page cache of the machine (/proc/meminfo), kB; -1 unreadable. */
static long dirty_kb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb, sum = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Dirty: %ld", &kb) == 1 || sscanf(line, "Writeback: %ld", &kb) == 1)
            sum = (sum < 0 ? 0 : sum) + kb;
    if (f)
        fclose(f);
    return sum;
}

/* Before a timed job: the products of the steps before it were deleted when they were
 * timed (their dirty pages dropped with them); this waits, up to STACKBENCH_SETTLE_S
 * (default 10) seconds, for what is left dirty or under writeback to fall to the level
 * the run started at (plus 64 MB), so that no job pays for the writes of another
 * (bench/stack's dask side does the same).  Nothing is synced or dropped. */
static long settle_base_kb = -1;

static void settle(const char *label)
{
    const char *e = getenv("STACKBENCH_SETTLE_S");
    double lim = e ? atof(e) : 10.0, t0 = tess_mono_s();
    long kb = dirty_kb();
    if (settle_base_kb < 0)
        settle_base_kb = kb;
    while (kb > settle_base_kb + 65536 && tess_mono_s() - t0 < lim) {
        usleep(100000);
        kb = dirty_kb();
    }
    if (tess_mono_s() - t0 >= 0.1)
        fprintf(stderr, "stackbench: %s: waited %.1f s for dirty pages (%ld MB now)\n", label,
                tess_mono_s() - t0, kb / 1024);
}

/* STACKBENCH_VMSTAT="pgfault,thp_fault_alloc,...": the machine's /proc/vmstat counters
 * of those names, read before and after each job, their change printed with the job's
 * line (the whole machine's: a quiet one tells what the job made the kernel do). */
#define VM_MAX 16
static int vm_read(const char *names, long long *v)
{
    int n = 0;
    char want[512], *save = NULL;
    snprintf(want, sizeof want, "%s", names);
    for (char *w = strtok_r(want, ",", &save); w && n < VM_MAX; w = strtok_r(NULL, ",", &save)) {
        FILE *f = fopen("/proc/vmstat", "r");
        char key[128];
        long long x;
        v[n] = -1;
        while (f && fscanf(f, "%127s %lld", key, &x) == 2)
            if (strcmp(key, w) == 0) {
                v[n] = x;
                break;
            }
        if (f)
            fclose(f);
        n++;
    }
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stage_run {
    const job_kind *k;
    void *state;
    int stage;
    long nblocks, next;
    pthread_mutex_t lock;
    int rc;
    char err[256];
} stage_run;

static void *worker(void *arg)
{
    stage_run *sr = arg;
    static const volatile int no_cancel = 0;
    for (;;) {
        pthread_mutex_lock(&sr->lock);
        long b = sr->next < sr->nblocks ? sr->next++ : -1;
        pthread_mutex_unlock(&sr->lock);
        if (b < 0)
            return NULL;
        char err[256] = "";
        int rc = sr->k->run_block(sr->state, sr->stage, b, &no_cancel, err, sizeof err);
        if (rc) {
            pthread_mutex_lock(&sr->lock);
            sr->rc = rc;
            snprintf(sr->err, sizeof sr->err, "%s", err);
            pthread_mutex_unlock(&sr->lock);
        }
    }
}

/* Anonymous memory of the process (RssAnon of /proc/self/status), kB; -1 unreadable. */
static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* Samples RssAnon every 5 ms while a job runs and keeps the highest: the job's peak
 * anonymous memory (its buffers, decoded frames, the frame cache's share), without the
 * page cache of the files it maps or writes. */
typedef struct mem_watch {
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    long peak_kb;
} mem_watch;

static void *mem_watcher(void *arg)
{
    mem_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        long kb = rss_anon_kb();
        if (kb > w->peak_kb)
            w->peak_kb = kb;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Stops mem_watcher's thread and waits for it (peak_kb is then final). */
static void mem_watch_stop(mem_watch *mw)
{
    pthread_mutex_lock(&mw->lock);
    mw->stop = 1;
    pthread_cond_signal(&mw->cond);
    pthread_mutex_unlock(&mw->lock);
    pthread_join(mw->th, NULL);
}

/* Runs a job to its product `product`; returns seconds, or -1 on failure.  Prints
 * "RESULT cpu_LABEL s" (user + system of the process while it ran) and "RESULT
 * anon_LABEL peak MB (before MB)". */
static double run_job(const char *label, const job_kind *k, const job_env *env,
                      const char *body_text, const char *workroot, const char *product,
                      int threads)
{
    settle(label);
    json_error_t je;
    json_t *body = json_loads(body_text, 0, &je);
    job_problem pb;
    void *req = NULL;
    if (!body || jobkind_parse(k, body, env, 0, &req, &pb) != 0) {
        fprintf(stderr, "stackbench: %s refused: %s %s\n", body_text, pb.field, pb.detail);
        json_decref(body);
        return -1;
    }
    char wd[4096];
    snprintf(wd, sizeof wd, "%s/work-%s-XXXXXX", workroot, k->type);
    if (!mkdtemp(wd)) {
        k->req_free(req);
        json_decref(body);
        return -1;
    }
    /* the runner's bound on the job's anonymous memory (jobbudget_peak of its estimate),
     * over what the process held before */
    job_cost jc;
    double bound = -1.0;
    if (k->estimate && k->estimate(req, env, &jc, &pb) == 0)
        bound = jobbudget_peak(env->cfg, &jc, threads);
    mem_watch mw = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                    .peak_kb = rss_anon_kb()};
    long base_kb = mw.peak_kb;
    int watching = pthread_create(&mw.th, NULL, mem_watcher, &mw) == 0;
    const char *vmn = getenv("STACKBENCH_VMSTAT");
    long long vm0[VM_MAX], vm1[VM_MAX];
    int nvm = vmn ? vm_read(vmn, vm0) : 0;
    double t0 = tess_mono_s(), c0 = cpu_s(), s0 = sys_s();
    long f0 = minflt();
    unsigned long long dec0 = pngframe_decodes();
    job_plan plan;
    char err[256] = "";
    int prc = k->plan(req, env, wd, &plan, err, sizeof err);
    k->req_free(req);
    if (prc != 0) {
        fprintf(stderr, "stackbench: plan: %s\n", err);
        json_decref(body);
        if (watching)
            mem_watch_stop(&mw);
        return -1;
    }
    long total = 0;
    for (int s = 0; s < plan.nstages; s++)
        total += plan.nblocks[s];
    int rc = 0;
    for (int s = 0; s < plan.nstages && !rc; s++) {
        stage_run sr = {k, plan.state, s, plan.nblocks[s], 0, PTHREAD_MUTEX_INITIALIZER, 0, ""};
        pthread_t th[64];
        int n = threads < 64 ? threads : 64;
        for (int i = 0; i < n; i++)
            pthread_create(&th[i], NULL, worker, &sr);
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        pthread_mutex_lock(&mw.lock);
        long peak_kb = mw.peak_kb;
        pthread_mutex_unlock(&mw.lock);
        fprintf(stderr, "stackbench: %s stage %d: %ld blocks done at %.3f s (%.3f s of CPU, "
                "%.3f of it system; %ld minor faults; peak anonymous so far %.1f MB)\n",
                k->type, s, plan.nblocks[s], tess_mono_s() - t0, cpu_s() - c0, sys_s() - s0,
                minflt() - f0, peak_kb / 1024.0);
        if (sr.rc) {
            fprintf(stderr, "stackbench: %s stage %d: %s\n", k->type, s, sr.err);
            rc = sr.rc;
        }
    }
    job_product prod;
    unlink(product);
    double cpu_st = cpu_s() - c0, sys_st = sys_s() - s0;
    if (!rc && k->finish(plan.state, product, &prod, err, sizeof err) != 0) {
        fprintf(stderr, "stackbench: finish: %s\n", err);
        rc = -1;
    }
    double cpu_fin = cpu_s() - c0, sys_fin = sys_s() - s0;
    k->release(plan.state);
    double t = tess_mono_s() - t0, cpu = cpu_s() - c0, sys = sys_s() - s0;
    fprintf(stderr, "stackbench: %s: finish %.3f s of CPU (%.3f system), release %.3f "
            "(%.3f system)\n", k->type, cpu_fin - cpu_st, sys_fin - sys_st, cpu - cpu_fin,
            sys - sys_fin);
    if (nvm) {
        vm_read(vmn, vm1);
        char want[512], *save = NULL;
        snprintf(want, sizeof want, "%s", vmn);
        printf("RESULT vmstat_%s", label);
        char *w = strtok_r(want, ",", &save);
        for (int i = 0; i < nvm && w; i++, w = strtok_r(NULL, ",", &save))
            printf(" %s=%lld", w, vm1[i] - vm0[i]);
        printf("\n");
    }
    if (watching)
        mem_watch_stop(&mw);
    printf("RESULT cpu_%s %.6f s\n", label, cpu);
    printf("RESULT user_%s %.6f s\nRESULT sys_%s %.6f s\nRESULT minflt_%s %ld\n", label,
           cpu - sys, label, sys, label, minflt() - f0);
    printf("RESULT anon_%s %.1f MB (before %.1f MB)\n", label, mw.peak_kb / 1024.0,
           base_kb / 1024.0);
    if (bound >= 0.0)
        printf("RESULT bound_%s %.1f MB (the estimate's %.1f MB over the %.1f MB before: "
               "state %.1f MB, %d x block %.1f MB + 4 MB, the block %s)\n", label,
               base_kb / 1024.0 + bound / 1048576.0, bound / 1048576.0, base_kb / 1024.0,
               jc.state_bytes / 1048576.0, jobbudget_blocks(env->cfg, &jc, threads),
               jc.block_bytes / 1048576.0, jc.what);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", wd);
    if (system(cmd) != 0)
        fprintf(stderr, "stackbench: cannot remove %s\n", wd);
    json_decref(body);
    fprintf(stderr, "stackbench: %s: %d stage(s), %ld blocks, %.3f s (%.3f s of CPU), %llu PNG "
            "decodes, peak anonymous %.1f MB\n", k->type, plan.nstages, total, t, cpu,
            pngframe_decodes() - dec0, mw.peak_kb / 1024.0);
    return rc ? -1 : t;
}

/* Steps to run: STACKBENCH_STEPS="a,b" of planes, series_before, readmodes, zdirect,
 * zdouble, decode_floor, mean_z, mean_xy, ps, rechunk, recenter, ingest (default: all
 * but readmodes, zdirect and zdouble).  ps is both spectra (from the frames, and from the
 * copy when rechunk runs); ps_copy, with rechunk, only the one from the copy. */
static int want(const char *step)
{
    const char *e = getenv("STACKBENCH_STEPS");
    if (!e || !*e)
        return strcmp(step, "readmodes") != 0 && strcmp(step, "zdirect") != 0 &&
               strcmp(step, "zdouble") != 0;
    size_t n = strlen(step);
    for (const char *p = e; (p = strstr(p, step)); p += n)
        if ((p == e || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* readmodes: every frame file read by T threads (frames dealt round-robin), either
 * through a fresh mmap (madvise SEQUENTIAL, a byte summed per 64) or by pread(2) of
 * 1 MiB into a per-thread buffer (same sum), as the two ways to stream frames. */
typedef struct rm_arg {
    char **paths;
    long n;
    int t, nt, use_mmap;
    unsigned long long bytes, sum;
} rm_arg;

static void *rm_worker(void *arg)
{
    rm_arg *a = arg;
    unsigned char *buf = a->use_mmap ? NULL : malloc(1 << 20);
    for (long i = a->t; i < a->n; i += a->nt) {
        int fd = open(a->paths[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        size_t len = (size_t)st.st_size;
        if (a->use_mmap) {
            unsigned char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                madvise(m, len, MADV_SEQUENTIAL);
                for (size_t k = 0; k < len; k += 64)
                    a->sum += m[k];
                munmap(m, len);
            }
        } else {
            for (off_t off = 0; off < (off_t)len;) {
                ssize_t r = pread(fd, buf, 1 << 20, off);
                if (r <= 0)
                    break;
                for (ssize_t k = 0; k < r; k += 64)
                    a->sum += buf[k];
                off += r;
            }
        }
        a->bytes += len;
        close(fd);
    }
    free(buf);
    return NULL;
}

static void readmodes(const dataset *d, int threads);

/* decode_floor: every frame decoded once (PNG: pngframe_decode) or read (FITS: pread),
 * frames dealt round-robin to T threads: the floor of every step on compressed frames. */
static void *df_worker(void *arg)
{
    rm_arg *a = arg;
    for (long i = a->t; i < a->n; i += a->nt) {
        void *pix = NULL;
        long nx, ny;
        int bits;
        char err[256];
        if (pngframe_decode(a->paths[i], &pix, &nx, &ny, &bits, err, sizeof err) == 0) {
            a->sum += ((unsigned char *)pix)[0];
            a->bytes += (unsigned long long)(nx * ny * (bits / 8));
        }
        free(pix);
    }
    return NULL;
}

static void decode_floor(const dataset *d, int threads)
{
    if (!frame_is_png(d->paths[0])) {
        readmodes(d, threads);
        return;
    }
    rm_arg a[64];
    pthread_t th[64];
    int nt = threads < 64 ? threads : 64;
    double t0 = tess_mono_s(), c0 = cpu_s(), s0 = sys_s();
    for (int i = 0; i < nt; i++) {
        a[i] = (rm_arg){d->paths, d->npaths, i, nt, 0, 0, 0};
        pthread_create(&th[i], NULL, df_worker, &a[i]);
    }
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    printf("RESULT decode_floor %.6f s\n", tess_mono_s() - t0);
    printf("RESULT cpu_decode_floor %.6f s\n", cpu_s() - c0);
    printf("RESULT sys_decode_floor %.6f s\n", sys_s() - s0);
    fprintf(stderr, "stackbench: decode_floor: %.3f s of CPU\n", cpu_s() - c0);
}

static void readmodes(const dataset *d, int threads)
{
    for (int mode = 0; mode < 2; mode++) {
        rm_arg a[64];
        pthread_t th[64];
        int nt = threads < 64 ? threads : 64;
        double t0 = tess_mono_s();
        for (int i = 0; i < nt; i++) {
            a[i] = (rm_arg){d->paths, d->npaths, i, nt, mode == 0, 0, 0};
            pthread_create(&th[i], NULL, rm_worker, &a[i]);
        }
        unsigned long long bytes = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            bytes += a[i].bytes;
        }
        double t = tess_mono_s() - t0;
        printf("RESULT read_%s %.6f s (%.1f MB/s)\n", mode == 0 ? "mmap" : "pread", t,
               (double)bytes / 1048576.0 / t);
    }
}

/* zdirect: stack_zreduce on T threads over T z-ranges (what GET .../reduce?axis=z does
 * on the pool), merged in order; integer mode or forced doubles. */
typedef struct zd_arg {
    stack *st;
    long z0, z1;
    int flags;
    stack_zpart *part;
    int rc;
} zd_arg;

static void *zd_worker(void *arg)
{
    zd_arg *a = arg;
    char err[256];
    a->rc = stack_zreduce(a->st, STACK_ZOP_MEAN, a->z0, a->z1, a->flags, NULL, &a->part, err,
                          sizeof err);
    if (a->rc)
        fprintf(stderr, "stackbench: zreduce: %s\n", err);
    return NULL;
}

static double zdirect(const dataset *d, int threads, int flags, double *out)
{
    zd_arg a[64];
    pthread_t th[64];
    int nt = threads < 64 ? threads : 64;
    double t0 = tess_mono_s();
    for (int i = 0; i < nt; i++) {
        a[i] = (zd_arg){dataset_stack(d), (long)i * d->nz / nt, (long)(i + 1) * d->nz / nt, flags,
                        NULL, 0};
        pthread_create(&th[i], NULL, zd_worker, &a[i]);
    }
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    for (int i = 1; i < nt; i++)
        stack_zpart_merge(a[0].part, a[i].part);
    stack_zpart_result(a[0].part, out);
    double t = tess_mono_s() - t0;
    for (int i = 0; i < nt; i++)
        stack_zpart_free(a[i].part);
    return t;
}

/* A cut read as the server reads it: stack_read_xz_on or stack_read_series_on in a task
 * of `workers` (the request's work), which shares the frames with the other workers. */
typedef struct cut_req {
    stack *s;
    pool *workers;
    int xz;                     /* 1: the xz plane at row y, 0: the series at (x, y) */
    long x, y, nx, nz;
    double *out;
    int rc, done;
    char err[512];
    pthread_mutex_t lock;
    pthread_cond_t cond;
} cut_req;

static void cut_task(void *arg)
{
    cut_req *q = arg;
    stack_cut_opts o = {q->workers, POOL_INTERACTIVE, NULL};
    int rc = q->xz ? stack_read_xz_on(q->s, &o, q->y, 0, 0, q->nx, q->nz, q->out, q->err,
                                      sizeof q->err)
                   : stack_read_series_on(q->s, &o, q->x, q->y, 0, q->nz, q->out, q->err,
                                          sizeof q->err);
    pthread_mutex_lock(&q->lock);
    q->rc = rc;
    q->done = 1;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

/* Runs the cut on the pool and waits for it; 0 or the read's error (printed). */
static int run_cut(cut_req *q)
{
    q->done = 0;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    int rc = pool_submit(q->workers, POOL_INTERACTIVE, cut_task, q);
    if (rc == 0) {
        pthread_mutex_lock(&q->lock);
        while (!q->done)
            pthread_cond_wait(&q->cond, &q->lock);
        pthread_mutex_unlock(&q->lock);
        rc = q->rc;
    } else {
        snprintf(q->err, sizeof q->err, "cannot queue the read");
    }
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    if (rc)
        fprintf(stderr, "stackbench: %s\n", q->err);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: stackbench DIR PATTERN THREADS WORKDIR [SERIES_BEFORE]\n");
        return 2;
    }
    const char *dir = argv[1], *pattern = argv[2], *workroot = argv[4];
    int threads = atoi(argv[3]);
    long nbefore = argc > 5 ? atol(argv[5]) : 5;
    char text[8192], err[512];
    snprintf(text, sizeof text,
             "{\"data_roots\": [\"%s\"], \"datasets\": [{\"name\": \"bench\", \"frames\": \"%s\"}]}",
             dir, pattern);
    tess_config cfg;
    catalog *cat = NULL;
    if (config_init(&cfg) != 0 || config_load_text(text, &cfg, err, sizeof err) != 0 ||
        catalog_open(&cfg, &cat, err, sizeof err) != 0) {
        fprintf(stderr, "stackbench: %s\n", err);
        return 1;
    }
    settle_base_kb = dirty_kb();
    const dataset *d = catalog_find(cat, "bench");
    long nx = d->nx, ny = d->ny, nz = d->nz;
    printf("RESULT shape %ldx%ldx%ld frames\n", nx, ny, nz);
    job_env env = {&cfg, cat, threads, NULL, NULL};
    double *plane = malloc(sizeof(double) * (size_t)(nx * ny));
    double *series = malloc(sizeof(double) * (size_t)nz);
    double *times = malloc(sizeof(double) * 2000);
    srand(12345);
    /* The server's worker pool for the xz plane and the series (T workers). */
    pool *workers = pool_new(threads, 1024);
    double *xz = malloc(sizeof(double) * (size_t)nx * (size_t)nz);
    if (!workers || !xz) {
        fprintf(stderr, "stackbench: cannot start %d workers\n", threads);
        return 1;
    }

    double t0;
    if (want("planes")) {
        /* xy plane (the middle frame), median of 5. */
        for (int i = 0; i < 5; i++) {
            t0 = tess_mono_s();
            if (dataset_read_region(d, nz / 2, 0, 0, nx, ny, plane, err, sizeof err) != 0) {
                fprintf(stderr, "stackbench: %s\n", err);
                return 1;
            }
            times[i] = tess_mono_s() - t0;
        }
        qsort(times, 5, sizeof *times, cmp_double);
        printf("RESULT xy_plane %.6f s\n", times[2]);

        /* xz plane at the middle row: one row of every frame, as GET .../slice/xz reads it. */
        cut_req q = {.s = dataset_stack(d), .workers = workers, .xz = 1, .y = ny / 2, .nx = nx,
                     .nz = nz, .out = xz};
        double c0 = cpu_s();
        t0 = tess_mono_s();
        if (run_cut(&q) != 0)
            return 1;
        printf("RESULT xz_plane %.6f s\n", tess_mono_s() - t0);
        fprintf(stderr, "stackbench: xz_plane: %.3f s of CPU\n", cpu_s() - c0);
    }

    if (want("series_before")) {
        /* Series before rechunk: one pixel of every frame, as GET .../series reads it. */
        for (long i = 0; i < nbefore; i++) {
            long x = rand() % nx, y = rand() % ny;
            cut_req q = {.s = dataset_stack(d), .workers = workers, .xz = 0, .x = x, .y = y,
                         .nx = nx, .nz = nz, .out = series};
            t0 = tess_mono_s();
            if (run_cut(&q) != 0)
                return 1;
            times[i] = tess_mono_s() - t0;
        }
        qsort(times, (size_t)nbefore, sizeof *times, cmp_double);
        printf("RESULT series_before_p50 %.6f s\n", times[nbefore / 2]);
    }

    char body[1024], product[4200], store[4200];
    const char *psb = getenv("STACKBENCH_PS_BLOCK_MB");
    if (psb && atol(psb) > 0)
        cube_spectrum_set_block_bytes(atol(psb) << 20);
    const char *zrc = getenv("STACKBENCH_ZR_CHUNK_MB");
    if (zrc && atol(zrc) > 0)
        stack_set_zr_chunk_bytes(dataset_stack(d), (size_t)atol(zrc) << 20);
    if (want("readmodes"))
        readmodes(d, threads);
    if (want("decode_floor"))
        for (int rep = 0; rep < 2; rep++)
            decode_floor(d, threads);
    if (want("zdirect"))
        for (int rep = 0; rep < 3; rep++)
            printf("RESULT mean_z_direct_int %.6f s\n", zdirect(d, threads, 0, plane));
    if (want("zdouble"))
        printf("RESULT mean_z_direct_double %.6f s\n",
               zdirect(d, threads, STACK_ZR_FORCE_DOUBLE, plane));
    /* Mean along z and along xy. */
    if (want("mean_z")) {
        snprintf(body, sizeof body,
                 "{\"type\":\"reduce\",\"dataset\":\"bench\",\"op\":\"mean\",\"axis\":\"z\","
                 "\"output\":{\"name\":\"mean_z\"}}");
        snprintf(product, sizeof product, "%s/mean_z.fits", workroot);
        printf("RESULT mean_z %.6f s\n", run_job("mean_z", &job_kind_reduce, &env, body, workroot, product,
                                                 threads));
        drop(product);
        stack_stats ss;
        stack_get_stats(dataset_stack(d), &ss);
        printf("RESULT mean_z_decoded_peak %.1f MB (one chunk at most %.1f MB)\n",
               ss.decoded_peak / 1048576.0, ss.zr_held_peak / 1048576.0);
    }

    if (want("mean_xy")) {
        snprintf(body, sizeof body,
                 "{\"type\":\"reduce\",\"dataset\":\"bench\",\"op\":\"mean\",\"axis\":\"xy\","
                 "\"output\":{\"name\":\"mean_xy\"}}");
        snprintf(product, sizeof product, "%s/mean_xy.fits", workroot);
        printf("RESULT mean_xy %.6f s\n", run_job("mean_xy", &job_kind_reduce, &env, body, workroot, product,
                                                  threads));
        drop(product);
    }

    if (want("ps")) {
        /* Power spectrum straight from the frames (stages: transpose, then FFT). */
        snprintf(body, sizeof body,
                 "{\"type\":\"power_spectrum\",\"dataset\":\"bench\",\"output\":{\"name\":\"ps\"}}");
        snprintf(product, sizeof product, "%s/ps.fits", workroot);
        printf("RESULT power_spectrum_from_frames %.6f s\n",
               run_job("power_spectrum_from_frames", &job_kind_power_spectrum, &env, body, workroot, product, threads));
        drop(product);
    }

    if (want("rechunk")) {
        /* Rechunk, then series from the copy. */
        snprintf(body, sizeof body, "{\"type\":\"rechunk\",\"dataset\":\"bench\"}");
        snprintf(store, sizeof store, "%s/bench.tcs", workroot);
        printf("RESULT rechunk %.6f s\n", run_job("rechunk", &job_kind_rechunk, &env, body, workroot, store,
                                                  threads));
        /* the copy against the frames: 20 random series, value by value
         * (STACKBENCH_JOBS_ONLY=1: left out, as the series timings, for profiles of the
         * job alone) */
        const char *jo = getenv("STACKBENCH_JOBS_ONLY");
        int jobs_only = jo && *jo == '1';
        long bad = 0;
        for (int i = 0; i < 20 && !jobs_only; i++) {
            long x = rand() % nx, y = rand() % ny;
            if (chunkstore_read_series(store, x, y, series, nz, err, sizeof err) != 0) {
                fprintf(stderr, "stackbench: %s\n", err);
                return 1;
            }
            for (long z = 0; z < nz; z++) {
                double v;
                if (dataset_read_region(d, z, x, y, 1, 1, &v, err, sizeof err) != 0)
                    return 1;
                bad += !(v == series[z] || (isnan(v) && isnan(series[z])));
            }
        }
        if (!jobs_only)
            printf("RESULT rechunk_check_mismatches %ld of %ld\n", bad, 20 * nz);
        long nafter = jobs_only ? 0 : 1000;
        for (long i = 0; i < nafter; i++) {
            long x = rand() % nx, y = rand() % ny;
            t0 = tess_mono_s();
            if (chunkstore_read_series(store, x, y, series, nz, err, sizeof err) != 0) {
                fprintf(stderr, "stackbench: %s\n", err);
                return 1;
            }
            times[i] = tess_mono_s() - t0;
        }
        if (nafter) {
            qsort(times, (size_t)nafter, sizeof *times, cmp_double);
            printf("RESULT series_after_p50 %.6f s\n", times[nafter / 2]);
            printf("RESULT series_after_p99 %.6f s\n", times[nafter * 99 / 100]);
        }

        if (want("ps") || want("ps_copy")) {
            /* Power spectrum from the rechunked copy (attached as the runner would). */
            dataset_attach_profile(d, store);
            snprintf(body, sizeof body,
                     "{\"type\":\"power_spectrum\",\"dataset\":\"bench\",\"output\":{\"name\":\"ps2\"}}");
            snprintf(product, sizeof product, "%s/ps2.fits", workroot);
            printf("RESULT power_spectrum_from_copy %.6f s\n",
                   run_job("power_spectrum_from_copy", &job_kind_power_spectrum, &env, body, workroot, product, threads));
            drop(product);
        }
        drop(store);
    }

    if (want("recenter")) {
        /* Recenter: crops of half the frame. */
        snprintf(body, sizeof body,
                 "{\"type\":\"recenter\",\"dataset\":\"bench\",\"size\":[%ld,%ld],"
                 "\"output\":{\"name\":\"rc\"}}", nx / 2, ny / 2);
        snprintf(product, sizeof product, "%s/rc.fits", workroot);
        printf("RESULT recenter %.6f s\n", run_job("recenter", &job_kind_recenter, &env, body, workroot, product,
                                                   threads));
        drop(product);
    }

    if (want("ingest")) {
        /* Ingest (frames decoded once into the plane store, attached as the runner does),
         * then the store's raw read rate (pread of 1 MiB on one thread, the file just
         * written: from the page cache), mean along z and the xz plane from it. */
        snprintf(body, sizeof body, "{\"type\":\"ingest\",\"dataset\":\"bench\"}");
        snprintf(store, sizeof store, "%s/ingest.fits", workroot);
        double ti = run_job("ingest", &job_kind_ingest, &env, body, workroot, store, threads);
        printf("RESULT ingest %.6f s\n", ti);
        if (ti < 0 || dataset_attach_profile(d, store) != 0) {
            fprintf(stderr, "stackbench: ingest failed\n");
            return 1;
        }
        int fd = open(store, O_RDONLY);
        unsigned char *buf = malloc(1 << 20);
        unsigned long long bytes = 0, sum = 0;
        double best = -1;
        for (int rep = 0; rep < 3 && fd >= 0 && buf; rep++) {
            bytes = 0;
            t0 = tess_mono_s();
            for (ssize_t r; (r = pread(fd, buf, 1 << 20, (off_t)bytes)) > 0; bytes += (size_t)r)
                sum += buf[0];
            double t = tess_mono_s() - t0;
            best = best < 0 || t < best ? t : best;
        }
        if (fd >= 0)
            close(fd);
        free(buf);
        printf("RESULT store_read %.6f s (%.1f MB/s, %llu bytes)\n", best,
               (double)bytes / 1048576.0 / best, bytes + (sum & 0));
        snprintf(body, sizeof body,
                 "{\"type\":\"reduce\",\"dataset\":\"bench\",\"op\":\"mean\",\"axis\":\"z\","
                 "\"output\":{\"name\":\"mean_z2\"}}");
        snprintf(product, sizeof product, "%s/mean_z2.fits", workroot);
        printf("RESULT mean_z_after_ingest %.6f s\n",
               run_job("mean_z_after_ingest", &job_kind_reduce, &env, body, workroot, product, threads));
        drop(product);
        for (int i = 0; i < 5; i++) {
            t0 = tess_mono_s();
            for (long z = 0; z < nz; z++)
                if (dataset_read_region(d, z, 0, ny / 2 + i, nx, 1, plane, err, sizeof err) != 0) {
                    fprintf(stderr, "stackbench: %s\n", err);
                    return 1;
                }
            times[i] = tess_mono_s() - t0;
        }
        qsort(times, 5, sizeof *times, cmp_double);
        printf("RESULT xz_plane_after_ingest %.6f s\n", times[2]);
        for (int i = 0; i < 5; i++) {
            t0 = tess_mono_s();
            if (dataset_read_region(d, nz / 2, 0, 0, nx, ny, plane, err, sizeof err) != 0)
                return 1;
            times[i] = tess_mono_s() - t0;
        }
        qsort(times, 5, sizeof *times, cmp_double);
        printf("RESULT xy_plane_after_ingest %.6f s\n", times[2]);
        drop(store);
    }

    free(plane);
    free(series);
    free(xz);
    pool_free(workers);
    free(times);
    catalog_free(cat);
    config_release(&cfg);
    return 0;
}
