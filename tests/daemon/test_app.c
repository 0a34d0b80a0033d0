/* Unit tests of daemon/app: the composition root shared by the server and the worker
 * (tesserad --worker builds its app with tess_app_open, as tserver_start does), so the
 * settings that guard the readers hold in both. */
#include "daemon/app.h"
#include "daemon/config.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"
#include "engine/image/stack.h"
#include "tests/testutil.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NX 8
#define NY 6

static char root[256];

/* A BITPIX 8 image of NX x NY zeros at root/name. */
static void put_image(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", root, name);
    const long long axes[2] = {NX, NY};
    tt_write_fits_image(path, 8, 2, axes, NULL, NX * NY);
}

/* Loads the configuration of one dataset "img" (img.fits under root), with `extra`
 * members (a leading comma) added. */
static void load_config(tess_config *cfg, const char *extra)
{
    char text[1024], err[512];
    snprintf(text, sizeof text, "{\"listen\": \"127.0.0.1:0\", \"threads\": 3, \"data_roots\": "
             "[\"%s\"], \"datasets\": [{\"name\": \"img\", \"path\": \"img.fits\"}]%s}", root,
             extra);
    ck_assert_int_eq(config_init(cfg), 0);
    ck_assert_msg(config_load_text(text, cfg, err, sizeof err) == 0, "%s", err);
}

static int read_img(const char *path)
{
    double px[NX * NY];
    char err[512];
    return frame_read_region(path, 0, 0, 0, 0, NX, NY, px, err, sizeof err);
}

/* A dataset path swapped for a symbolic link after the app is open is refused by the
 * readers: the composed app turns on canonical-only reading, for a worker as for a
 * server.  Before it, the process reads through links (the command line's default). */
START_TEST(test_app_refuses_swapped_link)
{
    tt_tmpdir_make(root, sizeof root, "app");
    put_image("img.fits");
    put_image("other.fits");
    char img[PATH_MAX], other[PATH_MAX];
    snprintf(img, sizeof img, "%s/img.fits", root);
    snprintf(other, sizeof other, "%s/other.fits", root);
    char link[PATH_MAX];
    snprintf(link, sizeof link, "%s/link.fits", root);
    ck_assert_int_eq(symlink(other, link), 0);
    ck_assert_int_eq(read_img(link), 0);

    tess_config cfg;
    load_config(&cfg, "");
    tess_app *app = NULL;
    char err[512];
    ck_assert_msg(tess_app_open(&cfg, &app, err, sizeof err) == 0, "%s", err);
    const dataset *d = catalog_find(app->cat, "img");
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(read_img(d->paths[0]), 0);
    ck_assert_int_eq(unlink(img), 0);
    ck_assert_int_eq(symlink(other, img), 0);
    ck_assert_int_eq(read_img(d->paths[0]), TESS_EIO);
    ck_assert_int_eq(read_img(link), TESS_EIO);
    tess_app_close(app);
    config_release(&cfg);
    static const char *const names[] = {"img.fits", "other.fits", "link.fits"};
    ck_assert_int_eq(tt_tmpdir_remove(root, names, 3), 0);
}
END_TEST

/* Everything a server or a worker runs with is built from the configuration: the
 * catalog, the caches, the pool of `threads` workers, the plane store and, with jobs.dir,
 * the job runner, whose counts the app's metrics give; drained, the pool is gone and the
 * catalog stays. */
START_TEST(test_app_composes_everything)
{
    tt_tmpdir_make(root, sizeof root, "app");
    put_image("img.fits");
    char jobs[PATH_MAX], extra[PATH_MAX + 64];
    snprintf(jobs, sizeof jobs, "%s/jobs", root);
    snprintf(extra, sizeof extra, ", \"jobs\": {\"dir\": \"%s\"}", jobs);
    tess_config cfg;
    load_config(&cfg, extra);
    tess_app *app = NULL;
    char err[512];
    ck_assert_msg(tess_app_open(&cfg, &app, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_eq(app->cfg, &cfg);
    ck_assert_int_eq(catalog_count(app->cat), 1);
    ck_assert_ptr_nonnull(app->cache);
    ck_assert_ptr_nonnull(app->planes);
    ck_assert_ptr_null(app->disk);
    ck_assert_ptr_nonnull(app->workers);
    ck_assert_int_eq(pool_threads(app->workers), 3);
    ck_assert_ptr_nonnull(app->jobs);
    ck_assert_int_eq(tess_app_jobs_reachable(app), 1);
    ck_assert_uint_eq(tess_app_queue_depth(app), 0);
    buf b;
    buf_init(&b, 1 << 20);
    tess_app_metrics(app, &b);
    ck_assert_msg(strstr(b.data, "tessera_jobs{state=\"queued\"} 0\n") &&
                  strstr(b.data, "tessera_pool_queue_depth 0\n") &&
                  strstr(b.data, "tessera_cache_bytes 0\n"), "%s", b.data);
    buf_release(&b);
    tess_app_drain(app);
    ck_assert_ptr_null(app->workers);
    ck_assert_ptr_null(app->jobs);
    ck_assert_uint_eq(tess_app_queue_depth(app), 0);
    ck_assert_int_eq(catalog_count(app->cat), 1);
    tess_app_drain(app);
    tess_app_close(app);
    config_release(&cfg);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A dataset that cannot be opened: the error names it and nothing is left open. */
START_TEST(test_app_open_fails_whole)
{
    tt_tmpdir_make(root, sizeof root, "app");
    tess_config cfg;
    load_config(&cfg, "");
    tess_app *app = (tess_app *)&cfg;
    char err[512] = "";
    ck_assert_int_ne(tess_app_open(&cfg, &app, err, sizeof err), 0);
    ck_assert_ptr_null(app);
    ck_assert_msg(strstr(err, "img") != NULL, "%s", err);
    config_release(&cfg);
    ck_assert_int_eq(tt_tmpdir_remove(root, NULL, 0), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("app");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_app_refuses_swapped_link);
    tcase_add_test(tc, test_app_composes_everything);
    tcase_add_test(tc, test_app_open_fails_whole);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
