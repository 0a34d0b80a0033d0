/* The command line's shared pieces: messages, exit statuses, option parsing, threads, signals, input reads and the output check. */
#ifndef TESSERA_CLI_COMMON_H
#define TESSERA_CLI_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "engine/base/pool.h"
#include "engine/fits/fitsimg.h"

/* Exit statuses of the commands (each usage text says which it uses). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,        /* unreadable input, bad WCS, I/O error, out of memory; a job
                                 that failed or was cancelled */
    CLI_EXIT_USAGE = 2,       /* bad command line */
    CLI_EXIT_NOOVERLAP = 3,   /* the target does not overlap the input */
    CLI_EXIT_SERVER = 4,      /* the server refused or could not be reached */
    CLI_EXIT_INTERRUPTED = 130
};

/* Prints "tessera: <message>\n" on stderr. */
void cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes the n bytes at p into buf (len bytes, NUL-terminated; cut with "..." when too
 * long) fit for a terminal: printable ASCII and UTF-8 characters from U+00A0 up pass as
 * they are; control characters (C0, DEL, C1 U+0080..U+009F), bidirectional overrides
 * (U+202A..U+202E, U+2066..U+2069), line and paragraph separators, bytes that are not
 * UTF-8 and the backslash are written escaped (\x1b, \u202e, \\), so that text from a
 * server or a file cannot move the cursor, recolour or retitle the terminal.  Returns
 * buf.  Cannot fail. */
const char *cli_safe_bytes(const void *p, size_t n, char *buf, size_t len);

/* cli_safe_bytes of the string s; NULL gives "-".  Returns buf.  Cannot fail. */
const char *cli_safe(const char *s, char *buf, size_t len);

/* ---- option parsing ---- */

/* Splits "path[N]" into a malloc'd path and N (0-based HDU); a name without a trailing
 * "[digits]" is all path, HDU 0.  Returns 0, or TESS_EINVAL (bad HDU number) /
 * TESS_ENOMEM. */
int cli_split_hdu(const char *arg, char **path, int *hdu);

/* Parses a whole string as a number (strtod) or as an integer in [lo, hi] (base 10).
 * Return 0, or -1 with *v unspecified. */
int cli_parse_double(const char *s, double *v);
int cli_parse_int(const char *s, long lo, long hi, int *v);

/* Matches argv[*i] against `opts` (NULL-terminated), options that take a value
 * ("--name VALUE" or "--name=VALUE"), and moves *i onto the last argument used.  Returns
 * the option's index in `opts` with *val set, or -1 after printing why (unknown option,
 * missing value; `cmd` names the command in the message). */
int cli_option_value(int argc, char **argv, int *i, const char *cmd, const char *const *opts,
                     const char **val);

/* What every offline command takes besides its options with values. */
typedef struct cli_args {
    const char *input;        /* the one operand (a lone "-" is one too), or NULL */
    int quiet;                /* -q, --quiet */
    int timing;               /* --timing */
} cli_args;

enum { CLI_ARG_OPTION = 0, CLI_ARG_TAKEN, CLI_ARG_HELP, CLI_ARG_BAD };

/* Takes argument `arg` of command `cmd` into *c when it is one of those: returns
 * CLI_ARG_TAKEN; CLI_ARG_HELP for -h or --help, after printing `usage` on stdout;
 * CLI_ARG_BAD for a second operand, after printing why; CLI_ARG_OPTION for anything
 * else (an option of the command's own). */
int cli_take_arg(const char *cmd, const char *usage, const char *arg, cli_args *c);

/* ---- threads, signals, reading ---- */

/* The threads of a command asked for `asked` (--threads; 0 = one per online CPU):
 * 1..1024.  Cannot fail. */
int cli_threads(int asked);

/* The workers of a command that runs `threads` threads, the calling one included:
 * threads - 1 of them, or NULL for one thread or when they cannot be started (the work
 * then runs on the calling thread alone).  Start them after cli_signals_start, so that
 * they leave SIGINT and SIGTERM to its thread.  Free with pool_free. */
pool *cli_workers_new(int threads);

/* Blocks SIGINT and SIGTERM in the calling thread and so in every thread it starts from
 * then on, and starts a thread that waits for them and calls on_signal(arg, signal
 * number) for each, from that thread.  Returns 1 when *th was started (end it with
 * cli_signals_stop), 0 when it could not be (the signals then stay blocked). */
int cli_signals_start(void (*on_signal)(void *arg, int sig), void *arg, pthread_t *th);

/* An on_signal for cli_signals_start: stores the signal number into the atomic_int at
 * `flag`, the cancel flag that the engine polls.  Cannot fail. */
void cli_signal_flag(void *flag, int sig);

/* Ends the thread of cli_signals_start.  Cannot fail. */
void cli_signals_stop(pthread_t th);

/* Reads values [first, first + n) of HDU `hdu` of `path` as `kind` (es bytes each:
 * fitsimg_read_values) into dst, in up to `threads` slices at once on `workers` and the
 * calling thread.  Returns 0 or -1 after printing why. */
int cli_read_values(pool *workers, int threads, const char *path, int hdu,
                    fitsimg_values kind, size_t first, void *dst, size_t n, size_t es);

/* ---- output ---- */

/* Whether output `path` may be written the way the commands write (a new file beside it,
 * renamed over it when complete): it does not exist, or it is a regular file.  A
 * directory, device, FIFO, socket or symbolic link there would be replaced as a node,
 * not written into: prints "PROG: cannot write 'PATH': ..." to stderr and returns 0. */
int cli_output_ok(const char *prog, const char *path);

/* Whether output `out` is none of the n files `inputs` (NULL entries skipped): 1 when it
 * does not exist or is another file; 0 after printing "PROG: -o 'OUT' is the input
 * 'IN' ..." when it is the same file as one of them (the same device and inode, whatever
 * names, symbolic or hard links lead there), which the output, renamed over it, would
 * destroy.  Called before any work. */
int cli_output_not_input(const char *prog, const char *out, const char *const *inputs, int n);

#endif
