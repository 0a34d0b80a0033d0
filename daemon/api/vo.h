/* The IVOA access layer's shared parts: DAL parameters (query and form body), plain-text
 * and XML answers, and the server's base URL (vo.c); the handlers are in handlers.h. */
#ifndef TESSERA_DAEMON_API_VO_H
#define TESSERA_DAEMON_API_VO_H

#include <stddef.h>
#include "daemon/http.h"
#include "daemon/api/vo_xml.h"

/* The parameters of a DAL request: those of the query, then those of an
 * application/x-www-form-urlencoded body (a POST), in order, values decoded.  DAL
 * parameter names are case-insensitive (vo_params_get). */
#define VO_MAX_PARAMS 512
typedef struct vo_params {
    char *key[VO_MAX_PARAMS], *value[VO_MAX_PARAMS];
    int n;
    int failed;
} vo_params;

/* Fills p from r.  Returns 0, TESS_ERANGE (more than VO_MAX_PARAMS parameters: those
 * past it are dropped) or TESS_ENOMEM; release p with vo_params_release in every case. */
int vo_params_collect(hreq *r, vo_params *p);
/* vo_params_collect, answering (and releasing p) when it fails, 400 UsageError for too
 * many parameters, 500 FatalFault for memory: returns 0, or -1 after that answer. */
int vo_params_take(hreq *r, vo_params *p);
/* The first value of `key` (any case) or NULL; *count (may be NULL) gets how many. */
const char *vo_params_get(const vo_params *p, const char *key, int *count);
void vo_params_release(vo_params *p);

/* Answers `status` with a text/plain line (DALI errors: "UsageError: ...", "NotFoundFault:
 * ..."), Cache-Control no-cache. */
void vo_reply_text(hreq *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Answers `status` with the document of x (finished and freed here; NULL or a failed
 * document answers 500). */
void vo_reply_xml(hreq *r, int status, voxml *x, const char *content_type);

/* "http://HOST" (https when X-Forwarded-Proto says so), HOST from the Host header (the
 * bound address when it is missing or odd): the base of the absolute URLs in answers. */
void vo_base_url(hreq *r, char *out, size_t len);

#endif
