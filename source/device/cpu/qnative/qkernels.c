/* nnhal's integer kernels for the cpu device: the extension module nnhal.device.cpu.qnative._qkernels.
 *
 * u8 x s8 -> s32 GEMM on packed weights (s8 x s8 and u8 x u8 reduce to it, see "Offsets"), an integer
 * implicit-GEMM convolution in NHWC and an int8 depthwise convolution, each with its epilogue fused:
 * int32 out (+ bias), float out (dequantized: row scale x column scale, + bias, clamp), or 8-bit out
 * (requantized exactly as ONNX QLinearMatMul / QLinearConv define it: the float32 factor a_scale *
 * b_scale / y_scale applied to the int32 sum in double, + zero point, rounded half to even, saturated,
 * clamped for a fused Relu / Clip). gemm_dynamic quantizes float activations per row (per token) while
 * it packs them: the quantization is part of the A packing, not a separate pass. table1 / table2 gather
 * 8-bit codes from the quantized element-wise ops' lookup tables (nq_tables.h). winograd runs conv's 3x3 stride-1
 * convolutions by exact integer Winograd F(2x2, 3x3) on these epilogues (qwinograd.h).
 *
 * Instruction sets (one build runs everywhere: every kernel carries its own target attribute), chosen
 * at import from the CPU (cpuid / xgetbv) or forced by NNHAL_QGEMM_ISA=avx512vnni|avxvnni|avx2|portable:
 *   avx512vnni  vpdpbusd on 512 bits, 8 x 32 tiles;
 *   avxvnni     vpdpbusd (VEX) on 256 bits, 6 x 16 tiles;
 *   avx2        vpmaddubsw's u8 x s8 pair sums saturate at 16 bits, so it runs only on narrow weights:
 *               when every packed weight bs lies in [-64, 64] (7-bit weights, as nnhal's int8 pass
 *               quantizes convolutions) a pair sum is at most 255 * 64 * 2 = 32640 < 2^15 and
 *               vpmaddubsw + vpmaddwd(ones) is exact, on the vnni byte layout (6 x 16 tiles). Full-range
 *               weights are split when packed (PackedB.split) into W1, each K pair (2i, 2i + 1) of a column
 *               cut to |w1_2i| + |w1_2i+1| <= 128 (a pair sum fits: 255 * 128 = 32640), run by the same
 *               narrow kernel, and a sparse W2 holding each cut pair's excess (one nonzero), added into
 *               the int32 tile before the epilogue: the chunk of packed rows is transposed, and per
 *               column each W2 nonzero adds a[rows][k] * v over 32 rows at a time (vpmovzxbd,
 *               vpmaddwd); the sums are the wide path's exactly. Only when W2 holds at most
 *               SPLIT_MAX_DENSITY of the weights (its cost grows with its density); other full-range
 *               weights are widened to int16 once, when packed, the activations while packed
 *               (vpmovzxbw), and vpmaddwd multiplies a broadcast K pair of one row by 8 columns' pairs
 *               into int32, exact; 6 x 16 tiles (12 accumulators);
 *   portable    plain C on the byte layout of the vnni paths, 4 x 8 tiles.
 * A forced instruction set the CPU lacks makes isa() and every kernel raise RuntimeError saying so.
 *
 * Packed weights (PackedB): panels of NR columns; within a panel, groups of KG along K, each group NR x KG
 * values (column-major inside the group): bytes in groups of 4 (one vpdpbusd operand per 16 columns) or,
 * for avx2's wide weights, int16 in pairs (one vpmaddwd operand per 8 columns). K is padded to a multiple of
 * 4 and N to NR with zeros. The packed A (per thread, a chunk of rows) holds bytes, or int16 for avx2's wide
 * weights.
 *
 * Offsets: A is held as unsigned bytes au = a + oa (oa = 128 for int8 A, its bits flipped while packing),
 * B as signed bytes bs = b - ob (ob = 128 for uint8 B). With za' = za + oa per row and d_n = ob - zb_n,
 *   sum_k (a - za)(b - zb_n) = dot(au, bs) + d_n * rowsum(au) - za' * (colsum(bs)_n + K d_n),
 * exact in int32 for K <= MAX_K (checked).
 *
 * Threads: every kernel takes a thread count; the rows (or, for few rows, the column panels) are split
 * into that many parts, all with the GIL released, run on the cpu device's persistent thread pool (the
 * native kernels' nn_pool_run, imported at load through the capsule of ../native/nn_pool_api.h) when it has
 * the workers, else part 0 on the calling thread and the others on short-lived pthreads (the native kernels
 * not built, or the pool smaller than the split). The cpu device passes its own thread count
 * (parallel.threads()), the pool's size.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../native/nn_erf.h"
#include "../native/nn_pool_api.h"

#if defined(__x86_64__) || defined(__i386__)
#define NNQ_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define MAX_K 32768          /* |sum| <= K * 255 * 256 < 2^31 */
#define MAX_THREADS 64
#define MAX_MR 8
#define MAX_NR 32
#define MAX_SEG 64           /* the direct convolution's K segments (kernel rows, or taps when dilated) */

enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVXVNNI = 2, ISA_AVX512VNNI = 3, ISA_COUNT = 4 };
static const char *ISA_NAMES[ISA_COUNT] = {"portable", "avx2", "avxvnni", "avx512vnni"};
static const int ISA_NR[ISA_COUNT] = {8, 16, 16, 32};
static const int ISA_MR[ISA_COUNT] = {4, 6, 6, 8};
/* the packed B's K group (values of one column side by side) and element size: bytes in groups of 4 for
   vpdpbusd and the portable path; int16 pairs for avx2's vpmaddwd */
static const int ISA_KG[ISA_COUNT] = {4, 2, 4, 4};
static const int ISA_ESIZE[ISA_COUNT] = {1, 2, 1, 1};
static const char *ISA_DESCRIBE[ISA_COUNT] = {
    "portable: plain C, 4x8 tiles, int32 sums; convolutions whose kernel rows are whole K groups of 4 bytes read "
    "the image in place (direct, NNHAL_QCONV_DIRECT=0: packed)",
    "avx2: weights that all fit 7 bits ([-64, 64], nnhal's int8 convolutions) as bytes, vpmaddubsw + "
    "vpmaddwd(ones) into int32 (exact: a u8*s7 pair sum fits 16 bits); full-range weights split when packed "
    "into W1 (every K pair's |w1_2i| + |w1_2i+1| <= 128) run the same way (exact: 255*128 fits 16 bits) and a "
    "sparse W2 (each too-wide pair's excess) added into the int32 sums by vpmaddwd over only its nonzeros, "
    "where W2 holds at most 3% of the weights; other weights widened to int16 K "
    "pairs once when packed, activations widened while packed, vpmaddwd into int32 (exact; vpmaddubsw would "
    "saturate on them), 6x16 tiles; weights packed for 7-bit activations (gemm_dynamic rows quantized to [0, "
    "127]; which token products: qnative.activation_mode, NNHAL_QGEMM_A7) as bytes, vpmaddubsw + "
    "vpmaddwd(ones) (exact: a u7*s8 pair sum fits 16 bits); convolutions on 7-bit weights whose kernel rows are "
    "whole K groups of 4 bytes read the image in place, int8 codes flipped as loaded (direct, "
    "NNHAL_QCONV_DIRECT=0: packed)",
    "avxvnni: vpdpbusd (VEX, 256-bit) u8*s8 into int32, 6x16 tiles",
    "avx512vnni: vpdpbusd (512-bit) u8*s8 into int32, 8x32 tiles",
};

static int g_isa = ISA_PORTABLE;
static int g_have[ISA_COUNT];
static char g_isa_error[256];     /* non-empty: NNHAL_QGEMM_ISA forced an instruction set this CPU lacks */

/* ------------------------------------------------------------------------------------------- CPU */
static void detect_cpu(void)
{
    memset(g_have, 0, sizeof g_have);
    g_have[ISA_PORTABLE] = 1;
#ifdef NNQ_X86
    __builtin_cpu_init();
    g_have[ISA_AVX2] = __builtin_cpu_supports("avx2");
    g_have[ISA_AVX512VNNI] = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vnni");
    /* AVX-VNNI: cpuid leaf 7 sub-leaf 1, EAX bit 4, with the OS saving the YMM state (XCR0 bits 1, 2) */
    unsigned a, b, c, d;
    if (g_have[ISA_AVX2] && __get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(1, 0, a, b, c, d);
        int osxsave = (c >> 27) & 1;
        if (osxsave) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            if ((lo & 6) == 6) {
                __cpuid_count(7, 1, a, b, c, d);
                g_have[ISA_AVXVNNI] = (a >> 4) & 1;
            }
        }
    }
#endif
}

static void select_isa(void)
{
    detect_cpu();
    g_isa_error[0] = 0;
    for (int i = ISA_COUNT - 1; i >= 0; i--)
        if (g_have[i]) { g_isa = i; break; }
    const char *forced = getenv("NNHAL_QGEMM_ISA");
    if (forced == NULL || forced[0] == 0)
        return;
    for (int i = 0; i < ISA_COUNT; i++) {
        if (strcmp(forced, ISA_NAMES[i]) == 0) {
            if (g_have[i])
                g_isa = i;
            else
                snprintf(g_isa_error, sizeof g_isa_error,
                         "NNHAL_QGEMM_ISA=%s: this CPU lacks that instruction set (it has the best of: %s%s%s%s)",
                         forced, g_have[3] ? "avx512vnni " : "", g_have[2] ? "avxvnni " : "",
                         g_have[1] ? "avx2 " : "", "portable");
            return;
        }
    }
    snprintf(g_isa_error, sizeof g_isa_error,
             "NNHAL_QGEMM_ISA=%s: unknown instruction set (avx512vnni, avxvnni, avx2 or portable)", forced);
}

