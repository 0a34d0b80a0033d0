/* Unit tests of engine/fits/fitscard (card formatting, lists, lookups, the structural rule, header text) and of what engine/fits/fitswrite and fitsimg_read_cards add around them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"
#include "engine/base/error.h"

/* Asserts that the 80 characters at `card` are `want` blank-padded to 80. */
#define CARD_EQ(card, want) card_eq((card), (want), __LINE__)
static void card_eq(const char *card, const char *want, int line)
{
    char w[81], got[81];
    ck_assert_msg(strlen(want) <= 80, "line %d: expected text longer than a card", line);
    snprintf(w, sizeof w, "%-80s", want);
    memcpy(got, card, 80);
    got[80] = '\0';
    ck_assert_msg(memcmp(card, w, 80) == 0, "line %d:\n got  [%s]\n want [%s]", line, got, w);
}

/* ---- formatting ------------------------------------------------------------------------ */

START_TEST(test_logical_and_integer)
{
    char c[80];
    ck_assert_int_eq(fitscard_logical(c, "SIMPLE", 1, "conforms to FITS standard"), 0);
    CARD_EQ(c, "SIMPLE  =                    T / conforms to FITS standard");
    ck_assert_int_eq(fitscard_logical(c, "EXTEND", 0, NULL), 0);
    CARD_EQ(c, "EXTEND  =                    F");
    ck_assert_int_eq(fitscard_int(c, "NAXIS1", 891, NULL), 0);
    CARD_EQ(c, "NAXIS1  =                  891");
    ck_assert_int_eq(fitscard_int(c, "BITPIX", -32, "IEEE single precision"), 0);
    CARD_EQ(c, "BITPIX  =                  -32 / IEEE single precision");
    ck_assert_int_eq(fitscard_int(c, "NPIX", 9223372036854775807LL, NULL), 0);
    CARD_EQ(c, "NPIX    =  9223372036854775807");
    ck_assert_int_eq(fitscard_int(c, "MJD-OBS", 0, NULL), 0);
    CARD_EQ(c, "MJD-OBS =                    0");
}
END_TEST

START_TEST(test_real)
{
    char c[80];
    ck_assert_int_eq(fitscard_real(c, "CRPIX1", 446.0, 15, NULL), 0);
    CARD_EQ(c, "CRPIX1  =                446.0");
    ck_assert_int_eq(fitscard_real(c, "CRVAL2", -9959.44378305, 15, NULL), 0);
    CARD_EQ(c, "CRVAL2  =       -9959.44378305");
    ck_assert_int_eq(fitscard_real(c, "CDELT1", 0.1, FITSCARD_EXACT, "[deg]"), 0);
    CARD_EQ(c, "CDELT1  =                  0.1 / [deg]");
    ck_assert_int_eq(fitscard_real(c, "CDELT1", 0.1, 17, NULL), 0);
    CARD_EQ(c, "CDELT1  =  0.10000000000000001");
    /* The fewest digits that read back: 1/3 needs 16, 0.1 + 0.2 needs 17. */
    ck_assert_int_eq(fitscard_real(c, "A", 1.0 / 3.0, FITSCARD_EXACT, NULL), 0);
    CARD_EQ(c, "A       =   0.3333333333333333");
    ck_assert_int_eq(fitscard_real(c, "B", 0.1 + 0.2, FITSCARD_EXACT, NULL), 0);
    CARD_EQ(c, "B       =  0.30000000000000004");
    ck_assert_int_eq(fitscard_real(c, "EQUINOX", 2000.0, FITSCARD_EXACT, NULL), 0);
    CARD_EQ(c, "EQUINOX =               2000.0");
    ck_assert_int_eq(fitscard_real(c, "CD1_1", 1e-20, 14, NULL), 0);
    CARD_EQ(c, "CD1_1   =                1E-20");
    ck_assert_int_eq(fitscard_real(c, "PC1_2", -0.0, FITSCARD_EXACT, NULL), 0);
    CARD_EQ(c, "PC1_2   =                 -0.0");
    /* Wider than the 20 columns: the value runs on, the comment follows. */
    ck_assert_int_eq(fitscard_real(c, "CD1_1", -0.000171661376953125, 17, "HPX"), 0);
    CARD_EQ(c, "CD1_1   = -0.000171661376953125 / HPX");
    /* No FITS form for NaN or infinity; digits 0..17 only. */
    memset(c, 'x', sizeof c);
    ck_assert_int_eq(fitscard_real(c, "CRVAL1", NAN, 15, NULL), TESS_EINVAL);
    ck_assert_int_eq(fitscard_real(c, "CRVAL1", INFINITY, FITSCARD_EXACT, NULL), TESS_EINVAL);
    ck_assert_int_eq(fitscard_real(c, "CRVAL1", 1.0, 18, NULL), TESS_EINVAL);
    ck_assert_int_eq(fitscard_real(c, "CRVAL1", 1.0, -1, NULL), TESS_EINVAL);
    for (int i = 0; i < 80; i++)
        ck_assert(c[i] == 'x');
}
END_TEST

