/*
 * nn_steps.h: the step program, a prepared run of small element-wise float32 steps executed by one call.
 *
 * The CPU plan (device/cpu/steps.py) turns each run of consecutive plan steps that this program supports into
 * one Program, made once at prepare, and calls Program.run(arena, arrays) once per run instead of one numpy
 * call per node. Each node stays a step of its own (nothing is fused): the loop below reads the step's record,
 * resolves its tensors and runs its element loop, so the per-node cost is a few nanoseconds of dispatch.
 *
 * Tensors are referenced through a table made at construction: an arena tensor (a byte offset into the run's
 * arena, a uint8 buffer: the plan's per-run Buffers), a constant (a float32 array the Program holds for its
 * lifetime) or a dynamic tensor (an array of the run's tuple: graph inputs, other kernels' results, outputs
 * allocated per run). Every buffer goes through nn_buffer.h: the arena and the dynamic arrays on each run
 * (dtype, contiguity, writability of those written; a dynamic array holds exactly its tensor's elements, the
 * arena at least its bytes), constants once. A written dynamic array must not
 * overlap the arena or another dynamic array; and the overlap of each step's output with its inputs is checked
 * on each run from the resolved addresses: an input is either disjoint from the output or, for an operand of
 * the output's size, the very same memory (in place).
 *
 * Broadcasting: an operand of a binary step has ``count`` elements repeated ``inner`` times each and the whole
 * repeated as often as it fits (index i reads element (i / inner) % count): the same shape (count = n,
 * inner = 1), a scalar (count = 1, inner = n), a suffix such as the last axis (inner = 1) or a middle block such
 * as the channels of NCHW (inner = H * W). The arithmetic is plain IEEE float32, the same operations numpy does,
 * so Add, Sub, Mul, Div, Neg, Abs, Sqrt, Relu and Clip are bit-identical to numpy; Exp and Tanh use the C
 * library's expf and tanhf (within 2 ulp of numpy's), Sigmoid-like activations the Act kernels' nn_apply.
 *
 * Included once by kernels.c, after nn_act, nn_apply and the Act type.
 */
#ifndef NN_STEPS_H
#define NN_STEPS_H

/* opcodes: the same numbers as OPS in device/cpu/steps.py */
enum {
    NN_OP_ADD = 0, NN_OP_SUB = 1, NN_OP_MUL = 2, NN_OP_DIV = 3,             /* binary */
    NN_OP_NEG = 4, NN_OP_ABS = 5, NN_OP_SQRT = 6, NN_OP_EXP = 7, NN_OP_TANH = 8,
    NN_OP_RELU = 9,      /* numpy's maximum(x, 0): NaN stays NaN, -0 becomes +0 */
    NN_OP_CLIP = 10,     /* numpy's minimum(maximum(x, lo), hi) with the Act's lo / hi: NaN propagates */
    NN_OP_ACT = 11,      /* the Act's activation as the Act kernels compute it (nn_apply) */
    NN_OP_COPY = 12,
    NN_OP_COUNT = 13,
};
#define NN_OP_BINARY(op) ((op) <= NN_OP_DIV)

enum { NN_REF_ARENA = 0, NN_REF_CONST = 1, NN_REF_DYN = 2 };

/* a step below this much work in all runs with the GIL held (releasing it costs more than the work) */
#define NN_STEPS_NOGIL_WORK 16384

typedef struct {
    int32_t kind;           /* NN_REF_* */
    int64_t where;          /* arena byte offset, constant index or index into the run's arrays */
    int64_t items;          /* float32 elements */
    int written;            /* some step writes it */
} nn_ref;

typedef struct {
    int32_t op;
    int32_t y, a, b;        /* tensor table indices (b = -1: unary) */
    int64_t n;              /* output elements */
    int64_t a_count, a_inner, b_count, b_inner;   /* broadcast of a and b (see above) */
    nn_act act;             /* NN_OP_CLIP's bounds, NN_OP_ACT's activation, or a binary step's activation */
} nn_step;

