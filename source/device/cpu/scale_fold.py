"""Scalar scalings of a MatMul's operands moved onto its product (CPU plan, before fuse_matmul).

torch.onnx's scaled-dot-product attention scales both q and k^T by sqrt(1 / sqrt(d)) before their product:
``MatMul(Mul(q, s), Mul(k^T, s))``. Each Mul is a separate pass over an operand (a reference kernel, on a
transposed view for k^T) feeding nothing but the MatMul. ``fold_operand_scales`` drops such Muls and lets
the MatMul's epilogue multiply its product by the scalar instead (an EpilogueOp Mul step, in cache, which the
later epilogue steps such as the mask add follow; both operands scaled: one step by the float32 s t), when the
product has no more elements than the scaled operands together. (q s)(k t) and (q k) fl(s t) differ by
roundings only (a few u of each product term).

When the product is larger (svtr: 128 tokens of depth 24, a 128 x 128 product per head), scaling it would cost
more than the two Muls (measured: 5% slower on svtr); if both operands are scaled, the Mul of the first keeps
its place with the float32 product s t as its scalar and the second is dropped: one pass instead of two, the
same few roundings.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels.matmul import MatMulFast
from nnhal.hostkernels.fused import EpilogueOp, epilogue_of, fuse
from nnhal.operator.base import Info

_F32 = np.dtype(np.float32)


def fold_operand_scales(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) -> list[Chosen]:
    """Every float32 MatMul (the fast kernel, nothing fused yet) whose operand is the only use of a Mul by a
    constant float32 scalar reads the Mul's other input instead and scales its product; or, the product being
    larger, one Mul scales by both scalars (see the module). ``constants``: the plan's, which gets the
    combined scalar."""
    chosen = list(chosen)
    reads, _, producer = _readers(chosen)
    dropped: set[int] = set()
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type != "MatMul" or node.domain or not isinstance(kernel, MatMulFast) or epilogue_of(node) \
                or len(node.inputs) != 2 or outs[0].dtype != _F32 or outs[0].shape is None \
                or any(not isinstance(d, int) for d in outs[0].shape):
            continue
        found = [(k, j, scale) for k in (0, 1)
                 if (j := producer.get(node.inputs[k])) is not None and j not in dropped
                 and (scale := _scaling(chosen[j], node.inputs[k], reads, external)) is not None]
        # the Mul's output is its operand's shape (_scaling), known
        if not found:
            continue
        if int(np.prod(outs[0].shape)) > sum(int(np.prod(ins[k].shape)) for k, _, _ in found):
            if len(found) == 2:
                chosen[found[0][1]], chosen[pos] = _merge_scales(chosen, found, constants, pos)
                dropped.add(found[1][1])
            continue
        inputs, infos = list(node.inputs), list(ins)
        for k, j, scale in found:
            mul = chosen[j]
            inputs[k], infos[k] = mul.node.inputs[1 - scale], mul.ins[1 - scale]
            dropped.add(j)
        if len(found) == 2:
            # NOTE: both operands scaled: one pass over the product by the float32 s t (the same few roundings
            # as s then t), not two (enc_dec's scores, 4 x 32 x 32: ~2 us a pass)
            name, value = _combined_scale(chosen, found, constants)
            inputs.append(name)
            infos.append(Info(_F32, value.shape, value))
        else:
            ((_, j, scale),) = found
            inputs.append(chosen[j].node.inputs[scale])
            infos.append(chosen[j].ins[scale])
        epilogue = (EpilogueOp("Mul", len(inputs) - 1),)
        fused = node
        for _, j, _ in found:
            fused = fuse(fused, chosen[j].node, inputs=inputs, epilogue=epilogue)
        chosen[pos] = Chosen(fused, kernel, infos, outs)
    return [entry for pos, entry in enumerate(chosen) if pos not in dropped]


def _scaling(entry: Chosen, name: str, reads, external: set[str]) -> int | None:
    """The index of the constant float32 scalar input of the Mul ``entry`` making ``name`` (read only once,
    not a subgraph output, the other input of the product's shape and dtype), else None."""
    node, _, ins, outs = entry
    if node.op_type != "Mul" or node.domain or len(node.inputs) != 2 or name in external or reads[name] != 1 \
            or node.inputs[0] == node.inputs[1] or outs[0].dtype != _F32:
        return None
    for k in (0, 1):
        c, t = ins[k], ins[1 - k]
        if c is not None and c.value is not None and c.value.dtype == _F32 and c.value.size == 1 \
                    and t is not None and t.dtype == _F32 and t.shape is not None and t.shape == outs[0].shape \
                and all(isinstance(d, int) for d in t.shape):
            return k
    return None


def _merge_scales(chosen: list[Chosen], found: list, constants: dict[str, np.ndarray], pos: int) \
        -> tuple[Chosen, Chosen]:
    """The first operand's Mul scaling by both scalars (a new plan constant, their float32 product) and the
    MatMul reading the second Mul's unscaled input."""
    (_, j0, c0), (_, j1, c1) = found
    first, second, (node, kernel, ins, outs) = chosen[j0], chosen[j1], chosen[pos]
    name, value = _combined_scale(chosen, found, constants)
    mul_inputs = list(first.node.inputs)
    mul_inputs[c0] = name
    mul_ins = list(first.ins)
    mul_ins[c0] = Info(_F32, value.shape, value)
    mul = fuse(first.node, second.node, inputs=mul_inputs)
    inputs, infos = list(node.inputs), list(ins)
    inputs[1], infos[1] = second.node.inputs[1 - c1], second.ins[1 - c1]
    matmul = Chosen(dataclasses.replace(node, inputs=inputs), kernel, infos, outs)
    return Chosen(mul, first.kernel, mul_ins, first.outs), matmul


def _combined_scale(chosen: list[Chosen], found: list, constants: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """(name, value) of the float32 product of the two Muls' scalars (``found``: both operands' (k, Mul
    position, scalar input)), added to the plan's ``constants``; shaped as the first Mul's scalar."""
    (_, j0, c0), (_, j1, c1) = found
    first, second = chosen[j0], chosen[j1]
    value = (first.ins[c0].value.reshape(()) * second.ins[c1].value.reshape(())).astype(_F32).reshape(
        first.ins[c0].value.shape)
    name = f"{first.node.name}::{second.node.name}::scale"
    constants[name] = value
    return name, value
