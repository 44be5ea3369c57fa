"""Run one node once on the CPU with no planning: constant folding and tests."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.select import select
from nnhal.operator.base import Info


def evaluate_node(node: Node, inputs: list[np.ndarray | None], outs: list[Info] | None = None) -> list[np.ndarray]:
    """Outputs of ``node`` for the given input arrays (None = absent input)."""
    ins = [None if a is None else Info.of(a) for a in inputs]
    if outs is None:
        from nnhal.operator.table import get_prototype
        outs = get_prototype(node.domain, node.op_type).infer(node, ins)
    kernel = select(node, ins, outs)
    run = kernel.prepare(node, ins, outs)
    result = run(list(inputs), [None] * len(node.outputs))
    return [np.asarray(r) for r in result]
