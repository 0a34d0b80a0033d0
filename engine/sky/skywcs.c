/* Celestial WCS: wcslib header parsing made to match astropy.wcs.WCS, frames and their conversions. */
#include "engine/sky/skywcs.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <wcslib/wcs.h>
#include <wcslib/wcsfix.h>
#include <wcslib/wcshdr.h>
#include <wcslib/wcsmath.h>
#include <wcslib/prj.h>

#include <erfa.h>
#include <erfam.h>

#include "engine/base/error.h"
#include "engine/fits/fitscard.h"
#include "engine/sky/solar.h"

/* One parsed WCS.  `wcs` is owned, wcsset() has been run on it. */
struct skywcs {
    struct wcsprm wcs;
    sky_frame frame;
    double equinox;      /* Julian years (FK5, ecliptic), Besselian years (FK4), else 0 */
    solar_obs sol;       /* solar frames: the observer and the Sun */
    int surface;         /* SOLAR_SPHERE or SOLAR_SCREEN (skywcs_set_solar_surface) */
};

/* Pixels transformed per wcslib call: bounds the scratch memory of pix2sky/sky2pix. */
#define SKYWCS_CHUNK 4096

/* Degrees <-> radians with the same factors astropy's unit machinery applies. */
#define DEG2RAD (M_PI / 180.0)
#define RAD2DEG (180.0 / M_PI)

/* ------------------------------------------------------------------------------------ */
/* Frames                                                                                 */

/* Copies `s` upper-cased and without trailing blanks into `d` (size dn). */
static void trim_upper(const char *s, char *d, size_t dn)
{
    size_t n = 0;
    for (; s[n] && n + 1 < dn; n++)
        d[n] = (char)toupper((unsigned char)s[n]);
    while (n > 0 && d[n - 1] == ' ')
        n--;
    d[n] = '\0';
}

/* The frame of a wcsset() wcsprm by the FITS rules (WCS Paper II, sec. 3.1), as astropy's
 * wcs.utils._wcs_to_celestial_frame_builtin applies them: RADESYS when present; otherwise
 * EQUINOX < 1984 FK4, >= 1984 FK5, none ICRS.  GLON/GLAT is galactic and ELON/ELAT ecliptic
 * whatever RADESYS says (astropy would honour a stray RADESYS there; FITS does not).
 * HPLN/HPLT, HGLN/HGLT and CRLN/CRLT are the solar frames (WCS Paper II sec. 3.1 names
 * the prefixes, Thompson 2006 Table 1 the frames).  Unknown systems (FK4-NO-E, GAPPT,
 * planetary) give SKY_FRAME_NONE. */
static void detect_frame(const struct wcsprm *wcs, sky_frame *frame, double *equinox)
{
    char lng[8], rs[72];
    int has_eq = !undefined(wcs->equinox) && isfinite(wcs->equinox);

    *frame = SKY_FRAME_NONE;
    *equinox = 0.0;
    if (wcs->lng < 0 || wcs->lat < 0)
        return;
    trim_upper(wcs->lngtyp, lng, sizeof lng);
    trim_upper(wcs->radesys, rs, sizeof rs);
    if (strcmp(lng, "GLON") == 0) {
        *frame = SKY_FRAME_GALACTIC;
    } else if (strcmp(lng, "ELON") == 0) {
        *frame = SKY_FRAME_ECLIPTIC;
        *equinox = has_eq ? wcs->equinox : 2000.0;
    } else if (strcmp(lng, "HPLN") == 0) {
        *frame = SKY_FRAME_HELIOPROJECTIVE;
    } else if (strcmp(lng, "HGLN") == 0) {
        *frame = SKY_FRAME_STONYHURST;
    } else if (strcmp(lng, "CRLN") == 0) {
        *frame = SKY_FRAME_CARRINGTON;
    } else if (strcmp(lng, "RA") == 0) {
        if (rs[0] == '\0')
            strcpy(rs, !has_eq ? "ICRS" : wcs->equinox < 1984.0 ? "FK4" : "FK5");
        if (strcmp(rs, "ICRS") == 0) {
            *frame = SKY_FRAME_ICRS;
        } else if (strcmp(rs, "FK5") == 0) {
            *frame = SKY_FRAME_FK5;
            *equinox = has_eq ? wcs->equinox : 2000.0;
        } else if (strcmp(rs, "FK4") == 0) {
            *frame = SKY_FRAME_FK4;
            *equinox = has_eq ? wcs->equinox : 1950.0;
        }
    }
}

const char *sky_frame_name(sky_frame f)
{
    switch (f) {
    case SKY_FRAME_ICRS: return "icrs";
    case SKY_FRAME_FK5: return "fk5";
    case SKY_FRAME_FK4: return "fk4";
    case SKY_FRAME_GALACTIC: return "galactic";
    case SKY_FRAME_ECLIPTIC: return "ecliptic";
    case SKY_FRAME_HELIOPROJECTIVE: return "helioprojective";
    case SKY_FRAME_STONYHURST: return "stonyhurst";
    case SKY_FRAME_CARRINGTON: return "carrington";
    default: return "none";
    }
}

const char *sky_frame_axes(sky_frame f)
{
    switch (f) {
    case SKY_FRAME_ICRS: case SKY_FRAME_FK5: case SKY_FRAME_FK4: return "RA/DEC";
    case SKY_FRAME_GALACTIC: return "GLON/GLAT";
    case SKY_FRAME_ECLIPTIC: return "ELON/ELAT";
    case SKY_FRAME_HELIOPROJECTIVE: return "HPLN/HPLT";
    case SKY_FRAME_STONYHURST: return "HGLN/HGLT";
    case SKY_FRAME_CARRINGTON: return "CRLN/CRLT";
    default: return "none";
    }
}

/* Accepts the names of sky_frame_name (any case) except "none"; 0 or TESS_EINVAL. */
int sky_frame_parse(const char *s, sky_frame *f)
{
    static const sky_frame all[] = { SKY_FRAME_ICRS, SKY_FRAME_FK5, SKY_FRAME_FK4,
                                     SKY_FRAME_GALACTIC, SKY_FRAME_ECLIPTIC,
                                     SKY_FRAME_HELIOPROJECTIVE, SKY_FRAME_STONYHURST,
                                     SKY_FRAME_CARRINGTON };
    if (!s || !f)
        return TESS_EINVAL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcasecmp(s, sky_frame_name(all[i])) == 0) {
            *f = all[i];
            return 0;
        }
    }
    return TESS_EINVAL;
}

/* ------------------------------------------------------------------------------------ */
/* Parsing, copies                                                                        */

/* Deep-copies `src` into a fresh skywcs (wcssub with no axis selection, then wcsset).
 * `axes`/`nsub` select axes as wcssub() does (NULL, NULL: all).  Returns NULL on
 * allocation failure or when wcslib refuses (non-separable selection, wcsset error);
 * *nsub_out receives the number of axes extracted when not NULL. */
static skywcs *copy_wcsprm(const struct wcsprm *src, int *nsub, int *axes)
{
    skywcs *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->wcs.flag = -1;
    if (wcssub(1, src, nsub, axes, &w->wcs) != 0 || (nsub && *nsub == 0)) {
        wcsfree(&w->wcs);
        free(w);
        return NULL;
    }
    if (wcsset(&w->wcs) != 0) {
        wcsfree(&w->wcs);
        free(w);
        return NULL;
    }
    return w;
}

/* 1 when wcspih found no WCS keyword and returned wcsini()'s defaults (it does so for
 * a header with NAXIS alone): no CTYPE, CRPIX 0, CRVAL 0, CDELT 1, no PC/CD/CROTA. */
static int is_default_wcs(const struct wcsprm *w)
{
    if (w->altlin != 0)
        return 0;
    for (int i = 0; i < w->naxis; i++) {
        if (w->ctype[i][0] != '\0' || w->crpix[i] != 0.0 || w->crval[i] != 0.0
            || w->cdelt[i] != 1.0)
            return 0;
        for (int j = 0; j < w->naxis; j++)
            if (w->pc[i * w->naxis + j] != (i == j ? 1.0 : 0.0))
                return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------ */
/* The validity rule                                                                      */

/* The relative determinant under which a linear transformation counts as singular: |det|
 * of the matrix whose rows are scaled to unit length (1 for orthogonal rows; for two axes
 * the sine of the angle between the rows). */
#define SKYWCS_MIN_RELDET 1e-10

/* Length of the keyword in the 8-character field `kw` (trailing blanks cut). */
static int keyword_len(const char *kw)
{
    int n = 8;
    while (n > 0 && kw[n - 1] == ' ')
        n--;
    return n;
}

/* 1 when the 8-character keyword field `kw` is a numeric WCS keyword of FITS WCS Papers
 * I-II (NAXISn, CRPIXn, CRVALn, CDELTn, CROTAn, CDi_j, PCi_j, PVi_m, with an optional
 * alternate letter; LONPOLE, LATPOLE, EQUINOX) or of the DSS plate solutions wcspih
 * translates (CNPIXn, PPO3, PPO6, XPIXELSZ, YPIXELSZ, PLTRAH/M/S, PLTDECD/M/S, AMDXm,
 * AMDYm). */
static int numeric_wcs_keyword(const char *kw)
{
    static const char *const indexed[] = { "NAXIS", "CRPIX", "CRVAL", "CDELT", "CROTA", "CD",
                                           "PC", "PV", "CNPIX", "AMDX", "AMDY" };
    static const char *const plain[] = { "LONPOLE", "LATPOLE", "EQUINOX", "PPO3", "PPO6",
                                         "XPIXELSZ", "YPIXELSZ", "PLTRAH", "PLTRAM", "PLTRAS",
                                         "PLTDECD", "PLTDECM", "PLTDECS" };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        size_t n = strlen(plain[i]);
        int alt = i < 3;        /* LONPOLEa, LATPOLEa, EQUINOXa */
        if (strncmp(kw, plain[i], n) == 0
            && (n == 8 || kw[n] == ' ' || (alt && isupper((unsigned char)kw[n]))))
            return 1;
    }
    for (size_t i = 0; i < sizeof indexed / sizeof indexed[0]; i++) {
        size_t n = strlen(indexed[i]);
        if (strncmp(kw, indexed[i], n) == 0 && isdigit((unsigned char)kw[n]))
            return 1;
    }
    return 0;
}

/* A WCS card whose value indicator is not "= " in columns 9-10 ("CRPIX2 = 8",
 * "CD1_1=0.5", "CRPIX1  =8"): not a value card in FITS terms (4.0 section 4.1.2.2), so
 * wcspih passes over it and keeps the default; 1 when `card` is one, for a numeric WCS
 * keyword, CTYPEn or CUNITn. */
static int misplaced_equals(const char *card)
{
    const char *eq = memchr(card, '=', 9);
    if (!eq || eq == card || (eq == card + 8 && card[9] == ' '))
        return 0;
    char kw[9];
    int n = (int)(eq - card);
    while (n > 0 && card[n - 1] == ' ')
        n--;
    if (n == 0 || memchr(card, ' ', (size_t)n))
        return 0;
    snprintf(kw, sizeof kw, "%-8.*s", n, card);
    return numeric_wcs_keyword(kw) || ((strncmp(kw, "CTYPE", 5) == 0
                                        || strncmp(kw, "CUNIT", 5) == 0)
                                       && isdigit((unsigned char)kw[5]));
}

/* The value of a numeric WCS card must be a finite number (a D exponent is allowed), and
 * a WCS card must be a value card: wcspih drops a card it cannot read and keeps the
 * default, so that "CDELT1 = NaN" would become CDELT1 = 1.  Returns 0 or TESS_EINVAL
 * with `err` naming the card. */
static int check_number(const char *card, char *err, size_t errlen)
{
    if (misplaced_equals(card)) {
        int n = 80;
        while (n > 0 && card[n - 1] == ' ')
            n--;
        tess_seterr(err, errlen, "'%.*s': a WCS card needs '= ' in columns 9-10 (the "
                    "keyword padded to 8 characters)", n < 40 ? n : 40, card);
        return TESS_EINVAL;
    }
    if (card[8] != '=' || !numeric_wcs_keyword(card))
        return 0;
    char v[72];
    size_t n = 0, i = 10;
    while (i < 80 && card[i] == ' ')
        i++;
    for (; i < 80 && card[i] != '/' && n + 1 < sizeof v; i++)
        v[n++] = (char)(card[i] == 'D' || card[i] == 'd' ? 'E' : card[i]);
    while (n > 0 && v[n - 1] == ' ')
        n--;
    v[n] = '\0';
    if (!fitscard_is_number_text(v) || !isfinite(strtod(v, NULL))) {
        const char *shown = v;  /* a string value quoted once, not in its own quotes too */
        if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'') {
            v[n - 1] = '\0';
            shown = v + 1;
        }
        tess_seterr(err, errlen, "%.*s must be a finite number, got '%.30s'",
                    keyword_len(card), card, shown);
        return TESS_EINVAL;
    }
    return 0;
}

