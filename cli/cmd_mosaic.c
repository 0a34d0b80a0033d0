/* tessera mosaic: the mosaic engine offline, its blocks run on threads of this process. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "engine/fits/fitsimg.h"
#include "engine/mosaic/mosaic.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/pool.h"

static const char mosaic_usage[] =
    "usage: tessera mosaic IN.fits[HDU]... -o OUT.fits\n"
    "                      [--target HDR_OR_FITS[HDU] | --auto [--frame F] [--projection P]]\n"
    "                      [--method M] [--combine C] [--match-background[=plane|level]]\n"
    "                      [--threads N] [--stage-memory MB] [--quiet] [--timing]\n"
    "\n"
    "Reprojects every input image (HDU number HDU, 0-based, default 0) onto one grid, each\n"
    "only over its own box of the output, optionally matches their backgrounds, and\n"
    "combines them.\n"
    "  --target T             a text header (one card a line) or a FITS file whose header\n"
    "                         gives the WCS and NAXIS1/NAXIS2 of the output\n"
    "  --auto                 (the default) the grid of astropy's find_optimal_celestial_wcs:\n"
    "                         the finest input pixel scale, centred on the mean of the\n"
    "                         inputs' reference points, just covering every input\n"
    "  --frame F              of --auto: icrs, fk5, fk4, galactic, ecliptic (default: the\n"
    "                         first input's)\n"
    "  --projection P         of --auto: a three-letter code (default TAN)\n"
    "  --method M             nearest, bilinear (default), bicubic, lanczos3, exact\n"
    "  --combine C            mean (default, weighted by coverage), sum, median, min, max,\n"
    "                         first, last\n"
    "  --match-background     fit a plane a + b x + c y to the differences on every\n"
    "                         overlap and solve for one plane per input (mean correction\n"
    "                         zero); =level fits constant offsets only\n"
    "  --threads N            threads (default 0 = one per core)\n"
    "  --stage-memory MB      memory (MB, 10^6 bytes) the reprojected inputs may take\n"
    "                         instead of files in the work directory (default: a quarter\n"
    "                         of the machine's memory; 0: always files); more than that\n"
    "                         and they go to files\n"
    "  --quiet                no progress bar (it is drawn only on a terminal anyway)\n"
    "  --timing               print the time of each stage (wall, and CPU: user + system;\n"
    "                         for the coadd also the bytes it reads and writes at the least)\n"
    "OUT.fits: HDU 0 the mosaic (float32; NaN where no input covers a pixel) with the\n"
    "target's WCS and provenance cards (NINPUTS, INPn, METHOD, COMBINE, BGMATCH and the\n"
    "fitted planes BGAn, BGBn, BGCn); HDU 1 COVERAGE, the summed weight of the inputs.\n"
    "Intermediate files go to a work directory next to OUT.fits, removed at the end; the\n"
    "output is written under a temporary name and renamed.\n"
    "Exit status: 0 done, 1 failure, 2 bad command line, 3 no input overlaps the target,\n"
    "130 interrupted (SIGINT/SIGTERM).\n";

const char *cmd_mosaic_usage(void)
{
    return mosaic_usage;
}

/* "path[N]" -> malloc'd path and HDU N (0 without a suffix); NULL on a bad suffix. */
static char *split_path_hdu(const char *arg, int *hdu)
{
    size_t n = strlen(arg);
    *hdu = 0;
    if (n >= 3 && arg[n - 1] == ']') {
        const char *lb = strrchr(arg, '[');
        if (lb && lb > arg && lb + 1 < arg + n - 1) {
            char *end;
            long v = strtol(lb + 1, &end, 10);
            if (end != arg + n - 1 || v < 0 || v > 100000)
                return NULL;
            *hdu = (int)v;
            n = (size_t)(lb - arg);
        }
    }
    return strndup(arg, n);
}

