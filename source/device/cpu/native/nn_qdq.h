/*
 * nn_qdq.h: QuantizeLinear and DequantizeLinear with one scale and zero point for the whole tensor, float32
 * <-> uint8 / int8, in one pass (included once from kernels.c; the arguments are checked by nn_buffer.h).
 *
 * The arithmetic is the ONNX definition as nnhal's numpy kernels (hostkernels/op_quantize_linear.py,
 * op_dequantize_linear.py) compute it, so both give the same bits: quantize divides in float32 (not a product
 * with the reciprocal), rounds half to even (nearbyintf in the default rounding mode), adds the zero point and
 * saturates; dequantize subtracts the zero point and multiplies by the scale in float32 (x - zero is exact).
 * Static QDQ models run one of these around every quantized tensor that a float op reads or writes.
 */
#ifndef NN_QDQ_H
#define NN_QDQ_H

#include <math.h>
#include <stdint.h>

#include "nn_buffer.h"

/* y[i] = saturate(round_half_even(x[i] / scale) + zero) into [lo, hi]; NaN goes to lo (numpy leaves it
   undefined). */
NN_API NN_CLONES void nn_quantize_linear(const float *x, void *y, int64_t n, float scale, float zero, float lo,
                                         float hi, int is_signed) {
    for (int64_t i = 0; i < n; i++) {
        float q = nearbyintf(x[i] / scale) + zero;
        q = q > lo ? q : lo;    /* also NaN -> lo */
        q = q < hi ? q : hi;
        if (is_signed) ((int8_t *)y)[i] = (int8_t)q;
        else ((uint8_t *)y)[i] = (uint8_t)q;
    }
}

/* y[i] = (x[i] - zero) * scale in float32 */
NN_API NN_CLONES void nn_dequantize_linear(const void *x, float *y, int64_t n, float scale, float zero,
                                           int is_signed) {
    if (is_signed)
        for (int64_t i = 0; i < n; i++) y[i] = ((float)((const int8_t *)x)[i] - zero) * scale;
    else
        for (int64_t i = 0; i < n; i++) y[i] = ((float)((const uint8_t *)x)[i] - zero) * scale;
}

/* The quantized side's type and range: NN_U8 or NN_I8 as the argument's format says; -1 with TypeError else. */
static int nn_qdq_type(PyObject *obj, const char *kernel, const char *name) {
    Py_buffer view;
    if (obj == Py_None || !PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return nn_type_error(kernel, name, "must be a uint8 or int8 array");
    }
    const int type = nn_format_is(view.format, view.itemsize, NN_I8) ? NN_I8
                     : nn_format_is(view.format, view.itemsize, NN_U8) ? NN_U8 : -1;
    PyBuffer_Release(&view);
    return type < 0 ? nn_type_error(kernel, name, "must be a uint8 or int8 array") : type;
}

/* scale: a positive finite float; zero: an int in the quantized type's range */
static int nn_qdq_params(PyObject *scale_obj, PyObject *zero_obj, const char *kernel, int type, float *scale,
                         float *zero) {
    const double s = PyFloat_AsDouble(scale_obj);
    if (s == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return nn_type_error(kernel, "scale", "must be a float");
    }
    if (!(s > 0.0) || !isfinite((float)s)) return nn_value_error(kernel, "scale", "must be positive and finite");
    int64_t z;
    if (nn_int(zero_obj, kernel, "zero", type == NN_I8 ? -128 : 0, type == NN_I8 ? 127 : 255, &z)) return -1;
    *scale = (float)s;
    *zero = (float)z;
    return 0;
}

/* ---- quantize_linear(x, y, scale, zero): y (uint8 / int8) = QuantizeLinear(x float32), same element count */
static PyObject *nn_py_quantize_linear(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "quantize_linear";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    float scale, zero;
    if (nn_nargs(nargs, 4, k)) return NULL;
    const int type = nn_qdq_type(args[1], k, "y");
    if (type < 0 || nn_qdq_params(args[2], args[3], k, type, &scale, &zero)) return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_get(&b[1], args[1], k, "y", type, NN_OUT)
        || nn_need(&b[1], k, "y", b[0].items) || nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    nn_quantize_linear(b[0].view.buf, b[1].view.buf, b[0].items, scale, zero, type == NN_I8 ? -128.0f : 0.0f,
                       type == NN_I8 ? 127.0f : 255.0f, type == NN_I8);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- dequantize_linear(x, y, scale, zero): y float32 = DequantizeLinear(x uint8 / int8), same element count */
static PyObject *nn_py_dequantize_linear(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "dequantize_linear";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    float scale, zero;
    if (nn_nargs(nargs, 4, k)) return NULL;
    const int type = nn_qdq_type(args[0], k, "x");
    if (type < 0 || nn_qdq_params(args[2], args[3], k, type, &scale, &zero)) return NULL;
    if (nn_get(&b[0], args[0], k, "x", type, 0) || nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT)
        || nn_need(&b[1], k, "y", b[0].items) || nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    nn_dequantize_linear(b[0].view.buf, b[1].view.buf, b[0].items, scale, zero, type == NN_I8);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

#endif
