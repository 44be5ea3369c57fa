/*
 * nn_buffer.h: the one place where nnhal's native kernels check what Python hands them.
 *
 * Every argument array arrives through the buffer protocol (PyObject_GetBuffer with PyBUF_FORMAT and either
 * PyBUF_C_CONTIGUOUS or, for matrix views, PyBUF_STRIDES), so a module needs no numpy headers. nn_get checks
 * None, the element type, contiguity (or a unit last-axis stride and non-negative strides) and writability;
 * nn_need the size against the geometry; nn_disjoint that an output does not overlap an input; nn_int and
 * nn_mul that a size is an int in range and that products do not overflow. Each failure raises TypeError
 * (a wrong kind of object, dtype, or None) or ValueError (layout, size, overlap, range) naming the kernel and
 * the argument, and returns -1; the caller releases what it got with nn_release and returns NULL.
 *
 * Header-only (static functions), so that every C file of the cpu device's native folder uses the same checks.
 */
#ifndef NN_BUFFER_H
#define NN_BUFFER_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>

/* element types: the buffer format's letter (native byte order), or NN_ANY32 for any 4-byte element */
enum { NN_F32 = 'f', NN_F16 = 'e', NN_I32 = 'i', NN_I64 = 'q', NN_I8 = 'b', NN_U8 = 'B', NN_ANY32 = '4' };

/* nn_get flags */
#define NN_OUT 1        /* written by the kernel: the buffer must be writable */
#define NN_NONE_OK 2    /* None is accepted: the view's buf is NULL */
#define NN_STRIDED 4    /* a view whose last axis has unit stride and whose other strides are >= 0 */

typedef struct {
    Py_buffer view;
    int held;           /* view must be released */
    int64_t items;      /* elements (product of the shape) */
    const char *lo;     /* the bytes the view spans: [lo, hi) */
    const char *hi;
} nn_arg;

static int nn_type_error(const char *kernel, const char *name, const char *what) {
    PyErr_Format(PyExc_TypeError, "native kernel %s: argument '%s' %s", kernel, name, what);
    return -1;
}

static int nn_value_error(const char *kernel, const char *name, const char *what) {
    PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' %s", kernel, name, what);
    return -1;
}

static const char *nn_type_name(int type) {
    switch (type) {
    case NN_F32: return "float32";
    case NN_F16: return "float16";
    case NN_I32: return "int32";
    case NN_I64: return "int64";
    case NN_I8: return "int8";
    case NN_U8: return "uint8";
    default: return "a 4-byte type";
    }
}

/* Whether a buffer format (struct module syntax, one element) is ``type`` in native byte order. */
static int nn_format_is(const char *format, Py_ssize_t itemsize, int type) {
    if (format == NULL) format = "B";
    if (*format == '@' || *format == '=' || (*format == '<' && PY_LITTLE_ENDIAN) || (*format == '>' && PY_BIG_ENDIAN))
        format++;
    if (format[0] == '\0' || format[1] != '\0') return 0;
    const char f = format[0];
    switch (type) {
    case NN_F32: return f == 'f' && itemsize == 4;
    case NN_F16: return f == 'e' && itemsize == 2;
    case NN_I32: return (f == 'i' || f == 'l') && itemsize == 4;
    case NN_I64: return (f == 'l' || f == 'q') && itemsize == 8;
    case NN_I8: return f == 'b' && itemsize == 1;
    case NN_U8: return f == 'B' && itemsize == 1;
    default: return itemsize == 4 && f != 'x' && f != '?';
    }
}

