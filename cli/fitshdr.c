/* The CLI's FITS header cards, until engine/fits owns them: a target header read, a card lookup, the output headers of `tessera reproject`. */
#include "cli/fitshdr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fitsio.h>

#include "cli/common.h"

/* Cards in a text header file, or in a header made here, at most (a cap on input that
 * grows). */
#define MAX_CARDS 100000

/* cfitsio's text for a status code. */
static const char *fits_text(int status, char buf[FLEN_STATUS])
{
    fits_get_errstatus(status, buf);
    return buf;
}

/* Opens `path` as a plain disk file (no extended-filename syntax) at HDU `hdu`
 * (0-based), which must be an image.  Returns the handle or NULL after printing why. */
static fitsfile *open_image_hdu(const char *path, int hdu, const char *what)
{
    fitsfile *f = NULL;
    int st = 0, type = 0;
    char t[FLEN_STATUS];
    if (fits_open_diskfile(&f, path, READONLY, &st)) {
        cli_msg("cannot open %s '%s': %s", what, path, fits_text(st, t));
        return NULL;
    }
    if (fits_movabs_hdu(f, hdu + 1, &type, &st)) {
        cli_msg("%s '%s' has no HDU %d: %s", what, path, hdu, fits_text(st, t));
        st = 0;
        fits_close_file(f, &st);
        return NULL;
    }
    if (type != IMAGE_HDU) {
        cli_msg("HDU %d of %s '%s' is a table, not an image", hdu, what, path);
        st = 0;
        fits_close_file(f, &st);
        return NULL;
    }
    return f;
}

int fitshdr_card_value(const char *cards, int nkeys, const char *key, char *val, size_t vlen)
{
    size_t kl = strlen(key);
    for (int i = 0; i < nkeys; i++) {
        const char *c = cards + (size_t)i * 80;
        if (strncmp(c, key, kl) != 0 || (kl < 8 && c[kl] != ' ') || c[8] != '=')
            continue;
        size_t i0 = 10, i1;
        while (i0 < 80 && c[i0] == ' ')
            i0++;
        if (i0 < 80 && c[i0] == '\'') {
            i0++;
            for (i1 = i0; i1 < 80 && c[i1] != '\''; i1++)
                ;
        } else {
            for (i1 = i0; i1 < 80 && c[i1] != '/'; i1++)
                ;
        }
        while (i1 > i0 && c[i1 - 1] == ' ')
            i1--;
        const char *p = c + i0, *q = c + i1;
        size_t n = (size_t)(q - p) < vlen - 1 ? (size_t)(q - p) : vlen - 1;
        memcpy(val, p, n);
        val[n] = '\0';
        return 1;
    }
    return 0;
}

int fitshdr_read_target(const char *path, int hdu, char **cards, int *nkeys)
{
    *cards = NULL;
    *nkeys = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        cli_msg("cannot open target '%s': %s", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    /* A FITS file starts with a SIMPLE card and has no line ends: its cards run on. */
    char head[81] = "";
    size_t got = fread(head, 1, 81, fp);
    int is_fits = got == 81 && memcmp(head, "SIMPLE  =", 9) == 0 && !memchr(head, '\n', 81)
                  && !memchr(head, '\r', 81);
    if (is_fits) {
        fclose(fp);
        fitsfile *f = open_image_hdu(path, hdu, "target");
        if (!f)
            return CLI_EXIT_FAIL;
        int st = 0;
        char *fc = NULL;
        char t[FLEN_STATUS];
        if (fits_hdr2str(f, 1, NULL, 0, &fc, nkeys, &st)) {
            cli_msg("cannot read the header of target '%s': %s", path, fits_text(st, t));
            st = 0;
            fits_close_file(f, &st);
            return CLI_EXIT_FAIL;
        }
        *cards = strdup(fc);
        st = 0;
        fits_free_memory(fc, &st);
        fits_close_file(f, &st);
        if (!*cards) {
            cli_msg("out of memory");
            return CLI_EXIT_FAIL;
        }
        return CLI_EXIT_OK;
    }
    rewind(fp);
    size_t cap = 256, n = 0;
    char *c = malloc(cap * 80 + 1);
    char line[1024];
    int rc = CLI_EXIT_OK;
    while (c && fgets(line, sizeof line, fp)) {
        size_t len = strcspn(line, "\r\n");
        if (len == 0)
            continue;
        if (len > 80) {
            cli_msg("target '%s': line %zu is longer than 80 characters (one card a line "
                    "expected)", path, n + 1);
            rc = CLI_EXIT_FAIL;
            break;
        }
        if (len >= 3 && strncmp(line, "END", 3) == 0 && strspn(line + 3, " ") == len - 3)
            break;
        if (n == cap) {
            if (cap >= MAX_CARDS) {
                cli_msg("target '%s' has more than %d cards", path, MAX_CARDS);
                rc = CLI_EXIT_FAIL;
                break;
            }
            char *nc = realloc(c, cap * 2 * 80 + 1);
            if (!nc) {
                free(c);
                c = NULL;
                break;
            }
            c = nc;
            cap *= 2;
        }
        memset(c + n * 80, ' ', 80);
        memcpy(c + n * 80, line, len);
        n++;
    }
    fclose(fp);
    if (!c) {
        cli_msg("out of memory");
        return CLI_EXIT_FAIL;
    }
    if (rc != CLI_EXIT_OK || n == 0) {
        if (rc == CLI_EXIT_OK)
            cli_msg("target '%s' holds no header cards", path);
        free(c);
        return CLI_EXIT_FAIL;
    }
    c[n * 80] = '\0';
    *cards = c;
    *nkeys = (int)n;
    return CLI_EXIT_OK;
}

/* Appends a card (text padded with blanks to 80 characters).  Returns 0 or -1. */
static int hdr_add(fitshdr *h, const char *text, size_t len)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        if (cap > MAX_CARDS + 64)
            return -1;
        char *b = realloc(h->buf, cap * 80);
        if (!b)
            return -1;
        h->buf = b;
        h->cap = cap;
    }
    char *c = h->buf + h->n * 80;
    memset(c, ' ', 80);
    memcpy(c, text, len > 80 ? 80 : len);
    h->n++;
    return 0;
}