static int isa_ok(void)
{
    if (g_isa_error[0]) {
        PyErr_SetString(PyExc_RuntimeError, g_isa_error);
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------- micro-kernels
 * c[i * NR + j] = sum over k < kp of a[i * lda + k] * b[(k / KG) * NR * KG + KG j + k % KG]: a, lda in
 * the packed A's elements (bytes; int16 for avx2), b one panel of the packed weights, kp the padded K */
typedef void (*micro_fn)(int mr, const void *a, int64_t lda, const void *b, int64_t kp, int32_t *c);

static inline __attribute__((always_inline)) void micro_c_body(int mr, const uint8_t *a, int64_t lda,
                                                               const int8_t *b, int64_t kg, int nseg,
                                                               const int64_t *seg, uint8_t flip, int32_t *c)
{
    int32_t acc[4][8];
    memset(acc, 0, sizeof acc);
    for (int s = 0; s < nseg; s++) {
        const uint8_t *as = a + (seg ? seg[s] : 0);
        for (int64_t g = 0; g < kg; g++) {
            const int8_t *bg = b + (s * kg + g) * 32;
            for (int i = 0; i < mr; i++) {
                const uint8_t *ai = as + i * lda + 4 * g;
                int32_t a0 = ai[0] ^ flip, a1 = ai[1] ^ flip, a2 = ai[2] ^ flip, a3 = ai[3] ^ flip;
                for (int j = 0; j < 8; j++)
                    acc[i][j] += a0 * bg[4 * j] + a1 * bg[4 * j + 1] + a2 * bg[4 * j + 2] + a3 * bg[4 * j + 3];
            }
        }
    }
    for (int i = 0; i < mr; i++)
        memcpy(c + i * 8, acc[i], sizeof acc[i]);
}

static void micro_portable(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    const uint8_t *a = av;
    const int8_t *b = bv;
    int64_t kg = kp / 4;
    switch (mr) {
    case 1: micro_c_body(1, a, lda, b, kg, 1, NULL, 0, c); break;
    case 2: micro_c_body(2, a, lda, b, kg, 1, NULL, 0, c); break;
    case 3: micro_c_body(3, a, lda, b, kg, 1, NULL, 0, c); break;
    default: micro_c_body(4, a, lda, b, kg, 1, NULL, 0, c); break;
    }
}

/* ---- direct convolution micro-kernels: a tile's rows read the image in place (no packed A). Row i's K is nseg
   segments of seglen bytes (a multiple of 4), segment s at a + i * step + seg[s]; the panel's K groups follow the
   segments in order (k = s * seglen + kk). flip 0x80: int8 codes, their top bit flipped as they are loaded (the
   unsigned domain of the packed A). */
typedef void (*direct_fn)(int mr, const uint8_t *a, int64_t step, const void *b, int64_t seglen, int nseg,
                          const int64_t *seg, uint8_t flip, int32_t *c);

static void direct_portable(int mr, const uint8_t *a, int64_t step, const void *bv, int64_t seglen, int nseg,
                            const int64_t *seg, uint8_t flip, int32_t *c)
{
    const int8_t *b = bv;
    switch (mr) {
    case 1: micro_c_body(1, a, step, b, seglen / 4, nseg, seg, flip, c); break;
    case 2: micro_c_body(2, a, step, b, seglen / 4, nseg, seg, flip, c); break;
    case 3: micro_c_body(3, a, step, b, seglen / 4, nseg, seg, flip, c); break;
    default: micro_c_body(4, a, step, b, seglen / 4, nseg, seg, flip, c); break;
    }
}

#ifdef NNQ_X86
static inline int32_t load4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#define T_AVX2 __attribute__((target("avx2,fma")))
#define T_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma")))

/* avx2: 6 rows x 16 columns, the 12 accumulators named (an array of them is spilled by the compiler); each
   step reads 4 bytes of every row (broadcast as one int32) and 64 bytes of the panel (two registers, 8
   columns each). Wide weights (narrow 0): the step is one K pair of int16, and vpmaddwd gives each column's
   two products summed. Narrow weights (every bs in [-64, 64], the vnni byte layout): the step is one K group
   of 4 bytes, vpmaddubsw multiplies the row's unsigned bytes by the columns' signed ones and adds pairs into
   int16, exact because |255 * 64 * 2| < 2^15, and vpmaddwd by ones adds the two pairs into int32. Fewer than
   6 rows: the missing rows read row 0 again and are not stored. step: bytes between rows. acc: the sums are
   added to c's rows (read first) instead of replacing them. nseg segments of K start at seg[s] bytes past av
   (one at av when seg is NULL); flip: each loaded byte xor 0x80 (int8 codes read in place). */
static inline __attribute__((always_inline)) T_AVX2 void micro_avx2_body(int narrow, int acc, int mr,
                                                                         const void *av, int64_t step,
                                                                         const void *bv, int64_t steps, int nseg,
                                                                         const int64_t *seg, int flip, int32_t *c)
{
    const uint8_t *b = bv;
    const __m256i ones = _mm256_set1_epi16(1), f80 = _mm256_set1_epi8((char)0x80);
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    if (acc) {
#define NNQ_INIT(r)                                                                                       \
        if (mr > r) {                                                                                     \
            c##r##0 = _mm256_loadu_si256((const __m256i *)(c + r * 16));                                  \
            c##r##1 = _mm256_loadu_si256((const __m256i *)(c + r * 16 + 8));                              \
        }
        NNQ_INIT(0)
        NNQ_INIT(1)
        NNQ_INIT(2)
        NNQ_INIT(3)
        NNQ_INIT(4)
        NNQ_INIT(5)
#undef NNQ_INIT
    }
#define NNQ_MUL(x, bb) (narrow ? _mm256_madd_epi16(_mm256_maddubs_epi16(x, bb), ones) : _mm256_madd_epi16(x, bb))
#define NNQ_ROW(r, ar)                                                                                   \
    do {                                                                                                  \
        __m256i x = _mm256_set1_epi32(load4(ar + 4 * g));                                                 \
        if (flip)                                                                                         \
            x = _mm256_xor_si256(x, f80);                                                                 \
        c##r##0 = _mm256_add_epi32(c##r##0, NNQ_MUL(x, b0));                                              \
        c##r##1 = _mm256_add_epi32(c##r##1, NNQ_MUL(x, b1));                                              \
    } while (0)
    for (int s = 0; s < nseg; s++, b += steps * 64) {
        const uint8_t *a0 = (const uint8_t *)av + (seg ? seg[s] : 0), *a1 = a0, *a2 = a0, *a3 = a0, *a4 = a0;
        const uint8_t *a5 = a0;
        if (mr > 1) a1 = a0 + step;
        if (mr > 2) a2 = a0 + 2 * step;
        if (mr > 3) a3 = a0 + 3 * step;
        if (mr > 4) a4 = a0 + 4 * step;
        if (mr > 5) a5 = a0 + 5 * step;
        for (int64_t g = 0; g < steps; g++) {
            __m256i b0 = _mm256_load_si256((const __m256i *)(b + g * 64));
            __m256i b1 = _mm256_load_si256((const __m256i *)(b + g * 64 + 32));
            NNQ_ROW(0, a0);
            NNQ_ROW(1, a1);
            NNQ_ROW(2, a2);
            NNQ_ROW(3, a3);
            NNQ_ROW(4, a4);
            NNQ_ROW(5, a5);
        }
    }
#undef NNQ_ROW
#undef NNQ_MUL
    __m256i rows[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_si256((__m256i *)(c + i * 16), rows[2 * i]);
        _mm256_storeu_si256((__m256i *)(c + i * 16 + 8), rows[2 * i + 1]);
    }
}

/* a: int16 (lda elements a row), b: the int16 K pairs */
static T_AVX2 void micro_avx2(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    micro_avx2_body(0, 0, mr, av, lda * 2, bv, kp / 2, 1, NULL, 0, c);
}

/* a: bytes, b: the vnni byte layout, every weight in [-64, 64] */
static T_AVX2 void micro_avx2_narrow(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    micro_avx2_body(1, 0, mr, av, lda, bv, kp / 4, 1, NULL, 0, c);
}

/* the direct convolution (direct_fn) on narrow weights */
static T_AVX2 void direct_avx2_narrow(int mr, const uint8_t *a, int64_t step, const void *bv, int64_t seglen,
                                      int nseg, const int64_t *seg, uint8_t flip, int32_t *c)
{
    if (flip)
        micro_avx2_body(1, 0, mr, a, step, bv, seglen / 4, nseg, seg, 1, c);
    else
        micro_avx2_body(1, 0, mr, a, step, bv, seglen / 4, nseg, seg, 0, c);
}

/* micro_avx2_narrow adding its sums to c's rows (the split weights' correction, already in c): the same int32
   sums as the narrow kernel's tile plus the correction (integer addition, any order) without a pass over the
   tile. NOTE: c is the correction block itself (16 int32 a row, as the tile), so the epilogue reads it there */
static T_AVX2 void micro_avx2_narrow_acc(int mr, const void *av, int64_t lda, const void *bv, int64_t kp,
                                         int32_t *c)
{
    micro_avx2_body(1, 1, mr, av, lda, bv, kp / 4, 1, NULL, 0, c);
}

/* rows of packed bytes widened to int16 (the avx2 micro-kernel's A): n a multiple of 4 */
static T_AVX2 void widen_avx2(const uint8_t *src, int16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = src[i];
}

static inline __attribute__((always_inline)) T_AVXVNNI void micro_avxvnni_body(
    int mr, const uint8_t *a, int64_t lda, const int8_t *b, int64_t kg, int32_t *c)
{
    __m256i acc[6][2];
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int64_t g = 0; g < kg; g++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(b + g * 64));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + g * 64 + 32));
        for (int i = 0; i < mr; i++) {
            __m256i av = _mm256_set1_epi32(load4(a + i * lda + 4 * g));
            acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], av, b0);
            acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], av, b1);
        }
    }
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_si256((__m256i *)(c + i * 16), acc[i][0]);
        _mm256_storeu_si256((__m256i *)(c + i * 16 + 8), acc[i][1]);
    }
}

static T_AVXVNNI void micro_avxvnni(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    const uint8_t *a = av;
    const int8_t *b = bv;
    int64_t kg = kp / 4;
    switch (mr) {
    case 1: micro_avxvnni_body(1, a, lda, b, kg, c); break;
    case 2: micro_avxvnni_body(2, a, lda, b, kg, c); break;
    case 3: micro_avxvnni_body(3, a, lda, b, kg, c); break;
    case 4: micro_avxvnni_body(4, a, lda, b, kg, c); break;
    case 5: micro_avxvnni_body(5, a, lda, b, kg, c); break;
    default: micro_avxvnni_body(6, a, lda, b, kg, c); break;
    }
}

static inline __attribute__((always_inline)) T_AVX512 void micro_avx512_body(
    int mr, const uint8_t *a, int64_t lda, const int8_t *b, int64_t kg, int32_t *c)
{
    __m512i acc[8][2];
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (int64_t g = 0; g < kg; g++) {
        __m512i b0 = _mm512_loadu_si512((const void *)(b + g * 128));
        __m512i b1 = _mm512_loadu_si512((const void *)(b + g * 128 + 64));
        for (int i = 0; i < mr; i++) {
            __m512i av = _mm512_set1_epi32(load4(a + i * lda + 4 * g));
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], av, b1);
        }
    }
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_si512((void *)(c + i * 32), acc[i][0]);
        _mm512_storeu_si512((void *)(c + i * 32 + 16), acc[i][1]);
    }
}

static T_AVX512 void micro_avx512(int mr, const void *av, int64_t lda, const void *bv, int64_t kp, int32_t *c)
{
    const uint8_t *a = av;
    const int8_t *b = bv;
    int64_t kg = kp / 4;
    switch (mr) {
    case 1: micro_avx512_body(1, a, lda, b, kg, c); break;
    case 2: micro_avx512_body(2, a, lda, b, kg, c); break;
    case 3: micro_avx512_body(3, a, lda, b, kg, c); break;
    case 4: micro_avx512_body(4, a, lda, b, kg, c); break;
    case 5: micro_avx512_body(5, a, lda, b, kg, c); break;
    case 6: micro_avx512_body(6, a, lda, b, kg, c); break;
    case 7: micro_avx512_body(7, a, lda, b, kg, c); break;
    default: micro_avx512_body(8, a, lda, b, kg, c); break;
    }
}
#endif

static micro_fn micro_for(int isa, int narrow)
{
#ifdef NNQ_X86
    if (isa == ISA_AVX2 && narrow)
        return micro_avx2_narrow;
    switch (isa) {
    case ISA_AVX2: return micro_avx2;
    case ISA_AVXVNNI: return micro_avxvnni;
    case ISA_AVX512VNNI: return micro_avx512;
    default: break;
    }
#endif
    (void)isa;
    (void)narrow;
    return micro_portable;
}

/* ---------------------------------------------------------------------------------------- epilogue */
enum { OUT_S32 = 0, OUT_F32 = 1, OUT_U8 = 2, OUT_S8 = 3 };

typedef struct {
    int kind;
    void *out;
    int64_t ldo;                 /* elements between output rows */
    const int32_t *bias_i;       /* [N] added to the int32 sum (S32, U8, S8) or NULL */
    const float *bias_f;         /* [N] added after scaling (F32) or NULL */
    const float *col_scale;      /* [N]: F32: the column scale; U8/S8: the requantization factor */
    double y_zero;               /* U8/S8 */
    float lo, hi;                /* F32: clamp (fused Relu / Clip); U8/S8: clamp in the quantized domain */
    int f32_rounding;            /* U8/S8: 0: ONNX's reference (double); 1: float32, as onnxruntime */
    const uint8_t *table;        /* U8/S8: 256 output bytes indexed by each requantized code's byte (a fused
                                    element-wise CodeTable, as a quantized SiLU), or NULL */
    const int32_t *table32;      /* the same table widened to int32 (each entry as out's type reads it), for the
                                    avx2 epilogue's gather; set with table */
    int gelu;                    /* F32: the exact Gelu (nn_gelu) on each clamped value (a fused Gelu node),
                                    applied by run_part to a tile row's block of panels once written */
} epilogue_t;

/* Per-row state of the packed A: za' (zero point in the au domain), rowsum(au), the row scale (F32) */
typedef struct {
    int32_t *za;
    int32_t *rowsum;
    float *scale;
} rows_t;

/* Column terms of the packed B: d_n and colsum(bs)_n + K d_n */
typedef struct {
    const int32_t *d;
    const int32_t *cterm;
} cols_t;

static inline __attribute__((always_inline)) void epilogue_body(const epilogue_t *e, const rows_t *r,
                                                                 const cols_t *cs, const int32_t *tile, int nr,
                                                                 int64_t m0, int mr, int64_t n0, int nc)
{
    for (int i = 0; i < mr; i++) {
        int64_t m = m0 + i;
        uint32_t za = r->za ? (uint32_t)r->za[m] : 0, rsum = r->rowsum ? (uint32_t)r->rowsum[m] : 0;
        const int32_t *t = tile + i * nr;
        int32_t v[MAX_NR];
        for (int j = 0; j < nc; j++) {   /* unsigned: wraps like int32 arithmetic, no undefined overflow */
            uint32_t s = (uint32_t)t[j];
            if (cs->d)
                s += (uint32_t)cs->d[n0 + j] * rsum;
            if (cs->cterm)
                s -= za * (uint32_t)cs->cterm[n0 + j];
            if (e->bias_i)
                s += (uint32_t)e->bias_i[n0 + j];
            v[j] = (int32_t)s;
        }
        if (e->kind == OUT_S32) {
            memcpy((int32_t *)e->out + m * e->ldo + n0, v, nc * sizeof(int32_t));
        } else if (e->kind == OUT_F32) {
            float *y = (float *)e->out + m * e->ldo + n0;
            float rs = r->scale ? r->scale[m] : 1.0f;
            for (int j = 0; j < nc; j++) {
                float f = (float)v[j] * rs * e->col_scale[n0 + j];
                if (e->bias_f)
                    f += e->bias_f[n0 + j];
                f = f < e->lo ? e->lo : f;
                y[j] = f > e->hi ? e->hi : f;
            }
        } else {
            double lo = e->lo, hi = e->hi;
            if (e->f32_rounding) {
                /* onnxruntime's QLinearConv: float32(sum) * factor in float32, rounded, + zero */
                float z = (float)e->y_zero, flo = e->lo, fhi = e->hi;
                for (int j = 0; j < nc; j++) {
                    float q = nearbyintf((float)v[j] * e->col_scale[n0 + j]) + z;
                    q = q < flo ? flo : q;
                    q = q > fhi ? fhi : q;
                    v[j] = (int32_t)q;
                }
            } else {
                for (int j = 0; j < nc; j++) {
                    /* ONNX: int32 sum times the float32 factor, in double (numpy's int32 * float32), + zero,
                       rounded half to even, saturated */
                    double q = nearbyint((double)v[j] * (double)e->col_scale[n0 + j] + e->y_zero);
                    q = q < lo ? lo : q;
                    q = q > hi ? hi : q;
                    v[j] = (int32_t)q;
                }
            }
            if (e->kind == OUT_U8) {
                uint8_t *y = (uint8_t *)e->out + m * e->ldo + n0;
                for (int j = 0; j < nc; j++)
                    y[j] = (uint8_t)v[j];
            } else {
                int8_t *y = (int8_t *)e->out + m * e->ldo + n0;
                for (int j = 0; j < nc; j++)
                    y[j] = (int8_t)v[j];
            }
            if (e->table) {
                uint8_t *y = (uint8_t *)e->out + m * e->ldo + n0;
                for (int j = 0; j < nc; j++)
                    y[j] = e->table[y[j]];
            }
        }
    }
}

typedef void (*epilogue_fn)(const epilogue_t *, const rows_t *, const cols_t *, const int32_t *, int, int64_t, int,
                            int64_t, int);

static void epilogue_portable(const epilogue_t *e, const rows_t *r, const cols_t *cs, const int32_t *tile, int nr,
                              int64_t m0, int mr, int64_t n0, int nc)
{
    epilogue_body(e, r, cs, tile, nr, m0, mr, n0, nc);
}

#ifdef NNQ_X86
/* x < lo ? lo : x, then x > hi ? hi : x, as the scalar epilogue clamps (a NaN stays NaN) */
static inline __attribute__((always_inline)) T_AVX2 __m256 clamp_ps(__m256 x, __m256 lo, __m256 hi)
{
    x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(x, hi, _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

/* nn_gelu (native/nn_erf.h) on 8 lanes, its operations in its order with each polynomial step p * x2 + c as one
   fused multiply-add: what the compiler makes of the native Gelu's loop in its x86-64-v3 build (kernels.c is not
   built with -ffp-contract=off), so the fused Gelu gives the separate Gelu node's values on avx2 CPUs */
static inline __attribute__((always_inline)) T_AVX2 __m256 gelu_ps(__m256 x)
{
    const __m256 t = _mm256_div_ps(x, _mm256_set1_ps(1.41421353816986083984f));
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
    const __m256 x2 = _mm256_mul_ps(xc, xc);
#define NQ_STEP(acc, c) acc = _mm256_fmadd_ps(acc, x2, _mm256_set1_ps(c))
    __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
    NQ_STEP(p, 2.77068142495902e-08f);
    NQ_STEP(p, -2.10102402082508e-06f);
    NQ_STEP(p, -5.69250639462346e-05f);
    NQ_STEP(p, -7.34990630326855e-04f);
    NQ_STEP(p, -2.95459980854025e-03f);
    NQ_STEP(p, -1.60960333262415e-02f);
    __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
    NQ_STEP(q, -2.13374055278905e-04f);
    NQ_STEP(q, -1.68282697438203e-03f);
    NQ_STEP(q, -7.37332916720468e-03f);
    NQ_STEP(q, -1.42647390514189e-02f);
#undef NQ_STEP
    __m256 erf = _mm256_div_ps(_mm256_mul_ps(p, xc), q);
    erf = _mm256_blendv_ps(erf, t, _mm256_cmp_ps(t, t, _CMP_UNORD_Q));
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), erf)), _mm256_set1_ps(0.5f));
}

