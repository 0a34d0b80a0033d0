/* Hostile files and signals: FIFOs where datasets are expected, files replaced with their
 * old size and mtime set back, and SIGTERM/SIGINT with long work in flight. */
#include "daemon/config.h"
#include "daemon/http.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "tests/testutil.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NX 40
#define NY 30

/* ---- the test image ------------------------------------------------------------------ */

/* Pixel (x, y) of version `ver`: 1 is 1 + x + 100 y, 2 the picture inverted (every
 * pixel differs), both exact in float32; 3 has the pixels of 2 and a header of its own
 * (CRVAL1 10, not 30: image_bytes). */
static float pixel(int ver, int x, int y)
{
    float v = (float)(1 + x + 100 * y);
    return ver == 1 ? v : 8000.0f - v;
}

/* Appends one 80-character card to the header block h (at card *k). */
static void card(char *h, int *k, const char *text)
{
    char c[81];
    snprintf(c, sizeof c, "%-80s", text);
    memcpy(h + 80 * (*k)++, c, 80);
}

/* The whole FITS file of version `ver` (BITPIX -32, TAN WCS at RA 30, Dec -10, 1'
 * pixels), built by hand so that both versions have exactly the same bytes count and
 * the same header block: 2880 bytes of header, the big-endian pixels padded to 2880. */
static unsigned char *image_bytes(int ver, size_t *len)
{
    size_t data = 4 * NX * NY, padded = (data + 2879) / 2880 * 2880;
    *len = 2880 + padded;
    unsigned char *b = calloc(1, *len);
    ck_assert_ptr_nonnull(b);
    memset(b, ' ', 2880);
    int k = 0;
    char t[81];
    card((char *)b, &k, "SIMPLE  =                    T");
    card((char *)b, &k, "BITPIX  =                  -32");
    card((char *)b, &k, "NAXIS   =                    2");
    snprintf(t, sizeof t, "NAXIS1  = %20d", NX);
    card((char *)b, &k, t);
    snprintf(t, sizeof t, "NAXIS2  = %20d", NY);
    card((char *)b, &k, t);
    card((char *)b, &k, "CTYPE1  = 'RA---TAN'");
    card((char *)b, &k, "CTYPE2  = 'DEC--TAN'");
    card((char *)b, &k, "CRPIX1  =                 20.5");
    card((char *)b, &k, "CRPIX2  =                 15.5");
    card((char *)b, &k, ver == 3 ? "CRVAL1  =                 10.0"
                                 : "CRVAL1  =                 30.0");
    card((char *)b, &k, "CRVAL2  =                -10.0");
    card((char *)b, &k, "CDELT1  =   -0.016666666666667");
    card((char *)b, &k, "CDELT2  =    0.016666666666667");
    card((char *)b, &k, "END");
    for (int y = 0; y < NY; y++)
        for (int x = 0; x < NX; x++) {
            float v = pixel(ver, x, y);
            uint32_t u;
            memcpy(&u, &v, 4);
            unsigned char *p = b + 2880 + 4 * (size_t)(y * NX + x);
            p[0] = (unsigned char)(u >> 24);
            p[1] = (unsigned char)(u >> 16);
            p[2] = (unsigned char)(u >> 8);
            p[3] = (unsigned char)u;
        }
    return b;
}

/* How a version replaces the file: written over in place (same inode), or written
 * beside it and renamed over it (a new inode). */
enum how { IN_PLACE, RENAMED };

/* Writes version `ver` to `path` the way `how` says.  When `keep` is not NULL the
 * file's old atime and mtime are set back afterwards (utimensat), and the size is the
 * same by construction: only the inode (renamed) or the ctime (in place) tell. */
