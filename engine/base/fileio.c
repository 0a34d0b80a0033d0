/* File I/O: whole reads and writes, regular files opened without blocking, file identity. */
#include "engine/base/fileio.h"
#include "engine/base/error.h"
#include "engine/base/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Writes (put != 0) or reads all n bytes: with pwrite/pread at offset off, or with
 * write/read at the file position when off is -1; retried on EINTR and short counts. */
static int all_at(int fd, char *p, size_t n, off_t off, int put)
{
    while (n > 0) {
        ssize_t k;
        if (off < 0)
            k = put ? write(fd, p, n) : read(fd, p, n);
        else
            k = put ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        if (off >= 0)
            off += (off_t)k;
    }
    return 0;
}

int tess_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    if (off < 0) {   /* as pwrite(2) answers; -1 means the file position to all_at */
        errno = EINVAL;
        return -1;
    }
    /* all_at only reads through p when writing. */
    return all_at(fd, (char *)(uintptr_t)buf, n, off, 1);
}

int tess_pread_all(int fd, void *buf, size_t n, off_t off)
{
    if (off < 0) {
        errno = EINVAL;
        return -1;
    }
    return all_at(fd, buf, n, off, 0);
}

int tess_write_all(int fd, const void *buf, size_t n)
{
    return all_at(fd, (char *)(uintptr_t)buf, n, -1, 1);
}

int tess_read_all(int fd, void *buf, size_t n)
{
    return all_at(fd, buf, n, -1, 0);
}

int tess_pwrite_file(const char *path, const void *buf, size_t n, off_t off)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (tess_pwrite_all(fd, buf, n, off) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return close(fd);
}

/* ---- opening files named by users ---------------------------------------------------- */

const char *tess_file_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISLNK(mode)  ? "a symbolic link"
                            : "not a regular file";
}

/* The refusal of a node that is not a regular file. */
static int not_regular(const char *path, mode_t mode, char *err, size_t errlen)
{
    tess_seterr(err, errlen, "cannot open %s: it is %s, not a regular file", path,
                tess_file_kind(mode));
    return TESS_EIO;
}

int tess_open_regular(const char *path, int flags, struct stat *st, char *err, size_t errlen)
{
    struct stat sb;
    /* The name first: a FIFO or a device there is never opened at all (opening some
     * devices has effects of its own).  O_NOFOLLOW asks about the name itself. */
    int named = (flags & O_NOFOLLOW) ? lstat(path, &sb) : stat(path, &sb);
    if (named == 0 && !S_ISREG(sb.st_mode) && !((flags & O_NOFOLLOW) && S_ISLNK(sb.st_mode)))
        return not_regular(path, sb.st_mode, err, errlen);
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | flags);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TESS_EIO;
    }
    /* What was opened is what counts: the name may have changed since the stat. */
    if (fstat(fd, &sb) != 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return not_regular(path, sb.st_mode, err, errlen);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        tess_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return TESS_EIO;
    }
    if (st)
        *st = sb;
    return fd;
}

int tess_read_prefix(const char *path, void *buf, size_t len)
{
    int fd = tess_open_regular(path, 0, NULL, NULL, 0);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, buf, len, 0);
    close(fd);
    return n >= 0 && (size_t)n == len;
}

const char *tess_fd_name(int fd, const char *path, char *buf, size_t len)
{
    struct stat a, b;
    int n = snprintf(buf, len, "/proc/self/fd/%d", fd);
    /* The /proc name is used only when it leads to the very file of fd. */
    if (n > 0 && (size_t)n < len && fstat(fd, &a) == 0 && stat(buf, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return buf;
    snprintf(buf, len, "%s", path);
    return buf;
}

/* ---- file identity ----------------------------------------------------------------- */

void tess_file_id_from_stat(const struct stat *st, tess_file_id *id)
{
    memset(id, 0, sizeof(*id));
    id->dev = (unsigned long long)st->st_dev;
    id->ino = (unsigned long long)st->st_ino;
    id->size = (long long)st->st_size;
    id->mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    id->ctime_ns = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
}

int tess_file_id_of(const char *path, int with_head, tess_file_id *id, char *err,
                    size_t errlen)
{
    struct stat st;
    memset(id, 0, sizeof(*id));
    if (!with_head) {
        if (stat(path, &st) != 0) {
            tess_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
            return TESS_EIO;
        }
        tess_file_id_from_stat(&st, id);
        return 0;
    }
    int fd = tess_open_regular(path, 0, &st, err, errlen);
    if (fd < 0)
        return fd;
    unsigned char blk[TESS_FILE_ID_HEAD];
    size_t want = (unsigned long long)st.st_size < sizeof(blk) ? (size_t)st.st_size : sizeof(blk);
    int rc = tess_pread_all(fd, blk, want, 0);
    int e = errno;
    close(fd);
    if (rc != 0) {
        tess_seterr(err, errlen, "cannot read %s: %s", path, strerror(e));
        return TESS_EIO;
    }
    tess_file_id_from_stat(&st, id);
    id->head = tess_fnv1a64(blk, want, TESS_FNV64_OFFSET);
    return 0;
}

int tess_file_id_same(const tess_file_id *a, const tess_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->head == b->head;
}

uint64_t tess_file_id_hash(const tess_file_id *id, uint64_t h)
{
    unsigned long long v[6] = { id->dev, id->ino, (unsigned long long)id->size,
                                (unsigned long long)id->mtime_ns,
                                (unsigned long long)id->ctime_ns, (unsigned long long)id->head };
    return tess_fnv1a64(v, sizeof(v), h);
}
