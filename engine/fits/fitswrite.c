/* Writing FITS files and memory buffers through cfitsio (fitswrite.h). */
#include "engine/fits/fitswrite.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fitsio.h>

#include "engine/base/checked.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/fits/fitscard.h"

struct fitswrite {
    fitsfile *f;
    void *mem;          /* the buffer of a file in memory (cfitsio reallocs it), else NULL */
    size_t memsize;
    int in_memory;
    char what[96];      /* the file named in messages */
};

static int fits_rc(int status)
{
    return status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EIO;
}

/* Writes "what: <cfitsio's text for status> (cfitsio status N)" into err (the text from
 * fits_get_errstatus: cfitsio's message stack is shared by all threads). */
static void set_err(char *err, size_t errlen, const char *what, const fitswrite *w, int status)
{
    char text[FLEN_STATUS];
    fits_get_errstatus(status, text);
    tess_seterr(err, errlen, "%s %s: %s (cfitsio status %d)", what, w->what, text, status);
}

int fitswrite_new_mem(size_t size_hint, fitswrite **out)
{
    *out = NULL;
    fitswrite *w = calloc(1, sizeof *w);
    if (!w)
        return TESS_ENOMEM;
    w->in_memory = 1;
    snprintf(w->what, sizeof w->what, "a FITS file in memory");
    w->memsize = size_hint ? size_hint : 64 * FITSCARD_BLOCK;
    /* Zeroed: cfitsio reads back blocks of the memory file before it has written them
     * all (ffwend looks for END in the header space), and uninitialised bytes there are
     * valgrind errors; a large calloc costs nothing extra (fresh zero pages). */
    w->mem = calloc(1, w->memsize);
    if (!w->mem) {
        free(w);
        return TESS_ENOMEM;
    }
    int status = 0;
    fitsimg_cfitsio_lock();
    if (fits_create_memfile(&w->f, &w->mem, &w->memsize, 64 * FITSCARD_BLOCK, realloc,
                            &status)) {
        fitsimg_cfitsio_unlock();
        free(w->mem);
        free(w);
        return fits_rc(status);
    }
    *out = w;
    return 0;
}

/* A handle for the file at `path` (named in messages), or NULL with err. */
static fitswrite *file_handle(const char *path, char *err, size_t errlen)
{
    fitswrite *w = calloc(1, sizeof *w);
    if (w)
        snprintf(w->what, sizeof w->what, "%.95s", path);
    else
        tess_seterr(err, errlen, "out of memory");
    return w;
}

int fitswrite_new_file(const char *path, fitswrite **out, char *err, size_t errlen)
{
    *out = NULL;
    fitswrite *w = file_handle(path, err, errlen);
    if (!w)
        return TESS_ENOMEM;
    if (unlink(path) != 0 && errno != ENOENT) {
        tess_seterr(err, errlen, "cannot replace %s: %s", path, strerror(errno));
        free(w);
        return TESS_EIO;
    }
    int status = 0;
    fitsimg_cfitsio_lock();
    if (fits_create_diskfile(&w->f, path, &status)) {
        set_err(err, errlen, "cannot create", w, status);
        fitsimg_cfitsio_unlock();
        free(w);
        return TESS_EIO;
    }
    *out = w;
    return 0;
}

int fitswrite_open_file(const char *path, fitswrite **out, char *err, size_t errlen)
{
    *out = NULL;
    fitswrite *w = file_handle(path, err, errlen);
    if (!w)
        return TESS_ENOMEM;
    int status = 0, nhdu = 0, type = 0;
    fitsimg_cfitsio_lock();
    if (fits_open_diskfile(&w->f, path, READWRITE, &status) ||
        fits_get_num_hdus(w->f, &nhdu, &status) ||
        fits_movabs_hdu(w->f, nhdu, &type, &status)) {
        set_err(err, errlen, "cannot open", w, status);
        if (w->f) {
            int st2 = 0;
            fits_close_file(w->f, &st2);
        }
        fitsimg_cfitsio_unlock();
        free(w);
        return TESS_EIO;
    }
    *out = w;
    return 0;
}

int fitswrite_nhdu(fitswrite *w)
{
    int status = 0, n = 0;
    if (!w || fits_get_num_hdus(w->f, &n, &status))
        return 0;
    return n;
}

/* The two COMMENT cards that cfitsio (and astropy) put in every primary header, which
 * fits_create_img has already written: copied from a source header they would repeat. */
