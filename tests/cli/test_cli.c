/* Tests of the tessera command: every golden case of the reference manifest through `tessera reproject`, its command-line behaviour, and the static HiPS tree of `tessera hips`. */
#include <chealpix.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

extern char **environ;

/* ---- helpers ------------------------------------------------------------------------ */

/* The scratch directory of one test (made by tmp_make, removed by tmp_remove). */
typedef struct tmpdir {
    char path[256];
} tmpdir;

static void tmp_make(tmpdir *t)
{
    snprintf(t->path, sizeof t->path, "/tmp/tessera-cli-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t->path));
}

/* Number of entries in the directory (besides . and ..). */
static int tmp_count(const tmpdir *t)
{
    DIR *d = opendir(t->path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void tmp_remove(tmpdir *t)
{
    DIR *d = opendir(t->path);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", t->path, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(t->path);
}

/* Runs TESSERA_BIN with the NULL-terminated arguments (after the program name), stdout
 * and stderr to files in `t`; returns the exit status (-1 if it did not exit) and puts
 * the start of stderr into `errtext`. */
static int run_tessera(const tmpdir *t, char *errtext, size_t errlen, const char *const *args)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)TESSERA_BIN;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/.stdout", t->path);
    snprintf(err, sizeof err, "%s/.stderr", t->path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, TESSERA_BIN, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ck_assert_msg(rc == 0, "cannot run %s", TESSERA_BIN);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (errtext && errlen) {
        FILE *f = fopen(err, "r");
        size_t got = f ? fread(errtext, 1, errlen - 1, f) : 0;
        errtext[got] = '\0';
        if (f)
            fclose(f);
    }
    unlink(out);
    unlink(err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* An image HDU read whole: shape, BITPIX, values as doubles. */
typedef struct image {
    long n[3];
    int bitpix, naxis;
    double *v;
    char extname[72];
} image;

static void read_image(const char *path, int hdu, image *im)
{
    fitsfile *f = NULL;
    int st = 0, type = 0;
    fits_open_diskfile(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s (status %d)", path, st);
    fits_movabs_hdu(f, hdu + 1, &type, &st);
    im->n[0] = im->n[1] = im->n[2] = 1;
    fits_get_img_param(f, 3, &im->bitpix, &im->naxis, im->n, &st);
    ck_assert_msg(st == 0, "%s HDU %d: status %d", path, hdu, st);
    im->extname[0] = '\0';
    int s2 = 0;
    fits_read_key(f, TSTRING, "EXTNAME", im->extname, NULL, &s2);
    size_t m = (size_t)(im->n[0] * im->n[1] * im->n[2]);
    im->v = malloc(sizeof(double) * m);
    double nul = NAN;
    fits_read_img(f, TDOUBLE, 1, (LONGLONG)m, &nul, im->v, &(int){ 0 }, &st);
    ck_assert_msg(st == 0, "%s HDU %d pixels: status %d", path, hdu, st);
    fits_close_file(f, &st);
}

/* The value of a header keyword of HDU `hdu` as a string ("" when absent). */
static void read_key(const char *path, int hdu, const char *key, char *val, size_t n)
{
    fitsfile *f = NULL;
    int st = 0;
    char v[FLEN_VALUE] = "";
    fits_open_diskfile(&f, path, READONLY, &st);
    fits_movabs_hdu(f, hdu + 1, NULL, &st);
    ck_assert_int_eq(st, 0);
    fits_read_keyword(f, key, v, NULL, &st);
    snprintf(val, n, "%s", st == 0 ? v : "");
    st = 0;
    fits_close_file(f, &st);
}

/* Byte-for-byte equality of two files. */
static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    ck_assert(fa && fb);
    int same = 1, ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        if (ca != cb)
            same = 0;
    } while (same && ca != EOF);
    fclose(fa);
    fclose(fb);
    return same;
}

/* ---- golden cases ------------------------------------------------------------------- */

/* Case `idx` of tests/data/reference/manifest.json (in key order): name, source file
 * name, method. */
static int manifest_case(int idx, char *name, size_t nlen, char *source, size_t slen,
                         char *method, size_t mlen)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/manifest.json", TESSERA_TESTDATA_DIR);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root != NULL, "manifest: %s", je.text);
    const char *key;
    json_t *c;
    int i = 0, found = 0;
    json_object_foreach(root, key, c) {
        if (i++ != idx)
            continue;
        const char *src = json_string_value(json_object_get(c, "source"));
        const char *m = json_string_value(json_object_get(c, "method"));
        json_t *order = json_object_get(c, "order");
        ck_assert(src && m);
        const char *base = strrchr(src, '/');
        snprintf(name, nlen, "%s", key);
        snprintf(source, slen, "%s", base ? base + 1 : src);
        if (strcmp(m, "exact") == 0)
            snprintf(method, mlen, "exact");
        else
            snprintf(method, mlen, "%s", json_integer_value(order) == 0 ? "nearest"
                                         : json_integer_value(order) == 1 ? "bilinear"
                                                                          : "bicubic");
        found = 1;
    }
    json_decref(root);
    return found;
}

static int manifest_size(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/manifest.json", TESSERA_TESTDATA_DIR);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 0;
    }
    int n = (int)json_object_size(root);
    json_decref(root);
    return n;
}

/* Runs one manifest case through the command with --max-coord-error 0 and checks it
 * against astropy reproject's result with the tolerances: nearest equal on at
 * least 99.9% of the pixels; bilinear within 2e-6 and bicubic within 1e-4 of the
 * reference's peak; exact within 1e-3 (relative) on every pixel and total flux within
 * 1e-4; footprints agreeing on at least 99.5% of the pixels. */
START_TEST(test_golden)
{
    char name[128], source[128], method[32];
    ck_assert(manifest_case(_i, name, sizeof name, source, sizeof source, method, sizeof method));
    tmpdir t;
    tmp_make(&t);
    char in[1024], target[1024], out[512], ref[1024], err[1024];
    snprintf(in, sizeof in, "%s/%s", TESSERA_DEMO_DIR, source);
    snprintf(target, sizeof target, "%s/reference/%s.target.hdr", TESSERA_TESTDATA_DIR, name);
    snprintf(out, sizeof out, "%s/%s.fits", t.path, name);
    snprintf(ref, sizeof ref, "%s/reference/%s.fits", TESSERA_TESTDATA_DIR, name);
    const char *args[] = { "reproject", in, "--target", target, "-o", out, "--method", method,
                           "--max-coord-error", "0", NULL };
    int rc = run_tessera(&t, err, sizeof err, args);
    ck_assert_msg(rc == 0, "%s: exit %d: %s", name, rc, err);
    ck_assert_int_eq(tmp_count(&t), 1);     /* no temporary file left */

    image a, fa, b, fb;
    read_image(out, 0, &a);
    read_image(out, 1, &fa);
    read_image(ref, 0, &b);
    read_image(ref, 1, &fb);
    ck_assert_str_eq(fa.extname, "FOOTPRINT");
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(a.n[k], b.n[k]);
        ck_assert_int_eq(fa.n[k], b.n[k]);
    }
    size_t m = (size_t)(a.n[0] * a.n[1] * a.n[2]);
    double peak = 0.0, maxdiff = 0.0, maxrel = 0.0, sa = 0.0, sb = 0.0;
    long equal = 0, both = 0, fpagree = 0;
    for (size_t k = 0; k < m; k++) {
        double x = a.v[k], y = b.v[k];
        if (isfinite(y))
            peak = fmax(peak, fabs(y));
        fpagree += (fa.v[k] > 0.0) == (fb.v[k] > 0.0);
        if (isfinite(x) && isfinite(y)) {
            both++;
            equal += x == y;
            maxdiff = fmax(maxdiff, fabs(x - y));
            if (y != 0.0)
                maxrel = fmax(maxrel, fabs(x - y) / fabs(y));
            sa += x * fa.v[k];
            sb += y * fb.v[k];
        }
    }
    double fpfrac = (double)fpagree / (double)m, rel = maxdiff / peak;
    double flux = fabs(sa - sb) / fabs(sb);
    fprintf(stderr, "golden-cli %-30s %-8s max|diff|/peak=%.3e equal=%.5f maxrel=%.3e "
            "flux=%.2e footprint=%.5f\n", name, method, rel, (double)equal / (double)both,
            maxrel, flux, fpfrac);
    ck_assert_msg(fpfrac >= 0.995, "%s: footprints agree on %.5f", name, fpfrac);
    if (strcmp(method, "nearest") == 0)
        ck_assert_msg((double)equal / (double)both >= 0.999, "%s: %.5f equal", name,
                      (double)equal / (double)both);
    else if (strcmp(method, "bilinear") == 0)
        ck_assert_msg(rel <= 2e-6, "%s: max diff / peak %.3e", name, rel);
    else if (strcmp(method, "bicubic") == 0)
        ck_assert_msg(rel <= 1e-4, "%s: max diff / peak %.3e", name, rel);
    else {
        ck_assert_msg(maxrel <= 1e-3, "%s: max relative diff %.3e", name, maxrel);
        ck_assert_msg(flux <= 1e-4, "%s: total flux differs by %.3e", name, flux);
    }
    free(a.v);
    free(fa.v);
    free(b.v);
    free(fb.v);
    tmp_remove(&t);
}
END_TEST

