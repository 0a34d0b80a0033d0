/* FITS header cards: formatting, lookup, the structural keywords and header text parsing (fitscard.h). */
#include "engine/fits/fitscard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/checked.h"
#include "engine/base/error.h"

/* ---- formatting one card ------------------------------------------------------------ */

/* 1 when `key` is a keyword of 1 to 8 characters of A-Z, 0-9, '-', '_' (FITS 4.0,
 * section 4.1.2.1); "" too when `blank_ok` (the blank keyword of commentary cards). */
static int valid_key(const char *key, int blank_ok)
{
    if (!key)
        return 0;
    size_t n = strlen(key);
    if (n > 8 || (n == 0 && !blank_ok))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

/* Writes "KEY     = " + value (`vlen` characters, the value field padded to column 30)
 * + " / comment" into card, blank-padded or cut to 80. */
static void put_value(char *card, const char *key, const char *value, size_t vlen,
                      const char *comment)
{
    char line[FITSCARD_LEN];
    memset(line, ' ', sizeof line);
    memcpy(line, key, strlen(key));
    line[8] = '=';
    size_t p = 10;
    if (vlen > FITSCARD_LEN - p)
        vlen = FITSCARD_LEN - p;
    memcpy(line + p, value, vlen);
    p += vlen;
    if (p < 30)
        p = 30;
    if (comment && p + 3 < FITSCARD_LEN) {
        memcpy(line + p, " / ", 3);
        p += 3;
        size_t clen = strlen(comment);
        if (clen > FITSCARD_LEN - p)
            clen = FITSCARD_LEN - p;
        for (size_t i = 0; i < clen; i++) {
            unsigned char c = (unsigned char)comment[i];
            line[p + i] = c >= 32 && c <= 126 ? (char)c : '?';
        }
    }
    memcpy(card, line, FITSCARD_LEN);
}

/* A value right-justified to column 30: `text` printed in the 20 columns 11-30 (wider
 * values run on). */
static void put_number(char *card, const char *key, const char *text, const char *comment)
{
    char v[72];
    int n = snprintf(v, sizeof v, "%20s", text);
    put_value(card, key, v, n < 0 ? 0 : (size_t)n, comment);
}

int fitscard_string(char *card, const char *key, const char *value, int minlen,
                    const char *comment)
{
    if (!valid_key(key, 0) || !value)
        return TESS_EINVAL;
    /* Columns 11-80 hold the quotes and at most 68 characters between them. */
    char q[FITSCARD_LEN];
    size_t n = 0;
    q[n++] = '\'';
    for (const char *s = value; *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t need = c == '\'' ? 2 : 1;
        if (n + need > 69)
            break;
        q[n++] = c >= 32 && c <= 126 ? (char)c : '?';
        if (c == '\'')
            q[n++] = '\'';
    }
    if (strcmp(key, "XTENSION") == 0 && minlen < 8)
        minlen = 8;
    if (minlen > 68)
        minlen = 68;
    while ((int)n < minlen + 1)
        q[n++] = ' ';
    q[n++] = '\'';
    put_value(card, key, q, n, comment);
    return 0;
}

int fitscard_int(char *card, const char *key, long long value, const char *comment)
{
    if (!valid_key(key, 0))
        return TESS_EINVAL;
    char t[32];
    snprintf(t, sizeof t, "%lld", value);
    put_number(card, key, t, comment);
    return 0;
}

int fitscard_real(char *card, const char *key, double value, int digits, const char *comment)
{
    if (!valid_key(key, 0) || !isfinite(value) || digits < 0 || digits > 17)
        return TESS_EINVAL;
    char t[40];
    if (digits == FITSCARD_EXACT) {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*G", prec, value);
            if (strtod(t, NULL) == value)
                break;
        }
    } else {
        snprintf(t, sizeof t, "%.*G", digits, value);
    }
    if (!strpbrk(t, ".E"))
        strcat(t, ".0");
    put_number(card, key, t, comment);
    return 0;
}

