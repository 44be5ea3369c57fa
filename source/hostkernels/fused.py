"""Typed records of what a planner fused into a node, read by the kernels that run the fused node.

A planner (the cpu device's fusions) replaces a node and the element-wise nodes that follow it by one
:class:`FusedNode`: the same op, the chain's final outputs, and what the kernel must apply after its
own result (an :class:`Activation`, an epilogue of :class:`EpilogueOp`). A plain Node carries nothing
fused; kernels ask ``activation_of(node)`` / ``epilogue_of(node)``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from nnhal.graph.node import Node

ACTIVATION_KINDS = ("relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "tanh")


@dataclass(frozen=True)
class Activation:
    """An element-wise function applied in place on the first output: Relu; Clip to [lo, hi] (a bound
    None = unbounded); HardSwish; HardSigmoid, clamp(alpha * x + beta, 0, 1); Sigmoid; SiLU,
    x * sigmoid(x) (ONNX Swish with alpha 1, or torch's Sigmoid -> Mul(x, sigmoid(x))); or Tanh."""

    kind: Literal["relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "tanh"]
    lo: np.ndarray | None = None      # 0-d, in the output's dtype (clip)
    hi: np.ndarray | None = None
    alpha: float = 0.2                # hardsigmoid's slope and offset (ONNX's defaults)
    beta: float = 0.5


@dataclass(frozen=True)
class EpilogueOp:
    """One element-wise step on a MatMul's product, in place: ``product = op(product, inputs[input])``
    for Add/Mul/Sub/Div (the operand is node input ``input``), the exact float32 Gelu (input -1), or the
    tanh-approximated one (GeluTanh: a device's own kernels only, never the host's MatMul)."""

    op: Literal["Add", "Mul", "Sub", "Div", "Gelu", "GeluTanh"]
    input: int = -1


@dataclass
class FusedNode(Node):
    """A node that stands for a chain: ``absorbed`` names the nodes folded into it (for reports)."""

    activation: Activation | None = None
    epilogue: tuple[EpilogueOp, ...] = ()
    absorbed: tuple[str, ...] = ()


def fuse(node: Node, absorbed: Node, **changes) -> FusedNode:
    """``node`` as a FusedNode that also stands for ``absorbed``, with ``changes`` (outputs, inputs,
    activation, epilogue) applied."""
    base = {f.name: getattr(node, f.name) for f in fields(Node)}
    extra = {"activation": activation_of(node), "epilogue": epilogue_of(node),
             "absorbed": getattr(node, "absorbed", ()) + (absorbed.name,)}
    return FusedNode(**{**base, **extra, **changes})


def activation_of(node: Node) -> Activation | None:
    """The activation fused into ``node``, or None."""
    return node.activation if isinstance(node, FusedNode) else None


def epilogue_of(node: Node) -> tuple[EpilogueOp, ...]:
    """The element-wise epilogue fused into a MatMul ``node`` (empty for none)."""
    return node.epilogue if isinstance(node, FusedNode) else ()
