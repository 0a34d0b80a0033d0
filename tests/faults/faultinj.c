/* Fault injection: the process's allocation and file I/O functions, counted and failed on
 * demand, and the record of synced files for a simulated power loss (faultinj.h). */
#undef _FORTIFY_SOURCE
#include "tests/faults/faultinj.h"

#include <dirent.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the counter ------------------------------------------------------------------- */

static atomic_int g_classes;          /* armed classes; 0 = not counting */
static atomic_long g_calls, g_faults;
static long g_n;                      /* the call that fails first (0: none) */
static int g_persistent;
static _Atomic(const char *) g_first;
static __thread int t_quiet;          /* this thread's calls are the recorder's own */
static __thread int t_counted;        /* this thread runs the program's code (below) */
static int g_trace;                   /* TESSERA_FAULT_TRACE: print where the first fails */
extern void __sanitizer_print_stack_trace(void) __attribute__((weak));

void fi_arm(int classes, fi_mode mode, long n)
{
    atomic_store(&g_classes, 0);
    g_n = n;
    g_persistent = mode == FI_PERSISTENT;
    atomic_store(&g_calls, 0);
    atomic_store(&g_faults, 0);
    atomic_store(&g_first, "");
    atomic_store_explicit(&g_classes, classes, memory_order_release);
}

long fi_disarm(void)
{
    atomic_store(&g_classes, 0);
    return atomic_load(&g_faults);
}

long fi_calls(void)
{
    return atomic_load(&g_calls);
}

long fi_faults(void)
{
    return atomic_load(&g_faults);
}

const char *fi_first_fault(void)
{
    const char *s = atomic_load(&g_first);
    return s ? s : "";
}

void fi_hold(int on)
{
    t_quiet += on ? 1 : -1;
}

/* Code whose calls are not fault points (faultinj.h, TESSERA_FAULT_SKIP): the address
 * ranges of the loaded segments of those libraries, found before main. */
#define MAX_SKIP 16
static struct { uintptr_t lo, hi; } g_skip[MAX_SKIP];
static int g_nskip;

static int skip_phdr(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const char *list = arg, *name = strrchr(info->dlpi_name, '/');
    name = name ? name + 1 : info->dlpi_name;
    int hit = 0;
    for (const char *p = list; *p && !hit;) {
        size_t n = strcspn(p, ",");
        hit = n > 0 && strncmp(name, p, n) == 0;
        p += n + (p[n] == ',');
    }
    for (int i = 0; hit && i < info->dlpi_phnum && g_nskip < MAX_SKIP; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD) {
            g_skip[g_nskip].lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            g_skip[g_nskip].hi = g_skip[g_nskip].lo + info->dlpi_phdr[i].p_memsz;
            g_nskip++;
        }
    return 0;
}

static int skipped(const void *caller)
{
    uintptr_t a = (uintptr_t)caller;
    for (int i = 0; i < g_nskip; i++)
        if (a >= g_skip[i].lo && a < g_skip[i].hi)
            return 1;
    return 0;
}

/* Counts a call of class `cls` to `fn` made from `caller`; 1 when it is to fail. */
#define fail_now(cls, fn) fail_from(cls, fn, __builtin_return_address(0))
static int fail_from(int cls, const char *fn, const void *caller)
{
    if (t_quiet || !t_counted || !(atomic_load_explicit(&g_classes, memory_order_acquire) & cls) ||
        skipped(caller))
        return 0;
    long i = atomic_fetch_add(&g_calls, 1) + 1;
    if (g_n <= 0 || i < g_n || (i > g_n && !g_persistent))
        return 0;
    if (atomic_fetch_add(&g_faults, 1) == 0) {
        atomic_store(&g_first, fn);
        if (g_trace && __sanitizer_print_stack_trace) {
            t_quiet++;
            fprintf(stderr, "faultinj: call %ld (%s) fails, from:\n", i, fn);
            __sanitizer_print_stack_trace();
            t_quiet--;
        }
    }
    return 1;
}

/* ---- the next definitions ------------------------------------------------------------ */

