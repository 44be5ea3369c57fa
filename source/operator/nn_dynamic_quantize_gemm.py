"""DynamicQuantizeGemm (ai.nnhal): X W^T + bias with X quantized per row at run time, W int8 per channel.

Inputs: X float32 [M, K]; W int8 [N, K] (symmetric, zero point 0); w_scale
float32 [N], or [N, K / block] with ``block``; bias float32 [N] (optional);
W_float float32 [len(float_columns), K] (with ``float_columns``). Attribute
``activation``: "int8" (each row symmetric, scale max|x|/127) or "uint8" (each
row asymmetric over [min(x, 0), max(x, 0)], scale range/255). Attribute
``block`` (0: whole rows): with b > 0, every row of X and every output channel
of W is quantized in blocks of b along K, each block with its own scale
(llama.cpp's Q8_0, OCP MXINT8); Y sums the blocks' integer dot products times
their two scales. Output Y float32
[M, N] = (Xq - zx) Wq^T * (sx sw) + bias (integer sums; a kernel may round them
below the 8-bit step, as the CPU's float32 BLAS does beyond K = 518), except
the output columns listed in ``float_columns`` (outlier dimensions), which are
X W_float^T + bias in float32 (LLM.int8()'s mixed decomposition, output side): per-token
dynamic quantization (LLM.int8's vector-wise activations, onnxruntime's
DynamicQuantizeMatMul per row instead of per tensor).
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class DynamicQuantizeGemm(Prototype):
    op_type = "DynamicQuantizeGemm"
    domain = "ai.nnhal"
    versions = (1,)
    inputs = (3, 5)
    attributes = {"activation": "int8", "float_columns": [], "block": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        if node.attrs["activation"] not in ("int8", "uint8"):
            raise self.fail(node, f"activation must be 'int8' or 'uint8', got {node.attrs['activation']!r}")
        if w.dtype is not None and w.dtype != np.dtype(np.int8):
            raise self.fail(node, f"W must be int8, got {w.dtype}")
        if x.shape is None or w.shape is None:
            return [Info(np.dtype(np.float32), None)]
        if len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[1]:
            raise self.fail(node, f"X {x.shape} and W {w.shape} must be [M, K] and [N, K]")
        block, scale = int(node.attrs["block"] or 0), ins[2]
        if block < 0 or (block and w.shape[1] % block):
            raise self.fail(node, f"block {block} must be 0 or a divisor of K = {w.shape[1]}")
        want = (w.shape[0], w.shape[1] // block) if block else (w.shape[0],)
        if scale is not None and scale.shape is not None and tuple(scale.shape) != want:
            raise self.fail(node, f"w_scale has shape {tuple(scale.shape)}; block {block} needs {want}")
        columns = list(node.attrs["float_columns"] or [])
        wf = ins[4] if len(ins) > 4 else None
        if columns and (wf is None or wf.shape is None or tuple(wf.shape) != (len(columns), w.shape[1])
                        or not all(0 <= c < w.shape[0] for c in columns)):
            raise self.fail(node, f"float_columns {columns} need W_float of shape [{len(columns)}, {w.shape[1]}] "
                                  f"and columns below {w.shape[0]}")
        return [Info(np.dtype(np.float32), (x.shape[0], w.shape[0]))]