static inline __attribute__((always_inline)) T_AVX2 __m256d clamp_pd(__m256d x, __m256d lo, __m256d hi)
{
    x = _mm256_blendv_pd(x, lo, _mm256_cmp_pd(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_pd(x, hi, _mm256_cmp_pd(x, hi, _CMP_GT_OQ));
}

/* y[0:n] = nn_gelu(y[0:n]) in place, 8 lanes at a time (gelu_ps), the tail too (through a buffer), so every
   value is gelu_ps's */
static T_AVX2 void gelu_run_avx2(float *y, int64_t n)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, gelu_ps(_mm256_loadu_ps(y + j)));
    if (j < n) {
        float tail[8] = {0};
        memcpy(tail, y + j, (size_t)(n - j) * sizeof(float));
        _mm256_storeu_ps(tail, gelu_ps(_mm256_loadu_ps(tail)));
        memcpy(y + j, tail, (size_t)(n - j) * sizeof(float));
    }
}

/* the epilogue on 8 columns at a time, the same operations in the same order as epilogue_body (int32
   wrapping sums; float32 / double products, no fused multiply-add), the columns left over by it */
static T_AVX2 void epilogue_avx2(const epilogue_t *e, const rows_t *r, const cols_t *cs, const int32_t *tile, int nr,
                                 int64_t m0, int mr, int64_t n0, int nc)
{
    int nv = nc & ~7;
    const int *table32 = e->table32;
    const __m256i byte_mask = _mm256_set1_epi32(0xff);
    for (int i = 0; i < mr; i++) {
        int64_t m = m0 + i;
        const int32_t *t = tile + i * nr;
        __m256i za = _mm256_set1_epi32(r->za ? r->za[m] : 0), rsum = _mm256_set1_epi32(r->rowsum ? r->rowsum[m] : 0);
        __m256 rs = _mm256_set1_ps(r->scale ? r->scale[m] : 1.0f);
        __m256 flo = _mm256_set1_ps(e->lo), fhi = _mm256_set1_ps(e->hi), fz = _mm256_set1_ps((float)e->y_zero);
        __m256d dlo = _mm256_set1_pd(e->lo), dhi = _mm256_set1_pd(e->hi), dz = _mm256_set1_pd(e->y_zero);
        for (int j = 0; j < nv; j += 8) {
            int64_t n = n0 + j;
            __m256i v = _mm256_loadu_si256((const __m256i *)(t + j));
            if (cs->d)
                v = _mm256_add_epi32(v, _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(cs->d + n)), rsum));
            if (cs->cterm)
                v = _mm256_sub_epi32(v, _mm256_mullo_epi32(za, _mm256_loadu_si256((const __m256i *)(cs->cterm + n))));
            if (e->bias_i)
                v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i *)(e->bias_i + n)));
            if (e->kind == OUT_S32) {
                _mm256_storeu_si256((__m256i *)((int32_t *)e->out + m * e->ldo + n), v);
                continue;
            }
            if (e->kind == OUT_F32) {
                __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), rs), _mm256_loadu_ps(e->col_scale + n));
                if (e->bias_f)
                    f = _mm256_add_ps(f, _mm256_loadu_ps(e->bias_f + n));
                _mm256_storeu_ps((float *)e->out + m * e->ldo + n, clamp_ps(f, flo, fhi));
                continue;
            }
            __m256i qi;
            if (e->f32_rounding) {
                __m256 q = _mm256_round_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(e->col_scale + n)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                qi = _mm256_cvttps_epi32(clamp_ps(_mm256_add_ps(q, fz), flo, fhi));
            } else {
                __m256d half[2];
                for (int h = 0; h < 2; h++) {
                    __m256d x = _mm256_cvtepi32_pd(h ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v));
                    __m256d f = _mm256_cvtps_pd(_mm_loadu_ps(e->col_scale + n + 4 * h));
                    x = _mm256_round_pd(_mm256_add_pd(_mm256_mul_pd(x, f), dz), _MM_FROUND_TO_NEAREST_INT
                                        | _MM_FROUND_NO_EXC);
                    half[h] = clamp_pd(x, dlo, dhi);
                }
                qi = _mm256_set_m128i(_mm256_cvttpd_epi32(half[1]), _mm256_cvttpd_epi32(half[0]));
            }
            /* NOTE: a fused CodeTable is gathered from its int32 copy while the codes are still in a register:
               the byte-wise lookup after the store (8 loads of bytes just stored, and a store each) took more
               time than the rest of the epilogue on the detector's N = 16 / 32 convolutions. The index is the
               code's byte (qi is clamped to out's range, so for int8 the low byte is the two's complement). */
            if (table32)
                qi = _mm256_i32gather_epi32(table32, _mm256_and_si256(qi, byte_mask), 4);
            __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
            if (e->kind == OUT_U8)
                _mm_storel_epi64((__m128i *)((uint8_t *)e->out + m * e->ldo + n), _mm_packus_epi16(q16, q16));
            else
                _mm_storel_epi64((__m128i *)((int8_t *)e->out + m * e->ldo + n), _mm_packs_epi16(q16, q16));
        }
        if (nv < nc)
            epilogue_body(e, r, cs, t + nv, nr, m, 1, n0 + nv, nc - nv);
    }
}

static T_AVX512 void epilogue_avx512(const epilogue_t *e, const rows_t *r, const cols_t *cs, const int32_t *tile,
                                     int nr, int64_t m0, int mr, int64_t n0, int nc)
{
    epilogue_body(e, r, cs, tile, nr, m0, mr, n0, nc);
}
#endif

static void gelu_run_c(float *y, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        y[j] = nn_gelu(y[j]);
}

typedef void (*gelu_fn)(float *y, int64_t n);

static gelu_fn gelu_for(int isa)
{
#ifdef NNQ_X86
    if (isa != ISA_PORTABLE)
        return gelu_run_avx2;
#endif
    (void)isa;
    return gelu_run_c;
}

static epilogue_fn epilogue_for(int isa)
{
#ifdef NNQ_X86
    if (isa == ISA_AVX512VNNI)
        return epilogue_avx512;
    if (isa == ISA_AVX2 || isa == ISA_AVXVNNI)
        return epilogue_avx2;
#endif
    (void)isa;
    return epilogue_portable;
}

/* ---------------------------------------------------------------------------------- packed weights */
typedef struct {
    PyObject_HEAD
    int isa, nr, kg, esize;   /* kg, esize: the K group and the element size (ISA_KG, ISA_ESIZE) */
    int64_t k, kp, n, panels;
    int b_signed;
    int narrow;          /* avx2: every bs in [-64, 64], or a7, packed as bytes for vpmaddubsw (micro_avx2_narrow) */
    int a7;              /* gemm_dynamic quantizes the activations to 7 bits ([0, 127]); no other kernel takes it */
    int split;           /* avx2, full-range weights: bs = W1 + W2, W1 narrow (every K pair |w1_2i| + |w1_2i+1|
                            <= 128) in data, W2 sparse (each too-wide pair's excess) added by split_corr_avx2 */
    int64_t w2_nnz;      /* W2's nonzeros */
    int64_t w2_len;      /* its entries: the nonzeros and a padding entry per column with an odd count */
    int32_t *w2_start;   /* [panels * nr + 1]: column col's W2 entries are [w2_start[col], w2_start[col + 1]) */
    int32_t *w2_k;       /* [w2_nnz] their K indices, ascending within a column */
    int32_t *w2_v;       /* [w2_nnz / 2] their values two at a time, an int32 of the int16 pair (v_e, v_e+1):
                            vpmaddwd's operand; a column with an odd count ends with an entry (k 0, v 0) */
    int8_t *data;        /* panels * kp * nr elements of esize bytes, 64-byte aligned */
    int32_t *d;          /* [n] ob - zb_n */
    int32_t *cterm;      /* [n] colsum(bs)_n + k d_n */
    int any_d;           /* some d_n != 0: the epilogue needs the row sums */
} PackedB;

static void packed_dealloc(PackedB *self)
{
    free(self->data);
    free(self->d);
    free(self->cterm);
    free(self->w2_start);
    free(self->w2_k);
    free(self->w2_v);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *packed_repr(PackedB *self)
{
    return PyUnicode_FromFormat("<qkernels.PackedB K=%lld N=%lld %s %s%s%s%s>", (long long)self->k,
                                (long long)self->n, self->b_signed ? "int8" : "uint8", ISA_NAMES[self->isa],
                                self->split ? " split" : self->narrow ? " narrow" : "", self->a7 ? " a7" : "");
}

static PyObject *packed_get_k(PackedB *self, void *c) { (void)c; return PyLong_FromLongLong(self->k); }
static PyObject *packed_get_n(PackedB *self, void *c) { (void)c; return PyLong_FromLongLong(self->n); }
static PyObject *packed_get_isa(PackedB *self, void *c) { (void)c; return PyUnicode_FromString(ISA_NAMES[self->isa]); }
static PyObject *packed_get_narrow(PackedB *self, void *c) { (void)c; return PyBool_FromLong(self->narrow && !self->split); }
static PyObject *packed_get_a7(PackedB *self, void *c) { (void)c; return PyBool_FromLong(self->a7); }
static PyObject *packed_get_split(PackedB *self, void *c) { (void)c; return PyBool_FromLong(self->split); }
static PyObject *packed_get_w2_nnz(PackedB *self, void *c) { (void)c; return PyLong_FromLongLong(self->w2_nnz); }
static PyObject *packed_get_nbytes(PackedB *self, void *c)
{
    (void)c;
    int64_t w2 = self->split ? 4 * (self->panels * self->nr + 1) + 6 * self->w2_len : 0;
    return PyLong_FromLongLong(self->panels * self->kp * self->nr * self->esize + 8 * self->n + w2);
}

static PyGetSetDef packed_getset[] = {
    {"k", (getter)packed_get_k, NULL, "depth K", NULL},
    {"n", (getter)packed_get_n, NULL, "columns N", NULL},
    {"isa", (getter)packed_get_isa, NULL, "the instruction set the panels are laid out for", NULL},
    {"nbytes", (getter)packed_get_nbytes, NULL, "bytes held", NULL},
    {"narrow", (getter)packed_get_narrow, NULL,
     "avx2: every weight (less the uint8 offset 128) in [-64, 64], or packed for 7-bit activations, run by "
     "vpmaddubsw (exact)", NULL},
    {"a7", (getter)packed_get_a7, NULL, "packed for 7-bit activations: gemm_dynamic quantizes rows to [0, 127]",
     NULL},
    {"split", (getter)packed_get_split, NULL,
     "avx2, full-range weights: packed as a narrow W1 (every K pair's |w1_2i| + |w1_2i+1| <= 128, run by "
     "vpmaddubsw) plus a sparse W2 (the excess) added into the int32 sums before the epilogue (exact)", NULL},
    {"w2_nnz", (getter)packed_get_w2_nnz, NULL, "split: the nonzero weights of the sparse correction W2", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PackedBType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal.device.cpu.qnative._qkernels.PackedB",
    .tp_basicsize = sizeof(PackedB),
    .tp_dealloc = (destructor)packed_dealloc,
    .tp_repr = (reprfunc)packed_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An int8 / uint8 weight matrix packed for the integer GEMM (made by pack_b).",
    .tp_getset = packed_getset,
};

/* ---------------------------------------------------------------------------- argument checking
 * One helper for every array argument: None, buffer protocol, C-contiguity, element format, and the
 * element count; errors name the kernel and the argument. */
typedef struct {
    Py_buffer view;
    int held;
} arg_t;

static void release_all(arg_t *args, int n)
{
    for (int i = 0; i < n; i++)
        if (args[i].held) {
            PyBuffer_Release(&args[i].view);
            args[i].held = 0;
        }
}

static char format_code(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == 0 || f[1] != 0)
        return 0;
    return f[0];
}

/* formats: the accepted element codes ("Bb": uint8 or int8; "i": int32; "f": float32; "h": int16);
   count: the exact element count wanted, or -1 */
static int get_array(const char *kernel, const char *name, PyObject *obj, arg_t *arg, const char *formats,
                     Py_ssize_t count, int writable, int optional)
{
    arg->held = 0;
    if (obj == Py_None) {
        if (optional)
            return 1;
        PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be an array, not None", kernel, name);
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be a C-contiguous array, not %.80s", kernel, name,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &arg->view, flags) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: argument '%s' must be a C-contiguous%s array", kernel, name,
                     writable ? ", writable" : "");
        return 0;
    }
    arg->held = 1;
    char code = format_code(&arg->view);
    int sizes_ok = (code == 'B' || code == 'b') ? arg->view.itemsize == 1
        : (code == 'h') ? arg->view.itemsize == 2 : (code == 'i' || code == 'f') ? arg->view.itemsize == 4 : 0;
    if (!code || !strchr(formats, code) || !sizes_ok) {
        PyErr_Format(PyExc_TypeError, "%s: argument '%s' has element format '%s'; wanted one of '%s' "
                     "(B uint8, b int8, h int16, i int32, f float32)", kernel, name,
                     arg->view.format ? arg->view.format : "B", formats);
        PyBuffer_Release(&arg->view);
        arg->held = 0;
        return 0;
    }
    if (count >= 0 && arg->view.len / arg->view.itemsize != count) {
        PyErr_Format(PyExc_ValueError, "%s: argument '%s' has %zd elements; wanted %zd", kernel, name,
                     arg->view.len / arg->view.itemsize, count);
        PyBuffer_Release(&arg->view);
        arg->held = 0;
        return 0;
    }
    return 1;
}

static int overlaps(const arg_t *a, const arg_t *b)
{
    if (!a->held || !b->held)
        return 0;
    const char *p = a->view.buf, *q = b->view.buf;
    return p < q + b->view.len && q < p + a->view.len;
}