/* The keywords of a DSS plate solution that wcspih stores for its translation to TAN
 * (wcspih.l: dsstmp[]); any of them, or any AMDXm / AMDYm, makes it translate.  One
 * missing (or unreadable, so dropped) leaves its slot uninitialised: wcslib 7.12 then
 * computes CRPIX, CRVAL and CD from stack garbage (valgrind; tests/fuzz/fuzz_dataset got
 * CRPIX1 = -inf). */
static const char *const dss_keys[] = {
    "CNPIX1", "CNPIX2", "PPO3", "PPO6", "XPIXELSZ", "YPIXELSZ", "PLTRAH", "PLTRAM",
    "PLTRAS", "PLTDECSN", "PLTDECD", "PLTDECM", "PLTDECS", "AMDX1", "AMDX2", "AMDX3",
    "AMDY1", "AMDY2", "AMDY3" };
#define DSS_NKEYS ((int)(sizeof dss_keys / sizeof dss_keys[0]))

/* Notes a card of a DSS keyword: *any for every one, value card or not (wcspih decides to
 * translate on the keyword alone: a bare "PLTRAS" crashed it, tests/fuzz/fuzz_dataset);
 * bit k of *have for a value card of dss_keys[k] (PLTDECSN only with a string value, as
 * wcspih reads it; the numbers were checked before, by check_number). */
static void note_dss_card(const char *card, unsigned *have, int *any)
{
    int len = keyword_len(card);
    for (int k = 0; k < DSS_NKEYS; k++) {
        if ((int)strlen(dss_keys[k]) == len && strncmp(card, dss_keys[k], (size_t)len) == 0) {
            *any = 1;
            if (card[8] == '=' && card[9] == ' '
                && (k != 9 || card[10 + strspn(card + 10, " ")] == '\''))
                *have |= 1u << k;
            return;
        }
    }
    if ((strncmp(card, "AMDX", 4) == 0 || strncmp(card, "AMDY", 4) == 0)
        && isdigit((unsigned char)card[4]))
        *any = 1;
}

/* Reads the decimal digits s[*k..lim) into *v (at most 3 digits); 0 when there is none. */
static int read_index(const char *s, int *k, int lim, int *v)
{
    int start = *k;
    *v = 0;
    while (*k < lim && *k - start < 3 && isdigit((unsigned char)s[*k]))
        *v = *v * 10 + (s[(*k)++] - '0');
    return *k > start;
}

/* Marks in given[0..98] the axes that a primary CDi_j card (or its AIPS form CD00i00j)
 * names as row or column: cdfix sets the diagonal element of an axis none names. */
static void note_cd_card(const char *card, unsigned char *given)
{
    if (card[8] != '=' || card[0] != 'C' || card[1] != 'D')
        return;
    int i, j, k = 2, len = keyword_len(card);
    if (len == 8 && strspn(card + 2, "0123456789") == 6) {
        read_index(card, &k, 5, &i);
        read_index(card, &k, 8, &j);
    } else if (!read_index(card, &k, len, &i) || k >= len || card[k++] != '_'
               || !read_index(card, &k, len, &j) || k != len) {
        return;                 /* not CDi_j, or an alternate's (a letter follows) */
    }
    if (i >= 1 && i <= 99)
        given[i - 1] = 1;
    if (j >= 1 && j <= 99)
        given[j - 1] = 1;
}

/* Checks the linear transformation the header gives, before wcsfix: CDi_j when given
 * (wcsprm::altlin bit 1 without bit 0), else PCi_j scaled by CDELTi row by row (CROTAi
 * leaves |det| as CDELT alone gives it).  wcsfix's cdfix would put 1 on the diagonal of
 * an axis whose row and column of CD are all zero; that is kept for an axis no CD card
 * names (the omitted axes of a cube), but an explicit all-zero CD is singular.  Every
 * element must be finite, no row all zero, and the relative determinant (see
 * SKYWCS_MIN_RELDET) at least 1e-10: wcslib inverts the matrix with no tolerance, and a
 * singular one makes every sky-to-pixel result meaningless.  Returns 0, TESS_EINVAL with
 * `err` naming the cards, or TESS_ENOMEM. */
static int check_matrix(const struct wcsprm *w, const unsigned char *cd_given, char *err,
                        size_t errlen)
{
    int n = w->naxis;
    if (n < 1)
        return 0;
    int cd = (w->altlin & 2) && !(w->altlin & 1);
    double *m = malloc(sizeof(double) * (size_t)n * (size_t)n);
    if (!m) {
        tess_seterr(err, errlen, "%s", "out of memory");
        return TESS_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            m[i * n + j] = cd ? w->cd[i * n + j] : w->cdelt[i] * w->pc[i * n + j];
    if (cd) {
        for (int i = 0; i < n; i++) {
            int zero = 1;
            for (int j = 0; j < n; j++)
                zero = zero && m[i * n + j] == 0.0 && m[j * n + i] == 0.0;
            if (zero && !cd_given[i])
                m[i * n + i] = 1.0;
        }
    }
    const char *what = cd ? "the CDi_j matrix" : "PCi_j times CDELTi";
    int rc = 0;
    double rel = 1.0;
    for (int i = 0; i < n && rc == 0; i++) {
        double len = 0.0;
        for (int j = 0; j < n; j++) {
            if (!isfinite(m[i * n + j])) {
                tess_seterr(err, errlen, "%s: row %d overflows (CDELT%d = %g)", what, i + 1,
                            i + 1, w->cdelt[i]);
                rc = TESS_EINVAL;
                break;
            }
            len = hypot(len, m[i * n + j]);
        }
        if (rc == 0 && len == 0.0) {
            if (cd)
                tess_seterr(err, errlen, "CD%d_j are all 0: the linear transformation is "
                            "singular", i + 1);
            else if (w->cdelt[i] == 0.0)
                tess_seterr(err, errlen, "CDELT%d is 0: the linear transformation is "
                            "singular", i + 1);
            else
                tess_seterr(err, errlen, "PC%d_j are all 0: the linear transformation is "
                            "singular", i + 1);
            rc = TESS_EINVAL;
        }
        for (int j = 0; rc == 0 && j < n; j++)
            m[i * n + j] /= len;
    }
    /* |det| of the scaled rows by Gaussian elimination with partial pivoting. */
    for (int c = 0; c < n && rc == 0 && rel > 0.0; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(m[r * n + c]) > fabs(m[p * n + c]))
                p = r;
        for (int j = 0; p != c && j < n; j++) {
            double t = m[c * n + j];
            m[c * n + j] = m[p * n + j];
            m[p * n + j] = t;
        }
        rel *= fabs(m[c * n + c]);
        for (int r = c + 1; r < n && rel > 0.0; r++) {
            double f = m[r * n + c] / m[c * n + c];
            for (int j = c; j < n; j++)
                m[r * n + j] -= f * m[c * n + j];
        }
    }
    if (rc == 0 && rel < SKYWCS_MIN_RELDET) {
        tess_seterr(err, errlen, "%s is singular (determinant %.3g with its rows scaled to "
                    "unit length; at least %g is needed)", what, rel, SKYWCS_MIN_RELDET);
        rc = TESS_EINVAL;
    }
    free(m);
    return rc;
}

/* Checks, after wcsset, the numbers wcslib holds: those it derived from other cards (a
 * DSS plate solution gives CRPIX, CRVAL and CD from CNPIXn, XPIXELSZ, PLTSCALE, AMDXn,
 * ...) are finite too, and so is the inverse of the linear transformation (a matrix of
 * subnormal elements is regular but its inverse overflows).  Returns 0 or TESS_EINVAL
 * with `err` naming the value. */
static int check_result(const struct wcsprm *w, char *err, size_t errlen)
{
    static const char *const from = "as wcslib derives it from the header";
    static const char *const keys[3] = { "CRVAL", "CRPIX", "CDELT" };
    const double *vals[3] = { w->crval, w->crpix, w->cdelt };
    int n = w->naxis;
    for (int a = 0; a < 3; a++) {
        for (int i = 0; i < n; i++) {
            if (!isfinite(vals[a][i])) {
                tess_seterr(err, errlen, "%s%d is %g %s", keys[a], i + 1, vals[a][i], from);
                return TESS_EINVAL;
            }
        }
    }
    for (int i = 0; i < n * n; i++) {
        if (!isfinite(w->pc[i])) {
            tess_seterr(err, errlen, "PC%d_%d is %g %s", i / n + 1, i % n + 1, w->pc[i], from);
            return TESS_EINVAL;
        }
    }
    for (int k = 0; k < w->npv; k++) {
        if (!isfinite(w->pv[k].value)) {
            tess_seterr(err, errlen, "PV%d_%d is %g %s", w->pv[k].i, w->pv[k].m,
                        w->pv[k].value, from);
            return TESS_EINVAL;
        }
    }
    int m = w->lin.i_naxis;
    for (int k = 0; w->lin.imgpix && k < m * m; k++) {
        if (!isfinite(w->lin.imgpix[k]) || (w->lin.piximg && !isfinite(w->lin.piximg[k]))) {
            tess_seterr(err, errlen, "the linear transformation cannot be inverted in double "
                        "precision (its inverse overflows)");
            return TESS_EINVAL;
        }
    }
    return 0;
}

/* Whether CTYPE `c` is a celestial axis in the 4-3 form "TTTT-PPP" of WCS Paper II: 1 a
 * longitude (RA, xLON, xyLN), 2 a latitude (DEC, xLAT, xyLT), 0 neither.  `sys` gets
 * what names the system (the type without LON/LAT/LN/LT, "EQ" for RA and DEC), `code`
 * the projection code (3 characters). */
