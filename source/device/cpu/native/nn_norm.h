/*
 * nn_norm.h: InstanceNormalization and GroupNormalization of float32 channels-first tensors (included once from
 * kernels.c, after nn_split and the pool).
 *
 * x is (N, C, S...) C-contiguous, seen as N * groups rows of (C / groups) channels of `inner` elements each
 * (InstanceNormalization: groups = C; torch's GroupNorm export: Reshape to (N, G, -1) -> InstanceNormalization
 * -> Reshape back -> Mul -> Add). Per row: its mean, the mean of its squared deviations (two passes while
 * the row is in L2, sums in float32 over 16 lanes like nn_layernorm_f32), then per channel c of the row
 * y = act((x - mean) * (inv * scale[c]) + bias[c]), where inv = 1 / sqrt(var + eps), the fused activation applied
 * to the channel's block while it is in L1/L2. scale and bias are per channel (C entries) or NULL (1 and 0). y may
 * be x.
 */
#ifndef NN_NORM_H
#define NN_NORM_H

NN_API NN_CLONES void nn_groupnorm_f32(const float *x, float *y, int64_t groups, int64_t cpg, int64_t inner,
                                       const float *scale, const float *bias, float eps, const nn_act *act,
                                       int64_t r0, int64_t r1) {
    const int64_t width = cpg * inner;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * width;
        float *yr = y + r * width;
        float mean, inv;
        nn_row_moments(xr, width, eps, &mean, &inv);
        const int64_t c0 = (r % groups) * cpg;
        for (int64_t c = 0; c < cpg; c++) {
            const float a = scale ? inv * scale[c0 + c] : inv;
            const float b = bias ? bias[c0 + c] : 0.0f;
            const float *xc = xr + c * inner;
            float *yc = yr + c * inner;
            for (int64_t i = 0; i < inner; i++) yc[i] = (xc[i] - mean) * a + b;
            if (act->kind != NN_ACT_NONE) nn_activation_f32(yc, yc, inner, act);
        }
    }
}

typedef struct {
    const float *x, *scale, *bias;
    float *y;
    int64_t rows, groups, cpg, inner;
    float eps;
    const nn_act *act;
} nn_groupnorm_args;

static void nn_groupnorm_task(const void *args, int64_t part, int64_t parts) {
    const nn_groupnorm_args *a = (const nn_groupnorm_args *)args;
    int64_t lo, hi;
    nn_split(a->rows, 1, part, parts, &lo, &hi);
    nn_groupnorm_f32(a->x, a->y, a->groups, a->cpg, a->inner, a->scale, a->bias, a->eps, a->act, lo, hi);
}

/* ---- group_norm(x, y, scale, bias, channels, groups, eps, act, parts): x (N, channels, S...) float32, y as
 * big (may be x); scale and bias `channels` entries or None; channels a multiple of groups; act an Act */
static PyObject *nn_py_group_norm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "group_norm";
    nn_arg b[4] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t channels, groups, parts;
    const nn_act *act;
    if (nn_nargs(nargs, 9, k) || nn_int(args[4], k, "channels", 1, INT32_MAX, &channels) ||
        nn_int(args[5], k, "groups", 1, channels, &groups) || (act = nn_get_act(args[7], k)) == NULL ||
        nn_get_parts(args[8], k, &parts))
        return NULL;
    if (channels % groups) {
        nn_value_error(k, "groups", "must divide channels");
        return NULL;
    }
    const double eps = PyFloat_AsDouble(args[6]);
    if (eps == -1.0 && PyErr_Occurred()) return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0)) goto fail;
    if (b[0].view.ndim < 2 || b[0].view.shape[1] != channels) {
        nn_value_error(k, "x", "must be (N, channels, ...)");
        goto fail;
    }
    const int64_t image = b[0].view.shape[0] ? b[0].items / b[0].view.shape[0] : 0;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_get(&b[2], args[2], k, "scale", NN_F32, NN_NONE_OK) || nn_need(&b[2], k, "scale", channels) ||
        nn_get(&b[3], args[3], k, "bias", NN_F32, NN_NONE_OK) || nn_need(&b[3], k, "bias", channels) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1) || nn_disjoint(&b[1], &b[2], k, "y", "scale", 0) ||
        nn_disjoint(&b[1], &b[3], k, "y", "bias", 0))
        goto fail;
    nn_groupnorm_args a = {b[0].view.buf, b[2].view.buf, b[3].view.buf, b[1].view.buf,
                           (int64_t)b[0].view.shape[0] * groups, groups, channels / groups, image / channels,
                           (float)eps, act};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_groupnorm_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 4, 1);
fail:
    return nn_finish(b, 4, 0);
}

#endif
