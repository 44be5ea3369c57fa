/* nn_dwconv.h -- the depthwise 2-D convolution, channels last (included once by kernels.c, after nn_v8,
 * nn_apply and nn_dw_params).
 *
 * The channels run in blocks of up to NN_DW_VECS 8-lane vectors that stay in registers across every in-bounds
 * tap. The tap range is clipped once (rows once per output row, columns once per pixel), so the inner loop has
 * no bounds test; the pixels whose window lies inside the input run in tiles of several pixels that share each
 * tap's weight vectors, so that the tile has 6 to 8 independent accumulator chains (one pixel's block of 1 or 2
 * vectors is a chain of KH * KW dependent multiply-adds, which waits on their latency). A channel count that is
 * not a multiple of 8 ends with a narrower last vector: the weights and bias are padded with zeros to a multiple
 * of 8 (nn_dw_pad), its input lanes past the channel count read the next pixel's channels (or, at the very end
 * of the input, zeros) and only its live lanes are stored. The activation runs over the whole output row
 * afterwards, while it is in L1.
 *
 * Old (one block of 32 channels, the narrower rest in a stack array with a run-time width, the activation per
 * pixel) against this, both compiled for x86-64-v3 into one C program, interleaved min (us; 3x3 with ReLU, one
 * thread, the loaded 2-core AMD EPYC VM, Zen 3): 16 channels at 24x96 164 / 37; 8 at 32x64 120 / 17; 12 138 /
 * 38; 20 156 / 51; 24 137 / 53; 3 at 64x64 393 / 53; 32 at 24x96 stride 2 28 / 18; 64 at 12x48 stride 2 12 /
 * 7.7; MobileNetV2's 32 at 112^2 598 / 352, 96 at 112^2 stride 2 373 / 301, 144 at 56^2 869 / 696, 192 at 28^2
 * 230 / 149, 960 at 7^2 65 / 48; 5x5 72 at 28^2 234 / 104. 16 channels run at ~80% of the FMA rate a plain
 * multiply-add loop reaches on that machine. */

/* vectors of 8 channels per block */
#define NN_DW_VECS 4
/* pixels per tile for blocks of V vectors: at most 8 accumulators, plus V weight vectors, in 16 registers */
#define NN_DW_TILE(V) ((V) == 1 ? 8 : (V) == 2 ? 4 : 2)

/* pixels in a run of pixels whose windows lie inside the input: a multiple of every NN_DW_TILE */
#define NN_DW_SPAN 8

/* The channel count rounded up to whole vectors: the row stride of the padded weights (nn_dw_pad). */
static inline int64_t nn_dw_cp(int64_t c) { return (c + 7) / 8 * 8; }

/* 8 floats from p: a plain load when all 8 lie before end, else those before end and zeros */
NN_INLINE nn_v8 nn_dw_load(const float *p, const float *end) {
    if (p + 8 <= end) return *(const nn_v8 *)p;
    nn_v8 v = {0};
    if (end > p) memcpy(&v, p, (size_t)(end - p) * sizeof(float));
    return v;
}

/* A run of pixels' tap geometry: the first in-bounds tap's input (channel 0 of the first pixel) and weights, the
 * count of in-bounds taps down and across, and the steps (floats) between taps, between the run's pixels and
 * between their outputs. */
typedef struct {
    const float *x, *w, *xend;
    int64_t nki, nkj, xrs, xcs, xps, wrs, wcs, c;
} nn_dw_taps;

/* P pixels (a constant at each call) times V vectors (a constant) of channels at c0, the last vector's first
 * ``last`` (1..8) lanes live: bias, every in-bounds tap, store. ``checked``: input loads that may reach past
 * the end of the input (nn_dw_load). */
