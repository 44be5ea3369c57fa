/* Softmax over the last axis (or over a middle axis, by columns: nn_softmax_cols_f32), float32, one row at a time in L1 (included once from kernels.c, after nn_expf
 * and the pool).
 *
 * Per row: its maximum, exp(x - max) into y, the sum, y times its reciprocal: three passes over a row in L1
 * instead of numpy's six over a band. A row whose maximum is not finite (NaN, +inf, all -inf) is computed as
 * the reference does (hostkernels/_reduce.py: the maximum taken as 0, libm's expf, each term divided by the
 * sum), so NaN and infinities come out the same. exp of a difference below -87.3 (a -inf mask entry among
 * them) is 0, not nn_expf's clamped 1e-38, so masked entries are exactly 0. On a CPU with AVX2 and FMA (chosen
 * at run time, as nn_half_simd.h does) a row of 8 or more runs the same three passes in intrinsics
 * (nn_softmax_row_avx2, its exp nn_exp8 of nn_exp_simd.h). */

#if NN_EXP_SIMD
#define NN_SOFTMAX_SIMD 1

NN_INLINE float nn_softmax_hmax(const float *t) {
    float m = t[0];
    for (int j = 1; j < 8; j++) m = NN_MAX(m, t[j]);
    return m;
}

/* One row of at least 8 with AVX2 + FMA: 0 when done, -1 (nothing written) for a row with a NaN or a
 * non-finite maximum, which the caller computes as the reference does. GCC 12 vectorized the scalar loops
 * below (omp simd) to about 1.3 ns an element on a Zen 3 (150-wide rows); these take about 0.75. */
__attribute__((target("avx2,fma"))) static int nn_softmax_row_avx2(const float *xr, float *yr, int64_t width) {
    __m256 top8 = _mm256_loadu_ps(xr), nan8 = _mm256_cmp_ps(top8, top8, _CMP_UNORD_Q);
    int64_t i = 8;
    for (; i + 8 <= width; i += 8) {
        const __m256 v = _mm256_loadu_ps(xr + i);
        top8 = _mm256_max_ps(top8, v);
        nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float t[8];
    _mm256_storeu_ps(t, top8);
    float top = nn_softmax_hmax(t);
    int bad = _mm256_movemask_ps(nan8) != 0;
    for (; i < width; i++) {
        top = NN_MAX(top, xr[i]);
        bad |= xr[i] != xr[i];
    }
    if (bad || !(top > -INFINITY && top < INFINITY)) return -1;
    const __m256 top_v = _mm256_set1_ps(top), lo = _mm256_set1_ps(-87.3f);
    __m256 sum8 = _mm256_setzero_ps();
    for (i = 0; i + 8 <= width; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xr + i), top_v);
        /* below -87.3 (a -inf mask entry among them) exactly 0, as the scalar loop */
        const __m256 e = _mm256_and_ps(nn_exp8(_mm256_max_ps(d, lo)), _mm256_cmp_ps(d, lo, _CMP_GE_OQ));
        _mm256_storeu_ps(yr + i, e);
        sum8 = _mm256_add_ps(sum8, e);
    }
    _mm256_storeu_ps(t, sum8);
    float sum = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < width; i++) {
        const float d = xr[i] - top;
        const float e = d < -87.3f ? 0.0f : nn_expf(d);
        yr[i] = e;
        sum += e;
    }
    const __m256 inv = _mm256_set1_ps(1.0f / sum);      /* sum >= 1: the maximum's own term is exp(0) */
    for (i = 0; i + 8 <= width; i += 8) _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), inv));
    for (; i < width; i++) yr[i] *= 1.0f / sum;
    return 0;
}

/* 1 where the CPU has AVX2 and FMA, checked once */
NN_CPU_HAS2(nn_softmax_simd_ok, "avx2", "fma")
#else
#define NN_SOFTMAX_SIMD 0
#endif

NN_API NN_CLONES void nn_softmax_f32(const float *x, float *y, int64_t width, int64_t r0, int64_t r1) {
#if NN_SOFTMAX_SIMD
    const int simd = width >= 8 && nn_softmax_simd_ok();
#endif
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = x + r * width;
        float *restrict yr = y + r * width;
#if NN_SOFTMAX_SIMD
        if (simd && nn_softmax_row_avx2(xr, yr, width) == 0) continue;
#endif
        float top = -INFINITY;
        int bad = 0;
#pragma omp simd reduction(max : top) reduction(| : bad)
        for (int64_t i = 0; i < width; i++) {
            top = NN_MAX(top, xr[i]);
            bad |= xr[i] != xr[i];
        }
        if (bad || !(top > -INFINITY && top < INFINITY)) {
            float s = 0.0f;
            for (int64_t i = 0; i < width; i++) s += yr[i] = expf(xr[i]);
            for (int64_t i = 0; i < width; i++) yr[i] /= s;
            continue;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < width; i++) {
            const float d = xr[i] - top;
            const float e = d < -87.3f ? 0.0f : nn_expf(d);
            yr[i] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;     /* sum >= 1: the maximum's own term is exp(0) */
#pragma omp simd
        for (int64_t i = 0; i < width; i++) yr[i] *= inv;
    }
}

