/* Faults: source files truncated, replaced or deleted while served;
 * disk full while a job writes its product; SIGTERM with requests in flight.
 * (kill -9 of mosaic jobs at random points is in test_jobs.c.) */
#include "engine/base/mapguard.h"
#include "engine/image/stack.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs/jobs.h"
#include "tests/daemon/test_jobkind_body.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NX 64
#define NY 48

static void rm_rf(const char *dir)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Pixel (x, y) of version `ver` of the test image: version 1 is x + 100 y + 1, version
 * 2 is 10001 - (x + 100 y + 1) (every pixel changes, the picture is inverted), all exact
 * in float32. */
static float pixel(int ver, int x, int y)
{
    float v = (float)(x + 100 * y + 1);
    return ver == 1 ? v : 10001.0f - v;
}

/* Writes version `ver` of the NX x NY float32 test image (TAN WCS centred on RA 10,
 * Dec 20, 1' pixels) to `path` through a temporary file and rename(2), as an operator
 * replacing a file safely would. */
static void write_image(const char *path, int ver)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    unlink(tmp);
    float *v = malloc(sizeof(float) * NX * NY);
    for (int y = 0; y < NY; y++)
        for (int x = 0; x < NX; x++)
            v[y * NX + x] = pixel(ver, x, y);
    fitsfile *f;
    int st = 0;
    long naxes[2] = {NX, NY};
    fits_create_diskfile(&f, tmp, &st);
    fits_create_img(f, FLOAT_IMG, 2, naxes, &st);
    double crpix1 = (NX + 1) / 2.0, crpix2 = (NY + 1) / 2.0, crval1 = 10, crval2 = 20;
    double cd1 = -1.0 / 60, cd2 = 1.0 / 60;
    fits_write_key(f, TSTRING, "CTYPE1", "RA---TAN", NULL, &st);
    fits_write_key(f, TSTRING, "CTYPE2", "DEC--TAN", NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX1", &crpix1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRPIX2", &crpix2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL1", &crval1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CRVAL2", &crval2, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT1", &cd1, NULL, &st);
    fits_write_key(f, TDOUBLE, "CDELT2", &cd2, NULL, &st);
    fits_write_img(f, TFLOAT, 1, NX * NY, v, &st);
    fits_close_file(f, &st);
    ck_assert_int_eq(st, 0);
    free(v);
    ck_assert_int_eq(rename(tmp, path), 0);
}

/* ---- part 1: files changed under the server --------------------------------------- */

static tess_config cfg;
static tserver *srv;
static char base[64];
static char datadir[256];
static char img[PATH_MAX];

static void start_data_server(void)
{
    tt_tmpdir_make(datadir, sizeof(datadir), "faults");
    snprintf(img, sizeof(img), "%s/img.fits", datadir);
    write_image(img, 1);
    char text[2048], err[512];
    /* The disk tier too: it must not bring old pixels back either. */
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": [\"%s\"],"
             " \"cache\": {\"disk_dir\": \"%s/cache\", \"disk_mb\": 16},"
             " \"datasets\": [{\"name\": \"img\", \"path\": \"img.fits\"}]}",
             datadir, datadir);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
}

static void stop_data_server(void)
{
    if (srv)
        tserver_stop(srv, 5);
    srv = NULL;
    config_release(&cfg);
    rm_rf(datadir);
}

#define RAW_PATH "/api/v1/datasets/img/slice/xy/64_48/0_0_0.raw"
#define CUTOUT_PATH "/api/v1/cutout?dataset=img&ra=10&dec=20&fov=0.5&width=24&height=24" \
                    "&method=nearest&format=fits"
#define IIIF_PATH "/iiif/3/img/full/max/0/default.png"
#define HIPS_PATH "/hips/img/Norder3/Allsky.fits"

/* Fetches the raw slice of the whole image and checks that it is version `ver`. */
static void expect_raw(int ver, const char *when)
{
    tt_resp r = tt_fetch(base, "GET", RAW_PATH, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: raw slice status %ld: %s", when, r.status,
                  r.body ? r.body : "");
    ck_assert_uint_eq(r.len, sizeof(float) * NX * NY);
    for (int i = 0; i < NX * NY; i++) {
        float v;
        memcpy(&v, r.body + 4 * (size_t)i, 4);   /* little-endian, as is this machine */
        float want = pixel(ver, i % NX, i / NX);
        ck_assert_msg(v == want, "%s: pixel (%d, %d) is %g, version %d has %g", when, i % NX,
                      i / NX, (double)v, ver, (double)want);
    }
    tt_resp_free(&r);
}

/* 1 when the raw slice shows version `ver` now (no assertion). */
static int raw_is(int ver)
{
    tt_resp r = tt_fetch(base, "GET", RAW_PATH, NULL, 0, NULL);
    int ok = r.status == 200 && r.len == sizeof(float) * NX * NY;
    for (int i = 0; ok && i < NX * NY; i++) {
        float v;
        memcpy(&v, r.body + 4 * (size_t)i, 4);
        ok = v == pixel(ver, i % NX, i / NX);
    }
    tt_resp_free(&r);
    return ok;
}

/* The nearest-neighbour cutout as doubles (24 x 24). */
static double *fetch_cutout(const char *when, char *xcache, size_t xlen)
{
    tt_resp r = tt_fetch(base, "GET", CUTOUT_PATH, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: cutout status %ld: %s", when, r.status,
                  r.body ? r.body : "");
    long nx, ny;
    double *v = tt_fits_mem_read(r.body, r.len, 1, &nx, &ny);
    ck_assert_int_eq(nx, 24);
    ck_assert_int_eq(ny, 24);
    if (xcache)
        snprintf(xcache, xlen, "%s", r.x_cache);
    tt_resp_free(&r);
    return v;
}