START_TEST(test_string)
{
    char c[80];
    ck_assert_int_eq(fitscard_string(c, "CTYPE1", "RA---TAN", 0, NULL), 0);
    CARD_EQ(c, "CTYPE1  = 'RA---TAN'");
    ck_assert_int_eq(fitscard_string(c, "RADESYS", "FK5", 0, NULL), 0);
    CARD_EQ(c, "RADESYS = 'FK5'");
    /* Padded to 8 characters, as FITS before 3.0 required and cfitsio writes. */
    ck_assert_int_eq(fitscard_string(c, "RADESYS", "FK5", 8, NULL), 0);
    CARD_EQ(c, "RADESYS = 'FK5     '");
    ck_assert_int_eq(fitscard_string(c, "ORDERING", "NUNIQ", 8, "NUNIQ coding method"), 0);
    CARD_EQ(c, "ORDERING= 'NUNIQ   '           / NUNIQ coding method");
    ck_assert_int_eq(fitscard_string(c, "CTYPE1", "RA---TAN", 8, NULL), 0);
    CARD_EQ(c, "CTYPE1  = 'RA---TAN'");
    ck_assert_int_eq(fitscard_string(c, "BUNIT", "", 8, NULL), 0);
    CARD_EQ(c, "BUNIT   = '        '");
    ck_assert_int_eq(fitscard_string(c, "SLICE", "xz", 0, "plane cut: axis 1 x, axis 2 z"), 0);
    CARD_EQ(c, "SLICE   = 'xz'                 / plane cut: axis 1 x, axis 2 z");
    ck_assert_int_eq(fitscard_string(c, "EXTNAME", "FOOTPRINT", 8, "weight"), 0);
    CARD_EQ(c, "EXTNAME = 'FOOTPRINT'          / weight");
    ck_assert_int_eq(fitscard_string(c, "OBJECT", "O'HARA", 0, NULL), 0);
    CARD_EQ(c, "OBJECT  = 'O''HARA'");
    ck_assert_int_eq(fitscard_string(c, "BUNIT", "", 0, "empty"), 0);
    CARD_EQ(c, "BUNIT   = ''                   / empty");
    /* XTENSION alone is padded to 8 characters (FITS 4.0, section 7). */
    ck_assert_int_eq(fitscard_string(c, "XTENSION", "IMAGE", 0, "image extension"), 0);
    CARD_EQ(c, "XTENSION= 'IMAGE   '           / image extension");
    ck_assert_int_eq(fitscard_string(c, "XTENSION", "BINTABLE", 0, NULL), 0);
    CARD_EQ(c, "XTENSION= 'BINTABLE'");
    /* Bytes outside 32..126 become '?'. */
    ck_assert_int_eq(fitscard_string(c, "ORIGIN", "a\tb\xc3\xa9", 0, NULL), 0);
    CARD_EQ(c, "ORIGIN  = 'a?b?" "?'");
}
END_TEST

/* A value too long for the card is cut so that the closing quote stands in column 80,
 * never between the two quotes of a pair; a comment gets what columns are left. */
START_TEST(test_string_cut)
{
    char c[80], v[101], want[81];
    memset(v, 'a', 100);
    v[100] = '\0';
    ck_assert_int_eq(fitscard_string(c, "PATH", v, 8, "dropped"), 0);
    snprintf(want, sizeof want, "PATH    = '%.68s'", v);
    CARD_EQ(c, want);
    ck_assert(c[79] == '\'');
    /* 67 letters and a quote: the doubled quote would need columns 79-80 and the closing
     * quote column 81, so the quote goes. */
    memset(v, 'a', 67);
    v[67] = '\'';
    v[68] = 'b';
    v[69] = '\0';
    ck_assert_int_eq(fitscard_string(c, "PATH", v, 0, NULL), 0);
    snprintf(want, sizeof want, "PATH    = '%.67s'", v);
    CARD_EQ(c, want);
    /* A long comment is cut at column 80. */
    char comm[101];
    memset(comm, 'c', 100);
    comm[100] = '\0';
    ck_assert_int_eq(fitscard_int(c, "N", 1, comm), 0);
    snprintf(want, sizeof want, "N       =                    1 / %.47s", comm);
    CARD_EQ(c, want);
}
END_TEST

START_TEST(test_commentary_and_text)
{
    char c[80];
    ck_assert_int_eq(fitscard_commentary(c, "COMMENT", "0-based crop origin"), 0);
    CARD_EQ(c, "COMMENT 0-based crop origin");
    ck_assert_int_eq(fitscard_commentary(c, "HISTORY", "tessera reproject, method bilinear"), 0);
    CARD_EQ(c, "HISTORY tessera reproject, method bilinear");
    ck_assert_int_eq(fitscard_commentary(c, "", "a blank keyword"), 0);
    CARD_EQ(c, "        a blank keyword");
    char t[101], want[81];
    memset(t, 't', 100);
    t[100] = '\0';
    ck_assert_int_eq(fitscard_commentary(c, "COMMENT", t), 0);
    snprintf(want, sizeof want, "COMMENT %.72s", t);
    CARD_EQ(c, want);
    fitscard_from_text(c, "END", 3);
    CARD_EQ(c, "END");
    fitscard_from_text(c, t, 100);
    ck_assert_int_eq(memcmp(c, t, 80), 0);
}
END_TEST

/* Keywords: 1 to 8 characters of A-Z, 0-9, '-', '_'; anything else is refused and the
 * card left as it was. */
START_TEST(test_bad_keywords)
{
    static const char *const bad[] = { "naxis", "CRPIX1A2X", "", "A B", "DATE.OBS", "É" };
    char c[80];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(c, 'x', sizeof c);
        ck_assert_int_eq(fitscard_int(c, bad[i], 1, NULL), TESS_EINVAL);
        ck_assert_int_eq(fitscard_real(c, bad[i], 1.0, 15, NULL), TESS_EINVAL);
        ck_assert_int_eq(fitscard_string(c, bad[i], "v", 0, NULL), TESS_EINVAL);
        ck_assert_int_eq(fitscard_logical(c, bad[i], 1, NULL), TESS_EINVAL);
        if (bad[i][0])
            ck_assert_int_eq(fitscard_commentary(c, bad[i], "t"), TESS_EINVAL);
        for (int k = 0; k < 80; k++)
            ck_assert(c[k] == 'x');
    }
    ck_assert_int_eq(fitscard_string(c, "OBJECT", NULL, 0, NULL), TESS_EINVAL);
    ck_assert_int_eq(fitscard_int(c, "DATE-OBS", 1, NULL), 0);
    ck_assert_int_eq(fitscard_int(c, "A_B-9", 1, NULL), 0);
}
END_TEST

/* ---- lists and whole headers ------------------------------------------------------------ */

