"""LSTM: long short-term memory (gates i, o, f, c) with optional peepholes and coupled input-forget."""
from __future__ import annotations

from nnhal.operator._qrc import RecurrentPrototype


class LSTM(RecurrentPrototype):
    op_type = "LSTM"
    versions = (1, 7, 14, 22)
    inputs = (3, 8)
    outputs = (0, 3)
    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    extra_attributes = {"input_forget": 0}
