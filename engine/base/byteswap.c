/* Byte order of FITS data: SSE2 byte swaps of 32- and 64-bit values, and a scalar fallback. */
#include "engine/base/byteswap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* On little-endian hosts with SSE2 (every x86-64) the swaps run four 32-bit lanes at a
 * time.  SSE2 has no byte shuffle, so a lane is reversed with shifts and masks. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__SSE2__)
#define TESS_SWAP_SSE2 1
static inline __m128i bswap32x4(__m128i x)
{
    const __m128i m1 = _mm_set1_epi32(0x00ff0000), m2 = _mm_set1_epi32(0x0000ff00);
    return _mm_or_si128(_mm_or_si128(_mm_slli_epi32(x, 24), _mm_srli_epi32(x, 24)),
                        _mm_or_si128(_mm_and_si128(_mm_slli_epi32(x, 8), m1),
                                     _mm_and_si128(_mm_srli_epi32(x, 8), m2)));
}
#endif

void tess_be_swap(void *p, size_t n, size_t size)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    (void)p;
    (void)n;
    (void)size;
#else
    size_t k = 0;
    if (size == 4) {
        uint32_t *u = p;
#ifdef TESS_SWAP_SSE2
        for (; k + 4 <= n; k += 4)
            _mm_storeu_si128((__m128i *)(u + k), bswap32x4(_mm_loadu_si128((__m128i *)(u + k))));
#endif
        for (; k < n; k++) {   /* memcpy: p need not be aligned */
            uint32_t v;
            memcpy(&v, u + k, 4);
            v = __builtin_bswap32(v);
            memcpy(u + k, &v, 4);
        }
    } else {
        uint64_t *u = p;
#ifdef TESS_SWAP_SSE2
        /* Swap the halves of each 64-bit value, then reverse each half. */
        for (; k + 2 <= n; k += 2) {
            __m128i x = _mm_loadu_si128((__m128i *)(u + k));
            x = _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1));
            _mm_storeu_si128((__m128i *)(u + k), bswap32x4(x));
        }
#endif
        for (; k < n; k++) {
            uint64_t v;
            memcpy(&v, u + k, 8);
            v = __builtin_bswap64(v);
            memcpy(u + k, &v, 8);
        }
    }
#endif
}

/* An IEEE 754 value is finite unless all its exponent bits are set. */
void tess_be_swap_f32_finite(float *d, unsigned char *fp, size_t n)
{
    size_t i = 0;
#ifdef TESS_SWAP_SSE2
    uint32_t *u = (uint32_t *)d;
    const __m128i ex = _mm_set1_epi32(0x7f800000), one = _mm_set1_epi8(1);
    for (; i + 16 <= n; i += 16) {
        __m128i inf[4];
        for (int q = 0; q < 4; q++) {
            __m128i x = _mm_loadu_si128((__m128i *)(u + i + 4 * q));
            inf[q] = _mm_cmpeq_epi32(_mm_and_si128(x, ex), ex);   /* all ones: not finite */
            _mm_storeu_si128((__m128i *)(u + i + 4 * q), bswap32x4(x));
        }
        __m128i b = _mm_packs_epi16(_mm_packs_epi32(inf[0], inf[1]),
                                    _mm_packs_epi32(inf[2], inf[3]));
        _mm_storeu_si128((__m128i *)(fp + i), _mm_andnot_si128(b, one));
    }
#endif
    for (; i < n; i++) {
        fp[i] = isfinite(d[i]) != 0;
        tess_be_swap(d + i, 1, 4);
    }
}
