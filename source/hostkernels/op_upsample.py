"""Upsample on the CPU: Resize with asymmetric coordinates (nearest rounds down)."""
from __future__ import annotations

from nnhal.hostkernels._nn import resample, resample_plan
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import resize_targets
from nnhal.operator.table import get_prototype


class UpsampleKernel(Kernel):
    op_type = "Upsample"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Upsample")
        dtype = outs[0].dtype
        mode = "linear" if node.attrs["mode"] in ("linear", "bilinear") else "nearest"
        attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        plans: dict[tuple, list] = {}

        def run(inputs, outputs):
            x = inputs[0]
            scales = proto.scales(node, x.ndim, inputs)
            key = (x.shape, scales.tobytes())
            if key not in plans:
                plans[key] = resample_plan(attrs, x.shape, resize_targets(node, x.shape, scales, None))
            return (store(resample(x, plans[key], 0.0, dtype), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (UpsampleKernel,)
