"""Post-training quantization of activations: calibration and parameters.

``quantize_activations`` is the single step the core runs when a subgraph's
device asks for a quantized precision: it calibrates tensor ranges (min/max
over the inputs seen at prerun, unless a table is given) and sets
``Tensor.quant`` on every float tensor a quantized subgraph reads or writes.
Activations are asymmetric uint8 per tensor; weights are the device's
business (vnpu: symmetric int8 per channel, int32 bias).
"""
from __future__ import annotations

import numpy as np

from nnhal.errors import InputError
from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Quantization, TensorKind

QUANTIZED = ("int8", "uint8")
Ranges = dict[str, tuple[float, float]]


def calibrate_minmax(graph: Graph, feeds: list[dict[str, np.ndarray]]) -> Ranges:
    """Min/max of every float tensor over fp32 CPU runs of ``graph`` on ``feeds``."""
    from nnhal.device.cpu.plan import compile_nodes

    names = [o for n in graph.nodes for o in n.outputs if o]
    plan = compile_nodes(graph, graph.nodes, list(graph.inputs), names)
    ranges: Ranges = {}
    for feed in feeds:
        values = dict(feed)
        plan.run(values)
        for name, value in values.items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                lo, hi = float(np.min(value)), float(np.max(value))
                if name in ranges:
                    lo, hi = min(lo, ranges[name][0]), max(hi, ranges[name][1])
                ranges[name] = (lo, hi)
    for t in graph.tensors.values():
        if t.kind is TensorKind.CONSTANT and t.value is not None and t.value.dtype.kind == "f" and t.value.size:
            ranges.setdefault(t.name, (float(t.value.min()), float(t.value.max())))
    return ranges


def uint8_params(lo: float, hi: float) -> Quantization:
    """Asymmetric uint8 parameters covering [lo, hi] and zero exactly."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zero_point = int(np.clip(np.rint(-lo / scale), 0, 255))
    return Quantization(np.array(scale, np.float32), np.array(zero_point, np.uint8))


def quantize_activations(graph: Graph, subgraphs: list[Subgraph], precision: str,
                         feeds: dict[str, np.ndarray] | None, table: Ranges | None = None) -> Ranges:
    """Calibrate (unless ``table`` is given) and set Tensor.quant for the quantized subgraphs' tensors."""
    targets = [sg for sg in subgraphs if sg.precision in QUANTIZED]
    if not targets:
        return {}
    if table is None:
        missing = [n for n in graph.inputs if not feeds or n not in feeds]
        if missing:
            raise InputError(f"precision '{precision}' needs calibration data: set the inputs {missing} before "
                             "prerun_graph (their values calibrate the ranges), or pass Options(calibration=table)")
        table = calibrate_minmax(graph, [feeds])
    for sg in targets:
        for node in sg.nodes:
            for name in node.inputs + node.outputs:
                t = graph.tensors.get(name) if name else None
                if t is None or t.dtype is None or t.dtype.kind != "f" or name not in table:
                    continue
                if t.kind is TensorKind.CONSTANT and t.quant is not None:
                    continue
                t.quant = uint8_params(*table[name])
    return table