static tt_resp fetch_ok(const char *path, const char *when)
{
    tt_resp r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: %s status %ld: %s", when, path, r.status,
                  r.body ? r.body : "");
    return r;
}

/* Polls the raw slice until it shows version `ver`; returns the seconds it took.  The
 * guarantee (daemon/catalog.h): a change is served within about a second. */
static double wait_for_version(int ver, double t_change)
{
    for (;;) {
        if (raw_is(ver))
            return tt_now_s() - t_change;
        ck_assert_msg(tt_now_s() - t_change < 5.0 * tt_time_scale(),
                      "version %d not served %g s after the change", ver, 5.0 * tt_time_scale());
        usleep(50000);
    }
}

/* Every cached path must stop answering version 1 once version 2 is served. */
START_TEST(test_replaced_file_served_fresh)
{
    start_data_server();
    expect_raw(1, "first read");
    char xc[16];
    double *c1 = fetch_cutout("first cutout", xc, sizeof(xc));
    ck_assert_str_eq(xc, "MISS");
    free(fetch_cutout("second cutout", xc, sizeof(xc)));
    ck_assert_str_eq(xc, "HIT");   /* cached: the replacement must get past this */
    tt_resp i1 = fetch_ok(IIIF_PATH, "first IIIF");
    tt_resp i1b = fetch_ok(IIIF_PATH, "second IIIF");
    ck_assert_str_eq(i1b.x_cache, "HIT");
    tt_resp_free(&i1b);
    tt_resp h1 = fetch_ok(HIPS_PATH, "first HiPS");
    tt_resp h1b = fetch_ok(HIPS_PATH, "second HiPS");
    ck_assert_str_eq(h1b.x_cache, "HIT");
    tt_resp_free(&h1b);
    long finite = 0;
    for (int i = 0; i < 24 * 24; i++)
        finite += isfinite(c1[i]);
    ck_assert_int_gt(finite, 24 * 24 / 2);

    /* Replaced by rename(2), with the same size: only mtime (and the inode) differ. */
    double t0 = tt_now_s();
    write_image(img, 2);
    double dt = wait_for_version(2, t0);
    printf("replaced file: new pixels served after %.2f s\n", dt);
    fflush(stdout);
    ck_assert_msg(dt < 3.0 * tt_time_scale(), "the replacement took %.2f s to be served "
                  "(bound %g s)", dt, 3.0 * tt_time_scale());
    /* Past the once-a-second version check every route serves version 2. */
    usleep(1100000);
    expect_raw(2, "after replacement");
    double *c2 = fetch_cutout("cutout after replacement", xc, sizeof(xc));
    for (int i = 0; i < 24 * 24; i++) {
        if (!isfinite(c1[i])) {
            ck_assert(!isfinite(c2[i]));
            continue;
        }
        ck_assert_msg(c2[i] == 10001.0 - c1[i], "cutout pixel %d: %g after, %g before", i, c2[i],
                      c1[i]);
    }
    tt_resp i2 = fetch_ok(IIIF_PATH, "IIIF after replacement");
    ck_assert_str_eq(i2.x_cache, "MISS");
    ck_assert_str_ne(i2.etag, i1.etag);
    ck_assert(i2.len != i1.len || memcmp(i2.body, i1.body, i1.len) != 0);
    tt_resp h2 = fetch_ok(HIPS_PATH, "HiPS after replacement");
    ck_assert_str_eq(h2.x_cache, "MISS");
    ck_assert(h2.len != h1.len || memcmp(h2.body, h1.body, h1.len) != 0);
    tt_resp_free(&i1);
    tt_resp_free(&i2);
    tt_resp_free(&h1);
    tt_resp_free(&h2);
    free(c1);
    free(c2);

    /* A restart with the disk tier in place serves version 2 too, and back to 1. */
    tserver_stop(srv, 5);
    srv = NULL;
    char err[256];
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
    expect_raw(2, "after restart");
    t0 = tt_now_s();
    write_image(img, 1);
    wait_for_version(1, t0);
    usleep(1100000);
    double *c3 = fetch_cutout("cutout after the second replacement", NULL, 0);
    for (int i = 0; i < 24 * 24; i++)
        if (isfinite(c3[i]))
            ck_assert_msg(c3[i] >= 1 && c3[i] <= NX + 100 * (NY - 1), "pixel %d = %g is not "
                          "version 1", i, c3[i]);
    free(c3);
    stop_data_server();
}
END_TEST

/* Truncated in place (the mapping the server holds then faults), then deleted, then
 * restored: a problem+json each time it cannot be read, the server up throughout. */
/* A header that claims a 100000 x 100000 plane (10^10 pixels): in a file of two blocks
 * the server refuses the dataset at start, saying the file is shorter than its header;
 * in a file that holds the plane (sparse, 2 x 10^10 bytes of zeros) every route answers
 * 413 naming the plane's size, as the decode limits answer (IIIF used to say 404, as for
 * an unknown image, then 500), no route tries to allocate the plane per request, the
 * server stays up. */
