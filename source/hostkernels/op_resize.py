"""Resize on the CPU: separable resampling, tap tables planned once per shape."""
from __future__ import annotations

from nnhal.hostkernels._nn import resample, resample_plan
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import resize_targets
from nnhal.operator.table import get_prototype


class ResizeKernel(Kernel):
    op_type = "Resize"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Resize")
        attrs = node.attrs
        dtype = outs[0].dtype
        extrapolation = float(attrs["extrapolation_value"])
        plans: dict[tuple, list] = {}

        def run(inputs, outputs):
            x = inputs[0]
            roi, scales, sizes = proto.operands(node, inputs)
            key = (x.shape, *(None if v is None else (v.tobytes(), v.shape) for v in (roi, scales, sizes)))
            plan = plans.get(key)
            if plan is None:
                targets = resize_targets(node, x.shape, scales, sizes, roi)
                plan = plans[key] = resample_plan(attrs, x.shape, targets)
            return (store(resample(x, plan, extrapolation, dtype), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (ResizeKernel,)
