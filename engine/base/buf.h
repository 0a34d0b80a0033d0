/* Growable byte buffer with a hard cap fixed at init (in the manner of curl's dynbuf). */
#ifndef TESSERA_ENGINE_BASE_BUF_H
#define TESSERA_ENGINE_BASE_BUF_H

#include <stddef.h>
#include <stdarg.h>

typedef struct buf {
    char *data;      /* NUL-terminated contents, or NULL while empty */
    size_t len;      /* bytes used, excluding the terminating NUL */
    size_t alloc;    /* bytes allocated */
    size_t cap;      /* the most bytes this buffer may ever hold */
} buf;

/* Starts an empty buffer that refuses to grow past `cap` bytes.  Cannot fail. */
void buf_init(buf *b, size_t cap);

/* Frees the contents and leaves the buffer empty and reusable.  Cannot fail. */
void buf_release(buf *b);

/* Empties the buffer but keeps its allocation.  Cannot fail. */
void buf_reset(buf *b);

/* Appends `len` bytes.  Returns 0, TESS_ERANGE when the cap would be passed, or
 * TESS_ENOMEM; on error the buffer is unchanged. */
int buf_add(buf *b, const void *data, size_t len);

/* Appends a NUL-terminated string; errors as buf_add. */
int buf_adds(buf *b, const char *s);

/* Appends printf-formatted text; errors as buf_add. */
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Hands the contents to the caller (free() them) and leaves the buffer empty.
 * Returns NULL when the buffer was empty. */
char *buf_detach(buf *b, size_t *len);

#endif