START_TEST(test_header_claims_huge_plane)
{
    tt_tmpdir_make(datadir, sizeof(datadir), "faults");
    char path[PATH_MAX], cards[2881];
    snprintf(path, sizeof path, "%s/liar.fits", datadir);
    static const char *const c[] = {
        "SIMPLE  =                    T", "BITPIX  =                   16",
        "NAXIS   =                    2", "NAXIS1  =               100000",
        "NAXIS2  =               100000", "CTYPE1  = 'RA---TAN'", "CTYPE2  = 'DEC--TAN'",
        "CRVAL1  =                 10.0", "CRVAL2  =                 20.0",
        "CRPIX1  =              50000.0", "CRPIX2  =              50000.0",
        "CDELT1  =            -0.000001", "CDELT2  =             0.000001", "END" };
    memset(cards, ' ', 2880);
    cards[2880] = '\0';
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
        memcpy(cards + 80 * k, c[k], strlen(c[k]));
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(cards, 1, 2880, f), 2880);
    static const char zeros[2880];
    ck_assert_uint_eq(fwrite(zeros, 1, 2880, f), 2880);
    fclose(f);
    char text[1024], err[512];
    snprintf(text, sizeof text, "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": "
             "[\"%s\"], \"datasets\": [{\"name\": \"liar\", \"path\": \"liar.fits\"}]}", datadir);
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_ne(tserver_start(&cfg, &srv, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "liar") && strstr(err, "shorter than its header says"), "%s", err);
    ck_assert_int_eq(truncate(path, 2880 + 100000LL * 100000 * 2), 0);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", tserver_port(srv));
    static const char *const paths[] = {
        "/api/v1/cutout?dataset=liar&ra=10&dec=20&fov=0.01&width=16&height=16&format=fits",
        "/iiif/3/liar/full/!64,64/0/default.png",
        "/hips/liar/Norder3/Allsky.png" };
    for (int round = 0; round < 3; round++)
        for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
            tt_resp r = tt_fetch(base, "GET", paths[k], NULL, 0, NULL);
            tt_assert_problem(paths[k], &r, 413, NULL);
            ck_assert_msg(strstr(r.body, "100000 x 100000"), "%s: %s", paths[k], r.body);
            tt_resp_free(&r);
        }
    tt_resp h = fetch_ok("/healthz", "after the huge plane");
    tt_resp_free(&h);
    stop_data_server();
}
END_TEST

START_TEST(test_truncated_and_deleted)
{
    start_data_server();
    expect_raw(1, "first read");
    tt_resp c = fetch_ok(CUTOUT_PATH, "first cutout");
    tt_resp_free(&c);
    const char *const paths[] = {RAW_PATH, CUTOUT_PATH, IIIF_PATH, HIPS_PATH};

    /* Truncated to its header: at once (no wait) and after the version check. */
    unsigned long faults0 = mapguard_faults();
    ck_assert_int_eq(truncate(img, 2880), 0);
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
            tt_resp r = tt_fetch(base, "GET", paths[k], NULL, 0, NULL);
            /* Within a second of the change a cached answer of the old file may still be
             * served (the guarantee); never a crash, never an answer of zeros. */
            if (round == 0 && r.status == 200 && strcmp(r.x_cache, "HIT") == 0) {
                tt_resp_free(&r);
                continue;
            }
            tt_assert_problem(paths[k], &r, 500, NULL);
            tt_resp_free(&r);
        }
        if (round == 0)
            usleep(1100000);
    }
    printf("truncated file: 500 problem+json on every route, server up; %lu SIGBUS absorbed "
           "(0: the stat before each read saw the truncation first)\n",
           mapguard_faults() - faults0);
    tt_resp h = fetch_ok("/healthz", "truncated");
    tt_resp_free(&h);

    /* Deleted. */
    ck_assert_int_eq(unlink(img), 0);
    usleep(1100000);
    for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
        tt_resp r = tt_fetch(base, "GET", paths[k], NULL, 0, NULL);
        tt_assert_problem(paths[k], &r, 500, NULL);
        tt_resp_free(&r);
    }
    h = fetch_ok("/api/v1/datasets", "deleted");
    tt_resp_free(&h);

    /* Restored (as version 2): served again, with its own pixels. */
    double t0 = tt_now_s();
    write_image(img, 2);
    wait_for_version(2, t0);
    usleep(1100000);
    for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
        tt_resp r = fetch_ok(paths[k], "restored");
        tt_resp_free(&r);
    }
    expect_raw(2, "restored");
    stop_data_server();
}
END_TEST

/* The guard itself: a read past the end of a file truncated under its mapping is
 * absorbed (zeros, the mapping marked faulted), not a SIGBUS that kills the server. */
