"""QuantizeLinear and DequantizeLinear with one constant scale and zero point, float32 <-> uint8 / int8, by the
native one-pass kernels (native/nn_qdq.h), and DynamicQuantizeLinear's quantization by the same pass; the
numpy reference (hostkernels/op_quantize_linear.py,
op_dequantize_linear.py) takes per-axis and blocked parameters, other types and computed parameters.

Static QDQ models (onnxruntime.quantization's QDQ format) put one of these around every quantized tensor a
float op reads or writes: on MiniLM they were 30% of nnhal's run time on the reference kernels (five numpy
passes, one of them in float64). Both compute the ONNX arithmetic in float32 in the same order: bit-equal.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_dynamic_quantize_linear import DynamicQuantizeLinearKernel
from nnhal.operator.base import Info

F32 = np.dtype(np.float32)
EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def _constant(info: Info | None) -> np.ndarray | None:
    return None if info is None or info.value is None else np.asarray(info.value)


def parameters(node, ins: list[Info | None], quantized: np.dtype | None) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor Q/DQ whose constant float32 scale is positive and finite and whose
    zero point (absent: 0) is of the 8-bit type ``quantized``; else None."""
    if node.attrs.get("block_size", 0) or node.attrs.get("precision", 0) or quantized not in EIGHT_BIT:
        return None
    scale = _constant(ins[1]) if len(ins) > 1 else None
    if scale is None or scale.size != 1 or scale.dtype != F32 or not np.isfinite(scale).all() \
            or not float(scale.reshape(())) > 0:
        return None
    zero_info = ins[2] if len(ins) > 2 else None
    if zero_info is None:
        return float(scale.reshape(())), 0
    zero = _constant(zero_info)
    if zero is None or zero.size != 1 or zero.dtype != quantized:
        return None
    return float(scale.reshape(())), int(zero.reshape(()))


def _output(outputs: list, shape: tuple, dtype: np.dtype) -> np.ndarray:
    y = outputs[0] if outputs else None
    if y is None or y.shape != shape or y.dtype != dtype or not y.flags.c_contiguous:
        y = np.empty(shape, dtype)
    return y


def _run(call, scale: float, zero: int, dtype: np.dtype) -> RunFn:
    def run(inputs: list, outputs: list):
        x = np.ascontiguousarray(inputs[0])
        y = _output(outputs, x.shape, dtype)
        call(x, y, scale, zero)
        return (y,)

    return run


class QuantizeLinearNative(Kernel):
    """float32 -> uint8 / int8, one constant scale and zero point, in one native pass."""

    op_type = "QuantizeLinear"
    name = "native"

    def score(self, node, ins, outs) -> int:
        if not native.available() or ins[0] is None or ins[0].dtype is None or np.dtype(ins[0].dtype) != F32:
            return 0
        out = np.dtype(outs[0].dtype) if outs and outs[0].dtype is not None else None
        return 5 if parameters(node, ins, out) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = np.dtype(outs[0].dtype)
        return _run(native.quantize_linear, *parameters(node, ins, dtype), dtype)


class DequantizeLinearNative(Kernel):
    """uint8 / int8 -> float32, one constant scale and zero point, in one native pass."""

    op_type = "DequantizeLinear"
    name = "native"

    def score(self, node, ins, outs) -> int:
        if not native.available() or ins[0] is None or ins[0].dtype is None:
            return 0
        if not outs or outs[0].dtype is None or np.dtype(outs[0].dtype) != F32:
            return 0
        return 5 if parameters(node, ins, np.dtype(ins[0].dtype)) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return _run(native.dequantize_linear, *parameters(node, ins, np.dtype(ins[0].dtype)), F32)


class DynamicQuantizeLinearNative(DynamicQuantizeLinearKernel):
    """DynamicQuantizeLinear of float32: the scale and zero point as the numpy kernel forms them, the
    quantization by the native pass (what onnxruntime's quantize_dynamic puts before every MatMulInteger)."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        ok = native.available() and ins[0] is not None and ins[0].dtype is not None and np.dtype(ins[0].dtype) == F32
        return 5 if ok else 0

    def compute(self, node, x):
        if not x.size or x.dtype != F32:
            return super().compute(node, x)
        hi, lo = max(0.0, float(np.max(x))), min(0.0, float(np.min(x)))
        if not (np.isfinite(hi) and np.isfinite(lo)):
            return super().compute(node, x)          # NaN or infinities: the reference's own (undefined) result
        f32 = np.float32
        scale = f32(f32(hi) - f32(lo)) / f32(255) if hi != lo else f32(1)
        if not scale > 0:                             # a subnormal range: the reference's arithmetic
            return super().compute(node, x)
        zero = int(np.rint(np.clip(f32(0) - f32(lo) / scale, 0, 255)))
        y = np.empty(x.shape, np.uint8)
        native.quantize_linear(np.ascontiguousarray(x), y, float(scale), zero)
        return y, np.array(scale, dtype=f32), np.array(zero, dtype=np.uint8)


IMPLEMENTATIONS = (QuantizeLinearNative, DequantizeLinearNative, DynamicQuantizeLinearNative)
