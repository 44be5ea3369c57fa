"""The cpu device's integer kernels (qkernels.c): u8/s8 GEMM on packed weights, implicit-GEMM and
depthwise convolutions in NHWC, with bias, dequantization or ONNX requantization and Relu/Clip fused.

CMake builds the extension module ``_qkernels`` here when a C compiler and Python's headers are there
(NNHAL_INTEGER_KERNELS, on by default); :func:`status` says whether it loaded and which instruction set
runs (avx512vnni, avxvnni, avx2 or portable: the best the CPU has, or NNHAL_QGEMM_ISA's choice; a forced
one the CPU lacks is a DeviceError at the first kernel prepared). Without it the quantized ops keep to
their numpy kernels (nnhal.hostkernels). ``NNHAL_INTEGER=0`` switches them off at load (A/B runs).
"""
from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass

from nnhal.errors import DeviceError


@dataclass(frozen=True)
class Status:
    """Whether the integer kernels run, on which instruction set, and why not when they do not."""

    available: bool
    reason: str
    isa: str | None = None


@functools.lru_cache(maxsize=1)
def _load():
    if os.environ.get("NNHAL_INTEGER", "1") == "0":
        return None, Status(False, "switched off by NNHAL_INTEGER=0")
    try:
        module = importlib.import_module(f"{__name__}._qkernels")
    except ImportError as exc:
        return None, Status(False, f"not built ({exc}); reinstall with a C compiler and Python's headers")
    try:
        isa = module.isa()
    except RuntimeError as exc:
        return module, Status(False, str(exc))
    return module, Status(True, module.describe(), isa)


def status() -> Status:
    """The integer kernels' state, for ``nnhal devices`` and the tests."""
    return _load()[1]


def available() -> bool:
    """True when the integer kernels run (the extension loaded and its instruction set is usable)."""
    module, state = _load()
    if module is not None and not state.available and state.reason.startswith("NNHAL_QGEMM_ISA"):
        raise DeviceError(f"cpu integer kernels: {state.reason}")
    return state.available


def kernels():
    """The extension module (only after :func:`available` said True)."""
    return _load()[0]