static int celestial_axis(const char *c, char *sys, char *code)
{
    if (strlen(c) < 8 || c[4] != '-')
        return 0;
    char t[5];
    memcpy(t, c, 4);
    t[4] = '\0';
    for (int k = 3; k > 0 && t[k] == '-'; k--)
        t[k] = '\0';
    memcpy(code, c + 5, 3);
    code[3] = '\0';
    size_t n = strlen(t);
    int kind = 0;
    if (strcmp(t, "RA") == 0 || strcmp(t, "DEC") == 0) {
        strcpy(sys, "EQ");
        return t[0] == 'R' ? 1 : 2;
    }
    if (n == 4 && (strcmp(t + 1, "LON") == 0 || strcmp(t + 1, "LAT") == 0)) {
        kind = t[2] == 'O' ? 1 : 2;
        t[1] = '\0';
    } else if (n == 4 && (strcmp(t + 2, "LN") == 0 || strcmp(t + 2, "LT") == 0)) {
        kind = t[3] == 'N' ? 1 : 2;
        t[2] = '\0';
    }
    if (kind)
        strcpy(sys, t);
    return kind;
}

/* 1 when wcslib knows projection code `p` (its prj_codes, plus the AIPS NCP and GLS that
 * celfix translates and the distortion codes wcsset turns into TAN or ZPN). */
static int wcslib_projection(const char *p)
{
    static const char *const more[] = { "NCP", "GLS", "TPV", "TPD", "TNX", "ZPX" };
    for (int i = 0; i < prj_ncode; i++)
        if (strncmp(p, prj_codes[i], 3) == 0)
            return 1;
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (strcmp(p, more[i]) == 0)
            return 1;
    return 0;
}

/* When wcslib refuses the axes (celfix or wcsset failed), names the CTYPE at fault: an
 * unknown projection code, a longitude without a latitude (or the reverse), two of one
 * kind, a pair of two systems or two projections.  Returns 1 with `err` set, or 0 when
 * the CTYPEs show none of these. */
static int explain_axes(const struct wcsprm *w, char *err, size_t errlen)
{
    int ax[3] = { -1, -1, -1 };          /* [1]: the longitude, [2]: the latitude axis */
    char sys[3][8], code[3][4];
    for (int i = 0; i < w->naxis; i++) {
        char s[8], p[4];
        int kind = celestial_axis(w->ctype[i], s, p);
        if (!kind)
            continue;
        if (!wcslib_projection(p)) {
            tess_seterr(err, errlen, "CTYPE%d = '%s': '%s' is not a projection wcslib knows",
                        i + 1, w->ctype[i], p);
            return 1;
        }
        if (ax[kind] >= 0) {
            tess_seterr(err, errlen, "CTYPE%d = '%s' and CTYPE%d = '%s' are both %s axes",
                        ax[kind] + 1, w->ctype[ax[kind]], i + 1, w->ctype[i],
                        kind == 1 ? "longitude" : "latitude");
            return 1;
        }
        ax[kind] = i;
        strcpy(sys[kind], s);
        strcpy(code[kind], p);
    }
    if ((ax[1] < 0) != (ax[2] < 0)) {
        int i = ax[1] >= 0 ? ax[1] : ax[2];
        tess_seterr(err, errlen, "CTYPE%d = '%s' has no %s axis to pair with", i + 1,
                    w->ctype[i], ax[1] >= 0 ? "latitude" : "longitude");
        return 1;
    }
    if (ax[1] < 0)
        return 0;
    if (strcmp(sys[1], sys[2]) != 0 || strcmp(code[1], code[2]) != 0) {
        tess_seterr(err, errlen, "CTYPE%d = '%s' and CTYPE%d = '%s' do not pair: the "
                    "longitude and latitude need one system and one projection",
                    ax[1] + 1, w->ctype[ax[1]], ax[2] + 1, w->ctype[ax[2]]);
        return 1;
    }
    return 0;
}

/* Parses the header as astropy.wcs.WCS(header) does (astropy/wcs/wcs.py, WCS.__init__ and
 * WCS.fix): wcspih at full relaxation, the primary alternate (' ') selected, then
 * wcsfix() with ctrl 0 ("translate_units=''") and no image size (so cylfix is skipped,
 * as astropy passes naxis=None): cdfix, datfix, obsfix, unitfix, spcfix, celfix; then
 * wcsset().  Unlike astropy, SIP keywords are left to wcslib (astropy strips them and
 * applies SIP itself); for TAN-SIP both evaluate the same polynomial.  The validity rule
 * is applied on the way: check_number on every card and the DSS keywords' completeness
 * before wcspih, check_matrix before wcsfix, explain_axes when wcslib refuses the axes,
 * check_result after wcsset.
 * A header without any WCS keyword (for which wcspih still returns a default linear
 * WCS, as astropy does) is refused with TESS_ENOWCS.  *out is NULL on error. */
int skywcs_parse(const char *cards, int nkeys, skywcs **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!cards || !out || nkeys <= 0) {
        tess_seterr(err, errlen, "%s", "no header cards");
        return TESS_EINVAL;
    }
    size_t len = (size_t)nkeys * 80;
    if (memchr(cards, '\0', len) != NULL) {
        tess_seterr(err, errlen, "%s", "header shorter than nkeys 80-character cards");
        return TESS_EINVAL;
    }
    /* wcspih() takes a non-const header (it only edits it when ctrl < 0): give it a copy. */
    char *hdr = malloc(len + 1);
    if (!hdr) {
        tess_seterr(err, errlen, "%s", "out of memory");
        return TESS_ENOMEM;
    }
    memcpy(hdr, cards, len);
    hdr[len] = '\0';
    /* wcslib 7.12's wcspih overflows a buffer (and glibc aborts the process) on two
     * string-valued WCS cards whose strings are not closed, e.g. RADESYS = 'ICRS then
     * DATE-OBS= '2000 (found by tests/fuzz/fuzz_header).  wcspih rejects such cards
     * anyway: turn them into comments first. */
    char ignored[96] = "";       /* the first such card, named in a later error */
    unsigned char cd_given[99] = { 0 };
    unsigned dss_have = 0;
    int dss_any = 0;
    for (int i = 0; i < nkeys; i++) {
        char *card = hdr + (size_t)i * 80;
        /* wcslib 7.12's lexer (flex) crashes (SEGV) on some bytes above 126, e.g. a card
         * "\xe0\xdf \xdf1" after NAXIS (found by tests/fuzz/fuzz_dataset in a dataset's
         * header).  A FITS header is printable ASCII (FITS 4.0 section 4.1.1): any other
         * byte becomes '?' in wcspih's copy, and so in the reasons that quote it. */
        for (int k = 0; k < 80; k++)
            if ((unsigned char)card[k] < 32 || (unsigned char)card[k] > 126)
                card[k] = '?';
        if (check_number(card, err, errlen) != 0) {
            free(hdr);
            return TESS_EINVAL;
        }
        note_cd_card(card, cd_given);
        note_dss_card(card, &dss_have, &dss_any);
        if (fitscard_unterminated_string(card)) {
            if (!ignored[0]) {
                int kl = 8;
                while (kl > 0 && card[kl - 1] == ' ')
                    kl--;
                snprintf(ignored, sizeof ignored,
                         " (card %d, %.*s, was left out: its string value has no closing "
                         "quote)", i + 1, kl, card);
            }
            memcpy(card, "COMMENT ", 8);
        }
        /* wcslib 7.12's lexer also overflows a buffer on a string-valued WCS card with no
         * value at all ("CTYPE1  =", an undefined value in FITS terms) followed by cards
         * holding quotes (found by tests/fuzz/fuzz_header).  An undefined value defines
         * nothing: make such cards comments too. */
        if (card[8] == '=' && fitscard_blank_value(card))
            memcpy(card, "COMMENT ", 8);
        /* wcspih sizes its arrays by NAXIS and WCSAXESa: a huge count makes it crash or
         * allocate gigabytes (WCSAXES = 3333334, found by tests/fuzz/fuzz_header).  WCS
         * keywords index at most 99 axes (FITS 4.0 section 8.2). */
        if (card[8] == '=' && (strncmp(card, "NAXIS   ", 8) == 0 ||
                               (strncmp(card, "WCSAXES", 7) == 0))) {
            char *end;
            long v = strtol(card + 10, &end, 10);
            if (end > card + 10 && (v < 0 || v > 99)) {
                tess_seterr(err, errlen, "%.8s = %ld: more than 99 axes", card, v);
                free(hdr);
                return TESS_EINVAL;
            }
        }
    }
    for (int k = 0; dss_any && k < DSS_NKEYS; k++) {
        if (!(dss_have & (1u << k))) {
            tess_seterr(err, errlen, "a DSS plate solution needs %s%s (CNPIX1-2, PPO3, PPO6, "
                        "X/YPIXELSZ, PLTRAH/M/S, PLTDECSN/D/M/S, AMDX1-3, AMDY1-3)",
                        dss_keys[k], k == 9 ? " as a string" : "");
            free(hdr);
            return TESS_EINVAL;
        }
    }

    int nreject = 0, nwcs = 0;
    struct wcsprm *all = NULL;
    int st = wcspih(hdr, nkeys, WCSHDR_all, 0, &nreject, &nwcs, &all);
    free(hdr);
    if (st != 0) {
        tess_seterr(err, errlen, "wcspih: %s", wcshdr_errmsg[st]);
        return st == 2 ? TESS_ENOMEM : TESS_EINVAL;
    }
    int pick = -1;
    for (int i = 0; i < nwcs; i++) {
        if (all[i].alt[0] == ' ' || all[i].alt[0] == '\0') {
            pick = i;
            break;
        }
    }
    if (pick < 0) {
        wcsvfree(&nwcs, &all);
        tess_seterr(err, errlen, "%s%s",
                    nwcs == 0 ? "no WCS keywords in the header"
                              : "no primary WCS (only alternates) in the header", ignored);
        return TESS_ENOWCS;
    }

    skywcs *w = calloc(1, sizeof *w);
    if (!w) {
        wcsvfree(&nwcs, &all);
        tess_seterr(err, errlen, "%s", "out of memory");
        return TESS_ENOMEM;
    }
    w->wcs.flag = -1;
    st = wcssub(1, &all[pick], NULL, NULL, &w->wcs);
    wcsvfree(&nwcs, &all);
    if (st != 0) {
        tess_seterr(err, errlen, "wcssub: %s", wcs_errmsg[st]);
        wcsfree(&w->wcs);
        free(w);
        return st == 2 ? TESS_ENOMEM : TESS_EINVAL;
    }
    char why[256] = "no WCS keywords in the header";
    int rc = is_default_wcs(&w->wcs) ? TESS_ENOWCS
                                     : check_matrix(&w->wcs, cd_given, why, sizeof why);
    if (rc) {
        tess_seterr(err, errlen, "%s%s", why, ignored);
        wcsfree(&w->wcs);
        free(w);
        return rc;
    }
    /* The fixes report problems through stat[]; astropy only warns about them, and a
     * WCS they leave unusable is caught by wcsset() below. */
    int stat[NWCSFIX];
    (void)wcsfix(0, NULL, &w->wcs, stat);
    /* celfix() runs wcsset() itself; when that failed, a second wcsset() would leak
     * the first one's linear-transform arrays (wcslib 7.12, found by
     * tests/fuzz/fuzz_header), and it would fail again: report the error now. */
    st = stat[CELFIX] > 0 ? WCSERR_BAD_PARAM : wcsset(&w->wcs);
    if (st != 0) {
        if (st == 2 || !explain_axes(&w->wcs, why, sizeof why))
            snprintf(why, sizeof why, "wcsset: %s", wcs_errmsg[st]);
        tess_seterr(err, errlen, "%s%s", why, ignored);
        wcsfree(&w->wcs);
        free(w);
        return st == 2 ? TESS_ENOMEM : TESS_EINVAL;
    }
    if (check_result(&w->wcs, why, sizeof why) != 0) {
        tess_seterr(err, errlen, "%s%s", why, ignored);
        wcsfree(&w->wcs);
        free(w);
        return TESS_EINVAL;
    }
    detect_frame(&w->wcs, &w->frame, &w->equinox);
    if (sky_frame_is_solar(w->frame))
        solar_read_header(cards, nkeys, &w->sol);
    *out = w;
    return 0;
}

