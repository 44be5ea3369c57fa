/* The direct channels-last convolution's two walks over output pixels; included once from kernels.c after
 * nn_direct_tile, which runs a tile whose windows lie inside the input row. nn_direct_task picks the walk: rows of
 * at most NN_DIRECT_PIXEL_WALK_MAX_OW pixels take the pixel walk, wider ones the row walk.
 *
 * The row walk (nn_direct_nhwc_rows_f32): per output row and block of output channels, the row's inside pixels in
 * tiles of 6, 4, 2 and 1, its edge pixels one at a time (one chain of dependent multiply-adds per vector, a
 * quarter of the speed), which costs little on a wide row.
 *
 * The pixel walk (nn_direct_nhwc_pixels_f32): a part's output pixels (a range of the flattened N * OH * OW), in
 * chunks of rows that stay in L1, go in tiles of NN_DIRECT_TILE, one block of 16 (or 8) output channels at a
 * time over the chunk. A tile of one output row whose windows lie inside the row runs nn_direct_tile. Every other
 * run of up to NN_DIRECT_TILE consecutive pixels (pixels whose window crosses the left or right edge, the rest of
 * a row, pixels of two rows) runs nn_direct_ptr_tile: a table gives each pixel's input pixel per tap, a row of
 * zeros (nn_zero_row) where the tap falls into the padding, so such pixels share one tile of independent chains
 * (2 pixels in 14 of a padded 14-wide map are edge pixels, and all of a 7-wide one). A convolution whose table or
 * zero row would not hold (more than NN_DIRECT_MAX_TAPS taps, more than NN_ZERO_ROW_FLOATS input channels) runs
 * those pixels one at a time.
 */

#define NN_DIRECT_MAX_TAPS 64

/* T tile pixels: acc[t] += sum over the listed taps k and channels ci of src[k][t][ci] * wk[k][ci][0:8V]; then
 * stored. T and V are constants at every (inlined) call. */
NN_INLINE void nn_direct_ptr_tile(const float *const *src, const float *const *wk, float *restrict yp,
                                  const float *restrict b16, int64_t c, int64_t taps, int64_t ldy, int64_t ldc,
                                  int64_t keep, const int T, const int V) {
    const int64_t bw = 8 * V;
    nn_v8 acc[NN_DIRECT_TILE][2];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        acc[t][0] = nn_load8(b16);
        acc[t][1] = nn_load8(b16 + 8);
    }
    for (int64_t k = 0; k < taps; k++) {
        const float *const *s = src + k * NN_DIRECT_TILE;
        const float *restrict ws = wk[k];
        for (int64_t ci = 0; ci < c; ci++) {
            const nn_v8 w0 = nn_load8(ws + ci * bw);
            const nn_v8 w1 = V > 1 ? nn_load8(ws + ci * bw + 8) : w0;
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const float xv = s[t][ci];
                acc[t][0] += xv * w0;
                if (V > 1) acc[t][1] += xv * w1;
            }
        }
    }
    nn_direct_store(acc, yp, ldy, ldc, keep, T, V);
}

/* kernel rows [ki0, ki1) whose input row lies inside for the output row starting at input row ``top`` */
NN_INLINE void nn_direct_rows(const nn_direct_params *p, int64_t top, int64_t *ki0, int64_t *ki1) {
    *ki0 = 0, *ki1 = p->kh;
    while (*ki0 < *ki1 && top + *ki0 * p->dh < 0) (*ki0)++;
    while (*ki1 > *ki0 && top + (*ki1 - 1) * p->dh >= p->h) (*ki1)--;
}

/* the pixels [px, px + real) of the flattened output that no whole inside tile takes, for the channel block at mb
 * (V vectors): a smaller inside tile when they are one row's rest with windows inside it ([jlo, jhi)), else
 * through a table of sources, or one pixel at a time when none fits */