static void put_image(const char *path, int ver, enum how how, const struct stat *keep)
{
    size_t len;
    unsigned char *b = image_bytes(ver, &len);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    const char *to = how == RENAMED ? tmp : path;
    int fd = open(to, O_WRONLY | O_CREAT | (how == RENAMED ? O_TRUNC : 0), 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(tess_pwrite_all(fd, b, len, 0), 0);
    ck_assert_int_eq(close(fd), 0);
    free(b);
    if (how == RENAMED)
        ck_assert_int_eq(rename(tmp, path), 0);
    if (keep) {
        struct timespec ts[2] = { keep->st_atim, keep->st_mtim };
        ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
        struct stat now;
        ck_assert_int_eq(stat(path, &now), 0);
        ck_assert_int_eq(now.st_size, keep->st_size);
        ck_assert_int_eq(now.st_mtim.tv_sec, keep->st_mtim.tv_sec);
        ck_assert_int_eq(now.st_mtim.tv_nsec, keep->st_mtim.tv_nsec);
    }
}

/* Sleeps past one tick of the coarse clock that timestamps inodes, so that a rewrite's
 * ctime differs from the one the server saw. */
static void next_tick(void)
{
    struct timespec res;
    clock_getres(CLOCK_REALTIME_COARSE, &res);
    usleep((useconds_t)(res.tv_nsec / 1000) + 2000);
}

static void rm_rf(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- a server in this process ------------------------------------------------------- */

typedef struct server {
    tess_config cfg;
    tserver *srv;
    char base[64];
} server;

/* Starts a server on the data root `root` with the datasets of `datasets` (JSON) and,
 * when `disk` is not NULL, the disk tier there. */
static void server_start(server *s, const char *root, const char *datasets, const char *disk)
{
    char text[2048], diskpart[512] = "", err[512];
    if (disk)
        snprintf(diskpart, sizeof diskpart, ", \"cache\": {\"disk_dir\": \"%s\", \"disk_mb\": 8}",
                 disk);
    snprintf(text, sizeof text, "{\"listen\": \"127.0.0.1:0\", \"threads\": 2, \"data_roots\": "
             "[\"%s\"]%s, \"datasets\": %s}", root, diskpart, datasets);
    ck_assert_int_eq(config_init(&s->cfg), 0);
    ck_assert_msg(config_load_text(text, &s->cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tserver_start(&s->cfg, &s->srv, err, sizeof err) == 0, "%s", err);
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", tserver_port(s->srv));
}

static void server_stop(server *s)
{
    tserver_stop(s->srv, 5);
    config_release(&s->cfg);
}

#define IMG_DATASETS "[{\"name\": \"img\", \"path\": \"img.fits\"}]"
#define RAW_WHOLE "/api/v1/datasets/img/slice/xy/40_30/0_0_0.raw"
/* A region never asked for before the change: uncached whatever the tiers hold. */
#define RAW_PART "/api/v1/datasets/img/slice/xy/8_6/1_1_0.raw"
#define IIIF_FULL "/iiif/3/img/full/max/0/default.png"

/* The version the raw slice at `path` (w x h pixels at (x0, y0)) shows: 1 or 2, 0 for
 * a mix or a failure; its X-Cache into xc. */
static int raw_version(const server *s, const char *path, int x0, int y0, int w, int h,
                       char *xc, size_t xclen)
{
    tt_resp r = tt_fetch(s->base, "GET", path, NULL, 0, NULL);
    int ver = 0;
    if (r.status == 200 && r.len == 4 * (size_t)w * (size_t)h) {
        for (int v = 1; v <= 2 && !ver; v++) {
            int all = 1;
            for (int i = 0; i < w * h && all; i++) {
                float f;
                memcpy(&f, r.body + 4 * (size_t)i, 4);   /* little-endian, as this machine */
                all = f == pixel(v, x0 + i % w, y0 + i / w);
            }
            ver = all ? v : 0;
        }
    }
    if (xc)
        snprintf(xc, xclen, "%s", r.x_cache);
    tt_resp_free(&r);
    return ver;
}

/* The body of a 200 answer to `path` (malloc'd), its length in *len. */
static char *body_of(const server *s, const char *path, size_t *len)
{
    tt_resp r = tt_fetch(s->base, "GET", path, NULL, 0, NULL);
    ck_assert_msg(r.status == 200, "%s: status %ld: %s", path, r.status, r.body ? r.body : "");
    *len = r.len;
    char *b = r.body;
    r.body = NULL;
    tt_resp_free(&r);
    return b;
}

/* One replacement that keeps size and mtime, against a server that has every route's
 * answer cached: the new pixels are served once the version check has run (about a
 * second, daemon/catalog.h), from the cached paths and the uncached ones alike, through
 * the stack reader (raw slices) and the plane store (IIIF); with the disk tier, a
 * server started later on the same cache directory serves the new file too. */
static void replacement_seen(enum how how, int with_disk)
{
    char root[256], img[PATH_MAX], disk[PATH_MAX], xc[16];
    tt_tmpdir_make(root, sizeof root, how == IN_PLACE ? "inplace" : "renamed");
    snprintf(img, sizeof img, "%s/img.fits", root);
    snprintf(disk, sizeof disk, "%s/cache", root);
    put_image(img, 1, RENAMED, NULL);
    struct stat st0;
    ck_assert_int_eq(stat(img, &st0), 0);
    server s;
    server_start(&s, root, IMG_DATASETS, with_disk ? disk : NULL);
    ck_assert_int_eq(raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, NULL, 0), 1);
    ck_assert_int_eq(raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, xc, sizeof xc), 1);
    ck_assert_str_eq(xc, "HIT");
    size_t n1, n2;
    char *png1 = body_of(&s, IIIF_FULL, &n1);

    next_tick();
    put_image(img, 2, how, &st0);
    double t0 = tt_now_s();
    while (raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, NULL, 0) != 2) {
        ck_assert_msg(tt_now_s() - t0 < 4.0 * tt_time_scale(),
                      "%s with the same size and mtime: still served as before %.1f s later",
                      how == IN_PLACE ? "rewritten in place" : "renamed over", tt_now_s() - t0);
        usleep(50000);
    }
    double took = tt_now_s() - t0;
    ck_assert_int_eq(raw_version(&s, RAW_PART, 1, 1, 8, 6, NULL, 0), 2);
    char *png2 = body_of(&s, IIIF_FULL, &n2);
    ck_assert_msg(n1 != n2 || memcmp(png1, png2, n1) != 0,
                  "the IIIF image (plane store) is still that of the old file");
    free(png2);
    printf("%s, size and mtime kept, %s: new pixels served after %.2f s\n",
           how == IN_PLACE ? "rewritten in place" : "renamed over",
           with_disk ? "disk tier" : "memory tier only", took);
    server_stop(&s);

    if (with_disk) {
        /* Changed back while no server runs (still the same size and mtime): the disk
         * tier, which holds version 2 under the old identity, must not answer. */
        next_tick();
        put_image(img, 1, how, &st0);
        server_start(&s, root, IMG_DATASETS, disk);
        ck_assert_int_eq(raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, xc, sizeof xc), 1);
        ck_assert_str_eq(xc, "MISS");
        ck_assert_int_eq(raw_version(&s, RAW_PART, 1, 1, 8, 6, NULL, 0), 1);
        char *png3 = body_of(&s, IIIF_FULL, &n2);
        ck_assert_msg(n1 == n2 && memcmp(png1, png3, n1) == 0,
                      "the IIIF image after the restart is not that of the file");
        free(png3);
        server_stop(&s);
    }
    free(png1);
    rm_rf(root);
}

