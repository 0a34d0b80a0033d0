/* Unit tests of engine/fits/fitsimg and the FITS and NPY encoders: real files against astropy. */
#include <check.h>
#include <errno.h>
#include <fitsio.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/image/encode.h"
#include "engine/fits/fitscard.h"
#include "engine/fits/fitsimg.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#define DEMO(name) TESSERA_DEMO_DIR "/" name

/* Reference values below were read with Debian's astropy 5.2.1 / numpy 1.24.2
 * (/usr/bin/python3), as float64 physical values: raw * BSCALE + BZERO. */

/* A scratch directory under /tmp, removed with everything in it by rm_tmpdir. */
static char tmpdir[64];

static void make_tmpdir(void)
{
    tt_tmpdir_make(tmpdir, sizeof tmpdir, "fitsimg");
}

static void rm_tmpdir(const char *const *names, int n)
{
    tt_tmpdir_remove(tmpdir, names, n);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    ck_assert_ptr_nonnull(in);
    FILE *out = fopen(to, "wb");
    ck_assert_ptr_nonnull(out);
    char b[65536];
    size_t n;
    while ((n = fread(b, 1, sizeof b, in)) > 0)
        ck_assert_uint_eq(fwrite(b, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

static double pixel(const char *path, int hdu, long z, long x, long y)
{
    double v = -1.0;
    char err[256] = "";
    int rc = fitsimg_read_region(path, hdu, z, x, y, 1, 1, &v, err, sizeof err);
    ck_assert_msg(rc == 0, "read (%ld,%ld,%ld) of %s: %d %s", x, y, z, path, rc, err);
    return v;
}

START_TEST(test_info_m13)
{
    fitsimg_info info;
    char err[256] = "";
    const char *path = DEMO("M13_blue_0003.fits");
    ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 2);
    ck_assert_int_eq(info.naxes[0], 1392);
    ck_assert_int_eq(info.naxes[1], 1040);
    ck_assert_int_eq(info.naxes[2], 1);
    ck_assert_int_eq(info.naxes[3], 1);
    ck_assert_int_eq(info.bitpix, 16);          /* as stored, not USHORT_IMG */
    ck_assert_double_eq(info.bscale, 1.0);
    ck_assert_double_eq(info.bzero, 32768.0);
    ck_assert_int_eq(info.has_blank, 0);
    ck_assert_str_eq(info.bunit, "");
    ck_assert_int_eq(info.nkeys, 26);           /* astropy: len(header) == 26, END excluded */
    ck_assert_uint_eq(strlen(info.header), 26 * 80);
    ck_assert_int_eq(strncmp(info.header, "SIMPLE  =                    T", 30), 0);
    ck_assert_int_eq(strncmp(info.header + 25 * 80, "HISTORY  Process Calibrate", 26), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(info.file_size, (long long)st.st_size);
    ck_assert_int_eq(info.mtime_ns, (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);

    char val[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "INSTRUME", val, sizeof val), 1);
    ck_assert_str_eq(val, "Orion SSDSI");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "EXPTIME", val, sizeof val), 1);
    ck_assert_str_eq(val, "5.0000000000000000");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "CBLACK", val, sizeof val), 1);
    ck_assert_str_eq(val, "504");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "CSTRETCH", val, sizeof val), 1);
    ck_assert_str_eq(val, "Medium");            /* trailing blanks of the string trimmed */
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "HISTORY", val, sizeof val), 1);
    ck_assert_str_eq(val, "Process Calibrate");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS1", val, sizeof val), 1);
    ck_assert_str_eq(val, "1392");
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "END", val, sizeof val), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS3", val, sizeof val), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "INSTRUMENTX", val, sizeof val), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "", val, sizeof val), 0);
    char small[6];                              /* truncation keeps a NUL */
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "INSTRUME", small, sizeof small), 1);
    ck_assert_str_eq(small, "Orion");
    fitsimg_info_release(&info);
    ck_assert_ptr_null(info.header);
    fitsimg_info_release(&info);                /* twice is harmless */
}
END_TEST

START_TEST(test_header_get_quotes_and_comments)
{
    char hdr[4 * 80 + 1];
    snprintf(hdr, sizeof hdr, "%-80s%-80s%-80s%-80s",
             "OBJECT  = 'O''Brien  '          / a quote inside",
             "EQUINOX =               2000.0 / with comment",
             "UNDEF   =                      / no value",
             "LONGKEY1= '  lead'");
    char v[80];
    ck_assert_int_eq(fitscard_get(hdr, 4, "OBJECT", v, sizeof v), 1);
    ck_assert_str_eq(v, "O'Brien");
    ck_assert_int_eq(fitscard_get(hdr, 4, "EQUINOX", v, sizeof v), 1);
    ck_assert_str_eq(v, "2000.0");
    ck_assert_int_eq(fitscard_get(hdr, 4, "UNDEF", v, sizeof v), 1);
    ck_assert_str_eq(v, "");
    ck_assert_int_eq(fitscard_get(hdr, 4, "LONGKEY1", v, sizeof v), 1);
    ck_assert_str_eq(v, "  lead");              /* leading blanks of strings are significant */
    ck_assert_int_eq(fitscard_get(hdr, 4, "OBJEC", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(NULL, 0, "OBJECT", v, sizeof v), 0);
}
END_TEST

/* fitsimg_check_scaling: what gives values passes, what cannot is refused. */
START_TEST(test_check_scaling)
{
    char e[160];
    ck_assert_int_eq(fitsimg_check_scaling(16, 1.0, 32768.0, e, sizeof e), 0);
    ck_assert_int_eq(fitsimg_check_scaling(-32, 1e300, 0.0, e, sizeof e), 0);
    ck_assert_int_eq(fitsimg_check_scaling(64, 1.0, 9223372036854775808.0, e, sizeof e), 0);
    ck_assert_int_eq(fitsimg_check_scaling(16, 1e30, 0.0, e, sizeof e), 0);
    ck_assert_int_eq(fitsimg_check_scaling(16, 0.0, 5.0, e, sizeof e), TESS_EINVAL);
    ck_assert_ptr_nonnull(strstr(e, "BSCALE = 0"));
    ck_assert_int_eq(fitsimg_check_scaling(16, 1e35, 0.0, e, sizeof e), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_check_scaling(8, 1.0, INFINITY, e, sizeof e), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_check_scaling(32, NAN, 0.0, e, sizeof e), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_check_scaling(32, 1e290, 0.0, e, sizeof e), 0);
    ck_assert_int_eq(fitsimg_check_scaling(32, 1e300, 0.0, e, sizeof e), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_check_scaling(64, 1e300, 0.0, e, sizeof e), TESS_EINVAL);
}
END_TEST

/* fitsimg_header_shift moves CRPIXn (alternates too) down and the DSS CNPIX1/2 up by
 * the offset, and nothing else. */
START_TEST(test_header_shift)
{
    char hdr[8 * 80 + 1];
    snprintf(hdr, sizeof hdr, "%-80s%-80s%-80s%-80s%-80s%-80s%-80s%-80s",
             "CRPIX1  =                446.0 / reference pixel",
             "CRPIX2  =                447.0",
             "CRPIX1A =                 10.5",
             "CNPIX1  =                12237",
             "CNPIX2  =                19965",
             "CRVAL1  =             85.27497",
             "CRPIX3  =                  1.0",
             "CRPIX12 =                  7.0");
    char before[sizeof hdr];
    memcpy(before, hdr, sizeof hdr);
    const double none[3] = { 0.0, 0.0, 0.0 };
    fitsimg_header_shift(hdr, 8, none, 3);
    ck_assert_int_eq(memcmp(hdr, before, sizeof hdr), 0);
    const double sh[2] = { 300.0, 400.0 };
    fitsimg_header_shift(hdr, 8, sh, 2);
    static const struct { const char *key; double want; } want[] = {
        { "CRPIX1", 146.0 }, { "CRPIX2", 47.0 }, { "CRPIX1A", -289.5 }, { "CNPIX1", 12537.0 },
        { "CNPIX2", 20365.0 }, { "CRVAL1", 85.27497 }, { "CRPIX3", 1.0 }, { "CRPIX12", 7.0 },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        char v[80];
        ck_assert_int_eq(fitscard_get(hdr, 8, want[k].key, v, sizeof v), 1);
        ck_assert_msg(strtod(v, NULL) == want[k].want, "%s = %s, want %g", want[k].key, v,
                      want[k].want);
    }
    /* Cards other than the moved ones are left byte for byte. */
    ck_assert_int_eq(memcmp(hdr + 5 * 80, before + 5 * 80, 3 * 80), 0);
}
END_TEST

START_TEST(test_region_m13_unsigned16)
{
    const char *path = DEMO("M13_blue_0003.fits");
    /* astropy: data[525, 624] == 697 (the maximum), data[109, 1376] == 0 (raw -32768). */
    ck_assert_double_eq(pixel(path, 0, 0, 624, 525), 697.0);
    ck_assert_double_eq(pixel(path, 0, 0, 1376, 109), 0.0);
    ck_assert_double_eq(pixel(path, 0, 0, 0, 0), 517.0);
    ck_assert_double_eq(pixel(path, 0, 0, 1391, 1039), 541.0);

    double r[2 * 3];
    char err[256];
    ck_assert_int_eq(fitsimg_read_region(path, 0, 0, 200, 100, 3, 2, r, err, sizeof err), 0);
    const double want[6] = {487, 520, 539, 530, 484, 540};   /* data[100:102, 200:203] */
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(r[i], want[i]);

    size_t n = 1392 * 1040;
    double *all = malloc(n * sizeof *all);
    ck_assert_ptr_nonnull(all);
    ck_assert_int_eq(fitsimg_read_region(path, 0, 0, 0, 0, 1392, 1040, all, err, sizeof err), 0);
    double lo = all[0], hi = all[0];
    for (size_t i = 0; i < n; i++) {
        ck_assert(all[i] >= 0.0 && all[i] <= 65535.0 && all[i] == floor(all[i]));
        lo = fmin(lo, all[i]);
        hi = fmax(hi, all[i]);
    }
    ck_assert_double_eq(lo, 0.0);
    ck_assert_double_eq(hi, 697.0);
    ck_assert_double_eq(all[525 * 1392 + 624], 697.0);
    free(all);
}
END_TEST

START_TEST(test_region_gc_bscale_bzero)
{
    const char *path = DEMO("gc_2mass_k.fits");
    fitsimg_info info;
    char err[256];
    ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.bitpix, 16);
    ck_assert_double_eq(info.bscale, 0.045777764213996);
    ck_assert_double_eq(info.bzero, 1500.0);
    ck_assert_int_eq(info.naxes[0], 721);
    ck_assert_int_eq(info.naxes[1], 720);
    char v[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "CTYPE1", v, sizeof v), 1);
    ck_assert_str_eq(v, "RA---TAN");
    fitsimg_info_release(&info);

    const double tol = 1e-9;
    ck_assert_double_eq_tol(pixel(path, 0, 0, 0, 0), 563.1580553605719, tol);
    ck_assert_double_eq_tol(pixel(path, 0, 0, 360, 360), 537.2020630512361, tol);
    ck_assert_double_eq_tol(pixel(path, 0, 0, 720, 719), 543.0616168706276, tol);
    ck_assert_double_eq_tol(pixel(path, 0, 0, 5, 10), 684.3775749992333, tol);
    ck_assert_double_eq_tol(pixel(path, 0, 0, 6, 10), 522.0038453321895, tol);
    ck_assert_double_eq_tol(pixel(path, 0, 0, 7, 11), 515.915402691728, tol);
}
END_TEST

