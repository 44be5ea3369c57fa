"""Binary and variadic elementwise ops with numpy broadcasting (f32)."""
from __future__ import annotations

from functools import reduce

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node


def _fold(fn: str):
    return lambda n, a, em: reduce(lambda x, y: f"{fn}({x}, {y})", [x for x in a if x])


def _infix(op: str):
    return lambda n, a, em: reduce(lambda x, y: f"({x} {op} {y})", [x for x in a if x])


def _pow(node: Node, a: list[str], em: Emitter) -> str:
    # NOTE: WGSL pow(x, y) is undefined for x < 0; ONNX follows C pow: integral y keeps the sign rule
    x, y = a
    return (f"select(select(pow(abs({x}), {y}), -pow(abs({x}), {y}), "
            f"{x} < 0.0 && floor({y}) == {y} && (i32(abs({y})) & 1) == 1), bitcast<f32>(0x7fc00000u), "
            f"{x} < 0.0 && floor({y}) != {y})")


def _prelu(node: Node, a: list[str], em: Emitter) -> str:
    return f"select({a[0]} * {a[1]}, {a[0]}, {a[0]} >= 0.0)"


def _mean(node: Node, a: list[str], em: Emitter) -> str:
    args = [x for x in a if x]
    return f"(({' + '.join(args)}) / {float(len(args))})"


EXPRS = {
    "Add": _infix("+"), "Sub": _infix("-"), "Mul": _infix("*"), "Div": _infix("/"), "Sum": _infix("+"),
    "Max": _fold("max"), "Min": _fold("min"), "Mean": _mean, "Pow": _pow, "PRelu": _prelu,
}
OPS = tuple(EXPRS)


def why_not(c: Candidate) -> str | None:
    node = c.node
    for i, info in enumerate(c.inputs):
        if info is None or info.dtype is None or info.dtype.kind != "f" or info.dtype.itemsize != 4:
            return f"{node.op_type} runs float32 only on webgpu (input {i})"
    if node.op_type == "PRelu" and node.version < 7:
        return "PRelu before opset 7 (no broadcasting) is not implemented"
    return None