/* ---- command-line behaviour --------------------------------------------------------- */

#define HH TESSERA_DEMO_DIR "/HorseHead.fits"
#define HH_TARGET TESSERA_TESTDATA_DIR "/reference/horsehead_rot30_bilinear.target.hdr"

/* Usage errors exit 2 with a message naming the problem; --help exits 0. */
START_TEST(test_usage)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], out[512];
    snprintf(out, sizeof out, "%s/o.fits", t.path);
    const char *none[] = { NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, none), 2);
    ck_assert_msg(strstr(err, "usage: tessera COMMAND") != NULL, "%s", err);
    /* The overview lists every command in a screenful. */
    static const char *const cmds[] = { "reproject", "mosaic", "hips", "mkstack", "submit",
                                        "jobs", "cancel" };
    int lines = 0;
    for (const char *c = err; *c; c++)
        lines += *c == '\n';
    ck_assert_int_le(lines, 24);
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
        ck_assert_msg(strstr(err, cmds[k]) != NULL, "%s missing: %s", cmds[k], err);
    const char *help[] = { "reproject", "--help", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, help), 0);
    const char *cmd[] = { "frobnicate", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, cmd), 2);
    ck_assert_msg(strstr(err, "frobnicate") != NULL, "%s", err);
    const char *meth[] = { "reproject", HH, "--target", HH_TARGET, "-o", out, "--method",
                           "cubic", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, meth), 2);
    ck_assert_msg(strstr(err, "--method") != NULL, "%s", err);
    const char *mce[] = { "reproject", HH, "--target", HH_TARGET, "-o", out,
                          "--max-coord-error=-1", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, mce), 2);
    const char *thr[] = { "reproject", HH, "--target", HH_TARGET, "-o", out, "--threads", "x",
                          NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, thr), 2);
    const char *stm[] = { "mosaic", HH, "--target", HH_TARGET, "-o", out, "--stage-memory",
                          "-1", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, stm), 2);
    ck_assert_msg(strstr(err, "--stage-memory") != NULL, "%s", err);
    const char *opt[] = { "reproject", HH, "--target", HH_TARGET, "-o", out, "--bogus", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, opt), 2);
    ck_assert_msg(strstr(err, "--bogus") != NULL, "%s", err);
    const char *noout[] = { "reproject", HH, "--target", HH_TARGET, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, noout), 2);
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove(&t);
}
END_TEST