NN_INLINE void nn_direct_edge_tile(const float *restrict x, float *restrict y, const float *restrict wt,
                                   const float *restrict b16, const nn_direct_params *p, int64_t px, int64_t real,
                                   int64_t jlo, int64_t jhi, int64_t mb, const int V) {
    const int64_t ow = p->ow, taps = p->kh * p->kw, c = p->c;
    const int64_t r0 = px / ow, j0 = px - r0 * ow;
    if (j0 + real <= ow && j0 >= jlo && j0 + real <= jhi) {
        /* a row's rest whose windows lie inside the row (a 112-wide 1x1's last 4 pixels): no table to build */
        const int64_t top = (r0 % p->oh) * p->sh - p->pad_top;
        int64_t ki0, ki1;
        nn_direct_rows(p, top, &ki0, &ki1);
        const float *ximg = x + (r0 / p->oh) * p->h * p->w * c;
        float *yp = y + px * p->ldy + mb * p->ldc;
        const int64_t left = j0 * p->sw - p->pad_left;
        switch (real) {
        case 1: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, 1, V, 0); break;
        case 2: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, 2, V, 0); break;
        case 3: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, 3, V, 0); break;
        case 4: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, 4, V, 0); break;
        case 5: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, 5, V, 0); break;
        default: nn_direct_tile(ximg, yp, wt, b16, p, ki0, ki1, top, left, mb, NN_DIRECT_TILE, V, 0); break;
        }
        return;
    }
    /* NOTE: a channels-first input (ldxc > 1) has no zero row to point at (its channels lie a plane apart) */
    if (taps > NN_DIRECT_MAX_TAPS || c > NN_ZERO_ROW_FLOATS || p->ldxc != 1) {
        for (int64_t q = px; q < px + real; q++) {
            const int64_t r = q / ow, j = q % ow, top = (r % p->oh) * p->sh - p->pad_top;
            int64_t ki0, ki1;
            nn_direct_rows(p, top, &ki0, &ki1);
            nn_direct_tile(x + (r / p->oh) * p->h * p->w * c, y + q * p->ldy + mb * p->ldc, wt, b16, p, ki0, ki1, top,
                           j * p->sw - p->pad_left, mb, 1, V, 1);
        }
        return;
    }
    /* the taps that reach inside the input for some pixel of the tile: their weights and each pixel's source */
    const float *src[NN_DIRECT_MAX_TAPS * NN_DIRECT_TILE], *wk[NN_DIRECT_MAX_TAPS];
    int64_t top[NN_DIRECT_TILE], left[NN_DIRECT_TILE];
    const float *img[NN_DIRECT_TILE];
    for (int64_t t = 0; t < real; t++) {
        const int64_t q = px + t, r = q / ow, b = r / p->oh;
        top[t] = (r - b * p->oh) * p->sh - p->pad_top;
        left[t] = (q - r * ow) * p->sw - p->pad_left;
        img[t] = x + b * p->h * p->w * c;
    }
    const int64_t bw = V == 2 ? 16 : 8;
    int64_t used = 0;
    for (int64_t ki = 0; ki < p->kh; ki++) {
        for (int64_t kj = 0; kj < p->kw; kj++) {
            const float **s = src + used * NN_DIRECT_TILE;
            int any = 0;
            for (int64_t t = 0; t < real; t++) {
                const int64_t ih = top[t] + ki * p->dh, iw = left[t] + kj * p->dw;
                const int inside = ih >= 0 && ih < p->h && iw >= 0 && iw < p->w;
                s[t] = inside ? img[t] + (ih * p->w + iw) * c : nn_zero_row;
                any |= inside;
            }
            if (any) wk[used++] = wt + taps * c * mb + (ki * p->kw + kj) * c * bw;
        }
    }
    /* the smallest tile that holds them: 4 pixels keep 8 chains with two vectors, 6 with one */
    float *yp = y + px * p->ldy + mb * p->ldc;
    const int64_t keep = p->m - mb;
    if (real == 1)
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, 1, V);
    else if (real == 2)
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, 2, V);
    else if (real == 3)
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, 3, V);
    else if (real == 4)
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, 4, V);
    else if (real == 5)
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, 5, V);
    else
        nn_direct_ptr_tile(src, wk, yp, b16, c, used, p->ldy, p->ldc, keep, NN_DIRECT_TILE, V);
}

/* the pending run of ``*count`` consecutive pixels from ``start`` (none when 0) as one edge tile */
NN_INLINE void nn_direct_flush(const float *restrict x, float *restrict y, const float *restrict wt,
                               const float *restrict b16, const nn_direct_params *p, int64_t start, int64_t *count,
                               int64_t jlo, int64_t jhi, int64_t mb, int V) {
    if (*count == 0) return;
    if (V == 2)
        nn_direct_edge_tile(x, y, wt, b16, p, start, *count, jlo, jhi, mb, 2);
    else
        nn_direct_edge_tile(x, y, wt, b16, p, start, *count, jlo, jhi, mb, 1);
    *count = 0;
}

/* the activation over the finished output pixels [p0, p1) of the flattened (N * OH * OW) pixels: one run when they
 * are contiguous, else a run per pixel (a channel slice) or per channel plane (NCHW, one image) */
