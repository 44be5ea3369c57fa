"""Shrink: y = x + bias for x < -lambd, x - bias for x > lambd, 0 otherwise."""
from __future__ import annotations

from nnhal.operator._unary import NUMERIC, Unary


class Shrink(Unary):
    op_type = "Shrink"
    versions = (9,)
    kinds = NUMERIC
    attributes = {"bias": 0.0, "lambd": 0.5}
