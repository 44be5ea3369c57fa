/* The input projection of one row (a control-flow body's recurrent step at batch 1: one time step, one batch
 * row), X W^T + bias, as a GEMV over W^T packed once per layer: the columns of a block summed in registers over
 * the inputs (nn_gemv.h), where the dot product per gate row ends in a horizontal sum for each of the D * G * H
 * outputs. Included once by kernels.c after nn_rnn_params; only layers small enough for nn_gemv_f32 pack W^T. */

/* W^T (I, D * G * H) into *wt (owned by the layer object) when the layer is small enough, else *wt stays NULL.
 * -1 with MemoryError set when the allocation fails. */
static int nn_rnn_pack_wt(nn_rnn_params *p, float **wt) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    *wt = NULL;
    p->wt = NULL;
    if (rows * p->input > NN_GEMV_MAX) return 0;
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

/* out columns [c0, c1) = x (1, I) W^T + bias, x one row of the input */
static void nn_rnn_project_row(const nn_rnn_params *p, const float *x, float *out, int64_t c0, int64_t c1) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    nn_gemv_f32(x, p->wt + c0, rows, out + c0, c1 - c0, p->input);
    const float *bias = p->bias + c0;
    float *row = out + c0;
#pragma omp simd
    for (int64_t j = 0; j < c1 - c0; j++) row[j] += bias[j];
}
