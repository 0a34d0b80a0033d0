/* Checked size arithmetic: products and sums of sizes read from files or requests, overflow refused. */
#ifndef TESSERA_ENGINE_BASE_CHECKED_H
#define TESSERA_ENGINE_BASE_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"

/* The largest size these functions give: PTRDIFF_MAX (2^63 - 1 on LP64), the largest
 * object C allows (C11 7.20.3; glibc's malloc refuses more).  A size within it also fits
 * in long, long long, off_t and ptrdiff_t, so that a checked size may be used in any of
 * them, and the product of any subset of checked factors (each >= 1) is below it too. */
#define TESS_SIZE_MAX ((size_t)PTRDIFF_MAX)

/* *out = a * b.  Returns 0, or TESS_ERANGE when the product passes TESS_SIZE_MAX (then
 * *out = TESS_SIZE_MAX, a value that fails any later comparison with a real size). */
static inline int tess_size_mul(size_t a, size_t b, size_t *out)
{
    size_t p;
    if (__builtin_mul_overflow(a, b, &p) || p > TESS_SIZE_MAX) {
        *out = TESS_SIZE_MAX;
        return TESS_ERANGE;
    }
    *out = p;
    return 0;
}

/* *out = a + b.  Returns 0, or TESS_ERANGE as tess_size_mul. */
static inline int tess_size_add(size_t a, size_t b, size_t *out)
{
    size_t s;
    if (__builtin_add_overflow(a, b, &s) || s > TESS_SIZE_MAX) {
        *out = TESS_SIZE_MAX;
        return TESS_ERANGE;
    }
    *out = s;
    return 0;
}

/* *out = elem x dims[0] x ... x dims[n-1]: the bytes of an array of that shape of
 * `elem`-byte values (elem 1 gives the count of values; n 0 gives elem; a zero dimension
 * gives 0).  Returns 0, TESS_EINVAL (a dimension below 0; *out = 0) or TESS_ERANGE (the
 * product passes TESS_SIZE_MAX; *out = TESS_SIZE_MAX). */
static inline int tess_size_dims(size_t elem, const long *dims, int n, size_t *out)
{
    size_t p = elem;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0) {
            *out = 0;
            return TESS_EINVAL;
        }
        if (dims[i] == 0)
            p = 0;
    }
    for (int i = 0; i < n && p > 0; i++) {
        if (tess_size_mul(p, (size_t)dims[i], &p)) {
            *out = TESS_SIZE_MAX;
            return TESS_ERANGE;
        }
    }
    *out = p;
    return 0;
}

/* *out = a * b for counts kept in long (pixels, planes; long holds TESS_SIZE_MAX on the
 * LP64 systems Tessera builds on).  Returns 0, or TESS_ERANGE when a factor is negative
 * or the product passes TESS_SIZE_MAX (then *out = TESS_SIZE_MAX). */
_Static_assert(sizeof(long) >= sizeof(ptrdiff_t), "long must hold TESS_SIZE_MAX");
static inline int tess_long_mul(long a, long b, long *out)
{
    size_t p;
    if (a < 0 || b < 0 || tess_size_mul((size_t)a, (size_t)b, &p)) {
        *out = (long)TESS_SIZE_MAX;
        return TESS_ERANGE;
    }
    *out = (long)p;
    return 0;
}

#endif