START_TEST(test_region_l1448_plane20)
{
    const char *path = DEMO("l1448_13co.fits");
    fitsimg_info info;
    char err[256];
    ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 3);
    ck_assert_int_eq(info.naxes[0], 105);
    ck_assert_int_eq(info.naxes[1], 105);
    ck_assert_int_eq(info.naxes[2], 53);
    ck_assert_int_eq(info.bitpix, -32);
    fitsimg_info_release(&info);

    /* float32 values, exact in double: astropy data[20, y, x] */
    ck_assert_double_eq(pixel(path, 0, 20, 50, 50), 0.5873603820800781);
    ck_assert_double_eq(pixel(path, 0, 20, 0, 0), 1.0136362314224243);
    ck_assert_double_eq(pixel(path, 0, 20, 104, 104), 0.07356096059083939);
    ck_assert_double_eq(pixel(path, 0, 20, 60, 10), 0.74093097448349);
    ck_assert_double_eq(pixel(path, 0, 20, 104, 0), 0.41492319107055664);

    double plane[105 * 105];
    ck_assert_int_eq(fitsimg_read_region(path, 0, 20, 0, 0, 105, 105, plane, err, sizeof err), 0);
    ck_assert_double_eq(plane[50 * 105 + 50], 0.5873603820800781);
    ck_assert_double_eq(plane[10 * 105 + 60], 0.74093097448349);
}
END_TEST

START_TEST(test_info_bunit)
{
    fitsimg_info info;
    char err[256];
    ck_assert_int_eq(fitsimg_read_info(DEMO("allsky_rosat.fits"), 0, &info, err, sizeof err), 0);
    ck_assert_str_eq(info.bunit, "10**(-6)counts/s");
    ck_assert_int_eq(info.bitpix, -32);
    fitsimg_info_release(&info);
    ck_assert_int_eq(fitsimg_read_info(DEMO("gc_msx_e.fits"), 0, &info, err, sizeof err), 0);
    ck_assert_str_eq(info.bunit, "W/m^2-sr");
    ck_assert_int_eq(info.bitpix, -64);
    fitsimg_info_release(&info);
}
END_TEST

/* The stored values of write_blank_i16 (two of them BLANK). */
static const short blank_idata[10] = {0, 1, -999, 10, -32768, 32767, -999, 2, 3, 4};

