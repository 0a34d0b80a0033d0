/* The command line's shared pieces: its output check, and its progress bar, drawn on stderr ("[####....]  45%  115/256 blocks  1.2 s"). */
#ifndef TESSERA_CLI_PROGRESS_H
#define TESSERA_CLI_PROGRESS_H

typedef struct bar {
    int last;             /* last percentage drawn, -1 before the first */
    double t0;            /* cli_now_s() at the start */
    const char *unit;     /* what is counted: "blocks", "tiles" */
} bar;

/* CLOCK_MONOTONIC seconds (tess_mono_s, engine/base/clock.h). */
double cli_now_s(void);

/* Whether output `path` may be written the way the commands write (a new file beside it,
 * renamed over it when complete): it does not exist, or it is a regular file.  A
 * directory, device, FIFO, socket or symbolic link there would be replaced as a node,
 * not written into: prints "PROG: cannot write 'PATH': ..." to stderr and returns 0. */
int cli_output_ok(const char *prog, const char *path);

/* Redraws the bar of `arg` (a bar *) when the shown percentage moves, and ends the line
 * when done == total.  Has the shape of rp_progress_fn. */
void bar_update(void *arg, long done, long total);

#endif
