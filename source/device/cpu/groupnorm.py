"""The cpu plan's GroupNorm fusion, run on the chosen (node, kernel, ins, outs) list with the other fusions.

torch.onnx exports ``nn.GroupNorm`` as Reshape(x, (N, G, -1)) -> InstanceNormalization(scale s, bias b of G)
-> Reshape back to x's shape -> Mul(per-channel constant m) -> Add(per-channel constant a). The chain becomes one
GroupNormalization-21 node with per-channel scale s[g(c)] * m[c] and bias b[g(c)] * m[c] + a[c] (folded in
float64, stored in float32), run by the native kernel in one pass over the data instead of five nodes
(kernels/instance_norm.py). The Mul and the Add are optional, in that order. Intermediates must have no other
reader and not leave the subgraph; the fused node is used only when the native kernel takes it.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.instance_norm import GroupNormalizationNative
from nnhal.graph.node import Node
from nnhal.operator.base import Info


def _channel_vector(info: Info | None, rank: int, channels: int) -> np.ndarray | None:
    """A constant broadcast along axis 1 only of a rank-``rank`` tensor, as ``channels`` float64 values."""
    if info is None or info.value is None or info.dtype != np.float32:
        return None
    v = np.asarray(info.value)
    if v.ndim > rank:
        return None
    shape = (1,) * (rank - v.ndim) + v.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float64), (channels,)).copy()


def fuse_group_norm(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) -> list[Chosen]:
    """Each Reshape -> InstanceNormalization -> Reshape [-> Mul -> Add] GroupNorm chain becomes one
    GroupNormalization node (module docstring); new constants go into ``constants``."""
    reads, reader, _ = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}

    def follow(pos: int, op: str) -> int | None:
        """The one reader of ``pos``'s output when it is an ``op`` of the default domain, else None."""
        name = chosen[pos].node.outputs[0]
        if name in external or reads[name] != 1 or name not in reader:
            return None
        nxt = reader[name]
        node = chosen[nxt].node
        if node.op_type != op or node.domain or nxt in dropped or not chosen[nxt].outs[0].static:
            return None
        return nxt

    for pos, (node, _, ins, outs) in enumerate(chosen):
        if node.op_type != "Reshape" or node.domain or pos in dropped or not ins or ins[0] is None \
                or not ins[0].static or ins[0].dtype != np.float32 or len(ins[0].shape) < 3 or not outs[0].static:
            continue
        shape = tuple(ins[0].shape)
        grouped = tuple(outs[0].shape)
        norm = follow(pos, "InstanceNormalization")
        if norm is None or len(grouped) != 3 or grouped[0] != shape[0] or shape[1] % grouped[1]:
            continue
        back = follow(norm, "Reshape")
        if back is None or tuple(chosen[back].outs[0].shape) != shape:
            continue
        groups, channels = grouped[1], shape[1]
        n_ins = chosen[norm].ins
        if len(n_ins) != 3 or any(i is None or i.value is None or i.dtype != np.float32 or i.value.size != groups
                                  for i in n_ins[1:3]):
            continue
        group_scale, group_bias = (i.value.reshape(-1).astype(np.float64) for i in n_ins[1:3])
        scale, bias = np.repeat(group_scale, channels // groups), np.repeat(group_bias, channels // groups)
        chain = [pos, norm, back]
        for op in ("Mul", "Add"):
            nxt = follow(chain[-1], op)
            if nxt is None:
                break
            prev = chosen[chain[-1]].node.outputs[0]
            other = [k for k, n in enumerate(chosen[nxt].node.inputs) if n != prev]
            if len(other) != 1 or len(chosen[nxt].node.inputs) != 2:
                break
            v = _channel_vector(chosen[nxt].ins[other[0]], len(shape), channels)
            if v is None or tuple(chosen[nxt].outs[0].shape) != shape:
                break
            if op == "Mul":
                scale, bias = scale * v, bias * v
            else:
                bias = bias + v
            chain.append(nxt)
        last = chosen[chain[-1]]
        names = (f"{node.name}/group_norm_scale", f"{node.name}/group_norm_bias")
        gn = Node(f"{chosen[norm].node.name}/group_norm", "GroupNormalization", [node.inputs[0], *names],
                  [last.node.outputs[0]], {"num_groups": groups, "epsilon": chosen[norm].node.attrs["epsilon"],
                                           "stash_type": 1}, opset=21, version=21)
        values = [v.astype(np.float32) for v in (scale, bias)]
        g_ins = [ins[0]] + [Info(np.dtype(np.float32), (channels,), v) for v in values]
        kernel = select(gn, g_ins, list(last.outs))
        if not isinstance(kernel, GroupNormalizationNative):
            continue
        constants.update(zip(names, values))
        replaced[pos] = Chosen(gn, kernel, g_ins, list(last.outs))
        dropped.update(chain[1:])
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]
