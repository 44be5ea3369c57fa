"""The cpu device's intra-op parallelism: nnhal's own threads, single-threaded BLAS inside.

A kernel that is worth splitting cuts its work into parts (row blocks of its output, bands of im2col
columns, ranges of a flat tensor); each part does all of its work (gather, GEMM, bias, activation) on
its own block while that block is in cache.

Two pools, one per kind of part:

* the native pool (kernels.c ``nn_pool_run``): Python makes one call into the extension, which releases
  the GIL, and C workers run the parts (GEMM with bias and activation: :func:`gemm`, per-head products:
  :func:`matmul`, im2col convolutions, depthwise convolutions, gates). Its workers spin briefly for the
  next part before they sleep, as onnxruntime's and OpenBLAS's do: a hand-over costs ~5 us, where a
  sleeping thread of a virtual machine took 20-50 us to wake.
* the Python pool (:func:`run_parts`, :func:`for_ranges`, :func:`elementwise`) for numpy work that has no
  native kernel (LayerNorm, Softmax, the Gelu epilogue, large element-wise ops, Winograd bands): its
  worker needs the GIL to start each part, which costs 30-50 us, so it takes only parts of more than
  MIN_PART_WORK, and it never spins (the native workers own the spare core).

Why not BLAS's own threads (what the cpu device used before): only the GEMM was parallel, every
epilogue, depthwise convolution and gate ran on one thread after it, and OpenBLAS's idle workers spin
after each GEMM, so any second thread of ours fought them (on the 2-core benchmark machine,
100352x16 @ 16x96 + SiLU: 7.1 ms on BLAS's 2 threads, 8.2 with the SiLU split over a Python thread,
4.3 ms on the native pool). So while the pools are on, BLAS runs one thread (threads.py).

One run at a time uses a pool: a part that splits again, or a run on another thread while the pool is
busy, runs its parts inline on its own thread (correct, only not parallel), so concurrent Session runs
never wait on each other here. Per-thread scratch (_scratch.py) gives each Python worker its buffers;
the native im2col takes one scratch block per part from the caller.

Which plans use them: see POOL_MIN_MEDIAN_OUTPUT (the cpu device decides per plan at prepare, cpu_device.py).
``NNHAL_CPU_POOL=0`` switches both pools off (BLAS gets the threads and kernels run unsplit), ``=1`` on
for every plan.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from nnhal.device.cpu import native

# Work is counted in units of about one element of a memory-bound element-wise pass (~0.3 ns here); a
# GEMM's multiply-add is 1/MACS_PER_UNIT of a unit (BLAS runs ~16 of them in that time on one core). A
# part for the Python pool should get at least MIN_PART_WORK units (~300 us): its hand-over costs 30-50 us
# (the worker waits for the GIL, which on a virtual machine means a futex sleep and wake).
MIN_PART_WORK = 1 << 20
MACS_PER_UNIT = 16
# the native pool hands a part over in ~5 us (no GIL, spinning workers): parts of 1/64 the size pay. 1 << 14
# against 1 << 16, 2 threads, quiet Zen 3, both orders in one process (median ms): text_cls 0.372 -> 0.280 and
# 0.437 -> 0.314, svtr 2.36 -> 2.23, resnet_bottleneck 3.77 -> 3.62 and 4.17 -> 3.31, squeezenet, enc_dec,
# vit_tiny, mobilenet_v2 and gpt_kv unchanged within noise
MIN_NATIVE_PART_WORK = 1 << 14


# below this much work every split of a product is one part (native_parts, parts_for): numpy's own call
_SMALL_GEMM_WORK = 1 << 17


# A convolution's parts are ranges of output pixels, a multiple of this many each (native/kernels.c
# NN_CONV_PIXEL_ALIGN for the im2col kernel, the pointwise GEMM's row_align), not of output rows: a 7x7 map's 7
# rows split 3 : 4 over two threads (the slower part 57% of the work), its 49 pixels 24 : 25. NOTE: 1, not a
# multiple for BLAS's blocking: with 8, a 10x10 map's 100 pixels split 48 : 52 (its rows 5 : 5), and over the C2f/SPPF
# net's im2col and pointwise convolutions the slowest of two parts came to 1.016 of an even share (rows: 1.000)
PIXEL_ALIGN = 1


def gemm_work(macs: int) -> int:
    """The work units of ``macs`` multiply-adds run by BLAS."""
    return macs // MACS_PER_UNIT


def small_product(macs: int) -> bool:
    """Whether a product of ``macs`` multiply-adds runs as one part whichever way it could be split: numpy's own
    matmul call (matmul below)."""
    return gemm_work(macs) < _SMALL_GEMM_WORK


_run = threading.local()       # this thread's run: whether its plan chose the pools (use_pool)

# The pools pay on plans of large enough products; on plans of tiny ones BLAS's threads were faster: a
# split op's threads wait for each other, and ops of a few microseconds gain less than the hand-over.
# A plan uses the pools when the median output of its Conv, MatMul and Gemm nodes has at least this many
# elements. Measured at batch 1, 2 threads, pools against BLAS's threads (ms; median output in
# brackets): MobileNetV3-small 3.95 / 3.07 (9K), EfficientNet-B0 11.3 / 14.2 (19K), RegNetY 9.3 / 11.4
# (22K), Inception v2 27.1 / 29.2 (25K), SqueezeNet 5.9 / 6.5 (43K), BERT 21.9 / 22.1 (49K), ShuffleNet
# 5.1 / 5.5 (53K); every batch-8 plan (75K and up) gained more.
POOL_MIN_MEDIAN_OUTPUT = 16 * 1024
# The same choice on a CPU without AVX-512 (the 2-core AMD EPYC VM, Zen 3, AVX2): with BLAS's threads only the
# GEMMs run on two threads, and there the convolutions of small maps run on the native direct, depthwise and
# grouped kernels (native/direct_conv.py), which only the pool splits. Measured on that VM at batch 1, 2
# threads, pools against BLAS's threads, interleaved min of 15 in one process (ms; median output in
# brackets; the machine was loaded by other jobs, so the ratios count, not the times): gpt_kv 31.6 / 17.9
# (256), whisper_tiny 57 / 447 (3.6K), enc_dec 19.2 / 43.7 (4K), audio_gru 18.2 / 39.7 (6.4K), conformer
# 90 / 224 (7K), vit_tiny 23.7 / 52.2 (9.6K), lraspp 30.9 / 72.6 (10K), byte_cnn 9.1 / 62.1 (12K), resnext_se
# 25.6 / 23.4 (12.5K), anchor_free_head 27.2 / 38.4 (12.8K), shufflenet_v2 5.5 / 21.2 (14K), pan 30.3 /
# 76.4 (14K).
POOL_MIN_MEDIAN_OUTPUT_NO_AVX512 = 1024


# Below this median output a plan runs on one thread: its products are GEMVs and tiny GEMMs of a few
# microseconds, where a second thread (BLAS's or the pools') gains little and, when another process holds a
# core, costs far more than it saves. A decoder's one-token step with a KV cache (the corpus's gpt_kv,
# median output 256), A/B in one process on the 2-core AVX2 EPYC: with one other job running, 6.30 ms a run
# on 2 threads against 1.30 ms on one; on the quiet machine 1.64-2.56 ms against 1.84-2.80 (min of 6 blocks,
# two runs; medians 2.33 / 2.20 and 2.89 / 2.92): within the noise there, 5x better under load.
SERIAL_MAX_MEDIAN_OUTPUT = 512


def serial(median_output: float) -> bool:
    """Whether a plan whose GEMM-like nodes have this median output size runs on one thread (never when
    NNHAL_CPU_POOL=1 forces the pools, or for a plan with no product: median 0)."""
    return 0 < median_output < SERIAL_MAX_MEDIAN_OUTPUT and os.environ.get("NNHAL_CPU_POOL") != "1"


@functools.cache
def avx512() -> bool:
    """Whether this CPU has AVX-512 (numpy's dispatch table; False when numpy does not say)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        return False
    return bool(features.get("AVX512F"))


def choose(median_output: float, iterates: bool = False) -> bool:
    """Whether a plan whose GEMM-like nodes have this median output size uses the pools (NNHAL_CPU_POOL=1
    forces them on, =0 off; ``iterates``: a plan running a Loop or Scan body, on the pools unless forced off,
    control.iterates says why). Asked once per plan at prepare: NNHAL_CPU_POOL is read then, not per run."""
    forced = os.environ.get("NNHAL_CPU_POOL")
    if forced in ("0", "1"):
        return forced == "1"
    return iterates or median_output >= (POOL_MIN_MEDIAN_OUTPUT if avx512() else POOL_MIN_MEDIAN_OUTPUT_NO_AVX512)


def use_pool(on: bool) -> None:
    """Record for this thread's run whether its kernels split over the pools: the plan's choice at prepare
    (:func:`choose`, where NNHAL_CPU_POOL=0 already switched it off).

    NOTE: no environment read here, once per run: enabled() is asked by every kernel of every iteration of a
    control-flow body, and the environment is read once per plan at prepare (choose)."""
    _run.pool = on


def enabled() -> bool:
    """Whether kernels split their work over the pools: as this thread's run chose (use_pool); a thread that
    started no run (the pools' own threads, a kernel called directly): unless NNHAL_CPU_POOL=0."""
    pool = getattr(_run, "pool", None)
    return os.environ.get("NNHAL_CPU_POOL") != "0" if pool is None else pool


# How long a Python worker spins for its next part before it blocks, and how long the caller spins for a
# worker's part to finish (nanoseconds). Python parts are large (MIN_PART_WORK); the native pool's workers
# are the ones that spin (kernels.c), and a second spinning thread would take their core.
SPIN_NS = 0
WAIT_SPIN_NS = 5_000_000


def _spin(flag: np.ndarray, value: int, max_ns: int) -> int:
    """Wait for flag[0] != value for at most max_ns by the native spin (GIL released); without the native
    kernels, just the flag's value (the caller then blocks)."""
    if native.available():
        return native.spin_wait(flag, value, max_ns)
    return int(flag[0])


class _Worker:
    """One daemon thread that runs the callable it is handed, then signals done. Each side first spins on
    a sequence number (``flag``: parts handed over, ``done``: parts finished), then blocks on a semaphore
    the other side releases only when it saw this side asleep; a stray release only costs one more look
    at the flag."""

    def __init__(self, index: int) -> None:
        self.flag = np.zeros(1, np.int64)
        self.done = np.zeros(1, np.int64)
        self.seq = 0
        self.sleeping = False
        self.waiter_sleeping = False
        self._go = threading.Semaphore(0)
        self._finished = threading.Semaphore(0)
        self._fn: Callable[[], None] | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, name=f"nnhal-cpu-{index}", daemon=True).start()

    def _loop(self) -> None:
        last = 0
        while True:
            if _spin(self.flag, last, SPIN_NS) == last:
                self.sleeping = True
                while int(self.flag[0]) == last:
                    self._go.acquire()
                self.sleeping = False
            last = int(self.flag[0])
            try:
                self._fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller by wait()
                self.error = exc
            finally:
                self._fn = None
                self.done[0] = last
                if self.waiter_sleeping:
                    self._finished.release()

    def start(self, fn: Callable[[], None]) -> None:
        self.error = None
        self._fn = fn
        self.seq += 1
        self.flag[0] = self.seq
        if self.sleeping:
            self._go.release()

    def wait(self) -> BaseException | None:
        if _spin(self.done, self.seq - 1, WAIT_SPIN_NS) != self.seq:
            self.waiter_sleeping = True
            while int(self.done[0]) != self.seq:
                self._finished.acquire()
            self.waiter_sleeping = False
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


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's worker threads: start over with an empty pool (the native
    pool does the same in kernels.c), sized again at the next run."""
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_after_fork_in_child)


def set_threads(n: int) -> None:
    """Use ``n`` threads (the caller and n - 1 workers) for the parts of each kernel, in both pools."""
    if n != _pool.threads:
        _pool.resize(n)
        if native_pool():
            native.pool_set_threads(n)


def rest() -> None:
    """A run ended: the native pool's idle workers spin at most 0.2 ms more and then sleep (kernels.c
    ``nn_pool_rest``, NN_POOL_REST_GRACE_NS) instead of spinning for the next part; the next run's first split kernel
    wakes them.

    NOTE: a worker used to spin up to spin_ns (2 ms) after a run's last part, a whole core for 2 ms after every
    run (more than a small model's whole run). The 0.2 ms grace catches a caller that runs back to back (its next
    run's first split step comes within tens of microseconds; a sleeping worker's wake-up cost the corpus's small
    models 10-20% against onnxruntime), while an idle gap between requests ends the spin 0.2 ms after the run."""
    if native.available():
        native.pool_rest()


def native_pool() -> bool:
    """Whether kernels hand their parts to the native pool (kernels.c: no GIL between parts): the pool is
    on and the native kernels (with their linked BLAS) are loaded."""
    return enabled() and native.available()


def native_threads() -> int:
    """The threads of the native pool when kernels hand their parts to it (native_pool), else 0: one call for a
    kernel run once per iteration of a body."""
    return _pool.threads if enabled() and native.available() else 0


def native_parts(work: int, units: int) -> int:
    """Parts for the native pool: one per thread, fewer when a part would get less than
    MIN_NATIVE_PART_WORK, at most ``units``."""
    t = threads()
    if t <= 1 or units <= 1:
        return 1
    return max(1, min(t, units, work // MIN_NATIVE_PART_WORK))


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
    if a.ndim > 2 and b.ndim == 2 and a.size and (out is None or out.shape[:-1] == a.shape[:-1]):
        # one matrix times a stack: one product over all the stack's rows. NOTE: numpy runs a stack as one product
        # per matrix, a GEMV each for a stack of single rows (attention's (seq, 1, d) @ (d, 3 d)): (32, 1, 128) @
        # (128, 384) took 78 us, 34 as one (32, 128) GEMM (one thread, loaded 2-core Zen 3)
        if out is None:
            out = np.empty(a.shape[:-1] + b.shape[1:], np.result_type(a, b))
        a2, o2 = a.reshape(-1, a.shape[-1]), out.reshape(-1, b.shape[1])
        if np.may_share_memory(a2, a) and np.may_share_memory(o2, out):    # views, not copies
            matmul(a2, b, o2)
            return out
    if out is not None and small_product(out.size * a.shape[-1]):
        return np.matmul(a, b, out=out)     # one part whichever way it went (a control-flow body's products)
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                       np.result_type(a, b))
    if a.ndim == 2 and b.ndim == 2 and _native_gemm(a, b, out, None, None, 1):
        return out
    if out.ndim > 2 and _native_stack(a, b, out):
        return out
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


def _blas_matrix(x: np.ndarray, transposable: bool) -> bool:
    """A float32 matrix BLAS reads in place: unit stride along rows (or along columns when transposable)."""
    if x.dtype != np.float32 or x.ndim != 2:
        return False
    if x.strides[1] == 4 and x.strides[0] >= 4 * max(1, x.shape[1]):
        return True
    return transposable and x.strides[0] == 4 and x.strides[1] >= 4 * max(1, x.shape[0])


def _stack(x: np.ndarray, lead: int) -> np.ndarray | None:
    """x (..., r, c) as a (lead, r, c) view, or None when its leading axes do not collapse into one."""
    y = x.reshape((lead,) + x.shape[-2:])
    return y if np.shares_memory(x, y) or x.size == 0 else None


def _native_stack(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """A stacked product (attention's per-head GEMMs) on the native pool, split over rows of the whole
    stack; False when it does not apply (dtypes, broadcasting other than one B for all, strides)."""
    if not native_pool() or a.dtype != np.float32 or b.dtype != np.float32 or out.dtype != np.float32:
        return False
    if a.shape[:-2] != out.shape[:-2] or (b.ndim > 2 and b.shape[:-2] != out.shape[:-2]):
        return False
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = out.size // max(1, m * n)
    work = gemm_work(out.size * k)
    parts = native_parts(work, lead * m)
    if parts <= 1:
        return False
    a3, o3 = _stack(a, lead), _stack(out, lead)
    b3 = b[None] if b.ndim == 2 else _stack(b, lead)
    if a3 is None or o3 is None or b3 is None:
        return False
    if not all(_blas_matrix(x[0], t) for x, t in ((a3, False), (b3, True), (o3, False))):
        return False
    native.batched_gemm(a3, b3, o3, parts)
    return True


def gemm_split(m: int, k: int, n: int, epilogue: bool, row_align: int = 1) -> tuple[int, bool] | None:
    """How the native pool splits an (m, k) @ (k, n) product at this thread's thread count: (parts, by_cols),
    by rows (multiples of ``row_align``) or by columns; None when one part with no ``epilogue`` (bias or
    activation) is numpy's own call (a one-row product is a GEMV there)."""
    work = gemm_work(m * k * n) + (m * n if epilogue else 0)
    parts = native_parts(work, -(-m // row_align))
    by_cols = False
    if parts <= 1 and 1 < m < 2 * threads() * row_align:
        parts, by_cols = native_parts(work, n // 64), True
    elif parts > 1 and n > m and native_parts(work, n // 64) > 1:
        # a wide product (NCHW's weights @ columns, Winograd's transforms): BLAS packs the whole B in each part
        # of a split by rows, only its columns in a split by columns, and B is the larger operand here
        by_cols = True
    if parts <= 1 and not epilogue:
        return None
    return parts, by_cols


def _native_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, bias: np.ndarray | None, act,
                 row_align: int, prepared=None) -> bool:
    """out = act(a @ b + bias) on the native pool (False when it does not apply: not float32, strides BLAS
    cannot take, the pool off): split by rows (multiples of row_align) or, few rows, by columns. ``prepared``:
    a native.Gemm made at prepare from this b, bias and act, which runs it."""
    if not native_pool() or not (_blas_matrix(a, False) and _blas_matrix(b, True) and _blas_matrix(out, False)):
        return False
    m, k = a.shape
    split = gemm_split(m, k, b.shape[1], act is not None or bias is not None, row_align)
    if split is None:
        return False            # numpy's own call (a one-row product is a GEMV there)
    parts, by_cols = split
    if prepared is not None:
        prepared.run(a, out, parts, row_align, by_cols)
    else:
        native.gemm(a, b, out, bias, act if act is not None else native.make_act(None), parts, row_align, by_cols)
    return True


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, bias: np.ndarray | None = None, act=None,
         row_align: int = 1, prepared=None) -> bool:
    """out = act(a @ b + bias) (``act`` a native activation record or None) with the bias and activation
    applied by each part to its own rows while they are in cache; False when the native pool cannot take
    it (the caller then runs its numpy path). ``prepared``: a native.Gemm of this b, bias and act."""
    return _native_gemm(a, b, out, bias, act, row_align, prepared)
