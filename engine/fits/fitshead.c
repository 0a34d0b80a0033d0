/* FITS headers read for the frames of a stack: a plain primary header parsed in place, any HDU's image parameters and header hash through cfitsio (fitshead.h). */
#include "engine/fits/fitshead.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/hash.h"

#include <errno.h>
#include <fitsio.h>
#include <limits.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

int fitshead_plain(const char *path, int *bitpix, int *naxis, long *naxes,
                   long long *datastart, double *bscale, double *bzero,
                   int *has_blank, long long *blank, uint64_t *hhash)
{
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    char blk[2880];
    uint64_t h = TESS_FNV64_OFFSET;
    int ok = 0, seen_bitpix = 0, seen_naxis = 0, seen_bscale = 0, seen_bzero = 0;
    int seen_ax[FITSIMG_MAXDIM] = {0};
    for (int b = 0; b < 100 && !ok; b++) {
        if (pread(fd, blk, sizeof(blk), (off_t)b * 2880) != (ssize_t)sizeof(blk))
            break;
        h = tess_fnv1a64(blk, sizeof(blk), h);
        int bad = 0;
        for (int c = 0; c < 36 && !ok && !bad; c++) {
            const char *card = blk + c * 80;
            long long iv;
            double dv;
            int val = card[8] == '=' && card[9] == ' ';
            if (b == 0 && c == 0) {
                bad = memcmp(card, "SIMPLE  = ", 10) != 0 || card[29] != 'T';
            } else if (fitscard_key_is(card, "END")) {
                ok = 1;
                *datastart = (long long)(b + 1) * 2880;
            } else if (!val) {
                continue;   /* COMMENT, HISTORY, blank cards */
            } else if (fitscard_key_is(card, "BITPIX") && !seen_bitpix) {
                bad = !fitscard_number(card, &iv, NULL) ||
                      (iv != 8 && iv != 16 && iv != 32 && iv != 64 && iv != -32 && iv != -64);
                *bitpix = (int)iv;
                seen_bitpix = 1;
            } else if (fitscard_key_is(card, "NAXIS") && !seen_naxis) {
                bad = !fitscard_number(card, &iv, NULL) || iv < 2 || iv > 999;
                *naxis = (int)iv;
                seen_naxis = 1;
            } else if (memcmp(card, "NAXIS", 5) == 0 && card[5] >= '1' && card[5] <= '4' &&
                       card[6] == ' ') {
                int a = card[5] - '1';
                if (!seen_ax[a]) {
                    bad = !fitscard_number(card, &iv, NULL) || iv < 1 || iv > 2147483647LL;
                    naxes[a] = (long)iv;
                    seen_ax[a] = 1;
                }
            } else if (fitscard_key_is(card, "GROUPS")) {
                bad = 1;    /* random groups */
            } else if (fitscard_key_is(card, "BSCALE") && !seen_bscale) {
                bad = !fitscard_number(card, NULL, &dv);
                *bscale = dv;
                seen_bscale = 1;
            } else if (fitscard_key_is(card, "BZERO") && !seen_bzero) {
                bad = !fitscard_number(card, NULL, &dv);
                *bzero = dv;
                seen_bzero = 1;
            } else if (fitscard_key_is(card, "BLANK") && !*has_blank) {
                bad = !fitscard_number(card, &iv, NULL);
                *blank = iv;
                *has_blank = 1;
            }
        }
        if (bad)
            break;
    }
    close(fd);
    if (!ok || !seen_bitpix || !seen_naxis)
        return 0;
    for (int a = 0; a < FITSIMG_MAXDIM; a++) {
        if (a < *naxis && !seen_ax[a])
            return 0;
        if (a >= *naxis)
            naxes[a] = 1;
    }
    if (*bitpix < 0)
        *has_blank = 0;   /* as cfitsio: BLANK only for integer images */
    *hhash = h;
    return 1;
}

/* A descriptor of `path` for cfitsio to open (tess_fd_name): a regular file that is not
 * whole-file compressed.  Returns it (>= 0; the caller closes it), or TESS_EIO / TESS_EINVAL
 * with err. */