int fitscard_logical(char *card, const char *key, int value, const char *comment)
{
    if (!valid_key(key, 0))
        return TESS_EINVAL;
    put_number(card, key, value ? "T" : "F", comment);
    return 0;
}

int fitscard_commentary(char *card, const char *key, const char *text)
{
    if (!valid_key(key, 1) || !text)
        return TESS_EINVAL;
    memset(card, ' ', FITSCARD_LEN);
    memcpy(card, key, strlen(key));
    size_t n = strlen(text);
    if (n > FITSCARD_LEN - 8)
        n = FITSCARD_LEN - 8;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        card[8 + i] = c >= 32 && c <= 126 ? (char)c : '?';
    }
    return 0;
}

void fitscard_from_text(char *card, const char *text, size_t len)
{
    if (len > FITSCARD_LEN)
        len = FITSCARD_LEN;
    memset(card, ' ', FITSCARD_LEN);
    memcpy(card, text, len);
}

/* ---- a header under construction ----------------------------------------------------- */

void fitscard_list_init(fitscard_list *l, int max_cards)
{
    memset(l, 0, sizeof *l);
    l->max = max_cards > 0 ? max_cards : 1;
}

/* Room for one more card at the end, or NULL with l->rc set. */
static char *list_slot(fitscard_list *l)
{
    if (l->rc)
        return NULL;
    if (l->n >= l->max) {
        l->rc = TESS_ERANGE;
        return NULL;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? (l->cap > l->max / 2 ? l->max : 2 * l->cap) : (l->max < 64 ? l->max : 64);
        char *c = realloc(l->cards, (size_t)cap * FITSCARD_LEN + 1);
        if (!c) {
            l->rc = TESS_ENOMEM;
            return NULL;
        }
        l->cards = c;
        l->cap = cap;
    }
    return l->cards + (size_t)l->n * FITSCARD_LEN;
}

/* Counts the card just written into the slot, or records its failure. */
static int list_done(fitscard_list *l, int rc)
{
    if (rc) {
        l->rc = rc;
        return rc;
    }
    l->n++;
    l->cards[(size_t)l->n * FITSCARD_LEN] = '\0';
    return 0;
}

int fitscard_list_string(fitscard_list *l, const char *key, const char *value, int minlen,
                         const char *comment)
{
    char *c = list_slot(l);
    return c ? list_done(l, fitscard_string(c, key, value, minlen, comment)) : l->rc;
}

int fitscard_list_int(fitscard_list *l, const char *key, long long value, const char *comment)
{
    char *c = list_slot(l);
    return c ? list_done(l, fitscard_int(c, key, value, comment)) : l->rc;
}

int fitscard_list_real(fitscard_list *l, const char *key, double value, int digits,
                       const char *comment)
{
    char *c = list_slot(l);
    return c ? list_done(l, fitscard_real(c, key, value, digits, comment)) : l->rc;
}

int fitscard_list_logical(fitscard_list *l, const char *key, int value, const char *comment)
{
    char *c = list_slot(l);
    return c ? list_done(l, fitscard_logical(c, key, value, comment)) : l->rc;
}

int fitscard_list_commentary(fitscard_list *l, const char *key, const char *text)
{
    char *c = list_slot(l);
    return c ? list_done(l, fitscard_commentary(c, key, text)) : l->rc;
}

int fitscard_list_text(fitscard_list *l, const char *text)
{
    char *c = list_slot(l);
    if (!c)
        return l->rc;
    fitscard_from_text(c, text, strlen(text));
    return list_done(l, 0);
}

int fitscard_list_cards(fitscard_list *l, const char *cards, int n)
{
    for (int i = 0; i < n && !l->rc; i++) {
        char *c = list_slot(l);
        if (c) {
            memcpy(c, cards + (size_t)i * FITSCARD_LEN, FITSCARD_LEN);
            list_done(l, 0);
        }
    }
    return l->rc;
}

