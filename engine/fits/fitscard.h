/* FITS header cards: formatting, lookup, the structural keywords, the structure of an image HDU and header text parsing (FITS 4.0, section 4). */
#ifndef TESSERA_ENGINE_FITS_FITSCARD_H
#define TESSERA_ENGINE_FITS_FITSCARD_H

#include <stddef.h>

/* A card (keyword record) is 80 characters; a header is a whole number of 2880-byte
 * blocks of 36 cards, the last card being END (FITS 4.0, sections 3.1 and 4.1).
 *
 * Headers in memory ("cards" below) are n cards of exactly 80 characters each,
 * concatenated with no separator and NUL-terminated after the last, without END: the
 * layout of fitsimg_info.header and of wcslib's wcspih input.  Functions that write
 * one card write exactly 80 characters and no NUL. */
#define FITSCARD_LEN 80
#define FITSCARD_BLOCK 2880

/* ---- formatting one card ------------------------------------------------------------ */

/* The value cards below follow the fixed format of FITS 4.0, section 4.2:
 *   keyword in columns 1-8, blank-padded: 1 to 8 characters of A-Z, 0-9, '-' and '_'
 *     (section 4.1.2.1); any other keyword is refused with TESS_EINVAL, card untouched;
 *   "= " in columns 9-10;
 *   logical: T or F in column 30 (4.2.2);
 *   integer: right-justified to column 30 (4.2.3);
 *   real: right-justified to column 30 (4.2.4), printed with `digits` significant digits
 *     (%.*G, 1..17), or with FITSCARD_EXACT the fewest of 15, 16, 17 that read back as
 *     the same double; ".0" is appended to an integral value so that it reads as a real
 *     (astropy and cfitsio type a value by its form); a NaN or infinity has no FITS form
 *     and is refused with TESS_EINVAL;
 *   string: the opening quote in column 11, a quote inside doubled (''), the closing
 *     quote in column 80 or before (4.2.1.1): a longer value is cut (never between the
 *     two quotes of a pair); the value field is blank-padded to column 30.  The string
 *     is blank-padded to `minlen` characters (at most 68): 8 gives the form that FITS
 *     before version 3.0 required and cfitsio and astropy still write ('ICRS    ',
 *     closing quote in column 20 or after), 0 the string as it is (FITS 4.0 section
 *     4.2.1.1 no longer requires the padding); XTENSION's value is padded to 8 whatever
 *     `minlen` (section 7: it must be).  Bytes outside 32..126 become '?';
 *   comment: " / " and the text after the value, cut at column 80 (left out when no
 *     column is left).
 * Each returns 0 or TESS_EINVAL. */
#define FITSCARD_EXACT 0
int fitscard_string(char *card, const char *key, const char *value, int minlen,
                    const char *comment);
int fitscard_int(char *card, const char *key, long long value, const char *comment);
int fitscard_real(char *card, const char *key, double value, int digits, const char *comment);
int fitscard_logical(char *card, const char *key, int value, const char *comment);

/* A commentary card (section 4.4.2.4): `key` ("COMMENT", "HISTORY" or "" for a blank
 * keyword) in columns 1-8, `text` from column 9, cut at column 80.  Returns 0 or
 * TESS_EINVAL (bad keyword). */
int fitscard_commentary(char *card, const char *key, const char *text);

/* The first `len` characters of `text` as a card, blank-padded or cut to 80 (text that
 * is already a card, or a card without its trailing blanks).  Cannot fail. */
void fitscard_from_text(char *card, const char *text, size_t len);

/* ---- a header under construction ----------------------------------------------------- */

/* Cards appended one by one into a buffer that grows up to `max` cards.  The first
 * failure is kept in `rc` and later additions do nothing, so that a run of additions is
 * checked once.  Not thread-safe. */
typedef struct fitscard_list {
    char *cards;      /* n cards, NUL-terminated; NULL until the first card */
    int n;
    int cap;          /* cards allocated */
    int max;          /* at most this many cards */
    int rc;           /* 0, or the first failure: TESS_ENOMEM, TESS_ERANGE (more than
                         max cards), TESS_EINVAL (a card refused) */
} fitscard_list;

/* An empty list of at most `max_cards` cards (>= 1).  Cannot fail. */
void fitscard_list_init(fitscard_list *l, int max_cards);

/* Appends one card made by the function of the same name above, or `n` ready cards.
 * Each returns l->rc afterwards: 0 while every addition so far succeeded. */
int fitscard_list_string(fitscard_list *l, const char *key, const char *value, int minlen,
                         const char *comment);
int fitscard_list_int(fitscard_list *l, const char *key, long long value, const char *comment);
int fitscard_list_real(fitscard_list *l, const char *key, double value, int digits,
                       const char *comment);
int fitscard_list_logical(fitscard_list *l, const char *key, int value, const char *comment);
int fitscard_list_commentary(fitscard_list *l, const char *key, const char *text);
int fitscard_list_text(fitscard_list *l, const char *text);
int fitscard_list_cards(fitscard_list *l, const char *cards, int n);