NN_INLINE void nn_dw_tile(const nn_dw_taps *t, const float *restrict bias, float *restrict y, int64_t c0,
                          int64_t last, const int V, const int P, const int checked) {
    nn_v8 acc[8];
    for (int q = 0; q < P; q++)
        for (int v = 0; v < V; v++) acc[q * V + v] = bias ? *(const nn_v8 *)(bias + c0 + 8 * v) : (nn_v8){0};
    for (int64_t ki = 0; ki < t->nki; ki++) {
        const float *xr = t->x + ki * t->xrs + c0, *wr = t->w + ki * t->wrs + c0;
        for (int64_t kj = 0; kj < t->nkj; kj++) {
            const float *xs = xr + kj * t->xcs, *ws = wr + kj * t->wcs;
            nn_v8 wv[NN_DW_VECS];
            for (int v = 0; v < V; v++) wv[v] = *(const nn_v8 *)(ws + 8 * v);
            for (int q = 0; q < P; q++)
                for (int v = 0; v < V; v++) {
                    const float *xp = xs + q * t->xps + 8 * v;
                    acc[q * V + v] += (checked ? nn_dw_load(xp, t->xend) : *(const nn_v8 *)xp) * wv[v];
                }
        }
    }
    for (int q = 0; q < P; q++) {
        float *yp = y + q * t->c + c0;
        for (int v = 0; v < V - 1; v++) *(nn_v8 *)(yp + 8 * v) = acc[q * V + v];
        if (last == 8) {
            *(nn_v8 *)(yp + 8 * (V - 1)) = acc[q * V + V - 1];
        } else {
            float out[8];
            memcpy(out, &acc[q * V + V - 1], sizeof out);
            for (int64_t ch = 0; ch < last; ch++) yp[8 * (V - 1) + ch] = out[ch];
        }
    }
}

/* One block of V vectors at c0 (last: as nn_dw_tile) of one pixel, or (tile) of NN_DW_SPAN pixels in tiles of
 * NN_DW_TILE(V) */
NN_INLINE void nn_dw_block(const nn_dw_taps *t, const float *restrict bias, float *restrict y, int64_t c0,
                           int64_t last, const int V, const int tile, const int checked) {
    if (!tile) {
        nn_dw_tile(t, bias, y, c0, last, V, 1, checked);
        return;
    }
    for (int64_t q = 0; q < NN_DW_SPAN; q += NN_DW_TILE(V)) {
        nn_dw_taps tq = *t;
        tq.x += q * t->xps;
        nn_dw_tile(&tq, bias, y + q * t->c, c0, last, V, NN_DW_TILE(V), 0);
    }
}

/* Every channel of one pixel or (tile) of NN_DW_SPAN pixels; ``checked`` as in nn_dw_tile. */
NN_INLINE void nn_dw_pixels(const nn_dw_taps *t, const float *restrict bias, float *restrict y, const int tile,
                            const int checked) {
    const int64_t c = t->c, full = c % (8 * NN_DW_VECS) ? c - c % (8 * NN_DW_VECS) : c;
    int64_t c0 = 0;
    for (; c0 < full; c0 += 8 * NN_DW_VECS) nn_dw_block(t, bias, y, c0, 8, NN_DW_VECS, tile, checked);
    if (c0 == c) return;
    const int64_t vecs = (c - c0 + 7) / 8, last = c - c0 - 8 * (vecs - 1);
    switch (vecs) {
    case 3: nn_dw_block(t, bias, y, c0, last, 3, tile, checked); break;
    case 2: nn_dw_block(t, bias, y, c0, last, 2, tile, checked); break;
    default: nn_dw_block(t, bias, y, c0, last, 1, tile, checked); break;
    }
}

/* [first, stop) of the taps 0..k-1 whose input index start + tap * d lies in [0, size) */
NN_INLINE void nn_dw_clip(int64_t start, int64_t d, int64_t k, int64_t size, int64_t *first, int64_t *stop) {
    const int64_t a = start < 0 ? (-start + d - 1) / d : 0;
    int64_t b = start + (k - 1) * d < size ? k : (size - start + d - 1) / d;
    *first = a, *stop = b < a ? a : b;
}

/* One output row (image b, row i) of padded weights wt (kh, kw, nn_dw_cp(c)) and bias: the pixels whose window
 * lies inside the input in spans of NN_DW_SPAN, the others one by one, then the activation over the row. */
