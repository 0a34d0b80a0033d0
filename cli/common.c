/* The command line's shared pieces: messages, option parsing, threads, signals, parallel reads, the output check. */
#include "cli/common.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"

void cli_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tessera: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The length (2..4) of the UTF-8 sequence at s (n bytes left) and its code point, or 0
 * when it is not a well-formed sequence (overlong, surrogate, past U+10FFFF, cut). */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned long *cp)
{
    size_t k = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
             : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (k == 0 || n < k)
        return 0;
    unsigned long v = s[0] & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const unsigned long least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < least[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return k;
}

/* 1 for the characters a terminal or a bidirectional renderer acts on. */
static int cp_escaped(unsigned long cp)
{
    return cp < 0xA0 || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

const char *cli_safe_bytes(const void *p, size_t n, char *buf, size_t len)
{
    const unsigned char *s = p;
    size_t o = 0;
    if (len == 0)
        return buf;
    for (size_t i = 0; i < n;) {
        char piece[16];
        size_t k = 1, plen;
        unsigned long cp = 0;
        if (s[i] >= 0x20 && s[i] < 0x7F && s[i] != '\\') {
            piece[0] = (char)s[i];
            plen = 1;
        } else if (s[i] == '\\') {
            memcpy(piece, "\\\\", 2);
            plen = 2;
        } else if (s[i] >= 0x80 && (k = utf8_seq(s + i, n - i, &cp)) > 0 && !cp_escaped(cp)) {
            memcpy(piece, s + i, k);
            plen = k;
        } else if (k > 0 && s[i] >= 0x80) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\u%04lx", cp);
        } else {
            k = 1;
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", s[i]);
        }
        if (o + plen + 4 > len) {   /* kept: o + 4 <= len, room for "..." and the NUL */
            if (len >= 4) {
                memcpy(buf + o, "...", 3);
                o += 3;
            }
            break;
        }
        memcpy(buf + o, piece, plen);
        o += plen;
        i += k;
    }
    buf[o < len ? o : len - 1] = '\0';
    return buf;
}

const char *cli_safe(const char *s, char *buf, size_t len)
{
    return s ? cli_safe_bytes(s, strlen(s), buf, len) : cli_safe_bytes("-", 1, buf, len);
}

/* ---- option parsing ---- */

int cli_split_hdu(const char *arg, char **path, int *hdu)
{
    size_t n = strlen(arg);
    *hdu = 0;
    if (n >= 3 && arg[n - 1] == ']') {
        const char *lb = strrchr(arg, '[');
        if (lb && lb > arg) {
            const char *p = lb + 1;
            long v = 0;
            int digits = 0;
            while (*p >= '0' && *p <= '9') {
                if (v > 100000)
                    return TESS_EINVAL;
                v = v * 10 + (*p - '0');
                p++;
                digits++;
            }
            if (digits > 0 && p == arg + n - 1) {
                *hdu = (int)v;
                n = (size_t)(lb - arg);
            }
        }
    }
    *path = strndup(arg, n);
    return *path ? 0 : TESS_ENOMEM;
}

int cli_parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return (errno || end == s || *end) ? -1 : 0;
}

int cli_parse_int(const char *s, long lo, long hi, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = (int)x;
    return 0;
}

int cli_option_value(int argc, char **argv, int *i, const char *cmd, const char *const *opts,
                     const char **val)
{
    const char *arg = argv[*i];
    for (int k = 0; opts[k]; k++) {
        size_t len = strlen(opts[k]);
        if (strncmp(arg, opts[k], len) != 0 || (arg[len] != '\0' && arg[len] != '='))
            continue;
        if (arg[len] == '=') {
            *val = arg + len + 1;
        } else if (*i + 1 < argc) {
            *val = argv[++*i];
        } else {
            cli_msg("%s: %s needs a value", cmd, arg);
            return -1;
        }
        return k;
    }
    cli_msg("%s: unknown option '%s' (see tessera %s --help)", cmd, arg, cmd);
    return -1;
}

