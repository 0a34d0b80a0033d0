/* FITS image access through cfitsio: header cards, metadata and physical pixel values (fitsimg.h). */
#include "engine/fits/fitsimg.h"
#include "engine/fits/fitswrite.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fitsio.h>

#include "engine/base/byteswap.h"
#include "engine/base/checked.h"
#include "engine/base/decodelimit.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitscard.h"

/* Thread safety.  Every call below opens its own fitsfile, so threads share no cfitsio
 * handle.  cfitsio itself keeps global tables (I/O drivers, open files, the error
 * message stack), which it guards with its own mutex when built with --enable-reentrant:
 * Debian's libcfitsio 4.2.0 is (fits_is_reentrant() returns 1), and then this mutex is
 * never taken.  Against a cfitsio built without thread support, every sequence of
 * cfitsio calls, from open to close, runs under this one process-wide mutex instead.
 * It is the only mutable static state of the module. */
static pthread_mutex_t cfitsio_mutex = PTHREAD_MUTEX_INITIALIZER;

void fitsimg_cfitsio_lock(void)
{
    if (!fits_is_reentrant())
        pthread_mutex_lock(&cfitsio_mutex);
}

void fitsimg_cfitsio_unlock(void)
{
    if (!fits_is_reentrant())
        pthread_mutex_unlock(&cfitsio_mutex);
}

/* Closes f (NULL is ignored; a close error is of no use to a reader) and releases the
 * cfitsio lock the caller took. */
static void close_unlock(fitsfile *f)
{
    if (f) {
        int status = 0;
        fits_close_file(f, &status);
    }
    fitsimg_cfitsio_unlock();
}

/* Writes "what path: <cfitsio's text for status> (cfitsio status N)" into err.  The
 * text comes from fits_get_errstatus, not from cfitsio's message stack: that stack is
 * shared by all threads, so its top may be another thread's message. */
static void set_cfitsio_err(char *err, size_t errlen, const char *what, const char *path,
                            int status)
{
    char text[FLEN_STATUS];
    fits_get_errstatus(status, text);
    /* END_OF_FILE and READ_ERROR: what a file cut short inside its header gives */
    const char *hint = status == END_OF_FILE || status == READ_ERROR
                           ? "; the file ends early: truncated?" : "";
    tess_seterr(err, errlen, "%s %s: %s%s (cfitsio status %d)", what, path, text, hint,
                status);
}

/* The whole-file compressions that cfitsio's file driver recognises by their first
 * bytes (drvrfile.c, file_is_compressed, which compares two) and undoes whole, into
 * memory, at every opening.  Zip is its two bytes "PK", as cfitsio takes it (any file so
 * begun goes to its zip reader); the others their full signatures.  None can begin a
 * FITS file. */
static const struct {
    char magic[5];
    size_t len;
    const char *name, *undo;     /* the format, and the command that undoes it */
} whole_file_codecs[] = {
    {"\037\213", 2, "gzip", "gunzip"}, {"PK", 2, "zip", "unzip"},
    {"\037\036", 2, "pack", "unpack"}, {"\037\235", 2, "compress (.Z)", "uncompress"},
    {"\037\240", 2, "LZH", "lha x"}, {"BZh", 3, "bzip2", "bunzip2"},
};

int fitsimg_check_not_compressed(const char *path, char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    int rc = fitsimg_check_fd_not_compressed(fd, path, err, errlen);
    close(fd);
    return rc;
}

int fitsimg_check_fd_not_compressed(int fd, const char *path, char *err, size_t errlen)
{
    unsigned char head[4];
    ssize_t n = pread(fd, head, sizeof head, 0);
    for (size_t i = 0; i < sizeof whole_file_codecs / sizeof whole_file_codecs[0]; i++) {
        if (n >= (ssize_t)whole_file_codecs[i].len &&
            memcmp(head, whole_file_codecs[i].magic, whole_file_codecs[i].len) == 0) {
            tess_seterr(err, errlen, "a %s-compressed file is not read (cfitsio would "
                        "decompress all of it into memory at every read): %s %s, or "
                        "compress it with fpack (tiles, read one at a time)",
                        whole_file_codecs[i].name, whole_file_codecs[i].undo, path);
            return TESS_EINVAL;
        }
    }
    return 0;
}

/* Opens `path` as a plain disk file, without cfitsio's extended filename syntax (so
 * "a[1].fits" or "!x.fits" are file names, not HDU selectors or clobber flags), and
 * moves to HDU `hdu` (0-based), which must be an image.  The file is opened here first
 * (tess_open_regular: a FIFO or a device is refused, never waited on), a whole-file
 * compressed one is refused (fitsimg_check_fd_not_compressed), and cfitsio opens that
 * very file through its descriptor's name.  On success returns 0 with *fp open; on error
 * returns TESS_EIO (cannot open or read, not a regular file) or TESS_EINVAL (compressed,
 * no such HDU, not an image), with *fp NULL and err set.  Call with the cfitsio lock
 * held. */
static int open_image_hdu(const char *path, int hdu, fitsfile **fp, char *err, size_t errlen)
{
    int status = 0, hdutype = 0;
    *fp = NULL;
    if (hdu < 0 || hdu >= INT_MAX) {
        tess_seterr(err, errlen, "HDU index %d out of range in %s", hdu, path);
        return TESS_EINVAL;
    }
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    if (fitsimg_check_fd_not_compressed(fd, path, err, errlen)) {
        close(fd);
        return TESS_EINVAL;
    }
    char name[PATH_MAX];
    fitsfile *f = NULL;
    fits_open_diskfile(&f, tess_fd_name(fd, path, name, sizeof(name)), READONLY, &status);
    close(fd);
    if (status) {
        set_cfitsio_err(err, errlen, "cannot open", path, status);
        return TESS_EIO;
    }
    if (fits_movabs_hdu(f, hdu + 1, &hdutype, &status)) {
        int rc = TESS_EIO;
        if (status == END_OF_FILE) {
            tess_seterr(err, errlen, "%s has no HDU %d", path, hdu);
            rc = TESS_EINVAL;
        } else {
            set_cfitsio_err(err, errlen, "cannot read HDU of", path, status);
        }
        status = 0;
        fits_close_file(f, &status);
        return rc;
    }
    if (hdutype != IMAGE_HDU) {
        tess_seterr(err, errlen, "HDU %d of %s is a table, not an image", hdu, path);
        status = 0;
        fits_close_file(f, &status);
        return TESS_EINVAL;
    }
    *fp = f;
    return 0;
}

/* Reads NAXIS and NAXISn of the current HDU into naxis/naxes (unused entries 1).
 * Returns 0, TESS_EINVAL (NAXIS above FITSIMG_MAXDIM) or TESS_EIO, with err set. */
