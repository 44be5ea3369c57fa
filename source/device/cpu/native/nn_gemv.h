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
