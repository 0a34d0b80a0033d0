/* Open connections counted by client address (limits.max_connections_per_address). */
#ifndef TESSERA_DAEMON_PEERCOUNT_H
#define TESSERA_DAEMON_PEERCOUNT_H

#include <stddef.h>
#include <sys/socket.h>

/* A table from client address to its number of open connections, of a fixed capacity
 * chosen at creation (open addressing, linear probing; an address leaves the table when
 * its count returns to 0, so the table holds at most as many addresses as there are
 * open connections).  The address is the peer's IP address alone (no port): IPv4, or
 * IPv6 (an IPv4-mapped IPv6 address, ::ffff:a.b.c.d, counts as IPv4 a.b.c.d).  Every
 * function is thread-safe (one mutex). */
typedef struct peercount peercount;

/* The key of one address, as peercount_add returns it for the matching
 * peercount_remove. */
typedef struct peer_key {
    unsigned char family;        /* 4 or 6; 0: not counted (see peercount_add) */
    unsigned char addr[16];      /* network order; IPv4 in the first 4 bytes */
} peer_key;

/* A table for at most `max_addresses` distinct addresses at once (callers pass the
 * connection limit: each address in the table holds at least one connection).  Returns
 * NULL when out of memory. */
peercount *peercount_new(size_t max_addresses);

/* Frees the table.  NULL is ignored. */
void peercount_free(peercount *pc);

/* Counts one more connection from `sa` (`len` bytes) and returns that address's count,
 * this connection included (>= 1), with its key in *key.  Returns 0, with key->family
 * 0, when `sa` is not IPv4 or IPv6 or when the table is full (the connection is then not
 * counted, and peercount_remove of that key does nothing). */
unsigned peercount_add(peercount *pc, const struct sockaddr *sa, socklen_t len, peer_key *key);

/* Counts one connection of `key` fewer (a key of family 0, or of an address not in the
 * table, is ignored). */
void peercount_remove(peercount *pc, const peer_key *key);

/* The open connections now counted from `sa` (0 when none or not IPv4/IPv6). */
unsigned peercount_get(peercount *pc, const struct sockaddr *sa, socklen_t len);

/* Distinct addresses in the table now (0 once every counted connection has closed). */
size_t peercount_addresses(peercount *pc);

#endif
