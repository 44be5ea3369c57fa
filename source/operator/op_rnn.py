"""RNN: simple recurrent layer Ht = f(Xt*W^T + Ht-1*R^T + Wb + Rb)."""
from __future__ import annotations

from nnhal.operator._qrc import RecurrentPrototype


class RNN(RecurrentPrototype):
    op_type = "RNN"
    versions = (1, 7, 14, 22)
    inputs = (3, 6)
    outputs = (0, 2)
    gates = 1
    default_activations = ("Tanh",)
