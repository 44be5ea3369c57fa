/* A one-row product c (1, n) = a (1, k) @ b (k, n), b row major: the GEMV of a control-flow body's step (a
 * recurrent cell's projections at batch 1). Included once by kernels.c, inlined into its target clones.
 *
 * The linked BLAS packs b for every sgemm call, whatever m is: a (1, 64) @ (64, 192) step took 4 us there
 * and 0.6 us with n = 1 (so about 3.4 us of work and packing for 12k multiply-adds). Here each block of up to
 * NN_GEMV_BLOCK columns of c is summed in registers over the rows of b, read once in order; the products of a
 * column are summed in the order of k (not BLAS's), which the callers' tolerances allow. */

#define NN_GEMV_BLOCK 64
/* at most this many multiply-adds (k * n): larger ones go to the BLAS, whose GEMV blocks for the caches */
#define NN_GEMV_MAX (1 << 15)

NN_INLINE int nn_gemv_fits(int64_t m, int64_t n, int64_t k, int trans_b) {
    return m == 1 && !trans_b && n > 0 && k > 0 && n * k <= NN_GEMV_MAX;
}

NN_INLINE void nn_gemv_f32(const float *a, const float *b, int64_t ldb, float *c, int64_t n, int64_t k) {
    int64_t j0 = 0;
    for (; j0 + NN_GEMV_BLOCK <= n; j0 += NN_GEMV_BLOCK) {
        float acc[NN_GEMV_BLOCK] = {0};
        for (int64_t p = 0; p < k; p++) {
            const float s = a[p];
            const float *row = b + p * ldb + j0;
            for (int j = 0; j < NN_GEMV_BLOCK; j++) acc[j] += s * row[j];
        }
        for (int j = 0; j < NN_GEMV_BLOCK; j++) c[j0 + j] = acc[j];
    }
    if (j0 < n) {
        const int64_t w = n - j0;
        float acc[NN_GEMV_BLOCK] = {0};
        for (int64_t p = 0; p < k; p++) {
            const float s = a[p];
            const float *row = b + p * ldb + j0;
            for (int64_t j = 0; j < w; j++) acc[j] += s * row[j];
        }
        for (int64_t j = 0; j < w; j++) c[j0 + j] = acc[j];
    }
}

/* At most this many rows of a product split by columns run as one BLAS GEMV per row (nn_gemm_task) when
 * nn_gemv_fits does not take them: a decoder step's projection (1, 256) @ (256, 1024) has no rows for
 * sgemm to block over, and sgemm packs the whole column slice of b for its one row (matmul.py's GEMV_ROWS
 * note: 3-4x a GEMV's time on one row, ~1.5x on two). */
#define NN_GEMV_ROWS 2

/* c (m, n) = a (m, k) @ b for m <= NN_GEMV_ROWS: b (k, n) row major, or (n, k) read transposed when
 * trans_b; one GEMV per row, summed in the BLAS's order. */
NN_INLINE void nn_gemv_rows_blas(const float *a, int64_t lda, const float *b, int64_t ldb, int trans_b, float *c,
                                 int64_t ldc, int64_t m, int64_t n, int64_t k) {
    /* the binding checked that every size and leading dimension fits a blasint */
    for (int64_t r = 0; r < m; r++) {
        if (trans_b)
            scipy_cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, 1.0f, b, (blasint)ldb,
                              a + r * lda, 1, 0.0f, c + r * ldc, 1);
        else
            scipy_cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, 1.0f, b, (blasint)ldb,
                              a + r * lda, 1, 0.0f, c + r * ldc, 1);
    }
}

/* A GEMV over a packed copy of a constant b (Gemm(b, bias, act, pack=True), made at prepare for the products
 * of a decoder's one token): b (k, n) in panels of NN_PANEL columns, panel after panel, each panel's k rows of
 * NN_PANEL floats in order (the last panel zero-padded), so a column range reads one contiguous stretch of
 * memory (the row-major b took ldb-strided 64-float pieces; the BLAS GEMV on 1x256 @ 256x1024 reached 13 GB/s
 * from L3 against 44 GB/s packed, one thread, loaded machine). Each panel is summed in four AVX2 registers
 * per parity of p (even and odd rows of b in separate accumulators, added at the end): not the BLAS's order,
 * which the callers' tolerances allow. */