/* Writes a 5 x 2 int16 image of blank_idata with BSCALE bs, BZERO bz, BLANK -999. */
static void write_blank_i16(const char *path, double bs, double bz)
{
    int st = 0;
    fitsfile *f;
    long in[2] = {5, 2};
    long blank = -999;
    fits_create_diskfile(&f, path, &st);
    fits_create_img(f, SHORT_IMG, 2, in, &st);
    fits_write_key(f, TDOUBLE, "BSCALE", &bs, NULL, &st);
    fits_write_key(f, TDOUBLE, "BZERO", &bz, NULL, &st);
    fits_write_key(f, TLONG, "BLANK", &blank, NULL, &st);
    fits_set_bscale(f, 1.0, 0.0, &st);        /* write the raw integers */
    fits_write_img(f, TSHORT, 1, 10, (short *)blank_idata, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
}

START_TEST(test_nan_and_blank)
{
    make_tmpdir();
    char fpath[256], ipath[256];
    snprintf(fpath, sizeof fpath, "%s/nan.fits", tmpdir);
    snprintf(ipath, sizeof ipath, "%s/blank.fits", tmpdir);
    int st = 0;
    fitsfile *f;

    /* 4 x 3 float image with NaN at (1, 2) */
    long fn[2] = {4, 3};
    float fdata[12];
    for (int i = 0; i < 12; i++)
        fdata[i] = (float)i * 0.5f;
    fdata[2 * 4 + 1] = NAN;
    fits_create_diskfile(&f, fpath, &st);
    fits_create_img(f, FLOAT_IMG, 2, fn, &st);
    fits_write_img(f, TFLOAT, 1, 12, fdata, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);

    /* 5 x 2 int16 image, BSCALE 0.5, BZERO 100, BLANK -999 */
    write_blank_i16(ipath, 0.5, 100.0);
    const short *idata = blank_idata;

    char err[256];
    double out[12];
    ck_assert_int_eq(fitsimg_read_region(fpath, 0, 0, 0, 0, 4, 3, out, err, sizeof err), 0);
    for (int i = 0; i < 12; i++) {
        if (i == 9)
            ck_assert(isnan(out[i]));
        else
            ck_assert_double_eq(out[i], i * 0.5);
    }

    fitsimg_info info;
    ck_assert_int_eq(fitsimg_read_info(ipath, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.bitpix, 16);
    ck_assert_int_eq(info.has_blank, 1);
    ck_assert_int_eq(info.blank, -999);
    ck_assert_double_eq(info.bscale, 0.5);
    ck_assert_double_eq(info.bzero, 100.0);
    fitsimg_info_release(&info);
    ck_assert_int_eq(fitsimg_read_region(ipath, 0, 0, 0, 0, 5, 2, out, err, sizeof err), 0);
    for (int i = 0; i < 10; i++) {
        if (idata[i] == -999)
            ck_assert_msg(isnan(out[i]), "pixel %d = %g, want NaN", i, out[i]);
        else
            ck_assert_double_eq(out[i], idata[i] * 0.5 + 100.0);
    }
    const char *names[] = {"nan.fits", "blank.fits"};
    rm_tmpdir(names, 2);
}
END_TEST

/* A tile-compressed image (an image stored in a binary table, as fpack writes it) is
 * an image HDU to cfitsio; its header comes through fits_convert_hdr2str. */
START_TEST(test_tile_compressed)
{
    make_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/rice.fits", tmpdir);
    enum { W = 50, H = 40 };
    int idata[W * H];
    for (int i = 0; i < W * H; i++)
        idata[i] = (i * 7919) % 1000 - 300;
    long naxes[2] = {W, H};
    int st = 0;
    fitsfile *f;
    fits_create_diskfile(&f, path, &st);
    fits_set_compression_type(f, RICE_1, &st);
    fits_create_img(f, LONG_IMG, 2, naxes, &st);
    fits_write_key(f, TSTRING, "BUNIT", "adu", NULL, &st);
    fits_write_img(f, TINT, 1, W * H, idata, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);

    fitsimg_info info;
    char err[256], v[80];
    ck_assert_int_eq(fitsimg_read_info(path, 1, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 2);
    ck_assert_int_eq(info.naxes[0], W);
    ck_assert_int_eq(info.naxes[1], H);
    ck_assert_int_eq(info.bitpix, 32);
    ck_assert_str_eq(info.bunit, "adu");
    ck_assert_int_eq(strncmp(info.header, "SIMPLE  =", 9), 0);   /* from ZSIMPLE */
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS1", v, sizeof v), 1);
    ck_assert_str_eq(v, "50");
    fitsimg_info_release(&info);
    double out[W * H];
    ck_assert_int_eq(fitsimg_read_region(path, 1, 0, 0, 0, W, H, out, err, sizeof err), 0);
    for (int i = 0; i < W * H; i++)
        ck_assert_double_eq(out[i], idata[i]);
    const char *names[] = {"rice.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

/* astropy's comp.fits (tests/data/astropy): its ZTENSION, ZPCOUNT and ZGCOUNT come last,
 * which fits_convert_hdr2str refuses (status 252); the header is read card by card,
 * structural cards first, without the table's and the compression's, and the pixels are
 * astropy's (its values at three places, and their sum: 34417871). */
START_TEST(test_tile_compressed_ztension_last)
{
    const char *path = TESSERA_TESTDATA_DIR "/astropy/comp.fits";
    fitsimg_info info;
    char err[256], v[80];
    ck_assert_msg(fitsimg_read_info(path, 1, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.naxes[0], 440);
    ck_assert_int_eq(info.naxes[1], 300);
    ck_assert_int_eq(info.bitpix, 16);
    static const char *const first[] = {
        "XTENSION= 'IMAGE   '           / Image extension",
        "BITPIX  =                   16 / My special comment",
        "NAXIS   =                    2 / My special naxis comment",
        "NAXIS1  =                  440", "NAXIS2  =                  300",
        "PCOUNT  =                    0 / My special PCOUNT comment",
        "GCOUNT  =                    1 / My special GCOUNT comment"};
    for (int i = 0; i < 7; i++) {
        char card[81];
        snprintf(card, sizeof card, "%-80s", first[i]);
        ck_assert_msg(memcmp(info.header + 80 * i, card, 80) == 0, "card %d: %.80s", i,
                      info.header + 80 * i);
    }
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "CTYPE1", v, sizeof v), 1);
    ck_assert_str_eq(v, "RA---SIN");
    static const char *const gone[] = {"ZTENSION", "ZIMAGE", "ZCMPTYPE", "TFORM1", "ZTILE1",
                                       "ZVAL1", "EXTNAME", "TFIELDS"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        ck_assert_msg(fitscard_get(info.header, info.nkeys, gone[i], v, sizeof v) == 0,
                      "%s kept", gone[i]);
    ck_assert_int_eq(info.nkeys, 7 + 4 + 16);   /* 4 COMMENT cards, OBJECT ... ORIGIN */
    fitsimg_info_release(&info);
    double *px = malloc(sizeof(double) * 440 * 300);
    ck_assert_ptr_nonnull(px);
    ck_assert_int_eq(fitsimg_read_region(path, 1, 0, 0, 0, 440, 300, px, err, sizeof err), 0);
    double sum = 0;
    for (int i = 0; i < 440 * 300; i++)
        sum += px[i];
    ck_assert_double_eq(sum, 34417871.0);
    ck_assert_double_eq(px[0], 7.0);
    ck_assert_double_eq(px[3], 6.0);
    free(px);
}
END_TEST

/* fitsimg_read_values: unscaled floats as stored (NaN, infinities, -0 and subnormals
 * included) through the direct read, whole or from any value on; scaled 16-bit
 * integers in float32 arithmetic with BLANK as NaN; F64 and F32 equal to
 * fitsimg_read_region and fitsimg_read_region_f32;
 * the data offset; a range past the end, and a file cut short. */
START_TEST(test_read_values)
{
    make_tmpdir();
    char fpath[256], ipath[256], cpath[256], zpath[256];
    snprintf(fpath, sizeof fpath, "%s/f.fits", tmpdir);
    snprintf(ipath, sizeof ipath, "%s/i.fits", tmpdir);
    snprintf(cpath, sizeof cpath, "%s/cut.fits", tmpdir);
    snprintf(zpath, sizeof zpath, "%s/z.fits", tmpdir);
    int st = 0;
    fitsfile *f;
    enum { W = 7, H = 5, Z = 3, N = W * H * Z };
    long fn[3] = { W, H, Z };
    float fdata[N];
    for (int i = 0; i < N; i++)
        fdata[i] = (float)i * 0.25f - 3.0f;
    fdata[4] = NAN;
    fdata[9] = INFINITY;
    fdata[10] = -INFINITY;
    fdata[11] = 1e-41f;
    fdata[12] = -0.0f;
    fits_create_diskfile(&f, fpath, &st);
    fits_create_img(f, FLOAT_IMG, 3, fn, &st);
    fits_write_img(f, TFLOAT, 1, N, fdata, &st);
    fits_close_file(f, &st);
    double bs = 0.045777764213996, bz = 1500.0;
    write_blank_i16(ipath, bs, bz);
    const short *idata = blank_idata;
    fits_create_diskfile(&f, zpath, &st);
    fits_set_compression_type(f, GZIP_1, &st);
    fits_create_img(f, FLOAT_IMG, 3, fn, &st);
    fits_write_img(f, TFLOAT, 1, N, fdata, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);

    char err[256];
    fitsimg_info info;
    ck_assert_int_eq(fitsimg_read_info(fpath, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.data_offset, 2880);
    fitsimg_info_release(&info);
    ck_assert_int_eq(fitsimg_read_info(zpath, 1, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.data_offset, -1);
    fitsimg_info_release(&info);

    float fo[N];
    for (int first = 0; first < N; first += 13) {
        memset(fo, 0x55, sizeof fo);
        ck_assert_int_eq(fitsimg_read_values(fpath, 0, FITSIMG_F32_ASTROPY, (size_t)first,
                                             (size_t)(N - first), fo, err, sizeof err), 0);
        ck_assert_int_eq(memcmp(fo, fdata + first, sizeof(float) * (size_t)(N - first)), 0);
    }
    /* The same values through cfitsio from a compressed copy (NaN kept, nothing flushed). */
    memset(fo, 0x55, sizeof fo);
    ck_assert_int_eq(fitsimg_read_values(zpath, 1, FITSIMG_F32_ASTROPY, 0, N, fo, err,
                                         sizeof err), 0);
    ck_assert_int_eq(memcmp(fo, fdata, sizeof fo), 0);
    double d[N];
    ck_assert_int_eq(fitsimg_read_values(fpath, 0, FITSIMG_F64, 0, N, d, err, sizeof err), 0);
    for (int i = 0; i < N; i++)
        ck_assert(isnan(fdata[i]) ? isnan(d[i]) : d[i] == (double)fdata[i]);

    float io[10];
    ck_assert_int_eq(fitsimg_read_values(ipath, 0, FITSIMG_F32_ASTROPY, 0, 10, io, err,
                                         sizeof err), 0);
    double region[10];
    float region32[10], v32[10];
    ck_assert_int_eq(fitsimg_read_region(ipath, 0, 0, 0, 0, 5, 2, region, err, sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_region_f32(ipath, 0, 0, 0, 0, 5, 2, region32, err,
                                             sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_values(ipath, 0, FITSIMG_F32, 0, 10, v32, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(v32, region32, sizeof v32), 0);
    ck_assert_int_eq(fitsimg_read_values(ipath, 0, FITSIMG_F64, 0, 10, d, err, sizeof err), 0);
    for (int i = 0; i < 10; i++) {
        if (idata[i] == -999) {
            ck_assert(isnan(io[i]) && isnan(d[i]));
            continue;
        }
        float want = (float)idata[i] * (float)bs + (float)bz;
        ck_assert_msg(io[i] == want, "value %d: %.9g, want %.9g", i, io[i], want);
        ck_assert(d[i] == region[i]);
    }

    ck_assert_int_eq(fitsimg_read_values(fpath, 0, FITSIMG_F64, 100, 6, d, err, sizeof err),
                     TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_values(fpath, 0, (fitsimg_values)7, 0, 1, d, err, sizeof err),
                     TESS_EINVAL);
    ck_assert_int_eq(fitsimg_read_values(fpath, 0, FITSIMG_F64, 3, 0, d, err, sizeof err), 0);
    /* Cut inside its data: the direct read says so. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "head -c %d %s > %s", 2880 + 4 * 50, fpath, cpath);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(fitsimg_read_values(cpath, 0, FITSIMG_F32_ASTROPY, 0, N, fo, err,
                                         sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "shorter than its header says") != NULL, "%s", err);
    ck_assert_int_eq(fitsimg_read_values(cpath, 0, FITSIMG_F32_ASTROPY, 0, 50, fo, err,
                                         sizeof err), 0);
    const char *names[] = { "f.fits", "i.fits", "cut.fits", "z.fits" };
    rm_tmpdir(names, 4);
}
END_TEST

/* Writes an nx x ny x nz image of BITPIX `bitpix` (-32 or -64) from `v` (float or double
 * as bitpix says) to `path`, tile-compressed (GZIP_1, lossless) when `gz`. */
static void write_ieee(const char *path, int bitpix, long nx, long ny, long nz, const void *v,
                       int gz)
{
    fitsfile *f;
    int st = 0;
    long n[3] = { nx, ny, nz };
    fits_create_diskfile(&f, path, &st);
    if (gz)
        fits_set_compression_type(f, GZIP_1, &st);
    fits_create_img(f, bitpix, 3, n, &st);
    fits_write_img(f, bitpix == FLOAT_IMG ? TFLOAT : TDOUBLE, 1, nx * ny * nz, (void *)v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
}

/* fitsimg_read_region_f32 and fitsimg_read_region of unscaled IEEE images, read without
 * cfitsio past the header: the values as written (NaN, infinities, -0, subnormals kept)
 * and as cfitsio reads them from a tile-compressed copy, for whole rows, a narrow
 * column range over several row groups of the 1 MB scratch, a single row, the second
 * plane, rows wider than the scratch; a file cut short is an error. */
START_TEST(test_region_direct)
{
    make_tmpdir();
    char p[4][256];
    const char *names[] = { "f.fits", "fz.fits", "d.fits", "cut.fits" };
    for (int i = 0; i < 4; i++)
        snprintf(p[i], sizeof p[i], "%s/%s", tmpdir, names[i]);
    enum { NX = 4100, NY = 70, NZ = 2, N = NX * NY * NZ, WX = 300000, WY = 3 };
    float *fv = malloc(sizeof(float) * WX * WY), *a = malloc(sizeof(float) * N),
          *b = malloc(sizeof(float) * N);
    double *dv = malloc(sizeof(double) * N), *da = malloc(sizeof(double) * N);
    ck_assert(fv && a && b && dv && da);
    for (int i = 0; i < N; i++) {
        fv[i] = (float)(i % 9973) * 0.125f - 600.0f;
        dv[i] = (double)i * 1e-3 - 17.0;
    }
    fv[NX * 3 + 20] = NAN;
    fv[NX * 65 + 21] = INFINITY;
    fv[NX * NY + NX * 40 + 5] = -0.0f;
    fv[NX * NY + NX * 41 + 6] = 1e-41f;
    write_ieee(p[0], FLOAT_IMG, NX, NY, NZ, fv, 0);
    write_ieee(p[1], FLOAT_IMG, NX, NY, NZ, fv, 1);
    write_ieee(p[2], DOUBLE_IMG, NX, NY, NZ, dv, 0);
    char err[256];
    const long reg[][5] = {    /* z, x0, y0, w, h */
        { 0, 0, 0, NX, NY }, { 1, 0, 5, NX, 60 }, { 0, 3, 2, 17, 68 },
        { 1, 4000, 0, 100, NY }, { 1, 5, 41, 2, 1 }, { 0, 1, 0, NX - 1, NY } };
    for (size_t r = 0; r < sizeof reg / sizeof reg[0]; r++) {
        long z = reg[r][0], x0 = reg[r][1], y0 = reg[r][2], w = reg[r][3], h = reg[r][4];
        memset(a, 0x55, sizeof(float) * N);
        memset(b, 0x66, sizeof(float) * N);
        ck_assert_int_eq(fitsimg_read_region_f32(p[0], 0, z, x0, y0, w, h, a, err,
                                                 sizeof err), 0);
        ck_assert_int_eq(fitsimg_read_region_f32(p[1], 1, z, x0, y0, w, h, b, err,
                                                 sizeof err), 0);
        ck_assert_int_eq(memcmp(a, b, sizeof(float) * (size_t)(w * h)), 0);
        for (long y = 0; y < h; y++)
            ck_assert_int_eq(memcmp(a + y * w, fv + (z * NY + y0 + y) * NX + x0,
                                    sizeof(float) * (size_t)w), 0);
        ck_assert_int_eq(fitsimg_read_region(p[2], 0, z, x0, y0, w, h, da, err, sizeof err),
                         0);
        for (long y = 0; y < h; y++)
            ck_assert_int_eq(memcmp(da + y * w, dv + (z * NY + y0 + y) * NX + x0,
                                    sizeof(double) * (size_t)w), 0);
    }
    /* Rows of 300,000 values (1.2 MB, over the scratch) read one by one. */
    for (int i = 0; i < WX * WY; i++)
        fv[i] = (float)(i % 65536) - 0.5f;
    fitsfile *f;
    int st = 0;
    long wn[2] = { WX, WY };
    remove(p[0]);
    fits_create_diskfile(&f, p[0], &st);
    fits_create_img(f, FLOAT_IMG, 2, wn, &st);
    fits_write_img(f, TFLOAT, 1, WX * WY, fv, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(fitsimg_read_region_f32(p[0], 0, 0, 7, 1, 1000, 2, a, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(a, fv + WX + 7, sizeof(float) * 1000), 0);
    ck_assert_int_eq(memcmp(a + 1000, fv + 2 * WX + 7, sizeof(float) * 1000), 0);
    /* Cut inside its second row. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "head -c %d %s > %s", 2880 + 4 * (WX + 10), p[0], p[3]);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(fitsimg_read_region_f32(p[3], 0, 0, 7, 1, 1000, 2, a, err, sizeof err),
                     TESS_EIO);
    ck_assert_msg(strstr(err, "shorter than its header says") != NULL, "%s", err);
    free(fv);
    free(a);
    free(b);
    free(dv);
    free(da);
    rm_tmpdir(names, 4);
}
END_TEST

/* fitsimg_read_region(_f32) of integer images (BITPIX 8, 16, 32; BSCALE/BZERO absent,
 * or awkward; BLANK absent, in range (planted every 97th value), or outside the type's
 * range), read without cfitsio past the header: the same values, bit for bit, as cfitsio gives for the whole data
 * unit (fitsimg_read_values F32/F64 read through fits_read_img), for several regions. */
START_TEST(test_region_direct_ints)
{
    make_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/int.fits", tmpdir);
    enum { NX = 1500, NY = 40, NZ = 2, N = NX * NY * NZ };
    static const struct { int bitpix; double bs, bz; int has_blank; long long blank; } c[] = {
        { 8, 1.0, 0.0, 0, 0 }, { 8, 0.3, -12.5, 1, 7 }, { 8, 1.0, -128.0, 1, 300 },
        { 16, 1.0, 0.0, 0, 0 }, { 16, 0.045777764213996, 1500.0, 1, -999 },
        { 16, 1.0, 32768.0, 1, 40000 }, { 32, 1.0, 0.0, 1, -7 },
        { 32, 2.9999999999999e-05, 2.5, 1, 123456 }, { 32, 1.0, 2147483648.0, 0, 0 } };
    int32_t *raw = malloc(sizeof(int32_t) * N);
    float *a = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N);
    double *da = malloc(sizeof(double) * N), *dref = malloc(sizeof(double) * N);
    ck_assert(raw && a && ref && da && dref);
    char err[256];
    for (size_t t = 0; t < sizeof c / sizeof c[0]; t++) {
        long long lo = c[t].bitpix == 8 ? 0 : c[t].bitpix == 16 ? -32768 : INT32_MIN;
        long long hi = c[t].bitpix == 8 ? 255 : c[t].bitpix == 16 ? 32767 : INT32_MAX;
        int fits = c[t].has_blank && c[t].blank >= lo && c[t].blank <= hi;
        for (int i = 0; i < N; i++) {
            long long v = (long long)((i * 2654435761u) % 4000000007u);
            raw[i] = c[t].bitpix == 8 ? (int32_t)(v % 256)
                   : c[t].bitpix == 16 ? (int32_t)(v % 65536 - 32768) : (int32_t)(v - 2000000000);
            if (fits && i % 97 == 3)
                raw[i] = (int32_t)c[t].blank;
        }
        fitsfile *f;
        int st = 0;
        long n[3] = { NX, NY, NZ };
        remove(path);
        fits_create_diskfile(&f, path, &st);
        fits_create_img(f, c[t].bitpix, 3, n, &st);
        if (c[t].bs != 1.0)
            fits_write_key(f, TDOUBLE, "BSCALE", (void *)&c[t].bs, NULL, &st);
        if (c[t].bz != 0.0)
            fits_write_key(f, TDOUBLE, "BZERO", (void *)&c[t].bz, NULL, &st);
        if (c[t].has_blank)
            fits_write_key(f, TLONGLONG, "BLANK", (void *)&c[t].blank, NULL, &st);
        fits_set_bscale(f, 1.0, 0.0, &st);          /* write the stored integers */
        fits_write_img(f, TINT, 1, N, raw, &st);
        fits_close_file(f, &st);
        ck_assert_msg(st == 0, "case %zu: cfitsio status %d", t, st);
        ck_assert_int_eq(fitsimg_read_values(path, 0, FITSIMG_F32, 0, N, ref, err, sizeof err),
                         0);
        ck_assert_int_eq(fitsimg_read_values(path, 0, FITSIMG_F64, 0, N, dref, err,
                                             sizeof err), 0);
        fitsimg_info info;
        fitsimg_layout lay;
        ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
        fitsimg_layout_of(&info, &lay);
        fitsimg_info_release(&info);
        const long reg[][5] = { { 0, 0, 0, NX, NY }, { 1, 2, 3, 31, 30 }, { 1, 0, 39, NX, 1 } };
        for (size_t r = 0; r < sizeof reg / sizeof reg[0]; r++) {
            long z = reg[r][0], x0 = reg[r][1], y0 = reg[r][2], w = reg[r][3], h = reg[r][4];
            /* By the layout (no cfitsio): the same floats as by the header. */
            ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, z, x0, y0, w, h, a, err,
                                                        sizeof err), 0);
            for (long y = 0; y < h; y++)
                ck_assert_msg(memcmp(a + y * w, ref + (z * NY + y0 + y) * NX + x0,
                                     sizeof(float) * (size_t)w) == 0,
                              "case %zu region %zu row %ld (layout)", t, r, y);
            ck_assert_int_eq(fitsimg_read_region_f32(path, 0, z, x0, y0, w, h, a, err,
                                                     sizeof err), 0);
            ck_assert_int_eq(fitsimg_read_region(path, 0, z, x0, y0, w, h, da, err,
                                                 sizeof err), 0);
            for (long y = 0; y < h; y++) {
                long at = (z * NY + y0 + y) * NX + x0;
                ck_assert_msg(memcmp(a + y * w, ref + at, sizeof(float) * (size_t)w) == 0,
                              "case %zu region %zu row %ld (float)", t, r, y);
                ck_assert_msg(memcmp(da + y * w, dref + at, sizeof(double) * (size_t)w) == 0,
                              "case %zu region %zu row %ld (double)", t, r, y);
            }
        }
        /* BLANK pixels are NaN; a BLANK the type cannot hold marks none. */
        ck_assert_int_eq(isnan(dref[3]) != 0, fits);
        ck_assert_int_eq(isnan(da[0]) != 0, 0);
        ck_assert_double_eq(dref[4], (double)(c[t].bitpix == 8 ? (uint8_t)raw[4]
                                              : c[t].bitpix == 16 ? (int16_t)raw[4] : raw[4])
                                     * c[t].bs + c[t].bz);
    }
    free(raw);
    free(a);
    free(ref);
    free(da);
    free(dref);
    const char *names[] = { "int.fits" };
    rm_tmpdir(names, 1);
}
END_TEST

/* fitsimg_read_region_f32_at: by the layout of fitsimg_read_info, bit for bit what
 * fitsimg_read_region_f32 reads, for BITPIX -32 without and with a BSCALE = 1 card (read
 * without cfitsio), BITPIX -32 scaled by 2 and -64 (read by cfitsio: values x * 2 + 1,
 * and x rounded to float); a region outside NAXISn is TESS_ERANGE; a file rewritten with
 * another size since its layout was taken is read as it is now; a NULL layout reads by
 * the header. */
START_TEST(test_region_at_layout)
{
    make_tmpdir();
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/lay.fits", tmpdir);
    enum { NX = 37, NY = 11, N = NX * NY };
    double dv[N];
    float fv[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        dv[i] = (double)i * 0.1 - 3.3;
        fv[i] = (float)dv[i];
    }
    fv[5] = NAN;
    fv[6] = -0.0f;
    static const struct { int bitpix; double bs, bz; } c[] = {
        { FLOAT_IMG, 1.0, 0.0 }, { FLOAT_IMG, -1.0, 0.0 }, { FLOAT_IMG, 2.0, 1.0 },
        { DOUBLE_IMG, 1.0, 0.0 } };
    for (size_t t = 0; t < sizeof c / sizeof c[0]; t++) {
        fitsfile *f;
        int st = 0;
        long n[2] = { NX, NY };
        remove(path);
        fits_create_diskfile(&f, path, &st);
        fits_create_img(f, c[t].bitpix, 2, n, &st);
        double one = 1.0;           /* bs -1: a BSCALE = 1 card */
        if (c[t].bs < 0)
            fits_write_key(f, TDOUBLE, "BSCALE", &one, NULL, &st);
        if (c[t].bs > 1.0) {
            fits_write_key(f, TDOUBLE, "BSCALE", (void *)&c[t].bs, NULL, &st);
            fits_write_key(f, TDOUBLE, "BZERO", (void *)&c[t].bz, NULL, &st);
        }
        fits_set_bscale(f, 1.0, 0.0, &st);
        fits_write_img(f, c[t].bitpix == FLOAT_IMG ? TFLOAT : TDOUBLE, 1, N,
                       c[t].bitpix == FLOAT_IMG ? (void *)fv : (void *)dv, &st);
        fits_close_file(f, &st);
        ck_assert_int_eq(st, 0);
        fitsimg_info info;
        fitsimg_layout lay;
        ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
        fitsimg_layout_of(&info, &lay);
        fitsimg_info_release(&info);
        const long reg[][4] = { { 0, 0, NX, NY }, { 3, 2, 5, 7 }, { 36, 10, 1, 1 } };
        for (size_t r = 0; r < 3; r++) {
            long x0 = reg[r][0], y0 = reg[r][1], w = reg[r][2], h = reg[r][3];
            memset(a, 0x55, sizeof a);
            memset(b, 0x66, sizeof b);
            ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, 0, x0, y0, w, h, a, err,
                                                        sizeof err), 0);
            ck_assert_int_eq(fitsimg_read_region_f32(path, 0, 0, x0, y0, w, h, b, err,
                                                     sizeof err), 0);
            ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)(w * h)) == 0, "case %zu", t);
            for (long i = 0; i < w * h; i++) {
                long at = (y0 + i / w) * NX + x0 + i % w;
                float want = c[t].bitpix == DOUBLE_IMG ? (float)dv[at]
                           : c[t].bs > 1.0 ? (float)((double)fv[at] * 2.0 + 1.0) : fv[at];
                ck_assert_msg(memcmp(&a[i], &want, sizeof want) == 0 || (isnan(a[i]) &&
                              isnan(want)), "case %zu pixel %ld: %g, not %g", t, at,
                              (double)a[i], (double)want);
            }
        }
        ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, 0, 30, 0, 8, 1, a, err,
                                                    sizeof err), TESS_ERANGE);
        ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, 1, 0, 0, 1, 1, a, err,
                                                    sizeof err), TESS_ERANGE);
        ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, NULL, 0, 0, 0, NX, NY, a, err,
                                                    sizeof err), 0);
        ck_assert_int_eq(fitsimg_read_region_f32(path, 0, 0, 0, 0, NX, NY, b, err,
                                                 sizeof err), 0);
        ck_assert_int_eq(memcmp(a, b, sizeof(float) * N), 0);
        if (t == 0) {
            /* Rewritten 2 x 2 (another size): read as it is now, not by the old layout. */
            float nv[4] = { 7.0f, 8.0f, 9.0f, 10.0f };
            long n2[2] = { 2, 2 };
            remove(path);
            st = 0;
            fits_create_diskfile(&f, path, &st);
            fits_create_img(f, FLOAT_IMG, 2, n2, &st);
            fits_write_img(f, TFLOAT, 1, 4, nv, &st);
            fits_close_file(f, &st);
            ck_assert_int_eq(st, 0);
            ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, 0, 0, 0, 2, 2, a, err,
                                                        sizeof err), 0);
            ck_assert_int_eq(memcmp(a, nv, sizeof nv), 0);
            ck_assert_int_eq(fitsimg_read_region_f32_at(path, 0, &lay, 0, 0, 0, 3, 1, a, err,
                                                        sizeof err), TESS_ERANGE);
        }
    }
    const char *names[] = { "lay.fits" };
    rm_tmpdir(names, 1);
}
END_TEST