int fitscard_list_take(fitscard_list *l, char **cards, int *n)
{
    int rc = l->rc;
    *cards = NULL;
    *n = 0;
    if (rc == 0 && !l->cards) {
        l->cards = malloc(1);
        if (l->cards)
            l->cards[0] = '\0';
        else
            rc = TESS_ENOMEM;
    }
    if (rc) {
        fitscard_list_release(l);
        return rc;
    }
    *cards = l->cards;
    *n = l->n;
    int max = l->max;
    fitscard_list_init(l, max);
    return 0;
}

void fitscard_list_release(fitscard_list *l)
{
    free(l->cards);
    int max = l->max;
    fitscard_list_init(l, max);
}

size_t fitscard_header_size(int n)
{
    size_t cards = (size_t)(n > 0 ? n : 0) + 1;
    return (cards + 35) / 36 * FITSCARD_BLOCK;
}

void fitscard_header_write(char *dst, const char *cards, int n)
{
    size_t size = fitscard_header_size(n);
    memset(dst, ' ', size);
    if (n > 0)
        memcpy(dst, cards, (size_t)n * FITSCARD_LEN);
    memcpy(dst + (size_t)(n > 0 ? n : 0) * FITSCARD_LEN, "END", 3);
}

/* ---- reading cards ------------------------------------------------------------------ */

int fitscard_key_is(const char *card, const char *key)
{
    size_t k = strlen(key);
    if (k > 8 || memcmp(card, key, k) != 0)
        return 0;
    for (size_t i = k; i < 8; i++)
        if (card[i] != ' ')
            return 0;
    return 1;
}

int fitscard_number(const char *card, long long *iv, double *dv)
{
    char v[72];
    memcpy(v, card + 10, 70);
    v[70] = '\0';
    char *slash = strchr(v, '/');
    if (slash)
        *slash = '\0';
    for (char *c = v; *c; c++)
        if (*c == 'D' || *c == 'd')
            *c = 'E';   /* FITS allows a D exponent */
    char *end;
    errno = 0;
    if (iv)
        *iv = strtoll(v, &end, 10);
    else
        *dv = strtod(v, &end);
    if (end == v || errno)
        return 0;
    while (*end == ' ')
        end++;
    return *end == '\0';
}

/* Copies s[0..n) into val (truncating, always NUL-terminated when vallen > 0). */
static void copy_out(const char *s, size_t n, char *val, size_t vallen)
{
    if (!val || vallen == 0)
        return;
    if (n >= vallen)
        n = vallen - 1;
    memcpy(val, s, n);
    val[n] = '\0';
}

/* Card layout per the FITS Standard 4.0, section 4.1: keyword in columns 1-8, value
 * indicator "= " in columns 9-10, value from column 11, string values in single quotes
 * with '' standing for a quote, a comment after '/'.  Cards without a value indicator
 * (COMMENT, HISTORY, ...) give their text from column 9 with blanks trimmed. */
int fitscard_get(const char *cards, int n, const char *key, char *val, size_t vallen)
{
    if (!cards || !key || n <= 0)
        return 0;
    size_t klen = strlen(key);
    if (klen == 0 || klen > 8)
        return 0;
    for (int i = 0; i < n; i++) {
        const char *card = cards + (size_t)i * FITSCARD_LEN;
        if (!fitscard_key_is(card, key))
            continue;
        if (card[8] != '=' || card[9] != ' ') {
            size_t a = 8, b = FITSCARD_LEN;
            while (a < b && card[a] == ' ')
                a++;
            while (b > a && card[b - 1] == ' ')
                b--;
            copy_out(card + a, b - a, val, vallen);
            return 1;
        }
        size_t p = 10;
        while (p < FITSCARD_LEN && card[p] == ' ')
            p++;
        if (p < FITSCARD_LEN && card[p] == '\'') {
            char s[FITSCARD_LEN];
            size_t m = 0;
            for (p++; p < FITSCARD_LEN; p++) {
                if (card[p] == '\'') {
                    if (p + 1 < FITSCARD_LEN && card[p + 1] == '\'') {
                        s[m++] = '\'';
                        p++;
                    } else {
                        break;
                    }
                } else {
                    s[m++] = card[p];
                }
            }
            while (m > 0 && s[m - 1] == ' ')
                m--;
            copy_out(s, m, val, vallen);
            return 1;
        }
        size_t e = p;
        while (e < FITSCARD_LEN && card[e] != '/')
            e++;
        while (e > p && card[e - 1] == ' ')
            e--;
        copy_out(card + p, e - p, val, vallen);
        return 1;
    }
    return 0;
}