/* The target's cards from a text header or a FITS file.  Returns 0 or CLI_EXIT_FAIL. */
static int read_target_cards(const char *arg, char **cards, int *nkeys)
{
    int hdu = 0;
    char *path = split_path_hdu(arg, &hdu);
    if (!path) {
        cli_msg("mosaic: bad HDU number in '%s'", arg);
        return CLI_EXIT_FAIL;
    }
    char err[256] = "";
    int fd = tess_open_regular(path, 0, NULL, err, sizeof err);
    FILE *fp = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!fp) {
        if (fd >= 0) {
            tess_seterr(err, sizeof err, "cannot open %s: %s", path, strerror(errno));
            close(fd);
        }
        cli_msg("cannot read the target: %s", err);
        free(path);
        return CLI_EXIT_FAIL;
    }
    char head[81] = "";
    size_t got = fread(head, 1, 81, fp);
    int rc = CLI_EXIT_FAIL;
    if (got == 81 && memcmp(head, "SIMPLE  =", 9) == 0 && !memchr(head, '\n', 81)) {
        fclose(fp);
        fitsimg_info info;
        if (fitsimg_read_info(path, hdu, &info, err, sizeof err) != 0) {
            cli_msg("target '%s': %s", path, err);
        } else {
            *cards = malloc((size_t)info.nkeys * 80 + 1);
            if (*cards) {
                memcpy(*cards, info.header, (size_t)info.nkeys * 80 + 1);
                *nkeys = info.nkeys;
                rc = CLI_EXIT_OK;
            }
            fitsimg_info_release(&info);
        }
        free(path);
        return rc;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    rewind(fp);
    while (text) {
        size_t r = fread(text + len, 1, cap - len, fp);
        len += r;
        if (r == 0)
            break;
        if (len == cap) {
            if (cap > ((size_t)64 << 20))
                break;
            char *t = realloc(text, cap * 2);
            if (!t) {
                free(text);
                text = NULL;
                break;
            }
            text = t;
            cap *= 2;
        }
    }
    fclose(fp);
    if (!text) {
        cli_msg("out of memory");
    } else if (mos_cards_from_text(text, len, cards, nkeys, err, sizeof err) != 0) {
        cli_msg("target '%s': %s", path, err);
    } else {
        rc = CLI_EXIT_OK;
    }
    free(text);
    free(path);
    return rc;
}

/* The files of a work directory being removed (remove_workdir). */
typedef struct unlinks {
    const char *dir;
    char **names;
} unlinks;

static void unlink_slice(void *p, size_t i0, size_t i1)
{
    const unlinks *u = p;
    for (size_t i = i0; i < i1; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", u->dir, u->names[i]);
        unlink(path);
    }
}

/* Removes the files of the flat directory `dir`, then the directory.  The files are
 * unlinked on the workers (p, may be NULL) as well as here: freeing a large file's
 * cached pages is most of the time, and files apart do not wait for each other. */
static void remove_workdir(const char *dir, pool *p, int threads)
{
    DIR *d = opendir(dir);
    if (d) {
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *name = strdup(e->d_name);
            if (name && n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                char **nn = realloc(names, nc * sizeof *nn);
                if (nn) {
                    names = nn;
                    cap = nc;
                }
            }
            if (!name || n == cap) {       /* out of memory: this one now */
                char path[PATH_MAX];
                snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                unlink(path);
                free(name);
                continue;
            }
            names[n++] = name;
        }
        closedir(d);
        unlinks u = { dir, names };
        int ns = threads < 1 ? 1 : (size_t)threads < n ? threads : (int)(n > 0 ? n : 1);
        pool_for(p, POOL_BATCH, ns, n, 1, unlink_slice, &u);
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
    }
    rmdir(dir);
}

/* Shared by the worker threads of one stage. */
typedef struct runner {
    mosaic *m;
    int stage;
    long nblocks;
    long *order;             /* the order to take blocks in (mos_block_order), or NULL */
    atomic_long next;
    atomic_int failed;
    volatile int *cancel;
    pthread_mutex_t lock;
    char err[512];
    int rc;
    /* progress over every stage's blocks */
    long done, total;
    bar *b;                  /* NULL: no bar */
} runner;

/* One thread's share of a stage: takes blocks until none is left (a pool_for slice). */
static void stage_slice(void *p, size_t i0, size_t i1)
{
    (void)i0;
    (void)i1;
    runner *r = p;
    char err[512];
    for (;;) {
        if (atomic_load(&r->failed) || *r->cancel)
            break;
        long b = atomic_fetch_add(&r->next, 1);
        if (b >= r->nblocks)
            break;
        if (r->order)
            b = r->order[b];
        err[0] = '\0';
        int rc = mos_run_block(r->m, r->stage, b, r->cancel, err, sizeof err);
        pthread_mutex_lock(&r->lock);
        if (rc != 0) {
            if (!r->rc) {
                r->rc = rc;
                snprintf(r->err, sizeof r->err, "%s", err);
            }
            atomic_store(&r->failed, 1);
        } else {
            r->done++;
            if (r->b)
                bar_update(r->b, r->done, r->total);
        }
        pthread_mutex_unlock(&r->lock);
    }
}