/* A deep copy with wcsset() done, or NULL on allocation failure. */
skywcs *skywcs_copy(const skywcs *w)
{
    if (!w)
        return NULL;
    skywcs *c = copy_wcsprm(&w->wcs, NULL, NULL);
    if (c) {
        c->frame = w->frame;
        c->equinox = w->equinox;
        c->sol = w->sol;
        c->surface = w->surface;
    }
    return c;
}

skywcs *skywcs_celestial_image(const char *cards, int nkeys, int naxis, const long *naxes,
                               skywcs_image_check *chk)
{
    memset(chk, 0, sizeof *chk);
    chk->naxis = naxis;
    for (int k = 2; k < naxis; k++)
        if (naxes[k] != 1) {
            chk->why = SKYWCS_IMAGE_NOT_2D;
            chk->axis = k;
            chk->axis_len = naxes[k];
            return NULL;
        }
    if (naxis < 2) {
        chk->why = SKYWCS_IMAGE_NOT_IMAGE;
        return NULL;
    }
    skywcs *w = NULL;
    chk->rc = skywcs_parse(cards, nkeys, &w, chk->err, sizeof chk->err);
    if (chk->rc) {
        chk->why = SKYWCS_IMAGE_BAD_WCS;
        return NULL;
    }
    skywcs *c = skywcs_celestial(w);
    skywcs_free(w);
    if (!c)
        chk->why = SKYWCS_IMAGE_NO_CELESTIAL;
    return c;
}

/* The longitude and latitude axes (in that order) extracted with wcssub; NULL when the
 * WCS has no celestial pair, when they cannot be separated from the other axes, or on
 * allocation failure.  The frame is kept. */
skywcs *skywcs_celestial(const skywcs *w)
{
    if (!w || w->wcs.lng < 0 || w->wcs.lat < 0)
        return NULL;
    int nsub = 2;
    int axes[2] = { WCSSUB_LONGITUDE, WCSSUB_LATITUDE };
    skywcs *c = copy_wcsprm(&w->wcs, &nsub, axes);
    if (!c)
        return NULL;
    if (nsub != 2 || c->wcs.lng != 0 || c->wcs.lat != 1) {
        skywcs_free(c);
        return NULL;
    }
    c->frame = w->frame;
    c->equinox = w->equinox;
    c->sol = w->sol;
    c->surface = w->surface;
    return c;
}

/* skywcs_celestial with the reference pixel of pixel axes 1 and 2 replaced first.  The
 * sub-image is extracted as skywcs_celestial does (wcssub, which reports the original
 * axis of each extracted one), its CRPIX set, then wcsset run once, as on the sub-image a
 * parse of the edited header gives: wcsset derives nothing from CRPIX that it writes back
 * into the parameters wcssub copies, and wcsfix's steps do not read CRPIX. */
skywcs *skywcs_celestial_crpix(const skywcs *w, const double crpix[2])
{
    if (!w || w->wcs.lng < 0 || w->wcs.lat < 0 || w->wcs.naxis < 2 || w->wcs.lin.dispre
        || w->wcs.lin.disseq)
        return NULL;
    for (int k = 0; k < 2; k++)
        if (!isfinite(crpix[k]) && !isnan(crpix[k]))
            return NULL;
    skywcs *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->wcs.flag = -1;
    int nsub = 2;
    int axes[2] = { WCSSUB_LONGITUDE, WCSSUB_LATITUDE };
    if (wcssub(1, &w->wcs, &nsub, axes, &c->wcs) != 0 || nsub != 2) {
        wcsfree(&c->wcs);
        free(c);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        int from = axes[i] - 1;
        if ((from == 0 || from == 1) && !isnan(crpix[from]))
            c->wcs.crpix[i] = crpix[from];
    }
    if (wcsset(&c->wcs) != 0 || c->wcs.lng != 0 || c->wcs.lat != 1) {
        skywcs_free(c);
        return NULL;
    }
    c->frame = w->frame;
    c->equinox = w->equinox;
    c->sol = w->sol;
    c->surface = w->surface;
    return c;
}

void skywcs_free(skywcs *w)
{
    if (!w)
        return;
    wcsfree(&w->wcs);
    free(w);
}

int skywcs_naxis(const skywcs *w)
{
    return w ? w->wcs.naxis : 0;
}

int skywcs_has_celestial(const skywcs *w)
{
    return w && w->wcs.lng >= 0 && w->wcs.lat >= 0;
}

const solar_obs *skywcs_solar(const skywcs *w)
{
    return w && sky_frame_is_solar(w->frame) ? &w->sol : NULL;
}

void skywcs_set_solar_surface(skywcs *w, int surface)
{
    if (w)
        w->surface = surface == SOLAR_SCREEN ? SOLAR_SCREEN : SOLAR_SPHERE;
}

sky_frame skywcs_frame(const skywcs *w, double *equinox)
{
    if (equinox)
        *equinox = w ? w->equinox : 0.0;
    return w ? w->frame : SKY_FRAME_NONE;
}

int skywcs_plain_get(const skywcs *w, skywcs_plain *p)
{
    if (!w || w->wcs.naxis != 2 || w->wcs.lng != 0 || w->wcs.lat != 1)
        return 0;
    const struct linprm *lin = &w->wcs.lin;
    const struct prjprm *prj = &w->wcs.cel.prj;
    if (lin->dispre || lin->disseq || prj->r0 != RAD2DEG || prj->x0 != 0.0 ||
        prj->y0 != 0.0)
        return 0;
    if (strcmp(prj->code, "TAN") == 0) {
        p->proj = SKYWCS_PLAIN_TAN;
    } else if (strcmp(prj->code, "CAR") == 0) {
        p->proj = SKYWCS_PLAIN_CAR;
    } else if (strcmp(prj->code, "CEA") == 0) {
        p->proj = SKYWCS_PLAIN_CEA;
        p->lambda = prj->pv[1];
        if (!(p->lambda > 0.0 && p->lambda <= 1.0))
            return 0;
    } else {
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        p->crpix[i] = w->wcs.crpix[i];
        for (int j = 0; j < 2; j++)
            p->piximg[i][j] = lin->cdelt[i] * lin->pc[2 * i + j];
    }
    double det = p->piximg[0][0] * p->piximg[1][1] - p->piximg[0][1] * p->piximg[1][0];
    if (!(det != 0.0) || !isfinite(det))
        return 0;
    p->imgpix[0][0] = p->piximg[1][1] / det;
    p->imgpix[0][1] = -p->piximg[0][1] / det;
    p->imgpix[1][0] = -p->piximg[1][0] / det;
    p->imgpix[1][1] = p->piximg[0][0] / det;
    /* Paper II eq. 2 with alpha_p = euler[0], delta_p = 90 - euler[1], phi_p = euler[2]:
     * rotate the native vector by -phi_p about z, then (x', y', z') -> (z' cos delta_p -
     * x' sin delta_p, -y', z' sin delta_p + x' cos delta_p), then by alpha_p about z. */
    const double *eu = w->wcs.cel.euler;
    double ca = cos(eu[0] * DEG2RAD), sa = sin(eu[0] * DEG2RAD);
    double cf = cos(eu[2] * DEG2RAD), sf = sin(eu[2] * DEG2RAD);
    double sd = eu[3], cdl = eu[4];
    for (int j = 0; j < 3; j++) {
        double n[3] = { j == 0, j == 1, j == 2 };
        double nx = cf * n[0] + sf * n[1], ny = -sf * n[0] + cf * n[1], nz = n[2];
        double cx = nz * cdl - nx * sd, cy = -ny, cz = nz * sd + nx * cdl;
        p->n2c[0][j] = ca * cx - sa * cy;
        p->n2c[1][j] = sa * cx + ca * cy;
        p->n2c[2][j] = cz;
    }
    return 1;
}

/* Fills `s` from the wcsprm as wcslib holds it after wcsfix/wcsset (so a DSS plate
 * solution shows as the TAN WCS wcslib derived from it).  `cd` is always filled: the CD
 * matrix when the header gave one (wcsprm::altlin bit 2), else PC scaled by CDELT row by
 * row, which is the same matrix.  Axes beyond SKYWCS_MAXDIM are left out.  Cannot fail. */
void skywcs_describe(const skywcs *w, skywcs_summary *s)
{
    memset(s, 0, sizeof *s);
    if (!w)
        return;
    const struct wcsprm *c = &w->wcs;
    int n = c->naxis < SKYWCS_MAXDIM ? c->naxis : SKYWCS_MAXDIM;
    s->naxis = n;
    s->has_cd = (c->altlin & 2) != 0;
    for (int i = 0; i < n; i++) {
        snprintf(s->ctype[i], sizeof s->ctype[i], "%s", c->ctype[i]);
        snprintf(s->cunit[i], sizeof s->cunit[i], "%s", c->cunit[i]);
        s->crval[i] = c->crval[i];
        s->crpix[i] = c->crpix[i];
        s->cdelt[i] = c->cdelt[i];
        for (int j = 0; j < n; j++) {
            s->cd[i * n + j] = s->has_cd ? c->cd[i * c->naxis + j]
                                         : c->cdelt[i] * c->pc[i * c->naxis + j];
        }
    }
    s->frame = w->frame;
    s->equinox = w->equinox;
}

/* One wcsp2s call over the n pixels (x, y, k), k = 0..n-1, turned 1-based as wcslib
 * counts them, every further axis at its first pixel. */
static const char *const spectral_velocities[] = {"VOPT", "VELO", "ZOPT", "VRAD"};

int skywcs_spectral_needs_rest(const char *ctype)
{
    for (int k = 0; k < 4; k++)
        if (strncmp(ctype, spectral_velocities[k], 4) == 0)
            return 1;
    return 0;
}

double skywcs_spectral_wavelength(const char *ctype, double v, double rest_hz)
{
    const double c = 299792458.0;
    if (strncmp(ctype, "FREQ", 4) == 0)
        return v > 0.0 ? c / v : NAN;
    if (strncmp(ctype, "WAVE", 4) == 0)
        return v > 0.0 ? v : NAN;
    if (strncmp(ctype, "WAVN", 4) == 0)
        return v > 0.0 ? 1.0 / v : NAN;
    if (strncmp(ctype, "ENER", 4) == 0)
        return v > 0.0 ? 6.62607015e-34 * c / v : NAN;
    int k = 0;
    while (k < 4 && strncmp(ctype, spectral_velocities[k], 4) != 0)
        k++;
    if (k == 4 || !(rest_hz > 0.0))
        return NAN;
    double lam0 = c / rest_hz;
    switch (k) {
    case 0:
    case 1:
        return lam0 * (1.0 + v / c);          /* optical convention */
    case 2:
        return lam0 * (1.0 + v);              /* redshift */
    default:
        return c / (rest_hz * (1.0 - v / c)); /* radio convention */
    }
}

