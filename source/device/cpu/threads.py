"""BLAS thread control for the CPU device (threadpoolctl), changed only when it differs."""
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
