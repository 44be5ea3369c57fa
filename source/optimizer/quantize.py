"""Post-training quantization of activations: calibration and parameters.

``quantize_activations`` is the single step the core runs when a subgraph's
device asks for a quantized precision: it calibrates tensor ranges on the
inputs seen at prerun (unless a table is given; "minmax" takes the extremes,
"mse" the clipping with the least uint8 error) and sets
``Tensor.quant`` on every float tensor a quantized subgraph reads or writes.
Activations are asymmetric uint8 per tensor; weights are the device's
business (vnpu: symmetric int8 per channel, int32 bias).
"""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import numpy as np

from nnhal.errors import InputError, OptionsError
from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Quantization, TensorKind

QUANTIZED = ("int8", "uint8")
Ranges = dict[str, tuple[float, float]]


SAMPLE = 65536
CANDIDATES = np.linspace(1.0, 0.3, 15)


def collect(graph: Graph, feeds: list[dict[str, np.ndarray]]) -> dict[str, tuple[float, float, np.ndarray]]:
    """Per float tensor: min, max and a fixed-size sample of values over fp32 CPU runs on ``feeds``."""
    from nnhal.device.manager import graph_compiler

    names = [o for n in graph.nodes for o in n.outputs if o]
    plan = graph_compiler()(graph, graph.nodes, list(graph.inputs), names)
    stats: dict[str, tuple[float, float, list[np.ndarray]]] = {}
    rng = np.random.default_rng(0)
    for feed in feeds:
        values = dict(feed)
        plan.run(values)
        for name, value in values.items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                flat = value.ravel()
                if not np.all(np.isfinite(flat)):
                    flat = flat[np.isfinite(flat)]      # masks of -inf and NaNs do not set ranges
                    if not flat.size:
                        continue
                sample = flat if flat.size <= SAMPLE else flat[rng.integers(0, flat.size, SAMPLE)]
                lo, hi, parts = stats.get(name, (np.inf, -np.inf, []))
                stats[name] = (min(lo, float(flat.min())), max(hi, float(flat.max())),
                               parts + [sample.astype(np.float64)])
    return {n: (lo, hi, np.concatenate(parts)) for n, (lo, hi, parts) in stats.items()}


def _mse_range(lo: float, hi: float, sample: np.ndarray) -> tuple[float, float]:
    """The shrink of [lo, hi] (toward zero) whose uint8 quantization of the sample has the least squared error."""
    best, best_err = (lo, hi), np.inf
    for ratio in CANDIDATES:
        q = uint8_params(lo * ratio, hi * ratio)
        scale, zp = float(q.scale), float(q.zero_point)
        approx = (np.clip(np.rint(sample / scale) + zp, 0, 255) - zp) * scale
        err = float(np.mean((approx - sample) ** 2))
        if err < best_err:
            best, best_err = (lo * ratio, hi * ratio), err
    return best


def calibrate_ranges(graph: Graph, feeds: list[dict[str, np.ndarray]], method: str = "mse") -> Ranges:
    """Activation ranges: "minmax" (exact extremes) or "mse" (the clipping that minimizes uint8 error)."""
    if method not in ("minmax", "mse"):
        raise ValueError(f"calibration method must be 'minmax' or 'mse', got '{method}'")
    ranges: Ranges = {}
    for name, (lo, hi, sample) in collect(graph, feeds).items():
        ranges[name] = (lo, hi) if method == "minmax" else _mse_range(lo, hi, sample)
    for t in graph.tensors.values():
        if t.kind is TensorKind.CONSTANT and t.value is not None and t.value.dtype.kind == "f" and t.value.size:
            finite = t.value[np.isfinite(t.value)]
            if finite.size:
                ranges.setdefault(t.name, (float(finite.min()), float(finite.max())))
    return ranges


CLIP_RATIOS = np.linspace(1.0, 0.5, 11)


