/* Exact integer Winograd F(2x2, 3x3) for group-1, 3x3, stride-1, dilation-1 convolutions on NHWC 8-bit codes
 * (included by qkernels.c, whose epilogues, micro-kernel and thread driver it uses).
 *
 * With 2G = [[2,0,0],[1,1,1],[1,-1,1],[0,0,2]] (twice the usual G: every entry an integer), B^T =
 * [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]] and A^T = [[1,1,1,0],[0,1,-1,-1]], for each 4 x 4 input tile d and
 * output channel o
 *   4 y = A^T [ sum_c (2G g_oc 2G^T) .* (B^T (d_c - za) B) ] A
 * exactly, y the 2 x 2 direct sums of (x - za) w (w's zero point must be 0). The weights' U = 2G g 2G^T are
 * int16 (|U| <= 9 * 128), packed once (integer.py: the avx2 wide layout, panels of 16 columns in K pairs); the
 * tiles' V = B^T (d - za) B are int16 (|V| <= 4 * 255), the padding read as the zero point (0 once za is
 * subtracted, as the direct packer's pad bytes). The 16 products M_xi = V_xi U_xi run on the avx2 wide
 * micro-kernel (vpmaddwd, pairs of channels, int32 sums) or its C twin. |M| <= C * 1152 * 1020 < 2^31 for C <=
 * QWINO_MAX_C; the output transform runs in wrapping uint32, so 4 y, which obeys the same bound, is exact, and
 * the exact shift by 2 gives y. y then takes the same epilogue as the direct conv (bias, requantization, clamp,
 * table) with no zero-point terms: the sums already have za subtracted. */

#define QWINO_MAX_C 1827     /* C * 9 * 255 * 128 * 4 <= 2^31 - 1: 4 y and every M exact in int32 */
#define QWINO_NR 16

typedef struct {
    const uint8_t *x;
    const int16_t *u;            /* [16][panels][kp / 2][16][2] */
    int a_signed;
    int32_t za;                  /* x's zero point as its type reads it */
    uint8_t pad;                 /* its byte */
    int64_t n, h, w, c, kp, oh, ow, th, tw, pt, pl, m, panels, tiles;
    int64_t chunk;               /* tiles per step of a part */
    epilogue_t e;
    int isa;
    int parts;
    int *failed;
} wino_t;

/* c[i * 16 + j] = sum over k < kp of a[i * lda + k] * b[(k / 2) * 32 + 2 j + k % 2], int16 operands: the C twin
   of micro_avx2 (wide) for the portable instruction set */
static void wino_micro_c(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    const int16_t *a = av, *b = bv;
    for (int i = 0; i < mr; i++) {
        int32_t acc[QWINO_NR] = {0};
        const int16_t *ai = a + i * lda;
        for (int64_t g = 0; g < kp / 2; g++) {
            const int16_t *bg = b + g * 32;
            for (int j = 0; j < QWINO_NR; j++)
                acc[j] += ai[2 * g] * bg[2 * j] + ai[2 * g + 1] * bg[2 * j + 1];
        }
        memcpy(c + i * QWINO_NR, acc, sizeof acc);
    }
}

/* V of one channel from the 16 taps d[r * 4 + col] (za subtracted) into v[xi * ldv] */
#define QWINO_V(T, d, store)                                                                                 \
    do {                                                                                                      \
        T t_[16];                                                                                             \
        for (int col_ = 0; col_ < 4; col_++) {                                                                \
            t_[0 + col_] = d[0 + col_] - d[8 + col_];                                                         \
            t_[4 + col_] = d[4 + col_] + d[8 + col_];                                                         \
            t_[8 + col_] = d[8 + col_] - d[4 + col_];                                                         \
            t_[12 + col_] = d[4 + col_] - d[12 + col_];                                                       \
        }                                                                                                     \
        for (int r_ = 0; r_ < 4; r_++) {                                                                      \
            store(4 * r_ + 0, t_[4 * r_ + 0] - t_[4 * r_ + 2]);                                               \
            store(4 * r_ + 1, t_[4 * r_ + 1] + t_[4 * r_ + 2]);                                               \
            store(4 * r_ + 2, t_[4 * r_ + 2] - t_[4 * r_ + 1]);                                               \
            store(4 * r_ + 3, t_[4 * r_ + 1] - t_[4 * r_ + 3]);                                               \
        }                                                                                                     \
    } while (0)

