"""Pad on the CPU: crop for negative pads, then numpy pad."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import ints, put, zero_of
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_pad import pad_widths, static_pads


class PadKernel(Kernel):
    op_type = "Pad"

    def prepare(self, node, ins, outs) -> RunFn:
        mode = node.attrs["mode"]

        def run(inputs, outputs):
            x = inputs[0]
            if node.version < 11:
                pads, axes, value = static_pads(node), None, node.attrs["value"]
            else:
                pads = ints(inputs[1])
                axes = ints(inputs[3]) if len(inputs) > 3 else None
                value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            widths = pad_widths(node, x.ndim, pads, axes)
            # NOTE: negative pads crop first; the remaining (non-negative) pads then pad the crop.
            crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(widths))
            x = x[crop]
            widths = [(max(b, 0), max(e, 0)) for b, e in widths]
            if not any(b or e for b, e in widths):
                return (put(x, outputs[0]),)
            if mode == "constant":
                fill = zero_of(x.dtype) if value is None else np.asarray(value).reshape(-1)[0]
                y = np.pad(x, widths, mode="constant", constant_values=fill)
            else:
                y = np.pad(x, widths, mode=mode)
            return (put(y, outputs[0]) if outputs[0] is not None else y,)

        return run


IMPLEMENTATIONS = (PadKernel,)
