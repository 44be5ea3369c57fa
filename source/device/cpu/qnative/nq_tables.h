/* nq_tables.h: 8-bit lookup-table gathers for the quantized element-wise ops (included once by qkernels.c,
 * after its argument checks and run_parts).
 *
 *   table1(x, table, out, threads)       out[i] = table[(i % C) * 256 + byte(x[i])]
 *                                        (ai.nnhal CodeTable: C x 256 entries, one table per channel of x's last
 *                                        axis; C = 1: one table for every element)
 *   table2(a, b, table, out, threads)    out[i] = table[byte(a[i]) << 8 | byte(b[i % len(b)])]
 *                                        (com.microsoft QLinearAdd / QLinearMul, 65536 entries; b repeats along
 *                                        a: a scalar, or a's trailing axes)
 *
 *   binary(a, b, out, mul, a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, threads)
 *                                        out[i] = QLinearAdd (mul = 0) / QLinearMul (mul = 1) of a[i] and
 *                                        b[i % len(b)] computed: the float32 operations of the numpy reference
 *                                        (hostkernels/_msq.py: (q - zero) * scale, add or multiply, / y_scale,
 *                                        round half to even, + y_zero, clamp), 8 lanes at a time in AVX2 (the
 *                                        same IEEE operations: the same bits as the scalar loop and the table)
 *   biased(x, bias, out, x_scale, x_zero, y_scale, y_zero, threads)
 *                                        out[i] = QuantizeLinear(DequantizeLinear(x[i]) + bias[i % C]): a static
 *                                        QDQ model's per-column bias chain after a product (ai.nnhal CodeTable
 *                                        with a [C, 256] table) computed in the same float32 operations as
 *                                        binary (bias: C float32 values along x's last axis)
 *
 * x, a, b, table and out are uint8 or int8 (read as bytes: the table is indexed by bit pattern, as the
 * Python side builds it, kernels/qlinear_tables.py); out has x's (a's) element count and the table's element
 * type, and overlaps no input but x (a) itself (in place). numpy's take makes three passes and an int16
 * index for what is one pass here; the parts split over the cpu device's pool from 256K elements on.
 */
#ifndef NQ_TABLES_H
#define NQ_TABLES_H

#define NQ_TABLE_PART 262144      /* elements: fewer run on the calling thread */

typedef struct {
    const uint8_t *a, *b, *table;
    uint8_t *out;
    int64_t n, nb;                /* a's elements; b's (0: table1) */
    int64_t channels;             /* table1: the tables (x's last axis when > 1) */
    int parts;
} nq_table_job;

static void nq_table_part(const void *job, int part)
{
    const nq_table_job *t = job;
    int64_t lo = t->n * part / t->parts, hi = t->n * (part + 1) / t->parts;
    const uint8_t *a = t->a, *table = t->table;
    uint8_t *out = t->out;
    if (t->nb == 0 && t->channels > 1) {
        int64_t c = t->channels, j = lo % c;
        for (int64_t i = lo; i < hi;) {
            int64_t run = c - j < hi - i ? c - j : hi - i;      /* up to the end of the row */
            const uint8_t *ar = a + i, *tj = table + (j << 8);
            uint8_t *yr = out + i;
            for (int64_t k = 0; k < run; k++)
                yr[k] = tj[((size_t)k << 8) + ar[k]];
            i += run;
            j = 0;
        }
        return;
    }
    if (t->nb == 0) {
        int64_t i = lo;
        for (; i + 4 <= hi; i += 4) {
            uint8_t v0 = table[a[i]], v1 = table[a[i + 1]], v2 = table[a[i + 2]], v3 = table[a[i + 3]];
            out[i] = v0;
            out[i + 1] = v1;
            out[i + 2] = v2;
            out[i + 3] = v3;
        }
        for (; i < hi; i++)
            out[i] = table[a[i]];
        return;
    }
    if (t->nb == 1) {
        const uint8_t *column = table + t->b[0];         /* entries (a << 8) | b0, 256 apart */
        for (int64_t i = lo; i < hi; i++)
            out[i] = column[(size_t)a[i] << 8];
        return;
    }
    const uint8_t *b = t->b;
    int64_t nb = t->nb, j = lo % nb;
    for (int64_t i = lo; i < hi;) {
        int64_t run = nb - j < hi - i ? nb - j : hi - i;   /* up to the end of b's period */
        const uint8_t *ar = a + i, *br = b + j;
        uint8_t *yr = out + i;
        for (int64_t k = 0; k < run; k++)
            yr[k] = table[(size_t)ar[k] << 8 | br[k]];
        i += run;
        j = 0;
    }
}