/* the 16 tap pointers of tile t (img, ty, tx): a pixel's c codes, or the pad row (c zero-point bytes) */
static inline __attribute__((always_inline)) void wino_taps(const wino_t *q, int64_t t, const uint8_t *padrow,
                                                            const uint8_t **p)
{
    int64_t tx = t % q->tw, ty = (t / q->tw) % q->th, img = t / (q->tw * q->th);
    for (int r = 0; r < 4; r++) {
        int64_t iy = 2 * ty - q->pt + r;
        for (int col = 0; col < 4; col++) {
            int64_t ix = 2 * tx - q->pl + col;
            p[4 * r + col] = iy < 0 || iy >= q->h || ix < 0 || ix >= q->w ? padrow
                : q->x + ((img * q->h + iy) * q->w + ix) * q->c;
        }
    }
}

/* channels [c0, c) of one tile, scalar */
static inline __attribute__((always_inline)) void wino_input_tail(const wino_t *q, const uint8_t **p, int64_t c0,
                                                                  int16_t *v, int64_t ldv)
{
    for (int64_t ch = c0; ch < q->c; ch++) {
        int32_t d[16];
        for (int i = 0; i < 16; i++)
            d[i] = (q->a_signed ? (int32_t)(int8_t)p[i][ch] : (int32_t)p[i][ch]) - q->za;
#define QWINO_STORE_S(xi, val) v[(xi) * ldv + ch] = (int16_t)(val)
        QWINO_V(int32_t, d, QWINO_STORE_S);
#undef QWINO_STORE_S
    }
}

static void wino_input_portable(const wino_t *q, int64_t t0, int nt, const uint8_t *padrow, int16_t *v,
                                int64_t ldv)
{
    for (int i = 0; i < nt; i++) {
        const uint8_t *p[16];
        wino_taps(q, t0 + i, padrow, p);
        wino_input_tail(q, p, 0, v + i * q->kp, ldv);
    }
}

#ifdef NNQ_X86
/* 16 channels at a time: the bytes widened to int16 (sign- or zero-extended), za subtracted, the transform in
   int16 (|V| <= 1020), then the channels left over as the portable loop */
static T_AVX2 void wino_input_avx2(const wino_t *q, int64_t t0, int nt, const uint8_t *padrow, int16_t *v,
                                   int64_t ldv)
{
    const __m256i za = _mm256_set1_epi16((int16_t)q->za);
    for (int i = 0; i < nt; i++) {
        const uint8_t *p[16];
        wino_taps(q, t0 + i, padrow, p);
        int16_t *vt = v + i * q->kp;
        int64_t ch = 0;
        for (; ch + 16 <= q->c; ch += 16) {
            __m256i d[16];
            for (int k = 0; k < 16; k++) {
                __m128i b = _mm_loadu_si128((const __m128i *)(p[k] + ch));
                d[k] = _mm256_sub_epi16(q->a_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b), za);
            }
            __m256i t_[16];
            for (int col = 0; col < 4; col++) {
                t_[0 + col] = _mm256_sub_epi16(d[0 + col], d[8 + col]);
                t_[4 + col] = _mm256_add_epi16(d[4 + col], d[8 + col]);
                t_[8 + col] = _mm256_sub_epi16(d[8 + col], d[4 + col]);
                t_[12 + col] = _mm256_sub_epi16(d[4 + col], d[12 + col]);
            }
            for (int r = 0; r < 4; r++) {
                __m256i *row = t_ + 4 * r;
                _mm256_storeu_si256((__m256i *)(vt + (4 * r + 0) * ldv + ch), _mm256_sub_epi16(row[0], row[2]));
                _mm256_storeu_si256((__m256i *)(vt + (4 * r + 1) * ldv + ch), _mm256_add_epi16(row[1], row[2]));
                _mm256_storeu_si256((__m256i *)(vt + (4 * r + 2) * ldv + ch), _mm256_sub_epi16(row[2], row[1]));
                _mm256_storeu_si256((__m256i *)(vt + (4 * r + 3) * ldv + ch), _mm256_sub_epi16(row[1], row[3]));
            }
        }
        wino_input_tail(q, p, ch, vt, ldv);
    }
}
#endif

