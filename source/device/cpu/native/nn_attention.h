/* One attention step, float32 (included once from kernels.c, after nn_softmax.h, nn_sgemm and the pool):
 * O = softmax(Q K^T * scale + mask) V for every (batch, head), the CPU plan's fused attention
 * (device/cpu/attention_fuse.py, kernels/attention.py).
 *
 * Q (B, H, Sq, D), K (B, Hk, Sk, D) or K^T (B, Hk, D, Sk), V (B, Hk, Sk, Dv), the additive mask (B, H, Sq, Sk)
 * and O (B, H, Sq, Dv); Hk divides H and query head h reads key/value head h / (H / Hk) (grouped-query
 * attention: repeated K/V heads are never copied). All are strided views (any non-negative strides, a unit
 * stride along the last axis): the head split of a projection's (B, S, H*D) output and the (B, Sq, H*Dv) layout
 * of O are views, so neither is copied.
 * A mask broadcast over heads or query rows has stride 0 there.
 *
 * Work units are (batch, head, block of query rows), split over the native pool: a head's rows in one block
 * when there are at least two heads per part (BLAS packs K and V once per block), else cut into blocks of at
 * least NN_ATT_ROWS rows to give every part two units; a block's scores stay within NN_ATT_BYTES. Per unit:
 * the block's mask rows copied into the scores S (rows x Sk, the part's scratch), then
 * S = scale Q K^T + S by one cblas_sgemm reading Q and K in place through their row strides (K transposed, or
 * K^T as it is), each row's softmax in place by nn_softmax_f32 (max-subtracted, its exp, its NaN and infinity
 * rules), and O's rows = P V by a second cblas_sgemm writing O through its row stride. BLAS runs
 * single-threaded inside a part, as batched_gemm's products do. */

#define NN_ATT_ROWS 16
#define NN_ATT_BYTES (256 * 1024)

typedef struct {
    const float *q, *k, *v, *mask;
    float *o, *scratch;     /* scratch: rows * sk floats per part */
    int64_t b, h, hk, sq, sk, d, dv, kt, rows;    /* hk: key/value heads (divides h); rows: query rows per unit */
    /* kt: k is K^T (B, Hk, D, Sk) */
    int64_t qs[3], ks[3], vs[3], ms[3], os[3];   /* element strides of axes 0..2 (axis 3 is unit) */
    float scale;
} nn_attention_args;

static void nn_attention_task(const void *args, int64_t part, int64_t parts) {
    const nn_attention_args *a = (const nn_attention_args *)args;
    const int64_t blocks = (a->sq + a->rows - 1) / a->rows;
    int64_t lo, hi;
    nn_split(a->b * a->h * blocks, 1, part, parts, &lo, &hi);
    const int64_t sk = a->sk;
    float *s = a->scratch + part * a->rows * sk;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t bh = u / blocks, blk = u % blocks, bi = bh / a->h, hh = bh % a->h;
        const int64_t i0 = blk * a->rows, n = NN_MIN(a->sq, i0 + a->rows) - i0;
        const float *q = a->q + bi * a->qs[0] + hh * a->qs[1] + i0 * a->qs[2];
        const int64_t kh = hh / (a->h / a->hk);     /* grouped-query attention: query head hh reads kv head kh */
        const float *k = a->k + bi * a->ks[0] + kh * a->ks[1];
        const float *v = a->v + bi * a->vs[0] + kh * a->vs[1];
        float *o = a->o + bi * a->os[0] + hh * a->os[1] + i0 * a->os[2];
        float beta = 0.0f;
        if (a->mask) {
            const float *m = a->mask + bi * a->ms[0] + hh * a->ms[1] + i0 * a->ms[2];
            for (int64_t r = 0; r < n; r++) memcpy(s + r * sk, m + r * a->ms[2], sizeof(float) * (size_t)sk);
            beta = 1.0f;
        }
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, a->kt ? CblasNoTrans : CblasTrans, (blasint)n, (blasint)sk,
                          (blasint)a->d, a->scale, q, (blasint)a->qs[2], k, (blasint)a->ks[2], beta, s, (blasint)sk);
        nn_softmax_f32(s, s, sk, 0, n);
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)a->dv, (blasint)sk, 1.0f,
                          s, (blasint)sk, v, (blasint)a->vs[2], 0.0f, o, (blasint)a->os[2]);
    }
}

/* A 4-D float32 strided view's element strides of axes 0..2 into s, checked against (n0, n1, n2, n3). */
static int nn_attention_view(nn_arg *b, PyObject *obj, const char *k, const char *name, int flags, int64_t n0,
                             int64_t n1, int64_t n2, int64_t n3, int64_t *s) {
    if (nn_get(b, obj, k, name, NN_F32, flags | NN_STRIDED)) return -1;
    if (b->view.ndim != 4 || b->view.shape[0] != n0 || b->view.shape[1] != n1 || b->view.shape[2] != n2 ||
        b->view.shape[3] != n3)
        return nn_value_error(k, name, "must be 4-D with the shape the other operands imply");
    for (int i = 0; i < 3; i++) s[i] = b->view.strides[i] / 4;
    for (int i = 0; i < 4; i++)
        if (b->view.strides[i] % 4) return nn_value_error(k, name, "must have strides of whole elements");
    if (n2 > INT32_MAX || n3 > INT32_MAX || s[2] > INT32_MAX)
        return nn_value_error(k, name, "must have sizes and a row stride that fit 32 bits");
    return 0;
}

