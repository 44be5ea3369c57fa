"""Clip on the CPU, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels import _blocks
from nnhal.hostkernels.base import Kernel, RunFn


def _bound(value, dtype: np.dtype) -> np.ndarray | None:
    """A bound as a 0-d array of the input dtype (None when absent)."""
    if value is None:
        return None
    with np.errstate(over="ignore"):
        return np.asarray(value).astype(dtype).reshape(())


class ClipKernel(Kernel):
    op_type = "Clip"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        legacy = node.version < 11
        attr_lo, attr_hi = (node.attrs["min"], node.attrs["max"]) if legacy else (None, None)

        def run(inputs, outputs):
            x = inputs[0]
            lo = _bound(attr_lo if legacy else (inputs[1] if len(inputs) > 1 else None), x.dtype)
            hi = _bound(attr_hi if legacy else (inputs[2] if len(inputs) > 2 else None), x.dtype)
            return (_blocks.clamp(x, lo, hi, outputs[0]),)

        return run


IMPLEMENTATIONS = (ClipKernel,)
