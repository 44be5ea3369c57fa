"""What a webgpu kernel gets and gives: the Emitter it asks about tensors and hands launches to.

A kernel module defines ``OPS`` (the op types it implements), ``why_not(candidate) -> str | None``
(early-return guards, one reason each) and ``lower(node, emitter, epilogue)``, which appends one
or more Launches. GEMM-like kernels take an ``epilogue``: the fused elementwise group that reads
their result, compiled into their store.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


@dataclass(frozen=True)
class Launch:
    """One dispatch: its WGSL, the tensors bound at bindings 0.. in order, the workgroup counts."""

    source: str
    tensors: tuple[str, ...]
    workgroups: tuple[int, int, int]
    label: str


@dataclass(frozen=True)
class Epilogue:
    """WGSL ``fn epilogue(v: f32, idx: u32) -> T`` over the output's flat index, with its bindings."""

    decls: str
    function: str
    tensors: tuple[str, ...]
    output: str          # the tensor the fused group writes (the kernel stores there)


EpilogueMaker = Callable[[int], Epilogue]     # first free binding -> the epilogue bound from there


class Emitter(Protocol):
    direct_gemm: bool            # GEMMs without workgroup memory (CPU adapters such as lavapipe)

    def shape(self, name: str) -> tuple[int, ...]: ...
    def elem(self, name: str) -> str: ...                  # 'f32' or 'i32'
    def is_bool(self, name: str) -> bool: ...              # held as i32 0/1
    def value(self, name: str) -> np.ndarray | None: ...   # a constant's value, else None
    def launch(self, launch: Launch) -> None: ...


def elem_of(dtype: np.dtype | None) -> str | None:
    """The WGSL element type a tensor of ``dtype`` is stored as (int64 narrows to i32, bool is i32 0/1), or None."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return "f32"
    if dtype in (np.int64, np.int32, np.bool_):
        return "i32"
    return None
