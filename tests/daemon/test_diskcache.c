/* Unit tests of daemon/cache/diskcache: round trip, restart, byte budget, damaged files. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/cache/diskcache.h"
#include "tests/testutil.h"
#include "engine/base/error.h"

static char dir[128];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "dc");
}

static void teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static tile *make_tile(size_t n, unsigned char fill)
{
    unsigned char *p = malloc(n);
    memset(p, fill, n);
    return tile_new_take(p, n, "image/png");
}

/* Bytes of all files in the directory. */
static size_t dir_bytes(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "du -sb --apparent-size %s", dir);
    FILE *f = popen(cmd, "r");
    unsigned long long n = 0;
    ck_assert_int_eq(fscanf(f, "%llu", &n), 1);
    pclose(f);
    return (size_t)n;
}

START_TEST(test_roundtrip_and_restart)
{
    char err[256];
    /* A finished writer's process id, for the sweep below; forked before anything is
     * allocated, so the child (valgrind checks it at its exit too) holds nothing. */
    pid_t gone = fork();
    ck_assert_int_ge(gone, 0);
    if (gone == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(gone, NULL, 0), gone);
    diskcache *c = diskcache_open(dir, 1 << 20, err, sizeof(err));
    ck_assert_ptr_nonnull(c);
    tile *t = make_tile(1000, 7);
    ck_assert_int_eq(diskcache_put(c, "hips|horsehead|v1|5|123|png", t), 0);
    ck_assert_ptr_null(diskcache_get(c, "hips|horsehead|v1|5|124|png"));
    tile *g = diskcache_get(c, "hips|horsehead|v1|5|123|png");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->len, 1000);
    ck_assert_str_eq(g->content_type, "image/png");
    ck_assert_str_eq(g->etag, t->etag);
    ck_assert_int_eq(memcmp(g->data, t->data, 1000), 0);
    tile_release(g);
    diskcache_close(c);

    /* A temporary file of an interrupted write (its process gone) is swept at start-up;
     * one of a writer still running (another process sharing the directory) is kept. */
    pid_t alive = fork();
    ck_assert_int_ge(alive, 0);
    if (alive == 0) {
        pause();
        _exit(0);
    }
    char tmp[256], live[256];
    snprintf(tmp, sizeof(tmp), "%s/0123456789abcdef.%ld.1.tmp", dir, (long)gone);
    snprintf(live, sizeof(live), "%s/0123456789abcdef.%ld.1.tmp", dir, (long)alive);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i ? live : tmp, "w");
        ck_assert_ptr_nonnull(f);
        fputs("partial", f);
        fclose(f);
    }

    c = diskcache_open(dir, 1 << 20, err, sizeof(err));
    ck_assert_ptr_nonnull(c);
    ck_assert_int_ne(access(tmp, F_OK), 0);
    ck_assert_int_eq(access(live, F_OK), 0);
    kill(alive, SIGKILL);
    ck_assert_int_eq(waitpid(alive, NULL, 0), alive);
    unlink(live);
    g = diskcache_get(c, "hips|horsehead|v1|5|123|png");
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(memcmp(g->data, t->data, 1000), 0);
    tile_release(g);
    diskcache_stats s;
    diskcache_get_stats(c, &s);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.hits, 1);
    diskcache_close(c);
    tile_release(t);
}
END_TEST

START_TEST(test_budget_holds_and_lru)
{
    char err[256];
    size_t budget = 50 * 1024;
    diskcache *c = diskcache_open(dir, budget, err, sizeof(err));
    ck_assert_ptr_nonnull(c);
    char key[64];
    for (int i = 0; i < 200; i++) {
        tile *t = make_tile(1000 + (size_t)(i % 7) * 300, (unsigned char)i);
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(diskcache_put(c, key, t), 0);
        tile_release(t);
        diskcache_stats s;
        diskcache_get_stats(c, &s);
        ck_assert_uint_le(s.bytes, budget);
        ck_assert_uint_le(dir_bytes(), budget + 4096 * 2);   /* du counts the directory too */
    }
    tile *g = diskcache_get(c, "k0");
    ck_assert_ptr_null(g);
    g = diskcache_get(c, "k199");
    ck_assert_ptr_nonnull(g);
    tile_release(g);
    tile *huge = make_tile(budget + 1, 1);
    ck_assert_int_eq(diskcache_put(c, "huge", huge), TESS_ERANGE);
    tile_release(huge);
    diskcache_close(c);

    /* A smaller budget at restart trims the directory. */
    c = diskcache_open(dir, 10 * 1024, err, sizeof(err));
    diskcache_stats s;
    diskcache_get_stats(c, &s);
    ck_assert_uint_le(s.bytes, 10 * 1024);
    ck_assert_uint_le(dir_bytes(), 10 * 1024 + 4096 * 2);
    diskcache_close(c);
}
END_TEST

START_TEST(test_lru_order)
{
    /* Room for exactly ten entries of one size: touching k0 saves it, k1 goes. */
    char err[256], key[16];
    tile *t = make_tile(1000, 9);
    size_t one = 72 + 2 + strlen("image/png") + 1000;   /* header + key + type + body */
    diskcache *c = diskcache_open(dir, 10 * one, err, sizeof(err));
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(diskcache_put(c, key, t), 0);
    }
    tile *g = diskcache_get(c, "k0");
    ck_assert_ptr_nonnull(g);
    tile_release(g);
    ck_assert_int_eq(diskcache_put(c, "kA", t), 0);
    g = diskcache_get(c, "k0");
    ck_assert_ptr_nonnull(g);
    tile_release(g);
    ck_assert_ptr_null(diskcache_get(c, "k1"));
    g = diskcache_get(c, "k2");
    ck_assert_ptr_nonnull(g);
    tile_release(g);
    diskcache_stats s;
    diskcache_get_stats(c, &s);
    ck_assert_uint_eq(s.entries, 10);
    ck_assert_uint_eq(s.evictions, 1);
    diskcache_close(c);
    tile_release(t);
}
END_TEST

START_TEST(test_damaged_file_is_a_miss)
{
    char err[256];
    diskcache *c = diskcache_open(dir, 1 << 20, err, sizeof(err));
    tile *t = make_tile(500, 3);
    ck_assert_int_eq(diskcache_put(c, "key", t), 0);
    tile_release(t);
    /* Truncate the only file. */
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "for f in %s/*.tile; do truncate -s 100 \"$f\"; done", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_ptr_null(diskcache_get(c, "key"));
    diskcache_close(c);
    ck_assert_ptr_null(diskcache_open("/proc/no/such/dir", 1000, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "/proc/no/such/dir"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("diskcache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60); /* hundreds of file renames: slow on a busy disk */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_and_restart);
    tcase_add_test(tc, test_budget_holds_and_lru);
    tcase_add_test(tc, test_lru_order);
    tcase_add_test(tc, test_damaged_file_is_a_miss);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
