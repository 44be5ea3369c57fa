/*
 * nnhal's native kernels: the cpu device's float32 loops that numpy cannot run in one pass, as the CPython
 * extension module nnhal.device.cpu.native._kernels (built by CMake at install time; the Python side is
 * native/__init__.py).
 *
 * Every entry point is a METH_FASTCALL function or a method of a small prepared object (Act, Conv, Pool2d, Gemm,
 * Recurrent) taking numpy arrays through the buffer protocol; nn_buffer.h checks each argument (dtype, contiguity,
 * sizes against the geometry, overlap of output and input, None) and raises TypeError / ValueError naming
 * the kernel and the argument. The loops run with the GIL released.
 *
 * - dwconv (Conv "depthwise"): depthwise 2-D convolution, channels last, bias and activation fused while an
 *   output pixel's channels are still in L1; Conv "grouped": grouped convolution of narrow groups; Conv
 *   "im2col": a group-1 convolution by im2col bands and GEMM.
 * - fake_quantize_blocks: per-block dynamic int8/uint8 quantization of activations, dequantized.
 * - activation: Relu, Clip, HardSigmoid, HardSwish, Sigmoid, SiLU, Gelu (exact or tanh) in one pass (Sigmoid and
 *   SiLU in AVX2 intrinsics where the CPU has them: nn_exp_simd.h).
 * - Pool2d: 2-D MaxPool / AveragePool, channels last, one pass over the input; global_pool: GlobalAveragePool
 *   / GlobalMaxPool.
 * - gather_last / shuffle_last: Gather along the last axis of 4-byte elements, the channel shuffle.
 * - add_act: a + b of one shape with the fused activation, in one pass (a residual Add + Relu).
 * - channel_affine: y = act(x * scale[c] + shift[c]) over the last axis in one pass (an inference
 *   BatchNormalization, channels last, with its activation).
 * - transpose_blocks: y (outer, b, a, inner) from x (outer, a, b, inner), 4-byte elements, cache tiles: the
 *   NCHW <-> NHWC conversions of the layout pass and every Transpose that is a swap of two axis groups.
 * - resize_nhwc: Resize (nearest, linear, cubic) of a channels-last image by per-axis tap tables, H then W;
 *   resize_to_nchw from a channels-last image to NCHW, W then H (nn_resize_nchw.h).
 * - cast_half: float32 <-> float16 (IEEE binary16, round to nearest even), and float32 rounded through float16
 *   in one pass: fp16 storage's conversions (F16C's vcvtps2ph / vcvtph2ps in the x86-64-v3 and v4 clones).
 * - layernorm: LayerNormalization over the last axis; rmsnorm: the RMSNorm chain over the last axis.
 * - rotary: the rotate-half rotary embedding x * cos + rotate_half(x) * sin (the exported Slice/Neg/Concat chain).
 * - group_norm: Instance and GroupNormalization of channels-first tensors, per-channel affine (nn_norm.h).
 * - softmax: Softmax over the last axis or a middle one (nn_softmax.h).
 * - attention: softmax(Q K^T * scale + mask) V per (batch, head) on strided views (nn_attention.h).
 * - Program (nn_steps.h): a prepared run of small element-wise steps, executed by one call per plan run.
 * - Recurrent: a prepared LSTM, GRU or RNN layer: the input projection of every step as one GEMM, then each
 *   direction's steps (recurrent product and fused gate math) in C, the two directions on two parts.
 * - gemm / batched_gemm: GEMMs with their bias and activation through the cblas_sgemm of the OpenBLAS linked
 *   at build time (the scipy-openblas32 wheel: scipy_cblas_sgemm, as its cblas.h declares it).
 *
 * nn_pool_run, the cpu device's own thread pool (below), spreads a kernel's parts over pinned pthread
 * workers. NOTE: OpenMP threads were tried and removed: an OpenMP runtime already loaded by another library
 * (torch's import brings one that reads OMP_WAIT_POLICY before nnhal can set it) spins between kernels
 * against OpenBLAS's spinning workers; MobileNetV3-small at 2 threads went from 3.6 to 36 ms that way. The
 * pool is plain pthreads, and BLAS is single-threaded while it runs (the Python side sets it through
 * blas_set_threads). ``#pragma omp simd`` needs only -fopenmp-simd, no runtime.
 *
 * Hot loops are compiled for several x86-64 levels (GCC target_clones: the loader picks the best one the
 * CPU has), so the library may be built on one machine and run on another.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* pthread_setaffinity_np, CPU_SET */
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "nn_buffer.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NN_CLONES
#endif

#define NN_API static
/* NNHAL_NATIVE_SIMD=0 in the environment turns the hand-written intrinsic paths below off, so the tests can
 * run their plain C paths (the only ones on a CPU without the features, and on Arm) on any machine; read
 * once per path, at its first call */
static int nn_simd_allowed(void) {
    const char *v = getenv("NNHAL_NATIVE_SIMD");
    return !(v != NULL && strcmp(v, "0") == 0);
}
/* defines ``static int name(void)``: 1 where the CPU has features f1 and f2 and nn_simd_allowed, asked once (a
 * benign race: every thread stores the same value); used only inside x86 GCC/clang guards, by the
 * hand-written intrinsic paths chosen at run time */
#define NN_CPU_HAS2(name, f1, f2) \
    static int name(void) { \
        static int ok = -1; \
        if (ok < 0) ok = nn_simd_allowed() && __builtin_cpu_supports(f1) && __builtin_cpu_supports(f2); \
        return ok; \
    }
/* Helpers are forced inline: a helper left out of line is compiled for the baseline target only, and the
 * target_clones copies of its callers would call that scalar SSE2 code (measured: sigmoid 10x slower). */
#define NN_INLINE static inline __attribute__((always_inline))

/* Activation kinds: the same numbers as ACTIVATIONS in __init__.py. */
enum {
    NN_ACT_NONE = 0,
    NN_ACT_RELU = 1,
    NN_ACT_CLIP = 2,        /* min(max(x, lo), hi) */
    NN_ACT_HARDSIGMOID = 3, /* max(0, min(1, alpha * x + beta)) */
    NN_ACT_HARDSWISH = 4,   /* x * max(0, min(1, x / 6 + 1 / 2)) */
    NN_ACT_SIGMOID = 5,
    NN_ACT_SILU = 6,        /* x * sigmoid(x) */
    NN_ACT_GELU = 7,        /* x * (1 + erf(x / sqrt 2)) / 2, the exact Gelu */
    NN_ACT_GELU_TANH = 8,   /* x * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, as x * sigmoid(2 u) */
    NN_ACT_TANH = 9,        /* nn_tanhf (nn_tanh.h) */
};

typedef struct {
    int32_t kind;
    float lo, hi;           /* Clip bounds (-inf / +inf when absent) */
    float alpha, beta;      /* HardSigmoid */
} nn_act;

/* Depthwise convolution geometry: input (n, h, w, c), output (n, oh, ow, c), kernel (kh, kw, c). */
typedef struct {
    int64_t n, h, w, c, oh, ow;
    int64_t kh, kw, sh, sw, dh, dw, pad_top, pad_left;
    nn_act act;
} nn_dw_params;

/* exp(x) for float32 to about 2 ulp: x = k ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial,
 * 2^k put into the exponent bits. Written with plain arithmetic so that the loops calling it vectorize. */
/* max/min as the x86 instructions compute them (no NaN or signed-zero rules: those keep fmaxf/fminf from
 * vectorizing without -ffast-math) */
#define NN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NN_CLAMP(v, lo, hi) NN_MIN(NN_MAX(v, lo), hi)

NN_INLINE float nn_expf(float x) {
    const float big = x > 88.72f ? INFINITY : 1.0f;   /* overflow to inf, as expf and numpy do */
    x = NN_CLAMP(x, -87.3f, 88.3f);
    /* round to nearest by the 1.5 * 2^23 trick: vectorizes where nearbyintf may not */
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { float f; int32_t i; } scale;
    scale.i = ((int32_t)k + 127) << 23;
    return p * scale.f * big;
}

/* NaN in, NaN out (the clamps inside nn_expf would turn it into a number) */
NN_INLINE float nn_sigmoid(float x) { return x != x ? x : 1.0f / (1.0f + nn_expf(-x)); }
#include "nn_exp_simd.h"
#include "nn_tanh.h"

#include "nn_erf.h"

/* The activation of one contiguous run, in place. */
NN_INLINE void nn_apply(float *restrict y, int64_t len, const nn_act *act) {
    const float lo = act->lo, hi = act->hi, alpha = act->alpha, beta = act->beta;
    switch (act->kind) {
    case NN_ACT_RELU:
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case NN_ACT_CLIP:
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = NN_CLAMP(y[i], lo, hi);
        break;
    case NN_ACT_HARDSIGMOID:
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = y[i] != y[i] ? y[i] : NN_CLAMP(alpha * y[i] + beta, 0.0f, 1.0f);
        break;
    case NN_ACT_HARDSWISH:
#pragma omp simd
        for (int64_t i = 0; i < len; i++)
            y[i] = y[i] * NN_CLAMP(y[i] * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);
        break;
    case NN_ACT_SIGMOID:
#if NN_EXP_SIMD
        if (nn_exp_simd_ok()) {
            nn_sigmoid_avx2(y, len, 0);
            break;
        }
#endif
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = nn_sigmoid(y[i]);
        break;
    case NN_ACT_SILU:
#if NN_EXP_SIMD
        if (nn_exp_simd_ok()) {
            nn_sigmoid_avx2(y, len, 1);
            break;
        }
#endif
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = y[i] * nn_sigmoid(y[i]);
        break;
    case NN_ACT_GELU:
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = nn_gelu(y[i]);
        break;
    case NN_ACT_GELU_TANH:
        /* (1 + tanh u) / 2 == sigmoid(2 u): one exp, and no cancellation in 1 + tanh u for negative x */
#pragma omp simd
        for (int64_t i = 0; i < len; i++)
            y[i] = y[i] * nn_sigmoid(1.59576912160573071f * (y[i] + 0.044715f * y[i] * y[i] * y[i]));
        break;
    case NN_ACT_TANH:
#pragma omp simd
        for (int64_t i = 0; i < len; i++) y[i] = nn_tanhf(y[i]);
        break;
    default:
        break;
    }
}

/* Runs of at most this many elements per step of the element-wise kernel: copied (when not in place)
 * and transformed while in L2. */
#define NN_CHUNK 16384

NN_API NN_CLONES void nn_activation_f32(const float *x, float *y, int64_t len, const nn_act *act) {
    for (int64_t lo = 0; lo < len; lo += NN_CHUNK) {
        const int64_t n = len - lo < NN_CHUNK ? len - lo : NN_CHUNK;
        if (x != y) memcpy(y + lo, x + lo, (size_t)n * sizeof(float));
        nn_apply(y + lo, n, act);
    }
}

/* 8 floats as one value (GCC vector extension); aligned(4) makes a dereference an unaligned load */
typedef float nn_v8 __attribute__((vector_size(32), aligned(4), may_alias));

#include "nn_dwconv.h"

/* Per-block dynamic quantization of activations, quantized and dequantized in one pass (what the
 * DynamicQuantizeGemm host kernel multiplies by its dequantized weights): x is (m, k) row-major, each row
 * cut into blocks of ``block``; a block's scale is its peak |x| / 127 (signed) or its range including 0
 * / 255 (unsigned, with an integer zero point). The float32 steps are numpy's in
 * hostkernels/nn_dynamic_quantize_gemm.py, one for one (a division, rint, clip, a product), so the
 * results are the same bits. */
NN_API NN_CLONES void nn_fake_quantize_blocks_f32(const float *x, float *y, int64_t m, int64_t k,
                                                  int64_t block, int32_t is_signed) {
    for (int64_t r = 0; r < m; r++) {
        for (int64_t b0 = 0; b0 < k; b0 += block) {
            const float *xb = x + r * k + b0;
            float *yb = y + r * k + b0;
            if (is_signed) {
                float peak = 0.0f;
                for (int64_t i = 0; i < block; i++) {
                    const float a = fabsf(xb[i]);
                    peak = a > peak ? a : peak;
                }
                const float scale = peak > 0.0f ? peak / 127.0f : 1.0f;
                for (int64_t i = 0; i < block; i++) {
                    const float q = rintf(xb[i] / scale);
                    yb[i] = NN_CLAMP(q, -127.0f, 127.0f) * scale;
                }
            } else {
                float lo = 0.0f, hi = 0.0f;
                for (int64_t i = 0; i < block; i++) {
                    lo = xb[i] < lo ? xb[i] : lo;
                    hi = xb[i] > hi ? xb[i] : hi;
                }
                const float scale = hi > lo ? (hi - lo) / 255.0f : 1.0f;
                const float zero = rintf(-lo / scale);
                for (int64_t i = 0; i < block; i++) {
                    const float q = rintf(xb[i] / scale) + zero;
                    yb[i] = (NN_CLAMP(q, 0.0f, 255.0f) - zero) * scale;
                }
            }
        }
    }
}

/* Waits, without the GIL, until *flag differs from ``value`` or ``max_ns`` nanoseconds
 * have passed, and returns the flag's value: the short spin before the cpu device's pool threads block
 * (device/cpu/parallel.py). A blocked thread on a virtual machine takes tens of microseconds to wake; a
 * spinning one sees the store at once. */
NN_API int64_t nn_spin_wait(const volatile int64_t *flag, int64_t value, int64_t max_ns) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        for (int i = 0; i < 256; i++) {
            const int64_t v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
            if (v != value) return v;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) > max_ns)
            return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    }
}

/* ------------------------------------------------------------------------------------------------
 * The cpu device's thread pool. Python hands a whole split kernel to nn_pool_run with the GIL
 * released, so no part ever waits for the GIL: a part is a C function over a slice of the work
 * (rows of a GEMM with its bias and activation, rows of a depthwise convolution, a range of an
 * activation, bands of an im2col convolution). The caller and the workers it wakes claim the parts one
 * at a time from a shared counter (nn_claim), so a part goes to whichever thread is free first: a worker
 * that the kernel has not scheduled yet (another process on its CPU, a vCPU the hypervisor holds back)
 * leaves its part to the caller instead of holding the whole kernel up. Measured on the loaded 2-core
 * AMD EPYC VM (Zen 3), Winograd 48 -> 48 channels at 32x32, 2 threads: 8.4 ms with part i fixed to
 * worker i - 1 (the caller spun for a worker another process kept off its CPU), 1T took 0.54 ms. A
 * worker spins on its own sequence number for a while (SPIN: a sleeping thread of a virtual machine
 * took 20-50 us to wake) and then sleeps on a condition variable; the caller spins until every claimed
 * part is finished. One job at a time: a caller that finds the pool busy (another Python thread's run)
 * runs all parts itself. BLAS inside a part must be single-threaded (the Python side sets it).
 * ------------------------------------------------------------------------------------------------ */
#include <pthread.h>
#include <sched.h>

typedef void (*nn_task)(const void *args, int64_t part, int64_t parts);

#define NN_MAX_WORKERS 63

typedef struct {
    int64_t seq;            /* jobs handed to this worker (written by the caller) */
    int32_t sleeping;
    int32_t cpu;            /* the CPU it last ran on (sched_getcpu), -1 before */
    char pad[64 - 16];      /* one cache line per worker */
} nn_slot;

/* The job's claim counter: the job's generation in the high 32 bits, the next unclaimed part in the low
 * 32 (a job has at most NN_MAX_WORKERS + 1 parts per thread, far below 2^32). */
#define NN_CLAIM_GEN(c) ((c) >> 32)
#define NN_CLAIM_PART(c) ((c) & 0xffffffffLL)

static struct {
    pthread_mutex_t lock, busy;
    pthread_cond_t wake;
    int64_t workers;
    int64_t spin_ns;
    nn_task fn;             /* the job: written by the caller before it publishes the claim counter */
    const void *args;
    int64_t parts;
    int32_t caller_cpu;     /* the CPU of the last job's caller (sched_getcpu), -1 before */
    int64_t rest_at;        /* nn_now_ns() after which idle workers sleep (nn_pool_rest: a run ended), 0: none; the
                             * next job clears it */
    int64_t spun_ns;        /* what the workers spun waiting for a job, all of them together (nn_pool_stats) */
    int64_t sleeps;         /* times a worker went to sleep */
    int64_t claim __attribute__((aligned(64)));     /* generation << 32 | next part */
    int64_t finished __attribute__((aligned(64)));  /* parts of the current job finished */
    nn_slot slot[NN_MAX_WORKERS] __attribute__((aligned(64)));
} nn_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 2000000, NULL, NULL, 0,
             -1, 0, 0, 0, 0, 0, {{0}}};

/* A spinning thread gives its CPU away (sched_yield) while the thread it waits for, or the caller it waits on,
 * sits on the same CPU: both runnable on one CPU, a spin would take half of that CPU from the thread doing the
 * work until the scheduler moves one of them (a tick or more). It spins on undisturbed otherwise (a yield on a
 * CPU with another process's thread would hand it a whole time slice). */
NN_INLINE int nn_cpu(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

static int64_t nn_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

NN_INLINE void nn_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs parts of the current job until none is left. A claim is a compare-and-swap of the counter
 * from (generation, part) to (generation, part + 1); the job read between the counter's load and a successful
 * swap is that generation's (a job's fields change only after all its parts finished, which needs this part
 * claimed, so after the counter moved on and the swap failed). */
static void nn_claim(void) {
    int64_t c = __atomic_load_n(&nn_pool.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        const nn_task fn = __atomic_load_n(&nn_pool.fn, __ATOMIC_RELAXED);
        const void *args = __atomic_load_n(&nn_pool.args, __ATOMIC_RELAXED);
        const int64_t parts = __atomic_load_n(&nn_pool.parts, __ATOMIC_RELAXED);
        const int64_t part = NN_CLAIM_PART(c);
        if (part >= parts) return;
        if (!__atomic_compare_exchange_n(&nn_pool.claim, &c, c + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        fn(args, part, parts);
        __atomic_add_fetch(&nn_pool.finished, 1, __ATOMIC_RELEASE);
        c = __atomic_load_n(&nn_pool.claim, __ATOMIC_ACQUIRE);
    }
}

static void *nn_worker(void *arg) {
    nn_slot *me = (nn_slot *)arg;
    int64_t seen = 0;
    for (;;) {
        int64_t t0 = nn_now_ns(), s;
        while ((s = __atomic_load_n(&me->seq, __ATOMIC_SEQ_CST)) == seen) {
            for (int i = 0; i < 64; i++) nn_pause();
            const int cpu = nn_cpu();
            if (cpu >= 0 && cpu == __atomic_load_n(&nn_pool.caller_cpu, __ATOMIC_RELAXED)) sched_yield();
            const int64_t now = nn_now_ns();
            const int64_t rest_at = __atomic_load_n(&nn_pool.rest_at, __ATOMIC_RELAXED);
            if (now - t0 > nn_pool.spin_ns || (rest_at != 0 && now >= rest_at)) {
                __atomic_add_fetch(&nn_pool.spun_ns, now - t0, __ATOMIC_RELAXED);
                __atomic_add_fetch(&nn_pool.sleeps, 1, __ATOMIC_RELAXED);
                pthread_mutex_lock(&nn_pool.lock);
                __atomic_store_n(&me->sleeping, 1, __ATOMIC_SEQ_CST);
                while (__atomic_load_n(&me->seq, __ATOMIC_SEQ_CST) == seen) pthread_cond_wait(&nn_pool.wake, &nn_pool.lock);
                __atomic_store_n(&me->sleeping, 0, __ATOMIC_SEQ_CST);
                pthread_mutex_unlock(&nn_pool.lock);
                t0 = nn_now_ns();
            }
        }
        __atomic_add_fetch(&nn_pool.spun_ns, nn_now_ns() - t0, __ATOMIC_RELAXED);
        seen = s;
        __atomic_store_n(&me->cpu, nn_cpu(), __ATOMIC_RELAXED);
        nn_claim();
    }
    return NULL;
}

/* A forked child has none of the parent's workers: it starts over with none (and fresh locks). */
static void nn_pool_after_fork(void) {
    pthread_mutex_init(&nn_pool.lock, NULL);
    pthread_mutex_init(&nn_pool.busy, NULL);
    pthread_cond_init(&nn_pool.wake, NULL);
    nn_pool.workers = 0;
    memset(nn_pool.slot, 0, sizeof nn_pool.slot);
    for (int w = 0; w < NN_MAX_WORKERS; w++) nn_pool.slot[w].cpu = -1;
}

static pthread_once_t nn_pool_once = PTHREAD_ONCE_INIT;

static void nn_pool_register_fork(void) { pthread_atfork(NULL, NULL, nn_pool_after_fork); }

/* Worker w runs on one CPU of the process's allowed set, the (w + 1)-th, when the set has room for the
 * caller and every worker: measured on the 2-core VM, an unpinned worker woken by the caller was placed
 * on the caller's CPU and kept there beside it (both runnable, the other CPU idle) for seconds, every
 * kernel 3x slower (ShuffleNet batch 8: 88-94 ms against 30); pinned, the caller (free to move) is
 * balanced onto the other CPU. */
static void nn_pin_worker(pthread_attr_t *attr, int64_t w) {
#if defined(__linux__) && defined(CPU_SET)
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    const int count = CPU_COUNT(&allowed);
    if (count < 2 || w + 2 > count) return;
    int seen = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        if (++seen == (int)(w + 1)) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_attr_setaffinity_np(attr, sizeof one, &one);
            return;
        }
    }
#else
    (void)attr;
    (void)w;
#endif
}

/* Make sure threads - 1 workers exist (they are never destroyed); the number that exist afterwards + 1. */
NN_API int64_t nn_pool_set_threads(int64_t threads) {
    pthread_once(&nn_pool_once, nn_pool_register_fork);
    pthread_mutex_lock(&nn_pool.busy);
    while (nn_pool.workers < threads - 1 && nn_pool.workers < NN_MAX_WORKERS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        nn_pin_worker(&attr, nn_pool.workers);
        nn_pool.slot[nn_pool.workers].cpu = -1;
        int failed = pthread_create(&t, &attr, nn_worker, &nn_pool.slot[nn_pool.workers]);
        pthread_attr_destroy(&attr);
        if (failed) break;
        nn_pool.workers++;
    }
    pthread_mutex_unlock(&nn_pool.busy);
    return nn_pool.workers + 1;
}

/* fn(args, p, parts) for p in [0, parts): in parallel on the caller and parts - 1 workers when the pool
 * is free and has them, else all on the caller. */