/* the checks and the split the element-wise kernels here share: b repeats evenly along a's n elements (nb < 0:
   no b); out is a itself (in place) or overlaps no input; the parts of n over at most threads */
static int nq_elementwise_checks(const char *kernel, int64_t n, int64_t nb, const arg_t *out, const arg_t *in,
                                 const char *const *names, int n_in, int64_t threads, int *parts)
{
    if (nb >= 0 && (nb == 0 || n % nb)) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'b' has %lld elements, which do not repeat evenly along "
                     "'a''s %lld", kernel, (long long)nb, (long long)n);
        return 0;
    }
    if (!(out->view.buf == in[0].view.buf && out->view.len == in[0].view.len)
        && !check_no_overlap(kernel, out, in, names, 1))
        return 0;
    if (!check_no_overlap(kernel, out, in + 1, names + 1, n_in - 1))
        return 0;
    int64_t p = n / NQ_TABLE_PART;
    p = p < 1 ? 1 : p > threads ? (threads < 1 ? 1 : threads) : p;
    *parts = (int)(p > MAX_THREADS ? MAX_THREADS : p);
    return 1;
}

/* the shared part of table1 / table2: args (x or a, [b,] table, out, threads) */
static PyObject *nq_table(const char *kernel, PyObject *const *args, Py_ssize_t nargs, int binary)
{
    const char *const names[] = {binary ? "a" : "x", "b", "table"};
    if (!check_nargs(kernel, nargs, binary ? 5 : 4))
        return NULL;
    arg_t in[3], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    PyObject *result = NULL;
    int64_t threads;
    PyObject *const *rest = args + (binary ? 2 : 1);
    if (!get_int(kernel, "threads", rest[2], 0, 1 << 20, &threads)
        || !get_array(kernel, binary ? "a" : "x", args[0], &in[0], "Bb", -1, 0, 0)
        || (binary && !get_array(kernel, "b", args[1], &in[1], "Bb", -1, 0, 0))
        || !get_array(kernel, "table", rest[0], &in[2], "Bb", binary ? 65536 : -1, 0, 0)
        || !get_array(kernel, "out", rest[1], &out, format_code(&in[2].view) == 'b' ? "b" : "B", in[0].view.len, 1, 0))
        goto done;
    nq_table_job t = {in[0].view.buf, in[1].held ? in[1].view.buf : NULL, in[2].view.buf, out.view.buf,
                      in[0].view.len, in[1].held ? in[1].view.len : 0, in[2].view.len >> 8, 1};
    if (!binary && (in[2].view.len == 0 || in[2].view.len % 256 || t.n % t.channels)) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'table' has %zd elements; wanted C x 256 with C dividing "
                     "'x''s %lld", kernel, in[2].view.len, (long long)t.n);
        goto done;
    }
    /* out may be a itself (element-wise in place), never part of b or the table */
    if (!nq_elementwise_checks(kernel, t.n, binary ? t.nb : -1, &out, in, names, 3, threads, &t.parts))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (t.n)
        run_parts(nq_table_part, &t, t.parts);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_all(in, 3);
    release_all(&out, 1);
    return result;
}

static PyObject *qk_table1(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return nq_table("table1", args, nargs, 0);
}

static PyObject *qk_table2(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return nq_table("table2", args, nargs, 1);
}

/* ---- binary: QLinearAdd / QLinearMul computed instead of looked up in a 64K table ----
 * NOTE: the 65536-entry table does not fit Zen 3's 32 KB L1, so its gather costs 1.5-7 ns per element on
 * MiniLM's residual and mask Adds; the arithmetic is about ten vector operations per 8 elements. The Python
 * side (kernels/qlinear_tables.py) checks this kernel against the reference's table on all 65536 code pairs
 * at prepare and keeps the table where any differs. */