/* Input and target problems exit 1 with the file named; no overlap exits 3; nothing is
 * left behind in the output directory. */
START_TEST(test_failures)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], out[512], hdr[512];
    snprintf(out, sizeof out, "%s/o.fits", t.path);
    const char *missing[] = { "reproject", "/nonexistent/x.fits", "--target", HH_TARGET, "-o",
                              out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, missing), 1);
    ck_assert_msg(strstr(err, "/nonexistent/x.fits") != NULL, "%s", err);
    const char *hdu[] = { "reproject", HH "[3]", "--target", HH_TARGET, "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, hdu), 1);
    ck_assert_msg(strstr(err, "HDU 3") != NULL, "%s", err);
    /* A target without NAXIS1. */
    snprintf(hdr, sizeof hdr, "%s/bad.hdr", t.path);
    FILE *f = fopen(hdr, "w");
    fputs("CTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\nCRVAL1  = 85.25\nCRVAL2  = -2.45\n"
          "CDELT1  = -0.001\nCDELT2  = 0.001\nCRPIX1  = 10\nCRPIX2  = 10\nNAXIS2  = 20\nEND\n", f);
    fclose(f);
    const char *nonaxis[] = { "reproject", HH, "--target", hdr, "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, nonaxis), 1);
    ck_assert_msg(strstr(err, "NAXIS1") != NULL, "%s", err);
    /* A target on the other side of the sky. */
    f = fopen(hdr, "w");
    fputs("NAXIS1  = 20\nNAXIS2  = 20\nCTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\n"
          "CRVAL1  = 265.25\nCRVAL2  = 2.45\nCDELT1  = -0.001\nCDELT2  = 0.001\n"
          "CRPIX1  = 10\nCRPIX2  = 10\nEND\n", f);
    fclose(f);
    const char *far[] = { "reproject", HH, "--target", hdr, "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, far), 3);
    ck_assert_msg(strstr(err, "overlap") != NULL, "%s", err);
    ck_assert_int_eq(access(out, F_OK), -1);
    unlink(hdr);
    /* An input cut short in its data unit: named as such, before anything is allocated
     * (HorseHead.fits holds 891 x 893 x 2 bytes of data after 14400 of header). */
    char cut[512], cmd[1200];
    snprintf(cut, sizeof cut, "%s/cut.fits", t.path);
    snprintf(cmd, sizeof cmd, "head -c 800000 %s > %s", HH, cut);
    ck_assert_int_eq(system(cmd), 0);
    const char *shortin[] = { "reproject", cut, "--target", HH_TARGET, "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, shortin), 1);
    ck_assert_msg(strstr(err, "shorter than its header says") && strstr(err, "800000"), "%s",
                  err);
    ck_assert_int_eq(access(out, F_OK), -1);
    unlink(cut);
    /* Scalings that give no values: BSCALE = 0, and one that overflows float32. */
    static const struct { double bscale; const char *why; } scal[] = {
        { 0.0, "BSCALE = 0" }, { 1e308, "overflow BITPIX 16" } };
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "cp %s %s", HH, cut);
        ck_assert_int_eq(system(cmd), 0);
        fitsfile *ff = NULL;
        int st = 0;
        fits_open_diskfile(&ff, cut, READWRITE, &st);
        double b = scal[k].bscale;
        fits_update_key(ff, TDOUBLE, "BSCALE", &b, NULL, &st);
        fits_close_file(ff, &st);
        ck_assert_int_eq(st, 0);
        ck_assert_int_eq(run_tessera(&t, err, sizeof err, shortin), 1);
        ck_assert_msg(strstr(err, scal[k].why), "%s", err);
        ck_assert_int_eq(access(out, F_OK), -1);
        unlink(cut);
    }
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove(&t);
}
END_TEST

/* Contents of a small text file (at most 63 bytes), NUL-terminated in buf. */
static const char *slurp(const char *path, char *buf)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, 63, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* The output path is never written through something other than a regular file: an
 * existing FIFO or symbolic link at -o is refused (exit 1, naming what it is, left as it
 * was), and a symbolic link planted at the predictable temporary name OUT.tmp-PID is not
 * followed (the run fails on it instead of overwriting the link's target). */
START_TEST(test_output_not_followed)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], victim[512], fifo[512], lnk[512], out[512], buf[64];
    snprintf(victim, sizeof victim, "%s/victim.txt", t.path);
    snprintf(fifo, sizeof fifo, "%s/fifo.fits", t.path);
    snprintf(lnk, sizeof lnk, "%s/link.fits", t.path);
    snprintf(out, sizeof out, "%s/out.fits", t.path);
    FILE *v = fopen(victim, "w");
    ck_assert_ptr_nonnull(v);
    fputs("precious data\n", v);
    fclose(v);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_int_eq(symlink(victim, lnk), 0);
    static const struct { const char *what; int mosaic; } cases[] = {
        { "a FIFO", 0 }, { "a symbolic link", 0 }, { "a FIFO", 1 }, { "a symbolic link", 1 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *o = cases[k].what[2] == 'F' ? fifo : lnk;
        const char *rp[] = { "reproject", HH, "--target", HH_TARGET, "-o", o, NULL };
        const char *mo[] = { "mosaic", HH, "--target", HH_TARGET, "-o", o, NULL };
        ck_assert_int_eq(run_tessera(&t, err, sizeof err, cases[k].mosaic ? mo : rp), 1);
        ck_assert_msg(strstr(err, cases[k].what) && strstr(err, o), "%s", err);
    }
    struct stat st;
    ck_assert_int_eq(lstat(fifo, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
    ck_assert_int_eq(lstat(lnk, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_str_eq(slurp(victim, buf), "precious data\n");

    /* The planted link: a child makes OUT.tmp-<its pid> point at the victim, then becomes
     * tessera (exec keeps the pid). */
    char errpath[600];
    snprintf(errpath, sizeof errpath, "%s/.child-stderr", t.path);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char planted[600];
        snprintf(planted, sizeof planted, "%s.tmp-%ld", out, (long)getpid());
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (symlink(victim, planted) != 0 || fd < 0 || dup2(fd, 2) < 0)
            _exit(99);
        execl(TESSERA_BIN, TESSERA_BIN, "reproject", HH, "--target", HH_TARGET, "-o", out,
              (char *)NULL);
        _exit(98);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 1);
    char planted[600];
    snprintf(planted, sizeof planted, "%s.tmp-%ld", out, (long)pid);
    ck_assert_str_eq(slurp(victim, buf), "precious data\n");
    ck_assert_int_eq(lstat(planted, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(lstat(out, &st), -1);
    ck_assert_str_ne(slurp(errpath, buf), "");
    unlink(planted);
    unlink(errpath);
    unlink(fifo);
    unlink(lnk);
    unlink(victim);
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove(&t);
}
END_TEST

/* A write that fails part way (the disk full, a file size limit) exits 1 naming the
 * output and the system's reason, and leaves no file behind: a real ENOSPC from a 256 KB
 * tmpfs (tt_mount_tmpfs: needs CAP_SYS_ADMIN, said and skipped where refused) under a
 * 600 KB output, and EFBIG from RLIMIT_FSIZE. */
START_TEST(test_write_failure)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], out[300];
    tmpdir s;                  /* the directory that fills up */
    ck_assert(snprintf(s.path, sizeof s.path, "%s/small", t.path) < (int)sizeof s.path);
    const char *dir = s.path;
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(out, sizeof out, "%s/o.fits", dir);
    const char *a[] = { "reproject", HH, "--target", HH_TARGET, "-o", out, "--threads", "2",
                        NULL };
    const char *why = tt_mount_tmpfs(dir, "256k");
    if (!why) {
        ck_assert_int_eq(run_tessera(&t, err, sizeof err, a), 1);
        ck_assert_msg(strstr(err, out) && strstr(err, strerror(ENOSPC)), "%s", err);
        ck_assert_int_eq(tmp_count(&s), 0);
        ck_assert_int_eq(umount(dir), 0);
    } else {
        printf("write failure: %s refused (%s): RLIMIT_FSIZE only\n", why, strerror(errno));
    }
    struct rlimit old, lim = { 256 << 10, 256 << 10 };
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = run_tessera(&t, err, sizeof err, a);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(err, strerror(EFBIG)), "%s", err);
    ck_assert_int_eq(tmp_count(&s), 0);
    rmdir(dir);
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove(&t);
}
END_TEST

/* The output's headers: the target's WCS cards, BITPIX -32 for a BITPIX 16 input,
 * FOOTPRINT (BITPIX 8) in HDU 1; "[0]" selects HDU 0; a FITS file as target gives the same file as
 * its header as text; 1 and 2 threads write identical files. */
START_TEST(test_output_file)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], o1[512], o2[512], o3[512], v[80];
    snprintf(o1, sizeof o1, "%s/one.fits", t.path);
    snprintf(o2, sizeof o2, "%s/two.fits", t.path);
    snprintf(o3, sizeof o3, "%s/three.fits", t.path);
    const char *a1[] = { "reproject", HH "[0]", "--target", HH_TARGET, "-o", o1, "--threads",
                         "1", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a1), 0);
    ck_assert_msg(err[0] == '\0', "quiet when stderr is not a terminal: %s", err);
    const char *a2[] = { "reproject", HH, "--target=" HH_TARGET, "--output", o2,
                         "--threads=2", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a2), 0);
    ck_assert(same_file(o1, o2));
    /* The reference FITS file of the same case as target (its HDU 0 header). */
    const char *a3[] = { "reproject", HH, "--target",
                         TESSERA_TESTDATA_DIR "/reference/horsehead_rot30_bilinear.fits[0]", "-o",
                         o3, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a3), 0);
    /* A text header that starts like a FITS header (SIMPLE, BITPIX) is still text. */
    char hdr[512], o4[512], line[256];
    snprintf(hdr, sizeof hdr, "%s/simple.hdr", t.path);
    snprintf(o4, sizeof o4, "%s/four.fits", t.path);
    FILE *fin = fopen(HH_TARGET, "r"), *fout = fopen(hdr, "w");
    fputs("SIMPLE  =                    T\nBITPIX  =                  -32\n", fout);
    while (fgets(line, sizeof line, fin))
        fputs(line, fout);
    fclose(fin);
    fclose(fout);
    const char *a4[] = { "reproject", HH, "--target", hdr, "-o", o4, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a4), 0);
    ck_assert(same_file(o1, o4));
    unlink(o4);
    unlink(hdr);
    image x, y;
    read_image(o1, 0, &x);
    read_image(o3, 0, &y);
    ck_assert_int_eq(x.bitpix, -32);
    ck_assert_int_eq(x.naxis, 2);
    ck_assert_int_eq(x.n[0], 400);
    ck_assert_int_eq(x.n[1], 300);
    for (long k = 0; k < 400 * 300; k++)
        ck_assert(x.v[k] == y.v[k] || (isnan(x.v[k]) && isnan(y.v[k])));
    free(x.v);
    free(y.v);
    read_key(o1, 0, "CTYPE1", v, sizeof v);
    ck_assert_str_eq(v, "'RA---TAN'");
    read_key(o1, 0, "CRVAL1", v, sizeof v);
    ck_assert_msg(atof(v) == 85.25, "CRVAL1 %s", v);
    read_key(o1, 1, "EXTNAME", v, sizeof v);
    ck_assert_str_eq(v, "'FOOTPRINT'");
    read_key(o1, 1, "BITPIX", v, sizeof v);
    ck_assert_str_eq(v, "8");                 /* 0 or 1 for interpolation */
    ck_assert_int_eq(tmp_count(&t), 3);
    tmp_remove(&t);
}
END_TEST

