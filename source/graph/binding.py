"""Binding arrays to a graph's inputs and reading its outputs: names or indices resolved, dtypes and
shapes checked against the model, each mistake an InputError saying what was expected."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import InputError, did_you_mean
from nnhal.graph.graph import Graph


def resolve(names: list[str], key: str | int, what: str) -> str:
    """The name ``key`` stands for among ``names`` (a name, or an index into them)."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not 0 <= key < len(names):
            raise InputError(f"{what} index {key} is out of range; the graph has {len(names)} {what}s: {names}")
        return names[int(key)]
    if key not in names:
        raise InputError(f"the graph has no {what} named '{key}' ({what}s: {names}){did_you_mean(key, names)}")
    return key


def check_input(graph: Graph, key: str | int, value: Any) -> tuple[str, np.ndarray]:
    """The input's name and ``value`` as a C-contiguous array; its dtype and shape checked against the model."""
    name = resolve(graph.inputs, key, "input")
    t = graph.tensors[name]
    try:
        array = np.asarray(value)
    except Exception as exc:
        raise InputError(f"input '{name}': cannot make an array of a {type(value).__name__}: {exc}") from exc
    if t.dtype is not None and array.dtype != t.dtype:
        raise InputError(f"input '{name}' expects dtype {t.dtype}, got {array.dtype}; convert it with "
                         f".astype(np.{t.dtype})")
    if t.shape is not None:
        if array.ndim != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in t.shape) or "scalar"
            raise InputError(f"input '{name}' expects shape [{want}], got {list(array.shape)}")
    return name, np.require(array, requirements="C")