int skywcs_zaxis(skywcs *w, double x, double y, long n, double *world, char *ctype,
                 size_t ctypelen, char *cunit, size_t cunitlen)
{
    snprintf(ctype, ctypelen, "%s", "");
    snprintf(cunit, cunitlen, "%s", "");
    if (!w || w->wcs.naxis < 3 || !w->wcs.ctype[2][0] || n < 1)
        return TESS_EINVAL;
    int nc = w->wcs.naxis;
    size_t m = (size_t)n * (size_t)nc;
    double *pix = malloc(m * sizeof(double));
    double *img = malloc(m * sizeof(double));
    double *wld = malloc(m * sizeof(double));
    double *phi = malloc((size_t)n * sizeof(double));
    double *theta = malloc((size_t)n * sizeof(double));
    int *status = malloc((size_t)n * sizeof(int));
    int rc = pix && img && wld && phi && theta && status ? 0 : TESS_ENOMEM;
    if (rc == 0) {
        for (long k = 0; k < n; k++) {
            double *p = pix + (size_t)k * (size_t)nc;
            for (int a = 0; a < nc; a++)
                p[a] = 1.0;
            p[0] = x + 1.0;
            p[1] = y + 1.0;
            p[2] = (double)k + 1.0;
        }
        wcsp2s(&w->wcs, (int)n, nc, pix, img, phi, theta, wld, status);
        for (long k = 0; k < n; k++)
            world[k] = status[k] ? NAN : wld[(size_t)k * (size_t)nc + 2];
        snprintf(ctype, ctypelen, "%.70s", w->wcs.ctype[2]);
        snprintf(cunit, cunitlen, "%.70s", w->wcs.cunit[2]);
        /* wcslib leaves trailing blanks out already; trim any left. */
        for (char *e = ctype + strlen(ctype); e > ctype && e[-1] == ' ';)
            *--e = '\0';
    }
    free(pix);
    free(img);
    free(wld);
    free(phi);
    free(theta);
    free(status);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Pixel <-> world                                                                        */

/* astropy's Longitude wrapping (coordinates/angles.py, Longitude._wrap_at with the
 * default wrap angle of 360 deg): wraps = a // full with numpy's floor division
 * (npy_divmod), then a -= wraps * full and one more correction for rounding.
 * `full` is 360 (degrees) or 2 pi (radians).  Non-finite values pass through. */
static double wrap_longitude(double a, double full)
{
    /* Already in [0, full): what the steps below give too (fmod is then a, no wraps),
     * without the fmod that every transformed point would pay. */
    if (full > 0.0 && a >= 0.0 && a < full)
        return a;
    if (!isfinite(a))
        return a;
    double mod = fmod(a, full);
    double div = (a - mod) / full;
    if (mod != 0.0 && ((full < 0) != (mod < 0)))
        div -= 1.0;
    double wraps;
    if (div != 0.0) {
        wraps = floor(div);
        if (div - wraps > 0.5)
            wraps += 1.0;
    } else {
        wraps = 0.0;
    }
    if (wraps != 0.0) {
        a -= wraps * full;
        if (a >= full)
            a -= full;
        if (a < 0.0)
            a += full;
    }
    return a;
}

/* Checks that `w` is a 2-D celestial WCS. */
static int is_2d_celestial(const skywcs *w)
{
    return w && w->wcs.naxis == 2 && w->wcs.lng >= 0 && w->wcs.lat >= 0;
}

/* Whether input point (a, b) can be converted: both finite and, from the sky
 * (to_pix), |lat| <= 90. */
static int point_ok(int to_pix, double a, double b)
{
    return isfinite(a) && isfinite(b) && (!to_pix || fabs(b) <= 90.0);
}

/* The conversion of skywcs_pix2sky (to_pix 0: a, b are 0-based x, y; out a, b are lon,
 * lat) or skywcs_sky2pix (to_pix 1: the reverse), SKYWCS_CHUNK points at a time through
 * wcsp2s or wcss2p.  Invalid points go in as the reference point (CRPIX, CRVAL) so
 * that wcslib works on valid input, and come out NaN, as do those whose stat[] wcslib
 * sets; its status for "some points invalid" is 8 (wcsp2s) or 9 (wcss2p).  Returns 0,
 * TESS_EINVAL or TESS_ENOMEM as the public functions say. */
static int transform_points(skywcs *w, int to_pix, size_t n, const double *a,
                            const double *b, double *oa, double *ob)
{
    if (!is_2d_celestial(w))
        return TESS_EINVAL;
    if (n == 0)
        return 0;
    size_t chunk = n < SKYWCS_CHUNK ? n : SKYWCS_CHUNK;
    double *mem = malloc(sizeof(double) * chunk * 9);
    int *stat = malloc(sizeof(int) * chunk);
    if (!mem || !stat) {
        free(mem);
        free(stat);
        return TESS_ENOMEM;
    }
    double *in = mem, *img = mem + 2 * chunk, *res = mem + 4 * chunk;
    double *phi = mem + 6 * chunk, *theta = mem + 7 * chunk;
    int lng = w->wcs.lng, lt = w->wcs.lat, rc = 0;
    int partial = to_pix ? 9 : 8;

    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        for (size_t i = 0; i < m; i++) {
            double u = a[off + i], v = b[off + i];
            int ok = point_ok(to_pix, u, v);
            if (to_pix) {
                in[2 * i + lng] = ok ? u : w->wcs.crval[lng];
                in[2 * i + lt] = ok ? v : w->wcs.crval[lt];
            } else {
                in[2 * i] = ok ? u + 1.0 : w->wcs.crpix[0];
                in[2 * i + 1] = ok ? v + 1.0 : w->wcs.crpix[1];
            }
        }
        int st = to_pix ? wcss2p(&w->wcs, (int)m, 2, in, phi, theta, img, res, stat)
                        : wcsp2s(&w->wcs, (int)m, 2, in, img, phi, theta, res, stat);
        for (size_t i = 0; i < m; i++) {
            int ok = (st == 0 || st == partial) && stat[i] == 0 &&
                     point_ok(to_pix, a[off + i], b[off + i]);
            if (to_pix) {
                oa[off + i] = ok ? res[2 * i] - 1.0 : NAN;
                ob[off + i] = ok ? res[2 * i + 1] - 1.0 : NAN;
            } else {
                oa[off + i] = ok ? wrap_longitude(res[2 * i + lng], 360.0) : NAN;
                ob[off + i] = ok ? res[2 * i + lt] : NAN;
            }
        }
        if (st != 0 && st != partial)
            rc = TESS_EINVAL;
    }
    free(mem);
    free(stat);
    return rc;
}

/* 0-based pixels to (lon, lat) in degrees, lon wrapped to [0, 360) as astropy's
 * Longitude does.  wcsp2s works on 1-based pixels (x + 1); points whose stat[] is set
 * or whose input is not finite become NaN.  Returns 0, TESS_EINVAL (not 2-D celestial,
 * or a wcslib failure other than invalid points: then every output is NaN), or
 * TESS_ENOMEM. */
int skywcs_pix2sky(skywcs *w, size_t n, const double *x, const double *y, double *lon, double *lat)
{
    return transform_points(w, 0, n, x, y, lon, lat);
}

/* (lon, lat) in degrees to 0-based pixels; the inverse of skywcs_pix2sky, with the same
 * error behaviour (NaN for invalid or non-finite points). */
int skywcs_sky2pix(skywcs *w, size_t n, const double *lon, const double *lat, double *x, double *y)
{
    return transform_points(w, 1, n, lon, lat, x, y);
}

/* ------------------------------------------------------------------------------------ */
/* Frame conversions                                                                      */

typedef double mat3[3][3];

/* astropy.coordinates.matrix_utilities.rotation_matrix(angle, axis) for axis x (0),
 * y (1), z (2), angle in radians: R[i][i] = 1, R[a1][a1] = R[a2][a2] = cos,
 * R[a1][a2] = sin, R[a2][a1] = -sin with a1 = i+1, a2 = i+2 (mod 3).  This is also the
 * convention of SOFA/ERFA iauRx/iauRy/iauRz. */
static void rot(int axis, double angle, mat3 r)
{
    int a1 = (axis + 1) % 3, a2 = (axis + 2) % 3;
    double s = sin(angle), c = cos(angle);
    memset(r, 0, sizeof(mat3));
    r[axis][axis] = 1.0;
    r[a1][a1] = c;
    r[a1][a2] = s;
    r[a2][a1] = -s;
    r[a2][a2] = c;
}

/* out = a @ b (out may alias neither). */
static void mat_mul(const mat3 a, const mat3 b, mat3 out)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            out[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
}

/* a = a @ b, in place on a. */
static void mat_mul_right(mat3 a, const mat3 b)
{
    mat3 t;
    mat_mul(a, b, t);
    memcpy(a, t, sizeof(mat3));
}

static void mat_transpose(const mat3 a, mat3 out)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            out[i][j] = a[j][i];
}

/* The IAU 2006 precession alone at t Julian centuries (TT) from J2000.0, without the
 * frame bias: ERFA's eraBp06 "rp" (SOFA iauBp06; Hilton et al. 2006, Celest. Mech. Dyn.
 * Astron. 94, 351). */
static void bp06_rp(double t, mat3 rp)
{
    mat3 rb, rbp;
    eraBp06(ERFA_DJ00, t * ERFA_DJC, rb, rp, rbp);
}

/* Days (TT) from J2000.0 of an equinox, per the Time formats astropy uses
 * (SOFA iauEpj2jd for Julian epochs, iauEpb2jd for Besselian epochs). */
static double days_julian(double epj)
{
    return (epj - 2000.0) * 365.25;
}

static double days_besselian(double epb)
{
    return -36524.68648 + (epb - 1900.0) * 365.242198781;
}

static double jyear_of(double d)
{
    return 2000.0 + d / 365.25;   /* SOFA iauEpj */
}

static double byear_of(double d)
{
    return 1900.0 + (d + 36524.68648) / 365.242198781;   /* SOFA iauEpb */
}

/* FK5 precession between two equinoxes given as days from J2000 (TT): astropy's FK5
 * frame uses earth_orientation.precession_matrix_Capitaine, i.e. IAU 2006 precession
 * through J2000: P = rp(to) @ rp(from)^T with rp from iauBp06. */
static void precess_iau2006(double d_from, double d_to, mat3 p)
{
    mat3 a, b, bt;
    bp06_rp(d_to / 36525.0, a);
    bp06_rp(d_from / 36525.0, b);
    mat_transpose(b, bt);
    mat_mul(a, bt, p);
}

/* FK4 precession between Besselian epochs by Newcomb's method as astropy's
 * earth_orientation._precession_matrix_besselian (Explanatory Supplement 1992):
 * R3(-z) R2(theta) R3(-zeta), polynomials in tropical millennia from B1850. */
