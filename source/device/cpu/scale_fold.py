"""Scalar scalings of a MatMul's operands moved onto its product (CPU plan, before fuse_matmul).

torch.onnx's scaled-dot-product attention scales both q and k^T by sqrt(1 / sqrt(d)) before their product:
``MatMul(Mul(q, s), Mul(k^T, s))``. Each Mul is a separate pass over an operand (a reference kernel, on a
transposed view for k^T) feeding nothing but the MatMul. ``fold_operand_scales`` drops such Muls and lets
the MatMul's epilogue multiply its product by the scalars instead (EpilogueOp Mul steps, in cache, which the
later epilogue steps such as the mask add follow), when the product has no more elements than the scaled
operands together. (q s)(k t) and (q k) s t differ by roundings only (a few u of each product term).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels.matmul import MatMulFast
from nnhal.hostkernels.fused import EpilogueOp, epilogue_of, fuse

_F32 = np.dtype(np.float32)


def fold_operand_scales(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Every float32 MatMul (the fast kernel, nothing fused yet) whose operand is the only use of a Mul by a
    constant float32 scalar reads the Mul's other input instead and scales its product (see the module)."""
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
        if not found or int(np.prod(outs[0].shape)) > sum(int(np.prod(ins[k].shape)) for k, _, _ in found):
            continue
        inputs, infos, epilogue = list(node.inputs), list(ins), ()
        for k, j, scale in found:
            mul = chosen[j]
            inputs[k], infos[k] = mul.node.inputs[1 - scale], mul.ins[1 - scale]
            inputs.append(mul.node.inputs[scale])
            infos.append(mul.ins[scale])
            epilogue += (EpilogueOp("Mul", len(inputs) - 1),)
            dropped.add(j)
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
