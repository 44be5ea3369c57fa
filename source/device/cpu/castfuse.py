"""Casts folded into the CPU layout pass's conversions: one pass instead of two at an NHWC region's edge; and a
Cast to float16 followed by the Cast back to float32 (fp16 storage's rounding of a boundary tensor, fp16.py)
as one native step.

Under fp16 storage a graph input arrives as float16, is widened to float32 (a Cast) and then converted to
channels-last (an inserted ``to-nhwc`` step); at the other edge a ``to-nchw`` step is followed by the Cast
back to float16. Each pair reads and writes the whole tensor twice. The conversion writes into an output
of any float dtype (``np.copyto`` converts while it permutes), so the pair becomes one step: the Cast's
rounding is the same, only the order of two exact-or-identical element maps changes, so results are
bit-equal.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.fusions import Chosen
from nnhal.device.cpu.kernels.cast import RoundHalf
from nnhal.device.cpu.layout import Relayout
from nnhal.hostkernels.fused import fuse
from nnhal.operator.base import Info

_FLOATS = (np.float16, np.float32, np.float64)


def _float_cast(c: Chosen) -> bool:
    """A Cast between two different float dtypes with one output (not a fused round trip, which keeps its
    dtype and is no conversion a relayout could do)."""
    return c.node.op_type == "Cast" and not c.node.domain and len(c.node.outputs) == 1 and bool(c.ins) \
        and c.ins[0] is not None and c.ins[0].dtype in _FLOATS and c.outs[0].dtype in _FLOATS \
        and np.dtype(c.ins[0].dtype) != np.dtype(c.outs[0].dtype)


def _rounding(relayout: Chosen, c: Chosen) -> bool:
    """``c`` is fp16 storage's RoundHalf of the float32 tensor ``relayout`` converts into (layout.py's
    Relayout then rounds in the same pass: native transpose_round; ResizeToNCHW each row as it is written)."""
    return isinstance(c.kernel, RoundHalf) and len(c.node.outputs) == 1 and bool(relayout.outs) \
        and relayout.ins[0] is not None and np.dtype(relayout.ins[0].dtype) == np.dtype(np.float32) \
        and np.dtype(relayout.outs[0].dtype) == np.dtype(np.float32) and native.available()


def _readers(chosen: list[Chosen]) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = {}
    for pos, c in enumerate(chosen):
        for name in dict.fromkeys(c.node.all_inputs):
            if name:
                readers.setdefault(name, []).append(pos)
    return readers


def fuse_half_round_trips(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """A Cast float32 -> float16 whose output only a Cast float16 -> float32 reads (and that leaves no
    subgraph) becomes one RoundHalf step: the native rounding in one pass, in place where the planner
    allows, instead of two conversions and a float16 tensor between them. Bit-equal: the same two roundings."""
    readers = _readers(chosen)
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    result, dropped = [], set()
    for pos, c in enumerate(chosen):
        if pos in dropped:
            continue
        if _float_cast(c) and np.dtype(c.ins[0].dtype) == f32 and np.dtype(c.outs[0].dtype) == f16 \
                and RoundHalf.takes(c.ins):
            mid = c.node.outputs[0]
            found = readers.get(mid, [])
            back = chosen[found[0]] if len(found) == 1 and mid not in external else None
            if back is not None and found[0] not in dropped and _float_cast(back) \
                    and np.dtype(back.outs[0].dtype) == f32:
                node = fuse(c.node, back.node, outputs=list(back.node.outputs))
                result.append(Chosen(node, RoundHalf(), c.ins, back.outs))
                dropped.add(found[0])
                continue
        result.append(c)
    return result


def fuse_relayout_casts(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Fold a float Cast into the layout conversion next to it (the Cast reads the conversion's output, or
    the conversion reads the Cast's, and the tensor between has no other reader and is no subgraph output)."""
    readers = _readers(chosen)

    def only_reader(name: str) -> int | None:
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and name not in external else None

    result, dropped = [], set()
    for pos, c in enumerate(chosen):
        if pos in dropped:
            continue
        if getattr(c.kernel, "round_half", None) is False:
            # a layout conversion or the Resize writing NCHW (kernels/resize.py ResizeToNCHW): ``rounding()``
            nxt = only_reader(c.node.outputs[0])
            if nxt is not None and nxt not in dropped and _rounding(c, chosen[nxt]):
                # fp16 storage's rounding after the conversion (a segmentation mask): one rounding pass
                node = fuse(c.node, chosen[nxt].node, outputs=list(chosen[nxt].node.outputs))
                result.append(Chosen(node, c.kernel.rounding(), c.ins, c.outs))
                dropped.add(nxt)
                continue
        if isinstance(c.kernel, Relayout) and not c.kernel.round_half:
            nxt = only_reader(c.node.outputs[0])
            if nxt is not None and nxt not in dropped and _float_cast(chosen[nxt]):
                cast = chosen[nxt]
                node = fuse(c.node, cast.node, outputs=list(cast.node.outputs))
                result.append(Chosen(node, c.kernel, c.ins, [Info(cast.outs[0].dtype, c.outs[0].shape)]))
                dropped.add(nxt)
                continue
        if _float_cast(c):
            nxt = only_reader(c.node.outputs[0])
            if nxt is not None and nxt not in dropped and isinstance(chosen[nxt].kernel, Relayout):
                relayout = chosen[nxt]
                # NOTE: placed where the Cast was: its one input is ready there, its readers come later still
                node = fuse(relayout.node, c.node, inputs=[c.node.inputs[0]])
                result.append(Chosen(node, relayout.kernel, [c.ins[0]], relayout.outs))
                dropped.add(nxt)
                continue
        result.append(c)
    return result
