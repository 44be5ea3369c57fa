"""The direct channels-last convolution (kernels.c nn_direct_nhwc_f32): group 1, no im2col columns.

A GEMM over im2col columns runs (pixels, KH * KW * C) @ (KH * KW * C, M); with few output channels M its N
is tiny, so the time goes to writing the columns and packing them, not to multiply-adds (the 3 -> 16 7x7
stem ran at 16 GFLOP/s). The direct kernel keeps a tile of 6 pixels times 16 output channels in registers
and reads the input in place.

Measured at 1 thread, batch 1, on the 2-core AMD EPYC VM (Zen 3, AVX2, no AVX-512; OpenBLAS's Haswell
kernels), interleaved min of 40 (ms, im2col + GEMM against direct):
  3 -> 16 7x7 s2 224^2 3.79 / 0.83;   3 -> 16 3x3 s2 256^2 1.53 / 0.25;   3 -> 64 7x7 s2 6.47 / 3.45
  16 -> 16 3x3 56^2 0.344 / 0.171;    16 -> 16 3x3 s2 128^2 0.59 / 0.29;  48 -> 48 3x3 32^2 0.608 / 0.487
  128 -> 16 3x3 28^2 0.562 / 0.366;   96 -> 48 3x3 28^2 0.941 / 0.864;    8 -> 128 3x3 56^2 0.954 / 0.735
  64 -> 64 3x3 56^2 3.52 / 2.86;      32 -> 64 3x3 56^2 1.68 / 1.43;      64 -> 64 1x1 56^2 0.364 / 0.321
  64 -> 64 3x3 14^2 0.188 / 0.180;    128 -> 128 3x3 7^2 0.274 / 0.333;   128 -> 128 3x3 28^2 3.42 / 3.55
So: few output channels, few input taps, or both sides at most 64. An AVX-512 CPU doubles the GEMM's
vector width (OpenBLAS's SkylakeX kernels) but not this kernel's (8-lane vectors), so there it takes only
the cases that won 2x or more here, where the GEMM is bound by the columns, not by its multiply-adds.
"""
from __future__ import annotations

import os

import numpy as np

from nnhal.device.cpu import native, parallel

# the register tile: 16 output channels (two 8-lane vectors) per block
BLOCK = 16
# without AVX-512: output channels up to which the direct kernel wins whatever the input; im2col columns
# (KH * KW * C) up to which it wins whatever the output channels; both sides at most this
MAX_OUT = 48
MAX_TAPS = 160
MAX_BOTH = 64
# with AVX-512: output channels up to which it wins whatever the input, and with at most MAX_TAPS columns
AVX512_MAX_OUT = 16
AVX512_MAX_OUT_FEW_TAPS = 32


# Without AVX-512: a KxK convolution (K > 1) whose output has at most this many pixels an image runs on the direct
# kernel whatever its channels (a 1x1 too while its weights are small; below). There the GEMM's rows are the few
# pixels (49 on a 7x7 map), where OpenBLAS packs the whole of the weights for little work, and since its edge pixels
# run in tiles (nn_direct_tiles.h) the direct kernel keeps its FMA chains full on such maps. Measured on the same
# VM, 3x3, batch 1, interleaved min of 32 in one process (us, direct / im2col + GEMM; 1 thread): 128 -> 128 at 7^2
# 150 / 210, stride 2 from 14^2 186 / 214; 256 -> 256 at 7^2 602 / 951, stride 2 from 14^2 1016 / 1233; 512 -> 512
# at 7^2 2805 / 4171; 2 threads: 128 at 7^2 203 / 288, stride 2 215 / 309; 256 at 7^2 979 / 3054. At 14^2 they tie
# (128 -> 128: 700 / 757 at 1 thread, 1654 / 1609 at 2; 96 -> 96: 391 / 408), at 28^2 the GEMM wins (128 -> 128:
# 5800 / 4687). The bound was 64.
# NOTE: those were one convolution called over and over, its weights hot in cache. Inside a model (issue 27, conv4
# round: two sessions of one model in one process, NNHAL_DIRECT=2 against the default, 16 alternating rounds of 5
# profiled runs, loaded machine, per-step min / median in us, 1 thread then 2) the same rule also holds at 10^2:
# yolo_c2f's 64 -> 128 3x3 stride 2 to 10^2 (im2col) 241 / 258 -> 208 / 234, 286 / 915 -> 209 / 249; and it holds
# for a 1x1, whose BLAS call packs its weights on every call: resnet_bottleneck's 256 -> 128 at 7^2 91 / 119 ->
# 58 / 77, 98 / 118 -> 55 / 82; yolo_c2f's 192 -> 128 at 10^2 93 / 101 -> 73 / 85, 102 / 143 -> 80 / 98, 256 -> 128
# at 10^2 105 / 115 -> 91 / 107, 115 / 156 -> 100 / 129 (192 -> 64 at 20^2 only 3-10%: not taken). With its
# weights hot the 1x1 GEMM still wins on deep ones (512 -> 256 at 7^2 130 / 195 us, GEMM / direct), so a 1x1 takes
# the rule only while its weights are at most SMALL_MAP_1X1_MAX_WEIGHTS floats (256 x 128, the largest measured).
SMALL_MAP_PIXELS = 100
SMALL_MAP_1X1_MAX_WEIGHTS = 256 * 128