typedef struct {
    PyObject_HEAD
    int64_t nsteps, ntensors, nconst, ndyn, arena_bytes, work;
    nn_step *steps;
    nn_ref *refs;
    nn_arg *consts;         /* held for the Program's lifetime */
    const char **dyn_role;  /* per dynamic array: "arrays[i]" names for the errors */
    char *names;            /* storage of those names */
    int *dyn_written;
    int64_t *dyn_items;
} nn_program_object;

NN_INLINE float nn_relu1(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
NN_INLINE float nn_max_np(float x, float lo) { return (x > lo || x != x) ? x : lo; }
NN_INLINE float nn_min_np(float x, float hi) { return (x < hi || x != x) ? x : hi; }

/* y[i] = a[i] op b[i] over len elements; sa / sb: 0 = the operand is one value broadcast (read a[0]) */
#define NN_BIN_LOOP(EXPR)                                                                        \
    do {                                                                                         \
        if (sa && sb) {                                                                          \
            _Pragma("omp simd") for (int64_t i = 0; i < len; i++) { const float x = a[i], z = b[i]; y[i] = (EXPR); } \
        } else if (sa) {                                                                         \
            const float z = b[0];                                                                \
            _Pragma("omp simd") for (int64_t i = 0; i < len; i++) { const float x = a[i]; y[i] = (EXPR); } \
        } else {                                                                                 \
            const float x = a[0];                                                                \
            _Pragma("omp simd") for (int64_t i = 0; i < len; i++) { const float z = b[i]; y[i] = (EXPR); } \
        }                                                                                        \
    } while (0)

NN_INLINE void nn_binary_run(int32_t op, float *y, const float *a, const float *b, int64_t len, int sa, int sb) {
    switch (op) {
    case NN_OP_ADD: NN_BIN_LOOP(x + z); break;
    case NN_OP_SUB: NN_BIN_LOOP(x - z); break;
    case NN_OP_MUL: NN_BIN_LOOP(x * z); break;
    default: NN_BIN_LOOP(x / z); break;
    }
}

/* One binary step: runs of the output over which each operand is either contiguous or one value. */
NN_INLINE void nn_binary_step(const nn_step *s, float *y, const float *a, const float *b) {
    const int64_t n = s->n;
    const int a_full = s->a_count == n, b_full = s->b_count == n;
    if (a_full && b_full) {
        nn_binary_run(s->op, y, a, b, n, 1, 1);
        return;
    }
    /* the broadcast operand (one of them; the other is full or broadcast the same way) sets the run length */
    const int64_t ac = s->a_count, ai = s->a_inner, bc = s->b_count, bi = s->b_inner;
    const int64_t run = a_full ? (bi > 1 ? bi : bc) : (ai > 1 ? ai : ac);
    for (int64_t lo = 0; lo < n; lo += run) {
        const int64_t len = n - lo < run ? n - lo : run;
        /* an operand is contiguous over the run when full or when its inner is 1 (a suffix block) */
        const int sa = a_full || ai == 1, sb = b_full || bi == 1;
        const float *ap = a_full ? a + lo : (ai == 1 ? a : a + (lo / ai) % ac);
        const float *bp = b_full ? b + lo : (bi == 1 ? b : b + (lo / bi) % bc);
        nn_binary_run(s->op, y + lo, ap, bp, len, sa, sb);
    }
}

NN_INLINE void nn_unary_step(const nn_step *s, float *y, const float *x) {
    const int64_t n = s->n;
    const float lo = s->act.lo, hi = s->act.hi;
    switch (s->op) {
    case NN_OP_NEG:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = -x[i];
        break;
    case NN_OP_ABS:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
        break;
    case NN_OP_SQRT:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
        break;
    case NN_OP_EXP:
        for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
        break;
    case NN_OP_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
        break;
    case NN_OP_RELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = nn_relu1(x[i]);
        break;
    case NN_OP_CLIP:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = nn_min_np(nn_max_np(x[i], lo), hi);
        break;
    case NN_OP_ACT:
        if (x != y) memcpy(y, x, (size_t)n * sizeof(float));
        nn_apply(y, n, &s->act);
        break;
    default:    /* NN_OP_COPY */
        if (x != y) memcpy(y, x, (size_t)n * sizeof(float));
        break;
    }
}

/* Every step, in order, over the resolved tensor addresses. */
NN_API NN_CLONES void nn_steps_run(const nn_step *steps, int64_t nsteps, float *const *ptr) {
    for (int64_t k = 0; k < nsteps; k++) {
        const nn_step *s = &steps[k];
        float *y = ptr[s->y];
        if (NN_OP_BINARY(s->op)) {
            nn_binary_step(s, y, ptr[s->a], ptr[s->b]);
            if (s->act.kind != NN_ACT_NONE) nn_apply(y, s->n, &s->act);
        } else {
            nn_unary_step(s, y, ptr[s->a]);
        }
    }
}

static PyTypeObject nn_program_type;

static void nn_program_dealloc(nn_program_object *self) {
    if (self->consts != NULL) nn_release(self->consts, (int)self->nconst);
    PyMem_Free(self->consts);
    PyMem_Free(self->steps);
    PyMem_Free(self->refs);
    PyMem_Free(self->dyn_role);
    PyMem_Free(self->names);
    PyMem_Free(self->dyn_written);
    PyMem_Free(self->dyn_items);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A tuple of ``n`` ints (n < 0: any length >= 1) from a table entry; -1 with an exception otherwise. */
static int nn_entry(PyObject *obj, const char *k, const char *name, Py_ssize_t n, int64_t *out) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != n) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: each entry of '%s' must be a tuple of %zd items", k, name, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (nn_int(PyTuple_GET_ITEM(obj, i), k, name, -1, INT64_MAX / 8, &out[i]) != 0) return -1;
    return 0;
}

