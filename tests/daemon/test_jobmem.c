/* jobs.memory_mb measured, not only estimated: each scenario runs one job in a fresh child
 * process, as the job runner runs it (daemon/jobs/jobs.c: the estimate, then every stage
 * with jobbudget_blocks blocks in flight, handed to a pool of POOL_THREADS workers), while
 * a thread of the child reads RssAnon of /proc/self/status every millisecond.  What counts
 * is anonymous memory (heap: buffers, decoded frames, FFT buffers, the kernels' scratch)
 * over the child's baseline before the job was planned; file-backed pages of mapped inputs
 * and work files (RssFile, RssShmem on tmpfs) are page cache and are only printed (README,
 * `jobs.memory_mb`).  The budget is the smallest jobs.memory_mb (at least 16, its floor)
 * that admits the job (a job estimated at 51 MB under 52 MB once peaked at 2.4x that),
 * then the smallest that lets two blocks run at once.
 *
 * Scenarios: power_spectrum of 96 16-bit PNG frames of 512 x 512 (decoded frames are heap
 * copies kept by the dataset's reader), and an exact mosaic of two 8192 x 288 strips onto
 * 0.9-arcsecond pixels (wide output bands: the exact kernel's scratch grows with their
 * width).  Before the estimates counted those, the peaks were 2.85x and 1.78x the budget.
 * And the stack jobs (power_spectrum, rechunk, reduce along z) on 200 and 800 frames: the
 * anonymous peak must not grow with the frame count (test_stack_jobs_flat). */
#include <check.h>
#include <fitsio.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/jobs/jobbudget.h"
#include "daemon/jobs/job_mosaic.h"
#include "daemon/jobs/job_stack.h"
#include "engine/cube/spectrum.h"
#include "engine/base/error.h"
#include "engine/image/stack.h"
#include "tests/testutil.h"

#define MB 1048576.0
#define POOL_THREADS 4   /* the pool of a four-core host */

/* ASan's shadow memory and quarantine, and valgrind's own, are anonymous memory of the
 * process too: under them the jobs run on smaller inputs and their peaks are only printed. */
#if defined(__SANITIZE_ADDRESS__)
#define TT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_ASAN 1
#endif
#endif
#ifndef TT_ASAN
#define TT_ASAN 0
#endif
static int measured_only;
static long PS_NX = 512, PS_NY = 512, PS_NZ = 96;   /* the power_spectrum's PNG frames */
static long MOS_W = 8192, MOS_H = 288;              /* the mosaic's two strips */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

/* Removes dir and everything under it. */
static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the child: RssAnon sampled while one job runs ---------------------------------- */

static long rss_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

typedef struct sampler {
    volatile int stop;
    long peak_anon_kb, peak_file_kb;
} sampler;

static void *sample(void *arg)
{
    sampler *s = arg;
    const struct timespec ms = {0, 1000000};
    while (!s->stop) {
        long a = rss_kb("RssAnon"), f = rss_kb("RssFile") + rss_kb("RssShmem");
        if (a > s->peak_anon_kb)
            s->peak_anon_kb = a;
        if (f > s->peak_file_kb)
            s->peak_file_kb = f;
        nanosleep(&ms, NULL);
    }
    return NULL;
}

/* One stage on a pool of POOL_THREADS workers with at most `inflight` blocks running,
 * as the runner hands blocks to the server's pool: any idle worker takes the next one,
 * so the blocks of a job pass through every worker (and its malloc arena). */
typedef struct stage_run {
    const job_kind *k;
    void *state;
    int stage;
    long nblocks, next;
    int running, inflight;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int rc;
    char err[256];
} stage_run;

