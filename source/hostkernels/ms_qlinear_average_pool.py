"""QLinearAveragePool (com.microsoft) on the CPU: the AveragePool kernel on real values, requantized."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._msq import real, to_quantized
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.hostkernels.select import select
from nnhal.operator.base import Info


class QLinearAveragePoolKernel(Kernel):
    op_type = "QLinearAveragePool"

    def prepare(self, node, ins, outs) -> RunFn:
        pool_node = node.__class__(node.name, "AveragePool", [node.inputs[0]], node.outputs,
                                   {k: v for k, v in node.attrs.items() if k != "channels_last"}, "", 19, 19)
        x = ins[0]
        pool = select(pool_node, [Info(np.dtype(np.float32), x.shape)], [Info(np.dtype(np.float32), outs[0].shape)])
        f32 = np.dtype(np.float32)
        run_pool = pool.prepare(pool_node, [Info(f32, x.shape)], [Info(f32, outs[0].shape)])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, x_scale, x_zero, y_scale = inputs[:4]
            y_zero = inputs[4] if len(inputs) > 4 else None
            value = run_pool([real(x, x_scale, x_zero)], [None])[0]
            return (store(to_quantized(value, y_scale, y_zero, dtype), outputs[0]),)

        return run

IMPLEMENTATIONS = (QLinearAveragePoolKernel,)
