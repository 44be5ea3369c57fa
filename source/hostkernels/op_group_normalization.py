"""GroupNormalization on the CPU, computed in the stash dtype."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._nn import STASH_TYPES


class GroupNormalizationKernel(Kernel):
    op_type = "GroupNormalization"

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])
        groups = int(node.attrs["num_groups"])
        stash = STASH_TYPES[int(node.attrs.get("stash_type", 1))]
        per_group = node.version < 21

        def run(inputs, outputs):
            x, scale, bias = inputs
            n, c = x.shape[:2]
            xs = x.astype(stash, copy=False).reshape(n, groups, -1)
            mean = xs.mean(axis=2, keepdims=True)
            d = xs - mean
            d /= np.sqrt(np.mean(np.square(d), axis=2, keepdims=True) + stash.type(eps))
            if per_group:
                # NOTE: GroupNormalization-18 takes scale and bias per group, not per channel.
                y = d * scale.reshape(1, groups, 1) + bias.reshape(1, groups, 1)
                return (store(y.reshape(x.shape), outputs[0], x.dtype),)
            shape = (1, c) + (1,) * (x.ndim - 2)
            y = d.reshape(x.shape).astype(x.dtype, copy=False) * scale.reshape(shape) + bias.reshape(shape)
            return (store(y, outputs[0], x.dtype),)

        return run


IMPLEMENTATIONS = (GroupNormalizationKernel,)
