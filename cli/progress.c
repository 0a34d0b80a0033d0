/* The command line's progress bar and clock. */
#include "cli/progress.h"
#include "engine/base/clock.h"

#include <stdio.h>

double cli_now_s(void)
{
    return tess_mono_s();
}

void bar_update(void *arg, long done, long total)
{
    bar *b = arg;
    int pct = total > 0 ? (int)(100 * done / total) : 100;
    if (pct == b->last && done != total)
        return;
    b->last = pct;
    char cells[41];
    int full = total > 0 ? (int)(40 * done / total) : 40;
    for (int i = 0; i < 40; i++)
        cells[i] = i < full ? '#' : '.';
    cells[40] = '\0';
    fprintf(stderr, "\r[%s] %3d%%  %ld/%ld %s  %.1f s", cells, pct, done, total, b->unit,
            cli_now_s() - b->t0);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}