START_TEST(test_rewritten_in_place_same_size_mtime)
{
    replacement_seen(IN_PLACE, 0);
}
END_TEST

START_TEST(test_rewritten_in_place_disk_tier)
{
    replacement_seen(IN_PLACE, 1);
}
END_TEST

START_TEST(test_renamed_over_same_size_mtime)
{
    replacement_seen(RENAMED, 0);
}
END_TEST

START_TEST(test_renamed_over_disk_tier)
{
    replacement_seen(RENAMED, 1);
}
END_TEST

/* A file rewritten in place with its size and mtime kept but its header changed (CRVAL1
 * 30 -> 10): the new pixels are never served under the old header, and once the version
 * check has run (about a second) every route of the dataset, its description included,
 * answers 500 naming the file and the card, and saying to restart the server. */
START_TEST(test_header_changed_same_size_mtime)
{
    char root[256], img[PATH_MAX];
    tt_tmpdir_make(root, sizeof root, "header");
    snprintf(img, sizeof img, "%s/img.fits", root);
    put_image(img, 1, RENAMED, NULL);
    struct stat st0;
    ck_assert_int_eq(stat(img, &st0), 0);
    server s;
    char with_jobs[PATH_MAX + 128];   /* the job runner too: its inputs are looked up alike */
    snprintf(with_jobs, sizeof with_jobs, "%s, \"jobs\": {\"dir\": \"%s/jobs\"}", IMG_DATASETS,
             root);
    server_start(&s, root, with_jobs, NULL);
    static const char *const paths[] = {
        RAW_WHOLE, RAW_PART, IIIF_FULL, "/api/v1/datasets/img", "/api/v1/datasets/img/",
        "/api/v1/cutout?dataset=img&ra=30&dec=-10&fov=0.2&width=16&height=16&format=fits",
        "/api/v1/datasets/img/slice/xy/40_30/0_0_0.fits" };
    const int npaths = (int)(sizeof paths / sizeof paths[0]);
    for (int k = 0; k < npaths; k++) {
        size_t n;
        free(body_of(&s, paths[k], &n));
    }
    size_t vo_n;
    char *vo_doc = body_of(&s, "/vo/datalink?ID=img", &vo_n);
    ck_assert_msg(strstr(vo_doc, "/vo/soda/sync") != NULL, "DataLink of img: %s", vo_doc);
    free(vo_doc);
    free(body_of(&s, "/vo/soda/sync?ID=img&CIRCLE=30%20-10%200.1", &vo_n));

    next_tick();
    put_image(img, 3, IN_PLACE, &st0);
    double t0 = tt_now_s();
    for (;;) {
        /* Until the dataset is refused: the old pixels (cached) or a 500, never the new. */
        ck_assert_int_ne(raw_version(&s, RAW_PART, 1, 1, 8, 6, NULL, 0), 2);
        tt_resp r = tt_fetch(s.base, "GET", "/api/v1/datasets/img", NULL, 0, NULL);
        long status = r.status;
        tt_resp_free(&r);
        if (status == 500)
            break;
        ck_assert_msg(tt_now_s() - t0 < 4.0 * tt_time_scale(),
                      "header changed: the dataset is still described %.1f s later",
                      tt_now_s() - t0);
        usleep(50000);
    }
    for (int k = 0; k < npaths; k++) {
        tt_resp r = tt_fetch(s.base, "GET", paths[k], NULL, 0, NULL);
        ck_assert_msg(r.status == 500, "%s after the header changed: status %ld", paths[k],
                      r.status);
        tt_assert_problem(paths[k], &r, 500, NULL);
        ck_assert_msg(r.body && strstr(r.body, "dataset 'img': the header of ") &&
                      strstr(r.body, "img.fits changed since the server started (CRVAL1); "
                             "restart tesserad to serve the new header"),
                      "%s: %s", paths[k], r.body ? r.body : "");
        tt_resp_free(&r);
    }
    /* A job naming the dataset as its input is refused with the same reason. */
    static const char job[] = "{\"type\": \"mosaic\", \"inputs\": [\"img\"], "
                              "\"output\": {\"name\": \"m_img\"}}";
    tt_resp jr = tt_fetch(s.base, "POST", "/api/v1/jobs", job, strlen(job), NULL);
    tt_assert_problem("POST /api/v1/jobs", &jr, 500, NULL);
    ck_assert_msg(jr.body && strstr(jr.body, "dataset 'img': the header of ") &&
                  strstr(jr.body, "changed since the server started (CRVAL1)") &&
                  strstr(jr.body, "\"parameter\":\"inputs[0]\""),
                  "POST /api/v1/jobs: %s", jr.body ? jr.body : "");
    tt_resp_free(&jr);
    /* DataLink and SODA find the dataset as every other route does: the same 500 and
     * reason, in their own error form (DALI: text/plain, a fault code first). */
    static const char *const vo_paths[] = {
        "/vo/datalink?ID=img", "/vo/datalink?ID=ivo://tessera/img&ID=nosuch",
        "/vo/soda/sync?ID=img&CIRCLE=30%20-10%200.1", "/vo/soda/sync?ID=ivo://tessera/img" };
    for (size_t k = 0; k < sizeof vo_paths / sizeof vo_paths[0]; k++) {
        tt_resp r = tt_fetch(s.base, "GET", vo_paths[k], NULL, 0, NULL);
        ck_assert_msg(r.status == 500, "%s after the header changed: status %ld", vo_paths[k],
                      r.status);
        ck_assert_msg(r.body && strncmp(r.body, "FatalFault: dataset 'img': the header of ",
                                        41) == 0 &&
                      strstr(r.body, "img.fits changed since the server started (CRVAL1); "
                             "restart tesserad to serve the new header\n"),
                      "%s: %s", vo_paths[k], r.body ? r.body : "");
        tt_resp_free(&r);
    }
    /* The header put back (pixels of version 2): served again, as a pixels-only change. */
    next_tick();
    put_image(img, 2, IN_PLACE, &st0);
    t0 = tt_now_s();
    while (raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, NULL, 0) != 2) {
        ck_assert_msg(tt_now_s() - t0 < 4.0 * tt_time_scale(),
                      "the header put back: the new pixels are not served");
        usleep(50000);
    }
    server_stop(&s);
    rm_rf(root);
}
END_TEST

