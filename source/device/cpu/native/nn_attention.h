/* One attention step, float32 (included once from kernels.c, after nn_softmax.h and the pool):
 * O = softmax(Q K^T * scale + mask) V for every (batch, head), the CPU plan's fused attention
 * (device/cpu/attention_fuse.py, kernels/attention.py).
 *
 * Q (B, H, Sq, D), K (B, H, Sk, D) or K^T (B, H, D, Sk), V (B, H, Sk, Dv), the additive mask (B, H, Sq, Sk)
 * and O (B, H, Sq, Dv) are strided views (any non-negative strides, a unit stride along the last axis): the head
 * split of a projection's (B, S, H*D) output and the (B, Sq, H*Dv) layout of O are views, so neither is copied.
 * A mask broadcast over heads or query rows has stride 0 there.
 *
 * Work units are (batch, head, block of NN_ATT_ROWS query rows), split over the native pool. A part copies the
 * unit's K into a contiguous K^T (D, Sk) scratch (once per (batch, head) it meets), then per block of 4 query
 * rows accumulates their scores over D with the K^T rows (4 rows share each K^T row's loads), adds scale and
 * mask, takes each row's softmax with nn_softmax_f32 (max-subtracted, its exp, its NaN/inf rules) and
 * accumulates O's row as the probability-weighted sum of V's rows. The scores of a block stay in L1 (4 x Sk). */

#define NN_ATT_ROWS 32
/* a part's scratch: K^T (D, Sk), then the scores and probabilities of 4 rows */
#define NN_ATT_SCRATCH(d, sk) ((d) * (sk) + 8 * (sk))

typedef struct {
    const float *q, *k, *v, *mask;
    float *o, *scratch;     /* scratch: per part, NN_ATT_SCRATCH(d, sk) floats */
    int64_t b, h, sq, sk, d, dv, kt;      /* kt: k is K^T (B, H, D, Sk) */
    int64_t qs[3], ks[3], vs[3], ms[3], os[3];   /* element strides of axes 0..2 (axis 3 is unit) */
    float scale;
} nn_attention_args;

/* scores of rows [i0, i0 + n) (n <= 4) of one head against all keys: s[r][j] = (q_r . k_j) * scale + mask */
NN_API NN_CLONES void nn_attention_rows(const nn_attention_args *a, const float *q, const float *kt,
                                        const float *mask, int64_t i0, int64_t n, float *s) {
    const int64_t sk = a->sk, d = a->d;
    for (int64_t r = 0; r < n; r++) {
        float *restrict sr = s + r * sk;
        for (int64_t j = 0; j < sk; j++) sr[j] = 0.0f;
    }
    if (n == 4) {
        const float *q0 = q + i0 * a->qs[2], *q1 = q0 + a->qs[2], *q2 = q1 + a->qs[2], *q3 = q2 + a->qs[2];
        float *restrict s0 = s, *restrict s1 = s + sk, *restrict s2 = s + 2 * sk, *restrict s3 = s + 3 * sk;
        for (int64_t c = 0; c < d; c++) {
            const float *restrict kr = kt + c * sk;
            const float x0 = q0[c], x1 = q1[c], x2 = q2[c], x3 = q3[c];
#pragma omp simd
            for (int64_t j = 0; j < sk; j++) {
                const float kv = kr[j];
                s0[j] += x0 * kv;
                s1[j] += x1 * kv;
                s2[j] += x2 * kv;
                s3[j] += x3 * kv;
            }
        }
    } else {
        for (int64_t r = 0; r < n; r++) {
            const float *qr = q + (i0 + r) * a->qs[2];
            float *restrict sr = s + r * sk;
            for (int64_t c = 0; c < d; c++) {
                const float *restrict kr = kt + c * sk;
                const float x = qr[c];
#pragma omp simd
                for (int64_t j = 0; j < sk; j++) sr[j] += x * kr[j];
            }
        }
    }
    const float scale = a->scale;
    for (int64_t r = 0; r < n; r++) {
        float *restrict sr = s + r * sk;
        if (mask) {
            const float *restrict mr = mask + (i0 + r) * a->ms[2];
#pragma omp simd
            for (int64_t j = 0; j < sk; j++) sr[j] = sr[j] * scale + mr[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < sk; j++) sr[j] *= scale;
        }
    }
}

