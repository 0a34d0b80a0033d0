/* Operator logs: access log (Combined Log Format) and JSON-lines error log (oplog.h). */
#include "daemon/oplog.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct oplog {
    char *path;     /* NULL for standard error */
    int fd;
};

static int open_append(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

int oplog_open(const char *path, oplog **out, char *err, size_t errlen)
{
    oplog *l = calloc(1, sizeof(*l));
    if (!l)
        return TESS_ENOMEM;
    if (strcmp(path, "-") == 0) {
        l->fd = STDERR_FILENO;
    } else {
        if (!(l->path = strdup(path))) {
            free(l);
            return TESS_ENOMEM;
        }
        l->fd = open_append(path);
        if (l->fd < 0) {
            tess_seterr(err, errlen, "cannot open log file %s: %s", path, strerror(errno));
            free(l->path);
            free(l);
            return TESS_EIO;
        }
    }
    *out = l;
    return 0;
}

int oplog_reopen(oplog *l)
{
    if (!l || !l->path)
        return 0;
    int fd = open_append(l->path);
    if (fd < 0)
        return TESS_EIO;
    /* dup2 swaps the file under the same descriptor atomically for concurrent writers. */
    int rc = dup2(fd, l->fd) < 0 ? TESS_EIO : 0;
    close(fd);
    return rc;
}

void oplog_close(oplog *l)
{
    if (!l)
        return;
    if (l->path)
        close(l->fd);
    free(l->path);
    free(l);
}

/* Appends `s` (or "-") to out[*pos..cap), escaping what a log reader must not see raw;
 * at most `max` input characters. */
static void put_field(char *out, size_t cap, size_t *pos, const char *s, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    if (!s || !*s)
        s = "-";
    for (size_t i = 0; s[i] && i < max && *pos + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            out[(*pos)++] = '\\';
            out[(*pos)++] = 'x';
            out[(*pos)++] = hex[c >> 4];
            out[(*pos)++] = hex[c & 15];
        } else {
            out[(*pos)++] = (char)c;
        }
    }
}

static void put_text(char *out, size_t cap, size_t *pos, const char *s)
{
    size_t n = strlen(s);
    if (*pos + n >= cap)
        n = cap - *pos - 1;
    memcpy(out + *pos, s, n);
    *pos += n;
}

void oplog_access(oplog *l, const char *client, long when, const char *method, const char *uri,
                  const char *proto, int status, long long bytes, const char *referer,
                  const char *user_agent)
{
    if (!l)
        return;
    static const char *const mon[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char line[6144];
    size_t pos = 0;
    char tmp[96];
    time_t t = (time_t)when;
    struct tm tm;
    gmtime_r(&t, &tm);
    put_field(line, sizeof line, &pos, client, 64);
    snprintf(tmp, sizeof tmp, " - - [%02d/%s/%04d:%02d:%02d:%02d +0000] \"", tm.tm_mday,
             mon[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    put_text(line, sizeof line, &pos, tmp);
    put_field(line, sizeof line, &pos, method, 16);
    put_text(line, sizeof line, &pos, " ");
    put_field(line, sizeof line, &pos, uri, 4096);
    put_text(line, sizeof line, &pos, " ");
    put_field(line, sizeof line, &pos, proto, 16);
    if (bytes >= 0)
        snprintf(tmp, sizeof tmp, "\" %d %lld \"", status, bytes);
    else
        snprintf(tmp, sizeof tmp, "\" %d - \"", status);
    put_text(line, sizeof line, &pos, tmp);
    put_field(line, sizeof line, &pos, referer, 512);
    put_text(line, sizeof line, &pos, "\" \"");
    put_field(line, sizeof line, &pos, user_agent, 512);
    put_text(line, sizeof line, &pos, "\"\n");
    if (line[pos - 1] != '\n')
        line[pos - 1] = '\n';
    tess_write_all(l->fd, line, pos);
}

void oplog_error_event(const char *path, json_t *obj)
{
    if (!path || !obj) {
        json_decref(obj);
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[96];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (long)(tv.tv_usec / 1000));
    json_t *line = json_pack("{s:s, s:s}", "time", ts, "level", "error");
    if (line)
        json_object_update(line, obj);
    json_decref(obj);
    if (!line)
        return;
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(line);
    if (!text)
        return;
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return;
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    int fd = strcmp(path, "-") == 0 ? STDERR_FILENO : open_append(path);
    if (fd >= 0) {
        tess_write_all(fd, withnl, n + 1);
        if (fd != STDERR_FILENO)
            close(fd);
    }
    free(withnl);
}
