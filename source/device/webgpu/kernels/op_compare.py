"""Comparisons, logical ops and Where. Booleans are held as i32 0/1 on the device (widened back to
bool on readback), so they fuse with the float elementwise ops around them (an attention mask, a
ReLU written as Where(x > 0, x, 0))."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node


def _compare(op: str):
    return lambda n, a, em: f"select(0, 1, {a[0]} {op} {a[1]})"


def _logical(op: str):
    return lambda n, a, em: f"select(0, 1, ({a[0]} != 0) {op} ({a[1]} != 0))"


def _where(node: Node, a: list[str], em: Emitter) -> str:
    return f"select({a[2]}, {a[1]}, {a[0]} != 0)"


EXPRS = {
    "Equal": _compare("=="), "Less": _compare("<"), "Greater": _compare(">"),
    "LessOrEqual": _compare("<="), "GreaterOrEqual": _compare(">="),
    "And": _logical("&&"), "Or": _logical("||"), "Xor": _logical("!="),
    "Not": lambda n, a, em: f"select(1, 0, {a[0]} != 0)",
    "Where": _where,
}
OPS = tuple(EXPRS)
LOGICAL = ("And", "Or", "Xor", "Not")


def why_not(c: Candidate) -> str | None:
    node = c.node
    dtypes = [None if i is None else i.dtype for i in c.inputs]
    if any(d is None or elem_of(d) is None for d in dtypes):
        return f"{node.op_type} of {dtypes}: webgpu holds float32, int32, int64 and bool"
    if node.op_type in LOGICAL:
        return None if all(d.name == "bool" for d in dtypes) else f"{node.op_type} needs bool inputs"
    if node.op_type == "Where":
        if dtypes[0].name != "bool" or elem_of(dtypes[1]) != elem_of(dtypes[2]):
            return "Where needs a bool condition and two values of one device type"
        return None
    if elem_of(dtypes[0]) != elem_of(dtypes[1]) or dtypes[0].name == "bool":
        return f"{node.op_type} needs two numeric inputs of one device type"
    return None
