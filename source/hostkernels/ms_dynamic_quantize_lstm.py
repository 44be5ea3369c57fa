"""DynamicQuantizeLSTM (com.microsoft) on the CPU: W and R dequantized to float32, then the float LSTM
reference (the cpu device dequantizes constant weights once and runs its fast recurrence where it fits:
device/cpu/kernels/recurrent.py).

NOTE: onnxruntime also quantizes X and h to 8 bits per step before each product; nnhal keeps them in
float32, so its result is the float LSTM of the dequantized weights (closer to the model before quantization)
and differs from onnxruntime's by that activation rounding."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_lstm import LSTMKernel
from nnhal.operator.base import Info


def dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """(D, K, 4H) integers with (D,) or (D, 4H) scales and zero points -> float32 (D, 4H, K)."""
    d = q.shape[0]
    scale = np.asarray(scale, np.float32).reshape(d, 1, -1)
    zero = np.asarray(zero, np.float32).reshape(d, 1, -1)
    return np.ascontiguousarray(((q.astype(np.float32) - zero) * scale).transpose(0, 2, 1))


def float_infos(ins: list[Info | None]) -> list[Info | None] | None:
    """The float LSTM operand infos (W and R dequantized) when W, R and their parameters are constant."""
    if not all(ins[i] is not None and ins[i].value is not None for i in (1, 2, 8, 9, 10, 11)):
        return None
    w = dequantize(ins[1].value, ins[8].value, ins[9].value)
    r = dequantize(ins[2].value, ins[10].value, ins[11].value)
    return [ins[0], Info(w.dtype, w.shape, w), Info(r.dtype, r.shape, r), *ins[3:8]]


class DynamicQuantizeLSTMKernel(Kernel):
    """Any node: W and R dequantized at every run, then the reference LSTM."""

    op_type = "DynamicQuantizeLSTM"

    def prepare(self, node, ins, outs) -> RunFn:
        reference = LSTMKernel().prepare(node, ins[:8], outs)

        def run(inputs, outputs):
            w = dequantize(inputs[1], inputs[8], inputs[9])
            r = dequantize(inputs[2], inputs[10], inputs[11])
            return reference([inputs[0], w, r, *inputs[3:8]], outputs)

        return run


IMPLEMENTATIONS = (DynamicQuantizeLSTMKernel,)