NN_API void nn_pool_run(nn_task fn, const void *args, int64_t parts) {
    if (parts <= 1 || parts - 1 > nn_pool.workers || pthread_mutex_trylock(&nn_pool.busy) != 0) {
        for (int64_t p = 0; p < parts; p++) fn(args, p, parts);
        return;
    }
    __atomic_store_n(&nn_pool.fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&nn_pool.args, args, __ATOMIC_RELAXED);
    __atomic_store_n(&nn_pool.parts, parts, __ATOMIC_RELAXED);
    __atomic_store_n(&nn_pool.finished, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&nn_pool.caller_cpu, nn_cpu(), __ATOMIC_RELAXED);
    __atomic_store_n(&nn_pool.rest_at, 0, __ATOMIC_RELAXED);
    const int64_t gen = NN_CLAIM_GEN(__atomic_load_n(&nn_pool.claim, __ATOMIC_RELAXED)) + 1;
    __atomic_store_n(&nn_pool.claim, (gen & 0x7fffffffLL) << 32, __ATOMIC_RELEASE);
    int sleepers = 0;
    for (int64_t w = 0; w < parts - 1; w++) {
        __atomic_add_fetch(&nn_pool.slot[w].seq, 1, __ATOMIC_SEQ_CST);
        sleepers |= __atomic_load_n(&nn_pool.slot[w].sleeping, __ATOMIC_SEQ_CST);
    }
    if (sleepers) {
        pthread_mutex_lock(&nn_pool.lock);
        pthread_cond_broadcast(&nn_pool.wake);
        pthread_mutex_unlock(&nn_pool.lock);
    }
    nn_claim();
    int64_t spins = 0;
    while (__atomic_load_n(&nn_pool.finished, __ATOMIC_ACQUIRE) != parts) {
        nn_pause();
        if (++spins % 64 == 0) {
            /* a worker still running a part on this CPU: let it run (nn_cpu's note) */
            const int cpu = nn_cpu();
            int beside = 0;
            for (int64_t w = 0; w < parts - 1 && cpu >= 0; w++)
                beside |= __atomic_load_n(&nn_pool.slot[w].cpu, __ATOMIC_RELAXED) == cpu;
            if (beside || spins > (1 << 20)) { sched_yield(); spins = 0; }
        }
    }
    pthread_mutex_unlock(&nn_pool.busy);
}

NN_API void nn_pool_set_spin(int64_t spin_ns) { nn_pool.spin_ns = spin_ns; }

/* How long idle workers keep spinning after a run ended before they sleep (nn_pool_rest).
 * NOTE: not 0: a caller running one model back to back starts its next run's first split step within tens of
 * microseconds, and a worker woken from sleep then costs that step a wake-up (a futex on this VM: the small
 * models of the corpus read 10-20% slower against onnxruntime with an immediate sleep); a gap longer than this
 * (an application's idle time between requests) still ends the spin here, not spin_ns (2 ms) after the last part. */
#define NN_POOL_REST_GRACE_NS 200000

/* A run ended (the cpu device calls this after each plan's run): idle workers spin at most NN_POOL_REST_GRACE_NS
 * more and then sleep, not spin_ns after their last part, until the next job wakes them (its first part may go
 * to the caller while a worker wakes: the claim counter, above). A job in flight (another thread's run) is not
 * disturbed: its workers finish their parts and sleep after it instead of spinning, and its next job wakes them
 * again. */
NN_API void nn_pool_rest(void) {
    __atomic_store_n(&nn_pool.rest_at, nn_now_ns() + NN_POOL_REST_GRACE_NS, __ATOMIC_RELAXED);
}

/* What the workers spun waiting for jobs (ns, all of them together) and how often one went to sleep, since the
 * process started: the pool's idle cost, for benchmarks and tests. */
NN_API void nn_pool_stats(int64_t *spun_ns, int64_t *sleeps) {
    *spun_ns = __atomic_load_n(&nn_pool.spun_ns, __ATOMIC_RELAXED);
    *sleeps = __atomic_load_n(&nn_pool.sleeps, __ATOMIC_RELAXED);
}

#define NN_POOL_API_PROVIDER
#include "nn_pool_api.h"

/* [lo, hi) of part p of n parts over ``total`` units, boundaries multiples of ``align`` */
NN_INLINE void nn_split(int64_t total, int64_t align, int64_t p, int64_t n, int64_t *lo, int64_t *hi) {
    const int64_t units = (total + align - 1) / align;
    *lo = (units * p / n) * align;
    *hi = p + 1 == n ? total : (units * (p + 1) / n) * align;
    if (*lo > total) *lo = total;
    if (*hi > total) *hi = total;
}

/* C (m, n) = A (m, k) @ B, row major; B is (k, n), or (n, k) read transposed when trans_b */
NN_INLINE void nn_sgemm(const float *a, int64_t lda, const float *b, int64_t ldb, int trans_b, float *c,
                     int64_t ldc, int64_t m, int64_t n, int64_t k) {
    if (m <= 0 || n <= 0) return;
    /* the binding checked that every size and leading dimension fits a blasint */
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
                      (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb, 0.0f, c, (blasint)ldc);
}

/* bias (per column, may be NULL) and the activation over rows [0, m) and columns [0, n) of C */
NN_INLINE void nn_epilogue(float *c, int64_t ldc, int64_t m, int64_t n, const float *bias, const nn_act *act) {
    for (int64_t r = 0; r < m; r++) {
        float *row = c + r * ldc;
        if (bias)
            for (int64_t j = 0; j < n; j++) row[j] += bias[j];
        if (act->kind != NN_ACT_NONE && ldc != n) nn_activation_f32(row, row, n, act);
    }
    if (act->kind != NN_ACT_NONE && ldc == n) nn_activation_f32(c, c, m * n, act);
}

#include "nn_gemv.h"

/* A GEMM with its epilogue, split by rows of C (a multiple of row_align each), or by columns when
 * by_cols (few rows). */
typedef struct {
    const float *a, *b;
    float *c;
    const float *bias;
    int64_t m, n, k, lda, ldb, ldc, row_align;
    int32_t trans_b, by_cols;
    nn_act act;
    const float *packed;       /* b packed for GEMVs (nn_gemv_pack), or NULL */
} nn_gemm_args;

static NN_CLONES void nn_gemm_task(const void *args, int64_t p, int64_t parts) {
    const nn_gemm_args *g = (const nn_gemm_args *)args;
    int64_t lo, hi;
    if (g->by_cols && g->packed && g->m <= NN_GEMV_ROWS) {
        nn_split(g->n, NN_PANEL, p, parts, &lo, &hi);
        for (int64_t r = 0; r < g->m; r++) nn_gemv_packed_f32(g->a + r * g->lda, g->packed, g->k, g->c + r * g->ldc, lo, hi);
        nn_epilogue(g->c + lo, g->ldc, g->m, hi - lo, g->bias ? g->bias + lo : NULL, &g->act);
    } else if (g->by_cols) {
        nn_split(g->n, 16, p, parts, &lo, &hi);
        const float *b = g->trans_b ? g->b + lo * g->ldb : g->b + lo;
        if (nn_gemv_fits(g->m, hi - lo, g->k, g->trans_b))
            nn_gemv_f32(g->a, b, g->ldb, g->c + lo, hi - lo, g->k);
        else if (g->m <= NN_GEMV_ROWS)
            nn_gemv_rows_blas(g->a, g->lda, b, g->ldb, g->trans_b, g->c + lo, g->ldc, g->m, hi - lo, g->k);
        else
            nn_sgemm(g->a, g->lda, b, g->ldb, g->trans_b, g->c + lo, g->ldc, g->m, hi - lo, g->k);
        nn_epilogue(g->c + lo, g->ldc, g->m, hi - lo, g->bias ? g->bias + lo : NULL, &g->act);
    } else {
        nn_split(g->m, g->row_align, p, parts, &lo, &hi);
        if (nn_gemv_fits(hi - lo, g->n, g->k, g->trans_b))
            nn_gemv_f32(g->a + lo * g->lda, g->b, g->ldb, g->c + lo * g->ldc, g->n, g->k);
        else
            nn_sgemm(g->a + lo * g->lda, g->lda, g->b, g->ldb, g->trans_b, g->c + lo * g->ldc, g->ldc, hi - lo, g->n,
                     g->k);
        nn_epilogue(g->c + lo * g->ldc, g->ldc, hi - lo, g->n, g->bias, &g->act);
    }
}


/* A stack of GEMMs C[i] = A[i] @ B[i] (element strides sa, sb, sc between them; sb = 0: one B for all),
 * split over the flattened (stack index, row) space: a part takes a range of rows across the stack. */
typedef struct {
    nn_gemm_args g;
    int64_t batch, sa, sb, sc;
} nn_bgemm_args;

static void nn_bgemm_task(const void *args, int64_t p, int64_t parts) {
    const nn_bgemm_args *bg = (const nn_bgemm_args *)args;
    const nn_gemm_args *g = &bg->g;
    int64_t lo, hi;
    nn_split(bg->batch * g->m, 1, p, parts, &lo, &hi);
    while (lo < hi) {
        const int64_t i = lo / g->m, r0 = lo % g->m;
        const int64_t r1 = (hi - i * g->m) < g->m ? hi - i * g->m : g->m;
        nn_sgemm(g->a + i * bg->sa + r0 * g->lda, g->lda, g->b + i * bg->sb, g->ldb, g->trans_b,
                 g->c + i * bg->sc + r0 * g->ldc, g->ldc, r1 - r0, g->n, g->k);
        lo = i * g->m + r1;
    }
}


/* rows [lo, hi) of a depthwise convolution per part */
typedef struct {
    const float *x, *wt, *bias;
    float *y;
    const nn_dw_params *p;
} nn_dw_args;

static void nn_dw_task(const void *args, int64_t part, int64_t parts) {
    const nn_dw_args *d = (const nn_dw_args *)args;
    int64_t lo, hi;
    nn_split(d->p->n * d->p->oh, 1, part, parts, &lo, &hi);
    nn_dwconv_nhwc_f32(d->x, d->y, d->wt, d->bias, d->p, lo, hi);
}


/* an activation over a range per part */
typedef struct {
    const float *x;
    float *y;
    int64_t len;
    const nn_act *act;
} nn_act_args;

static void nn_act_task(const void *args, int64_t part, int64_t parts) {
    const nn_act_args *a = (const nn_act_args *)args;
    int64_t lo, hi;
    nn_split(a->len, 16, part, parts, &lo, &hi);
    if (hi > lo) nn_activation_f32(a->x + lo, a->y + lo, hi - lo, a->act);
}


/* A group-1 convolution, channels last, by im2col: each part takes a range of output rows (of the
 * flattened N * OH) and, a band of rows at a time, gathers the columns (output pixels x KH * KW * C,
 * channels fastest, zeros for padding) into its own scratch, runs the GEMM against the packed weights
 * (K, M) into the output rows and applies the bias and activation while they are in cache. */
typedef struct {
    const float *x, *w, *bias;
    float *y;
    float *scratch;         /* parts x band_rows * ow * ld floats: each part's columns */
    int64_t n, h, w_in, c, oh, ow, m, kh, kw, sh, sw, dh, dw, pad_top, pad_left, ld, band_rows;
    nn_act act;
    int64_t ldy;            /* floats from one output pixel to the next: m, or more in a channel slice */
} nn_conv_args;

/* The im2col convolution's parts are ranges of output pixels, as equal as possible (NN_CONV_PIXEL_ALIGN: the Python
 * side's parallel.PIXEL_ALIGN), not of output rows: a 7x7 map's 49 pixels split 24 : 25 over two threads, where its
 * 7 rows split 3 : 4 (the slower part 57% of the work); 14 rows over three threads 4 : 5 : 5, 196 pixels 65 : 65 :
 * 66. Each part runs bands of at most band_rows * ow pixels (its scratch block), so one part (one thread) runs the
 * same bands, the same GEMMs, as the row split did. */
#define NN_CONV_PIXEL_ALIGN 1

static NN_CLONES void nn_conv_task(const void *args, int64_t part, int64_t parts) {
    const nn_conv_args *a = (const nn_conv_args *)args;
    int64_t lo, hi;
    nn_split(a->n * a->oh * a->ow, NN_CONV_PIXEL_ALIGN, part, parts, &lo, &hi);
    const int64_t kk = a->kh * a->kw * a->c, band = a->band_rows * a->ow;
    float *cols = a->scratch + part * band * a->ld;
    for (int64_t p0 = lo; p0 < hi; p0 += band) {
        const int64_t p1 = p0 + band < hi ? p0 + band : hi;
        float *dst = cols;
        for (int64_t px = p0; px < p1; px++, dst += a->ld) {
            const int64_t r = px / a->ow, ox = px % a->ow;
            const int64_t b = r / a->oh, oy = r % a->oh;
            const float *img = a->x + b * a->h * a->w_in * a->c;
            float *d = dst;
            for (int64_t i = 0; i < a->kh; i++) {
                const int64_t iy = oy * a->sh - a->pad_top + i * a->dh;
                for (int64_t j = 0; j < a->kw; j++, d += a->c) {
                    const int64_t ix = ox * a->sw - a->pad_left + j * a->dw;
                    if (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w_in)
                        memset(d, 0, a->c * sizeof(float));
                    else
                        memcpy(d, img + (iy * a->w_in + ix) * a->c, a->c * sizeof(float));
                }
            }
            if (a->ld > kk) memset(d, 0, (a->ld - kk) * sizeof(float));
        }
        const int64_t rows = p1 - p0;
        float *out = a->y + p0 * a->ldy;
        nn_sgemm(cols, a->ld, a->w, a->m, 0, out, a->ldy, rows, a->m, a->ld);
        nn_epilogue(out, a->ldy, rows, a->m, a->bias, &a->act);
    }
}

/* Pooling kinds: the same numbers as POOLS in __init__.py. */
enum {
    NN_POOL_MAX = 0,
    NN_POOL_AVG = 1,        /* divided by the taps inside the input (count_include_pad = 0) */
    NN_POOL_AVG_PAD = 2,    /* divided by the taps inside the padded input (count_include_pad = 1) */
};

/* 2-D pooling geometry: input (n, h, w, c) C-contiguous, output (n, oh, ow, c) with ``y_stride`` floats
 * from one output pixel to the next (c, or more when the output is a channel slice of a wider tensor). */
typedef struct {
    int64_t n, h, w, c, oh, ow;
    int64_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right;
    int64_t y_stride;
    int32_t kind;
} nn_pool_params;

/* Channels per block of the pooling kernels: the accumulator stays in L1 across a window's taps. */
#define NN_POOL_BLOCK 64

/* Taps of one axis whose position start + t * step lies in [lo, hi), t in [0, k). */
NN_INLINE int64_t nn_taps_inside(int64_t start, int64_t step, int64_t k, int64_t lo, int64_t hi) {
    int64_t count = 0;
    for (int64_t t = 0; t < k; t++) {
        const int64_t pos = start + t * step;
        count += pos >= lo && pos < hi;
    }
    return count;
}

/* The maximum as numpy's np.maximum takes it: a NaN on either side wins. */
NN_INLINE float nn_max_nan(float acc, float v) { return (v > acc || v != v) ? v : acc; }

/* One tap of a pooling window into a block's accumulator: its maximum or its sum. */
NN_INLINE void nn_pool_tap(float *restrict acc, const float *restrict xs, int64_t cb, int is_max) {
    if (is_max) {
#pragma omp simd aligned(acc : 64)
        for (int64_t ch = 0; ch < cb; ch++) acc[ch] = nn_max_nan(acc[ch], xs[ch]);
    } else {
#pragma omp simd aligned(acc : 64)
        for (int64_t ch = 0; ch < cb; ch++) acc[ch] += xs[ch];
    }
}

/* A block's result: the maximum as is, the sum divided by ``divisor``; stored at y. */
NN_INLINE void nn_pool_store(float *restrict acc, float *restrict y, int64_t cb, int is_max, float divisor) {
    if (!is_max) {
#pragma omp simd aligned(acc : 64)
        for (int64_t ch = 0; ch < cb; ch++) acc[ch] /= divisor;
    }
    memcpy(y, acc, (size_t)cb * sizeof(float));
}

/* The taps of one axis inside the input: the offsets (position * unit) of start + t * step in [0, size),
 * t in [0, k), into off; returns how many. */
NN_INLINE int64_t nn_taps(int64_t *off, int64_t start, int64_t step, int64_t k, int64_t size, int64_t unit) {
    int64_t n = 0;
    for (int64_t t = 0; t < k; t++) {
        const int64_t pos = start + t * step;
        if (pos >= 0 && pos < size) off[n++] = pos * unit;
    }
    return n;
}

/* A window's taps inside the input: row offsets x column offsets (floats from the image's start). Padding
 * contributes nothing (max(x, -inf) == x, x + 0 == x); a window with no tap inside the input gives -inf
 * (max) or 0 / count (average), as the padded computation does. */
typedef struct {
    const int64_t *rows, *cols;
    int64_t nr, nc;
} nn_window;

/* One output pixel's block of ``cb`` <= NN_POOL_BLOCK channels at c0 (the last c % 8 channels, after the register
 * blocks of nn_pool_pixel_vn): every tap, row by row, through an L1 accumulator. */
NN_INLINE void nn_pool_pixel(const float *restrict ximg, float *restrict yp, const nn_window *win, int is_max,
                             int64_t c0, int64_t cb, float divisor) {
    float acc[NN_POOL_BLOCK] __attribute__((aligned(64)));
    const float init = is_max ? -INFINITY : 0.0f;
    for (int64_t ch = 0; ch < NN_POOL_BLOCK; ch++) acc[ch] = init;
    for (int64_t a = 0; a < win->nr; a++)
        for (int64_t b = 0; b < win->nc; b++) nn_pool_tap(acc, ximg + win->rows[a] + win->cols[b] + c0, cb, is_max);
    nn_pool_store(acc, yp + c0, cb, is_max, divisor);
}

/* 8 int32 lanes: the masks of nn_v8 comparisons */
typedef int32_t nn_i8 __attribute__((vector_size(32)));

/* np.maximum's rule on 8 lanes: a NaN in v wins, a NaN already in a stays. */
NN_INLINE nn_v8 nn_vmax_nan(nn_v8 a, nn_v8 v) {
    const nn_i8 take = (v > a) | (v != v);
    return (nn_v8)(((nn_i8)v & take) | ((nn_i8)a & ~take));
}

/* Channels per register block of the pooling kernel: four 8-lane accumulators stay in registers across a
 * window's taps (an L1 accumulator, loaded and stored at every tap, made 3x3 stride-1 averages of 192
 * channels no faster than numpy's separable passes). */
#define NN_POOL_VBLOCK 32

/* nn_pool_pixel for V (a constant, 1 to 4) whole 8-lane vectors of channels at c0, held in registers across the
 * window: the same taps in the same order, so the same sums and maxima. Full blocks of NN_POOL_VBLOCK channels
 * take V = 4; the rest of a channel count that is not a multiple of it takes its whole vectors (ShuffleNet's 24
 * channels: 3), and only the last c % 8 go through nn_pool_pixel's L1 accumulator. */
NN_INLINE void nn_pool_pixel_vn(const float *restrict ximg, float *restrict yp, const nn_window *win,
                                int is_max, int64_t c0, float divisor, const int V) {
    const float init = is_max ? -INFINITY : 0.0f;
    nn_v8 acc[4];
    for (int v = 0; v < V; v++) acc[v] = (nn_v8){init, init, init, init, init, init, init, init};
    for (int64_t a = 0; a < win->nr; a++) {
        for (int64_t b = 0; b < win->nc; b++) {
            const nn_v8 *xp = (const nn_v8 *)(ximg + win->rows[a] + win->cols[b] + c0);
            if (is_max)
                for (int v = 0; v < V; v++) acc[v] = nn_vmax_nan(acc[v], xp[v]);
            else
                for (int v = 0; v < V; v++) acc[v] += xp[v];
        }
    }
    nn_v8 *out = (nn_v8 *)(yp + c0);
    for (int v = 0; v < V; v++) {
        if (!is_max) acc[v] /= divisor;
        out[v] = acc[v];
    }
}

/* Output rows [r0, r1) of the flattened (n * oh) rows: each pixel's window, its channels in blocks. The
 * window's row taps are found once per output row, its column taps once per pixel. */
NN_API NN_CLONES void nn_pool_nhwc_f32(const float *x, float *y, const nn_pool_params *p, int64_t r0,
                                       int64_t r1) {
    const int64_t c = p->c, ow = p->ow, full = c - c % NN_POOL_VBLOCK, vecs = (c - full) / 8, tail = full + 8 * vecs;
    const int is_max = p->kind == NN_POOL_MAX, with_pad = p->kind == NN_POOL_AVG_PAD;
    int64_t rows[p->kh], cols[p->kw];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / p->oh, i = r % p->oh;
        const float *ximg = x + b * p->h * p->w * c;
        const int64_t top = i * p->sh - p->pad_top;
        const int64_t nr = nn_taps(rows, top, p->dh, p->kh, p->h, p->w * c);
        const int64_t wr = with_pad ? nn_taps_inside(top, p->dh, p->kh, -p->pad_top, p->h + p->pad_bottom) : nr;
        for (int64_t j = 0; j < ow; j++) {
            const int64_t left = j * p->sw - p->pad_left;
            const nn_window win = {rows, cols, nr, nn_taps(cols, left, p->dw, p->kw, p->w, c)};
            const int64_t wc = with_pad ? nn_taps_inside(left, p->dw, p->kw, -p->pad_left, p->w + p->pad_right)
                                        : win.nc;
            const float divisor = (float)(wr * wc);
            float *yp = y + (r * ow + j) * p->y_stride;
            for (int64_t c0 = 0; c0 < full; c0 += NN_POOL_VBLOCK) nn_pool_pixel_vn(ximg, yp, &win, is_max, c0, divisor, 4);
            switch (vecs) {
            case 3: nn_pool_pixel_vn(ximg, yp, &win, is_max, full, divisor, 3); break;
            case 2: nn_pool_pixel_vn(ximg, yp, &win, is_max, full, divisor, 2); break;
            case 1: nn_pool_pixel_vn(ximg, yp, &win, is_max, full, divisor, 1); break;
            default: break;
            }
            if (tail < c) nn_pool_pixel(ximg, yp, &win, is_max, tail, c - tail, divisor);
        }
    }
}

/* Global pooling of work units [u0, u1) of x (n, hw, c) C-contiguous into y (n, c), a unit being one image's block
 * of NN_POOL_BLOCK channels (the last one narrower), units of an image in channel order: every channel reduced over
 * the pixels in order (the sum numpy's np.mean(x, axis=1) takes, then divided by hw), or its maximum. A channel's
 * result does not depend on how the units are split (at batch 1 the pool splits the channels, not only images). */
NN_API NN_CLONES void nn_global_pool_nhwc_f32(const float *x, float *y, int64_t hw, int64_t c, int32_t kind,
                                              int64_t u0, int64_t u1) {
    const int is_max = kind == NN_POOL_MAX;
    const int64_t blocks = (c + NN_POOL_BLOCK - 1) / NN_POOL_BLOCK;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t b = u / blocks, c0 = (u % blocks) * NN_POOL_BLOCK;
        const int64_t cb = c - c0 < NN_POOL_BLOCK ? c - c0 : NN_POOL_BLOCK;
        float acc[NN_POOL_BLOCK] __attribute__((aligned(64)));
        for (int64_t ch = 0; ch < NN_POOL_BLOCK; ch++) acc[ch] = is_max ? -INFINITY : 0.0f;
        const float *xb = x + b * hw * c + c0;
        for (int64_t i = 0; i < hw; i++) nn_pool_tap(acc, xb + i * c, cb, is_max);
        nn_pool_store(acc, y + b * c + c0, cb, is_max, (float)hw);
    }
}