static int read_dims(fitsfile *f, const char *path, int *naxis, long naxes[FITSIMG_MAXDIM],
                     char *err, size_t errlen)
{
    int status = 0;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        naxes[i] = 1;
    if (fits_get_img_dim(f, naxis, &status)) {
        set_cfitsio_err(err, errlen, "cannot read NAXIS of", path, status);
        return TESS_EIO;
    }
    if (*naxis < 0 || *naxis > FITSIMG_MAXDIM) {
        tess_seterr(err, errlen, "%s: NAXIS = %d, more axes than the %d supported", path,
                *naxis, FITSIMG_MAXDIM);
        return TESS_EINVAL;
    }
    if (*naxis > 0 && fits_get_img_size(f, *naxis, naxes, &status)) {
        set_cfitsio_err(err, errlen, "cannot read NAXISn of", path, status);
        return TESS_EIO;
    }
    for (int i = 0; i < *naxis; i++) {
        if (naxes[i] < 0) {
            tess_seterr(err, errlen, "%s: NAXIS%d = %ld is negative", path, i + 1, naxes[i]);
            return TESS_EINVAL;
        }
    }
    return 0;
}

/* For a tile-compressed image: whether one tile, which cfitsio decompresses whole into
 * a buffer of its own (of int, float, or for 64-bit data 8-byte values) for any read
 * that touches it, fits the decode budgets (engine/base/decodelimit.h).  The tile shape
 * is cfitsio's own, from ZTILEn and its defaults when the HDU was opened.  Returns 0 (also
 * for an uncompressed image) or TESS_ELIMIT with err. */
static int check_tile(fitsfile *f, const char *path, char *err, size_t errlen)
{
    int status = 0;
    if (!fits_is_compressed_image(f, &status) || status)
        return 0;
    const FITSfile *F = f->Fptr;
    long d[3] = {1, 1, 1};   /* the axes from the third on folded into d[2], saturated */
    for (int i = 0; i < F->zndim && i < MAX_COMPRESS_DIM; i++) {
        long t = F->tilesize[i] < 1 ? 1 : F->tilesize[i];
        if (i < 2)
            d[i] = t;
        else
            (void)tess_long_mul(d[2], t, &d[2]);
    }
    size_t esize = F->zbitpix == 64 || F->zbitpix == -64 ? 8 : 4;
    return decodelimit_check("one compression tile", path, d[0], d[1], d[2], esize, err, errlen);
}

/* open_image_hdu, then read_dims, then check_tile: what every read of pixels opens with.
 * Returns 0 or their error, with *fp open when the HDU could be opened (the caller
 * closes it).  Call with the cfitsio lock held. */
static int open_image_dims(const char *path, int hdu, fitsfile **fp, int *naxis,
                           long naxes[FITSIMG_MAXDIM], char *err, size_t errlen)
{
    int rc = open_image_hdu(path, hdu, fp, err, errlen);
    if (!rc)
        rc = read_dims(*fp, path, naxis, naxes, err, errlen);
    return rc ? rc : check_tile(*fp, path, err, errlen);
}

/* Reads an optional numeric keyword as a double; *val keeps its default when absent.
 * Returns the cfitsio status (0 also when the keyword is absent). */
static int read_opt_double(fitsfile *f, const char *key, double *val)
{
    int status = 0;
    double v;
    if (fits_read_key(f, TDOUBLE, key, &v, NULL, &status) == 0)
        *val = v;
    else if (status == KEY_NO_EXIST)
        status = 0;
    return status;
}

/* The keyword of an 80-character card, without its trailing blanks, into key. */
static void card_keyword(const char *card, char key[9])
{
    int n = 8;
    memcpy(key, card, 8);
    while (n > 0 && key[n - 1] == ' ')
        n--;
    key[n] = '\0';
}