START_TEST(test_list)
{
    fitscard_list l;
    fitscard_list_init(&l, 4);
    ck_assert_int_eq(fitscard_list_int(&l, "NAXIS", 2, NULL), 0);
    ck_assert_int_eq(fitscard_list_string(&l, "CTYPE1", "RA---TAN", 0, NULL), 0);
    ck_assert_int_eq(fitscard_list_text(&l, "COMMENT hello"), 0);
    ck_assert_int_eq(fitscard_list_real(&l, "CRVAL1", 1.5, 15, NULL), 0);
    ck_assert_int_eq(l.n, 4);
    ck_assert_uint_eq(strlen(l.cards), 320);
    CARD_EQ(l.cards + 160, "COMMENT hello");
    /* A fifth card is over the cap: refused, and so is everything after. */
    ck_assert_int_eq(fitscard_list_logical(&l, "EXTEND", 1, NULL), TESS_ERANGE);
    ck_assert_int_eq(fitscard_list_commentary(&l, "COMMENT", "x"), TESS_ERANGE);
    ck_assert_int_eq(l.n, 4);
    char *cards = (char *)1;
    int n = 7;
    ck_assert_int_eq(fitscard_list_take(&l, &cards, &n), TESS_ERANGE);
    ck_assert_ptr_null(cards);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(l.cards);

    /* A refused card sticks as TESS_EINVAL; the cards before it stay counted. */
    fitscard_list_init(&l, 100);
    fitscard_list_int(&l, "A", 1, NULL);
    ck_assert_int_eq(fitscard_list_real(&l, "B", NAN, 15, NULL), TESS_EINVAL);
    ck_assert_int_eq(fitscard_list_int(&l, "C", 3, NULL), TESS_EINVAL);
    ck_assert_int_eq(l.n, 1);
    fitscard_list_release(&l);
    ck_assert_int_eq(l.rc, 0);

    /* Ready cards, growth past the first allocation, and the handover. */
    fitscard_list_init(&l, 1000);
    char card[80];
    fitscard_int(card, "NAXIS1", 7, NULL);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(fitscard_list_cards(&l, card, 1), 0);
    ck_assert_int_eq(fitscard_list_take(&l, &cards, &n), 0);
    ck_assert_int_eq(n, 300);
    ck_assert_uint_eq(strlen(cards), 300 * 80);
    CARD_EQ(cards + 299 * 80, "NAXIS1  =                    7");
    ck_assert_int_eq(l.n, 0);
    ck_assert_ptr_null(l.cards);
    free(cards);
    /* An empty list hands over an empty string. */
    ck_assert_int_eq(fitscard_list_take(&l, &cards, &n), 0);
    ck_assert_str_eq(cards, "");
    ck_assert_int_eq(n, 0);
    free(cards);
}
END_TEST

START_TEST(test_header_blocks)
{
    ck_assert_uint_eq(fitscard_header_size(0), 2880);
    ck_assert_uint_eq(fitscard_header_size(35), 2880);
    ck_assert_uint_eq(fitscard_header_size(36), 5760);
    ck_assert_uint_eq(fitscard_header_size(71), 5760);
    ck_assert_uint_eq(fitscard_header_size(72), 8640);
    char cards[2 * 80 + 1];
    fitscard_logical(cards, "SIMPLE", 1, NULL);
    fitscard_int(cards + 80, "NAXIS", 0, NULL);
    cards[160] = '\0';
    char h[2880];
    memset(h, 'x', sizeof h);
    fitscard_header_write(h, cards, 2);
    ck_assert_int_eq(memcmp(h, cards, 160), 0);
    CARD_EQ(h + 160, "END");
    for (size_t i = 240; i < sizeof h; i++)
        ck_assert(h[i] == ' ');
}
END_TEST

/* ---- lookups and the structural rule ----------------------------------------------------- */