/* The first value card ("= " in columns 9-10) whose keyword is `key`, or NULL. */
static const char *value_card(const char *cards, int n, const char *key)
{
    if (!cards || !key)
        return NULL;
    for (int i = 0; i < n; i++) {
        const char *card = cards + (size_t)i * FITSCARD_LEN;
        if (fitscard_key_is(card, key) && card[8] == '=' && card[9] == ' ')
            return card;
    }
    return NULL;
}

int fitscard_value_real(const char *cards, int n, const char *key, double *v)
{
    const char *card = value_card(cards, n, key);
    double x;
    if (!card || !fitscard_number(card, NULL, &x) || !isfinite(x))
        return 0;
    *v = x;
    return 1;
}

int fitscard_value_string(const char *cards, int n, const char *key, char *str, size_t strn)
{
    const char *card = value_card(cards, n, key);
    if (!card)
        return 0;
    size_t p = 10;
    while (p < FITSCARD_LEN && card[p] == ' ')
        p++;
    if (p >= FITSCARD_LEN || card[p] != '\'')
        return 0;
    return fitscard_get(card, 1, key, str, strn);
}

int fitscard_unterminated_string(const char *card)
{
    if (card[8] != '=' || card[9] != ' ')
        return 0;
    int i = 10;
    while (i < FITSCARD_LEN && card[i] == ' ')
        i++;
    if (i >= FITSCARD_LEN || card[i] != '\'')
        return 0;
    for (i++; i < FITSCARD_LEN; i++) {
        if (card[i] == '\'') {
            if (i + 1 < FITSCARD_LEN && card[i + 1] == '\'')
                i++;
            else
                return 0;
        }
    }
    return 1;
}

int fitscard_blank_value(const char *card)
{
    for (int i = 9; i < FITSCARD_LEN; i++)
        if (card[i] != ' ')
            return 0;
    return 1;
}

int fitscard_is_number_text(const char *v)
{
    const char *p = v + (*v == '+' || *v == '-');
    size_t a = strspn(p, "0123456789");
    p += a;
    size_t b = 0;
    if (*p == '.') {
        b = strspn(++p, "0123456789");
        p += b;
    }
    if (a + b == 0)
        return 0;
    if (*p && strchr("EeDd", *p)) {
        p++;
        p += *p == '+' || *p == '-';
        size_t e = strspn(p, "0123456789");
        if (e == 0)
            return 0;
        p += e;
    }
    return *p == '\0';
}