static int open_for_cfitsio(const char *path, char *err, size_t errlen)
{
    int fd = tess_open_regular(path, 0, NULL, err, errlen);
    if (fd < 0)
        return TESS_EIO;
    int rc = fitsimg_check_fd_not_compressed(fd, path, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int fitshead_image_params(const char *path, int hdu, int *compressed, int *bitpix, int *naxis,
                          long *naxes, long long *datastart, double *bscale, double *bzero,
                          int *has_blank, long long *blank, char *err, size_t errlen)
{
    fitsfile *ff = NULL;
    int status = 0;
    LONGLONG headstart = 0, dataend = 0;
    int fd = open_for_cfitsio(path, err, errlen);
    if (fd < 0)
        return fd;
    char name[PATH_MAX];
    fitsimg_cfitsio_lock();
    fits_open_diskfile(&ff, tess_fd_name(fd, path, name, sizeof(name)), READONLY, &status);
    close(fd);
    if (!status)
        fits_movabs_hdu(ff, hdu + 1, NULL, &status);
    if (!status)
        *compressed = fits_is_compressed_image(ff, &status);
    if (!status)
        fits_get_img_param(ff, FITSIMG_MAXDIM, bitpix, naxis, naxes, &status);
    if (!status)
        fits_get_hduaddrll(ff, &headstart, datastart, &dataend, &status);
    if (!status) {
        int st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BSCALE", bscale, NULL, &st2))
            *bscale = 1;
        st2 = 0;
        if (fits_read_key(ff, TDOUBLE, "BZERO", bzero, NULL, &st2))
            *bzero = 0;
        st2 = 0;
        if (*bitpix > 0 && fits_read_key(ff, TLONGLONG, "BLANK", blank, NULL, &st2) == 0)
            *has_blank = 1;
    }
    char msg[FLEN_ERRMSG] = "";
    if (status)
        fits_get_errstatus(status, msg);
    int st3 = 0;
    if (ff)
        fits_close_file(ff, &st3);
    fitsimg_cfitsio_unlock();
    if (status) {
        tess_seterr(err, errlen, "%s: %s", path, msg);
        return TESS_EIO;
    }
    return 0;
}

int fitshead_hash(const char *path, int hdu, uint64_t *hash, char *err, size_t errlen)
{
    fitsfile *ff = NULL;
    int status = 0;
    LONGLONG headstart = 0, datastart = 0, dataend = 0;
    int fd = open_for_cfitsio(path, err, errlen);
    if (fd < 0)
        return fd;
    char name[PATH_MAX], msg[FLEN_ERRMSG] = "";
    fitsimg_cfitsio_lock();
    fits_open_diskfile(&ff, tess_fd_name(fd, path, name, sizeof(name)), READONLY, &status);
    if (!status)
        fits_movabs_hdu(ff, hdu + 1, NULL, &status);
    if (!status)
        fits_get_hduaddrll(ff, &headstart, &datastart, &dataend, &status);
    if (status)
        fits_get_errstatus(status, msg);
    int st2 = 0;
    if (ff)
        fits_close_file(ff, &st2);
    fitsimg_cfitsio_unlock();
    if (status) {
        close(fd);
        tess_seterr(err, errlen, "%s: %s", path, msg);
        return TESS_EIO;
    }
    uint64_t h = TESS_FNV64_OFFSET;
    char blk[2880];
    for (LONGLONG at = headstart; at < datastart; at += (LONGLONG)sizeof(blk)) {
        size_t want = datastart - at < (LONGLONG)sizeof(blk) ? (size_t)(datastart - at)
                                                             : sizeof(blk);
        if (tess_pread_all(fd, blk, want, (off_t)at) != 0) {
            tess_seterr(err, errlen, "cannot read the header of %s: %s", path, strerror(errno));
            close(fd);
            return TESS_EIO;
        }
        h = tess_fnv1a64(blk, want, h);
    }
    close(fd);
    *hash = h;
    return 0;
}