/* ---- FIFOs where files are expected ---------------------------------------------------- */

typedef struct starter {
    tess_config *cfg;
    tserver *srv;
    int rc;
    char err[512];
    int done;                  /* atomic */
} starter;

static void *start_main(void *arg)
{
    starter *st = arg;
    st->rc = tserver_start(st->cfg, &st->srv, st->err, sizeof st->err);
    __atomic_store_n(&st->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* tserver_start on `datasets` must give up at once (no writer ever opens the FIFOs),
 * with an error naming `what`.  Run on a thread so that a start that blocks fails the
 * test instead of hanging it. */
static void start_refused(const char *root, const char *datasets, const char *what)
{
    char text[1024], err[256];
    snprintf(text, sizeof text, "{\"listen\": \"127.0.0.1:0\", \"data_roots\": [\"%s\"], "
             "\"datasets\": %s}", root, datasets);
    tess_config cfg;
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_msg(config_load_text(text, &cfg, err, sizeof err) == 0, "%s", err);
    starter st = { &cfg, NULL, 0, "", 0 };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, start_main, &st), 0);
    double t0 = tt_now_s();
    while (!__atomic_load_n(&st.done, __ATOMIC_ACQUIRE)) {
        ck_assert_msg(tt_now_s() - t0 < 5.0 * tt_time_scale(),
                      "tserver_start still blocked on %s after %.0f s", what, tt_now_s() - t0);
        usleep(10000);
    }
    pthread_join(th, NULL);
    ck_assert_int_ne(st.rc, 0);
    ck_assert_msg(strstr(st.err, what) && strstr(st.err, "is a FIFO, not a regular file"),
                  "the refusal does not name the FIFO: %s", st.err);
    printf("start-up refused: %s\n", st.err);
    config_release(&cfg);
}

