"""BLAS thread control for the host kernels (threadpoolctl), changed only when it differs.

NOTE: the kernels run each GEMM on BLAS's own threads. Splitting a kernel's parts over a pool of
Python threads on single-threaded BLAS was measured on the 2-core benchmark machine and lost when the
machine was idle (OpenBLAS's idle workers spin against the pool thread), winning only under load, so
that path was removed (see op_conv.py).
"""
from __future__ import annotations

import os

_current: int | None = None
_controller = None


def set_blas_threads(n: int) -> None:
    """Limit BLAS (OpenBLAS/MKL) to ``n`` threads; 0 means one per core."""
    global _current, _controller
    n = n or (os.cpu_count() or 1)
    if n == _current:
        return
    from threadpoolctl import ThreadpoolController

    if _controller is None:
        _controller = ThreadpoolController()
    _controller.limit(limits=n, user_api="blas")
    _current = n


def blas_info() -> list[dict]:
    """The BLAS libraries numpy uses, with their kernel (``architecture``) and threads."""
    from threadpoolctl import threadpool_info

    return [i for i in threadpool_info() if i.get("user_api") == "blas"]
