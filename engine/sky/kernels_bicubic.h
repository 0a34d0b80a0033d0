

/* The bicubic samplers of one coefficient type: a template, internal to kernels.c, which
 * includes it twice: with BC_T double, BC_SFX f64 and BC_F32 0 (rp_bspline_prepare's
 * coefficients, kernels from rp_kernel_new), and with BC_T float, BC_SFX f32 and BC_F32 1
 * (rp_bspline_prepare_f32's, of float32 planes from rp_kernel_new_f32).  For double
 * coefficients everything is double arithmetic; for float ones each column of the 4x4
 * support is summed in float (the vertical weights rounded to float: kernels.h
 * rp_kernel_new_f32 states the bound), widened, and the four column sums weighted across
 * in double.  Each path (plain, AVX2, AVX-512, one position at a time) does the same
 * arithmetic in the same order, so all give the same bits.  Defines bicubic_point_SFX,
 * sample_bicubic_SFX, and, with RP_AVX2_SAMPLERS, sample_bicubic_avx2_SFX and
 * sample_bicubic_avx512_SFX.  No include guard, on purpose. */
#define BC_CAT_(a, b) a##_##b
#define BC_CAT(a, b) BC_CAT_(a, b)
#define BC_NAME(n) BC_CAT(n, BC_SFX)

/* bicubic: scipy order 3 on the padded array: the cubic B-spline of coefficients c,
 * sum over the 4x4 coefficients at padded floor(c) - 1 .. floor(c) + 2 (mirrored at the
 * ends, scipy's rule) of c * wy * wx (bspline3_weights); NaN where the support touches a
 * non-finite input pixel (k->bad).  Reads only k->coef, so it serves both pixel types. */
static inline double BC_NAME(bicubic_point)(const rp_kernel *k, const BC_T *restrict c, long nx,
                                   long ny, double px, double py)
{
    const unsigned char *bad = k->bad;
    const long W = nx + 2, H = ny + 2;
    const double cx = px + 1.0, cy = py + 1.0;
    const long fx = (long)cx, fy = (long)cy;
    const long sx = fx - 1, sy = fy - 1;   /* in [-1, nx] and [-1, ny] */
    if (bad && bad[(sy + 1) * W + sx + 1])
        return NAN;
    double wx[4], wy[4];
    bspline3_weights(cx - (double)fx, wx);
    bspline3_weights(cy - (double)fy, wy);
    long ix[4];
    const BC_T *row[4];
    if (sx >= 0 && sx + 3 < W) {
        for (int q = 0; q < 4; q++)
            ix[q] = sx + q;
    } else {
        for (int q = 0; q < 4; q++)
            ix[q] = mirror1(sx + q, W);
    }
    if (sy >= 0 && sy + 3 < H) {
        for (int q = 0; q < 4; q++)
            row[q] = c + (sy + q) * W;
    } else {
        for (int q = 0; q < 4; q++)
            row[q] = c + mirror1(sy + q, H) * W;
    }
    /* down the columns first, then across (the AVX2 sampler's order: see there) */
    double a[4];
#if BC_F32
    /* float coefficients: the column sums in float, the weights rounded to float */
    const float wf[4] = { (float)wy[0], (float)wy[1], (float)wy[2], (float)wy[3] };
    for (int i = 0; i < 4; i++)
        a[i] = (double)(wf[0] * row[0][ix[i]] + wf[1] * row[1][ix[i]] + wf[2] * row[2][ix[i]]
                        + wf[3] * row[3][ix[i]]);
#else
    for (int i = 0; i < 4; i++)
        a[i] = wy[0] * row[0][ix[i]] + wy[1] * row[1][ix[i]] + wy[2] * row[2][ix[i]]
               + wy[3] * row[3][ix[i]];
#endif
    return (wx[0] * a[0] + wx[1] * a[1]) + (wx[2] * a[2] + wx[3] * a[3]);
}