static int check_no_overlap(const char *kernel, const arg_t *out, const arg_t *args, const char *const *names,
                            int n)
{
    for (int i = 0; i < n; i++)
        if (overlaps(out, &args[i])) {
            PyErr_Format(PyExc_ValueError, "%s: argument 'out' overlaps argument '%s'", kernel, names[i]);
            return 0;
        }
    return 1;
}

static int get_int(const char *kernel, const char *name, PyObject *obj, int64_t lo, int64_t hi, int64_t *v)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be an int, not %.80s", kernel, name,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    long long x = PyLong_AsLongLong(obj);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "%s: argument '%s' does not fit 64 bits", kernel, name);
        return 0;
    }
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s: argument '%s' is %lld; wanted %lld..%lld", kernel, name, x,
                     (long long)lo, (long long)hi);
        return 0;
    }
    *v = x;
    return 1;
}

static int get_float(const char *kernel, const char *name, PyObject *obj, float *v)
{
    double x = PyFloat_AsDouble(obj);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be a float, not %.80s", kernel, name,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    *v = (float)x;
    return 1;
}

static int check_nargs(const char *kernel, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s: takes %zd arguments, got %zd", kernel, want, nargs);
        return 0;
    }
    return 1;
}

static int mul_ok(const char *kernel, int64_t a, int64_t b, int64_t *r)
{
    if (a < 0 || b < 0 || (a && b > INT64_MAX / a)) {
        PyErr_Format(PyExc_OverflowError, "%s: sizes %lld x %lld overflow", kernel, (long long)a, (long long)b);
        return 0;
    }
    *r = a * b;
    return 1;
}

/* ------------------------------------------------------------------------------------------ pack_b */
/* every weight less its offset (bs = b - ob) in [-64, 64]: vpmaddubsw's pair sums cannot saturate */
static int fits_7bit(const uint8_t *src, int64_t count, int b_signed)
{
    int lo = 127, hi = -128;
    for (int64_t i = 0; i < count; i++) {
        int v = b_signed ? (int)(int8_t)src[i] : (int)src[i] - 128;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    return lo >= -64 && hi <= 64;
}

/* the weight bs = b - ob at (kk, col) of b ([K, N], or [N, K] when trans), 0 past K (the padding) */
static inline int32_t weight_at(const uint8_t *src, int64_t k, int64_t n, int trans, int b_signed, int64_t kk,
                                int64_t col)
{
    if (kk >= k)
        return 0;
    uint8_t raw = trans ? src[col * k + kk] : src[kk * n + col];
    return b_signed ? (int32_t)(int8_t)raw : (int32_t)raw - 128;
}

/* splits the K pair (*x, *y) of one column so that |x1| + |y1| <= 128 (a u8 x s8 pair sum then fits int16:
   255 * 128 = 32640): the pair keeps x1, y1 and the excess, taken from the larger one alone, is returned
   (0 if the pair fits) with *which = 0 for x, 1 for y. |excess| <= 255 - 128 = 127. */
static inline int32_t split_pair(int32_t *x, int32_t *y, int *which)
{
    int32_t ax = *x < 0 ? -*x : *x, ay = *y < 0 ? -*y : *y;
    if (ax + ay <= 128)
        return 0;
    int32_t *big = ax >= ay ? x : y, small = ax >= ay ? ay : ax;
    int32_t kept = *big < 0 ? -(128 - small) : 128 - small;
    int32_t excess = *big - kept;
    *big = kept;
    *which = ax >= ay ? 0 : 1;
    return excess;
}

/* the K pairs of b that split_pair splits (W2's nonzeros), and W2's entries (*len: each column's count
   rounded up to even) */
static int64_t count_excess(const uint8_t *src, int64_t k, int64_t n, int trans, int b_signed, int64_t *len)
{
    int64_t count = 0;
    *len = 0;
    for (int64_t col = 0; col < n; col++) {
        int64_t here = 0;
        for (int64_t kk = 0; kk < k; kk += 2) {
            int32_t x = weight_at(src, k, n, trans, b_signed, kk, col);
            int32_t y = weight_at(src, k, n, trans, b_signed, kk + 1, col);
            int which;
            here += split_pair(&x, &y, &which) != 0;
        }
        count += here;
        *len += (here + 1) & ~(int64_t)1;
    }
    return count;
}

/* NOTE: the split costs the narrow kernel + about 5-12% (the transposed chunk, the correction's blocks and
   adds) + about 5.5% of the wide path's time per 1% of W2 density (thread CPU time on MiniLM's shapes,
   docs/int8.md): it breaks even with the wide path near 2.6% (384 x 384) to 4.2% (384 x 1536) */
#define SPLIT_MAX_DENSITY 0.03

/* pack_b(b, k, n, b_zero, trans[, a7[, split]]) -> PackedB. b: 2-D int8 or uint8 [K, N] (trans 0) or [N, K]
   (trans 1), given as a flat C-contiguous array with its two sizes; b_zero: None or an array of 1 or N zero
   points. a7 (default 0): the weights serve gemm_dynamic with 7-bit activations (rows quantized to [0, 127]);
   on avx2 they are then packed as bytes for vpmaddubsw whatever their range (|127 * 128 * 2| < 2^15: exact).
   split (avx2, a7 0; default -1): how full-range weights are packed: -1 split into a narrow W1 and a sparse W2
   when W2's density is at most SPLIT_MAX_DENSITY, else widened to int16; 0 widened; 1 split (even weights
   that fit 7 bits: an empty W2; for tests). Other instruction sets ignore it. */
static PyObject *qk_pack_b(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "pack_b";
    (void)mod;
    if (!isa_ok() || (nargs != 6 && nargs != 7 && !check_nargs(kernel, nargs, 5)))
        return NULL;
    int64_t k, n, trans, a7 = 0, split = -1;
    if (!get_int(kernel, "k", args[1], 1, MAX_K, &k) || !get_int(kernel, "n", args[2], 1, INT32_MAX, &n)
        || !get_int(kernel, "trans", args[4], 0, 1, &trans) || (nargs >= 6 && !get_int(kernel, "a7", args[5], 0, 1, &a7))
        || (nargs == 7 && !get_int(kernel, "split", args[6], -1, 1, &split)))
        return NULL;
    arg_t a[2];
    memset(a, 0, sizeof a);
    int64_t kn;
    if (!mul_ok(kernel, k, n, &kn) || !get_array(kernel, "b", args[0], &a[0], "Bb", kn, 0, 0))
        return NULL;
    int b_signed = format_code(&a[0].view) == 'b';
    if (!get_array(kernel, "b_zero", args[3], &a[1], b_signed ? "b" : "B", -1, 0, 1)) {
        release_all(a, 2);
        return NULL;
    }
    Py_ssize_t nz = a[1].held ? a[1].view.len : 0;
    if (a[1].held && nz != 1 && nz != n) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'b_zero' has %zd elements; wanted 1 or N = %lld", kernel, nz,
                     (long long)n);
        release_all(a, 2);
        return NULL;
    }
    PackedB *p = PyObject_New(PackedB, &PackedBType);
    if (p == NULL) {
        release_all(a, 2);
        return NULL;
    }
    p->data = NULL;
    p->d = p->cterm = p->w2_start = p->w2_k = p->w2_v = NULL;
    const uint8_t *src = a[0].view.buf;
    int ob = b_signed ? 0 : 128;
    p->isa = g_isa;
    p->a7 = (int)a7;
    int fits = g_isa == ISA_AVX2 && (a7 || fits_7bit(src, kn, b_signed));
    p->split = 0;
    p->w2_nnz = p->w2_len = 0;
    if (g_isa == ISA_AVX2 && !a7 && (split == 1 || (!fits && split == -1))) {
        int64_t excess, len;
        Py_BEGIN_ALLOW_THREADS
        excess = count_excess(src, k, n, (int)trans, b_signed, &len);
        Py_END_ALLOW_THREADS
        p->split = split == 1 || (double)excess <= SPLIT_MAX_DENSITY * (double)kn;
        p->w2_nnz = p->split ? excess : 0;
        p->w2_len = p->split ? len : 0;
    }
    p->narrow = fits || p->split;
    /* NOTE: narrow avx2 weights take the vnni byte layout (avxvnni's NR, KG and element size) */
    int layout = p->narrow ? ISA_AVXVNNI : g_isa;
    p->nr = ISA_NR[layout];
    p->kg = ISA_KG[layout];
    p->esize = ISA_ESIZE[layout];
    p->k = k;
    p->kp = (k + 3) & ~(int64_t)3;
    p->n = n;
    p->panels = (n + p->nr - 1) / p->nr;
    p->b_signed = b_signed;
    size_t bytes = (size_t)(p->panels * p->kp * p->nr * p->esize);
    p->data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    p->d = malloc(n * sizeof(int32_t));
    p->cterm = malloc(n * sizeof(int32_t));
    int w2_ok = 1;
    if (p->split) {
        p->w2_start = malloc((size_t)(p->panels * p->nr + 1) * sizeof(int32_t));
        p->w2_k = malloc((size_t)(p->w2_len + 1) * sizeof(int32_t));
        p->w2_v = malloc((size_t)(p->w2_len / 2 + 1) * sizeof(int32_t));
        w2_ok = p->w2_start && p->w2_k && p->w2_v;
    }
    if (!p->data || !p->d || !p->cterm || !w2_ok) {
        Py_DECREF(p);     /* packed_dealloc frees what was allocated */
        release_all(a, 2);
        return PyErr_NoMemory();
    }
    const uint8_t *zb = a[1].held ? a[1].view.buf : NULL;
    int nr = p->nr, kg = p->kg, any_d = 0;
    int64_t used = 0;
    memset(p->data, 0, bytes);
    Py_BEGIN_ALLOW_THREADS
    for (int64_t col = 0; col < n; col++) {
        int64_t panel = (col / nr) * p->kp * nr;
        int j = (int)(col % nr);
        int32_t colsum = 0;
        if (p->split)
            p->w2_start[col] = (int32_t)used;
        for (int64_t kk = 0; kk < k; kk += 2) {
            int32_t v[2] = {weight_at(src, k, n, (int)trans, b_signed, kk, col),
                            weight_at(src, k, n, (int)trans, b_signed, kk + 1, col)};
            colsum += v[0] + v[1];
            int which = 0;
            int32_t excess = p->split ? split_pair(&v[0], &v[1], &which) : 0;
            if (excess != 0) {
                p->w2_k[used] = (int32_t)(kk + which);
                ((int16_t *)p->w2_v)[used] = (int16_t)excess;     /* x86: little-endian, v_e the pair's low half */
                used++;
            }
            for (int h = 0; h < 2 && kk + h < k; h++) {
                int64_t at = panel + ((kk + h) / kg) * nr * kg + j * kg + (kk + h) % kg;
                if (p->esize == 2)
                    ((int16_t *)p->data)[at] = (int16_t)v[h];
                else
                    p->data[at] = (int8_t)v[h];
            }
        }
        if (p->split && (used - p->w2_start[col]) % 2) {
            p->w2_k[used] = 0;
            ((int16_t *)p->w2_v)[used] = 0;
            used++;
        }
        int64_t zi = nz == 1 ? 0 : col;
        int32_t z = zb == NULL ? 0 : (b_signed ? (int32_t)(int8_t)zb[zi] : (int32_t)zb[zi]);
        p->d[col] = ob - z;
        p->cterm[col] = colsum + (int32_t)k * p->d[col];
        any_d |= p->d[col] != 0;
    }
    if (p->split)
        for (int64_t col = n; col <= p->panels * nr; col++)
            p->w2_start[col] = (int32_t)used;
    Py_END_ALLOW_THREADS
    p->any_d = any_d;
    release_all(a, 2);
    return (PyObject *)p;
}

/* ------------------------------------------------------------------------------------ the driver */
typedef struct job job_t;
/* packs rows [m0, m0 + mr) of A into apack (mr rows of kp bytes), filling rows_t entries */
typedef void (*pack_fn)(const job_t *j, int64_t m0, int mr, uint8_t *apack);

struct job {
    const PackedB *b;
    int64_t m;
    epilogue_t e;
    rows_t rows;
    cols_t cols;
    pack_fn pack;
    /* A sources */
    const void *a;
    const float *kscale;         /* gemm_dynamic: [K] factors each row of x is multiplied by before it is
                                    quantized (a SmoothQuant Mul folded into the packing), or NULL */
    int a_signed;
    const uint8_t *a_zero;
    Py_ssize_t n_azero;
    /* convolution geometry (pack_conv) */
    int64_t h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    /* the direct convolution (conv_direct_setup), or direct NULL: the tile rows' step in the image a, K as nseg
       segments of seglen bytes at seg[s] from a row's first tap; flat: a 1x1 stride-1 convolution without pads,
       whose row m is the image's pixel m */
    direct_fn direct;
    int64_t dstep, seglen, seg[MAX_SEG];
    int nseg, flat;
    /* split */
    int parts, by_rows;
    int *failed;          /* set by a part that could not allocate its scratch */
};

/* one part of a split kernel: fn(job, part) */
typedef void (*part_fn)(const void *job, int part);

typedef struct {
    part_fn fn;
    const void *job;
    int part;
} part_t;

static void *part_thread(void *arg)
{
    part_t *p = arg;
    p->fn(p->job, p->part);
    return NULL;
}

/* the cpu device's thread pool (kernels.c through its capsule), or NULL: short-lived threads */
static const nn_pool_api *g_pool;

typedef struct {
    part_fn fn;
    const void *job;
} pool_job_t;

static void pool_part(const void *args, int64_t part, int64_t parts)
{
    const pool_job_t *p = args;
    (void)parts;
    p->fn(p->job, (int)part);
}

/* at load: the pool of the native kernels, when they are built and their API is this one's */
static void import_pool(void)
{
    PyObject *native = PyImport_ImportModule("nnhal.device.cpu.native._kernels");
    const nn_pool_api *api = native ? PyCapsule_Import(NN_POOL_API_CAPSULE, 0) : NULL;
    Py_XDECREF(native);
    if (api == NULL) {
        PyErr_Clear();
        return;
    }
    if (api->version == NN_POOL_API_VERSION && api->size == (int32_t)sizeof(nn_pool_api))
        g_pool = api;
}

/* every part (the GIL released by the caller): on the pool when it has the workers; else parts 1..parts-1
   on pthreads and part 0 here, a part whose thread cannot start here after part 0 */
