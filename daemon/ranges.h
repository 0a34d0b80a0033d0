/* Byte ranges of replies (RFC 9110, section 14): the Range and If-Range request headers. */
#ifndef TESSERA_DAEMON_RANGES_H
#define TESSERA_DAEMON_RANGES_H

#include <stddef.h>
#include <time.h>

/* What to answer a GET whose whole body is `len` bytes. */
typedef enum {
    RANGES_WHOLE,         /* 200 with the whole body: no Range, or one to ignore */
    RANGES_PART,          /* 206 with bytes first..last (inclusive, 0-based) */
    RANGES_UNSATISFIABLE  /* 416 with "Content-Range: bytes *\/len" */
} ranges_answer;

/* The answer to the Range header `range` (NULL when absent) for a body of `len` bytes
 * (RFC 9110, section 14.1.2): "bytes=a-b" (b past the end is cut to len - 1), "bytes=a-"
 * and "bytes=-n" (the last n bytes; all of them when n >= len) give RANGES_PART with
 * *first and *last set; one range that starts at or past the end (or "-0", or any range
 * of an empty body) gives RANGES_UNSATISFIABLE.  Everything else is RANGES_WHOLE: no
 * header, a unit other than bytes, a malformed set (which section 14.2 lets a server
 * ignore), and a set of more than one range: those are answered 200 with the whole body
 * (allowed by section 14.2) rather than as multipart/byteranges.  Cannot fail. */
ranges_answer ranges_parse(const char *range, unsigned long long len,
                           unsigned long long *first, unsigned long long *last);

/* Whether a Range header is to be applied given If-Range `if_range` (NULL when absent;
 * RFC 9110, section 13.1.5): 1 when absent, or when it is an entity tag equal by strong
 * comparison to `etag` (a quoted strong ETag, or NULL / "" when the body has none), or an
 * HTTP-date (IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT") equal to `last_modified`
 * (seconds since 1970, or (time_t)-1 when the body has no Last-Modified); else 0 (a
 * weak tag, another tag or date, anything unparsable: the whole body is sent).  Cannot
 * fail. */
int ranges_if_range_ok(const char *if_range, const char *etag, time_t last_modified);

/* `t` as an IMF-fixdate (RFC 9110, section 5.6.7) into out[30], for Last-Modified.
 * Cannot fail. */
void ranges_http_date(time_t t, char out[30]);

#endif