/* Appends "KEY     =                  VAL" in the fixed format of FITS 4.0 sec. 4.2.3
 * (value right-justified to column 30); `val` is a number or T/F. */
static int hdr_fixed(fitshdr *h, const char *key, const char *val)
{
    char c[81];
    int len = snprintf(c, sizeof c, "%-8.8s= %20s", key, val);
    return hdr_add(h, c, (size_t)len);
}

static int hdr_long(fitshdr *h, const char *key, long v)
{
    char val[32];
    snprintf(val, sizeof val, "%ld", v);
    return hdr_fixed(h, key, val);
}

/* Appends END and pads the header to whole 2880-byte blocks; returns its size in bytes,
 * or 0 on allocation failure. */
static size_t hdr_end(fitshdr *h)
{
    if (hdr_add(h, "END", 3) != 0)
        return 0;
    while (h->n % 36 != 0)
        if (hdr_add(h, "", 0) != 0)
            return 0;
    return h->n * 80;
}

/* 1 for the cards of the target header that describe its own data layout rather than
 * the WCS, which the output HDU writes itself. */
static int structural_card(const char *c, int drop_wcsaxes)
{
    static const char *const keys[] = { "SIMPLE", "XTENSION", "BITPIX", "EXTEND", "PCOUNT",
                                        "GCOUNT", "BSCALE", "BZERO", "BLANK", "CHECKSUM",
                                        "DATASUM", "EXTNAME", "END", NULL };
    char key[9];
    memcpy(key, c, 8);
    key[8] = '\0';
    for (int i = 7; i >= 0 && key[i] == ' '; i--)
        key[i] = '\0';
    if (key[0] == '\0')
        return 1;
    if (strncmp(key, "NAXIS", 5) == 0)
        return 1;
    if (drop_wcsaxes && strcmp(key, "WCSAXES") == 0)
        return 1;
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

/* 1 for the keywords of a cube's third (spectral) axis, copied from the input when the
 * target header is 2-D. */
static int axis3_card(const char *c)
{
    static const char *const keys[] = { "CTYPE3", "CRPIX3", "CRVAL3", "CDELT3", "CUNIT3",
                                        "CROTA3", "PC3_3", "CD3_3", "CNAME3", "SPECSYS",
                                        "SSYSOBS", "RESTFRQ", "RESTFREQ", "RESTWAV", "VELREF",
                                        "SSYSSRC", "ZSOURCE", "VELOSYS", NULL };
    char key[9];
    memcpy(key, c, 8);
    key[8] = '\0';
    for (int i = 7; i >= 0 && key[i] == ' '; i--)
        key[i] = '\0';
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

int fitshdr_build_headers(const fitshdr_outspec *o, fitshdr *h0, fitshdr *h1)
{
    int naxis = o->nz > 1 || o->target_3d ? 3 : 2;
    int add_axis3 = o->nz > 1 && !o->target_3d;
    long naxes[3] = { o->nx, o->ny, o->nz };
    static const char *const nk[3] = { "NAXIS1", "NAXIS2", "NAXIS3" };
    int bad = hdr_fixed(h0, "SIMPLE", "T") || hdr_long(h0, "BITPIX", o->dtype == RP_F32 ? -32 : -64)
              || hdr_long(h0, "NAXIS", naxis);
    for (int k = 0; k < naxis; k++)
        bad = bad || hdr_long(h0, nk[k], naxes[k]);
    bad = bad || hdr_fixed(h0, "EXTEND", "T");
    for (int i = 0; i < o->tkeys && !bad; i++) {
        const char *c = o->tcards + (size_t)i * 80;
        if (!structural_card(c, add_axis3))
            bad = hdr_add(h0, c, 80);
    }
    for (int i = 0; add_axis3 && i < o->in_nkeys && !bad; i++) {
        const char *c = o->in_cards + (size_t)i * 80;
        if (axis3_card(c))
            bad = hdr_add(h0, c, 80);
    }
    char hist[81];
    int hl = snprintf(hist, sizeof hist, "HISTORY tessera reproject, method %s",
                      rp_method_name(o->method));
    bad = bad || hdr_add(h0, hist, (size_t)hl) || hdr_end(h0) == 0;
    static const char ext[] = "XTENSION= 'IMAGE   '           / image extension";
    static const char name[] = "EXTNAME = 'FOOTPRINT'          / coverage of each output pixel";
    bad = bad || hdr_add(h1, ext, sizeof ext - 1)
          || hdr_long(h1, "BITPIX", o->method == RP_EXACT ? -32 : 8)
          || hdr_long(h1, "NAXIS", naxis);
    for (int k = 0; k < naxis; k++)
        bad = bad || hdr_long(h1, nk[k], naxes[k]);
    bad = bad || hdr_long(h1, "PCOUNT", 0) || hdr_long(h1, "GCOUNT", 1)
          || hdr_add(h1, name, sizeof name - 1) || hdr_end(h1) == 0;
    return bad ? -1 : 0;
}

