"""Thread control for the host kernels: nnhal's pool (parallel.py) and the two BLAS libraries, changed only
when it differs.

With the pool on (the default) a run of ``n`` threads splits each large kernel into parts over the pool
and BLAS runs one thread inside each part; with NNHAL_CPU_POOL=0 BLAS gets the ``n`` threads itself and
kernels run unsplit (parallel.py says why the pool is the default).

Two BLAS libraries are in the process: the OpenBLAS the native kernels link at build time (scipy-openblas32;
its threads set through the extension's blas_set_threads) and the one numpy's own matmul uses (numpy ships
and hides it; numpy has no API for its threads, so threadpoolctl sets them).
"""
from __future__ import annotations

import os

from nnhal.device.cpu import native, parallel

_current: int | None = None
_controller = None
# NOTE: read once: os.cpu_count() costs ~8 us on some Linux machines (it parses /sys), once per run of a
# plan whose num_thread is 0 (the default): a sixth of a small model's whole Session.run
_CORES = os.cpu_count() or 1


def _limit_blas(n: int) -> None:
    global _current, _controller
    if n == _current:
        return
    from threadpoolctl import ThreadpoolController

    if _controller is None:
        _controller = ThreadpoolController()
    _controller.limit(limits=n, user_api="blas")
    if native.available():
        native.blas_set_threads(n)
    _current = n


def use_threads(n: int, pool: bool = True) -> None:
    """Run this thread's host kernels on ``n`` threads (0 means one per core): the pools' when ``pool`` (the
    plan's choice at prepare, parallel.choose: NNHAL_CPU_POOL=0 switched it off then), else BLAS's."""
    n = n or _CORES
    parallel.use_pool(pool)
    if pool:            # NOTE: what parallel.enabled() answers right after use_pool(pool), without the call
        parallel.set_threads(n)
        n = 1           # BLAS inside the pool's parts
    if n != _current:   # NOTE: the run path: BLAS already set as this run wants (the common case), no call
        _limit_blas(n)
