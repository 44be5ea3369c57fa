"""The CPU plan's rotary-embedding fusion: the exported rotate-half chain becomes one native step.

torch.onnx exports Llama's ``apply_rotary_pos_emb`` (``q * cos + rotate_half(q) * sin``, ``rotate_half(x) =
cat(-x[..., h:], x[..., :h])``) as ``Slice(x, 0:h)``, ``Slice(x, h:)``, ``Neg``, ``Concat(last axis)``,
``Mul(x, cos)``, ``Mul(concat, sin)``, ``Add``: seven steps for each of q and k in every layer, each a few
microseconds of dispatch against a few hundred elements of a decode step. ``fuse_rotary`` replaces each such
chain, float32 of static shapes, by one RotaryHalf node (domain ``ai.nnhal.cpu``, kernels/rotary.py
``RotaryNative``), when cos and sin have one shape that broadcasts to x's over one block of axes (the heads) with
the last axis in full. The native step computes the same two products and one sum per element. Every
intermediate must have one reader and not leave the subgraph; anything else keeps the separate steps.

The halves are recognized by what they hold, not by how they are spelled: the optimizer's
collapse_data_movement may have turned a head split followed by a Slice into a row gather (Reshape -> Gather ->
Reshape of the projection), so each half and x are traced back through pure data movement (Reshape, Transpose,
Gather or Slice by constants, Squeeze, Unsqueeze, Flatten, Identity) to a common source, and the element
indices of that source they hold (the chain run on ``arange``, as movement.py does) must be x's first and second
halves of the last axis. Movement steps left unread by the fusion are dropped.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.fusions import Chosen, _readers, sole_reader
from nnhal.device.cpu.kernels.rotary import RotaryNative
from nnhal.graph.node import Node
from nnhal.operator.base import Info

_F32 = np.dtype(np.float32)


def _ints(info: Info | None) -> list[int] | None:
    if info is None or info.value is None:
        return None
    return [int(v) for v in np.asarray(info.value).reshape(-1)]


_MOVES = ("Reshape", "Transpose", "Gather", "Slice", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_TRACE_MAX = 1 << 20     # elements of a source traced at prepare (the index maps are int64 copies of it)


def _moved(entry: Chosen, idx: np.ndarray) -> np.ndarray | None:
    """A movement node run on an index array (its input's shape), or None when it is not one this handles."""
    node, ins, out = entry.node, entry.ins, entry.outs[0]
    if node.domain or out.shape is None or not out.static:
        return None
    op = node.op_type
    if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"):
        return idx.reshape(tuple(out.shape)) if idx.size == int(np.prod(out.shape, dtype=np.int64)) else None
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return idx.transpose(perm if perm is not None else tuple(reversed(range(idx.ndim))))
    if op == "Gather":
        if len(ins) < 2 or ins[1] is None or ins[1].value is None:
            return None
        got = np.take(idx, np.asarray(ins[1].value), axis=int(node.attrs.get("axis", 0)))
    elif op == "Slice":
        vals = [_ints(i) if k < len(ins) and node.inputs[k] else None for k, i in enumerate(ins)]
        starts, ends = vals[1], vals[2]
        axes = vals[3] if len(vals) > 3 and vals[3] is not None else list(range(len(starts or [])))
        steps = vals[4] if len(vals) > 4 and vals[4] is not None else [1] * len(axes)
        if starts is None or ends is None or len(axes) != len(starts) or len(steps) != len(starts):
            return None
        index = [slice(None)] * idx.ndim
        for a, b, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(b, e, st)
        got = idx[tuple(index)]
    else:
        return None
    return got if got.shape == tuple(out.shape) else None


def _table_split(x_shape: tuple, t_shape: tuple) -> tuple[int, int] | None:
    """(mid, inner) when a table of ``t_shape`` broadcasts to ``x_shape`` over one block of axes (before the last),
    keeping the last axis and every other axis in full, else None."""
    rank = len(x_shape)
    if len(t_shape) > rank or not t_shape or t_shape[-1] != x_shape[-1]:
        return None
    t = (1,) * (rank - len(t_shape)) + tuple(t_shape)
    flags = []          # (kind, size): kind "k" kept, "b" broadcast; axes of x's size 1 count for neither
    for a in range(rank - 1):
        if x_shape[a] == 1:
            if t[a] != 1:
                return None
            continue
        if t[a] == x_shape[a]:
            flags.append(("k", x_shape[a]))
        elif t[a] == 1:
            flags.append(("b", x_shape[a]))
        else:
            return None
    kinds = "".join(k for k, _ in flags)
    first, last = kinds.find("b"), kinds.rfind("b")
    if first >= 0 and "k" in kinds[first:last + 1]:
        return None
    if first < 0:
        return 1, int(np.prod([n for _, n in flags], dtype=np.int64))
    mid = int(np.prod([n for _, n in flags[first:last + 1]], dtype=np.int64))
    inner = int(np.prod([n for _, n in flags[last + 1:]], dtype=np.int64))
    return mid, inner


def fuse_rotary(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each rotate-half rotary chain (module docstring) becomes one RotaryHalf node."""
    if not native.available():
        return chosen
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    moved: set[int] = set()

    def only_reader(name: str, op: str) -> int | None:
        return sole_reader(chosen, reads, reader, external, dropped, name, (op,))

    def made_by(name: str, op: str) -> int | None:
        j = producer.get(name)
        if j is None or j in dropped or chosen[j].node.op_type != op or chosen[j].node.domain \
                or name in external or reads[name] != 1:
            return None
        return j

    def static(info: Info | None) -> bool:
        return info is not None and info.dtype == _F32 and info.shape is not None and info.static

    def trace(name: str, info: Info) -> tuple[str, np.ndarray, list[int]] | None:
        """(source, the source's element indices ``name`` holds, the movement steps between) of a float32
        static tensor; the source is the first tensor up the chain that is not made by movement."""
        path, seen = [], name
        while True:
            j = producer.get(seen)
            if j is None or j in dropped or chosen[j].node.op_type not in _MOVES or chosen[j].node.domain \
                    or not static(chosen[j].ins[0]) or len(path) > 8:
                break
            path.append(j)
            seen = chosen[j].node.inputs[0]
        info = chosen[path[-1]].ins[0] if path else info
        size = int(np.prod(info.shape, dtype=np.int64))
        if size > _TRACE_MAX:
            return None
        idx = np.arange(size, dtype=np.int64).reshape(tuple(info.shape))
        for j in reversed(path):
            idx = _moved(chosen[j], idx)
            if idx is None:
                return None
        return seen, idx, path

    def halves(x: str, xi: Info, lo: str, hi: str) -> list[int] | None:
        """The movement steps making ``lo`` and ``hi`` when they hold x's first and second halves of its last
        axis (traced to one source), else None."""
        tx, tl, th = trace(x, xi), trace(lo, xi), trace(hi, xi)
        if tx is None or tl is None or th is None or not (tx[0] == tl[0] == th[0]) or not tl[2] or not th[2]:
            return None
        h = tx[1].shape[-1] // 2 if tx[1].ndim else 0
        if not h or tl[1].shape != tx[1][..., :h].shape or th[1].shape != tl[1].shape \
                or not np.array_equal(tl[1], tx[1][..., :h]) or not np.array_equal(th[1], tx[1][..., h:]):
            return None
        return tl[2] + th[2]

    for pos, entry in enumerate(chosen):
        node = entry.node
        if node.op_type != "Neg" or node.domain or pos in dropped or len(node.inputs) != 1:
            continue
        j_cat = only_reader(node.outputs[0], "Concat")
        if j_cat is None:
            continue
        cat = chosen[j_cat]
        if len(cat.node.inputs) != 2 or cat.node.inputs[0] != node.outputs[0] or not static(cat.outs[0]) \
                or cat.node.attrs.get("axis") not in (-1, len(cat.outs[0].shape) - 1) \
                or reads[cat.node.inputs[1]] != 1 or reads[node.inputs[0]] != 1 \
                or cat.node.inputs[1] in external or node.inputs[0] in external:
            continue
        j_sin = only_reader(cat.node.outputs[0], "Mul")
        if j_sin is None or len(chosen[j_sin].node.inputs) != 2:
            continue
        m_sin = chosen[j_sin]
        k = 1 if m_sin.node.inputs[0] == cat.node.outputs[0] else 0
        sin, sin_i = m_sin.node.inputs[k], m_sin.ins[k]
        j_add = only_reader(m_sin.node.outputs[0], "Add")
        if j_add is None or len(chosen[j_add].node.inputs) != 2:
            continue
        add = chosen[j_add]
        other = add.node.inputs[0] if add.node.inputs[1] == m_sin.node.outputs[0] else add.node.inputs[1]
        j_cos = made_by(other, "Mul")
        if j_cos is None or other == m_sin.node.outputs[0] or len(chosen[j_cos].node.inputs) != 2:
            continue
        m_cos = chosen[j_cos]
        shape = tuple(cat.outs[0].shape)
        # x is the operand of the cos product of the output's shape; cos the other (either order)
        for kc in (0, 1):
            x, xi = m_cos.node.inputs[kc], m_cos.ins[kc]
            cos, cos_i = m_cos.node.inputs[1 - kc], m_cos.ins[1 - kc]
            if static(xi) and tuple(xi.shape) == shape and x != cos:
                moves = halves(x, xi, cat.node.inputs[1], node.inputs[0])
                if moves is not None:
                    break
        else:
            continue
        if shape[-1] % 2 or not static(cos_i) or not static(sin_i) or tuple(cos_i.shape) != tuple(sin_i.shape) \
                or not static(add.outs[0]) or tuple(add.outs[0].shape) != shape:
            continue
        split = _table_split(shape, tuple(cos_i.shape))
        if split is None:
            continue
        chain = [pos, j_cat, j_sin, j_cos, j_add]
        rot = Node(f"{node.name}/rotary", "RotaryHalf", [x, cos, sin], [add.node.outputs[0]], {},
                   domain="ai.nnhal.cpu")
        # NOTE: placed where the chain's last step was: x, cos and sin are all made before it
        last = max(chain)
        replaced[last] = Chosen(rot, RotaryNative(*split), [xi, cos_i, sin_i], [add.outs[0]])
        dropped.update(c for c in chain if c != last)
        moved.update(moves)
    # the halves' movement steps, dropped once nothing else reads them (latest first: a chain's later steps
    # read its earlier ones)
    # NOTE: the reads of the steps kept, counted once and decremented as steps drop (recounting them for each
    # step was quadratic: ~8 ms of every prepare of a 4-layer Llama decode step)
    still_read = Counter(n for p, e in enumerate(chosen) if p not in dropped
                         for n in replaced.get(p, e).node.all_inputs)
    for j in sorted(moved, reverse=True):
        if j not in dropped and not any(still_read[o] or o in external for o in chosen[j].node.outputs if o):
            dropped.add(j)
            still_read.subtract(replaced.get(j, chosen[j]).node.all_inputs)
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]