NN_INLINE void nn_direct_activate(const nn_direct_params *p, float *y, int64_t p0, int64_t p1) {
    const int64_t m = p->m, ld = p->ldy;
    if (p->ldc != 1)
        for (int64_t k = 0; k < m; k++) nn_apply(y + k * p->ldc + p0, p1 - p0, &p->act);
    else if (ld == m)
        nn_apply(y + p0 * m, (p1 - p0) * m, &p->act);
    else
        for (int64_t q = p0; q < p1; q++) nn_apply(y + q * ld, m, &p->act);
}

/* output pixels [p0, p1) of the flattened (N * OH * OW) pixels, one chunk (below) */
NN_INLINE void nn_direct_pixels(const float *x, float *y, const float *wt, const float *bias,
                                const nn_direct_params *p, int64_t p0, int64_t p1) {
    const int64_t m = p->m, ow = p->ow, ld = p->ldy, sw = p->sw;
    if (p1 <= p0) return;
    /* pixels j in [jlo, jhi) of a row have every tap of their window inside the row; the row's inside tiles
     * start at jlo + k * NN_DIRECT_TILE and take ``inside`` pixels, those that lie in [p0, p1) */
    const int64_t last = p->w - 1 - (p->kw - 1) * p->dw + p->pad_left;    /* largest j * sw inside */
    const int64_t jhi = NN_MIN(last < 0 ? 0 : last / sw + 1, ow);
    const int64_t jlo = NN_MIN((p->pad_left + sw - 1) / sw, jhi);
    const int64_t inside = (jhi - jlo) / NN_DIRECT_TILE * NN_DIRECT_TILE;
    for (int64_t mb = 0; mb < m; mb += 16) {
        float b16[16] __attribute__((aligned(32))) = {0};
        for (int64_t k = mb; k < NN_MIN(m, mb + 16); k++) b16[k - mb] = bias ? bias[k] : 0.0f;
        const int V = p->mp - mb >= 16 ? 2 : 1;
        for (int64_t r = p0 / ow; r <= (p1 - 1) / ow && inside > 0; r++) {
            const int64_t top = (r % p->oh) * p->sh - p->pad_top;
            int64_t ki0, ki1;
            nn_direct_rows(p, top, &ki0, &ki1);
            const float *ximg = x + (r / p->oh) * p->h * p->w * p->c;
            float *yrow = y + r * ow * ld;
            for (int64_t j = jlo; j < jlo + inside; j += NN_DIRECT_TILE) {
                if (r * ow + j < p0 || r * ow + j + NN_DIRECT_TILE > p1) continue;
                if (V == 2)
                    nn_direct_tile(ximg, yrow + j * ld + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left,
                                   mb, NN_DIRECT_TILE, 2, 0);
                else
                    nn_direct_tile(ximg, yrow + j * ld + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb,
                                   NN_DIRECT_TILE, 1, 0);
            }
        }
        /* the pixels no inside tile took, in runs of consecutive pixels of at most NN_DIRECT_TILE */
        int64_t start = 0, count = 0;
        /* j: q's column, kept without a division per pixel (the scan ran a 1x1 over a 112-wide map 6% slower) */
        for (int64_t q = p0, j = p0 % ow; q < p1;) {
            if (j >= jlo && j < jlo + inside && (j - jlo) % NN_DIRECT_TILE == 0 && q + NN_DIRECT_TILE <= p1) {
                nn_direct_flush(x, y, wt, b16, p, start, &count, jlo, jhi, mb, V);   /* an inside tile above took it */
                q += NN_DIRECT_TILE;
                j += NN_DIRECT_TILE;
            } else {
                if (count++ == 0) start = q;
                if (count == NN_DIRECT_TILE) nn_direct_flush(x, y, wt, b16, p, start, &count, jlo, jhi, mb, V);
                q++;
                j++;
            }
            if (j == ow) j = 0;
        }
        nn_direct_flush(x, y, wt, b16, p, start, &count, jlo, jhi, mb, V);
    }
    nn_direct_activate(p, y, p0, p1);
}

/* Bytes of input and output rows a chunk of output rows touches: the blocks of output channels loop inside a
 * chunk, so its rows stay in L1 between them (one block's sweep over a whole 112x112 map ran a 16 -> 64 1x1 at
 * 1.5x the time of the row-by-row walk). */
#define NN_DIRECT_CHUNK_BYTES (32 << 10)

/* The pixel walk: output pixels [p0, p1) of the flattened (N * OH * OW) pixels, in chunks of whole output rows
 * (the first may start mid-row) */