/* The same definition as bicubic_point, four positions at a time: groups whose four 4x4
 * supports need no mirroring and touch no flagged pixel are computed in vector lanes,
 * each lane with the scalar arithmetic in the scalar order (bit-identical: down the
 * columns, then across, the four column sums added pairwise); any other
 * lane takes bicubic_point.  The support starts at padded sx = floor(c) - 1, c = x + 1:
 * no mirroring for 1 <= floor(c) <= n - 1. */
RP_HOT static void BC_NAME(sample_bicubic)(const rp_kernel *k, size_t n, const double *restrict x,
                                  const double *restrict y, double *restrict out)
{
    RP_SAMPLER_VARS(BC_T, k->coef);
    const unsigned char *bad = k->bad;
    const long W = nx + 2;
    const rp_v4i one = RP_V4I_SPLAT(1);
    const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1), ny1 = RP_V4I_SPLAT((int32_t)ny - 1);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
        RP_GROUP(BC_NAME(bicubic_point));
        {
            const BC_T *base[4];
            rp_v4d wx[4], wy[4];
            if (RP_BICUBIC_GROUP_IN(base, wx, wy)) {
                rp_v4d a[4];
#if BC_F32
                rp_v4f wf[4];
                for (int jj = 0; jj < 4; jj++)
                    wf[jj] = __builtin_convertvector(wy[jj], rp_v4f);
                for (int i = 0; i < 4; i++) {
                    rp_v4f v[4];
                    for (int jj = 0; jj < 4; jj++) {
                        const size_t o = (size_t)jj * (size_t)W + (size_t)i;
                        v[jj] = (rp_v4f){ base[0][o], base[1][o], base[2][o], base[3][o] };
                    }
                    const rp_v4f af = wf[0] * v[0] + wf[1] * v[1] + wf[2] * v[2] + wf[3] * v[3];
                    a[i] = __builtin_convertvector(af, rp_v4d);
                }
#else
                for (int i = 0; i < 4; i++) {
                    rp_v4d v[4];
                    for (int jj = 0; jj < 4; jj++) {
                        const size_t o = (size_t)jj * (size_t)W + (size_t)i;
                        v[jj] = (rp_v4d){ base[0][o], base[1][o], base[2][o], base[3][o] };
                    }
                    a[i] = wy[0] * v[0] + wy[1] * v[1] + wy[2] * v[2] + wy[3] * v[3];
                }
#endif
                const rp_v4d t = (wx[0] * a[0] + wx[1] * a[1]) + (wx[2] * a[2] + wx[3] * a[3]);
                RP_V4D_STORE(out + m, t);
                continue;
            }
        }
        RP_POINTS(BC_NAME(bicubic_point), m, m + 4)
    }
    RP_POINTS(BC_NAME(bicubic_point), m, n)
}

#ifdef RP_AVX2_SAMPLERS
/* sample_bicubic again for CPUs with AVX2 (rp_kernel_new checks at run time): the same
 * groups, weights and arithmetic in the same order (bit for bit the same values), but
 * each row of a lane's 4x4 support comes in one 32-byte load and is worked on whole: the
 * lane's four rows weighted by its vertical weights (each broadcast by a lane
 * permutation; a broadcast from memory after storing the weights stalled on store
 * forwarding, 113 Mpix/s) and summed down the columns; the four lanes' column sums are
 * then transposed once (8 shuffles) and weighted across in the lanes, as sample_bicubic
 * does: 16 loads and 24 shuffles a group, against a transposition of every row's taps
 * before (32 shuffles; kernel only 145 Mpix/s before, 155-160 now, same machine and
 * bench); and the four rows of the support BC_AHEAD positions ahead (kernels.c) are
 * prefetched.  The prefetch is what
 * makes the wide loads pay: without it this sampler ran at 100-103 Mpix/s against the
 * scalar loads' 138-140, with it at 143-150 (2048^2 rotated by 20 deg, kernel only,
 * AMD EPYC, 1 thread); a distance of 8 to 96 positions, or a second line per row,
 * measured the same. */