/* Take ``obj``'s buffer into ``a`` (see the flags), checked; -1 with an exception set on failure. */
static int nn_get(nn_arg *a, PyObject *obj, const char *kernel, const char *name, int type, int flags) {
    a->held = 0;
    a->items = 0;
    a->lo = a->hi = NULL;
    a->view.buf = NULL;
    if (obj == Py_None) {
        if (flags & NN_NONE_OK) return 0;
        return nn_type_error(kernel, name, "must be an array, not None");
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: argument '%s' must be an array (buffer protocol), not %.100s",
                     kernel, name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int request = PyBUF_FORMAT | ((flags & NN_STRIDED) ? PyBUF_STRIDES : PyBUF_C_CONTIGUOUS);
    if (flags & NN_OUT) request |= PyBUF_WRITABLE;
    if (PyObject_GetBuffer(obj, &a->view, request) != 0) {
        PyErr_Clear();
        /* ask again without the demands to say which one failed */
        Py_buffer any;
        if (PyObject_GetBuffer(obj, &any, PyBUF_RECORDS_RO) != 0) {
            PyErr_Clear();
            return nn_type_error(kernel, name, "does not export a typed buffer");
        }
        const int readonly = any.readonly;
        PyBuffer_Release(&any);
        if ((flags & NN_OUT) && readonly) return nn_value_error(kernel, name, "must be writable");
        return nn_value_error(kernel, name, (flags & NN_STRIDED) ? "must be a strided array" : "must be C-contiguous");
    }
    a->held = 1;
    if (!nn_format_is(a->view.format, a->view.itemsize, type)) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: argument '%s' must be %s (got format '%s', %zd bytes)",
                     kernel, name, nn_type_name(type), a->view.format ? a->view.format : "B", a->view.itemsize);
        return -1;
    }
    a->items = a->view.itemsize ? a->view.len / a->view.itemsize : 0;
    a->lo = (const char *)a->view.buf;
    a->hi = a->lo + a->view.len;
    if (flags & NN_STRIDED) {
        Py_ssize_t span = a->view.itemsize;
        for (int d = 0; d < a->view.ndim; d++) {
            const Py_ssize_t n = a->view.shape[d], s = a->view.strides[d];
            if (n == 0) {
                span = 0;
                break;
            }
            if (s < 0) return nn_value_error(kernel, name, "must not have negative strides");
            if (d == a->view.ndim - 1 && n > 1 && s != a->view.itemsize)
                return nn_value_error(kernel, name, "must have a unit stride along its last axis");
            span += (n - 1) * s;
        }
        a->hi = a->lo + span;
    }
    return 0;
}

/* nn_get for an array of ``rows`` pixels of ``cols`` channels each (an NHWC output), into *ld its pixel stride in
 * elements: the channels have a unit stride and every axis but the last collapses into one of evenly spaced
 * pixels ``ld`` >= ``cols`` elements apart (C-contiguous: ld == cols; a channel slice of a wider channels-last
 * tensor: its total channels), so that no two pixels overlap. Anything else is refused like nn_get. */
static int nn_pixels(nn_arg *a, const char *kernel, const char *name, int64_t rows, int64_t cols, int64_t *ld);

static int nn_get_pixels(nn_arg *a, PyObject *obj, const char *kernel, const char *name, int type, int flags,
                         int64_t rows, int64_t cols, int64_t *ld) {
    if (nn_get(a, obj, kernel, name, type, flags | NN_STRIDED)) return -1;
    return nn_pixels(a, kernel, name, rows, cols, ld);
}

/* nn_get_pixels' check of an argument already taken with NN_STRIDED (when its geometry comes from its own shape) */
static int nn_pixels(nn_arg *a, const char *kernel, const char *name, int64_t rows, int64_t cols, int64_t *ld) {
    *ld = cols;
    if (a->view.buf == NULL) return 0;
    const int nd = a->view.ndim;
    const Py_ssize_t item = a->view.itemsize;
    if (nd < 1 || a->view.shape[nd - 1] != cols || a->items != rows * cols) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' must hold %lld pixels of %lld channels",
                     kernel, name, (long long)rows, (long long)cols);
        return -1;
    }
    if (a->items == 0) return 0;
    Py_ssize_t step = 0, expect = 0;    /* the pixel stride in bytes, the stride the next outer axis needs */
    for (int d = nd - 2; d >= 0; d--) {
        const Py_ssize_t n = a->view.shape[d], s = a->view.strides[d];
        if (n == 1) continue;
        if (step == 0) step = expect = s;
        if (s != expect) return nn_value_error(kernel, name, "must have evenly spaced pixels (its axes but the last "
                                               "collapse into one)");
        expect = s * n;
    }
    if (step == 0) return 0;            /* one pixel */
    if (step % item != 0 || step / item < cols)
        return nn_value_error(kernel, name, "must have pixels at least its channels apart (no overlap)");
    *ld = step / item;
    return 0;
}

