/* Grouped 2-D convolution, channels last, groups of a few channels each (ResNeXt's and RegNet's 3x3
 * convolutions: 4 to 16 input channels a group). Included once from kernels.c (nn_gconv_task runs it).
 *
 * Weights (G, KH, KW, CG, MG), MG a multiple of 8. A register tile is NN_GCONV_TILE (8) output pixels of one
 * row times 8 output channels of one group (8 accumulators), or 4 pixels times 16 channels (8 accumulators)
 * while 16 or more of the group's channels are left: each input channel of a tap is one weight load (or two)
 * and a broadcast per pixel for 8 independent multiply-add chains, which keeps both FMA units busy. A pixel
 * whose tap falls into the padding, or a pixel past the row's end in the last tile, reads a row of zeros, so
 * the tile needs no edge cases; only the tile's real pixels are stored. The bias is the start value and the
 * activation runs over the tile's pixels.
 *
 * The kernel it replaces walked one pixel at a time with one chain per group (four groups at a time), so a
 * convolution of fewer than four groups ran one dependent multiply-add chain (latency-bound), and every input
 * channel cost two loads per multiply-add. Measured at 1 thread on the loaded 2-core AMD EPYC VM (Zen 3, AVX2),
 * 3x3, batch 1, min of 30 in one process (us, old / this / onnxruntime): 16 -> 16 in 2 groups at 56^2 573 / 163
 * / 204; 32 in 2 groups at 56^2 3278 / 393 / 448; 64 in 4 groups at 28^2 542 / 205 / 231; 32 in 4 groups
 * stride 2 at 56^2 144 / 81 / 121; 64 in 8 groups stride 2 at 28^2 69 / 38 / 71; 128 in 16 groups at 7^2
 * 28.5 / 20.8 / 36.5.
 */

#define NN_GCONV_TILE 8
/* a row of zeros that a tap in the padding reads (here and in nn_direct_tiles.h): a grouped convolution of
 * more input channels runs on the im2col GEMM (native_grouped_fits) */
#define NN_ZERO_ROW_FLOATS 4096
#define NN_GCONV_MAX_C NN_ZERO_ROW_FLOATS
/* kernel taps (KH * KW) a tile's table of sources holds: larger kernels run on the im2col GEMM */
#define NN_GCONV_MAX_TAPS 64

static const float nn_zero_row[NN_ZERO_ROW_FLOATS];

typedef struct {
    int64_t n, h, w, c, oh, ow, m, kh, kw, sh, sw, dh, dw, pad_top, pad_left, groups, cg, mg;
    nn_act act;
} nn_gconv_params;

/* acc[t] (t < tp) += sum over the taps and the group's input channels of src[tap][t][ci] * w[tap][ci][0:8 * nv]
 * for one group and one block of 8 * nv output channels; src[tap][t] points at the pixel's channels of this
 * group (or at zeros); ws at the group's weights of the block for tap 0, taps ``wstride`` floats apart. */
#define NN_GCONV_ACCUMULATE(TP, NV)                                                                          \
    for (int64_t k = 0; k < taps; k++) {                                                                     \
        const float *const *s = src + k * NN_GCONV_TILE + half;                                              \
        const float *wk = ws + k * wstride;                                                                  \
        for (int64_t ci = 0; ci < cg; ci++) {                                                                \
            const nn_v8 w0 = *(const nn_v8 *)(wk + ci * mg);                                                 \
            const nn_v8 w1 = NV == 2 ? *(const nn_v8 *)(wk + ci * mg + 8) : w0;                              \
            for (int t = 0; t < TP; t++) {                                                                   \
                const float v = s[t][goff + ci];                                                             \
                acc[t][0] += v * w0;                                                                         \
                if (NV == 2) acc[t][1] += v * w1;                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

NN_API NN_CLONES void nn_gconv_nhwc_f32(const float *x, float *y, const float *wt, const float *bias,
                                        const nn_gconv_params *p, int64_t r0, int64_t r1) {
    const int64_t G = p->groups, cg = p->cg, mg = p->mg, c = p->c, m = p->m, kh = p->kh, kw = p->kw;
    const int64_t taps = kh * kw, wstride = cg * mg;
    /* per tap and tile pixel: where the pixel's input channels start (zeros in the padding or past the row) */
    const float *src[NN_GCONV_MAX_TAPS * NN_GCONV_TILE];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / p->oh, i = r % p->oh, top = i * p->sh - p->pad_top;
        const float *ximg = x + b * p->h * p->w * c;
        for (int64_t j0 = 0; j0 < p->ow; j0 += NN_GCONV_TILE) {
            const int64_t real = p->ow - j0 < NN_GCONV_TILE ? p->ow - j0 : NN_GCONV_TILE;
            for (int64_t ki = 0; ki < kh; ki++) {
                const int64_t ih = top + ki * p->dh;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float **s = src + (ki * kw + kj) * NN_GCONV_TILE;
                    for (int64_t t = 0; t < NN_GCONV_TILE; t++) {
                        const int64_t iw = (j0 + t) * p->sw - p->pad_left + kj * p->dw;
                        const int inside = t < real && ih >= 0 && ih < p->h && iw >= 0 && iw < p->w;
                        s[t] = inside ? ximg + (ih * p->w + iw) * c : nn_zero_row;
                    }
                }
            }
            float *yt = y + (r * p->ow + j0) * m;
            for (int64_t g = 0; g < G; g++) {
                const int64_t goff = g * cg;
                for (int64_t mb = 0; mb < mg;) {
                    const float *ws = wt + g * taps * wstride + mb;
                    const int64_t col = g * mg + mb;
                    const nn_v8 start = bias ? *(const nn_v8 *)(bias + col) : (nn_v8){0};
                    if (mb + 16 <= mg) {
                        const nn_v8 start1 = bias ? *(const nn_v8 *)(bias + col + 8) : (nn_v8){0};
                        for (int64_t half = 0; half < real; half += NN_GCONV_TILE / 2) {
                            nn_v8 acc[NN_GCONV_TILE / 2][2];
                            for (int t = 0; t < NN_GCONV_TILE / 2; t++) acc[t][0] = start, acc[t][1] = start1;
                            NN_GCONV_ACCUMULATE(NN_GCONV_TILE / 2, 2)
                            for (int64_t t = 0; t < NN_GCONV_TILE / 2 && half + t < real; t++) {
                                *(nn_v8 *)(yt + (half + t) * m + col) = acc[t][0];
                                *(nn_v8 *)(yt + (half + t) * m + col + 8) = acc[t][1];
                            }
                        }
                        mb += 16;
                    } else {
                        const int64_t half = 0;
                        nn_v8 acc[NN_GCONV_TILE][1];
                        for (int t = 0; t < NN_GCONV_TILE; t++) acc[t][0] = start;
                        NN_GCONV_ACCUMULATE(NN_GCONV_TILE, 1)
                        for (int64_t t = 0; t < real; t++) *(nn_v8 *)(yt + t * m + col) = acc[t][0];
                        mb += 8;
                    }
                }
            }
            nn_apply(yt, real * m, &p->act);
        }
    }
}

#undef NN_GCONV_ACCUMULATE