START_TEST(test_bounds_and_errors)
{
    char err[256];
    double v[8];
    const char *m13 = DEMO("M13_blue_0003.fits");
    const char *cube = DEMO("l1448_13co.fits");

    err[0] = '\0';
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, 1390, 0, 3, 1, v, err, sizeof err), TESS_ERANGE);
    ck_assert_msg(strstr(err, "outside") != NULL, "err: %s", err);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, 1389, 1039, 3, 1, v, err, sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, 0, 1039, 1, 2, v, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, -1, 0, 1, 1, v, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, 0, -1, 1, 1, v, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 1, 0, 0, 1, 1, v, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_region(m13, 0, 0, 0, 0, 0, 1, v, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_read_region(cube, 0, 53, 0, 0, 1, 1, v, err, sizeof err), TESS_ERANGE);
    ck_assert_int_eq(fitsimg_read_region(cube, 0, 52, 104, 104, 1, 1, v, err, sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_region(cube, 0, -1, 0, 0, 1, 1, v, err, sizeof err), TESS_ERANGE);

    fitsimg_info info;
    err[0] = '\0';
    ck_assert_int_eq(fitsimg_read_info(DEMO("no-such-file.fits"), 0, &info, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "no-such-file.fits") != NULL, "err: %s", err);
    ck_assert_ptr_null(info.header);
    ck_assert_int_eq(fitsimg_read_region(DEMO("no-such-file.fits"), 0, 0, 0, 0, 1, 1, v, err, sizeof err),
                     TESS_EIO);
    ck_assert_msg(strstr(err, "no-such-file.fits") != NULL && strstr(err, strerror(ENOENT)) != NULL,
                  "err: %s", err);
    /* HorseHead.fits: HDU 1 is an ASCII table, there is no HDU 2 */
    ck_assert_int_eq(fitsimg_read_info(DEMO("HorseHead.fits"), 1, &info, err, sizeof err), TESS_EINVAL);
    ck_assert_msg(strstr(err, "table") != NULL, "err: %s", err);
    ck_assert_ptr_null(info.header);
    ck_assert_int_eq(fitsimg_read_info(DEMO("HorseHead.fits"), 2, &info, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_read_info(DEMO("HorseHead.fits"), -1, &info, err, sizeof err), TESS_EINVAL);
    ck_assert_int_eq(fitsimg_read_region(DEMO("HorseHead.fits"), 1, 0, 0, 0, 1, 1, v, err, sizeof err),
                     TESS_EINVAL);
    /* not a FITS file at all */
    ck_assert_int_eq(fitsimg_read_info(TESSERA_DEMO_DIR, 0, &info, err, sizeof err), TESS_EIO);
    /* a file cut inside its header (HorseHead.fits's first 2000 bytes of 5 blocks) and
     * an empty one: the message says the file ends early */
    char dir[256], cut[300], empty[300];
    tt_tmpdir_make(dir, sizeof dir, "fitsimg");
    snprintf(cut, sizeof cut, "%s/cut.fits", dir);
    snprintf(empty, sizeof empty, "%s/empty.fits", dir);
    {
        unsigned char head[2000];
        FILE *in = fopen(DEMO("HorseHead.fits"), "rb"), *out = fopen(cut, "wb");
        ck_assert(in && out && fread(head, 1, sizeof head, in) == sizeof head);
        ck_assert(fwrite(head, 1, sizeof head, out) == sizeof head);
        fclose(in);
        ck_assert_int_eq(fclose(out), 0);
        out = fopen(empty, "wb");
        ck_assert(out && fclose(out) == 0);
    }
    const char *cuts[2] = { cut, empty };
    for (int q = 0; q < 2; q++) {
        err[0] = '\0';
        ck_assert_int_eq(fitsimg_read_info(cuts[q], 0, &info, err, sizeof err), TESS_EIO);
        ck_assert_msg(strstr(err, "ends early") != NULL && strstr(err, cuts[q]) != NULL,
                      "err: %s", err);
    }
    const char *names[2] = { "cut.fits", "empty.fits" };
    ck_assert_int_eq(tt_tmpdir_remove(dir, names, 2), 0);
    /* HorseHead.fits HDU 0: astropy says 161 cards, BITPIX 16, data[0, 0] == 7201 */
    ck_assert_int_eq(fitsimg_read_info(DEMO("HorseHead.fits"), 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.nkeys, 161);
    fitsimg_info_release(&info);
    ck_assert_double_eq(pixel(DEMO("HorseHead.fits"), 0, 0, 0, 0), 7201.0);
    ck_assert_double_eq(pixel(DEMO("HorseHead.fits"), 0, 0, 890, 892), 12546.0);
}
END_TEST

START_TEST(test_literal_brackets_in_path)
{
    make_tmpdir();
    char weird[256], plain[256], spec[300];
    snprintf(weird, sizeof weird, "%s/msx[1].fits", tmpdir);
    snprintf(plain, sizeof plain, "%s/plain.fits", tmpdir);
    snprintf(spec, sizeof spec, "%s[0]", plain);
    copy_file(DEMO("gc_msx_e.fits"), weird);
    copy_file(DEMO("gc_msx_e.fits"), plain);

    fitsimg_info info;
    char err[256];
    ck_assert_int_eq(fitsimg_read_info(weird, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxes[0], 149);
    ck_assert_int_eq(info.bitpix, -64);
    fitsimg_info_release(&info);
    double a, b;
    ck_assert_int_eq(fitsimg_read_region(weird, 0, 0, 70, 80, 1, 1, &a, err, sizeof err), 0);
    ck_assert_int_eq(fitsimg_read_region(plain, 0, 0, 70, 80, 1, 1, &b, err, sizeof err), 0);
    ck_assert_double_eq(a, b);
    /* "plain.fits[0]" names no file: it must not be read as plain.fits, HDU 0 */
    ck_assert_int_eq(fitsimg_read_info(spec, 0, &info, err, sizeof err), TESS_EIO);
    ck_assert_int_eq(fitsimg_read_region(spec, 0, 0, 0, 0, 1, 1, &a, err, sizeof err), TESS_EIO);
    const char *names[] = {"msx[1].fits", "plain.fits"};
    rm_tmpdir(names, 2);
}
END_TEST

/* Many threads read regions of two files at once and must see what one thread sees. */
typedef struct reader_arg {
    const double *ref_m13, *ref_cube;
    int id, failures;
} reader_arg;

/* fitsimg_copy_section: the box's stored pixels in a primary HDU, CRPIX (and a DSS
 * plate's CNPIX) moved by the offset, CHECKSUM and DATASUM that verify. */
static fitsfile *open_mem(unsigned char *out, size_t len, void **mem, size_t *msize)
{
    *mem = out;
    *msize = len;
    fitsfile *f = NULL;
    int st = 0;
    fits_open_memfile(&f, "section.fits", READONLY, mem, msize, 0, NULL, &st);
    ck_assert_int_eq(st, 0);
    return f;
}

START_TEST(test_copy_section)
{
    char err[256] = "";
    unsigned char *out = NULL;
    size_t len = 0;
    long lo[3] = {10, 20, 5}, n[3] = {30, 25, 4};
    ck_assert_int_eq(fitsimg_copy_section(DEMO("l1448_13co.fits"), 0, lo, n, &out, &len, err,
                                          sizeof err), 0);
    ck_assert_uint_eq(len % 2880, 0);
    void *mem;
    size_t msize;
    fitsfile *f = open_mem(out, len, &mem, &msize);
    int st = 0, bitpix = 0, naxis = 0, dataok = 0, hduok = 0, anynul = 0;
    long naxes[3] = {0, 0, 0};
    fits_get_img_param(f, 3, &bitpix, &naxis, naxes, &st);
    ck_assert_int_eq(bitpix, -32);
    ck_assert_int_eq(naxis, 3);
    ck_assert(naxes[0] == 30 && naxes[1] == 25 && naxes[2] == 4);
    double crpix[3];
    fits_read_key(f, TDOUBLE, "CRPIX1", &crpix[0], NULL, &st);
    fits_read_key(f, TDOUBLE, "CRPIX2", &crpix[1], NULL, &st);
    fits_read_key(f, TDOUBLE, "CRPIX3", &crpix[2], NULL, &st);
    ck_assert_double_eq_tol(crpix[0], -799.0 - 10, 1e-9);
    ck_assert_double_eq_tol(crpix[1], -4741.913 - 20, 1e-9);
    ck_assert_double_eq_tol(crpix[2], -187.0 - 5, 1e-9);
    fits_verify_chksum(f, &dataok, &hduok, &st);
    ck_assert_int_eq(st, 0);
    ck_assert(dataok == 1 && hduok == 1);
    float *v = malloc(sizeof(float) * 30 * 25 * 4);
    fits_read_img(f, TFLOAT, 1, 30 * 25 * 4, NULL, v, &anynul, &st);
    ck_assert_int_eq(st, 0);
    for (long z = 0; z < 4; z += 3)
        for (long y = 0; y < 25; y += 6)
            for (long x = 0; x < 30; x += 7) {
                double want = pixel(DEMO("l1448_13co.fits"), 0, z + 5, x + 10, y + 20);
                float got = v[(z * 25 + y) * 30 + x];
                ck_assert_msg(isnan(want) ? isnan(got) : got == (float)want,
                              "(%ld,%ld,%ld): %g, not %g", x, y, z, got, want);
            }
    free(v);
    fits_close_file(f, &st);
    free(mem);

    /* A DSS plate, 16-bit: BITPIX kept, CNPIX moved up with CRPIX moved down. */
    long lo2[3] = {100, 200, 0}, n2[3] = {50, 40, 1};
    ck_assert_int_eq(fitsimg_copy_section(DEMO("HorseHead.fits"), 0, lo2, n2, &out, &len, err,
                                          sizeof err), 0);
    f = open_mem(out, len, &mem, &msize);
    fits_get_img_param(f, 3, &bitpix, &naxis, naxes, &st);
    ck_assert(bitpix == 16 && naxis == 2 && naxes[0] == 50 && naxes[1] == 40);
    long cnpix1 = 0, cnpix2 = 0;
    fits_read_key(f, TLONG, "CNPIX1", &cnpix1, NULL, &st);
    fits_read_key(f, TLONG, "CNPIX2", &cnpix2, NULL, &st);
    fits_read_key(f, TDOUBLE, "CRPIX1", &crpix[0], NULL, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(cnpix1, 12237 + 100);
    ck_assert_int_eq(cnpix2, 19965 + 200);
    ck_assert_double_eq_tol(crpix[0], 446.0 - 100, 1e-9);
    double one = 0;
    fits_read_pix(f, TDOUBLE, (long[]){7, 9}, 1, NULL, &one, &anynul, &st);
    ck_assert_double_eq(one, pixel(DEMO("HorseHead.fits"), 0, 0, 106, 208));
    fits_close_file(f, &st);
    free(mem);

    /* Boxes outside the image, and tables, are refused. */
    long bad[3] = {880, 0, 0}, nb[3] = {20, 10, 1};
    ck_assert_int_eq(fitsimg_copy_section(DEMO("HorseHead.fits"), 0, bad, nb, &out, &len, err,
                                          sizeof err), TESS_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err, "outside"));
    long neg[3] = {-1, 0, 0};
    ck_assert_int_eq(fitsimg_copy_section(DEMO("HorseHead.fits"), 0, neg, nb, &out, &len, err,
                                          sizeof err), TESS_EINVAL);
}
END_TEST

static void *reader(void *p)
{
    reader_arg *a = p;
    double buf[64 * 64];
    char err[256];
    for (int it = 0; it < 40; it++) {
        long x = (a->id * 37 + it * 11) % 1300, y = (a->id * 53 + it * 7) % 950;
        if (fitsimg_read_region(DEMO("M13_blue_0003.fits"), 0, 0, x, y, 64, 64, buf, err,
                                sizeof err) != 0) {
            a->failures++;
            continue;
        }
        for (int j = 0; j < 64; j++)
            if (memcmp(buf + j * 64, a->ref_m13 + (y + j) * 1392 + x, 64 * sizeof(double)))
                a->failures++;
        long z = (a->id + it) % 53;
        if (fitsimg_read_region(DEMO("l1448_13co.fits"), 0, z, 10, 20, 64, 64, buf, err,
                                sizeof err) != 0) {
            a->failures++;
            continue;
        }
        for (int j = 0; j < 64; j++)
            if (memcmp(buf + j * 64, a->ref_cube + z * 105 * 105 + (20 + j) * 105 + 10,
                       64 * sizeof(double)))
                a->failures++;
    }
    return NULL;
}

START_TEST(test_threads)
{
    char err[256];
    double *m13 = malloc(1392 * 1040 * sizeof(double));
    double *cube = malloc(105 * 105 * 53 * sizeof(double));
    ck_assert_ptr_nonnull(m13);
    ck_assert_ptr_nonnull(cube);
    ck_assert_int_eq(fitsimg_read_region(DEMO("M13_blue_0003.fits"), 0, 0, 0, 0, 1392, 1040, m13,
                                         err, sizeof err), 0);
    for (long z = 0; z < 53; z++)
        ck_assert_int_eq(fitsimg_read_region(DEMO("l1448_13co.fits"), 0, z, 0, 0, 105, 105,
                                             cube + z * 105 * 105, err, sizeof err), 0);
    enum { NT = 8 };
    pthread_t th[NT];
    reader_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (reader_arg){m13, cube, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].failures, 0);
    }
    free(m13);
    free(cube);
}
END_TEST

/* ---- encoders ------------------------------------------------------------------------ */

static void write_file(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_fits_encode_roundtrip)
{
    fitsimg_info src;
    char err[256];
    ck_assert_int_eq(fitsimg_read_info(DEMO("gc_2mass_k.fits"), 0, &src, err, sizeof err), 0);

    enum { W = 7, H = 5 };
    double data[W * H], foot[W * H];
    for (int i = 0; i < W * H; i++) {
        data[i] = i * 1.25 - 3.0;
        foot[i] = (i % 3) / 2.0;
    }
    data[3] = NAN;
    data[W * H - 1] = -0.0;
    data[W * H - 2] = 4.9e-324;   /* subnormal */
    unsigned char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(fits_encode_f64(data, W, H, 1, src.header, src.nkeys, foot, &out, &len), 0);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(len % 2880, 0);
    ck_assert_int_eq(memcmp(out, "SIMPLE  =                    T", 30), 0);

    make_tmpdir();
    char path[256];
    snprintf(path, sizeof path, "%s/enc.fits", tmpdir);
    write_file(path, out, len);
    free(out);

    fitsimg_info info;
    ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 2);
    ck_assert_int_eq(info.naxes[0], W);
    ck_assert_int_eq(info.naxes[1], H);
    ck_assert_int_eq(info.bitpix, -64);
    ck_assert_double_eq(info.bscale, 1.0);    /* the source's BSCALE/BZERO were not copied */
    ck_assert_double_eq(info.bzero, 0.0);
    ck_assert_int_eq(info.file_size, (long long)len);
    const char *wcs[] = {"CTYPE1", "CTYPE2", "CRVAL1", "CRVAL2", "CRPIX1", "CRPIX2",
                         "CDELT1", "CDELT2", "CROTA2", "EQUINOX"};
    for (size_t i = 0; i < sizeof wcs / sizeof wcs[0]; i++) {
        char a[80], b[80];
        ck_assert_int_eq(fitscard_get(src.header, src.nkeys, wcs[i], a, sizeof a), 1);
        ck_assert_msg(fitscard_get(info.header, info.nkeys, wcs[i], b, sizeof b) == 1,
                      "%s missing", wcs[i]);
        ck_assert_str_eq(a, b);
    }
    char v[80];
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "BZERO", v, sizeof v), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "NAXIS1", v, sizeof v), 1);
    ck_assert_str_eq(v, "7");
    int nbitpix = 0, nbibcode = 0, nmontage = 0;
    for (int i = 0; i < info.nkeys; i++) {
        char c[81];
        memcpy(c, info.header + i * 80, 80);
        c[80] = '\0';
        nbitpix += strncmp(c, "BITPIX  ", 8) == 0;
        nbibcode += strstr(c, "2001A&A...376..359H") != NULL;
        nmontage += strstr(c, "created using Montage v3.0") != NULL;
    }
    ck_assert_int_eq(nbitpix, 1);
    ck_assert_int_eq(nbibcode, 1);     /* cfitsio's own, not repeated from the source */
    ck_assert_int_eq(nmontage, 1);     /* other COMMENT cards are copied */
    fitsimg_info_release(&info);

    double back[W * H];
    ck_assert_int_eq(fitsimg_read_region(path, 0, 0, 0, 0, W, H, back, err, sizeof err), 0);
    for (int i = 0; i < W * H; i++) {
        if (i == 3)
            ck_assert(isnan(back[i]));
        else
            ck_assert_double_eq(back[i], data[i]);
    }
    ck_assert(signbit(back[W * H - 1]));

    ck_assert_int_eq(fitsimg_read_info(path, 1, &info, err, sizeof err), 0);
    ck_assert_int_eq(fitscard_get(info.header, info.nkeys, "EXTNAME", v, sizeof v), 1);
    ck_assert_str_eq(v, "FOOTPRINT");
    ck_assert_int_eq(info.naxes[0], W);
    ck_assert_int_eq(info.naxes[1], H);
    ck_assert_int_eq(info.bitpix, -64);
    fitsimg_info_release(&info);
    ck_assert_int_eq(fitsimg_read_region(path, 1, 0, 0, 0, W, H, back, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(back, foot, sizeof foot), 0);
    ck_assert_int_eq(fitsimg_read_info(path, 2, &info, err, sizeof err), TESS_EINVAL);

    /* a cube, no cards, no footprint: exactly one header block and the padded data */
    double cube[4 * 3 * 2];
    for (int i = 0; i < 24; i++)
        cube[i] = i;
    ck_assert_int_eq(fits_encode_f64(cube, 4, 3, 2, NULL, 0, NULL, &out, &len), 0);
    ck_assert_uint_eq(len, 2 * 2880);
    write_file(path, out, len);
    free(out);
    ck_assert_int_eq(fitsimg_read_info(path, 0, &info, err, sizeof err), 0);
    ck_assert_int_eq(info.naxis, 3);
    ck_assert_int_eq(info.naxes[2], 2);
    fitsimg_info_release(&info);
    ck_assert_int_eq(fitsimg_read_region(path, 0, 1, 0, 0, 4, 3, back, err, sizeof err), 0);
    for (int i = 0; i < 12; i++)
        ck_assert_double_eq(back[i], 12 + i);

    ck_assert_int_eq(fits_encode_f64(cube, 0, 3, 1, NULL, 0, NULL, &out, &len), TESS_EINVAL);
    ck_assert_ptr_null(out);
    fitsimg_info_release(&src);
    const char *names[] = {"enc.fits"};
    rm_tmpdir(names, 1);
}
END_TEST

