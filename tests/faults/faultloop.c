/* The fault loop (faultloop.h). */
#include "tests/faults/faultloop.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* LeakSanitizer's check of the heap now, in builds that have it (ASan, the faults build):
 * 1 when it found a leak (and printed the report). */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
/* Called by the sanitizers before they end the program on a report (ASan, UBSan). */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

/* The run in progress, for the report of a run that crashes. */
static const char *cur_what;
static long cur_point;

static void on_death(void)
{
    fprintf(stderr, "faults: %s: the run with point %ld failing crashed (first fault: %s); "
            "TESSERA_FAULT_POINT=%ld replays it\n", cur_what ? cur_what : "?", cur_point,
            fi_first_fault(), cur_point);
}

int fl_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;   /* the directory's own */
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

static const char *class_name(int classes)
{
    return classes == FI_ALLOC ? "alloc" : classes == FI_IO ? "io" : "alloc+io";
}

/* One run with point n failing (0: none); returns the faults it met. */
static long one_run(const fl_scenario *sc, int classes, fi_mode mode, long n, const char *what,
                    int *rc_out, long *calls)
{
    char err[1024] = "";
    cur_what = what;
    cur_point = n;
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(on_death);
    if (getenv("TESSERA_FAULT_VERBOSE"))
        fprintf(stderr, "faults: %s: point %ld\n", what, n);
    sc->reset(sc->ctx);
    int fds = fl_count_fds();
    fi_arm(classes, mode, n);
    int rc = sc->run(sc->ctx, err, sizeof err);
    long faults = fi_disarm();
    *calls = fi_calls();
    const char *fn = fi_first_fault();
    if (rc != 0) {
        ck_assert_msg(rc <= TESS_EINVAL && rc >= TESS_EEXIST,
                      "%s, point %ld (%s): code %d is not a TESS_E* code (%s)", what, n, fn, rc,
                      err);
        ck_assert_msg(err[0] != '\0', "%s, point %ld (%s): code %d without a reason", what, n,
                      fn, rc);
        ck_assert_msg(faults > 0, "%s, point %ld: failed with no fault injected: %s", what, n,
                      err);
    }
    sc->check(sc->ctx, rc, faults);
    if (__lsan_do_recoverable_leak_check)
        ck_assert_msg(__lsan_do_recoverable_leak_check() == 0,
                      "%s, point %ld (%s): memory leaked (report above)", what, n, fn);
    int now = fl_count_fds();
    ck_assert_msg(now == fds, "%s, point %ld (%s): %d file descriptors open before, %d after",
                  what, n, fn, fds, now);
    *rc_out = rc;
    return faults;
}

void fl_loop(const fl_scenario *sc, int classes, fi_mode mode)
{
    char what[160];
    snprintf(what, sizeof what, "%s, %s faults, %s", sc->name, class_name(classes),
             mode == FI_PERSISTENT ? "persistent" : "transient");
    double t0 = tt_now_s();
    int rc;
    long points;
    one_run(sc, classes, mode, 0, what, &rc, &points);
    ck_assert_msg(rc == 0, "%s: the run without faults failed (code %d)", what, rc);
    ck_assert_msg(points > 0, "%s: no fault points", what);

    long only = env_long("TESSERA_FAULT_POINT", 0);
    long cap = env_long("TESSERA_FAULT_CAP", sc->cap > 0 ? sc->cap : 300);
    long step = cap > 0 ? (points + cap - 1) / cap : 1, first = 1;
    unsigned long seed = (unsigned long)env_long("TESSERA_FAULT_SEED",
                                                 (long)(time(NULL) ^ getpid()) & 0x7fffffff);
    if (step > 1)
        first = 1 + (long)(seed % (unsigned long)step);
    if (only > 0) {
        first = only;
        step = points + 1;
    }
    long runs = 0, failed = 0, recovered = 0, calls = 0;
    for (long n = first;; n += step) {
        long faults = one_run(sc, classes, mode, n, what, &rc, &calls);
        runs++;
        if (faults == 0) {
            ck_assert_msg(rc == 0, "%s, point %ld: failed with no fault injected", what, n);
            break;
        }
        if (rc)
            failed++;
        else
            recovered++;
        if (only > 0)
            break;
        /* Threads make the count vary a little from run to run; never without end. */
        ck_assert_msg(n <= 4 * points + 1000, "%s: still meeting faults at point %ld of %ld",
                      what, n, points);
    }
    printf("faults: %s: %ld points, %ld runs (every %ld from %ld), %ld failed cleanly, "
           "%ld completed despite the fault, %.1f s\n",
           what, points, runs, step, first, failed, recovered, tt_now_s() - t0);
    if (step > 1)
        printf("faults: %s: TESSERA_FAULT_SEED=%lu repeats these points; TESSERA_FAULT_CAP=0 "
               "runs every one\n", what, seed);
    fflush(stdout);
}

void fl_loop_modes(const fl_scenario *sc, int classes)
{
    fl_loop(sc, classes, FI_TRANSIENT);
    fl_loop(sc, classes, FI_PERSISTENT);
}
