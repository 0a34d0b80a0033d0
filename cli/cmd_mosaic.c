/* tessera mosaic: the mosaic engine offline, its blocks run on threads of this process. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "engine/fits/fitsimg.h"
#include "engine/mosaic/mosaic.h"
#include "engine/base/error.h"

static const char mosaic_usage[] =
    "usage: tessera mosaic IN.fits[HDU]... -o OUT.fits\n"
    "                      [--target HDR_OR_FITS[HDU] | --auto [--frame F] [--projection P]]\n"
    "                      [--method M] [--combine C] [--match-background[=plane|level]]\n"
    "                      [--threads N] [--quiet] [--timing]\n"
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
    "  --quiet                no progress bar (it is drawn only on a terminal anyway)\n"
    "  --timing               print the time of each stage\n"
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

enum { M_OK = 0, M_FAIL = 1, M_USAGE = 2, M_NOOVERLAP = 3, M_INTERRUPTED = 130 };

static void mmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mmsg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tessera: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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

/* The target's cards from a text header or a FITS file.  Returns 0 or M_FAIL. */
static int read_target_cards(const char *arg, char **cards, int *nkeys)
{
    int hdu = 0;
    char *path = split_path_hdu(arg, &hdu);
    if (!path) {
        mmsg("mosaic: bad HDU number in '%s'", arg);
        return M_FAIL;
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        mmsg("cannot open target '%s': %s", path, strerror(errno));
        free(path);
        return M_FAIL;
    }
    char head[81] = "";
    size_t got = fread(head, 1, 81, fp);
    char err[256] = "";
    int rc = M_FAIL;
    if (got == 81 && memcmp(head, "SIMPLE  =", 9) == 0 && !memchr(head, '\n', 81)) {
        fclose(fp);
        fitsimg_info info;
        if (fitsimg_read_info(path, hdu, &info, err, sizeof err) != 0) {
            mmsg("target '%s': %s", path, err);
        } else {
            *cards = malloc((size_t)info.nkeys * 80 + 1);
            if (*cards) {
                memcpy(*cards, info.header, (size_t)info.nkeys * 80 + 1);
                *nkeys = info.nkeys;
                rc = M_OK;
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
        mmsg("out of memory");
    } else if (mos_cards_from_text(text, len, cards, nkeys, err, sizeof err) != 0) {
        mmsg("target '%s': %s", path, err);
    } else {
        rc = M_OK;
    }
    free(text);
    free(path);
    return rc;
}

/* Removes the files of the flat directory `dir`, then the directory. */
static void remove_workdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Shared by the worker threads of one stage. */
typedef struct runner {
    mosaic *m;
    int stage;
    long nblocks;
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

static void *worker(void *p)
{
    runner *r = p;
    char err[512];
    for (;;) {
        if (atomic_load(&r->failed) || *r->cancel)
            break;
        long b = atomic_fetch_add(&r->next, 1);
        if (b >= r->nblocks)
            break;
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
    return NULL;
}

/* Waits for SIGINT/SIGTERM and raises the cancel flag. */
static void *sig_main(void *arg)
{
    volatile int *cancel = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0)
            *cancel = sig;
    }
    return NULL;
}

int cmd_mosaic(int argc, char **argv)
{
    int n = 0, rc = M_USAGE, quiet = 0, timing = 0, threads = 0, want_auto = 0;
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
    if (!ins || !paths) {
        mmsg("out of memory");
        rc = M_FAIL;
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
                mmsg("mosaic: %s needs a value", a);                        \
                goto done;                                                  \
            }                                                               \
            val = argv[++i];                                                \
        }                                                                   \
    } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(mosaic_usage, stdout);
            rc = M_OK;
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
                mmsg("mosaic: --match-background takes plane, level or none, not '%s'", a + 19);
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
                mmsg("mosaic: --method must be nearest, bilinear, bicubic, lanczos3 or exact, "
                     "not '%s'", val);
                goto done;
            }
        } else if (OPT("--combine")) {
            NEED();
            if (mos_combine_parse(val, &sp.combine)) {
                mmsg("mosaic: --combine must be mean, sum, median, min, max, first or last, "
                     "not '%s'", val);
                goto done;
            }
        } else if (OPT("--threads")) {
            NEED();
            char *end;
            long t = strtol(val, &end, 10);
            if (*end || end == val || t < 0 || t > 1024) {
                mmsg("mosaic: --threads must be an integer from 0 to 1024, not '%s'", val);
                goto done;
            }
            threads = (int)t;
        } else if (a[0] == '-' && a[1] != '\0') {
            mmsg("mosaic: unknown option '%s' (see tessera mosaic --help)", a);
            goto done;
        } else {
            int hdu = 0;
            paths[n] = split_path_hdu(a, &hdu);
            if (!paths[n]) {
                mmsg("mosaic: bad HDU number in '%s'", a);
                goto done;
            }
            ins[n] = (mos_input){ paths[n], a, hdu };
            n++;
        }
