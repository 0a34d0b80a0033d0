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

/* On x86-64 CPUs with AVX2 (checked at run time) one byte shuffle reverses eight 32-bit
 * lanes, or four 64-bit ones: the SSE2 swap spends seven operations on four lanes, so
 * that on a 64 MB image the swap was bound by them, not by memory. */
#if defined(TESS_SWAP_SSE2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TESS_SWAP_AVX2 1

/* The lanes' byte order reversed by the shuffle: `w` is 4 or 8, the width of a value. */
#define SWAP_SHUFFLE(w)                                                                    \
    ((w) == 4 ? _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2,  \
                                 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12)               \
              : _mm256_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,  \
                                 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8))

/* Swaps the whole 128-byte pieces of the nbytes at p; returns the bytes done. */
__attribute__((target("avx2"))) static size_t swap_avx2(unsigned char *p, size_t nbytes,
                                                        size_t size)
{
    const __m256i sh = SWAP_SHUFFLE(size);
    size_t k = 0;
    for (; k + 128 <= nbytes; k += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(p + k));
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + k + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(p + k + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(p + k + 96));
        _mm256_storeu_si256((__m256i *)(p + k), _mm256_shuffle_epi8(a, sh));
        _mm256_storeu_si256((__m256i *)(p + k + 32), _mm256_shuffle_epi8(b, sh));
        _mm256_storeu_si256((__m256i *)(p + k + 64), _mm256_shuffle_epi8(c, sh));
        _mm256_storeu_si256((__m256i *)(p + k + 96), _mm256_shuffle_epi8(d, sh));
    }
    return k;
}

/* tess_be_swap_f32_finite over the whole 32-value pieces of d[0..n); returns the values
 * done.  A value is not finite when its exponent bits are all set: (u & 0x7f800000) ==
 * 0x7f800000. */
__attribute__((target("avx2"))) static size_t swap_f32_finite_avx2(float *d, unsigned char *fp,
                                                                   size_t n)
{
    const __m256i sh = SWAP_SHUFFLE(4), ex = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi8(1);
    unsigned char *p = (unsigned char *)d;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x[4], inf[4];
        for (int q = 0; q < 4; q++) {
            x[q] = _mm256_loadu_si256((const __m256i *)(p + 4 * i + 32 * q));
            inf[q] = _mm256_cmpeq_epi32(_mm256_and_si256(x[q], ex), ex);
            _mm256_storeu_si256((__m256i *)(p + 4 * i + 32 * q), _mm256_shuffle_epi8(x[q], sh));
        }
        /* The packs work within 128-bit halves: values 0-3, 8-11 | 4-7, 12-15 after the
         * first, then bytes of values 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31; the
         * permute puts the 4-byte groups back in order. */
        __m256i w01 = _mm256_packs_epi32(inf[0], inf[1]), w23 = _mm256_packs_epi32(inf[2], inf[3]);
        __m256i b = _mm256_packs_epi16(w01, w23);
        b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(fp + i), _mm256_andnot_si256(b, one));
    }
    return i;
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
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
#ifdef TESS_SWAP_AVX2
    if ((size == 4 || size == 8) && have_avx2())
        k = swap_avx2(p, n * size, size) / size;
#endif
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
#ifdef TESS_SWAP_AVX2
    if (have_avx2())
        i = swap_f32_finite_avx2(d, fp, n);
#endif
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