static void precess_newcomb(double epoch1, double epoch2, mat3 p)
{
    double t1 = (epoch1 - 1850.0) / 1000.0;
    double t2 = (epoch2 - 1850.0) / 1000.0;
    double dt = t2 - t1;
    double zeta1 = 23035.545 + t1 * 139.720 + 0.060 * t1 * t1;
    double zeta2 = 30.240 - 0.27 * t1;
    double zeta3 = 17.995;
    double zeta = (((zeta3 * dt + zeta2) * dt + zeta1) * dt + 0.0) / 3600.0;
    double z1 = 23035.545 + t1 * 139.720 + 0.060 * t1 * t1;
    double z2 = 109.480 + 0.39 * t1;
    double z3 = 18.325;
    double z = (((z3 * dt + z2) * dt + z1) * dt + 0.0) / 3600.0;
    double th1 = 20051.12 - 85.29 * t1 - 0.37 * t1 * t1;
    double th2 = -42.65 - 0.37 * t1;
    double th3 = -41.8;
    double theta = (((th3 * dt + th2) * dt + th1) * dt + 0.0) / 3600.0;
    mat3 a;
    rot(2, -z * DEG2RAD, p);
    rot(1, theta * DEG2RAD, a);
    mat_mul_right(p, a);
    rot(2, -zeta * DEG2RAD, a);
    mat_mul_right(p, a);
}

/* ICRS -> FK5 J2000 frame bias, the B-matrix of USNO Circular 179 (Kaplan 2005, eq. 3.4)
 * as astropy's icrs_fk5_transforms._icrs_to_fk5_matrix builds it:
 * R1(-eta0) R2(xi0) R3(da0) with eta0 = -19.9 mas, xi0 = 9.1 mas, da0 = -22.9 mas. */
static void icrs_to_fk5_bias(mat3 b)
{
    double eta0 = -19.9 / 3600000.0, xi0 = 9.1 / 3600000.0, da0 = -22.9 / 3600000.0;
    mat3 a;
    rot(0, -eta0 * DEG2RAD, b);
    rot(1, xi0 * DEG2RAD, a);
    mat_mul_right(b, a);
    rot(2, da0 * DEG2RAD, a);
    mat_mul_right(b, a);
}

/* Equatorial -> Galactic for the north galactic pole at (ra_ngp, dec_ngp) and galactic
 * longitude l0 of the celestial pole, all in degrees: R3(180 - l0) R2(90 - dec_ngp)
 * R3(ra_ngp). */
static void to_gal(double ra_ngp, double dec_ngp, double l0, mat3 g)
{
    mat3 a;
    rot(2, (180.0 - l0) * DEG2RAD, g);
    rot(1, (90.0 - dec_ngp) * DEG2RAD, a);
    mat_mul_right(g, a);
    rot(2, ra_ngp * DEG2RAD, a);
    mat_mul_right(g, a);
}

/* FK5 J2000 -> Galactic (astropy galactic_transforms.fk5_to_gal without the precession):
 * astropy's Galactic._ngp_J2000 = (192.8594812065348, 27.12825118085622) and
 * _lon0_J2000 = 122.9319185680026 degrees. */
static void fk5_j2000_to_gal(mat3 g)
{
    to_gal(192.8594812065348, 27.12825118085622, 122.9319185680026, g);
}

/* FK4 (no E-terms) B1950 -> Galactic: astropy's fk4_to_gal with the IAU 1958 pole
 * (192.25, 27.4) and l0 = 123 degrees (Blaauw et al. 1960). */
static void fk4_b1950_to_gal(mat3 g)
{
    to_gal(192.25, 27.4, 123.0, g);
}

/* astropy fk4_fk5_transforms._fk4_B_matrix: the B1950 -> J2000 matrix of Standish (1982,
 * A&A 115, 20) plus the correction for the rotation of FK4 (Murray 1989, eqn 29) times
 * T = (obstime.jyear - 1950) / 100. */
static void fk4_b_matrix(double obstime_days, mat3 m)
{
    static const mat3 b1950_to_j2000 = {
        { 0.9999256794956877, -0.0111814832204662, -0.0048590038153592 },
        { 0.0111814832391717, +0.9999374848933135, -0.0000271625947142 },
        { 0.0048590037723143, -0.0000271702937440, +0.9999881946023742 } };
    static const mat3 corr = {
        { -0.0026455262, -1.1539918689, +2.1111346190 },
        { +1.1540628161, -0.0129042997, +0.0236021478 },
        { -2.1112979048, -0.0056024448, +0.0102587734 } };
    double t = (jyear_of(obstime_days) - 1950.0) / 100.0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            m[i][j] = b1950_to_j2000[i][j] + corr[i][j] * 1.0e-6 * t;
}

/* ICRS -> mean ecliptic and equinox (astropy BarycentricMeanEcliptic): ERFA's eraEcm06,
 * R1(eps_A) times the IAU 2006 bias-precession matrix. */
void sky_icrs_to_ecliptic(double d_equinox, double m[3][3])
{
    eraEcm06(ERFA_DJ00, d_equinox, m);
}

/* E-terms of aberration of an FK4 equinox (astropy builtin_frames/fk4.py fk4_e_terms:
 * aberration constant 0.0056932 deg, the Earth's eccentricity, mean longitude of perigee
 * and IAU 1980 obliquity from the Explanatory Supplement 1992 / SOFA iauObl80). */
static void fk4_e_terms(double d_equinox, double a[3])
{
    const double jd1950 = 2451545.0 + days_besselian(1950.0);
    double jd = 2451545.0 + d_equinox;
    double T = (jd - jd1950) / 36525.0;
    double e = (-0.000000126 * T + -0.00004193) * T + 0.01673011;
    double g = (((0.012 * T + 1.65) * T + 6190.67) * T + 1015489.951) / 3600.0 * DEG2RAD;
    double t80 = (jd - 2451545.0) / 36525.0;
    double o = eraObl80(ERFA_DJ00, t80 * ERFA_DJC);
    double k = 0.0056932 * DEG2RAD;
    a[0] = e * k * sin(g);
    a[1] = -e * k * cos(g) * cos(o);
    a[2] = -e * k * cos(g) * sin(o);
}

/* One step of a conversion path: a rotation, or adding/removing FK4 E-terms. */
enum { STEP_MATRIX, STEP_ETERMS_REMOVE, STEP_ETERMS_ADD };
typedef struct conv_step {
    int kind;
    mat3 m;
    double eterms[3];
} conv_step;

#define MAX_STEPS 8

/* A frame as astropy sees it during a transformation: kind, equinox and obstime as days
 * from J2000 (TT). */
typedef struct frame_state {
    int kind;        /* sky_frame, or FRAME_FK4NOE below */
    double eq;       /* days from J2000 */
    double obstime;  /* FK4 frames only */
} frame_state;
#define FRAME_FK4NOE 100

typedef struct path {
    conv_step step[MAX_STEPS];
    int n;
} path;

static void add_matrix(path *p, const mat3 m)
{
    if (p->n >= MAX_STEPS)
        return;
    p->step[p->n].kind = STEP_MATRIX;
    memcpy(p->step[p->n].m, m, sizeof(mat3));
    p->n++;
}

static void add_eterms(path *p, int kind, double d_equinox)
{
    if (p->n >= MAX_STEPS)
        return;
    p->step[p->n].kind = kind;
    fk4_e_terms(d_equinox, p->step[p->n].eterms);
    p->n++;
}

/* One edge of astropy's transform graph (the *_transforms.py files of builtin_frames) from `a` to `b`;
 * both must be adjacent in that graph. */
static void edge(const frame_state *a, const frame_state *b, path *p)
{
    mat3 m, n, q;
    const double j2000 = 0.0, b1950 = days_besselian(1950.0);
    if (a->kind == SKY_FRAME_ICRS && b->kind == SKY_FRAME_FK5) {
        precess_iau2006(j2000, b->eq, m);
        icrs_to_fk5_bias(n);
        mat_mul(m, n, q);
        add_matrix(p, q);
    } else if (a->kind == SKY_FRAME_FK5 && b->kind == SKY_FRAME_ICRS) {
        icrs_to_fk5_bias(m);
        mat_transpose(m, n);
        precess_iau2006(a->eq, j2000, m);
        mat_mul(n, m, q);
        add_matrix(p, q);
    } else if (a->kind == SKY_FRAME_FK5 && b->kind == SKY_FRAME_FK5) {
        precess_iau2006(a->eq, b->eq, m);
        add_matrix(p, m);
    } else if (a->kind == SKY_FRAME_FK5 && b->kind == SKY_FRAME_GALACTIC) {
        fk5_j2000_to_gal(m);
        precess_iau2006(a->eq, j2000, n);
        mat_mul(m, n, q);
        add_matrix(p, q);
    } else if (a->kind == SKY_FRAME_GALACTIC && b->kind == SKY_FRAME_FK5) {
        fk5_j2000_to_gal(m);
        precess_iau2006(b->eq, j2000, n);
        mat_mul(m, n, q);
        mat_transpose(q, m);
        add_matrix(p, m);
    } else if (a->kind == SKY_FRAME_ICRS && b->kind == SKY_FRAME_ECLIPTIC) {
        sky_icrs_to_ecliptic(b->eq, m);
        add_matrix(p, m);
    } else if (a->kind == SKY_FRAME_ECLIPTIC && b->kind == SKY_FRAME_ICRS) {
        sky_icrs_to_ecliptic(a->eq, m);
        mat_transpose(m, n);
        add_matrix(p, n);
    } else if (a->kind == SKY_FRAME_FK4 && b->kind == FRAME_FK4NOE) {
        /* astropy fk4.fk4_to_fk4_no_e: remove E-terms of the FK4 equinox, then precess
         * when the target's equinox differs. */
        add_eterms(p, STEP_ETERMS_REMOVE, a->eq);
        if (a->eq != b->eq) {
            precess_newcomb(byear_of(a->eq), byear_of(b->eq), m);
            add_matrix(p, m);
        }
    } else if (a->kind == FRAME_FK4NOE && b->kind == SKY_FRAME_FK4) {
        /* astropy fk4.fk4_no_e_to_fk4: precess first, then add the E-terms. */
        if (a->eq != b->eq) {
            precess_newcomb(byear_of(a->eq), byear_of(b->eq), m);
            add_matrix(p, m);
        }
        add_eterms(p, STEP_ETERMS_ADD, b->eq);
    } else if (a->kind == FRAME_FK4NOE && b->kind == FRAME_FK4NOE) {
        precess_newcomb(byear_of(a->eq), byear_of(b->eq), m);
        add_matrix(p, m);
    } else if (a->kind == FRAME_FK4NOE && b->kind == SKY_FRAME_FK5) {
        /* fk4_fk5_transforms.fk4_no_e_to_fk5: pmat2 @ B(obstime) @ pmat1. */
        precess_iau2006(j2000, b->eq, m);
        fk4_b_matrix(a->obstime, n);
        mat_mul(m, n, q);
        precess_newcomb(byear_of(a->eq), byear_of(b1950), m);
        mat_mul_right(q, m);
        add_matrix(p, q);
    } else if (a->kind == SKY_FRAME_FK5 && b->kind == FRAME_FK4NOE) {
        /* fk5_to_fk4_no_e: pmat2 @ B(obstime)^T @ pmat1. */
        precess_newcomb(byear_of(b1950), byear_of(b->eq), m);
        fk4_b_matrix(b->obstime, q);
        mat_transpose(q, n);
        mat_mul(m, n, q);
        precess_iau2006(a->eq, j2000, m);
        mat_mul_right(q, m);
        add_matrix(p, q);
    } else if (a->kind == FRAME_FK4NOE && b->kind == SKY_FRAME_GALACTIC) {
        fk4_b1950_to_gal(m);
        precess_newcomb(byear_of(a->eq), byear_of(b1950), n);
        mat_mul(m, n, q);
        add_matrix(p, q);
    } else if (a->kind == SKY_FRAME_GALACTIC && b->kind == FRAME_FK4NOE) {
        fk4_b1950_to_gal(m);
        precess_newcomb(byear_of(b->eq), byear_of(b1950), n);
        mat_mul(m, n, q);
        mat_transpose(q, m);
        add_matrix(p, m);
    }
}

