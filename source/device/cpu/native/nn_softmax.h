/* Softmax over the last axis, float32, one row at a time in L1 (included once from kernels.c, after nn_expf
 * and the pool).
 *
 * Per row: its maximum, exp(x - max) into y, the sum, y times its reciprocal: three passes over a row in L1
 * instead of numpy's six over a band. A row whose maximum is not finite (NaN, +inf, all -inf) is computed as
 * the reference does (hostkernels/_reduce.py: the maximum taken as 0, libm's expf, each term divided by the
 * sum), so NaN and infinities come out the same. exp of a difference below -87.3 (a -inf mask entry among
 * them) is 0, not nn_expf's clamped 1e-38, so masked entries are exactly 0. */

NN_API NN_CLONES void nn_softmax_f32(const float *x, float *y, int64_t width, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = x + r * width;
        float *restrict yr = y + r * width;
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

typedef struct {
    const float *x;
    float *y;
    int64_t rows, width;
} nn_softmax_args;

static void nn_softmax_task(const void *args, int64_t part, int64_t parts) {
    const nn_softmax_args *a = (const nn_softmax_args *)args;
    int64_t lo, hi;
    nn_split(a->rows, 1, part, parts, &lo, &hi);
    nn_softmax_f32(a->x, a->y, a->width, lo, hi);
}

/* ---- softmax(x, y, parts): over the last axis of x into y (y may be x) */
static PyObject *nn_py_softmax(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "softmax";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t parts;
    if (nn_nargs(nargs, 3, k) || nn_get_parts(args[2], k, &parts)) return NULL;
    int64_t width;
    if (nn_get_rows(&b[0], args[0], k, &width)) goto fail;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1))
        goto fail;
    nn_softmax_args a = {b[0].view.buf, b[1].view.buf, width ? b[0].items / width : 0, width};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_softmax_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}
