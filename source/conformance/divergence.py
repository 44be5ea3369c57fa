"""Debugging a wrong output: the first node a device computes differently from the host reference kernels.

    from nnhal.testing import first_divergence
    print(first_divergence("model.onnx", {"x": x}, "mydev"))

The model runs once on the device (with the CPU behind it) to learn which nodes the device takes. Then, for
each of them in graph order, the model runs again with that node's inputs and outputs made graph outputs,
and the node is computed by the host reference kernels (nnhal.hostkernels, reference implementations) from
the very inputs the device saw. The first node whose outputs differ beyond the kit's tolerance policy is the
answer: its inputs were right (the earlier nodes passed), its outputs are not. Making a tensor a graph output
can stop a device from fusing across it; a bug inside a fused chain is then named at the chain's last node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal.conformance.tolerance import compare, kit_policy, quantized_atol
from nnhal.device.manager import FALLBACK_DEVICE


@dataclass(frozen=True)
class Divergence:
    """The first node whose device outputs differ from the host reference on the same inputs."""

    node: str
    op: str
    device: str
    precision: str
    reason: str
    checked: int          # device nodes compared up to and including this one

    def __str__(self) -> str:
        return (f"node '{self.node}' ({self.op}) on '{self.device}' at {self.precision} diverges from the host "
                f"reference kernels on the inputs the device saw: {self.reason} (the {self.checked - 1} device "
                f"node(s) before it agree)")


def _loaded(model: Any, feeds: dict[str, np.ndarray]):
    """The model as an nnhal Graph, dtypes and shapes inferred for ``feeds`` (nothing folded)."""
    from nnhal.optimizer.infer import infer_graph
    from nnhal.serializer import load_onnx

    graph = load_onnx(model)
    for name, value in feeds.items():
        graph.tensors[name].dtype, graph.tensors[name].shape = value.dtype, tuple(value.shape)
    infer_graph(graph, fold=False)
    return graph


def _exposing(model: Any, graph, names: list[str]) -> Any:
    """A copy of ``model`` with ``names`` among its graph outputs."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    present = {o.name for o in out.graph.output}
    for name in names:
        if name not in present:
            t = graph.tensors[name]
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)) if t.dtype is not None else 0
            out.graph.output.append(helper.make_tensor_value_info(name, elem, None))
            present.add(name)
    return out


def first_divergence(model: Any, feeds: dict[str, np.ndarray], device: str,
                     precision: str | None = None) -> Divergence | None:
    """The first node (in graph order) that ``device`` runs and computes differently from the host reference
    kernels on the same inputs, or None when every node it runs agrees. ``model``: a path, bytes or
    ModelProto; ``precision``: default fp32 when the device describes it, else its first."""
    import onnx

    from nnhal.device.manager import find_device
    from nnhal.hostkernels.evaluate import evaluate_node
    from nnhal.hostkernels.select import force_reference
    from nnhal.session import Session

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    described = find_device(device).describe().precisions
    precision = precision or ("fp32" if "fp32" in described else described[0])
    devices = list(dict.fromkeys([device, FALLBACK_DEVICE]))
    with Session(model, devices=devices, precision=precision) as s:
        s.run(feeds)
        placed = {name: d.device for name, d in s.placement.items()}
    graph = _loaded(model, feeds)
    checked = 0
    for node in graph.nodes:
        if placed.get(node.name) != device:
            continue
        checked += 1
        inputs = [n for n in node.inputs if n and n not in feeds and not graph.tensors[n].is_constant]
        outputs = [n for n in node.outputs if n]
        with Session(_exposing(model, graph, inputs + outputs), devices=devices, precision=precision) as s:
            values = dict(zip(s.output_names, s.run(feeds)))
        args = [None if not n else values[n] if n in values else feeds[n] if n in feeds else graph.tensors[n].value
                for n in node.inputs]
        with force_reference():
            want = evaluate_node(node, args)
        tol = kit_policy(precision, {node.op_type})
        for name, expected in zip(node.outputs, want):
            if not name:
                continue
            if precision in ("int8", "uint8"):
                arrays = [expected, *(a for a in args if isinstance(a, np.ndarray))]
                tol = type(tol)(max(tol.atol, quantized_atol(arrays)), tol.rtol, 1)
            why = compare(values[name], np.asarray(expected, dtype=values[name].dtype)
                          if precision != "fp32" else expected, tol)
            if why:
                return Divergence(node.name, node.op_type, device, precision, f"output '{name}': {why}", checked)
    return None