/* ``a`` has at least ``items`` elements (items < 0: the geometry was not valid); -1 otherwise. */
static int nn_need(const nn_arg *a, const char *kernel, const char *name, int64_t items) {
    if (a->view.buf == NULL) return 0;
    if (items < 0) return nn_value_error(kernel, name, "has a negative size in its geometry");
    if (a->items < items) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' has %lld elements, the geometry needs %lld",
                     kernel, name, (long long)a->items, (long long)items);
        return -1;
    }
    return 0;
}

/* ``a`` has ``ndim`` axes; -1 otherwise. */
static int nn_ndim(const nn_arg *a, const char *kernel, const char *name, int ndim) {
    if (a->view.buf != NULL && a->view.ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' must have %d axes, not %d", kernel, name,
                     ndim, a->view.ndim);
        return -1;
    }
    return 0;
}

/* Output ``out`` and input ``in`` share no byte, or (same_ok) are exactly the same memory (in place). */
static int nn_disjoint(const nn_arg *out, const nn_arg *in, const char *kernel, const char *out_name,
                       const char *in_name, int same_ok) {
    if (out->view.buf == NULL || in->view.buf == NULL || out->hi <= in->lo || in->hi <= out->lo) return 0;
    if (out->hi == out->lo || in->hi == in->lo) return 0;
    if (same_ok && out->lo == in->lo && out->hi == in->hi) return 0;
    PyErr_Format(PyExc_ValueError, "native kernel %s: output '%s' overlaps input '%s'%s", kernel, out_name, in_name,
                 same_ok ? " (only the very same array may be both)" : "");
    return -1;
}

/* A Python int in [lo, hi] into *out; -1 otherwise (TypeError for a non-int, ValueError out of range). */
static int nn_int(PyObject *obj, const char *kernel, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    if (obj == NULL || !PyLong_Check(obj)) return nn_type_error(kernel, name, "must be an int");
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' must be in [%lld, %lld]", kernel, name,
                     (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A tuple of ``n`` ints, each >= lo (geometry), into out; -1 otherwise. */
static int nn_ints(PyObject *obj, const char *kernel, const char *name, Py_ssize_t n, int64_t lo, int64_t *out) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != n) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: argument '%s' must be a tuple of %zd ints", kernel, name, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (nn_int(PyTuple_GET_ITEM(obj, i), kernel, name, lo, INT32_MAX, &out[i]) != 0) return -1;
    return 0;
}

/* The product of ``n`` non-negative sizes, or -1 when it overflows int64 (nn_need then refuses it). */
static int64_t nn_mul(int n, const int64_t *sizes) {
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (sizes[i] < 0 || __builtin_mul_overflow(p, sizes[i], &p)) return -1;
    return p;
}

static void nn_release(nn_arg *args, int n) {
    for (int i = 0; i < n; i++)
        if (args[i].held) {
            PyBuffer_Release(&args[i].view);
            args[i].held = 0;
        }
}

/* A binding's return: its arguments released, then None (ok) or NULL (the exception set). */
static PyObject *nn_finish(nn_arg *args, int n, int ok) {
    nn_release(args, n);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* The argument count of a METH_FASTCALL function; -1 otherwise. */
static int nn_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *kernel) {
    if (nargs == want) return 0;
    PyErr_Format(PyExc_TypeError, "native kernel %s takes %zd arguments (%zd given)", kernel, want, nargs);
    return -1;
}

#endif
