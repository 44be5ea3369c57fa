"""Python's cyclic garbage collector paused while a graph is imported or prepared.

Import and prepare allocate hundreds of thousands of small objects (nodes, tensors, attribute dicts,
Infos) that live on: every 700 allocations the collector runs, and its older generations walk them all
again and again. Swin-T (6,242 ONNX nodes) prepared from the compiled cache in 0.85-1.01 s with the
collector on and 0.66-0.70 s with it paused. Nothing prepare makes is garbage that only the collector
can free, so the pause costs no memory; the collector runs as usual once the outermost pause ends.
"""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused():
    """Keep the collector off while any thread is inside (nested and concurrent uses count); restore
    its state when the last one leaves. Usable as a decorator."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
