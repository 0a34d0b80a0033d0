/* Byte order of FITS data: values converted in place between native and big-endian order. */
#ifndef TESSERA_ENGINE_BASE_BYTESWAP_H
#define TESSERA_ENGINE_BASE_BYTESWAP_H

#include <stddef.h>

/* Converts the n values of `size` bytes (4 or 8) at p in place between native and FITS
 * (big-endian) byte order: a byte swap on little-endian hosts (four 32-bit lanes at a
 * time with SSE2), nothing on big-endian ones.  The conversion is its own inverse.
 * p needs no alignment.  Cannot fail. */
void tess_be_swap(void *p, size_t n, size_t size);

/* For n native float32 values d[0..n): fp[i] = 1 where d[i] is finite and 0 where it is
 * NaN or infinite, and d converted in place to big-endian (tess_be_swap), in one pass.
 * Cannot fail. */
void tess_be_swap_f32_finite(float *d, unsigned char *fp, size_t n);

#endif
