"""Xor: elementwise logical exclusive or of two bool tensors with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Xor(Binary):
    op_type = "Xor"
    versions = (7,)
    kinds = "b"
    boolean = True