/* A cube onto a 2-D target: NAXIS3 and the spectral axis's cards come from the input;
 * the values equal those made with the reference's 3-D target.  A float64 input gives a
 * float64 output; exact writes a float32 footprint. */
START_TEST(test_cube_and_dtype)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], o1[512], o2[512], hdr[512], v[80];
    snprintf(o1, sizeof o1, "%s/cube3.fits", t.path);
    snprintf(o2, sizeof o2, "%s/cube2.fits", t.path);
    snprintf(hdr, sizeof hdr, "%s/t2.hdr", t.path);
    const char *a1[] = { "reproject", TESSERA_DEMO_DIR "/l1448_13co.fits", "--target",
                         TESSERA_TESTDATA_DIR "/reference/l1448_to_galtan_cube_bilinear.target.hdr",
                         "-o", o1, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a1), 0);
    /* The same target without its third axis. */
    FILE *in = fopen(TESSERA_TESTDATA_DIR "/reference/l1448_to_galtan_cube_bilinear.target.hdr",
                     "r");
    FILE *out = fopen(hdr, "w");
    char line[256];
    while (fgets(line, sizeof line, in))
        if (!strstr(line, "3  =") && !strstr(line, "3 =") && strncmp(line, "SPECSYS", 7) != 0
            && strncmp(line, "NAXIS   =", 9) != 0)
            fputs(line, out);
    fclose(in);
    fclose(out);
    const char *a2[] = { "reproject", TESSERA_DEMO_DIR "/l1448_13co.fits", "--target", hdr, "-o",
                         o2, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a2), 0);
    image x, y;
    read_image(o1, 0, &x);
    read_image(o2, 0, &y);
    ck_assert_int_eq(y.naxis, 3);
    ck_assert_int_eq(y.n[2], 53);
    for (long k = 0; k < x.n[0] * x.n[1] * x.n[2]; k++)
        ck_assert(x.v[k] == y.v[k] || (isnan(x.v[k]) && isnan(y.v[k])));
    free(x.v);
    free(y.v);
    read_key(o2, 0, "CTYPE3", v, sizeof v);
    ck_assert_str_eq(v, "'VOPT'");
    read_key(o2, 0, "SPECSYS", v, sizeof v);
    ck_assert_str_eq(v, "'LSRK'");
    /* A target whose third axis differs from the input's is refused. */
    out = fopen(hdr, "w");
    in = fopen(TESSERA_TESTDATA_DIR "/reference/l1448_to_galtan_cube_bilinear.target.hdr", "r");
    while (fgets(line, sizeof line, in))
        fputs(strncmp(line, "CDELT3", 6) == 0 ? "CDELT3  = 100.0\n" : line, out);
    fclose(in);
    fclose(out);
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a2), 1);
    ck_assert_msg(strstr(err, "third axis") != NULL, "%s", err);
    /* BITPIX -64 in, -64 out. */
    const char *a3[] = { "reproject", TESSERA_DEMO_DIR "/gc_msx_e.fits", "--target",
                         TESSERA_TESTDATA_DIR "/reference/gcmsx_to_eq_bilinear.target.hdr", "-o",
                         o1, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a3), 0);
    read_key(o1, 0, "BITPIX", v, sizeof v);
    ck_assert_str_eq(v, "-64");
    /* Exact: the footprint is a fraction, float32. */
    const char *a4[] = { "reproject", TESSERA_DEMO_DIR "/gc_msx_e.fits", "--target",
                         TESSERA_TESTDATA_DIR "/reference/gcmsx_to_eq_bilinear.target.hdr", "-o",
                         o1, "--method", "exact", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a4), 0);
    read_key(o1, 1, "BITPIX", v, sizeof v);
    ck_assert_str_eq(v, "-32");
    unlink(hdr);
    ck_assert_int_eq(tmp_count(&t), 2);
    tmp_remove(&t);
}
END_TEST