static __thread int t_resolving;

/* The definition after this program's: the sanitizer's interceptor or the C library's. */
static void *next_fn(const char *name)
{
    if (t_resolving) {
        /* dlsym asked for memory while looking a function up: nothing to give it. */
        static const char msg[] = "faultinj: allocation inside dlsym\n";
        syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
    t_resolving = 1;
    void *p = dlsym(RTLD_NEXT, name);
    t_resolving = 0;
    if (!p) {
        static const char msg[] = "faultinj: a function has no next definition\n";
        syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

#define NEXT(name)                                                          \
    (__extension__({                                                        \
        if (!real_##name)                                                   \
            real_##name = (__typeof__(real_##name))next_fn(#name);          \
        real_##name;                                                        \
    }))

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_reallocarray)(void *, size_t, size_t);
static char *(*real_strdup)(const char *);
static char *(*real_strndup)(const char *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fopen64)(const char *, const char *);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off64_t);
static size_t (*real_fread)(void *, size_t, size_t, FILE *);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static size_t (*real_fwrite)(const void *, size_t, size_t, FILE *);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off64_t);
static int (*real_glob)(const char *, int, int (*)(const char *, int), glob_t *);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                                  void *);
typedef struct json_t json_t;
typedef struct json_error_t json_error_t;
char *json_dumps(const json_t *json, size_t flags);
json_t *json_loads(const char *input, size_t flags, json_error_t *error);
json_t *json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);
json_t *json_loadfd(int input, size_t flags, json_error_t *error);
static char *(*real_json_dumps)(const json_t *, size_t);
static json_t *(*real_json_loads)(const char *, size_t, json_error_t *);
static json_t *(*real_json_loadb)(const char *, size_t, size_t, json_error_t *);
static json_t *(*real_json_loadfd)(int, size_t, json_error_t *);

/* Resolved before main, while the process has one thread. */
__attribute__((constructor)) static void fi_resolve(void)
{
    NEXT(malloc); NEXT(calloc); NEXT(realloc); NEXT(reallocarray); NEXT(strdup);
    NEXT(strndup); NEXT(posix_memalign); NEXT(aligned_alloc);
    NEXT(open); NEXT(open64); NEXT(openat); NEXT(openat64); NEXT(fopen); NEXT(fopen64);
    NEXT(read); NEXT(pread); NEXT(pread64); NEXT(fread); NEXT(write); NEXT(pwrite);
    NEXT(pwrite64); NEXT(fwrite); NEXT(ftruncate); NEXT(ftruncate64); NEXT(fsync);
    NEXT(fdatasync); NEXT(syncfs); NEXT(sync); NEXT(mmap); NEXT(mmap64);
    NEXT(glob); NEXT(pthread_create); NEXT(json_dumps); NEXT(json_loads); NEXT(json_loadb);
    NEXT(json_loadfd);
    g_trace = getenv("TESSERA_FAULT_TRACE") != NULL;
    const char *skip = getenv("TESSERA_FAULT_SKIP");
    dl_iterate_phdr(skip_phdr, (void *)(skip ? skip : FI_SKIP_DEFAULT));
    t_counted = 1;   /* the main thread */
}

/* ---- the allocation class ---------------------------------------------------------- */

