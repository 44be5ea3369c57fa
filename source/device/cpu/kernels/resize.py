"""Resize on the cpu device, channels last (beside the host's reference, hostkernels/op_resize.py, whose
separable tap tables it plans once).

Resize of a channels-last image on the cpu device by the native separable kernel (kernels.c
nn_resize_rows): the reference's tap tables (hostkernels/_nn.py resample_plan: nearest, linear, cubic,
antialias, every coordinate transformation), planned once for the static shape and constant scales or sizes,
applied H then W in one pass over the output, whole channel vectors at a time, rows split over the native pool.
The numpy NHWC kernel (hostkernels/op_resize.py ResizeNHWC) gathers and multiplies a full tensor per tap.

Taken when only H and W are resized and no output coordinate falls outside the input (tf_crop_and_resize's
extrapolation stays with the numpy kernel). Results: the same float32 products and sums in the same order as
the reference, up to the compiler's fused multiply-adds (one rounding fewer per tap).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import contiguous_io, evenly_spaced_pixels
from nnhal.hostkernels._nn import resample, resample_plan
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import resize_targets
from nnhal.operator.table import get_prototype

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


class ResizeNHWC(Kernel):
    """Resize of a channels-last image (the CPU layout pass keeps upsampling necks and decoders in NHWC): the
    reference's separable tap tables, planned once for the static shape and constant scales or sizes, with
    their axes moved to (N, H, W, C); a resized H takes whole rows, a resized W whole channel vectors."""

    op_type = "Resize"
    name = "nhwc"
    layout = "NHWC"
    kinds = "f"     # the input dtype kinds taken

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or x.shape is None or len(x.shape) != 4 or not x.static or x.dtype.kind not in self.kinds:
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


class ResizeNHWC8(ResizeNHWC):
    """Nearest-neighbour Resize of 8-bit codes, channels last (a quantized network's upsampling neck, as YOLO's,
    stays in its integer NHWC region): the reference's nearest gather (whole channel vectors) on the codes
    themselves, exact (picking a code is picking its value; the tensor keeps its input's parameters)."""

    name = "nhwc-8bit"
    kinds = "iu"

    def score(self, node, ins, outs) -> int:
        if node.attrs.get("mode", "nearest") != "nearest" or ins[0] is None \
                or np.dtype(ins[0].dtype) not in EIGHT_BIT or outs[0].dtype != ins[0].dtype:
            return 0
        return super().score(node, ins, outs)


MAX_TAPS = 64       # kernels.c nn_resize_taps
H_AXIS, W_AXIS = 2, 3


def _tables(node, ins) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """(rows, columns) tap tables as (int32 indices, float32 weights), or None when the native kernel cannot
    run this Resize (a batch or channel axis resized, extrapolated coordinates, too many taps)."""
    proto = get_prototype("", "Resize")
    roi, scales, sizes = (None if i is None else i.value for i in proto.operands(node, ins))
    shape = tuple(ins[0].shape)
    plan = resample_plan(node.attrs, shape, resize_targets(node, shape, scales, sizes, roi))
    tables = {H_AXIS: None, W_AXIS: None}
    for axis, idx, w, outside in plan:
        if axis not in tables or outside is not None or idx.shape[1] > MAX_TAPS:
            return None
        weights = np.ones(idx.shape, np.float32) if w is None else w.astype(np.float32)
        tables[axis] = (np.ascontiguousarray(idx, np.int32), np.ascontiguousarray(weights))
    for axis, length in ((H_AXIS, shape[H_AXIS]), (W_AXIS, shape[W_AXIS])):
        if tables[axis] is None:
            tables[axis] = (np.arange(length, dtype=np.int32)[:, None], np.ones((length, 1), np.float32))
    return tables[H_AXIS], tables[W_AXIS]


class ResizeNHWCNative(ResizeNHWC):
    """Resize of a static float32 channels-last image with constant scales or sizes, natively."""

    name = "nhwc-native"
    # the output may be a channel slice of a wider channels-last tensor (plan.concat_slices): an FPN/PAN neck's
    # or DBNet's upsampled maps written straight into their Concat, which then copies nothing
    strided_output = True

    def score(self, node, ins, outs) -> int:
        if not native.available() or super().score(node, ins, outs) == 0 or ins[0].dtype != np.float32 \
                or outs[0].dtype != np.float32:
            return 0
        return 2 if _tables(node, ins) is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        (hidx, hw), (widx, ww) = _tables(node, ins)
        n, c = ins[0].shape[0], ins[0].shape[1]
        oshape = (n, hidx.shape[0], widx.shape[0], c)          # NHWC
        rows = n * hidx.shape[0]
        work = rows * widx.shape[0] * c * (hidx.shape[1] + widx.shape[1])
        resize = native.resize_nhwc

        def run(inputs, outputs):
            x = inputs[0] if inputs[0].flags.c_contiguous else np.ascontiguousarray(inputs[0])
            y = outputs[0] if outputs[0] is not None else np.empty(oshape, np.float32)
            if not evenly_spaced_pixels(y):
                # NOTE: an output whose pixels are not evenly spaced cannot come from the CPU plan; kept correct anyway
                np.copyto(y, run([x], [None])[0])
                return (y,)
            parts = parallel.native_parts(work, rows) if parallel.native_pool() else 1
            resize(x, y, hidx, hw, widx, ww, parts)
            return (y,)

        in_shape = (n, ins[0].shape[2], ins[0].shape[3], c)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
            x, y = inputs[0], outputs[0]
            if x is None or y is None or x.dtype != np.float32 or y.dtype != np.float32 or x.shape != in_shape \
                    or y.shape != oshape or not x.flags.c_contiguous or not evenly_spaced_pixels(y):
                return None
            return partial(resize, x, y, hidx, hw, widx, ww,
                           parallel.native_parts(work, rows) if parallel.native_pool() else 1)

        run.bind = bind
        return run

    def nchw_output(self, node, ins, outs) -> Kernel | None:
        """This Resize reading its NHWC input and writing its output in ONNX's NCHW (the layout pass's hook
        for a channels-last region ending in a Resize: a segmentation mask upsampled into the graph output);
        None unless it upsamples H (kernels.c resize_to_nchw passes W over every source row first)."""
        return ResizeToNCHW() if ins[0].shape[H_AXIS] <= outs[0].shape[H_AXIS] else None


class ResizeToNCHW(ResizeNHWCNative):
    """The native Resize of a channels-last image writing NCHW (kernels.c resize_to_nchw, nn_resize_nchw.h:
    the same tap tables applied W then H, one channel plane at a time), so the largest tensor of a
    segmentation model is written once instead of resized and then converted back: (1, 32, 32, 8) to
    (1, 8, 256, 256) bilinear in 0.27 ms against 0.69 for resize_nhwc and the conversion (one thread, loaded
    2-core EPYC, min of 30). Results differ from the NHWC kernel's by float32 rounding (the two passes'
    products re-associated)."""

    name = "nhwc-to-nchw"
    strided_output = False      # its NCHW output is C-contiguous

    def __init__(self, round_half: bool = False):
        self.round_half = round_half

    def rounding(self) -> Kernel:
        """This kernel with fp16 storage's rounding of its float32 output folded in (castfuse.py): each output
        row rounded through float16 while in L1, bit-equal to the RoundHalf step after it."""
        return ResizeToNCHW(round_half=True)

    def prepare(self, node, ins, outs) -> RunFn:
        (hidx, hw), (widx, ww) = _tables(node, ins)
        n, c = ins[0].shape[0], ins[0].shape[1]
        oshape = (n, c, hidx.shape[0], widx.shape[0])          # NCHW
        rows = n * c * hidx.shape[0]
        work = rows * widx.shape[0] * hidx.shape[1] + n * ins[0].shape[H_AXIS] * widx.shape[0] * c * widx.shape[1]
        resize, round_half = native.resize_to_nchw, int(self.round_half)

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, oshape, np.float32)
            parts = parallel.native_parts(work, rows) if parallel.native_pool() else 1
            resize(x, y, hidx, hw, widx, ww, parts, round_half)
            return (y,)

        return run


# ResizeToNCHW is not listed: only the layout pass takes it, through ResizeNHWCNative.nchw_output
IMPLEMENTATIONS = (ResizeNHWC, ResizeNHWC8, ResizeNHWCNative)
