"""Gemm: alpha * op(A) @ op(B) + beta * C, transposes read through the loaders' strides."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._gemm import GemmSpec, gemm_launch
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter, EpilogueMaker
from nnhal.graph.node import Node

OPS = ("Gemm",)
FUSES_EPILOGUE = True


def why_not(c: Candidate) -> str | None:
    for i, info in enumerate(c.inputs):
        if info is None or not info.static or info.dtype is None or info.dtype.name != "float32":
            return f"Gemm input {i} must be float32 of known shape"
    if c.inputs[0].rank != 2 or c.inputs[1].rank != 2:
        return "Gemm operands must be matrices"
    return None


def lower(node: Node, em: Emitter, make_epilogue: EpilogueMaker | None) -> None:
    a, b = em.shape(node.inputs[0]), em.shape(node.inputs[1])
    ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
    m, k = (a[1], a[0]) if ta else (a[0], a[1])
    n = b[0] if tb else b[1]
    a_index = f"k * {m}u + m" if ta else f"m * {k}u + k"
    b_index = f"n * {k}u + k" if tb else f"k * {n}u + n"
    inputs = [(node.inputs[0], "f32"), (node.inputs[1], "f32")]
    bias = ""
    if len(node.inputs) > 2 and node.inputs[2]:
        inputs.append((node.inputs[2], "f32"))
        c = tuple(int(d) for d in em.shape(node.inputs[2]))
        c = (1,) * (2 - len(c)) + c
        index = " + ".join(t for t, d in ((f"m * {c[1]}u", c[0]), ("n", c[1])) if d != 1) or "0u"
        beta = float(node.attrs.get("beta", 1.0))
        bias = f"in2[{index}]" + ("" if beta == 1.0 else f" * {lit(beta)}")
    spec = GemmSpec(1, int(m), int(n), int(k), tuple(inputs),
                    f"fn load_a(b: u32, m: u32, k: u32) -> f32 {{ return in0[{a_index}]; }}",
                    f"fn load_b(b: u32, k: u32, n: u32) -> f32 {{ return in1[{b_index}]; }}",
                    bias, float(node.attrs.get("alpha", 1.0)), label="Gemm")
    em.launch(gemm_launch(spec, node.outputs[0], make_epilogue, em))