#undef OPT
#undef NEED
    }
    if (n < 1 || !out) {
        mmsg("mosaic: %s is required (see tessera mosaic --help)",
             n < 1 ? "an input file" : "-o OUT.fits");
        goto done;
    }
    if (target && (want_auto || frame || proj)) {
        mmsg("mosaic: --target excludes --auto, --frame and --projection");
        goto done;
    }
    if (n > MOS_MAX_INPUTS) {
        mmsg("mosaic: at most %d inputs", MOS_MAX_INPUTS);
        goto done;
    }
    if (frame && (sky_frame_parse(frame, &sp.auto_frame) || sp.auto_frame == SKY_FRAME_NONE)) {
        mmsg("mosaic: --frame must be icrs, fk5, fk4, galactic or ecliptic, not '%s'", frame);
        goto done;
    }
    if (proj) {
        int ok = strlen(proj) == 3;
        for (int k = 0; ok && k < 3; k++)
            ok = proj[k] >= 'A' && proj[k] <= 'Z';
        if (!ok) {
            mmsg("mosaic: --projection must be a three-letter code such as TAN, not '%s'", proj);
            goto done;
        }
        snprintf(sp.auto_proj, sizeof sp.auto_proj, "%s", proj);
    }
    rc = M_FAIL;
    if (!cli_output_ok("tessera", out))
        goto done;
    if (target && read_target_cards(target, &tcards, &sp.target_nkeys) != M_OK)
        goto done;
    sp.ninputs = n;
    sp.inputs = ins;
    sp.target_cards = tcards;
    if (threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c < 1 ? 1 : c > 1024 ? 1024 : (int)c;
    }
    {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        have_sig = pthread_create(&sigth, NULL, sig_main, (void *)&cancel) == 0;
    }
    double t0 = cli_now_s();
    size_t ol = strlen(out) + 40;
    workdir = malloc(ol);
    tmp = malloc(ol);
    if (!workdir || !tmp) {
        mmsg("out of memory");
        goto done;
    }
    snprintf(workdir, ol, "%s.work-%ld", out, (long)getpid());
    snprintf(tmp, ol, "%s.tmp-%ld", out, (long)getpid());
    if (mkdir(workdir, 0755) != 0) {
        mmsg("cannot create the work directory '%s': %s", workdir, strerror(errno));
        free(workdir);
        workdir = NULL;
        goto done;
    }
    char err[512] = "";
    int prc = mos_plan(&sp, workdir, threads, &m, err, sizeof err);
    if (prc) {
        mmsg("mosaic: %s", err);
        rc = prc == TESS_ENOOVERLAP ? M_NOOVERLAP : M_FAIL;
        goto done;
    }
    for (int k = 0; k < n; k++)
        if (!mos_input_overlaps(m, k))
            mmsg("warning: input %d, '%s', does not overlap the target: it adds nothing", k + 1,
                 paths[k]);
    double t_plan = cli_now_s(), t_stage[4] = { 0 };
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
        pthread_t th[1024];
        int started[1024] = { 0 };
        for (int t = 1; t < nt; t++)
            started[t] = pthread_create(&th[t], NULL, worker, &r) == 0;
        worker(&r);
        for (int t = 1; t < nt; t++)
            if (started[t])
                pthread_join(th[t], NULL);
        t_stage[s] = cli_now_s();
        stopped = atomic_load(&r.failed) || cancel;
    }
    if (r.b && pb.last >= 0 && r.done != r.total)
        fputc('\n', stderr);
    pthread_mutex_destroy(&r.lock);
    if (cancel || r.rc == TESS_ECANCELED) {
        mmsg("interrupted; nothing written");
        rc = M_INTERRUPTED;
        goto done;
    }
    if (r.rc) {
        mmsg("mosaic: %s", r.err);
        goto done;
    }
    if (mos_finish(m, tmp, err, sizeof err) != 0) {
        mmsg("mosaic: %s", err);
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, out) != 0) {
        mmsg("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = M_OK;
    long onx, ony;
    mos_target_size(m, &onx, &ony);
    if (timing) {
        fprintf(stderr, "tessera: plan %.3f s", t_plan - t0);
        double prev = t_plan;
        for (int s = 0; s < ns; s++) {
            fprintf(stderr, ", %s %.3f s (%ld blocks)", mos_stage_name(m, s), t_stage[s] - prev,
                    mos_nblocks(m, s));
            prev = t_stage[s];
        }
        fprintf(stderr, ", finish %.3f s, total %.3f s (%d threads)\n", cli_now_s() - prev,
                cli_now_s() - t0, threads);
    }
    if (r.b)
        fprintf(stderr, "tessera: wrote %s (%ldx%ld, %d inputs, %s, %s, background %s) in "
                "%.2f s\n", out, onx, ony, n, rp_method_name(sp.method),
                mos_combine_name(sp.combine), mos_bg_name(sp.bg), cli_now_s() - t0);
done:
    if (workdir)
        remove_workdir(workdir);
    if (have_sig) {
        pthread_cancel(sigth);
        pthread_join(sigth, NULL);
    }
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