/* SIGINT while the blocks run: exit 130, nothing written, no temporary file left. */
START_TEST(test_interrupt)
{
    tmpdir t;
    tmp_make(&t);
    char hdr[512], out[512];
    snprintf(hdr, sizeof hdr, "%s/big.hdr", t.path);
    snprintf(out, sizeof out, "%s/o.fits", t.path);
    FILE *f = fopen(hdr, "w");
    fputs("NAXIS1  = 3000\nNAXIS2  = 3000\nCTYPE1  = 'RA---TAN'\nCTYPE2  = 'DEC--TAN'\n"
          "CRVAL1  = 85.25\nCRVAL2  = -2.45\nCDELT1  = -0.0001\nCDELT2  = 0.0001\n"
          "CRPIX1  = 1500\nCRPIX2  = 1500\nEND\n", f);
    fclose(f);
    char *argv[] = { (char *)TESSERA_BIN, "reproject", (char *)HH, "--target", hdr, "-o", out,
                     "--method", "exact", "--max-coord-error", "0", "--threads", "1", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, TESSERA_BIN, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    /* Once the temporary output exists the signals are handled (they are blocked from
     * the start of the command), and the reprojection has just begun. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)pid);
    for (int i = 0; i < 3000 && access(tmp, F_OK) != 0; i++)
        usleep(10000);
    ck_assert_int_eq(access(tmp, F_OK), 0);
    kill(pid, SIGINT);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 130);
    ck_assert_int_eq(access(out, F_OK), -1);
    unlink(hdr);
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove(&t);
}
END_TEST

/* ---- tessera hips ------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes a scratch directory with everything in it. */
static void tmp_remove_tree(tmpdir *t)
{
    nftw(t->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The value of `key` in a HiPS properties file ("key = value" lines); 0 when absent. */
static int prop_value(const char *path, const char *key, char *val, size_t n)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    char line[512];
    size_t k = strlen(key);
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, k) != 0 || (line[k] != ' ' && line[k] != '='))
            continue;
        const char *v = strchr(line, '=');
        ck_assert_ptr_nonnull(v);
        v += 1 + strspn(v + 1, " ");
        snprintf(val, n, "%.*s", (int)strcspn(v, "\n"), v);
        found = 1;
    }
    fclose(f);
    return found;
}

