/* Writing a region of a file through a shared mapping (wmap.h). */
#include "engine/base/wmap.h"

#include "engine/base/error.h"
#include "engine/base/mapguard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23   /* Linux 5.14, include/uapi/asm-generic/mman-common.h */
#endif

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

int tess_wmap_prepare(tess_wmap *m, size_t from, size_t n, char *err, size_t errlen)
{
    if (n == 0)
        return 0;
    size_t ps = page_size();
    size_t a = (size_t)((m->p - (unsigned char *)m->base) + from) / ps * ps;
    size_t b = (size_t)((m->p - (unsigned char *)m->base) + from + n);
    b = (b + ps - 1) / ps * ps;
    if (b > m->maplen)
        b = m->maplen;
    if (madvise((unsigned char *)m->base + a, b - a, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno == EINVAL)
        return 0;   /* a kernel without the advice: pages are made as they are written */
    int e = errno;
    tess_seterr(err, errlen, "cannot write %s at byte %lld: %s", m->path,
                (long long)(m->base_off + (off_t)a),
                e == EFAULT ? "no room for the data (the disk or a quota is full, or the "
                              "file was cut short)" : strerror(e));
    return TESS_EIO;
}

int tess_wmap_open(const char *path, off_t off, size_t len, int populate, tess_wmap *m,
                   char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->slot = -1;
    snprintf(m->path, sizeof m->path, "%s", path);
    if (off < 0 || len == 0) {
        tess_seterr(err, errlen, "cannot map %zu bytes at %lld of %s", len, (long long)off,
                    path);
        return TESS_EIO;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        tess_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TESS_EIO;
    }
    if (!S_ISREG(st.st_mode) || (unsigned long long)st.st_size < (unsigned long long)off + len) {
        tess_seterr(err, errlen, "cannot write bytes %lld to %lld of %s: it holds %lld",
                    (long long)off, (long long)off + (long long)len, path,
                    (long long)st.st_size);
        close(fd);
        return TESS_EIO;
    }
    size_t ps = page_size();
    m->base_off = off / (off_t)ps * (off_t)ps;
    m->maplen = (size_t)(off - m->base_off) + len;
    m->base = mmap(NULL, m->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, m->base_off);
    int e = errno;
    close(fd);
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        tess_seterr(err, errlen, "cannot map %s for writing: %s", path, strerror(e));
        return e == ENOMEM ? TESS_ENOMEM : TESS_EIO;
    }
    m->p = (unsigned char *)m->base + (off - m->base_off);
    m->len = len;

    m->slot = mapguard_add(m->base, m->maplen);
    if (populate) {
        int rc = tess_wmap_prepare(m, 0, len, err, errlen);
        if (rc) {
            char e2[8];
            tess_wmap_close(m, e2, sizeof e2);
            return rc;
        }
    }
    return 0;
}

int tess_wmap_check(const tess_wmap *m, char *err, size_t errlen)
{
    if (!m->base || !mapguard_faulted(m->slot))
        return 0;
    tess_seterr(err, errlen, "cannot write %s: a page could not be written (the disk is "
                "full, or the file was cut short while written)", m->path);
    return TESS_EIO;
}

int tess_wmap_close(tess_wmap *m, char *err, size_t errlen)
{
    if (!m->base)
        return 0;
    int rc = tess_wmap_check(m, err, errlen);
    mapguard_remove(m->slot);
    munmap(m->base, m->maplen);
    m->base = NULL;
    m->p = NULL;
    m->slot = -1;
    return rc;
}