def direct_fits(n: int, c: int, m: int, kernel: tuple[int, int], group: int, dtype, pixels: int | None = None) -> bool:
    """Whether the direct kernel runs a convolution of ``c`` -> ``m`` channels (the measurements above) with
    ``pixels`` output pixels an image (None: not known, the channel rules alone); NNHAL_DIRECT=0 never, =2 always
    (A/B measurements)."""
    forced = os.environ.get("NNHAL_DIRECT")
    if not native.available() or dtype != np.float32 or group != 1 or forced == "0":
        return False
    if forced == "2":
        return True
    taps = c * kernel[0] * kernel[1]
    if parallel.avx512():
        return m <= AVX512_MAX_OUT or m <= AVX512_MAX_OUT_FEW_TAPS and taps <= MAX_TAPS
    if pixels is not None and pixels <= SMALL_MAP_PIXELS and (kernel[0] * kernel[1] > 1
                                                              or c * m <= SMALL_MAP_1X1_MAX_WEIGHTS):
        return True
    return m <= MAX_OUT or taps <= MAX_TAPS or m <= MAX_BOTH and c <= MAX_BOTH


def make(s, wv: np.ndarray, bias: np.ndarray | None, act, layouts: int = 0):
    """The prepared native.Conv("direct") of geometry ``s`` (hostkernels._conv2d.Conv2d), weights (M, C, KH,
    KW), bias (M,) or None and the native activation record ``act``; ``layouts``: READ_NCHW and WRITE_NCHW's bits
    (0: both sides channels last)."""
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    mp = -(-s.m // 8) * 8
    full = np.zeros((kh, kw, s.c, mp), np.float32)
    full[..., :s.m] = wv.transpose(2, 3, 1, 0)
    # blocks of BLOCK columns (8 for the last when mp is not a multiple), each (KH, KW, C, width) contiguous
    wk = np.concatenate([full[..., mb:mb + min(BLOCK, mp - mb)].ravel() for mb in range(0, mp, BLOCK)])
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    geometry = (s.n, s.h, s.w, s.c, s.oh, s.ow, s.m, kh, kw, sh, sw, dh, dw, s.pads[0], s.pads[1], mp)
    return native.Conv("direct", geometry + ((layouts,) if layouts else ()), wk, b, act)


# the direct kernel's channels-first sides (kernels.c "direct" geometry's layouts): it reads its input as (N, C, H, W)
# (a model's image: the stem without a conversion pass before it), writes its output as (N, M, OH, OW) (a model's
# output: no conversion pass after it), or both
READ_NCHW = 1
WRITE_NCHW = 2


# Winograd F(4x4, 3x3) against the direct kernel on the same machine (1 thread, interleaved min of 30-60,
# ms direct / winograd): 24 -> 24 at 56^2 0.613 / 1.071; 32 -> 32 at 56^2 0.902 / 1.390, at 28^2 0.193 / 0.305;
# 48 -> 48 at 56^2 1.635 / 1.792, at 32^2 0.545 / 0.632; 64 -> 32 at 56^2 1.785 / 2.351; 64 -> 64 at 56^2
# 2.72 / 2.70, at 28^2 0.735 / 0.650. Below this many channels on either side the direct kernel wins. With the
# native Winograd transforms (issue 27; 1 thread, min of 40 alternating blocks, loaded, us, direct / Winograd) 48 ->
# 48 at 28^2 493 / 427, at 32^2 961 / 624; 2 threads (min of 60) at 20^2 251 / 184, at 28^2 424 / 299; 32 channels
# still went either way (32 -> 32 at 28^2: 273 / 208 by minimum, 377 / 1202 by median), so 48.
WINOGRAD_MIN_CHANNELS = 48


def beats_winograd(c: int, m: int, dtype) -> bool:
    """Whether a 3x3 stride-1 convolution of c -> m channels runs faster on the direct kernel than by
    Winograd (where the direct kernel takes it at all)."""
    return min(c, m) < WINOGRAD_MIN_CHANNELS and direct_fits(1, c, m, (3, 3), 1, dtype)


# A channels-first convolution's GEMM is W (M, K) @ columns (K, pixels): its N is the pixels, so few output
# channels do not starve it; what the direct kernel saves there is the gather of image rows into columns.
# Measured as above (ms, NCHW im2col + GEMM against channels-last copies + direct): 3 -> 16 7x7 s2 224^2
# 7.2 / 1.45; 16 -> 16 3x3 56^2 0.489 / 0.237; 48 -> 48 3x3 at 8^2 0.115 / 0.052, 16^2 0.241 / 0.169, 32^2
# 0.965 / 0.740; 64 -> 32 3x3 56^2 2.69 / 1.76; but 48 -> 10 3x3 32^2 0.264 / 0.357 (10 of 16 lanes used) and
# 32 -> 32 1x1 56^2 0.213 / 0.289 (a 1x1 is one GEMM on the input, no gather to save).


# Channels first with fewer than BLOCK output channels (a detection head's class, box and centerness convolutions
# after GroupNorm): on maps of at most this many output pixels an image the direct kernel through the copies still
# wins, the numpy im2col's or shift's dozen calls costing more than the unused lanes. Measured as above, 1 thread
# (us, NCHW GEMM path / direct through copies): 48 -> 10, 4, 1 at 8^2 103 / 25, 93 / 22, 82 / 23; at 16^2 189 / 75,
# 157 / 64, 122 / 66; but at 32^2 (the shift path) 306 / 427, 159 / 358, 108 / 378.
NCHW_FEW_OUT_MAX_PIXELS = 256


def nchw_fits(n: int, c: int, m: int, kernel: tuple[int, int], group: int, dtype, pixels: int | None = None) -> bool:
    """Whether a convolution that stays channels first runs on the direct kernel through copies (``pixels``: its
    output pixels an image, None when not known)."""
    few_pixels = pixels is not None and pixels <= NCHW_FEW_OUT_MAX_PIXELS
    return kernel != (1, 1) and (m >= BLOCK or few_pixels) and direct_fits(n, c, m, kernel, group, dtype)


def pool_work(s) -> int:
    """The pool's work units of the direct kernel's convolution ``s`` (its multiply-adds)."""
    return parallel.gemm_work(s.n * s.oh * s.ow * s.m * s.c * s.kernel[0] * s.kernel[1])


def nchw_run(s, wv: np.ndarray, bias: np.ndarray | None, act):
    """run(inputs, outputs) of the direct kernel for a convolution whose tensors stay NCHW (a region the
    layout pass keeps channels first: GroupNorm's reshapes, 1-D audio convolutions, a lone Conv), through
    channels_first (``act``: the native activation record)."""
    conv = make(s, wv, bias, act)
    work = pool_work(s)
    rows = s.n * s.oh
    y_shape = (s.n, s.oh, s.ow, s.m)

    def run_nhwc(inputs, outputs):
        y = np.empty(y_shape, np.float32)
        conv.run(inputs[0], y, None, parallel.native_parts(work, rows) if parallel.native_pool() else 1)
        return (y,)

    return channels_first(s, run_nhwc)


def channels_first(s, run_nhwc):
    """The run of a channels-last convolution kernel (``run_nhwc``, of dtype s.dtype) for NCHW tensors: the input
    copied channels last into a new array, the kernel, its output copied back."""
    x_shape = (s.n, s.h, s.w, s.c)

    def run(inputs, outputs):
        xl = np.empty(x_shape, s.dtype)
        np.copyto(xl, inputs[0].transpose(0, 2, 3, 1))
        yl = run_nhwc([xl, *inputs[1:]], [None])[0]
        y = outputs[0] if outputs[0] is not None else np.empty((s.n, s.m, s.oh, s.ow), s.dtype)
        np.copyto(y, yl.transpose(0, 3, 1, 2))
        return (y,)

    return run
