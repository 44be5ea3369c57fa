/* The input projection of a small layer, X W^T + bias, over W^T packed once per layer, never through the linked
 * BLAS: one row (a control-flow body's recurrent step at batch 1: one time step, one batch row) as a GEMV over W^T
 * (the columns of a block summed in registers over the inputs, nn_gemv.h); a few rows (a sequence at batch 1) on
 * the recurrence's register-blocked kernels over W^T in column panels: each direction's G * H columns cut into
 * panels of NN_RNN_PANEL columns, a panel's I rows contiguous (I * NN_RNN_PANEL floats, the last panel of a
 * direction zero-padded), so one panel stays in L1 while every row of X streams past it, four rows per load.
 * Included once by kernels.c after nn_rnn_blocked.
 *
 * NOTE: the BLAS packs W at every sgemm call and, called from inside a native call, its threads spin against the
 * recurrence on a loaded machine: a (100, 64) @ (64, 256) projection took ~800 us of the caller's CPU time there
 * (one pool part, loaded 2-core machine), and a (32, 256) @ (256, 1024) one read 30 ms (median of 15) where the
 * panels take ~0.2 ms. The panels replace the row-major W^T the blocked kernels first read: its rows D * G * H
 * floats apart (4 KiB at hidden 128, two directions) walked one 16-column strip down all I rows per four rows of X,
 * every load a new page and one cache set, and W^T (up to 1 MiB) re-read from L3 per four rows (512 KiB L2 here):
 * (32, 256) @ (256, 1024) ran at ~17 GFLOP/s, slower than numpy's BLAS on a quiet machine. */

/* W^T of at most this many floats is packed row-major too (1 MiB), for one to three rows: the one-row GEMV (up to
 * NN_GEMV_MAX floats) and nn_rnn_blocked's single rows, whose 64-column blocks keep eight accumulators in flight
 * where a 16-column panel keeps two (a control-flow body's step: one row at a time) */
#define NN_RNN_WT_MAX (1 << 18)
/* W^T of at most this many floats is packed in panels (8 MiB: hidden 256 with input 512 at two directions) */
#define NN_RNN_WP_MAX (1 << 21)
/* projections of at most this many multiply-adds run on the blocked kernels (a few milliseconds at most) */
#define NN_RNN_PROJECT_MACS (1 << 26)
/* the columns of a panel: the width of nn_rnn_gemv4's register block */
#define NN_RNN_PANEL 16

/* the panels of one direction's G * H columns */
NN_INLINE int64_t nn_rnn_panels(const nn_rnn_params *p) { return (p->gates * p->hidden + NN_RNN_PANEL - 1) / NN_RNN_PANEL; }

/* W^T (I, D * G * H) into *wt when it fits NN_RNN_WT_MAX, and W^T in panels into *wp when it fits NN_RNN_WP_MAX
 * (each owned by the layer object; NULL when not packed). -1 with MemoryError set when an allocation fails. */
static int nn_rnn_pack_wt(nn_rnn_params *p, float **wt, float **wp) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden, gn = p->gates * p->hidden;
    const int64_t panels = nn_rnn_panels(p), padded = p->dirs * panels * NN_RNN_PANEL * p->input;
    *wt = *wp = NULL;
    p->wt = p->wp = NULL;
    if (rows * p->input <= NN_RNN_WT_MAX) {
        float *t = PyMem_Malloc((size_t)(rows * p->input) * sizeof(float));
        if (t == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < p->input; i++) t[i * rows + r] = p->w[r * p->input + i];
        *wt = t;
        p->wt = t;
    }
    if (padded > NN_RNN_WP_MAX) return 0;
    float *t = PyMem_Calloc((size_t)padded, sizeof(float));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t d = 0; d < p->dirs; d++)
        for (int64_t c = 0; c < gn; c++) {
            float *panel = t + (d * panels + c / NN_RNN_PANEL) * p->input * NN_RNN_PANEL + c % NN_RNN_PANEL;
            const float *wr = p->w + (d * gn + c) * p->input;
            for (int64_t i = 0; i < p->input; i++) panel[i * NN_RNN_PANEL] = wr[i];
        }
    *wp = t;
    p->wp = t;
    return 0;
}

/* Whether the layer projects m rows of X itself on the blocked kernels (W^T in panels, a product small enough
 * or the layer made with NN_RNN_BLOCKED; never with NN_RNN_BLAS). */
NN_INLINE int nn_rnn_projects(const nn_rnn_params *p, int64_t m) {
    const int64_t rows = (int64_t)p->dirs * p->gates * p->hidden;
    if (p->wp == NULL || p->project == NN_RNN_BLAS) return 0;
    return p->project == NN_RNN_BLOCKED || m * rows * p->input <= NN_RNN_PROJECT_MACS;
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

/* out (m, D * G * H) columns [c0, c1) = x (m, I) W^T + bias, c0 and c1 whole directions (multiples of G * H): the
 * bias first, then per panel every row's product onto it (four rows at a time, the panel read from L1); fewer than
 * four rows over the row-major W^T when packed */
NN_INLINE void nn_rnn_project_rows(const nn_rnn_params *p, const float *x, int64_t m, float *out, int64_t c0,
                                   int64_t c1) {
    const int64_t gn = p->gates * p->hidden, ld = p->dirs * gn, panels = nn_rnn_panels(p), k = p->input;
    for (int64_t r = 0; r < m; r++) memcpy(out + r * ld + c0, p->bias + c0, (size_t)(c1 - c0) * sizeof(float));
    if (m < 4 && p->wt) {
        nn_rnn_blocked(x, m, k, p->wt + c0, ld, c1 - c0, out + c0, ld);
        return;
    }
    for (int64_t d = c0 / gn; d < c1 / gn; d++)
        for (int64_t q = 0; q < panels; q++) {
            const float *panel = p->wp + (d * panels + q) * k * NN_RNN_PANEL;
            const int64_t col = d * gn + q * NN_RNN_PANEL;
            const int64_t width = gn - q * NN_RNN_PANEL < NN_RNN_PANEL ? gn - q * NN_RNN_PANEL : NN_RNN_PANEL;
            int64_t b = 0;
            for (; b + 4 <= m; b += 4) nn_rnn_gemv4(x + b * k, k, panel, NN_RNN_PANEL, width, out + b * ld + col, ld);
            for (; b < m; b++) nn_rnn_gemv(x + b * k, k, panel, NN_RNN_PANEL, width, out + b * ld + col);
        }
}