START_TEST(test_fifo_dataset_refused_at_start)
{
    char root[256], p[PATH_MAX], err[256];
    tt_tmpdir_make(root, sizeof root, "fifo");
    snprintf(p, sizeof p, "%s/pipe.fits", root);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    start_refused(root, "[{\"name\": \"pipe\", \"path\": \"pipe.fits\"}]", "pipe.fits");
    /* A FIFO among the frames of a stack. */
    snprintf(p, sizeof p, "%s/f_0.fits", root);
    put_image(p, 1, RENAMED, NULL);
    snprintf(p, sizeof p, "%s/f_1.fits", root);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    start_refused(root, "[{\"name\": \"s\", \"frames\": \"f_*.fits\"}]", "f_1.fits");
    /* A FIFO named as the configuration file. */
    snprintf(p, sizeof p, "%s/conf.json", root);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    tess_config cfg;
    ck_assert_int_eq(config_init(&cfg), 0);
    ck_assert_int_eq(config_load_file(p, &cfg, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "FIFO"), "%s", err);
    rm_rf(root);
}
END_TEST

/* A served file replaced by a FIFO: its routes answer 500 at once, naming the FIFO; no
 * worker waits for a writer, so the server keeps answering (and serves the file again
 * once it is back). */
START_TEST(test_fifo_renamed_over_served_file)
{
    char root[256], img[PATH_MAX], fifo[PATH_MAX];
    tt_tmpdir_make(root, sizeof root, "fifo");
    snprintf(img, sizeof img, "%s/img.fits", root);
    snprintf(fifo, sizeof fifo, "%s/pipe", root);
    put_image(img, 1, RENAMED, NULL);
    server s;
    server_start(&s, root, IMG_DATASETS, NULL);
    ck_assert_int_eq(raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, NULL, 0), 1);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(rename(fifo, img), 0);
    static const char *const paths[] = { RAW_PART, IIIF_FULL,
                                         "/api/v1/cutout?dataset=img&ra=30&dec=-10&fov=0.2"
                                         "&width=16&height=16&format=fits" };
    double t0 = tt_now_s();
    for (int k = 0; k < 3; k++) {
        tt_resp r = tt_fetch(s.base, "GET", paths[k], NULL, 0, NULL);
        ck_assert_msg(r.status == 500, "%s over a FIFO: status %ld", paths[k], r.status);
        tt_assert_problem(paths[k], &r, 500, NULL);
        ck_assert_msg(r.body && strstr(r.body, "FIFO"), "%s: %s", paths[k], r.body);
        tt_resp_free(&r);
    }
    ck_assert_msg(tt_now_s() - t0 < 5.0 * tt_time_scale(), "the answers took %.1f s",
                  tt_now_s() - t0);
    put_image(img, 2, RENAMED, NULL);
    t0 = tt_now_s();
    while (raw_version(&s, RAW_WHOLE, 0, 0, NX, NY, NULL, 0) != 2) {
        ck_assert_msg(tt_now_s() - t0 < 4.0 * tt_time_scale(), "the restored file is not served");
        usleep(50000);
    }
    server_stop(&s);
    rm_rf(root);
}
END_TEST

