"""A Concat that reads every part of one Split, in order and along the Split's axis, reads the Split's input
instead (merge_split_parts).

YOLO's C2f block (and the anchor-free heads built from it) splits a convolution's output x into two halves,
runs bottlenecks on the second, and concatenates both halves with the bottlenecks' outputs:
``Concat(Split(x)[0], Split(x)[1], b1, b2)`` along the channels. The two halves side by side are x itself, so
the Concat reads x in their place. x is then read by the Split and the Concat only, and the planner
(plan.concat_slices) lets the convolution write x straight into its channel slice of the Concat's output:
the Split reads that slice through its pixel stride (SplitRows declares ``strided_input``) and the Concat
copies only the bottlenecks' parts. A part no other step reads any more (the first half) is no longer
produced: the Split's output becomes absent and the Split copies only what the bottlenecks read.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from nnhal.device.cpu.fusions import Chosen


def merge_split_parts(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """``chosen`` with each run of Concat inputs that is every output of one Split, in order, along the Concat's
    axis and of its dtype, replaced by that Split's input (see the module docstring); Split outputs then read
    by no step and not graph outputs are dropped from their Split. Only Concats whose kernel copies by rows
    (``writes_in_place``) are rewritten, and only for a static Split input of the Concat's rank."""
    producer = {name: pos for pos, c in enumerate(chosen) for name in c.node.outputs if name}
    result = list(chosen)
    merged = False
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type != "Concat" or node.domain or not getattr(kernel, "writes_in_place", False) \
                or not outs or outs[0].shape is None or len(ins) != len(node.inputs):
            continue
        rank = len(outs[0].shape)
        axis = node.attrs["axis"] % rank
        new_inputs, new_ins, k = [], [], 0
        while k < len(node.inputs):
            name = node.inputs[k]
            split = _whole_split(chosen, producer.get(name), name, node.inputs[k:], axis, rank, outs[0].dtype)
            if split is None:
                new_inputs.append(name)
                new_ins.append(ins[k])
                k += 1
                continue
            s_node, _, s_ins, _ = chosen[split]
            new_inputs.append(s_node.inputs[0])
            new_ins.append(s_ins[0])
            k += len(s_node.outputs)
        if len(new_inputs) == len(node.inputs):
            continue
        takes = getattr(kernel, "takes", None)
        if takes is not None and not takes(new_ins, outs):
            continue
        result[pos] = Chosen(replace(node, inputs=new_inputs), kernel, new_ins, outs)
        merged = True
    if not merged:
        return result
    reads = Counter(n for c in result for n in c.node.all_inputs if n)
    for pos, c in enumerate(result):
        if c.node.op_type == "Split" and not c.node.domain \
                and any(n and not reads[n] and n not in external for n in c.node.outputs):
            outputs = ["" if n and not reads[n] and n not in external else n for n in c.node.outputs]
            result[pos] = c._replace(node=replace(c.node, outputs=outputs))
    return result


def _whole_split(chosen: list[Chosen], pos: int | None, first: str, rest: list[str], axis: int, rank: int,
                 dtype) -> int | None:
    """The position of the Split whose outputs, in order, are the first of ``rest`` (``first``) and those after
    it, split along ``axis`` of a static input of ``rank`` axes and ``dtype``; None if there is none."""
    if pos is None:
        return None
    node, _, ins, _ = chosen[pos]
    if node.op_type != "Split" or node.domain or not node.inputs or node.outputs[0] != first \
            or not all(node.outputs) or list(rest[:len(node.outputs)]) != list(node.outputs):
        return None
    x = ins[0] if ins else None
    if x is None or not x.static or x.shape is None or len(x.shape) != rank or x.dtype is None \
            or np.dtype(x.dtype) != np.dtype(dtype) or node.attrs.get("axis", 0) % rank != axis:
        return None
    return pos
