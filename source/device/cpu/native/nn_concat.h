/*
 * nn_concat.h: concat_rows, the copy of one Concat input into its slice of the output.
 *
 * A Concat along axis k of C-contiguous tensors is, per input, a copy of ``rows`` rows (the product of the axes
 * before k) of ``width`` bytes (the input's extent from axis k on) into rows of ``stride`` bytes (the output's)
 * at byte ``offset``. In NHWC a channel Concat has one row per pixel and rows of a few dozen bytes, where numpy's
 * strided copyto runs an inner loop per pixel (DenseNet's channel Concats took 21% of its run that way). Bytes,
 * not elements, so every dtype (float16 storage included) takes the same path: the caller passes uint8 views.
 *
 * Included once from kernels.c, after the thread pool (nn_pool_run) and nn_buffer.h.
 */
#ifndef NN_CONCAT_H
#define NN_CONCAT_H

typedef struct {
    const uint8_t *x;
    uint8_t *y;
    int64_t rows, width, stride, offset;
} nn_concat_args;

static void nn_concat_task(const void *args, int64_t part, int64_t parts) {
    const nn_concat_args *t = args;
    const int64_t r0 = t->rows * part / parts, r1 = t->rows * (part + 1) / parts;
    if (t->width == t->stride) {        /* the whole output is this input: one block */
        memcpy(t->y + r0 * t->stride, t->x + r0 * t->width, (size_t)((r1 - r0) * t->width));
        return;
    }
    for (int64_t r = r0; r < r1; r++) memcpy(t->y + r * t->stride + t->offset, t->x + r * t->width, (size_t)t->width);
}

/* ---- concat_rows(x, y, rows, width, stride, offset, parts): y[r * stride + offset + j] = x[r * width + j] for
 * r < rows, j < width (bytes: x and y are uint8 views, both C-contiguous, not overlapping), offset + width <= stride */
static PyObject *nn_py_concat_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "concat_rows";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t rows, width, stride, offset, parts;
    if (nn_nargs(nargs, 7, k) || nn_int(args[2], k, "rows", 0, INT64_MAX, &rows) ||
        nn_int(args[3], k, "width", 0, INT64_MAX, &width) || nn_int(args[4], k, "stride", 0, INT64_MAX, &stride) ||
        nn_int(args[5], k, "offset", 0, INT64_MAX, &offset) || nn_get_parts(args[6], k, &parts))
        return NULL;
    if (width > stride || offset > stride - width) {
        nn_value_error(k, "offset", "plus width must not exceed stride");
        return NULL;
    }
    const int64_t xs[2] = {rows, width}, ys[2] = {rows, stride};
    if (nn_get(&b[0], args[0], k, "x", NN_U8, 0) || nn_need(&b[0], k, "x", nn_mul(2, xs)) ||
        nn_get(&b[1], args[1], k, "y", NN_U8, NN_OUT) || nn_need(&b[1], k, "y", nn_mul(2, ys)) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    if (rows > 0 && width > 0) {
        nn_concat_args t = {b[0].view.buf, b[1].view.buf, rows, width, stride, offset};
        if (parts > rows) parts = rows;
        Py_BEGIN_ALLOW_THREADS
        nn_pool_run(nn_concat_task, &t, parts);
        Py_END_ALLOW_THREADS
    }
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

#endif
