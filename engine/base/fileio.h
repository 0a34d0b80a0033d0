/* File I/O: whole reads and writes retried on EINTR and short counts, opening regular files only, file identity. */
#ifndef TESSERA_ENGINE_BASE_FILEIO_H
#define TESSERA_ENGINE_BASE_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
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

/* ---- opening files named by users --------------------------------------------------

   A FIFO or a device named where a file is expected must never block the process (an
   open(2) of a FIFO waits for a writer; a read of /dev/zero never ends) or become its
   controlling terminal.  Every open of a path that a user, a configuration or a client
   named goes through tess_open_regular, and a library that opens files by name itself
   (cfitsio) is handed tess_fd_name of the descriptor it gave. */

/* What the node of mode `mode` (st_mode) is, for messages: "a regular file", "a
   directory", "a FIFO", "a socket", "a character device", "a block device", "a symbolic
   link".  Cannot fail. */
const char *tess_file_kind(mode_t mode);

/* Opens the regular file `path` read-only (O_RDONLY | O_CLOEXEC, plus `flags`, such as
 * O_NOFOLLOW) without blocking on anything else: the name is stat(2)ed first and what is
 * not a regular file is refused unopened; the open itself is O_NONBLOCK | O_NOCTTY, so
 * that a FIFO or a device put there meanwhile cannot block it, and fstat(2) of the
 * descriptor is the check that counts; O_NONBLOCK is then cleared.  *st (unless NULL)
 * receives that fstat.  Returns the descriptor (>= 0; the caller closes it), or TESS_EIO
 * with `err`: "cannot open PATH: <strerror>", or "cannot open PATH: it is a FIFO, not a
 * regular file" (a file that cannot be read, as a missing one is). */
int tess_open_regular(const char *path, int flags, struct stat *st, char *err, size_t errlen);

/* Reads the first `len` bytes of the regular file `path` into buf (opened as
 * tess_open_regular does, with pread: no stdio, for checks run at every opening of a
 * file, such as a format's signature).  Returns 1 when all `len` bytes were read, 0 when
 * the file cannot be opened or is shorter.  Sets no error text. */
int tess_read_prefix(const char *path, void *buf, size_t len);

/* A name by which a library that opens files itself reaches the file open as `fd`
 * (from tess_open_regular): "/proc/self/fd/FD", which opens that very file even when
 * `path` has been renamed over or replaced by a FIFO since, or `path` itself when /proc
 * is not mounted.  Written into buf (len bytes; 64 are enough for the /proc name) and
 * returned.  Open it while fd is still open.  Cannot fail. */
const char *tess_fd_name(int fd, const char *path, char *buf, size_t len);

/* ---- file identity ------------------------------------------------------------------ */

/* The identity of a file's contents as the system keeps it: the inode (device and
 * number: a file renamed over the name is another inode), the size, the modification
 * time and the status change time (ns since the epoch).  ctime is set by the kernel at
 * every write, truncation, rename and utimensat(2), and cannot be set back, so a file
 * rewritten in place with its old size and mtime restored still gets a new identity.
 * `head` is the FNV-1a 64 hash (engine/base/hash.h) of the file's first
 * TESS_FILE_ID_HEAD bytes (a FITS header block), or 0 when not read: it catches a
 * rewrite within one tick of the kernel's coarse ctime clock. */
#define TESS_FILE_ID_HEAD 2880
typedef struct tess_file_id {
    unsigned long long dev, ino;
    long long size;
    long long mtime_ns, ctime_ns;
    uint64_t head;
} tess_file_id;

/* The identity of `st` (head 0).  Cannot fail. */
void tess_file_id_from_stat(const struct stat *st, tess_file_id *id);

/* The identity of the file named `path`: stat(2) only (head 0) when with_head is 0, else
 * opened with tess_open_regular and its first block hashed.  Returns 0, or TESS_EIO
 * (stat(2) fails, or as tess_open_regular) with `err`; *id is zeroed on error. */
int tess_file_id_of(const char *path, int with_head, tess_file_id *id, char *err,
                    size_t errlen);

/* 1 when a and b are the same identity (every field equal, head included), else 0. */
int tess_file_id_same(const tess_file_id *a, const tess_file_id *b);

/* Folds the identity into the FNV-1a 64 hash state h (as tess_fnv1a64 continues one).
 * Cannot fail. */
uint64_t tess_file_id_hash(const tess_file_id *id, uint64_t h);

#endif