static int is_standard_comment(const char *card)
{
    if (memcmp(card, "COMMENT ", 8) != 0)
        return 0;
    char c[FITSCARD_LEN + 1];
    memcpy(c, card, FITSCARD_LEN);
    c[FITSCARD_LEN] = '\0';
    return strstr(c, "FITS (Flexible Image Transport System) format is") != NULL ||
           strstr(c, "2001A&A...376..359H") != NULL;
}

/* Writes the cards (except structural ones and the standard comments) as records. */
static int write_cards(fitswrite *w, const char *cards, int ncards, char *err, size_t errlen)
{
    int status = 0;
    for (int i = 0; i < ncards; i++) {
        const char *c = cards + (size_t)i * FITSCARD_LEN;
        if (fitscard_is_structural(c) || is_standard_comment(c))
            continue;
        char card[FITSCARD_LEN + 1];
        memcpy(card, c, FITSCARD_LEN);
        card[FITSCARD_LEN] = '\0';
        if (fits_write_record(w->f, card, &status)) {
            set_err(err, errlen, "card refused in", w, status);
            return status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EINVAL;
        }
    }
    return 0;
}

/* CHECKSUM and DATASUM cards with placeholder values at the end of the current header,
 * so that the header keeps room for them until they are set (fitswrite_checksum_*). */
static int reserve_checksum(fitswrite *w, char *err, size_t errlen)
{
    int status = 0;
    if (fits_write_key_str(w->f, "CHECKSUM", "0000000000000000", "HDU checksum", &status) ||
        fits_write_key_str(w->f, "DATASUM", "0", "data unit checksum", &status)) {
        set_err(err, errlen, "cannot write CHECKSUM and DATASUM in", w, status);
        return fits_rc(status);
    }
    return 0;
}

int fitswrite_image_hdu(fitswrite *w, const fitswrite_image *im, const double *data,
                        char *err, size_t errlen)
{
    /* The rule a reader applies (fitscard_check_image), without a file to fit in. */
    char why[256] = "";
    size_t bytes = 0;
    int ok = im->naxis >= 1 && im->ncards >= 0 && (im->ncards == 0 || im->cards) &&
             fitscard_check_image(im->bitpix, im->naxis, im->naxes, FITSIMG_MAXDIM, -1, 0,
                                  &bytes, why, sizeof why) == 0;
    if (im->u16 && (im->bitpix != 16 || im->scaled))
        ok = 0;
    if (!ok) {
        tess_seterr(err, errlen, "not an image shape: BITPIX %d%s, NAXIS %d%s%s", im->bitpix,
                    im->u16 ? " unsigned" : "", im->naxis, why[0] ? ": " : "", why);
        return TESS_EINVAL;
    }
    int value_bytes = (im->bitpix < 0 ? -im->bitpix : im->bitpix) / 8;
    long long npix = (long long)(bytes / (size_t)value_bytes);
    int status = 0;
    long naxes[FITSIMG_MAXDIM];
    for (int i = 0; i < im->naxis; i++)
        naxes[i] = im->naxes[i];
    if (fits_create_img(w->f, im->u16 ? USHORT_IMG : im->bitpix, im->naxis, naxes, &status)) {
        set_err(err, errlen, "cannot add an image to", w, status);
        return fits_rc(status);
    }
    if (im->scaled) {
        double bscale = im->bscale, bzero = im->bzero;
        if (fits_write_key(w->f, TDOUBLE, "BSCALE", &bscale, NULL, &status) ||
            fits_write_key(w->f, TDOUBLE, "BZERO", &bzero, NULL, &status)) {
            set_err(err, errlen, "cannot write BSCALE and BZERO in", w, status);
            return fits_rc(status);
        }
    }
    if (im->extname &&
        fits_write_key(w->f, TSTRING, "EXTNAME", (void *)im->extname,
                       im->extname_comment, &status)) {
        set_err(err, errlen, "cannot write EXTNAME in", w, status);
        return fits_rc(status);
    }
    int rc = write_cards(w, im->cards, im->ncards, err, errlen);
    if (rc == 0)
        rc = reserve_checksum(w, err, errlen);
    if (rc)
        return rc;
    if (data && fits_write_img(w->f, TDOUBLE, 1, (LONGLONG)npix, (void *)data, &status)) {
        set_err(err, errlen, "cannot write the pixels of", w, status);
        return fits_rc(status);
    }
    return 0;
}