/* ---- tesserad as a child: signals ------------------------------------------------------ */

typedef struct child {
    pid_t pid;
    char log[PATH_MAX];
    int port;
} child;

/* The text of the child's log (stderr), malloc'd. */
static char *log_text(const child *c)
{
    FILE *f = fopen(c->log, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16;
    char *t = calloc(1, cap);
    size_t n = fread(t, 1, cap - 1, f);
    t[n] = '\0';
    fclose(f);
    return t;
}

/* Starts build/tesserad with the configuration file `conf`, stderr into dir/tesserad.log;
 * with `serving` waits for its "serving ... on http://127.0.0.1:PORT/" line. */
static void child_start(child *c, const char *dir, const char *conf, int serving)
{
    snprintf(c->log, sizeof c->log, "%s/tesserad.log", dir);
    c->port = 0;
    int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    c->pid = fork();
    ck_assert_int_ge(c->pid, 0);
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlives a failed test */
        dup2(fd, 2);
        close(fd);
        execl(TESSERAD_BIN, "tesserad", "--config", conf, (char *)NULL);
        _exit(127);
    }
    close(fd);
    double t0 = tt_now_s();
    while (serving && !c->port) {
        char *t = log_text(c);
        const char *p = strstr(t, "http://127.0.0.1:");
        if (p)
            c->port = (int)strtol(p + strlen("http://127.0.0.1:"), NULL, 10);
        free(t);
        ck_assert_msg(c->port || tt_now_s() - t0 < 30, "tesserad did not start");
        if (!c->port)
            usleep(20000);
    }
}

/* Waits at most limit_s for the child to exit: 1 with its wait status and the seconds
 * it took, or 0 (then it is killed when `kill_late`). */
