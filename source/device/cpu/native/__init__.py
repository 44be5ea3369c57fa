"""nnhal's native kernels: the CPython extension module ``_kernels`` (kernels.c), with its BLAS and thread pool.

CMake builds ``kernels.c`` at install time into ``_kernels`` when a C compiler, Python's headers and the
scipy-openblas32 wheel are there (NNHAL_NATIVE_KERNELS, on by default), linked against that wheel's OpenBLAS.
Kernels ask :func:`available` and keep to numpy when it is False, so every result has a numpy path too; the
tests run both and compare them. ``NNHAL_NATIVE=0`` in the environment switches the native kernels off at load
(A/B measurements, or ruling them out when a result looks wrong); :func:`status` says which applies.

The module's functions take numpy arrays through the buffer protocol and check every argument in one place
(kernels.c's nn_buffer.h: dtype, C-contiguity or unit inner stride, sizes against the geometry, overlap of
output and input, None); a wrong argument raises TypeError or ValueError naming the kernel and the argument,
never a crash. They release the GIL around their loops. What they compute:

* :func:`activation`: Relu, Clip, HardSigmoid, HardSwish, Sigmoid, SiLU and the exact Gelu (erf by the numpy
  fast Erf's rational approximation) in one pass, split into ``parts`` over the native pool;
* :class:`Conv`: a prepared channels-last convolution (depthwise, grouped of narrow groups, or group-1 by
  im2col bands and GEMM) with its packed weights, bias and activation, made once at prepare;
* :class:`Pool2d`: a prepared 2-D MaxPool or AveragePool, channels last (the output may be a channel slice of
  a wider tensor); :func:`global_pool`: GlobalAveragePool and GlobalMaxPool;
* :func:`fake_quantize_blocks`: per-block dynamic int8/uint8 quantization of activations, dequantized;
* :func:`quantize_linear` / :func:`dequantize_linear`: QuantizeLinear / DequantizeLinear with one scale and
  zero point (nn_qdq.h);
* :func:`gather_last` / :func:`shuffle_last`: Gather along the last axis of 4-byte elements, the channel
  shuffle's permutation by interleaving stores;
* :func:`add_act`: a + b with a fused activation in one pass; :func:`layernorm`: LayerNormalization;
* :func:`attention`: softmax(Q K^T * scale + mask) V per (batch, head) on strided views (nn_attention.h);
* :func:`group_norm`: Instance and GroupNormalization, channels first, per-channel affine;
* :func:`channel_affine`: act(x * scale + shift) over the last axis in one pass (BatchNormalization, NHWC);
* :func:`transpose_blocks`: a swap of two axis groups of 4-byte elements (the NCHW <-> NHWC conversions);
* :func:`copy_rows`: rows of bytes from one strided matrix to another: a Concat input into its slice of the output,
  a Split output out of its slice of the input (any dtype);
* :func:`transpose_round`: transpose_blocks of float32 with fp16 storage's rounding in the same pass;
* :func:`resize_nhwc`: Resize of a channels-last image by per-axis tap tables (nearest, linear, cubic);
  :func:`resize_to_nchw` the same writing NCHW (a channels-last region's last Resize into a graph output);
* :func:`cast_half`: float32 <-> float16 and float32 rounded through float16 (fp16 storage's conversions);
* :class:`Gemm`: a prepared GEMM (constant B, its bias and activation), made once at prepare;
* :class:`Program`: a prepared run of small element-wise float32 steps executed by one call (nn_steps.h; the
  CPU plan's native step program, device/cpu/steps.py);
* :class:`Recurrent`: a prepared LSTM, GRU or RNN layer (packed W, R^T, biases, peepholes, activations, clip):
  one call runs the input projection GEMM and every time step of every direction;
* :func:`gemm` / :func:`batched_gemm`: GEMMs with their bias and activation through the cblas_sgemm of the
  linked OpenBLAS (:func:`blas_info`), single-threaded inside the pool's parts (:func:`blas_set_threads`).

Four kernels have hand-written AVX2/F16C intrinsic paths chosen at run time (the few-row packed GEMV, the
float16 conversions, the softmax rows, the Sigmoid and SiLU activations, fused or not); :func:`simd_paths` says
which this CPU runs. ``NNHAL_NATIVE_SIMD=0``
turns them off (read at their first call) so the tests run the plain C paths, the only ones on other CPUs.

The native pool (kernels.c ``nn_pool_run``): pinned pthread workers that survive a fork as none (a child
starts over); :func:`pool_set_threads` makes sure it has them.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass

import numpy as np

# Activation kinds, as numbered in kernels.c
ACTIVATIONS = {"relu": 1, "clip": 2, "hardsigmoid": 3, "hardswish": 4, "sigmoid": 5, "silu": 6, "gelu": 7,
               "gelu_tanh": 8, "tanh": 9}
# Pooling kinds, as numbered in kernels.c: max, average over the taps inside the input, average over the
# taps inside the padded input (count_include_pad)
POOLS = {"max": 0, "avg": 1, "avg_pad": 2}
# Recurrent activation kinds (LSTM / GRU / RNN ``activations``, lower case), as numbered in kernels.c
RECURRENT_ACTIVATIONS = {"sigmoid": 0, "tanh": 1, "relu": 2, "affine": 3, "leakyrelu": 4, "thresholdedrelu": 5,
                         "scaledtanh": 6, "hardsigmoid": 7, "elu": 8, "softsign": 9, "softplus": 10}


@dataclass(frozen=True)
class Status:
    """Whether the native kernels are in use, and why not when they are not."""

    available: bool
    reason: str
    path: str | None = None


def _load():
    if os.environ.get("NNHAL_NATIVE", "1") == "0":
        return None, Status(False, "switched off by NNHAL_NATIVE=0")
    if importlib.util.find_spec(f"{__name__}._kernels") is None:
        return None, Status(False, "not built (no C compiler, Python headers or scipy-openblas32 at install, or "
                                   "NNHAL_NATIVE_KERNELS=OFF): numpy runs every kernel")
    try:
        _kernels = importlib.import_module(f"{__name__}._kernels")
    except ImportError as exc:          # built, but its BLAS (or Python ABI) not found at load
        return None, Status(False, f"cannot load the native kernels: {exc}")
    return _kernels, Status(True, "loaded", _kernels.__file__)


_k, _status = _load()


def available() -> bool:
    """True when the native kernels are built, loaded and not switched off."""
    return _k is not None


def status() -> Status:
    return _status


def blas_info() -> dict | None:
    """The linked BLAS: ``library``, ``config`` (openblas_get_config: version, kernel, threading) and
    ``threads``; None without the native kernels."""
    return _k.blas_info() if _k is not None else None


@functools.lru_cache(maxsize=256)
def make_act(kind: str | None, lo: float | None = None, hi: float | None = None,
             alpha: float = 0.2, beta: float = 0.5):
    """The Act of an activation kind (None: no activation); one shared object per set of arguments (the
    kernels only read it). None without the native kernels (a plan may prepare one it then does not use)."""
    if _k is None:
        return None
    return _k.Act(ACTIVATIONS[kind] if kind else 0, -np.inf if lo is None else float(lo),
                  np.inf if hi is None else float(hi), float(alpha), float(beta))


if _k is not None:
    Act = _k.Act
    Conv = _k.Conv
    Pool2d = _k.Pool2d
    Gemm = _k.Gemm                              # Gemm(b, bias, act[, pack]).run(a, c, parts, row_align, by_cols)
    Program = _k.Program                        # Program(tensors, steps, constants).run(arena, arrays)
    Recurrent = _k.Recurrent                    # Recurrent(cell, ...).run(x, y, y_h, y_c, h0, c0, lens, parts)
    # the module's functions themselves: one FASTCALL each, no Python frame between
    activation = _k.activation                  # (x, y, act, parts)
    add_act = _k.add_act                        # (a, b, y, act, i0, i1)
    channel_affine = _k.channel_affine          # (x, y, scale, shift, act, parts)
    transpose_blocks = _k.transpose_blocks      # (x, y, outer, a, b, inner, parts)
    copy_rows = _k.copy_rows    # (x, y, rows, width, x_stride, x_offset, y_stride, y_offset, parts): uint8 views
    transpose_round = _k.transpose_round        # (x, y, outer, a, b, parts): float32, rounded via float16
    resize_nhwc = _k.resize_nhwc                # (x, y, hidx, hw, widx, ww, parts)
    resize_to_nchw = _k.resize_to_nchw          # (x, y (n, c, oh, ow), hidx, hw, widx, ww, parts, round_half)
    cast_half = _k.cast_half                    # (x, y): f32 -> f16, f16 -> f32, or f32 -> f32 through f16
    fake_quantize_blocks = _k.fake_quantize_blocks  # (x, y, block, signed)
    quantize_linear = _k.quantize_linear        # (x, y, scale, zero): float32 -> uint8 / int8, per tensor
    dequantize_linear = _k.dequantize_linear    # (x, y, scale, zero): uint8 / int8 -> float32, per tensor
    layernorm = _k.layernorm                    # (x, y, scale, bias, eps, parts)
    rmsnorm = _k.rmsnorm                        # (x, y, scale, eps, parts)
    rotary = _k.rotary                          # (x, cos, sin, y, mid, inner, parts)
    group_norm = _k.group_norm                  # (x, y, scale, bias, channels, groups, eps, act, parts)
    softmax = _k.softmax                        # (x, y, parts)
    attention = _k.attention                    # (q, k, v, mask, o, scale, kt, parts)
    global_pool = _k.global_pool                # (x, y, kind, parts)
    gather_last = _k.gather_last                # (x, y, idx, r0, r1)
    shuffle_last = _k.shuffle_last              # (x, y, groups, r0, r1)
    gemm = _k.gemm                              # (a, b, c, bias, act, parts, row_align, by_cols)
    batched_gemm = _k.batched_gemm              # (a, b, c, parts)
    winograd_input = _k.winograd_input          # (x, v, (n, h, w, c, pt, pl, tw), (b0, b1, t0, t1), parts)
    winograd_output = _k.winograd_output        # (z, y, bias, act, (n, oh, ow, m, tw), (b0, b1, t0, t1), parts)
    spin_wait = _k.spin_wait                    # (flag, value, max_ns)
    pool_set_threads = _k.pool_set_threads      # (n)
    pool_set_spin = _k.pool_set_spin            # (ns)
    pool_rest = _k.pool_rest                    # () a run ended: idle workers sleep now
    pool_stats = _k.pool_stats                  # () -> (spun_ns, sleeps) of the workers so far
    blas_set_threads = _k.blas_set_threads      # (n)
    simd_paths = _k.simd_paths                  # () -> {path: bool}
    MAX_PARTS = _k.MAX_PARTS