def per_channel_int8(w: np.ndarray, levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """int8 symmetric per output channel (axis 0): (wq, scales), wq in [-levels, levels].

    ``levels`` below 127 narrows the weights for integer kernels whose u8 x s8 pair sums saturate at 16 bits
    (x86 without VNNI: ``vpmaddubsw``; 63 keeps 255 * 63 * 2 under 32767).

    NOTE: each channel's scale clips at the fraction of its max |w| that
    minimizes the squared quantization error (outliers otherwise waste levels).
    """
    flat = w.reshape(w.shape[0], -1).astype(np.float64)
    peak = np.abs(flat).max(axis=1)
    peak = np.where(peak > 0, peak, 1.0)
    best_scale, best_err = peak / levels, np.full(flat.shape[0], np.inf)
    for ratio in CLIP_RATIOS:
        scale = peak * ratio / levels
        err = ((np.clip(np.rint(flat / scale[:, None]), -levels, levels) * scale[:, None] - flat) ** 2).sum(axis=1)
        better = err < best_err
        best_scale, best_err = np.where(better, scale, best_scale), np.where(better, err, best_err)
    wq = np.clip(np.rint(flat / best_scale[:, None]), -levels, levels).astype(np.int8)
    return wq.reshape(w.shape), best_scale


# NOTE: dynamic products quantize in blocks of BLOCK along K (llama.cpp's Q8_0, OCP MXINT8): one scale per
# row and block of the activations, per output channel and block of the weights. A block's peak is about 2
# sigma where a 384-wide row's is 4-5 (and an outlier channel's 10-100): on MiniLM the summed per-node
# error of the 36 products (sqrt of the sum of squares, held-out sentences) falls from 3.7% (per row / per
# channel) to 2.0% (BLOCK 32), 1.41% (16) and 1.15% (8; 0.88% at 4). 8 is where it stops: a float32 scale
# per 8 values is 4 more bits a value (12 in all; Q8_0's fp16 scale per 32 is 8.5), and at 4 the "8-bit"
# products would carry as many bits in scales as in values. The CPU runs the blocks dequantized through
# float32 BLAS, so the block size costs no time there beyond the per-block pass over the activations.
BLOCK = 8


def block_setting(preferred: int | None = None) -> int:
    """The dynamic products' block size: NNHAL_DYNAMIC_BLOCK when set, else ``preferred`` (the devices'
    Description.dynamic_block: 0 whole rows, one scale per token, which the cpu device declares where its
    integer GEMM runs; int8 sums over the whole depth, about 3x the per-node error of blocks of 8, see
    docs/int8.md), else BLOCK."""
    text = os.environ.get("NNHAL_DYNAMIC_BLOCK", "")
    if not text:
        return BLOCK if preferred is None else preferred
    if not text.isdigit():
        raise OptionsError(f"NNHAL_DYNAMIC_BLOCK={text!r}: wanted a block size along K (0 for whole rows)")
    return int(text)


def dynamic_block(k: int, preferred: int | None = None) -> int:
    """The block size along K of a dynamic product of depth ``k``: the block setting (``block_setting``)
    when it divides k, else 0 (whole rows, one scale per token and per output channel)."""
    block = block_setting(preferred)
    return block if block and k % block == 0 and k > block else 0


# NOTE: a mixed-precision search lowers the same weights in every probe and in its sensitivity sweep; the
# MSE clipping search is the costly part (11 trial roundings), so recent results are kept by content
_BLOCKED: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_BLOCKED_ENTRIES = 256
_BLOCKED_LOCK = threading.Lock()


def forget_quantized_weights() -> None:
    """Empty the cache of ``per_block_int8`` (benchmarks time cold prepares with it)."""
    with _BLOCKED_LOCK:
        _BLOCKED.clear()


def per_block_int8(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 symmetric per output channel (axis 0) and per ``block`` columns of a 2-D ``w`` [N, K]:
    (wq [N, K], scales [N, K / block]); block 0 is ``per_channel_int8`` (scales [N]). Read-only results."""
    key = (hashlib.blake2b(np.ascontiguousarray(w).view(np.uint8).reshape(-1), digest_size=16).digest(),
           w.shape, w.dtype.str, block)
    with _BLOCKED_LOCK:
        if key in _BLOCKED:
            _BLOCKED.move_to_end(key)
            return _BLOCKED[key]
    if block:
        n, k = w.shape
        wq, scale = per_channel_int8(w.reshape(n * (k // block), block))
        wq, scale = wq.reshape(n, k), scale.reshape(n, k // block)
    else:
        wq, scale = per_channel_int8(w)
    wq.flags.writeable = scale.flags.writeable = False
    with _BLOCKED_LOCK:
        _BLOCKED[key] = (wq, scale)
        if len(_BLOCKED) > _BLOCKED_ENTRIES:
            _BLOCKED.popitem(last=False)
    return wq, scale


def fake_quantize_rows(x: np.ndarray, signed: bool, block: int = 0) -> np.ndarray:
    """``x`` [..., K] through dynamic 8-bit quantization and back, as DynamicQuantizeGemm does: one scale per
    row (token), or per row and ``block`` columns; int8 symmetric, uint8 asymmetric over [min(., 0), max(., 0)]."""
    k = x.shape[-1]
    rows = x.reshape(-1, k // block if block else 1, block or k).astype(np.float64)
    if signed:
        peak = np.abs(rows).max(axis=2, keepdims=True)
        scale = np.where(peak > 0, peak / 127.0, 1.0)
        return (np.clip(np.rint(rows / scale), -127, 127) * scale).reshape(x.shape).astype(np.float32)
    lo, hi = np.minimum(rows.min(axis=2, keepdims=True), 0), np.maximum(rows.max(axis=2, keepdims=True), 0)
    scale = np.where(hi > lo, (hi - lo) / 255.0, 1.0)
    zero = np.rint(-lo / scale)
    return ((np.clip(np.rint(rows / scale) + zero, 0, 255) - zero) * scale).reshape(x.shape).astype(np.float32)


def fake_quantize_blocks(x: np.ndarray, signed: bool, block: int) -> np.ndarray:
    """``fake_quantize_rows`` of a 2-D float32 ``x`` in float32: the DynamicQuantizeGemm host kernel's steps
    (hostkernels/nn_dynamic_quantize_gemm.py, the same bits as the cpu device's native pass); no block:
    ``fake_quantize_rows``."""
    from nnhal.hostkernels.nn_dynamic_quantize_gemm import fake_quantize_blocks as in_float32

    if not block:
        return fake_quantize_rows(x, signed, block)
    return in_float32(np.ascontiguousarray(x, np.float32), block, signed)


def uint8_params(lo: float, hi: float) -> Quantization:
    """Asymmetric uint8 parameters covering [lo, hi] and zero exactly."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zero_point = int(np.clip(np.rint(-lo / scale), 0, 255))
    return Quantization(np.array(scale, np.float32), np.array(zero_point, np.uint8))


def int8_params(lo: float, hi: float) -> Quantization:
    """Symmetric int8 parameters (zero point 0) covering [lo, hi]."""
    peak = max(abs(lo), abs(hi))
    return Quantization(np.array(peak / 127.0 if peak > 0 else 1.0, np.float32), np.array(0, np.int8))


def params_for(precision: str, lo: float, hi: float) -> Quantization:
    """Activation parameters of a quantized precision: uint8 asymmetric, int8 symmetric."""
    return uint8_params(lo, hi) if precision == "uint8" else int8_params(lo, hi)


def quantize_activations(graph: Graph, subgraphs: list[Subgraph], precision: str,
                         feeds: dict[str, np.ndarray] | None, table: Ranges | None = None,
                         method: str = "mse") -> Ranges:
    """Calibrate (unless ``table`` is given) and set Tensor.quant for the quantized subgraphs' tensors."""
    targets = [sg for sg in subgraphs if sg.precision in QUANTIZED]
    if not targets:
        return {}
    if table is None:
        missing = [n for n in graph.inputs if not feeds or n not in feeds]
        if missing:
            raise InputError(f"precision '{precision}' needs calibration data: set the inputs {missing} before "
                             "prerun_graph (their values calibrate the ranges), or pass Options(calibration=table)")
        table = calibrate_ranges(graph, [feeds], method)
    shared = clamped_by(graph, targets, table)
    for sg in targets:
        for node in sg.nodes:
            float_outputs = set(node.outputs) if node.name in sg.keep_fp32 else set()
            for name in node.inputs + node.outputs:
                if name in float_outputs:
                    continue
                t = graph.tensors.get(name) if name else None
                if t is None or t.dtype is None or t.dtype.kind != "f" or name not in table:
                    continue
                if t.quant is not None:
                    continue        # the model's own parameters (a folded Q/DQ pair) win
                t.quant = params_for(sg.precision, *table[shared.get(name, name)])
    return table


CLAMPS = ("Relu", "Clip")


def clamped_by(graph: Graph, subgraphs: list[Subgraph], table: Ranges) -> dict[str, str]:
    """Conv output -> the output of the Relu (or Clip) that is its sole reader, in the same quantized subgraph:
    the conv's output takes the clamp's parameters, as onnxruntime's quantizer gives it.

    Exact: quantizing is monotone, so quantize(clamp(x)) = clamp(quantize(x)) at the clamp's own parameters;
    the conv's codes then lose nothing the clamp keeps, and the clamp is a clamp of codes (no rescaling table),
    which the device may fold into the conv's requantization."""
    producers, consumers = graph.producers(), graph.consumers()
    shared: dict[str, str] = {}
    for sg in subgraphs:
        names = {node.name for node in sg.nodes} - set(sg.keep_fp32)
        for node in sg.nodes:
            src = node.inputs[0] if node.op_type in CLAMPS and node.inputs else ""
            conv = producers.get(src)
            if (conv is None or conv.op_type != "Conv" or {conv.name, node.name} - names or src in graph.outputs
                    or [n.name for n in consumers.get(src, [])] != [node.name] or node.outputs[0] not in table):
                continue
            shared[src] = node.outputs[0]
    return shared