/* Whether key is root followed by digits only (TFORM12 for TFORM). */
static int indexed_keyword(const char *key, const char *root)
{
    size_t n = strlen(root);
    if (strncmp(key, root, n) != 0 || !key[n])
        return 0;
    for (const char *p = key + n; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* Whether a card of a tile-compressed HDU's table belongs to the table or to the
 * compression rather than to the image (FITS 4.0, section 10: the structural cards of
 * the table, the Z keywords of the convention, the table's own checksums and the
 * EXTNAME cfitsio gives by default). */
static int compression_card(const char *key, const char *card)
{
    static const char *const plain[] = {
        "XTENSION", "BITPIX", "NAXIS", "PCOUNT", "GCOUNT", "TFIELDS", "THEAP", "ZIMAGE",
        "ZCMPTYPE", "ZBITPIX", "ZNAXIS", "ZSIMPLE", "ZTENSION", "ZEXTEND", "ZPCOUNT",
        "ZGCOUNT", "ZBLOCKED", "ZQUANTIZ", "ZDITHER0", "ZBLANK", "ZMASKCMP", "ZHECKSUM",
        "ZDATASUM", "CHECKSUM", "DATASUM", "END"};
    static const char *const indexed[] = {
        "NAXIS", "TTYPE", "TFORM", "TUNIT", "TSCAL", "TZERO", "TNULL", "TDIM", "TDISP",
        "ZNAXIS", "ZTILE", "ZNAME", "ZVAL"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(key, plain[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof indexed / sizeof indexed[0]; i++)
        if (indexed_keyword(key, indexed[i]))
            return 1;
    return strcmp(key, "EXTNAME") == 0 && strncmp(card + 10, "'COMPRESSED_IMAGE'", 18) == 0;
}

/* The card of keyword key among the n cards of tab (80 characters each), or NULL. */
static const char *find_card(const char *tab, int n, const char *key)
{
    char k[9];
    for (int i = 0; i < n; i++) {
        card_keyword(tab + (size_t)i * 80, k);
        if (strcmp(k, key) == 0)
            return tab + (size_t)i * 80;
    }
    return NULL;
}

/* Appends to out the card zcard of the table (a Z keyword) under the image's keyword
 * key, value and comment kept; or the card text dflt when zcard is NULL (padded with
 * blanks to 80 characters). */
static void put_image_card(char *out, int *n, const char *zcard, const char *key,
                           const char *dflt)
{
    char *c = out + (size_t)*n * 80;
    memset(c, ' ', 80);
    if (zcard) {
        memcpy(c + 8, zcard + 8, 72);
        memcpy(c, key, strlen(key));
    } else {
        memcpy(c, dflt, strlen(dflt));
    }
    (*n)++;
}

/* The image header of a tile-compressed HDU, built from its table's cards one by one
 * (fits_read_record) by the convention's mapping (FITS 4.0, section 10.1).
 * fits_convert_hdr2str copies the cards in the order the file has them, making the
 * primary header it writes when ZTENSION and ZSIMPLE are absent (both are optional), so
 * it refuses a file whose ZTENSION (or ZSIMPLE) card comes after ZBITPIX or the image's
 * cards - astropy's own test file comp.fits has it last - although fits_read_pix reads
 * its pixels and fitsverify and astropy accept it.  Here the structural cards come
 * first: ZTENSION, or ZSIMPLE (SIMPLE = T when neither is there, as cfitsio writes),
 * ZBITPIX, ZNAXIS, ZNAXISn, then ZPCOUNT and ZGCOUNT (PCOUNT = 0, GCOUNT = 1 when
 * absent) or ZEXTEND, each under the image's keyword with its value and comment; then
 * the image's other cards in file order, less those of the table and of the
 * compression; ZHECKSUM and ZDATASUM become CHECKSUM and DATASUM, as cfitsio renames
 * them.  Sets info->header (malloc'd, no END) and info->nkeys.  Returns 0 or a cfitsio
 * status. */
static int compressed_header_cards(fitsfile *f, fitsimg_info *info)
{
    int status = 0, nkeys = 0;
    if (fits_get_hdrspace(f, &nkeys, NULL, &status))
        return status;
    size_t tabsize;
    if (nkeys < 0 || tess_size_mul((size_t)nkeys + 1, 80, &tabsize))
        return MEMORY_ALLOCATION;
    char *tab = malloc(tabsize);
    char *out = malloc(tabsize + 8 * 80 + 1);   /* at most 7 cards are made up */
    if (!tab || !out) {
        free(tab);
        free(out);
        return MEMORY_ALLOCATION;
    }
    char rec[FLEN_CARD];
    for (int i = 0; i < nkeys && !status; i++) {
        if (fits_read_record(f, i + 1, rec, &status) == 0) {
            size_t len = strlen(rec);
            memset(tab + (size_t)i * 80, ' ', 80);
            memcpy(tab + (size_t)i * 80, rec, len < 80 ? len : 80);
        }
    }
    int n = 0;
    const char *xtension = find_card(tab, nkeys, "ZTENSION");
    const char *simple = xtension ? NULL : find_card(tab, nkeys, "ZSIMPLE");
    const char *znaxis = find_card(tab, nkeys, "ZNAXIS");
    long naxis = 0;
    char zval[71] = "";
    if (znaxis)
        memcpy(zval, znaxis + 10, 70);   /* the value field: cards are not NUL-ended */
    if (!status && znaxis && sscanf(zval, "%ld", &naxis) == 1 && naxis >= 0 &&
        naxis <= 999 && find_card(tab, nkeys, "ZBITPIX")) {
        if (xtension)
            put_image_card(out, &n, xtension, "XTENSION", NULL);
        else
            put_image_card(out, &n, simple, "SIMPLE",
                           "SIMPLE  =                    T / file does conform to FITS "
                           "standard");
        put_image_card(out, &n, find_card(tab, nkeys, "ZBITPIX"), "BITPIX", NULL);
        put_image_card(out, &n, znaxis, "NAXIS", NULL);
        for (long k = 1; k <= naxis && !status; k++) {
            char key[32];
            snprintf(key, sizeof key, "ZNAXIS%ld", k);
            const char *c = find_card(tab, nkeys, key);
            if (!c || n >= nkeys + 8)
                status = NOT_IMAGE;
            else
                put_image_card(out, &n, c, key + 1, NULL);
        }
    } else if (!status) {
        status = NOT_IMAGE;
    }
    if (!status) {
        const char *c;
        if (!xtension) {
            if ((c = find_card(tab, nkeys, "ZEXTEND")) != NULL)
                put_image_card(out, &n, c, "EXTEND", NULL);
        } else {
            put_image_card(out, &n, find_card(tab, nkeys, "ZPCOUNT"), "PCOUNT",
                           "PCOUNT  =                    0");
            put_image_card(out, &n, find_card(tab, nkeys, "ZGCOUNT"), "GCOUNT",
                           "GCOUNT  =                    1");
        }
        for (int i = 0; i < nkeys; i++) {
            const char *card = tab + (size_t)i * 80;
            char key[9];
            card_keyword(card, key);
            if (strcmp(key, "ZHECKSUM") == 0)
                put_image_card(out, &n, card, "CHECKSUM", NULL);
            else if (strcmp(key, "ZDATASUM") == 0)
                put_image_card(out, &n, card, "DATASUM", NULL);
            else if (!compression_card(key, card)) {
                memcpy(out + (size_t)n * 80, card, 80);
                n++;
            }
        }
    }
    free(tab);
    if (status) {
        free(out);
        return status;
    }
    out[(size_t)n * 80] = '\0';
    info->header = out;
    info->nkeys = n;
    return 0;
}

/* Copies the header of the current HDU, minus its END card, into info->header and
 * info->nkeys.  Returns 0, TESS_ENOMEM, or TESS_EIO with err set. */
static int read_header_cards(fitsfile *f, const char *path, fitsimg_info *info,
                             char *err, size_t errlen)
{
    int status = 0, nkeys = 0, compressed;
    char *str = NULL;
    compressed = fits_is_compressed_image(f, &status);
    if (status == 0) {
        if (compressed)
            fits_convert_hdr2str(f, 0, NULL, 0, &str, &nkeys, &status);
        else
            fits_hdr2str(f, 0, NULL, 0, &str, &nkeys, &status);
    }
    if (status) {
        if (str) {
            int st2 = 0;
            fits_free_memory(str, &st2);
        }
        /* cfitsio refuses compressed headers whose ZTENSION is not first: read them
         * card by card. */
        if (compressed && status != MEMORY_ALLOCATION) {
            status = compressed_header_cards(f, info);
        }
        if (status == 0)
            return 0;
        set_cfitsio_err(err, errlen, "cannot read the header of", path, status);
        return status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EIO;
    }
    /* fits_hdr2str counts and includes the END card last; keep it out. */
    size_t len = strlen(str);
    if (nkeys < 0 || len < (size_t)nkeys * 80)
        nkeys = (int)(len / 80);
    if (nkeys > 0 && memcmp(str + (size_t)(nkeys - 1) * 80, "END     ", 8) == 0)
        nkeys--;
    size_t bytes = (size_t)nkeys * 80;
    info->header = malloc(bytes + 1);
    if (!info->header) {
        int st2 = 0;
        fits_free_memory(str, &st2);
        tess_seterr(err, errlen, "out of memory reading the header of %s", path);
        return TESS_ENOMEM;
    }
    memcpy(info->header, str, bytes);
    info->header[bytes] = '\0';
    info->nkeys = nkeys;
    fits_free_memory(str, &status);
    return 0;
}

int fitsimg_check_scaling(int bitpix, double bscale, double bzero, char *err, size_t errlen)
{
    if (!isfinite(bscale) || !isfinite(bzero)) {
        tess_seterr(err, errlen, "BSCALE = %g, BZERO = %g: not finite", bscale, bzero);
        return TESS_EINVAL;
    }
    if (bscale == 0.0) {
        tess_seterr(err, errlen, "BSCALE = 0 would make every value BZERO (FITS 4.0, "
                    "section 4.4.2.5: physical = BZERO + BSCALE x stored)");
        return TESS_EINVAL;
    }
    if (bitpix > 0) {
        /* The largest stored magnitude, and the largest physical value the type read
         * holds (float32 for BITPIX 8 and 16, float64 otherwise). */
        double smax = bitpix == 8 ? 255.0 : ldexp(1.0, bitpix - 1);
        double lim = bitpix <= 16 ? (double)FLT_MAX : DBL_MAX;
        if (!(fabs(bscale) * smax + fabs(bzero) <= lim)) {
            tess_seterr(err, errlen, "BSCALE = %g, BZERO = %g overflow BITPIX %d values (up "
                        "to %g)", bscale, bzero, bitpix, lim);
            return TESS_EINVAL;
        }
    }
    return 0;
}

int fitsimg_read_info(const char *path, int hdu, fitsimg_info *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        info->naxes[i] = 1;
    info->bscale = 1.0;

    struct stat st;
    if (stat(path, &st) != 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    info->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    info->file_size = (long long)st.st_size;

    fitsimg_cfitsio_lock();
    fitsfile *f = NULL;
    int status = 0;
    int rc = open_image_hdu(path, hdu, &f, err, errlen);
    if (rc)
        goto out;
    rc = read_dims(f, path, &info->naxis, info->naxes, err, errlen);
    if (rc)
        goto out;

    if (fits_get_img_type(f, &info->bitpix, &status)) {
        set_cfitsio_err(err, errlen, "cannot read BITPIX of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    if ((status = read_opt_double(f, "BSCALE", &info->bscale)) != 0 ||
        (status = read_opt_double(f, "BZERO", &info->bzero)) != 0) {
        set_cfitsio_err(err, errlen, "bad BSCALE or BZERO in", path, status);
        rc = TESS_EINVAL;
        goto out;
    }
    char why[160];
    if (fitsimg_check_scaling(info->bitpix, info->bscale, info->bzero, why, sizeof why)) {
        tess_seterr(err, errlen, "%s: %s", path, why);
        rc = TESS_EINVAL;
        goto out;
    }
    if (info->bitpix > 0) {
        long long blank;
        if (fits_read_key(f, TLONGLONG, "BLANK", &blank, NULL, &status) == 0) {
            info->has_blank = 1;
            info->blank = blank;
        } else if (status == KEY_NO_EXIST) {
            status = 0;
        } else {
            set_cfitsio_err(err, errlen, "bad BLANK in", path, status);
            rc = TESS_EINVAL;
            goto out;
        }
    }
    char bunit[FLEN_VALUE];
    if (fits_read_key(f, TSTRING, "BUNIT", bunit, NULL, &status) == 0)
        snprintf(info->bunit, sizeof info->bunit, "%s", bunit);
    else
        status = 0;   /* absent or not a string: no unit */
    LONGLONG head0 = 0, data0 = 0, dend = 0;
    int compressed = fits_is_compressed_image(f, &status);
    if (status == 0 && !compressed)
        fits_get_hduaddrll(f, &head0, &data0, &dend, &status);
    info->data_offset = compressed ? -1 : (long long)data0;
    if (status) {
        set_cfitsio_err(err, errlen, "cannot locate the data of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    char why2[320];
    if ((rc = fitscard_check_image(info->bitpix, info->naxis, info->naxes, FITSIMG_MAXDIM,
                                   info->data_offset, info->file_size, NULL, why2,
                                   sizeof why2)) != 0) {
        tess_seterr(err, errlen, "%s: %s", path, why2);
        goto out;
    }

    rc = read_header_cards(f, path, info, err, errlen);
    if (rc == 0 && (rc = fitscard_check_chars(info->header, info->nkeys, NULL, why2,
                                              sizeof why2)) != 0)
        tess_seterr(err, errlen, "%s: %s", path, why2);

out:
    close_unlock(f);
    if (rc)
        fitsimg_info_release(info);
    return rc;
}

int fitsimg_read_cards(const char *path, int hdu, int max_cards, char **cards, int *n,
                       int *is_fits, char *err, size_t errlen)
{
    *cards = NULL;
    *n = 0;
    if (is_fits)
        *is_fits = 0;
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    int crc = fitsimg_check_fd_not_compressed(fd, path, err, errlen);
    if (crc) {
        close(fd);
        return crc;
    }
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    size_t cap = max_cards > 0 ? (size_t)max_cards * 82 : 82, len = 0;
    if (cap < FITSCARD_BLOCK)
        cap = FITSCARD_BLOCK;
    char *text = malloc(cap);
    if (!text) {
        fclose(fp);
        tess_seterr(err, errlen, "out of memory reading %s", path);
        return TESS_ENOMEM;
    }
    len = fread(text, 1, FITSCARD_BLOCK, fp);
    int rc = 0;
    if (len >= 9 && strncmp(text, "SIMPLE  =", 9) == 0 && !memchr(text, '\n', len)) {
        fitsimg_info info;
        if (is_fits)
            *is_fits = 1;
        rc = fitsimg_read_info(path, hdu, &info, err, errlen);
        if (rc == 0) {
            *cards = info.header;
            *n = info.nkeys;
            info.header = NULL;
            fitsimg_info_release(&info);
        }
    } else {
        if (len == FITSCARD_BLOCK)
            len += fread(text + len, 1, cap - len, fp);
        if (ferror(fp)) {
            tess_seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
            rc = TESS_EIO;
        } else if (len == cap && fgetc(fp) != EOF) {
            tess_seterr(err, errlen, "%s: longer than the %zu bytes of a text header of %d "
                        "cards", path, cap, max_cards);
            rc = TESS_EINVAL;
        } else {
            char why[200];
            rc = fitscard_parse(text, len, max_cards, cards, n, why, sizeof why);
            if (rc)
                tess_seterr(err, errlen, "%s: %s", path, why);
        }
    }
    free(text);
    fclose(fp);
    return rc;
}

int fitsimg_data_offset(const char *path, int hdu, long long *offset, char *err,
                        size_t errlen)
{
    *offset = 0;
    fitsimg_cfitsio_lock();
    fitsfile *f = NULL;
    int rc = open_image_hdu(path, hdu, &f, err, errlen);
    if (rc == 0) {
        int status = 0;
        LONGLONG head = 0, data = 0, end = 0;
        if (fits_get_hduaddrll(f, &head, &data, &end, &status)) {
            set_cfitsio_err(err, errlen, "cannot read the HDU addresses of", path, status);
            rc = TESS_EIO;
        } else {
            *offset = (long long)data;
        }
        status = 0;
        fits_close_file(f, &status);
    }
    fitsimg_cfitsio_unlock();
    return rc;
}

void fitsimg_info_release(fitsimg_info *info)
{
    if (!info)
        return;
    free(info->header);
    info->header = NULL;
    info->nkeys = 0;
}

/* pread of `len` bytes at `off` of `fd` into dst, byte-swapped from big-endian as
 * `es`-byte values (es 1, 2, 4 or 8).  Returns 0, or TESS_EIO with err (a read error, or the file ending
 * first).  Read in pieces of 256 KiB, each swapped while it is still in the core's cache:
 * one pass over dst in memory instead of two (for a 64 MB image, 256 calls of pread). */
static int pread_values(int fd, const char *path, off_t off, unsigned char *dst, size_t len,
                        size_t es, char *err, size_t errlen)
{
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 18) ? len : ((size_t)1 << 18);
        ssize_t got = pread(fd, dst, chunk, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || (size_t)got % es != 0) {
            if (got < 0)
                tess_seterr(err, errlen, "cannot read pixels of %s: %s", path, strerror(errno));
            else
                tess_seterr(err, errlen, "cannot read pixels of %s: the file is shorter than "
                            "its header says", path);
            return TESS_EIO;
        }
        if (es == 2) {              /* tess_be_swap swaps 4- and 8-byte values */
            for (size_t k = 0; k < (size_t)got; k += 2) {
                unsigned char t = dst[k];
                dst[k] = dst[k + 1];
                dst[k + 1] = t;
            }
        } else if (es > 2) {
            tess_be_swap(dst, (size_t)got / es, es);
        }
        dst += got;
        off += got;
        len -= (size_t)got;
    }
    return 0;
}

/* pread_values on `path` opened for the read. */
static int read_direct(const char *path, off_t off, unsigned char *dst, size_t len, size_t es,
                       char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    int rc = pread_values(fd, path, off, dst, len, es, err, errlen);
    close(fd);
    return rc;
}

/* 1 when the image HDU open in `f` (BITPIX `bitpix`) stores IEEE values of BITPIX `want`
 * that are read as they are stored: no BSCALE or BZERO card, not a compressed image;
 * *data0 is then the data's byte offset.  Else 0 (cfitsio must read it). */
static int plain_ieee(fitsfile *f, int bitpix, int want, LONGLONG *data0)
{
    if (bitpix != want)
        return 0;
    char card[FLEN_CARD];
    for (int k = 0; k < 2; k++) {
        int ks = 0;
        if (fits_read_card(f, k ? "BZERO" : "BSCALE", card, &ks) == 0)
            return 0;
    }
    int status = 0;
    if (fits_is_compressed_image(f, &status) || status)
        return 0;
    LONGLONG head = 0, end = 0;
    return fits_get_hduaddrll(f, &head, data0, &end, &status) == 0;
}

/* The scaling of an integer image as cfitsio applies it when reading into float or
 * double (convert.c/getcol*.c: fffi1r4, fffi2r4, fffi4r4 and their r8 forms): a stored
 * value equal to BLANK (when BLANK is given and fits the type: cfitsio passes over an
 * impossible one) becomes NaN, any other v becomes v as a double times BSCALE plus BZERO
 * in double precision, rounded once to the output type (unscaled: v converted). */
typedef struct int_scaling {
    int bitpix;             /* 8 (unsigned), 16, 32 */
    double scale, zero;
    int check;              /* 1: BLANK applies */
    long long blank;
} int_scaling;

/* 1 when BLANK `blank` fits the stored type of integer BITPIX `bitpix` (8 unsigned, 16,
 * 32): only then does cfitsio apply it. */
static int blank_fits(int bitpix, long long blank)
{
    long long lo = bitpix == 8 ? 0 : bitpix == 16 ? -32768 : -2147483648LL;
    long long hi = bitpix == 8 ? 255 : bitpix == 16 ? 32767 : 2147483647LL;
    return blank >= lo && blank <= hi;
}

/* 1 when the HDU open in `f` is an integer image of BITPIX 8, 16 or 32, not compressed,
 * whose BSCALE, BZERO and BLANK cfitsio reads as numbers: `sc` and *data0 filled.  Else
 * 0 (BITPIX 64, whose BZERO 2^63 cfitsio treats apart, is left to cfitsio). */
static int plain_int(fitsfile *f, int bitpix, int_scaling *sc, LONGLONG *data0)
{
    if (bitpix != BYTE_IMG && bitpix != SHORT_IMG && bitpix != LONG_IMG)
        return 0;
    memset(sc, 0, sizeof *sc);
    sc->bitpix = bitpix;
    sc->scale = 1.0;
    if (read_opt_double(f, "BSCALE", &sc->scale) || read_opt_double(f, "BZERO", &sc->zero))
        return 0;
    int status = 0;
    LONGLONG blank;
    if (fits_read_key(f, TLONGLONG, "BLANK", &blank, NULL, &status) == 0) {
        sc->check = blank_fits(bitpix, (long long)blank);
        sc->blank = (long long)blank;
    } else if (status != KEY_NO_EXIST) {
        return 0;
    }
    status = 0;
    if (fits_is_compressed_image(f, &status) || status)
        return 0;
    LONGLONG head = 0, end = 0;
    return fits_get_hduaddrll(f, &head, data0, &end, &status) == 0;
}

/* The stored integer i of an int_scaling as a double, NaN for BLANK.  The product and the
 * sum are rounded apart, as in cfitsio: never fused into one FMA (clang fuses only within
 * an expression; GCC across statements unless told not to). */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_FMA __attribute__((optimize("fp-contract=off")))
#else
#define NO_FMA
#endif
NO_FMA static inline double int_value(const int_scaling *sc, long long i)
{
    if (sc->check && i == sc->blank)
        return NAN;
    if (sc->scale == 1.0 && sc->zero == 0.0)
        return (double)i;
    double p = (double)i * sc->scale;
    return p + sc->zero;
}

/* Turns the n stored integers packed at the start of `buf` (BITPIX/8 bytes each,
 * byte-swapped already) into n floats (f32) or doubles in place, by int_value: from the
 * last value down, as each output value is at least as wide as its stored one. */
NO_FMA static void widen_ints(void *buf, size_t n, int f32, const int_scaling *sc)
{
    const unsigned char *u8 = buf;
    const int16_t *i16 = buf;
    const int32_t *i32 = buf;
    float *fo = buf;
    double *dout = buf;
    for (size_t k = n; k-- > 0;) {
        long long i = sc->bitpix == 8 ? (long long)u8[k]
                    : sc->bitpix == 16 ? (long long)i16[k] : (long long)i32[k];
        double v = int_value(sc, i);
        if (f32)
            fo[k] = (float)v;
        else
            dout[k] = v;
    }
}

/* Rows y0 .. y0 + h - 1, columns x0 .. x0 + w - 1 of plane z of an nx x ny image of
 * big-endian `es`-byte values stored at byte `data0` of `path`, into out (w x h, rows
 * contiguous, swapped to this machine's order), without cfitsio: one pread for a run of whole rows, or per row group
 * through a scratch buffer of at most ROWS_SCRATCH bytes when the region is narrower
 * than the image (rows wider than that are read one by one, cut to the region), from the
 * open descriptor fd. */
#define ROWS_SCRATCH ((size_t)1 << 20)
static int read_rows_fd(int fd, const char *path, long long data0, long nx, long ny, long z,
                        long x0, long y0, long w, long h, size_t es, void *out, char *err,
                        size_t errlen)
{
    size_t row = (size_t)nx * es, cut = (size_t)w * es;
    off_t off0 = (off_t)data0 + (off_t)(((size_t)z * (size_t)ny + (size_t)y0) * row);
    if (w == nx)
        return pread_values(fd, path, off0, out, row * (size_t)h, es, err, errlen);
    unsigned char *dst = out, *buf = NULL;
    long per = row <= ROWS_SCRATCH ? (long)(ROWS_SCRATCH / row) : 1;
    if (per > h)
        per = h;
    if (per > 1 && !(buf = malloc(row * (size_t)per)))
        per = 1;
    int rc = 0;
    for (long r = 0; r < h && rc == 0; r += per) {
        long k = h - r < per ? h - r : per;
        off_t off = off0 + (off_t)((size_t)r * row);
        if (k == 1) {
            rc = pread_values(fd, path, off + (off_t)((size_t)x0 * es), dst, cut, es, err,
                              errlen);
            dst += cut;
            continue;
        }
        rc = pread_values(fd, path, off, buf, row * (size_t)k, es, err, errlen);
        for (long q = 0; q < k && rc == 0; q++, dst += cut)
            memcpy(dst, buf + (size_t)q * row + (size_t)x0 * es, cut);
    }
    free(buf);
    return rc;
}

/* read_rows_fd on `path` opened for the read. */
static int read_rows_direct(const char *path, long long data0, long nx, long ny, long z,
                            long x0, long y0, long w, long h, size_t es, void *out,
                            char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return fd;
    int rc = read_rows_fd(fd, path, data0, nx, ny, z, x0, y0, w, h, es, out, err, errlen);
    close(fd);
    return rc;
}

/* 0 when the w x h region at (x0, y0) of plane z lies inside an image of NAXIS `naxis`
 * and axes `naxes` (planes beyond NAXIS3 counted on), else TESS_ERANGE with err. */
static int check_region(int naxis, const long naxes[FITSIMG_MAXDIM], long z, long x0, long y0,
                        long w, long h, const char *path, char *err, size_t errlen)
{
    long nplanes;
    if (tess_long_mul(naxes[2], naxes[3], &nplanes) || naxis == 0 || x0 < 0 || y0 < 0 ||
        z < 0 || x0 > naxes[0] - w || y0 > naxes[1] - h || z >= nplanes) {
        tess_seterr(err, errlen,
                "region x %ld..%ld, y %ld..%ld, plane %ld outside the %ld x %ld x %ld image %s",
                x0, x0 + w - 1, y0, y0 + h - 1, z, naxes[0], naxes[1], nplanes, path);
        return TESS_ERANGE;
    }
    return 0;
}

/* Reads the region into `out` as cfitsio `datatype` (TDOUBLE: double, TFLOAT: float).
 * The region is checked against the HDU's own NAXISn before cfitsio sees it.  Planes
 * beyond NAXIS3 (NAXIS = 4) are counted on: z = i3 + NAXIS3 * i4 (0-based indices). */
static int read_region(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                       int datatype, void *out, char *err, size_t errlen)
{
    if (!out || w <= 0 || h <= 0) {
        tess_seterr(err, errlen, "empty region %ld x %ld requested from %s", w, h, path);
        return TESS_EINVAL;
    }
    if (w > LONG_MAX / h) {
        tess_seterr(err, errlen, "region %ld x %ld of %s is too large", w, h, path);
        return TESS_ERANGE;
    }

    fitsimg_cfitsio_lock();
    fitsfile *f = NULL;
    int naxis = 0, status = 0;
    long naxes[FITSIMG_MAXDIM];
    int rc = open_image_dims(path, hdu, &f, &naxis, naxes, err, errlen);
    if (rc)
        goto out;

    rc = check_region(naxis, naxes, z, x0, y0, w, h, path, err, errlen);
    if (rc)
        goto out;

    long fpixel[FITSIMG_MAXDIM], lpixel[FITSIMG_MAXDIM], inc[FITSIMG_MAXDIM];
    fpixel[0] = x0 + 1;
    lpixel[0] = x0 + w;
    fpixel[1] = y0 + 1;
    lpixel[1] = y0 + h;
    fpixel[2] = lpixel[2] = z % naxes[2] + 1;
    fpixel[3] = lpixel[3] = z / naxes[2] + 1;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        inc[i] = 1;

    /* cfitsio applies BSCALE/BZERO itself.  For integer images a NaN null value makes
     * it turn BLANK pixels into NaN.  Float images are read without null checking:
     * their NaNs pass through as they are, and cfitsio's check would also flush
     * -0 and subnormal values to 0. */
    int bitpix = 0;
    if (fits_get_img_type(f, &bitpix, &status)) {
        set_cfitsio_err(err, errlen, "cannot read BITPIX of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    LONGLONG data0 = 0;
    if (plain_ieee(f, bitpix, datatype == TFLOAT ? FLOAT_IMG : DOUBLE_IMG, &data0)) {
        /* What cfitsio would deliver (values as stored, no null check), read in row
         * groups rather than cfitsio's row by row, and outside its lock. */
        close_unlock(f);
        return read_rows_direct(path, (long long)data0, naxes[0], naxes[1], z, x0, y0, w, h,
                                datatype == TFLOAT ? sizeof(float) : sizeof(double), out,
                                err, errlen);
    }
    int_scaling sc;
    if (plain_int(f, bitpix, &sc, &data0)) {
        close_unlock(f);
        size_t n = (size_t)w * (size_t)h;
        rc = read_rows_direct(path, (long long)data0, naxes[0], naxes[1], z, x0, y0, w, h,
                              (size_t)(bitpix / 8), out, err, errlen);
        if (rc == 0)
            widen_ints(out, n, datatype == TFLOAT, &sc);
        return rc;
    }
    double dnul = bitpix > 0 ? NAN : 0.0;
    float fnul = bitpix > 0 ? NAN : 0.0f;
    void *nulval = datatype == TFLOAT ? (void *)&fnul : (void *)&dnul;
    int anynul = 0;
    if (fits_read_subset(f, datatype, fpixel, lpixel, inc, nulval, out, &anynul, &status)) {
        set_cfitsio_err(err, errlen, "cannot read pixels of", path, status);
        rc = status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EIO;
    }

out:
    close_unlock(f);
    return rc;
}

int fitsimg_read_region(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                        double *out, char *err, size_t errlen)
{
    return read_region(path, hdu, z, x0, y0, w, h, TDOUBLE, out, err, errlen);
}

/* fitsimg_read_region with TFLOAT output: the same checks, the same null handling (NaN
 * for BLANK in integer images, float NaNs passed through unchecked). */
int fitsimg_read_region_f32(const char *path, int hdu, long z, long x0, long y0, long w, long h,
                            float *out, char *err, size_t errlen)
{
    return read_region(path, hdu, z, x0, y0, w, h, TFLOAT, out, err, errlen);
}

void fitsimg_layout_of(const fitsimg_info *info, fitsimg_layout *lay)
{
    memset(lay, 0, sizeof *lay);
    lay->bitpix = info->bitpix;
    lay->naxis = info->naxis;
    for (int i = 0; i < FITSIMG_MAXDIM; i++)
        lay->naxes[i] = info->naxes[i];
    lay->bscale = info->bscale;
    lay->bzero = info->bzero;
    lay->has_blank = info->has_blank;
    lay->blank = info->blank;
    lay->data_offset = info->data_offset;
    lay->mtime_ns = info->mtime_ns;
    lay->file_size = info->file_size;
}

/* 1 when read_region reads an HDU of layout `lay` as float without cfitsio, and then
 * *sc (for an integer image) set as plain_int sets it. */
static int layout_direct_f32(const fitsimg_layout *lay, int_scaling *sc)
{
    if (!lay || lay->data_offset < 0 || lay->bitpix == 0 || lay->naxis < 1)
        return 0;
    if (lay->bitpix == FLOAT_IMG)   /* cfitsio copies unscaled floats as they are */
        return lay->bscale == 1.0 && lay->bzero == 0.0;
    if (lay->bitpix != BYTE_IMG && lay->bitpix != SHORT_IMG && lay->bitpix != LONG_IMG)
        return 0;
    memset(sc, 0, sizeof *sc);
    sc->bitpix = lay->bitpix;
    sc->scale = lay->bscale;
    sc->zero = lay->bzero;
    if (lay->has_blank) {
        sc->check = blank_fits(lay->bitpix, lay->blank);
        sc->blank = lay->blank;
    }
    return 1;
}

int fitsimg_read_region_f32_at(const char *path, int hdu, const fitsimg_layout *lay, long z,
                               long x0, long y0, long w, long h, float *out, char *err,
                               size_t errlen)
{
    int_scaling sc;
    if (!out || w <= 0 || h <= 0 || w > LONG_MAX / h || !layout_direct_f32(lay, &sc))
        return fitsimg_read_region_f32(path, hdu, z, x0, y0, w, h, out, err, errlen);
    struct stat st;
    int fd = tess_open_regular(path, 0, &st, err, errlen);
    if (fd < 0)
        return fd;
    long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if ((long long)st.st_size != lay->file_size || mt != lay->mtime_ns) {
        close(fd);       /* changed since its header was read: read it anew */
        return fitsimg_read_region_f32(path, hdu, z, x0, y0, w, h, out, err, errlen);
    }
    const long *nx = lay->naxes;
    int rc = check_region(lay->naxis, nx, z, x0, y0, w, h, path, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    size_t es = (size_t)(lay->bitpix < 0 ? -lay->bitpix : lay->bitpix) / 8;
    rc = read_rows_fd(fd, path, lay->data_offset, nx[0], nx[1], z, x0, y0, w, h, es, out, err,
                      errlen);
    close(fd);
    if (rc == 0 && lay->bitpix > 0)
        widen_ints(out, (size_t)w * (size_t)h, 1, &sc);
    return rc;
}

int fitsimg_read_values(const char *path, int hdu, fitsimg_values kind, size_t first,
                        size_t n, void *out, char *err, size_t errlen)
{
    if (kind != FITSIMG_F64 && kind != FITSIMG_F32 && kind != FITSIMG_F32_ASTROPY) {
        tess_seterr(err, errlen, "unknown kind of values %d", (int)kind);
        return TESS_EINVAL;
    }
    if (n == 0)
        return 0;
    fitsimg_cfitsio_lock();
    fitsfile *f = NULL;
    int naxis = 0, status = 0, bitpix = 0;
    long naxes[FITSIMG_MAXDIM];
    int rc = open_image_dims(path, hdu, &f, &naxis, naxes, err, errlen);
    if (rc)
        goto out;
    size_t total = 0;
    if (naxis > 0 && tess_size_dims(1, naxes, naxis, &total)) {
        tess_seterr(err, errlen, "%s: the header's sizes overflow", path);
        rc = TESS_ERANGE;
        goto out;
    }
    if (first > total || n > total - first) {
        tess_seterr(err, errlen, "values %zu..%zu outside the %zu of %s", first, first + n - 1,
                    total, path);
        rc = TESS_ERANGE;
        goto out;
    }
    if (fits_get_img_type(f, &bitpix, &status)) {
        set_cfitsio_err(err, errlen, "cannot read BITPIX of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    int f32 = kind != FITSIMG_F64, astropy = kind == FITSIMG_F32_ASTROPY;
    LONGLONG data0 = 0;
    if (plain_ieee(f, bitpix, f32 ? FLOAT_IMG : DOUBLE_IMG, &data0)) {
        /* IEEE values as stored, NaN staying NaN: no cfitsio needed past the header. */
        fits_close_file(f, &status);
        f = NULL;
        fitsimg_cfitsio_unlock();
        size_t es = f32 ? sizeof(float) : sizeof(double), off, len;
        if (tess_size_mul(first, es, &off) || tess_size_add(off, (size_t)data0, &off) ||
            tess_size_mul(n, es, &len)) {
            tess_seterr(err, errlen, "values %zu..%zu of %s: the offsets overflow", first,
                        first + n - 1, path);
            return TESS_ERANGE;
        }
        return read_direct(path, (off_t)off, out, len, es, err, errlen);
    }
    status = 0;
    double bscale = 1.0, bzero = 0.0;
    if (astropy && bitpix > 0) {
        /* Integers: stored values to float (BLANK as NaN), then scaled in float32. */
        if ((status = read_opt_double(f, "BSCALE", &bscale)) != 0
            || (status = read_opt_double(f, "BZERO", &bzero)) != 0) {
            set_cfitsio_err(err, errlen, "bad BSCALE or BZERO in", path, status);
            rc = TESS_EINVAL;
            goto out;
        }
        fits_set_bscale(f, 1.0, 0.0, &status);
    }
    /* A NaN null value makes cfitsio turn BLANK pixels of integer images into NaN; float
     * images are read without null checking (fitsimg_read_region). */
    double dnul = bitpix > 0 ? NAN : 0.0;
    float fnul = bitpix > 0 ? NAN : 0.0f;
    int anynul = 0;
    if (fits_read_img(f, f32 ? TFLOAT : TDOUBLE, (LONGLONG)first + 1, (LONGLONG)n,
                      f32 ? (void *)&fnul : (void *)&dnul, out, &anynul, &status)) {
        set_cfitsio_err(err, errlen, "cannot read pixels of", path, status);
        rc = status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EIO;
        goto out;
    }
    if (astropy && bitpix > 0) {
        float fs = (float)bscale, fz = (float)bzero, *d = out;
        if (bscale != 1.0)
            for (size_t k = 0; k < n; k++)
                d[k] *= fs;
        if (bzero != 0.0)
            for (size_t k = 0; k < n; k++)
                d[k] += fz;
    }

out:
    close_unlock(f);
    return rc;
}

/* Rewrites card `c` as "KEYWORD = value" (its comment dropped): an integer when the value
 * it replaces was written as one and the new value is integral (CNPIXn are integers), a
 * real of 15 significant digits otherwise (fitscard.h).  Cannot fail. */
static void set_card_number(char *c, const char *key, const char *old, double v)
{
    if (!strpbrk(old, ".EeDd") && v == nearbyint(v) && fabs(v) < 1e15 &&
        fitscard_int(c, key, (long long)v, NULL) == 0)
        return;
    (void)fitscard_real(c, key, v, 15, NULL);   /* v is finite, the keyword valid */
}

void fitsimg_header_shift(char *header, int nkeys, const double *shift, int nshift)
{
    for (int i = 0; header && i < nkeys; i++) {
        char *c = header + (size_t)i * 80;
        if (c[8] != '=')
            continue;
        int axis = -1;
        double sign = 0.0;
        if (memcmp(c, "CRPIX", 5) == 0 && c[5] >= '1' && c[5] <= '9'
            && (c[6] == ' ' || (c[6] >= 'A' && c[6] <= 'Z')) && c[7] == ' ') {
            axis = c[5] - '1';
            sign = -1.0;
        } else if (memcmp(c, "CNPIX", 5) == 0 && (c[5] == '1' || c[5] == '2')
                   && memcmp(c + 6, "  ", 2) == 0) {
            axis = c[5] - '1';
            sign = 1.0;
        }
        if (axis < 0 || axis >= nshift || shift[axis] == 0.0)
            continue;
        char key[9], val[80];
        memcpy(key, c, 8);
        key[8] = '\0';
        for (int k = 7; k > 0 && key[k] == ' '; k--)
            key[k] = '\0';
        char *end;
        if (!fitscard_get(c, 1, key, val, sizeof val))
            continue;
        double v = strtod(val, &end);
        if (end != val && isfinite(v) && isfinite(v + sign * shift[axis]))
            set_card_number(c, key, val, v + sign * shift[axis]);
    }
}

/* Adds `by` to the integer card `key` of the current HDU when it has one (a DSS plate's
 * CNPIXn).  Returns the cfitsio status. */
static int shift_int_card(fitsfile *f, const char *key, long by)
{
    int status = 0;
    long v;
    if (fits_read_key(f, TLONG, key, &v, NULL, &status)) {
        return status == KEY_NO_EXIST ? 0 : status;
    }
    v += by;
    fits_update_key(f, TLONG, key, &v, NULL, &status);
    return status;
}

int fitsimg_copy_section(const char *path, int hdu, const long lo[3], const long n[3],
                         unsigned char **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    fitsimg_cfitsio_lock();
    fitsfile *in = NULL, *dst = NULL;
    void *mem = NULL;
    size_t memsize = 0;
    int status = 0, naxis = 0;
    long naxes[FITSIMG_MAXDIM];
    int rc = open_image_hdu(path, hdu, &in, err, errlen);
    if (rc == 0)
        rc = read_dims(in, path, &naxis, naxes, err, errlen);
    if (rc)
        goto out;
    char section[256] = "";
    size_t used = 0;
    for (int i = 0; i < naxis; i++) {
        long a = 1, b = naxes[i];
        if (i < 3) {
            if (lo[i] < 0 || n[i] < 1 || lo[i] > naxes[i] - n[i]) {
                tess_seterr(err, errlen, "the box [%ld, %ld) of axis %d lies outside the %ld "
                            "pixels of %s", lo[i], lo[i] + n[i], i + 1, naxes[i], path);
                rc = TESS_EINVAL;
                goto out;
            }
            a = lo[i] + 1;
            b = lo[i] + n[i];
        }
        used += (size_t)snprintf(section + used, sizeof section - used, "%s%ld:%ld",
                                 i ? "," : "", a, b);
    }
    /* The whole copy in one zeroed buffer: cfitsio reads the blocks past what it wrote
     * (the END search, the fill check of the checksum), and realloc'd memory would be
     * uninitialised there (valgrind).  Header: the input's cards and 36 more, in blocks;
     * data: the box at the input's BITPIX, in blocks. */
    int keys = 0, bitpix = 8;
    fits_get_hdrspace(in, &keys, NULL, &status);
    fits_get_img_type(in, &bitpix, &status);
    if (status) {
        set_cfitsio_err(err, errlen, "cannot read the header of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    size_t data = (size_t)(bitpix < 0 ? -bitpix : bitpix) / 8;
    for (int i = 0; i < naxis; i++)
        data *= (size_t)(i < 3 ? n[i] : naxes[i]);
    memsize = ((size_t)(keys + 36) * 80 + 2879) / 2880 * 2880 + (data + 2879) / 2880 * 2880 +
              2880;
    mem = calloc(1, memsize);
    if (!mem) {
        rc = TESS_ENOMEM;
        tess_seterr(err, errlen, "out of memory");
        goto out;
    }
    if (fits_create_memfile(&dst, &mem, &memsize, 2880 * 16, realloc, &status) ||
        fits_copy_image_section(in, dst, section, &status) ||
        (status = shift_int_card(dst, "CNPIX1", lo[0])) != 0 ||
        (naxis > 1 && (status = shift_int_card(dst, "CNPIX2", lo[1])) != 0) ||
        /* Placeholders, set below by fitswrite_checksum_mem with fixed comments: cfitsio's
         * fits_write_chksum puts the time in them, and the same cut must give the same
         * bytes (its strong ETag, resumed downloads). */
        fits_update_key_str(dst, "CHECKSUM", "0000000000000000", "HDU checksum", &status) ||
        fits_update_key_str(dst, "DATASUM", "0", "data unit checksum", &status)) {
        set_cfitsio_err(err, errlen, "cannot copy a section of", path, status);
        rc = status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EIO;
        goto out;
    }
    LONGLONG end = 0;
    fits_get_hduaddrll(dst, NULL, NULL, &end, &status);
    fits_close_file(dst, &status);
    dst = NULL;
    if (status) {
        set_cfitsio_err(err, errlen, "cannot copy a section of", path, status);
        rc = TESS_EIO;
        goto out;
    }
    if ((rc = fitswrite_checksum_mem(mem, (size_t)end, err, errlen)) != 0)
        goto out;
    *out = mem;
    *outlen = (size_t)end;
    mem = NULL;
out:
    status = 0;
    if (dst)
        fits_close_file(dst, &status);
    status = 0;
    if (in)
        fits_close_file(in, &status);
    free(mem);
    fitsimg_cfitsio_unlock();
    return rc;
}
