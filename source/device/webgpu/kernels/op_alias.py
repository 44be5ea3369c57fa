"""Reshape, Flatten, Squeeze, Unsqueeze, Identity and inference Dropout: no launch at all.

The output names the input's buffer (the layout of a contiguous tensor does not change), so
these cost nothing on the device; only a Dropout whose mask is read launches, to fill the mask with
true (inference keeps every element)."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node

OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or elem_of(x.dtype) is None:
        return f"{c.node.op_type} of {None if x is None else x.dtype} (webgpu holds float32, int32 and int64)"
    if not c.outputs[0].static:
        return f"{c.node.op_type}'s output shape is not known"
    if c.node.op_type == "Dropout":
        if len(c.inputs) > 2 and c.node.inputs[2]:
            mode = c.inputs[2]
            if mode is None or mode.value is None or bool(np.ravel(mode.value)[0]):
                return "Dropout in training mode is not implemented"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    """Only for Dropout with a read mask (the plan aliases output 0): the mask is all true."""
    for name in node.outputs[1:]:
        if name:
            em.launch(index_launch(em, [], name, ["let val = 1;"], "Dropout(mask)"))