int fitswrite_image_length(const fitswrite_image *im, size_t *len, char *err, size_t errlen)
{
    *len = 0;
    if (err && errlen)
        err[0] = '\0';
    char why[256] = "";
    size_t bytes = 0;
    if (im->naxis < 1 || fitscard_check_image(im->bitpix, im->naxis, im->naxes,
                                              FITSIMG_MAXDIM, -1, 0, &bytes, why,
                                              sizeof why) != 0) {
        tess_seterr(err, errlen, "not an image shape: BITPIX %d, NAXIS %d%s%s", im->bitpix,
                    im->naxis, why[0] ? ": " : "", why);
        return TESS_EINVAL;
    }
    /* The header does not depend on the axes' lengths: write it for one pixel. */
    fitswrite_image one = *im;
    for (int i = 0; i < one.naxis; i++)
        one.naxes[i] = 1;
    const double zero = 0.0;
    fitswrite *w = NULL;
    unsigned char *out = NULL;
    size_t small = 0;
    int rc = fitswrite_new_mem(4 * FITSCARD_BLOCK, &w);
    if (rc == 0) {
        rc = fitswrite_image_hdu(w, &one, &zero, err, errlen);
        if (rc == 0)
            rc = fitswrite_take(w, &out, &small);
        else
            fitswrite_close(w, NULL, 0);
    }
    free(out);
    if (rc == 0 && small < FITSCARD_BLOCK)
        rc = TESS_EIO;
    if (rc) {
        if (err && errlen && !err[0])
            tess_seterr(err, errlen, "cannot write the header in memory%s",
                        rc == TESS_ENOMEM ? ": out of memory" : "");
        return rc;
    }
    size_t blocks = bytes / FITSCARD_BLOCK + (bytes % FITSCARD_BLOCK != 0);
    size_t data;
    if (tess_size_mul(blocks, FITSCARD_BLOCK, &data) ||
        tess_size_add(small - FITSCARD_BLOCK, data, len)) {
        tess_seterr(err, errlen, "the file's size overflows");
        return TESS_EINVAL;
    }
    return 0;
}

int fitswrite_table_hdu(fitswrite *w, const char *extname, long nrows, int ncols,
                        const fitswrite_column *cols, const char *cards, int ncards,
                        char *err, size_t errlen)
{
    if (nrows < 0 || ncols < 1 || ncols > 999 || !cols || ncards < 0 || (ncards > 0 && !cards)) {
        tess_seterr(err, errlen, "not a table shape: %ld rows, %d columns", nrows, ncols);
        return TESS_EINVAL;
    }
    char **ttype = calloc((size_t)ncols * 3, sizeof(char *));
    if (!ttype) {
        tess_seterr(err, errlen, "out of memory");
        return TESS_ENOMEM;
    }
    char **tform = ttype + ncols, **tunit = ttype + 2 * ncols;
    for (int i = 0; i < ncols; i++) {
        ttype[i] = (char *)cols[i].name;
        tform[i] = (char *)cols[i].form;
        tunit[i] = (char *)(cols[i].unit ? cols[i].unit : "");
    }
    int status = 0;
    fits_create_tbl(w->f, BINARY_TBL, nrows, ncols, ttype, tform, tunit, extname, &status);
    free(ttype);
    if (status) {
        set_err(err, errlen, "cannot add a table to", w, status);
        return status == MEMORY_ALLOCATION ? TESS_ENOMEM : TESS_EINVAL;
    }
    for (int i = 0; i < ncols && nrows > 0; i++) {
        if (cols[i].ivalues)
            fits_write_col(w->f, TLONG, i + 1, 1, 1, nrows, (void *)cols[i].ivalues, &status);
        else if (cols[i].dvalues)
            fits_write_col(w->f, TDOUBLE, i + 1, 1, 1, nrows, (void *)cols[i].dvalues, &status);
        if (status) {
            set_err(err, errlen, "cannot write a column of", w, status);
            return fits_rc(status);
        }
    }
    int rc = write_cards(w, cards, ncards, err, errlen);
    return rc ? rc : reserve_checksum(w, err, errlen);
}

