/* Whole reads and writes, at a file offset or at the file position. */
#include "engine/base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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
