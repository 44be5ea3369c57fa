"""BatchNormalization on the CPU: y = x * a + b with a, b folded from the statistics."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._scratch import apply_activation
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.hostkernels.fused import activation_of


def _channel(p: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel parameter shaped to broadcast against (N, C, ...)."""
    if p.ndim == 1:
        return p.reshape((-1,) + (1,) * (rank - 2))
    # NOTE: spatial=0 (opset < 9) gives parameters shaped (C, D1, ...): one value per activation.
    return p


def fold(scale, bias, mean, var, eps: float, rank: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Multiplier and offset of inference batch normalization, in the input dtype."""
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    b = bias.astype(np.float64) - mean.astype(np.float64) * a
    return _channel(a.astype(dtype), rank), _channel(b.astype(dtype), rank)


class BatchNormalizationKernel(Kernel):
    op_type = "BatchNormalization"
    inplace = {0: 0}
    fuse_activation = True   # a Relu/Clip fused by the CPU plan (DenseNet's BN -> Relu) runs in place on y

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(node.attrs["epsilon"])
        training = bool(node.attrs.get("training_mode", 0))
        dtype = outs[0].dtype
        consts = [i.value for i in ins[1:5]]
        folded = None
        if not training and all(c is not None for c in consts) and ins[0].shape is not None:
            folded = fold(*consts, eps, len(ins[0].shape), dtype)
        momentum = float(node.attrs["momentum"])
        act = activation_of(node)

        def run(inputs, outputs):
            x = inputs[0]
            if training:
                result = _train(x, *inputs[1:5], eps, momentum, outputs)
                apply_activation(result[0], act)
                return result
            a, b = folded if folded is not None else fold(*inputs[1:5], eps, x.ndim, x.dtype)
            y = np.multiply(x, a, out=outputs[0])
            np.add(y, b, out=y)
            apply_activation(y, act)
            return (y,)

        return run


def _train(x, scale, bias, mean, var, eps: float, momentum: float, outputs: list) -> tuple:
    """Normalize with batch statistics and update the running ones (training_mode=1)."""
    axes = (0,) + tuple(range(2, x.ndim))
    batch_mean = x.mean(axis=axes, dtype=np.float64)
    batch_var = x.var(axis=axes, dtype=np.float64)
    a, b = fold(scale, bias, batch_mean, batch_var, eps, x.ndim, x.dtype)
    y = np.add(x * a, b, out=outputs[0])
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_var = var * momentum + batch_var * (1 - momentum)
    results = [y, store(running_mean, outputs[1] if len(outputs) > 1 else None, mean.dtype),
               store(running_var, outputs[2] if len(outputs) > 2 else None, var.dtype)]
    return tuple(results[:len(outputs)])


IMPLEMENTATIONS = (BatchNormalizationKernel,)
