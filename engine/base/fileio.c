/* Whole reads and writes at a file offset. */
#include "engine/base/fileio.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* pwrite (write != 0) or pread of all n bytes, retried on EINTR and short counts. */
static int all_at(int fd, char *p, size_t n, off_t off, int write)
{
    while (n > 0) {
        ssize_t k = write ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += (off_t)k;
    }
    return 0;
}

int tess_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    /* all_at only reads through p when writing. */
    return all_at(fd, (char *)(uintptr_t)buf, n, off, 1);
}

int tess_pread_all(int fd, void *buf, size_t n, off_t off)
{
    return all_at(fd, buf, n, off, 0);
}
