/* FNV-1a, 64-bit: the one byte hash of Tessera's cache keys, ETags and file names. */
#ifndef TESSERA_ENGINE_BASE_HASH_H
#define TESSERA_ENGINE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Offset basis and prime of 64-bit FNV-1a (Fowler, Noll, Vo; draft-eastlake-fnv). */
#define TESS_FNV64_OFFSET UINT64_C(14695981039346656037)
#define TESS_FNV64_PRIME UINT64_C(1099511628211)

/* FNV-1a of the n bytes at p, from state h (TESS_FNV64_OFFSET to start; another value
 * seeds an independent hash, or continues one over several pieces).  Cannot fail. */
static inline uint64_t tess_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= TESS_FNV64_PRIME;
    }
    return h;
}

#endif
