"""Casts folded into the CPU layout pass's conversions: one pass instead of two at an NHWC region's edge; a
Cast to float16 followed by the Cast back to float32 (fp16 storage's rounding of a boundary tensor, fp16.py)
as one native step; and the roundings around a Concat whose output leaves the subgraph rounded (a decoder
step's KV cache: past + new -> present) as one rounding of the Concat's output (fuse_rounded_concats).

Under fp16 storage a graph input arrives as float16, is widened to float32 (a Cast) and then converted to
channels-last (an inserted ``to-nhwc`` step); at the other edge a ``to-nchw`` step is followed by the Cast
back to float16. Each pair reads and writes the whole tensor twice. The conversion writes into an output
of any float dtype (``np.copyto`` converts while it permutes), so the pair becomes one step: the Cast's
rounding is the same, only the order of two exact-or-identical element maps changes, so results are
bit-equal.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.fusions import Chosen
from nnhal.device.cpu.fusions import _readers as fusion_readers
from nnhal.device.cpu.kernels.cast import RoundHalf
from nnhal.device.cpu.kernels.concat import ConcatNative, ConcatRounded
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
        # a conversion that is a view (Relayout.view) reads and writes one dtype: no Cast folds into it
        if isinstance(c.kernel, Relayout) and not c.kernel.round_half and not c.kernel.view:
            nxt = only_reader(c.node.outputs[0])
            if nxt is not None and nxt not in dropped and _float_cast(chosen[nxt]):
                cast = chosen[nxt]
                node = fuse(c.node, cast.node, outputs=list(cast.node.outputs))
                result.append(Chosen(node, c.kernel, c.ins, [Info(cast.outs[0].dtype, c.outs[0].shape)]))
                dropped.add(nxt)
                continue
        if _float_cast(c):
            nxt = only_reader(c.node.outputs[0])
            if nxt is not None and nxt not in dropped and isinstance(chosen[nxt].kernel, Relayout) \
                    and not chosen[nxt].kernel.view:
                relayout = chosen[nxt]
                # NOTE: placed where the Cast was: its one input is ready there, its readers come later still
                node = fuse(relayout.node, c.node, inputs=[c.node.inputs[0]])
                result.append(Chosen(node, relayout.kernel, [c.ins[0]], relayout.outs))
                dropped.add(nxt)
                continue
        result.append(c)
    return result


def _rounding_of(c: Chosen) -> bool:
    """``c`` is a RoundHalf step (fuse_half_round_trips) of one float32 input and output."""
    return isinstance(c.kernel, RoundHalf) and len(c.node.inputs) == 1 and len(c.node.outputs) == 1


def fuse_rounded_concats(chosen: list[Chosen], external: set[str], channels_last: set[str] = frozenset()) \
        -> list[Chosen]:
    """A float32 Concat of static tensors whose output ``o`` is rounded by a RoundHalf into a subgraph output
    ``p`` (fp16 storage's boundary: a decoder step's present keys or values) writes ``p`` itself and rounds it
    in place (ConcatRounded); the RoundHalf goes, and the other readers of ``o`` read ``p``. A Concat input that
    is itself only a RoundHalf's output (the past cache rounded where it entered) is read unrounded: the one
    rounding of the output rounds it too, as rounding is idempotent. ``p`` is bit-equal to before: round(concat(
    round(past), new)) = round(concat(past, new)). The other readers now see the new row rounded to float16
    too, as true fp16 storage would hold it: the KV cache was read twice (the rounded past, the rounded
    present) and written twice more for one new row. Runs after the layout pass: a Concat of channels-last
    tensors (``channels_last``: the tensors it laid out so) is left alone."""
    reads, _, producer = fusion_readers(chosen)
    rename: dict[str, str] = {}
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    for pos, c in enumerate(chosen):
        if c.node.op_type != "Concat" or c.node.domain or len(c.node.outputs) != 1 \
                or not ConcatNative.takes(c.ins, c.outs) or np.dtype(c.outs[0].dtype) != np.dtype(np.float32):
            continue
        o = c.node.outputs[0]
        rounds = [j for j, r in enumerate(chosen) if o in r.node.inputs and _rounding_of(r)
                  and r.node.outputs[0] in external]
        if o in external or o in channels_last or not rounds \
                or any(o in set(r.node.all_inputs) - set(r.node.inputs) for r in chosen):
            continue
        j = rounds[0]
        p = chosen[j].node.outputs[0]
        inputs, infos = list(c.node.inputs), list(c.ins)
        node = c.node
        for k, name in enumerate(c.node.inputs):
            q = producer.get(name)
            if q is not None and q not in dropped and _rounding_of(chosen[q]) and reads[name] == 1 \
                    and name not in external:
                inputs[k], infos[k] = chosen[q].node.inputs[0], chosen[q].ins[0]
                node = fuse(node, chosen[q].node)
                dropped.add(q)
        node = fuse(node, chosen[j].node, inputs=inputs, outputs=[p])
        replaced[pos] = Chosen(node, ConcatRounded(), infos, chosen[j].outs)
        dropped.add(j)
        rename[o] = p
    if not replaced:
        return chosen
    result = []
    for pos, c in enumerate(chosen):
        if pos in dropped:
            continue
        c = replaced.get(pos, c)
        if any(n in rename for n in c.node.inputs):
            c = c._replace(node=dataclasses.replace(c.node, inputs=[rename.get(n, n) for n in c.node.inputs]))
        result.append(c)
    return result

