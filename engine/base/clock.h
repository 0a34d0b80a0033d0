/* Monotonic clock: CLOCK_MONOTONIC in seconds, for intervals, time-outs and staleness checks. */
#ifndef TESSERA_ENGINE_BASE_CLOCK_H
#define TESSERA_ENGINE_BASE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC, to the nanosecond the clock gives: counted from an
 * unspecified start, so only differences mean anything; never steps back, unaffected by
 * changes to the wall clock (a date is CLOCK_REALTIME's business).  Cannot fail. */
static inline double tess_mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
