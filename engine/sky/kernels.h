/* Interpolation kernels: nearest, bilinear, bicubic B-spline and lanczos3 sampling of a plane. */
#ifndef TESSERA_ENGINE_SKY_KERNELS_H
#define TESSERA_ENGINE_SKY_KERNELS_H

#include <stddef.h>
#include "engine/sky/plane.h"
#include "engine/sky/reproject.h"

/* A source plane prepared for one method (B-spline coefficients for bicubic, tables for
 * lanczos3).  Read-only once made: any number of threads may sample it at once. */
typedef struct rp_kernel rp_kernel;

/* Prepares `src` for sampling with `method`.  `src` must outlive the kernel (nearest,
 * bilinear and lanczos3 read it in place; bicubic keeps its own coefficient array of
 * (nx+2) x (ny+2) doubles; lanczos3 reads static tables of 754 KB, filled at its first
 * use in the process and shared by every kernel).  Returns NULL on allocation failure or
 * an unknown method (`err` says which). */
rp_kernel *rp_kernel_new(rp_method method, const rp_plane *src, char *err, size_t errlen);

/* rp_kernel_new for a caller that keeps its samples as float32 (engine/sky/reproject.c for
 * float32 output): the same kernel, except that bicubic of a float32 plane keeps its
 * coefficients as floats, (nx+2) x (ny+2) of them (half the memory and half the memory
 * traffic of the samplers), each of rp_kernel_new's double coefficients c rounded once
 * (engine/sky/bspline.h rp_bspline_prepare_f32), and sums each column of the 4x4 support
 * in float arithmetic (the vertical weights rounded to float; twice the lanes a vector),
 * then the four column sums across in double as rp_kernel_new's kernel does.  A sample
 * v' lies within
 *     |v' - v| <= 6 u sum_ij wx_i wy_j |c_ij| + O(u^2) <= 6 u max_ij |c_ij| <= 54 u max |pixel|
 * of rp_kernel_new's v at the same position, u = 2^-24.  Derivation (first order): the
 * 16 B-spline weights wx_i wy_j are >= 0 and sum to 1 (Unser 1999, partition of unity),
 * so each error below, relative to a nonnegative weight times |c|, adds up to at most
 * that multiple of sum w|c|: the coefficient rounded, u; a vertical weight rounded to
 * float, u; its product with the coefficient, u; the three float additions down a column
 * (left to right), at most 3u for the first two terms, less for the others; widening and
 * the double sum across: under 2^-50, below the O(u^2) terms.  |c| <= 9 max |pixel|
 * (bspline.h).  On smooth data c is close to the pixel values and the bound about 6u |v|
 * (the rounding of v to float32 itself is u |v|).  NaN exactly where rp_kernel_new's
 * kernel gives NaN (the same mask); the same bits from every sampler (plain, AVX2,
 * AVX-512, a batch or one position a call).  Tested in tests/engine/test_kernels.c
 * (bicubic_f32_bound).  Other methods, and float64 planes: rp_kernel_new's kernel.
 * Returns NULL as rp_kernel_new does. */
rp_kernel *rp_kernel_new_f32(rp_method method, const rp_plane *src, char *err, size_t errlen);

void rp_kernel_free(rp_kernel *k);

/* Samples the plane at n input-pixel positions (x[i], y[i]), 0-based, pixel centres at
 * integers, writing out[i].  Definitions (docs/DESIGN.md, "Kernel definitions"; astropy
 * reproject 0.10 reproject_interp): the plane is padded by one edge pixel and sampled only
 * within [-0.5, n-0.5] on each axis (NaN beyond, and NaN for NaN positions).
 *  nearest:  pixel (floor(x+0.5), floor(y+0.5)) of the padded array, as scipy order 0;
 *  bilinear: scipy order 1 on the padded array;
 *  bicubic:  scipy order 3: cubic B-spline of the padded array prefiltered with mirror
 *            boundaries (spline_filter(mode='mirror')), reproducing the reference to ~1e-11;
 *  lanczos3: separable Lanczos-3 (a = 3) weights, tabulated, renormalised over the
 *            finite input pixels of the 6x6 support; float64 planes in double
 *            arithmetic, float32 planes in float arithmetic (the weights and the sum;
 *            within about 2^-20 of sum |w v| / sum w of the float64 result: bound
 *            derived in tests/engine/test_kernels.c, lanczos3_f32_bound; the FMA
 *            sampler, rp_kernel_fma, within that bound too).
 * NaN input pixels: nearest and bilinear propagate them as scipy does; bicubic and
 * lanczos3 make NaN only those outputs whose kernel support touches a NaN pixel (bicubic)
 * or whose finite pixels carry less than half of the kernel's weight (lanczos3; a lower
 * threshold lets the positive outer lobe alone make values 2-3 pixels inside NaN
 * regions) — one NaN never turns the whole output NaN.  For an input with NaN pixels,
 * bicubic also keeps a (nx+2) x (ny+2) byte mask.  Cannot fail. */
void rp_kernel_sample(const rp_kernel *k, size_t n, const double *x, const double *y,
                      double *out);

