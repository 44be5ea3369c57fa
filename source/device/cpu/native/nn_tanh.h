/* nn_tanh.h: float32 tanh for the element-wise kernels and the recurrences, included once from kernels.c after
 * nn_expf (an activation kind of its own: the Act kernels' NN_ACT_TANH, the recurrent NN_RA_TANH). */
#ifndef NN_TANH_H
#define NN_TANH_H

/* tanh(x) to ~3 ulp: an odd polynomial near 0 (fitted for |x| < 0.625), 1 - 2 / (exp(2|x|) + 1) beyond (nn_expf
 * clamps: no overflow). NOTE: written without min/max before nn_expf, which kept GCC 12 from vectorizing it. */
NN_INLINE float nn_tanhf(float x) {
    const float a = fabsf(x), s = x * x;
    float p = 2.13818880729377e-03f;
    p = p * s + -8.17174930125475e-03f;
    p = p * s + 2.16981936246157e-02f;
    p = p * s + -5.39462491869927e-02f;
    p = p * s + 1.33332014083862e-01f;
    p = p * s + -3.33333313465118e-01f;
    const float small = copysignf(x + x * s * p, x);   /* tanh(-0) = -0 */
    const float big = copysignf(1.0f - 2.0f / (nn_expf(a + a) + 1.0f), x);
    return x != x ? x : (a < 0.625f ? small : big);
}

#endif /* NN_TANH_H */
