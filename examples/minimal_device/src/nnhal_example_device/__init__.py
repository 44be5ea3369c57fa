"""mini: a float device for nnhal in numpy (Relu, Add, MatMul), found through its entry point.

nnhal.init() imports this module (entry point group ``nnhal.devices``), checks
NNHAL_DEVICE_API against its own device API and registers create_device().
"""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Allocator, Description, Device, Interface, Verdict

NNHAL_DEVICE_API = (1, 0)

KERNELS = {
    "Relu": lambda x: np.maximum(x, 0),
    "Add": np.add,
    "MatMul": np.matmul,
}


def mini_run(device: Device, sg) -> None:
    """Compute the subgraph's nodes in order; write only the subgraph's outputs into sg.values."""
    local: dict[str, np.ndarray] = {}

    def value(name: str) -> np.ndarray:
        if name in local:
            return local[name]
        if name in sg.values:                  # boundary inputs, put there by the core
            return sg.values[name]
        return sg.graph.tensors[name].value    # constants (initializers, folded tensors)

    for node in sg.nodes:
        local[node.outputs[0]] = KERNELS[node.op_type](*(value(i) for i in node.inputs))
    for name in sg.outputs:
        sg.values[name] = local[name]


def mini_describe(device: Device) -> Description:
    # reentrant: run keeps its intermediates local, so concurrent runs of one Session may enter it together
    return Description(frozenset(KERNELS), ("fp32",), summary="example float device (numpy)", reentrant=True)


def mini_evaluation(device: Device, candidate) -> Verdict:
    """Take float32 tensors only: other dtypes (int64 shapes, uint8, ...) stay on the CPU."""
    if any(i is None or i.dtype != np.float32 for i in candidate.inputs):
        return Verdict.no("mini runs float32 tensors only")
    return Verdict.yes()


def create_device() -> Device:
    return Device("mini", Interface(run=mini_run),
                  Allocator(describe=mini_describe, evaluation=mini_evaluation))