int fitscard_is_structural(const char *card)
{
    static const char *const keys[] = {
        "SIMPLE", "XTENSION", "END", "BITPIX", "NAXIS", "EXTEND", "PCOUNT", "GCOUNT",
        "BSCALE", "BZERO", "BLANK", "CHECKSUM", "DATASUM", "EXTNAME", "DATAMIN", "DATAMAX",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (fitscard_key_is(card, keys[i]))
            return 1;
    if (memcmp(card, "NAXIS", 5) == 0) {   /* NAXISn: digits, then blanks */
        int i = 5;
        if (card[i] < '0' || card[i] > '9')
            return 0;
        while (i < 8 && card[i] >= '0' && card[i] <= '9')
            i++;
        while (i < 8 && card[i] == ' ')
            i++;
        return i == 8;
    }
    return 0;
}

/* ---- the structure of an image HDU --------------------------------------------------- */

/* "N1 x N2 x ..." of the first naxis lengths into buf (cut to len). */
static void shape_text(const long *naxes, int naxis, char *buf, size_t len)
{
    size_t p = 0;
    buf[0] = '\0';
    for (int i = 0; i < naxis && p < len; i++) {
        int w = snprintf(buf + p, len - p, "%s%ld", i ? " x " : "", naxes[i]);
        if (w < 0)
            break;
        p += (size_t)w;
    }
}

int fitscard_check_image(int bitpix, int naxis, const long *naxes, int maxdim,
                         long long data_offset, long long file_size, size_t *bytes,
                         char *err, size_t errlen)
{
    if (bytes)
        *bytes = 0;
    if (bitpix != 8 && bitpix != 16 && bitpix != 32 && bitpix != 64 && bitpix != -32 &&
        bitpix != -64) {
        tess_seterr(err, errlen, "BITPIX = %d is not 8, 16, 32, 64, -32 or -64 (FITS 4.0, "
                    "section 4.4.1.1)", bitpix);
        return TESS_EINVAL;
    }
    if (naxis < 0 || naxis > maxdim) {
        tess_seterr(err, errlen, "NAXIS = %d: images of 0 to %d axes are read", naxis, maxdim);
        return TESS_EINVAL;
    }
    for (int i = 0; i < naxis; i++) {
        if (naxes[i] < 1) {
            tess_seterr(err, errlen, "NAXIS%d = %ld: an image axis holds at least 1 pixel",
                        i + 1, naxes[i]);
            return TESS_EINVAL;
        }
    }
    char shape[160];
    shape_text(naxes, naxis, shape, sizeof shape);
    size_t size = 0;
    if (naxis > 0 && tess_size_dims((size_t)(bitpix < 0 ? -bitpix : bitpix) / 8, naxes, naxis,
                                    &size)) {
        tess_seterr(err, errlen, "%s values of BITPIX %d (NAXIS1 to NAXIS%d) make more than "
                    "%zu bytes of data: the header's sizes overflow", shape, bitpix, naxis,
                    TESS_SIZE_MAX);
        return TESS_EINVAL;
    }
    if (data_offset >= 0) {
        size_t end;
        if (file_size < 0 || tess_size_add((size_t)data_offset, size, &end) ||
            end > (unsigned long long)file_size) {
            tess_seterr(err, errlen, "the file is shorter than its header says: %s values of "
                        "BITPIX %d need %zu bytes of data from byte %lld, the file has %lld",
                        shape, bitpix, size, data_offset, file_size);
            return TESS_EIO;
        }
    }
    if (bytes)
        *bytes = size;
    return 0;
}

/* 1 when c may stand in a keyword: A-Z, 0-9, '-', '_' (FITS 4.0, section 4.1.2.1), or
 * a-z, which cfitsio turns into upper case. */
static int keyword_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

int fitscard_check_chars(char *cards, int n, int *replaced, char *err, size_t errlen)
{
    int rep = 0;
    if (replaced)
        *replaced = 0;
    for (int i = 0; cards && i < n; i++) {
        char *c = cards + (size_t)i * FITSCARD_LEN;
        int k = 0, bad = 0;
        while (k < 8 && keyword_char(c[k]))
            k++;
        for (int j = k; j < 8; j++)
            bad |= c[j] != ' ';
        if (bad) {
            char shown[8 * 4 + 1];
            size_t p = 0;
            for (int j = 0; j < 8; j++) {
                unsigned char b = (unsigned char)c[j];
                if (b >= 32 && b <= 126 && b != '\\')
                    shown[p++] = (char)b;
                else
                    p += (size_t)snprintf(shown + p, sizeof shown - p, "\\x%02X", b);
            }
            while (p > 0 && shown[p - 1] == ' ')
                p--;
            shown[p] = '\0';
            tess_seterr(err, errlen, "card %d: keyword '%s' is not a FITS keyword (1 to 8 of "
                        "A-Z, 0-9, '-', '_', then blanks: FITS 4.0, section 4.1.2.1)", i + 1,
                        shown);
            return TESS_EINVAL;
        }
        for (int j = 8; j < FITSCARD_LEN; j++) {
            unsigned char b = (unsigned char)c[j];
            if (b < 32 || b > 126) {
                c[j] = '?';
                rep++;
            }
        }
    }
    if (replaced)
        *replaced = rep;
    return 0;
}

/* ---- header text ---------------------------------------------------------------------- */

int fitscard_text_is_fits(const char *text, size_t len)
{
    return len >= FITSCARD_BLOCK && memchr(text, '\n', FITSCARD_BLOCK) == NULL &&
           strncmp(text, "SIMPLE  =", 9) == 0;
}

/* A NAXISn card (n digits only) must hold a whole number from 1 (fitscard_check_image).
 * Returns 0 or TESS_EINVAL with err. */
static int check_axis_card(const char *card, int line, char *err, size_t errlen)
{
    if (card[8] != '=' || memcmp(card, "NAXIS", 5) != 0 || !fitscard_is_structural(card) ||
        card[5] == ' ')
        return 0;
    char v[72];
    size_t n = 0;
    for (size_t i = 10; i < FITSCARD_LEN && card[i] != '/' && n + 1 < sizeof v; i++)
        if (card[i] != ' ')
            v[n++] = card[i];
    v[n] = '\0';
    char *end;
    errno = 0;
    long long len = strtoll(v, &end, 10);
    if (n == 0 || *end != '\0' || errno == ERANGE || len < 1) {
        char key[9];
        memcpy(key, card, 8);
        key[8] = '\0';
        for (int k = 7; k > 0 && key[k] == ' '; k--)
            key[k] = '\0';
        tess_seterr(err, errlen, "header line %d: %s = %.30s: an image axis holds a whole "
                    "number of pixels, at least 1", line, key, v);
        return TESS_EINVAL;
    }
    return 0;
}

/* 1 when the n characters at s are all blanks. */
static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ')
            return 0;
    return 1;
}