static void run_parts(part_fn fn, const void *job, int parts)
{
    if (parts > 1 && g_pool != NULL && g_pool->workers() >= parts - 1) {
        pool_job_t p = {fn, job};
        g_pool->run(pool_part, &p, parts);
        return;
    }
    pthread_t th[MAX_THREADS];
    part_t ps[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 1; i < parts; i++) {
        ps[i].fn = fn;
        ps[i].job = job;
        ps[i].part = i;
        started[i] = pthread_create(&th[i], NULL, part_thread, &ps[i]) == 0;
    }
    fn(job, 0);
    for (int i = 1; i < parts; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(job, i);
    }
}

#ifdef NNQ_X86
/* the split weights' correction (PackedB.split): the packed A chunk's rows [0, rows) (kp bytes each) transposed
   into at ([kp][cp] bytes: K row kk holds every row's byte kk), 8 x 8 bytes at a time; rows a multiple of 8 */
static T_AVX2 void transpose_chunk_avx2(const uint8_t *apack, int64_t kp, int64_t rows, uint8_t *at, int64_t cp)
{
    for (int64_t r = 0; r < rows; r += 8) {
        const uint8_t *s = apack + r * kp;
        int64_t kk = 0;
        for (; kk + 8 <= kp; kk += 8) {
            __m128i t0 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + kk)),
                                           _mm_loadl_epi64((const __m128i *)(s + kp + kk)));
            __m128i t1 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + 2 * kp + kk)),
                                           _mm_loadl_epi64((const __m128i *)(s + 3 * kp + kk)));
            __m128i t2 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + 4 * kp + kk)),
                                           _mm_loadl_epi64((const __m128i *)(s + 5 * kp + kk)));
            __m128i t3 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + 6 * kp + kk)),
                                           _mm_loadl_epi64((const __m128i *)(s + 7 * kp + kk)));
            __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
            __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
            __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2), _mm_unpacklo_epi32(u1, u3),
                            _mm_unpackhi_epi32(u1, u3)};
            for (int q = 0; q < 4; q++) {
                _mm_storel_epi64((__m128i *)(at + (kk + 2 * q) * cp + r), v[q]);
                _mm_storel_epi64((__m128i *)(at + (kk + 2 * q + 1) * cp + r), _mm_srli_si128(v[q], 8));
            }
        }
        for (; kk < kp; kk++)
            for (int i = 0; i < 8; i++)
                at[kk * cp + r + i] = s[i * kp + kk];
    }
}

/* r[i][j] -> r[j][i] for 8 x 8 int32 */
static inline __attribute__((always_inline)) T_AVX2 void transpose8_epi32(__m256i *r)
{
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* rows [r, r + 16 nv) of split_corr_avx2: per pair of entries (k1, v1), (k2, v2) of a column and 16 rows, the
   two K rows' bytes interleaved (punpcklbw / punpckhbw) and widened to int16 pairs (a1, a2) (vpmovzxbw), then
   vpmaddwd by (v1, v2): a1 v1 + a2 v2 in int32, exact */
static inline __attribute__((always_inline)) T_AVX2 void split_corr_rows(const PackedB *b, const int32_t *start,
                                                                         const uint8_t *at, int64_t cp, int64_t r,
                                                                         int nv, int32_t *corr)
{
    __m256i cols[4][16];
    for (int j = 0; j < 16; j++) {
        __m256i c[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
        for (int32_t e = start[j]; e < start[j + 1]; e += 2) {
            const uint8_t *x1 = at + (int64_t)b->w2_k[e] * cp + r, *x2 = at + (int64_t)b->w2_k[e + 1] * cp + r;
            __m256i v = _mm256_set1_epi32(b->w2_v[e / 2]);
            for (int q = 0; q < nv; q++) {
                __m128i y1 = _mm_loadu_si128((const __m128i *)(x1 + 16 * q));
                __m128i y2 = _mm_loadu_si128((const __m128i *)(x2 + 16 * q));
                __m256i lo = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(y1, y2));
                __m256i hi = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(y1, y2));
                c[2 * q] = _mm256_add_epi32(c[2 * q], _mm256_madd_epi16(lo, v));
                c[2 * q + 1] = _mm256_add_epi32(c[2 * q + 1], _mm256_madd_epi16(hi, v));
            }
        }
        for (int q = 0; q < 2 * nv; q++)
            cols[q][j] = c[q];
    }
    for (int q = 0; q < 2 * nv; q++) {
        transpose8_epi32(cols[q]);
        transpose8_epi32(cols[q] + 8);
        int32_t *out = corr + (r + 8 * q) * 16;
        for (int i = 0; i < 8; i++) {
            _mm256_storeu_si256((__m256i *)(out + i * 16), cols[q][i]);
            _mm256_storeu_si256((__m256i *)(out + i * 16 + 8), cols[q][8 + i]);
        }
    }
}

/* corr[r][j] = sum over column p * 16 + j's W2 entries (kk, v) of a[r][kk] * v, for rows r < rows (a multiple
   of 16) of the transposed chunk at: one column at a time, two entries at a time, 32 rows at a time, then 16;
   each 8 rows x 16 columns transposed into corr ([rows][16]) */
static T_AVX2 void split_corr_avx2(const PackedB *b, int64_t p, const uint8_t *at, int64_t cp, int64_t rows,
                                   int32_t *corr)
{
    const int32_t *start = b->w2_start + p * 16;
    int64_t r = 0;
    for (; r + 32 <= rows; r += 32)
        split_corr_rows(b, start, at, cp, r, 2, corr);
    for (; r < rows; r += 16)
        split_corr_rows(b, start, at, cp, r, 1, corr);
}
#endif

static const uint8_t *direct_rows(const job_t *j, int64_t m0, int mr);

static void run_part(const void *job, int part)
{
    const job_t *j = job;
    const PackedB *b = j->b;
    int isa = b->isa, nr = b->nr, mr_max = ISA_MR[isa];
    micro_fn micro = micro_for(isa, b->narrow);
    epilogue_fn epi = epilogue_for(isa);
    gelu_fn gelu = gelu_for(isa);
    float *out_f32 = j->e.kind == OUT_F32 ? (float *)j->e.out : NULL;
    int64_t m_lo = 0, m_hi = j->m, p_lo = 0, p_hi = b->panels;
    if (j->by_rows) {
        int64_t blocks = (j->m + mr_max - 1) / mr_max;
        m_lo = blocks * part / j->parts * mr_max;
        m_hi = blocks * (part + 1) / j->parts * mr_max;
        m_hi = m_hi > j->m ? j->m : m_hi;
    } else {
        p_lo = b->panels * part / j->parts;
        p_hi = b->panels * (part + 1) / j->parts;
    }
    if (m_lo >= m_hi || p_lo >= p_hi)
        return;
    /* rows in chunks whose packed A stays in L2 beside the panels (and at most 256 rows) */
    int64_t chunk = (256 * 1024) / (b->kp * b->esize);
    chunk = chunk < mr_max ? mr_max : chunk > 256 ? 256 : chunk;
    chunk = chunk / mr_max * mr_max;
    uint8_t *apack = aligned_alloc(64, (size_t)((((chunk + 15) & ~(int64_t)15) * b->kp + 63) & ~(int64_t)63));
    /* avx2: the chunk again, widened to int16 (the packers write bytes) */
    int16_t *awide = b->esize == 2 ? aligned_alloc(64, (size_t)((chunk * b->kp * 2 + 63) & ~(int64_t)63)) : NULL;
    /* NOTE: columns in blocks of panels that fit L2 with the A chunk: each panel is used chunk/mr times */
    int64_t pblock = (256 * 1024) / (b->kp * nr * b->esize);
    pblock = pblock < 1 ? 1 : pblock;
    /* split weights: the chunk transposed (cp rows) and the correction of a block of panels, computed before
       the block's tiles (a block of at most 128 KB of correction, beside the chunk and its transpose in L2) */
    int64_t cp = (chunk + 15) & ~(int64_t)15;
    if (b->split && pblock > (128 * 1024) / (cp * 64))
        pblock = (128 * 1024) / (cp * 64) < 1 ? 1 : (128 * 1024) / (cp * 64);
    uint8_t *at = b->split ? aligned_alloc(64, (size_t)(b->kp * cp)) : NULL;
    int32_t *corr = b->split ? aligned_alloc(64, (size_t)(pblock * cp * 16 * sizeof(int32_t))) : NULL;
    int32_t tile[MAX_MR * MAX_NR];
    const uint8_t *src[256 / 4 + 1];   /* the direct convolution: each tile's rows in the image, or NULL: packed */
    if (apack == NULL || (b->esize == 2 && awide == NULL) || (b->split && (at == NULL || corr == NULL))) {
        free(apack);
        free(awide);
        free(at);
        free(corr);
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t c0 = m_lo; c0 < m_hi; c0 += chunk) {
        int64_t c1 = c0 + chunk > m_hi ? m_hi : c0 + chunk;
        for (int64_t m0 = c0; m0 < c1; m0 += mr_max) {
            int mr = (int)(c1 - m0 < mr_max ? c1 - m0 : mr_max);
            src[(m0 - c0) / mr_max] = j->direct ? direct_rows(j, m0, mr) : NULL;
            if (src[(m0 - c0) / mr_max])
                continue;
            j->pack(j, m0, mr, apack + (m0 - c0) * b->kp);
#ifdef NNQ_X86
            if (awide)
                widen_avx2(apack + (m0 - c0) * b->kp, awide + (m0 - c0) * b->kp, mr * b->kp);
#endif
        }
#ifdef NNQ_X86
        int64_t rows16 = (c1 - c0 + 15) & ~(int64_t)15;
        if (b->split) {
            memset(apack + (c1 - c0) * b->kp, 0, (size_t)((rows16 - (c1 - c0)) * b->kp));
            transpose_chunk_avx2(apack, b->kp, rows16, at, cp);
        }
#endif
        for (int64_t pb = p_lo; pb < p_hi; pb += pblock) {
            int64_t pe = pb + pblock > p_hi ? p_hi : pb + pblock;
#ifdef NNQ_X86
            if (b->split)
                for (int64_t p = pb; p < pe; p++)
                    split_corr_avx2(b, p, at, cp, rows16, corr + (p - pb) * cp * 16);
#endif
            for (int64_t m0 = c0; m0 < c1; m0 += mr_max) {
                int mr = (int)(c1 - m0 < mr_max ? c1 - m0 : mr_max);
                const void *ap = awide ? (const void *)(awide + (m0 - c0) * b->kp)
                                       : (const void *)(apack + (m0 - c0) * b->kp);
                const uint8_t *ds = src[(m0 - c0) / mr_max];
                for (int64_t p = pb; p < pe; p++) {
                    const int8_t *panel = b->data + p * b->kp * nr * b->esize;
                    int32_t *t = tile;
                    if (ds)
                        j->direct(mr, ds, j->dstep, b->data + p * b->kp * nr, j->seglen, j->nseg, j->seg,
                                  j->a_signed ? 0x80 : 0, tile);
#ifdef NNQ_X86
                    else if (corr) {
                        t = corr + ((p - pb) * cp + (m0 - c0)) * 16;
                        micro_avx2_narrow_acc(mr, ap, b->kp, panel, b->kp, t);
                    }
#endif
                    else
                        micro(mr, ap, b->kp, panel, b->kp, t);
                    int64_t n0 = p * nr;
                    int nc = (int)(b->n - n0 < nr ? b->n - n0 : nr);
                    epi(&j->e, &j->rows, &j->cols, t, nr, m0, mr, n0, nc);
                }
                /* NOTE: a fused Gelu on the tile rows' block of panels just written (mr rows of up to pblock * 16
                   floats, in L1 or L2): inside the epilogue, 2 vectors a row between micro-kernel calls, it cost
                   twice the separate pass (thread time, 1024 x 384 x 1536); runs this long keep the divisions'
                   pipeline full */
                if (j->e.gelu) {
                    int64_t n0 = pb * nr, n1 = pe * nr < b->n ? pe * nr : b->n;
                    for (int i = 0; i < mr; i++)
                        gelu(out_f32 + (m0 + i) * j->e.ldo + n0, n1 - n0);
                }
            }
        }
    }
    free(apack);
    free(awide);
    free(at);
    free(corr);
}

static void choose_split(job_t *j, int64_t threads, int64_t macs)
{
    int mr = ISA_MR[j->b->isa];
    int64_t parts = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    /* a part should have at least ~2M multiply-adds (a thread start costs ~20 us) */
    int64_t most = macs / (2 << 20);
    parts = parts > most ? (most < 1 ? 1 : most) : parts;
    j->by_rows = j->m >= parts * mr * 2 || j->b->panels < parts;
    if (j->by_rows) {
        int64_t blocks = (j->m + mr - 1) / mr;
        parts = parts > blocks ? blocks : parts;
    } else if (parts > j->b->panels) {
        parts = j->b->panels;
    }
    j->parts = (int)(parts < 1 ? 1 : parts);
}

/* ---- A packers */
static inline __attribute__((always_inline)) void pack_quantized_body(const job_t *j, int64_t m0, int mr,
                                                               uint8_t *apack)
{
    int64_t k = j->b->k, kp = j->b->kp;
    uint8_t flip = j->a_signed ? 0x80 : 0;
    for (int i = 0; i < mr; i++) {
        int64_t m = m0 + i;
        const uint8_t *src = (const uint8_t *)j->a + m * k;
        uint8_t *dst = apack + i * kp;
        int32_t sum = 0;
        for (int64_t kk = 0; kk < k; kk++) {
            uint8_t v = src[kk] ^ flip;
            dst[kk] = v;
            sum += v;
        }
        for (int64_t kk = k; kk < kp; kk++)
            dst[kk] = 0;
        int32_t z = 0;
        if (j->a_zero)
            z = j->a_signed ? (int32_t)(int8_t)j->a_zero[j->n_azero == 1 ? 0 : m] : j->a_zero[j->n_azero == 1 ? 0 : m];
        j->rows.za[m] = z + (j->a_signed ? 128 : 0);
        j->rows.rowsum[m] = sum;
    }
}

/* one row's quantization: dst[k] = clamp(rint(x[k] / scale) + zf, qlo, qhi) + add, in float32 (rint half to
   even, as numpy); returns the sum of dst. range_row: lo = min(x, 0), hi = max(x, 0). The avx2 versions do the
   same float operations on 8 lanes (vdivps, vroundps to nearest even, vaddps, max / min, exact conversion), so
   every path gives the same bytes; the compiler left the scalar loops unvectorized (branches, 2x slower). */
typedef void (*range_fn)(const float *x, int64_t k, float *lo, float *hi);
typedef int32_t (*quant_fn)(const float *x, int64_t k, float scale, float zf, float qlo, float qhi, int32_t add,
                            uint8_t *dst);

