"""The smooth and hard gates in place by the native kernel (one pass, over the cpu device's native pool for
large tensors), numpy's (hostkernels/_blocks.py) where it cannot: float64, strided, or not built. The cpu
device's kernels apply fused activations with these (:data:`GATES`, :func:`apply_activation`,
:func:`fused`); the gate kernels of Sigmoid, HardSigmoid, HardSwish and Swish run them (kernels/gates.py).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels import _blocks, _scratch
from nnhal.hostkernels.fused import Activation


def _native_gate(y: np.ndarray, kind: str, alpha: float = 0.2, beta: float = 0.5) -> bool:
    """Run the gate ``kind`` in place by the native kernel (one pass) when it is
    built and ``y`` is contiguous float32; False when numpy must (float64, strided, NNHAL_NATIVE=0)."""
    if y.dtype != np.float32 or not y.flags.c_contiguous or not native.available():
        return False
    act = native.make_act(kind, alpha=alpha, beta=beta)
    parts = parallel.native_parts(y.size * 2, y.size // 16) if parallel.native_pool() else 1
    if parts > 1:
        native.activation(y, y, act, parts)
    else:
        native.activation(y, y, act, 1)
    return True


def sigmoid_(y: np.ndarray) -> None:
    """_blocks.sigmoid_, natively where it can."""
    if not _native_gate(y, "sigmoid"):
        _blocks.sigmoid_(y)


def hardsigmoid_(y: np.ndarray, alpha: float, beta: float) -> None:
    """_blocks.hardsigmoid_, natively where it can."""
    if not _native_gate(y, "hardsigmoid", alpha, beta):
        _blocks.hardsigmoid_(y, alpha, beta)


def hardswish_(y: np.ndarray) -> None:
    """_blocks.hardswish_, natively where it can."""
    if not _native_gate(y, "hardswish"):
        _blocks.hardswish_(y)


def tanh_(y: np.ndarray) -> None:
    """numpy's tanh in place, natively (nn_tanh.h, within 3 ulp) where it can."""
    if not _native_gate(y, "tanh"):
        _blocks.tanh_(y)


def silu_(y: np.ndarray) -> None:
    """_blocks.silu_, natively where it can."""
    if not _native_gate(y, "silu"):
        _blocks.silu_(y)


GATES = _blocks.Gates(sigmoid_, silu_, hardswish_, hardsigmoid_, tanh_)


def apply_activation(y: np.ndarray, act: Activation | None) -> None:
    """_scratch.apply_activation with the native gates."""
    _scratch.apply_activation(y, act, GATES)


def fused(run, node):
    """_scratch.fused with the native gates."""
    return _scratch.fused(run, node, GATES)