START_TEST(test_mapguard_absorbs_sigbus)
{
    /* A SIGBUS outside any guarded mapping still kills (the guard does not hide bugs).
     * In a child whose SIGBUS action is the default when the guard installs itself
     * (under AddressSanitizer the sanitizer's handler would otherwise be chained to,
     * and report). */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL);
        static const char page[64];
        if (mapguard_add(page, sizeof(page)) < 0)
            _exit(3);
        raise(SIGBUS);
        _exit(0);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS,
                  "a stray SIGBUS did not kill the process (status %d)", ws);
    if (tt_under_valgrind()) {
        /* valgrind turns the fault of a read past the end of a truncated mapping into a
         * SIGSEGV at address 0 that the program cannot handle (the guard's SIGBUS handler
         * never runs): the process dies.  The absorption is checked in every other run
         * (make check, ASan). */
        printf("test_mapguard_absorbs_sigbus: the truncated-mapping part is SKIPPED under "
               "valgrind (valgrind intercepts the SIGBUS of a read past the end of a "
               "truncated mapping and kills the process); the stray-SIGBUS part passed\n");
        return;
    }

    tt_tmpdir_make(datadir, sizeof(datadir), "faults");
    snprintf(img, sizeof(img), "%s/img.fits", datadir);
    write_image(img, 1);
    int fd = open(img, O_RDWR);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    size_t len = (size_t)st.st_size;
    ck_assert_uint_ge(len, 3 * 2880);
    const unsigned char *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(map != MAP_FAILED);
    int slot = mapguard_add(map, len);
    ck_assert_int_ge(slot, 0);
    ck_assert_int_eq(mapguard_faulted(slot), 0);
    ck_assert_int_eq(memcmp(map, "SIMPLE  =", 9), 0);
    /* Pixel bytes from the second page on (pixel values 1..4764 as big-endian floats:
     * the exponent byte is never zero). */
    int nonzero = 0;
    for (size_t i = 4096; i < 2880 + (size_t)NX * NY * 4; i += 4)
        nonzero += map[i] != 0;
    ck_assert_int_eq(nonzero, ((2880 + NX * NY * 4) - 4096) / 4);
    /* Truncated to its header: those pages are now past the end of the file. */
    ck_assert_int_eq(ftruncate(fd, 2880), 0);
    unsigned long f0 = mapguard_faults();
    nonzero = 0;
    for (size_t i = 4096; i < len; i += 4)
        nonzero += ((volatile const unsigned char *)map)[i] != 0;
    ck_assert_int_eq(nonzero, 0);                  /* zeros, not the old pixels */
    ck_assert_int_eq(mapguard_faulted(slot), 1);
    ck_assert_uint_ge(mapguard_faults() - f0, 1);
    ck_assert_int_eq(memcmp(map, "SIMPLE  =", 9), 0); /* the pages inside the file stay */
    mapguard_remove(slot);
    munmap((void *)map, len);
    close(fd);
    rm_rf(datadir);
}
END_TEST

/* The reader: a file truncated while mapped gives TESS_EIO (whether the stat before the
 * read or the guard during it notices), and once rewritten it is read anew. */
START_TEST(test_stack_truncated_under_map)
{
    tt_tmpdir_make(datadir, sizeof(datadir), "faults");
    snprintf(img, sizeof(img), "%s/img.fits", datadir);
    write_image(img, 1);
    const char *paths[1] = {img};
    stack *s = stack_new(paths, 1, 0, NX, NY, 1, 4);
    ck_assert_ptr_nonnull(s);
    double *v = malloc(sizeof(double) * NX * NY);
    char err[256];
    ck_assert_int_eq(stack_read_region(s, 0, 0, 0, NX, NY, v, err, sizeof(err)), 0);
    ck_assert(v[NX * NY - 1] == pixel(1, NX - 1, NY - 1));
    /* Truncate the file in place: the inode (and the mapping) stay. */
    int fd = open(img, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 2880), 0);
    close(fd);
    int rc = stack_read_region(s, 0, 0, 0, NX, NY, v, err, sizeof(err));
    ck_assert_msg(rc == TESS_EIO, "read of a truncated file: rc %d", rc);
    ck_assert_ptr_nonnull(strstr(err, "img.fits"));
    /* Rewritten (same size as before): read anew, the new values. */
    write_image(img, 2);
    ck_assert_int_eq(stack_read_region(s, 0, 0, 0, NX, NY, v, err, sizeof(err)), 0);
    for (int i = 0; i < NX * NY; i++)
        ck_assert(v[i] == pixel(2, i % NX, i / NX));
    free(v);
    stack_free(s);
    rm_rf(datadir);
}
END_TEST

/* ---- part 2: disk full while a job writes its product ------------------------------- */

/* A job type whose product is `kb` KiB (a multiple of 8) of float64 FITS written by
 * cfitsio: {"type": "test_big", "kb": N, "output": {"name": NAME}}; one block of work. */
typedef struct big_state {
    long kb;
    char name[128];
} big_state;

static int big_validate(const json_t *b, const job_env *env, job_problem *pb)
{
    static const char *const known[] = {"type", "kb", "output", NULL};
    if (jobkind_only_fields(b, known, "", pb))
        return -1;
    json_t *o = json_object_get(b, "output");
    json_t *name = o ? json_object_get(o, "name") : NULL;
    json_t *kb = json_object_get(b, "kb");
    if (!json_is_integer(kb) || json_integer_value(kb) < 8 || json_integer_value(kb) % 8 ||
        json_integer_value(kb) > 65536 || !json_is_string(name)) {
        jobkind_problem(pb, 400, "kb", "kb (8..65536, a multiple of 8) and output.name are needed");
        return -1;
    }
    return jobkind_check_new_name(env, json_string_value(name), "output.name", pb);
}

static int big_plan(const void *b, const job_env *env, const char *wd, job_plan *out,
                    char *err, size_t errlen)
{
    (void)env;
    (void)wd;
    (void)err;
    (void)errlen;
    big_state *s = calloc(1, sizeof(*s));
    s->kb = (long)json_integer_value(json_object_get(b, "kb"));
    snprintf(s->name, sizeof(s->name), "%s",
             json_string_value(json_object_get(json_object_get(b, "output"), "name")));
    out->nstages = 1;
    out->nblocks[0] = 1;
    out->state = s;
    return 0;
}

static int big_run(void *state, int stage, long block, const volatile int *cancel, char *err,
                   size_t errlen)
{
    (void)state, (void)stage, (void)block, (void)cancel, (void)err, (void)errlen;
    return 0;
}