static inline __attribute__((target("avx2"), always_inline)) long
BC_NAME(bicubic_avx2_run)(const rp_kernel *k, size_t n, const double *restrict x,
                          const double *restrict y, double *restrict out, float *restrict d,
                          float *restrict fp, const double *restrict pfx,
                          const double *restrict pfy, size_t pn)
{
    RP_SAMPLER_VARS(BC_T, k->coef);
    long fin = 0;
    const unsigned char *bad = k->bad;
    const long W = nx + 2, H = ny + 2;
    const rp_v4i one = RP_V4I_SPLAT(1);
    const rp_v4i nx1 = RP_V4I_SPLAT((int32_t)nx - 1), ny1 = RP_V4I_SPLAT((int32_t)ny - 1);
    size_t m = 0;
    for (; m + 4 <= n; m += 4) {
#if BC_F32
        if (d) {   /* fused: the hint of the row RP_PREFETCH_ROWS ahead, not BC_AHEAD's */
            if (m < pn)
                RP_PREFETCH_FAST(src + W + 1, W, pfx[m], pfy[m]);
        } else
#endif
            RP_BICUBIC_PREFETCH(m, BC_AHEAD);
        RP_GROUP_WITH(RP_POINTS_TO, BC_NAME(bicubic_point));
        {
            const BC_T *base[4];
            rp_v4d wx[4], wy[4];
            if (RP_BICUBIC_GROUP_IN(base, wx, wy)) {
                __m256d a[4];
#if BC_F32
                /* float coefficients: each lane's column sums in float (bicubic_point_f32) */
                const __m128 wf0 = _mm256_cvtpd_ps((__m256d)wy[0]), wf1 = _mm256_cvtpd_ps((__m256d)wy[1]);
                const __m128 wf2 = _mm256_cvtpd_ps((__m256d)wy[2]), wf3 = _mm256_cvtpd_ps((__m256d)wy[3]);
#define RP_BC_LANE(q)                                                                     \
    do {                                                                                  \
        const BC_T *r_ = base[q];                                                         \
        __m128 s_ = _mm_mul_ps(_mm_permute_ps(wf0, (q) * 0x55), _mm_loadu_ps(r_));        \
        s_ = _mm_add_ps(s_, _mm_mul_ps(_mm_permute_ps(wf1, (q) * 0x55), _mm_loadu_ps(r_ + W))); \
        s_ = _mm_add_ps(s_, _mm_mul_ps(_mm_permute_ps(wf2, (q) * 0x55),                   \
                                       _mm_loadu_ps(r_ + 2 * W)));                        \
        s_ = _mm_add_ps(s_, _mm_mul_ps(_mm_permute_ps(wf3, (q) * 0x55),                   \
                                       _mm_loadu_ps(r_ + 3 * W)));                        \
        a[q] = _mm256_cvtps_pd(s_);                                                       \
    } while (0)
#else
#define RP_BC_LANE(q)                                                                     \
    do {                                                                                  \
        const BC_T *r_ = base[q];                                                       \
        __m256d a_ = _mm256_mul_pd(_mm256_permute4x64_pd((__m256d)wy[0], (q) * 0x55),           \
                                   _mm256_loadu_pd(r_));                                  \
        a_ = _mm256_add_pd(a_, _mm256_mul_pd(_mm256_permute4x64_pd((__m256d)wy[1], (q) * 0x55), \
                                             _mm256_loadu_pd(r_ + W)));                   \
        a_ = _mm256_add_pd(a_, _mm256_mul_pd(_mm256_permute4x64_pd((__m256d)wy[2], (q) * 0x55), \
                                             _mm256_loadu_pd(r_ + 2 * W)));               \
        a_ = _mm256_add_pd(a_, _mm256_mul_pd(_mm256_permute4x64_pd((__m256d)wy[3], (q) * 0x55), \
                                             _mm256_loadu_pd(r_ + 3 * W)));               \
        a[q] = a_;                                                                        \
    } while (0)
#endif
                RP_BC_LANE(0);
                RP_BC_LANE(1);
                RP_BC_LANE(2);
                RP_BC_LANE(3);
#undef RP_BC_LANE
                /* the column sums transposed: c[i] = { a[0][i], a[1][i], a[2][i], a[3][i] } */
                const __m256d a01l = _mm256_unpacklo_pd(a[0], a[1]), a01h = _mm256_unpackhi_pd(a[0], a[1]);
                const __m256d a23l = _mm256_unpacklo_pd(a[2], a[3]), a23h = _mm256_unpackhi_pd(a[2], a[3]);
                const rp_v4d c0 = (rp_v4d)_mm256_permute2f128_pd(a01l, a23l, 0x20);
                const rp_v4d c1 = (rp_v4d)_mm256_permute2f128_pd(a01h, a23h, 0x20);
                const rp_v4d c2 = (rp_v4d)_mm256_permute2f128_pd(a01l, a23l, 0x31);
                const rp_v4d c3 = (rp_v4d)_mm256_permute2f128_pd(a01h, a23h, 0x31);
                const rp_v4d t = (wx[0] * c0 + wx[1] * c1) + (wx[2] * c2 + wx[3] * c3);
                rp_put4(out, d, fp, &fin, m, (__m256d)t);
                continue;
            }
        }
        RP_POINTS_TO(BC_NAME(bicubic_point), m, m + 4)
    }
    RP_POINTS_TO(BC_NAME(bicubic_point), m, n)
    return fin;
}

