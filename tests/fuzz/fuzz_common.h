/* Helpers shared by the libFuzzer targets of tests/fuzz (built with --enable-fuzzing).
 * Each target defines LLVMFuzzerTestOneInput; the input is arbitrary bytes. */
#ifndef TESSERA_TESTS_FUZZ_FUZZ_COMMON_H
#define TESSERA_TESTS_FUZZ_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The input as a NUL-terminated string (cut at the first NUL, as C string parsers see
 * it).  The caller frees the result; NULL when out of memory. */
static inline char *fz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return NULL;
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* For targets whose first input byte picks what the rest is: the rest as fz_cstr gives
 * it, or NULL for an input of no byte or of more than `max` bytes (or out of memory). */
static inline char *fz_cstr_tail(const uint8_t *data, size_t size, size_t max)
{
    if (size < 1 || size > max)
        return NULL;
    return fz_cstr(data + 1, size - 1);
}

/* A query string "k=v&k=v..." split in place into at most 32 pairs, looked up by the
 * first key that matches (as libmicrohttpd does for repeated keys); values are
 * percent-decoded ("%41" and "+").  Keys with no "=" have an empty value. */
typedef struct fz_query {
    int n;
    char *key[32];
    char *val[32];
} fz_query;

static inline int fz_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static inline void fz_unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '+') {
            *o++ = ' ';
        } else if (*p == '%' && fz_hex(p[1]) >= 0 && fz_hex(p[2]) >= 0) {
            char c = (char)(fz_hex(p[1]) * 16 + fz_hex(p[2]));
            p += 2;
            if (c == '\0')
                break; /* a value ends at a decoded NUL, as a C string would */
            *o++ = c;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

static inline void fz_query_split(char *s, fz_query *q)
{
    q->n = 0;
    for (char *p = s; p && *p && q->n < 32;) {
        char *amp = strchr(p, '&');
        if (amp)
            *amp = '\0';
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        q->key[q->n] = p;
        q->val[q->n] = eq ? eq + 1 : p + strlen(p);
        fz_unescape(q->key[q->n]);
        fz_unescape(q->val[q->n]);
        q->n++;
        p = amp ? amp + 1 : NULL;
    }
}

static inline const char *fz_query_get(void *cls, const char *key)
{
    fz_query *q = cls;
    for (int i = 0; i < q->n; i++)
        if (strcmp(q->key[i], key) == 0)
            return q->val[i];
    return NULL;
}

#endif