static int big_finish(void *state, const char *tmp, job_product *prod, char *err, size_t errlen)
{
    big_state *s = state;
    long n = s->kb * 1024 / 8;
    long naxes[2] = {128, n / 128};
    double *v = malloc(sizeof(double) * (size_t)n);
    for (long i = 0; i < n; i++)
        v[i] = (double)i;
    fitsfile *f;
    int st = 0, st2 = 0;
    errno = 0;
    fits_create_diskfile(&f, tmp, &st);
    fits_create_img(f, DOUBLE_IMG, 2, naxes, &st);
    fits_write_img(f, TDOUBLE, 1, n, v, &st);
    int saved = errno;
    if (f)
        fits_close_file(f, st ? &st2 : &st);
    if (!saved)
        saved = errno;
    free(v);
    snprintf(prod->dataset, sizeof(prod->dataset), "%s", s->name);
    if (st) {
        char msg[FLEN_ERRMSG];
        fits_get_errstatus(st, msg);
        tess_seterr(err, errlen, "cannot write the product: %s (%s)", msg, strerror(saved));
        return TESS_EIO;
    }
    return 0;
}

static void big_release(void *state)
{
    free(state);
}

static int big_parse(const json_t *b, const job_env *env, int accepted, void **req,
                    job_problem *pb)
{
    (void)accepted;
    return tt_body_request(b, env, req, pb, big_validate);
}

static const job_kind big_kind = {
    .type = "test_big",
    .parse = big_parse,
    .req_free = tt_body_request_free,
    .plan = big_plan,
    .run_block = big_run,
    .finish = big_finish,
    .release = big_release,
};

static json_t *get_json(const char *method, const char *path, const char *body, long want)
{
    tt_resp r = tt_fetch(base, method, path, body, body ? strlen(body) : 0,
                         body ? "Content-Type: application/json" : NULL);
    ck_assert_msg(r.status == want, "%s %s: status %ld, want %ld: %s", method, path, r.status,
                  want, r.body ? r.body : "");
    json_error_t e;
    json_t *j = json_loads(r.body, 0, &e);
    ck_assert_msg(j != NULL, "%s %s: not JSON", method, path);
    tt_resp_free(&r);
    return j;
}