static int child_wait(child *c, double limit_s, int kill_late, int *ws, double *took)
{
    double t0 = tt_now_s();
    for (;;) {
        pid_t w = waitpid(c->pid, ws, WNOHANG);
        if (w == c->pid) {
            *took = tt_now_s() - t0;
            return 1;
        }
        if (tt_now_s() - t0 > limit_s) {
            if (kill_late) {
                kill(c->pid, SIGKILL);
                waitpid(c->pid, ws, 0);
            }
            *took = tt_now_s() - t0;
            return 0;
        }
        usleep(10000);
    }
}

/* Writes the configuration dir/tesserad.json: the demo's gc_2mass_k, one worker thread
 * (requests queue behind each other), the grace period `grace_s`. */
static void write_conf(const char *dir, int grace_s, char *conf, size_t len)
{
    snprintf(conf, len, "%s/tesserad.json", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"listen\": \"127.0.0.1:0\", \"threads\": 1, \"data_roots\": [\"%s\"],\n"
            " \"limits\": {\"shutdown_grace_s\": %d},\n"
            " \"datasets\": [{\"name\": \"gc\", \"path\": \"gc_2mass_k.fits\"}]}\n",
            TESSERA_DEMO_DIR, grace_s);
    ck_assert_int_eq(fclose(f), 0);
}

typedef struct long_request {
    int port, i;
    int sent;                  /* atomic: the request went out */
} long_request;

static size_t drop_body(char *p, size_t sz, size_t n, void *cls)
{
    (void)p, (void)cls;
    return sz * n;
}

static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *cls)
{
    (void)h, (void)data, (void)size;
    if (type == CURLINFO_HEADER_OUT)
        __atomic_store_n(&((long_request *)cls)->sent, 1, __ATOMIC_RELEASE);
    return 0;
}

/* A cutout of seconds of work (lanczos3 onto 4096 x 4096 pixels), different for each
 * i; its answer or the connection's end is all the same here. */
static void *long_main(void *arg)
{
    long_request *q = arg;
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/v1/cutout?dataset=gc&ra=0&dec=%.3f"
             "&coordsys=galactic&fov=0.4&width=4096&height=4096&method=lanczos3&format=fits",
             q->port, 0.001 * q->i);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, drop_body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, q);
    curl_easy_perform(h);
    curl_easy_cleanup(h);
    return NULL;
}

#define NLONG 4

/* Sends NLONG long requests to the child and returns once they are all out. */
static void send_long(const child *c, long_request *q, pthread_t *th)
{
    for (int i = 0; i < NLONG; i++) {
        q[i] = (long_request){ c->port, i, 0 };
        ck_assert_int_eq(pthread_create(&th[i], NULL, long_main, &q[i]), 0);
    }
    double t0 = tt_now_s();
    for (int i = 0; i < NLONG; i++)
        while (!__atomic_load_n(&q[i].sent, __ATOMIC_ACQUIRE)) {
            ck_assert_msg(tt_now_s() - t0 < 30, "request %d was not sent", i);
            usleep(2000);
        }
    usleep(300000);   /* read by the server, the first one computing */
}

/* SIGTERM with more work in flight than the grace period allows: tesserad stops
 * accepting, then exits once the grace period is over, saying so, with status 1. */
START_TEST(test_sigterm_bounded_with_long_work)
{
    char dir[256], conf[PATH_MAX];
    tt_tmpdir_make(dir, sizeof dir, "sigterm");
    write_conf(dir, 1, conf, sizeof conf);
    child c;
    child_start(&c, dir, conf, 1);
    long_request q[NLONG];
    pthread_t th[NLONG];
    send_long(&c, q, th);
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    int ws;
    double took;
    int ended = child_wait(&c, 1 + 4.0, 1, &ws, &took);
    for (int i = 0; i < NLONG; i++)
        pthread_join(th[i], NULL);
    char *t = log_text(&c);
    printf("SIGTERM with %d long cutouts in flight, grace 1 s: %s after %.2f s\n", NLONG,
           ended ? "exited" : "still running (killed)", took);
    ck_assert_msg(ended, "tesserad still running %.1f s after SIGTERM (grace 1 s): %s", took, t);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "exit status %d", ws);
    ck_assert_msg(strstr(t, "SIGTERM received") && strstr(t, "limits.shutdown_grace_s"),
                  "no log line about the grace period: %s", t);
    free(t);
    rm_rf(dir);
}
END_TEST