/* One card of header text: the cl <= 80 characters at s, of line `line`.  Blank
 * cards are skipped; an END card sets *end.  Returns 0 or TESS_EINVAL/TESS_ENOMEM with
 * err set. */
static int parse_card(const char *s, size_t cl, int line, fitscard_list *out, int max_cards,
                      int *end, char *err, size_t errlen)
{
    for (size_t i = 0; i < cl; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 32 || ch > 126) {
            tess_seterr(err, errlen, "header line %d has a non-printable character "
                        "(byte %u)", line, ch);
            return TESS_EINVAL;
        }
    }
    if (cl >= 3 && memcmp(s, "END", 3) == 0 && is_blank(s + 3, cl - 3)) {
        *end = 1;
        return 0;
    }
    if (is_blank(s, cl))
        return 0;
    if (out->n >= max_cards) {
        tess_seterr(err, errlen, "header has more than %d cards", max_cards);
        return TESS_EINVAL;
    }
    char card[FITSCARD_LEN];
    fitscard_from_text(card, s, cl);
    int rc = check_axis_card(card, line, err, errlen);
    if (rc)
        return rc;
    if (fitscard_list_cards(out, card, 1) != 0) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    return 0;
}

int fitscard_parse(const char *text, size_t len, int max_cards, char **cards, int *n,
                   char *err, size_t errlen)
{
    *cards = NULL;
    *n = 0;
    if (!text || max_cards < 1) {
        tess_seterr(err, errlen, "header has no cards");
        return TESS_EINVAL;
    }
    /* Raw cards: no newline at all, or a whole FITS file, whose data after the header
     * may hold any byte and are not read. */
    int fits_file = fitscard_text_is_fits(text, len);
    int raw = fits_file || memchr(text, '\n', len) == NULL;
    /* Raw cards that open with SIMPLE or XTENSION are a FITS header (head -c of a file,
     * whatever its length: a cut inside the first block too), which always ends with END;
     * raw cards without END stay accepted otherwise (WCS.to_header().tostring(
     * endcard=False) writes them, never opening with SIMPLE). */
    int fits_header = raw && len >= 9 && (strncmp(text, "SIMPLE  =", 9) == 0 ||
                                          strncmp(text, "XTENSION=", 9) == 0);
    /* A FITS header is read to its END whatever follows (a file cut in its data, or in
     * the blanks after END, has its whole header; its data are not read): the loop below
     * tells a cut inside a card before END.  Other raw cards must be whole. */
    if (raw && !fits_header && len % FITSCARD_LEN != 0) {
        tess_seterr(err, errlen, "header must be text with one 80-character card a line, or "
                    "a FITS header of whole 80-character cards (got %zu bytes, without "
                    "newlines)", len);
        return TESS_EINVAL;
    }
    fitscard_list out;
    fitscard_list_init(&out, max_cards);
    int line = 0, rc = 0, end = 0;
    size_t pos = 0;
    while (pos < len && !end) {
        size_t l;
        if (raw) {
            if (len - pos < FITSCARD_LEN) {   /* a FITS header (above) cut inside a card */
                tess_seterr(err, errlen, "the FITS header ends in the middle of a card (%zu "
                            "bytes, not a whole number of 80-character cards) before any "
                            "END card: the file looks truncated", len);
                rc = TESS_EINVAL;
                break;
            }
            l = FITSCARD_LEN;
        } else {
            const char *nl = memchr(text + pos, '\n', len - pos);
            l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        }
        line++;
        const char *s = text + pos;
        size_t cl = l;
        if (!raw && cl > 0 && s[cl - 1] == '\r')
            cl--;
        pos += l + (raw ? 0 : 1);
        /* astropy's Header.tostring(sep='\n') pads the last line (END, or the last card
         * with endcard=False) with blanks to a 2880-byte block, and editors leave trailing
         * blanks: past 80 characters a line may hold blanks only; and a line of whole
         * cards is tostring()'s 80-character cards run together (ended by a newline). */
        size_t step = cl;
        if (cl > FITSCARD_LEN) {
            if (is_blank(s + FITSCARD_LEN, cl - FITSCARD_LEN))
                cl = step = FITSCARD_LEN;
            else if (cl % FITSCARD_LEN == 0)
                step = FITSCARD_LEN;
            else {
                tess_seterr(err, errlen, "header line %d is %zu characters long; FITS cards "
                            "are 80 (a longer line may only add blanks, or hold whole "
                            "80-character cards)", line, cl);
                rc = TESS_EINVAL;
                break;
            }
        }
        for (size_t at = 0; at < cl && !rc && !end; at += step)
            rc = parse_card(s + at, step, line, &out, max_cards, &end, err, errlen);
        if (rc)
            break;
    }
    if (rc == 0 && fits_header && !end) {
        tess_seterr(err, errlen, "the FITS header has no END card in its %zu bytes (%d "
                    "cards): the file looks truncated", len, out.n);
        rc = TESS_EINVAL;
    }
    if (rc == 0 && out.n == 0) {
        tess_seterr(err, errlen, "header has no cards");
        rc = TESS_EINVAL;
    }
    if (rc) {
        fitscard_list_release(&out);
        return rc;
    }
    return fitscard_list_take(&out, cards, n);
}