/* An operand's broadcast (count, inner) against n output elements: count * inner divides n (n = 0: any). */
static int nn_check_operand(int64_t n, int64_t items, int64_t count, int64_t inner, const char *k) {
    int64_t block;
    if (count < 0 || inner < 0 || count > items || __builtin_mul_overflow(count, inner, &block)
        || (n > 0 && (count < 1 || inner < 1 || block > n || n % block != 0)))
        return nn_value_error(k, "steps", "has an operand whose broadcast does not fit the output");
    return 0;
}

/* Program(tensors, steps, constants): tensors a tuple of (kind, where, items); steps a tuple of (op, y, a, b,
 * a_count, a_inner, b_count, b_inner, act) with act an Act or None; constants a tuple of float32 arrays. */
static PyObject *nn_program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *k = "Program";
    PyObject *tensors, *steps, *consts;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "native kernel Program takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO:Program", &tensors, &steps, &consts)) return NULL;
    if (!PyTuple_Check(tensors) || !PyTuple_Check(steps) || !PyTuple_Check(consts)) {
        nn_type_error(k, "tensors, steps, constants", "must be tuples");
        return NULL;
    }
    nn_program_object *self = (nn_program_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ntensors = PyTuple_GET_SIZE(tensors);
    self->nsteps = PyTuple_GET_SIZE(steps);
    self->nconst = PyTuple_GET_SIZE(consts);
    self->refs = PyMem_Calloc((size_t)self->ntensors + 1, sizeof(nn_ref));
    self->steps = PyMem_Calloc((size_t)self->nsteps + 1, sizeof(nn_step));
    self->consts = PyMem_Calloc((size_t)self->nconst + 1, sizeof(nn_arg));
    if (self->refs == NULL || self->steps == NULL || self->consts == NULL) goto nomem;
    for (int64_t c = 0; c < self->nconst; c++) {
        nn_arg *a = &self->consts[c];
        if (nn_get(a, PyTuple_GET_ITEM(consts, c), k, "constants", NN_F32, 0) != 0) goto fail;
    }
    int64_t ndyn = 0;
    for (int64_t t = 0; t < self->ntensors; t++) {
        int64_t e[3];
        if (nn_entry(PyTuple_GET_ITEM(tensors, t), k, "tensors", 3, e) != 0) goto fail;
        nn_ref *r = &self->refs[t];
        r->kind = (int32_t)e[0];
        r->where = e[1];
        r->items = e[2];
        if (r->items < 0 || r->where < 0) {
            nn_value_error(k, "tensors", "has a negative offset, index or size");
            goto fail;
        }
        if (r->kind == NN_REF_ARENA) {
            int64_t end;
            if (r->where % 4 != 0 || __builtin_mul_overflow(r->items, (int64_t)4, &end)
                || __builtin_add_overflow(end, r->where, &end)) {
                nn_value_error(k, "tensors", "has a misaligned or overflowing arena tensor");
                goto fail;
            }
            if (end > self->arena_bytes) self->arena_bytes = end;
        } else if (r->kind == NN_REF_CONST) {
            if (r->where >= self->nconst || nn_need(&self->consts[r->where], k, "constants", r->items) != 0) {
                if (!PyErr_Occurred()) nn_value_error(k, "tensors", "names a constant that is not there");
                goto fail;
            }
        } else if (r->kind == NN_REF_DYN) {
            if (r->where + 1 > ndyn) ndyn = r->where + 1;
        } else {
            nn_value_error(k, "tensors", "has an unknown kind (0 arena, 1 constant, 2 dynamic)");
            goto fail;
        }
    }
    if (ndyn > 4096) {
        nn_value_error(k, "tensors", "names more than 4096 dynamic arrays");
        goto fail;
    }
    self->ndyn = ndyn;
    self->dyn_written = PyMem_Calloc((size_t)ndyn + 1, sizeof(int));
    self->dyn_items = PyMem_Calloc((size_t)ndyn + 1, sizeof(int64_t));
    self->dyn_role = PyMem_Calloc((size_t)ndyn + 1, sizeof(char *));
    self->names = PyMem_Calloc((size_t)ndyn + 1, 24);
    if (self->dyn_written == NULL || self->dyn_items == NULL || self->dyn_role == NULL || self->names == NULL)
        goto nomem;
    for (int64_t d = 0; d < ndyn; d++) {
        PyOS_snprintf(self->names + 24 * d, 24, "arrays[%lld]", (long long)d);
        self->dyn_role[d] = self->names + 24 * d;
    }
    for (int64_t i = 0; i < self->nsteps; i++) {
        PyObject *entry = PyTuple_GET_ITEM(steps, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 9) {
            nn_type_error(k, "steps", "entries must be tuples of 9 items");
            goto fail;
        }
        int64_t e[8];
        for (int j = 0; j < 8; j++)
            if (nn_int(PyTuple_GET_ITEM(entry, j), k, "steps", -1, INT64_MAX / 8, &e[j]) != 0) goto fail;
        nn_step *s = &self->steps[i];
        s->op = (int32_t)e[0];
        s->y = (int32_t)e[1];
        s->a = (int32_t)e[2];
        s->b = (int32_t)e[3];
        s->act = (nn_act){NN_ACT_NONE, -INFINITY, INFINITY, 0.2f, 0.5f};
        PyObject *act = PyTuple_GET_ITEM(entry, 8);
        if (act != Py_None) {
            const nn_act *got = nn_get_act(act, k);
            if (got == NULL) goto fail;
            s->act = *got;
        }
        const int binary = NN_OP_BINARY(s->op);
        if (s->op < 0 || s->op >= NN_OP_COUNT || e[1] < 0 || e[1] >= self->ntensors || e[2] < 0
            || e[2] >= self->ntensors || (binary ? (e[3] < 0 || e[3] >= self->ntensors) : e[3] != -1)) {
            nn_value_error(k, "steps", "has an unknown opcode or a tensor index out of range");
            goto fail;
        }
        if ((s->op == NN_OP_ACT || s->op == NN_OP_CLIP) && act == Py_None) {
            nn_type_error(k, "steps", "needs an Act for Clip and activation steps");
            goto fail;
        }
        nn_ref *y = &self->refs[s->y];
        if (y->kind == NN_REF_CONST) {
            nn_value_error(k, "steps", "writes a constant");
            goto fail;
        }
        y->written = 1;
        s->n = y->items;
        s->a_count = binary ? e[4] : s->n;
        s->a_inner = binary ? e[5] : 1;
        s->b_count = binary ? e[6] : 0;
        s->b_inner = binary ? e[7] : 0;
        if (!binary && self->refs[s->a].items != s->n) {
            nn_value_error(k, "steps", "has a unary step whose input and output sizes differ");
            goto fail;
        }
        if (binary && (nn_check_operand(s->n, self->refs[s->a].items, s->a_count, s->a_inner, k) != 0
                       || nn_check_operand(s->n, self->refs[s->b].items, s->b_count, s->b_inner, k) != 0))
            goto fail;
        if (binary && s->a_count != s->n && s->b_count != s->n) {
            nn_value_error(k, "steps", "broadcasts both operands of a step");
            goto fail;
        }
        if (__builtin_add_overflow(self->work, s->n, &self->work)) self->work = INT64_MAX;
    }
    for (int64_t t = 0; t < self->ntensors; t++)
        if (self->refs[t].kind == NN_REF_DYN) {
            const nn_ref *r = &self->refs[t];
            if (r->items > self->dyn_items[r->where]) self->dyn_items[r->where] = r->items;
            self->dyn_written[r->where] |= r->written;
        }
    return (PyObject *)self;
nomem:
    PyErr_NoMemory();
fail:
    Py_DECREF(self);
    return NULL;
}