/* Gather along the last axis of 4-byte elements, rows [r0, r1): y[r, k] = x[r, idx[k]] for x (rows, in_row)
 * C-contiguous and y (rows, n_idx) with rows ldy >= n_idx elements apart (a channel slice of a wider channels-last
 * tensor: ShuffleNet's half written straight into the next block's Concat). Bits are copied as they are (any
 * 4-byte dtype, NaN payloads kept); a row of x stays in L1 while its elements are picked. */
NN_API NN_CLONES void nn_gather_last_b32(const uint32_t *x, uint32_t *y, const int32_t *idx, int64_t n_idx,
                                         int64_t in_row, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const uint32_t *restrict xr = x + r * in_row;
        uint32_t *restrict yr = y + r * ldy;
#pragma omp simd
        for (int64_t k = 0; k < n_idx; k++) yr[k] = xr[idx[k]];
    }
}

/* One row's channel shuffle: y, seen as (cg, g), is x, seen as (g, cg), transposed. Inlined with a constant
 * g, the loads are g contiguous streams and the stores one interleaved stream (vector permutes, no gathers:
 * 28x28x240 in 3 groups takes 3x a plain copy by gathers on AMD Zen 4). */
NN_INLINE void nn_shuffle_row(const uint32_t *restrict x, uint32_t *restrict y, int64_t g, int64_t cg) {
    for (int64_t k = 0; k < cg; k++)
        for (int64_t G = 0; G < g; G++) y[k * g + G] = x[G * cg + k];
}

/* Rows [r0, r1) of x (rows, g * cg) into y (rows, g * cg), both C-contiguous: y[r, k * g + G] = x[r, G * cg + k],
 * ShuffleNet's channel shuffle as a Gather of the channel axis in NHWC (any 4-byte dtype, bits copied). */
NN_API NN_CLONES void nn_shuffle_last_b32(const uint32_t *x, uint32_t *y, int64_t g, int64_t cg, int64_t r0,
                                          int64_t r1) {
    const int64_t c = g * cg;
    for (int64_t r = r0; r < r1; r++) {
        const uint32_t *xr = x + r * c;
        uint32_t *yr = y + r * c;
        switch (g) {
        case 2: nn_shuffle_row(xr, yr, 2, cg); break;
        case 3: nn_shuffle_row(xr, yr, 3, cg); break;
        case 4: nn_shuffle_row(xr, yr, 4, cg); break;
        case 8: nn_shuffle_row(xr, yr, 8, cg); break;
        default: nn_shuffle_row(xr, yr, g, cg); break;
        }
    }
}

/* ---- y[r, i] = act(x[r, i] * scale[i] + shift[i]) over rows of width c (channels last): an inference
 * BatchNormalization and the activation fused into it, in one pass where numpy makes three. Relu and Clip keep
 * numpy's NaN (as nn_add_act_f32), the other kinds go through nn_apply. */
typedef struct {
    const float *x;
    float *y;
    const float *scale, *shift;
    int64_t rows, c;
    const nn_act *act;
} nn_affine_args;

NN_API NN_CLONES void nn_affine_rows(const nn_affine_args *a, int64_t r0, int64_t r1) {
    const nn_act *act = a->act;
    const float lo = act->kind == NN_ACT_RELU ? 0.0f : act->lo, hi = act->kind == NN_ACT_RELU ? INFINITY : act->hi;
    const int bounds = act->kind == NN_ACT_RELU || act->kind == NN_ACT_CLIP;
    const float *s = a->scale, *b = a->shift;
    const int64_t c = a->c;
    for (int64_t r = r0; r < r1; r++) {
        const float *px = a->x + r * c;
        float *py = a->y + r * c;
        if (bounds) {
#pragma omp simd
            for (int64_t i = 0; i < c; i++) {
                const float v = px[i] * s[i] + b[i];
                const float t = v < lo ? lo : v;
                py[i] = t > hi ? hi : t;
            }
        } else {
#pragma omp simd
            for (int64_t i = 0; i < c; i++) py[i] = px[i] * s[i] + b[i];
            nn_apply(py, c, act);
        }
    }
}

static void nn_affine_task(const void *args, int64_t part, int64_t parts) {
    const nn_affine_args *a = args;
    nn_affine_rows(a, a->rows * part / parts, a->rows * (part + 1) / parts);
}

/* ---- Transpose as a swap of two axis groups: y[o, j, i, :] = x[o, i, j, :] for x (outer, a, b, inner), 4-byte
 * elements. inner == 1 goes by TR_TILE x TR_TILE tiles (both the rows read and the rows written stay in L1);
 * inner > 1 moves whole blocks of inner elements. Parts take ranges of (o, tile of j). At most NN_TR_FEW rows
 * a (an image's colour planes to NHWC) or NN_TR_FEW_B columns b (a mask's few classes back to NCHW) go by loops unrolled for
 * that count instead ((1, 3, 256, 256) to NHWC: 30 us against 71 for numpy's copies per channel and 47 for the
 * tiles; one thread, loaded 2-core EPYC), parts then taking ranges of rows of x when b is the few. */
#define NN_TR_TILE 16
typedef struct {
    const uint32_t *x;
    uint32_t *y;
    int64_t outer, a, b, inner;
} nn_transpose_args;

/* y (b, a) from x (a, b) for columns [j0, j1), a <= NN_TR_FEW rows known to the compiler: an image's few colour
 * planes interleaved into channels-last pixels ((1, 3, 256, 256): 16-wide tiles read 3 rows of 16 and write
 * 16 rows of 3, each a loop of its own; unrolled by a, the pixels' stores are one contiguous run) */
#define NN_TR_FEW 8
#define NN_TR_FEW_CASE(A)                                                                                            \
    case A:                                                                                                        \
        for (int64_t j = j0; j < j1; j++)                                                                          \
            for (int64_t i = 0; i < A; i++) y[j * A + i] = x[i * b + j];                                           \
        break;
/* and y (b, a) from x (a, b) for rows [i0, i1) of x, b <= NN_TR_FEW_B columns known to the compiler: channels-last
 * pixels of a few channels split into planes (a one- or two-class mask back to NCHW; (1, 256, 256, 3) in 28 us
 * against the tiles' 62, 2 parts; at 8 columns the tiles win, 149 against 324) */
#define NN_TR_FEW_B 4
#define NN_TR_FEW_COLS(B)                                                                                            \
    case B:                                                                                                        \
        for (int64_t i = i0; i < i1; i++)                                                                          \
            for (int64_t j = 0; j < B; j++) y[j * a + i] = x[i * B + j];                                           \
        break;
NN_INLINE void nn_transpose_few_cols(const uint32_t *restrict x, uint32_t *restrict y, int64_t a, int64_t b,
                                     int64_t i0, int64_t i1) {
    switch (b) {
        NN_TR_FEW_COLS(1)
        NN_TR_FEW_COLS(2)
        NN_TR_FEW_COLS(3)
        NN_TR_FEW_COLS(4)
    default:
        break;
    }
}

NN_INLINE void nn_transpose_few(const uint32_t *restrict x, uint32_t *restrict y, int64_t a, int64_t b, int64_t j0,
                                int64_t j1) {
    switch (a) {
        NN_TR_FEW_CASE(1)
        NN_TR_FEW_CASE(2)
        NN_TR_FEW_CASE(3)
        NN_TR_FEW_CASE(4)
        NN_TR_FEW_CASE(5)
        NN_TR_FEW_CASE(6)
        NN_TR_FEW_CASE(7)
        NN_TR_FEW_CASE(8)
    default:
        break;
    }
}

NN_API NN_CLONES void nn_transpose_tiles(const nn_transpose_args *t, int64_t t0, int64_t t1) {
    const int64_t a = t->a, b = t->b, inner = t->inner, tiles = (b + NN_TR_TILE - 1) / NN_TR_TILE;
    if (inner == 1 && a <= NN_TR_FEW) {
        for (int64_t q = t0; q < t1;) {     /* the part's tiles of one o at once: one run of columns */
            const int64_t o = q / tiles, end = t1 < (o + 1) * tiles ? t1 : (o + 1) * tiles;
            const int64_t j1 = (end - o * tiles) * NN_TR_TILE;
            nn_transpose_few(t->x + o * a * b, t->y + o * a * b, a, b, (q - o * tiles) * NN_TR_TILE, j1 < b ? j1 : b);
            q = end;
        }
        return;
    }
    for (int64_t q = t0; q < t1; q++) {
        const int64_t o = q / tiles, j0 = (q % tiles) * NN_TR_TILE, j1 = j0 + NN_TR_TILE < b ? j0 + NN_TR_TILE : b;
        const uint32_t *x = t->x + o * a * b * inner;
        uint32_t *y = t->y + o * a * b * inner;
        if (inner == 1) {
            for (int64_t i0 = 0; i0 < a; i0 += NN_TR_TILE) {
                const int64_t i1 = i0 + NN_TR_TILE < a ? i0 + NN_TR_TILE : a;
                for (int64_t j = j0; j < j1; j++) {
                    uint32_t *row = y + j * a;
#pragma omp simd
                    for (int64_t i = i0; i < i1; i++) row[i] = x[i * b + j];
                }
            }
        } else {
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = 0; i < a; i++)
                    memcpy(y + (j * a + i) * inner, x + (i * b + j) * inner, (size_t)inner * 4);
        }
    }
}

NN_API NN_CLONES void nn_transpose_cols(const nn_transpose_args *t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1;) {         /* rows r of the outer * a rows of x, a run of one o at a time */
        const int64_t o = r / t->a, end = r1 < (o + 1) * t->a ? r1 : (o + 1) * t->a;
        nn_transpose_few_cols(t->x + o * t->a * t->b, t->y + o * t->a * t->b, t->a, t->b, r - o * t->a,
                              end - o * t->a);
        r = end;
    }
}

static void nn_transpose_task(const void *args, int64_t part, int64_t parts) {
    const nn_transpose_args *t = args;
    if (t->inner == 1 && t->b <= NN_TR_FEW_B && t->a > NN_TR_FEW) {
        const int64_t rows = t->outer * t->a;
        nn_transpose_cols(t, rows * part / parts, rows * (part + 1) / parts);
        return;
    }
    const int64_t total = t->outer * ((t->b + NN_TR_TILE - 1) / NN_TR_TILE);
    nn_transpose_tiles(t, total * part / parts, total * (part + 1) / parts);
}

/* ---- Resize of a channels-last image (N, H, W, C) -> (N, OH, OW, C), separable: output row oh mixes source rows
 * hidx[oh, 0..th) with weights hw[oh, :] (into a scratch row, or the source row itself for a single tap of
 * weight 1), then output pixel ow mixes that row's pixels widx[ow, 0..tw) with ww[ow, :], whole channel vectors
 * at a time. The same two passes, in the same order, as the numpy reference (hostkernels/_nn.py resample). */
typedef struct {
    const float *x;
    float *y;
    const int32_t *hidx, *widx;
    const float *hw, *ww;
    int64_t n, h, w, c, oh, ow, th, tw;
    int64_t ldy;            /* resize_nhwc: y's pixel stride in elements (c, or a wider tensor's channels) */
    int *failed;            /* set when a part's scratch row could not be allocated */
    int round_half;         /* resize_to_nchw: each output rounded through float16 (fp16 storage, nn_resize_nchw.h) */
} nn_resize_args;

NN_INLINE int nn_resize_copies(int64_t taps, const float *weights) { return taps == 1 && weights[0] == 1.0f; }

NN_API NN_CLONES void nn_resize_rows(const nn_resize_args *a, int64_t r0, int64_t r1, float *row) {
    const int64_t c = a->c, wc = a->w * c;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r / a->oh, oh = r % a->oh;
        const float *image = a->x + n * a->h * wc;
        const int32_t *hi = a->hidx + oh * a->th;
        const float *hv = a->hw + oh * a->th;
        const float *line = image + (int64_t)hi[0] * wc;
        if (!nn_resize_copies(a->th, hv)) {
            const float w0 = hv[0];
#pragma omp simd
            for (int64_t i = 0; i < wc; i++) row[i] = line[i] * w0;
            for (int64_t j = 1; j < a->th; j++) {
                const float *src = image + (int64_t)hi[j] * wc, wj = hv[j];
#pragma omp simd
                for (int64_t i = 0; i < wc; i++) row[i] += src[i] * wj;
            }
            line = row;
        }
        float *out = a->y + r * a->ow * a->ldy;
        for (int64_t ow = 0; ow < a->ow; ow++) {
            const int32_t *wi = a->widx + ow * a->tw;
            const float *wv = a->ww + ow * a->tw;
            float *o = out + ow * a->ldy;
            const float *p0 = line + (int64_t)wi[0] * c;
            if (nn_resize_copies(a->tw, wv)) {
                memcpy(o, p0, (size_t)c * sizeof(float));
                continue;
            }
            const float v0 = wv[0];
#pragma omp simd
            for (int64_t i = 0; i < c; i++) o[i] = p0[i] * v0;
            for (int64_t k = 1; k < a->tw; k++) {
                const float *pk = line + (int64_t)wi[k] * c, vk = wv[k];
#pragma omp simd
                for (int64_t i = 0; i < c; i++) o[i] += pk[i] * vk;
            }
        }
    }
}

static void nn_resize_task(const void *args, int64_t part, int64_t parts) {
    const nn_resize_args *a = args;
    const int64_t rows = a->n * a->oh, r0 = rows * part / parts, r1 = rows * (part + 1) / parts;
    if (r0 >= r1) return;
    float *row = NULL;
    int scratch = 0;
    for (int64_t oh = 0; oh < a->oh && !scratch; oh++) scratch = !nn_resize_copies(a->th, a->hw + oh * a->th);
    if (scratch && (row = malloc((size_t)(a->w * a->c) * sizeof(float))) == NULL) {
        __atomic_store_n(a->failed, 1, __ATOMIC_SEQ_CST);
        return;
    }
    nn_resize_rows(a, r0, r1, row);
    free(row);
}

/* ---- float16 storage: IEEE binary16 <-> float32. GCC's _Float16 conversions round to nearest even (as numpy's
 * astype) and saturate to inf beyond 65504 + half an ulp, NaN stays NaN; the x86-64-v3 / v4 clones compile them
 * to F16C's vcvtps2ph / vcvtph2ps (8 or 16 lanes), the baseline to libgcc's scalar conversion. numpy's own
 * float32 -> float16 cast ran 12 ns an element on an AVX2 EPYC (no SIMD), this one well under 1. */
#if defined(__FLT16_MAX__)
#define NN_HAVE_F16 1
typedef _Float16 nn_f16;

/* mode 0: float32 x -> float16 y; 1: float16 x -> float32 y; 2: float32 x -> float32 y rounded through float16 */
#include "nn_half_simd.h"

NN_API NN_CLONES void nn_cast_half(const void *x, void *y, int64_t n, int mode) {
    int64_t i0 = 0;     /* the elements the F16C loops converted (nn_half_simd.h) */
#if NN_HALF_SIMD
    if (nn_half_simd_ok()) i0 = nn_half_simd(x, y, n, mode);
#endif
    if (mode == 0) {
        const float *restrict a = x;
        nn_f16 *restrict b = y;
#pragma omp simd
        for (int64_t i = i0; i < n; i++) b[i] = (nn_f16)a[i];
    } else if (mode == 1) {
        const nn_f16 *restrict a = x;
        float *restrict b = y;
#pragma omp simd
        for (int64_t i = i0; i < n; i++) b[i] = (float)a[i];
    } else {
        const float *a = x;     /* y may be x: element i is read before it is written */
        float *b = y;
#pragma omp simd
        for (int64_t i = i0; i < n; i++) b[i] = (float)(nn_f16)a[i];
    }
}
#else
#define NN_HAVE_F16 0
#endif

#include "nn_resize_nchw.h"

/* y[i] = act(a[i] + b[i]) for i in [i0, i1), all three C-contiguous float32 of one size (y may be a or b): the
 * sum and its activation while a chunk is in L1 (numpy makes a pass for each). Relu and Clip keep numpy's
 * NaN rule (np.maximum / np.minimum: a NaN wins), unlike nn_apply's; the other kinds go through nn_apply. */
NN_API NN_CLONES void nn_add_act_f32(const float *a, const float *b, float *y, int64_t i0, int64_t i1,
                                     const nn_act *act) {
    const float lo = act->kind == NN_ACT_RELU ? 0.0f : act->lo, hi = act->kind == NN_ACT_RELU ? INFINITY : act->hi;
    const int bounds = act->kind == NN_ACT_RELU || act->kind == NN_ACT_CLIP;
    for (int64_t c0 = i0; c0 < i1; c0 += NN_CHUNK) {
        const int64_t n = i1 - c0 < NN_CHUNK ? i1 - c0 : NN_CHUNK;
        const float *pa = a + c0, *pb = b + c0;
        float *py = y + c0;
        if (bounds) {
            /* a comparison with a NaN is false: the NaN is kept, as np.maximum / np.minimum keep it */
#pragma omp simd
            for (int64_t i = 0; i < n; i++) {
                const float v = pa[i] + pb[i];
                const float t = v < lo ? lo : v;
                py[i] = t > hi ? hi : t;
            }
        } else {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) py[i] = pa[i] + pb[i];
            nn_apply(py, n, act);
        }
    }
}

/* The pools split over the native thread pool: 2-D pooling by output rows, global pooling by units of an image's
 * block of channels (nn_global_pool_nhwc_f32). */
typedef struct {
    const float *x;
    float *y;
    const nn_pool_params *p;     /* 2-D pooling; NULL for global pooling */
    int64_t first, total, hw, c; /* rows [first, first + total) (2-D: of N * OH) or units (global) */
    int32_t kind;
} nn_pool_args;

static void nn_pool_task(const void *args, int64_t part, int64_t parts) {
    const nn_pool_args *a = (const nn_pool_args *)args;
    int64_t lo, hi;
    nn_split(a->total, 1, part, parts, &lo, &hi);
    lo += a->first, hi += a->first;
    if (a->p)
        nn_pool_nhwc_f32(a->x, a->y, a->p, lo, hi);
    else
        nn_global_pool_nhwc_f32(a->x, a->y, a->hw, a->c, a->kind, lo, hi);
}


/* The mean of row xr (width floats) and 1 / sqrt(variance + eps), the variance as the mean of the squared
 * deviations: two passes, each summed in float32 over 16 lanes (numpy's path sums pairwise: the two agree to
 * float32 rounding). A row of width 0 has mean 0 and variance 0. LayerNormalization and Instance/GroupNormalization
 * (nn_norm.h) share it. */
static inline void nn_row_moments(const float *xr, int64_t width, float eps, float *mean_out, float *inv_out) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= width; j += 16)
        for (int l = 0; l < 16; l++) acc[l] += xr[j + l];
    float sum = 0.0f;
    for (int l = 0; l < 16; l++) sum += acc[l];
    for (; j < width; j++) sum += xr[j];
    const float mean = width ? sum / (float)width : 0.0f;
    float sq[16] = {0};
    j = 0;
    for (; j + 16 <= width; j += 16)
        for (int l = 0; l < 16; l++) {
            const float d = xr[j + l] - mean;
            sq[l] += d * d;
        }
    float ss = 0.0f;
    for (int l = 0; l < 16; l++) ss += sq[l];
    for (; j < width; j++) {
        const float d = xr[j] - mean;
        ss += d * d;
    }
    *mean_out = mean;
    *inv_out = 1.0f / sqrtf((width ? ss / (float)width : 0.0f) + eps);
}


/* LayerNormalization over the last axis, rows [r0, r1) of x (rows, width) C-contiguous into y (may be x):
 * the row's mean, the mean of its squared deviations, then (x - mean) / sqrt(var + eps) * scale + bias
 * (scale and bias of width, either may be NULL), each row while it is in L1. Sums in float32 over 16
 * lanes (numpy's path sums pairwise: the two agree to float32 rounding). */
NN_API NN_CLONES void nn_layernorm_f32(const float *x, float *y, int64_t width, const float *scale,
                                       const float *bias, float eps, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * width;
        float *yr = y + r * width;
        float mean, inv;
        nn_row_moments(xr, width, eps, &mean, &inv);
        int64_t j;
        for (j = 0; j < width; j++) {
            float v = (xr[j] - mean) * inv;
            if (scale) v *= scale[j];
            if (bias) v += bias[j];
            yr[j] = v;
        }
    }
}

typedef struct {
    const float *x, *scale, *bias;
    float *y;
    int64_t rows, width;
    float eps;
} nn_layernorm_args;

static void nn_layernorm_task(const void *args, int64_t part, int64_t parts) {
    const nn_layernorm_args *a = (const nn_layernorm_args *)args;
    int64_t lo, hi;
    nn_split(a->rows, 1, part, parts, &lo, &hi);
    nn_layernorm_f32(a->x, a->y, a->width, a->scale, a->bias, a->eps, lo, hi);
}


/* RMS normalization over the last axis (the exported RMSNorm chain Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt ->
 * Div(x, .) [-> Mul(scale)]), rows [r0, r1) of x (rows, width) C-contiguous into y (may be x): the row's mean
 * square summed in float32 over 16 lanes, s = sqrt(ms + eps), then y = x / s * scale (scale of width, or NULL),
 * one row at a time in L1. */
NN_API NN_CLONES void nn_rmsnorm_f32(const float *x, float *y, int64_t width, const float *scale, float eps,
                                     int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * width;
        float *yr = y + r * width;
        float sq[16] = {0};
        int64_t j = 0;
        for (; j + 16 <= width; j += 16)
            for (int l = 0; l < 16; l++) sq[l] += xr[j + l] * xr[j + l];
        float ss = 0.0f;
        for (int l = 0; l < 16; l++) ss += sq[l];
        for (; j < width; j++) ss += xr[j] * xr[j];
        const float s = sqrtf((width ? ss / (float)width : 0.0f) + eps);
        if (scale)
            for (j = 0; j < width; j++) yr[j] = xr[j] / s * scale[j];
        else
            for (j = 0; j < width; j++) yr[j] = xr[j] / s;
    }
}

typedef struct {
    const float *x, *scale;
    float *y;
    int64_t rows, width;
    float eps;
} nn_rmsnorm_args;

static void nn_rmsnorm_task(const void *args, int64_t part, int64_t parts) {
    const nn_rmsnorm_args *a = (const nn_rmsnorm_args *)args;
    int64_t lo, hi;
    nn_split(a->rows, 1, part, parts, &lo, &hi);
    nn_rmsnorm_f32(a->x, a->y, a->width, a->scale, a->eps, lo, hi);
}

/* The rotary embedding's rotate-half form (the exported chain Slice/Slice/Neg/Concat/Mul/Mul/Add), rows [r0, r1)
 * of x (rows, width) C-contiguous into y (not x): y = x * c + rot(x) * s with rot(x) = (-x[h:], x[:h]), h = width / 2,
 * the same two products and one sum per element as the chain. Row r of x is (o, m, i) of (outer, mid, inner)
 * and reads row o * inner + i of c and s (a cos/sin table broadcast over the mid axes: the heads). */