RP_AVX2 static void BC_NAME(sample_bicubic_avx2)(const rp_kernel *k, size_t n,
                                        const double *restrict x, const double *restrict y,
                                        double *restrict out)
{
    BC_NAME(bicubic_avx2_run)(k, n, x, y, out, NULL, NULL, NULL, NULL, 0);
}

/* sample_bicubic_avx2 eight positions at a time for CPUs with AVX-512F (rp_kernel_new
 * checks at run time): the same supports, weights and arithmetic in the same order (bit
 * for bit the same values; every product and sum an intrinsic, so no compiler contracts
 * them into FMAs), the rows of two lanes' supports in the two halves of one 512-bit
 * register: 16 row loads, 16 weight broadcasts (permutations), 28 multiplies and adds
 * and 8 shuffles (the transposition of the column sums) for eight positions.  A group
 * of eight with a position outside the valid range, or a support that needs mirroring
 * or touches a flagged pixel, takes bicubic_point.  Offsets are multiplied in 32 x 32
 * -> 64 bits: W = nx + 2 <= INT32_MAX (rp_kernel_new).  The four rows of the support of
 * the position BC_AHEAD ahead are prefetched, once per eight positions (once per
 * four, as sample_bicubic_avx2 does, ran at 73-74 ms against 66; none at 70-89 ms; 64
 * ahead as 32).  Sampler alone on 4096^2 rotated by 20 deg, 1 thread, AMD EPYC (Zen 4),
 * A B alternated: 84.0-84.5 ms with sample_bicubic_avx2, 65.8-66.8 ms with this; its
 * loops unrolled by hand (RP_BC_PAIR, RP_BC_WEIGHTS8): left as loops, GCC kept the
 * weights and sums on the stack and it ran slower than the AVX2 one.
 * Valgrind, whose CPU has no AVX-512, gets sample_bicubic_avx2. */