static void range_row_c(const float *x, int64_t k, float *plo, float *phi)
{
    float lo = 0.0f, hi = 0.0f;
    for (int64_t kk = 0; kk < k; kk++) {
        lo = x[kk] < lo ? x[kk] : lo;
        hi = x[kk] > hi ? x[kk] : hi;
    }
    *plo = lo;
    *phi = hi;
}

static int32_t quant_row_c(const float *x, int64_t k, float scale, float zf, float qlo, float qhi, int32_t add,
                           uint8_t *dst)
{
    int32_t sum = 0;
    for (int64_t kk = 0; kk < k; kk++) {
        float q = nearbyintf(x[kk] / scale) + zf;
        q = q < qlo ? qlo : q > qhi ? qhi : q;
        int32_t v = (int32_t)q + add;
        dst[kk] = (uint8_t)v;
        sum += v;
    }
    return sum;
}

#ifdef NNQ_X86
static T_AVX2 void range_row_avx2(const float *x, int64_t k, float *plo, float *phi)
{
    __m256 lo8 = _mm256_setzero_ps(), hi8 = lo8;
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        __m256 v = _mm256_loadu_ps(x + kk);
        lo8 = _mm256_min_ps(v, lo8);
        hi8 = _mm256_max_ps(v, hi8);
    }
    float l[8], h[8];
    _mm256_storeu_ps(l, lo8);
    _mm256_storeu_ps(h, hi8);
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < 8; i++) {
        lo = l[i] < lo ? l[i] : lo;
        hi = h[i] > hi ? h[i] : hi;
    }
    for (; kk < k; kk++) {
        lo = x[kk] < lo ? x[kk] : lo;
        hi = x[kk] > hi ? x[kk] : hi;
    }
    *plo = lo;
    *phi = hi;
}

static T_AVX2 int32_t quant_row_avx2(const float *x, int64_t k, float scale, float zf, float qlo, float qhi,
                                     int32_t add, uint8_t *dst)
{
    const __m256 s8 = _mm256_set1_ps(scale), z8 = _mm256_set1_ps(zf), lo8 = _mm256_set1_ps(qlo),
                 hi8 = _mm256_set1_ps(qhi);
    const __m256i add8 = _mm256_set1_epi32(add);
    __m256i sum8 = _mm256_setzero_si256();
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + kk), s8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, z8), lo8), hi8);
        __m256i v = _mm256_add_epi32(_mm256_cvttps_epi32(q), add8);      /* 0..255 */
        sum8 = _mm256_add_epi32(sum8, v);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(dst + kk), _mm_packus_epi16(w, w));
    }
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, sum8);
    int32_t sum = 0;
    for (int i = 0; i < 8; i++)
        sum += lanes[i];
    return sum + quant_row_c(x + kk, k - kk, scale, zf, qlo, qhi, add, dst + kk);
}
#endif

/* per-row dynamic quantization, as DynamicQuantizeGemm defines it (operator/nn_dynamic_quantize_gemm.py):
   int8: scale max|x| / 127, xq = rint(x / scale); uint8: over [min(x, 0), max(x, 0)], scale range / 255,
   zero rint(-lo / scale), xq = clip(rint(x / scale) + zero, 0, 255). Float32 throughout, as numpy.
   Weights packed a7: 7 bits whatever the row's type, over [min(x, 0), max(x, 0)], scale range / 127, zero
   rint(-lo / scale), xq = clip(rint(x / scale) + zero, 0, 127): a scale at most int8's max|x| / 127, twice
   uint8's. */
#define NQ_KSCALE_CHUNK 512     /* floats of a row scaled at a time (kscale) into a buffer on the stack */

/* x[0:n] * ks[0:n] into buf, float32 products as numpy's Mul (no fused multiply-add: -ffp-contract=off) */
static inline __attribute__((always_inline)) void scale_chunk(const float *x, const float *ks, int64_t n, float *buf)
{
    for (int64_t t = 0; t < n; t++)
        buf[t] = x[t] * ks[t];
}

/* range(x * ks) by chunks: min / max of the chunks' [min(., 0), max(., 0)], the same as over the whole row */
static inline __attribute__((always_inline)) void range_scaled(const float *x, const float *ks, int64_t k,
                                                               float *plo, float *phi, range_fn range)
{
    if (!ks) {
        range(x, k, plo, phi);
        return;
    }
    float buf[NQ_KSCALE_CHUNK], lo = 0.0f, hi = 0.0f;
    for (int64_t kk = 0; kk < k; kk += NQ_KSCALE_CHUNK) {
        int64_t n = k - kk < NQ_KSCALE_CHUNK ? k - kk : NQ_KSCALE_CHUNK;
        float l, h;
        scale_chunk(x + kk, ks + kk, n, buf);
        range(buf, n, &l, &h);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
    *plo = lo;
    *phi = hi;
}

/* quant(x * ks) by chunks: each element's code depends on it alone, the sums add up */
static inline __attribute__((always_inline)) int32_t quant_scaled(const float *x, const float *ks, int64_t k,
                                                                  float scale, float zf, float qlo, float qhi,
                                                                  int32_t add, uint8_t *dst, quant_fn quant)
{
    if (!ks)
        return quant(x, k, scale, zf, qlo, qhi, add, dst);
    float buf[NQ_KSCALE_CHUNK];
    int32_t sum = 0;
    for (int64_t kk = 0; kk < k; kk += NQ_KSCALE_CHUNK) {
        int64_t n = k - kk < NQ_KSCALE_CHUNK ? k - kk : NQ_KSCALE_CHUNK;
        scale_chunk(x + kk, ks + kk, n, buf);
        sum += quant(buf, n, scale, zf, qlo, qhi, add, dst + kk);
    }
    return sum;
}

static inline __attribute__((always_inline)) void pack_dynamic_body(const job_t *j, int64_t m0, int mr,
                                                                    uint8_t *apack, range_fn range, quant_fn quant)
{
    int64_t k = j->b->k, kp = j->b->kp;
    const float *ks = j->kscale;
    for (int i = 0; i < mr; i++) {
        int64_t m = m0 + i;
        const float *x = (const float *)j->a + m * k;
        uint8_t *dst = apack + i * kp;
        float lo, hi, scale;
        range_scaled(x, ks, k, &lo, &hi, range);
        int32_t zero, sum;
        if (j->a_signed && !j->b->a7) {
            float peak = -lo > hi ? -lo : hi;
            scale = peak > 0 ? peak / 127.0f : 1.0f;
            zero = 128;
            sum = quant_scaled(x, ks, k, scale, 0.0f, -127.0f, 127.0f, 128, dst, quant);
        } else {
            float levels = j->b->a7 ? 127.0f : 255.0f;
            scale = hi > lo ? (hi - lo) / levels : 1.0f;
            zero = (int32_t)nearbyintf(-lo / scale);
            sum = quant_scaled(x, ks, k, scale, (float)zero, 0.0f, levels, 0, dst, quant);
        }
        for (int64_t kk = k; kk < kp; kk++)
            dst[kk] = 0;
        j->rows.za[m] = zero;
        j->rows.rowsum[m] = sum;
        j->rows.scale[m] = scale;
    }
}

/* n bytes from src to dst, each xor flip (0x80: int8 codes to the unsigned domain). NOTE: inline 8-byte moves
   (the last one overlapping the one before) instead of a memcpy call: a convolution's taps are a few bytes each
   (the 3-channel stem copies 9 bytes a kernel row), where the call and its size dispatch cost more than the copy */
static inline __attribute__((always_inline)) void copy_flip(uint8_t *dst, const uint8_t *src, int64_t n, uint8_t flip)
{
    uint64_t f8 = flip ? 0x8080808080808080ull : 0, v;
    if (n >= 8) {
        int64_t k = 0;
        for (; k + 8 <= n; k += 8) {
            memcpy(&v, src + k, 8);
            v ^= f8;
            memcpy(dst + k, &v, 8);
        }
        if (k < n) {
            memcpy(&v, src + n - 8, 8);
            v ^= f8;
            memcpy(dst + n - 8, &v, 8);
        }
        return;
    }
    for (int64_t k = 0; k < n; k++)
        dst[k] = src[k] ^ flip;
}

/* the sum of n bytes, each xor flip */
static inline __attribute__((always_inline)) int32_t byte_sum(const uint8_t *p, int64_t n, uint8_t flip)
{
    int64_t k = 0;
    uint32_t sum = 0;
#ifdef NNQ_X86
    __m128i acc = _mm_setzero_si128(), zero = _mm_setzero_si128(), f = _mm_set1_epi8((char)flip);
    for (; k + 16 <= n; k += 16)
        acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(p + k)), f), zero));
    sum = (uint32_t)(_mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#endif
    for (; k < n; k++)
        sum += p[k] ^ flip;
    return (int32_t)sum;
}

/* a convolution's za' (its input zero point in the unsigned domain of the packed bytes) */
static inline int32_t conv_za(const job_t *j)
{
    int32_t z = 0;
    if (j->a_zero)
        z = j->a_signed ? (int32_t)(int8_t)j->a_zero[0] : j->a_zero[0];
    return z + (j->a_signed ? 128 : 0);
}

/* implicit GEMM: row m is the output pixel (n, oy, ox); its K = kh * kw * c taps in (ky, kx, c) order, a
   tap outside the image reads the zero point (contributes nothing) */
static inline __attribute__((always_inline)) void pack_conv_body(const job_t *j, int64_t m0, int mr,
                                                          uint8_t *apack)
{
    int64_t kp = j->b->kp, c = j->c;
    uint8_t flip = j->a_signed ? 0x80 : 0;
    int32_t za = conv_za(j);
    uint8_t pad = (uint8_t)za;
    /* NOTE: the row sums feed only the d_n * rowsum term, zero unless the weights have zero points (uint8 or
       nonzero int8 ones): symmetric int8 weights skip the pass over the row */
    int need_sum = j->cols.d != NULL;
    int64_t ox = m0 % j->ow, oy = (m0 / j->ow) % j->oh, img = m0 / (j->ow * j->oh);
    for (int i = 0; i < mr; i++) {
        int64_t m = m0 + i;
        uint8_t *dst = apack + i * kp;
        int64_t pos = 0, x0 = ox * j->sw - j->pl;
        for (int64_t ky = 0; ky < j->kh; ky++) {
            int64_t iy = oy * j->sh - j->pt + ky * j->dh;
            if (iy < 0 || iy >= j->h) {
                memset(dst + pos, pad, j->kw * c);
                pos += j->kw * c;
                continue;
            }
            const uint8_t *row = (const uint8_t *)j->a + (img * j->h + iy) * j->w * c;
            if (j->dw == 1 && x0 >= 0 && x0 + j->kw <= j->w) {
                /* the kernel row's taps are adjacent pixels: one copy of kw * c bytes (a 7x7 stem on 3
                   channels: 7 copies of 21 bytes per row instead of 49 of 3) */
                copy_flip(dst + pos, row + x0 * c, j->kw * c, flip);
                pos += j->kw * c;
                continue;
            }
            for (int64_t kx = 0; kx < j->kw; kx++, pos += c) {
                int64_t ix = x0 + kx * j->dw;
                if (ix < 0 || ix >= j->w)
                    memset(dst + pos, pad, c);
                else
                    copy_flip(dst + pos, row + ix * c, c, flip);
            }
        }
        for (int64_t kk = pos; kk < kp; kk++)
            dst[kk] = 0;
        j->rows.za[m] = za;
        j->rows.rowsum[m] = need_sum ? byte_sum(dst, pos, 0) : 0;
        if (++ox == j->ow) {
            ox = 0;
            if (++oy == j->oh) {
                oy = 0;
                img++;
            }
        }
    }
}

/* each packer compiled for each instruction set: the per-element division and rounding of the dynamic
   quantization vectorize (vdivps, vroundps) only under the wider targets */
