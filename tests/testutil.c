/* Helpers shared by the Check test programs: suites, FITS and header files, scratch directories. */
#include "tests/testutil.h"
#include "engine/base/clock.h"

#include <dirent.h>
#include <sched.h>
#include <fitsio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_VALGRIND_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

int tt_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* Appends `text` (len bytes, cut to 80) as a blank-padded card n of `cards`. */
static void put_card(char *cards, size_t n, const char *text, size_t len)
{
    memset(cards + n * 80, ' ', 80);
    memcpy(cards + n * 80, text, len > 80 ? 80 : len);
}

char *tt_read_hdr_file(const char *path, int *nkeys)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 64, n = 0;
    char *cards = malloc(cap * 80 + 1);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        if (len == 0)
            continue;
        if (n == cap) {
            cap *= 2;
            cards = realloc(cards, cap * 80 + 1);
        }
        put_card(cards, n, line, len);
        n++;
    }
    fclose(f);
    cards[n * 80] = '\0';
    *nkeys = (int)n;
    return cards;
}

char *tt_make_cards(const char *const *lines, int *nkeys)
{
    int n = 0;
    while (lines[n])
        n++;
    char *cards = malloc((size_t)n * 80 + 1);
    for (int i = 0; i < n; i++)
        put_card(cards, (size_t)i, lines[i], strlen(lines[i]));
    cards[n * 80] = '\0';
    *nkeys = n;
    return cards;
}