/* Asserts that the n little-endian float64 at p hold the bits of d[0..n-1]. */
static void check_le_f8(const unsigned char *p, const double *d, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t u = 0, want;
        for (int k = 7; k >= 0; k--)
            u = (u << 8) | p[i * 8 + k];
        memcpy(&want, &d[i], 8);
        ck_assert_uint_eq(u, want);
    }
}

START_TEST(test_npy_encode)
{
    double d[12];
    for (int i = 0; i < 12; i++)
        d[i] = i - 0.5;
    d[5] = NAN;
    unsigned char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(npy_encode_f64(d, 4, 3, &out, &len), 0);
    /* numpy 1.24: np.save of a (3, 4) '<f8' array */
    static const char hdr[] =
        "\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }"
        "                                                          \n";
    ck_assert_uint_eq(sizeof hdr - 1, 128);
    ck_assert_uint_eq(len, 128 + 12 * 8);
    ck_assert_int_eq(memcmp(out, hdr, 128), 0);
    check_le_f8(out + 128, d, 12);
    free(out);

    double *big = calloc(1392 * 1040, sizeof *big);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(npy_encode_f64(big, 1392, 1040, &out, &len), 0);
    ck_assert_uint_eq(len, 11581568);            /* len(np.save bytes) for (1040, 1392) */
    ck_assert_int_eq(memcmp(out + 10, "{'descr': '<f8', 'fortran_order': False, 'shape': (1040, 1392), }", 65), 0);
    ck_assert_int_eq(out[127], '\n');
    ck_assert_int_eq(out[126], ' ');
    free(out);
    free(big);
}
END_TEST