/* Whether k samples with fused multiply-adds: lanczos3 of a float32 plane on an x86-64
 * CPU with AVX2 and FMA (__builtin_cpu_supports; never with -DRP_NO_AVX2 or on other
 * targets).  Every other kernel gives the same bits for a position whether it comes
 * alone or in a batch (groups of four go through vector lanes with the point
 * function's arithmetic in its order).  This one computes groups of four positions
 * whose supports lie inside the image with fmas in another order, and so differs from
 * the same position alone (the point function, also what edges, NaN pixels and the
 * last n % 4 positions get) by at most RP_LZ_FMA_BOUND:
 *   |batch - alone| <= 1.25 ((20 u S + 2^-9 u T) / |W| + |r| (Ex + Ey)),
 *   u = 2^-24, wx_i, wy_j the six Lanczos-3 weights of each axis, v_ij the 36 pixels,
 *   S = sum |wx_i wy_j v_ij|, T = sum (|wx_i| + |wy_j|) |v_ij|, W = (sum wx)(sum wy),
 *   r the value alone, Ex = (9 u sum |wx| + 2^-5 u) / |sum wx| (Ey alike);
 * that is a few units of 2^-24 of sum |w v| / |sum w|, derived (first-order rounding
 * analysis, 1.25 for the tabulated weights and second-order terms) and checked in
 * tests/engine/test_kernels.c, lanczos3_fma_bound.  Returns 1 or 0; cannot fail. */
int rp_kernel_fma(const rp_kernel *k);

/* A hint, no effect on results: asks the CPU to bring into its caches the source pixels
 * that rp_kernel_sample will read for every step-th of the n positions (x, y) (same
 * conventions; step 0 is taken as 1).  Callers sampling a block row by row call it for
 * a row several rows ahead (engine/sky/reproject.c: 8 rows, step 4), which hides the
 * memory latency of a source read along a rotated or distorted path.  Nearest and
 * bilinear only (a no-op for the other methods).  Cannot fail. */
void rp_kernel_prefetch(const rp_kernel *k, size_t n, const double *x, const double *y,
                        size_t step);

/* rp_kernel_sample with the values narrowed to float32 on the way: out[i] receives
 * (float)v[i] for the values v that rp_kernel_sample would give (the same bits, a NaN
 * quiet as the double round trip makes it) for nearest; for bilinear, the same
 * interpolation computed in float32 arithmetic (weights from the double positions,
 * rounded to float32; kernels_f32.c bilinear_f32f), within 7 u (|v00| + |v01| + |v10| +
 * |v11|) + O(u^2), u = 2^-24, of rp_kernel_sample's value over the four taps v, NaN
 * where that is NaN, the same bits whether positions come one a call or in a batch
 * (values within a few ulp of FLT_MAX may round to infinity); for lanczos3 where
 * rp_kernel_fma(k) is 1, and for bicubic from float coefficients (rp_kernel_new_f32 of a
 * float32 plane) on CPUs with AVX2, (float)v[i] of the values v that rp_kernel_sample
 * gives for the same call (the same groups, so the bits of its batch of n narrowed, NaN
 * quiet), footprint 1.0f and counted where v[i] is finite in double (a finite v beyond
 * FLT_MAX narrows to an infinity and counts, as the narrowing of rp_kernel_sample's
 * values in engine/sky/reproject.c does); and, where footprint is not NULL, footprint[i]
 * 1.0f where out[i] is finite (lanczos3, bicubic: v[i]), 0.0f elsewhere (out and
 * footprint: n floats each, caller-owned); while sampling, prefetch hints for the
 * pn <= n positions (pfx, pfy) (typically the positions of a row several rows ahead; pn
 * may be 0, then pfx and pfy may be NULL): nearest and bilinear the rp_kernel_prefetch
 * hint, step 4; lanczos3 the source pixel, bicubic the coefficient, under every 4th.  Returns the number of finite values, or -1
 * when the kernel has no such path (other methods, double planes, bilinear and bicubic
 * on CPUs without AVX2, lanczos3 without FMA, bicubic from double coefficients): then
 * nothing is written and the caller uses rp_kernel_sample (so that bilinear's float
 * output on such CPUs is the double arithmetic narrowed, within the bound above).
 * Nearest, bilinear (AVX2), lanczos3 (AVX2 and FMA) and bicubic (float coefficients,
 * AVX2) of float planes only. */
long rp_kernel_sample_f32(const rp_kernel *k, size_t n, const double *x, const double *y,
                          float *out, float *footprint, const double *pfx, const double *pfy,
                          size_t pn);

/* The width, in positions, of the column strips in which a caller sampling a block of
 * rows (rp_reproject) should hand k's rows to rp_kernel_sample_f32: every row of the
 * block for the first strip, then every row for the next (the values do not depend on
 * the order), or 0 for whole rows.  Nonzero (128) where rp_kernel_sample_f32 gathers:
 * nearest and bilinear of float planes of fewer than 2^31 pixels on Intel CPUs with
 * AVX-512F (kernels_f32.c has the measurements); 0 elsewhere.  Cannot fail. */
size_t rp_kernel_f32_strip(const rp_kernel *k);

/* Whether rp_kernel_sample_f32 may take its gathering samplers where they serve (on,
 * nonzero: the default) or never (0: the samplers tuned on AMD Zen 4 then run on every
 * CPU with AVX-512F; the values are the same bits either way), process-wide: for tests
 * and benchmarks that compare the two.  Returns the previous setting.  Not thread-safe:
 * change it while nothing samples. */
int rp_kernel_f32_gathers(int on);

#endif