NN_API NN_CLONES void nn_rotary_f32(const float *x, const float *c, const float *s, float *y, int64_t width,
                                    int64_t mid, int64_t inner, int64_t r0, int64_t r1) {
    const int64_t h = width / 2;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = r % inner, o = r / inner / mid;
        const float *xr = x + r * width, *cr = c + (o * inner + i) * width, *sr = s + (o * inner + i) * width;
        float *yr = y + r * width;
        for (int64_t j = 0; j < h; j++) {
            const float a = xr[j] * cr[j], b = (-xr[j + h]) * sr[j];
            yr[j] = a + b;
        }
        for (int64_t j = h; j < width; j++) {
            const float a = xr[j] * cr[j], b = xr[j - h] * sr[j];
            yr[j] = a + b;
        }
    }
}

typedef struct {
    const float *x, *c, *s;
    float *y;
    int64_t rows, width, mid, inner;
} nn_rotary_args;

static void nn_rotary_task(const void *args, int64_t part, int64_t parts) {
    const nn_rotary_args *a = (const nn_rotary_args *)args;
    int64_t lo, hi;
    nn_split(a->rows, 1, part, parts, &lo, &hi);
    nn_rotary_f32(a->x, a->c, a->s, a->y, a->width, a->mid, a->inner, lo, hi);
}

NN_INLINE nn_v8 nn_load8(const float *p) { return *(const nn_v8 *)p; }

#include "nn_gconv.h"

typedef struct {
    const float *x, *wt, *bias;
    float *y;
    const nn_gconv_params *p;
} nn_gconv_args;

static void nn_gconv_task(const void *args, int64_t part, int64_t parts) {
    const nn_gconv_args *a = (const nn_gconv_args *)args;
    int64_t lo, hi;
    nn_split(a->p->n * a->p->oh, 1, part, parts, &lo, &hi);
    nn_gconv_nhwc_f32(a->x, a->y, a->wt, a->bias, a->p, lo, hi);
}


/* Group-1 2-D convolution, channels last, straight from the input (no im2col columns, no padded copy):
 * per output row and block of 16 output channels (8 for the last block of a count that is not a multiple
 * of 16), tiles of NN_DIRECT_TILE pixels accumulate in 2 x NN_DIRECT_TILE 8-lane registers over every tap
 * and input channel: a weight row of the block loaded once per tap and channel, an input element
 * broadcast per pixel (12 FMAs for 8 loads: the two FMA pipes stay busy on AVX2's 16 registers). Pixels
 * whose window crosses the left or right edge run one at a time with the taps outside skipped; rows
 * outside the input are skipped for the whole row. With a dilation of 1 a kernel row's taps are one run of
 * KW * C input elements and one run of KW * C weight rows (one loop). Weights: MP = M rounded up to 8
 * columns, zeros past M, in blocks of 16 columns (8 for the last when MP is not a multiple of 16), each
 * block (KH, KW, C, 16 or 8) contiguous (KH * KW * C * MP floats in all): a block's weights are one run
 * that stays in L2 (with (KH, KW, C, MP) rows 128 -> 128 channels at 28x28 ran 2.8x slower). Bias is the start value; the activation runs over each finished row.
 * Chosen for few output channels (the stem, 16 to 48 channel necks and heads), where a GEMM of N = M
 * columns spends its time packing the im2col columns (native/direct_conv.py says where). */
typedef struct {
    int64_t n, h, w, c, oh, ow, m, kh, kw, sh, sw, dh, dw, pad_top, pad_left, mp;
    nn_act act;
    int64_t ldy;            /* floats from one output pixel to the next: m, or more in a channel slice; 1 NCHW */
    int64_t ldc;            /* floats from one output channel to the next: 1, or oh * ow NCHW (one image a call) */
    int64_t ldxp, ldxc;     /* the input's pixel and channel strides: c and 1, or 1 and h * w NCHW */
} nn_direct_params;

#define NN_DIRECT_TILE 6

/* T pixels' accumulators (8V channels each) to the output from yp: pixels ldy floats apart, channels ldc apart (1:
 * whole vectors, else one float at a time: an NCHW output's channel planes), the first ``keep`` channels */
NN_INLINE void nn_direct_store(nn_v8 acc[][2], float *restrict yp, int64_t ldy, int64_t ldc, int64_t keep,
                               const int T, const int V) {
    if (ldc != 1) {
        /* NOTE: channel by channel, the tile's T pixels of a channel in a row: a pixel's 16 channels a plane apart
         * one after another ran a 48 -> 48 3x3 at 32x32 (planes 4 KB apart: one L1 set) 12% slower than channels
         * last and a conversion, this order 3% (1 thread, min of 200, loaded machine); a 12 -> 3 1x1 at 128x128
         * 30% faster */
        float tmp[NN_DIRECT_TILE][16] __attribute__((aligned(32)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            *(nn_v8 *)tmp[t] = acc[t][0];
            *(nn_v8 *)(tmp[t] + 8) = acc[t][1];
        }
        const int64_t n = NN_MIN(keep, 8 * V);
        for (int64_t k = 0; k < n; k++) {
            float *o = yp + k * ldc;
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) o[t * ldy] = tmp[t][k];
        }
        return;
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *o = yp + t * ldy;
        if (keep >= 8 * V) {
            *(nn_v8 *)o = acc[t][0];
            if (V > 1) *(nn_v8 *)(o + 8) = acc[t][1];
        } else {
            float tmp[16] __attribute__((aligned(32)));
            *(nn_v8 *)tmp = acc[t][0];
            *(nn_v8 *)(tmp + 8) = acc[t][1];
            memcpy(o, tmp, (size_t)keep * sizeof(float));
        }
    }
}

/* T pixels from ``left`` (input column of the first's window) at output yp, channels mb..mb+8V, taps of
 * kernel rows ki0..ki1; ``check``: skip taps outside the row (T = 1 then). T, V, check are constants at
 * every (inlined) call. */
NN_INLINE void nn_direct_tile(const float *restrict ximg, float *restrict yp, const float *restrict wt,
                              const float *restrict b16, const nn_direct_params *p, int64_t ki0, int64_t ki1,
                              int64_t top, int64_t left, int64_t mb, const int T, const int V, const int check) {
    const int64_t c = p->c, kw = p->kw, w = p->w, xp = p->ldxp, xc = p->ldxc, step = p->sw * xp, bw = 8 * V;
    const float *restrict wb = wt + p->kh * kw * c * mb;     /* this block's weights, rows of bw */
    nn_v8 acc[NN_DIRECT_TILE][2];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        acc[t][0] = nn_load8(b16);
        acc[t][1] = nn_load8(b16 + 8);
    }
    for (int64_t ki = ki0; ki < ki1; ki++) {
        const float *restrict xr = ximg + (top + ki * p->dh) * w * xp;
        const float *restrict wr = wb + ki * kw * c * bw;
        if (!check && p->dw == 1 && xc == 1) {
            const float *restrict xs = xr + left * c;
            const int64_t run = kw * c;
            for (int64_t q = 0; q < run; q++) {
                const nn_v8 w0 = nn_load8(wr + q * bw);
                const nn_v8 w1 = V > 1 ? nn_load8(wr + q * bw + 8) : w0;
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const float xv = xs[t * step + q];
                    acc[t][0] += xv * w0;
                    if (V > 1) acc[t][1] += xv * w1;
                }
            }
            continue;
        }
        for (int64_t kj = 0; kj < kw; kj++) {
            const int64_t iw = left + kj * p->dw;
            if (check && (iw < 0 || iw >= w)) continue;
            const float *restrict xs = xr + iw * xp;
            const float *restrict ws = wr + kj * c * bw;
            for (int64_t ci = 0; ci < c; ci++) {
                const nn_v8 w0 = nn_load8(ws + ci * bw);
                const nn_v8 w1 = V > 1 ? nn_load8(ws + ci * bw + 8) : w0;
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const float xv = xs[t * step + ci * xc];
                    acc[t][0] += xv * w0;
                    if (V > 1) acc[t][1] += xv * w1;
                }
            }
        }
    }
    nn_direct_store(acc, yp, p->ldy, p->ldc, p->m - mb, T, V);
}

#include "nn_direct_tiles.h"

typedef struct {
    const float *x, *wt, *bias;
    float *y;
    const nn_direct_params *p;
} nn_direct_args;

static void nn_direct_task(const void *args, int64_t part, int64_t parts) {
    const nn_direct_args *a = (const nn_direct_args *)args;
    int64_t lo, hi;
    if (a->p->ow <= NN_DIRECT_PIXEL_WALK_MAX_OW) {
        /* by pixels, not rows: a 7x7 map's 7 rows split 4 : 3 */
        nn_split(a->p->n * a->p->oh * a->p->ow, NN_DIRECT_TILE, part, parts, &lo, &hi);
        nn_direct_nhwc_pixels_f32(a->x, a->y, a->wt, a->bias, a->p, lo, hi);
    } else {
        nn_split(a->p->n * a->p->oh, 1, part, parts, &lo, &hi);
        nn_direct_nhwc_rows_f32(a->x, a->y, a->wt, a->bias, a->p, lo, hi);
    }
}

#include "nn_winograd.h"

/* ------------------------------------------------------------------------------------------------
 * Recurrent layers (LSTM, GRU, RNN as ONNX defines them): the input projection of every step and
 * direction is one GEMM through the linked BLAS (X W^T + the biases that can be folded), then each
 * direction runs its time steps here: the recurrent product h_{t-1} R^T (a register-blocked GEMV per
 * batch row for small batches, cblas_sgemm for larger ones) and the gate math fused per row (clip,
 * the activations with their alpha and beta, peepholes, the coupled input-forget gate, GRU's
 * linear_before_reset, sequence_lens masking: a finished row keeps its state and outputs zeros).
 * Gate order as in ONNX: LSTM i, o, f, c; GRU z, r, h; RNN one gate. Layout 0: X (T, B, I), Y (T, D,
 * B, H), states (D, B, H); layout 1: X (B, T, I), Y (B, T, D, H), states (B, D, H).
 * ------------------------------------------------------------------------------------------------ */
enum { NN_CELL_LSTM = 0, NN_CELL_GRU = 1, NN_CELL_RNN = 2 };
/* How a multi-row input projection is computed (nn_rnn_projects): by the size rule, through the BLAS, or on the
 * blocked kernels whenever W^T was packed (the last two: Recurrent's project argument, for A/B and tests). */
enum { NN_RNN_AUTO = 0, NN_RNN_BLAS = 1, NN_RNN_BLOCKED = 2 };

/* Recurrent activation kinds: the same numbers as RECURRENT_ACTIVATIONS in __init__.py. */
enum {
    NN_RA_SIGMOID = 0, NN_RA_TANH = 1, NN_RA_RELU = 2, NN_RA_AFFINE = 3, NN_RA_LEAKYRELU = 4,
    NN_RA_THRESHOLDEDRELU = 5, NN_RA_SCALEDTANH = 6, NN_RA_HARDSIGMOID = 7, NN_RA_ELU = 8, NN_RA_SOFTSIGN = 9,
    NN_RA_SOFTPLUS = 10, NN_RA_LAST = 10,
};

typedef struct {
    int32_t kind;
    float alpha, beta;
} nn_ract;

/* The prepared layer: sizes, attributes and the packed constants (held by the Python object). */
typedef struct {
    int32_t cell, dirs, reverse, layout, linear, coupled;
    int64_t input, hidden, gates;       /* gates: 4 LSTM, 3 GRU, 1 RNN */
    float clip;                         /* INFINITY: no clip */
    const float *w;                     /* (D * G * H, I): W of every direction, rows as in ONNX */
    const float *wt;                    /* (I, D * G * H): W^T for a one-row projection (nn_rnn_row.h), or NULL */
    const float *wp;                    /* W^T in column panels for a few rows' projection (nn_rnn_row.h), or NULL */
    int32_t project;                    /* NN_RNN_AUTO, NN_RNN_BLAS or NN_RNN_BLOCKED (nn_rnn_projects) */
    const float *bias;                  /* (D * G * H,): the bias folded into the projection */
    const float *rt;                    /* (D, H, G * H): R^T per direction */
    const float *rbh;                   /* (D, H) GRU's recurrent h bias when linear_before_reset, else NULL */
    const float *peep;                  /* (D, 3 * H) LSTM peepholes i, o, f, or NULL */
    nn_ract act[2][3];                  /* per direction: f, g, h (LSTM), f, g (GRU), f (RNN) */
} nn_rnn_params;

/* One recurrent activation over a contiguous run, in place, its input clipped to [-clip, clip] first. */
NN_INLINE void nn_ract_apply(float *restrict v, int64_t n, const nn_ract *f, float clip) {
    const float al = f->alpha, be = f->beta;
    if (clip < INFINITY)
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = NN_CLAMP(v[i], -clip, clip);
    switch (f->kind) {
    case NN_RA_SIGMOID:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = nn_sigmoid(v[i]);
        break;
    case NN_RA_TANH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = nn_tanhf(v[i]);
        break;
    case NN_RA_RELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
        break;
    case NN_RA_AFFINE:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = al * v[i] + be;
        break;
    case NN_RA_LEAKYRELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] >= 0.0f ? v[i] : al * v[i];
        break;
    case NN_RA_THRESHOLDEDRELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > al ? v[i] : 0.0f;
        break;
    case NN_RA_SCALEDTANH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = al * nn_tanhf(be * v[i]);
        break;
    case NN_RA_HARDSIGMOID:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] != v[i] ? v[i] : NN_CLAMP(al * v[i] + be, 0.0f, 1.0f);
        break;
    case NN_RA_ELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] >= 0.0f ? v[i] : al * (nn_expf(v[i]) - 1.0f);
        break;
    case NN_RA_SOFTSIGN:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) v[i] = v[i] / (1.0f + (v[i] < 0.0f ? -v[i] : v[i]));
        break;
    case NN_RA_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] + log1pf(expf(-v[i])) : log1pf(expf(v[i]));
        break;
    default:
        break;
    }
}

/* g[0:n] += h[0:k] @ rt[0:k, 0:n] (rt rows ldr apart): 64 outputs at a time held in eight 8-float
 * accumulators across the k rows, the rest one vector of 8, then one at a time. */
NN_INLINE void nn_rnn_gemv(const float *restrict h, int64_t k, const float *restrict rt, int64_t ldr, int64_t n,
                           float *restrict g) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        nn_v8 a0 = nn_load8(g + j), a1 = nn_load8(g + j + 8), a2 = nn_load8(g + j + 16), a3 = nn_load8(g + j + 24);
        nn_v8 a4 = nn_load8(g + j + 32), a5 = nn_load8(g + j + 40), a6 = nn_load8(g + j + 48);
        nn_v8 a7 = nn_load8(g + j + 56);
        const float *r = rt + j;
        for (int64_t i = 0; i < k; i++, r += ldr) {
            const float hv = h[i];
            a0 += hv * nn_load8(r), a1 += hv * nn_load8(r + 8), a2 += hv * nn_load8(r + 16);
            a3 += hv * nn_load8(r + 24), a4 += hv * nn_load8(r + 32), a5 += hv * nn_load8(r + 40);
            a6 += hv * nn_load8(r + 48), a7 += hv * nn_load8(r + 56);
        }
        *(nn_v8 *)(g + j) = a0, *(nn_v8 *)(g + j + 8) = a1, *(nn_v8 *)(g + j + 16) = a2;
        *(nn_v8 *)(g + j + 24) = a3, *(nn_v8 *)(g + j + 32) = a4, *(nn_v8 *)(g + j + 40) = a5;
        *(nn_v8 *)(g + j + 48) = a6, *(nn_v8 *)(g + j + 56) = a7;
    }
    for (; j + 8 <= n; j += 8) {
        nn_v8 a = nn_load8(g + j);
        const float *r = rt + j;
        for (int64_t i = 0; i < k; i++, r += ldr) a += h[i] * nn_load8(r);
        *(nn_v8 *)(g + j) = a;
    }
    for (; j < n; j++) {
        float a = g[j];
        for (int64_t i = 0; i < k; i++) a += h[i] * rt[i * ldr + j];
        g[j] = a;
    }
}

/* Four rows at once: g[r, 0:n] += h[r, 0:k] @ rt (r < 4, h rows k apart, g rows ldg apart): each load of R^T
 * serves four rows (16 columns of four rows in eight 8-float accumulators). */
NN_INLINE void nn_rnn_gemv4(const float *restrict h, int64_t k, const float *restrict rt, int64_t ldr, int64_t n,
                            float *restrict g, int64_t ldg) {
    const float *h0 = h, *h1 = h + k, *h2 = h + 2 * k, *h3 = h + 3 * k;
    float *g0 = g, *g1 = g + ldg, *g2 = g + 2 * ldg, *g3 = g + 3 * ldg;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        nn_v8 a0 = nn_load8(g0 + j), b0 = nn_load8(g0 + j + 8), a1 = nn_load8(g1 + j), b1 = nn_load8(g1 + j + 8);
        nn_v8 a2 = nn_load8(g2 + j), b2 = nn_load8(g2 + j + 8), a3 = nn_load8(g3 + j), b3 = nn_load8(g3 + j + 8);
        const float *r = rt + j;
        for (int64_t i = 0; i < k; i++, r += ldr) {
            const nn_v8 ra = nn_load8(r), rb = nn_load8(r + 8);
            a0 += h0[i] * ra, b0 += h0[i] * rb, a1 += h1[i] * ra, b1 += h1[i] * rb;
            a2 += h2[i] * ra, b2 += h2[i] * rb, a3 += h3[i] * ra, b3 += h3[i] * rb;
        }
        *(nn_v8 *)(g0 + j) = a0, *(nn_v8 *)(g0 + j + 8) = b0, *(nn_v8 *)(g1 + j) = a1, *(nn_v8 *)(g1 + j + 8) = b1;
        *(nn_v8 *)(g2 + j) = a2, *(nn_v8 *)(g2 + j + 8) = b2, *(nn_v8 *)(g3 + j) = a3, *(nn_v8 *)(g3 + j + 8) = b3;
    }
    if (j < n)
        for (int row = 0; row < 4; row++) nn_rnn_gemv(h + row * k, k, rt + j, ldr, n - j, g + row * ldg + j);
}

/* Batches of at least this many rows take cblas_sgemm for the recurrent product (it packs R^T at every call,
 * which pays only over many rows); fewer run the register-blocked kernels above, reading R^T in place. */
#define NN_RNN_GEMM_ROWS 32

/* g (rows, n; ldg) += h (rows, k; contiguous) @ rt (k, n; ldr) on the register-blocked kernels, any rows */
NN_INLINE void nn_rnn_blocked(const float *h, int64_t rows, int64_t k, const float *rt, int64_t ldr, int64_t n,
                              float *g, int64_t ldg) {
    int64_t b = 0;
    for (; b + 4 <= rows; b += 4) nn_rnn_gemv4(h + b * k, k, rt, ldr, n, g + b * ldg, ldg);
    for (; b < rows; b++) nn_rnn_gemv(h + b * k, k, rt, ldr, n, g + b * ldg);
}

/* g (rows, n; ldg) += h (rows, k; contiguous) @ rt (k, n; ldr) */
NN_INLINE void nn_rnn_product(const float *h, int64_t rows, int64_t k, const float *rt, int64_t ldr, int64_t n,
                              float *g, int64_t ldg) {
    if (rows >= NN_RNN_GEMM_ROWS) {
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)rows, (blasint)n, (blasint)k, 1.0f, h,
                          (blasint)k, rt, (blasint)ldr, 1.0f, g, (blasint)ldg);
        return;
    }
    nn_rnn_blocked(h, rows, k, rt, ldr, n, g, ldg);
}

#include "nn_rnn_row.h"

/* One run's operands: the projection (xw), the caller's arrays and per-direction scratch. */
typedef struct {
    const nn_rnn_params *p;
    int64_t steps, batch;
    const float *x, *h0, *c0;
    const int32_t *lens;                /* clamped to [0, steps] by the binding, or NULL */
    float *y, *yh, *yc;                 /* NULL: not wanted */
    float *xw;                          /* (steps * batch, D * G * H), rows in X's order */
    int32_t projected;                  /* xw came from the caller: no projection here */
    float *scratch;                     /* per direction: h, c, extra (B * H each), gates (B * G * H) */
} nn_rnn_args;

/* xw rows [r0, r1), columns [c0, c1) = X W^T + bias */
static NN_CLONES void nn_rnn_project(const nn_rnn_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const nn_rnn_params *p = a->p;
    const int64_t ld = p->dirs * p->gates * p->hidden;
    if (a->projected || r1 <= r0 || c1 <= c0) return;
    if (r1 - r0 == 1 && p->wt && p->input * ld <= NN_GEMV_MAX) {
        nn_rnn_project_row(p, a->x + r0 * p->input, a->xw + r0 * ld, c0, c1);
        return;
    }
    if (nn_rnn_projects(p, r1 - r0)) {   /* c0, c1: whole directions (the callers below) */
        nn_rnn_project_rows(p, a->x + r0 * p->input, r1 - r0, a->xw + r0 * ld, c0, c1);
        return;
    }
    if (r1 - r0 == 1 && p->input * (c1 - c0) <= NN_GEMV_MAX) {
        /* one row (a control-flow body's LSTM step at batch 1): dot products with the rows of W read in place;
         * the BLAS packs W at every call (nn_gemv.h's note) */
        const float *xr = a->x + r0 * p->input;
        float *row = a->xw + r0 * ld;
        for (int64_t j = c0; j < c1; j++) {
            const float *wj = p->w + j * p->input;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < p->input; i++) s += xr[i] * wj[i];
            row[j] = s + p->bias[j];
        }
        return;
    }
    float *out = a->xw + r0 * ld + c0;
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(r1 - r0), (blasint)(c1 - c0),
                      (blasint)p->input, 1.0f, a->x + r0 * p->input, (blasint)p->input, p->w + c0 * p->input,
                      (blasint)p->input, 0.0f, out, (blasint)ld);
    for (int64_t r = 0; r < r1 - r0; r++) {
        float *row = out + r * ld;
        const float *bias = p->bias + c0;
#pragma omp simd
        for (int64_t j = 0; j < c1 - c0; j++) row[j] += bias[j];
    }
}

/* the offset of state row (d, b) of a (D, B, H) or, layout 1, (B, D, H) array */
NN_INLINE int64_t nn_rnn_state_at(const nn_rnn_params *p, int64_t batch, int64_t d, int64_t b) {
    return (p->layout ? b * p->dirs + d : d * batch + b) * p->hidden;
}

/* LSTM gate math of one batch row: g (4H: i, o, f, c pre-activations) -> h, c in place */
NN_INLINE void nn_lstm_row(const nn_rnn_params *p, const nn_ract *act, const float *peep, float *restrict g,
                           float *restrict h, float *restrict c) {
    const int64_t n = p->hidden;
    float *gi = g, *go = g + n, *gf = g + 2 * n, *gc = g + 3 * n;
    if (peep) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) gi[j] += peep[j] * c[j], gf[j] += peep[2 * n + j] * c[j];
    }
    nn_ract_apply(gi, n, &act[0], p->clip);
    if (p->coupled) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) gf[j] = 1.0f - gi[j];
    } else {
        nn_ract_apply(gf, n, &act[0], p->clip);
    }
    nn_ract_apply(gc, n, &act[1], p->clip);