/* A 512 x 512 FITS tile of the tree (row 0 = FITS row 1) as doubles, or NULL when the
 * tree has no such file. */
static double *tile_read(const char *dir, int order, long long npix)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/Norder%d/Dir%lld/Npix%lld.fits", dir, order,
             npix / 10000 * 10000, npix);
    if (access(path, F_OK) != 0)
        return NULL;
    image im;
    read_image(path, 0, &im);
    ck_assert_int_eq(im.bitpix, -32);
    ck_assert_int_eq(im.naxis, 2);
    ck_assert_int_eq(im.n[0], 512);
    ck_assert_int_eq(im.n[1], 512);
    return im.v;
}

/* Column x and FITS row y (0 = row 1) of the cell with nested index s relative to its
 * 512 x 512 tile: the even bits of s give the row counted from the top of the picture,
 * the odd bits the column (HiPS 1.0 4.2.1; Hipsgen's Context.fillUp). */
static void tile_xy(uint64_t s, long *x, long *y)
{
    long i = 0, j = 0;
    for (int b = 0; b < 9; b++) {
        i |= (long)((s >> (2 * b)) & 1) << b;
        j |= (long)((s >> (2 * b + 1)) & 1) << b;
    }
    *x = j;
    *y = 511 - i;
}

/* Every tile of order k < K is the mean of its children: cell c of the parent (nested
 * index N 4^9 + s at order k + 9) covers the cells 4 (N 4^9 + s) + q, q = 0..3, of
 * order k + 10, which lie in child tile 4 N + (s >> 16) at relative index
 * 4 (s mod 4^8) + q.  Each parent pixel is the mean of its finite children (NaN when
 * none), to float precision; a parent exists exactly when one of its children does.
 * Returns the number of parent tiles checked. */
static int check_parents(const char *dir, int k)
{
    char path[PATH_MAX];
    int checked = 0;
    /* The candidate parents: the parents of every child tile file. */
    snprintf(path, sizeof path, "%s/Norder%d", dir, k + 1);
    DIR *od = opendir(path);
    ck_assert_msg(od != NULL, "no %s", path);
    long long parents[4096];
    int np = 0;
    struct dirent *de;
    while ((de = readdir(od))) {
        if (strncmp(de->d_name, "Dir", 3) != 0)
            continue;
        char sub[PATH_MAX + 300];
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        DIR *dd = opendir(sub);
        ck_assert_ptr_nonnull(dd);
        struct dirent *fe;
        while ((fe = readdir(dd))) {
            long long n;
            char ext[8];
            if (sscanf(fe->d_name, "Npix%lld.%7s", &n, ext) != 2 || strcmp(ext, "fits") != 0)
                continue;
            int seen = 0;
            for (int i = 0; i < np; i++)
                seen |= parents[i] == n / 4;
            if (!seen) {
                ck_assert_int_lt(np, 4096);
                parents[np++] = n / 4;
            }
        }
        closedir(dd);
    }
    closedir(od);
    ck_assert_int_gt(np, 0);
    for (int p = 0; p < np; p++) {
        double *parent = tile_read(dir, k, parents[p]);
        ck_assert_msg(parent != NULL, "Norder%d/Npix%lld missing though a child exists", k,
                      parents[p]);
        double *child[4];
        for (int c = 0; c < 4; c++)
            child[c] = tile_read(dir, k + 1, 4 * parents[p] + c);
        long finite = 0;
        for (uint64_t s = 0; s < (uint64_t)1 << 18; s++) {
            double *ch = child[s >> 16];
            double sum = 0.0;
            int n = 0;
            for (uint64_t q = 0; ch && q < 4; q++) {
                long cx, cy;
                tile_xy(((s & 0xFFFF) << 2) + q, &cx, &cy);
                double v = ch[cy * 512 + cx];
                if (isfinite(v)) {
                    sum += v;
                    n++;
                }
            }
            long x, y;
            tile_xy(s, &x, &y);
            double got = parent[y * 512 + x];
            if (n == 0) {
                ck_assert_msg(isnan(got), "Norder%d/Npix%lld (%ld, %ld): %g, no finite child",
                              k, parents[p], x, y, got);
            } else {
                double want = sum / n;
                ck_assert_msg(fabs(got - want) <= 1e-6 * fabs(want),
                              "Norder%d/Npix%lld (%ld, %ld): %.9g, mean of children %.9g", k,
                              parents[p], x, y, got, want);
                finite++;
            }
        }
        ck_assert_int_gt(finite, 0);
        free(parent);
        for (int c = 0; c < 4; c++)
            free(child[c]);
        checked++;
    }
    return checked;
}

/* Width and height of a PNG file, from its IHDR chunk. */
static void png_file_size(const char *path, long *w, long *h)
{
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "no %s", path);
    ck_assert_uint_eq(fread(b, 1, 24, f), 24);
    fclose(f);
    ck_assert(memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0 && memcmp(b + 12, "IHDR", 4) == 0);
    *w = (long)b[16] << 24 | (long)b[17] << 16 | (long)b[18] << 8 | (long)b[19];
    *h = (long)b[20] << 24 | (long)b[21] << 16 | (long)b[22] << 8 | (long)b[23];
}

/* State of same_tree's walks (nftw passes no argument to its callback). */
static const char *walk_other;     /* the tree compared with the one walked */
static size_t walk_root_len;
static int walk_files;

static int same_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag != FTW_F)
        return 0;
    char other[PATH_MAX + 100];
    snprintf(other, sizeof other, "%s%s", walk_other, path + walk_root_len);
    ck_assert_msg(access(other, F_OK) == 0, "%s has no %s", walk_other, path + walk_root_len);
    ck_assert_msg(same_file(path, other), "%s differs from %s", path, other);
    walk_files++;
    return 0;
}

