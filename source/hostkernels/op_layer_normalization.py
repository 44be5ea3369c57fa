"""LayerNormalization on the CPU, computed in the stash dtype (the cpu device's fast variant:
device/cpu/kernels/layer_normalization.py)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import STASH_TYPES


class LayerNormalizationKernel(Kernel):
    op_type = "LayerNormalization"
    inplace = {0: 0}

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])
        stash = STASH_TYPES[int(node.attrs["stash_type"])]
        axis_attr = node.attrs["axis"]
        n_out = len(outs)

        def run(inputs, outputs):
            x, scale, bias = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
            axis = axis_attr + x.ndim if axis_attr < 0 else axis_attr
            axes = tuple(range(axis, x.ndim))
            xs = x.astype(stash, copy=False)
            mean = xs.mean(axis=axes, keepdims=True)
            d = xs - mean
            inv = 1 / np.sqrt(np.mean(np.square(d), axis=axes, keepdims=True) + stash.type(eps))
            d *= inv
            if x.dtype == stash:
                d *= scale
                y = d if bias is None else np.add(d, bias, out=d)
            else:
                y = d.astype(x.dtype) * scale
                if bias is not None:
                    y += bias
            results = [store(y, outputs[0], x.dtype), store(mean, outputs[1] if n_out > 1 else None, stash),
                       store(inv, outputs[2] if n_out > 2 else None, stash)]
            return tuple(results[:n_out])

        return run


IMPLEMENTATIONS = (LayerNormalizationKernel,)
