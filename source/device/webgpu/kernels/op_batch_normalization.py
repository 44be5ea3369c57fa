"""BatchNormalization in inference mode as an elementwise expression of broadcast channel vectors.

The core folds it into a preceding Conv or Gemm where it can; what remains (DenseNet's pre-activation
BN -> Relu) fuses with its neighbours here into one elementwise launch."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._wgsl import lit
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node


def load_shape(node: Node, i: int, em: Emitter) -> tuple[int, ...] | None:
    """The channel vectors broadcast as [C, 1, ..., 1] against X of [N, C, ...]."""
    if i == 0:
        return None
    x = em.shape(node.inputs[0])
    return (int(x[1]),) + (1,) * (len(x) - 2)


def _expr(node: Node, a: list[str], em: Emitter) -> str:
    x, scale, bias, mean, var = a[:5]
    return f"(({x} - {mean}) * inverseSqrt({var} + {lit(node.attrs.get('epsilon', 1e-5))}) * {scale} + {bias})"


EXPRS = {"BatchNormalization": _expr}
LOAD_SHAPES = {"BatchNormalization": load_shape}
OPS = tuple(EXPRS)


def why_not(c: Candidate) -> str | None:
    node = c.node
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) != 1:
        return "BatchNormalization in training mode (more than one output) is not implemented"
    x = c.inputs[0]
    if x is None or x.dtype is None or x.dtype.kind != "f" or x.dtype.itemsize != 4:
        return "BatchNormalization runs float32 only on webgpu"
    if c.inputs[0].rank is None or c.inputs[0].rank < 2:
        return "BatchNormalization needs an input of rank >= 2"
    if any(info is None or info.rank != 1 for info in c.inputs[1:5]):
        return "BatchNormalization parameters must be vectors of the channel count"
    return None
