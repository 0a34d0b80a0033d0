/* Whole reads and writes at a file offset: pread/pwrite retried on EINTR and short counts. */
#ifndef TESSERA_UTIL_FILEIO_H
#define TESSERA_UTIL_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all n bytes of buf at offset off of fd.  Returns 0, or -1 with errno set (EIO
 * when the system wrote nothing without saying why). */
int tess_pwrite_all(int fd, const void *buf, size_t n, off_t off);

/* Reads exactly n bytes at offset off of fd into buf.  Returns 0, or -1 with errno set
 * (EIO when the file ends first). */
int tess_pread_all(int fd, void *buf, size_t n, off_t off);

#endif