void *malloc(size_t n)
{
    if (fail_now(FI_ALLOC, "malloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(malloc)(n);
}

void *calloc(size_t a, size_t b)
{
    if (fail_now(FI_ALLOC, "calloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(calloc)(a, b);
}

/* A realloc that does not grow the block is not a fault point: allocators do it in place
 * (and realloc(p, 0) frees p, where a failure would leave the caller unable to tell a
 * freed block from a kept one). */
void *realloc(void *p, size_t n)
{
    if (n && (!p || n > malloc_usable_size(p)) && fail_now(FI_ALLOC, "realloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(realloc)(p, n);
}

void *reallocarray(void *p, size_t a, size_t b)
{
    size_t n;
    if (!__builtin_mul_overflow(a, b, &n) && n && (!p || n > malloc_usable_size(p)) &&
        fail_now(FI_ALLOC, "reallocarray")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(reallocarray)(p, a, b);
}

char *strdup(const char *s)
{
    if (fail_now(FI_ALLOC, "strdup")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(strdup)(s);
}

char *strndup(const char *s, size_t n)
{
    if (fail_now(FI_ALLOC, "strndup")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(strndup)(s, n);
}

int posix_memalign(void **p, size_t align, size_t n)
{
    if (fail_now(FI_ALLOC, "posix_memalign"))
        return ENOMEM;
    return NEXT(posix_memalign)(p, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    if (fail_now(FI_ALLOC, "aligned_alloc")) {
        errno = ENOMEM;
        return NULL;
    }
    return NEXT(aligned_alloc)(align, n);
}

/* glibc 2.36's glob frees the same block twice when an allocation fails inside it
 * (prefix_array, then globfree): its calls are not fault points. */
int glob(const char *pattern, int flags, int (*errfn)(const char *, int), glob_t *g)
{
    t_quiet++;
    int rc = NEXT(glob)(pattern, flags, errfn, g);
    t_quiet--;
    return rc;
}

/* jansson 2.14's json_dumps ignores a failure to write an object's key (do_dump does not
 * check dump_string's result for keys): when the output buffer cannot grow there, it
 * returns a document with that key missing as if all went well.  Its calls are not fault
 * points. */
char *json_dumps(const json_t *json, size_t flags)
{
    t_quiet++;
    char *s = NEXT(json_dumps)(json, flags);
    t_quiet--;
    return s;
}

/* jansson 2.14's lexer drops a character when growing its string buffer fails (lex_save
 * ignores the failure) and then aborts on the escape it no longer finds (load.c:442,
 * lex_scan_string: assert(0)): its loaders are not fault points (faultinj.h). */
json_t *json_loads(const char *input, size_t flags, json_error_t *error)
{
    t_quiet++;
    json_t *j = NEXT(json_loads)(input, flags, error);
    t_quiet--;
    return j;
}

json_t *json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error)
{
    t_quiet++;
    json_t *j = NEXT(json_loadb)(buffer, buflen, flags, error);
    t_quiet--;
    return j;
}

json_t *json_loadfd(int input, size_t flags, json_error_t *error)
{
    t_quiet++;
    json_t *j = NEXT(json_loadfd)(input, flags, error);
    t_quiet--;
    return j;
}

/* A new thread's calls count from its start routine on: what runs before it (the
 * sanitizer's set-up of the thread, which aborts when pthread_getattr_np cannot allocate)
 * is not the program's.  pthread_create itself is: it fails with EAGAIN when an
 * allocation inside it does. */
typedef struct thread_start {
    void *(*fn)(void *);
    void *arg;
} thread_start;

static void *thread_trampoline(void *p)
{
    thread_start ts = *(thread_start *)p;
    free(p);
    t_counted = 1;
    return ts.fn(ts.arg);
}

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    t_quiet++;
    thread_start *ts = NEXT(malloc)(sizeof *ts);
    t_quiet--;
    if (!ts)
        return EAGAIN;
    ts->fn = fn;
    ts->arg = arg;
    int rc = NEXT(pthread_create)(t, attr, thread_trampoline, ts);
    if (rc)
        free(ts);
    return rc;
}

/* ---- the I/O class ----------------------------------------------------------------- */

/* The mode argument of open when the flags call for one. */
#define OPEN_MODE(flags, last, mode)                                 \
    do {                                                             \
        if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) { \
            va_list ap;                                              \
            va_start(ap, last);                                      \
            mode = va_arg(ap, mode_t);                               \
            va_end(ap);                                              \
        }                                                            \
    } while (0)

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, flags, mode);
    if (fail_now(FI_IO, "open")) {
        errno = EMFILE;
        return -1;
    }
    return NEXT(open)(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, flags, mode);
    if (fail_now(FI_IO, "open64")) {
        errno = EMFILE;
        return -1;
    }
    return NEXT(open64)(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, flags, mode);
    if (fail_now(FI_IO, "openat")) {
        errno = EMFILE;
        return -1;
    }
    return NEXT(openat)(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, flags, mode);
    if (fail_now(FI_IO, "openat64")) {
        errno = EMFILE;
        return -1;
    }
    return NEXT(openat64)(dirfd, path, flags, mode);
}

FILE *fopen(const char *path, const char *how)
{
    if (fail_now(FI_IO, "fopen")) {
        errno = EMFILE;
        return NULL;
    }
    return NEXT(fopen)(path, how);
}

FILE *fopen64(const char *path, const char *how)
{
    if (fail_now(FI_IO, "fopen64")) {
        errno = EMFILE;
        return NULL;
    }
    return NEXT(fopen64)(path, how);
}

ssize_t read(int fd, void *buf, size_t n)
{
    if (fail_now(FI_IO, "read")) {
        errno = EIO;
        return -1;
    }
    return NEXT(read)(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    if (fail_now(FI_IO, "pread")) {
        errno = EIO;
        return -1;
    }
    return NEXT(pread)(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    if (fail_now(FI_IO, "pread64")) {
        errno = EIO;
        return -1;
    }
    return NEXT(pread64)(fd, buf, n, off);
}

size_t fread(void *buf, size_t size, size_t n, FILE *f)
{
    if (size && n && fail_now(FI_IO, "fread")) {
        f->_flags |= _IO_ERR_SEEN;
        errno = EIO;
        return 0;
    }
    return NEXT(fread)(buf, size, n, f);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    if (fail_now(FI_IO, "write")) {
        errno = ENOSPC;
        return -1;
    }
    return NEXT(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (fail_now(FI_IO, "pwrite")) {
        errno = ENOSPC;
        return -1;
    }
    return NEXT(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    if (fail_now(FI_IO, "pwrite64")) {
        errno = ENOSPC;
        return -1;
    }
    return NEXT(pwrite64)(fd, buf, n, off);
}

size_t fwrite(const void *buf, size_t size, size_t n, FILE *f)
{
    if (size && n && fail_now(FI_IO, "fwrite")) {
        f->_flags |= _IO_ERR_SEEN;
        errno = ENOSPC;
        return 0;
    }
    return NEXT(fwrite)(buf, size, n, f);
}

int ftruncate(int fd, off_t len)
{
    if (fail_now(FI_IO, "ftruncate")) {
        errno = ENOSPC;
        return -1;
    }
    return NEXT(ftruncate)(fd, len);
}

int ftruncate64(int fd, off64_t len)
{
    if (fail_now(FI_IO, "ftruncate64")) {
        errno = ENOSPC;
        return -1;
    }
    return NEXT(ftruncate64)(fd, len);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (fail_now(FI_IO, "mmap")) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return NEXT(mmap)(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    if (fail_now(FI_IO, "mmap64")) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return NEXT(mmap64)(addr, len, prot, flags, fd, off);
}

/* The sync calls also feed the power-loss record (below). */
static void record_fd_sync(int fd, int data_only);
static void record_all(void);

int fsync(int fd)
{
    if (fail_now(FI_IO, "fsync")) {
        errno = EIO;
        return -1;
    }
    int rc = NEXT(fsync)(fd);
    if (rc == 0)
        record_fd_sync(fd, 0);
    return rc;
}

int fdatasync(int fd)
{
    if (fail_now(FI_IO, "fdatasync")) {
        errno = EIO;
        return -1;
    }
    int rc = NEXT(fdatasync)(fd);
    if (rc == 0)
        record_fd_sync(fd, 1);
    return rc;
}

int syncfs(int fd)
{
    if (fail_now(FI_IO, "syncfs")) {
        errno = EIO;
        return -1;
    }
    int rc = NEXT(syncfs)(fd);
    if (rc == 0)
        record_all();
    return rc;
}

void sync(void)
{
    NEXT(sync)();
    record_all();
}

/* ---- the power-loss record --------------------------------------------------------------
 * In the shadow directory: c-KEY, the content of the file KEY as last synced; l-HASH, the
 * entries of the directory whose path below the root hashes to HASH as last synced (its
 * first line the path, then one line "TYPE KEY NAME" per entry, TYPE f or d).  KEY names
 * a file for its life: inode number and birth time.  Each record is written under a
 * temporary name and renamed into place, so a process killed while recording leaves the
 * previous record whole. */

static pthread_mutex_t g_rec_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_root[PATH_MAX], g_shadow[PATH_MAX];
static atomic_int g_tracking;

/* What was last recorded for a file, to copy it only when it changed.  File times are
 * coarse (a clock tick of some milliseconds): a file is taken as unchanged only when its
 * size and times are those of the copy and its last change came well before the copy. */
typedef struct seen {
    char key[64];
    long long size, mtime_ns, ctime_ns, copied_ns;
    struct seen *next;
} seen;
#define SEEN_MARGIN_NS 50000000LL
static seen *g_seen;

typedef struct fileid {
    char key[64];
    long long size, mtime_ns, ctime_ns;
    int type;                 /* 'f', 'd', or 0 for anything else */
} fileid;

/* The identity of `path` (or of fd with path ""); 0 or -1. */
static int file_id(int fd, const char *path, fileid *id)
{
    struct statx sx;
    int flags = path[0] ? AT_SYMLINK_NOFOLLOW : AT_EMPTY_PATH;
    if (statx(path[0] ? AT_FDCWD : fd, path, flags, STATX_BASIC_STATS | STATX_BTIME, &sx) != 0)
        return -1;
    if (sx.stx_mask & STATX_BTIME)
        snprintf(id->key, sizeof id->key, "%llx-%llx.%x", (unsigned long long)sx.stx_ino,
                 (unsigned long long)sx.stx_btime.tv_sec, (unsigned)sx.stx_btime.tv_nsec);
    else
        snprintf(id->key, sizeof id->key, "%llx", (unsigned long long)sx.stx_ino);
    id->size = (long long)sx.stx_size;
    id->mtime_ns = (long long)sx.stx_mtime.tv_sec * 1000000000LL + sx.stx_mtime.tv_nsec;
    id->ctime_ns = (long long)sx.stx_ctime.tv_sec * 1000000000LL + sx.stx_ctime.tv_nsec;
    id->type = S_ISREG(sx.stx_mode) ? 'f' : S_ISDIR(sx.stx_mode) ? 'd' : 0;
    return 0;
}

static uint64_t path_hash(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Copies the file `src` (open for reading) into the shadow file `name`; 0 or -1. */
static int shadow_put_fd(int src, const char *name)
{
    char tmp[PATH_MAX + 64], dst[PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld", g_shadow, (long)syscall(SYS_gettid));
    snprintf(dst, sizeof dst, "%s/%s", g_shadow, name);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return -1;
    char buf[65536];
    off_t off = 0;
    int rc = 0;
    for (;;) {
        ssize_t n = pread(src, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -1 : 0;
            break;
        }
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k <= 0) {
                rc = -1;
                break;
            }
            w += k;
        }
        if (rc)
            break;
        off += n;
    }
    if (close(out) != 0 || rc != 0 || rename(tmp, dst) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Records the content of the regular file `path` (unless unchanged since last time). */
static void record_file(const char *path)
{
    fileid id;
    if (file_id(-1, path, &id) != 0 || id.type != 'f')
        return;
    seen *s = g_seen;
    while (s && strcmp(s->key, id.key) != 0)
        s = s->next;
    if (s && s->size == id.size && s->mtime_ns == id.mtime_ns && s->ctime_ns == id.ctime_ns &&
        id.ctime_ns + SEEN_MARGIN_NS < s->copied_ns)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char name[80];
    snprintf(name, sizeof name, "c-%s", id.key);
    int rc = shadow_put_fd(fd, name);
    close(fd);
    if (rc != 0)
        return;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return;
        snprintf(s->key, sizeof s->key, "%s", id.key);
        s->next = g_seen;
        g_seen = s;
    }
    s->size = id.size;
    s->mtime_ns = id.mtime_ns;
    s->ctime_ns = id.ctime_ns;
    s->copied_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Records the entries of the directory `rel` below the root ("" is the root). */
static void record_dir(const char *rel)
{
    char dir[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s%s%s", g_root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return;
    char tmp[PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s/.list-%ld", g_shadow, (long)syscall(SYS_gettid));
    FILE *out = fopen(tmp, "w");
    if (!out) {
        closedir(d);
        return;
    }
    fprintf(out, "%s\n", rel);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX * 3];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fileid id;
        if (file_id(-1, p, &id) == 0 && id.type)
            fprintf(out, "%c %s %s\n", id.type, id.key, e->d_name);
    }
    closedir(d);
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        unlink(tmp);
        return;
    }
    char dst[PATH_MAX + 64];
    snprintf(dst, sizeof dst, "%s/l-%016llx", g_shadow, (unsigned long long)path_hash(rel));
    if (rename(tmp, dst) != 0)
        unlink(tmp);
}

/* Records everything below `rel`: its entries, the files' contents, the directories'. */
static void record_tree(const char *rel)
{
    record_dir(rel);
    char dir[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s%s%s", g_root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX * 3], sub[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fileid id;
        if (file_id(-1, p, &id) != 0)
            continue;
        if (id.type == 'f') {
            record_file(p);
        } else if (id.type == 'd') {
            snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
            record_tree(sub);
        }
    }
    closedir(d);
}

/* The path of `fd` relative to the root into rel (PATH_MAX); 0, or -1 when outside. */
static int rel_of_fd(int fd, char *rel)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
    size_t rl = strlen(g_root);
    if (strncmp(path, g_root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))
        return -1;
    snprintf(rel, PATH_MAX, "%s", path[rl] ? path + rl + 1 : "");
    return 0;
}

static void record_fd_sync(int fd, int data_only)
{
    (void)data_only;   /* fdatasync keeps the content: all the model looks at */
    if (!atomic_load(&g_tracking))
        return;
    int saved = errno;
    t_quiet++;
    pthread_mutex_lock(&g_rec_lock);
    char rel[PATH_MAX];
    fileid id;
    if (rel_of_fd(fd, rel) == 0 && file_id(fd, "", &id) == 0) {
        if (id.type == 'd') {
            record_dir(rel);
        } else if (id.type == 'f') {
            char p[PATH_MAX * 2];
            snprintf(p, sizeof p, "%s/%s", g_root, rel);
            record_file(p);
        }
    }
    pthread_mutex_unlock(&g_rec_lock);
    t_quiet--;
    errno = saved;
}

static void record_all(void)
{
    if (!atomic_load(&g_tracking))
        return;
    int saved = errno;
    t_quiet++;
    pthread_mutex_lock(&g_rec_lock);
    record_tree("");
    pthread_mutex_unlock(&g_rec_lock);
    t_quiet--;
    errno = saved;
}

int fi_sync_track(const char *root, const char *shadow)
{
    char r[PATH_MAX], s[PATH_MAX];
    if (!realpath(root, r) || !realpath(shadow, s))
        return -1;
    pthread_mutex_lock(&g_rec_lock);
    snprintf(g_root, sizeof g_root, "%s", r);
    snprintf(g_shadow, sizeof g_shadow, "%s", s);
    while (g_seen) {
        seen *nx = g_seen->next;
        free(g_seen);
        g_seen = nx;
    }
    pthread_mutex_unlock(&g_rec_lock);
    atomic_store(&g_tracking, 1);
    record_all();
    return 0;
}

void fi_sync_untrack(void)
{
    atomic_store(&g_tracking, 0);
    pthread_mutex_lock(&g_rec_lock);
    while (g_seen) {
        seen *nx = g_seen->next;
        free(g_seen);
        g_seen = nx;
    }
    pthread_mutex_unlock(&g_rec_lock);
}

/* ---- the power loss ------------------------------------------------------------------ */

typedef struct listed {
    int type;
    char key[64];
    char name[NAME_MAX + 1];
} listed;

/* The recorded entries of directory `rel` (malloc'd, *n of them); NULL and *n = 0 when
 * it was never recorded, or -1 in *n on a damaged record. */
static listed *load_listing(const char *shadow, const char *rel, int *n)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/l-%016llx", shadow, (unsigned long long)path_hash(rel));
    *n = 0;
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    char line[PATH_MAX + 128];
    listed *v = NULL;
    int cap = 0;
    if (!fgets(line, sizeof line, f) || (line[strcspn(line, "\n")] = '\0', strcmp(line, rel))) {
        fclose(f);
        *n = -1;
        return NULL;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *k = strchr(line, ' '), *nm = k ? strchr(k + 1, ' ') : NULL;
        if (!k || !nm || (line[0] != 'f' && line[0] != 'd'))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            listed *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv)
                break;
            v = nv;
        }
        listed *e = &v[(*n)++];
        e->type = line[0];
        snprintf(e->key, sizeof e->key, "%.*s", (int)(nm - k - 1), k + 1);
        snprintf(e->name, sizeof e->name, "%s", nm + 1);
    }
    fclose(f);
    return v;
}

static int rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        rc |= rm_tree(p);
    }
    closedir(d);
    return rc | rmdir(path);
}

/* Writes the recorded content of file `key` (empty when none) to `path`. */
static int put_content(const char *shadow, const char *key, const char *path)
{
    char src[PATH_MAX + 80];
    snprintf(src, sizeof src, "%s/c-%s", shadow, key);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        return -1;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (in >= 0) {
        char buf[65536];
        ssize_t n;
        while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0) {
            if (n < 0) {
                rc = errno == EINTR ? 0 : -1;
                continue;
            }
            for (ssize_t w = 0; w < n && rc == 0;) {
                ssize_t k = write(out, buf + w, (size_t)(n - w));
                if (k <= 0)
                    rc = -1;
                else
                    w += k;
            }
        }
        close(in);
    }
    return close(out) | rc;
}

static int restore_dir(const char *root, const char *shadow, const char *rel, char *err,
                       size_t errlen)
{
    char dir[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    int n;
    listed *v = load_listing(shadow, rel, &n);
    if (n < 0) {
        snprintf(err, errlen, "damaged record of directory '%s'", rel);
        return -1;
    }
    /* Entries made since the directory was last synced go. */
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read '%s': %s", dir, strerror(errno));
        free(v);
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) && rc == 0) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX * 3];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fileid id;
        int keep = 0;
        if (file_id(-1, p, &id) == 0)
            for (int i = 0; i < n && !keep; i++)
                keep = strcmp(v[i].name, e->d_name) == 0 && v[i].type == id.type &&
                       (id.type == 'd' || strcmp(v[i].key, id.key) == 0);
        if (!keep && rm_tree(p) != 0) {
            snprintf(err, errlen, "cannot remove '%s': %s", p, strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    /* Recorded entries come back with their recorded contents. */
    for (int i = 0; i < n && rc == 0; i++) {
        char p[PATH_MAX * 3], sub[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        if (v[i].type == 'd') {
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create '%s': %s", p, strerror(errno));
                rc = -1;
                break;
            }
            snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", v[i].name);
            rc = restore_dir(root, shadow, sub, err, errlen);
        } else if (put_content(shadow, v[i].key, p) != 0) {
            snprintf(err, errlen, "cannot restore '%s': %s", p, strerror(errno));
            rc = -1;
        }
    }
    free(v);
    return rc;
}

int fi_power_loss(const char *root, const char *shadow, char *err, size_t errlen)
{
    char r[PATH_MAX], s[PATH_MAX];
    if (!realpath(root, r) || !realpath(shadow, s)) {
        snprintf(err, errlen, "no such directory: %s", strerror(errno));
        return -1;
    }
    t_quiet++;
    int rc = restore_dir(r, s, "", err, errlen);
    t_quiet--;
    return rc;
}