/* The frames astropy passes through from `from` to `to` (the shortest paths of its
 * transform graph), with the intermediate frames' attributes chosen as astropy's
 * CompositeTransform does: from the target frame when it has the attribute, else from
 * the starting frame, else the default (FK5 equinox J2000, FK4 B1950). */
static void build_path(const frame_state *from, const frame_state *to, path *p)
{
    static const int routes[6][6][5] = {
        /* from NONE */ { { 0 } },
        /* from ICRS */ { { 0 }, { 0 }, { SKY_FRAME_FK5, 0 },
                          { SKY_FRAME_FK5, FRAME_FK4NOE, SKY_FRAME_FK4, 0 },
                          { SKY_FRAME_FK5, SKY_FRAME_GALACTIC, 0 }, { SKY_FRAME_ECLIPTIC, 0 } },
        /* from FK5 */  { { 0 }, { SKY_FRAME_ICRS, 0 }, { SKY_FRAME_FK5, 0 },
                          { FRAME_FK4NOE, SKY_FRAME_FK4, 0 }, { SKY_FRAME_GALACTIC, 0 },
                          { SKY_FRAME_ICRS, SKY_FRAME_ECLIPTIC, 0 } },
        /* from FK4 */  { { 0 }, { FRAME_FK4NOE, SKY_FRAME_FK5, SKY_FRAME_ICRS, 0 },
                          { FRAME_FK4NOE, SKY_FRAME_FK5, 0 },
                          { FRAME_FK4NOE, FRAME_FK4NOE, SKY_FRAME_FK4, 0 },
                          { FRAME_FK4NOE, SKY_FRAME_GALACTIC, 0 },
                          { FRAME_FK4NOE, SKY_FRAME_FK5, SKY_FRAME_ICRS, SKY_FRAME_ECLIPTIC, 0 } },
        /* from GAL */  { { 0 }, { SKY_FRAME_FK5, SKY_FRAME_ICRS, 0 }, { SKY_FRAME_FK5, 0 },
                          { FRAME_FK4NOE, SKY_FRAME_FK4, 0 }, { 0 },
                          { SKY_FRAME_FK5, SKY_FRAME_ICRS, SKY_FRAME_ECLIPTIC, 0 } },
        /* from ECL */  { { 0 }, { SKY_FRAME_ICRS, 0 }, { SKY_FRAME_ICRS, SKY_FRAME_FK5, 0 },
                          { SKY_FRAME_ICRS, SKY_FRAME_FK5, FRAME_FK4NOE, SKY_FRAME_FK4, 0 },
                          { SKY_FRAME_ICRS, SKY_FRAME_FK5, SKY_FRAME_GALACTIC, 0 },
                          { SKY_FRAME_ICRS, SKY_FRAME_ECLIPTIC, 0 } },
    };
    p->n = 0;
    if (from->kind < 1 || from->kind > 5 || to->kind < 1 || to->kind > 5)
        return;
    const int *r = routes[from->kind][to->kind];
    frame_state cur = *from;
    /* Starting-frame attributes: FK4 has equinox and obstime, FK5/ecliptic equinox. */
    int from_has_eq = from->kind == SKY_FRAME_FK5 || from->kind == SKY_FRAME_FK4
                      || from->kind == SKY_FRAME_ECLIPTIC;
    int to_has_eq = to->kind == SKY_FRAME_FK5 || to->kind == SKY_FRAME_FK4
                    || to->kind == SKY_FRAME_ECLIPTIC;
    int from_has_obs = from->kind == SKY_FRAME_FK4;
    int to_has_obs = to->kind == SKY_FRAME_FK4;

    if (from->kind == SKY_FRAME_FK4 && to->kind == SKY_FRAME_FK4) {
        /* astropy fk4.fk4_to_fk4: through FK4NoETerms at each equinox. */
        frame_state n1 = { FRAME_FK4NOE, from->eq, from->obstime };
        frame_state n2 = { FRAME_FK4NOE, to->eq, from->obstime };
        edge(from, &n1, p);
        edge(&n1, &n2, p);
        edge(&n2, to, p);
        return;
    }
    for (int i = 0; i < 5 && r[i] != 0; i++) {
        frame_state nx;
        int last = i == 4 || r[i + 1] == 0;
        if (last) {
            nx = *to;
        } else {
            nx.kind = r[i];
            int nx_is_fk4 = nx.kind == FRAME_FK4NOE;
            nx.eq = to_has_eq ? to->eq : from_has_eq ? from->eq
                    : nx_is_fk4 ? days_besselian(1950.0) : 0.0;
            nx.obstime = to_has_obs ? to->obstime : from_has_obs ? from->obstime : nx.eq;
        }
        edge(&cur, &nx, p);
        cur = nx;
    }
}

/* Applies the steps to one direction as astropy does: the unit vector from
 * (lon, lat) (SOFA iauS2c), each matrix by iauRxp, back to (lon, lat) by iauC2s with
 * the longitude wrapped to [0, 2 pi) (astropy's Longitude) after every step; E-terms
 * as in astropy fk4.py (removal: r - A + (A.r) r, renormalised; addition: ten fixed-point
 * iterations of r = (A + r0) / (1 + A.r), renormalised). */
static void apply_path(const path *p, double *lon, double *lat)
{
    double a = *lon * DEG2RAD, b = *lat * DEG2RAD;
    for (int s = 0; s < p->n; s++) {
        const conv_step *st = &p->step[s];
        double cb = cos(b);
        double v[3] = { cos(a) * cb, sin(a) * cb, sin(b) };
        double w[3];
        if (st->kind == STEP_MATRIX) {
            for (int i = 0; i < 3; i++)
                w[i] = st->m[i][0] * v[0] + st->m[i][1] * v[1] + st->m[i][2] * v[2];
        } else {
            const double *A = st->eterms;
            double d0 = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
            for (int i = 0; i < 3; i++)
                v[i] /= d0;
            if (st->kind == STEP_ETERMS_REMOVE) {
                double ad = A[0] * v[0] + A[1] * v[1] + A[2] * v[2];
                for (int i = 0; i < 3; i++)
                    w[i] = v[i] - A[i] + ad * v[i];
            } else {
                for (int i = 0; i < 3; i++)
                    w[i] = v[i];
                for (int it = 0; it < 10; it++) {
                    double ad = A[0] * w[0] + A[1] * w[1] + A[2] * w[2];
                    for (int i = 0; i < 3; i++)
                        w[i] = (A[i] + v[i]) / (1.0 + ad);
                }
            }
            double d1 = sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
            for (int i = 0; i < 3; i++)
                w[i] *= d0 / d1;
        }
        double d2 = w[0] * w[0] + w[1] * w[1];
        a = d2 != 0.0 ? atan2(w[1], w[0]) : 0.0;
        b = (d2 != 0.0 || w[2] != 0.0) ? atan2(w[2], sqrt(d2)) : 0.0;
        a = wrap_longitude(a, 2.0 * M_PI);
    }
    *lon = a * RAD2DEG;
    *lat = b * RAD2DEG;
}

/* Converts positions between frames following astropy's transform graph (see
 * build_path).  Equinoxes are Julian years for FK5 and ecliptic, Besselian years for FK4
 * (whose obstime is taken equal to the equinox, astropy's default), ignored otherwise.
 * Identical frames, or SKY_FRAME_NONE on either side, leave the positions unchanged.
 * Cannot fail. */
void sky_convert(sky_frame from, double eq_from, sky_frame to, double eq_to,
                 size_t n, double *lon, double *lat)
{
    if (from == SKY_FRAME_NONE || to == SKY_FRAME_NONE || n == 0)
        return;
    if (sky_frame_is_solar(from) || sky_frame_is_solar(to)) {
        /* Solar frames need their observers (skywcs_convert): only the identity here. */
        for (size_t i = 0; from != to && i < n; i++)
            lon[i] = lat[i] = NAN;
        return;
    }
    int eq_matters = from == SKY_FRAME_FK5 || from == SKY_FRAME_FK4 || from == SKY_FRAME_ECLIPTIC;
    if (from == to && (!eq_matters || eq_from == eq_to))
        return;
    frame_state a = { (int)from, 0.0, 0.0 }, b = { (int)to, 0.0, 0.0 };
    if (from == SKY_FRAME_FK4)
        a.eq = a.obstime = days_besselian(eq_from);
    else if (from == SKY_FRAME_FK5 || from == SKY_FRAME_ECLIPTIC)
        a.eq = days_julian(eq_from);
    if (to == SKY_FRAME_FK4)
        b.eq = b.obstime = days_besselian(eq_to);
    else if (to == SKY_FRAME_FK5 || to == SKY_FRAME_ECLIPTIC)
        b.eq = days_julian(eq_to);
    path p;
    build_path(&a, &b, &p);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(lon[i]) && isfinite(lat[i]))
            apply_path(&p, &lon[i], &lat[i]);
        else
            lon[i] = lat[i] = NAN;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Cutout headers                                                                         */

/* The projection codes wcslib knows (prj.h): 0 for none of them; else 1, or the default
 * of PV2_1 for those whose definition needs it (skywcs.h): *pv1 is set then. */
