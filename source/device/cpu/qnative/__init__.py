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


def activation_mode() -> str:
    """How DynamicQuantizeGemm (whole rows) quantizes its rows for the integer GEMM: ``NNHAL_QGEMM_A7``, by
    default "expanding" where the integer kernels run on avx2 (no VNNI) and "0" elsewhere.

    * "0": as the node says (int8 symmetric or uint8 asymmetric, 8 bits);
    * "expanding": products with N > K (a transformer's first FFN product) quantize their rows to 7 bits
      (asymmetric, [0, 127]), so that avx2's ``vpmaddubsw`` multiplies them by the 8-bit weights exactly
      (a u7 x s8 pair sum fits int16), about 0.8x the time of the exact 16-bit path; every other product
      quantizes its rows asymmetrically to uint8, int8 nodes included (scale (max(x, 0) - min(x, 0)) / 255,
      at most int8's max|x| / 127), which pays for the 7-bit products' error: MiniLM's sentence embeddings
      keep cosine >= 0.999 against fp32 at int8 and uint8 (docs/int8.md), where 7 bits on every product do not;
    * "1": 7 bits on every product (tests, A/B runs).
    """
    forced = os.environ.get("NNHAL_QGEMM_A7")
    if forced is not None:
        return forced if forced in ("0", "1") else "expanding"
    return "expanding" if status().isa == "avx2" else "0"


def split_mode() -> int:
    """How pack_b packs full-range 8-bit weights on avx2 (``NNHAL_QGEMM_SPLIT``, read at each prepare so
    that one process can A/B it): -1 (default, "auto") splits them into a narrow W1 run by ``vpmaddubsw``
    and a sparse W2 added exactly when W2 holds at most 3% of the weights, else widens them to int16;
    0 always widens them; 1 always splits (tests). Other instruction sets ignore it."""
    forced = os.environ.get("NNHAL_QGEMM_SPLIT", "auto")
    return int(forced) if forced in ("0", "1") else -1


def winograd_mode() -> str:
    """``NNHAL_QWINOGRAD`` (read at each plan, so that one process can A/B it): "0" never, "1" every legal
    3x3 stride-1 convolution (tests, A/B runs), else "auto": where integer.winograd_wins says the exact integer
    Winograd F(2x2, 3x3) beats the direct kernel (qwinograd.h; avx2 and portable only)."""
    forced = os.environ.get("NNHAL_QWINOGRAD", "auto")
    return forced if forced in ("0", "1") else "auto"


def describe_winograd_mode() -> str:
    """:func:`winograd_mode` in words, for the cpu device's description."""
    return {"auto": "by exact integer Winograd F(2x2, 3x3) on avx2 where it measured faster, else direct",
            "0": "direct (NNHAL_QWINOGRAD=0)",
            "1": "by exact integer Winograd F(2x2, 3x3) wherever legal (NNHAL_QWINOGRAD=1)"}[winograd_mode()]


def describe_split_mode() -> str:
    """:func:`split_mode` in words, for the cpu device's description."""
    return {-1: "split into vpmaddubsw + a sparse correction where it is sparse, else 16-bit",
            0: "16-bit (NNHAL_QGEMM_SPLIT=0)", 1: "always split (NNHAL_QGEMM_SPLIT=1)"}[split_mode()]


def describe_activation_mode() -> str:
    """:func:`activation_mode` in words, for the cpu device's description."""
    return {"0": "8-bit as each node says", "1": "7-bit ([0, 127]) on every product",
            "expanding": "7-bit ([0, 127]) where N > K, else asymmetric uint8"}[activation_mode()]
