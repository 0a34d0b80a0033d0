/* RFC 9457 problem details for error replies. */
#include "daemon/problem.h"
#include "daemon/http.h"
#include "engine/base/error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 206: return "Partial Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 422: return "Unprocessable Content";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Error";
    }
}

int problem_read_status(int rc, int otherwise)
{
    return rc == TESS_ELIMIT ? 413 : otherwise;
}

char *problem_json(int status, const char *parameter, const char *detail)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "type", json_string("about:blank"));
    json_object_set_new(o, "title", json_string(http_reason(status)));
    json_object_set_new(o, "status", json_integer(status));
    /* json_string refuses invalid UTF-8; details quote request text, so fall back to a
     * byte-safe copy with non-ASCII replaced. */
    json_t *d = json_string(detail);
    if (!d) {
        char safe[512];
        size_t i = 0;
        for (; detail[i] && i + 1 < sizeof(safe); i++)
            safe[i] = (detail[i] & 0x80) ? '?' : detail[i];
        safe[i] = '\0';
        d = json_string(safe);
    }
    json_object_set_new(o, "detail", d ? d : json_string(""));
    /* hips2fits' clients (astroquery) print "title: description": the same text. */
    json_object_set_new(o, "description", json_deep_copy(json_object_get(o, "detail")));
    if (parameter)
        json_object_set_new(o, "parameter", json_string(parameter));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

void problem_reply(hreq *r, int status, const char *parameter, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    char *json = problem_json(status, parameter, detail);
    tile_release(r->rep.body);
    r->rep.body = NULL;
    r->rep.status = status;
    r->rep.cache_control = "no-store";
    if (!json) {
        r->rep.status = 500;
        return;
    }
    r->rep.body = tile_new_take((unsigned char *)json, strlen(json), "application/problem+json");
    if (!r->rep.body)
        r->rep.status = 500;
}
