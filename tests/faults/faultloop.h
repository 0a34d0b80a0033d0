/* The fault loop of tests/faults: a scenario run again and again with its n-th fault point
 * failing, n = 1, 2, ..., until a run completes without reaching a fault (curl's torture
 * runs, SQLite's malloc and I/O error loops), checking every run. */
#ifndef TESSERA_TESTS_FAULTS_FAULTLOOP_H
#define TESSERA_TESTS_FAULTS_FAULTLOOP_H

#include <stddef.h>
#include "tests/faults/faultinj.h"

typedef struct fl_scenario {
    const char *name;
    /* Before each run, faults off: a fresh start (scratch directories, inputs). */
    void (*reset)(void *ctx);
    /* The run, with faults armed: the product calls of the scenario.  Returns 0 when the
     * scenario completed, else the TESS_E* code a product call returned, with the reason
     * it gave in err.  Must release what it made before returning, error or not; what a
     * failed run leaves on disk is for check(). */
    int (*run)(void *ctx, char *err, size_t errlen);
    /* After each run, faults off: what the run left must be sound (results equal to those
     * of the run without faults, or a clean failure; files that reopen and resume to the
     * same result).  Fails the test otherwise (ck_assert), and releases what it opened.
     * rc is run()'s result, faults the number of calls that failed. */
    void (*check)(void *ctx, int rc, long faults);
    void *ctx;
    /* The most runs of each loop (0: 300), for scenarios whose runs are slow;
     * TESSERA_FAULT_CAP overrides it. */
    long cap;
} fl_scenario;

/* Runs `sc` first without faults (it must complete; its count of calls of `classes` is
 * the number of fault points), then with fault point n failing (FI_TRANSIENT: that call
 * only; FI_PERSISTENT: that one and every later one) for n = k, k + s, k + 2s, ... until a
 * run reaches no fault.  After every run: no leak (LeakSanitizer, when the program has
 * it), no file descriptor left open, any error a TESS_E* code with a reason, and check().
 * The step s is 1 unless the points outnumber the cap (TESSERA_FAULT_CAP, else sc->cap,
 * else 300; TESSERA_FAULT_CAP=0: no cap): then the smallest step that keeps the runs
 * within the cap, with the first point k drawn
 * from TESSERA_FAULT_SEED (printed; default from the clock).  TESSERA_FAULT_POINT=N runs
 * point N only (to replay a failure); TESSERA_FAULT_VERBOSE=1 names each run's point on
 * stderr before it starts (to find a run that hangs).  Prints one line: points, runs, step, outcomes.
 * Fails the test (ck_assert) at the first run that breaks a rule, naming the point and
 * the function whose call failed. */
void fl_loop(const fl_scenario *sc, int classes, fi_mode mode);

/* fl_loop in transient mode, then in persistent mode. */
void fl_loop_modes(const fl_scenario *sc, int classes);

/* Fails the test with the printf-style message unless cond holds, first disarming the
 * faults (the failure report allocates).  For checks inside run(). */
#define fl_require(cond, ...)            \
    do {                                 \
        if (!(cond)) {                   \
            fi_disarm();                 \
            ck_abort_msg(__VA_ARGS__);   \
        }                                \
    } while (0)

/* Open file descriptors of the process. */
int fl_count_fds(void);

#endif