/* the output transform of nt tiles' 16 columns: mb [16][nt][16] int32 -> yb [2][2 nt][16], the exact y = 4 y / 4
   (wrapping uint32 sums; 4 y fits int32) */
static inline __attribute__((always_inline)) void wino_output_body(const int32_t *mb, int64_t ldm, int nt,
                                                                   int32_t *yb)
{
    for (int i = 0; i < nt; i++) {
        for (int j = 0; j < QWINO_NR; j++) {
            uint32_t m[16], t_[8];
            for (int xi = 0; xi < 16; xi++)
                m[xi] = (uint32_t)mb[xi * ldm + i * QWINO_NR + j];
            for (int col = 0; col < 4; col++) {
                t_[col] = m[col] + m[4 + col] + m[8 + col];
                t_[4 + col] = m[4 + col] - m[8 + col] - m[12 + col];
            }
            for (int r = 0; r < 2; r++) {
                int32_t *y = yb + (r * 2 * nt + 2 * i) * QWINO_NR + j;
                /* NOTE: an arithmetic shift of a multiple of 4: the exact quotient, negative values included */
                y[0] = (int32_t)(t_[4 * r] + t_[4 * r + 1] + t_[4 * r + 2]) >> 2;
                y[QWINO_NR] = (int32_t)(t_[4 * r + 1] - t_[4 * r + 2] - t_[4 * r + 3]) >> 2;
            }
        }
    }
}

static void wino_output_portable(const int32_t *mb, int64_t ldm, int nt, int32_t *yb)
{
    wino_output_body(mb, ldm, nt, yb);
}

#ifdef NNQ_X86
/* wino_output_body 8 columns at a time (vpaddd / vpsubd wrap as the uint32 sums; vpsrad the exact shift) */
static T_AVX2 void wino_output_avx2(const int32_t *mb, int64_t ldm, int nt, int32_t *yb)
{
    for (int i = 0; i < nt; i++) {
        for (int j = 0; j < QWINO_NR; j += 8) {
            __m256i m[16], t_[8];
            for (int xi = 0; xi < 16; xi++)
                m[xi] = _mm256_load_si256((const __m256i *)(mb + xi * ldm + i * QWINO_NR + j));
            for (int col = 0; col < 4; col++) {
                t_[col] = _mm256_add_epi32(_mm256_add_epi32(m[col], m[4 + col]), m[8 + col]);
                t_[4 + col] = _mm256_sub_epi32(_mm256_sub_epi32(m[4 + col], m[8 + col]), m[12 + col]);
            }
            for (int r = 0; r < 2; r++) {
                int32_t *y = yb + (r * 2 * nt + 2 * i) * QWINO_NR + j;
                __m256i *row = t_ + 4 * r;
                _mm256_store_si256((__m256i *)y,
                                   _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(row[0], row[1]), row[2]), 2));
                _mm256_store_si256((__m256i *)(y + QWINO_NR),
                                   _mm256_srai_epi32(_mm256_sub_epi32(_mm256_sub_epi32(row[1], row[2]), row[3]), 2));
            }
        }
    }
}
#endif

