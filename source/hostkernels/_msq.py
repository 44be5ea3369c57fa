"""Shared arithmetic of the com.microsoft quantized kernels (float32 rescales, as onnxruntime)."""
from __future__ import annotations

import numpy as np


def real(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
    """(q - zero) * scale in float32."""
    z = np.float32(0) if zero is None else np.asarray(zero, np.float32)
    return (q.astype(np.float32) - z) * np.asarray(scale, np.float32)


def to_quantized(value: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """round_half_even(value / scale) + zero, saturated to dtype."""
    info = np.iinfo(dtype)
    z = np.float32(0) if zero is None else np.asarray(zero, np.float32)
    return np.clip(np.rint(value / np.asarray(scale, np.float32)) + z, info.min, info.max).astype(dtype)
