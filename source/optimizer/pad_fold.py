"""Fold a constant Pad into the pads of the Conv / AveragePool / MaxPool that reads it (ONNX Runtime's
PadFusion, restricted to the cases where the result is the same).

A causal or "same" padding exported from torch (``F.pad`` before ``Conv1d``) is a Pad node the kernels would
run as a separate copy of the whole activation. The consumer's own pads read the same zeros (Conv, and an
AveragePool that counts pads) or minus infinity (MaxPool), so the Pad folds when:

* its mode is ``constant`` and its pads (attribute, or opset >= 11 constant input, with the opset 18 ``axes``
  input) are constant, non-negative and zero on the batch and channel axes;
* its value is 0 (Conv, AveragePool) or -inf (MaxPool), of a float tensor that is not quantized;
* the consumer reads it as its data input (input 0), pads explicitly (``auto_pad`` NOTSET or VALID) and, for
  the pools, floors the output size (``ceil_mode`` 0: a ceiled last window is clipped to the input, not to the
  Pad's output); an AveragePool's pads then count (``count_include_pad`` 1, which it must already be unless it
  had no pads of its own); a MaxPool has no Indices output (they index the padded tensor).

Each foldable consumer then reads the Pad's input with the Pad's widths added to its pads; the Pad stays for
the readers that cannot fold (and the graph outputs) and goes when none is left.
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.operator.op_pad import pad_widths, static_pads


def _const(graph: Graph, name: str) -> np.ndarray | None:
    t = graph.tensors.get(name) if name else None
    return t.value if t is not None and t.is_constant and t.value is not None else None


def spatial_zero_pad(graph: Graph, pad: Node) -> tuple[list[tuple[int, int]], float] | None:
    """((begin, end) per spatial axis, the pad value) of a constant-mode Pad whose pads are constant,
    non-negative and zero on axes 0 and 1 of a float tensor of known rank >= 3; else None."""
    x = graph.tensors.get(pad.input(0))
    if pad.domain or pad.attrs.get("mode", "constant") != "constant" or x is None or x.shape is None \
            or len(x.shape) < 3 or x.dtype is None or x.dtype.kind != "f" or x.quant is not None:
        return None
    if pad.version < 11:
        pads, axes, value = static_pads(pad), None, float(pad.attrs["value"])
    else:
        pads_value = _const(graph, pad.input(1))
        value_array = _const(graph, pad.input(2)) if pad.has_input(2) else np.zeros(1)
        axes_value = _const(graph, pad.input(3)) if pad.has_input(3) else None
        if pads_value is None or value_array is None or value_array.size != 1 \
                or (pad.has_input(3) and axes_value is None):
            return None
        pads = [int(p) for p in pads_value.reshape(-1)]
        axes = None if axes_value is None else [int(a) for a in axes_value.reshape(-1)]
        value = float(value_array.reshape(-1)[0])
    try:
        widths = pad_widths(pad, len(x.shape), pads, axes)
    except ValueError:
        return None
    if any(b < 0 or e < 0 for b, e in widths) or any(widths[0]) or any(widths[1]):
        return None
    return widths[2:], value


def _absorbs(consumer: Node, name: str, widths: list[tuple[int, int]], value: float) -> bool:
    """Whether ``consumer`` reads ``name`` as its data input and its own padding gives what a Pad of
    ``widths`` and ``value`` in front of it gives."""
    if consumer.op_type not in ("Conv", "AveragePool", "MaxPool") or consumer.domain or consumer.input(0) != name \
            or name in consumer.inputs[1:] or consumer.implicit_inputs:
        return False
    if consumer.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    if consumer.op_type == "Conv":
        return value == 0.0
    kernel = list(consumer.attrs.get("kernel_shape") or ())
    own = consumer.attrs.get("pads") if consumer.attrs.get("auto_pad", "NOTSET") == "NOTSET" else None
    total = _added(own, widths)
    if len(kernel) != len(widths) or any(p >= k for p, k in zip(total, kernel + kernel)):
        return False        # a pool's pads must stay below its window (onnxruntime refuses others)
    if consumer.op_type == "AveragePool":
        counts = consumer.attrs.get("count_include_pad", 0) or not any(own or [])
        return value == 0.0 and not consumer.attrs.get("ceil_mode", 0) and bool(counts)
    return value == -np.inf and not consumer.attrs.get("ceil_mode", 0) and not any(consumer.outputs[1:])


def _added(own: list[int] | None, widths: list[tuple[int, int]]) -> list[int]:
    """A consumer's explicit pads (begins then ends; None = zeros) plus ``widths``."""
    n = len(widths)
    own = list(own) if own else [0] * (2 * n)
    return [own[i] + widths[i][0] for i in range(n)] + [own[n + i] + widths[i][1] for i in range(n)]


def _fold(consumer: Node, source: str, widths: list[tuple[int, int]]) -> None:
    """Point ``consumer`` at ``source`` and add ``widths`` to its explicit pads."""
    own = consumer.attrs.get("pads") if consumer.attrs.get("auto_pad", "NOTSET") == "NOTSET" else None
    consumer.attrs["pads"] = _added(own, widths)
    consumer.attrs["auto_pad"] = "NOTSET"
    if consumer.op_type == "AveragePool":
        consumer.attrs["count_include_pad"] = 1
    consumer.inputs[0] = source


def fold_pad_into_consumers(graph: Graph) -> int:
    """Fold each constant spatial Pad into the readers that can pad for it (module docstring); returns the
    number of readers folded."""
    consumers = graph.consumers()
    outputs = set(graph.outputs) | set(graph.outer)
    folded = 0
    for pad in [n for n in graph.nodes if n.op_type == "Pad"]:
        found = spatial_zero_pad(graph, pad)
        out = pad.outputs[0] if pad.outputs else ""
        if found is None or not out:
            continue
        widths, value = found
        readers = consumers.get(out, [])
        for reader in [r for r in readers if _absorbs(r, out, widths, value)]:
            _fold(reader, pad.input(0), widths)
            readers.remove(reader)
            consumers.setdefault(pad.input(0), []).append(reader)
            folded += 1
        if not readers and out not in outputs:
            graph.nodes.remove(pad)
            graph.tensors.pop(out, None)
    return folded