/* Trees a and b hold the same files with the same bytes; returns the number of files. */
static int same_tree(const char *a, const char *b)
{
    walk_other = b;
    walk_root_len = strlen(a);
    walk_files = 0;
    ck_assert_int_eq(nftw(a, same_entry, 16, FTW_PHYS), 0);
    int na = walk_files;
    walk_other = a;
    walk_root_len = strlen(b);
    walk_files = 0;
    ck_assert_int_eq(nftw(b, same_entry, 16, FTW_PHYS), 0);
    ck_assert_int_eq(walk_files, na);
    return na;
}

/* The HorseHead as a static HiPS: properties, the deepest order (9, from its 1" pixels),
 * every lower order the mean of its children, the Allsky pictures, Moc.fits, index.html;
 * nothing else left in the output's directory; 1 and 2 threads write the same tree. */
START_TEST(test_hips_tree)
{
    tmpdir t, t1;
    tmp_make(&t);
    tmp_make(&t1);
    char err[2048], out[512], out1[512], path[1024], v[128];
    snprintf(out, sizeof out, "%s/hh", t.path);
    snprintf(out1, sizeof out1, "%s/hh", t1.path);
    const char *a[] = { "hips", HH, "-o", out, "--format", "png,fits", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a), 0);
    ck_assert_msg(err[0] == '\0', "quiet when stderr is not a terminal: %s", err);
    ck_assert_int_eq(tmp_count(&t), 1);        /* no temporary directory left */

    snprintf(path, sizeof path, "%s/properties", out);
    ck_assert(prop_value(path, "hips_order", v, sizeof v));
    ck_assert_str_eq(v, "9");
    ck_assert(prop_value(path, "hips_frame", v, sizeof v));
    ck_assert_str_eq(v, "equatorial");
    ck_assert(prop_value(path, "hips_tile_format", v, sizeof v));
    ck_assert_str_eq(v, "png fits");
    ck_assert(prop_value(path, "creator_did", v, sizeof v));
    ck_assert_str_eq(v, "ivo://tessera/hh");
    ck_assert(prop_value(path, "hips_tile_width", v, sizeof v));
    ck_assert_str_eq(v, "512");
    ck_assert(prop_value(path, "hips_pixel_cut", v, sizeof v));

    /* Orders 8 down to 0 from their children; PNG beside every FITS tile. */
    int parents = 0;
    for (int k = 8; k >= 0; k--)
        parents += check_parents(out, k);
    ck_assert_int_ge(parents, 9);
    snprintf(path, sizeof path, "%s/Norder0/Dir0/Npix5.png", out);   /* the cell of RA 90 */
    long w, h;
    png_file_size(path, &w, &h);
    ck_assert_int_eq(w, 512);
    ck_assert_int_eq(h, 512);

    snprintf(path, sizeof path, "%s/Norder3/Allsky.png", out);
    png_file_size(path, &w, &h);
    ck_assert_int_eq(w, 1728);
    ck_assert_int_eq(h, 1856);
    snprintf(path, sizeof path, "%s/Norder3/Allsky.fits", out);
    read_key(path, 0, "NAXIS1", v, sizeof v);
    ck_assert_str_eq(v, "1728");
    read_key(path, 0, "NAXIS2", v, sizeof v);
    ck_assert_str_eq(v, "1856");
    snprintf(path, sizeof path, "%s/Moc.fits", out);
    read_key(path, 1, "ORDERING", v, sizeof v);
    ck_assert_str_eq(v, "'NUNIQ   '");
    read_key(path, 1, "MOCORDER", v, sizeof v);
    ck_assert_str_eq(v, "9");
    read_key(path, 1, "NAXIS2", v, sizeof v);
    ck_assert_int_gt(atoi(v), 0);
    snprintf(path, sizeof path, "%s/index.html", out);
    ck_assert_int_eq(access(path, R_OK), 0);

    /* One thread writes the same bytes as two. */
    const char *a1[] = { "hips", HH "[0]", "--output", out1, "--threads", "1", NULL };
    ck_assert_int_eq(run_tessera(&t1, err, sizeof err, a1), 0);
    ck_assert_int_ge(same_tree(out, out1), 40);
    ck_assert_int_eq(tmp_count(&t), 1);
    ck_assert_int_eq(tmp_count(&t1), 1);
    tmp_remove_tree(&t);
    tmp_remove_tree(&t1);
}
END_TEST

/* The galactic frame: the tiles' WCS is GLON-HPX/GLAT-HPX and the order-9 tile of the
 * image centre's galactic position (converted here with the IAU matrix, Hipparcos
 * vol. 1 sec. 1.5.3) is written. */
START_TEST(test_hips_galactic)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], out[512], path[1024], v[128];
    snprintf(out, sizeof out, "%s/gal", t.path);
    const char *a[] = { "hips", HH, "-o", out, "--frame", "galactic", "--format", "fits",
                        "--method", "bicubic", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, a), 0);
    snprintf(path, sizeof path, "%s/properties", out);
    ck_assert(prop_value(path, "hips_frame", v, sizeof v));
    ck_assert_str_eq(v, "galactic");
    ck_assert(prop_value(path, "hips_tile_format", v, sizeof v));
    ck_assert_str_eq(v, "fits");
    /* ICRS (85.27499, -2.45830), the image centre, to galactic. */
    static const double g[3][3] = { { -0.0548755604, -0.8734370902, -0.4838350155 },
                                    { 0.4941094279, -0.4448296300, 0.7469822445 },
                                    { -0.8676661490, -0.1980763734, 0.4559837762 } };
    double ra = 85.27499 * M_PI / 180.0, dec = -2.45830 * M_PI / 180.0;
    double e[3] = { cos(dec) * cos(ra), cos(dec) * sin(ra), sin(dec) }, q[3];
    for (int i = 0; i < 3; i++)
        q[i] = g[i][0] * e[0] + g[i][1] * e[1] + g[i][2] * e[2];
    double l = atan2(q[1], q[0]), b = asin(q[2]);
    int64_t npix;
    ang2pix_nest64((int64_t)1 << 9, M_PI / 2 - b, l < 0 ? l + 2 * M_PI : l, &npix);
    snprintf(path, sizeof path, "%s/Norder9/Dir%lld/Npix%lld.fits", out,
             (long long)(npix / 10000 * 10000), (long long)npix);
    ck_assert_msg(access(path, F_OK) == 0, "no %s", path);
    read_key(path, 0, "CTYPE1", v, sizeof v);
    ck_assert_str_eq(v, "'GLON-HPX'");
    read_key(path, 0, "NPIX", v, sizeof v);
    ck_assert_int_eq(atoll(v), npix);
    snprintf(path, sizeof path, "%s/Norder3/Allsky.png", out);
    ck_assert_int_eq(access(path, F_OK), -1);   /* FITS only */
    tmp_remove_tree(&t);
}
END_TEST

