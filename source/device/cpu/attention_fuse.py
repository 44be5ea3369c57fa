"""The CPU plan's attention fusion: an exported scaled-dot-product attention becomes one native step.

torch.onnx exports ``nn.MultiheadAttention`` and ``scaled_dot_product_attention`` as
``MatMul(q, k^T)`` [``Mul``/``Div`` by a constant scalar, or ``Mul`` of q and of k^T by constant scalars before
the product] [``Add`` of a float32 mask, or ``Where(constant condition, scores, fill)``] ``Softmax`` (last axis)
``MatMul(., v)``, with q, k^T and v coming out of Reshape/Transpose head splits and the product going into a
Transpose back to (batch, tokens, heads, depth). On the corpus's transformers (32 x 32 scores per head) the
separate steps cost a few microseconds of dispatch each against a few of arithmetic.

``fuse_attention`` replaces each such chain, float32 of static shapes, by one FusedAttention node
(kernels/attention.py ``FusedAttentionNative``, native/nn_attention.h) whose inputs are the sources of q, k^T,
v and the mask. The Transposes and row gathers feeding q, k^T or v (the head split) are read as strided views
of their input, as matmul_views.py reads them for the MatMuls (its ``_operand``), and a Transpose after the
product that keeps the last axis last becomes the layout the step writes its output in. A Where with a
constant condition and a fill of -inf (or a finite fill at most -1e4 when no row is fully masked) becomes a
constant additive mask; with a run-time condition (a key-padding mask) under the same fill rule, the node reads
the condition and the step makes the mask each run. K and V repeated to the query heads (grouped-query
attention's repeat_kv, or the optimizer's row gather of it) are read once per kv head (``_side``). Shapes are
static here: nnhal prepares a graph again when its input shapes change.
Every intermediate must have no other reader and not leave the subgraph; anything else keeps the separate
steps.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels.attention import FusedAttentionNative
from nnhal.device.cpu.matmul_views import _operand, _product_perm
from nnhal.graph.node import Node
from nnhal.operator.base import Info

_F32 = np.dtype(np.float32)


def _scalar_value(info: Info | None) -> float | None:
    """The value of a constant float32 single-element tensor, else None."""
    if info is None or info.value is None:
        return None
    v = np.asarray(info.value)
    return float(v.reshape(())) if v.dtype == _F32 and v.size == 1 else None


def _static_f32(info: Info | None) -> bool:
    return info is not None and info.dtype == _F32 and info.shape is not None and info.static


def fuse_attention(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) -> list[Chosen]:
    """Each attention chain (module docstring) becomes one FusedAttention node; a mask made from a Where goes
    into ``constants``."""
    if not native.available():
        return chosen
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    folded: set[int] = set()
    replaced: dict[int, Chosen] = {}

    def only_reader(name: str) -> int | None:
        """The position of the one reader of ``name`` when it has exactly one and stays inside."""
        if not name or name in external or reads[name] != 1 or name not in reader:
            return None
        j = reader[name]
        return None if j in dropped else j

    def source(name: str, op: str, skip: set[int]) -> int | None:
        """The producer of ``name`` when it is a default-domain ``op`` whose output only the chain reads."""
        j = producer.get(name)
        if j is None or j in dropped or j in skip or chosen[j].node.op_type != op or chosen[j].node.domain \
                or name in external or reads[name] != 1:
            return None
        return j

    for pos, entry in enumerate(chosen):
        node = entry.node
        if node.op_type != "Softmax" or node.domain or pos in dropped or not _static_f32(entry.ins[0]):
            continue
        shape = tuple(entry.ins[0].shape)
        rank = len(shape)
        if rank not in (3, 4) or node.attrs.get("axis", -1) not in (-1, rank - 1) or 0 in shape:
            continue
        chain = [pos]
        scale, mask, m_info, mask_value, where = 1.0, "", None, None, None
        cur = node.inputs[0]
        j = producer.get(cur)
        if source(cur, "Add", set()) is not None:
            add = chosen[j]
            ks = [k for k in (0, 1) if _static_f32(add.ins[k]) and tuple(add.ins[k].shape) == shape
                  and add.node.inputs[k] in producer
                  and chosen[producer[add.node.inputs[k]]].node.op_type in ("MatMul", "Mul", "Div")]
            if not ks or add.node.inputs[0] == add.node.inputs[1]:
                continue
            k = ks[0]
            m_info = add.ins[1 - k]
            if not _static_f32(m_info) or len(m_info.shape) > rank:
                continue
            m_shape = (1,) * (rank - len(m_info.shape)) + tuple(m_info.shape)
            if any(a not in (1, b) for a, b in zip(m_shape, shape)):
                continue
            mask = add.node.inputs[1 - k]
            chain.append(j)
            cur = add.node.inputs[k]
        elif source(cur, "Where", set()) is not None:
            ks = [k for k in (1, 2) if chosen[j].ins[k] is not None and chosen[j].ins[k].value is None]
            if len(ks) != 1:
                continue
            parts = _where_parts(chosen[j], ks[0], shape)
            if parts is None:
                continue
            cond, kept_if, fill = parts
            if cond.value is not None:
                mask_value = _constant_mask(np.asarray(cond.value) == kept_if, fill, shape)
                if mask_value is None:
                    continue
            else:       # a run-time condition: the step makes the additive mask from it (FusedAttentionNative)
                mask, m_info, where = chosen[j].node.inputs[0], cond, (fill, kept_if)
            chain.append(j)
            cur = chosen[j].node.inputs[ks[0]]
        for op in ("Mul", "Div"):
            j = source(cur, op, set())
            if j is None:
                continue
            n = chosen[j].node
            k = 0 if op == "Div" else (0 if _scalar_value(chosen[j].ins[1]) is not None else 1)
            s = _scalar_value(chosen[j].ins[1 - k])
            if s is None or n.inputs[k] == n.inputs[1 - k] or s == 0.0 \
                    or tuple(chosen[j].ins[k].shape or ()) != shape:
                continue
            scale *= s if op == "Mul" else 1.0 / s
            chain.append(j)
            cur = n.inputs[k]
            break
        j_qk = source(cur, "MatMul", set())
        if j_qk is None or not all(_static_f32(i) for i in chosen[j_qk].ins):
            continue
        chain.append(j_qk)
        qk = chosen[j_qk]
        srcs = list(qk.node.inputs)
        infos = list(qk.ins)    # of the operands of the products (q, k^T, v)
        if len(infos[0].shape) != rank or len(infos[1].shape) != rank:
            continue
        for side in (0, 1):
            j = source(srcs[side], "Mul", set(chain))
            if j is None:
                continue
            n = chosen[j].node
            k = 0 if _scalar_value(chosen[j].ins[1]) is not None else 1
            s = _scalar_value(chosen[j].ins[1 - k])
            if s is None or s == 0.0 or tuple(chosen[j].outs[0].shape or ()) != tuple(chosen[j].ins[k].shape or ()):
                continue
            scale *= s
            chain.append(j)
            srcs[side], infos[side] = n.inputs[k], chosen[j].ins[k]
        j_pv = only_reader(node.outputs[0])
        if j_pv is None:
            continue
        pv = chosen[j_pv]
        if pv.node.op_type != "MatMul" or pv.node.domain or pv.node.inputs[0] != node.outputs[0] \
                or pv.node.inputs[1] == node.outputs[0] or not _static_f32(pv.ins[1]) \
                or not _static_f32(pv.outs[0]) or len(pv.ins[1].shape) != rank:
            continue
        srcs.append(pv.node.inputs[1])
        infos.append(pv.ins[1])
        batch = shape[:-2]
        q_shape, kt_shape, v_shape = (tuple(i.shape) for i in infos)
        if q_shape[:-2] != batch or kt_shape[:-2] != batch or v_shape[:-2] != batch \
                or q_shape[-2] != shape[-2] or kt_shape[-1] != shape[-1] or kt_shape[-2] != q_shape[-1] \
                or v_shape[-2] != shape[-1]:
            continue
        chain.append(j_pv)
        views: list = [None, None, None]
        src_infos = list(infos)
        seen = external | {chosen[d].node.outputs[0] for d in dropped}
        found = [_side(chosen, srcs[side], infos[side], side > 0, producer, seen, reads, dropped)
                 for side in range(3)]
        if _group(found[1]) != _group(found[2]):     # K and V repeated alike, or neither
            found[1:] = [_side(chosen, srcs[s], infos[s], False, producer, seen, reads, dropped) for s in (1, 2)]
        for side in range(3):
            if found[side] is None:
                continue
            views[side], links, _ = found[side]
            first = chosen[links[-1]]
            srcs[side], src_infos[side] = first.node.inputs[0], first.ins[0]
            folded.update(links)
        out, out_info, out_perm = pv.node.outputs[0], pv.outs[0], None
        j = only_reader(out)
        if j is not None and _product_perm(chosen[j]) is not None:
            out_perm = _product_perm(chosen[j])
            out, out_info = chosen[j].node.outputs[0], chosen[j].outs[0]
            chain.append(j)
        inputs = srcs + [mask]
        if mask_value is not None:
            inputs[3] = f"{node.name}/attention_mask"
            constants[inputs[3]] = mask_value
            m_info = Info(_F32, mask_value.shape, mask_value)
        fused = Node(f"{node.name}/attention", "FusedAttention", inputs, [out], {"scale": scale},
                     domain="ai.nnhal.cpu")
        # NOTE: placed where the chain's last step was: every input of the chain is made before it
        last = max(chain)
        kernel = FusedAttentionNative(views, out_perm, scale, shape, where)
        replaced[last] = Chosen(fused, kernel, src_infos + [m_info], [out_info])
        dropped.update(c for c in chain if c != last)
    # the operands' folded Transposes and row views, dropped once nothing else reads them (as fold_transposes)
    for j in sorted(folded, reverse=True):
        still_read = {n for pos, e in enumerate(chosen) if pos not in dropped
                      for n in (replaced.get(pos, e).node.all_inputs) if n}
        if chosen[j].node.outputs[0] not in still_read:
            dropped.add(j)
    return [replaced.get(p, e) for p, e in enumerate(chosen) if p not in dropped]


def _group(found: tuple | None) -> int:
    """The group of a ``_side`` result (1: none found)."""
    return 1 if found is None else found[2]


def _side(chosen: list[Chosen], name: str, info: Info, grouped: bool, producer, seen, reads,
          dropped: set[int]) -> tuple | None:
    """(view, positions, group) of the operand ``name`` (q, k^T or v, ``info`` as the products read it) read
    through its producers (matmul_views' ``_operand``), or None. When ``grouped`` (K and V), it may be a row
    gather repeating each key/value head g times along the head axis (grouped-query attention's repeat_kv,
    collapsed by optimizer/movement.py), or read (through Transposes) from a repeat_kv chain (_repeat_kv): the
    view then reads each kv head once and group is g (the native step maps query head h to kv head h // g),
    else group is 1. The view is None when the operand is the repeat chain's input itself."""
    j = producer.get(name)
    if j is None or j in dropped or name in seen or reads[name] != 1:
        return None
    view, links = _operand(chosen, j, producer, seen, reads, 1 if grouped else None) or (None, [])
    if grouped:
        more = _repeat_kv(chosen, chosen[links[-1]].node.inputs[0] if links else name, producer, seen, reads,
                          dropped)
        links = links + (more or [])
    if not links:
        return None
    first = chosen[links[-1]].ins[0]
    # NOTE: the view's shape on a stand-in of its input (no copy: the strided view of an uninitialised array)
    stand_in = np.empty(first.shape, _F32)
    got, want = (stand_in if view is None else view(stand_in)).shape, tuple(info.shape)
    if got == want:
        return view, links, 1
    if len(got) == 4 and got[:1] + got[2:] == want[:1] + want[2:] and got[1] and want[1] % got[1] == 0:
        return view, links, want[1] // got[1]
    return None


def _repeat_kv(chosen: list[Chosen], name: str, producer, seen, reads, dropped: set[int]) -> list[int] | None:
    """The positions (Reshape, Expand, Unsqueeze) of Llama's repeat_kv making ``name``: x (B, Hk, S, D) unsqueezed
    (Unsqueeze or Reshape) to (B, Hk, 1, S, D), expanded (Expand, or Tile: torch's repeat_interleave) to
    (B, Hk, g, S, D), reshaped to (B, Hk g, S, D), each read only by the next; else None."""
    links = []
    for op in (("Reshape",), ("Expand", "Tile"), ("Unsqueeze", "Reshape")):
        j = producer.get(name)
        if j is None or j in dropped or name in seen or reads[name] != 1 or chosen[j].node.domain \
                or chosen[j].node.op_type not in op \
                or not all(_static_f32(i) for i in (chosen[j].ins[0], chosen[j].outs[0])):
            return None
        links.append(j)
        name = chosen[j].node.inputs[0]
    out, expanded, ones = (tuple(chosen[j].outs[0].shape) for j in links)
    x = tuple(chosen[links[-1]].ins[0].shape)
    if len(x) != 4 or ones != x[:2] + (1,) + x[2:] or len(expanded) != 5 or expanded[:2] + expanded[3:] != x \
            or out != (x[0], x[1] * expanded[2]) + x[2:]:
        return None
    return links


def _where_parts(entry: Chosen, k: int, shape: tuple) -> tuple[Info, bool, float] | None:
    """(condition, the condition value that keeps the score, fill) of Where(condition, scores, fill) (``k`` 1)
    or Where(condition, fill, scores) (``k`` 2) with a boolean condition broadcasting to the scores' ``shape``
    and a constant scalar fill, or None."""
    node, ins = entry.node, entry.ins
    cond = ins[0]
    if len(node.inputs) != 3 or cond is None or cond.dtype != np.bool_ or cond.shape is None or not cond.static \
            or node.inputs[0] == node.inputs[k]:
        return None
    fill = _scalar_value(ins[3 - k])
    if fill is None or len(cond.shape) > len(shape) or tuple(entry.outs[0].shape or ()) != shape \
            or tuple(ins[k].shape or ()) != shape or (fill != -np.inf and fill > -1e4):
        return None
    try:
        if np.broadcast_shapes(tuple(cond.shape), shape) != shape:
            return None
    except ValueError:
        return None
    return cond, k == 1, fill


def _constant_mask(kept: np.ndarray, fill: float, shape: tuple) -> np.ndarray | None:
    """The additive float32 mask of a constant Where (0 where the scores are kept), or None when a finite fill
    masks a whole row (module docstring)."""
    if fill != -np.inf and not np.broadcast_to(kept, shape).any(axis=-1).all():
        return None
    return np.where(kept, np.float32(0.0), np.float32(fill)).astype(np.float32)
