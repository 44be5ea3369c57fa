"""precision="mixed": choosing the lowest precision that keeps a measured error bound."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as with_

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.options import Options


def choose_mixed(graph: Graph, options: Options, measure: Callable[[Options], list[np.ndarray]]
                 ) -> tuple[Options, MixedReport]:
    """precision="mixed": the lowest precision whose error against fp32 on the inputs set before
    prerun (``measure`` runs the graph on them) stays within ``options.mixed_tolerance``; under uint8, the most sensitive nodes (each
    measured quantized alone) go back to fp32, outputs included, one by one until the bound holds;
    if half the nodes do not suffice, fp16, then fp32."""
    reference = measure(with_(options, precision="fp32"))

    def error(opts: Options) -> float:
        got = measure(opts)
        num = sum(float(np.sum((a.astype(np.float64) - b) ** 2)) for a, b in zip(got, reference))
        den = sum(float(np.sum(b.astype(np.float64) ** 2)) for b in reference)
        return float(np.sqrt(num / max(den, 1e-30)))

    tried: list[tuple[str, float]] = []
    base = with_(options, precision="uint8", keep_fp32=frozenset(options.keep_fp32))
    err = error(base)
    tried.append(("uint8", err))
    if err <= options.mixed_tolerance:
        return base, MixedReport("uint8", [], tried)
    readers = graph.consumers()
    groups: dict[str, frozenset[str]] = {}      # a weighted node with the activation that follows it
    for n in graph.nodes:
        if n.op_type in ("Conv", "Gemm", "MatMul", "ConvTranspose"):
            after = readers.get(n.outputs[0], [])
            tail = {after[0].name} if len(after) == 1 and after[0].op_type in ("Relu", "Clip") else set()
            groups[n.name] = frozenset({n.name} | tail)
    everything = frozenset(n.name for n in graph.nodes)
    # a node's sensitivity: the error when it alone is quantized (its weights and its outputs)
    alone = {n: error(with_(base, keep_fp32=everything - grp)) for n, grp in groups.items()}
    kept: set[str] = set()
    order: list[str] = []
    for name in sorted(groups, key=lambda n: -alone[n]):
        kept |= groups[name]
        order.append(name)
        err = error(with_(base, keep_fp32=frozenset(kept) | options.keep_fp32))
        tried.append((f"uint8 with {len(order)} layer(s) in fp32", err))
        if err <= options.mixed_tolerance:
            return with_(base, keep_fp32=frozenset(kept) | options.keep_fp32), MixedReport("uint8", sorted(kept), tried)
        if len(order) * 2 > len(groups):
            break
    fp16 = with_(options, precision="fp16")
    err = error(fp16)
    tried.append(("fp16", err))
    if err <= options.mixed_tolerance:
        return fp16, MixedReport("fp16", [], tried)
    return with_(options, precision="fp32"), MixedReport("fp32", [], tried)


@dataclass
class MixedReport:
    """What precision="mixed" chose: the precision, nodes kept in fp32, and every measured error."""

    precision: str
    fp32_nodes: list[str]
    tried: list[tuple[str, float]]

    def __str__(self) -> str:
        steps = "; ".join(f"{what}: {err:.4%}" for what, err in self.tried)
        kept = f", {len(self.fp32_nodes)} node(s) kept in fp32: {self.fp32_nodes}" if self.fp32_nodes else ""
        return f"mixed chose {self.precision}{kept} (relative output error: {steps})"
