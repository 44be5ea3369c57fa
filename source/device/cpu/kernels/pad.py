"""Pad on the cpu device by slice assignments planned once (the reference: hostkernels/op_pad.py).

np.pad allocates its result, then pads one axis at a time through generic index machinery. With the pads
known at prepare, a run is one copy of the (cropped) input into the interior of the planned output and one
assignment per padded side: a constant for ``constant`` mode, else a slice of the output itself, filled
axis by axis so later axes read the pads of earlier ones (np.pad's order): ``edge`` broadcasts the border
row, ``reflect`` reads the mirrored rows (without the border), ``wrap`` the rows of the other end.
"""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import zero_of
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_pad import pad_widths, static_pads


def constant_widths(node, ins) -> list[tuple[int, int]] | None:
    """(begin, end) per axis when the pads (and axes) are known at prepare, else None."""
    x = ins[0]
    if x is None or x.shape is None:
        return None
    if node.version < 11:
        pads, axes = static_pads(node), None
    else:
        pads_info = ins[1] if len(ins) > 1 else None
        axes_info = ins[3] if len(ins) > 3 else None
        if pads_info is None or pads_info.value is None or (axes_info is not None and axes_info.value is None):
            return None
        pads = [int(p) for p in np.asarray(pads_info.value).reshape(-1)]
        axes = None if axes_info is None else [int(a) for a in np.asarray(axes_info.value).reshape(-1)]
    try:
        return pad_widths(node, len(x.shape), pads, axes)
    except ValueError:
        return None


def _source(mode: str, begin: bool, n: int, b: int, e: int) -> slice | None:
    """The rows of the padded axis (output indices) one side of ``mode`` copies; None for a constant."""
    if mode == "constant":
        return None
    if mode == "edge":
        return slice(b, b + 1) if begin else slice(b + n - 1, b + n)
    if mode == "reflect":
        last = b + n - 2 - e
        return slice(2 * b, b, -1) if begin else slice(b + n - 2, last if last >= 0 else None, -1)
    return slice(n, b + n) if begin else slice(b, b + e)        # wrap


def _side_plans(mode: str, shape: tuple, widths: list[tuple[int, int]]) -> list[tuple[tuple, tuple | None]]:
    """(destination, source) index tuples of the output, one per padded side, in fill order; the source is
    None for constant mode. Axes before the padded one are filled already (full range); later ones hold only
    the interior so far."""
    plans = []
    for axis, (b, e) in enumerate(widths):
        n = shape[axis]
        before = (slice(None),) * axis
        after = tuple(slice(wb, wb + shape[a]) for a, (wb, _) in enumerate(widths) if a > axis)
        for begin, size in ((True, b), (False, e)):
            if size:
                src = _source(mode, begin, n, b, e)
                dst = slice(0, b) if begin else slice(b + n, b + n + e)
                plans.append((before + (dst,) + after, None if src is None else before + (src,) + after))
    return plans


class PadSlices(Kernel):
    """Pads known at prepare, of a static input: a crop (negative pads) and slice assignments
    (module docstring). Reflect and wrap pads wider than what they read fall to the reference."""

    op_type = "Pad"
    name = "slices"

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or not x.static or not outs[0].static or x.dtype is None or x.dtype.hasobject:
            return 0
        widths = constant_widths(node, ins)
        if widths is None or (node.version >= 11 and len(ins) > 2 and ins[2] is not None and ins[2].value is None):
            return 0
        mode = node.attrs["mode"]
        cropped = [d - max(-b, 0) - max(-e, 0) for d, (b, e) in zip(x.shape, widths)]
        for n, (b, e) in zip(cropped, widths):
            if mode == "reflect" and (max(b, e) > n - 1) and (b > 0 or e > 0):
                return 0
            if mode in ("wrap", "edge") and n == 0 and (b > 0 or e > 0):
                return 0
            if mode == "wrap" and max(b, e) > n:
                return 0
        return 5

    # the order of the ONNX axes in the tensors the run gets (None: as ONNX has them)
    perm: tuple[int, ...] | None = None

    def prepare(self, node, ins, outs) -> RunFn:
        perm = self.perm or tuple(range(len(ins[0].shape)))
        widths = [constant_widths(node, ins)[a] for a in perm]
        x_shape, shape, dtype = [ins[0].shape[a] for a in perm], tuple(outs[0].shape[a] for a in perm), outs[0].dtype
        mode = node.attrs["mode"]
        crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x_shape, widths))
        widths = [(max(b, 0), max(e, 0)) for b, e in widths]
        cropped = tuple(s.stop - s.start for s in crop)
        interior = tuple(slice(b, b + n) for n, (b, _) in zip(cropped, widths))
        plans = _side_plans(mode, cropped, widths)
        if node.version < 11:
            fill = np.asarray(node.attrs["value"], dtype)
        else:
            value = ins[2].value if len(ins) > 2 and ins[2] is not None else None
            fill = zero_of(dtype) if value is None else np.asarray(value).reshape(-1)[0].astype(dtype)

        def run(inputs, outputs):
            out = outputs[0]
            if out is None:
                out = np.empty(shape, dtype)
            out[interior] = inputs[0][crop]
            for dst, src in plans:
                out[dst] = fill if src is None else out[src]
            return (out,)

        return run


class PadSlicesNHWC(PadSlices):
    """The same on a 4-D tensor stored channels last inside a convolutional region (device/cpu/layout.py):
    a reflect or replicate padding between two convolutions (style transfer, super-resolution) no longer
    sends the region back to NCHW and forth."""

    name = "nhwc-slices"
    layout = "NHWC"
    perm = (0, 2, 3, 1)

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        return super().score(node, ins, outs) if x is not None and x.shape is not None and len(x.shape) == 4 else 0


IMPLEMENTATIONS = (PadSlices, PadSlicesNHWC)
