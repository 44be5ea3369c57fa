"""The cpu device's fast kernels: native, pooled or channels-last variants of the host kernels, one module per
op family (nnhal.hostkernels keeps the numpy reference of every op, which constant folding and the other
devices share). The cpu device's plan chooses among both: :func:`select` is the host select with this
folder's table as its ``extra`` kernels, :func:`implementations` lists both.

A module here defines ``IMPLEMENTATIONS`` (Kernel classes of ONNX ops) and, for ops of other domains,
``DOMAINS`` (domain -> classes); the helpers they share are the modules whose names start with "_".
"""
from __future__ import annotations

from nnhal.device.cpu.kernels import (
    add,
    attention,
    batch_normalization,
    cast,
    concat,
    control,
    conv,
    conv1d,
    conv_patch,
    conv_transpose,
    depth_to_space,
    gates,
    gather,
    gelu,
    gemm,
    instance_norm,
    layer_normalization,
    lrn,
    matmul,
    mul,
    pad,
    pool,
    qdq,
    qlinear_tables,
    quantized,
    recurrent,
    reduce,
    resize,
    softmax,
    split,
    step_gemm,
    transpose,
    view,
)
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel
from nnhal.hostkernels.select import KernelTable, kernel_table
from nnhal.hostkernels.select import implementations as host_implementations
from nnhal.hostkernels.select import select as host_select
from nnhal.operator.base import Info

MODULES = (add, attention, batch_normalization, cast, concat, control, conv, conv1d, conv_patch, conv_transpose,
           depth_to_space, gates, gather, gelu, gemm, instance_norm, layer_normalization, lrn, matmul, mul, pad, pool,
           qdq, qlinear_tables, quantized, recurrent, reduce, resize, softmax, split, transpose, view)


def _table() -> KernelTable:
    table = dict(kernel_table(cls for module in MODULES for cls in module.IMPLEMENTATIONS))
    for module in MODULES:
        for domain, classes in getattr(module, "DOMAINS", {}).items():
            table.update(kernel_table(classes, domain))
    return table


FAST = _table()
# a control-flow body's plan chooses among these too (step_gemm.py: one step's small products)
BODY = dict(FAST)
for _key, _kernels in kernel_table(step_gemm.IMPLEMENTATIONS).items():
    BODY[_key] = (*FAST.get(_key, ()), *_kernels)


def select(node: Node, ins: list[Info | None], outs: list[Info], layout: str | None = None,
           body: bool = False) -> Kernel:
    """The best kernel for this node on the cpu device: a host kernel or one of this folder's (``body``: in a
    control-flow body's plan, whose step kernels are candidates too)."""
    return host_select(node, ins, outs, layout, extra=BODY if body else FAST)


def implementations(op_type: str, domain: str = "") -> tuple[Kernel, ...]:
    """Every implementation of an op on the cpu device: the host kernels, then this folder's."""
    return (*host_implementations(op_type, domain), *FAST.get(("" if domain == "ai.onnx" else domain, op_type), ()))
