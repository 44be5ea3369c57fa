"""LogSoftmax: log of the softmax along an axis (2-D coerced before opset 13)."""
from __future__ import annotations

from nnhal.operator._reduce import SoftmaxPrototype


class LogSoftmax(SoftmaxPrototype):
    op_type = "LogSoftmax"
