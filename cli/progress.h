/* The command line's progress bar, drawn on stderr ("[####....]  45%  115/256 blocks  1.2 s"), and its clock. */
#ifndef TESSERA_CLI_PROGRESS_H
#define TESSERA_CLI_PROGRESS_H

typedef struct bar {
    int last;             /* last percentage drawn, -1 before the first */
    double t0;            /* cli_now_s() at the start */
    const char *unit;     /* what is counted: "blocks", "tiles" */
} bar;

/* CLOCK_MONOTONIC seconds (tess_mono_s, engine/base/clock.h). */
double cli_now_s(void);

/* Redraws the bar of `arg` (a bar *) when the shown percentage moves, and ends the line
 * when done == total.  Has the shape of rp_progress_fn. */
void bar_update(void *arg, long done, long total);

#endif