static json_t *run_job(const char *body, char *id, size_t idlen)
{
    json_t *j = get_json("POST", "/api/v1/jobs", body, 202);
    snprintf(id, idlen, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/jobs/%s", id);
    double t0 = tt_now_s();
    for (;;) {
        j = get_json("GET", path, NULL, 200);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (strcmp(st, "queued") != 0 && strcmp(st, "running") != 0)
            return j;
        json_decref(j);
        ck_assert_msg(tt_now_s() - t0 < 60 * tt_time_scale(), "job %s did not end within %g s",
                      id, 60 * tt_time_scale());
        usleep(20000);
    }
}

/* The mosaic problem of tests/data/mosaic (copied from the project's shared data). */
#define MOSAIC_DIR TESSERA_TESTDATA_DIR "/mosaic"

/* A mosaic job of the six shared tiles onto reference_target.hdr (a 4.9 MB product). */
static char *mosaic_body(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/reference_target.hdr", MOSAIC_DIR);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char hdr[65536];
    size_t n = fread(hdr, 1, sizeof(hdr) - 1, f);
    hdr[n] = '\0';
    fclose(f);
    char *root = realpath(MOSAIC_DIR, NULL);
    ck_assert_ptr_nonnull(root);
    json_t *in = json_array();
    for (int i = 1; i <= 6; i++) {
        snprintf(path, sizeof(path), "%s/tile_%d.fits", root, i);
        json_array_append_new(in, json_string(path));
    }
    free(root);
    json_t *b = json_pack("{s:s, s:o, s:{s:s}, s:s, s:{s:s}}", "type", "mosaic", "inputs", in,
                          "target", "header", hdr, "method", "bilinear", "output", "name", name);
    ck_assert_ptr_nonnull(b);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

typedef struct child_args {
    const char *jobsdir;
    rlim_t fsize;
} child_args;

/* The child of fork_server: the server, then the file size limit; returns its port. */
static int child_server(void *arg)
{
    const child_args *a = arg;
    char err[512];
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_demo(&cfg, TESSERA_DEMO_DIR, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_set_listen(&cfg, "127.0.0.1:0", err, sizeof(err)), 0);
    /* A second data root: the mosaic tiles of tests/data/mosaic. */
    char *mroot = realpath(MOSAIC_DIR, NULL);
    ck_assert_msg(mroot != NULL, "no %s", MOSAIC_DIR);
    cfg.data_roots = realloc(cfg.data_roots, (size_t)(cfg.n_roots + 1) * sizeof(char *));
    cfg.data_roots[cfg.n_roots++] = mroot;
    cfg.threads = 2;
    cfg.jobs_dir = strdup(a->jobsdir);
    ck_assert_int_eq(jobs_register_kind(&big_kind), 0);
    ck_assert_msg(tserver_start(&cfg, &srv, err, sizeof(err)) == 0, "%s", err);
    if (a->fsize) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {a->fsize, a->fsize};
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    return tserver_port(srv);
}

/* A server in a child process with jobs in `jobsdir`; with `fsize` > 0 every file it
 * writes is limited to that many bytes (RLIMIT_FSIZE, SIGXFSZ ignored: write(2) fails
 * with EFBIG).  Returns the child's pid; `base` points at it. */
static pid_t fork_server(const char *jobsdir, rlim_t fsize)
{
    child_args a = {jobsdir, fsize};
    return tt_fork_server(child_server, &a, base, sizeof(base));
}

/* One disk-full run: a 4 MB product on a 2 MB file system (or a 1 MB file size limit)
 * fails, cleanly; a small one afterwards succeeds. */
static void disk_full_case(const char *jobsdir, rlim_t fsize, const char *how)
{
    pid_t pid = fork_server(jobsdir, fsize);
    char id[32], path[PATH_MAX];
    json_t *j = run_job("{\"type\": \"test_big\", \"kb\": 4096, \"output\": {\"name\": \"big\"}}", id,
                        sizeof(id));
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    json_t *e = json_object_get(j, "error");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 500);
    const char *detail = json_string_value(json_object_get(e, "detail"));
    ck_assert_ptr_nonnull(detail);
    printf("disk full (%s): job %s failed: %s\n", how, id, detail);
    ck_assert_msg(strstr(detail, "cannot write the product"), "detail: %s", detail);
    ck_assert(json_is_null(json_object_get(j, "result")) || !json_object_get(j, "result"));
    json_decref(j);
    /* No product, no temporary file, no work directory, no dataset. */
    snprintf(path, sizeof(path), "%s/results", jobsdir);
    ck_assert_int_eq(tt_count_entries(path), 0);
    snprintf(path, sizeof(path), "%s/work", jobsdir);
    ck_assert_int_eq(tt_count_entries(path), 0);
    tt_resp r = tt_fetch(base, "GET", "/api/v1/datasets/big", NULL, 0, NULL);
    tt_assert_problem("/api/v1/datasets/big", &r, 404, NULL);
    tt_resp_free(&r);
    snprintf(path, sizeof(path), "/api/v1/jobs/%s/result", id);
    r = tt_fetch(base, "GET", path, NULL, 0, NULL);
    tt_assert_problem(path, &r, 409, NULL);
    tt_resp_free(&r);
    /* A mosaic (daemon/jobs/job_mosaic.c: its product is written into the work directory
     * block by block, then linked to the temporary name) fails as cleanly. */
    char *mb = mosaic_body("bigmosaic");
    j = run_job(mb, id, sizeof(id));
    free(mb);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    e = json_object_get(j, "error");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 500);
    printf("disk full (%s): mosaic job %s failed: %s\n", how, id,
           json_string_value(json_object_get(e, "detail")));
    json_decref(j);
    snprintf(path, sizeof(path), "%s/results", jobsdir);
    ck_assert_int_eq(tt_count_entries(path), 0);
    snprintf(path, sizeof(path), "%s/work", jobsdir);
    ck_assert_int_eq(tt_count_entries(path), 0);
    r = tt_fetch(base, "GET", "/api/v1/datasets/bigmosaic", NULL, 0, NULL);
    tt_assert_problem("/api/v1/datasets/bigmosaic", &r, 404, NULL);
    tt_resp_free(&r);
    /* The space came back: a small product goes through. */
    j = run_job("{\"type\": \"test_big\", \"kb\": 256, \"output\": {\"name\": \"small\"}}", id,
                sizeof(id));
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    j = get_json("GET", "/api/v1/datasets/small", NULL, 200);
    json_decref(j);
    kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    /* Only the good product is left. */
    snprintf(path, sizeof(path), "%s/results", jobsdir);
    ck_assert_int_eq(tt_count_entries(path), 1);
}

START_TEST(test_disk_full_job_fails_cleanly)
{
    char dir[256];
    tt_tmpdir_make(dir, sizeof(dir), "diskfull");
    /* A real ENOSPC: a 2 MB tmpfs (tt_mount_tmpfs; where refused, say so: the
     * RLIMIT_FSIZE case below runs anyway). */
    const char *why = tt_mount_tmpfs(dir, "2m");
    if (!why) {
        disk_full_case(dir, 0, "tmpfs of 2 MB, ENOSPC");
        ck_assert_int_eq(umount(dir), 0);
    } else {
        printf("disk full: %s refused (%s): RLIMIT_FSIZE only\n", why, strerror(errno));
    }
    rm_rf(dir);
    /* EFBIG from RLIMIT_FSIZE, always (the kernel error without the mount privilege). */
    tt_tmpdir_make(dir, sizeof(dir), "diskfull");
    disk_full_case(dir, (rlim_t)1 << 20, "RLIMIT_FSIZE of 1 MB, EFBIG");
    rm_rf(dir);
}
END_TEST

/* ---- part 4: SIGTERM with requests in flight ------------------------------------------ */

#define NCLIENTS 8

typedef struct client {
    int i;
    int port;
    int sent;                  /* the request went out (atomic) */
    int finished;              /* curl_easy_perform returned (atomic) */
    long status;
    CURLcode cc;
    tt_resp r;
    double t_end;              /* when it returned; read after the join */
} client;

static size_t on_debug_sent(CURL *h, curl_infotype type, char *data, size_t size, void *cls)
{
    (void)h, (void)data, (void)size;
    client *c = cls;
    if (type == CURLINFO_HEADER_OUT)
        __atomic_store_n(&c->sent, 1, __ATOMIC_RELEASE);
    return 0;
}

