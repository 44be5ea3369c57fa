"""8-bit tensors inside the channels-last regions of a CPU plan (layout.py).

Quantized convolution networks (a static-QDQ model after optimizer/qdq.py, or what the int8 precision pass
writes) are chains of QLinearConv with per-tensor QuantizeLinear / DequantizeLinear, lookup-table element-wise
ops (ai.nnhal CodeTable, com.microsoft QLinearAdd / QLinearMul) and float ops between them. The integer
convolution (integer.py) computes in NHWC; without regions every QLinearConv transposed its 8-bit input to
NHWC and its output back. Here:

* :func:`quantized_free`: the quantized element-wise nodes that run unchanged on NHWC data, so the layout
  pass joins their 8-bit and float tensors into one region; their constant operands (per-tensor scales and
  zero points, a CodeTable's 256 codes) are not images and stay as they are (:func:`keeps_constants`);
* com.microsoft QLinearConcat of 4-D 8-bit images with per-tensor parameters (:func:`quantized_concat`): it
  runs on NHWC images with its axis moved, as Concat does (YOLO's C2f and neck concatenations);
* a kernel with a ``channels_last(node, ins, outs)`` method (integer.py's QLinearConv) offers its own NHWC
  variant to the layout pass, as a table kernel with ``layout = "NHWC"`` does for a float op.
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
# (domain, op) -> positions of the image operands; every other input must be a constant single value,
# except a CodeTable's table (a 1-D constant)
_ELEMENTWISE = {("", "QuantizeLinear"): (0,), ("", "DequantizeLinear"): (0,), ("ai.nnhal", "CodeTable"): (0,),
                ("com.microsoft", "QLinearAdd"): (0, 3), ("com.microsoft", "QLinearMul"): (0, 3)}


def eight_bit(info) -> bool:
    """An 8-bit integer tensor type."""
    return info is not None and info.dtype is not None and np.dtype(info.dtype) in EIGHT_BIT


CONCAT = ("com.microsoft", "QLinearConcat")


def keeps_constants(node: Node) -> bool:
    """Whether ``node`` is a quantized op whose constant operands are parameters, not images."""
    return (node.domain, node.op_type) in _ELEMENTWISE or (node.domain, node.op_type) == CONCAT


def quantized_concat(node: Node, ins: list, outs: list, image) -> bool:
    """Whether ``node`` is a QLinearConcat of 4-D images (``image``: layout.py's test) into one, every scale and
    zero point a constant single value: it concatenates NHWC images along the moved axis."""
    live = [o for o, name in zip(outs, node.outputs) if name]
    if (node.domain, node.op_type) != CONCAT or node.implicit_inputs or len(live) != 1 or not image(live[0]) \
            or len(ins) < 5 or (len(ins) - 2) % 3:
        return False
    for k, info in enumerate(ins):
        if k >= 2 and (k - 2) % 3 == 0:
            if not image(info):
                return False
        elif info is None or info.value is None or np.size(info.value) != 1:
            return False
    return True


def quantized_free(node: Node, ins: list, outs: list, image) -> bool:
    """Whether ``node`` is a per-tensor quantized element-wise op on 4-D images of the output's shape (``image``:
    layout.py's test of a candidate tensor), so it runs on NHWC tensors as it runs on NCHW ones."""
    images = _ELEMENTWISE.get((node.domain, node.op_type))
    live = [o for o, name in zip(outs, node.outputs) if name]
    if images is None or node.implicit_inputs or len(live) != 1 or not image(live[0]) \
            or node.attrs.get("block_size", 0):
        return False
    if node.op_type == "CodeTable":
        table = ins[1] if len(ins) > 1 else None
        return image(ins[0]) and table is not None and table.value is not None and table.value.ndim == 1
    for k, info in enumerate(ins):
        if k in images:
            if not image(info) or tuple(info.shape) != tuple(live[0].shape):
                return False
        elif info is not None and (info.value is None or np.size(info.value) != 1):
            return False
    return True
