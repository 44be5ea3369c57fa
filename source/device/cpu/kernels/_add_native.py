"""Residual sums in one pass: Add, and Sum of two inputs, over same-shape float32 tensors with the activation
the CPU plan fused into them (fusions.fuse_activations), by the native kernel (kernels.c nn_add_act_f32).

numpy adds, then applies the activation in a second pass over the output; here each chunk is summed and
activated while in L1 (ShuffleNet's Sum + Relu, ResNet's Add + Relu). Without a fused activation the
numpy ufunc is already one pass and runs as before.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._gates import apply_activation
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.operator.base import Info


def accepts(ins: list[Info | None], outs: list[Info]) -> bool:
    """Two static float32 operands of the output's shape (no broadcasting), native kernels loaded."""
    if not native.available() or len(ins) != 2 or any(i is None or not i.static for i in ins) or not outs[0].static:
        return False
    return all(i.dtype == np.float32 and tuple(i.shape) == tuple(outs[0].shape) for i in ins)


def fused_run(node, outs: list[Info], plain: RunFn) -> RunFn:
    """The one-pass run of ``node`` when an activation is fused into it, else ``plain`` (numpy's)."""
    act = activation_of(node)
    if act is None:
        return plain
    record = native.make_act(act.kind, None if act.lo is None else float(act.lo),
                             None if act.hi is None else float(act.hi), act.alpha, act.beta)
    shape = tuple(outs[0].shape)
    size = int(np.prod(shape, dtype=np.int64))

    def run(inputs, outputs):
        a, b = inputs
        out = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
        if not (a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous):
            np.add(a, b, out=out)
            apply_activation(out, act)
            return (out,)
        native.add_act(a, b, out, record, 0, size)
        return (out,)

    def bind(inputs, outputs):
        # NOTE: a planned step (straight.bind): the one native pass on the fixed buffers (ResNet's residual Add +
        # Relu between two bound convolutions); operands the plain run would send to numpy decline
        a, b = inputs
        out = outputs[0]
        if any(t is None or t.dtype != np.float32 or t.shape != shape or not t.flags.c_contiguous
               for t in (a, b, out)):
            return None
        return partial(native.add_act, a, b, out, record, 0, size)

    run.bind = bind
    return run


class OnePass:
    """Mixin before an Add or Sum kernel class: same-shape float32 operands score above that kernel, and run
    in one native pass when an activation is fused into the node, else as that kernel does."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        return 2 if accepts(ins, outs) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return fused_run(node, outs, super().prepare(node, ins, outs))    # type: ignore[misc]