/* Hands the cards over: on l->rc == 0, *cards (malloc'd, NUL-terminated; an empty list
 * gives an empty string) and *n, and the list is empty again; otherwise *cards NULL, *n
 * 0, the list released.  Returns the former l->rc. */
int fitscard_list_take(fitscard_list *l, char **cards, int *n);

/* Frees the cards; the list is empty again (rc 0).  Cannot fail. */
void fitscard_list_release(fitscard_list *l);

/* The bytes of a header of `n` cards once END is added and the last block filled:
 * ceil((n + 1) / 36) * 2880.  Cannot fail. */
size_t fitscard_header_size(int n);

/* Writes the header of `n` cards to `dst` (fitscard_header_size(n) bytes): the cards,
 * END, blanks to the end of the block.  Cannot fail. */
void fitscard_header_write(char *dst, const char *cards, int n);

/* ---- reading cards ------------------------------------------------------------------ */

/* 1 when the keyword of `card` (columns 1-8) is `key` (8 characters or fewer, compared
 * exactly, blank-padded), else 0. */
int fitscard_key_is(const char *card, const char *key);

/* The value of `card` (a value card: "= " in columns 9-10) as an integer (iv non-NULL)
 * or else a real (*dv): 1 when columns 11-80 hold one - an optional sign and digits, for
 * a real a fraction and an E or D exponent (section 4.2.4), then only blanks or a
 * comment ('/') - else 0 (a string, a logical, a complex value, an overflow).  The
 * caller checks the keyword and the "= ".  Cannot fail otherwise. */
int fitscard_number(const char *card, long long *iv, double *dv);

/* Looks up the first card whose keyword is `key` (exact, 8 characters or fewer) among
 * the n cards.  Copies its value text into `val` (truncated to vallen, NUL-terminated):
 * a string without its quotes, '' read as one quote, trailing blanks trimmed; any other
 * value up to its comment ('/'), blanks trimmed; a card without "= " in columns 9-10
 * (COMMENT, HISTORY, ...) gives its text from column 9, blanks trimmed.  Returns 1 when
 * found, 0 when not (or for an empty or over-long `key`). */
int fitscard_get(const char *cards, int n, const char *key, char *val, size_t vallen);

/* The value of the first value card ("= " in columns 9-10) whose keyword is `key` among
 * the n cards (a card with the keyword but no "= " is passed over).
 * fitscard_value_real: 1 when that value is a finite number (as fitscard_number reads
 * it), stored in *v; else 0 (no such card, a string, a logical, NaN), *v untouched.
 * fitscard_value_string: 1 when that value is a quoted string, copied into `str` as
 * fitscard_get copies it; else 0.  Neither looks past the first value card of `key`. */
int fitscard_value_real(const char *cards, int n, const char *key, double *v);
int fitscard_value_string(const char *cards, int n, const char *key, char *str, size_t strn);

/* 1 when the value of `card` (80 characters, "= " in columns 9-10) opens a string that
 * the card does not close (section 4.2.1: '' inside a string is a quote), else 0. */
int fitscard_unterminated_string(const char *card);

/* 1 when the value field of `card` (columns 10-80) is blank: with a value indicator in
 * columns 9-10, FITS's undefined value (section 4.1.2.3). */
int fitscard_blank_value(const char *card);

/* 1 when the NUL-terminated `v` is a number in the form FITS gives (sections 4.2.3 and
 * 4.2.4) and wcslib's header lexer reads: [+-] digits [. [digits]] or [+-] . digits,
 * then an optional exponent [EeDd] [+-] digits; nothing before or after (strtod also
 * takes "inf", hexadecimal and similar forms that are not FITS numbers). */
int fitscard_is_number_text(const char *v);

/* 1 when `card` describes the HDU it stands in rather than the coordinates of its data,
 * so that a header copied into a new HDU must leave it out (the writer writes its own):
 *   SIMPLE, XTENSION, END            the HDU's framing (sections 4.4.1.1, 4.4.1.2, 4.4.1);
 *   BITPIX, NAXIS, NAXISn, EXTEND,   the layout of its data unit (4.4.1, 4.4.2.1, 7.1);
 *     PCOUNT, GCOUNT
 *   BSCALE, BZERO, BLANK             how its stored integers become physical values
 *                                    (4.4.2.5): a copy holds other values, or scales
 *                                    them its own way;
 *   CHECKSUM, DATASUM                checksums of its bytes (FITS Checksum convention),
 *                                    wrong for any other HDU;
 *   EXTNAME                          its name (4.4.2.6): a copy is another HDU;
 *   DATAMIN, DATAMAX                 the range of its values (4.4.2.5), which a cutout,
 *                                    reprojection or reduction changes.
 * NAXISn means NAXIS followed by digits only.  This is the union of the lists the
 * writers of products kept before (FITS encoder, mosaic, command line); BUNIT, WCSAXES
 * and commentary cards are not in it: a copy keeps them unless its writer sets them.
 * Cannot fail. */
int fitscard_is_structural(const char *card);

/* ---- the structure of an image HDU --------------------------------------------------- */