START_TEST(test_get)
{
    const char *lines[] = {
        "OBJECT  = 'O''HARA  '           / a quote inside",
        "EXPTIME =                 30.5 / seconds",
        "HISTORY   made by hand  ",
        "UNDEF   =",
        "NAXIS1  = 100",
        "NAXIS1  = 200",
        "LONGKEY1= 'x'",
        NULL,
    };
    int n = 0;
    char *cards = tt_make_cards(lines, &n);
    char v[80];
    ck_assert_int_eq(fitscard_get(cards, n, "OBJECT", v, sizeof v), 1);
    ck_assert_str_eq(v, "O'HARA");
    ck_assert_int_eq(fitscard_get(cards, n, "EXPTIME", v, sizeof v), 1);
    ck_assert_str_eq(v, "30.5");
    ck_assert_int_eq(fitscard_get(cards, n, "HISTORY", v, sizeof v), 1);
    ck_assert_str_eq(v, "made by hand");
    ck_assert_int_eq(fitscard_get(cards, n, "UNDEF", v, sizeof v), 1);
    ck_assert_str_eq(v, "");
    ck_assert_int_eq(fitscard_get(cards, n, "NAXIS1", v, sizeof v), 1);   /* the first */
    ck_assert_str_eq(v, "100");
    ck_assert_int_eq(fitscard_get(cards, n, "LONGKEY1", v, sizeof v), 1);
    ck_assert_str_eq(v, "x");
    char small[4];
    ck_assert_int_eq(fitscard_get(cards, n, "OBJECT", small, sizeof small), 1);
    ck_assert_str_eq(small, "O'H");
    ck_assert_int_eq(fitscard_get(cards, n, "OBJEC", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(cards, n, "NAXIS", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(cards, n, "LONGKEY12", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(cards, n, "", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(NULL, 0, "OBJECT", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_key_is(cards, "OBJECT"), 1);
    ck_assert_int_eq(fitscard_key_is(cards, "OBJ"), 0);
    ck_assert_int_eq(fitscard_key_is(cards + 6 * 80, "LONGKEY1"), 1);
    free(cards);
}
END_TEST

START_TEST(test_value)
{
    const char *lines[] = {
        "DSUN_OBS=   1.47724815128D+11 / metres, a D exponent",
        "HGLN_OBS= 'west'",
        "HGLT_OBS   -6.8",
        "HGLT_OBS= -6.820544",
        "CRLN_OBS=                  NaN",
        "DATE-OBS= '2011-02-15T00:00:00.34  ' / trailing blanks go",
        "RSUN_REF=  696000000 junk",
        "OBSERVER= 'O''Neil'",
        NULL,
    };
    int n = 0;
    char *cards = tt_make_cards(lines, &n);
    double v = 42.0;
    char s[32];
    ck_assert_int_eq(fitscard_value_real(cards, n, "DSUN_OBS", &v), 1);
    ck_assert(v == 147724815128.0);
    /* A string is not a number; a card without "= " is passed over. */
    ck_assert_int_eq(fitscard_value_real(cards, n, "HGLN_OBS", &v), 0);
    ck_assert(v == 147724815128.0);
    ck_assert_int_eq(fitscard_value_real(cards, n, "HGLT_OBS", &v), 1);
    ck_assert(v == -6.820544);
    ck_assert_int_eq(fitscard_value_real(cards, n, "CRLN_OBS", &v), 0);
    ck_assert_int_eq(fitscard_value_real(cards, n, "RSUN_REF", &v), 0);
    ck_assert_int_eq(fitscard_value_real(cards, n, "HEEQ_X", &v), 0);
    ck_assert_int_eq(fitscard_value_string(cards, n, "DATE-OBS", s, sizeof s), 1);
    ck_assert_str_eq(s, "2011-02-15T00:00:00.34");
    ck_assert_int_eq(fitscard_value_string(cards, n, "OBSERVER", s, sizeof s), 1);
    ck_assert_str_eq(s, "O'Neil");
    ck_assert_int_eq(fitscard_value_string(cards, n, "DSUN_OBS", s, sizeof s), 0);
    ck_assert_int_eq(fitscard_value_string(NULL, 0, "DATE-OBS", s, sizeof s), 0);
    free(cards);
}
END_TEST

START_TEST(test_value_forms)
{
    char card[81];
    fitscard_from_text(card, "OBJECT  = 'open ended", 21);
    ck_assert_int_eq(fitscard_unterminated_string(card), 1);
    fitscard_from_text(card, "OBJECT  = 'it''s'", 17);
    ck_assert_int_eq(fitscard_unterminated_string(card), 0);
    fitscard_from_text(card, "OBJECT  = 'it''", 15);
    ck_assert_int_eq(fitscard_unterminated_string(card), 1);
    fitscard_from_text(card, "OBJECT  = 3", 11);
    ck_assert_int_eq(fitscard_unterminated_string(card), 0);
    ck_assert_int_eq(fitscard_blank_value(card), 0);
    fitscard_from_text(card, "UNDEF   =", 9);
    ck_assert_int_eq(fitscard_blank_value(card), 1);
    static const char *const good[] = { "1", "-1.", "+.5", "1.5E-3", "2D+11", "0.0e0" };
    static const char *const bad[] = { "", ".", "+", "1e", "inf", "nan", "0x10", "1 ", "1.5E+" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(fitscard_is_number_text(good[i]) == 1, "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(fitscard_is_number_text(bad[i]) == 0, "%s", bad[i]);
}
END_TEST

START_TEST(test_structural)
{
    static const char *const yes[] = {
        "SIMPLE  =                    T", "XTENSION= 'IMAGE   '", "END", "BITPIX  = -32",
        "NAXIS   = 2", "NAXIS1  = 10", "NAXIS999= 1", "EXTEND  = T", "PCOUNT  = 0",
        "GCOUNT  = 1", "BSCALE  = 1.0", "BZERO   = 32768", "BLANK   = -1",
        "CHECKSUM= 'abc'", "DATASUM = '1'", "EXTNAME = 'SCI'", "DATAMIN = 3759",
        "DATAMAX = 22918",
    };
    static const char *const no[] = {
        "BUNIT   = 'Jy'", "WCSAXES = 2", "NAXISX  = 1", "NAXIS1A = 1", "SIMPLEX = T",
        "ENDX", "EXTNAMES= 'x'", "COMMENT   FITS (Flexible Image Transport System)",
        "HISTORY x", "", "CTYPE1  = 'RA---TAN'", "CRPIX1  = 1", "DATE-OBS= '2000'",
    };
    char c[80];
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        fitscard_from_text(c, yes[i], strlen(yes[i]));
        ck_assert_msg(fitscard_is_structural(c), "%s is structural", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        fitscard_from_text(c, no[i], strlen(no[i]));
        ck_assert_msg(!fitscard_is_structural(c), "%s is not structural", no[i]);
    }
}
END_TEST

/* ---- header text --------------------------------------------------------------------------- */

static int parse(const char *text, size_t len, int max, char **cards, int *n, char *err)
{
    return fitscard_parse(text, len, max, cards, n, err, 256);
}

START_TEST(test_parse_text)
{
    const char *text = "NAXIS   =                    2\r\n"
                       "NAXIS1  =                  400\n"
                       "\n"
                       "        \n"
                       "CTYPE1  = 'RA---TAN'\n"
                       "END     \n"
                       "IGNORED = 1\n";
    char *cards, err[256];
    int n;
    ck_assert_int_eq(parse(text, strlen(text), 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 3);   /* the empty and the blank line dropped, END stops */
    ck_assert_uint_eq(strlen(cards), 240);
    CARD_EQ(cards, "NAXIS   =                    2");
    CARD_EQ(cards + 80, "NAXIS1  =                  400");
    CARD_EQ(cards + 160, "CTYPE1  = 'RA---TAN'");
    free(cards);
    /* The last line may lack its newline; a D exponent is a number. */
    const char *last = "CDELT1  = -1.5D-3\nCRVAL1  = 10";
    ck_assert_int_eq(parse(last, strlen(last), 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 2);
    CARD_EQ(cards + 80, "CRVAL1  = 10");
    free(cards);
    /* A text header that starts with SIMPLE, 80 columns a line (astropy's
     * Header.totextfile): text, not a FITS file, however long. */
    char simple[40 * 81 + 1];
    size_t sl = 0;
    for (int k = 0; k < 40; k++)
        sl += (size_t)snprintf(simple + sl, sizeof simple - sl, "%-80s\n",
                               k == 0 ? "SIMPLE  =                    T"
                               : k == 39 ? "END" : "COMMENT   filler");
    ck_assert(!fitscard_text_is_fits(simple, sl));
    ck_assert_int_eq(parse(simple, sl, 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 39);
    free(cards);
}
END_TEST

/* Raw cards without newlines, and a whole FITS file whose data hold newlines and bytes
 * that are not text: the header is read to END, the data are not. */
START_TEST(test_parse_raw_and_fits)
{
    char raw[3 * 80 + 1];
    memset(raw, ' ', 240);
    memcpy(raw, "NAXIS   =                    2", 30);
    /* card 2 blank: dropped */
    memcpy(raw + 160, "END", 3);
    raw[240] = '\0';
    char *cards, err[256];
    int n;
    ck_assert_int_eq(parse(raw, 240, 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 1);
    free(cards);

    size_t len = 2 * 2880;
    char *file = malloc(len);
    memset(file, ' ', 2880);
    fitscard_logical(file, "SIMPLE", 1, NULL);
    fitscard_int(file + 80, "BITPIX", 8, NULL);
    fitscard_int(file + 160, "NAXIS", 1, NULL);
    fitscard_int(file + 240, "NAXIS1", 2880, NULL);
    fitscard_from_text(file + 320, "END", 3);
    for (size_t i = 2880; i < len; i++)
        file[i] = (char)(i % 256);   /* '\n', NUL, 0xff ... */
    ck_assert(fitscard_text_is_fits(file, len));
    ck_assert_int_eq(parse(file, len, 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 4);
    CARD_EQ(cards + 240, "NAXIS1  =                 2880");
    free(cards);
    /* A FITS file cut before its END (head -c 4000 of a file): its END is missing, which
     * is told rather than the WCS the missing cards would have given. */
    char *cut = malloc(len);
    memcpy(cut, file, len);
    memset(cut + 320, ' ', 80);   /* END blanked */
    ck_assert_int_eq(parse(cut, 2880, 100, &cards, &n, err), TESS_EINVAL);
    ck_assert_str_eq(err, "the FITS header has no END card in its 2880 bytes (4 cards): the "
                          "file looks truncated");
    ck_assert_ptr_null(cards);
    /* Cut inside the first block: shorter than a block, still a FITS header (SIMPLE or
     * XTENSION first), still without END; other raw cards need no END. */
    ck_assert_int_eq(parse(cut, 320, 100, &cards, &n, err), TESS_EINVAL);
    ck_assert_str_eq(err, "the FITS header has no END card in its 320 bytes (4 cards): the "
                          "file looks truncated");
    memcpy(cut, "XTENSION= 'IMAGE   '", 20);
    ck_assert_int_eq(parse(cut, 250, 100, &cards, &n, err), TESS_EINVAL);
    ck_assert_str_eq(err, "the FITS header ends in the middle of a card (250 bytes, not a "
                          "whole number of 80-character cards) before any END card: the "
                          "file looks truncated");
    ck_assert_int_eq(parse(cut + 80, 240, 100, &cards, &n, err), 0);   /* BITPIX first */
    ck_assert_int_eq(n, 3);
    free(cards);
    free(cut);
    /* A file cut in its data, or in the blanks after END (not a whole number of cards):
     * its header is whole and is read to END, the rest is not read. */
    for (size_t cut_at = 0; cut_at < 3; cut_at++) {
        const size_t lens[3] = {len - 7, 2880 + 1001, 400 + 13};
        ck_assert_int_eq(parse(file, lens[cut_at], 100, &cards, &n, err), 0);
        ck_assert_int_eq(n, 4);
        CARD_EQ(cards + 240, "NAXIS1  =                 2880");
        free(cards);
    }
    /* Raw cards that are not a FITS header (no SIMPLE first) and not a whole number of
     * cards are refused. */
    ck_assert_int_eq(parse(file + 80, 2880 - 80 - 7, 100, &cards, &n, err), TESS_EINVAL);
    ck_assert_str_eq(err, "header must be text with one 80-character card a line, or a FITS "
                          "header of whole 80-character cards (got 2793 bytes, without "
                          "newlines)");
    ck_assert_ptr_null(cards);
    free(file);
}
END_TEST

/* The forms of header text astropy writes (Header.tostring, totextfile): a last line
 * padded with blanks to a 2880-byte block, trailing blanks, CRLF, and tostring()'s cards
 * run together on one line ended by a newline. */
START_TEST(test_parse_astropy_forms)
{
    char *cards = NULL, err[256];
    int n = 0;
    static const char *const c3[3] = {
        "NAXIS   =                    2", "NAXIS1  =                   10",
        "CTYPE1  = 'RA---TAN'"};
    char text[3 * 2880 + 16];
    for (int form = 0; form < 5; form++) {
        size_t len = 0;
        for (int i = 0; i < 3; i++) {
            if (form == 4) {   /* cards run together, then a newline */
                len += (size_t)snprintf(text + len, sizeof text - len, "%-80s", c3[i]);
                continue;
            }
            const char *eol = form == 2 ? "\r\n" : "\n";
            if (form == 1)   /* trailing blanks past column 80 */
                len += (size_t)snprintf(text + len, sizeof text - len, "%-95s%s", c3[i], eol);
            else
                len += (size_t)snprintf(text + len, sizeof text - len, "%-80s%s", c3[i], eol);
        }
        /* END padded to the block (forms 0, 4), or the last card padded (form 3) */
        if (form == 3)
            text[--len] = '\0';
        else
            len += (size_t)snprintf(text + len, sizeof text - len, "END");
        if (form == 0 || form == 3 || form == 4)
            while (len % 2880 != 0)
                text[len++] = ' ';
        if (form == 4)
            text[len++] = '\n';
        ck_assert_msg(parse(text, len, 100, &cards, &n, err) == 0, "form %d: %s", form, err);
        ck_assert_int_eq(n, 3);
        CARD_EQ(cards, c3[0]);
        CARD_EQ(cards + 80, c3[1]);
        CARD_EQ(cards + 160, c3[2]);
        free(cards);
        cards = NULL;
    }
}
END_TEST

START_TEST(test_parse_refusals)
{
    char *cards = (char *)1, err[256];
    int n = 5;
    static const struct { const char *text; const char *why; } bad[] = {
        { "CTYPE1  = 'RA---TAN'", "without newlines" },          /* 20 bytes, no newline */
        { "", "no cards" },
        { "\n\n  \n", "no cards" },
        { "END\nNAXIS = 1\n", "no cards" },
        { "NAXIS   = 2\x01\n", "non-printable" },
        { "NAXIS   = 2\n\tNAXIS1 = 3\n", "line 2 has a non-printable" },
        { "OBJECT  = 'x'\r\r\n", "non-printable" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(parse(bad[i].text, strlen(bad[i].text), 100, &cards, &n, err) ==
                      TESS_EINVAL, "case %zu accepted", i);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                      bad[i].why);
        ck_assert_ptr_null(cards);
        ck_assert_int_eq(n, 0);
    }
    /* Values are not looked at: a WCS card without a finite number is the WCS validity
     * rule's to refuse (skywcs_parse, tests/engine/test_wcsrule.c), for targets as for
     * datasets. */
    const char *nan = "CRVAL1  = NaN\nCRPIX1  =\n";
    ck_assert_int_eq(parse(nan, strlen(nan), 100, &cards, &n, err), 0);
    ck_assert_int_eq(n, 2);
    free(cards);
    /* A line of 81 characters, the last not a blank; raw cards of 79. */
    char wide[90];
    snprintf(wide, sizeof wide, "%-80sX\n", "COMMENT");
    ck_assert_int_eq(parse(wide, strlen(wide), 100, &cards, &n, err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "line 1 is 81 characters long"));
    char raw79[79 * 3];
    memset(raw79, 'X', sizeof raw79);
    ck_assert_int_eq(parse(raw79, sizeof raw79, 100, &cards, &n, err), TESS_EINVAL);
    /* More cards than allowed. */
    const char *many = "A = 1\nB = 2\nC = 3\n";
    ck_assert_int_eq(parse(many, strlen(many), 2, &cards, &n, err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "more than 2 cards"));
    ck_assert_int_eq(parse(many, strlen(many), 3, &cards, &n, err), 0);
    free(cards);
    /* A non-numeric value is fine on a keyword that is not a numeric WCS one. */
    const char *other = "CTYPE1  = NaN\nCRVAL1A = 1.5\nNAXIS   = 2\n";
    ck_assert_int_eq(parse(other, strlen(other), 10, &cards, &n, err), 0);
    ck_assert_int_eq(n, 3);
    free(cards);
}
END_TEST

/* ---- around the cards: fitswrite and fitsimg_read_cards ------------------------------------- */

START_TEST(test_encode)
{
    const double v[3] = { 0.0, 255.0, 65535.0 };
    unsigned char b[24];
    fitswrite_encode(8, 0.0, v, b, 2);
    ck_assert(b[0] == 0 && b[1] == 255);
    fitswrite_encode(16, 32768.0, v, b, 3);   /* unsigned 16-bit: stored = v - 32768 */
    static const unsigned char u16[6] = { 0x80, 0x00, 0x80, 0xff, 0x7f, 0xff };
    ck_assert_int_eq(memcmp(b, u16, 6), 0);
    const double neg[2] = { -2.0, 2.4999 };
    fitswrite_encode(16, 0.0, neg, b, 2);
    static const unsigned char i16[4] = { 0xff, 0xfe, 0x00, 0x02 };
    ck_assert_int_eq(memcmp(b, i16, 4), 0);
    fitswrite_encode(32, 0.0, neg, b, 1);
    static const unsigned char i32[4] = { 0xff, 0xff, 0xff, 0xfe };
    ck_assert_int_eq(memcmp(b, i32, 4), 0);
    const double one = 1.0;
    fitswrite_encode(-32, 0.0, &one, b, 1);
    static const unsigned char f32[4] = { 0x3f, 0x80, 0x00, 0x00 };
    ck_assert_int_eq(memcmp(b, f32, 4), 0);
    fitswrite_encode(-64, 0.0, &one, b, 1);
    static const unsigned char f64[8] = { 0x3f, 0xf0, 0, 0, 0, 0, 0, 0 };
    ck_assert_int_eq(memcmp(b, f64, 8), 0);
}
END_TEST

/* A file made by fitswrite_file: the structural cards passed in are left out, the data
 * unit is where fitsimg_data_offset says, and fitsimg_read_cards reads its header back;
 * a text file of cards is parsed instead. */
START_TEST(test_file_round_trip)
{
    char dir[256], path[512], text[512];
    tt_tmpdir_make(dir, sizeof dir, "fitscard");
    snprintf(path, sizeof path, "%s/u16.fits", dir);
    snprintf(text, sizeof text, "%s/target.hdr", dir);
    fitscard_list l;
    fitscard_list_init(&l, 10);
    fitscard_list_int(&l, "NAXIS1", 999, NULL);           /* structural: left out */
    fitscard_list_string(&l, "EXTNAME", "SCI", 0, NULL);     /* structural: left out */
    fitscard_list_string(&l, "CTYPE3", "FREQ", 0, NULL);
    fitscard_list_commentary(&l, "COMMENT", "kept");
    ck_assert_int_eq(l.rc, 0);
    fitswrite_image im = { .bitpix = 16, .naxis = 3, .naxes = { 5, 4, 3 }, .scaled = 1,
                           .bscale = 1.0, .bzero = 32768.0, .cards = l.cards, .ncards = l.n };
    long long ds = -1, off = -1;
    char err[256] = "";
    ck_assert_msg(fitswrite_file(path, &im, &ds, err, sizeof err) == 0, "%s", err);
    fitscard_list_release(&l);
    ck_assert_int_eq(ds, 2880);
    ck_assert_int_eq(fitsimg_data_offset(path, 0, &off, err, sizeof err), 0);
    ck_assert_int_eq(off, ds);
    fitsimg_info info;
    ck_assert_msg(fitsimg_read_info(path, 0, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.bitpix, 16);
    ck_assert_double_eq(info.bzero, 32768.0);
    ck_assert_int_eq(info.naxes[2], 3);
    ck_assert_int_eq(info.file_size, 2 * 2880);
    char v[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS1", v, sizeof v), 1);
    ck_assert_str_eq(v, "5");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "EXTNAME", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "CTYPE3", v, sizeof v), 1);
    ck_assert_str_eq(v, "FREQ");
    fitsimg_info_release(&info);

    char *cards = NULL;
    int n = 0, is_fits = -1;
    ck_assert_msg(fitsimg_read_cards(path, 0, 100, &cards, &n, &is_fits, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(is_fits, 1);
    ck_assert_int_eq(fitscard_get(cards, n, "BZERO", v, sizeof v), 1);
    ck_assert_double_eq(atof(v), 32768.0);
    free(cards);
    ck_assert_int_eq(fitsimg_read_cards(path, 1, 100, &cards, &n, NULL, err, sizeof err),
                     TESS_EINVAL);                           /* no HDU 1 */
    ck_assert_ptr_null(cards);

    FILE *f = fopen(text, "w");
    ck_assert_ptr_nonnull(f);
    fputs("SIMPLE  =                    T\nNAXIS   = 2\nNAXIS1  = 10\nEND\n", f);
    fclose(f);
    ck_assert_msg(fitsimg_read_cards(text, 5, 100, &cards, &n, &is_fits, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(is_fits, 0);
    free(cards);
    ck_assert_int_eq(fitsimg_read_cards(text, 0, 2, &cards, &n, NULL, err, sizeof err),
                     TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "target.hdr"));
    snprintf(path, sizeof path, "%s/none.hdr", dir);
    ck_assert_int_eq(fitsimg_read_cards(path, 0, 2, &cards, &n, NULL, err, sizeof err), TESS_EIO);
    const char *names[] = { "u16.fits", "target.hdr" };
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 2), 0);
}
END_TEST

/* A large image made by fitswrite_file: the data unit is a hole (nothing written, so a
 * 1.6 GB cube costs no writes; cfitsio alone fills it with zeros block by block), its
 * NAXISn are the real lengths, and its values read back as zeros. */
START_TEST(test_file_large_data_unit_unwritten)
{
    char dir[256], path[512];
    tt_tmpdir_make(dir, sizeof dir, "fitscard");
    snprintf(path, sizeof path, "%s/cube.fits", dir);
    fitswrite_image im = { .bitpix = -32, .naxis = 3, .naxes = { 2000, 2000, 100 } };
    long long ds = -1;
    char err[256] = "";
    ck_assert_msg(fitswrite_file(path, &im, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds, 2880);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    long long want = 2880 + (2000LL * 2000 * 100 * 4 + 2879) / 2880 * 2880;
    ck_assert_int_eq((long long)st.st_size, want);
    ck_assert_msg((long long)st.st_blocks * 512 < (1LL << 20),
                  "%lld bytes allocated for an unwritten data unit",
                  (long long)st.st_blocks * 512);
    fitsimg_info info;
    ck_assert_msg(fitsimg_read_info(path, 0, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.bitpix, -32);
    ck_assert_int_eq(info.naxes[0], 2000);
    ck_assert_int_eq(info.naxes[1], 2000);
    ck_assert_int_eq(info.naxes[2], 100);
    char v[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS3", v, sizeof v), 1);
    ck_assert_str_eq(v, "100");
    fitsimg_info_release(&info);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char b[4] = {1, 1, 1, 1};
    ck_assert_int_eq(fseeko(f, (off_t)(want - 4), SEEK_SET), 0);
    ck_assert_int_eq(fread(b, 1, 4, f), 4);
    fclose(f);
    ck_assert_int_eq(b[0] | b[1] | b[2] | b[3], 0);
    /* a shape the reader's rule refuses is refused before any file is made */
    fitswrite_image bad = { .bitpix = -32, .naxis = 2, .naxes = { 0, 5 } };
    ck_assert_int_eq(fitswrite_file(path, &bad, &ds, err, sizeof err), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not an image shape"));
    const char *names[] = { "cube.fits" };
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 1), 0);
}
END_TEST

/* A FITS file in memory with a binary table after the image, read back by cfitsio's
 * own reader through fitsimg. */
START_TEST(test_memory_file_with_table)
{
    fitswrite *w = NULL;
    ck_assert_int_eq(fitswrite_new_mem(0, &w), 0);
    const double px[6] = { 1, 2, 3, 4, 5, NAN };
    char card[80];
    fitscard_commentary(card, "COMMENT", "FITS (Flexible Image Transport System) format is");
    fitswrite_image im = { .bitpix = -64, .naxis = 2, .naxes = { 3, 2 }, .cards = card,
                           .ncards = 1 };
    char err[256] = "";
    ck_assert_msg(fitswrite_image_hdu(w, &im, px, err, sizeof err) == 0, "%s", err);
    const long iv[2] = { 7, -8 };
    const double dv[2] = { 0.5, -0.25 };
    const fitswrite_column cols[] = { { "N", "1J", "", iv, NULL },
                                      { "X", "1D", "pixel", NULL, dv } };
    ck_assert_msg(fitswrite_table_hdu(w, "T", 2, 2, cols, NULL, 0, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(fitswrite_nhdu(w), 2);
    unsigned char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(fitswrite_take(w, &out, &len), 0);
    ck_assert_uint_eq(len % 2880, 0);
    ck_assert_uint_eq(len, 4 * 2880);   /* image header, data, table header, rows */
    /* cfitsio wrote its standard comment; the copy passed in was left out. */
    int seen = 0;
    for (size_t i = 0; i + 80 <= 2880; i += 80) {
        char c[81];
        memcpy(c, out + i, 80);
        c[80] = '\0';
        seen += strstr(c, "FITS (Flexible Image Transport System)") != NULL;
    }
    ck_assert_int_eq(seen, 1);
    long nx, ny;
    double *back = tt_fits_mem_read((const char *)out, len, 1, &nx, &ny);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(nx, 3);
    ck_assert_int_eq(ny, 2);
    ck_assert_double_eq(back[4], 5.0);
    ck_assert(isnan(back[5]));
    free(back);
    free(out);
    /* A bad shape is refused before cfitsio sees it. */
    ck_assert_int_eq(fitswrite_new_mem(0, &w), 0);
    fitswrite_image bad = { .bitpix = 12, .naxis = 2, .naxes = { 3, 2 } };
    ck_assert_int_eq(fitswrite_image_hdu(w, &bad, NULL, err, sizeof err), TESS_EINVAL);
    bad.bitpix = 8;
    bad.naxes[1] = 0;
    ck_assert_int_eq(fitswrite_image_hdu(w, &bad, NULL, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(fitswrite_close(w, err, sizeof err), 0);
    ck_assert_int_eq(fitswrite_close(NULL, err, sizeof err), 0);
}
END_TEST

/* fitswrite_image_length is the length fitswrite_take gives with the data written: for
 * headers of 0 to 60 cards (structural cards and cfitsio's standard comment among them,
 * which are not copied), two and three axes, 16-bit to 64-bit values, data units that
 * fill their last block exactly or not; a bad shape is refused. */
START_TEST(test_image_length)
{
    static const struct { int bitpix, naxis; long nx, ny, nz; int ncards; } c[] = {
        { -32, 2, 3, 2, 1, 0 }, { -64, 3, 17, 9, 5, 33 }, { 16, 2, 1440, 1, 1, 34 },
        { -32, 3, 60, 12, 4, 60 }, { 32, 2, 720, 1, 1, 5 } };
    char cards[60 * 80];
    for (int i = 0; i < 60; i++) {
        char key[16];
        snprintf(key, sizeof key, "KEY%d", i);
        if (i == 3)
            fitscard_int(cards + 80 * i, "NAXIS", 2, NULL);   /* structural: left out */
        else if (i == 4)
            fitscard_commentary(cards + 80 * i, "COMMENT", "FITS (Flexible Image Transport "
                                "System) format is");
        else
            fitscard_real(cards + 80 * i, key, i * 0.5, FITSCARD_EXACT, NULL);
    }
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        fitswrite_image im = { .bitpix = c[k].bitpix, .naxis = c[k].naxis,
                               .naxes = { c[k].nx, c[k].ny, c[k].nz }, .cards = cards,
                               .ncards = c[k].ncards };
        size_t n = (size_t)(c[k].nx * c[k].ny * c[k].nz), want = 0, got = 0;
        double *px = calloc(n, sizeof(double));
        ck_assert_ptr_nonnull(px);
        fitswrite *w = NULL;
        unsigned char *out = NULL;
        char err[256] = "";
        ck_assert_int_eq(fitswrite_new_mem(0, &w), 0);
        ck_assert_msg(fitswrite_image_hdu(w, &im, px, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(fitswrite_take(w, &out, &want), 0);
        free(out);
        free(px);
        ck_assert_msg(fitswrite_image_length(&im, &got, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(got == want, "case %zu: %zu bytes, the file %zu", k, got, want);
    }
    fitswrite_image bad = { .bitpix = -32, .naxis = 2, .naxes = { 0, 5 } };
    size_t len = 1;
    char err[256];
    ck_assert_int_eq(fitswrite_image_length(&bad, &len, err, sizeof err), TESS_EINVAL);
    ck_assert_uint_eq(len, 0);
    ck_assert_ptr_nonnull(strstr(err, "not an image shape"));
}
END_TEST

/* fitswrite_sum32_at: pieces of a data unit at any offset and of any length, summed
 * apart and combined in any order, give the DATASUM of the whole (each 32-bit word the
 * big-endian value of its four bytes, ones' complement addition with end-around carry,
 * FITS 4.0 appendix J), as computed here word by word. */
START_TEST(test_sum32_pieces)
{
    static const unsigned char five[5] = { 1, 2, 3, 4, 5 };
    ck_assert_uint_eq(fitswrite_sum32_at(five, 5, 0, 0), 0x06020304u);
    ck_assert_uint_eq(fitswrite_sum32_at(five, 1, 1, 0), 0x00010000u);
    ck_assert_uint_eq(fitswrite_sum32_at(five, 3, 2, 0), 0x03000102u);   /* 0102 + 03000000 */
    enum { N = 1003 };
    unsigned char b[N + 3] = { 0 };
    unsigned long long seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(seed >> 56);
    }
    b[17] = b[18] = b[19] = b[20] = 0xff;            /* words that carry */
    unsigned long long ref = 0;
    for (int i = 0; i < N; i += 4) {
        ref += (unsigned long long)b[i] << 24 | (unsigned long long)b[i + 1] << 16 |
               (unsigned long long)b[i + 2] << 8 | b[i + 3];
        while (ref >> 32)
            ref = (ref & 0xffffffffu) + (ref >> 32);
    }
    ck_assert_uint_eq(fitswrite_sum32(b, N + 1, 0), (uint32_t)ref);
    for (int cut = 1; cut < 40; cut++) {           /* pieces of 1 to 39 bytes, any offset */
        uint32_t whole = 0, back = 0;
        for (int at = 0; at < N; at += cut) {
            int len = N - at < cut ? N - at : cut;
            whole = fitswrite_sum_add(whole, fitswrite_sum32_at(b + at, (size_t)len,
                                                                (unsigned long long)at, 0));
        }
        for (int at = (N - 1) / cut * cut; at >= 0; at -= cut) {   /* in reverse order */
            int len = N - at < cut ? N - at : cut;
            back = fitswrite_sum32_at(b + at, (size_t)len, (unsigned long long)at, back);
        }
        ck_assert_uint_eq(whole, (uint32_t)ref);
        ck_assert_uint_eq(back, (uint32_t)ref);
    }
    ck_assert_uint_eq(fitswrite_sum32_at(b, 0, 3, 7), 7);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fitscard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_logical_and_integer);
    tcase_add_test(tc, test_real);
    tcase_add_test(tc, test_string);
    tcase_add_test(tc, test_string_cut);
    tcase_add_test(tc, test_commentary_and_text);
    tcase_add_test(tc, test_bad_keywords);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_header_blocks);
    tcase_add_test(tc, test_get);
    tcase_add_test(tc, test_value);
    tcase_add_test(tc, test_value_forms);
    tcase_add_test(tc, test_structural);
    tcase_add_test(tc, test_parse_text);
    tcase_add_test(tc, test_parse_raw_and_fits);
    tcase_add_test(tc, test_parse_astropy_forms);
    tcase_add_test(tc, test_parse_refusals);
    tcase_add_test(tc, test_encode);
    tcase_add_test(tc, test_file_round_trip);
    tcase_add_test(tc, test_file_large_data_unit_unwritten);
    tcase_add_test(tc, test_memory_file_with_table);
    tcase_add_test(tc, test_image_length);
    tcase_add_test(tc, test_sum32_pieces);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
