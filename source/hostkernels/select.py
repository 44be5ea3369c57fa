"""Choosing a host kernel for a node: the highest score wins.

``NNHAL_CPU_REFERENCE=1`` forces the implementation named "reference" (for
debugging a fast kernel against the plain one).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache

from nnhal.errors import DeviceError, where
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel
from nnhal.hostkernels.table import DOMAINS
from nnhal.operator.base import Info


@lru_cache(maxsize=None)
def implementations(op_type: str, domain: str = "") -> tuple[Kernel, ...]:
    """All host implementations of an op (empty when there is none)."""
    module_name = DOMAINS.get(domain, {}).get(op_type)
    if module_name is None:
        return ()
    module = importlib.import_module(f"nnhal.hostkernels.{module_name}")
    return tuple(cls() for cls in module.IMPLEMENTATIONS)


# A device's own kernels for some ops, beside the host kernels: (domain, op_type) -> instances. The cpu device
# passes its fast (native, pooled) kernels this way; the host layer itself never sees them.
KernelTable = Mapping[tuple[str, str], tuple[Kernel, ...]]


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def kernel_table(classes: Iterable[type[Kernel]], domain: str = "") -> dict[tuple[str, str], tuple[Kernel, ...]]:
    """A KernelTable of one instance of each class, keyed by its op_type in ``domain``."""
    table: dict[tuple[str, str], tuple[Kernel, ...]] = {}
    for cls in classes:
        key = (_domain(domain), cls.op_type)
        table[key] = (*table.get(key, ()), cls())
    return table


_forced = threading.local()


def reference_forced() -> bool:
    """True under NNHAL_CPU_REFERENCE=1 or inside ``force_reference()``."""
    return getattr(_forced, "on", False) or os.environ.get("NNHAL_CPU_REFERENCE", "") not in ("", "0")


@contextlib.contextmanager
def force_reference():
    """Select the "reference" implementation of every op prepared in this block (this thread)."""
    before = getattr(_forced, "on", False)
    _forced.on = True
    try:
        yield
    finally:
        _forced.on = before


def select(node: Node, ins: list[Info | None], outs: list[Info], layout: str | None = None,
           extra: KernelTable | None = None) -> Kernel:
    """The best CPU implementation for this node running in ``layout`` (None = ONNX's NCHW, "NHWC" =
    channels last: see Kernel.layout), among the host kernels and a device's own ``extra`` ones; DeviceError
    when none applies."""
    own = extra.get((_domain(node.domain), node.op_type), ()) if extra else ()
    impls = tuple(i for i in (*implementations(node.op_type, node.domain), *own) if i.layout == layout)
    if reference_forced() and layout is None:
        for impl in impls:
            if impl.name == "reference":
                return impl
    best, best_score = None, 0
    for impl in impls:
        s = impl.score(node, ins, outs)
        if s > best_score:
            best, best_score = impl, s
    if best is None:
        names = [i.name for i in impls] or "none"
        raise DeviceError(f"{where(node)}: no host kernel accepts this node (implementations: {names})")
    return best