/* CPU time of the process so far, user and system (s). */
/* Blocks allocate and free the same few megabytes (a band's pixels, the reprojection's
 * tables) hundreds of times.  glibc's default thresholds hand such buffers back to the
 * system at each free (munmap, or an arena trimmed), so that the next block faults in
 * and zeroes fresh pages (transparent huge pages, for a large table): about a fifth of
 * the reprojection's CPU time on 64 inputs of 512^2.  Here buffers under 32 MiB come
 * from the arenas and each arena keeps up to 64 MiB freed at its top for the next block
 * (at most that much more memory per arena; larger buffers are mapped and unmapped as
 * before).  glibc only (mallopt); elsewhere nothing changes. */
static void keep_freed_memory(void)
{
#if defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec
           + (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Raises the cancel flag that mos_run_block polls (cli_signals_start). */
static void on_signal(void *cancel, int sig)
{
    *(volatile int *)cancel = sig;
}

int cmd_mosaic(int argc, char **argv)
{
    int n = 0, rc = CLI_EXIT_USAGE, quiet = 0, timing = 0, threads = 0, want_auto = 0;
    double stage_mb = -1;   /* --stage-memory; < 0: a quarter of the physical memory */
    const char *out = NULL, *target = NULL, *frame = NULL, *proj = NULL;
    mos_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.method = RP_BILINEAR;
    sp.combine = MOS_MEAN;
    sp.bg = MOS_BG_NONE;
    mos_input *ins = calloc((size_t)(argc > 1 ? argc : 1), sizeof(mos_input));
    char **paths = calloc((size_t)(argc > 1 ? argc : 1), sizeof(char *));
    char *tcards = NULL, *workdir = NULL, *tmp = NULL;
    mosaic *m = NULL;
    volatile int cancel = 0;
    pthread_t sigth;
    int have_sig = 0;
    pool *workers = NULL;
    if (!ins || !paths) {
        cli_msg("out of memory");
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
#define OPT(name) (strcmp(a, name) == 0 || (strncmp(a, name "=", sizeof(name)) == 0 && \
                                            (val = a + sizeof(name))))
#define NEED()                                                              \
    do {                                                                    \
        if (!val) {                                                         \
            if (i + 1 >= argc) {                                            \
                cli_msg("mosaic: %s needs a value", a);                     \
                goto done;                                                  \
            }                                                               \
            val = argv[++i];                                                \
        }                                                                   \
    } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(mosaic_usage, stdout);
            rc = CLI_EXIT_OK;
            goto done;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (strcmp(a, "--timing") == 0) {
            timing = 1;
        } else if (strcmp(a, "--auto") == 0) {
            want_auto = 1;
        } else if (strcmp(a, "--match-background") == 0) {
            sp.bg = MOS_BG_PLANE;
        } else if (strncmp(a, "--match-background=", 19) == 0) {
            if (strcmp(a + 19, "plane") == 0 || strcmp(a + 19, "true") == 0) {
                sp.bg = MOS_BG_PLANE;
            } else if (strcmp(a + 19, "level") == 0) {
                sp.bg = MOS_BG_LEVEL;
            } else if (strcmp(a + 19, "none") == 0 || strcmp(a + 19, "false") == 0) {
                sp.bg = MOS_BG_NONE;
            } else {
                cli_msg("mosaic: --match-background takes plane, level or none, not '%s'", a + 19);
                goto done;
            }
        } else if (OPT("-o") || OPT("--output")) {
            NEED();
            out = val;
        } else if (OPT("--target")) {
            NEED();
            target = val;
        } else if (OPT("--frame")) {
            NEED();
            frame = val;
        } else if (OPT("--projection")) {
            NEED();
            proj = val;
        } else if (OPT("--method")) {
            NEED();
            if (rp_method_parse(val, &sp.method)) {
                cli_msg("mosaic: --method must be nearest, bilinear, bicubic, lanczos3 or exact, "
                        "not '%s'", val);
                goto done;
            }
        } else if (OPT("--combine")) {
            NEED();
            if (mos_combine_parse(val, &sp.combine)) {
                cli_msg("mosaic: --combine must be mean, sum, median, min, max, first or last, "
                        "not '%s'", val);
                goto done;
            }
        } else if (OPT("--threads")) {
            NEED();
            char *end;
            long t = strtol(val, &end, 10);
            if (*end || end == val || t < 0 || t > 1024) {
                cli_msg("mosaic: --threads must be an integer from 0 to 1024, not '%s'", val);
                goto done;
            }
            threads = (int)t;
        } else if (OPT("--stage-memory")) {
            NEED();
            char *end;
            stage_mb = strtod(val, &end);
            if (*end || end == val || !(stage_mb >= 0 && stage_mb <= 1e12)) {
                cli_msg("mosaic: --stage-memory must be a number of MB from 0 to 1e12, not '%s'",
                        val);
                goto done;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            cli_msg("mosaic: unknown option '%s' (see tessera mosaic --help)", a);
            goto done;
        } else {
            int hdu = 0;
            paths[n] = split_path_hdu(a, &hdu);
            if (!paths[n]) {
                cli_msg("mosaic: bad HDU number in '%s'", a);
                goto done;
            }
            ins[n] = (mos_input){ paths[n], a, hdu, 0.0 };
            n++;
        }
#undef OPT
#undef NEED
    }
    if (n < 1 || !out) {
        cli_msg("mosaic: %s is required (see tessera mosaic --help)",
                n < 1 ? "an input file" : "-o OUT.fits");
        goto done;
    }
    if (target && (want_auto || frame || proj)) {
        cli_msg("mosaic: --target excludes --auto, --frame and --projection");
        goto done;
    }
    if (n > MOS_MAX_INPUTS) {
        cli_msg("mosaic: at most %d inputs", MOS_MAX_INPUTS);
        goto done;
    }
    if (frame && (sky_frame_parse(frame, &sp.auto_frame) || sp.auto_frame == SKY_FRAME_NONE)) {
        cli_msg("mosaic: --frame must be icrs, fk5, fk4, galactic or ecliptic (or, for images "
                "of the Sun, helioprojective, stonyhurst or carrington), not '%s'", frame);
        goto done;
    }
    if (proj) {
        int ok = strlen(proj) == 3;
        for (int k = 0; ok && k < 3; k++)
            ok = proj[k] >= 'A' && proj[k] <= 'Z';
        if (!ok) {
            cli_msg("mosaic: --projection must be a three-letter code such as TAN, not '%s'", proj);
            goto done;
        }
        snprintf(sp.auto_proj, sizeof sp.auto_proj, "%s", proj);
    }
    rc = CLI_EXIT_FAIL;
    if (!cli_output_ok("tessera", out))
        goto done;
    int thdu = 0;
    char *tpath = target ? split_path_hdu(target, &thdu) : NULL;
    paths[n] = tpath;   /* the target is an input too (paths has argc entries) */
    int distinct = cli_output_not_input("tessera", out, (const char *const *)paths, n + 1,
                                        tpath ? n : -1);
    paths[n] = NULL;
    free(tpath);
    if (!distinct)
        goto done;
    if (target && read_target_cards(target, &tcards, &sp.target_nkeys) != CLI_EXIT_OK)
        goto done;
    sp.ninputs = n;
    sp.inputs = ins;
    sp.target_cards = tcards;
    threads = cli_threads(threads);
    keep_freed_memory();
    have_sig = cli_signals_start(on_signal, (void *)&cancel, &sigth);
    workers = cli_workers_new(threads);
    sp.pool = workers;   /* the plan reads the headers and places the inputs on them too */
    double t0 = cli_now_s();
    size_t ol = strlen(out) + 40;
    workdir = malloc(ol);
    tmp = malloc(ol);
    if (!workdir || !tmp) {
        cli_msg("out of memory");
        goto done;
    }
    snprintf(workdir, ol, "%s.work-%ld", out, (long)getpid());
    snprintf(tmp, ol, "%s.tmp-%ld", out, (long)getpid());
    if (mkdir(workdir, 0755) != 0) {
        cli_msg("cannot create the work directory '%s': %s", workdir, strerror(errno));
        free(workdir);
        workdir = NULL;
        goto done;
    }
    char err[512] = "";
    int prc = mos_plan(&sp, workdir, threads, &m, err, sizeof err);
    if (prc) {
        cli_msg("mosaic: %s", err);
        rc = prc == TESS_ENOOVERLAP ? CLI_EXIT_NOOVERLAP : CLI_EXIT_FAIL;
        goto done;
    }
    /* The staged planes in memory within the bound (the work directory is this run's
     * alone: no block ran before). */
    if (stage_mb < 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        stage_mb = pages > 0 && psz > 0 ? (double)pages * (double)psz / 4e6 : 0;
    }
    (void)mos_stage_in_memory(m, stage_mb * 1e6);
    for (int k = 0; k < n; k++)
        if (!mos_input_overlaps(m, k))
            cli_msg("warning: input %d, '%s', does not overlap the target: it adds nothing",
                    k + 1, paths[k]);
    double t_plan = cli_now_s(), t_stage[4] = { 0 }, c_plan = cpu_s(), c_stage[4] = { 0 };
    runner r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.lock, NULL);
    r.m = m;
    r.cancel = &cancel;
    bar pb = { -1, t0, "blocks" };
    r.b = !quiet && isatty(STDERR_FILENO) ? &pb : NULL;
    int ns = mos_nstages(m);
    for (int s = 0; s < ns; s++)
        r.total += mos_nblocks(m, s);
    int stopped = 0;
    for (int s = 0; s < ns && !stopped; s++) {
        r.stage = s;
        r.nblocks = mos_nblocks(m, s);
        atomic_store(&r.next, 0);
        int nt = threads < r.nblocks ? threads : (int)r.nblocks;
        /* Threads at work on different inputs (out of memory: in block order). */
        if ((r.order = malloc(sizeof(long) * (size_t)r.nblocks)) != NULL)
            mos_block_order(m, s, nt, r.order);
        pool_for(workers, POOL_BATCH, nt, (size_t)nt, 1, stage_slice, &r);
        free(r.order);
        r.order = NULL;
        t_stage[s] = cli_now_s();
        c_stage[s] = cpu_s();
        stopped = atomic_load(&r.failed) || cancel;
    }
    if (r.b && pb.last >= 0 && r.done != r.total)
        fputc('\n', stderr);
    pthread_mutex_destroy(&r.lock);
    if (cancel || r.rc == TESS_ECANCELED) {
        cli_msg("interrupted; nothing written");
        rc = CLI_EXIT_INTERRUPTED;
        goto done;
    }
    if (r.rc) {
        cli_msg("mosaic: %s", r.err);
        goto done;
    }
    if (mos_finish(m, tmp, err, sizeof err) != 0) {
        cli_msg("mosaic: %s", err);
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, out) != 0) {
        cli_msg("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = CLI_EXIT_OK;
    long onx, ony;
    mos_target_size(m, &onx, &ony);
    if (timing) {
        fprintf(stderr, "tessera: plan %.3f s", t_plan - t0);
        double prev = t_plan, cprev = c_plan;
        mos_cost cost;
        mos_estimate(m, &cost);
        for (int s = 0; s < ns; s++) {
            fprintf(stderr, ", %s %.3f s (%ld blocks, cpu %.3f s", mos_stage_name(m, s),
                    t_stage[s] - prev, mos_nblocks(m, s), c_stage[s] - cprev);
            if (s == ns - 1)     /* the coadd: the bytes it moves at the least */
                fprintf(stderr, ", traffic %.1f MB", cost.coadd_traffic / 1e6);
            fputc(')', stderr);
            prev = t_stage[s];
            cprev = c_stage[s];
        }
        fprintf(stderr, ", finish %.3f s (cpu %.3f s), total %.3f s (%d threads)\n",
                cli_now_s() - prev, cpu_s() - cprev, cli_now_s() - t0, threads);
    }
    if (r.b)
        fprintf(stderr, "tessera: wrote %s (%ldx%ld, %d inputs, %s, %s, background %s) in "
                "%.2f s\n", out, onx, ony, n, rp_method_name(sp.method),
                mos_combine_name(sp.combine), mos_bg_name(sp.bg), cli_now_s() - t0);
done:
    if (workdir)
        remove_workdir(workdir, workers, threads);
    pool_free(workers);
    if (have_sig)
        cli_signals_stop(sigth);
    mos_free(m);
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    free(ins);
    free(tcards);
    free(workdir);
    free(tmp);
    return rc;
}
