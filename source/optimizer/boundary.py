"""Boundaries between subgraphs: the conversions the core inserts.

The host format of a tensor is its graph dtype as a plain array. A device
that wants another format for a boundary tensor declares it in its
subgraph's ``input_formats`` / ``output_formats``; the scheduler converts on
the way in (quantize, cast) and on the way out (dequantize, cast).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.device.device import BoundaryMemory
from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Format, Subgraph
from nnhal.graph.tensor import Quantization


def _broadcast(q: Quantization, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point as float64, shaped to broadcast along the quantization axis."""
    scale = np.asarray(q.scale, np.float64)
    zp = np.asarray(q.zero_point, np.float64)
    if q.axis is not None:
        shape = [1] * ndim
        shape[q.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return scale, zp


def quantize(x: np.ndarray, q: Quantization, dtype: np.dtype) -> np.ndarray:
    """Affine quantization, round half to even, saturating."""
    info = np.iinfo(dtype)
    scale, zp = _broadcast(q, x.ndim)
    return np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(dtype)


def dequantize(x: np.ndarray, q: Quantization, dtype: np.dtype = np.dtype(np.float32)) -> np.ndarray:
    scale, zp = _broadcast(q, x.ndim)
    return ((x.astype(np.float64) - zp) * scale).astype(dtype)


def to_device(value: np.ndarray, fmt: Format) -> np.ndarray:
    """Host array -> the device's format."""
    if fmt.quant is not None:
        return quantize(value, fmt.quant, fmt.dtype)
    return value if value.dtype == fmt.dtype else value.astype(fmt.dtype)


def to_host(value: np.ndarray, fmt: Format, host_dtype: np.dtype) -> np.ndarray:
    """Device format -> host array of ``host_dtype``."""
    if fmt.quant is not None:
        return dequantize(value, fmt.quant, host_dtype)
    return value if value.dtype == host_dtype else value.astype(host_dtype)


@dataclass(frozen=True)
class Boundary:
    """One tensor crossing from one subgraph to another (or to/from the user)."""

    tensor: str
    producer: str          # "subgraph #i (device)" or "graph input"
    consumer: str          # "subgraph #j (device)" or "graph output"
    conversion: str        # "none", "quantize to uint8(...)", "dequantize from ...", "cast ..."
    nbytes: int | None
    host: str = ""         # the host format: dtype[dims] of the graph tensor
    copies: int = 0        # copies per run: out of the producer's memory, the core's conversion, into the consumer's
    transfer: str = ""     # how it crosses: "zero-copy", "on device", or the copies ("copy out; copy in")

    @property
    def copied_bytes(self) -> int | None:
        """Bytes copied per run at this boundary (host bytes per copy; None when the size is unknown)."""
        return None if self.nbytes is None else self.copies * self.nbytes

    def describe(self) -> str:
        size = "?" if self.nbytes is None else f"{self.nbytes:,} B"
        return f"{self.tensor}: {self.producer} -> {self.consumer} [{self.conversion}] {size} ({self.transfer})"


def _host(graph: Graph, name: str) -> str:
    return graph.tensors[name].describe().partition(": ")[2]


def transfer(src: BoundaryMemory | None, dst: BoundaryMemory | None, converted: bool,
             same_device: bool = False) -> tuple[int, str]:
    """Copies per run and how a tensor crosses from ``src``'s memory (None: the user's host array) to ``dst``'s
    (None: handed to the user), given the devices' declarations and whether the core converts it."""
    if same_device and not converted and src is not None and src.device_resident:
        return 0, "on device"
    steps = []
    if src is not None and src.host_outputs == "copy":
        steps.append("copy out")
    if converted:
        steps.append("convert")
    if dst is not None and dst.host_inputs == "copy":
        steps.append("copy in")
    return len(steps), "; ".join(steps) or "zero-copy"


def boundaries(graph: Graph, subgraphs: list[Subgraph],
               memory: dict[str, BoundaryMemory] | None = None) -> list[Boundary]:
    """Every boundary tensor of a split, with the conversion the core will insert and, from the devices'
    ``Description.memory`` (``memory``: device name -> declaration; a device absent from it copies), the
    copies it costs per run."""
    memory = memory or {}

    def mem(device: str) -> BoundaryMemory:
        return memory.get(device, BoundaryMemory())

    producer = {name: sg for sg in subgraphs for name in sg.outputs}
    found = []
    for sg in subgraphs:
        for name in sg.inputs:
            src = producer.get(name)
            conversions = []
            if src is not None and name in src.output_formats:
                conversions.append(f"from {src.output_formats[name].describe()} to host")
            if name in sg.input_formats:
                conversions.append(f"to {sg.input_formats[name].describe()}")
            copies, how = transfer(mem(src.device) if src else None, mem(sg.device), bool(conversions),
                                   src is not None and src.device == sg.device)
            found.append(Boundary(name, f"subgraph #{src.index} ({src.device})" if src else "graph input",
                                  f"subgraph #{sg.index} ({sg.device})", "; ".join(conversions) or "none",
                                  graph.tensors[name].nbytes, _host(graph, name), copies, how))
    for name in graph.outputs:
        src = producer.get(name)
        if src is not None:
            conv = f"from {src.output_formats[name].describe()} to host" if name in src.output_formats else "none"
            copies, how = transfer(mem(src.device), None, conv != "none")
            found.append(Boundary(name, f"subgraph #{src.index} ({src.device})", "graph output", conv,
                                  graph.tensors[name].nbytes, _host(graph, name), copies, how))
    return found
