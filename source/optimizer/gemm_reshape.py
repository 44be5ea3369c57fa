"""A Gemm between two Reshapes that flatten and restore the leading axes becomes MatMul + Add.

onnxruntime's optimizer (MatMulAddFusion, ORT_ENABLE_EXTENDED) rewrites a transformer's ``MatMul(x, W) + b``
on a rank-3 activation into

    Reshape(x, [M, K]) -> Gemm(., W, b) -> Reshape(., [B, S, N])

and a model saved by it keeps that form. ``unfold_reshaped_gemm`` turns it back into
``MatMul(x, W) -> Add(., b) -> Reshape(., [B, S, N])`` (the last Reshape is then a no-op or a split of heads),
so a device's MatMul takes the bias, a residual Add, a Gelu or a LayerNormalization's input in its epilogue
as it does for the unoptimized export. The same products and the same one bias add per value: the result is
within one float32 rounding (the Gemm's fused bias add against the Add's) of the Gemm's.
"""
from __future__ import annotations

import math

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, constant
from nnhal.operator.table import get_prototype
from nnhal.optimizer.movement import fresh_name


def _reshape_of(node: Node | None) -> bool:
    return node is not None and node.op_type == "Reshape" and not node.domain and len(node.outputs) == 1


def unfold_reshaped_gemm(graph: Graph) -> int:
    """Rewrite each float ``Reshape(x, [M, K]) -> Gemm(transA 0, alpha 1, constant (K, N) weight, constant
    (N,) or no bias with beta 1) -> Reshape`` where x has rank 3 or more, static shape (..., K), M is the
    product of its leading axes, and neither intermediate has another reader or is a graph output, into
    MatMul(x, W) (+ Add(., bias)) feeding the last Reshape. Returns how many it rewrote."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs) | set(graph.outer)
    changed = 0
    for gemm in list(graph.nodes):
        if gemm.op_type != "Gemm" or gemm.domain or len(gemm.outputs) != 1:
            continue
        a = gemm.attrs
        if a.get("transA", 0) or a.get("transB", 0) or float(a.get("alpha", 1.0)) != 1.0:
            continue
        flat, w_name = gemm.input(0), gemm.input(1)
        bias_name = gemm.input(2)
        first = producers.get(flat)
        w = graph.tensors.get(w_name)
        if not _reshape_of(first) or w is None or not w.is_constant or w.shape is None or len(w.shape) != 2:
            continue
        x = graph.tensors.get(first.input(0))
        if x is None or x.shape is None or any(not isinstance(d, int) for d in x.shape) \
                or x.dtype is None or x.dtype.kind != "f" or x.quant is not None or w.dtype != x.dtype:
            continue
        k, n = w.shape
        if graph.tensors[flat].shape != (math.prod(x.shape) // k if k else -1, k):
            continue
        if bias_name:
            b = graph.tensors.get(bias_name)
            if b is None or not b.is_constant or b.shape != (n,) or b.dtype != x.dtype \
                    or float(a.get("beta", 1.0)) != 1.0:
                continue
        y = gemm.outputs[0]
        readers = consumers.get(y, [])
        if y in outputs or flat in outputs or len(readers) != 1 or not _reshape_of(readers[0]) \
                or readers[0].input(0) != y or len(consumers.get(flat, [])) != 1:
            continue
        last = readers[0]
        target = graph.tensors.get(last.outputs[0])
        if target is None or target.shape is None or any(not isinstance(d, int) for d in target.shape):
            continue
        m = graph.tensors[flat].shape[0]
        # the leading axes the product keeps: the last Reshape's when it only splits M back (an output
        # projection after merging heads), else x's own when its last axis is K (q/k/v before splitting heads)
        if len(target.shape) >= 3 and target.shape[-1] == n and math.prod(target.shape[:-1]) == m:
            lead = tuple(target.shape[:-1])
        elif len(x.shape) >= 3 and x.shape[-1] == k:
            lead = tuple(x.shape[:-1])
        else:
            continue
        operand = first.input(0)
        if tuple(x.shape) != lead + (k,):
            shape_name = fresh_name(graph, f"{first.name}_shape")
            graph.tensors[shape_name] = constant(shape_name, np.array(lead + (k,), np.int64))
            first.inputs[1] = shape_name
            graph.tensors[flat].shape = lead + (k,)
            operand = flat
        else:
            graph.nodes.remove(first)
            graph.tensors.pop(flat, None)
        # the last Reshape goes too when it restores exactly the product's shape
        identity = tuple(target.shape) == lead + (n,)
        y_name = last.outputs[0] if identity else fresh_name(graph, f"{gemm.name}_out")
        mm_out = y_name if not bias_name else fresh_name(graph, f"{gemm.name}_matmul")
        graph.tensors[mm_out] = Tensor(mm_out, x.dtype, lead + (n,)) if mm_out != y_name \
            else graph.tensors[y_name]
        new = [Node(f"{gemm.name}/matmul", "MatMul", [operand, w_name], [mm_out], {}, "",
                    gemm.opset, get_prototype("", "MatMul").version_for(gemm.opset))]
        if bias_name:
            if y_name not in graph.tensors:
                graph.tensors[y_name] = Tensor(y_name, x.dtype, lead + (n,))
            new.append(Node(f"{gemm.name}/bias", "Add", [mm_out, bias_name], [y_name], {}, "", gemm.opset,
                            get_prototype("", "Add").version_for(gemm.opset)))
        elif mm_out != y_name:
            graph.tensors[y_name] = Tensor(y_name, x.dtype, lead + (n,))
        at = graph.nodes.index(gemm)
        graph.nodes[at:at + 1] = new
        if identity:
            graph.nodes.remove(last)
        else:
            last.inputs[0] = y_name
        graph.tensors.pop(y, None)
        changed += 1
    return changed
