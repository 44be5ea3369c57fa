"""Resize on the cpu device, channels last (beside the host's reference, hostkernels/op_resize.py, whose
separable tap tables it plans once)."""
from __future__ import annotations

from nnhal.hostkernels._nn import resample, resample_plan
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import resize_targets
from nnhal.operator.table import get_prototype


class ResizeNHWC(Kernel):
    """Resize of a channels-last image (the CPU layout pass keeps upsampling necks and decoders in NHWC): the
    reference's separable tap tables, planned once for the static shape and constant scales or sizes, with
    their axes moved to (N, H, W, C); a resized H takes whole rows, a resized W whole channel vectors."""

    op_type = "Resize"
    name = "nhwc"
    layout = "NHWC"

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or x.shape is None or len(x.shape) != 4 or not x.static or x.dtype.kind != "f":
            return 0
        extra = [i for i in ins[1:] if i is not None]
        return 1 if all(i.value is not None for i in extra) and outs[0].static else 0

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Resize")
        roi, scales, sizes = (None if i is None else i.value for i in proto.operands(node, ins))
        targets = resize_targets(node, ins[0].shape, scales, sizes, roi)
        to_nhwc = {0: 0, 1: 3, 2: 1, 3: 2}
        plan = [(to_nhwc[axis], idx, w, outside) for axis, idx, w, outside in resample_plan(node.attrs, ins[0].shape,
                                                                                           targets)]
        dtype = outs[0].dtype
        extrapolation = float(node.attrs["extrapolation_value"])

        def run(inputs, outputs):
            return (store(resample(inputs[0], plan, extrapolation, dtype), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (ResizeNHWC,)