static void *client_main(void *arg)
{
    client *c = arg;
    char url[512];
    /* Uncached, different for each client: lanczos3 onto 1024 x 1024 pixels (a quarter
     * of a second or more each, one after the other on the one worker). */
    snprintf(url, sizeof(url),
             "http://127.0.0.1:%d/api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=%.3f&coordsys=galactic"
             "&fov=0.4&width=1024&height=1024&method=lanczos3&format=fits",
             c->port, 0.001 * c->i);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    tt_curl_capture(h, &c->r);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug_sent);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, c);
    c->cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    c->t_end = tt_now_s();
    __atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
    curl_easy_cleanup(h);
    return NULL;
}

/* Reads the port from tesserad's "serving N datasets [and M collections] on
 * http://127.0.0.1:PORT/" line. */
static int wait_port(const char *logpath, double limit_s)
{
    double t0 = tt_now_s();
    for (;;) {
        FILE *f = fopen(logpath, "r");
        char line[512];
        while (f && fgets(line, sizeof(line), f)) {
            const char *p = strstr(line, "http://127.0.0.1:");
            if (p)
                return atoi(p + strlen("http://127.0.0.1:"));
        }
        if (f)
            fclose(f);
        ck_assert_msg(tt_now_s() - t0 < limit_s, "tesserad did not start within %.0f s", limit_s);
        usleep(20000);
    }
}

/* Starts the built tesserad on the source tree's demo data (named, not taken from the
 * environment make check sets, so that the program runs alone and under valgrind too;
 * port 0, one worker thread, so that requests queue; jobs under `dir`; a grace period of
 * 30 s after SIGTERM, the bound the tests allow, so that a loaded machine's slow drain is
 * not cut short) with its stderr in `logpath`; returns its pid and its port in *port. */
static pid_t spawn_tesserad(const char *dir, char *logpath, size_t loglen, int *port)
{
    char jdir[PATH_MAX];
    snprintf(logpath, loglen, "%s/tesserad.log", dir);
    snprintf(jdir, sizeof(jdir), "%s/jobs", dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlives a failed test */
        int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        close(fd);
        execl(TESSERAD_BIN, "tesserad", "--listen", "127.0.0.1:0", "--threads", "1",
              "--demo-dir", TESSERA_DEMO_DIR, "--jobs-dir", jdir, "--shutdown-grace", "30",
              (char *)NULL);
        _exit(127);
    }
    *port = wait_port(logpath, 30);
    return pid;
}

/* Waits (at most `limit_s`) for `pid` to exit; returns its wait status. */
static int wait_exit(pid_t pid, double limit_s, double *took)
{
    double t0 = tt_now_s();
    int ws = 0;
    pid_t w;
    while ((w = waitpid(pid, &ws, WNOHANG)) == 0) {
        ck_assert_msg(tt_now_s() - t0 < limit_s, "tesserad still running %.0f s after SIGTERM",
                      limit_s);
        usleep(20000);
    }
    ck_assert_int_eq(w, pid);
    *took = tt_now_s() - t0;
    return ws;
}

START_TEST(test_sigterm_finishes_requests_in_flight)
{
    char dir[256], logpath[PATH_MAX];
    int port;
    tt_tmpdir_make(dir, sizeof(dir), "sigterm");
    pid_t pid = spawn_tesserad(dir, logpath, sizeof(logpath), &port);
    client cl[NCLIENTS];
    pthread_t th[NCLIENTS];
    memset(cl, 0, sizeof(cl));
    double t0 = tt_now_s();
    for (int i = 0; i < NCLIENTS; i++) {
        cl[i].i = i;
        cl[i].port = port;
        ck_assert_int_eq(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
    }
    /* Every request sent, then a moment (0.1 s) for the server to read them. */
    for (int i = 0; i < NCLIENTS; i++)
        while (!__atomic_load_n(&cl[i].sent, __ATOMIC_ACQUIRE)) {
            ck_assert_msg(tt_now_s() - t0 < 30 * tt_time_scale(), "request %d was not sent", i);
            usleep(2000);
        }
    usleep(100000);
    double t_sig = tt_now_s();
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    /* The listening socket goes at once: a new connection is refused. */
    usleep(200000);
    CURL *h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/healthz", port);
    tt_resp nr;
    memset(&nr, 0, sizeof(nr));
    curl_easy_setopt(h, CURLOPT_URL, url);
    tt_curl_capture(h, &nr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    CURLcode ncc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    tt_resp_free(&nr);
    int after = 0;
    for (int i = 0; i < NCLIENTS; i++)
        after += !__atomic_load_n(&cl[i].finished, __ATOMIC_ACQUIRE);
    ck_assert_msg(ncc == CURLE_COULDNT_CONNECT, "a connection after SIGTERM: %s",
                  curl_easy_strerror(ncc));
    /* Every request in flight completes with a whole, valid answer. */
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    int late = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        ck_assert_msg(cl[i].cc == CURLE_OK, "request %d: %s", i, curl_easy_strerror(cl[i].cc));
        ck_assert_msg(cl[i].status == 200, "request %d: status %ld: %s", i, cl[i].status,
                      cl[i].r.body ? cl[i].r.body : "");
        ck_assert_str_eq(cl[i].r.content_type, "application/fits");
        long nx, ny;
        double *v = tt_fits_mem_read(cl[i].r.body, cl[i].r.len, 1, &nx, &ny);
        ck_assert_int_eq(nx, 1024);
        ck_assert_int_eq(ny, 1024);
        long finite = 0;
        double lo = INFINITY, hi = -INFINITY;
        for (long k = 0; k < nx * ny; k++) {
            finite += isfinite(v[k]);
            lo = v[k] < lo ? v[k] : lo;
            hi = v[k] > hi ? v[k] : hi;
        }
        ck_assert_int_eq(finite, nx * ny);   /* the field lies inside gc_2mass_k */
        ck_assert_msg(hi > lo, "request %d: a constant image (%g)", i, lo);
        free(v);
        late += cl[i].t_end > t_sig;
        tt_resp_free(&cl[i].r);
    }
    /* The process exits 0 within the bound (30 s; it has nothing left to do). */
    double took;
    int ws = wait_exit(pid, 30, &took);
    double t_exit = tt_now_s() - t_sig;
    (void)took;
    printf("SIGTERM: %d of %d requests in flight at the signal (%d still running 0.2 s "
           "later), all 200 with whole FITS bodies; exit %d after %.2f s\n",
           late, NCLIENTS, after, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, t_exit);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "tesserad ended with status %d", ws);
    ck_assert_msg(late >= 1, "no request was still in flight at SIGTERM: the test proved nothing");
    FILE *f = fopen(logpath, "r");
    char line[512];
    int said = 0;
    while (f && fgets(line, sizeof(line), f))
        said |= strstr(line, "SIGTERM received") != NULL;
    if (f)
        fclose(f);
    ck_assert(said);
    rm_rf(dir);
}
END_TEST

