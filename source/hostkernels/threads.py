"""BLAS thread control for the CPU device (threadpoolctl), changed only when it differs, and a
helper for kernels to split their own work over a small pool of Python threads.

OpenBLAS with several threads parallelises each GEMM but leaves numpy's element-wise work on one
core, and its worker threads spin between calls. ``parallel`` runs a kernel's independent parts
(say output-channel ranges: GEMM + epilogue) on Python threads, each calling single-threaded BLAS;
numpy releases the GIL inside BLAS and large ufunc loops. Measured on the 2-core benchmark machine
it lost to OpenBLAS's own threads when the machine was idle (the idle OpenBLAS workers spin against
the pool thread) and won only under load, so the conv kernel keeps it switched off
(op_conv.PARALLEL_MIN_*).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_current: int | None = None
_controller = None
_blas = None            # threadpoolctl controller of the BLAS libraries only
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_workers = 1


def set_blas_threads(n: int) -> None:
    """Limit BLAS (OpenBLAS/MKL) to ``n`` threads; 0 means one per core. Also the kernels' split width."""
    global _current, _controller, _blas, _workers
    n = n or (os.cpu_count() or 1)
    _workers = n
    if n == _current:
        return
    from threadpoolctl import ThreadpoolController

    if _controller is None:
        _controller = ThreadpoolController()
        _blas = _controller.select(user_api="blas")
    _controller.limit(limits=n, user_api="blas")
    _current = n


def workers() -> int:
    """How many parts a kernel should split its work into (the session's num_thread)."""
    return _workers


def split(total: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``total`` cut into at most ``parts`` contiguous (lo, hi) ranges, boundaries multiples of ``align``."""
    step = -(-total // parts)
    step = -(-step // align) * align
    return [(lo, min(total, lo + step)) for lo in range(0, total, step)]


def parallel(fn, ranges: list, blas: bool = True) -> None:
    """fn(r) for every r in ``ranges``: the first on this thread, the rest on the pool; BLAS single-threaded
    meanwhile when the parts call it (``blas``). Exceptions propagate."""
    global _pool
    if len(ranges) <= 1 or threading.current_thread() is not threading.main_thread() and _pool_thread():
        for r in ranges:
            fn(r)
        return
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1), thread_name_prefix="nnhal-cpu")
    single = blas and _current is not None and _current > 1 and _blas is not None
    if single:
        for lib in _blas.lib_controllers:
            lib.set_num_threads(1)
    try:
        futures = [_pool.submit(fn, r) for r in ranges[1:]]
        try:
            fn(ranges[0])
        finally:
            for f in futures:
                f.result()
    finally:
        if single:
            for lib in _blas.lib_controllers:
                lib.set_num_threads(_current)


def _pool_thread() -> bool:
    return threading.current_thread().name.startswith("nnhal-cpu")


def blas_info() -> list[dict]:
    """The BLAS libraries numpy uses, with their kernel (``architecture``) and threads."""
    from threadpoolctl import threadpool_info

    return [i for i in threadpool_info() if i.get("user_api") == "blas"]
