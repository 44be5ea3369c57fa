/* The input projection of a small layer, X W^T + bias, over W^T packed once per layer, never through the linked
 * BLAS: one row (a control-flow body's recurrent step at batch 1: one time step, one batch row) as a GEMV (the
 * columns of a block summed in registers over the inputs, nn_gemv.h); a few rows (a short sequence at batch 1)
 * on the recurrence's register-blocked kernels (four rows share each load of W^T). Included once by kernels.c
 * after nn_rnn_blocked; only layers whose W^T fits NN_RNN_WT_MAX pack it.
 *
 * NOTE: the BLAS packs W at every sgemm call and, called from inside a native call, its threads spin against the
 * recurrence on a loaded machine: a (100, 64) @ (64, 256) projection took ~800 us of the caller's CPU time there
 * (one pool part, loaded 2-core machine), the blocked kernels a few tens. */

/* W^T of at most this many floats is packed (1 MiB: hidden 128 with input 128 at two directions, 4 gates) */
#define NN_RNN_WT_MAX (1 << 18)
/* projections of at most this many multiply-adds run on the blocked kernels (a few hundred microseconds at most) */
#define NN_RNN_PROJECT_MACS (1 << 23)

/* W^T (I, D * G * H) into *wt (owned by the layer object) when the layer is small enough, else *wt stays NULL.
 * -1 with MemoryError set when the allocation fails. */
static int nn_rnn_pack_wt(nn_rnn_params *p, float **wt) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    *wt = NULL;
    p->wt = NULL;
    if (rows * p->input > NN_RNN_WT_MAX) return 0;
    float *t = PyMem_Malloc((size_t)(rows * p->input) * sizeof(float));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < p->input; i++) t[i * rows + r] = p->w[r * p->input + i];
    *wt = t;
    p->wt = t;
    return 0;
}

/* Whether the layer projects m rows of X itself on the blocked kernels (W^T packed, a small product). */
NN_INLINE int nn_rnn_projects(const nn_rnn_params *p, int64_t m) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    return p->wt != NULL && m * rows * p->input <= NN_RNN_PROJECT_MACS;
}

/* out columns [c0, c1) = x (1, I) W^T + bias, x one row of the input */
static void nn_rnn_project_row(const nn_rnn_params *p, const float *x, float *out, int64_t c0, int64_t c1) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    nn_gemv_f32(x, p->wt + c0, rows, out + c0, c1 - c0, p->input);
    const float *bias = p->bias + c0;
    float *row = out + c0;
#pragma omp simd
    for (int64_t j = 0; j < c1 - c0; j++) row[j] += bias[j];
}

/* out (m, D * G * H) columns [c0, c1) = x (m, I) W^T + bias: the bias first, then the blocked product onto it */
NN_INLINE void nn_rnn_project_rows(const nn_rnn_params *p, const float *x, int64_t m, float *out, int64_t c0,
                                   int64_t c1) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    for (int64_t r = 0; r < m; r++) memcpy(out + r * rows + c0, p->bias + c0, (size_t)(c1 - c0) * sizeof(float));
    nn_rnn_blocked(x, m, p->input, p->wt + c0, rows, c1 - c0, out + c0, rows);
}
