/* Whole reads and writes at an offset or the file position, retried on EINTR and short counts. */
#ifndef TESSERA_UTIL_FILEIO_H
#define TESSERA_UTIL_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all n bytes of buf at offset off of fd.  Returns 0, or -1 with errno set (EIO
 * when the system wrote nothing without saying why). */
int tess_pwrite_all(int fd, const void *buf, size_t n, off_t off);

/* Writes all n bytes of buf at offset off of the existing file `path`, opened and closed
 * here (a close that fails counts as a failed write).  Returns 0, or -1 with errno set
 * (that of the first failure). */
int tess_pwrite_file(const char *path, const void *buf, size_t n, off_t off);

/* Reads exactly n bytes at offset off of fd into buf.  Returns 0, or -1 with errno set
 * (EIO when the file ends first). */
int tess_pread_all(int fd, void *buf, size_t n, off_t off);

/* Writes all n bytes of buf at the file position of fd (a pipe, a terminal, a file
 * opened with O_APPEND, or one written in order), which moves past them.  Returns 0, or
 * -1 with errno set (EIO when the system wrote nothing without saying why). */
int tess_write_all(int fd, const void *buf, size_t n);

/* Reads exactly n bytes from the file position of fd into buf.  Returns 0, or -1 with
 * errno set (EIO when the file ends first). */
int tess_read_all(int fd, void *buf, size_t n);

#endif