static int known_projection(const char *p, double *pv1)
{
    static const char *const codes[] = {
        "AZP", "SZP", "TAN", "STG", "SIN", "ARC", "ZEA", "AIR", "CYP", "CEA", "CAR", "MER",
        "SFL", "PAR", "MOL", "AIT", "PCO", "TSC", "CSC", "QSC", "HPX", "XPH" };
    static const struct { const char *code; double pv1; } needs_pv[] = {
        {"ZPN", 1.0}, {"COE", 45.0}, {"COD", 45.0}, {"COO", 45.0}, {"COP", 45.0},
        {"BON", 45.0} };
    *pv1 = NAN;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(p, codes[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof needs_pv / sizeof needs_pv[0]; i++)
        if (strcmp(p, needs_pv[i].code) == 0) {
            *pv1 = needs_pv[i].pv1;
            return 1;
        }
    return 0;
}

/* Builds the hips2fits-style header described in skywcs.h.  The frames icrs
 * (RA/DEC, RADESYS ICRS), fk5 (RADESYS FK5, EQUINOX 2000), fk4 (RADESYS FK4, EQUINOX
 * 1950), galactic (GLON/GLAT) and ecliptic (ELON/ELAT, equinox J2000) are accepted.
 * The result is parsed back with skywcs_parse as a last check.  Errors: TESS_EINVAL
 * (`err` names the bad value), TESS_ENOMEM; *cards is NULL on error. */
static int cutout_header(double lon, double lat, double fov, long w, long h, const char *proj,
                         sky_frame frame, const solar_obs *sol, double rotation,
                         const double *pv, char **cards, int *nkeys, char *err, size_t errlen)
{
    if (cards)
        *cards = NULL;
    if (nkeys)
        *nkeys = 0;
    if (!cards || !nkeys) {
        tess_seterr(err, errlen, "%s", "no output");
        return TESS_EINVAL;
    }
    char pj[8];
    if (!proj || strlen(proj) != 3) {
        tess_seterr(err, errlen, "projection: unknown code '%s'", proj ? proj : "");
        return TESS_EINVAL;
    }
    trim_upper(proj, pj, sizeof pj);
    double pv1_default;
    if (!known_projection(pj, &pv1_default)) {
        tess_seterr(err, errlen, "projection: unknown code '%s'", proj);
        return TESS_EINVAL;
    }
    if (!isfinite(lon)) {
        tess_seterr(err, errlen, "%s", "lon: not a finite number");
        return TESS_EINVAL;
    }
    if (!isfinite(lat) || lat < -90.0 || lat > 90.0) {
        tess_seterr(err, errlen, "%s", "lat: must be within [-90, 90]");
        return TESS_EINVAL;
    }
    if (!isfinite(fov) || fov <= 0.0 || fov > 360.0) {
        tess_seterr(err, errlen, "%s", "fov: must be within (0, 360] degrees");
        return TESS_EINVAL;
    }
    if (w < 1 || h < 1 || w > 1000000 || h > 1000000) {
        tess_seterr(err, errlen, "%s", "width/height: must be within [1, 1000000]");
        return TESS_EINVAL;
    }
    if (!isfinite(rotation)) {
        tess_seterr(err, errlen, "%s", "rotation_angle: not a finite number");
        return TESS_EINVAL;
    }
    const char *lonpre, *latpre, *radesys = NULL;
    double equinox = 0.0;
    switch (frame) {
    case SKY_FRAME_ICRS: lonpre = "RA--"; latpre = "DEC-"; radesys = "ICRS"; break;
    case SKY_FRAME_FK5: lonpre = "RA--"; latpre = "DEC-"; radesys = "FK5"; equinox = 2000.0; break;
    case SKY_FRAME_FK4: lonpre = "RA--"; latpre = "DEC-"; radesys = "FK4"; equinox = 1950.0; break;
    case SKY_FRAME_GALACTIC: lonpre = "GLON"; latpre = "GLAT"; break;
    case SKY_FRAME_ECLIPTIC: lonpre = "ELON"; latpre = "ELAT"; equinox = 2000.0; break;
    case SKY_FRAME_HELIOPROJECTIVE: lonpre = "HPLN"; latpre = "HPLT"; break;
    case SKY_FRAME_STONYHURST: lonpre = "HGLN"; latpre = "HGLT"; break;
    case SKY_FRAME_CARRINGTON: lonpre = "CRLN"; latpre = "CRLT"; break;
    default:
        tess_seterr(err, errlen, "%s", "coordsys: unsupported frame");
        return TESS_EINVAL;
    }

    double pix = fov / (double)(w > h ? w : h);
    double rad = rotation * DEG2RAD, c = cos(rad), s = sin(rad);
    char v[64];
    fitscard_list b;
    fitscard_list_init(&b, 32 + SKYWCS_CUTOUT_PVN);
    fitscard_list_int(&b, "NAXIS", 2, NULL);
    fitscard_list_int(&b, "NAXIS1", w, NULL);
    fitscard_list_int(&b, "NAXIS2", h, NULL);
    fitscard_list_int(&b, "WCSAXES", 2, NULL);
    snprintf(v, sizeof v, "%s-%s", lonpre, pj);
    fitscard_list_string(&b, "CTYPE1", v, 0, NULL);
    snprintf(v, sizeof v, "%s-%s", latpre, pj);
    fitscard_list_string(&b, "CTYPE2", v, 0, NULL);
    /* Sky frames put east to the left (CDELT1 < 0); solar frames put the longitude
     * increasing to the right (solar west for HPLN, as AIA and sunpy's headers do; east
     * to west for Carrington and Stonyhurst maps, as make_heliographic_header does).
     * Helioprojective angles are written in arcseconds, as AIA and sunpy write them
     * (wcsfix's unitfix reads them back in degrees). */
    int solar = sky_frame_is_solar(frame);
    double us = frame == SKY_FRAME_HELIOPROJECTIVE ? 3600.0 : 1.0;
    const char *cunit = us == 3600.0 ? "arcsec" : "deg";
    fitscard_list_string(&b, "CUNIT1", cunit, 0, NULL);
    fitscard_list_string(&b, "CUNIT2", cunit, 0, NULL);
    fitscard_list_real(&b, "CRPIX1", (double)w / 2.0 + 0.5, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "CRPIX2", (double)h / 2.0 + 0.5, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "CRVAL1", lon * us, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "CRVAL2", lat * us, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "CDELT1", (solar ? pix : -pix) * us, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "CDELT2", pix * us, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "PC1_1", c, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "PC1_2", -s, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "PC2_1", s, FITSCARD_EXACT, NULL);
    fitscard_list_real(&b, "PC2_2", c, FITSCARD_EXACT, NULL);
    for (int m = 0; m < SKYWCS_CUTOUT_PVN; m++) {
        double v2 = pv ? pv[m] : NAN;
        if (m == 1 && !isfinite(v2))
            v2 = pv1_default;
        if (isfinite(v2)) {
            char key[16];
            snprintf(key, sizeof key, "PV2_%d", m);
            fitscard_list_real(&b, key, v2, FITSCARD_EXACT, NULL);
        }
    }
    if (radesys)
        fitscard_list_string(&b, "RADESYS", radesys, 0, NULL);
    if (equinox > 0.0)
        fitscard_list_real(&b, "EQUINOX", equinox, FITSCARD_EXACT, NULL);
    if (sol && sky_frame_is_solar(frame))
        solar_write_header(&b, sol);
    char *buf = NULL;
    int nk = 0;
    if (fitscard_list_take(&b, &buf, &nk) != 0) {
        tess_seterr(err, errlen, "%s", "out of memory");
        return TESS_ENOMEM;
    }

    skywcs *check = NULL;
    char werr[160];
    int rc = skywcs_parse(buf, nk, &check, werr, sizeof werr);
    if (rc != 0) {
        free(buf);
        char pvs[160] = "";
        size_t pl = 0;
        for (int m = 0; m < SKYWCS_CUTOUT_PVN && pv && pl < sizeof pvs - 40; m++)
            if (isfinite(pv[m]))
                pl += (size_t)snprintf(pvs + pl, sizeof pvs - pl, "%sPV2_%d = %.10g",
                                       pl ? ", " : " with ", m, pv[m]);
        tess_seterr(err, errlen, "projection %s%s: %s", pj, pvs, werr);
        return rc;
    }
    skywcs_free(check);
    *cards = buf;
    *nkeys = nk;
    return 0;
}

int skywcs_cutout_header(double lon, double lat, double fov, long w, long h, const char *proj,
                         sky_frame frame, double rotation, const double *pv, char **cards,
                         int *nkeys, char *err, size_t errlen)
{
    if (sky_frame_is_solar(frame)) {
        tess_seterr(err, errlen, "%s", "coordsys: a solar frame needs its observer");
        if (cards)
            *cards = NULL;
        if (nkeys)
            *nkeys = 0;
        return TESS_EINVAL;
    }
    return cutout_header(lon, lat, fov, w, h, proj, frame, NULL, rotation, pv, cards, nkeys,
                         err, errlen);
}

int skywcs_cutout_header_solar(double lon, double lat, double fov, long w, long h,
                               const char *proj, sky_frame frame, const solar_obs *sol,
                               double rotation, const double *pv, char **cards, int *nkeys,
                               char *err, size_t errlen)
{
    return cutout_header(lon, lat, fov, w, h, proj, frame, sol, rotation, pv, cards, nkeys,
                         err, errlen);
}

void skywcs_convert(const skywcs *from, const skywcs *to, size_t n, double *lon, double *lat)
{
    int sf = sky_frame_is_solar(from->frame), st = sky_frame_is_solar(to->frame);
    if (!sf && !st) {
        sky_convert(from->frame, from->equinox, to->frame, to->equinox, n, lon, lat);
        return;
    }
    if (sf != st) {
        for (size_t i = 0; i < n; i++)
            lon[i] = lat[i] = NAN;
        return;
    }
    solar_obs of = from->sol, ot = to->sol;
    solar_pair_observers(&of, &ot);
    /* The screen is centred on the observer of the side marked for it. */
    int screen = from->surface == SOLAR_SCREEN || to->surface == SOLAR_SCREEN;
    const solar_obs *centre = from->surface == SOLAR_SCREEN ? &of : &ot;
    solar_convert(from->frame, &of, to->frame, &ot, screen ? SOLAR_SCREEN : SOLAR_SPHERE,
                  centre, n, lon, lat);
}

int skywcs_convert_trip(const skywcs *from, const skywcs *to, double mu_min, size_t n,
                        double *lon, double *lat, double *blon, double *blat,
                        unsigned char *cls)
{
    if (!sky_frame_is_solar(from->frame) || !sky_frame_is_solar(to->frame) ||
        from->surface == SOLAR_SCREEN || to->surface == SOLAR_SCREEN) {
        skywcs_convert(from, to, n, lon, lat);
        for (size_t i = 0; i < n; i++)
            cls[i] = 0;
        return 0;
    }
    solar_obs of = from->sol, ot = to->sol;
    solar_pair_observers(&of, &ot);
    return solar_convert_trip(from->frame, &of, to->frame, &ot, mu_min, n, lon, lat, blon,
                              blat, cls);
}

int skywcs_check_pair(const skywcs *in, const skywcs *out, char *err, size_t errlen)
{
    if (!skywcs_has_celestial(in) || !skywcs_has_celestial(out)) {
        tess_seterr(err, errlen, "%s WCS has no celestial axes",
                    skywcs_has_celestial(in) ? "output" : "input");
        return TESS_EINVAL;
    }
    if (skywcs_frame(in, NULL) == SKY_FRAME_NONE || skywcs_frame(out, NULL) == SKY_FRAME_NONE) {
        tess_seterr(err, errlen, "%s WCS has an unsupported celestial frame",
                    skywcs_frame(in, NULL) == SKY_FRAME_NONE ? "input" : "output");
        return TESS_EINVAL;
    }
    int si = sky_frame_is_solar(in->frame), so = sky_frame_is_solar(out->frame);
    if (si != so) {
        tess_seterr(err, errlen, "input WCS is in the %s frame %s, output WCS in the %s "
                    "frame %s: solar and sky frames do not mix", si ? "solar" : "sky",
                    sky_frame_name(in->frame), so ? "solar" : "sky",
                    sky_frame_name(out->frame));
        return TESS_EINVAL;
    }
    const char *gap = si ? solar_pair_gap(in->frame, &in->sol, in->surface, out->frame,
                                          &out->sol, out->surface)
                         : NULL;
    if (gap) {
        tess_seterr(err, errlen, "cannot convert %s to %s: %s", sky_frame_name(in->frame),
                    sky_frame_name(out->frame), gap);
        return TESS_EINVAL;
    }
    return 0;
}