/* The bytes one operand of a step reads: [lo, hi). */
NN_INLINE void nn_span(const float *p, int64_t count, const char **lo, const char **hi) {
    *lo = (const char *)p;
    *hi = (const char *)(p + count);
}

/* An output overlaps an input only when it is the very same memory of the output's size (in place). */
static int nn_step_overlap(const nn_step *s, int32_t in, int64_t count, float *const *ptr, const char *k) {
    const char *ylo, *yhi, *lo, *hi;
    nn_span(ptr[s->y], s->n, &ylo, &yhi);
    nn_span(ptr[in], count, &lo, &hi);
    if (yhi <= lo || hi <= ylo || ylo == yhi || lo == hi) return 0;
    if (ylo == lo && yhi == hi) return 0;
    return nn_value_error(k, "arrays", "bind a step's output to memory overlapping one of its inputs");
}

/* run(arena, arrays): every step, with the arena (uint8, the plan's per-run buffers) and the dynamic arrays. */
static PyObject *nn_program_run(nn_program_object *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *k = "Program.run";
    if (nn_nargs(nargs, 2, k)) return NULL;
    PyObject *arrays = args[1];
    if (!PyTuple_Check(arrays)) {
        nn_type_error(k, "arrays", "must be a tuple of arrays");
        return NULL;
    }
    if (PyTuple_GET_SIZE(arrays) != self->ndyn) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument 'arrays' must hold %lld arrays, not %zd", k,
                     (long long)self->ndyn, PyTuple_GET_SIZE(arrays));
        return NULL;
    }
    nn_arg stack_args[17];
    float *stack_ptr[64];
    const int64_t nargs_held = self->ndyn + 1;
    nn_arg *held = nargs_held <= 17 ? stack_args : PyMem_Calloc((size_t)nargs_held, sizeof(nn_arg));
    float **ptr = self->ntensors <= 64 ? stack_ptr : PyMem_Calloc((size_t)self->ntensors + 1, sizeof(float *));
    int ok = 0;
    if (held == NULL || ptr == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < nargs_held; i++) held[i].held = 0;
    nn_arg *arena = &held[self->ndyn];
    if (nn_get(arena, args[0], k, "arena", NN_U8, NN_OUT | NN_NONE_OK) != 0) goto done;
    if (self->arena_bytes > 0 && (arena->view.buf == NULL || nn_need(arena, k, "arena", self->arena_bytes) != 0)) {
        if (!PyErr_Occurred()) nn_type_error(k, "arena", "must be an array, not None");
        goto done;
    }
    if (arena->view.buf != NULL && ((uintptr_t)arena->view.buf) % 4 != 0) {
        nn_value_error(k, "arena", "must be 4-byte aligned");
        goto done;
    }
    for (int64_t d = 0; d < self->ndyn; d++) {
        const int flags = self->dyn_written[d] ? NN_OUT : 0;
        if (nn_get(&held[d], PyTuple_GET_ITEM(arrays, d), k, self->dyn_role[d], NN_F32, flags) != 0)
            goto done;
        if (held[d].items != self->dyn_items[d]) {     /* exactly: a tensor of another shape is a plan error */
            PyErr_Format(PyExc_ValueError, "native kernel %s: argument '%s' has %lld elements, the plan expects %lld",
                         k, self->dyn_role[d], (long long)held[d].items, (long long)self->dyn_items[d]);
            goto done;
        }
    }
    /* a written dynamic array shares no byte with the arena or another dynamic array (a later step may read
     * those after it is written) */
    for (int64_t d = 0; d < self->ndyn; d++) {
        if (!self->dyn_written[d]) continue;
        if (nn_disjoint(&held[d], arena, k, self->dyn_role[d], "arena", 0) != 0) goto done;
        for (int64_t e = 0; e < self->ndyn; e++)
            if (e != d && nn_disjoint(&held[d], &held[e], k, self->dyn_role[d], self->dyn_role[e], 0) != 0)
                goto done;
    }
    for (int64_t t = 0; t < self->ntensors; t++) {
        const nn_ref *r = &self->refs[t];
        if (r->kind == NN_REF_ARENA)
            ptr[t] = (float *)((char *)arena->view.buf + r->where);
        else if (r->kind == NN_REF_CONST)
            ptr[t] = (float *)self->consts[r->where].view.buf;
        else
            ptr[t] = (float *)held[r->where].view.buf;
    }
    for (int64_t i = 0; i < self->nsteps; i++) {
        const nn_step *s = &self->steps[i];
        if (nn_step_overlap(s, s->a, NN_OP_BINARY(s->op) ? s->a_count : s->n, ptr, k) != 0) goto done;
        if (NN_OP_BINARY(s->op) && nn_step_overlap(s, s->b, s->b_count, ptr, k) != 0) goto done;
    }
    if (self->work >= NN_STEPS_NOGIL_WORK) {
        Py_BEGIN_ALLOW_THREADS
        nn_steps_run(self->steps, self->nsteps, ptr);
        Py_END_ALLOW_THREADS
    } else {
        nn_steps_run(self->steps, self->nsteps, ptr);
    }
    ok = 1;
done:
    if (held != NULL) nn_release(held, (int)nargs_held);
    if (held != stack_args) PyMem_Free(held);
    if (ptr != stack_ptr) PyMem_Free(ptr);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyObject *nn_program_len(nn_program_object *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->nsteps);
}

static PyGetSetDef nn_program_getset[] = {
    {"steps", (getter)nn_program_len, NULL, "the number of steps", NULL}, {NULL}};

static PyMethodDef nn_program_methods[] = {
    {"run", (PyCFunction)(void (*)(void))nn_program_run, METH_FASTCALL,
     "run(arena, arrays): every step, in order, on the arena (uint8) and the dynamic float32 arrays"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject nn_program_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Program",
    .tp_doc = "Program(tensors, steps, constants): a prepared run of element-wise float32 steps (nn_steps.h)",
    .tp_basicsize = sizeof(nn_program_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_program_new,
    .tp_dealloc = (destructor)nn_program_dealloc,
    .tp_methods = nn_program_methods,
    .tp_getset = nn_program_getset,
};

#endif
