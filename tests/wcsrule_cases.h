/* Cases of the WCS validity rule (skywcs_parse), shared by tests/engine/test_wcsrule.c and
 * tests/daemon/test_hostile_wcs.c: one WCS card kind broken per case, the header texts
 * and FITS files made from them, and the part of the reason every path must give. */
#ifndef TESSERA_TESTS_WCSRULE_CASES_H
#define TESSERA_TESTS_WCSRULE_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The good WCS every case starts from: a WR_NX x WR_NY TAN image centred on (RA 10,
 * Dec 20), 1' pixels, CDELT form.  A case replaces cards by keyword and appends the
 * others. */
#define WR_NX 64
#define WR_NY 48
static const char *const wr_base[] = {
    "CTYPE1  = 'RA---TAN'",
    "CTYPE2  = 'DEC--TAN'",
    "CRPIX1  = 32.5",
    "CRPIX2  = 24.5",
    "CRVAL1  = 10.0",
    "CRVAL2  = 20.0",
    "CDELT1  = -0.0166666666666667",
    "CDELT2  = 0.0166666666666667",
    NULL,
};

typedef struct wr_case {
    const char *name;         /* short label, also a file and dataset name */
    const char *cards[5];     /* the cards changed or added, NULL-terminated */
    const char *why;          /* what the reason must contain (its start) */
} wr_case;

static const wr_case wr_cases[] = {
    { "cdelt_nan", { "CDELT1  = NaN" }, "CDELT1 must be a finite number, got 'NaN'" },
    { "cdelt_minf", { "CDELT1  = -INF" }, "CDELT1 must be a finite number, got '-INF'" },
    { "crval_text", { "CRVAL2  = 'text'" }, "CRVAL2 must be a finite number" },
    { "crpix_inf", { "CRPIX1  = inf" }, "CRPIX1 must be a finite number, got 'inf'" },
    { "crpix_blank", { "CRPIX2  =" }, "CRPIX2 must be a finite number, got ''" },
    { "cd_huge", { "CD1_1   = 1e999", "CD2_2   = 0.01" }, "CD1_1 must be a finite number" },
    { "pc_nan", { "PC1_2   = NaN" }, "PC1_2 must be a finite number" },
    { "crota_nan", { "CROTA2  = NaN" }, "CROTA2 must be a finite number" },
    { "pv_nan", { "PV2_1   = NaN" }, "PV2_1 must be a finite number" },
    { "lonpole_inf", { "LONPOLE = Infinity" }, "LONPOLE must be a finite number" },
    { "latpole_nan", { "LATPOLE = nan" }, "LATPOLE must be a finite number" },
    { "cd_zero", { "CD1_1   = 0.0", "CD1_2   = 0.0", "CD2_1   = 0.0", "CD2_2   = 0.0" },
      "CD1_j are all 0: the linear transformation is singular" },
    { "cd_singular", { "CD1_1   = -0.001", "CD1_2   = 0.001", "CD2_1   = 0.002",
                       "CD2_2   = -0.002" }, "the CDi_j matrix is singular" },
    { "cd_near_singular", { "CD1_1   = 0.001", "CD1_2   = 0.001", "CD2_1   = 0.001",
                            "CD2_2   = 0.0010000000000001" }, "the CDi_j matrix is singular" },
    { "cdelt_zero", { "CDELT2  = 0.0" }, "CDELT2 is 0: the linear transformation is singular" },
    { "pc_singular", { "PC1_1   = 1.0", "PC1_2   = 1.0", "PC2_1   = 1.0", "PC2_2   = 1.0" },
      "PCi_j times CDELTi is singular" },
    { "equals_misplaced", { "CD1_1 = 0.5" },
      "'CD1_1 = 0.5': a WCS card needs '= ' in columns 9-10" },
    { "proj_unknown", { "CTYPE1  = 'RA---QQQ'", "CTYPE2  = 'DEC--QQQ'" },
      "CTYPE1 = 'RA---QQQ': 'QQQ' is not a projection wcslib knows" },
    { "unpaired", { "CTYPE2  = 'FREQ'" }, "CTYPE1 = 'RA---TAN' has no latitude axis to pair" },
    { "two_projections", { "CTYPE2  = 'DEC--SIN'" },
      "CTYPE1 = 'RA---TAN' and CTYPE2 = 'DEC--SIN' do not pair" },
    { "two_systems", { "CTYPE1  = 'GLON-TAN'" },
      "CTYPE1 = 'GLON-TAN' and CTYPE2 = 'DEC--TAN' do not pair" },
    { "two_longitudes", { "CTYPE2  = 'RA---TAN'" },
      "CTYPE1 = 'RA---TAN' and CTYPE2 = 'RA---TAN' are both longitude axes" },
};
#define WR_NCASES ((int)(sizeof wr_cases / sizeof wr_cases[0]))

