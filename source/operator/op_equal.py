"""Equal: elementwise a == b (bool) with multidirectional broadcasting."""
from __future__ import annotations

from nnhal.operator._binary import Binary


class Equal(Binary):
    op_type = "Equal"
    versions = (7, 11, 13, 19)
    # NOTE: strings are accepted in every version (ONNX lists them from opset 19).
    kinds = "biufO"
    boolean = True