int fitswrite_take(fitswrite *w, unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (!w->in_memory) {
        fitswrite_close(w, NULL, 0);
        return TESS_EIO;
    }
    /* The file ends where the data of its last HDU end. */
    int status = 0, rc = 0;
    LONGLONG headstart, datastart, dataend = 0;
    if (fits_flush_file(w->f, &status) ||
        fits_get_hduaddrll(w->f, &headstart, &datastart, &dataend, &status))
        rc = fits_rc(status);
    status = 0;
    fits_close_file(w->f, &status);
    fitsimg_cfitsio_unlock();
    if (!rc && (status || dataend <= 0 || (unsigned long long)dataend > w->memsize))
        rc = fits_rc(status);
    if (!rc)
        rc = fitswrite_checksum_mem(w->mem, (size_t)dataend, NULL, 0);
    if (rc) {
        free(w->mem);
    } else {
        *out = w->mem;
        *outlen = (size_t)dataend;
    }
    free(w);
    return rc;
}

int fitswrite_close(fitswrite *w, char *err, size_t errlen)
{
    if (!w)
        return 0;
    int status = 0;
    fits_close_file(w->f, &status);
    if (w->in_memory)
        status = 0;            /* the buffer is discarded: nothing was lost */
    if (status)
        set_err(err, errlen, "cannot write", w, status);
    fitsimg_cfitsio_unlock();
    free(w->mem);
    free(w);
    return status ? TESS_EIO : 0;
}

/* The header of `im` as cfitsio writes it, with NAXISn as given: cfitsio builds the header
 * of the same image with every axis of length 1 in memory (a data unit it would otherwise
 * fill with zeros on close, block by block: 4 GB of writes for a 4 GB cube), then the
 * NAXISn cards are set to the real lengths.  *hdr (malloc'd) holds *len bytes, whole
 * blocks, CHECKSUM and DATASUM with their placeholder values. */
static int image_header(const fitswrite_image *im, unsigned char **hdr, size_t *len,
                        char *err, size_t errlen)
{
    *hdr = NULL;
    *len = 0;
    fitswrite_image one = *im;
    for (int i = 0; i < im->naxis && i < FITSIMG_MAXDIM; i++)
        one.naxes[i] = 1;
    fitswrite *w = NULL;
    int rc = fitswrite_new_mem(0, &w);
    if (rc) {
        tess_seterr(err, errlen, "out of memory");
        return rc;
    }
    rc = fitswrite_image_hdu(w, &one, NULL, err, errlen);
    int status = 0;
    LONGLONG headstart = 0, ds = 0, de = 0;
    if (!rc && (fits_flush_file(w->f, &status) ||
                fits_get_hduaddrll(w->f, &headstart, &ds, &de, &status))) {
        set_err(err, errlen, "cannot write the header of", w, status);
        rc = fits_rc(status);
    }
    if (!rc && (ds <= 0 || ds % FITSCARD_BLOCK != 0 || (unsigned long long)ds > w->memsize)) {
        tess_seterr(err, errlen, "cannot write the header: cfitsio put the data at byte %lld",
                    (long long)ds);
        rc = TESS_EIO;
    }
    if (!rc && !(*hdr = malloc((size_t)ds))) {
        tess_seterr(err, errlen, "out of memory");
        rc = TESS_ENOMEM;
    }
    if (!rc) {
        memcpy(*hdr, w->mem, (size_t)ds);
        *len = (size_t)ds;
    }
    fitswrite_close(w, NULL, 0);
    for (size_t c = 0; !rc && c + FITSCARD_LEN <= *len; c += FITSCARD_LEN) {
        char *card = (char *)*hdr + c;
        if (memcmp(card, "NAXIS", 5) != 0 || card[5] < '1' || card[5] > '9' || card[6] != ' ')
            continue;
        int n = card[5] - '0';
        if (n > im->naxis)
            continue;
        char key[8], comment[32], fresh[FITSCARD_LEN + 1];
        snprintf(key, sizeof key, "NAXIS%d", n);
        snprintf(comment, sizeof comment, "length of data axis %d", n);
        if (fitscard_int(fresh, key, im->naxes[n - 1], comment) != 0) {
            tess_seterr(err, errlen, "cannot write %s = %ld", key, im->naxes[n - 1]);
            rc = TESS_EINVAL;
        } else {
            memcpy(card, fresh, FITSCARD_LEN);
        }
    }
    if (rc) {
        free(*hdr);
        *hdr = NULL;
        *len = 0;
    }
    return rc;
}

