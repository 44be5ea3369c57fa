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
        array = value if type(value) is np.ndarray else np.asarray(value)
    except Exception as exc:
        raise InputError(f"input '{name}': cannot make an array of a {type(value).__name__}: {exc}") from exc
    if t.dtype is not None and array.dtype != t.dtype:
        raise InputError(f"input '{name}' expects dtype {t.dtype}, got {array.dtype}; convert it with "
                         f".astype(np.{t.dtype})")
    if t.shape is not None:
        if array.ndim != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in t.shape) or "scalar"
            raise InputError(f"input '{name}' expects shape [{want}], got {list(array.shape)}")
    return name, array if array.flags.c_contiguous else np.require(array, requirements="C")


class InputChecker:
    """:func:`check_input` for one graph, with what it checks derived once: each input's dtype and, when every
    dim is known, its shape as a tuple. A feed that is already a C-contiguous ndarray of the expected dtype and
    shape is taken as it is (the common case of every run); anything else goes through :func:`check_input`, so
    every mistake raises the same InputError. Read-only after construction: shared by concurrent runs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.names = list(graph.inputs)
        # name -> (dtype, shape) of each input whose dtype and every dim the model gives (the fast path's)
        self._static: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        for name in self.names:
            t = graph.tensors[name]
            if t.dtype is not None and t.shape is not None and all(isinstance(d, int) for d in t.shape):
                self._static[name] = (np.dtype(t.dtype), tuple(t.shape))
        # every input's (name, dtype, shape) when all are static (exact's), else None
        self._all = tuple((n, *self._static[n]) for n in self.names) if len(self._static) == len(self.names) \
            else None

    def exact(self, feeds: dict) -> dict[str, np.ndarray] | None:
        """A copy of ``feeds`` when it names every input once, each a C-contiguous ndarray of the dtype and shape the
        model gives (all static); else None, and the caller checks each feed (:meth:`__call__`)."""
        static = self._all
        if static is None or len(feeds) != len(static):
            return None
        get = feeds.get
        for name, dtype, shape in static:
            value = get(name)
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape \
                    or not value.flags.c_contiguous:
                return None
        return dict(feeds)

    def __call__(self, key: str | int, value: Any) -> tuple[str, np.ndarray]:
        """The input's name and ``value`` as a C-contiguous array, as :func:`check_input` returns them."""
        expected = self._static.get(key) if type(key) is str else None
        if expected is not None and type(value) is np.ndarray and value.dtype == expected[0] \
                and value.shape == expected[1] and value.flags.c_contiguous:
            return key, value
        return check_input(self.graph, key, value)
