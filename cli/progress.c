/* The command line's shared pieces: the output check and the progress bar. */
#include "cli/progress.h"
#include "engine/base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cli_output_ok(const char *prog, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 1;   /* a missing directory or a denied access is reported when creating */
    const char *what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISLNK(st.st_mode)  ? "a symbolic link"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    fprintf(stderr, "%s: cannot write '%s': it is %s, which the output (a new file renamed "
            "into place) would replace; give the path of a regular file\n", prog, path, what);
    return 0;
}

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
