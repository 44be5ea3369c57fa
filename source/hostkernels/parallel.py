"""The cpu device's intra-op parallelism: nnhal's own worker threads, single-threaded BLAS inside.

A kernel that is worth splitting cuts its work into parts (row blocks of its output, bands of im2col
columns, ranges of a flat tensor) and hands them to :func:`run_parts`; each part does all of its work
(gather, GEMM, bias, activation) on its own block while that block is in cache. numpy's matmul, its
ufuncs and the native kernels release the GIL, so the parts run on separate cores.

Why not BLAS's own threads (what the cpu device used before): only the GEMM was parallel, and every
epilogue, depthwise convolution, gate and pool ran on one thread after it; and OpenBLAS's idle workers
spin for a while after each GEMM, so any second thread of ours fought them (measured on the 2-core
benchmark machine: 100352x16 @ 16x96 + SiLU took 7.1 ms on BLAS's 2 threads, 8.2 with the SiLU split
over a second Python thread, 4.9 ms split in two whole parts on single-threaded BLAS). So while the pool
is on, BLAS runs on one thread (threads.py) and the pool is the only source of parallelism.

The pool: ``threads - 1`` daemon workers, each woken by a lock (no spinning; a hand-over costs ~13 us,
so kernels split only work of more than MIN_PART_WORK). One run at a time uses it: a part that splits
again, or a second run on another thread while the pool is busy, runs its parts inline on its own thread
(correct, only not parallel), so concurrent Session runs never wait on each other here. Per-thread
scratch (_scratch.py) gives each worker its own buffers.

``NNHAL_CPU_POOL=0`` switches the pool off: BLAS keeps its own threads and kernels run unsplit.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

# Work is counted in units of about one element of a memory-bound element-wise pass (~0.3 ns here); a
# GEMM's multiply-add is MAC_WORK of a unit (BLAS runs ~16 of them in that time on one core). A part
# should get at least MIN_PART_WORK units (~40 us): below it the ~13 us hand-over and the lost cache
# locality outweigh the second core.
MIN_PART_WORK = 1 << 17
MACS_PER_UNIT = 16


def gemm_work(macs: int) -> int:
    """The work units of ``macs`` multiply-adds run by BLAS."""
    return macs // MACS_PER_UNIT


def enabled() -> bool:
    """Whether kernels split their work over the pool (NNHAL_CPU_POOL, read at each call, default on)."""
    return os.environ.get("NNHAL_CPU_POOL", "1") != "0"


class _Worker:
    """One daemon thread that runs the callable it is handed, then signals done."""

    def __init__(self, index: int) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._fn: Callable[[], None] | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, name=f"nnhal-cpu-{index}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            try:
                self._fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller by wait()
                self.error = exc
            finally:
                self._fn = None
                self._done.release()

    def start(self, fn: Callable[[], None]) -> None:
        self.error = None
        self._fn = fn
        self._go.release()

    def wait(self) -> BaseException | None:
        self._done.acquire()
        return self.error


class _Pool:
    def __init__(self) -> None:
        self.threads = 1
        self._workers: list[_Worker] = []
        self._busy = threading.Lock()

    def resize(self, threads: int) -> None:
        with self._busy:
            self.threads = max(1, threads)
            while len(self._workers) < self.threads - 1:
                self._workers.append(_Worker(len(self._workers) + 1))

    def run(self, groups: list[list[Callable[[], None]]]) -> None:
        if len(groups) == 1 or not self._busy.acquire(blocking=False):
            for group in groups:
                _run_group(group)
            return
        try:
            started = []
            for worker, group in zip(self._workers, groups[1:]):
                worker.start(lambda g=group: _run_group(g))
                started.append(worker)
            error = None
            try:
                _run_group(groups[0])
            except BaseException as exc:  # noqa: BLE001 - re-raised after the workers finished
                error = exc
            for worker in started:
                werr = worker.wait()
                error = error or werr
            if error is not None:
                raise error
        finally:
            self._busy.release()


def _run_group(group: list[Callable[[], None]]) -> None:
    for fn in group:
        fn()


_pool = _Pool()


def set_threads(n: int) -> None:
    """Use ``n`` threads (the caller and n - 1 workers) for the parts of each kernel."""
    if n != _pool.threads:
        _pool.resize(n)


def threads() -> int:
    """Threads a kernel may split its work over (1 when the pool is off)."""
    return _pool.threads if enabled() else 1


def parts_for(work: int, units: int, threads_: int | None = None) -> int:
    """How many parts to cut ``units`` (rows, bands) of ``work`` (in work units, see above) into: one per
    thread, fewer when a part would get less than MIN_PART_WORK, at most ``units``."""
    t = threads() if threads_ is None else threads_
    if t <= 1 or units <= 1:
        return 1
    return max(1, min(t, units, work // MIN_PART_WORK))


def ranges(total: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering [0, total), as equal as possible, each boundary a multiple
    of ``align`` (the last range takes the rest); empty ranges dropped."""
    if parts <= 1 or total <= align:
        return [(0, total)]
    units = -(-total // align)
    out, start = [], 0
    for i in range(parts):
        stop = min(total, ((i + 1) * units // parts) * align)
        if stop > start:
            out.append((start, stop))
            start = stop
    if start < total:
        out[-1] = (out[-1][0], total)
    return out


def run_parts(tasks: Sequence[Callable[[], None]]) -> None:
    """Run the tasks, spread in order over the pool's threads (contiguous groups, this thread takes the
    first), and return when all are done; the first error raised by any of them is raised here."""
    n = len(tasks)
    t = min(threads(), n)
    if t <= 1:
        for fn in tasks:
            fn()
        return
    bounds = ranges(n, t)
    _pool.run([list(tasks[a:b]) for a, b in bounds])


def for_ranges(total: int, work: int, fn: Callable[[int, int], None], align: int = 1) -> None:
    """fn(start, stop) over ranges of [0, total) that together cover it, in parallel when ``work`` (all
    the range's work units) is worth splitting; boundaries are multiples of ``align``."""
    parts = parts_for(work, -(-total // align))
    if parts <= 1:
        fn(0, total)
        return
    run_parts([lambda a=a, b=b: fn(a, b) for a, b in ranges(total, parts, align)])


# ------------------------------------------------------------------ the GEMM every kernel shares
def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` split over the pool (numpy's broadcasting rules; ``out`` allocated
    when None): a stacked product by its leading index, else by rows of ``a`` when there are enough of
    them, else by columns of ``b`` (BLAS reads and writes column slices in place, at full speed)."""
    if a.ndim < 2 or b.ndim < 2 or (out is not None and out.ndim < 2):
        return np.matmul(a, b, out=out)
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                       np.result_type(a, b))
    k, n, m = a.shape[-1], out.shape[-1], out.shape[-2]
    lead = out.size // max(1, m * n)
    parts = parts_for(gemm_work(out.size * k), max(lead, m, n))
    if parts <= 1:
        return np.matmul(a, b, out=out)
    if out.ndim > 2 and out.shape[0] >= parts and a.ndim == out.ndim and b.ndim in (2, out.ndim):
        def by_lead(i0: int, i1: int) -> None:
            bb = b if b.ndim == 2 or b.shape[0] == 1 else b[i0:i1]
            aa = a if a.shape[0] == 1 else a[i0:i1]
            np.matmul(aa, bb, out=out[i0:i1])
        run_parts([lambda r=r: by_lead(*r) for r in ranges(out.shape[0], parts)])
    elif m >= 8 * parts and a.shape[-2] == m:
        def by_rows(r0: int, r1: int) -> None:
            np.matmul(a[..., r0:r1, :], b, out=out[..., r0:r1, :])
        run_parts([lambda r=r: by_rows(*r) for r in ranges(m, parts, 8)])
    else:
        def by_cols(c0: int, c1: int) -> None:
            np.matmul(a, b[..., c0:c1], out=out[..., c0:c1])
        run_parts([lambda r=r: by_cols(*r) for r in ranges(n, parts, 16)])
    return out


def _along(x, axis: int, ndim: int, a: int, b: int):
    """x's part for rows a:b of the result's ``axis`` (x broadcast against a result of ``ndim`` dims)."""
    if not isinstance(x, np.ndarray):
        return x
    ax = axis - (ndim - x.ndim)
    if ax < 0 or x.shape[ax] == 1:
        return x
    return x[(slice(None),) * ax + (slice(a, b),)]


def elementwise(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    """``ufunc(*args, out=out)`` split over the pool along the first axis of ``out`` long enough to cut
    (the operands' matching axes sliced alike, broadcast ones passed whole); in place is fine (each part
    reads and writes only its own slice)."""
    def run(*args, out: np.ndarray):
        parts = parts_for(out.size, max(out.shape, default=1))
        if parts <= 1:
            return ufunc(*args, out=out)
        axis = next((i for i, d in enumerate(out.shape) if d >= parts), None)
        if axis is None:
            return ufunc(*args, out=out)
        lead = (slice(None),) * axis

        def part(a: int, b: int) -> None:
            ufunc(*(_along(x, axis, out.ndim, a, b) for x in args), out=out[lead + (slice(a, b),)])

        run_parts([lambda r=r: part(*r) for r in ranges(out.shape[axis], parts)])
        return out

    run.ufunc = ufunc   # type: ignore[attr-defined]
    return run