typedef struct {
    const uint8_t *a, *b;
    const float *fb;              /* biased: the real values added (b unused) */
    uint8_t *out;
    int64_t n, nb;
    int parts, mul, is_signed, vector;
    float sa, za, sb, zb, sy, zy, lo, hi;
} nq_binary_job;

static inline float nq_real(int code, float zero, float scale)
{
    return ((float)code - zero) * scale;
}

/* one element: the reference's float32 operations in its order */
static inline uint8_t nq_binary_one(const nq_binary_job *t, int a, float y)
{
    float x = nq_real(a, t->za, t->sa);
    float v = t->mul ? x * y : x + y;
    float q = rintf(v / t->sy) + t->zy;
    q = q < t->lo ? t->lo : q > t->hi ? t->hi : q;
    return (uint8_t)(int)q;
}

static inline int nq_code(const nq_binary_job *t, const uint8_t *p, int64_t i)
{
    return t->is_signed ? (int)((const int8_t *)p)[i] : (int)p[i];
}

/* b: codes (binary), or fb: real values (biased); bstep 0: b's one value for every element */
static void nq_binary_scalar(const nq_binary_job *t, const uint8_t *a, const uint8_t *b, const float *fb,
                             int bstep, uint8_t *y, int64_t len)
{
    for (int64_t k = 0; k < len; k++)
        y[k] = nq_binary_one(t, nq_code(t, a, k),
                             fb ? fb[bstep ? k : 0] : nq_real(nq_code(t, b, bstep ? k : 0), t->zb, t->sb));
}