/* A matrix operand's row stride as BLAS's leading dimension: rows that do not overlap, or one row */
static int nn_attention_ld(const char *k, const char *name, int64_t n2, int64_t n3, int64_t *s) {
    if (n2 <= 1) {
        s[2] = n3 > 1 ? n3 : 1;
        return 0;
    }
    if (s[2] < n3 || s[2] < 1) return nn_value_error(k, name, "must have rows that do not overlap");
    return 0;
}

/* ---- attention(q, k, v, mask, o, scale, kt, parts): o = softmax(q k^T * scale + mask) v per (batch, head);
 * q (B, H, Sq, D); k (B, Hk, Sk, D), or k^T (B, Hk, D, Sk) when kt is 1; v (B, Hk, Sk, Dv), Hk dividing H;
 * mask (B, H, Sq, Sk) or None; o (B, H, Sq, Dv); all float32 strided views with a unit last-axis stride (mask
 * strides may be 0) */
static PyObject *nn_py_attention(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "attention";
    nn_arg b[5] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t kt, parts;
    if (nn_nargs(nargs, 8, k) || nn_int(args[6], k, "kt", 0, 1, &kt) || nn_get_parts(args[7], k, &parts))
        return NULL;
    const double scale = PyFloat_AsDouble(args[5]);
    if (scale == -1.0 && PyErr_Occurred()) return NULL;
    nn_attention_args a = {.kt = kt, .scale = (float)scale};
    if (nn_get(&b[0], args[0], k, "q", NN_F32, NN_STRIDED)) goto fail;
    if (b[0].view.ndim != 4) {
        nn_value_error(k, "q", "must be (B, H, Sq, D)");
        goto fail;
    }
    a.b = b[0].view.shape[0], a.h = b[0].view.shape[1], a.sq = b[0].view.shape[2], a.d = b[0].view.shape[3];
    if (nn_attention_view(&b[0], args[0], k, "q", 0, a.b, a.h, a.sq, a.d, a.qs)) goto fail;
    if (nn_get(&b[2], args[2], k, "v", NN_F32, NN_STRIDED)) goto fail;
    if (b[2].view.ndim != 4) {
        nn_value_error(k, "v", "must be (B, H, Sk, Dv)");
        goto fail;
    }
    a.hk = b[2].view.shape[1], a.sk = b[2].view.shape[2], a.dv = b[2].view.shape[3];
    if (a.hk < 1 || a.h % a.hk) {
        nn_value_error(k, "v", "must have a number of heads that divides the query's");
        goto fail;
    }
    nn_release(&b[2], 1);
    nn_release(&b[0], 1);
    if (nn_attention_view(&b[0], args[0], k, "q", 0, a.b, a.h, a.sq, a.d, a.qs) ||
        nn_attention_view(&b[1], args[1], k, "k", 0, a.b, a.hk, kt ? a.d : a.sk, kt ? a.sk : a.d, a.ks) ||
        nn_attention_view(&b[2], args[2], k, "v", 0, a.b, a.hk, a.sk, a.dv, a.vs) ||
        nn_attention_view(&b[4], args[4], k, "o", NN_OUT, a.b, a.h, a.sq, a.dv, a.os) ||
        nn_attention_ld(k, "q", a.sq, a.d, a.qs) || nn_attention_ld(k, "k", kt ? a.d : a.sk, kt ? a.sk : a.d, a.ks) ||
        nn_attention_ld(k, "v", a.sk, a.dv, a.vs) || nn_attention_ld(k, "o", a.sq, a.dv, a.os))
        goto fail;
    if (args[3] != Py_None && nn_attention_view(&b[3], args[3], k, "mask", 0, a.b, a.h, a.sq, a.sk, a.ms)) goto fail;
    for (int i = 0; i < 4; i++)
        if (b[i].held && b[4].lo < b[i].hi && b[i].lo < b[4].hi) {
            nn_value_error(k, "o", "must not overlap an input");
            goto fail;
        }
    a.q = b[0].view.buf, a.k = b[1].view.buf, a.v = b[2].view.buf, a.o = b[4].view.buf;
    a.mask = b[3].held ? b[3].view.buf : NULL;
    if (a.b * a.h * a.sq == 0 || a.dv == 0) return nn_finish(b, 5, 1);
    if (a.sk == 0) {
        nn_value_error(k, "k", "must have at least one key");
        goto fail;
    }
    /* rows per unit (module comment) */
    const int64_t heads = a.b * a.h, per_head = heads >= 2 * parts ? 1 : (2 * parts + heads - 1) / heads;
    a.rows = NN_MAX(NN_ATT_ROWS, (a.sq + per_head - 1) / per_head);
    a.rows = NN_MAX(1, NN_MIN(a.rows, NN_ATT_BYTES / (4 * a.sk)));
    a.scratch = (float *)malloc(sizeof(float) * (size_t)(parts * a.rows * a.sk));
    if (a.scratch == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_attention_task, &a, parts);
    Py_END_ALLOW_THREADS
    free(a.scratch);
    return nn_finish(b, 5, 1);
fail:
    return nn_finish(b, 5, 0);
}
