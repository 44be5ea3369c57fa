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
    if (binary && (t.nb == 0 || t.n % t.nb)) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'b' has %lld elements, which do not repeat evenly along "
                     "'a''s %lld", kernel, (long long)t.nb, (long long)t.n);
        goto done;
    }
    /* out may be a itself (element-wise in place), never part of b or the table */
    if (!(out.view.buf == in[0].view.buf && out.view.len == in[0].view.len)
        && !check_no_overlap(kernel, &out, in, names, 1))
        goto done;
    if (!check_no_overlap(kernel, &out, in + 1, names + 1, 2))
        goto done;
    int64_t parts = t.n / NQ_TABLE_PART;
    parts = parts < 1 ? 1 : parts > threads ? (threads < 1 ? 1 : threads) : parts;
    t.parts = (int)(parts > MAX_THREADS ? MAX_THREADS : parts);
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

#endif