int fitswrite_file(const char *path, const fitswrite_image *im, long long *datastart,
                   char *err, size_t errlen)
{
    *datastart = 0;
    char why[256] = "";
    size_t nbytes = 0;
    if (im->naxis < 1 || im->naxis > FITSIMG_MAXDIM ||
        fitscard_check_image(im->bitpix, im->naxis, im->naxes, FITSIMG_MAXDIM, -1, 0, &nbytes,
                             why, sizeof why) != 0) {
        tess_seterr(err, errlen, "not an image shape: BITPIX %d, NAXIS %d%s%s", im->bitpix,
                    im->naxis, why[0] ? ": " : "", why);
        return TESS_EINVAL;
    }
    unsigned char *hdr = NULL;
    size_t hlen = 0;
    int rc = image_header(im, &hdr, &hlen, err, errlen);
    if (rc)
        return rc;
    /* Whole blocks of data (FITS 4.0, section 3.3.2), left as a hole: zeros once read. */
    long long size = (long long)hlen + (long long)((nbytes + FITSCARD_BLOCK - 1) /
                                                   FITSCARD_BLOCK) * FITSCARD_BLOCK;
    if (unlink(path) != 0 && errno != ENOENT) {
        tess_seterr(err, errlen, "cannot replace %s: %s", path, strerror(errno));
        free(hdr);
        return TESS_EIO;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || tess_write_all(fd, hdr, hlen) != 0 || ftruncate(fd, (off_t)size) != 0;
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    free(hdr);
    if (bad) {
        tess_seterr(err, errlen, "cannot create %s: %s", path, strerror(saved));
        unlink(path);
        return TESS_EIO;
    }
    long long ds = 0;
    rc = fitsimg_data_offset(path, 0, &ds, err, errlen);
    if (!rc && ds != (long long)hlen) {
        tess_seterr(err, errlen, "%s: the data start at byte %lld, not %zu", path, ds, hlen);
        rc = TESS_EIO;
    }
    if (rc) {
        unlink(path);
        return rc;
    }
    *datastart = ds;
    return 0;
}

void fitswrite_encode(int bitpix, double bzero, const double *v, unsigned char *dst, long n)
{
    /* One loop per BITPIX, the test outside it: the loops are hot (every FITS tile and
     * cutout) and compile to straight stores. */
    switch (bitpix) {
    case -32:
        for (long i = 0; i < n; i++) {
            float f = (float)v[i];
            uint32_t u;
            memcpy(&u, &f, 4);
            unsigned char *d = dst + 4 * (size_t)i;
            d[0] = (unsigned char)(u >> 24);
            d[1] = (unsigned char)(u >> 16);
            d[2] = (unsigned char)(u >> 8);
            d[3] = (unsigned char)u;
        }
        break;
    case -64:
        for (long i = 0; i < n; i++) {
            uint64_t u;
            memcpy(&u, &v[i], 8);
            unsigned char *d = dst + 8 * (size_t)i;
            for (int k = 0; k < 8; k++)
                d[k] = (unsigned char)(u >> (56 - 8 * k));
        }
        break;
    case 8:
        for (long i = 0; i < n; i++)
            dst[i] = (unsigned char)lrint(v[i] - bzero);
        break;
    default: {
        int es = (bitpix < 0 ? -bitpix : bitpix) / 8;
        for (long i = 0; i < n; i++) {
            uint64_t u = (uint64_t)llrint(v[i] - bzero);
            unsigned char *d = dst + (size_t)i * (size_t)es;
            for (int k = 0; k < es; k++)
                d[k] = (unsigned char)(u >> (8 * (es - 1 - k)));
        }
    }
    }
}

/* ---- checksums (FITS 4.0, appendix J) ---------------------------------------------- */

/* Where the HDUs being summed lie: a buffer in memory, or an open file. */
typedef struct sum_src {
    unsigned char *mem;     /* the whole file in memory, or NULL */
    size_t memlen;
    int fd;                 /* else the file */
    unsigned long long filelen;
    const uint32_t *known;  /* DATASUMs of the first nknown HDUs, given (not read) */
    int nknown;
} sum_src;

static int src_read(sum_src *s, unsigned long long off, void *buf, size_t n)
{
    if (s->mem) {
        if (off > s->memlen || n > s->memlen - off)
            return TESS_EINVAL;
        memcpy(buf, s->mem + off, n);
        return 0;
    }
    if (off > s->filelen || n > s->filelen - off)
        return TESS_EINVAL;
    return tess_pread_all(s->fd, buf, n, (off_t)off) == 0 ? 0 : TESS_EIO;
}

static int src_write(sum_src *s, unsigned long long off, const void *buf, size_t n)
{
    if (s->mem) {
        memcpy(s->mem + off, buf, n);
        return 0;
    }
    return tess_pwrite_all(s->fd, buf, n, (off_t)off) == 0 ? 0 : TESS_EIO;
}

static uint32_t fold32(uint64_t s)
{
    while (s >> 32)
        s = (s & 0xffffffffu) + (s >> 32);
    return (uint32_t)s;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* Four 32-bit lanes (GCC vector extensions: SSE2 on x86-64, NEON on arm64, scalar
 * elsewhere). */
typedef uint32_t sum_v4u __attribute__((vector_size(16)));

/* The sum of the big-endian words, without swapping them.  A word stored as bytes
 * c0 c1 c2 c3 loads on a little-endian host as u = c0 + c1 2^8 + c2 2^16 + c3 2^24; its
 * stored value is c0 2^24 + c1 2^16 + c2 2^8 + c3.  With a = u & 0x00ff00ff = c0 + c2 2^16
 * and b = (u >> 8) & 0x00ff00ff = c1 + c3 2^16, and 2^32 = 1 modulo 2^32 - 1 (the modulus
 * of the ones' complement sum), 2^24 a + 2^16 b = c0 2^24 + c2 2^8 + c1 2^16 + c3: the
 * stored value.  So the sum is 2^24 A + 2^16 B for A, B the sums of a and b, which add
 * four words at a time in 32-bit lanes (each a or b below 2^24 + 2^8: 255 of them fit a
 * lane) and are widened to 64 bits every 255 vectors.  Returns the unfolded sum. */
static uint64_t sum_be_words(const unsigned char *p, size_t nw)
{
    const sum_v4u mask = { 0x00ff00ffu, 0x00ff00ffu, 0x00ff00ffu, 0x00ff00ffu };
    uint64_t a = 0, b = 0;
    size_t nv = nw / 4;
    while (nv > 0) {
        size_t m = nv < 255 ? nv : 255;
        sum_v4u va = { 0, 0, 0, 0 }, vb = { 0, 0, 0, 0 };
        for (size_t i = 0; i < m; i++) {
            sum_v4u u;
            memcpy(&u, p + 16 * i, 16);
            va += u & mask;
            vb += (u >> 8) & mask;
        }
        a += (uint64_t)va[0] + va[1] + va[2] + va[3];
        b += (uint64_t)vb[0] + vb[1] + vb[2] + vb[3];
        p += 16 * m;
        nv -= m;
    }
    uint64_t acc = ((uint64_t)fold32(a) << 24) + ((uint64_t)fold32(b) << 16);
    for (size_t i = 0; i < nw % 4; i++) {     /* the last words, one at a time */
        uint32_t w;
        memcpy(&w, p + 4 * i, 4);
        acc += __builtin_bswap32(w);
    }
    return acc;
}
#else
/* Big-endian hosts load the stored values as they are.  Returns the unfolded sum. */
static uint64_t sum_be_words(const unsigned char *p, size_t nw)
{
    uint64_t acc = 0;
    for (size_t i = 0; i < nw; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4);
        acc += w;
        if (acc >> 62)
            acc = fold32(acc);
    }
    return acc;
}
#endif

/* Adds the big-endian 32-bit words of p (n bytes, a multiple of 4) to the ones'
 * complement sum `sum` (kept unfolded in 64 bits); fold with fold32. */
static uint64_t sum_words(const unsigned char *p, size_t n, uint64_t sum)
{
    return (uint64_t)fold32(sum) + fitswrite_sum32(p, n, 0);
}

uint32_t fitswrite_sum32(const void *p, size_t n, uint32_t sum)
{
    const unsigned char *b = p;
    uint64_t acc = sum;
    size_t nw = n / 4;
    /* In pieces of at most 2^30 words, so that neither the lanes' 64-bit totals nor acc
     * can overflow. */
    while (nw > 0) {
        size_t m = nw < ((size_t)1 << 30) ? nw : ((size_t)1 << 30);
        acc = (uint64_t)fold32(acc) + fold32(sum_be_words(b, m));
        b += 4 * m;
        nw -= m;
    }
    return fold32(acc);
}

uint32_t fitswrite_sum32_at(const void *p, size_t n, unsigned long long offset, uint32_t sum)
{
    const unsigned char *b = p;
    uint64_t acc = sum;
    unsigned r = (unsigned)(offset % 4);
    if (r != 0 && n > 0) {          /* the bytes before the first whole word */
        uint32_t w = 0;
        size_t k = 0;
        for (; r + k < 4 && k < n; k++)
            w |= (uint32_t)b[k] << (8 * (3 - r - k));
        acc += w;
        b += k;
        n -= k;
    }
    size_t whole = n / 4 * 4;
    acc += fitswrite_sum32(b, whole, 0);
    if (whole < n) {                /* the bytes after the last whole word */
        uint32_t w = 0;
        for (size_t k = 0; whole + k < n; k++)
            w |= (uint32_t)b[whole + k] << (8 * (3 - k));
        acc += w;
    }
    return fold32(acc);
}

uint32_t fitswrite_sum_add(uint32_t a, uint32_t b)
{
    return fold32((uint64_t)a + b);
}

/* The bytes of the data unit the header `cards` (n cards) describes, padding included
 * (FITS 4.0, sections 4.4.1 and 7): |BITPIX|/8 x GCOUNT x (PCOUNT + NAXIS1 x ... x
 * NAXISn), 0 for NAXIS = 0.  Returns 0 or TESS_EINVAL. */
static int data_bytes(const char *cards, int n, unsigned long long *out)
{
    char v[72];
    long bitpix = 0, naxis = 0, pcount = 0, gcount = 1;
    if (!fitscard_get(cards, n, "BITPIX", v, sizeof v) || sscanf(v, "%ld", &bitpix) != 1 ||
        !fitscard_get(cards, n, "NAXIS", v, sizeof v) || sscanf(v, "%ld", &naxis) != 1 ||
        naxis < 0 || naxis > 999 || bitpix == 0 || bitpix % 8 != 0)
        return TESS_EINVAL;
    if (fitscard_get(cards, n, "PCOUNT", v, sizeof v) && sscanf(v, "%ld", &pcount) != 1)
        return TESS_EINVAL;
    if (fitscard_get(cards, n, "GCOUNT", v, sizeof v) && sscanf(v, "%ld", &gcount) != 1)
        return TESS_EINVAL;
    unsigned long long prod = naxis > 0;
    for (long k = 1; k <= naxis; k++) {
        char key[32];
        long ax = 0;
        snprintf(key, sizeof key, "NAXIS%ld", k);
        if (!fitscard_get(cards, n, key, v, sizeof v) || sscanf(v, "%ld", &ax) != 1 || ax < 0)
            return TESS_EINVAL;
        prod *= (unsigned long long)ax;
    }
    if (pcount < 0 || gcount < 0)
        return TESS_EINVAL;
    unsigned long long bytes = (unsigned long long)(bitpix < 0 ? -bitpix : bitpix) / 8 *
                               (unsigned long long)gcount * ((unsigned long long)pcount + prod);
    *out = (bytes + FITSCARD_BLOCK - 1) / FITSCARD_BLOCK * FITSCARD_BLOCK;
    return 0;
}

/* The index of the card `key` among n, or -1. */
static int card_index(const char *cards, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (fitscard_key_is(cards + (size_t)i * FITSCARD_LEN, key))
            return i;
    return -1;
}

/* Sets CHECKSUM and DATASUM of every HDU of s, HDU by HDU: the header is read up to END;
 * when it lacks the two cards they are put before END if its last block has room for
 * them (else TESS_EINVAL); DATASUM is the ones' complement sum of the data unit, and
 * CHECKSUM the encoded complement of the sum of the whole HDU (fits_encode_chksum), so
 * that the HDU sums to -0. */
static int checksum_all(sum_src *s, char *err, size_t errlen)
{
    unsigned long long total = s->mem ? s->memlen : s->filelen, off = 0;
    size_t chunk = 364 * FITSCARD_BLOCK;          /* about 1 MiB, whole blocks */
    unsigned char *buf = malloc(chunk);
    char *head = NULL;
    size_t hcap = 0;
    int rc = buf ? 0 : TESS_ENOMEM, hdu = 0;
    while (rc == 0 && off < total) {
        /* the header, block by block up to the one holding END */
        size_t hlen = 0;
        int end = -1;
        while (end < 0) {
            if (hlen + FITSCARD_BLOCK > hcap) {
                size_t nc = hcap ? hcap * 2 : 4 * FITSCARD_BLOCK;
                char *nh = realloc(head, nc + 1);
                if (!nh) {
                    rc = TESS_ENOMEM;
                    break;
                }
                head = nh;
                hcap = nc;
            }
            if ((rc = src_read(s, off + hlen, head + hlen, FITSCARD_BLOCK)) != 0)
                break;
            for (int i = 0; i < 36 && end < 0; i++)
                if (fitscard_key_is(head + hlen + (size_t)i * FITSCARD_LEN, "END"))
                    end = (int)(hlen / FITSCARD_LEN) + i;
            hlen += FITSCARD_BLOCK;
        }
        if (rc)
            break;
        head[hlen] = '\0';
        int ncards = (int)(hlen / FITSCARD_LEN);
        unsigned long long dlen = 0;
        if ((rc = data_bytes(head, end, &dlen)) != 0)
            break;
        int ic = card_index(head, end, "CHECKSUM"), id = card_index(head, end, "DATASUM");
        if (ic < 0 || id < 0) {
            int need = (ic < 0) + (id < 0);
            if (end + need >= ncards) {
                rc = TESS_EINVAL;
                break;
            }
            char endcard[FITSCARD_LEN];
            memcpy(endcard, head + (size_t)end * FITSCARD_LEN, FITSCARD_LEN);
            if (ic < 0) {
                ic = end++;
                fitscard_string(head + (size_t)ic * FITSCARD_LEN, "CHECKSUM",
                                "0000000000000000", 0, "HDU checksum");
            }
            if (id < 0) {
                id = end++;
                fitscard_string(head + (size_t)id * FITSCARD_LEN, "DATASUM", "0", 0,
                                "data unit checksum");
            }
            memcpy(head + (size_t)end * FITSCARD_LEN, endcard, FITSCARD_LEN);
        }
        if (off + hlen > total || dlen > total - off - hlen) {
            rc = TESS_EINVAL;
            break;
        }
        int given = hdu < s->nknown;
        uint64_t dsum = given ? s->known[hdu] : 0;
        for (unsigned long long at = 0; !given && rc == 0 && at < dlen; at += chunk) {
            size_t n = dlen - at < chunk ? (size_t)(dlen - at) : chunk;
            if ((rc = src_read(s, off + hlen + at, buf, n)) == 0)
                dsum = sum_words(buf, n, dsum);
        }
        if (rc)
            break;
        uint32_t d32 = fold32(dsum);
        char dtext[16];
        snprintf(dtext, sizeof dtext, "%lu", (unsigned long)d32);
        char *dc = head + (size_t)id * FITSCARD_LEN, *cc = head + (size_t)ic * FITSCARD_LEN;
        fitscard_string(dc, "DATASUM", dtext, 0, "data unit checksum");
        fitscard_string(cc, "CHECKSUM", "0000000000000000", 0, "HDU checksum");
        uint32_t all = fold32((uint64_t)fold32(sum_words((unsigned char *)head, hlen, 0)) + d32);
        char ascii[17];
        fits_encode_chksum((unsigned long)all, TRUE, ascii);
        memcpy(cc + 11, ascii, 16);       /* in place of the zeros: the quote is column 11 */
        if ((rc = src_write(s, off, head, hlen)) != 0)
            break;
        off += hlen + dlen;
        hdu++;
    }
    if (rc)
        tess_seterr(err, errlen, rc == TESS_ENOMEM ? "out of memory while summing FITS HDUs"
                    : rc == TESS_EIO ? "cannot read or write the FITS file to sum it"
                    : "not a FITS file whose CHECKSUM and DATASUM can be set (HDU at byte %llu)",
                    off);
    free(buf);
    free(head);
    return rc;
}

int fitswrite_checksum_mem(unsigned char *fits, size_t len, char *err, size_t errlen)
{
    sum_src s = { .mem = fits, .memlen = len, .fd = -1 };
    return checksum_all(&s, err, errlen);
}

int fitswrite_checksum_file(const char *path, char *err, size_t errlen)
{
    return fitswrite_checksum_file_sums(path, NULL, 0, err, errlen);
}

int fitswrite_checksum_file_sums(const char *path, const uint32_t *datasum, int nknown,
                                 char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TESS_EIO;
    }
    sum_src s = { .fd = fd, .filelen = (unsigned long long)st.st_size, .known = datasum,
                  .nknown = datasum && nknown > 0 ? nknown : 0 };
    char why[256] = "";
    int rc = checksum_all(&s, why, sizeof why);
    if (close(fd) != 0 && rc == 0) {
        tess_seterr(why, sizeof why, "cannot close: %s", strerror(errno));
        rc = TESS_EIO;
    }
    if (rc)
        tess_seterr(err, errlen, "%s: %s", path, why);
    return rc;
}