#define PACKERS(suffix, target)                                                                          \
    static target void pack_quantized_##suffix(const job_t *j, int64_t m0, int mr, uint8_t *apack)      \
    {                                                                                                     \
        pack_quantized_body(j, m0, mr, apack);                                                            \
    }                                                                                                     \
    static target void pack_dynamic_##suffix(const job_t *j, int64_t m0, int mr, uint8_t *apack)        \
    {                                                                                                     \
        pack_dynamic_body(j, m0, mr, apack, range_row_##suffix, quant_row_##suffix);                    \
    }                                                                                                     \
    static target void pack_conv_##suffix(const job_t *j, int64_t m0, int mr, uint8_t *apack)           \
    {                                                                                                     \
        pack_conv_body(j, m0, mr, apack);                                                                 \
    }
#define T_NONE
#define range_row_portable range_row_c
#define quant_row_portable quant_row_c
#define range_row_avx512 range_row_avx2
#define quant_row_avx512 quant_row_avx2
PACKERS(portable, T_NONE)
#ifdef NNQ_X86
PACKERS(avx2, T_AVX2)
PACKERS(avx512, T_AVX512)
#endif

enum { PACK_QUANTIZED = 0, PACK_DYNAMIC = 1, PACK_CONV = 2 };

/* the direct convolution's tile of rows [m0, m0 + mr): the first row's first tap in the image (the rows' za' and
   row sums filled as pack_conv_body fills them), or NULL when a row needs a tap outside the image or the rows
   are not one output row (the tile is packed instead) */
static const uint8_t *direct_rows(const job_t *j, int64_t m0, int mr)
{
    const uint8_t *src;
    if (j->flat) {
        src = (const uint8_t *)j->a + m0 * j->c;
    } else {
        int64_t ox = m0 % j->ow, oy = (m0 / j->ow) % j->oh, img = m0 / (j->ow * j->oh);
        int64_t iy = oy * j->sh - j->pt, x0 = ox * j->sw - j->pl;
        if (ox + mr > j->ow || iy < 0 || iy + (j->kh - 1) * j->dh >= j->h || x0 < 0
            || (ox + mr - 1) * j->sw - j->pl + (j->kw - 1) * j->dw >= j->w)
            return NULL;
        src = (const uint8_t *)j->a + ((img * j->h + iy) * j->w + x0) * j->c;
    }
    int32_t za = conv_za(j);
    for (int i = 0; i < mr; i++) {
        int32_t sum = 0;
        if (j->cols.d)
            for (int s = 0; s < j->nseg; s++)
                sum += byte_sum(src + i * j->dstep + j->seg[s], j->seglen, j->a_signed ? 0x80 : 0);
        j->rows.za[m0 + i] = za;
        j->rows.rowsum[m0 + i] = sum;
    }
    return src;
}

static pack_fn packer_for(int isa, int kind)
{
    static const pack_fn portable[3] = {pack_quantized_portable, pack_dynamic_portable, pack_conv_portable};
#ifdef NNQ_X86
    static const pack_fn avx2[3] = {pack_quantized_avx2, pack_dynamic_avx2, pack_conv_avx2};
    static const pack_fn avx512[3] = {pack_quantized_avx512, pack_dynamic_avx512, pack_conv_avx512};
    if (isa == ISA_AVX512VNNI)
        return avx512[kind];
    if (isa == ISA_AVX2 || isa == ISA_AVXVNNI)
        return avx2[kind];
#endif
    (void)isa;
    return portable[kind];
}

/* ---- the epilogue arguments shared by every kernel: out, bias, scale, y_zero, lo, hi, rounding */
static int get_epilogue(const char *kernel, PyObject *const *args, arg_t *out, arg_t *bias, arg_t *scale,
                        int64_t rows, int64_t n, epilogue_t *e)
{
    int64_t count;
    if (!mul_ok(kernel, rows, n, &count) || !get_array(kernel, "out", args[0], out, "ifBb", count, 1, 0))
        return 0;
    char code = format_code(&out->view);
    e->kind = code == 'i' ? OUT_S32 : code == 'f' ? OUT_F32 : code == 'B' ? OUT_U8 : OUT_S8;
    e->out = out->view.buf;
    e->ldo = n;
    if (!get_array(kernel, "bias", args[1], bias, e->kind == OUT_F32 ? "f" : "i", n, 0, 1)
        || !get_array(kernel, "scale", args[2], scale, "f", n, 0, e->kind == OUT_S32))
        return 0;
    e->bias_i = e->kind != OUT_F32 && bias->held ? bias->view.buf : NULL;
    e->bias_f = e->kind == OUT_F32 && bias->held ? bias->view.buf : NULL;
    e->col_scale = scale->held ? scale->view.buf : NULL;
    int64_t yz, rounding;
    if (!get_int(kernel, "y_zero", args[3], -128, 255, &yz) || !get_float(kernel, "lo", args[4], &e->lo)
        || !get_float(kernel, "hi", args[5], &e->hi) || !get_int(kernel, "rounding", args[6], 0, 1, &rounding))
        return 0;
    e->f32_rounding = (int)rounding;
    e->y_zero = (double)yz;
    if (e->kind == OUT_U8 || e->kind == OUT_S8) {
        float qlo = e->kind == OUT_U8 ? 0.0f : -128.0f, qhi = e->kind == OUT_U8 ? 255.0f : 127.0f;
        e->lo = e->lo > qlo ? e->lo : qlo;
        e->hi = e->hi < qhi ? e->hi : qhi;
    }
    return 1;
}

static int alloc_rows(job_t *j, int need_scale)
{
    size_t m = (size_t)(j->m > 0 ? j->m : 1);
    j->rows.za = malloc(m * sizeof(int32_t));
    j->rows.rowsum = malloc(m * sizeof(int32_t));
    j->rows.scale = need_scale ? malloc(m * sizeof(float)) : NULL;
    if (!j->rows.za || !j->rows.rowsum || (need_scale && !j->rows.scale)) {
        free(j->rows.za); free(j->rows.rowsum); free(j->rows.scale);
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

static void free_rows(job_t *j)
{
    free(j->rows.za);
    free(j->rows.rowsum);
    free(j->rows.scale);
}

static int get_packed(const char *kernel, PyObject *obj, const PackedB **b)
{
    if (!PyObject_TypeCheck(obj, &PackedBType)) {
        PyErr_Format(PyExc_TypeError, "%s: argument 'packed' must be a PackedB (from pack_b), not %.80s", kernel,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    *b = (const PackedB *)obj;
    /* NOTE: avx2 multiplies a7 weights by vpmaddubsw, exact only on activations below 128: only gemm_dynamic,
       which quantizes them, may take them */
    if ((*b)->a7 && strcmp(kernel, "gemm_dynamic") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'packed' was packed for 7-bit activations (a7), which only "
                     "gemm_dynamic takes", kernel);
        return 0;
    }
    if ((*b)->isa != g_isa) {
        PyErr_Format(PyExc_RuntimeError, "%s: argument 'packed' was packed for %s; this process runs %s", kernel,
                     ISA_NAMES[(*b)->isa], ISA_NAMES[g_isa]);
        return 0;
    }
    return 1;
}

/* runs the job's parts without the GIL; 0 with MemoryError set when a part could not allocate */
static int run_job(job_t *j, int64_t threads)
{
    int failed = 0;
    j->failed = &failed;
    choose_split(j, threads, j->m * j->b->n * j->b->k);
    Py_BEGIN_ALLOW_THREADS
    run_parts(run_part, j, j->parts);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

/* gemm(a, a_zero, packed, out, bias, scale, y_zero, lo, hi, rounding, threads): out[M, N] = epilogue((a - a_zero)
   (b - b_zero)); a: uint8 / int8 [M, K]; a_zero: None or 1 or M zero points of a's type. out's type picks
   the epilogue: int32 (+ int32 bias), float32 (sum * scale[n] + float32 bias, clamped to [lo, hi]),
   uint8 / int8 (requantized by the factor scale[n], + y_zero, clamped to [lo, hi] and the type; rounding 0:
   as ONNX's reference, in double; 1: in float32, as onnxruntime's QLinearConv). */
static PyObject *qk_gemm(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "gemm";
    static const char *const names[] = {"a", "a_zero", "bias", "scale"};
    (void)mod;
    if (!isa_ok() || !check_nargs(kernel, nargs, 11))
        return NULL;
    const PackedB *b;
    int64_t threads;
    if (!get_packed(kernel, args[2], &b) || !get_int(kernel, "threads", args[10], 0, 1 << 20, &threads))
        return NULL;
    arg_t in[4], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    job_t j;
    memset(&j, 0, sizeof j);
    j.b = b;
    PyObject *result = NULL;
    if (!get_array(kernel, "a", args[0], &in[0], "Bb", -1, 0, 0))
        goto done;
    if (in[0].view.len % b->k) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'a' has %zd elements, not a multiple of K = %lld", kernel,
                     in[0].view.len, (long long)b->k);
        goto done;
    }
    j.m = in[0].view.len / b->k;
    j.a = in[0].view.buf;
    j.a_signed = format_code(&in[0].view) == 'b';
    if (!get_array(kernel, "a_zero", args[1], &in[1], j.a_signed ? "b" : "B", -1, 0, 1))
        goto done;
    j.n_azero = in[1].held ? in[1].view.len : 0;
    if (in[1].held && j.n_azero != 1 && j.n_azero != j.m) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'a_zero' has %zd elements; wanted 1 or M = %lld", kernel,
                     j.n_azero, (long long)j.m);
        goto done;
    }
    j.a_zero = in[1].held ? in[1].view.buf : NULL;
    if (!get_epilogue(kernel, args + 3, &out, &in[2], &in[3], j.m, b->n, &j.e)
        || !check_no_overlap(kernel, &out, in, names, 4) || !alloc_rows(&j, 0))
        goto done;
    if (j.e.kind == OUT_F32)
        j.rows.scale = NULL;   /* the scale is per column: a_scale folded into it by the caller */
    j.cols.d = b->any_d ? b->d : NULL;
    j.cols.cterm = b->cterm;
    j.pack = packer_for(b->isa, PACK_QUANTIZED);
    if (!j.m || run_job(&j, threads))
        result = Py_NewRef(Py_None);
    free_rows(&j);
done:
    release_all(in, 4);
    release_all(&out, 1);
    return result;
}

/* gemm_dynamic(x, signed, packed, out, bias, scale, lo, hi, threads[, kscale[, gelu]]): out float32 [M, N] =
   clamp((xq - zx) bs * sx[m] * scale[n] + bias) with every row of float32 x [M, K] quantized while packed
   (int8 symmetric when signed, else uint8 asymmetric; 7-bit asymmetric when the weights were packed a7);
   the weights must be int8 with no zero point. kscale (None or float32 [K]): each row is x[m, :] * kscale,
   multiplied in float32 while packed (a Mul by a constant along K before the product, folded into it).
   gelu (default 0): 1 applies the exact Gelu (nn_gelu, the native Gelu's formula) to each output in the
   epilogue, while the tile's values are in L1 (a Gelu node after the product, fused into it). */
static PyObject *qk_gemm_dynamic(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "gemm_dynamic";
    static const char *const names[] = {"x", "bias", "scale", "kscale"};
    (void)mod;
    if (!isa_ok() || !check_nargs(kernel, nargs, nargs >= 10 && nargs <= 11 ? nargs : 9))
        return NULL;
    const PackedB *b;
    int64_t threads, sgn, gelu = 0;
    if (!get_packed(kernel, args[2], &b) || !get_int(kernel, "threads", args[8], 0, 1 << 20, &threads)
        || !get_int(kernel, "signed", args[1], 0, 1, &sgn)
        || (nargs == 11 && !get_int(kernel, "gelu", args[10], 0, 1, &gelu)))
        return NULL;
    if (!b->b_signed || b->any_d) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'packed' must hold int8 weights with zero point 0", kernel);
        return NULL;
    }
    arg_t in[4], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    job_t j;
    memset(&j, 0, sizeof j);
    j.b = b;
    PyObject *result = NULL;
    if (!get_array(kernel, "x", args[0], &in[0], "f", -1, 0, 0))
        goto done;
    if (in[0].view.len / 4 % b->k) {
        PyErr_Format(PyExc_ValueError, "%s: argument 'x' has %zd elements, not a multiple of K = %lld", kernel,
                     in[0].view.len / 4, (long long)b->k);
        goto done;
    }
    j.m = in[0].view.len / 4 / b->k;
    j.a = in[0].view.buf;
    j.a_signed = (int)sgn;
    PyObject *zero = PyLong_FromLong(0);
    PyObject *eargs[7] = {args[3], args[4], args[5], zero, args[6], args[7], zero};
    if (zero == NULL)
        goto done;
    int ok = get_epilogue(kernel, eargs, &out, &in[1], &in[2], j.m, b->n, &j.e);
    Py_DECREF(zero);
    if (!ok)
        goto done;
    if (j.e.kind != OUT_F32) {
        PyErr_Format(PyExc_TypeError, "%s: argument 'out' must be float32", kernel);
        goto done;
    }
    if (nargs >= 10 && !get_array(kernel, "kscale", args[9], &in[3], "f", b->k, 0, 1))
        goto done;
    j.e.gelu = (int)gelu;
    j.kscale = in[3].held ? in[3].view.buf : NULL;
    if (!check_no_overlap(kernel, &out, in, names, 4) || !alloc_rows(&j, 1))
        goto done;
    j.cols.d = NULL;
    j.cols.cterm = b->cterm;
    j.pack = packer_for(b->isa, PACK_DYNAMIC);
    if (!j.m || run_job(&j, threads))
        result = Py_NewRef(Py_None);
    free_rows(&j);
done:
    release_all(in, 4);
    release_all(&out, 1);
    return result;
}

/* the direct convolution kernel for these weights, or NULL (the tiles packed): the portable path, and avx2's
   narrow weights (not its int16 or split ones; not built for the vnni paths) */
static direct_fn direct_for(const PackedB *b)
{
#ifdef NNQ_X86
    if (b->isa == ISA_AVX2)
        return b->narrow && !b->split ? direct_avx2_narrow : NULL;
#endif
    return b->isa == ISA_PORTABLE ? direct_portable : NULL;
}

/* the direct convolution for the job's geometry : 1, or 0 when its tiles are all packed:
   NNHAL_QCONV_DIRECT=0, no kernel for the weights, or a K segment (a kernel row of kw * c bytes, or one tap's c
   when dilated) that is not whole K groups of 4 */
static int conv_direct_setup(job_t *j)
{
    const char *env = getenv("NNHAL_QCONV_DIRECT");
    j->direct = env != NULL && strcmp(env, "0") == 0 ? NULL : direct_for(j->b);
    int rows_whole = j->dw == 1 || j->kw == 1;
    j->nseg = (int)(rows_whole ? j->kh : j->kh * j->kw);
    j->seglen = rows_whole ? j->kw * j->c : j->c;
    if (j->direct == NULL || j->nseg > MAX_SEG || j->seglen % 4 != 0) {
        j->direct = NULL;
        return 0;
    }
    for (int64_t ky = 0, s = 0; ky < j->kh; ky++)
        for (int64_t kx = 0; kx < (rows_whole ? 1 : j->kw); kx++)
            j->seg[s++] = (ky * j->dh * j->w + kx * j->dw) * j->c;
    j->dstep = j->sw * j->c;
    j->flat = j->kh == 1 && j->kw == 1 && j->sh == 1 && j->sw == 1 && j->pt == 0 && j->pl == 0 && j->oh == j->h
              && j->ow == j->w;
    return 1;
}

/* a convolution's geometry: (n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left) */
static int get_geometry(const char *kernel, PyObject *obj, int64_t *g)
{
    static const char *names[14] = {"n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top",
                                    "pad_left"};
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 14) {
        PyErr_Format(PyExc_TypeError, "%s: argument 'geometry' must be a tuple of 14 ints", kernel);
        return 0;
    }
    for (int i = 0; i < 14; i++)
        if (!get_int(kernel, names[i], PyTuple_GET_ITEM(obj, i), i >= 12 ? 0 : 1, INT32_MAX, &g[i]))
            return 0;
    return 1;
}

/* a convolution's optional table argument (None, or 256 codes of out's 8-bit type) into the epilogue: e->table and
   its int32 copy table32 (256 entries, the caller's) for the avx2 gather */
static int get_table(const char *kernel, PyObject *obj, arg_t *arg, epilogue_t *e, int32_t *table32)
{
    if (obj == Py_None)
        return 1;
    if (e->kind != OUT_U8 && e->kind != OUT_S8) {
        PyErr_Format(PyExc_TypeError, "%s: argument 'table' needs a uint8 or int8 'out'", kernel);
        return 0;
    }
    if (!get_array(kernel, "table", obj, arg, e->kind == OUT_U8 ? "B" : "b", 256, 0, 0))
        return 0;
    e->table = arg->view.buf;
    for (int i = 0; i < 256; i++)
        table32[i] = e->kind == OUT_U8 ? (int32_t)e->table[i] : (int32_t)(int8_t)e->table[i];
    e->table32 = table32;
    return 1;
}