static inline __attribute__((target("avx512f"), always_inline)) long
BC_NAME(bicubic_avx512_run)(const rp_kernel *k, size_t n, const double *restrict x,
                            const double *restrict y, double *restrict out,
                            float *restrict d, float *restrict fp, const double *restrict pfx,
                            const double *restrict pfy, size_t pn)
{
    RP_SAMPLER_VARS(BC_T, k->coef);
    long fin = 0;
    const unsigned char *bad = k->bad;
    const long W = nx + 2, H = ny + 2;
    const __m512d lo = _mm512_set1_pd(-0.5), hx = _mm512_set1_pd(xmax);
    const __m512d hy = _mm512_set1_pd(ymax), one = _mm512_set1_pd(1.0);
    const __m512d two = _mm512_set1_pd(2.0), half = _mm512_set1_pd(0.5);
    const __m512d twothirds = _mm512_set1_pd(BSPLINE3_TWO_THIRDS);
    const __m512d sixth = _mm512_set1_pd(BSPLINE3_SIXTH);
    const __m256i ione = _mm256_set1_epi32(1), nx1 = _mm256_set1_epi32((int32_t)nx - 1);
    const __m256i ny1 = _mm256_set1_epi32((int32_t)ny - 1);
    const __m512i w64 = _mm512_set1_epi64((long long)W);
    /* lane q of the pair p's weights in the lower half, lane q + 1 in the upper */
#if BC_F32
    static const int32_t pair_idx[4][8] = { { 0, 0, 0, 0, 1, 1, 1, 1 },
#else
    static const int64_t pair_idx[4][8] = { { 0, 0, 0, 0, 1, 1, 1, 1 },
#endif
                                            { 2, 2, 2, 2, 3, 3, 3, 3 },
                                            { 4, 4, 4, 4, 5, 5, 5, 5 },
                                            { 6, 6, 6, 6, 7, 7, 7, 7 } };
    /* tap i of the four positions of (A, B) in the lower half, tap i' in the upper */
    static const int64_t tap_idx[2][8] = { { 0, 4, 8, 12, 1, 5, 9, 13 },
                                           { 2, 6, 10, 14, 3, 7, 11, 15 } };
    const __m512i t01 = _mm512_loadu_si512(tap_idx[0]), t23 = _mm512_loadu_si512(tap_idx[1]);
    size_t m = 0;
    for (; m + 8 <= n; m += 8) {
#if BC_F32
        if (d) {   /* fused: the hints of the row RP_PREFETCH_ROWS ahead, not BC_AHEAD's */
            if (m < pn) {
                RP_PREFETCH_FAST(src + W + 1, W, pfx[m], pfy[m]);
                RP_PREFETCH_FAST(src + W + 1, W, pfx[m + 4], pfy[m + 4]);
            }
        } else
#endif
            RP_BICUBIC_PREFETCH(m, BC_AHEAD);
        const __m512d px = _mm512_loadu_pd(x + m), py = _mm512_loadu_pd(y + m);
        const __mmask8 in = _mm512_cmp_pd_mask(px, lo, _CMP_GE_OQ)
                            & _mm512_cmp_pd_mask(px, hx, _CMP_LE_OQ)
                            & _mm512_cmp_pd_mask(py, lo, _CMP_GE_OQ)
                            & _mm512_cmp_pd_mask(py, hy, _CMP_LE_OQ);
        if (in != 0xff) {
            RP_POINTS_TO(BC_NAME(bicubic_point), m, m + 8)
            continue;
        }
        const __m512d cx = _mm512_add_pd(px, one), cy = _mm512_add_pd(py, one);
        const __m256i fx = _mm512_cvttpd_epi32(cx), fy = _mm512_cvttpd_epi32(cy);
        const __m256i out_ = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpgt_epi32(ione, fx), _mm256_cmpgt_epi32(fx, nx1)),
            _mm256_or_si256(_mm256_cmpgt_epi32(ione, fy), _mm256_cmpgt_epi32(fy, ny1)));
        if (!_mm256_testz_si256(out_, out_)) {
            RP_POINTS_TO(BC_NAME(bicubic_point), m, m + 8)
            continue;
        }
        int64_t off[8];
        const __m512i sy = _mm512_cvtepi32_epi64(_mm256_sub_epi32(fy, ione));
        const __m512i sx = _mm512_cvtepi32_epi64(_mm256_sub_epi32(fx, ione));
        _mm512_storeu_si512(off, _mm512_add_epi64(_mm512_mul_epi32(sy, w64), sx));
        if (bad) {
            int hit = 0;
            for (int q = 0; q < 8; q++)
                hit |= bad[off[q] + W + 1];
            if (hit) {
                RP_POINTS_TO(BC_NAME(bicubic_point), m, m + 8)
                continue;
            }
        }
        /* RP_BSPLINE_WEIGHTS4's arithmetic, eight lanes */
#define RP_BC_WEIGHTS8(t, w)                                                              \
    do {                                                                                  \
        const __m512d u_ = _mm512_sub_pd(one, (t));                                       \
        (w)[1] = _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(_mm512_mul_pd((t), (t)),       \
                                                           _mm512_sub_pd((t), two)), half), \
                               twothirds);                                                \
        (w)[2] = _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(_mm512_mul_pd(u_, u_),         \
                                                           _mm512_sub_pd(u_, two)), half), \
                               twothirds);                                                \
        (w)[0] = _mm512_mul_pd(_mm512_mul_pd(_mm512_mul_pd(u_, u_), u_), sixth);          \
        (w)[3] = _mm512_sub_pd(_mm512_sub_pd(_mm512_sub_pd(one, (w)[0]), (w)[1]), (w)[2]); \
    } while (0)
        __m512d wx[4], wy[4];
        RP_BC_WEIGHTS8(_mm512_sub_pd(cx, _mm512_cvtepi32_pd(fx)), wx);
        RP_BC_WEIGHTS8(_mm512_sub_pd(cy, _mm512_cvtepi32_pd(fy)), wy);