START_TEST(test_npy_encode_1d)
{
    const double d[3] = {-0.5, NAN, 2.25};
    unsigned char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(npy_encode_f64_1d(d, 3, &out, &len), 0);
    /* numpy 1.24: np.save of np.array([-0.5, nan, 2.25]), 152 bytes */
    static const char hdr[] =
        "\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"
        "                                                            \n";
    ck_assert_uint_eq(sizeof hdr - 1, 128);
    ck_assert_uint_eq(len, 152);
    ck_assert_int_eq(memcmp(out, hdr, 128), 0);
    check_le_f8(out + 128, d, 3);
    free(out);

    /* np.save of np.zeros(0): the header alone */
    ck_assert_int_eq(npy_encode_f64_1d(NULL, 0, &out, &len), 0);
    ck_assert_uint_eq(len, 128);
    ck_assert_int_eq(memcmp(out + 10, "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", 57), 0);
    ck_assert_int_eq(out[127], '\n');
    free(out);
    ck_assert_int_eq(npy_encode_f64_1d(d, -1, &out, &len), TESS_EINVAL);
    ck_assert_ptr_null(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fitsimg");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_info_m13);
    tcase_add_test(tc, test_header_get_quotes_and_comments);
    tcase_add_test(tc, test_header_shift);
    tcase_add_test(tc, test_check_scaling);
    tcase_add_test(tc, test_region_m13_unsigned16);
    tcase_add_test(tc, test_region_gc_bscale_bzero);
    tcase_add_test(tc, test_region_l1448_plane20);
    tcase_add_test(tc, test_info_bunit);
    tcase_add_test(tc, test_nan_and_blank);
    tcase_add_test(tc, test_tile_compressed);
    tcase_add_test(tc, test_tile_compressed_ztension_last);
    tcase_add_test(tc, test_bounds_and_errors);
    tcase_add_test(tc, test_read_values);
    tcase_add_test(tc, test_region_direct);
    tcase_add_test(tc, test_region_direct_ints);
    tcase_add_test(tc, test_region_at_layout);
    tcase_add_test(tc, test_literal_brackets_in_path);
    tcase_add_test(tc, test_copy_section);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_fits_encode_roundtrip);
    tcase_add_test(tc, test_npy_encode);
    tcase_add_test(tc, test_npy_encode_1d);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