#pragma omp simd
    for (int64_t j = 0; j < n; j++) c[j] = gf[j] * c[j] + gi[j] * gc[j];
    if (peep) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) go[j] += peep[n + j] * c[j];
    }
    nn_ract_apply(go, n, &act[0], p->clip);
    memcpy(gc, c, (size_t)n * sizeof(float));
    nn_ract_apply(gc, n, &act[2], INFINITY);     /* NOTE: as onnxruntime, clip bounds the gates, not c */
#pragma omp simd
    for (int64_t j = 0; j < n; j++) h[j] = go[j] * gc[j];
}

/* GRU gate math of one batch row: g (3H: z, r, h pre-activations; with linear_before_reset, g's h part is
 * the input's only and rh = h_{t-1} R_h^T + Rb_h) -> h in place. Without it, z and r are already activated
 * and g's h part complete (the caller needed r for the product). */
NN_INLINE void nn_gru_row(const nn_rnn_params *p, const nn_ract *act, float *restrict g, const float *restrict rh,
                          float *restrict h) {
    const int64_t n = p->hidden;
    float *gz = g, *gr = g + n, *gh = g + 2 * n;
    if (p->linear) {
        nn_ract_apply(gz, 2 * n, &act[0], p->clip);
#pragma omp simd
        for (int64_t j = 0; j < n; j++) gh[j] += gr[j] * rh[j];
    }
    nn_ract_apply(gh, n, &act[1], p->clip);
#pragma omp simd
    for (int64_t j = 0; j < n; j++) h[j] = gh[j] + gz[j] * (h[j] - gh[j]);
}

/* All the time steps of direction d. */
static NN_CLONES void nn_rnn_direction(const nn_rnn_args *a, int64_t d) {
    const nn_rnn_params *p = a->p;
    const int64_t n = p->hidden, B = a->batch, T = a->steps, gn = p->gates * n, ld = p->dirs * gn;
    const nn_ract *act = p->act[d];
    const int reverse = d == 1 || p->reverse;
    const float *rt = p->rt + d * n * gn, *peep = p->peep ? p->peep + d * 3 * n : NULL;
    float *h = a->scratch + d * B * (3 * n + gn), *c = h + B * n, *extra = c + B * n, *g = extra + B * n;
    for (int64_t b = 0; b < B; b++) {
        const int64_t at = nn_rnn_state_at(p, B, d, b);
        if (a->h0) memcpy(h + b * n, a->h0 + at, (size_t)n * sizeof(float));
        else memset(h + b * n, 0, (size_t)n * sizeof(float));
        if (a->c0) memcpy(c + b * n, a->c0 + at, (size_t)n * sizeof(float));
        else memset(c + b * n, 0, (size_t)n * sizeof(float));
    }
    for (int64_t s = 0; s < T; s++) {
        const int64_t t = reverse ? T - 1 - s : s;
        for (int64_t b = 0; b < B; b++) {
            const int64_t row = p->layout ? b * T + t : t * B + b;
            memcpy(g + b * gn, a->xw + row * ld + d * gn, (size_t)gn * sizeof(float));
        }
        if (p->cell != NN_CELL_GRU) {
            nn_rnn_product(h, B, n, rt, gn, gn, g, gn);
        } else if (p->linear) {
            nn_rnn_product(h, B, n, rt, gn, 2 * n, g, gn);
            for (int64_t b = 0; b < B; b++) memcpy(extra + b * n, p->rbh + d * n, (size_t)n * sizeof(float));
            nn_rnn_product(h, B, n, rt + 2 * n, gn, n, extra, n);
        } else {
            nn_rnn_product(h, B, n, rt, gn, 2 * n, g, gn);
            for (int64_t b = 0; b < B; b++) {
                float *gz = g + b * gn, *rh = extra + b * n;
                const float *hb = h + b * n;
                nn_ract_apply(gz, 2 * n, &act[0], p->clip);
#pragma omp simd
                for (int64_t j = 0; j < n; j++) rh[j] = gz[n + j] * hb[j];
            }
            nn_rnn_product(extra, B, n, rt + 2 * n, gn, n, g + 2 * n, gn);
        }
        for (int64_t b = 0; b < B; b++) {
            float *yt = a->y ? a->y + (p->layout ? (b * T + t) * p->dirs + d : (t * p->dirs + d) * B + b) * n : NULL;
            if (a->lens && t >= a->lens[b]) {
                if (yt) memset(yt, 0, (size_t)n * sizeof(float));
                continue;
            }
            float *hb = h + b * n, *gb = g + b * gn;
            if (p->cell == NN_CELL_LSTM) {
                nn_lstm_row(p, act, peep, gb, hb, c + b * n);
            } else if (p->cell == NN_CELL_GRU) {
                nn_gru_row(p, act, gb, extra + b * n, hb);
            } else {
                nn_ract_apply(gb, n, &act[0], p->clip);
                memcpy(hb, gb, (size_t)n * sizeof(float));
            }
            if (yt) memcpy(yt, hb, (size_t)n * sizeof(float));
        }
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t at = nn_rnn_state_at(p, B, d, b);
        if (a->yh) memcpy(a->yh + at, h + b * n, (size_t)n * sizeof(float));
        if (a->yc) memcpy(a->yc + at, c + b * n, (size_t)n * sizeof(float));
    }
}

/* Two directions on two parts: each projects its own columns, then runs its steps. */
static void nn_rnn_dir_task(const void *args, int64_t part, int64_t parts) {
    (void)parts;
    const nn_rnn_args *a = (const nn_rnn_args *)args;
    const int64_t gn = a->p->gates * a->p->hidden;
    nn_rnn_project(a, 0, a->steps * a->batch, part * gn, (part + 1) * gn);
    nn_rnn_direction(a, part);
}

/* One direction: the projection split by rows over the parts (the steps then run on the caller). */
static void nn_rnn_rows_task(const void *args, int64_t part, int64_t parts) {
    const nn_rnn_args *a = (const nn_rnn_args *)args;
    int64_t lo, hi;
    nn_split(a->steps * a->batch, 1, part, parts, &lo, &hi);
    nn_rnn_project(a, lo, hi, 0, a->p->dirs * a->p->gates * a->p->hidden);
}

/* The whole layer: both directions as two parts when parts >= 2, else the projection split and the steps in turn. */
static void nn_rnn_run(const nn_rnn_args *a, int64_t parts) {
    if (a->p->dirs == 2 && parts >= 2) {
        nn_pool_run(nn_rnn_dir_task, a, 2);
        return;
    }
    if (!a->projected) nn_pool_run(nn_rnn_rows_task, a, parts);
    for (int64_t d = 0; d < a->p->dirs; d++) nn_rnn_direction(a, d);
}



/* ================================================================================================
 * The Python binding: argument checks (nn_buffer.h), the GIL released around every loop.
 * ================================================================================================ */

#define NN_BLAS_MAX INT32_MAX     /* scipy-openblas32's blasint: 32-bit sizes and leading dimensions */

/* ---- Act: an activation kind and its parameters, made once at prepare */
typedef struct {
    PyObject_HEAD
    nn_act act;
} nn_act_object;

static PyTypeObject nn_act_type;

static PyObject *nn_act_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *kind_obj = NULL;
    int64_t kind = 0;
    float lo = -INFINITY, hi = INFINITY, alpha = 0.2f, beta = 0.5f;
    static char *names[] = {"kind", "lo", "hi", "alpha", "beta", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Offff:Act", names, &kind_obj, &lo, &hi, &alpha, &beta))
        return NULL;
    if (kind_obj != NULL && nn_int(kind_obj, "Act", "kind", NN_ACT_NONE, NN_ACT_TANH, &kind)) return NULL;
    nn_act_object *self = (nn_act_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->act = (nn_act){(int32_t)kind, lo, hi, alpha, beta};
    return (PyObject *)self;
}

static PyObject *nn_act_repr(nn_act_object *self) {
    char text[160];
    PyOS_snprintf(text, sizeof text, "Act(kind=%d, lo=%g, hi=%g, alpha=%g, beta=%g)", self->act.kind,
                  (double)self->act.lo, (double)self->act.hi, (double)self->act.alpha, (double)self->act.beta);
    return PyUnicode_FromString(text);
}

static PyObject *nn_act_kind(nn_act_object *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->act.kind);
}

static PyGetSetDef nn_act_getset[] = {{"kind", (getter)nn_act_kind, NULL, "the activation kind", NULL}, {NULL}};

static PyTypeObject nn_act_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Act",
    .tp_doc = "Act(kind=0, lo=-inf, hi=inf, alpha=0.2, beta=0.5): a fused activation (kinds as numbered in "
              "kernels.c: 0 none, 1 relu, 2 clip, 3 hardsigmoid, 4 hardswish, 5 sigmoid, 6 silu, 7 gelu, "
              "8 gelu_tanh, 9 tanh)",
    .tp_basicsize = sizeof(nn_act_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_act_new,
    .tp_repr = (reprfunc)nn_act_repr,
    .tp_getset = nn_act_getset,
};

/* The nn_act of an Act argument; NULL with TypeError otherwise. */
static const nn_act *nn_get_act(PyObject *obj, const char *kernel) {
    if (!PyObject_TypeCheck(obj, &nn_act_type)) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: argument 'act' must be an Act, not %.100s", kernel,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return &((nn_act_object *)obj)->act;
}

/* parts for the pool: 1 .. NN_MAX_WORKERS + 1 */
static int nn_get_parts(PyObject *obj, const char *kernel, int64_t *parts) {
    return nn_int(obj, kernel, "parts", 1, 1 << 16, parts);     /* more parts than threads run inline */
}

/* x (float32, at least one axis) as rows of its last axis: *width is that axis's length; -1 with the
 * typed error set otherwise (Softmax, LayerNormalization, channel_affine). */
static int nn_get_rows(nn_arg *b, PyObject *obj, const char *kernel, int64_t *width) {
    if (nn_get(b, obj, kernel, "x", NN_F32, 0)) return -1;
    if (b->view.ndim < 1) {
        nn_value_error(kernel, "x", "must have at least one axis");
        return -1;
    }
    *width = b->view.shape[b->view.ndim - 1];
    return 0;
}


/* ---- activation(x, y, act, parts): y = act(x), y may be x */
static PyObject *nn_py_activation(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "activation";
    nn_arg b[2];
    int64_t parts;
    const nn_act *act;
    if (nn_nargs(nargs, 4, k) || (act = nn_get_act(args[2], k)) == NULL || nn_get_parts(args[3], k, &parts)) return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0)) return NULL;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1))
        goto fail;
    nn_act_args a = {b[0].view.buf, b[1].view.buf, b[0].items, act};
    Py_BEGIN_ALLOW_THREADS
    if (parts > 1)
        nn_pool_run(nn_act_task, &a, parts);
    else
        nn_activation_f32(a.x, a.y, a.len, act);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- channel_affine(x, y, scale, shift, act, parts): y = act(x * scale + shift), scale and shift over the last
 * axis of x; y (x's size) may be x */
static PyObject *nn_py_channel_affine(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "channel_affine";
    nn_arg b[4] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts;
    const nn_act *act;
    if (nn_nargs(nargs, 6, k) || (act = nn_get_act(args[4], k)) == NULL || nn_get_parts(args[5], k, &parts))
        return NULL;
    int64_t c;
    if (nn_get_rows(&b[0], args[0], k, &c)) goto fail;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_get(&b[2], args[2], k, "scale", NN_F32, 0) || nn_need(&b[2], k, "scale", c) ||
        nn_get(&b[3], args[3], k, "shift", NN_F32, 0) || nn_need(&b[3], k, "shift", c) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1) || nn_disjoint(&b[1], &b[2], k, "y", "scale", 0) ||
        nn_disjoint(&b[1], &b[3], k, "y", "shift", 0))
        goto fail;
    nn_affine_args a = {b[0].view.buf, b[1].view.buf, b[2].view.buf, b[3].view.buf, c ? b[0].items / c : 0, c, act};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_affine_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 4, 1);
fail:
    return nn_finish(b, 4, 0);
}

/* ---- transpose_blocks(x, y, outer, a, b, inner, parts): y (outer, b, a, inner) from x (outer, a, b, inner), any
 * 4-byte element type, both C-contiguous */
static PyObject *nn_py_transpose_blocks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "transpose_blocks";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t g[4], parts;
    if (nn_nargs(nargs, 7, k) || nn_int(args[2], k, "outer", 0, INT32_MAX, &g[0]) ||
        nn_int(args[3], k, "a", 0, INT32_MAX, &g[1]) || nn_int(args[4], k, "b", 0, INT32_MAX, &g[2]) ||
        nn_int(args[5], k, "inner", 1, INT32_MAX, &g[3]) || nn_get_parts(args[6], k, &parts))
        return NULL;
    const int64_t items = nn_mul(4, g);
    if (nn_get(&b[0], args[0], k, "x", NN_ANY32, 0) || nn_need(&b[0], k, "x", items) ||
        nn_get(&b[1], args[1], k, "y", NN_ANY32, NN_OUT) || nn_need(&b[1], k, "y", items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    nn_transpose_args t = {b[0].view.buf, b[1].view.buf, g[0], g[1], g[2], g[3]};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_transpose_task, &t, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- resize_nhwc(x, y, hidx, hw, widx, ww, parts): x (n, h, w, c), y (n, oh, ow, c), C-contiguous or evenly
 * spaced pixels (a channel slice of a wider channels-last tensor, nn_get_pixels); hidx / hw (oh, th) and
 * widx / ww (ow, tw): int32 source rows / columns and their float32 weights, 1 <= th, tw <= 64 */
static int nn_resize_taps(nn_arg *idx, nn_arg *wts, int64_t out, int64_t limit, const char *k, const char *iname,
                   const char *wname, int64_t *taps) {
    if (nn_ndim(idx, k, iname, 2) || nn_ndim(wts, k, wname, 2)) return -1;
    if (idx->view.shape[0] != out || wts->view.shape[0] != out || wts->view.shape[1] != idx->view.shape[1]) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: arguments '%s' and '%s' must both be (%lld, taps)", k, iname,
                     wname, (long long)out);
        return -1;
    }
    *taps = idx->view.shape[1];
    if (*taps < 1 || *taps > 64) return nn_value_error(k, iname, "must have 1 to 64 taps per output");
    const int32_t *v = idx->view.buf;
    for (int64_t i = 0; i < idx->items; i++)
        if (v[i] < 0 || v[i] >= limit) return nn_value_error(k, iname, "has an index outside the image");
    return 0;
}

/* resize_nhwc (y (n, oh, ow, c)) and resize_to_nchw (y (n, c, oh, ow)): one argument check, two tasks */
static PyObject *nn_resize_entry(PyObject *const *args, Py_ssize_t nargs, const char *k, int nchw) {
    nn_arg b[6] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts, th, tw, round_half = 0, ldy = 0;
    if (nn_nargs(nargs, nchw ? 8 : 7, k) || nn_get_parts(args[6], k, &parts) ||
        (nchw && nn_int(args[7], k, "round_half", 0, NN_HAVE_F16, &round_half)))
        return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_ndim(&b[0], k, "x", 4) ||
        nn_get(&b[1], args[1], k, "y", NN_F32, nchw ? NN_OUT : NN_OUT | NN_STRIDED) || nn_ndim(&b[1], k, "y", 4) ||
        nn_get(&b[2], args[2], k, "hidx", NN_I32, 0) || nn_get(&b[3], args[3], k, "hw", NN_F32, 0) ||
        nn_get(&b[4], args[4], k, "widx", NN_I32, 0) || nn_get(&b[5], args[5], k, "ww", NN_F32, 0))
        goto fail;
    const Py_ssize_t *xs = b[0].view.shape, *ys = b[1].view.shape;
    const Py_ssize_t yc = ys[nchw ? 1 : 3], yh = ys[nchw ? 2 : 1], yw = ys[nchw ? 3 : 2];
    if (ys[0] != xs[0] || yc != xs[3]) {
        nn_value_error(k, "y", "must have x's batch and channels");
        goto fail;
    }
    if (nn_resize_taps(&b[2], &b[3], yh, xs[1], k, "hidx", "hw", &th) ||
        nn_resize_taps(&b[4], &b[5], yw, xs[2], k, "widx", "ww", &tw))
        goto fail;
    if (!nchw && nn_pixels(&b[1], k, "y", ys[0] * yh * yw, yc, &ldy)) goto fail;
    for (int i = 0; i < 6; i++)
        if (i != 1 && nn_disjoint(&b[1], &b[i], k, "y", i == 0 ? "x" : "a tap table", 0)) goto fail;
    int failed = 0;
    nn_resize_args a = {b[0].view.buf, b[1].view.buf, b[2].view.buf, b[4].view.buf, b[3].view.buf, b[5].view.buf,
                        xs[0], xs[1], xs[2], xs[3], yh, yw, th, tw, nchw ? xs[3] : ldy, &failed, (int)round_half};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nchw ? nn_resize_nchw_task : nn_resize_task, &a, parts);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto fail;
    }
    return nn_finish(b, 6, 1);
fail:
    return nn_finish(b, 6, 0);
}

static PyObject *nn_py_resize_nhwc(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return nn_resize_entry(args, nargs, "resize_nhwc", 0);
}

static PyObject *nn_py_resize_to_nchw(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return nn_resize_entry(args, nargs, "resize_to_nchw", 1);
}

/* ---- cast_half(x, y): float32 -> float16, float16 -> float32, or float32 -> float32 rounded through float16
 * (the direction from the two dtypes); x and y C-contiguous of the same size, y may be x only when both are
 * float32 */
#if NN_HAVE_F16
/* ``obj`` as a float32 or a float16 array (*half says which); -1 with the exception set otherwise */
static int nn_get_float(nn_arg *a, PyObject *obj, const char *k, const char *name, int flags, int *half) {
    if (nn_get(a, obj, k, name, NN_F32, flags) == 0) {
        *half = 0;
        return 0;
    }
    /* None, a non-array and a layout failure are the same for either dtype: keep that error */
    if (obj == Py_None || !PyObject_CheckBuffer(obj) || !PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
    PyErr_Clear();
    nn_release(a, 1);
    if (nn_get(a, obj, k, name, NN_F16, flags) == 0) {
        *half = 1;
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
    PyErr_Clear();
    nn_release(a, 1);
    return nn_type_error(k, name, "must be float32 or float16");
}
#endif

static PyObject *nn_py_cast_half(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "cast_half";
#if NN_HAVE_F16
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int x_half, y_half;
    if (nn_nargs(nargs, 2, k)) return NULL;
    if (nn_get_float(&b[0], args[0], k, "x", 0, &x_half) || nn_get_float(&b[1], args[1], k, "y", NN_OUT, &y_half))
        goto fail;
    if (x_half && y_half) {
        nn_type_error(k, "y", "must be float32 when x is float16");
        goto fail;
    }
    const int mode = x_half ? 1 : y_half ? 0 : 2;
    if (b[1].items != b[0].items) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: argument 'y' has %lld elements, 'x' has %lld", k,
                     (long long)b[1].items, (long long)b[0].items);
        goto fail;
    }
    if (nn_disjoint(&b[1], &b[0], k, "y", "x", mode == 2)) goto fail;
    Py_BEGIN_ALLOW_THREADS
    nn_cast_half(b[0].view.buf, b[1].view.buf, b[0].items, mode);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
#else
    (void)args;
    (void)nargs;
    PyErr_Format(PyExc_TypeError, "native kernel %s: this build's compiler has no _Float16", k);
    return NULL;
#endif
}

/* ---- add_act(a, b, y, act, i0, i1): y[i] = act(a[i] + b[i]) for i in [i0, i1), y may be a or b */
static PyObject *nn_py_add_act(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "add_act";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t i0, i1;
    const nn_act *act;
    if (nn_nargs(nargs, 6, k) || (act = nn_get_act(args[3], k)) == NULL) return NULL;
    if (nn_get(&b[0], args[0], k, "a", NN_F32, 0) || nn_get(&b[1], args[1], k, "b", NN_F32, 0) ||
        nn_get(&b[2], args[2], k, "y", NN_F32, NN_OUT))
        goto fail;
    if (nn_int(args[4], k, "i0", 0, INT64_MAX, &i0) || nn_int(args[5], k, "i1", i0, INT64_MAX, &i1) ||
        nn_need(&b[0], k, "a", i1) || nn_need(&b[1], k, "b", i1) || nn_need(&b[2], k, "y", i1) ||
        nn_disjoint(&b[2], &b[0], k, "y", "a", 1) || nn_disjoint(&b[2], &b[1], k, "y", "b", 1))
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    nn_add_act_f32(b[0].view.buf, b[1].view.buf, b[2].view.buf, i0, i1, act);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 3, 1);
fail:
    return nn_finish(b, 3, 0);
}

/* ---- fake_quantize_blocks(x, y, block, signed): x and y (m, k), k a multiple of block */
static PyObject *nn_py_fake_quantize(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "fake_quantize_blocks";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t block, is_signed;
    if (nn_nargs(nargs, 4, k) || nn_int(args[2], k, "block", 1, INT32_MAX, &block) ||
        nn_int(args[3], k, "signed", 0, 1, &is_signed))
        return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_ndim(&b[0], k, "x", 2) ||
        nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1))
        goto fail;
    const int64_t m = b[0].view.shape[0], cols = b[0].view.shape[1];
    if (cols % block != 0) {
        nn_value_error(k, "block", "must divide the row length of x");
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    nn_fake_quantize_blocks_f32(b[0].view.buf, b[1].view.buf, m, cols, block, (int32_t)is_signed);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- layernorm(x, y, scale, bias, eps, parts): over the last axis of x, y may be x */
static PyObject *nn_py_layernorm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "layernorm";
    nn_arg b[4] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts;
    if (nn_nargs(nargs, 6, k) || nn_get_parts(args[5], k, &parts)) return NULL;
    const double eps = PyFloat_AsDouble(args[4]);
    if (eps == -1.0 && PyErr_Occurred()) return NULL;
    int64_t width;
    if (nn_get_rows(&b[0], args[0], k, &width)) goto fail;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_get(&b[2], args[2], k, "scale", NN_F32, NN_NONE_OK) || nn_need(&b[2], k, "scale", width) ||
        nn_get(&b[3], args[3], k, "bias", NN_F32, NN_NONE_OK) || nn_need(&b[3], k, "bias", width) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1) || nn_disjoint(&b[1], &b[2], k, "y", "scale", 0) ||
        nn_disjoint(&b[1], &b[3], k, "y", "bias", 0))
        goto fail;
    nn_layernorm_args a = {b[0].view.buf, b[2].view.buf, b[3].view.buf, b[1].view.buf,
                           width ? b[0].items / width : 0, width, (float)eps};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_layernorm_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 4, 1);
fail:
    return nn_finish(b, 4, 0);
}

