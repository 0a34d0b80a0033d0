/* Mapped-file guard: turns SIGBUS on a truncated memory-mapped file into a read or write error. */
#ifndef TESSERA_ENGINE_BASE_MAPGUARD_H
#define TESSERA_ENGINE_BASE_MAPGUARD_H

#include <stddef.h>

/* A read through a MAP_SHARED mapping of a file that another process truncated gets
 * SIGBUS for every page past the new end of file, however recently the file was
 * checked with stat(2): truncation can always race with a read.  The guard keeps a
 * table of the mappings registered here and a SIGBUS handler (installed on the first
 * registration, chained to the handler in place before it).  On a fault inside a
 * registered mapping the handler maps zero-filled anonymous pages over the faulting
 * page (so the read goes on, seeing zeros, or the write, into memory of its own), marks
 * the mapping as faulted and returns; the reader must then check mapguard_faulted()
 * after its read and discard what it read, a writer treat its writes as lost.  A fault
 * anywhere else goes to the previous handler (by default: the process dies with
 * SIGBUS, as without the guard).  The table holds MAPGUARD_SLOTS mappings;
 * past that, mappings are not guarded (mapguard_add returns -1).
 * Slots are process-wide and thread-safe; the handler is async-signal-safe but for its
 * mmap(2) call, a plain system call on Linux. */
#define MAPGUARD_SLOTS 4096

/* Registers the mapping [addr, addr + len).  Returns the slot (>= 0), or -1 when the
 * table is full or the handler cannot be installed (the mapping is then unguarded). */
int mapguard_add(const void *addr, size_t len);

/* Unregisters slot `slot` (before munmap).  A negative slot is ignored. */
void mapguard_remove(int slot);

/* 1 when a SIGBUS hit the mapping of `slot` since mapguard_add (its contents are
 * then partly zeros, not the file's), else 0.  Cannot fail; -1 gives 0. */
int mapguard_faulted(int slot);

/* SIGBUS faults absorbed since the start of the process.  Cannot fail. */
unsigned long mapguard_faults(void);

#endif