static void *stage_worker(void *arg)
{
    stage_run *sr = arg;
    static const volatile int no_cancel = 0;
    pthread_mutex_lock(&sr->lock);
    for (;;) {
        while (sr->next < sr->nblocks && sr->running >= sr->inflight)
            pthread_cond_wait(&sr->cond, &sr->lock);
        if (sr->next >= sr->nblocks)
            break;
        long b = sr->next++;
        sr->running++;
        pthread_mutex_unlock(&sr->lock);
        char err[256] = "";
        int rc = sr->k->run_block(sr->state, sr->stage, b, &no_cancel, err, sizeof err);
        /* let another worker take the next block, as a pool's queue does */
        sched_yield();
        pthread_mutex_lock(&sr->lock);
        sr->running--;
        pthread_cond_broadcast(&sr->cond);
        if (rc) {
            sr->rc = rc;
            snprintf(sr->err, sizeof sr->err, "stage %d block %ld: %s", sr->stage, b, err);
        }
    }
    pthread_mutex_unlock(&sr->lock);
    return NULL;
}

/* What a child reports to the test. */
typedef struct jobmem {
    int ok;
    int budget_mb, inflight;
    double est_mb, peak_anon_mb, peak_file_mb;
    double stage_mb[JOB_MAX_STAGES + 1];   /* anonymous peak of each stage, then finish */
    int nstages;
    double decoded_mb;                     /* decoded frames in memory at most */
    char what[240];
    char err[256];
} jobmem;

static tess_config cfg;
static catalog *cat;

/* The body's cost under jobs.memory_mb = mb; 0 when admitted. */
static int admitted(const job_kind *k, const void *req, size_t mb, job_cost *c)
{
    cfg.jobs_memory_mb = mb;
    job_env env = {&cfg, cat, POOL_THREADS, NULL, NULL};
    job_problem pb;
    memset(&pb, 0, sizeof pb);
    if (k->estimate(req, &env, c, &pb) != 0)
        return -1;
    return jobbudget_admit(&cfg, c, 0.0, 0.0, &pb);
}

/* In the child: loads config `text`, runs `body` of kind k at the tightest budget that
 * admits it with `want` blocks in flight, fills *r.  `ds`: the dataset whose reader's
 * decoded frames are reported, or NULL. */
static void run_child(const char *text, const job_kind *k, const char *body_text, int want,
                      const char *ds, jobmem *r)
{
    char err[256] = "", wd[64];
    memset(r, 0, sizeof *r);
    if (config_init(&cfg) != 0 || config_load_text(text, &cfg, err, sizeof err) != 0 ||
        catalog_open(&cfg, &cat, err, sizeof err) != 0) {
        snprintf(r->err, sizeof r->err, "config: %s", err);
        return;
    }
    json_error_t je;
    json_t *body = json_loads(body_text, 0, &je);
    job_env env = {&cfg, cat, POOL_THREADS, NULL, NULL};
    job_problem pb;
    memset(&pb, 0, sizeof pb);
    void *req = NULL;
    if (!body || jobkind_parse(k, body, &env, 0, &req, &pb) != 0) {
        snprintf(r->err, sizeof r->err, "parse: %.200s", pb.detail);
        json_decref(body);
        return;
    }
    job_cost c;
    size_t mb = 16;
    while (mb < 4096 && (admitted(k, req, mb, &c) != 0 ||
                         jobbudget_blocks(&cfg, &c, POOL_THREADS) < want))
        mb++;
    r->budget_mb = (int)mb;
    r->est_mb = (c.state_bytes + c.block_bytes) / MB;
    r->inflight = jobbudget_blocks(&cfg, &c, POOL_THREADS);
    snprintf(r->what, sizeof r->what, "%s", c.what);

    sampler smp = {0, 0, 0};
    pthread_t sth;
    pthread_create(&sth, NULL, sample, &smp);
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    long base_anon = smp.peak_anon_kb, base_file = smp.peak_file_kb;

    tt_tmpdir_make(wd, sizeof wd, "jobmem");
    job_plan plan;
    memset(&plan, 0, sizeof plan);
    int rc = k->plan(req, &env, wd, &plan, err, sizeof err);
    for (int s = 0; !rc && s < plan.nstages; s++) {
        stage_run sr = {k, plan.state, s, plan.nblocks[s], 0, 0, r->inflight,
                        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, ""};
        pthread_t th[POOL_THREADS];
        for (int i = 0; i < POOL_THREADS; i++)
            pthread_create(&th[i], NULL, stage_worker, &sr);
        for (int i = 0; i < POOL_THREADS; i++)
            pthread_join(th[i], NULL);
        if (sr.rc) {
            rc = sr.rc;
            snprintf(err, sizeof err, "%s", sr.err);
        }
        r->stage_mb[s] = (double)(smp.peak_anon_kb - base_anon) / 1024.0;
        r->nstages = s + 1;
    }
    char product[128];
    snprintf(product, sizeof product, "%s/product.fits", wd);
    job_product prod;
    if (!rc)
        rc = k->finish(plan.state, product, &prod, err, sizeof err);
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    smp.stop = 1;
    pthread_join(sth, NULL);
    r->stage_mb[r->nstages] = (double)(smp.peak_anon_kb - base_anon) / 1024.0;
    if (plan.state)
        k->release(plan.state);
    const dataset *d = ds ? catalog_find(cat, ds) : NULL;
    if (d) {
        stack_stats st;
        stack_get_stats(dataset_stack(d), &st);
        r->decoded_mb = (double)st.decoded_peak / MB;
    }
    r->peak_anon_mb = (double)(smp.peak_anon_kb - base_anon) / 1024.0;
    r->peak_file_mb = (double)(smp.peak_file_kb - base_file) / 1024.0;
    if (rc)
        snprintf(r->err, sizeof r->err, "job: %s", err);
    else
        r->ok = 1;
    rm_tree(wd);
    k->req_free(req);
    json_decref(body);
    catalog_free(cat);
    config_release(&cfg);
}