/* ---- rmsnorm(x, y, scale, eps, parts): over the last axis of x, y may be x, scale None or of the last axis */
static PyObject *nn_py_rmsnorm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "rmsnorm";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts;
    if (nn_nargs(nargs, 5, k) || nn_get_parts(args[4], k, &parts)) return NULL;
    const double eps = PyFloat_AsDouble(args[3]);
    if (eps == -1.0 && PyErr_Occurred()) return NULL;
    int64_t width;
    if (nn_get_rows(&b[0], args[0], k, &width)) goto fail;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", b[0].items) ||
        nn_get(&b[2], args[2], k, "scale", NN_F32, NN_NONE_OK) || nn_need(&b[2], k, "scale", width) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 1) || nn_disjoint(&b[1], &b[2], k, "y", "scale", 0))
        goto fail;
    nn_rmsnorm_args a = {b[0].view.buf, b[2].view.buf, b[1].view.buf, width ? b[0].items / width : 0, width,
                         (float)eps};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_rmsnorm_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 3, 1);
fail:
    return nn_finish(b, 3, 0);
}

/* ---- rotary(x, cos, sin, y, mid, inner, parts): x (rows, width) rows (outer, mid, inner), cos and sin of
 * outer * inner rows of width, y of x's size (not x) */
static PyObject *nn_py_rotary(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "rotary";
    nn_arg b[4] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}};
    int64_t mid, inner, parts;
    if (nn_nargs(nargs, 7, k) || nn_int(args[4], k, "mid", 1, INT64_MAX, &mid) ||
        nn_int(args[5], k, "inner", 1, INT64_MAX, &inner) || nn_get_parts(args[6], k, &parts))
        return NULL;
    int64_t width;
    if (nn_get_rows(&b[0], args[0], k, &width)) goto fail;
    if (width % 2) {
        nn_value_error(k, "x", "must have an even last axis");
        goto fail;
    }
    const int64_t rows = width ? b[0].items / width : 0;
    if (rows % inner || (rows / inner) % mid) {
        nn_value_error(k, "x", "must have a multiple of mid * inner rows");
        goto fail;
    }
    const int64_t table = rows / mid * width;
    if (nn_get(&b[1], args[1], k, "cos", NN_F32, 0) || nn_need(&b[1], k, "cos", table) ||
        nn_get(&b[2], args[2], k, "sin", NN_F32, 0) || nn_need(&b[2], k, "sin", table) ||
        nn_get(&b[3], args[3], k, "y", NN_F32, NN_OUT) || nn_need(&b[3], k, "y", b[0].items) ||
        nn_disjoint(&b[3], &b[0], k, "y", "x", 0) || nn_disjoint(&b[3], &b[1], k, "y", "cos", 0) ||
        nn_disjoint(&b[3], &b[2], k, "y", "sin", 0))
        goto fail;
    nn_rotary_args a = {b[0].view.buf, b[1].view.buf, b[2].view.buf, b[3].view.buf, rows, width, mid, inner};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_rotary_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 4, 1);
fail:
    return nn_finish(b, 4, 0);
}

/* ---- global_pool(x, y, kind, parts): x (n, h, w, c), y n * c elements; kind 0 max, 1 average */
static PyObject *nn_py_global_pool(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "global_pool";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t kind, parts;
    if (nn_nargs(nargs, 4, k) || nn_int(args[2], k, "kind", NN_POOL_MAX, NN_POOL_AVG, &kind) ||
        nn_get_parts(args[3], k, &parts))
        return NULL;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_ndim(&b[0], k, "x", 4)) goto fail;
    const Py_ssize_t *s = b[0].view.shape;
    if (nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT) || nn_need(&b[1], k, "y", (int64_t)s[0] * s[3]) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    const int64_t units = (int64_t)s[0] * (((int64_t)s[3] + NN_POOL_BLOCK - 1) / NN_POOL_BLOCK);
    nn_pool_args a = {b[0].view.buf, b[1].view.buf, NULL, 0, units, (int64_t)s[1] * s[2], s[3], (int32_t)kind};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_pool_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- gather_last(x, y, idx, r0, r1) and shuffle_last(x, y, groups, r0, r1): 4-byte elements, rows of the
 * last axis; x and y C-contiguous with the same leading axes. */
static int nn_rows_of(nn_arg *b, PyObject *const *args, const char *k, int64_t *rows, int64_t *in_row,
                      int64_t *out_row) {
    if (nn_get(&b[0], args[0], k, "x", NN_ANY32, 0) || nn_get(&b[1], args[1], k, "y", NN_ANY32, NN_OUT) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        return -1;
    if (b[0].view.ndim < 1 || b[1].view.ndim < 1) return nn_value_error(k, "x", "must have at least one axis");
    *in_row = b[0].view.shape[b[0].view.ndim - 1];
    *out_row = b[1].view.shape[b[1].view.ndim - 1];
    *rows = *in_row ? b[0].items / *in_row : 0;
    if (*rows != (*out_row ? b[1].items / *out_row : 0))
        return nn_value_error(k, "y", "must have the leading axes of x");
    return 0;
}

static int nn_row_range(PyObject *const *args, const char *k, int64_t rows, int64_t *r0, int64_t *r1) {
    if (nn_int(args[3], k, "r0", 0, rows, r0) || nn_int(args[4], k, "r1", *r0, rows, r1)) return -1;
    return 0;
}

static PyObject *nn_py_gather_last(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "gather_last";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t rows, in_row, out_row, ldy, r0, r1;
    if (nn_nargs(nargs, 5, k)) return NULL;
    /* y: C-contiguous, or evenly spaced pixels of out_row elements (nn_get_pixels) */
    if (nn_get(&b[0], args[0], k, "x", NN_ANY32, 0) || nn_get(&b[2], args[2], k, "idx", NN_I32, 0)) goto fail;
    if (b[0].view.ndim < 1) {
        nn_value_error(k, "x", "must have at least one axis");
        goto fail;
    }
    in_row = b[0].view.shape[b[0].view.ndim - 1];
    rows = in_row ? b[0].items / in_row : 0;
    out_row = b[2].items;
    if (nn_get_pixels(&b[1], args[1], k, "y", NN_ANY32, NN_OUT, rows, out_row, &ldy) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0) || nn_row_range(args, k, rows, &r0, &r1))
        goto fail;
    const int32_t *idx = b[2].view.buf;
    for (int64_t i = 0; i < b[2].items; i++)
        if (idx[i] < 0 || idx[i] >= in_row) {
            nn_value_error(k, "idx", "has an index outside x's last axis");
            goto fail;
        }
    Py_BEGIN_ALLOW_THREADS
    nn_gather_last_b32(b[0].view.buf, b[1].view.buf, idx, out_row, in_row, ldy, r0, r1);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 3, 1);
fail:
    return nn_finish(b, 3, 0);
}

static PyObject *nn_py_shuffle_last(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "shuffle_last";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t rows, in_row, out_row, groups, r0, r1;
    if (nn_nargs(nargs, 5, k)) return NULL;
    if (nn_rows_of(b, args, k, &rows, &in_row, &out_row) || nn_int(args[2], k, "groups", 1, INT32_MAX, &groups) ||
        nn_row_range(args, k, rows, &r0, &r1))
        goto fail;
    if (in_row != out_row || in_row % groups != 0) {
        nn_value_error(k, "groups", "must divide the last axis, of one length in x and y");
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    nn_shuffle_last_b32(b[0].view.buf, b[1].view.buf, groups, in_row / groups, r0, r1);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- GEMMs through the linked BLAS. A matrix argument is a strided view with unit column stride (b may be
 * the transpose: unit row stride); ld is its row stride in elements. */
static int nn_matrix(const nn_arg *m, int trans_ok, const char *k, const char *name, int64_t *ld, int *trans) {
    const Py_ssize_t rows = m->view.shape[m->view.ndim - 2], cols = m->view.shape[m->view.ndim - 1];
    const Py_ssize_t sr = m->view.strides[m->view.ndim - 2], sc = m->view.strides[m->view.ndim - 1];
    if (cols <= 1 || sc == 4) {                 /* row major: rows sr / 4 elements apart */
        *trans = 0;
        *ld = rows > 1 ? sr / 4 : (cols > 1 ? cols : 1);
        if (rows > 1 && (sr % 4 != 0 || *ld < cols)) return nn_value_error(k, name, "has rows that overlap");
    } else if (trans_ok && (rows <= 1 || sr == 4)) {  /* column major: read transposed */
        *trans = 1;
        *ld = sc / 4;
        if (sc % 4 != 0 || *ld < rows) return nn_value_error(k, name, "has columns that overlap");
    } else {
        return nn_value_error(k, name, "must have a unit stride along one of its last two axes");
    }
    if (*ld < 1) *ld = 1;
    if (rows > NN_BLAS_MAX || cols > NN_BLAS_MAX || *ld > NN_BLAS_MAX)
        return nn_value_error(k, name, "is too large for the 32-bit BLAS");
    return 0;
}

/* nn_get for a matrix argument: strides allowed (the last axis' unit stride is checked by nn_matrix, which
 * also accepts b transposed), ``ndim`` axes */
static int nn_get_matrix(nn_arg *a, PyObject *obj, const char *k, const char *name, int flags, int ndim) {
    a->held = 0;
    if (obj == Py_None) return nn_type_error(k, name, "must be an array, not None");
    if (!PyObject_CheckBuffer(obj)) return nn_type_error(k, name, "must be an array (buffer protocol)");
    int request = PyBUF_FORMAT | PyBUF_STRIDES | ((flags & NN_OUT) ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &a->view, request) != 0) {
        PyErr_Clear();
        return nn_value_error(k, name, (flags & NN_OUT) ? "must be a writable array" : "must be an array");
    }
    a->held = 1;
    if (!nn_format_is(a->view.format, a->view.itemsize, NN_F32)) return nn_type_error(k, name, "must be float32");
    if (nn_ndim(a, k, name, ndim)) return -1;
    Py_ssize_t span = 4;
    a->items = 1;
    for (int d = 0; d < ndim; d++) {
        const Py_ssize_t n = a->view.shape[d], s = a->view.strides[d];
        a->items *= n;
        if (s < 0 || (s == 0 && n > 1 && d >= ndim - 2)) return nn_value_error(k, name, "must not have negative or zero strides");
        span += n ? (n - 1) * s : 0;
    }
    a->lo = a->view.buf;
    a->hi = a->items ? a->lo + span : a->lo;
    return 0;
}

/* The operands a GEMM keeps: b (k, n), read transposed when tb, its bias (n,) or NULL, its activation. */
typedef struct {
    nn_arg b, bias;
    int64_t ldb;
    int tb;
    nn_act act;
    float *packed;      /* b packed for GEMVs (Gemm's pack=True; owned, freed with the Gemm), or NULL */
} nn_gemm_operands;

/* Take b and bias into ``o``; -1 otherwise (the caller releases o->b and o->bias). */
static int nn_gemm_take(nn_gemm_operands *o, PyObject *b, PyObject *bias, const char *k) {
    o->bias.held = 0;
    if (nn_get_matrix(&o->b, b, k, "b", 0, 2) || nn_matrix(&o->b, 1, k, "b", &o->ldb, &o->tb) ||
        nn_get(&o->bias, bias, k, "bias", NN_F32, NN_NONE_OK) || nn_need(&o->bias, k, "bias", o->b.view.shape[1]))
        return -1;
    if (o->b.view.shape[0] == 0) return nn_value_error(k, "b", "must have a non-empty inner dimension");
    return 0;
}

/* c = act(a @ b + bias) for the kept operands, split into parts by rows of c (multiples of row_align) or by
 * columns (args: a, c, parts, row_align, by_cols) */
static PyObject *nn_gemm_call(const nn_gemm_operands *o, PyObject *const *args, const char *k) {
    nn_arg v[2] = {{.held = 0}, {.held = 0}};
    int64_t parts, row_align, by_cols, lda, ldc;
    int ta, tc;
    if (nn_get_parts(args[2], k, &parts) || nn_int(args[3], k, "row_align", 1, INT32_MAX, &row_align) ||
        nn_int(args[4], k, "by_cols", 0, 1, &by_cols))
        return NULL;
    if (nn_get_matrix(&v[0], args[0], k, "a", 0, 2) || nn_get_matrix(&v[1], args[1], k, "c", NN_OUT, 2) ||
        nn_matrix(&v[0], 0, k, "a", &lda, &ta) || nn_matrix(&v[1], 0, k, "c", &ldc, &tc))
        goto fail;
    const int64_t m = v[0].view.shape[0], kk = v[0].view.shape[1], n = o->b.view.shape[1];
    if (o->b.view.shape[0] != kk || v[1].view.shape[0] != m || v[1].view.shape[1] != n) {
        nn_value_error(k, "c", "must be (m, n) for a (m, k) and b (k, n)");
        goto fail;
    }
    if (nn_disjoint(&v[1], &v[0], k, "c", "a", 0) || nn_disjoint(&v[1], &o->b, k, "c", "b", 0) ||
        nn_disjoint(&v[1], &o->bias, k, "c", "bias", 0))
        goto fail;
    nn_gemm_args g = {v[0].view.buf, o->b.view.buf, v[1].view.buf, o->bias.view.buf, m, n, kk, lda, o->ldb, ldc,
                      row_align, o->tb, (int32_t)by_cols, o->act, o->packed};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_gemm_task, &g, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(v, 2, 1);
fail:
    return nn_finish(v, 2, 0);
}

/* gemm(a, b, c, bias, act, parts, row_align, by_cols): c = act(a @ b + bias), every operand given now */
static PyObject *nn_py_gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "gemm";
    const nn_act *act;
    if (nn_nargs(nargs, 8, k) || (act = nn_get_act(args[4], k)) == NULL) return NULL;
    nn_gemm_operands o = {.act = *act};
    PyObject *rest[5] = {args[0], args[2], args[5], args[6], args[7]};
    PyObject *result = nn_gemm_take(&o, args[1], args[3], k) ? NULL : nn_gemm_call(&o, rest, k);
    nn_release(&o.b, 1);
    nn_release(&o.bias, 1);
    return result;
}

/* ---- Gemm: a prepared GEMM (constant b, its bias and activation), made once at prepare */
typedef struct {
    PyObject_HEAD
    nn_gemm_operands o;
} nn_gemm_object;

