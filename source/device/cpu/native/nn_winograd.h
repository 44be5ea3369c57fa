/* Winograd F(4x4, 3x3) tile transforms, channels last (kernels/_conv_nhwc.py ConvWinogradNHWC; included by
 * kernels.c after the pool and nn_activation_f32).
 *
 * The convolution of a band (images b0:b1, tile rows t0:t1, every tile column) is three steps: the input
 * transform here (V = B^T d B of every 6x6 input tile, read in place from the NHWC input with the padding as
 * zeros: no padded copy), the 36 products V[e] (k, C) @ U[e] (C, M) on the BLAS (the Python side), and the
 * output transform here (Y = A^T Z A, cropped at the map's edge, with the bias and the fused activation while
 * the tile's channels are in L1). Both transforms are separable: each 1-D pass of six points is a handful of
 * adds with the points 0, 1, -1, 2, -2 and infinity (Lavin & Gray), against the 36x36 and 16x36 Kronecker
 * GEMMs over every tile and channel that numpy ran before.
 *
 * Layouts: V (36, k, C) and Z (36, k, M), element e = 6 * row + column of the tile's transform, tile
 * t = ((image - b0) * rows + tile row - t0) * tw + tile column (k = images * rows * tw). */

#define NN_WG_CB 64     /* channels a step: the tile's 36 x 64 floats of temporaries stay in L1 */

typedef struct {
    const float *x;     /* (n, h, w, ldx): NHWC, C channels at each pixel's start */
    float *v;           /* (36, k, c) */
    int64_t ldx, h, w, c, pt, pl, tw, b0, nb, t0, nr;
} nn_wg_in_args;

typedef struct {
    const float *z;     /* (36, k, m) */
    float *y;           /* (n, oh, ow, ldy): NHWC, M channels at each pixel's start */
    const float *bias;  /* (m,) or NULL */
    const nn_act *act;
    int64_t ldy, oh, ow, m, tw, b0, nb, t0, nr;
} nn_wg_out_args;

static const float nn_wg_zeros[NN_WG_CB];

/* one 1-D pass of B^T over six rows of L channels: o_i = sum_j BT[i][j] d_j */
NN_INLINE void nn_wg_bt(const float *restrict d0, const float *restrict d1, const float *restrict d2,
                        const float *restrict d3, const float *restrict d4, const float *restrict d5, float *restrict o0,
                        float *restrict o1, float *restrict o2, float *restrict o3, float *restrict o4,
                        float *restrict o5, int64_t L) {
#pragma omp simd
    for (int64_t cc = 0; cc < L; cc++) {
        const float p = d4[cc] - 4.0f * d2[cc], s = d3[cc] - 4.0f * d1[cc];
        const float u = d4[cc] - d2[cc], w = 2.0f * (d3[cc] - d1[cc]);
        o0[cc] = 4.0f * d0[cc] - 5.0f * d2[cc] + d4[cc];
        o1[cc] = p + s;
        o2[cc] = p - s;
        o3[cc] = u + w;
        o4[cc] = u - w;
        o5[cc] = 4.0f * d1[cc] - 5.0f * d3[cc] + d5[cc];
    }
}

/* one 1-D pass of A^T over six rows of L channels, plus ``add`` (L floats: the bias, or zeros) */
NN_INLINE void nn_wg_at(const float *restrict z0, const float *restrict z1, const float *restrict z2,
                        const float *restrict z3, const float *restrict z4, const float *restrict z5,
                        const float *restrict add, float *restrict o0, float *restrict o1, float *restrict o2,
                        float *restrict o3, int64_t L) {
#pragma omp simd
    for (int64_t cc = 0; cc < L; cc++) {
        const float sp = z1[cc] + z2[cc], sm = z1[cc] - z2[cc];
        const float tp = z3[cc] + z4[cc], tm = z3[cc] - z4[cc];
        o0[cc] = z0[cc] + sp + tp + add[cc];
        o1[cc] = sm + 2.0f * tm + add[cc];
        o2[cc] = sp + 4.0f * tp + add[cc];
        o3[cc] = sm + 8.0f * tm + z5[cc] + add[cc];
    }
}