int fitscard_text_check_cut(const char *text, size_t len, char *err, size_t errlen)
{
    if (!text || len == 0 || fitscard_text_is_fits(text, len) || !memchr(text, '\n', len))
        return 0;
    size_t pos = 0;
    for (;;) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t cl = nl ? (size_t)(nl - s) : len - pos;
        size_t l = cl;
        if (cl > 0 && s[cl - 1] == '\r')
            cl--;
        int is_end = cl >= 3 && memcmp(s, "END", 3) == 0 && is_blank(s + 3, cl - 3);
        if (is_end)
            return 0;   /* the parser stops here: what follows is not read */
        if (nl) {
            pos += l + 1;
            if (pos >= len)
                return 0;
            continue;
        }
        if (cl >= FITSCARD_LEN || is_blank(s, cl))
            return 0;
        char shown[41];
        size_t k = 0;
        for (size_t i = 0; i < cl && k < 40; i++)
            shown[k++] = s[i];   /* printable: fitscard_parse's rule comes after */
        while (k > 0 && shown[k - 1] == ' ')
            k--;
        shown[k] = '\0';
        tess_seterr(err, errlen, "the header ends in the middle of a card: '%s%s' (%zu "
                    "of 80 columns) has no line end; the upload looks truncated", shown,
                    cl > 40 ? "..." : "", cl);
        return TESS_EINVAL;
    }
}
