"""LSTM, GRU and DynamicQuantizeLSTM (com.microsoft) on the cpu device, fast: packed weights and in-place
gates (_recurrent.py) for the common case, beside the host references (hostkernels/op_lstm.py, op_gru.py,
ms_dynamic_quantize_lstm.py)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels import _recurrent
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.ms_dynamic_quantize_lstm import float_infos


class FastLSTMKernel(Kernel):
    """Packed weights, one GEMM for the input projection of every step and direction, in-place gates
    (_recurrent.py); the common case only (``_recurrent.fits``)."""

    op_type = "LSTM"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        return 2 if _recurrent.fits(node, ins, ("Sigmoid", "Tanh", "Tanh"), (5, 6)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        packed = _recurrent.pack(ins, 4, 4, 3)
        layout = node.attrs.get("layout", 0)
        reverse = tuple(d == 1 or node.attrs["direction"] == "reverse" for d in range(packed.directions))
        dtype = np.dtype(ins[0].dtype)

        def run(inputs, outputs):
            x = inputs[0]
            batch = x.shape[1 - layout]
            shape = (packed.directions, batch, packed.hidden)
            h = _recurrent.initial(inputs, 5, shape, layout)
            c = _recurrent.initial(inputs, 6, shape, layout)
            y, states = _recurrent.lstm(x, packed, h, c, reverse, layout)
            return _recurrent.finish(y, states, outputs, dtype, layout)

        return run


class FastGRUKernel(Kernel):
    """Packed weights, one GEMM for the input projection of every step and direction, in-place gates
    (_recurrent.py); the common case only (``_recurrent.fits``)."""

    op_type = "GRU"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        return 2 if _recurrent.fits(node, ins, ("Sigmoid", "Tanh"), (5,)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        packed = _recurrent.pack(ins, 3, 2, 2)
        layout = node.attrs.get("layout", 0)
        linear = bool(node.attrs.get("linear_before_reset", 0))
        reverse = tuple(d == 1 or node.attrs["direction"] == "reverse" for d in range(packed.directions))
        dtype = np.dtype(ins[0].dtype)

        def run(inputs, outputs):
            x = inputs[0]
            h = _recurrent.initial(inputs, 5, (packed.directions, x.shape[1 - layout], packed.hidden), layout)
            y, states = _recurrent.gru(x, packed, h, reverse, linear, layout)
            return _recurrent.finish(y, states, outputs, dtype, layout)

        return run


class FastDynamicQuantizeLSTMKernel(Kernel):
    """Constant weights: dequantized once at prepare, then the fast LSTM recurrence where it fits."""

    op_type = "DynamicQuantizeLSTM"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        floats = float_infos(ins)
        return 2 if floats is not None and FastLSTMKernel().score(node, floats, outs) > 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        run_fast = FastLSTMKernel().prepare(node, float_infos(ins), outs)
        return lambda inputs, outputs: run_fast(inputs[:8], outputs)


IMPLEMENTATIONS = (FastLSTMKernel, FastGRUKernel)
DOMAINS = {"com.microsoft": (FastDynamicQuantizeLSTMKernel,)}