#define NN_PANEL 32

/* pk (ceil(n / NN_PANEL) * k * NN_PANEL floats) = b (k, n) packed; b read transposed ((n, k)) when tb */
static void nn_gemv_pack(const float *b, int64_t ldb, int tb, int64_t k, int64_t n, float *pk) {
    for (int64_t j0 = 0; j0 < n; j0 += NN_PANEL) {
        float *panel = pk + j0 * k;
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < NN_PANEL; j++)
                panel[p * NN_PANEL + j] = j0 + j >= n ? 0.0f : tb ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j];
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define NN_GEMV_SIMD 1

/* acc[0..NN_PANEL) = a (k) @ one panel */
__attribute__((target("avx2,fma"))) static void nn_gemv_panel_avx2(const float *a, const float *w, int64_t k,
                                                                   float *acc) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, d0 = c0, d1 = c0, d2 = c0, d3 = c0;
    int64_t p = 0;
    for (; p + 2 <= k; p += 2) {
        const __m256 s = _mm256_broadcast_ss(a + p), t = _mm256_broadcast_ss(a + p + 1);
        const float *r = w + p * NN_PANEL;
        c0 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r), c0);
        c1 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 8), c1);
        c2 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 16), c2);
        c3 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 24), c3);
        d0 = _mm256_fmadd_ps(t, _mm256_loadu_ps(r + 32), d0);
        d1 = _mm256_fmadd_ps(t, _mm256_loadu_ps(r + 40), d1);
        d2 = _mm256_fmadd_ps(t, _mm256_loadu_ps(r + 48), d2);
        d3 = _mm256_fmadd_ps(t, _mm256_loadu_ps(r + 56), d3);
    }
    if (p < k) {
        const __m256 s = _mm256_broadcast_ss(a + p);
        const float *r = w + p * NN_PANEL;
        c0 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r), c0);
        c1 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 8), c1);
        c2 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 16), c2);
        c3 = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + 24), c3);
    }
    _mm256_storeu_ps(acc, _mm256_add_ps(c0, d0));
    _mm256_storeu_ps(acc + 8, _mm256_add_ps(c1, d1));
    _mm256_storeu_ps(acc + 16, _mm256_add_ps(c2, d2));
    _mm256_storeu_ps(acc + 24, _mm256_add_ps(c3, d3));
}

NN_CPU_HAS2(nn_gemv_simd_ok, "avx2", "fma")
#else
#define NN_GEMV_SIMD 0
#endif

/* acc[0..NN_PANEL) = a (k) @ one panel, in plain C (summed in the order of p) */
NN_INLINE void nn_gemv_panel_c(const float *a, const float *w, int64_t k, float *acc) {
    for (int j = 0; j < NN_PANEL; j++) acc[j] = 0.0f;
    for (int64_t p = 0; p < k; p++) {
        const float s = a[p];
        for (int j = 0; j < NN_PANEL; j++) acc[j] += s * w[p * NN_PANEL + j];
    }
}

/* c[j0..j1) = a (k) @ columns [j0, j1) of the packed b; j0 a multiple of NN_PANEL */
NN_INLINE void nn_gemv_packed_f32(const float *a, const float *pk, int64_t k, float *c, int64_t j0, int64_t j1) {
#if NN_GEMV_SIMD
    const int simd = nn_gemv_simd_ok();
#endif
    float acc[NN_PANEL];
    for (int64_t j = j0; j < j1; j += NN_PANEL) {
        const float *w = pk + j * k;
#if NN_GEMV_SIMD
        if (simd)
            nn_gemv_panel_avx2(a, w, k, acc);
        else
#endif
            nn_gemv_panel_c(a, w, k, acc);
        const int64_t w_cols = (j1 - j < NN_PANEL ? j1 - j : NN_PANEL);
        for (int64_t q = 0; q < w_cols; q++) c[j + q] = acc[q];
    }
}
