/*
 * nn_resize_nchw.h: resize_to_nchw, the separable Resize of a channels-last image writing ONNX's NCHW layout.
 *
 * A segmentation model ends with a bilinear upsampling of its class scores to the input's size (LR-ASPP,
 * DeepLab's ASPP head: (1, 8, 32, 32) -> (1, 8, 256, 256)); its graph output is NCHW. Resizing in NHWC and then
 * converting the large result back costs a second pass over the largest tensor of the model, a transpose whose
 * inner axis (the few classes) is short. Here the passes run W then H, one channel plane at a time: the W pass
 * of the plane's h source rows (h * ow taps gathered with stride c: an eighth of the output for an 8x
 * upsampling) into a scratch, then each output row mixes whole scratch rows, contiguous and vectorized, as
 * resize_nhwc's H pass. The same taps and weights as the reference, applied W first: each output differs from
 * resize_nhwc's by float32 rounding only (one separable product re-associated). Two fused kernels that kept
 * the H-then-W order (an (ow, c) row stored transposed; taps gathered from a transposed line) both cost more
 * than resize_nhwc plus the separate conversion (8 x 32 x 32 -> 256 x 256: 0.57 and 0.72 ms against 0.44).
 * The layout pass takes it for upsampling only (h <= oh): the W pass then costs at most a pass over y.
 * round_half folds fp16 storage's rounding of the output in (castfuse.py), each row rounded while in L1, as
 * transpose_round does for the conversion this kernel replaces.
 *
 * Included once from kernels.c, after nn_resize_args, nn_resize_copies and NN_HAVE_F16 / nn_f16.
 */
#ifndef NN_RESIZE_NCHW_H
#define NN_RESIZE_NCHW_H

/* rows [r0, r1) of the n * c * oh rows of y (n, c, oh, ow); tmp: scratch of h * ow floats, the W pass of every
 * source row of the channel plane at hand */
NN_API NN_CLONES void nn_resize_nchw_rows(const nn_resize_args *a, int64_t r0, int64_t r1, float *restrict tmp) {
    const int64_t c = a->c, h = a->h, w = a->w, oh = a->oh, ow = a->ow, th = a->th, tw = a->tw;
    int64_t cached = -1;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t plane = r / oh, orow = r % oh;
        if (plane != cached) {
            const float *image = a->x + (plane / c) * h * w * c + plane % c;
            for (int64_t i = 0; i < h; i++) {
                const float *src = image + i * w * c;
                float *t = tmp + i * ow;
                for (int64_t j = 0; j < ow; j++) {
                    const int32_t *wi = a->widx + j * tw;
                    const float *wv = a->ww + j * tw;
                    float s = src[(int64_t)wi[0] * c] * wv[0];
                    for (int64_t k = 1; k < tw; k++) s += src[(int64_t)wi[k] * c] * wv[k];
                    t[j] = s;
                }
            }
            cached = plane;
        }
        const int32_t *hi = a->hidx + orow * th;
        const float *hv = a->hw + orow * th;
        float *restrict o = a->y + r * ow;
        const float *t0 = tmp + (int64_t)hi[0] * ow;
        if (nn_resize_copies(th, hv)) {
            memcpy(o, t0, (size_t)ow * sizeof(float));
        } else {
            const float v0 = hv[0];
#pragma omp simd
            for (int64_t j = 0; j < ow; j++) o[j] = t0[j] * v0;
            for (int64_t k = 1; k < th; k++) {
                const float *tk = tmp + (int64_t)hi[k] * ow, vk = hv[k];
#pragma omp simd
                for (int64_t j = 0; j < ow; j++) o[j] += tk[j] * vk;
            }
        }
#if NN_HAVE_F16
        if (a->round_half) {
            int64_t j0 = 0;     /* F16C 8 lanes at a time (GCC leaves the _Float16 loop scalar: 4x the fp32 run) */
#if NN_HALF_SIMD
            if (nn_half_simd_ok()) j0 = nn_half_simd(o, o, ow, 2);
#endif
#pragma omp simd
            for (int64_t j = j0; j < ow; j++) o[j] = (float)(nn_f16)o[j];
        }
#endif
    }
}

static void nn_resize_nchw_task(const void *args, int64_t part, int64_t parts) {
    const nn_resize_args *a = args;
    const int64_t rows = a->n * a->c * a->oh, r0 = rows * part / parts, r1 = rows * (part + 1) / parts;
    if (r0 >= r1) return;
    float *tmp = malloc((size_t)(a->h * a->ow) * sizeof(float));
    if (tmp == NULL) {
        __atomic_store_n(a->failed, 1, __ATOMIC_SEQ_CST);
        return;
    }
    nn_resize_nchw_rows(a, r0, r1, tmp);
    free(tmp);
}

#endif