#undef RP_BC_WEIGHTS8
        /* pair p: lane 2p's column sums in the lower half, lane 2p + 1's in the upper */
#if BC_F32
        /* float coefficients: each pair's column sums in float (bicubic_point_f32), lane
         * 2p's four in the lower half of a __m256, lane 2p + 1's in the upper, widened */
        const __m256 wf[4] = { _mm512_cvtpd_ps(wy[0]), _mm512_cvtpd_ps(wy[1]),
                               _mm512_cvtpd_ps(wy[2]), _mm512_cvtpd_ps(wy[3]) };
#define RP_BC_ROW(p, j)                                                                   \
    _mm256_mul_ps(_mm256_permutevar8x32_ps(wf[j], pi_),                                   \
                  _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(b0_ + (j) * W)), \
                                       _mm_loadu_ps(b1_ + (j) * W), 1))
#define RP_BC_PAIR(p, acc)                                                                \
    do {                                                                                  \
        const BC_T *b0_ = src + off[2 * (p)], *b1_ = src + off[2 * (p) + 1];              \
        const __m256i pi_ = _mm256_loadu_si256((const __m256i *)pair_idx[p]);          \
        __m256 s_ = RP_BC_ROW(p, 0);                                                      \
        s_ = _mm256_add_ps(s_, RP_BC_ROW(p, 1));                                          \
        s_ = _mm256_add_ps(s_, RP_BC_ROW(p, 2));                                          \
        (acc) = _mm512_cvtps_pd(_mm256_add_ps(s_, RP_BC_ROW(p, 3)));                      \
    } while (0)
#else
#define RP_BC_ROW(p, j)                                                                   \
    _mm512_mul_pd(_mm512_permutexvar_pd(pi_, wy[j]),                                      \
                  _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(b0_ + (j) * W)), \
                                     _mm256_loadu_pd(b1_ + (j) * W), 1))
#define RP_BC_PAIR(p, acc)                                                                \
    do {                                                                                  \
        const BC_T *b0_ = src + off[2 * (p)], *b1_ = src + off[2 * (p) + 1];            \
        const __m512i pi_ = _mm512_loadu_si512(pair_idx[p]);                              \
        __m512d s_ = RP_BC_ROW(p, 0);                                                     \
        s_ = _mm512_add_pd(s_, RP_BC_ROW(p, 1));                                          \
        s_ = _mm512_add_pd(s_, RP_BC_ROW(p, 2));                                          \
        (acc) = _mm512_add_pd(s_, RP_BC_ROW(p, 3));                                       \
    } while (0)