#ifdef NNQ_X86
T_AVX2 static inline __m256 nq_load8(const nq_binary_job *t, const uint8_t *p)
{
    __m128i bytes = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_cvtepi32_ps(t->is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
}

T_AVX2 static void nq_binary_avx2(const nq_binary_job *t, const uint8_t *a, const uint8_t *b, const float *fb,
                                  int bstep, uint8_t *y, int64_t len)
{
    const __m256 sa = _mm256_set1_ps(t->sa), za = _mm256_set1_ps(t->za), sb = _mm256_set1_ps(t->sb),
                 zb = _mm256_set1_ps(t->zb), sy = _mm256_set1_ps(t->sy), zy = _mm256_set1_ps(t->zy),
                 lo = _mm256_set1_ps(t->lo), hi = _mm256_set1_ps(t->hi);
    const __m256 yconst = _mm256_set1_ps(fb ? fb[0] : nq_real(nq_code(t, b, 0), t->zb, t->sb));
    /* byte 0 of each int32 lane to the lane's first 4 bytes */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t k = 0;
    for (; k + 8 <= len; k += 8) {
        __m256 x = _mm256_mul_ps(_mm256_sub_ps(nq_load8(t, a + k), za), sa);
        __m256 w = !bstep ? yconst : fb ? _mm256_loadu_ps(fb + k)
            : _mm256_mul_ps(_mm256_sub_ps(nq_load8(t, b + k), zb), sb);
        __m256 v = t->mul ? _mm256_mul_ps(x, w) : _mm256_add_ps(x, w);
        __m256 q = _mm256_add_ps(_mm256_round_ps(_mm256_div_ps(v, sy), _MM_FROUND_TO_NEAREST_INT
                                                 | _MM_FROUND_NO_EXC), zy);
        q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
        __m256i bytes = _mm256_shuffle_epi8(_mm256_cvtps_epi32(q), pick);
        __m128i packed = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
        _mm_storel_epi64((__m128i *)(y + k), packed);
    }
    nq_binary_scalar(t, a + k, b && bstep ? b + k : b, fb && bstep ? fb + k : fb, bstep, y + k, len - k);
}
#endif

static void nq_binary_run(const nq_binary_job *t, const uint8_t *a, int64_t j, int bstep, uint8_t *y,
                          int64_t len)
{
    const uint8_t *b = t->fb ? NULL : t->b + j;
    const float *fb = t->fb ? t->fb + j : NULL;
#ifdef NNQ_X86
    if (t->vector) {
        nq_binary_avx2(t, a, b, fb, bstep, y, len);
        return;
    }
#endif
    nq_binary_scalar(t, a, b, fb, bstep, y, len);
}

static void nq_binary_part(const void *job, int part)
{
    const nq_binary_job *t = job;
    int64_t lo = t->n * part / t->parts, hi = t->n * (part + 1) / t->parts;
    if (t->nb == 1) {
        nq_binary_run(t, t->a + lo, 0, 0, t->out + lo, hi - lo);
        return;
    }
    int64_t nb = t->nb, j = lo % nb;
    for (int64_t i = lo; i < hi;) {
        int64_t run = nb - j < hi - i ? nb - j : hi - i;   /* up to the end of b's period */
        nq_binary_run(t, t->a + i, j, 1, t->out + i, run);
        i += run;
        j = 0;
    }
}

/* the shared entry of binary (args a, b, out, mul, a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, threads)
   and biased (args x, bias, out, x_scale, x_zero, y_scale, y_zero, threads) */
static PyObject *nq_binary_call(const char *kernel, PyObject *const *args, Py_ssize_t nargs, int biased)
{
    const char *const names[] = {biased ? "x" : "a", biased ? "bias" : "b"};
    if (!check_nargs(kernel, nargs, biased ? 8 : 11))
        return NULL;
    arg_t in[2], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    PyObject *result = NULL;
    int64_t mul = 0, za, zb = 0, zy, threads;
    nq_binary_job t;
    memset(&t, 0, sizeof t);
    int ok = get_array(kernel, names[0], args[0], &in[0], "Bb", -1, 0, 0);
    const char *codes = ok && format_code(&in[0].view) == 'b' ? "b" : "B";
    ok = ok && get_array(kernel, names[1], args[1], &in[1], biased ? "f" : codes, -1, 0, 0)
        && get_array(kernel, "out", args[2], &out, codes, in[0].view.len, 1, 0);
    PyObject *const *rest = args + (biased ? 5 : 8);
    if (biased)
        ok = ok && get_float(kernel, "x_scale", args[3], &t.sa) && get_int(kernel, "x_zero", args[4], -128, 255, &za);
    else
        ok = ok && get_int(kernel, "mul", args[3], 0, 1, &mul) && get_float(kernel, "a_scale", args[4], &t.sa)
            && get_int(kernel, "a_zero", args[5], -128, 255, &za) && get_float(kernel, "b_scale", args[6], &t.sb)
            && get_int(kernel, "b_zero", args[7], -128, 255, &zb);
    if (!ok || !get_float(kernel, "y_scale", rest[0], &t.sy) || !get_int(kernel, "y_zero", rest[1], -128, 255, &zy)
        || !get_int(kernel, "threads", rest[2], 0, 1 << 20, &threads))
        goto done;
    t.a = in[0].view.buf;
    if (biased)
        t.fb = in[1].view.buf;
    else
        t.b = in[1].view.buf;
    t.out = out.view.buf;
    t.n = in[0].view.len;
    t.nb = in[1].view.len / in[1].view.itemsize;
    t.mul = (int)mul;
    t.is_signed = format_code(&in[0].view) == 'b';
    t.za = (float)za;
    t.zb = (float)zb;
    t.zy = (float)zy;
    t.lo = t.is_signed ? -128.0f : 0.0f;
    t.hi = t.is_signed ? 127.0f : 255.0f;
    t.vector = g_isa >= ISA_AVX2;
    /* out may be a (x) itself (element-wise in place), never part of b (bias) */
    if (!nq_elementwise_checks(kernel, t.n, t.nb, &out, in, names, 2, threads, &t.parts))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (t.n)
        run_parts(nq_binary_part, &t, t.parts);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_all(in, 2);
    release_all(&out, 1);
    return result;
}

static PyObject *qk_binary(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return nq_binary_call("binary", args, nargs, 0);
}

static PyObject *qk_biased(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return nq_binary_call("biased", args, nargs, 1);
}

#endif