/* The rule for the data unit of an image HDU that every reader applies when it opens one
 * (FITS 4.0, sections 4.4.1.1 and 4.4.1.2; fitsimg_read_info calls it):
 *   BITPIX one of 8, 16, 32, 64, -32, -64;
 *   NAXIS from 0 to `maxdim`;
 *   each NAXISn (n = 1..NAXIS, naxes[n-1]) at least 1: the standard lets an axis of
 *     length 0 mean an empty data unit, which nothing here can serve or write;
 *   the data size |BITPIX|/8 x NAXIS1 x ... x NAXISn (0 for NAXIS = 0) at most
 *     TESS_SIZE_MAX (engine/base/checked.h), so that it and every product of some of its
 *     factors fit in size_t, long and off_t;
 *   when data_offset >= 0 (the byte where the data unit starts; -1 for a tile-compressed
 *     image, whose pixels are in a table of another size), data_offset + that size at
 *     most file_size: the file holds every pixel its header declares.
 * *bytes (may be NULL) receives the data size.  Returns 0, TESS_EINVAL (bad BITPIX or
 * NAXIS, an axis below 1: err names the card and its value; a size that overflows: err
 * gives the shape) or TESS_EIO (the file is shorter than its header says, as a read of
 * the missing bytes would fail: err gives the shape and both sizes). */
int fitscard_check_image(int bitpix, int naxis, const long *naxes, int maxdim,
                         long long data_offset, long long file_size, size_t *bytes,
                         char *err, size_t errlen);

/* The characters of n cards read from a file, made what a FITS reader or writer accepts
 * (FITS 4.0, section 4.1.2):
 *   the keyword (columns 1-8) must be 0 to 8 characters of A-Z, 0-9, '-' and '_',
 *     blank-padded (a-z is accepted too: cfitsio reads and writes it as upper case);
 *     anything else (a byte outside 32..126, an embedded blank, other punctuation) is
 *     refused: no FITS product could carry the card (cfitsio's writer refuses it);
 *   a byte outside 32..126 in columns 9-80 (a value, a comment, commentary text) becomes
 *     '?' in place, as astropy.io.fits does when it reads such a header, so that the
 *     header shows and writes the same everywhere (JSON listings, FITS products).
 * *replaced (may be NULL) receives the number of bytes replaced.  Returns 0, or
 * TESS_EINVAL with err naming the card (1-based) and its keyword, bytes outside 32..126
 * written as \xHH. */
int fitscard_check_chars(char *cards, int n, int *replaced, char *err, size_t errlen);

/* ---- header text ---------------------------------------------------------------------- */

/* 1 when text[0..len) is a whole FITS file rather than header text: at least one 2880-
 * byte block, the first card a SIMPLE card, no line feed in the first block (a text
 * header that starts with SIMPLE has its first newline at byte 80 or before).  Cannot
 * fail. */
int fitscard_text_is_fits(const char *text, size_t len);

/* Turns header text into cards.  Three forms are accepted:
 *   text: one card a line, LF or CR LF; a line longer than 80 characters is an error,
 *     a shorter one is blank-padded; the last line may lack its newline;
 *   raw cards: no newline at all, a whole number of 80-character cards;
 *   a whole FITS file (fitscard_text_is_fits): its primary header, cards up to END, the
 *     bytes after it (data, which may hold any byte) not read;
 *   raw cards, or a whole FITS file, opening with SIMPLE or XTENSION are a FITS header:
 *     it must hold END among its whole cards, else it was cut short (head -c of a file,
 *     at any length: the error says the file looks truncated); what follows END is not
 *     read, so a file cut in its data, at any length, is read as its whole header.
 * Reading stops at END (END then blanks only); blank cards are dropped; every
 * character of a card read must be printable ASCII (32..126); NAXISn must hold a whole
 * number from 1 (as fitscard_check_image).  The other values are not looked at: the
 * WCS validity rule (finite numbers in WCS cards among others) is skywcs_parse's
 * (engine/sky/skywcs.h), the same for targets as for datasets.
 * At least 1 and at most `max_cards` cards.  On success *cards is malloc'd (the layout
 * above) and *n set.  Returns 0, TESS_EINVAL (`err` names the line and the rule
 * broken), TESS_ENOMEM; on error *cards is NULL and *n 0. */
int fitscard_parse(const char *text, size_t len, int max_cards, char **cards, int *n,
                   char *err, size_t errlen);

/* Checks that header text of the text form (fitscard_parse: it has a newline and is not
 * a whole FITS file) was not cut short: when no END line comes first, a last line
 * without its line end must be a whole card, i.e. END (then blanks), blanks only, or at
 * least 80 columns (a CR before the end not counted).  The text form needs no END, so a
 * cut there is otherwise silent (a value losing its last digits).  Raw cards and FITS
 * files are not looked at (fitscard_parse checks those).  Returns 0, or TESS_EINVAL with
 * err quoting the start of the cut line (at most 40 characters, printable ASCII only). */
int fitscard_text_check_cut(const char *text, size_t len, char *err, size_t errlen);

#endif