static void nn_gemm_dealloc(nn_gemm_object *self) {
    PyMem_RawFree(self->o.packed);
    nn_release(&self->o.b, 1);
    nn_release(&self->o.bias, 1);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Gemm(b, bias, act[, pack]): b (k, n) float32 with a unit stride along one axis, bias (n,) or None; both
 * held. pack: also keep b packed in panels (nn_gemv_pack) for the runs of at most NN_GEMV_ROWS rows split by
 * columns (a decoder's one-token projections), k * n more floats */
static PyObject *nn_gemm_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *k = "Gemm";
    PyObject *b, *bias, *act_obj;
    int pack = 0;
    if (kwargs && PyDict_GET_SIZE(kwargs)) return PyErr_Format(PyExc_TypeError, "Gemm takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "OOO|p:Gemm", &b, &bias, &act_obj, &pack)) return NULL;
    const nn_act *act = nn_get_act(act_obj, k);
    if (act == NULL) return NULL;
    nn_gemm_object *self = (nn_gemm_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->o.act = *act;
    if (nn_gemm_take(&self->o, b, bias, k)) {
        Py_DECREF(self);
        return NULL;
    }
    if (pack) {
        const int64_t kk = self->o.b.view.shape[0], n = self->o.b.view.shape[1];
        const int64_t panels = (n + NN_PANEL - 1) / NN_PANEL;
        self->o.packed = PyMem_RawMalloc((size_t)(panels * kk * NN_PANEL) * sizeof(float));
        if (self->o.packed == NULL) {
            Py_DECREF(self);
            return PyErr_NoMemory();
        }
        nn_gemv_pack(self->o.b.view.buf, self->o.ldb, self->o.tb, kk, n, self->o.packed);
    }
    return (PyObject *)self;
}

static PyObject *nn_gemm_run(nn_gemm_object *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nn_nargs(nargs, 5, "Gemm.run")) return NULL;
    return nn_gemm_call(&self->o, args, "Gemm.run");
}

static PyMethodDef nn_gemm_methods[] = {
    {"run", (PyCFunction)(void (*)(void))nn_gemm_run, METH_FASTCALL,
     "run(a, c, parts, row_align, by_cols): c = act(a @ b + bias), split by rows (multiples of row_align) or "
     "columns into parts"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject nn_gemm_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Gemm",
    .tp_doc = "Gemm(b, bias, act[, pack]): a prepared GEMM with a constant b, its bias and activation (held, read "
              "only); pack: also a panel-packed copy of b for the GEMVs of 1 or 2 rows split by columns",
    .tp_basicsize = sizeof(nn_gemm_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_gemm_new,
    .tp_dealloc = (destructor)nn_gemm_dealloc,
    .tp_methods = nn_gemm_methods,
};

/* batched_gemm(a, b, c, parts): c[i] = a[i] @ b[i] for a (batch, m, k), b (batch or 1, k, n), c (batch, m, n) */
static PyObject *nn_py_batched_gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "batched_gemm";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts, lda, ldb, ldc;
    int ta, tb, tc;
    if (nn_nargs(nargs, 4, k) || nn_get_parts(args[3], k, &parts)) return NULL;
    if (nn_get_matrix(&b[0], args[0], k, "a", 0, 3) || nn_get_matrix(&b[1], args[1], k, "b", 0, 3) ||
        nn_get_matrix(&b[2], args[2], k, "c", NN_OUT, 3) || nn_matrix(&b[0], 0, k, "a", &lda, &ta) ||
        nn_matrix(&b[1], 1, k, "b", &ldb, &tb) || nn_matrix(&b[2], 0, k, "c", &ldc, &tc))
        goto fail;
    const Py_ssize_t *sa = b[0].view.shape, *sb = b[1].view.shape, *sc = b[2].view.shape;
    if (sb[1] != sa[2] || sc[0] != sa[0] || sc[1] != sa[1] || sc[2] != sb[2] || (sb[0] != sa[0] && sb[0] != 1)) {
        nn_value_error(k, "c", "must be (batch, m, n) for a (batch, m, k) and b (batch or 1, k, n)");
        goto fail;
    }
    if (sa[2] == 0) {
        nn_value_error(k, "a", "must have a non-empty inner dimension");
        goto fail;
    }
    for (int i = 0; i < 3; i++)
        if (b[i].view.strides[0] % 4 != 0) {
            nn_value_error(k, i == 0 ? "a" : i == 1 ? "b" : "c", "must have whole-element strides");
            goto fail;
        }
    if (nn_disjoint(&b[2], &b[0], k, "c", "a", 0) || nn_disjoint(&b[2], &b[1], k, "c", "b", 0)) goto fail;
    nn_bgemm_args g = {{b[0].view.buf, b[1].view.buf, b[2].view.buf, NULL, sa[1], sb[2], sa[2], lda, ldb, ldc, 1, tb,
                        0, {NN_ACT_NONE, 0, 0, 0, 0}},
                       sa[0], b[0].view.strides[0] / 4, sb[0] == 1 ? 0 : b[1].view.strides[0] / 4,
                       b[2].view.strides[0] / 4};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_bgemm_task, &g, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 3, 1);
fail:
    return nn_finish(b, 3, 0);
}

/* ---- Conv: a prepared 2-D convolution, channels last (geometry, packed weights, bias, activation) */
enum { NN_CONV_DEPTHWISE = 0, NN_CONV_GROUPED = 1, NN_CONV_IM2COL = 2, NN_CONV_DIRECT = 3 };

typedef struct {
    PyObject_HEAD
    int kind;
    nn_arg w, bias;             /* held for the object's life */
    int64_t x_items, y_items, scratch_per_part;
    nn_dw_params dw;
    float *dw_pad;              /* depthwise: weights and bias padded to whole vectors (nn_dw_pad) */
    nn_gconv_params gc;
    nn_direct_params dc;
    nn_conv_args im;            /* geometry, weights, bias, activation; x, y, scratch per call */
} nn_conv_object;

static PyTypeObject nn_conv_type;

static void nn_conv_dealloc(nn_conv_object *self) {
    nn_release(&self->w, 1);
    nn_release(&self->bias, 1);
    PyMem_Free(self->dw_pad);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Conv(kind, geometry, weights, bias, act): kind "depthwise" (geometry n, h, w, c, oh, ow, kh, kw, sh, sw, dh,
 * dw, pad_top, pad_left; weights (kh, kw, c)), "grouped" (n, h, w, c, oh, ow, m, kh, kw, sh, sw, dh, dw,
 * pad_top, pad_left, groups, cg, mg; weights (groups, kh, kw, cg, mg), mg a multiple of 8) or "im2col" (n, h, w,
 * c, oh, ow, m, kh, kw, sh, sw, dh, dw, pad_top, pad_left, ld, band_rows; weights (ld, m), ld >= kh * kw * c) or
 * "direct" (n, h, w, c, oh, ow, m, kh, kw, sh, sw, dh, dw, pad_top, pad_left, mp[, layouts]; weights kh * kw * c * mp
 * floats in blocks of 16 columns (nn_direct_tiles.h), mp >= m a multiple of 8; layouts: 1 reads x NCHW (n, c, h, w), 2
 * writes y NCHW (n, m, oh, ow), 3 both, 0 (the default) neither) */
static PyObject *nn_conv_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *k = "Conv";
    const char *kind_name;
    PyObject *geometry, *weights, *bias, *act_obj;
    if (kwargs && PyDict_GET_SIZE(kwargs)) return PyErr_Format(PyExc_TypeError, "Conv takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "sOOOO:Conv", &kind_name, &geometry, &weights, &bias, &act_obj)) return NULL;
    const nn_act *act = nn_get_act(act_obj, k);
    if (act == NULL) return NULL;
    int kind;
    Py_ssize_t count;
    if (strcmp(kind_name, "depthwise") == 0) kind = NN_CONV_DEPTHWISE, count = 14;
    else if (strcmp(kind_name, "grouped") == 0) kind = NN_CONV_GROUPED, count = 18;
    else if (strcmp(kind_name, "im2col") == 0) kind = NN_CONV_IM2COL, count = 17;
    else if (strcmp(kind_name, "direct") == 0)
        kind = NN_CONV_DIRECT, count = PyTuple_Check(geometry) && PyTuple_GET_SIZE(geometry) == 17 ? 17 : 16;
    else return PyErr_Format(PyExc_ValueError, "native kernel Conv: argument 'kind' must be depthwise, grouped, "
                             "im2col or direct, not %s", kind_name);
    int64_t g[18] = {0};
    if (nn_ints(geometry, k, "geometry", count, 0, g)) return NULL;
    /* n, h, w, c, oh, ow, [m,] kh, kw, sh, sw, dh, dw: sizes; strides and dilations at least 1 */
    const int off = kind == NN_CONV_DEPTHWISE ? 0 : 1;
    for (int i = 8 + off; i < 12 + off; i++)
        if (g[i] < 1) return PyErr_Format(PyExc_ValueError, "native kernel Conv: argument 'geometry' has a stride "
                                          "or dilation below 1");
    nn_conv_object *self = (nn_conv_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->kind = kind;
    if (nn_get(&self->w, weights, k, "weights", NN_F32, 0) || nn_get(&self->bias, bias, k, "bias", NN_F32, NN_NONE_OK))
        goto fail;
    const int64_t in_dims[4] = {g[0], g[1], g[2], g[3]};
    self->x_items = nn_mul(4, in_dims);
    if (kind == NN_CONV_DEPTHWISE) {
        self->dw = (nn_dw_params){g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
                                  g[13], *act};
        const int64_t wd[3] = {g[6], g[7], g[3]}, yd[4] = {g[0], g[4], g[5], g[3]};
        self->y_items = nn_mul(4, yd);
        if (nn_need(&self->w, k, "weights", nn_mul(3, wd)) || nn_need(&self->bias, k, "bias", g[3])) goto fail;
        const int64_t padded[3] = {g[6], g[7], nn_dw_cp(g[3]) + 1};   /* nn_dw_pad's taps * cp + cp floats */
        if (nn_mul(3, padded) < 0) {
            nn_value_error(k, "geometry", "has sizes whose product overflows");
            goto fail;
        }
        self->dw_pad = nn_dw_pad(self->w.view.buf, self->bias.view.buf, g[6], g[7], g[3]);
        if (self->dw_pad == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    } else if (kind == NN_CONV_GROUPED) {
        self->gc = (nn_gconv_params){g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
                                     g[13], g[14], g[15], g[16], g[17], *act};
        const int64_t wd[5] = {g[15], g[7], g[8], g[16], g[17]}, yd[4] = {g[0], g[4], g[5], g[6]};
        const int64_t gc[2] = {g[15], g[16]}, gm[2] = {g[15], g[17]}, kt[2] = {g[7], g[8]};
        self->y_items = nn_mul(4, yd);
        if (g[17] % 8 != 0 || nn_mul(2, gc) > g[3] || nn_mul(2, gm) > g[6] || g[3] > NN_GCONV_MAX_C ||
            (uint64_t)nn_mul(2, kt) > NN_GCONV_MAX_TAPS) {
            nn_value_error(k, "geometry", "needs mg a multiple of 8, groups * cg <= c, groups * mg <= m, c <= 4096 "
                           "and kh * kw <= 64");
            goto fail;
        }
        if (nn_need(&self->w, k, "weights", nn_mul(5, wd)) || nn_need(&self->bias, k, "bias", g[6])) goto fail;
    } else if (kind == NN_CONV_DIRECT) {
        const int64_t plane_in = g[1] * g[2], plane_out = g[4] * g[5];
        self->dc = (nn_direct_params){g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
                                      g[13], g[14], g[15], *act, g[16] & 2 ? 1 : g[6], g[16] & 2 ? plane_out : 1,
                                      g[16] & 1 ? 1 : g[3], g[16] & 1 ? plane_in : 1};
        const int64_t wd[4] = {g[7], g[8], g[3], g[15]}, yd[4] = {g[0], g[4], g[5], g[6]};   /* any shape */
        self->y_items = nn_mul(4, yd);
        if (g[15] % 8 != 0 || g[15] < g[6] || g[16] > 3) {
            nn_value_error(k, "geometry", "needs mp >= m and a multiple of 8, and layouts 0 to 3");
            goto fail;
        }
        if (nn_need(&self->w, k, "weights", nn_mul(4, wd)) || nn_need(&self->bias, k, "bias", g[6])) goto fail;
    } else {
        const int64_t kk[3] = {g[7], g[8], g[3]}, wd[2] = {g[15], g[6]}, yd[4] = {g[0], g[4], g[5], g[6]};
        const int64_t band[3] = {g[16], g[5], g[15]}, rows[2] = {g[16], g[5]};
        self->y_items = nn_mul(4, yd);
        self->scratch_per_part = nn_mul(3, band);
        const int64_t taps = nn_mul(3, kk), band_pixels = nn_mul(2, rows);
        if (taps < 0 || g[15] < taps || g[16] < 1 || band_pixels < 0 || band_pixels > NN_BLAS_MAX ||
            self->scratch_per_part < 0) {
            nn_value_error(k, "geometry", "needs ld >= kh * kw * c, band_rows >= 1 and a band within the 32-bit BLAS");
            goto fail;
        }
        if (nn_need(&self->w, k, "weights", nn_mul(2, wd)) || nn_need(&self->bias, k, "bias", g[6])) goto fail;
        self->im = (nn_conv_args){NULL, self->w.view.buf, self->bias.view.buf, NULL, NULL, g[0], g[1], g[2], g[3], g[4],
                                  g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15], g[16], *act,
                                  g[6]};
    }
    if (self->x_items < 0 || self->y_items < 0) {
        nn_value_error(k, "geometry", "has sizes whose product overflows");
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* conv.run(x, y, scratch, parts): the whole convolution of x (n, h, w, c) into y (n, oh, ow, m), split by output
 * rows into parts; scratch (im2col only, else None): parts * band_rows * ow * ld floats. im2col's and direct's
 * y may also be a channel slice of a wider channels-last tensor (evenly spaced pixels, unit stride on channels:
 * nn_get_pixels). */
static PyObject *nn_conv_run(nn_conv_object *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *k = "Conv.run";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t parts;
    if (nn_nargs(nargs, 4, k) || nn_get_parts(args[3], k, &parts)) return NULL;
    const int im2col = self->kind == NN_CONV_IM2COL;
    if (!im2col && args[2] != Py_None) return PyErr_Format(PyExc_ValueError, "native kernel %s: argument 'scratch' "
                                                           "must be None (only im2col takes scratch)", k);
    /* im2col and direct write y through its pixel stride (a channel slice of a wider tensor): their pixels */
    const int direct_nchw = self->kind == NN_CONV_DIRECT && self->dc.ldc != 1;    /* y NCHW: C-contiguous */
    const int64_t pixels = im2col ? self->im.n * self->im.oh * self->im.ow
                           : self->kind == NN_CONV_DIRECT && !direct_nchw ? self->dc.n * self->dc.oh * self->dc.ow : 0;
    const int64_t channels = im2col ? self->im.m : self->dc.m;
    int64_t ldy = 0;
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_need(&b[0], k, "x", self->x_items) ||
        (pixels ? nn_get_pixels(&b[1], args[1], k, "y", NN_F32, NN_OUT, pixels, channels, &ldy)
                : nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT)) ||
        nn_need(&b[1], k, "y", self->y_items) ||
        nn_get(&b[2], args[2], k, "scratch", NN_F32, NN_OUT | (im2col ? 0 : NN_NONE_OK)) ||
        (im2col && nn_need(&b[2], k, "scratch", self->scratch_per_part * parts)) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0) || nn_disjoint(&b[1], &self->w, k, "y", "weights", 0) ||
        nn_disjoint(&b[1], &self->bias, k, "y", "bias", 0) || nn_disjoint(&b[2], &b[0], k, "scratch", "x", 0) ||
        nn_disjoint(&b[2], &b[1], k, "scratch", "y", 0) || nn_disjoint(&b[2], &self->w, k, "scratch", "weights", 0))
        goto fail;
    const float *x = b[0].view.buf, *w = self->w.view.buf, *bias = self->bias.view.buf;
    float *y = b[1].view.buf;
    Py_BEGIN_ALLOW_THREADS
    if (self->kind == NN_CONV_DEPTHWISE) {
        const nn_dw_params *p = &self->dw;
        nn_dw_args a = {x, self->dw_pad, bias ? self->dw_pad + p->kh * p->kw * nn_dw_cp(p->c) : NULL, y, p};
        nn_pool_run(nn_dw_task, &a, parts);
    } else if (self->kind == NN_CONV_GROUPED) {
        nn_gconv_args a = {x, w, bias, y, &self->gc};
        nn_pool_run(nn_gconv_task, &a, parts);
    } else if (self->kind == NN_CONV_DIRECT) {
        nn_direct_params dc = self->dc;     /* this call's pixel stride: the object is shared between runs */
        if (!direct_nchw) dc.ldy = ldy;
        if (dc.ldc == 1 && dc.ldxc == 1) {
            nn_direct_args a = {x, w, bias, y, &dc};
            nn_pool_run(nn_direct_task, &a, parts);
        } else {
            /* a channels-first side: one image a call (the walks' pixel arithmetic spans images channels last); a
             * channels-last y may be a channel slice of a wider tensor: its images are oh * ow pixel strides apart */
            const int64_t n = dc.n, x_image = self->x_items / NN_MAX(1, n);
            const int64_t y_image = dc.ldc == 1 ? dc.oh * dc.ow * dc.ldy : self->y_items / NN_MAX(1, n);
            dc.n = 1;
            for (int64_t i = 0; i < n; i++) {
                nn_direct_args a = {x + i * x_image, w, bias, y + i * y_image, &dc};
                nn_pool_run(nn_direct_task, &a, parts);
            }
        }
    } else {
        nn_conv_args a = self->im;
        a.x = x, a.y = y, a.scratch = b[2].view.buf, a.ldy = ldy;
        nn_pool_run(nn_conv_task, &a, parts);
    }
    Py_END_ALLOW_THREADS
    return nn_finish(b, 3, 1);
fail:
    return nn_finish(b, 3, 0);
}

static PyMethodDef nn_conv_methods[] = {
    {"run", (PyCFunction)(void (*)(void))nn_conv_run, METH_FASTCALL,
     "run(x, y, scratch, parts): the convolution of x into y, split by output rows into parts (scratch: im2col's "
     "columns, parts * band_rows * ow * ld floats; None for the others)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject nn_conv_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Conv",
    .tp_doc = "Conv(kind, geometry, weights, bias, act): a prepared channels-last convolution (kernels.c says "
              "each kind's geometry); weights and bias are held, read only, for the object's life",
    .tp_basicsize = sizeof(nn_conv_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_conv_new,
    .tp_dealloc = (destructor)nn_conv_dealloc,
    .tp_methods = nn_conv_methods,
};

/* ---- Pool2d: a prepared 2-D pooling, channels last */
typedef struct {
    PyObject_HEAD
    nn_pool_params p;
} nn_pool2d_object;

/* Pool2d(geometry, kind): geometry n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom,
 * pad_right; kind 0 max, 1 average over the taps inside the input, 2 average over the padded window */
static PyObject *nn_pool2d_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *k = "Pool2d";
    PyObject *geometry, *kind_obj;
    int64_t kind;
    if (kwargs && PyDict_GET_SIZE(kwargs)) return PyErr_Format(PyExc_TypeError, "Pool2d takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "OO:Pool2d", &geometry, &kind_obj)) return NULL;
    int64_t g[16];
    if (nn_ints(geometry, k, "geometry", 16, 0, g) || nn_int(kind_obj, k, "kind", NN_POOL_MAX, NN_POOL_AVG_PAD, &kind))
        return NULL;
    /* the window's taps live on the stack (one row and one column of offsets) */
    if (g[6] < 1 || g[7] < 1 || g[6] > 4096 || g[7] > 4096 || g[8] < 1 || g[9] < 1 || g[10] < 1 || g[11] < 1)
        return PyErr_Format(PyExc_ValueError, "native kernel Pool2d: argument 'geometry' needs kernel sides in "
                            "[1, 4096] and strides and dilations >= 1");
    const int64_t xd[4] = {g[0], g[1], g[2], g[3]}, yd[4] = {g[0], g[4], g[5], g[3]};
    if (nn_mul(4, xd) < 0 || nn_mul(4, yd) < 0)
        return PyErr_Format(PyExc_ValueError, "native kernel Pool2d: argument 'geometry' overflows");
    nn_pool2d_object *self = (nn_pool2d_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->p = (nn_pool_params){g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
                               g[14], g[15], g[3], (int32_t)kind};
    return (PyObject *)self;
}

/* pool.run(x, y, r0, r1, parts): output rows [r0, r1) of the flattened n * oh, split into parts. x (n, h, w, c)
 * C-contiguous; y (n, oh, ow, c) with contiguous channels and whole pixels between them (a channel slice of a
 * wider tensor is fine) */
static PyObject *nn_pool2d_run(nn_pool2d_object *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *k = "Pool2d.run";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t r0, r1, parts;
    const nn_pool_params *p = &self->p;
    if (nn_nargs(nargs, 5, k) || nn_int(args[2], k, "r0", 0, p->n * p->oh, &r0) ||
        nn_int(args[3], k, "r1", r0, p->n * p->oh, &r1) || nn_get_parts(args[4], k, &parts))
        return NULL;
    const int64_t xd[4] = {p->n, p->h, p->w, p->c};
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_need(&b[0], k, "x", nn_mul(4, xd)) ||
        nn_get(&b[1], args[1], k, "y", NN_F32, NN_OUT | NN_STRIDED) || nn_ndim(&b[1], k, "y", 4) ||
        nn_disjoint(&b[1], &b[0], k, "y", "x", 0))
        goto fail;
    const Py_ssize_t *ys = b[1].view.shape, *st = b[1].view.strides;
    if (ys[0] != p->n || ys[1] != p->oh || ys[2] != p->ow || ys[3] != p->c) {
        nn_value_error(k, "y", "must be (n, oh, ow, c) of the geometry");
        goto fail;
    }
    const int64_t pixel = st[2];
    if (pixel % 4 != 0 || pixel / 4 < p->c || st[1] != pixel * p->ow || st[0] != st[1] * p->oh) {
        nn_value_error(k, "y", "must have contiguous channels and whole pixels between them");
        goto fail;
    }
    nn_pool_params q = *p;
    q.y_stride = pixel / 4;
    nn_pool_args a = {b[0].view.buf, b[1].view.buf, &q, r0, r1 - r0, 0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(nn_pool_task, &a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, 2, 1);
fail:
    return nn_finish(b, 2, 0);
}

static PyMethodDef nn_pool2d_methods[] = {
    {"run", (PyCFunction)(void (*)(void))nn_pool2d_run, METH_FASTCALL,
     "run(x, y, r0, r1, parts): output rows [r0, r1) of the flattened n * oh, split into parts"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject nn_pool2d_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Pool2d",
    .tp_doc = "Pool2d(geometry, kind): a prepared channels-last 2-D MaxPool (kind 0) or AveragePool (1: over the "
              "taps inside the input, 2: over the padded window)",
    .tp_basicsize = sizeof(nn_pool2d_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_pool2d_new,
    .tp_methods = nn_pool2d_methods,
};

/* ---- Recurrent: a prepared LSTM / GRU / RNN layer (weights packed at prepare, held for the object's life) */
typedef struct {
    PyObject_HEAD
    nn_rnn_params p;
    nn_arg w, bias, rt, rbh, peep;
    float *wt, *wp;                     /* owned: p.wt, p.wp */
} nn_rnn_object;

static void nn_rnn_dealloc(nn_rnn_object *self) {
    PyMem_Free(self->wt);
    PyMem_Free(self->wp);
    nn_release(&self->w, 1);
    nn_release(&self->bias, 1);
    nn_release(&self->rt, 1);
    nn_release(&self->rbh, 1);
    nn_release(&self->peep, 1);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* acts: a tuple of directions * functions (kind, alpha, beta) triples into p->act */
static int nn_rnn_acts(nn_rnn_params *p, PyObject *acts, const char *k) {
    const Py_ssize_t per = p->cell == NN_CELL_LSTM ? 3 : p->cell == NN_CELL_GRU ? 2 : 1;
    if (!PyTuple_Check(acts) || PyTuple_GET_SIZE(acts) != per * p->dirs) {
        PyErr_Format(PyExc_TypeError, "native kernel %s: argument 'acts' must be a tuple of %zd (kind, alpha, beta) "
                     "tuples", k, per * p->dirs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < per * p->dirs; i++) {
        PyObject *item = PyTuple_GET_ITEM(acts, i);
        int64_t kind;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) return nn_type_error(k, "acts", "must hold (kind, alpha, beta) tuples");
        if (nn_int(PyTuple_GET_ITEM(item, 0), k, "acts", 0, NN_RA_LAST, &kind)) return -1;
        const double alpha = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 1));
        if (alpha == -1.0 && PyErr_Occurred()) return -1;
        const double beta = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 2));
        if (beta == -1.0 && PyErr_Occurred()) return -1;
        p->act[i / per][i % per] = (nn_ract){(int32_t)kind, (float)alpha, (float)beta};
    }
    return 0;
}

/* y_h, y_c = h0, c0 (zeros when absent): the final states of a layer run over no steps */
static void nn_rnn_states(const nn_rnn_args *a) {
    const size_t bytes = (size_t)a->p->hidden * sizeof(float);
    for (int64_t d = 0; d < a->p->dirs; d++)
        for (int64_t b = 0; b < a->batch; b++) {
            const int64_t at = nn_rnn_state_at(a->p, a->batch, d, b);
            if (a->yh && a->h0) memcpy(a->yh + at, a->h0 + at, bytes);
            else if (a->yh) memset(a->yh + at, 0, bytes);
            if (a->yc && a->c0) memcpy(a->yc + at, a->c0 + at, bytes);
            else if (a->yc) memset(a->yc + at, 0, bytes);
        }
}

/* Recurrent(cell, geometry, w, bias, rt, rbh, peep, acts, clip[, project]): cell "lstm", "gru" or "rnn"; geometry
 * (directions, reverse, input, hidden, layout, linear_before_reset, input_forget); w (D * G * H, I); bias
 * (D * G * H,); rt (D, H, G * H); rbh (D, H) or None (GRU with linear_before_reset only); peep (D, 3 * H) or
 * None (LSTM only); acts per direction f, g, h (LSTM) / f, g (GRU) / f (RNN) as (kind, alpha, beta); clip a
 * float or None; project 0 (the rule of nn_rnn_projects), 1 (a multi-row projection always through the BLAS) or
 * 2 (always on the blocked kernels when W^T was packed). */
static PyObject *nn_rnn_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *k = "Recurrent";
    const char *cell;
    PyObject *geometry, *w, *bias, *rt, *rbh, *peep, *acts, *clip;
    int project = NN_RNN_AUTO;
    if (kwargs && PyDict_GET_SIZE(kwargs)) return PyErr_Format(PyExc_TypeError, "Recurrent takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "sOOOOOOOO|i:Recurrent", &cell, &geometry, &w, &bias, &rt, &rbh, &peep, &acts, &clip,
                          &project))
        return NULL;
    if (project < NN_RNN_AUTO || project > NN_RNN_BLOCKED)
        return PyErr_Format(PyExc_ValueError, "native kernel Recurrent: argument 'project' must be 0, 1 or 2, not %d",
                            project);
    nn_rnn_params p = {0};
    p.project = (int32_t)project;
    if (strcmp(cell, "lstm") == 0) p.cell = NN_CELL_LSTM, p.gates = 4;
    else if (strcmp(cell, "gru") == 0) p.cell = NN_CELL_GRU, p.gates = 3;
    else if (strcmp(cell, "rnn") == 0) p.cell = NN_CELL_RNN, p.gates = 1;
    else return PyErr_Format(PyExc_ValueError, "native kernel Recurrent: argument 'cell' must be lstm, gru or rnn, "
                             "not %s", cell);
    int64_t g[7];
    if (nn_ints(geometry, k, "geometry", 7, 0, g)) return NULL;
    if (g[0] < 1 || g[0] > 2 || g[1] > 1 || g[2] < 1 || g[3] < 1 || g[4] > 1 || g[5] > 1 || g[6] > 1 ||
        (g[5] && p.cell != NN_CELL_GRU) || (g[6] && p.cell != NN_CELL_LSTM))
        return PyErr_Format(PyExc_ValueError, "native kernel Recurrent: argument 'geometry' needs 1 or 2 directions, "
                            "input and hidden sizes >= 1 and flags 0 or 1 (linear_before_reset: GRU, input_forget: LSTM)");
    p.dirs = (int32_t)g[0], p.reverse = (int32_t)g[1], p.input = g[2], p.hidden = g[3], p.layout = (int32_t)g[4];
    p.linear = (int32_t)g[5], p.coupled = (int32_t)g[6];
    const int64_t rows_dims[3] = {p.dirs, p.gates, p.hidden};
    const int64_t rows = nn_mul(3, rows_dims);
    if (rows < 0 || rows > NN_BLAS_MAX || p.input > NN_BLAS_MAX)
        return PyErr_Format(PyExc_ValueError, "native kernel Recurrent: argument 'geometry' is too large for the 32-bit BLAS");
    if (clip == Py_None) {
        p.clip = INFINITY;
    } else {
        const double v = PyFloat_AsDouble(clip);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        if (!(v >= 0.0)) {
            nn_value_error(k, "clip", "must be >= 0 or None");
            return NULL;
        }
        p.clip = (float)v;
    }
    if (nn_rnn_acts(&p, acts, k)) return NULL;
    nn_rnn_object *self = (nn_rnn_object *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    const int64_t wd[2] = {rows, p.input}, rd[3] = {rows, p.hidden, 1}, hd[2] = {p.dirs, p.hidden};
    const int64_t pd[3] = {p.dirs, 3, p.hidden};
    if (nn_get(&self->w, w, k, "w", NN_F32, 0) || nn_need(&self->w, k, "w", nn_mul(2, wd)) ||
        nn_get(&self->bias, bias, k, "bias", NN_F32, 0) || nn_need(&self->bias, k, "bias", rows) ||
        nn_get(&self->rt, rt, k, "rt", NN_F32, 0) || nn_need(&self->rt, k, "rt", nn_mul(3, rd)) ||
        nn_get(&self->rbh, rbh, k, "rbh", NN_F32, NN_NONE_OK) || nn_need(&self->rbh, k, "rbh", nn_mul(2, hd)) ||
        nn_get(&self->peep, peep, k, "peep", NN_F32, NN_NONE_OK) || nn_need(&self->peep, k, "peep", nn_mul(3, pd)))
        goto fail;
    if (p.cell == NN_CELL_GRU && p.linear && self->rbh.view.buf == NULL) {
        nn_type_error(k, "rbh", "must be an array for a GRU with linear_before_reset");
        goto fail;
    }
    if ((self->rbh.view.buf != NULL && !(p.cell == NN_CELL_GRU && p.linear)) ||
        (self->peep.view.buf != NULL && p.cell != NN_CELL_LSTM)) {
        nn_value_error(k, self->peep.view.buf != NULL ? "peep" : "rbh", "must be None for this cell");
        goto fail;
    }
    p.w = self->w.view.buf, p.bias = self->bias.view.buf, p.rt = self->rt.view.buf;
    p.rbh = self->rbh.view.buf, p.peep = self->peep.view.buf;
    if (nn_rnn_pack_wt(&p, &self->wt, &self->wp)) goto fail;
    self->p = p;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* recurrent.run(x, xw, y, y_h, y_c, h0, c0, lens, parts): every step of every direction of x (T, B, I), or (B, T,
 * I) with layout 1, into y, y_h, y_c (each None when not wanted; y_c LSTM only); xw the caller's projection
 * X W^T + bias (T * B, D * G * H) in X's row order, or None (projected here through the linked BLAS); h0, c0 the
 * initial states or None (zeros; c0 LSTM only), lens int32 (B,) or None (every step). */
static PyObject *nn_rnn_run_py(nn_rnn_object *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *k = "Recurrent.run";
    const nn_rnn_params *p = &self->p;
    nn_arg b[8] = {{.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0}, {.held = 0},
                   {.held = 0}};
    const char *names[8] = {"x", "xw", "y", "y_h", "y_c", "h0", "c0", "lens"};
    int64_t parts;
    float *work = NULL;
    if (nn_nargs(nargs, 9, k) || nn_get_parts(args[8], k, &parts)) return NULL;
    if (p->cell != NN_CELL_LSTM && (args[4] != Py_None || args[6] != Py_None))
        return PyErr_Format(PyExc_ValueError, "native kernel %s: arguments 'y_c' and 'c0' must be None for a GRU or "
                            "RNN", k);
    if (nn_get(&b[0], args[0], k, "x", NN_F32, 0) || nn_ndim(&b[0], k, "x", 3)) goto fail;
    if (b[0].view.shape[2] != p->input) {
        nn_value_error(k, "x", "must have the layer's input size along its last axis");
        goto fail;
    }
    const int64_t steps = b[0].view.shape[p->layout ? 1 : 0], batch = b[0].view.shape[p->layout ? 0 : 1];
    const int64_t yd[4] = {steps, p->dirs, batch, p->hidden}, sd[3] = {p->dirs, batch, p->hidden};
    const int64_t y_items = nn_mul(4, yd), s_items = nn_mul(3, sd);
    const int64_t gn = p->gates * p->hidden;
    const int64_t xw_dims[3] = {steps, batch, p->dirs * gn}, sc_dims[3] = {p->dirs, batch, 3 * p->hidden + gn};
    const int64_t xw_items = nn_mul(3, xw_dims), sc_items = nn_mul(3, sc_dims);
    if (nn_get(&b[1], args[1], k, "xw", NN_F32, NN_NONE_OK) || nn_need(&b[1], k, "xw", xw_items)) goto fail;
    for (int i = 2; i < 7; i++)
        if (nn_get(&b[i], args[i], k, names[i], NN_F32, NN_NONE_OK | (i < 5 ? NN_OUT : 0)) ||
            nn_need(&b[i], k, names[i], i == 2 ? y_items : s_items))
            goto fail;
    if (nn_get(&b[7], args[7], k, "lens", NN_I32, NN_NONE_OK) || nn_need(&b[7], k, "lens", batch)) goto fail;
    for (int o = 2; o < 5; o++)     /* every output against every input and the outputs after it */
        for (int i = 0; i < 8; i++)
            if ((i < 2 || i >= 5 || i > o) && nn_disjoint(&b[o], &b[i], k, names[o], names[i], 0)) goto fail;
    const int64_t tb_dims[2] = {steps, batch}, tb = nn_mul(2, tb_dims);
    if (xw_items < 0 || sc_items < 0 || y_items < 0 || tb < 0 || tb > NN_BLAS_MAX ||
        xw_items > (int64_t)(PY_SSIZE_T_MAX / sizeof(float)) - sc_items) {
        nn_value_error(k, "x", "is too large for the layer's buffers or the 32-bit BLAS");
        goto fail;
    }
    int32_t *lens = NULL;
    if (b[7].view.buf != NULL) {
        lens = PyMem_RawMalloc((size_t)(batch ? batch : 1) * sizeof(int32_t));
        if (lens == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        const int32_t *given = b[7].view.buf;
        for (int64_t i = 0; i < batch; i++) lens[i] = given[i] < 0 ? 0 : (given[i] > steps ? (int32_t)steps : given[i]);
    }
    const int projected = b[1].view.buf != NULL;
    work = PyMem_RawMalloc((size_t)((projected ? 0 : xw_items) + sc_items + 1) * sizeof(float));
    if (work == NULL) {
        PyMem_RawFree(lens);
        PyErr_NoMemory();
        goto fail;
    }
    nn_rnn_args a = {p, steps, batch, b[0].view.buf, b[5].view.buf, b[6].view.buf, lens, b[2].view.buf, b[3].view.buf,
                     b[4].view.buf, projected ? (float *)b[1].view.buf : work, projected,
                     projected ? work : work + xw_items};
    if (steps > 0 && batch > 0) {
        Py_BEGIN_ALLOW_THREADS
        nn_rnn_run(&a, parts);
        Py_END_ALLOW_THREADS
    } else {                      /* no steps: the final states are the initial ones */
        nn_rnn_states(&a);
    }
    PyMem_RawFree(work);
    PyMem_RawFree(lens);
    return nn_finish(b, 8, 1);
fail:
    return nn_finish(b, 8, 0);
}

/* recurrent.projects(rows): whether run projects that many rows of X (steps * batch) itself on its register-blocked
 * kernels, without the linked BLAS (a small layer's short sequence); the caller's numpy projection pays otherwise */
static PyObject *nn_rnn_projects_py(nn_rnn_object *self, PyObject *arg) {
    int64_t rows;
    if (nn_int(arg, "Recurrent.projects", "rows", 0, INT64_MAX / NN_RNN_PROJECT_MACS, &rows)) return NULL;
    return PyBool_FromLong(nn_rnn_projects(&self->p, rows));
}

static PyMethodDef nn_rnn_methods[] = {
    {"projects", (PyCFunction)nn_rnn_projects_py, METH_O,
     "projects(rows): whether run projects rows rows of x itself on its register-blocked kernels (no BLAS)"},
    {"run", (PyCFunction)(void (*)(void))nn_rnn_run_py, METH_FASTCALL,
     "run(x, xw, y, y_h, y_c, h0, c0, lens, parts): every time step of every direction of x into y, y_h, y_c (None: "
     "not wanted); xw the projection X W^T + bias or None (computed here); h0, c0 initial states or None (zeros); "
     "lens int32 sequence lengths or None; the two directions of a bidirectional layer as two parts when parts >= 2"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject nn_rnn_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nnhal._kernels.Recurrent",
    .tp_doc = "Recurrent(cell, geometry, w, bias, rt, rbh, peep, acts, clip): a prepared LSTM, GRU or RNN layer "
              "(kernels.c says the operands' shapes); the arrays are held, read only, for the object's life",
    .tp_basicsize = sizeof(nn_rnn_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = nn_rnn_new,
    .tp_dealloc = (destructor)nn_rnn_dealloc,
    .tp_methods = nn_rnn_methods,
};

/* The tiles of a Winograd band (b0, b1, t0, t1) of an (n)-image map with tw tile columns and ``channels`` (at least 1);
 * -1 with a ValueError when the band leaves the images or is empty. */
static int64_t nn_wg_band_tiles(const char *k, const int64_t band[4], int64_t n, int64_t tw, int64_t channels) {
    if (band[1] > n || band[0] >= band[1] || band[2] >= band[3] || tw < 1 || channels < 1) {
        PyErr_Format(PyExc_ValueError, "native kernel %s: band (%lld, %lld, %lld, %lld) outside the %lld images or empty",
                     k, (long long)band[0], (long long)band[1], (long long)band[2], (long long)band[3], (long long)n);
        return -1;
    }
    return (band[1] - band[0]) * (band[3] - band[2]) * tw;
}

/* The transform's parts on the pool (GIL released), then the arguments released. */
static PyObject *nn_wg_run(nn_task task, const void *a, int64_t parts, nn_arg *b, int nb) {
    Py_BEGIN_ALLOW_THREADS
    nn_pool_run(task, a, parts);
    Py_END_ALLOW_THREADS
    return nn_finish(b, nb, 1);
}

/* ---- winograd_input(x, v, (n, h, w, c, pad_top, pad_left, tw), (b0, b1, t0, t1), parts): the F(4x4, 3x3) input
 * transform of the band's tiles (nn_winograd.h) from x (n, h, w, c) channels last (its pixels may be a channel
 * slice of a wider tensor) into v (36, k, c), k = (b1 - b0) * (t1 - t0) * tw */
static PyObject *nn_py_winograd_input(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "winograd_input";
    nn_arg b[2] = {{.held = 0}, {.held = 0}};
    int64_t g[7], band[4], parts, ldx = 0;
    if (nn_nargs(nargs, 5, k) || nn_ints(args[2], k, "geometry", 7, 0, g) || nn_ints(args[3], k, "band", 4, 0, band) ||
        nn_get_parts(args[4], k, &parts))
        return NULL;
    const int64_t tiles = nn_wg_band_tiles(k, band, g[0], g[6], g[3]);
    if (tiles < 0) return NULL;
    const int64_t vsize[3] = {36, tiles, g[3]};
    if (nn_get_pixels(&b[0], args[0], k, "x", NN_F32, 0, g[0] * g[1] * g[2], g[3], &ldx) ||
        nn_get(&b[1], args[1], k, "v", NN_F32, NN_OUT) || nn_need(&b[1], k, "v", nn_mul(3, vsize)) ||
        nn_disjoint(&b[1], &b[0], k, "v", "x", 0))
        goto fail;
    nn_wg_in_args a = {b[0].view.buf, b[1].view.buf, ldx, g[1], g[2], g[3], g[4], g[5], g[6], band[0],
                       band[1] - band[0], band[2], band[3] - band[2]};
    return nn_wg_run(nn_wg_input_task, &a, NN_MIN(parts, tiles), b, 2);
fail:
    return nn_finish(b, 2, 0);
}

/* ---- winograd_output(z, y, bias, act, (n, oh, ow, m, tw), (b0, b1, t0, t1), parts): the F(4x4, 3x3) output
 * transform of the band's tiles (nn_winograd.h) from z (36, k, m) into y (n, oh, ow, m) channels last (its pixels
 * may be a channel slice of a wider tensor), plus the bias (m,) or None, then the activation */
static PyObject *nn_py_winograd_output(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "winograd_output";
    nn_arg b[3] = {{.held = 0}, {.held = 0}, {.held = 0}};
    int64_t g[5], band[4], parts, ldy = 0;
    const nn_act *act;
    if (nn_nargs(nargs, 7, k) || (act = nn_get_act(args[3], k)) == NULL || nn_ints(args[4], k, "geometry", 5, 0, g) ||
        nn_ints(args[5], k, "band", 4, 0, band) || nn_get_parts(args[6], k, &parts))
        return NULL;
    const int64_t tiles = nn_wg_band_tiles(k, band, g[0], g[4], g[3]);
    if (tiles < 0) return NULL;
    const int64_t zsize[3] = {36, tiles, g[3]};
    if (nn_get(&b[0], args[0], k, "z", NN_F32, 0) || nn_need(&b[0], k, "z", nn_mul(3, zsize)) ||
        nn_get_pixels(&b[1], args[1], k, "y", NN_F32, NN_OUT, g[0] * g[1] * g[2], g[3], &ldy) ||
        nn_get(&b[2], args[2], k, "bias", NN_F32, NN_NONE_OK) || nn_need(&b[2], k, "bias", g[3]) ||
        nn_disjoint(&b[1], &b[0], k, "y", "z", 0) || nn_disjoint(&b[1], &b[2], k, "y", "bias", 0))
        goto fail;
    nn_wg_out_args a = {b[0].view.buf, b[1].view.buf, b[2].view.buf, act, ldy, g[1], g[2], g[3], g[4], band[0],
                        band[1] - band[0], band[2], band[3] - band[2]};
    return nn_wg_run(nn_wg_output_task, &a, NN_MIN(parts, tiles), b, 3);
fail:
    return nn_finish(b, 3, 0);
}

/* ---- the pool, the spin and the BLAS */
static PyObject *nn_py_spin_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    const char *k = "spin_wait";
    nn_arg flag;
    int64_t value, max_ns, result;
    if (nn_nargs(nargs, 3, k) || nn_int(args[1], k, "value", INT64_MIN, INT64_MAX, &value) ||
        nn_int(args[2], k, "max_ns", 0, INT64_MAX, &max_ns))
        return NULL;
    if (nn_get(&flag, args[0], k, "flag", NN_I64, 0) || nn_need(&flag, k, "flag", 1)) {
        nn_release(&flag, 1);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    result = nn_spin_wait(flag.view.buf, value, max_ns);
    Py_END_ALLOW_THREADS
    nn_release(&flag, 1);
    return PyLong_FromLongLong(result);
}

static PyObject *nn_py_pool_set_threads(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    int64_t threads, have;
    if (nn_nargs(nargs, 1, "pool_set_threads") || nn_int(args[0], "pool_set_threads", "threads", 1, INT32_MAX, &threads))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    have = nn_pool_set_threads(threads);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(have);
}

static PyObject *nn_py_pool_set_spin(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    int64_t ns;
    if (nn_nargs(nargs, 1, "pool_set_spin") || nn_int(args[0], "pool_set_spin", "spin_ns", 0, INT64_MAX, &ns))
        return NULL;
    nn_pool_set_spin(ns);
    Py_RETURN_NONE;
}

static PyObject *nn_py_pool_rest(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    (void)args;
    if (nn_nargs(nargs, 0, "pool_rest")) return NULL;
    nn_pool_rest();
    Py_RETURN_NONE;
}

static PyObject *nn_py_pool_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    (void)args;
    int64_t spun, sleeps;
    if (nn_nargs(nargs, 0, "pool_stats")) return NULL;
    nn_pool_stats(&spun, &sleeps);
    return Py_BuildValue("(LL)", (long long)spun, (long long)sleeps);
}

static PyObject *nn_py_blas_set_threads(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    int64_t n;
    if (nn_nargs(nargs, 1, "blas_set_threads") || nn_int(args[0], "blas_set_threads", "threads", 1, 4096, &n))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    scipy_openblas_set_num_threads((int)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

#include "nn_steps.h"
#include "nn_norm.h"
#include "nn_concat.h"
#include "nn_relayout.h"
#include "nn_qdq.h"

static PyObject *nn_py_blas_info(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:s,s:s,s:i}", "library", "scipy-openblas32 (libscipy_openblas)", "config",
                         scipy_openblas_get_config(), "threads", scipy_openblas_get_num_threads());
}

#include "nn_softmax.h"
#include "nn_attention.h"

/* which hand-written intrinsic paths run on this CPU (NN_CPU_HAS2 checks, NNHAL_NATIVE_SIMD=0 included) */
static PyObject *nn_py_simd_paths(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
#if NN_GEMV_SIMD
    const int gemv = nn_gemv_simd_ok();
#else
    const int gemv = 0;
#endif
#if NN_HALF_SIMD
    const int half = nn_half_simd_ok();
#else
    const int half = 0;
#endif
#if NN_SOFTMAX_SIMD
    const int softmax = nn_softmax_simd_ok();
#else
    const int softmax = 0;
#endif
#if NN_EXP_SIMD
    const int sigmoid = nn_exp_simd_ok();
#else
    const int sigmoid = 0;
#endif
    return Py_BuildValue("{s:O,s:O,s:O,s:O}", "gemv", gemv ? Py_True : Py_False, "half", half ? Py_True : Py_False,
                         "softmax", softmax ? Py_True : Py_False, "sigmoid", sigmoid ? Py_True : Py_False);
}

static PyMethodDef nn_methods[] = {
    {"activation", (PyCFunction)(void (*)(void))nn_py_activation, METH_FASTCALL,
     "activation(x, y, act, parts): y = act(x) for float32 x and y of one size (y may be x)"},
    {"add_act", (PyCFunction)(void (*)(void))nn_py_add_act, METH_FASTCALL,
     "add_act(a, b, y, act, i0, i1): y[i] = act(a[i] + b[i]) for i in [i0, i1) (y may be a or b)"},
    {"channel_affine", (PyCFunction)(void (*)(void))nn_py_channel_affine, METH_FASTCALL,
     "channel_affine(x, y, scale, shift, act, parts): y = act(x * scale + shift) over the last axis (y may be x)"},
    {"transpose_blocks", (PyCFunction)(void (*)(void))nn_py_transpose_blocks, METH_FASTCALL,
     "transpose_blocks(x, y, outer, a, b, inner, parts): y (outer, b, a, inner) from x (outer, a, b, inner)"},
    {"copy_rows", (PyCFunction)(void (*)(void))nn_py_copy_rows, METH_FASTCALL,
     "copy_rows(x, y, rows, width, x_stride, x_offset, y_stride, y_offset, parts): rows of width bytes, x to y"},
    {"transpose_round", (PyCFunction)(void (*)(void))nn_py_transpose_round, METH_FASTCALL,
     "transpose_round(x, y, outer, a, b, parts): y (outer, b, a) from float32 x (outer, a, b), rounded to float16"},
    {"resize_nhwc", (PyCFunction)(void (*)(void))nn_py_resize_nhwc, METH_FASTCALL,
     "resize_nhwc(x, y, hidx, hw, widx, ww, parts): separable Resize of a channels-last image by tap tables"},
    {"resize_to_nchw", (PyCFunction)(void (*)(void))nn_py_resize_to_nchw, METH_FASTCALL,
     "resize_to_nchw(x, y, hidx, hw, widx, ww, parts, round_half): resize_nhwc writing y (n, c, oh, ow), W then H; "
     "round_half 1: each output rounded through float16"},
    {"cast_half", (PyCFunction)(void (*)(void))nn_py_cast_half, METH_FASTCALL,
     "cast_half(x, y): float32 -> float16, float16 -> float32, or float32 -> float32 rounded through float16"},
    {"quantize_linear", (PyCFunction)(void (*)(void))nn_py_quantize_linear, METH_FASTCALL,
     "quantize_linear(x, y, scale, zero): y uint8/int8 = QuantizeLinear of float32 x, one scale and zero point"},
    {"dequantize_linear", (PyCFunction)(void (*)(void))nn_py_dequantize_linear, METH_FASTCALL,
     "dequantize_linear(x, y, scale, zero): y float32 = DequantizeLinear of uint8/int8 x, one scale and zero point"},
    {"fake_quantize_blocks", (PyCFunction)(void (*)(void))nn_py_fake_quantize, METH_FASTCALL,
     "fake_quantize_blocks(x, y, block, signed): x (m, k) quantized per row and block, dequantized into y"},
    {"layernorm", (PyCFunction)(void (*)(void))nn_py_layernorm, METH_FASTCALL,
     "layernorm(x, y, scale, bias, eps, parts): LayerNormalization over the last axis (y may be x)"},
    {"rmsnorm", (PyCFunction)(void (*)(void))nn_py_rmsnorm, METH_FASTCALL,
     "rmsnorm(x, y, scale, eps, parts): x / sqrt(mean(x^2) + eps) * scale over the last axis (y may be x)"},
    {"rotary", (PyCFunction)(void (*)(void))nn_py_rotary, METH_FASTCALL,
     "rotary(x, cos, sin, y, mid, inner, parts): y = x * cos + rotate_half(x) * sin, cos/sin broadcast over mid"},
    {"group_norm", (PyCFunction)(void (*)(void))nn_py_group_norm, METH_FASTCALL,
     "group_norm(x, y, scale, bias, channels, groups, eps, act, parts): Instance/GroupNormalization, channels first"},
    {"softmax", (PyCFunction)(void (*)(void))nn_py_softmax, METH_FASTCALL,
     "softmax(x, y, inner, parts): Softmax over the last axis (inner 1) or axis -2 (inner: the last axis) (y may be x), split over the pool"},
    {"attention", (PyCFunction)(void (*)(void))nn_py_attention, METH_FASTCALL,
     "attention(q, k, v, mask, o, scale, kt, parts): o = softmax(q k^T * scale + mask) v per (batch, head), strided views"},
    {"global_pool", (PyCFunction)(void (*)(void))nn_py_global_pool, METH_FASTCALL,
     "global_pool(x, y, kind, parts): GlobalMaxPool (0) or GlobalAveragePool (1) of x (n, h, w, c) into y (n * c), "
     "parts split over images and blocks of channels"},
    {"gather_last", (PyCFunction)(void (*)(void))nn_py_gather_last, METH_FASTCALL,
     "gather_last(x, y, idx, r0, r1): rows [r0, r1) of y[..., k] = x[..., idx[k]], 4-byte elements"},
    {"shuffle_last", (PyCFunction)(void (*)(void))nn_py_shuffle_last, METH_FASTCALL,
     "shuffle_last(x, y, groups, r0, r1): rows [r0, r1) of the channel shuffle of the last axis"},
    {"gemm", (PyCFunction)(void (*)(void))nn_py_gemm, METH_FASTCALL,
     "gemm(a, b, c, bias, act, parts, row_align, by_cols): c = act(a @ b + bias) on the native pool"},
    {"batched_gemm", (PyCFunction)(void (*)(void))nn_py_batched_gemm, METH_FASTCALL,
     "batched_gemm(a, b, c, parts): c[i] = a[i] @ b[i] on the native pool"},
    {"winograd_input", (PyCFunction)(void (*)(void))nn_py_winograd_input, METH_FASTCALL,
     "winograd_input(x, v, geometry, band, parts): Winograd F(4x4, 3x3) input transform of a band of tiles"},
    {"winograd_output", (PyCFunction)(void (*)(void))nn_py_winograd_output, METH_FASTCALL,
     "winograd_output(z, y, bias, act, geometry, band, parts): Winograd F(4x4, 3x3) output transform, bias, act"},
    {"spin_wait", (PyCFunction)(void (*)(void))nn_py_spin_wait, METH_FASTCALL,
     "spin_wait(flag, value, max_ns): spin (GIL released) until flag[0] != value or max_ns passed; flag[0]"},
    {"pool_set_threads", (PyCFunction)(void (*)(void))nn_py_pool_set_threads, METH_FASTCALL,
     "pool_set_threads(n): make the native pool run parts on n threads; the threads it has"},
    {"pool_set_spin", (PyCFunction)(void (*)(void))nn_py_pool_set_spin, METH_FASTCALL,
     "pool_set_spin(ns): how long an idle worker spins before it sleeps"},
    {"pool_rest", (PyCFunction)(void (*)(void))nn_py_pool_rest, METH_FASTCALL,
     "pool_rest(): a run ended; idle workers sleep now instead of spinning (the next job wakes them)"},
    {"pool_stats", (PyCFunction)(void (*)(void))nn_py_pool_stats, METH_FASTCALL,
     "pool_stats() -> (spun_ns, sleeps): the workers' spin waiting for jobs and their sleeps so far"},
    {"blas_set_threads", (PyCFunction)(void (*)(void))nn_py_blas_set_threads, METH_FASTCALL,
     "blas_set_threads(n): the linked OpenBLAS's threads"},
    {"blas_info", nn_py_blas_info, METH_NOARGS, "blas_info(): the linked BLAS's name, configuration and threads"},
    {"simd_paths", nn_py_simd_paths, METH_NOARGS,
     "simd_paths(): {path: bool}, the hand-written intrinsic paths this CPU runs (NNHAL_NATIVE_SIMD=0: none)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nn_module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "nnhal cpu device's native kernels (kernels.c): METH_FASTCALL functions over numpy arrays", -1, nn_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    PyTypeObject *types[] = {&nn_act_type, &nn_conv_type, &nn_pool2d_type, &nn_gemm_type, &nn_program_type,
                             &nn_rnn_type};
    const char *names[] = {"Act", "Conv", "Pool2d", "Gemm", "Program", "Recurrent"};
    const int count = (int)(sizeof types / sizeof types[0]);
    for (int i = 0; i < count; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *m = PyModule_Create(&nn_module);
    if (m == NULL) return NULL;
    for (int i = 0; i < count; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddIntConstant(m, "MAX_PARTS", NN_MAX_WORKERS + 1) < 0 || nn_pool_api_export(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