void *tt_read_image(const char *path, int hdu, long *nx, long *ny, char **cards, int *nkeys,
                    int *f32)
{
    fitsfile *f = NULL;
    int st = 0, bitpix = 0, naxis = 0, anynul = 0;
    long naxes[2] = { 1, 1 };
    fits_open_file(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s", path);
    fits_movabs_hdu(f, hdu, NULL, &st);
    fits_get_img_param(f, 2, &bitpix, &naxis, naxes, &st);
    if (cards)
        fits_hdr2str(f, 1, NULL, 0, cards, nkeys, &st);
    ck_assert_int_eq(st, 0);
    long n = naxes[0] * naxes[1];
    void *px;
    if (bitpix == 8 || bitpix == 16 || bitpix == -32) {
        double bscale = 1.0, bzero = 0.0;
        int s2 = 0;
        fits_read_key(f, TDOUBLE, "BSCALE", &bscale, NULL, &s2);
        s2 = 0;
        fits_read_key(f, TDOUBLE, "BZERO", &bzero, NULL, &s2);
        float *v = malloc(sizeof(float) * (size_t)n), fnan = NAN;
        fits_set_bscale(f, 1.0, 0.0, &st);
        fits_read_img(f, TFLOAT, 1, n, &fnan, v, &anynul, &st);
        float fs = (float)bscale, fz = (float)bzero;
        for (long i = 0; i < n; i++) {
            if (bscale != 1.0)
                v[i] = v[i] * fs;
            if (bzero != 0.0)
                v[i] = v[i] + fz;
        }
        px = v;
        *f32 = 1;
    } else {
        double *v = malloc(sizeof(double) * (size_t)n), dnan = NAN;
        fits_read_img(f, TDOUBLE, 1, n, &dnan, v, &anynul, &st);
        px = v;
        *f32 = 0;
    }
    ck_assert_int_eq(st, 0);
    fits_close_file(f, &st);
    *nx = naxes[0];
    *ny = naxes[1];
    return px;
}

/* Reads plane z (0-based) of the current HDU of f into a malloc'd array of doubles. */
static double *read_plane(fitsfile *f, long z, long *nx, long *ny, int *st)
{
    long naxes[3] = {1, 1, 1};
    int anynul;
    fits_get_img_size(f, 3, naxes, st);
    long fp[3] = {1, 1, z + 1}, lp[3] = {naxes[0], naxes[1], z + 1}, inc[3] = {1, 1, 1};
    double *v = malloc((size_t)naxes[0] * (size_t)naxes[1] * sizeof(double));
    double nan = NAN;
    fits_read_subset(f, TDOUBLE, fp, lp, inc, &nan, v, &anynul, st);
    *nx = naxes[0];
    *ny = naxes[1];
    return v;
}

double *tt_fits_plane(const char *path, long z, long *nx, long *ny)
{
    fitsfile *f = NULL;
    int st = 0;
    fits_open_diskfile(&f, path, READONLY, &st);
    ck_assert_msg(st == 0, "cannot open %s", path);
    double *v = read_plane(f, z, nx, ny, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    return v;
}

double *tt_fits_mem_read(const char *data, size_t len, int hdu, long *nx, long *ny)
{
    fitsfile *f = NULL;
    int st = 0;
    void *mem = malloc(len);
    memcpy(mem, data, len);
    size_t msize = len;
    fits_open_memfile(&f, "mem.fits", READONLY, &mem, &msize, 0, NULL, &st);
    ck_assert_int_eq(st, 0);
    fits_movabs_hdu(f, hdu, NULL, &st);
    double *v = read_plane(f, 0, nx, ny, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(mem);
    return v;
}

void tt_write_fits_cards(const char *path, const char *const *cards, long long data_bytes)
{
    int n = 0;
    while (cards[n])
        n++;
    size_t hlen = ((size_t)n + 1 + 35) / 36 * 2880;
    char *h = malloc(hlen);
    ck_assert_ptr_nonnull(h);
    memset(h, ' ', hlen);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(cards[i]);
        memcpy(h + (size_t)i * 80, cards[i], len > 80 ? 80 : len);
    }
    memcpy(h + (size_t)n * 80, "END", 3);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(h, 1, hlen, f), hlen);
    free(h);
    ck_assert_int_eq(fclose(f), 0);
    long long blocks = (data_bytes + 2879) / 2880;
    ck_assert_msg(truncate(path, (off_t)hlen + (off_t)blocks * 2880) == 0, "cannot extend %s",
                  path);
}

void tt_write_fits_image(const char *path, int bitpix, int naxis, const long long *axes,
                         const char *const *extra, long long data_bytes)
{
    char text[12][81];
    const char *cards[12 + 64 + 1];
    int n = 0;
    ck_assert(naxis >= 0 && naxis <= 9);
    snprintf(text[n++], 81, "SIMPLE  = %20s", "T");
    snprintf(text[n++], 81, "BITPIX  = %20d", bitpix);
    snprintf(text[n++], 81, "NAXIS   = %20d", naxis);
    for (int i = 0; i < naxis; i++)
        snprintf(text[n++], 81, "NAXIS%d  = %20lld", i + 1, axes[i]);
    for (int i = 0; i < n; i++)
        cards[i] = text[i];
    for (int i = 0; extra && extra[i]; i++) {
        ck_assert(i < 64);
        cards[n++] = extra[i];
    }
    cards[n] = NULL;
    tt_write_fits_cards(path, cards, data_bytes);
}

void tt_tmpdir_make(char *dir, size_t len, const char *tag)
{
    snprintf(dir, len, "/tmp/tessera-%s-XXXXXX", tag);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

int tt_tmpdir_remove(const char *dir, const char *const *names, int n)
{
    char p[512];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    return rmdir(dir);
}

int tt_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

const char *tt_mount_tmpfs(const char *dir, const char *size)
{
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s", size);
    if (unshare(CLONE_NEWNS) != 0)
        return "unshare(CLONE_NEWNS)";
    /* Source and type are ignored for a propagation change; "none" rather than NULL,
     * which valgrind's check of mount(2)'s arguments takes for an unaddressable string. */
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
        return "mount(MS_PRIVATE)";
    if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
        return "mount(tmpfs)";
    return NULL;
}

double tt_now_s(void)
{
    return tess_mono_s();
}

int tt_under_valgrind(void)
{
#ifdef HAVE_VALGRIND_VALGRIND_H
    if (RUNNING_ON_VALGRIND)
        return 1;
#endif
    const char *e = getenv("TESSERA_VALGRIND");
    return e && strcmp(e, "1") == 0;
}

double tt_time_scale(void)
{
    const char *e = getenv("TESSERA_TIME_SCALE");
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end == '\0' && v >= 1.0 && v <= 1000.0)
            return v;
    }
    return tt_under_valgrind() ? TT_VALGRIND_TIME_SCALE : 1.0;
}
