"""The CPU's quantized reference for vnpu programs.

For every instruction of a traced run (``VnpuOptions(trace=True)``), the
reference dequantizes the instruction's actual uint8 inputs and its packed
int8 weights and int32 bias, runs the original ONNX node on the CPU in
float64, and quantizes the result with the instruction's output parameters.
A correct integer pipeline differs from it by at most one step per element
(the fixed-point rounding); anything more is a bug in the chip model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.graph.subgraph import Subgraph
from nnhal.hostkernels.evaluate import evaluate_node


@dataclass(frozen=True)
class InstrCheck:
    instruction: str        # "kind:node"
    max_diff: int           # largest |vnpu - reference| over the output, in uint8 steps
    elements: int


def _real(graph, name: str, value: np.ndarray) -> np.ndarray:
    q = graph.tensors[name].quant
    return (value.astype(np.float64) - float(np.ravel(q.zero_point)[0])) * float(np.ravel(q.scale)[0])


def check_subgraph(sg: Subgraph) -> list[InstrCheck]:
    """Compare every instruction of the subgraph's last traced run with the CPU reference."""
    trace = sg.stats.get("trace")
    if trace is None:
        raise ValueError("no trace: run the subgraph with device_options={'vnpu': {'trace': True}}")
    graph = sg.graph
    nodes = {n.name: n for n in sg.nodes}
    checks = []
    for ins in sg.device_graph.program.instructions:
        node = nodes[ins.node]
        p = ins.params
        consts = p.get("consts", {})
        xs = [_real(graph, n, consts[n] if n in consts else trace[n]) for n in ins.inputs]
        inputs: list = list(xs)
        if ins.kind in ("conv", "gemm"):
            sx = float(np.ravel(graph.tensors[ins.inputs[0]].quant.scale)[0])
            sw = p["weight_scales"]
            w = p["wq"].astype(np.float64) * sw.reshape((-1,) + (1,) * (p["wq"].ndim - 1))
            if node.op_type == "MatMul" or (node.op_type == "Gemm" and not node.attrs.get("transB", 0)):
                w = w.T
            inputs = [xs[0], w, p["bias"].astype(np.float64) * sx * sw]
            if node.op_type == "MatMul":
                inputs = inputs[:2]
        elif node.op_type in ("Reshape", "Clip"):
            inputs = xs + [graph.tensors[n].value if n else None for n in node.inputs[1:]]
        real = evaluate_node(node, inputs)[0]
        if ins.kind == "gemm" and node.op_type == "MatMul":
            real = real + p["bias"].astype(np.float64) * sx * sw
        q = graph.tensors[ins.output].quant
        sy, zy = float(np.ravel(q.scale)[0]), int(np.ravel(q.zero_point)[0])
        lo, hi = p.get("lo", 0), p.get("hi", 255)
        expected = np.clip(np.rint(real / sy) + zy, lo, hi)
        got = trace[ins.output].astype(np.int64)
        checks.append(InstrCheck(f"{ins.kind}:{ins.node}", int(np.abs(got - expected).max()), got.size))
    return checks

