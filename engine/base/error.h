/* Error codes shared by every Tessera module (0 is success, failures are negative) and
 * the helper that writes a failure reason into an `err` buffer. */
#ifndef TESSERA_ENGINE_BASE_ERROR_H
#define TESSERA_ENGINE_BASE_ERROR_H

#include <stddef.h>

/* Functions that can fail return 0 (or a non-negative count) on success and one of
 * these negative codes on failure.  Modules that also take an `err` buffer write a
 * one-line, human-readable reason there (NUL-terminated, truncated to its size). */
enum {
    TESS_OK       = 0,
    TESS_EINVAL   = -1,  /* bad argument or malformed input (bad header, bad parameter) */
    TESS_ENOMEM   = -2,  /* allocation failed */
    TESS_EIO      = -3,  /* file could not be read or written */
    TESS_ERANGE   = -4,  /* size or index outside the allowed range */
    TESS_ENOWCS   = -5,  /* no usable (celestial) WCS */
    TESS_ENOOVERLAP = -6,/* the target does not overlap the source */
    TESS_EAGAIN   = -7,  /* queue full, try again later */
    TESS_ENOTFOUND = -8, /* no such name */
    TESS_ETOOBIG  = -9,  /* result larger than the configured limit */
    TESS_ECANCELED = -10,/* the work was cancelled */
    TESS_EEXIST   = -11, /* the name is already taken */
    TESS_ELIMIT   = -12  /* an input larger than a configured budget of what one input
                            may take (engine/base/decodelimit.h): the message names it */
};

/* Writes the printf-formatted reason into err (NUL-terminated, truncated to errlen
 * bytes).  Does nothing when err is NULL or errlen is 0.  Cannot fail. */
void tess_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