typedef struct slow_client {
    char url[256];
    tt_resp r;
    CURLcode cc;
    long status;
    curl_off_t got;
    volatile int started;      /* the first body bytes arrived */
} slow_client;

static size_t slow_body(char *p, size_t sz, size_t n, void *cls)
{
    slow_client *c = cls;
    c->got += (curl_off_t)(sz * n);
    __atomic_store_n(&c->started, 1, __ATOMIC_RELEASE);
    return sz * n;
}

static void *slow_main(void *arg)
{
    slow_client *c = arg;
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, c->url);
    tt_curl_capture(h, &c->r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, slow_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    /* 4 MB/s: the body takes seconds and is larger than the socket buffers hold. */
    curl_easy_setopt(h, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)4 << 20);
    c->cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    curl_easy_cleanup(h);
    return NULL;
}

/* A large answer from the cache (no pool work: sent straight from the HTTP thread),
 * downloaded slowly, is in flight too: SIGTERM lets it finish. */
START_TEST(test_sigterm_finishes_slow_download)
{
    char dir[256], logpath[PATH_MAX];
    int port;
    tt_tmpdir_make(dir, sizeof(dir), "sigterm");
    pid_t pid = spawn_tesserad(dir, logpath, sizeof(logpath), &port);
    slow_client c;
    memset(&c, 0, sizeof(c));
    /* 1300 x 1300 nearest-neighbour float64 FITS: about 14 MB, under the 16 MB a cache
     * shard holds (cache.memory_mb 256 over 16 shards), so the second fetch is a HIT. */
    snprintf(c.url, sizeof(c.url),
             "http://127.0.0.1:%d/api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=0&coordsys=galactic"
             "&fov=0.5&width=1300&height=1300&method=nearest&format=fits", port);
    char path[256];
    snprintf(path, sizeof(path), "%s", strchr(c.url + 7, '/'));
    char b[64];
    snprintf(b, sizeof(b), "http://127.0.0.1:%d", port);
    tt_resp first = tt_fetch(b, "GET", path, NULL, 0, NULL);
    ck_assert_int_eq(first.status, 200);
    size_t whole = first.len;
    ck_assert_uint_gt(whole, 12u << 20);
    tt_resp_free(&first);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, slow_main, &c), 0);
    double t0 = tt_now_s();
    while (!__atomic_load_n(&c.started, __ATOMIC_ACQUIRE)) {
        ck_assert_msg(tt_now_s() - t0 < 30 * tt_time_scale(), "the download did not start");
        usleep(5000);
    }
    usleep(300000);
    double t_sig = tt_now_s();
    long long got_at_sig = (long long)c.got;
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    pthread_join(th, NULL);
    double t_done = tt_now_s() - t_sig, took;
    int ws = wait_exit(pid, 30, &took);
    printf("SIGTERM during a slow download of %zu bytes (X-Cache %s, %lld received at the "
           "signal): %s, %lld bytes, %.2f s after the signal; exit %d %.2f s after the "
           "signal\n", whole, c.r.x_cache, got_at_sig, curl_easy_strerror(c.cc),
           (long long)c.got, t_done, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, t_done + took);
    ck_assert_msg(got_at_sig < (long long)whole, "the download ended before the signal");
    fflush(stdout);
    ck_assert_str_eq(c.r.x_cache, "HIT");
    ck_assert_msg(c.cc == CURLE_OK, "download cut by SIGTERM: %s after %lld of %zu bytes",
                  curl_easy_strerror(c.cc), (long long)c.got, whole);
    ck_assert_int_eq(c.status, 200);
    ck_assert_int_eq((long long)c.got, (long long)whole);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "tesserad ended with status %d", ws);
    tt_resp_free(&c.r);
    rm_rf(dir);
}
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);   /* the figures printed survive a failed test */
    curl_global_init(CURL_GLOBAL_ALL);
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mapguard_absorbs_sigbus);
    tcase_add_test(tc, test_stack_truncated_under_map);
    tcase_add_test(tc, test_replaced_file_served_fresh);
    tcase_add_test(tc, test_truncated_and_deleted);
    tcase_add_test(tc, test_header_claims_huge_plane);
    tcase_add_test(tc, test_disk_full_job_fails_cleanly);
    tcase_add_test(tc, test_sigterm_finishes_requests_in_flight);
    tcase_add_test(tc, test_sigterm_finishes_slow_download);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
