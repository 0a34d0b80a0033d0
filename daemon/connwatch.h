/* Connection deadlines: a watcher thread shuts down sockets whose deadline has passed. */
#ifndef TESSERA_DAEMON_CONNWATCH_H
#define TESSERA_DAEMON_CONNWATCH_H

#include <stddef.h>

/* The HTTP layer registers each connection's socket and arms a deadline while the
 * request line and headers are being read (libmicrohttpd 0.9.75 times out silence only,
 * so a client trickling a byte at a time is never idle).  At its deadline a socket is
 * shut down for reading and writing (shutdown(2)): the HTTP library sees the end of the
 * stream and closes the connection itself.  Times are seconds on tess_mono_s()
 * (engine/base/clock.h).  Every function is thread-safe. */
typedef struct connwatch connwatch;
typedef struct connwatch_entry connwatch_entry;

/* Starts the watcher thread.  Returns NULL when out of memory or when the thread cannot
 * be created. */
connwatch *connwatch_new(void);

/* Stops the thread and frees everything, entries still registered included (their
 * sockets are left alone).  NULL is ignored. */
void connwatch_free(connwatch *w);

/* Registers socket `fd` with a deadline (0 = none yet).  Returns the entry, or NULL when
 * out of memory (the socket then has no deadline).  The entry must be removed before
 * `fd` is closed. */
connwatch_entry *connwatch_add(connwatch *w, int fd, double deadline);

/* Sets the entry's deadline (0 disarms it).  NULL `e` is ignored. */
void connwatch_set(connwatch *w, connwatch_entry *e, double deadline);

/* Moves an armed deadline earlier, to `deadline`, or arms a disarmed one; a later
 * `deadline` than the one armed changes nothing.  NULL `e` is ignored. */
void connwatch_tighten(connwatch *w, connwatch_entry *e, double deadline);

/* Unregisters and frees the entry.  NULL `e` is ignored. */
void connwatch_remove(connwatch *w, connwatch_entry *e);

/* Sockets shut down at their deadline since connwatch_new. */
unsigned long long connwatch_cut_count(connwatch *w);

#endif