/* conv(x, x_zero, packed, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads[, table]): a group-1
   convolution in NHWC as an implicit GEMM: x uint8 / int8 [N, H, W, C]; packed from the weights as [M, KH, KW, C]
   (trans 1); geometry a tuple (n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left); out [N, OH, OW, M]
   with the epilogue of gemm; table (None or 256 codes of out's 8-bit type): each output code replaced by
   table[its byte] in the same pass (a CodeTable fused into the convolution). */
static PyObject *qk_conv(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "conv";
    static const char *const names[] = {"x", "x_zero", "bias", "scale", "table"};
    (void)mod;
    if (!isa_ok() || !check_nargs(kernel, nargs, nargs == 13 ? 13 : 12))
        return NULL;
    const PackedB *b;
    int64_t threads, g[14];
    if (!get_packed(kernel, args[2], &b) || !get_int(kernel, "threads", args[11], 0, 1 << 20, &threads))
        return NULL;
    if (!get_geometry(kernel, args[3], g))
        return NULL;
    if (g[6] * g[7] * g[3] != b->k) {
        PyErr_Format(PyExc_ValueError, "%s: kh * kw * c = %lld is not the packed K = %lld", kernel,
                     (long long)(g[6] * g[7] * g[3]), (long long)b->k);
        return NULL;
    }
    arg_t in[5], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    job_t j;
    memset(&j, 0, sizeof j);
    j.b = b;
    PyObject *result = NULL;
    int64_t xsize, rows;
    int32_t table32[256];
    if (!mul_ok(kernel, g[0] * g[1], g[2] * g[3], &xsize) || !mul_ok(kernel, g[0] * g[4], g[5], &rows)
        || !get_array(kernel, "x", args[0], &in[0], "Bb", xsize, 0, 0))
        goto done;
    j.a_signed = format_code(&in[0].view) == 'b';
    if (!get_array(kernel, "x_zero", args[1], &in[1], j.a_signed ? "b" : "B", 1, 0, 1))
        goto done;
    j.a = in[0].view.buf;
    j.a_zero = in[1].held ? in[1].view.buf : NULL;
    j.n_azero = 1;
    j.m = rows;
    j.h = g[1]; j.w = g[2]; j.c = g[3]; j.oh = g[4]; j.ow = g[5]; j.kh = g[6]; j.kw = g[7];
    j.sh = g[8]; j.sw = g[9]; j.dh = g[10]; j.dw = g[11]; j.pt = g[12]; j.pl = g[13];
    if (!get_epilogue(kernel, args + 4, &out, &in[2], &in[3], rows, b->n, &j.e))
        goto done;
    if (nargs == 13 && !get_table(kernel, args[12], &in[4], &j.e, table32))
        goto done;
    if (!check_no_overlap(kernel, &out, in, names, 5) || !alloc_rows(&j, 0))
        goto done;
    j.rows.scale = NULL;
    j.cols.d = b->any_d ? b->d : NULL;
    j.cols.cterm = b->cterm;
    j.pack = packer_for(b->isa, PACK_CONV);
    conv_direct_setup(&j);
    if (!j.m || run_job(&j, threads))
        result = Py_NewRef(Py_None);
    free_rows(&j);
done:
    release_all(in, 5);
    release_all(&out, 1);
    return result;
}

/* ---------------------------------------------------------------------------------- depthwise */
typedef struct {
    const uint8_t *x;
    const int16_t *w;          /* [kh * kw, c]: w - w_zero */
    int a_signed;
    int32_t xz;
    int64_t n, h, wd, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    epilogue_t e;
    int parts;
    int *failed;
} dw_t;

static inline __attribute__((always_inline)) void dw_rows_body(const dw_t *d, int64_t r0, int64_t r1, int32_t *acc,
                                                               epilogue_fn epi)
{
    rows_t rows = {NULL, NULL, NULL};
    cols_t cols = {NULL, NULL};
    int64_t c = d->c;
    int32_t flip = d->a_signed ? 128 : 0, xz = d->xz + flip;
    for (int64_t r = r0; r < r1; r++) {    /* r: output pixel */
        int64_t ox = r % d->ow, oy = (r / d->ow) % d->oh, img = r / (d->ow * d->oh);
        for (int64_t cc = 0; cc < c; cc++)
            acc[cc] = 0;
        for (int64_t ky = 0; ky < d->kh; ky++) {
            int64_t iy = oy * d->sh - d->pt + ky * d->dh;
            if (iy < 0 || iy >= d->h)
                continue;
            for (int64_t kx = 0; kx < d->kw; kx++) {
                int64_t ix = ox * d->sw - d->pl + kx * d->dw;
                if (ix < 0 || ix >= d->wd)
                    continue;
                const uint8_t *src = d->x + ((img * d->h + iy) * d->wd + ix) * c;
                const int16_t *wt = d->w + (ky * d->kw + kx) * c;
                if (flip)
                    for (int64_t cc = 0; cc < c; cc++)
                        acc[cc] += ((int32_t)(uint8_t)(src[cc] ^ 0x80) - xz) * wt[cc];
                else
                    for (int64_t cc = 0; cc < c; cc++)
                        acc[cc] += ((int32_t)src[cc] - xz) * wt[cc];
            }
        }
        /* the epilogue over the channels, a tile of 32 at a time */
        for (int64_t c0 = 0; c0 < c; c0 += MAX_NR) {
            int nc = (int)(c - c0 < MAX_NR ? c - c0 : MAX_NR);
            epi(&d->e, &rows, &cols, acc + c0, 0, r, 1, c0, nc);
        }
    }
}

static void dw_rows_portable(const dw_t *d, int64_t r0, int64_t r1, int32_t *acc)
{
    dw_rows_body(d, r0, r1, acc, epilogue_portable);
}
#ifdef NNQ_X86
static T_AVX2 void dw_rows_avx2(const dw_t *d, int64_t r0, int64_t r1, int32_t *acc)
{
    dw_rows_body(d, r0, r1, acc, epilogue_avx2);
}
static T_AVX512 void dw_rows_avx512(const dw_t *d, int64_t r0, int64_t r1, int32_t *acc)
{
    dw_rows_body(d, r0, r1, acc, epilogue_avx512);
}
#endif

static void dw_part(const void *job, int part)
{
    const dw_t *d = job;
    int64_t rows = d->n * d->oh * d->ow;
    int64_t r0 = rows * part / d->parts, r1 = rows * (part + 1) / d->parts;
    int32_t *acc = malloc((size_t)d->c * sizeof(int32_t));
    if (acc == NULL) {
        __atomic_store_n(d->failed, 1, __ATOMIC_RELAXED);
        return;
    }
#ifdef NNQ_X86
    if (g_isa == ISA_AVX512VNNI)
        dw_rows_avx512(d, r0, r1, acc);
    else if (g_isa != ISA_PORTABLE)
        dw_rows_avx2(d, r0, r1, acc);
    else
#endif
        dw_rows_portable(d, r0, r1, acc);
    free(acc);
}

/* dwconv(x, x_zero, w, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads): a depthwise convolution (one
   filter per channel) in NHWC: x uint8 / int8 [N, H, W, C]; w int16 [KH, KW, C] = weights - their zero
   points; geometry and the epilogue as conv's (out [N, OH, OW, C]). */
static PyObject *qk_dwconv(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *kernel = "dwconv";
    static const char *const names[] = {"x", "x_zero", "w", "bias", "scale"};
    (void)mod;
    if (!isa_ok() || !check_nargs(kernel, nargs, 12))
        return NULL;
    int64_t threads, g[14];
    if (!get_int(kernel, "threads", args[11], 0, 1 << 20, &threads))
        return NULL;
    if (!get_geometry(kernel, args[3], g))
        return NULL;
    if (g[6] * g[7] > MAX_K) {
        PyErr_Format(PyExc_ValueError, "%s: a %lld x %lld window is too large for exact int32 sums", kernel,
                     (long long)g[6], (long long)g[7]);
        return NULL;
    }
    arg_t in[5], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    dw_t d;
    memset(&d, 0, sizeof d);
    PyObject *result = NULL;
    int64_t xsize, rows;
    if (!mul_ok(kernel, g[0] * g[1], g[2] * g[3], &xsize) || !mul_ok(kernel, g[0] * g[4], g[5], &rows)
        || !get_array(kernel, "x", args[0], &in[0], "Bb", xsize, 0, 0))
        goto done;
    d.a_signed = format_code(&in[0].view) == 'b';
    if (!get_array(kernel, "x_zero", args[1], &in[1], d.a_signed ? "b" : "B", 1, 0, 1)
        || !get_array(kernel, "w", args[2], &in[2], "h", g[6] * g[7] * g[3], 0, 0)
        || !get_epilogue(kernel, args + 4, &out, &in[3], &in[4], rows, g[3], &d.e)
        || !check_no_overlap(kernel, &out, in, names, 5))
        goto done;
    d.x = in[0].view.buf;
    d.w = in[2].view.buf;
    d.xz = in[1].held ? (d.a_signed ? (int32_t)((const int8_t *)in[1].view.buf)[0]
                                    : (int32_t)((const uint8_t *)in[1].view.buf)[0]) : 0;
    d.n = g[0]; d.h = g[1]; d.wd = g[2]; d.c = g[3]; d.oh = g[4]; d.ow = g[5]; d.kh = g[6]; d.kw = g[7];
    d.sh = g[8]; d.sw = g[9]; d.dh = g[10]; d.dw = g[11]; d.pt = g[12]; d.pl = g[13];
    int64_t parts = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    int64_t most = rows * g[3] * g[6] * g[7] / (1 << 18);
    parts = parts > most ? (most < 1 ? 1 : most) : parts;
    d.parts = (int)parts;
    int failed = 0;
    d.failed = &failed;
    Py_BEGIN_ALLOW_THREADS
    run_parts(dw_part, &d, d.parts);
    Py_END_ALLOW_THREADS
    if (failed)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    release_all(in, 5);
    release_all(&out, 1);
    return result;
}

/* ------------------------------------------------------------------------------------------ module */
static PyObject *qk_isa(PyObject *mod, PyObject *unused)
{
    (void)mod; (void)unused;
    if (!isa_ok())
        return NULL;
    return PyUnicode_FromString(ISA_NAMES[g_isa]);
}

static PyObject *qk_available(PyObject *mod, PyObject *unused)
{
    (void)mod; (void)unused;
    PyObject *list = PyList_New(0);
    for (int i = ISA_COUNT - 1; list && i >= 0; i--)
        if (g_have[i]) {
            PyObject *s = PyUnicode_FromString(ISA_NAMES[i]);
            if (s == NULL || PyList_Append(list, s) < 0) {
                Py_XDECREF(s);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(s);
        }
    return list;
}

static PyObject *qk_describe(PyObject *mod, PyObject *unused)
{
    (void)mod; (void)unused;
    if (!isa_ok())
        return NULL;
    return PyUnicode_FromString(ISA_DESCRIBE[g_isa]);
}

static PyObject *qk_uses_pool(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyBool_FromLong(g_pool != NULL);
}

#include "nq_tables.h"
#include "qwinograd.h"

static PyMethodDef qk_methods[] = {
    {"isa", qk_isa, METH_NOARGS, "The instruction set the kernels run (RuntimeError if NNHAL_QGEMM_ISA forced one "
                                 "this CPU lacks)."},
    {"available", qk_available, METH_NOARGS, "The instruction sets this CPU runs, best first."},
    {"describe", qk_describe, METH_NOARGS, "How the chosen instruction set multiplies 8-bit values."},
    {"uses_pool", qk_uses_pool, METH_NOARGS, "Whether the kernels split their parts over the cpu device's thread "
                                             "pool (the native kernels' capsule loaded), else over their own threads."},
    {"pack_b", (PyCFunction)(void (*)(void))qk_pack_b, METH_FASTCALL,
     "pack_b(b, k, n, b_zero, trans[, a7[, split]]) -> PackedB"},
    {"gemm", (PyCFunction)(void (*)(void))qk_gemm, METH_FASTCALL,
     "gemm(a, a_zero, packed, out, bias, scale, y_zero, lo, hi, rounding, threads)"},
    {"gemm_dynamic", (PyCFunction)(void (*)(void))qk_gemm_dynamic, METH_FASTCALL,
     "gemm_dynamic(x, signed, packed, out, bias, scale, lo, hi, threads[, kscale])"},
    {"conv", (PyCFunction)(void (*)(void))qk_conv, METH_FASTCALL,
     "conv(x, x_zero, packed, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads[, table])"},
    {"winograd", (PyCFunction)(void (*)(void))qk_winograd, METH_FASTCALL,
     "winograd(x, x_zero, u, m, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads[, table]): conv's 3x3 "
     "stride-1 convolution by exact integer Winograd F(2x2, 3x3) (qwinograd.h; avx2 and portable)"},
    {"dwconv", (PyCFunction)(void (*)(void))qk_dwconv, METH_FASTCALL,
     "dwconv(x, x_zero, w, geometry, out, bias, scale, y_zero, lo, hi, rounding, threads)"},
    {"table1", (PyCFunction)(void (*)(void))qk_table1, METH_FASTCALL,
     "table1(x, table, out, threads): out[i] = table[(i % C) * 256 + x[i]] (C x 256 entries, bytes)"},
    {"table2", (PyCFunction)(void (*)(void))qk_table2, METH_FASTCALL,
     "table2(a, b, table, out, threads): out[i] = table[a[i] << 8 | b[i % len(b)]] (65536 entries, bytes)"},
    {"binary", (PyCFunction)(void (*)(void))qk_binary, METH_FASTCALL,
     "binary(a, b, out, mul, a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, threads): QLinearAdd (mul 0) / "
     "QLinearMul (mul 1) of a and b (b repeating along a) in the reference's float32 operations"},
    {"biased", (PyCFunction)(void (*)(void))qk_biased, METH_FASTCALL,
     "biased(x, bias, out, x_scale, x_zero, y_scale, y_zero, threads): QuantizeLinear(DequantizeLinear(x) + "
     "bias[i % C]) in the reference's float32 operations (bias: float32 along x's last axis)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef qk_module = {
    PyModuleDef_HEAD_INIT, "_qkernels", "nnhal's integer GEMM and convolution kernels (see qkernels.c).", -1,
    qk_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__qkernels(void)
{
    select_isa();
    import_pool();
    if (PyType_Ready(&PackedBType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&qk_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "PackedB", (PyObject *)&PackedBType) < 0
        || PyModule_AddIntConstant(m, "MAX_K", MAX_K) < 0
        || PyModule_AddIntConstant(m, "WINOGRAD_MAX_C", QWINO_MAX_C) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
