/* Unit tests of engine/base/fileio: regular files opened without blocking, file identity. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/wmap.h"
#include "tests/testutil.h"

static char dir[256];

static void setup(void)
{
    tt_tmpdir_make(dir, sizeof dir, "fileio");
}

static void teardown(void)
{
    static const char *const names[] = { "f", "fifo", "link", "new" };
    tt_tmpdir_remove(dir, names, 4);
}

/* dir/name written with n bytes of `c`. */
static void write_file(const char *name, int c, size_t n)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *b = malloc(n ? n : 1);
    memset(b, c, n);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
}

static const char *in_dir(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

START_TEST(test_open_regular_file)
{
    char p[PATH_MAX], err[256] = "";
    write_file("f", 'a', 100);
    struct stat st;
    int fd = tess_open_regular(in_dir("f", p, sizeof p), 0, &st, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_int_eq(st.st_size, 100);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);   /* cleared after the check */
    ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    char b[4];
    ck_assert_int_eq(tess_pread_all(fd, b, 4, 0), 0);
    ck_assert_int_eq(memcmp(b, "aaaa", 4), 0);
    close(fd);
}
END_TEST

/* A FIFO without a writer, a device, a directory: refused at once with what they are;
 * a missing file: the system's reason. */
START_TEST(test_open_refuses_other_nodes)
{
    char p[PATH_MAX], err[256];
    ck_assert_int_eq(mkfifo(in_dir("fifo", p, sizeof p), 0600), 0);
    double t0 = tt_now_s();
    ck_assert_int_eq(tess_open_regular(p, 0, NULL, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "is a FIFO, not a regular file") && strstr(err, p), "%s", err);
    ck_assert_int_eq(tess_open_regular("/dev/null", 0, NULL, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "a character device"), "%s", err);
    ck_assert_int_eq(tess_open_regular(dir, 0, NULL, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "a directory"), "%s", err);
    /* Through a symbolic link: what it leads to counts; with O_NOFOLLOW the link itself
     * is refused (ELOOP). */
    char l[PATH_MAX];
    ck_assert_int_eq(symlink(p, in_dir("link", l, sizeof l)), 0);
    ck_assert_int_eq(tess_open_regular(l, 0, NULL, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "FIFO"), "%s", err);
    ck_assert_int_eq(tess_open_regular(l, O_NOFOLLOW, NULL, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, strerror(ELOOP)), "%s", err);
    ck_assert_int_eq(tess_open_regular(in_dir("none", p, sizeof p), 0, NULL, err, sizeof err),
                     TESS_EIO);
    ck_assert_msg(strstr(err, strerror(ENOENT)) && strstr(err, "none"), "%s", err);
    ck_assert_msg(tt_now_s() - t0 < 2.0 * tt_time_scale(), "the refusals took %.2f s",
                  tt_now_s() - t0);
    ck_assert_str_eq(tess_file_kind(S_IFSOCK), "a socket");
    ck_assert_str_eq(tess_file_kind(S_IFBLK), "a block device");
}
END_TEST

/* The name of the descriptor reaches the file that was opened, even after the path was
 * renamed over or replaced by a FIFO. */
START_TEST(test_fd_name_follows_the_descriptor)
{
    char p[PATH_MAX], q[PATH_MAX], name[PATH_MAX], err[256];
    write_file("f", 'a', 10);
    int fd = tess_open_regular(in_dir("f", p, sizeof p), 0, NULL, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    write_file("new", 'b', 10);
    ck_assert_int_eq(rename(in_dir("new", q, sizeof q), p), 0);
    const char *n = tess_fd_name(fd, p, name, sizeof name);
    if (strcmp(n, p) == 0) {
        close(fd);
        return;   /* no /proc here: the path itself, as documented */
    }
    int fd2 = open(n, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd2, 0);
    char c = 0;
    ck_assert_int_eq(read(fd2, &c, 1), 1);
    ck_assert_int_eq(c, 'a');   /* the old file, not the one renamed over it */
    close(fd2);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    fd2 = open(n, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    ck_assert_int_ge(fd2, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd2, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    close(fd2);
    close(fd);
}
END_TEST

/* Sleeps past one tick of the kernel's coarse clock, which timestamps inodes. */
static void next_tick(void)
{
    struct timespec res;
    clock_getres(CLOCK_REALTIME_COARSE, &res);
    usleep((useconds_t)(res.tv_nsec / 1000) + 2000);
}

/* Writes the byte c at offset off of `path` in place, then sets atime and mtime back to
 * keep[0] and keep[1]. */
static void poke(const char *path, off_t off, char c, const struct timespec *keep)
{
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(tess_pwrite_all(fd, &c, 1, off), 0);
    close(fd);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, keep, 0), 0);
}

/* The old size and mtime set back after a change: the identity changes all the same. */
START_TEST(test_file_id_sees_replacements)
{
    char p[PATH_MAX], q[PATH_MAX], err[256];
    write_file("f", 'a', 5760);
    in_dir("f", p, sizeof p);
    tess_file_id a, b;
    ck_assert_int_eq(tess_file_id_of(p, 1, &a, err, sizeof err), 0);
    ck_assert_int_eq(tess_file_id_of(p, 1, &b, err, sizeof err), 0);
    ck_assert(tess_file_id_same(&a, &b));
    ck_assert_int_eq(a.size, 5760);
    ck_assert_uint_ne(a.head, 0);
    ck_assert_uint_eq(tess_file_id_hash(&a, 1), tess_file_id_hash(&b, 1));
    struct stat st0;
    ck_assert_int_eq(stat(p, &st0), 0);
    struct timespec keep[2] = { st0.st_atim, st0.st_mtim };

    /* In place, the same bytes count, mtime restored: ctime moved on. */
    next_tick();
    poke(p, 4000, 'z', keep);
    ck_assert_int_eq(tess_file_id_of(p, 0, &b, err, sizeof err), 0);
    ck_assert_int_eq(b.size, a.size);
    ck_assert_int_eq(b.mtime_ns, a.mtime_ns);
    ck_assert_int_ne(b.ctime_ns, a.ctime_ns);
    ck_assert(!tess_file_id_same(&a, &b));
    ck_assert_uint_ne(tess_file_id_hash(&a, 1), tess_file_id_hash(&b, 1));

    /* Renamed over with the same size and mtime: another inode. */
    ck_assert_int_eq(tess_file_id_of(p, 0, &a, err, sizeof err), 0);
    write_file("new", 'a', 5760);
    ck_assert_int_eq(utimensat(AT_FDCWD, in_dir("new", q, sizeof q), keep, 0), 0);
    ck_assert_int_eq(rename(q, p), 0);
    ck_assert_int_eq(tess_file_id_of(p, 0, &b, err, sizeof err), 0);
    ck_assert_int_eq(b.mtime_ns, a.mtime_ns);
    ck_assert_uint_ne(b.ino, a.ino);
    ck_assert(!tess_file_id_same(&a, &b));

    /* The header block: a change within it differs even without a tick in between. */
    ck_assert_int_eq(tess_file_id_of(p, 1, &a, err, sizeof err), 0);
    poke(p, 10, 'y', keep);
    ck_assert_int_eq(tess_file_id_of(p, 1, &b, err, sizeof err), 0);
    ck_assert_uint_ne(a.head, b.head);

    /* Errors: a missing file, a FIFO (with the header read: refused, not waited on). */
    ck_assert_int_eq(tess_file_id_of(in_dir("none", q, sizeof q), 0, &b, err, sizeof err),
                     TESS_EIO);
    ck_assert_int_eq(mkfifo(in_dir("fifo", q, sizeof q), 0600), 0);
    ck_assert_int_eq(tess_file_id_of(q, 1, &b, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "FIFO"), "%s", err);
    ck_assert_int_eq(b.ino, 0);
}
END_TEST

/* A window written through tess_wmap lands at its offset in the file, bytes outside it
 * untouched; a window past the end of the file is refused; a page made after the file was
 * cut short is an error naming the file, and a write that hits SIGBUS on a page cut off
 * after it was made makes tess_wmap_close fail (mapguard), the process going on. */
START_TEST(test_wmap_writes_in_place)
{
    char p[PATH_MAX], err[256] = "";
    long ps = sysconf(_SC_PAGESIZE);
    size_t n = (size_t)ps * 5;
    write_file("f", 'a', n);
    in_dir("f", p, sizeof p);
    tess_wmap m;
    /* bytes 100 .. 100 + 3 pages + 7: an unaligned start and end */
    size_t off = 100, len = (size_t)ps * 3 + 7;
    ck_assert_int_eq(tess_wmap_open(p, (off_t)off, len, 1, &m, err, sizeof err), 0);
    for (size_t i = 0; i < len; i++)
        m.p[i] = (unsigned char)('0' + i % 10);
    ck_assert_int_eq(tess_wmap_close(&m, err, sizeof err), 0);
    ck_assert_int_eq(tess_wmap_close(&m, err, sizeof err), 0);   /* closed: a no-op */
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *b = malloc(n);
    ck_assert_uint_eq(fread(b, 1, n, f), n);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        int want = i >= off && i < off + len ? '0' + (int)((i - off) % 10) : 'a';
        ck_assert_msg(b[i] == want, "byte %zu: %d, want %d", i, b[i], want);
    }
    free(b);

    ck_assert_int_eq(tess_wmap_open(p, (off_t)n - 10, 11, 1, &m, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "it holds") && strstr(err, p), "%s", err);
    ck_assert_ptr_null(m.base);
    ck_assert_int_eq(tess_wmap_open(in_dir("none", p, sizeof p), 0, 1, 1, &m, err, sizeof err),
                     TESS_EIO);

    /* made lazily, then the file is cut to one page: making the rest fails */
    in_dir("f", p, sizeof p);
    ck_assert_int_eq(tess_wmap_open(p, 0, n, 0, &m, err, sizeof err), 0);
    ck_assert_int_eq(tess_wmap_prepare(&m, 0, (size_t)ps, err, sizeof err), 0);
    ck_assert_int_eq(truncate(p, ps), 0);
    ck_assert_int_eq(tess_wmap_prepare(&m, (size_t)ps * 2, (size_t)ps, err, sizeof err),
                     TESS_EIO);
    ck_assert_msg(strstr(err, "cut short") && strstr(err, p), "%s", err);
    /* a write past the new end gets SIGBUS, absorbed: the close says the file lost it
     * (not under valgrind, which cannot follow a page replaced by the SIGBUS handler) */
    if (tt_under_valgrind()) {
        ck_assert_int_eq(tess_wmap_close(&m, err, sizeof err), 0);
        return;
    }
    ck_assert_int_eq(tess_wmap_check(&m, err, sizeof err), 0);
    m.p[(size_t)ps * 3] = 'x';
    m.p[0] = 'y';
    /* a writer sharing the window sees it before the close, naming the file */
    ck_assert_int_eq(tess_wmap_check(&m, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "could not be written") && strstr(err, p), "%s", err);
    ck_assert_int_eq(tess_wmap_close(&m, err, sizeof err), TESS_EIO);
    ck_assert_msg(strstr(err, "could not be written"), "%s", err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fileio");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_open_regular_file);
    tcase_add_test(tc, test_open_refuses_other_nodes);
    tcase_add_test(tc, test_fd_name_follows_the_descriptor);
    tcase_add_test(tc, test_file_id_sees_replacements);
    tcase_add_test(tc, test_wmap_writes_in_place);
    suite_add_tcase(s, tc);
    return tt_run_suite(s);
}
