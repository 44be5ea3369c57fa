"""MatMul with numpy semantics: 1-D operands promoted, batch dimensions broadcast, on the tiled GEMM."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._gemm import GemmSpec, gemm_launch
from nnhal.device.webgpu.kernels._wgsl import strides
from nnhal.device.webgpu.kernels.base import Emitter, EpilogueMaker
from nnhal.graph.node import Node

OPS = ("MatMul",)
FUSES_EPILOGUE = True


def why_not(c: Candidate) -> str | None:
    for i, info in enumerate(c.inputs[:2]):
        if info is None or not info.static or info.dtype is None or info.dtype.name != "float32":
            return f"MatMul input {i} must be float32 of known shape"
    return None


def batch_offset(fn: str, shape: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> str:
    """WGSL fn ``fn(b) -> u32``: the first element of batch ``b`` (of ``batch``) in an operand of ``shape``."""
    lead = tuple(shape[:-2])
    if int(np.prod(lead, dtype=np.int64)) <= 1:
        return f"fn {fn}(b: u32) -> u32 {{ return 0u; }}"
    if tuple(lead) == tuple(batch):
        return f"fn {fn}(b: u32) -> u32 {{ return b * {matrix}u; }}"
    full = (1,) * (len(batch) - len(lead)) + lead
    terms = []
    for i, (d, s, bs) in enumerate(zip(full, strides(full), strides(batch))):
        if d != 1:
            terms.append(f"((b / {bs}u) % {batch[i]}u) * {s}u")
    return f"fn {fn}(b: u32) -> u32 {{ return ({' + '.join(terms)}) * {matrix}u; }}"


def lower(node: Node, em: Emitter, make_epilogue: EpilogueMaker | None) -> None:
    a, b = em.shape(node.inputs[0]), em.shape(node.inputs[1])
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    m, k, n = int(a2[-2]), int(a2[-1]), int(b2[-1])
    batch = tuple(int(d) for d in np.broadcast_shapes(a2[:-2], b2[:-2]))
    load_a = batch_offset("a_base", a2, batch, m * k) + f"""
fn load_a(b: u32, m: u32, k: u32) -> f32 {{ return in0[a_base(b) + m * {k}u + k]; }}"""
    load_b = batch_offset("b_base", b2, batch, k * n) + f"""
fn load_b(b: u32, k: u32, n: u32) -> f32 {{ return in1[b_base(b) + k * {n}u + n]; }}"""
    spec = GemmSpec(int(np.prod(batch, dtype=np.int64)), m, n, k,
                    ((node.inputs[0], "f32"), (node.inputs[1], "f32")), load_a, load_b, label="MatMul")
    em.launch(gemm_launch(spec, node.outputs[0], make_epilogue, em))