/* tiles [lo, hi) of the band: V = B^T d B */
static NN_CLONES void nn_wg_input_tiles(const nn_wg_in_args *a, int64_t lo, int64_t hi) {
    const int64_t k = a->nb * a->nr * a->tw, c = a->c, plane = k * c;
    float t[6][6][NN_WG_CB];        /* t[row][j]: the transform along the columns of each input row */
    for (int64_t tile = lo; tile < hi; tile++) {
        const int64_t q = tile % a->tw, r = (tile / a->tw) % a->nr, i = tile / (a->tw * a->nr);
        const float *img = a->x + (a->b0 + i) * a->h * a->w * a->ldx;
        const int64_t y0 = 4 * (a->t0 + r) - a->pt, x0 = 4 * q - a->pl;
        for (int64_t c0 = 0; c0 < c; c0 += NN_WG_CB) {
            const int64_t L = NN_MIN(NN_WG_CB, c - c0);
            for (int64_t row = 0; row < 6; row++) {
                const int64_t yy = y0 + row;
                const float *d[6];
                for (int64_t col = 0; col < 6; col++) {
                    const int64_t xx = x0 + col;
                    d[col] = yy >= 0 && yy < a->h && xx >= 0 && xx < a->w ? img + (yy * a->w + xx) * a->ldx + c0
                                                                          : nn_wg_zeros;
                }
                const float *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2], *restrict d3 = d[3],
                                      *restrict d4 = d[4], *restrict d5 = d[5];
                float *restrict o0 = t[row][0], *restrict o1 = t[row][1], *restrict o2 = t[row][2],
                                *restrict o3 = t[row][3], *restrict o4 = t[row][4], *restrict o5 = t[row][5];
                nn_wg_bt(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5, L);
            }
            for (int64_t j = 0; j < 6; j++) {
                const float *restrict d0 = t[0][j], *restrict d1 = t[1][j], *restrict d2 = t[2][j],
                                      *restrict d3 = t[3][j], *restrict d4 = t[4][j], *restrict d5 = t[5][j];
                float *restrict base = a->v + j * plane + tile * c + c0;
                float *restrict o0 = base, *restrict o1 = base + 6 * plane, *restrict o2 = base + 12 * plane,
                                *restrict o3 = base + 18 * plane, *restrict o4 = base + 24 * plane,
                                *restrict o5 = base + 30 * plane;
                nn_wg_bt(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5, L);
            }
        }
    }
}

/* tiles [lo, hi) of the band: Y = A^T Z A + bias, activated, cropped to the output map */
static NN_CLONES void nn_wg_output_tiles(const nn_wg_out_args *a, int64_t lo, int64_t hi) {
    const int64_t k = a->nb * a->nr * a->tw, m = a->m, plane = k * m;
    float t[6][4][NN_WG_CB];        /* t[row][s]: the transform along the columns of each product row */
    float o[4][4][NN_WG_CB];
    for (int64_t tile = lo; tile < hi; tile++) {
        const int64_t q = tile % a->tw, r = (tile / a->tw) % a->nr, i = tile / (a->tw * a->nr);
        const int64_t oy0 = 4 * (a->t0 + r), ox0 = 4 * q;
        const int64_t rows = NN_MIN(4, a->oh - oy0), cols = NN_MIN(4, a->ow - ox0);
        if (rows <= 0 || cols <= 0) continue;
        float *img = a->y + (a->b0 + i) * a->oh * a->ow * a->ldy;
        for (int64_t m0 = 0; m0 < m; m0 += NN_WG_CB) {
            const int64_t L = NN_MIN(NN_WG_CB, m - m0);
            for (int64_t row = 0; row < 6; row++) {
                const float *restrict base = a->z + 6 * row * plane + tile * m + m0;
                const float *restrict z0 = base, *restrict z1 = base + plane, *restrict z2 = base + 2 * plane,
                                      *restrict z3 = base + 3 * plane, *restrict z4 = base + 4 * plane,
                                      *restrict z5 = base + 5 * plane;
                float *restrict o0 = t[row][0], *restrict o1 = t[row][1], *restrict o2 = t[row][2],
                                *restrict o3 = t[row][3];
                nn_wg_at(z0, z1, z2, z3, z4, z5, nn_wg_zeros, o0, o1, o2, o3, L);
            }
            for (int64_t s = 0; s < 4; s++) {
                const float *restrict z0 = t[0][s], *restrict z1 = t[1][s], *restrict z2 = t[2][s],
                                      *restrict z3 = t[3][s], *restrict z4 = t[4][s], *restrict z5 = t[5][s];
                float *restrict o0 = o[0][s], *restrict o1 = o[1][s], *restrict o2 = o[2][s], *restrict o3 = o[3][s];
                const float *restrict bias = a->bias ? a->bias + m0 : nn_wg_zeros;
                nn_wg_at(z0, z1, z2, z3, z4, z5, bias, o0, o1, o2, o3, L);
            }
            for (int64_t rr = 0; rr < rows; rr++)
                for (int64_t s = 0; s < cols; s++) {
                    float *dst = img + ((oy0 + rr) * a->ow + ox0 + s) * a->ldy + m0;
                    if (a->act->kind != NN_ACT_NONE)
                        nn_activation_f32(o[rr][s], dst, L, a->act);
                    else
                        memcpy(dst, o[rr][s], (size_t)L * sizeof(float));
                }
        }
    }
}

static void nn_wg_input_task(const void *args, int64_t part, int64_t parts) {
    const nn_wg_in_args *a = (const nn_wg_in_args *)args;
    int64_t lo, hi;
    nn_split(a->nb * a->nr * a->tw, 1, part, parts, &lo, &hi);
    nn_wg_input_tiles(a, lo, hi);
}

static void nn_wg_output_task(const void *args, int64_t part, int64_t parts) {
    const nn_wg_out_args *a = (const nn_wg_out_args *)args;
    int64_t lo, hi;
    nn_split(a->nb * a->nr * a->tw, 1, part, parts, &lo, &hi);
    nn_wg_output_tiles(a, lo, hi);
}
