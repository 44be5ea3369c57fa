"""Dropout on the CPU: inference mode only (output = input, mask all true)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_dropout import scalar, training_rejected


class DropoutKernel(Kernel):
    op_type = "Dropout"
    view = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        mask_dtype = np.dtype(np.bool_) if node.version >= 10 else ins[0].dtype
        default_ratio = node.attrs.get("ratio", 0.5)

        def run(inputs, outputs):
            x = inputs[0]
            ratio = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
            training = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            # NOTE: before opset 12 Dropout is treated as in inference (is_test) mode.
            if training is not None and scalar(training) and (default_ratio if ratio is None else scalar(ratio)) > 0:
                raise training_rejected(node)
            if len(outputs) < 2:
                return (x,)
            mask = outputs[1] if outputs[1] is not None else np.empty(x.shape, mask_dtype)
            mask.fill(1)
            return (x, mask)

        return run


IMPLEMENTATIONS = (DropoutKernel,)
