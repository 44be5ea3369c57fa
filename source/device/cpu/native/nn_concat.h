/*
 * nn_concat.h: copy_rows, the row copy of Concat and Split along an inner axis.
 *
 * A Concat along axis k of C-contiguous tensors is, per input, a copy of ``rows`` rows (the product of the axes
 * before k) of ``width`` bytes (the input's extent from axis k on) into the output's rows of ``y_stride`` bytes at
 * byte ``y_offset``; a Split is the same copy the other way (rows of the input at ``x_offset`` into an output's
 * packed rows). In NHWC a channel Concat or Split has one row per pixel and rows of a few dozen bytes, where
 * numpy's strided copyto runs an inner loop per pixel. Bytes, not elements, so every dtype (float16 storage
 * included) takes the same path: the caller passes uint8 views.
 *
 * Included once from kernels.c, after the thread pool (nn_pool_run) and nn_buffer.h.
 */
#ifndef NN_CONCAT_H
#define NN_CONCAT_H

typedef struct {
    const uint8_t *x;
    uint8_t *y;
    int64_t rows, width, x_stride, x_offset, y_stride, y_offset;
} nn_rows_args;

static void nn_rows_task(const void *args, int64_t part, int64_t parts) {
    const nn_rows_args *t = args;
    const int64_t r0 = t->rows * part / parts, r1 = t->rows * (part + 1) / parts;
    const uint8_t *x = t->x + t->x_offset;
    uint8_t *y = t->y + t->y_offset;
    if (t->width == t->x_stride && t->width == t->y_stride) {     /* both packed: one block */
        memcpy(y + r0 * t->width, x + r0 * t->width, (size_t)((r1 - r0) * t->width));
        return;
    }
    for (int64_t r = r0; r < r1; r++) memcpy(y + r * t->y_stride, x + r * t->x_stride, (size_t)t->width);
}

/* The rows of one side: stride >= width and offset + width <= stride; -1 otherwise. */
static int nn_rows_side(const char *k, const char *name, int64_t width, int64_t stride, int64_t offset) {
    if (width > stride || offset > stride - width)
        return nn_value_error(k, name, "plus width must not exceed the row stride");
    return 0;
}

/* ---- copy_rows(x, y, rows, width, x_stride, x_offset, y_stride, y_offset, parts):
 * y[r * y_stride + y_offset + j] = x[r * x_stride + x_offset + j] for r < rows, j < width; bytes: x and y are
 * uint8 views, both C-contiguous, not overlapping, each at least as long as its last row's end */
static PyObject *nn_py_copy_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "copy_rows";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t rows, width, xs, xo, ys, yo, parts;
    if (nn_nargs(nargs, 9, k) || nn_int(args[2], k, "rows", 0, INT64_MAX, &rows) ||
        nn_int(args[3], k, "width", 0, INT64_MAX, &width) || nn_int(args[4], k, "x_stride", 0, INT64_MAX, &xs) ||
        nn_int(args[5], k, "x_offset", 0, INT64_MAX, &xo) || nn_int(args[6], k, "y_stride", 0, INT64_MAX, &ys) ||
        nn_int(args[7], k, "y_offset", 0, INT64_MAX, &yo) || nn_get_parts(args[8], k, &parts) ||
        nn_rows_side(k, "x_offset", width, xs, xo) || nn_rows_side(k, "y_offset", width, ys, yo))
        return NULL;
    /* each side needs only the bytes its rows reach: the last row may end short of a full stride (a channel
     * slice of a wider channels-last tensor, read from its first element: Split reading a Concat's part) */
    const int64_t xn = rows ? (rows - 1) * xs + xo + width : 0, yn = rows ? (rows - 1) * ys + yo + width : 0;
    if (nn_get(&b[0], args[0], k, "x", NN_U8, 0) || nn_need(&b[0], k, "x", xn) ||
        nn_get(&b[1], args[1], k, "y", NN_U8, NN_OUT) || nn_need(&b[1], k, "y", yn) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    if (rows > 0 && width > 0) {
        nn_rows_args t = {b[0].view.buf, b[1].view.buf, rows, width, xs, xo, ys, yo};
        if (parts > rows) parts = rows;
        Py_BEGIN_ALLOW_THREADS
        nn_pool_run(nn_rows_task, &t, parts);
        Py_END_ALLOW_THREADS
    }
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

#endif
