"""Sigmoid, HardSigmoid, HardSwish, Swish and Tanh on the cpu device: the host's in-place gate kernels
(hostkernels/op_sigmoid.py and the others, GateKernel) with the native gates of _gates.py."""
from __future__ import annotations

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import _gates
from nnhal.graph.node import Node
from nnhal.hostkernels._unary import GateKernel
from nnhal.hostkernels.op_hard_sigmoid import FastHardSigmoidKernel
from nnhal.hostkernels.op_hard_swish import FastHardSwishKernel
from nnhal.hostkernels.op_sigmoid import FastSigmoidKernel
from nnhal.hostkernels.op_swish import FastSwishKernel


class NativeGate:
    """Mixin before a host GateKernel class: the same nodes, one point more, the native gate (not scored
    without the native kernels: the host's numpy gate kernel runs then)."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)      # type: ignore[misc]
        return s + 1 if s > 0 and native.available() else 0


class SigmoidNative(NativeGate, FastSigmoidKernel):
    def gate(self, node: Node):
        return _gates.sigmoid_


class HardSigmoidNative(NativeGate, FastHardSigmoidKernel):
    def gate(self, node: Node):
        alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
        return lambda y: _gates.hardsigmoid_(y, alpha, beta)


class HardSwishNative(NativeGate, FastHardSwishKernel):
    def gate(self, node: Node):
        return _gates.hardswish_


class SwishNative(NativeGate, FastSwishKernel):
    def gate(self, node: Node):
        return _gates.silu_ if super().gate(node) is not None else None


class TanhNative(NativeGate, GateKernel):
    """Tanh in place by the native gate (nn_tanh.h, vectorized, over the native pool when large): numpy's tanh
    took 37% of a super-resolution net's run (ESPCN: two Tanh over 96x96x32 and 96x96x24)."""

    op_type = "Tanh"

    def gate(self, node: Node):
        return _gates.tanh_


IMPLEMENTATIONS = (SigmoidNative, HardSigmoidNative, HardSwishNative, SwishNative, TanhNative)
