"""Concat on the CPU: straight into the output buffer."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


class ConcatKernel(Kernel):
    op_type = "Concat"
    # the CPU plan may place inputs inside the output buffer (plan.concat_slices): those are not copied
    writes_in_place = True

    def prepare(self, node, ins, outs) -> RunFn:
        axis = node.attrs["axis"]

        def run(inputs, outputs):
            parts = [x for x in inputs if x is not None]
            out = outputs[0]
            if out is None:
                return (np.concatenate(parts, axis=axis),)
            ax = axis % out.ndim
            lead = (slice(None),) * ax
            base = out.__array_interface__["data"][0]
            off = 0
            for x in parts:
                k = x.shape[ax]
                dst = out[lead + (slice(off, off + k),)]
                if x.__array_interface__["data"][0] != dst.__array_interface__["data"][0] or base == 0 or any(
                        a != b for a, b, n in zip(x.strides, dst.strides, x.shape) if n > 1):
                    np.copyto(dst, x)
                off += k
            return (out,)

        return run


IMPLEMENTATIONS = (ConcatKernel,)