/* A second SIGINT while the first one's grace period runs: tesserad exits at once. */
START_TEST(test_second_signal_exits_at_once)
{
    char dir[256], conf[PATH_MAX];
    tt_tmpdir_make(dir, sizeof dir, "sigint");
    write_conf(dir, 600, conf, sizeof conf);
    child c;
    child_start(&c, dir, conf, 1);
    long_request q[NLONG];
    pthread_t th[NLONG];
    send_long(&c, q, th);
    ck_assert_int_eq(kill(c.pid, SIGINT), 0);
    usleep(300000);
    ck_assert_int_eq(waitpid(c.pid, NULL, WNOHANG), 0);   /* still finishing */
    ck_assert_int_eq(kill(c.pid, SIGINT), 0);
    int ws;
    double took;
    int ended = child_wait(&c, 4.0, 1, &ws, &took);
    for (int i = 0; i < NLONG; i++)
        pthread_join(th[i], NULL);
    char *t = log_text(&c);
    printf("second SIGINT: %s after %.2f s\n", ended ? "exited" : "still running (killed)",
           took);
    ck_assert_msg(ended, "tesserad still running %.1f s after a second SIGINT: %s", took, t);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "exit status %d", ws);
    ck_assert_msg(strstr(t, "second SIGINT"), "no log line about the second signal: %s", t);
    free(t);
    rm_rf(dir);
}
END_TEST

/* A FIFO named as a dataset: tesserad gives up at start with the reason, at once (no
 * writer ever comes), and SIGTERM is not needed to end it. */
START_TEST(test_tesserad_fifo_dataset_exits)
{
    char dir[256], conf[PATH_MAX], fifo[PATH_MAX];
    tt_tmpdir_make(dir, sizeof dir, "fifostart");
    snprintf(fifo, sizeof fifo, "%s/pipe.fits", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(conf, sizeof conf, "%s/tesserad.json", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"listen\": \"127.0.0.1:0\", \"data_roots\": [\"%s\"], "
            "\"datasets\": [{\"name\": \"p\", \"path\": \"pipe.fits\"}]}\n", dir);
    ck_assert_int_eq(fclose(f), 0);
    child c;
    child_start(&c, dir, conf, 0);
    int ws;
    double took;
    int ended = child_wait(&c, 3.0, 0, &ws, &took);
    if (!ended) {
        kill(c.pid, SIGTERM);   /* blocked in open(2): SIGTERM must still end it */
        int after = child_wait(&c, 3.0, 1, &ws, &took);
        ck_abort_msg("tesserad blocked at start on a FIFO dataset for 3 s; SIGTERM %s",
                     after ? "ended it" : "did not end it either (killed)");
    }
    char *t = log_text(&c);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "exit status %d: %s", ws, t);
    ck_assert_msg(strstr(t, "pipe.fits") && strstr(t, "is a FIFO"), "log: %s", t);
    printf("tesserad on a FIFO dataset: exit %d after %.2f s: %s", WEXITSTATUS(ws), took, t);
    free(t);
    rm_rf(dir);
}
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    curl_global_init(CURL_GLOBAL_ALL);
    Suite *s = suite_create("hostile_files");
    TCase *tc = tcase_create("hostile_files");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fifo_dataset_refused_at_start);
    tcase_add_test(tc, test_fifo_renamed_over_served_file);
    tcase_add_test(tc, test_tesserad_fifo_dataset_exits);
    tcase_add_test(tc, test_rewritten_in_place_same_size_mtime);
    tcase_add_test(tc, test_rewritten_in_place_disk_tier);
    tcase_add_test(tc, test_renamed_over_same_size_mtime);
    tcase_add_test(tc, test_renamed_over_disk_tier);
    tcase_add_test(tc, test_header_changed_same_size_mtime);
    tcase_add_test(tc, test_sigterm_bounded_with_long_work);
    tcase_add_test(tc, test_second_signal_exits_at_once);
    suite_add_tcase(s, tc);
    int rc = tt_run_suite(s);
    curl_global_cleanup();
    return rc;
}