NN_INLINE void nn_dw_row(const float *restrict x, float *restrict y, const float *restrict wt,
                         const float *restrict bias, const nn_dw_params *p, int64_t b, int64_t i) {
    const int64_t c = p->c, cp = nn_dw_cp(c), ow = p->ow, w = p->w, sw = p->sw;
    float *yrow = y + (b * p->oh + i) * ow * c;
    const float *ximg = x + b * p->h * w * c, *xend = x + p->n * p->h * w * c;
    int64_t ki0, ki1;
    nn_dw_clip(i * p->sh - p->pad_top, p->dh, p->kh, p->h, &ki0, &ki1);
    const int64_t ih0 = i * p->sh - p->pad_top + ki0 * p->dh;
    nn_dw_taps t = {ximg, wt, xend, ki1 - ki0, 0, p->dh * w * c, p->dw * c, sw * c, p->kw * cp, cp, c};
    /* [ja, jb): the pixels whose every column tap lies inside the input */
    const int64_t ja = (p->pad_left + sw - 1) / sw;
    const int64_t reach = w - 1 - (p->kw - 1) * p->dw + p->pad_left;
    const int64_t jb = reach < 0 ? 0 : reach / sw + 1 < ow ? reach / sw + 1 : ow;
    for (int64_t j = 0; j < ow;) {
        const int64_t left = j * sw - p->pad_left;
        int64_t kj0, kj1;
        nn_dw_clip(left, p->dw, p->kw, w, &kj0, &kj1);
        t.nkj = kj1 - kj0;
        if (t.nki > 0 && t.nkj > 0) {
            t.x = ximg + (ih0 * w + left + kj0 * p->dw) * c;
            t.w = wt + (ki0 * p->kw + kj0) * cp;
        } else {
            t.x = ximg, t.w = wt, t.nkj = 0;      /* the whole window in the padding: the bias alone */
        }
        /* the input the run's taps read reaches at most a vector past its last pixel's last channel: past the
         * input's end only near it, and only with a narrower last vector */
        const float *reach_x = t.x + (t.nki - 1) * t.xrs + (t.nkj - 1) * t.xcs + c + 8;
        const int span = j >= ja && j + NN_DW_SPAN <= jb && t.nki > 0 &&
                         (c % 8 == 0 || reach_x + (NN_DW_SPAN - 1) * t.xps <= xend);
        const int64_t n = span ? NN_DW_SPAN : 1;
        float *yp = yrow + j * c;
        if (span) nn_dw_pixels(&t, bias, yp, 1, 0);
        else if (c % 8 != 0 && reach_x > xend) nn_dw_pixels(&t, bias, yp, 0, 1);
        else nn_dw_pixels(&t, bias, yp, 0, 0);
        j += n;
    }
    nn_apply(yrow, ow * c, &p->act);
}

/* Output rows [r0, r1) of the flattened (N * OH) rows: the caller's thread pool splits a convolution
 * into row ranges. wt and bias padded by nn_dw_pad. */
NN_API NN_CLONES void nn_dwconv_nhwc_f32(const float *x, float *y, const float *wt, const float *bias,
                                         const nn_dw_params *p, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) nn_dw_row(x, y, wt, bias, p, r / p->oh, r % p->oh);
}

/* The weights (kh, kw, c) and bias (c, or NULL) copied with zeros to whole vectors: weights (kh, kw,
 * nn_dw_cp(c)) then bias, in one new block (PyMem_Free), or NULL when out of memory. */
static float *nn_dw_pad(const float *wt, const float *bias, int64_t kh, int64_t kw, int64_t c) {
    const int64_t cp = nn_dw_cp(c), taps = kh * kw;
    float *out = PyMem_Calloc((size_t)(taps * cp + cp), sizeof(float));
    if (out == NULL) return NULL;
    for (int64_t k = 0; k < taps; k++) memcpy(out + k * cp, wt + k * c, (size_t)c * sizeof(float));
    if (bias) memcpy(out + taps * cp, bias, (size_t)c * sizeof(float));
    return out;
}