#endif
        __m512d acc0, acc1, acc2, acc3;
        RP_BC_PAIR(0, acc0);
        RP_BC_PAIR(1, acc1);
        RP_BC_PAIR(2, acc2);
        RP_BC_PAIR(3, acc3);
#undef RP_BC_PAIR
#undef RP_BC_ROW
        /* the column sums transposed: c[i] = tap i of the eight lanes */
        const __m512d p01 = _mm512_permutex2var_pd(acc0, t01, acc1);
        const __m512d q01 = _mm512_permutex2var_pd(acc2, t01, acc3);
        const __m512d p23 = _mm512_permutex2var_pd(acc0, t23, acc1);
        const __m512d q23 = _mm512_permutex2var_pd(acc2, t23, acc3);
        const __m512d c0 = _mm512_shuffle_f64x2(p01, q01, 0x44);
        const __m512d c1 = _mm512_shuffle_f64x2(p01, q01, 0xee);
        const __m512d c2 = _mm512_shuffle_f64x2(p23, q23, 0x44);
        const __m512d c3 = _mm512_shuffle_f64x2(p23, q23, 0xee);
        const __m512d t = _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(wx[0], c0),
                                                      _mm512_mul_pd(wx[1], c1)),
                                        _mm512_add_pd(_mm512_mul_pd(wx[2], c2),
                                                      _mm512_mul_pd(wx[3], c3)));
        rp_put8(out, d, fp, &fin, m, t);
    }
    RP_POINTS_TO(BC_NAME(bicubic_point), m, n)
    return fin;
}

RP_AVX512 static void BC_NAME(sample_bicubic_avx512)(const rp_kernel *k, size_t n,
                                            const double *restrict x,
                                            const double *restrict y, double *restrict out)
{
    BC_NAME(bicubic_avx512_run)(k, n, x, y, out, NULL, NULL, NULL, NULL, 0);
}

#if BC_F32
/* The fused twins of sample_bicubic_avx2 and sample_bicubic_avx512 for float coefficients
 * (struct rp_kernel, ffn): the same groups and arithmetic, each value narrowed to float32
 * as it is stored (rp_put4, rp_put8, rp_put1: kernels_impl.h), so the bits that
 * store_row_f32 (engine/sky/reproject.c) makes of the sampler's row of doubles, without
 * that row and its second pass.  Instead of the prefetch BC_AHEAD positions ahead in the
 * row, one hint a four positions from (pfx, pfy), the row RP_PREFETCH_ROWS ahead: the
 * coefficient line under it (RP_PREFETCH_FAST in the padded array), which the supports
 * of the rows between read.  4096^2 float32 onto a grid rotated by 20 deg, coordinates
 * included, 1 thread, AMD EPYC Zen 4, 5 rounds alternated, medians (bench/kernels
 * bicubic coords): AVX-512 138.0 Mpix/s through the sampler and store_row_f32, 137.6
 * fused with BC_AHEAD's prefetch, 146.5 with it and the hint, 145.8 with the hint alone
 * (this); in one binary, this against the unfused path, AVX-512 147.3 against 138.7,
 * AVX2 124.8 against 114.9. */
#define BC_FUSED(ISA, ATTR)                                                               \
    ATTR static long BC_NAME(BC_CAT(fused_bicubic, ISA))(                                 \
        const rp_kernel *k, size_t n, const double *restrict x, const double *restrict y, \
        float *restrict d, float *restrict fp, const double *restrict pfx,                \
        const double *restrict pfy, size_t pn)                                            \
    {                                                                                     \
        return BC_NAME(BC_CAT(BC_CAT(bicubic, ISA), run))(k, n, x, y, NULL, d, fp, pfx,   \
                                                          pfy, pn);                       \
    }
BC_FUSED(avx2, RP_AVX2)
BC_FUSED(avx512, RP_AVX512)
#undef BC_FUSED
#endif
#endif

#undef BC_NAME
#undef BC_CAT
#undef BC_CAT_