/* Softmax over the middle axis of x viewed as (outer, n, inner), float32, columns [c0, c1) of one outer
 * block: the column maxima, exp(x - maximum) into y with the column sums, y times their reciprocals, each pass
 * over the n rows of the block vectorized across the contiguous columns (at most NN_SOFTMAX_COLS of them, so
 * the block stays in L1 for n up to a few dozen). A block with a column holding a NaN or a non-finite maximum
 * is computed column by column as nn_softmax_f32 computes a row (such a column as the reference does). y may
 * be x: every pass reads an element before it writes it. */
#define NN_SOFTMAX_COLS 256

NN_API NN_CLONES void nn_softmax_cols_f32(const float *x, float *y, int64_t n, int64_t inner, int64_t c0, int64_t c1) {
    float top[NN_SOFTMAX_COLS], sum[NN_SOFTMAX_COLS];
    const int64_t w = c1 - c0;
    x += c0;
    y += c0;
    int bad = 0;
    for (int64_t c = 0; c < w; c++) {
        top[c] = x[c];
        bad |= x[c] != x[c];
    }
    for (int64_t r = 1; r < n; r++) {
        const float *restrict xr = x + r * inner;
#pragma omp simd reduction(| : bad)
        for (int64_t c = 0; c < w; c++) {
            top[c] = NN_MAX(top[c], xr[c]);
            bad |= xr[c] != xr[c];
        }
    }
    for (int64_t c = 0; c < w; c++) bad |= !(top[c] > -INFINITY && top[c] < INFINITY);
    if (bad) {
        for (int64_t c = 0; c < w; c++) {
            const int odd = !(top[c] > -INFINITY && top[c] < INFINITY) || top[c] != top[c];
            int nan = 0;
            for (int64_t r = 0; r < n; r++) nan |= x[r * inner + c] != x[r * inner + c];
            float s = 0.0f;
            for (int64_t r = 0; r < n; r++) {
                const float v = x[r * inner + c], d = v - top[c];
                s += y[r * inner + c] = odd || nan ? expf(v) : d < -87.3f ? 0.0f : nn_expf(d);
            }
            for (int64_t r = 0; r < n; r++) y[r * inner + c] /= s;
        }
        return;
    }
    for (int64_t c = 0; c < w; c++) sum[c] = 0.0f;
    for (int64_t r = 0; r < n; r++) {
        const float *restrict xr = x + r * inner;
        float *restrict yr = y + r * inner;
#pragma omp simd
        for (int64_t c = 0; c < w; c++) {
            const float d = xr[c] - top[c];
            const float e = d < -87.3f ? 0.0f : nn_expf(d);
            yr[c] = e;
            sum[c] += e;
        }
    }
    for (int64_t c = 0; c < w; c++) sum[c] = 1.0f / sum[c];    /* sum >= 1: the maximum's own term is exp(0) */
    for (int64_t r = 0; r < n; r++) {
        float *restrict yr = y + r * inner;
#pragma omp simd
        for (int64_t c = 0; c < w; c++) yr[c] *= sum[c];
    }
}

typedef struct {
    const float *x;
    float *y;
    int64_t rows, width, inner, chunks;
} nn_softmax_args;

static void nn_softmax_task(const void *args, int64_t part, int64_t parts) {
    const nn_softmax_args *a = (const nn_softmax_args *)args;
    int64_t lo, hi;
    if (a->inner == 1) {
        nn_split(a->rows, 1, part, parts, &lo, &hi);
        nn_softmax_f32(a->x, a->y, a->width, lo, hi);
        return;
    }
    /* units: (outer block, chunk of at most NN_SOFTMAX_COLS columns) */
    nn_split(a->rows * a->chunks, 1, part, parts, &lo, &hi);
    const int64_t block = a->width * a->inner;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t o = u / a->chunks, c0 = (u % a->chunks) * NN_SOFTMAX_COLS;
        nn_softmax_cols_f32(a->x + o * block, a->y + o * block, a->width, a->inner, c0,
                            NN_MIN(a->inner, c0 + NN_SOFTMAX_COLS));
    }
}

/* ---- softmax(x, y, inner, parts): over the last axis of x into y (y may be x) when inner is 1; else over
 * axis -2 of x, whose last axis (of inner elements) is the run of axes after the softmax axis */
static PyObject *nn_py_softmax(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "softmax";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t parts, inner;
    if (nn_nargs(nargs, 4, k) || nn_int(args[2], k, "inner", 1, INT64_MAX, &inner) ||
        nn_get_parts(args[3], k, &parts))
        return NULL;
    int64_t width;
    if (nn_get_rows(&b[0], args[0], k, &width)) goto fail;
    if (inner != 1) {
        if (b[0].view.ndim < 2 || inner != width) {
            nn_value_error(k, "inner", "must be 1 or the last axis of x (of at least two axes)");
            goto fail;
        }
        width = b[0].view.shape[b[0].view.ndim - 2];
    }
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1))
        goto fail;
    nn_softmax_args a = {b[0].view.buf, b[1].view.buf, width ? b[0].items / (width * inner) : 0, width, inner,
                         (inner + NN_SOFTMAX_COLS - 1) / NN_SOFTMAX_COLS};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_softmax_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}
