/* RFC 9457 problem details (application/problem+json) for every error reply. */
#ifndef TESSERA_DAEMON_PROBLEM_H
#define TESSERA_DAEMON_PROBLEM_H

struct hreq;

/* Fills the reply of `r` with status `status` and a problem document
 * {"type", "title", "status", "detail", "description"[, "parameter"]}: `type` is
 * "about:blank", `title` the reason phrase of the status, `detail` the printf-formatted
 * text, `description` the same text (the member hips2fits' clients, astroquery's among
 * them, print after the title), and `parameter` names the offending query parameter or
 * path part when not NULL.  Cannot fail: on
 * allocation failure the reply is a bare 500. */
void problem_reply(struct hreq *r, int status, const char *parameter, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same into a malloc'd JSON string (for jobs and tests); NULL on allocation failure. */
char *problem_json(int status, const char *parameter, const char *detail);

/* The status of a failed read of a dataset's pixels that returned the TESS_E* code
 * `rc`: 413 for TESS_ELIMIT (an input over a configured budget, which the message
 * names: a frame or compression tile over limits.max_decoded_mb or
 * limits.max_input_pixels), else `otherwise` (the route's own answer, often 500).
 * Cannot fail. */
int problem_read_status(int rc, int otherwise);

/* Reason phrase of an HTTP status ("Not Found"). */
const char *http_reason(int status);

#endif
