"""The kernel table of the webgpu device: op type -> the module implementing it. Explicit, no scanning."""
from __future__ import annotations

from types import ModuleType

from nnhal.device.webgpu.kernels import (
    _eltwise,
    op_alias,
    op_arg_max,
    op_batch_normalization,
    op_binary,
    op_cast,
    op_compare,
    op_concat,
    op_conv,
    op_gather,
    op_gemm,
    op_layer_normalization,
    op_lrn,
    op_matmul,
    op_pool,
    op_reduce,
    op_resize,
    op_slice,
    op_softmax,
    op_transpose,
    op_unary,
)

ELEMENTWISE_MODULES = (op_unary, op_binary, op_batch_normalization, op_cast, op_compare)
LAUNCH_MODULES = (op_conv, op_matmul, op_gemm, op_pool, op_softmax, op_layer_normalization, op_reduce, op_lrn,
                  op_concat, op_slice, op_gather, op_transpose, op_arg_max, op_resize)

KERNELS: dict[str, ModuleType] = {}
for _module in ELEMENTWISE_MODULES + LAUNCH_MODULES + (op_alias,):
    for _op in _module.OPS:
        KERNELS[_op] = _module

# elementwise op -> its WGSL expression; these fuse into groups (and into GEMM epilogues)
EXPRS: dict[str, _eltwise.Expr] = {op: fn for m in ELEMENTWISE_MODULES for op, fn in m.EXPRS.items()}
for _module in ELEMENTWISE_MODULES:
    _eltwise.LOAD_SHAPES.update(getattr(_module, "LOAD_SHAPES", {}))

ALIASES = frozenset(op_alias.OPS)
EPILOGUE_PRODUCERS = frozenset(op for m in LAUNCH_MODULES if getattr(m, "FUSES_EPILOGUE", False) for op in m.OPS)
