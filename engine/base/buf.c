/* Growable byte buffer with a hard cap. */
#include "engine/base/buf.h"
#include "engine/base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf *b, size_t cap)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->cap = cap;
}

void buf_release(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

void buf_reset(buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int buf_reserve(buf *b, size_t extra)
{
    if (extra > b->cap || b->len > b->cap - extra)
        return TESS_ERANGE;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return 0;
    size_t n = b->alloc ? b->alloc : 64;
    while (n < need)
        n = n > ((size_t)-1) / 2 ? need : n * 2;
    if (n > b->cap + 1)
        n = b->cap + 1;
    char *p = realloc(b->data, n);
    if (!p)
        return TESS_ENOMEM;
    b->data = p;
    b->alloc = n;
    return 0;
}

int buf_add(buf *b, const void *data, size_t len)
{
    int rc = buf_reserve(b, len);
    if (rc)
        return rc;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_adds(buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

int buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TESS_EINVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *buf_detach(buf *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    return p;
}