NN_API NN_CLONES void nn_direct_nhwc_pixels_f32(const float *x, float *y, const float *wt, const float *bias,
                                         const nn_direct_params *p, int64_t p0, int64_t p1) {
    const int64_t row_bytes = (p->sh * p->w * p->c + p->ow * p->m) * (int64_t)sizeof(float);
    const int64_t rows = NN_MAX(1, NN_DIRECT_CHUNK_BYTES / NN_MAX(1, row_bytes));
    for (int64_t c0 = p0; c0 < p1;) {
        const int64_t c1 = NN_MIN(p1, (c0 / p->ow + rows) * p->ow);
        nn_direct_pixels(x, y, wt, bias, p, c0, c1);
        c0 = c1;
    }
}

/* Rows at most this wide take the pixel walk, wider ones the row walk: the tables and the scan cost more than the
 * edges save on a wide row. 1 thread, one process, old row walk / pixel walk (us): 128 -> 128 3x3 at 7^2 274 / 161,
 * 48 -> 48 at 16^2 143 / 117, 64 -> 64 at 14^2 182 / 174, 32 -> 32 at 28^2 177 / 162; but 16 -> 16 at 56^2
 * 167 / 172, a 3 -> 16 stem at 112^2 145 / 157, 16 -> 64 1x1 at 112^2 391 / 442. */
#define NN_DIRECT_PIXEL_WALK_MAX_OW 32

/* one output row's pixels for the channel block at mb (V vectors) */
NN_INLINE void nn_direct_row_block(const float *restrict ximg, float *restrict yrow, const float *restrict wt,
                               const float *restrict b16, const nn_direct_params *p, int64_t ki0, int64_t ki1,
                               int64_t top, int64_t mb, const int V) {
    const int64_t ow = p->ow, sw = p->sw, m = p->ldy;     /* m: the output's pixel stride */
    /* pixels [jlo, jhi) have every tap of their window inside the row */
    int64_t jlo = (p->pad_left + sw - 1) / sw;
    const int64_t last = p->w - 1 - (p->kw - 1) * p->dw + p->pad_left;    /* largest j * sw inside */
    int64_t jhi = last < 0 ? 0 : last / sw + 1;
    jhi = NN_MIN(jhi, ow);
    jlo = NN_MIN(jlo, jhi);
    int64_t j = 0;
    for (; j < jlo; j++)
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb, 1, V, 1);
    for (; j + NN_DIRECT_TILE <= jhi; j += NN_DIRECT_TILE)
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb,
                       NN_DIRECT_TILE, V, 0);
    /* the rest of the interior in tiles of 4, 2, 1 (a 7-wide map's 5 inner pixels, else one at a time, ran at half
     * the speed: one pixel is one chain of dependent FMAs per vector) */
    if (j + 4 <= jhi) {
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb, 4, V, 0);
        j += 4;
    }
    if (j + 2 <= jhi) {
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb, 2, V, 0);
        j += 2;
    }
    for (; j < jhi; j++)
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb, 1, V, 0);
    for (; j < ow; j++)
        nn_direct_tile(ximg, yrow + j * m + mb * p->ldc, wt, b16, p, ki0, ki1, top, j * sw - p->pad_left, mb, 1, V, 1);
}

/* The row walk: output rows [r0, r1) of the flattened (N * OH) rows, edge pixels one at a time. */
NN_API NN_CLONES void nn_direct_nhwc_rows_f32(const float *x, float *y, const float *wt, const float *bias,
                                         const nn_direct_params *p, int64_t r0, int64_t r1) {
    const int64_t m = p->m, ow = p->ow, ld = p->ldy;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / p->oh, i = r % p->oh, top = i * p->sh - p->pad_top;
        /* kernel rows whose input row lies inside: ki0 <= ki < ki1 */
        int64_t ki0 = 0, ki1 = p->kh;
        while (ki0 < ki1 && top + ki0 * p->dh < 0) ki0++;
        while (ki1 > ki0 && top + (ki1 - 1) * p->dh >= p->h) ki1--;
        const float *ximg = x + b * p->h * p->w * p->c;
        float *yrow = y + r * ow * ld;
        for (int64_t mb = 0; mb < m; mb += 16) {
            float b16[16] __attribute__((aligned(32))) = {0};
            for (int64_t k = mb; k < NN_MIN(m, mb + 16); k++) b16[k - mb] = bias ? bias[k] : 0.0f;
            if (p->mp - mb >= 16)
                nn_direct_row_block(ximg, yrow, wt, b16, p, ki0, ki1, top, mb, 2);
            else
                nn_direct_row_block(ximg, yrow, wt, b16, p, ki0, ki1, top, mb, 1);
        }
        nn_direct_activate(p, y, r * ow, (r + 1) * ow);
    }
}