/* Bad command lines exit 2; a missing input, an unusable plane and an output directory
 * that holds files exit 1; nothing is left behind and an existing directory is not
 * touched. */
START_TEST(test_hips_failures)
{
    tmpdir t;
    tmp_make(&t);
    char err[2048], out[512], keep[600];
    snprintf(out, sizeof out, "%s/o", t.path);
    const char *help[] = { "hips", "--help", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, help), 0);
    static const char *const bad[][3] = { { "--format", "gif" }, { "--format", "png," },
                                          { "--order", "2" }, { "--order", "21" },
                                          { "--frame", "ecliptic" }, { "--method", "exact" },
                                          { "--stretch", "cubic" }, { "--cmap", "rainbow" },
                                          { "--min-cut", "x" }, { "--plane", "-1" },
                                          { "--max-coord-error", "11" },
                                          { "--threads", "many" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a[] = { "hips", HH, "-o", out, bad[i][0], bad[i][1], NULL };
        ck_assert_int_eq(run_tessera(&t, err, sizeof err, a), 2);
        ck_assert_msg(strstr(err, bad[i][0]) != NULL, "%s %s: %s", bad[i][0], bad[i][1], err);
    }
    const char *cuts[] = { "hips", HH, "-o", out, "--min-cut", "90%", "--max-cut", "10%", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, cuts), 2);
    const char *noout[] = { "hips", HH, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, noout), 2);
    ck_assert_int_eq(tmp_count(&t), 0);

    const char *missing[] = { "hips", "/nonexistent/x.fits", "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, missing), 1);
    ck_assert_msg(strstr(err, "/nonexistent/x.fits") != NULL, "%s", err);
    ck_assert_int_eq(tmp_count(&t), 0);
    const char *plane[] = { "hips", HH, "-o", out, "--plane", "1", NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, plane), 1);
    ck_assert_msg(strstr(err, "--plane") != NULL, "%s", err);
    ck_assert_int_eq(tmp_count(&t), 0);

    /* A directory with a file in it is refused and left as it was. */
    ck_assert_int_eq(mkdir(out, 0755), 0);
    snprintf(keep, sizeof keep, "%s/keep.txt", out);
    FILE *f = fopen(keep, "w");
    fputs("mine\n", f);
    fclose(f);
    const char *full[] = { "hips", HH, "-o", out, NULL };
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, full), 1);
    ck_assert_msg(strstr(err, "not empty") != NULL, "%s", err);
    ck_assert_int_eq(tmp_count(&t), 1);
    ck_assert_int_eq(access(keep, F_OK), 0);
    /* An empty one is filled. */
    unlink(keep);
    ck_assert_int_eq(run_tessera(&t, err, sizeof err, full), 0);
    char props[600];
    snprintf(props, sizeof props, "%s/properties", out);
    ck_assert_int_eq(access(props, F_OK), 0);
    ck_assert_int_eq(tmp_count(&t), 1);
    tmp_remove_tree(&t);
}
END_TEST

/* SIGINT while the tiles are made: exit 130, no tree and no temporary directory. */
START_TEST(test_hips_interrupt)
{
    tmpdir t;
    tmp_make(&t);
    char out[512];
    snprintf(out, sizeof out, "%s/deep", t.path);
    char *argv[] = { (char *)TESSERA_BIN, "hips", (char *)HH, "-o", out, "--order", "12",
                     "--format", "fits", "--threads", "1", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, TESSERA_BIN, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    /* The temporary tree appears once the tiles are listed (the signals are handled from
     * the start); the first tiles are then being written. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)pid);
    for (int i = 0; i < 3000 && access(tmp, F_OK) != 0; i++)
        usleep(10000);
    ck_assert_int_eq(access(tmp, F_OK), 0);
    usleep(200000);
    kill(pid, SIGINT);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 130);
    ck_assert_int_eq(access(out, F_OK), -1);
    ck_assert_int_eq(tmp_count(&t), 0);
    tmp_remove_tree(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tg = tcase_create("golden");
    tcase_set_timeout(tg, 300);
    tcase_add_loop_test(tg, test_golden, 0, manifest_size());
    suite_add_tcase(s, tg);
    TCase *tc = tcase_create("behaviour");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_failures);
    tcase_add_test(tc, test_output_file);
    tcase_add_test(tc, test_write_failure);
    tcase_add_test(tc, test_output_not_followed);
    tcase_add_test(tc, test_cube_and_dtype);
    tcase_add_test(tc, test_interrupt);
    suite_add_tcase(s, tc);
    TCase *th = tcase_create("hips");
    tcase_set_timeout(th, 300);
    tcase_add_test(th, test_hips_tree);
    tcase_add_test(th, test_hips_galactic);
    tcase_add_test(th, test_hips_failures);
    tcase_add_test(th, test_hips_interrupt);
    suite_add_tcase(s, th);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