static void wino_part(const void *job, int part)
{
    const wino_t *q = job;
    int64_t t_lo = q->tiles * part / q->parts, t_hi = q->tiles * (part + 1) / q->parts;
    if (t_lo >= t_hi)
        return;
    int64_t T = q->chunk, kp = q->kp;
    int16_t *v = aligned_alloc(64, (size_t)((16 * T * kp * 2 + 63) & ~(int64_t)63));
    int32_t *mb = aligned_alloc(64, (size_t)(16 * T * QWINO_NR * 4));
    int32_t *yb = aligned_alloc(64, (size_t)(4 * T * QWINO_NR * 4));
    uint8_t *padrow = malloc((size_t)q->c);
    if (v == NULL || mb == NULL || yb == NULL || padrow == NULL) {
        free(v); free(mb); free(yb); free(padrow);
        __atomic_store_n(q->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset(v, 0, (size_t)(16 * T * kp * 2));     /* the channels past c stay 0 */
    memset(padrow, q->pad, (size_t)q->c);
    int mr_max = 6;
    micro_fn micro = wino_micro_c;
    void (*input)(const wino_t *, int64_t, int, const uint8_t *, int16_t *, int64_t) = wino_input_portable;
    void (*output)(const int32_t *, int64_t, int, int32_t *) = wino_output_portable;
#ifdef NNQ_X86
    if (q->isa == ISA_AVX2) {
        micro = micro_avx2;
        input = wino_input_avx2;
        output = wino_output_avx2;
    }
#endif
    epilogue_fn epi = epilogue_for(q->isa);
    rows_t rows = {NULL, NULL, NULL};
    cols_t cols = {NULL, NULL};
    for (int64_t t0 = t_lo; t0 < t_hi; t0 += T) {
        int nt = (int)(t_hi - t0 < T ? t_hi - t0 : T);
        input(q, t0, nt, padrow, v, T * kp);
        for (int64_t p = 0; p < q->panels; p++) {
            for (int xi = 0; xi < 16; xi++) {
                const int16_t *up = q->u + (xi * q->panels + p) * kp * QWINO_NR;
                for (int i0 = 0; i0 < nt; i0 += mr_max) {
                    int mr = nt - i0 < mr_max ? nt - i0 : mr_max;
                    micro(mr, v + (xi * T + i0) * kp, kp, up, kp, mb + (xi * T + i0) * QWINO_NR);
                }
            }
            output(mb, T * QWINO_NR, nt, yb);
            int64_t n0 = p * QWINO_NR;
            int nc = (int)(q->m - n0 < QWINO_NR ? q->m - n0 : QWINO_NR);
            /* the write-back in runs of tiles along one tile row: their outputs are adjacent pixels */
            for (int a = 0; a < nt;) {
                int64_t t = t0 + a, tx = t % q->tw, ty = (t / q->tw) % q->th, img = t / (q->tw * q->th);
                int run = (int)(q->tw - tx < nt - a ? q->tw - tx : nt - a);
                int64_t x1 = 2 * (tx + run) < q->ow ? 2 * (tx + run) : q->ow;
                for (int r = 0; r < 2; r++) {
                    int64_t oy = 2 * ty + r;
                    if (oy < q->oh)
                        epi(&q->e, &rows, &cols, yb + (r * 2 * nt + 2 * a) * QWINO_NR, QWINO_NR,
                            (img * q->oh + oy) * q->ow + 2 * tx, (int)(x1 - 2 * tx), n0, nc);
                }
                a += run;
            }
        }
    }
    free(v); free(mb); free(yb); free(padrow);
}

/* winograd(x, x_zero, u, m, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads[, table]): the
   convolution of conv (3x3, stride 1, dilation 1, weights' zero point 0) by F(2x2, 3x3); u: int16, the
   transformed weights packed [16][ceil(m / 16)][kp / 2][16][2] (kp: c rounded up to 4), 32-byte aligned;
   m: the output channels; the other arguments as conv's. Bit-identical to conv (the same int32 sums, the same
   epilogue). */
static PyObject *qk_winograd(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "winograd";
    static const char *const names[] = {"x", "x_zero", "u", "bias", "scale", "table"};
    (void)mod;
    if (!isa_ok() || !check_nargs(kernel, nargs, nargs == 14 ? 14 : 13))
        return NULL;
    if (g_isa != ISA_AVX2 && g_isa != ISA_PORTABLE) {
        PyErr_Format(PyExc_RuntimeError, "%s: runs on the avx2 and portable instruction sets, not %s", kernel,
                     ISA_NAMES[g_isa]);
        return NULL;
    }
    int64_t threads, m, g[14];
    if (!get_int(kernel, "m", args[3], 1, INT32_MAX, &m) || !get_int(kernel, "threads", args[12], 0, 1 << 20, &threads)
        || !get_geometry(kernel, args[4], g))
        return NULL;
    if (g[6] != 3 || g[7] != 3 || g[8] != 1 || g[9] != 1 || g[10] != 1 || g[11] != 1) {
        PyErr_Format(PyExc_ValueError, "%s: wants a 3x3 kernel, stride 1, dilation 1", kernel);
        return NULL;
    }
    if (g[3] > QWINO_MAX_C) {
        PyErr_Format(PyExc_ValueError, "%s: %lld channels; at most %d keep the sums exact", kernel, (long long)g[3],
                     QWINO_MAX_C);
        return NULL;
    }
    arg_t in[6], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    wino_t q;
    memset(&q, 0, sizeof q);
    PyObject *result = NULL;
    int64_t xsize, rows;
    int32_t table32[256];
    q.n = g[0]; q.h = g[1]; q.w = g[2]; q.c = g[3]; q.oh = g[4]; q.ow = g[5]; q.pt = g[12]; q.pl = g[13];
    q.m = m;
    q.kp = (q.c + 3) & ~(int64_t)3;
    q.panels = (m + QWINO_NR - 1) / QWINO_NR;
    q.th = (q.oh + 1) / 2;
    q.tw = (q.ow + 1) / 2;
    q.tiles = q.n * q.th * q.tw;
    q.isa = g_isa;
    if (!mul_ok(kernel, g[0] * g[1], g[2] * g[3], &xsize) || !mul_ok(kernel, g[0] * g[4], g[5], &rows)
        || !get_array(kernel, "x", args[0], &in[0], "Bb", xsize, 0, 0))
        goto done;
    q.a_signed = format_code(&in[0].view) == 'b';
    if (!get_array(kernel, "x_zero", args[1], &in[1], q.a_signed ? "b" : "B", 1, 0, 1)
        || !get_array(kernel, "u", args[2], &in[2], "h", 16 * q.panels * q.kp * QWINO_NR, 0, 0))
        goto done;
    if (((uintptr_t)in[2].view.buf & 31) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'u' must be 32-byte aligned", kernel);
        goto done;
    }
    q.x = in[0].view.buf;
    q.u = in[2].view.buf;
    q.pad = in[1].held ? ((const uint8_t *)in[1].view.buf)[0] : 0;
    q.za = q.a_signed ? (int32_t)(int8_t)q.pad : (int32_t)q.pad;
    if (!get_epilogue(kernel, args + 5, &out, &in[3], &in[4], rows, m, &q.e))
        goto done;
    if (nargs == 14 && !get_table(kernel, args[13], &in[5], &q.e, table32))
        goto done;
    if (!check_no_overlap(kernel, &out, in, names, 6))
        goto done;
    /* NOTE: tiles per step: their 16 transformed inputs (int16) within ~256 KB of L2 beside the weights' panel */
    q.chunk = (256 * 1024) / (16 * q.kp * 2);
    q.chunk = q.chunk < 6 ? 6 : q.chunk > 120 ? 120 : q.chunk / 6 * 6;
    /* parts of at least ~2M multiply-adds (as the direct kernels) and a chunk of tiles */
    int64_t parts = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    int64_t most = q.tiles * 16 * q.kp * q.panels * QWINO_NR / (2 << 20);
    parts = parts > most ? (most < 1 ? 1 : most) : parts;
    parts = parts > q.tiles ? q.tiles : parts;
    q.parts = (int)(parts < 1 ? 1 : parts);
    int failed = 0;
    q.failed = &failed;
    if (q.tiles) {
        Py_BEGIN_ALLOW_THREADS
        run_parts(wino_part, &q, q.parts);
        Py_END_ALLOW_THREADS
    }
    if (failed)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    release_all(in, 6);
    release_all(&out, 1);
    return result;
}
