/* Unit tests of engine/base: buf (growth, the hard cap, detach), fileio and lru. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "engine/base/buf.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/lru.h"

START_TEST(test_add_and_printf)
{
    buf b;
    buf_init(&b, 1024);
    ck_assert_int_eq(buf_adds(&b, "NAXIS1  = "), 0);
    ck_assert_int_eq(buf_printf(&b, "%20d", 891), 0);
    ck_assert_uint_eq(b.len, 30);
    ck_assert_str_eq(b.data, "NAXIS1  =                  891");
    buf_release(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(test_cap_refuses_and_keeps_contents)
{
    buf b;
    buf_init(&b, 8);
    ck_assert_int_eq(buf_adds(&b, "12345678"), 0);
    ck_assert_int_eq(buf_adds(&b, "9"), TESS_ERANGE);
    ck_assert_int_eq(buf_printf(&b, "%d", 1), TESS_ERANGE);
    ck_assert_uint_eq(b.len, 8);
    ck_assert_str_eq(b.data, "12345678");
    buf_release(&b);
}
END_TEST

START_TEST(test_growth_many_appends)
{
    buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 10000; i++)
        ck_assert_int_eq(buf_add(&b, "abcdefgh", 8), 0);
    ck_assert_uint_eq(b.len, 80000);
    ck_assert_int_eq(memcmp(b.data + 79992, "abcdefgh", 8), 0);
    size_t len = 0;
    char *p = buf_detach(&b, &len);
    ck_assert_uint_eq(len, 80000);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    free(p);
}
END_TEST

START_TEST(test_reset_keeps_allocation)
{
    buf b;
    buf_init(&b, 100);
    buf_adds(&b, "hello");
    buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    ck_assert_int_eq(buf_adds(&b, "x"), 0);
    ck_assert_str_eq(b.data, "x");
    buf_release(&b);
}
END_TEST

/* ---- fileio ---- */

#define PIPE_BYTES ((size_t)300 * 1024)   /* several pipe buffers: reads come back short */

static unsigned char *pattern(void)
{
    unsigned char *b = malloc(PIPE_BYTES);
    for (size_t i = 0; b && i < PIPE_BYTES; i++)
        b[i] = (unsigned char)(i * 7 + 3);
    return b;
}

static void *pipe_writer(void *arg)
{
    int *fds = arg;
    unsigned char *b = pattern();
    long rc = b ? tess_write_all(fds[1], b, PIPE_BYTES) : -2;
    close(fds[1]);
    free(b);
    return (void *)rc;
}

START_TEST(test_fileio_read_write_all_pipe)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, pipe_writer, fds), 0);
    unsigned char *b = malloc(PIPE_BYTES);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tess_read_all(fds[0], b, PIPE_BYTES), 0);
    void *wrc;
    pthread_join(th, &wrc);
    ck_assert_ptr_null(wrc);
    unsigned char *want = pattern();
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(memcmp(b, want, PIPE_BYTES), 0);
    free(want);
    /* The writer closed its end: the pipe ends before one more byte. */
    errno = 0;
    ck_assert_int_eq(tess_read_all(fds[0], b, 1), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_int_eq(tess_read_all(fds[0], b, 0), 0);
    close(fds[0]);
    free(b);
}
END_TEST

START_TEST(test_fileio_at_offset_and_position)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    int fd = fileno(f);
    ck_assert_int_eq(tess_write_all(fd, "abcdef", 6), 0);
    ck_assert_int_eq(tess_pwrite_all(fd, "XY", 2, 2), 0);    /* the position stays at 6 */
    ck_assert_int_eq(tess_write_all(fd, "gh", 2), 0);
    char got[9] = "";
    ck_assert_int_eq(tess_pread_all(fd, got, 8, 0), 0);
    ck_assert_int_eq(memcmp(got, "abXYefgh", 8), 0);
    ck_assert_int_eq(lseek(fd, 1, SEEK_SET), 1);
    ck_assert_int_eq(tess_read_all(fd, got, 3), 0);
    ck_assert_int_eq(memcmp(got, "bXY", 3), 0);
    errno = 0;
    ck_assert_int_eq(tess_pread_all(fd, got, 4, 6), -1);     /* 2 bytes left there */
    ck_assert_int_eq(errno, EIO);
    errno = 0;
    ck_assert_int_eq(tess_pwrite_all(fd, "z", 1, -1), -1);   /* as pwrite(2): no offset -1 */
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(tess_pread_all(fd, got, 1, -1), -1);
    ck_assert_int_eq(errno, EINVAL);
    fclose(f);
}
END_TEST

/* ---- lru ---- */

typedef struct item {
    int id;
    lru_node node;
} item;

/* The ids from the front to the back, written as digits into out; also checks that
 * walking back from the back gives the same list reversed. */
static void lru_order(lru_list *l, char *out)
{
    size_t k = 0;
    for (lru_node *n = l->front; n; n = n->next)
        out[k++] = (char)('0' + LRU_ENTRY(n, item, node)->id);
    out[k] = '\0';
    for (lru_node *n = l->back; n; n = n->prev)
        ck_assert_int_eq(out[--k], '0' + LRU_ENTRY(n, item, node)->id);
    ck_assert_uint_eq(k, 0);
}

START_TEST(test_lru_order)
{
    item it[5];
    lru_list l;
    lru_init(&l);
    char got[8];
    ck_assert_int_eq(lru_empty(&l), 1);
    ck_assert_ptr_null(lru_pop_back(&l));
    ck_assert_ptr_null(LRU_ENTRY(l.back, item, node));
    for (int i = 0; i < 5; i++) {
        it[i].id = i;
        lru_push_front(&l, &it[i].node);
    }
    lru_order(&l, got);
    ck_assert_str_eq(got, "43210");
    lru_move_front(&l, &it[1].node);       /* a use: 1 becomes the most recent */
    lru_move_front(&l, &it[1].node);       /* already first: no change */
    lru_order(&l, got);
    ck_assert_str_eq(got, "14320");
    lru_remove(&l, &it[3].node);
    ck_assert_ptr_null(it[3].node.prev);
    ck_assert_ptr_null(it[3].node.next);
    lru_push_back(&l, &it[3].node);
    lru_order(&l, got);
    ck_assert_str_eq(got, "14203");
    ck_assert_int_eq(LRU_ENTRY(lru_pop_back(&l), item, node)->id, 3);
    ck_assert_int_eq(LRU_ENTRY(lru_pop_back(&l), item, node)->id, 0);
    lru_order(&l, got);
    ck_assert_str_eq(got, "142");
    lru_remove(&l, &it[1].node);
    lru_remove(&l, &it[2].node);
    lru_remove(&l, &it[4].node);
    ck_assert_int_eq(lru_empty(&l), 1);
    ck_assert_ptr_null(l.back);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_add_and_printf);
    tcase_add_test(tc, test_cap_refuses_and_keeps_contents);
    tcase_add_test(tc, test_growth_many_appends);
    tcase_add_test(tc, test_reset_keeps_allocation);
    suite_add_tcase(s, tc);
    TCase *fio = tcase_create("fileio");
    tcase_add_test(fio, test_fileio_read_write_all_pipe);
    tcase_add_test(fio, test_fileio_at_offset_and_position);
    suite_add_tcase(s, fio);
    TCase *lru = tcase_create("lru");
    tcase_add_test(lru, test_lru_order);
    suite_add_tcase(s, lru);
    return tt_run_suite(s);
}