/* o_r = sum_j p[j] v_j for one row */
NN_API NN_CLONES void nn_attention_pv(const float *p, const float *v, int64_t vstride, int64_t sk, int64_t dv,
                                      float *o) {
    float *restrict out = o;
    for (int64_t c = 0; c < dv; c++) out[c] = 0.0f;
    for (int64_t j = 0; j < sk; j++) {
        const float w = p[j];
        const float *restrict vr = v + j * vstride;
#pragma omp simd
        for (int64_t c = 0; c < dv; c++) out[c] += w * vr[c];
    }
}

static void nn_attention_task(const void *args, int64_t part, int64_t parts) {
    const nn_attention_args *a = (const nn_attention_args *)args;
    const int64_t blocks = (a->sq + NN_ATT_ROWS - 1) / NN_ATT_ROWS;
    int64_t lo, hi;
    nn_split(a->b * a->h * blocks, 1, part, parts, &lo, &hi);
    if (lo >= hi) return;
    const int64_t sk = a->sk, d = a->d;
    float *kt = a->scratch + part * NN_ATT_SCRATCH(d, sk);
    float *s = kt + d * sk, *p = s + 4 * sk;
    int64_t have = -1;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t bh = u / blocks, blk = u % blocks, bi = bh / a->h, hi_ = bh % a->h;
        const float *k = a->k + bi * a->ks[0] + hi_ * a->ks[1];
        if (bh != have) {
            if (a->kt) {
                for (int64_t c = 0; c < d; c++) memcpy(kt + c * sk, k + c * a->ks[2], sizeof(float) * (size_t)sk);
            } else {
                for (int64_t j = 0; j < sk; j++)
                    for (int64_t c = 0; c < d; c++) kt[c * sk + j] = k[j * a->ks[2] + c];
            }
            have = bh;
        }
        const float *q = a->q + bi * a->qs[0] + hi_ * a->qs[1];
        const float *v = a->v + bi * a->vs[0] + hi_ * a->vs[1];
        const float *mask = a->mask ? a->mask + bi * a->ms[0] + hi_ * a->ms[1] : NULL;
        float *o = a->o + bi * a->os[0] + hi_ * a->os[1];
        const int64_t r1 = NN_MIN(a->sq, (blk + 1) * NN_ATT_ROWS);
        for (int64_t i = blk * NN_ATT_ROWS; i < r1; i += 4) {
            const int64_t n = NN_MIN(4, r1 - i);
            nn_attention_rows(a, q, kt, mask, i, n, s);
            nn_softmax_f32(s, p, sk, 0, n);
            for (int64_t r = 0; r < n; r++) nn_attention_pv(p + r * sk, v, a->vs[2], sk, a->dv, o + (i + r) * a->os[2]);
        }
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
    return 0;
}

/* ---- attention(q, k, v, mask, o, scale, kt, parts): o = softmax(q k^T * scale + mask) v per (batch, head);
 * q (B, H, Sq, D); k (B, H, Sk, D), or k^T (B, H, D, Sk) when kt is 1; v (B, H, Sk, Dv); mask (B, H, Sq, Sk) or
 * None; o (B, H, Sq, Dv); all float32 strided views with a unit last-axis stride (mask strides may be 0) */
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
    a.sk = b[2].view.shape[2], a.dv = b[2].view.shape[3];
    nn_release(&b[2], 1);
    nn_release(&b[0], 1);
    if (nn_attention_view(&b[0], args[0], k, "q", 0, a.b, a.h, a.sq, a.d, a.qs) ||
        nn_attention_view(&b[1], args[1], k, "k", 0, a.b, a.h, kt ? a.d : a.sk, kt ? a.sk : a.d, a.ks) ||
        nn_attention_view(&b[2], args[2], k, "v", 0, a.b, a.h, a.sk, a.dv, a.vs) ||
        nn_attention_view(&b[4], args[4], k, "o", NN_OUT, a.b, a.h, a.sq, a.dv, a.os))
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
    a.scratch = (float *)malloc(sizeof(float) * (size_t)(parts * NN_ATT_SCRATCH(a.d, a.sk)));
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
