/* F16C float32 <-> float16 conversions 8 lanes at a time, for nn_cast_half (included once from kernels.c).
 *
 * GCC 12 leaves nn_cast_half's _Float16 loops scalar even in the x86-64-v3 / v4 clones: one vcvtps2ph /
 * vcvtph2ps on an xmm register per element, about 1.4 ns an element on a Zen 3 (10x a memcpy of the same
 * tensor), so fp16 storage's boundary roundings cost more than the layers next to them on a KV cache. These
 * loops run the same two instructions on 8 lanes with the same rounding immediate as the scalar code
 * (_MM_FROUND_CUR_DIRECTION: MXCSR's round to nearest even), so the results are bit-equal: inf beyond 65504 + half
 * an ulp, NaN kept, subnormals. They return how many leading elements they converted; the caller converts the
 * rest (fewer than 8) as before. Chosen at run time by the CPU's own flags, so the baseline build is unchanged. */
#ifndef NN_HALF_SIMD_H
#define NN_HALF_SIMD_H

#if NN_HAVE_F16 && (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define NN_HALF_SIMD 1

__attribute__((target("avx,f16c"))) static int64_t nn_half_simd(const void *x, void *y, int64_t n, int mode) {
    int64_t i = 0;
    if (mode == 0) {
        const float *a = x;
        uint16_t *b = y;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(b + i), _mm256_cvtps_ph(_mm256_loadu_ps(a + i), _MM_FROUND_CUR_DIRECTION));
    } else if (mode == 1) {
        const uint16_t *a = x;
        float *b = y;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(b + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))));
    } else {
        const float *a = x;     /* y may be x: each group of 8 is loaded before it is stored */
        float *b = y;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(b + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(a + i), _MM_FROUND_CUR_DIRECTION)));
    }
    return i;
}

/* 1 where the CPU has AVX and F16C (every AVX2 x86-64 does), checked once */
NN_CPU_HAS2(nn_half_simd_ok, "avx", "f16c")
#else
#define NN_HALF_SIMD 0
#endif

#endif /* NN_HALF_SIMD_H */
