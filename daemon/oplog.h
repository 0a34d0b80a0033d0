/* Operator logs: the access log (Combined Log Format) and the error log (JSON lines).
 *
 * Access log: one line per answered request, Apache/nginx "combined" format
 *   HOST - - [DD/Mon/YYYY:HH:MM:SS +0000] "METHOD URI PROTO" STATUS BYTES "REFERER" "UA"
 * (UTC times; BYTES is "-" for an empty body; STATUS 499 when the client went away before
 * an answer was queued, as nginx logs it).  Characters outside printable ASCII, '"' and
 * '\' in the quoted fields are written as \xHH.
 *
 * Error log: one JSON object a line, {"time": ISO 8601 UTC with milliseconds, "level":
 * "error", "event": ..., ...}, for 5xx answers (other than the 503s of load shedding and
 * the 501s of transfer codings a client sent, counted in /metrics) and failed jobs.
 *
 * A path "-" is standard error.  Lines are written with one write(2) to a file opened
 * O_APPEND, so concurrent writers (threads, processes) never interleave within a line. */
#ifndef TESSERA_DAEMON_OPLOG_H
#define TESSERA_DAEMON_OPLOG_H

#include <stddef.h>
#include <jansson.h>

/* An open log file (or standard error).  Thread-safe. */
typedef struct oplog oplog;

/* Opens `path` for appending (created 0640 when missing; "-" = standard error).  Returns 0
 * and *out, or TESS_EIO with err, TESS_ENOMEM. */
int oplog_open(const char *path, oplog **out, char *err, size_t errlen);

/* Reopens the same path (after logrotate moved the file: SIGHUP).  Writers never see a
 * closed descriptor.  Returns 0 or TESS_EIO (the old file stays in use). */
int oplog_reopen(oplog *l);

/* Closes the file (not standard error).  NULL is ignored. */
void oplog_close(oplog *l);

/* Writes one access-log line.  `client` is the peer address text, `uri` the raw request
 * target, `bytes` < 0 prints "-"; NULL strings print "-".  `when` is the request's
 * arrival (time(2)). */
void oplog_access(oplog *l, const char *client, long when, const char *method, const char *uri,
                  const char *proto, int status, long long bytes, const char *referer,
                  const char *user_agent);

/* Writes `obj` (a JSON object; this function adds "time" and "level": "error" first and
 * steals the reference) as one line of the error log `path` ("-" = standard error;
 * NULL = no error log: the object is just released).  The file is opened and closed on
 * each call (errors are rare), so any thread may call this without an oplog. */
void oplog_error_event(const char *path, json_t *obj);

#endif
