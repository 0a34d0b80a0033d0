/* Four-lane vectors of the resampling loops (GCC vector extensions) and their run-time dispatch. */
#ifndef TESSERA_ENGINE_SKY_SIMD_H
#define TESSERA_ENGINE_SKY_SIMD_H

#include <stdint.h>
#include <string.h>

/* Four doubles, four 64-bit masks (a comparison of two rp_v4d: -1 true, 0 false) and
 * four 32-bit integers.  The compiler lowers them to AVX, to SSE2 pairs, to NEON pairs or
 * to plain scalar code, whatever the target has: the arithmetic of each lane is the
 * scalar arithmetic (IEEE double, no contraction into FMAs in ISO C mode), so results do
 * not depend on the path taken. */
typedef double rp_v4d __attribute__((vector_size(32)));
typedef int64_t rp_v4q __attribute__((vector_size(32)));
typedef int32_t rp_v4i __attribute__((vector_size(16)));

/* Four floats (the pixels of float planes, widened with __builtin_convertvector). */
typedef float rp_v4f __attribute__((vector_size(16)));

/* Helpers as macros, not inline functions: a function that takes or returns a 32-byte
 * vector has a different psABI with and without AVX (GCC warns at every call). */

/* Loads and stores of four unaligned doubles: v an rp_v4d lvalue, p a double pointer. */
#define RP_V4D_LOAD(v, p) memcpy(&(v), (p), sizeof(rp_v4d))
#define RP_V4D_STORE(p, v) memcpy((p), &(v), sizeof(rp_v4d))

/* Lanes of a where the mask m is true, of b elsewhere. */
#define RP_V4D_SELECT(m, a, b) ((rp_v4d)(((rp_v4q)(a) & (m)) | ((rp_v4q)(b) & ~(m))))

/* Lanes (i0, i1, i2, i3) of the eight lanes of the rp_v4d a then b (0-3 a, 4-7 b), as
 * an rp_v4d. */
#if defined(__clang__)
#define RP_V4D_SHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector((a), (b), i0, i1, i2, i3)
#else
#define RP_V4D_SHUF(a, b, i0, i1, i2, i3) __builtin_shuffle((a), (b), (rp_v4q){ i0, i1, i2, i3 })
#endif

/* An rp_v4i with v in every lane. */
#define RP_V4I_SPLAT(v) ((rp_v4i){ (v), (v), (v), (v) })

/* Lane-wise minimum and maximum of two rp_v4i (the C front end has no vector ?:). */
#define RP_V4I_MIN(a, b) (((a) & ((a) < (b))) | ((b) & ~((a) < (b))))
#define RP_V4I_MAX(a, b) (((a) & ((a) > (b))) | ((b) & ~((a) > (b))))

/* Nonzero when any lane of the mask m is true. */
#define RP_V4Q_ANY(m) (((m)[0] | (m)[1] | (m)[2] | (m)[3]) != 0)

/* Hot loops: with GCC on x86-64, an AVX2 clone picked at load time (ifunc) where the CPU
 * has AVX2, and the baseline (SSE2) one elsewhere; other targets (NEON included) build
 * the plain function.  No -march in the build: the clone carries its own target.
 * Built with -DRP_NO_AVX2 (CPPFLAGS), these clones and the AVX2 samplers of kernels.c
 * are left out: the paths of CPUs without AVX2, to test and time on one that has it. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(RP_NO_AVX2)
#define RP_HOT __attribute__((target_clones("avx2", "default")))
#else
#define RP_HOT
#endif

#endif