int cli_take_arg(const char *cmd, const char *usage, const char *arg, cli_args *c)
{
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        fputs(usage, stdout);
        return CLI_ARG_HELP;
    }
    if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
        c->quiet = 1;
        return CLI_ARG_TAKEN;
    }
    if (strcmp(arg, "--timing") == 0) {
        c->timing = 1;
        return CLI_ARG_TAKEN;
    }
    if (arg[0] != '-' || arg[1] == '\0') {
        if (c->input) {
            cli_msg("%s: one input file only ('%s' and '%s')", cmd, c->input, arg);
            return CLI_ARG_BAD;
        }
        c->input = arg;
        return CLI_ARG_TAKEN;
    }
    return CLI_ARG_OPTION;
}

/* ---- threads, signals, reading ---- */

int cli_threads(int asked)
{
    if (asked > 0)
        return asked;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (int)ncpu;
}

pool *cli_workers_new(int threads)
{
    return threads > 1 ? pool_new(threads - 1, 4 * (size_t)threads) : NULL;
}

typedef struct sig_watch {
    void (*on_signal)(void *arg, int sig);
    void *arg;
} sig_watch;

/* Waits for SIGINT or SIGTERM (blocked in every other thread) and hands each on.  Ended
 * with pthread_cancel (sigwait is a cancellation point). */
static void *signal_thread(void *p)
{
    sig_watch w = *(sig_watch *)p;
    free(p);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0)
            w.on_signal(w.arg, sig);
    }
    return NULL;
}

int cli_signals_start(void (*on_signal)(void *arg, int sig), void *arg, pthread_t *th)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    sig_watch *w = malloc(sizeof *w);
    if (!w)
        return 0;
    *w = (sig_watch){ on_signal, arg };
    if (pthread_create(th, NULL, signal_thread, w) != 0) {
        free(w);
        return 0;
    }
    return 1;
}

void cli_signal_flag(void *flag, int sig)
{
    atomic_store((atomic_int *)flag, sig);
}

void cli_signals_stop(pthread_t th)
{
    pthread_cancel(th);
    pthread_join(th, NULL);
}

/* A parallel read: slices of the data unit, each through fitsimg_read_values. */
typedef struct read_arg {
    const char *path;
    int hdu;
    fitsimg_values kind;
    size_t first;             /* slice [i0, i1) reads values first + i0 .. first + i1 - 1 */
    unsigned char *dst;       /* ... into dst + i0 es */
    size_t es;
    atomic_int failed;        /* the first failure's TESS_E* code */
    char err[256];            /* its reason, written by the thread that set `failed` */
} read_arg;

static void read_slice(void *p, size_t i0, size_t i1)
{
    read_arg *a = p;
    char err[256] = "";
    int rc = fitsimg_read_values(a->path, a->hdu, a->kind, a->first + i0, i1 - i0,
                                 a->dst + i0 * a->es, err, sizeof err);
    int none = 0;
    if (rc && atomic_compare_exchange_strong(&a->failed, &none, rc))
        snprintf(a->err, sizeof a->err, "%s", err);
}

int cli_read_values(pool *workers, int threads, const char *path, int hdu,
                    fitsimg_values kind, size_t first, void *dst, size_t n, size_t es)
{
    read_arg a = { path, hdu, kind, first, dst, es, 0, "" };
    /* Slices of whole 4 KiB of values keep every pread page-aligned in the file cache. */
    pool_for(workers, POOL_BATCH, threads, n, 4096, read_slice, &a);
    if (atomic_load(&a.failed)) {
        cli_msg("cannot read the pixels of '%s': %s", path, a.err);
        return -1;
    }
    return 0;
}

/* ---- output ---- */

int cli_output_ok(const char *prog, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 1;   /* a missing directory or a denied access is reported when creating */
    fprintf(stderr, "%s: cannot write '%s': it is %s, which the output (a new file renamed "
            "into place) would replace; give the path of a regular file\n", prog, path,
            tess_file_kind(st.st_mode));
    return 0;
}

int cli_output_not_input(const char *prog, const char *out, const char *const *inputs, int n)
{
    struct stat so, si;
    if (stat(out, &so) != 0)
        return 1;   /* not there: no input can be it */
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || stat(inputs[i], &si) != 0)
            continue;   /* a missing input is reported when it is read */
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            fprintf(stderr, "%s: -o '%s' is the input '%s' (the same file): the output, "
                    "renamed into place, would destroy it; choose another output name\n",
                    prog, out, inputs[i]);
            return 0;
        }
    }
    return 1;
}
