/* Fault injection for the programs of tests/faults: allocations and file I/O that fail on
 * demand, and a record of what reached the disk for a simulated power loss.
 *
 * The program that links faultinj.c defines malloc, calloc, realloc, reallocarray,
 * strdup, strndup, posix_memalign, aligned_alloc (the allocation class) and open,
 * openat, fopen, read, pread, fread, write, pwrite, fwrite, ftruncate, fsync, fdatasync,
 * syncfs, mmap with their *64 names (the I/O class) itself.  A definition in the
 * executable takes the place of the C library's for every caller in the process, the
 * shared libraries included (cfitsio, SQLite, jansson, wcslib), and hands the call on to
 * the next definition (dlsym RTLD_NEXT: the sanitizer's interceptor in an ASan build,
 * else the C library).  Calls the C library makes to itself (fopen's own open, fread's
 * own read) are not seen; fopen and fread are, at their own entry.
 *
 * A realloc that does not grow its block is not counted (allocators shrink in place), nor
 * is a call made from a library named in TESSERA_FAULT_SKIP (a comma-separated list of
 * file name prefixes; default FI_SKIP_DEFAULT): wcslib 7.12's header parser dereferences
 * NULL when its scanner's allocation fails (wcspih, reached from skywcs_parse), a crash in
 * the library that the product cannot avoid, and it would hide every point after it.
 * Calls made inside glob(3) are not counted either: glibc 2.36's glob frees a block twice
 * when one of its allocations fails; nor those inside jansson's json_dumps, which returns a
 * document with an object key missing when an allocation fails while it writes the key,
 * or inside its loaders (json_loads, json_loadb, json_loadfd), whose lexer drops a
 * character when its buffer cannot grow and then aborts (jansson 2.14 load.c:442);
 * nor, in a thread, those made before its start routine runs (ASan's set-up of the thread
 * aborts when one fails).  With TESSERA_FAULT_TRACE set in the environment, the
 * first failing call of each run prints its stack (sanitizer builds). 
 * While armed, every call of an armed class is counted, in any thread; the n-th one
 * (1-based) fails, and in persistent mode every later one too, as SQLite's test harness
 * fails its n-th allocation.  A failed call does nothing and fails as the real call does
 * on that error: NULL and ENOMEM for allocations and mmap (MAP_FAILED), -1 and EMFILE for
 * open, -1 and EIO for read, fsync, fdatasync and syncfs, -1 and ENOSPC for write and
 * ftruncate, 0 with the stream's error indicator set for fread and fwrite. */
#ifndef TESSERA_TESTS_FAULTS_FAULTINJ_H
#define TESSERA_TESTS_FAULTS_FAULTINJ_H

#include <stddef.h>

enum { FI_ALLOC = 1, FI_IO = 2 };

#define FI_SKIP_DEFAULT "libwcs.so"

typedef enum {
    FI_TRANSIENT = 0,   /* only the n-th call fails */
    FI_PERSISTENT = 1   /* the n-th call and every later one fail */
} fi_mode;

/* Starts counting the calls of `classes` (FI_ALLOC | FI_IO) from 0; with n >= 1 the n-th
 * fails (and in persistent mode every later one), with n = 0 none does (a count of the
 * fault points of a run).  Cannot fail. */
void fi_arm(int classes, fi_mode mode, long n);

/* Stops counting; returns the number of calls that were made to fail since fi_arm. */
long fi_disarm(void);

/* Calls counted since fi_arm (so far, or up to fi_disarm). */
long fi_calls(void);

/* Calls made to fail since fi_arm, so far. */
long fi_faults(void);

/* The function whose call failed first since fi_arm ("malloc", "pwrite64"), or "". */
const char *fi_first_fault(void);

/* fi_hold(1) stops counting the calls of this thread until fi_hold(0) (the pairs may
 * nest): for the harness's own work inside a run.  Cannot fail. */
void fi_hold(int on);

/* ---- simulated power loss --------------------------------------------------------------
 * The model: what a process writes reaches the disk only when it is synced.  fsync or
 * fdatasync of a regular file keeps its content as it is then; fsync of a directory keeps
 * its entries (names and which files they are); syncfs and sync keep everything.  A power
 * loss gives back, for every directory under the tracked root, the entries it had when it
 * was last synced, each file with its content as last synced (empty when it never was),
 * and drops every entry made since.  Names and contents are recorded by files in a shadow
 * directory, so that the record outlives a process that dies. */

/* Starts recording syncs of files under the directory `root` into the directory `shadow`
 * (both exist; the shadow is not under the root).  Everything under the root counts as
 * synced now.  Returns 0 or -1 with errno. */
int fi_sync_track(const char *root, const char *shadow);

/* Stops recording.  Cannot fail. */
void fi_sync_untrack(void);

/* The power loss: rewrites the tree under `root` (no process may be using it) into what
 * the record in `shadow` says reached the disk.  Returns 0, or -1 with a reason in err. */
int fi_power_loss(const char *root, const char *shadow, char *err, size_t errlen);

#endif
