/*
 * nn_relayout.h: transpose_round, the layout pass's NCHW <-> NHWC conversion of a float32 tensor with fp16
 * storage's rounding folded in.
 *
 * Under fp16 storage a subgraph's float32 boundary tensors are rounded through float16 (castfuse.py's RoundHalf);
 * at a channels-last region's edge that rounding sits right before or after the conversion (a segmentation
 * model's mask: to-nchw, then the rounding). Rounding commutes with moving elements, so one pass does both: the
 * tiles of transpose_blocks, each element rounded as it is stored (_Float16: F16C in the v3 / v4 clones).
 *
 * Included once from kernels.c, after the thread pool (nn_pool_run), the tile size NN_TR_TILE and NN_HAVE_F16.
 */
#ifndef NN_RELAYOUT_H
#define NN_RELAYOUT_H

#if NN_HAVE_F16
typedef struct {
    const float *x;
    float *y;
    int64_t outer, a, b;
} nn_round_args;

/* One tile, rows [i0, i1) and columns [j0, j1) of x (at most NN_TR_TILE each): its rows rounded into ``tmp`` by
 * F16C 8 lanes at a time (GCC leaves a _Float16 loop scalar, one conversion an element: the rounded conversion of
 * (1, 3, 256, 256) to NHWC took 145 us against 57 for a rounding pass and the plain conversion), then stored
 * transposed; A rows known to the compiler for a few colour planes. */
#define NN_ROUND_TILE(A)                                                                                             \
    do {                                                                                                           \
        for (int64_t i = i0; i < i1; i++) {                                                                        \
            const float *xr = x + i * b + j0;                                                                      \
            float *tr = tmp[i - i0];                                                                               \
            int64_t done = 0;                                                                                      \
            if (simd) done = nn_half_simd(xr, tr, j1 - j0, 2);                                                     \
            for (int64_t j = done; j < j1 - j0; j++) tr[j] = (float)(nn_f16)xr[j];                                 \
        }                                                                                                          \
        for (int64_t j = j0; j < j1; j++)                                                                          \
            for (int64_t i = i0; i < i1; i++) y[j * (A) + i] = tmp[i - i0][j - j0];                                \
    } while (0)
#define NN_ROUND_FEW 8
#define NN_ROUND_FEW_CASE(A)                                                                                         \
    case A:                                                                                                        \
        NN_ROUND_TILE(A);                                                                                          \
        break;

/* y (outer, b, a) from x (outer, a, b) for tiles [t0, t1) (outer * ceil(b / NN_TR_TILE) of them), rounded */
NN_API NN_CLONES void nn_transpose_round_tiles(const nn_round_args *t, int64_t t0, int64_t t1) {
    const int64_t a = t->a, b = t->b, tiles = (b + NN_TR_TILE - 1) / NN_TR_TILE;
#if NN_HALF_SIMD
    const int simd = nn_half_simd_ok();
#else
    const int simd = 0;
#define nn_half_simd(x, y, n, mode) 0
#endif
    float tmp[NN_TR_TILE][NN_TR_TILE];
    for (int64_t q = t0; q < t1; q++) {
        const int64_t o = q / tiles, j0 = (q % tiles) * NN_TR_TILE, j1 = j0 + NN_TR_TILE < b ? j0 + NN_TR_TILE : b;
        const float *x = t->x + o * a * b;
        float *y = t->y + o * a * b;
        if (a <= NN_ROUND_FEW) {
            const int64_t i0 = 0, i1 = a;
            switch (a) {
                NN_ROUND_FEW_CASE(1)
                NN_ROUND_FEW_CASE(2)
                NN_ROUND_FEW_CASE(3)
                NN_ROUND_FEW_CASE(4)
                NN_ROUND_FEW_CASE(5)
                NN_ROUND_FEW_CASE(6)
                NN_ROUND_FEW_CASE(7)
                NN_ROUND_FEW_CASE(8)
            default:
                break;
            }
            continue;
        }
        for (int64_t i0 = 0; i0 < a; i0 += NN_TR_TILE) {
            const int64_t i1 = i0 + NN_TR_TILE < a ? i0 + NN_TR_TILE : a;
            NN_ROUND_TILE(a);
        }
    }
#if !NN_HALF_SIMD
#undef nn_half_simd
#endif
}

static void nn_round_task(const void *args, int64_t part, int64_t parts) {
    const nn_round_args *t = args;
    const int64_t total = t->outer * ((t->b + NN_TR_TILE - 1) / NN_TR_TILE);
    nn_transpose_round_tiles(t, total * part / parts, total * (part + 1) / parts);
}
#endif

/* ---- transpose_round(x, y, outer, a, b, parts): y (outer, b, a) from x (outer, a, b), float32, each element
 * rounded to the nearest float16 value (ties to even), both C-contiguous, not overlapping */
static PyObject *nn_py_transpose_round(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "transpose_round";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t g[3], parts;
    if (nn_nargs(nargs, 6, k) || nn_int(args[2], k, "outer", 0, INT32_MAX, &g[0]) ||
        nn_int(args[3], k, "a", 0, INT32_MAX, &g[1]) || nn_int(args[4], k, "b", 0, INT32_MAX, &g[2]) ||
        nn_get_parts(args[5], k, &parts))
        return NULL;
    const int64_t items = nn_mul(3, g);
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_need(&b[0], k, "x", items) ||
        nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
#if NN_HAVE_F16
    nn_round_args t = {b[0].view.buf, b[1].view.buf, g[0], g[1], g[2]};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_round_task, &t, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
#else
    PyErr_Format(PyExc_TypeError, "native kernel %s: this build's compiler has no _Float16", k);
#endif
fail:
    return nn_finish(b, 2, 0);
}

#endif
