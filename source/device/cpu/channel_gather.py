"""Channel selections of the CPU plan as one Gather of the channel axis.

ShuffleNet v2's blocks split the shuffled channels in two halves (``torch.chunk``: two Slices of axis 1);
the optimizer's movement pass (optimizer/movement.py) folds the channel shuffle and each half's Slice into
a row gather of the NCHW storage, Reshape(x, [R, L]) -> Gather(axis 0, constant rows) -> Reshape(N, C', H, W),
whose rows are whole channel planes. In that form the layout pass sees two reshapes and a gather of a 2-D
matrix, none of them layout-free, so every such block converted its concatenation to NCHW and its half
back to NHWC. ``fuse_channel_selections`` turns such a chain, and a plain Slice of the channel axis of a
4-D tensor, into ``Gather(x, p, axis=1)`` with constant indices ``p`` (out[:, c] = x[:, p[c]]), which the
layout pass runs on whichever layout ``x`` has (in NHWC it is kernels/gather.py's native pick of each
pixel's channels): the region stays channels-last.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels import select
from nnhal.errors import NnhalError
from nnhal.graph.node import Node
from nnhal.hostkernels.evaluate import evaluate_node
from nnhal.operator.base import Info

# the index map of a chain is computed on an int64 array of its source's size, once at prepare
MAX_ELEMENTS = 1 << 24


def _image(info: Info | None) -> bool:
    return info is not None and info.value is None and info.static and info.dtype is not None \
        and info.shape is not None and len(info.shape) == 4


def channel_selection(index: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """p with ``index == arange(prod(shape)).reshape(shape)[:, p]`` when the flat index map ``index`` of a
    4-D result picks whole channels of an (N, C, H, W) source of ``shape``; else None."""
    n, c, h, w = shape
    if index.ndim != 4 or index.shape[0] != n or index.shape[2:] != (h, w) or index.shape[1] == 0:
        return None
    p = index[0, :, 0, 0] // (h * w) % c
    base = np.arange(n * c * h * w, dtype=np.int64).reshape(shape)
    return p if np.array_equal(index, base[:, p]) else None


def _index_map(chain: list[Chosen], size: int) -> np.ndarray | None:
    """The chain's nodes run on the flat indices of its source (inputs other than the data: constants)."""
    v = np.arange(size, dtype=np.int64)
    for node, _, ins, outs in chain:
        if any(name and (i is None or i.value is None) for name, i in zip(node.inputs[1:], ins[1:])):
            return None
        src = v.reshape(ins[0].shape)
        try:
            v = evaluate_node(node, [src] + [None if i is None else i.value for i in ins[1:]], list(outs))[0]
        except (NnhalError, ValueError, IndexError):
            return None
    return v


def _chain_from(chosen: list[Chosen], pos: int, reads, reader, external: set[str]) -> list[int] | None:
    """The positions of a channel-selecting chain starting at ``pos``: a Slice of a 4-D tensor, or the
    movement pass's Reshape -> Gather(axis 0) -> Reshape; None when ``pos`` starts neither."""
    node, _, ins, outs = chosen[pos]
    if node.domain or not ins or not _image(ins[0]) or not outs or outs[0] is None:
        return None
    if node.op_type == "Slice":
        return [pos] if _image(outs[0]) and len(node.outputs) == 1 else None
    if node.op_type != "Reshape" or not outs[0].static or len(outs[0].shape) != 2:
        return None
    chain = [pos]
    for op in ("Gather", "Reshape"):
        name = chosen[chain[-1]].node.outputs[0]
        if name in external or reads[name] != 1:
            return None
        nxt = reader[name]
        n2, _, _, o2 = chosen[nxt]
        if n2.op_type != op or n2.domain or n2.inputs[0] != name or not o2 or o2[0] is None or not o2[0].static \
                or op == "Gather" and n2.attrs.get("axis", 0) != 0:
            return None
        chain.append(nxt)
    return chain if _image(chosen[chain[-1]].outs[0]) else None


def fuse_channel_selections(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) \
        -> list[Chosen]:
    """Each chain that selects whole channels of a 4-D tensor (see the module's note) becomes one
    ``Gather(axis=1)`` by constant indices; the chain's intermediates must have no other reader and not
    leave the subgraph. New constants (the indices) go into ``constants``."""
    reads, reader, _ = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    for pos, entry in enumerate(chosen):
        if pos in dropped:
            continue
        chain = _chain_from(chosen, pos, reads, reader, external)
        if chain is None:
            continue
        x = entry.ins[0]
        size = int(np.prod(x.shape, dtype=np.int64))
        if size > MAX_ELEMENTS:
            continue
        index = _index_map([chosen[k] for k in chain], size)
        p = None if index is None else channel_selection(np.asarray(index), tuple(x.shape))
        if p is None:
            continue
        last = chosen[chain[-1]]
        indices = f"{entry.node.name}/channels"
        constants[indices] = p.astype(np.int64)
        gather = Node(f"{entry.node.name}/channel_gather", "Gather", [entry.node.inputs[0], indices],
                      [last.node.outputs[0]], {"axis": 1}, opset=13, version=13)
        g_ins = [x, Info(np.dtype(np.int64), (len(p),), constants[indices])]
        g_outs = list(last.outs)
        try:
            replaced[pos] = Chosen(gather, select(gather, g_ins, g_outs), g_ins, g_outs)
        except NnhalError:
            continue
        dropped.update(chain[1:])
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]
