"""Transpose: each output element reads the input at its permuted coordinates."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import flat, index_launch
from nnhal.device.webgpu.kernels._wgsl import strides
from nnhal.device.webgpu.kernels.base import Emitter, elem_of
from nnhal.graph.node import Node

OPS = ("Transpose",)


def why_not(c: Candidate) -> str | None:
    if c.inputs[0] is None or not c.inputs[0].static or elem_of(c.inputs[0].dtype) is None:
        return "Transpose needs a float32/int tensor of known shape"
    return None


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    shape = em.shape(node.inputs[0])
    perm = list(node.attrs.get("perm") or reversed(range(len(shape))))
    st = strides(shape)
    body = [f"let val = in0[{flat([(f'c{o}', st[p]) for o, p in enumerate(perm)])}];"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, "Transpose"))
