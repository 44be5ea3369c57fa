"""Unary elementwise ops and activations (f32): one WGSL expression each, fused by _eltwise."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node


def _a(node: Node, name: str, default: float) -> str:
    return lit(float(node.attrs.get(name, default)))


def _clip(node: Node, args: list[str], em: Emitter) -> str:
    lo, hi = "bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"
    if node.version < 11:
        lo, hi = _a(node, "min", -3.4028234663852886e38), _a(node, "max", 3.4028234663852886e38)
    else:
        # the bounds are tensors read like any other operand (scalars broadcast)
        if len(node.inputs) > 1 and node.inputs[1]:
            lo = args[1]
        if len(node.inputs) > 2 and node.inputs[2]:
            hi = args[2]
    x = args[0]
    # NOTE: min(max()) and not clamp(): clamp with lo > hi is undefined in WGSL, ONNX gives hi
    return f"min(max({x}, {lo}), {hi})"


def _gelu(node: Node, args: list[str], em: Emitter) -> str:
    x = args[0]
    if node.attrs.get("approximate", "none") == "tanh":
        return f"0.5 * {x} * (1.0 + nn_tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
    return f"0.5 * {x} * (1.0 + nn_erf({x} * 0.7071067811865476))"


EXPRS = {
    "Relu": lambda n, a, em: f"max({a[0]}, 0.0)",
    "Sigmoid": lambda n, a, em: f"(1.0 / (1.0 + exp(-{a[0]})))",
    "Tanh": lambda n, a, em: f"nn_tanh({a[0]})",
    "Exp": lambda n, a, em: f"exp({a[0]})",
    "Log": lambda n, a, em: f"log({a[0]})",
    "Sqrt": lambda n, a, em: f"sqrt({a[0]})",
    "Neg": lambda n, a, em: f"(-{a[0]})",
    "Abs": lambda n, a, em: f"abs({a[0]})",
    "Reciprocal": lambda n, a, em: f"(1.0 / {a[0]})",
    "Floor": lambda n, a, em: f"floor({a[0]})",
    "Ceil": lambda n, a, em: f"ceil({a[0]})",
    "Round": lambda n, a, em: f"round({a[0]})",
    "Sign": lambda n, a, em: f"sign({a[0]})",
    "Sin": lambda n, a, em: f"sin({a[0]})",
    "Cos": lambda n, a, em: f"cos({a[0]})",
    "Erf": lambda n, a, em: f"nn_erf({a[0]})",
    "Softsign": lambda n, a, em: f"({a[0]} / (1.0 + abs({a[0]})))",
    "Softplus": lambda n, a, em: f"select(log(1.0 + exp({a[0]})), {a[0]}, {a[0]} > 20.0)",
    "LeakyRelu": lambda n, a, em: f"select({a[0]} * {_a(n, 'alpha', 0.01)}, {a[0]}, {a[0]} >= 0.0)",
    "Elu": lambda n, a, em: f"select({_a(n, 'alpha', 1.0)} * (exp({a[0]}) - 1.0), {a[0]}, {a[0]} >= 0.0)",
    "Selu": lambda n, a, em: (f"{_a(n, 'gamma', 1.0507009873554805)} * select({_a(n, 'alpha', 1.6732632423543772)}"
                              f" * (exp({a[0]}) - 1.0), {a[0]}, {a[0]} > 0.0)"),
    "Celu": lambda n, a, em: (f"(max({a[0]}, 0.0) + min(0.0, {_a(n, 'alpha', 1.0)} * "
                              f"(exp({a[0]} / {_a(n, 'alpha', 1.0)}) - 1.0)))"),
    "ThresholdedRelu": lambda n, a, em: f"select(0.0, {a[0]}, {a[0]} > {_a(n, 'alpha', 1.0)})",
    "HardSigmoid": lambda n, a, em: f"clamp({_a(n, 'alpha', 0.2)} * {a[0]} + {_a(n, 'beta', 0.5)}, 0.0, 1.0)",
    "HardSwish": lambda n, a, em: f"({a[0]} * clamp({a[0]} / 6.0 + 0.5, 0.0, 1.0))",
    "Mish": lambda n, a, em: f"({a[0]} * nn_tanh(select(log(1.0 + exp({a[0]})), {a[0]}, {a[0]} > 20.0)))",
    "Clip": _clip,
    "Gelu": _gelu,
}
OPS = tuple(EXPRS)


def why_not(c: Candidate) -> str | None:
    node = c.node
    x = c.inputs[0]
    if x is None or x.dtype is None or x.dtype.kind != "f" or x.dtype.itemsize != 4:
        return f"{node.op_type} runs float32 only on webgpu"
    for i in range(1, len(c.inputs)):
        info = c.inputs[i]
        if node.inputs[i] and (info is None or info.dtype is None or info.dtype != c.inputs[0].dtype):
            return f"{node.op_type} input {i} must be float32"
    return None