/* Runs the scenario in a fresh process; returns what it measured. */
static jobmem measure(const char *what, const char *text, const job_kind *k,
                      const char *body_text, int want, const char *ds)
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        jobmem r;
        run_child(text, k, body_text, want, ds, &r);
        ssize_t n = write(fd[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    jobmem r;
    memset(&r, 0, sizeof r);
    ssize_t n = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert_msg(n == (ssize_t)sizeof r && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s: the child died (status %d)", what, st);
    ck_assert_msg(r.ok, "%s: %s", what, r.err);
    printf("%s: jobs.memory_mb %d, estimated %.1f MB, %d blocks in flight; measured "
           "anonymous peak %.1f MB over the baseline (%.2fx the budget), file-backed %.1f "
           "MB\n", what, r.budget_mb, r.est_mb, r.inflight, r.peak_anon_mb,
           r.peak_anon_mb / r.budget_mb, r.peak_file_mb);
    printf("  largest block: %s; peak after each stage and finish:", r.what);
    for (int i = 0; i <= r.nstages; i++)
        printf(" %.1f", r.stage_mb[i]);
    printf(" MB; decoded frames at most %.1f MB\n", r.decoded_mb);
    fflush(stdout);
    return r;
}

/* ---- the scenarios ------------------------------------------------------------------ */

static char gendir[64];

START_TEST(test_power_spectrum_png16)
{
    unsigned short *pv = malloc(sizeof *pv * (size_t)(PS_NX * PS_NY));
    for (long z = 0; z < PS_NZ; z++) {
        for (long i = 0; i < PS_NX * PS_NY; i++)
            pv[i] = (unsigned short)((i * 7 + z * 131) % 60000);
        char p[128], e[256];
        snprintf(p, sizeof p, "%s/f_%03ld.png", gendir, z);
        ck_assert_msg(frame_write_png(p, pv, PS_NX, PS_NY, 16, 1, e, sizeof e) == 0, "%s", e);
    }
    free(pv);
    char text[1024];
    snprintf(text, sizeof text, "{\"data_roots\": [\"%s\"], \"datasets\": ["
             "{\"name\": \"p16\", \"frames\": \"%s/f_*.png\"}]}", gendir, gendir);
    for (int want = 1; want <= 2; want++) {
        jobmem r = measure("power_spectrum", text, &job_kind_power_spectrum,
                           "{\"type\": \"power_spectrum\", \"dataset\": \"p16\", "
                           "\"output\": {\"name\": \"p16ps\"}}", want, "p16");
        ck_assert_msg(measured_only || r.peak_anon_mb <= r.budget_mb, "power_spectrum: %.1f "
                      "MB anonymous over jobs.memory_mb = %d", r.peak_anon_mb, r.budget_mb);
    }
}
END_TEST

/* Strip i (0 or 1) of MOS_W x MOS_H float32 pixels of 1 arcsec, the second above the
 * first with 32 rows of overlap: gendir/t_I.fits. */
static void write_strip(int i)
{
    char p[128];
    snprintf(p, sizeof p, "!%s/t_%d.fits", gendir, i);
    fitsfile *f;
    int st = 0;
    long naxes[2] = {MOS_W, MOS_H};
    fits_create_file(&f, p, &st);
    fits_create_img(f, FLOAT_IMG, 2, naxes, &st);
    double crpix1 = MOS_W / 2.0, crpix2 = MOS_H - i * (MOS_H - 32.0);
    double cdelt1 = -1.0 / 3600.0, cdelt2 = 1.0 / 3600.0, ra = 150.0, dec = 2.0;
    fits_write_key(f, TSTRING, "CTYPE1", "RA---TAN", NULL, &st);
    fits_write_key(f, TSTRING, "CTYPE2", "DEC--TAN", NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX1", &crpix1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX2", &crpix2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT1", &cdelt1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT2", &cdelt2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL1", &ra, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL2", &dec, NULL, &st);
    float *v = malloc(sizeof *v * (size_t)(MOS_W * MOS_H));
    for (long k = 0; k < MOS_W * MOS_H; k++)
        v[k] = (float)(100.0 + 10.0 * i + (double)((k * 13) % 97));
    fits_write_img(f, TFLOAT, 1, MOS_W * MOS_H, v, &st);
    fits_close_file(f, &st);
    free(v);
    ck_assert_msg(st == 0, "cfitsio status %d writing %s", st, p);
}

START_TEST(test_mosaic_exact)
{
    json_t *in = json_array();
    for (int i = 0; i < 2; i++) {
        write_strip(i);
        char p[128];
        snprintf(p, sizeof p, "%s/t_%d.fits", gendir, i);
        json_array_append_new(in, json_string(p));
    }
    /* The target: 0.9 arcsec pixels over both strips: wide output bands, whose exact
     * kernel scratch grows with their width. */
    char l[4][81];
    long nx = (long)(MOS_W / 0.9), ny = (long)((2.0 * MOS_H - 32.0) / 0.9);
    snprintf(l[0], sizeof l[0], "NAXIS1  = %ld", nx);
    snprintf(l[1], sizeof l[1], "NAXIS2  = %ld", ny);
    snprintf(l[2], sizeof l[2], "CRPIX1  = %.1f", nx / 2.0);
    snprintf(l[3], sizeof l[3], "CRPIX2  = %.1f", ny / 2.0 + 16.0 / 0.9);
    const char *lines[] = {"NAXIS   = 2", l[0], l[1], "CTYPE1  = 'RA---TAN'",
                           "CTYPE2  = 'DEC--TAN'", l[2], l[3], "CRVAL1  = 150.0",
                           "CRVAL2  = 2.0", "CDELT1  = -0.00025", "CDELT2  = 0.00025", NULL};
    int nk = 0;
    char *cards = tt_make_cards(lines, &nk);
    json_t *b = json_pack("{s:s, s:o, s:{s:s}, s:s, s:{s:s}}", "type", "mosaic",
                          "inputs", in, "target", "header", cards, "method", "exact",
                          "output", "name", "mexact");
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    free(cards);
    char text[256];
    snprintf(text, sizeof text, "{\"data_roots\": [\"%s\"]}", gendir);
    for (int want = 1; want <= 2; want++) {
        jobmem r = measure("mosaic exact", text, &job_kind_mosaic, body, want, NULL);
        ck_assert_msg(measured_only || r.peak_anon_mb <= r.budget_mb, "mosaic: %.1f MB "
                      "anonymous over jobs.memory_mb = %d", r.peak_anon_mb, r.budget_mb);
    }
    free(body);
}
END_TEST

/* Flat in the frame count: each stack job on FLAT_N and on 4 x FLAT_N 8-bit PNG frames of
 * FLAT_NX x FLAT_NY, its anonymous peak at the larger count within FLAT_MARGIN_MB of the
 * smaller's (plus 10%).  Before the spectrum's blocks were bounded in bytes, a block held
 * 16 rows of every series: 4 x the frames, 4 x its memory (4 MB to 16 MB here); with a
 * block budget of 1 MB both counts hold about 1 MB a block.  The other jobs hold frames in
 * groups of bounded bytes (rechunk, stage A: 64 MB; reduce: ZR_CHUNK_BYTES) and a plane of
 * partials. */
static long FLAT_NX = 256, FLAT_NY = 32, FLAT_N = 200;
#define FLAT_MARGIN_MB 3.0

static void write_flat_frames(const char *dir, long n)
{
    unsigned short *pv = malloc(sizeof *pv * (size_t)(FLAT_NX * FLAT_NY));
    for (long z = 0; z < n; z++) {
        for (long i = 0; i < FLAT_NX * FLAT_NY; i++)
            pv[i] = (unsigned short)((i * 7 + z * 131) % 251);
        char p[300], e[256];
        snprintf(p, sizeof p, "%.128s/f_%04ld.png", dir, z);
        ck_assert_msg(frame_write_png(p, pv, FLAT_NX, FLAT_NY, 8, 1, e, sizeof e) == 0, "%s", e);
    }
    free(pv);
}

START_TEST(test_stack_jobs_flat)
{
    static const struct {
        const char *what;
        const job_kind *k;
        const char *body;
    } jobs[] = {
        {"power_spectrum", &job_kind_power_spectrum,
         "{\"type\": \"power_spectrum\", \"dataset\": \"s\", \"output\": {\"name\": \"sps\"}}"},
        {"rechunk", &job_kind_rechunk, "{\"type\": \"rechunk\", \"dataset\": \"s\"}"},
        {"reduce mean z", &job_kind_reduce,
         "{\"type\": \"reduce\", \"dataset\": \"s\", \"op\": \"mean\", \"axis\": \"z\", "
         "\"output\": {\"name\": \"smean\"}}"},
    };
    cube_spectrum_set_block_bytes(1L << 20);
    char dirs[2][128], text[2][1024];
    for (int c = 0; c < 2; c++) {
        snprintf(dirs[c], sizeof dirs[c], "%s/n%d", gendir, c);
        ck_assert_int_eq(mkdir(dirs[c], 0755), 0);
        write_flat_frames(dirs[c], c ? 4 * FLAT_N : FLAT_N);
        snprintf(text[c], sizeof text[c], "{\"data_roots\": [\"%s\"], \"datasets\": ["
                 "{\"name\": \"s\", \"frames\": \"%s/f_*.png\"}]}", dirs[c], dirs[c]);
    }
    for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
        double peak[2];
        for (int c = 0; c < 2; c++) {
            char what[96];
            snprintf(what, sizeof what, "%s, %ld frames", jobs[j].what,
                     c ? 4 * FLAT_N : FLAT_N);
            jobmem r = measure(what, text[c], jobs[j].k, jobs[j].body, 2, "s");
            peak[c] = r.peak_anon_mb;
        }
        ck_assert_msg(measured_only || peak[1] <= 1.1 * peak[0] + FLAT_MARGIN_MB,
                      "%s: %.1f MB anonymous at %ld frames against %.1f MB at %ld",
                      jobs[j].what, peak[1], 4 * FLAT_N, peak[0], FLAT_N);
    }
    cube_spectrum_set_block_bytes(0);
}
END_TEST

static void setup(void)
{
    tt_tmpdir_make(gendir, sizeof gendir, "jobmemgen");
}

static void teardown(void)
{
    rm_tree(gendir);
}

int main(void)
{
    measured_only = TT_ASAN || tt_under_valgrind();
    if (measured_only) {
        PS_NX = PS_NY = 64;
        PS_NZ = 24;
        MOS_W = 512;
        MOS_H = 64;
        FLAT_N = 24;
        printf("under a memory checker: small inputs, peaks printed, not checked\n");
    }
    Suite *s = suite_create("jobmem");
    TCase *tc = tcase_create("jobmem");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_power_spectrum_png16);
    tcase_add_test(tc, test_mosaic_exact);
    tcase_add_test(tc, test_stack_jobs_flat);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
