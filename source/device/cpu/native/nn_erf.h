/* erf(x) for float32, shared by the native kernels (kernels.c: the Gelu activation) and the integer kernels
 * (qnative/qkernels.c: the Gelu fused into DynamicQuantizeGemm's float epilogue), so both run one formula.
 * The rational approximation the numpy fast Erf uses (hostkernels/op_erf.py, the same coefficients and
 * order): x * P(x^2) / Q(x^2) on x clamped to [-4, 4]; NaN in, NaN out. Plain arithmetic (no calls), so that
 * loops calling it vectorize. */
#ifndef NN_ERF_H
#define NN_ERF_H

static inline __attribute__((always_inline)) float nn_erff(float x) {
    float xc = x > -4.0f ? x : -4.0f;
    xc = xc < 4.0f ? xc : 4.0f;
    const float x2 = xc * xc;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x != x ? x : p * xc / q;
}

/* the exact Gelu x (1 + erf(x / sqrt 2)) / 2 in this order (the native Gelu activation's) */
static inline __attribute__((always_inline)) float nn_gelu(float x) {
    return x * (1.0f + nn_erff(x / 1.41421353816986083984f)) * 0.5f;
}

#endif