/* 1 for a case whose cards make a FITS file that is refused when opened, before its WCS
 * is read (a card whose keyword is no FITS keyword): a header text's case alone. */
static inline int wr_text_only(const wr_case *c)
{
    return c && strcmp(c->name, "equals_misplaced") == 0;
}

/* 1 when cards a and b (texts of at least 8 characters) have the same keyword. */
static inline int wr_same_key(const char *a, const char *b)
{
    return strncmp(a, b, 8) == 0;
}

/* The WCS card texts of case `c` (NULL: the good WCS) into lines[] (at most `max` - 1,
 * NULL-terminated): the base cards with the case's replacing those of the same keyword,
 * then the case's others.  Returns the count. */
static inline int wr_wcs_lines(const wr_case *c, const char **lines, int max)
{
    int n = 0;
    for (int i = 0; wr_base[i] && n + 1 < max; i++) {
        const char *t = wr_base[i];
        for (int k = 0; c && k < 5 && c->cards[k]; k++)
            if (wr_same_key(c->cards[k], wr_base[i]))
                t = c->cards[k];
        lines[n++] = t;
    }
    for (int k = 0; c && k < 5 && c->cards[k] && n + 1 < max; k++) {
        int replaced = 0;
        for (int i = 0; wr_base[i]; i++)
            replaced |= wr_same_key(c->cards[k], wr_base[i]);
        if (!replaced)
            lines[n++] = c->cards[k];
    }
    lines[n] = NULL;
    return n;
}

/* A target header as text, one card a line (NAXIS, NAXIS1, NAXIS2 = nx, ny, then the WCS
 * of case `c`, or the good one when NULL), END last.  malloc'd; the caller frees it. */
static inline char *wr_header_text(const wr_case *c, long nx, long ny)
{
    const char *lines[32];
    wr_wcs_lines(c, lines, 32);
    size_t cap = 81 * 36, len = 0;
    char *t = malloc(cap);
    if (!t)
        abort();
    len += (size_t)snprintf(t + len, cap - len, "NAXIS   = 2\nNAXIS1  = %ld\nNAXIS2  = %ld\n",
                            nx, ny);
    for (int i = 0; lines[i]; i++)
        len += (size_t)snprintf(t + len, cap - len, "%s\n", lines[i]);
    snprintf(t + len, cap - len, "END\n");
    return t;
}

/* Writes a WR_NX x WR_NY BITPIX -32 FITS image with the WCS of case `c` (NULL: the good
 * one) to `path`, byte by byte (cfitsio would not write a NaN into a card); the pixels
 * are x + 100 y.  Returns 0, or -1 when the file cannot be written. */
static inline int wr_write_fits(const char *path, const wr_case *c)
{
    const char *lines[32];
    wr_wcs_lines(c, lines, 32);
    char hdr[2880 * 2];
    memset(hdr, ' ', sizeof hdr);
    int n = 0;
    char card[81];
    const char *fixed[] = { "SIMPLE  =                    T", "BITPIX  =                  -32",
                            "NAXIS   =                    2", NULL };
    for (int i = 0; fixed[i]; i++)
        memcpy(hdr + 80 * n++, fixed[i], strlen(fixed[i]));
    snprintf(card, sizeof card, "NAXIS1  = %20d", WR_NX);
    memcpy(hdr + 80 * n++, card, strlen(card));
    snprintf(card, sizeof card, "NAXIS2  = %20d", WR_NY);
    memcpy(hdr + 80 * n++, card, strlen(card));
    for (int i = 0; lines[i]; i++)
        memcpy(hdr + 80 * n++, lines[i], strlen(lines[i]));
    memcpy(hdr + 80 * n++, "END", 3);
    size_t hlen = (size_t)(n * 80 + 2879) / 2880 * 2880;
    size_t dlen = ((size_t)WR_NX * WR_NY * 4 + 2879) / 2880 * 2880;
    unsigned char *data = calloc(1, dlen);
    if (!data)
        return -1;
    for (int y = 0; y < WR_NY; y++)
        for (int x = 0; x < WR_NX; x++) {
            float v = (float)(x + 100 * y);
            uint32_t u;
            memcpy(&u, &v, 4);
            unsigned char *p = data + 4 * ((size_t)y * WR_NX + (size_t)x);
            for (int k = 0; k < 4; k++)
                p[k] = (unsigned char)(u >> (24 - 8 * k));     /* big-endian */
        }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(hdr, 1, hlen, f) == hlen && fwrite(data, 1, dlen, f) == dlen;
    if (f && fclose(f) != 0)
        ok = 0;
    free(data);
    return ok ? 0 : -1;
}

#endif
